"""Instant cut previews: the source's own compressed frames, copied (not decoded, not encoded) from the keyframe
before the cut to its end into an MP4 whose edit list starts playback at the cut's first frame.

Browsers honour MP4 edit lists, so the keyframe preroll is hidden and the first frame shown is the frame at
``start`` (by the frame rule of ``renderer/frames.py``). The cost is reading and remuxing bytes, roughly flat in
the quote's length. The page draws the watermark and shows the captions from the WebVTT sidecar. A source whose
codecs an MP4 cannot carry falls back to the encoded preview (``CopyRefused`` names why).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import ffmpeg

from quoteclip.errors import QuoteclipError, RenderFailed
from quoteclip.spec import ClipSpec

from . import editlist
from .ffmpeg import run_ffmpeg
from .plan import source_input
from .probe import MediaInfo
from .render import RenderResult, caption_layout, check_span, cut_for

log = logging.getLogger(__name__)

# What an MP4 carries that browsers play (H.264, HEVC, AV1, VP9; AAC, MP3, Opus, FLAC, AC-3)
COPY_VIDEO = {"h264", "hevc", "av1", "vp9"}
COPY_AUDIO = {"aac", "mp3", "mp3float", "opus", "flac", "ac3", "eac3"}
COPY_PAST = 0.5  # seconds copied past the cut's end (the edit list hides them)


class CopyRefused(QuoteclipError):
    kind = "preview cannot be copied"


def copy_refusal(info: MediaInfo) -> str | None:
    """Why the source's streams cannot be copied into an MP4 a browser plays, or None when they can."""
    if info.audio_only:
        return "the source has no picture to copy (an audiogram is drawn)"
    if info.video_codec not in COPY_VIDEO:
        return f"the source's video codec {info.video_codec!r} cannot be copied into an MP4 a browser plays"
    if info.audio_codec is not None and info.audio_codec not in COPY_AUDIO:
        return f"the source's audio codec {info.audio_codec!r} cannot be copied into an MP4 a browser plays"
    if info.rotation:
        return "the source is rotated by metadata (the copied frames would play unrotated in some browsers)"
    return None


def copy_command(
    source: str,
    start: float,
    duration: float,
    output: str,
    ffmpeg_bin: str,
    audio_source: str | None,
    audio: bool,
    offsets: tuple[float, float] = (0.0, 0.0),
) -> list[str]:
    """One ffmpeg run, stream copy only: the first video stream (and the audio) from the keyframe before
    ``start`` to a little past the cut (``COPY_PAST``: the frames the cut's last ones are decoded from, out of
    presentation order with B-frames); the MP4 muxer writes an edit list at ``start``, which ``exact_edits`` then
    sets to the cut's frames. ``offsets``: where the video and audio inputs' time 0 lie on the source's
    timeline."""
    duration = duration + COPY_PAST
    src = source_input(source, start - offsets[0], duration)
    streams = [src.video]
    if audio_source is not None:
        streams.append(source_input(audio_source, start - offsets[1], duration).audio)
    elif audio:
        streams.append(src.audio)
    out = ffmpeg.output(*streams, output, c="copy", movflags="+faststart", map_metadata=-1, f="mp4")
    out = out.global_args("-hide_banner", "-nostdin", "-nostats", "-loglevel", "error", "-progress", "pipe:1")
    return list(out.overwrite_output().compile(cmd=ffmpeg_bin))


def copy_clip(
    spec: ClipSpec,
    source: str,
    info: MediaInfo,
    workdir: Path,
    ffmpeg_bin: str,
    timeout: float,
    audio_source: str | None = None,
) -> RenderResult:
    """The instant preview of ``spec`` in ``workdir/clip.mp4``; CopyRefused when the source cannot be copied."""
    reason = copy_refusal(info)
    if reason is not None:
        raise CopyRefused(reason)
    check_span(spec, info)
    cut = cut_for(spec, info)
    output = workdir / "clip.mp4"
    offsets = (info.timeline_offset, info.audio_offset)
    argv = copy_command(source, cut[0], cut[1], str(output), ffmpeg_bin, audio_source, info.has_audio, offsets)
    began = time.perf_counter()
    run_ffmpeg(argv, timeout=timeout)
    ffmpeg_s = round(time.perf_counter() - began, 3)
    if not output.is_file() or output.stat().st_size == 0:
        raise RenderFailed("ffmpeg finished but wrote no output", argv)
    duration = exact_edits(output, cut[1])
    track = caption_layout(spec, cut)  # laid out only: the page shows them from the WebVTT sidecar
    width, height = info.display_size
    log.info("copied a %.3f s preview at %dx%d", duration, width, height)
    return RenderResult(output, width, height, duration, tuple(argv), cut[0], track, None, ffmpeg_s)


def exact_edits(output: Path, length: float) -> float:
    """Make the copy play exactly the cut's frames: its edit lists start at the first frame at or after the cut's
    start (ffmpeg's edit starts at the cut time itself, between two frames) and end where the last frame before
    the cut's end ends (ffmpeg's lasts whole packets). The frame rule is renderer/frames.py's: ffmpeg was told to
    cut at ``seek_time(start)``, and ``length`` later is where the end's rule puts its boundary. Returns the
    copy's duration in seconds."""
    import av

    video = next(t for t in editlist.read(output).tracks if t.handler == "vide")
    start = video.edits[0][1]  # where ffmpeg's edit starts: the cut time, in the video's media time
    boundary = start + round(length * video.timescale)
    with av.open(str(output), options={"ignore_editlist": "1"}) as container:
        stream = container.streams.video[0]
        frames = sorted((p.pts, p.duration or 0) for p in container.demux(stream) if p.pts is not None)
    kept = [(pts, length_) for pts, length_ in frames if start <= pts < boundary]
    if not kept:
        raise RenderFailed(f"the copied preview holds no frame between media times {start} and {boundary}", [])
    last, last_length = kept[-1]
    after = [pts for pts, _ in frames if pts > last]
    # where the last frame ends: its own length, else the next frame's time (a frame the copy left out of the
    # end, e.g. a B-frame past the cut, must not lengthen it)
    end = last + last_length if last_length > 0 else after[0] if after else last + (last - kept[-2][0])
    return round(editlist.trim(output, kept[0][0], end), 3)
