"""Commands of the queue: ``status`` of a queued clip, ``cancel`` it, ``worker`` (what ``python worker.py`` runs)."""

from typing import Annotated, Any

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
    job_id: Annotated[str, typer.Argument(help="The id printed by enqueue (clip-…), or a batch's (batch-…).")],
    force: Annotated[
        bool, typer.Option("--force", help="Stop the render whoever else waits for it (other requests joined it).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Cancel a queued clip not yet stored: a waiting one never renders, a rendering one is stopped on its worker,
    and a clip rendered in pieces leaves none behind. A render that other requests joined goes on for them (this
    request withdrawn; --force stops it). A batch's id cancels each of its clips so. Exit 1 when there was nothing
    to cancel (the clip is stored: revoke its links instead; or it had failed)."""
    setup_cli_logging(False)

    def go() -> None:
        from jobs.cancel import cancel_batch, cancel_clip

        if job_id.startswith("batch-"):
            done = cancel_batch(job_id, Settings.from_env(), force=force)
            lines = [_canceled(c) for c in done["clips"]]
            emit(done, as_json, "\n".join(lines + [f"{job_id}: {done['canceled']} render(s) stopped"]))
            if not any(c["canceled"] or c["waiting"] for c in done["clips"]):
                raise typer.Exit(1)
            return
        body = cancel_clip(job_id, Settings.from_env(), force=force)
        emit(body, as_json, _canceled(body))
        if not body["canceled"] and not body["waiting"]:
            raise typer.Exit(1)

    run_guarded(go, as_json)


def _canceled(body: dict[str, Any]) -> str:
    job_id = body["job_id"]
    if body["canceled"]:
        return f"{job_id} canceled ({body['status']})"
    if body["waiting"]:
        left = body["waiting"]
        return f"{job_id}: this request withdrawn; {left} other(s) still wait for it: it renders on (--force stops it)"
    if body["status"] == "finished":
        return f"{job_id}: nothing to cancel: the clip is stored (revoke its links instead: quoteclip revoke)"
    return f"{job_id}: nothing to cancel: the job had {body['status']}"


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
