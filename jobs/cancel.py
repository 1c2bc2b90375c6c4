"""Cancel a clip's job: a queued one never runs, a running one is stopped (its work-horse and ffmpeg killed by its
worker, rq's stop command), and a clip rendered in pieces leaves no piece behind. A stored clip is not touched:
revoking its links is ``quoteclip revoke``'s. A render other requests joined (jobs/queue.py counts each request
that started or joined it) is stopped by the last of them to cancel: an earlier cancel withdraws its request and
the render goes on for the others. A batch's cancel withdraws its request of each of its clips."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from redis import Redis
from rq.command import send_stop_job_command
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Job, JobStatus

from quoteclip import redis_keys
from quoteclip.errors import BadInput
from quoteclip.settings import Settings
from storage import Storage

from .connection import GROUP, JOB_ID, clients
from .maintenance import PENDING
from .pieces import clean_pieces
from .pipeline.stages import Stage
from .status import announce, public_status

log = logging.getLogger(__name__)

CANCELED = "canceled: the clip was canceled by its requester"
CANCELED_TTL = 3600  # seconds a canceled clip's piece jobs are told so (a new request of the clip starts afresh)
STOP_WAIT = 10.0  # seconds to wait for a running job's worker to stop it


TERMINAL = (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED)
BATCH_ID = re.compile(r"\Abatch-[0-9a-f]{24}\Z")


def cancel_clip(
    job_id: str,
    settings: Settings,
    connection: Redis | None = None,
    storage: Storage | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Cancel ``job_id``'s clip: ``{"job_id", "status", "canceled", "waiting"}``, where ``status`` is the job's
    afterwards (``canceled``, ``stopped``; or ``finished``, ``failed``: it had ended, nothing was done; or
    ``queued``, ``started``: other requests still wait for it), ``canceled`` says whether this call stopped it and
    ``waiting`` how many requests still wait for the render (this one withdrawn). ``force`` stops it whoever waits.
    An unknown job is a BadInput naming it."""
    match = JOB_ID.match(job_id)
    if not match:
        raise BadInput(f"job_id must look like clip-<32 hex digits>, got {job_id!r}")
    key = match.group(1)
    settings = settings.for_queue()
    with clients(settings, connection, storage) as (redis, store):
        try:
            job = Job.fetch(job_id, connection=redis)
        except NoSuchJobError:
            raise BadInput(f"no such clip job: {job_id} (it ended long ago, or never was)") from None
        status = job.get_status(refresh=False)
        if status in TERMINAL:
            return {"job_id": job_id, "status": str(status.value), "canceled": False, "waiting": 0}
        if store.stat(key) is not None:  # stored, its job still checking it (jobs/pipeline/quality.py): not touched
            return {"job_id": job_id, "status": JobStatus.FINISHED.value, "canceled": False, "waiting": 0}
        left = 0 if force else int(redis.decr(redis_keys.requests(job_id)))  # (a job counted by none: -1)
        if left > 0:
            log.info("a request of %s withdrawn; %d still wait for it", job_id, left)
            return {"job_id": job_id, "status": public_status(status), "canceled": False, "waiting": left}
        redis.delete(redis_keys.requests(job_id))
        job.meta.update(stage=Stage.FAILED.value, error=CANCELED, error_kind="canceled", permanent=True)
        job.save_meta()
        redis.set(redis_keys.piece_failed(key), CANCELED, ex=CANCELED_TTL)  # piece jobs still running drop theirs
        _stop(redis, job, status)
        final = job.get_status(refresh=True)
        removed = clean_pieces(redis, store, key)
        announce(job)
        log.info("canceled %s (was %s, now %s; %d stored pieces removed)", job_id, status.value, final, removed)
        _cancel_unwanted_group(redis, job)
        return {"job_id": job_id, "status": str(final.value) if final else "canceled", "canceled": True, "waiting": 0}


def cancel_batch(
    batch_id: str,
    settings: Settings,
    connection: Redis | None = None,
    storage: Storage | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Withdraw a batch's request of each of its clips (``cancel_clip``): ``{"batch_id", "canceled", "clips"}``,
    ``canceled`` how many renders this stopped, ``clips`` each clip's answer (``unknown`` for a job gone). An
    unknown batch is a BadInput naming it."""
    if not BATCH_ID.match(batch_id):
        raise BadInput(f"batch_id must look like batch-<24 hex digits>, got {batch_id!r}")
    settings = settings.for_queue()
    with clients(settings, connection, storage) as (redis, store):
        members = [
            m.decode() if isinstance(m, bytes) else str(m) for m in redis.lrange(redis_keys.batch(batch_id), 0, -1)
        ]
        if not members:
            raise BadInput(f"no such batch: {batch_id} (it ended long ago, or never was)")
        # a batch's requests are withdrawn once: its cancel said again (a retry) withdraws no other request
        first = bool(redis.set(redis_keys.batch(batch_id) + ":canceled", "1", nx=True, ex=CANCELED_TTL))
        answers = []
        for job_id in members:  # (a quote the batch named twice: two requests of its clip, both withdrawn)
            try:
                if first or force:
                    answers.append(cancel_clip(job_id, settings, redis, store, force))
                else:
                    answers.append(_as_is(redis, job_id))
            except BadInput:
                answers.append({"job_id": job_id, "status": "unknown", "canceled": False, "waiting": 0})
        stopped = sum(1 for a in answers if a["canceled"])
        return {"batch_id": batch_id, "canceled": stopped, "clips": answers}


def _cancel_unwanted_group(redis: Redis, job: Job) -> None:
    """The group job a canceled clip's job waited on (jobs/queue.py ``enqueue_profiles``: a quote's profiles rendered
    together, ``group-…``) canceled, or stopped, once none of its clips is wanted: every member's job canceled. While
    one is still wanted the group renders on, and stores its canceled profiles too."""
    for group_id in job.dependency_ids:
        if not group_id.startswith(GROUP):
            continue
        try:
            group = Job.fetch(group_id, connection=redis)
        except NoSuchJobError:
            continue
        status = group.get_status(refresh=False)
        if status in TERMINAL or not all(_canceled(redis, m) for m in group.meta.get("members") or ()):
            continue
        _stop(redis, group, status)
        log.info("canceled %s: none of its clips is wanted", group_id)


def _canceled(redis: Redis, job_id: str) -> bool:
    """Whether a clip's job was canceled (or is gone: no one waits for it)."""
    try:
        member = Job.fetch(job_id, connection=redis)
    except NoSuchJobError:
        return True
    status = member.get_status(refresh=False)
    return status in (JobStatus.CANCELED, JobStatus.STOPPED) or member.meta.get("error") == CANCELED


def _stop(redis: Redis, job: Job, status: JobStatus | None) -> None:
    """A running job stopped by its worker (rq's stop command), any other canceled (it never runs)."""
    if status == JobStatus.STARTED:
        try:
            send_stop_job_command(redis, job.id)
        except InvalidJobOperation:  # (it ended in between)
            return
        _wait_stopped(job)
    else:
        job.cancel()
        redis.zrem(PENDING, job.id)


def _wait_stopped(job: Job) -> None:
    deadline = time.monotonic() + STOP_WAIT
    while time.monotonic() < deadline:
        if job.get_status(refresh=True) != JobStatus.STARTED:
            return
        time.sleep(0.05)
    log.warning("%s was told to stop but still runs after %.0f s", job.id, STOP_WAIT)


def _as_is(redis: Redis, job_id: str) -> dict[str, Any]:
    """A clip of a batch canceled already, as it stands (no request of it withdrawn again)."""
    try:
        status = Job.fetch(job_id, connection=redis).get_status(refresh=False)
    except NoSuchJobError:
        raise BadInput(f"no such clip job: {job_id}") from None
    left = redis.get(redis_keys.requests(job_id))
    waiting = int(left) if left is not None and status not in TERMINAL else 0
    return {"job_id": job_id, "status": public_status(status), "canceled": False, "waiting": waiting}
