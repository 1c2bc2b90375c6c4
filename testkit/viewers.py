"""A bounded load of idle viewers on one signed link of a clip being streamed, measured from outside the API.

``python -m testkit.viewers [--viewers 200] [--mb 8] [--tree DIR]`` starts a private Redis, a loopback source,
``quoteclip serve`` (from the tree ``DIR``, this one by default: another checkout measures another version) with a
site key, and writes a clip's stream into the relay as a worker does (jobs/relay.py: its init segment, then ``--mb``
MB of fragments over a few seconds, then its end; no render runs, the link's job stays queued). ``--viewers``
viewers ask for the link at once (after one alone, so that what the API's first request loads is in its
starting figures), read the status line and headers, and stop reading. It prints, for the API
process, its Redis connections, its open file descriptors and its memory (RSS): before the viewers, while they are
connected, once the stream has ended (and the send deadline passed), and after the viewers left; and how many of
the viewers' connections the API still holds at each point."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from redis import Redis

from jobs import relay
from jobs.queue import lookup
from quoteclip import links
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from renderer.fragments import Piece
from storage import LocalStorage

from .faces import serving, user_env
from .services import HttpSource, start_private_redis

SITE, SECRET = "load", "load-secret-0123456789"


def sample(pid: int, redis_port: int, api_port: int) -> dict[str, Any]:
    process = psutil.Process(pid)
    conns = process.net_connections(kind="tcp")
    established = [c for c in conns if c.status == psutil.CONN_ESTABLISHED and c.raddr]
    return {
        "redis": sum(1 for c in established if c.raddr.port == redis_port),
        "viewers": sum(1 for c in established if c.laddr.port == api_port),
        "fds": process.num_fds(),
        "rss_mb": round(process.memory_info().rss / 1024**2, 1),
    }


async def idle_viewer(port: int, path: str) -> tuple[int, socket.socket]:
    """A viewer that reads the status line and headers, then nothing more: its status and its socket."""
    sock = socket.socket()
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, f"GET {path} HTTP/1.1\r\nHost: x\r\nUser-Agent: load\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        got = await loop.sock_recv(sock, 1)  # (a byte at a time: nothing of the body is read)
        if not got:
            break
        head += got
    return int(head.split(b" ", 2)[1] or 0) if head else 0, sock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.viewers", description=__doc__)
    parser.add_argument("--viewers", type=int, default=200)
    parser.add_argument("--mb", type=float, default=8.0, help="MB of fragments the stream relays")
    parser.add_argument("--tree", type=Path, default=None, help="the checkout whose `quoteclip serve` runs")
    parser.add_argument("--after", type=float, default=15.0, help="seconds after the stream's end to look again")
    parser.add_argument("--log", type=Path, default=None, help="a file for the API's output")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="quoteclip-viewers-") as tmp:
        folder = Path(tmp)
        started = start_private_redis(folder)
        if started is None:
            print("python -m testkit.viewers: needs redis-server on the PATH", file=sys.stderr)
            return 2
        redis_proc, redis_url = started
        source = HttpSource(folder)
        (folder / "lv.mp4").write_bytes(os.urandom(4096))
        env = {
            "QUOTECLIP_REDIS_URL": redis_url,
            "QUOTECLIP_STORAGE_DIR": str(folder / "clips"),
            "QUOTECLIP_SOURCE_HOSTS": "127.0.0.1",
            "QUOTECLIP_ALLOW_ADDRESSES": "127.0.0.1/32",
            "QUOTECLIP_SITE_KEYS": f"{SITE}:{SECRET}",
            "QUOTECLIP_LINK_HOLD": "25",
            "QUOTECLIP_CLIENT_STREAMS": str(args.viewers + 10),  # (every viewer here comes from one address)
            "QUOTECLIP_CLIENT_HELD": str(args.viewers + 10),
            "QUOTECLIP_MAX_CONNECTIONS": str(args.viewers + 100),
        }
        clip = {"source": source.url("lv.mp4"), "start": 1.0, "end": 8.0, "caption": "one two", "watermark": "W"}
        spec = build_spec({**clip, "watermark": {"text": "W"}})
        settings = Settings.from_env(env).for_queue()
        job_id = "clip-" + lookup(spec, settings, LocalStorage(settings.storage_dir))[0]
        path = links.sign(clip, SITE, SECRET)
        full = user_env(env, drop=("QUOTECLIP_", "AWS_"))
        if args.tree is not None:
            full["PYTHONPATH"] = os.pathsep.join([str(args.tree.resolve()), full.get("PYTHONPATH", "")])
        redis_port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
        connection = Redis.from_url(redis_url)
        writer = relay.Relay(connection, job_id, 7.0, 96 * 1024**2)
        rows = Rows(args.viewers, args.mb)
        api_process: list[subprocess.Popen[bytes]] = []
        try:
            with contextlib.chdir(args.tree or Path.cwd()), serving(full, log=args.log) as served:
                pid = served.process.pid
                api_process.append(served.process)
                writer.piece(Piece("init", os.urandom(2000), codecs="avc1.64001f,mp4a.40.2"))
                writer.piece(Piece("fragment", os.urandom(100_000), 0.0, 0.3))
                asyncio.run(idle_viewer(served.port, path))[1].close()  # (one first: the API's imports and threads)
                time.sleep(1.0)
                rows.append(("before the viewers (one came)", sample(pid, redis_port, served.port)))

                async def connect_all() -> list[tuple[int, socket.socket]]:
                    return await asyncio.gather(*(idle_viewer(served.port, path) for _ in range(args.viewers)))

                viewers = asyncio.run(connect_all())
                rows.statuses = sorted({status for status, _ in viewers})
                rows.append(("viewers connected", sample(pid, redis_port, served.port)))
                count = max(1, int(args.mb * 1024**2 // 200_000))
                for n in range(count):
                    writer.piece(Piece("fragment", os.urandom(200_000), 0.3 * (n + 1), 0.3))
                    time.sleep(3.0 / count)
                rows.append(("stream relayed, viewers idle", sample(pid, redis_port, served.port)))
                writer.finished()
                time.sleep(args.after)
                rows.append((f"{args.after:g} s after the stream's end", sample(pid, redis_port, served.port)))
                for _, sock in viewers:
                    sock.close()
                time.sleep(3.0)
                rows.append(("3 s after the viewers left", sample(pid, redis_port, served.port)))
        except subprocess.TimeoutExpired:  # (the API did not stop within 30 s of SIGTERM)
            print("the API did not stop within 30 s of SIGTERM: killed", file=sys.stderr)
            api_process[0].kill()
            api_process[0].wait()
        finally:
            writer.close()
            source.server.shutdown()
            redis_proc.terminate()
            redis_proc.wait(10)
    return 0


class Rows:
    """The figures, printed as they are taken (a run that fails later keeps them)."""

    def __init__(self, viewers: int, mb: float) -> None:
        self.viewers, self.mb = viewers, mb
        self.statuses: list[int] = []
        self.headed = False

    def append(self, row: tuple[str, dict[str, Any]]) -> None:
        name, found = row
        if not self.headed:
            self.headed = True
            print(f"{self.viewers} idle viewers of one signed link ({self.mb:g} MB streamed):")
            print(f"{'':32} {'Redis conns':>11} {'API fds':>8} {'RSS MB':>7} {'viewers held':>12}")
        print(
            f"{name:32} {found['redis']:>11} {found['fds']:>8} {found['rss_mb']:>7} {found['viewers']:>12}", flush=True
        )
        if name == "viewers connected":
            print(f"{'(their statuses)':32} {self.statuses}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
