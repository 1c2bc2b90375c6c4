"""Several shapes of one quote from one decode: ``--profiles`` and the API's ``profiles``, each clip its own key,
link and sidecars, one ffmpeg run per quote, only the missing profiles rendered, single requests joining."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from conftest import run_cli, runs
from mediacheck import frame_index, frame_means, streams

from jobs.queue import enqueue_clip, enqueue_profiles, job_status
from quoteclip.settings import Settings
from quoteclip.spec import build_spec, in_profiles, parse_profiles

SIZES = {"landscape": (1280, 720), "vertical": (720, 1280), "square": (720, 720)}


@pytest.fixture
def levels(media) -> Path:  # type: ignore[no-untyped-def]
    return media(size="640x360", duration=8, gop=60, pattern="levels")


@pytest.mark.slow
def test_three_profiles_from_one_ffmpeg_run_each_cut_exactly(levels, tmp_path, ffmpeg_counter) -> None:
    wrapper, log = ffmpeg_counter
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"), "FFMPEG_BINARY": wrapper}
    args = [
        "render",
        str(levels),
        "--start",
        "2.5",
        "--end",
        "4.5",
        "--caption",
        "three shapes",
        "--watermark",
        "StarZero",
        "--fit",
        "center",
        "--profiles",
        "landscape,vertical,square",
        "--json",
    ]
    done = run_cli(*args, env=env)
    assert done.returncode == 0, done.stderr
    clips = json.loads(done.stdout)["clips"]
    assert [c["profile"] for c in clips] == ["landscape", "vertical", "square"] and runs(log) == 1
    assert len({c["key"] for c in clips}) == 3
    for clip in clips:
        info = streams(Path(clip["path"]))
        assert (info["width"], info["height"]) == SIZES[clip["profile"]] and clip["status"] == "finished"
        assert abs(float(info["duration"]) - 2.0) <= 1 / 30 + 0.001
        # the first frame is the source frame at start (frame 75 at 30 fps), read by its gray level
        assert frame_index(frame_means(Path(clip["path"]), limit=1, corner=0.2)[0], 75) == 75
        sidecars = sorted(p.name for p in Path(clip["path"]).parent.glob(f"{clip['key']}*"))
        assert f"{clip['key']}.srt" in sidecars and f"{clip['key']}.jpg" in sidecars
    # again: nothing rendered; one profile more: only it is rendered
    again = run_cli(*args, env=env)
    assert all(c["cached"] for c in json.loads(again.stdout)["clips"]) and runs(log) == 1
    more = run_cli(*args[:-3], "--profiles", "square,portrait", "--json", env=env)
    assert [c["cached"] for c in json.loads(more.stdout)["clips"]] == [True, False] and runs(log) == 2
    # a single-profile render of one of them is the same clip
    single = run_cli(*args[:-3], "--profile", "vertical", "--json", env=env)
    assert json.loads(single.stdout)["key"] == clips[1]["key"] and runs(log) == 2


def test_profiles_are_named_or_refused(levels, tmp_path) -> None:
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips")}
    bad = run_cli("render", str(levels), "--start", "1", "--end", "2", "--profiles", "landscape,cinema", env=env)
    assert bad.returncode == 2 and "profiles: unknown profile 'cinema'" in bad.stderr
    assert parse_profiles(" Vertical, square,vertical ") == ("vertical", "square")


def test_queued_profiles_render_together_and_a_single_request_joins(levels, queue_env, workers, ffmpeg_counter) -> None:
    settings = Settings.from_env(queue_env)
    spec = build_spec({"source": str(levels), "start": 1, "end": 3, "caption": "together", "fit": "blur"})
    specs = in_profiles(spec, ("landscape", "vertical", "square"))
    queued = enqueue_profiles(specs, settings)
    assert [q.status for q in queued] == ["queued"] * 3 and len({q.job_id for q in queued}) == 3
    joined = enqueue_clip(specs[1], settings)  # the vertical one alone, while the group waits: joins its job
    assert joined.job_id == queued[1].job_id and joined.joined
    assert job_status(queued[2].job_id, settings)["status"] in ("queued", "deferred")
    workers.burst(1)
    _, log = ffmpeg_counter
    assert runs(log) == 1
    for q, name in zip(queued, ("landscape", "vertical", "square"), strict=True):
        body = job_status(q.job_id, settings)
        assert body["status"] == "finished", body
        path = Path(str(body["link"]).removeprefix("file://"))
        assert (streams(path)["width"], streams(path)["height"]) == SIZES[name]
    # a profile's own job, run after its group stored the clip, is taken before it looks in the store: its clip is
    # finished all the while (a batch page's download of it is the clip, not "started")
    from datetime import UTC, datetime

    from redis import Redis
    from rq.job import Job, JobStatus

    with Redis.from_url(queue_env["QUOTECLIP_REDIS_URL"]) as connection:
        member = Job.fetch(queued[2].job_id, connection=connection)
        member.set_status(JobStatus.STARTED)
        member.heartbeat(datetime.now(UTC), 60)  # (its worker alive: not a stale job, which the store answers too)
        member.meta.update(stage="queued", progress=0)
        member.save_meta()
    taken = job_status(queued[2].job_id, settings)
    assert taken["status"] == "finished" and taken["link"] == body["link"], taken
    # with the store down (an S3 endpoint no one listens on), that job's status is said as it is, not an error
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    down = {"QUOTECLIP_S3_ENDPOINT": f"http://127.0.0.1:{port}", "QUOTECLIP_S3_BUCKET": "nowhere"}
    down |= {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s" * 16, "QUOTECLIP_S3_REGION": "us-east-1"}
    unanswered = job_status(queued[2].job_id, Settings.from_env({**queue_env, **down}))
    assert unanswered["status"] == "started" and unanswered["link"] is None, unanswered
    again = enqueue_profiles(specs, settings)
    assert all(q.link for q in again)
