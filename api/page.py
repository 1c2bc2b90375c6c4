"""The demo page at ``/`` (a quote card with a download button, progress, a player and a form), the edit page
at ``/edit`` and the batch page at ``/batch``."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

router = APIRouter()


@lru_cache(maxsize=4)
def _page(name: str = "page.html") -> str:
    return resources.files("api").joinpath(name).read_text(encoding="utf-8")


@router.get("/pages.js", include_in_schema=False)
def pages_script() -> Response:
    """What the pages share: data calls with the key the user signed in with on the page."""
    return Response(_page("pages.js"), media_type="text/javascript")


@router.get("/favicon.ico", include_in_schema=False)
def favicon() -> Response:
    return Response(status_code=204)


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def index() -> HTMLResponse:
    return HTMLResponse(_page())


@router.get("/edit", response_class=HTMLResponse, include_in_schema=False)
def edit() -> HTMLResponse:
    """The edit page: instant previews of a cut, nudged by a frame, 100 ms or a word, then the final render."""
    return HTMLResponse(_page("edit.html"))


@router.get("/batch", response_class=HTMLResponse, include_in_schema=False)
def batch() -> HTMLResponse:
    """The batch page: one source, many quotes, several shapes; each clip's poster and download, then a ZIP."""
    return HTMLResponse(_page("batch.html"))
