"""Signed clip links in a real browser: a static page on another origin (another loopback port) holding only links
its server signed, no key anywhere, against ``quoteclip serve`` (with API keys, so anything but a link would be
refused) and a worker. Headless Chromium (Debian's package) driven by Playwright. The source's frames are each one
gray level, so a canvas grab names the frame a <video> shows."""

from __future__ import annotations

import io
import math
import re
import time
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest
from conftest import CHROMIUM_FLAGS
from mediacheck import frame_index, frame_means, streams
from test_browser import ARTIFACTS, GRAB

from quoteclip import links
from renderer.frames import first_frame_at
from renderer.render import poster_time

pytestmark = pytest.mark.slow

SITE, SECRET = "quotes", "quotes-site-secret-0123"
RATE = Fraction(30000, 1001)
# The <video>'s frame, with the player's element handed in (the card's video is in its shadow root).
GRAB_ELEMENT = GRAB.replace("(id) => {\n  const v = document.getElementById(id);", "(v) => {")


@pytest.fixture
def api_settings() -> dict[str, str]:
    """More settings for the API process (a test parametrizes it)."""
    return {}


@pytest.fixture
def link_api(workers, api_settings, tmp_path) -> Iterator[str]:
    """``quoteclip serve`` with a site key, and API keys (a page holds none: anything but a link would be 401)."""
    workers.env.update({"QUOTECLIP_SITE_KEYS": f"{SITE}:{SECRET}", "QUOTECLIP_API_KEYS": "k-never-in-a-page"})
    workers.env.update(api_settings)
    with workers.serve() as base:
        yield base


def gray(png: bytes, corner: float = 0.4) -> float:
    """The gray mean of a screenshot's top-left part (clear of the caption and the watermark)."""
    from PIL import Image, ImageStat

    image = Image.open(io.BytesIO(png)).convert("L")
    box = (0, 0, int(image.width * corner), int(image.height * corner))
    return float(ImageStat.Stat(image.crop(box)).mean[0])


def drawn(element: Any, timeout: float = 10) -> float:
    """``gray`` of an element's picture once it is drawn: two screenshots in a row the same, and not the empty
    element's black."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        now = gray(element.screenshot())
        if now == last and now > 1:
            return now
        assert time.monotonic() < deadline, f"{element} was not drawn (gray {now})"
        last = now
        element.page.wait_for_timeout(50)


def poster_frame(start: float, end: float) -> int:
    """The source frame a clip's poster shows: the clip's frame nearest ``poster_time``, counted from its first."""
    at = poster_time(end - start)
    return first_frame_at(start, RATE) + math.ceil((at - 0.5 / float(RATE)) * float(RATE))


def test_a_page_of_signed_links_on_another_origin_in_chromium(
    chromium, link_api, workers, media, http_source, tmp_path
) -> None:
    """A plain <video src poster> and <a href> and a <quote-clip> card, links only: each poster shows before play
    (the frame the poster names), each video plays from the quote's first frame, the download saves the clip
    under its readable name, and the card says it is rendering before it plays."""
    from playwright.sync_api import sync_playwright

    (http_source.root / "lv.mp4").symlink_to(
        media(size="320x180", fps="30000/1001", duration=6, gop=45, pattern="levels")
    )
    source = http_source.url("lv.mp4")
    plain = {"source": source, "start": 1.068, "end": 2.5, "caption": "one two three", "watermark": "StarZero"}
    card = {**plain, "start": 2.002, "end": 3.5}

    def signed(clip: dict[str, object], variant: str) -> str:
        return links.sign(clip, SITE, SECRET, link_api, variant)

    page_html = f"""<!doctype html><meta charset="utf-8"><title>Quotes</title><link rel="icon" href="data:,">
<style>video {{ width: 320px; height: 180px; background: #000 }}</style>
<video id="plain" src="{signed(plain, "clip")}" poster="{signed(plain, "poster")}" preload="none"
  crossorigin="anonymous" muted playsinline></video>
<a id="dl" href="{signed(plain, "download")}">Download 720p mp4</a>
<quote-clip id="card" src="{signed(card, "clip")}" poster="{signed(card, "poster")}"
  download="{signed(card, "download")}" crossorigin="anonymous"></quote-clip>
<script src="{link_api}/embed.js"></script>
"""
    assert "k-never-in-a-page" not in page_html
    (http_source.root / "quotes.html").write_text(page_html)
    page_url = http_source.url("quotes.html")
    assert page_url.split("/")[2] != link_api.split("/")[2]  # another origin

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        console: list[str] = []
        asked: list[str] = []
        try:
            page = browser.new_page(accept_downloads=True)
            page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
            page.on("request", lambda request: asked.append(request.url))
            page.goto(page_url, wait_until="domcontentloaded")
            worker = workers.start(burst=False)  # the posters' requests are held until a worker renders them
            try:
                # the posters, before anything is played
                page.wait_for_function(
                    "performance.getEntriesByType('resource').filter(e => e.name.endsWith('.jpg')"
                    " && e.responseEnd > 0).length >= 2",
                    timeout=60_000,
                )
                page.wait_for_function(
                    "(() => { const i = document.getElementById('card').shadowRoot.querySelector('img.poster');"
                    " return i.complete && i.naturalWidth === 1280; })()",
                    timeout=30_000,
                )
                plain_poster = drawn(page.locator("#plain"))
                card_poster = drawn(page.locator("#card").locator("img.poster"))
                labels = page.locator("#card").locator(".meta").inner_text()
                foot = page.locator("#card").locator(".foot").inner_text()
                assert page.evaluate("document.getElementById('plain').readyState") == 0  # no clip asked for yet
                assert not [url for url in asked if url.endswith(".mp4")], asked

                # the plain <video>: plays, from the quote's first frame
                page.evaluate(
                    """() => new Promise((done, failed) => {
                      const v = document.getElementById('plain');
                      v.addEventListener('playing', () => { v.pause(); v.currentTime = 0;
                        v.addEventListener('seeked', () => done(), {once: true}); }, {once: true});
                      v.addEventListener('error', () => failed(new Error('video error')), {once: true});
                      v.play();
                    })""",
                )
                plain_first = frame_index(page.locator("#plain").evaluate(GRAB_ELEMENT), 32)

                # the download: an <a href> across origins saves the clip under its own name
                with page.expect_download(timeout=60_000) as download_info:
                    page.click("#dl")
                download = download_info.value
                saved = tmp_path / "download.mp4"
                download.save_as(saved)

                # the card: rendering…, then playing from its first frame
                page.evaluate(
                    """() => { window.states = []; const card = document.getElementById('card');
                      card.addEventListener('quote-clip-state', (e) => window.states.push(
                        [e.detail, card.shadowRoot.querySelector('.state').textContent])); }"""
                )
                page.locator("#card").locator("button.play").click()
                page.wait_for_function("document.getElementById('card').dataset.state === 'rendering'")
                shown_state = page.locator("#card").locator(".state").inner_text()
                page.wait_for_function("document.getElementById('card').dataset.state === 'playing'", timeout=60_000)
                states = page.evaluate("window.states")
                video = page.locator("#card").locator("video")
                video.evaluate(
                    """(v) => new Promise((done) => { v.pause(); v.currentTime = 0;
                      v.addEventListener('seeked', () => done(), {once: true}); })"""
                )
                card_first = frame_index(video.evaluate(GRAB_ELEMENT), 60)
                played_labels = page.locator("#card").locator(".meta").inner_text()
                page.screenshot(path=str(ARTIFACTS / "links-page.png"), full_page=True)
            finally:
                worker.terminate()
                worker.wait(30)
                if worker.stdout:
                    worker.stdout.close()
        finally:
            browser.close()

    assert frame_index(plain_poster, poster_frame(1.068, 2.5)) == poster_frame(1.068, 2.5), plain_poster
    assert frame_index(card_poster, poster_frame(2.002, 3.5)) == poster_frame(2.002, 3.5), card_poster
    assert plain_first == first_frame_at(1.068, RATE) == 32
    assert card_first == first_frame_at(2.002, RATE) == 60
    assert re.fullmatch(r"one-two-three-1s-landscape-[0-9a-f]{8}\.mp4", download.suggested_filename), (
        download.suggested_filename
    )
    assert streams(saved)["width"] == 1280 and frame_index(frame_means(saved, limit=1, corner=0.4)[0], 32) == 32
    assert [state for state, _ in states][:2] == ["rendering", "playing"], states
    assert shown_state.startswith("rendering"), shown_state
    assert "0:00 / 0:01" in labels and "exact quote · 1.5s" in labels and "Download 720p mp4" in labels, labels
    assert "exact quote · 1.5s" in played_labels, played_labels
    assert foot == "720p mp4 · rendered on demand · StarZero watermark", foot
    api_origin = link_api.split("/")[2]
    to_api = [url.split(api_origin, 1)[1] for url in asked if f"//{api_origin}/" in url]
    assert to_api and all(path.startswith("/l/") or path == "/embed.js" for path in to_api), to_api
    assert not [line for line in console if line.startswith("error")], console


@pytest.mark.parametrize("api_settings", [{"QUOTECLIP_LINK_HOLD": "1"}])
def test_the_card_asks_again_past_the_hold_and_says_when_a_clip_cannot_be_played(
    chromium, link_api, workers, media, http_source
) -> None:
    """With no worker yet and a hold of 1 s, the card's clip is answered 503: the card keeps saying it renders and
    asks again after the Retry-After, and plays once a worker has rendered the clip; a quote past the video's end
    (failed by the worker for good: 422) says it cannot be played."""
    from playwright.sync_api import sync_playwright

    (http_source.root / "lv.mp4").symlink_to(
        media(size="320x180", fps="30000/1001", duration=6, gop=45, pattern="levels")
    )
    good = {"source": http_source.url("lv.mp4"), "start": 1.068, "end": 2.5, "caption": "one two three"}
    past = {**good, "start": 8, "end": 9}
    page_html = f"""<!doctype html><meta charset="utf-8"><title>Quotes</title><link rel="icon" href="data:,">
<quote-clip id="good" src="{links.sign(good, SITE, SECRET, link_api)}" crossorigin="anonymous"></quote-clip>
<quote-clip id="past" src="{links.sign(past, SITE, SECRET, link_api)}"></quote-clip>
<script src="{link_api}/embed.js"></script>
"""
    (http_source.root / "cards.html").write_text(page_html)
    clip_link = links.sign(good, SITE, SECRET, link_api)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        asked: list[str] = []
        try:
            page = browser.new_page()
            page.on("request", lambda request: asked.append(f"{request.method} {request.url}"))
            page.goto(http_source.url("cards.html"))
            page.locator("#good").locator("button.play").click()
            deadline = time.monotonic() + 30
            while sum(line == f"GET {clip_link}" for line in asked) < 2:  # answered 503, asked again
                assert time.monotonic() < deadline, asked
                page.wait_for_timeout(200)
            waiting = page.evaluate("document.getElementById('good').dataset.state")
            worker = workers.start(burst=False)
            try:
                page.wait_for_function("document.getElementById('good').dataset.state === 'playing'", timeout=60_000)
                page.locator("#past").locator("button.play").click()
                # at once: the failure for good is not asked again and again (8 tries would take over 16 s)
                page.wait_for_function("document.getElementById('past').dataset.state === 'error'", timeout=10_000)
                said = page.locator("#past").locator(".state").inner_text()
            finally:
                worker.terminate()
                worker.wait(30)
                if worker.stdout:
                    worker.stdout.close()
        finally:
            browser.close()
    assert waiting == "rendering"
    assert f"HEAD {clip_link}" in asked  # the card asked whether to try again (a HEAD starts no render)
    assert said == "this clip cannot be played"
