"""What every router shares: the settings, Redis and the store (one set per app), API keys and rate limits."""

from __future__ import annotations

import hmac
import time
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from redis import Redis

from quoteclip import redis_keys
from quoteclip.settings import Settings
from storage import LocalStorage, Storage

from .errors import APIError


@dataclass(frozen=True)
class Services:
    settings: Settings
    connection: Redis
    storage: Storage

    def link_for(self, job_id: str, link: str | None) -> str | None:
        """Local-folder links are file:// URIs a browser cannot open: serve them through the API instead."""
        if link and isinstance(self.storage, LocalStorage):
            return f"/clips/{job_id}/file"
        return link


def services(request: Request) -> Services:
    svc: Services = request.app.state.services
    return svc


ServicesDep = Annotated[Services, Depends(services)]


def client_key(request: Request, svc: ServicesDep) -> str:
    """The API key given (``Authorization: Bearer`` or ``X-API-Key``), checked in constant time when keys are
    configured; else the client's address."""
    header = request.headers.get("authorization", "")
    given = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else ""
    given = given or request.headers.get("x-api-key", "")
    if svc.settings.api_keys:
        if not any(hmac.compare_digest(given.encode(), key.encode()) for key in svc.settings.api_keys):
            raise APIError(401, "a valid API key is required (Authorization: Bearer KEY or X-API-Key)")
        return "key:" + given[-6:]
    return "ip:" + (request.client.host if request.client else "unknown")


def rate_limited(who: Annotated[str, Depends(client_key)], svc: ServicesDep) -> str:
    """Each client gets ``QUOTECLIP_RATE_LIMIT`` requests a minute, counted in Redis, then 429."""
    window = int(time.time() // 60)
    key = redis_keys.rate(who, window)
    count = svc.connection.incr(key)
    if count == 1:
        svc.connection.expire(key, 120)
    if int(count) > svc.settings.rate_limit_per_minute:
        raise APIError(429, f"over {svc.settings.rate_limit_per_minute} requests a minute", {"Retry-After": "60"})
    return who


RateLimited = Annotated[str, Depends(rate_limited)]
