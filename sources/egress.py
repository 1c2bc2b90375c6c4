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
"""

from __future__ import annotations

import base64
import hmac
import logging
import secrets
import selectors
import socket
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from quoteclip.errors import QuoteclipError

from .loopback import LoopbackServer
from .safety import check_url, proxy_tunnel

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0
IDLE_TIMEOUT = 30.0  # a tunnel with no traffic either way for this long is closed
MAX_BYTES = 256 * 1024**2  # per tunnel or request: extraction reads pages and scripts, not media
HOP_HEADERS = (b"connection:", b"keep-alive:", b"proxy-connection:")
REFUSED = b"quoteclip: this address is not reachable for sources"
UNAUTHORIZED = b"quoteclip: this proxy serves one extraction only"


class EgressProxy(LoopbackServer):
    """A loopback forward proxy that lets through only connections the address rules allow, asked for with its
    credential."""

    name = "egress-proxy"

    def __init__(self, allowed_networks: tuple[str, ...] = (), upstream: str | None = None) -> None:
        self.allowed_networks = allowed_networks
        self.upstream = upstream  # the operator's proxy (QUOTECLIP_PROXY): every vetted connection goes through it
        self.refused: list[str] = []  # host:port refused by the address rules (never connected to)
        self.failed: list[str] = []  # host:port allowed, but the connection failed
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
        try:
            if self.upstream is not None:
                return proxy_tunnel(self.upstream, target.address, target.port, CONNECT_TIMEOUT)
            return socket.create_connection((target.address, target.port), timeout=CONNECT_TIMEOUT)
        except OSError:
            self.failed.append(f"{host}:{port}")
            return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

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
                _pipe(self.connection, upstream)
                self.close_connection = True

            def forward(self) -> None:
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
                for attempt in range(2):  # a GET whose connection closed before any answer is asked once more
                    try:
                        upstream.sendall(request)
                        answered = _copy(upstream, self.connection, closing=True)
                    except OSError:
                        answered = 0
                    finally:
                        upstream.close()
                    if answered or attempt or self.command not in ("GET", "HEAD"):
                        break
                    upstream = proxy.connect("http", parts.hostname, parts.port or 80)
                    if upstream is None:
                        break
                if not answered:
                    self.refuse()
                self.close_connection = True

            do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_OPTIONS = forward  # noqa: N815

        return Handler


def _copy(src: socket.socket, dst: socket.socket, closing: bool = False) -> int:
    """One direction until EOF, the byte cap or an idle timeout; the bytes written. ``closing``: the bytes are an
    HTTP response, marked ``Connection: close`` so the client opens a new connection (and a new check) for its
    next request."""
    sent = 0
    head: bytes | None = b"" if closing else None  # the response's header block, until it is complete
    src.settimeout(IDLE_TIMEOUT)
    try:
        while sent < MAX_BYTES:
            data = src.recv(65536)
            if not data:
                return sent
            if head is not None:
                head += data
                end = head.find(b"\r\n\r\n")
                if end < 0:
                    if len(head) > 64 * 1024:
                        return sent  # no end of headers in 64 KiB: not an HTTP response
                    continue
                kept = [h for h in head[:end].split(b"\r\n") if not h.lower().startswith(HOP_HEADERS)]
                data, head = b"\r\n".join([*kept, b"Connection: close"]) + head[end:], None
            dst.sendall(data)
            sent += len(data)
    except OSError:
        return sent
    return sent


def _pipe(client: socket.socket, upstream: socket.socket) -> None:
    """Both directions of a CONNECT tunnel until either side closes, the byte cap or an idle timeout. (A selector,
    not select(): a long-lived process may hold file descriptors past select's limit of 1024.)"""
    sent = 0
    last = time.monotonic()
    selector = selectors.DefaultSelector()
    try:
        selector.register(client, selectors.EVENT_READ)
        selector.register(upstream, selectors.EVENT_READ)
        while sent < MAX_BYTES and time.monotonic() - last < IDLE_TIMEOUT:
            for key, _ in selector.select(1.0):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                data = sock.recv(65536)
                if not data:
                    return
                (upstream if sock is client else client).sendall(data)
                sent += len(data)
                last = time.monotonic()
    except (OSError, ValueError):
        return
    finally:
        selector.close()
        upstream.close()
