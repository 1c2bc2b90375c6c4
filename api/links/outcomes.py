"""What a signed link's request comes to: an ``Answer`` (the response, and the ``Outcome`` it is counted under in
/metrics, with the site key and variant), and the one error path.

Every error answer's response is built by ``error_response`` (``Cache-Control: no-store``, the links' CORS headers,
``{"detail": one line}``). A refusal (a link that is not ours, past its expiry, outside its key's scopes, naming a
clip the service cannot make, over its key's renders) is raised as ``Refused`` wherever it is decided, and answered
and counted in one place: the handler ``install`` puts on the app (api/links/routes.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fastapi.responses import JSONResponse, Response
from starlette.datastructures import MutableHeaders

from quoteclip.errors import BadInput, QuoteclipError

from .. import streams
from ..clips import RETRY_AFTER

NO_STORE = "no-store"
# Signed content is public by design: any page may read it (progress, frames drawn on a canvas).
CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Expose-Headers": (
        f"Accept-Ranges, Content-Length, Content-Range, ETag, Retry-After, {streams.CODECS}"
    ),
}
NOSNIFF = {"X-Content-Type-Options": "nosniff"}  # a clip, poster or captions is only what its type says
PREFLIGHT = {
    **CORS,
    "Access-Control-Allow-Methods": "GET, HEAD",
    "Access-Control-Allow-Headers": "Range, If-None-Match, If-Range, If-Modified-Since",
    "Access-Control-Max-Age": "86400",
}
LINKS = "/l/"
UNKNOWN = "unknown"  # the site a request is counted under before its link's signature held
NO_VARIANT = "-"  # the variant a request is counted under before its link's payload is read


class Outcome(StrEnum):
    """The ``outcome`` label of ``quoteclip_link_requests_total``."""

    STORED = "stored"  # answered from the store
    MADE = "made"  # captions, made from the spec
    RENDERED = "rendered"  # held until its render stored it
    STREAMED = "streamed"  # answered with the clip as it renders
    NOT_STORED = "not_stored"  # a HEAD of what is not stored (it never starts a render)
    REFUSED = "refused"  # 403: not one of ours as it stands, or outside its key's scopes
    EXPIRED = "expired"  # 410: past its expiry
    REVOKED = "revoked"  # 410: on the deny list (quoteclip revoke, DELETE /links/{hash})
    FAILED = "failed"  # 422: a clip the service cannot make (bad input, or its render failed for good)
    LIMITED = "limited"  # 429: its key's renders a minute are used up
    UNAVAILABLE = "unavailable"  # 503: the store or the queue failing, or still rendering at the hold's end


@dataclass(frozen=True)
class Answer:
    """A link request's response and what it is counted as (``outcome`` None: not counted, as a stream's playlist
    reloads and fragments are not)."""

    response: Response
    outcome: Outcome | None
    site: str = UNKNOWN
    variant: str = NO_VARIANT


def error_response(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """Every error answer to a link request: its one line, never cached, readable by any page."""
    return JSONResponse(
        {"detail": detail},
        status_code=status,
        headers={"Cache-Control": NO_STORE, **CORS, **NOSNIFF, **(headers or {})},
    )


class Refused(Exception):
    """A refusal, decided before any render: its status, its one line, its outcome, and the site key and variant it
    is counted under (``UNKNOWN``/``NO_VARIANT`` until the link's signature held)."""

    def __init__(
        self,
        status: int,
        detail: str,
        outcome: Outcome,
        headers: dict[str, str] | None = None,
        site: str = UNKNOWN,
        variant: str = NO_VARIANT,
    ) -> None:
        super().__init__(detail)
        self.status, self.detail, self.outcome, self.headers = status, detail, outcome, headers or {}
        self.site, self.variant = site, variant

    @classmethod
    def failing(cls, exc: QuoteclipError, site: str = UNKNOWN, variant: str = NO_VARIANT) -> Refused:
        """A project error met while answering: bad input (a link validly signed that the service cannot make,
        the queue's source rules, …) 422; anything else (the store or the queue failing) 503, try again later."""
        detail = f"{exc.kind}: {exc}".splitlines()[0]
        if isinstance(exc, BadInput):
            return cls(422, detail, Outcome.FAILED, site=site, variant=variant)
        return cls(503, detail, Outcome.UNAVAILABLE, {"Retry-After": RETRY_AFTER}, site, variant)

    def answer(self) -> Answer:
        return Answer(error_response(self.status, self.detail, self.headers), self.outcome, self.site, self.variant)


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]


class LinkHeaders:
    """The link headers on every answer under ``/l/``, whoever gave it (a route, a refusal, the app's Redis-away
    503, a 404 or 405, an uncaught error): the links' CORS headers, ``X-Content-Type-Options: nosniff``, and
    ``Cache-Control: no-store`` on any error;
    and a browser's CORS preflight (``OPTIONS``) answered here, 204, any origin. The app's outermost layer, so the
    API's own CORS settings (``QUOTECLIP_CORS_ORIGINS``) never narrow what signed links promise."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]], send: Any) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(LINKS):
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS":
            await Response(status_code=204, headers=PREFLIGHT)(scope, receive, send)
            return
        started = False

        async def headed(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(scope=message)
                headers.update({**CORS, **NOSNIFF})
                if message["status"] >= 400:
                    headers["Cache-Control"] = NO_STORE
            await send(message)

        try:
            await self.app(scope, receive, headed)
        except Exception:
            if started:
                raise
            await error_response(500, "the service failed answering this link; try again later")(scope, receive, send)
            raise
