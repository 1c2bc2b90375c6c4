"""What a worker runs for one queued clip. Progress goes to ``job.meta``; errors are classified."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from rq import get_current_job

from quoteclip.errors import QuoteclipError
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from storage import open_storage

from .connection import bulk_queue_name
from .maintenance import PENDING
from .metrics import record_cache_hit, record_failure, record_render
from .pipeline.produce import Stage, produce_clips, produce_poster
from .relay import relaying
from .status import announce

log = logging.getLogger(__name__)

META_INTERVAL = 0.5  # seconds between progress writes to Redis
BULK_NICE = 10  # scheduling niceness of a bulk job's work-horse and ffmpeg


def render_job(spec_data: dict[str, Any]) -> dict[str, object]:
    """Render (or find) the clip for ``spec_data``; returns the ClipResult as JSON."""
    return _render([spec_data])[0]


def render_profiles_job(spec_data: list[dict[str, Any]]) -> list[dict[str, object]]:
    """Render (or find) one quote's clips in several profiles from one decode (``enqueue_profiles``)."""
    return _render(spec_data)


def _render(spec_data: list[dict[str, Any]]) -> list[dict[str, object]]:
    settings = Settings.from_env().for_queue()
    job = get_current_job()
    last = 0.0

    def report(stage: Stage, percent: int) -> None:
        nonlocal last
        now = time.monotonic()
        if job is None or (now - last < META_INTERVAL and job.meta.get("stage") == stage.value and percent < 100):
            return
        last = now
        job.meta.update(stage=stage.value, progress=percent)
        job.save_meta()
        announce(job)

    began = time.perf_counter()
    if job is not None:
        job.connection.zrem(PENDING, job.id)  # started: no longer waiting in a queue
        if job.origin == bulk_queue_name(settings):
            # batch work yields the cores to a click rendering beside it (this work-horse and its ffmpeg; the
            # horse is forked for the one job and exits after it)
            os.nice(BULK_NICE)
    try:
        specs = [build_spec(data, max_seconds=settings.max_clip_seconds) for data in spec_data]
        with relaying(settings, job, specs) as relay:  # a click's clip, streamed while it renders (jobs/relay.py)
            results = produce_clips(specs, settings, open_storage(settings), report=report, stream=relay)
    except QuoteclipError as exc:
        retrying = bool(job is not None and not exc.permanent and job.retries_left)
        if job is not None:
            if exc.permanent:
                job.retries_left = 0  # the worker reads this: a permanent error is never retried
            job.meta.update(
                stage=Stage.QUEUED.value if retrying else Stage.FAILED.value,
                error=f"{exc.kind}: {exc}".splitlines()[0],
                error_kind=exc.kind,
                permanent=exc.permanent,
            )
            job.save_meta()
            announce(job)
        log.warning("%s%s", f"{exc.kind}: {exc}".splitlines()[0], " (will retry)" if retrying else "")
        if job is not None and not retrying:
            record_failure(job.connection, exc.kind)
        raise
    result = next((r for r in results if not r.cached), results[0])
    if job is not None:
        if result.cached:
            if "group" not in job.meta:  # a profile rendered by its group job is not a cache hit
                record_cache_hit(job.connection)
        else:
            record_render(job.connection, time.perf_counter() - began, result.source_bytes)
            if result.timings:  # where a click's time went (the benchmark's figure 3d reads these)
                waited = (
                    (job.started_at - job.enqueued_at).total_seconds() if job.started_at and job.enqueued_at else None
                )
                job.meta["timings"] = {**result.timings, "queued_s": round(waited, 3) if waited is not None else None}
                job.save_meta()
    return [r.to_json() for r in results]


def render_poster_job(spec_data: dict[str, Any]) -> dict[str, object]:
    """Render (or find) a clip's poster alone (``produce_poster``: one frame, never the clip), for a signed
    link's ``<video poster>``; a permanent error is not retried, and waiting requests are told of the end."""
    settings = Settings.from_env().for_queue()
    job = get_current_job()
    if job is not None:
        job.connection.zrem(PENDING, job.id)
    try:
        spec = build_spec(spec_data, max_seconds=settings.max_clip_seconds)
        poster = produce_poster(spec, settings, open_storage(settings))
    except QuoteclipError as exc:
        retrying = bool(job is not None and not exc.permanent and job.retries_left)
        if job is not None:
            if exc.permanent:
                job.retries_left = 0
            job.meta.update(
                stage=Stage.QUEUED.value if retrying else Stage.FAILED.value,
                error=f"{exc.kind}: {exc}".splitlines()[0],
                error_kind=exc.kind,
                permanent=exc.permanent,
            )
            job.save_meta()
            announce(job)
            if not retrying:
                record_failure(job.connection, exc.kind)
        raise
    if job is not None:
        job.meta.update(stage=Stage.FINISHED.value, progress=100, timings=poster.timings)
        job.save_meta()
        announce(job)
    return poster.to_json()
