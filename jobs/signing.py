"""A signed clip link made with one of the service's site keys, after the checks the service would make of it:
``quoteclip sign`` (cli/sign.py) and the API's ``POST /links`` (api/links/sign.py) both make links here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from quoteclip.errors import BadInput
from quoteclip.settings import Settings, SiteKey, loopback_hint

if TYPE_CHECKING:
    from quoteclip.spec import Word


def make_link(
    clip: dict[str, object],
    site: str,
    settings: Settings,
    *,
    variant: str = "clip",
    key_id: str | None = None,
    expires: int | None = None,
    base_url: str | None = None,
    check: bool | None = None,
) -> dict[str, Any]:
    """The link (``link``, ``site``, ``key_id``, ``variant``, ``expires``) and the ``warnings`` to say of it, for
    ``clip`` (a link's fields: source, start, end, caption, watermark or logo, profile, fit, style, quality) signed
    with the site key ``site``. BadInput for what the service would refuse: the key's scopes always, the service's
    source rules with ``check`` (None: when this environment sets them), a brand file that is not there."""
    from quoteclip import links

    if variant not in links.VARIANTS:
        raise BadInput(f"--as must be one of {', '.join(links.VARIANTS)}, got {variant!r}")
    key = settings.sites().get(site)
    if key is None:
        raise BadInput(f"site: no key {site!r} in QUOTECLIP_SITE_KEYS or QUOTECLIP_SITE_KEYS_FILE")
    if key_id is not None and key.secret_of(key_id) is None:
        listed = ", ".join(kid or "(the key without an id)" for kid, _ in key.keys())
        raise BadInput(f"--key-id: the site {key.id} has no key {key_id!r} (it has {listed})")
    kid = key_id if key_id is not None else key.key_id
    secret = key.secret_of(kid)
    assert secret is not None
    if check is not False:
        _check(clip, key, settings)
    if check is True or (check is None and _source_rules_set(settings)):
        _check_source(clip, settings)
    if check is not False and key.brand is None and settings.brand_dir is not None:
        _check_brand(clip, settings)
    warnings = []
    named = clip.get("watermark")
    if key.brand is not None and named is not None and key.brand.text != named:
        warnings.append(f"the key {key.id} puts its brand on every clip, whatever the link names")
    lifetime = key.lifetime
    if expires is not None and not 1 <= expires <= links.MAX_LIFETIME:  # 0 is not "never": leave it out
        raise BadInput(
            f"--expires must be 1 s to {links.MAX_LIFETIME} s (ten years), got {expires} (without it: the "
            "key's link lifetime, or no expiry)"
        )
    if expires is not None and lifetime is not None and expires > lifetime:
        raise BadInput(f"expires: {expires} s is over the key {key.id}'s link lifetime of {lifetime} s")
    seconds = expires if expires is not None else lifetime
    expiry = None if seconds is None else links.rounded_expiry(seconds)
    base = base_url.rstrip("/") if base_url else settings.link_base_url or ""
    try:
        link = links.sign(clip, key.id, secret, base, variant, expiry, key_id=kid)
    except links.LinkError as exc:
        raise BadInput(str(exc)) from None
    if not base:  # a path only: said, since a page given it as it is would ask its own server
        warnings.append(
            "the link is a path (/l/…), to be put after the service's address: give --base-url, or set "
            "QUOTECLIP_LINK_BASE_URL"
        )
    return {"link": link, "site": key.id, "key_id": kid, "variant": variant, "expires": expiry, "warnings": warnings}


def snapped(clip: dict[str, object], words: Sequence[Word]) -> tuple[dict[str, object], tuple[str, ...]]:
    """A link's fields with its cut's ends moved to the nearest boundaries of the quote's ``words`` (``snap: words``:
    a link carries times, never words, so it is snapped when it is signed), and what moved, said. BadInput for
    times that are not a cut."""
    from quoteclip.spec import parse_time, snap_cut, snap_moves, snap_said

    try:
        first, last = parse_time(clip["start"], "start"), parse_time(clip["end"], "end")
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if last <= first:
        raise BadInput(f"end must be after start, got start={first} end={last}")
    if not words:
        raise BadInput("snap: words moves the cut's ends to word boundaries, so it needs the quote's words")
    to_start, to_end = snap_cut(first, last, words)
    return {**clip, "start": to_start, "end": to_end}, snap_said(snap_moves(first, last, to_start, to_end))


def _check(clip: dict[str, object], key: SiteKey, settings: Settings) -> None:
    """Refuse what the service would refuse: an invalid spec, a clip over the key's or the service's length, a
    source host the key may not clip."""
    from urllib.parse import urlsplit

    from quoteclip import links
    from quoteclip.spec import build_spec
    from sources.safety import host_allowed

    mark = {"text": clip["watermark"]} if "watermark" in clip else {"logo": clip["logo"]} if "logo" in clip else None
    data = {name: value for name, value in clip.items() if name not in ("watermark", "logo", "style")}
    data.update({"watermark": mark, **({"style": {"preset": clip["style"]}} if "style" in clip else {})})
    spec = build_spec({k: v for k, v in data.items() if v is not None}, max_seconds=settings.max_clip_seconds)
    length = round(spec.end - spec.start, 3)
    if key.max_seconds is not None and length > key.max_seconds:  # as the service measures it (api/links/verify.py)
        raise BadInput(f"end: the clip is {length:g} s long, over the {key.max_seconds:g} s the key {key.id} allows")
    if key.hosts is not None:
        try:
            host = (urlsplit(links.trim(str(clip["source"]))).hostname or "").lower()
        except ValueError:  # bad IPv6 brackets, and the like
            raise BadInput(f"source URL is malformed: {str(clip['source'])[:200]!r}") from None
        if not host_allowed(host, key.hosts):  # as the service compares them (api/links/verify.py)
            raise BadInput(
                f"source: the key {key.id} may clip {', '.join(key.hosts)} only, got {host or clip['source']!r}"
            )


def _check_brand(clip: dict[str, object], settings: Settings) -> None:
    """A logo named ``brand:NAME`` is a file of the service's QUOTECLIP_BRAND_DIR, set here: it must be there (the
    service answers a link naming a missing one 422). A key with a brand never draws the link's logo."""
    from jobs.pipeline.assets import brand_file
    from quoteclip import links

    logo = clip.get("logo")
    if isinstance(logo, str) and links.trim(logo).startswith("brand:"):
        brand_file(links.trim(logo), settings, "watermark")


def _source_rules_set(settings: Settings) -> bool:
    """Whether this environment holds the service's source rules (else the service's own may differ from the
    defaults, and only the key's scopes are checked unless --check asks)."""
    return settings.source_hosts is not None or settings.allow_local_sources is not None


def _check_source(clip: dict[str, object], settings: Settings) -> None:
    """The service's source rules, as a link's request meets them (api/clips.py): no path on its disk unless
    allowed, an http(s) source on its allowed hosts."""
    from urllib.parse import urlsplit

    from sources import allowed_hosts, resolve_source
    from sources.safety import host_allowed

    served = settings.for_queue()
    source, local = str(clip["source"]), served.allow_local_sources is True
    resolve_source(source, allow_local=local)
    logo = clip.get("logo")
    if isinstance(logo, str) and not logo.startswith(("asset:", "brand:")) and not local:
        raise BadInput(f"logo: local paths are not allowed by the service, got {logo[:100]!r}")
    hosts = allowed_hosts(served)
    parts = urlsplit(source)
    if hosts is not None and parts.scheme in ("http", "https") and not host_allowed(parts.hostname or "", hosts):
        raise BadInput(
            f"source: the service does not clip {parts.hostname} (QUOTECLIP_SOURCE_HOSTS allows {', '.join(hosts)}"
            f"{loopback_hint(parts.hostname or '')})"
        )
