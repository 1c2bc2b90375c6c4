"""The demo page at ``/`` (a quote card with a download button, progress, a player and a form), the edit page
at ``/edit`` and the batch page at ``/batch``.

The pages hold the API key the user signed in with, so they are never framed and run no script but their own:
each is sent with a Content-Security-Policy that allows only this origin's scripts and styles and the page's own
inline ``<script>`` and ``<style>`` blocks by their SHA-256 hashes (computed here from the page as served, so an
injected script or style has no hash), media and images from this origin and the clip store, data calls to this
origin alone, and ``frame-ancestors 'none'``; with ``X-Frame-Options: DENY``, ``X-Content-Type-Options: nosniff``
and ``Referrer-Policy: no-referrer`` (a page's address names a source and a cut: never sent on).
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
from functools import lru_cache
from importlib import resources
from urllib.parse import SplitResult, urlsplit

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

from quoteclip.settings import Settings

from .deps import ServicesDep

router = APIRouter()

# What every page and its script are sent with, besides the policy.
HARDENING = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
INLINE = {kind: re.compile(rf"<{kind}>(.*?)</{kind}>", re.DOTALL) for kind in ("script", "style")}


@lru_cache(maxsize=4)
def _page(name: str = "page.html") -> str:
    return resources.files("api").joinpath(name).read_text(encoding="utf-8")


def _hashes(html: str, kind: str) -> str:
    """The CSP sources of a page's inline ``kind`` blocks (``<script>``/``<style>`` with no attributes)."""
    found = (hashlib.sha256(body.encode()).digest() for body in INLINE[kind].findall(html))
    return " ".join(f"'sha256-{base64.b64encode(digest).decode()}'" for digest in found)


def store_sources(settings: Settings) -> str:
    """Where a page's players and posters may load clips from besides this origin: the S3 store's public base, its
    endpoint (and the endpoint's subdomains, for virtual-hosted buckets) or AWS S3; a local store is served by
    this origin. A policy cannot name an IPv6 address (browsers ignore the source, and every clip is blocked): a
    store named by one gets its scheme alone."""
    if not settings.uses_s3:
        return ""
    if settings.public_base_url:
        return " ".join(_sources(urlsplit(settings.public_base_url), subdomains=False))
    if settings.s3_endpoint:
        return " ".join(_sources(urlsplit(settings.s3_endpoint), subdomains=True))
    return "https://*.amazonaws.com"


def _sources(url: SplitResult, subdomains: bool) -> list[str]:
    """A store URL's origin as policy sources: never its credentials or path; a name's subdomains when asked
    (an address has none)."""
    host = (url.hostname or "").lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if isinstance(address, ipaddress.IPv6Address):
        return [f"{url.scheme}:"]
    port = f":{url.port}" if url.port else ""
    origin = [f"{url.scheme}://{host}{port}"]
    return origin if address or not subdomains else [*origin, f"{url.scheme}://*.{host}{port}"]


def policy(html: str, settings: Settings) -> str:
    """The Content-Security-Policy of a page as served."""
    store = store_sources(settings)
    media = " ".join(filter(None, ("'self'", store)))
    return "; ".join(
        [
            "default-src 'none'",
            f"script-src 'self' {_hashes(html, 'script')}".rstrip(),
            f"style-src 'self' {_hashes(html, 'style')}".rstrip(),
            f"img-src {media} data:",
            f"media-src {media} blob:",
            "connect-src 'self'",
            "form-action 'self'",
            "base-uri 'none'",
            "object-src 'none'",
            "frame-ancestors 'none'",
        ]
    )


def _served(name: str, settings: Settings) -> HTMLResponse:
    html = _page(name)
    return HTMLResponse(html, headers={"Content-Security-Policy": policy(html, settings), **HARDENING})


@router.get("/pages.js", include_in_schema=False)
def pages_script() -> Response:
    """What the pages share: data calls with the key the user signed in with on the page."""
    return Response(_page("pages.js"), media_type="text/javascript", headers=HARDENING)


@router.get("/favicon.ico", include_in_schema=False)
def favicon() -> Response:
    return Response(status_code=204)


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def index(svc: ServicesDep) -> HTMLResponse:
    return _served("page.html", svc.settings)


@router.get("/edit", response_class=HTMLResponse, include_in_schema=False)
def edit(svc: ServicesDep) -> HTMLResponse:
    """The edit page: instant previews of a cut, nudged by a frame, 100 ms or a word, then the final render."""
    return _served("edit.html", svc.settings)


@router.get("/batch", response_class=HTMLResponse, include_in_schema=False)
def batch(svc: ServicesDep) -> HTMLResponse:
    """The batch page: one source, many quotes, several shapes; each clip's poster and download, then a ZIP."""
    return _served("batch.html", svc.settings)
