"""Emoji in captions are drawn in colour from the font the project ships (quoteclip/emoji/), checked by pixels; text
without emoji is drawn as without that font, and the font is not read for it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mediacheck import rgb_frame

from jobs.pipeline.produce import produce_clip
from quoteclip import fonts
from quoteclip.spec import CaptionStyle, build_spec
from quoteclip.transcript import spread
from renderer.captions import caption_track
from storage import LocalStorage


def saturated(rgb: np.ndarray) -> np.ndarray:
    """Where a picture is strongly coloured (not white, grey, black or the text's colours)."""
    rgb = rgb.astype(np.int16)
    return (rgb.max(axis=-1) - rgb.min(axis=-1)) > 90


def states(text: str, preset: str = "bold-outline") -> list[np.ndarray]:
    fonts._length.cache_clear()  # (lengths are kept per font set and text: with and without the emoji font)
    track = caption_track(
        spread(text, 0.0, 3.0), (1280, 720), "landscape", 0.055, CaptionStyle(preset=preset), None, True, 3.0
    )
    assert track is not None
    return [np.asarray(track.image(state)) for state in track.states]


def without_colour_font(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(fonts, "EMOJI_FONT", tmp_path / "absent.ttf")


def test_emoji_are_drawn_in_colour_where_they_stand(monkeypatch, tmp_path) -> None:
    text = "Fire 🔥 on the roof 👍🏽 and a flag 🇫🇷 ❤️"
    track = caption_track(
        spread(text, 0.0, 3.0), (1280, 720), "landscape", 0.055, CaptionStyle(preset="clean"), None, False, 3.0
    )
    assert track is not None and len(track.pages) == 1
    image = np.asarray(track.image(track.states[0]))
    coloured = saturated(image[..., :3]) & (image[..., 3] > 200)
    assert coloured.sum() > 4 * 40 * 40 * 0.3  # four emoji of about 40 px, each mostly coloured
    # the fire is where the layout puts it: after "Fire " on the first line, centred in the frame
    line = " ".join(track.words[i].text for i in track.pages[0].lines[0])
    left = (1280 - track.font.length(line)) / 2 - track.x + track.font.length("Fire ")
    right = left + track.font.length("🔥")
    columns = np.nonzero(coloured[:, : int(right) + 2].any(axis=0))[0]
    assert columns.size and left - 2 <= columns.min() and columns.max() <= right + 2
    without_colour_font(monkeypatch, tmp_path)
    plain = caption_track(
        spread(text, 0.0, 3.0), (1280, 720), "landscape", 0.055, CaptionStyle(preset="clean"), None, False, 3.0
    )
    assert plain is not None
    mono = np.asarray(plain.image(plain.states[0]))
    assert (saturated(mono[..., :3]) & (mono[..., 3] > 200)).sum() < 50  # the monochrome emoji font's, in white


TEXTS = ["Plain words, as they were.", "中文字幕 great ★ and ☀", "مرحبا بالعالم", "שלום עולם and more"]


@pytest.mark.parametrize("text", TEXTS)
def test_text_without_emoji_is_drawn_as_without_the_colour_font(monkeypatch, tmp_path, text) -> None:
    """Every state of a caption with no emoji has the pixels it has when the colour emoji font is not there, and
    the font is not read for it (a file that is no font would be refused if it were)."""
    with_font = states(text)
    broken = tmp_path / "not-a-font.ttf"
    broken.write_bytes(b"not a font")
    monkeypatch.setattr(fonts, "EMOJI_FONT", broken)
    fonts.coverage.cache_clear()
    unread = states(text)
    without_colour_font(monkeypatch, tmp_path)
    without = states(text)
    for n, (a, b, c) in enumerate(zip(with_font, unread, without, strict=True)):
        assert np.array_equal(a, c) and np.array_equal(b, c), f"state {n}"


def test_a_rendered_caption_shows_its_emoji_in_colour(media, settings) -> None:
    """In the rendered clip's frames: coloured pixels in the caption band, where white text alone has none."""
    src = media(size="320x180", duration=3, gop=60, pattern="black")
    spec = build_spec(
        {
            "source": str(src),
            "start": 0.5,
            "end": 2.0,
            "caption": "so hot 🔥🔥",
            "fades": False,
            "quality": "preview",
            "style": {"preset": "clean"},
        }
    )
    frame = rgb_frame(Path(str(produce_clip(spec, settings, LocalStorage(settings.storage_dir)).path)), 0.5)
    band = frame[frame.shape[0] // 2 :]
    assert saturated(band).sum() > 2 * 20 * 20 * 0.3, saturated(band).sum()  # two emoji of about 20 px
