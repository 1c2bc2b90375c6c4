"""The pages hold the API key: each is sent with a strict Content-Security-Policy (no script or style but the page's
own, by hash; data calls to its own origin; never framed) and the other hardening headers, and still does its job
under it in Chromium with no violation reported; a cut named by someone else's link to /edit is shown but not
previewed (no request with the tab's key) until the user clicks."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import urllib.parse
from collections.abc import Iterator

import pytest
from conftest import CHROMIUM_FLAGS, serving_with_a_worker
from fastapi.testclient import TestClient

from api import create_app
from api.page import store_sources
from quoteclip.settings import Settings

PAGES = ("/", "/edit", "/batch")
KEY = "k-page-secret"
# Every CSP violation a page reports, and every console error, kept on the page for the test to read.
WATCH_VIOLATIONS = """
window.violations = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.violations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`));
"""


def directives(policy: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for part in policy.split(";"):
        name, *values = part.split()
        out[name] = values
    return out


def test_every_page_has_a_strict_policy_that_hashes_exactly_its_own_inline_blocks(queue_env) -> None:
    client = TestClient(create_app(Settings.from_env(queue_env)))
    for path in PAGES:
        answer = client.get(path)
        assert answer.status_code == 200, path
        headers = answer.headers
        assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff", path
        assert headers["referrer-policy"] == "no-referrer", path
        csp = directives(headers["content-security-policy"])
        assert csp["frame-ancestors"] == ["'none'"] and csp["default-src"] == ["'none'"], path
        assert csp["connect-src"] == ["'self'"] and csp["base-uri"] == ["'none'"], path
        for kind in ("script", "style"):
            allowed = csp[f"{kind}-src"]
            assert not {"'unsafe-inline'", "'unsafe-eval'", "*"} & set(allowed), (path, kind, allowed)
            blocks = re.findall(rf"<{kind}>(.*?)</{kind}>", answer.text, re.DOTALL)
            hashed = {f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'" for b in blocks}
            assert blocks and set(allowed) == {"'self'"} | hashed, (path, kind)
        # no inline handler or style attribute, which no hash can allow
        assert not re.search(r"<[^>]+\s(on[a-z]+|style)\s*=", answer.text, re.IGNORECASE), path
    shared = client.get("/pages.js").headers
    assert shared["x-content-type-options"] == "nosniff" and shared["content-type"].startswith("text/javascript")


def test_players_may_load_from_the_clip_store_and_nothing_else() -> None:
    assert store_sources(Settings.from_env({})) == ""  # a local store is served by the API itself
    s3 = {"QUOTECLIP_S3_BUCKET": "clips", "QUOTECLIP_S3_ENDPOINT": "http://127.0.0.1:8333"}
    assert store_sources(Settings.from_env(s3)) == "http://127.0.0.1:8333"  # an address has no subdomains
    named = {**s3, "QUOTECLIP_S3_ENDPOINT": "https://s3.example.net"}
    assert store_sources(Settings.from_env(named)) == "https://s3.example.net https://*.s3.example.net"
    public = {**s3, "QUOTECLIP_PUBLIC_BASE_URL": "https://cdn.example/clips/"}
    assert store_sources(Settings.from_env(public)) == "https://cdn.example"
    assert store_sources(Settings.from_env({"QUOTECLIP_S3_BUCKET": "clips"})) == "https://*.amazonaws.com"


def test_a_store_named_oddly_still_gets_a_source_a_browser_accepts() -> None:
    """A policy cannot name an IPv6 address (Chromium ignores ``http://[::1]:8333`` as an invalid source, and
    blocks every clip): such a store gets its scheme alone. Credentials in a store's URL never reach a header;
    a host's case and a default port are the browser's, a path is left out."""
    s3 = {"QUOTECLIP_S3_BUCKET": "clips", "QUOTECLIP_S3_ENDPOINT": "http://[::1]:8333"}
    assert store_sources(Settings.from_env(s3)) == "http:"
    public = {**s3, "QUOTECLIP_PUBLIC_BASE_URL": "https://[2001:db8::1]/clips/"}
    assert store_sources(Settings.from_env(public)) == "https:"
    secret = {**s3, "QUOTECLIP_S3_ENDPOINT": "https://user:s3cret@S3.Example.net:8443/path"}
    assert store_sources(Settings.from_env(secret)) == "https://s3.example.net:8443 https://*.s3.example.net:8443"
    secret_base = {**s3, "QUOTECLIP_PUBLIC_BASE_URL": "https://user:s3cret@cdn.example/clips/"}
    assert store_sources(Settings.from_env(secret_base)) == "https://cdn.example"


@pytest.fixture
def keyed(workers, queue_env) -> Iterator[str]:
    """``quoteclip serve`` with an API key required, and a worker."""
    workers.env["QUOTECLIP_API_KEYS"] = KEY
    with serving_with_a_worker(workers) as base:
        yield base


@pytest.mark.slow
def test_the_pages_work_under_their_policy_and_a_named_cut_waits_for_a_click(
    chromium, keyed, media, http_source
) -> None:
    """In Chromium, with an API key required: /edit opened from a link naming a cut shows the cut and sends
    nothing with the tab's key until Preview is clicked; then the sign-in bar, the preview and Play on / all work
    with no CSP violation and no console error, as does a batch for two platforms; a page of another origin
    cannot frame /edit."""
    from playwright.sync_api import sync_playwright

    (http_source.root / "ep.mp4").symlink_to(media(size="320x180", duration=4, gop=30))
    cut = {"source": http_source.url("ep.mp4"), "start": "1", "end": "2.5", "brand": "StarZero"}
    (http_source.root / "framer.html").write_text(f'<!doctype html><iframe id="f" src="{keyed}/edit"></iframe>')
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        console: list[str] = []
        posts: list[str] = []
        try:
            page = browser.new_page()
            page.add_init_script(WATCH_VIOLATIONS)
            page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
            page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
            page.goto(f"{keyed}/edit?{urllib.parse.urlencode(cut)}", wait_until="networkidle")
            page.wait_for_timeout(1000)
            on_load = (list(posts), page.input_value("#source"), page.input_value("#start"), page.inner_text("#hint"))
            page.click("#preview")
            page.wait_for_selector("#sign-in", timeout=30_000)  # pages.js's sign-in bar, built under the policy
            page.fill("#api-key", KEY)
            page.click("#sign-in button")
            page.wait_for_function("() => window.previews >= 1", timeout=60_000)
            after_click = [url for url in posts if url.endswith("/previews")]
            edit_violations = page.evaluate("window.violations")

            page.goto(f"{keyed}/?{urllib.parse.urlencode(cut)}")
            page.click("#play")  # the key is kept for the tab: no sign-in
            page.wait_for_function(
                "() => document.getElementById('stage').textContent === 'finished' "
                "&& document.getElementById('player').readyState >= 2",
                timeout=90_000,
            )
            index_violations = page.evaluate("window.violations")

            page.goto(f"{keyed}/batch?{urllib.parse.urlencode({'source': cut['source'], 'quotes': '1,2,one'})}")
            page.check("#platforms input[value=shorts]")
            page.check("#platforms input[value=x]")
            with page.expect_request(lambda r: r.url.endswith("/batches") and r.method == "POST") as asked:
                page.click("#go")
            sent = json.loads(asked.value.post_data or "{}")
            page.wait_for_function("() => document.querySelectorAll('.clip strong').length === 2", timeout=30_000)
            cards = [el.inner_text() for el in page.query_selector_all(".clip strong")]
            batch_violations = page.evaluate("window.violations")

            framer = browser.new_page()
            framer.goto(http_source.url("framer.html"))
            framer.wait_for_timeout(1000)
            framed = [f for f in framer.frames if f.url.startswith(keyed)]
            framed_form = [f.evaluate("document.getElementById('form') !== null") for f in framed]
        finally:
            browser.close()
    assert on_load == ([], cut["source"], "1", "press Preview to load this cut"), on_load
    assert len(after_click) == 2, after_click  # refused without a key, then sent again once signed in
    assert edit_violations == [] and index_violations == [] and batch_violations == [], (
        edit_violations,
        index_violations,
        batch_violations,
    )
    assert not [line for line in console if line.startswith("error") and "401" not in line], console
    assert framed_form == [] or framed_form == [False], framed_form  # refused to be framed
    # platforms chosen on the batch page replace its shapes: one clip a platform, in its preset
    assert sent["platforms"] == ["shorts", "x"] and "profiles" not in sent and sent["quotes"] == "1,2,one", sent
    assert cards == ["line 1 · shorts", "line 1 · x"], cards
