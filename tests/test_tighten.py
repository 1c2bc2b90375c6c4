"""Pauses tightened (``tighten``): a source of tone, a pause, tone; the clip holds the kept source frames one after
another (checked by pixels), its sound joins without a click, its captions and manifest follow; the default clip
is the exact quote."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from conftest import run_cli
from mediacheck import frame_index, frame_means

from jobs.pipeline.produce import produce_clip
from quoteclip.media import ffmpeg_quiet, lavfi
from quoteclip.spec import build_spec
from renderer.frames import first_frame_at
from storage import LocalStorage

RATE = Fraction(30)
# a 440 Hz tone, a pause from 1.5 s to 3.0 s, the tone again; under it all a quiet 1012 Hz hum (-40 dBFS, under
# silencedetect's floor), whose waveform a hard cut would break
SOUND = "aevalsrc='if(between(t,1.5,3.0),0,0.5*sin(2*PI*440*t))+0.01*sin(2*PI*1012*t)':s=48000:d=5"
WORDS = [
    {"text": "one", "start": 0.2, "end": 0.6},
    {"text": "two,", "start": 0.7, "end": 1.4},
    {"text": "three", "start": 3.1, "end": 3.6},
    {"text": "four.", "start": 3.7, "end": 4.4},
]
QUOTE = {"start": 0.0, "end": 4.6, "caption": "one two, three four.", "style": {"preset": "boxed"}}


@pytest.fixture(scope="module")
def pause_source(tmp_path_factory: pytest.TempPathFactory, ffmpeg_bin: str) -> Path:
    """5 s at 30 fps, each frame one flat gray level naming it (``mediacheck.frame_index``), with SOUND."""
    out = tmp_path_factory.mktemp("tighten") / "pause.mp4"
    picture = "color=c=black:s=320x180:r=30:d=5,geq=lum='16+mod(N*37\\,200)':cb=128:cr=128"
    subprocess.run(
        [
            *ffmpeg_quiet(ffmpeg_bin),
            *lavfi(picture, SOUND),
            *("-c:v", "libx264", "-preset", "ultrafast", "-g", "30", "-pix_fmt", "yuv420p"),
            *("-c:a", "aac", "-b:a", "192k", "-shortest", str(out)),
        ],
        check=True,
        timeout=60,
    )
    return out


def render(source: Path, settings, **extra: object):  # type: ignore[no-untyped-def]
    spec = build_spec({"source": str(source), **QUOTE, "fades": False, **extra})
    return produce_clip(spec, settings, LocalStorage(settings.storage_dir))


def manifest_of(result) -> dict:  # type: ignore[no-untyped-def]
    return json.loads(Path(result.path).with_suffix(".manifest.json").read_text())


def sound(path: Path) -> tuple[np.ndarray, int, float]:
    """The first channel's samples, their rate and the first one's time (seconds; the encoder's priming is before
    0)."""
    with av.open(str(path)) as c:
        frames = list(c.decode(audio=0))
        rate = c.streams.audio[0].sample_rate
    data = np.concatenate([f.to_ndarray() for f in frames], axis=1)
    return data[0].astype(np.float64), rate, float(frames[0].time or 0.0)


def biggest_step(samples: np.ndarray, rate: int, first: float, at: float, around: float) -> float:
    """The largest change from one sample to the next within ``around`` seconds of ``at``."""
    a, b = int((at - around - first) * rate), int((at + around - first) * rate)
    return float(np.abs(np.diff(samples[a:b])).max())


def check_frames(result, spans: list[dict]) -> None:  # type: ignore[no-untyped-def]
    """The clip holds the spans' frames, one after another: as many frames, and each span's first frame (the one
    after a cut) and last frame are those source frames, named by their gray level."""
    means = frame_means(Path(result.path))
    assert len(means) == sum(s["last_frame"] - s["first_frame"] + 1 for s in spans)
    at = 0
    for span in spans:
        first, last = span["first_frame"], span["last_frame"]
        assert frame_index(means[at], first) == first
        at += last - first + 1
        assert frame_index(means[at - 1], last) == last


def test_tighten_from_the_transcript_cuts_the_pause_on_frames_without_a_click(pause_source, settings) -> None:
    result = render(pause_source, settings, words=WORDS, tighten=0.4)
    # the pause between "two," (ends 1.4) and "three" (starts 3.1) keeps 0.2 s on each side: frames 48-86 go
    cut_from, cut_to = first_frame_at(1.6, RATE), first_frame_at(2.9, RATE)
    spans = manifest_of(result)["kept"]
    assert [(s["first_frame"], s["last_frame"]) for s in spans] == [(0, cut_from - 1), (cut_to, 137)]
    assert spans[1]["start"] == 2.9 and spans[0]["end"] == 1.6
    frames = cut_from + (138 - cut_to)
    assert abs(result.duration - frames / 30) < 0.02
    check_frames(result, spans)
    samples, rate, first = sound(Path(result.path))
    assert abs(len(samples) / rate + first - frames / 30) < 0.03  # the sound as long as the picture
    # the hum alone is heard from 0.1 s before the join (the tone ends at 1.5 s) to 0.1 s after it (the tone is
    # back at 3.0 s in the source): no step in it larger than the hum's own
    join = cut_from / 30
    hum = biggest_step(samples, rate, first, join - 0.07, 0.015)
    assert biggest_step(samples, rate, first, join, 0.05) < 2 * hum, "a click where the pause was cut"
    # the captions follow: "three" (3.1 s in the source) is highlighted 0.2 s after the join
    vtt = Path(result.path).with_suffix(".vtt").read_text()
    assert "00:00:01.800 --> 00:00:02.400\none two, <c.hl>three</c> four." in vtt


def test_tighten_without_a_transcript_finds_the_silence(pause_source, settings) -> None:
    result = render(pause_source, settings, tighten=0.4, quality="preview")
    spans = manifest_of(result)["kept"]
    assert len(spans) == 2
    # the silence (1.5 s to 3.0 s) less 0.2 s at each end, on frames
    assert abs(spans[0]["last_frame"] + 1 - first_frame_at(1.7, RATE)) <= 1
    assert abs(spans[1]["first_frame"] - first_frame_at(2.8, RATE)) <= 1
    check_frames(result, spans)


def test_default_clip_is_the_exact_quote(pause_source, settings) -> None:
    plain = render(pause_source, settings, words=WORDS, quality="preview")
    short = render(pause_source, settings, words=WORDS, quality="preview", tighten=5.0)  # no pause that long
    assert plain.key != short.key
    for result in (plain, short):
        assert "kept" not in manifest_of(result)
        assert len(frame_means(Path(result.path))) == 138
    assert Path(plain.path).read_bytes() == Path(short.path).read_bytes()
    assert "tighten" not in manifest_of(plain)["spec"]


def test_tighten_refused_on_an_instant_clip(pause_source) -> None:
    with pytest.raises(Exception, match="tighten: an instant clip"):
        build_spec({"source": str(pause_source), **QUOTE, "tighten": 0.4, "quality": "instant"})


def test_batch_tightens_with_the_option(pause_source, tmp_path) -> None:
    quotes = tmp_path / "quotes.csv"
    quotes.write_text("start,end,caption\n0,4.6,one two three four\n")
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips")}
    done = run_cli(
        "batch", str(pause_source), str(quotes), "--tighten", "0.4", "--quality", "preview", "--json", env=env
    )
    assert done.returncode == 0, done.stderr
    [clip] = json.loads(done.stdout)["clips"]
    assert len(json.loads(Path(clip["path"]).with_suffix(".manifest.json").read_text())["kept"]) == 2
    assert abs(clip["duration"] - 3.5) < 0.1  # the silence (1.5 s) shortened to 0.4 s


def test_poster_rendered_alone_is_the_tightened_clips(pause_source, settings, tmp_path) -> None:
    from PIL import Image

    from jobs.pipeline.produce import produce_poster

    # from 0.7 s: frames 21-47 and 87-137 kept, 2.6 s; the poster (1 s in) is clip frame 30, source frame 90
    quote = {"source": str(pause_source), **QUOTE, "start": 0.7, "words": WORDS, "tighten": 0.4}
    alone = produce_poster(build_spec(quote), settings, LocalStorage(settings.storage_dir))
    other = replace(settings, storage_dir=tmp_path / "other")
    clip = produce_clip(build_spec(quote), other, LocalStorage(other.storage_dir))

    def named(path: Path) -> int:
        with Image.open(path) as image:
            gray = np.asarray(image.convert("L"), dtype=np.float64)
        return frame_index(float(gray[: gray.shape[0] // 3, : gray.shape[1] // 3].mean()), 90)

    assert named(settings.storage_dir / f"{alone.key}.jpg") == 90
    assert named(Path(clip.path).with_suffix(".jpg")) == 90


@pytest.mark.slow
def test_tighten_a_monologue_of_many_pauses(media, settings) -> None:
    """A quote with 110 pauses (ffmpeg's expression parser refused a sum of more than 100 terms, exit 244 "Cannot
    allocate memory", which was also taken for the worker's fault): every pause is cut, frame by frame."""
    source = media(size="160x90", fps=10, duration=45, pattern="levels")
    words = [{"text": f"w{n}", "start": round(0.4 * n, 2), "end": round(0.4 * n + 0.1, 2)} for n in range(111)]
    result = produce_clip(
        build_spec(
            {
                "source": str(source),
                "start": 0.0,
                "end": 44.2,
                "caption": " ".join(w["text"] for w in words),
                "words": words,
                "tighten": 0.1,
                "quality": "preview",
                "fades": False,
            }
        ),
        settings,
        LocalStorage(settings.storage_dir),
    )
    spans = manifest_of(result)["kept"]
    assert len(spans) == 111
    check_frames(result, spans)
