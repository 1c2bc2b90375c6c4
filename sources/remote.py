"""A remote media file read by byte range through the block cache, as a seekable file for PyAV."""

from __future__ import annotations

import io
import logging
import threading
from contextlib import ExitStack

from quoteclip.errors import QuoteclipError, SourceUnavailable

from .cache import BlockCache
from .http import Fetcher

log = logging.getLogger(__name__)

MAX_RUN = 8  # blocks fetched in one request at most
READ_AHEAD = 4  # blocks fetched past the end of a read (ffmpeg reads on sequentially): fewer round trips


class RemoteFile:
    def __init__(self, url: str, fetcher: Fetcher, cache: BlockCache, check_hosts: bool = True) -> None:
        self.url = url
        self.fetcher = fetcher
        self.cache = cache
        self.check_hosts = check_hosts
        self.sid = cache.source_id(url)
        self.size: int | None = None
        self.etag: object = None
        self._load_meta()
        self.error: QuoteclipError | None = None  # the first source error, for the pipeline to report
        self._meta_lock = threading.Lock()

    def _load_meta(self) -> None:
        meta = self.cache.meta(self.sid)
        if "size" in meta:
            self.size = int(str(meta["size"]))
            self.etag = meta.get("etag")

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

    def _read(self, offset: int, length: int) -> bytes:
        if length <= 0 or (self.size is not None and offset >= self.size):
            return b""
        if self.size is not None:
            length = min(length, self.size - offset)
        bs = self.block_size
        first, last = offset // bs, (offset + length - 1) // bs
        parts: list[bytes] = []
        index = first
        while index <= last:
            data = self.cache.get(self.sid, index)
            if data is None:
                fetched = self._fetch_run(index, last + READ_AHEAD)
                data = fetched.get(index, b"")
            parts.append(data)
            if len(data) < bs:  # end of file
                break
            index += 1
        blob = b"".join(parts)
        skip = offset - first * bs
        return blob[skip : skip + length]

    def _fetch_run(self, index: int, last: int) -> dict[int, bytes]:
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
                resp = self.fetcher.get_range(self.url, start, end, check_hosts=self.check_hosts)
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
                self.cache.set_meta(self.sid, {"url": self.url, "size": total, "etag": etag})


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
