"""What a user would otherwise do: a bare ffmpeg transcode (the limit), moviepy, download-then-cut."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from renderer.plan import CRF, KEYFRAMES, PRESET


def bare_ffmpeg(ffmpeg: str, source: str, start: float, duration: float, out: Path, preset: str = PRESET) -> None:
    """``ffmpeg -ss S -i SRC -t D -vf scale=-2:720 -c:v libx264 -preset P -crf C -force_key_frames K -c:a aac``:
    the clip's encode as a render makes it (its preset, CRF and keyframe every second, renderer/plan.py)."""
    subprocess.run(
        [
            ffmpeg,
            "-hide_banner",
            "-loglevel",
            "error",
            "-y",
            "-ss",
            f"{start:.3f}",
            "-i",
            source,
            "-t",
            f"{duration:.3f}",
            "-vf",
            "scale=-2:720",
            "-c:v",
            "libx264",
            "-preset",
            preset,
            "-crf",
            str(CRF),
            "-force_key_frames",
            KEYFRAMES,
            "-c:a",
            "aac",
            str(out),
        ],
        check=True,
    )


def similarity(ffmpeg: str, clip: str, reference: str) -> tuple[float, float]:
    """SSIM (all planes) and PSNR (dB, average) of ``clip``'s frames against ``reference``'s, frame by frame."""
    done = subprocess.run(
        [
            ffmpeg,
            "-hide_banner",
            "-nostats",
            "-i",
            clip,
            "-i",
            reference,
            "-filter_complex",
            "[0:v]split[a0][a1];[1:v]split[b0][b1];[a0][b0]ssim;[a1][b1]psnr",
            "-f",
            "null",
            "-",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    ssim = re.search(r"SSIM .* All:([0-9.]+)", done.stderr)
    psnr = re.search(r"PSNR .* average:([0-9.]+|inf)", done.stderr)
    if ssim is None or psnr is None:
        raise SystemExit(f"bench: ffmpeg printed no SSIM/PSNR for {clip}")
    return float(ssim.group(1)), float(psnr.group(1))


def moviepy_clip(source: str, start: float, end: float, caption: str, brand: str, font: str, out: Path) -> None:
    """The same clip the way a Python user would make it with moviepy 2."""
    from moviepy import CompositeVideoClip, TextClip, VideoFileClip

    with VideoFileClip(source) as video:
        part = video.subclipped(start, end).resized(height=720)
        text = (
            TextClip(
                font=font,
                text=caption,
                font_size=40,
                color="white",
                stroke_color="black",
                stroke_width=2,
                method="caption",
                size=(1100, None),
                bg_color=(0, 0, 0),
            )
            .with_opacity(0.85)
            .with_position(("center", 520))
            .with_duration(part.duration)
        )
        mark = (
            TextClip(font=font, text=brand, font_size=40, color="white")
            .with_opacity(0.8)
            .with_position((1050, 20))
            .with_duration(part.duration)
        )
        CompositeVideoClip([part, text, mark]).write_videofile(
            str(out),
            codec="libx264",
            preset=PRESET,
            ffmpeg_params=["-crf", str(CRF), "-force_key_frames", KEYFRAMES, "-pix_fmt", "yuv420p"],
            audio_codec="aac",
            temp_audiofile_path=str(out.parent),  # (moviepy's default is the working directory)
            logger=None,
        )


def download_then_cut(ffmpeg: str, url: str, start: float, duration: float, folder: Path) -> int:
    """The naive pipeline: yt-dlp downloads the whole file, then ffmpeg cuts it. Returns the bytes downloaded."""
    import yt_dlp

    opts = {
        "quiet": True,
        "no_warnings": True,
        "noprogress": True,
        "outtmpl": str(folder / "full.%(ext)s"),
        "ffmpeg_location": ffmpeg,
        "cachedir": False,
    }
    with yt_dlp.YoutubeDL(opts) as ydl:
        ydl.download([url])
    full = next(folder.glob("full.*"))
    bare_ffmpeg(ffmpeg, str(full), start, duration, folder / "cut.mp4")
    size = full.stat().st_size
    full.unlink()
    return size
