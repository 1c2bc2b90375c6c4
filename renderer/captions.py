"""Caption drawing with Pillow: pages of words, the spoken word highlighted, in the profile's safe area.

User text never enters an ffmpeg filter string: it becomes pixels here and reaches ffmpeg as PNG files (one
still, or a timed sequence read through a concat list that names only files written here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from PIL import Image, ImageDraw

from quoteclip.fonts import FontSet, font_set, is_rtl
from quoteclip.spec import CaptionStyle, Word

from .timing import Page, paginate

MAX_WIDTH = 0.88  # of the frame width
LINE_SPACING = 1.22
# Bottom margin (lower safe area) by profile: phone apps cover the bottom of vertical video with their UI.
BOTTOM_SAFE = {"landscape": 0.07, "vertical": 0.2, "square": 0.1, "portrait": 0.14}
TOP_SAFE = {"landscape": 0.07, "vertical": 0.12, "square": 0.08, "portrait": 0.1}
MAX_CHARS = {"landscape": 32, "vertical": 22, "square": 24, "portrait": 24}
TRANSPARENT = (0, 0, 0, 0)
# The caption images cover the columns the pages can reach, not the frame's width: ffmpeg blends every pixel of an
# overlay into every frame, transparent or not (a full-width band took a few percent of a 720p render's ffmpeg time).
# The band starts on a multiple of BAND_ALIGN (even: chroma is subsampled by 2) and keeps a transparent margin of
# at least BAND_MARGIN px beyond the widest page's box and strokes (wider than the chroma filter's reach), so the
# frames come out bit-identical to a full-width band's (tests/test_render.py). A drawn state that reaches the
# band's edge anyway (a font's glyphs overhanging far) has the captions drawn again at the frame's width.
BAND_ALIGN = 16
BAND_MARGIN = 16
STROKE = {"clean": 0.05, "bold-outline": 0.11, "boxed": 0.04, "karaoke": 0.08}


@dataclass(frozen=True)
class State:
    """One caption state: a page with one word (or none) highlighted, and when it shows (clip seconds)."""

    page: int
    current: int | None
    start: float
    end: float


@dataclass(frozen=True)
class CaptionTrack:
    """The layout of the captions. Its images are drawn one at a time (``image``) and written as they are drawn,
    so memory does not grow with the number of words."""

    states: list[State]
    x: int
    y: int
    pages: list[Page]
    words: list[Word]
    font: FontSet
    style: CaptionStyle
    # the caption band: the columns x … x + width the pages reach × the lines' height, not the whole frame
    canvas: tuple[int, int]
    metrics: tuple[int, int, int, int]  # line height, horizontal and vertical padding, font size (px)
    frame_width: int  # the frame's (the lines are centred in it)

    def image(self, state: State) -> Image.Image:
        line_h, pad_x, pad_y, px = self.metrics
        return _draw(
            self.pages[state.page],
            self.words,
            state.current,
            self.font,
            self.style,
            self.canvas,
            line_h,
            pad_x,
            pad_y,
            px,
            self.x,
            self.frame_width,
        )

    def line_reach(self) -> list[tuple[float, str, float]]:
        """Each page's lines as drawn: when the page shows (clip seconds), the line's text, and how far it reaches
        either side of the frame's centre (px, its box padding and stroke included)."""
        _, pad_x, _, px = self.metrics
        edge = pad_x + _stroke_px(self.style, px)
        return [
            (page.start, text, self.font.length(text) / 2 + edge)
            for page in self.pages
            for text in _line_texts(page, self.words, self.style)
        ]

    def full_width(self) -> CaptionTrack:
        """The same captions on a band as wide as the frame."""
        return replace(self, x=0, canvas=(self.frame_width, self.canvas[1]))

    def reaches_edge(self, image: Image.Image) -> bool:
        """Whether a drawn state touches a side of the band that is not the frame's (it may have been cut)."""
        alpha = image.getchannel("A")
        width, height = image.size
        left = self.x > 0 and alpha.crop((0, 0, 1, height)).getbbox() is not None
        right = self.x + width < self.frame_width and alpha.crop((width - 1, 0, width, height)).getbbox()
        return bool(left or right)


def _rgba(hex_color: str, alpha: int = 255) -> tuple[int, int, int, int]:
    h = hex_color.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16), alpha


def caption_track(
    words: list[Word],
    frame: tuple[int, int],
    profile: str,
    size: float,
    style: CaptionStyle,
    font_path: str | None,
    highlight: bool,
    duration: float,
) -> CaptionTrack | None:
    """Lay the words out in pages and draw every state (page × highlighted word) on one fixed-size canvas."""
    if not words:
        return None
    width, height = frame
    px = max(10, round(size * min(width, height)))
    text = " ".join(w.text for w in words)
    font = font_set(text, font_path, px, weight=800 if style.preset == "bold-outline" else 700)
    max_w = MAX_WIDTH * width
    if style.right_safe is not None:  # centred lines (boxes and strokes included) clear of the right margin
        max_w = min(max_w, width * (1 - 2 * style.right_safe) - 2 * (round(px * 0.45) + _stroke_px(style, px)))
    pages = paginate(words, font.length, max_w, MAX_CHARS.get(profile, 32), style.max_lines, duration)
    line_h = round(px * LINE_SPACING)
    pad_x, pad_y = round(px * 0.45), round(px * 0.25)
    canvas_h = style.max_lines * line_h + 2 * pad_y
    if style.position == "bottom":
        bottom = style.bottom_safe if style.bottom_safe is not None else BOTTOM_SAFE.get(profile, 0.07)
        y = height - round(bottom * height) - canvas_h
    elif style.position == "top":
        y = round(TOP_SAFE.get(profile, 0.07) * height)
    else:
        y = (height - canvas_h) // 2
    states: list[State] = []
    for n, page in enumerate(pages):
        spans = _word_spans(page, words) if highlight and style.preset != "clean" else [(None, page.start, page.end)]
        states += [State(n, current, start, end) for current, start, end in spans]
    widest = max(font.length(text) for page in pages for text in _line_texts(page, words, style))
    reach = widest / 2 + pad_x + _stroke_px(style, px) + max(BAND_MARGIN, px // 2)
    left = max(0, math.floor((width / 2 - reach) / BAND_ALIGN) * BAND_ALIGN)
    right = min(width, math.ceil((width / 2 + reach) / BAND_ALIGN) * BAND_ALIGN)
    return CaptionTrack(
        states, left, max(0, y), pages, words, font, style, (right - left, canvas_h), (line_h, pad_x, pad_y, px), width
    )


def _line_texts(page: Page, words: list[Word], style: CaptionStyle) -> list[str]:
    return [" ".join(_shown(words[i].text, style) for i in line) for line in page.lines]


def _stroke_px(style: CaptionStyle, px: int) -> int:
    return max(1, round(px * STROKE[style.preset]))


def _word_spans(page: Page, words: list[Word]) -> list[tuple[int | None, float, float]]:
    indices = page.words
    out: list[tuple[int | None, float, float]] = []
    for n, i in enumerate(indices):
        start = page.start if n == 0 else words[i].start
        end = words[indices[n + 1]].start if n + 1 < len(indices) else page.end
        if end > start:
            out.append((i, start, end))
    return out


def _draw(
    page: Page,
    words: list[Word],
    current: int | None,
    font: FontSet,
    style: CaptionStyle,
    canvas: tuple[int, int],
    line_h: int,
    pad_x: int,
    pad_y: int,
    px: int,
    band_x: int,
    frame_width: int,
) -> Image.Image:
    """One state on the band (columns ``band_x`` … of a frame ``frame_width`` wide): every x is the frame's less
    ``band_x``, an even whole number, so the pixels are the full-width drawing's."""
    img = Image.new("RGBA", canvas, TRANSPARENT)
    draw = ImageDraw.Draw(img)
    color, accent = _rgba(style.color), _rgba(style.highlight)
    stroke_px = _stroke_px(style, px)
    texts = _line_texts(page, words, style)
    widths = [font.length(t) for t in texts]
    ascent, descent = font.primary.getmetrics()
    top = pad_y + (len(page.lines) < style.max_lines) * (style.max_lines - len(page.lines)) * line_h
    if style.preset == "boxed":
        box_w = max(widths) + 2 * pad_x
        x0 = (frame_width - box_w) / 2 - band_x
        draw.rounded_rectangle(
            (x0, top - pad_y, x0 + box_w, top + len(page.lines) * line_h + pad_y),
            radius=round(px * 0.3),
            fill=_rgba(style.box, 160),
        )
    for n, (line, text, line_w) in enumerate(zip(page.lines, texts, widths, strict=True)):
        cy = top + n * line_h + line_h // 2
        baseline = cy + (ascent - descent) / 2
        left = (frame_width - line_w) / 2 - band_x
        shown = lit(line, text, current, style)
        if is_rtl(text) or current is None:
            # Right-to-left lines are shaped and ordered as a whole (raqm); they are not split into words.
            font.draw(img, left, baseline, text, accent if shown else color, stroke_px)
            continue
        for k, i in enumerate(line):
            word = _shown(words[i].text, style)
            prefix = " ".join(_shown(words[j].text, style) for j in line[:k])
            x = left + (font.length(prefix + " ") if prefix else 0)
            fill = accent if i in shown else color
            if i in shown and style.preset == "boxed":
                w = font.length(word)
                draw.rounded_rectangle(
                    (x - px * 0.12, cy - line_h * 0.45, x + w + px * 0.12, cy + line_h * 0.45),
                    radius=round(px * 0.2),
                    fill=accent,
                )
                fill = (0, 0, 0, 255)
            font.draw(img, x, baseline, word, fill, stroke_px)
    return img


def lit(line: tuple[int, ...], text: str, current: int | None, style: CaptionStyle) -> set[int]:
    """The words of a line (``text``, as shown) drawn in the highlight colour while word ``current`` is spoken: that
    word, and with karaoke the words before it. A right-to-left line is drawn whole: all its words or none."""
    if current is None:
        return set()
    if is_rtl(text):
        return set(line) if style.preset == "karaoke" and current >= line[-1] else set()
    return {i for i in line if i == current or (style.preset == "karaoke" and i < current)}


def _shown(text: str, style: CaptionStyle) -> str:
    return text.upper() if style.uppercase else text


# A caption's timed states are written as PAM up to this many bytes in all, else as PNG (compressed: the states
# of a long word-highlighted clip would otherwise take gigabytes of temp space)
STATE_BYTES = 16 * 1024**2
TIME_BASE = 1000  # ticks a second of the timed states' stream: the states' times are whole milliseconds


def write_track(track: CaptionTrack, workdir: Path, duration: float) -> tuple[str, bool, CaptionTrack]:
    """Files for ffmpeg (images: ``write_pam``): one still when the caption never changes, else timed states and a
    concat list (relative names only, so the list can name nothing outside ``workdir``). Returns (path,
    is_sequence, the track as drawn: ``track``, or the same at the frame's width when a state reached the band's
    edge)."""
    try:
        return *_write_track(track, workdir, duration), track
    except _ReachedEdge:
        wide = track.full_width()
        return *_write_track(wide, workdir, duration), wide


class _ReachedEdge(Exception):
    pass


def _drawn(track: CaptionTrack, state: State) -> Image.Image:
    image = track.image(state)
    if track.reaches_edge(image):
        raise _ReachedEdge
    return image


def _write_track(track: CaptionTrack, workdir: Path, duration: float) -> tuple[str, bool]:
    if len(track.states) == 1 and track.states[0].start <= 0.0 and track.states[0].end >= duration - 0.001:
        path = workdir / "caption.pam"
        write_pam(_drawn(track, track.states[0]), path)
        return str(path), False
    width, height = track.canvas
    raw = (len(track.states) + 1) * width * height * 4 <= STATE_BYTES
    ext, write = (".pam", write_pam) if raw else (".png", _write_png)
    write(Image.new("RGBA", track.canvas, TRANSPARENT), workdir / f"c-blank{ext}")
    lines = ["ffconcat version 1.0"]
    t = 0.0

    def timed(name: str, seconds: float) -> list[str]:
        # each image read on a millisecond clock: the list's stream takes the first file's time base, and the
        # image demuxers' own (1/25 s) moved each state's start to the nearest 40 ms, a frame early or late
        return [f"file '{name}'", f"option framerate {TIME_BASE}", f"duration {seconds:.3f}"]

    for n, state in enumerate(track.states):
        if state.start > t + 0.0005:
            lines += timed(f"c-blank{ext}", state.start - t)
        name = f"c-{n:04d}{ext}"
        write(_drawn(track, state), workdir / name)  # drawn, written, let go
        lines += timed(name, state.end - state.start)
        t = state.end
    lines += timed(f"c-blank{ext}", max(0.04, duration - t + 1))
    path = workdir / "captions.ffconcat"
    path.write_text("\n".join(lines) + "\n")
    return str(path), True


def _write_png(image: Image.Image, path: Path) -> None:
    image.save(path, compress_level=1)


def write_pam(image: Image.Image, path: Path) -> None:
    """An overlay image as a PAM file: its RGBA pixels as they are behind a short header, which ffmpeg reads as
    an image. The same pixels a PNG holds, with nothing to compress here or inflate in ffmpeg, and Pillow's
    file plugins never loaded (a cold render's captions were drawn about 15 ms sooner)."""
    rgba = image if image.mode == "RGBA" else image.convert("RGBA")
    width, height = rgba.size
    header = f"P7\nWIDTH {width}\nHEIGHT {height}\nDEPTH 4\nMAXVAL 255\nTUPLTYPE RGB_ALPHA\nENDHDR\n"
    with open(path, "wb") as out:
        out.write(header.encode("ascii"))
        out.write(rgba.tobytes())
