"""A clip's quality report (``quoteclip check CLIP``): what a viewer would notice, read from the clip itself in one
ffmpeg pass (black stretches, frozen frames, long silences, loudness and true peak), and from its cut and words
(an end that falls inside a word). Each finding names what it is, where, and by how much.

A clip just rendered is not decoded again: the render's own pass runs the detectors on the frames and the sound it
encodes (``PICTURE_DETECTORS``, ``SOUND_DETECTORS``, renderer/plan.py) and writes what they saw beside the clip.
A clip with a loudness target is the exception for its sound: its report reads the clip's sound back (a pass that
decodes the sound alone), so the true peak checked against the limit is the encoded sound's, the AAC encoder's
overshoot included.

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
import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quoteclip.spec import Word

if TYPE_CHECKING:
    from .captions import CaptionTrack

BLACK_SECONDS = 0.5
FROZEN_SECONDS = 2.0
SILENCE_SECONDS = 1.5
SILENCE_DB = -50
INSIDE_WORD = 0.04  # seconds a cut may fall inside a word before it is said
LOUDNESS_TOLERANCE = 1.0  # LU from a platform's target

# The picture's detectors, each (filter, options), and where what they saw goes: the metadata they set on the frames,
# printed by ``metadata=mode=print`` to a file (PICTURE_FILE, beside the clip). The check's pass runs them on the
# decoded clip; a render runs them on the frames it encodes.
PICTURE_DETECTORS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("blackdetect", {"d": BLACK_SECONDS, "pix_th": 0.10}),
    ("freezedetect", {"n": "-60dB", "d": FROZEN_SECONDS}),
)
PICTURE_FILE = "picture-checks.txt"
# The sound's, the same way (``ametadata``, SOUND_FILE): the EBU R128 meter's running integrated loudness and
# per-channel true peaks (its last reading is the whole clip's), and silences. The meter goes first: it passes the
# sound on in frames of its own, which keep only the first input frame's metadata of each, so silencedetect's marks
# set before it would be lost.
SOUND_DETECTORS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("ebur128", {"peak": "true", "metadata": 1, "framelog": "quiet"}),
    ("silencedetect", {"noise": f"{SILENCE_DB}dB", "d": SILENCE_SECONDS}),
)
SOUND_FILE = "sound-checks.txt"

_BLACK = re.compile(r"lavfi\.black_(start|end)=(-?[\d.]+)")
_FREEZE = re.compile(r"lavfi\.freezedetect\.freeze_(start|end)=(-?[\d.]+)")
_SILENCE = re.compile(r"lavfi\.silence_(start|end)=(-?[\d.]+)")
_NUMBER = r"(-?[\d.]+|-?inf|nan)"
_INTEGRATED = re.compile(rf"lavfi\.r128\.I={_NUMBER}")
_TRUE_PEAK = re.compile(rf"lavfi\.r128\.true_peaks_ch\d+={_NUMBER}")  # (linear; each channel's highest so far)


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


def _chain(detectors: tuple[tuple[str, dict[str, Any]], ...], printer: str, said_to: str) -> str:
    chain = [f"{name}=" + ":".join(f"{k}={v}" for k, v in options.items()) for name, options in detectors]
    return ",".join([*chain, f"{printer}=mode=print:file={said_to}"])


def check_argv(ffmpeg: str, clip: str, picture: bool, sound: bool) -> list[str]:
    """The pass that reads the clip (run in a folder of its own): its ``picture`` through blackdetect and
    freezedetect, its ``sound`` through silencedetect and ebur128, what they saw printed to PICTURE_FILE and
    SOUND_FILE in that folder; nothing written."""
    argv = [ffmpeg, "-hide_banner", "-nostdin", "-nostats", "-loglevel", "error", "-i", clip]
    argv += ["-vf", _chain(PICTURE_DETECTORS, "metadata", PICTURE_FILE)] if picture else ["-vn"]
    argv += ["-af", _chain(SOUND_DETECTORS, "ametadata", SOUND_FILE)] if sound else ["-an"]
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


def read_picture(seen: str, duration: float, report: Report) -> None:
    """The findings of what the picture's detectors saw (``seen``: the metadata printed, PICTURE_FILE) in
    ``report``: black stretches of BLACK_SECONDS or more (blackdetect marks every black frame's start and end, as it
    logs only the long ones), frozen ones (freezedetect marks only those of FROZEN_SECONDS or more)."""
    for start, end in spans(seen, _BLACK, duration):
        if end - start >= BLACK_SECONDS - 1e-6:
            report.findings.append(
                {"kind": "black", "said": f"black from {start:.2f} s to {end:.2f} s", "at": [start, end]}
            )
    for start, end in spans(seen, _FREEZE, duration):
        report.findings.append(
            {"kind": "frozen", "said": f"frozen from {start:.2f} s to {end:.2f} s", "at": [start, end]}
        )


def read_sound(heard: str, duration: float, report: Report, target: float | None, peak_limit: float | None) -> None:
    """The findings of what the sound's detectors heard (``heard``: the metadata printed, SOUND_FILE) in ``report``,
    and its loudness (the meter's last reading) and true peak (the highest of its channels) in its measures."""
    for start, end in spans(heard, _SILENCE, duration):
        if end - start >= SILENCE_SECONDS:
            silent = f"silent (under {SILENCE_DB} dB) from {start:.2f} s to {end:.2f} s"
            report.findings.append({"kind": "silence", "said": silent, "at": [start, end]})
    readings, peaks = _INTEGRATED.findall(heard), [float(p) for p in _TRUE_PEAK.findall(heard)]
    if not readings or not peaks:
        return
    integrated = round(float(readings[-1]), 1)
    peak = max(peaks)
    true_peak = round(20 * math.log10(peak), 1) if peak > 0 else (peak if math.isnan(peak) else -math.inf)
    report.measured["loudness"] = {"integrated": integrated, "true_peak": true_peak}
    if target is not None and abs(integrated - target) > LOUDNESS_TOLERANCE:
        said_l = f"integrated loudness {integrated:.1f} LUFS, the platform's target is {target:g}"
        report.findings.append({"kind": "loudness", "said": said_l, "by": round(integrated - target, 1)})
    if peak_limit is not None and true_peak > peak_limit:
        said_p = f"true peak {true_peak:.1f} dBTP, over the platform's limit of {peak_limit:g} dBTP"
        report.findings.append({"kind": "true peak", "said": said_p, "by": round(true_peak - peak_limit, 1)})


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
    picture: str | None = None,
    heard: str | None = None,
) -> Report:
    """The report of ``clip`` (a file): its pass read, its cut (source ``start``, ``end``) against ``words``, and
    its burned ``captions``' lines against the frame and its safe area. ``picture``, ``heard``: what the
    detectors saw and heard in the clip's render (PICTURE_FILE's and SOUND_FILE's text); the pass reads only what
    they did not (none when they read both, or the picture of a clip with no ``sound``)."""
    report = Report()
    if picture is None or (sound and heard is None):
        with tempfile.TemporaryDirectory(prefix="quoteclip-check-") as folder:
            argv = check_argv(ffmpeg, os.path.abspath(clip), picture is None, sound and heard is None)
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=folder)
            if done.returncode != 0:
                raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "ffmpeg failed")
            seen, said = Path(folder, PICTURE_FILE), Path(folder, SOUND_FILE)
            if picture is None:
                picture = seen.read_text(encoding="utf-8") if seen.exists() else ""
            if sound and heard is None:
                heard = said.read_text(encoding="utf-8") if said.exists() else ""
    read_picture(picture or "", duration, report)
    if sound:
        read_sound(heard or "", duration, report, target, peak_limit)
    if cut is not None and words:
        cut_words(words, cut[0], cut[1], report)
    if captions is not None:
        caption_fit(captions, report)
    return report
