"""One extraction per episode, shared: what yt-dlp found on a page (its media formats), cached by the page's
identity so every job of that episode, on any worker, reads the page once.

A site hands out freshly signed media URLs on every extraction; the entry lives no longer than those URLs do
(YouTube's ``expire=`` parameter) and no longer than the operator's cap. Jobs that need the same page at the same
time wait for one extraction. Cookies are never stored: each worker reads the operator's cookies file itself.
Workers share the cache in Redis; the inline CLI, which may have no Redis, keeps it in files under the cache
folder. This module stays light: no yt-dlp import.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from quoteclip import redis_keys

log = logging.getLogger(__name__)

EXPIRY_MARGIN = 120.0  # seconds: an entry is dropped this long before its URLs expire (a job must finish in time)
LOCK_SECONDS = 120  # an extraction holding the lock longer than this is taken for dead
WAIT_STEP = 0.05
GENERIC_EXTRACTORS = {"Generic", "HTML5MediaEmbed"}


@dataclass(frozen=True)
class MediaFormat:
    """One format a page offers, as the fetcher needs it: where, how (``protocol``), with which headers."""

    url: str
    format_id: str
    protocol: str = "https"
    headers: dict[str, str] = field(default_factory=dict)
    filesize: int | None = None
    available_at: float | None = None  # epoch seconds before which the site refuses it (HTTP 403)
    # DASH (SegmentTemplate / SegmentList): the init section (no duration) and each fragment (URL, seconds)
    fragments: tuple[tuple[str, float | None], ...] | None = None

    def content_key(self, extractor: str, video_id: str) -> str:
        """What the bytes are, whatever URL this extraction gave: the block cache's key. A site's extractor names
        its formats for good (YouTube's itags); the generic one, reading any page's ``<video>`` tags, numbers them
        as it finds them, so there the media URL (which such pages name as it is) stays the key."""
        if extractor in GENERIC_EXTRACTORS:
            return self.url
        return f"{extractor}:{video_id}:{self.format_id}:{self.filesize or ''}"


@dataclass(frozen=True)
class Extracted:
    id: str
    title: str
    extractor: str
    duration: float | None
    video: MediaFormat
    audio: MediaFormat | None = None
    height: int | None = None
    # the page's best HLS rendition (video, and audio when apart), when the formats chosen are not HLS: what a clip
    # is read from when the site refuses its plain formats (HTTP 403 without a PO token) or the operator prefers HLS
    hls: tuple[MediaFormat, ...] = ()

    @property
    def family(self) -> str:
        """The format family the chosen formats are read in: ``hls``, ``dash`` or ``https`` (plain files)."""
        if any(f.protocol.startswith("m3u8") for f in self.formats):
            return "hls"
        return "dash" if any(f.fragments is not None for f in self.formats) else "https"

    def as_hls(self) -> Extracted:
        """The same page read from its HLS rendition (``hls``)."""
        assert self.hls, "the page has no HLS rendition"
        return replace(self, video=self.hls[0], audio=self.hls[1] if len(self.hls) > 1 else None, hls=())

    @property
    def segmented(self) -> bool:
        """Read in segments (HLS playlists, DASH fragments), not by byte range."""
        return any(f.protocol.startswith("m3u8") or f.fragments is not None for f in self.formats)

    @property
    def formats(self) -> list[MediaFormat]:
        return [self.video] + ([self.audio] if self.audio is not None else [])

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Extracted:
        data = json.loads(text)
        audio = data.pop("audio")
        hls = tuple(_format(f) for f in data.pop("hls", None) or ())
        return cls(**{**data, "video": _format(data["video"]), "audio": _format(audio) if audio else None, "hls": hls})

    def expires_at(self) -> float | None:
        """The earliest expiry the media URLs carry (``expire=`` epoch seconds, as YouTube signs them)."""
        found = [url_expiry(f.url) for f in self.formats]
        known = [x for x in found if x is not None]
        return min(known) if known else None


def _format(data: dict[str, Any]) -> MediaFormat:
    fragments = data.get("fragments")
    if fragments is not None:
        data = {**data, "fragments": tuple((str(u), d) for u, d in fragments)}
    return MediaFormat(**data)


def url_expiry(url: str) -> float | None:
    query = parse_qs(urlsplit(url).query)
    values = query.get("expire") or query.get("expires")
    if not values:
        # YouTube also puts its parameters in the path: /videoplayback/expire/1700000000/…
        parts = urlsplit(url).path.split("/")
        if "expire" in parts and parts.index("expire") + 1 < len(parts):
            values = [parts[parts.index("expire") + 1]]
    try:
        return float(values[0]) if values else None
    except ValueError:
        return None


class EntryStore(Protocol):
    def get(self, key: str) -> str | None: ...
    def put(self, key: str, value: str, ttl: float) -> None: ...
    def drop(self, key: str, only_if: str | None = None) -> None: ...
    def lock(self, key: str) -> Any: ...  # a context manager: held while one job extracts


class RedisEntries:
    """Entries in Redis, shared by every worker: ``quoteclip:extraction:<hash>`` with the entry's own expiry."""

    def __init__(self, connection: Any) -> None:
        self.redis = connection

    def get(self, key: str) -> str | None:
        raw = self.redis.get(redis_keys.extraction(key))
        return raw.decode() if isinstance(raw, bytes) else raw

    def put(self, key: str, value: str, ttl: float) -> None:
        self.redis.set(redis_keys.extraction(key), value, px=max(1, int(ttl * 1000)))

    def drop(self, key: str, only_if: str | None = None) -> None:
        name = redis_keys.extraction(key)
        if only_if is None or self.get(key) == only_if:
            self.redis.delete(name)

    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        name, token = redis_keys.extraction_lock(key), uuid.uuid4().hex
        deadline = time.monotonic() + LOCK_SECONDS
        while not self.redis.set(name, token, nx=True, ex=LOCK_SECONDS):
            if self.get(key) is not None or time.monotonic() > deadline:
                break  # the other job finished (its entry is there) or died: go on
            time.sleep(WAIT_STEP)
        try:
            yield
        finally:
            if self.redis.get(name) in (token, token.encode()):
                self.redis.delete(name)


_SWEEPS: dict[Path, tuple[int, float]] = {}  # folder → (puts since its last sweep, when it was swept)
_SWEEPS_LOCK = threading.Lock()


class FileEntries:
    """Entries as files under the cache folder (the inline CLI may have no Redis; the API keeps its previews' pages
    here): one JSON file each, holding the entry's expiry; one lock file each, so two CLI renders of one page
    extract once. Bounded: every SWEEP_PUTS puts or SWEEP_SECONDS, expired entries and old lock files are deleted,
    then the oldest entries until the folder holds at most ``max_bytes``."""

    SWEEP_PUTS = 64
    SWEEP_SECONDS = 60.0
    LOCK_KEPT = 600.0  # seconds a lock file is kept after its last use

    def __init__(self, folder: Path, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.folder = folder
        self.max_bytes = max_bytes

    def sweep(self) -> None:
        """Delete expired entries and lock files unused for LOCK_KEPT seconds, then the entries written longest ago
        while the folder holds more than ``max_bytes``."""
        now, kept = time.time(), []
        try:
            listed = list(os.scandir(self.folder))
        except OSError:
            return
        for item in listed:
            try:
                st = item.stat()
                if item.name.endswith(".lock"):
                    if st.st_mtime < now - self.LOCK_KEPT:
                        os.unlink(item.path)
                    continue
                if item.name.startswith(".entry-"):  # a write in progress, or one a dead process left
                    if st.st_mtime < now - self.LOCK_KEPT:
                        os.unlink(item.path)
                    continue
                if item.name.endswith(".json") and self.get(item.name.removesuffix(".json")) is None:
                    os.unlink(item.path)
                    continue
                kept.append((st.st_mtime, st.st_size, item.path))
            except OSError:
                continue
        total = sum(size for _, size, _ in kept)
        for _, size, path in sorted(kept):
            if total <= self.max_bytes:
                break
            Path(path).unlink(missing_ok=True)
            total -= size

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> str | None:
        try:
            data = json.loads(self._path(key).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or float(data.get("until", 0)) <= time.time():
            return None
        value = data.get("value")
        return value if isinstance(value, str) else None

    def put(self, key: str, value: str, ttl: float) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".entry-")
        with os.fdopen(fd, "w") as f:
            json.dump({"until": time.time() + ttl, "value": value}, f)
        os.replace(tmp, self._path(key))
        with _SWEEPS_LOCK:  # one count per folder in this process, whichever FileEntries wrote
            puts, swept = _SWEEPS.get(self.folder, (0, 0.0))
            due = puts + 1 >= self.SWEEP_PUTS or time.monotonic() - swept > self.SWEEP_SECONDS
            _SWEEPS[self.folder] = (0, time.monotonic()) if due else (puts + 1, swept)
        if due:
            self.sweep()

    def drop(self, key: str, only_if: str | None = None) -> None:
        if only_if is None or self.get(key) == only_if:
            self._path(key).unlink(missing_ok=True)

    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        from filelock import FileLock, Timeout

        self.folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.folder / f"{key}.lock"))
        try:
            lock.acquire(timeout=LOCK_SECONDS)
        except Timeout:
            yield
            return
        try:
            yield
        finally:
            lock.release()


@dataclass
class Extractions:
    """A page's extraction through the shared cache. ``extract`` reads the page (yt-dlp); ``made`` counts how
    many times it did, for this job."""

    entries: EntryStore
    identity: str  # the page's identity (sources.identity), so every spelling of one video shares an entry
    variant: str  # which format choice ("final", "preview"): different media URLs
    extract: Callable[[], Extracted]
    cap: float = 3600.0
    made: int = 0

    @property
    def key(self) -> str:
        return hashlib.sha256(f"{self.identity}|{self.variant}".encode()).hexdigest()[:32]

    def get(self) -> Extracted:
        cached = self._cached()
        if cached is not None:
            return cached
        with self.entries.lock(self.key):
            cached = self._cached()  # another job extracted while this one waited
            if cached is not None:
                return cached
            return self._fresh()

    def refresh(self, stale: Extracted) -> Extracted:
        """The page again, after one of ``stale``'s URLs was refused (expired): unless another job already put a
        newer extraction in the cache, drop the entry and extract once."""
        with self.entries.lock(self.key):
            cached = self._cached()
            if cached is not None and cached != stale:
                return cached
            self.entries.drop(self.key)
            return self._fresh()

    def _cached(self) -> Extracted | None:
        raw = self.entries.get(self.key)
        if raw is None:
            return None
        try:
            return Extracted.from_json(raw)
        except (ValueError, TypeError, KeyError):
            self.entries.drop(self.key, only_if=raw)
            return None

    def _fresh(self) -> Extracted:
        found = self.extract()
        self.made += 1
        ttl = self.cap
        expiry = found.expires_at()
        if expiry is not None:
            ttl = min(ttl, expiry - time.time() - EXPIRY_MARGIN)
        if ttl > 0:
            stored = replace(
                found,
                video=_without_cookies(found.video),
                audio=_without_cookies(found.audio),
                hls=tuple(_without_cookies(f) for f in found.hls),
            )
            self.entries.put(self.key, stored.to_json(), ttl)
        return found


@dataclass
class PlainRefusals:
    """Which sites refused their plain formats lately (HTTP 403 on a fresh link: YouTube's ``web`` client without a
    PO token), per extractor, for ``ttl`` seconds: the next clips of that site go to its HLS rendition at once instead
    of being refused first. Kept in the store the extractions are kept in (Redis: every worker learns at once; the
    CLI's files), as an entry of its own that expires by itself."""

    entries: EntryStore
    ttl: float

    @staticmethod
    def key(extractor: str) -> str:
        return "plain-refused-" + hashlib.sha256(extractor.encode()).hexdigest()[:16]

    def refused(self, extractor: str) -> bool:
        return self.ttl > 0 and self.entries.get(self.key(extractor)) is not None

    def remember(self, extractor: str) -> None:
        if self.ttl > 0:
            self.entries.put(self.key(extractor), json.dumps({"extractor": extractor, "at": time.time()}), self.ttl)


def _without_cookies(fmt: MediaFormat | None) -> Any:
    if fmt is None:
        return None
    return replace(fmt, headers={k: v for k, v in fmt.headers.items() if k.lower() != "cookie"})


def entry_store(folder: Path) -> EntryStore:
    """Redis when this runs as a queued job (the worker's connection), else files under ``folder``."""
    from rq import get_current_job

    job = get_current_job()
    if job is not None:
        return RedisEntries(job.connection)
    return FileEntries(folder)
