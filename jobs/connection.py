"""How jobs reach Redis, and the names of their queues and ids."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from redis import Redis

from quoteclip import redis_keys
from quoteclip.settings import Settings
from storage import Storage, open_storage

JOB_ID = re.compile(r"\Aclip-([0-9a-f]{32})\Z")  # \Z: no trailing newline


def bulk_queue_name(settings: Settings) -> str:
    return redis_keys.bulk_queue(settings.queue_name)


def connect(settings: Settings) -> Redis:
    return Redis.from_url(settings.redis_url, socket_connect_timeout=5, health_check_interval=30)


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
