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
import hashlib
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
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
    return sample_and_viewers(pid, redis_port, api_port)[0]


def sample_and_viewers(
    pid: int, redis_port: int, api_port: int, redis_ports: set[int] | None = None
) -> tuple[dict[str, Any], set[int]]:
    """The API process's Redis connections, viewer connections, descriptors and RSS; and its viewers' ports (the
    clients' end of each connection to ``api_port`` it holds ``ESTABLISHED``). ``redis_ports``, when given, gets
    its own end of each of its connections to Redis (the addresses Redis's ``CLIENT LIST`` names it by)."""
    process = psutil.Process(pid)
    conns = process.net_connections(kind="tcp")
    established = [c for c in conns if c.status == psutil.CONN_ESTABLISHED and c.raddr]
    viewers = {c.raddr.port for c in established if c.laddr.port == api_port}
    if redis_ports is not None:
        redis_ports.update(c.laddr.port for c in established if c.raddr.port == redis_port)
    return {
        "redis": sum(1 for c in established if c.raddr.port == redis_port),
        "viewers": len(viewers),
        "fds": process.num_fds(),
        "rss_mb": round(process.memory_info().rss / 1024**2, 1),
    }, viewers


async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    """Until ``sock`` has bytes to read (or its end)."""
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(sock.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(sock.fileno())


async def idle_viewer(
    port: int, path: str, rcvbuf: int | None = None, asked: list[float] | None = None
) -> tuple[int, socket.socket]:
    """A viewer that reads the status line and headers, then nothing more: its status and its socket. With
    ``rcvbuf``, its socket's receive buffer is that small (so the kernel does not read the clip for it); with
    ``asked``, when its request was written is added to it (``time.monotonic``). The head is found by peeking at
    what has come, then read to its end alone: nothing of the body is read."""
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    if asked is not None:
        asked.append(time.monotonic())
    await loop.sock_sendall(sock, f"GET {path} HTTP/1.1\r\nHost: x\r\nUser-Agent: load\r\n\r\n".encode())
    head = b""
    while True:
        await _readable(loop, sock)
        try:
            seen = sock.recv(HEAD_PEEK, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            break
        end = seen.find(b"\r\n\r\n")
        if end >= 0:
            head = sock.recv(end + 4)
            break
        if not seen or len(seen) >= HEAD_PEEK:
            head = seen
            break
        await asyncio.sleep(0.01)  # (the head's start is there, its end not yet: the socket stays readable)
    return int(head.split(b" ", 2)[1] or 0) if head else 0, sock


HEAD_PEEK = 16 * 1024  # bytes an idle viewer looks at for the end of the head
READ = 64 * 1024  # bytes a reading viewer reads at a time (and hashes at a time)
# Linux's option that stamps each received segment with the time it came (a struct timespec, CLOCK_REALTIME);
# Python's socket module does not name it
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


@dataclass
class Watched:
    """What a reading viewer saw: its status, when its request was written, when its first byte of the body came and
    its last (``time.monotonic``), the body's bytes, their SHA-256 and whether the body ended as it should (a
    chunked body's last chunk, or its whole ``Content-Length``); ``redirect`` is the ``Location`` of a ``302`` (a
    clip stored by then). The first byte's time is when the kernel received the segments the read that took it
    took (``SO_TIMESTAMPNS``: the last of them, so never before the byte came), not when this process, which reads
    for a thousand viewers at once, got round to it; ``stamped`` says whether the kernel stamped it (else it is the
    time it was read)."""

    status: int = 0
    asked: float = 0.0
    first_byte: float = 0.0
    last_byte: float = 0.0
    size: int = 0
    digest: str = ""
    complete: bool = False
    redirect: str = ""
    stamped: bool = False


LINE_MAX = 4096  # bytes a chunk's size line (its extensions too) or a trailer's line may hold


class _Chunked:
    """A chunked body's decoder: ``feed`` gives the body's bytes among what came; ``ended`` once its last chunk
    (and the blank line after it) has come. Raises ValueError on a malformed chunk size."""

    def __init__(self) -> None:
        self.line = b""
        self.left = -1  # bytes of the current chunk's data still to come (-1: a size line is due)
        self.crlf = 0  # bytes of the CRLF after a chunk's data still to come
        self.last = False  # the zero-size chunk seen: its trailer's blank line is due
        self.ended = False

    def feed(self, data: memoryview) -> list[memoryview]:
        out: list[memoryview] = []
        at = 0
        while at < len(data) and not self.ended:
            if self.crlf:
                take = min(self.crlf, len(data) - at)
                self.crlf -= take
                at += take
            elif self.left > 0:
                take = min(self.left, len(data) - at)
                out.append(data[at : at + take])
                self.left -= take
                at += take
                if not self.left:
                    self.left, self.crlf = -1, 2
            else:
                window = bytes(data[at : at + LINE_MAX])
                end = window.find(b"\n")
                if end < 0:  # (the line goes on in the next read: what is left of this one is all of it)
                    if len(window) >= LINE_MAX or len(self.line) + len(window) > LINE_MAX:
                        raise ValueError(f"a chunk's size line or trailer line over {LINE_MAX} bytes")
                    self.line += window
                    break
                line, self.line = (self.line + bytes(data[at : at + end])).strip(), b""
                at += end + 1
                if self.last:
                    self.ended = not line  # (a trailer's header lines skipped; the blank one ends the body)
                    continue
                size = int(line.split(b";")[0] or b"0", 16)
                if size == 0:
                    self.last = True
                else:
                    self.left = size
        return out


async def reading_viewer(host: str, port: int, path: str, pace: float) -> Watched:
    """A viewer that reads the whole answer to ``GET path`` at no more than ``pace`` bytes a second (a player filling
    its buffer), decoding a chunked body; a ``302`` is returned as it is (its ``redirect``). Its reads go into one
    buffer of its own (``READ`` bytes at a time), as a player's would."""
    seen = Watched()
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    with contextlib.suppress(OSError):  # (where the kernel does not stamp: the time it is read)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.setblocking(False)
    buffer = bytearray(READ)
    view = memoryview(buffer)
    ancillary = socket.CMSG_SPACE(16)
    try:
        await loop.sock_connect(sock, (host, port))
        seen.asked = time.monotonic()
        await loop.sock_sendall(sock, f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: load\r\n\r\n".encode())

        async def read() -> tuple[int, float, bool]:
            """Bytes read into ``buffer`` (0 at the end), when the kernel received them (monotonic), and whether it
            said so (else: when they were read)."""
            while True:
                try:
                    n, anc, _, _ = sock.recvmsg_into([view], ancillary)
                except (BlockingIOError, InterruptedError):
                    await _readable(loop, sock)
                    continue
                now = time.monotonic()
                at, stamped = now, False
                for level, kind, data in anc:
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
                        sec, nsec = struct.unpack("qq", data[:16])
                        # the wall clock's time on the monotonic one: read in this order, a pause between the two
                        # puts the stamp later, never earlier
                        wall = time.time()
                        at, stamped = min(now, sec + nsec / 1e9 - (wall - time.monotonic())), True
                return n, at, stamped

        head = b""
        while True:
            n, at, stamped = await read()
            if not n:
                raise ConnectionError("closed before the head's end")
            head += bytes(view[:n])
            if b"\r\n\r\n" in head:
                break
            if len(head) > 65536:
                raise ValueError("a head over 64 KiB")
        head, _, rest = head.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        seen.status = int(lines[0].split(" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
        if seen.status == 302:
            seen.redirect = headers.get("location", "")
            return seen
        chunked = _Chunked() if headers.get("transfer-encoding", "").lower() == "chunked" else None
        length = None if chunked is not None else int(headers.get("content-length", "0"))
        digest = hashlib.sha256()
        began = time.monotonic()
        data = memoryview(rest)
        while True:
            pieces = chunked.feed(data) if chunked is not None else [data[: max(0, (length or 0) - seen.size)]]
            for piece in pieces:
                if len(piece) and not seen.first_byte:
                    seen.first_byte, seen.stamped = at, stamped
                digest.update(piece)
                seen.size += len(piece)
            if chunked.ended if chunked is not None else seen.size >= (length or 0):
                seen.complete = True
                break
            ahead = seen.size / pace - (time.monotonic() - began)  # (never faster than the pace)
            if ahead > 0:
                await asyncio.sleep(ahead)
            n, at, stamped = await read()
            if not n:
                break  # (cut: ``complete`` stays false)
            data = view[:n]
        seen.last_byte = time.monotonic()
        seen.digest = digest.hexdigest()
    except (ConnectionError, ValueError, IndexError, OSError):
        seen.last_byte = time.monotonic()  # (cut: ``complete`` stays false)
    finally:
        sock.close()
    return seen


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
            "QUOTECLIP_CLIENT_CONNECTIONS": str(args.viewers + 100),
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
