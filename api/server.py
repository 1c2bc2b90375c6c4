"""The API's front door: uvicorn's HTTP/1.1 server (its httptools protocol: llhttp's parser, and answers' headers
written as they are, where h11 validated every header of every answer again, a quarter of a crowd's fan-out) with
deadlines and a cap of its own.

- A connection has ``QUOTECLIP_HEADER_TIMEOUT`` seconds to send a request's headers (from its connection, or from
  its first byte after a request), then ``QUOTECLIP_BODY_TIMEOUT`` seconds for its body; past either it is closed.
  A request's head is at most ``MAX_HEADER_BYTES``, counted as its bytes arrive, before they are parsed, whether
  they come a byte at a time or all in one read (past it, 431 and the connection closed).
- An answer whose client takes none of it for ``QUOTECLIP_SEND_TIMEOUT`` seconds (its transport's buffer full,
  asyncio's ``pause_writing`` not followed by ``resume_writing``) has its connection aborted: a stored file, a page
  or a stream alike. A slow client that keeps reading is never cut.
- An idle connection between requests is closed after ``QUOTECLIP_KEEP_ALIVE`` seconds (uvicorn's keep-alive).
- One API process holds at most ``QUOTECLIP_MAX_CONNECTIONS`` connections. One more takes the place of the idle
  connection that has waited longest (closed at once): one whose request's head or body is not all in, or one
  kept alive between requests. A flood of half-sent heads, of heads without their bodies or of kept-alive
  connections never keeps a health check or a visitor out. When none is idle, the newcomer is answered ``503``
  with ``Retry-After`` as it comes and closed, before anything of it is read.
- A connection buffers at most ``WRITE_BUFFER`` bytes of its answer before the answer waits for the client to read
  (asyncio's default is 64 KiB): a thousand viewers of a stream that stopped reading hold little.
- A connection closed with bytes still buffered for it (a client that stopped reading) is aborted if it has not
  taken them within ``QUOTECLIP_STREAM_SEND_TIMEOUT`` seconds (a close alone would hold it until they are sent):
  found by a sweep over the server's connections every ``SWEEP_EVERY`` seconds, through the transports' public
  ``is_closing``, ``get_write_buffer_size`` and ``abort`` (no method of a transport is replaced: uvloop's cannot be).
- Once a crowd has left (its connections down to a quarter of their peak, a peak of ``CROWD`` or more), the memory
  it freed is handed back to the system (api/fanout.py ``give_back_memory``): otherwise the process would keep the
  peak of its viewers for good (``QUOTECLIP_GIVE_BACK_MEMORY``). The API runs on the C library's allocator
  (``PYTHONMALLOC=malloc``, set by cli/service.py ``system_allocator`` before the server starts): Python's own keeps
  a 1 MiB arena for as long as one object in it lives, and a thousand connections' objects, freed among the few that
  outlive them, left a third of the crowd's peak held for good.
- The objects the API made as it started are frozen (``settle``: the cyclic collector never walks them again), and
  while a crowd is connected (``CROWD`` connections or more) the collector's oldest generation waits: a full
  collection walks every object a thousand connections made, all its viewers waiting, and several came in a
  crowd's first second. It runs every ``CROWD_COLLECT`` seconds while a crowd stays, and once it has left (with
  the memory handed back). Both are ``QUOTECLIP_CROWD_GC`` (off behind a proxy); docs/deploy.md gives what each of
  these moves is worth, as measured.
- A streamed answer's chunks can be written straight from the bytes every viewer of its clip shares (``WRITE_CHUNK``
  in a ``GET``'s ``extensions``, on a plain HTTP/1.1 connection: an async function of the bytes, whether they were
  written): the chunk's framing and the bytes go to the socket with one ``writev`` from where they are, and what
  the socket does not take yet waits there, not in a copy, until the socket can take more. A thousand viewers of
  one clip hold no copy of its bytes each, and a chunk costs no trip through the app's ``send`` (the answer's start
  and its end still take that way, so the server frames the rest as its own).
- An answer can abort its own connection (``ABORT`` in the request's ``extensions``: a function): api/streams.py
  cuts a viewer that does not read with it, so what it had buffered is freed at once (a close would wait for it to
  be sent); and set its socket's send buffer (``SEND_BUFFER``: a function of the bytes): a stream caps it, so a
  viewer that stops reading stalls its answer within a few hundred KB instead of the megabytes the system's
  buffers grow to.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import ipaddress
import logging
import os
import socket
import time
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from quoteclip.errors import BadInput
from quoteclip.settings import Settings

from .caps import client_of
from .fanout import give_back_memory

log = logging.getLogger(__name__)

ABORT = "quoteclip.abort"
SEND_BUFFER = "quoteclip.send_buffer"
WRITE_CHUNK = "quoteclip.write_chunk"
MAX_HEADER_BYTES = 16 * 1024
HEADERS_TOO_LARGE = b"the request's headers are too large"
FULL = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
CROWDED = b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(HEADERS_TOO_LARGE), HEADERS_TOO_LARGE)
)
WARN_EVERY = 10.0  # seconds between warnings of connections refused
CROWD = 64  # connections at once that count as a crowd: its memory is handed back once it has left
CROWD_COLLECT = 30.0  # seconds between full collections while a crowd stays
TRIM_AFTER = 1.0  # seconds after a crowd has left that its memory is handed back
SWEEP_EVERY = 1.0  # seconds between looks for connections closing with bytes their client does not take
WRITE_BUFFER = 16 * 1024  # bytes a connection's answer buffers before its sender waits for the client to read


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the deadlines and the connection cap (set on the subclass ``protocol``
    makes)."""

    header_timeout = 10.0
    body_timeout = 60.0
    send_timeout = 30.0
    max_connections = 1000
    client_connections = 256
    trusted: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()  # proxies: not capped per address
    close_grace = 10.0  # seconds a closed connection has to take what it was sent before it is aborted
    crowd_gc = True  # the collector's full collections wait while a crowd is connected (QUOTECLIP_CROWD_GC)
    give_back = True  # a crowd's freed memory handed back once it has left (QUOTECLIP_GIVE_BACK_MEMORY)
    refused_at = 0.0  # when a refusal was last logged (class-wide)
    peak = 0  # the most connections held at once since memory was last handed back (class-wide)
    trimming = False
    crowded: tuple[int, ...] | None = None  # the collector's thresholds while a crowd is connected (class-wide)

    _deadline: asyncio.TimerHandle | None = None
    _stalled: asyncio.TimerHandle | None = None  # the answer's deadline while its client takes none of it
    _phase = ""
    _fd = -1  # the connection's socket (its file descriptor), while it is open
    _client = ""  # the client address its connection is counted under (per_client), if capped
    _head_bytes = 0  # bytes of a request's head received so far (while it is not all in)
    _head_tail = b""  # the last bytes of the head so far (its end may come split between two reads)
    _writable: asyncio.Future[None] | None = None  # a chunk's writer waiting for the socket to take more
    _closing_since = 0.0  # when the sweep first saw the connection closing with bytes still buffered for it
    # the servers' sweeps, by their set of connections: the set (held: its id is not another's meanwhile), the loop
    # the sweep runs on and its next call (class-wide)
    sweeping: dict[int, tuple[Any, asyncio.AbstractEventLoop, asyncio.TimerHandle]] = {}

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections and not self._evict():
            now = time.monotonic()
            if now - GuardedProtocol.refused_at > WARN_EVERY:
                GuardedProtocol.refused_at = now
                log.warning("the API holds %d connections already: new ones are answered 503", self.max_connections)
            transport.write(FULL)
            transport.close()
            return
        if not self._counted(transport):
            transport.write(CROWDED)
            transport.close()
            return
        GuardedProtocol.peak = max(GuardedProtocol.peak, len(self.connections))
        if len(self.connections) >= CROWD and GuardedProtocol.crowded is None and self.crowd_gc:
            self._crowd_came()
        sock = transport.get_extra_info("socket")
        # (asyncio's own loop, whose transports wait for a socket as this does; no TLS: the bytes go as they are)
        plain = sock is not None and transport.get_extra_info("sslcontext") is None
        if plain and hasattr(self.loop, "_add_writer") and hasattr(self.loop, "_remove_writer"):
            self._fd = sock.fileno()
        transport.set_write_buffer_limits(high=WRITE_BUFFER)  # (a slow reader's answer waits at this much)
        self._keep_sweeping()
        self._arm("headers", self.header_timeout)

    def _keep_sweeping(self) -> None:
        """One sweep a server, on its loop, running while it holds connections (a close waits for what is buffered:
        forever, if it is never read): started by a connection that finds none, or one on another loop (the same
        server stopped while its sweep was due, then run again)."""
        sweeping = GuardedProtocol.sweeping
        for key, (_, loop, _) in list(sweeping.items()):  # (servers whose loop has closed: theirs go)
            if loop.is_closed():
                sweeping.pop(key, None)
        sweep = sweeping.get(id(self.connections))
        if sweep is None or sweep[1] is not self.loop:
            self._sweep_next()

    def _sweep_next(self) -> None:
        GuardedProtocol.sweeping[id(self.connections)] = (
            self.connections,
            self.loop,
            self.loop.call_later(SWEEP_EVERY, self._sweep),
        )

    def _sweep(self) -> None:
        """Abort each connection that has been closing for ``close_grace`` seconds with bytes still buffered for it
        (its client stopped reading: a close alone would hold it until they are sent); every ``SWEEP_EVERY``
        seconds while the server holds connections (class-wide, over the server's set of them). A sweep whose
        server has since been run again on another loop stops: that loop's sweep took its place."""
        sweep = GuardedProtocol.sweeping.get(id(self.connections))
        if sweep is None or sweep[1] is not self.loop:
            return
        now = time.monotonic()
        for held in list(self.connections):
            if isinstance(held, GuardedProtocol):
                try:
                    held.swept(now)
                except Exception:  # (never the end of the sweep: the other connections are still to be seen)
                    log.exception("the sweep of closing connections failed on one")
        if self.connections:
            self._sweep_next()
        else:
            GuardedProtocol.sweeping.pop(id(self.connections), None)

    def swept(self, now: float) -> None:
        """This connection, seen by the sweep at ``now``: aborted once it has been closing for ``close_grace``
        seconds with bytes still buffered for it."""
        transport = self.transport
        if transport is None or not (transport.is_closing() and transport.get_write_buffer_size()):
            self._closing_since = 0.0
        elif not self._closing_since:
            self._closing_since = now
        elif now - self._closing_since >= self.close_grace:
            transport.abort()

    def data_received(self, data: bytes) -> None:
        if self._phase in ("headers", "idle"):  # a request's head, counted before it is parsed, however it arrives
            joined = self._head_tail + data
            end = joined.find(b"\r\n\r\n")
            self._head_bytes += len(data) if end < 0 else max(0, end + 4 - len(self._head_tail))
            if self._head_bytes > MAX_HEADER_BYTES:
                self._too_large()
                return
            self._head_tail = joined[-3:] if end < 0 else b""
            if end >= 0:
                self._head_bytes = 0
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._phase != "headers":  # a request after an answer: its headers' deadline from its first byte
            self._arm("headers", self.header_timeout)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        if self.scope.get("http_version") == "1.0" and type(self.cycle) is RequestResponseCycle:
            self.cycle.__class__ = _Http10Cycle  # (its task not yet run: it sends through the class's own send)
        extensions: dict[str, Any] = self.scope.setdefault("extensions", {})  # (the request's task not yet run)
        extensions[ABORT] = self._abort
        extensions[SEND_BUFFER] = self._send_buffer
        if self._fd >= 0 and self.scope["method"] == "GET" and self.scope["http_version"] == "1.1":
            extensions[WRITE_CHUNK] = self._write_chunk  # (the answer is chunked: HTTP/1.1, no length)
        self._arm("body", self.body_timeout)  # (disarmed at once when it has none: its message is complete)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()  # the request is in: no deadline on it while it is answered

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport is not None and not self.transport.is_closing() and self.cycle is not None:
            self._phase = "idle"  # kept alive for the next request (uvicorn's keep-alive ends it): evictable
            GuardedProtocol.waiting[self] = None

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stalled is None:  # the client takes nothing: past the deadline its connection is cut
            self._stalled = self.loop.call_later(self.send_timeout, self._send_expired)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._stalled is not None:  # it took some: progress, the deadline starts again when it stops
            self._stalled.cancel()
            self._stalled = None

    def _send_expired(self) -> None:
        self._stalled = None
        if self.transport is not None and not self.transport.is_closing():
            log.info("a client took none of its answer for %g s: its connection closed", self.send_timeout)
            self.transport.abort()

    def _too_large(self) -> None:
        self._disarm()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(TOO_LARGE)
            self.transport.close()

    def _counted(self, transport: asyncio.Transport) -> bool:
        """Count the connection under its client address (an IPv6 /64 is one client); False when that client holds
        ``client_connections`` already. A trusted proxy's connections are not counted."""
        peer = transport.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) and peer else ""
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return True  # (a Unix socket: the proxy in front of it)
        if any(address in network for network in self.trusted):
            return True
        client = client_of(host)
        held = GuardedProtocol.per_client.get(client, 0)
        if held >= self.client_connections:
            now = time.monotonic()
            if now - GuardedProtocol.refused_at > WARN_EVERY:
                GuardedProtocol.refused_at = now
                log.warning("a client holds %d connections already: its new ones are answered 429", held)
            return False
        GuardedProtocol.per_client[client] = held + 1
        self._client = client
        return True

    # connections held per client address (class-wide)
    per_client: dict[str, int] = {}

    def connection_lost(self, exc: Exception | None) -> None:
        if self._client:
            left = GuardedProtocol.per_client.get(self._client, 1) - 1
            if left > 0:
                GuardedProtocol.per_client[self._client] = left
            else:
                GuardedProtocol.per_client.pop(self._client, None)
            self._client = ""
        self._disarm()
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None
        self._stop_waiting()  # (before the transport closes the socket: its number may be another's next)
        self._fd = -1
        super().connection_lost(exc)
        left = len(self.connections)
        if GuardedProtocol.peak >= CROWD and left * 4 <= GuardedProtocol.peak and not GuardedProtocol.trimming:
            GuardedProtocol.trimming = True
            self.loop.call_later(TRIM_AFTER, self._crowd_left)

    def _crowd_came(self) -> None:
        GuardedProtocol.crowded = thresholds = gc.get_threshold()
        gc.set_threshold(thresholds[0], thresholds[1], 2**31 - 1)  # (the oldest generation waits)
        self.loop.call_later(CROWD_COLLECT, self._crowd_stays, thresholds)

    def _crowd_stays(self, thresholds: tuple[int, ...]) -> None:
        if GuardedProtocol.crowded is thresholds:
            gc.collect()
            self.loop.call_later(CROWD_COLLECT, self._crowd_stays, thresholds)

    def _crowd_left(self) -> None:
        GuardedProtocol.trimming = False
        GuardedProtocol.peak = len(self.connections)
        if GuardedProtocol.crowded is not None and len(self.connections) < CROWD:
            gc.set_threshold(*GuardedProtocol.crowded)
            GuardedProtocol.crowded = None
        gc.collect()
        if self.give_back:
            give_back_memory()

    def _evict(self) -> bool:
        """Room made by aborting the idle connection (a request not all in, or kept alive between requests) that has
        waited longest: whether one was."""
        waiting = GuardedProtocol.waiting
        while waiting:
            oldest, _ = waiting.popitem(last=False)
            if oldest.transport is not None and not oldest.transport.is_closing():
                oldest._disarm()
                oldest.transport.abort()
                return True
        return False

    # the idle connections (a request's head or body not all in, or kept alive between requests), the one waiting
    # longest first (class-wide)
    waiting: collections.OrderedDict[GuardedProtocol, None] = collections.OrderedDict()

    def _arm(self, phase: str, seconds: float) -> None:
        self._disarm()
        self._phase = phase
        if phase in ("headers", "body"):  # (a request not all in: its connection may make room for a newcomer)
            GuardedProtocol.waiting[self] = None
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        GuardedProtocol.waiting.pop(self, None)
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline, self._phase = None, ""

    def _expired(self) -> None:
        self._deadline = None
        if self.transport is not None and not self.transport.is_closing():
            log.info("a connection sent no whole request %s in time: closed", self._phase)
            self.transport.abort()

    def _abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    async def _write_chunk(self, data: bytes | memoryview) -> bool:
        """``data`` as one chunk of the answer under way (chunked), written from where it is: False when the
        connection is gone. What the transport still holds of the answer goes first, through it."""
        cycle = self.cycle
        if self.transport is None or self.transport.is_closing() or cycle is None or cycle.disconnected:
            return False
        if not cycle.chunked_encoding:  # (an answer with a length: its bytes as they are, through the server)
            await cycle.send({"type": "http.response.body", "body": bytes(data), "more_body": True})
            return not cycle.disconnected
        framed: list[bytes | memoryview] = [b"%x\r\n" % len(data), data, b"\r\n"]
        if self.transport.get_write_buffer_size():
            self.transport.writelines([bytes(part) for part in framed])
            if self.flow.write_paused:
                await self.flow.drain()
            return not cycle.disconnected
        while framed:
            try:
                sent = os.writev(self._fd, framed)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:  # (the connection broken: the transport learns it as it reads)
                return False
            framed = _after(framed, sent)
            if framed:
                await self._until_writable()
                if self._fd < 0 or cycle.disconnected:
                    return False
        return True

    async def _until_writable(self) -> None:
        waiting = self._writable = self.loop.create_future()
        self.loop._add_writer(self._fd, _wake, waiting)  # type: ignore[attr-defined]  # (the transport's socket)
        try:
            await waiting
        finally:
            self._stop_waiting()

    def _stop_waiting(self) -> None:
        waiting, self._writable = self._writable, None
        if waiting is not None:
            self.loop._remove_writer(self._fd)  # type: ignore[attr-defined]
            _wake(waiting)

    def _send_buffer(self, size: int) -> None:
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)


class _Http10Cycle(RequestResponseCycle):
    """An HTTP/1.0 request's answer: one without a length (a stream) is sent as it is and ended by the connection's
    close, as HTTP/1.0 has no chunked framing (uvicorn's httptools protocol would frame it in chunks)."""

    _close_delimited = False

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.start" and not self.response_started:
            names = {bytes(name).lower() for name, _ in message.get("headers", [])}
            if b"content-length" not in names and b"transfer-encoding" not in names and self.scope["method"] != "HEAD":
                self._close_delimited, self.chunked_encoding = True, False
                self.expected_content_length = 2**62  # (counted down by the body's bytes: no length to keep to)
        elif self._close_delimited and message["type"] == "http.response.body" and not message.get("more_body"):
            self.expected_content_length = len(message.get("body", b""))  # (the last body: the answer ends here)
        await super().send(message)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _after(parts: list[bytes | memoryview], sent: int) -> list[bytes | memoryview]:
    """What is left of ``parts`` once ``sent`` bytes of them were written."""
    for n, part in enumerate(parts):
        if sent < len(part):
            return [memoryview(part)[sent:], *parts[n + 1 :]]
        sent -= len(part)
    return []


def settle(settings: Settings) -> None:
    """The objects made so far (the app, its modules, its services) frozen: the cyclic collector leaves them be
    (``QUOTECLIP_CROWD_GC``)."""
    if settings.crowd_gc:
        gc.collect()
        gc.freeze()


def protocol(settings: Settings) -> type[GuardedProtocol]:
    """The protocol class with this service's deadlines and cap."""
    return type(
        "QuoteclipProtocol",
        (GuardedProtocol,),
        {
            "header_timeout": settings.header_timeout,
            "body_timeout": settings.body_timeout,
            "send_timeout": settings.send_timeout,
            "max_connections": settings.max_connections,
            "client_connections": settings.client_connections,
            "trusted": tuple(ipaddress.ip_network(n, strict=False) for n in settings.trusted_proxies),
            "close_grace": settings.stream_send_timeout,
            "crowd_gc": settings.crowd_gc,
            "give_back": settings.give_back_memory,
        },
    )


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's options for the API: the protocol above, keep-alive, the listening backlog, and the event loop
    ``QUOTECLIP_EVENT_LOOP`` names (asyncio's own by default, even when uvloop is installed: a chunk written from
    where it is waits for its socket with the selector loop's ``_add_writer``; on uvloop the chunks go through the
    server's own writes, the rest alike). BadInput when uvloop is named and not installed."""
    if settings.event_loop == "uvloop":
        import importlib.util

        if importlib.util.find_spec("uvloop") is None:
            raise BadInput("QUOTECLIP_EVENT_LOOP=uvloop needs uvloop, which is not installed: pip install uvloop")
    return {
        "http": protocol(settings),
        "loop": settings.event_loop,
        "timeout_keep_alive": settings.keep_alive,
        "backlog": max(128, min(4096, settings.max_connections)),
    }
