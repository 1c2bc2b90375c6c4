"""The ``quoteclip`` command. ``--json`` prints exactly one JSON object on stdout; everything else goes to stderr.

Exit codes: 0 success, 2 bad input (one line naming the field and the value), 1 failure.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from .errors import BadInput, QuoteclipError
from .logs import setup_cli_logging
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


BRAND_FIELDS = {"font", "caption_size", "style", "watermark", "profile", "fit", "quality", "fades", "video_fades",
                "pad_before", "pad_after"}  # fmt: skip


def load_brand_style(path: str) -> dict[str, Any]:
    """A brand style file: JSON with any of BRAND_FIELDS, reused across a batch of clips."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"style file not found: {path!r}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"style file cannot be read: {path!r} ({exc})") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"style file is not valid JSON: {path!r} ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise BadInput(f"style file must hold a JSON object, got {type(data).__name__}: {path!r}")
    unknown = sorted(set(data) - BRAND_FIELDS)
    if unknown:
        raise BadInput(f"style file has unknown fields {unknown} (allowed: {sorted(BRAND_FIELDS)}): {path!r}")
    return data


def _spec_from_options(opts: dict[str, Any], settings: Settings) -> ClipSpec:
    """Options → spec data: the brand style file first, explicit options over it, a transcript for the times."""
    data: dict[str, Any] = load_brand_style(opts["style_file"]) if opts.get("style_file") else {}
    data["source"] = opts["source"]
    for name in ("caption", "font", "caption_size", "profile", "fit", "quality", "pad_before", "pad_after"):
        if opts.get(name) is not None:
            data[name] = opts[name]
    if opts.get("no_fades"):
        data["fades"] = False
    if opts.get("video_fades"):
        data["video_fades"] = True
    if opts.get("style") is not None:
        data["style"] = {**data.get("style", {}), "preset": opts["style"]}
    if opts.get("watermark"):
        kind = "logo" if opts["watermark"].lower().endswith(".png") else "text"
        data["watermark"] = {kind: opts["watermark"]}
    if data.get("watermark"):
        for name in ("position", "opacity", "size"):
            if opts.get(f"watermark_{name}") is not None:
                data["watermark"] = {**data["watermark"], name: opts[f"watermark_{name}"]}
    if opts.get("transcript"):
        from .transcript import align, load_transcript, retime

        if not opts.get("caption"):
            raise BadInput("caption: give the quote's text with --caption to find it in the transcript")
        found = align(opts["caption"], load_transcript(opts["transcript"]))
        data["start"] = opts.get("start") if opts.get("start") is not None else found.start
        data["end"] = opts.get("end") if opts.get("end") is not None else found.end
        data["words"] = [{"text": w.text, "start": w.start, "end": w.end} for w in retime(opts["caption"], found.words)]
        logging.getLogger("quoteclip").info("quote found in the transcript, score %.2f", found.score)
    else:
        for name in ("start", "end"):
            if opts.get(name) is None:
                raise BadInput(f"{name}: required (or give --transcript and --caption to find the quote)")
            data[name] = opts[name]
    return build_spec(data, max_seconds=settings.max_clip_seconds)


class _Progress:
    """A progress bar on stderr when it is a terminal; stage lines in the log otherwise."""

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> _Progress:
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


# Options shared by the commands that take a clip spec (None: the spec's default, or the style file's).
StartOpt = Annotated[str | None, typer.Option("--start", help="Quote start: seconds, MM:SS(.fff) or HH:MM:SS(.fff).")]
EndOpt = Annotated[str | None, typer.Option("--end", help="Quote end, same forms as --start.")]
CaptionOpt = Annotated[str | None, typer.Option("--caption", help="The quote's text, burned in as captions.")]
WatermarkOpt = Annotated[str | None, typer.Option("--watermark", help="Brand text (e.g. StarZero) or a PNG logo path.")]
WmPosOpt = Annotated[
    str | None, typer.Option("--watermark-position", help="top-left|top-right|bottom-left|bottom-right")
]
WmOpacityOpt = Annotated[float | None, typer.Option("--watermark-opacity", help="0.05–1.0 (default 0.8)")]
WmSizeOpt = Annotated[float | None, typer.Option("--watermark-size", help="Mark height / the frame's short side.")]
FontOpt = Annotated[str | None, typer.Option("--font", help="A TTF/OTF file for captions and the text mark.")]
CaptionSizeOpt = Annotated[float | None, typer.Option("--caption-size", help="Font size / the frame's short side.")]
StyleOpt = Annotated[str | None, typer.Option("--style", help="clean | bold-outline | boxed | karaoke")]
StyleFileOpt = Annotated[str | None, typer.Option("--style-file", help="A brand style JSON file (see README).")]
ProfileOpt = Annotated[
    str | None, typer.Option("--profile", help="landscape (1280x720) | vertical | square | portrait")
]
FitOpt = Annotated[str | None, typer.Option("--fit", help="pad (bars) | blur (blurred fill) | center (crop)")]
QualityOpt = Annotated[str | None, typer.Option("--quality", help="final | preview (half size, fastest encode)")]
PadBeforeOpt = Annotated[float | None, typer.Option("--pad-before", help="Seconds of source before the quote.")]
PadAfterOpt = Annotated[float | None, typer.Option("--pad-after", help="Seconds of source after the quote.")]
NoFadesOpt = Annotated[bool, typer.Option("--no-fades", help="No 150 ms fade of the sound in and out.")]
VideoFadesOpt = Annotated[bool, typer.Option("--video-fades", help="Fade the picture from and to black too.")]
TranscriptOpt = Annotated[
    str | None,
    typer.Option("--transcript", help="A WebVTT/SRT/JSON transcript: find --caption in it for the times and words."),
]


def _clip_command(action: Callable[[ClipSpec, Settings, bool], None]) -> Callable[..., None]:
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
        fit: FitOpt = None,
        quality: QualityOpt = None,
        pad_before: PadBeforeOpt = None,
        pad_after: PadAfterOpt = None,
        no_fades: NoFadesOpt = False,
        video_fades: VideoFadesOpt = False,
        transcript: TranscriptOpt = None,
        as_json: JsonOpt = False,
        verbose: VerboseOpt = False,
    ) -> None:
        setup_cli_logging(verbose)
        opts = dict(locals())

        def go() -> None:
            settings = Settings.from_env()
            action(_spec_from_options(opts, settings), settings, as_json)

        run_guarded(go)

    return command


def _render_and_print(spec: ClipSpec, settings: Settings, as_json: bool) -> None:
    from jobs.pipeline import produce_clip
    from storage import open_storage

    storage = open_storage(settings)
    progress: AbstractContextManager[Any] = _Progress() if not as_json or sys.stderr.isatty() else nullcontext()
    with progress as bar:
        result = produce_clip(spec, settings.for_cli(), storage, report=bar)
    payload = result.to_json()
    _emit(payload, as_json, f"{'cached' if result.cached else 'rendered'}: {result.link}")


def _enqueue_and_print(spec: ClipSpec, settings: Settings, as_json: bool) -> None:
    from jobs.queue import enqueue_clip

    queued = enqueue_clip(spec, settings)
    _emit(queued.to_json(), as_json, f"{queued.job_id} {queued.status}" + (f" {queued.link}" if queued.link else ""))


app.command("render", help="Render one clip inline and store it (an identical call returns the stored clip).")(
    _clip_command(_render_and_print)
)
app.command("enqueue", help="Queue one clip for the workers; prints the job id at once.")(
    _clip_command(_enqueue_and_print)
)


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
) -> None:
    """Run a queue worker (rq) that renders clips and stores them (local folder or S3)."""

    def go() -> None:
        from jobs.worker import run_worker

        from .logs import setup_service_logging

        setup_service_logging()
        run_worker(Settings.from_env(), burst=burst, name=name)

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
        body = {"start": found.start, "end": found.end, "score": found.score,
                "words": [{"text": w.text, "start": w.start, "end": w.end} for w in found.words]}  # fmt: skip
        _emit(body, as_json, f"{found.start:.3f} {found.end:.3f} score {found.score:.2f}")

    run_guarded(go)


@app.command("health")
def health_command(as_json: JsonOpt = False) -> None:
    """Check that Redis and the clip store answer (exit 0), or say which does not (exit 1)."""

    def go() -> None:
        from jobs.queue import connect, health
        from storage import open_storage

        settings = Settings.from_env()
        body = health(connect(settings), open_storage(settings))
        _emit(body, as_json, " ".join(f"{k}: {v}" for k, v in body.items()))
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
        uvicorn.run(create_app(Settings.from_env()), host=host, port=port, log_config=None)

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
        _render_and_print(spec, settings, as_json)

    run_guarded(go)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
