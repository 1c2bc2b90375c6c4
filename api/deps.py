"""What every router shares: the settings, Redis and the store (one set per app), API keys and rate limits."""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from limits import RateLimitItem, RateLimitItemPerMinute
from limits.storage import RedisStorage
from limits.strategies import MovingWindowRateLimiter
from redis import Redis

from jobs.pipeline.stages import Stage
from jobs.queue import connect, render_state
from quoteclip import redis_keys, redis_url
from quoteclip.settings import Settings
from storage import LocalStorage, Storage, open_storage

from .auth import given_key, sign_path
from .caps import ClientCaps, address
from .errors import APIError
from .events import JobEvents
from .fanout import Findings, Hub, blocking_client, shares
from .finders import Finders


@dataclass(frozen=True)
class Limits:
    """The API's one rate limiter (the ``limits`` library's moving window, counted in Redis) in its two units: the
    clips a client asks for a minute (``QUOTECLIP_RATE_LIMIT``, per whole API key, or per client address without
    keys) and the failed authentications a minute from one client address (``QUOTECLIP_AUTH_FAILURE_LIMIT``). A
    request the limit refuses takes nothing from it."""

    limiter: MovingWindowRateLimiter
    clips: RateLimitItem
    auth_failures: RateLimitItem

    @classmethod
    def open(cls, settings: Settings, connection: Redis | None = None) -> Limits:
        # counted through the queue's own client (either form of QUOTECLIP_REDIS_URL): limits' own Sentinel storage
        # reads a /DB in the URL as part of the service name, and reads its counts from replicas; the API's own
        # pool when given (its connections shared, never more of them)
        pool = (connection or connect(settings)).connection_pool
        storage = RedisStorage("redis://", connection_pool=pool, key_prefix=redis_keys.RATE_LIMITS)
        return cls(
            MovingWindowRateLimiter(storage),
            RateLimitItemPerMinute(settings.rate_limit_per_minute, namespace="clips"),
            RateLimitItemPerMinute(settings.auth_failures_per_minute, namespace="auth-failures"),
        )

    def take(self, who: str, clips: int) -> None:
        """Count ``clips`` against ``who``'s minute, or refuse them all: 429 saying how many may be queued now,
        with ``Retry-After`` (when the oldest clip counted leaves the minute)."""
        if self.limiter.hit(self.clips, who, cost=clips):
            return
        stats = self.limiter.get_window_stats(self.clips, who)
        limit, left = self.clips.amount, max(0, stats.remaining)
        if clips > limit:
            detail = (
                f"rate limit: this request asks for {clips} clips, more than the {limit} a minute a client may "
                f"queue; send at most {limit} at a time"
            )
        else:
            detail = (
                f"rate limit: this request asks for {clips} clip{'s' if clips != 1 else ''}; {left} of this client's "
                f"{limit} a minute are left, so at most {left} may be queued now"
            )
        raise APIError(429, detail, {"Retry-After": _seconds_until(stats.reset_time)})

    def auth_blocked(self, address: str) -> str | None:
        """``Retry-After`` while ``address`` has used up its failed authentications for the minute, else None."""
        if self.limiter.test(self.auth_failures, address):
            return None
        return _seconds_until(self.limiter.get_window_stats(self.auth_failures, address).reset_time)

    def auth_failed(self, address: str) -> str | None:
        """Count one failed authentication from ``address``; ``Retry-After`` once it is over its minute's."""
        if self.limiter.hit(self.auth_failures, address):
            return None
        return _seconds_until(self.limiter.get_window_stats(self.auth_failures, address).reset_time)


def _seconds_until(when: float) -> str:
    return str(max(1, math.ceil(when - time.time())))


@dataclass(frozen=True)
class Services:
    settings: Settings
    connection: Redis
    storage: Storage
    limits: Limits
    events: JobEvents
    hub: Hub
    caps: ClientCaps
    findings: Findings
    finders: Finders

    def link_for(self, job_id: str, link: str | None, route: str = "file") -> str | None:
        """Local-folder links are file:// URIs a browser cannot open: served through the API instead (signed,
        when keys are required); ``route`` names the file (``captions.vtt`` for the WebVTT sidecar)."""
        if link and isinstance(self.storage, LocalStorage):
            return sign_path(f"/clips/{job_id}/{route}", self.settings)
        return link


def api_connection(settings: Settings) -> Redis:
    """The API's client of the queue's Redis, for its threads: a pool of ``QUOTECLIP_API_REDIS_CONNECTIONS``
    (api/fanout.py) that a thread waits on, so the API's connections never grow with its requests. Through Sentinel,
    the queue's own client (its pool as rq's)."""
    if redis_url.is_sentinel(settings.redis_url):
        return connect(settings)
    return blocking_client(
        settings.redis_url, shares(settings.redis_connections)[0], socket_connect_timeout=5, health_check_interval=30
    )


def open_services(settings: Settings) -> Services:
    connection = api_connection(settings)

    async def rendering(job_id: str) -> bool:
        state = await run_in_threadpool(render_state, job_id, connection)
        return state.state == "active" and state.stage != Stage.FINISHED.value

    return Services(
        settings,
        connection,
        open_storage(settings),
        Limits.open(settings, connection),
        JobEvents(settings.redis_url),
        Hub(settings, rendering),
        ClientCaps(settings),
        Findings(),
        Finders(settings.finders),
    )


async def services(request: Request) -> Services:
    svc: Services = request.app.state.services
    return svc


ServicesDep = Annotated[Services, Depends(services)]


def client_key(request: Request, svc: ServicesDep) -> str:
    """Who is calling, for the rate limit: the whole API key (hashed; the middleware has checked it), else the
    client's address (forwarded headers count only from QUOTECLIP_TRUSTED_PROXIES; an IPv6 /64 is one client)."""
    key = given_key({k.lower().encode(): v.encode() for k, v in request.headers.items()})
    if svc.settings.api_keys and key:
        return "key:" + hashlib.sha256(key.encode()).hexdigest()
    return "ip:" + address(request)


class Allowance:
    """A request's caller and their clips a minute: a route takes as many as it will queue, before queueing any
    (before any lookup in the store: a refused request costs nothing but this count)."""

    def __init__(self, svc: Services, who: str) -> None:
        self.svc, self.who = svc, who

    def take(self, clips: int) -> None:
        if clips > 0:  # (nothing left to count: the clips were counted before their quote was found)
            self.svc.limits.take(self.who, clips)


def allowance(who: Annotated[str, Depends(client_key)], svc: ServicesDep) -> Allowance:
    return Allowance(svc, who)


AllowanceDep = Annotated[Allowance, Depends(allowance)]


def rate_limited(allowed: AllowanceDep) -> str:
    """For routes that make one thing (a preview, an upload): it counts as one clip."""
    allowed.take(1)
    return allowed.who


RateLimited = Annotated[str, Depends(rate_limited)]


def link_renders_allowed(svc: Services, site: str, clips: int = 1) -> int | None:
    """Whether a site key's signed links may start ``clips`` more renders now (``QUOTECLIP_LINK_RENDERS`` a minute
    per key: the API's one limiter, counting clips in a namespace of its own, one counter per key id): None when
    they may, else the seconds until they may. Answering a stored clip never comes here."""
    item = RateLimitItemPerMinute(svc.settings.link_renders_per_minute, namespace=redis_keys.LINK_RENDER_LIMITS)
    if svc.limits.limiter.hit(item, site, cost=clips):
        return None
    return int(_seconds_until(svc.limits.limiter.get_window_stats(item, site).reset_time))
