"""Probe a source with PyAV (the imageio-ffmpeg wheel ships no ffprobe). Results are frozen records."""

from __future__ import annotations

import math
from dataclasses import dataclass

import av

from quoteclip.errors import BadInput, SourceTransient, SourceUnavailable

# Protocols a probe may use for a remote source: never file, concat, subfile or data.
NETWORK_PROTOCOLS = "http,https,tcp,tls"


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

    @property
    def display_size(self) -> tuple[int, int]:
        """Width and height as shown, after the rotation metadata is applied."""
        if self.rotation % 180:
            return self.height, self.width
        return self.width, self.height


def probe(source: str, timeout: float = 30.0) -> MediaInfo:
    """Read the container header and the first video frame of a local path or an http(s) URL."""
    remote = source.startswith(("http://", "https://"))
    options = {"protocol_whitelist": NETWORK_PROTOCOLS if remote else "file"}
    try:
        container = av.open(source, options=options, timeout=timeout)
    except av.error.InvalidDataError:
        raise BadInput(f"source is not a readable video file: {source}") from None
    except FileNotFoundError:
        raise SourceUnavailable(f"source not found: {source}") from None
    except av.error.HTTPNotFoundError:
        raise SourceUnavailable(f"source not found (HTTP 404): {source}") from None
    except av.error.HTTPClientError as exc:
        raise SourceUnavailable(f"source refused ({_short(exc)}): {source}") from None
    except (av.error.HTTPServerError, av.error.HTTPError, TimeoutError, ConnectionError, OSError) as exc:
        raise SourceTransient(f"source could not be read ({_short(exc)}): {source}") from None
    with container:
        if not container.streams.video:
            raise BadInput(f"source has no video stream: {source}")
        video = container.streams.video[0]
        audio = container.streams.audio[0] if container.streams.audio else None
        duration = _duration(container, video)
        rate = video.average_rate or video.guessed_rate or video.base_rate
        fps = float(rate) if rate else 0.0
        rotation = 0
        try:
            frame = next(container.decode(video=0))
            rotation = int(round(getattr(frame, "rotation", 0) or 0)) % 360
        except (StopIteration, av.error.FFmpegError):
            raise BadInput(f"source has no decodable video frames: {source}") from None
        width = video.codec_context.width or frame.width
        height = video.codec_context.height or frame.height
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
        )


def _duration(container: av.container.InputContainer, video: av.VideoStream) -> float:
    if container.duration:
        return float(container.duration) / av.time_base
    if video.duration and video.time_base:
        return float(video.duration * video.time_base)
    return 0.0


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]
