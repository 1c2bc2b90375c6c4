"""Where a job is, always: a render worker takes a job by moving its id from the queue into a list of its own
(``redis_keys.taken``), atomically, and removes it from there only once the job is started. So a job whose
state says queued is in a queue or in some worker's taken list, whatever answer was lost on the way; and the
reconciler (run in the workers' maintenance pass, one worker at a time) puts back what a worker whose lease
lapsed had taken, and what says queued but is nowhere (a write lost with a Redis restart), without spending
one of the clip's attempts."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any

from redis import Redis
from rq import Queue

from quoteclip import redis_keys

from .maintenance import LOST_AFTER, PENDING, mark_pending, reclaim_lost
from .metrics import record_failure, record_handback

log = logging.getLogger(__name__)

TAKE_WAIT = 1  # seconds a worker of several queues waits on its first (the clicks') before looking at all again
FORGET_TAKER = 24 * 3600  # seconds after which a dead worker's empty taken list leaves the index

# One look at the queues, in order: the first id found moves to the worker's taken list (and the worker is
# indexed as a taker first, so the reconciler can always find that list).
_TAKE = """
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
for i = 3, #KEYS do
  local id = redis.call('LMOVE', KEYS[i], KEYS[1], 'LEFT', 'RIGHT')
  if id then return {KEYS[i], id} end
end
return false
"""

# Put back one id of a taken list, when the list's owner has no live lease (or ARGV[3] says it is the owner
# itself doing it): a job still queued goes to the front of its queue (never twice), any other id just leaves
# the list (a started job is the started registry's; a finished or deleted one is nobody's). Returns 1 when the
# id went back to its queue, 0 when it only left the list, -1 when the owner is alive, -2 when it was not there.
_PUT_BACK = """
if ARGV[3] ~= '1' and redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return -2 end
local status = redis.call('HGET', KEYS[3], 'status')
local origin = redis.call('HGET', KEYS[3], 'origin')
if status ~= 'queued' or not origin then return 0 end
local queue = ARGV[2] .. origin
if not redis.call('LPOS', queue, ARGV[1]) then redis.call('LPUSH', queue, ARGV[1]) end
return 1
"""


def take(connection: Redis, worker: str, queue_keys: Sequence[str], wait: float | None) -> tuple[str, str] | None:
    """(queue key, job id) of the first job of the first queue that has one, moved to ``worker``'s taken list;
    with ``wait``, waits that long for one on the first queue when all are empty (a BLMOVE: one queue per wait is
    all Redis offers atomically). None when there was none."""
    taken = redis_keys.taken(worker)
    found = connection.eval(_TAKE, 2 + len(queue_keys), taken, redis_keys.TAKERS, *queue_keys, worker, time.time())
    if found:
        key, job_id = (_text(v) for v in found)
        return key, job_id
    if not wait:
        return None
    job = connection.blmove(queue_keys[0], taken, max(1, math.ceil(wait)), "LEFT", "RIGHT")
    return (queue_keys[0], _text(job)) if job is not None else None


def still_taken(connection: Redis, worker: str, job_id: str) -> bool:
    """Whether ``job_id`` is still in ``worker``'s taken list (an answer that came late, after the reconciler put
    the job back for another worker, is not)."""
    return connection.lpos(redis_keys.taken(worker), job_id) is not None


def leftover(connection: Redis, worker: str) -> str | None:
    """The first id in ``worker``'s own taken list (one it took but did not start: its answer was lost, or its
    start failed), or None."""
    first = connection.lindex(redis_keys.taken(worker), 0)
    return _text(first) if first is not None else None


def started(connection: Redis, worker: str, job_id: str) -> None:
    """The job is started (its state says so and it is in its started registry): it leaves the taken list."""
    connection.lrem(redis_keys.taken(worker), 1, job_id)


def put_back(connection: Redis, worker: str, job_id: str, own: bool = False) -> int:
    """Put one id of ``worker``'s taken list back (see _PUT_BACK for the answer); ``own``: the worker itself,
    alive, giving up a job it will not start."""
    from rq.job import Job

    return int(
        connection.eval(
            _PUT_BACK,
            3,
            redis_keys.taken(worker),
            redis_keys.worker(worker),
            Job.key_for(job_id),
            job_id,
            Queue.redis_queue_namespace_prefix,
            "1" if own else "0",
        )
    )


def reclaim_taken(connection: Redis) -> list[str]:
    """Put back the jobs that workers without a live lease had taken and not started. Returns their ids."""
    requeued = []
    takers: list[tuple[Any, float]] = connection.zrange(redis_keys.TAKERS, 0, -1, withscores=True)  # type: ignore[assignment]
    for raw, since in takers:
        name = _text(raw)
        if connection.exists(redis_keys.worker(name)):
            continue
        for job_id in (_text(v) for v in connection.lrange(redis_keys.taken(name), 0, -1)):
            if put_back(connection, name, job_id) == 1:
                requeued.append(job_id)
                mark_pending(connection, job_id)
                log.warning("requeued %s: its worker %s took it and is gone", job_id, name)
        if not connection.exists(redis_keys.taken(name)) and since < time.time() - FORGET_TAKER:
            connection.zrem(redis_keys.TAKERS, name)
    return requeued


def taken_anywhere(connection: Redis, job_id: str) -> bool:
    """Whether some worker's taken list holds ``job_id``."""
    return any(
        connection.lpos(redis_keys.taken(_text(name)), job_id) is not None
        for name in connection.zrange(redis_keys.TAKERS, 0, -1)
    )


def requeue_lost(connection: Redis) -> list[str]:
    """Push back queued jobs that are in no queue and in no worker's taken list, LOST_AFTER seconds after they
    were (re)queued: a write lost with a Redis restart or failover leaves them so. Run in the maintenance pass."""
    from rq.exceptions import NoSuchJobError
    from rq.job import Job, JobStatus

    pushed = []
    for raw in connection.zrangebyscore(PENDING, 0, time.time() - LOST_AFTER):
        job_id = _text(raw)
        try:
            job = Job.fetch(job_id, connection=connection)
        except NoSuchJobError:
            connection.zrem(PENDING, job_id)
            continue
        if job.get_status(refresh=False) != JobStatus.QUEUED:
            connection.zrem(PENDING, job_id)
            continue
        queue = Queue(job.origin, connection=connection)
        if connection.lpos(queue.key, job_id) is None and not taken_anywhere(connection, job_id):
            queue.enqueue_job(job)
            pushed.append(job_id)
            log.warning("requeued %s: it was queued but in no queue", job_id)
        mark_pending(connection, job_id)
    return pushed


def reconcile(connection: Redis, queue_names: Sequence[str], settings: Any) -> None:
    """One pass of the reconciler (one worker in the fleet at a time): started jobs of workers whose lease lapsed
    go back to their queue (or fail at their cap of deaths), taken ones of such workers go back, and queued jobs
    found in no queue are pushed again. None of these spends an attempt."""
    for _, requeued in reclaim_lost(connection, list(queue_names), settings):
        if requeued:
            record_handback(connection, "worker died")
        else:
            record_failure(connection, "worker lost")
    for _ in reclaim_taken(connection):
        record_handback(connection, "worker lost its job")
    for _ in requeue_lost(connection):
        record_handback(connection, "job lost")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
