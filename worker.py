"""``python worker.py [OPTIONS]``: exactly ``quoteclip worker`` (the same command, every option of it), for
deployments that start a script rather than the console command."""

import sys

import typer

from cli.common import run_command
from cli.queue import worker


def main(argv: list[str] | None = None) -> None:
    command = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
    command.command()(worker)
    sys.exit(run_command(command, sys.argv[1:] if argv is None else argv, "python worker.py"))


if __name__ == "__main__":
    main()
