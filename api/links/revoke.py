"""Revoking one signed link, or every link of a site naming one clip, without touching the site's key: a deny list
in Redis that verification reads (api/links/verify.py: a revoked link answers ``410``), written by ``quoteclip
revoke LINK`` (cli/revoke.py) and ``DELETE /links/{hash}`` (with an API key).

- A link is named by its hash (``links.link_hash``: SHA-256 of its ``{payload}.{signature}``; the logs name a link
  by its first 12 characters). Its entry lives as long as the link does (its expiry, and a minute for clocks
  apart); for a link without expiry, and for an entry given by hash alone, ``DEFAULT_SECONDS``: ten years, the
  longest any expiring link may live (``links.MAX_LIFETIME``). A link without expiry is refused again after
  that: retire its key before then if it must stay refused.
- A clip (``--clip``, ``"clip": true``) is named by its site and its fields apart from variant and expiry
  (``links.clip_hash``), its source by what it names (``source_identity``: ``youtu.be/ID``, ``m.youtube.com/…``,
  a ``#t=1`` or an upper-case host are one clip, as in the store), and apart from the watermark and logo for a key
  with a brand (``clip_of``): every variant, every expiry, every key of the site, every spelling of the source; its
  entry lives ``DEFAULT_SECONDS``.
  A link past its expiry still names its clip (its signature holds): it revokes the clip's links that live on.
- ``--delete-clip`` (``"delete_clip": true``) also removes the clip from the store, with its poster, captions and
  metadata, so a new render is needed for any other link to it.
"""

from __future__ import annotations

import glob
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

from fastapi import APIRouter, Body, HTTPException
from pydantic import BaseModel, ConfigDict
from redis import Redis
from redis.exceptions import RedisError

from quoteclip import links
from quoteclip.errors import BadInput, QuoteclipError, StorageFailed
from quoteclip.settings import Settings, SiteKey
from sources.identity import url_identity
from storage import LocalStorage, Storage

from ..deps import ServicesDep

LINK_KEY = "quoteclip:links:revoked:"  # + a link's hash
CLIP_KEY = "quoteclip:links:revoked-clip:"  # + site id + ":" + a clip's hash
DEFAULT_SECONDS = links.MAX_LIFETIME
CLOCK_MARGIN = 60  # seconds an entry outlives its link's expiry
HASH = re.compile(r"\A[0-9a-f]{64}\Z")


@dataclass
class Revocation:
    """What a revocation did: the link's hash and how long its entry lives, the clip's hash when all its links were
    revoked, and the stored files removed."""

    hash: str
    seconds: int
    site: str | None = None
    clip: str | None = None
    deleted: list[str] = field(default_factory=list)


def link_entry(link_hash: str) -> str:
    return LINK_KEY + link_hash


def clip_entry(site: str, clip_hash: str) -> str:
    return f"{CLIP_KEY}{site}:{clip_hash}"


def clip_of(data: dict[str, Any], site: SiteKey | None, literal: bool = False) -> str:
    """The hash a clip is revoked under (short names, as ``links.decode`` answers): ``links.clip_hash`` of the
    link's fields with its source as the store knows it (``source_identity``: every spelling of one video is one
    clip), without the watermark and logo a key's brand replaces (links naming another mark render the same clip).
    ``literal``: the source as the link spells it, as revocations were written before (still honoured)."""
    if site is not None and site.brand is not None:
        data = {short: value for short, value in data.items() if short not in ("w", "l")}
    if not literal and isinstance(data.get("s"), str):
        data = {**data, "s": source_identity(data["s"])}
    return links.clip_hash(data)


def source_identity(source: str) -> str:
    """What a link's source names, as the clip's store key does (``sources.identity.url_identity``: one YouTube
    video whatever its spelling, any other URL less its ``#fragment``), its scheme and host in lower case; a source
    that is no URL (a local path an operator allows) as it is."""
    try:
        parts = urlsplit(source)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            return source
        identity = url_identity(source)
    except (ValueError, BadInput):  # a malformed URL or a YouTube URL read two ways: never rendered, as it is
        return source
    if identity.startswith("url:"):
        named = urlsplit(identity.removeprefix("url:"))
        identity = "url:" + urlunsplit(named._replace(scheme=named.scheme.lower(), netloc=named.netloc.lower()))
    return identity


def entries(path: str, site: SiteKey | None = None) -> tuple[str, ...]:
    """The deny list's entries that refuse a verified link's path (``/l/…``) of ``site``'s: its own, its clip's (by
    what the clip is, and by the link's literal fields, as revocations were written before). A link is revoked when
    one of them exists (one ``EXISTS``; api/links/verify.py asks it from the event loop: when Redis cannot be
    asked, a revocation holds and the link is answered 503, not the clip)."""
    signer, payload, _, _ = links.parse(path)
    data, site_id = links.decode(payload), links.site_of(signer)
    hashes = {links.clip_hash(data), clip_of(data, site, literal=True), clip_of(data, site)}
    return (link_entry(links.link_hash(path)), *sorted(clip_entry(site_id, h) for h in hashes))


def entry_seconds(expires: int | None, now: float) -> int:
    return DEFAULT_SECONDS if expires is None else max(1, int(expires - now) + CLOCK_MARGIN)


def revoke_hash(connection: Redis, link_hash: str, seconds: int = DEFAULT_SECONDS) -> Revocation:
    """The link of hash ``link_hash`` refused (410) for ``seconds``."""
    if not HASH.match(link_hash):
        raise BadInput(f"hash must be a link's hash: 64 lower-case hex digits, got {link_hash[:80]!r}")
    connection.set(link_entry(link_hash), "1", ex=seconds)
    return Revocation(link_hash, seconds)


def revoke_link(
    link: str,
    settings: Settings,
    connection: Redis,
    storage: Storage | None = None,
    whole_clip: bool = False,
    delete_clip: bool = False,
    now: float | None = None,
) -> Revocation:
    """Revoke ``link`` (a link of one of the service's live keys, as a page has it): its entry lives as long as the
    link; with ``whole_clip`` every link of its site naming its clip; with ``delete_clip`` its stored clip removed
    from ``storage`` too."""
    now = time.time() if now is None else now
    expired = False
    try:
        path = links.path_of(link.strip())
        signer = links.parse(path)[0]
        site = settings.sites().get(links.site_of(signer))
        secrets = site.signers() if site is not None else {}
        try:
            clip = links.verify(path, secrets, now=now)
        except links.LinkExpired:
            if not whole_clip:
                raise
            # signed and in form (verify checks expiry last): it still names its clip, whose links may live on
            clip, expired = links.verify(path, secrets, now=links.decode(links.parse(path)[1])["x"]), True
    except links.LinkExpired:
        raise BadInput("link: it has expired already (answered 410): nothing to revoke") from None
    except links.LinkError:
        raise BadInput("link: not a valid link of this service's live keys (answered 403): nothing to revoke") from None
    assert site is not None
    if expired:  # the link itself needs no entry: it is refused as expired
        done = Revocation(links.link_hash(path), 0)
    else:
        done = revoke_hash(connection, links.link_hash(path), entry_seconds(clip.get("expires"), now))
    done.site = site.id
    if whole_clip:
        done.clip = clip_of(links.decode(links.parse(path)[1]), site)
        connection.set(clip_entry(site.id, done.clip), "1", ex=DEFAULT_SECONDS)
    if delete_clip:
        if storage is None:
            raise BadInput("delete_clip: no store to delete from")
        done.deleted = delete_stored(clip, site, settings, storage)
    return done


def delete_stored(clip: dict[str, Any], site: Any, settings: Settings, storage: Storage) -> list[str]:
    """Remove the clip a verified link names from the store, with everything stored beside it (its poster,
    captions, metadata): the names removed."""
    from jobs.pipeline.lookup import lookup

    from ..clips import clip_spec
    from .fields import link_fields

    key, _ = lookup(clip_spec(link_fields(clip, site), settings), settings, storage)
    if isinstance(storage, LocalStorage):
        removed = []
        for path in sorted(storage.root.glob(glob.escape(key) + ".*")):
            path.unlink(missing_ok=True)
            removed.append(path.name)
        return removed
    client, bucket = getattr(storage, "client", None), getattr(storage, "bucket", None)
    object_key = getattr(storage, "object_key", None)
    if client is None or bucket is None or object_key is None:
        raise StorageFailed("delete_clip: this store cannot delete a clip")
    try:
        listed = client.list_objects_v2(Bucket=bucket, Prefix=object_key(key, "."))
        names = [item["Key"] for item in listed.get("Contents", [])]
        for name in names:
            client.delete_object(Bucket=bucket, Key=name)
    except Exception as exc:  # noqa: BLE001 (botocore's errors: the store failing, a 503)
        raise StorageFailed(f"delete_clip: could not delete {key}: {exc}") from None
    return [name.rsplit("/", 1)[-1] for name in names]


class RevokeBody(BaseModel):
    """``DELETE /links/{hash}``'s optional body: the link itself (its entry then lives as long as it does), and
    whether to revoke every link of its clip and to delete the stored clip."""

    model_config = ConfigDict(extra="forbid")
    link: str | None = None
    clip: bool = False
    delete_clip: bool = False


router = APIRouter()


@router.delete("/links/{link_hash}", tags=["links"])
def revoke(link_hash: str, svc: ServicesDep, body: Annotated[RevokeBody | None, Body()] = None) -> dict[str, Any]:
    """Revoke one signed link (it answers ``410`` from now on) by its hash, without touching its site's key. With
    ``{"link": …}`` the entry lives as long as the link, ``"clip": true`` revokes every link of the site naming
    its clip, ``"delete_clip": true`` removes the stored clip too. Needs the API's keys (QUOTECLIP_API_KEYS)."""
    if not svc.settings.api_keys:
        raise HTTPException(403, "revoking a link needs the API's keys (QUOTECLIP_API_KEYS): or use quoteclip revoke")
    body = body or RevokeBody()
    link_hash = link_hash.lower()  # hex either way: as some tools print a SHA-256
    try:
        if body.link is None:
            if body.clip or body.delete_clip:
                raise BadInput("clip and delete_clip need the link itself: give it as link")
            done = revoke_hash(svc.connection, link_hash)
        else:
            if links.link_hash(links.path_of(body.link.strip())) != link_hash:
                raise BadInput("link: its hash is not the one the path names")
            done = revoke_link(body.link, svc.settings, svc.connection, svc.storage, body.clip, body.delete_clip)
    except links.LinkError:
        raise HTTPException(422, "link: not a clip link") from None
    except BadInput as exc:
        raise HTTPException(422, str(exc)) from None
    except (RedisError, QuoteclipError) as exc:
        raise HTTPException(503, f"could not revoke: {exc}".splitlines()[0], {"Retry-After": "2"}) from None
    return asdict(done)
