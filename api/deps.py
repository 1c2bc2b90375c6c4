"""What every router shares: the settings, Redis and the store (one set per app), API keys and rate limits."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from limits import RateLimitItem, RateLimitItemPerMinute
from limits.storage import RedisStorage
from limits.strategies import FixedWindowRateLimiter
from redis import Redis

from jobs.queue import connect
from quoteclip import redis_keys
from quoteclip.settings import Settings
from storage import LocalStorage, Storage, open_storage

from .auth import given_key, sign_path
from .errors import APIError
from .events import JobEvents


@dataclass(frozen=True)
class Services:
    settings: Settings
    connection: Redis
    storage: Storage
    limiter: FixedWindowRateLimiter
    limit: RateLimitItem
    events: JobEvents

    def link_for(self, job_id: str, link: str | None, route: str = "file") -> str | None:
        """Local-folder links are file:// URIs a browser cannot open: served through the API instead (signed,
        when keys are required); ``route`` names the file (``captions.vtt`` for the WebVTT sidecar)."""
        if link and isinstance(self.storage, LocalStorage):
            return sign_path(f"/clips/{job_id}/{route}", self.settings)
        return link


def open_services(settings: Settings) -> Services:
    connection = connect(settings)
    storage = RedisStorage(settings.redis_url, key_prefix=redis_keys.RATE_LIMITS)
    limit = RateLimitItemPerMinute(settings.rate_limit_per_minute)
    return Services(
        settings,
        connection,
        open_storage(settings),
        FixedWindowRateLimiter(storage),
        limit,
        JobEvents(settings.redis_url),
    )


def services(request: Request) -> Services:
    svc: Services = request.app.state.services
    return svc


ServicesDep = Annotated[Services, Depends(services)]


def client_key(request: Request, svc: ServicesDep) -> str:
    """Who is calling, for the rate limit: the whole API key (hashed; the middleware has checked it), else the
    client's address (forwarded headers count only from QUOTECLIP_TRUSTED_PROXIES)."""
    key = given_key({k.lower().encode(): v.encode() for k, v in request.headers.items()})
    if svc.settings.api_keys and key:
        return "key:" + hashlib.sha256(key.encode()).hexdigest()
    return "ip:" + (request.client.host if request.client else "unknown")


def rate_limited(who: Annotated[str, Depends(client_key)], svc: ServicesDep) -> str:
    """Each client gets ``QUOTECLIP_RATE_LIMIT`` requests a minute (the ``limits`` library, counted in Redis)."""
    if not svc.limiter.hit(svc.limit, who):
        reset = svc.limiter.get_window_stats(svc.limit, who).reset_time
        wait = max(1, int(reset - time.time() + 0.999))
        raise APIError(429, f"over {svc.settings.rate_limit_per_minute} requests a minute", {"Retry-After": str(wait)})
    return who


RateLimited = Annotated[str, Depends(rate_limited)]


def link_renders_allowed(svc: Services, site: str, clips: int = 1) -> int | None:
    """Whether a site key's signed links may start ``clips`` more renders now (``QUOTECLIP_LINK_RENDERS`` a minute
    per key: the ``limits`` library in Redis, a namespace of its own, one counter per key id): None when they may,
    else the seconds until they may. Answering a stored clip never comes here."""
    item = RateLimitItemPerMinute(svc.settings.link_renders_per_minute, namespace="link-renders")
    if svc.limiter.hit(item, site, cost=clips):
        return None
    reset = svc.limiter.get_window_stats(item, site).reset_time
    return max(1, int(reset - time.time() + 0.999))
