"""The source step: check a spec's ``source``, then open it for the renderer.

Local paths are read directly. Remote sources are read through a loopback proxy over a disk block cache, so
only the bytes the cut needs are fetched, a batch from one episode reuses them, and every origin request
passes the URL safety rules. Pages (YouTube, other yt-dlp sites) are first turned into media URLs by yt-dlp.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from quoteclip.errors import BadInput, QuoteclipError, SourceUnavailable
from quoteclip.media import Readable
from quoteclip.settings import Settings

from .cache import BlockCache
from .http import Fetcher
from .identity import url_identity
from .proxy import SourceProxy
from .remote import RangeReader, RemoteFile
from .safety import check_url

MEDIA_SUFFIXES = {".mp4", ".m4v", ".mov", ".webm", ".mkv", ".m4a", ".mp3", ".ts", ".avi", ".ogv", ".flv"}


@dataclass(frozen=True)
class SourceRef:
    """What the user named (a local path or an http(s) URL) and what identifies its content."""

    input: str
    identity: str
    remote: bool


@dataclass
class OpenedSource:
    """What the renderer reads: ffmpeg inputs (paths or proxy URLs) and seekable files for the probe."""

    video: str
    audio: str | None = None
    probe_video: Readable = ""
    probe_audio: Readable | None = None
    remotes: list[RemoteFile] = field(default_factory=list)
    fetcher: Fetcher | None = None
    title: str | None = None
    source_id: str | None = None

    @property
    def fetched_bytes(self) -> int:
        return self.fetcher.fetched if self.fetcher else 0

    def error(self) -> QuoteclipError | None:
        """The first source error met while ffmpeg read through the proxy, if any."""
        return next((r.error for r in self.remotes if r.error is not None), None)


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
        if not hostname:
            raise BadInput(f"source URL has no host: {source!r}")
        if not hostname.isascii():
            raise BadInput(f"source URL host must be ASCII (IDNA-encoded), got {hostname[:100]!r}")
        return SourceRef(input=source, identity=url_identity(source), remote=True)
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


def is_direct_media(url: str) -> bool:
    return PurePosixPath(urlsplit(url).path).suffix.lower() in MEDIA_SUFFIXES


@contextmanager
def open_source(ref: SourceRef, settings: Settings, workdir: Path, ffmpeg_bin: str) -> Iterator[OpenedSource]:
    if not ref.remote:
        yield OpenedSource(video=ref.input, probe_video=ref.input)
        return
    hosts = allowed_hosts(settings)
    check_url(ref.input, hosts, settings.allow_addresses)  # refuse before any request is made
    fetcher = Fetcher(
        hosts,
        settings.allow_addresses,
        settings.max_fetch_bytes,
        settings.min_fetch_rate,
        read_timeout=settings.fetch_timeout,
        rate_grace=settings.fetch_rate_grace,
    )
    cache = BlockCache(settings.cache_dir, settings.cache_max_bytes)
    title = None
    if is_direct_media(ref.input):
        urls, check_hosts = [ref.input], True
    else:
        from .ytdlp import extract

        found = extract(ref.input, workdir, ffmpeg_bin, settings.allow_addresses)
        urls = [found.video_url] + ([found.audio_url] if found.audio_url else [])
        check_hosts = False  # media hosts (CDNs) come from the extractor; the address rules still apply
        fetcher.headers = found.headers
        title = found.title
    try:
        with SourceProxy() as proxy:
            remotes = [RemoteFile(url, fetcher, cache, check_hosts) for url in urls]
            inputs = [proxy.add(r) for r in remotes]
            readers = [RangeReader(r) for r in remotes]
            try:
                yield OpenedSource(
                    video=inputs[0],
                    audio=inputs[1] if len(inputs) > 1 else None,
                    probe_video=readers[0],
                    probe_audio=readers[1] if len(readers) > 1 else None,
                    remotes=remotes,
                    fetcher=fetcher,
                    title=title,
                    source_id=remotes[0].sid,
                )
            finally:
                for reader in readers:
                    reader.close()
    finally:
        fetcher.close()
