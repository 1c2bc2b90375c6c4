"""Range requests to a source, safely: every hop (redirects included) is checked and the connection goes
to the vetted address; bounded in bytes, time and rate.

Time is bounded per request, not only per read: the response's headers must be in within ``header_timeout`` of
the request (a watchdog shuts the connection down when they are not, so an origin dripping its headers a byte at
a time cannot hold a job), any single read that stalls ``read_timeout`` fails, and the rate floor is measured
from the request's start, the wait for the headers included."""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urljoin

import urllib3

from quoteclip.errors import SourceThrottled, SourceTransient, SourceUnavailable

from .safety import CheckedURL, check_url, connection_pool, host_header, request_target

if TYPE_CHECKING:
    from http.cookiejar import CookieJar

log = logging.getLogger(__name__)

MAX_REDIRECTS = 5
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 20.0  # a stall longer than this fails the read
HEADER_TIMEOUT = 20.0  # seconds from a request to its response's headers at most
RATE_GRACE = 30.0  # seconds before the rate floor applies
USER_AGENT = "quoteclip/0.1 (+https://github.com/quoteclip)"
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class LinkRefused(SourceUnavailable):
    """HTTP 403 or 410 on a media URL: refused or expired. An extracted URL is then extracted again once."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class RangeResponse:
    data: bytes
    start: int
    total: int | None  # full size of the resource, when the server says
    etag: str | None
    whole: bool = False  # the origin ignored the Range and sent the whole resource, to the ``WholeBody`` given


class WholeBody(Protocol):
    """Where the body goes when an origin ignores a Range and answers 200 with the whole resource: it is read once,
    from byte 0, in order, instead of again for every range."""

    def begin(self, total: int, etag: str | None) -> None:
        """Before the first byte, with the resource's size (its Content-Length); may refuse by raising."""

    def write(self, chunk: bytes) -> None:
        """The next bytes of the body."""


class _Deadline:
    """The time one request may take to its response's headers. When it passes first, the request's connection is
    shut down, so a read blocked on an origin that drips its headers returns at once, and ``passed`` says why."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.passed = False
        self._conn: Any = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, conn: Any) -> None:
        with self._lock:
            self._conn = conn
            if self.passed:
                _shut(conn)

    def _fire(self) -> None:
        with self._lock:
            self.passed = True
            if self._conn is not None:
                _shut(self._conn)

    def cancel(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._conn = None  # a connection the pool hands out again is never shut by a late timer


def _shut(conn: Any) -> None:
    sock = getattr(conn, "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


_watching = threading.local()  # the deadline of the request this thread is making


_WATCHED: dict[type, type] = {}


def _watched(cls: type) -> type:
    """``cls`` (urllib3's connection class of a pool), reading each response's headers under the deadline of the
    request the calling thread is making."""
    if cls not in _WATCHED:

        class Watched(cls):
            def getresponse(self, *args: Any, **kwargs: Any) -> Any:
                deadline = getattr(_watching, "deadline", None)
                if deadline is not None:
                    deadline.watch(self)
                return super().getresponse(*args, **kwargs)

        _WATCHED[cls] = Watched
    return _WATCHED[cls]


@dataclass
class Fetcher:
    """Fetches byte ranges of URLs; counts what it fetched; enforces the caps for one job."""

    allowed_hosts: tuple[str, ...] | None
    allowed_networks: tuple[str, ...] = ()
    max_bytes: int = 1024**3
    min_rate: int = 32 * 1024
    read_timeout: float = READ_TIMEOUT
    rate_grace: float = RATE_GRACE
    header_timeout: float = HEADER_TIMEOUT
    cookies: CookieJar | None = None  # the operator's cookies file: a Cookie header for the URLs it covers
    per_origin: int = 4  # requests in flight to one host at most
    origin_rate: float = 0.0  # requests a second to one host at most (0: no limit)
    proxy: str | None = None  # the operator's QUOTECLIP_PROXY: every request goes through it
    fetched: int = 0
    requests: int = 0
    _pools: dict[tuple[str, str, int, str], urllib3.HTTPConnectionPool] = field(default_factory=dict)
    _origins: dict[str, threading.BoundedSemaphore] = field(default_factory=dict)
    _next_at: dict[str, float] = field(default_factory=dict)  # host -> when its next request may start
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()

    def _pool(self, target: CheckedURL) -> urllib3.HTTPConnectionPool:
        key = (target.scheme, target.address, target.port, target.host)
        if key not in self._pools:
            timeout = urllib3.Timeout(connect=CONNECT_TIMEOUT, read=self.read_timeout)
            pool = connection_pool(target, timeout, proxy=self.proxy)
            pool.ConnectionCls = _watched(pool.ConnectionCls)
            self._pools[key] = pool
        return self._pools[key]

    def _origin(self, host: str) -> threading.BoundedSemaphore:
        with self._lock:
            if host not in self._origins:
                self._origins[host] = threading.BoundedSemaphore(self.per_origin)
            return self._origins[host]

    def _pace(self, host: str) -> None:
        """Keep to ``origin_rate`` requests a second to ``host`` (the time slots are handed out in order)."""
        if self.origin_rate <= 0:
            return
        with self._lock:
            now = time.monotonic()
            at = max(now, self._next_at.get(host, 0.0))
            self._next_at[host] = at + 1.0 / self.origin_rate
        if at > now:
            time.sleep(at - now)

    def cookie_header(self, url: str) -> str | None:
        if self.cookies is None:
            return None
        from urllib.request import Request

        request = Request(url)
        self.cookies.add_cookie_header(request)
        return request.get_header("Cookie")

    def get_document(self, url: str, cap: int, headers: dict[str, str] | None = None, what: str = "document") -> bytes:
        """A small document (a playlist, a segment) whole, by a GET without a Range, refused over ``cap`` bytes."""
        return self.get_range(url, None, None, check_hosts=False, headers=headers, cap=(cap, what)).data

    def get_range(
        self,
        url: str,
        start: int | None,
        end: int | None,
        check_hosts: bool = True,
        headers: dict[str, str] | None = None,
        cap: tuple[int, str] | None = None,
        whole: WholeBody | None = None,
    ) -> RangeResponse:
        """GET bytes ``start``..``end`` (inclusive; None: to the end; ``start`` None: no Range, the whole body) of
        ``url``, following checked redirects. ``headers``: the format's own (yt-dlp's ``http_headers``), sent with
        every hop. ``whole``: where the body goes if the origin ignores the Range and sends the whole resource (the
        answer's ``whole`` is then true and its ``data`` empty); without it, only the bytes asked for are kept."""
        hosts = self.allowed_hosts if check_hosts else None
        extra = headers or {}
        current = url
        for _ in range(MAX_REDIRECTS + 1):
            target = check_url(current, hosts, self.allowed_networks)
            sent = {
                **extra,
                "Host": host_header(target),
                "User-Agent": extra.get("User-Agent", USER_AGENT),
                "Accept-Encoding": "identity",
            }
            if start is not None:
                sent["Range"] = f"bytes={start}-{'' if end is None else end}"
            cookie = self.cookie_header(current)
            if cookie:
                sent["Cookie"] = cookie
            self.requests += 1
            origin = self._origin(target.host)
            origin.acquire()
            try:
                self._pace(target.host)
                began = time.monotonic()
                resp = self._open(target, sent)
                ended = False  # the body was read to its end: the connection may serve the next request
                try:
                    if resp.status in (301, 302, 303, 307, 308):
                        location = resp.headers.get("Location")
                        if not location:
                            raise SourceUnavailable(f"source redirect without a Location (HTTP {resp.status})")
                        current = urljoin(current, location)
                        hosts = None  # the first URL passed the allowlist; every hop still passes the address check
                        continue
                    answer = self._read(resp, start, end, target, cap, whole, began)
                    ended = True
                    return answer
                finally:
                    if not ended:  # a refusal's or redirect's body, or one left unread: never read (it could drip
                        resp.close()  # for ever), the connection is closed instead
                    resp.release_conn()
            finally:
                origin.release()
        raise SourceUnavailable(f"source redirected more than {MAX_REDIRECTS} times: {url}")

    def _open(self, target: CheckedURL, sent: dict[str, str]) -> Any:
        """Send the request; the response once its headers are in, within ``header_timeout``."""
        deadline = _Deadline(self.header_timeout)
        _watching.deadline = deadline
        try:
            resp = self._pool(target).urlopen(
                "GET",
                request_target(target, self.proxy),
                headers=sent,
                redirect=False,
                retries=False,
                preload_content=False,
                assert_same_host=False,
            )
        except urllib3.exceptions.HTTPError as exc:
            if deadline.passed:
                raise self._no_headers(target) from None
            raise SourceTransient(f"source could not be reached ({_reason(exc)}): {target.host}") from None
        finally:
            _watching.deadline = None
            deadline.cancel()
        if deadline.passed:  # (the headers came as the deadline passed: the connection may be shut down)
            resp.close()
            resp.release_conn()
            raise self._no_headers(target)
        return resp

    def _no_headers(self, target: CheckedURL) -> SourceTransient:
        return SourceTransient(
            f"source too slow: no response headers within {self.header_timeout:g} s "
            f"(QUOTECLIP_FETCH_HEADER_TIMEOUT): {target.host}"
        )

    def _read(
        self,
        resp: Any,
        start: int | None,
        end: int | None,
        target: CheckedURL,
        cap: tuple[int, str] | None,
        whole: WholeBody | None,
        began: float,
    ) -> RangeResponse:
        status = resp.status
        if status == 404:
            raise SourceUnavailable(f"source not found (HTTP {status}): {target.url}")
        if status == 410:
            raise LinkRefused(f"source not found (HTTP {status}): {target.url}", status)
        if status == 416:
            raise SourceUnavailable(f"source refused the byte range {start or 0}- (HTTP 416): {target.url}")
        if status == 403:
            raise LinkRefused(f"source refused (HTTP {status}): {target.url}", status)
        if status == 429:
            raise SourceThrottled(f"the source host is throttling requests (HTTP 429): {target.host}")
        if 400 <= status < 500:
            raise SourceUnavailable(f"source refused (HTTP {status}): {target.url}")
        if status >= 500:
            raise SourceTransient(f"source server error (HTTP {status}): {target.url}")
        if status not in (200, 206):
            raise SourceUnavailable(f"source answered HTTP {status}: {target.url}")
        total: int | None = None
        got_start = 0
        etag = resp.headers.get("ETag")
        if status == 206:
            match = _CONTENT_RANGE.match(resp.headers.get("Content-Range", ""))
            if not match:
                raise SourceUnavailable(f"source sent a bad Content-Range: {target.url}")
            got_start = int(match.group(1))
            total = int(match.group(3)) if match.group(3) != "*" else None
        else:
            length = resp.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        if status == 200 and start is not None and whole is not None:
            return self._read_whole(resp, target, total, etag, whole, began)
        want = None if end is None else end + 1 - got_start if status == 206 else end + 1
        data = self._body(resp, want, target, cap, began)
        if status == 200 and start:  # the server ignored the range: keep only what was asked for
            data = data[start:]
            got_start = start
        return RangeResponse(data, got_start, total, etag)

    def _read_whole(
        self, resp: Any, target: CheckedURL, total: int | None, etag: str | None, whole: WholeBody, began: float
    ) -> RangeResponse:
        """The origin ignored the Range (HTTP 200): the whole body, once, into ``whole``; refused at once when its
        size is unknown or over what this job may still fetch."""
        if total is None:
            raise SourceUnavailable(
                f"source has no known size (a live stream?): its origin ignores byte ranges and names no "
                f"Content-Length: {target.url}"
            )
        if self.fetched + total > self.max_bytes:
            raise SourceUnavailable(
                f"source is {total / 1024**2:.1f} MB and its origin ignores byte ranges (it sends the whole file): "
                f"over the {self.max_bytes / 1024**2:g} MB limit for one clip (QUOTECLIP_MAX_FETCH_MB): {target.host}"
            )
        whole.begin(total, etag)
        self._body(resp, None, target, None, began, sink=whole.write)
        return RangeResponse(b"", 0, total, etag, whole=True)

    def _body(
        self,
        resp: Any,
        want: int | None,
        target: CheckedURL,
        cap: tuple[int, str] | None,
        began: float,
        sink: Callable[[bytes], None] | None = None,
    ) -> bytes:
        """The body (to ``want`` bytes, or its end); with ``sink``, each chunk goes there instead of being kept.
        ``began``: when the request was sent, so the rate floor counts the wait for the headers too."""
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                # read1: whatever has arrived (at most 64 KiB), so a server dripping a byte at a time is measured
                # after every byte, not after 64 KiB of it.
                chunk = resp.read1(64 * 1024)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise SourceTransient(f"source read failed ({_reason(exc)}): {target.host}") from None
            if not chunk:
                break
            size += len(chunk)
            self.fetched += len(chunk)
            if self.fetched > self.max_bytes:
                raise SourceUnavailable(
                    f"source download exceeds the {self.max_bytes / 1024**2:g} MB limit for one clip "
                    f"(QUOTECLIP_MAX_FETCH_MB): {target.host}"
                )
            elapsed = time.monotonic() - began
            if elapsed > self.rate_grace and size / elapsed < self.min_rate:
                raise SourceTransient(
                    f"source too slow ({size / elapsed / 1024:.0f} KB/s) over {elapsed:.1f} s, under the floor of "
                    f"{self.min_rate / 1024:g} KB/s (QUOTECLIP_MIN_FETCH_RATE): {target.host}"
                )
            if cap is not None and size > cap[0]:
                raise SourceUnavailable(f"source {cap[1]} is over {cap[0] / 1024**2:g} MB: {target.url}")
            if sink is not None:
                sink(chunk)
            else:
                chunks.append(chunk)
            if want is not None and size >= want:
                resp.close()  # more may follow (a server that ignored the range): drop the connection
                break
        data = b"".join(chunks)
        return data if want is None else data[:want]


def _reason(exc: BaseException) -> str:
    text = str(exc)
    if "timed out" in text.lower():
        return "timed out"
    if "refused" in text.lower():
        return "connection refused"
    return type(exc).__name__
