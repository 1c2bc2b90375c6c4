"""Cancel a clip's job: a queued one never runs, a running one is stopped (its work-horse and ffmpeg killed by its
worker, rq's stop command), and a clip rendered in pieces leaves no piece behind. A stored clip is not touched:
revoking its links is ``quoteclip revoke``'s."""

from __future__ import annotations

import logging
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

from .connection import JOB_ID, clients
from .maintenance import PENDING
from .pieces import clean_pieces
from .pipeline.stages import Stage
from .status import announce

log = logging.getLogger(__name__)

CANCELED = "canceled: the clip was canceled by its requester"
CANCELED_TTL = 3600  # seconds a canceled clip's piece jobs are told so (a new request of the clip starts afresh)
STOP_WAIT = 10.0  # seconds to wait for a running job's worker to stop it


def cancel_clip(
    job_id: str, settings: Settings, connection: Redis | None = None, storage: Storage | None = None
) -> dict[str, Any]:
    """Cancel ``job_id``'s clip: ``{"job_id", "status", "canceled"}``, where ``status`` is the job's afterwards
    (``canceled``, ``stopped``; or ``finished``, ``failed``: it had ended, nothing was done) and ``canceled`` says
    whether this call did it. An unknown job is a BadInput naming it."""
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
        if status in (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED):
            return {"job_id": job_id, "status": str(status.value), "canceled": False}
        job.meta.update(stage=Stage.FAILED.value, error=CANCELED, error_kind="canceled", permanent=True)
        job.save_meta()
        redis.set(redis_keys.piece_failed(key), CANCELED, ex=CANCELED_TTL)  # piece jobs still running drop theirs
        if status == JobStatus.STARTED:
            try:
                send_stop_job_command(redis, job_id)
            except InvalidJobOperation:  # (it ended in between)
                pass
            _wait_stopped(job)
        else:
            job.cancel()
            redis.zrem(PENDING, job_id)
        final = job.get_status(refresh=True)
        removed = clean_pieces(redis, store, key)
        announce(job)
        log.info("canceled %s (was %s, now %s; %d stored pieces removed)", job_id, status.value, final, removed)
        return {"job_id": job_id, "status": str(final.value) if final else "canceled", "canceled": True}


def _wait_stopped(job: Job) -> None:
    deadline = time.monotonic() + STOP_WAIT
    while time.monotonic() < deadline:
        if job.get_status(refresh=True) != JobStatus.STARTED:
            return
        time.sleep(0.05)
    log.warning("%s was told to stop but still runs after %.0f s", job.id, STOP_WAIT)
