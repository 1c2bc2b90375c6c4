"""Caption timing: words with clip times (given, or spread over the clip by length), grouped into short pages.

Pure functions of text, times and a measuring function: no images here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from quoteclip.spec import Word

PHRASE_END = re.compile(r"[,.;:!?…—–)\]\"'»”。、，！？；：]$")
SENTENCE_END = re.compile(r"[.!?…。！？]$")
GAP_HIDE = 1.0  # seconds of silence after which a page is taken off the screen
HOLD = 0.6  # seconds a page stays after its last word when nothing follows


@dataclass(frozen=True)
class Page:
    lines: tuple[tuple[int, ...], ...]  # indices into the word list, per line
    start: float
    end: float

    @property
    def words(self) -> tuple[int, ...]:
        return tuple(i for line in self.lines for i in line)


def clip_words(words: Sequence[Word], clip_start: float, clip_end: float) -> list[Word]:
    """Source-time words → clip-time words, keeping those that overlap the clip."""
    out = []
    for w in words:
        if w.end <= clip_start or w.start >= clip_end or not w.text.strip():
            continue
        start = round(max(0.0, w.start - clip_start), 3)
        out.append(Word(w.text.strip(), start, max(start, round(min(clip_end, w.end) - clip_start, 3))))
    return out


def paginate(
    words: Sequence[Word],
    measure: Callable[[str], float],
    max_width: float,
    max_chars: int = 32,
    max_lines: int = 2,
    clip_duration: float | None = None,
) -> list[Page]:
    """Group words into pages of at most ``max_lines`` lines, each at most ``max_chars`` characters and
    ``max_width`` wide by ``measure``; lines and pages prefer to break at phrase and sentence ends."""
    pages: list[Page] = []
    lines: list[list[int]] = []
    line: list[int] = []

    def text_of(indices: list[int]) -> str:
        return " ".join(words[i].text for i in indices)

    def close_page() -> None:
        nonlocal lines, line
        if line:
            lines.append(line)
        if lines:
            first, last = lines[0][0], lines[-1][-1]
            pages.append(Page(tuple(tuple(li) for li in lines), words[first].start, words[last].end))
        lines, line = [], []

    for i, word in enumerate(words):
        candidate = text_of([*line, i])
        if line and (len(candidate) > max_chars or measure(candidate) > max_width):
            lines.append(line)
            line = []
            if len(lines) >= max_lines:
                lines_done, lines = lines, []
                pages.append(
                    Page(
                        tuple(tuple(li) for li in lines_done),
                        words[lines_done[0][0]].start,
                        words[lines_done[-1][-1]].end,
                    )
                )
        line.append(i)
        current = text_of(line)
        if SENTENCE_END.search(word.text) and (len(lines) == max_lines - 1 or len(current) >= max_chars // 2):
            close_page()
        elif PHRASE_END.search(word.text) and len(current) >= max_chars * 0.6:
            lines.append(line)
            line = []
            if len(lines) >= max_lines:
                close_page()
    close_page()
    return _settle(pages, clip_duration)


def _settle(pages: list[Page], clip_duration: float | None) -> list[Page]:
    """Each page stays until the next one starts (unless the pause is long), or a short hold after its last word."""
    out = []
    for n, page in enumerate(pages):
        nxt = pages[n + 1].start if n + 1 < len(pages) else None
        if nxt is not None and nxt - page.end <= GAP_HIDE:
            end = nxt
        else:
            end = page.end + HOLD
            if nxt is not None:
                end = min(end, nxt)
        if clip_duration is not None:
            end = min(end, clip_duration)
        out.append(Page(page.lines, page.start, round(max(end, page.start + 0.05), 3)))
    return out
