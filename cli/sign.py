"""``quoteclip sign``: a signed clip link for a website's page, made with its site key (no request is made)."""

from typing import Annotated

import typer

from quoteclip.errors import BadInput
from quoteclip.settings import Settings, SiteKey

from . import options as opt
from .app import app
from .clips import SourceArg
from .common import JsonOpt, emit, run_guarded
from .options import ClipOptions

# What a link carries of the clip options (quoteclip/links.py); any other option given is refused by name.
LINKED = {"start", "end", "caption", "watermark", "profile", "fit", "style", "quality"}
# The clip options a link cannot carry: taken, and left out of the help, only to be refused by name (a render's
# options, given to sign by habit, get a reason rather than "no such option").
Unlinked = Annotated[str | None, typer.Option(hidden=True)]
UnlinkedNumber = Annotated[float | None, typer.Option(hidden=True)]
# A link's quality: no instant (copied frames), which a link cannot ask
LinkQuality = Annotated[str | None, typer.Option(help="final | preview (half size, fast encode)")]
# A link's logo is the service's file, never a path of the signer's machine
LinkWatermark = Annotated[
    str | None, typer.Option(help="Brand text (e.g. StarZero), or a logo: asset:ID.png (uploaded) or brand:NAME.png.")
]


@app.command("sign")
def sign(
    ctx: typer.Context,
    source: SourceArg,
    *,
    start: opt.Start = None,
    end: opt.End = None,
    caption: opt.Caption = None,
    watermark: LinkWatermark = None,
    style: opt.Style = None,
    profile: opt.Profile = None,
    fit: opt.Fit = None,
    quality: LinkQuality = None,
    watermark_position: Unlinked = None,
    watermark_opacity: UnlinkedNumber = None,
    watermark_size: UnlinkedNumber = None,
    font: Unlinked = None,
    caption_size: UnlinkedNumber = None,
    style_file: Unlinked = None,
    profiles: Unlinked = None,
    encoder_preset: Unlinked = None,
    pad_before: UnlinkedNumber = None,
    pad_after: UnlinkedNumber = None,
    no_fades: Annotated[bool, typer.Option("--no-fades", hidden=True)] = False,
    video_fades: Annotated[bool, typer.Option("--video-fades", hidden=True)] = False,
    transcript: Unlinked = None,
    site: Annotated[str, typer.Option("--site", help="The site key's id (QUOTECLIP_SITE_KEYS or its file).")],
    key_id: Annotated[
        str | None,
        typer.Option("--key-id", help="Which of the site's keys signs (default: the first listed for the site)."),
    ] = None,
    check: Annotated[
        bool | None,
        typer.Option(
            "--check/--no-check",
            help="Refuse what the service would refuse: the key's scopes, and the service's source rules "
            "(QUOTECLIP_SOURCE_HOSTS, local paths). Default: the key's scopes always, the source rules when those "
            "settings are set here.",
        ),
    ] = None,
    base_url: Annotated[
        str | None, typer.Option("--base-url", help="The service's address (default QUOTECLIP_LINK_BASE_URL).")
    ] = None,
    expires: Annotated[
        int | None, typer.Option("--expires", help="Seconds the link lives (rounded up; the key's lifetime caps it).")
    ] = None,
    variant: Annotated[str, typer.Option("--as", help="clip | download | poster | captions")] = "clip",
    as_json: JsonOpt = False,
) -> None:
    """Print a signed link to a clip (one line): a page puts it in an <a href>, a <video src> or a poster, and the
    service renders the clip on the first request. The secret comes from the site key's setting; what the service
    would refuse is refused here first (--check). A link carries the times, the caption, a watermark, the profile,
    fit, style and quality (final or preview), no other clip option. Without --base-url or QUOTECLIP_LINK_BASE_URL
    it prints the link's path (/l/…), to be put after the service's address."""
    opts = ClipOptions.given(ctx.params)

    def go() -> None:
        from quoteclip import links

        if variant not in links.VARIANTS:
            raise BadInput(f"--as must be one of {', '.join(links.VARIANTS)}, got {variant!r}")
        settings = Settings.from_env()
        key = settings.sites().get(site)
        if key is None:
            raise BadInput(f"site: no key {site!r} in QUOTECLIP_SITE_KEYS or QUOTECLIP_SITE_KEYS_FILE")
        given = {name for name, value in vars(opts).items() if name != "source" and value not in (None, False)}
        extra = sorted(given - LINKED)
        if extra:
            flags = ", ".join("--" + name.replace("_", "-") for name in extra)
            raise BadInput(f"{flags}: a link cannot carry it (it carries --{', --'.join(sorted(LINKED))})")
        clip = _clip(source, opts)
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
        if key.brand is not None and opts.watermark is not None and key.brand.text != opts.watermark:
            typer.echo(
                f"quoteclip: warning: the key {key.id} puts its brand on every clip, whatever the link names", err=True
            )
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
            typer.echo(
                "quoteclip: warning: the link is a path (/l/…), to be put after the service's address: give "
                "--base-url, or set QUOTECLIP_LINK_BASE_URL",
                err=True,
            )
        emit({"link": link, "site": key.id, "key_id": kid, "variant": variant, "expires": expiry}, as_json, link)

    run_guarded(go, as_json)


def _clip(source: str, opts: ClipOptions) -> dict[str, object]:
    clip: dict[str, object] = {"source": source, "start": opts.start, "end": opts.end, "caption": opts.caption}
    if opts.watermark is not None:
        if opts.watermark.lower().endswith(".png"):
            if not opts.watermark.startswith(("asset:", "brand:")):
                raise BadInput("watermark: a link's logo is an uploaded asset (asset:…) or a brand file (brand:NAME)")
            clip["logo"] = opts.watermark
        else:
            clip["watermark"] = opts.watermark
    for name in ("profile", "fit", "style", "quality"):
        if getattr(opts, name) is not None:
            clip[name] = getattr(opts, name)
    if opts.start is None or opts.end is None:
        raise BadInput(f"{'start' if opts.start is None else 'end'}: required")
    return clip


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
            f"source: the service does not clip {parts.hostname} (QUOTECLIP_SOURCE_HOSTS allows {', '.join(hosts)})"
        )
