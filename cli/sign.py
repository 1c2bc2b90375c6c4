"""``quoteclip sign``: a signed clip link for a website's page, made with its site key (no request is made of the
service; ``--snap words --transcript source`` reads the page's captions)."""

from typing import Annotated

import typer

from quoteclip.errors import BadInput
from quoteclip.settings import Settings

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
    transcript: Annotated[
        str | None,
        typer.Option(
            help="With --snap words: where --caption's words are found (WebVTT/SRT/JSON, or source: the page's)."
        ),
    ] = None,
    snap: Annotated[
        str | None,
        typer.Option(help="words: sign the cut with its ends on the nearest boundaries of the quote's words."),
    ] = None,
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
        from jobs.signing import make_link

        given = {name for name, value in vars(opts).items() if name != "source" and value not in (None, False)}
        clip = _clip(source, opts)
        snapped: tuple[str, ...] = ()
        if opts.snap is not None or opts.transcript is not None:
            clip, snapped = _snapped(clip, opts)
            given -= {"snap", "transcript"}
        extra = sorted(given - LINKED)
        if extra:
            flags = ", ".join("--" + name.replace("_", "-") for name in extra)
            raise BadInput(f"{flags}: a link cannot carry it (it carries --{', --'.join(sorted(LINKED))})")
        made = make_link(
            clip,
            site,
            Settings.from_env(),
            variant=variant,
            key_id=key_id,
            expires=expires,
            base_url=base_url,
            check=check,
        )
        for warning in (*snapped, *made.pop("warnings")):
            typer.echo(f"quoteclip: warning: {warning}", err=True)
        emit(made, as_json, made["link"])

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


def _snapped(clip: dict[str, object], opts: ClipOptions) -> tuple[dict[str, object], tuple[str, ...]]:
    """``--snap words`` with ``--transcript``: the link signed for the cut with its ends on the boundaries of the
    quote's words (those ``--caption`` is found as in the transcript, as ``render --snap words`` snaps to them;
    jobs/signing.py ``snapped``), and what moved, said."""
    from jobs.signing import snapped
    from quoteclip.spec import Word
    from sources.captions import quote_found

    if opts.snap is None or opts.transcript is None:
        raise BadInput(
            "--snap words and --transcript go together: a link is snapped when it is signed, to the transcript's words"
            if opts.snap is not None
            else "--transcript: a link carries times, not words; give it with --snap words to move the cut's ends"
        )
    if opts.snap != "words":
        raise BadInput(f"--snap: words is the one snap there is (to the quote's word boundaries), got {opts.snap!r}")
    if not opts.caption:
        raise BadInput("--snap words: give the quote's text with --caption to find its words in the transcript")
    found, _score = quote_found(opts.caption, opts.transcript, str(clip["source"]), Settings.from_env())
    return snapped(clip, [Word(str(w["text"]), float(w["start"]), float(w["end"])) for w in found["words"]])
