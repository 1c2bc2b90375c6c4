"""The source step: check a spec's ``source`` (this module), then open it for the renderer (``sources.opener``).

Local paths are read directly. Remote sources are read through a loopback proxy over a disk block cache, so
only the bytes the cut needs are fetched, a batch from one episode reuses them, and every origin request
passes the URL safety rules. Pages (YouTube, other yt-dlp sites) are first turned into media URLs by yt-dlp.
This module stays light (no HTTP client, no media library): a stored clip is found through it alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from quoteclip.errors import BadInput, SourceUnavailable
from quoteclip.settings import Settings

from .identity import url_identity

MEDIA_SUFFIXES = {".mp4", ".m4v", ".mov", ".webm", ".mkv", ".m4a", ".mp3", ".ts", ".avi", ".ogv", ".flv"}


@dataclass(frozen=True)
class SourceRef:
    """What the user named (a local path or an http(s) URL) and what identifies its content."""

    input: str
    identity: str
    remote: bool


def allowed_hosts(settings: Settings) -> tuple[str, ...] | None:
    hosts = settings.source_hosts if settings.source_hosts is not None else ("*",)
    return None if "*" in hosts else hosts


def resolve_source(source: str, allow_local: bool) -> SourceRef:
    """Check and resolve ``source``: an http(s) URL, or a local path when local sources are allowed."""
    try:
        parts = urlsplit(source)
        hostname = parts.hostname
    except ValueError:  # bad IPv6 brackets, and the like
        raise BadInput(f"source URL is malformed: {source[:200]!r}") from None
    if parts.scheme in {"http", "https"}:
        if not source.startswith(parts.scheme):  # urlsplit lowers it: "HTTP://" is one clip spelled two ways
            written = source.split(":", 1)[0]
            raise BadInput(f"source URL scheme must be written in lower case ({parts.scheme}), got {written!r}")
        if not hostname:
            raise BadInput(f"source URL has no host: {source!r}")
        if not hostname.isascii():
            raise BadInput(f"source URL host must be ASCII (IDNA-encoded), got {hostname[:100]!r}")
        return SourceRef(input=source, identity=url_identity(source), remote=True)
    if parts.scheme and len(parts.scheme) > 1:  # a Windows drive letter is not a scheme
        raise BadInput(f"source scheme {parts.scheme!r} is not supported (use http, https or a local path)")
    if not allow_local:
        raise BadInput(
            f"source: local paths are not allowed here, got {source!r} (an operator opens them with "
            "QUOTECLIP_ALLOW_LOCAL_SOURCES=true)"
        )
    path = Path(source).expanduser()
    try:
        st = path.resolve(strict=True).stat()
    except (FileNotFoundError, NotADirectoryError):
        raise BadInput(f"source not found: {source!r}") from None  # a path given wrong: bad input, as a folder is
    except OSError as exc:
        raise SourceUnavailable(f"source cannot be read ({exc.strerror}): {source}") from None
    if not path.is_file():
        raise BadInput(f"source is not a file: {source!r}")
    if not os.access(path, os.R_OK):
        raise SourceUnavailable(f"source cannot be read (permission denied): {source}")
    real = str(path.resolve())
    return SourceRef(input=real, identity=f"file:{real}:{st.st_size}:{st.st_mtime_ns}", remote=False)


def is_direct_media(url: str) -> bool:
    return PurePosixPath(urlsplit(url).path).suffix.lower() in MEDIA_SUFFIXES
