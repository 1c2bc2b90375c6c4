"""A queued clip's status, stage, progress, fresh link or readable error."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from redis import Redis
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus

from quoteclip import redis_keys
from quoteclip.errors import BadInput, StorageFailed
from quoteclip.settings import Settings
from storage import Storage

from .connection import JOB_ID, clients
from .pipeline.stages import Stage


def job_status(
    job_id: str, settings: Settings, connection: Redis | None = None, storage: Storage | None = None
) -> dict[str, Any]:
    """Status, stage, progress 0–100, a fresh link when finished, and a readable error when failed."""
    match = JOB_ID.match(job_id)
    if not match:
        raise BadInput(f"job_id must look like clip-<32 hex digits>, got {job_id!r}")
    with clients(settings, connection, storage) as (redis, store):
        return _status(job_id, match.group(1), redis, store)


def public_status(status: JobStatus | None) -> str:
    """The one vocabulary every answer uses (rq's main statuses; the stage says more): a job waiting on a
    dependency or for a retry is ``queued``; one stopped or canceled has ``failed``."""
    if status is None:
        return "unknown"
    if status in {JobStatus.STARTED, JobStatus.FINISHED, JobStatus.FAILED}:
        return str(status.value)
    if status in {JobStatus.STOPPED, JobStatus.CANCELED}:
        return "failed"
    return "queued"  # queued, deferred, scheduled, or on its way there (created, ready to enqueue, rate limited)


def _status(job_id: str, key: str, connection: Redis, storage: Storage) -> dict[str, Any]:
    try:
        job: Job | None = Job.fetch(job_id, connection=connection)
    except NoSuchJobError:
        job = None
    body: dict[str, Any] = {"job_id": job_id}
    if job is None or job.get_status(refresh=False) == JobStatus.FINISHED or _stale(job):
        meta = storage.stat(key)
        if meta is not None:  # finished, or stored by an earlier request (the job itself may have expired)
            body.update(status="finished", stage="finished", progress=100, link=storage.link(key), error=None)
            return body
        if job is None:
            body.update(status="unknown", stage=None, progress=0, link=None, error="no such job (or it expired)")
            return body
    assert job is not None
    status = job.get_status(refresh=False)
    stage = str(job.meta.get("stage") or Stage.QUEUED.value)
    error = job.meta.get("error")
    if status == JobStatus.FAILED:
        stage = Stage.FAILED.value
        error = error or _last_line(job)
    elif status in {JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.DEFERRED} and stage != Stage.QUEUED.value:
        stage = Stage.QUEUED.value  # waiting for a retry
    progress = int(job.meta.get("progress") or 0)
    if status in (JobStatus.DEFERRED, JobStatus.QUEUED) and job.meta.get("group"):  # rendered with its other
        group = _group(connection, str(job.meta["group"]))  # profiles: their progress
        if group is not None:
            status, stage, progress = group
        elif storage.stat(key) is not None:  # the group stored it; this clip's own job, queued after it, finds it so
            body.update(status="finished", stage="finished", progress=100, link=storage.link(key), error=None)
            return body
    body.update(
        status=public_status(status),
        stage=stage,
        progress=progress,
        link=None,
        error=error or None,
    )
    if status == JobStatus.FINISHED:  # finished but the object is missing from the store
        body.update(status="failed", stage="failed", error="the clip is no longer in storage; enqueue it again")
    elif stage == Stage.FINISHED.value and storage.stat(key) is not None:
        # the worker has stored the clip (the mp4 last) and said so; rq's own bookkeeping follows a moment later
        body.update(status="finished", progress=100, link=storage.link(key), error=None)
    elif (
        job.get_status(refresh=False) == JobStatus.STARTED
        and job.meta.get("stage", Stage.QUEUED.value) == Stage.QUEUED.value
        and _stored(storage, key)
    ):
        # a job just taken that has not yet looked in the store (a profile's own job, run after its group stored the
        # clip; a job run again after its answer was lost): the clip is stored, and its link works now
        body.update(status="finished", stage="finished", progress=100, link=storage.link(key), error=None)
    elif stage == Stage.FAILED.value and job.get_status(refresh=False) == JobStatus.STARTED:
        # the job's own worker has given up (a retry would say "queued"); rq's bookkeeping follows a moment later
        body.update(status="failed")
    return body


def _stored(storage: Storage, key: str) -> bool:
    """Whether the clip ``key`` is stored, for a job whose own status does not need the store to be said: False when
    the store does not answer (a job taken again while the store is down is said as it is, ``started``)."""
    try:
        return storage.stat(key) is not None
    except StorageFailed:
        return False


def announce(job: Job) -> None:
    """Tell status long-polls waiting on ``job`` (and, for a profiles' group job, on each of its clips) that
    its stage or progress changed."""
    with job.connection.pipeline(transaction=False) as pipe:
        for job_id in (job.id, *job.meta.get("members", ())):
            pipe.publish(redis_keys.events(job_id), job.meta.get("stage", ""))
        pipe.execute()


def _group(connection: Redis, group_id: str) -> tuple[JobStatus, str, int] | None:
    """The status, stage and progress of the job rendering a clip together with its other profiles."""
    try:
        group = Job.fetch(group_id, connection=connection)
    except NoSuchJobError:
        return None
    status = group.get_status(refresh=False)
    if status not in {JobStatus.QUEUED, JobStatus.STARTED}:
        return None  # done (this clip's own job runs next) or failed (it renders the clip itself)
    return status, str(group.meta.get("stage") or Stage.QUEUED.value), int(group.meta.get("progress") or 0)


STALE_AFTER = 60  # seconds without a heartbeat from a started job's worker


def _stale(job: Job) -> bool:
    """A started job whose worker stopped beating (killed, or cut off from Redis): its clip may be stored
    already (ask the store), and if not, rq's maintenance requeues it once its heartbeat expires."""
    if job.get_status(refresh=False) != JobStatus.STARTED or job.last_heartbeat is None:
        return False
    beat = job.last_heartbeat if job.last_heartbeat.tzinfo else job.last_heartbeat.replace(tzinfo=UTC)
    return (datetime.now(UTC) - beat).total_seconds() > STALE_AFTER


def _last_line(job: Job) -> str:
    result = job.latest_result()
    text = (result.exc_string or "") if result is not None else ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "failed"
