"""Cancelling a clip (jobs/cancel.py): by `quoteclip cancel`, `DELETE /clips/{id}` and the MCP tool (test_mcp.py). A
queued clip never renders, a rendering one is stopped, a clip rendered in pieces leaves none behind, a stored one
is refused."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis
from conftest import Workers, run_cli, runs, started
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
    assert json.loads(done.stdout) == {"job_id": job, "status": "canceled", "canceled": True}
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
    slow.write_text(f'#!/bin/sh\ncase " $* " in *" -an "*) sleep 2 ;; esac\nexec "{ffmpeg_bin}" "$@"\n')
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
