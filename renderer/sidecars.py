"""Files that go with a clip: SRT and WebVTT captions (clip time), a poster JPEG, a JSON manifest."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

from PIL import Image

from quoteclip.spec import ClipSpec

from .captions import CaptionTrack, lit
from .render import caption_layout, cut_for


def _stamp(seconds: float, sep: str) -> str:
    ms = round(seconds * 1000)
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def _cues(track: CaptionTrack) -> list[tuple[float, float, str]]:
    return [
        (page.start, page.end, "\n".join(" ".join(track.words[i].text for i in line) for line in page.lines))
        for page in track.pages
    ]


def to_srt(track: CaptionTrack) -> str:
    blocks = [f"{n}\n{_stamp(a, ',')} --> {_stamp(b, ',')}\n{text}\n" for n, (a, b, text) in enumerate(_cues(track), 1)]
    return "\n".join(blocks)


def to_vtt(track: CaptionTrack) -> str:
    """The captions as the clip shows them: a cue per caption state (a page, and while each word is spoken the same
    page with that word in a ``hl`` class, styled in the highlight colour by the file's STYLE block), at the
    states' times; a page that is never highlighted is one cue."""
    highlighted = any(state.current is not None for state in track.states)
    head = "WEBVTT\n\n" + (_vtt_style(track) if highlighted else "")
    blocks = [f"{_stamp(a, '.')} --> {_stamp(b, '.')}\n{text}\n" for a, b, text in vtt_cues(track)]
    return head + "\n".join(blocks)


def vtt_cues(track: CaptionTrack) -> list[tuple[float, float, str]]:
    """(start, end, cue text) of each caption state, the text in WebVTT's markup (lines by newlines, the lit words
    in ``<c.hl>``), from the layout the render draws (``renderer.captions.lit``)."""
    cues = []
    for state in track.states:
        page = track.pages[state.page]
        lines = []
        for line in page.lines:
            shown = lit(line, " ".join(track.words[i].text for i in line), state.current, track.style)
            lines.append(" ".join(_vtt_word(track.words[i].text, i in shown) for i in line))
        cues.append((state.start, state.end, "\n".join(lines)))
    return cues


def _vtt_word(text: str, lit: bool) -> str:
    escaped = _vtt_text(text)
    return f"<c.hl>{escaped}</c>" if lit else escaped


def _vtt_style(track: CaptionTrack) -> str:
    colour = track.style.highlight  # (#rrggbb: the spec allows nothing else)
    if track.style.preset == "boxed":  # the spoken word on a box of the highlight colour, in black
        rule = f"color: #000000; background-color: {colour};"
    else:
        rule = f"color: {colour};"
    return f"STYLE\n::cue(.hl) {{ {rule} }}\n\n"


def _vtt_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("-->", "→")


def burned_caption(track: CaptionTrack | None) -> dict[str, Any] | None:
    """The caption as the clip burns it, for the manifest: its words (those the cut holds) and its pages (clip
    seconds, the lines as laid out)."""
    if track is None:
        return None
    return {
        "text": " ".join(track.words[i].text for page in track.pages for i in page.words),
        "pages": [{"start": a, "end": b, "lines": text.split("\n")} for a, b, text in _cues(track)],
    }


def poster(path: Path, at: float) -> bytes:
    """A JPEG of the clip's frame at ``at`` seconds (decoded from the rendered file, no extra ffmpeg run)."""
    import av

    with av.open(str(path)) as container:
        frame = None
        for frame in container.decode(video=0):
            if (frame.time or 0.0) >= at:
                break
        if frame is None:
            return b""
        image: Image.Image = frame.to_image()
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=85)
    return out.getvalue()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def manifest(**fields: Any) -> bytes:
    return json.dumps(fields, indent=1, sort_keys=True, default=str).encode()


def captions_vtt(spec: ClipSpec) -> bytes:
    """The WebVTT captions of ``spec``'s clip made from the spec alone (no source read, no render): the captions the
    render lays out and draws for the cut the quote asks for (a quote cut short by the video's end keeps its
    cues), as the render stores them beside the clip; a clip without a caption has an empty file. Nothing is
    drawn: where the images are placed (a band, or the frame's width) changes no page, word or time."""
    track = caption_layout(spec, cut_for(spec, None))
    return b"WEBVTT\n" if track is None else to_vtt(track).encode()
