"""Health of the queue's services and of the workers' machines; the workers' maintenance for jobs lost between
queue and start; and handing a job back to the queue when its worker cannot finish it (its machine failed, it
died, it was told to stop), without spending one of the clip's attempts."""

from __future__ import annotations

import logging
import math
import os
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from redis import Redis
from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.executions import Execution
from rq.job import Job, JobStatus
from rq.job_lifecycle import record_job_failure
from rq.registry import StartedJobRegistry
from rq.utils import parse_composite_key, utcparse

from quoteclip import redis_keys
from quoteclip.errors import MachineFault
from quoteclip.machine import available_memory
from quoteclip.settings import Settings
from renderer.ffmpeg import ffmpeg_binary
from storage import Storage

from .pipeline.stages import Stage
from .pipeline.tempdirs import short_of_space
from .status import announce

log = logging.getLogger(__name__)


def health(connection: Redis, storage: Storage) -> dict[str, str]:
    """Whether Redis and the store answer: {"status": "ok"|"degraded", "redis": …, "storage": …}."""
    checks: dict[str, str] = {}
    try:
        connection.ping()
        checks["redis"] = "ok"
    except Exception as exc:  # noqa: BLE001  (a health check reports any failure)
        checks["redis"] = f"unreachable: {type(exc).__name__}"
    try:
        storage.stat("0" * 32)
        checks["storage"] = "ok"
    except Exception as exc:  # noqa: BLE001  (a health check reports any failure)
        checks["storage"] = f"unreachable: {exc}".splitlines()[0][:200]
    return {"status": "ok" if all(v == "ok" for v in checks.values()) else "degraded", **checks}


PENDING = redis_keys.PENDING  # job id → when it was (re)queued; removed when a worker starts it
LOST_AFTER = 30  # seconds a queued job may be missing from every queue and taken list before it is pushed again


def mark_pending(connection: Redis, job_id: str) -> None:
    connection.zadd(PENDING, {job_id: time.time()})


# ---- a worker's machine: can it take a job? -------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """Why a worker's machine cannot take a job: ``reason`` (MACHINE_REASONS) and a line saying what is wrong."""

    reason: str
    detail: str


def machine_health(settings: Settings, temp_need: int = 0, run_ffmpeg: bool = False) -> Fault | None:
    """None when this machine can take a job; else the first thing wrong with it: free space on the temp folder
    (the worker's minimum plus ``temp_need``, a job's clips) or on the source cache folder, available memory,
    ffmpeg found and executable (with ``run_ffmpeg``, also answering ``-version``)."""
    short = short_of_space(
        {"temp": Path(tempfile.gettempdir()), "source cache": settings.cache_dir},
        {"temp": settings.min_free_bytes + temp_need, "source cache": settings.min_free_bytes},
    )
    if short is not None:
        return Fault("disk", short)
    memory = available_memory()
    if memory is not None and memory < settings.min_free_memory:
        return Fault(
            "memory",
            f"{memory / 1024**2:.0f} MB of memory available, under the {settings.min_free_memory / 1024**2:.0f} MB "
            "needed",
        )
    try:
        binary = ffmpeg_binary(settings.ffmpeg_binary)
        if not os.access(binary, os.X_OK):
            return Fault("ffmpeg", "ffmpeg is not executable")
        if run_ffmpeg:
            done = subprocess.run(
                [binary, "-hide_banner", "-version"], capture_output=True, timeout=30, stdin=subprocess.DEVNULL
            )
            if done.returncode != 0:
                return Fault("ffmpeg", f"ffmpeg -version exited with code {done.returncode}")
    except MachineFault as exc:
        return Fault(exc.reason, str(exc))
    except (OSError, subprocess.SubprocessError) as exc:
        return Fault("ffmpeg", f"ffmpeg does not run ({getattr(exc, 'strerror', None) or type(exc).__name__})")
    return None


# ---- a worker's status and lease in Redis ----------------------------------------------------------------------

WORKERS = redis_keys.WORKERS
RECLAIM_LOCK = redis_keys.RECLAIM_LOCK
worker_key = redis_keys.worker


def renew_lease(connection: Redis, name: str, lease: float, fault: Fault | None, since: float) -> None:
    """Write the worker's status and give it ``lease`` seconds more."""
    with connection.pipeline(transaction=False) as pipe:
        pipe.hset(
            worker_key(name),
            mapping={
                "state": "unhealthy" if fault else "healthy",
                "reason": fault.reason if fault else "",
                "detail": fault.detail if fault else "",
                "since": f"{since:.3f}",
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "beat": f"{time.time():.3f}",
            },
        )
        pipe.expire(worker_key(name), math.ceil(lease))
        pipe.sadd(WORKERS, name)
        pipe.execute()


def drop_worker(connection: Redis, name: str) -> None:
    """A worker stopping: its status and lease go (its job, if any, was handed back or finished)."""
    with connection.pipeline(transaction=False) as pipe:
        pipe.delete(worker_key(name))
        pipe.srem(WORKERS, name)
        pipe.execute()


def pause_worker(connection: Redis, name: str, fault: Fault, seconds: float) -> None:
    """Set by a work-horse whose machine failed its job: its worker takes no job for ``seconds``."""
    connection.hset(
        worker_key(name),
        mapping={
            "paused_until": f"{time.time() + seconds:.3f}",
            "fault_reason": fault.reason,
            "fault_detail": fault.detail,
        },
    )


def paused(connection: Redis, name: str) -> Fault | None:
    """The fault a worker is pausing after, with the seconds left, or None."""
    until, reason, detail = connection.hmget(worker_key(name), "paused_until", "fault_reason", "fault_detail")
    left = float(until or 0) - time.time()
    if left <= 0:
        return None
    return Fault(_text(reason) or "disk", f"{_text(detail)}; taking no job for {left:.0f} s more")


def worker_states(connection: Redis) -> list[dict[str, str]]:
    """The status of every render worker alive (its lease unexpired): name, state, reason, detail, host."""
    names = sorted(_text(n) for n in connection.smembers(WORKERS))
    with connection.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.hgetall(worker_key(name))
        found = pipe.execute()
    states = []
    for name, fields in zip(names, found, strict=True):
        if not fields:  # its lease lapsed: the worker is gone
            connection.srem(WORKERS, name)
            continue
        state = {_text(k): _text(v) for k, v in fields.items()}
        states.append({"name": name, **{k: state.get(k, "") for k in ("state", "reason", "detail", "host")}})
    return states


# ---- handing a job back ------------------------------------------------------------------------------------------

# why a worker gave a started job back → its count in job.meta: its worker or work-horse died; its worker was told
# to stop; its work-horse ended without settling it (its last writes lost while Redis was away)
LOST = {"died": "deaths", "stopped": "stops", "unsettled": "unsettled"}


def give_back(
    job: Job, queue: Queue, execution: Execution | None, cause: str, settings: Settings, detail: str = ""
) -> bool:
    """Put a started job whose worker could not finish it back at the front of its queue, no attempt spent:
    ``cause`` "died" (its worker or work-horse was killed: counted, and at ``settings.max_deaths`` deaths the job
    fails instead, saying so), "stopped" (its worker was told to stop) or "unsettled" (its work-horse ended
    while Redis was away, its outcome unrecorded). True when requeued."""
    connection = job.connection
    meta = job.get_meta(refresh=True)
    count = int(meta.get(LOST[cause], 0)) + 1
    meta[LOST[cause]] = count
    if cause == "died" and count >= settings.max_deaths:
        message = (
            f"worker lost: the job's worker died {count} times while running it ({detail or 'killed'}); it may be "
            "what kills them"
        )
        fail_job(job, queue, execution, message)
        return False
    meta.update(stage=Stage.QUEUED.value, progress=0, error=None, last_lost=f"{cause}: {detail}".rstrip(": "))
    with connection.pipeline() as pipe:
        if execution is not None:
            execution.delete(job=job, pipeline=pipe)
        pipe.lrem(queue.key, 0, job.id)  # never twice in the queue
        # saves the job, meta included, as queued (its dependencies, if any, were met: it had started)
        queue._enqueue_job(job, pipeline=pipe, at_front=True)
        pipe.execute()
    mark_pending(connection, job.id)
    announce(job)
    log.warning("handed %s back to the queue (its worker %s: %s)", job.id, cause, detail or "-")
    return True


def fail_job(job: Job, queue: Queue, execution: Execution | None, message: str) -> None:
    """Fail a started job whose worker is gone (no work-horse to do it): its error said, the failure recorded as
    rq records one, its dependents released and its failure callback (the webhooks) run."""
    job.retries_left = 0
    job.meta.update(stage=Stage.FAILED.value, error=message, error_kind="worker lost", permanent=True)
    with job.connection.pipeline() as pipe:
        if execution is not None:
            execution.delete(job=job, pipeline=pipe)
        job.save(pipeline=pipe)
        record_job_failure(job, message, pipe)
        pipe.execute()
    queue.enqueue_dependents(job, refresh_job_status=False)
    callback = job.failure_callback
    if callback is not None:
        try:
            callback(job, job.connection, WorkerLost, WorkerLost(message), None)
        except Exception:
            log.exception("the failure callback of %s failed", job.id)
    announce(job)
    log.warning("%s failed: %s", job.id, message)


class WorkerLost(Exception):
    """The error a job failed by its worker's deaths is reported with (to its failure callback)."""


def reclaim_lost(connection: Redis, queue_names: list[str], settings: Settings) -> list[tuple[str, bool]]:
    """Hand back the started jobs of workers that are gone: the worker's lease lapsed and the job's own heartbeat
    is as old (a worker of an older version keeps no lease, but beats its job's heartbeat every 10 s). Each is
    claimed by removing it from its queue's started registry, so two workers never both hand one back. Returns
    (job id, requeued) for each."""
    done: list[tuple[str, bool]] = []
    now = datetime.now(UTC)
    for name in queue_names:
        queue = Queue(name, connection=connection)
        registry = StartedJobRegistry(queue=queue)
        for entry in connection.zrange(registry.key, 0, -1):
            composite = _text(entry)
            job_id, execution_id = parse_composite_key(composite)
            status, worker, beat = (
                _text(v) for v in connection.hmget(Job.key_for(job_id), "status", "worker_name", "last_heartbeat")
            )
            if status != JobStatus.STARTED.value or not worker or connection.exists(worker_key(worker)):
                continue
            try:
                age = (now - utcparse(beat).replace(tzinfo=UTC)).total_seconds() if beat else math.inf
            except ValueError:
                age = math.inf
            if age < settings.worker_lease:
                continue
            if not connection.zrem(registry.key, composite):
                continue  # another worker claimed it first
            try:
                job = Job.fetch(job_id, connection=connection)
            except NoSuchJobError:
                continue
            execution = Execution(execution_id, job_id, connection, worker_name=worker)
            detail = f"worker {worker} stopped renewing its lease {age:.0f} s ago"
            done.append((job_id, give_back(job, queue, execution, "died", settings, detail)))
    return done


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else "" if value is None else str(value)
