"""Benchmark sources, generated with ffmpeg's lavfi sources and cached between runs."""

from __future__ import annotations

from pathlib import Path

from testkit.media import ffmpeg as run_ffmpeg
from testkit.media import generated, source

CACHE = Path(".bench-cache")


def source_1080p(ffmpeg: str, minutes: float) -> Path:
    """A 1920×1080 30 fps source with a tone, 4 Mb/s, keyframes every 8 s, ``minutes`` long (looped from 20 s)."""
    return episode(ffmpeg, minutes, 1080, "4M")


def continuous_1080p(ffmpeg: str, seconds: float) -> Path:
    """A 1920×1080 30 fps source of ``seconds`` made in one piece (not looped: its frames evenly timed from end to
    end, as figure 16's split clips need), otherwise as the episode."""
    return source(
        CACHE,
        ffmpeg,
        name=f"continuous-1080p-{seconds:g}s.mp4",
        size="1920x1080",
        duration=seconds,
        tone=330,
        preset="veryfast",
        bitrate="4M",
        gop=240,
        strict_gop=False,
    )


def source_1080p_gop5(ffmpeg: str, minutes: float) -> Path:
    """The 1080p episode with a keyframe every 5 s (figure 13: a stream's first frame waits on the decode from the
    keyframe before the quote's start)."""
    return episode(ffmpeg, minutes, 1080, "4M", gop=150)


def episode(ffmpeg: str, minutes: float, height: int, bitrate: str, gop: int = 240) -> Path:
    """The same episode at another height (a page's lower-resolution format: 360p at 0.7 Mb/s), or with keyframes
    ``gop`` frames apart."""
    tag = "" if gop == 240 else f"-gop{gop}"
    base = source(
        CACHE,
        ffmpeg,
        name=f"base-{height}p{tag}-20s.mp4",
        size=f"{height * 16 // 9}x{height}",
        duration=20,
        tone=330,
        preset="veryfast",
        bitrate=bitrate,
        gop=gop,
        strict_gop=False,
    )
    loops = max(1, round(minutes * 3))
    return generated(
        CACHE / f"episode-{height}p{tag}-{loops * 20}s.mp4",
        lambda part: run_ffmpeg(ffmpeg, "-stream_loop", str(loops - 1), "-i", str(base), "-c", "copy", str(part)),
    )
