"""Commands of the queue: ``status`` of a queued clip, ``cancel`` it, ``worker`` (what ``python worker.py`` runs)."""

from typing import Annotated

import typer

from quoteclip.errors import BadInput
from quoteclip.logs import setup_cli_logging
from quoteclip.settings import Settings

from .app import app
from .common import JsonOpt, emit, run_guarded


@app.command()
def status(
    job_id: Annotated[str, typer.Argument(help="The id printed by enqueue.")],
    as_json: JsonOpt = False,
) -> None:
    """Show a queued clip's status, stage, progress, link (freshly signed) and error."""
    setup_cli_logging(False)

    def go() -> None:
        from jobs.queue import job_status

        settings = Settings.from_env()
        body = job_status(job_id, settings)
        if body["status"] == "unknown":  # say which Redis was asked: a status run from another folder asks another
            body["error"] = f"no such job (or it expired) in the Redis at {_shown(settings.redis_url)}"
        human = f"{body['job_id']} {body['status']} {body['stage']} {body['progress']}%"
        human += f" {body['link']}" if body.get("link") else ""
        human += f" error: {body['error']}" if body.get("error") else ""
        emit(body, as_json, human)
        if body["status"] == "unknown":
            raise typer.Exit(1)

    run_guarded(go, as_json)


@app.command()
def cancel(
    job_id: Annotated[str, typer.Argument(help="The id printed by enqueue.")],
    as_json: JsonOpt = False,
) -> None:
    """Cancel a queued clip not yet stored: a waiting one never renders, a rendering one is stopped on its worker,
    and a clip rendered in pieces leaves none behind. Exit 1 when there was nothing to cancel (the clip is stored:
    revoke its links instead; or it had failed)."""
    setup_cli_logging(False)

    def go() -> None:
        from jobs.cancel import cancel_clip

        body = cancel_clip(job_id, Settings.from_env())
        if body["canceled"]:
            human = f"{job_id} canceled ({body['status']})"
        elif body["status"] == "finished":
            human = f"{job_id}: nothing to cancel: the clip is stored (revoke its links instead: quoteclip revoke)"
        else:
            human = f"{job_id}: nothing to cancel: the job had {body['status']}"
        emit(body, as_json, human)
        if not body["canceled"]:
            raise typer.Exit(1)

    run_guarded(go, as_json)


def worker(
    burst: Annotated[bool, typer.Option("--burst", help="Exit when the queue is empty.")] = False,
    name: Annotated[str | None, typer.Option("--name", help="Worker name (default: rq's).")] = None,
    webhooks: Annotated[bool, typer.Option("--webhooks", help="Deliver webhooks instead of rendering.")] = False,
    clicks_only: Annotated[
        bool, typer.Option("--clicks-only", help="Render clicks only, never batch clips: a click never waits for one.")
    ] = False,
) -> None:
    """Run a queue worker (rq) that renders clips and stores them (local folder or S3)."""

    def go() -> None:
        from jobs.worker import run_worker
        from quoteclip.logs import setup_service_logging

        setup_service_logging()
        if webhooks and clicks_only:
            raise BadInput("--webhooks and --clicks-only: a webhook worker renders nothing; choose one")
        run_worker(Settings.from_env(), burst=burst, name=name, webhooks=webhooks, clicks_only=clicks_only)

    run_guarded(go)


app.command()(worker)


def _shown(url: str) -> str:
    """A Redis URL without its passwords (the servers' in the address, the sentinels' in the query)."""
    from quoteclip.redis_url import shown

    return shown(url)
