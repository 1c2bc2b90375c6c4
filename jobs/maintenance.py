"""Health of the queue's services, and the workers' maintenance pass for jobs lost between queue and start."""

from __future__ import annotations

import logging
import time

from redis import Redis
from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus

from quoteclip import redis_keys
from storage import Storage

log = logging.getLogger(__name__)


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


PENDING = redis_keys.PENDING  # job id → when it was (re)queued; removed when a worker starts it
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
