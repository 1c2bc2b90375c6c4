"""How jobs reach Redis, and the names of their queues and ids."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager

from redis import Redis

from quoteclip import embedded, redis_keys, redis_url
from quoteclip.errors import BadInput
from quoteclip.settings import Settings, configured_redis_url
from storage import Storage, open_storage

COMMAND_TIMEOUT = 10.0  # seconds a command through Sentinel may take before its connection is given up
JOB_ID = re.compile(r"\Aclip-([0-9a-f]{32})\Z")  # \Z: no trailing newline
GROUP = "group-"  # a job rendering a quote's profiles together (jobs/queue.py enqueue_profiles), then its hash


def bulk_queue_name(settings: Settings) -> str:
    return redis_keys.bulk_queue(settings.queue_name)


def connect(settings: Settings) -> Redis:
    """The queue's Redis (``QUOTECLIP_REDIS_URL``, either form quoteclip.redis_url reads). Through Sentinel a
    command also times out after ``COMMAND_TIMEOUT`` seconds, so a primary that went silent is noticed and the
    next connection asks the sentinels for the new one (rq raises it for a worker's blocking dequeue)."""
    if redis_url.is_sentinel(settings.redis_url):
        return redis_url.client(
            settings.redis_url, socket_connect_timeout=5, socket_timeout=COMMAND_TIMEOUT, health_check_interval=30
        )
    return redis_url.client(settings.redis_url, socket_connect_timeout=5, health_check_interval=30)


def how_named(settings: Settings, env: Mapping[str, str] | None = None) -> str | None:
    """How the queue's Redis was named: ``configured`` (``QUOTECLIP_REDIS_URL`` or ``REDIS_URL``, or Settings made
    with another URL than the default), ``recorded`` (the embedded server a running ``quoteclip up`` recorded under
    the clip folder), or None: nothing named it, and ``redis://127.0.0.1:6379/0`` is only the fallback, a server
    that may be another program's."""
    env = os.environ if env is None else env
    if configured_redis_url(env) is not None or settings.redis_url != Settings.redis_url:
        return "configured"
    if embedded.recorded_url(settings.storage_dir) == settings.redis_url:
        return "recorded"
    return None


NOT_NAMED = (
    "no Redis named: set QUOTECLIP_REDIS_URL to the service's Redis, or run it in the folder where `quoteclip up` "
    "runs (the embedded Redis is recorded in its clip folder, QUOTECLIP_STORAGE_DIR); the fallback {} may be "
    "another program's"
)


def named_redis(settings: Settings, env: Mapping[str, str] | None = None) -> str:
    """The queue's Redis URL, for a write that must reach the service's Redis: BadInput when it comes from the
    unnamed fallback alone."""
    if how_named(settings, env) is None:
        raise BadInput(NOT_NAMED.format(redis_url.shown(settings.redis_url)))
    return settings.redis_url


@contextmanager
def clients(
    settings: Settings, connection: Redis | None = None, storage: Storage | None = None
) -> Iterator[tuple[Redis, Storage]]:
    """The caller's Redis connection and store, or ones made for this call. A Redis connection made here is
    closed when the call ends: rq's objects hold it in reference cycles, so a script polling a status without
    passing its own would otherwise hold a socket per call until the garbage collector runs."""
    with ExitStack() as opened:
        if connection is None:
            connection = opened.enter_context(connect(settings))
        yield connection, storage if storage is not None else open_storage(settings)


def job_id_for(key: str) -> str:
    return redis_keys.job_id(key)
