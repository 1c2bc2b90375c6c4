"""The rq worker for clips: clicks before bulk work (two queues, listened to in order), reconnects when Redis
goes away, requeues abandoned jobs in its maintenance pass, and on SIGTERM lets the current render finish for
up to ``QUOTECLIP_SHUTDOWN_GRACE`` seconds before stopping it (the job is then retried by another worker).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rq import Queue, Worker

from quoteclip import redis_keys
from quoteclip.settings import Settings

from .connection import bulk_queue_name, connect
from .maintenance import requeue_lost
from .pipeline.produce import sweep_temp
from .webhooks import ConcurrentDeliveries

log = logging.getLogger("quoteclip.worker")


class ClipWorker(Worker):
    """An rq worker whose warm shutdown has a time limit."""

    shutdown_grace: float = 120.0

    def request_stop(self, signum: Any, frame: Any) -> None:
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


def preload(settings: Settings) -> None:
    """Load once, in the worker, what every render job needs, so each work-horse forked from it starts with it:
    the job code, the remote-source modules (every queued source is remote), Pillow's common image plugins (a
    first PNG save loads them), the caption fonts, ffmpeg's path and version, the call that ties an ffmpeg's
    life to its horse's and, for an S3 store, boto3 with its S3 model (a first client costs a horse about
    0.3 s). A horse renders without importing a module (tests/test_deploy.py)."""
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
        open_storage(settings)  # builds a client only: no request is made
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
            # An idle worker wakes every maintenance interval (worker_ttl - 15 s is rq's dequeue timeout) to requeue
            # jobs abandoned by dead workers; job heartbeats every 10 s expire 70 s after a worker dies.
            worker = (WebhookWorker if webhooks else ClipWorker)(
                queues,
                connection=connection,
                name=name,
                job_monitoring_interval=10,
                maintenance_interval=settings.maintenance_interval,
                worker_ttl=settings.maintenance_interval + 15,
            )
            worker.shutdown_grace = settings.shutdown_grace
            sweep_temp()
            return bool(worker.work(burst=burst, logging_level="INFO", with_scheduler=True))
        except (RedisConnectionError, RedisTimeoutError) as exc:
            log.warning("lost Redis (%s); reconnecting in %.0f s", str(exc).splitlines()[0], delay)
            time.sleep(delay)
            delay = min(delay * 2, 30.0)
            name = None  # the old registration may linger until it expires: come back under a new name
