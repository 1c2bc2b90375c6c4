"""The pipeline shared by the inline CLI and the queue worker: resolve → cached? → probe → render → store."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from pathlib import Path

from quoteclip import RENDERER_VERSION, __version__
from quoteclip.errors import QuoteclipError, RenderFailed, SourceUnavailable
from quoteclip.settings import Settings
from quoteclip.spec import ClipSpec, format_time
from renderer.ffmpeg import MACHINE_ERRNOS, ffmpeg_binary, ffmpeg_version
from renderer.probe import MediaInfo, frame_too_large, has_audio, probe
from renderer.render import RenderResult, render_clip
from renderer.sidecars import manifest, poster, sha256_file, to_srt, to_vtt
from sources import open_source, resolve_source
from storage import Storage

from .keys import clip_key, download_name

log = logging.getLogger(__name__)


class Stage(StrEnum):
    QUEUED = "queued"
    FETCHING = "fetching"
    RENDERING = "rendering"
    UPLOADING = "uploading"
    FINISHED = "finished"
    FAILED = "failed"


# Share of the overall progress at which each stage starts.
STAGE_START = {Stage.FETCHING: 0, Stage.RENDERING: 5, Stage.UPLOADING: 95, Stage.FINISHED: 100}

Reporter = Callable[[Stage, int], None]
TEMP_PREFIX = "quoteclip-"  # + the pid of the process rendering: folders of dead processes are swept


def sweep_temp(folder: str | None = None) -> int:
    """Remove render folders left by processes that died mid-render (killed work-horses). Returns how many."""
    root = Path(folder or tempfile.gettempdir())
    removed = 0
    for path in root.glob(f"{TEMP_PREFIX}*-*"):
        pid = path.name.removeprefix(TEMP_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class ClipResult:
    status: str
    link: str
    key: str
    width: int
    height: int
    duration: float
    cached: bool
    path: str | None = None
    filename: str | None = None
    source_bytes: int | None = None  # bytes fetched from a remote source for this render
    sidecars: dict[str, str] | None = None  # srt, vtt, poster, manifest → links

    def to_json(self) -> dict[str, object]:
        return {k: v for k, v in asdict(self).items() if v is not None or k == "path"}


def lookup(spec: ClipSpec, settings: Settings, storage: Storage) -> tuple[str, ClipResult | None]:
    """The clip's key, and its result when it is already stored (no probe, no ffmpeg)."""
    source = resolve_source(spec.source, allow_local=settings.allow_local_sources is True)
    key = clip_key(spec, source.identity)
    meta = storage.stat(key)
    if meta is None:
        return key, None
    return key, _result(storage, key, meta, cached=True)


def produce_clip(
    spec: ClipSpec,
    settings: Settings,
    storage: Storage,
    report: Reporter | None = None,
) -> ClipResult:
    """Return the stored clip for ``spec``, rendering and storing it first when it is not stored yet.

    ``settings`` must be resolved for the caller (``Settings.for_cli()`` or ``for_queue()``).
    """

    def say(stage: Stage, percent: int) -> None:
        if report is not None:
            report(stage, percent)

    source = resolve_source(spec.source, allow_local=settings.allow_local_sources is True)
    key = clip_key(spec, source.identity)
    meta = storage.stat(key)
    if meta is not None:
        say(Stage.FINISHED, 100)
        return _result(storage, key, meta, cached=True)

    binary = ffmpeg_binary(settings.ffmpeg_binary)
    with _machine_errors(), tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{os.getpid()}-") as tmp:
        say(Stage.FETCHING, STAGE_START[Stage.FETCHING])
        t0 = time.perf_counter()
        with open_source(source, settings, Path(tmp), binary) as opened:
            info = probe(opened.probe_video, name=spec.source, max_pixels=settings.max_frame_pixels)
            if opened.probe_audio is not None:
                info = replace(info, has_audio=has_audio(opened.probe_audio))
            check_limits(
                info, settings.max_source_seconds, settings.max_frame_pixels, settings.max_streams, spec.source
            )
            say(Stage.RENDERING, STAGE_START[Stage.RENDERING])
            t1 = time.perf_counter()
            span = STAGE_START[Stage.UPLOADING] - STAGE_START[Stage.RENDERING]
            try:
                result = render_clip(
                    spec,
                    opened.video,
                    info,
                    Path(tmp),
                    binary,
                    timeout=settings.render_timeout(spec.duration),
                    on_progress=lambda f: say(Stage.RENDERING, STAGE_START[Stage.RENDERING] + int(f * span)),
                    audio_source=opened.audio,
                    probe_source=opened.probe_video,
                )
            except QuoteclipError:
                source_error = opened.error()
                if source_error is not None:  # the render failed because the source did: say so
                    raise source_error from None
                raise
            source_error = opened.error()
            if source_error is not None:  # ffmpeg may take a failed read for the end of the file
                raise source_error
            fetched = opened.fetched_bytes if source.remote else None
            title = opened.title
        t2 = time.perf_counter()
        say(Stage.UPLOADING, STAGE_START[Stage.UPLOADING])
        filename = download_name(spec, key)
        sidecars = _sidecars(spec, key, source.identity, title, result, binary)
        meta = {
            "width": str(result.width),
            "height": str(result.height),
            "duration": f"{result.duration:.3f}",
            "filename": filename,
            "sidecars": ",".join(sidecars),
        }
        for suffix, (data, content_type) in sidecars.items():  # sidecars first, the mp4 last
            storage.put_sidecar(key, suffix, data, content_type)
        storage.put(result.path, key, filename, meta)
    say(Stage.FINISHED, 100)
    timings = {"open_probe_s": round(t1 - t0, 3), "render_s": round(t2 - t1, 3),
               "store_s": round(time.perf_counter() - t2, 3)}  # fmt: skip
    log.info(
        "stored clip %s (%.3f s): open+probe %.2f s, render %.2f s, store %.2f s, %s source bytes",
        key, result.duration, *timings.values(), fetched if fetched is not None else "local",
        extra={"fields": {"stage": "stored", "key": key, "duration_s": result.duration, **timings,
                          "source_bytes": fetched}},
    )  # fmt: skip
    return replace(_result(storage, key, meta, cached=False), source_bytes=fetched)


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
def _machine_errors() -> Iterator[None]:
    """A full disk (or no memory) while writing the render's files is this machine's failure, not the request's:
    a transient error, so the queue retries it (on this or another worker)."""
    try:
        yield
    except OSError as exc:
        if exc.errno in MACHINE_ERRNOS:
            raise RenderFailed(f"the render's temp folder failed: {exc.strerror}", permanent=False) from None
        raise


def _sidecars(
    spec: ClipSpec, key: str, identity: str, title: str | None, result: RenderResult, ffmpeg_bin: str
) -> dict[str, tuple[bytes, str]]:
    """SRT and WebVTT of the captions (clip time), a poster JPEG and a JSON manifest, by file suffix."""
    files: dict[str, tuple[bytes, str]] = {}
    if result.captions is not None:
        files[".srt"] = (to_srt(result.captions).encode(), "application/x-subrip")
        files[".vtt"] = (to_vtt(result.captions).encode(), "text/vtt")
    files[".jpg"] = (poster(result.path, min(result.duration * 0.4, 1.0)), "image/jpeg")
    files[".manifest.json"] = (
        manifest(
            key=key,
            source={"url": spec.source, "id": identity, "title": title},
            quote={"start": spec.start, "end": spec.end},
            source_times={"start": result.source_start, "end": round(result.source_start + result.duration, 3)},
            spec=spec.model_dump(mode="json"),
            versions={"quoteclip": __version__, "renderer": RENDERER_VERSION, "ffmpeg": ffmpeg_version(ffmpeg_bin)},
            output={
                "width": result.width,
                "height": result.height,
                "duration": result.duration,
                "bytes": result.path.stat().st_size,
                "sha256": sha256_file(result.path),
            },
            sidecars={
                suffix: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                for suffix, (data, _) in files.items()
            },
        ),  # fmt: skip
        "application/json",
    )
    return files


def _result(storage: Storage, key: str, meta: dict[str, str], cached: bool) -> ClipResult:
    path = storage.local_path(key)
    names = {".srt": "srt", ".vtt": "vtt", ".jpg": "poster", ".manifest.json": "manifest"}
    suffixes = [x for x in meta.get("sidecars", "").split(",") if x in names]
    return ClipResult(
        status=Stage.FINISHED.value,
        link=storage.link(key),
        key=key,
        width=int(meta.get("width", 0)),
        height=int(meta.get("height", 0)),
        duration=float(meta.get("duration", 0)),
        cached=cached,
        path=str(path) if path is not None else None,
        filename=meta.get("filename"),
        sidecars={names[x]: storage.link(key, x) for x in suffixes} or None,
    )
