"""A bounded flood of connections that send half a request's headers, measured from outside the API.

``python -m testkit.flood [--connections 2000] [--silent N] [--cap 1000] [--header-timeout 10] [--tree DIR]``
starts a private Redis and ``quoteclip serve`` (from the tree ``DIR``, this one by default) with
``QUOTECLIP_MAX_CONNECTIONS=--cap`` and ``QUOTECLIP_HEADER_TIMEOUT=--header-timeout``. ``--connections``
connections from loopback open at once, each sending half a request's headers and then nothing, and ``--silent``
more (5 % of them by default) that send nothing at all. Once all of them have connected, a client asks
``GET /healthz`` on a fresh connection every 100 ms, as a load balancer does. It prints how many of the flood's
connections were answered ``503`` as they came (past the cap) and how fast (from their connect, as this one Python
client sees it); when the API closed the ones it held (the last, against the header deadline); the API process's
connections, open file descriptors and memory (RSS) before the flood, once it has connected and 3 s after the API
closed the last of it; and the health checks' statuses and latencies (median, p95) before the flood (as many as fit
in one header deadline, at the same pace), during it (until the API's first close of it), while the API closes it
and in the 3 s after. The whole run is bounded: a flood connection still open ``BOUND`` s past the header deadline
is counted as open and closed by the client; everything started is stopped."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .faces import serving, user_env
from .services import start_private_redis
from .viewers import sample

HALF = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "
ASK = b"GET /healthz HTTP/1.1\r\nHost: x\r\nUser-Agent: flood-check\r\nConnection: close\r\n\r\n"
PAUSE = 0.1  # seconds between two health checks
ASK_TIMEOUT = 5.0  # seconds a health check waits for its whole answer
BOUND = 8.0  # seconds past the header deadline a flood connection is waited for before the client closes it
SETTLE = 0.5  # seconds after the flood has connected that its figures are taken
AFTER = 3.0  # seconds after the API closed the last flood connection that its figures are taken again
FULL = "503 full"  # the cap's answer (api/server.py FULL: Retry-After, no body), told from the app's own 503


def raise_open_files(needed: int) -> tuple[int, int]:
    """This process's soft limit on open files raised towards ``needed`` (up to the hard limit); the API started
    after it inherits it. Returns the limit before and after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


@dataclass
class Ended:
    """What one flood connection saw: ``how`` it ended ("503 full", "closed" by the API without an answer, "answered
    NNN", "open" at the bound, "failed" to connect), when it began connecting, when its bytes were sent and when it
    ended (``time.monotonic``)."""

    silent: bool
    began: float
    sent: float = 0.0
    at: float = 0.0
    how: str = "open"


@dataclass
class Check:
    """One health check: when it began, how it was answered ("200", "503 full", another status, or what failed)
    and how long its whole answer took."""

    began: float
    status: str
    seconds: float


def classify(answer: bytes) -> str:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        return "no answer" if not answer else "garbled"
    headers = {k.strip().lower() for k, _, _ in (h.partition(":") for h in lines[1:])}
    if parts[1] == "503" and "retry-after" in headers and not body:
        return FULL
    return parts[1]


def check(port: int) -> Check:
    """``GET /healthz`` on a fresh connection (blocking: the flood's own event loop does not delay it)."""
    began = time.monotonic()
    answer = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=ASK_TIMEOUT) as sock:
            sock.sendall(ASK)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        status = classify(answer)
    except TimeoutError:
        status = "timed out" if not answer else classify(answer)
    except ConnectionResetError:
        status = "reset" if not answer else classify(answer)
    except OSError as error:
        status = type(error).__name__
    return Check(began, status, time.monotonic() - began)


class Checker(threading.Thread):
    """Health checks every ``PAUSE`` seconds, each on a fresh connection, until ``stop``."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.checks: list[Check] = []
        self.stop = threading.Event()
        self.asking = threading.Lock()  # held while a check's connection is open (the API's figures wait for it)

    def run(self) -> None:
        start = time.monotonic()
        for n in range(10**9):
            if self.stop.wait(max(0.0, start + n * PAUSE - time.monotonic())):
                return
            with self.asking:
                self.checks.append(check(self.port))


async def one(port: int, silent: bool, bound: float, settled: Callable[[], None]) -> Ended:
    """A flood connection: connects, sends half a request's headers (or nothing), calls ``settled`` and waits for the
    API to answer or close it, ``bound`` seconds at most (``settled`` is called once in any case)."""
    loop = asyncio.get_running_loop()
    seen = Ended(silent, time.monotonic())
    sock = socket.socket()
    sock.setblocking(False)
    answer = b""
    try:
        async with asyncio.timeout(bound):
            await loop.sock_connect(sock, ("127.0.0.1", port))
            if not silent:
                await loop.sock_sendall(sock, HALF)
            seen.sent = time.monotonic()
            settled()
            while chunk := await loop.sock_recv(sock, 4096):
                answer += chunk
                if b"\r\n\r\n" in answer:
                    break
        seen.at = time.monotonic()
        seen.how = classify(answer) if answer else "closed"
        if seen.how not in (FULL, "closed"):
            seen.how = f"answered {seen.how}"
    except TimeoutError:
        seen.at, seen.how = time.monotonic(), "open" if seen.sent else "failed"
    except ConnectionResetError:  # (the API's header deadline aborts: a reset)
        seen.at = time.monotonic()
        seen.how = classify(answer) if answer else "closed"
    except OSError:
        seen.at, seen.how = time.monotonic(), "failed"
    finally:
        sock.close()
        if not seen.sent:
            settled()
    return seen


@dataclass
class Result:
    """A flood's figures: what each flood connection saw, the health checks, the API's figures (``sample``) at each
    point, and the moments the flood began and the API closed its last connection."""

    connections: int
    silent: int
    cap: int
    header_timeout: float
    ended: list[Ended] = field(default_factory=list)
    before: list[Check] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    samples: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    flood_began: float = 0.0
    connected: float = 0.0
    first_close: float = 0.0
    last_close: float = 0.0

    def of(self, how: str) -> list[Ended]:
        return [e for e in self.ended if e.how == how]

    @property
    def during(self) -> list[Check]:
        """The health checks while the flood was held, to the API's first close of it."""
        return [c for c in self.checks if c.began < self.first_close]

    @property
    def closing(self) -> list[Check]:
        """The health checks while the API closed the flood, from its first close to its last."""
        return [c for c in self.checks if self.first_close <= c.began < self.last_close]

    @property
    def after(self) -> list[Check]:
        return [c for c in self.checks if c.began >= self.last_close]


def flood(
    port: int,
    connections: int,
    silent: int,
    header_timeout: float,
    look: Callable[[], dict[str, Any]],
    result: Result,
    checker: Checker,
) -> None:
    """Opens the flood at once; once every connection of it has connected and sent its bytes (or failed), takes the
    API's figures (``look``) and starts the health checks; waits for the flood's end."""

    async def run() -> list[Ended]:
        every = connections // silent + 1 if silent else 0  # (the silent ones spread among the others)
        total = connections + silent
        pending = [total]
        ready = asyncio.Event()

        def settled() -> None:
            pending[0] -= 1
            if not pending[0]:
                ready.set()

        result.flood_began = time.monotonic()
        bound = header_timeout + BOUND
        tasks = [
            asyncio.create_task(one(port, bool(every) and n % every == every - 1, bound, settled)) for n in range(total)
        ]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ready.wait(), header_timeout)
        result.connected = time.monotonic()
        await asyncio.sleep(SETTLE)  # (the last ones reach the API)
        result.samples.append(("flood connected", await asyncio.to_thread(look)))
        checker.start()
        return list(await asyncio.gather(*tasks))

    result.ended = asyncio.run(run())
    early = result.header_timeout - 0.05  # (one closed before its deadline made room for a newer one)
    closed = [e.at for e in result.ended if e.how == "open" or (e.how == "closed" and e.at - e.began >= early)]
    result.first_close = min(closed, default=time.monotonic())
    result.last_close = max(closed, default=result.first_close)


def measure(
    port: int, pid: int, connections: int, silent: int, cap: int, header_timeout: float, look: Callable[[], Any]
) -> Result:
    """The flood against the API on ``port`` (process ``pid``); ``look`` takes its figures."""
    result = Result(connections, silent, cap, header_timeout)
    start = time.monotonic()
    for n in range(max(1, round(header_timeout / PAUSE))):  # (as many as fit in one header deadline, at its pace)
        time.sleep(max(0.0, start + n * PAUSE - time.monotonic()))
        result.before.append(check(port))
    result.samples.append(("before the flood", look()))
    checker = Checker(port)
    try:
        flood(port, connections, silent, header_timeout, look, result, checker)
        time.sleep(max(0.0, result.last_close + AFTER - time.monotonic()))
        with checker.asking:  # (not while a health check's own connection is open: it is no flood connection)
            result.samples.append((f"{AFTER:g} s after the last close", look()))
    finally:
        checker.stop.set()
        if checker.is_alive():
            checker.join(ASK_TIMEOUT + 1)
    result.checks = list(checker.checks)
    return result


def quantiles(values: list[float]) -> tuple[float, float]:
    """The median and the 95th percentile (nearest rank)."""
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]


def report(r: Result, out: Callable[[str], None] = print) -> None:
    total = r.connections + r.silent
    out(
        f"{r.connections} half-header + {r.silent} silent connections at once from loopback; "
        f"QUOTECLIP_MAX_CONNECTIONS={r.cap}, QUOTECLIP_HEADER_TIMEOUT={r.header_timeout:g}"
    )
    refused = r.of(FULL)
    if refused:
        med, p95 = quantiles([e.at - e.began for e in refused])
        slowest = max(e.at - e.began for e in refused)
        out(
            f"answered 503 as they came (past the cap): {len(refused)} of {total}, "
            f"{med * 1000:.1f} ms median, {p95 * 1000:.1f} ms p95, {slowest * 1000:.1f} ms slowest after their connect"
        )
    else:
        out(f"answered 503 as they came (past the cap): 0 of {total}")
    early = r.header_timeout - 0.05  # (closed before its deadline: to make room for a newer connection)
    made_room = [e.at - e.began for e in r.of("closed") if e.at - e.began < early]
    if made_room:
        med, p95 = quantiles(made_room)
        out(
            f"closed at once to make room for a newer connection (the one waiting longest for its headers): "
            f"{len(made_room)} of {total}, {med * 1000:.1f} ms median, {max(made_room) * 1000:.1f} ms slowest "
            "after their connect"
        )
    held = [e for e in r.ended if e.how == "open" or (e.how == "closed" and e.at - e.began >= early)]
    for silent, name in ((False, "half-header"), (True, "silent")):
        closed = [e.at - e.began for e in r.of("closed") if e.silent is silent and e.at - e.began >= early]
        if closed:
            med, _ = quantiles(closed)
            out(
                f"{name} connections held, then closed by the API: {len(closed)}; median {med:.2f} s, "
                f"last {max(closed):.2f} s after their connect (header deadline {r.header_timeout:g} s)"
            )
    others = Counter(e.how for e in r.ended if e.how not in (FULL, "closed"))
    out(f"still open {BOUND:g} s past the deadline (closed by the client), failed, other: {dict(others) or 'none'}")
    out(
        f"all connected and sent {r.connected - r.flood_began:.2f} s in; the API took {len(held)} of them "
        f"and closed them from {r.first_close - r.flood_began:.2f} s in to {r.last_close - r.flood_began:.2f} s in"
    )
    out(f"{'the API process':38} {'connections':>11} {'fds':>6} {'RSS MB':>7}")
    for name, found in r.samples:
        out(f"{name:38} {found['viewers']:>11} {found['fds']:>6} {found['rss_mb']:>7}")
    out(f"{'GET /healthz every 100 ms, fresh conn':38} {'count':>5} {'median':>9} {'p95':>9}  statuses")
    for name, checks in (
        ("before the flood", r.before),
        ("flood held (to the API's first close)", r.during),
        ("while the API closes the flood", r.closing),
        (f"{AFTER:g} s after", r.after),
    ):
        if not checks:
            out(f"{name:38} {0:>5}")
            continue
        med, p95 = quantiles([c.seconds for c in checks])
        statuses = ", ".join(f"{s}: {n}" for s, n in Counter(c.status for c in checks).most_common())
        out(f"{name:38} {len(checks):>5} {med * 1000:>6.1f} ms {p95 * 1000:>6.1f} ms  {statuses}")
        for status in sorted({c.status for c in checks}):
            if len({c.status for c in checks}) > 1:
                med, p95 = quantiles([c.seconds for c in checks if c.status == status])
                out(f"{'  of them ' + status:38} {'':>5} {med * 1000:>6.1f} ms {p95 * 1000:>6.1f} ms")


def run(
    connections: int,
    cap: int,
    header_timeout: float,
    silent: int | None = None,
    tree: Path | None = None,
    log: Path | None = None,
    redis_url: str | None = None,
    settings: Mapping[str, str] | None = None,
) -> Result | str:
    """``quoteclip serve`` with this cap and header deadline (and ``settings``, the API's other variables), on the
    Redis at ``redis_url`` or a private one, and the flood against it: its figures, or why it could not run."""
    silent = max(1, connections // 20) if silent is None else silent
    needed = connections + silent + cap + 256
    before, now = raise_open_files(needed)
    if now < needed:
        return f"needs {needed} open files (ulimit -n is {now}, its hard limit too): lower --connections or --cap"
    with tempfile.TemporaryDirectory(prefix="quoteclip-flood-") as tmp, contextlib.ExitStack() as stack:
        folder = Path(tmp)
        stack.callback(restore_open_files, before)
        if redis_url is None:
            started = start_private_redis(folder)
            if started is None:
                return "needs redis-server on the PATH"
            redis_proc, redis_url = started
            stack.callback(redis_proc.wait, 10)
            stack.callback(redis_proc.terminate)
        env = {
            "QUOTECLIP_REDIS_URL": redis_url,
            "QUOTECLIP_STORAGE_DIR": str(folder / "clips"),
            "QUOTECLIP_MAX_CONNECTIONS": str(cap),
            "QUOTECLIP_CLIENT_CONNECTIONS": str(cap * 10),  # (every connection here comes from one address)
            "QUOTECLIP_HEADER_TIMEOUT": f"{header_timeout:g}",
            **(settings or {}),
        }
        full = user_env(env, drop=("QUOTECLIP_", "AWS_"))
        if tree is not None:
            full["PYTHONPATH"] = os.pathsep.join([str(tree.resolve()), full.get("PYTHONPATH", "")])
        redis_port = urlsplit(redis_url).port or 6379
        api_process: list[subprocess.Popen[bytes]] = []
        try:
            with contextlib.chdir(tree or Path.cwd()), serving(full, log=log) as served:
                api_process.append(served.process)
                pid, port = served.process.pid, served.port
                return measure(
                    port, pid, connections, silent, cap, header_timeout, lambda: sample(pid, redis_port, port)
                )
        except subprocess.TimeoutExpired:  # (the API did not stop within 30 s of SIGTERM)
            api_process[0].kill()
            api_process[0].wait()
            return "the API did not stop within 30 s of SIGTERM: killed"


def restore_open_files(soft: int) -> None:
    """This process's soft limit on open files set back to ``soft``."""
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.flood", description=__doc__)
    parser.add_argument("--connections", type=int, default=2000, help="connections that send half a header")
    parser.add_argument("--silent", type=int, default=None, help="connections that send nothing (5 %% more)")
    parser.add_argument("--cap", type=int, default=1000, help="QUOTECLIP_MAX_CONNECTIONS")
    parser.add_argument("--header-timeout", type=float, default=10.0, help="QUOTECLIP_HEADER_TIMEOUT, seconds")
    parser.add_argument("--tree", type=Path, default=None, help="the checkout whose `quoteclip serve` runs")
    parser.add_argument("--log", type=Path, default=None, help="a file for the API's output")
    args = parser.parse_args(argv)
    if args.connections < 1 or args.cap < 1 or args.header_timeout <= 0 or (args.silent or 0) < 0:
        parser.error("--connections and --cap must be at least 1, --header-timeout above 0, --silent not negative")
    result = run(args.connections, args.cap, args.header_timeout, args.silent, args.tree, args.log)
    if isinstance(result, str):
        print(f"python -m testkit.flood: {result}", file=sys.stderr)
        return 2
    report(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
