"""A sample source for ``quoteclip demo``, generated with ffmpeg's lavfi sources (no network)."""

from __future__ import annotations

from pathlib import Path

from quoteclip.media import generated_source_argv
from quoteclip.settings import Settings, default_cache_dir
from renderer.ffmpeg import ffmpeg_binary, run_ffmpeg


def demo_source(settings: Settings, seconds: int = 15) -> Path:
    """A 1920×1080 30 fps test pattern with a tone, keyframes every 10 s; made once, then reused."""
    path = default_cache_dir() / f"demo-1080p-{seconds}s.mp4"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part.mp4")
    argv = generated_source_argv(
        ffmpeg_binary(settings.ffmpeg_binary), str(tmp), size="1920x1080", duration=seconds, gop=300, strict_gop=False
    )
    try:
        run_ffmpeg(argv, timeout=300)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
