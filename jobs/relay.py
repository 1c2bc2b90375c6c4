"""The relay of a rendering clip's fragments, from the worker encoding it to the API answering its viewers: a Redis
stream per clip job (``redis_keys.stream``) in the relay's Redis (``QUOTECLIP_STREAM_REDIS_URL``, the queue's by
default), with an index of its fragments beside it (``redis_keys.stream_index``: an HLS playlist's lines).

The worker's side is ``Relay``, the render's ``ClipStream``: the init segment, then each fragment as ffmpeg writes
it (entry ids ``0-1``, ``0-2``, … by the piece's number, each naming its attempt: a job rendered again starts a new
stream), then ``end`` once the render is checked, or ``abort``. While it renders, the stream lives ``LIVE_MS`` past
the worker's last sign of life (one a second), so the stream of a worker killed outright is gone within seconds;
once ended it is kept for the clip's length and ``LINGER`` seconds more, for viewers still reading it, then expires
(the clip is stored by then). The relay holds at most ``QUOTECLIP_STREAM_MAX_MB`` of a clip: past it the oldest
pieces are dropped (the init first), so viewers already streaming go on and later ones wait for the stored clip.

The API's side reads it: ``begin`` (wait for a stream to join from its start), ``follow`` (its pieces until its end,
or ``StreamCut``), ``index`` and ``segment`` (an HLS playlist and its segments). A Redis that fails the relay never
fails the render: the stream stops and the clip is stored as without it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import RedisError
from rq.job import Job

from quoteclip import redis_keys, redis_url
from quoteclip.settings import Settings
from quoteclip.spec import ClipSpec
from renderer.fragments import Piece

from .connection import bulk_queue_name

log = logging.getLogger(__name__)

LIVE_MS = 3000  # a rendering clip's stream expires this long after its worker's last sign of life
BEAT = 1.0  # seconds between the worker's signs of life
# a rendering clip's stream whose worker has missed this much of its life is taken for dead: not joined, and its
# viewers cut (its time to live, read in Redis, says so whatever the clocks of the machines)
MISSED_MS = 1500
LINGER = 30.0  # seconds an ended stream is kept past the clip's length (viewers still reading it)
ABORTED_MS = 10_000  # an aborted stream is kept this long, for its viewers to read why
READ_BLOCK_MS = 1000  # a viewer waits this long for the next pieces before asking whether the stream lives
READ_COUNT = 4  # pieces a viewer reads at once (a few hundred KB)
WAIT_STEP = 0.5  # seconds between looks at the job while a viewer waits for its stream to begin
TIMEOUT = 2.0  # seconds a relay's Redis call may take before the worker stops relaying
WANTED_MS = 5000  # a viewer's wish for a clip's stream (redis_keys.stream_wanted) lasts this long unless renewed


def relay_url(settings: Settings) -> str:
    """The relay's Redis: ``QUOTECLIP_STREAM_REDIS_URL``, else the queue's."""
    return settings.stream_redis_url or settings.redis_url


def entry_id(number: int) -> str:
    """The stream entry of piece ``number`` (0: the init segment, 1…: the fragments)."""
    return f"0-{number + 1}"


# ---- the worker's side -----------------------------------------------------------------------------------------


class Relay:
    """The writing end of one render's stream (a ``ClipStream``): called by the render's fragment reader (``piece``)
    and by the pipeline (``finished``, ``failed``); a heartbeat thread keeps the stream alive while it renders.

    On demand (a job's render: ``relaying``), nothing is written to Redis until a viewer waits for the stream
    (``redis_keys.stream_wanted``, set by ``want``), so a render nobody watches costs what one with streaming off
    costs but for the fragmented copy it keeps: until then the pieces are kept in memory (at most ``max_bytes``),
    and a viewer who comes mid-render has them all relayed at once, from the init segment. (The pieces are written
    from the render's fragment reader, as they come: its FIFO holds several fragments, so ffmpeg does not wait on
    a write; a thread of their own, tried, added its wake-up to the first frame's wait on a loaded machine.)"""

    def __init__(
        self, connection: Redis, job_id: str, duration: float, max_bytes: int, on_demand: bool = False
    ) -> None:
        self.connection = connection
        self.job_id = job_id
        self.key, self.index = redis_keys.stream(job_id), redis_keys.stream_index(job_id)
        self.duration = duration
        self.max_bytes = max_bytes
        self.attempt = secrets.token_hex(4)
        self.state = "waiting"  # → streaming → ended | aborted | broken
        self.pieces = 0  # the next piece's number
        self.kept: deque[tuple[int, int]] = deque()  # (piece number, bytes) of what the relay holds
        self.held = 0
        self.relayed = 0  # bytes relayed in all (the trimmed ones too)
        self.wanted_key = redis_keys.stream_wanted(job_id)
        self.watched = not on_demand  # a viewer has asked for the stream: its pieces are relayed
        self.waiting: list[Piece] = []  # the pieces kept until then
        self.waiting_bytes = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def piece(self, piece: Piece) -> None:
        """Take the next piece: relay it, or (on demand, no viewer yet) keep it."""
        if not self.watched:
            self._keep(piece)
            if not self.waiting or not self._asked():  # (nothing kept: none of it could be joined)
                return
            self.watched = True
            log.info("a viewer waits for clip %s: its stream is relayed", self.job_id)
            kept, self.waiting, self.waiting_bytes = self.waiting, [], 0
            for each in kept:
                self._relay(each)
            return
        self._relay(piece)

    def _keep(self, piece: Piece) -> None:
        if piece.kind == "init":
            self.waiting, self.waiting_bytes = [], 0
        elif not self.waiting:  # (its start was not kept: no viewer could join it)
            return
        self.waiting.append(piece)
        self.waiting_bytes += len(piece.data)
        if self.waiting_bytes > self.max_bytes:  # later viewers wait for the stored clip, as past the relay's cap
            self.waiting, self.waiting_bytes = [], 0

    def _asked(self) -> bool:
        """Whether a viewer waits for this clip's stream (a Redis that fails: as if none did)."""
        if self.state not in ("waiting", "streaming"):
            return False
        try:
            return bool(self.connection.exists(self.wanted_key))
        except RedisError as exc:
            with self._lock:
                self._broke(exc)
            return False

    def _relay(self, piece: Piece) -> None:
        with self._lock:
            if self.state not in ("waiting", "streaming") or (piece.kind != "init" and self.state != "streaming"):
                return
            try:
                if piece.kind == "init":
                    self._begin(piece)
                else:
                    self._add(piece)
            except RedisError as exc:
                self._broke(exc)

    def _begin(self, piece: Piece) -> None:
        with self.connection.pipeline(transaction=True) as pipe:
            pipe.delete(self.key, self.index)  # an earlier attempt's stream, if any
            pipe.xadd(self.key, {"k": "init", "a": self.attempt, "d": piece.data}, id=entry_id(0))
            pipe.hset(self.index, mapping={"attempt": self.attempt, "codecs": piece.codecs, "first": 0})
            pipe.pexpire(self.key, LIVE_MS)
            pipe.pexpire(self.index, LIVE_MS)
            pipe.execute()
        self.pieces = 1
        self._kept(0, len(piece.data))
        self.state = "streaming"
        self._beat = threading.Thread(target=self._beating, name="relay-beat", daemon=True)
        self._beat.start()

    def _add(self, piece: Piece) -> None:
        number = self.pieces
        with self.connection.pipeline(transaction=True) as pipe:
            pipe.xadd(self.key, {"k": "frag", "a": self.attempt, "d": piece.data}, id=entry_id(number))
            pipe.hset(self.index, str(number), f"{piece.start:.6f} {piece.seconds:.6f}")
            pipe.pexpire(self.key, LIVE_MS)
            pipe.pexpire(self.index, LIVE_MS)
            pipe.execute()
        self.pieces += 1
        self._kept(number, len(piece.data))
        if self.held > self.max_bytes:
            self._trim()

    def _kept(self, number: int, size: int) -> None:
        self.kept.append((number, size))
        self.held += size
        self.relayed += size

    def _trim(self) -> None:
        """Drop the oldest pieces until the relay holds at most ``max_bytes`` of the clip (the newest piece stays)."""
        dropped = []
        while self.held > self.max_bytes and len(self.kept) > 1:
            number, size = self.kept.popleft()
            self.held -= size
            dropped.append(number)
        first = self.kept[0][0]
        with self.connection.pipeline(transaction=True) as pipe:
            pipe.xtrim(self.key, minid=entry_id(first), approximate=False)
            if fragments := [str(n) for n in dropped if n > 0]:
                pipe.hdel(self.index, *fragments)
            pipe.hset(self.index, "first", first)
            pipe.execute()
        if 0 in dropped:
            log.info(
                "clip stream %s is over %d MB: its start is dropped, and later viewers wait for the stored clip",
                self.job_id,
                self.max_bytes // 1024**2,
            )

    def _beating(self) -> None:
        while not self._stop.wait(BEAT):
            try:
                with self.connection.pipeline(transaction=False) as pipe:
                    pipe.pexpire(self.key, LIVE_MS)
                    pipe.pexpire(self.index, LIVE_MS)
                    pipe.execute()
            except RedisError:
                pass  # the next piece's write says whether the relay still works

    def finished(self) -> None:
        """The render is checked: the stream's end, kept for its viewers for the clip's length and ``LINGER``."""
        self._end("end", "", math.ceil(self.duration + LINGER) * 1000)

    def failed(self, reason: str) -> None:
        """The render ended without a clip (or is being stopped): viewers' streams are cut, saying why."""
        self._end("abort", reason[:200], ABORTED_MS)

    def _end(self, kind: str, reason: str, keep_ms: int) -> None:
        if kind == "end" and not self.watched and self.waiting and self._asked():  # a viewer came at the very end
            self.watched = True
            kept, self.waiting = self.waiting, []
            for each in kept:
                self._relay(each)
        self.waiting, self.waiting_bytes = [], 0
        self._stop_beat()
        with self._lock:
            if self.state != "streaming":
                if self.state == "waiting":
                    self.state = "aborted" if kind == "abort" else "ended"
                return
            self.state = "ended" if kind == "end" else "aborted"
            try:
                with self.connection.pipeline(transaction=True) as pipe:
                    pipe.xadd(self.key, {"k": kind, "a": self.attempt, "r": reason}, id=entry_id(self.pieces))
                    pipe.hset(self.index, kind, self.pieces)
                    pipe.pexpire(self.key, keep_ms)
                    pipe.pexpire(self.index, keep_ms)
                    pipe.execute()
            except RedisError as exc:
                self._broke(exc)
        if kind == "end":
            log.info(
                "streamed clip %s: %d fragments, %.1f MB relayed, at most %.1f MB held",
                self.job_id,
                self.pieces - 1,
                self.relayed / 1024**2,
                max(self.held, 0) / 1024**2,
            )

    def _broke(self, exc: Exception) -> None:
        log.warning("the clip's stream stopped (the relay's Redis: %s); the clip is stored as usual", exc)
        self.state = "broken"
        self._stop.set()

    def _stop_beat(self) -> None:
        self._stop.set()
        if self._beat is not None and self._beat is not threading.current_thread():
            self._beat.join(timeout=5)

    def close(self) -> None:
        """A stream left without its end (the job stopped some other way) is cut for its viewers."""
        if self.state == "streaming":
            self.failed("the render stopped")
        self._stop_beat()
        self.connection.close()


@contextmanager
def relaying(settings: Settings, job: Job | None, specs: list[ClipSpec]) -> Iterator[Relay | None]:
    """The relay of a job's render, closed when the render ends however it ends; None (nothing relayed) with
    streaming off, without a job, for a batch's job (the bulk queue: nobody plays its clips while they render) and
    for several profiles rendered together. Its fragments are relayed once a viewer asks for them (on demand)."""
    if not settings.stream or job is None or len(specs) != 1 or job.origin == bulk_queue_name(settings):
        yield None
        return
    connection = redis_url.client(relay_url(settings), socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT)
    relay = Relay(connection, job.id, specs[0].duration, settings.stream_max_bytes, on_demand=True)
    try:
        yield relay
    finally:
        relay.close()


# ---- the API's side --------------------------------------------------------------------------------------------


Entry = tuple[int, dict[str, bytes]]  # (piece number, fields)


def _bytes(value: object) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _entries(raw: Any) -> list[Entry]:
    """XRANGE's (or one stream's XREAD) entries as (piece number, fields)."""
    entries = []
    for raw_id, fields in raw or ():
        number = int(_bytes(raw_id).split(b"-")[1]) - 1
        entries.append((number, {_bytes(k).decode(): _bytes(v) for k, v in (fields or {}).items()}))
    return entries


class StreamCut(Exception):
    """A stream ended without its end: the render stopped (failed, killed, handed back to be rendered again) or the
    relay dropped pieces the viewer had not read yet."""


@dataclass(frozen=True)
class Begun:
    """A stream a viewer can join from its start: its attempt, its codecs and its init segment."""

    job_id: str
    attempt: str
    codecs: str
    init: bytes


async def want(redis: AsyncRedis, job_id: str) -> None:
    """Say a viewer waits for the job's stream, for ``WANTED_MS``: its worker relays the clip's fragments once it is
    said (from the start, whenever it is said during the render). ``begin`` says it each time it looks."""
    await redis.set(redis_keys.stream_wanted(job_id), b"1", px=WANTED_MS)


Read = Callable[[str, str, int], Awaitable[list[Any]]]
"""How a stream is read: ``read(key, last, block_ms)`` its entries after ``last`` (at most ``READ_COUNT``), waiting
up to ``block_ms`` for one; none when none came. An API process reads all its clips' streams on one connection
(api/fanout.py ``Reader``); ``reading`` is the plain form, one XREAD on the connection given."""


def reading(redis: AsyncRedis) -> Read:
    async def read(key: str, last: str, block_ms: int) -> list[Any]:
        got: Any = await redis.xread({key: last}, count=READ_COUNT, block=block_ms)
        return list(got[0][1]) if got else []

    return read


async def begin(
    redis: AsyncRedis,
    job_id: str,
    deadline: float,
    rendering: Callable[[], Awaitable[bool]],
    read: Read | None = None,
) -> Begun | None:
    """Wait until the job's stream can be joined from its start (its init segment relayed, and not aborted): the
    stream, or None once the render ends without one (stored, failed, rendered with streaming off) or at
    ``deadline`` (``time.monotonic``). While it waits, the worker is told a viewer waits (``want``). ``redis`` is
    asked short questions; the waits for the stream's first entry go through ``read`` (``reading(redis)``)."""
    read = read or reading(redis)
    key, index = redis_keys.stream(job_id), redis_keys.stream_index(job_id)
    while True:
        await want(redis, job_id)
        first = _entries(await redis.xrange(key, entry_id(0), entry_id(0)))
        if first:
            fields = first[0][1]
            state: Any = await redis.hmget(index, ["abort", "end"])
            live = state[1] is not None or not await _missed(redis, key)
            if fields.get("k") == b"init" and state[0] is None and live:
                codecs = _bytes(await redis.hget(index, "codecs") or b"").decode()
                return Begun(job_id, fields["a"].decode(), codecs, fields["d"])
        left = deadline - time.monotonic()
        if left <= 0 or not await rendering():
            return None
        if first or await redis.exists(key):  # a stream that cannot be joined (aborted, its start dropped)
            await asyncio.sleep(min(left, WAIT_STEP))
        else:  # woken by the stream's first entry
            await read(key, "0-0", max(1, int(min(left, WAIT_STEP) * 1000)))


async def follow(redis: AsyncRedis, begun: Begun, read: Read | None = None) -> AsyncIterator[bytes]:
    """The stream's bytes from its start: the init segment, each fragment as it is relayed, until the stream's end;
    ``StreamCut`` when it ends without it (then a player has to ask again). Its pieces are read through ``read``
    (``reading(redis)``)."""
    read = read or reading(redis)
    key = redis_keys.stream(begun.job_id)
    yield begun.init
    last, expected = entry_id(0), 1
    while True:
        got = await read(key, last, READ_BLOCK_MS)
        if not got:  # all read, and no end yet: is its worker still there?
            if await _missed(redis, key):
                raise StreamCut("the render stopped")
            continue
        for number, fields in _entries(got):
            if fields.get("a", b"").decode() != begun.attempt:
                raise StreamCut("the clip is being rendered again")
            if number != expected:
                raise StreamCut("the relay dropped pieces not yet read")
            kind = fields.get("k")
            if kind == b"end":
                return
            if kind == b"abort":
                raise StreamCut(fields.get("r", b"the render stopped").decode() or "the render stopped")
            yield fields["d"]
            last, expected = entry_id(number), expected + 1


async def _missed(redis: AsyncRedis, key: str) -> bool:
    """Whether a rendering clip's stream is gone, or its worker has missed its signs of life (``MISSED_MS``)."""
    left = await redis.pttl(key)
    return bool(left < 0 or left < LIVE_MS - MISSED_MS)


@dataclass(frozen=True)
class Index:
    """What an HLS playlist says of a stream: its fragments so far (number, start, seconds), whether it has ended,
    and whether its start is still relayed."""

    attempt: str
    codecs: str
    fragments: list[tuple[int, float, float]]
    ended: bool
    aborted: bool
    whole: bool


async def index(redis: AsyncRedis, job_id: str) -> Index | None:
    """The stream's index, None when the job has no stream."""
    raw: Any = await redis.hgetall(redis_keys.stream_index(job_id))
    found = {_bytes(k).decode(): _bytes(v).decode() for k, v in raw.items()}
    if "attempt" not in found:
        return None
    fragments = []
    for name, value in found.items():
        if name.isdigit():
            start, seconds = value.split()
            fragments.append((int(name), float(start), float(seconds)))
    fragments.sort()
    return Index(
        found["attempt"],
        found.get("codecs", ""),
        fragments,
        "end" in found,
        "abort" in found,
        found.get("first", "0") == "0",
    )


async def segment(redis: AsyncRedis, job_id: str, number: int, attempt: str | None = None) -> bytes | None:
    """Piece ``number`` of the job's stream (0: its init segment), None when it is not relayed (not yet, dropped,
    gone, or of another attempt than ``attempt``)."""
    got = _entries(await redis.xrange(redis_keys.stream(job_id), entry_id(number), entry_id(number)))
    if not got:
        return None
    fields = got[0][1]
    if "d" not in fields or (attempt is not None and fields.get("a", b"").decode() != attempt):
        return None
    return fields["d"]
