"""The embedded default: clips in a local folder, links are file:// URIs."""

from __future__ import annotations

import errno
import glob
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO

from quoteclip.errors import StorageFailed

PIECES = "pieces"  # the pieces of clips rendered in pieces, until they are joined


class LocalStorage:
    def __init__(self, root: Path) -> None:
        self.root = root.expanduser().resolve()

    def _file(self, key: str, suffix: str = ".mp4") -> Path:
        return self.root / f"{key}{suffix}"

    def stat(self, key: str) -> dict[str, str] | None:
        if not self._file(key).is_file():
            return None
        try:
            return dict(json.loads(self._file(key, ".json").read_text()))
        except (OSError, ValueError):
            return {}

    def put(self, path: Path, key: str, filename: str, metadata: dict[str, str]) -> bool:
        """Metadata first, the mp4 last: a clip is stored once its mp4 is in place, and put there once (a hard
        link, which fails on an existing name): of two workers storing the same clip the first one's bytes stand,
        and the second is told so (False)."""
        meta = json.dumps({**metadata, "filename": filename}, indent=1).encode()
        self._write(self._file(key, ".json"), data=meta)
        return self._write(self._file(key), source=path, once=True)

    def has_sidecar(self, key: str, suffix: str) -> bool:
        return (self.root / f"{key}{suffix}").is_file()

    def get_sidecar(self, key: str, suffix: str) -> bytes | None:
        try:
            return (self.root / f"{key}{suffix}").read_bytes()
        except FileNotFoundError:
            return None

    def put_sidecar(self, key: str, suffix: str, data: bytes, content_type: str) -> None:
        self._write(self._file(key, suffix), data=data)

    def put_asset(self, name: str, data: bytes, content_type: str) -> None:
        (self.root / "assets").mkdir(parents=True, exist_ok=True)
        self._write(self.root / "assets" / name, data=data)

    def get_asset(self, name: str) -> bytes | None:
        try:
            return (self.root / "assets" / name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageFailed(f"could not read asset {name} in {self.root}: {exc}") from exc

    def put_piece(self, name: str, path: Path) -> None:
        final = self.root / PIECES / name
        final.parent.mkdir(parents=True, exist_ok=True)
        self._write(final, source=path)

    def get_piece(self, name: str, path: Path) -> bool:
        try:
            shutil.copyfile(self.root / PIECES / name, path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageFailed(f"could not read piece {name} in {self.root}: {exc}") from exc
        return True

    def delete_pieces(self, prefix: str) -> int:
        root = self.root / PIECES
        folder, _, start = prefix.rpartition("/")
        where = root / folder if folder else root
        gone = 0
        for found in where.glob(f"{glob.escape(start)}*"):
            if found.is_file():
                found.unlink(missing_ok=True)
                gone += 1
        if folder and where.is_dir() and not any(where.iterdir()):
            where.rmdir()  # (a clip's folder, emptied)
        return gone

    def _write(self, final: Path, data: bytes | None = None, source: Path | None = None, once: bool = False) -> bool:
        """Atomically: a temp file in the same folder, synced, then renamed over ``final``; with ``once``, linked
        to ``final`` instead, so a file already there stays (False). A file system without hard links is looked
        at before the rename (a narrower window, not none)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=".incoming-", suffix=final.suffix)
            os.fchmod(fd, 0o644)  # readable by a separate web server serving the folder (mkstemp makes 0600)
            try:
                with os.fdopen(fd, "wb") as out:
                    if source is not None:
                        with open(source, "rb") as src:
                            shutil.copyfileobj(src, out, 1 << 20)
                    else:
                        out.write(data or b"")
                    out.flush()
                    os.fsync(out.fileno())
                if not once:
                    os.replace(tmp, final)
                    return True
                return _create(Path(tmp), final)
            finally:
                Path(tmp).unlink(missing_ok=True)
        except OSError as exc:
            raise StorageFailed(f"could not store {final.name} in {self.root}: {exc}") from exc

    def read(self, key: str) -> BinaryIO:
        return open(self._file(key), "rb")

    def link(self, key: str, suffix: str = ".mp4") -> str:
        return self._file(key, suffix).as_uri()

    def local_path(self, key: str) -> Path | None:
        return self._file(key)


def _create(tmp: Path, final: Path) -> bool:
    """``tmp`` becomes ``final`` unless a file has that name already: True when it did."""
    try:
        os.link(tmp, final)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
            raise
        if final.exists():
            return False
        os.replace(tmp, final)
    return True
