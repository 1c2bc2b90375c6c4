"""A remote media file read by byte range through the block cache, as a seekable file for PyAV.

An origin that ignores Range (it answers 200 with the whole file, as Python's ``http.server`` does) is read once,
from its first byte to its last, into the block cache, and never again for the next range: one read at a time
(the others wait for its blocks), refused at once when the file is over what the job may fetch or over half the
cache."""

from __future__ import annotations

import io
import logging
import threading
from collections import deque
from collections.abc import Callable
from contextlib import ExitStack

from quoteclip.errors import MACHINE_ERRNOS, MachineFault, QuoteclipError, SourceLinkExpired, SourceUnavailable

from .cache import LOCK_WAIT, WHOLE, BlockCache
from .http import Fetcher, LinkRefused, RangeResponse

log = logging.getLogger(__name__)

MAX_RUN = 8  # blocks fetched in one request at most
READ_AHEAD = 4  # blocks fetched past the end of a sequential read (ffmpeg reads on): fewer round trips


class RemoteFile:
    """``content_key``: what the bytes are (an extracted format: extractor, video id, format id, size), so the block
    cache is shared whatever URL each extraction signed; a plain media URL is its own key. ``refresh``: for an
    extracted URL, gives a fresh one after a 403/410, and whether it comes from a fresh extraction (rather than
    one another file or job made)."""

    def __init__(
        self,
        url: str,
        fetcher: Fetcher,
        cache: BlockCache,
        check_hosts: bool = True,
        content_key: str | None = None,
        headers: dict[str, str] | None = None,
        refresh: Callable[[str], tuple[str, bool]] | None = None,
    ) -> None:
        self.url = url
        self.fetcher = fetcher
        self.cache = cache
        self.check_hosts = check_hosts
        self.headers = headers or {}
        self.refresh = refresh
        self.refreshes = 0  # fresh links this file was given after a refusal
        self._progress = 0  # bytes read with the current link
        self._fresh = False  # the current link comes from an extraction made after a refusal
        self._url_lock = threading.Lock()
        self._ends: deque[int] = deque(maxlen=8)  # where recent reads ended: a read starting there is sequential
        self.sid = cache.source_id(content_key or url)
        self.size: int | None = None
        self.etag: object = None
        self.whole = False  # its origin ignores Range: the file is read whole, once
        self._load_meta()
        self.error: QuoteclipError | None = None  # the first source error, for the pipeline to report
        self._meta_lock = threading.Lock()

    def _load_meta(self) -> None:
        meta = self.cache.meta(self.sid)
        if "size" in meta:
            self.size = int(str(meta["size"]))
            self.etag = meta.get("etag")
            self.whole = meta.get("whole") is True

    @property
    def block_size(self) -> int:
        return self.cache.block_size

    def ensure_size(self) -> int:
        if self.size is None:
            self.read(0, 1)
        if self.size is None:  # another worker fetched the first block (and wrote the size) while we waited
            self._load_meta()
        if self.size is None:
            raise SourceUnavailable(f"source has no known size (a live stream?): {self.url}")
        return self.size

    def read(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset`` (fewer at the end of the file)."""
        try:
            return self._read(offset, length)
        except QuoteclipError as exc:
            self.error = self.error or exc
            raise
        except OSError as exc:
            if exc.errno not in MACHINE_ERRNOS:
                raise
            # the block cache could not be written (a full disk): this machine's fault, said as such, not a
            # cut-short source that ffmpeg would call invalid data
            fault = MachineFault(f"the source cache could not be written ({exc.strerror})", MACHINE_ERRNOS[exc.errno])
            self.error = self.error or fault
            raise fault from exc

    def _read(self, offset: int, length: int) -> bytes:
        if length <= 0 or (self.size is not None and offset >= self.size):
            return b""
        if self.size is not None:
            length = min(length, self.size - offset)
        bs = self.block_size
        first, last = offset // bs, (offset + length - 1) // bs
        # a read that goes on from where one ended reads ahead; a jump (the index at the end, a seek) does not,
        # so each seek costs the blocks it needs, not READ_AHEAD more
        ahead = READ_AHEAD if offset in self._ends else 0
        self._ends.append(offset + length)
        parts: list[bytes] = []
        index = first
        while index <= last:
            data = self.cache.get(self.sid, index)
            if data is None:
                fetched = self._fetch_run(index, last + ahead)
                data = fetched.get(index, b"")
            parts.append(data)
            if len(data) < bs:  # end of file
                break
            index += 1
        blob = b"".join(parts)
        skip = offset - first * bs
        return blob[skip : skip + length]

    def _fetch_run(self, index: int, last: int) -> dict[int, bytes]:
        with ExitStack() as held:
            holding = self.whole
            if holding:  # read whole by one reader at a time: wait for it, then its blocks are in the cache
                if not held.enter_context(self.cache.lock(self.sid, WHOLE, wait=self._whole_wait())):
                    raise SourceUnavailable(f"another worker held the download of {self.url} for too long")
                cached = self.cache.get(self.sid, index)
                if cached is not None:
                    return {index: cached}
            try:
                return self._fetch_blocks(index, last, held, holding)
            except _Busy:  # another reader found the origin ignores Range first and is reading it whole
                self.whole = True
        return self._fetch_run(index, last)

    def _fetch_blocks(self, index: int, last: int, held: ExitStack, holding: bool) -> dict[int, bytes]:
        """Blocks ``index``..``last`` (fewer when some are cached or being fetched) by one range request. ``held``:
        where the lock of a whole read goes, if the origin turns out to ignore Range (``holding``: it is held)."""
        bs = self.block_size
        with self.cache.lock(self.sid, index) as got:
            if not got:
                raise SourceUnavailable(f"another worker held the download of {self.url} for too long")
            cached = self.cache.get(self.sid, index)
            if cached is not None:  # another worker fetched it while we waited
                return {index: cached}
            with ExitStack() as stack:
                end_index = index
                for j in range(index + 1, min(last, index + MAX_RUN - 1) + 1):
                    if self.size is not None and j * bs >= self.size:
                        break
                    if self.cache.has(self.sid, j) or not stack.enter_context(self.cache.lock(self.sid, j, False)):
                        break
                    end_index = j
                start, end = index * bs, (end_index + 1) * bs - 1
                if self.size is not None:
                    end = min(end, self.size - 1)
                whole = _Whole(self, range(index, end_index + 1), held, holding)
                resp = self._get(start, end, whole)
                if resp.whole:
                    return whole.finish()
                self._check_identity(resp.total, resp.etag)
                blocks: dict[int, bytes] = {}
                for k, i in enumerate(range(index, end_index + 1)):
                    chunk = resp.data[k * bs : (k + 1) * bs]
                    if not chunk:
                        break
                    at_eof = self.size is not None and i * bs + len(chunk) >= self.size
                    if len(chunk) == bs or at_eof:
                        self.cache.put(self.sid, i, chunk)
                    blocks[i] = chunk
                return blocks

    def _whole_wait(self) -> float:
        """How long to wait for another reader of the whole file: as long as its read may last at the rate floor."""
        size = self.size if self.size is not None else self.fetcher.max_bytes
        return LOCK_WAIT + self.fetcher.rate_grace + size / max(1, self.fetcher.min_rate)

    def _get(self, start: int, end: int, whole: _Whole | None = None) -> RangeResponse:
        """One range, by the current link. A refused (expired) link of a page's format is extracted again as long
        as the link before made progress (bytes were read with it); a fresh extraction's link refused before any
        byte fails the job as ``expired link``, and so does the job's bound on fresh extractions (the refresher's)."""
        while True:
            url = self.url
            try:
                resp = self.fetcher.get_range(
                    url, start, end, check_hosts=self.check_hosts, headers=self.headers, whole=whole
                )
            except LinkRefused as refused:
                if self.refresh is None:
                    raise  # a plain media URL cannot be extracted again: its 403 stays
                self._renew(url, refused.status)
                continue
            with self._url_lock:
                if self.url == url:
                    self._progress += len(resp.data) + ((resp.total or 0) if resp.whole else 0)
            return resp

    def _renew(self, url: str, status: int) -> None:
        """A fresh link after ``url`` was refused, unless another read renewed it already."""
        assert self.refresh is not None
        with self._url_lock:
            if self.url != url:
                return
            if self._fresh and not self._progress:
                raise _expired(status)
            log.info("media link refused (HTTP %s) after %d bytes: extracting the page again", status, self._progress)
            self.url, self._fresh = self.refresh(url)
            self._progress = 0
            self.refreshes += 1

    def _check_identity(self, total: int | None, etag: str | None) -> None:
        with self._meta_lock:
            if (
                self.size is not None
                and total is not None
                and total != self.size
                or (self.etag and etag and etag != self.etag)
            ):
                log.warning("source %s changed at the origin; dropping its cached blocks", self.url)
                self.cache.drop(self.sid)
            if total is not None and (total != self.size or etag != self.etag):
                self.size, self.etag = total, etag
                self.cache.set_meta(self.sid, {"size": total, "etag": etag, "whole": self.whole})

    def _mark_whole(self, total: int, etag: str | None) -> None:
        """The origin ignores Range: recorded (beside the size), so every reader of this source waits for the one
        reading it whole instead of reading it again."""
        self._check_identity(total, etag)
        with self._meta_lock:
            self.whole = True
            self.cache.set_meta(self.sid, {"size": total, "etag": etag, "whole": True})


class _Busy(Exception):
    """Another reader is reading the whole file (its origin ignores Range), or has read it already."""


class _Whole:
    """The body of an origin that ignored a Range, from byte 0: into the block cache as it arrives, block by block;
    the blocks of the read that asked (``keep``) are also kept for it."""

    def __init__(self, remote: RemoteFile, keep: range, held: ExitStack, holding: bool) -> None:
        self.remote, self.keep, self.held, self.holding = remote, keep, held, holding
        self.buffer = bytearray()
        self.index = 0
        self.kept: dict[int, bytes] = {}

    def begin(self, total: int, etag: str | None) -> None:
        remote = self.remote
        if total > remote.cache.max_bytes // 2:
            raise SourceUnavailable(
                f"source is {total / 1024**2:.1f} MB and its origin ignores byte ranges (it sends the whole file): "
                f"over half the {remote.cache.max_bytes / 1024**2:g} MB block cache (QUOTECLIP_CACHE_MAX_MB): "
                f"{remote.url}"
            )
        if not self.holding:
            if not self.held.enter_context(remote.cache.lock(remote.sid, WHOLE, blocking=False)):
                raise _Busy
            if remote.cache.has(remote.sid, self.keep.start):
                # another reader read it whole while this answer was on its way: its blocks are cached already
                raise _Busy
        remote._mark_whole(total, etag)

    def write(self, chunk: bytes) -> None:
        self.buffer += chunk
        size = self.remote.block_size
        while len(self.buffer) >= size:
            self._put(bytes(self.buffer[:size]))
            del self.buffer[:size]

    def finish(self) -> dict[int, bytes]:
        if self.buffer:  # the last block, shorter
            self._put(bytes(self.buffer))
            self.buffer.clear()
        return self.kept

    def _put(self, data: bytes) -> None:
        self.remote.cache.put(self.remote.sid, self.index, data)
        if self.index in self.keep:
            self.kept[self.index] = data
        self.index += 1


def _expired(status: int) -> SourceLinkExpired:
    return SourceLinkExpired(
        f"the site refused its media link (HTTP {status}), again after a fresh extraction and before any byte was "
        "read with it: the link expired, or the site wants the operator's cookies, a PO token or another address"
    )


class RangeReader(io.RawIOBase):
    """A seekable, read-only file over a RemoteFile (for PyAV's probe)."""

    def __init__(self, remote: RemoteFile) -> None:
        self.remote = remote
        self.size = remote.ensure_size()
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self.remote.read(self.pos, len(buffer))
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)
