"""A disk cache of source bytes in fixed blocks, shared by every worker on a machine.

A clip reads only the blocks its cut touches; a batch from one episode reuses them (overlapping or adjacent
ranges are fetched once). One lock file per block: two workers never download the same block at the same
time. Size-capped, least recently used blocks evicted first; a block's lock file goes with it (and a lock file
left without its block, by a download that failed, goes at the next eviction).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

log = logging.getLogger(__name__)

BLOCK_SIZE = 256 * 1024
LOCK_WAIT = 120.0  # seconds to wait for another worker's download of a block
WHOLE = -1  # the lock "block" of a source whose origin ignores Range: held while it is read whole, once


class BlockCache:
    def __init__(self, root: Path, max_bytes: int, block_size: int = BLOCK_SIZE) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.block_size = block_size
        self._written = 0

    @staticmethod
    def source_id(url: str) -> str:
        return hashlib.sha256(url.encode()).hexdigest()[:24]

    def folder(self, source_id: str) -> Path:
        return self.root / source_id[:2] / source_id

    def _block(self, source_id: str, index: int) -> Path:
        return self.folder(source_id) / f"{index:08d}.blk"

    @staticmethod
    def _remove(block: Path) -> bool:
        """Delete a block and its lock file, unless a download of that block holds the lock right now (it is
        left for a later eviction). The lock is held while both go, so no download starts in between."""
        lock_path = block.with_suffix(".lock")
        lock = FileLock(str(lock_path))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            return False
        try:
            block.unlink(missing_ok=True)
            lock_path.unlink(missing_ok=True)
        finally:
            lock.release()
        return True

    def get(self, source_id: str, index: int) -> bytes | None:
        path = self._block(source_id, index)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            os.utime(path)  # recently used
        except FileNotFoundError:
            pass
        return data

    def has(self, source_id: str, index: int) -> bool:
        return self._block(source_id, index).exists()

    def put(self, source_id: str, index: int, data: bytes) -> None:
        folder = self.folder(source_id)
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self._block(source_id, index))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._written += len(data)
        if self._written > self.max_bytes // 20:
            self._written = 0
            self.evict()

    @contextmanager
    def lock(self, source_id: str, index: int, blocking: bool = True, wait: float = LOCK_WAIT) -> Iterator[bool]:
        """Hold the block's download lock (``WHOLE``: the whole source's); yields False when another holds it past
        ``wait`` seconds, or at once with ``blocking=False``."""
        folder = self.folder(source_id)
        folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(folder / ("whole.lock" if index == WHOLE else f"{index:08d}.lock")))
        try:
            lock.acquire(timeout=wait if blocking else 0)
        except Timeout:
            yield False
            return
        try:
            yield True
        finally:
            lock.release()

    def meta(self, source_id: str) -> dict[str, object]:
        try:
            return dict(json.loads((self.folder(source_id) / "meta.json").read_text()))
        except (OSError, ValueError):
            return {}

    def set_meta(self, source_id: str, meta: dict[str, object]) -> None:
        folder = self.folder(source_id)
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".meta-")
        with os.fdopen(fd, "w") as f:
            json.dump(meta, f)
        os.replace(tmp, folder / "meta.json")

    def drop(self, source_id: str) -> None:
        """Forget a source whose bytes changed at the origin."""
        for path in self.folder(source_id).glob("*.blk"):
            self._remove(path)

    def evict(self) -> None:
        """Delete least recently used blocks until the cache is under its cap, and lock files without a block."""
        for path in self.root.glob("*/*/*.lock"):
            if not path.with_suffix(".blk").exists():
                self._remove(path.with_suffix(".blk"))
        blocks = []
        total = 0
        for path in self.root.glob("*/*/*.blk"):
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            blocks.append((st.st_mtime, st.st_size, path))
            total += st.st_size
        if total <= self.max_bytes:
            return
        blocks.sort()
        for _, size, path in blocks:
            if total <= self.max_bytes * 0.9:
                break
            if self._remove(path):
                total -= size
        log.info("source cache evicted down to %d bytes", total)
