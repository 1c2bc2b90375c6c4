"""Faults with real Redis, SeaweedFS, worker processes and ffmpeg: a killed work-horse, storage going away
during an upload, a Redis restart in the middle of a batch, a full disk, and a burst of 200 requests."""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from mediacheck import streams

from jobs.queue import enqueue_clip, job_status
from quoteclip import embedded
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from testkit.services import free_port, wait_for

pytestmark = pytest.mark.slow


class Switch:
    """A loopback TCP forwarder that can be turned off (connections refused, open ones cut) and on again."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.up = True
        self.conns: list[socket.socket] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.up:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self.conns += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while self.up:
                ready, _, _ = select.select([a, b], [], [], 0.2)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    (b if sock is a else a).sendall(data)
        except OSError:
            pass
        finally:
            a.close()
            b.close()

    def down(self) -> None:
        self.up = False
        for conn in self.conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.down()
        self.listener.close()


def long_spec(media) -> object:  # type: ignore[no-untyped-def]
    return build_spec(
        {"source": str(media(size="1280x720", duration=20, gop=300)), "start": 1, "end": 14, "fit": "blur"}
    )


def ffmpegs(horse: psutil.Process) -> list[psutil.Process]:
    """The ffmpeg processes a work-horse started (ffmpeg runs in its own session, but is still its child)."""
    try:
        return [c for c in horse.children(recursive=True) if "ffmpeg" in " ".join(c.cmdline())]
    except psutil.Error:
        return []


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def ffmpeg_running(tmpdir: str) -> bool:
    return any(tmpdir in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"]))


@pytest.fixture
def worker_proc(workers) -> Iterator[subprocess.Popen[str]]:
    proc = workers.start(burst=False)
    yield proc
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
    if proc.stdout:
        proc.stdout.close()


def test_killed_work_horse_is_retried_and_leaves_nothing(media, queue_env, worker_proc) -> None:
    settings = Settings.from_env(queue_env)
    spec = long_spec(media)
    job_id = enqueue_clip(spec, settings).job_id  # type: ignore[arg-type]
    wait_for(lambda: job_status(job_id, settings)["stage"] == "rendering", 60, "the render to start")
    # The work-horse is the worker's child that runs ffmpeg (another child is rq's scheduler).
    wait_for(lambda: any(ffmpegs(c) for c in psutil.Process(worker_proc.pid).children()), 30, "the horse's ffmpeg")
    horse = next(c for c in psutil.Process(worker_proc.pid).children() if ffmpegs(c))
    renders = ffmpegs(horse)
    horse.send_signal(signal.SIGKILL)  # as the kernel's OOM killer would
    wait_for(lambda: not any(_alive(p) for p in renders), 10, "ffmpeg to die with its work-horse")
    wait_for(lambda: job_status(job_id, settings)["status"] == "finished", 120, "the retried job to finish")
    clips = list(Path(queue_env["QUOTECLIP_STORAGE_DIR"]).glob("*.mp4"))
    assert len(clips) == 1 and not list(Path(queue_env["QUOTECLIP_STORAGE_DIR"]).glob(".incoming-*"))
    # The worker goes on taking jobs, and leaves no temp folders or ffmpeg behind.
    other = build_spec({"source": spec.source, "start": 2, "end": 3})  # type: ignore[attr-defined]
    second = enqueue_clip(other, settings).job_id
    wait_for(lambda: job_status(second, settings)["status"] == "finished", 60, "the next job")
    wait_for(lambda: not list(Path(queue_env["TMPDIR"]).glob("quoteclip-*")), 10, "temp folders to go")
    assert not ffmpeg_running(queue_env["TMPDIR"])


def test_storage_down_during_upload_then_back(media, queue_env, s3, workers, tmp_path) -> None:
    endpoint_port = int(s3.endpoint.rsplit(":", 1)[1])
    switch = Switch(endpoint_port)
    try:
        queue_env.update(s3.env())
        queue_env["QUOTECLIP_S3_ENDPOINT"] = f"http://127.0.0.1:{switch.port}"
        workers.env = queue_env
        settings = Settings.from_env(queue_env)
        spec = long_spec(media)
        job_id = enqueue_clip(spec, settings).job_id  # type: ignore[arg-type]
        proc = workers.start(burst=False)
        try:
            wait_for(lambda: job_status(job_id, settings)["stage"] == "rendering", 60, "the render")
            switch.down()  # the store goes away while the clip renders: the upload fails
            wait_for(
                lambda: job_status(job_id, settings)["status"] in ("scheduled", "queued", "failed"),
                120,
                "the upload to fail",
            )
            assert job_status(job_id, settings)["status"] != "failed"  # transient: retried, not failed
            switch.up = True
            wait_for(lambda: job_status(job_id, settings)["status"] == "finished", 120, "the retry to finish")
        finally:
            proc.terminate()
            proc.communicate(timeout=30)
        # The object that landed is the whole clip (no partial upload was left to stand in for it), and no
        # unfinished multipart upload lingers.
        client = s3.client()
        key = f"clips/{job_id.removeprefix('clip-')}.mp4"
        stored = tmp_path / "stored.mp4"
        client.download_file(s3.bucket, key, str(stored))
        assert abs(streams(stored)["duration"] - spec.duration) < 0.1  # type: ignore[attr-defined]
        assert not client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads")
    finally:
        switch.close()


@pytest.mark.timeout(600)
def test_redis_restart_during_a_batch_loses_nothing(media, tmp_path, workers, queue_env) -> None:
    binary = shutil.which("redis-server") or embedded.server_binary()  # the embedded Valkey on a fresh machine
    assert binary is not None
    port = free_port()
    folder = tmp_path / "redis-aof"
    folder.mkdir()

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--dir",
                str(folder),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    redis_proc = start()
    url = f"redis://127.0.0.1:{port}/0"
    import redis

    wait_for(lambda: _ping(redis, url), 10, "redis")
    queue_env["QUOTECLIP_REDIS_URL"] = url
    queue_env["QUOTECLIP_MAINTENANCE_INTERVAL"] = "5"
    workers.env = queue_env
    settings = Settings.from_env(queue_env)
    src = str(media(size="640x360", duration=12, gop=60))
    ids = [
        enqueue_clip(build_spec({"source": src, "start": s, "end": s + 1.5}), settings, bulk=True).job_id
        for s in range(8)
    ]
    proc = workers.start(burst=False)
    try:
        wait_for(lambda: sum(job_status(i, settings)["status"] == "finished" for i in ids) >= 1, 60, "a clip")
        redis_proc.send_signal(signal.SIGKILL)
        redis_proc.wait()
        time.sleep(1.0)  # the outage's length (the workers meet a Redis that is down), not a wait for an event
        redis_proc = start()
        wait_for(lambda: _ping(redis, url), 10, "redis again")
        try:
            wait_for(lambda: all(job_status(i, settings)["status"] == "finished" for i in ids), 240, "every clip")
        except RuntimeError:
            statuses = [(i[-6:], job_status(i, settings)["status"], job_status(i, settings)["error"]) for i in ids]
            proc.terminate()
            out, _ = proc.communicate(timeout=30)
            raise AssertionError(f"{statuses}\n{out[-3000:]}") from None
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.communicate(timeout=30)
        redis_proc.terminate()
        redis_proc.wait()


def test_job_events_subscribe_again_after_a_redis_restart(tmp_path, monkeypatch) -> None:
    """The API's subscription to the workers' announcements (api/events.py) comes back after Redis restarts
    (long-polls look every 50 ms meanwhile), and an announcement then wakes a waiting long-poll again."""
    import asyncio
    import contextlib

    import redis

    from api import events
    from quoteclip import redis_keys

    monkeypatch.setattr(events, "RETRY", 0.2)
    monkeypatch.setattr(events, "FALLBACK", 60.0)  # only the announcement can end the wait below in time
    binary = shutil.which("redis-server") or embedded.server_binary()
    assert binary is not None
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--dir",
                str(tmp_path),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    procs = [start()]
    wait_for(lambda: _ping(redis, url), 10, "redis")

    async def until(check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 10
        while not check():
            assert time.monotonic() < deadline, what
            await asyncio.sleep(0.02)

    async def scenario() -> float:
        job_events = events.JobEvents(url)
        listening = asyncio.create_task(job_events.listen())
        try:
            await until(lambda: job_events.subscribed, "subscribed")
            procs[0].kill()
            procs[0].wait()
            await until(lambda: not job_events.subscribed, "the lost subscription noticed")
            procs.append(start())
            await until(lambda: _ping(redis, url), "redis again")
            await until(lambda: job_events.subscribed, "subscribed again after the restart")
            async with job_events.watch("clip-" + "a" * 32) as watch:
                began = time.monotonic()
                with redis.Redis.from_url(url) as client:
                    client.publish(redis_keys.events("clip-" + "a" * 32), "rendering")
                await watch.changed(30)
                return time.monotonic() - began
        finally:
            listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listening

    try:
        took = asyncio.run(scenario())
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert took < 5, f"the announcement after the restart woke the long-poll only after {took:.1f} s"
    print(f"\nafter the Redis restart, an announcement woke the long-poll in {took * 1000:.1f} ms")  # RELIABILITY.md


def _ping(redis, url: str) -> bool:  # type: ignore[no-untyped-def]
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except (redis.RedisError, OSError, ValueError):
        return False


def test_full_disk_fails_cleanly(media, tmp_path) -> None:
    """A render whose temp folder is a 200 KB tmpfs: exit 1 naming the cause, nothing stored, nothing left
    behind. The tmpfs is mounted in a private mount namespace (``unshare``), so this runs without root too."""
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed for the full-disk case")
    small, store = tmp_path / "small-tmp", tmp_path / "clips"
    small.mkdir()
    src = media(size="640x360", duration=6, gop=60)
    script = (
        f'mount -t tmpfs -o size=200k tmpfs "{small}" && TMPDIR="{small}" exec "{sys.executable}" -m cli '
        f'render "{src}" --start 0 --end 5 --caption "a full disk" && echo'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUOTECLIP_")}
    env.update(QUOTECLIP_STORAGE_DIR=str(store), XDG_CACHE_HOME=str(tmp_path / "cache"))
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, env=env, timeout=120)
    if "mount" in done.stderr and done.returncode != 1:
        if os.environ.get("CI"):
            pytest.fail(f"could not mount a small tmpfs in a private namespace: {done.stderr}")
        pytest.skip(f"no private mount namespace here: {done.stderr.strip()}")
    assert done.returncode == 1, done.stderr
    line = done.stderr.strip().splitlines()[0]
    assert line.startswith("quoteclip: machine fault: ") and "No space left on device" in line, done.stderr
    assert "Traceback" not in done.stderr
    assert not (store.exists() and list(store.iterdir()))  # nothing stored
    assert not list(small.iterdir())  # (the namespace's tmpfs is gone; the folder under it was left empty)


def test_burst_of_requests_while_workers_render(media, queue_env, workers, ffmpeg_counter, redis_url) -> None:
    """10 clients ask for 20 distinct clips again and again while 2 workers render them: requests arriving while
    a clip is queued or rendering join its job, later ones get the stored clip's link; 20 renders in all, and
    every answer for one clip names the same job and (once stored) the same file."""
    import redis

    settings = Settings.from_env(queue_env)
    src = str(media(size="320x180", duration=25, gop=60))
    specs = [build_spec({"source": src, "start": s, "end": s + 1, "caption": f"clip {s}"}) for s in range(20)]
    answers: list[tuple[int, object]] = []
    lock = threading.Lock()
    procs = [workers.start(burst=False, name=f"burst-{i}-{os.getpid()}") for i in range(2)]

    def client(n: int) -> None:
        seen_stored: set[int] = set()
        deadline = time.monotonic() + 180
        k = 0
        while len(seen_stored) < 20 and time.monotonic() < deadline and k < 400:  # bounded in time and count
            i = (n + k) % 20
            got = enqueue_clip(specs[i], settings)
            with lock:
                answers.append((i, got))
            if got.link:
                seen_stored.add(i)
            k += 1
            time.sleep(0.02)

    try:
        threads = [threading.Thread(target=client, args=(n,)) for n in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for proc in procs:
            proc.terminate()
        logs = [proc.communicate(timeout=60)[0] for proc in procs]
    assert len(answers) >= 200
    by_clip: dict[int, list] = {i: [a for j, a in answers if j == i] for i in range(20)}
    for got in by_clip.values():
        assert len({a.job_id for a in got}) == 1  # type: ignore[attr-defined]
        links = {a.link for a in got if a.link}  # type: ignore[attr-defined]
        assert len(links) == 1, links  # every request for this clip got the one stored file
        assert Path(links.pop().removeprefix("file://")).is_file()
    joined_running = [a for _, a in answers if a.joined and a.status == "started"]  # type: ignore[attr-defined]
    assert joined_running, "no request arrived while its clip was rendering"
    stored = sum(1 for _, a in answers if a.link)  # type: ignore[attr-defined]
    print(
        f"\nburst: {len(answers)} requests for 20 clips from 10 threads while 2 workers rendered: "
        f"{len(joined_running)} joined a clip being rendered, {stored} got the stored clip's link"
    )
    _, log = ffmpeg_counter
    assert len(log.read_text().splitlines()) == 20  # exactly one render per distinct clip
    conn = redis.Redis.from_url(redis_url)
    persistent = [
        k
        for k in conn.scan_iter("*")
        if conn.ttl(k) == -1
        and not k.startswith((b"rq:queues", b"rq:queue:", b"quoteclip:metrics", b"rq:workers", b"rq:worker"))
    ]
    assert not [k for k in persistent if k.startswith((b"rq:job:", b"rq:results:", b"quoteclip:callbacks"))]
    assert all("Traceback" not in line for line in logs)


def test_killed_worker_job_is_picked_up_by_another(media, queue_env, workers) -> None:
    """The whole worker (and its work-horse) killed mid-job: another worker, started after the kill, sees the
    dead worker's lease lapse (15 s) and hands the job back; it renders it, and the client never sees "started"
    forever."""
    queue_env["QUOTECLIP_MAINTENANCE_INTERVAL"] = "5"
    workers.env = queue_env
    settings = Settings.from_env(queue_env)
    job_id = enqueue_clip(long_spec(media), settings).job_id  # type: ignore[arg-type]
    first = workers.start(burst=False)
    wait_for(lambda: job_status(job_id, settings)["stage"] == "rendering", 60, "the render")
    for proc in psutil.Process(first.pid).children(recursive=True) + [psutil.Process(first.pid)]:
        proc.kill()
    first.communicate(timeout=30)
    began = time.monotonic()
    second = workers.start(burst=False)
    try:
        wait_for(lambda: job_status(job_id, settings)["status"] == "finished", 300, "another worker to finish it")
    finally:
        second.terminate()
        second.communicate(timeout=60)
    took = time.monotonic() - began
    print(f"\nkilled worker's job finished by another worker after {took:.1f} s")  # RELIABILITY.md quotes it
    # The bound RELIABILITY.md documents: the lease (15 s) + a third of it until a live worker looks (5 s) + the
    # second worker's start and the render again (~15 s) + slack for the 2-core machine.
    assert took < 60, f"took {took:.1f} s, over the documented 60 s"
    assert not ffmpeg_running(queue_env["TMPDIR"])


def test_a_queued_job_popped_by_a_dying_worker_is_pushed_back(media, queue_env, redis_url) -> None:
    import redis
    from rq import Queue

    from jobs.queue import PENDING, requeue_lost

    settings = Settings.from_env(queue_env)
    spec = build_spec({"source": str(media(size="320x180", duration=4, gop=60)), "start": 1, "end": 2})
    job_id = enqueue_clip(spec, settings).job_id
    conn = redis.Redis.from_url(redis_url)
    queue = Queue(settings.queue_name, connection=conn)
    conn.lrem(queue.key, 1, job_id)  # popped by a worker that then died before starting it
    assert requeue_lost(conn) == []  # not yet: it may just be starting
    conn.zadd(PENDING, {job_id: time.time() - 600})
    assert requeue_lost(conn) == [job_id]
    assert job_id in queue.job_ids and job_status(job_id, settings)["status"] == "queued"
