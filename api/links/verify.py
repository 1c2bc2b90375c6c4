"""Verification: ``verified_link``, which every link route calls first, turns a request into the ``Linked`` clip it
names, or raises ``Refused`` (api/links/outcomes.py): 403 for a link that is not one of ours as it stands (any byte
changed, another key's signature, a removed or retired key, a payload not in canonical form, an extension not its
variant's, a number out of range: a time past 24 h or an expiry more than ten years off, quoteclip/links.py) or
that breaks its key's scopes (hosts, longest clip, link lifetime), 410 past its expiry or revoked (the deny list,
api/links/revoke.py; 503 while it cannot be read), 422 for a clip the service cannot make (the spec and source
rules ``POST /clips`` applies, api/clips.py; 503 when a local source cannot be read). Which part of a link failed
is never said. A refusal is counted under the site the link's path names when that site exists. A sub-resource
(``…/index.m3u8``) is verified as the link before it. Whatever decides whether a link is ours (its keys, their
secrets) is read here and nowhere else. A link verified is kept a few seconds (``Kept``): a crowd asking it costs
one verification, but each request still reads its expiry and the deny list, in the event loop (the deny list's look
an ``EXISTS`` on the loop's own pool, one for the requests asking at once; no worker thread unless the relay has a
Redis of its own).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cachetools import TTLCache
from fastapi import HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from redis.exceptions import RedisError

from jobs import relay
from quoteclip import links
from quoteclip.errors import QuoteclipError
from quoteclip.settings import Settings, SiteKey
from quoteclip.spec import ClipSpec
from sources.safety import host_allowed

from .. import streams
from ..clips import RETRY_AFTER, clip_spec
from ..deps import Services
from .fields import link_fields
from .outcomes import UNKNOWN, Answer, Outcome, Refused
from .revoke import entries

RETRY = {"Retry-After": RETRY_AFTER}
INVALID = "this link is not valid"  # every refusal of the link itself: which part failed is not said


@dataclass(frozen=True)
class Linked:
    """A verified link: its site key, what it asks for (``variant``), until when, and the clip as a spec (the key's
    brand on it)."""

    site: SiteKey
    variant: str
    expires: int | None
    spec: ClipSpec
    key: str = ""  # what names the clip and its key among the answers kept (api/links/first.py), made once
    denied: tuple[str, ...] = ()  # the deny list's entries that would refuse it (api/links/revoke.py), made once

    def answer(self, response: Response, outcome: Outcome | None) -> Answer:
        """``response``, counted under this link's key and variant."""
        return Answer(response, outcome, self.site.id, self.variant)

    def refused(self, status: int, detail: str, outcome: Outcome, headers: dict[str, str] | None = None) -> Refused:
        return Refused(status, detail, outcome, headers, self.site.id, self.variant)


def link_part(part: str) -> str:
    """A link's sub-resource: its stream's playlist, init segment or fragments; nothing else is behind a link (404,
    as for any path that is not a route, before the link is read)."""
    if not streams.is_part(part):
        raise HTTPException(404)
    return part


def raw_path(request: Request) -> str:
    raw = request.scope.get("raw_path") or request.url.path.encode()
    return raw.decode("ascii", "replace") if isinstance(raw, bytes) else str(raw)


KEPT = 4096  # verified links an API process keeps (the least asked dropped)
KEPT_SECONDS = 10.0  # seconds a verified link is kept: its signature, scopes and spec (not its revocation)


class Kept:
    """The links this API process verified lately (``KEPT_SECONDS``), and the deny-list looks under way: a crowd
    asking one link costs one verification, and the requests asking at once one look at the deny list. A link's
    expiry and its revocation are still read for every request: the deny list by a look of its own, or by the look
    under way when it came (a revocation made during that look is read by the requests after it)."""

    def __init__(self) -> None:
        # (cachetools': the least recently asked dropped past KEPT, each gone KEPT_SECONDS after it was kept)
        self.links: TTLCache[str, Linked] = TTLCache(KEPT, KEPT_SECONDS, timer=time.monotonic)
        self.looks: dict[str, asyncio.Future[int]] = {}

    def get(self, path: str) -> Linked | None:
        return self.links.get(path)

    def keep(self, path: str, linked: Linked) -> None:
        self.links[path] = linked

    async def revoked(self, svc: Services, path: str, denied: tuple[str, ...]) -> bool:
        """Whether one of the link's deny-list entries exists: one ``EXISTS``, shared by the requests asking it
        while it is asked; from the event loop's pool when it is the queue's Redis (no worker thread), else from a
        worker thread (the relay on a Redis of its own, ``QUOTECLIP_STREAM_REDIS_URL``)."""
        look = self.looks.get(path)
        if look is None:
            if relay.relay_url(svc.settings) == svc.settings.redis_url:
                look = asyncio.ensure_future(svc.hub.redis().exists(*denied))
            else:
                look = asyncio.ensure_future(run_in_threadpool(svc.connection.exists, *denied))
            self.looks[path] = look
            look.add_done_callback(lambda _: self.looks.pop(path, None))
        return bool(await asyncio.shield(look))


def kept(request: Request) -> Kept:
    found: Kept | None = getattr(request.app.state, "kept_links", None)
    if found is None:
        found = request.app.state.kept_links = Kept()
    return found


async def verified_link(request: Request, svc: Services) -> Linked:
    """The link the request names (its path, or the path before its sub-resource), verified; else ``Refused``."""
    path = raw_path(request)
    if "part" in request.path_params:
        path = path.rsplit("/", 1)[0]
    now, known = time.time(), kept(request)
    linked = known.get(path)
    if linked is not None and (linked.expires is None or now <= linked.expires):
        await _not_revoked(known, svc, path, linked.denied, linked.site, linked.variant)
        return linked
    clip, site = signed(path, request, now)
    denied = entries(path, site)
    # kept before the deny list is read: the requests that come while it is read (a crowd) find it verified. A
    # revocation is said before a refusal of the link's scopes or its clip (or its failure to be made)
    refusal: Exception | None = None
    try:
        made = dataclasses.replace(allowed(clip, site, svc.settings, now), denied=denied)
    except Exception as failed:  # noqa: BLE001  (raised after the deny list is read)
        refusal = failed
    else:
        known.keep(path, made)
    await _not_revoked(known, svc, path, denied, site, str(clip["variant"]))
    if refusal is not None:
        raise refusal
    return made


def signed(path: str, request: Request, now: float) -> tuple[dict[str, Any], SiteKey]:
    """``path``'s clip and site key, once its signature, form and expiry hold; else Refused (403, 410)."""
    sites: dict[str, SiteKey] = request.app.state.site_keys
    named = links.site_of(path.split("/")[2]) if path.count("/") >= 3 else UNKNOWN
    named = named if named in sites else UNKNOWN  # a refusal is counted under the site the path names, if it exists
    try:
        clip = links.verify(path, request.app.state.link_secrets, now=now)
    except links.LinkExpired:
        raise Refused(410, "this link has expired", Outcome.EXPIRED, site=named) from None
    except (links.LinkError, OverflowError):  # a number out of range (links.MAX_MS, MAX_LIFETIME) is a LinkError
        raise Refused(403, INVALID, Outcome.REFUSED, site=named) from None
    return clip, sites[named]


async def _not_revoked(
    known: Kept, svc: Services, path: str, denied: tuple[str, ...], site: SiteKey, variant: str
) -> None:
    try:
        revoked = await known.revoked(svc, path, denied)
    except RedisError:  # a revocation holds: not answered until it can be read
        raise Refused(503, "the revoked links cannot be read", Outcome.UNAVAILABLE, RETRY, site.id, variant) from None
    if revoked:
        raise Refused(410, "this link has been revoked", Outcome.REVOKED, site=site.id, variant=variant)


def allowed(clip: dict[str, Any], site: SiteKey, settings: Settings, now: float) -> Linked:
    """A signed clip within its key's scopes, as the spec the service renders; else Refused (403, 422, 503)."""
    variant = str(clip["variant"])
    refusal = _scope_refusal(clip, site, settings, now)
    if refusal is not None:
        raise Refused(403, refusal, Outcome.REFUSED, site=site.id, variant=variant)
    try:
        spec = clip_spec(link_fields(clip, site), settings)
    except QuoteclipError as exc:
        raise Refused.failing(exc, site.id, variant) from None
    return Linked(site, variant, clip.get("expires"), spec, f"{site.id}|{variant}|{spec!r}")


def _scope_refusal(clip: dict[str, Any], site: SiteKey, settings: Settings, now: float) -> str | None:
    """What a validly signed link asks that its key does not allow, in one line; None when nothing."""
    if site.hosts is not None:
        try:
            host = (urlsplit(str(clip["source"])).hostname or "").lower()
        except ValueError:
            host = ""
        if not host or not host_allowed(host, site.hosts):
            return f"the site key {site.id} may clip sources of {', '.join(site.hosts)} only"
    longest = min(settings.max_clip_seconds, site.max_seconds if site.max_seconds is not None else math.inf)
    length = round(clip["end"] - clip["start"], 3)
    if length > longest:  # whose limit it is, named as the hosts' is
        whose = f"the site key {site.id}" if longest == site.max_seconds else "the service"
        return f"the clip is {length:g} s long, over the {longest:g} s {whose} allows"
    if site.lifetime is not None:
        expires = clip.get("expires")
        if expires is None or expires > links.rounded_expiry(site.lifetime, now):
            return f"the site key {site.id}'s links must expire within {site.lifetime} s"
    return None
