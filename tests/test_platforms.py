"""Loudness and platform presets: a levelled clip measured by ffmpeg's own EBU R128 meter (target, true peak, sync),
a platform's clip probed for its shape, its captions' pixels out of the app's overlay zones, its longest clip."""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from pathlib import Path

import av
import pytest
from conftest import run_cli, runs
from mediacheck import first_loud_sample, rgb_frame

from jobs.pipeline.keys import clip_key
from quoteclip.errors import BadInput
from quoteclip.platforms import PLATFORMS, TRUE_PEAK
from quoteclip.spec import ClipSpec, build_spec, in_profiles
from renderer.plan import build_outputs
from renderer.probe import probe
from renderer.render import render_clips


@pytest.fixture
def tone(media) -> Path:  # type: ignore[no-untyped-def]
    """A steady 440 Hz tone at about -22 LUFS (lavfi's sine: 1/8 of full scale), quieter than the apps play."""
    return media(size="320x180", duration=5, tone=440)


@pytest.fixture
def beeps(media) -> Path:  # type: ignore[no-untyped-def]
    """Black with a white flash and a full-scale beep for the first 0.1 s of every second: loud, peaks at 0 dBFS."""
    return media(size="320x180", duration=5, pattern="flash")


def meter(ffmpeg_bin: str, path: Path) -> tuple[float, float]:
    """(integrated loudness LUFS, true peak dBTP) of a file's sound, by ffmpeg's ebur128 filter."""
    said = subprocess.run(
        [ffmpeg_bin, "-hide_banner", "-nostats", "-i", str(path), "-map", "0:a"]
        + ["-af", "ebur128=peak=true:framelog=quiet", "-f", "null", "-"],
        capture_output=True,
        text=True,
        check=True,
    ).stderr.rpartition("Summary:")[2]
    integrated = re.search(r"I:\s+(\S+) LUFS", said)
    peak = re.search(r"Peak:\s+(\S+) dBFS", said)
    assert integrated and peak, said
    return float(integrated.group(1)), float(peak.group(1))


def timing(path: Path) -> dict[str, tuple[float, float]]:
    """Each stream's (start, duration) in seconds, as the container says."""
    with av.open(str(path)) as c:
        return {
            s.type: (float((s.start_time or 0) * s.time_base), float((s.duration or 0) * s.time_base))
            for s in c.streams
            if s.time_base is not None
        }


def render(spec: ClipSpec, source: Path, folder: Path, ffmpeg_bin: str) -> Path:
    folder.mkdir()
    return render_clips([spec], str(source), probe(str(source)), folder, ffmpeg_bin, 60)[0].path


def test_loudness_levels_a_quiet_clip_to_its_target_in_sync(tone, tmp_path, ffmpeg_bin) -> None:
    plain = render(build_spec({"source": str(tone), "start": 1, "end": 3.5}), tone, tmp_path / "plain", ffmpeg_bin)
    spec = build_spec({"source": str(tone), "start": 1, "end": 3.5, "loudness": -14})
    levelled = render(spec, tone, tmp_path / "levelled", ffmpeg_bin)
    before, after = meter(ffmpeg_bin, plain), meter(ffmpeg_bin, levelled)
    assert before[0] < -18  # (the source is quieter than the target: the gain raises it)
    assert abs(after[0] - -14) <= 1.0, after
    assert after[1] < TRUE_PEAK, after
    streams = timing(levelled)
    assert streams == timing(plain)
    assert streams["audio"] == pytest.approx(streams["video"], abs=0.001)


def test_loudness_holds_the_true_peak_and_keeps_sync_when_the_gain_needs_the_limiter(
    beeps, tmp_path, ffmpeg_bin
) -> None:
    """Full-scale beeps raised 3 dB: the limiter holds their peaks under -1 dBTP, its lookahead delay compensated
    (each beep starts where it starts without levelling, with its flash)."""
    plain = render(build_spec({"source": str(beeps), "start": 0.5, "end": 3.5}), beeps, tmp_path / "p", ffmpeg_bin)
    loud = build_spec({"source": str(beeps), "start": 0.5, "end": 3.5, "loudness": meter(ffmpeg_bin, plain)[0] + 3})
    levelled = render(loud, beeps, tmp_path / "l", ffmpeg_bin)
    assert meter(ffmpeg_bin, plain)[1] > TRUE_PEAK - 1  # (raised 3 dB, these peaks would pass the limit)
    assert meter(ffmpeg_bin, levelled)[1] < TRUE_PEAK
    first, again = first_loud_sample(plain), first_loud_sample(levelled)
    assert first is not None and again is not None
    assert again == pytest.approx(first, abs=0.002)
    assert timing(levelled) == timing(plain)


def test_the_default_clip_is_not_measured_nor_levelled_and_keeps_its_key(tone, tmp_path, ffmpeg_counter) -> None:
    wrapper, log = ffmpeg_counter
    spec = build_spec({"source": str(tone), "start": 1, "end": 2})
    assert "loudness" not in spec.model_dump() and "platform" not in spec.model_dump()
    assert "bottom_safe" not in spec.model_dump()["style"]
    off = build_spec({"source": str(tone), "start": 1, "end": 2, "loudness": "off"})
    assert off == spec
    key = clip_key(spec, "id", lambda ref: ref)
    assert clip_key(off, "id", lambda ref: ref) == key
    assert clip_key(spec.model_copy(update={"loudness": -14.0}), "id", lambda ref: ref) != key
    result = render_clips([spec], str(tone), probe(str(tone)), tmp_path, wrapper, 60)[0]
    assert runs(log) == 1  # no measuring pass
    assert not {"volume", "alimiter", "ebur128"} & set(re.findall(r"[a-z0-9_]+", " ".join(result.argv)))


def test_a_platform_clip_has_its_shape_its_loudness_and_its_captions_clear_of_the_app(beeps, tmp_path, ffmpeg_bin):
    """Shorts: 720x1280, -14 LUFS, no caption pixel in the bottom or right-side zone the app covers, where the
    vertical profile's own margins put some (large wide letters: lines as wide as the frame allows)."""
    base = {"source": str(beeps), "start": 0.5, "end": 2.5, "caption": "WM MW WM MW WM MW WM MW WM MW WM MW"}
    shorts = build_spec({**base, "platform": "shorts"})
    assert shorts.profile == "vertical" and shorts.loudness == -14.0
    clip = render(shorts, beeps, tmp_path / "shorts", ffmpeg_bin)
    assert probe(str(clip)).display_size == (720, 1280)
    assert abs(meter(ffmpeg_bin, clip)[0] - -14) <= 1.0
    plain = render(build_spec({**base, "profile": "vertical"}), beeps, tmp_path / "vertical", ffmpeg_bin)
    unsafe = build_spec({**base, "platform": "shorts", "style": {"right_safe": None}})  # (the profile's width)
    wide = render(unsafe, beeps, tmp_path / "wide", ffmpeg_bin)
    preset = PLATFORMS["shorts"]
    assert preset.bottom_safe is not None and preset.right_safe is not None

    def covered(path: Path) -> tuple[int, int]:
        """Caption pixels in the bottom zone and in the right-side zone (black frames but for the captions)."""
        frame = rgb_frame(path, at=0.9).max(axis=2) > 100  # (the flash is at 0.5 s)
        height, width = frame.shape
        bottom = frame[height - round(preset.bottom_safe * height) :, :]
        right = frame[:, width - round(preset.right_safe * width) :]
        return int(bottom.sum()), int(right.sum())

    assert covered(clip) == (0, 0)
    assert covered(plain)[0] > 50
    assert covered(wide)[1] > 20
    assert (rgb_frame(clip, at=0.9).max(axis=2) > 100).sum() > 500  # (the captions are there)


def test_sound_of_nan_samples_is_refused_for_loudness_naming_why(tmp_path, ffmpeg_bin) -> None:
    """A source whose sound is 32-bit float samples that are NaN: ebur128 says ``Peak: nan dBFS``, which was read as
    "ffmpeg measured the sound's loudness but did not say it" (a render failure); it is the input's, named."""
    import struct

    raw, source = tmp_path / "nan.f32", tmp_path / "nan.mov"
    raw.write_bytes(struct.pack("<f", float("nan")) * 48000 * 3)
    subprocess.run(
        [ffmpeg_bin, "-hide_banner", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=s=160x90:r=25:d=3"]
        + ["-f", "f32le", "-ar", "48000", "-ac", "1", "-i", str(raw), "-c:v", "libx264", "-preset", "ultrafast"]
        + ["-c:a", "pcm_f32le", "-shortest", str(source)],
        check=True,
        timeout=60,
    )
    spec = build_spec({"source": str(source), "start": 0.5, "end": 2.5, "loudness": -14})
    with pytest.raises(BadInput, match=r"samples that are not numbers \(NaN\)"):
        render(spec, source, tmp_path / "out", ffmpeg_bin)


def test_a_quote_longer_than_the_platform_takes_is_refused_with_the_limit(tmp_path) -> None:
    with pytest.raises(BadInput, match=r"platform x takes at most 140 s; this quote is 151 s"):
        build_spec({"source": "a.mp4", "start": 10, "end": 161, "platform": "x"})
    build_spec({"source": "a.mp4", "start": 10, "end": 161, "platform": "shorts"})  # (Shorts take 180 s)
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path)}
    said = run_cli("render", "a.mp4", "--start", "0", "--end", "151", "--platform", "x", env=env)
    assert said.returncode == 2 and "platform x takes at most 140 s; this quote is 151 s" in said.stderr
    assert "Traceback" not in said.stderr


def test_platform_names_shapes_and_loudness_are_checked() -> None:
    base = {"source": "a.mp4", "start": 1, "end": 3}
    with pytest.raises(BadInput, match=r"platform: Input should be 'shorts'"):
        build_spec({**base, "platform": "vine"})
    with pytest.raises(BadInput, match=r"profile: platform reels renders vertical, got profile 'landscape'"):
        build_spec({**base, "platform": "reels", "profile": "landscape"})
    with pytest.raises(BadInput, match=r"loudness: a target in LUFS \(such as -14\) or off, got 'loud'"):
        build_spec({**base, "loudness": "loud"})
    with pytest.raises(BadInput, match=r"instant clip copies the source's sound"):
        build_spec({**base, "loudness": -14, "quality": "instant"})
    with pytest.raises(BadInput, match=r"platform x sets the shape"):
        in_profiles(build_spec({**base, "platform": "x"}), ("landscape", "vertical"))
    quiet = build_spec({**base, "platform": "tiktok", "loudness": "off"})
    assert quiet.loudness is None and ClipSpec.model_validate(quiet.model_dump()) == quiet  # (off stays off)


def test_a_platform_with_a_bitrate_cap_caps_the_encoder(tone) -> None:
    from renderer.plan import Target

    info = probe(str(tone))
    x = build_spec({"source": str(tone), "start": 1, "end": 2, "platform": "x"})
    argv = build_outputs([Target(x, [], "out.mp4")], info, str(tone))
    assert argv[argv.index("-maxrate") + 1] == f"{PLATFORMS['x'].max_kbps - 128}k"
    plain = build_outputs([Target(x.model_copy(update={"platform": None}), [], "out.mp4")], info, str(tone))
    assert "-maxrate" not in plain


def test_a_request_and_a_brand_file_name_a_platform(tmp_path, settings) -> None:
    from api.clips import clip_spec
    from api.models import ClipRequest
    from api.quotes import quote_fields
    from cli.options import ClipOptions, specs_from_options

    source = tmp_path / "talk.mp4"
    source.write_bytes(b"")
    request = ClipRequest.model_validate({"source": str(source), "start": 1, "end": 3, "platform": "reels"})
    spec = clip_spec(quote_fields(request.model_dump(exclude={"callback_url", "profiles"}), settings, None), settings)
    assert (spec.platform, spec.profile, spec.loudness, spec.style.bottom_safe) == ("reels", "vertical", -14.0, 0.35)
    brand = tmp_path / "brand.json"
    brand.write_text('{"platform": "tiktok", "loudness": "off", "style": {"preset": "karaoke"}}')
    quote = ClipOptions(source=str(source), start="1", end="3")
    (kit,) = specs_from_options(replace(quote, style_file=str(brand)), settings)
    assert (kit.platform, kit.profile, kit.loudness, kit.style.preset) == ("tiktok", "vertical", None, "karaoke")
    several = specs_from_options(replace(quote, platform="shorts,x,linkedin"), settings)
    assert [(s.platform, s.profile) for s in several] == [
        ("shorts", "vertical"),
        ("x", "landscape"),
        ("linkedin", "square"),
    ]
    shape = specs_from_options(replace(quote, style_file=str(brand), profile="square"), settings)
    assert [(s.platform, s.profile) for s in shape] == [(None, "square")]  # (a shape given: not the file's platform)


def test_a_clip_over_the_platform_file_size_is_refused_with_the_limit(tone, tmp_path, ffmpeg_bin, monkeypatch) -> None:
    from dataclasses import replace as changed

    from quoteclip.errors import RenderFailed

    monkeypatch.setitem(PLATFORMS, "x", changed(PLATFORMS["x"], max_bytes=10 * 1024))  # (an app taking 10 KB)
    spec = build_spec({"source": str(tone), "start": 1, "end": 3, "platform": "x"})
    with pytest.raises(RenderFailed, match=r"the clip came out 0\.\d MB, over the 0\.009\d* MB platform x takes"):
        render(spec, tone, tmp_path / "big", ffmpeg_bin)
