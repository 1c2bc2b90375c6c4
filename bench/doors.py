"""The API behind other front doors than ``quoteclip serve``'s, for figure 17 (bench/frontdoor.py): the same app
(``api.create_app``) on uvicorn with its public settings only, and on Granian.

``python -m bench.doors --port P`` runs it on uvicorn: httptools, the event loop uvicorn picks (uvloop when it is
installed), its keep-alive, its ``limit_concurrency`` at the API's connection cap, its listening backlog, and the
forwarded address from 127.0.0.1 (the nginx in front of it); no class or name of uvicorn's own beside ``run``.
Granian imports ``bench.doors:app`` as a factory (``--factory``)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from quoteclip.settings import Settings


def app() -> Any:
    """The API as ``quoteclip serve`` makes it, from the environment's settings."""
    from api import create_app

    return create_app(Settings.from_env())


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m bench.doors", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    from api.auth import RedactSecrets
    from quoteclip.logs import setup_service_logging

    setup_service_logging()  # (its access log as `quoteclip serve` writes it, QUOTECLIP_ACCESS_LOG's: the same work)
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactSecrets())
    settings = Settings.from_env()
    uvicorn.run(
        app(),
        host="127.0.0.1",
        port=args.port,
        http="httptools",
        loop="auto",
        timeout_keep_alive=int(settings.keep_alive),
        limit_concurrency=settings.max_connections,
        backlog=max(128, min(4096, settings.max_connections)),
        proxy_headers=True,
        forwarded_allow_ips="127.0.0.1",
        log_config=None,
        access_log=settings.access_log,
    )


if __name__ == "__main__":
    main()
