"""Clips and batches: create (or find) clips, read their status, download them."""

from __future__ import annotations

import time
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response

from jobs.cancel import cancel_clip
from jobs.pipeline.assets import check_allowed
from jobs.queue import JOB_ID, Enqueued, enqueue_clip, enqueue_profiles, job_status
from quoteclip.errors import BadInput, SourceRefused
from quoteclip.settings import Settings, loopback_hint
from quoteclip.spec import ClipSpec, build_spec, in_profiles, parse_profiles
from sources import allowed_hosts, resolve_source
from sources.safety import host_allowed
from storage import LocalStorage

from .auth import sign_path
from .deps import AllowanceDep, Services, ServicesDep
from .errors import APIError
from .models import ClipAccepted, ClipRequest, ClipsAccepted, ClipStatus, ProfileAccepted
from .quotes import quote_fields

router = APIRouter()
RETRY_AFTER = "2"
MAX_WAIT = 30.0  # seconds a status long-poll may hold
TERMINAL = {"finished", "failed", "stopped", "canceled"}


def clip_spec(fields: dict[str, Any], settings: Settings) -> ClipSpec:
    """The clip a request's fields name, as ``POST /clips`` and a signed link both build it: the spec (validated,
    within the service's longest clip, its encoder preset), then the queue's source rules before the store is asked
    (no path on a worker's disk, as the source or a brand file; the source hosts allowed). BadInput when it breaks
    one; the queue checks the source's address again when it enqueues."""
    spec = build_spec(fields, max_seconds=settings.max_clip_seconds, encoder_preset=settings.encoder_preset)
    local = settings.allow_local_sources is True
    resolve_source(spec.source, allow_local=local)
    check_allowed(spec, local)
    hosts = allowed_hosts(settings)
    parts = urlsplit(spec.source)
    if hosts is not None and parts.scheme in ("http", "https") and not host_allowed(parts.hostname or "", hosts):
        host = parts.hostname or ""
        raise SourceRefused(f"source host not allowed: {host} (see QUOTECLIP_SOURCE_HOSTS{loopback_hint(host)})")
    return spec


def accepted(svc: Services, spec: ClipSpec, callback_url: str | None, bulk: bool = False) -> tuple[ClipAccepted, int]:
    queued = enqueue_clip(spec, svc.settings, svc.connection, svc.storage, callback_url=callback_url, bulk=bulk)
    return _answer(svc, queued, spec), 200 if queued.link else 202


def accepted_profiles(
    svc: Services, specs: list[ClipSpec], callback_url: str | None, bulk: bool = False
) -> list[ProfileAccepted]:
    """One quote in several profiles: one clip each, the missing ones rendered together (one decode)."""
    queued = enqueue_profiles(specs, svc.settings, svc.connection, svc.storage, callback_url=callback_url, bulk=bulk)
    return [
        ProfileAccepted(**_answer(svc, q, spec).model_dump(), profile=spec.profile)
        for spec, q in zip(specs, queued, strict=True)
    ]


def _answer(svc: Services, queued: Enqueued, spec: ClipSpec) -> ClipAccepted:
    return ClipAccepted(
        id=queued.job_id,
        status=queued.status,
        stage=queued.stage or queued.status,
        status_url=f"/clips/{queued.job_id}",
        download_url=sign_path(f"/clips/{queued.job_id}/download", svc.settings),
        link=svc.link_for(queued.job_id, queued.link),
        cached=queued.link is not None,
        warnings=list(spec.warnings),
    )


def status_of(svc: Services, clip_id: str) -> dict[str, Any]:
    if not JOB_ID.match(clip_id):
        raise APIError(404, f"no such clip: {clip_id[:80]!r}")
    body = job_status(clip_id, svc.settings, svc.connection, svc.storage)
    if body["status"] == "unknown":
        raise APIError(404, "no such clip (or it expired)")
    return body


@router.post(
    "/clips",
    response_model=ClipAccepted | ClipsAccepted,
    responses={200: {"model": ClipAccepted | ClipsAccepted}, 422: {}, 429: {}},
)
async def create_clip(request: ClipRequest, allowance: AllowanceDep, svc: ServicesDep) -> JSONResponse:
    """Render a clip (or find it). 200 with the link when stored; 202 with the job's id otherwise. With
    ``profiles``, one clip per profile from one decode: ``{"clips": [...]}``, 200 when all are stored. Counts one
    clip a profile against the caller's rate limit (a stored one too); a quote found by its words
    (``transcript: "source"``) is counted before the page is read, and found in the API's finder threads
    (api/finders.py), never in a request thread."""
    fields = request.model_dump(exclude={"callback_url", "profiles"})
    charged = 0
    if fields.get("transcript") is not None:
        charged = len(parse_profiles(request.profiles)) if request.profiles is not None else 1
        await run_in_threadpool(allowance.take, charged)
        fields = await svc.finders.run(quote_fields, fields, svc.settings, svc.connection)
    return await run_in_threadpool(_create_clip, request, fields, allowance, svc, charged)


def _create_clip(
    request: ClipRequest, fields: dict[str, Any], allowance: AllowanceDep, svc: Services, charged: int
) -> JSONResponse:
    fields = quote_fields(fields, svc.settings, svc.connection)  # (a quote found already: the fields as they are)
    spec = clip_spec(fields, svc.settings)
    if request.profiles is not None:
        specs = in_profiles(spec, parse_profiles(request.profiles))
        allowance.take(len(specs) - charged)
        clips = accepted_profiles(svc, specs, request.callback_url)
        status = 200 if all(c.link and c.cached for c in clips) else 202
        return JSONResponse(ClipsAccepted(clips=clips).model_dump(), status_code=status)
    allowance.take(1 - charged)
    body, status = accepted(svc, spec, request.callback_url)
    return JSONResponse(body.model_dump(), status_code=status)


@router.get("/clips/{clip_id}", response_model=ClipStatus, responses={404: {}})
async def get_clip(
    clip_id: str,
    svc: ServicesDep,
    wait: Annotated[float, Query(ge=0, le=MAX_WAIT, description="Long-poll: answer at a change, or after this")] = 0,
) -> ClipStatus:
    """The clip's status. With ``wait``, the answer comes as soon as the clip finishes or fails, its stage or
    progress changes, or ``wait`` seconds pass: a page learns of the link without polling delay."""
    async with svc.events.watch(clip_id) as watch:  # woken when the worker announces a change
        body = await run_in_threadpool(status_of, svc, clip_id)
        seen = (body["status"], body["stage"], body["progress"])
        deadline = time.monotonic() + wait
        while body["status"] not in TERMINAL and time.monotonic() < deadline:
            await watch.changed(deadline - time.monotonic())
            body = await run_in_threadpool(status_of, svc, clip_id)
            if (body["status"], body["stage"], body["progress"]) != seen:
                break
    return ClipStatus(
        id=clip_id,
        status=body["status"],
        stage=body["stage"],
        progress=body["progress"],
        link=svc.link_for(clip_id, body["link"]),
        error=body["error"],
    )


@router.delete("/clips/{clip_id}", responses={202: {}, 404: {}, 409: {}})
def cancel(
    clip_id: str,
    svc: ServicesDep,
    force: Annotated[bool, Query(description="stop the render whoever else waits for it")] = False,
) -> JSONResponse:
    """Cancel a clip not yet stored: a queued one never renders, a rendering one is stopped on its worker, and a
    clip rendered in pieces leaves none behind. 200 with the job's status after it; 202 when other requests joined
    the render and still wait for it: this one is withdrawn and the render goes on (``force=true`` stops it); 409
    for a stored clip (revoke its links instead) or one that had failed already; 404 for an unknown one."""
    if not JOB_ID.match(clip_id):
        raise APIError(404, f"no such clip: {clip_id[:80]!r}")
    try:
        done = cancel_clip(clip_id, svc.settings, svc.connection, svc.storage, force=force)
    except BadInput:
        raise APIError(404, "no such clip (or it expired)") from None
    return cancel_answer(clip_id, done)


def cancel_answer(clip_id: str, done: dict[str, Any]) -> JSONResponse:
    """A clip's cancel as the API answers it (``DELETE /clips/{id}``, and each clip of a batch's)."""
    if done["waiting"]:
        detail = f"{done['waiting']} other request(s) still wait for this clip: it renders on (force=true stops it)"
        body = {"id": clip_id, "status": done["status"], "canceled": False, "waiting": done["waiting"]}
        return JSONResponse({**body, "detail": detail}, status_code=202)
    if not done["canceled"]:
        said = "is stored: revoke its links instead" if done["status"] == "finished" else f"had {done['status']}"
        raise APIError(409, f"nothing to cancel: the clip {said}")
    return JSONResponse({"id": clip_id, "status": done["status"], "canceled": True, "waiting": 0})


@router.get("/clips/{clip_id}/download", responses={302: {}, 202: {}, 404: {}, 410: {}})
def download(clip_id: str, svc: ServicesDep) -> Response:
    """For a plain <a href>: 302 to the clip when ready, 202 + Retry-After while rendering, 410 if failed."""
    body = status_of(svc, clip_id)
    if body["status"] == "finished":
        return RedirectResponse(str(svc.link_for(clip_id, body["link"])), status_code=302)
    if body["status"] in ("failed", "stopped", "canceled"):
        return JSONResponse({"detail": body["error"] or "failed"}, status_code=410)
    return JSONResponse(
        {"status": body["status"], "stage": body["stage"], "progress": body["progress"]},
        status_code=202,
        headers={"Retry-After": RETRY_AFTER},
    )


@router.get("/clips/{clip_id}/file", include_in_schema=False)
def local_file(clip_id: str, svc: ServicesDep) -> Response:
    """The clip from the local-folder store (S3 links point at the bucket instead)."""
    match = JOB_ID.match(clip_id)
    meta = svc.storage.stat(match.group(1)) if match and isinstance(svc.storage, LocalStorage) else None
    path = svc.storage.local_path(match.group(1)) if match and meta is not None else None
    if meta is None or path is None:
        return JSONResponse({"detail": "no such clip"}, status_code=404)
    return FileResponse(
        path, media_type="video/mp4", filename=meta.get("filename", "clip.mp4"), content_disposition_type="inline"
    )
