"""Instant previews for the edit page: ``POST /previews`` with a clip's body answers at once with an MP4 of the
source's own frames (no encode), its WebVTT captions and the exact source frames it holds."""

from __future__ import annotations

import threading
from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from jobs.pipeline.produce import produce_clip
from quoteclip.spec import build_spec
from renderer.sidecars import captions_vtt

from .clips import status_of
from .deps import AllowanceDep, RateLimited, ServicesDep
from .errors import APIError
from .models import ClipRequest, Frame, PreviewAnswer
from .quotes import quote_fields

router = APIRouter()
# Previews are made in the API process (a stream copy costs little CPU; a queue would add its pickup to every
# nudge). At most this many at once per API process; more wait for a Retry-After.
MAX_PREVIEWS = 4
_running = threading.BoundedSemaphore(MAX_PREVIEWS)


@router.post("/previews", response_model=PreviewAnswer, responses={422: {}, 429: {}, 503: {}})
async def create_preview(request: ClipRequest, _: RateLimited, svc: ServicesDep) -> PreviewAnswer:
    """The instant preview of a clip (any ``quality`` in the body is ignored): the source's frames from the
    keyframe before ``start``, copied into an MP4 whose edit list starts playback at ``start``'s frame. A quote
    found by its words is found in the API's finder threads (api/finders.py)."""
    if request.callback_url is not None:
        raise APIError(422, "callback_url: previews answer at once and take no callback")
    if request.profiles is not None:
        raise APIError(422, "profiles: a preview is one clip in the source's own shape")
    data = request.model_dump(exclude={"callback_url", "profiles"})
    if data.get("transcript") is not None:
        data = await svc.finders.run(quote_fields, data, svc.settings, None)
    return await run_in_threadpool(_preview, data, svc)


def _preview(data: dict[str, Any], svc: ServicesDep) -> PreviewAnswer:
    data = quote_fields(data, svc.settings, None) | {"quality": "instant"}
    spec = build_spec(data, max_seconds=svc.settings.max_clip_seconds)
    if not _running.acquire(blocking=False):
        raise APIError(503, f"{MAX_PREVIEWS} previews are being made; try again", {"Retry-After": "1"})
    try:
        result = produce_clip(spec, svc.settings, svc.storage)
    finally:
        _running.release()
    job_id = f"clip-{result.key}"
    frames = result.frames or {}
    vtt = (result.sidecars or {}).get("vtt")
    return PreviewAnswer(
        id=job_id,
        link=str(svc.link_for(job_id, result.link)),
        vtt=svc.link_for(job_id, vtt, "captions.vtt") if vtt else None,
        mode=(result.preview or {}).get("mode", "copy"),
        reason=(result.preview or {}).get("reason"),
        frame_rate=str(frames.get("frame_rate", "")),
        first_frame=Frame.model_validate(frames["first_frame"]),
        last_frame=Frame.model_validate(frames["last_frame"]),
        width=result.width,
        height=result.height,
        duration=result.duration,
        cached=result.cached,
        warnings=list(spec.warnings),
    )


@router.post("/previews/captions", response_class=Response, responses={200: {"content": {"text/vtt": {}}}, 422: {}})
async def preview_captions(request: ClipRequest, allowance: AllowanceDep, svc: ServicesDep) -> Response:
    """The WebVTT captions a clip's final render burns (a cue per caption state, the spoken word marked), laid out
    from the body alone: no source read, no render. The edit page shows them when the words are corrected, so a
    correction shows at once what the final will burn. A quote found by its words in the page's captions reads the
    page: counted against the caller's rate limit first, and found in the API's finder threads."""
    if request.profiles is not None:
        raise APIError(422, "profiles: a preview is one clip in the source's own shape")
    data = request.model_dump(exclude={"callback_url", "profiles"})
    if data.get("transcript") is not None:
        await run_in_threadpool(allowance.take, 1)
        data = await svc.finders.run(quote_fields, data, svc.settings, None)
    return await run_in_threadpool(_captions, data, svc)


def _captions(data: dict[str, Any], svc: ServicesDep) -> Response:
    data = quote_fields(data, svc.settings, None) | {"quality": "final"}
    spec = build_spec(data, max_seconds=svc.settings.max_clip_seconds)
    return Response(captions_vtt(spec), media_type="text/vtt")


@router.get("/clips/{clip_id}/captions.vtt", include_in_schema=False)
def captions(clip_id: str, svc: ServicesDep) -> Response:
    """A clip's WebVTT captions from the local-folder store (S3 links point at the bucket instead)."""
    return _sidecar(svc, clip_id, ".vtt", "text/vtt", "captions")


@router.get("/clips/{clip_id}/poster.jpg", include_in_schema=False)
def poster(clip_id: str, svc: ServicesDep) -> Response:
    """A clip's poster from the local-folder store (S3 links point at the bucket instead)."""
    return _sidecar(svc, clip_id, ".jpg", "image/jpeg", "poster")


@router.get("/clips/{clip_id}/report", responses={404: {}, 429: {}, 503: {}})
def report(clip_id: str, _: RateLimited, svc: ServicesDep) -> JSONResponse:
    """A stored clip's quality report (docs/creators.md, "Checking a clip"): its manifest's, which a worker puts
    there once the clip is stored, or made now from the stored clip (an instant preview's, which the edit page
    shows before Render final; a clip of at most 120 s) and kept in its manifest. Counted against the caller's rate
    limit as a preview is, and made in the preview slots: 503 when they are all taken."""
    status_of(svc, clip_id)  # 404 for an unknown clip
    made = _report(clip_id.removeprefix("clip-"), svc)
    if made is None:
        detail = "no report for this clip (not stored, over 120 s without one from its worker, or its check failed)"
        return JSONResponse({"detail": detail}, 404)
    return JSONResponse(made)


def _report(key: str, svc: ServicesDep) -> dict[str, Any] | None:
    from jobs.pipeline.quality import stored_report
    from renderer.ffmpeg import ffmpeg_binary

    if not _running.acquire(blocking=False):
        raise APIError(503, f"{MAX_PREVIEWS} previews or reports are being made; try again", {"Retry-After": "1"})
    try:
        return stored_report(svc.storage, key, ffmpeg_binary(svc.settings.ffmpeg_binary))
    finally:
        _running.release()


def _sidecar(svc: ServicesDep, clip_id: str, suffix: str, kind: str, what: str) -> Response:
    status_of(svc, clip_id)  # 404 for an unknown clip
    path = svc.storage.local_path(clip_id.removeprefix("clip-"))
    file = path.with_suffix(suffix) if path is not None else None
    if file is None or not file.is_file():
        return JSONResponse({"detail": f"no {what} for this clip"}, status_code=404)
    return Response(file.read_bytes(), media_type=kind)
