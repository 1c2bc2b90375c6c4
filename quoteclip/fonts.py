"""Fonts that arrive with ``pip install`` (fontpkg wheels) or from a user's TTF/OTF path."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from PIL import ImageFont

from .errors import BadInput


def default_font_path() -> Path:
    import fontpkg_noto_sans

    root = Path(fontpkg_noto_sans.ROOT) / "files"
    upright = sorted(p for p in root.glob("*.ttf") if "Italic" not in p.name)
    if not upright:
        raise BadInput(f"the default caption font is missing from {root}; reinstall fontpkg-noto-sans")
    return upright[0]


@lru_cache(maxsize=64)
def load_font(path: str | None, size: int, weight: int = 700) -> ImageFont.FreeTypeFont:
    """A font at ``size`` px; variable fonts are set to ``weight`` on their ``wght`` axis."""
    file = Path(path) if path else default_font_path()
    try:
        font = ImageFont.truetype(str(file), size=max(1, size))
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
