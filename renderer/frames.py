"""Which source frames a cut holds: the rule that maps a time kept to the millisecond to a frame.

Spec times are kept to the millisecond, but frames are not on a millisecond grid (at 30000/1001 fps frame 2
starts at 66.733… ms). The rule: **a cut at time t starts with the first frame whose timestamp is at or after
t − 0.5 ms, and ends before the first frame at or after end − 0.5 ms.** A frame's own timestamp rounded to the
millisecond therefore always selects that frame (the rounding moves it by at most 0.5 ms), and no two frames
can both be within half a millisecond of t (frames are at least 16 ms apart up to 60 fps). Renders, encoded
previews and copied previews all cut by this rule; the edit page nudges by it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

TOLERANCE = Fraction(1, 2000)  # half a millisecond


def seek_time(t: float) -> str:
    """What ffmpeg is told to cut at for a spec time ``t``: half a millisecond earlier, to 0.1 ms."""
    return f"{max(0.0, t - float(TOLERANCE)):.4f}"


@dataclass(frozen=True)
class FrameSpan:
    """The first and last source frames a cut [start, end) holds, by index and timestamp (constant rate)."""

    rate: Fraction
    first: int
    last: int

    def time(self, index: int) -> float:
        return round(float(index / self.rate), 3)

    def to_json(self) -> dict[str, object]:
        return {
            "frame_rate": f"{self.rate.numerator}/{self.rate.denominator}",
            "first_frame": {"index": self.first, "time": self.time(self.first)},
            "last_frame": {"index": self.last, "time": self.time(self.last)},
        }


def first_frame_at(t: float, rate: Fraction) -> int:
    """The index of the first frame at or after ``t`` − 0.5 ms (``t`` in seconds from the source's start)."""
    at = (Fraction(t).limit_denominator(10_000) - TOLERANCE) * rate
    return max(0, math.ceil(at))


def frame_span(start: float, end: float, rate: Fraction) -> FrameSpan:
    """The frames a cut [start, end) holds by the rule above."""
    return FrameSpan(rate, first_frame_at(start, rate), first_frame_at(end, rate) - 1)
