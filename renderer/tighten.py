"""Pauses tightened (a spec's ``tighten``): the quote's long silences shortened, cut on frames, the sound crossfaded.

A pause inside the quote longer than the threshold (between two words of the transcript, or a silence ffmpeg's
``silencedetect`` finds in the quote's sound when there are no word times) keeps half the threshold after the word
before it and half before the word after it; the frames between are left out. The cuts fall on frame boundaries
(the frame rule of renderer/frames.py), so the clip holds whole source frames, span after span; the sound of each
span is cut at the same times and the spans are crossfaded over ``CROSSFADE`` (no click), the overlap taken from the
silence left out so the sound stays as long as the picture. Captions follow the new timeline (``respec``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import ffmpeg

from quoteclip.spec import ClipSpec, Word

from .ffmpeg import run_ffmpeg
from .frames import first_frame_at
from .plan import source_input, source_rate
from .probe import MediaInfo

CROSSFADE = 0.01  # seconds each join's sound is crossfaded over
SILENCE_DB = -35  # silencedetect's noise floor: quieter than this, for longer than the threshold, is a pause
SILENCE_KEYS = re.compile(r"lavfi\.silence_(start|end)=(-?[\d.]+)")


@dataclass(frozen=True)
class Kept:
    """The source frames a tightened clip holds: spans of frame indices (first, last, inclusive) of the source,
    in order, at ``rate``; ``first`` is the cut's first frame (the first frame ffmpeg's seek hands on)."""

    rate: Fraction
    first: int
    spans: tuple[tuple[int, int], ...]
    cut_start: float

    @property
    def frames(self) -> int:
        return sum(last - first + 1 for first, last in self.spans)

    @property
    def duration(self) -> float:
        """The tightened clip's length, seconds: its frames at the source's rate."""
        return float(self.frames / self.rate)

    @property
    def cut(self) -> tuple[float, float]:
        """(start in the source, length) of the tightened clip, as a cut is given (the length rounded to 1 ms)."""
        return self.cut_start, round(self.duration, 3)

    def source_spans(self) -> list[dict[str, object]]:
        """The spans kept, in source time and frames (the manifest's ``kept``)."""
        return [
            {
                "start": round(float(first / self.rate), 3),
                "end": round(float((last + 1) / self.rate), 3),
                "first_frame": first,
                "last_frame": last,
            }
            for first, last in self.spans
        ]

    def clip_time(self, t: float) -> float:
        """Where source time ``t`` falls in the tightened clip, seconds from its start (a time left out falls on
        the start of the span after it)."""
        at, done = Fraction(t).limit_denominator(10_000) * self.rate, Fraction(0)
        for first, last in self.spans:
            if at < first:
                break
            if at <= last + 1:
                return round(float((done + at - first) / self.rate), 3)
            done += last - first + 1
        return round(float(done / self.rate), 3)

    def respec(self, spec: ClipSpec) -> ClipSpec:
        """``spec`` as the captions of the tightened clip are laid out from: its quote and words moved to where they
        fall in the clip (as source times counted from the cut's start, with ``cut`` as the cut)."""

        def moved(t: float) -> float:
            return round(self.cut_start + self.clip_time(t), 3)

        words = None
        if spec.words is not None:
            words = tuple(Word(w.text, moved(w.start), max(moved(w.start), moved(w.end))) for w in spec.words)
        return spec.model_copy(update={"start": moved(spec.start), "end": moved(spec.end), "words": words})

    def picture(self, video: ffmpeg.nodes.FilterableStream) -> ffmpeg.nodes.FilterableStream:
        """The cut's frames (as decoded from the cut's start) reduced to the spans kept: selected by index and
        retimed one after another."""
        rate = f"({self.rate.numerator}/{self.rate.denominator})"
        chosen = any_of([f"between(n,{a},{b})" for a, b in self._relative()])
        return video.filter("select", chosen).filter("setpts", f"N/{rate}/TB")

    def _relative(self) -> list[tuple[int, int]]:
        return [(first - self.first, last - self.first) for first, last in self.spans]

    def apply(
        self, video: ffmpeg.nodes.FilterableStream | None, audio: ffmpeg.nodes.FilterableStream
    ) -> tuple[ffmpeg.nodes.FilterableStream | None, ffmpeg.nodes.FilterableStream]:
        """The cut's picture and sound (as decoded from the cut's start) reduced to the spans kept: the frames by
        ``picture``; the sound cut at the same times, the spans joined by crossfades."""
        if video is not None:
            video = self.picture(video)
        relative = self._relative()
        if len(relative) == 1:
            a, b = relative[0]
            cut = audio.filter("atrim", start=_t(a / self.rate), end=_t((b + 1) / self.rate))
            return video, cut.filter("asetpts", "PTS-STARTPTS")
        branches = audio.filter_multi_output("asplit", len(relative))
        half = CROSSFADE / 2
        joined = None
        for n, (a, b) in enumerate(relative):
            start = float(a / self.rate) - (half if n > 0 else 0.0)
            end = float((b + 1) / self.rate) + (half if n < len(relative) - 1 else 0.0)
            part = branches[n].filter("atrim", start=_t(start), end=_t(end)).filter("asetpts", "PTS-STARTPTS")
            joined = part if joined is None else ffmpeg.filter([joined, part], "acrossfade", d=CROSSFADE)
        assert joined is not None
        return video, joined


TERMS_PER_GROUP = 8  # ffmpeg's expression parser refuses a sum of more than about 100 terms ("Cannot allocate memory")


def any_of(terms: list[str]) -> str:
    """``terms`` summed in an expression ffmpeg parses however many there are: groups of TERMS_PER_GROUP in
    parentheses, grouped again until one sum is left (2,000 pauses nest four deep)."""
    while len(terms) > TERMS_PER_GROUP:
        terms = [f"({'+'.join(terms[i : i + TERMS_PER_GROUP])})" for i in range(0, len(terms), TERMS_PER_GROUP)]
    return "+".join(terms)


def _t(seconds: float | Fraction) -> str:
    return f"{float(seconds):.6f}"


def pauses_between(words: Sequence[Word], start: float, end: float) -> list[tuple[float, float]]:
    """The silences between consecutive words inside [start, end] (source times)."""
    inside = sorted((w for w in words if w.end > start and w.start < end and w.text.strip()), key=lambda w: w.start)
    gaps = []
    for before, after in zip(inside, inside[1:], strict=False):
        if after.start > before.end:
            gaps.append((max(before.end, start), min(after.start, end)))
    return gaps


def kept_frames(
    cut: tuple[float, float], pauses: Sequence[tuple[float, float]], threshold: float, rate: Fraction
) -> Kept | None:
    """The frames a cut keeps once each pause longer than ``threshold`` is shortened to it (half kept after the
    sound before, half before the sound after); None when no pause is long enough to leave a frame out."""
    start, duration = cut
    first, end = first_frame_at(start, rate), first_frame_at(start + duration, rate)
    left: list[tuple[int, int]] = []
    for a, b in sorted(pauses):
        if b - a <= threshold:
            continue
        drop_from = max(first, first_frame_at(a + threshold / 2, rate))
        drop_to = min(end, first_frame_at(b - threshold / 2, rate))  # (the first frame kept after the pause)
        if drop_to > drop_from:
            left.append((drop_from, drop_to))
    if not left:
        return None
    spans, at = [], first
    for drop_from, drop_to in left:
        if drop_from > at:
            spans.append((at, drop_from - 1))
        at = max(at, drop_to)
    if at < end:
        spans.append((at, end - 1))
    return Kept(rate, first, tuple(spans), start)


def silence_probe(
    sound: ffmpeg.nodes.FilterableStream, threshold: float, found: Path, ffmpeg_bin: str = "ffmpeg"
) -> list[str]:
    """The pass that finds the pauses of a quote without word times: its sound through ``silencedetect`` (quieter
    than SILENCE_DB for longer than ``threshold``), each silence's start and end written to ``found``."""
    detected = sound.filter("silencedetect", noise=f"{SILENCE_DB}dB", d=f"{threshold:.3f}").filter(
        "ametadata", mode="print", file=str(found)
    )
    out = ffmpeg.output(detected, "-", f="null")
    out = out.global_args("-hide_banner", "-nostdin", "-nostats", "-loglevel", "error")
    return list(out.compile(cmd=ffmpeg_bin))


def parse_silences(text: str, offset: float, end: float) -> list[tuple[float, float]]:
    """The silences ``silence_probe`` wrote (seconds from the quote's start, ``offset`` in the source), as source
    times; only those that end before the quote's ``end`` (a silence running to the end is no pause inside it)."""
    silences, began = [], None
    for kind, value in SILENCE_KEYS.findall(text):
        if kind == "start":
            began = max(0.0, float(value))
        elif began is not None:
            silences.append((round(offset + began, 3), round(offset + float(value), 3)))
            began = None
    return [(a, b) for a, b in silences if a > offset and b < end]


def tightened(
    spec: ClipSpec,
    info: MediaInfo,
    source: str,
    cut: tuple[float, float],
    workdir: Path,
    ffmpeg_bin: str,
    timeout: float,
    audio_source: str | None = None,
) -> Kept | None:
    """The frames ``spec``'s clip keeps when it asks for its pauses tightened; None when it does not, or when no
    pause is long enough. The pauses: between the spec's words, else the silences of the quote's sound (a pass of
    its own that reads the sound only)."""
    if spec.tighten is None:
        return None
    if spec.words:
        pauses = pauses_between(spec.words, spec.start, spec.end)
    elif audio_source is None and not info.has_audio:
        return None
    else:
        span = spec.end - spec.start
        if audio_source is not None:
            sound = source_input(audio_source, spec.start - info.audio_offset, span).audio
        else:
            sound = source_input(source, spec.start - info.timeline_offset, span).audio
        found = workdir / "silences.txt"
        run_ffmpeg(silence_probe(sound, spec.tighten, found, ffmpeg_bin), timeout=timeout)
        text = found.read_text(encoding="utf-8", errors="replace") if found.is_file() else ""
        pauses = parse_silences(text, spec.start, spec.end)
    return kept_frames(cut, pauses, spec.tighten, source_rate(info))
