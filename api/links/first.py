"""A verified link's first answer: its captions (made from the spec), its clip or poster
from the store, a ``HEAD``'s word on it (202 rendering, 404 not asked for: a ``HEAD`` never starts a render), a
refusal (failed for good before, its key's renders a minute used up); else ``Pending``: the render started, or
joined (by identical requests and by ``POST /clips``), that the request then waits for (api/links/hold.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fastapi import Request
from fastapi.concurrency import run_in_threadpool

from jobs.pipeline.assets import identities
from jobs.pipeline.keys import clip_key
from jobs.pipeline.lookup import POSTER, find_poster
from jobs.queue import Enqueued, enqueue_clip, enqueue_poster, job_id_for, lookup, poster_job_id, render_state
from quoteclip.errors import QuoteclipError
from renderer.sidecars import captions_vtt
from sources import resolve_source
from storage import LocalStorage

from ..deps import Services, link_renders_allowed
from .cache import Stored, made_once, made_response, stored_response
from .metrics import count_render
from .outcomes import Answer, Outcome, Refused, error_response
from .verify import Linked


@dataclass(frozen=True)
class Pending:
    """A link whose clip (or poster) is not stored: the job rendering it, and how to look for the result."""

    linked: Linked
    job_id: str
    ready: Callable[[], Stored | None]


async def first_look(request: Request, svc: Services, linked: Linked) -> Answer | Pending:
    """The answer when it needs no render, else the render started (or joined); Refused when refused. The look at
    the store and the queue is made in a worker thread, once for the requests asking at once and those of the next
    second (api/fanout.py ``Findings``: they wait for it in the event loop)."""
    if linked.variant == "captions":  # made once a link (kept: api/links/cache.py), 304s never make it
        body = await run_in_threadpool(made_once, request.url.path, lambda: captions_vtt(linked.spec))
        return linked.answer(made_response(request, linked, body), Outcome.MADE)
    head = request.method == "HEAD"  # a HEAD never starts a render
    try:
        found = await svc.findings.look(_key(request, linked), lambda: _find(svc, linked, head))
    except QuoteclipError as exc:  # the queue's rules at enqueueing, or the store or the queue failing
        raise Refused.failing(exc, linked.site.id, linked.variant) from None
    return _answer(request, svc, linked, found)


def _key(request: Request, linked: Linked) -> tuple[str, bool]:
    return (linked.key or f"{linked.site.id}|{linked.variant}|{linked.spec!r}", request.method == "HEAD")


def _answer(request: Request, svc: Services, linked: Linked, found: Finding) -> Answer | Pending:
    head = request.method == "HEAD"
    if found.stored is not None:
        return linked.answer(stored_response(request, svc.settings, linked, found.stored), Outcome.STORED)
    if found.failed is not None:  # failed for good: answered without trying again (until rq forgets the failure)
        raise linked.refused(422, found.failed, Outcome.FAILED)
    if head:
        status, detail = (202, "rendering") if found.rendering else (404, "not rendered yet")
        response = error_response(status, detail)
        return linked.answer(response, Outcome.NOT_STORED)
    if found.wait is not None:
        detail = f"the site key {linked.site.id} has started {svc.settings.link_renders_per_minute} renders this minute"
        raise linked.refused(429, detail, Outcome.LIMITED, {"Retry-After": str(found.wait)})
    assert found.job_id is not None
    return Pending(linked, found.job_id, lambda: look(svc, linked)[0])


@dataclass(frozen=True)
class Finding:
    """What one look at the store and the queue found for a link: the stored clip, a failure for good (its error),
    whether it renders (a ``HEAD``'s look), the seconds until its key may start a render, or the job rendering it."""

    stored: Stored | None = None
    failed: str | None = None
    rendering: bool = False
    wait: int | None = None
    job_id: str | None = None


def _find(svc: Services, linked: Linked, head: bool) -> Finding:
    stored, job_ids = look(svc, linked)
    if stored is not None:
        return Finding(stored=stored)
    states = [render_state(job_id, svc.connection) for job_id in job_ids]
    failed = next((s for s in states if s.state == "failed" and s.permanent), None)
    if failed is not None:
        return Finding(failed=str(failed.error))
    rendering = any(s.state == "active" for s in states)
    if head:
        return Finding(rendering=rendering)
    if not rendering:  # a render would start: the key's allowance
        wait = link_renders_allowed(svc, linked.site.id)
        if wait is not None:
            return Finding(wait=wait)
    enqueued = _start(svc, linked)
    if enqueued.link is not None:  # stored meanwhile
        stored, _ = look(svc, linked)
        if stored is not None:
            return Finding(stored=stored)
    if not enqueued.joined:  # a render started (one joined costs nothing)
        count_render(svc.connection, linked.site.id)
    return Finding(job_id=enqueued.job_id)


def look(svc: Services, linked: Linked) -> tuple[Stored | None, list[str]]:
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


def job_id(svc: Services, linked: Linked) -> str:
    """The job that renders a link's clip, from its spec alone (the store is not asked)."""
    source = resolve_source(linked.spec.source, allow_local=svc.settings.allow_local_sources is True)
    return job_id_for(clip_key(linked.spec, source.identity, identities(svc.settings), svc.settings.key_secret))


def _start(svc: Services, linked: Linked) -> Enqueued:
    """The render that stores what the link names (the queue's source rules checked as for ``POST /clips``)."""
    if linked.variant == "poster":
        return enqueue_poster(linked.spec, svc.settings, svc.connection, svc.storage)
    return enqueue_clip(linked.spec, svc.settings, svc.connection, svc.storage, count_join=False)
