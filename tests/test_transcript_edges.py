"""A transcript's bad cue or word is bad input naming it (never an internal error), and a caption's text before
the first word found in the transcript or after the last stays in the caption, timed with its neighbour."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli
from fastapi.testclient import TestClient

from api import create_app
from quoteclip.errors import BadInput
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from quoteclip.transcript import find_quote, parse_cues, read_transcript
from renderer.render import caption_layout, cut_for
from renderer.sidecars import captions_vtt

BACKWARDS_VTT = (
    "WEBVTT\n\n00:00:01.000 --> 00:00:03.000\nweird scheduling\n\n00:00:05.000 --> 00:00:04.000\nreally works\n"
)
BACKWARDS_SRT = "1\n00:00:01,000 --> 00:00:03,000\nweird scheduling\n\n2\n00:00:05,000 --> 00:00:04,000\nreally works\n"
VTT = "WEBVTT\n\n00:00:01.000 --> 00:00:03.000\nweird scheduling\n\n00:00:03.000 --> 00:00:05.000\nreally works\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (BACKWARDS_VTT, r"transcript: cue 2 \(line 6\) ends before it starts: 00:00:05.000 --> 00:00:04.000"),
        (BACKWARDS_SRT, r"transcript: cue 2 \(line 6\) ends before it starts: 00:00:05,000 --> 00:00:04,000"),
        ('[{"text": "hi", "start": 5, "end": 4}]', r"transcript: word 0 \('hi'\) ends at 4.0, before its start 5.0"),
        ('[{"text": "hi", "start": -1, "end": 4}]', r"transcript: word 0 \('hi'\) needs times of 0 or more"),
        ('[{"text": "hi", "start": 1, "end": NaN}]', r"transcript: word 0 \('hi'\) needs times of 0 or more"),
    ],
)
def test_a_bad_cue_or_word_is_bad_input_naming_it(text: str, message: str) -> None:
    with pytest.raises(BadInput, match=message):
        read_transcript(text, "'t'")


def test_json3_segments_out_of_order_are_read() -> None:
    """A segment of several words followed by one with an earlier offset: its words end where they start."""
    events = {
        "events": [
            {
                "tStartMs": 1000,
                "dDurationMs": 2000,
                "segs": [{"utf8": "two words", "tOffsetMs": 500}, {"utf8": " x", "tOffsetMs": 100}],
            }
        ]
    }
    words = read_transcript(json.dumps(events), "'t'")
    assert sorted(w.text for w in words) == ["two", "words", "x"]


def test_the_command_line_says_which_cue_and_exits_2(tmp_path) -> None:
    vtt = tmp_path / "ep.vtt"
    vtt.write_text(BACKWARDS_VTT)
    done = run_cli("align", str(vtt), "--quote", "weird scheduling")
    assert done.returncode == 2, done.stderr
    assert "cue 2 (line 6) ends before it starts: 00:00:05.000 --> 00:00:04.000" in done.stderr, done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    clip = run_cli("render", str(tmp_path / "ep.mp4"), "--transcript", str(vtt), "--caption", "weird scheduling")
    assert clip.returncode == 2 and "cue 2 (line 6) ends before it starts" in clip.stderr, clip.stderr


def test_the_api_answers_422_naming_the_cue(queue_env) -> None:
    client = TestClient(create_app(Settings.from_env(queue_env)))
    for transcript in (BACKWARDS_VTT, BACKWARDS_SRT, '[{"text": "hi", "start": 5, "end": 4}]'):
        answer = client.post(
            "/batches",
            json={
                "source": "http://127.0.0.1:9/ep.mp4",
                "quotes": "caption\nweird scheduling\n",
                "transcript": transcript,
            },
        )
        assert answer.status_code == 422, answer.text
        assert "ends" in answer.json()["detail"] and "Traceback" not in answer.text


def _captions(caption: str) -> tuple[list[str], str]:
    found, timed = find_quote(caption, parse_cues(VTT))
    words = [{"text": w.text, "start": w.start, "end": w.end} for w in timed]
    spec = build_spec({"source": "ep.mp4", "caption": caption, "start": found.start, "end": found.end, "words": words})
    track = caption_layout(spec, cut_for(spec, None))
    assert track is not None
    return [w.text for w in track.words], captions_vtt(spec).decode()


@pytest.mark.parametrize(
    "caption",
    [
        "This weird scheduling, really works 🔥👍🏽",
        "🔥 weird scheduling, really works",
        "weird scheduling, really works (applause)",
    ],
)
def test_text_before_the_first_or_after_the_last_word_found_stays_in_the_caption(caption: str) -> None:
    words, vtt = _captions(caption)
    assert words == caption.split()
    cues = [block for block in vtt.split("\n\n") if "-->" in block]
    assert caption.split()[0] in cues[0] and caption.split()[-1] in cues[-1], vtt


def test_leading_and_trailing_text_share_the_first_and_last_words_times() -> None:
    _, timed = find_quote("This weird scheduling, really works 🔥", parse_cues(VTT))
    assert (timed[0].start, timed[0].end) == (timed[1].start, timed[1].end) == (1.0, 1.706)
    assert (timed[-1].start, timed[-1].end) == (timed[-2].start, timed[-2].end) == (4.077, 5.0)


@pytest.mark.slow
def test_a_rendered_clip_carries_the_whole_caption(media, tmp_path) -> None:
    vtt = tmp_path / "ep.vtt"
    vtt.write_text(VTT)
    src = media(size="160x90", duration=6, gop=30)
    caption = "This weird scheduling, really works 🔥👍🏽"
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips")}
    done = run_cli("render", str(src), "--transcript", str(vtt), "--caption", caption, "--json", env=env)
    assert done.returncode == 0, done.stderr
    key = json.loads(done.stdout)["key"]
    manifest = json.loads((tmp_path / "clips" / f"{key}.manifest.json").read_text())
    assert manifest["caption"]["text"] == caption  # as burned: every word of it
    assert "🔥👍🏽" in (tmp_path / "clips" / f"{key}.vtt").read_text()


def test_a_batch_with_a_bad_transcript_is_refused_once_with_exit_2(tmp_path) -> None:
    vtt = tmp_path / "ep.vtt"
    vtt.write_text(BACKWARDS_VTT)
    quotes = tmp_path / "quotes.csv"
    quotes.write_text("caption\nweird scheduling\nreally works\n")
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips")}
    done = run_cli("batch", str(tmp_path / "ep.mp4"), str(quotes), "--transcript", str(vtt), env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("cue 2 (line 6) ends before it starts") == 1, done.stderr
