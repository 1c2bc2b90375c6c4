"""yt-dlp as a library, for pages (YouTube and other sites): find the media URLs of the formats to fetch.

The bytes themselves are then fetched by range through the block cache (sources.remote), so a clip reads
only what its cut needs. All yt-dlp options are built here, in one place: no downloads by yt-dlp, no
postprocessors, no external downloaders, no files written outside the job's folder.

yt-dlp is given the page rebuilt from the source's identity (``sources.identity.page_url``), never the user's
string, so the page read is the one the clip key names. Its requests go out through the egress proxy
(``sources.egress``: the address rules and the time limits of each request) and are made by one request handler
of ours (yt-dlp's requests-based one, which decompresses as it reads): every response, a page, a script, a
manifest or an error page, is cut off once it has given ``QUOTECLIP_PAGE_MAX_MB`` decompressed, so a small
compressed answer cannot make the worker or the API inflate hundreds of megabytes; and each request asks for its
connection to close after it, so the proxy's limits on a connection are the limits on one request.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urljoin

from quoteclip.errors import (
    BadInput,
    SourceBotCheck,
    SourceGeoBlocked,
    SourceGone,
    SourceLoginRequired,
    SourceRefused,
    SourceThrottled,
    SourceTransient,
    SourceUnavailable,
)
from quoteclip.transcript import MAX_TRACK_BYTES

from .egress import EgressProxy, PageLimits, page_limits
from .extraction import Extracted, MediaFormat
from .identity import page_url, url_identity

log = logging.getLogger(__name__)

# Formats are chosen by their protocol: plain http(s) files first (the block cache fetches them by byte range),
# HLS (segments fetched by sources.hls) when a site offers nothing else; video at or above 720p but no higher
# than needed (res:720 sorts the closest first), separate video + audio streams or a combined one. A 720p HLS
# rendition comes before a plain format under 720p: a page whose plain formats YouTube left out (SABR-only,
# leaving format 18 at 360p) is read from its HLS rendition.
_HTTP = "[protocol^=http][protocol!*=dash][protocol!*=m3u8]"
_HLS = "[protocol^=m3u8]"
_DASH = "[protocol=http_dash_segments]"
_FAMILIES = (_HTTP, _HLS, _DASH)
FORMAT = "/".join(f"bv*[height>=720]{p}+ba{p}/b[height>=720]{p}" for p in _FAMILIES)
FORMAT += "/" + "/".join(f"bv*{p}+ba{p}/b{p}" for p in _FAMILIES)
FORMAT += f"/ba{_HTTP}/ba{_HLS}/ba{_DASH}"  # an audio-only page (a podcast): its audio, rendered as an audiogram
# The page's HLS rendition, chosen beside the formats above (the same sort): what a clip is read from when the
# site refuses the plain formats (sources.opener), or at once with QUOTECLIP_YOUTUBE_FORMATS=hls.
HLS_FORMAT = f"bv*[height>=720]{_HLS}+ba{_HLS}/b[height>=720]{_HLS}/bv*{_HLS}+ba{_HLS}/b{_HLS}/ba{_HLS}"
PREVIEW_HLS_FORMAT = f"bv*[height>=360][height<=480]{_HLS}+ba{_HLS}/b[height>=360][height<=480]{_HLS}/{HLS_FORMAT}"
FORMAT_SORT = ["res:720", "proto:https", "vcodec", "acodec"]
# Encoded previews (quality "preview", 640×360): the smallest format of at least 360p, when the page offers one.
# Decoding 360p costs a fraction of 1080p, and decoding is most of a preview's time.
PREVIEW_FORMAT = f"bv*[height>=360][height<=480]{_HTTP}+ba{_HTTP}/b[height>=360][height<=480]{_HTTP}/{FORMAT}"
PREVIEW_SORT = ["res:360", "proto:https", "vcodec", "acodec"]


class _Logger:
    """yt-dlp's messages into quoteclip's log; its warnings also kept (the last 50), to explain a failure."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def debug(self, msg: str) -> None:
        log.debug("yt-dlp: %s", msg)

    def info(self, msg: str) -> None:
        log.debug("yt-dlp: %s", msg)

    def warning(self, msg: str) -> None:
        log.info("yt-dlp: %s", msg)
        self.warnings = [*self.warnings[-49:], str(msg)]

    def error(self, msg: str) -> None:
        log.info("yt-dlp: %s", msg)


class PoTokenWanted(SourceRefused):
    """YouTube refused a format for want of a PO token (proof of origin): its ``web`` client's plain formats answer
    HTTP 403 without one, or yt-dlp left them out. Only the operator can help (docs/sources.md)."""


PO_TOKEN_CURE = (
    "set QUOTECLIP_YOUTUBE_FORMATS=hls, run a PO-token provider (pip install 'quoteclip[youtube]' and its server, "
    "docs/sources.md) or pass a token in QUOTECLIP_EXTRACTOR_ARGS (youtube:po_token=web.gvs+TOKEN)"
)


def po_token_wanted(what: str, warnings: list[str] | tuple[str, ...] = ()) -> PoTokenWanted:
    """The error for a format YouTube refused for want of a PO token: what happened, the operator's cures, and
    what the PO-token provider said, if it said anything."""
    said = next((w for w in warnings if "bgutil" in w.lower() or "[pot" in w.lower()), None)
    provider = f"; the PO-token provider said: {said.strip()[:240]}" if said else ""
    return PoTokenWanted(f"YouTube wants a PO token for this format ({what}): {PO_TOKEN_CURE}{provider}")


class ResponseCap:
    """The decompressed size one extraction lets any response reach, and whether one went over it."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.over = False


# yt-dlp's names quoteclip uses that are not its public API (tests/test_ytdlp_contract.py checks each against the
# installed yt-dlp, naming it and the version when one breaks): its requests-based handler, used whole through its
# public methods, and the YoutubeDL attribute that holds an instance's request handlers.
PRIVATE_NAMES = ("yt_dlp.networking._requests.RequestsRH", "yt_dlp.YoutubeDL._request_director")


@functools.cache
def _handler_classes() -> tuple[type, ...]:
    """The request handlers an extraction uses, both subclasses of yt-dlp's public ``RequestHandler`` written to its
    documented handler contract (``_send``, ``_SUPPORTED_URL_SCHEMES``, ``_check_extensions``): http(s) through
    yt-dlp's requests-based handler (it decompresses as it reads), each request asking its connection to close and
    each response capped; data: URLs decoded here, capped too. No urllib handler (it decompresses a response whole
    before anyone reads it), no websocket, no other handler."""
    import urllib.error
    import urllib.request

    from yt_dlp.networking import RequestHandler, Response
    from yt_dlp.networking._requests import RequestsRH
    from yt_dlp.networking.exceptions import HTTPError, RequestError, TransportError

    class CappedResponse(Response):
        """A response read through the cap: ``read`` raises once more than the cap has come out."""

        def __init__(self, inner: Response, cap: ResponseCap) -> None:
            super().__init__(inner, inner.url, inner.headers, inner.status, inner.reason, inner.extensions)
            self.cap = cap
            self.given = 0

        def read(self, amt: int | None = None) -> bytes:
            if amt is None:  # all of it, a chunk at a time, so no more than the cap is ever held
                chunks = []
                while chunk := self.read(1 << 20):
                    chunks.append(chunk)
                return b"".join(chunks)
            data = self.fp.read(min(amt, self.cap.max_bytes - self.given + 1))
            self.given += len(data)
            if self.given > self.cap.max_bytes:
                self.cap.over = True
                self.close()
                raise TransportError(f"response over {self.cap.max_bytes} bytes decompressed (QUOTECLIP_PAGE_MAX_MB)")
            return data

    class QuoteclipRH(RequestHandler):
        """http(s): each request made by yt-dlp's requests-based handler (through its public ``validate`` and
        ``send``), with ``Connection: close`` (one request per connection: the egress proxy's limits are per
        request), its response (an error page too: yt-dlp reads YouTube's JSON errors) read through the cap."""

        _SUPPORTED_URL_SCHEMES = ("http", "https")
        _SUPPORTED_PROXY_SCHEMES = None  # the requests handler checks its own (validate)
        _SUPPORTED_FEATURES = None
        cap: ResponseCap  # each extraction sets its own on its handlers (youtube_dl)

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.inner = RequestsRH(**kwargs)

        def _check_extensions(self, extensions: dict[str, Any]) -> None:
            extensions.clear()  # the requests handler checks them (validate)

        def _send(self, request: Any) -> Response:
            request = request.copy()
            request.headers["Connection"] = "close"
            self.inner.validate(request)
            try:
                response = self.inner.send(request)
            except HTTPError as exc:
                exc.response = CappedResponse(exc.response, self.cap)
                raise
            return CappedResponse(response, self.cap)

        def close(self) -> None:
            self.inner.close()

    class DataRH(RequestHandler):
        """data: URLs (yt-dlp reads some scripts and manifests as such), decoded by the standard library."""

        _SUPPORTED_URL_SCHEMES = ("data",)
        _SUPPORTED_PROXY_SCHEMES = None
        _SUPPORTED_FEATURES = None
        cap: ResponseCap

        def _send(self, request: Any) -> Response:
            try:
                opened = urllib.request.DataHandler().data_open(urllib.request.Request(request.url))
            except (ValueError, urllib.error.URLError) as exc:
                raise RequestError(f"bad data: URL ({exc})") from None
            return CappedResponse(Response(opened, request.url, dict(opened.headers.items())), self.cap)

    return QuoteclipRH, DataRH


def youtube_dl(options: dict[str, Any], cap: ResponseCap) -> Any:
    """A YoutubeDL whose requests are made by ``_handler_classes`` only, every response capped by ``cap``. The
    handlers are this instance's alone (built by yt-dlp's public ``build_request_director``): ``register_rh`` would
    add them to every YoutubeDL of the process beside yt-dlp's own, which would then take any request ours decline,
    uncapped. yt-dlp has no public way to give one instance its handlers, hence ``_request_director``."""
    import yt_dlp

    handlers = _handler_classes()

    class YoutubeDL(yt_dlp.YoutubeDL):
        @functools.cached_property
        def _request_director(self) -> Any:
            director = self.build_request_director(handlers)
            for handler in director.handlers.values():
                handler.cap = cap
            return director

    return YoutubeDL(options)


def deno_path() -> str | None:
    try:
        from deno import find_deno_bin

        return str(find_deno_bin())
    except Exception:  # noqa: BLE001  (the deno wheel missing or broken: yt-dlp looks on PATH)
        return None


def ydl_options(
    workdir: Path,
    ffmpeg_bin: str,
    verbose: bool = False,
    proxy: str | None = None,
    preview: bool = False,
    limits: PageLimits | None = None,
) -> dict[str, Any]:
    deno = deno_path()
    limits = limits or page_limits()
    return {
        # Every request yt-dlp makes goes through the egress proxy (sources.egress): the address rules apply to
        # pages, scripts, manifests and every redirect, not only to the first URL.
        **({"proxy": proxy} if proxy else {}),
        "quiet": not verbose,
        "verbose": verbose,
        "no_warnings": not verbose,
        "noprogress": True,
        "logger": None if verbose else _Logger(),
        "skip_download": True,
        "simulate": True,
        "noplaylist": True,
        "playlist_items": "1",
        "format": PREVIEW_FORMAT if preview else FORMAT,
        "format_sort": PREVIEW_SORT if preview else FORMAT_SORT,
        "check_formats": False,
        "ffmpeg_location": ffmpeg_bin,
        "js_runtimes": {"deno": {"path": deno} if deno else {}},
        "paths": {"home": str(workdir), "temp": str(workdir)},
        "outtmpl": {"default": "source.%(ext)s"},  # fixed: no title or metadata in any file name
        "restrictfilenames": True,
        "cachedir": False,
        # a backstop, later than the egress proxy's own limits on each request (stall, rate, deadline)
        "socket_timeout": limits.timeout + limits.stall,
        "retries": 2,
        "extractor_retries": 1,
        "postprocessors": [],
        "external_downloader": {},
        "writesubtitles": False,
        "writeinfojson": False,
        "writethumbnail": False,
        "color": {"stderr": "no_color", "stdout": "no_color"},
    }


def parse_extractor_args(values: tuple[str, ...]) -> dict[str, Any]:
    """``QUOTECLIP_EXTRACTOR_ARGS`` (space-separated values in yt-dlp's ``--extractor-args`` form, e.g.
    ``youtube:player_client=default,mweb``) as yt-dlp's own option parser reads them."""
    import contextlib
    import io
    import optparse

    import yt_dlp

    argv = [part for value in values for part in ("--extractor-args", value)]
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            parsed: dict[str, Any] = yt_dlp.parse_options(argv).ydl_opts.get("extractor_args") or {}
    except optparse.OptParseError as exc:
        reason = str(exc).strip().splitlines()[-1].split("error: ", 1)[-1]
        raise BadInput(f"QUOTECLIP_EXTRACTOR_ARGS: {reason}") from None
    return parsed


def operator_options(workdir: Path, cookies_file: Path | None, extractor_args: tuple[str, ...]) -> dict[str, Any]:
    """yt-dlp options from the operator's configuration: a private copy of the cookies file in the job's folder
    (yt-dlp writes its jar back on closing; the operator's file stays as it is) and the extractor arguments."""
    import shutil

    options: dict[str, Any] = {}
    if cookies_file is not None:
        copy = workdir / "cookies.txt"
        try:
            shutil.copyfile(cookies_file, copy)
        except OSError as exc:
            raise SourceUnavailable(
                f"QUOTECLIP_COOKIES_FILE cannot be read ({exc.strerror or exc}): {cookies_file}"
            ) from None
        copy.chmod(0o600)
        options["cookiefile"] = str(copy)
    if extractor_args:
        options["extractor_args"] = parse_extractor_args(extractor_args)
    return options


def extract(
    url: str,
    workdir: Path,
    ffmpeg_bin: str,
    allowed_networks: tuple[str, ...] = (),
    preview: bool = False,
    cookies_file: Path | None = None,
    extractor_args: tuple[str, ...] = (),
    proxy: str | None = None,
) -> Extracted:
    """The media URLs of a page: for ``preview``, its lowest format of at least 360p (else the usual one). The page
    read is the one ``url``'s identity names (``page_url``), within the limits of ``page_limits``."""
    found, _ = extract_with_captions(
        url, workdir, ffmpeg_bin, allowed_networks, preview, cookies_file, extractor_args, proxy, captions=()
    )
    return found


@dataclass(frozen=True)
class CaptionTrack:
    """A page's own captions, as read: their language, whether people made them (else the site's speech
    recognition), their format (json3, vtt, …) and text."""

    lang: str
    human: bool
    ext: str
    text: str


def extract_with_captions(
    url: str,
    workdir: Path,
    ffmpeg_bin: str,
    allowed_networks: tuple[str, ...] = (),
    preview: bool = False,
    cookies_file: Path | None = None,
    extractor_args: tuple[str, ...] = (),
    proxy: str | None = None,
    captions: tuple[str, ...] = (),
) -> tuple[Extracted, CaptionTrack | None]:
    """``extract``, and with ``captions`` (languages) the page's own captions in the first of them it has (a human
    track before an automatic one; json3, else WebVTT), read in the same session: through the egress proxy and the
    capped handler, as the page is."""
    from yt_dlp.networking.exceptions import RequestError
    from yt_dlp.utils import DownloadError, ExtractorError

    limits = page_limits()
    cap = ResponseCap(limits.max_bytes)
    track = None
    logger = _Logger()
    with EgressProxy(allowed_networks, upstream=proxy, limits=limits) as egress:
        try:
            options = ydl_options(workdir, ffmpeg_bin, proxy=egress.url, preview=preview, limits=limits)
            options["logger"] = options["logger"] and logger
            options |= operator_options(workdir, cookies_file, extractor_args)
            if captions:
                options |= caption_options(captions)
            with youtube_dl(options, cap) as ydl:
                info = ydl.extract_info(page_url(url), download=False)
                hls = hls_choice(ydl, info, preview)
                if captions and isinstance(info, dict):
                    track = read_track(ydl, info, captions)
        except Exception as exc:
            if cap.over:  # whatever yt-dlp made of it (an error, a warning and a page without formats)
                raise SourceUnavailable(
                    f"source page could not be read: a response it needs is over {limits.max_bytes / 1024**2:g} MB "
                    "decompressed (QUOTECLIP_PAGE_MAX_MB)"
                ) from None
            if egress.cut:
                raise _cut(egress.cut[0], limits) from None
            if not isinstance(exc, DownloadError | ExtractorError | RequestError):
                raise
            if egress.refused:  # decided by the address rules alone, before any connection: nothing to probe
                raise SourceRefused(
                    "source page leads to an address that is not allowed for sources (private, loopback or metadata)"
                ) from None
            if egress.failed:  # one answer whatever the cause: no port or host scan through extraction
                raise SourceTransient("source page could not be read (a host it needs did not answer)") from None
            if any(n in str(exc).lower() for n in ("requested format is not available", "no video formats")) and any(
                "po token" in w.lower() for w in logger.warnings
            ):  # yt-dlp skipped the formats that want one, and nothing was left
                raise po_token_wanted("yt-dlp left out every format that wants one", logger.warnings) from None
            _raise_extraction_error(exc)
    if any("po token" in w.lower() for w in logger.warnings):
        log.warning("YouTube wants a PO token for some formats of %s: the others are read", url)
    return _extracted(url, same_video(url, info), hls), track


def caption_options(langs: tuple[str, ...]) -> dict[str, Any]:
    """yt-dlp's own choice of caption tracks: human-made (``writesubtitles``) over automatic
    (``writeautomaticsub``) in each language asked (its regional and ``-orig`` forms too), json3 first."""
    import re

    return {
        "writesubtitles": True,
        "writeautomaticsub": True,
        "subtitleslangs": [f"{re.escape(lang)}(-.+)?" for lang in langs],
        "subtitlesformat": "json3/vtt/best",
    }


def read_track(ydl: Any, info: dict[str, Any], langs: tuple[str, ...]) -> CaptionTrack | None:
    """The track yt-dlp chose (``requested_subtitles``) in the first language of ``langs`` the page has: a human
    one (also in ``subtitles``), else the automatic track of the spoken language (``-orig``), else any; fetched by
    the session's own handler."""
    requested: dict[str, dict[str, Any]] = info.get("requested_subtitles") or {}
    human = info.get("subtitles") or {}
    for want in langs:
        matching = [lang for lang in requested if lang == want or lang.startswith(want + "-")]
        people = [lang for lang in matching if lang in human and not lang.endswith("-orig")]
        automatic = [lang for lang in (f"{want}-orig", want) if lang in matching]
        for lang in people + automatic + matching:
            chosen = requested[lang]
            text = chosen.get("data")
            if text is None and chosen.get("url"):
                with ydl.urlopen(chosen["url"]) as answer:
                    raw = answer.read(MAX_TRACK_BYTES + 1)
                text = raw.decode("utf-8-sig", errors="replace") if len(raw) <= MAX_TRACK_BYTES else raw
            if isinstance(text, bytes | str) and len(text) > MAX_TRACK_BYTES:
                raise BadInput(
                    f"transcript: source: the page's {lang} captions are over {MAX_TRACK_BYTES // 1024**2} MB, more "
                    "than a transcript may be; give a transcript file of the part the quote is in"
                )
            if text:
                return CaptionTrack(lang, lang in people, str(chosen.get("ext") or ""), text)
    return None


def hls_choice(ydl: Any, info: dict[str, Any] | None, preview: bool = False) -> list[dict[str, Any]]:
    """The page's best HLS rendition by ``HLS_FORMAT`` (yt-dlp's own format selector over the page's formats, as
    sorted for the choice of the formats to read): its video and audio formats, or none."""
    if not isinstance(info, dict) or info.get("_type") == "playlist":
        return []
    formats = [f for f in info.get("formats") or [] if str(f.get("protocol") or "").startswith("m3u8") and f.get("url")]
    if not formats:
        return []
    selector = ydl.build_format_selector(PREVIEW_HLS_FORMAT if preview else HLS_FORMAT)
    chosen = list(
        selector(
            {
                "formats": formats,
                "has_merged_format": any("none" not in (f.get("acodec"), f.get("vcodec")) for f in formats),
                "incomplete_formats": all(f.get("vcodec") == "none" for f in formats)
                or all(f.get("acodec") == "none" for f in formats),
            }
        )
    )
    if not chosen:
        return []
    found = chosen[0].get("requested_formats") or [chosen[0]]
    video = next((f for f in found if f.get("vcodec") not in (None, "none")), found[0])
    audio = next((f for f in found if f is not video and f.get("acodec") not in (None, "none")), None)
    return [video] + ([audio] if audio is not None else [])


def _cut(limit: str, limits: PageLimits) -> SourceTransient:
    """The error for a request the egress proxy cut short, naming the limit and its setting."""
    what = {
        "timeout": f"took over {limits.timeout:g} s (QUOTECLIP_PAGE_TIMEOUT)",
        "stall": f"sent nothing for {limits.stall:g} s (QUOTECLIP_PAGE_STALL)",
        "min_rate": f"averaged under {limits.min_rate / 1024:g} KB/s (QUOTECLIP_PAGE_MIN_RATE)",
    }[limit]
    return SourceTransient(f"source page could not be read: a server it needs {what}")


def same_video(url: str, info: dict[str, Any] | None) -> dict[str, Any] | None:
    """The page's video, when it is the one ``url``'s identity names: a YouTube page that answers with another
    video (a trailer in its place) is refused, so no clip key ever holds another video's picture."""
    kind, _, video = url_identity(url).partition(":")
    if kind == "youtube" and info is not None and info.get("_type") != "playlist" and info.get("id") != video:
        raise SourceUnavailable(f"source page {video} answered with another video ({str(info.get('id'))[:20]})")
    return info


# What yt-dlp's messages mean, first match wins (the texts are YouTube's and yt-dlp's own, lower-cased)
_REASONS: tuple[tuple[tuple[str, ...], type[SourceUnavailable], str], ...] = (
    (("not a bot",), SourceBotCheck, "the site asks to confirm this is not a bot (use cookies, a PO token or a proxy)"),
    (("http error 429", "too many requests"), SourceThrottled, "the site is throttling requests"),
    (
        (
            "not made this video available in your country",
            "not available in your country",
            "geo restrict",
            "geo-restrict",
            "blocked it in your country",
        ),
        SourceGeoBlocked,
        "the video is not offered in this country",
    ),
    (
        (
            "private video",
            "video is private",
            "has been removed",
            "video unavailable",
            "account associated with this video has been terminated",
            "no longer available",
        ),
        SourceGone,
        "the video is private or removed",
    ),
    (
        ("confirm your age", "sign in", "login required", "members-only", "join this channel", "registered users"),
        SourceLoginRequired,
        "the video needs a signed-in viewer (the operator's cookies)",
    ),
    (
        ("requested format is not available",),
        SourceUnavailable,
        "source offers no format quoteclip reads (plain http(s) files, HLS or DASH)",
    ),
    (
        ("http error 5", "timed out", "temporary failure", "connection reset"),
        SourceTransient,
        "source page could not be read",
    ),
)


def _raise_extraction_error(exc: Exception) -> NoReturn:
    """One distinct error per reason (bot check, throttled, geo-blocked, private/removed, login required), each
    transient or permanent as its cause is; anything else is 'could not be extracted' (permanent)."""
    from yt_dlp.utils import GeoRestrictedError

    message = str(exc).removeprefix("ERROR: ").splitlines()[0][:300]
    if isinstance(exc, GeoRestrictedError) or isinstance(getattr(exc, "orig_msg", None), GeoRestrictedError):
        raise SourceGeoBlocked(f"the video is not offered in this country ({message})") from None
    lowered = message.lower()
    for needles, error, what in _REASONS:
        if any(n in lowered for n in needles):
            raise error(f"{what} ({message})") from None
    raise SourceUnavailable(f"source could not be extracted: {message}") from None


def _extracted(url: str, info: dict[str, Any] | None, hls: list[dict[str, Any]] | None = None) -> Extracted:
    if info is None:
        raise SourceUnavailable(f"source has no video: {url}")
    if info.get("_type") == "playlist":
        raise SourceUnavailable(f"source is a playlist, not one video: {url}")
    if info.get("is_live") or info.get("live_status") in {"is_live", "is_upcoming", "post_live"}:
        raise SourceUnavailable(f"source is a live stream ({info.get('live_status')}), which cannot be clipped: {url}")
    formats = info.get("requested_formats") or [info]
    video = next((f for f in formats if f.get("vcodec") not in (None, "none")), formats[0])
    audio = next((f for f in formats if f is not video and f.get("acodec") not in (None, "none")), None)
    if not video.get("url"):
        raise SourceUnavailable(f"source offers no plain http(s) format (streaming manifests only): {url}")
    return Extracted(
        id=str(info.get("id") or ""),
        title=str(info.get("title") or "")[:200],
        extractor=str(info.get("extractor_key") or info.get("extractor") or ""),
        duration=float(info["duration"]) if info.get("duration") else None,
        video=_media_format(video),
        audio=_media_format(audio) if audio is not None and audio.get("url") else None,
        height=int(video["height"]) if video.get("height") else None,
        hls=tuple(_media_format(f) for f in hls or ()) if not str(video.get("protocol")).startswith("m3u8") else (),
    )


def _media_format(f: dict[str, Any]) -> MediaFormat:
    """A chosen format as the fetcher needs it: the headers yt-dlp would send with it (never Host, Range or
    Cookie: cookies come from the operator's file at each request), its size and ``available_at`` when known."""
    skip = {"host", "range", "cookie"}
    size = f.get("filesize")
    fragments = None
    if f.get("fragments") and f.get("protocol") == "http_dash_segments":
        base = str(f.get("fragment_base_url") or f["url"])
        fragments = tuple(
            (
                str(x.get("url") or urljoin(base, str(x.get("path") or ""))),
                float(x["duration"]) if x.get("duration") else None,
            )
            for x in f["fragments"]
        )
    return MediaFormat(
        url=str(f["url"]),
        format_id=str(f.get("format_id") or ""),
        protocol=str(f.get("protocol") or "https"),
        headers={k: str(v) for k, v in (f.get("http_headers") or {}).items() if k.lower() not in skip},
        filesize=int(size) if isinstance(size, int | float) and size > 0 else None,
        available_at=float(f["available_at"]) if f.get("available_at") else None,
        fragments=fragments,
    )


def readiness(cookies_file: Path | None = None, extractor_args: tuple[str, ...] = ()) -> dict[str, str]:
    """What YouTube extraction needs, as ``quoteclip health`` reports it: yt-dlp's version, the JavaScript
    runtime (deno) and yt-dlp's challenge solver scripts (yt-dlp-ejs), and the operator's cookies file and
    extractor arguments when set. "missing: …" / "bad: …" names what is wrong."""
    import subprocess
    from importlib import metadata

    found: dict[str, str] = {}
    try:
        found["yt_dlp"] = metadata.version("yt-dlp")
    except metadata.PackageNotFoundError:
        found["yt_dlp"] = "missing: pip install yt-dlp"
    deno = deno_path()
    try:
        out = subprocess.run([deno or "deno", "--version"], capture_output=True, text=True, timeout=20)
        first = out.stdout.splitlines()[0] if out.returncode == 0 and out.stdout else ""
        found["js_runtime"] = first or "missing: deno did not answer --version"
    except (OSError, subprocess.TimeoutExpired):
        found["js_runtime"] = "missing: no deno (pip install deno)"
    try:
        found["challenge_solver"] = f"yt-dlp-ejs {metadata.version('yt-dlp-ejs')}"
    except metadata.PackageNotFoundError:
        found["challenge_solver"] = "missing: pip install yt-dlp-ejs"
    try:
        found["po_token_provider"] = f"bgutil-ytdlp-pot-provider {metadata.version('bgutil-ytdlp-pot-provider')}"
    except metadata.PackageNotFoundError:
        found["po_token_provider"] = "none (optional: pip install 'quoteclip[youtube]')"
    if cookies_file is not None:
        try:
            found["cookies"] = f"{cookies_file} ({cookies_file.stat().st_size} bytes, readable)"
            cookies_file.open("rb").close()
        except OSError as exc:
            found["cookies"] = f"missing: {cookies_file} cannot be read ({exc.strerror or exc})"
    if extractor_args:
        try:
            parse_extractor_args(extractor_args)
            found["extractor_args"] = " ".join(extractor_args)
        except BadInput as exc:
            found["extractor_args"] = f"bad: {exc}"
    return found
