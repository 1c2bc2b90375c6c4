"""A sick machine fails no clip, and workers stop and hand their work back cleanly: real Redis, real ``quoteclip
worker`` processes (one on a full disk in a private mount namespace), real ffmpeg, a live API, loopback only.

- A fault of the worker's machine (full disk, no memory, no working ffmpeg) hands the job back to the queue
  without spending an attempt, and the worker takes no job until it is healthy again; its health shows in
  Redis, in ``quoteclip health`` and in ``/metrics``.
- A worker (or work-horse) killed mid-job costs the clip none of its attempts, but counts against its cap of
  deaths; a killed worker's job runs again within 30 s.
- An unexpected error fails the job once, as an internal error; no error a client sees names a worker's path.
- SIGTERM lets a render that will end within the grace finish and hands any other job back at once; one Ctrl-C
  stops ``quoteclip up`` in order within 5 s.
- A render goes on through a Redis restart; and the fault run: 30 clips, four workers (one on a full disk),
  workers SIGKILLed, Redis restarted: every clip finished, none failed, one object each.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import math
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest
import redis
from rq.job import Job

from jobs.queue import enqueue_clip, job_status
from quoteclip.errors import InternalError, MachineFault, RenderFailed, SourceTransient
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from testkit import media as testkit_media
from testkit.faces import answers, start_up
from testkit.services import free_port, wait_for

ATTEMPTS = 3  # the queue's retries (jobs.queue.RETRY): a job that spent none still has them all


# ---- the parts, without services ----------------------------------------------------------------------------


def test_ffmpeg_failing_is_the_machines_only_on_the_machines_evidence(tmp_path: Path, monkeypatch) -> None:
    """What ffmpeg's exit says about the machine: a binary that cannot run (126/127, or none there) is this
    machine's; a SIGKILL not ours is the OOM killer's only when the kernel's count of OOM kills rose meanwhile
    (here a stand-in cgroup's ``memory.events``, written by the fake ffmpeg as the kernel would). A negated
    ENOSPC/ENOMEM exit code and "No space left on device" in its words are the input's, a permanent RenderFailed:
    an input makes ffmpeg exit with -ENOMEM (an expression too deep to parse), and a URL can name any error."""
    import quoteclip.machine
    from renderer.ffmpeg import run_ffmpeg

    events = tmp_path / "memory.events"
    events.write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    monkeypatch.setattr(quoteclip.machine, "CGROUP", tmp_path)

    def fake(name: str, script: str) -> str:
        path = tmp_path / f"ffmpeg-{name}"
        path.write_text(f"#!/bin/sh\n{script}\n")
        path.chmod(0o755)
        return str(path)

    with pytest.raises(MachineFault) as broken:
        run_ffmpeg([fake("127", "exit 127")], timeout=10)
    assert (broken.value.reason, broken.value.permanent) == ("ffmpeg", False) and "could not run" in str(broken.value)
    with pytest.raises(MachineFault) as missing:
        run_ffmpeg([str(tmp_path / "no-such-ffmpeg")], timeout=10)
    assert missing.value.reason == "ffmpeg" and "could not be started" in str(missing.value)
    oom = f"echo 'oom 1' >> '{events}'; echo 'oom_kill 1' >> '{events}'; kill -KILL $$"
    with pytest.raises(MachineFault) as killed:
        run_ffmpeg([fake("oom", oom)], timeout=10)
    assert (killed.value.reason, killed.value.permanent) == ("memory", False) and "out of memory" in str(killed.value)

    inputs = {
        "exit 228": "No space left on device",  # -ENOSPC: measured by the pipeline, never read from the code
        "exit 244": "Cannot allocate memory",  # -ENOMEM: what a select expression of 101 terms gets
        "echo 'http://cdn.example/No space left on device.mp4: Cannot allocate memory' >&2; exit 1": "code 1",
        "echo 'Invalid data found when processing input' >&2; exit 1": "code 1",
    }
    for n, (script, says) in enumerate(inputs.items()):
        with pytest.raises(RenderFailed) as info:
            run_ffmpeg([fake(f"input-{n}", script)], timeout=10)
        assert info.value.permanent and not info.value.machine and says in str(info.value), script
    with pytest.raises(RenderFailed) as stranger:  # killed, and no OOM kill counted: tried again, not the machine
        run_ffmpeg([fake("kill", "kill -KILL $$")], timeout=10)
    assert not stranger.value.permanent and not stranger.value.machine


def test_errors_wrapping_a_machine_fault_are_machine_faults() -> None:
    """The full disk as it reached clients: PyAV's read of the source cache failed with ENOSPC and the probe
    raised ``source could not be read ([Errno 28] No space left on device)`` in its place (``from None``). The
    pipeline sees the OSError it was raised during; an error's words alone (a URL's path, a page's reason phrase)
    are never a machine's fault."""
    from quoteclip.errors import SourceUnavailable, machine_fault

    def probe() -> None:
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:
            raise SourceTransient(f"source could not be read ({exc}): https://cdn.example/ep.mp4") from None

    with pytest.raises(SourceTransient) as wrapped:
        probe()
    fault = machine_fault(wrapped.value)
    assert fault is not None and fault.reason == "disk" and "No space left on device" in str(fault)
    assert machine_fault(MemoryError()) is not None
    for said in (
        "source read failed ([Errno 24] Too many open files): cdn.example",
        "source not found (HTTP 404): http://127.0.0.1/No space left on device.mp4",
        "source unavailable (HTTP 503 Cannot allocate memory): http://127.0.0.1/watch",
        "source too slow (3 KB/s): cdn.example",
    ):
        assert machine_fault(SourceUnavailable(said)) is None, said
    assert machine_fault(OSError(errno.ENOENT, "No such file or directory")) is None


def test_unexpected_errors_are_internal_errors_not_retried() -> None:
    from jobs.tasks import classify

    for raised in (OSError("invalid outline"), OverflowError("cannot convert float infinity to integer")):
        error = classify(raised)
        assert isinstance(error, InternalError) and error.permanent and type(raised).__name__ in str(error)
    assert classify(ConnectionError("reset")) is None  # Redis or the network: retried as before
    assert isinstance(classify(OSError(errno.ENOSPC, "No space left on device")), MachineFault)


def test_paths_of_the_worker_are_taken_out_of_errors() -> None:
    from jobs.pipeline.tempdirs import HIDDEN, hide_paths

    said = "bad input: watermark.logo is not a readable PNG: '/tmp/quoteclip-4242-ab12/assets-0/asset-9f.png'"
    assert hide_paths(said) == f"bad input: watermark.logo is not a readable PNG: {HIDDEN}"
    url = "source unavailable: source not found (HTTP 404): https://cdn.example:8443/shows/ep.mp4"
    assert hide_paths(url) == url  # a URL's path is the request's own
    local = "source unavailable: source not found: /srv/media/ep.mp4"
    assert hide_paths(local, keep=["/srv/media/ep.mp4"]) == local  # a local source the request named


def test_a_render_estimates_its_time_left() -> None:
    from jobs.worker import ESTIMATE_MARGIN, time_left

    now = 1000.0
    assert time_left({"stage": "fetching", "progress": 0, "stage_at": 990.0}, now) is None
    assert time_left({"stage": "uploading", "progress": 95, "stage_at": 999.0}, now) == 0.0
    assert math.isnan(time_left({"stage": "rendering", "progress": 6, "stage_at": 999.9}, now))  # too early
    # half the render (5 → 95) done in 10 s: about 10 s left, stretched
    assert time_left({"stage": "rendering", "progress": 50, "stage_at": 990.0}, now) == pytest.approx(
        10 * ESTIMATE_MARGIN
    )


# ---- live workers ------------------------------------------------------------------------------------------------


class Fleet:
    """``quoteclip worker`` processes with their logs in files (a log never fills a pipe), stopped at the end."""

    def __init__(self, env: dict[str, str], folder: Path) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("QUOTECLIP_", "AWS_"))} | env
        self.folder = folder
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, extra: dict[str, str] | None = None, wrap: list[str] | None = None) -> int:
        log = open(self.folder / f"{name}.log", "ab")
        argv = [*(wrap or []), sys.executable, "-m", "cli", "worker", "--name", name]
        self.procs[name] = subprocess.Popen(argv, env=self.env | (extra or {}), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        return self.procs[name].pid

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def kill(self, name: str) -> None:
        """SIGKILL the worker process alone (its work-horse and ffmpeg die with it)."""
        self.procs[name].kill()
        self.procs[name].wait()

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                for child in _tree(proc.pid):
                    child.kill()
                proc.kill()
                proc.wait()


def _tree(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


@pytest.fixture
def fleet(queue_env: dict[str, str], tmp_path: Path) -> Iterator[Fleet]:
    crew = Fleet(queue_env, tmp_path)
    yield crew
    crew.stop()


def _job(redis_url: str, job_id: str) -> Job:
    return Job.fetch(job_id, connection=redis.Redis.from_url(redis_url))


def dense_source(path: Path, ffmpeg_bin: str) -> Path:
    """A source of many bytes that renders fast: the test pattern, losslessly coded (about 0.6 MB a second),
    with a key frame every 4 s, so a cut 2 s in reads some 2 MB of it, more than a small tmpfs holds."""
    lossless = {"size": "640x360", "duration": 8, "gop": 120, "strict_gop": False, "video_options": ("-qp", "0")}
    return testkit_media.source(path.parent, ffmpeg_bin, name=path.name, **lossless)


def small_disk_wrap(folder: Path, size: str) -> list[str]:
    """A command prefix that runs the worker in a private mount namespace with ``folder`` a tmpfs of ``size``
    (its temp and source cache folders go under it: ``small_disk_env``). Fails under CI when no namespace can be
    made, skips otherwise."""
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed for the full-disk cases")
    folder.mkdir(exist_ok=True)
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f'mount -t tmpfs -o size={size} tmpfs "{folder}"'],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"could not mount a small tmpfs in a private namespace: {probe.stderr}")
        pytest.skip(f"no private mount namespace here: {probe.stderr.strip()}")
    script = f'mount -t tmpfs -o size={size} tmpfs "{folder}" && mkdir "{folder}/tmp" "{folder}/cache" && exec "$@"'
    return ["unshare", "-rm", "sh", "-c", script, "worker"]


def small_disk_env(folder: Path) -> dict[str, str]:
    return {"TMPDIR": str(folder / "tmp"), "QUOTECLIP_CACHE_DIR": str(folder / "cache")}


def _families(redis_url: str, settings: Settings) -> dict[str, dict[tuple[str, ...], float]]:
    from jobs.connection import bulk_queue_name
    from jobs.metrics import QueueCollector

    collector = QueueCollector(redis.Redis.from_url(redis_url), (settings.queue_name, bulk_queue_name(settings)))
    return {family.name: {tuple(s.labels.values()): s.value for s in family.samples} for family in collector.collect()}


def test_a_worker_on_a_full_disk_hands_its_job_back_and_takes_no_other(
    fleet, queue_env, http_source, redis_url, tmp_path, ffmpeg_bin
) -> None:
    """The fault run's full disk: a worker whose source cache and temp folder fill up mid-job. The job goes back
    to the queue, at its front, with all its attempts; the worker says why it is unhealthy (its status in Redis,
    ``quoteclip health``, ``/metrics``) and takes no other job; a healthy worker renders every clip."""
    dense_source(http_source.root / "dense.mp4", ffmpeg_bin)
    small = tmp_path / "small"
    # its checks pass at first (1.5 MB free, 1 MB needed for a 1 s clip); the source's blocks fill it mid-job
    fleet.start(
        "sick",
        {**small_disk_env(small), "QUOTECLIP_MIN_FREE_MB": "0", "QUOTECLIP_SICK_PAUSE": "600"},
        wrap=small_disk_wrap(small, "1536k"),
    )
    settings = Settings.from_env(queue_env)
    spec = build_spec({"source": http_source.url("dense.mp4"), "start": 3, "end": 4, "caption": "full disk"})
    first = enqueue_clip(spec, settings).job_id
    try:
        wait_for(lambda: _job(redis_url, first).meta.get("handbacks") == 1, 90, "the sick worker to hand its job back")
    except RuntimeError:
        raise AssertionError(f"{job_status(first, settings)}\n{fleet.log('sick')[-3000:]}") from None
    job = _job(redis_url, first)
    assert job_status(first, settings)["status"] == "queued" and job.retries_left == ATTEMPTS  # no attempt spent
    assert "No space left on device" in job.meta["last_lost"] or "free" in job.meta["last_lost"], job.meta
    conn = redis.Redis.from_url(redis_url)
    assert conn.lpos(f"rq:queue:{settings.queue_name}", first) == 0  # back at the front of the queue

    from conftest import run_cli

    wait_for(lambda: _families(redis_url, settings)["quoteclip_worker_unhealthy"][("disk",)] == 1, 10, "the gauge")
    shown = run_cli("health", "--json", env=queue_env)
    assert shown.returncode == 0, shown.stderr  # this machine (the test's) is healthy; the sick worker is listed
    health = json.loads(shown.stdout)
    assert health["machine"] == "ok" and [w["reason"] for w in health["workers"]["unhealthy"]] == ["disk"]
    assert "worker sick" in shown.stderr and "takes no job (disk)" in shown.stderr
    families = _families(redis_url, settings)
    assert families["quoteclip_handbacks"][("disk",)] == 1 and families["quoteclip_workers"][("unhealthy",)] == 1

    fleet.start("healthy")
    more = [
        enqueue_clip(build_spec({"source": http_source.url("dense.mp4"), "start": s, "end": s + 1}), settings).job_id
        for s in (1, 5)
    ]
    for job_id in [first, *more]:
        wait_for(lambda j=job_id: job_status(j, settings)["status"] == "finished", 120, f"{job_id} to finish")
        assert _job(redis_url, job_id).worker_name == "healthy"
    assert fleet.log("sick").count(": quoteclip: ") == 1  # it dequeued the one job, and no other
    assert fleet.procs["sick"].poll() is None  # and it lives on, waiting to be healthy again


class Receiver:
    """A loopback webhook receiver that keeps what it is sent."""

    def __init__(self) -> None:
        calls = self.calls = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                calls.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.close()


def test_an_input_that_kills_every_worker_it_meets_fails_at_the_death_cap(
    fleet, queue_env, media, redis_url, hook, workers, tmp_path, ffmpeg_bin
) -> None:
    """An ffmpeg run that takes its work-horse down (as an input blowing up memory gets it OOM-killed): each
    death hands the job back without spending an attempt, and at ``QUOTECLIP_MAX_DEATHS`` the job fails, saying
    why, its webhook sent; the worker itself lives on."""
    runs = tmp_path / "renders.log"
    killer = tmp_path / "ffmpeg-killer"
    killer.write_text(
        f'#!/bin/sh\ncase " $* " in *" -version "*) exec "{ffmpeg_bin}" "$@" ;; esac\n'
        f'echo run >> "{runs}"\nkill -KILL $PPID\nsleep 5\n'
    )
    killer.chmod(0o755)
    env = {"FFMPEG_BINARY": str(killer), "QUOTECLIP_MAX_DEATHS": "2"}
    fleet.start("mortal", env)
    settings = Settings.from_env(queue_env)
    spec = build_spec({"source": str(media(size="320x180", duration=4, gop=60)), "start": 1, "end": 2})
    job_id = enqueue_clip(spec, settings, callback_url=hook.url).job_id
    wait_for(lambda: job_status(job_id, settings)["status"] == "failed", 60, "the job to fail")
    status = job_status(job_id, settings)
    assert status["error"].startswith("worker lost: the job's worker died 2 times"), status
    assert len(runs.read_text().splitlines()) == 2  # two deaths, then no more tries
    assert _job(redis_url, job_id).meta["deaths"] == 2
    assert fleet.procs["mortal"].poll() is None  # the worker lost two horses, not its life
    workers.burst(1, webhooks=True)
    assert [(c["status"], c["error"]) for c in hook.calls] == [("failed", status["error"])]


BROKEN_GLYPHS = 0x7F  # glyph outlines of this byte: FreeType refuses to draw them ("invalid outline")


def broken_font() -> bytes:
    """The default font with its glyph outlines overwritten: its character map reads (the upload's check
    passes), but FreeType raises OSError when it draws a caption with it."""
    from quoteclip.fonts import default_font_path

    data = bytearray(default_font_path().read_bytes())
    for n in range(struct.unpack(">H", data[4:6])[0]):
        tag, _, offset, length = struct.unpack(">4sIII", data[12 + 16 * n : 28 + 16 * n])
        if tag == b"glyf":
            data[offset : offset + length] = bytes([BROKEN_GLYPHS]) * length
    return bytes(data)


def undecodable_png() -> bytes:
    """A PNG whose chunks and checksums are sound (the upload's check passes) but whose pixels do not inflate:
    the watermark's load fails, naming the file, which on a worker lies in the job's temp folder."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGBA", (64, 64), (255, 0, 0, 255)).save(out, "PNG")
    png, at = bytearray(out.getvalue()), 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        if png[at + 4 : at + 8] == b"IDAT":
            png[at + 10 : at + 8 + length] = b"\x13" * (length - 2)
            crc = zlib.crc32(bytes(png[at + 4 : at + 8 + length]))
            png[at + 8 + length : at + 12 + length] = struct.pack(">I", crc)
        at += 12 + length
    return bytes(png)


def test_unexpected_errors_fail_once_and_errors_never_show_a_worker_path(
    queue_env, media, http_source, workers, hook, redis_url
) -> None:
    """Through the API: a font FreeType cannot draw (its OSError) fails its job at the first try as an internal
    error, not retried as if transient; a logo that will not decode fails as bad input. Neither the status nor
    the webhook names a path of the worker (its temp folder held the uploaded files)."""
    from fastapi.testclient import TestClient

    from api import create_app

    (http_source.root / "ep.mp4").symlink_to(media(size="320x180", duration=6, gop=60))
    client = TestClient(create_app(Settings.from_env(queue_env)), follow_redirects=False)
    font = client.post("/assets", content=broken_font())
    logo = client.post("/assets", content=undecodable_png())
    assert font.status_code == logo.status_code == 201, (font.text, logo.text)
    base = {"source": http_source.url("ep.mp4"), "start": 1, "end": 2, "callback_url": hook.url}
    drawn = client.post("/clips", json={**base, "caption": "Hello", "font": font.json()["id"]}).json()
    marked = client.post("/clips", json={**base, "watermark": {"logo": logo.json()["id"]}}).json()
    workers.burst(1)  # a retried job would still be scheduled when the burst ends: none may be
    workers.burst(1, webhooks=True)
    statuses = {j["id"]: client.get(f"/clips/{j['id']}").json() for j in (drawn, marked)}
    assert statuses[drawn["id"]]["status"] == "failed", statuses
    assert statuses[drawn["id"]]["error"].startswith("internal error: OSError (invalid outline)"), statuses
    assert statuses[marked["id"]]["error"].startswith("bad input: watermark.logo is not a readable PNG"), statuses
    job = _job(redis_url, drawn["id"])
    assert job.retries_left == 0 and len(job.results()) == 1  # one try, failed
    said = {c["id"]: c["error"] for c in hook.calls}
    assert said == {j: s["error"] for j, s in statuses.items()}
    for error in said.values():
        assert queue_env["TMPDIR"] not in error and "/tmp" not in error and "quoteclip-" not in error, error


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _horse_and_ffmpeg(worker_pid: int) -> list[psutil.Process]:
    """A worker's work-horse (its child running ffmpeg) and that ffmpeg."""
    for child in _tree(worker_pid):
        try:
            below = child.children(recursive=True)
            if any("ffmpeg" in " ".join(p.cmdline()) for p in below):
                return [child, *below]
        except psutil.Error:
            continue
    return []


def long_render(media, caption: str, end: float = 9, length: int = 20):  # type: ignore[no-untyped-def]
    return build_spec(
        {
            "source": str(media(size="1280x720", duration=length, gop=300)),
            "start": 1,
            "end": end,
            "fit": "blur",
            "caption": caption,
        }
    )


@pytest.mark.slow
def test_a_killed_workers_job_runs_again_within_30_s(fleet, queue_env, media, redis_url) -> None:
    """A worker SIGKILLed mid-render (its work-horse and ffmpeg die with it): another worker sees its lease
    lapse and hands the job back, and the job runs again within 30 s, none of its attempts spent (its death is
    counted apart). Three kills, with the default lease."""
    settings = Settings.from_env(queue_env)
    names = iter(f"w{n}" for n in range(10))
    for name in (next(names), next(names)):
        fleet.start(name)
    took: list[float] = []
    for n in range(3):
        job_id = enqueue_clip(long_render(media, f"kill {n}"), settings).job_id
        wait_for(lambda j=job_id: job_status(j, settings)["stage"] == "rendering", 60, "the render to start")
        victim = str(_job(redis_url, job_id).worker_name)
        wait_for(lambda v=victim: bool(_horse_and_ffmpeg(fleet.procs[v].pid)), 30, "the horse's ffmpeg")
        tree, horse = _tree(fleet.procs[victim].pid), _horse_and_ffmpeg(fleet.procs[victim].pid)
        fleet.kill(victim)
        killed = time.monotonic()
        wait_for(lambda h=horse: not any(_alive(p) for p in h), 10, "the horse and its ffmpeg to die with it")

        def again(j: str = job_id, v: str = victim) -> bool:
            job = _job(redis_url, j)
            return job.get_status() == "started" and job.worker_name not in (None, v)

        wait_for(again, 60, "the job to run again")
        took.append(time.monotonic() - killed)
        for orphan in tree:  # rq's scheduler process outlives a killed worker: not ours to keep
            if _alive(orphan):
                with contextlib.suppress(psutil.NoSuchProcess):  # (ended since it was looked at)
                    orphan.kill()
        job = _job(redis_url, job_id)
        assert job.retries_left == ATTEMPTS and job.meta["deaths"] == 1, (job.retries_left, job.meta)
        fleet.start(next(names))  # the orchestrator replaces the dead worker
        wait_for(lambda j=job_id: job_status(j, settings)["status"] == "finished", 120, "the job to finish")
    print(
        f"\nkilled worker's job running again after {', '.join(f'{t:.1f}' for t in took)} s: "
        f"p50 {statistics.median(took):.1f} s, max {max(took):.1f} s ({len(took)} kills, lease "
        f"{settings.worker_lease:.0f} s)"
    )
    assert max(took) <= 30, took


def _rendering(fleet, name: str, settings: Settings, media, extra: dict[str, str], progress: int, end: float) -> str:  # type: ignore[no-untyped-def]
    job_id = enqueue_clip(long_render(media, f"stop {name}", end=end, length=60), settings).job_id
    fleet.start(name, extra)

    def far_enough() -> bool:
        status = job_status(job_id, settings)
        return status["stage"] == "rendering" and status["progress"] >= progress

    wait_for(far_enough, 90, f"the render to reach {progress}%")
    return job_id


@pytest.mark.slow
def test_sigterm_hands_back_at_once_a_render_that_would_not_end_within_the_grace(
    fleet, queue_env, media, redis_url
) -> None:
    """SIGTERM (an autoscaler's scale-down) early in a long render (54 s of 720p), with 5 s of grace: its
    estimated time left is over the grace, so the job goes back to the front of the queue at once, its attempts
    all there, and the worker exits; no ffmpeg and no temp folder are left; another worker takes it and renders
    it from the start (followed to 10 %: the rest of the render proves nothing more here)."""
    settings = Settings.from_env(queue_env)
    job_id = _rendering(fleet, "scaled-down", settings, media, {"QUOTECLIP_SHUTDOWN_GRACE": "5"}, 10, end=55)
    horse = _horse_and_ffmpeg(fleet.procs["scaled-down"].pid)
    told = time.monotonic()
    fleet.procs["scaled-down"].send_signal(signal.SIGTERM)
    wait_for(lambda: job_status(job_id, settings)["status"] == "queued", 10, "the job to be handed back")
    handed = time.monotonic() - told
    fleet.procs["scaled-down"].wait(timeout=30)
    exited = time.monotonic() - told
    assert handed < 2.5, f"handed back {handed:.1f} s after SIGTERM: not at once"  # (the grace ends at 5 s)
    assert fleet.procs["scaled-down"].returncode == 0, fleet.log("scaled-down")[-2000:]
    job = _job(redis_url, job_id)
    assert job.retries_left == ATTEMPTS and job.meta["stops"] == 1 and "deaths" not in job.meta, job.meta
    assert redis.Redis.from_url(redis_url).lpos(f"rq:queue:{settings.queue_name}", job_id) == 0
    assert not any(_alive(p) for p in horse) and not list(Path(queue_env["TMPDIR"]).glob("quoteclip-*"))
    print(f"\nSIGTERM mid-render: job handed back after {handed:.2f} s, worker exited after {exited:.2f} s")
    fleet.start("next")

    def rendered_by_next() -> bool:
        status = job_status(job_id, settings)
        return (
            status["stage"] == "rendering"
            and status["progress"] >= 10
            and _job(redis_url, job_id).worker_name == "next"
        )

    wait_for(rendered_by_next, 120, "another worker to render it")


@pytest.mark.slow
def test_sigterm_lets_a_render_that_ends_within_the_grace_finish(fleet, queue_env, media, redis_url) -> None:
    """SIGTERM a third into a shorter render (18 s of 720p), with 60 s of grace: it should end well within, so it
    finishes, and the worker exits after it without taking another job."""
    settings = Settings.from_env(queue_env)
    job_id = _rendering(fleet, "finisher", settings, media, {"QUOTECLIP_SHUTDOWN_GRACE": "60"}, 30, end=19)
    other = enqueue_clip(long_render(media, "next in line"), settings).job_id
    fleet.procs["finisher"].send_signal(signal.SIGTERM)
    fleet.procs["finisher"].wait(timeout=90)
    assert fleet.procs["finisher"].returncode == 0
    assert job_status(job_id, settings)["status"] == "finished"
    assert "stops" not in _job(redis_url, job_id).meta
    assert job_status(other, settings)["status"] == "queued"  # no new job after SIGTERM


CONNECTION_ERRORS = ("could not connect to Redis", "Connection refused", "lost Redis", "Error 111")


@pytest.mark.slow
def test_one_ctrl_c_stops_up_in_order_within_5_s(media, http_source, tmp_path) -> None:
    """Ctrl-C in the terminal (SIGINT to ``quoteclip up``'s whole process group) during a render: the API stops,
    then the workers hand their jobs back, then the embedded Redis; ``up`` exits within 5 s with no connection
    errors, and the job waits in the (persisted) queue with its attempts all there."""
    import urllib.request

    from quoteclip import embedded

    (http_source.root / "ep.mp4").symlink_to(media(size="1280x720", duration=20, gop=300))
    store = tmp_path / "clips"
    with open(tmp_path / "up.log", "wb") as log:
        up, base = start_up(tmp_path, stdout=log, stderr=subprocess.STDOUT, process_group=0)

    def get(path: str) -> dict[str, object]:
        with urllib.request.urlopen(base + path, timeout=5) as resp:
            return dict(json.loads(resp.read()))

    try:
        wait_for(lambda: answers(base), 60, "quoteclip up to answer")
        body = {"source": http_source.url("ep.mp4"), "start": 1, "end": 19, "fit": "blur"}
        request = urllib.request.Request(
            base + "/clips", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            job_id = str(json.loads(resp.read())["id"])
        wait_for(lambda: get(f"/clips/{job_id}")["stage"] == "rendering", 60, "the render to start")
        children = _tree(up.pid)
        os.killpg(up.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        began = time.monotonic()
        up.wait(timeout=60)
        took = time.monotonic() - began
    finally:
        if up.poll() is None:
            for child in _tree(up.pid):
                child.kill()
            up.kill()
            up.wait()
    said = (tmp_path / "up.log").read_text(errors="replace")
    errors = [line for line in said.splitlines() if any(e in line for e in CONNECTION_ERRORS)]
    print(f"\nquoteclip up stopped {took:.2f} s after one Ctrl-C, {len(errors)} connection-error lines")
    assert took < 5, said[-3000:]
    assert not errors, errors
    assert up.returncode == 0 and "Traceback" not in said, said[-3000:]
    # the server, the API, the workers, the horse: all gone
    wait_for(lambda: not any(_alive(c) for c in children), 10, f"up's children to exit: {children}")
    server = embedded.start(embedded.data_dir(store.resolve()), persist=True)  # the queue as it was left
    try:
        job = Job.fetch(job_id, connection=redis.Redis.from_url(server.url))
        assert job.get_status() == "queued" and job.retries_left == ATTEMPTS and job.meta["stops"] == 1, job.meta
    finally:
        server.stop()


def _private_redis(folder: Path) -> tuple[list[subprocess.Popen[bytes]], str]:
    """A redis-server of the test's own (the embedded Valkey on a machine without one), persisting every write
    (AOF, fsync always): killed and started again, it holds the queue as it was."""
    from quoteclip import embedded

    binary = shutil.which("redis-server") or embedded.server_binary()
    assert binary is not None
    port = free_port()
    folder.mkdir()
    argv = [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(folder)]
    argv += ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
    procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    url = f"redis://127.0.0.1:{port}/0"

    def answers() -> bool:
        try:
            return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
        except redis.RedisError:
            return False

    wait_for(answers, 10, "redis")
    procs.append(argv)  # type: ignore[arg-type]  (how to start it again)
    return procs, url


def _first_death(url: str, worker: str) -> bool:
    """Whether the job ``worker`` runs has not lost a worker yet (the fault run kills no job's worker twice:
    the death cap is another test's)."""
    from rq.registry import StartedJobRegistry

    try:
        conn = redis.Redis.from_url(url)
        for name in ("quoteclip", "quoteclip-bulk"):
            for job_id in StartedJobRegistry(name, connection=conn).get_job_ids(cleanup=False):
                job = Job.fetch(job_id, connection=conn)
                if job.worker_name == worker:
                    return not job.meta.get("deaths")
    except Exception:  # noqa: BLE001  (Redis restarting, or the job just ended: not now)
        return False
    return False


def _statuses(job_ids: list[str], settings: Settings) -> dict[str, str]:
    try:
        return {j: str(job_status(j, settings)["status"]) for j in job_ids}
    except redis.RedisError:
        return {}  # Redis restarting


KILL_EVERY = 4  # seconds between the fault run's kills of busy workers (the first 2 s in; four at most)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fault_run_a_fleet_fails_and_loses_no_clip(fleet, queue_env, s3, http_source, tmp_path, ffmpeg_bin) -> None:
    """The fault run: 30 clips through four workers, one of them on a full disk (a 1.8 MB tmpfs holding its temp
    and source cache folders), while busy workers are SIGKILLed every few seconds (and replaced) and Redis is killed and
    started again. Every clip finishes, none fails, and the store holds one object for each."""
    procs, url = _private_redis(tmp_path / "redis-aof")
    server, argv = procs[0], procs[1]
    env = {**queue_env, **s3.env(), "QUOTECLIP_REDIS_URL": url}
    fleet.env.update(env)
    settings = Settings.from_env(env)
    dense_source(http_source.root / "dense.mp4", ffmpeg_bin)
    small = tmp_path / "small"
    fleet.start("sick", {**small_disk_env(small), "QUOTECLIP_MIN_FREE_MB": "0.5"}, wrap=small_disk_wrap(small, "1800k"))
    names = iter(f"healthy-{n}" for n in range(20))
    for _ in range(3):
        fleet.start(next(names))
    job_ids = [
        enqueue_clip(
            build_spec(
                {"source": http_source.url("dense.mp4"), "start": 2 + n % 3, "end": 3 + n % 3, "caption": f"{n}"}
            ),
            settings,
        ).job_id
        for n in range(30)
    ]
    began = time.monotonic()
    kills: list[str] = []
    restarted = False
    last_kill = began
    statuses: dict[str, str] = {}
    try:
        while time.monotonic() - began < 300:
            statuses = _statuses(job_ids, settings) or statuses
            if statuses and all(s in ("finished", "failed") for s in statuses.values()):
                break
            now = time.monotonic()
            if not restarted and now - began > 10:  # Redis SIGKILLed mid-run and started again
                server.kill()
                server.wait()
                time.sleep(1.0)
                server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                restarted = True
            elif now - last_kill > (KILL_EVERY if kills else 2) and len(kills) < 4:  # a busy worker SIGKILLed
                busy = [
                    n
                    for n, p in fleet.procs.items()
                    if n != "sick" and p.poll() is None and _horse_and_ffmpeg(p.pid) and _first_death(url, n)
                ]
                if busy:
                    victim = busy[0]
                    for proc in [*_tree(fleet.procs[victim].pid)]:
                        with contextlib.suppress(psutil.NoSuchProcess):  # (ended since it was listed)
                            proc.kill()
                    fleet.kill(victim)
                    kills.append(victim)
                    last_kill = now
                    fleet.start(next(names))
            time.sleep(0.2)
        took = time.monotonic() - began
        conn = redis.Redis.from_url(url)
        failed = {j: job_status(j, settings)["error"] for j, s in statuses.items() if s != "finished"}
        assert not failed and len(statuses) == 30, failed or statuses
        keys = [o["Key"] for o in s3.client().list_objects_v2(Bucket=s3.bucket, Prefix="clips/").get("Contents", [])]
        clips = sorted(k.removeprefix("clips/").removesuffix(".mp4") for k in keys if k.endswith(".mp4"))
        assert clips == sorted(j.removeprefix("clip-") for j in job_ids)  # one object each
        sick = {k.decode(): v.decode() for k, v in conn.hgetall("quoteclip:worker:sick").items()}
        handed = {k.decode(): int(v) for k, v in conn.hgetall("quoteclip:metrics:handbacks").items()}
        assert sick.get("state") == "unhealthy" and sick.get("reason") == "disk", sick
        assert handed.get("disk", 0) >= 1 and handed.get("worker died", 0) >= 1, handed
        assert restarted and len(kills) >= 2, kills
        print(
            f"\nfault run: 30 of 30 clips finished, 0 failed, 30 objects in {took:.0f} s; workers SIGKILLed: "
            f"{len(kills)}, Redis restarted once; handed back: {dict(sorted(handed.items()))}; the sick worker: "
            f"{sick['detail']}"
        )
    finally:
        fleet.stop()
        server.kill()
        server.wait()


OUTAGE = 6.0  # seconds Redis is away: longer than a job's heartbeat interval (5 s), shorter than a lease (15 s)


@pytest.mark.slow
def test_a_render_goes_on_through_a_redis_restart(fleet, queue_env, media, tmp_path, ffmpeg_counter) -> None:
    """Redis SIGKILLed and started again (AOF) in the middle of a render: the work-horse renders on (its progress
    writes are skipped while Redis is away) and the worker keeps its name, its lease and its horse. The clip is
    rendered once, with no attempt spent and no death counted, and rq says finished within seconds of Redis's
    return (a horse that ended while Redis was away has its job handed back, which then finds the clip stored)."""
    procs, url = _private_redis(tmp_path / "redis-aof")
    server, argv = procs[0], procs[1]
    fleet.env["QUOTECLIP_REDIS_URL"] = url
    settings = Settings.from_env({**queue_env, "QUOTECLIP_REDIS_URL": url})
    try:
        job_id = enqueue_clip(long_render(media, "through a restart", end=19), settings).job_id
        fleet.start("steady")
        wait_for(lambda: job_status(job_id, settings)["stage"] == "rendering", 60, "the render to start")
        server.kill()
        server.wait()
        time.sleep(OUTAGE)
        server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        back = time.monotonic()

        def finished() -> bool:
            try:
                return Job.fetch(job_id, connection=redis.Redis.from_url(url)).get_status() == "finished"
            except redis.RedisError:
                return False

        wait_for(finished, 60, "rq to say the clip finished")
        took = time.monotonic() - back
        job = Job.fetch(job_id, connection=redis.Redis.from_url(url))
        _, runs = ffmpeg_counter
        assert len(runs.read_text().splitlines()) == 1  # rendered once
        assert job.retries_left == ATTEMPTS and "deaths" not in job.meta, (job.retries_left, job.meta)
        assert "reconnecting" not in fleet.log("steady")  # the worker's loop never ended: same name, same lease
        assert took < 20, f"finished {took:.1f} s after Redis came back"
        print(
            f"\nRedis away {OUTAGE:.0f} s mid-render: finished {took:.1f} s after its return "
            f"({'handed back once, then found stored' if job.meta.get('unsettled') else 'the horse was heard'})"
        )
    finally:
        fleet.stop()
        server.kill()
        server.wait()


class ReasonPhrases:
    """A loopback site that answers every request 404 with a reason phrase naming a system error."""

    def __init__(self, phrase: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self.send_response(404, phrase)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_no_request_decides_a_worker_is_sick(fleet, queue_env, http_source, media, redis_url) -> None:
    """Errors whose words name a system error, from a URL's path and from a page's reason phrase (yt-dlp passes it
    through), fail their jobs with their reasons at once: no hand-back, the worker stays healthy and renders the
    next clip without a pause. (A worker that took them for its machine's paused 30 s per request.)"""
    from quoteclip import redis_keys

    (http_source.root / "ep.mp4").symlink_to(media(size="320x180", duration=4, gop=30))
    site = ReasonPhrases("Cannot allocate memory")
    try:
        fleet.start("w", {"QUOTECLIP_SICK_PAUSE": "600"})
        settings = Settings.from_env(queue_env)
        bad = [
            enqueue_clip(build_spec({"source": url, "start": 1, "end": 2}), settings).job_id
            for url in (http_source.url("No space left on device.mp4"), f"{site.base}/watch?v=ENOMEM")
        ]
        for job_id in bad:
            wait_for(lambda j=job_id: job_status(j, settings)["status"] == "failed", 60, f"{job_id} to fail")
        good = enqueue_clip(build_spec({"source": http_source.url("ep.mp4"), "start": 1, "end": 2}), settings)
        wait_for(lambda: job_status(good.job_id, settings)["status"] == "finished", 30, "the next clip to finish")
    finally:
        site.close()
    conn = redis.Redis.from_url(redis_url)
    assert conn.hget(redis_keys.worker("w"), "state") == b"healthy", fleet.log("w")[-2000:]
    for job_id in bad:
        status = job_status(job_id, settings)
        assert status["error"].startswith("source"), status
        assert "handbacks" not in _job(redis_url, job_id).meta, status
