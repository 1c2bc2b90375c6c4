"""Cancelling a clip (jobs/cancel.py): by `quoteclip cancel`, `DELETE /clips/{id}` and the MCP tool (test_mcp.py). A
queued clip never renders, a rendering one is stopped and its worker takes the next job, a render other requests
joined goes on until the last of them cancels, a batch's cancel cancels its clips, a clip rendered in pieces leaves
none behind, a stored one is refused."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis
from conftest import REPORT_PASS, Workers, run_cli, runs, started
from fastapi.testclient import TestClient

from api.app import create_app
from jobs.queue import enqueue_clip, job_status
from quoteclip.settings import Settings
from quoteclip.spec import build_spec


def _spec(src: Path, start: float, end: float):
    return build_spec(
        {"source": str(src), "start": start, "end": end, "caption": "a quote", "encoder_preset": "ultrafast"}
    )


def test_a_queued_clip_canceled_never_renders(media, queue_env, workers, ffmpeg_counter) -> None:
    src = media(size="320x180", duration=6)
    settings = Settings.from_env(queue_env)
    job = enqueue_clip(_spec(src, 1, 3), settings).job_id
    done = run_cli("cancel", job, "--json", env=queue_env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"job_id": job, "status": "canceled", "canceled": True, "waiting": 0}
    body = job_status(job, settings)
    assert body["status"] == "failed" and "canceled" in str(body["error"]), body
    workers.burst(1)
    assert runs(ffmpeg_counter[1]) == 0
    again = run_cli("cancel", job, env=queue_env)
    assert again.returncode == 1 and "nothing to cancel" in again.stdout + again.stderr, again
    unknown = run_cli("cancel", "clip-" + "0" * 32, env=queue_env)
    assert unknown.returncode == 2 and "no such clip job" in unknown.stderr, unknown
    malformed = run_cli("cancel", "rm -rf", env=queue_env)
    assert malformed.returncode == 2 and "job_id must look like" in malformed.stderr, malformed


def test_a_stored_clip_is_not_canceled(media, queue_env, workers) -> None:
    src = media(size="320x180", duration=6)
    settings = Settings.from_env(queue_env)
    job = enqueue_clip(_spec(src, 1, 3), settings).job_id
    workers.burst(1)
    client = started(TestClient(create_app(settings)))
    answer = client.delete(f"/clips/{job}")
    assert answer.status_code == 409 and "revoke its links" in answer.json()["detail"], answer.text
    assert client.delete("/clips/clip-" + "0" * 32).status_code == 404
    assert client.delete("/clips/not-a-clip").status_code == 404
    assert job_status(job, settings)["status"] == "finished"


@pytest.mark.slow
def test_a_split_clip_canceled_while_it_renders_leaves_no_piece(media, queue_env, tmp_path, ffmpeg_bin) -> None:
    """Two workers render a clip's pieces (each piece's ffmpeg slowed); the clip is canceled mid-way over the API:
    its job is stopped, and once the piece job still running has ended, no piece, marker or piece job is left and no
    clip is stored."""
    src = media(size="320x180", fps=30, duration=16, gop=60, pattern="levels")
    queue_env.update(QUOTECLIP_SPLIT_SECONDS="5", QUOTECLIP_PIECE_SECONDS="3")
    slow = tmp_path / "ffmpeg-slow"
    slow.write_text(
        f'#!/bin/sh\ncase " $* " in {REPORT_PASS}) ;; *" -an "*) sleep 2 ;; esac\nexec "{ffmpeg_bin}" "$@"\n'
    )
    slow.chmod(0o755)
    queue_env["FFMPEG_BINARY"] = str(slow)
    settings = Settings.from_env(queue_env)
    connection = redis.Redis.from_url(queue_env["QUOTECLIP_REDIS_URL"])
    pool = Workers(queue_env, tmp_path)
    job = enqueue_clip(_spec(src, 1.0, 13.0), settings).job_id
    key = job.removeprefix("clip-")
    procs = [pool.start(burst=False, name=f"cancel-{n}-{time.monotonic_ns()}") for n in range(2)]
    try:
        deadline = time.monotonic() + 60
        while not connection.exists(f"quoteclip:piece:{key}:count") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert connection.exists(f"quoteclip:piece:{key}:count"), "the clip was not split"
        time.sleep(1.0)  # (a piece job under way on the other worker)
        client = started(TestClient(create_app(settings)))
        answer = client.delete(f"/clips/{job}")
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] in ("stopped", "canceled"), answer.text
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
            connection.keys(f"quoteclip:piece:{key}:*:claim") or connection.keys(f"quoteclip:piece:{key}:*:done")
        ):
            time.sleep(0.1)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.communicate(timeout=30)
    clips = Path(queue_env["QUOTECLIP_STORAGE_DIR"])
    assert not list(clips.glob("*.mp4"))
    assert not (clips / "pieces").exists() or not list((clips / "pieces").iterdir())
    assert connection.keys(f"quoteclip:piece:{key}:*:done") == []
    queued = [k for k in connection.keys("rq:job:piece-*") if connection.hget(k, "status") == b"queued"]
    assert queued == []
    body = job_status(job, settings)
    assert body["status"] == "failed" and "canceled" in str(body["error"]), body


def slowed(ffmpeg_bin: str, tmp_path: Path, seconds: int, when: str) -> str:
    """An ffmpeg that waits ``seconds`` before each run whose arguments hold ``when``."""
    slow = tmp_path / f"ffmpeg-slow-{seconds}"
    slow.write_text(f'#!/bin/sh\ncase " $* " in *"{when}"*) sleep {seconds} ;; esac\nexec "{ffmpeg_bin}" "$@"\n')
    slow.chmod(0o755)
    return str(slow)


def test_a_joined_render_stops_at_its_last_cancel_and_its_worker_takes_the_next_job(
    media, queue_env, tmp_path, ffmpeg_bin
) -> None:
    """Two requests of one clip (the second joins the first's render) and a third clip queued behind it, one worker.
    The first cancel withdraws its request (202: one still waits) and the render goes on; the second stops it, and
    the worker has the next job under way within 2 s of the answer."""
    src = media(size="320x180", duration=6)
    queue_env["FFMPEG_BINARY"] = slowed(ffmpeg_bin, tmp_path, 60, "libx264")
    settings = Settings.from_env(queue_env)
    client = started(TestClient(create_app(settings)))
    body = {"source": str(src), "start": 1, "end": 3, "caption": "a quote", "encoder_preset": "ultrafast"}
    first = client.post("/clips", json=body).json()
    second = client.post("/clips", json=body).json()
    assert first["id"] == second["id"], second
    job = first["id"]
    proc = Workers(queue_env, tmp_path).start(burst=False, name=f"cancel-joined-{time.monotonic_ns()}")
    try:
        deadline = time.monotonic() + 60
        while job_status(job, settings)["status"] != "started":
            assert time.monotonic() < deadline, job_status(job, settings)
            time.sleep(0.05)
        after = enqueue_clip(_spec(src, 3, 5), settings).job_id  # (queued behind the render)
        withdrawn = client.delete(f"/clips/{job}")
        assert withdrawn.status_code == 202, withdrawn.text
        assert withdrawn.json()["waiting"] == 1 and withdrawn.json()["canceled"] is False, withdrawn.text
        time.sleep(0.5)
        assert job_status(job, settings)["status"] == "started"  # (rendering on for the other request)
        stopped = client.delete(f"/clips/{job}")
        answered = time.monotonic()
        assert stopped.status_code == 200 and stopped.json()["canceled"] is True, stopped.text
        while job_status(after, settings)["status"] == "queued":
            assert time.monotonic() - answered < 2.0, "the worker took no next job within 2 s of the cancel"
            time.sleep(0.02)
        body_after = job_status(job, settings)
        assert body_after["status"] == "failed" and "canceled" in str(body_after["error"]), body_after
        assert client.delete(f"/clips/{job}").status_code == 409  # (nothing left to cancel)
        assert client.delete(f"/clips/{after}").json()["canceled"] is True  # (the worker is free to stop)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert not list(Path(queue_env["QUOTECLIP_STORAGE_DIR"]).glob(f"{job.removeprefix('clip-')}*.mp4"))


def test_a_batchs_cancel_cancels_its_clips_and_keeps_another_requests(media, queue_env) -> None:
    """A batch of two quotes, one of them also asked alone: the batch's cancel cancels the other, withdraws its
    request of the shared one (which stays queued for the lone request); none is rendered by it, and the canceled
    clip is askable again. An unknown batch is 404, from the API and the CLI."""
    src = media(size="320x180", duration=6)
    settings = Settings.from_env(queue_env)
    client = started(TestClient(create_app(settings)))
    quotes = [{"start": 1, "end": 2, "caption": "one"}, {"start": 3, "end": 4, "caption": "two"}]
    made = client.post("/batches", json={"source": str(src), "quotes": quotes})
    assert made.status_code == 200, made.text
    batch = made.json()["id"]
    ids = [c["id"] for c in made.json()["clips"]]
    alone = client.post("/clips", json={"source": str(src), **quotes[0]}).json()
    assert alone["id"] == ids[0], alone
    answer = client.delete(f"/batches/{batch}")
    assert answer.status_code == 200, answer.text
    clips = {c["id"]: c for c in answer.json()["clips"]}
    assert answer.json()["canceled"] == 1 and clips[ids[1]]["canceled"] and clips[ids[1]]["status"] == "canceled"
    assert clips[ids[0]] == {"id": ids[0], "status": "queued", "canceled": False, "waiting": 1}, clips
    assert job_status(ids[0], settings)["status"] == "queued"
    assert job_status(ids[1], settings)["status"] == "failed"
    twice = client.delete(f"/batches/{batch}").json()  # (said again: no request withdrawn again)
    assert twice["canceled"] == 0 and {c["id"]: c["waiting"] for c in twice["clips"]} == {ids[0]: 1, ids[1]: 0}, twice
    assert job_status(ids[0], settings)["status"] == "queued"
    again = client.post("/clips", json={"source": str(src), **quotes[1]})  # (a canceled clip is askable again)
    assert again.status_code == 202 and again.json()["id"] == ids[1], again.text
    assert job_status(ids[1], settings)["status"] == "queued"
    assert client.delete("/batches/batch-" + "0" * 24).status_code == 404
    assert client.delete("/batches/nothing").status_code == 404
    cli = run_cli("cancel", "batch-" + "0" * 24, env=queue_env)
    assert cli.returncode == 2 and "no such batch" in cli.stderr, cli


def test_a_quotes_profiles_all_canceled_cancel_their_shared_render(media, queue_env, workers, ffmpeg_counter) -> None:
    """A quote in two profiles is rendered by one group job (jobs/queue.py enqueue_profiles): one clip canceled, the
    group stays queued for the other; both canceled, the group is canceled too, and a worker renders nothing."""
    from rq.job import Job

    from jobs.queue import enqueue_profiles
    from quoteclip.spec import in_profiles

    settings = Settings.from_env(queue_env)
    src = media(size="320x180", duration=6)
    queued = enqueue_profiles(in_profiles(_spec(src, 1, 3), ("landscape", "vertical")), settings)
    connection = redis.Redis.from_url(queue_env["QUOTECLIP_REDIS_URL"])
    (group_id,) = Job.fetch(queued[0].job_id, connection=connection).dependency_ids
    group = Job.fetch(group_id, connection=connection)
    assert group_id.startswith("group-")
    first = run_cli("cancel", queued[0].job_id, "--json", env=queue_env)
    assert first.returncode == 0 and json.loads(first.stdout)["canceled"], first.stderr
    assert group.get_status(refresh=True) == "queued"  # (the other profile is still wanted)
    second = run_cli("cancel", queued[1].job_id, "--json", env=queue_env)
    assert second.returncode == 0 and json.loads(second.stdout)["canceled"], second.stderr
    assert group.get_status(refresh=True) == "canceled"
    workers.burst(1)
    assert runs(ffmpeg_counter[1]) == 0
    assert [job_status(q.job_id, settings)["status"] for q in queued] == ["failed", "failed"]
