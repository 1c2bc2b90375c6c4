"""Benchmark sources, generated with ffmpeg's lavfi sources and cached between runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

CACHE = Path(".bench-cache")


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True)


def source_1080p(ffmpeg: str, minutes: float) -> Path:
    """A 1920×1080 30 fps source with a tone, 4 Mb/s, keyframes every 8 s, ``minutes`` long (looped from 20 s)."""
    return episode(ffmpeg, minutes, 1080, "4M")


def source_1080p_gop5(ffmpeg: str, minutes: float) -> Path:
    """The 1080p episode with a keyframe every 5 s (figure 13: a stream's first frame waits on the decode from the
    keyframe before the quote's start)."""
    return episode(ffmpeg, minutes, 1080, "4M", gop=150)


def episode(ffmpeg: str, minutes: float, height: int, bitrate: str, gop: int = 240) -> Path:
    """The same episode at another height (a page's lower-resolution format: 360p at 0.7 Mb/s), or with keyframes
    ``gop`` frames apart."""
    CACHE.mkdir(exist_ok=True)
    width = height * 16 // 9
    tag = "" if gop == 240 else f"-gop{gop}"
    base = CACHE / f"base-{height}p{tag}-20s.mp4"
    if not base.exists():
        _run(
            [
                ffmpeg,
                "-hide_banner",
                "-loglevel",
                "error",
                "-y",
                "-f",
                "lavfi",
                "-i",
                f"testsrc2=size={width}x{height}:rate=30:duration=20",
                "-f",
                "lavfi",
                "-i",
                "sine=frequency=330:sample_rate=48000:duration=20",
                "-c:v",
                "libx264",
                "-preset",
                "veryfast",
                "-b:v",
                bitrate,
                "-g",
                str(gop),
                "-pix_fmt",
                "yuv420p",
                "-c:a",
                "aac",
                "-shortest",
                str(base.with_suffix(".part.mp4")),
            ]
        )
        base.with_suffix(".part.mp4").replace(base)
    loops = max(1, round(minutes * 3))
    out = CACHE / f"episode-{height}p{tag}-{loops * 20}s.mp4"
    if not out.exists():
        _run(
            [
                ffmpeg,
                "-hide_banner",
                "-loglevel",
                "error",
                "-y",
                "-stream_loop",
                str(loops - 1),
                "-i",
                str(base),
                "-c",
                "copy",
                str(out.with_suffix(".part.mp4")),
            ]
        )
        out.with_suffix(".part.mp4").replace(out)
    return out
