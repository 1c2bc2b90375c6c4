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
from typing import Annotated, Any, NoReturn

import typer

from .errors import BadInput, QuoteclipError
from .settings import Settings
from .spec import ClipSpec, WatermarkSpec, build_spec

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


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _emit(payload: dict[str, Any], as_json: bool, human: str) -> None:
    if as_json:
        sys.stdout.write(json.dumps(payload) + "\n")
    else:
        typer.echo(human)


def _spec_from_options(
    source: str,
    start: str,
    end: str,
    caption: str,
    watermark: str | None,
    watermark_position: str,
    watermark_opacity: float,
    watermark_size: float,
    font: str | None,
    caption_size: float,
    profile: str,
    fit: str,
    settings: Settings,
) -> ClipSpec:
    data: dict[str, Any] = {
        "source": source,
        "start": start,
        "end": end,
        "caption": caption,
        "font": font,
        "caption_size": caption_size,
        "profile": profile,
        "fit": fit,
    }
    if watermark:
        key = "logo" if watermark.lower().endswith(".png") else "text"
        data["watermark"] = {
            key: watermark,
            "position": watermark_position,
            "opacity": watermark_opacity,
            "size": watermark_size,
        }
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


# Options shared by the commands that take a clip spec.
StartOpt = Annotated[str, typer.Option("--start", help="Quote start: seconds, MM:SS(.fff) or HH:MM:SS(.fff).")]
EndOpt = Annotated[str, typer.Option("--end", help="Quote end, same forms as --start.")]
CaptionOpt = Annotated[str, typer.Option("--caption", help="The quote's text, burned in as a caption.")]
WatermarkOpt = Annotated[str | None, typer.Option("--watermark", help="Brand text (e.g. StarZero) or a PNG logo path.")]
WmPosOpt = Annotated[str, typer.Option("--watermark-position", help="top-left|top-right|bottom-left|bottom-right")]
WmOpacityOpt = Annotated[float, typer.Option("--watermark-opacity", help="0.05–1.0")]
WmSizeOpt = Annotated[float, typer.Option("--watermark-size", help="Mark height as a fraction of the frame.")]
FontOpt = Annotated[str | None, typer.Option("--font", help="A TTF/OTF file for caption and text mark.")]
CaptionSizeOpt = Annotated[float, typer.Option("--caption-size", help="Caption font size / frame height.")]
ProfileOpt = Annotated[str, typer.Option("--profile", help="landscape (1280x720) | vertical | square")]
FitOpt = Annotated[str, typer.Option("--fit", help="pad (black bars) | blur (blurred fill)")]

_DEFAULT_WM = WatermarkSpec(text="x")


def _clip_command(action: Callable[[ClipSpec, Settings, bool], None]) -> Callable[..., None]:
    """A command taking a clip spec from options; ``action`` does the rest (render inline, or enqueue)."""

    def command(
        source: Annotated[str, typer.Argument(help="A local path or an http(s) media URL.")],
        start: StartOpt,
        end: EndOpt,
        caption: CaptionOpt = "",
        watermark: WatermarkOpt = None,
        watermark_position: WmPosOpt = _DEFAULT_WM.position,
        watermark_opacity: WmOpacityOpt = _DEFAULT_WM.opacity,
        watermark_size: WmSizeOpt = _DEFAULT_WM.size,
        font: FontOpt = None,
        caption_size: CaptionSizeOpt = ClipSpec.model_fields["caption_size"].default,
        profile: ProfileOpt = "landscape",
        fit: FitOpt = "pad",
        as_json: JsonOpt = False,
        verbose: VerboseOpt = False,
    ) -> None:
        _setup_logging(verbose)

        def go() -> None:
            settings = Settings.from_env()
            spec = _spec_from_options(
                source, start, end, caption, watermark, watermark_position, watermark_opacity,
                watermark_size, font, caption_size, profile, fit, settings,
            )  # fmt: skip
            action(spec, settings, as_json)

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
    _setup_logging(False)

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
        from worker import run_worker, setup_logging

        setup_logging()
        run_worker(Settings.from_env(), burst=burst, name=name)

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
        from worker import setup_logging

        setup_logging()
        uvicorn.run(create_app(Settings.from_env()), host=host, port=port, log_config=None)

    run_guarded(go)


@app.command()
def demo(as_json: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """Render a demo clip offline: generates a 1080p sample source, then a 7 s captioned, branded quote."""
    _setup_logging(verbose)

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
