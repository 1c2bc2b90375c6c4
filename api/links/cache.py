"""HTTP cache answers of signed links: what is stored is served with an ``ETag`` (``If-None-Match`` answered 304)
and cached no longer than what it answers lives: a year and immutable for a link without expiry, else the link's
remaining life; a redirect to the bucket's presigned link no longer than that link lives. ``/embed.js`` is cached
an hour (it changes with the service's version). Error answers are never cached (api/links/outcomes.py).
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from cachetools import LRUCache
from fastapi import Request
from fastapi.responses import FileResponse, RedirectResponse, Response

from jobs.pipeline.lookup import POSTER
from quoteclip.settings import Settings

from .outcomes import CORS
from .verify import Linked

YEAR = 31536000  # the longest any answer is cached
IMMUTABLE = f"public, max-age={YEAR}, immutable"  # a link that does not expire names one clip for good
REDIRECT_MARGIN = 60  # seconds: a redirect to a presigned link is cached this much less than the link lives
EMBED_MAX_AGE = 3600  # seconds /embed.js may be cached (it changes with the service's version)
MEDIA = {"clip": "video/mp4", "download": "video/mp4", "poster": "image/jpeg", "captions": "text/vtt; charset=utf-8"}


@dataclass(frozen=True)
class Stored:
    """What a link names, found in the store: its key, a local file to serve or a link to redirect to."""

    key: str
    path: Path | None
    link: str
    filename: str | None = None


def stored_response(request: Request, settings: Settings, linked: Linked, stored: Stored) -> Response:
    """A stored clip or poster: served from the local folder (ETag, ranges, cacheable as long as the link lives),
    or a redirect to the bucket's link, cached no longer than that link lives."""
    etag = f'"{stored.key}{POSTER if linked.variant == "poster" else ""}"'
    if stored.path is None:
        cap = None if settings.public_base_url else max(0, settings.link_ttl - REDIRECT_MARGIN)
        cache = cache_control(linked.expires, cap)
        return RedirectResponse(stored.link, status_code=302, headers={"Cache-Control": cache, **CORS})
    headers = {"ETag": etag, "Cache-Control": cache_control(linked.expires), **CORS}
    if matches(request, etag):
        return Response(status_code=304, headers=headers)
    return FileResponse(
        stored.path,
        media_type=MEDIA[linked.variant],
        headers=headers,
        filename=stored.filename if linked.variant != "poster" else None,
        content_disposition_type="attachment" if linked.variant == "download" else "inline",
    )


MADE_KEPT = 1024  # links whose made answers (captions) an API process keeps
BUILDS = {"captions": 0}  # made answers made, not found kept (a test counts them)
_made: LRUCache[str, tuple[bytes, str]] = LRUCache(MADE_KEPT)  # (cachetools': a hit is recent again)
_made_lock = threading.Lock()


def made_once(link: str, make: Callable[[], bytes]) -> tuple[bytes, str]:
    """What the link ``link`` (its path) names made on the spot (its captions) and its ETag (its bytes' hash): made
    once, then kept (the ``MADE_KEPT`` last links asked). A link's path names its spec whole, so what it makes never
    changes."""
    with _made_lock:
        found = _made.get(link)
        if found is not None:
            return found
    body = make()
    made = body, f'"{hashlib.sha256(body).hexdigest()[:32]}"'
    with _made_lock:
        BUILDS["captions"] += 1
        _made[link] = made
    return made


def made_response(request: Request, linked: Linked, made: tuple[bytes, str]) -> Response:
    """What a link names made on the spot (its captions, ``made_once``), with its ETag."""
    body, etag = made
    headers = {"ETag": etag, "Cache-Control": cache_control(linked.expires), **CORS}
    if matches(request, etag):
        return Response(status_code=304, headers=headers)
    media_type = MEDIA[linked.variant]
    if request.method == "HEAD":
        return Response(media_type=media_type, headers={**headers, "Content-Length": str(len(body))})
    return Response(body, media_type=media_type, headers=headers)


def embed_response(request: Request) -> Response:
    """The ``<quote-clip>`` web component (api/embed.js)."""
    body, etag = _embed()
    headers = {"ETag": etag, "Cache-Control": f"public, max-age={EMBED_MAX_AGE}", "X-Content-Type-Options": "nosniff"}
    headers |= CORS
    if matches(request, etag):
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="text/javascript; charset=utf-8", headers=headers)


@lru_cache(maxsize=1)
def _embed() -> tuple[bytes, str]:
    body = resources.files("api").joinpath("embed.js").read_bytes()
    return body, f'"{hashlib.sha256(body).hexdigest()[:32]}"'


def matches(request: Request, etag: str) -> bool:
    given = request.headers.get("if-none-match", "")
    return bool(given) and (given.strip() == "*" or etag in (tag.strip() for tag in given.split(",")))


def cache_control(expires: int | None, cap: int | None = None, now: float | None = None) -> str:
    """Never longer than what it answers lives: a year and immutable for a link without expiry, else the link's
    remaining life (and at most ``cap`` seconds)."""
    if expires is None and cap is None:
        return IMMUTABLE
    # whole seconds, in integers (an expiry is never turned into a float): at most the seconds until it, a year
    left = expires - math.ceil(time.time() if now is None else now) if expires is not None else YEAR
    seconds = max(0, min(left, YEAR, cap if cap is not None else YEAR))
    return f"public, max-age={seconds}"
