"""Links to the pages made by someone else, opened in Chromium with an API key required and the tab signed in:
whatever the address names (a cut, word times that are not JSON, markup in a caption, a batch's quotes), and
after going away and back, no request is sent with the tab's key before a click, no markup from the address
becomes part of the page, and the page still shows what it could read."""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Iterator

import pytest
from conftest import CHROMIUM_FLAGS

from testkit.faces import serving

KEY = "k-attack-secret"
MARKUP = '<img src=x id=injected onerror="window.ran=1">'


@pytest.fixture
def keyed(queue_env) -> Iterator[str]:
    """``quoteclip serve`` with an API key required (no worker: nothing may be asked of one)."""
    with serving({**os.environ, **queue_env, "QUOTECLIP_API_KEYS": KEY}) as served:
        yield served.base


def test_no_address_makes_a_page_spend_the_tabs_key(chromium, keyed) -> None:
    from playwright.sync_api import sync_playwright

    source = "http://127.0.0.1:9/ep.mp4"
    words = json.dumps([{"text": "hello", "start": 1, "end": 1.5}, {"text": "there", "start": 1.5, "end": 2}])
    addresses = {
        "bad words": f"/edit?{urllib.parse.urlencode({'source': source, 'start': '1', 'end': '2', 'words': '[{'})}",
        "words": f"/edit?{urllib.parse.urlencode({'source': source, 'start': '1', 'end': '2', 'words': words})}",
        "markup": f"/edit?{urllib.parse.urlencode({'source': source, 'start': '1', 'end': '2', 'caption': MARKUP})}",
        "index": f"/?{urllib.parse.urlencode({'source': source, 'caption': MARKUP, 'speaker': MARKUP})}",
        "batch": f"/batch?{urllib.parse.urlencode({'source': source, 'quotes': '1,2,' + MARKUP})}",
    }
    seen: dict[str, tuple[object, ...]] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            page.goto(f"{keyed}/edit")
            page.evaluate(f"sessionStorage.setItem('quoteclip.key', {KEY!r})")  # a tab signed in
            sent: list[str] = []
            errors: list[str] = []
            page.on("request", lambda r: sent.append(f"{r.method} {r.url}") if r.method != "GET" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            for name, address in addresses.items():
                page.goto(keyed + address, wait_until="load")
                page.wait_for_timeout(300)
                state = page.evaluate(
                    "() => [document.getElementById('source').value, !!document.getElementById('injected'),"
                    " !!window.ran, (document.getElementById('hint') || {}).textContent || '']"
                )
                seen[name] = (list(sent), list(errors), *state)
                sent.clear()
                errors.clear()
            page.goto(f"{keyed}/batch", wait_until="load")
            for kit in ({"style": None}, {"profiles": 5}):  # a brand style file of the wrong kinds: said
                brand = {"name": "brand.json", "mimeType": "application/json", "buffer": json.dumps(kit).encode()}
                page.set_input_files("#brandfile", brand)
                page.wait_for_timeout(200)
                seen[f"kit {kit}"] = (list(errors), page.inner_text("#summary"))
                errors.clear()
            page.goto(keyed + addresses["words"], wait_until="load")
            page.goto(f"{keyed}/batch", wait_until="load")
            page.go_back(wait_until="load")  # back (from the back/forward cache, or loaded again)
            page.wait_for_timeout(300)
            seen["back"] = (list(sent), list(errors), page.input_value("#source"))
        finally:
            browser.close()
    for name in ("bad words", "words", "markup"):
        assert seen[name][:5] == ([], [], source, False, False), (name, seen[name])
    assert "word times" in str(seen["bad words"][5]), seen["bad words"]  # said, and the form still filled
    for name in ("index", "batch"):
        assert seen[name][:5] == ([], [], source, False, False), (name, seen[name])
    assert seen["back"] == ([], [], source), seen["back"]
    for kit in ("kit {'style': None}", "kit {'profiles': 5}"):
        errors_seen, said = seen[kit]
        assert errors_seen == [], (kit, errors_seen)
        assert said.startswith("brand style file: a field of an unexpected kind"), (kit, said)
