"""Figure 15: a crowd of viewers of one new clip's signed link, on loopback against ``quoteclip serve`` and a real
worker (S3 store): most read the clip at a player's pace, a tenth stop reading after the headers. It reports what
each reading viewer received, the first byte's p50/p95 from the first request, the API process's Redis connections
and memory while they are connected and after they leave, when the idle viewers were let go, clicks on distinct
links (stored clips' never asked before, and new clips') during the crowd against the same kind of clicks with no
crowd, and the HLS parts of many stored clips asked as fast as a client can.

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
from .stack import Stack, clip_body
from .timing import percentile

PART_CLIENTS = 20  # figure 15f's clients, each asking HLS parts back to back on a kept-alive connection
PART_RATE = 2000  # the part requests a second figure 15f's goal


def part_clips(run: RunConfig) -> int:
    """Figure 15f's new clips, beside the crowd's: 10 (2 in the reduced run)."""
    return 2 if run.quick else 10


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
        "QUOTECLIP_CLIENT_PARTS": str(max(n * 10, PART_RATE * 10) + 200),
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
    """``Sampler``'s process: its samples put on ``out`` once ``stop`` is set. Each also holds what Redis's own
    ``CLIENT LIST`` says: its clients in all (``listed``) and those at the API process's sockets (``listed_api``)."""
    import redis

    samples: list[tuple[float, dict[str, Any], frozenset[int]]] = []
    watched: set[int] | None = None
    listing = redis.Redis(port=redis_port)
    while not stop.is_set():
        now = time.monotonic()
        with contextlib.suppress(psutil.Error, redis.RedisError):
            ours: set[int] = set()
            taken, up = sample_and_viewers(pid, redis_port, api_port, ours)
            clients = listing.client_list()
            taken["listed"] = len(clients) - 1  # (less this sampler's own)
            taken["listed_api"] = sum(1 for c in clients if int(str(c.get("addr", ":0")).rsplit(":", 1)[1]) in ours)
            samples.append((now, taken, frozenset(up)))
            ready.set()
            if watched is None and not ports.empty():
                watched = set(ports.get())
            if watched is not None and not watched & up:
                all_gone.set()
        stop.wait(0.2)
    listing.close()
    out.put(samples)


CLICK_EVERY = 0.25  # seconds between figure 15e's clicks, during the crowd and idle alike
DISTINCT = 30  # figure 15e's stored clips, each link asked once: as many during the crowd, as many with none
NEW_LINKS = 3  # and its new clips' links among them (each starts a render), during the crowd and with none
STORED_LENGTH = 2.0  # seconds of those clips (what a link's answer costs does not depend on it)


def click_paths(stored: list[str], new: list[str]) -> list[tuple[str, str]]:
    """15e's clicks in their order: the stored links, the new ones spread among them."""
    paths = [("stored", path) for path in stored]
    every = max(1, len(paths) // (len(new) + 1))
    for n, path in enumerate(new):
        paths.insert(min(len(paths), every * (n + 1) + n), ("new", path))
    return paths


class Clicks:
    """Figure 15e's clicks: each of ``paths`` (its kind, "stored" or "new", and its link) asked once, in turn, one
    every ``CLICK_EVERY`` seconds, until all were asked (``run``) or until stopped (``start``, ``stop``). A stored
    clip's link is asked on one kept-alive connection (its answer: the 302 to the bucket), a new clip's on a
    connection of its own, timed to the first byte of its stream. The clicks are paced alike during the crowd and
    with none: a click that comes to an API (and a machine) idle for a moment takes longer than one straight after
    another. Asked from a process of its own: in this one, the crowd's event loop and the samplers would hold the
    interpreter's lock while a click waits for its answer (up to its 5 ms switch interval), a delay of the client's,
    not the API's."""

    def __init__(self, port: int, paths: list[tuple[str, str]]) -> None:
        self.port, self.paths = port, paths
        self.times: dict[str, list[float]] = {}
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._answers: Any = context.SimpleQueue()
        self._process = context.Process(target=_clicks, args=(port, paths, self._stop, self._answers), daemon=True)

    def run(self) -> dict[str, list[float]]:
        self.start()
        self.times = self._times()
        self._process.join()
        return self.times

    def start(self) -> None:
        self._process.start()

    def stop(self) -> dict[str, list[float]]:
        self._stop.set()
        self.times = self._times()
        self._process.join()
        return self.times

    def _times(self) -> dict[str, list[float]]:
        got = self._answers.get()
        if isinstance(got, str):
            raise SystemExit(f"bench: {got}")
        return dict(got)


def _clicks(port: int, paths: list[tuple[str, str]], stop: Any, answers: Any) -> None:
    """``Clicks``' process: each of ``paths`` asked once, one every ``CLICK_EVERY`` seconds, until ``stop`` is
    set; the seconds each kind took (or what went wrong) put on ``answers``."""
    kept = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times: dict[str, list[float]] = {"stored": [], "new": []}
    try:
        for kind, path in paths:
            if stop.is_set():
                break
            conn = kept if kind == "stored" else http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            t = time.perf_counter()
            conn.request("GET", path)
            resp = conn.getresponse()
            if kind == "stored":
                resp.read()
            else:
                resp.read(1)  # (the stream's first byte)
                conn.close()
            times[kind].append(time.perf_counter() - t)
            wanted = 302 if kind == "stored" else 200
            if resp.status != wanted:
                answers.put(f"a {kind} clip's link answered {resp.status}, not {wanted}")
                return
            stop.wait(CLICK_EVERY)
    finally:
        kept.close()
    answers.put(times)


def store(stack: Stack, starts: list[float], length: float) -> list[str]:
    """Clips of ``length`` s at ``starts`` rendered and stored through the API (``POST /clips``, each awaited): the
    paths of their signed links, none of them asked yet."""
    ids = []
    for start in starts:
        status, body = stack.call("POST", "/clips", clip_body(stack, start, length))
        if status not in (200, 202):
            raise SystemExit(f"bench: POST /clips answered {status}: {body}")
        ids.append(body["id"])
    for clip_id in ids:
        deadline = time.monotonic() + 300
        while True:
            _, body = stack.call("GET", f"/clips/{clip_id}?wait=20")
            if body.get("status") == "finished":
                break
            if body.get("status") == "failed" or time.monotonic() > deadline:
                raise SystemExit(f"bench: a clip for figure 15e was not stored: {body}")
    return [link(stack, start, length) for start in starts]


def stored_by(stack: Stack, paths: list[str], within: float = 300.0) -> None:
    """Wait until each of ``paths`` answers with the stored clip (the 302), its stream read to the end first."""
    deadline = time.monotonic() + within
    for path in paths:
        stack.request("GET", path)
        while stack.request("GET", path)[0] != 302:
            if time.monotonic() > deadline:
                raise SystemExit(f"bench: {path} was not stored within {within:g} s")
            time.sleep(0.2)


def click_summary(times: dict[str, list[float]]) -> str:
    return "; ".join(
        f"{kind} p50 {statistics.median(took) * 1000:.1f} ms, p99 {percentile(took, 0.99) * 1000:.1f} ms over "
        f"{len(took)}"
        for kind, took in times.items()
        if took
    )


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
    other = link(stack, base, q)  # another clip, stored before the crowd (its parts asked in 15f)
    stored_by(stack, [other], 120.0)
    distinct = 2 if run.quick else DISTINCT
    during: list[tuple[str, str]] = []
    idle_times: dict[str, list[float]] = {}
    stored_links: list[str] = []
    starts: list[float] = []
    if not cold:  # (15e: clips stored through the API, their links never asked; new clips' links)
        span = 0.1 * run.minutes * 60  # (before the other clip and the crowd's, at 40 s)
        starts = [span + (STORED_LENGTH + 0.5) * i for i in range(2 * distinct + 2 * NEW_LINKS)]
        stored_links = store(stack, starts[: 2 * distinct], STORED_LENGTH)
        new_links = [link(stack, at, STORED_LENGTH) for at in starts[2 * distinct :]]
        stack.api.close()
        idle_paths = click_paths(stored_links[:distinct], new_links[:NEW_LINKS])
        during = click_paths(stored_links[distinct:], new_links[NEW_LINKS:])
        idle_times = Clicks(stack.port, idle_paths).run()
        stored_by(stack, new_links[:NEW_LINKS])  # (their renders ended before the crowd)
    stack.api.close()  # (the API's connections from here on are the viewers' and the clicks')
    time.sleep(1.0)
    before = sample(pid, redis_port, stack.port)

    # a new quote, rendered once the crowd asks for it: warm, half a second after the other, its source's bytes read
    # into the block cache by the other's render (as figure 13's are); cold, a new episode's first clip (a new name
    # of the source: probed afresh, the block cache emptied, so the cut's bytes come from the origin during the crowd)
    if cold:
        stack.clear_source_cache()
    viral = link(stack, base + (30.0 if cold else 0.5), q, source=stack.new_episode() if cold else None)
    sampler = Sampler(pid, redis_port, stack.port)
    sampler.start()
    received = _received(redis_port)

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

    clicks = Clicks(stack.port, during)
    clicks.start()
    t0, readers, idlers = asyncio.run(everyone())
    crowd_times = clicks.stop()
    opened = _received(redis_port) - received  # (every client's: the worker's and the new clips' jobs' too)
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
    listed_api, listed = sampler.peak("listed_api", t0), sampler.peak("listed", t0)
    growth_kb = (connected - before["rss_mb"]) * 1024 / n
    back = after["rss_mb"] <= before["rss_mb"] * 1.1
    stored_during = crowd_times.get("stored") or []
    p99_during = percentile(stored_during, 0.99) if stored_during else float("nan")
    idle_statuses = sorted({status for status, _ in idlers})
    cut_after = (let_go - stream_end) if let_go is not None else None
    readers_n = n - idle_n
    source = (
        "cold source: a new episode's first clip (a new name of the source, probed afresh, the block cache emptied; "
        "a plain media URL, no page to extract)"
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
    # 15f's clips: new ones, each streamed to its end through its link just before (a clip's HLS parts are kept
    # for its length and 30 s more once rendered), and the crowd's
    fresh = [link(stack, starts[-1] + (STORED_LENGTH + 0.5) * (i + 1), STORED_LENGTH) for i in range(part_clips(run))]
    for path in fresh:
        stack.request("GET", path)
    stack.api.close()
    parts = part_requests(run, stack, [viral, *fresh], pid, redis_port)
    return [
        first,
        Reading(
            f"15b. {what}: the connections Redis received while the crowd was served (its "
            "`total_connections_received`, every client's), and those it listed (its `CLIENT LIST`, every 200 ms: "
            "the API process's, by its sockets, and all), at their peak",
            f"{opened} received during the crowd (the worker's jobs and their relays, the clicks' new clips' among "
            f"them); `CLIENT LIST`: the API's at most {listed_api} (its sockets to Redis: {redis_peak}; "
            f"{before['redis']} before the crowd), {listed} clients in all",
            f"no connection per viewer: ≤ {max(20, n // 50)} received, the API ≤ 4",
            opened <= max(20, n // 50) and listed_api <= 4,
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
            f"15e. {what}: clicks on distinct links, each asked once, one every {CLICK_EVERY:g} s, during the crowd "
            f"and with no crowd: stored clips' links never asked before ({STORED_LENGTH:g} s clips stored through "
            f"the API: the 302 to the bucket) and new clips' ({NEW_LINKS} a side: a render each, to the stream's "
            "first byte)",
            f"during: {click_summary(crowd_times) or 'no click'}; no crowd: {click_summary(idle_times)}",
            "stored links: p99 ≤ 50 ms during the crowd",
            p99_during <= 0.050 if stored_during else None,
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
    """Figure 15f: ``PART_CLIENTS`` clients asking the clips' HLS parts (each clip's playlist, init segment and first
    fragment in turn, the clips in turn; each clip streamed to its end shortly before) back to back on kept-alive
    connections, unpaced, for a few seconds: the rate reached and its latency, the statuses, and the connections
    Redis received meanwhile (its ``total_connections_received``, every client's) against the API process's Redis
    connections at their peak."""
    import redis

    seconds = 1.0 if run.quick else 5.0
    names = ["index.m3u8", "init.mp4", "1.m4s"]
    counter = redis.Redis(port=redis_port)
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

    sampler.start()  # (its own connection to Redis opened before the count is read)
    received = int(counter.info("stats")["total_connections_received"])
    took, asked = asyncio.run(all_clients())
    sampler.stop()
    opened = int(counter.info("stats")["total_connections_received"]) - received
    counter.close()
    peak = sampler.peak("redis")
    rate = asked / took
    p99 = percentile(took_each, 0.99) if took_each else float("nan")
    return Reading(
        f"15f. {PART_CLIENTS} clients asking {len(paths)} clips' HLS parts (each clip's playlist, init segment, "
        "first fragment in turn; the crowd's clip and new ones, each streamed to its end just before, so its parts "
        f"are kept) back to back on kept-alive connections, unpaced, for {seconds:g} s, loopback, the client on the "
        "same 2 cores: the rate reached, and the Redis connections opened meanwhile",
        f"{asked} requests in {took:.1f} s: **{rate:.0f} a second**, p50 "
        f"{statistics.median(took_each) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms (statuses "
        f"{dict(sorted(statuses.items()))}); Redis received {opened} connections meanwhile (every client's); the "
        f"API process held at most {peak}",
        f"≥ {PART_RATE} a second, every part answered; no connection opened per request",
        opened == 0 and rate >= PART_RATE and set(statuses) == {200},
    )
