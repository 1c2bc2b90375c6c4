"""Figure 15: a crowd of viewers of one new clip's signed link, on loopback against ``quoteclip serve`` and a real
worker (S3 store): most read the clip at a player's pace, a tenth stop reading after the headers. It reports what
each reading viewer received, the first byte's p50/p95 from the first request, the API process's Redis connections
and memory while they are connected and after they leave, when the idle viewers were let go, and a click on
another (stored) clip's link during the crowd against the same click with no crowd.

The viewers come from ``testkit/viewers.py`` (its idle viewer, and its reading viewer). Every viewer comes from
127.0.0.1, so the API of this figure runs with its per-client caps and its connection cap raised above the crowd
(``caps``); it is an API of its own, started for this figure alone. ``BENCH_VIEWERS=N`` runs it with N viewers."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import multiprocessing
import os
import socket
import statistics
import time
import urllib.parse
from typing import Any

import psutil

from testkit.viewers import Watched, idle_viewer, reading_viewer, sample, sample_and_viewers

from .config import RunConfig
from .links import link
from .report import Reading, Row
from .stack import Stack
from .timing import percentile

PART_CLIENTS = 20  # figure 15f's clients, each asking HLS parts back to back on a kept-alive connection
PART_RATE = 2000  # the part requests a second figure 15f's goal
PACE = 250_000  # bytes a second a reading viewer reads at most (2 Mb/s: a player buffering a 720p clip ahead)
IDLE_SHARE = 10  # one viewer in this many stops after the headers
RCVBUF = 4096  # an idle viewer's receive buffer (the kernel reads little of the clip for it)


def crowd(run: RunConfig) -> int:
    """The viewers: 1,000 (20 in the reduced run); ``BENCH_VIEWERS`` sets another number (a smaller machine's)."""
    return int(os.environ.get("BENCH_VIEWERS") or (20 if run.quick else 1000))


def send_deadline(run: RunConfig) -> float:
    return 3.0 if run.quick else 10.0  # (10: the setting's default; the reduced run waits less)


def caps(run: RunConfig) -> dict[str, str]:
    """The API's settings for the figure: room for the whole crowd from one address, the send deadline."""
    n = crowd(run)
    return {
        "QUOTECLIP_MAX_CONNECTIONS": str(n + 200),
        "QUOTECLIP_CLIENT_CONNECTIONS": str(n + 200),
        "QUOTECLIP_CLIENT_STREAMS": str(n + 50),
        "QUOTECLIP_CLIENT_HELD": str(n + 50),
        "QUOTECLIP_CLIENT_PARTS": str(n * 10 + 200),
        "QUOTECLIP_STREAM_SEND_TIMEOUT": f"{send_deadline(run):g}",
    }


class Sampler:
    """The API process's Redis connections, viewer connections, descriptors and RSS, and the viewers' connections it
    holds (``ESTABLISHED``, by the viewer's port), every 200 ms, sampled in a process of its own: psutil reads the
    process's connections in Python, 50 to 250 ms a sample with a thousand of them, and in this process it would
    hold the interpreter's lock the crowd's event loop (or figure 15f's clients) waits for. ``watch(ports)`` has it
    tell (``all_gone``) once the API holds none of those ports."""

    def __init__(self, pid: int, redis_port: int, api_port: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.all_gone = context.Event()
        self._ready = context.Event()
        self._stop = context.Event()
        self._ports: Any = context.SimpleQueue()
        self._out: Any = context.SimpleQueue()
        args = (pid, redis_port, api_port, self._stop, self._ready, self._ports, self.all_gone, self._out)
        self._process = context.Process(target=_sampling, args=args, daemon=True)
        self.samples: list[tuple[float, dict[str, Any], frozenset[int]]] = []

    def start(self) -> None:
        """The process started, once it has taken its first sample (a spawned process takes a while to start)."""
        self._process.start()
        if not self._ready.wait(60):
            raise SystemExit("bench: the sampling process took no sample within 60 s")

    def watch(self, ports: set[int]) -> None:
        self._ports.put(sorted(ports))

    def stop(self) -> None:
        self._stop.set()
        self.samples = self._out.get()
        self._process.join()

    def peak(self, key: str, since: float = 0.0, until: float = float("inf")) -> Any:
        """The largest of ``key`` sampled from ``since`` to ``until`` (once stopped)."""
        taken = [s[key] for t, s, _ in self.samples if since <= t <= until]
        if not taken:
            raise SystemExit(f"bench: no sample of the API process between {since:.1f} and {until:.1f}")
        return max(taken)

    def gone(self, since: dict[int, float]) -> dict[int, float]:
        """When the API let each port of ``since`` go (the first sample from its time on that no longer holds it)."""
        gone: dict[int, float] = {}
        for port, held in since.items():
            gone_at = next((t for t, _, up in self.samples if t >= held and port not in up), None)
            if gone_at is not None:
                gone[port] = gone_at
        return gone


def _sampling(
    pid: int, redis_port: int, api_port: int, stop: Any, ready: Any, ports: Any, all_gone: Any, out: Any
) -> None:
    """``Sampler``'s process: its samples put on ``out`` once ``stop`` is set."""
    samples: list[tuple[float, dict[str, Any], frozenset[int]]] = []
    watched: set[int] | None = None
    while not stop.is_set():
        now = time.monotonic()
        with contextlib.suppress(psutil.Error):
            taken, up = sample_and_viewers(pid, redis_port, api_port)
            samples.append((now, taken, frozenset(up)))
            ready.set()
            if watched is None and not ports.empty():
                watched = set(ports.get())
            if watched is not None and not watched & up:
                all_gone.set()
        stop.wait(0.2)
    out.put(samples)


CLICK_EVERY = 0.1  # seconds between figure 15e's clicks, during the crowd and idle alike


class Clicks:
    """A stored clip's link asked over and over on its own kept-alive connection (its answer: the 302 to the
    bucket), one every ``CLICK_EVERY`` seconds until stopped, or ``idle(count)`` times at that pace (or back to
    back): the seconds each took. The idle clicks are paced as the clicks during the crowd are: a click that comes
    to an API (and a machine) idle for a tenth of a second takes longer than one straight after another, and
    figure 15e compares like with like. Asked from a process of its own: in this one, the crowd's event loop and
    the samplers would hold the interpreter's lock while a click waits for its answer (up to its 5 ms switch
    interval), a delay of the client's, not the API's."""

    def __init__(self, port: int, path: str) -> None:
        self.port, self.path = port, path
        self.times: list[float] = []
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._answers: Any = context.SimpleQueue()
        self._process = context.Process(
            target=_clicks, args=(port, path, 0, self._stop, self._answers, CLICK_EVERY), daemon=True
        )
        self._context = context

    def idle(self, count: int, every: float = CLICK_EVERY) -> list[float]:
        args = (self.port, self.path, count, None, self._answers, every)
        process = self._context.Process(target=_clicks, args=args)
        process.start()
        times = self._times()
        process.join()
        return times

    def start(self) -> None:
        self._process.start()

    def stop(self) -> None:
        self._stop.set()
        self.times = self._times()
        self._process.join()

    def _times(self) -> list[float]:
        got = self._answers.get()
        if isinstance(got, str):
            raise SystemExit(f"bench: {got}")
        return list(got)


def _clicks(port: int, path: str, count: int, stop: Any, answers: Any, every: float) -> None:
    """``Clicks``' process: ``count`` clicks, or clicks until ``stop`` is set, one every ``every`` seconds (0: back
    to back); their times (or what went wrong) put on ``answers``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times: list[float] = []
    try:
        while (len(times) < count) if count else not stop.is_set():
            t = time.perf_counter()
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            times.append(time.perf_counter() - t)
            if resp.status != 302:
                answers.put(f"the stored clip's link answered {resp.status}")
                return
            if not count:
                stop.wait(every)
            elif every:
                time.sleep(every)
    finally:
        conn.close()
    answers.put(times)


async def reader(port: int, path: str, pace: float = PACE) -> tuple[Watched, Watched | None]:
    """A reading viewer; one answered with the stored clip's redirect then reads the bucket's object."""
    seen = await reading_viewer("127.0.0.1", port, path, pace)
    if seen.status != 302:
        return seen, None
    url = urllib.parse.urlsplit(seen.redirect)
    stored = await reading_viewer(url.hostname or "127.0.0.1", url.port or 80, f"{url.path}?{url.query}", pace)
    return seen, stored


def figures(run: RunConfig, stack: Stack, cold: bool = False) -> list[Row]:
    """Run with an API started with ``caps(run)`` and a worker. ``cold``: the crowd's clip is a new episode's first
    (the source cache emptied, a span no clip has read): 15a alone, for the cold source."""
    n = crowd(run)
    idle_n = n // IDLE_SHARE
    q = run.quote
    pid = stack.procs[0].pid  # (the API: the first process the stack started)
    redis_port = int(stack.env["QUOTECLIP_REDIS_URL"].rsplit(":", 1)[1].split("/")[0])

    base = 0.6 * run.minutes * 60 if cold else 40.0
    other = link(stack, base, q)  # another clip, stored before the crowd: the click during it
    stack.request("GET", other)  # (its stream, to the last byte)
    deadline = time.monotonic() + 120
    while stack.request("GET", other)[0] != 302:
        if time.monotonic() > deadline:
            raise SystemExit("bench: the other clip was not stored within 120 s")
        time.sleep(0.2)
    stack.api.close()  # (the API's connections from here on are the viewers' and the clicks')
    clicks = Clicks(stack.port, other)
    idle_clicks = clicks.idle(100)
    back_to_back = clicks.idle(20, every=0.0)
    time.sleep(1.0)
    before = sample(pid, redis_port, stack.port)

    # a new quote, rendered once the crowd asks for it: warm, half a second after the other, its source's bytes read
    # into the block cache by the other's render (as figure 13's are); cold, a span 30 s on with the cache emptied
    if cold:
        stack.clear_source_cache()
    viral = link(stack, base + (30.0 if cold else 0.5), q)
    received = _received(redis_port)
    sampler = Sampler(pid, redis_port, stack.port)
    sampler.start()

    idle_asked: list[float] = []
    idle_held: dict[int, float] = {}  # an idle viewer's port: when it had its headers

    async def idle_one() -> tuple[int, socket.socket]:
        got = await idle_viewer(stack.port, viral, rcvbuf=RCVBUF, asked=idle_asked)
        idle_held[got[1].getsockname()[1]] = time.monotonic()
        return got

    async def everyone() -> tuple[float, list[tuple[Watched, Watched | None]], list[Any]]:
        # (the idle viewers start with the readers; the first reader reads as fast as it can: its last byte is the
        # stream's end as the API relays it)
        idlers = [asyncio.ensure_future(idle_one()) for _ in range(idle_n)]
        readers = await asyncio.gather(
            reader(stack.port, viral, float("inf")), *(reader(stack.port, viral) for _ in range(n - idle_n - 1))
        )
        idled = await asyncio.gather(*idlers)
        # the first request: the first written, a reader's or an idle viewer's (the crowd's connections are opened
        # before it, by this one client: not the API's time)
        return min([seen.asked for seen, _ in readers if seen.asked] + idle_asked), readers, idled

    clicks.start()
    t0, readers, idlers = asyncio.run(everyone())
    clicks.stop()
    opened = _received(redis_port) - received  # (every client's: the worker's and the samplers' too)
    stream_end = (readers[0][1] or readers[0][0]).last_byte  # (the unpaced reader's; or its stored file's)
    last_byte = max((got or seen).last_byte for seen, got in readers)

    # the idle viewers: when the API let the last of them go (cut, or closed)
    limit = max(last_byte, stream_end + send_deadline(run) + 10.0)
    sampler.watch(set(idle_held))
    sampler.all_gone.wait(max(0.0, limit - time.monotonic()))
    held_then = sample(pid, redis_port, stack.port)
    for _, sock in idlers:
        sock.close()
    time.sleep(3.0)
    sampler.stop()
    after = sample(pid, redis_port, stack.port)
    connected = sampler.peak("rss_mb", t0, last_byte)
    gone = sampler.gone(idle_held)
    let_go = max(gone.values()) if len(gone) == idle_n and idle_n else None

    streamed = [seen for seen, stored in readers if stored is None]
    stored = [got for _, got in readers if got is not None]
    digests = {seen.digest for seen in streamed}
    whole = sum(seen.status == 200 and seen.complete for seen in streamed) + sum(got.complete for got in stored)
    firsts = [(got or seen).first_byte - t0 for seen, got in readers if (got or seen).first_byte]
    p50, p95 = (statistics.median(firsts), percentile(firsts, 0.95)) if firsts else (float("nan"),) * 2
    redis_peak = sampler.peak("redis", t0)
    growth_kb = (connected - before["rss_mb"]) * 1024 / n
    back = after["rss_mb"] <= before["rss_mb"] * 1.1
    during = statistics.median(clicks.times) if clicks.times else float("nan")
    p99_during = percentile(clicks.times, 0.99) if clicks.times else float("nan")
    idle_click = statistics.median(idle_clicks)
    idle_statuses = sorted({status for status, _ in idlers})
    cut_after = (let_go - stream_end) if let_go is not None else None
    readers_n = n - idle_n
    source = (
        "cold source: a new span, the block cache emptied"
        if cold
        else "warm source: its bytes read into the block cache by another clip's render 0.5 s before"
    )
    what = f"{n} viewers of one new {q:g} s clip's signed link, {source} ({readers_n} reading: one at once, the "
    what += f"rest at ≤ {PACE * 8 / 1e6:g} Mb/s; "
    what += f"{idle_n} stopping after the headers), loopback, `quoteclip serve` + a worker"
    first = Reading(
        f"15a{' cold' if cold else ''}. {what}: reading viewers that received the whole clip; the first byte from "
        "the first request",
        f"{whole} of {readers_n} whole ({len(streamed)} streamed, {len(set(digests))} distinct bodies, "
        f"{len(stored)} from the stored file); first byte p50 {p50:.2f} s, p95 {p95:.2f} s over {len(firsts)}",
        "all whole; p95 ≤ 1.5 s",
        whole == readers_n and len(digests) <= 1 and p95 <= 1.5,
    )
    if cold:
        return [first]
    parts = part_requests(run, stack, [other, viral], pid, redis_port)
    return [
        first,
        Reading(
            f"15b. {what}: the connections Redis received while the crowd was served (its "
            "`total_connections_received`, every client's), and the API process's own at their peak (`CLIENT LIST` "
            "by the API's address, sampled every 200 ms)",
            f"{opened} received during the crowd (the worker's job and its relay among them); the API held at most "
            f"{redis_peak} ({before['redis']} before it)",
            f"no connection per viewer: ≤ {max(20, n // 50)} received, the API ≤ 4",
            opened <= max(20, n // 50) and redis_peak <= 4,
        ),
        Reading(
            f"15c. {what}: the API's memory (RSS) per connected viewer, and after they left",
            f"{before['rss_mb']:g} MB before, {connected:g} MB peak while connected: {growth_kb:.0f} KB a viewer; "
            f"{after['rss_mb']:g} MB 3 s after they left ({(after['rss_mb'] / before['rss_mb'] - 1) * 100:+.0f} %)",
            "≤ 64 KB a viewer; back within 10 %",
            growth_kb <= 64 and back,
        ),
        Reading(
            f"15d. {what}: the {idle_n} idle viewers (statuses {idle_statuses}, receive buffer {RCVBUF} B) let go "
            f"by the API, send deadline {send_deadline(run):g} s",
            (
                f"the last let go {cut_after:+.1f} s after the stream's end (an unpaced reader's last byte), "
                f"{let_go - t0:.1f} s after the first request"
                if cut_after is not None and let_go is not None
                else f"{idle_n - len(gone)} still held {limit - stream_end:.0f} s after the stream's end "
                f"({held_then['viewers']} connections held by the API then)"
            )
            + f"; after they left: {after['viewers']} held, {after['fds']} descriptors ({before['fds']} before)",
            "let go within the send deadline; nothing held after",
            cut_after is not None and cut_after <= send_deadline(run) and after["viewers"] == 0,
        ),
        Reading(
            f"15e. {what}: a click on another, stored clip's signed link (the 302), one every {CLICK_EVERY:g} s, "
            "during the crowd and with no crowd (the same link each time: its answer kept in the API's caches)",
            f"during: p50 {during * 1000:.1f} ms, p99 {p99_during * 1000:.1f} ms over {len(clicks.times)}; no crowd: "
            f"p50 {idle_click * 1000:.1f} ms, p99 {percentile(idle_clicks, 0.99) * 1000:.1f} ms over "
            f"{len(idle_clicks)} (back to back: p50 {statistics.median(back_to_back) * 1000:.1f} ms)",
            "p99 ≤ 50 ms during the crowd",
            p99_during <= 0.050,
        ),
        parts,
    ]


def _received(port: int) -> int:
    """Redis's count of the connections it has received since it started."""
    import redis

    counter = redis.Redis(port=port)
    try:
        return int(counter.info("stats")["total_connections_received"])
    finally:
        counter.close()


def part_requests(run: RunConfig, stack: Stack, paths: list[str], pid: int, redis_port: int) -> Reading:
    """Figure 15f: ``PART_CLIENTS`` clients asking the stored clips' HLS parts (each clip's playlist, init segment
    and first fragment in turn, the clips in turn) back to back on kept-alive connections, unpaced, for a few
    seconds: the rate reached and its latency, the statuses, and the connections Redis received meanwhile (its
    ``total_connections_received``, every client's) against the API process's Redis connections at their peak."""
    import redis

    seconds = 1.0 if run.quick else 5.0
    names = ["index.m3u8", "init.mp4", "1.m4s"]
    counter = redis.Redis(port=redis_port)
    received = int(counter.info("stats")["total_connections_received"])
    sampler = Sampler(pid, redis_port, stack.port)
    statuses: dict[int, int] = {}
    took_each: list[float] = []

    async def client(n: int) -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", stack.port)
        done, start = 0, time.monotonic()
        try:
            while time.monotonic() - start < seconds:
                name = names[(n + done) % len(names)]
                path = paths[(n + done // len(names)) % len(paths)]
                asked = time.monotonic()
                writer.write(f"GET {path}/{name} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1])
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                statuses[status] = statuses.get(status, 0) + 1
                took_each.append(time.monotonic() - asked)
                done += 1
        finally:
            writer.close()
        return done

    async def all_clients() -> tuple[float, int]:
        t = time.monotonic()
        counts = await asyncio.gather(*(client(n) for n in range(PART_CLIENTS)))
        return time.monotonic() - t, sum(counts)

    sampler.start()
    took, asked = asyncio.run(all_clients())
    sampler.stop()
    opened = int(counter.info("stats")["total_connections_received"]) - received
    counter.close()
    peak = sampler.peak("redis")
    rate = asked / took
    p99 = percentile(took_each, 0.99) if took_each else float("nan")
    return Reading(
        f"15f. {PART_CLIENTS} clients asking {len(paths)} stored clips' HLS parts (each clip's playlist, init "
        f"segment, first fragment in turn) back to back on kept-alive connections, unpaced, for {seconds:g} s, "
        "loopback, the client on the same 2 cores: the rate reached, and the Redis connections opened meanwhile",
        f"{asked} requests in {took:.1f} s: **{rate:.0f} a second**, p50 "
        f"{statistics.median(took_each) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms (statuses "
        f"{dict(sorted(statuses.items()))}); Redis received {opened} connections meanwhile (every client's); the "
        f"API process held at most {peak}",
        f"≥ {PART_RATE} a second; no connection opened per request",
        opened == 0 and rate >= PART_RATE,
    )
