"""Open a checked source for the renderer: local files as they are, remote ones through the block cache and
a loopback proxy, pages through yt-dlp first."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from quoteclip.errors import QuoteclipError, SourceLinkExpired, SourceTransient, SourceUnavailable
from quoteclip.media import Readable
from quoteclip.settings import Settings

from . import SourceRef, allowed_hosts, is_direct_media

if TYPE_CHECKING:
    from http.cookiejar import CookieJar

    from .cache import BlockCache
    from .extraction import Extracted, Extractions
    from .hls import LocalCut
    from .http import Fetcher
    from .remote import RemoteFile

log = logging.getLogger(__name__)

MAX_REEXTRACTIONS = 5  # fresh extractions of a page one job makes for links that expired while it read them


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
    extractions: int = 0  # page extractions this job made (0: none, or the shared cache had it)
    # where the video and audio inputs' time 0 lie on the source's timeline (HLS: a local file of segments)
    offsets: tuple[float, float] = (0.0, 0.0)
    duration: float | None = None  # the source's length, when the inputs hold only part of it
    # a page's format family read: "https" (plain files by range), "hls", "dash"; None for a file or a media URL
    format_family: str | None = None

    @property
    def fetched_bytes(self) -> int:
        return self.fetcher.fetched if self.fetcher else 0

    def error(self) -> QuoteclipError | None:
        """The first source error met while ffmpeg read through the proxy, if any."""
        return next((r.error for r in self.remotes if r.error is not None), None)


@contextmanager
def open_source(
    ref: SourceRef,
    settings: Settings,
    workdir: Path,
    ffmpeg_bin: str,
    preview: bool = False,
    on_wait: Callable[[float], None] | None = None,
    span: tuple[float, float] | None = None,
) -> Iterator[OpenedSource]:
    """``preview``: a page's lower-resolution format will do (an encoded preview is 640×360). ``on_wait``: told
    the seconds this job waits for a format the site makes available later. ``span``: the cut (start, end) in
    the source, for formats read in segments (HLS): only those segments are fetched."""
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
        header_timeout=settings.fetch_header_timeout,
        cookies=load_cookies(settings.cookies_file) if settings.cookies_file is not None else None,
        per_origin=settings.origin_concurrency,
        origin_rate=settings.origin_rate,
        proxy=settings.proxy,
    )
    cache = BlockCache(settings.cache_dir, settings.cache_max_bytes)
    title = None
    pages: Extractions | None = None
    local: list[LocalCut | None] = [None]
    family: str | None = None
    if is_direct_media(ref.input):
        remotes = [RemoteFile(ref.input, fetcher, cache)]
    else:
        from .extraction import PlainRefusals

        pages = page_extractions(ref, settings, workdir, ffmpeg_bin, preview)
        found = pages.get()
        refusals = PlainRefusals(pages.entries, settings.plain_refused_ttl)
        why = "chosen"
        if found.hls and settings.youtube_formats == "hls":
            found, why = found.as_hls(), "QUOTECLIP_YOUTUBE_FORMATS=hls"
        elif found.hls and refusals.refused(found.extractor):
            found, why = found.as_hls(), f"{found.extractor} refused its plain formats lately"
        wait_until_available(found, settings.available_wait, on_wait)
        title = found.title
        budget = _Reextractions(pages)
        remotes = _page_remotes(found, fetcher, cache, budget)
        if found.segmented:
            local = _segments(found, fetcher, cache, workdir, span, ffmpeg_bin)
        else:
            try:
                for remote in remotes:  # the first block of each: a site refusing its plain formats says so here
                    remote.ensure_size()
            except SourceLinkExpired:
                latest = budget.latest or found
                if not latest.hls and latest.extractor.lower().startswith("youtube"):
                    from .ytdlp import po_token_wanted

                    raise po_token_wanted(
                        f"format {latest.video.format_id}, HTTP 403 on a fresh link, and no HLS rendition"
                    ) from None
                if not latest.hls:
                    raise
                # refused on a fresh link before any byte: refused, not expired (YouTube's web client without a PO
                # token); the page's HLS rendition instead, and the next clips of this site go there at once
                refusals.remember(latest.extractor)
                found, why = latest.as_hls(), "plain formats refused (HTTP 403)"
                log.warning("%s refused its plain formats (HTTP 403): reading its HLS rendition", found.extractor)
                remotes = _page_remotes(found, fetcher, cache, budget)
                local = _segments(found, fetcher, cache, workdir, span, ffmpeg_bin)
        family = found.family
        log.info("source %s read in %s formats (%s, format %s)", ref.identity, family, why, found.video.format_id)
    if all(cut is not None for cut in local):  # every input is a local file of segments: no proxy
        cuts = [cut for cut in local if cut is not None]
        yield OpenedSource(
            video=str(cuts[0].path),
            audio=str(cuts[1].path) if len(cuts) > 1 else None,
            probe_video=str(cuts[0].path),
            probe_audio=str(cuts[1].path) if len(cuts) > 1 else None,
            fetcher=fetcher,
            title=title,
            source_id=remotes[0].sid,
            extractions=pages.made if pages is not None else 0,
            offsets=(cuts[0].offset, cuts[1].offset if len(cuts) > 1 else 0.0),
            duration=cuts[0].duration,
            format_family=family,
        )
        fetcher.close()
        return
    try:
        with SourceProxy() as proxy:
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
                    extractions=pages.made if pages is not None else 0,
                    format_family=family,
                )
            finally:
                for reader in readers:
                    reader.close()
    finally:
        fetcher.close()


def _page_remotes(found: Extracted, fetcher: Fetcher, cache: BlockCache, budget: _Reextractions) -> list[RemoteFile]:
    """A page's formats as remote files, each renewing its link by a fresh extraction within the job's bound. Media
    hosts (CDNs) come from the extractor, so no host allowlist for them; the address rules still apply."""
    from .remote import RemoteFile

    return [
        RemoteFile(
            f.url,
            fetcher,
            cache,
            check_hosts=False,
            content_key=f.content_key(found.extractor, found.id),
            headers=f.headers,
            refresh=_refresher(budget, found, role),
        )
        for role, f in enumerate(found.formats)
    ]


def _segments(
    found: Extracted,
    fetcher: Fetcher,
    cache: BlockCache,
    workdir: Path,
    span: tuple[float, float] | None,
    ffmpeg_bin: str,
) -> list[LocalCut | None]:
    """Formats read in segments (HLS) as local files of the cut's segments; formats read by range stay None."""
    from .hls import HlsFormat, from_fragments

    if span is None:
        raise SourceUnavailable("source is offered in segments (HLS, DASH) only: give the cut to fetch")
    cuts: list[LocalCut | None] = []
    for role, f in enumerate(found.formats):
        if not f.protocol.startswith("m3u8") and f.fragments is None:
            cuts.append(None)
            continue
        listed = from_fragments(f.fragments) if f.fragments is not None else None
        hls = HlsFormat(f.url, fetcher, cache, f.content_key(found.extractor, found.id), f.headers, listed)
        cuts.append(hls.cut(span[0], span[1], workdir, ("video", "audio")[role], ffmpeg_bin))
    if any(c is None for c in cuts):
        raise SourceUnavailable("source mixes a segmented format (HLS, DASH) with a plain one, not joined yet")
    return cuts


def page_extractions(ref: SourceRef, settings: Settings, workdir: Path, ffmpeg_bin: str, preview: bool) -> Extractions:
    """A page's extraction through the shared cache (Redis for queued jobs, files for the inline CLI)."""
    from .extraction import Extractions, entry_store
    from .ytdlp import extract

    def read_page() -> Extracted:
        return extract(
            ref.input,
            workdir,
            ffmpeg_bin,
            settings.allow_addresses,
            preview=preview,
            cookies_file=settings.cookies_file,
            extractor_args=settings.extractor_args,
            proxy=settings.proxy,
        )

    return Extractions(
        entry_store(settings.cache_dir / "extractions"),
        ref.identity,
        "preview" if preview else "final",
        read_page,
        cap=settings.extraction_ttl,
    )


@dataclass
class _Reextractions:
    """The fresh extractions one job makes for its expired links, shared by its files (video and audio): at most
    MAX_REEXTRACTIONS, and twice as many asks (an ask answered by another job's newer extraction makes none)."""

    pages: Extractions
    made: int = 0
    asked: int = 0
    latest: Extracted | None = None  # the newest extraction a refusal brought
    lock: threading.Lock = field(default_factory=threading.Lock)


def _refresher(budget: _Reextractions, found: Extracted, role: int) -> Callable[[str], tuple[str, bool]]:
    """A fresh URL for format ``role`` (0 video, 1 audio) after its URL was refused, and whether this job extracted
    it (rather than found it extracted): one new extraction, shared by the job's files (the second to ask finds
    the first's), within the job's bound."""
    state = {"found": found}

    def refresh(stale_url: str) -> tuple[str, bool]:
        with budget.lock:  # (one at a time: the audio's ask finds the extraction the video's made)
            if budget.made >= MAX_REEXTRACTIONS or budget.asked >= 2 * MAX_REEXTRACTIONS:
                raise SourceLinkExpired(
                    f"the site refused its media link again after {budget.made} fresh extractions in this job, the "
                    f"most one job makes ({MAX_REEXTRACTIONS}): its links expire faster than the clip can be read"
                )
            budget.asked += 1
            before = budget.pages.made
            fresh = budget.pages.refresh(state["found"])
            extracted = budget.pages.made > before
            budget.made += extracted
            budget.latest = fresh
        state["found"] = fresh
        if role >= len(fresh.formats):
            raise SourceUnavailable("source changed: a fresh extraction offers no separate audio format")
        return fresh.formats[role].url, extracted

    return refresh


def wait_until_available(found: Extracted, limit: float, on_wait: Callable[[float], None] | None) -> None:
    """Some formats are refused until a time the site names (``available_at``): wait for it, up to ``limit``."""
    later = max((f.available_at or 0.0 for f in found.formats), default=0.0)
    wait = later - time.time()
    if wait <= 0:
        return
    if wait > limit:
        raise SourceTransient(
            f"the site makes this video's format available in {wait:.0f} s, over QUOTECLIP_AVAILABLE_WAIT ({limit:g} s)"
        )
    if on_wait is not None:
        on_wait(wait)
    time.sleep(wait + 0.05)


def load_cookies(path: Path) -> CookieJar:
    """The operator's cookies file (Netscape format), read by this worker for the media requests it makes."""
    from http.cookiejar import LoadError, MozillaCookieJar

    jar = MozillaCookieJar(str(path))
    try:
        jar.load(ignore_discard=True, ignore_expires=True)
    except (OSError, LoadError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise SourceUnavailable(f"QUOTECLIP_COOKIES_FILE cannot be read ({reason}): {path}") from None
    for cookie in jar:
        if cookie.expires == 0:  # a session cookie, as browsers export it (and yt-dlp reads it)
            cookie.expires = None
    return jar
