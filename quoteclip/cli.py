"""The ``quoteclip`` command. ``--json`` prints exactly one JSON object on stdout; everything else goes to stderr.

Exit codes: 0 success, 2 bad input (one line naming the field and the value), 1 failure.
"""

# (no ``from __future__ import annotations`` here: typer would evaluate every command's annotations from strings
# on each call, about 4 ms of a cold render's start)
import json
import logging
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Annotated, Any, NoReturn

# pydantic looks for plugins in every installed distribution's metadata when the first model is built (tens of
# ms of each command's start-up); the command validates with plain models, so it skips them unless told otherwise
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import typer

from .errors import BadInput, QuoteclipError
from .logs import setup_cli_logging
from .options import (
    CaptionOpt,
    CaptionSizeOpt,
    ClipOptions,
    EncoderPresetOpt,
    EndOpt,
    FitOpt,
    FontOpt,
    NoFadesOpt,
    PadAfterOpt,
    PadBeforeOpt,
    ProfileOpt,
    ProfilesOpt,
    QualityOpt,
    StartOpt,
    StyleFileOpt,
    StyleOpt,
    TranscriptOpt,
    VideoFadesOpt,
    WatermarkOpt,
    WmOpacityOpt,
    WmPosOpt,
    WmSizeOpt,
    specs_from_options,
)
from .settings import Settings
from .spec import ClipSpec, build_spec

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Render exact-quote video clips with captions and a watermark, inline or through a queue.",
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Log progress to stderr.")]


def _fail(code: int, message: str) -> NoReturn:
    first, *rest = message.splitlines() or [""]
    typer.echo(f"quoteclip: {first}", err=True)
    for line in rest:
        typer.echo(f"  {line}", err=True)
    raise typer.Exit(code)


def run_guarded(fn: Callable[[], Any]) -> Any:
    """Turn the project's errors into exit codes and readable lines; never a traceback."""
    try:
        return fn()
    except BadInput as exc:
        _fail(2, f"{exc.kind}: {exc}")
    except QuoteclipError as exc:
        _fail(1, f"{exc.kind}: {exc}")
    except KeyboardInterrupt:
        _fail(130, "interrupted")
    except typer.Exit:
        raise
    except Exception as exc:  # the last line of defence: a readable reason instead of a traceback
        if os.environ.get("QUOTECLIP_DEBUG"):
            raise
        _fail(1, f"internal error: {type(exc).__name__}: {exc}")


def _emit(payload: dict[str, Any], as_json: bool, human: str) -> None:
    if as_json:
        sys.stdout.write(json.dumps(payload) + "\n")
    else:
        typer.echo(human)


class _Progress:
    """A progress bar on stderr when it is a terminal; stage lines in the log otherwise."""

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> "_Progress":
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("{task.description:<10}"),
                BarColumn(),
                TaskProgressColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task("starting", total=100)
        return self

    def __call__(self, stage: Any, percent: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=percent, description=str(stage))
        else:
            logging.getLogger("quoteclip").info("%s %d%%", stage, percent)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)


def _clip_command(action: Callable[[list[ClipSpec], Settings, bool], None]) -> Callable[..., None]:
    """A command taking a clip spec from options; ``action`` does the rest (render inline, or enqueue)."""

    def command(
        source: Annotated[str, typer.Argument(help="A local path, an http(s) media URL or a video page URL.")],
        start: StartOpt = None,
        end: EndOpt = None,
        caption: CaptionOpt = None,
        watermark: WatermarkOpt = None,
        watermark_position: WmPosOpt = None,
        watermark_opacity: WmOpacityOpt = None,
        watermark_size: WmSizeOpt = None,
        font: FontOpt = None,
        caption_size: CaptionSizeOpt = None,
        style: StyleOpt = None,
        style_file: StyleFileOpt = None,
        profile: ProfileOpt = None,
        profiles: ProfilesOpt = None,
        fit: FitOpt = None,
        quality: QualityOpt = None,
        encoder_preset: EncoderPresetOpt = None,
        pad_before: PadBeforeOpt = None,
        pad_after: PadAfterOpt = None,
        no_fades: NoFadesOpt = False,
        video_fades: VideoFadesOpt = False,
        transcript: TranscriptOpt = None,
        as_json: JsonOpt = False,
        verbose: VerboseOpt = False,
    ) -> None:
        setup_cli_logging(verbose)
        opts = ClipOptions(
            source=source,
            start=start,
            end=end,
            caption=caption,
            watermark=watermark,
            watermark_position=watermark_position,
            watermark_opacity=watermark_opacity,
            watermark_size=watermark_size,
            font=font,
            caption_size=caption_size,
            style=style,
            style_file=style_file,
            profile=profile,
            fit=fit,
            quality=quality,
            pad_before=pad_before,
            pad_after=pad_after,
            no_fades=no_fades,
            video_fades=video_fades,
            transcript=transcript,
            profiles=profiles,
            encoder_preset=encoder_preset,
        )

        def go() -> None:
            settings = Settings.from_env()
            action(specs_from_options(opts, settings), settings, as_json)

        run_guarded(go)

    return command


def _render_and_print(specs: list[ClipSpec], settings: Settings, as_json: bool) -> None:
    from jobs.pipeline.lookup import lookup
    from storage import open_storage

    storage = open_storage(settings)
    settings = settings.for_cli()
    found = [lookup(spec, settings, storage)[1] for spec in specs]  # stored clips answered without the renderer
    results = [r for r in found if r is not None]
    if len(results) < len(specs):
        from jobs.pipeline.produce import produce_clips

        progress: AbstractContextManager[Any] = _Progress() if not as_json or sys.stderr.isatty() else nullcontext()
        with progress as bar:
            results = produce_clips(specs, settings, storage, report=bar)
    if len(specs) == 1:
        result = results[0]
        _emit(result.to_json(), as_json, f"{'cached' if result.cached else 'rendered'}: {result.link}")
        return
    clips = [{**r.to_json(), "profile": s.profile} for s, r in zip(specs, results, strict=True)]
    lines = [
        f"{'cached' if r.cached else 'rendered'} {s.profile}: {r.link}" for s, r in zip(specs, results, strict=True)
    ]
    _emit({"clips": clips}, as_json, "\n".join(lines))


def _enqueue_and_print(specs: list[ClipSpec], settings: Settings, as_json: bool) -> None:
    from jobs.pipeline.assets import upload_paths
    from jobs.queue import enqueue_profiles
    from storage import open_storage

    storage = open_storage(settings)
    uploaded = [upload_paths(spec, storage) for spec in specs]  # local files uploaded first
    queued = enqueue_profiles(uploaded, settings, storage=storage)
    if len(specs) == 1:
        one = queued[0]
        _emit(one.to_json(), as_json, f"{one.job_id} {one.status}" + (f" {one.link}" if one.link else ""))
        return
    clips = [{**q.to_json(), "profile": s.profile} for s, q in zip(specs, queued, strict=True)]
    lines = [
        f"{q.job_id} {q.status} {s.profile}" + (f" {q.link}" if q.link else "")
        for s, q in zip(specs, queued, strict=True)
    ]
    _emit({"clips": clips}, as_json, "\n".join(lines))


app.command("render", help="Render one clip inline and store it (an identical call returns the stored clip).")(
    _clip_command(_render_and_print)
)
app.command("enqueue", help="Queue one clip for the workers; prints the job id at once.")(
    _clip_command(_enqueue_and_print)
)


@app.command("batch")
def batch_command(
    source: Annotated[str, typer.Argument(help="The episode: a local path, an http(s) media URL or a page URL.")],
    quotes_file: Annotated[str, typer.Argument(help="CSV with a header (start,end,caption), JSON or JSON lines.")],
    watermark: WatermarkOpt = None,
    watermark_position: WmPosOpt = None,
    watermark_opacity: WmOpacityOpt = None,
    watermark_size: WmSizeOpt = None,
    font: FontOpt = None,
    caption_size: CaptionSizeOpt = None,
    style: StyleOpt = None,
    style_file: StyleFileOpt = None,
    profile: ProfileOpt = None,
    profiles: ProfilesOpt = None,
    fit: FitOpt = None,
    quality: QualityOpt = None,
    encoder_preset: EncoderPresetOpt = None,
    pad_before: PadBeforeOpt = None,
    pad_after: PadAfterOpt = None,
    no_fades: NoFadesOpt = False,
    video_fades: VideoFadesOpt = False,
    transcript: TranscriptOpt = None,
    queue: Annotated[bool, typer.Option("--queue", help="Render through the workers (bulk queue) and wait.")] = False,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Render every quote of a file from one source, with shared options; a bad line does not stop the others.

    Exit 0 when every clip is there, 1 when any line failed, 2 when the file itself is unusable."""
    setup_cli_logging(verbose)
    shared = ClipOptions(
        source=source,
        watermark=watermark,
        watermark_position=watermark_position,
        watermark_opacity=watermark_opacity,
        watermark_size=watermark_size,
        font=font,
        caption_size=caption_size,
        style=style,
        style_file=style_file,
        profile=profile,
        fit=fit,
        quality=quality,
        pad_before=pad_before,
        pad_after=pad_after,
        no_fades=no_fades,
        video_fades=video_fades,
        transcript=transcript,
        profiles=profiles,
        encoder_preset=encoder_preset,
    )

    def go() -> None:
        from .batch import run_batch

        settings = Settings.from_env()
        outcomes = run_batch(source, quotes_file, shared, settings, queue, lambda line: typer.echo(line, err=True))
        failed = sum(1 for o in outcomes if "error" in o)
        cached = sum(1 for o in outcomes if o.get("cached"))
        if as_json:
            _emit({"clips": outcomes, "failed": failed}, True, "")
        else:
            for o in outcomes:
                what = (
                    f"failed: {o['error']}"
                    if "error" in o
                    else f"{'cached' if o.get('cached') else 'done'}: {o['link']}"
                )
                typer.echo(f"line {o['line']}{' ' + o['profile'] if profiles else ''}: {what}")
            made = len(outcomes) - failed - cached
            typer.echo(f"{len(outcomes)} clips: {made} rendered, {cached} already stored, {failed} failed", err=True)
        if cached == len(outcomes):
            typer.echo(f"all {cached} clips were already stored: nothing was rendered", err=True)
        if failed:
            raise typer.Exit(1)

    run_guarded(go)


@app.command()
def status(
    job_id: Annotated[str, typer.Argument(help="The id printed by enqueue.")],
    as_json: JsonOpt = False,
) -> None:
    """Show a queued clip's status, stage, progress, link (freshly signed) and error."""
    setup_cli_logging(False)

    def go() -> None:
        from jobs.queue import job_status

        body = job_status(job_id, Settings.from_env())
        human = f"{body['job_id']} {body['status']} {body['stage']} {body['progress']}%"
        human += f" {body['link']}" if body.get("link") else ""
        human += f" error: {body['error']}" if body.get("error") else ""
        _emit(body, as_json, human)
        if body["status"] == "unknown":
            raise typer.Exit(1)

    run_guarded(go)


@app.command()
def worker(
    burst: Annotated[bool, typer.Option("--burst", help="Exit when the queue is empty.")] = False,
    name: Annotated[str | None, typer.Option("--name", help="Worker name (default: rq's).")] = None,
    webhooks: Annotated[bool, typer.Option("--webhooks", help="Deliver webhooks instead of rendering.")] = False,
    clicks_only: Annotated[
        bool, typer.Option("--clicks-only", help="Render clicks only, never batch clips: a click never waits for one.")
    ] = False,
) -> None:
    """Run a queue worker (rq) that renders clips and stores them (local folder or S3)."""

    def go() -> None:
        from jobs.worker import run_worker

        from .logs import setup_service_logging

        setup_service_logging()
        if webhooks and clicks_only:
            raise BadInput("--webhooks and --clicks-only: a webhook worker renders nothing; choose one")
        run_worker(Settings.from_env(), burst=burst, name=name, webhooks=webhooks, clicks_only=clicks_only)

    run_guarded(go)


@app.command("align")
def align_command(
    transcript: Annotated[str, typer.Argument(help="A WebVTT, SRT or JSON word-list transcript.")],
    quote: Annotated[str, typer.Option("--quote", help="The quote's words.")],
    threshold: Annotated[float, typer.Option("--threshold", help="Lowest alignment score accepted.")] = 0.8,
    as_json: JsonOpt = False,
) -> None:
    """Find a quote in a transcript by its words: start, end, score and the words with their times."""

    def go() -> None:
        from .transcript import align, load_transcript

        found = align(quote, load_transcript(transcript), threshold)
        body = {
            "start": found.start,
            "end": found.end,
            "score": found.score,
            "words": [{"text": w.text, "start": w.start, "end": w.end} for w in found.words],
        }
        _emit(body, as_json, f"{found.start:.3f} {found.end:.3f} score {found.score:.2f}")

    run_guarded(go)


@app.command("health")
def health_command(as_json: JsonOpt = False) -> None:
    """Check that Redis and the clip store answer (exit 0), or say which does not (exit 1); report what page
    extraction needs (yt-dlp's version, the JavaScript runtime, the challenge solver), warning when one is missing.
    """

    def go() -> None:
        from jobs.queue import connect, health
        from sources.ytdlp import readiness
        from storage import open_storage

        settings = Settings.from_env()
        body: dict[str, Any] = dict(health(connect(settings), open_storage(settings)))
        body["extraction"] = readiness(settings.cookies_file, settings.extractor_args)
        for name, value in body["extraction"].items():
            if value.startswith(("missing", "bad")):
                typer.echo(
                    f"quoteclip: WARNING: {name} {value}: YouTube pages will give fewer formats or none "
                    "(yt-dlp falls back silently)",
                    err=True,
                )
        human = {k: v for k, v in body.items() if k != "extraction"} | body["extraction"]
        _emit(body, as_json, " ".join(f"{k}: {v}" for k, v in human.items()))
        if body["status"] != "ok":
            raise typer.Exit(1)

    run_guarded(go)


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
) -> None:
    """Run the HTTP API and the demo page (an ASGI app on uvicorn)."""

    def go() -> None:
        import uvicorn

        from api import create_app

        from .logs import setup_service_logging

        setup_service_logging()
        settings = Settings.from_env()
        trusted = ",".join(settings.trusted_proxies)  # forwarded headers only from these (none by default)
        uvicorn.run(
            create_app(settings),
            host=host,
            port=port,
            log_config=None,
            proxy_headers=bool(trusted),
            forwarded_allow_ips=trusted or None,
        )

    run_guarded(go)


@app.command()
def up(
    host: Annotated[str, typer.Option("--host", help="Address the API and page listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port of the API and page.")] = 8000,
    workers: Annotated[int | None, typer.Option("--workers", help="Worker processes (one per 2 cores).")] = None,
    redis: Annotated[
        str, typer.Option("--redis", help="auto: the configured or running Redis, else embedded | embedded")
    ] = "auto",
) -> None:
    """Run the whole system on one machine: API, page and workers, with an embedded Redis when none is around."""

    def go() -> None:
        from .up import default_workers, run

        if redis not in ("auto", "embedded"):
            raise BadInput(f"redis must be auto or embedded, got {redis!r}")
        count = default_workers() if workers is None else workers
        code = run(Settings.from_env(), host, port, count, redis)  # type: ignore[arg-type]
        if code:
            raise typer.Exit(code)

    run_guarded(go)


@app.command()
def demo(as_json: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """Render a demo clip offline: generates a 1080p sample source, then a 7 s captioned, branded quote."""
    setup_cli_logging(verbose)

    def go() -> None:
        from .demo import demo_source

        settings = Settings.from_env()
        source = demo_source(settings)
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
        _render_and_print([spec], settings, as_json)

    run_guarded(go)


# Commands that do one thing and end: once their answer is written, the process ends without the interpreter's
# teardown (freeing every module and object the render loaded, some 40 ms of a cold render; BENCHMARKS.md 8a).
# Everything they write is closed before they return (files, the store's fsynced writes, worker threads joined).
ONE_SHOT = {"render", "enqueue", "batch", "status", "align", "health"}


def main() -> None:
    try:
        app()
    except SystemExit as done:
        if sys.argv[1:2] and sys.argv[1] in ONE_SHOT:
            _end_now(done.code)
        raise


def _end_now(code: object) -> NoReturn:
    if code is not None and not isinstance(code, int):  # sys.exit("message"): printed, exit 1
        typer.echo(str(code), err=True)
        code = 1
    logging.shutdown()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a reader that went away: the answer is lost either way
        code = code or 1
    os._exit(code or 0)


if __name__ == "__main__":
    main()
