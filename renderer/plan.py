"""The ffmpeg command as data: a pure function of (spec, probe, overlays) → argv. No I/O here."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

import ffmpeg

from quoteclip.platforms import PLATFORMS, TRUE_PEAK
from quoteclip.spec import DEFAULT_ENCODER_PRESET, ClipSpec

from .fragments import STREAM_INTERLEAVE, STREAM_MOVFLAGS, fragment_us
from .frames import frame_span, seek_time
from .probe import FORMATS, NETWORK_PROTOCOLS, MediaInfo


class Kept(Protocol):
    """What a command needs of a clip's pauses tightened (renderer/tighten.py's ``Kept``): the frames and sound of
    the spans kept, and their length."""

    @property
    def duration(self) -> float: ...

    def picture(self, video: ffmpeg.nodes.FilterableStream) -> ffmpeg.nodes.FilterableStream: ...

    def apply(
        self, video: ffmpeg.nodes.FilterableStream | None, audio: ffmpeg.nodes.FilterableStream
    ) -> tuple[ffmpeg.nodes.FilterableStream | None, ffmpeg.nodes.FilterableStream]: ...


PRESET = DEFAULT_ENCODER_PRESET  # (a spec may name a faster one: encoder_preset)
CRF = 23
# A keyframe every second: Firefox plays a stream as it comes only up to the next keyframe it has (its demuxer
# waits for the bytes holding it), so with x264's default (every 250 frames) a clip under 8 s showed nothing until
# its stream ended; every second costs about 4 % in size.
KEYFRAMES = "expr:gte(t,n_forced*1)"
AUDIO_BITRATE = "128k"
# Previews (editors deciding on a cut): half the size, the fastest x264 preset.
PREVIEW_PRESET = "ultrafast"
PREVIEW_CRF = 28
PREVIEW_AUDIO_BITRATE = "96k"
# A preview's picture is scaled down by averaging the source's pixels (swscale's area filter): about half the CPU of
# the final's bicubic from 1080p to 640×360, the largest cost after the source's decode (docs/editors.md).
PREVIEW_SCALER = "area"
SCALER = "bicubic"
FADE = 0.15  # seconds of fade in and out: the sound by default (no click), the picture only when asked
STILL_FORMATS = "image2,pam_pipe,png_pipe"  # the overlays' images: PAM as quoteclip writes them (a PNG read too)
SEQUENCE_FORMATS = f"concat,{STILL_FORMATS}"
AUDIO_RATE = 48000
MAX_FPS = Fraction(60)
DEFAULT_FPS = Fraction(30)
HTTP_INITIAL_REQUEST = 64 * 1024
HTTP_REQUEST = 256 * 1024
# A final render decodes a source of up to this many pixels a frame in one thread: x264 (veryfast, 720p) is the
# slower stage, so the decoder's frame threads only add their own CPU cost (with the same wall time and the same
# output bytes). Larger sources, previews (whose encoder is faster than the decoder) and streamed renders keep
# ffmpeg's automatic threads: a streamed render's first fragment waits on the decode from the keyframe before the
# cut (up to a GOP of the source) before the first frame is encoded, and frame threads get through it sooner.
SINGLE_THREAD_DECODE_PIXELS = 1920 * 1088
POSTER_QSCALE = 3  # MJPEG quality of the poster (2 best … 31 worst)
DEFAULT_BACKGROUND = "#14181f"  # an audiogram's background when there is no artwork and no brand background
WAVE_HEIGHT = 0.22  # the waveform band's height, as a share of the frame's
WAVE_CENTRE = 0.5  # where its middle sits, as a share of the frame's height
# Levelling (a spec's loudness): one gain, and a peak limiter only when that gain would take the sound's true peak
# past TRUE_PEAK. The limiter holds sample peaks this many dB lower still: room for the peaks between samples and
# the AAC encoder's overshoot, which it does not see.
PEAK_MARGIN = 1.0
LIMITER_ATTACK_MS = 5
LIMITER_RELEASE_MS = 50
# The quality report's picture detectors (renderer/qa.py), each (filter, options): black for 0.5 s or more
# (blackdetect's defaults), a picture that does not change for 2 s or more (freezedetect). A render runs them on the
# frames it encodes; ``quoteclip check`` on the decoded clip.
BLACK_SECONDS = 0.5
FROZEN_SECONDS = 2.0
PICTURE_DETECTORS: tuple[tuple[str, dict[str, float | str]], ...] = (
    ("blackdetect", {"d": BLACK_SECONDS, "pix_th": 0.10}),
    ("freezedetect", {"n": "-60dB", "d": FROZEN_SECONDS}),
)
# A cut measured quieter than this (EBU R128's absolute gate is -70 LUFS) holds no speech to level: it is left as it
# is rather than raised to speech level (hiss and hum).
QUIET_LUFS = -60.0


@dataclass(frozen=True)
class Overlay:
    """A still RGBA image (caption or watermark) placed at (x, y) for the whole clip."""

    path: str
    x: int
    y: int
    sequence: bool = False  # a concat list of timed states (captions that change), not a still


def output_rate(info: MediaInfo) -> Fraction:
    """The source's frame rate, capped at 60 fps; 30 fps when the source does not say."""
    try:
        rate = Fraction(info.frame_rate) if info.frame_rate else Fraction(info.fps).limit_denominator(1001)
    except (ValueError, ZeroDivisionError):
        rate = Fraction(0)
    if rate <= 0:
        return DEFAULT_FPS
    return min(rate, MAX_FPS)


def source_rate(info: MediaInfo) -> Fraction:
    """The rate the source's frames are timed on, for frame indices and times (renderer/frames.py)."""
    try:
        rate = Fraction(info.base_rate) if info.base_rate else Fraction(0)
    except (ValueError, ZeroDivisionError):
        rate = Fraction(0)
    return rate if rate > 0 else output_rate(info)


def output_frames(info: MediaInfo, start: float, duration: float) -> int:
    """How many frames the clip has: the source frames the cut holds by the frame rule (renderer/frames.py), at
    the output's rate. A constant-rate output would otherwise repeat the last frame to fill a duration that is
    not a whole number of frames (12.02 frames for 0.401 s at 29.97 fps)."""
    span = frame_span(start, start + duration, source_rate(info))
    held = Fraction(span.last - span.first + 1) / source_rate(info)
    return max(1, round(held * output_rate(info)))


@dataclass(frozen=True)
class Loudness:
    """A cut's sound as measured (EBU R128): integrated loudness (LUFS) and true peak (dBTP)."""

    integrated: float
    true_peak: float


def level_gain(target: float, measured: Loudness) -> tuple[float, bool] | None:
    """(gain in dB, whether its peaks need the limiter) that brings ``measured`` to ``target`` LUFS; None for a cut
    too quiet to level (QUIET_LUFS)."""
    if measured.integrated < QUIET_LUFS:
        return None
    gain = round(target - measured.integrated, 2)
    return gain, measured.true_peak + gain > TRUE_PEAK - PEAK_MARGIN


def build_loudness_probe(
    info: MediaInfo,
    source: str,
    cut: tuple[float, float],
    ffmpeg_bin: str = "ffmpeg",
    audio_source: str | None = None,
) -> list[str]:
    """The measuring pass of a levelled clip: the cut's sound only (no picture decoded), through ffmpeg's EBU R128
    meter (``ebur128``, true peak on), which logs its summary at the end (read by ``parse_loudness``)."""
    start, duration = cut
    if audio_source is not None:
        sound = source_input(audio_source, start - info.audio_offset, duration).audio
    else:
        sound = source_input(source, start - info.timeline_offset, duration).audio
    out = ffmpeg.output(sound.filter("ebur128", peak="true", framelog="quiet"), "-", f="null")
    out = out.global_args("-hide_banner", "-nostdin", "-nostats", "-loglevel", "info")
    return list(out.compile(cmd=ffmpeg_bin))


def parse_loudness(said: str) -> Loudness | None:
    """The integrated loudness and true peak of ``ebur128``'s summary in ffmpeg's log (``nan`` for sound holding
    samples that are not numbers); None when it has none."""
    summary = said.rpartition("Summary:")[2]
    integrated = re.search(r"\bI:\s+(-?[\d.]+|-inf|nan)\s+LUFS", summary)
    peak = re.search(r"\bPeak:\s+(-?[\d.]+|-inf|nan)\s+dBFS", summary)
    if not integrated or not peak:
        return None
    return Loudness(float(integrated.group(1)), float(peak.group(1)))


def _level(audio: ffmpeg.nodes.FilterableStream, target: float, measured: Loudness) -> ffmpeg.nodes.FilterableStream:
    """The sound brought to ``target`` LUFS by one linear gain; a lookahead peak limiter (its delay compensated, no
    auto-levelling) only when the gain would take the peaks past the true-peak limit. No compression otherwise."""
    level = level_gain(target, measured)
    if level is None:
        return audio
    gain, limit = level
    audio = audio.filter("volume", volume=f"{gain:.2f}dB")
    if limit:
        ceiling = 10 ** ((TRUE_PEAK - PEAK_MARGIN) / 20)
        audio = audio.filter(
            "alimiter",
            limit=f"{ceiling:.4f}",
            attack=LIMITER_ATTACK_MS,
            release=LIMITER_RELEASE_MS,
            level=0,
            latency=1,
        )
    return audio


def _rate_cap(spec: ClipSpec) -> dict[str, str]:
    """The encoder's bitrate ceiling of a platform that sets one (its limit less the sound's), none otherwise."""
    kbps = PLATFORMS[spec.platform].max_kbps if spec.platform is not None else None
    if kbps is None:
        return {}
    video = kbps - int(AUDIO_BITRATE.removesuffix("k"))
    return {"maxrate": f"{video}k", "bufsize": f"{2 * video}k"}


def build_command(
    spec: ClipSpec,
    info: MediaInfo,
    source: str,
    overlays: list[Overlay],
    output: str,
    ffmpeg_bin: str = "ffmpeg",
    audio_source: str | None = None,
    cut: tuple[float, float] | None = None,
    crop_x: str | None = None,
    max_pixels: int | None = None,
    poster: tuple[str, float] | None = None,
) -> list[str]:
    """One ffmpeg pass: exact cut (input seek + decode), fit to the profile, overlays, H.264/AAC mp4.

    ``source`` is what ffmpeg reads: a local path, or an http(s) URL (the source proxy), read with only
    network protocols and plain media demuxers allowed (no file, concat or playlist tricks).
    ``audio_source``, when given, is a separate audio stream of the same source (as YouTube serves them).
    ``max_pixels``: the decoder refuses any frame larger than this (every frame, not only the probed first one).
    ``poster`` (path, seconds): also write the clip's frame at that time as a JPEG, from the same pass (the
    finished picture, captions and watermark included, without decoding the clip again).
    """
    target = Target(spec, overlays, output, crop_x, poster)
    return build_outputs([target], info, source, ffmpeg_bin, audio_source, cut, max_pixels)


@dataclass(frozen=True)
class Target:
    """One output of a pass: a spec (its profile, fit, captions) with its overlays, file and poster."""

    spec: ClipSpec
    overlays: list[Overlay]
    output: str
    crop_x: str | None = None
    poster: tuple[str, float] | None = None
    background: str = DEFAULT_BACKGROUND  # audio-only sources: an image path, or a colour (#rrggbb)
    # a fragmented copy of the same encode, written while it encodes (a FIFO a relay reads: renderer/fragments.py)
    stream: str | None = None
    loudness: Loudness | None = None  # the cut's sound as measured, for a spec with a loudness target
    # where the quality report's picture detectors (renderer/qa.py) print what they saw in the frames encoded: the
    # clip's picture is then not decoded again for its report
    picture_checks: str | None = None


def build_outputs(
    targets: list[Target],
    info: MediaInfo,
    source: str,
    ffmpeg_bin: str = "ffmpeg",
    audio_source: str | None = None,
    cut: tuple[float, float] | None = None,
    max_pixels: int | None = None,
    keep: Kept | None = None,
) -> list[str]:
    """One ffmpeg pass for several outputs of one cut (profiles): the source is read and decoded once, and the
    decoded picture and sound are split into one branch per output (fit, overlays, encoder of its own). The
    targets share the cut and the quality; one target is the one-clip command. ``keep``: the cut's pauses
    tightened, only these frames of it kept (renderer/tighten.py)."""
    first = targets[0].spec
    start, duration = cut if cut is not None else (first.cut_start, first.duration)
    preview = first.quality == "preview"
    streamed = any(t.stream is not None for t in targets)
    one_thread = (
        not preview and not streamed and not info.audio_only and info.width * info.height <= SINGLE_THREAD_DECODE_PIXELS
    )
    src = source_input(source, start - info.timeline_offset, duration, preview, max_pixels, 1 if one_thread else None)
    if audio_source is not None:
        audio = source_input(audio_source, start - info.audio_offset, duration).audio
    elif info.has_audio:
        audio = src.audio
    else:  # a silent track, so every clip plays the same way in every player
        audio = ffmpeg.input(f"anullsrc=r={AUDIO_RATE}:cl=stereo", f="lavfi", t=_seconds(duration)).audio
    picture = None if info.audio_only else src.video
    if keep is not None:
        picture, audio = keep.apply(picture, audio)
        duration = keep.duration
    count = len(targets)
    if info.audio_only:  # an audiogram: each output's picture made from its background and the sound's waveform
        sounds = _branches(audio.filter_multi_output("asplit", 2 * count), 2 * count)
        audios = sounds[:count]
        rate = output_rate(info)
        videos = [_audiogram(t, wave, duration, rate) for t, wave in zip(targets, sounds[count:], strict=True)]
    else:
        assert picture is not None
        videos = [picture] if count == 1 else _branches(picture.filter_multi_output("split", count), count)
        audios = [audio] if count == 1 else _branches(audio.filter_multi_output("asplit", count), count)
    nodes = []
    for target, video, sound in zip(targets, videos, audios, strict=True):
        nodes += _output(target, info, video, sound, start, duration, preview)
    out = ffmpeg.merge_outputs(*nodes) if len(nodes) > 1 else nodes[0]
    out = out.global_args("-hide_banner", "-nostdin", "-nostats", "-loglevel", "error", "-progress", "pipe:1")
    return list(out.overwrite_output().compile(cmd=ffmpeg_bin))


def _audiogram(
    target: Target, wave: ffmpeg.nodes.FilterableStream, duration: float, rate: Fraction
) -> ffmpeg.nodes.FilterableStream:
    """An audio-only source's picture: the background (artwork or brand image over a blurred fill of itself, or a
    colour) and the quote's waveform, drawn live from the sound, across the middle of the frame."""
    width, height = target.spec.size
    if target.background.startswith("#"):
        colour = "0x" + target.background[1:]
        picture = ffmpeg.input(f"color=c={colour}:s={width}x{height}:r={rate}:d={duration:.3f}", f="lavfi").video
    else:
        still = ffmpeg.input(
            target.background, loop=1, framerate=str(rate), t=_seconds(duration), protocol_whitelist="file"
        ).video
        picture = _fit(still, width, height, "blur")
    band = max(2, round(height * WAVE_HEIGHT / 2) * 2)
    waves = wave.filter("showwaves", s=f"{width}x{band}", mode="cline", rate=str(rate), colors="white@0.9")
    y = round(height * WAVE_CENTRE - band / 2)
    return ffmpeg.overlay(picture, waves.filter("format", "rgba"), x=0, y=y, eof_action="repeat")


def _branches(node: ffmpeg.nodes.FilterNode, count: int) -> list[ffmpeg.nodes.FilterableStream]:
    return [node[i] for i in range(count)]


def _output(
    target: Target,
    info: MediaInfo,
    video: ffmpeg.nodes.FilterableStream,
    audio: ffmpeg.nodes.FilterableStream,
    start: float,
    duration: float,
    preview: bool,
) -> list[ffmpeg.nodes.OutputStream]:
    """One output's branch: fit, overlays, fades, the H.264/AAC mp4 (and its poster from the same picture)."""
    spec = target.spec
    video = _picture(target, info, video, duration)
    audio = _sound(target, audio, duration)
    if target.picture_checks is not None:
        video = _detected(video, target.picture_checks)
    still = None
    if target.poster is not None:
        branches = video.filter_multi_output("split")
        video = branches[0]
        still = _still(target, info, branches[1])
    out = ffmpeg.output(
        video,
        audio,
        target.output
        if target.stream is None
        else _tee(target.output, target.stream, output_rate(info), output_frames(info, start, duration)),
        vcodec="libx264",
        preset=PREVIEW_PRESET if preview else spec.encoder_preset or PRESET,
        crf=PREVIEW_CRF if preview else CRF,
        force_key_frames=KEYFRAMES,
        r=str(output_rate(info)),
        fps_mode="cfr",
        acodec="aac",
        audio_bitrate=PREVIEW_AUDIO_BITRATE if preview else AUDIO_BITRATE,
        t=_seconds(duration),
        vframes=output_frames(info, start, duration),
        ar=AUDIO_RATE,
        map_metadata=-1,
        **_rate_cap(spec),
        **(
            {"movflags": "+faststart", "f": "mp4"}
            if target.stream is None
            # the tee muxer: one encode into two MP4 muxers. The encoders are told to keep their headers out of the
            # bitstream, as an MP4 output alone has them do, so the stored clip is the one a render without a
            # stream writes, byte for byte
            else {"f": "tee", "flags:v": "+global_header", "flags:a": "+global_header"}
        ),
    )
    return [out] if still is None else [out, still]


def _tee(output: str, stream: str, rate: Fraction, frames: int, picture_only: bool = False) -> str:
    """The tee muxer's outputs: the stored clip (a faststart MP4, as without a stream) and its fragmented copy, cut
    every ``fragment_frames`` of the clip's ``frames`` whatever the frame (the keyframes stay the encoder's), each
    fragment's samples in decode-time order (``STREAM_INTERLEAVE``). A copy whose reader has gone is dropped
    (``onfail=ignore``) and the clip is still written. ``picture_only``: ``output`` is a piece's picture (a plain
    MP4 of the video alone, ``build_piece``), the copy has the sound too."""
    each = fragment_us(rate, frames)
    first = "[f=mp4:select=v]" if picture_only else "[f=mp4:movflags=+faststart]"
    return (
        f"{first}{_tee_escape(output)}"
        f"|[f=mp4:movflags={STREAM_MOVFLAGS}:frag_duration={each}:frag_interleave={STREAM_INTERLEAVE}:onfail=ignore]"
        f"{_tee_escape(stream)}"
    )


def _tee_escape(path: str) -> str:
    """A path as the tee muxer reads an output's name: its special characters escaped with a backslash."""
    return "".join(f"\\{c}" if c in "\\'[]|:;" else c for c in path)


def _sound(target: Target, audio: ffmpeg.nodes.FilterableStream, duration: float) -> ffmpeg.nodes.FilterableStream:
    """An output's finished sound: levelled (when its spec asks and the cut was measured), faded in and out."""
    spec = target.spec
    if spec.loudness is not None and target.loudness is not None:
        audio = _level(audio, spec.loudness, target.loudness)
    if spec.fades:
        fade, tail = _fade(duration)
        audio = audio.filter("afade", t="in", st=0, d=fade).filter("afade", t="out", st=tail, d=fade)
    return audio


def _detected(video: ffmpeg.nodes.FilterableStream, said_to: str) -> ffmpeg.nodes.FilterableStream:
    """An output's finished picture through the quality report's detectors (black, frozen: renderer/qa.py), which
    pass every frame on as it is, the marks they set on the frames printed to ``said_to``. (The sound's detectors
    are not run here: ebur128 takes 48 kHz sound only, and in the render's chain the sound of another rate would
    be resampled before the encoder by another resampler than the output's.)"""
    for name, options in PICTURE_DETECTORS:
        video = video.filter(name, **options)
    return video.filter("metadata", mode="print", file=said_to)


def _fade(duration: float) -> tuple[float, float]:
    """(length, start of the fade out) of a clip's fades, seconds."""
    fade = round(min(FADE, duration / 4), 3)
    return fade, round(max(0.0, duration - fade), 3)


def _picture(
    target: Target, info: MediaInfo, video: ffmpeg.nodes.FilterableStream, duration: float
) -> ffmpeg.nodes.FilterableStream:
    """An output's finished picture: fit to the profile, the overlays, the picture's fades (when asked), yuv420p."""
    spec = target.spec
    width, height = spec.size
    if not info.audio_only:  # (an audiogram's picture is made at the output's size)
        scaler = PREVIEW_SCALER if spec.quality == "preview" else SCALER
        video = _fit(video, width, height, spec.fit, target.crop_x, scaler)
    for overlay in target.overlays:
        if overlay.sequence:
            # safe=0 lets the list give each image its clock ("option framerate": renderer/captions.py writes the
            # list, its own files by relative names only; the format and protocol whitelists still hold)
            layer = ffmpeg.input(
                overlay.path, f="concat", safe=0, protocol_whitelist="file", format_whitelist=SEQUENCE_FORMATS
            )
        else:
            layer = ffmpeg.input(overlay.path, protocol_whitelist="file", format_whitelist=STILL_FORMATS)
        video = ffmpeg.overlay(video, layer, x=overlay.x, y=overlay.y, eof_action="repeat")
    if spec.video_fades:  # off by default: the first frame (the thumbnail in most apps) is the source's
        fade, tail = _fade(duration)
        video = video.filter("fade", t="in", st=0, d=fade).filter("fade", t="out", st=tail, d=fade)
    return video.filter("format", "yuv420p")


def _still(target: Target, info: MediaInfo, picture: ffmpeg.nodes.FilterableStream) -> ffmpeg.nodes.OutputStream:
    """The poster: the finished picture's frame nearest the poster's time, as a JPEG."""
    assert target.poster is not None
    at = _seconds(max(0.0, target.poster[1] - 0.5 / float(output_rate(info))))  # the frame nearest the time
    # trim after select: only the chosen frame goes on (select alone passes every later frame to the
    # conversion below, which then runs on the whole clip for one picture)
    picture = picture.filter("select", f"gte(t,{at})").filter("trim", end_frame=1)
    picture = picture.filter("scale", out_range="full")
    return ffmpeg.output(picture.filter("format", "yuvj420p"), target.poster[0], vframes=1, **{"q:v": POSTER_QSCALE})


def build_poster(
    target: Target,
    info: MediaInfo,
    source: str,
    ffmpeg_bin: str = "ffmpeg",
    audio_source: str | None = None,
    cut: tuple[float, float] | None = None,
    max_pixels: int | None = None,
    keep: Kept | None = None,
) -> list[str]:
    """The poster of ``target`` alone (``target.poster``: its path and time), without the clip: the inputs and the
    picture's filters of the full render (``build_outputs``), so the same frame comes out the same, then only the
    JPEG. ffmpeg decodes from the cut's start to the poster's frame (at most ``poster_time``'s second) and stops
    once the one frame is written; nothing is encoded to H.264, no sound is read (an audiogram's waveform
    excepted: its picture is drawn from the sound). ``keep``: the clip's pauses tightened, as ``build_outputs``."""
    spec = target.spec
    start, duration = cut if cut is not None else (spec.cut_start, spec.duration)
    preview = spec.quality == "preview"
    one_thread = not preview and not info.audio_only and info.width * info.height <= SINGLE_THREAD_DECODE_PIXELS
    if info.audio_only:
        if audio_source is not None:
            sound = source_input(audio_source, start - info.audio_offset, duration).audio
        else:
            sound = source_input(source, start - info.timeline_offset, duration, preview, max_pixels).audio
        if keep is not None:
            sound = keep.apply(None, sound)[1]
            duration = keep.duration
        video = _audiogram(target, sound, duration, output_rate(info))
    else:
        threads = 1 if one_thread else None
        video = source_input(source, start - info.timeline_offset, duration, preview, max_pixels, threads).video
        if keep is not None:
            video, duration = keep.picture(video), keep.duration
    out = _still(target, info, _picture(target, info, video, duration))
    out = out.global_args("-hide_banner", "-nostdin", "-nostats", "-loglevel", "error", "-progress", "pipe:1")
    return list(out.overwrite_output().compile(cmd=ffmpeg_bin))


def source_input(
    source: str,
    start: float,
    duration: float,
    preview: bool = False,
    max_pixels: int | None = None,
    threads: int | None = None,
) -> ffmpeg.nodes.FilterableStream:
    options: dict[str, object] = {"protocol_whitelist": "file"}
    if preview:  # decode faster (no deblocking): a preview's picture may be a little rougher, its cut is the same
        options["skip_loop_filter"] = "all"
    if source.startswith(("http://", "https://")):
        # Bounded range requests on one kept-alive connection: ffmpeg asks for what it reads, not for the rest
        # of the file (an open-ended request would have the source fetched ahead into socket buffers).
        options = {
            "protocol_whitelist": NETWORK_PROTOCOLS,
            "multiple_requests": 1,
            "initial_request_size": HTTP_INITIAL_REQUEST,
            "request_size": HTTP_REQUEST,
            **({"skip_loop_filter": "all"} if preview else {}),
        }
    if max_pixels is not None:
        options["max_pixels"] = max_pixels
    if threads is not None:  # the decoder's threads (SINGLE_THREAD_DECODE_PIXELS)
        options["threads"] = threads
    # the cut by the frame rule (renderer/frames.py): from the first frame at or after start − 0.5 ms
    return ffmpeg.input(source, ss=seek_time(start), t=_seconds(duration), format_whitelist=FORMATS, **options)


def _fit(
    video: ffmpeg.nodes.FilterableStream,
    width: int,
    height: int,
    fit: str,
    crop_x: str | None = None,
    scaler: str = SCALER,
) -> ffmpeg.nodes.FilterableStream:
    """Scale into width×height without distortion: black bars (pad), a blurred fill of the frame (blur), or
    filling the frame and cropping the middle (center)."""
    if fit in ("center", "speaker"):
        filled = video.filter("scale", width, height, force_original_aspect_ratio="increase", flags=scaler)
        if fit == "speaker" and crop_x is not None:  # the window follows the face (an expression of t)
            return filled.filter("crop", width, height, x=crop_x, y="(ih-oh)/2").filter("setsar", 1)
        return filled.filter("crop", width, height).filter("setsar", 1)
    if fit == "pad":
        contained = _contain(video, width, height, scaler)
        return contained.filter("pad", width, height, "(ow-iw)/2", "(oh-ih)/2").filter("setsar", 1)
    split = video.filter_multi_output("split")
    bg = (
        split[1]
        .filter(
            "scale",
            width // 8,
            height // 8,
            force_original_aspect_ratio="increase",
            **({} if scaler == SCALER else {"flags": scaler}),
        )
        .filter("crop", width // 8, height // 8)
        .filter("boxblur", 6)
        .filter("scale", width, height)
    )
    return ffmpeg.overlay(bg, _contain(split[0], width, height, scaler), x="(W-w)/2", y="(H-h)/2").filter("setsar", 1)


def _contain(
    video: ffmpeg.nodes.FilterableStream, width: int, height: int, scaler: str = SCALER
) -> ffmpeg.nodes.FilterableStream:
    return video.filter(
        "scale", width, height, force_original_aspect_ratio="decrease", force_divisible_by=2, flags=scaler
    )


def _seconds(value: float) -> str:
    return f"{value:.3f}"


def build_piece(
    target: Target,
    info: MediaInfo,
    source: str,
    ffmpeg_bin: str,
    cut: tuple[float, float],
    first: int,
    count: int,
    max_pixels: int | None = None,
    audio_source: str | None = None,
) -> list[str]:
    """The picture of output frames ``first`` … ``first + count − 1`` of ``target``'s clip alone (no sound), for a
    clip rendered in pieces (``renderer/split.py``): the source decoded from the keyframe before the piece's first
    frame, the frames timed on the whole clip's clock while the picture is made (captions, watermark and fades fall
    where a one-piece render puts them), then on the piece's own. The piece's first frame is the source frame the
    frame rule gives the one-piece render's frame ``first``; its poster, when ``target`` has one, is taken from it.

    With ``target.stream``, the same encode is also written to the stream (``_tee``) as it is made, with the sound
    of the piece's span encoded beside it (the clip's fades, on the clip's clock; ``audio_source`` as
    ``build_sound`` takes it), so a clip rendered in pieces streams from its first frame as a one-piece render does;
    the piece's file stays the picture alone, the same frames as without a stream."""
    start, duration = cut
    srate, rate = source_rate(info), output_rate(info)
    span = frame_span(start, start + duration, srate)
    begins = float(Fraction(span.first + first) / srate)  # the piece's first frame, on the spec's timeline
    whole, piece = float(seek_time(start - info.timeline_offset)), float(seek_time(begins - info.timeline_offset))
    shift = round(piece - whole, 6)  # the piece's clock behind the clip's
    length = float(Fraction(count) / rate)
    threads = 1 if info.width * info.height <= SINGLE_THREAD_DECODE_PIXELS else None
    src = source_input(source, begins - info.timeline_offset, length, False, max_pixels, threads)
    video = src.video.filter("setpts", f"PTS+{shift:.6f}/TB")
    video = _picture(target, info, video, duration).filter("setpts", f"PTS-{shift:.6f}/TB")
    nodes = []
    if target.poster is not None:
        branches = video.filter_multi_output("split")
        video = branches[0]
        nodes.append(_still(target, info, branches[1]))
    spec = target.spec
    picture = dict(
        vcodec="libx264",
        preset=spec.encoder_preset or PRESET,
        crf=CRF,
        force_key_frames=KEYFRAMES,
        r=str(rate),
        fps_mode="cfr",
        vframes=count,
        map_metadata=-1,
        **_rate_cap(spec),
    )
    if target.stream is None:
        out = ffmpeg.output(video, target.output, an=None, f="mp4", **picture)
    else:  # (the piece's sound starts at its first frame: the clip's clock there, as its picture's)
        if audio_source is not None:
            audio = source_input(audio_source, begins - info.audio_offset, length).audio
        elif info.has_audio:
            audio = src.audio
        else:
            audio = ffmpeg.input(f"anullsrc=r={AUDIO_RATE}:cl=stereo", f="lavfi", t=_seconds(length)).audio
        audio = _sound(target, audio.filter("asetpts", f"PTS+{shift:.6f}/TB"), duration)
        out = ffmpeg.output(
            video,
            audio.filter("asetpts", f"PTS-{shift:.6f}/TB"),
            _tee(target.output, target.stream, rate, count, picture_only=True),
            acodec="aac",
            audio_bitrate=AUDIO_BITRATE,
            ar=AUDIO_RATE,
            t=_seconds(length),
            f="tee",
            **{"flags:v": "+global_header", "flags:a": "+global_header"},
            **picture,
        )
    merged = ffmpeg.merge_outputs(out, *nodes) if nodes else out
    merged = merged.global_args("-hide_banner", "-nostdin", "-nostats", "-loglevel", "error", "-progress", "pipe:1")
    return list(merged.overwrite_output().compile(cmd=ffmpeg_bin))


def build_sound(
    target: Target,
    info: MediaInfo,
    source: str,
    ffmpeg_bin: str,
    cut: tuple[float, float],
    audio_source: str | None = None,
    length: float | None = None,
) -> list[str]:
    """The sound of ``target``'s whole clip alone (AAC in MP4), for a clip rendered in pieces: the chain of a
    one-piece render (levelled, faded), encoded once, so the joined clip's sound has no seam. ``length``: where it
    ends (the clip's frames' length: a one-piece render's sound ends with its last frame)."""
    start, duration = cut
    if audio_source is not None:
        audio = source_input(audio_source, start - info.audio_offset, duration).audio
    elif info.has_audio:
        audio = source_input(source, start - info.timeline_offset, duration, threads=1).audio
    else:
        audio = ffmpeg.input(f"anullsrc=r={AUDIO_RATE}:cl=stereo", f="lavfi", t=_seconds(duration)).audio
    audio = _sound(target, audio, duration)
    out = ffmpeg.output(
        audio,
        target.output,
        acodec="aac",
        audio_bitrate=AUDIO_BITRATE,
        ar=AUDIO_RATE,
        t=_seconds(length if length is not None else duration),
        map_metadata=-1,
        vn=None,
        f="mp4",
    )
    out = out.global_args("-hide_banner", "-nostdin", "-nostats", "-loglevel", "error", "-progress", "pipe:1")
    return list(out.overwrite_output().compile(cmd=ffmpeg_bin))


def build_join(pieces: str, sound: str, output: str, ffmpeg_bin: str) -> list[str]:
    """A clip's pieces joined without encoding: ``pieces`` (a concat demuxer's list of the pictures, in order) and
    ``sound`` (the whole clip's sound) copied into one faststart MP4."""
    picture = ffmpeg.input(pieces, f="concat", safe=0, protocol_whitelist="file", format_whitelist="concat,mov,mp4")
    audio = ffmpeg.input(sound, protocol_whitelist="file", format_whitelist="mov,mp4,m4a")
    out = ffmpeg.output(picture.video, audio.audio, output, c="copy", movflags="+faststart", map_metadata=-1, f="mp4")
    out = out.global_args("-hide_banner", "-nostdin", "-nostats", "-loglevel", "error")
    return list(out.overwrite_output().compile(cmd=ffmpeg_bin))
