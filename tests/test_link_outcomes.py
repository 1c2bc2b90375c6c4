"""Every refusal of a signed link goes through one path (api/links/outcomes.py, answered by the handler in
api/links/routes.py): forged, expired, outside its key's scopes, naming a clip the service cannot make, over its
key's renders; on the link itself and on its stream's parts. Each answer is the link's error answer (one line,
``Cache-Control: no-store``, readable by any page) and is counted once in /metrics under its outcome, with the site
key and variant once the signature held. Against real Redis and the app; nothing is rendered.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import started
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api import create_app
from api.links.cache import cache_control
from quoteclip import links
from quoteclip.settings import Settings

SECRET = "site-secret-0123456789"
SOURCE = "http://127.0.0.1:9/episode.mp4"  # the allowed host of the test environment; never fetched here
Label = tuple[str, str, str]  # key, variant, outcome
Counts = dict[Label, float]


@pytest.fixture
def app(queue_env: dict[str, str], tmp_path: Path) -> TestClient:
    keys = tmp_path / "keys.json"
    scoped = [
        {"id": "site", "secret": SECRET},
        {"id": "hosts", "secret": SECRET, "hosts": ["example.com"]},
        {"id": "short", "secret": SECRET, "max_seconds": 2},
        {"id": "brief", "secret": SECRET, "lifetime": 3600},
    ]
    keys.write_text(json.dumps({"keys": scoped}))
    queue_env.update(
        {
            "QUOTECLIP_SITE_KEYS_FILE": str(keys),
            "QUOTECLIP_ALLOW_LOCAL_SOURCES": "",
            "QUOTECLIP_STREAM": "false",
            "QUOTECLIP_LINK_HOLD": "0.2",
            "QUOTECLIP_LINK_RENDERS": "1",
        }
    )
    return started(TestClient(create_app(Settings.from_env(queue_env)), follow_redirects=False))


def quote(source: str = SOURCE, start: float = 1, end: float = 3) -> dict[str, Any]:
    return {"source": source, "start": start, "end": end, "caption": "one two three"}


def link(clip: dict[str, Any] | None = None, variant: str = "clip", key: str = "site", **kw: Any) -> str:
    return links.sign(clip or quote(), key, SECRET, variant=variant, **kw)


def counts(app: TestClient) -> Counts:
    out: Counts = {}
    for family in text_string_to_metric_families(app.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "quoteclip_link_requests_total":
                labels = sample.labels
                out[(labels["key"], labels["variant"], labels["outcome"])] = sample.value
    return out


def changed(before: Counts, after: Counts) -> Counts:
    return {label: after[label] - before.get(label, 0) for label in after if after[label] != before.get(label, 0)}


def forged_cases() -> list[tuple[str, str, int, Label]]:
    """(what, path, status, the counter it is counted under: a refused link under the site its path names when that
    site exists, else under ``unknown``)."""
    good = link()
    key_id, payload, sig, ext = links.parse(good)
    data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    spaced = base64.urlsafe_b64encode(json.dumps(data, indent=1).encode()).decode().rstrip("=")
    unknown = ("unknown", "-", "refused")
    ours = ("site", "-", "refused")  # the path names the site "site", which exists
    expired = link(expires=int(time.time()) - 1)
    huge = 10**400  # past a float's range: once an uncaught OverflowError, a plain 500

    def signed(data: dict[str, Any]) -> str:  # a payload the signer refuses, signed by hand with the key's secret
        payload = links.encode({"s": SOURCE, "a": 1000, "b": 3000, **data})
        return f"/l/site/{payload}.{links.signature(SECRET, 'site', payload)}.mp4"

    return [
        ("an expiry of 10**400", signed({"x": huge}), 403, ours),
        ("an expiry of 10**30", signed({"x": 10**30}), 403, ours),
        ("an expiry past ten years", signed({"x": int(time.time()) + links.MAX_LIFETIME + 60}), 403, ours),
        ("a start of 10**400 ms", signed({"a": huge, "b": huge + 1000}), 403, ours),
        ("an end past 24 h", signed({"b": links.MAX_MS + 1}), 403, ours),
        ("a part of a link expiring at 10**400", signed({"x": huge}) + "/index.m3u8", 403, ours),
        (
            "a signature changed",
            f"/l/{key_id}/{payload}.{sig[:-1]}{'A' if sig[-1] != 'A' else 'B'}.{ext}",
            403,
            ours,
        ),
        ("no such key", f"/l/nobody/{payload}.{sig}.{ext}", 403, unknown),
        ("another variant's extension", f"/l/{key_id}/{payload}.{sig}.jpg", 403, ours),
        (
            "a payload not in canonical form",
            f"/l/site/{spaced}.{links.signature(SECRET, 'site', spaced)}.{ext}",
            403,
            ours,
        ),
        ("expired", expired, 410, ("site", "-", "expired")),
        ("a part of a forged link", f"/l/nobody/{payload}.{sig}.{ext}/index.m3u8", 403, unknown),
        ("a part of an expired link", f"{expired}/init.mp4", 410, ("site", "-", "expired")),
        ("a host outside its key's", link(key="hosts"), 403, ("hosts", "clip", "refused")),
        ("longer than its key's", link(quote(end=3.5), "download", key="short"), 403, ("short", "download", "refused")),
        ("no expiry, its key's lifetime", link(variant="poster", key="brief"), 403, ("brief", "poster", "refused")),
        ("a local path", link(quote("/etc/passwd"), "captions"), 422, ("site", "captions", "failed")),
        ("a source host not allowed", link(quote("https://evil.example/ep.mp4")), 422, ("site", "clip", "failed")),
        ("a playlist of a local path", link(quote("/etc/passwd")) + "/index.m3u8", 422, ("site", "clip", "failed")),
    ]


def assert_one_refusal(app: TestClient, what: str, method: str, path: str, status: int, label: Label) -> Any:
    """``method path`` refused with ``status``: the links' error answer, counted once under ``label``."""
    before = counts(app)
    answer = app.request(method, path)
    assert answer.status_code == status, (what, method, answer.status_code, answer.text)
    assert answer.headers["cache-control"] == "no-store", (what, method)
    assert answer.headers["access-control-allow-origin"] == "*", (what, method)
    if method == "GET":
        assert set(answer.json()) == {"detail"} and "\n" not in answer.json()["detail"], (what, answer.text)
    assert changed(before, counts(app)) == {label: 1}, (what, method)
    return answer


def test_every_refusal_is_the_one_error_answer_counted_once_under_its_outcome(app: TestClient) -> None:
    for what, path, status, label in forged_cases():
        methods = ("GET",) if path.count("/") > 3 else ("GET", "HEAD")  # a link's parts answer GET only
        for method in methods:
            answer = assert_one_refusal(app, what, method, path, status, label)
            if method == "GET" and status == 403 and label[0] == "unknown":
                assert answer.json() == {"detail": "this link is not valid"}  # which part failed is not said


def test_a_refusal_decided_past_verification_goes_the_same_way(app: TestClient) -> None:
    """Over its key's renders a minute (decided once the store is asked): 429 with Retry-After, counted once; the
    render before it, held past QUOTECLIP_LINK_HOLD with no worker, is a 503 counted once too."""
    before = counts(app)
    held = app.get(link())
    assert held.status_code == 503 and held.headers["cache-control"] == "no-store"
    assert changed(before, counts(app)) == {("site", "clip", "unavailable"): 1}
    limited = assert_one_refusal(app, "over its renders", "GET", link(quote(end=2)), 429, ("site", "clip", "limited"))
    assert 1 <= int(limited.headers["retry-after"]) <= 60


def test_only_a_streams_parts_are_behind_a_link(app: TestClient) -> None:
    """Any other name after a link is no route (404), the link not read and nothing counted."""
    before = counts(app)
    assert app.get(link(expires=int(time.time()) - 1) + "/other").status_code == 404
    assert changed(before, counts(app)) == {}


def test_numbers_out_of_range_are_refused_at_signing() -> None:
    """Times at most 24 h, an expiry at most ten years off: a LinkError naming the field, never a link."""
    for expires in (10**30, 10**400, int(time.time()) + links.MAX_LIFETIME + 60):
        with pytest.raises(links.LinkError, match="^expires must be at most"):
            link(expires=expires)
    for field, value in (("start", 10**400), ("start", 1e300), ("end", 86400.5), ("end", "24:00:01")):
        clip = {**quote(), field: value}
        with pytest.raises(links.LinkError, match=f"^{field} must be at most 86400 s"):
            link(clip)
    assert links.parse(link(quote(end=86400), expires=int(time.time()) + links.MAX_LIFETIME - 60))


def test_a_link_is_cached_no_longer_than_it_lives(app: TestClient) -> None:
    """A link expiring in 100 s: its captions (made without a render) cached at most the seconds it has left."""
    expires = int(time.time()) + 100
    captions = app.get(link(variant="captions", expires=expires))
    assert captions.status_code == 200, captions.text
    max_age = int(captions.headers["cache-control"].removeprefix("public, max-age="))
    assert 90 <= max_age <= expires - time.time()
    now = time.time()  # whatever reaches it, never more than the seconds left nor a year, in integer arithmetic
    for far in (int(now) + 100, 10**30, 10**400):
        seconds = int(cache_control(far, now=now).removeprefix("public, max-age="))
        assert seconds <= 31536000 and (far > 10**20 or seconds <= far - now), far
    assert cache_control(int(now) - 5, now=now) == "public, max-age=0"


def test_a_trailing_slash_or_anything_else_under_l_is_a_404_never_a_redirect(app: TestClient) -> None:
    """Starlette would answer ``…/link.mp4/`` with a redirect to the Host header's host: a 404, never cached."""
    before = counts(app)
    for path in (link() + "/", link() + "/index.m3u8/", "/l/site/", "/l/site/x/y/z"):
        for method in ("GET", "HEAD"):
            answer = app.request(method, path, headers={"Host": "evil.example"})
            assert answer.status_code == 404, (method, path, answer.status_code, answer.headers)
            assert "location" not in answer.headers and answer.headers["cache-control"] == "no-store", path
    assert changed(before, counts(app)) == {}
