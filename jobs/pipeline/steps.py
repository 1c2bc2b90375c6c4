"""The steps of a production (a quote's clips, or a clip's poster alone), each one concern, over one shared context:
the temp folder and its machine faults, stages announced, brand files localized, ffmpeg found, the source opened
and probed within its limits, the render (source errors first), its end, and the store."""

from __future__ import annotations

import json
import logging
import os
import struct
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from quoteclip.errors import BadInput, MachineFault, QuoteclipError, RenderFailed, SourceUnavailable, machine_fault
from quoteclip.machine import available_memory
from quoteclip.settings import Settings
from quoteclip.spec import ClipSpec, format_time
from renderer.ffmpeg import die_with_parent, ffmpeg_binary, ffmpeg_version
from renderer.fragments import Piece
from renderer.frames import FrameSpan, frame_span
from renderer.head import with_length
from renderer.instant import CopyRefused, copy_clip
from renderer.plan import output_frames, output_rate, source_rate
from renderer.probe import MediaInfo, Readable, frame_too_large, has_audio, probe
from renderer.render import Drawn, PosterResult, RenderResult, cut_for, draw_overlays, render_clips, render_poster
from renderer.split import plan_split
from sources import SourceRef
from sources.opener import OpenedSource, open_source
from storage import Storage

from .assets import localize
from .keys import download_name
from .lookup import POSTER
from .manifest import sidecar_files
from .results import ClipResult, stored_result
from .stages import STAGE_START, ClipStream, Joined, Reporter, Splitter, Stage
from .tempdirs import TEMP_PREFIX, short_of_space

log = logging.getLogger(__name__)


@dataclass
class Production:
    """What the steps of one production share: the specs rendered together and where they go, the temp folder, the
    opened source and its probe, what the render made, and when each stage began."""

    specs: list[ClipSpec]  # rendered together: one quote, a profile each (a poster: its clip's spec alone)
    keys: list[str]  # their content keys, in the same order
    source: SourceRef
    settings: Settings
    storage: Storage
    say: Reporter
    tmp: Path  # this production's temp folder
    stream: ClipStream | None = None  # where one clip's render sends its fragmented copy while it encodes
    fleet: Splitter | None = None  # the workers a long clip's pieces are offered to (jobs/pieces.py); None: whole
    binary: str = ""  # the ffmpeg every run uses
    drawn: list[ClipSpec] = field(default_factory=list)  # the specs with brand files as local paths
    overlays: Future[Drawn] | None = None  # the captions and watermarks, drawn while the source is opened
    opened: OpenedSource | None = None  # the source, once opened
    info: MediaInfo | None = None  # the source's probe, on its timeline
    first_frame: bool = False  # the probe decoded a first frame (a failed render need not ask again)
    preview: dict[str, str] | None = None  # an instant preview: copied, or encoded and why
    rendered: list[RenderResult] = field(default_factory=list)  # the clips, in the specs' order
    manifests: list[bytes | None] = field(default_factory=list)  # their manifests as stored (None: another's)
    still: PosterResult | None = None  # a poster rendered alone
    fetched: int | None = None  # bytes fetched from a remote source (None: a local one)
    title: str | None = None  # the page's title, for the manifest
    extractions: int = 0  # page extractions this production made
    source_format: str | None = None  # a page's format family read (https, hls, dash), for the manifest
    began: dict[str, float] = field(default_factory=dict)  # when each stage was announced (perf_counter)
    rendered_at: float = 0.0  # when the render was over (perf_counter)
    joined: Joined | None = None  # a clip rendered in pieces: what they cost

    @property
    def spec(self) -> ClipSpec:
        """The first spec: the cut, the quality and the source all the specs share."""
        return self.specs[0]

    def source_open(self) -> tuple[OpenedSource, MediaInfo]:
        """The opened source and its probe (the steps after ``probe_source``)."""
        assert self.opened is not None and self.info is not None, "the source is not open and probed"
        return self.opened, self.info


@contextmanager
def workspace(settings: Settings, need: int) -> Iterator[Path]:
    """A temp folder named for this process (swept if the process dies), in which a failure that is this machine's
    (a full disk, no memory, less room left than the ``need`` bytes the clips take) is a MachineFault."""
    with _machine_errors(settings, need), tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{os.getpid()}-") as tmp:
        yield Path(tmp)


def announce(ctx: Production, stage: Stage) -> None:
    """Say ``stage`` at its start on the progress scale, and note when."""
    ctx.say(stage, STAGE_START[stage])
    ctx.began[stage] = time.perf_counter()


def look_up_ffmpeg(ctx: Production, ahead: ThreadPoolExecutor) -> Future[str]:
    """Find the ffmpeg binary in the background (imageio-ffmpeg's own lookup, used where the wheel holds no binary or
    IMAGEIO_FFMPEG_EXE names one, may run the binary to check it)."""
    return ahead.submit(ffmpeg_binary, ctx.settings.ffmpeg_binary)


def localise(ctx: Production) -> None:
    """Every spec's brand files as local paths (assets fetched), each profile in its own folder."""
    for n, spec in enumerate(ctx.specs):
        folder = ctx.tmp / f"assets-{n}"
        folder.mkdir()
        ctx.drawn.append(localize(spec, ctx.settings, ctx.storage, folder))


def draw_ahead(ctx: Production, ahead: ThreadPoolExecutor) -> None:
    """Draw the overlays (Pillow) while the source is opened and probed (PyAV): they need only the cut. An instant
    clip has none. (The pool is left, so the drawing has ended, before the temp folder goes.)"""
    if ctx.spec.quality != "instant":
        ctx.overlays = ahead.submit(draw_overlays, ctx.drawn, ctx.tmp, cut_for(ctx.spec, None))


def ready_ffmpeg(ctx: Production, ahead: ThreadPoolExecutor, found: Future[str]) -> None:
    """Take the ffmpeg found, and ask now (cached) what its runs ask later: its version for the manifest, and the
    hook its children die with (ffmpeg's start then only forks and calls it)."""
    ctx.binary = found.result()
    ahead.submit(ffmpeg_version, ctx.binary)
    ahead.submit(die_with_parent)


@contextmanager
def opened_source(ctx: Production, announce_waits: bool) -> Iterator[None]:
    """The source open for the steps inside (``ctx.opened``), reading only the cut where it can; on their success,
    what the opening fetched and found noted. ``announce_waits``: a wait for a format the site makes available later
    is logged and said as the waiting stage."""

    def waiting(seconds: float) -> None:
        log.info("waiting %.1f s for the source's format to become available", seconds)
        ctx.say(Stage.WAITING, STAGE_START[Stage.WAITING])

    spec = ctx.spec
    span = (spec.cut_start, spec.cut_end)
    wait = waiting if announce_waits else None
    with open_source(ctx.source, ctx.settings, ctx.tmp, ctx.binary, spec.quality == "preview", wait, span) as opened:
        ctx.opened = opened
        yield
        ctx.fetched = opened.fetched_bytes if ctx.source.remote else None
        ctx.title, ctx.extractions = opened.title, opened.extractions
        ctx.source_format = opened.format_family


def probe_source(ctx: Production) -> None:
    """Probe the opened source, its header only unless the render needs the picture's rotation (the speaker fit's
    face track, an instant copy); whether its frames decode is asked only if ffmpeg fails (``source_errors_first``):
    a first frame decoded here would hold up every render (about 20 ms for 1080p)."""
    assert ctx.opened is not None, "the source is not open"
    ctx.first_frame = ctx.spec.quality == "instant" or any(s.fit == "speaker" for s in ctx.drawn)
    ctx.info = probed(ctx.opened, ctx.spec.source, ctx.settings, ctx.first_frame)


def probed(opened: OpenedSource, label: str, settings: Settings, first_frame: bool) -> MediaInfo:
    """The opened source's probe, placed on the source's timeline, within the source step's limits."""
    info = probe(opened.probe_video, name=label, max_pixels=settings.max_frame_pixels, first_frame=first_frame)
    if opened.duration is not None:  # the inputs hold the cut's segments: place them on the timeline
        offsets = opened.offsets
        info = replace(info, duration=opened.duration, timeline_offset=offsets[0], audio_offset=offsets[1])
    if opened.probe_audio is not None:
        info = replace(info, has_audio=has_audio(opened.probe_audio))
    check_limits(info, settings.max_source_seconds, settings.max_frame_pixels, settings.max_streams, label)
    return info


def check_limits(info: MediaInfo, max_seconds: float, max_pixels: int, max_streams: int, label: str) -> None:
    """Refuse sources no clip should be cut from (the source step's limits, read from the probe): too long,
    absurd frame sizes, too many streams."""
    if info.duration > max_seconds:
        raise SourceUnavailable(
            f"source is {format_time(info.duration)} long, over the {format_time(max_seconds)} limit: {label}"
        )
    if frame_too_large(info.width, info.height, max_pixels):
        raise SourceUnavailable(f"source frame size {info.width}x{info.height} is over the limit: {label}")
    if info.streams > max_streams:
        raise SourceUnavailable(f"source has {info.streams} streams, over the limit of {max_streams}: {label}")


@contextmanager
def source_errors_first(ctx: Production) -> Iterator[None]:
    """A render that failed because its source did fails with the source's error; one whose source failed while
    ffmpeg read it (ffmpeg may take a failed read for the end of the file) fails too; a failed render of a source
    not one frame of which decodes is the source's fault (BadInput); else the render's own failure stands."""
    opened, _ = ctx.source_open()
    try:
        yield
    except QuoteclipError as failed:
        source_error = opened.error()
        if source_error is not None:
            raise source_error from None
        if isinstance(failed, RenderFailed) and not ctx.first_frame:
            _refuse_undecodable(opened.probe_video, ctx.spec.source)
        raise
    source_error = opened.error()
    if source_error is not None:
        raise source_error


def _refuse_undecodable(video: Readable, label: str) -> None:
    """After a failed render: BadInput when not one frame of the source decodes (the source's fault, said as
    such), else nothing (the render's own failure stands)."""
    try:
        probe(video, name=label, first_frame=True)
    except BadInput:
        raise
    except QuoteclipError:
        return


def copy_instant(ctx: Production) -> None:
    """An instant preview copied from the source (``ctx.rendered``); when the copy is refused, the spec turned into an
    encoded preview instead, saying why (``ctx.preview``)."""
    opened, info = ctx.source_open()
    timeout = ctx.settings.render_timeout(ctx.spec.duration)
    try:
        ctx.rendered = [copy_clip(ctx.drawn[0], opened.video, info, ctx.tmp, ctx.binary, timeout, opened.audio)]
        ctx.preview = {"mode": "copy"}
    except CopyRefused as refused:
        log.info("instant preview falls back to an encoded one: %s", refused)
        ctx.preview = {"mode": "encoded", "reason": str(refused)}
        ctx.drawn = [ctx.drawn[0].model_copy(update={"quality": "preview"})]


def encode(ctx: Production) -> None:
    """The clips encoded in one ffmpeg run (one decode, an encoder per profile) with the overlays drawn ahead,
    progress said as the render's share of the scale, and one clip's fragmented copy sent to its stream."""
    opened, info = ctx.source_open()
    start = STAGE_START[Stage.RENDERING]
    span = STAGE_START[Stage.UPLOADING] - start
    if ctx.fleet is not None and len(ctx.drawn) == 1:
        if ctx.fleet.splits(ctx.drawn[0], clip_length(ctx.spec, info), ctx.settings, info):
            plan = plan_split(
                ctx.drawn[0],
                opened.video,
                info,
                ctx.tmp,
                ctx.settings.piece_seconds,
                opened.probe_video,
                ctx.overlays.result() if ctx.overlays is not None else None,
            )
            ctx.joined = ctx.fleet.render(
                plan,
                ctx.spec,
                ctx.keys[0],
                opened.video,
                opened.audio,
                ctx.tmp,
                ctx.binary,
                ctx.settings,
                ctx.storage,
                lambda f: ctx.say(Stage.RENDERING, start + int(f * span)),
                _declaring_length(ctx.stream.piece, plan.length) if ctx.stream is not None else None,
            )
            ctx.rendered = [ctx.joined.result]
            return
    ctx.rendered = render_clips(
        ctx.drawn,
        opened.video,
        info,
        ctx.tmp,
        ctx.binary,
        timeout=ctx.settings.render_timeout(ctx.spec.duration),
        on_progress=lambda f: ctx.say(Stage.RENDERING, start + int(f * span)),
        audio_source=opened.audio,
        probe_source=opened.probe_video,
        max_pixels=ctx.settings.max_frame_pixels,
        drawn=ctx.overlays.result() if ctx.overlays is not None else None,
        stream=_declaring_length(ctx.stream.piece, clip_length(ctx.spec, info)) if ctx.stream is not None else None,
    )


def clip_length(spec: ClipSpec, info: MediaInfo) -> float:
    """The rendered clip's length, known from its cut before its first frame: its frames at the output's rate."""
    cut = cut_for(spec, info)
    return float(output_frames(info, *cut) / output_rate(info))


def _declaring_length(piece: Callable[[Piece], None], seconds: float) -> Callable[[Piece], None]:
    """``piece`` handed the stream's init segment with the clip's length declared in it (``with_length``: players
    show the length while the clip streams), and the fragments as they are."""

    def declared(given: Piece) -> None:
        if given.kind == "init":
            try:
                given = replace(given, data=with_length(given.data, seconds))
            except (ValueError, struct.error, StopIteration, IndexError) as exc:
                log.warning("the stream's init segment is relayed without the clip's length: %s", exc)
        piece(given)

    return declared


def render_still(ctx: Production) -> None:
    """The poster alone (``ctx.still``): one frame of the cut, captions and watermark on it."""
    opened, info = ctx.source_open()
    ctx.still = render_poster(
        ctx.drawn[0],
        opened.video,
        info,
        ctx.tmp,
        ctx.binary,
        timeout=ctx.settings.render_timeout(0.0),
        audio_source=opened.audio,
        probe_source=opened.probe_video,
        max_pixels=ctx.settings.max_frame_pixels,
    )


def end_render(ctx: Production) -> None:
    """The render is over and checked: the viewers' stream told it is whole (the clip is stored next), and when."""
    if ctx.stream is not None:
        ctx.stream.finished()
    ctx.rendered_at = time.perf_counter()


def store_clips(ctx: Production) -> list[ClipResult]:
    """Announce the upload and store each rendered clip under its key, in the specs' order."""
    announce(ctx, Stage.UPLOADING)
    assert ctx.info is not None, "the source was not probed"
    cut_start, cut_length = cut_for(ctx.spec, ctx.info)
    frames = frame_span(cut_start, cut_start + cut_length, source_rate(ctx.info))
    stored = []
    for spec, key, result in zip(ctx.specs, ctx.keys, ctx.rendered, strict=True):
        clip, manifest = _store(
            spec,
            key,
            ctx.source.identity,
            ctx.title,
            result,
            ctx.binary,
            frames,
            ctx.preview,
            ctx.storage,
            ctx.source_format,
        )
        stored.append(replace(clip, source_bytes=ctx.fetched))
        ctx.manifests.append(manifest)
    return stored


def check_clips(ctx: Production) -> None:
    """Each clip just stored, checked (jobs/pipeline/quality.py): its report made from the file still here and
    stored in its manifest. The clips are stored and said to be before: their link never waits for it."""
    from .quality import checked

    assert ctx.info is not None, "the source was not probed"
    for spec, key, result, manifest in zip(ctx.specs, ctx.keys, ctx.rendered, ctx.manifests, strict=True):
        if manifest is None:  # (stored first by another worker, whose file it is: its report is that worker's)
            continue
        sound = ctx.info.has_audio
        checked(
            ctx.storage,
            key,
            manifest,
            spec,
            result.path,
            ctx.binary,
            result.duration,
            sound,
            result.captions,
            result.picture_checks,
        )


def _store(
    spec: ClipSpec,
    key: str,
    identity: str,
    title: str | None,
    result: RenderResult,
    binary: str,
    frames: FrameSpan,
    preview: dict[str, str] | None,
    storage: Storage,
    source_format: str | None = None,
) -> tuple[ClipResult, bytes | None]:
    """Store one rendered clip: the sidecars side by side, then the mp4 last (its presence marks it complete). When
    another worker stored it first, the answer describes the clip stored (its metadata), not this render. With it,
    the manifest stored, or None when the clip stored is another worker's."""
    filename = download_name(spec, key)
    sidecars = sidecar_files(spec, key, identity, title, result, binary, frames, preview, source_format)
    meta = {
        "width": str(result.width),
        "height": str(result.height),
        "duration": f"{result.duration:.3f}",
        "filename": filename,
        "sidecars": ",".join(sidecars),
        "frames": json.dumps(frames.to_json(), separators=(",", ":")),
        **({"preview": json.dumps(preview, separators=(",", ":"))} if preview else {}),
    }
    with ThreadPoolExecutor(max_workers=len(sidecars)) as pool:
        puts = [pool.submit(storage.put_sidecar, key, x, data, kind) for x, (data, kind) in sidecars.items()]
        for put in puts:
            put.result()
    manifest: bytes | None = sidecars[".manifest.json"][0]
    if not storage.put(result.path, key, filename, meta):
        # another worker stored the clip first: its bytes stand, so the answer is made from its metadata (and its
        # report is that worker's to make: this render's file is not the one stored)
        meta, manifest = storage.stat(key) or meta, None
    return stored_result(storage, key, meta, cached=False), manifest


def store_still(ctx: Production) -> None:
    """Announce the upload and store the poster where its clip's own poster goes (the clip's key, ``.jpg``)."""
    announce(ctx, Stage.UPLOADING)
    assert ctx.still is not None, "no poster was rendered"
    ctx.storage.put_sidecar(ctx.keys[0], POSTER, ctx.still.path.read_bytes(), "image/jpeg")


def render_timings(ctx: Production, ffmpeg_s: float) -> dict[str, float]:
    """Seconds per step: opening and probing the source, the render (of which ffmpeg ran ``ffmpeg_s``)."""
    rendering = ctx.began[Stage.RENDERING]
    return {
        "open_probe_s": round(rendering - ctx.began[Stage.FETCHING], 3),
        "render_s": round(ctx.rendered_at - rendering, 3),
        "ffmpeg_s": ffmpeg_s,
    }


@contextmanager
def _machine_errors(settings: Settings, need: int) -> Iterator[None]:
    """A full disk (or no memory) while the job runs is this machine's failure, not the request's: a MachineFault,
    whatever error it came wrapped in (``machine_fault``: a system error of this process's own). A job that
    failed otherwise is the machine's only when measured right after: its temp or source cache folder left with
    less room than the job's clips ``need`` (a source read that died on a full cache reaches ffmpeg as a
    cut-short file, which it calls invalid data; ffmpeg on a full disk exits with -ENOSPC), or less memory
    available than a worker's minimum. What ffmpeg or a source said is never read for it."""
    try:
        yield
    except MachineFault:
        raise
    except Exception as exc:
        fault = machine_fault(exc)
        if fault is None and isinstance(exc, QuoteclipError):  # bad input too: another worker tells
            short = short_of_space(
                {"temp": Path(tempfile.gettempdir()), "source cache": settings.cache_dir},
                {"temp": need, "source cache": need},
            )
            if short is not None:
                fault = MachineFault(f"{f'{exc}'.splitlines()[0]} ({short})", "disk")
            else:
                memory = available_memory()
                if memory is not None and memory < settings.min_free_memory:
                    left = f"{memory / 1024**2:.0f} MB of memory available"
                    fault = MachineFault(f"{f'{exc}'.splitlines()[0]} ({left})", "memory")
        if fault is None:
            raise
        raise fault from exc
