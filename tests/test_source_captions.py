"""A source's own captions as its transcript (``--transcript source``): YouTube's automatic captions in json3 (each
word's start, its end derived, rolling events read once), a human-made track first, a generic page's ``<track>`` of
word-timed WebVTT; read through yt-dlp in the page's extraction and kept beside it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run_cli

from quoteclip.errors import SourceUnavailable
from quoteclip.transcript import parse_json3
from testkit.videosite import Episode, SiteCaption, SiteFormat, VideoSite


def event(start: float, until: float, *words: tuple[str, float]) -> dict[str, object]:
    """A json3 event from ``start`` to ``until`` (seconds), its words at their own starts."""
    at = int(start * 1000)
    segs = [{"utf8": (" " if n else "") + text, "tOffsetMs": int(t * 1000) - at} for n, (text, t) in enumerate(words)]
    return {"tStartMs": at, "dDurationMs": int(until * 1000) - at, "wWinId": 1, "segs": segs}


def rolling_json3() -> str:
    """Automatic captions as YouTube sends them: a window event, lines that stay up while the next one rolls in
    (events overlap), line-break events, and one event sent twice. "echo" ends with its event (303.9), before
    "foxtrot" starts."""
    events = [
        {"tStartMs": 0, "dDurationMs": 600000, "id": 1, "wpWinPosId": 1, "wsWinStyleId": 1},
        event(299.9, 302.2, ("we", 299.9), ("said", 300.4), ("charlie", 300.9)),
        {"tStartMs": 301500, "dDurationMs": 700, "wWinId": 1, "aAppend": 1, "segs": [{"utf8": "\n"}]},
        event(301.5, 303.9, ("delta", 301.5), ("echo", 302.2)),
        event(301.5, 303.9, ("delta", 301.5), ("echo", 302.2)),  # sent again (the rolling display)
        event(305.0, 307.0, ("foxtrot", 305.0), ("golf", 305.6)),
    ]
    return json.dumps({"wireMagic": "pb3", "events": events})


HUMAN_VTT = """WEBVTT

00:01:00.000 --> 00:01:02.000
Charlie said

00:01:10.000 --> 00:01:12.000
delta echo here
"""


@pytest.fixture
def caption_site(tmp_path: Path) -> Iterator[VideoSite]:
    media = tmp_path / "media.mp4"
    media.write_bytes(b"\0" * 1024)  # captions need no media: nothing reads it
    site = VideoSite()
    formats = [SiteFormat("18", media, acodec="mp4a.40.2", width=640, height=360)]
    site.episodes["auto1"] = Episode(
        "Automatic captions",
        600,
        formats,
        [SiteCaption("en", "vtt", HUMAN_VTT.replace("00:01", "00:09")), SiteCaption("en", "json3", rolling_json3())],
    )
    site.episodes["human1"] = Episode(
        "Both tracks",
        600,
        formats,
        [SiteCaption("en", "json3", rolling_json3()), SiteCaption("en", "vtt", HUMAN_VTT, auto=False)],
    )
    site.episodes["none1"] = Episode("No captions", 600, formats)
    yield site
    site.close()


def cli_env(tmp_path: Path) -> dict[str, str]:
    return {
        "QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"),
        "QUOTECLIP_CACHE_DIR": str(tmp_path / "cache"),
        "QUOTECLIP_ALLOW_ADDRESSES": "127.0.0.1/32",
    }


def test_json3_words_end_where_the_next_starts_or_with_their_event() -> None:
    words = parse_json3(json.loads(rolling_json3()))
    assert [(w.text, w.start, w.end) for w in words] == [
        ("we", 299.9, 300.4),
        ("said", 300.4, 300.9),
        ("charlie", 300.9, 301.5),
        ("delta", 301.5, 302.2),
        ("echo", 302.2, 303.9),  # its event ends before "foxtrot" starts
        ("foxtrot", 305.0, 305.6),
        ("golf", 305.6, 307.0),
    ]


def test_align_finds_a_quote_in_the_sources_automatic_captions(caption_site, tmp_path) -> None:
    env = cli_env(tmp_path)
    done = run_cli("align", caption_site.url("auto1"), "--quote", "Charlie, delta echo", "--json", env=env)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert (found["start"], found["end"]) == (300.9, 303.9)  # json3 first, though a VTT track is listed too
    assert [w["text"] for w in found["words"]] == ["charlie", "delta", "echo"]
    assert caption_site.caption_loads == {"auto1/1": 1}
    # again, as `source` with --source: the page and its captions come from the extraction store
    again = run_cli(
        "align", "source", "--source", caption_site.url("auto1"), "--quote", "delta echo", "--json", env=env
    )
    assert again.returncode == 0, again.stderr
    assert (json.loads(again.stdout)["start"], json.loads(again.stdout)["end"]) == (301.5, 303.9)
    assert caption_site.page_loads["auto1"] == 1 and caption_site.caption_loads == {"auto1/1": 1}


def test_a_human_made_track_comes_before_the_automatic_one(caption_site, tmp_path) -> None:
    done = run_cli("align", caption_site.url("human1"), "--quote", "delta echo here", "--json", env=cli_env(tmp_path))
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["start"] == 70.0 and found["end"] == 72.0
    assert caption_site.caption_loads == {"human1/1": 1}


def test_a_page_without_captions_says_so(caption_site, settings) -> None:
    from sources.captions import source_words

    with pytest.raises(SourceUnavailable, match="no captions in en \\(QUOTECLIP_SOURCE_CAPTION_LANGS\\)"):
        source_words(caption_site.url("none1"), settings)


def test_a_generic_pages_track_of_word_timed_webvtt_is_its_captions(http_source, settings) -> None:
    from sources.captions import source_words

    (http_source.root / "ep.mp4").write_bytes(b"\0" * 1024)
    (http_source.root / "ep.vtt").write_text(
        "WEBVTT\n\n00:00:04.000 --> 00:00:07.000\n"
        "so<00:00:04.500><c> the</c><00:00:05.000><c> quote</c><00:00:05.600><c> is</c><00:00:06.200><c> here</c>\n"
    )
    (http_source.root / "page.html").write_text(
        "<html><head><title>A page</title></head><body><video src='/ep.mp4'>"
        "<track kind='captions' src='/ep.vtt' srclang='en' label='English'></video></body></html>"
    )
    from quoteclip.transcript import align

    found = align("the quote is", source_words(http_source.url("page.html"), settings))
    assert (found.start, found.end) == (4.5, 6.2)
    assert http_source.requests["ep.vtt"] == 1


@pytest.mark.parametrize("source", ["/tmp/no-such-episode.mp4", "http://127.0.0.1:9/episode.mp4"])
def test_a_file_or_a_media_url_has_no_captions_of_its_own(source: str, settings) -> None:
    from quoteclip.errors import BadInput
    from sources.captions import source_words

    with pytest.raises(BadInput, match="^transcript: source: only a page .* carries captions of its own"):
        source_words(source, settings)
