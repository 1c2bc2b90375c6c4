"""Redis URLs and the one place Redis clients are made from them.

Two forms: a server's own address (``redis://``, ``rediss://``, ``unix://``, as redis-py reads them), or a
Sentinel set's, ``redis+sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT…]/SERVICE_NAME[/DB]``: the sentinels to
ask and the name of the primary they watch. A client of the second form asks the sentinels for the primary's
address whenever it connects, so after a failover its next connection reaches the new primary (a connection to a
primary that went away fails; one to a primary demoted to a replica fails on its first write). The URL's user and
password are the Redis servers'; sentinels that have a password of their own take it as
``?sentinel_password=…``.

``check`` validates a URL's text (settings call it for every Redis URL variable); ``client`` and ``async_client``
make a client of either form. Nothing here imports redis until a client is made."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from .errors import BadInput

if TYPE_CHECKING:
    from redis import Redis
    from redis.asyncio import Redis as AsyncRedis

SENTINEL_SCHEME = "redis+sentinel"
SERVER_SCHEMES = ("redis", "rediss", "unix")
# Seconds a client waits on one sentinel (to connect, then for its answer) before asking the next: sentinels
# answer from memory, so a silent one is a dead one.
SENTINEL_TIMEOUT = 1.0
FORM = "redis+sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT…]/SERVICE_NAME[/DB]"
EXAMPLE = "redis+sentinel://sentinel-1:26379,sentinel-2:26379/mymaster/0"


@dataclass(frozen=True)
class SentinelURL:
    """A ``redis+sentinel://`` URL, read: the sentinels' addresses, the primary's service name and database, and
    the passwords (the servers', the sentinels')."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None


def shown(text: str) -> str:
    """The URL as a message may quote it: its password and its options (a sentinel password) left out. Whatever
    precedes the last ``@`` is taken for credentials, a ``/`` or ``?`` in them (a password not percent-encoded)
    included, so no part of a password is shown."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    _, at, tail = rest.rpartition("@")
    kept = f"***@{tail}" if at else rest
    return f"{scheme}{sep}{kept.partition('?')[0]}"[:120]


_shown = shown


def parse_sentinel(text: str, name: str) -> SentinelURL:
    """Read a ``redis+sentinel://`` URL; BadInput naming ``name`` and what is wrong (the password never shown)."""
    shown = _shown(text)

    def bad(reason: str) -> BadInput:
        return BadInput(f"{name} must be {FORM}: {reason}")

    try:
        parts = urlsplit(text)
    except ValueError:
        raise bad(f"{shown!r} is not a URL") from None
    if parts.fragment:
        raise bad(f"{shown!r} has a #fragment")
    auth, at, hosts = parts.netloc.rpartition("@")
    if not at:
        auth, hosts = "", parts.netloc
    username, colon, password = auth.partition(":")
    if auth and not colon:
        raise bad(f"{shown!r} has a user without a password: write :PASSWORD@ or USER:PASSWORD@")
    sentinels = []
    for item in hosts.split(","):
        host, sep, port = item.strip().rpartition(":")
        host = host.strip("[]")  # an IPv6 address in brackets
        if not item.strip():
            raise bad(f"{shown!r} has an empty sentinel address")
        if not sep or not host:
            raise bad(f"sentinel {item.strip()[:60]!r} is not HOST:PORT")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise bad(f"sentinel {item.strip()[:60]!r} has no port number (1-65535)")
        sentinels.append((host, int(port)))
    path = parts.path.removeprefix("/").removesuffix("/").split("/")  # a trailing slash allowed
    if not path[0]:
        raise bad(f"{shown!r} names no SERVICE_NAME, the primary's name the sentinels monitor")
    if len(path) > 2:
        raise bad(f"{shown!r} has more than /SERVICE_NAME/DB in its path")
    db = 0
    if len(path) == 2:
        if not path[1].isdigit():
            raise bad(f"its database must be a number, got {path[1][:20]!r}")
        db = int(path[1])
    options = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(options) - {"sentinel_password"})
    if unknown:
        raise bad(f"its only option is ?sentinel_password=, got {', '.join(unknown)[:60]}")
    sentinel_password = options.get("sentinel_password", [""])[-1] or None
    return SentinelURL(
        tuple(sentinels),
        unquote(path[0]),
        db,
        unquote(username) or None,
        unquote(password) or None,
        sentinel_password,
    )


def check(text: str, name: str) -> str:
    """``text`` when it is a Redis URL of either form, else BadInput naming ``name`` and what is wrong."""
    scheme = text.partition("://")[0].lower() if "://" in text else ""
    if scheme == SENTINEL_SCHEME:
        parse_sentinel(text, name)
        return text
    if scheme not in SERVER_SCHEMES:
        raise BadInput(
            f"{name} must be a Redis URL like redis://redis.internal:6379/0 or {EXAMPLE}, got {_shown(text)[:80]!r}"
        )
    if scheme != "unix":
        try:  # as redis-py reads it, whose own error would quote what it took for the port: a password's start
            parts = urlsplit(text)
            parts.port  # noqa: B018  (read for its ValueError)
        except ValueError:
            raise BadInput(
                f"{name} must be a Redis URL like redis://redis.internal:6379/0, got {_shown(text)[:80]!r}: its host "
                "and port cannot be read (a password holding /, ? or # must be percent-encoded: %2F, %3F, %23)"
            ) from None
    return text


def is_sentinel(url: str) -> bool:
    return url.lower().startswith(SENTINEL_SCHEME + "://")


def _sentinel_options(url: SentinelURL, options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the sentinels' connection options, the primary's) for ``url`` and the caller's ``options``."""
    asking: dict[str, Any] = {"socket_timeout": SENTINEL_TIMEOUT, "socket_connect_timeout": SENTINEL_TIMEOUT}
    if url.sentinel_password:
        asking["password"] = url.sentinel_password
    primary = {"db": url.db, **options}
    if url.username:
        primary["username"] = url.username
    if url.password:
        primary["password"] = url.password
    return asking, primary


@functools.cache
def _sentinel_classes() -> tuple[type[Redis], type[AsyncRedis]]:
    """Client classes that close their sentinels' connections with their own (a client rq rebuilds in another
    process from its pool has none of its own to close)."""
    from redis import Redis
    from redis.asyncio import Redis as AsyncRedis

    class SentinelRedis(Redis):
        sentinel: Any = None

        def close(self) -> None:
            super().close()
            if self.sentinel is not None:
                self.sentinel.close()

    class AsyncSentinelRedis(AsyncRedis):
        sentinel: Any = None

        async def aclose(self, close_connection_pool: bool | None = None) -> None:
            await super().aclose(close_connection_pool)
            for each in self.sentinel.sentinels if self.sentinel is not None else ():
                await each.aclose()

    return SentinelRedis, AsyncSentinelRedis


def client(url: str, **options: Any) -> Redis:
    """A client of the Redis ``url`` names, either form; ``options`` as ``redis.Redis`` takes them (timeouts,
    ``health_check_interval``). Through Sentinel, closing the client closes its sentinels' connections too."""
    from redis import Redis

    if not is_sentinel(url):
        return Redis.from_url(url, **options)
    from redis.sentinel import Sentinel

    read = parse_sentinel(url, "the Redis URL")
    asking, primary = _sentinel_options(read, options)
    sentinel = Sentinel(list(read.sentinels), sentinel_kwargs=asking)
    made: Any = sentinel.master_for(read.service, redis_class=_sentinel_classes()[0], **primary)
    made.sentinel = sentinel
    return made


def async_client(url: str, **options: Any) -> AsyncRedis:
    """The asyncio form of ``client``."""
    from redis.asyncio import Redis as AsyncRedis

    if not is_sentinel(url):
        return AsyncRedis.from_url(url, **options)
    from redis.asyncio.sentinel import Sentinel

    read = parse_sentinel(url, "the Redis URL")
    asking, primary = _sentinel_options(read, options)
    sentinel = Sentinel(list(read.sentinels), sentinel_kwargs=asking)
    made: Any = sentinel.master_for(read.service, redis_class=_sentinel_classes()[1], **primary)
    made.sentinel = sentinel
    return made
