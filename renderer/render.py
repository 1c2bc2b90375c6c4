"""Render a clip (or one cut in several profiles): overlays (Pillow) → plan (pure) → one ffmpeg run → probe of the
results."""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from quoteclip.errors import BadInput, QuoteclipError, RenderFailed
from quoteclip.platforms import PLATFORMS
from quoteclip.spec import ClipSpec, Word, format_time
from quoteclip.transcript import spread
from watermarks import watermark_image

from .captions import CaptionTrack, caption_track, write_pam, write_track
from .ffmpeg import run_ffmpeg
from .fragments import Piece, read_fragments, unblock
from .plan import (
    DEFAULT_BACKGROUND,
    Loudness,
    Overlay,
    Target,
    build_loudness_probe,
    build_outputs,
    build_poster,
    output_frames,
    output_rate,
    parse_loudness,
)
from .probe import FORMATS, MediaInfo, Readable, probe
from .qa import PICTURE_FILE, Seen
from .tighten import Kept, tightened
from .timing import clip_words

log = logging.getLogger(__name__)

# What ffmpeg's decoder logs when a frame is over its -max_pixels cap (it then drops that frame and goes on).
OVERSIZE_FRAME = re.compile(r"Picture size (\d+x\d+) exceeds specified max pixel count")
# A quote may end this far past the probed duration (container durations are rounded).
END_TOLERANCE = 0.05


@dataclass(frozen=True)
class RenderResult:
    path: Path
    width: int
    height: int
    duration: float
    argv: tuple[str, ...]
    source_start: float = 0.0  # where the clip starts in the source
    captions: CaptionTrack | None = None
    poster: Path | None = None  # the clip's frame at poster_time(), written by the same ffmpeg pass
    ffmpeg_s: float = 0.0  # wall-clock seconds of the ffmpeg run
    # a streamed render: (ffmpeg's start, its first fragment read), seconds since the epoch (time.time)
    streamed: tuple[float, float] | None = None
    kept: Kept | None = None  # a clip with its pauses tightened: the source frames it holds
    # what the quality report's picture detectors saw in the frames this render encoded (renderer/qa.py's Seen);
    # None when they did not run (the report then reads the clip's picture itself)
    picture_checks: Seen | None = None


def poster_time(duration: float) -> float:
    """Where in a clip its poster is taken: 1 s in, or 40% of a shorter clip (past any fade)."""
    return round(min(duration * 0.4, 1.0), 3)


def check_span(spec: ClipSpec, info: MediaInfo) -> None:
    """Refuse a quote that is not inside the video, naming the video's length."""
    if info.duration and spec.start >= info.duration:
        raise BadInput(
            f"start: quote starts after the end of the video (start={format_time(spec.start)}, "
            f"video is {format_time(info.duration)} long)"
        )
    if info.duration and spec.end > info.duration + END_TOLERANCE:
        raise BadInput(
            f"end: quote ends after the end of the video (end={format_time(spec.end)}, "
            f"video is {format_time(info.duration)} long)"
        )


def cut_for(spec: ClipSpec, info: MediaInfo | None) -> tuple[float, float]:
    """(start, duration) of the cut in the source: the quote plus padding, the padding cut short at the end
    of the video (with no ``info``, the cut as asked for)."""
    end = spec.cut_end if info is None or not info.duration else min(spec.cut_end, max(spec.end, info.duration))
    return spec.cut_start, round(end - spec.cut_start, 3)


def timed_words(spec: ClipSpec, cut: tuple[float, float]) -> tuple[list[Word], bool]:
    """Clip-time words and whether they carry real timing (else the caption is spread over the quote)."""
    start, duration = cut
    if spec.words:
        return clip_words(spec.words, start, start + duration), True
    offset = spec.start - start
    return spread(spec.caption, round(offset, 3), round(offset + spec.end - spec.start, 3)), False


def caption_layout(spec: ClipSpec, cut: tuple[float, float]) -> CaptionTrack | None:
    """The captions laid out for the output (pages, lines, states), nothing drawn yet."""
    words, timed = timed_words(spec, cut)
    return caption_track(
        words, spec.size, spec.profile, spec.caption_size, spec.style, spec.font, highlight=timed, duration=cut[1]
    )


def make_overlays(spec: ClipSpec, workdir: Path, cut: tuple[float, float]) -> tuple[list[Overlay], CaptionTrack | None]:
    """Caption (a still or a timed PNG sequence) and watermark files in ``workdir``, placed for the output (as
    PAM images: ``write_pam``)."""
    overlays = []
    track = caption_layout(spec, cut)
    if track is not None:
        path, sequence, track = write_track(track, workdir, cut[1])
        overlays.append(Overlay(path, track.x, track.y, sequence=sequence))
    if spec.watermark is not None:
        img, (x, y) = watermark_image(spec.watermark, spec.size, spec.font)
        mark = workdir / "watermark.pam"
        write_pam(img, mark)
        overlays.append(Overlay(str(mark), x, y))
    return overlays, track


@dataclass(frozen=True)
class Drawn:
    """The overlays of one cut's outputs, drawn before the render (each profile in its own folder)."""

    cut: tuple[float, float]
    folders: list[Path]
    overlays: list[list[Overlay]]
    tracks: list[CaptionTrack | None]


def draw_overlays(specs: list[ClipSpec], workdir: Path, cut: tuple[float, float]) -> Drawn:
    """Every output's captions and watermark for ``cut``: ``workdir`` for one spec, else a folder per profile.
    Needs no probe of the source (the pipeline draws them while the source is opened and probed)."""
    folders = [workdir] if len(specs) == 1 else [workdir / f"{n}-{s.profile}" for n, s in enumerate(specs)]
    overlays, tracks = [], []
    for spec, folder in zip(specs, folders, strict=True):
        folder.mkdir(exist_ok=True)
        drawn, track = make_overlays(spec, folder, cut)
        overlays.append(drawn)
        tracks.append(track)
    return Drawn(cut, folders, overlays, tracks)


def extract_artwork(source: Readable, workdir: Path) -> Path | None:
    """An audio-only source's attached picture (cover art) as a PNG, for the audiogram's background; None when
    it cannot be decoded (the brand background is used instead)."""
    import av

    if not isinstance(source, str):
        source.seek(0)
    try:
        with av.open(source, mode="r", options={"format_whitelist": FORMATS}) as container:
            for stream in container.streams.video:
                if stream.disposition & av.stream.Disposition.attached_pic:
                    for frame in container.decode(stream):
                        path = workdir / "artwork.png"
                        frame.to_image().save(path, compress_level=1)
                        return path
    except (av.error.FFmpegError, OSError, StopIteration) as exc:
        log.info("the source's artwork could not be read (%s): using the brand background", exc)
    return None


def _targets(
    specs: list[ClipSpec],
    drawn: Drawn,
    info: MediaInfo,
    source: str,
    workdir: Path,
    probe_source: Readable | None,
) -> list[Target]:
    """Each output of the cut ``drawn.cut``: its spec and overlays, the speaker fit's crop (one face track for every
    profile), its poster's path and time, and an audiogram's background (the source's artwork, else the brand's)."""
    cut = drawn.cut
    faces = None
    artwork = extract_artwork(probe_source if probe_source is not None else source, workdir) if info.artwork else None
    targets = []
    for spec, folder, overlays in zip(specs, drawn.folders, drawn.overlays, strict=True):
        crop_x = None
        if spec.fit == "speaker":
            from .reframe import crop_x_expression, face_track  # OpenCV only for this fit

            if faces is None:  # one face track for every profile
                start = cut[0] - info.timeline_offset
                faces = face_track(probe_source if probe_source is not None else source, start, cut[1])
                log.info("speaker framing: %d face positions", len(faces))
            width, height = spec.size
            src_w, src_h = info.display_size
            scaled_w = max(width, round(src_w * height / src_h / 2) * 2) if src_h else width
            crop_x = crop_x_expression(faces, scaled_w, width)
        poster = (str(folder / "poster.jpg"), poster_time(cut[1]))
        background = str(artwork) if artwork is not None else spec.background or DEFAULT_BACKGROUND
        if len(specs) > 1 and not background.startswith("#"):  # one input per output's picture: its own copy
            background = str(shutil.copyfile(background, folder / f"background{Path(background).suffix}"))
        targets.append(Target(spec, overlays, str(folder / "clip.mp4"), crop_x, poster, background))
    return targets


def measure_loudness(
    info: MediaInfo,
    source: str,
    cut: tuple[float, float],
    ffmpeg_bin: str,
    timeout: float,
    audio_source: str | None = None,
) -> Loudness | None:
    """The cut's sound measured (EBU R128 integrated loudness and true peak) by a pass of its own that reads and
    decodes the sound only; None for a source without sound (its clip's silent track is left as it is)."""
    if audio_source is None and not info.has_audio:
        return None
    argv = build_loudness_probe(info, source, cut, ffmpeg_bin, audio_source)
    began = time.perf_counter()
    said = run_ffmpeg(argv, timeout=timeout)
    measured = parse_loudness(said)
    if measured is None:
        raise RenderFailed("ffmpeg measured the sound's loudness but did not say it", argv, said)
    if math.isnan(measured.integrated) or math.isnan(measured.true_peak):
        raise BadInput(
            "loudness: the source's sound in the cut holds samples that are not numbers (NaN), so its loudness "
            "cannot be measured; render the clip without loudness (or a platform's preset)"
        )
    log.info(
        "loudness measured in %.3f s: %.1f LUFS, true peak %.1f dBTP",
        time.perf_counter() - began,
        measured.integrated,
        measured.true_peak,
    )
    return measured


def run_streamed(
    argv: list[str], timeout: float, progress: Callable[[float], None], fifo: Path, stream: Callable[[Piece], None]
) -> str:
    """ffmpeg with its fragmented copy read from ``fifo`` by a thread of this process as it is written. The thread
    ends with ffmpeg (its end of the FIFO closed), or is let go when ffmpeg failed before opening it."""
    opened = threading.Event()
    reader = threading.Thread(target=read_fragments, args=(fifo, stream, opened), name="fragments", daemon=True)
    reader.start()
    try:
        return run_ffmpeg(argv, timeout=timeout, on_progress=progress)
    finally:
        while not opened.is_set() and reader.is_alive():  # ffmpeg never opened its end: the reader reads an end
            unblock(fifo)
            reader.join(timeout=0.05)
        reader.join(timeout=30)  # (the copy's last pieces relayed)
        if reader.is_alive():
            log.warning("the clip's fragmented copy was still being read 30 s after ffmpeg ended")


@dataclass(frozen=True)
class PosterResult:
    """A clip's poster rendered alone: the JPEG of the frame the clip's own poster shows."""

    path: Path
    width: int
    height: int
    at: float  # seconds into the clip
    ffmpeg_s: float = 0.0


def render_poster(
    spec: ClipSpec,
    source: str,
    info: MediaInfo,
    workdir: Path,
    ffmpeg_bin: str,
    timeout: float,
    audio_source: str | None = None,
    probe_source: Readable | None = None,
    max_pixels: int | None = None,
    drawn: Drawn | None = None,
) -> PosterResult:
    """The poster of ``spec``'s clip without the clip (``build_poster``): the frame at ``poster_time`` of the cut,
    captions and watermark on it, the same JPEG the full render writes beside the clip."""
    check_span(spec, info)
    cut = cut_for(spec, info)
    keep = tightened(spec, info, source, cut, workdir, ffmpeg_bin, timeout, audio_source)
    if keep is not None:  # the captions laid out on the tightened clip's timeline, as render_clips does
        drawn = draw_overlays([keep.respec(spec)], workdir, keep.cut)
    elif drawn is None or drawn.cut != cut:
        drawn = draw_overlays([spec], workdir, cut)
    target = _targets([spec], drawn, info, source, workdir, probe_source)[0]
    argv = build_poster(target, info, source, ffmpeg_bin, audio_source, cut, max_pixels, keep)
    began = time.perf_counter()
    said = run_ffmpeg(argv, timeout=timeout)
    ffmpeg_s = round(time.perf_counter() - began, 3)
    refused = OVERSIZE_FRAME.search(said)
    if refused:
        raise RenderFailed(f"a source frame of {refused.group(1)} is over the frame size limit", argv, said)
    assert target.poster is not None
    still = Path(target.poster[0])
    if not still.is_file() or still.stat().st_size == 0:
        raise RenderFailed("ffmpeg finished but wrote no poster", argv, said)
    from PIL import Image

    with Image.open(still) as image:
        width, height = image.size
    log.info("rendered the poster alone (%.3f s into the clip) at %dx%d", target.poster[1], width, height)
    return PosterResult(still, width, height, target.poster[1], ffmpeg_s)


def _seen(target: Target, info: MediaInfo, start: float, duration: float) -> Seen | None:
    """What the picture's detectors printed in ``target``'s render, with the time of its last frame (the clip's
    frames at its rate: ``output_frames``); None when they wrote nothing (its report then reads the clip)."""
    try:
        text = Path(target.picture_checks).read_text(encoding="utf-8") if target.picture_checks is not None else None
    except OSError:
        return None
    if text is None:
        return None
    return Seen(text, round((output_frames(info, start, duration) - 1) / float(output_rate(info)), 6))


def _check_platform(spec: ClipSpec, output: Path, argv: list[str]) -> None:
    """Refuse a platform's clip over the file size the platform takes (its bitrate cap keeps clips under it)."""
    if spec.platform is None:
        return
    preset = PLATFORMS[spec.platform]
    size = output.stat().st_size
    if size > preset.max_bytes:
        raise RenderFailed(
            f"the clip came out {size / 1024**2:.1f} MB, over the {preset.max_bytes / 1024**2:g} MB "
            f"platform {spec.platform} takes",
            argv,
        )


def render_clips(
    specs: list[ClipSpec],
    source: str,
    info: MediaInfo,
    workdir: Path,
    ffmpeg_bin: str,
    timeout: float,
    on_progress: Callable[[float], None] | None = None,
    audio_source: str | None = None,
    probe_source: Readable | None = None,
    max_pixels: int | None = None,
    drawn: Drawn | None = None,
    stream: Callable[[Piece], None] | None = None,
) -> list[RenderResult]:
    """Render ``specs`` (one cut in one or several profiles) from ``source`` (already probed as ``info``) in one
    ffmpeg run: the source decoded once, one encoder per output, each in its own folder under ``workdir`` (one
    spec: ``workdir/clip.mp4``). ``on_progress`` receives the fraction done, 0.0–1.0. ``drawn``: the overlays,
    drawn ahead by ``draw_overlays`` for the cut the quote asks for (drawn again if the video's end shortens it).
    ``stream`` (one spec only): handed the clip's fragmented copy while ffmpeg encodes it, piece by piece, from a
    thread of this process (``renderer/fragments.py``); the clip written is the same either way."""
    first = specs[0]
    if any((s.cut_start, s.cut_end, s.quality) != (first.cut_start, first.cut_end, first.quality) for s in specs):
        raise BadInput("profiles rendered together must share the cut and the quality")
    check_span(first, info)
    cut = cut_for(first, info)
    keep = tightened(first, info, source, cut, workdir, ffmpeg_bin, timeout, audio_source)
    duration = cut[1] if keep is None else keep.cut[1]
    if keep is not None:  # the captions laid out on the tightened clip's timeline
        drawn = draw_overlays([keep.respec(s) for s in specs], workdir, keep.cut)
    elif drawn is None or drawn.cut != cut:
        drawn = draw_overlays(specs, workdir, cut)
    targets = [  # (each its picture's detectors: its quality report reads its picture from their print)
        replace(t, picture_checks=str(Path(t.output).with_name(PICTURE_FILE)))
        for t in _targets(specs, drawn, info, source, workdir, probe_source)
    ]
    fifo = None
    if stream is not None and len(targets) == 1:
        fifo = Path(targets[0].output).with_name("stream.mp4")
        os.mkfifo(fifo, 0o600)
        targets = [replace(targets[0], stream=str(fifo))]
    if any(spec.loudness is not None for spec in specs):  # one measurement of the cut for every levelled output
        measured = measure_loudness(info, source, cut, ffmpeg_bin, timeout, audio_source)
        targets = [replace(t, loudness=measured) if t.spec.loudness is not None else t for t in targets]
    argv = build_outputs(targets, info, source, ffmpeg_bin, audio_source, cut, max_pixels, keep)

    def progress(seconds: float) -> None:
        if on_progress is not None:
            on_progress(min(1.0, seconds / duration))

    began, started = time.perf_counter(), time.time()
    relayed_at: list[float] = []
    if fifo is None or stream is None:
        said = run_ffmpeg(argv, timeout=timeout * len(specs), on_progress=progress)
    else:

        def relayed(piece: Piece) -> None:
            if piece.kind == "fragment" and not relayed_at:
                relayed_at.append(time.time())
            stream(piece)

        said = run_streamed(argv, timeout, progress, fifo, relayed)
    ffmpeg_s = round(time.perf_counter() - began, 3)
    refused = OVERSIZE_FRAME.search(said)
    if refused:  # the decoder's own cap (-max_pixels) met a frame larger than the first
        raise RenderFailed(f"a source frame of {refused.group(1)} is over the frame size limit", argv, said)
    results = []
    for target, track in zip(targets, drawn.tracks, strict=True):
        output, still = Path(target.output), Path(target.poster[0] if target.poster else "")
        if not output.is_file() or output.stat().st_size == 0:
            raise RenderFailed("ffmpeg finished but wrote no output", argv)
        try:
            out = probe(str(output), first_frame=False)
        except QuoteclipError as exc:
            raise RenderFailed(f"ffmpeg wrote an unreadable clip ({exc})", argv) from None
        tolerance = 0.1 + (1 / out.fps if out.fps else 0.05)
        if abs(out.duration - duration) > tolerance:
            raise RenderFailed(f"the clip came out {out.duration:.3f} s long instead of {duration:.3f} s", argv, said)
        log.info("rendered %.3f s at %dx%d", out.duration, out.width, out.height)
        _check_platform(target.spec, output, argv)
        results.append(
            RenderResult(
                output,
                out.width,
                out.height,
                round(out.duration, 3),
                tuple(argv),
                cut[0],
                track,
                still if still.is_file() and still.stat().st_size > 0 else None,
                ffmpeg_s,
                (started, relayed_at[0]) if relayed_at else None,
                kept=keep,
                picture_checks=_seen(target, info, cut[0], duration if keep is None else keep.duration),
            )
        )
    return results
