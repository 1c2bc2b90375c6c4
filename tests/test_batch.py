"""``quoteclip batch``: a quotes file through the real CLI, inline and through real workers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli, runs
from mediacheck import streams


@pytest.fixture
def episode(media) -> str:  # type: ignore[no-untyped-def]
    return str(media(size="320x180", duration=12, gop=60))


@pytest.mark.slow
def test_a_bad_line_is_named_and_the_others_render(episode, tmp_path, ffmpeg_counter) -> None:
    wrapper, log = ffmpeg_counter
    quotes = tmp_path / "quotes.csv"
    quotes.write_text('start,end,caption\n1,2.5,first quote\n2,oops,second quote\n4,5,"third, with a comma"\n')
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"), "FFMPEG_BINARY": wrapper}
    done = run_cli("batch", episode, str(quotes), "--watermark", "StarZero", "--json", env=env)
    assert done.returncode == 1, done.stderr
    assert f"{quotes}: line 3: bad input: end: end must be seconds" in done.stderr
    body = json.loads(done.stdout)
    assert body["failed"] == 1 and [c["line"] for c in body["clips"]] == [2, 3, 4]
    first, bad, third = body["clips"]
    assert "error" in bad and first["profile"] == "landscape" and first["status"] == "finished"
    assert abs(streams(first["path"])["duration"] - 1.5) < 0.05 and abs(third["duration"] - 1.0) < 0.05
    assert runs(log) == 2
    assert "2 clips: 2 rendered, 0 already stored; 1 line not read as a quote" in done.stderr  # a line is no clip
    again = run_cli("batch", episode, str(quotes), "--watermark", "StarZero", env=env)  # as text, the clips stored
    said = again.stdout + again.stderr
    assert again.returncode == 1 and said.count("end must be seconds") == 1, said  # each failure said once
    assert "2 clips: 0 rendered, 2 already stored; 1 line not read as a quote" in again.stderr


@pytest.mark.slow
def test_rerunning_a_batch_renders_nothing_and_says_so(episode, tmp_path, ffmpeg_counter) -> None:
    wrapper, log = ffmpeg_counter
    quotes = tmp_path / "quotes.jsonl"
    quotes.write_text('{"start": 1, "end": 2, "caption": "one"}\n\n{"start": "0:03", "end": "0:04.5"}\n')
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"), "FFMPEG_BINARY": wrapper}
    assert run_cli("batch", episode, str(quotes), env=env).returncode == 0
    assert runs(log) == 2
    again = run_cli("batch", episode, str(quotes), "--json", env=env)
    assert again.returncode == 0 and runs(log) == 2  # nothing rendered the second time
    assert "all 2 clips were already stored: nothing was rendered" in again.stderr
    assert "2/2 clips done (0 rendered, 2 already stored, 0 failed)" in again.stderr  # not "rendered"
    assert "2 clips: 0 rendered, 2 already stored" in again.stderr  # the summary, with --json too
    assert [c["line"] for c in json.loads(again.stdout)["clips"]] == [1, 3]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing.csv", None, "quotes file not found"),
        ("q.csv", "when,what\n1,x\n", "needs a CSV header naming start, end and caption"),
        ("q.csv", "start,end,caption,extra\n1,2,x,y\n", "unknown columns ['extra']"),
        ("q.csv", "start,end,caption\n", "quotes file has no quotes"),
        ("q.json", '{"start": 1}', "must hold a JSON list of quotes"),
        ("q.json", "[{", "is not valid JSON"),
    ],
)
def test_an_unusable_file_exits_2(episode, tmp_path, name: str, content: str | None, message: str) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    done = run_cli("batch", episode, str(path), env={"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips")})
    assert done.returncode == 2 and message in done.stderr, done.stderr


@pytest.mark.slow
def test_json_list_with_a_bad_item_and_captions_found_in_a_transcript(episode, tmp_path) -> None:
    transcript = tmp_path / "ep.json"
    words = [
        {"text": w, "start": 1 + i * 0.4, "end": 1.35 + i * 0.4}
        for i, w in enumerate("so this weird scheduling is to reduce the bubble".split())
    ]
    transcript.write_text(json.dumps(words))
    quotes = tmp_path / "quotes.json"
    quotes.write_text(
        json.dumps([{"caption": "this weird scheduling"}, "not a quote", {"caption": "reduce the bubble"}])
    )
    done = run_cli(
        "batch",
        episode,
        str(quotes),
        "--transcript",
        str(transcript),
        "--json",
        env={"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips")},
    )
    assert done.returncode == 1, done.stderr
    clips = json.loads(done.stdout)["clips"]
    assert "line 2: bad input: not a quote" in done.stderr and "error" in clips[1]
    assert abs(clips[0]["duration"] - 1.15) < 0.05 and abs(clips[2]["duration"] - 1.15) < 0.05


def test_batch_through_the_workers(episode, tmp_path, queue_env, workers) -> None:
    quotes = tmp_path / "quotes.csv"
    quotes.write_text("start,end,caption\n1,2,one\n3,4,two\n5,6,three\n")
    worker = workers.start(burst=False)
    try:
        done = run_cli("batch", episode, str(quotes), "--queue", "--json", env=queue_env)
    finally:
        worker.terminate()
        worker.communicate(timeout=60)
    assert done.returncode == 0, done.stderr
    clips = json.loads(done.stdout)["clips"]
    assert [c["status"] for c in clips] == ["finished"] * 3 and all(c["link"] for c in clips)
    assert "3/3 clips done (3 rendered, 0 already stored, 0 failed)" in done.stderr


@pytest.mark.slow
def test_a_batch_in_three_profiles_decodes_each_quote_once(episode, tmp_path, ffmpeg_counter) -> None:
    wrapper, log = ffmpeg_counter
    quotes = tmp_path / "quotes.csv"
    quotes.write_text("start,end,caption\n1,2.5,first quote\n4,5,second quote\n")
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"), "FFMPEG_BINARY": wrapper}
    args = ("batch", episode, str(quotes), "--profiles", "landscape,vertical,square", "--json")
    done = run_cli(*args, env=env)
    assert done.returncode == 0, done.stderr
    clips = json.loads(done.stdout)["clips"]
    assert [(c["line"], c["profile"]) for c in clips] == [
        (line, p) for line in (2, 3) for p in ("landscape", "vertical", "square")
    ]
    assert [(c["width"], c["height"]) for c in clips[:3]] == [(1280, 720), (720, 1280), (720, 720)]
    assert runs(log) == 2  # one ffmpeg run per quote
    again = run_cli(*args, env=env)
    assert all(c["cached"] for c in json.loads(again.stdout)["clips"]) and runs(log) == 2


@pytest.mark.slow
def test_the_docs_creator_example_a_brand_kit_in_three_shapes(episode, tmp_path, ffmpeg_counter) -> None:
    """The creators' page's "week of clips" (docs/creators.md): a brand file with a logo, caption style, three
    profiles, a fit and a background; every quote in every shape, in quote order then profile order."""
    from PIL import Image

    wrapper, log = ffmpeg_counter
    Image.new("RGBA", (200, 80), (255, 212, 0, 255)).save(tmp_path / "logo.png")
    brand = tmp_path / "brand.json"
    brand.write_text(
        json.dumps(
            {
                "watermark": {"logo": str(tmp_path / "logo.png"), "position": "top-right", "opacity": 0.85},
                "style": {"preset": "karaoke", "highlight": "#ffd400"},
                "caption_size": 0.06,
                "profiles": ["landscape", "vertical", "square"],
                "fit": "blur",
                "background": "#101820",
            }
        )
    )
    quotes = tmp_path / "quotes.csv"
    quotes.write_text('start,end,caption\n1,3,"A first quote, with a comma"\n5,7,A second quote\n')
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "week-of-clips"), "FFMPEG_BINARY": wrapper}
    done = run_cli("batch", episode, str(quotes), "--style-file", str(brand), "--json", env=env)
    assert done.returncode == 0, done.stderr
    clips = json.loads(done.stdout)["clips"]
    assert [(c["line"], c["profile"]) for c in clips] == [
        (line, p) for line in (2, 3) for p in ("landscape", "vertical", "square")
    ]
    assert runs(log) == 2 and all(Path(c["path"]).parent == tmp_path / "week-of-clips" for c in clips)
    # the logo is in the top-right corner of every shape
    from mediacheck import rgb_frame

    for clip in clips:
        frame = rgb_frame(Path(clip["path"]), 0.5)
        height, width = frame.shape[:2]
        corner = frame[: height // 6, width * 2 // 3 :].reshape(-1, 3)
        yellow = (corner[:, 0] > 180) & (corner[:, 1] > 150) & (corner[:, 2] < 90)
        assert yellow.sum() > 500, (clip["profile"], int(yellow.sum()))


def test_a_quote_left_open_is_refused_by_its_line_and_nothing_renders(episode, tmp_path, ffmpeg_counter) -> None:
    wrapper, log = ffmpeg_counter
    quotes = tmp_path / "quotes.csv"
    quotes.write_text('start,end,caption\n1.0,2.0,"unclosed quote, here\n3.0,4.0,next quote\n5,6,last\n')
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"), "FFMPEG_BINARY": wrapper}
    done = run_cli("batch", episode, str(quotes), env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # one line
    assert f"quotes file {str(quotes)!r}: line 2: the quote opened in the caption is not closed" in done.stderr
    assert "into line 3 ('3.0,4.0,next quote')" in done.stderr
    assert runs(log) == 0 and not (tmp_path / "clips").exists()
    listed = run_cli("batch", episode, str(quotes), "--dry-run", env=env)  # the same refusal without rendering
    assert listed.returncode == 2 and "line 2: the quote opened in the caption is not closed" in listed.stderr


def test_dry_run_lists_the_quotes_as_read_and_renders_nothing(episode, tmp_path, ffmpeg_counter) -> None:
    wrapper, log = ffmpeg_counter
    quotes = tmp_path / "quotes.csv"
    quotes.write_text(
        'start,end,caption\n1,2.5,first quote\n\n4,5,"a caption on two lines,\nas meant"\n6,7,"he said ""hi"""\n'
    )
    env = {
        "QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"),
        "FFMPEG_BINARY": wrapper,
        "QUOTECLIP_REDIS_URL": "redis://127.0.0.1:1/0",  # nothing listens: a dry run needs no Redis
    }
    done = run_cli("batch", episode, str(quotes), "--dry-run", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "quotes": [
            {"number": 1, "line": 2, "start": "1", "end": "2.5", "caption": "first quote"},
            {"number": 2, "line": 4, "start": "4", "end": "5", "caption": "a caption on two lines,\nas meant"},
            {"number": 3, "line": 6, "start": "6", "end": "7", "caption": 'he said "hi"'},
        ],
        "count": 3,
    }
    text = run_cli("batch", episode, str(quotes), "--dry-run", env=env)
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines() == [
        '1\tline 2\t1\t2.5\t"first quote"',
        '2\tline 4\t4\t5\t"a caption on two lines,\\nas meant"',
        '3\tline 6\t6\t7\t"he said \\"hi\\""',
    ]
    assert runs(log) == 0 and not (tmp_path / "clips").exists()
    assert not list(tmp_path.glob("**/*.mp4"))


def test_dry_run_refuses_what_the_batch_would_refuse(episode, tmp_path, ffmpeg_counter) -> None:
    """A quote whose end is before its start, and one longer than its platform takes: the dry run once listed both
    and exited 0, and the batch then refused them. Now it says each one's refusal and exits 1, rendering nothing."""
    wrapper, log = ffmpeg_counter
    quotes = tmp_path / "quotes.csv"
    quotes.write_text("start,end,caption\n1,2.5,fine\n5,3,backwards\n1,200,too long for x\n")
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"), "FFMPEG_BINARY": wrapper}
    done = run_cli("batch", episode, str(quotes), "--dry-run", "--platform", "x", "--json", env=env)
    assert done.returncode == 1, done.stderr
    listed = json.loads(done.stdout)["quotes"]
    assert "error" not in listed[0], listed
    assert "end must be after start" in listed[1]["error"], listed
    assert "platform x takes at most 140 s" in listed[2]["error"], listed
    assert "2 of 3 quotes will be refused" in done.stderr
    assert runs(log) == 0 and not (tmp_path / "clips").exists()


def test_the_same_refusal_of_many_clips_is_said_once(tmp_path) -> None:
    """3 quotes × 4 platforms of a local source the service refuses (QUOTECLIP_ALLOW_LOCAL_SOURCES=false): the
    refusal was said 12 times; now once, then one line naming the lines of the 11 others."""
    source = tmp_path / "ep.mp4"
    source.write_bytes(b"")
    quotes = tmp_path / "quotes.csv"
    quotes.write_text("start,end,caption\n1,2,one\n3,4,two\n5,6,three\n")
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"), "QUOTECLIP_ALLOW_LOCAL_SOURCES": "false"}
    done = run_cli("batch", str(source), str(quotes), "--platform", "shorts,reels,tiktok,x", env=env)
    assert done.returncode == 1, done.stderr
    refused = [line for line in done.stderr.splitlines() if "local paths are not allowed" in line]
    assert len(refused) == 2, done.stderr
    assert refused[0].startswith(f"quoteclip: {quotes}: line 2: bad input: source: local paths are not allowed")
    assert "11 more clips refused alike (lines 2, 3, 4)" in refused[1], refused
