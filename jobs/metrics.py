"""Metrics kept in Redis, so workers on any machine add to them and the API exports them in one place."""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from redis import Redis
from rq import Queue
from rq.registry import FailedJobRegistry, FinishedJobRegistry, ScheduledJobRegistry, StartedJobRegistry

from quoteclip import redis_keys
from quoteclip.errors import MACHINE_REASONS

from .maintenance import worker_states

RENDER_BUCKETS = (1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
PREFIX = redis_keys.METRICS


def record_render(connection: Redis, seconds: float, source_bytes: int | None) -> None:
    pipe = connection.pipeline(transaction=False)
    key = f"{PREFIX}:render_seconds"
    for bound in RENDER_BUCKETS:
        if seconds <= bound:
            pipe.hincrby(key, f"le:{bound}", 1)
    pipe.hincrbyfloat(key, "sum", seconds)
    pipe.hincrby(key, "count", 1)
    if source_bytes:
        pipe.incrby(f"{PREFIX}:fetch_bytes", source_bytes)
    pipe.execute()


def record_cache_hit(connection: Redis) -> None:
    connection.incr(f"{PREFIX}:cache_hits")


def record_failure(connection: Redis, kind: str) -> None:
    connection.hincrby(f"{PREFIX}:failures", kind, 1)


def record_handback(connection: Redis, reason: str) -> None:
    """A job handed back to the queue without spending an attempt: a machine fault's reason (disk, memory,
    ffmpeg, files), "worker died" or "worker stopped"."""
    connection.hincrby(f"{PREFIX}:handbacks", reason, 1)


def desired_workers(connection: Redis, queue_names: tuple[str, ...]) -> dict[str, int]:
    """What each queue asks of the fleet: its jobs waiting plus its jobs running (rq keeps those out of the
    queue's list, in its started registry, one entry per execution; counted while its heartbeat is live, read
    without rq's clean-up). An autoscaler fed the queue alone falls to 0 mid-render and removes a busy worker."""
    now = time.time()
    pipe = connection.pipeline(transaction=False)
    for name in queue_names:
        pipe.llen(Queue(name, connection=connection).key)
        pipe.zcount(StartedJobRegistry(name, connection=connection).key, now, "+inf")
    counts = pipe.execute()
    return {name: int(counts[2 * i]) + int(counts[2 * i + 1]) for i, name in enumerate(queue_names)}


class QueueCollector(Collector):
    """Jobs by status, queue depth, desired workers, render seconds, cache hits, fetched bytes, failures by reason,
    jobs handed back by reason, and render workers by health (the unhealthy ones by reason)."""

    def __init__(self, connection: Redis, queue_names: tuple[str, ...]) -> None:
        self.connection = connection
        self.queue_names = queue_names

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        conn = self.connection
        queues = [Queue(name, connection=conn) for name in self.queue_names]
        registries = (
            ("started", StartedJobRegistry),
            ("finished", FinishedJobRegistry),
            ("failed", FailedJobRegistry),
            ("scheduled", ScheduledJobRegistry),
        )
        jobs = GaugeMetricFamily("quoteclip_jobs", "Jobs by status (every queue)", labels=["status"])
        jobs.add_metric(["queued"], sum(q.count for q in queues))
        for status, registry in registries:
            jobs.add_metric([status], sum(registry(queue=q).count for q in queues))
        yield jobs
        depth = GaugeMetricFamily("quoteclip_queue_depth", "Clips waiting for a worker, by queue", labels=["queue"])
        for queue in queues:
            depth.add_metric([queue.name], queue.count)
        yield depth
        desired = GaugeMetricFamily(
            "quoteclip_desired_workers",
            "Render workers each queue could keep busy: clips waiting plus clips rendering (what to autoscale on)",
            labels=["queue"],
        )
        for name, wanted in desired_workers(conn, self.queue_names).items():
            desired.add_metric([name], wanted)
        yield desired
        raw = {_text(k): _text(v) for k, v in conn.hgetall(f"{PREFIX}:render_seconds").items()}
        buckets = [(str(b), float(raw.get(f"le:{b}", 0))) for b in RENDER_BUCKETS]
        buckets.append(("+Inf", float(raw.get("count", 0))))
        yield HistogramMetricFamily(
            "quoteclip_render_seconds",
            "Fetch + render + store time of a clip",
            buckets=buckets,
            sum_value=float(raw.get("sum", 0)),
        )
        hits = CounterMetricFamily("quoteclip_cache_hits", "Requests answered from storage without a render")
        hits.add_metric([], float(conn.get(f"{PREFIX}:cache_hits") or 0))
        yield hits
        fetched = CounterMetricFamily("quoteclip_fetch_bytes", "Bytes fetched from remote sources")
        fetched.add_metric([], float(conn.get(f"{PREFIX}:fetch_bytes") or 0))
        yield fetched
        failures = CounterMetricFamily("quoteclip_failures", "Failed clips by reason", labels=["reason"])
        for kind, count in conn.hgetall(f"{PREFIX}:failures").items():
            failures.add_metric([_text(kind)], float(count))
        yield failures
        handed = CounterMetricFamily(
            "quoteclip_handbacks",
            "Jobs handed back to the queue without spending an attempt, by reason (a machine fault's, worker died, "
            "worker stopped)",
            labels=["reason"],
        )
        for reason, count in conn.hgetall(f"{PREFIX}:handbacks").items():
            handed.add_metric([_text(reason)], float(count))
        yield handed
        states = worker_states(conn)
        workers = GaugeMetricFamily("quoteclip_workers", "Render workers alive, by health", labels=["state"])
        for state in ("healthy", "unhealthy"):
            workers.add_metric([state], sum(s["state"] == state for s in states))
        yield workers
        sick = GaugeMetricFamily(
            "quoteclip_worker_unhealthy",
            "Render workers taking no job because their machine failed a check or a job, by reason",
            labels=["reason"],
        )
        for reason in MACHINE_REASONS:
            sick.add_metric([reason], sum(s["state"] == "unhealthy" and s["reason"] == reason for s in states))
        yield sick


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
