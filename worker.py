"""``python worker.py [OPTIONS]``: exactly ``quoteclip worker`` (the same command, every option of it), for
deployments that start a script rather than the console command."""

import typer

from quoteclip.cli.queue import worker


def main(argv: list[str] | None = None) -> None:
    command = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    command.command()(worker)
    command(args=argv, prog_name="python worker.py")


if __name__ == "__main__":
    main()
