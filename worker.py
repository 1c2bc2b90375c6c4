"""The rq worker for quoteclip: ``python worker.py [--burst]`` is the same as ``quoteclip worker``."""

from __future__ import annotations

import logging
import sys

from rq import Queue, Worker, get_current_job

from jobs.queue import connect
from quoteclip.settings import Settings


class JobIdFilter(logging.Filter):
    """Puts the current job's id on every log line."""

    def filter(self, record: logging.LogRecord) -> bool:
        job = get_current_job()
        record.job_id = job.id if job is not None else "-"
        return True


def setup_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(JobIdFilter())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [%(job_id)s] %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def run_worker(settings: Settings, burst: bool = False, name: str | None = None) -> bool:
    """Run an rq worker on the clip queue until stopped (or, with ``burst``, until the queue is empty)."""
    import jobs.tasks  # noqa: F401  (imported once here, so each forked work-horse starts with it loaded)

    connection = connect(settings)
    queue = Queue(settings.queue_name, connection=connection)
    worker = Worker([queue], connection=connection, name=name)
    return bool(worker.work(burst=burst, logging_level="INFO", with_scheduler=True))


def main(argv: list[str] | None = None) -> None:
    from quoteclip.cli import app

    app(["worker", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()
