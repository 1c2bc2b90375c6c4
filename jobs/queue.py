"""Enqueue a clip, or join an identical one. Job ids are content-addressed: ``clip-<key>``.

``enqueue_clip``, ``job_status``, ``connect`` and the rest keep their import path here for callers.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from redis import Redis, WatchError
from rq import Callback, Queue, Retry
from rq.exceptions import DuplicateJobError, NoSuchJobError
from rq.job import Dependency, Job, JobStatus

from quoteclip import redis_keys
from quoteclip.errors import BadInput, QuoteclipError
from quoteclip.settings import Settings
from quoteclip.spec import ClipSpec
from sources import allowed_hosts
from sources.safety import check_url
from storage import Storage

from .connection import GROUP, JOB_ID, bulk_queue_name, clients, connect, job_id_for
from .maintenance import PENDING, health, mark_pending
from .metrics import record_cache_hit
from .pipeline.assets import check_allowed
from .pipeline.lookup import find_poster, lookup
from .pipeline.stages import Stage
from .reconcile import requeue_lost
from .status import job_status, public_status
from .webhooks import add_callback

__all__ = [
    "JOB_ID",
    "PENDING",
    "Enqueued",
    "bulk_queue_name",
    "connect",
    "enqueue_clip",
    "enqueue_poster",
    "enqueue_profiles",
    "health",
    "job_id_for",
    "job_status",
    "poster_job_id",
    "render_state",
    "requeue_lost",
]

log = logging.getLogger(__name__)

RETRY = Retry(max=3, interval=[2, 10, 30])
RESULT_TTL = 24 * 3600
FAILURE_TTL = 24 * 3600
REQUESTS_TTL = 24 * 3600  # seconds a job's count of requests is kept (longer than any render)
FETCH_ALLOWANCE = 120  # seconds a job may spend fetching, on top of the render timeout


def check_allowance(clip_seconds: float) -> float:
    """Seconds a clip's job is given, past its render, for the clip's quality report once it is stored (one decode
    of the clip: jobs/pipeline/quality.py), at most a second a second of clip and half a minute."""
    return 30.0 + clip_seconds


ACTIVE = {JobStatus.QUEUED, JobStatus.STARTED, JobStatus.DEFERRED, JobStatus.SCHEDULED}


@dataclass(frozen=True)
class Enqueued:
    job_id: str
    status: str  # queued, started or finished (jobs.status.public_status)
    link: str | None = None
    joined: bool = False
    stage: str | None = None  # the detail: queued, fetching, rendering, uploading, finished

    def to_json(self) -> dict[str, object]:
        body: dict[str, object] = {"job_id": self.job_id, "status": self.status, "stage": self.stage or self.status}
        if self.link:
            body["link"] = self.link
            body["cached"] = True
        if self.joined:
            body["joined"] = True
        return body


def enqueue_profiles(
    specs: list[ClipSpec],
    settings: Settings,
    connection: Redis | None = None,
    storage: Storage | None = None,
    callback_url: str | None = None,
    bulk: bool = False,
) -> list[Enqueued]:
    """One quote in several profiles: each its own clip id (``clip-<key>``, answering status on its own), the
    missing ones rendered together by one job (``group-…``: one read and decode of the source, one encoder per
    profile). Each clip's job waits on the group's and then finds its clip stored; a single-profile request for
    one of them meanwhile joins that job. A profile already queued or rendering on its own is joined, not
    rendered again; if the group fails, each clip's job renders its own."""
    if len(specs) == 1:
        return [enqueue_clip(specs[0], settings, connection, storage, callback_url, bulk)]
    settings = settings.for_queue()
    with clients(settings, connection, storage) as (redis, store):
        return _enqueue_group(specs, settings, redis, store, callback_url, bulk)


def _enqueue_group(
    specs: list[ClipSpec],
    settings: Settings,
    connection: Redis,
    storage: Storage,
    callback_url: str | None,
    bulk: bool,
) -> list[Enqueued]:
    answers: list[Enqueued | None] = []
    group: list[int] = []
    for n, spec in enumerate(specs):
        key, cached = lookup(spec, settings, storage)
        job_id = job_id_for(key)
        if cached is not None:
            record_cache_hit(connection)
            answers.append(Enqueued(job_id, Stage.FINISHED.value, link=cached.link))
            continue
        answers.append(None)
        if not _active(connection, job_id):
            group.append(n)
    depends: str | None = None
    if len(group) > 1:
        members = [job_id_for(lookup(specs[n], settings, storage)[0]) for n in group]
        depends = GROUP + hashlib.sha256(",".join(members).encode()).hexdigest()[:32]
        queue = Queue(bulk_queue_name(settings) if bulk else settings.queue_name, connection=connection)
        try:
            queue.enqueue(
                "jobs.tasks.render_profiles_job",
                [specs[n].model_dump(mode="json") for n in group],
                job_id=depends,
                unique=True,
                retry=RETRY,
                job_timeout=int(
                    (settings.render_timeout(specs[0].duration) + check_allowance(specs[0].duration)) * len(group)
                    + FETCH_ALLOWANCE
                ),
                result_ttl=RESULT_TTL,
                failure_ttl=FAILURE_TTL,
                description=f"{len(group)} profiles of {specs[0].start:.3f}-{specs[0].end:.3f}",
                meta={"stage": Stage.QUEUED.value, "progress": 0, "members": members},
            )
            log.info("enqueued %s for %s", depends, ", ".join(members))
            mark_pending(connection, depends)
        except DuplicateJobError:
            pass  # the same profiles of the same quote are being rendered together already
    for n, spec in enumerate(specs):
        if answers[n] is None:
            after = depends if n in group else None
            answers[n] = enqueue_clip(spec, settings, connection, storage, callback_url, bulk, depends_on=after)
    return [a for a in answers if a is not None]


def _active(connection: Redis, job_id: str) -> bool:
    try:
        return Job.fetch(job_id, connection=connection).get_status(refresh=False) in ACTIVE
    except NoSuchJobError:
        return False


def enqueue_clip(
    spec: ClipSpec,
    settings: Settings,
    connection: Redis | None = None,
    storage: Storage | None = None,
    callback_url: str | None = None,
    bulk: bool = False,
    depends_on: str | None = None,
    count_join: bool = True,
) -> Enqueued:
    """Return at once: the stored clip's link, the id of an identical job already queued or running
    (joined, never a second render), or the id of a newly enqueued job. A request that starts or joins a render
    is counted (a cancel withdraws one, jobs/cancel.py); ``count_join`` False counts only one that starts it (a
    signed link's views, which never withdraw).

    ``callback_url`` gets a signed POST when the job finishes or fails (not when the clip is already stored:
    the answer then carries the link). ``depends_on``: a group job rendering this clip with its other profiles;
    this job runs after it (finding its clip stored), or after its failure (rendering the clip itself)."""
    settings = settings.for_queue()
    with clients(settings, connection, storage) as (redis, store):
        return _enqueue_one(spec, settings, redis, store, callback_url, bulk, depends_on, count_join)


def _enqueue_one(
    spec: ClipSpec,
    settings: Settings,
    connection: Redis,
    storage: Storage,
    callback_url: str | None,
    bulk: bool,
    depends_on: str | None,
    count_join: bool = True,
) -> Enqueued:
    check_allowed(spec, settings.allow_local_sources is True)  # no path on a worker's disk from a request
    key, cached = lookup(spec, settings, storage)
    if urlsplit(spec.source).scheme in ("http", "https"):  # (lower-cased by urlsplit: HTTP:// too)
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

    def create() -> None:
        # rq's unique enqueue does not take dependencies: a clip's job waiting on its group is created by the
        # one request that sets its marker; racing ones join it
        if depends_on is not None and not connection.set(redis_keys.member(job_id), depends_on, nx=True, ex=60):
            raise DuplicateJobError(job_id)
        queue.enqueue(
            "jobs.tasks.render_job",
            spec.model_dump(mode="json"),
            job_id=job_id,
            unique=depends_on is None,  # atomic in Redis: of racing identical requests exactly one enqueues
            retry=RETRY,
            job_timeout=int(settings.render_timeout(spec.duration) + check_allowance(spec.duration) + FETCH_ALLOWANCE),
            result_ttl=RESULT_TTL,
            failure_ttl=FAILURE_TTL,
            description=f"clip {key} {spec.start:.3f}-{spec.end:.3f}",
            meta={"stage": Stage.QUEUED.value, "progress": 0, **({"group": depends_on} if depends_on else {})},
            depends_on=Dependency(jobs=[depends_on], allow_failure=True) if depends_on else None,
            on_success=Callback("jobs.webhooks.on_success"),
            on_failure=Callback("jobs.webhooks.on_failure"),
        )

    def existing(job: Job, status: JobStatus) -> Enqueued | None:
        if status in ACTIVE:
            stage = str(job.meta.get("stage", Stage.QUEUED.value))
            return Enqueued(job_id, public_status(status), joined=True, stage=stage)
        if status == JobStatus.FINISHED and storage.stat(key) is not None:
            return Enqueued(job_id, Stage.FINISHED.value, link=storage.link(key))
        return None  # failed, stopped, canceled, or finished but the object is gone: replace the old job

    return _create_or_join(connection, job_id, create, existing, count_join)


def _create_or_join(
    connection: Redis,
    job_id: str,
    create: Callable[[], None],
    existing: Callable[[Job, JobStatus], Enqueued | None],
    count_join: bool = True,
) -> Enqueued:
    """Enqueue ``job_id`` with ``create`` (raising ``DuplicateJobError`` when the job exists), or answer with the
    existing job: ``existing`` says what to answer for it, or ``None`` to replace it (deleted while its status is
    still what was read, then created again). Three tries, for a job that changes state in between."""
    for _ in range(3):
        try:
            create()
            log.info("enqueued %s", job_id)
            mark_pending(connection, job_id)
            _count_request(connection, job_id)
            return Enqueued(job_id, Stage.QUEUED.value)
        except DuplicateJobError:
            pass
        try:
            job = Job.fetch(job_id, connection=connection)
        except NoSuchJobError:
            time.sleep(0.05)
            continue  # it expired or was replaced in between, or is being created: try again
        status = job.get_status(refresh=False)
        answer = existing(job, status)
        if answer is not None:
            if answer.joined and count_join:  # one more request waits for this render (jobs/cancel.py)
                _count_request(connection, job_id)
            return answer
        _delete_if_status(connection, job, status)
    raise BadInput(f"could not enqueue {job_id}: it kept changing state under us; try again")


def _count_request(connection: Redis, job_id: str) -> None:
    """One more request waits for ``job_id``'s render (a cancel withdraws one: jobs/cancel.py)."""
    with connection.pipeline() as pipe:
        pipe.incr(redis_keys.requests(job_id))
        pipe.expire(redis_keys.requests(job_id), REQUESTS_TTL)
        pipe.execute()


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
            pipe.delete(redis_keys.requests(job.id))  # (the ended job's requests: its replacement counts its own)
            pipe.execute()
        except WatchError:
            return


def poster_job_id(key: str) -> str:
    """The job rendering the clip ``key``'s poster alone (``poster-<key>``: never the clip's own job id)."""
    return f"poster-{key}"


def enqueue_poster(
    spec: ClipSpec, settings: Settings, connection: Redis | None = None, storage: Storage | None = None
) -> Enqueued:
    """A clip's poster (a page's ``<video poster>``) without the clip: stored already (the clip's own, or one
    rendered alone), the clip's own job when it is queued or running (it stores the poster with the clip), else a
    job on the click queue rendering the poster alone (``jobs.tasks.render_poster_job``), joined by identical
    requests as a clip's is. The queue's source rules apply as to a clip."""
    settings = settings.for_queue()
    with clients(settings, connection, storage) as (redis, store):
        check_allowed(spec, settings.allow_local_sources is True)
        key, stored = find_poster(spec, settings, store)
        if urlsplit(spec.source).scheme in ("http", "https"):
            check_url(spec.source, allowed_hosts(settings), settings.allow_addresses)
        job_id = poster_job_id(key)
        if stored:
            return Enqueued(job_id, Stage.FINISHED.value, link=store.link(key, ".jpg"))
        clip_job = job_id_for(key)
        if _active(redis, clip_job):
            return Enqueued(clip_job, Stage.QUEUED.value, joined=True)
        queue = Queue(settings.queue_name, connection=redis)

        def create() -> None:
            queue.enqueue(
                "jobs.tasks.render_poster_job",
                spec.model_dump(mode="json"),
                job_id=job_id,
                unique=True,
                retry=RETRY,
                job_timeout=int(settings.render_timeout(0.0) + FETCH_ALLOWANCE),
                result_ttl=RESULT_TTL,
                failure_ttl=FAILURE_TTL,
                description=f"poster {key} {spec.start:.3f}-{spec.end:.3f}",
                meta={"stage": Stage.QUEUED.value, "progress": 0},
            )

        def existing(job: Job, status: JobStatus) -> Enqueued | None:
            if status in ACTIVE:
                return Enqueued(job_id, str(job.meta.get("stage", Stage.QUEUED.value)), joined=True)
            return None  # failed, or finished and its poster gone: replace it

        return _create_or_join(redis, job_id, create, existing)


@dataclass(frozen=True)
class RenderState:
    """Where the job ``job_id`` stands for a request waiting on it (a signed link held until its clip is stored):
    ``active`` (queued, waiting for a retry or running), ``finished``, ``failed`` (for good: ``error`` says why,
    ``permanent`` whether another try could pass) or ``none`` (no such job)."""

    state: str
    stage: str | None = None
    progress: int = 0
    error: str | None = None
    permanent: bool = False


def render_state(job_id: str, connection: Redis) -> RenderState:
    try:
        job = Job.fetch(job_id, connection=connection)
    except NoSuchJobError:
        return RenderState("none")
    status = job.get_status(refresh=False)
    stage = str(job.meta.get("stage") or Stage.QUEUED.value)
    failed = status in (JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED)
    if failed or (status == JobStatus.STARTED and stage == Stage.FAILED.value):  # (rq's bookkeeping follows later)
        error = job.meta.get("error") or "the render stopped"
        return RenderState("failed", Stage.FAILED.value, 0, str(error), bool(job.meta.get("permanent", False)))
    if status == JobStatus.FINISHED:
        return RenderState("finished", Stage.FINISHED.value, 100)
    return RenderState("active", stage, int(job.meta.get("progress") or 0))
