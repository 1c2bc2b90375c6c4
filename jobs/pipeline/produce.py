"""The pipeline shared by the inline CLI and the queue worker: resolve → cached? → probe → render → store."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from quoteclip.errors import BadInput, MachineFault, QuoteclipError, RenderFailed, SourceUnavailable, machine_fault
from quoteclip.settings import Settings
from quoteclip.spec import ClipSpec, format_time
from renderer.ffmpeg import die_with_parent, ffmpeg_binary, ffmpeg_version
from renderer.frames import FrameSpan, frame_span
from renderer.instant import CopyRefused, copy_clip
from renderer.plan import source_rate
from renderer.probe import MediaInfo, Readable, frame_too_large, has_audio, probe
from renderer.render import RenderResult, cut_for, draw_overlays, render_clips, render_poster
from sources import SourceRef
from sources.opener import OpenedSource, open_source
from storage import Storage

from .assets import localize
from .keys import download_name
from .lookup import POSTER, find, sidecar_stored
from .manifest import sidecar_files
from .results import ClipResult, PosterStored, stored_result
from .stages import STAGE_START, ClipStream, Reporter, Stage
from .tempdirs import TEMP_PREFIX, clip_bytes, short_of_space, sweep_temp

__all__ = [  # what other modules import from here
    "ClipResult",
    "PosterStored",
    "Stage",
    "produce_clip",
    "produce_clips",
    "produce_poster",
    "sweep_temp",
]

log = logging.getLogger(__name__)


def produce_clip(
    spec: ClipSpec,
    settings: Settings,
    storage: Storage,
    report: Reporter | None = None,
) -> ClipResult:
    """Return the stored clip for ``spec``, rendering and storing it first when it is not stored yet.

    ``settings`` must be resolved for the caller (``Settings.for_cli()`` or ``for_queue()``).
    """
    return produce_clips([spec], settings, storage, report)[0]


def produce_clips(
    specs: list[ClipSpec],
    settings: Settings,
    storage: Storage,
    report: Reporter | None = None,
    stream: ClipStream | None = None,
) -> list[ClipResult]:
    """The stored clips of one quote in several profiles (specs that differ only in profile), in order. Each is
    looked up on its own; the missing ones are rendered together, from one read and one decode of the source
    (one ffmpeg run, one encoder per profile), and stored one by one, each with its own key and sidecars.

    ``stream``: where one clip's render (not an instant copy, not several profiles) sends its fragmented copy while
    it encodes; told ``finished`` once the render is checked, before the clip is stored, or ``failed``."""

    def say(stage: Stage, percent: int) -> None:
        if report is not None:
            report(stage, percent)

    looked = [find(spec, settings, storage) for spec in specs]
    results: list[ClipResult | None] = [found for _, _, found in looked]
    missing = [n for n, found in enumerate(results) if found is None]
    if not missing:
        say(Stage.FINISHED, 100)
        return [r for r in results if r is not None]
    spec = specs[missing[0]]
    if spec.quality == "instant" and len(missing) > 1:
        raise BadInput("quality: an instant preview is one clip in the source's own shape; ask for one profile")
    streaming = stream if len(missing) == 1 and spec.quality != "instant" else None
    try:
        return _produce(specs, settings, storage, say, looked, results, missing, streaming)
    except BaseException as exc:
        if streaming is not None:
            streaming.failed(f"{exc}".splitlines()[0] if f"{exc}" else type(exc).__name__)
        raise


def _produce(
    specs: list[ClipSpec],
    settings: Settings,
    storage: Storage,
    say: Reporter,
    looked: list[tuple[SourceRef, str, ClipResult | None]],
    results: list[ClipResult | None],
    missing: list[int],
    streaming: ClipStream | None,
) -> list[ClipResult]:
    """The render and store of ``produce_clips`` (the clips ``missing`` from the store)."""
    spec, (source, _, _) = specs[missing[0]], looked[missing[0]]
    with (
        _machine_errors(settings, clip_bytes(spec.duration, len(missing))),
        tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{os.getpid()}-") as tmp,
        ThreadPoolExecutor(max_workers=2) as ahead,
    ):
        say(Stage.FETCHING, STAGE_START[Stage.FETCHING])
        t0 = time.perf_counter()
        # found in the background while brand files are localized (imageio-ffmpeg's own lookup, used where the wheel
        # holds no binary or IMAGEIO_FFMPEG_EXE names one, may run the binary to check it)
        found_binary = ahead.submit(ffmpeg_binary, settings.ffmpeg_binary)
        # brand files as local paths (assets fetched), each profile in its own folder
        drawn = []
        for n in missing:
            folder = Path(tmp) / f"assets-{n}"
            folder.mkdir()
            drawn.append(localize(specs[n], settings, storage, folder))

        def waiting(seconds: float) -> None:
            log.info("waiting %.1f s for the source's format to become available", seconds)
            say(Stage.WAITING, STAGE_START[Stage.WAITING])

        preview_format = spec.quality == "preview"
        cut_span = (spec.cut_start, spec.cut_end)
        # the overlays are drawn (Pillow) while the source is opened and probed (PyAV): they need only the cut
        # (the pool is left, so the drawing has ended, before the temp folder goes)
        overlays = (
            None if spec.quality == "instant" else ahead.submit(draw_overlays, drawn, Path(tmp), cut_for(spec, None))
        )
        binary = found_binary.result()
        ahead.submit(ffmpeg_version, binary)  # for the manifest (cached): asked now, not after the render
        ahead.submit(die_with_parent)  # (cached) ffmpeg's start then only forks and calls it
        with open_source(source, settings, Path(tmp), binary, preview_format, waiting, cut_span) as opened:
            # the header only, unless the render needs the picture's rotation (the speaker fit's face track, an
            # instant copy); whether its frames decode is asked only if ffmpeg fails (below): a first frame
            # decoded here would hold up every render (about 20 ms for 1080p)
            first_frame = spec.quality == "instant" or any(s.fit == "speaker" for s in drawn)
            info = _probed(opened, spec.source, settings, first_frame)
            say(Stage.RENDERING, STAGE_START[Stage.RENDERING])
            t1 = time.perf_counter()
            span = STAGE_START[Stage.UPLOADING] - STAGE_START[Stage.RENDERING]
            timeout = settings.render_timeout(spec.duration)
            preview: dict[str, str] | None = None
            try:
                rendered: list[RenderResult] = []
                if drawn[0].quality == "instant":
                    try:
                        rendered = [copy_clip(drawn[0], opened.video, info, Path(tmp), binary, timeout, opened.audio)]
                        preview = {"mode": "copy"}
                    except CopyRefused as refused:  # the encoded preview instead, saying why
                        log.info("instant preview falls back to an encoded one: %s", refused)
                        preview = {"mode": "encoded", "reason": str(refused)}
                        drawn = [drawn[0].model_copy(update={"quality": "preview"})]
                if not rendered:
                    ready = overlays.result() if overlays is not None else None  # (none for an instant clip)
                    rendered = render_clips(
                        drawn,
                        opened.video,
                        info,
                        Path(tmp),
                        binary,
                        timeout=timeout,
                        on_progress=lambda f: say(Stage.RENDERING, STAGE_START[Stage.RENDERING] + int(f * span)),
                        audio_source=opened.audio,
                        probe_source=opened.probe_video,
                        max_pixels=settings.max_frame_pixels,
                        drawn=ready,
                        stream=streaming.piece if streaming is not None else None,
                    )
            except QuoteclipError as failed:
                source_error = opened.error()
                if source_error is not None:  # the render failed because the source did: say so
                    raise source_error from None
                if isinstance(failed, RenderFailed) and not first_frame:
                    _refuse_undecodable(opened.probe_video, spec.source)
                raise
            source_error = opened.error()
            if source_error is not None:  # ffmpeg may take a failed read for the end of the file
                raise source_error
            fetched = opened.fetched_bytes if source.remote else None
            title, extractions = opened.title, opened.extractions
        if streaming is not None:  # checked: the viewers' stream is whole (the clip is stored next)
            streaming.finished()
        t2 = time.perf_counter()
        say(Stage.UPLOADING, STAGE_START[Stage.UPLOADING])
        cut_start, cut_length = cut_for(spec, info)
        frames = frame_span(cut_start, cut_start + cut_length, source_rate(info))
        for n, result in zip(missing, rendered, strict=True):
            key = looked[n][1]
            stored = _store(specs[n], key, source.identity, title, result, binary, frames, preview, storage)
            results[n] = replace(stored, source_bytes=fetched)
    say(Stage.FINISHED, 100)
    timings = {
        "open_probe_s": round(t1 - t0, 3),
        "render_s": round(t2 - t1, 3),
        "ffmpeg_s": rendered[0].ffmpeg_s,
        "store_s": round(time.perf_counter() - t2, 3),
    }
    if rendered[0].streamed is not None:  # when ffmpeg started and its first fragment came (the epoch's seconds)
        timings["ffmpeg_started_at"], timings["first_fragment_at"] = rendered[0].streamed
    keys = ",".join(looked[n][1] for n in missing)
    log.info(
        "stored clip %s (%.3f s): open+probe %.2f s, render %.2f s (ffmpeg %.2f s), store %.2f s, %s source bytes",
        keys,
        rendered[0].duration,
        *(timings[name] for name in ("open_probe_s", "render_s", "ffmpeg_s", "store_s")),
        fetched if fetched is not None else "local",
        extra={
            "fields": {
                "stage": "stored",
                "key": keys,
                "duration_s": rendered[0].duration,
                **timings,
                "source_bytes": fetched,
                "extractions": extractions,
                "profiles": len(missing),
            }
        },
    )
    return [replace(r, timings=timings) if n in missing else r for n, r in enumerate(results) if r is not None]


def _probed(opened: OpenedSource, label: str, settings: Settings, first_frame: bool) -> MediaInfo:
    """The opened source's probe, placed on the source's timeline, within the source step's limits."""
    info = probe(opened.probe_video, name=label, max_pixels=settings.max_frame_pixels, first_frame=first_frame)
    if opened.duration is not None:  # the inputs hold the cut's segments: place them on the timeline
        offsets = opened.offsets
        info = replace(info, duration=opened.duration, timeline_offset=offsets[0], audio_offset=offsets[1])
    if opened.probe_audio is not None:
        info = replace(info, has_audio=has_audio(opened.probe_audio))
    check_limits(info, settings.max_source_seconds, settings.max_frame_pixels, settings.max_streams, label)
    return info


def produce_poster(
    spec: ClipSpec,
    settings: Settings,
    storage: Storage,
    report: Reporter | None = None,
) -> PosterStored:
    """The stored poster of ``spec``'s clip (a ``<video poster>``), rendering it alone when neither it nor the clip is
    stored: one frame, captions and watermark on it, never the clip (``render_poster``). It is stored where the
    clip's own poster goes (the clip's key, ``.jpg``), so a later render of the clip writes the same picture there
    and either serves the other."""

    def say(stage: Stage, percent: int) -> None:
        if report is not None:
            report(stage, percent)

    source, key, found = find(spec, settings, storage)
    if found is not None or sidecar_stored(storage, key, POSTER):
        say(Stage.FINISHED, 100)
        return PosterStored(key, storage.link(key, POSTER), cached=True)
    if spec.quality == "instant":
        raise BadInput("quality: an instant preview has no poster (the page shows the video itself)")
    with (
        _machine_errors(settings, clip_bytes(1.0, 1)),
        tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{os.getpid()}-") as tmp,
    ):
        say(Stage.FETCHING, STAGE_START[Stage.FETCHING])
        t0 = time.perf_counter()
        binary = ffmpeg_binary(settings.ffmpeg_binary)
        drawn = localize(spec, settings, storage, Path(tmp))
        with open_source(
            source, settings, Path(tmp), binary, spec.quality == "preview", None, (spec.cut_start, spec.cut_end)
        ) as opened:
            info = _probed(opened, spec.source, settings, first_frame=drawn.fit == "speaker")
            say(Stage.RENDERING, STAGE_START[Stage.RENDERING])
            t1 = time.perf_counter()
            try:
                still = render_poster(
                    drawn,
                    opened.video,
                    info,
                    Path(tmp),
                    binary,
                    timeout=settings.render_timeout(0.0),
                    audio_source=opened.audio,
                    probe_source=opened.probe_video,
                    max_pixels=settings.max_frame_pixels,
                )
            except QuoteclipError as failed:
                source_error = opened.error()
                if source_error is not None:
                    raise source_error from None
                if isinstance(failed, RenderFailed) and drawn.fit != "speaker":
                    _refuse_undecodable(opened.probe_video, spec.source)
                raise
            source_error = opened.error()
            if source_error is not None:
                raise source_error
        t2 = time.perf_counter()
        say(Stage.UPLOADING, STAGE_START[Stage.UPLOADING])
        storage.put_sidecar(key, POSTER, still.path.read_bytes(), "image/jpeg")
    timings = {"open_probe_s": round(t1 - t0, 3), "render_s": round(t2 - t1, 3), "ffmpeg_s": still.ffmpeg_s}
    log.info(
        "stored the poster of clip %s alone (%dx%d, %.3f s in): open+probe %.2f s, render %.2f s (ffmpeg %.2f s)",
        key,
        still.width,
        still.height,
        still.at,
        *timings.values(),
        extra={"fields": {"stage": "stored", "key": key, "poster": True, **timings}},
    )
    say(Stage.FINISHED, 100)
    return PosterStored(key, storage.link(key, POSTER), cached=False, timings=timings)


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
) -> ClipResult:
    """Store one rendered clip: the sidecars side by side, then the mp4 last (its presence marks it complete)."""
    filename = download_name(spec, key)
    sidecars = sidecar_files(spec, key, identity, title, result, binary, frames, preview)
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
    storage.put(result.path, key, filename, meta)
    return stored_result(storage, key, meta, cached=False)


def _refuse_undecodable(video: Readable, label: str) -> None:
    """After a failed render: BadInput when not one frame of the source decodes (the source's fault, said as
    such), else nothing (the render's own failure stands)."""
    try:
        probe(video, name=label, first_frame=True)
    except BadInput:
        raise
    except QuoteclipError:
        return


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
def _machine_errors(settings: Settings, need: int) -> Iterator[None]:
    """A full disk (or no memory) while the job runs is this machine's failure, not the request's: a MachineFault,
    whatever error it came wrapped in. A job that failed otherwise on a machine whose temp or source cache
    folder is left with less room than the job's clips ``need`` failed for that (a source read that died on a
    full cache reaches ffmpeg as a cut-short file, which it calls invalid data)."""
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
        if fault is None:
            raise
        raise fault from exc
