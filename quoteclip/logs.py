"""Logging set-up, in one place for every entry point: text lines by default, one JSON object a line with
``QUOTECLIP_LOG_FORMAT=json``; the current rq job's id on every line (``-`` outside a job)."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any


class JobIdFilter(logging.Filter):
    """Puts the current job's id on every log line."""

    def filter(self, record: logging.LogRecord) -> bool:
        from rq import get_current_job  # loaded already in a worker; the API and CLI import it anyway for jobs

        job = get_current_job()
        record.job_id = job.id if job is not None else "-"
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, job id, message, and any ``extra={"fields": {...}}``."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "job_id": getattr(record, "job_id", "-"),
            "message": record.getMessage(),
        }
        body.update(getattr(record, "fields", {}) or {})
        if record.exc_info:
            body["error"] = self.formatException(record.exc_info).splitlines()[-1]
        return json.dumps(body, default=str)


def setup_service_logging(level: int = logging.INFO, fmt: str | None = None) -> None:
    """For the worker and the API: job ids on every line, text or JSON (``QUOTECLIP_LOG_FORMAT``)."""
    from .settings import env_text  # loaded already in a worker and the API (Settings)

    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(JobIdFilter())
    if (fmt or env_text("QUOTECLIP_LOG_FORMAT") or "text").lower() == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [%(job_id)s] %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("rq.worker", "rq.job", "rq.scheduler"):  # rq's own lines go through the same handler
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


def setup_cli_logging(verbose: bool) -> None:
    """For inline commands: warnings only, or progress lines with ``-v``."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
