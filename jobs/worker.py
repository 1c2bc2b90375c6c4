"""The rq worker for clips: clicks before bulk work (two queues, listened to in order), reconnects when Redis
goes away, requeues abandoned jobs in its maintenance pass, and on SIGTERM lets the current render finish for
up to ``QUOTECLIP_SHUTDOWN_GRACE`` seconds before stopping it.

A render worker (``RenderWorker``) also keeps a lease and its health in Redis; takes a job only while its
machine is healthy (free space, memory, a working ffmpeg); hands a job back to the queue, no attempt spent, when
its machine fails it, when its work-horse dies (counted against the clip's own cap of deaths), when it is told to
stop and the render would not end within the grace, and for a worker whose lease lapsed (it died).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rq import Queue, Worker
from rq.defaults import DEFAULT_LOGGING_DATE_FORMAT, DEFAULT_LOGGING_FORMAT
from rq.exceptions import NoSuchJobError, StopRequested
from rq.job import Job, JobStatus
from rq.scheduler import RQScheduler
from rq.worker import WorkerStatus

from quoteclip import redis_keys
from quoteclip.errors import InternalError, QuoteclipError
from quoteclip.settings import Settings

from .connection import bulk_queue_name, connect
from .maintenance import (
    RECLAIM_LOCK,
    Fault,
    drop_worker,
    give_back,
    machine_health,
    paused,
    renew_lease,
)
from .metrics import record_failure, record_handback
from .pipeline.produce import sweep_temp
from .pipeline.stages import STAGE_START, Stage
from .reconcile import TAKE_WAIT, leftover, put_back, reconcile, requeue_lost, still_taken, take
from .reconcile import started as taken_started
from .webhooks import ConcurrentDeliveries

log = logging.getLogger("quoteclip.worker")

HEALTH_RECHECK = 2.0  # seconds between a sick worker's checks of its machine
ESTIMATE_MARGIN = 1.25  # a render's estimated time left is stretched by this much before it is trusted


class Scheduler(RQScheduler):
    """rq's scheduler (it moves scheduled and retried jobs to their queues, in a process of its own), whose loss of
    Redis (a failover, a restart) is one line in the log rather than two tracebacks: its process ends, and the
    worker's maintenance pass starts it again once Redis answers (rq's own restart of a scheduler that died)."""

    def work(self) -> None:
        try:
            super().work()
        except (RedisConnectionError, RedisTimeoutError, ReadOnlyError) as exc:
            said = f"{exc}".splitlines()[0] if f"{exc}" else type(exc).__name__
            log.warning("scheduler: Redis lost (%s); it starts again with the worker's next maintenance pass", said)


class ClipWorker(Worker):
    """An rq worker whose warm shutdown has a time limit, and whose log says a job's expected failure in one line."""

    shutdown_grace: float = 120.0
    stop_asked: bool = False  # told to stop (SIGTERM, SIGINT): once Redis is away too, it exits rather than waits

    def handle_exception(self, job: Job, *exc_info: Any) -> None:
        """A project error (bad input, a source refused, a render that failed) is the request's, already logged
        in one line by the task with the reason the client sees: no traceback at ERROR for it. An unexpected
        error (InternalError, or anything else) keeps rq's log line with its traceback, for whoever looks into
        it."""
        from rq.job_lifecycle import call_exception_handlers

        raised = exc_info[1] if len(exc_info) > 1 else None
        if isinstance(raised, QuoteclipError) and not isinstance(raised, InternalError):
            call_exception_handlers(self._exc_handlers, job, *exc_info)
            return
        super().handle_exception(job, *exc_info)

    def request_stop(self, signum: Any, frame: Any) -> None:
        self.stop_asked = True
        if self.horse_pid and not getattr(self, "_grace_timer", None):
            log.info("shutdown requested: the current render may finish within %.0f s", self.shutdown_grace)
            timer = threading.Timer(self.shutdown_grace, self._stop_horse)
            timer.daemon = True
            timer.start()
            self._grace_timer = timer
        super().request_stop(signum, frame)

    def run_maintenance_tasks(self) -> None:
        super().run_maintenance_tasks()
        requeue_lost(self.connection)

    def _start_scheduler(
        self,
        burst: bool = False,
        logging_level: str | None = "INFO",
        date_format: str = DEFAULT_LOGGING_DATE_FORMAT,
        log_format: str = DEFAULT_LOGGING_FORMAT,
    ) -> None:
        """rq's own start of its scheduler (``Worker._start_scheduler``, rq 3.0), with ours (``Scheduler``)."""
        self.scheduler = Scheduler(
            self.queues,
            connection=self.connection,
            logging_level=logging_level if logging_level is not None else self.log.level,
            date_format=date_format,
            log_format=log_format,
            serializer=self.serializer,
        )
        self.scheduler.acquire_locks()
        if self.scheduler.acquired_locks:
            if burst:
                try:
                    self.scheduler.register_birth()
                    self.scheduler.enqueue_scheduled_jobs()
                finally:
                    self.scheduler.release_locks()
                    self.scheduler.register_death()
            else:
                self.scheduler.start()

    def monitor_work_horse(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().monitor_work_horse(*args, **kwargs)
        finally:
            if sweep_temp():  # a work-horse killed mid-render leaves its folder behind
                log.warning("removed the temp folder of a render that was killed")

    def _stop_horse(self) -> None:
        if self.horse_pid:
            log.warning(
                "the current render took longer than the %.0f s shutdown grace: stopping it", self.shutdown_grace
            )
            try:
                os.kill(self.horse_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class WebhookWorker(ConcurrentDeliveries, ClipWorker):
    """``quoteclip worker --webhooks``: deliveries side by side in threads (jobs/webhooks.py), the rest as above."""


class RenderWorker(ClipWorker):
    """A clip-rendering worker that never spends a clip's attempt on its own troubles (see the module)."""

    settings: Settings
    fault: Fault | None = None  # why this worker takes no job now (None: healthy)
    fault_since: float = 0.0
    _lease: Lease | None = None
    _lost: tuple[str, str, str] | None = None  # (job id, "died" or "stopped", how) of a work-horse that ended early
    _handing_back: str | None = None  # the job whose work-horse this worker stops to hand it back
    _winding_down: threading.Thread | None = None
    _parent_pid: int = 0
    _execution: Any = None  # the current job's rq Execution
    _unsettled: list[tuple[Job, Queue, Any]]  # jobs whose horse ended, to check once Redis answers
    _settling: threading.Lock

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("work_horse_killed_handler", self.horse_killed)
        super().__init__(*args, **kwargs)

    def configure(self, settings: Settings) -> None:
        self.settings = settings
        self.shutdown_grace = settings.shutdown_grace
        self._parent_pid = os.getpid()
        self.fault_since = time.time()
        self._unsettled = []
        self._settling = threading.Lock()

    # ---- health and lease ----

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        super().bootstrap(*args, **kwargs)
        self.check_health(run_ffmpeg=True)
        self._lease = Lease(self)
        self._lease.start()

    def teardown(self) -> None:
        if not self.is_horse and self._lease is not None:
            self._lease.stop()
            try:
                drop_worker(self.connection, self.name)
            except RedisError:
                pass
        try:
            super().teardown()
        except RedisError as exc:  # stopping while Redis is away: its registration expires by itself
            self._redis_away("the worker's unregistration", exc)

    def check_health(self, run_ffmpeg: bool = False) -> Fault | None:
        """Whether this worker may take a job now: not pausing after a machine fault, and its machine passing
        its checks. Says so in its status in Redis, and in its log when that changes."""
        try:
            fault = paused(self.connection, self.name)
        except RedisError:  # Redis is away: the queue's own wait for it follows
            fault = None
        try:
            fault = fault or machine_health(self.settings, run_ffmpeg=run_ffmpeg)
        except Exception as exc:  # noqa: BLE001  (a check that cannot run says so instead of killing the worker)
            fault = Fault("disk", f"the machine could not be checked ({type(exc).__name__})")
        if (fault is None) != (self.fault is None) or (fault and self.fault and fault.reason != self.fault.reason):
            self.fault_since = time.time()
            if fault is None:
                log.warning("healthy again: taking jobs")
            else:
                log.warning("unhealthy (%s): %s; taking no job until it passes", fault.reason, fault.detail)
        self.fault = fault
        if self._lease is not None:
            self._lease.renew()
        return fault

    def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None) -> Any:
        """Take a job only while healthy; a sick worker waits (staying registered, running its maintenance) and
        looks again every few seconds. A burst worker (``timeout`` None) that is sick ends instead."""
        self._settle()
        while self.check_health(run_ffmpeg=self.fault is not None) is not None:
            if timeout is None:
                return None
            self.heartbeat()
            if self.should_run_maintenance_tasks:
                self.run_maintenance_tasks()
            time.sleep(HEALTH_RECHECK)
        return self._take_job(timeout, max_idle_time)

    def _take_job(self, timeout: int | None, max_idle_time: int | None) -> tuple[Job, Queue] | None:
        """rq's wait for a job, taking it into this worker's taken list (jobs/reconcile.py) instead of popping
        it, so that a job whose answer is lost (a partition, a dropped connection, this worker killed before the
        start) is still somewhere the reconciler looks. A job this worker took and did not start comes first.
        Waits until a job comes (``timeout`` None: one look, then None when there is none; ``max_idle_time``: None
        after that long without one), beating and running the maintenance pass meanwhile; while Redis is away it
        backs off and tries again, and a stop request ends the wait at once, Redis or not."""
        self.set_state(WorkerStatus.IDLE)
        self.procline("Listening on " + ",".join(self.queue_names()))
        keys = [queue.key for queue in self._ordered_queues]
        began, backoff = time.monotonic(), 1.0
        wait = self.dequeue_timeout if len(keys) == 1 else TAKE_WAIT
        while not self.stop_asked:
            try:
                self.heartbeat()
                if self.should_run_maintenance_tasks:
                    self.run_maintenance_tasks()
                job_id = leftover(self.connection, self.name)
                queue_key = None
                if job_id is None:
                    found = take(self.connection, self.name, keys, None if timeout is None else min(wait, timeout))
                    backoff = 1.0
                    if found is None:
                        if timeout is None:
                            return None  # a burst worker: the queues are empty
                        if max_idle_time is not None and time.monotonic() - began >= max_idle_time:
                            return None
                        continue
                    queue_key, job_id = found
                    if not still_taken(self.connection, self.name, job_id):
                        continue  # an answer that came late: the reconciler gave the job to another worker
                taken = self._fetch_taken(job_id, queue_key)
                if taken is not None:
                    return taken
            except (RedisConnectionError, RedisTimeoutError) as exc:
                log.error("could not reach Redis (%s): trying again in %.0f s", str(exc).splitlines()[0], backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, self.max_connection_wait_time)
        raise StopRequested()

    def _fetch_taken(self, job_id: str, queue_key: str | None) -> tuple[Job, Queue] | None:
        """The job and queue of an id in this worker's taken list, or None (the id left the list) when the job
        is gone or is not queued any more (another worker started it after this one's lease lapsed)."""
        try:
            job = self.job_class.fetch(job_id, connection=self.connection, serializer=self.serializer)
        except NoSuchJobError:
            put_back(self.connection, self.name, job_id, own=True)
            return None
        if job.get_status(refresh=False) != JobStatus.QUEUED:
            put_back(self.connection, self.name, job_id, own=True)
            return None
        queue = self.queue_class.from_queue_key(
            queue_key or Queue(job.origin, connection=self.connection).key,
            connection=self.connection,
            job_class=self.job_class,
            serializer=self.serializer,
            death_penalty_class=self.death_penalty_class,
        )
        self.reorder_queues(reference_queue=queue)
        job.redis_server_version = self.get_redis_server_version()
        log.info("%s: %s", queue.name, job.id)
        return job, queue

    def prepare_job_execution(self, job: Job, remove_from_intermediate_queue: bool = False) -> None:
        """In the work-horse: the job is started (rq's bookkeeping), then it leaves this worker's taken list."""
        super().prepare_job_execution(job, remove_from_intermediate_queue=False)
        taken_started(self.connection, self.name, job.id)

    # ---- the work-horse ----

    def prepare_execution(self, job: Job) -> Any:
        self._execution = super().prepare_execution(job)
        return self._execution

    def execute_job(self, job: Job, queue: Queue) -> None:
        try:
            super().execute_job(job, queue)
        except RedisError as exc:
            self._redis_away("after its job", exc)
        finally:
            self._unsettled.append((job, queue, self._execution))
        self._settle()

    def _settle(self, connection: Any = None) -> None:
        """A work-horse that ended must have settled its job (finished, failed, retried, handed back). One that
        ended while Redis was away could not: its job would stay "started" under this live worker, whose lease
        keeps others off it. Once Redis answers (this worker's next look, or its lease thread's), such a job goes
        back to the queue, no attempt spent (the clip, if stored, is then found, not rendered again)."""
        connection = connection or self.connection
        with self._settling:
            while self._unsettled:
                job, queue, execution = self._unsettled[0]
                try:
                    status, worker = (
                        v.decode() if isinstance(v, bytes) else v
                        for v in connection.hmget(job.key, "status", "worker_name")
                    )
                    if status == JobStatus.STARTED.value and worker == self.name:
                        job.connection = connection
                        if give_back(job, queue, execution, "unsettled", self.settings, "its horse ended unheard"):
                            record_handback(connection, "worker lost Redis")
                except RedisError:
                    return  # later: once Redis answers
                except Exception:
                    log.exception("could not settle %s", job.id)
                self._unsettled.pop(0)

    def main_work_horse(self, *args: Any, **kwargs: Any) -> None:
        """The horse dies with its worker (SIGKILL when the worker dies), as its ffmpeg dies with it: a dead
        worker's job is handed back by another worker, and must not be rendered on by an orphan meanwhile."""
        from renderer.ffmpeg import die_with_parent

        arm = die_with_parent()
        if arm is not None:
            arm()
        if self._parent_pid and os.getppid() != self._parent_pid:
            os._exit(1)  # the worker died before the call above
        super().main_work_horse(*args, **kwargs)

    def horse_killed(self, job: Job, retpid: Any, ret_val: Any, rusage: Any) -> None:
        """rq's ``work_horse_killed_handler`` (after its own log line): the horse ended before settling its job;
        note why, for ``handle_job_failure`` right after."""
        stopped = self._handing_back == job.id
        self._handing_back = None
        how = f"signal {os.WTERMSIG(ret_val)}" if ret_val and os.WIFSIGNALED(ret_val) else f"exit status {ret_val}"
        self._lost = (job.id, "stopped" if stopped else "died", how)

    def handle_job_failure(
        self, job: Job, queue: Queue, started_job_registry: Any = None, exc_string: str = "", execution: Any = None
    ) -> None:
        """In the worker (not its horse), after the horse ended early: hand the job back (no attempt spent), or,
        at the clip's cap of deaths, fail it saying so. Any other failure is rq's."""
        lost, self._lost = self._lost, None
        if self.is_horse or lost is None or lost[0] != job.id:
            return super().handle_job_failure(job, queue, started_job_registry, exc_string, execution)
        _, cause, how = lost
        try:
            job.refresh()
        except Exception:  # noqa: BLE001  (gone: nothing to hand back)
            return None
        if job.get_status(refresh=False) != JobStatus.STARTED or job.worker_name != self.name:
            if execution is not None:
                with self.connection.pipeline() as pipe:
                    execution.delete(job=job, pipeline=pipe)
                    pipe.execute()
            return None  # the horse had already settled the job (or another worker runs it now)
        detail = f"work-horse {'stopped to hand it back' if cause == 'stopped' else 'killed'} ({how})"
        try:
            requeued = give_back(job, queue, execution, cause, self.settings, detail)
        except Exception:
            log.exception("could not hand %s back; rq retries it", job.id)
            return super().handle_job_failure(job, queue, started_job_registry, exc_string, execution)
        if requeued:
            record_handback(self.connection, f"worker {cause}")
        else:
            record_failure(self.connection, "worker lost")
        return None

    # ---- through a Redis restart ----
    # rq's loop ends its worker on a Redis error outside its wait for a job; a render worker keeps its name, its
    # lease and its horse instead (the lease thread keeps trying; the wait for a job backs off until Redis is
    # back), so a short outage neither loses the job nor counts as the worker's death.

    def _redis_away(self, doing: str, exc: RedisError) -> None:
        log.warning("Redis did not answer %s (%s): going on", doing, str(exc).splitlines()[0])

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        try:
            super().heartbeat(timeout, pipeline)
        except RedisError as exc:
            self._redis_away("a heartbeat", exc)

    def maintain_heartbeats(self, job: Job, execution: Any) -> None:
        try:
            super().maintain_heartbeats(job, execution)
        except RedisError as exc:
            self._redis_away("the job's heartbeat", exc)

    def set_state(self, state: str, pipeline: Any = None) -> None:
        try:
            super().set_state(state, pipeline)
        except RedisError as exc:
            self._redis_away(f"the state {state}", exc)

    def check_for_suspension(self, burst: bool) -> None:
        try:
            super().check_for_suspension(burst)
        except RedisError as exc:
            self._redis_away("the suspension check", exc)

    def run_maintenance_tasks(self) -> None:
        try:
            super().run_maintenance_tasks()
        except RedisError as exc:
            self._redis_away("the maintenance pass", exc)

    # ---- stopping ----

    def request_stop(self, signum: Any, frame: Any) -> None:
        """SIGTERM: take no new job; a render that will end within the grace (estimated from its progress and
        time) finishes, any other job is handed back at once. SIGINT (Ctrl-C, ``quoteclip up``): hand back at
        once. Either way nothing waits for rq's abandoned-job detection, and no attempt is spent."""
        self.stop_asked = True
        job_id = self.get_current_job_id() if self.horse_pid else None
        if self.horse_pid and not job_id:  # a horse without a job known here: the plain time limit
            return super().request_stop(signum, frame)
        if job_id and self._winding_down is None:
            deadline = time.monotonic() + self.shutdown_grace
            at_once = signum == signal.SIGINT
            self._winding_down = threading.Thread(
                target=self._wind_down, args=(job_id, self.horse_pid, deadline, at_once), daemon=True
            )
            self._winding_down.start()
        Worker.request_stop(self, signum, frame)  # rq's warm shutdown (without ClipWorker's plain timer)

    def _wind_down(self, job_id: str, horse: int, deadline: float, at_once: bool) -> None:
        said = False
        while self.horse_pid == horse:
            left = deadline - time.monotonic()
            estimate = None if at_once else self._time_left(job_id)
            if estimate is not None and math.isnan(estimate) and left > 0:  # the render has only begun
                time.sleep(0.25)
                continue
            if estimate is None or math.isnan(estimate) or estimate > left:
                why = (
                    "told to stop at once"
                    if at_once
                    else "not rendering yet"
                    if estimate is None
                    else f"{max(left, 0):.0f} s of grace left"
                    if left <= 0 or math.isnan(estimate)
                    else f"about {estimate:.0f} s of render left, over the {left:.0f} s of grace"
                )
                log.warning("stopping: handing %s back to the queue (%s)", job_id, why)
                self._handing_back = job_id
                self.kill_horse()
                return
            if not said:
                log.info("stopping: the render should end in about %.0f s, within the grace; letting it end", estimate)
                said = True
            time.sleep(min(1.0, max(0.05, left)))

    def _time_left(self, job_id: str) -> float | None:
        """Seconds the current job should still take (from its stage, progress and how long the stage has run),
        or None when it cannot be told yet (not rendering yet, or too early in the render)."""
        try:
            meta = Job.fetch(job_id, connection=self.connection).get_meta(refresh=False)
        except Exception:  # noqa: BLE001  (no estimate: the job is handed back)
            return None
        return time_left(meta, time.time())


def time_left(meta: dict[str, Any], now: float) -> float | None:
    """A render's seconds left, estimated from job.meta: 0 once it is uploading; while rendering, the time the
    rendering stage took so far for the share done, for the share left (stretched by ESTIMATE_MARGIN), or NaN
    while it has only begun (too early to tell: look again); None before it renders (fetching, waiting)."""
    stage, progress, since = meta.get("stage"), float(meta.get("progress") or 0), meta.get("stage_at")
    if stage in (Stage.UPLOADING.value, Stage.FINISHED.value):
        return 0.0
    if stage != Stage.RENDERING.value or since is None:
        return None
    start, end = STAGE_START[Stage.RENDERING], STAGE_START[Stage.UPLOADING]
    done = (progress - start) / (end - start)
    elapsed = now - float(since)
    if done <= 0.02 or elapsed < 0.5:
        return math.nan
    return elapsed * (1 - min(done, 1.0)) / done * ESTIMATE_MARGIN


class Lease(threading.Thread):
    """Renews a render worker's lease and status in Redis every third of the lease, from its own connection (the
    worker's main loop may be blocked on the queue or on its horse), and once per third of a lease somewhere in
    the fleet, hands back the jobs of workers whose lease lapsed."""

    def __init__(self, worker: RenderWorker) -> None:
        super().__init__(name="quoteclip-lease", daemon=True)
        self.worker = worker
        self.settings = worker.settings
        self.period = worker.settings.worker_lease / 3
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.connection = connect(worker.settings)
        self.queue_names = worker.queue_names()
        self.failing = False

    def renew(self) -> None:
        self.wake.set()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
        self.join(timeout=5)

    def run(self) -> None:
        while not self.stopping.is_set():
            self.wake.clear()
            try:
                renew_lease(
                    self.connection,
                    self.worker.name,
                    self.settings.worker_lease,
                    self.worker.fault,
                    self.worker.fault_since,
                )
                self.worker._settle(self.connection)
                if self.connection.set(RECLAIM_LOCK, self.worker.name, nx=True, px=int(self.period * 1000)):
                    reconcile(self.connection, self.queue_names, self.settings)
                self.failing = False
            except RedisError as exc:
                if not self.failing:
                    log.warning("could not renew the lease in Redis: %s", str(exc).splitlines()[0])
                self.failing = True
            except Exception:
                log.exception("the lease thread's pass failed")
            self.wake.wait(self.period)
        self.connection.close()


def preload(settings: Settings) -> None:
    """Load once, in the worker, what every render job needs, so each work-horse forked from it starts with it:
    the job code, the remote-source modules (every queued source is remote), Pillow's common image plugins (a
    first PNG save loads them), the caption fonts, ffmpeg's path and version, the call that ties an ffmpeg's
    life to its horse's and, for an S3 store, boto3 with its S3 model (a first client costs a horse about
    0.3 s) and whether its bucket refuses a second ``If-None-Match: *`` write (storage/s3.py, asked once a
    process). A horse renders without importing a module (tests/test_deploy.py)."""
    import encodings.idna  # noqa: F401  (host names of requests)

    import av.subtitles.stream  # noqa: F401  (PyAV's first open loads it)
    from PIL import Image

    from quoteclip.fonts import font_set
    from quoteclip.spec import PROFILES, ClipSpec
    from renderer.ffmpeg import die_with_parent, ffmpeg_binary, ffmpeg_version
    from sources import cache, http, proxy, remote, safety  # noqa: F401
    from storage import open_storage

    from . import tasks  # noqa: F401

    Image.preinit()
    # the fonts' list, and the default caption font at the default size (FreeType's set-up, done once)
    size = round(ClipSpec.model_fields["caption_size"].default * min(PROFILES["landscape"]))
    font_set("Aa", None, size).primary.getlength("Aa")
    die_with_parent()  # prctl looked up once (ffmpeg's start in a horse then only calls it)
    try:  # found and asked its version (a run of the binary) once, not once a job
        ffmpeg_version(ffmpeg_binary(settings.ffmpeg_binary))
    except Exception as exc:  # noqa: BLE001  (a job then fails saying why)
        log.warning("ffmpeg could not be found ahead of the jobs: %s", exc)

    try:
        store = open_storage(settings)
        probe = getattr(store, "conditional_writes", None)  # S3 only: a local folder's writes are always once
        if probe is not None:
            probe()  # asked once here (a marker written twice), so each horse inherits the answer
    except Exception as exc:  # noqa: BLE001  (a warm-up: a store that cannot be opened fails the job, not the worker)
        log.warning("the object store could not be prepared ahead of the jobs: %s", exc)


def run_worker(
    settings: Settings, burst: bool = False, name: str | None = None, webhooks: bool = False, clicks_only: bool = False
) -> bool:
    """Run an rq worker on the clip queues until stopped (or, with ``burst``, until they are empty); with
    ``webhooks``, on the webhook delivery queue instead (short jobs, kept apart from renders); with
    ``clicks_only``, on the clicks' queue alone (always free for a click while batch clips render beside it).

    When Redis goes away (a restart, a failover) the worker waits and reconnects, with backoff up to 30 s,
    instead of exiting: queued jobs are picked up again once Redis is back (with persistence on, none is lost).
    """
    if not webhooks:
        preload(settings)
    delay = 1.0
    worker: ClipWorker | None = None
    try:
        while True:
            try:
                connection = connect(settings)
                names = (
                    [redis_keys.webhook_queue(settings.queue_name)]
                    if webhooks
                    else [settings.queue_name]
                    if clicks_only
                    else [settings.queue_name, bulk_queue_name(settings)]
                )
                queues = [Queue(q, connection=connection) for q in names]
                if webhooks:
                    # An idle worker wakes every maintenance interval (worker_ttl - 15 s is rq's dequeue timeout)
                    # to requeue jobs abandoned by dead workers; job heartbeats every 10 s expire 70 s after it dies.
                    worker = WebhookWorker(
                        queues,
                        connection=connection,
                        name=name,
                        job_monitoring_interval=10,
                        maintenance_interval=settings.maintenance_interval,
                        worker_ttl=settings.maintenance_interval + 15,
                    )
                    worker.shutdown_grace = settings.shutdown_grace
                else:
                    worker = _render_worker(settings, queues, connection, name)
                sweep_temp()
                return bool(worker.work(burst=burst, logging_level="INFO", with_scheduler=True))
            except (RedisConnectionError, RedisTimeoutError) as exc:
                if worker is not None and worker.stop_asked:
                    log.info("stopping as asked, with Redis away (%s)", str(exc).splitlines()[0])
                    return False
                log.warning("lost Redis (%s); reconnecting in %.0f s", str(exc).splitlines()[0], delay)
                time.sleep(delay)
                delay = min(delay * 2, 30.0)
                name = None  # the old registration may linger until it expires: come back under a new name
    except StopRequested:  # told to stop between two workers' lives (Redis away): nothing of this one's to hand back
        log.info("stopping as asked, with Redis away")
        return False


def _render_worker(settings: Settings, queues: list[Queue], connection: Any, name: str | None) -> RenderWorker:
    """A render worker: its job's heartbeat beats every third of the lease (at most every 10 s), so a worker
    that stops beating is seen as gone once the lease has passed."""
    worker = RenderWorker(
        queues,
        connection=connection,
        name=name,
        job_monitoring_interval=max(1, min(10, int(settings.worker_lease / 3))),
        maintenance_interval=settings.maintenance_interval,
        worker_ttl=settings.maintenance_interval + 15,
    )
    worker.configure(settings)
    return worker
