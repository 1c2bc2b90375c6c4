"""The ``quoteclip`` command. ``--json`` prints exactly one JSON object on stdout; everything else goes to stderr.

Each command is declared in the module of its group (``COMMANDS``); ``main`` loads only the module of the command
being run, so a cold ``quoteclip render`` imports nothing the service commands need. ``--help`` and an unknown
command load them all.
"""

# (no ``from __future__ import annotations`` in the command modules: typer would evaluate every command's
# annotations from strings on each call, about 4 ms of a cold render's start)
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

# pydantic looks for plugins in every installed distribution's metadata when the first model is built (tens of
# ms of each command's start-up); the command validates with plain models, so it skips them unless told otherwise
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help text (every choice shown, no boxes), errors as one line (common.run_command)
    context_settings={"max_content_width": 120},  # help as wide as the terminal, up to 120 columns
    help="Render exact-quote video clips with captions and a watermark, inline or through a queue.",
)


@app.callback()
def _commands() -> None:
    # A group even when only one command's module is loaded (typer would otherwise run that command bare).
    pass


# Each command → the module that declares it, in the order ``--help`` lists them.
COMMANDS = {
    "render": "clips",
    "enqueue": "clips",
    "batch": "clips",
    "demo": "clips",
    "status": "queue",
    "cancel": "queue",
    "worker": "queue",
    "serve": "service",
    "up": "service",
    "health": "service",
    "align": "align",
    "sign": "sign",
    "revoke": "revoke",
    "mcp": "mcp",
    "check": "check",
}

# Commands that do one thing and end: once their answer is written, the process ends without the interpreter's
# teardown (freeing every module and object the render loaded, some 40 ms): a script asking for its quotes' clips
# one command at a time gets each stored clip's answer (about 0.12 s) a third sooner.
# Everything they write is closed before they return (files, the store's fsynced writes, worker threads joined).
ONE_SHOT = {"render", "enqueue", "batch", "status", "cancel", "align", "health", "sign", "revoke", "check"}


def load_commands(args: Sequence[str]) -> None:
    """Declare the command named by ``args`` (its module only), or every command when it names none we know."""
    wanted = COMMANDS.get(args[0]) if args else None
    for module in dict.fromkeys(COMMANDS.values()):
        if wanted is None or module == wanted:
            importlib.import_module(f"{__package__}.{module}")


def main() -> None:
    from .common import run_command

    args = sys.argv[1:]
    load_commands(args)
    try:
        code = run_command(app, args, "quoteclip")
    except SystemExit as done:  # a command that exits by itself (sys.exit in a library it calls)
        code = done.code  # type: ignore[assignment]
    if args[:1] and args[0] in ONE_SHOT:
        _end_now(code)
    sys.exit(code)


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
