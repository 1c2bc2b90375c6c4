"""The source step: turn a spec's ``source`` into something ffmpeg can read, and a stable identity."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from quoteclip.errors import BadInput, SourceUnavailable


@dataclass(frozen=True)
class SourceRef:
    """What the renderer reads (a local path or an http(s) URL) and what identifies its content."""

    input: str
    identity: str
    remote: bool


def resolve_source(source: str, allow_local: bool) -> SourceRef:
    """Check and resolve ``source``: an http(s) URL, or a local path when local sources are allowed."""
    parts = urlsplit(source)
    if parts.scheme in {"http", "https"}:
        if not parts.hostname:
            raise BadInput(f"source URL has no host: {source!r}")
        return SourceRef(input=source, identity=f"url:{source}", remote=True)
    if parts.scheme and len(parts.scheme) > 1:  # a Windows drive letter is not a scheme
        raise BadInput(f"source scheme {parts.scheme!r} is not supported (use http, https or a local path)")
    if not allow_local:
        raise BadInput(f"source: local paths are not allowed here, got {source!r}")
    path = Path(source).expanduser()
    try:
        st = path.resolve(strict=True).stat()
    except (FileNotFoundError, NotADirectoryError):
        raise SourceUnavailable(f"source not found: {source}") from None
    except OSError as exc:
        raise SourceUnavailable(f"source cannot be read ({exc.strerror}): {source}") from None
    if not path.is_file():
        raise BadInput(f"source is not a file: {source!r}")
    if not os.access(path, os.R_OK):
        raise SourceUnavailable(f"source cannot be read (permission denied): {source}")
    real = str(path.resolve())
    return SourceRef(input=real, identity=f"file:{real}:{st.st_size}:{st.st_mtime_ns}", remote=False)
