"""What an autoscaler needs: the desired-workers figure (clips waiting plus clips rendering), and workers that can
be scaled in (SIGTERM) at any moment without losing a clip or spending one of its attempts.

A small scaler loop stands in for KEDA and the HPA: it reads ``desired_workers`` (the function behind
``quoteclip_desired_workers`` in ``/metrics``), starts real ``quoteclip worker`` processes up to the figure (at
most MAX_WORKERS) and SIGTERMs the youngest when the figure falls below the fleet, busy or not (as a ReplicaSet
picks, without a pod-deletion cost). Its cap drops to 1 for a few seconds mid-burst, and then the workers sent
away are busy ones, those rendering a clip that takes longer than their shutdown grace first (every fourth clip
is one); a worker between two clips reads as idle, so the scaler waits for a moment when one renders."""

from __future__ import annotations

import signal
import statistics
import subprocess
import time
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from redis import Redis
from rq import Queue, Worker
from rq.job import Job
from rq.registry import StartedJobRegistry

from jobs.metrics import QueueCollector, desired_workers
from jobs.queue import RETRY, bulk_queue_name, enqueue_clip
from quoteclip.settings import Settings
from quoteclip.spec import build_spec

CLIPS = 40
MAX_WORKERS = 3  # a 2-core machine: more would only queue inside the CPU
GRACE = "1"  # QUOTECLIP_SHUTDOWN_GRACE: shorter than the longer renders
WOBBLE = (0.3, 0.5)  # the share of clips finished between which the cap is 1 worker


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_scale_in_during_a_burst_loses_no_clip_and_spends_no_attempt(media, queue_env, workers) -> None:
    queue_env["QUOTECLIP_SHUTDOWN_GRACE"] = GRACE
    workers.env = queue_env
    settings = Settings.from_env(queue_env)
    queues = (settings.queue_name, bulk_queue_name(settings))
    connection = Redis.from_url(queue_env["QUOTECLIP_REDIS_URL"])
    source = str(media(size="320x180", duration=20, gop=30))
    enqueued: dict[str, datetime] = {}
    long: set[str] = set()
    for i in range(CLIPS):  # most clips short and small, every fourth one taking longer than the grace to render
        start = round(0.37 * i, 2)
        short = {"end": start + 0.5, "quality": "preview", "encoder_preset": "ultrafast"}
        spec = build_spec({"source": source, "start": start, **(short if i % 4 != 3 else {"end": start + 4})})
        job_id = enqueue_clip(spec, settings, bulk=i % 2 == 1).job_id
        assert job_id is not None
        enqueued[job_id] = datetime.now(UTC)
        if i % 4 == 3:
            long.add(job_id)
    assert len(enqueued) == CLIPS

    # the figure /metrics exports, read as Prometheus would: every clip is waiting
    registry = CollectorRegistry()
    registry.register(QueueCollector(connection, queues))
    exported = generate_latest(registry).decode()
    assert f'quoteclip_desired_workers{{queue="{queues[0]}"}} {CLIPS // 2}.0' in exported
    assert f'quoteclip_desired_workers{{queue="{queues[1]}"}} {CLIPS // 2}.0' in exported

    fleet: list[tuple[str, subprocess.Popen[str]]] = []  # alive and not asked to stop, oldest first
    leaving: list[subprocess.Popen[str]] = []
    sigterms = busy_sigterms = 0
    figure_held_renders = False  # the queue's lists empty while clips rendered, and the figure counted them
    began = time.monotonic()
    try:
        while True:
            done = sum(Job.fetch(j, connection=connection).get_status() == "finished" for j in enqueued)
            if done == CLIPS:
                break
            assert time.monotonic() - began < 150, f"{done} of {CLIPS} clips finished"
            wanted = desired_workers(connection, queues)
            queued = sum(Queue(q, connection=connection).count for q in queues)
            rendering = sum(StartedJobRegistry(q, connection=connection).get_job_count(cleanup=False) for q in queues)
            figure = sum(wanted.values())
            assert figure >= rendering
            figure_held_renders |= queued == 0 and rendering > 0 and figure >= rendering
            # the wobble starts at WOBBLE[0] of the clips and lasts until WOBBLE[1] and until it has sent busy
            # workers away: a worker between two short clips reads as idle, so the scaler waits for a busy one
            wobble = WOBBLE[0] * CLIPS <= done and (done < WOBBLE[1] * CLIPS or not busy_sigterms)
            cap = 1 if wobble else MAX_WORKERS
            target = min(cap, figure)
            fleet = [(n, w) for n, w in fleet if w.poll() is None]
            while len(fleet) < target:
                name = f"scaled-{len(fleet) + len(leaving)}-{time.monotonic_ns()}"
                fleet.append((name, workers.start(burst=False, name=name)))
            if len(fleet) > target:  # the youngest go, busy or not; in the wobble, the busy ones, a long clip first
                jobs_of = {n: _current_job(connection, n) for n, _ in fleet}
                if wobble and all(job is None for job in jobs_of.values()):
                    time.sleep(0.05)
                    continue
                if wobble:  # stable: otherwise oldest first
                    fleet.sort(key=lambda w: (jobs_of[w[0]] is not None, jobs_of[w[0]] in long))
            while len(fleet) > target:
                name, victim = fleet.pop()
                busy_sigterms += jobs_of[name] is not None
                victim.send_signal(signal.SIGTERM)
                sigterms += 1
                leaving.append(victim)
            time.sleep(0.3)
    finally:
        for _, proc in fleet:
            proc.send_signal(signal.SIGTERM)
            leaving.append(proc)
        for proc in leaving:
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
    elapsed = time.monotonic() - began
    assert all(p.returncode == 0 for p in leaving), [p.returncode for p in leaving]

    jobs = [Job.fetch(j, connection=connection) for j in enqueued]
    assert [j.id for j in jobs if j.get_status() != "finished"] == []  # 0 clips lost
    spent = {j.id: RETRY.max - (j.retries_left or 0) for j in jobs if j.retries_left != RETRY.max}
    assert spent == {}  # 0 attempts spent by scale-in
    assert not [j.id for j in jobs if j.meta.get("deaths")]
    stops = sum(int(j.meta.get("stops", 0)) for j in jobs)
    waits = [(j.started_at.replace(tzinfo=UTC) - enqueued[j.id]).total_seconds() for j in jobs if j.started_at]
    assert len(waits) == CLIPS
    print(
        f"\nscale-in burst: {CLIPS} clips finished in {elapsed:.1f} s, 0 lost, 0 attempts spent; "
        f"{sigterms} SIGTERMs ({busy_sigterms} to a busy worker), {stops} jobs handed back; queue wait p50 "
        f"{statistics.median(waits):.1f} s, p95 {_percentile(waits, 0.95):.1f} s, max {max(waits):.1f} s"
    )
    assert figure_held_renders  # where a trigger on the lists alone read 0
    # the wobble asked busy workers to go. Whether one of them was rendering a clip longer than its grace (and so
    # handed it back) is the scaler's draw: a busy worker whose render ends within the grace finishes it. The
    # hand-back itself is proved without chance in tests/test_hardening_workers.py (SIGTERM with 5 s of grace).
    assert busy_sigterms >= 1


def _current_job(connection: Redis, name: str) -> str | None:
    found = Worker.find_by_key(f"{Worker.redis_worker_namespace_prefix}{name}", connection=connection)
    return found.get_current_job_id() if found is not None else None
