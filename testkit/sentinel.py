"""A Redis primary, its replica and three sentinels watching them, as real processes on loopback: the set a
``redis+sentinel://`` URL names, for the failover tests, started from the configs shipped in deploy/redis/ (their
addresses, ports and folders moved; a sentinel's timings shortened). Test launcher: not part of the installed
package."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from .services import free_port, wait_for

SERVICE = "quoteclip"
DOWN_AFTER_MS = 1000  # a primary silent this long is down for a sentinel; two agreeing start the failover
FAILOVER_TIMEOUT_MS = 5000


@dataclass
class SentinelSet:
    """The servers (by port) and the sentinels of one watched primary, named ``service``."""

    folder: Path
    service: str
    servers: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    sentinels: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    def url(self, db: int = 0) -> str:
        """The ``redis+sentinel://`` URL of the set's primary, database ``db``."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}/{db}"

    def _ask(self, port: int) -> redis.Redis:
        return redis.Redis("127.0.0.1", port, socket_timeout=1, socket_connect_timeout=1)

    def primary_port(self) -> int | None:
        """The primary's port as the sentinels agree on it (every one that answers), None while they do not."""
        seen = set()
        for port in self.sentinels:
            with contextlib.suppress(redis.RedisError), self._ask(port) as sentinel:
                address = sentinel.sentinel_get_master_addr_by_name(self.service)
                seen.add(int(address[1]) if address else None)
        return seen.pop() if len(seen) == 1 else None

    def kill_primary(self) -> int:
        """SIGKILL the current primary (it does not come back); its port."""
        port = self.primary_port()
        assert port is not None, "the sentinels do not agree on a primary"
        proc = self.servers.pop(port)
        proc.kill()
        proc.wait()
        return port

    def wait_for_new_primary(self, old: int, timeout: float = 30) -> int:
        """Until every sentinel names a primary other than ``old`` and that server says it is one: its port."""

        def promoted() -> bool:
            port = self.primary_port()
            if port is None or port == old:
                return False
            with contextlib.suppress(redis.RedisError), self._ask(port) as server:
                return bool(server.info("replication")["role"] == "master")
            return False

        wait_for(promoted, timeout, "the sentinels to promote the replica")
        port = self.primary_port()
        assert port is not None
        return port

    def stop(self) -> None:
        for proc in [*self.sentinels.values(), *self.servers.values()]:
            if proc.poll() is None:
                proc.terminate()
        for proc in [*self.sentinels.values(), *self.servers.values()]:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


SHIPPED = Path(__file__).resolve().parent.parent / "deploy" / "redis"  # the configs docs/scaling.md walks through


def shipped(name: str, changes: list[tuple[str, str]]) -> str:
    """A shipped config (deploy/redis/NAME) with its addresses, ports, folders (and, for the tests, timings) moved:
    each line replaced must be found once, so the shipped file cannot drift from what the tests start."""
    text = (SHIPPED / name).read_text()
    for old, new in changes:
        assert text.count(old) == 1, f"deploy/redis/{name} no longer holds {old!r}: update testkit/sentinel.py"
        text = text.replace(old, new)
    return text


def _server(binary: str, folder: Path, port: int, primary: int | None = None) -> subprocess.Popen[bytes]:
    """The primary (deploy/redis/primary.conf), or a replica of ``primary`` (replica.conf), on loopback."""
    data = folder / f"redis-{port}"
    data.mkdir()
    name = "primary.conf" if primary is None else "replica.conf"
    changes = [
        (f"bind 127.0.0.1 192.0.2.{11 if primary is None else 12}", "bind 127.0.0.1"),
        ("port 6379", f"port {port}"),
        ("dir /var/lib/redis", f"dir {data}"),
    ]
    if primary is not None:
        changes.append(("replicaof 192.0.2.11 6379", f"replicaof 127.0.0.1 {primary}"))
    conf = folder / f"redis-{port}.conf"
    conf.write_text(shipped(name, changes))
    return subprocess.Popen([binary, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _sentinel(binary: str, folder: Path, port: int, service: str, primary: int) -> subprocess.Popen[bytes]:
    conf = folder / f"sentinel-{port}.conf"  # a sentinel rewrites its file with what it learns
    conf.write_text(
        shipped(
            "sentinel.conf",
            [
                ("bind 127.0.0.1 192.0.2.21", "bind 127.0.0.1"),
                ("port 26379", f"port {port}"),
                ("dir /var/lib/redis-sentinel", f"dir {folder}"),
                ("sentinel monitor quoteclip 192.0.2.11 6379 2", f"sentinel monitor {service} 127.0.0.1 {primary} 2"),
                ("down-after-milliseconds quoteclip 5000", f"down-after-milliseconds {service} {DOWN_AFTER_MS}"),
                ("failover-timeout quoteclip 60000", f"failover-timeout {service} {FAILOVER_TIMEOUT_MS}"),
                ("parallel-syncs quoteclip 1", f"parallel-syncs {service} 1"),
            ],
        )
    )
    return subprocess.Popen([binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _ready(sentinels: list[int], service: str) -> bool:
    """Every sentinel sees the primary up, its replica and the two other sentinels."""
    for port in sentinels:
        try:
            with redis.Redis("127.0.0.1", port, socket_timeout=1, socket_connect_timeout=1) as sentinel:
                state: Any = sentinel.sentinel_master(service)
        except redis.RedisError:
            return False
        if state.get("num-other-sentinels") != len(sentinels) - 1 or state.get("num-slaves") != 1:
            return False
        if state.get("is_sdown") or state.get("is_odown"):
            return False
    return True


def start_sentinel_set(folder: Path, service: str = SERVICE, timeout: float = 60) -> SentinelSet:
    """Start a primary, a replica of it and three sentinels (quorum 2), and wait until the replica is in sync
    and every sentinel knows the replica and the others. Stop it with ``stop`` (or use ``sentinel_set``)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not on the PATH")
    made = SentinelSet(folder, service)
    try:
        primary, replica = free_port(), free_port()
        made.servers[primary] = _server(binary, folder, primary)
        wait_for(lambda: _answers(primary), 10, "the primary")
        made.servers[replica] = _server(binary, folder, replica, primary)

        def in_sync() -> bool:
            with contextlib.suppress(redis.RedisError), redis.Redis("127.0.0.1", replica) as server:
                return bool(server.info("replication").get("master_link_status") == "up")
            return False

        wait_for(in_sync, 20, "the replica to sync")
        for _ in range(3):
            port = free_port()
            made.sentinels[port] = _sentinel(binary, folder, port, service, primary)
        wait_for(lambda: _ready(list(made.sentinels), service), timeout, "the sentinels to know one another")
    except BaseException:
        made.stop()
        raise
    return made


def _answers(port: int) -> bool:
    with contextlib.suppress(redis.RedisError), redis.Redis("127.0.0.1", port, socket_connect_timeout=1) as server:
        return bool(server.ping())
    return False


@contextlib.contextmanager
def sentinel_set(folder: Path, service: str = SERVICE) -> Iterator[SentinelSet]:
    """``start_sentinel_set``, stopped when the block ends."""
    made = start_sentinel_set(folder, service)
    try:
        yield made
    finally:
        made.stop()
