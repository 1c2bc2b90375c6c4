"""The FastAPI app: routers for clips, operations and the page over shared services (settings, Redis, store)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from prometheus_client import CollectorRegistry

from jobs.metrics import QueueCollector
from jobs.queue import bulk_queue_name, connect
from quoteclip.settings import Settings
from storage import open_storage

from . import clips, errors, ops, page
from .deps import Services


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = (settings or Settings.from_env()).for_queue()
    svc = Services(settings, connect(settings), open_storage(settings))
    app = FastAPI(title="quoteclip", version="0.1.0", description="Exact-quote video clips, rendered on demand.")
    app.state.services = svc
    app.state.registry = CollectorRegistry()
    app.state.registry.register(QueueCollector(svc.connection, (settings.queue_name, bulk_queue_name(settings))))
    app.add_middleware(errors.BodyLimit)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "X-API-Key"],
        )  # fmt: skip
    errors.install(app)
    for router in (clips.router, ops.router, page.router):
        app.include_router(router)
    return app
