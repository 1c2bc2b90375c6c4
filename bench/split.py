"""Figure 16: one long clip rendered in pieces by several workers (jobs/pieces.py), each worker held to one core
(``taskset``), against the same clip rendered whole by one such worker; and the plan's critical path for a larger
fleet, computed from the piece times measured."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rq.job import Job

from jobs.connection import connect
from jobs.queue import enqueue_clip, job_status
from quoteclip.spec import build_spec
from renderer.plan import CRF, KEYFRAMES, PRESET

from .config import RunConfig
from .media import continuous_1080p
from .report import Reading, Row
from .stack import Stack, clip_body, reaped, tree_cpu


def _workers(stack: Stack, cores: list[int], split: bool, run: RunConfig) -> list[subprocess.Popen[str]]:
    env = {
        **stack.env,
        "QUOTECLIP_SPLIT_SECONDS": str(run.split_seconds) if split else "0",
        "QUOTECLIP_PIECE_SECONDS": str(run.piece_seconds),
    }
    taskset = shutil.which("taskset")
    procs = []
    for core in cores:
        pin = [taskset, "-c", str(core % (os.cpu_count() or 1))] if taskset else []
        proc = subprocess.Popen(
            [*pin, sys.executable, "-m", "cli", "worker"],
            env=env,
            text=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        stack.procs.append(proc)
        stack.wait_idle(proc.pid, 60, "registered")
        procs.append(proc)
    return procs


def _one(
    stack: Stack, run: RunConfig, cores: list[int], split: bool, start: float
) -> tuple[float, float, dict[str, float]]:
    """The long clip (at ``start``) from a cold source cache, enqueued → stored: wall seconds, the workers'
    CPU seconds (their work-horses and ffmpeg included) and the job's timings."""
    procs = _workers(stack, cores, split, run)
    try:
        _empty(stack)
        stack.clear_source_cache()
        cpu = sum(tree_cpu(p.pid) for p in procs)
        settings = stack.settings()
        t = time.perf_counter()
        job = enqueue_clip(build_spec(clip_body(stack, start, run.split_length)), settings).job_id
        while (body := job_status(job, settings))["status"] not in ("finished", "failed"):
            time.sleep(0.05)
        wall = time.perf_counter() - t
        if body["status"] != "finished":
            raise SystemExit(f"bench: the long clip failed: {body['error']}")
        for proc in procs:
            reaped(stack, proc.pid)
        cpu = sum(tree_cpu(p.pid) for p in procs) - cpu
        timings = Job.fetch(job, connection=connect(settings)).meta.get("timings") or {}
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=60)
            stack.procs.remove(proc)
    return wall, cpu, timings


def _bare(ffmpeg: str, source: Path, core: int, start: float, length: float, out: Path) -> subprocess.Popen[bytes]:
    """A bare transcode of the span (the clip's encode: renderer/plan.py's preset, CRF, keyframes) held to ``core``."""
    taskset = shutil.which("taskset")
    pin = [taskset, "-c", str(core % (os.cpu_count() or 1))] if taskset else []
    argv = [ffmpeg, "-hide_banner", "-loglevel", "error", "-y", "-ss", f"{start:.3f}", "-i", str(source)]
    argv += ["-t", f"{length:.3f}", "-vf", "scale=-2:720", "-c:v", "libx264", "-preset", PRESET, "-crf", str(CRF)]
    argv += ["-force_key_frames", KEYFRAMES, "-c:a", "aac", str(out)]
    return subprocess.Popen([*pin, *argv])


def two_cores(ffmpeg: str, source: Path, length: float, work: Path) -> float:
    """What this machine's two cores do together: the work of how many of one (a bare transcode of ``length``
    seconds alone on one core, then two at once, one a core; the bound of figure 16a's two workers)."""
    t = time.perf_counter()
    _bare(ffmpeg, source, 0, 5.0, length, work / "bare-0.mp4").wait()
    alone = time.perf_counter() - t
    t = time.perf_counter()
    both = [_bare(ffmpeg, source, n, 5.0 + n * length, length, work / f"bare-{n}.mp4") for n in (0, 1)]
    for proc in both:
        proc.wait()
    return 2 * alone / (time.perf_counter() - t)


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def _empty(stack: Stack) -> None:
    client = stack.s3.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=stack.s3.bucket):
        for item in page.get("Contents", []):
            client.delete_object(Bucket=stack.s3.bucket, Key=item["Key"])


def critical_path(pieces: list[float], sound: float, join: float, workers: int) -> float:
    """The wall time of a plan with ``workers`` one-core workers: the pieces taken in order by whichever worker is
    free first (the clip's own worker takes the first piece, then encodes the sound), then the join."""
    free = [0.0] * workers
    for n, seconds in enumerate(pieces):
        worker = 0 if n == 0 else min(range(workers), key=lambda w: free[w])
        free[worker] += seconds + (sound if n == 0 else 0.0)
    return max(free) + join


def figures(run: RunConfig, ffmpeg: str, work: Path) -> list[Row]:
    source = continuous_1080p(ffmpeg, run.split_length + 10)
    with Stack(work, source, ffmpeg) as stack:  # the same clip three ways, the store emptied before each
        whole, whole_cpu, _ = _one(stack, run, [0], False, 5.0)
        one, one_cpu, timed = _one(stack, run, [0], True, 5.0)
        two, two_cpu, timed2 = _one(stack, run, [0, 1], True, 5.0)
    bound = two_cores(ffmpeg, source, min(30.0, run.split_length), work)
    pieces = [float(timed[f"piece_{n}_s"]) for n in range(int(timed.get("pieces", 0))) if f"piece_{n}_s" in timed]
    sound, join = float(timed.get("sound_s", 0.0)), float(timed.get("join_s", 0.0))
    beside = [float(v) for k, v in timed2.items() if k.startswith("piece_") and k.endswith("_s") and k[6:-2].isdigit()]
    eight = critical_path(pieces, sound, join, 8)
    ffmpeg_whole = sum(pieces) + sound  # (the piece times of the run where one worker rendered them all)
    label = (
        f"a {run.split_length:g} s clip (1080p30 source made in one piece, 720p out, captions, watermark), the same "
        "clip each time (the store emptied before it), cold source cache from a "
        f"loopback origin, one worker per core held to it (taskset), pieces of {run.piece_seconds:g} s, 1 sample each"
    )
    return [
        Reading(
            f"16a. {label}: enqueued → stored",
            f"whole on 1 worker {whole:.1f} s; in {int(timed.get('pieces', 0))} pieces on 1 worker {one:.1f} s; "
            f"on 2 workers {two:.1f} s (**{two / whole:.2f}×** the whole render; "
            f"{int(timed2.get('pieces_here', 0))} pieces by the clip's own worker); this machine's two cores do "
            f"the work of {bound:.2f} of one (two bare transcodes at once, one a core, against one alone), so its "
            f"floor for k = 2 is {1 / bound:.2f}×; a piece's ffmpeg took {_median(pieces):.1f} s (median) on one "
            f"worker alone and {_median(beside):.1f} s on the clip's own worker beside the other",
            "≤ 0.60× (1.2/k, k = 2)",
            two / whole <= 0.6,
        ),
        Reading(
            "16b. the same clip's CPU (workers, work-horses, ffmpeg): in pieces on 1 worker, and on 2, vs whole",
            f"whole {whole_cpu:.1f} CPU-s; pieces on 1 worker {one_cpu:.1f} (**{one_cpu / whole_cpu:.2f}×**); "
            f"on 2 workers {two_cpu:.1f} ({two_cpu / whole_cpu:.2f}×)",
            "≤ 1.1×",
            max(one_cpu, two_cpu) / whole_cpu <= 1.1,
        ),
        Reading(
            "16c. the join (concat demuxer, stream copy) against the whole render, and the sound encoded once",
            f"join {join:.2f} s (**{join / whole:.1%}** of the whole render's {whole:.1f} s); sound {sound:.2f} s",
            "≤ 2 %",
            join / whole <= 0.02,
        ),
        Reading(
            "16d. the plan's critical path with 8 one-core workers, computed from 16a's piece times on 1 worker "
            "(pieces taken in order by the first free worker, the sound after the first piece, then the join)",
            f"{eight:.1f} s: **{eight / whole:.2f}×** the whole render (longest piece {max(pieces, default=0):.1f} s, "
            f"{len(pieces)} pieces, ffmpeg {ffmpeg_whole:.1f} s in all)",
            "≤ 0.2×",
            eight / whole <= 0.2,
        ),
    ]
