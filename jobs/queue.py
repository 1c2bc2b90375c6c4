"""Enqueue a clip, join an identical one, read its status. Job ids are content-addressed: ``clip-<key>``."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from redis import Redis, WatchError
from rq import Callback, Queue, Retry
from rq.exceptions import DuplicateJobError, NoSuchJobError
from rq.job import Job, JobStatus

from quoteclip import redis_keys
from quoteclip.errors import BadInput, QuoteclipError
from quoteclip.settings import Settings
from quoteclip.spec import ClipSpec
from sources import allowed_hosts
from sources.safety import check_url
from storage import Storage, open_storage

from .metrics import record_cache_hit
from .pipeline import Stage, lookup
from .webhooks import add_callback

log = logging.getLogger(__name__)

JOB_ID = re.compile(r"^clip-([0-9a-f]{32})$")
RETRY = Retry(max=3, interval=[2, 10, 30])
RESULT_TTL = 24 * 3600
FAILURE_TTL = 24 * 3600
FETCH_ALLOWANCE = 120  # seconds a job may spend fetching, on top of the render timeout
ACTIVE = {JobStatus.QUEUED, JobStatus.STARTED, JobStatus.DEFERRED, JobStatus.SCHEDULED}


@dataclass(frozen=True)
class Enqueued:
    job_id: str
    status: str
    link: str | None = None
    joined: bool = False

    def to_json(self) -> dict[str, object]:
        body: dict[str, object] = {"job_id": self.job_id, "status": self.status}
        if self.link:
            body["link"] = self.link
            body["cached"] = True
        if self.joined:
            body["joined"] = True
        return body


def bulk_queue_name(settings: Settings) -> str:
    return redis_keys.bulk_queue(settings.queue_name)


def connect(settings: Settings) -> Redis:
    return Redis.from_url(settings.redis_url, socket_connect_timeout=5, health_check_interval=30)


def job_id_for(key: str) -> str:
    return redis_keys.job_id(key)


def enqueue_clip(
    spec: ClipSpec,
    settings: Settings,
    connection: Redis | None = None,
    storage: Storage | None = None,
    callback_url: str | None = None,
    bulk: bool = False,
) -> Enqueued:
    """Return at once: the stored clip's link, the id of an identical job already queued or running
    (joined, never a second render), or the id of a newly enqueued job.

    ``callback_url`` gets a signed POST when the job finishes or fails (not when the clip is already stored:
    the answer then carries the link)."""
    settings = settings.for_queue()
    connection = connection or connect(settings)
    storage = storage or open_storage(settings)
    key, cached = lookup(spec, settings, storage)
    if spec.source.startswith(("http://", "https://")):
        check_url(spec.source, allowed_hosts(settings), settings.allow_addresses)  # refuse now, not in a worker
    job_id = job_id_for(key)
    if cached is not None:
        record_cache_hit(connection)
        return Enqueued(job_id, Stage.FINISHED.value, link=cached.link)
    if callback_url is not None:
        try:
            check_url(callback_url, None, settings.allow_addresses)  # refuse a private receiver now
        except QuoteclipError as exc:
            raise BadInput(f"callback_url: {exc}") from None
        add_callback(connection, job_id, callback_url)  # before enqueueing: a fast job still finds it
    queue = Queue(bulk_queue_name(settings) if bulk else settings.queue_name, connection=connection)
    for _ in range(3):
        try:
            queue.enqueue(
                "jobs.tasks.render_job",
                spec.model_dump(mode="json"),
                job_id=job_id,
                unique=True,  # atomic in Redis: of racing identical requests exactly one enqueues
                retry=RETRY,
                job_timeout=int(settings.render_timeout(spec.duration) + FETCH_ALLOWANCE),
                result_ttl=RESULT_TTL,
                failure_ttl=FAILURE_TTL,
                description=f"clip {key} {spec.start:.3f}-{spec.end:.3f}",
                meta={"stage": Stage.QUEUED.value, "progress": 0},
                on_success=Callback("jobs.webhooks.on_success"),
                on_failure=Callback("jobs.webhooks.on_failure"),
            )
            log.info("enqueued %s", job_id)
            mark_pending(connection, job_id)
            return Enqueued(job_id, Stage.QUEUED.value)
        except DuplicateJobError:
            pass
        try:
            job = Job.fetch(job_id, connection=connection)
        except NoSuchJobError:
            continue  # it expired or was replaced in between: try again
        status = job.get_status(refresh=False)
        if status in ACTIVE:
            return Enqueued(job_id, str(job.meta.get("stage", Stage.QUEUED.value)), joined=True)
        if status == JobStatus.FINISHED and storage.stat(key) is not None:
            return Enqueued(job_id, Stage.FINISHED.value, link=storage.link(key))
        # Failed, stopped, canceled, or finished but the object is gone: replace the old job.
        _delete_if_status(connection, job, status)
    raise BadInput(f"could not enqueue {job_id}: it kept changing state under us; try again")


def _delete_if_status(connection: Redis, job: Job, status: JobStatus) -> None:
    """Delete ``job`` only while its status is still ``status`` (another client may have replaced it)."""
    with connection.pipeline() as pipe:
        try:
            pipe.watch(job.key)
            current = pipe.hget(job.key, "status")
            if current is None or (current.decode() if isinstance(current, bytes) else current) != status.value:
                pipe.unwatch()
                return
            pipe.multi()
            pipe.delete(job.key)
            pipe.execute()
        except WatchError:
            return


def job_status(
    job_id: str, settings: Settings, connection: Redis | None = None, storage: Storage | None = None
) -> dict[str, Any]:
    """Status, stage, progress 0–100, a fresh link when finished, and a readable error when failed."""
    match = JOB_ID.match(job_id)
    if not match:
        raise BadInput(f"job_id must look like clip-<32 hex digits>, got {job_id!r}")
    key = match.group(1)
    connection = connection or connect(settings)
    storage = storage or open_storage(settings)
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
    body.update(
        status=status.value if status else "unknown",
        stage=stage,
        progress=progress,
        link=None,
        error=error or None,
    )
    if status == JobStatus.FINISHED:  # finished but the object is missing from the store
        body.update(status="failed", stage="failed", error="the clip is no longer in storage; enqueue it again")
    return body


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


def health(connection: Redis, storage: Storage) -> dict[str, str]:
    """Whether Redis and the store answer: {"status": "ok"|"degraded", "redis": …, "storage": …}."""
    checks: dict[str, str] = {}
    try:
        connection.ping()
        checks["redis"] = "ok"
    except Exception as exc:
        checks["redis"] = f"unreachable: {type(exc).__name__}"
    try:
        storage.stat("0" * 32)
        checks["storage"] = "ok"
    except Exception as exc:
        checks["storage"] = f"unreachable: {exc}".splitlines()[0][:200]
    return {"status": "ok" if all(v == "ok" for v in checks.values()) else "degraded", **checks}


PENDING = redis_keys.PENDING
LOST_AFTER = 120  # seconds a queued job may be missing from its queue before it is pushed again


def mark_pending(connection: Redis, job_id: str) -> None:
    connection.zadd(PENDING, {job_id: time.time()})


def requeue_lost(connection: Redis) -> list[str]:
    """Push back queued jobs that are in no queue: a worker that popped one and died (or lost Redis) before
    starting it leaves it so (rq's pop from several queues at once is not atomic with the start). Run by
    workers in their maintenance pass."""
    pushed = []
    for raw in connection.zrangebyscore(PENDING, 0, time.time() - LOST_AFTER):
        job_id = raw.decode() if isinstance(raw, bytes) else str(raw)
        try:
            job = Job.fetch(job_id, connection=connection)
        except NoSuchJobError:
            connection.zrem(PENDING, job_id)
            continue
        if job.get_status(refresh=False) != JobStatus.QUEUED:
            connection.zrem(PENDING, job_id)
            continue
        queue = Queue(job.origin, connection=connection)
        if connection.lpos(queue.key, job_id) is None:
            queue.enqueue_job(job)
            pushed.append(job_id)
            log.warning("requeued %s: it was queued but in no queue", job_id)
        mark_pending(connection, job_id)
    return pushed
