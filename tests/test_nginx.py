"""The deployed shape: Debian's nginx with the shipped deploy/nginx.conf (its addresses and paths moved to loopback
and the test's folder, nothing else changed) in front of two ``quoteclip serve`` processes and a worker.

- The config passes ``nginx -t``.
- Through it: both API processes answer; the forwarded client address is the one the rate limit counts
  (``QUOTECLIP_TRUSTED_PROXIES``); a stored clip's signed link is cached by nginx, and 100 viewers asking for it at
  once are answered from nginx's cache; a client that drips its request's head is closed at nginx's deadline, and
  one kept alive after its answer at its keep-alive deadline.
- A player's range probe (``Range``, ``If-Range``, ``X-Playback-Session-Id``) reaches the API for a link that is not
  cached, and such an answer is never cached.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from quoteclip import links
from testkit import nginx as testkit_nginx
from testkit.faces import serving
from testkit.services import free_port

ROOT = Path(__file__).resolve().parent.parent
SITE, SECRET = "site", "site-secret-0123456789"


def nginx_binary() -> str:
    found = testkit_nginx.nginx_binary()
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("nginx is not installed (apt-get install nginx): .ci/run installs it")
        pytest.skip("nginx is not installed (apt-get install nginx); the nginx tests run in CI")
    return found


@contextlib.contextmanager
def nginx(folder: Path, upstreams: list[int]) -> Iterator[str]:
    with testkit_nginx.nginx(nginx_binary(), folder, upstreams) as (url, _):
        yield url


def get(
    url: str, headers: dict[str, str] | None = None, source: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    """GET ``url`` (from the loopback address ``source``); its status, headers and body."""
    parts = url.split("/", 3)
    host, port = parts[2].split(":")
    with socket.create_connection((host, int(port)), timeout=30, source_address=(source, 0) if source else None) as s:
        head = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        s.sendall(f"GET /{parts[3]} HTTP/1.1\r\nHost: clips.example\r\n{head}Connection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(1 << 20):
            data += chunk
    top, _, body = data.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    answer = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if answer.get("transfer-encoding") == "chunked":
        body = _unchunked(body)
    return int(lines[0].split()[1]), answer, body


def _unchunked(data: bytes) -> bytes:
    out = b""
    while data:
        size, _, rest = data.partition(b"\r\n")
        n = int(size.split(b";")[0], 16)
        if n == 0:
            break
        out, data = out + rest[:n], rest[n + 2 :]
    return out


def post(url: str, body: dict[str, Any], source: str) -> int:
    parts = url.split("/", 3)
    host, port = parts[2].split(":")
    raw = json.dumps(body).encode()
    with socket.create_connection((host, int(port)), timeout=30, source_address=(source, 0)) as s:
        s.sendall(
            f"POST /{parts[3]} HTTP/1.1\r\nHost: clips.example\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(raw)}\r\nConnection: close\r\n\r\n".encode()
            + raw
        )
        first = s.recv(4096)
    return int(first.split()[1])


def test_the_shipped_config_passes_nginx_t(tmp_path: Path) -> None:
    binary = nginx_binary()
    config = testkit_nginx.rendered(tmp_path, free_port(), [free_port(), free_port()])
    checked = subprocess.run([binary, "-t", "-c", str(config), "-p", str(tmp_path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def _link_requests(base: str) -> float:
    """The API's count of link requests answered from its store (its /metrics)."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("quoteclip_link_requests_total{") and 'outcome="stored"' in line
    )


@pytest.mark.slow
def test_two_apis_behind_the_shipped_nginx(workers, queue_env, media, http_source, tmp_path: Path) -> None:
    (http_source.root / "ep.mp4").symlink_to(media(size="320x180", duration=6, gop=30))
    env = {
        **queue_env,
        "QUOTECLIP_SITE_KEYS": f"{SITE}:{SECRET}",
        "QUOTECLIP_TRUSTED_PROXIES": "127.0.0.1/32",
        "QUOTECLIP_CROWD_GC": "false",  # (as docs/deploy.md sets it behind a proxy)
        "QUOTECLIP_ACCESS_LOG": "false",
        "QUOTECLIP_RATE_LIMIT": "1",
        "QUOTECLIP_STREAM": "false",
        "QUOTECLIP_LINK_HOLD": "30",
    }
    workers.env = env
    worker = workers.start(burst=False)
    try:
        with (
            serving(workers.full_env()) as one,
            serving(workers.full_env()) as two,
            nginx(tmp_path / "nginx", [one.port, two.port]) as front,
        ):
            assert {get(f"{front}/healthz")[0] for _ in range(4)} == {200}
            # the forwarded address is the client's: each address its own allowance of 1 clip a minute
            clip = {"source": http_source.url("ep.mp4"), "end": 2}
            statuses = [
                post(f"{front}/clips", {**clip, "start": 1 + n / 10}, source)
                for n, source in enumerate(("127.0.0.2", "127.0.0.2", "127.0.0.3"))
            ]
            assert statuses == [202, 429, 202], statuses
            # a stored clip's link: rendered on its first request (held), then cached by nginx
            path = links.path_of(links.sign({"source": http_source.url("ep.mp4"), "start": 1, "end": 3}, SITE, SECRET))
            status, headers, first = get(f"{front}{path}")
            assert status == 200 and len(first) > 10_000, (status, headers, first[:200])
            status, headers, again = get(f"{front}{path}")
            assert status == 200 and again == first and headers.get("x-cache-status") == "HIT", headers
            asked = _link_requests(one.base) + _link_requests(two.base)
            with ThreadPoolExecutor(50) as crowd:
                answers = list(crowd.map(lambda _: get(f"{front}{path}"), range(100)))
            assert all(s == 200 and b == first for s, _, b in answers)
            reached = _link_requests(one.base) + _link_requests(two.base) - asked
            print(f"\n100 viewers of a stored link through nginx: {reached:g} reached the API")
            assert reached <= 2, reached
            # a client dripping its head is closed at nginx's client_header_timeout (10 s)
            with socket.create_connection(("127.0.0.1", int(front.rsplit(":", 1)[1]))) as slow:
                slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                began = time.monotonic()
                slow.settimeout(20)
                with contextlib.suppress(ConnectionError):
                    while slow.recv(4096):
                        pass
                closed = time.monotonic() - began
            assert 9 <= closed <= 13, closed
            # a connection kept alive after its answer is closed at nginx's keepalive_timeout (5 s, the API's
            # QUOTECLIP_KEEP_ALIVE): so is a viewer that stopped reading once nginx had handed over its whole answer
            with socket.create_connection(("127.0.0.1", int(front.rsplit(":", 1)[1]))) as kept:
                kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                kept.settimeout(30)
                answer = kept.recv(65536)
                began = time.monotonic()
                with contextlib.suppress(ConnectionError):
                    while kept.recv(4096):
                        pass
                closed = time.monotonic() - began
            assert answer.startswith(b"HTTP/1.1 200") and 4 <= closed <= 7, (answer[:100], closed)
        # nginx's access log names the link's site, never its token (the API's log may be off behind it)
        logged = (tmp_path / "nginx" / "access.log").read_text()
        token = path.split("/")[3]
        assert f"/l/{SITE}/[link]" in logged and "GET /healthz" in logged, logged[-2000:]
        assert token not in logged and token.split(".")[0] not in logged, logged[-2000:]
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        if worker.stdout:
            worker.stdout.close()


class Echo:
    """An upstream that records each request's headers and answers 200 with a small body."""

    def __init__(self) -> None:
        seen = self.seen = []

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                seen.append({k.lower(): v for k, v in self.headers.items()})
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.send_header("Cache-Control", "public, max-age=600")
                self.end_headers()
                self.wfile.write(b"ok")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_players_range_probe_reaches_the_api_and_is_never_cached(tmp_path: Path) -> None:
    """Apple's player asks a ``<video src>`` for ``Range: bytes=0-1`` with its ``X-Playback-Session-Id``: on the
    cached ``/l/`` location nginx would drop ``Range`` and ``If-Range`` and answer the probe from its cache; the
    shipped config passes them on, and neither takes such an answer from its cache nor keeps it."""
    echo = Echo()
    try:
        with nginx(tmp_path / "nginx", [echo.port]) as front:
            probe = {"Range": "bytes=0-1", "If-Range": '"abc"', "X-Playback-Session-Id": "5D1B-42"}
            for _ in range(2):
                status, headers, _ = get(f"{front}/l/site/payload.sig.mp4", probe)
                assert status == 200 and headers.get("x-cache-status") == "BYPASS", headers
            plain = [get(f"{front}/l/site/payload.sig.mp4")[1].get("x-cache-status") for _ in range(2)]
            assert plain == ["MISS", "HIT"], plain
    finally:
        echo.close()
    probes = [h for h in echo.seen if "range" in h]
    assert len(probes) == 2, echo.seen
    for seen in probes:
        assert (
            seen["range"] == "bytes=0-1" and seen["if-range"] == '"abc"' and seen["x-playback-session-id"] == "5D1B-42"
        )
        assert seen["x-forwarded-for"] == "127.0.0.1"
