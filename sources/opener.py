"""Open a checked source for the renderer: local files as they are, remote ones through the block cache and
a loopback proxy, pages through yt-dlp first."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from quoteclip.errors import QuoteclipError
from quoteclip.media import Readable
from quoteclip.settings import Settings

from . import SourceRef, allowed_hosts, is_direct_media

if TYPE_CHECKING:
    from .http import Fetcher
    from .remote import RemoteFile


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


@contextmanager
def open_source(
    ref: SourceRef, settings: Settings, workdir: Path, ffmpeg_bin: str, preview: bool = False
) -> Iterator[OpenedSource]:
    """``preview``: a page's lower-resolution format will do (an encoded preview is 640×360)."""
    if not ref.remote:
        yield OpenedSource(video=ref.input, probe_video=ref.input)
        return
    # the HTTP client, the block cache and the proxy load only for remote sources (start-up of a local render)
    from .cache import BlockCache
    from .http import Fetcher
    from .proxy import SourceProxy
    from .remote import RangeReader, RemoteFile
    from .safety import check_url

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

        found = extract(ref.input, workdir, ffmpeg_bin, settings.allow_addresses, preview=preview,
                        cookies_file=settings.cookies_file, extractor_args=settings.extractor_args)  # fmt: skip
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
