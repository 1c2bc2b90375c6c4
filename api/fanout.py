"""What an API process shares among all its requests: its Redis connections, one reader of every clip's stream, and
one look at the store for a crowd asking one link.

A clip being rendered is read from the relay (jobs/relay.py) once per API process, whatever its number of viewers:
the first viewer starts a reader (``Clip``), which waits for the stream to begin, then reads its pieces as they come
and keeps them in memory (at most the relay's own cap, ``QUOTECLIP_STREAM_MAX_MB``); every viewer of the clip is
sent the same pieces from that one copy, each at its own pace (``Clip.outputs``), and none waits for another. A
viewer that falls behind what was relayed since it joined by more than ``QUOTECLIP_STREAM_VIEWER_MB``, or whose
connection takes more than ``QUOTECLIP_STREAM_SEND_TIMEOUT`` for a piece, is cut (api/streams.py). The reader stops
at the stream's end, when it is cut, or when its last viewer leaves. The clips' readers all wait on one connection
(``Reader``: one XREAD naming every stream waited on), whatever the number of clips.

An API process holds ``QUOTECLIP_API_REDIS_CONNECTIONS`` Redis connections in all (4 by default): one for job events
(api/events.py), one for the clips' ``Reader``, and two small pools sharing the rest (``shares``): the threads' one
(``blocking_client``) and the event loop's (``Hub.redis``); a request waits for a free connection rather than
opening one.

The HLS parts of a stream (its init segment and fragments) are immutable once relayed: kept in memory (``Parts``,
bounded) and answered with an ``ETag``; a playlist is built once for each state of its stream. Requests asking the
same link at once share one look at the store and the queue (``Findings``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import hashlib
import logging
import math
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from concurrent.futures import Future
from typing import Any, TypeVar, cast

from cachetools import LRUCache, TTLCache
from redis import BlockingConnectionPool, Redis
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import RedisError
from starlette.concurrency import run_in_threadpool

from jobs import relay
from quoteclip import redis_keys, redis_url
from quoteclip.settings import Settings

log = logging.getLogger(__name__)

POOL_WAIT = 10.0  # seconds a request waits for one of its pool's connections before it fails as Redis failing
BEGIN_STEP = 1.0  # seconds a clip's reader waits for its stream to begin before asking whether its render goes on
PARTS_BYTES = 64 * 1024**2  # the HLS parts an API process keeps in memory, bytes in all (the oldest dropped)
PLAYLISTS = 256  # the playlists an API process keeps built
READER_BLOCK_MS = 1000  # the longest one XREAD of the process's reader waits
READER_IDLE = 30.0  # seconds the reader keeps its connection with no clip waiting
FINDING_KEPT = 1.0  # seconds a link's look at the store and the queue is taken by the requests after it
FINDINGS = 1024  # the looks an API process keeps
INDEX_KEPT = 1.0  # seconds an ended stream's index is taken from memory by its parts' and playlist's requests
INDEXES = 256  # the ended streams' indexes an API process keeps
JOBS_KEPT = 10.0  # seconds the job of a link's clip is taken from memory by its HLS parts' requests
JOBS = 1024  # the links' jobs an API process keeps
T = TypeVar("T")


def give_back_memory() -> None:
    """Hand the memory freed by a stream's end back to the system: glibc keeps freed memory in its heap otherwise,
    and an API process would keep its peak of viewers for good."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # (not glibc)


def shares(total: int) -> tuple[int, int]:
    """An API process's ``QUOTECLIP_API_REDIS_CONNECTIONS`` (``total``) as its two pools' sizes (its threads', its
    event loop's): what is left of it after job events' connection and the clips' reader's, halved (one each at
    the least)."""
    rest = max(2, total - 2)
    return (rest + 1) // 2, rest // 2


def blocking_client(url: str, size: int, **options: Any) -> Redis:
    """A client whose pool holds at most ``size`` connections; a thread wants one waits for it (``POOL_WAIT``).
    Through Sentinel the pool is Sentinel's own, capped at ``size`` (a thread past it fails as Redis failing)."""
    if redis_url.is_sentinel(url):
        return redis_url.client(url, max_connections=size, **options)
    return Redis(connection_pool=NestingPool.from_url(url, max_connections=size, timeout=POOL_WAIT, **options))


class NestingPool(BlockingConnectionPool):
    """redis-py's blocking pool (a thread waits for one of its ``max_connections``), except that a thread already
    holding one of its connections is given another at once, beyond the cap, closed when given back: a thread never
    waits for itself. (rq's enqueue of a job that waits on others reads them while its pipeline watches: with every
    connection held by such a thread, each would wait for the others for good.)"""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held = threading.local()
        self._beyond: set[int] = set()

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        held = getattr(self._held, "count", 0)
        if not held:
            connection = super().get_connection(*args, **kwargs)
        else:
            connection = self.connection_class(**self.connection_kwargs)
            self._beyond.add(id(connection))
            try:
                connection.connect()
            except BaseException:
                self._beyond.discard(id(connection))
                raise
        self._held.count = held + 1
        return connection

    def release(self, connection: Any) -> None:
        self._held.count = max(0, getattr(self._held, "count", 1) - 1)
        if id(connection) in self._beyond:
            self._beyond.discard(id(connection))
            connection.disconnect()
            return
        super().release(connection)


def async_blocking_client(url: str, size: int, **options: Any) -> AsyncRedis:
    """The asyncio form of ``blocking_client``."""
    if redis_url.is_sentinel(url):
        return redis_url.async_client(url, max_connections=size, **options)
    from redis.asyncio import BlockingConnectionPool

    pool = BlockingConnectionPool.from_url(url, max_connections=size, timeout=POOL_WAIT, **options)
    return AsyncRedis(connection_pool=pool)


class Clip:
    """One clip's stream as this API process reads it once for all its viewers: its start (``begun``, once it can
    be joined; ``settled`` set once that is known either way), its pieces as relayed, and how it ended (``done``;
    ``cut`` the reason when it ended without its end)."""

    def __init__(self, hub: Hub, job_id: str) -> None:
        self.hub, self.job_id = hub, job_id
        self.viewers = 0  # requests waiting to join or reading
        self.begun: relay.Begun | None = None
        self.settled = asyncio.Event()
        self.pieces: list[bytes] = []
        self.size = 0
        self.done = False
        self.cut: str | None = None
        self._tick = asyncio.Event()
        self._variants: dict[tuple[bool, bool], Variant] = {}
        self.task: asyncio.Task[None] | None = None

    async def run(self, rendering: Callable[[], Awaitable[bool]]) -> None:
        redis, read = self.hub.redis(), self.hub.reader.read  # (short questions on the pool; waits on the reader)
        try:
            while self.begun is None:
                begun = await relay.begin(redis, self.job_id, time.monotonic() + BEGIN_STEP, rendering, read)
                if begun is not None:
                    self.begun = begun
                elif not self.viewers or not await rendering():
                    return  # no stream to join (or nobody waits for one any more)
            self.settled.set()
            async for piece in relay.follow(redis, self.begun, read):
                self.pieces.append(piece)
                self.size += len(piece)
                self._wake()
                if not self.viewers:
                    self.cut = "its viewers left"
                    return
        except (relay.StreamCut, RedisError, OSError) as exc:
            self.cut = str(exc) or type(exc).__name__
        finally:
            self.done = True
            self.settled.set()
            self._wake()
            self.hub.forget(self)

    def _wake(self) -> None:
        tick, self._tick = self._tick, asyncio.Event()
        tick.set()

    async def changed(self) -> None:
        """Until the next piece comes or the stream ends."""
        await self._tick.wait()

    def outputs(self, kind: tuple[bool, bool], transform: Callable[[], Callable[[bytes], bytes] | None]) -> Variant:
        """The stream as a kind of player is sent it (``transform()`` makes its pieces' transform: api/streams.py
        ``ForPlayers``), made once for all viewers of that kind, up to the pieces relayed so far."""
        variant = self._variants.get(kind)
        if variant is None:
            variant = self._variants[kind] = Variant(transform())
        variant.feed(self.pieces, self.done and self.cut is None)
        return variant

    @contextlib.asynccontextmanager
    async def viewer(self) -> AsyncIterator[Clip]:
        """A viewer counted while it waits or reads (the reader stops once none is left)."""
        self.viewers += 1
        try:
            yield self
        finally:
            self.viewers -= 1


def _entry(raw: object) -> tuple[int, int]:
    """A stream entry's id, as its two numbers (ids order as these do)."""
    ms, _, seq = (raw.decode() if isinstance(raw, bytes) else str(raw)).partition("-")
    return int(ms), int(seq or 0)


class Reader:
    """The API process's one reader of its clips' streams: one connection, one XREAD that waits on every stream a
    clip of this process waits on (``read``, the form jobs/relay.py takes), whatever their number. A clip that
    starts waiting on a stream the XREAD under way does not name wakes it: an entry added to the process's own wake
    stream (``redis_keys.api_wake``), which that XREAD also waits on, through the event loop's pool. Its connection
    is closed once no clip has waited for ``READER_IDLE`` seconds."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.wake = redis_keys.api_wake(uuid.uuid4().hex)
        self.waiting: dict[str, list[tuple[tuple[int, int], asyncio.Future[list[Any]]]]] = {}
        self.asked: dict[str, tuple[int, int]] | None = None  # what the XREAD under way waits on
        self.task: asyncio.Task[None] | None = None
        self.connection: AsyncRedis | None = None
        self._more = asyncio.Event()

    async def read(self, key: str, last: str, block_ms: int) -> list[Any]:
        """The stream ``key``'s entries after ``last`` (at most ``relay.READ_COUNT``), waiting up to ``block_ms``
        for one; none when none came. A failure of the reader's connection is raised to every clip waiting."""
        at = _entry(last)
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        waiters = self.waiting.setdefault(key, [])
        waiters.append((at, future))
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())
        self._more.set()
        try:
            if self.asked is not None and (key not in self.asked or at < self.asked[key]):
                await self._poke()
            return await asyncio.wait_for(future, block_ms / 1000)
        except TimeoutError:
            return []
        finally:
            waiters.remove((at, future))
            if not waiters and self.waiting.get(key) is waiters:
                del self.waiting[key]

    async def _poke(self) -> None:
        try:
            async with self.hub.redis().pipeline(transaction=False) as pipe:
                pipe.xadd(self.wake, {"w": b""}, maxlen=1, approximate=False)
                pipe.pexpire(self.wake, 60_000)
                await pipe.execute()
        except (RedisError, OSError):
            pass  # (the XREAD under way ends within READER_BLOCK_MS anyway)

    async def _run(self) -> None:
        woken = "0-0"
        try:
            while True:
                if not self.waiting:
                    self._more.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._more.wait(), READER_IDLE)
                    if not self.waiting:
                        return
                    continue
                if self.connection is None:
                    url = relay.relay_url(self.hub.settings)
                    self.connection = redis_url.async_client(url, socket_connect_timeout=5)
                asked = {key: min(at for at, _ in waiters) for key, waiters in self.waiting.items()}
                streams: dict[Any, Any] = {self.wake: woken, **{key: f"{ms}-{seq}" for key, (ms, seq) in asked.items()}}
                self.asked = asked
                try:
                    got: Any = await self.connection.xread(streams, count=relay.READ_COUNT, block=READER_BLOCK_MS)
                except (RedisError, OSError) as exc:
                    self._failed(exc)
                    await self._close()
                    await asyncio.sleep(0.1)
                    continue
                finally:
                    self.asked = None
                for raw_key, entries in got or ():
                    key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
                    if key == self.wake:
                        woken = "-".join(map(str, _entry(entries[-1][0])))
                        continue
                    for at, future in self.waiting.get(key, ()):
                        newer = [entry for entry in entries if _entry(entry[0]) > at]
                        if newer and not future.done():
                            future.set_result(newer)
        finally:
            self.asked = None
            await self._close()

    def _failed(self, exc: BaseException) -> None:
        for waiters in self.waiting.values():
            for _, future in waiters:
                if not future.done():
                    future.set_exception(exc)

    async def _close(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            with contextlib.suppress(RedisError, OSError):
                await connection.aclose()


class Variant:
    """The chunks one kind of player is sent, made from the relayed pieces in order (``made``: those fed)."""

    def __init__(self, transform: Callable[[bytes], bytes] | None) -> None:
        self.transform = transform
        self.chunks: list[bytes] = []
        self.size = 0
        self.made = 0
        self.closed = False

    def feed(self, pieces: list[bytes], ended: bool) -> None:
        while self.made < len(pieces):
            piece = pieces[self.made]
            self.made += 1
            self._add(self.transform(piece) if self.transform is not None else piece)
        if ended and not self.closed:
            self.closed = True
            rest = getattr(self.transform, "rest", None)
            if rest is not None:
                self._add(rest())

    def _add(self, chunk: bytes) -> None:
        if chunk:
            self.chunks.append(chunk)
            self.size += len(chunk)


class Parts:
    """HLS parts kept in memory by (job, attempt, number), at most ``limit`` bytes in all, the least recently asked
    for dropped first (cachetools' LRU, sized by the parts' bytes)."""

    def __init__(self, limit: int = PARTS_BYTES) -> None:
        self.limit = limit
        self._kept: LRUCache[tuple[str, str, int], bytes] = LRUCache(limit, getsizeof=len)

    @property
    def size(self) -> int:
        return int(self._kept.currsize)

    def get(self, key: tuple[str, str, int]) -> bytes | None:
        return self._kept.get(key)

    def put(self, key: tuple[str, str, int], data: bytes) -> None:
        if key not in self._kept and len(data) <= self.limit:
            self._kept[key] = data


class Findings:
    """Requests that ask the same thing at once share one answer (made in a worker thread for the first to ask; the
    others wait for it in the event loop, not in a thread each: a crowd's threads would take turns at the
    interpreter's lock with the one making the answer), and the requests of the next ``FINDING_KEPT`` seconds take
    it too: a thousand viewers of a new clip's link cost one look at the store and the queue, not a thousand
    (api/links/first.py). A failure is shared as well (each request raises it) and is not kept."""

    def __init__(self, kept: float = FINDING_KEPT, limit: int = FINDINGS) -> None:
        self.kept, self.limit = kept, limit
        self.made = 0  # answers made, not shared (a test counts them)
        self._lock = threading.Lock()
        self._found: OrderedDict[Hashable, tuple[Future[Any], float]] = OrderedDict()
        self._waits: dict[Hashable, asyncio.Future[Any]] = {}  # an answer under way, as an event loop awaits it
        self._making: set[asyncio.Future[None]] = set()  # the tasks making answers

    async def look(self, key: Hashable, make: Callable[[], T]) -> T:
        """The answer for ``key``: kept, or under way (awaited), or made by ``make`` in a worker thread."""
        now = time.monotonic()
        with self._lock:
            found = self._found.get(key)
            if found is not None and (not found[0].done() or now - found[1] < self.kept):
                future, mine = found[0], False
            else:
                future, mine = Future(), True
                self._found[key] = (future, math.inf)
                self._found.move_to_end(key)
                while len(self._found) > self.limit:
                    self._found.popitem(last=False)
        if mine:  # (made by a task of its own: the first request leaving stops none of it)
            making = asyncio.ensure_future(self._make(key, future, make))
            self._making.add(making)
            making.add_done_callback(self._making.discard)
        if future.done():
            return cast(T, future.result())
        return cast(T, await asyncio.shield(self._awaited(key, future)))  # (one leaving cancels none of it)

    async def _make(self, key: Hashable, future: Future[Any], make: Callable[[], Any]) -> None:
        try:
            result = await run_in_threadpool(make)
        except BaseException as exc:
            with self._lock:
                if self._found.get(key, (None,))[0] is future:
                    del self._found[key]  # (a failure is not kept)
            future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        with self._lock:
            self.made += 1
            if self._found.get(key, (None,))[0] is future:
                self._found[key] = (future, time.monotonic())
        future.set_result(result)

    def _awaited(self, key: Hashable, future: Future[Any]) -> asyncio.Future[Any]:
        """The answer under way as this event loop awaits it: one future of the loop's for all its requests."""
        loop = asyncio.get_running_loop()
        waiting = self._waits.get(key)
        if waiting is None or waiting.get_loop() is not loop or getattr(waiting, "_made_of", None) is not future:
            waiting = self._waits[key] = asyncio.wrap_future(future, loop=loop)
            waiting._made_of = future  # type: ignore[attr-defined]
            waiting.add_done_callback(lambda done: self._waits.pop(key) if self._waits.get(key) is done else None)
        return waiting


def etag(*parts: object) -> str:
    return '"' + hashlib.sha256("\x00".join(map(str, parts)).encode()).hexdigest()[:32] + '"'


class Hub:
    """An API process's shared Redis clients, its clips' readers and its kept HLS parts and playlists."""

    def __init__(self, settings: Settings, rendering: Callable[[str], Awaitable[bool]]) -> None:
        self.settings = settings
        self.rendering = rendering  # whether a job is rendering still (read through the threads' pool)
        self.clips: dict[str, Clip] = {}
        self.parts = Parts()
        # the playlists built, the least recently asked for going first (cachetools' LRU: a hit is recent again)
        self.playlists: LRUCache[tuple[Any, ...], tuple[str, str]] = LRUCache(PLAYLISTS)
        self.builds: dict[str, int] = {"playlist": 0, "part": 0}  # what was made rather than found kept
        self.index_reads = 0  # the streams' indexes read from Redis
        # ended streams' indexes, each for INDEX_KEPT seconds; the links' jobs (by the verified link's object), each
        # for JOBS_KEPT seconds
        self._indexes: TTLCache[str, relay.Index] = TTLCache(INDEXES, INDEX_KEPT, timer=time.monotonic)
        self._index_looks: dict[str, asyncio.Future[relay.Index | None]] = {}
        self._jobs: TTLCache[int, tuple[object, str]] = TTLCache(JOBS, JOBS_KEPT, timer=time.monotonic)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._redis: AsyncRedis | None = None
        self._reader: Reader | None = None

    def redis(self) -> AsyncRedis:
        """The event loop's pool (one per loop: an app run by a test client may run on several, one at a time)."""
        loop = asyncio.get_running_loop()
        if self._redis is None or self._loop is not loop:
            self._loop, self.clips, self._reader, self._index_looks = loop, {}, None, {}
            url = relay.relay_url(self.settings)
            # (through Sentinel a pool does not wait for a free connection: it is given the whole number)
            size = (
                self.settings.redis_connections
                if redis_url.is_sentinel(url)
                else shares(self.settings.redis_connections)[1]
            )
            self._redis = async_blocking_client(url, size, socket_connect_timeout=5)
        return self._redis

    @property
    def reader(self) -> Reader:
        """The event loop's reader of its clips' streams."""
        self.redis()
        if self._reader is None:
            self._reader = Reader(self)
        return self._reader

    async def close(self) -> None:
        """At the app's shutdown: the clips' readers stopped and the event loop's pool closed (on this loop: a pool
        left to the garbage collector after its loop has closed would warn of its unclosed connections)."""
        readers = [clip.task for clip in self.clips.values() if clip.task is not None]
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        self.clips = {}
        reader, self._reader = self._reader, None
        if reader is not None and reader.task is not None and self._loop is asyncio.get_running_loop():
            reader.task.cancel()
            await asyncio.gather(reader.task, return_exceptions=True)
        if self._redis is not None and self._loop is asyncio.get_running_loop():
            await self._redis.aclose(close_connection_pool=True)
        self._redis = self._loop = None

    def clip(self, job_id: str) -> Clip:
        """The clip's reader in this process, started by its first viewer."""
        self.redis()  # (the loop's own readers)
        clip = self.clips.get(job_id)
        if clip is None:
            clip = self.clips[job_id] = Clip(self, job_id)
            clip.task = asyncio.get_running_loop().create_task(clip.run(lambda: self.rendering(job_id)))
        return clip

    def forget(self, clip: Clip) -> None:
        if self.clips.get(clip.job_id) is clip:
            del self.clips[clip.job_id]

    def left(self, clip: Clip) -> None:
        """A viewer of ``clip`` has gone: once a stream that has ended has none, its memory goes back (once its
        last viewer's answer is gone too)."""
        if clip.done and clip.viewers == 0:
            asyncio.get_running_loop().call_later(1.0, give_back_memory)

    async def index(self, job_id: str) -> relay.Index | None:
        """The job's stream index (relay.index), one read from Redis for the requests asking at once; an ended (or
        aborted) stream's is taken from memory for ``INDEX_KEPT`` seconds: a stored clip's HLS parts asked a
        thousand times a second cost no round trip each."""
        kept = self._indexes.get(job_id)
        if kept is not None:
            return kept
        redis = self.redis()
        look = self._index_looks.get(job_id)
        if look is None:
            look = self._index_looks[job_id] = asyncio.ensure_future(relay.index(redis, job_id))
            self.index_reads += 1
            look.add_done_callback(functools.partial(self._index_read, job_id))
        return await asyncio.shield(look)

    def _index_read(self, job_id: str, look: asyncio.Future[relay.Index | None]) -> None:
        if self._index_looks.get(job_id) is look:
            del self._index_looks[job_id]
        if look.cancelled() or look.exception() is not None:
            return
        index = look.result()
        if index is not None and (index.ended or index.aborted):
            self._indexes[job_id] = index

    async def job(self, link: object, make: Callable[[], str]) -> str:
        """The job of a link's clip (``make``, in a worker thread: from its spec and its source's identity), made
        once for ``JOBS_KEPT`` seconds for the verified link ``link`` (api/links/verify.py keeps one object a link)."""
        kept = self._jobs.get(id(link))
        if kept is not None and kept[0] is link:
            return kept[1]
        job_id = await run_in_threadpool(make)
        self._jobs[id(link)] = (link, job_id)  # (the link held: its id is no other's meanwhile)
        return job_id

    def playlist(self, key: tuple[Any, ...], build: Callable[[], str]) -> tuple[str, str]:
        """The playlist of a stream in the state ``key`` names, with its ETag: built once."""
        found = self.playlists.get(key)
        if found is None:
            text = build()
            self.builds["playlist"] += 1
            found = self.playlists[key] = (text, etag(text))
        return found
