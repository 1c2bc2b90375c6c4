"""FastAPI app over the queue. Identical requests share one job; finished clips answer with a fresh link."""

from __future__ import annotations

import hmac
import logging
import time
from importlib import resources
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ConfigDict, Field
from redis import Redis
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint

from jobs.metrics import QueueCollector
from jobs.queue import JOB_ID, bulk_queue_name, connect, enqueue_clip, health, job_status
from quoteclip import redis_keys
from quoteclip.errors import BadInput, QuoteclipError
from quoteclip.settings import Settings
from quoteclip.spec import ClipSpec, build_spec, describe_errors
from storage import LocalStorage, Storage, open_storage

log = logging.getLogger(__name__)

MAX_BODY = 256 * 1024
MAX_BATCH = 100
RETRY_AFTER = "2"


class ClipRequest(ClipSpec):
    """A clip spec, plus where to POST when it is done."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    callback_url: str | None = Field(default=None, max_length=2048)


class Quote(BaseModel):
    model_config = ConfigDict(extra="forbid")
    start: float | str
    end: float | str
    caption: str = ""


class BatchRequest(BaseModel):
    """One source, many quotes; every other field applies to each clip."""

    model_config = ConfigDict(extra="allow")
    source: str
    quotes: list[Quote] = Field(min_length=1, max_length=MAX_BATCH)
    callback_url: str | None = Field(default=None, max_length=2048)


class ClipAccepted(BaseModel):
    id: str
    status: str
    status_url: str
    download_url: str
    link: str | None = None
    cached: bool = False


class ClipStatus(BaseModel):
    id: str
    status: str
    stage: str | None
    progress: int
    link: str | None
    error: str | None


class BodyLimit(BaseHTTPMiddleware):
    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
            return JSONResponse({"detail": f"request body over {MAX_BODY} bytes"}, status_code=413)
        if request.method in ("POST", "PUT") and length is None:
            body = await request.body()
            if len(body) > MAX_BODY:
                return JSONResponse({"detail": f"request body over {MAX_BODY} bytes"}, status_code=413)
        return await call_next(request)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = (settings or Settings.from_env()).for_queue()
    connection: Redis = connect(settings)
    storage: Storage = open_storage(settings)
    app = FastAPI(title="quoteclip", version="0.1.0", description="Exact-quote video clips, rendered on demand.")
    app.add_middleware(BodyLimit)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "X-API-Key"],
        )  # fmt: skip

    def link_for(job_id: str, link: str | None) -> str | None:
        """Local-folder links are file:// URIs a browser cannot open: serve them through the API instead."""
        if link and isinstance(storage, LocalStorage):
            return f"/clips/{job_id}/file"
        return link

    def client_key(request: Request) -> str:
        header = request.headers.get("authorization", "")
        given = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else ""
        given = given or request.headers.get("x-api-key", "")
        if settings.api_keys:
            if not any(hmac.compare_digest(given.encode(), key.encode()) for key in settings.api_keys):
                raise _HTTPError(401, "a valid API key is required (Authorization: Bearer KEY or X-API-Key)")
            return "key:" + given[-6:]
        return "ip:" + (request.client.host if request.client else "unknown")

    def rate_limited(request: Request) -> str:
        who = client_key(request)
        window = int(time.time() // 60)
        key = redis_keys.rate(who, window)
        count = connection.incr(key)
        if count == 1:
            connection.expire(key, 120)
        if int(count) > settings.rate_limit_per_minute:
            raise _HTTPError(429, f"over {settings.rate_limit_per_minute} requests a minute", {"Retry-After": "60"})
        return who

    @app.exception_handler(_HTTPError)
    async def _http_error(request: Request, exc: _HTTPError) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(BadInput)
    async def _bad_input(request: Request, exc: BadInput) -> JSONResponse:
        return JSONResponse({"detail": f"{exc.kind}: {exc}"}, status_code=422)

    @app.exception_handler(QuoteclipError)
    async def _failure(request: Request, exc: QuoteclipError) -> JSONResponse:
        return JSONResponse({"detail": f"{exc.kind}: {exc}".splitlines()[0]}, status_code=503)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        """The same one-line message as the CLI's (field named, value shown, no validator prefixes)."""
        errors = [
            {"field": ".".join(str(p) for p in e["loc"] if p != "body"),
             "message": str(e["msg"]).removeprefix("Value error, "), "value": e.get("input")}
            for e in exc.errors()
        ]  # fmt: skip
        detail = f"{BadInput.kind}: {describe_errors(exc.errors(), skip=('body',)) or 'the request body is invalid'}"
        return JSONResponse({"detail": detail, "errors": jsonable(errors)}, status_code=422)

    def accepted(spec: ClipSpec, callback_url: str | None, bulk: bool = False) -> tuple[ClipAccepted, int]:
        queued = enqueue_clip(spec, settings, connection, storage, callback_url=callback_url, bulk=bulk)
        body = ClipAccepted(
            id=queued.job_id, status=queued.status, status_url=f"/clips/{queued.job_id}",
            download_url=f"/clips/{queued.job_id}/download", link=link_for(queued.job_id, queued.link),
            cached=queued.link is not None,
        )  # fmt: skip
        return body, 200 if queued.link else 202

    @app.post("/clips", response_model=ClipAccepted, responses={200: {"model": ClipAccepted}, 422: {}, 429: {}})
    def create_clip(request: ClipRequest, _: str = Depends(rate_limited)) -> JSONResponse:
        """Render a clip (or find it). 200 with the link when stored; 202 with the job's id otherwise."""
        data = request.model_dump(exclude={"callback_url"})
        spec = build_spec(data, max_seconds=settings.max_clip_seconds)
        body, status = accepted(spec, request.callback_url)
        return JSONResponse(body.model_dump(), status_code=status)

    @app.post("/batches", responses={422: {}, 429: {}})
    def create_batch(request: BatchRequest, _: str = Depends(rate_limited)) -> dict[str, Any]:
        """One source, many quotes: one id per clip (identical quotes share one), queued behind on-demand clips."""
        common = {k: v for k, v in (request.model_extra or {}).items()}
        specs = []
        for i, quote in enumerate(request.quotes):
            data = {**common, "source": request.source, **quote.model_dump()}
            try:
                specs.append(build_spec(data, max_seconds=settings.max_clip_seconds))
            except BadInput as exc:
                raise BadInput(f"quotes[{i}].{exc}") from None
        clips = [accepted(spec, request.callback_url, bulk=True)[0].model_dump() for spec in specs]
        return {"clips": clips}

    @app.get("/clips/{clip_id}", response_model=ClipStatus, responses={404: {}})
    def get_clip(clip_id: str) -> ClipStatus:
        body = _status(clip_id)
        return ClipStatus(
            id=clip_id, status=body["status"], stage=body["stage"], progress=body["progress"],
            link=link_for(clip_id, body["link"]), error=body["error"],
        )  # fmt: skip

    @app.get("/clips/{clip_id}/download", responses={302: {}, 202: {}, 404: {}, 410: {}})
    def download(clip_id: str) -> Response:
        """For a plain <a href>: 302 to the clip when ready, 202 + Retry-After while rendering, 410 if failed."""
        body = _status(clip_id)
        if body["status"] == "finished":
            return RedirectResponse(str(link_for(clip_id, body["link"])), status_code=302)
        if body["status"] in ("failed", "stopped", "canceled"):
            return JSONResponse({"detail": body["error"] or "failed"}, status_code=410)
        return JSONResponse(
            {"status": body["status"], "stage": body["stage"], "progress": body["progress"]},
            status_code=202, headers={"Retry-After": RETRY_AFTER},
        )  # fmt: skip

    @app.get("/clips/{clip_id}/file", include_in_schema=False)
    def local_file(clip_id: str) -> Response:
        match = JOB_ID.match(clip_id)
        if not match or not isinstance(storage, LocalStorage) or storage.stat(match.group(1)) is None:
            return JSONResponse({"detail": "no such clip"}, status_code=404)
        meta = storage.stat(match.group(1)) or {}
        path = storage.local_path(match.group(1))
        assert path is not None
        return FileResponse(path, media_type="video/mp4", filename=meta.get("filename", "clip.mp4"),
                            content_disposition_type="inline")  # fmt: skip

    def _status(clip_id: str) -> dict[str, Any]:
        if not JOB_ID.match(clip_id):
            raise _HTTPError(404, f"no such clip: {clip_id[:80]!r}")
        body = job_status(clip_id, settings, connection, storage)
        if body["status"] == "unknown":
            raise _HTTPError(404, "no such clip (or it expired)")
        return body

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        body = health(connection, storage)
        return JSONResponse(body, status_code=200 if body["status"] == "ok" else 503)

    registry = CollectorRegistry()
    registry.register(QueueCollector(connection, (settings.queue_name, bulk_queue_name(settings))))

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    page = resources.files("api").joinpath("page.html").read_text(encoding="utf-8")

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(status_code=204)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index() -> HTMLResponse:
        return HTMLResponse(page)

    return app


class _HTTPError(Exception):
    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return repr(value)
