"""Commands that make clips: ``render`` (inline), ``enqueue`` (for the workers), ``batch`` (a quotes file) and
``demo`` (a clip of a generated source)."""

import json
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Annotated, Any

import typer

from quoteclip.logs import setup_cli_logging
from quoteclip.settings import Settings
from quoteclip.spec import ClipSpec, build_spec

from . import options as opt
from .app import app
from .common import JsonOpt, Progress, VerboseOpt, emit, run_guarded
from .options import ClipOptions, specs_from_options

SourceArg = Annotated[str, typer.Argument(help="A local path, an http(s) media URL or a video page URL.")]


def _clip_call(
    opts: ClipOptions, verbose: bool, as_json: bool, action: Callable[[list[ClipSpec], Settings], None]
) -> None:
    setup_cli_logging(verbose)

    def go() -> None:
        settings = Settings.from_env()
        specs = specs_from_options(opts, settings)
        for warning in specs[0].warnings:
            typer.echo(f"quoteclip: warning: {warning}", err=True)
        action(specs, settings)

    run_guarded(go, as_json)


def clip_command(name: str, help: str, action: Callable[[list[ClipSpec], Settings, bool], None]) -> None:
    """Declare a command that takes a source and every clip option, and hands their spec(s) to ``action``."""

    @app.command(name, help=help)
    def command(
        ctx: typer.Context,
        source: SourceArg,
        start: opt.Start = None,
        end: opt.End = None,
        caption: opt.Caption = None,
        watermark: opt.Watermark = None,
        watermark_position: opt.WatermarkPosition = None,
        watermark_opacity: opt.WatermarkOpacity = None,
        watermark_size: opt.WatermarkSize = None,
        font: opt.Font = None,
        caption_size: opt.CaptionSize = None,
        style: opt.Style = None,
        style_file: opt.StyleFile = None,
        profile: opt.Profile = None,
        profiles: opt.Profiles = None,
        fit: opt.Fit = None,
        quality: opt.Quality = None,
        encoder_preset: opt.EncoderPreset = None,
        pad_before: opt.PadBefore = None,
        pad_after: opt.PadAfter = None,
        no_fades: opt.NoFades = False,
        video_fades: opt.VideoFades = False,
        platform: opt.Platform = None,
        loudness: opt.Loudness = None,
        tighten: opt.Tighten = None,
        snap: opt.Snap = None,
        transcript: opt.Transcript = None,
        as_json: JsonOpt = False,
        verbose: VerboseOpt = False,
    ) -> None:
        opts = ClipOptions.given(ctx.params)
        _clip_call(opts, verbose, as_json, lambda specs, settings: action(specs, settings, as_json))


def _platform(spec: ClipSpec) -> dict[str, str]:
    """A clip's platform, for the JSON answer of a command that made it for one."""
    return {"platform": spec.platform} if spec.platform is not None else {}


def _enqueue_and_print(specs: list[ClipSpec], settings: Settings, as_json: bool) -> None:
    from jobs.pipeline.assets import upload_paths
    from jobs.queue import enqueue_profiles
    from storage import open_storage

    storage = open_storage(settings)
    uploaded = [upload_paths(spec, storage) for spec in specs]  # local files uploaded first
    queued = enqueue_profiles(uploaded, settings, storage=storage)
    if len(specs) == 1:
        one = queued[0]
        body = {**one.to_json(), "warnings": list(specs[0].warnings)}
        emit(body, as_json, f"{one.job_id} {one.status}" + (f" {one.link}" if one.link else ""))
        return
    clips = [
        {**q.to_json(), "profile": s.profile, **_platform(s), "warnings": list(s.warnings)}
        for s, q in zip(specs, queued, strict=True)
    ]
    lines = [
        f"{q.job_id} {q.status} {s.platform or s.profile}" + (f" {q.link}" if q.link else "")
        for s, q in zip(specs, queued, strict=True)
    ]
    emit({"clips": clips}, as_json, "\n".join(lines))


def render_and_print(specs: list[ClipSpec], settings: Settings, as_json: bool) -> None:
    from jobs.pipeline.lookup import lookup
    from storage import open_storage

    storage = open_storage(settings)
    settings = settings.for_cli()
    found = [lookup(spec, settings, storage)[1] for spec in specs]  # stored clips answered without the renderer
    results = [r for r in found if r is not None]
    if len(results) < len(specs):
        from jobs.pipeline.produce import produce_clips

        progress: AbstractContextManager[Any] = Progress() if not as_json or sys.stderr.isatty() else nullcontext()
        with progress as bar:
            results = produce_clips(specs, settings, storage, report=bar, check=True)
    if len(specs) == 1:
        result = results[0]
        body = {**result.to_json(), "warnings": list(specs[0].warnings)}
        emit(body, as_json, f"{'cached' if result.cached else 'rendered'}: {result.link}")
        return
    clips = [
        {**r.to_json(), "profile": s.profile, **_platform(s), "warnings": list(s.warnings)}
        for s, r in zip(specs, results, strict=True)
    ]
    lines = [
        f"{'cached' if r.cached else 'rendered'} {s.platform or s.profile}: {r.link}"
        for s, r in zip(specs, results, strict=True)
    ]
    emit({"clips": clips}, as_json, "\n".join(lines))


clip_command(
    "render", "Render one clip inline and store it (an identical call returns the stored clip).", render_and_print
)
clip_command("enqueue", "Queue one clip for the workers; prints the job id at once.", _enqueue_and_print)


@app.command("batch")
def batch(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(help="The episode: a local path, an http(s) media URL or a page URL.")],
    quotes_file: Annotated[str, typer.Argument(help="CSV with a header (start,end,caption), JSON or JSON lines.")],
    watermark: opt.Watermark = None,
    watermark_position: opt.WatermarkPosition = None,
    watermark_opacity: opt.WatermarkOpacity = None,
    watermark_size: opt.WatermarkSize = None,
    font: opt.Font = None,
    caption_size: opt.CaptionSize = None,
    style: opt.Style = None,
    style_file: opt.StyleFile = None,
    profile: opt.Profile = None,
    profiles: opt.Profiles = None,
    fit: opt.Fit = None,
    quality: opt.Quality = None,
    encoder_preset: opt.EncoderPreset = None,
    pad_before: opt.PadBefore = None,
    pad_after: opt.PadAfter = None,
    no_fades: opt.NoFades = False,
    video_fades: opt.VideoFades = False,
    platform: opt.Platform = None,
    loudness: opt.Loudness = None,
    tighten: opt.Tighten = None,
    snap: opt.Snap = None,
    transcript: opt.Transcript = None,
    queue: Annotated[bool, typer.Option("--queue", help="Render through the workers (bulk queue) and wait.")] = False,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="List the quotes as read, each checked as the batch would; render nothing."),
    ] = False,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Render every quote of a file from one source, with shared options; a bad line does not stop the others.

    Exit 0 when every clip is there, 1 when any line failed, 2 when the file itself is unusable. With
    --dry-run: the quotes as read (number, line, start, end, caption), each checked as the batch would check it,
    no render, no Redis, no store; exit 1 when it lists a quote the batch would refuse."""
    opts = ClipOptions.given(ctx.params)
    setup_cli_logging(verbose)

    def go() -> None:
        from .batch import listed_quotes, run_batch

        if dry_run:
            listed = listed_quotes(quotes_file, source, opts, Settings.from_env())
            emit(
                {"quotes": listed, "count": len(listed)},
                as_json,
                "\n".join(
                    f"{q['number']}\tline {q['line']}\t{q['start'] or '-'}\t{q['end'] or '-'}\t"
                    + (json.dumps(q["caption"], ensure_ascii=False) if q["caption"] is not None else "-")
                    + (f"\t{q['error']}" if "error" in q else "")
                    for q in listed
                ),
            )
            refused = sum(1 for q in listed if "error" in q)
            if refused:  # a line a render would refuse: exit 1, as the render would
                typer.echo(f"quoteclip: {refused} of {len(listed)} quotes will be refused", err=True)
                raise typer.Exit(1)
            return

        settings = Settings.from_env()
        outcomes = run_batch(source, quotes_file, opts, settings, queue, lambda line: typer.echo(line, err=True))
        failed = sum(1 for o in outcomes if "error" in o)
        cached = sum(1 for o in outcomes if o.get("cached"))
        if as_json:
            emit({"clips": outcomes, "failed": failed}, True, "")
        else:
            for o in outcomes:  # the clips made; each failure was said once, on stderr, with its line
                if "error" not in o:
                    what = f"{'cached' if o.get('cached') else 'done'}: {o['link']}"
                    shape = f" {o['platform'] or o['profile']}" if opts.profiles or "," in (opts.platform or "") else ""
                    typer.echo(f"line {o['line']}{shape}: {what}")
        typer.echo(_summary(outcomes), err=True)  # with --json too
        if cached == len(outcomes):
            typer.echo(f"all {cached} clips were already stored: nothing was rendered", err=True)
        if failed:
            raise typer.Exit(1)

    run_guarded(go, as_json)


@app.command()
def demo(as_json: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """Render a demo clip offline: generates a 1080p sample source, then a 7 s captioned, branded quote."""
    setup_cli_logging(verbose)

    def go() -> None:
        from .demo import demo_source

        settings = Settings.from_env()
        source = demo_source(settings)
        size = source.stat().st_size / 1024**2
        typer.echo(f"quoteclip: demo: the sample source ({size:.0f} MB) is kept at {source}", err=True)
        typer.echo(f"quoteclip: demo: the clip is written under {settings.storage_dir.resolve()}", err=True)
        spec = build_spec(
            {
                "source": str(source),
                "start": "0:03.0",
                "end": "0:10.0",
                "caption": "This weird scheduling, which I'm quite sure people are going to start "
                "replicating it, is to reduce the bubble, the wastage.",
                "watermark": {"text": "StarZero"},
            },
            max_seconds=settings.max_clip_seconds,
        )
        render_and_print([spec], settings, as_json)

    run_guarded(go, as_json)


def _summary(outcomes: list[dict[str, Any]]) -> str:
    """``3 clips: 2 rendered, 1 already stored; 1 clip failed; 1 line not read as a quote``: clips and the file's
    lines counted apart (a line refused before any clip was made is no clip)."""
    lines = sum(1 for o in outcomes if "error" in o and "profile" not in o)
    clips_failed = sum(1 for o in outcomes if "error" in o) - lines
    cached = sum(1 for o in outcomes if o.get("cached"))
    made = len(outcomes) - lines - clips_failed
    said = f"{made} clips: {made - cached} rendered, {cached} already stored"
    if clips_failed:
        said += f"; {clips_failed} clip{'s' if clips_failed > 1 else ''} failed"
    if lines:
        said += f"; {lines} line{'s' if lines > 1 else ''} not read as a quote"
    return said
