"""Every answer under /l/ carries the signed links' headers, whoever gave it: the links' CORS headers (any origin may
read a link's answer, ``Retry-After`` included), ``Cache-Control: no-store`` on every error (a 503 while Redis is
away, a 404, a 405), and a browser's CORS preflight answered, whatever ``QUOTECLIP_CORS_ORIGINS`` allows for the
rest of the API. Against the app; Redis away is a URL where none listens."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import started
from fastapi.testclient import TestClient

from api import create_app
from quoteclip import links
from quoteclip.settings import Settings

SECRET = "site-secret-0123456789"
ORIGIN = "https://news.example"


def link(variant: str = "clip") -> str:
    clip = {"source": "http://127.0.0.1:9/episode.mp4", "start": 1, "end": 3, "caption": "one two three"}
    return links.sign(clip, "site", SECRET, variant=variant)


@pytest.fixture
def away(tmp_path: Path) -> TestClient:
    """The app with site keys, its Redis gone (nothing listens on port 1), and an API CORS list naming one origin."""
    env = {
        "QUOTECLIP_REDIS_URL": "redis://127.0.0.1:1/0",
        "QUOTECLIP_SITE_KEYS": f"site:{SECRET}",
        "QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"),
        "QUOTECLIP_CORS_ORIGINS": "https://admin.example",
        "QUOTECLIP_STREAM": "false",
        "QUOTECLIP_SOURCE_HOSTS": "127.0.0.1",
        "QUOTECLIP_ALLOW_ADDRESSES": "127.0.0.0/8",
    }
    return started(TestClient(create_app(Settings.from_env(env)), follow_redirects=False))


def assert_link_error(answer, status: int) -> None:
    assert answer.status_code == status, (answer.status_code, answer.text)
    assert answer.headers["cache-control"] == "no-store"
    assert answer.headers["access-control-allow-origin"] == "*"
    assert answer.headers["x-content-type-options"] == "nosniff"
    exposed = {h.strip().lower() for h in answer.headers["access-control-expose-headers"].split(",")}
    assert {"retry-after", "content-range", "etag"} <= exposed, exposed


def test_with_redis_away_a_links_503_has_the_link_headers_and_a_readable_retry_after(away: TestClient) -> None:
    asked = [("GET", link()), ("HEAD", link()), ("GET", link("poster")), ("HEAD", link("poster"))]
    for method, path in [*asked, ("GET", link() + "/index.m3u8")]:  # a stream's parts are GET only
        answer = away.request(method, path, headers={"Origin": ORIGIN})
        assert_link_error(answer, 503)
        assert answer.headers["retry-after"].isdigit(), (method, path)


def test_not_found_and_method_not_allowed_under_l_have_the_link_headers(away: TestClient) -> None:
    assert_link_error(away.get("/l/site/", headers={"Origin": ORIGIN}), 404)
    assert_link_error(away.post(link(), content=b"{}", headers={"Origin": ORIGIN}), 405)


def test_a_browsers_preflight_of_a_link_is_answered_for_any_origin(away: TestClient) -> None:
    """``OPTIONS`` of a link, one of its parts, anything under /l/: 204 with the methods and request headers a
    player sends (a range, a revalidation), from an origin the API's own CORS list does not name."""
    asked = {
        "Origin": ORIGIN,
        "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "range, if-none-match",
    }
    for path in (link(), link() + "/init.mp4", "/l/site/not-a-link"):
        answer = away.options(path, headers=asked)
        assert answer.status_code == 204, (path, answer.status_code, answer.text)
        assert answer.headers["access-control-allow-origin"] == "*"
        assert {m.strip() for m in answer.headers["access-control-allow-methods"].split(",")} == {"GET", "HEAD"}
        allowed = {h.strip().lower() for h in answer.headers["access-control-allow-headers"].split(",")}
        assert {"range", "if-none-match"} <= allowed, allowed
        assert int(answer.headers["access-control-max-age"]) > 0
    # the rest of the API keeps its own list: a preflight from an origin it does not name is refused
    assert away.options("/clips", headers=asked).status_code == 400


def test_an_error_raised_inside_a_link_route_is_a_500_with_the_link_headers(away, queue_env, monkeypatch) -> None:
    """A bug inside a route (not a refusal, not Redis away): the 500 every method gets is still readable by the
    page that asked and never cached; and no answer under /l/ allows credentials, whatever the request sends."""
    from api.links import routes

    async def broken(*_: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(routes, "link_answer", broken)
    env = {**queue_env, "QUOTECLIP_SITE_KEYS": f"site:{SECRET}", "QUOTECLIP_CORS_ORIGINS": "https://admin.example"}
    crashing = started(TestClient(create_app(Settings.from_env(env)), raise_server_exceptions=False))
    for method in ("GET", "HEAD"):
        answer = crashing.request(method, link(), headers={"Origin": "https://admin.example", "Cookie": "a=b"})
        assert_link_error(answer, 500)
        assert "access-control-allow-credentials" not in answer.headers, method
    odd = {"Origin": "https://admin.example", "Access-Control-Request-Method": "DELETE"}
    odd["Access-Control-Request-Headers"] = "authorization, x-api-key, cookie"
    preflight = away.options(link(), headers=odd)
    assert preflight.status_code == 204 and "access-control-allow-credentials" not in preflight.headers
    allowed = {h.strip().lower() for h in preflight.headers["access-control-allow-headers"].split(",")}
    assert not {"authorization", "x-api-key", "cookie"} & allowed, allowed
