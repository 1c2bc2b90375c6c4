"""The API's front door in this process (api/server.py, on uvicorn as `quoteclip serve` runs it): while a crowd is
connected, the cyclic collector's full collections wait (each walks every object the crowd's connections made, a
pause for all of them) but for one every ``CROWD_COLLECT`` seconds, and once it has left they come back as they
were; a request's headers are capped (``MAX_HEADER_BYTES``), not its body; a stream's answer is chunked on HTTP/1.1
(with the extensions api/streams.py writes it through) and ended by the close on HTTP/1.0; it runs on asyncio's
loop even when uvloop is installed, and on uvloop when ``QUOTECLIP_EVENT_LOOP`` names it, with the same caps and
deadlines. These lean on uvicorn's httptools protocol as api/server.py subclasses it: its parser callbacks and its
answer's cycle."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.util
import os
import socket
import sys
import threading
import time
import types

import pytest
from conftest import front_door, until

from api import server
from quoteclip.errors import BadInput
from quoteclip.settings import Settings


async def hello(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def drained(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    """Reads the request's body, answers its length."""
    size, more = 0, True
    while more:
        message = await receive()
        size, more = size + len(message.get("body", b"")), message.get("more_body", False)
    body = str(size).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


def answer(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection (or 10 s)."""
    sock.settimeout(10)
    got = b""
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while chunk := sock.recv(65536):
            got += chunk
    return got


def test_headers_past_their_cap_are_refused_431_but_a_large_body_is_not() -> None:
    """Headers sent a kilobyte at a time past 16 KiB: 431 and the connection closed at once, long before the header
    deadline. Headers of 12 KiB in the same pieces are answered; so is a 200 KB body sent with its headers."""
    settings = Settings.from_env({"QUOTECLIP_HEADER_TIMEOUT": "60"})
    with front_door(drained, settings) as port:
        over = socket.create_connection(("127.0.0.1", port))
        began = time.monotonic()
        over.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        with contextlib.suppress(ConnectionError):
            for _ in range(24):
                over.sendall(b"X-Pad: " + b"a" * 1000 + b"\r\n")
                time.sleep(0.01)
        refused = answer(over)
        assert refused.startswith(b"HTTP/1.1 431 ") and time.monotonic() - began < 10, refused[:200]
        under = socket.create_connection(("127.0.0.1", port))
        under.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n")
        for _ in range(12):
            under.sendall(b"X-Pad: " + b"a" * 1000 + b"\r\n")
            time.sleep(0.01)
        under.sendall(b"\r\n")
        assert answer(under).startswith(b"HTTP/1.1 200 ")
        body = socket.create_connection(("127.0.0.1", port))
        body.sendall(
            b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 200000\r\n\r\n" + b"b" * 200_000
        )
        got = answer(body)
        assert got.startswith(b"HTTP/1.1 200 ") and got.endswith(b"\r\n\r\n200000"), got[:200]
        for sock in (over, under, body):
            sock.close()


async def streamed(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    """An answer without a length in two parts, as a stream is sent; its body names the extensions it was given."""
    names = ",".join(sorted(name for name in scope.get("extensions", {}) if name.startswith("quoteclip.")))
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": names.encode(), "more_body": True})
    await send({"type": "http.response.body", "body": b"|end"})


def test_a_stream_is_chunked_on_http_1_1_and_ended_by_the_close_on_http_1_0() -> None:
    """An answer without a length: chunked to an HTTP/1.1 GET, which is given the write, abort and send-buffer
    extensions; sent as it is and ended by the connection's close to an HTTP/1.0 one (no chunks: HTTP/1.0 has
    none), which is not given the write."""
    with front_door(streamed, Settings.from_env({})) as port:
        got = {}
        for version in ("1.1", "1.0"):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(f"GET / HTTP/{version}\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            got[version] = answer(sock)
            sock.close()
    head, _, body = got["1.1"].partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower(), head
    extensions = f"{server.ABORT},{server.SEND_BUFFER},{server.WRITE_CHUNK}"
    assert body == b"%x\r\n%s\r\n4\r\n|end\r\n0\r\n\r\n" % (len(extensions), extensions.encode()), body
    head, _, body = got["1.0"].partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in head.lower() and b"content-length" not in head.lower(), head
    assert body == f"{server.ABORT},{server.SEND_BUFFER}|end".encode(), body


def test_full_collections_wait_while_a_crowd_is_connected_and_come_back_once_it_left(monkeypatch) -> None:
    monkeypatch.setattr(server, "TRIM_AFTER", 0.2)
    monkeypatch.setattr(server, "CROWD_COLLECT", 0.3)
    settings = Settings.from_env({"QUOTECLIP_HEADER_TIMEOUT": "60"})  # (the crowd sends nothing: kept meanwhile)
    before = gc.get_threshold()
    full: list[float] = []  # full collections, when they started

    def counted(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(time.monotonic())

    gc.callbacks.append(counted)
    crowd: list[socket.socket] = []
    try:
        with front_door(hello, settings) as port:
            crowd = [socket.create_connection(("127.0.0.1", port)) for _ in range(server.CROWD - 1)]
            time.sleep(0.3)
            assert gc.get_threshold() == before  # (not a crowd yet)
            crowd.append(socket.create_connection(("127.0.0.1", port)))
            assert until(lambda: gc.get_threshold()[2] > 10**9, 5), gc.get_threshold()
            assert gc.get_threshold()[:2] == before[:2]  # (the young generations as they were)
            came = time.monotonic()  # a crowd that stays: still collected in full every CROWD_COLLECT seconds
            assert until(lambda: len([t for t in full if t > came]) >= 2, 5), full
            for sock in crowd:
                sock.close()
            assert until(lambda: gc.get_threshold() == before, 5), gc.get_threshold()
    finally:
        for sock in crowd:
            sock.close()
        gc.set_threshold(*before)
        gc.callbacks.remove(counted)


def test_with_crowd_gc_off_a_crowd_leaves_the_collector_and_the_memory_as_they_are(monkeypatch) -> None:
    """``QUOTECLIP_CROWD_GC=false`` and ``QUOTECLIP_GIVE_BACK_MEMORY=false``: a crowd's coming changes no threshold
    of the collector, nothing is frozen, and its leaving hands nothing back (``give_back_memory`` not called)."""
    monkeypatch.setattr(server, "TRIM_AFTER", 0.2)
    given: list[float] = []
    monkeypatch.setattr(server, "give_back_memory", lambda: given.append(time.monotonic()))
    settings = Settings.from_env(
        {"QUOTECLIP_HEADER_TIMEOUT": "60", "QUOTECLIP_CROWD_GC": "false", "QUOTECLIP_GIVE_BACK_MEMORY": "false"}
    )
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    server.settle(settings)
    assert gc.get_freeze_count() == frozen
    crowd: list[socket.socket] = []
    try:
        with front_door(hello, settings) as port:
            crowd = [socket.create_connection(("127.0.0.1", port)) for _ in range(server.CROWD + 5)]
            time.sleep(0.5)
            assert gc.get_threshold() == before
            for sock in crowd:
                sock.close()
            time.sleep(0.8)  # (past TRIM_AFTER: the crowd has left)
            assert gc.get_threshold() == before and not given, given
    finally:
        for sock in crowd:
            sock.close()
        gc.set_threshold(*before)


def test_the_front_door_runs_on_asyncios_loop_when_uvloop_is_installed(monkeypatch) -> None:
    """uvicorn takes uvloop when it can import it; the protocol wraps asyncio's own transports (a uvloop
    transport's ``close`` cannot be replaced, and every connection would fail as it is made). With a stand-in
    ``uvloop`` installed, the API's server options still run it on asyncio's loop, and a request is answered."""

    class Elsewhere(asyncio.SelectorEventLoop):
        pass

    stand_in = types.ModuleType("uvicorn.loops.uvloop")
    stand_in.uvloop_loop_factory = lambda use_subprocess=False: Elsewhere  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "uvloop", types.ModuleType("uvloop"))
    monkeypatch.setitem(sys.modules, "uvicorn.loops.uvloop", stand_in)
    loops: list[type] = []

    async def which(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        loops.append(type(asyncio.get_running_loop()))
        await hello(scope, receive, send)

    with front_door(which, Settings.from_env({})) as port, socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        got = answer(sock)
    assert got.startswith(b"HTTP/1.1 200 ") and got.endswith(b"ok"), got[:200]
    assert loops and not issubclass(loops[0], Elsewhere), loops


def test_a_head_past_its_cap_in_one_write_is_refused_431() -> None:
    """A 17 KB head sent whole in one write (it once escaped the cap, counted only while a head was not all in):
    431; a 12 KB head in one write is answered."""
    with front_door(hello, Settings()) as port:
        for size, status in ((17_000, b"431"), (12_000, b"200")):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * size + b"\r\nConnection: close\r\n\r\n")
                got = answer(sock)
            assert got.split(b" ", 2)[1] == status, (size, got[:100])


async def big(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    """A stored file's answer: 10 MB with its length, sent in 64 KB pieces as Starlette's FileResponse does."""
    size, piece = 10 * 1024 * 1024, b"x" * 65536
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % size)]})
    for _ in range(size // len(piece) - 1):
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": piece})


def _open_files() -> int:
    import os

    return len(os.listdir("/proc/self/fd"))


def test_clients_that_stop_reading_a_stored_file_are_cut_at_the_send_deadline() -> None:
    """200 clients ask for a 10 MB answer and read none of it: each is cut once it has taken nothing for
    ``QUOTECLIP_SEND_TIMEOUT`` (2 s here), so their connections leave the server (they once stayed as long as the
    clients did: 400 file descriptors for 90 s and more); a slow client that keeps reading gets it all."""
    settings = Settings.from_env({"QUOTECLIP_SEND_TIMEOUT": "2"})
    with front_door(big, settings) as port:
        before = _open_files()
        stalled = []
        for _ in range(200):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            stalled.append(sock)
        assert until(lambda: _open_files() >= before + 300, 10), _open_files() - before  # both ends of each, here
        began = time.monotonic()
        assert until(lambda: _open_files() <= before + 200 + 10, 15), _open_files() - before  # the server's ends gone
        cut = time.monotonic() - began
        slow = socket.create_connection(("127.0.0.1", port))
        slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        got, slow_began = 0, time.monotonic()
        slow.settimeout(10)
        while chunk := slow.recv(256 * 1024):  # at most 2.5 MB a second, never 2 s without taking a byte
            got += len(chunk)
            time.sleep(0.1)
        slow.close()
        for sock in stalled:
            sock.close()
    print(f"\n200 stalled readers of a 10 MB answer: cut {cut:.1f} s after all were in (send deadline 2 s)")
    assert got > 10 * 1024 * 1024, got
    assert time.monotonic() - slow_began > 2


async def closing(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    """An answer of ``/N`` KB in one piece, its connection closed after it, the server's send buffer held small."""
    scope["extensions"][server.SEND_BUFFER](4096)
    size = int(scope["path"].strip("/")) * 1024
    headers = [(b"content-length", b"%d" % size), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"x" * size})


def test_a_connection_closed_with_bytes_its_client_does_not_take_is_aborted_at_the_grace() -> None:
    """Clients that ask for an answer ended by the close (8 KB to 512 KB) and read none of it: the server closes
    each with bytes still buffered for it, some under the buffer's high-water mark (no send deadline ever armed). A
    close alone waits for them to be sent: each connection is aborted ``QUOTECLIP_STREAM_SEND_TIMEOUT`` (1 s here)
    after its close, long before the send deadline (30 s), by a sweep that replaces no method of the transport."""
    settings = Settings.from_env({"QUOTECLIP_SEND_TIMEOUT": "30", "QUOTECLIP_STREAM_SEND_TIMEOUT": "1"})
    with front_door(closing, settings) as port:
        held, count = _held_after_closing(port)
    assert not held, f"{held} of {count} connections still held by the server 8 s on"


def _held_after_closing(port: int) -> tuple[int, int | str]:
    """Clients asking ``closing`` for 8 KB to 512 KB, reading none of it: how many of their connections the server
    still holds 8 s on, of how many (its own ends of them, this process's sockets on ``port``: not whatever else
    this test process opens or closes meanwhile)."""
    stalled = []
    for kb in range(8, 520, 8):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n" % kb)
        stalled.append(sock)
    until(lambda: _server_ends(port) == 0, 8)  # the server's ends gone, the clients' left
    held = _server_ends(port)
    seen = _sweeps_seen() if held else ""
    for sock in stalled:
        sock.close()
    return held, f"{len(stalled)} ({seen})" if seen else len(stalled)


def _sweeps_seen() -> str:
    """What the servers' sweeps see, said when a test finds connections held: each server's connections, those
    closing with bytes still buffered, since when the sweep has seen them so, and when its next look is due."""
    now = time.monotonic()
    said = []
    for connections, _, due in list(server.GuardedProtocol.sweeping.values()):
        held = [c for c in list(connections) if c.transport is not None and c.transport.is_closing()]
        since = sorted(round(now - c._closing_since, 1) for c in held if c._closing_since)
        said.append(
            f"{len(connections)} held, {len(held)} closing, seen closing for {since[-3:]} s, next look in "
            f"{due.when() - now:.1f} s"
        )
    return "; ".join(said) or "no sweep"


def _server_ends(port: int) -> int:
    """The connections on ``port`` whose server end this process (the server's) still holds."""
    import psutil

    return sum(
        1
        for c in psutil.Process().net_connections(kind="tcp")
        if c.laddr and c.laddr.port == port and c.status != psutil.CONN_LISTEN
    )


def test_on_uvloop_the_front_door_keeps_its_head_cap_deadlines_and_sweep() -> None:
    """``QUOTECLIP_EVENT_LOOP=uvloop`` runs the API on uvloop (its transports' methods cannot be replaced): a request
    is answered on uvloop's loop, a 17 KB head in one write is refused 431, a connection that sends nothing is
    closed at the header deadline, and connections closed with bytes their clients do not take are not held past the
    grace (uvloop's transports wait for them as asyncio's do: the sweep aborts them)."""
    if importlib.util.find_spec("uvloop") is None:
        if os.environ.get("CI"):
            pytest.fail("uvloop is not installed: the bench extra installs it (pip install -e '.[test,bench]')")
        pytest.skip("uvloop is not installed (pip install uvloop)")
    loops: list[str] = []

    async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        loops.append(type(asyncio.get_running_loop()).__module__)
        await (hello if scope["path"] == "/" else closing)(scope, receive, send)

    settings = Settings.from_env(
        {
            "QUOTECLIP_EVENT_LOOP": "uvloop",
            "QUOTECLIP_HEADER_TIMEOUT": "1",
            "QUOTECLIP_SEND_TIMEOUT": "30",
            "QUOTECLIP_STREAM_SEND_TIMEOUT": "1",
        }
    )
    with front_door(app, settings) as port:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert answer(sock).startswith(b"HTTP/1.1 200 ")
        assert loops and loops[0].startswith("uvloop"), loops
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 17_000 + b"\r\n\r\n")
            assert answer(sock).startswith(b"HTTP/1.1 431 ")
        with socket.create_connection(("127.0.0.1", port)) as sock:
            began = time.monotonic()
            assert answer(sock) == b""  # (closed, nothing sent)
            assert 0.5 < time.monotonic() - began < 5
        held, count = _held_after_closing(port)
    assert not held, f"{held} of {count} connections still held by the server 8 s on"


def test_uvloop_named_but_not_installed_is_refused_by_name(monkeypatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvloop" else object())
    with pytest.raises(BadInput, match="QUOTECLIP_EVENT_LOOP=uvloop needs uvloop"):
        server.server_options(Settings.from_env({"QUOTECLIP_EVENT_LOOP": "uvloop"}))


def test_a_newcomer_takes_the_place_of_a_bodiless_post_or_an_idle_keep_alive() -> None:
    """The cap full of connections that sent a POST's head and no body (their body deadline 60 s), then of kept-alive
    connections between requests: a newcomer is answered, the oldest of them closed for it (they once kept every
    newcomer at 503 for as long as they were renewed)."""
    settings = Settings.from_env({"QUOTECLIP_MAX_CONNECTIONS": "20", "QUOTECLIP_KEEP_ALIVE": "60"})
    with front_door(drained, settings) as port:
        for kind in ("bodiless POST", "idle keep-alive"):
            held = []
            for _ in range(20):
                sock = socket.create_connection(("127.0.0.1", port))
                if kind == "bodiless POST":
                    sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
                else:
                    sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
                    sock.settimeout(5)
                    assert sock.recv(4096).startswith(b"HTTP/1.1 200"), kind
                held.append(sock)
            time.sleep(0.3)
            for n in range(5):  # newcomers, again and again
                with socket.create_connection(("127.0.0.1", port)) as newcomer:
                    newcomer.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                    got = answer(newcomer)
                assert got.startswith(b"HTTP/1.1 200"), (kind, n, got[:80])
            for sock in held:
                sock.close()
            time.sleep(0.3)


def test_one_client_address_holds_at_most_its_connections_a_proxy_is_not_capped() -> None:
    """``QUOTECLIP_CLIENT_CONNECTIONS`` (5 here) from one address: the sixth is answered 429 and closed as it comes,
    another address is served; a proxy listed in ``QUOTECLIP_TRUSTED_PROXIES`` carries everyone's and is not
    capped."""
    for trusted, sixth in (("", b"429"), ("127.0.0.1/32", b"200")):
        settings = Settings.from_env({"QUOTECLIP_CLIENT_CONNECTIONS": "5", "QUOTECLIP_TRUSTED_PROXIES": trusted})
        with front_door(hello, settings) as port:
            held = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
            time.sleep(0.2)
            with socket.create_connection(("127.0.0.1", port)) as extra:
                extra.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                assert answer(extra).split(b" ", 2)[1] == sixth, trusted
            other = socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.2", 0))
            with other:
                other.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                assert answer(other).startswith(b"HTTP/1.1 200"), trusted
            for sock in held:
                sock.close()
            time.sleep(0.2)
            with socket.create_connection(("127.0.0.1", port)) as again:  # the count follows the connections
                again.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                assert answer(again).startswith(b"HTTP/1.1 200"), trusted


def test_the_sweep_runs_for_a_server_run_again(monkeypatch) -> None:
    """A server stopped while its sweep was due, then run again (the same server, a new loop): connections closed
    with bytes their clients do not take are still aborted at the grace (the sweep of its first run, never come,
    would otherwise have stood for it for good)."""
    import uvicorn

    monkeypatch.setattr(server, "SWEEP_EVERY", 2.5)  # (the first run stops well before its sweep is due)
    settings = Settings.from_env({"QUOTECLIP_SEND_TIMEOUT": "30", "QUOTECLIP_STREAM_SEND_TIMEOUT": "1"})
    front = uvicorn.Server(uvicorn.Config(closing, log_config=None, lifespan="off", **server.server_options(settings)))
    held: int | None = None
    for run in (1, 2):
        listening = socket.create_server(("127.0.0.1", 0))
        port = listening.getsockname()[1]
        front.should_exit = front.started = False
        running = threading.Thread(target=front.run, kwargs={"sockets": [listening]}, daemon=True)
        running.start()
        try:
            assert until(lambda: front.started, 10)
            if run == 1:  # (a connection, so its sweep is due as the server stops)
                with socket.create_connection(("127.0.0.1", port)) as sock:
                    sock.sendall(b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\n")
                    assert answer(sock).startswith(b"HTTP/1.1 200 ")
            else:
                held, count = _held_after_closing(port)
        finally:
            front.should_exit = True
            running.join(10)
        assert not running.is_alive()
        if run == 1:  # (its sweep never came: the entry of a loop now closed stands for the server)
            stale = server.GuardedProtocol.sweeping.get(id(front.server_state.connections))
            assert stale is not None and stale[1].is_closed(), stale
    assert held == 0, f"{held} of {count} connections still held by the server 8 s on"


def test_a_connection_whose_look_fails_does_not_end_the_sweep(monkeypatch) -> None:
    """The sweep's look at one connection fails once (an error of its transport's, say): it is logged and the sweep
    goes on, so connections closed with bytes their clients do not take are still aborted at the grace."""
    looked = server.GuardedProtocol.swept
    failed: list[bool] = []

    def swept(self, now: float) -> None:  # type: ignore[no-untyped-def]
        if not failed:
            failed.append(True)
            raise RuntimeError("a transport that fails to say its state")
        looked(self, now)

    monkeypatch.setattr(server.GuardedProtocol, "swept", swept)
    settings = Settings.from_env({"QUOTECLIP_SEND_TIMEOUT": "30", "QUOTECLIP_STREAM_SEND_TIMEOUT": "1"})
    with front_door(closing, settings) as port:
        held, count = _held_after_closing(port)
    assert failed
    assert not held, f"{held} of {count} connections still held by the server 8 s on"
