"""What a worker runs for one queued clip. Progress goes to ``job.meta``; errors are classified: a bad request
fails at once, a transient failure is retried (an attempt spent), a fault of this worker's machine hands the job
back to the queue for another worker (no attempt spent), and an error nobody expected fails at once as an
internal error. What a client sees of an error never shows a path on the worker."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rq import Retry, get_current_job
from rq.job import Job
from rq.timeouts import JobTimeoutException

from quoteclip.errors import InternalError, MachineFault, QuoteclipError, machine_fault
from quoteclip.settings import Settings
from quoteclip.spec import ClipSpec, build_spec
from storage import open_storage

from .connection import bulk_queue_name
from .maintenance import PENDING, Fault, machine_health, mark_pending, pause_worker
from .metrics import record_cache_hit, record_failure, record_handback, record_render
from .pieces import current_fleet
from .pipeline.produce import Stage, produce_clips, produce_poster
from .pipeline.tempdirs import clip_bytes, hide_paths
from .relay import relaying
from .status import announce

log = logging.getLogger(__name__)

META_INTERVAL = 0.5  # seconds between progress writes to Redis
BULK_NICE = 10  # scheduling niceness of a bulk job's work-horse and ffmpeg
# Errors of the job's own infrastructure that pass (Redis restarting, a network blip): retried as before.
TRANSIENT = (RedisConnectionError, RedisTimeoutError, ConnectionError, TimeoutError, JobTimeoutException)


def render_job(spec_data: dict[str, Any]) -> dict[str, object] | Retry:
    """Render (or find) the clip for ``spec_data``; returns the ClipResult as JSON (or, when this worker's
    machine failed it, rq's Retry: the job goes back to the queue without spending an attempt)."""
    done = _render([spec_data])
    return done if isinstance(done, Retry) else done[0]


def render_profiles_job(spec_data: list[dict[str, Any]]) -> list[dict[str, object]] | Retry:
    """Render (or find) one quote's clips in several profiles from one decode (``enqueue_profiles``)."""
    return _render(spec_data)


def _render(spec_data: list[dict[str, Any]]) -> list[dict[str, object]] | Retry:
    settings = Settings.from_env().for_queue()
    job = get_current_job()
    last = 0.0

    def report(stage: Stage, percent: int) -> None:
        nonlocal last
        now = time.monotonic()
        if job is None or (now - last < META_INTERVAL and job.meta.get("stage") == stage.value and percent < 100):
            return
        last = now
        if job.meta.get("stage") != stage.value:
            job.meta["stage_at"] = time.time()  # when the stage began: a worker told to stop estimates from it
        job.meta.update(stage=stage.value, progress=percent)
        try:
            job.save_meta()
            announce(job)
        except (RedisConnectionError, RedisTimeoutError) as exc:  # progress is news, not the job: render on
            log.info("progress not written (%s): Redis did not answer", str(exc).splitlines()[0])

    began = time.perf_counter()
    if job is not None:
        job.connection.zrem(PENDING, job.id)  # started: no longer waiting in a queue
        if job.origin == bulk_queue_name(settings):
            # batch work yields the cores to a click rendering beside it (this work-horse and its ffmpeg; the
            # horse is forked for the one job and exits after it)
            os.nice(BULK_NICE)
    specs: list[ClipSpec] = []
    try:
        specs = [build_spec(data, max_seconds=settings.max_clip_seconds) for data in spec_data]
        if job is not None:  # room for this job's clips, memory, a working ffmpeg
            fault = machine_health(settings, clip_bytes(specs[0].duration, len(specs)))
            if fault is not None:
                raise MachineFault(fault.detail, fault.reason)
        with relaying(settings, job, specs) as relay:  # a click's clip, streamed while it renders (jobs/relay.py)
            fleet = current_fleet() if len(specs) == 1 else None  # a long clip's pieces offered to the fleet
            results = produce_clips(
                specs, settings, open_storage(settings), report=report, stream=relay, fleet=fleet, check=True
            )
    except Exception as raised:  # noqa: BLE001  (every failure is classified and said: _failed)
        keep = [s.source for s in specs] + [str(d.get("source", "")) for d in spec_data if isinstance(d, dict)]
        return _failed(job, raised, keep, settings)
    result = next((r for r in results if not r.cached), results[0])
    if job is not None:
        if result.cached:
            if "group" not in job.meta:  # a profile rendered by its group job is not a cache hit
                record_cache_hit(job.connection)
        else:
            record_render(job.connection, time.perf_counter() - began, result.source_bytes)
            if result.timings:  # where a click's time went, kept on the job for an operator (and the benchmark)
                waited = (
                    (job.started_at - job.enqueued_at).total_seconds() if job.started_at and job.enqueued_at else None
                )
                job.meta["timings"] = {**result.timings, "queued_s": round(waited, 3) if waited is not None else None}
                job.save_meta()
    return [r.to_json() for r in results]


def _failed(job: Job | None, raised: BaseException, keep: list[str], settings: Settings) -> Retry:
    """What a job's failure does: a fault of this machine hands the job back (the Retry returned; no attempt
    spent); anything else is written to the job (its error with no path of the worker's but the sources in
    ``keep``, whether it will be retried) and raised again for rq, as the project error it stands for."""
    exc = classify(raised)
    if exc is None:  # Redis or the network went away: retried as rq retries any error
        raise raised
    said = hide_paths(f"{exc.kind}: {exc}".splitlines()[0], keep)
    if job is None:
        if exc is raised:
            raise raised
        raise exc from raised
    if isinstance(exc, MachineFault):
        handed = _hand_back(job, exc, said, settings)
        if handed is not None:
            return handed
        said = hide_paths(f"{exc.kind}: {exc}".splitlines()[0], keep)  # it fails: the count said
    retrying = bool(not exc.permanent and job.retries_left)
    if exc.permanent:
        job.retries_left = 0  # the worker reads this: a permanent error is never retried
    job.meta.update(
        stage=Stage.QUEUED.value if retrying else Stage.FAILED.value,
        error=said,
        error_kind=exc.kind,
        permanent=exc.permanent,
    )
    job.save_meta()
    announce(job)
    log.warning("%s%s", said, " (will retry)" if retrying else "")
    if not retrying:
        record_failure(job.connection, exc.kind)
    if exc is raised:
        raise raised
    raise exc from raised


def classify(raised: BaseException) -> QuoteclipError | None:
    """The project error a job's failure stands for: this machine's fault (MachineFault), the project error
    itself, None for a failure of Redis or the network (retried as it always was), else an InternalError naming
    the unexpected error's type (not retried: the same job meets it again)."""
    fault = machine_fault(raised)
    if fault is not None:
        return fault
    if isinstance(raised, QuoteclipError):
        return raised
    if isinstance(raised, TRANSIENT):
        return None
    text = str(raised).splitlines()[0][:200] if str(raised) else ""
    return InternalError(f"{type(raised).__name__}{f' ({text})' if text else ''}; the worker's log has the details")


def _hand_back(job: Job, fault: MachineFault, said: str, settings: Settings) -> Retry | None:
    """This worker's machine failed the job: pause the worker (it takes no job until the pause is over and its
    checks pass) and give the job back to the queue, at its front, for another worker, without spending an
    attempt (rq's Retry, which counts apart from the attempts). None when the job has been handed back
    ``max_handbacks`` times already: it then fails, saying so."""
    connection = job.connection
    if job.worker_name:
        pause_worker(connection, job.worker_name, Fault(fault.reason, said), settings.sick_pause)
    count = int(job.meta.get("handbacks", 0)) + 1
    job.meta["handbacks"] = count
    if count >= settings.max_handbacks:
        fault.args = (f"{said.removeprefix(f'{fault.kind}: ')} (the job met a failing machine {count} times)",)
        fault.permanent = True
        return None
    record_handback(connection, fault.reason)
    job.meta.update(stage=Stage.QUEUED.value, progress=0, error=None, last_lost=said)
    job.save_meta()
    mark_pending(connection, job.id)  # queued again (rq pushes it when this returns)
    announce(job)
    log.warning("%s: handing the job back to the queue for another worker", said)
    return Retry(max=settings.max_handbacks + 1, interval=0, enqueue_at_front=True)


def render_poster_job(spec_data: dict[str, Any]) -> dict[str, object] | Retry:
    """Render (or find) a clip's poster alone (``produce_poster``: one frame, never the clip), for a signed
    link's ``<video poster>``; its failures go as a clip's do (``_failed``), and waiting requests are told of the
    end."""
    settings = Settings.from_env().for_queue()
    job = get_current_job()
    if job is not None:
        job.connection.zrem(PENDING, job.id)
    try:
        spec = build_spec(spec_data, max_seconds=settings.max_clip_seconds)
        poster = produce_poster(spec, settings, open_storage(settings))
    except Exception as raised:  # noqa: BLE001  (every failure is classified and said: _failed)
        return _failed(job, raised, [str(spec_data.get("source", ""))], settings)
    if job is not None:
        job.meta.update(stage=Stage.FINISHED.value, progress=100, timings=poster.timings)
        job.save_meta()
        announce(job)
    return poster.to_json()
