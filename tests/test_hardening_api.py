"""What a slow webhook receiver or a missing Redis may cost the API and its webhook workers: 503 without Redis,
and webhook deliveries that end at their deadline side by side."""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api import create_app
from quoteclip.settings import Settings
from testkit.services import free_port, start_private_redis, wait_for

KEY = "k-hardening-secret"
MB = 1024**2


@pytest.fixture
def source_url(media, http_source) -> str:
    (http_source.root / "ep.mp4").symlink_to(media(size="320x180", duration=6, gop=60))
    return http_source.url("ep.mp4")


# ---- a live ``quoteclip serve`` ------------------------------------------------------------------------------------


@contextlib.contextmanager
def serving(env: dict[str, str], log: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``quoteclip serve`` on a free loopback port, its log lines in ``log``; stopped on leaving."""
    port = free_port()
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("QUOTECLIP_")}, **env}
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "quoteclip", "serve", "--port", str(port)],
            env=full,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: _answers(port), 30, "quoteclip serve")
        yield server, port
    finally:
        server.terminate()
        server.wait(timeout=30)


def _answers(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _readable(conn: socket.socket, wait: float = 0.0) -> bool:
    poller = select.poll()  # (any descriptor number will do, unlike select())
    poller.register(conn, select.POLLIN)
    return bool(poller.poll(int(wait * 1000)))


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


class Hold:
    """Keeps uploads' connections open together: each says it has sent what it will, then waits for the word."""

    def __init__(self, count: int) -> None:
        self.sent = threading.Barrier(count + 1)
        self.go = threading.Event()


def _upload(port: int, path: str, headers: str, most: int, wait_first: float, hold: Hold | None = None):
    """A chunked upload that stops when the server answers: the headers alone first (and ``wait_first`` seconds
    for an answer to them), then 64 KiB chunks up to ``most`` bytes, looking for an answer after each MB. The
    body is never ended (no last chunk): a server reading it holds what came. (body bytes sent, status)."""
    chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
    sent, answer = 0, b""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\n{headers}Transfer-Encoding: chunked\r\n\r\n".encode())
        try:
            if not _readable(conn, wait_first):
                while sent < most:
                    conn.sendall(chunk)
                    sent += 0x10000
                    if sent % MB == 0 and _readable(conn):
                        break
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed: its answer is read below
        if hold is not None:  # every upload's connection open at once while the server's memory is read
            hold.sent.wait(timeout=180)
            hold.go.wait(timeout=180)
        with contextlib.suppress(ConnectionResetError, TimeoutError):
            if _readable(conn, 10):
                answer = conn.recv(4096)
    return sent, _status(answer)


# ---- 4. Redis unreachable --------------------------------------------------------------------------------------------


def test_every_route_that_needs_redis_answers_503_while_it_is_down(queue_env, source_url, tmp_path) -> None:
    """With the API's Redis stopped, every route that needs it answers 503 with Retry-After and one line naming
    the cause; the key is still checked (failed authentications are not counted meanwhile)."""
    (tmp_path / "redis").mkdir()
    started = start_private_redis(tmp_path / "redis")
    if started is None:
        pytest.skip("no redis-server on PATH")  # pragma: no cover
    redis_server, url = started
    try:
        env = {**queue_env, "QUOTECLIP_REDIS_URL": url, "QUOTECLIP_API_KEYS": KEY}
        client = TestClient(create_app(Settings.from_env(env)), raise_server_exceptions=False)
        key = {"X-API-Key": KEY}
        clip = client.post("/clips", json={"source": source_url, "start": 1, "end": 2}, headers=key)
        batch = client.post("/batches", json={"source": source_url, "quotes": [{"start": 1, "end": 2}]}, headers=key)
        assert clip.status_code == 202 and batch.status_code == 200
        clip_id, batch_id = clip.json()["id"], batch.json()["id"]
    finally:
        redis_server.terminate()
        redis_server.wait(timeout=30)
    calls = [
        ("POST", "/clips", {"json": {"source": source_url, "start": 2, "end": 3}}),
        ("GET", f"/clips/{clip_id}", {}),
        ("GET", f"/clips/{clip_id}?wait=2", {}),
        ("GET", f"/clips/{clip_id}/download", {}),
        ("POST", "/batches", {"json": {"source": source_url, "quotes": [{"start": 2, "end": 3}]}}),
        ("GET", f"/batches/{batch_id}", {}),
        ("GET", f"/batches/{batch_id}/archive", {}),
        ("POST", "/previews", {"json": {"source": source_url, "start": 1, "end": 2}}),
        ("POST", "/assets", {"content": b"\x89PNG\r\n\x1a\n"}),
        ("GET", "/metrics", {}),
    ]
    for method, path, extra in calls:
        began = time.monotonic()
        answer = client.request(method, path, headers=key, **extra)  # type: ignore[arg-type]
        assert answer.status_code == 503, (path, answer.status_code, answer.text)
        assert answer.headers["Retry-After"] == "5", path
        detail = answer.json()["detail"]
        assert detail.startswith("the queue is unavailable (Redis: ConnectionError)") and "\n" not in detail, detail
        assert time.monotonic() - began < 10, path
    assert client.get(f"/clips/{clip_id}", headers={"X-API-Key": "wrong"}).status_code == 401
    assert client.get("/healthz").status_code == 503
    assert client.get("/", headers=key).status_code == 200  # a page needs no Redis


# ---- 5. webhooks: a deadline, and deliveries side by side ------------------------------------------------------------


class DrippingReceiver:
    """A webhook receiver that reads the request, then sends its status line and headers one byte every 0.5 s,
    never finishing them (bounded: 60 s a connection). Records each connection's start and end (the moment the
    deliverer closed it)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/hook"
        self.spans: list[tuple[float, float]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        began = time.monotonic()
        answer = b"HTTP/1.1 200 OK\r\nX-Drip: " + b"a" * 1000
        try:
            request = b""
            conn.settimeout(5)
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            for byte in answer:
                conn.sendall(bytes([byte]))
                if _readable(conn, 0.5) and not conn.recv(1):
                    break  # the deliverer closed the connection
                if time.monotonic() - began > 60:
                    break
        except OSError:
            pass
        finally:
            conn.close()
            with self.lock:
                self.spans.append((began, time.monotonic()))

    def close(self) -> None:
        self.listener.close()


class PromptReceiver:
    """Answers 204 at once; records when each delivery arrived."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[float, dict[str, object]]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.arrivals.append((time.monotonic(), json.loads(body)))
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_receiver_dripping_its_headers_is_cut_off_at_the_deadline(queue_env, monkeypatch) -> None:
    """A receiver that never stops sending its headers (a byte every 0.5 s: no read ever times out) has its
    delivery ended QUOTECLIP_WEBHOOK_TIMEOUT seconds after it began."""
    from jobs.webhooks import deliver
    from quoteclip.errors import DeliveryFailed

    monkeypatch.setenv("QUOTECLIP_ALLOW_ADDRESSES", "127.0.0.1/32")
    monkeypatch.setenv("QUOTECLIP_WEBHOOK_TIMEOUT", "2")
    receiver = DrippingReceiver()
    began = time.monotonic()
    try:
        with pytest.raises(DeliveryFailed, match=r"could not be reached \(no answer within 2 s\)"):
            deliver(receiver.url, {"id": "clip-x", "status": "finished"})
    finally:
        receiver.close()
    took = time.monotonic() - began
    print(f"\nwebhook receiver dripping its headers, deadline 2 s: delivery ended after {took:.1f} s")
    assert 1.9 < took < 3


@pytest.mark.slow
def test_slow_receivers_do_not_hold_a_prompt_ones_delivery(workers, redis_url) -> None:
    """A running ``quoteclip worker --webhooks``: twelve deliveries to receivers that drip their headers, then one
    to a prompt receiver. The prompt one arrives within moments (deliveries run side by side), and each dripping
    one ends at the 10 s deadline."""
    import redis
    from rq import Worker

    from jobs.webhooks import queue_deliveries

    settings = Settings.from_env(workers.env)
    drips, prompt = [DrippingReceiver() for _ in range(12)], PromptReceiver()
    connection = redis.Redis.from_url(redis_url)
    worker = workers.start(burst=False, webhooks=True)
    try:
        wait_for(lambda: any(w.get_state() == "idle" for w in Worker.all(connection=connection)), 60, "webhook worker")
        payload = {"id": "clip-" + "3" * 32, "status": "finished", "link": None, "error": None}
        for drip in drips:
            queue_deliveries(connection, settings.queue_name, [drip.url], payload)
        queued = time.monotonic()
        queue_deliveries(connection, settings.queue_name, [prompt.url], payload)
        wait_for(lambda: bool(prompt.arrivals), 30, "the prompt receiver's delivery")
        arrived = prompt.arrivals[0][0] - queued
        wait_for(lambda: all(d.spans for d in drips), 30, "every dripping delivery's end")
    finally:
        worker.terminate()
        out, _ = worker.communicate(timeout=60)
        for drip in drips:
            drip.close()
        prompt.close()
        connection.close()
    held = [end - start for drip in drips for start, end in drip.spans[:1]]
    print(
        f"\n12 receivers dripping their headers, then 1 prompt one: the prompt one's delivery arrived {arrived:.2f} s "
        f"after it was queued; the dripping ones were held {min(held):.1f}–{max(held):.1f} s (deadline 10 s)"
    )  # RELIABILITY.md quotes it
    assert arrived < 3, out[-3000:]
    assert all(9 < h < 11.5 for h in held), held
    assert worker.returncode == 0, out[-3000:]
