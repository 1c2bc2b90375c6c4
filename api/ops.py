"""For operators: health and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from jobs.queue import health

from .deps import ServicesDep

router = APIRouter()


@router.get("/healthz")
def healthz(svc: ServicesDep) -> JSONResponse:
    body = health(svc.connection, svc.storage)
    return JSONResponse(body, status_code=200 if body["status"] == "ok" else 503)


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.registry), media_type=CONTENT_TYPE_LATEST)
