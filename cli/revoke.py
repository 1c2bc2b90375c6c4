"""``quoteclip revoke LINK``: one signed link refused from now on (410), without touching its site's key; with
``--clip`` every link of the site naming its clip, with ``--delete-clip`` its stored clip removed too
(api/links/revoke.py keeps the deny list in the service's Redis)."""

import time
from typing import Annotated

import typer

from quoteclip.errors import BadInput
from quoteclip.settings import Settings

from .app import app
from .common import JsonOpt, emit, run_guarded


@app.command("revoke")
def revoke(
    link: Annotated[str, typer.Argument(help="The signed link, as a page has it (with the service's address or not).")],
    *,
    clip: Annotated[
        bool, typer.Option("--clip", help="Revoke every link of the site naming this clip (any variant, expiry, key).")
    ] = False,
    delete_clip: Annotated[
        bool, typer.Option("--delete-clip", help="Remove the stored clip too (with its poster and captions).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Revoke a signed link: it answers 410 from now on (its entry in Redis lives as long as the link; ten years
    for a link without expiry). The key, and every other link of it, stay valid."""

    def go() -> None:
        from redis.exceptions import RedisError

        from api.links.revoke import revoke_link
        from jobs.connection import connect, named_redis
        from quoteclip import links
        from quoteclip.errors import StorageFailed
        from quoteclip.redis_url import shown
        from storage import open_storage

        try:  # its shape first: text that is no link at all is not a link the keys refused
            links.parse(links.path_of(link.strip()))
        except links.LinkError:
            raise BadInput(
                f"link: not a link URL, got {link.strip()[:80]!r}: a signed link is "
                "[BASE]/l/SITE[.KEYID]/PAYLOAD.SIGNATURE.mp4 (or .jpg, .vtt), as `quoteclip sign` prints it"
            ) from None
        settings = Settings.from_env()
        # the entry must reach the service's Redis: never the fallback that merely answers here
        redis = shown(named_redis(settings))
        storage = open_storage(settings) if delete_clip else None
        try:
            done = revoke_link(link, settings, connect(settings), storage, clip, delete_clip)
        except RedisError as exc:
            raise StorageFailed(f"could not reach Redis at {redis} to revoke the link: {exc}") from None
        until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(time.time() + done.seconds))
        lines = [f"revoked link {done.hash} (site {done.site}) until {until}"]
        if done.seconds == 0:  # --clip through a link past its expiry: the link is refused as expired already
            lines = [f"link {done.hash} (site {done.site}) has expired already: it needs no entry"]
        if done.clip is not None:
            lines.append(f"revoked every link of the site {done.site} to clip {done.clip}")
        if delete_clip:
            lines.append(f"deleted {len(done.deleted)} stored file(s): {', '.join(done.deleted) or 'none stored'}")
        # which Redis holds the entry: a revocation written to another Redis than the service's is seen at once
        lines.append(f"in Redis {redis} (the service must read the same)")
        emit({"status": "revoked", **vars(done), "redis": redis}, as_json, "\n".join(lines))

    run_guarded(go, as_json)
