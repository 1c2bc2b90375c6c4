"""The FastAPI app: routers for clips, operations and the page over shared services (settings, Redis, store)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from prometheus_client import CollectorRegistry

from jobs.metrics import QueueCollector
from jobs.pipeline.assets import MAX_FONT_BYTES
from jobs.queue import bulk_queue_name
from quoteclip.settings import Settings

from . import assets, batches, clips, errors, links, mcp, ops, page, previews, quotes
from .auth import BodyLimit, RequireKey
from .batches import MAX_BATCH_BODY
from .deps import open_services
from .errors import MAX_BODY
from .links.outcomes import LinkHeaders


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = (settings or Settings.from_env()).for_queue()
    svc = open_services(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        listening = asyncio.create_task(svc.events.listen())  # wakes status long-polls (api/events.py)
        try:
            async with contextlib.AsyncExitStack() as stack:
                if app.state.mcp_sessions is not None:  # the assistants' tools at /mcp (api/mcp.py)
                    await stack.enter_async_context(app.state.mcp_sessions())
                yield
        finally:
            listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listening
            await svc.hub.close()
            svc.finders.close()

    app = FastAPI(
        title="quoteclip",
        version="0.1.0",
        description="Exact-quote video clips, rendered on demand.",
        lifespan=lifespan,
    )
    app.state.services = svc
    app.state.registry = CollectorRegistry()
    app.state.registry.register(QueueCollector(svc.connection, (settings.queue_name, bulk_queue_name(settings))))
    # A request meets, outermost first: under /l/, the signed links' headers (api/links/outcomes.py: any origin,
    # preflights answered, no-store on errors); CORS (answers preflights, puts its headers on every answer, a 401
    # too; reads no body), the key (checked from the headers alone: a request without one is answered 401 or 429
    # and its body never read), the body limit (uploads' larger caps for keyed requests only; 256 KiB for the
    # public routes and signed links), then the routes. add_middleware puts each one outside those added before it.
    app.add_middleware(BodyLimit, limit=MAX_BODY, larger={"/assets": MAX_FONT_BYTES, "/batches": MAX_BATCH_BODY})
    app.add_middleware(RequireKey, settings=settings, failures=svc.limits)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "X-API-Key"],
        )
    app.add_middleware(LinkHeaders)  # outermost: every answer under /l/ has the links' headers, preflights too
    errors.install(app)
    links.install(app, settings)  # signed clip links and /embed.js, with site keys only (first: a crowd's requests
    # are matched against their routes before any other's)
    routers = (clips.router, previews.router, quotes.router, batches.router, assets.router, ops.router, page.router)
    for router in routers:
        app.include_router(router)
    assistants, app.state.mcp_sessions = mcp.mounted(app)  # with the mcp extra installed
    if assistants is not None:
        app.mount("/mcp", assistants)
    return app
