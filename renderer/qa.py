"""A clip's quality report (``quoteclip check CLIP``): what a viewer would notice, read from the clip itself in one
ffmpeg pass (black stretches, frozen frames, long silences, loudness and true peak), and from its cut and words
(an end that falls inside a word). Each finding names what it is, where, and by how much.

A clip just rendered is not decoded again for its picture: the render's own pass runs the picture's detectors on the
frames it encodes (``PICTURE_DETECTORS``, renderer/plan.py) and prints what they saw beside the clip (``Seen``); its
report's pass then reads the clip's sound alone (the sound as encoded, the AAC encoder's overshoot included; no
pass for a clip without the source's sound).

- black: 0.5 s or more of black picture (``blackdetect``'s defaults);
- frozen: 2 s or more of a picture that does not change (``freezedetect``);
- silence: 1.5 s or more under -50 dB (``silencedetect``);
- loudness: the integrated loudness more than 1 LU from the platform's target, a true peak over its limit
  (``ebur128``), for a clip made for a platform;
- a cut inside a word: the clip's start more than 40 ms after a word's start and before its end (its first word
  cut into), or its end more than 40 ms before a word's end and after its start (its last word cut off);
- a caption line cut off (wider than the frame: a word too long to wrap) or reaching into the margins a platform
  keeps clear at its sides, from the captions' layout (a clip's report in its manifest, where the layout is known).
"""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from quoteclip.spec import Word

from .plan import BLACK_SECONDS, PICTURE_DETECTORS, parse_loudness

if TYPE_CHECKING:
    from .captions import CaptionTrack

SILENCE_SECONDS = 1.5
SILENCE_DB = -50
INSIDE_WORD = 0.04  # seconds a cut may fall inside a word before it is said
LOUDNESS_TOLERANCE = 1.0  # LU from a platform's target

# Where a render prints what the picture's detectors (renderer/plan.py's PICTURE_DETECTORS) saw, beside the clip:
# the marks they set on the frames (``metadata=mode=print``). The check's pass reads their log instead.
PICTURE_FILE = "picture-checks.txt"

_BLACK = re.compile(r"black_start:(-?[\d.]+) black_end:(-?[\d.]+)")
_FREEZE = re.compile(r"freeze_(start|end): (-?[\d.]+)")
_SILENCE = re.compile(r"silence_(start|end): (-?[\d.]+)")
_BLACK_MARK = re.compile(r"lavfi\.black_(start|end)=(-?[\d.]+)")
_FREEZE_MARK = re.compile(r"lavfi\.freezedetect\.freeze_(start|end)=(-?[\d.]+)")


@dataclass(frozen=True)
class Seen:
    """What the picture's detectors printed in a render (PICTURE_FILE's ``text``), and the time of the last frame it
    encoded (``last_frame``, seconds into the clip: where a black stretch still open at the end ends, as
    blackdetect's own log ends it)."""

    text: str
    last_frame: float


@dataclass
class Report:
    """What a clip's check found: ``findings`` (each a dict: ``kind``, ``said`` and where), and what was measured."""

    findings: list[dict[str, Any]] = field(default_factory=list)
    measured: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "findings": self.findings, "measured": self.measured}


def picture_chain() -> str:
    """The picture's detectors as a filter chain."""
    return ",".join(
        f"{name}=" + ":".join(f"{k}={v}" for k, v in options.items()) for name, options in PICTURE_DETECTORS
    )


def check_argv(ffmpeg: str, clip: str, picture: bool, sound: bool) -> list[str]:
    """The pass that reads the clip: its ``picture`` through blackdetect and freezedetect, its ``sound`` through
    silencedetect and ebur128 (each frame's readings left out of the log, its summary in); nothing written."""
    argv = [ffmpeg, "-hide_banner", "-nostdin", "-nostats", "-i", clip]
    argv += ["-vf", picture_chain()] if picture else ["-vn"]
    if sound:
        argv += ["-af", f"silencedetect=noise={SILENCE_DB}dB:d={SILENCE_SECONDS},ebur128=peak=true:framelog=verbose"]
    else:
        argv += ["-an"]
    return [*argv, "-f", "null", "-"]


def spans(text: str, pattern: re.Pattern[str], duration: float) -> list[tuple[float, float]]:
    """(start, end) pairs of a detector's ``…_start``/``…_end`` lines (one still open at the end closes there)."""
    out, began = [], None
    for kind, value in pattern.findall(text):
        if kind == "start":
            began = float(value)
        elif began is not None:
            out.append((round(began, 3), round(float(value), 3)))
            began = None
    if began is not None:
        out.append((round(began, 3), round(duration, 3)))
    return out


def read_picture(seen: Seen, duration: float, report: Report) -> None:
    """The findings of what the picture's detectors printed in a render (``seen``) in ``report``: black stretches
    of BLACK_SECONDS or more (blackdetect marks the start and end of every black run, and logs only the long ones),
    frozen ones (freezedetect marks only those of FROZEN_SECONDS or more)."""
    for start, end in spans(seen.text, _BLACK_MARK, seen.last_frame):
        if end - start >= BLACK_SECONDS - 1e-6:
            _black(start, end, report)
    for start, end in spans(seen.text, _FREEZE_MARK, duration):
        _frozen(start, end, report)


def _black(start: float, end: float, report: Report) -> None:
    report.findings.append({"kind": "black", "said": f"black from {start:.2f} s to {end:.2f} s", "at": [start, end]})


def _frozen(start: float, end: float, report: Report) -> None:
    report.findings.append({"kind": "frozen", "said": f"frozen from {start:.2f} s to {end:.2f} s", "at": [start, end]})


def read(
    said: str, duration: float, report: Report, target: float | None, peak_limit: float | None, picture: bool = True
) -> None:
    """The findings of one pass's log ``said`` (``check_argv``) in ``report``: its picture's (``picture``: when it
    read the picture) and its sound's."""
    if picture:
        for start, end in ((float(a), float(b)) for a, b in _BLACK.findall(said)):
            _black(start, end, report)
        for start, end in spans(said, _FREEZE, duration):
            _frozen(start, end, report)
    for start, end in spans(said, _SILENCE, duration):
        if end - start >= SILENCE_SECONDS:
            silent = f"silent (under {SILENCE_DB} dB) from {start:.2f} s to {end:.2f} s"
            report.findings.append({"kind": "silence", "said": silent, "at": [start, end]})
    loudness = parse_loudness(said)
    if loudness is None:
        return
    # (a silent clip's true peak is -inf, and a number that is not one cannot be said in JSON: null)
    integrated, true_peak = (v if math.isfinite(v) else None for v in (loudness.integrated, loudness.true_peak))
    report.measured["loudness"] = {"integrated": integrated, "true_peak": true_peak}
    if target is not None and abs(loudness.integrated - target) > LOUDNESS_TOLERANCE:
        said_l = f"integrated loudness {loudness.integrated:.1f} LUFS, the platform's target is {target:g}"
        report.findings.append({"kind": "loudness", "said": said_l, "by": round(loudness.integrated - target, 1)})
    if peak_limit is not None and loudness.true_peak > peak_limit:
        said_p = f"true peak {loudness.true_peak:.1f} dBTP, over the platform's limit of {peak_limit:g} dBTP"
        report.findings.append({"kind": "true peak", "said": said_p, "by": round(loudness.true_peak - peak_limit, 1)})


def cut_words(words: Sequence[Word], start: float, end: float, report: Report) -> None:
    """Findings for a cut whose start or end falls inside a word (source times), by more than INSIDE_WORD."""
    for word in words:
        if word.start + INSIDE_WORD < start < word.end:
            by = round(start - word.start, 3)
            said = f"the clip starts {by * 1000:.0f} ms into the word {word.text!r} ({word.start:g}-{word.end:g} s)"
            report.findings.append(
                {"kind": "cut inside a word", "said": said, "end": "start", "word": word.text, "by": by}
            )
        if word.start < end < word.end - INSIDE_WORD:
            by = round(word.end - end, 3)
            span = f"({word.start:g}-{word.end:g} s)"
            said = f"the clip ends {by * 1000:.0f} ms before the end of the word {word.text!r} {span}"
            report.findings.append(
                {"kind": "cut inside a word", "said": said, "end": "end", "word": word.text, "by": by}
            )


def caption_fit(track: CaptionTrack, report: Report) -> None:
    """Findings for a caption line the frame cuts off (wider than the frame), or that reaches into the margins the
    clip's platform keeps clear at its sides (``right_safe``, the lines being centred)."""
    width, safe = track.frame_width, track.style.right_safe
    for start, text, reach in track.line_reach():
        shown = text if len(text) <= 48 else text[:45] + "..."
        if reach > width / 2:
            said = f"the caption line {shown!r} at {start:.2f} s is {2 * reach:.0f} px wide, the frame {width} px"
            report.findings.append(
                {"kind": "caption cut off", "said": said, "at": start, "by": round(2 * reach - width)}
            )
        elif safe and reach > width * (0.5 - safe):
            clear = width * (1 - 2 * safe)
            said = (
                f"the caption line {shown!r} at {start:.2f} s is {2 * reach:.0f} px wide, past the {clear:.0f} px the "
                f"platform's safe area leaves"
            )
            report.findings.append(
                {"kind": "caption outside the safe area", "said": said, "at": start, "by": round(2 * reach - clear)}
            )


def check(
    clip: str,
    ffmpeg: str,
    duration: float,
    sound: bool,
    words: Sequence[Word] = (),
    cut: tuple[float, float] | None = None,
    target: float | None = None,
    peak_limit: float | None = None,
    timeout: float = 300,
    captions: CaptionTrack | None = None,
    picture: Seen | None = None,
) -> Report:
    """The report of ``clip`` (a file): its pass read, its cut (source ``start``, ``end``) against ``words``, and
    its burned ``captions``' lines against the frame and its safe area. ``picture``: what the picture's detectors
    saw in the clip's render; the pass then reads the clip's sound alone (none when it has no ``sound``)."""
    report = Report()
    if picture is not None:
        read_picture(picture, duration, report)
    if picture is None or sound:
        argv = check_argv(ffmpeg, clip, picture is None, sound)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "ffmpeg failed")
        read(done.stderr, duration, report, target, peak_limit, picture is None)
    if cut is not None and words:
        cut_words(words, cut[0], cut[1], report)
    if captions is not None:
        caption_fit(captions, report)
    return report
