"""The product's long-running commands started as a user starts them, for the tests: ``quoteclip serve`` on a free
loopback port (``serving``, stopped on leaving) and ``quoteclip up`` with an embedded Redis (``start_up``), each
answering ``/healthz`` (``answers``) before a test talks to it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from testkit.services import free_port, wait_for


def user_env(extra: Mapping[str, str] | None = None, drop: tuple[str, ...] = ("QUOTECLIP_",)) -> dict[str, str]:
    """This process's environment without the variables starting with ``drop`` (the product's settings), then
    ``extra``: what a command started for a test sees."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra or {})
    return env


def answers(base: str) -> bool:
    """Whether the service at ``base`` (``http://127.0.0.1:PORT``) answers ``/healthz`` with 200."""
    try:
        with urllib.request.urlopen(base + "/healthz", timeout=2) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError as exc:  # (503 while starting: its answer closed, not left to the collector)
        exc.close()
        return False
    except OSError:
        return False


class Served(NamedTuple):
    """A running ``quoteclip serve``: its process, its port and its address."""

    process: subprocess.Popen[bytes]
    port: int
    base: str


@contextlib.contextmanager
def serving(env: Mapping[str, str], log: Path | None = None, timeout: float = 30) -> Iterator[Served]:
    """``quoteclip serve`` with exactly ``env`` (see ``user_env``) on a free loopback port, answering ``/healthz``;
    its output in ``log`` (or dropped). Stopped on leaving."""
    port = free_port()
    with open(log, "wb") if log is not None else contextlib.nullcontext(subprocess.DEVNULL) as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "cli", "serve", "--port", str(port)],
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL,
        )
    served = Served(process, port, f"http://127.0.0.1:{port}")
    try:
        wait_for(lambda: answers(served.base), timeout, "quoteclip serve")
        yield served
    finally:
        process.terminate()
        process.wait(timeout=30)


def start_up(folder: Path, **popen: Any) -> tuple[subprocess.Popen[Any], str]:
    """``quoteclip up`` with an embedded Redis and one worker on a free loopback port, as on a machine with only the
    pip install (no Redis URL configured): its clips in ``folder / "clips"``, its cache and temp files in ``folder``,
    sources from loopback allowed. ``popen``: how to start it (its output, process group). Returns the process and
    its address; the caller waits for it to answer (``answers``) and stops it."""
    env = user_env(
        {
            "QUOTECLIP_STORAGE_DIR": str(folder / "clips"),
            "QUOTECLIP_SOURCE_HOSTS": "127.0.0.1",
            "QUOTECLIP_ALLOW_ADDRESSES": "127.0.0.1/32",
            "QUOTECLIP_CACHE_DIR": str(folder / "cache"),
            "TMPDIR": str(folder),
        },
        drop=("QUOTECLIP_", "REDIS_URL"),
    )
    port = free_port()
    argv = [sys.executable, "-m", "cli", "up", "--redis", "embedded", "--port", str(port), "--workers", "1"]
    return subprocess.Popen(argv, env=env, **popen), f"http://127.0.0.1:{port}"
