"""The CLI's clip options, declared once: their command-line forms (typed aliases a command's signature lists:
``start: opt.Start = None``), one typed record of their values (``ClipOptions``), and the one function that turns
them (with a brand style file and a transcript) into a ClipSpec. The commands are in ``clips.py`` and ``sign.py``."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Annotated, Any

import typer

from quoteclip.errors import BadInput
from quoteclip.platforms import parse_platforms
from quoteclip.settings import Settings
from quoteclip.spec import ClipSpec, build_spec, in_profiles, parse_profiles

# Every option of a command that takes a clip spec, declared once as a typed alias with its command-line form; a
# command lists the ones it takes in its own signature (``start: opt.Start = None``, None: the spec's default, or
# the brand style file's) and reads their values as one ClipOptions (``ClipOptions.given(ctx.params)``).
Start = Annotated[str | None, typer.Option(help="Quote start: seconds, MM:SS(.fff) or HH:MM:SS(.fff).")]
End = Annotated[str | None, typer.Option(help="Quote end, same forms as --start.")]
Caption = Annotated[str | None, typer.Option("--caption", "--quote", help="The quote's text, burned in as captions.")]
Watermark = Annotated[str | None, typer.Option(help="Brand text (e.g. StarZero) or a PNG logo path.")]
WatermarkPosition = Annotated[str | None, typer.Option(help="top-left | top-right | bottom-left | bottom-right")]
WatermarkOpacity = Annotated[float | None, typer.Option(help="0.05–1.0 (default 0.8)")]
WatermarkSize = Annotated[float | None, typer.Option(help="Mark height / the frame's short side.")]
Font = Annotated[str | None, typer.Option(help="A TTF/OTF file for captions and the text mark.")]
CaptionSize = Annotated[float | None, typer.Option(help="Font size / the frame's short side.")]
Style = Annotated[str | None, typer.Option(help="clean | bold-outline | boxed | karaoke")]
StyleFile = Annotated[str | None, typer.Option(help="A brand style JSON file (docs/creators.md).")]
Profile = Annotated[str | None, typer.Option(help="landscape (1280x720) | vertical | square | portrait")]
Profiles = Annotated[
    str | None, typer.Option(help="Several shapes from one decode, e.g. landscape,vertical,square (one clip each).")
]
Fit = Annotated[
    str | None, typer.Option(help="pad (bars) | blur (blurred fill) | center (crop) | speaker (follows the face)")
]
Quality = Annotated[str | None, typer.Option(help="final | preview (half size, fast encode) | instant (copied frames)")]
EncoderPreset = Annotated[
    str | None, typer.Option(help="veryfast (default) | superfast | ultrafast: less CPU, larger files.")
]
PadBefore = Annotated[float | None, typer.Option(help="Seconds of source before the quote.")]
PadAfter = Annotated[float | None, typer.Option(help="Seconds of source after the quote.")]
NoFades = Annotated[bool, typer.Option("--no-fades", help="No 150 ms fade of the sound in and out.")]
VideoFades = Annotated[bool, typer.Option("--video-fades", help="Fade the picture from and to black too.")]
Platform = Annotated[
    str | None,
    typer.Option(
        help="shorts | reels | tiktok | x | linkedin | youtube: the app's shape, caption margins, longest clip and "
        "loudness (docs/creators.md); several, comma-separated, make one clip each from one decode."
    ),
]
Loudness = Annotated[
    str | None,
    typer.Option(help="Level the sound to this integrated loudness, LUFS (e.g. -14), or off (the default)."),
]
Tighten = Annotated[
    float | None,
    typer.Option(help="Shorten each pause inside the quote longer than this many seconds to it (e.g. 0.4)."),
]
Snap = Annotated[
    str | None,
    typer.Option(
        help="words: move the cut's ends to the nearest word boundaries of the quote's words (--transcript), and "
        "say by how much."
    ),
]
Transcript = Annotated[
    str | None,
    typer.Option(
        help="A WebVTT/SRT/JSON transcript, or `source` (the page's own captions): find --caption in it for the "
        "times and words."
    ),
]


@dataclass(frozen=True)
class ClipOptions:
    """The values of a clip command's options (None: the spec's default, or the style file's), in the order its
    help lists them."""

    source: str
    start: str | None = None
    end: str | None = None
    caption: str | None = None
    watermark: str | None = None
    watermark_position: str | None = None
    watermark_opacity: float | None = None
    watermark_size: float | None = None
    font: str | None = None
    caption_size: float | None = None
    style: str | None = None
    style_file: str | None = None
    profile: str | None = None
    profiles: str | None = None
    fit: str | None = None
    quality: str | None = None
    encoder_preset: str | None = None
    pad_before: float | None = None
    pad_after: float | None = None
    no_fades: bool = False
    video_fades: bool = False
    platform: str | None = None
    loudness: str | None = None
    tighten: float | None = None
    snap: str | None = None
    transcript: str | None = None

    @classmethod
    def given(cls, params: Mapping[str, Any]) -> ClipOptions:
        """The clip options among a command's parsed parameters (typer's ``ctx.params``: plain str, float and bool
        values, as the aliases above declare them); those a command does not take keep their defaults."""
        return cls(**{f.name: params[f.name] for f in fields(cls) if f.name in params})


# Every clip option: (parameter, type, default), in the order the help lists them; a batch takes all but PER_QUOTE.
CLIP_OPTIONS: tuple[tuple[str, Any, Any], ...] = tuple(
    (f.name, f.type, f.default) for f in fields(ClipOptions) if f.name != "source"
)
# What a batch takes from each line of its quotes file instead of the command line.
PER_QUOTE = frozenset({"start", "end", "caption"})


BRAND_FIELDS = {
    "font",
    "caption_size",
    "style",
    "watermark",
    "profile",
    "fit",
    "quality",
    "fades",
    "video_fades",
    "pad_before",
    "pad_after",
    "background",
    "profiles",
    "encoder_preset",
    "platform",
    "loudness",
    "tighten",
}


def load_brand_style(path: str) -> dict[str, Any]:
    """A brand style file: JSON with any of BRAND_FIELDS, reused across a batch of clips."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"style file not found: {path!r}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"style file cannot be read: {path!r} ({exc})") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"style file is not valid JSON: {path!r} ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise BadInput(f"style file must hold a JSON object, got {type(data).__name__}: {path!r}")
    unknown = sorted(set(data) - BRAND_FIELDS)
    if unknown:
        raise BadInput(f"style file has unknown fields {unknown} (allowed: {sorted(BRAND_FIELDS)}): {path!r}")
    if data.get("platform") is not None and data.get("profiles") is not None:  # as platform and profile are
        raise BadInput(
            f"style file names both platform and profiles: a platform sets the shape; keep one of them: {path!r}"
        )
    return data


def spec_from_options(opts: ClipOptions, settings: Settings) -> ClipSpec:
    """Options → spec data: the brand style file first, explicit options over it, a transcript for the times."""
    data: dict[str, Any] = load_brand_style(opts.style_file) if opts.style_file else {}
    data.pop("profiles", None)  # (read by specs_from_options)
    if opts.platform is not None:  # a platform given sets the shape, whatever the file's
        data.pop("profile", None)
        data["platform"] = opts.platform
    elif opts.profile is not None or opts.profiles is not None:  # a shape given: the file's platform does not apply
        data.pop("platform", None)
    if opts.loudness is not None:
        data["loudness"] = opts.loudness
    if opts.tighten is not None:
        data["tighten"] = opts.tighten
    if opts.snap is not None:
        data["snap"] = opts.snap
    data["source"] = opts.source
    given = {
        "caption": opts.caption,
        "font": opts.font,
        "caption_size": opts.caption_size,
        "profile": opts.profile,
        "fit": opts.fit,
        "quality": opts.quality,
        "pad_before": opts.pad_before,
        "pad_after": opts.pad_after,
        "encoder_preset": opts.encoder_preset,
    }
    data.update({name: value for name, value in given.items() if value is not None})
    if opts.no_fades:
        data["fades"] = False
    if opts.video_fades:
        data["video_fades"] = True
    if opts.style is not None:
        data["style"] = {**data.get("style", {}), "preset": opts.style}
    if opts.watermark:
        kind = "logo" if opts.watermark.lower().endswith(".png") else "text"
        data["watermark"] = {kind: opts.watermark}
    placing = {"position": opts.watermark_position, "opacity": opts.watermark_opacity, "size": opts.watermark_size}
    if data.get("watermark"):
        data["watermark"] = {**data["watermark"], **{k: v for k, v in placing.items() if v is not None}}
    for name in (k for k, v in placing.items() if v is not None and not data.get("watermark")):
        sys.stderr.write(
            f"quoteclip: warning: --watermark-{name} has no watermark to apply to "
            "(give --watermark, or a style file with one)\n"
        )
    if opts.transcript:
        from sources.captions import quote_found

        if not opts.caption:
            raise BadInput("caption: give the quote's text with --caption to find it in the transcript")
        found, score = quote_found(opts.caption, opts.transcript, opts.source, settings)
        data["start"] = opts.start if opts.start is not None else found["start"]
        data["end"] = opts.end if opts.end is not None else found["end"]
        data["words"] = found["words"]
        logging.getLogger("quoteclip").info("quote found in the transcript, score %.2f", score)
    else:
        for name, value in (("start", opts.start), ("end", opts.end)):
            if value is None:
                raise BadInput(f"{name}: required (or give --transcript and --caption to find the quote)")
            data[name] = value
    return build_spec(data, max_seconds=settings.max_clip_seconds, encoder_preset=settings.encoder_preset)


def specs_from_options(opts: ClipOptions, settings: Settings) -> list[ClipSpec]:
    """The clip spec, once per profile when ``--profiles`` names several (``--profile`` otherwise)."""
    if opts.platform is not None:
        if opts.profile is not None or opts.profiles is not None:
            raise BadInput("platform: a platform sets the shape; give --platform or --profile/--profiles, not both")
        try:
            names = parse_platforms(opts.platform)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
        return [spec_from_options(replace(opts, platform=name), settings) for name in names]
    spec = spec_from_options(opts, settings)
    profiles = opts.profiles
    if profiles is None and opts.style_file and spec.platform is None:  # a brand kit may name every clip's shapes
        profiles = load_brand_style(opts.style_file).get("profiles")
    return in_profiles(spec, parse_profiles(profiles)) if profiles is not None else [spec]
