"""A popular clip's viewers against `quoteclip serve` and real Redis (api/fanout.py, api/streams.py, api/caps.py,
api/server.py): one relay reader per clip whatever its viewers, a bounded number of Redis connections, viewers that
do not read cut without slowing the others, per-client caps, parts, playlists and captions made once, and the
front door's deadlines and connection cap. A stream is written with the worker's own relay (jobs/relay.py), so no
render runs: the API answers a link whose job is queued but whose stream is there, as for a render underway."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import pytest
from fastapi.testclient import TestClient
from redis import Redis

from api import create_app
from api.links import cache
from api.streams import ForPlayers
from jobs import relay
from jobs.queue import lookup
from quoteclip import links
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from renderer.fragments import Piece
from storage import LocalStorage
from testkit.faces import Served, serving, user_env

SITE, SECRET = "site", "site-secret-0123456789"
CODECS = "avc1.64001f,mp4a.40.2"
MANY = {"QUOTECLIP_CLIENT_STREAMS": "100", "QUOTECLIP_CLIENT_HELD": "100"}  # (every viewer here is 127.0.0.1)


def quote(source: str, start: float = 1.0, end: float = 3.0) -> dict[str, Any]:
    return {"source": source, "start": start, "end": end, "caption": "one two three", "watermark": "StarZero"}


@pytest.fixture
def fan_env(queue_env: dict[str, str], media, http_source) -> dict[str, str]:
    (http_source.root / "lv.mp4").symlink_to(media(size="320x180", duration=6, pattern="levels"))
    return {
        **queue_env,
        "QUOTECLIP_SITE_KEYS": f"{SITE}:{SECRET}",
        "QUOTECLIP_LINK_HOLD": "20",
        "SOURCE_URL": http_source.url("lv.mp4"),
    }


@contextlib.contextmanager
def api(env: dict[str, str], log: Path | None = None, **extra: str) -> Iterator[Served]:
    with serving(user_env({**env, **extra}, drop=("QUOTECLIP_", "AWS_")), log) as served:
        yield served


def job_of(env: dict[str, str], clip: dict[str, Any]) -> str:
    spec = build_spec({**clip, "watermark": {"text": clip["watermark"]}})
    settings = Settings.from_env(env).for_queue()
    return "clip-" + lookup(spec, settings, LocalStorage(settings.storage_dir))[0]


class Stream:
    """A clip's stream written as its worker writes it: the init segment, fragments, the end."""

    def __init__(self, env: dict[str, str], job_id: str) -> None:
        self.connection = Redis.from_url(env["QUOTECLIP_REDIS_URL"])
        self.writer = relay.Relay(self.connection, job_id, 10.0, 96 * 1024**2)
        self.pieces: list[bytes] = []

    def add(self, data: bytes, kind: str = "fragment") -> None:
        n = len(self.pieces)
        piece = Piece("init", data, codecs=CODECS) if kind == "init" else Piece("fragment", data, n * 0.3, 0.3)
        self.writer.piece(piece)
        self.pieces.append(data)

    def as_sent(self) -> bytes:
        """What a (non-Chromium) progressive player is sent of it."""
        players = ForPlayers(head=False)
        return b"".join(players(p) for p in self.pieces) + players.rest()

    def close(self) -> None:
        self.writer.close()


def redis_connections(pid: int, redis_port: int) -> int:
    return sum(
        1
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.raddr and c.raddr.port == redis_port and c.status == psutil.CONN_ESTABLISHED
    )


def connections_to(pid: int, port: int) -> int:
    return sum(
        1
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED
    )


async def ask(
    port: int,
    path: str,
    read: bool = True,
    rcvbuf: int = 0,
    agent: str = "test",
    timeout: float = 30,
    version: str = "1.1",
) -> dict[str, Any]:
    """A GET on a raw socket: its status, headers, and (``read``) its chunked body and whether it ended whole
    within ``timeout`` seconds (an HTTP/1.0 answer without a length: its body to the connection's close). An idle
    viewer (``read`` False) reads the headers only, with a small receive buffer."""
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=rcvbuf or 2**16)
    writer.write(f"GET {path} HTTP/{version}\r\nHost: x\r\nUser-Agent: {agent}\r\n\r\n".encode())
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    except TimeoutError:
        writer.close()
        return {"status": 0, "headers": {}, "body": b"", "whole": False}
    lines = head.decode().split("\r\n")
    found: dict[str, Any] = {
        "status": int(lines[0].split()[1]),
        "headers": {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)},
        "body": b"",
        "whole": False,
        "reader": reader,
        "writer": writer,
    }
    if not read:
        return found
    body = bytearray()
    try:
        async with asyncio.timeout(timeout):
            if found["headers"].get("transfer-encoding") == "chunked":
                while True:
                    size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                    if size == 0:
                        await reader.readuntil(b"\r\n")
                        found["whole"] = True
                        break
                    body += await reader.readexactly(size)
                    await reader.readexactly(2)
            elif "content-length" in found["headers"]:
                body += await reader.readexactly(int(found["headers"]["content-length"]))
                found["whole"] = True
            else:
                body += await reader.read()
                found["whole"] = True
    except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
        pass
    found["body"] = bytes(body)
    writer.close()
    return found


@pytest.mark.integration
def test_fifty_viewers_of_two_streams_share_one_reader_and_four_redis_connections(fan_env) -> None:
    """50 viewers of two clips' streams at once (25 each): every one gets the same bytes as the others of its clip,
    the clip's whole stream, while the API process holds at most its default four Redis connections (its two pools
    of one, the job events' connection, the one reading every clip's stream); 100 HLS part requests after it open
    no more."""
    clips = [quote(fan_env["SOURCE_URL"]), quote(fan_env["SOURCE_URL"], 2.0, 4.0)]
    paths = [links.sign(clip, SITE, SECRET) for clip in clips]
    redis_port = urlsplit(fan_env["QUOTECLIP_REDIS_URL"]).port or 6379
    streams = [Stream(fan_env, job_of(fan_env, clip)) for clip in clips]
    with api(fan_env, **MANY) as served:
        for stream in streams:
            stream.add(os.urandom(2000), "init")
            stream.add(os.urandom(40_000))
        peak = 0

        async def viewers() -> list[dict[str, Any]]:
            return await asyncio.gather(*(ask(served.port, paths[n % 2]) for n in range(50)))

        result: list[list[dict[str, Any]]] = []
        thread = threading.Thread(target=lambda: result.append(asyncio.run(viewers())))
        thread.start()
        deadline = time.monotonic() + 20
        while connections_to(served.process.pid, served.port) < 50 and time.monotonic() < deadline:
            peak = max(peak, redis_connections(served.process.pid, redis_port))
            time.sleep(0.05)
        for _ in range(20):
            for stream in streams:
                stream.add(os.urandom(60_000))
            peak = max(peak, redis_connections(served.process.pid, redis_port))
            time.sleep(0.03)
        for stream in streams:
            stream.writer.finished()
        thread.join(30)
        peak = max(peak, redis_connections(served.process.pid, redis_port))

        async def parts() -> list[dict[str, Any]]:  # HLS parts, each on a connection of its own
            names = ["index.m3u8", "init.mp4", "1.m4s", "2.m4s"] * 25
            return await asyncio.gather(*(ask(served.port, f"{paths[0]}/{name}") for name in names))

        hls: list[list[dict[str, Any]]] = []
        thread = threading.Thread(target=lambda: hls.append(asyncio.run(parts())))
        thread.start()
        while thread.is_alive():
            peak = max(peak, redis_connections(served.process.pid, redis_port))
            time.sleep(0.02)
        for stream in streams:
            stream.close()
    assert [a["status"] for a in hls[0]] == [200] * 100
    answers = result[0]
    assert [a["status"] for a in answers] == [200] * 50
    assert all(a["headers"]["x-accel-buffering"] == "no" for a in answers)  # (a proxy in front passes it on)
    assert all(a["whole"] for a in answers)
    for n, stream in enumerate(streams):
        expected = stream.as_sent()
        assert all(a["body"] == expected for a in answers[n::2]), "a viewer got other bytes than its clip's stream"
    print(f"50 viewers of two clips: at most {peak} Redis connections of the API process")
    assert peak <= 4, f"the API held {peak} Redis connections for 50 viewers of two clips"


@pytest.mark.integration
def test_a_stream_written_from_the_clips_bytes_is_the_one_sent_through_the_app(fan_env) -> None:
    """Viewers on HTTP/1.1 are written the stream's chunks straight from the clip's bytes (api/server.py
    ``WRITE_CHUNK``), viewers on HTTP/1.0 through the app's ``send``: every one gets the same bytes, fragments far
    larger than a socket takes at once included; each answer ends with its last chunk (an HTTP/1.1 stream's end is
    the server's own framing)."""
    clip = quote(fan_env["SOURCE_URL"])
    path = links.sign(clip, SITE, SECRET)
    stream = Stream(fan_env, job_of(fan_env, clip))
    with api(fan_env, **MANY) as served:
        stream.add(os.urandom(2000), "init")
        stream.add(os.urandom(40_000))

        async def viewers() -> list[dict[str, Any]]:
            asked = [asyncio.ensure_future(ask(served.port, path, version=v)) for v in ["1.1"] * 6 + ["1.0"] * 2]
            await asyncio.sleep(1.0)
            for _ in range(4):
                stream.add(os.urandom(1_500_000))  # (each far past what a socket takes at once)
                await asyncio.sleep(0.05)
            stream.writer.finished()
            answers = await asyncio.gather(*asked)
            for answer in answers:
                answer["writer"].close()
            return answers

        answers = asyncio.run(viewers())
    stream.close()
    expected = stream.as_sent()
    assert [a["status"] for a in answers] == [200] * 8
    assert [a["headers"].get("transfer-encoding") for a in answers] == ["chunked"] * 6 + [None] * 2
    assert all(a["whole"] and a["body"] == expected for a in answers), "a viewer got other bytes than the stream"


@pytest.mark.integration
def test_a_viewer_that_does_not_read_is_cut_and_the_others_finish_on_time(fan_env) -> None:
    """10 viewers that read and 10 that stop after the headers (a small receive buffer) of a 12 MB stream, with a
    send deadline of 1 s: the readers get the whole stream as soon as it ends, the idle ones are cut (their
    connections aborted: the API holds none of them, and its file descriptors come back to where they were)."""
    clip = quote(fan_env["SOURCE_URL"])
    path = links.sign(clip, SITE, SECRET)
    stream = Stream(fan_env, job_of(fan_env, clip))
    log = Path(fan_env["QUOTECLIP_STORAGE_DIR"]).parent / "api-cut.log"
    with api(fan_env, log, QUOTECLIP_STREAM_SEND_TIMEOUT="1", **MANY) as served:
        pid = served.process.pid
        fds = psutil.Process(pid).num_fds()
        stream.add(os.urandom(2000), "init")
        ended_at: list[float] = []

        def write() -> None:
            time.sleep(1.0)
            for _ in range(48):
                stream.add(os.urandom(256 * 1024))
                time.sleep(0.02)
            stream.writer.finished()
            ended_at.append(time.monotonic())

        async def viewers() -> tuple[list[dict[str, Any]], list[float], int, int, list[bool]]:
            idle = await asyncio.gather(*(ask(served.port, path, read=False, rcvbuf=4096) for _ in range(10)))
            done: list[float] = []

            async def reading() -> dict[str, Any]:
                found = await ask(served.port, path)
                done.append(time.monotonic())
                return found

            readers = await asyncio.gather(*(reading() for _ in range(10)))
            cut_by = time.monotonic() + 3.0  # (the send deadline, 1 s, has passed long before: a busy machine's margin)
            while connections_to(pid, served.port) and time.monotonic() < cut_by:
                await asyncio.sleep(0.1)
            held, open_fds = connections_to(pid, served.port), psutil.Process(pid).num_fds()
            wholes = []
            for viewer in idle:  # what the idle ones were sent: never the whole stream
                data = b""
                with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                    while chunk := await viewer["reader"].read(1 << 20):
                        data += chunk
                wholes.append(data.endswith(b"0\r\n\r\n"))
                viewer["writer"].close()
            return list(readers), done, held, open_fds, wholes

        writer = threading.Thread(target=write)
        writer.start()
        readers, done, held, open_fds, wholes = asyncio.run(viewers())
        writer.join(30)
        stream.close()
    expected = stream.as_sent()
    assert all(r["status"] == 200 and r["whole"] and r["body"] == expected for r in readers)
    late = max(done) - ended_at[0]
    print(f"readers done {late:.2f} s after the stream's end")
    assert late < 2.0, f"the readers finished {late:.1f} s after the stream's end: they waited for the idle ones"
    assert held == 0, f"the API still held {held} viewers' connections"
    assert open_fds <= fds + 2, (fds, open_fds)  # (its pools' connections may have opened since)
    assert not any(wholes), "an idle viewer was sent the whole stream"
    said = log.read_text()
    assert "was cut: a chunk took longer" in said, said[-2000:]
    assert "ASGI callable returned without completing response" not in said  # (a cut is not the server's error)


@pytest.mark.integration
def test_a_player_that_buffered_ahead_may_pause_past_the_send_deadline(fan_env) -> None:
    """A player that has read 15 s of a clip in its first second stops reading for 4 s (as Chromium does once it
    has buffered enough of a long clip) while the stream goes on, with a send deadline of 1 s: it is not cut, and
    reads the whole stream when it goes on (a viewer that never reads is still cut: the test above)."""
    clip = quote(fan_env["SOURCE_URL"])
    path = links.sign(clip, SITE, SECRET)
    stream = Stream(fan_env, job_of(fan_env, clip))
    with api(fan_env, QUOTECLIP_STREAM_SEND_TIMEOUT="1", **MANY) as served:
        stream.add(os.urandom(2000), "init")
        for _ in range(60):  # 60 fragments: 15 s of clip by their count
            stream.add(os.urandom(20_000))

        async def player() -> tuple[bytes, bool]:
            seen = await ask(served.port, path, read=False, rcvbuf=65536)
            reader, body = seen["reader"], bytearray()

            async def chunks(until: int) -> bool:
                while len(body) < until:
                    size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                    if size == 0:
                        await reader.readuntil(b"\r\n")
                        return True
                    body.extend(await reader.readexactly(size))
                    await reader.readexactly(2)
                return False

            await chunks(60 * 20_000)  # (what is there: read at once)
            for _ in range(40):  # the stream goes on, far past what the sockets hold, while the player pauses
                stream.add(os.urandom(100_000))
            await asyncio.sleep(4.0)
            stream.writer.finished()
            whole = await asyncio.wait_for(chunks(1 << 40), 30)
            seen["writer"].close()
            return bytes(body), whole

        body, whole = asyncio.run(player())
    stream.close()
    assert whole and body == stream.as_sent(), "the player that paused was cut"


@pytest.mark.integration
def test_a_player_reading_at_its_pace_far_behind_a_faster_render_is_not_cut(fan_env) -> None:
    """A render runs several times faster than its clip plays: a player that reads a long clip at its playback's
    pace (once it has read ahead what it keeps) falls tens of MB behind the stream; it is not cut for it, by
    default, and reads the whole clip (24 MB here, read at 8 MB a second while the stream is 24 MB ahead)."""
    clip = quote(fan_env["SOURCE_URL"])
    path = links.sign(clip, SITE, SECRET)
    stream = Stream(fan_env, job_of(fan_env, clip))
    with api(fan_env, **MANY) as served:
        stream.add(os.urandom(2000), "init")
        stream.add(os.urandom(20_000))

        async def player() -> tuple[bytes, bool]:
            seen = await ask(served.port, path, read=False, rcvbuf=65536)
            reader, body = seen["reader"], bytearray()
            first = int((await reader.readuntil(b"\r\n")).strip(), 16)  # (the head's chunk: the viewer joined)
            body.extend(await reader.readexactly(first + 2))
            for _ in range(48):  # the render far ahead: 24 MB relayed before the player has read 1
                stream.add(os.urandom(500_000))
            stream.writer.finished()
            began, whole = time.monotonic(), False
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, ValueError):
                while True:
                    line = await reader.readuntil(b"\r\n")
                    size = int(line.strip(), 16)
                    if size == 0:
                        await reader.readuntil(b"\r\n")
                        whole = True
                        break
                    body.extend(line + await reader.readexactly(size + 2))
                    await asyncio.sleep(max(0.0, len(body) / 8e6 - (time.monotonic() - began)))  # (its pace)
            seen["writer"].close()
            return bytes(body), whole

        body, whole = asyncio.run(asyncio.wait_for(player(), 60))
    stream.close()
    assert whole, f"the player was cut after {len(body) / 1e6:.1f} MB"


def raw(port: int, data: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(data)
    return sock


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed ``sock`` (None: still open after ``seconds``)."""
    began = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return None
    except ConnectionError:
        pass
    return time.monotonic() - began


@pytest.mark.integration
def test_the_api_closes_half_sent_requests_and_refuses_connections_past_its_cap(fan_env) -> None:
    """A connection that sends half a header, or nothing, or headers and half a body, is closed within its
    deadline (1 s here); a connection past QUOTECLIP_MAX_CONNECTIONS takes the place of the idle one (a request
    not all in, or kept alive between requests) that has waited longest, and is answered 503 and closed at once
    when every connection is being answered."""
    with api(fan_env, QUOTECLIP_HEADER_TIMEOUT="1", QUOTECLIP_BODY_TIMEOUT="1", QUOTECLIP_MAX_CONNECTIONS="8") as s:
        half = raw(s.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        silent = raw(s.port, b"")
        body = raw(
            s.port, b"POST /clips HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 99\r\n\r\n{"
        )
        for sock in (half, silent, body):
            took = closed_within(sock, 4.0)
            assert took is not None and took < 2.0, "a half-sent request's connection was still open"
            sock.close()
        # a whole request still answered, and its connection kept alive for the next
        kept = raw(s.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert kept.recv(4096).startswith(b"HTTP/1.1 200")
        socks = [raw(s.port, b"") for _ in range(12)]
        time.sleep(0.3)
        refused = []
        for sock in socks:
            sock.settimeout(0.2)
            try:
                refused.append(sock.recv(4096).startswith(b"HTTP/1.1 503"))
            except TimeoutError:
                refused.append(False)
        assert refused.count(True) == 0, refused  # (each past the cap took the place of the one waiting longest)
        assert connections_to(s.process.pid, s.port) <= 8
        answered = raw(s.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # (in a silent one's place)
        assert answered.recv(4096).startswith(b"HTTP/1.1 200")
        answered.close()
        kept.close()
        posted = json.loads(
            _post(s.port, "/clips", {"source": fan_env["SOURCE_URL"], "start": 1, "end": 2}).split(b"\r\n\r\n", 1)[1]
        )
        polling = f"GET /clips/{posted['id']}?wait=10 HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        busy = [raw(s.port, polling) for _ in range(8)]  # long-polls of a clip no worker renders: being answered
        time.sleep(0.5)  # (8 connections being answered: none is idle)
        late = raw(s.port, b"")
        late.settimeout(2.0)
        assert late.recv(4096).startswith(b"HTTP/1.1 503"), "a connection past the cap was not refused"
        for sock in [*busy, late]:
            sock.close()
        for sock in socks:
            sock.close()


@pytest.mark.integration
def test_per_client_caps_answer_429_with_retry_after(fan_env) -> None:
    """One address: at most 2 streams (QUOTECLIP_CLIENT_STREAMS), 2 held requests (QUOTECLIP_CLIENT_HELD) and 5 HLS
    part requests a second (QUOTECLIP_CLIENT_PARTS); one more of each is answered 429 with Retry-After."""
    streamed = quote(fan_env["SOURCE_URL"])
    held = quote(fan_env["SOURCE_URL"], 2.0, 4.0)
    stream = Stream(fan_env, job_of(fan_env, streamed))
    limits = {"QUOTECLIP_CLIENT_STREAMS": "2", "QUOTECLIP_CLIENT_HELD": "2", "QUOTECLIP_CLIENT_PARTS": "5"}
    with api(fan_env, **limits) as served:
        stream.add(os.urandom(2000), "init")
        stream.add(os.urandom(10_000))

        async def run() -> dict[str, Any]:
            path = links.sign(streamed, SITE, SECRET)
            viewers = [await ask(served.port, path, read=False) for _ in range(2)]
            over = await ask(served.port, path, timeout=5)
            waiting = [asyncio.create_task(ask(served.port, links.sign(held, SITE, SECRET))) for _ in range(2)]
            await asyncio.sleep(1.0)
            over_held = await ask(served.port, links.sign(held, SITE, SECRET), timeout=5)
            parts = [await ask(served.port, f"{path}/1.m4s") for _ in range(6)]
            for task in waiting:
                task.cancel()
            for viewer in viewers:
                viewer["writer"].close()
            return {"viewers": viewers, "over": over, "over_held": over_held, "parts": parts}

        found = asyncio.run(run())
        stream.close()
    assert [v["status"] for v in found["viewers"]] == [200, 200]
    for refused in (found["over"], found["over_held"], found["parts"][-1]):
        assert refused["status"] == 429 and int(refused["headers"]["retry-after"]) >= 1, refused["headers"]
    assert b"at most 2" in found["over"]["body"] and b"at most 2" in found["over_held"]["body"]
    assert [p["status"] for p in found["parts"][:5]] == [200] * 5


def test_captions_playlists_and_parts_are_made_once(fan_env) -> None:
    """A link's captions, its stream's playlist and a part asked three times each (the third with the ETag of the
    first: 304): each made once, then answered from memory with the same ETag."""
    clip = quote(fan_env["SOURCE_URL"])
    job_id = job_of(fan_env, clip)
    stream = Stream(fan_env, job_id)
    stream.add(os.urandom(2000), "init")
    stream.add(os.urandom(30_000))
    stream.add(os.urandom(30_000))
    path = links.sign(clip, SITE, SECRET)
    captions = links.sign(clip, SITE, SECRET, variant="captions")
    app = create_app(Settings.from_env(fan_env))
    hub = app.state.services.hub
    made = cache.BUILDS["captions"]
    with TestClient(app) as client:
        for url, count in (
            (captions, lambda: cache.BUILDS["captions"] - made),
            (f"{path}/index.m3u8", lambda: hub.builds["playlist"]),
            (f"{path}/1.m4s", lambda: hub.builds["part"]),
        ):
            first, second = client.get(url), client.get(url)
            assert first.status_code == second.status_code == 200, (url, first.text)
            assert first.content == second.content and first.headers["etag"] == second.headers["etag"]
            again = client.get(url, headers={"If-None-Match": first.headers["etag"]})
            assert again.status_code == 304 and again.headers["etag"] == first.headers["etag"]
            assert count() == 1, f"{url} was made {count()} times for 3 requests"
        assert client.get(f"{path}/1.m4s").content == stream.pieces[1]
    stream.close()


def test_an_ended_streams_parts_read_its_index_once_a_second(fan_env, monkeypatch) -> None:
    """A stream's HLS parts and playlist read its index from Redis at each request while it grows (a fragment added
    is in the next playlist); once it has ended, for a second at a time (INDEX_KEPT), and the link's job is made
    once: a stored clip's parts asked a thousand times a second cost no round trip each."""
    from api.links import hold

    clip = quote(fan_env["SOURCE_URL"])
    stream = Stream(fan_env, job_of(fan_env, clip))
    stream.add(os.urandom(2000), "init")
    stream.add(os.urandom(30_000))
    stream.add(os.urandom(30_000))  # (a growing playlist answers once it lists half a second: api/streams.py)
    path = links.sign(clip, SITE, SECRET)
    app = create_app(Settings.from_env(fan_env))
    hub = app.state.services.hub
    made: list[str] = []
    job_id = hold.job_id
    monkeypatch.setattr(hold, "job_id", lambda *args: made.append(job_id(*args)) or made[-1])
    with TestClient(app) as client:
        assert client.get(f"{path}/index.m3u8").text.count(".m4s") == 2
        stream.add(os.urandom(30_000))
        assert client.get(f"{path}/index.m3u8").text.count(".m4s") == 3
        stream.writer.finished()
        assert "#EXT-X-ENDLIST" in client.get(f"{path}/index.m3u8").text
        reads, began = hub.index_reads, time.monotonic()
        for _ in range(10):
            for part, piece in (("init.mp4", 0), ("1.m4s", 1), ("2.m4s", 2)):
                answer = client.get(f"{path}/{part}")
                assert answer.status_code == 200 and answer.content == stream.pieces[piece], part
            assert "#EXT-X-ENDLIST" in client.get(f"{path}/index.m3u8").text
        took = time.monotonic() - began
    stream.close()
    assert hub.index_reads - reads <= 1 + took, f"{hub.index_reads - reads} index reads in {took:.1f} s"
    assert len(made) == 1, f"the link's job was made {len(made)} times"


def test_the_apps_shared_pool_is_closed_with_the_app(queue_env) -> None:
    """An app's event-loop pool is closed at its shutdown: left to the garbage collector after its loop had closed,
    its connections warned of themselves as unclosed, in whichever later test the collector ran."""
    import gc
    import sys

    _run_an_app_that_uses_its_pool(Settings.from_env(queue_env))  # (its app, client and pool gone on return)
    seen: list[Any] = []
    before, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        gc.collect()
    finally:
        sys.unraisablehook = before
    assert not [str(u.exc_value) for u in seen if isinstance(u.exc_value, ResourceWarning)]


def _run_an_app_that_uses_its_pool(settings: Settings) -> None:
    app = create_app(settings)
    hub = app.state.services.hub

    async def touch() -> None:
        await hub.redis().ping()

    with TestClient(app) as client:
        client.portal.call(touch)


@pytest.mark.integration
def test_the_api_runs_on_the_system_allocator_unless_told_otherwise(fan_env) -> None:
    """`quoteclip serve` starts itself again with ``PYTHONMALLOC=malloc`` (the same process): the memory a crowd's
    connections freed can then be handed back (Python's own allocator held a third of the crowd's peak, figure 15c).
    An operator's ``PYTHONMALLOC`` is kept as given."""

    def allocator(served: Served) -> str:
        environ = psutil.Process(served.process.pid).environ()
        return environ.get("PYTHONMALLOC", "")

    with api(fan_env) as served:
        assert allocator(served) == "malloc"
        assert psutil.Process(served.process.pid).cmdline()[-3:] == ["serve", "--port", str(served.port)]
    with api(fan_env, PYTHONMALLOC="pymalloc") as served:
        assert allocator(served) == "pymalloc"


def _post(port: int, path: str, body: dict[str, Any]) -> bytes:
    """A POST on a connection of its own, its whole answer (the connection closed after it)."""
    data = json.dumps(body).encode()
    sock = raw(
        port,
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        f"Connection: close\r\n\r\n".encode()
        + data,
    )
    got = b""
    sock.settimeout(10)
    with sock:
        while chunk := sock.recv(65536):
            got += chunk
    return got
