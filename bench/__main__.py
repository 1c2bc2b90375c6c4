"""Run the benchmark: ``python -m bench [--quick] [--json FILE]``. Prints a markdown table on stdout."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC
from pathlib import Path
from typing import Any

import psutil
from rq import Worker
from rq.job import Job

from jobs.pipeline.produce import produce_clip
from jobs.queue import connect, enqueue_clip, job_status
from quoteclip.fonts import default_font_path
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from renderer.ffmpeg import ffmpeg_binary, ffmpeg_version
from storage import LocalStorage
from testkit.services import HttpSource, free_port, start_private_redis, start_seaweedfs, wait_for

from . import baselines
from .creators import hls_figure, page_batch_figure, profiles_figures
from .media import episode, source_1080p

CAPTION = (
    "This weird scheduling, which I'm quite sure people are going to start replicating it, is to reduce the bubble."
)
Row = dict[str, Any]


# Runs of each side before the timed ones: one in a full run; none in --quick, a check that every figure's code
# still runs (in CI), not a measurement.
WARMUP = 1


def timed(fn: Callable[[], object], reps: int, warmup: int | None = None) -> list[float]:
    for _ in range(WARMUP if warmup is None else warmup):
        fn()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def once(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def paired(
    ours: Callable[[], object], other: Callable[[], object], reps: int, warmup: int | None = None
) -> tuple[list[float], list[float]]:
    """Both sides get the same warm-up and the same repetitions, run alternately (ours, other, ours, …), so
    a slow spell of the machine falls on both."""
    for _ in range(WARMUP if warmup is None else warmup):
        ours()
        other()
    a, b = [], []
    for _ in range(reps):
        a.append(once(ours))
        b.append(once(other))
    return a, b


def pair_ratio(a: list[float], b: list[float]) -> float:
    """The median of the per-pair ratios a/b."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def stats(xs: list[float]) -> dict[str, float]:
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)}


def machine() -> dict[str, str]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cores": str(os.cpu_count()),
        "cpu": model,
        "memory_gib": f"{psutil.virtual_memory().total / 1024**3:.0f}",
        "python": platform.python_version(),
        "ffmpeg": ffmpeg_version(ffmpeg_binary(None)),
        "date": time.strftime("%Y-%m-%d"),
    }


def render_inline(
    source: Path | str,
    start: float,
    length: float,
    work: Path,
    quality: str = "final",
    timings: list[dict[str, float]] | None = None,
) -> None:
    """What ``quoteclip render`` does (without process start-up): probe, overlays, one ffmpeg pass, store.
    A URL source is read over loopback through the block cache in ``work`` (warm after the first run).
    ``timings``: each render's own timings (the pipeline's, as a job's meta has them) are appended to it."""
    store = work / f"store-{time.monotonic_ns()}"
    settings = Settings(
        storage_dir=store,
        allow_local_sources=True,
        source_hosts=("127.0.0.1",),
        allow_addresses=("127.0.0.1/32",),
        cache_dir=work / "inline-cache",
    ).for_cli()
    spec = build_spec(
        {
            "source": str(source),
            "start": start,
            "end": start + length,
            "caption": CAPTION,
            "watermark": {"text": "StarZero"},
            "quality": quality,
        }
    )
    result = produce_clip(spec, settings, LocalStorage(store))  # (the stores go with the work folder, after the run)
    if timings is not None and result.timings is not None:
        timings.append(result.timings)


def render_vs_limit(ffmpeg: str, source: Path, lengths: list[float], reps: int, work: Path) -> list[Row]:
    rows = []
    start = 61.0
    for length in lengths:
        timings: list[dict[str, float]] = []
        ours, bare = paired(
            lambda n=length, t=timings: render_inline(source, start, n, work, timings=t),  # type: ignore[misc]
            lambda n=length: baselines.bare_ffmpeg(ffmpeg, str(source), start, n, work / "b.mp4"),
            reps,
        )
        ratio = pair_ratio(ours, bare)
        rows.append(
            {
                "figure": f"1. render {length:g} s quote vs bare ffmpeg",
                "ours": stats(ours),
                "other": stats(bare),
                "ratio": ratio,
                "target": "≤ 1.05×",
                "met": ratio <= 1.05,
            }
        )
        rows.append(render_parts(length, ours, bare, timings[WARMUP:]))  # (not the warm-up's)
    return rows


def render_parts(length: float, ours: list[float], bare: list[float], timings: list[dict[str, float]]) -> Row:
    """Figure 1b: where figure 1's render spends its time besides ffmpeg, from the timings each of its timed
    renders wrote (p50 over the runs): the source opened and probed (the overlays are drawn meanwhile), the
    render's work besides ffmpeg (plan, output check), the store, and the rest of the call (spec, lookup,
    temporary folder); ffmpeg's own run against the bare transcodes."""

    def ms(xs: list[float]) -> str:
        return f"{1000 * statistics.median(xs):.0f}"

    parts = {
        "open + probe (overlays drawn beside it)": [t["open_probe_s"] for t in timings],
        "render besides ffmpeg (plan, output check)": [t["render_s"] - t["ffmpeg_s"] for t in timings],
        "store (4 sidecars, then the mp4)": [t["store_s"] for t in timings],
        "the rest of the call (spec, lookup, temporary folder)": [
            w - t["open_probe_s"] - t["render_s"] - t["store_s"] for w, t in zip(ours, timings, strict=True)
        ],
    }
    text = "; ".join(f"{k} {ms(v)}" for k, v in parts.items())
    return {
        "figure": f"1b. the {length:g} s render's time besides ffmpeg, ms p50 over the {len(timings)} timed runs",
        "value": f"added {ms([o - b for o, b in zip(ours, bare, strict=True)])} (ours minus the bare transcode "
        f"after it); {text}; ffmpeg {ms([t['ffmpeg_s'] for t in timings])} against the bare "
        f"transcodes' {ms(bare)}",
        "target": "report",
        "met": None,
    }


def editor_figures(ffmpeg: str, source: Path, reps: int, lengths: list[float], work: Path, stack: Stack) -> list[Row]:
    """Previews against the final render of the same quote, both sides warmed and repeated alike."""
    rows: list[Row] = []
    for length in lengths:
        instant, final = paired(
            lambda n=length: render_inline(source, 61.0, n, work, "instant"),  # type: ignore[misc]
            lambda n=length: render_inline(source, 61.0, n, work),
            reps,
        )
        ratio = pair_ratio(instant, final)
        rows.append(
            {
                "figure": f"7a. instant preview (stream copy, edit list) vs final render, {length:g} s quote",
                "ours": stats(instant),
                "other": stats(final),
                "ratio": ratio,
                "target": "≤ 0.1×",
                "met": ratio <= 0.1,
            }
        )
    preview, final = paired(
        lambda: render_inline(source, 61.0, 7.0, work, "preview"), lambda: render_inline(source, 61.0, 7.0, work), reps
    )
    ratio = pair_ratio(preview, final)
    rows.append(
        {
            "figure": "7b. encoded preview (640×360, ultrafast) vs final render, 7 s, source only in 1080p",
            "ours": stats(preview),
            "other": stats(final),
            "ratio": ratio,
            "target": "report",
            "met": None,
        }
    )
    low = episode(ffmpeg, _minutes(source), 360, "700k")
    www = stack.http.root
    (www / "episode-360p.mp4").unlink(missing_ok=True)
    (www / "episode-360p.mp4").symlink_to(low.resolve())
    (www / "page.html").write_text(
        "<html><body><video><source src='/episode.mp4' type='video/mp4' res='1080'>"
        "<source src='/episode-360p.mp4' type='video/mp4' res='360'></video></body></html>"
    )
    page = stack.http.url("page.html")
    preview, final = paired(
        lambda: render_inline(page, 61.0, 7.0, work, "preview"), lambda: render_inline(page, 61.0, 7.0, work), reps
    )
    ratio = pair_ratio(preview, final)
    rows.append(
        {
            "figure": "7c. encoded preview vs final render, 7 s, page source offering 360p and 1080p "
            "(the preview decodes 360p; both extract the page and read through the warm block cache)",
            "ours": stats(preview),
            "other": stats(final),
            "ratio": ratio,
            "target": "≤ 0.25×",
            "met": ratio <= 0.25,
        }
    )
    # POST /previews as the edit page sends it on every nudge: the source's bytes cached by a first preview
    at = min(300.0, _minutes(source) * 30)  # mid-episode
    body = clip_body(stack, at, 7.0)
    status, answer = stack.call("POST", "/previews", body)
    if status != 200:
        raise SystemExit(f"bench: POST /previews answered {status}: {answer}")
    nudges = []
    for i in range(1, 21 if reps > 1 else 6):
        t = time.perf_counter()
        status, answer = stack.call("POST", "/previews", body | {"start": at + i / 30, "end": at + 7.0 + i / 30})
        nudges.append(time.perf_counter() - t)
        if status != 200 or answer.get("mode") != "copy":
            raise SystemExit(f"bench: POST /previews answered {status}: {answer}")
    nudges.sort()
    rows.append(
        {
            "figure": "7d. POST /previews over HTTP for a one-frame nudge, 7 s quote, source bytes cached",
            "value": f"p50 {1000 * statistics.median(nudges):.0f} ms, "
            f"p95 {1000 * nudges[round(0.95 * (len(nudges) - 1))]:.0f} ms over {len(nudges)} nudges",
            "target": "report",
            "met": None,
        }
    )
    return rows


def _minutes(source: Path) -> float:
    """The episode's length in minutes, from its name (episode-1080p-<seconds>s.mp4)."""
    return int(source.stem.rsplit("-", 1)[1].removesuffix("s")) / 60


def moviepy_vs_ours(source: Path, length: float, reps: int, work: Path) -> Row:
    """Both warmed up (moviepy's imports and ours are loaded before the first timed run), same repetitions."""
    font = str(default_font_path())
    start = 61.0
    ours, mp = paired(
        lambda: render_inline(source, start, length, work),
        lambda: baselines.moviepy_clip(
            str(source), start, start + length, CAPTION, "StarZero", font, work / "moviepy.mp4"
        ),
        reps,
    )
    speedup = pair_ratio(mp, ours)
    return {
        "figure": f"2. moviepy 2 composite of the {length:g} s clip vs ours",
        "ours": stats(ours),
        "other": stats(mp),
        "ratio": speedup,
        "target": "ours ≥ 10× faster",
        "met": speedup >= 10,
    }


class Stack:
    """Redis, SeaweedFS, the loopback source server and worker processes for the queue figures."""

    def __init__(self, work: Path, source: Path, ffmpeg: str) -> None:
        self.work = work
        self.procs: list[subprocess.Popen[str]] = []
        url = os.environ.get("QUOTECLIP_REDIS_URL") or os.environ.get("REDIS_URL")
        self.redis = None
        if not url:
            started = start_private_redis(work)
            if started is None:
                raise SystemExit("bench: no Redis (set QUOTECLIP_REDIS_URL or put redis-server on PATH)")
            self.redis, url = started
        self.s3 = start_seaweedfs(Path(tempfile.mkdtemp(dir=work, prefix="s3-")))
        www = work / "www"
        www.mkdir(exist_ok=True)
        (www / "episode.mp4").unlink(missing_ok=True)
        (www / "episode.mp4").symlink_to(source.resolve())
        self.http = HttpSource(www)
        self.counter = work / "ffmpeg-runs.log"
        wrapper = work / "ffmpeg-counting"
        wrapper.write_text(  # counts renders, not version queries
            f'#!/bin/sh\ncase " $* " in *" -version "*) ;; *) echo run >> "{self.counter}" ;; esac\n'
            f'exec "{ffmpeg}" "$@"\n'
        )
        wrapper.chmod(0o755)
        self.cache = work / "source-cache"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("QUOTECLIP_", "AWS_"))},
            **self.s3.env(),
            "QUOTECLIP_REDIS_URL": url,
            "QUOTECLIP_SOURCE_HOSTS": "127.0.0.1",
            "QUOTECLIP_ALLOW_ADDRESSES": "127.0.0.1",
            "QUOTECLIP_CACHE_DIR": str(self.cache),
            "FFMPEG_BINARY": str(wrapper),
        }
        connect(self.settings()).flushdb()

    def settings(self) -> Settings:
        return Settings.from_env(self.env)

    def start_api(self) -> None:
        """``quoteclip serve`` on a free loopback port: the clicks of figures 3 and 4 go over HTTP to it."""
        self.port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "quoteclip", "serve", "--port", str(self.port)],
            env=self.env,
            text=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append(proc)
        wait_for(lambda: self._answers("/healthz"), 30, "quoteclip serve")
        self.api = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)  # one kept-alive connection

    def _answers(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        """One request on the kept-alive connection; a new connection when the server closed an idle one."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data else {}
        try:
            self.api.request(method, path, body=data, headers=headers)
            resp = self.api.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            self.api.close()
            self.api = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            self.api.request(method, path, body=data, headers=headers)
            resp = self.api.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")

    def start_worker(self, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "quoteclip", "worker", *args],
            env=self.env,
            text=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append(proc)
        time.sleep(1.5)  # registered and idle
        return proc

    def renders(self) -> int:
        return len(self.counter.read_text().splitlines()) if self.counter.exists() else 0

    def clear_source_cache(self) -> None:
        shutil.rmtree(self.cache, ignore_errors=True)
        self.http.bytes_sent.clear()
        self.http.ranges.clear()

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.http.close()
        self.s3.stop()
        if self.redis is not None:
            self.redis.terminate()


def clip_body(stack: Stack, start: float, length: float) -> dict[str, Any]:
    return {
        "source": stack.http.url("episode.mp4"),
        "start": start,
        "end": start + length,
        "caption": CAPTION,
        "watermark": "StarZero",
    }


def click_to_file(
    stack: Stack, start: float, length: float, work: Path, parts: list[dict[str, float]] | None = None
) -> float:
    """POST /clips → long-poll GET /clips/{id}?wait=20 → the first byte of the link, all over HTTP; seconds.
    With ``parts``, where the time went is appended (from the client's clock and the job's own timings)."""
    began = time.time()
    t = time.perf_counter()
    status, body = stack.call("POST", "/clips", clip_body(stack, start, length))
    accepted = time.perf_counter() - t
    if status not in (200, 202):
        raise SystemExit(f"bench: POST /clips answered {status}: {body}")
    clip_id = body["id"]
    while body.get("status") not in ("finished", "failed"):  # as the demo page does
        _, body = stack.call("GET", f"/clips/{clip_id}?wait=20")
    linked = time.time()
    if body["status"] != "finished":
        raise SystemExit(f"bench: job failed: {body['error']}")
    with urllib.request.urlopen(str(body["link"])) as resp:
        resp.read(1)
    total = time.perf_counter() - t
    if parts is not None:
        job = Job.fetch(clip_id, connection=connect(stack.settings()))
        timings = job.meta.get("timings") or {}
        ended = job.ended_at.replace(tzinfo=UTC).timestamp() if job.ended_at else linked
        parts.append(
            {
                "accept (POST /clips answered)": accepted,
                "queue pickup": timings.get("queued_s") or 0.0,
                "fetch + probe": timings.get("open_probe_s", 0.0),
                "render besides ffmpeg (overlays, output check)": timings.get("render_s", 0.0)
                - timings.get("ffmpeg_s", 0.0),
                "ffmpeg (reading through the source proxy)": timings.get("ffmpeg_s", 0.0),
                "store (4 sidecars, then the mp4)": timings.get("store_s", 0.0),
                "job end → link seen by the long-poll": max(0.0, linked - ended),
                "link → first byte": time.time() - linked,
                "total": total,
                "_started": began,
            }
        )
    return total


def run_batch(
    stack: Stack, worker: int, starts: list[float], length: float, **fields: Any
) -> tuple[float, float, list[str], list[str]]:
    """The quotes at ``starts`` on the bulk queue from a cold source cache: wall seconds, the worker tree's CPU
    seconds, the job ids and the failures."""
    stack.clear_source_cache()
    _reaped(stack, worker)
    cpu_before = _tree_cpu(worker)
    t = time.perf_counter()
    settings = stack.settings()
    ids = [
        enqueue_clip(build_spec({**clip_body(stack, s, length), **fields}), settings, bulk=True).job_id for s in starts
    ]
    while not all(job_status(i, settings)["status"] in ("finished", "failed") for i in ids):
        time.sleep(0.05)
    wall = time.perf_counter() - t
    _reaped(stack, worker)
    cpu = _tree_cpu(worker) - cpu_before
    failed = [job_status(i, settings) for i in ids]
    failed = [f"{b['job_id']}: {b['error']}" for b in failed if b["status"] != "finished"]
    for line in failed:
        print(f"bench: batch job failed: {line}", file=sys.stderr)
    return wall, cpu, ids, failed


def preset_figures(
    ffmpeg: str,
    stack: Stack,
    worker: int,
    source: Path,
    starts: list[float],
    length: float,
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
    seconds = len(starts) * length
    ref_bytes = sum(p.stat().st_size for p in reference)
    rows: list[Row] = []
    for preset in ("superfast", "ultrafast"):
        _, cpu, ids, failed = run_batch(stack, worker, starts, length, encoder_preset=preset)
        if failed:
            raise SystemExit(f"bench: {len(failed)} {preset} clips failed")
        before = _children_cpu()
        for s in starts:
            baselines.bare_ffmpeg(ffmpeg, str(source), s, length, work / "bare.mp4", preset)
        bare = (_children_cpu() - before) / seconds
        clips = fetched(ids, preset)
        scores = [baselines.similarity(ffmpeg, str(c), str(r)) for c, r in zip(clips, reference, strict=True)]
        size = sum(p.stat().st_size for p in clips)
        rows.append(
            {
                "figure": f"5c. encoder_preset {preset}: the batch of figure 5 again (CPU-s per output second, "
                "size, and each clip against the same quote's veryfast clip)",
                "value": f"ours {cpu / seconds:.2f} (bare ffmpeg at {preset} {bare:.2f}), "
                f"{size * 8 / seconds / 1e6:.1f} Mb/s ({size / ref_bytes:.2f}× veryfast's "
                f"{ref_bytes * 8 / seconds / 1e6:.1f}), SSIM {min(x for x, _ in scores):.4f}–"
                f"{max(x for x, _ in scores):.4f}, PSNR {min(y for _, y in scores):.1f}–"
                f"{max(y for _, y in scores):.1f} dB",
                "target": "≤ 0.45 (report quality)",
                "met": cpu / seconds <= 0.45,
            }
        )
    return rows


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (the bare ffmpeg runs)."""
    times = os.times()
    return times.children_user + times.children_system


def _reaped(stack: Stack, pid: int) -> None:
    """Wait until the worker is idle: a job reads as finished a moment before its work-horse ends, and the horse's
    CPU (its ffmpeg's with it) counts in the worker's children's times only once the worker has reaped it, which
    it does before it says it is idle again."""
    conn = connect(stack.settings())
    deadline = time.monotonic() + 60
    while [w.get_state() for w in Worker.all(connection=conn) if w.pid == pid] != ["idle"]:
        if time.monotonic() > deadline:
            raise SystemExit("bench: the worker did not come back to idle within 60 s of its last job")
        time.sleep(0.02)


def _tree_cpu(pid: int) -> float:
    """CPU seconds of a worker and everything it waited for (work-horses, and through them ffmpeg)."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system + times.children_user + times.children_system)


class PeakRss:
    """Peak memory of a process and its children (the work-horse and ffmpeg), sampled every 20 ms: the sum of
    their PSS (shared pages counted once: the work-horse is a fork of the worker) and the largest single RSS."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.peak_tree = 0
        self.peak_rss_sum = 0
        self.peak_single = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                procs = [self.proc, *self.proc.children(recursive=True)]
                pss, rss = [], []
                for p in procs:
                    try:
                        full = p.memory_full_info()
                        pss.append(full.pss)
                        rss.append(full.rss)
                    except psutil.Error:
                        pass
                self.peak_tree = max(self.peak_tree, sum(pss))
                self.peak_rss_sum = max(self.peak_rss_sum, sum(rss))
                self.peak_single = max(self.peak_single, max(rss, default=0))
            except psutil.Error:
                pass
            time.sleep(0.02)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def click_during_batch(stack: Stack, batch: int, idle: float, work: Path) -> Row:
    """Figure 3e: two workers on this machine as ``quoteclip up`` runs them on 2 cores (one for everything, one for
    clicks only), a batch on the bulk queue, and clicks arriving meanwhile: the click worker takes each click at
    once, and the batch render beside it runs nicer."""
    second = stack.start_worker("--clicks-only")
    settings = stack.settings()
    long = stack.http.root.joinpath("episode.mp4").stat().st_size > 200 * 1024**2
    first, base = (400.0, 700.0) if long else (24.5, 80.5)
    # quotes no other figure renders: every one is a render
    ids = [
        enqueue_clip(build_spec(clip_body(stack, first + 9.0 * i, 7.0)), settings, bulk=True).job_id
        for i in range(batch)
    ]
    deadline = time.monotonic() + 60
    while not any(job_status(i, settings)["status"] == "started" for i in ids):
        if time.monotonic() > deadline:
            raise SystemExit("bench: the batch of figure 3e did not start within 60 s")
        time.sleep(0.05)
    clicks = []
    for i in range(3):
        time.sleep(1.0)
        clicks.append(click_to_file(stack, base + 7 * i, 7.0, work))
        left = sum(job_status(j, settings)["status"] not in ("finished", "failed") for j in ids)
        print(f"bench: click {i + 1} during the batch: {clicks[-1]:.2f} s, {left} batch clips left", file=sys.stderr)
    while not all(job_status(i, settings)["status"] in ("finished", "failed") for i in ids):
        time.sleep(0.1)
    second.terminate()
    second.wait(timeout=60)
    return {
        "figure": f"3e. click → first byte while a batch of {batch} runs on the bulk queue, 2 workers (2 cores; "
        "one for clicks only, as `quoteclip up` runs them)",
        "value": f"3 clicks: {' / '.join(f'{c:.2f}' for c in clicks)} s; an idle click (3a median): {idle:.2f} s",
        "target": "report",
        "met": None,
    }


def added_time(parts: list[dict[str, float]], limit: list[float]) -> Row:
    """Figure 3d: the click's time besides a bare transcode, and its parts, p50 / p95 over the clicks."""

    def p(xs: list[float], q: float) -> float:
        xs = sorted(xs)
        return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]

    added = [c["total"] - b for c, b in zip(parts, limit, strict=True)]
    names = [k for k in parts[0] if not k.startswith("_") and k != "total"]
    text = "; ".join(
        f"{k} {1000 * p([c[k] for c in parts], 0.5):.0f} / {1000 * p([c[k] for c in parts], 0.95):.0f}" for k in names
    )
    return {
        "figure": f"3d. added time of a click (click → first byte minus the bare transcode run after it) and "
        f"its parts, ms p50 / p95 over {len(parts)} clicks",
        "value": f"added {1000 * p(added, 0.5):.0f} / {1000 * p(added, 0.95):.0f}; {text}",
        "target": "report",
        "met": None,
    }


# the command as a user runs it: the console script pip installed beside this interpreter (``python -m`` when
# there is none, as in an environment where the project is on the path but not installed)
_SCRIPT = Path(sys.executable).with_name("quoteclip")
COMMAND = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "quoteclip"]


def cli_figures(ffmpeg: str, source: Path, reps: int, work: Path, stack: Stack) -> list[Row]:
    """A cold ``quoteclip render`` process, as a creator's script or a site's cron job runs it: a render (local
    source, fresh local folder store each time) and a stored clip answered (no ffmpeg), each against the bare
    7 s transcode. Byte-code is written on the warm-up run and reused, as in an installed package."""
    length, start = 7.0, 61.0
    source = source.resolve()
    base = {k: v for k, v in stack.env.items() if not k.startswith(("QUOTECLIP_S3_", "AWS_"))}
    base.pop("PYTHONDONTWRITEBYTECODE", None)
    base.pop("QUOTECLIP_REDIS_URL", None)  # the inline CLI needs no Redis
    base.pop("FFMPEG_BINARY", None)  # the CLI finds the wheel's ffmpeg (the bare side's) as a user's finds it
    if os.environ.get("FFMPEG_BINARY"):
        base["FFMPEG_BINARY"] = ffmpeg

    def cli(src: str, store: Path | None, extra: dict[str, str] | None = None) -> Callable[[], None]:
        env = {**base, **(extra or {})}
        if store is not None:
            env["QUOTECLIP_STORAGE_DIR"] = str(store)
        argv = [
            *COMMAND,
            "render",
            src,
            "--start",
            str(start),
            "--end",
            str(start + length),
            "--caption",
            CAPTION,
            "--watermark",
            "StarZero",
            "--json",
        ]

        def run() -> None:
            out = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=work)
            if out.returncode != 0:
                raise SystemExit(f"bench: quoteclip render failed: {out.stderr.strip()}")

        return run

    def fresh_store() -> None:
        cli(str(source), Path(tempfile.mkdtemp(dir=work, prefix="cli-store-")))()

    def bare() -> None:
        baselines.bare_ffmpeg(ffmpeg, str(source), start, length, work / "bare.mp4")

    rows: list[Row] = []
    ours, other = paired(fresh_store, bare, reps)
    ratio = pair_ratio(ours, other)
    rows.append(
        {
            "figure": "8a. cold `quoteclip render` process, 7 s quote (local source, local folder store) vs "
            "bare ffmpeg",
            "ours": stats(ours),
            "other": stats(other),
            "ratio": ratio,
            "target": "≤ 1.15×",
            "met": ratio <= 1.15,
        }
    )
    store = work / "cli-stored"
    cases = [
        ("local source, local folder store", str(source), {}, 0.15),
        ("plain-URL source, local folder store", stack.http.url("episode.mp4"), {}, 0.15),
        ("local source, S3 store", str(source), stack.s3.env(), None),
    ]
    for label, src, extra, target in cases:
        answer = cli(src, store if not extra else None, extra)
        answer()  # stores the clip (the warm-up below then finds it)
        ours, other = paired(answer, bare, reps)
        ratio = pair_ratio(ours, other)
        met = ratio <= target if target else None
        rows.append(
            {
                "figure": f"8b. stored clip answered by a cold `quoteclip render` ({label}) vs bare 7 s transcode",
                "ours": stats(ours),
                "other": stats(other),
                "ratio": ratio,
                "target": f"≤ {target}×" if target else "report",
                "met": met,
            }
        )
    rows.append(import_figure(base, reps, work))
    return rows


# whose modules a cold render imports, by the first part of the module's name (the rest: the standard library)
IMPORT_GROUPS = {
    "typer": "typer (the command line)",
    "pydantic": "pydantic",
    "pydantic_core": "pydantic",
    "annotated_types": "pydantic",
    "typing_inspection": "pydantic",
    "typing_extensions": "pydantic",
    "av": "PyAV",
    "PIL": "Pillow (captions, watermark)",
    "ffmpeg": "ffmpeg-python (plan)",
    "past": "ffmpeg-python (plan)",
    "future": "ffmpeg-python (plan)",
    "quoteclip": "quoteclip's own",
    "jobs": "quoteclip's own",
    "renderer": "quoteclip's own",
    "sources": "quoteclip's own",
    "storage": "quoteclip's own",
    "watermarks": "quoteclip's own",
}


def import_figure(env: dict[str, str], reps: int, work: Path) -> Row:
    """Figure 8c: what a cold render's imports cost (``python -X importtime``, byte-code written): the command's
    own process (the command and the render path), and PyAV in the probe helper beside it; median of the runs,
    each module's own time summed by the package it belongs to."""

    def imports(code: str) -> dict[str, float]:
        out = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            env=env,
            capture_output=True,
            text=True,
            cwd=work,
            check=True,
        )
        groups: dict[str, float] = {}
        for line in out.stderr.splitlines():
            parts = line.removeprefix("import time:").split("|")
            if len(parts) != 3 or not parts[0].strip().isdigit():
                continue
            name = parts[2].strip().split(".")[0]
            group = IMPORT_GROUPS.get(name, "site + standard library")
            groups[group] = groups.get(group, 0.0) + int(parts[0]) / 1e6
        return groups

    runs, helper = [], []
    for _ in range(max(3, reps)):
        runs.append(imports("import quoteclip.cli, jobs.pipeline.produce"))
        helper.append(imports("import av")[IMPORT_GROUPS["av"]])
    totals = [sum(g.values()) for g in runs]
    middle = runs[totals.index(statistics.median_low(totals))]
    text = ", ".join(f"{k} {1000 * v:.0f}" for k, v in sorted(middle.items(), key=lambda kv: -kv[1]))
    return {
        "figure": "8c. imports of a cold `quoteclip render`'s own process (the command and the render path) "
        "and of its probe helper (PyAV, beside them), `python -X importtime`, byte-code written, ms",
        "value": f"{1000 * sum(middle.values()):.0f} ms: {text}; helper: PyAV {1000 * statistics.median(helper):.0f}",
        "target": "report",
        "met": None,
    }


def queue_figures(ffmpeg: str, source: Path, reps: int, batch: int, lengths: list[float], work: Path) -> list[Row]:
    rows: list[Row] = []
    stack = Stack(work, source, ffmpeg)
    try:
        stack.start_api()
        worker = stack.start_worker()
        size = source.stat().st_size
        length = 7.0
        click_to_file(stack, 30.0, length, work)  # warm-up of the worker, the API and the store
        baselines.bare_ffmpeg(ffmpeg, str(source), 100.0, length, work / "bare.mp4")  # and of the bare side
        times, limit, fetched, parts = [], [], [], []  # type: ignore[var-annotated]
        clicks = max(10, 2 * reps) if reps > 1 else 1
        for i in range(clicks):  # alternating: a click (new quote, cold source cache), then the bare transcode
            stack.clear_source_cache()
            times.append(click_to_file(stack, 100.0 + 7 * i, length, work, parts))
            fetched.append(stack.http.bytes_sent["episode.mp4"])
            limit.append(once(lambda: baselines.bare_ffmpeg(ffmpeg, str(source), 100.0, length, work / "bare.mp4")))
        with PeakRss(worker.pid) as rss:  # a separate run: sampling memory costs CPU the timed runs should not pay
            click_to_file(stack, 90.0, length, work)
        ratio = pair_ratio(times, limit)
        rows.append(
            {
                "figure": f"3a. click → link → first byte over HTTP (POST /clips to quoteclip serve, a worker, "
                f"S3), 7 s quote, cold source cache, {clicks} clicks, vs bare local transcode",
                "ours": stats(times),
                "other": stats(limit),
                "ratio": ratio,
                "target": "≤ 1.3×",
                "met": ratio <= 1.3,
            }
        )
        rows.append(added_time(parts, limit))
        naive_times = []
        naive_bytes = 0
        for _ in range(max(1, reps // 2)):
            folder = Path(tempfile.mkdtemp(dir=work, prefix="naive-"))
            t = time.perf_counter()
            naive_bytes = baselines.download_then_cut(ffmpeg, stack.http.url("episode.mp4"), 100.0, length, folder)
            naive_times.append(time.perf_counter() - t)
            shutil.rmtree(folder)
        rows.append(
            {
                "figure": "3b. ours vs naive yt-dlp download of the whole file + ffmpeg cut",
                "ours": stats(times),
                "other": stats(naive_times),
                "ratio": statistics.median(naive_times) / statistics.median(times),
                "target": "report (×faster)",
                "met": None,
            }
        )
        got = statistics.median(fetched)
        rows.append(
            {
                "figure": "3c. source bytes fetched per 7 s clip (cold cache) vs file size",
                "value": f"{got / 1024**2:.2f} MB of {size / 1024**2:.0f} MB ({100 * got / size:.2f}%; "
                f"naive: {naive_bytes / 1024**2:.0f} MB)",
                "target": "< 5%",
                "met": got < 0.05 * size,
            }
        )

        # 4. cache hit, over HTTP: the worker is running, so a miss would render (and be counted)
        renders = stack.renders()
        stored = clip_body(stack, 100.0, length)
        hits = []
        for _ in range(50 if reps > 1 else 10):
            t = time.perf_counter()
            status, body = stack.call("POST", "/clips", stored)
            hits.append(time.perf_counter() - t)
            if status != 200 or not body.get("cached"):
                raise SystemExit(f"bench: expected a stored clip, got {status}: {body}")
        time.sleep(1.0)  # a render started by a miss would show in the count by now
        hits.sort()
        p50, p95 = statistics.median(hits), hits[int(0.95 * (len(hits) - 1))]
        rows.append(
            {
                "figure": "4. cache hit: identical POST /clips over HTTP → link (S3 HEAD + presign)",
                "value": f"p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms over {len(hits)} requests, "
                f"renders started: {stack.renders() - renders}",
                "target": "p50 < 50 ms, no render",
                "met": p50 < 0.05 and stack.renders() == renders,
            }
        )

        # 5. batch on the recommended set-up: one worker per 2 cores (the worker started above)
        first = 200.0 if source.stat().st_size > 200 * 1024**2 else 20.0
        starts = [first + 9.0 * i for i in range(batch)]  # 7 s quotes, 2 s apart: neighbours share blocks
        wall, cpu, ids, failed = run_batch(stack, worker.pid, starts, length)
        twice = stack.http.bytes_sent_twice()
        cores = os.cpu_count() or 1
        before = _children_cpu()
        for s in starts:  # the floor: the bare transcode of the same quotes, one after another, from the local file
            baselines.bare_ffmpeg(ffmpeg, str(source), s, length, work / "bare.mp4")
        bare_cpu = (_children_cpu() - before) / (batch * length)
        rows.append(
            {
                "figure": f"5. batch: {batch} quotes of 7 s from one source on the bulk queue, 1 worker "
                f"({cores} cores: one worker per 2 cores, as docs/scaling.md recommends)",
                "value": f"{wall:.1f} s wall, {batch / (wall / 60):.1f} clips/min on this machine, "
                f"{cpu / (batch * length):.2f} CPU-s per output second, "
                f"{stack.http.bytes_sent['episode.mp4'] / 1024**2:.1f} MB fetched, "
                f"{twice} bytes fetched twice, {len(failed)} failed",
                "target": "no byte range fetched twice",
                "met": twice == 0 and not failed,
            }
        )
        rows.append(
            {
                "figure": "5b. CPU-seconds per second of output, 720p with captions and watermark: the batch of "
                "figure 5 (worker, work-horses, ffmpeg) vs the bare transcodes of the same quotes",
                "value": f"ours {cpu / (batch * length):.2f}, bare ffmpeg {bare_cpu:.2f} "
                f"({cpu / (batch * length) / bare_cpu:.2f}×)",
                "target": "≤ 0.45",
                "met": cpu / (batch * length) <= 0.45,
            }
        )
        rows += preset_figures(ffmpeg, stack, worker.pid, source, starts, length, ids, work)
        rows.append(click_during_batch(stack, 20 if reps > 1 else 4, statistics.median(times), work))
        rows.append(
            {
                "figure": "6. peak memory while rendering 720p (worker + work-horse + ffmpeg)",
                "value": f"{rss.peak_tree / 1024**2:.0f} MB PSS (RSS summed: {rss.peak_rss_sum / 1024**2:.0f} MB; "
                f"largest process: ffmpeg or the horse, {rss.peak_single / 1024**2:.0f} MB)",
                "target": "< 400 MB",
                "met": rss.peak_tree < 400 * 1024**2,
            }
        )
        rows += cli_figures(ffmpeg, source, reps, work, stack)
        rows += editor_figures(ffmpeg, source, reps, lengths, work, stack)
    finally:
        stack.close()
    return rows


def table(rows: list[Row]) -> str:
    out = [
        "| figure | ours (min / median / max s) | alternative (min / median / max s) | result | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        met = {True: "yes", False: "**no**", None: "–"}[r["met"]]
        if "value" in r:
            out.append(f"| {r['figure']} | | | {r['value']} | {r['target']} | {met} |")
            continue
        ours = "{min:.2f} / {median:.2f} / {max:.2f}".format(**r["ours"])
        other = "{min:.2f} / {median:.2f} / {max:.2f}".format(**r["other"])
        out.append(f"| {r['figure']} | {ours} | {other} | {r['ratio']:.2f}× | {r['target']} | {met} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a reduced run (CI): short source, 1 repetition without a warm-up, small batches",
    )
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    global WARMUP
    WARMUP = 0 if args.quick else 1
    ffmpeg = ffmpeg_binary(os.environ.get("FFMPEG_BINARY"))
    minutes, reps, lengths, batch = (2, 1, [7.0], 2) if args.quick else (20, 9, [7.0, 30.0], 10)
    work = Path(tempfile.mkdtemp(prefix="quoteclip-bench-"))
    try:
        source = source_1080p(ffmpeg, minutes)
        rows = render_vs_limit(ffmpeg, source, lengths, reps, work)
        rows.append(moviepy_vs_ours(source, 7.0 if not args.quick else 2.0, reps, work))
        rows += queue_figures(ffmpeg, source, reps, batch, lengths, work)
        rows += profiles_figures(source, 1 if args.quick else 10, CAPTION, work)
        rows.append(page_batch_figure(source, 2 if args.quick else 10, CAPTION, work, 20.0 if args.quick else 200.0))
        rows.append(hls_figure(ffmpeg, source, reps, CAPTION, work, paired, 30.0 if args.quick else 300.0))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info = machine()
    print(
        f"machine: {info['cores']} cores, {info['cpu']}, {info['memory_gib']} GiB, Python {info['python']}, "
        f"ffmpeg {info['ffmpeg']}, {info['date']}; source {minutes} min 1080p30 4 Mb/s; "
        f"{reps} repetitions {'after a warm-up' if WARMUP else 'without a warm-up'}\n"
    )
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "rows": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
