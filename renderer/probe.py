"""Probe a source with PyAV (the imageio-ffmpeg wheel ships no ffprobe). Results are frozen records.

PyAV is imported by the first probe made in this process, not with this module: a cold ``quoteclip render`` has
its local files probed by a helper process (``renderer.prober``) and never imports it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from quoteclip import media
from quoteclip.errors import BadInput, QuoteclipError, SourceTransient, SourceUnavailable

if TYPE_CHECKING:
    import av

Readable = media.Readable  # re-exported: a path or URL, or a seekable binary file

# Protocols a probe may use for a remote source: never file, concat, subfile or data.
NETWORK_PROTOCOLS = "http,https,tcp,tls"
FORMATS = media.MEDIA_FORMATS  # the plain media demuxers: one whitelist for every media open, sources too


@dataclass(frozen=True)
class MediaInfo:
    duration: float
    width: int
    height: int
    rotation: int
    fps: float
    frame_rate: str  # exact rational, e.g. 30000/1001
    video_codec: str
    has_audio: bool
    audio_codec: str | None = None
    start_time: float = 0.0
    streams: int = 1
    base_rate: str = ""  # the rate frames are timed on (r_frame_rate), e.g. 30000/1001, for frame indices
    # Where the inputs' time 0 lies on the source's timeline (seconds): 0 for a whole file; for the local file an
    # HLS source's needed segments were joined into, its first segment's start. ffmpeg cuts at start - offset.
    timeline_offset: float = 0.0
    audio_offset: float = 0.0  # the same for a separate audio input
    # No video track (a podcast, an audio-only format): rendered as an audiogram. ``artwork``: the source carries
    # a picture (cover art, an attached picture stream), the audiogram's background.
    audio_only: bool = False
    artwork: bool = False

    @property
    def display_size(self) -> tuple[int, int]:
        """Width and height as shown, after the rotation metadata is applied."""
        if self.rotation % 180:
            return self.height, self.width
        return self.width, self.height


# A cold ``quoteclip render``'s probe helper (``renderer.prober.ask``, set by its ``start``): asked first for a local
# path; None (no helper, or it gave no answer) and the probe is made here.
helper: Callable[[str, str | None, int | None, bool], MediaInfo | None] | None = None


def frame_too_large(width: int, height: int, max_pixels: int) -> bool:
    return width * height > max_pixels or max(width, height) > MAX_SIDE


MAX_SIDE = 16384


def probe(
    source: Readable,
    timeout: float = 30.0,
    name: str | None = None,
    max_pixels: int | None = None,
    first_frame: bool = True,
) -> MediaInfo:
    """Read the container header and the first video frame of a local path, an http(s) URL or a seekable file.

    With ``max_pixels``, a frame size over the cap (as the header declares it) is refused before any frame is
    decoded. ``first_frame=False``: the header only (a file quoteclip wrote itself: no rotation to read, the
    frames known to decode)."""
    options = {"format_whitelist": FORMATS}
    remote = False
    if isinstance(source, str):
        remote = source.startswith(("http://", "https://"))
        if not remote and helper is not None:
            answered = helper(source, name, max_pixels, first_frame)
            if answered is not None:
                return answered
        options["protocol_whitelist"] = NETWORK_PROTOCOLS if remote else "file"
    else:
        source.seek(0)
    label = name or (source if isinstance(source, str) else "source")
    import av

    try:
        # ``timeout`` bounds a URL's network reads only: PyAV's timeout check takes the GIL at every I/O step, so
        # a local file's open took 2-15× as long while another thread ran Python (the overlays drawn beside
        # it); a file object's reads are bounded by its own fetcher
        container = av.open(source, mode="r", options=options, timeout=timeout if remote else None)
    except av.error.InvalidDataError:
        raise BadInput(f"source is not a readable video file: {label}") from None
    except av.error.ArgumentError:
        raise BadInput(f"source is not a plain media file (playlists and the like are refused): {label}") from None
    except FileNotFoundError:
        raise SourceUnavailable(f"source not found: {label}") from None
    except av.error.HTTPNotFoundError:
        raise SourceUnavailable(f"source not found (HTTP 404): {label}") from None
    except av.error.HTTPClientError as exc:
        raise SourceUnavailable(f"source refused ({_short(exc)}): {label}") from None
    except QuoteclipError:
        raise
    except (av.error.HTTPServerError, av.error.HTTPError, TimeoutError, ConnectionError, OSError) as exc:
        raise SourceTransient(f"source could not be read ({_short(exc)}): {label}") from None
    with container:
        pictures = [v for v in container.streams.video if v.disposition & av.stream.Disposition.attached_pic]
        moving = [v for v in container.streams.video if v not in pictures]
        if not moving:
            if not container.streams.audio:
                raise BadInput(f"source has no video or audio stream: {label}")
            return _audio_only(container, bool(pictures))
        video = moving[0]
        audio = container.streams.audio[0] if container.streams.audio else None
        duration = _duration(container, video)
        rate = video.average_rate or video.guessed_rate or video.base_rate
        fps = float(rate) if rate else 0.0
        rotation = 0
        declared = (video.codec_context.width or 0, video.codec_context.height or 0)
        if max_pixels is not None and frame_too_large(*declared, max_pixels):
            raise SourceUnavailable(f"source frame size {declared[0]}x{declared[1]} is over the limit: {label}")
        width, height = declared
        if first_frame or not (width and height):
            try:
                frame = next(container.decode(video=0))
                rotation = int(round(getattr(frame, "rotation", 0) or 0)) % 360
            except (StopIteration, av.error.FFmpegError):
                raise BadInput(f"source has no decodable video frames: {label}") from None
            width, height = width or frame.width, height or frame.height
        start = float(container.start_time or 0) / av.time_base if container.start_time else 0.0
        return MediaInfo(
            duration=duration,
            width=int(width),
            height=int(height),
            rotation=rotation,
            fps=fps if math.isfinite(fps) and fps > 0 else 0.0,
            frame_rate=str(rate) if rate else "",
            video_codec=video.codec_context.name,
            has_audio=audio is not None,
            audio_codec=audio.codec_context.name if audio is not None else None,
            start_time=start,
            streams=len(container.streams),
            base_rate=str(video.guessed_rate or video.base_rate or rate or ""),
        )


def _duration(container: av.container.InputContainer, video: av.VideoStream | av.AudioStream) -> float:
    import av

    if container.duration:
        return float(container.duration) / av.time_base
    if video.duration and video.time_base:
        return float(video.duration * video.time_base)
    return 0.0


def _audio_only(container: av.container.InputContainer, artwork: bool) -> MediaInfo:
    """An audio-only source: the picture is made (renderer.audiogram), at 30 fps."""
    import av

    audio = container.streams.audio[0]
    start = float(container.start_time or 0) / av.time_base if container.start_time else 0.0
    return MediaInfo(
        duration=_duration(container, audio),
        width=0,
        height=0,
        rotation=0,
        fps=30.0,
        frame_rate="30",
        video_codec="",
        has_audio=True,
        audio_codec=audio.codec_context.name,
        start_time=start,
        streams=len(container.streams),
        base_rate="30",
        audio_only=True,
        artwork=artwork,
    )


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def has_audio(source: Readable) -> bool:
    """Whether a separate audio-only source (as YouTube serves them) has an audio stream."""
    import av

    options = {"format_whitelist": FORMATS}
    if not isinstance(source, str):
        source.seek(0)
    try:
        with av.open(source, mode="r", options=options) as container:
            return bool(container.streams.audio)
    except QuoteclipError:
        raise
    except (av.error.FFmpegError, OSError) as exc:
        raise SourceTransient(f"audio stream could not be read ({_short(exc)})") from None
