"""Signed clip links, a website's whole integration: ``GET``/``HEAD /l/{key id}/{payload}.{signature}.{ext}`` (the
link ``quoteclip/links.py`` signs) answers the clip, its download, its poster or its captions, rendering it on the
first request, and ``/embed.js`` is a player card for such links. The routes exist only with site keys
(``QUOTECLIP_SITE_KEYS``, ``QUOTECLIP_SITE_KEYS_FILE``); they need no API key: the signature is the credential.

A request is answered from the store when the clip is there (cacheable by any CDN, for as long as the link lives),
else it starts one render on the click queue (joined by identical requests and by ``POST /clips``) and is held
until the clip is stored (woken by the worker's announcements, ``api/events.py``), for at most
``QUOTECLIP_LINK_HOLD`` seconds: a ``<video src>`` or an ``<a href>`` cannot act on a 202.

One concern a module: ``routes`` (the routes; each answer counted once), ``verify`` (the dependency that verifies a
link, or refuses it), ``outcomes`` (what an answer is counted as; the one error path), ``first`` (the answer up to
a render), ``hold`` (a request held while the clip renders, or streamed), ``cache`` (ETag, 304, lifetimes),
``metrics`` (the counts per site key), ``revoke`` (the deny list: one link or one clip's links revoked, ``DELETE
/links/{hash}``), ``sign`` (``POST /links``: a link signed for a caller with an API key).
"""

from __future__ import annotations

from fastapi import FastAPI

from quoteclip.settings import Settings

from .. import streams
from . import revoke, sign
from .metrics import LinkCollector
from .outcomes import Refused
from .routes import refused, router


def install(app: FastAPI, settings: Settings) -> None:
    """The link routes, their refusals' handler, their metrics and their revocation, when the service has site
    keys (without them the routes do not exist); and, keys or none, the page's stream of a clip being rendered
    (``GET /clips/{id}/stream``, api/streams.py)."""
    app.include_router(streams.router)
    sites = settings.sites()
    if not sites:
        return
    app.state.site_keys = sites
    # each live key's secret by the signer its links name: the site (its key without an id) or site.keyid
    app.state.link_secrets = {signer: secret for key in sites.values() for signer, secret in key.signers().items()}
    app.state.registry.register(LinkCollector(app.state.services.connection))
    app.add_exception_handler(Refused, refused)
    app.include_router(router)
    app.include_router(revoke.router)
    app.include_router(sign.router)
