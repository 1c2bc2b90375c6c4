"""Who may call the API: ``RequireKey`` (API keys and link tokens), ``BodyLimit`` (body caps by admission) and
``RedactSecrets`` (no key or token in a log line). What a caller sees of them: docs/api.md#auth.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote_plus

from redis.exceptions import RedisError
from starlette.concurrency import run_in_threadpool

from quoteclip.settings import Settings

from .caps import client_of

log = logging.getLogger(__name__)

# With keys set, let in without one: these paths (any method), every signed clip link (its signature is its
# credential: api/links/), the page shells for GET and HEAD (they hold no data; the user signs in on the page), and
# any route's CORS preflight (OPTIONS). A clip's files a browser opens from a link also take a ``?token=``.
PUBLIC = {"/healthz", "/favicon.ico", "/embed.js"}
SIGNED_LINKS = "/l/"
PAGES = {"/", "/edit", "/batch", "/pages.js"}
PAGE_METHODS = {"GET", "HEAD"}
PREFLIGHT = "OPTIONS"
LINK_FILES = ("download", "file", "captions.vtt", "poster.jpg")
LINK_ROUTES = re.compile(r"\A/clips/clip-[0-9a-f]{32}/(" + "|".join(map(re.escape, LINK_FILES)) + r")\Z")
# How a request was let in, in its ASGI scope: "key" (a valid API key, no keys configured, or a CORS preflight, which
# sends no body) may send the larger bodies of uploads; "public" and "link" (a signed token) take the small cap only.
ADMITTED = "quoteclip.admitted"

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
    """Whether ``token`` is ``sign_path``'s for ``path`` and has not expired."""
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


class AuthFailures(Protocol):
    """Failed authentications counted per client address (api.deps.Limits): each answers ``Retry-After`` when the
    address is over its limit, else None."""

    def auth_blocked(self, address: str) -> str | None: ...

    def auth_failed(self, address: str) -> str | None: ...


class RequireKey:
    """ASGI middleware, with ``QUOTECLIP_API_KEYS`` set (else every request passes): a request the constants above
    do not let in needs a valid key, or on ``LINK_ROUTES`` a valid token for its path, else 401; such a request from
    a client address over its failed authentications is answered 429 whatever it carries. Decided from the headers
    alone, before any of the body is read; how it was let in is put in the scope (``ADMITTED``)."""

    def __init__(
        self, app: Callable[[Scope, Receive, Send], Awaitable[None]], settings: Settings, failures: AuthFailures
    ) -> None:
        self.app = app
        self.settings = settings
        self.failures = failures
        self.warned = -60.0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.settings.api_keys or scope["method"] == PREFLIGHT:
            scope[ADMITTED] = "key"  # (CORS preflights carry no credentials by design, and send no body)
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path in PUBLIC or path.startswith(SIGNED_LINKS) or (path in PAGES and scope["method"] in PAGE_METHODS):
            scope[ADMITTED] = "public"
            await self.app(scope, receive, send)
            return
        address = client_of((scope.get("client") or ("unknown", 0))[0])
        wait = await self._count(self.failures.auth_blocked, address)
        if wait is not None:
            await _answer(send, 429, "too many failed authentications from this address; try again later", wait)
            return
        if key_valid(given_key(dict(scope["headers"])), self.settings):
            scope[ADMITTED] = "key"
            await self.app(scope, receive, send)
            return
        if LINK_ROUTES.match(path):
            token = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0]
            if token_valid(path, token, self.settings):
                scope[ADMITTED] = "link"
                await self.app(scope, receive, send)
                return
        wait = await self._count(self.failures.auth_failed, address)
        if wait is not None:
            await _answer(send, 429, "too many failed authentications from this address; try again later", wait)
            return
        await _answer(send, 401, "a valid API key is required (Authorization: Bearer KEY or X-API-Key)")

    async def _count(self, check: Callable[[str], str | None], address: str) -> str | None:
        """``check`` of ``address`` run off the event loop; None when Redis fails (failures go uncounted, keys are
        still checked)."""
        try:
            return await run_in_threadpool(check, address)
        except RedisError as exc:
            if time.monotonic() - self.warned > 60:  # one line a minute, not one a request
                self.warned = time.monotonic()
                log.warning("failed authentications go uncounted while Redis is unreachable (%s)", type(exc).__name__)
            return None


class BodyLimit:
    """ASGI middleware for POST, PUT and PATCH: a body over its cap is answered 413 as soon as it is seen, declared
    or streamed, before anything parses it, holding at most the cap and one chunk. ``larger`` caps (by path) apply
    to requests let in by a key (``ADMITTED``: it runs after ``RequireKey``); any other takes ``limit``."""

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
        limit = self.larger.get(scope["path"], self.limit) if scope.get(ADMITTED) == "key" else self.limit
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


async def _answer(send: Send, status: int, detail: str, retry_after: str | None = None) -> None:
    """An answer given before the body is read: the connection is closed after it (the body is never read)."""
    import json

    body = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    if retry_after is not None:
        headers.append((b"retry-after", retry_after.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# Words that make a query parameter a credential, read in its decoded, lower-cased name (``?k%65y=`` is ``key``).
SECRET_WORDS = ("key", "token", "sig", "auth", "password", "secret", "credential")
QUERY_PARAM = re.compile(r"([?&])([^=&\s\"#]*)=([^&\s\"#]*)")
# A signed link's path: ``/l/<site>/<token>.<ext>`` (and its parts after it); the token is a credential while it lives.
LINK_PATH = re.compile(r"(/l/[^/\s\"?#]+/)([^/\s\"?#]+)")


def _param(found: re.Match[str]) -> str:
    name = unquote_plus(found.group(2)).lower()
    if any(word in name for word in SECRET_WORDS):
        return f"{found.group(1)}{found.group(2)}=[redacted]"
    return found.group(0)


def _link(found: re.Match[str]) -> str:
    token, dot, ext = found.group(2).rpartition(".")
    if not dot or not ext.isalnum() or len(ext) > 5:
        token, ext = found.group(2), ""
    return f"{found.group(1)}[link {_digest(token)}]" + (f".{ext}" if ext else "")


@functools.lru_cache(maxsize=1024)
def _digest(token: str) -> str:
    """A link token's short hash, kept for the tokens seen last: a crowd asking one link logs it a thousand times
    (twice a line). Only the tokens are kept, not the lines: each line names its client's port, and a crowd's lines
    kept would hold on to the memory it freed."""
    return hashlib.sha256(token.encode()).hexdigest()[:12]


def redact(text: str) -> str:
    """``text`` with every credential taken out: a signed link's token replaced by a short hash of it (its site and
    extension kept, so a line still says which link), and the value of every query parameter whose decoded name
    holds a credential word (SECRET_WORDS) replaced by ``[redacted]``."""
    return QUERY_PARAM.sub(_param, LINK_PATH.sub(_link, text))


class RedactSecrets(logging.Filter):
    """A log handler's filter: no line it writes carries a link token or a key from a URL (uvicorn's access log
    writes each request's path with its query)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned == message:
            return True
        if isinstance(record.msg, str) and isinstance(record.args, tuple):  # each part, keeping the record's shape
            record.msg = redact(record.msg)
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        if record.getMessage() != cleaned:
            record.msg, record.args = cleaned, None
        return True
