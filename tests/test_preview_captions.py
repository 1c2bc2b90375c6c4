"""The edit page's preview shows the captions the final burns: the same words (those the cut holds), the same
pages and the same highlight times, from the render's own layout (renderer/captions.py, renderer/sidecars.py)."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import CHROMIUM_FLAGS
from fastapi.testclient import TestClient

from quoteclip.spec import CaptionStyle, Word, build_spec
from renderer.captions import caption_track
from renderer.sidecars import captions_vtt, to_vtt, vtt_cues

WORDS = [
    ("This", 1.0, 1.3),
    ("is", 1.3, 1.5),
    ("where", 1.5, 1.8),
    ("the", 1.8, 2.0),
    ("quote", 2.0, 2.4),
    ("begins,", 2.4, 2.9),
    ("and", 2.9, 3.1),
    ("it", 3.1, 3.2),
    ("goes", 3.2, 3.5),
    ("on", 3.5, 3.7),
    ("long", 3.7, 4.0),
    ("enough.", 4.0, 4.4),
]
HEARD = [{"text": t, "start": a, "end": b} for t, a, b in WORDS]


def parse_vtt(text: str) -> list[list[object]]:
    """[start, end, cue text] of each cue of a WebVTT file (its STYLE block left out)."""

    def seconds(stamp: str) -> float:
        h, m, s = stamp.split(":")
        return round(int(h) * 3600 + int(m) * 60 + float(s), 3)

    cues = []
    for block in text.split("\n\n")[1:]:
        head, _, body = block.strip("\n").partition("\n")
        if "-->" in head:
            a, b = head.split(" --> ")
            cues.append([seconds(a), seconds(b), body])
    return cues


def test_vtt_cues_are_the_drawn_states() -> None:
    """A cue per drawn state, at its times, the lit words marked (karaoke: the spoken ones too); a caption never
    highlighted (spread over the quote) keeps a cue per page and no STYLE block."""
    words = [Word(t, round(a - 1.0, 3), round(b - 1.0, 3)) for t, a, b in WORDS]
    track = caption_track(words, (1280, 720), "landscape", 0.055, CaptionStyle(preset="karaoke"), None, True, 3.6)
    assert track is not None and len(track.pages) == 1 and len(track.pages[0].lines) == 2
    cues = vtt_cues(track)
    assert [(a, b) for a, b, _ in cues] == [(s.start, s.end) for s in track.states]
    assert cues[2][2] == "<c.hl>This</c> <c.hl>is</c> <c.hl>where</c> the quote begins,\nand it goes on long enough."
    vtt = to_vtt(track)
    assert vtt.startswith("WEBVTT\n\nSTYLE\n::cue(.hl) { color: #FFD400; }\n\n00:00:00.000 --> 00:00:00.300\n")
    assert parse_vtt(vtt) == [[a, b, t] for a, b, t in cues]
    untimed = caption_track(words, (1280, 720), "landscape", 0.055, CaptionStyle(), None, False, 3.6)
    assert untimed is not None
    assert to_vtt(untimed) == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:03.600\nThis is where the quote begins,\nand it goes on long enough.\n"
    )


def test_preview_captions_route_lays_out_the_cut_without_a_render(tmp_path) -> None:
    """POST /previews/captions: the WebVTT the final's sidecar holds for the body's cut (the words it cuts off
    left out), answered without reading the source; a bad body is a 422 naming the field."""
    from api.app import create_app
    from quoteclip.settings import Settings

    body = {"source": "https://example.com/nowhere.mp4", "start": 1.3, "end": 4.5, "words": HEARD}
    settings = Settings(storage_dir=tmp_path / "clips", redis_url="redis://127.0.0.1:1/0")
    with TestClient(create_app(settings)) as client:
        got = client.post("/previews/captions", json=body)
        bad = client.post("/previews/captions", json={**body, "end": 0.5})
    assert got.status_code == 200 and got.headers["content-type"].startswith("text/vtt")
    assert got.text == captions_vtt(build_spec(body)).decode()
    assert "This" not in got.text and parse_vtt(got.text)[0][2].startswith("<c.hl>is</c> where")
    assert bad.status_code == 422 and "end" in bad.text


@pytest.fixture
def served(workers, queue_env) -> Iterator[str]:
    """``quoteclip serve`` and ``quoteclip worker`` as real processes on loopback."""
    worker = workers.start(burst=False)
    try:
        with workers.serve() as base:
            yield base
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        if worker.stdout:
            worker.stdout.close()


@pytest.mark.slow
def test_nudged_preview_shows_the_finals_captions_in_chromium(chromium, served, media, http_source, queue_env) -> None:
    """A cut nudged one word later ("This" left out): the preview's cues in the player are the final's sidecar
    captions, cue for cue (two-line pages, the spoken word marked, at the states' times), and the final's
    manifest says the caption as burned."""
    from playwright.sync_api import sync_playwright

    (http_source.root / "ep.mp4").symlink_to(media(size="320x180", duration=6, gop=45))
    query = urllib.parse.urlencode(
        {"source": http_source.url("ep.mp4"), "start": "1.0", "end": "4.5", "words": json.dumps(HEARD)}
    )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            page.goto(f"{served}/edit?{query}")
            if page.query_selector("#hint") is not None:  # (a cut in the address waits for Preview)
                page.click("#form button[type=submit]")
            page.wait_for_function("() => window.previews >= 1", timeout=60_000)
            page.keyboard.press("e")  # the start to the next word's: "This" is left out
            page.wait_for_function("() => window.previews >= 2", timeout=60_000)
            start = page.input_value("#start")
            shown = page.evaluate("window.captionCues")
            page.click("#render")
            page.wait_for_function("() => window.finalShown === true", timeout=120_000)
        finally:
            browser.close()
    assert start == "1.300"
    folder = Path(queue_env["QUOTECLIP_STORAGE_DIR"])
    manifests = [json.loads(m.read_text()) for m in folder.glob("*.manifest.json")]
    (final,) = [m for m in manifests if m["spec"]["quality"] == "final"]
    assert final["spec"]["start"] == 1.3
    sidecar = parse_vtt((folder / f"{final['key']}.vtt").read_text())
    assert shown == sidecar
    assert not any("This" in text for _, _, text in shown)
    assert shown[0][:2] == [0.0, 0.2] and shown[0][2].startswith("<c.hl>is</c> where the quote begins,\nand")
    assert final["caption"]["text"] == "is where the quote begins, and it goes on long enough."
    assert final["caption"]["pages"] == [
        {"start": 0.0, "end": 3.2, "lines": ["is where the quote begins,", "and it goes on long enough."]}
    ]
