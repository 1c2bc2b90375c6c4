"""The HTTP API against real Redis, real rq workers, real storage, and a loopback webhook receiver."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from api import create_app
from jobs.webhooks import SIGNATURE_HEADER, verify
from quoteclip.settings import Settings

SECRET = "test-webhook-secret"


@pytest.fixture
def api_env(queue_env: dict[str, str]) -> dict[str, str]:
    queue_env["QUOTECLIP_WEBHOOK_SECRET"] = SECRET
    return queue_env


@pytest.fixture
def client(api_env: dict[str, str]) -> TestClient:
    return TestClient(create_app(Settings.from_env(api_env)), follow_redirects=False)


@pytest.fixture
def source_url(media, http_source) -> str:
    (http_source.root / "ep.mp4").symlink_to(media(size="320x180", duration=6, gop=60))
    return http_source.url("ep.mp4")


def test_clip_lifecycle_and_download_redirects(client, workers, source_url, api_env) -> None:
    body = {"source": source_url, "start": 1, "end": 3, "caption": "hi", "watermark": {"text": "StarZero"}}
    first = client.post("/clips", json=body)
    assert first.status_code == 202, first.text
    job = first.json()
    assert job["status"] == "queued" and job["status_url"] == f"/clips/{job['id']}"
    again = client.post("/clips", json=body)
    assert again.status_code == 202 and again.json()["id"] == job["id"]  # joined, not a second job

    waiting = client.get(job["download_url"])
    assert waiting.status_code == 202 and waiting.headers["Retry-After"] == "2"
    assert client.get(job["status_url"]).json()["stage"] == "queued"

    workers.burst(1)
    status = client.get(job["status_url"]).json()
    assert status["status"] == "finished" and status["progress"] == 100
    redirect = client.get(job["download_url"])
    assert redirect.status_code == 302 and redirect.headers["location"] == f"/clips/{job['id']}/file"
    mp4 = client.get(redirect.headers["location"])
    assert mp4.status_code == 200 and mp4.headers["content-type"] == "video/mp4" and mp4.content[4:8] == b"ftyp"

    stored = client.post("/clips", json=body)
    assert stored.status_code == 200 and stored.json()["cached"] is True and stored.json()["link"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"start": 1, "end": 3}, "source"),
        ({"source": "x.mp4", "start": 5, "end": 3}, "end must be after start"),
        ({"source": "x.mp4", "start": "abc", "end": 3}, "start"),
        ({"source": "x.mp4", "start": 1, "end": 3, "profile": "tiktok"}, "profile"),
        ({"source": "x.mp4", "start": 1, "end": 3, "bogus": 1}, "bogus"),
        ({"source": "x.mp4", "start": 1, "end": 3, "encoder_preset": "placebo"}, "encoder_preset"),
        ({"source": "http://127.0.0.1/x.mp4", "start": 1, "end": 700}, "over the 600 s limit"),
        ({"source": "/etc/passwd", "start": 1, "end": 3}, "local paths are not allowed"),
        ({"source": "https://evil.example/x.mp4", "start": 1, "end": 3}, "source host not allowed"),
    ],
)
def test_bad_clip_requests_are_422_naming_the_field(client, body, field, api_env) -> None:
    api_env["QUOTECLIP_ALLOW_LOCAL_SOURCES"] = ""
    app = TestClient(create_app(Settings.from_env(api_env)))
    response = app.post("/clips", json=body)
    assert response.status_code == 422, response.text
    assert field in response.json()["detail"]


def test_api_reads_specs_as_the_cli_does(api_env, source_url) -> None:
    """The operator's length cap, a brand name as the watermark, and the CLI's wording of errors."""
    api_env["QUOTECLIP_MAX_CLIP_SECONDS"] = "900"
    app = TestClient(create_app(Settings.from_env(api_env)))
    long = app.post("/clips", json={"source": source_url, "start": 1, "end": 701})
    assert long.status_code == 202, long.text  # over the default 600 s, under the configured 900 s
    too_long = app.post("/clips", json={"source": source_url, "start": 1, "end": 902})
    assert too_long.status_code == 422 and "over the 900 s limit" in too_long.json()["detail"]
    named = app.post("/clips", json={"source": source_url, "start": 1, "end": 2, "watermark": "StarZero"})
    assert named.status_code == 202, named.text
    same = app.post("/clips", json={"source": source_url, "start": 1, "end": 2, "watermark": {"text": "StarZero"}})
    assert same.json()["id"] == named.json()["id"]
    backwards = app.post("/clips", json={"source": source_url, "start": 5, "end": 3})
    assert backwards.json()["detail"] == "bad input: end must be after start, got start=5.0 end=3.0"
    assert [e["field"] for e in backwards.json()["errors"]] == ["end"]  # a check across fields names its field
    profile = app.post("/clips", json={"source": source_url, "start": 1, "end": 2, "profile": "tiktok"})
    assert profile.json()["detail"].startswith("bad input: profile: Input should be 'landscape'")
    assert profile.json()["detail"].endswith("got 'tiktok'")


def test_operator_encoder_preset_for_requests_that_name_none(api_env, source_url) -> None:
    quote = {"source": source_url, "start": 1, "end": 2}
    product = TestClient(create_app(Settings.from_env(api_env))).post("/clips", json=quote).json()["id"]
    api_env["QUOTECLIP_ENCODER_PRESET"] = "superfast"
    app = TestClient(create_app(Settings.from_env(api_env)))
    unnamed = app.post("/clips", json=quote).json()["id"]
    assert unnamed == app.post("/clips", json={**quote, "encoder_preset": "superfast"}).json()["id"]
    assert unnamed != product
    assert app.post("/clips", json={**quote, "encoder_preset": "veryfast"}).json()["id"] == product


def test_unknown_and_malformed_ids(client) -> None:
    assert client.get("/clips/clip-" + "0" * 32).status_code == 404
    assert client.get("/clips/../../etc/passwd").status_code == 404
    assert client.get("/clips/nope/download").status_code == 404


def test_failed_clip_download_is_410(client, workers, http_source) -> None:
    job = client.post("/clips", json={"source": http_source.url("gone.mp4"), "start": 1, "end": 2}).json()
    workers.burst(1)
    gone = client.get(job["download_url"])
    assert gone.status_code == 410 and "HTTP 404" in gone.json()["detail"]


def test_batch_gives_one_id_per_clip(client, workers, source_url) -> None:
    body = {
        "source": source_url,
        "watermark": {"text": "Brand"},
        "quotes": [
            {"start": 0, "end": 2, "caption": "one"},
            {"start": 2, "end": 4, "caption": "two"},
            {"start": 0, "end": 2, "caption": "one"},
        ],
    }
    response = client.post("/batches", json=body)
    assert response.status_code == 200, response.text
    ids = [c["id"] for c in response.json()["clips"]]
    assert len(ids) == 3 and ids[0] == ids[2] and ids[0] != ids[1]
    workers.burst(1)
    assert all(client.get(f"/clips/{i}").json()["status"] == "finished" for i in ids)
    bad = client.post("/batches", json={**body, "quotes": [{"start": 3, "end": 1}]})
    assert bad.status_code == 422  # no good quote at all
    assert bad.json()["detail"] == (
        "bad input: quotes: no quote of the batch can be rendered "
        "(quote 1: bad input: end must be after start, got start=3.0 end=1.0)"
    )
    assert client.post("/batches", json={**body, "quotes": []}).status_code == 422


def test_a_batch_with_bad_quotes_queues_the_good_ones_and_names_the_others(client, source_url) -> None:
    """As the CLI does with a bad line: the good quotes are queued, the answer names each rejected one by its
    number counted from 1, with the reason."""
    quotes = [
        {"start": 0, "end": 2, "caption": "one"},
        {"start": 5, "end": 3, "caption": "backwards"},
        "not a quote",
        {"start": 2, "end": 4, "caption": "two", "colour": "red"},
        {"start": 2, "end": 4, "caption": "three"},
    ]
    answer = client.post("/batches", json={"source": source_url, "quotes": quotes})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [(c["quote"], c["profile"]) for c in body["clips"]] == [(1, "landscape"), (5, "landscape")]
    assert [r["quote"] for r in body["rejected"]] == [2, 3, 4]
    assert "end must be after start" in body["rejected"][0]["error"]
    assert "a quote is an object" in body["rejected"][1]["error"] and "colour" in body["rejected"][2]["error"]
    status = client.get(body["status_url"]).json()
    assert [(c["quote"], c["profile"]) for c in status["clips"]] == [(1, "landscape"), (5, "landscape")]


def test_body_size_limit(client) -> None:
    huge = {"source": "x.mp4", "start": 1, "end": 2, "caption": "x" * 300_000}
    assert client.post("/clips", json=huge).status_code == 413


def test_api_keys_and_rate_limit(api_env, source_url) -> None:
    api_env.update({"QUOTECLIP_API_KEYS": "k-one-shared,k-two-shared", "QUOTECLIP_RATE_LIMIT": "3"})
    app = TestClient(create_app(Settings.from_env(api_env)))
    body = {"source": source_url, "start": 1, "end": 2}
    assert app.post("/clips", json=body).status_code == 401
    assert app.post("/clips", json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
    codes = [app.post("/clips", json=body, headers={"X-API-Key": "k-two-shared"}).status_code for _ in range(4)]
    assert codes == [202, 202, 202, 429]
    # Keys are counted by the whole key: another key ending in the same characters has its own allowance.
    assert app.post("/clips", json=body, headers={"Authorization": "Bearer k-one-shared"}).status_code == 202


def test_every_route_needs_a_key_but_health(api_env, source_url, workers) -> None:
    api_env["QUOTECLIP_API_KEYS"] = "k-secret"
    app = TestClient(create_app(Settings.from_env(api_env)), follow_redirects=False)
    key = {"X-API-Key": "k-secret"}
    job = app.post(
        "/clips", json={"source": source_url, "start": 1, "end": 2, "caption": "a quote"}, headers=key
    ).json()
    workers.burst(1)
    clip = job["id"]
    for shell in ("/", "/edit", "/batch", "/pages.js"):  # page shells hold no data: the user signs in on them
        assert app.get(shell).status_code == 200, shell
    for path, answer in (
        ("/docs", 200),
        ("/openapi.json", 200),
        ("/metrics", 200),
        (f"/clips/{clip}", 200),
        (f"/clips/{clip}/download", 302),
        (f"/clips/{clip}/file", 200),
        (f"/clips/{clip}/captions.vtt", 200),
        ("/clips/clip-" + "0" * 32, 404),
    ):
        assert app.get(path).status_code == 401, path
        assert app.get(path, headers=key).status_code == answer, path  # with the key: the route's own answer
    assert app.get("/healthz").status_code == 200  # the one public route
    # Links a browser opens carry a signed, expiring token: they work without the key, and only for that clip.
    download = job["download_url"]
    assert download.startswith(f"/clips/{clip}/download?token=")
    found = app.get(download)
    assert found.status_code == 302 and "?token=" in found.headers["location"]
    assert app.get(found.headers["location"]).status_code == 200
    forged = download.replace(clip, "clip-" + "1" * 32)
    assert app.get(forged).status_code == 401
    expires, _, mac = download.split("token=")[1].partition(".")
    assert app.get(f"/clips/{clip}/download?token={int(expires) - 10**6}.{mac}").status_code == 401
    assert app.get(f"/clips/{clip}/file?token={expires}.{mac}").status_code == 401  # a token is for one path
    status = app.get(f"/clips/{clip}", headers=key).json()
    assert status["link"].startswith(f"/clips/{clip}/file?token=")
    # The edit page's previews: the call needs the key, the links it answers carry tokens (a <track src> too).
    preview = {"source": source_url, "start": 1, "end": 2, "caption": "signed captions"}
    assert app.post("/previews", json=preview).status_code == 401
    made = app.post("/previews", json=preview, headers=key).json()
    assert "?token=" in made["link"] and "?token=" in made["vtt"]
    assert app.get(made["link"]).status_code == 200 and app.get(made["vtt"]).text.startswith("WEBVTT")


@pytest.mark.slow
def test_streamed_oversize_body_is_refused_without_reading_it_whole(api_env, tmp_path) -> None:
    """Against a running ``quoteclip serve``: a chunked body (no Content-Length) of up to 200 MB gets 413 once
    256 KiB have passed; the server stops reading and its memory stays flat (measured)."""
    import psutil

    from testkit.faces import serving, user_env

    api_env["QUOTECLIP_API_KEYS"] = "k-secret"
    with serving(user_env(api_env)) as (server, port, _):
        before = psutil.Process(server.pid).memory_info().rss
        sent, answer = 0, b""
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(
                b"POST /clips HTTP/1.1\r\nHost: x\r\nX-API-Key: k-secret\r\n"
                b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
            try:
                while sent < 200 * 1024**2:  # bounded: 200 MB at most
                    conn.sendall(chunk)
                    sent += 0x10000
                    if sent % (4 * 1024**2) == 0 and select_readable(conn):
                        break
            except (BrokenPipeError, ConnectionResetError):
                pass
            try:
                answer = conn.recv(4096)
            except (ConnectionResetError, TimeoutError):
                pass
        after = psutil.Process(server.pid).memory_info().rss
    print(
        f"\nstreamed body: {sent / 1024**2:.0f} MB sent before the server stopped reading; "
        f"API memory {before / 1024**2:.0f} MB before, {after / 1024**2:.0f} MB after"
    )  # RELIABILITY.md quotes it
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert after - before < 30 * 1024**2


def select_readable(conn: socket.socket) -> bool:
    """Whether the server has answered yet (a poll: unlike select(), any descriptor number will do, however many
    sockets the session's earlier tests left for the garbage collector)."""
    import select

    poller = select.poll()
    poller.register(conn, select.POLLIN)
    return bool(poller.poll(0))


def test_cors_for_the_sites_origin(api_env) -> None:
    api_env["QUOTECLIP_CORS_ORIGINS"] = "https://quotes.example"
    app = TestClient(create_app(Settings.from_env(api_env)))
    pre = app.options("/clips", headers={"Origin": "https://quotes.example", "Access-Control-Request-Method": "POST"})
    assert pre.headers["access-control-allow-origin"] == "https://quotes.example"
    other = app.options("/clips", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in other.headers


def test_openapi_schema(client) -> None:
    schema = client.get("/openapi.json").json()
    assert {"/clips", "/batches", "/clips/{clip_id}", "/clips/{clip_id}/download", "/healthz"} <= set(schema["paths"])
    fields = schema["components"]["schemas"]["ClipRequest"]["properties"]
    assert {"source", "start", "end", "caption", "watermark", "profile", "callback_url"} <= set(fields)


def test_health_and_metrics(client, workers, source_url) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "redis": "ok", "storage": "ok"}
    client.post("/clips", json={"source": source_url, "start": 1, "end": 2})
    workers.burst(1)
    client.post("/clips", json={"source": source_url, "start": 1, "end": 2})  # a cache hit
    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    jobs = {s.labels["status"]: s.value for s in families["quoteclip_jobs"].samples}
    assert jobs["finished"] == 1 and jobs["queued"] == 0
    renders = [s for s in families["quoteclip_render_seconds"].samples if s.name.endswith("_count")]
    assert renders[0].value == 1
    assert families["quoteclip_cache_hits"].samples[0].value == 1
    batch = {"source": source_url, "quotes": [{"start": 0, "end": 1}, {"start": 2, "end": 3}]}
    assert client.post("/batches", json=batch).status_code == 200  # two clips waiting on the bulk queue
    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    depth = {s.labels["queue"]: s.value for s in families["quoteclip_queue_depth"].samples}
    assert depth == {"quoteclip": 0, "quoteclip-bulk": 2}
    assert {s.labels["status"]: s.value for s in families["quoteclip_jobs"].samples}["queued"] == 2


def test_unhealthy_when_redis_is_down(api_env) -> None:
    api_env["QUOTECLIP_REDIS_URL"] = "redis://127.0.0.1:1/0"
    down = TestClient(create_app(Settings.from_env(api_env))).get("/healthz")
    assert down.status_code == 503 and down.json()["redis"].startswith("unreachable")


class Receiver:
    """A loopback webhook receiver that records bodies and checks signatures."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, object], bool]] = []
        self.fail_first = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if receiver.fail_first:
                    receiver.fail_first -= 1
                    self.send_response(500)
                else:
                    legacy = verify(body, self.headers.get(SIGNATURE_HEADER, ""), SECRET)
                    try:  # the Standard Webhooks reference library, as a receiver would use it
                        Webhook(SECRET.encode()).verify(body, dict(self.headers))
                        standard = True
                    except WebhookVerificationError:
                        standard = False
                    receiver.calls.append((json.loads(body), legacy and standard))
                    self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"


@pytest.fixture
def hook() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


def test_webhooks_signed_on_finish_and_failure(client, workers, source_url, http_source, hook) -> None:
    ok = client.post("/clips", json={"source": source_url, "start": 1, "end": 2, "callback_url": hook.url}).json()
    bad = client.post(
        "/clips", json={"source": http_source.url("gone.mp4"), "start": 1, "end": 2, "callback_url": hook.url}
    ).json()
    workers.burst(1)
    assert hook.calls == []  # render workers never deliver webhooks: they wait on their own queue
    workers.burst(1, webhooks=True)
    calls = {c["id"]: (c, signed) for c, signed in hook.calls}
    assert calls[ok["id"]][1] and calls[ok["id"]][0]["status"] == "finished"
    assert calls[ok["id"]][0]["download_url"] == f"/clips/{ok['id']}/download"
    assert calls[ok["id"]][0]["link"] is None  # a local-folder store's file:// link never leaves the server
    assert calls[bad["id"]][1] and calls[bad["id"]][0]["status"] == "failed"
    assert "HTTP 404" in str(calls[bad["id"]][0]["error"])
    assert not verify(b"{}", "t=1,v1=00", SECRET)
    assert not verify(b"{}", f"t={int(time.time())},v1=\u00e9\u00e9", SECRET)  # non-ASCII: rejected, no exception


def test_webhook_to_private_address_is_refused(client, source_url) -> None:
    response = client.post(
        "/clips", json={"source": source_url, "start": 1, "end": 2, "callback_url": "http://169.254.169.254/x"}
    )
    assert response.status_code == 422
    assert response.json()["detail"].startswith("bad input: callback_url: source address not allowed")


def test_callbacks_per_clip_are_capped(client, source_url) -> None:
    body = {"source": source_url, "start": 1, "end": 2}
    codes = [
        client.post("/clips", json={**body, "callback_url": f"http://127.0.0.1:9/{n}"}).status_code for n in range(7)
    ]
    assert codes[:5] == [202] * 5 and codes[5:] == [422, 422]
    again = client.post("/clips", json={**body, "callback_url": "http://127.0.0.1:9/0"})
    assert again.status_code == 202  # one already listed costs nothing


def test_demo_page_served(client) -> None:
    page = client.get("/")
    assert page.status_code == 200 and "Download clip" in page.text and 'src="pages.js"' in page.text


def test_serve_command_help() -> None:
    from conftest import run_cli

    done = run_cli("serve", "--help")
    assert done.returncode == 0 and "--port" in done.stdout
    assert Path(__file__).parent.parent.joinpath("api", "page.html").is_file()


@pytest.mark.slow
def test_webhook_delivery_is_retried_until_the_receiver_answers(client, workers, source_url, hook) -> None:
    hook.fail_first = 1  # the receiver answers 500 once
    job = client.post("/clips", json={"source": source_url, "start": 1, "end": 2, "callback_url": hook.url}).json()
    workers.burst(1)
    worker = workers.start(burst=False, webhooks=True)
    try:
        deadline = time.monotonic() + 60
        while not hook.calls and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        worker.terminate()
        worker.communicate(timeout=30)
    assert hook.fail_first == 0 and len(hook.calls) == 1  # one failed attempt, then delivered (after 2 s)
    body, signed = hook.calls[0]
    assert signed and body["id"] == job["id"] and body["status"] == "finished"


class HostileReceiver:
    """A webhook receiver that hangs without answering, or answers 200 and then streams without end."""

    def __init__(self, mode: str) -> None:
        import socket

        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/hook"
        self.sent = 0
        self.stop = threading.Event()
        threading.Thread(target=self._serve, args=(mode,), daemon=True).start()

    def _serve(self, mode: str) -> None:
        conn, _ = self.listener.accept()
        conn.settimeout(1)
        try:
            conn.recv(65536)
            if mode == "huge":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 838860800\r\n\r\n")
                chunk = b"x" * 65536
                while not self.stop.is_set() and self.sent < 800 * 1024**2:  # bounded: 800 MB at most
                    conn.sendall(chunk)
                    self.sent += len(chunk)
            else:
                self.stop.wait(30)  # hang (bounded: 30 s)
        except OSError:
            pass
        finally:
            conn.close()
            self.listener.close()


@pytest.mark.parametrize("mode", ["hang", "huge"])
def test_hostile_webhook_receivers_cost_a_delivery_worker_little(mode: str, api_env) -> None:
    """A receiver that never answers is given up at the delivery's deadline (10 s); one that answers 200 and then
    sends 800 MB has its status read and its body never (measured: bytes it managed to send)."""
    from jobs.webhooks import deliver
    from quoteclip.errors import DeliveryFailed

    receiver = HostileReceiver(mode)
    os.environ["QUOTECLIP_ALLOW_ADDRESSES"] = "127.0.0.1/32"
    began = time.monotonic()
    try:
        if mode == "hang":
            with pytest.raises(DeliveryFailed, match="could not be reached"):
                deliver(receiver.url, {"id": "clip-x", "status": "finished"})
        else:
            assert deliver(receiver.url, {"id": "clip-x", "status": "finished"}) == 200
    finally:
        receiver.stop.set()
        os.environ.pop("QUOTECLIP_ALLOW_ADDRESSES", None)
    took = time.monotonic() - began
    print(
        f"\nwebhook receiver that {'hangs' if mode == 'hang' else 'streams 800 MB'}: delivery ended after "
        f"{took:.1f} s, {receiver.sent / 1024**2:.1f} MB sent by the receiver"
    )
    assert took < Settings().webhook_timeout + 3
    assert receiver.sent < 32 * 1024**2  # (socket buffers take a few MB before the connection is closed)


def test_status_long_poll_answers_at_the_change(client, workers, source_url) -> None:
    """GET /clips/{id}?wait=N holds until the stage, progress or status changes (or N s pass), so a page learns of
    each step, and of the link, as it happens."""
    job = client.post("/clips", json={"source": source_url, "start": 1, "end": 3}).json()
    quiet = time.monotonic()
    assert client.get(f"/clips/{job['id']}?wait=0.5").json()["stage"] == "queued"  # nothing happens: held 0.5 s
    assert 0.4 < time.monotonic() - quiet < 5
    worker = threading.Thread(target=lambda: workers.burst(1))
    worker.start()
    answers = []
    began = time.monotonic()
    while not answers or answers[-1]["status"] not in ("finished", "failed"):
        answers.append(client.get(f"/clips/{job['id']}?wait=25").json())
        assert time.monotonic() - began < 60
    worker.join()
    assert answers[-1]["status"] == "finished" and answers[-1]["link"]
    assert len({(a["status"], a["stage"], a["progress"]) for a in answers}) == len(answers)  # each at a change
    assert client.get(f"/clips/{job['id']}?wait=31").status_code == 422
    unknown = time.monotonic()
    assert client.get("/clips/clip-" + "0" * 32 + "?wait=25").status_code == 404
    assert time.monotonic() - unknown < 2


def test_status_long_poll_is_woken_by_the_worker(api_env, workers, source_url, http_source, monkeypatch) -> None:
    """With the app's lifespan running, a long-poll is woken by the worker's announcement of each change (Redis
    pub/sub), not by looking again: with the fallback look 60 s apart, every answer, the link last, still comes
    at its change, and the link within moments of the worker's end (the clip is stored, then announced). A
    failure is answered as soon as the worker gives up, too."""
    from api import events

    (http_source.root / "junk.mp4").write_bytes(b"not a video" * 1000)

    monkeypatch.setattr(events, "FALLBACK", 60.0)
    with TestClient(create_app(Settings.from_env(api_env))) as client:  # runs the lifespan: the subscription
        deadline = time.monotonic() + 10
        while not client.app.state.services.events.subscribed:  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, "the API never subscribed to the job events"
            time.sleep(0.02)
        job = client.post("/clips", json={"source": source_url, "start": 1, "end": 3}).json()
        junk = client.post("/clips", json={"source": http_source.url("junk.mp4"), "start": 1, "end": 3}).json()
        ended: list[float] = []
        worker = threading.Thread(target=lambda: (workers.burst(1), ended.append(time.monotonic())))
        worker.start()
        answers = []
        while not answers or answers[-1]["status"] not in ("finished", "failed"):
            answers.append(client.get(f"/clips/{job['id']}?wait=30").json())
            answers[-1]["at"] = time.monotonic()
            assert len(answers) < 50
        failed = []
        while not failed or failed[-1]["status"] not in ("finished", "failed"):
            failed.append(client.get(f"/clips/{junk['id']}?wait=30").json())
            failed[-1]["at"] = time.monotonic()
            assert len(failed) < 50
        worker.join()
    assert answers[-1]["status"] == "finished" and answers[-1]["link"], answers
    assert {"fetching", "rendering"} <= {a["stage"] for a in answers}, answers
    assert answers[-1]["at"] < ended[0] + 2, "the link came long after the worker ended: no announcement woke it"
    assert failed[-1]["status"] == "failed" and "not a readable video" in failed[-1]["error"], failed
    assert failed[-1]["at"] < ended[0] + 2, "the failure came long after the worker ended: no announcement woke it"


def test_batch_status_and_streamed_archive(client, workers, source_url, api_env) -> None:
    """POST /batches gives a batch id; GET /batches/{id} answers every clip at once; the archive is a ZIP whose
    entries are byte-identical to the stored clips, with a manifest."""
    import io
    import zipfile

    body = {
        "source": source_url,
        "watermark": "Brand",
        "quotes": [{"start": 0, "end": 1, "caption": "one"}, {"start": 2, "end": 3, "caption": "two"}],
    }
    batch = client.post("/batches", json=body).json()
    assert batch["id"].startswith("batch-") and len(batch["clips"]) == 2
    waiting = client.get(batch["status_url"]).json()
    assert waiting["counts"] == {"queued": 2}
    assert client.get(batch["archive_url"]).status_code == 409  # nothing finished yet
    workers.burst(1)
    done = client.get(batch["status_url"]).json()
    assert done["counts"] == {"finished": 2} and all(c["link"] for c in done["clips"])
    response = client.get(batch["archive_url"])
    assert response.status_code == 200 and response.headers["content-type"] == "application/zip"
    archive = zipfile.ZipFile(io.BytesIO(response.content))
    assert archive.testzip() is None
    names = archive.namelist()
    assert names[-1] == "manifest.json" and len(names) == 3
    store = Settings.from_env(api_env).storage_dir
    for clip in batch["clips"]:
        stored = (store / f"{clip['id'].removeprefix('clip-')}.mp4").read_bytes()
        assert stored in [archive.read(n) for n in names[:2]]
    manifest = json.loads(archive.read("manifest.json"))
    assert [c["id"] for c in manifest["clips"]] == [c["id"] for c in batch["clips"]] and manifest["missing"] == []
    first = manifest["clips"][0]  # what each clip is, beside its file
    assert (first["quote"], first["profile"], first["start"], first["end"]) == (1, "landscape", 0.0, 1.0)
    assert first["caption"] == "one" and first["source"] == source_url and first["file"].endswith(".mp4")
    assert "-landscape-" in first["file"]  # files are named by their shape
    assert client.get("/batches/batch-" + "0" * 24).status_code == 404
    assert client.get("/batches/../../etc").status_code == 404


def test_profiles_in_clip_and_batch_bodies_render_each_quote_once(client, workers, source_url, ffmpeg_counter) -> None:
    """``profiles``: one clip per profile, each answering on its own, every quote's profiles from one ffmpeg run;
    the batch's archive holds them all."""
    import io
    import zipfile

    from conftest import runs

    one = client.post("/clips", json={"source": source_url, "start": 0, "end": 1, "profiles": ["vertical", "square"]})
    assert one.status_code == 202
    clips = one.json()["clips"]
    assert [c["profile"] for c in clips] == ["vertical", "square"] and len({c["id"] for c in clips}) == 2
    body = {
        "source": source_url,
        "profiles": ["landscape", "vertical"],
        "quotes": [{"start": 2, "end": 3, "caption": "one"}, {"start": 4, "end": 5, "caption": "two"}],
    }
    batch = client.post("/batches", json=body).json()
    assert [c["profile"] for c in batch["clips"]] == ["landscape", "vertical"] * 2
    workers.burst(1)
    _, log = ffmpeg_counter
    assert runs(log) == 3  # one run per quote, whatever the number of profiles
    for clip in clips + batch["clips"]:
        status = client.get(clip["status_url"]).json()
        assert status["status"] == "finished", status
    done = client.get(batch["status_url"]).json()
    assert done["counts"] == {"finished": 4}
    archive = zipfile.ZipFile(io.BytesIO(client.get(batch["archive_url"]).content))
    assert len(archive.namelist()) == 5 and archive.testzip() is None
    again = client.post("/clips", json={"source": source_url, "start": 0, "end": 1, "profiles": ["square"]})
    assert again.status_code == 200 and again.json()["clips"][0]["cached"]
    bad = client.post("/clips", json={"source": source_url, "start": 0, "end": 1, "profiles": ["cinema"]})
    assert bad.status_code == 422 and "profiles" in bad.text


def test_a_caption_too_fast_to_read_is_queued_with_a_warning(client, source_url) -> None:
    fast = client.post("/clips", json={"source": source_url, "start": 1, "end": 3, "caption": "x" * 120})
    assert fast.status_code == 202 and "60 characters a second" in fast.json()["warnings"][0]
    calm = client.post("/clips", json={"source": source_url, "start": 1, "end": 3, "caption": "a quote"})
    assert calm.json()["warnings"] == []
