"""How the benchmark measures: wall-clock runs, alternating pairs, their ratio and spread, CPU-seconds."""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Callable

from .config import RunConfig


def once(fn: Callable[[], object]) -> float:
    """One run of ``fn``, wall-clock seconds (``time.perf_counter``)."""
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def paired(ours: Callable[[], object], other: Callable[[], object], run: RunConfig) -> tuple[list[float], list[float]]:
    """Both sides get the same warm-up and the same repetitions, run alternately (ours, other, ours, …), so
    a slow spell of the machine falls on both."""
    for _ in range(run.warmup):
        ours()
        other()
    a, b = [], []
    for _ in range(run.reps):
        a.append(once(ours))
        b.append(once(other))
    return a, b


def pair_ratio(a: list[float], b: list[float]) -> float:
    """The median of the per-pair ratios a/b."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def percentile(xs: list[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` (0 ≤ q ≤ 1), the nearest sample: p95 of 20 is the 19th smallest of them."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def children_cpu() -> float:
    """CPU seconds of this process's finished children (the bare ffmpeg runs)."""
    times = os.times()
    return times.children_user + times.children_system


def process_cpu() -> float:
    """CPU seconds of this process and its finished children (in-process renders and their ffmpeg)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
