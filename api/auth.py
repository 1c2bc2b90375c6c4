"""Who may call the API. With ``QUOTECLIP_API_KEYS`` set, every route needs a key (``Authorization: Bearer KEY``
or ``X-API-Key``) except the public health check, signed clip links (``/l/…``, signed by a site key: api/links.py)
and the player card for them (``/embed.js``); the routes a browser opens from a link or a ``<video src>``
(``/clips/{id}/download``, ``/clips/{id}/file``) also take the signed, expiring ``?token=`` that the API's own
answers put in those URLs. Without keys the API is open (a site's own backend in front of it decides).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

from quoteclip.settings import Settings

PUBLIC = {"/healthz", "/favicon.ico", "/embed.js"}
SIGNED_LINKS = "/l/"  # signed clip links (api/links.py): the link's own signature is its credential
LINK_ROUTES = re.compile(r"\A/clips/clip-[0-9a-f]{32}/(download|file|captions\.vtt|poster\.jpg)\Z")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def link_secret(settings: Settings) -> bytes:
    """``QUOTECLIP_LINK_SECRET``, else one derived from the API keys (every API instance with the same keys
    signs alike)."""
    if settings.link_secret:
        return settings.link_secret.encode()
    return hashlib.sha256(("quoteclip-links\n" + "\n".join(sorted(settings.api_keys))).encode()).digest()


def sign_path(path: str, settings: Settings, now: float | None = None) -> str:
    """``path?token=<expiry>.<signature>``, valid for ``QUOTECLIP_LINK_TTL`` seconds; ``path`` as is without keys."""
    if not settings.api_keys:
        return path
    expires = int((time.time() if now is None else now) + settings.link_ttl)
    mac = hmac.new(link_secret(settings), f"{path}|{expires}".encode(), hashlib.sha256).hexdigest()[:40]
    return f"{path}?token={expires}.{mac}"


def token_valid(path: str, token: str, settings: Settings) -> bool:
    expires, _, mac = token.partition(".")
    if not expires.isdigit() or int(expires) < time.time():
        return False
    expected = hmac.new(link_secret(settings), f"{path}|{expires}".encode(), hashlib.sha256).hexdigest()[:40]
    return hmac.compare_digest(expected.encode(), mac.encode("utf-8", "replace"))


def given_key(headers: dict[bytes, bytes]) -> str:
    auth = headers.get(b"authorization", b"").decode("latin-1")
    if auth.startswith("Bearer "):
        return auth.removeprefix("Bearer ").strip()
    return headers.get(b"x-api-key", b"").decode("latin-1").strip()


def key_valid(key: str, settings: Settings) -> bool:
    return bool(key) and any(hmac.compare_digest(key.encode(), k.encode()) for k in settings.api_keys)


class RequireKey:
    """ASGI middleware: 401 for any route but the public ones without a valid key (or a valid link token)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.settings.api_keys or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)  # (CORS preflights carry no credentials by design)
            return
        path = scope["path"]
        headers = dict(scope["headers"])
        if path in PUBLIC or path.startswith(SIGNED_LINKS) or key_valid(given_key(headers), self.settings):
            await self.app(scope, receive, send)
            return
        if LINK_ROUTES.match(path):
            token = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0]
            if token_valid(path, token, self.settings):
                await self.app(scope, receive, send)
                return
        await _answer(send, 401, "a valid API key is required (Authorization: Bearer KEY or X-API-Key)")


class BodyLimit:
    """ASGI middleware: a body over ``limit`` bytes gets 413 as soon as it is seen, declared or streamed (chunked),
    before authentication and before anything parses it. At most ``limit`` bytes (and one chunk) are held."""

    def __init__(
        self, app: Callable[[Scope, Receive, Send], Awaitable[None]], limit: int, larger: dict[str, int] | None = None
    ) -> None:
        self.app = app
        self.limit = limit
        self.larger = larger or {}  # paths that take more (uploads)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        limit = self.larger.get(scope["path"], self.limit)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _answer(send, 413, f"request body over {limit} bytes")
            return
        held: list[Message] = []
        seen = 0
        while True:
            message = await receive()
            held.append(message)
            if message["type"] != "http.request":
                break
            seen += len(message.get("body", b""))
            if seen > limit:
                await _answer(send, 413, f"request body over {limit} bytes")
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return held.pop(0) if held else await receive()

        await self.app(scope, replay, send)


async def _answer(send: Send, status: int, detail: str) -> None:
    import json

    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
