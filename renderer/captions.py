"""Caption layout with Pillow: wrap to the frame width, shrink to fit, draw on a box in the lower safe area.

User text never enters an ffmpeg filter string: it becomes pixels here and reaches ffmpeg as a PNG.
"""

from __future__ import annotations

from PIL import Image, ImageDraw, ImageFont

from quoteclip.fonts import load_font

MAX_WIDTH = 0.88  # of the frame width
MAX_BLOCK_HEIGHT = 0.38  # of the frame height
BOTTOM_MARGIN = 0.07  # of the frame height (lower safe area)
MIN_SIZE = 0.025  # smallest font size, of the frame height
LINE_SPACING = 1.18
BOX_RGBA = (0, 0, 0, 150)
TEXT_RGBA = (255, 255, 255, 255)


def wrap(text: str, font: ImageFont.FreeTypeFont, max_width: float) -> list[str]:
    """Greedy word wrap by measured width; a word wider than a line (CJK runs, URLs) breaks by character."""
    lines: list[str] = []
    for paragraph in text.splitlines() or [""]:
        line = ""
        for word in paragraph.split():
            pieces = [word] if font.getlength(word) <= max_width else _split_long(word, font, max_width)
            for piece in pieces:
                candidate = f"{line} {piece}" if line else piece
                if font.getlength(candidate) <= max_width or not line:
                    line = candidate
                else:
                    lines.append(line)
                    line = piece
        if line:
            lines.append(line)
    return lines


def _split_long(word: str, font: ImageFont.FreeTypeFont, max_width: float) -> list[str]:
    pieces, current = [], ""
    for ch in word:
        if current and font.getlength(current + ch) > max_width:
            pieces.append(current)
            current = ch
        else:
            current += ch
    if current:
        pieces.append(current)
    return pieces


def caption_image(
    text: str, frame: tuple[int, int], size: float, font_path: str | None = None
) -> tuple[Image.Image, tuple[int, int]] | None:
    """The caption as an RGBA image and its top-left position in a frame of ``frame`` (w, h) pixels."""
    if not text.strip():
        return None
    width, height = frame
    px = max(8, round(size * height))
    min_px = max(8, round(MIN_SIZE * height))
    while True:
        font = load_font(font_path, px)
        lines = wrap(text, font, MAX_WIDTH * width)
        line_h = round(px * LINE_SPACING)
        if line_h * len(lines) <= MAX_BLOCK_HEIGHT * height or px <= min_px:
            break
        px = max(min_px, round(px * 0.9))
    pad_x, pad_y = round(px * 0.5), round(px * 0.3)
    stroke = max(1, round(px * 0.06))
    text_w = max(round(font.getlength(line)) for line in lines)
    box_w = min(width, text_w + 2 * pad_x)
    box_h = min(round(MAX_BLOCK_HEIGHT * height * 1.3), line_h * len(lines) + 2 * pad_y)
    img = Image.new("RGBA", (box_w, box_h), (0, 0, 0, 0))
    draw = ImageDraw.Draw(img)
    draw.rounded_rectangle((0, 0, box_w - 1, box_h - 1), radius=round(px * 0.35), fill=BOX_RGBA)
    for i, line in enumerate(lines):
        y = pad_y + i * line_h + line_h // 2
        draw.text(
            (box_w // 2, y),
            line,
            font=font,
            fill=TEXT_RGBA,
            anchor="mm",
            stroke_width=stroke,
            stroke_fill=(0, 0, 0, 255),
        )
    x = (width - box_w) // 2
    y = height - round(BOTTOM_MARGIN * height) - box_h
    return img, (x, max(0, y))
