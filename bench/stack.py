"""The services the queue, command-line and preview figures run against: Redis, SeaweedFS (S3), a loopback origin
for the source, ``quoteclip serve`` and ``quoteclip worker`` processes; and what the figures do with them (a
click over HTTP, a batch on the bulk queue) and read from them (CPU-seconds, peak memory)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
from rq import Worker
from rq.job import Job, JobStatus

from jobs.queue import connect, enqueue_clip, job_status
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from testkit.services import HttpSource, free_port, start_private_redis, start_seaweedfs, wait_for

from .config import BRAND, CAPTION, SITE_KEY


class Stack:
    """Redis, SeaweedFS, the loopback source server and worker processes for the queue figures. A context
    manager: every process it started is stopped when the block ends."""

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
        try:
            # (a full run stores a few GB: 120 s clips of figure 13 among them; 1.3 GB filled up on 2026-12-02)
            self.s3 = start_seaweedfs(Path(tempfile.mkdtemp(dir=work, prefix="s3-")), volumes=200)
        except BaseException:
            if self.redis is not None:
                self.redis.terminate()
            raise
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
            "QUOTECLIP_SITE_KEYS": f"{SITE_KEY[0]}:{SITE_KEY[1]}",  # signed clip links (figures 12)
        }
        connect(self.settings()).flushdb()

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def settings(self) -> Settings:
        return Settings.from_env(self.env)

    def start_api(self) -> None:
        """``quoteclip serve`` on a free loopback port: the clicks of figures 3 and 4 go over HTTP to it."""
        self.port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli", "serve", "--port", str(self.port)],
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
        """One JSON request on the kept-alive connection."""
        data = json.dumps(body).encode() if body is not None else None
        status, _, answer = self.request(method, path, data, {"Content-Type": "application/json"} if data else {})
        return status, json.loads(answer or b"{}")

    def request(
        self, method: str, path: str, data: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """One request on the kept-alive connection (a new connection when the server closed an idle one): the
        status, the headers (lower-case names) and the whole body."""
        try:
            self.api.request(method, path, body=data, headers=headers or {})
            resp = self.api.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            self.api.close()
            self.api = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            self.api.request(method, path, body=data, headers=headers or {})
            resp = self.api.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()

    def start_worker(self, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli", "worker", *args],
            env=self.env,
            text=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append(proc)
        self.wait_idle(proc.pid, 60, "registered")
        return proc

    def wait_idle(self, pid: int, timeout: float, what: str) -> None:
        """Wait until the worker ``pid`` says it is idle (rq's registry; a worker registers once it has preloaded
        what its work-horses need)."""
        conn = connect(self.settings())
        deadline = time.monotonic() + timeout
        while [w.get_state() for w in Worker.all(connection=conn) if w.pid == pid] != ["idle"]:
            if time.monotonic() > deadline:
                raise SystemExit(f"bench: the worker was not {what} and idle within {timeout:g} s")
            time.sleep(0.02)

    def renders(self) -> int:
        return len(self.counter.read_text().splitlines()) if self.counter.exists() else 0

    def new_episode(self, of: str = "episode.mp4") -> str:
        """The URL of an episode no clip has read: a new name on the loopback origin for the file ``of`` names (the
        worker probes it afresh and reads its bytes from the origin once the block cache is emptied)."""
        name = f"new-episode-{time.monotonic_ns()}{Path(of).suffix}"
        (self.http.root / name).symlink_to((self.http.root / of).resolve())
        return self.http.url(name)

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
                proc.wait()
        if hasattr(self, "api"):
            self.api.close()
        self.http.close()
        self.s3.stop()
        if self.redis is not None:
            self.redis.terminate()
            self.redis.wait()


def clip_body(stack: Stack, start: float, length: float, source: str | None = None) -> dict[str, Any]:
    return {
        "source": source or stack.http.url("episode.mp4"),
        "start": start,
        "end": start + length,
        "caption": CAPTION,
        "watermark": BRAND,
    }


def click_to_file(
    stack: Stack, start: float, length: float, parts: list[dict[str, float]] | None = None, whole: bool = False
) -> float:
    """POST /clips → long-poll GET /clips/{id}?wait=20 → the first byte of the link (with ``whole``, its last byte),
    all over HTTP; seconds. With ``parts``, where the time went is appended (from the client's clock and the job's
    own timings)."""
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
        resp.read() if whole else resp.read(1)
    total = time.perf_counter() - t
    first_byte = time.time()
    ended(stack, clip_id)  # (the job's timings are in its meta once it has ended: it checks the clip once stored)
    if parts is not None:
        job = Job.fetch(clip_id, connection=connect(stack.settings()))
        timings = job.meta.get("timings") or {}
        stored = timings.get("stored_at") or linked  # (the job ends later: it checks the clip once stored)
        parts.append(
            {
                "accept (POST /clips answered)": accepted,
                "queue pickup": timings.get("queued_s") or 0.0,
                "fetch + probe": timings.get("open_probe_s", 0.0),
                "render besides ffmpeg (overlays, output check)": timings.get("render_s", 0.0)
                - timings.get("ffmpeg_s", 0.0),
                "ffmpeg (reading through the source proxy)": timings.get("ffmpeg_s", 0.0),
                "store (4 sidecars, then the mp4)": timings.get("store_s", 0.0),
                "stored → link seen by the long-poll": max(0.0, linked - stored),
                "link → first byte": first_byte - linked,
                "total": total,
                "_started": began,
            }
        )
    return total


def ended(stack: Stack, clip_id: str, timeout: float = 120) -> None:
    """Wait for a click's job to end, after it was timed: once its clip is stored and said to be, its worker still
    checks it (the clip's quality report), and what comes next (the next click, or the other side of a comparison)
    starts on a machine that is done with it."""
    connection = connect(stack.settings())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Job.fetch(clip_id, connection=connection).get_status(refresh=True) not in (
            JobStatus.QUEUED,
            JobStatus.STARTED,
        ):
            return
        time.sleep(0.02)
    raise SystemExit(f"bench: the job {clip_id} did not end within {timeout:g} s of its clip being stored")


def run_batch(
    stack: Stack, worker: int, starts: list[float], length: float, **fields: Any
) -> tuple[float, float, list[str], list[str]]:
    """The quotes at ``starts`` on the bulk queue from a cold source cache: wall seconds, the worker tree's CPU
    seconds, the job ids and the failures."""
    stack.clear_source_cache()
    reaped(stack, worker)
    cpu_before = tree_cpu(worker)
    t = time.perf_counter()
    settings = stack.settings()
    ids = [
        enqueue_clip(build_spec({**clip_body(stack, s, length), **fields}), settings, bulk=True).job_id for s in starts
    ]
    while not all(job_status(i, settings)["status"] in ("finished", "failed") for i in ids):
        time.sleep(0.05)
    wall = time.perf_counter() - t
    reaped(stack, worker)
    cpu = tree_cpu(worker) - cpu_before
    answers = [job_status(i, settings) for i in ids]
    failed = [f"{b['job_id']}: {b['error']}" for b in answers if b["status"] != "finished"]
    for line in failed:
        print(f"bench: batch job failed: {line}", file=sys.stderr)
    return wall, cpu, ids, failed


def reaped(stack: Stack, pid: int) -> None:
    """Wait until the worker is idle: a job reads as finished a moment before its work-horse ends, and the horse's
    CPU (its ffmpeg's with it) counts in the worker's children's times only once the worker has reaped it, which
    it does before it says it is idle again."""
    stack.wait_idle(pid, 60, "back from its last job")


def tree_cpu(pid: int) -> float:
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
