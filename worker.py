"""``python worker.py [--burst] [--name NAME]``: the same as ``quoteclip worker`` (the rq worker in
``jobs/worker.py``), for deployments that start a script rather than the console command."""

from __future__ import annotations

import argparse

from jobs.worker import run_worker
from quoteclip.errors import BadInput
from quoteclip.logs import setup_service_logging
from quoteclip.settings import Settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python worker.py", description=__doc__)
    parser.add_argument("--burst", action="store_true", help="exit when the queues are empty")
    parser.add_argument("--name", help="worker name (default: rq's)")
    parser.add_argument("--webhooks", action="store_true", help="deliver webhooks instead of rendering")
    args = parser.parse_args(argv)
    setup_service_logging()
    try:
        settings = Settings.from_env()
    except BadInput as exc:
        parser.exit(2, f"quoteclip: {exc.kind}: {exc}\n")
    run_worker(settings, burst=args.burst, name=args.name, webhooks=args.webhooks)


if __name__ == "__main__":
    main()
