"""Redis through Sentinel: ``redis+sentinel://`` URLs read and refused (fast), and a failover in the middle of a
batch, with real sentinels, real ``quoteclip worker`` and ``quoteclip serve`` processes and ffmpeg (slow):
``pytest -s tests/test_sentinel.py`` prints what the failover cost."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import run_cli, runs

from jobs.connection import connect
from jobs.queue import job_status
from quoteclip.errors import BadInput
from quoteclip.redis_url import SentinelURL, check, parse_sentinel
from quoteclip.settings import Settings
from testkit.sentinel import sentinel_set

# ---- reading the URL -------------------------------------------------------------------------------------------


def test_sentinel_urls_are_read() -> None:
    assert parse_sentinel("redis+sentinel://h1:26379,h2:26380/mymaster", "X") == SentinelURL(
        (("h1", 26379), ("h2", 26380)), "mymaster"
    )
    assert parse_sentinel("redis+sentinel://:s%40cret@h1:26379/mymaster/3/", "X") == SentinelURL(
        (("h1", 26379),), "mymaster", 3, password="s@cret"
    )
    assert parse_sentinel("redis+sentinel://app:pw@[::1]:26379/m/0?sentinel_password=sp", "X") == SentinelURL(
        (("::1", 26379),), "m", 0, "app", "pw", "sp"
    )
    url = "redis+sentinel://10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/quoteclip/0"
    assert Settings.from_env({"QUOTECLIP_REDIS_URL": url}).redis_url == url
    assert Settings.from_env({"REDIS_URL": url}).redis_url == url
    assert Settings.from_env({"QUOTECLIP_STREAM_REDIS_URL": url}).stream_redis_url == url
    for plain in ("redis://r:6379/0", "rediss://:pw@r:6380/1", "unix:///run/redis.sock"):
        assert check(plain, "X") == plain


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://h1/mymaster", "sentinel 'h1' is not HOST:PORT"),
        ("redis+sentinel://h1:port/mymaster", "sentinel 'h1:port' has no port number"),
        ("redis+sentinel://h1:70000/mymaster", "sentinel 'h1:70000' has no port number"),
        ("redis+sentinel://h1:26379,,h2:26379/mymaster", "has an empty sentinel address"),
        ("redis+sentinel://:hunter2@h1:26379", "names no SERVICE_NAME"),
        ("redis+sentinel://:hunter2@h1:26379/", "names no SERVICE_NAME"),
        ("redis+sentinel://h1:26379/mymaster/zero", "its database must be a number, got 'zero'"),
        ("redis+sentinel://h1:26379/mymaster/0/1", "has more than /SERVICE_NAME/DB in its path"),
        ("redis+sentinel://hunter2@h1:26379/mymaster", "has a user without a password"),
        ("redis+sentinel://h1:26379/mymaster?db=1&sentinel_password=hunter2", "its only option is"),
        ("sentinel://h1:26379/mymaster", "must be a Redis URL like redis://"),
    ],
)
def test_a_malformed_url_is_refused_in_one_line(url: str, says: str) -> None:
    for name in ("QUOTECLIP_REDIS_URL", "QUOTECLIP_STREAM_REDIS_URL"):
        with pytest.raises(BadInput) as refused:
            Settings.from_env({name: url})
        message = str(refused.value)
        assert message.startswith(f"{name} must be ") and says in message, message
        assert "\n" not in message and "hunter2" not in message, message


def test_the_command_line_refuses_a_malformed_url_with_exit_2() -> None:
    done = run_cli("status", "clip-" + "0" * 32, env={"QUOTECLIP_REDIS_URL": "redis+sentinel://:hunter2@h1:26379"})
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "hunter2" not in done.stderr + done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "QUOTECLIP_REDIS_URL must be redis+sentinel://" in lines[0], done.stderr


# ---- a failover ------------------------------------------------------------------------------------------------

CLIPS = 30


def _post(base: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        base + "/clips", json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def _api_code(base: str, job_id: str) -> int:
    try:
        with urllib.request.urlopen(f"{base}/clips/{job_id}", timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)


@pytest.mark.slow
def test_a_failover_mid_batch_renders_every_clip_and_stores_each_once(
    media, http_source, workers, queue_env, ffmpeg_counter, tmp_path
) -> None:
    """30 clips through ``quoteclip serve`` to 2 ``quoteclip worker`` processes, all on a ``redis+sentinel://``
    URL; the primary is SIGKILLed once some clips are stored and others are queued or rendering. Every clip ends
    finished, each mp4 is written once (its file is never replaced), no worker's log holds a traceback (a lost
    Redis is a line each: the scheduler's too), and the test prints the failover's cost."""
    (http_source.root / "ep.mp4").symlink_to(media(size="320x180", duration=CLIPS + 2, gop=30))
    folder = tmp_path / "sentinel"
    folder.mkdir()
    with sentinel_set(folder) as sentinels:
        queue_env["QUOTECLIP_REDIS_URL"] = sentinels.url(0)
        workers.env = queue_env
        settings = Settings.from_env(queue_env)
        connection = connect(settings)  # one client for every look, as an application would hold one
        _, ffmpeg_log = ffmpeg_counter
        procs = [workers.start(burst=False, name=f"sentinel-{n}-{os.getpid()}") for n in range(2)]
        finished: dict[str, float] = {}  # job id → when first seen finished
        inodes: dict[str, tuple[Path, int]] = {}  # job id → its stored mp4 and that file's inode then
        seen: dict[str, set[str]] = {}  # job id → every status it was seen with

        def look(job_id: str) -> None:
            body = job_status(job_id, settings, connection)
            seen.setdefault(job_id, set()).add(body["status"])
            if body["status"] == "finished" and job_id not in finished:
                finished[job_id] = time.monotonic()
                path = Path(body["link"].removeprefix("file://"))
                inodes[job_id] = (path, path.stat().st_ino)

        try:
            with workers.serve() as base:
                ids = []
                for n in range(CLIPS):
                    ids.append(_post(base, {"source": http_source.url("ep.mp4"), "start": n, "end": n + 1})["id"])
                assert len(set(ids)) == CLIPS
                deadline = time.monotonic() + 120
                while len(finished) < 4 and time.monotonic() < deadline:
                    for job_id in ids:
                        if job_id not in finished:
                            look(job_id)
                    time.sleep(0.05)
                assert len(finished) >= 4, "no clip was rendered through the sentinels' primary"
                before = len(finished)
                assert before <= CLIPS - 6, "the batch ended before the failover could meet it"
                old = sentinels.kill_primary()
                killed = time.monotonic()
                errors: list[float] = []  # when a status look failed (Redis away)
                unavailable: list[float] = []  # when the API answered 503
                deadline = killed + 120
                while len(finished) < CLIPS and time.monotonic() < deadline:
                    for job_id in ids:
                        if job_id in finished:
                            continue
                        try:
                            look(job_id)
                        except redis.RedisError:
                            errors.append(time.monotonic())
                            break
                    if _api_code(base, ids[-1]) == 503:
                        unavailable.append(time.monotonic())
                    time.sleep(0.05)
                new = sentinels.wait_for_new_primary(old, timeout=5)
        finally:
            for proc in procs:
                proc.terminate()
            logs = [proc.communicate(timeout=60)[0] for proc in procs]
            connection.close()

        waiting = {job_id: sorted(seen.get(job_id, ())) for job_id in ids if job_id not in finished}
        lost = [job_id for job_id, statuses in waiting.items() if "unknown" in statuses]
        assert not waiting, (
            f"{len(waiting)} clips not finished 120 s after the failover ({len(lost)} of them unknown: their job "
            f"hash was lost): {waiting}\n" + "\n---\n".join(log[-3000:] for log in logs)
        )
        stored = sorted(Path(queue_env["QUOTECLIP_STORAGE_DIR"]).rglob("*.mp4"))
        assert len(stored) == CLIPS, stored
        for job_id, (path, inode) in inodes.items():
            assert path.stat().st_ino == inode, f"{job_id}'s mp4 was written again"
        traced = [log[max(0, log.index("Traceback") - 2000) :][:4000] for log in logs if "Traceback" in log]
        assert not traced, "a worker's log holds a traceback:\n" + "\n---\n".join(traced)
        renders = runs(ffmpeg_log)
        after = [when for job_id, when in finished.items() if when > killed]
        first_after = min(after) - killed
        print(
            f"\nsentinel failover: primary :{old} killed with {before} of {CLIPS} clips stored, :{new} promoted; "
            f"first clip finished {first_after:.1f} s after the kill; status looks failed for "
            f"{(errors[-1] - killed) if errors else 0:.1f} s after it ({len(errors)} failed looks); the API "
            f"answered 503 for {(unavailable[-1] - killed) if unavailable else 0:.1f} s after it "
            f"({len(unavailable)} answers); every clip finished {max(finished.values()) - killed:.1f} s after it; "
            f"{renders} renders for {CLIPS} clips ({renders - CLIPS} rendered twice); "
            f"{len(stored)} mp4s stored, none written twice"
        )
        assert renders >= CLIPS


def test_a_redis_url_is_shown_without_either_password() -> None:
    from cli.queue import _shown

    shown = _shown("redis+sentinel://:serverpw@h1:26379,h2:26379/mymaster/0?sentinel_password=sentinelpw")
    assert "serverpw" not in shown and "sentinelpw" not in shown and "h1:26379,h2:26379/mymaster/0" in shown


def test_no_part_of_a_password_holding_a_slash_or_question_mark_is_shown() -> None:
    """A password not percent-encoded (``/``, ``?``, ``#`` in it): redis-py once named its start as a bad port in an
    "internal error"; now a bad input naming the variable and the fix, the password left out."""
    from conftest import run_cli

    from quoteclip.redis_url import shown

    for url in ("redis://:sec/ret@127.0.0.1:6379/0", "redis://:sec?ret@127.0.0.1:6379/0", "redis://:se#cret@h:1/0"):
        assert "sec" not in shown(url) and "ret" not in shown(url), url
        done = run_cli("health", env={"QUOTECLIP_REDIS_URL": url})
        assert done.returncode == 2, done.stderr
        assert "QUOTECLIP_REDIS_URL" in done.stderr and "percent-encoded" in done.stderr, done.stderr
        assert "sec" not in done.stderr and "internal error" not in done.stderr, done.stderr
