"""Commands that run the service: ``serve`` (the HTTP API and pages), ``up`` (the whole system on one machine)
and ``health`` (do Redis and the store answer; is page extraction ready)."""

import os
import sys
from typing import Annotated, Any

import typer

from quoteclip.errors import BadInput
from quoteclip.settings import Settings

from .app import app
from .common import JsonOpt, emit, run_guarded


def system_allocator() -> None:
    """Start this process again on the C library's allocator (``PYTHONMALLOC=malloc``), unless ``PYTHONMALLOC`` is
    set (an operator's choice is kept) or the system is not Linux: the API hands a crowd's memory back to the system
    once it has left (api/server.py), which Python's own allocator would keep in arenas that one object still
    holds. The same process (its id, its parent's death signal) runs the same command line again."""
    if "PYTHONMALLOC" in os.environ or not sys.platform.startswith("linux"):
        return
    os.environ["PYTHONMALLOC"] = "malloc"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
) -> None:
    """Run the HTTP API and the demo page (an ASGI app on uvicorn), with header and body deadlines, keep-alive and a
    cap on connections (QUOTECLIP_HEADER_TIMEOUT, _BODY_TIMEOUT, _KEEP_ALIVE, _MAX_CONNECTIONS)."""

    system_allocator()  # (started again on the C library's allocator, before the API is loaded)

    def go() -> None:
        import logging

        import uvicorn

        from api import create_app
        from api.auth import RedactSecrets
        from api.server import server_options, settle
        from quoteclip.logs import setup_service_logging

        setup_service_logging()
        for handler in logging.getLogger().handlers:  # uvicorn's access log too: no link token or key in a line
            handler.addFilter(RedactSecrets())
        settings = Settings.from_env()
        trusted = ",".join(settings.trusted_proxies)  # forwarded headers only from these (none by default)
        api = create_app(settings)
        settle(settings)  # (what the API made as it started, frozen: no collection walks it again)
        uvicorn.run(
            api,
            host=host,
            port=port,
            log_config=None,
            access_log=settings.access_log,
            proxy_headers=bool(trusted),
            forwarded_allow_ips=trusted or None,
            **server_options(settings),  # header and body deadlines, keep-alive, a cap on connections (api/server.py)
        )

    run_guarded(go)


@app.command()
def up(
    host: Annotated[str, typer.Option("--host", help="Address the API and page listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port of the API and page.")] = 8000,
    workers: Annotated[int | None, typer.Option("--workers", help="Worker processes (one per 2 cores).")] = None,
    redis: Annotated[
        str,
        typer.Option(
            "--redis", help="auto: QUOTECLIP_REDIS_URL if set, else an embedded server | embedded | a Redis URL"
        ),
    ] = "auto",
    dev: Annotated[
        bool,
        typer.Option("--dev", help="Allow local files and loopback sources (for trying it here; loopback bind only)."),
    ] = False,
) -> None:
    """Run the whole system on one machine: API, page and workers, with an embedded Redis unless one is named."""

    def go() -> None:
        from .up import default_workers, run

        if redis not in ("auto", "embedded") and "://" not in redis:
            raise BadInput(f"redis must be auto, embedded or a Redis URL, got {redis!r}")
        count = default_workers() if workers is None else workers
        code = run(Settings.from_env(), host, port, count, redis, dev)
        if code:
            raise typer.Exit(code)

    run_guarded(go)


@app.command("health")
def health(as_json: JsonOpt = False) -> None:
    """Check that Redis and the clip store answer and that this machine could render (free space on its temp and
    source cache folders, available memory, a working ffmpeg): exit 0, or 1 naming what does not. Lists the render
    workers that take no job and why; reports what page extraction needs (yt-dlp's version, the JavaScript
    runtime, the challenge solver), warning when one is missing.
    """

    def go() -> None:
        from jobs.connection import how_named
        from jobs.maintenance import machine_health, worker_states
        from jobs.queue import connect, health
        from quoteclip.redis_url import shown
        from sources.ytdlp import readiness
        from storage import open_storage

        settings = Settings.from_env()
        connection = connect(settings)
        body: dict[str, Any] = dict(health(connection, open_storage(settings)))
        # which Redis was checked (its password hidden): one run in another folder checks another
        body["redis_url"] = shown(settings.redis_url)
        fallback = " the unnamed fallback: set QUOTECLIP_REDIS_URL" if how_named(settings) is None else ""
        fault = machine_health(settings, run_ffmpeg=True)
        body["machine"] = "ok" if fault is None else f"{fault.reason}: {fault.detail}"
        if fault is not None:
            body["status"] = "degraded"
        states = worker_states(connection) if body["redis"] == "ok" else []
        sick = [s for s in states if s["state"] == "unhealthy"]
        body["workers"] = {
            "healthy": len(states) - len(sick),
            "unhealthy": [{k: s[k] for k in ("name", "host", "reason", "detail")} for s in sick],
        }
        body["extraction"] = readiness(settings.cookies_file, settings.extractor_args)
        for name, value in body["extraction"].items():
            if value.startswith(("missing", "bad")):
                typer.echo(
                    f"quoteclip: WARNING: {name} {value}: YouTube pages will give fewer formats or none "
                    "(yt-dlp falls back silently)",
                    err=True,
                )
        for state in sick:
            typer.echo(
                f"quoteclip: WARNING: worker {state['name']} on {state['host']} takes no job ({state['reason']}): "
                f"{state['detail']}",
                err=True,
            )
        workers = f"{len(states) - len(sick)} healthy, {len(sick)} unhealthy"
        human = {k: v for k, v in body.items() if k not in ("extraction", "workers", "redis_url")}
        human |= {"redis": f"{body['redis']} ({body['redis_url']}{',' if fallback else ''}{fallback})"}
        human |= {"workers": workers}
        emit(body, as_json, " ".join(f"{k}: {v}" for k, v in (human | body["extraction"]).items()))
        if body["status"] != "ok":
            raise typer.Exit(1)

    run_guarded(go, as_json)
