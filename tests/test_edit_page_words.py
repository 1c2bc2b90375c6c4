"""The edit page's word list from the page's own captions: a page previewed without word times offers its
captions on the user's click (POST /previews/words, no inline handler: the page's policy allows none); the word
list, the cut's words and the word nudges then come from them. In Chromium, against ``quoteclip serve``."""

from __future__ import annotations

import urllib.parse

import pytest
from conftest import CHROMIUM_FLAGS
from test_sites import episode_files, site  # noqa: F401  (the site's episode and its fixture)
from test_source_captions import rolling_json3

from testkit.videosite import SiteCaption

pytestmark = pytest.mark.slow


def test_edit_page_loads_the_pages_captions_as_its_words_and_nudges_by_them(
    chromium,
    site,  # noqa: F811
    workers,
) -> None:
    from playwright.sync_api import sync_playwright

    site.episodes["ep1"].captions = [SiteCaption("en", "json3", rolling_json3())]
    query = urllib.parse.urlencode({"source": site.url("ep1"), "start": "300.9", "end": "302.2"})
    with workers.serve({"QUOTECLIP_SOURCE_HOSTS": "*"}) as served, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        errors: list[str] = []
        try:
            page = browser.new_page()
            page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            page.goto(f"{served}/edit?{query}")
            assert not page.is_visible("#pagewords")  # nothing offered before a preview
            page.click("#preview")
            page.wait_for_function("() => window.previews >= 1", timeout=60_000)
            page.click("#pagewords")
            page.wait_for_function("() => window.pageWordsShown >= 1", timeout=30_000)
            listed = page.eval_on_selector_all(
                "#wordlist span", "(spans) => spans.map((s) => [s.textContent, s.className])"
            )
            assert listed[:5] == [["we", ""], ["said", ""], ["charlie", "in"], ["delta", "in"], ["echo", ""]], listed
            assert page.input_value("#caption") == "charlie delta"
            assert not page.is_visible("#pagewords")
            page.keyboard.press("d")  # the end to the next word's end: "echo" ends at 303.9
            page.wait_for_function("() => window.previews >= 2", timeout=60_000)
            assert page.input_value("#end") == "303.900"
            assert page.input_value("#caption") == "charlie delta echo"
            page.keyboard.press("w")  # the start to the word before: "said" starts at 300.4
            page.wait_for_function("() => window.previews >= 3", timeout=60_000)
            assert page.input_value("#start") == "300.400"
            assert page.input_value("#caption") == "said charlie delta echo"
            page.fill("#end", "302.2")  # a cut typed in: its words are the captions' inside it
            page.click("#preview")
            page.wait_for_function("() => window.previews >= 4", timeout=60_000)
            assert page.input_value("#caption") == "said charlie delta"
            assert not [e for e in errors if "Content Security Policy" in e], errors
        finally:
            browser.close()
    # the first preview read the page without its captions; the click read both, kept for the nudges' previews
    assert site.page_loads["ep1"] == 2 and site.caption_loads == {"ep1/0": 1}


def test_a_media_file_is_offered_no_page_captions(chromium, media, http_source, workers) -> None:
    """A plain media file has no captions of its own (POST /previews/words can only answer 422): once previewed,
    the edit page does not offer them (it once did)."""
    from playwright.sync_api import sync_playwright

    (http_source.root / "ep.mp4").symlink_to(media(size="320x180", duration=6, gop=30))
    query = urllib.parse.urlencode({"source": http_source.url("ep.mp4"), "start": "1", "end": "2"})
    with workers.serve() as served, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            page.goto(f"{served}/edit?{query}")
            page.click("#preview")
            page.wait_for_function("() => window.previews >= 1", timeout=60_000)
            assert not page.is_visible("#pagewords")
        finally:
            browser.close()


def test_the_pages_media_suffixes_are_the_services() -> None:
    """The edit page tells a media file from a page by its suffix, as sources.is_direct_media does."""
    import re
    from pathlib import Path

    from sources import MEDIA_SUFFIXES

    page = (Path(__file__).resolve().parent.parent / "api" / "edit.html").read_text()
    listed = re.search(r"const MEDIA_SUFFIXES = \[(.*?)\];", page)
    assert listed is not None and set(re.findall(r'"([^"]+)"', listed.group(1))) == MEDIA_SUFFIXES
