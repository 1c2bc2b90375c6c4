"""A long clip rendered in pieces: its frames split on the output's frame grid, each piece's picture encoded on its
own (by any worker), the whole clip's sound encoded once, then the pieces joined without encoding (the concat
demuxer, stream copy) into the one faststart MP4 a one-piece render would store.

What makes the join exact: every piece decodes the source from the keyframe before its first frame and encodes
exactly its frames (``build_piece``), timed on the whole clip's clock while its picture is made, so captions, the
word highlight, the watermark and fades fall where they fall in one piece; the sound never splits, so it has no
seam (no gap, overlap or click at a join) and is the one-piece render's sound, packet for packet."""

from __future__ import annotations

import logging
import math
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from quoteclip.errors import QuoteclipError, RenderFailed
from quoteclip.spec import ClipSpec

from .ffmpeg import run_ffmpeg
from .fragments import STREAM_INTERLEAVE, STREAM_MOVFLAGS, fragment_us
from .fragments import Piece as Fragment
from .fragments import Splitter as FragmentSplitter
from .plan import (
    Target,
    build_join,
    build_piece,
    build_sound,
    output_frames,
    output_rate,
    source_rate,
)
from .probe import MediaInfo, Readable, probe
from .render import (
    OVERSIZE_FRAME,
    Drawn,
    RenderResult,
    _check_platform,
    _targets,
    check_span,
    cut_for,
    draw_overlays,
    measure_loudness,
    run_streamed,
)


@dataclass(frozen=True)
class Piece:
    """Output frames ``first`` … ``first + count − 1`` of a clip rendered in pieces."""

    index: int
    first: int
    count: int


def plan_pieces(frames: int, rate: float, piece_seconds: float) -> list[Piece]:
    """A clip of ``frames`` frames at ``rate`` cut into pieces of about ``piece_seconds`` each, of equal lengths to
    a frame (the longest piece is the plan's critical path); a piece may be up to 5 % longer than asked rather
    than leave a sliver of a piece at the end."""
    count = max(1, math.ceil(frames / max(1.0, piece_seconds * rate) - 0.05))
    base, extra = divmod(frames, count)
    pieces, first = [], 0
    for index in range(count):
        size = base + (1 if index < extra else 0)
        pieces.append(Piece(index, first, size))
        first += size
    return pieces


def why_whole(spec: ClipSpec, info: MediaInfo) -> str | None:
    """Why ``spec``'s clip renders in one piece whatever its length (None: it may split). The pieces are cut on the
    source's frames, so the output must hold the source's frames one for one; an audiogram, the speaker fit (one
    face track over the whole clip), tightened pauses (spans that decide which frames are kept) and a source whose
    average frame rate is not its frame rate (gaps in its timing: the output drops frames at them, and a piece
    would drop them elsewhere) stay whole."""
    if spec.quality != "final":
        return "a preview"
    if info.audio_only:
        return "an audiogram"
    if spec.fit == "speaker":
        return "the speaker fit"
    if spec.tighten:
        return "tightened pauses"
    if source_rate(info) != output_rate(info):  # (a source with gaps in its timing: its average rate is lower)
        return "a source whose frames are not on the clip's frame grid"
    return None


@dataclass(frozen=True)
class SplitPlan:
    """What every piece's render shares: the clip's spec, cut, overlays and targets, and its pieces."""

    spec: ClipSpec
    info: MediaInfo
    cut: tuple[float, float]
    drawn: Drawn
    target: Target
    pieces: list[Piece]

    @property
    def frames(self) -> int:
        return sum(p.count for p in self.pieces)

    @property
    def length(self) -> float:
        """The clip's length: its frames at the output's rate."""
        return self.frames / float(output_rate(self.info))


def plan_split(
    spec: ClipSpec,
    source: str,
    info: MediaInfo,
    workdir: Path,
    piece_seconds: float,
    probe_source: Readable | None = None,
    drawn: Drawn | None = None,
) -> SplitPlan:
    """The pieces of ``spec``'s clip and what they share (the overlays drawn in ``workdir``)."""
    check_span(spec, info)
    cut = cut_for(spec, info)
    if drawn is None or drawn.cut != cut:
        drawn = draw_overlays([spec], workdir, cut)
    target = _targets([spec], drawn, info, source, workdir, probe_source)[0]
    frames = output_frames(info, *cut)
    return SplitPlan(spec, info, cut, drawn, target, plan_pieces(frames, float(output_rate(info)), piece_seconds))


def streams_live(plan: SplitPlan) -> bool:
    """Whether a piece of ``plan``'s clip can stream while it renders, its span's sound encoded beside its picture:
    not when the clip's sound is levelled (its loudness is measured over the whole cut, with the clip's sound)."""
    return plan.spec.loudness is None


def render_piece(
    plan: SplitPlan,
    piece: Piece,
    source: str,
    output: Path,
    ffmpeg_bin: str,
    timeout: float,
    max_pixels: int | None,
    stream: Callable[[Fragment], None] | None = None,
    audio_source: str | None = None,
) -> tuple[Path, Path | None, float]:
    """Encode ``piece``'s picture to ``output``; (the file, the clip's poster when this piece holds it, ffmpeg's
    seconds). The first piece writes the poster (it is at most a second in). ``stream`` (where ``streams_live``):
    handed the piece's stream as it renders, the init segment with the first piece's fragments only, then its
    fragments, with its span's sound (``build_piece``; ``audio_source`` as ``render_sound`` takes it)."""
    poster = plan.target.poster if piece.index == 0 else None
    target = replace(plan.target, output=str(output), poster=poster)
    fifo = None
    if stream is not None and streams_live(plan):
        fifo = output.with_name(f"{output.stem}-stream.mp4")
        fifo.unlink(missing_ok=True)
        os.mkfifo(fifo, 0o600)
        target = replace(target, stream=str(fifo))
    argv = build_piece(
        target, plan.info, source, ffmpeg_bin, plan.cut, piece.first, piece.count, max_pixels, audio_source
    )
    began = time.perf_counter()
    if fifo is None or stream is None:
        said = run_ffmpeg(argv, timeout=timeout)
    else:
        sink = stream

        def relayed(part: Fragment) -> None:
            if part.kind != "init" or piece.index == 0:
                sink(part)

        try:
            said = run_streamed(argv, timeout, lambda _: None, fifo, relayed)
        finally:
            fifo.unlink(missing_ok=True)
    seconds = round(time.perf_counter() - began, 3)
    refused = OVERSIZE_FRAME.search(said)
    if refused:
        raise RenderFailed(f"a source frame of {refused.group(1)} is over the frame size limit", argv, said)
    if not output.is_file() or output.stat().st_size == 0:
        raise RenderFailed(f"ffmpeg finished but wrote no piece {piece.index}", argv, said)
    try:
        got = probe(str(output), first_frame=False)
    except QuoteclipError as exc:
        raise RenderFailed(f"ffmpeg wrote an unreadable piece {piece.index} ({exc})", argv) from None
    rate = float(output_rate(plan.info))
    if abs(got.duration - piece.count / rate) > 1.5 / rate:
        raise RenderFailed(
            f"piece {piece.index} came out {got.duration:.3f} s long instead of {piece.count / rate:.3f} s", argv, said
        )
    still = Path(poster[0]) if poster is not None else None
    return output, still if still is not None and still.is_file() and still.stat().st_size > 0 else None, seconds


def render_sound(
    plan: SplitPlan, source: str, output: Path, ffmpeg_bin: str, timeout: float, audio_source: str | None
) -> Path:
    """Encode the whole clip's sound to ``output`` (measuring its loudness first when the spec levels it)."""
    target = replace(plan.target, output=str(output), poster=None)
    if plan.spec.loudness is not None:
        measured = measure_loudness(plan.info, source, plan.cut, ffmpeg_bin, timeout, audio_source)
        target = replace(target, loudness=measured)
    argv = build_sound(target, plan.info, source, ffmpeg_bin, plan.cut, audio_source, plan.length)
    said = run_ffmpeg(argv, timeout=timeout)
    if not output.is_file() or output.stat().st_size == 0:
        raise RenderFailed("ffmpeg finished but wrote no sound", argv, said)
    return output


def stream_argv(plan: SplitPlan, piece: Piece, path: Path, sound: Path, ffmpeg_bin: str) -> list[str]:
    """ffmpeg copying ``piece``'s picture (``path``) and its span of the clip's sound (``sound``) into fragments of the
    clip's stream, on the clip's clock (``frag_discont``: each fragment's decode time is its time in the clip, so
    the pieces' fragments follow one another as one render's do), cut as a one-piece render's stream is."""
    rate = output_rate(plan.info)
    start, length = piece.first / float(rate), piece.count / float(rate)
    each = fragment_us(rate, piece.count)
    return [
        *(ffmpeg_bin, "-hide_banner", "-nostdin", "-nostats", "-loglevel", "error", "-i", str(path)),
        *("-ss", f"{start:.6f}", "-t", f"{length:.6f}", "-i", str(sound)),
        *("-map", "0:v:0", "-map", "1:a:0?", "-c", "copy", "-output_ts_offset", f"{start:.6f}"),
        *("-f", "mp4", "-movflags", STREAM_MOVFLAGS + "+frag_discont", "-frag_duration", str(each)),
        *("-frag_interleave", str(STREAM_INTERLEAVE), "pipe:1"),
    ]


def stream_piece(
    plan: SplitPlan,
    piece: Piece,
    path: Path,
    sound: Path,
    ffmpeg_bin: str,
    sink: Callable[[Fragment], None],
    timeout: float,
) -> int:
    """Hand ``sink`` the stream's pieces of ``piece`` (``stream_argv``): the init segment with the first piece's
    fragments only (the stream has one), then its fragments in order. How many were handed."""
    argv = stream_argv(plan, piece, path, sound, ffmpeg_bin)
    done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise RenderFailed(f"piece {piece.index}'s stream: {said[-1] if said else 'ffmpeg failed'}", argv)
    handed = 0
    for part in FragmentSplitter().feed(done.stdout):
        if part.kind == "init" and piece.index != 0:
            continue
        sink(part)
        handed += 1
    return handed


def join_pieces(
    plan: SplitPlan,
    pieces: list[Path],
    sound: Path,
    poster: Path | None,
    workdir: Path,
    ffmpeg_bin: str,
    timeout: float,
) -> RenderResult:
    """The pieces and the sound copied into the clip (``workdir/clip.mp4``), checked as a one-piece render is."""
    listing = workdir / "pieces.txt"
    listing.write_text("ffconcat version 1.0\n" + "".join(f"file '{p.name}'\n" for p in pieces))
    for path in pieces:
        if path.parent != workdir:
            raise ValueError(f"piece {path} is not in {workdir}")
    output = workdir / "clip.mp4"
    argv = build_join(str(listing), str(sound), str(output), ffmpeg_bin)
    began = time.perf_counter()
    said = run_ffmpeg(argv, timeout=timeout)
    seconds = round(time.perf_counter() - began, 3)
    if not output.is_file() or output.stat().st_size == 0:
        raise RenderFailed("ffmpeg joined the pieces but wrote no clip", argv, said)
    try:
        out = probe(str(output), first_frame=False)
    except QuoteclipError as exc:
        raise RenderFailed(f"the joined clip is unreadable ({exc})", argv) from None
    duration = plan.length
    if abs(out.duration - duration) > 0.1 + 1 / float(output_rate(plan.info)):
        raise RenderFailed(f"the joined clip came out {out.duration:.3f} s long instead of {duration:.3f} s", argv)
    _check_platform(plan.spec, output, argv)
    logging.getLogger(__name__).info("joined %d pieces in %.3f s: %.3f s", len(pieces), seconds, out.duration)
    return RenderResult(
        output,
        out.width,
        out.height,
        round(out.duration, 3),
        tuple(argv),
        plan.cut[0],
        plan.drawn.tracks[0],
        poster,
        seconds,
    )
