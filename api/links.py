"""Signed clip links, a website's whole integration: ``GET``/``HEAD /l/{key id}/{payload}.{signature}.{ext}`` (the
link ``quoteclip/links.py`` signs) answers the clip, its download, its poster or its captions, rendering it on the
first request, and ``/embed.js`` is a player card for such links. The routes exist only with site keys
(``QUOTECLIP_SITE_KEYS``, ``QUOTECLIP_SITE_KEYS_FILE``); they need no API key: the signature is the credential.

A request is answered from the store when the clip is there (cacheable by any CDN, for as long as the link lives),
else it starts one render on the click queue (joined by identical requests and by ``POST /clips``) and is held
until the clip is stored (woken by the worker's announcements, ``api/events.py``), for at most
``QUOTECLIP_LINK_HOLD`` seconds: a ``<video src>`` or an ``<a href>`` cannot act on a 202.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from redis import Redis
from redis.exceptions import RedisError

from jobs.pipeline.assets import check_allowed, identities
from jobs.pipeline.keys import clip_key
from jobs.pipeline.lookup import POSTER, find_poster
from jobs.pipeline.stages import Stage
from jobs.queue import (
    Enqueued,
    RenderState,
    enqueue_clip,
    enqueue_poster,
    job_id_for,
    lookup,
    poster_job_id,
    render_state,
)
from quoteclip import links, redis_keys
from quoteclip.errors import BadInput, QuoteclipError, SourceRefused
from quoteclip.settings import Settings, SiteKey
from quoteclip.spec import ClipSpec, build_spec
from renderer.sidecars import captions_vtt
from sources import allowed_hosts, resolve_source
from sources.safety import host_allowed
from storage import LocalStorage

from . import streams
from .clips import RETRY_AFTER
from .deps import Services, ServicesDep, link_renders_allowed

router = APIRouter()

INVALID = "this link is not valid"  # every refusal of the link itself: which part failed is not said
IMMUTABLE = "public, max-age=31536000, immutable"  # a link that does not expire names one clip for good
NO_STORE = "no-store"
REDIRECT_MARGIN = 60  # seconds: a redirect to a presigned link is cached this much less than the link lives
EMBED_MAX_AGE = 3600  # seconds /embed.js may be cached (it changes with the service's version)
# Signed content is public by design: any page may read it (progress, frames drawn on a canvas).
CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Expose-Headers": (
        f"Accept-Ranges, Content-Length, Content-Range, ETag, Retry-After, {streams.CODECS}"
    ),
}
MEDIA = {"clip": "video/mp4", "download": "video/mp4", "poster": "image/jpeg", "captions": "text/vtt; charset=utf-8"}
REQUESTS = redis_keys.LINK_REQUESTS
RENDERS = redis_keys.LINK_RENDERS


def install(app: FastAPI, settings: Settings) -> None:
    """The link routes and their metrics, when the service has site keys (without them the routes do not exist);
    and, keys or none, the page's stream of a clip being rendered (``GET /clips/{id}/stream``, api/streams.py)."""
    app.include_router(streams.router)
    sites = settings.sites()
    if not sites:
        return
    app.state.site_keys = sites
    app.state.link_secrets = {key.id: key.secret for key in sites.values()}
    app.state.registry.register(LinkCollector(app.state.services.connection))
    app.include_router(router)


class Refused(Exception):
    """An answer other than the clip, decided before any render: its status, its one line, its metrics outcome."""

    def __init__(
        self,
        status: int,
        detail: str,
        outcome: str,
        headers: dict[str, str] | None = None,
        counted: tuple[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status, self.detail, self.outcome, self.headers = status, detail, outcome, headers or {}
        self.counted = counted  # (key id, variant) to count it under, once the link's signature held


@dataclass(frozen=True)
class Linked:
    """A verified link: its site key, what it asks for (``variant``), until when, and the clip as a spec (the key's
    brand on it)."""

    site: SiteKey
    variant: str
    expires: int | None
    spec: ClipSpec


@dataclass(frozen=True)
class Stored:
    """What a link names, found in the store: its key, a local file to serve or a link to redirect to."""

    key: str
    path: Path | None
    link: str
    filename: str | None = None


@dataclass(frozen=True)
class Pending:
    """A link whose clip (or poster) is not stored: the job rendering it, and how to look for the result."""

    linked: Linked
    job_id: str
    ready: Callable[[], Stored | None]


# ---- the routes ------------------------------------------------------------------------------------------------


@router.api_route(
    "/l/{key_id}/{name}",
    methods=["GET", "HEAD"],
    include_in_schema=False,
)
async def signed_link(request: Request, key_id: str, name: str, svc: ServicesDep) -> Response:
    """A signed link's clip, download, poster or captions (see the module's docstring and docs/websites.md)."""
    first = await run_in_threadpool(_first_answer, request, svc)
    if isinstance(first, Response):
        return first
    deadline = time.monotonic() + svc.settings.link_hold
    early = await answer_while_rendering(request, svc, first, deadline)
    if early is not None:
        return early
    found = await _hold(svc, first, deadline)
    return await run_in_threadpool(_after_hold, request, svc, first, found)


@router.get("/l/{key_id}/{name}/{part}", include_in_schema=False)
async def signed_link_part(request: Request, key_id: str, name: str, part: str, svc: ServicesDep) -> Response:
    """A clip link's HLS stream while it renders: ``…/index.m3u8`` (an event playlist of the fragments so far; asked
    for a clip not stored, it starts or joins the render as the link itself does), ``…/init.mp4`` and ``…/N.m4s``
    (the stream's init segment and fragments). The link's signature covers them: the link is verified as a whole,
    its sub-resource named after it. Not streaming (stored, streaming off, the render ended): 404, and the player
    plays the link itself (docs/websites.md)."""
    if not streams.is_part(part):  # nothing else is behind a link
        return JSONResponse({"detail": "Not Found"}, status_code=404)
    path = _raw_path(request).rsplit("/", 1)[0]
    try:
        linked = _verified(request, svc.settings, path)
    except Refused as refused:
        return _error(refused.status, refused.detail, refused.headers)
    if linked.variant != "clip":
        return streams.not_streamed(CORS, "only a clip link streams")
    job_id = await run_in_threadpool(_job_id, svc, linked)
    if part != streams.PLAYLIST_NAME:
        return await streams.part_answer(svc, job_id, part, CORS)
    playing = await streams.playlist_answer(svc, job_id, CORS)  # a player's reload, or a render's stream underway
    if playing is not None:
        return playing
    first = await run_in_threadpool(_first_answer, request, svc, path)  # start (or join) the render, as the link does
    if isinstance(first, Response):  # refused, or stored (then the link itself plays it)
        return first if first.status_code >= 400 else streams.not_streamed(CORS)
    deadline = time.monotonic() + svc.settings.link_hold
    found = await streams.joined(svc, first.job_id, deadline)
    if found is not None:
        await found[0].aclose()
        playing = await streams.playlist_answer(svc, first.job_id, CORS, wait=max(0.0, deadline - time.monotonic()))
        if playing is not None:
            _count(svc.connection, linked.site.id, linked.variant, "streamed")
            return playing
    if time.monotonic() >= deadline:
        return await run_in_threadpool(_after_hold, request, svc, first, None)
    return streams.not_streamed(CORS)


@router.get("/embed.js", include_in_schema=False)
def embed(request: Request) -> Response:
    """The ``<quote-clip>`` web component (api/embed.js): a player card for signed links, for any page."""
    body, etag = _embed()
    headers = {"ETag": etag, "Cache-Control": f"public, max-age={EMBED_MAX_AGE}", **CORS}
    if _matches(request, etag):
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="text/javascript; charset=utf-8", headers=headers)


@lru_cache(maxsize=1)
def _embed() -> tuple[bytes, str]:
    body = resources.files("api").joinpath("embed.js").read_bytes()
    return body, f'"{hashlib.sha256(body).hexdigest()[:32]}"'


# ---- the first answer: refused, stored, made, or a render started ----------------------------------------------


def _first_answer(request: Request, svc: Services, path: str | None = None) -> Response | Pending:
    """Everything up to the hold, in one worker thread: the link verified (``path``: the link, when the request is
    for a sub-resource of it), its key's scopes, the clip's spec; the answer when the link is refused, its captions
    (made from the spec), or its clip or poster is stored; else the render started (or joined) that the request then
    waits for."""
    head = request.method == "HEAD"
    site, variant = "unknown", "-"
    try:
        linked = _verified(request, svc.settings, path)
        site, variant = linked.site.id, linked.variant
        if variant == "captions":
            vtt = captions_vtt(linked.spec)
            _count(svc.connection, site, variant, "made")
            etag = f'"{hashlib.sha256(vtt).hexdigest()[:32]}"'
            return _bytes(request, vtt, MEDIA[variant], etag, _cache_control(linked.expires))
        stored, job_ids = _look(svc, linked)
        if stored is not None:
            _count(svc.connection, site, variant, "stored")
            return _stored_answer(request, svc, linked, stored)
        states = [render_state(job_id, svc.connection) for job_id in job_ids]
        failed = next((s for s in states if s.state == "failed" and s.permanent), None)
        if failed is not None:  # failed for good: answered without trying again (until rq forgets the failure)
            raise Refused(422, str(failed.error), "failed")
        if head:  # a HEAD never starts a render
            _count(svc.connection, site, variant, "not_stored")
            rendering = any(s.state == "active" for s in states)
            return _error(202 if rendering else 404, "rendering" if rendering else "not rendered yet")
        if not any(s.state == "active" for s in states):  # a render would start: the key's allowance
            wait = link_renders_allowed(svc, site)
            if wait is not None:
                raise Refused(
                    429,
                    f"the site key {site} has started {svc.settings.link_renders_per_minute} renders this minute",
                    "limited",
                    {"Retry-After": str(wait)},
                )
        enqueued = _start(svc, linked)
        if enqueued.link is not None:  # stored meanwhile
            stored, _ = _look(svc, linked)
            if stored is not None:
                _count(svc.connection, site, variant, "stored")
                return _stored_answer(request, svc, linked, stored)
        if not enqueued.joined:  # a render started (one joined costs nothing)
            _count_render(svc.connection, site)
        return Pending(linked, enqueued.job_id, lambda: _look(svc, linked)[0])
    except Refused as refused:
        site, variant = refused.counted or (site, variant)
        _count(svc.connection, site, variant, refused.outcome)
        return _error(refused.status, refused.detail, refused.headers)
    except BadInput as exc:  # validly signed, but the service cannot render it (the queue's source rules, …)
        _count(svc.connection, site, variant, "failed")
        return _error(422, f"{exc.kind}: {exc}".splitlines()[0])
    except QuoteclipError as exc:  # the store or the queue failing: try again later
        _count(svc.connection, site, variant, "unavailable")
        return _error(503, f"{exc.kind}: {exc}".splitlines()[0], {"Retry-After": RETRY_AFTER})


def _raw_path(request: Request) -> str:
    raw = request.scope.get("raw_path") or request.url.path.encode()
    return raw.decode("ascii", "replace") if isinstance(raw, bytes) else str(raw)


def _verified(request: Request, settings: Settings, path: str | None = None) -> Linked:
    """The link's clip, or Refused: 403 for a link that is not one of ours as it stands (any byte changed, another
    key's signature, a removed key, a payload not in canonical form, an extension not its variant's) or that breaks
    its key's scopes, 410 past its expiry. ``path``: the link (else the request's own path)."""
    path = path if path is not None else _raw_path(request)
    now = time.time()
    try:
        clip = links.verify(path, request.app.state.link_secrets, now=now)
    except links.LinkExpired:
        raise Refused(410, "this link has expired", "expired", counted=(path.split("/")[2], "-")) from None
    except links.LinkError:
        raise Refused(403, INVALID, "refused") from None
    site: SiteKey = request.app.state.site_keys[path.split("/")[2]]
    refusal = _scope_refusal(clip, site, settings, now)
    if refusal is not None:
        raise Refused(403, refusal, "refused", counted=(site.id, clip["variant"]))
    return Linked(site, clip["variant"], clip.get("expires"), _spec(clip, site, settings))


def _scope_refusal(clip: dict[str, Any], site: SiteKey, settings: Settings, now: float) -> str | None:
    """What a validly signed link asks that its key does not allow, in one line; None when nothing."""
    if site.hosts is not None:
        try:
            host = (urlsplit(str(clip["source"])).hostname or "").lower()
        except ValueError:
            host = ""
        if not host or not host_allowed(host, site.hosts):
            return f"the site key {site.id} may clip sources of {', '.join(site.hosts)} only"
    longest = min(settings.max_clip_seconds, site.max_seconds if site.max_seconds is not None else math.inf)
    length = round(clip["end"] - clip["start"], 3)
    if length > longest:
        return f"the clip is {length:g} s long, over the {longest:g} s its site key allows"
    if site.lifetime is not None:
        expires = clip.get("expires")
        if expires is None or expires > links.rounded_expiry(site.lifetime, now):
            return f"the site key {site.id}'s links must expire within {site.lifetime} s"
    return None


def _spec(clip: dict[str, Any], site: SiteKey, settings: Settings) -> ClipSpec:
    """The clip spec a link names, as ``POST /clips`` would build it from the same fields (so both share one clip),
    with the key's brand as its watermark whatever the link names; BadInput (422) when it is not a valid clip."""
    data: dict[str, Any] = {name: clip[name] for name in ("source", "start", "end", "caption") if name in clip}
    data.update({name: clip[name] for name in ("profile", "fit", "quality") if name in clip})
    if "style" in clip:
        data["style"] = {"preset": clip["style"]}
    if site.brand is not None:
        data["watermark"] = site.brand.model_dump(exclude_defaults=True)
    elif "watermark" in clip:
        data["watermark"] = {"text": clip["watermark"]}
    elif "logo" in clip:
        data["watermark"] = {"logo": clip["logo"]}
    spec = build_spec(data, max_seconds=settings.max_clip_seconds, encoder_preset=settings.encoder_preset)
    # the queue's rules, before the store is asked: no path on a worker's disk (the source, a brand file), the hosts
    resolve_source(spec.source, allow_local=settings.allow_local_sources is True)
    check_allowed(spec, settings.allow_local_sources is True)
    hosts = allowed_hosts(settings)
    parts = urlsplit(spec.source)
    if hosts is not None and parts.scheme in ("http", "https") and not host_allowed(parts.hostname or "", hosts):
        raise SourceRefused(f"source host not allowed: {parts.hostname} (see QUOTECLIP_SOURCE_HOSTS)")
    return spec


def _look(svc: Services, linked: Linked) -> tuple[Stored | None, list[str]]:
    """The clip (or poster) when stored; else the jobs whose end stores it: the clip's own (and, for a poster, the
    poster's own render)."""
    if linked.variant == "poster":
        key, there = find_poster(linked.spec, svc.settings, svc.storage)
        local = svc.storage.local_path(key) if isinstance(svc.storage, LocalStorage) else None
        if there:
            path = local.with_suffix(POSTER) if local is not None else None
            return Stored(key, path, svc.storage.link(key, POSTER)), []
        return None, [job_id_for(key), poster_job_id(key)]
    key, found = lookup(linked.spec, svc.settings, svc.storage)
    if found is not None:
        local = Path(found.path) if found.path is not None and isinstance(svc.storage, LocalStorage) else None
        return Stored(key, local, found.link, found.filename), []
    return None, [job_id_for(key)]


def _job_id(svc: Services, linked: Linked) -> str:
    """The job that renders a link's clip, from its spec alone (the store is not asked)."""
    source = resolve_source(linked.spec.source, allow_local=svc.settings.allow_local_sources is True)
    return job_id_for(clip_key(linked.spec, source.identity, identities(svc.settings), svc.settings.key_secret))


def _start(svc: Services, linked: Linked) -> Enqueued:
    """The render that stores what the link names (the queue's source rules checked as for ``POST /clips``)."""
    if linked.variant == "poster":
        return enqueue_poster(linked.spec, svc.settings, svc.connection, svc.storage)
    return enqueue_clip(linked.spec, svc.settings, svc.connection, svc.storage)


# ---- held until stored ----------------------------------------------------------------------------------------


async def answer_while_rendering(request: Request, svc: Services, pending: Pending, deadline: float) -> Response | None:
    """A request for a clip being rendered, answered with the clip as it renders: the fragments its worker relays,
    from the clip's start, as they come (api/streams.py), once its stream begins (before ``deadline``). None, and the
    request is held until the clip is stored (``_hold``), for a download (the finished MP4, never a half-made one), a
    poster, a ``HEAD``, with streaming off, or when the render ends without a stream."""
    if pending.linked.variant != "clip" or request.method != "GET" or not svc.settings.stream:
        return None
    if streams.resumed(request):  # a player resuming a stream that was cut: the clip is rendered anew
        _count(svc.connection, pending.linked.site.id, pending.linked.variant, "unavailable")
        return _error(503, streams.RESUMED, {"Retry-After": RETRY_AFTER})
    found = await streams.joined(svc, pending.job_id, deadline)
    if found is None:
        return None
    _count(svc.connection, pending.linked.site.id, pending.linked.variant, "streamed")
    return streams.RelayResponse(*found, CORS, progressive=True, head=streams.reads_a_head(request))


async def _hold(svc: Services, pending: Pending, deadline: float) -> Stored | RenderState | None:
    """Wait for the clip (or poster) to be stored, woken by the worker's announcements on its job: the stored
    clip, the job's failure, or None once ``deadline`` (``QUOTECLIP_LINK_HOLD`` seconds from the request) has
    passed. Each look reads the job (Redis); the store is asked only once the job says it has stored its work (the
    store is written before the job says so), so a thousand held requests do not ask the bucket at every look."""
    async with svc.events.watch(pending.job_id) as watch:  # registered before the first look: no change missed
        while True:
            state = await run_in_threadpool(render_state, pending.job_id, svc.connection)
            if state.state == "failed":
                return state
            if state.state != "active" or state.stage == Stage.FINISHED.value:
                found = await run_in_threadpool(pending.ready)
                if found is not None or state.state != "active":  # stored, or the job ended without storing it
                    return found or state
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            await watch.changed(left)


def _after_hold(request: Request, svc: Services, pending: Pending, found: Stored | RenderState | None) -> Response:
    site, variant = pending.linked.site.id, pending.linked.variant
    if isinstance(found, Stored):
        _count(svc.connection, site, variant, "rendered")
        return _stored_answer(request, svc, pending.linked, found)
    if isinstance(found, RenderState) and found.state == "failed" and found.permanent:
        _count(svc.connection, site, variant, "failed")
        return _error(422, str(found.error))
    _count(svc.connection, site, variant, "unavailable")
    if found is None:
        detail = f"still rendering after {svc.settings.link_hold:g} s; try again"
    else:
        detail = f"the render did not finish ({found.error or found.state}); try again"
    return _error(503, detail, {"Retry-After": RETRY_AFTER})


# ---- answers --------------------------------------------------------------------------------------------------


def _stored_answer(request: Request, svc: Services, linked: Linked, stored: Stored) -> Response:
    """A stored clip or poster: served from the local folder (ETag, ranges, cacheable as long as the link lives),
    or a redirect to the bucket's link, cached no longer than that link lives."""
    etag = f'"{stored.key}{POSTER if linked.variant == "poster" else ""}"'
    if stored.path is None:
        cap = None if svc.settings.public_base_url else max(0, svc.settings.link_ttl - REDIRECT_MARGIN)
        cache = _cache_control(linked.expires, cap)
        return RedirectResponse(stored.link, status_code=302, headers={"Cache-Control": cache, **CORS})
    headers = {"ETag": etag, "Cache-Control": _cache_control(linked.expires), **CORS}
    if _matches(request, etag):
        return Response(status_code=304, headers=headers)
    return FileResponse(
        stored.path,
        media_type=MEDIA[linked.variant],
        headers=headers,
        filename=stored.filename if linked.variant != "poster" else None,
        content_disposition_type="attachment" if linked.variant == "download" else "inline",
    )


def _bytes(request: Request, body: bytes, media_type: str, etag: str, cache: str) -> Response:
    headers = {"ETag": etag, "Cache-Control": cache, **CORS}
    if _matches(request, etag):
        return Response(status_code=304, headers=headers)
    if request.method == "HEAD":
        return Response(media_type=media_type, headers={**headers, "Content-Length": str(len(body))})
    return Response(body, media_type=media_type, headers=headers)


def _matches(request: Request, etag: str) -> bool:
    given = request.headers.get("if-none-match", "")
    return bool(given) and (given.strip() == "*" or etag in (tag.strip() for tag in given.split(",")))


def _cache_control(expires: int | None, cap: int | None = None, now: float | None = None) -> str:
    """Never longer than what it answers lives: a year and immutable for a link without expiry, else the link's
    remaining life (and at most ``cap`` seconds)."""
    if expires is None and cap is None:
        return IMMUTABLE
    left = [int(expires - (time.time() if now is None else now)) if expires is not None else math.inf]
    seconds = int(max(0, min([*left, cap if cap is not None else math.inf])))
    return f"public, max-age={seconds}"


def _error(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        {"detail": detail}, status_code=status, headers={"Cache-Control": NO_STORE, **CORS, **(headers or {})}
    )


# ---- costs: metrics per site key --------------------------------------------------------------------------------


def _count(connection: Redis, site: str, variant: str, outcome: str) -> None:
    try:
        connection.hincrby(REQUESTS, f"{site}|{variant}|{outcome}", 1)
    except RedisError:
        pass  # a lost count never fails an answer


def _count_render(connection: Redis, site: str) -> None:
    try:
        connection.hincrby(RENDERS, site, 1)
    except RedisError:
        pass


class LinkCollector(Collector):
    """``quoteclip_link_requests_total{key,variant,outcome}`` and ``quoteclip_link_renders_total{key}``, counted in
    Redis by every API process."""

    def __init__(self, connection: Redis) -> None:
        self.connection = connection

    def collect(self) -> Iterator[CounterMetricFamily]:
        requests = CounterMetricFamily(
            "quoteclip_link_requests",
            "Signed link requests by site key, variant and outcome",
            labels=["key", "variant", "outcome"],
        )
        for field, count in self.connection.hgetall(REQUESTS).items():
            requests.add_metric(_text(field).split("|", 2), float(count))
        yield requests
        renders = CounterMetricFamily(
            "quoteclip_link_renders", "Renders started by signed links, by site key", labels=["key"]
        )
        for site, count in self.connection.hgetall(RENDERS).items():
            renders.add_metric([_text(site)], float(count))
        yield renders


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
