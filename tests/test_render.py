"""End-to-end renders of generated media, checked by probing, atoms, frames and samples."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import runs
from mediacheck import (
    decoded_digest,
    first_bright_frame,
    first_loud_sample,
    gray_frames,
    rgb_frame,
    streams,
    top_level_atoms,
)

from jobs.pipeline.produce import produce_clip
from quoteclip.errors import BadInput, RenderFailed, SourceUnavailable
from quoteclip.settings import Settings
from quoteclip.spec import ClipSpec, build_spec
from renderer.plan import Overlay
from storage import LocalStorage


def render(settings: Settings, **fields: object) -> Path:
    spec = build_spec(fields)
    result = produce_clip(
        spec,
        settings,
        LocalStorage(settings.storage_dir),
    )
    assert result.path is not None
    return Path(result.path)


def test_output_is_h264_aac_720p_faststart(media, settings) -> None:
    src = media(size="640x360", duration=6)
    out = render(settings, source=str(src), start=1, end=3.5, caption="Hello", watermark={"text": "StarZero"})
    info = streams(out)
    assert info["vcodec"] == "h264" and info["pix_fmt"] == "yuv420p" and info["acodec"] == "aac"
    assert (info["width"], info["height"]) == (1280, 720)
    assert info["frames"] == 75
    assert abs(info["duration"] - 2.5) < 0.05
    atoms = top_level_atoms(out)
    assert atoms.index("moov") < atoms.index("mdat")


def _x264_settings(path: Path) -> str:
    """The options x264 wrote into the stream (its SEI text): what the encoder really ran with."""
    data = path.read_bytes()
    at = data.index(b"x264 - core")
    return data[at : data.index(b"\x00", at)].decode("ascii", "replace")


@pytest.mark.slow
def test_encoder_preset_is_what_x264_ran_with_and_a_clip_of_its_own(media, settings) -> None:
    src = str(media(size="640x360", duration=6))
    quote = {"source": src, "start": 1, "end": 3.5, "caption": "Hello"}
    store = LocalStorage(settings.storage_dir)
    default = produce_clip(build_spec(quote), settings, store)
    fast = produce_clip(build_spec({**quote, "encoder_preset": "ultrafast"}), settings, store)
    assert fast.key != default.key and not fast.cached
    assert " subme=2 " in _x264_settings(Path(str(default.path)))  # veryfast
    assert " subme=0 " in _x264_settings(Path(str(fast.path)))  # ultrafast
    assert streams(Path(str(fast.path)))["frames"] == streams(Path(str(default.path)))["frames"] == 75
    named = produce_clip(build_spec({**quote, "encoder_preset": "veryfast"}), settings, store)
    assert named.cached and named.key == default.key  # the product's preset named: the same clip


@pytest.mark.slow
def test_one_decoder_thread_writes_the_same_clip(
    ffmpeg_bin, settings, monkeypatch, tmp_path, one_encoder_thread
) -> None:
    """A final render decodes sources up to 1080p in one thread (renderer/plan.py) to spend less CPU: the clip's
    bytes are the ones ffmpeg's automatic decoder threads give (a source with B-frames and deblocking, as
    published video has them)."""
    source = tmp_path / "published.mp4"
    subprocess.run(
        [
            ffmpeg_bin,
            "-hide_banner",
            "-loglevel",
            "error",
            "-f",
            "lavfi",
            "-i",
            "testsrc2=size=640x360:rate=30:d=6",
            "-c:v",
            "libx264",
            "-preset",
            "veryfast",
            "-g",
            "60",
            "-bf",
            "3",
            "-an",
            str(source),
        ],
        check=True,
    )
    quote = {"source": str(source), "start": 2.2, "end": 4.5, "caption": "Hi"}
    one = produce_clip(build_spec(quote), settings, LocalStorage(settings.storage_dir))
    monkeypatch.setattr("renderer.plan.SINGLE_THREAD_DECODE_PIXELS", 0)
    auto = produce_clip(build_spec(quote), settings, LocalStorage(tmp_path / "auto"))
    assert not auto.cached and auto.key == one.key
    assert Path(str(auto.path)).read_bytes() == Path(str(one.path)).read_bytes()


@pytest.mark.slow
def test_cut_is_frame_exact_with_sparse_keyframes(media, settings) -> None:
    """With the default options, the first output frame is the source frame at start (not a fade from black)
    and the frame count is duration × fps (keyframes 10 s apart)."""
    src = media(size="320x180", fps=30, duration=12, gop=300)
    start, end = 5.5, 8.0  # source frames 165 .. 239
    out = render(settings, source=str(src), start=start, end=end)
    source_frames = gray_frames(src)
    first = gray_frames(out, limit=3)[0][1]
    errors = [float(np.abs(img - first).mean()) for _, img in source_frames]
    best = int(np.argmin(errors))
    assert best == round(start * 30), f"first frame matches source frame {best}, errors {errors[160:170]}"
    assert errors[best] < 6, f"first frame differs from the source frame at start by {errors[best]:.1f} levels"
    last = gray_frames(out)[-1][1]
    assert float(np.abs(source_frames[round(end * 30) - 1][1] - last).mean()) < 6  # no fade to black either
    assert streams(out)["frames"] == round((end - start) * 30)


def test_audio_stays_in_sync(media, settings) -> None:
    src = media(size="320x180", duration=6, gop=300, pattern="flash")
    out = render(settings, source=str(src), start=2.55, end=4.0)  # next flash+beep at 3.0 → 0.45 s in
    flash = first_bright_frame(out)
    beep = first_loud_sample(out)
    assert flash is not None and beep is not None
    assert abs(flash - 0.45) <= 1 / 30 + 0.001
    assert abs(beep - flash) <= 0.040


@pytest.mark.parametrize(
    ("params", "expect_bars"),
    [
        ({"size": "333x187"}, False),
        ({"size": "320x180", "fps": 60}, False),
        ({"size": "320x180", "rotation": 90}, True),
        ({"size": "320x180", "vfr": True}, False),
        ({"size": "320x180", "audio": False}, False),
        ({"size": "240x240"}, True),
    ],
    ids=["odd-size", "60fps", "rotated", "vfr", "no-audio", "square"],
)
@pytest.mark.slow
def test_awkward_sources_render_720p(media, settings, params, expect_bars) -> None:
    src = media(duration=4, gop=60, **params)
    out = render(settings, source=str(src), start=1, end=3)
    info = streams(out)
    assert (info["width"], info["height"]) == (1280, 720)
    assert abs(info["duration"] - 2.0) < 0.06
    assert info["acodec"] == "aac"  # a silent track when the source has none
    fps = params.get("fps", 30) if not params.get("vfr") else 24
    assert abs(info["frames"] - 2 * fps) <= 1
    frame = rgb_frame(out, 0.5)
    left_bar = frame[:, :100].mean()
    assert (left_bar < 20) == expect_bars  # pillarbox for tall/square sources, none for 16:9


def test_rotated_source_is_upright(media, settings) -> None:
    """A phone video (a 320x180 picture whose display matrix says: turn it 90° counter-clockwise) comes out as the
    player shows it: a portrait picture between bars, turned the right way (the clip's frame is the source's
    coded picture turned counter-clockwise, and far from the same picture turned the other way)."""
    from PIL import Image

    src = media(size="320x180", duration=4, gop=60, rotation=90)
    out = render(settings, source=str(src), start=1, end=2)
    frame = rgb_frame(out, 0.19)  # the clip's frame 6, the source's frame 36 (1.2 s)
    content = frame[:, 440:840]  # a 180x320 portrait picture scaled to 405x720 sits in the middle
    assert content.mean() > 40 and frame[:, :200].mean() < 20
    coded = rgb_frame(src, 1.19).astype(np.uint8)  # PyAV's frame is the coded picture, not turned

    def turned(k: int) -> np.ndarray:
        picture = Image.fromarray(np.ascontiguousarray(np.rot90(coded, k))).resize((405, 720), Image.BILINEAR)
        return np.asarray(picture).astype(np.int16)[:, 3:403]  # the columns 440:840 of the 1280-wide frame

    upright, upside_down = (float(np.abs(content - turned(k)).mean()) for k in (1, -1))
    assert upright < 20 and upright < upside_down / 2, (upright, upside_down)


@pytest.mark.slow
def test_caption_and_watermark_pixels_are_there(media, settings) -> None:
    src = media(size="320x180", duration=4, gop=60)
    base = dict(source=str(src), start=1, end=2)
    plain = rgb_frame(render(settings, **base), 0.5)
    marked = rgb_frame(render(settings, **base, watermark={"text": "StarZero", "position": "top-right"}), 0.5)
    captioned = rgb_frame(render(settings, **base, caption="Quotes: 'a' \\ %{pts} [x] 100% — ünïcode"), 0.5)

    def diff(a: np.ndarray, b: np.ndarray, rows: slice, cols: slice) -> float:
        return float(np.abs(a[rows, cols] - b[rows, cols]).mean())

    top_right, bottom, middle = (
        (slice(0, 90), slice(1000, 1280)),
        (slice(560, 700), slice(200, 1080)),
        (slice(250, 400), slice(300, 900)),
    )
    assert diff(plain, marked, *top_right) > 10
    assert diff(plain, marked, *bottom) < 3 and diff(plain, marked, *middle) < 3
    assert diff(plain, captioned, *bottom) > 10
    assert diff(plain, captioned, *top_right) < 3 and diff(plain, captioned, *middle) < 3


def _clip_with(spec: ClipSpec, src: Path, overlays: list[Overlay], ffmpeg_bin: str, folder: Path) -> tuple[str, bytes]:
    """The clip's frames and samples (``decoded_digest``) and its poster's bytes, rendered with ``overlays`` (in a
    test that asks for ``one_encoder_thread``)."""
    from renderer.plan import build_command
    from renderer.probe import probe

    folder.mkdir(exist_ok=True)
    out, poster = folder / "clip.mp4", folder / "poster.jpg"
    argv = build_command(
        spec, probe(str(src), first_frame=False), str(src), overlays, str(out), ffmpeg_bin, poster=(str(poster), 0.5)
    )
    subprocess.run(argv, check=True, capture_output=True)
    return decoded_digest(out), poster.read_bytes()


WORDS = [("Raw", 1.0, 1.4), ("or", 1.4, 1.6), ("PNG,", 1.6, 2.0), ("the", 2.0, 2.2), ("same", 2.2, 2.5)]


@pytest.mark.slow
@pytest.mark.parametrize(("words", "state_bytes"), [(None, None), (WORDS, None), (WORDS, 0)])
def test_overlays_as_pam_images_make_the_clip_pngs_make(
    media, ffmpeg_bin, tmp_path, monkeypatch, words, state_bytes, one_encoder_thread
) -> None:
    """Captions (a still, or timed states) and the watermark go to ffmpeg as PAM images, raw RGBA behind a
    header (nothing compressed or inflated): the clip's frames and samples, and its poster, are byte for byte the
    ones the same images drawn again as PNGs give. States past ``STATE_BYTES`` in all are written as PNGs."""
    from PIL import Image

    from renderer.render import caption_layout, make_overlays
    from watermarks import watermark_image

    if state_bytes is not None:
        monkeypatch.setattr("renderer.captions.STATE_BYTES", state_bytes)
    src = media(size="640x360", duration=4, gop=60)
    fields = (
        {"caption": "Raw or PNG, the same"}
        if words is None
        else {"words": [{"text": w, "start": a, "end": b} for w, a, b in words]}
    )
    spec = build_spec(
        {
            "source": str(src),
            "start": 1,
            "end": 2.5,
            **fields,
            "watermark": {"text": "StarZero"},
            "style": {"color": "#FF4000", "box": "#0020C0", "highlight": "#10E040"},
        }
    )
    cut = (spec.cut_start, spec.duration)
    ours, _ = make_overlays(spec, tmp_path, cut)
    assert (ours[0].sequence, Path(ours[0].path).suffix) == ((True, ".ffconcat") if words else (False, ".pam"))
    # the same images drawn again, written as PNGs in a folder of their own
    track = caption_layout(spec, cut)
    assert track is not None and spec.watermark is not None
    drawn = {"watermark": watermark_image(spec.watermark, spec.size, spec.font)[0]}
    if words:
        drawn |= {f"c-{n:04d}": track.image(state) for n, state in enumerate(track.states)}
        drawn["c-blank"] = Image.new("RGBA", track.canvas, (0, 0, 0, 0))
    else:
        drawn["caption"] = track.image(track.states[0])
    state_ext = ".png" if state_bytes == 0 else ".pam"
    assert {p.name for p in tmp_path.glob("*.p[an][mg]")} == {
        k + (state_ext if k.startswith("c-") else ".pam") for k in drawn
    }
    folder = tmp_path / "png"
    folder.mkdir()
    for stem, image in drawn.items():
        image.save(folder / f"{stem}.png")
    listed = folder / (Path(ours[0].path).stem + ".png")
    if words:
        listed = folder / "captions.ffconcat"
        listed.write_text(Path(ours[0].path).read_text().replace(state_ext + "'", ".png'"))
    pngs = [
        Overlay(str(listed), ours[0].x, ours[0].y, sequence=ours[0].sequence),
        Overlay(str(folder / "watermark.png"), ours[1].x, ours[1].y),
    ]
    assert _clip_with(spec, src, ours, ffmpeg_bin, tmp_path / "ours") == _clip_with(spec, src, pngs, ffmpeg_bin, folder)


@pytest.mark.slow
@pytest.mark.parametrize(("words", "profile"), [(None, "landscape"), (WORDS, "landscape"), (WORDS, "vertical")])
def test_caption_band_makes_the_clip_a_full_width_caption_makes(
    media, ffmpeg_bin, tmp_path, words, profile, one_encoder_thread
) -> None:
    """The caption images cover only the columns the pages reach (ffmpeg blends every pixel of an overlay into
    every frame): the clip's frames and samples, and its poster, are the ones full-width caption images give,
    byte for byte (decoded: ``decoded_digest``)."""
    from renderer.captions import write_track
    from renderer.render import make_overlays

    src = media(size="640x360", duration=4, gop=60)
    fields = (
        {"caption": "Raw or PNG, the same"}
        if words is None
        else {"words": [{"text": w, "start": a, "end": b} for w, a, b in words]}
    )
    spec = build_spec(
        {
            "source": str(src),
            "start": 1,
            "end": 2.5,
            **fields,
            "profile": profile,
            "style": {"color": "#FF4000", "box": "#0020C0", "highlight": "#10E040"},
        }
    )
    cut = (spec.cut_start, spec.duration)
    band, track = make_overlays(spec, tmp_path, cut)
    assert track is not None and 0 < band[0].x and track.canvas[0] < 0.8 * spec.size[0]
    wide_dir = tmp_path / "wide"
    wide_dir.mkdir()
    path, sequence, wide = write_track(track.full_width(), wide_dir, cut[1])
    full = [Overlay(path, wide.x, wide.y, sequence=sequence)]
    assert _clip_with(spec, src, band, ffmpeg_bin, tmp_path) == _clip_with(spec, src, full, ffmpeg_bin, wide_dir)


def test_logo_watermark_and_user_font(media, settings, tmp_path) -> None:
    from PIL import Image

    from quoteclip.fonts import default_font_path

    logo = tmp_path / "logo.png"
    Image.new("RGBA", (200, 100), (255, 0, 0, 255)).save(logo)
    src = media(size="320x180", duration=4, gop=60)
    out = render(
        settings,
        source=str(src),
        start=1,
        end=2,
        font=str(default_font_path()),
        caption="hi",
        watermark={"logo": str(logo), "position": "bottom-left", "opacity": 1.0, "size": 0.1},
    )
    frame = rgb_frame(out, 0.5)
    # 0.1 × 720 = 72 px high, margin 0.03 × 720 = 22 px from the bottom-left corner: solid red.
    patch = frame[720 - 22 - 60 : 720 - 22 - 12, 22 + 10 : 22 + 130]
    assert patch[..., 0].mean() > 200 and patch[..., 1].mean() < 60


def test_http_source(media, settings, http_source) -> None:
    src = media(size="320x180", duration=6, gop=300)
    (http_source.root / "ep.mp4").write_bytes(src.read_bytes())
    out = render(settings, source=http_source.url("ep.mp4"), start=2, end=3)
    assert streams(out)["frames"] == 30


def test_quote_past_the_end_is_refused_naming_the_length(media, settings) -> None:
    src = media(size="320x180", duration=4, gop=60)
    with pytest.raises(BadInput, match=r"end: quote ends after the end of the video \(end=0:05.000, video is 0:04.000"):
        render(settings, source=str(src), start=3, end=5)


def test_missing_sources(settings, http_source, tmp_path) -> None:
    with pytest.raises(BadInput, match="source not found"):
        render(settings, source=str(tmp_path / "nope.mp4"), start=1, end=2)
    with pytest.raises(SourceUnavailable, match=r"HTTP 404"):
        render(settings, source=http_source.url("missing.mp4"), start=1, end=2)
    notvideo = tmp_path / "notes.mp4"
    notvideo.write_text("not a video")
    with pytest.raises(BadInput, match="not a readable video"):
        render(settings, source=str(notvideo), start=1, end=2)
    assert not list((settings.storage_dir).glob("*.mp4")) if settings.storage_dir.exists() else True


def test_an_ffmpeg_run_over_its_time_limit_is_stopped(ffmpeg_bin, tmp_path) -> None:
    """The timer stops a run that takes too long (RenderFailed names the limit); a quick run returns at once."""
    from renderer.ffmpeg import run_ffmpeg

    argv = [
        ffmpeg_bin,
        "-nostdin",
        "-loglevel",
        "error",
        "-re",
        "-f",
        "lavfi",
        "-i",
        "testsrc2=size=64x36:rate=5",
        "-f",
        "null",
        "-",
    ]
    began = time.monotonic()
    with pytest.raises(RenderFailed, match="took longer than 1 s"):
        run_ffmpeg(argv, timeout=1.0)
    assert time.monotonic() - began < 5
    done = time.monotonic()
    assert (
        run_ffmpeg(
            [ffmpeg_bin, "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc2=d=0.2", "-f", "null", "-"],
            timeout=30,
        )
        is not None
    )
    assert time.monotonic() - done < 5  # a quick run is not held back by the timer


def test_only_a_urls_probe_has_pyavs_timeout(media, http_source, monkeypatch) -> None:
    """PyAV's timeout check takes the GIL at every I/O step, which held a local probe up for as long as the
    overlays were drawn beside it: a local file (and a file object, bounded by its fetcher) is probed without."""
    import av

    from renderer import probe as probing

    src = media(size="320x180", duration=2)
    seen: list[float | None] = []
    real_open = av.open

    def recording_open(*args: object, **kwargs: object) -> object:
        seen.append(kwargs.get("timeout"))  # type: ignore[arg-type]
        return real_open(*args, **kwargs)

    monkeypatch.setattr(av, "open", recording_open)  # (the probe imports PyAV when it first probes)
    assert probing.probe(str(src)).width == 320
    with open(src, "rb") as handle:
        assert probing.probe(handle).width == 320
    http_source.root.joinpath("p.mp4").write_bytes(src.read_bytes())
    assert probing.probe(http_source.url("p.mp4"), timeout=12.0).width == 320
    assert seen == [None, None, 12.0]


@pytest.mark.slow
def test_ffmpeg_dies_with_the_process_that_started_it(ffmpeg_bin, tmp_path) -> None:
    """A process killed outright (a work-horse by the OOM killer, a CLI by ``kill -9``) takes its ffmpeg with it,
    even one that writes nothing it would fail on."""
    import psutil

    script = (
        "import sys; from renderer.ffmpeg import run_ffmpeg\n"
        f"run_ffmpeg([{ffmpeg_bin!r}, '-nostdin', '-loglevel', 'error', '-re', '-f', 'lavfi', '-i',"
        " 'testsrc2=size=64x36:rate=5', '-f', 'null', '-'], timeout=600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).parent.parent)
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 30
        while not (children := psutil.Process(parent.pid).children()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert children, "run_ffmpeg started no ffmpeg"
        parent.kill()
        parent.wait()
        _, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, "ffmpeg outlived the process that started it"
    finally:
        parent.kill()
        for child in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()


def test_ffmpegs_version_is_asked_once_per_binary(ffmpeg_bin, tmp_path, monkeypatch) -> None:
    """The manifest's ffmpeg version is remembered in the cache folder: a cold render does not run ffmpeg to ask
    it again, until the binary changes."""
    from renderer.ffmpeg import VERSIONS_FILE, ffmpeg_version

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    asked = tmp_path / "asked.log"
    binary = tmp_path / "ffmpeg"
    binary.write_text(f'#!/bin/sh\necho asked >> "{asked}"\nexec "{ffmpeg_bin}" "$@"\n')
    binary.chmod(0o755)

    def version() -> str:
        ffmpeg_version.cache_clear()  # as a new process
        return ffmpeg_version(str(binary))

    first = version()
    assert first and first[0].isalnum() and runs(asked) == 1
    assert version() == first and runs(asked) == 1
    assert (tmp_path / "cache" / "quoteclip" / VERSIONS_FILE).exists()
    binary.write_text(binary.read_text() + "# another build\n")  # the binary replaced: asked again
    assert version() == first and runs(asked) == 2
    assert version() == first and runs(asked) == 2
    (tmp_path / "cache" / "quoteclip" / VERSIONS_FILE).write_text("not json")  # a spoilt file: asked again
    assert version() == first and runs(asked) == 3


def test_the_wheels_ffmpeg_is_found_without_running_it(monkeypatch, tmp_path) -> None:
    """The bundled binary is the one imageio-ffmpeg's lookup finds, but found without a check run of it (a cold
    render would wait for that run); ``IMAGEIO_FFMPEG_EXE`` still names another."""
    import subprocess

    import imageio_ffmpeg

    from renderer import ffmpeg

    expected = imageio_ffmpeg.get_ffmpeg_exe()

    def no_process(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"ffmpeg was run to find it: {args}")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    ffmpeg._bundled_ffmpeg.cache_clear()
    imageio_ffmpeg._utils._get_ffmpeg_exe.cache_clear()  # its lookup would find its cached answer
    try:
        assert ffmpeg.ffmpeg_binary(None) == expected
        ffmpeg._bundled_ffmpeg.cache_clear()
        other = tmp_path / "my-ffmpeg"
        monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", str(other))
        assert ffmpeg.ffmpeg_binary(None) == str(other)
    finally:
        ffmpeg._bundled_ffmpeg.cache_clear()


def test_overlays_drawn_ahead_are_drawn_again_when_the_video_ends_the_cut(media, ffmpeg_bin, tmp_path) -> None:
    """The pipeline draws the overlays for the cut the quote asks for while the source is probed; when the video's
    end shortens the cut, the render draws them again (the caption sequence lasts as long as the clip)."""
    from renderer.probe import probe
    from renderer.render import cut_for, draw_overlays, render_clips

    src = media(size="320x180", duration=6, gop=60)
    spec = build_spec({"source": str(src), "start": 5, "end": 5.8, "pad_after": 3, "caption": "the last words"})
    info = probe(str(src))
    ahead = draw_overlays([spec], tmp_path, cut_for(spec, None))
    assert ahead.cut == (5.0, 3.8) and cut_for(spec, info) == (5.0, 1.0)
    [result] = render_clips([spec], str(src), info, tmp_path, ffmpeg_bin, timeout=60, drawn=ahead)
    assert abs(result.duration - 1.0) < 0.05
    # the 0.8 s caption over a 3.8 s cut is a timed sequence (shown, then blank); over the 1 s clip, one still
    assert str(tmp_path / "caption.pam") in result.argv and not any(a.endswith(".ffconcat") for a in result.argv)


def test_a_logo_of_any_aspect_is_drawn_within_the_frame(tmp_path) -> None:
    """A 98-byte 4096×1 PNG at the largest mark size would be drawn 884736×216 before being narrowed (1.5 GB of
    RGBA): it is scaled into its box at once, so drawing it costs little memory, and the mark stays within half
    the frame's width and the mark's height; an ordinary logo is drawn as it always was. (The peak is the
    process's own VmHWM: getrusage's maxrss carries the forking parent's size across exec.)"""
    import json
    import subprocess
    import sys

    from PIL import Image

    thin, wide = tmp_path / "thin.png", tmp_path / "wide.png"
    Image.new("RGBA", (4096, 1), (255, 0, 0, 255)).save(thin)
    Image.new("RGBA", (300, 100), (0, 0, 255, 255)).save(wide)
    probe = (
        "import json, sys\n"
        "from quoteclip.spec import WatermarkSpec\n"
        "from watermarks import watermark_image\n"
        "img, at = watermark_image(WatermarkSpec(logo=sys.argv[1], size=0.3), (1280, 720))\n"
        "peak = int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]) / 1024\n"
        "print(json.dumps({'size': img.size, 'at': at, 'peak_mb': peak}))\n"
    )
    drawn = [
        json.loads(
            subprocess.run([sys.executable, "-c", probe, str(p)], capture_output=True, text=True, check=True).stdout
        )
        for p in (thin, wide)
    ]
    assert drawn[0]["size"][0] <= 640 and drawn[0]["size"][1] <= 216 and drawn[0]["peak_mb"] < 250, drawn[0]
    assert drawn[1]["size"] == [640, 213] and drawn[1]["peak_mb"] < 250, drawn[1]  # 300×100 at 216 px, then narrowed
