"""The word highlight changes on the first frame at or after each word's start (the frame rule of
renderer/frames.py), checked on the rendered frames' pixels."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from jobs.pipeline.produce import produce_clip
from quoteclip.spec import build_spec
from storage import LocalStorage


def first_frame(t: float, rate: Fraction) -> int:
    """The first frame whose time is at or after ``t`` (less the frame rule's half a millisecond)."""
    return math.ceil((Fraction(str(t)) - Fraction(1, 2000)) * rate)


def highlight_changes(path: Path) -> list[int]:
    """The frames on which the highlighted (yellow) word moves, by the centre of its pixels."""
    changes, last = [], None
    with av.open(str(path)) as c:
        for n, frame in enumerate(c.decode(video=0)):
            rgb = frame.to_ndarray(format="rgb24").astype(np.int16)
            mask = (rgb[..., 0] > 200) & (rgb[..., 1] > 170) & (rgb[..., 2] < 90)
            xs = np.nonzero(mask)[1]
            x = float(xs.mean()) if xs.size > 20 else None
            if last is not None and x is not None and abs(x - last) > 8:
                changes.append(n)
            last = x if x is not None else last
    return changes


# (frame rate, quote start, word starts in source seconds): starts on a frame (30 fps: 0.5 s is frame 15), between
# two frames, and a 29.97 fps frame's time rounded to the millisecond (frame 46: 1.534867 s → 1.535); up to 60 fps
CASES = [
    ("30", 0.0, [0.0, 0.3, 0.5, 0.81, 1.1, 1.234, 1.6]),
    ("30000/1001", 1.0, [1.0, 1.21, 1.535, 1.81, 2.1, 2.345, 2.6]),
    ("60", 0.5, [0.5, 0.8, 1.01, 1.3, 1.55, 1.9]),  # (a 40 ms clock is 2.4 frames at 60 fps)
]


@pytest.mark.parametrize(("fps", "start", "starts"), CASES)
def test_highlight_changes_on_the_first_frame_at_or_after_each_word(media, settings, fps, start, starts) -> None:
    src = media(size="320x180", duration=4, fps=fps, gop=60, pattern="black")
    ends = [*starts[1:], starts[-1] + 0.3]
    words = [{"text": f"w{n}", "start": a, "end": b} for n, (a, b) in enumerate(zip(starts, ends, strict=True))]
    spec = build_spec(
        {
            "source": str(src),
            "start": start,
            "end": ends[-1] + 0.2,
            "words": words,
            "fades": False,
            "quality": "preview",
            "style": {"preset": "bold-outline"},
        }
    )
    result = produce_clip(spec, settings, LocalStorage(settings.storage_dir))
    rate = Fraction(fps)
    expected = [first_frame(t, rate) - first_frame(start, rate) for t in starts[1:]]
    assert highlight_changes(Path(str(result.path))) == expected
