"""The queue end to end with real Redis, real rq workers, real SeaweedFS and real ffmpeg."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import run_cli, runs
from mediacheck import streams

from jobs.queue import enqueue_clip, job_status
from quoteclip.errors import BadInput
from quoteclip.settings import Settings
from quoteclip.spec import build_spec


def cli(env: dict[str, str], *args: str) -> dict[str, object]:
    done = run_cli(*args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def enqueue(env: dict[str, str], src: Path | str, start: str = "1", end: str = "3", *extra: str) -> dict[str, object]:
    return cli(env, "enqueue", str(src), "--start", start, "--end", end, *extra)


@pytest.fixture
def s3_env(queue_env: dict[str, str], s3) -> dict[str, str]:
    queue_env.update(s3.env())
    queue_env["QUOTECLIP_LINK_TTL"] = "120"
    return queue_env


def test_enqueue_worker_s3_link_downloads_identical_bytes(media, s3, s3_env, workers, ffmpeg_counter) -> None:
    workers.env = s3_env
    src = media(size="640x360", duration=6)
    queued = enqueue(s3_env, src, "1", "3", "--caption", "Ünïcode: it's 100% \\ fine", "--watermark", "StarZero")
    assert queued["status"] == "queued" and str(queued["job_id"]).startswith("clip-")
    workers.burst(1)
    status = cli(s3_env, "status", str(queued["job_id"]))
    assert status["status"] == "finished" and status["stage"] == "finished" and status["progress"] == 100
    link = str(status["link"])
    assert "X-Amz-Expires=120" in link and link.startswith(s3.endpoint)

    key = str(queued["job_id"]).removeprefix("clip-")
    stored = s3.client().get_object(Bucket=s3.bucket, Key=f"clips/{key}.mp4")
    stored_bytes = stored["Body"].read()
    with urllib.request.urlopen(link) as response:
        body = response.read()
        assert response.headers["Content-Type"] == "video/mp4"
        disposition = response.headers["Content-Disposition"]
        cache = response.headers["Cache-Control"]
    assert body == stored_bytes and len(body) > 10_000
    assert disposition.startswith('attachment; filename="unicode-it-s-100-fine-1s-') and disposition.endswith('.mp4"')
    assert "immutable" in cache
    names = {o["Key"] for o in s3.client().list_objects_v2(Bucket=s3.bucket)["Contents"]}
    assert names == {f"clips/{key}{x}" for x in (".mp4", ".srt", ".vtt", ".jpg", ".manifest.json")}
    clip = Path(s3_env["TMPDIR"]) / "check.mp4"
    clip.write_bytes(body)
    assert (streams(clip)["width"], streams(clip)["height"]) == (1280, 720)
    assert list(Path(s3_env["TMPDIR"]).iterdir()) == [clip]  # the worker left no temp files
    from redis import Redis
    from rq.job import Job

    with Redis.from_url(s3_env["QUOTECLIP_REDIS_URL"]) as connection:
        timings = Job.fetch(str(queued["job_id"]), connection=connection).meta["timings"]
    expected = {"queued_s", "open_probe_s", "render_s", "ffmpeg_s", "store_s", "stored_at"}  # where a click's time
    expected |= {"check_s"}  # went, and its quality check's (after it was stored)
    assert set(timings) == expected | {"ffmpeg_started_at", "first_fragment_at"}  # a click streams as it renders
    assert 0 < timings["ffmpeg_s"] < timings["render_s"] and timings["store_s"] > 0 and timings["queued_s"] >= 0
    assert timings["check_s"] > 0 and timings["stored_at"] > timings["first_fragment_at"]

    # The same request again: the link at once, no job, no ffmpeg.
    _, log = ffmpeg_counter
    before = runs(log)
    again = enqueue(s3_env, src, "1", "3", "--caption", "Ünïcode: it's 100% \\ fine", "--watermark", "StarZero")
    assert again["status"] == "finished" and again["cached"] is True and again["job_id"] == queued["job_id"]
    workers.burst(1)
    assert runs(log) == before == 1


def test_ten_identical_requests_two_workers_one_render(media, queue_env, workers, ffmpeg_counter) -> None:
    src = media(size="320x180", duration=6, gop=60)
    settings = Settings.from_env(queue_env)
    spec = build_spec({"source": str(src), "start": 1, "end": 4, "caption": "race"})
    ids: list[str] = []
    barrier = threading.Barrier(10)

    def request() -> None:
        barrier.wait()
        ids.append(enqueue_clip(spec, settings).job_id)

    threads = [threading.Thread(target=request) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 10 and len(set(ids)) == 1
    workers.burst(2)
    _, log = ffmpeg_counter
    assert runs(log) == 1
    body = job_status(ids[0], settings)
    assert body["status"] == "finished" and str(body["link"]).startswith("file://")


def test_requests_joined_while_running_and_distinct_clips_race(media, queue_env, workers, ffmpeg_counter) -> None:
    src = media(size="320x180", duration=8, gop=60)
    first = [enqueue(queue_env, src, str(s), str(s + 2)) for s in (0, 2, 4)]
    duplicate = enqueue(queue_env, src, "2", "4")
    assert duplicate["job_id"] == first[1]["job_id"] and duplicate.get("joined") is True
    workers.burst(2)
    _, log = ffmpeg_counter
    assert runs(log) == 3
    for q in first:
        assert cli(queue_env, "status", str(q["job_id"]))["status"] == "finished"


def test_missing_source_fails_readably_and_is_not_retried(queue_env, workers, http_source, redis_url) -> None:
    from redis import Redis
    from rq.job import Job

    queue_env["QUOTECLIP_ALLOW_LOCAL_SOURCES"] = ""  # queue default: no local paths
    url = http_source.url("gone.mp4")
    queued = enqueue(queue_env, url)
    (log,) = workers.burst(1)
    status = cli(queue_env, "status", str(queued["job_id"]))
    assert status["status"] == "failed" and status["stage"] == "failed"
    assert status["error"] == f"source unavailable: source not found (HTTP 404): {url}"
    # the worker's log says the request's failure in one line, with no traceback at ERROR
    assert f"source not found (HTTP 404): {url}" in log and "Traceback" not in log and "exception raised" not in log
    job = Job.fetch(str(queued["job_id"]), connection=Redis.from_url(redis_url))
    assert job.retries_left == 0 and job.meta["permanent"] is True
    assert http_source.requests["gone.mp4"] == 1  # tried once, not retried

    # Once the source exists, the same request replaces the failed job instead of joining it.
    (http_source.root / "gone.mp4").write_bytes(b"")
    again = enqueue(queue_env, url)
    assert again["status"] == "queued" and again["job_id"] == queued["job_id"]


def test_queue_refuses_local_paths_by_default(media, queue_env) -> None:
    queue_env["QUOTECLIP_ALLOW_LOCAL_SOURCES"] = ""
    src = media(size="320x180", duration=4, gop=60)
    done = run_cli("enqueue", str(src), "--start", "1", "--end", "2", env=queue_env)
    assert done.returncode == 2
    assert "source: local paths are not allowed here" in done.stderr


def test_status_of_unknown_and_malformed_ids(queue_env) -> None:
    done = run_cli("status", "clip-" + "0" * 32, "--json", env=queue_env)
    assert done.returncode == 1 and json.loads(done.stdout)["status"] == "unknown"
    assert f"in the Redis at {queue_env['QUOTECLIP_REDIS_URL']}" in json.loads(done.stdout)["error"]  # which one asked
    bad = run_cli("status", "../../etc/passwd", env=queue_env)
    assert bad.returncode == 2 and "job_id must look like clip-<32 hex digits>, got '../../etc/passwd'" in bad.stderr
    with pytest.raises(BadInput):
        job_status("nope", Settings.from_env(queue_env))


@pytest.mark.slow
def test_progress_is_reported_while_rendering(media, queue_env, workers) -> None:
    src = media(size="1280x720", duration=20, gop=300)
    queued = enqueue(queue_env, src, "1", "16", "--fit", "blur")
    worker = workers.start(burst=True)
    seen: list[tuple[str, int]] = []
    deadline = time.monotonic() + 120
    try:
        while worker.poll() is None and time.monotonic() < deadline:
            body = job_status(str(queued["job_id"]), Settings.from_env(queue_env))
            seen.append((str(body["stage"]), int(body["progress"])))
            time.sleep(0.1)
    finally:
        out, _ = worker.communicate(timeout=120)
    rendering = [p for stage, p in seen if stage == "rendering"]
    assert len(set(rendering)) >= 3, seen  # several distinct progress values during the render
    assert all(5 <= p <= 95 for p in rendering)
    assert rendering == sorted(rendering)
    assert f"[{queued['job_id']}]" in out  # the job id is on the worker's log lines


def test_a_key_secret_makes_clip_keys_unguessable(media, settings) -> None:
    """With QUOTECLIP_KEY_SECRET the same request gets another key, which no one without the secret computes."""
    from dataclasses import replace

    from jobs.pipeline.lookup import lookup
    from storage import LocalStorage

    spec = build_spec({"source": str(media(size="320x180", duration=4, gop=60)), "start": 1, "end": 2})
    store = LocalStorage(settings.storage_dir)
    plain, _ = lookup(spec, settings, store)
    secret_a, _ = lookup(spec, replace(settings, key_secret="s3cret-a"), store)
    secret_b, _ = lookup(spec, replace(settings, key_secret="s3cret-b"), store)
    assert len({plain, secret_a, secret_b}) == 3 and all(len(k) == 32 for k in (plain, secret_a, secret_b))
    assert lookup(spec, replace(settings, key_secret="s3cret-a"), store)[0] == secret_a  # stable


def test_calls_without_a_connection_close_what_they_open(media, queue_env, s3) -> None:
    """``job_status`` and ``enqueue_clip`` called without a Redis connection open their own and close it on
    return, so a script polling a status holds no socket per call until the garbage collector runs."""
    import gc
    import os

    env = {**queue_env, **s3.env()}
    settings = Settings.from_env(env)
    spec = build_spec({"source": str(media(size="320x180", duration=3, gop=30)), "start": 1, "end": 2})
    job_id = enqueue_clip(spec, settings).job_id

    def sockets() -> int:
        links = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                links.append(os.readlink(f"/proc/self/fd/{fd}"))
            except FileNotFoundError:  # the listing's own descriptor, closed by now
                pass
        return sum(link.startswith("socket:") for link in links)

    gc.collect()
    gc.disable()  # what the calls leave open stays open: nothing collects it here
    try:
        before = sockets()
        for _ in range(20):
            assert job_status(job_id, settings)["status"] == "queued"
            assert enqueue_clip(spec, settings).joined
        after = sockets()
    finally:
        gc.enable()
    assert after - before <= 2, f"{after - before} sockets left open by 40 calls"


def test_one_status_vocabulary_with_the_stage_for_detail() -> None:
    """Every answer (enqueue, status, the API) says queued, started, finished or failed; a job waiting on its
    other profiles or for a retry is queued, one stopped or canceled has failed; the stage says more."""
    from rq.job import JobStatus

    from jobs.queue import Enqueued
    from jobs.status import public_status

    said = {status: public_status(status) for status in JobStatus}
    assert set(said.values()) == {"queued", "started", "finished", "failed"}
    assert said[JobStatus.DEFERRED] == said[JobStatus.SCHEDULED] == "queued"
    assert said[JobStatus.STOPPED] == said[JobStatus.CANCELED] == "failed" and public_status(None) == "unknown"
    joined = Enqueued("clip-" + "0" * 32, "started", joined=True, stage="rendering").to_json()
    assert joined["status"] == "started" and joined["stage"] == "rendering"
