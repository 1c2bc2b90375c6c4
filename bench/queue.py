"""Figures 3a–3e, 4, 5, 5b, 5c and 6: clicks over HTTP to ``quoteclip serve`` and a worker, cache hits, batches on
the bulk queue (wall time, CPU-seconds, bytes fetched, faster presets), a click during a batch, peak memory."""

from __future__ import annotations

import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from jobs.queue import enqueue_clip, job_status
from quoteclip.spec import build_spec

from . import baselines
from .config import RunConfig
from .report import Comparison, Reading, Row
from .stack import PeakRss, Stack, click_to_file, clip_body, run_batch
from .timing import children_cpu, once, pair_ratio, percentile


def figures(run: RunConfig, ffmpeg: str, source: Path, work: Path, stack: Stack) -> list[Row]:
    """Starts the worker of figures 3–6 (it keeps running for the figures after these, as one would)."""
    worker = stack.start_worker()
    size = source.stat().st_size
    q = run.quote
    rows, times, fetched = click_figures(run, ffmpeg, source, work, stack)
    with PeakRss(worker.pid) as rss:  # a separate run: sampling memory costs CPU the timed runs should not pay
        click_to_file(stack, 90.0, q)
    naive_times = []
    naive_bytes = 0
    for _ in range(run.naive_runs):
        folder = Path(tempfile.mkdtemp(dir=work, prefix="naive-"))
        t = time.perf_counter()
        naive_bytes = baselines.download_then_cut(ffmpeg, stack.http.url("episode.mp4"), 100.0, q, folder)
        naive_times.append(time.perf_counter() - t)
        shutil.rmtree(folder)
    rows.append(
        Comparison.of(
            "3b. ours vs naive yt-dlp download of the whole file + ffmpeg cut",
            times,
            naive_times,
            statistics.median(naive_times) / statistics.median(times),
            "report (×faster)",
            None,
        )
    )
    got = statistics.median(fetched)
    rows.append(
        Reading(
            f"3c. source bytes fetched per {q:g} s clip (cold cache) vs file size",
            f"{got / 1024**2:.2f} MB of {size / 1024**2:.0f} MB ({100 * got / size:.2f}%; "
            f"naive: {naive_bytes / 1024**2:.0f} MB)",
            "< 5%",
            got < 0.05 * size,
        )
    )
    rows.append(cache_hits(run, stack))

    # 5. batch on the recommended set-up: one worker per 2 cores (the worker started above)
    first = 200.0 if size > 200 * 1024**2 else 20.0
    starts = [first + 9.0 * i for i in range(run.batch)]  # 7 s quotes, 2 s apart: neighbours share blocks
    wall, cpu, ids, failed = run_batch(stack, worker.pid, starts, q)
    twice = stack.http.bytes_sent_twice()
    cores = os.cpu_count() or 1
    before = children_cpu()
    for s in starts:  # the floor: the bare transcode of the same quotes, one after another, from the local file
        baselines.bare_ffmpeg(ffmpeg, str(source), s, q, work / "bare.mp4")
    seconds = run.batch * q
    bare_cpu = (children_cpu() - before) / seconds
    rows.append(
        Reading(
            f"5. batch: {run.batch} quotes of {q:g} s from one source on the bulk queue, 1 worker "
            f"({cores} cores: one worker per 2 cores, as docs/scaling.md recommends)",
            f"{wall:.1f} s wall, {run.batch / (wall / 60):.1f} clips/min on this machine, "
            f"{cpu / seconds:.2f} CPU-s per output second, "
            f"{stack.http.bytes_sent['episode.mp4'] / 1024**2:.1f} MB fetched, "
            f"{twice} bytes fetched twice, {len(failed)} failed",
            "no byte range fetched twice",
            twice == 0 and not failed,
        )
    )
    rows.append(
        Reading(
            "5b. CPU-seconds per second of output, 720p with captions and watermark: the batch of "
            "figure 5 (worker, work-horses, ffmpeg) vs the bare transcodes of the same quotes",
            f"ours {cpu / seconds:.2f}, bare ffmpeg {bare_cpu:.2f} ({cpu / seconds / bare_cpu:.2f}×)",
            "≤ 0.45",
            cpu / seconds <= 0.45,
        )
    )
    rows += preset_figures(run, ffmpeg, stack, worker.pid, source, starts, ids, work)
    rows.append(click_during_batch(run, stack, statistics.median(times)))
    rows.append(
        Reading(
            "6. peak memory while rendering 720p (worker + work-horse + ffmpeg)",
            f"{rss.peak_tree / 1024**2:.0f} MB PSS (RSS summed: {rss.peak_rss_sum / 1024**2:.0f} MB; "
            f"largest process: ffmpeg or the horse, {rss.peak_single / 1024**2:.0f} MB)",
            "< 400 MB",
            rss.peak_tree < 400 * 1024**2,
        )
    )
    return rows


def click_figures(
    run: RunConfig, ffmpeg: str, source: Path, work: Path, stack: Stack
) -> tuple[list[Row], list[float], list[int]]:
    """Figures 3a and 3d with the worker running (``python -m bench --only click`` runs these alone): clicks, each
    a new quote from a cold source cache, alternating with the bare transcode of the same span, after the same
    warm-up of both sides. Their rows, the clicks' seconds and the source bytes each fetched."""
    q = run.quote
    for _ in range(run.warmup):
        click_to_file(stack, 30.0, q)  # warm-up of the worker, the API and the store
        baselines.bare_ffmpeg(ffmpeg, str(source), 100.0, q, work / "bare.mp4")  # and of the bare side
    times: list[float] = []
    limit: list[float] = []
    fetched: list[int] = []
    parts: list[dict[str, float]] = []
    for i in range(run.clicks):  # alternating: a click (new quote, cold source cache), then the bare transcode
        stack.clear_source_cache()  # of the same span
        start = 100.0 + 7 * i
        times.append(click_to_file(stack, start, q, parts))
        fetched.append(stack.http.bytes_sent["episode.mp4"])
        limit.append(once(functools.partial(baselines.bare_ffmpeg, ffmpeg, str(source), start, q, work / "bare.mp4")))
    ratio = pair_ratio(times, limit)
    rows: list[Row] = [
        Comparison.of(
            f"3a. click → link → first byte over HTTP (POST /clips to quoteclip serve, a worker, S3), {q:g} s quote, "
            f"cold source cache, {run.clicks} clicks, vs the bare local transcode of the same span after each",
            times,
            limit,
            ratio,
            "≤ 1.3×",
            ratio <= 1.3,
        ),
        added_time(parts, limit),
    ]
    return rows, times, fetched


def added_time(parts: list[dict[str, float]], limit: list[float]) -> Reading:
    """Figure 3d: the click's time besides a bare transcode, and its parts, p50 / p95 over the clicks."""
    added = [c["total"] - b for c, b in zip(parts, limit, strict=True)]
    names = [k for k in parts[0] if not k.startswith("_") and k != "total"]
    text = "; ".join(
        f"{k} {1000 * percentile([c[k] for c in parts], 0.5):.0f} / "
        f"{1000 * percentile([c[k] for c in parts], 0.95):.0f}"
        for k in names
    )
    return Reading(
        f"3d. added time of a click (click → first byte minus the bare transcode run after it) and "
        f"its parts, ms p50 / p95 over {len(parts)} clicks",
        f"added {1000 * percentile(added, 0.5):.0f} / {1000 * percentile(added, 0.95):.0f}; {text}",
        "report",
        None,
    )


def cache_hits(run: RunConfig, stack: Stack) -> Reading:
    """Figure 4: a stored clip asked for again over HTTP. The worker is running, so a miss would render (and be
    counted)."""
    renders = stack.renders()
    stored = clip_body(stack, 100.0, run.quote)
    hits = []
    for _ in range(run.hits):
        t = time.perf_counter()
        status, body = stack.call("POST", "/clips", stored)
        hits.append(time.perf_counter() - t)
        if status != 200 or not body.get("cached"):
            raise SystemExit(f"bench: expected a stored clip, got {status}: {body}")
    time.sleep(1.0)  # a render started by a miss would show in the count by now
    hits.sort()
    p50, p95 = statistics.median(hits), hits[int(0.95 * (len(hits) - 1))]
    return Reading(
        "4. cache hit: identical POST /clips over HTTP → link (S3 HEAD + presign)",
        f"p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms over {len(hits)} requests, "
        f"renders started: {stack.renders() - renders}",
        "p50 < 50 ms, no render",
        p50 < 0.05 and stack.renders() == renders,
    )


def preset_figures(
    run: RunConfig,
    ffmpeg: str,
    stack: Stack,
    worker: int,
    source: Path,
    starts: list[float],
    product_ids: list[str],
    work: Path,
) -> list[Row]:
    """Figure 5c: the batch of figure 5 again with each faster x264 preset (``encoder_preset``), run the same way
    (once, cold source cache, the same worker): CPU per output second, the bare transcodes' at that preset, the
    mp4 sizes, and each clip's SSIM/PSNR against the same quote's clip at the product's preset (figure 5)."""
    settings = stack.settings()

    def fetched(ids: list[str], tag: str) -> list[Path]:
        paths = []
        for n, job_id in enumerate(ids):
            path = work / f"{tag}-{n}.mp4"
            urllib.request.urlretrieve(str(job_status(job_id, settings)["link"]), path)
            paths.append(path)
        return paths

    reference = fetched(product_ids, "veryfast")
    seconds = len(starts) * run.quote
    ref_bytes = sum(p.stat().st_size for p in reference)
    rows: list[Row] = []
    for preset in run.presets:
        _, cpu, ids, failed = run_batch(stack, worker, starts, run.quote, encoder_preset=preset)
        if failed:
            raise SystemExit(f"bench: {len(failed)} {preset} clips failed")
        before = children_cpu()
        for s in starts:
            baselines.bare_ffmpeg(ffmpeg, str(source), s, run.quote, work / "bare.mp4", preset)
        bare = (children_cpu() - before) / seconds
        clips = fetched(ids, preset)
        scores = [baselines.similarity(ffmpeg, str(c), str(r)) for c, r in zip(clips, reference, strict=True)]
        size = sum(p.stat().st_size for p in clips)
        rows.append(
            Reading(
                f"5c. encoder_preset {preset}: the batch of figure 5 again (CPU-s per output second, "
                "size, and each clip against the same quote's veryfast clip)",
                f"ours {cpu / seconds:.2f} (bare ffmpeg at {preset} {bare:.2f}), "
                f"{size * 8 / seconds / 1e6:.1f} Mb/s ({size / ref_bytes:.2f}× veryfast's "
                f"{ref_bytes * 8 / seconds / 1e6:.1f}), SSIM {min(x for x, _ in scores):.4f}–"
                f"{max(x for x, _ in scores):.4f}, PSNR {min(y for _, y in scores):.1f}–"
                f"{max(y for _, y in scores):.1f} dB",
                "≤ 0.45 (report quality)",
                cpu / seconds <= 0.45,
            )
        )
    return rows


def click_during_batch(run: RunConfig, stack: Stack, idle: float) -> Reading:
    """Figure 3e: two workers on this machine as ``quoteclip up`` runs them on 2 cores (one for everything, one for
    clicks only), a batch on the bulk queue, and clicks arriving meanwhile: the click worker takes each click at
    once, and the batch render beside it runs nicer."""
    second = stack.start_worker("--clicks-only")
    settings = stack.settings()
    long = stack.http.root.joinpath("episode.mp4").stat().st_size > 200 * 1024**2
    first, base = (400.0, 700.0) if long else (24.5, 80.5)
    # quotes no other figure renders: every one is a render
    ids = [
        enqueue_clip(build_spec(clip_body(stack, first + 9.0 * i, run.quote)), settings, bulk=True).job_id
        for i in range(run.busy_batch)
    ]
    deadline = time.monotonic() + 60
    while not any(job_status(i, settings)["status"] == "started" for i in ids):
        if time.monotonic() > deadline:
            raise SystemExit("bench: the batch of figure 3e did not start within 60 s")
        time.sleep(0.05)
    clicks = []
    for i in range(run.busy_clicks):
        time.sleep(1.0)
        clicks.append(click_to_file(stack, base + 7 * i, run.quote))
        left = sum(job_status(j, settings)["status"] not in ("finished", "failed") for j in ids)
        print(f"bench: click {i + 1} during the batch: {clicks[-1]:.2f} s, {left} batch clips left", file=sys.stderr)
    while not all(job_status(i, settings)["status"] in ("finished", "failed") for i in ids):
        time.sleep(0.1)
    second.terminate()
    second.wait(timeout=60)
    return Reading(
        f"3e. click → first byte while a batch of {run.busy_batch} runs on the bulk queue, 2 workers (2 cores; "
        "one for clicks only, as `quoteclip up` runs them)",
        f"{run.busy_clicks} clicks: {' / '.join(f'{c:.2f}' for c in clicks)} s; "
        f"an idle click (3a median): {idle:.2f} s",
        "report",
        None,
    )
