"""Captions, formats and previews, checked on rendered pixels and files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mediacheck import gray_frames, rgb_frame, streams
from PIL import Image, ImageDraw, ImageFont

from jobs.pipeline.produce import produce_clip
from quoteclip.errors import BadInput
from quoteclip.fonts import font_set
from quoteclip.settings import Settings
from quoteclip.spec import CaptionStyle, Word, build_spec
from quoteclip.transcript import spread
from renderer.captions import caption_track, write_track
from renderer.timing import paginate
from storage import LocalStorage
from testkit.media import ffmpeg, lavfi

WORDS = [
    {"text": "one", "start": 1.0, "end": 1.5},
    {"text": "two", "start": 1.5, "end": 2.0},
    {"text": "three", "start": 2.0, "end": 2.6},
]


def render(settings: Settings, **fields: object) -> Path:
    result = produce_clip(build_spec(fields), settings, LocalStorage(settings.storage_dir))
    assert result.path is not None
    return Path(result.path)


def yellow_x(frame: np.ndarray, rows: slice) -> float | None:
    region = frame[rows]
    mask = (region[..., 0] > 200) & (region[..., 1] > 170) & (region[..., 2] < 90)
    xs = np.nonzero(mask)[1]
    return float(xs.mean()) if xs.size > 50 else None


@pytest.mark.slow
def test_highlighted_word_moves_at_the_word_times(media, settings) -> None:
    src = media(size="320x180", duration=4, gop=60, pattern="black")
    out = render(
        settings, source=str(src), start=1.0, end=2.6, words=WORDS, fades=False, style={"preset": "bold-outline"}
    )
    rows = slice(400, 720)
    xs = [yellow_x(rgb_frame(out, t), rows) for t in (0.2, 0.7, 1.3)]
    assert all(x is not None for x in xs), xs
    assert xs[0] < xs[1] < xs[2]  # one → two → three, left to right


def test_karaoke_keeps_spoken_words_lit(media, settings) -> None:
    src = media(size="320x180", duration=4, gop=60, pattern="black")
    out = render(
        settings,
        source=str(src),
        start=1.0,
        end=2.6,
        words=WORDS,
        fades=False,
        style={"preset": "karaoke", "highlight": "#FFD400"},
    )

    def lit(t: float) -> int:
        region = rgb_frame(out, t)[400:720]
        return int(((region[..., 0] > 200) & (region[..., 1] > 170) & (region[..., 2] < 90)).sum())

    assert lit(0.2) < lit(0.7) < lit(1.3)


@pytest.mark.slow
def test_long_caption_without_times_is_paged(media, settings) -> None:
    src = media(size="320x180", duration=10, gop=60, pattern="black")
    text = "This weird scheduling, which I'm quite sure people are going to start replicating it, " * 2
    out = render(settings, source=str(src), start=0, end=8, caption=text, profile="vertical", fades=False)
    first, last = rgb_frame(out, 0.5), rgb_frame(out, 7.5)
    assert np.abs(first - last)[700:1100].mean() > 2  # a different page is showing
    words = spread(text, 0.0, 8.0)
    pages = paginate(words, lambda s: len(s) * 20.0, 634, max_chars=22)
    assert all(len(p.lines) <= 2 for p in pages) and len(pages) >= 4


@pytest.mark.slow
def test_vertical_captions_stay_in_the_safe_zone(media, settings) -> None:
    src = media(size="640x360", duration=4, gop=60, pattern="black")
    out = render(
        settings,
        source=str(src),
        start=0.5,
        end=3,
        caption="Safe zone check for a phone screen",
        profile="vertical",
        fit="center",
        fades=False,
    )
    info = streams(out)
    assert (info["width"], info["height"]) == (720, 1280)
    frame = rgb_frame(out, 1.0)
    bright = np.nonzero(frame.max(axis=2) > 200)[0]
    assert bright.size > 100
    assert bright.max() < 1280 * (1 - 0.2) and bright.min() > 1280 * 0.5


@pytest.mark.slow
def test_center_crop_fills_the_vertical_frame(media, settings) -> None:
    src = media(size="640x360", duration=3, gop=60)
    frame = rgb_frame(render(settings, source=str(src), start=0.5, end=2, profile="vertical", fit="center"), 1.0)
    assert frame[:, :60].mean() > 30 and frame[:, -60:].mean() > 30  # no bars: the middle is cropped


def test_portrait_and_square_profiles(media, settings) -> None:
    src = media(size="320x180", duration=3, gop=60)
    for profile, size in (("portrait", (720, 900)), ("square", (720, 720))):
        info = streams(render(settings, source=str(src), start=0.5, end=2, profile=profile, caption="hi"))
        assert (info["width"], info["height"]) == size


@pytest.mark.slow
def test_preview_is_half_size_same_cut_and_keyed_apart(media, settings) -> None:
    src = media(size="640x360", duration=4, gop=60)
    base = {"source": str(src), "start": 0.5, "end": 3.0, "caption": "cut check", "watermark": {"text": "Brand"}}
    store = LocalStorage(settings.storage_dir)
    final = produce_clip(build_spec(base), settings, store)
    preview = produce_clip(build_spec({**base, "quality": "preview"}), settings, store)
    assert preview.key != final.key and not preview.cached
    assert (preview.width, preview.height) == (640, 360) and (final.width, final.height) == (1280, 720)
    assert abs(preview.duration - final.duration) < 0.05
    source = gray_frames(src)
    for clip in (final, preview):  # both start on the source frame at start (0.5 s = frame 15)
        first = gray_frames(Path(str(clip.path)), limit=1)[0][1]
        errors = [float(np.abs(img - first).mean()) for _, img in source]
        assert int(np.argmin(errors)) == 15, errors[10:20]


@pytest.mark.slow
def test_padding_and_fades(media, settings) -> None:
    src = media(size="320x180", duration=6, gop=60)
    out = render(settings, source=str(src), start=2, end=3, pad_before=0.5, pad_after=0.5, video_fades=True)
    info = streams(out)
    assert abs(info["duration"] - 2.0) < 0.05 and info["frames"] == 60
    assert rgb_frame(out, 0.0).mean() < 0.5 * rgb_frame(out, 0.5).mean()  # asked for: fading in from black
    plain = render(settings, source=str(src), start=2, end=3)
    assert rgb_frame(plain, 0.0).mean() > 0.8 * rgb_frame(plain, 0.5).mean()  # default: the picture starts at once
    padded_past_end = render(settings, source=str(src), start=5, end=5.8, pad_after=3)
    assert abs(streams(padded_past_end)["duration"] - 1.0) < 0.05  # the pad stops at the end of the video


def test_rtl_lines_match_pillow_shaping() -> None:
    text = "مرحبا بالعالم"
    fonts = font_set(text, None, 48)
    ref = fonts.whole(text)
    assert ref is not None
    ours = Image.new("RGBA", (600, 100))
    fonts.draw(ours, 10, 70, text, (255, 255, 255, 255), 0)
    shaped = Image.new("RGBA", (600, 100))
    ImageDraw.Draw(shaped).text((10, 70), text, font=fonts.font(ref), fill=(255, 255, 255, 255), anchor="ls")
    assert np.array_equal(np.asarray(ours), np.asarray(shaped))
    unshaped = Image.new("RGBA", (600, 100))
    basic = ImageFont.truetype(ref[0], 48, layout_engine=ImageFont.Layout.BASIC)
    ImageDraw.Draw(unshaped).text((10, 70), text, font=basic, fill=(255, 255, 255, 255), anchor="ls")
    assert not np.array_equal(np.asarray(ours), np.asarray(unshaped))  # joined, right-to-left forms


SCRIPTS = ["שלום עולם", "مرحبا بالعالم", "日本語のキャプション", "한국어 자막", "中文字幕 🔥 great ★"]


@pytest.mark.parametrize("text", SCRIPTS)
def test_scripts_and_emoji_render(media, settings, text) -> None:
    src = media(size="320x180", duration=3, gop=60, pattern="black")
    frame = rgb_frame(render(settings, source=str(src), start=0.5, end=2, caption=text, fades=False), 0.5)
    assert (frame[500:700].max(axis=2) > 200).sum() > 200  # glyphs drawn


def test_missing_glyph_is_refused_before_rendering(media, settings) -> None:
    src = media(size="320x180", duration=3, gop=60)
    with pytest.raises(BadInput, match=r"caption has characters no installed font can draw: '\\ue000' \(U\+E000\)"):
        render(settings, source=str(src), start=0.5, end=2, caption="private \ue000 use")
    assert not (settings.storage_dir.exists() and list(settings.storage_dir.glob("*.mp4")))


def test_caption_track_states_follow_the_words() -> None:
    words = [Word("alpha", 0.0, 0.4), Word("beta", 0.4, 0.9), Word("gamma.", 0.9, 1.5)]
    track = caption_track(words, (1280, 720), "landscape", 0.055, CaptionStyle(), None, True, 2.0)
    assert track is not None
    assert [(s.start, s.end) for s in track.states] == [(0.0, 0.4), (0.4, 0.9), (0.9, 2.0)]
    clean = caption_track(words, (1280, 720), "landscape", 0.055, CaptionStyle(preset="clean"), None, True, 2.0)
    assert clean is not None and len(clean.states) == 1


BAND_CASES = [
    ("boxed", "Raw or PNG, the same", (1280, 720)),
    ("clean", "a short one", (1280, 720)),
    ("bold-outline", "中文字幕 🔥 great ★", (1080, 1920)),
    ("karaoke", "مرحبا بالعالم and more", (1080, 1080)),
    (
        "boxed",
        "This weird scheduling, which I'm quite sure people are going to start replicating it, "
        "is to reduce the bubble.",
        (1280, 720),
    ),
]


@pytest.mark.parametrize(("preset", "text", "frame"), BAND_CASES)
def test_caption_band_is_the_full_width_drawing_cut_to_its_columns(preset, text, frame) -> None:
    """Each caption state is drawn on a band as wide as the pages reach, not the frame: its pixels are the
    full-width drawing's columns, nothing is drawn outside them, and the band starts on an even column."""
    words = spread(text, 0.0, 3.0)
    track = caption_track(words, frame, "landscape", 0.055, CaptionStyle(preset=preset), None, True, 3.0)
    assert track is not None
    wide = track.full_width()
    x0, x1 = track.x, track.x + track.canvas[0]
    assert x0 % 2 == 0 and track.canvas[0] % 2 == 0 and wide.canvas == (frame[0], track.canvas[1])
    if len(text) < 30:
        assert track.canvas[0] < 0.8 * frame[0]  # a short caption's band is narrow
    for state in track.states:
        band, full = np.asarray(track.image(state)), np.asarray(wide.image(state))
        assert np.array_equal(full[:, x0:x1], band)
        assert not full[:, :x0, 3].any() and not full[:, x1:, 3].any()
        assert not track.reaches_edge(track.image(state))


@pytest.mark.parametrize(("preset", "text", "frame"), BAND_CASES)
def test_kept_glyph_masks_draw_what_pillow_draws(monkeypatch, preset, text, frame) -> None:
    """A word-timed caption's states draw each word of a page from masks rendered once (``fonts.kept_masks``):
    every state's pixels are the ones Pillow draws when it renders every word anew, for every preset, for
    fallback fonts, emoji and right-to-left lines, on a state drawn first and again after the masks are kept."""
    from quoteclip import fonts

    words = spread(text + " " + text, 0.0, 4.0)
    track = caption_track(words, frame, "landscape", 0.055, CaptionStyle(preset=preset), None, True, 4.0)
    assert track is not None and (len(track.states) > 4 or preset == "clean")  # (clean: a state a page)
    fonts._mask.cache_clear()
    kept = [np.asarray(track.image(state)) for state in track.states]
    if preset != "clean":
        assert fonts._mask.cache_info().hits > fonts._mask.cache_info().misses  # (the masks are drawn again)
    with monkeypatch.context() as patch:
        patch.setattr(fonts, "kept_masks", lambda font: font)  # Pillow's own draw.text, every word rendered
        plain = [np.asarray(track.image(state)) for state in track.states]
    for n, (a, b) in enumerate(zip(kept, plain, strict=True)):
        assert np.array_equal(a, b), f"state {n} of {len(kept)}"


def test_caption_band_too_narrow_for_its_glyphs_is_drawn_at_the_frame_width(tmp_path) -> None:
    """A state that reaches a side of its band (a font whose glyphs overhang far) has the captions drawn again at
    the frame's width: nothing is cut off."""
    from dataclasses import replace

    def widths(folder: Path) -> set[int]:  # the WIDTH in each PAM file's header
        return {int(f.read_bytes().split(b"WIDTH ")[1].split(b"\n")[0]) for f in folder.glob("c-*.pam")}

    words = spread("Raw or PNG, the same", 0.0, 3.0)
    track = caption_track(words, (1280, 720), "landscape", 0.055, CaptionStyle(), None, True, 3.0)
    assert track is not None
    fits, narrow_dir = tmp_path / "fits", tmp_path / "narrow"
    fits.mkdir()
    narrow_dir.mkdir()
    _, sequence, drawn = write_track(track, fits, 3.0)
    assert sequence and drawn == track and widths(fits) == {track.canvas[0]}
    narrow = replace(track, x=track.x + 64, canvas=(track.canvas[0] - 128, track.canvas[1]))
    assert narrow.reaches_edge(narrow.image(narrow.states[0]))
    _, _, drawn = write_track(narrow, narrow_dir, 3.0)
    assert (drawn.x, drawn.canvas) == (0, (1280, track.canvas[1]))
    assert widths(narrow_dir) == {1280}


def test_sidecars_next_to_the_clip(media, settings) -> None:
    import hashlib
    import json

    src = media(size="320x180", duration=4, gop=60, pattern="black")
    spec = build_spec({"source": str(src), "start": 1.0, "end": 2.6, "words": WORDS, "pad_before": 0.5})
    result = produce_clip(spec, settings, LocalStorage(settings.storage_dir))
    assert result.sidecars is not None and set(result.sidecars) == {"srt", "vtt", "poster", "manifest"}
    folder = settings.storage_dir
    srt = (folder / f"{result.key}.srt").read_text()
    assert srt.startswith("1\n00:00:00,500 --> ") and "one two three" in srt  # clip time: the pad shifts it
    vtt = (folder / f"{result.key}.vtt").read_text()
    assert vtt.startswith("WEBVTT\n\nSTYLE\n") and "\n\n00:00:00.500 --> " in vtt  # a cue per highlighted word
    with Image.open(folder / f"{result.key}.jpg") as poster:
        assert (poster.format, poster.size) == ("JPEG", (1280, 720))
    manifest = json.loads((folder / f"{result.key}.manifest.json").read_text())
    mp4 = (folder / f"{result.key}.mp4").read_bytes()
    assert manifest["output"]["sha256"] == hashlib.sha256(mp4).hexdigest()
    assert manifest["source_times"] == {"start": 0.5, "end": 2.6}
    assert manifest["quote"] == {"start": 1.0, "end": 2.6} and manifest["key"] == result.key
    assert manifest["caption"] == {  # as burned: clip time
        "text": "one two three",
        "pages": [{"start": 0.5, "end": 2.1, "lines": ["one two three"]}],
    }
    assert manifest["versions"]["ffmpeg"] and manifest["source"]["url"] == str(src)
    assert manifest["sidecars"][".srt"]["sha256"] == hashlib.sha256(srt.encode()).hexdigest()
    again = produce_clip(spec, settings, LocalStorage(settings.storage_dir))
    assert again.cached and again.sidecars == result.sidecars


@pytest.fixture(scope="session")
def panning_face(tmp_path_factory, ffmpeg_bin) -> Path:
    """A face (scikit-image's astronaut photo) panning left to right across a 1280×720 frame over 6 s."""
    from skimage import data

    folder = tmp_path_factory.mktemp("face")
    Image.fromarray(data.astronaut()).resize((300, 300)).save(folder / "astronaut.png")
    out = folder / "pan.mp4"
    overlay = "[0][1]overlay=x='60+150*t':y=210:shortest=1[v]"
    ffmpeg(
        ffmpeg_bin,
        *lavfi("color=c=gray:s=1280x720:r=30:d=6"),
        *["-loop", "1", "-i", str(folder / "astronaut.png"), *lavfi("sine=d=6")],
        *["-filter_complex", overlay, "-map", "[v]", "-map", "2:a"],
        *["-c:v", "libx264", "-preset", "ultrafast", "-g", "60", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest"],
        str(out),
    )
    return out


def _face_x(frame: np.ndarray) -> float | None:
    import cv2

    detector = cv2.CascadeClassifier(cv2.data.haarcascades + "haarcascade_frontalface_default.xml")
    gray = np.ascontiguousarray(frame.astype(np.uint8).mean(axis=2).astype(np.uint8))
    faces = detector.detectMultiScale(gray, scaleFactor=1.1, minNeighbors=5)
    if not len(faces):
        return None
    x, _, w, _ = max(faces, key=lambda f: f[2] * f[3])
    return float(x + w / 2)


@pytest.mark.slow
def test_speaker_framing_follows_the_face(panning_face, settings) -> None:
    base = {"source": str(panning_face), "start": 0.5, "end": 5.5, "profile": "vertical", "fades": False}
    follow = render(settings, **base, fit="speaker")
    assert (streams(follow)["width"], streams(follow)["height"]) == (720, 1280)
    for t in (0.5, 2.5, 4.5):
        x = _face_x(rgb_frame(follow, t))
        assert x is not None and 150 < x < 570, (t, x)  # the face stays near the middle of the 720-wide frame
    fixed = render(settings, **base, fit="center")
    late = _face_x(rgb_frame(fixed, 4.5))
    assert late is None or not 150 < late < 570  # a fixed centre crop loses it


@pytest.mark.slow
def test_speaker_framing_without_a_face_keeps_the_centre(media, settings) -> None:
    out = render(
        settings,
        source=str(media(size="640x360", duration=3, gop=60)),
        start=0.5,
        end=2.5,
        profile="vertical",
        fit="speaker",
    )
    assert (streams(out)["width"], streams(out)["height"]) == (720, 1280)
    centre = render(
        settings,
        source=str(media(size="640x360", duration=3, gop=60)),
        start=0.5,
        end=2.5,
        profile="vertical",
        fit="center",
    )
    for at in (0.2, 1.0, 1.8):  # no face: the window stays where the centre crop is
        assert float(np.abs(rgb_frame(out, at) - rgb_frame(centre, at)).mean()) < 2


PEAK_SCRIPT = """
import sys
from pathlib import Path
from jobs.pipeline.produce import produce_clip
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from storage import LocalStorage
src, count, store = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
span = 20.0
step = span / count
words = [{"text": f"word{i}", "start": round(0.5 + i * step, 3), "end": round(0.5 + (i + 0.8) * step, 3)}
         for i in range(count)]
spec = build_spec({"source": src, "start": 0.5, "end": 0.5 + span, "words": words, "style": {"preset": "karaoke"}})
produce_clip(spec, Settings(storage_dir=store, allow_local_sources=True).for_cli(), LocalStorage(store))
# VmHWM: this process's own peak (ru_maxrss would carry the forking parent's peak across exec)
print(next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


@pytest.mark.slow
def test_many_word_captions_keep_memory_bounded(media, tmp_path) -> None:
    """Caption states are drawn one at a time at caption-band size and written as drawn: the most words a 20 s
    clip may carry (220) peak no higher than 2 words do (measured: peak RSS of the rendering process)."""
    import subprocess
    import sys

    src = str(media(size="320x180", duration=22, gop=60))
    peaks = {}
    for count in (2, 220):
        done = subprocess.run(
            [sys.executable, "-c", PEAK_SCRIPT, src, str(count), str(tmp_path / f"s{count}")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        peaks[count] = int(done.stdout.strip().splitlines()[-1]) / 1024
    print(f"\ncaption memory: peak RSS {peaks[2]:.0f} MB with 2 words, {peaks[220]:.0f} MB with 220 words in 20 s")
    assert peaks[220] - peaks[2] < 25, peaks
    with pytest.raises(BadInput, match="words: at most 10 a second of clip"):
        build_spec(
            {
                "source": src,
                "start": 0.5,
                "end": 4.5,
                "words": [{"text": "w", "start": 0.5 + i * 0.008, "end": 0.505 + i * 0.008} for i in range(500)],
            }
        )


@pytest.mark.slow
def test_poster_is_the_clips_frame_at_one_second(media, settings) -> None:
    """The poster comes out of the render's own ffmpeg pass: the finished frame 1 s in, not a neighbour."""
    src = media(size="320x180", duration=6, gop=60)  # a moving pattern: neighbouring frames differ
    spec = build_spec({"source": str(src), "start": 1.0, "end": 4.0, "caption": "the poster frame"})
    result = produce_clip(spec, settings, LocalStorage(settings.storage_dir))
    folder = settings.storage_dir
    frames = gray_frames(folder / f"{result.key}.mp4", limit=40)
    with Image.open(folder / f"{result.key}.jpg") as poster:
        still = np.asarray(poster.convert("L").resize((160, 90)), dtype=np.float32)
    distance = [float(np.abs(still - img).mean()) for _, img in frames]
    nearest = min(range(len(frames)), key=lambda i: abs(frames[i][0] - 1.0))
    assert int(np.argmin(distance)) == nearest, (distance[nearest - 1 : nearest + 2], nearest)


def test_the_default_fonts_known_coverage_is_true() -> None:
    """Latin text is placed without reading the default font's character map: the set it trusts must be
    drawn by that font, checked here against the font file itself."""
    from quoteclip.fonts import DEFAULT_COVERS, coverage, fallback_chain

    assert DEFAULT_COVERS <= coverage(fallback_chain()[0])
