"""Files that go with a clip: SRT and WebVTT captions (clip time), a poster JPEG, a JSON manifest."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from PIL import Image

from quoteclip.media import TEMP_PREFIX
from quoteclip.spec import ClipSpec

from .captions import CaptionTrack, write_track
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
    blocks = [f"{_stamp(a, '.')} --> {_stamp(b, '.')}\n{_vtt_text(text)}\n" for a, b, text in _cues(track)]
    return "WEBVTT\n\n" + "\n".join(blocks)


def _vtt_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("-->", "→")


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
    cues), as the render stores them beside the clip; a clip without a caption has an empty file."""
    cut = cut_for(spec, None)
    track = caption_layout(spec, cut)
    if track is None:
        return b"WEBVTT\n"
    with tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{os.getpid()}-") as tmp:
        _, _, drawn = write_track(track, Path(tmp), cut[1])  # (a caption reaching the band's edge is laid out wider)
    return to_vtt(drawn).encode()
