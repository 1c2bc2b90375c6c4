"""Finding a quote in a transcript by its words, and the CLI paths that use it."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from quoteclip.errors import BadInput
from quoteclip.spec import Word
from quoteclip.transcript import align, load_transcript, parse_cues, retime

YOUTUBE_VTT = """WEBVTT
Kind: captions
Language: en

00:00:01.000 --> 00:00:03.510 align:start position:0%
so<00:00:01.200><c> this</c><00:00:01.600><c> weird</c><00:00:02.000><c> scheduling</c>

00:00:03.510 --> 00:00:03.520 align:start position:0%
so this weird scheduling
\u0020

00:00:03.520 --> 00:00:06.000 align:start position:0%
so this weird scheduling
which<00:00:03.900><c> um</c><00:00:04.100><c> i'm</c><00:00:04.400><c> quite</c><00:00:04.900><c> sure</c>
"""

SRT = """1
00:00:10,000 --> 00:00:12,000
It reduces the bubble,

2
00:00:12,000 --> 00:00:14,500
the wastage. <i>Right?</i>
"""


def test_youtube_auto_captions_word_times_and_rolling_lines() -> None:
    words = parse_cues(YOUTUBE_VTT)
    assert [w.text for w in words] == ["so", "this", "weird", "scheduling", "which", "um", "i'm", "quite", "sure"]
    assert (words[1].start, words[4].start, words[-1].start) == (1.2, 3.52, 4.9)


def test_align_tolerates_case_punctuation_contractions_fillers_and_near_misses() -> None:
    words = parse_cues(YOUTUBE_VTT)
    found = align("This weird schedule, which I am quite sure", words)
    assert (found.start, found.end, found.score) == (1.2, 6.0, 1.0)
    timed = retime("This weird scheduling, which I'm quite sure", found.words)
    assert [w.text for w in timed][-3:] == ["I'm", "quite", "sure"] and timed[4].start == 4.1


def test_srt_without_word_times_is_spread_by_length() -> None:
    words = parse_cues(SRT)
    assert [w.text for w in words] == ["It", "reduces", "the", "bubble,", "the", "wastage.", "Right?"]
    found = align("reduces the bubble, the wastage", words)
    assert 10.0 < found.start < 11.0 and 12.0 < found.end < 14.5


def test_json_word_list(tmp_path) -> None:
    path = tmp_path / "words.json"
    path.write_text(
        json.dumps({"words": [{"word": "hello", "start": 1, "end": 1.4}, {"text": "world", "start": 1.5, "end": 2}]})
    )
    assert align("Hello, world!", load_transcript(path)).end == 2.0


def test_refused_below_threshold_with_the_score() -> None:
    with pytest.raises(BadInput, match=r"quote: not found in the transcript \(best match scores 0\.\d\d, below"):
        align("this scheduling is completely different", parse_cues(YOUTUBE_VTT))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not a transcript at all", "no timed text found"),
        (b'[{"start": 1}', "is not valid JSON"),
        (b'[{"start": 1, "end": 2}, {"text": "x"}]', "word 1 needs text, start and end"),
        (b"\xff\xfe\x00bad", "is not UTF-8 text"),
    ],
)
def test_bad_transcripts(tmp_path, content, message) -> None:
    path = tmp_path / "t.vtt"
    path.write_bytes(content)
    with pytest.raises(BadInput, match=message):
        load_transcript(path)
    with pytest.raises(BadInput, match="file not found"):
        load_transcript(tmp_path / "missing.vtt")


@pytest.mark.slow
def test_cli_align_and_render_by_transcript(media, tmp_path) -> None:
    vtt = tmp_path / "ep.vtt"
    vtt.write_text(YOUTUBE_VTT)
    done = run_cli("align", str(vtt), "--quote", "this weird scheduling", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["start"] == 1.2
    src = media(size="320x180", duration=8, gop=60)
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips")}
    quote = "This weird scheduling, which I'm quite sure"
    clip = run_cli(
        "render", str(src), "--transcript", str(vtt), "--caption", quote, "--style", "karaoke", "--json", env=env
    )
    assert clip.returncode == 0, clip.stderr
    body = json.loads(clip.stdout)
    assert abs(body["duration"] - 4.8) < 0.05  # 1.2 → 6.0 from the transcript
    srt = (tmp_path / "clips" / f"{body['key']}.srt").read_text()
    assert "This weird scheduling," in srt  # the quote as it reads, timed by the transcript
    missing = run_cli("render", str(src), "--caption", "x", env=env)
    assert missing.returncode == 2 and "start: required (or give --transcript" in missing.stderr
    nowhere = run_cli("render", str(src), "--transcript", str(vtt), "--caption", "nothing like it at all", env=env)
    assert nowhere.returncode == 2 and "quote: not found in the transcript" in nowhere.stderr


@pytest.mark.slow
def test_brand_style_file(media, tmp_path) -> None:
    from mediacheck import streams

    brand = tmp_path / "brand.json"
    style = {
        "style": {"preset": "bold-outline", "highlight": "#00E5FF"},
        "profile": "vertical",
        "fit": "blur",
        "watermark": {"text": "StarZero", "position": "top-left"},
    }
    brand.write_text(json.dumps(style))
    src = media(size="320x180", duration=4, gop=60)
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips")}
    done = run_cli(
        "render",
        str(src),
        "--start",
        "1",
        "--end",
        "3",
        "--caption",
        "brand",
        "--style-file",
        str(brand),
        "--json",
        env=env,
    )
    assert done.returncode == 0, done.stderr
    info = streams(__import__("pathlib").Path(json.loads(done.stdout)["path"]))
    assert (info["width"], info["height"]) == (720, 1280)
    manifest = json.loads((tmp_path / "clips" / f"{json.loads(done.stdout)['key']}.manifest.json").read_text())
    assert (
        manifest["spec"]["style"]["highlight"] == "#00E5FF" and manifest["spec"]["watermark"]["position"] == "top-left"
    )
    brand.write_text(json.dumps({"colour": "red"}))
    bad = run_cli("render", str(src), "--start", "1", "--end", "3", "--style-file", str(brand), env=env)
    assert bad.returncode == 2 and "style file has unknown fields ['colour']" in bad.stderr


def test_retime_keeps_every_quote_word() -> None:
    spoken = [Word("a", 0, 1), Word("c", 2, 3)]
    assert [(w.text, w.start, w.end) for w in retime("a b c", spoken)] == [("a", 0, 1), ("b", 1, 2), ("c", 2, 3)]
