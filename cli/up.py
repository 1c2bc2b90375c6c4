"""``quoteclip up``: the whole system on one machine — the API and page, and one worker per 2 cores.

Redis: the URL given with ``--redis``, else the configured one (``QUOTECLIP_REDIS_URL``/``REDIS_URL``), else an
embedded server (``quoteclip.embedded``) with its data under the clip folder, its URL recorded where the other
commands look; never a Redis that merely answers at the default address. Production runs ``serve`` and ``worker``
apart against a real Redis.
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

from quoteclip import embedded, redis_url
from quoteclip.errors import BadInput
from quoteclip.settings import LOOPBACK_HOSTS, Settings, configured_redis_url

from .queue import _shown

log = logging.getLogger(__name__)

RedisChoice = str  # "auto" (the configured URL, else embedded), "embedded", or a Redis URL


def default_workers() -> int:
    """One worker per 2 cores: each render's ffmpeg uses about two."""
    return max(1, (os.cpu_count() or 1) // 2)


def _answers(url: str) -> bool:
    import redis

    try:
        return bool(redis_url.client(url, socket_connect_timeout=1).ping())
    except (redis.RedisError, OSError, ValueError):
        return False


@dataclass
class Running:
    redis_url: str
    embedded: embedded.EmbeddedServer | None
    children: list[tuple[str, subprocess.Popen[bytes]]]
    how: str = ""  # how the Redis was chosen, as the start line says it


def choose_redis(env: Mapping[str, str], settings: Settings, choice: RedisChoice) -> tuple[str, bool, str]:
    """(URL, whether an embedded server must be started, how it was chosen: given, configured, embedded). A Redis
    that answers at the default address while nothing names it is not used: its database may be another
    program's."""
    if choice not in ("auto", "embedded"):
        redis_url.check(choice, "--redis")
        return choice, False, "given with --redis"
    configured = configured_redis_url(env)
    if choice == "auto" and configured:
        return configured, False, "configured (QUOTECLIP_REDIS_URL)"
    recorded = embedded.recorded_url(settings.storage_dir)
    if recorded and _answers(recorded):
        raise BadInput(f"another quoteclip up is running with its embedded Redis at {recorded}; stop it first")
    return "", True, "embedded (nothing configured: set QUOTECLIP_REDIS_URL or --redis URL to use another)"


def dev_env(env: Mapping[str, str], settings: Settings, host: str) -> dict[str, str]:
    """What ``up --dev`` adds for trying quoteclip on this machine's own files and servers: local paths and
    loopback sources allowed (the hosts and networks added to whatever is configured). Refused on a bind other
    than loopback, where a visitor could make the workers read this machine's disk and local services."""
    if host not in LOOPBACK_HOSTS:
        raise BadInput(f"--dev allows local files and loopback sources, so it binds to loopback only, got {host}")
    return {"QUOTECLIP_ALLOW_LOCAL_SOURCES": "true", "QUOTECLIP_ALLOW_LOOPBACK": "true"}


def start(settings: Settings, host: str, port: int, workers: int, choice: RedisChoice, dev: bool = False) -> Running:
    env = dict(os.environ)
    if dev:
        env.update(dev_env(env, settings, host))
    url, start_embedded, how = choose_redis(env, settings, choice)
    server = None
    if start_embedded:
        folder = embedded.data_dir(settings.storage_dir.resolve())
        server = embedded.start(folder, persist=True, record=embedded.url_file(settings.storage_dir.resolve()))
        url = server.url
    env.update(QUOTECLIP_REDIS_URL=url, QUOTECLIP_STORAGE_DIR=str(settings.storage_dir.resolve()))
    python = [sys.executable, "-m", "cli"]

    def child(*args: str) -> subprocess.Popen[bytes]:
        # each in its own process group: a Ctrl-C in the terminal reaches ``up`` alone, which stops the children
        # in order (``stop``); each gets SIGTERM if ``up`` itself dies
        return subprocess.Popen([*python, *args], env=env, process_group=0, preexec_fn=embedded.stop_with_parent())

    children = [("api", child("serve", "--host", host, "--port", str(port)))]
    for n in range(workers):
        children.append((f"worker {n + 1}", child("worker")))
    # one more for clicks only: a click never waits for a batch render to end (batch renders run nicer, so the
    # click's render gets the cores first)
    children.append(("click worker", child("worker", "--clicks-only")))
    children.append(("webhook worker", child("worker", "--webhooks")))
    return Running(url, server, children, how)


API_STOP = 3.0  # seconds the API has to stop (its open requests answered) before it is killed
HAND_BACK = 4.0  # seconds workers told to stop at once (SIGINT) have to hand their jobs back and exit


def stop(running: Running, grace: float, signum: int = signal.SIGTERM) -> None:
    """Stop in order: the API (no new job comes in), then the workers, then the embedded server (the workers'
    last writes, their jobs handed back, reach it). The workers get the signal ``up`` got: SIGINT (Ctrl-C) hands
    their jobs back to the queue at once; SIGTERM lets a render that ends within ``grace`` finish."""
    api = [proc for name, proc in running.children if name == "api"]
    workers = [proc for name, proc in running.children if name != "api"]
    _stop_all(api, signal.SIGTERM, API_STOP)
    _stop_all(workers, signum, HAND_BACK if signum == signal.SIGINT else grace + 5)
    if running.embedded is not None:
        running.embedded.stop()


def _stop_all(procs: list[subprocess.Popen[bytes]], signum: int, wait: float) -> None:
    """Send ``signum`` to each process still running, wait up to ``wait`` seconds for them all, kill the rest."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signum)
    deadline = time.monotonic() + wait
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(settings: Settings, host: str, port: int, workers: int, choice: RedisChoice, dev: bool = False) -> int:
    """Start everything, wait for SIGINT/SIGTERM (or a child that dies), stop everything. Returns the exit code."""
    if workers < 1:
        raise BadInput(f"workers must be at least 1, got {workers}")
    if dev:
        dev_env(os.environ, settings, host)  # refused before anything starts
    stopping: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        stopping.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    running = start(settings, host, port, workers, choice, dev)
    where = f"embedded, data in {running.embedded.folder}" if running.embedded else running.how
    print(
        f"quoteclip up: page and API at http://{host}:{port}/ · {workers} worker(s) · "
        f"Redis {_shown(running.redis_url)} ({where}) · clips in {settings.storage_dir.resolve()}"
        + (" · --dev: local files and loopback sources allowed" if dev else "")
        + " · Ctrl-C stops",
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
        stop(running, settings.shutdown_grace, stopping[0] if stopping else signal.SIGTERM)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code
