"""``quoteclip up``: the whole system on one machine — the API and page, and one worker per 2 cores.

Redis: the configured URL (``QUOTECLIP_REDIS_URL``/``REDIS_URL``); else a Redis answering at the default
address; else an embedded server (``quoteclip.embedded``) with its data under the clip folder, its URL
recorded where the other commands look. Production runs ``serve`` and ``worker`` apart against a real Redis.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from quoteclip import embedded
from quoteclip.errors import BadInput
from quoteclip.settings import Settings, configured_redis_url

log = logging.getLogger(__name__)

RedisChoice = Literal["auto", "embedded"]


def default_workers() -> int:
    """One worker per 2 cores: each render's ffmpeg uses about two."""
    return max(1, (os.cpu_count() or 1) // 2)


def _answers(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except Exception:
        return False


@dataclass
class Running:
    redis_url: str
    embedded: embedded.EmbeddedServer | None
    children: list[tuple[str, subprocess.Popen[bytes]]]


def choose_redis(env: Mapping[str, str], settings: Settings, choice: RedisChoice) -> tuple[str, bool]:
    """(URL, whether an embedded server must be started)."""
    configured = configured_redis_url(env)
    if choice == "embedded":
        return "", True
    if configured:
        return configured, False
    if _answers(Settings.redis_url):
        return Settings.redis_url, False
    recorded = embedded.recorded_url(settings.storage_dir)
    if recorded and _answers(recorded):
        raise BadInput(f"another quoteclip up is running with its embedded Redis at {recorded}; stop it first")
    return "", True


def start(settings: Settings, host: str, port: int, workers: int, choice: RedisChoice) -> Running:
    env = dict(os.environ)
    url, start_embedded = choose_redis(env, settings, choice)
    server = None
    if start_embedded:
        folder = embedded.data_dir(settings.storage_dir.resolve())
        server = embedded.start(folder, persist=True, record=embedded.url_file(settings.storage_dir.resolve()))
        url = server.url
    env.update(QUOTECLIP_REDIS_URL=url, QUOTECLIP_STORAGE_DIR=str(settings.storage_dir.resolve()))
    python = [sys.executable, "-m", "quoteclip"]
    children = [("api", subprocess.Popen([*python, "serve", "--host", host, "--port", str(port)], env=env))]
    for n in range(workers):
        children.append((f"worker {n + 1}", subprocess.Popen([*python, "worker"], env=env)))
    # one more for clicks only: a click never waits for a batch render to end (batch renders run nicer, so the
    # click's render gets the cores first)
    children.append(("click worker", subprocess.Popen([*python, "worker", "--clicks-only"], env=env)))
    children.append(("webhook worker", subprocess.Popen([*python, "worker", "--webhooks"], env=env)))
    return Running(url, server, children)


def stop(running: Running, grace: float) -> None:
    """SIGTERM to every child (workers let their render finish within ``grace``), then the embedded server."""
    for _, proc in running.children:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace + 5
    for _, proc in running.children:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if running.embedded is not None:
        running.embedded.stop()


def run(settings: Settings, host: str, port: int, workers: int, choice: RedisChoice) -> int:
    """Start everything, wait for SIGINT/SIGTERM (or a child that dies), stop everything. Returns the exit code."""
    if workers < 1:
        raise BadInput(f"workers must be at least 1, got {workers}")
    stopping: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        stopping.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    running = start(settings, host, port, workers, choice)
    where = f"embedded, data in {running.embedded.folder}" if running.embedded else "configured"
    print(
        f"quoteclip up: page and API at http://{host}:{port}/ · {workers} worker(s) · Redis {running.redis_url} "
        f"({where}) · clips in {settings.storage_dir.resolve()} · Ctrl-C stops",
        file=sys.stderr,
    )
    code = 0
    try:
        while not stopping:
            dead = [(name, proc.returncode) for name, proc in running.children if proc.poll() is not None]
            if dead:
                name, status = dead[0]
                print(f"quoteclip up: the {name} process exited ({status}); stopping", file=sys.stderr)
                code = 1
                break
            time.sleep(0.2)
    finally:
        stop(running, settings.shutdown_grace)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code
