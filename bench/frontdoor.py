"""Figure 17: the front door side by side. The same crowd, the same worker and the same app behind eight doors,
one after the other, each on a clip of its own (a new one, its source's bytes warm):

- 17a. ``quoteclip serve``: uvicorn with api/server.py's protocol (its deadlines, caps and written chunks);
- 17b. the same, two processes behind Debian's nginx with deploy/nginx.conf (its per-address limits raised above
  the crowd, which comes from one address), with the settings docs/deploy.md gives behind a proxy: the deployed
  shape docs/deploy.md describes;
- 17c. uvicorn with its public settings only (bench/doors.py: httptools, uvloop, ``limit_concurrency``), two
  processes behind the same nginx;
- 17d. Granian (``--http1-header-read-timeout``, ``--backpressure``), one process, no proxy;
- 17e–17h. 17b with one of ``quoteclip serve``'s settings changed: Python's own allocator, the collector held back
  for crowds (``gc.freeze``, full collections waiting: on in a bare ``quoteclip serve``, off behind a proxy), no
  memory handed back after a crowd, the API's own access log (on in a bare ``quoteclip serve``, off behind a
  proxy).

For each: figure 15's crowd (the first byte's p50/p95 over the reading viewers, the memory of the processes that
serve the API per viewer while connected and 3 s after they left, the CPU seconds the API's processes and nginx
used while the readers read, when the idle viewers were let go), a client that drips its request's head a byte a
second (when it was closed), and 1,000 connections that send nothing (a health check on a fresh connection every
100 ms while they are held, and when the last was closed)."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from testkit.flood import raise_open_files, restore_open_files
from testkit.nginx import nginx, nginx_binary
from testkit.services import free_port, wait_for
from testkit.viewers import Watched, idle_viewer

from .config import RunConfig
from .links import link
from .report import Reading, Row
from .stack import Stack
from .timing import percentile
from .viewers import IDLE_SHARE, RCVBUF, caps, crowd, reader, send_deadline

DOORS = (
    "serve",
    "serve+nginx",
    "uvicorn+nginx",
    "granian",
    "serve+nginx:pymalloc",
    "serve+nginx:crowd-gc",
    "serve+nginx:no-give-back",
    "serve+nginx:access-log",
)
# the deployed shape with one of `quoteclip serve`'s settings changed: its variables
VARIANTS = {
    "pymalloc": {"PYTHONMALLOC": "pymalloc"},
    "crowd-gc": {"QUOTECLIP_CROWD_GC": "true"},
    "no-give-back": {"QUOTECLIP_GIVE_BACK_MEMORY": "false"},
    "access-log": {"QUOTECLIP_ACCESS_LOG": "true"},
}
DRIP_EVERY = 1.0  # seconds between the dripping client's bytes
DRIP_BOUND = 40.0  # seconds the dripping client waits to be closed
IDLE_BOUND = 40.0  # seconds the idle sockets wait to be closed
HEADER_TIMEOUT = 10.0  # every door's deadline for a request's head (QUOTECLIP_HEADER_TIMEOUT's default)
TARGET = (
    "first byte p95 ≤ 1.5 s; ≤ 128 KB a viewer, back within 10 %; idle viewers let go within the send deadline; "
    f"the dripping head closed within {HEADER_TIMEOUT:g} s; every health check answered"
)


def doors() -> tuple[str, ...]:
    """The doors measured: all of ``DOORS``, or those ``BENCH_DOORS`` names (comma-separated)."""
    named = tuple(d.strip() for d in os.environ.get("BENCH_DOORS", "").split(",") if d.strip())
    unknown = set(named) - set(DOORS)
    if unknown:
        raise SystemExit(f"bench: BENCH_DOORS names {', '.join(sorted(unknown))}: the doors are {', '.join(DOORS)}")
    return named or DOORS


def idle_sockets(run: RunConfig) -> int:
    return 100 if run.quick else 1000


@dataclass
class Door:
    """A front door started: the port viewers ask, the processes that serve the API and the proxy's."""

    name: str
    port: int
    api: list[psutil.Process] = field(default_factory=list)
    proxy: list[psutil.Process] = field(default_factory=list)


def _tree(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    return []


def rss_mb(processes: list[psutil.Process]) -> float:
    total = 0
    for p in processes:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total / 1024**2


def cpu_s(processes: list[psutil.Process]) -> float:
    """The CPU seconds (user and system) these processes have used so far."""
    total = 0.0
    for p in processes:
        with contextlib.suppress(psutil.Error):
            used = p.cpu_times()
            total += used.user + used.system
    return total


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", "/healthz")
        return c.getresponse().status == 200
    return False


@contextlib.contextmanager
def started(door: str, stack: Stack, run: RunConfig, work: Path) -> Iterator[Door]:
    door, _, variant = door.partition(":")
    env = {**stack.env, **caps(run), "QUOTECLIP_HEADER_TIMEOUT": f"{HEADER_TIMEOUT:g}", **VARIANTS.get(variant, {})}
    procs: list[subprocess.Popen[bytes]] = []
    stack_files = contextlib.ExitStack()

    def spawn(argv: list[str], env: dict[str, str]) -> None:
        logs = os.environ.get("BENCH_LOGS")  # (a folder for the doors' output, kept after the run)
        out: Any = subprocess.DEVNULL
        if logs:
            Path(logs).mkdir(parents=True, exist_ok=True)
            out = stack_files.enter_context(open(Path(logs) / f"{door}-{len(procs)}.log", "w"))
        procs.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT if logs else out))

    try:
        if door == "serve":
            port = free_port()
            spawn([sys.executable, "-m", "cli", "serve", "--port", str(port)], env)
            wait_for(lambda: _answers(port), 60, door)
            yield Door(door, port, api=_tree(procs[0].pid))
        elif door == "granian":
            port = free_port()
            granian = shutil.which("granian", path=os.path.dirname(sys.executable)) or "granian"
            argv = [granian, "--interface", "asgi", "--factory", "--host", "127.0.0.1", "--port", str(port)]
            argv += ["--workers", "1", "--http", "1", "--loop", "auto", "--access-log", "--log-level", "warning"]
            argv += ["--http1-header-read-timeout", str(int(HEADER_TIMEOUT * 1000))]
            argv += ["--backpressure", str(crowd(run) + 200), "bench.doors:app"]
            spawn(argv, env)
            wait_for(lambda: _answers(port), 60, door)
            yield Door(door, port, api=_tree(procs[0].pid))
        else:
            binary = nginx_binary()
            if binary is None:
                raise SystemExit("bench: figure 17 needs nginx (apt-get install nginx)")
            ports = [free_port(), free_port()]
            # (behind a proxy as docs/deploy.md says: the proxy's address trusted, the crowd GC and the API's access
            # log off unless asked)
            behind = {
                "QUOTECLIP_CROWD_GC": "false",
                "QUOTECLIP_ACCESS_LOG": "false",
                **env,
                "QUOTECLIP_TRUSTED_PROXIES": "127.0.0.1",
            }
            api_command = ["cli", "serve"] if door == "serve+nginx" else ["bench.doors"]
            for p in ports:
                spawn([sys.executable, "-m", *api_command, "--port", str(p)], behind)
            for p in ports:
                wait_for(lambda p=p: _answers(p), 60, door)  # type: ignore[misc]
            room = crowd(run) + idle_sockets(run) + 200
            changes = [
                ("limit_conn per_addr 32;", f"limit_conn per_addr {room};"),
                ("limit_req zone=links burst=200 nodelay;", f"limit_req zone=links burst={room} nodelay;"),
            ]
            with nginx(binary, work / f"nginx-{door}-{variant or 'as-shipped'}", ports, changes) as (url, master):
                port = int(url.rsplit(":", 1)[1])
                wait_for(lambda: _answers(port), 30, "nginx")
                api = [p for proc in procs for p in _tree(proc.pid)]
                yield Door(door, port, api=api, proxy=_tree(master.pid))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        stack_files.close()


class Peak(threading.Thread):
    """The door's API processes' RSS, sampled every 200 ms: its peak."""

    def __init__(self, door: Door) -> None:
        super().__init__(daemon=True)
        self.door, self.peak, self.done = door, 0.0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            self.peak = max(self.peak, rss_mb(self.door.api))


def held(port: int, clients: set[int]) -> int:
    """How many of these client ports still have a connection to ``port`` established (the server's side)."""
    return sum(
        1
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_ESTABLISHED
        and c.laddr
        and c.laddr.port == port
        and c.raddr
        and c.raddr.port in clients
    )


def let_go(port: int, clients: set[int], bound: float) -> float | None:
    """Seconds until the server holds none of ``clients``' connections (None: some still held at ``bound``)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < bound:
        if not held(port, clients):
            return time.monotonic() - t0
        time.sleep(0.25)
    return None


class LetGo:
    """When the server let the last of ``expected`` idle viewers go (``time.monotonic``, the system's clock), watched
    from their start in a process of its own, as bench/viewers.py's ``Sampler`` is: psutil reads a thousand
    connections in Python, 50 to 250 ms a time, and in the crowd's process it would hold the interpreter's lock the
    crowd's event loop waits for (late first bytes). Each viewer's port is ``add``-ed once it has its headers."""

    def __init__(self, port: int, expected: int, bound: float) -> None:
        context = multiprocessing.get_context("spawn")
        self._ports: Any = context.SimpleQueue()
        self._out: Any = context.SimpleQueue()
        self._ready = context.Event()
        self._process = context.Process(
            target=_letting_go, args=(port, expected, bound, self._ports, self._out, self._ready), daemon=True
        )
        self.gone_at: float | None = None

    def start(self) -> None:
        """The process started, once it has imported what it needs (before the crowd, which it would slow)."""
        self._process.start()
        if not self._ready.wait(60):
            raise SystemExit("bench: the let-go watcher did not start within 60 s")

    def add(self, port: int) -> None:
        self._ports.put(port)

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the last to go (``gone_at`` stays None if they have not)."""
        self._process.join(timeout)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join()
        elif not self._out.empty():
            self.gone_at = self._out.get()


def _letting_go(port: int, expected: int, bound: float, ports: Any, out: Any, ready: Any) -> None:
    held(port, set())  # (psutil's first read, before the crowd)
    ready.set()
    deadline = time.monotonic() + bound
    clients: set[int] = set()
    while time.monotonic() < deadline:
        while not ports.empty():
            clients.add(ports.get())
        if len(clients) >= expected and not held(port, clients):
            out.put(time.monotonic())
            return
        time.sleep(0.25)
    out.put(None)


def the_crowd(run: RunConfig, stack: Stack, door: Door, start: float) -> dict[str, Any]:
    """Figure 15's crowd on a new clip at ``start`` through ``door``."""
    n = crowd(run)
    idle_n = n // IDLE_SHARE
    q = run.quote
    warm = link(stack, start, q)  # another clip first: its render reads the source's bytes into the block cache
    _until_stored(door.port, warm)
    time.sleep(1.0)
    before = rss_mb(door.api)
    viral = link(stack, start + 0.5, q)
    peak = Peak(door)
    peak.start()
    idle_asked: list[float] = []
    watch = LetGo(door.port, idle_n, 180.0)
    watch.start()

    async def idle_one() -> tuple[int, socket.socket]:
        got = await idle_viewer(door.port, viral, rcvbuf=RCVBUF, asked=idle_asked)
        watch.add(got[1].getsockname()[1])
        return got

    async def everyone() -> tuple[float, list[tuple[Watched, Watched | None]], list[tuple[int, socket.socket]]]:
        idlers = [asyncio.ensure_future(idle_one()) for _ in range(idle_n)]
        readers = await asyncio.gather(
            reader(door.port, viral, float("inf")), *(reader(door.port, viral) for _ in range(n - idle_n - 1))
        )
        idled = await asyncio.gather(*idlers)
        return min([seen.asked for seen, _ in readers if seen.asked] + idle_asked), readers, idled

    used = cpu_s(door.api), cpu_s(door.proxy)
    t0, readers, idlers = asyncio.run(everyone())
    used = cpu_s(door.api) - used[0], cpu_s(door.proxy) - used[1]  # (until every reader had the whole clip)
    stream_end = (readers[0][1] or readers[0][0]).last_byte  # (the unpaced reader's; or its stored file's)
    watch.join(max(0.0, stream_end + send_deadline(run) + 15.0 - time.monotonic()))
    cut_after = None if watch.gone_at is None else watch.gone_at - stream_end
    for _, sock in idlers:
        sock.close()
    peak.done.set()
    peak.join()
    time.sleep(3.0)
    after = rss_mb(door.api)
    whole = sum((got.complete if got is not None else seen.status == 200 and seen.complete) for seen, got in readers)
    firsts = [(got or seen).first_byte - t0 for seen, got in readers if (got or seen).first_byte]
    return {
        "whole": whole,
        "readers": n - idle_n,
        "p50": statistics.median(firsts) if firsts else float("nan"),
        "p95": percentile(firsts, 0.95) if firsts else float("nan"),
        "before": before,
        "peak": max(peak.peak, before),
        "after": after,
        "kb": (max(peak.peak, before) - before) * 1024 / n,
        "cut_after": cut_after,
        "proxy_mb": rss_mb(door.proxy),
        "api_cpu_s": used[0],
        "proxy_cpu_s": used[1],
        "idle_statuses": ",".join(str(status) for status in sorted({status for status, _ in idlers})),
    }


def _until_stored(port: int, path: str) -> None:
    deadline = time.monotonic() + 120
    while True:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.request("GET", path)
        status = c.getresponse().status
        c.close()
        if status == 302:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: a clip was not stored within 120 s (its link answered {status})")
        time.sleep(0.3)


def dripping(port: int) -> float | None:
    """A client that sends a request's head a byte a second: seconds until the door closed it or answered it (None:
    neither within ``DRIP_BOUND``)."""
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=DRIP_EVERY) as s:
        for byte in head:
            try:
                s.sendall(bytes([byte]))
                s.recv(1024, socket.MSG_PEEK)  # (waits a second: the close, or an answer such as a 408)
                return time.monotonic() - t0
            except TimeoutError:
                pass
            except OSError:
                return time.monotonic() - t0
            if time.monotonic() - t0 > DRIP_BOUND:
                return None
    return None


def silent(port: int, count: int) -> tuple[int, int, float, float | None]:
    """``count`` connections that send nothing; while they are held, a health check on a fresh connection every
    100 ms for 3 s: (answered 200, asked, their p50 in ms, seconds until the last of them was closed)."""
    socks = []
    for _ in range(count):
        s = socket.socket()
        s.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            s.connect(("127.0.0.1", port))
        socks.append(s)
    t0 = time.monotonic()
    time.sleep(0.5)
    statuses, times = [], []
    while time.monotonic() - t0 < 3.5:
        t = time.perf_counter()
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/healthz")
            statuses.append(c.getresponse().status)
            c.close()
        except OSError:
            statuses.append(0)
        times.append(time.perf_counter() - t)
        time.sleep(0.1)
    ports = set()
    for s in socks:
        with contextlib.suppress(OSError):
            ports.add(s.getsockname()[1])
    waited = time.monotonic()
    gone = let_go(port, ports, IDLE_BOUND)
    for s in socks:
        s.close()
    closed = None if gone is None else waited + gone - t0
    return statuses.count(200), len(statuses), statistics.median(times) * 1000, closed


def figures(run: RunConfig, stack: Stack, work: Path) -> list[Row]:
    """Figure 17 for each door, the worker of ``stack`` shared."""
    n = crowd(run)
    count = idle_sockets(run)
    before_files, now = raise_open_files(n * 3 + count * 3 + 512)
    rows: list[Row] = []
    try:
        for number, door_name in enumerate(DOORS):
            if door_name not in doors():
                continue
            with started(door_name, stack, run, work) as door:
                seen = the_crowd(run, stack, door, 60.0 + 5.0 * number)
                drip = dripping(door.port)
                ok, asked, p50_ms, closed = silent(door.port, count)
            rows.append(reading(run, door_name, number, seen, drip, (ok, asked, p50_ms, closed)))
    finally:
        restore_open_files(before_files)
    return rows


LABELS = {
    "serve": "`quoteclip serve` (uvicorn with api/server.py's protocol), one process, no proxy",
    "serve+nginx": "`quoteclip serve` as above, two processes behind nginx with deploy/nginx.conf (per-address "
    "limits raised above the crowd), `QUOTECLIP_CROWD_GC=false` and `QUOTECLIP_ACCESS_LOG=false` as docs/deploy.md "
    "says behind a proxy",
    "uvicorn+nginx": "uvicorn with its public settings only (uvloop, `limit_concurrency`), two processes behind "
    "nginx with deploy/nginx.conf (per-address limits raised above the crowd)",
    "granian": "Granian 2.8 (`--http1-header-read-timeout`, `--backpressure`), one process, no proxy",
    "serve+nginx:pymalloc": "17b with Python's own allocator (`PYTHONMALLOC=pymalloc`)",
    "serve+nginx:crowd-gc": "17b with the collector held back for crowds (`QUOTECLIP_CROWD_GC=true`, a bare "
    "`quoteclip serve`'s default)",
    "serve+nginx:no-give-back": "17b with no memory handed back (`QUOTECLIP_GIVE_BACK_MEMORY=false`)",
    "serve+nginx:access-log": "17b with the API's own access log (`QUOTECLIP_ACCESS_LOG=true`, a bare `quoteclip "
    "serve`'s default)",
}


def reading(
    run: RunConfig,
    door: str,
    number: int,
    seen: dict[str, Any],
    drip: float | None,
    idle: tuple[int, int, float, float | None],
) -> Reading:
    n = crowd(run)
    ok, asked, p50_ms, closed = idle
    cut = seen["cut_after"]
    back = float(seen["after"] or 0) <= float(seen["before"] or 0) * 1.1
    value = (
        f"{seen['whole']} of {seen['readers']} whole; first byte p50 {seen['p50']:.2f} s, p95 {seen['p95']:.2f} s; "
        f"the API's processes {seen['before']:.0f} MB before, {seen['peak']:.0f} MB peak: {seen['kb']:.0f} KB a "
        f"viewer, {seen['after']:.0f} MB 3 s after they left "
        f"({(float(seen['after'] or 0) / float(seen['before'] or 1) - 1) * 100:+.0f} %)"
        + (f", nginx {seen['proxy_mb']:.0f} MB" if "+nginx" in door else "")
        + f"; CPU while the readers read: the API's processes {seen['api_cpu_s']:.1f} s"
        + (f", nginx {seen['proxy_cpu_s']:.1f} s" if "+nginx" in door else "")
        + f"; idle viewers (statuses {seen['idle_statuses']}) "
        + (f"let go {cut:+.1f} s after the stream's end" if cut is not None else "still held")
        + "; the dripping head "
        + (f"closed after {drip:.1f} s" if drip is not None else f"still open after {DRIP_BOUND:g} s")
        + f"; {idle_sockets(run)} silent sockets: health checks {ok} of {asked} answered 200 (p50 {p50_ms:.1f} ms), "
        + (f"the last closed after {closed:.1f} s" if closed is not None else f"some open after {IDLE_BOUND:g} s")
    )
    met = (
        seen["whole"] == seen["readers"]
        and float(seen["p95"] or 99) <= 1.5
        and float(seen["kb"] or 0) <= 128
        and back
        and cut is not None
        and cut <= send_deadline(run)
        and drip is not None
        and drip <= HEADER_TIMEOUT + 1.0
        and ok == asked
    )
    figure = (
        f"17{'abcdefgh'[number]}. the front door: {LABELS[door]}; {n} viewers of one new {run.quote:g} s clip's signed "
        f"link (warm source; loopback; figure 15's crowd and caps), a client dripping its head a byte a second, "
        f"{idle_sockets(run)} connections that send nothing"
    )
    return Reading(figure, value, TARGET, met)
