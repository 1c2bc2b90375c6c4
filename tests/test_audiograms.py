"""Audio-only sources (podcasts, audio-only formats) rendered as audiograms: a background (the episode's artwork,
else the brand's colour or image), the quote's waveform moving with its sound, captions and the watermark."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli, runs
from mediacheck import first_loud_sample, gray_frames, rgb_frame, streams

from testkit.media import ffmpeg, lavfi, with_artwork

# the sound: a tone for the first half of every second, silence for the second half
TONE = "aevalsrc='if(lt(mod(t,1),0.5),0.8*sin(2*PI*440*t),0)':s=48000:d=12"


@pytest.fixture(scope="session")
def podcasts(ffmpeg_bin, tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("podcasts")
    plain, art, with_art, m4a = (folder / n for n in ("episode.mp3", "cover.png", "with-art.mp3", "episode.m4a"))
    ffmpeg(ffmpeg_bin, *lavfi(TONE), "-c:a", "libmp3lame", str(plain))
    ffmpeg(ffmpeg_bin, *lavfi(TONE), "-c:a", "aac", str(m4a))
    ffmpeg(ffmpeg_bin, *lavfi("color=c=0xd01010:s=300x300"), "-frames:v", "1", str(art))
    with_artwork(ffmpeg_bin, plain, art, with_art)
    return {"plain": plain, "artwork": with_art, "m4a": m4a}


def render(source: Path, tmp_path: Path, wrapper: str, *extra: str) -> list[dict[str, object]]:
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"), "FFMPEG_BINARY": wrapper}
    args = [
        "render",
        str(source),
        "--start",
        "2.75",
        "--end",
        "5.75",
        "--caption",
        "a podcast quote",
        "--watermark",
        "StarZero",
        "--profiles",
        "landscape,vertical",
        *extra,
        "--json",
    ]
    done = run_cli(*args, env=env)
    assert done.returncode == 0, done.stderr
    clips: list[dict[str, object]] = json.loads(done.stdout)["clips"]
    return clips


def band_levels(path: Path) -> list[tuple[float, float]]:
    """(time, mean gray of the waveform band across the middle of the frame) for each frame."""
    rows = slice(int(90 * 0.42), int(90 * 0.58))
    return [(t, float(img[rows, :].mean())) for t, img in gray_frames(path, size=(160, 90))]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["plain", "m4a"])
def test_an_audio_only_source_becomes_an_audiogram_in_each_profile(kind, podcasts, tmp_path, ffmpeg_counter) -> None:
    wrapper, log = ffmpeg_counter
    clips = render(podcasts[kind], tmp_path, wrapper)
    assert runs(log) == 1  # both shapes from one run
    for clip, size in zip(clips, [(1280, 720), (720, 1280)], strict=True):
        path = Path(str(clip["path"]))
        info = streams(path)
        assert (info["width"], info["height"]) == size and abs(float(info["duration"]) - 3.0) <= 0.05
        # the sound is the source's at the cut: its next tone (at 3.0 s) starts 0.25 s in
        beep = first_loud_sample(path)
        assert beep is not None and abs(beep - 0.25) <= 0.03, beep
        # the picture moves with the level: the waveform band is bright while the tone sounds, dark in silence
        levels = band_levels(path)
        loud = [v for t, v in levels if 0.35 <= (t + 0.75) % 1 <= 0.65 and 0.2 < t]  # source times x.10–x.40
        silent = [v for t, v in levels if 0.85 <= (t + 0.75) % 1 <= 0.95 and 0.2 < t]  # x.60–x.70
        assert loud and silent and np.mean(loud) > np.mean(silent) + 8, (np.mean(loud), np.mean(silent))
        # no artwork and no brand background: the default dark one
        corner = rgb_frame(path, 0.5)[: size[1] // 10, : size[0] // 10]
        assert corner.mean() < 40


@pytest.mark.slow
def test_the_episodes_artwork_is_the_background_and_a_brand_colour_stands_in(
    podcasts, tmp_path, ffmpeg_counter
) -> None:
    wrapper, _ = ffmpeg_counter
    clips = render(podcasts["artwork"], tmp_path, wrapper)
    assert len(clips) == 2  # landscape and vertical
    for clip in clips:
        corner = rgb_frame(Path(str(clip["path"])), 0.5)[:40, :40].reshape(-1, 3).mean(axis=0)
        assert corner[0] > 150 and corner[1] < 60 and corner[2] < 60, corner  # the red cover art
    style = tmp_path / "brand.json"
    style.write_text(json.dumps({"background": "#1040c0"}))
    clips = render(podcasts["plain"], tmp_path / "brand", wrapper, "--style-file", str(style))
    assert len(clips) == 2
    for clip in clips:
        corner = rgb_frame(Path(str(clip["path"])), 0.5)[:40, :40].reshape(-1, 3).mean(axis=0)
        assert corner[2] > 150 and corner[0] < 60, corner  # the brand's blue
