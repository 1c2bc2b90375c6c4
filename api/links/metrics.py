"""Costs per site key, counted in Redis by every API process and read by /metrics: each link request once, under
its answer's site key, variant and outcome (``count``, called for every answer the link routes give, refusals
included), and each render a link started (``count_render``). A lost count never fails an answer.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from redis import Redis
from redis.exceptions import RedisError

from quoteclip import redis_keys

from .outcomes import Answer

REQUESTS = redis_keys.LINK_REQUESTS
RENDERS = redis_keys.LINK_RENDERS


def count(connection: Redis, answer: Answer) -> None:
    """One request under its answer's outcome (none: not counted)."""
    if answer.outcome is None:
        return
    try:
        connection.hincrby(REQUESTS, f"{answer.site}|{answer.variant}|{answer.outcome.value}", 1)
    except RedisError:
        pass


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
