"""Costs per site key, counted in Redis by every API process and read by /metrics: each link request once, under
its answer's site key, variant and outcome (``count``, called for every answer the link routes give, refusals
included; added in Redis within half a second, ``Tally``), and each render a link started (``count_render``). A
lost count never fails an answer.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from redis import Redis
from redis.exceptions import RedisError

from quoteclip import redis_keys

from .outcomes import Answer

REQUESTS = redis_keys.LINK_REQUESTS
RENDERS = redis_keys.LINK_RENDERS


FLUSH = 0.5  # seconds a request's count waits in the process before it is added in Redis with the others'


class Tally:
    """Counts waiting in this process to be added in Redis, by connection (one pipeline of ``HINCRBY`` at most every
    ``FLUSH`` seconds, from a timer thread): a crowd of requests costs no Redis command, and no thread, each."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.writing = threading.Lock()
        self.pending: dict[int, tuple[Redis, Counter[str]]] = {}
        self.timer: threading.Timer | None = None

    def add(self, connection: Redis, field: str) -> None:
        with self.lock:
            self.pending.setdefault(id(connection), (connection, Counter()))[1][field] += 1
            if self.timer is None:
                self.timer = threading.Timer(FLUSH, self.flush)
                self.timer.daemon = True
                self.timer.start()

    def flush(self) -> None:
        """Add what is waiting in Redis (after any adding under way: what was counted before the call is in Redis
        when it returns)."""
        with self.writing:
            with self.lock:
                taken, self.pending, self.timer = self.pending, {}, None
            for connection, counts in taken.values():
                try:
                    with connection.pipeline(transaction=False) as pipe:
                        for field, number in counts.items():
                            pipe.hincrby(REQUESTS, field, number)
                        pipe.execute()
                except RedisError:
                    pass


TALLY = Tally()


def count(connection: Redis, answer: Answer) -> None:
    """One request under its answer's outcome (none: not counted), added in Redis within ``FLUSH`` seconds."""
    if answer.outcome is not None:
        TALLY.add(connection, f"{answer.site}|{answer.variant}|{answer.outcome.value}")


def count_render(connection: Redis, site: str) -> None:
    try:
        connection.hincrby(RENDERS, site, 1)
    except RedisError:
        pass


class LinkCollector(Collector):
    """``quoteclip_link_requests_total{key,variant,outcome}`` and ``quoteclip_link_renders_total{key}``."""

    def __init__(self, connection: Redis) -> None:
        self.connection = connection

    def collect(self) -> Iterator[CounterMetricFamily]:
        requests = CounterMetricFamily(
            "quoteclip_link_requests",
            "Signed link requests by site key, variant and outcome",
            labels=["key", "variant", "outcome"],
        )
        TALLY.flush()  # (what this process counted, added first)
        for field, number in self.connection.hgetall(REQUESTS).items():
            requests.add_metric(_text(field).split("|", 2), float(number))
        yield requests
        renders = CounterMetricFamily(
            "quoteclip_link_renders", "Renders started by signed links, by site key", labels=["key"]
        )
        for site, number in self.connection.hgetall(RENDERS).items():
            renders.add_metric([_text(site)], float(number))
        yield renders


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
