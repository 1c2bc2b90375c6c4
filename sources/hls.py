"""HLS sources (Twitch VODs, Dailymotion, BBC, most of Vimeo, YouTube's HLS formats): only the segments the cut
needs, fetched by quoteclip and vetted like every other request; ffmpeg reads a local file, never a URL.

The playlist is a small document fetched whole (under a size cap); every segment URL in it passes the address
rules as a redirect would. The segments overlapping the cut (with a little preroll) are fetched whole through
the block cache, keyed by the format's content key and the segment's number, so clips of one episode share them.
They are joined into one local file (MPEG-TS segments join as they are; fMP4 ones after their ``EXT-X-MAP``
init section).

A playlist costs its origin no more than the cut needs: durations must be decimal numbers of seconds, from
``MIN_SEGMENT_SECONDS`` (the last segment may be shorter) to ``MAX_SEGMENT_SECONDS``, and one cut fetches at most
``segment_limit`` segments (its span over ``SANE_SEGMENT_SECONDS``, plus a few), so a playlist of thousands of
0.0001 s segments is refused before any segment is asked for. Tags are read as tags (``#NAME:attributes``, quoted
values kept whole): an ``EXT-X-KEY`` with ``METHOD=NONE`` is no encryption, and a name inside a URI or a comment
is no tag.

Exactness: the episode's time 0 is the first segment's start timestamp (MPEG-TS streams usually start at 1.4 s or
10 s, not 0), and the local file starts at its first segment's. The difference, read from the timestamps
themselves, is the local file's ``offset`` on the episode's timeline: ffmpeg cuts at ``start - offset``.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

from quoteclip.errors import BadInput, SourceUnavailable

from .cache import BlockCache
from .http import Fetcher

log = logging.getLogger(__name__)

MAX_PLAYLIST_BYTES = 4 * 1024**2
MAX_SEGMENT_BYTES = 64 * 1024**2
MAX_SEGMENTS = 100_000
PREROLL = 0.5  # seconds of segments before the cut (audio priming, a segment not starting on its timestamp)
MIN_SEGMENT_SECONDS = 0.01  # shorter (but the last) is refused: under one frame at 100 fps
MAX_SEGMENT_SECONDS = 24 * 3600.0  # longer is refused: no source is that long
SANE_SEGMENT_SECONDS = 0.5  # the shortest segments a cut is fetched in: its segment count is bounded by it
EXTRA_SEGMENTS = 3  # segments one cut may fetch beyond its span over SANE_SEGMENT_SECONDS (its edges)
_DECIMAL = re.compile(r"[0-9]+(\.[0-9]*)?|\.[0-9]+")  # RFC 8216's decimal-floating-point: no sign, no exponent
_ATTRIBUTE = re.compile(r'\s*([A-Za-z0-9-]+)=("[^"\r\n]*"|[^,]*)\s*(,|$)')


@dataclass(frozen=True)
class Segment:
    url: str
    start: float  # by the playlist's durations (EXTINF), from the first segment
    duration: float


@dataclass(frozen=True)
class MediaPlaylist:
    segments: tuple[Segment, ...]
    init_url: str | None  # EXT-X-MAP: the init section of fMP4 segments

    @property
    def duration(self) -> float:
        last = self.segments[-1]
        return last.start + last.duration


def parse_playlist(text: str, base_url: str) -> MediaPlaylist:
    """A VOD media playlist's segments. Refused: a master playlist (yt-dlp picks the variant), a live or event
    playlist without its end, encrypted segments, byte-range segments; segments whose durations are not sane
    (bad input)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines or lines[0] != "#EXTM3U":
        raise SourceUnavailable("source playlist is not an HLS playlist (no #EXTM3U)")
    tags = [_tag(line) for line in lines]
    if any(name == "#EXT-X-STREAM-INF" for name, _ in tags):
        raise SourceUnavailable("source playlist is a master playlist, not one rendition")
    if not any(name == "#EXT-X-ENDLIST" for name, _ in tags):
        raise SourceUnavailable("source playlist is live (no #EXT-X-ENDLIST): a live stream cannot be clipped")
    segments: list[Segment] = []
    durations: list[float] = []
    init_url = None
    duration: float | None = None
    t = 0.0
    for line, (name, value) in zip(lines[1:], tags[1:], strict=True):
        if name == "#EXT-X-KEY":
            method = attributes(value, line).get("METHOD")
            if method is None:
                raise SourceUnavailable(f"source playlist has an EXT-X-KEY without its METHOD: {line[:80]!r}")
            if method != "NONE":
                raise SourceUnavailable(
                    f"source playlist is encrypted (EXT-X-KEY METHOD={method[:20]}), which quoteclip does not read"
                )
        elif name == "#EXT-X-BYTERANGE":
            raise SourceUnavailable("source playlist uses byte-range segments, which quoteclip does not read yet")
        elif name == "#EXT-X-MAP":
            found = attributes(value, line)
            uri = found.get("URI")
            if uri is None or "BYTERANGE" in found:
                raise SourceUnavailable("source playlist has an init section quoteclip cannot read")
            init_url = urljoin(base_url, uri)
        elif name == "#EXTINF":
            duration = _duration(value.split(",", 1)[0], line)
        elif not line.startswith("#"):
            if duration is None:
                raise SourceUnavailable("source playlist names a segment without its duration (#EXTINF)")
            segments.append(Segment(urljoin(base_url, line), round(t, 6), duration))
            durations.append(duration)
            t += duration
            duration = None
            if len(segments) > MAX_SEGMENTS:
                raise SourceUnavailable(f"source playlist has over {MAX_SEGMENTS} segments")
    if not segments:
        raise SourceUnavailable("source playlist has no segments")
    _check_durations(durations, "playlist", "segment")
    return MediaPlaylist(tuple(segments), init_url)


def _tag(line: str) -> tuple[str, str]:
    """A line's tag name and value (``#EXT-X-KEY``, ``METHOD=…``); ``("", "")`` for a URI or a comment."""
    if not line.startswith("#EXT"):
        return "", ""
    name, _, value = line.partition(":")
    return name, value


def attributes(value: str, line: str) -> dict[str, str]:
    """An attribute list (``NAME=value,NAME="quoted, with commas"``) as a dict, quotes taken off; refused when it
    does not parse."""
    found: dict[str, str] = {}
    at = 0
    while at < len(value):
        match = _ATTRIBUTE.match(value, at)
        if match is None or match.end() == at:
            raise SourceUnavailable(f"source playlist has a tag it cannot read: {line[:80]!r}")
        raw = match.group(2).strip()
        found[match.group(1)] = raw[1:-1] if raw.startswith('"') else raw
        at = match.end()
    return found


def _duration(text: str, line: str) -> float:
    text = text.strip()
    if not _DECIMAL.fullmatch(text):
        raise BadInput(
            f"source playlist has a bad segment duration: {line[:80]!r} (a decimal number of seconds is expected)"
        )
    return float(text)


def _check_durations(durations: list[float], what: str, piece: str) -> None:
    """Refused: a duration over MAX_SEGMENT_SECONDS, or under MIN_SEGMENT_SECONDS but for the last piece's."""
    for i, seconds in enumerate(durations):
        if not math.isfinite(seconds) or seconds < 0 or seconds > MAX_SEGMENT_SECONDS:
            raise BadInput(
                f"source {what} has a {piece} of {seconds:g} s (number {i + 1}): durations run from 0 to "
                f"{MAX_SEGMENT_SECONDS:g} s"
            )
        if seconds < MIN_SEGMENT_SECONDS and i < len(durations) - 1:
            raise BadInput(
                f"source {what} has a {piece} of {seconds:g} s (number {i + 1} of {len(durations)}): under the "
                f"{MIN_SEGMENT_SECONDS:g} s one can be (only the last may be shorter)"
            )


def from_fragments(fragments: tuple[tuple[str, float | None], ...]) -> MediaPlaylist:
    """A DASH representation's fragments (as yt-dlp lists them: the init section without a duration first) as a
    playlist of segments."""
    init = fragments[0][0] if fragments and fragments[0][1] is None else None
    segments: list[Segment] = []
    t = 0.0
    for url, duration in fragments[1 if init else 0 :]:
        if duration is None:
            raise SourceUnavailable("source manifest has a fragment without its duration")
        segments.append(Segment(url, round(t, 6), duration))
        t += duration
    if not segments or len(segments) > MAX_SEGMENTS:
        raise SourceUnavailable("source manifest has no fragments (or too many)")
    _check_durations([s.duration for s in segments], "manifest", "fragment")
    return MediaPlaylist(tuple(segments), init)


def segment_limit(start: float, end: float) -> int:
    """The most segments one cut of [start, end] fetches (beside the first and the init section)."""
    return math.ceil((end - start + PREROLL) / SANE_SEGMENT_SECONDS) + EXTRA_SEGMENTS


def needed(playlist: MediaPlaylist, start: float, end: float) -> list[int]:
    """The segments overlapping [start - PREROLL, end]."""
    lo, hi = start - PREROLL, end
    found = [i for i, s in enumerate(playlist.segments) if s.start < hi and s.start + s.duration > lo]
    return found or [len(playlist.segments) - 1]


@dataclass
class LocalCut:
    path: Path
    offset: float  # where the file's time 0 lies on the episode's timeline, in seconds
    duration: float  # the episode's, by the playlist


class HlsFormat:
    """One HLS rendition: its playlist, fetched once per job; segments through the block cache."""

    def __init__(
        self,
        url: str,
        fetcher: Fetcher,
        cache: BlockCache,
        content_key: str,
        headers: dict[str, str] | None = None,
        playlist: MediaPlaylist | None = None,
    ) -> None:
        """``playlist``: the segments when yt-dlp listed them already (DASH); else the HLS playlist at ``url``."""
        self.url = url
        self.fetcher = fetcher
        self.cache = cache
        self.content_key = content_key
        self.headers = headers or {}
        if playlist is not None:  # (every segment URL is checked when it is fetched, as a redirect is)
            self.playlist = playlist
            return
        body = fetcher.get_document(url, MAX_PLAYLIST_BYTES, headers=self.headers, what="playlist")
        try:
            text = body.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise SourceUnavailable("source playlist is not text") from None
        self.playlist = parse_playlist(text, url)

    def _piece(self, name: str, url: str) -> bytes:
        sid = self.cache.source_id(f"{self.content_key}|{name}")
        cached = self.cache.get(sid, 0)
        if cached is not None:
            return cached
        with self.cache.lock(sid, 0):
            cached = self.cache.get(sid, 0)
            if cached is not None:
                return cached
            data = self.fetcher.get_document(url, MAX_SEGMENT_BYTES, headers=self.headers, what="segment")
            self.cache.put(sid, 0, data)
            return data

    def _write(self, path: Path, indices: list[int]) -> None:
        with open(path, "wb") as out:
            if self.playlist.init_url is not None:
                out.write(self._piece("init", self.playlist.init_url))
            for i in indices:
                out.write(self._piece(f"segment-{i}", self.playlist.segments[i].url))

    def cut(self, start: float, end: float, workdir: Path, name: str, ffmpeg_bin: str) -> LocalCut:
        """A local MP4 of the segments of [start, end] and where it lies on the episode's timeline.

        The joined segments are remuxed (stream copy) into an MP4: an MPEG-TS file has no index, and ffmpeg's seek
        in one lands past the keyframe the cut must decode from."""
        indices = needed(self.playlist, start, end)
        limit = segment_limit(start, end)
        if len(indices) > limit:
            raise BadInput(
                f"source playlist needs {len(indices)} segments for a {end - start:g} s cut, over the {limit} one cut "
                f"may fetch (segments under {SANE_SEGMENT_SECONDS:g} s on average)"
            )
        first = workdir / f"{name}-first.{self.suffix}"
        self._write(first, [0])
        episode_zero = start_timestamp(first, stream="video")
        joined = workdir / f"{name}-joined.{self.suffix}"
        if indices == [0]:
            first.replace(joined)
        else:
            first.unlink()
            self._write(joined, indices)
        local = workdir / f"{name}.mp4"
        remux(joined, local, ffmpeg_bin)
        # the frame at the joined file's first video timestamp sits at its first video timestamp in the MP4; ffmpeg
        # seeks from the MP4's start: place the MP4's time 0 on the episode's timeline
        shift = start_timestamp(joined, stream="video") - start_timestamp(local, stream="video")
        offset = shift + start_timestamp(local) - episode_zero
        joined.unlink()
        log.info(
            "HLS: segments %d-%d of %d, offset %.6f s", indices[0], indices[-1], len(self.playlist.segments), offset
        )
        return LocalCut(local, round(offset, 6), self.playlist.duration)

    @property
    def suffix(self) -> str:
        return "mp4" if self.playlist.init_url is not None else "ts"


def remux(source: Path, output: Path, ffmpeg_bin: str) -> None:
    """Stream copy of the joined segments into an MP4 (local files only, plain media demuxers only)."""
    import subprocess

    from quoteclip.media import MEDIA_FORMATS

    argv = [
        ffmpeg_bin,
        "-hide_banner",
        "-nostdin",
        "-loglevel",
        "error",
        "-format_whitelist",
        MEDIA_FORMATS,
        "-protocol_whitelist",
        "file",
        "-i",
        str(source),
        "-map",
        "0:v?",
        "-map",
        "0:a?",
        "-c",
        "copy",
        "-f",
        "mp4",
        "-y",
        str(output),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()[-1:] or [""]
        raise SourceUnavailable(f"source segments are not readable media ({said[0][:200]})")


def start_timestamp(path: Path, stream: str | None = None) -> float:
    """The file's start time as ffmpeg counts it (the earliest first timestamp of its streams), or with
    ``stream="video"`` its first video frame's (the episode's time 0: a player shows the first frame at 0, the
    audio's priming before it)."""
    import av

    try:
        with av.open(str(path), options={"protocol_whitelist": "file"}) as container:
            video = container.streams.video[0] if stream == "video" and container.streams.video else None
            if video is not None and video.start_time is not None and video.time_base is not None:
                return float(video.start_time * video.time_base)
            if container.start_time is None:
                raise SourceUnavailable("source segment has no timestamps")
            return float(container.start_time) / av.time_base
    except av.error.FFmpegError:
        raise SourceUnavailable("source segment is not readable media") from None
