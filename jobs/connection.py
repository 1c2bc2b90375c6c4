"""How jobs reach Redis, and the names of their queues and ids."""

from __future__ import annotations

import re

from redis import Redis

from quoteclip import redis_keys
from quoteclip.settings import Settings

JOB_ID = re.compile(r"\Aclip-([0-9a-f]{32})\Z")  # \Z: no trailing newline


def bulk_queue_name(settings: Settings) -> str:
    return redis_keys.bulk_queue(settings.queue_name)


def connect(settings: Settings) -> Redis:
    return Redis.from_url(settings.redis_url, socket_connect_timeout=5, health_check_interval=30)


def job_id_for(key: str) -> str:
    return redis_keys.job_id(key)
