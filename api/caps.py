"""Per-client caps of one API process, by client address (forwarded addresses count only from
``QUOTECLIP_TRUSTED_PROXIES``; an IPv6 /64 is one client): the streams it reads at once
(``QUOTECLIP_CLIENT_STREAMS``), its requests held while a clip renders (``QUOTECLIP_CLIENT_HELD``) and its HLS part
requests a second (``QUOTECLIP_CLIENT_PARTS``). Past a cap the request is answered ``429`` with ``Retry-After``,
before it costs anything. Counted in memory: each API process caps its own share (a proxy in front caps the whole,
docs/deploy.md)."""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from fastapi import Request
from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from quoteclip.settings import Settings

RETRY_HELD = 2  # seconds a client over its streams or held requests is told to wait


class CapReached(Exception):
    """A client over one of its caps: what to tell it, and when to try again."""

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail)
        self.detail, self.retry_after = detail, retry_after

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


def address(request: Request) -> str:
    return client_of(request.client.host if request.client else "unknown")


def client_of(host: str) -> str:
    """The client an address stands for in the per-client caps, rate limits and failed authentications: an IPv4
    address itself; an IPv6 address's /64 (one subscriber's network: a client has its whole /64 to pick from, so
    counting addresses one by one would count nothing)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if ip.version == 6:
        mapped = ip.ipv4_mapped  # (an IPv4 client of a dual-stack socket)
        if mapped is not None:
            return str(mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return host


class ClientCaps:
    def __init__(self, settings: Settings) -> None:
        self.limits = {"streams": settings.client_streams, "held": settings.client_held}
        self.parts_limit = settings.client_parts
        self.open: dict[tuple[str, str], int] = {}
        # the part requests' rate: the ``limits`` library's moving window, in this process's memory
        self._parts = RateLimitItemPerSecond(settings.client_parts, namespace="parts")
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    def take(self, kind: str, who: str) -> Callable[[], None]:
        """One of ``who``'s ``kind`` (streams, held), and the call that gives it back (once), or CapReached when
        it has its cap already."""
        key, limit = (kind, who), self.limits[kind]
        count = self.open.get(key, 0)
        if count >= limit:
            what = "streams of clips being rendered" if kind == "streams" else "requests waiting for a clip"
            raise CapReached(f"too many {what} from this address at once (at most {limit})", RETRY_HELD)
        self.open[key] = count + 1
        given = False

        def release() -> None:
            nonlocal given
            if given:
                return
            given = True
            left = self.open[key] - 1
            if left:
                self.open[key] = left
            else:
                del self.open[key]

        return release

    @contextmanager
    def holding(self, kind: str, who: str) -> Iterator[None]:
        """``take`` for the block."""
        release = self.take(kind, who)
        try:
            yield
        finally:
            release()

    def part(self, who: str) -> None:
        """Count one HLS part request of ``who``; CapReached when it has made its cap's worth in the last second."""
        if self._limiter.hit(self._parts, who):
            return
        reset = self._limiter.get_window_stats(self._parts, who).reset_time
        wait = max(1, math.ceil(reset - time.time()))
        detail = f"too many stream part requests from this address (at most {self.parts_limit} a second)"
        raise CapReached(detail, wait)
