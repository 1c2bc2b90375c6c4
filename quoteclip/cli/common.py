"""What every command shares: exit codes and one-line errors, the ``--json``/``--verbose`` options, one JSON
object on stdout, and the progress bar on stderr.

Exit codes: 0 success, 2 bad input (one line naming the field and the value), 1 failure.
"""

import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any, NoReturn

import typer

from quoteclip.errors import BadInput, QuoteclipError

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Log progress to stderr.")]


def fail(code: int, message: str) -> NoReturn:
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
        fail(2, f"{exc.kind}: {exc}")
    except QuoteclipError as exc:
        fail(1, f"{exc.kind}: {exc}")
    except KeyboardInterrupt:
        fail(130, "interrupted")
    except typer.Exit:
        raise
    except Exception as exc:  # the last line of defence: a readable reason instead of a traceback
        if os.environ.get("QUOTECLIP_DEBUG"):
            raise
        fail(1, f"internal error: {type(exc).__name__}: {exc}")


def emit(payload: dict[str, Any], as_json: bool, human: str) -> None:
    if as_json:
        sys.stdout.write(json.dumps(payload) + "\n")
    else:
        typer.echo(human)


class Progress:
    """A progress bar on stderr when it is a terminal; stage lines in the log otherwise."""

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> "Progress":
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
