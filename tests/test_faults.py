"""Faults with real Redis, SeaweedFS, worker processes and ffmpeg: a killed work-horse, storage going away
during an upload, a Redis restart in the middle of a batch, a full disk, and a burst of 200 requests."""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from jobs.queue import enqueue_clip, job_status
from quoteclip.devservices import free_port, wait_for
from quoteclip.settings import Settings
from quoteclip.spec import build_spec

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
    return build_spec({"source": str(media(size="1280x720", duration=20, gop=300)), "start": 1, "end": 14,
                       "fit": "blur"})  # fmt: skip


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
    horse = next(c for c in psutil.Process(worker_proc.pid).children() if "python" in c.name().lower())
    horse.send_signal(signal.SIGKILL)  # as the kernel's OOM killer would
    wait_for(lambda: not ffmpeg_running(queue_env["TMPDIR"]) or job_status(job_id, settings)["stage"] == "rendering",
               10, "ffmpeg to die with its work-horse")  # fmt: skip
    wait_for(lambda: job_status(job_id, settings)["status"] == "finished", 120, "the retried job to finish")
    clips = list(Path(queue_env["QUOTECLIP_STORAGE_DIR"]).glob("*.mp4"))
    assert len(clips) == 1 and not list(Path(queue_env["QUOTECLIP_STORAGE_DIR"]).glob(".incoming-*"))
    # The worker goes on taking jobs, and leaves no temp folders or ffmpeg behind.
    other = build_spec({"source": spec.source, "start": 2, "end": 3})  # type: ignore[attr-defined]
    second = enqueue_clip(other, settings).job_id
    wait_for(lambda: job_status(second, settings)["status"] == "finished", 60, "the next job")
    wait_for(lambda: not list(Path(queue_env["TMPDIR"]).glob("quoteclip-*")), 10, "temp folders to go")
    assert not ffmpeg_running(queue_env["TMPDIR"])


def test_storage_down_during_upload_then_back(media, queue_env, s3, workers) -> None:
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
            wait_for(lambda: job_status(job_id, settings)["status"] in ("scheduled", "queued", "failed"), 120,
                       "the upload to fail")  # fmt: skip
            assert job_status(job_id, settings)["status"] != "failed"  # transient: retried, not failed
            switch.up = True
            wait_for(lambda: job_status(job_id, settings)["status"] == "finished", 120, "the retry to finish")
        finally:
            proc.terminate()
            proc.communicate(timeout=30)
        objects = s3.client().list_objects_v2(Bucket=s3.bucket)["Contents"]
        assert [o["Key"] for o in objects].count(f"clips/{job_id.removeprefix('clip-')}.mp4") == 1
    finally:
        switch.close()


@pytest.mark.timeout(600)
def test_redis_restart_during_a_batch_loses_nothing(media, tmp_path, workers, queue_env) -> None:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not on PATH")
    port = free_port()
    folder = tmp_path / "redis-aof"
    folder.mkdir()

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen([binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(folder),
                                 "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip

    redis_proc = start()
    url = f"redis://127.0.0.1:{port}/0"
    import redis

    wait_for(lambda: _ping(redis, url), 10, "redis")
    queue_env["QUOTECLIP_REDIS_URL"] = url
    queue_env["QUOTECLIP_MAINTENANCE_INTERVAL"] = "5"
    workers.env = queue_env
    settings = Settings.from_env(queue_env)
    src = str(media(size="640x360", duration=12, gop=60))
    ids = [enqueue_clip(build_spec({"source": src, "start": s, "end": s + 1.5}), settings, bulk=True).job_id
           for s in range(8)]  # fmt: skip
    proc = workers.start(burst=False)
    try:
        wait_for(lambda: sum(job_status(i, settings)["status"] == "finished" for i in ids) >= 1, 60, "a clip")
        redis_proc.send_signal(signal.SIGKILL)
        redis_proc.wait()
        time.sleep(1.0)
        redis_proc = start()
        wait_for(lambda: _ping(redis, url), 10, "redis again")
        try:
            wait_for(lambda: all(job_status(i, settings)["status"] == "finished" for i in ids), 420, "every clip")
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


def _ping(redis, url: str) -> bool:  # type: ignore[no-untyped-def]
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except Exception:
        return False


def test_full_disk_fails_cleanly(media, settings, tmp_path) -> None:
    from jobs.pipeline import produce_clip
    from quoteclip.errors import QuoteclipError
    from storage import LocalStorage

    small = tmp_path / "small-tmp"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(small)], capture_output=True)
    if mounted.returncode != 0:
        if os.environ.get("CI") and os.geteuid() == 0:
            pytest.fail(f"could not mount a small tmpfs: {mounted.stderr.decode()}")
        pytest.skip("mounting a small tmpfs needs root")
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(small)
    import tempfile

    tempfile.tempdir = None
    try:
        spec = build_spec({"source": str(media(size="640x360", duration=6, gop=60)), "start": 0, "end": 5})
        with pytest.raises(QuoteclipError) as info:
            produce_clip(spec, settings, LocalStorage(settings.storage_dir))
        assert "No space left on device" in str(info.value) or "space" in str(info.value).lower()
        assert not (settings.storage_dir.exists() and list(settings.storage_dir.iterdir()))
        assert not list(small.iterdir())  # the render folder was removed
    finally:
        if old is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old
        tempfile.tempdir = None
        subprocess.run(["umount", str(small)], check=False)


def test_burst_of_200_requests_20_renders(media, queue_env, workers, ffmpeg_counter, redis_url) -> None:
    import redis

    settings = Settings.from_env(queue_env)
    src = str(media(size="320x180", duration=25, gop=60))
    specs = [build_spec({"source": src, "start": s, "end": s + 1, "caption": f"clip {s}"}) for s in range(20)]
    results: list[str] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        for k in range(20):
            job = enqueue_clip(specs[(n + k) % 20], settings).job_id
            with lock:
                results.append(job)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 200 and len(set(results)) == 20
    logs = workers.burst(2, timeout=600)
    assert all(job_status(i, settings)["status"] == "finished" for i in set(results))
    _, log = ffmpeg_counter
    assert len(log.read_text().splitlines()) == 20  # exactly one render per distinct clip
    conn = redis.Redis.from_url(redis_url)
    persistent = [k for k in conn.scan_iter("*") if conn.ttl(k) == -1 and not k.startswith((b"rq:queues", b"rq:queue:",
                  b"quoteclip:metrics", b"rq:workers", b"rq:worker"))]  # fmt: skip
    assert not [k for k in persistent if k.startswith((b"rq:job:", b"rq:results:", b"quoteclip:callbacks"))]
    assert all("Traceback" not in line for line in logs)


def test_killed_worker_job_is_picked_up_by_another(media, queue_env, workers) -> None:
    """The whole worker (and its work-horse) killed mid-job: another worker requeues and renders it once the
    job's heartbeat expires (70 s) at its next maintenance pass; the client never sees "started" forever."""
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
        wait_for(lambda: job_status(job_id, settings)["status"] == "finished", 240, "another worker to finish it")
    finally:
        second.terminate()
        second.communicate(timeout=60)
    assert time.monotonic() - began < 240
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
