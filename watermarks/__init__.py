"""Brand marks rendered with Pillow: a text mark or a PNG logo, sized to the output, in a corner."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw, UnidentifiedImageError

from quoteclip.errors import BadInput
from quoteclip.fonts import load_font
from quoteclip.spec import WatermarkSpec

MAX_LOGO_PIXELS = 4096 * 4096
WIDE = 4  # a logo drawn wider than this many times its box at the mark's height is scaled into the box at once

__all__ = ["watermark_image"]


def watermark_image(
    mark: WatermarkSpec, frame: tuple[int, int], font_path: str | None = None
) -> tuple[Image.Image, tuple[int, int]]:
    """The mark as an RGBA image (opacity applied) and its top-left position in the frame."""
    width, height = frame
    short = min(width, height)  # sizes follow the short side, so a vertical frame gets the same mark
    target_h = max(8, round(mark.size * short))
    img = _logo(mark.logo, (width // 2, target_h)) if mark.logo else _text(mark.text or "", target_h, font_path)
    if img.width > width // 2:  # never cover more than half the frame width
        img = img.resize((width // 2, max(1, round(img.height * (width // 2) / img.width))), Image.Resampling.LANCZOS)
    alpha = img.getchannel("A").point(lambda a: round(a * mark.opacity))
    img.putalpha(alpha)
    margin = round(mark.margin * short)
    x = margin if mark.position.endswith("left") else width - margin - img.width
    y = margin if mark.position.startswith("top") else height - margin - img.height
    return img, (max(0, x), max(0, y))


def _text(text: str, target_h: int, font_path: str | None) -> Image.Image:
    font = load_font(font_path, target_h, weight=800)
    left, top, right, bottom = font.getbbox(text, anchor="ls")
    shadow = max(1, target_h // 16)
    w, h = int(right - left) + 2 * shadow + 2, int(bottom - top) + 2 * shadow + 2
    img = Image.new("RGBA", (w, h), (0, 0, 0, 0))
    draw = ImageDraw.Draw(img)
    origin = (-left + 1, -top + 1)
    draw.text((origin[0] + shadow, origin[1] + shadow), text, font=font, fill=(0, 0, 0, 160), anchor="ls")
    draw.text(origin, text, font=font, fill=(255, 255, 255, 255), anchor="ls")
    return img


def _logo(path: str, box: tuple[int, int]) -> Image.Image:
    """The logo scaled to the mark's height (``box``: at most half the frame's width, the mark's height). Its drawn
    size is bounded by the frame whatever its aspect: a logo that would be drawn more than ``WIDE`` times the box's
    width at that height (a 4096×1 PNG would be 884736 px wide) is scaled into the box at once; any other is drawn
    at the mark's height first (the caller narrows it to the box), the clips it has always made."""
    file = Path(path)
    if not file.is_file():
        raise BadInput(f"watermark.logo not found: {path!r}")
    try:
        with Image.open(file) as src:
            if src.format != "PNG":
                raise BadInput(f"watermark.logo must be a PNG image, got {src.format} in {path!r}")
            if src.width * src.height > MAX_LOGO_PIXELS:
                raise BadInput(f"watermark.logo is too large ({src.width}x{src.height}): {path!r}")
            logo = src.convert("RGBA")
    except (UnidentifiedImageError, OSError):
        raise BadInput(f"watermark.logo is not a readable PNG: {path!r}") from None
    width, height = box
    if logo.width * height <= WIDE * width * logo.height:
        return logo.resize((max(1, round(logo.width * height / logo.height)), height), Image.Resampling.LANCZOS)
    scale = min(height / logo.height, width / logo.width)
    size = (max(1, min(width, round(logo.width * scale))), max(1, min(height, round(logo.height * scale))))
    return logo.resize(size, Image.Resampling.LANCZOS)
