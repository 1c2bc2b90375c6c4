"""The demo page at ``/``: a quote card with a download button, progress, a preview player and a form."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

router = APIRouter()


@lru_cache(maxsize=1)
def _page() -> str:
    return resources.files("api").joinpath("page.html").read_text(encoding="utf-8")


@router.get("/favicon.ico", include_in_schema=False)
def favicon() -> Response:
    return Response(status_code=204)


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def index() -> HTMLResponse:
    return HTMLResponse(_page())
