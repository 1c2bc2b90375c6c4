"""The embedded default: clips in a local folder, links are file:// URIs."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from quoteclip.errors import StorageFailed


class LocalStorage:
    def __init__(self, root: Path) -> None:
        self.root = root.expanduser().resolve()

    def _mp4(self, key: str) -> Path:
        return self.root / f"{key}.mp4"

    def _meta(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def stat(self, key: str) -> dict[str, str] | None:
        if not self._mp4(key).is_file():
            return None
        try:
            return dict(json.loads(self._meta(key).read_text()))
        except (OSError, ValueError):
            return {}

    def put(self, path: Path, key: str, filename: str, metadata: dict[str, str]) -> None:
        """Copy into place atomically: a temp file in the same folder, then rename. Metadata goes first."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            for data, final in ((None, self._meta(key)), (path, self._mp4(key))):
                fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".incoming-", suffix=final.suffix)
                try:
                    with os.fdopen(fd, "wb") as out:
                        if data is None:
                            out.write(json.dumps({**metadata, "filename": filename}, indent=1).encode())
                        else:
                            with open(data, "rb") as src:
                                shutil.copyfileobj(src, out, 1 << 20)
                        out.flush()
                        os.fsync(out.fileno())
                    os.replace(tmp, final)
                except BaseException:
                    Path(tmp).unlink(missing_ok=True)
                    raise
        except OSError as exc:
            raise StorageFailed(f"could not store the clip in {self.root}: {exc}") from exc

    def link(self, key: str) -> str:
        return self._mp4(key).as_uri()

    def local_path(self, key: str) -> Path | None:
        return self._mp4(key)
