"""A sample source for ``quoteclip demo``, generated with ffmpeg's lavfi sources (no network)."""

from __future__ import annotations

from pathlib import Path

from quoteclip.settings import Settings, default_cache_dir
from renderer.ffmpeg import ffmpeg_binary, run_ffmpeg


def demo_source(settings: Settings, seconds: int = 15) -> Path:
    """A 1920×1080 30 fps test pattern with a tone, keyframes every 10 s; made once, then reused."""
    path = default_cache_dir() / f"demo-1080p-{seconds}s.mp4"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part.mp4")
    argv = [
        ffmpeg_binary(settings.ffmpeg_binary),
        "-hide_banner",
        "-nostdin",
        "-loglevel",
        "error",
        "-y",
        "-f",
        "lavfi",
        "-i",
        f"testsrc2=size=1920x1080:rate=30:duration={seconds}",
        "-f",
        "lavfi",
        "-i",
        f"sine=frequency=440:sample_rate=48000:duration={seconds}",
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-g",
        "300",
        "-pix_fmt",
        "yuv420p",
        "-c:a",
        "aac",
        "-shortest",
        str(tmp),
    ]
    try:
        run_ffmpeg(argv, timeout=300)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
