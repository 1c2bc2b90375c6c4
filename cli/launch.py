"""The ``quoteclip`` command's entry point. For ``quoteclip render`` it first forks the probe helper
(``renderer.prober``), while the process is one thread and a few modules, so that PyAV's import and the source's
probe run on another core beside the command's own imports; then it runs the command line (``cli.app``)."""

import sys


def main() -> None:
    if sys.argv[1:2] == ["render"]:
        from renderer import prober

        prober.start()
    from .app import main as command

    command()
