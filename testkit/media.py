"""Media the tests and the benchmark generate with ffmpeg: a cached source made by lavfi (the argv is the product's
``quoteclip.media.generated_source_argv``, as ``quoteclip demo`` makes its own), and a quiet runner for the other
files they make (segments, odd codecs, artwork). Every file is written beside its name and moved there whole."""

from __future__ import annotations

import hashlib
import inspect
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from quoteclip.media import ffmpeg_quiet, generated_source_argv, lavfi

__all__ = ["ffmpeg", "generated", "lavfi", "run", "source", "with_artwork"]


def ffmpeg(binary: str, *args: str, timeout: float = 300) -> None:
    """Run ffmpeg (``binary``) quietly, no banner, errors only, an existing output replaced, with ``args``."""
    run([*ffmpeg_quiet(binary), *args], timeout)


def run(argv: list[str], timeout: float = 300) -> None:
    """Run a command that makes a file; a failure raises with the command and its stderr."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")


def with_artwork(binary: str, sound: Path, picture: Path, out: Path) -> None:
    """A copy of the audio file ``sound`` with ``picture`` attached as its artwork (as a podcast episode has)."""
    attach = ["-map", "0:a", "-map", "1:v", "-c:a", "copy", "-c:v", "mjpeg", "-disposition:v", "attached_pic"]
    ffmpeg(binary, "-i", str(sound), "-i", str(picture), *attach, str(out))


def generated(path: Path, make: Callable[[Path], None]) -> Path:
    """``path``, made by ``make(part)`` into a file beside it and moved to it whole; kept when it is there already."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.stem + ".part" + path.suffix)
    try:
        make(part)
        part.replace(path)
    finally:
        part.unlink(missing_ok=True)
    return path


def source(folder: Path, binary: str, *, name: str | None = None, rotation: int | None = None, **params: Any) -> Path:
    """A source made by lavfi (``params``: ``generated_source_argv``'s), once per set of parameters: in ``folder``
    as ``name``, else under a name drawn from the parameters. ``rotation``: a display rotation in degrees, set on
    the stream (the frames are stored as they are, a player turns them)."""
    named = inspect.signature(generated_source_argv).bind("", "", **params)
    named.apply_defaults()  # (the same source whether a default is given or left out)
    key = json.dumps([named.arguments, rotation], sort_keys=True)
    path = folder / (name or f"src-{hashlib.sha1(key.encode()).hexdigest()[:12]}.mp4")

    def make(part: Path) -> None:
        if rotation is None:
            run(generated_source_argv(binary, str(part), **params))
            return
        plain = part.with_name(part.stem + ".plain.mp4")
        try:  # (a rotation given with the encode would turn the frames themselves: set on a copy)
            run(generated_source_argv(binary, str(plain), **params))
            ffmpeg(binary, "-display_rotation", str(rotation), "-i", str(plain), "-c", "copy", str(part))
        finally:
            plain.unlink(missing_ok=True)

    return generated(path, make)
