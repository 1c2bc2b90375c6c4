"""Fonts that arrive with ``pip install`` (font wheels) or from a user's TTF/OTF path, with fallback by script.

A caption is drawn in runs: each character in the first font of the chain that has a glyph for it, so Latin,
CJK, Hebrew, Arabic and emoji mix in one line. A right-to-left line is shaped and ordered as a whole (raqm),
so it takes the first font that covers all of it. A character no font has is refused before rendering.

Emoji are drawn in colour: a character shown as an emoji (Unicode's emoji presentation, or any followed by U+FE0F)
that the colour emoji font the project ships has (Noto Color Emoji, CBDT bitmaps, OFL: ``quoteclip/emoji/``) is
drawn from it, with the sequences joined to it (skin tones, ZWJ sequences, flags, keycaps), and scaled to the
caption's size. The font is read only when a caption has such a character.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from .errors import BadInput

FontRef = tuple[str, int]  # path, face index (for .ttc collections)


def _files(package: str, pattern: str) -> list[Path]:
    try:
        module = __import__(package)
    except ImportError:
        return []
    root = Path(module.__file__ or "").parent
    return sorted(p for p in root.rglob(pattern) if "Italic" not in p.name)


def default_font_path() -> Path:
    found = _files("fontpkg_noto_sans", "NotoSans*.ttf")
    if not found:
        raise BadInput("the default caption font is missing; reinstall fontpkg-noto-sans")
    return found[0]


@lru_cache(maxsize=1)
def fallback_chain() -> tuple[FontRef, ...]:
    """Noto Sans, then fonts for Arabic (with Latin), Hebrew (with Latin), other scripts, symbols, emoji, CJK."""
    refs: list[FontRef] = [(str(default_font_path()), 0)]
    refs += [(str(p), 0) for p in _files("fontpkg_ibm_plex_sans_arabic", "*-Bold.ttf")]
    refs += [(str(p), 0) for p in _files("fontpkg_heebo", "*.ttf")]
    extra = _files("manimgx_fonts", "NotoSans*.ttf")
    refs += [(str(p), 0) for p in extra if not p.name.startswith(("NotoSans[", "NotoSansSymbols"))]
    refs += [(str(p), 0) for p in extra if p.name.startswith("NotoSansSymbols")]
    refs += [(str(p), 0) for p in _files("manimgx_fonts", "NotoEmoji*.ttf")]
    refs += [(str(p), 0) for p in _files("manimgx_fonts_cjk", "*.ttc")]
    return tuple(refs)


@lru_cache(maxsize=64)
def coverage(ref: FontRef) -> frozenset[int]:
    from fontTools.ttLib import TTFont

    try:
        with TTFont(ref[0], fontNumber=ref[1], lazy=True) as font:
            return frozenset(font.getBestCmap() or {})
    except Exception as exc:  # noqa: BLE001  (any parser error: not a usable font)
        raise BadInput(f"font could not be read: {ref[0]!r} ({exc})") from None


# Characters the default font (Noto Sans) is known to draw: Basic Latin, Latin-1 and Latin Extended-A. Text
# made of these alone is placed without reading the font's character map (fontTools and the cmap cost about
# 60 ms per process, a start-up cost of every render); tests check this set against the font itself.
DEFAULT_COVERS = frozenset(range(0x20, 0x7F)) | frozenset(range(0xA0, 0x180))


def covers(ref: FontRef, codepoint: int) -> bool:
    if codepoint in DEFAULT_COVERS and ref == fallback_chain()[0]:
        return True
    return codepoint in coverage(ref)


EMOJI_FONT = Path(__file__).resolve().parent / "emoji" / "NotoColorEmoji.ttf"
EMOJI_STRIKE = 109  # px: the one size a CBDT font's bitmaps come in (drawn at it, then scaled)
# Characters below U+1F000 that are shown as emoji without U+FE0F (Unicode's Emoji_Presentation=Yes there); from
# U+1F000 on, every character the colour font has is one
_BMP_EMOJI = frozenset(
    [0x231A, 0x231B, *range(0x23E9, 0x23ED), 0x23F0, 0x23F3, 0x25FD, 0x25FE, 0x2614, 0x2615, *range(0x2648, 0x2654)]
    + [0x267F, 0x2693, 0x26A1, 0x26AA, 0x26AB, 0x26BD, 0x26BE, 0x26C4, 0x26C5, 0x26CE, 0x26D4, 0x26EA, 0x26F2]
    + [0x26F3, 0x26F5, 0x26FA, 0x26FD, 0x2705, 0x270A, 0x270B, 0x2728, 0x274C, 0x274E, 0x2753, 0x2754, 0x2755]
    + [0x2757, 0x2795, 0x2796, 0x2797, 0x27B0, 0x27BF, 0x2B1B, 0x2B1C, 0x2B50, 0x2B55]
)
VS16 = "\ufe0f"  # "shown as an emoji"


def _emoji_ref() -> FontRef:
    return (str(EMOJI_FONT), 0)


def colour_emoji(text: str) -> set[int]:
    """The positions in ``text`` of characters drawn from the colour emoji font (none when it is not installed)."""
    asked = {
        k for k, ch in enumerate(text) if ord(ch) >= 0x1F000 or ord(ch) in _BMP_EMOJI or text[k + 1 : k + 2] == VS16
    }
    if not asked or not EMOJI_FONT.is_file():
        return set()
    have = coverage(_emoji_ref())  # (read here, for a caption with emoji only)
    return {k for k in asked if ord(text[k]) in have}


def _ignorable(ch: str) -> bool:
    return unicodedata.category(ch) in ("Mn", "Me", "Cf", "Zs") or ch in "\u200d\ufe0f\ufe0e"


@lru_cache(maxsize=128)
def load_font(path: str | None, size: int, weight: int = 700, index: int = 0) -> ImageFont.FreeTypeFont:
    """A font at ``size`` px; variable fonts are set to ``weight`` on their weight axis."""
    file = Path(path) if path else default_font_path()
    try:
        font = ImageFont.truetype(str(file), size=max(1, size), index=index)
    except OSError as exc:
        raise BadInput(f"font could not be loaded: {str(file)!r} ({exc})") from None
    try:
        axes = font.get_variation_axes()
    except OSError:
        return font  # a static font
    values: list[float] = []
    for axis in axes:
        raw = axis.get("name")
        name = raw.decode() if isinstance(raw, bytes) else str(raw)
        low, high = float(axis.get("minimum") or 0), float(axis.get("maximum") or 0)
        if name.lower() in {"weight", "wght"}:
            values.append(max(low, min(high, weight)))
        else:
            values.append(float(axis.get("default") or low))
    font.set_variation_by_axes(values)
    return font


class _KeptMasks(ImageFont.FreeTypeFont):
    """A loaded font whose rendered glyph masks are kept: a caption's timed states draw the same words of a page at
    the same places again and again (only their colour changes), and Pillow's ``draw.text`` renders each from the
    font every time. What ``draw.text`` gets back is what the font renders for the same arguments (the mask and its
    offset; ImageDraw only reads it), so the pixels are the same; a call it does not cover goes to the font."""

    def __init__(self, base: ImageFont.FreeTypeFont) -> None:  # (the base font's face, shared: nothing is loaded)
        self.__dict__.update(base.__dict__)
        self._base = base

    def getmask2(  # type: ignore[override]
        self,
        text: str | bytes,
        mode: str = "",
        direction: str | None = None,
        features: list[str] | None = None,
        language: str | None = None,
        stroke_width: float = 0,
        anchor: str | None = None,
        ink: int = 0,
        start: tuple[float, float] | None = None,
        *args: object,
        **kwargs: object,
    ) -> tuple[object, tuple[int, int]]:
        keyed = not args and set(kwargs) <= {"stroke_filled"} and mode != "RGBA" and isinstance(text, str)
        if not keyed:
            return self._base.getmask2(
                text, mode, direction, features, language, stroke_width, anchor, ink, start, *args, **kwargs
            )
        return _mask(
            self._base,
            str(text),
            mode,
            direction,
            tuple(features) if features is not None else None,
            language,
            stroke_width,
            bool(kwargs.get("stroke_filled", False)),
            anchor,
            ink,
            tuple(start) if start is not None else None,
        )


@lru_cache(maxsize=512)  # (a page's words in their two colours and their stroke: at most tens of KB each)
def _mask(
    font: ImageFont.FreeTypeFont,
    text: str,
    mode: str,
    direction: str | None,
    features: tuple[str, ...] | None,
    language: str | None,
    stroke_width: float,
    stroke_filled: bool,
    anchor: str | None,
    ink: int,
    start: tuple[float, float] | None,
) -> tuple[object, tuple[int, int]]:
    return font.getmask2(
        text,
        mode,
        direction,
        list(features) if features is not None else None,
        language,
        stroke_width,
        anchor,
        ink,
        start,
        stroke_filled=stroke_filled,
    )


@lru_cache(maxsize=128)
def kept_masks(font: ImageFont.FreeTypeFont) -> ImageFont.FreeTypeFont:
    """``font`` drawing through the kept masks (``_KeptMasks``)."""
    return _KeptMasks(font)


def is_rtl(text: str) -> bool:
    return any(unicodedata.bidirectional(ch) in ("R", "AL") for ch in text)


@dataclass(frozen=True)
class FontSet:
    """The fonts of a chain at one size: measure and draw text in per-character fallback runs."""

    chain: tuple[FontRef, ...]
    size: int
    weight: int

    def font(self, ref: FontRef) -> ImageFont.FreeTypeFont:
        return load_font(ref[0], self.size, self.weight, ref[1])

    @property
    def primary(self) -> ImageFont.FreeTypeFont:
        return self.font(self.chain[0])

    def missing(self, text: str) -> list[str]:
        return sorted({ch for ch in text if not _ignorable(ch) and not any(covers(r, ord(ch)) for r in self.chain)})

    def runs(self, text: str) -> list[tuple[str, FontRef]]:
        """``text`` in runs of one font each: the colour emoji font's (``_emoji_ref()``) for emoji, else the
        first font of the chain that has the character."""
        out: list[tuple[str, FontRef]] = []
        colour = colour_emoji(text)
        for k, ch in enumerate(text):
            # (a space after an emoji is the text's: the emoji font's is as wide as an emoji)
            if out and _ignorable(ch) and not (out[-1][1] == _emoji_ref() and unicodedata.category(ch) == "Zs"):
                out[-1] = (out[-1][0] + ch, out[-1][1])
                continue
            if k in colour:
                ref = _emoji_ref()
            else:
                ref = next((r for r in self.chain if covers(r, ord(ch))), self.chain[0])
            if out and out[-1][1] == ref:
                out[-1] = (out[-1][0] + ch, ref)
            else:
                out.append((ch, ref))
        return out

    def whole(self, text: str) -> FontRef | None:
        """The first font that covers all of ``text`` (for right-to-left lines, shaped as a whole)."""
        need = {ord(ch) for ch in text if not _ignorable(ch)}
        return next((r for r in self.chain if need <= coverage(r)), None)

    def length(self, text: str) -> float:
        return _length(self, text)

    def draw(
        self, image: Image.Image, x: float, baseline: float, text: str, fill: tuple[int, ...], stroke: int
    ) -> None:
        """Draw ``text`` on ``image`` with its left end at ``x`` on ``baseline`` (colour emoji composited on it)."""
        draw = ImageDraw.Draw(image)
        if is_rtl(text):
            ref = self.whole(text)
            if ref is None:
                raise BadInput(f"caption line mixes right-to-left text with characters one font cannot draw: {text!r}")
            draw.text(
                (x, baseline),
                text,
                font=kept_masks(self.font(ref)),
                fill=fill,
                anchor="ls",
                stroke_width=stroke,
                stroke_fill=(0, 0, 0, 255),
            )
            return
        for run, ref in self.runs(text):
            if ref == _emoji_ref():
                glyphs, (left, top) = _emoji_image(run, self.size)
                image.alpha_composite(glyphs, (round(x) + left, round(baseline) + top))
                x += _emoji_advance(run, self.size)
                continue
            draw.text(
                (x, baseline),
                run,
                font=kept_masks(self.font(ref)),
                fill=fill,
                anchor="ls",
                stroke_width=stroke,
                stroke_fill=(0, 0, 0, 255),
            )
            x += _advance(self.font(ref), run)


def font_set(text: str, user_font: str | None, size: int, weight: int = 700) -> FontSet:
    """The fonts for ``text``: the user's font first (if any), then the fallback chain. Refuses text with a
    character no font can draw, naming it (never tofu boxes)."""
    chain = ((user_font, 0),) if user_font else ()
    fonts = FontSet((*chain, *fallback_chain()), size, weight)
    missing = fonts.missing(text)
    if missing:
        shown = ", ".join(f"{ch!r} (U+{ord(ch):04X})" for ch in missing[:5])
        raise BadInput(f"caption has characters no installed font can draw: {shown}")
    return fonts


@lru_cache(maxsize=4096)  # (a caption's states measure the same lines and word prefixes again and again)
def _length(fonts: FontSet, text: str) -> float:
    if is_rtl(text):
        ref = fonts.whole(text)
        if ref is not None:
            return float(fonts.font(ref).getlength(text))
    return float(
        sum(
            _emoji_advance(run, fonts.size) if ref == _emoji_ref() else _advance(fonts.font(ref), run)
            for run, ref in fonts.runs(text)
        )
    )


@lru_cache(maxsize=4096)
def _advance(font: ImageFont.FreeTypeFont, run: str) -> float:
    return float(font.getlength(run))


def _emoji_advance(run: str, size: int) -> float:
    return _advance(load_font(str(EMOJI_FONT), EMOJI_STRIKE), run) * size / EMOJI_STRIKE


@lru_cache(maxsize=256)
def _emoji_image(run: str, size: int) -> tuple[Image.Image, tuple[int, int]]:
    """An emoji run in colour at ``size`` px: the font's bitmaps drawn at their own size and scaled, and where the
    image's top-left corner lies from the run's start on the baseline."""
    font = load_font(str(EMOJI_FONT), EMOJI_STRIKE)
    box = font.getbbox(run, anchor="ls")
    left, top, right, bottom = math.floor(box[0]), math.floor(box[1]), math.ceil(box[2]), math.ceil(box[3])
    drawn = Image.new("RGBA", (max(1, right - left), max(1, bottom - top)), (0, 0, 0, 0))
    ImageDraw.Draw(drawn).text((-left, -top), run, font=font, anchor="ls", embedded_color=True)
    scale = size / EMOJI_STRIKE
    width, height = max(1, round(drawn.width * scale)), max(1, round(drawn.height * scale))
    return drawn.resize((width, height), Image.Resampling.LANCZOS), (round(left * scale), round(top * scale))
