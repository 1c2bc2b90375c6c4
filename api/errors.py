"""How the API answers errors: one line naming the field and value (as the CLI words it), and body limits."""

from __future__ import annotations

import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError as RedisReadOnly
from redis.exceptions import TimeoutError as RedisTimeout

from quoteclip.errors import BadInput, QuoteclipError
from quoteclip.spec import describe_errors

MAX_BODY = 256 * 1024
REDIS_RETRY_AFTER = "5"  # seconds a client waits before asking again while Redis is away (a restart, a failover)


class APIError(Exception):
    """An answer other than 2xx that a route decides on (404, 401, 429, …)."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers


def install(app: FastAPI) -> None:
    """The exception handlers: APIError as itself, bad input 422, other project errors 503, validation 422, Redis
    unreachable (or loading, or a read-only replica during a failover) 503 with ``Retry-After``."""

    async def _redis_away(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(
            {"detail": f"the queue is unavailable (Redis: {type(exc).__name__}); try again shortly"},
            status_code=503,
            headers={"Retry-After": REDIS_RETRY_AFTER},
        )

    for kind in (RedisConnectionError, RedisTimeout, RedisReadOnly):
        app.add_exception_handler(kind, _redis_away)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
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
            {
                "field": ".".join(str(p) for p in e["loc"] if p != "body") or _named_field(str(e["msg"])),
                "message": str(e["msg"]).removeprefix("Value error, "),
                "value": e.get("input"),
            }
            for e in exc.errors()
        ]
        detail = f"{BadInput.kind}: {describe_errors(exc.errors(), skip=('body',)) or 'the request body is invalid'}"
        return JSONResponse({"detail": detail, "errors": jsonable(errors)}, status_code=422)


def _named_field(message: str) -> str:
    """The field a check across fields names first ("end must be after start, …" is about ``end``)."""
    from quoteclip.spec import ClipSpec

    word = message.removeprefix("Value error, ").split(" ", 1)[0].rstrip(":,")
    return word if word in ClipSpec.model_fields else ""


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # NaN and Infinity are not JSON
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return repr(value)
