"""The link routes: ``GET``/``HEAD /l/{key id}/{link}`` and a clip link's HLS parts ``GET /l/{key id}/{link}/{part}``,
each answered from a verified link (``verified_link``, called by the route itself: FastAPI's dependency injection
cost a fifth of a part request's time) and counted once in /metrics (``answered``); ``refused``, the app's
handler of ``Refused``, answers and counts every refusal; anything else under ``/l/`` a 404 (no redirect);
``/embed.js``, the player card.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..deps import Services
from . import metrics
from .cache import embed_response
from .hold import link_answer, part_answer
from .outcomes import Answer, Refused, error_response
from .verify import link_part, verified_link

router = APIRouter()


@router.api_route("/l/{key_id}/{name}", methods=["GET", "HEAD"], include_in_schema=False)
async def signed_link(request: Request) -> Response:
    """A signed link's clip, download, poster or captions (see api/links/__init__.py and docs/websites.md)."""
    svc: Services = request.app.state.services
    linked = await verified_link(request, svc)
    return await answered(svc, await link_answer(request, svc, linked))


@router.get("/l/{key_id}/{name}/{part}", include_in_schema=False)
async def signed_link_part(request: Request) -> Response:
    """A clip link's HLS stream while it renders: ``…/index.m3u8``, ``…/init.mp4`` and ``…/N.m4s``. The link's
    signature covers them: the link is verified as a whole, its sub-resource named after it (docs/websites.md)."""
    part = link_part(request.path_params["part"])  # (404 for anything else, before the link is read)
    svc: Services = request.app.state.services
    linked = await verified_link(request, svc)
    return await answered(svc, await part_answer(request, svc, linked, part))


@router.api_route("/l/{rest:path}", methods=["GET", "HEAD"], include_in_schema=False)
def not_a_link(rest: str) -> Response:
    """Anything else under /l/ (a link with a trailing slash, a name after a part): 404, never cached. Without it
    Starlette's ``redirect_slashes`` would answer ``…/link.mp4/`` with a redirect built from the Host header."""
    return error_response(404, "Not Found")


@router.get("/embed.js", include_in_schema=False)
def embed(request: Request) -> Response:
    """The ``<quote-clip>`` web component (api/embed.js): a player card for signed links, for any page."""
    return embed_response(request)


async def refused(request: Request, exc: Exception) -> Response:
    """Every refusal of a link request, wherever it was decided (verification, the first answer)."""
    assert isinstance(exc, Refused)
    svc: Services = request.app.state.services
    return await answered(svc, exc.answer())


async def answered(svc: Services, answer: Answer) -> Response:
    """The one place a link request is counted, under its answer's outcome."""
    metrics.count(svc.connection, answer)  # (in memory: added in Redis by a timer)
    return answer.response
