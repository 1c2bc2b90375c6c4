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


def fail(code: int, message: str, as_json: bool = False) -> NoReturn:
    """The error on stderr (one line, then any detail indented) and, with ``--json``, as the one JSON object on
    stdout (``{"status": "failed", "error", "exit_code"}``), then the exit code."""
    if as_json:
        sys.stdout.write(json.dumps({"status": "failed", "error": message, "exit_code": code}) + "\n")
    first, *rest = message.splitlines() or [""]
    typer.echo(f"quoteclip: {first}", err=True)
    for line in rest:
        typer.echo(f"  {line}", err=True)
    raise typer.Exit(code)


def run_guarded(fn: Callable[[], Any], as_json: bool = False) -> Any:
    """Turn the project's errors into exit codes and readable lines; never a traceback."""
    try:
        return fn()
    except BadInput as exc:
        from sources.safety import HostUnresolved

        if isinstance(exc, HostUnresolved):  # the operator is told what a website's request is not (safety.py)
            unavailable = exc.unavailable()
            fail(1, f"{unavailable.kind}: {unavailable}", as_json)
        fail(2, f"{exc.kind}: {exc}", as_json)
    except QuoteclipError as exc:
        fail(1, f"{exc.kind}: {exc}", as_json)
    except KeyboardInterrupt:
        fail(130, "interrupted", as_json)
    except typer.Exit:
        raise
    except Exception as exc:  # the last line of defence: a readable reason instead of a traceback
        if os.environ.get("QUOTECLIP_DEBUG"):
            raise
        fail(1, f"internal error: {type(exc).__name__}: {exc}", as_json)


def run_command(command: typer.Typer, args: list[str], prog_name: str) -> int:
    """Run a typer app on ``args``; its usage errors (an unknown option, a value of the wrong type, a missing
    argument) are bad input, one line like every other error (exit 2), not click's box. Returns the exit code."""
    from typer.exceptions import TyperException  # the base of typer's own (click's) usage errors

    try:
        code = typer.main.get_command(command).main(args=args, prog_name=prog_name, standalone_mode=False)
    except typer.Abort:
        return 130
    except TyperException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # the bare command: its help
            typer.echo(exc.format_message())
            return 0
        ctx = getattr(exc, "ctx", None)
        where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
        try:
            fail(2, f"bad input: {exc.format_message()}{where}", "--json" in args)
        except typer.Exit as done:
            return done.exit_code
    return code if isinstance(code, int) else 0


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
