"""The pipeline shared by the inline CLI and the queue worker: resolve → cached? → probe → render → store, each a
named step (``steps.py``) over one shared context."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from quoteclip.errors import BadInput
from quoteclip.settings import Settings
from quoteclip.spec import ClipSpec
from renderer.ffmpeg import ffmpeg_binary
from renderer.render import PosterResult
from sources import SourceRef
from storage import Storage

from .lookup import POSTER, find, sidecar_stored
from .results import ClipResult, PosterStored
from .stages import ClipStream, Reporter, Splitter, Stage
from .steps import (
    Production,
    announce,
    check_clips,
    copy_instant,
    draw_ahead,
    encode,
    end_render,
    localise,
    look_up_ffmpeg,
    opened_source,
    probe_source,
    ready_ffmpeg,
    render_still,
    render_timings,
    source_errors_first,
    store_clips,
    store_still,
    workspace,
)
from .tempdirs import clip_bytes, sweep_temp

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
    fleet: Splitter | None = None,
    check: bool = False,
) -> list[ClipResult]:
    """The stored clips of one quote in several profiles (specs that differ only in profile), in order. Each is
    looked up on its own; the missing ones are rendered together, from one read and one decode of the source
    (one ffmpeg run, one encoder per profile), and stored one by one, each with its own key and sidecars.

    ``stream``: where one clip's render (not an instant copy, not several profiles) sends its fragmented copy while
    it encodes; told ``finished`` once the render is checked, before the clip is stored, or ``failed``.
    ``check``: once the clips are stored and said to be, each one's quality report is made and put in its manifest
    (jobs/pipeline/quality.py); the call returns after it."""

    say = _told(report)
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
        return _produce(specs, settings, storage, say, looked, results, missing, streaming, fleet, check)
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
    fleet: Splitter | None = None,
    check: bool = False,
) -> list[ClipResult]:
    """The render and store of ``produce_clips`` (the clips ``missing`` from the store), step by step."""
    need = clip_bytes(specs[missing[0]].duration, len(missing))
    with workspace(settings, need) as tmp, ThreadPoolExecutor(max_workers=2) as ahead:
        ctx = Production(
            specs=[specs[n] for n in missing],
            keys=[looked[n][1] for n in missing],
            source=looked[missing[0]][0],
            settings=settings,
            storage=storage,
            say=say,
            tmp=tmp,
            stream=streaming,
            fleet=fleet,
        )
        announce(ctx, Stage.FETCHING)
        found = look_up_ffmpeg(ctx, ahead)
        localise(ctx)
        draw_ahead(ctx, ahead)
        ready_ffmpeg(ctx, ahead, found)
        with opened_source(ctx, announce_waits=True):
            probe_source(ctx)
            announce(ctx, Stage.RENDERING)
            with source_errors_first(ctx):
                if ctx.drawn[0].quality == "instant":
                    copy_instant(ctx)
                if not ctx.rendered:
                    encode(ctx)
        end_render(ctx)
        stored = store_clips(ctx)
        say(Stage.FINISHED, 100)
        timed = _clip_timings(ctx)
        if check:
            checking = time.perf_counter()
            check_clips(ctx)
            timed["check_s"] = round(time.perf_counter() - checking, 3)
    _log_clips(ctx, timed)
    for n, clip in zip(missing, stored, strict=True):
        results[n] = replace(clip, timings=timed)
    return [r for r in results if r is not None]


def _clip_timings(ctx: Production) -> dict[str, float]:
    """The clips' timings: the render's, the store's (and when it ended), and a streamed render's first fragment."""
    first = ctx.rendered[0]
    timed = {**render_timings(ctx, first.ffmpeg_s), "store_s": round(time.perf_counter() - ctx.rendered_at, 3)}
    timed["stored_at"] = round(time.time(), 3)  # the epoch's seconds: when the clip was stored and said to be
    if ctx.joined is not None:  # a clip rendered in pieces: how many, how many here, what the sound and join took
        joined = ctx.joined
        timed.update(
            pieces=joined.pieces,
            pieces_here=joined.here,
            pieces_ffmpeg_s=round(sum(joined.piece_s.values()), 3),
            sound_s=joined.sound_s,
            join_s=joined.join_s,
            **{f"piece_{n}_s": seconds for n, seconds in joined.piece_s.items()},
        )
    if first.streamed is not None:  # when ffmpeg started and its first fragment came (the epoch's seconds)
        timed["ffmpeg_started_at"], timed["first_fragment_at"] = first.streamed
    return timed


def _log_clips(ctx: Production, timed: dict[str, float]) -> None:
    """The log line of the clips stored, with their timings and what the source cost."""
    keys = ",".join(ctx.keys)
    duration = ctx.rendered[0].duration
    log.info(
        "stored clip %s (%.3f s): open+probe %.2f s, render %.2f s (ffmpeg %.2f s), store %.2f s, %s source bytes",
        keys,
        duration,
        *(timed[name] for name in ("open_probe_s", "render_s", "ffmpeg_s", "store_s")),
        ctx.fetched if ctx.fetched is not None else "local",
        extra={
            "fields": {
                "stage": "stored",
                "key": keys,
                "duration_s": duration,
                **timed,
                "source_bytes": ctx.fetched,
                "extractions": ctx.extractions,
                "profiles": len(ctx.specs),
            }
        },
    )


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

    say = _told(report)
    source, key, found = find(spec, settings, storage)
    if found is not None or sidecar_stored(storage, key, POSTER):
        say(Stage.FINISHED, 100)
        return PosterStored(key, storage.link(key, POSTER), cached=True)
    if spec.quality == "instant":
        raise BadInput("quality: an instant preview has no poster (the page shows the video itself)")
    with workspace(settings, clip_bytes(1.0, 1)) as tmp:
        ctx = Production([spec], [key], source, settings, storage, say, tmp)
        announce(ctx, Stage.FETCHING)
        ctx.binary = ffmpeg_binary(settings.ffmpeg_binary)
        localise(ctx)
        with opened_source(ctx, announce_waits=False):
            probe_source(ctx)
            announce(ctx, Stage.RENDERING)
            with source_errors_first(ctx):
                render_still(ctx)
        end_render(ctx)
        store_still(ctx)
    assert ctx.still is not None, "no poster was rendered"
    timed = render_timings(ctx, ctx.still.ffmpeg_s)
    _log_poster(key, ctx.still, timed)
    say(Stage.FINISHED, 100)
    return PosterStored(key, storage.link(key, POSTER), cached=False, timings=timed)


def _log_poster(key: str, still: PosterResult, timed: dict[str, float]) -> None:
    """The log line of a poster stored alone, with its timings."""
    log.info(
        "stored the poster of clip %s alone (%dx%d, %.3f s in): open+probe %.2f s, render %.2f s (ffmpeg %.2f s)",
        key,
        still.width,
        still.height,
        still.at,
        *timed.values(),
        extra={"fields": {"stage": "stored", "key": key, "poster": True, **timed}},
    )


def _told(report: Reporter | None) -> Reporter:
    """``report``, or (none given) a reporter that tells no one."""

    def say(stage: Stage, percent: int) -> None:
        if report is not None:
            report(stage, percent)

    return say
