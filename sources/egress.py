"""The outbound policy for what yt-dlp fetches itself (pages, player scripts, manifests, redirects, API calls).

yt-dlp is given this loopback forward proxy as its ``proxy``: every request it makes — whatever extractor,
whatever redirect or ``<source>`` a page names — arrives here as ``CONNECT host:port`` (https) or an
absolute-form request (http). The host is resolved and its address checked by the same rules as every other
source request (``sources.safety.check_url``: no loopback, private, link-local or metadata address unless
allowed), and the connection goes to the vetted address, so a name cannot be re-resolved elsewhere.

A refused address is never connected to, and a refusal and a failed connection get the same answer (``403``
with one fixed text): what a client learns cannot tell closed ports, open ports and live hosts of the worker's
network apart.

The proxy answers only the extraction it was started for: each instance has its own random credential, which
yt-dlp sends (``Proxy-Authorization``, from the user and password in ``url``); a request without it is answered
``407`` and nothing is connected, so another process on the machine cannot use the proxy to reach the outside.

Each connection carries one request (yt-dlp is told to close after each, ``sources.ytdlp``), so the limits on a
connection are the limits on a request, also inside an HTTPS tunnel whose bytes the proxy cannot read: a total
deadline from the connection to the response's last byte, a stall limit (nothing from the server for so long) and
a rate floor (the server's bytes averaged over the connection's life, once it has run the stall limit). A
connection past any of them is cut and recorded in ``cut``.
"""

from __future__ import annotations

import base64
import hmac
import logging
import secrets
import selectors
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from quoteclip.errors import QuoteclipError
from quoteclip.settings import DECLARED, env_text

from .loopback import LoopbackServer
from .safety import check_url, proxy_tunnel

log = logging.getLogger(__name__)

MAX_BYTES = 256 * 1024**2  # per connection, as sent (compressed): extraction reads pages and scripts, not media
HOP_HEADERS = (b"connection:", b"keep-alive:", b"proxy-connection:")
REFUSED = b"quoteclip: this address is not reachable for sources"
UNAUTHORIZED = b"quoteclip: this proxy serves one extraction only"
TICK = 0.25  # seconds between checks of a connection's limits while it waits


@dataclass(frozen=True)
class PageLimits:
    """What one request yt-dlp makes may cost (``QUOTECLIP_PAGE_*``): ``timeout`` seconds in all, from the connection
    to the response's last byte; ``stall`` seconds with nothing from the server (also the time to connect); at
    least ``min_rate`` bytes a second averaged over the request, once it has run ``stall`` seconds; ``max_bytes``
    of response once decompressed (enforced where yt-dlp reads, ``sources.ytdlp``)."""

    timeout: float
    stall: float
    min_rate: float
    max_bytes: int


def _declared(name: str, text: str | None) -> Any:
    """A ``QUOTECLIP_PAGE_*`` value read by its declaration's parser; its declared default when unset."""
    setting = next(s for s in DECLARED if s.name == name)
    return setting.parse(text if text is not None else str(setting.default), name)


def page_limits(env: Mapping[str, str] | None = None) -> PageLimits:
    """The limits on each request yt-dlp makes, from the environment (read at each extraction; the defaults are
    the declarations')."""
    return PageLimits(
        timeout=_declared("QUOTECLIP_PAGE_TIMEOUT", env_text("QUOTECLIP_PAGE_TIMEOUT", env)),
        stall=_declared("QUOTECLIP_PAGE_STALL", env_text("QUOTECLIP_PAGE_STALL", env)),
        min_rate=_declared("QUOTECLIP_PAGE_MIN_RATE", env_text("QUOTECLIP_PAGE_MIN_RATE", env)),
        max_bytes=_declared("QUOTECLIP_PAGE_MAX_MB", env_text("QUOTECLIP_PAGE_MAX_MB", env)),
    )


class Meter:
    """One connection's clock and byte count against the limits: which limit it is past, if any."""

    def __init__(self, limits: PageLimits) -> None:
        self.limits = limits
        self.began = self.last = time.monotonic()
        self.received = 0

    def got(self, count: int) -> None:
        self.received += count
        self.last = time.monotonic()

    def past(self) -> str | None:
        """``timeout``, ``stall`` or ``min_rate``: the limit this connection is past; None while within them."""
        now = time.monotonic()
        ran = now - self.began
        if ran > self.limits.timeout:
            return "timeout"
        if now - self.last > self.limits.stall:
            return "stall"
        if ran >= self.limits.stall and self.received < self.limits.min_rate * ran:
            return "min_rate"
        return None


class EgressProxy(LoopbackServer):
    """A loopback forward proxy that lets through only connections the address rules allow, asked for with its
    credential, each within the limits of one request."""

    name = "egress-proxy"

    def __init__(
        self, allowed_networks: tuple[str, ...] = (), upstream: str | None = None, limits: PageLimits | None = None
    ) -> None:
        self.allowed_networks = allowed_networks
        self.upstream = upstream  # the operator's proxy (QUOTECLIP_PROXY): every vetted connection goes through it
        self.limits = limits or page_limits()
        self.refused: list[str] = []  # host:port refused by the address rules (never connected to)
        self.failed: list[str] = []  # host:port allowed, but the connection failed
        self.cut: list[str] = []  # the limit (PageLimits' field) each connection cut short was past
        self.unauthorized = 0  # requests without this proxy's credential (answered 407, nothing connected)
        self.user, self.password = "quoteclip", secrets.token_urlsafe(24)
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        self._authorization = f"Basic {token}".encode()
        super().__init__()

    @property
    def address(self) -> str:
        """The proxy's own URL, without its credential."""
        return super().url

    @property
    def url(self) -> str:
        """The URL yt-dlp is given: with this proxy's credential."""
        return f"http://{self.user}:{self.password}@127.0.0.1:{self.server.server_address[1]}"

    def authorized(self, header: str | None) -> bool:
        return header is not None and hmac.compare_digest(header.strip().encode(), self._authorization)

    def connect(self, scheme: str, host: str, port: int) -> socket.socket | None:
        """A socket to the vetted address of host:port, or None (refused, or the connection failed)."""
        bracketed = f"[{host}]" if ":" in host else host
        try:
            target = check_url(f"{scheme}://{bracketed}:{port}/", None, self.allowed_networks)
        except (QuoteclipError, ValueError) as exc:
            log.info("egress refused %s:%s (%s)", host, port, str(exc).splitlines()[0] if str(exc) else "")
            self.refused.append(f"{host}:{port}")
            return None
        timeout = min(self.limits.stall, self.limits.timeout)
        try:
            if self.upstream is not None:
                return proxy_tunnel(self.upstream, target.address, target.port, timeout)
            return socket.create_connection((target.address, target.port), timeout=timeout)
        except OSError:
            self.failed.append(f"{host}:{port}")
            return None

    def record_cut(self, limit: str, host: str) -> None:
        log.info("egress cut a request to %s: past its %s", host, limit)
        self.cut.append(limit)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = proxy.limits.stall  # a client that sends no request in time is dropped

            def log_message(self, format: str, *args: object) -> None:
                log.debug("egress: " + format, *args)

            def answer(self, status: int, text: bytes, extra: tuple[tuple[str, str], ...] = ()) -> None:
                self.send_response(status)
                for name, value in (("Content-Type", "text/plain"), *extra):
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(text)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(text)
                self.close_connection = True

            def refuse(self) -> None:
                self.answer(403, REFUSED)

            def authorized(self) -> bool:
                if proxy.authorized(self.headers.get("Proxy-Authorization")):
                    return True
                proxy.unauthorized += 1
                self.answer(407, UNAUTHORIZED, (("Proxy-Authenticate", 'Basic realm="quoteclip"'),))
                return False

            def do_CONNECT(self) -> None:
                meter = Meter(proxy.limits)
                if not self.authorized():
                    return
                host, _, port = self.path.rpartition(":")
                host = host.strip("[]")
                if not host or not port.isdigit():
                    self.refuse()
                    return
                upstream = proxy.connect("https", host, int(port))
                if upstream is None:
                    self.refuse()
                    return
                self.send_response(200, "Connection established")
                self.end_headers()
                self.wfile.flush()
                past = _pipe(self.connection, upstream, meter)
                if past is not None:
                    proxy.record_cut(past, host)
                self.close_connection = True

            def forward(self) -> None:
                meter = Meter(proxy.limits)
                if not self.authorized():
                    return
                parts = urlsplit(self.path)
                if parts.scheme != "http" or not parts.hostname:
                    self.refuse()
                    return
                upstream = proxy.connect("http", parts.hostname, parts.port or 80)
                if upstream is None:
                    self.refuse()
                    return
                path = parts.path or "/"
                if parts.query:
                    path += "?" + parts.query
                head = [f"{self.command} {path} HTTP/1.1"]
                for name, value in self.headers.items():
                    if name.lower() not in {"proxy-connection", "proxy-authorization", "connection", "keep-alive"}:
                        head.append(f"{name}: {value}")
                head.append("Connection: close")
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(min(length, MAX_BYTES)) if length else b""
                request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
                past = None
                for attempt in range(2):  # a GET whose connection closed before any answer is asked once more
                    try:
                        upstream.sendall(request)
                        answered, past = _copy(upstream, self.connection, meter, closing=True)
                    except OSError:
                        answered = 0
                    finally:
                        upstream.close()
                    if answered or past or attempt or self.command not in ("GET", "HEAD"):
                        break
                    upstream = proxy.connect("http", parts.hostname, parts.port or 80)
                    if upstream is None:
                        break
                if past is not None:
                    proxy.record_cut(past, parts.hostname)
                elif not answered:
                    self.refuse()
                self.close_connection = True

            do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_OPTIONS = forward

        return Handler


def _copy(src: socket.socket, dst: socket.socket, meter: Meter, closing: bool = False) -> tuple[int, str | None]:
    """One direction until EOF, the byte cap or a limit of ``meter``; the bytes written, and the limit the
    connection went past (None: it ended by itself). ``closing``: the bytes are an HTTP response, marked
    ``Connection: close`` so the client opens a new connection (and a new check) for its next request."""
    sent = 0
    head: bytes | None = b"" if closing else None  # the response's header block, until it is complete
    try:
        while sent < MAX_BYTES:
            past = meter.past()
            if past is not None:
                return sent, past
            src.settimeout(TICK)
            try:
                data = src.recv(65536)
            except TimeoutError:
                continue
            if not data:
                return sent, None
            meter.got(len(data))
            if head is not None:
                head += data
                end = head.find(b"\r\n\r\n")
                if end < 0:
                    if len(head) > 64 * 1024:
                        return sent, None  # no end of headers in 64 KiB: not an HTTP response
                    continue
                kept = [h for h in head[:end].split(b"\r\n") if not h.lower().startswith(HOP_HEADERS)]
                data, head = b"\r\n".join([*kept, b"Connection: close"]) + head[end:], None
            dst.sendall(data)
            sent += len(data)
    except OSError:
        return sent, None
    return sent, None


def _pipe(client: socket.socket, upstream: socket.socket, meter: Meter) -> str | None:
    """Both directions of a CONNECT tunnel until either side closes, the byte cap or a limit of ``meter`` (counting
    the server's bytes); the limit it went past, if any. (A selector, not select(): a long-lived process may hold
    file descriptors past select's limit of 1024.)"""
    sent = 0
    selector = selectors.DefaultSelector()
    try:
        selector.register(client, selectors.EVENT_READ)
        selector.register(upstream, selectors.EVENT_READ)
        while sent < MAX_BYTES:
            past = meter.past()
            if past is not None:
                return past
            for key, _ in selector.select(TICK):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                data = sock.recv(65536)
                if not data:
                    return None
                (upstream if sock is client else client).sendall(data)
                sent += len(data)
                if sock is upstream:
                    meter.got(len(data))
    except (OSError, ValueError):
        return None
    finally:
        selector.close()
        upstream.close()
    return None
