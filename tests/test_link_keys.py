"""Site keys under key ids, their rotation and retirement, and revoking one link or one clip's links without
touching the key (api/links/revoke.py, cli/revoke.py): against real Redis, the app and the command line; nothing
is rendered (a HEAD of a clip not stored is 404, a link refused is 403, a revoked one 410). Also ``quoteclip sign
--key-id`` and ``--check``, and docs/websites.md carrying docs/signer.js byte for byte."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import started
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api import create_app
from quoteclip import links
from quoteclip.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
S1, S2, OLD = "secret-one-0123456789", "secret-two-0123456789", "secret-old-0123456789"
KEYS = f"starzero:k2:{S2},starzero:k1:{S1},starzero:{OLD}"
SOURCE = "http://127.0.0.1:9/episode.mp4"  # the test environment's allowed host; never fetched here
API_KEY = "api-key-0123456789"


def quote(**extra: Any) -> dict[str, Any]:
    return {"source": SOURCE, "start": 1, "end": 3, "caption": "one two three", **extra}


def path(link: str) -> str:
    return links.path_of(link)


@pytest.fixture
def env(queue_env: dict[str, str]) -> dict[str, str]:
    queue_env.update({"QUOTECLIP_SITE_KEYS": KEYS, "QUOTECLIP_ALLOW_LOCAL_SOURCES": "", "QUOTECLIP_STREAM": "false"})
    return queue_env


def client(env: dict[str, str], **changes: str) -> TestClient:
    return started(TestClient(create_app(Settings.from_env({**env, **changes})), follow_redirects=False))


def requests_counted(app: TestClient) -> dict[tuple[str, str, str], float]:
    out = {}
    for family in text_string_to_metric_families(app.get("/metrics", headers={"X-API-Key": API_KEY}).text):
        for s in family.samples:
            if s.name == "quoteclip_link_requests_total":
                out[(s.labels["key"], s.labels["variant"], s.labels["outcome"])] = s.value
    return out


def test_every_live_key_of_a_site_signs_and_a_retired_one_ends_its_links(env: dict[str, str]) -> None:
    """k2, k1 and the key without an id (the form before key ids: its links name the site alone) are all live; a
    link names its key id, and another key's id with its signature is refused; with k1 removed from the setting its
    links answer 403 and the others keep working."""
    by_k1 = links.sign(quote(), "starzero", S1, key_id="k1")
    by_k2 = links.sign(quote(), "starzero", S2, key_id="k2")
    by_old = links.sign(quote(), "starzero", OLD)
    assert path(by_k1).startswith("/l/starzero.k1/") and path(by_old).startswith("/l/starzero/")
    app = client(env)
    for link in (by_k1, by_k2, by_old):
        assert app.head(link).status_code == 404, link  # verified: not rendered yet (a HEAD never renders)
    relabelled = path(by_k1).replace("/l/starzero.k1/", "/l/starzero.k2/")
    assert app.get(relabelled).status_code == 403
    retired = client(env, QUOTECLIP_SITE_KEYS=f"starzero:k2:{S2},starzero:{OLD}")
    assert retired.get(by_k1).status_code == 403
    assert retired.get(by_k1).json() == {"detail": "this link is not valid"}
    assert retired.head(by_k2).status_code == 404 and retired.head(by_old).status_code == 404


def test_a_revoked_link_is_410_its_other_variants_stay_and_a_clip_revoked_takes_them_all(env: dict[str, str]) -> None:
    from conftest import run_cli

    expires = int(time.time()) + 3600
    clip_link = links.sign(quote(), "starzero", S2, "https://clips.example", expires=expires, key_id="k2")
    poster = links.sign(quote(), "starzero", S2, variant="poster", key_id="k2")
    app = client(env)
    before = requests_counted(app)
    done = run_cli("revoke", clip_link, "--json", env=env)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["hash"] == links.link_hash(path(clip_link)) and body["site"] == "starzero"
    assert expires - time.time() < body["seconds"] <= expires - time.time() + 61  # as long as the link lives
    answer = app.get(clip_link)
    assert (answer.status_code, answer.json()) == (410, {"detail": "this link has been revoked"})
    assert answer.headers["cache-control"] == "no-store"
    assert app.head(poster).status_code == 404  # another link of the clip: still valid
    assert app.get(path(clip_link) + "/index.m3u8").status_code == 410  # its stream's parts with it
    counted = requests_counted(app)
    assert counted[("starzero", "clip", "revoked")] - before.get(("starzero", "clip", "revoked"), 0) == 2
    other_key = links.sign(quote(), "starzero", S1, variant="download", key_id="k1")
    whole = run_cli("revoke", poster, "--clip", env=env)
    assert whole.returncode == 0, whole.stderr
    assert "revoked every link of the site starzero" in whole.stdout
    for link in (poster, other_key, links.sign(quote(), "starzero", OLD, variant="captions")):
        assert app.get(link).status_code == 410, link
    assert app.head(links.sign(quote(end=4), "starzero", S2, key_id="k2")).status_code == 404  # another clip
    for bad, message in (
        ("https://clips.example/l/starzero/nothing", "not a link URL"),
        (links.sign(quote(), "starzero", "a-key-never-given-out"), "not a valid link"),
        (links.sign(quote(), "starzero", OLD, expires=1000), "expired already"),
    ):
        refused = run_cli("revoke", bad, env=env)
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr
        assert refused.stderr.count("\n") == 1


def test_delete_links_by_hash_needs_an_api_key_and_can_delete_the_stored_clip(
    env: dict[str, str], tmp_path: Path
) -> None:
    from api.clips import clip_spec
    from api.links.verify import link_fields
    from jobs.pipeline.lookup import lookup
    from storage import open_storage

    link = links.sign(quote(), "starzero", OLD)
    digest = links.link_hash(path(link))
    assert client(env).delete(f"/links/{digest}").status_code == 403  # no API keys: no revocation over HTTP
    env["QUOTECLIP_API_KEYS"] = API_KEY
    app = client(env)
    assert app.delete(f"/links/{digest}").status_code == 401
    answer = app.delete(f"/links/{digest}", headers={"X-API-Key": API_KEY})
    assert answer.status_code == 200 and answer.json()["seconds"] == links.MAX_LIFETIME  # no link: ten years
    assert app.get(link).status_code == 410
    assert app.delete("/links/not-a-hash", headers={"X-API-Key": API_KEY}).status_code == 422
    # with the link: its stored clip, poster and metadata removed too
    settings = Settings.from_env(env)
    site = settings.sites()["starzero"]
    stored = links.sign(quote(caption="stored"), "starzero", S1, key_id="k1")
    clip = links.verify(path(stored), site.signers())
    key, _ = lookup(clip_spec(link_fields(clip, site), settings), settings, open_storage(settings))
    root = Path(env["QUOTECLIP_STORAGE_DIR"])
    root.mkdir(parents=True, exist_ok=True)
    for suffix in (".mp4", ".json", ".jpg"):
        (root / f"{key}{suffix}").write_bytes(b"x")
    wrong = app.request("DELETE", f"/links/{digest}", json={"link": stored}, headers={"X-API-Key": API_KEY})
    assert wrong.status_code == 422 and "hash" in wrong.json()["detail"]
    done = app.request(
        "DELETE",
        f"/links/{links.link_hash(path(stored))}",
        json={"link": stored, "delete_clip": True},
        headers={"X-API-Key": API_KEY},
    )
    assert done.status_code == 200, done.text
    assert sorted(done.json()["deleted"]) == sorted(f"{key}{s}" for s in (".jpg", ".json", ".mp4"))
    assert not list(root.glob(f"{key}.*"))
    assert app.get(stored).status_code == 410


def test_a_refused_link_is_counted_under_the_site_its_path_names(env: dict[str, str]) -> None:
    app = client(env, QUOTECLIP_API_KEYS=API_KEY)
    good = path(links.sign(quote(), "starzero", S1, key_id="k1"))
    forged = good[:-6] + ("A" if good[-6] != "A" else "B") + good[-5:]
    before = requests_counted(app)
    assert app.get(forged).status_code == 403
    assert app.get(forged.replace("/l/starzero.k1/", "/l/nobody.k1/")).status_code == 403
    after = requests_counted(app)
    for label in (("starzero", "-", "refused"), ("unknown", "-", "refused")):
        assert after[label] - before.get(label, 0) == 1, label


def test_quoteclip_sign_names_its_key_id_and_checks_the_services_rules(tmp_path: Path) -> None:
    from conftest import run_cli

    keys = {"QUOTECLIP_SITE_KEYS": KEYS}
    args = ["sign", "https://vimeo.com/1", "--start", "1", "--end", "3", "--site", "starzero"]
    first = run_cli(*args, env=keys)
    assert first.returncode == 0, first.stderr
    clip = {"source": "https://vimeo.com/1", "start": "1", "end": "3"}
    assert first.stdout.strip() == links.sign(clip, "starzero", S2, key_id="k2")  # the first listed signs
    by_k1 = run_cli(*args, "--key-id", "k1", "--json", env=keys)
    assert json.loads(by_k1.stdout)["link"] == links.sign(clip, "starzero", S1, key_id="k1")
    missing = run_cli(*args, "--key-id", "k9", env=keys)
    assert missing.returncode == 2 and "--key-id: the site starzero has no key 'k9'" in missing.stderr
    service = {**keys, "QUOTECLIP_SOURCE_HOSTS": "youtube.com"}  # the service's source rules are set here
    refused = run_cli(*args, env=service)
    assert refused.returncode == 2 and "the service does not clip vimeo.com" in refused.stderr, refused.stderr
    assert refused.stderr.count("\n") == 1 and refused.stdout == ""
    assert run_cli(*args, "--no-check", env=service).returncode == 0
    asked = run_cli(*args[:1], "/etc/hosts", *args[2:], "--check", env=keys)  # the defaults: no local paths
    assert asked.returncode == 2 and "local" in asked.stderr, asked.stderr
    scoped = tmp_path / "keys.json"
    scoped.write_text(json.dumps({"keys": [{"id": "short", "secrets": {"a": S1}, "max_seconds": 1}]}))
    too_long = ["sign", "https://youtube.com/watch?v=x", "--start", "1", "--end", "3", "--site", "short"]
    assert run_cli(*too_long, env={"QUOTECLIP_SITE_KEYS_FILE": str(scoped)}).returncode == 2  # the key's scope
    unchecked = run_cli(*too_long, "--no-check", env={"QUOTECLIP_SITE_KEYS_FILE": str(scoped)})
    assert unchecked.returncode == 0 and "/l/short.a/" in unchecked.stdout


def test_the_websites_page_carries_the_javascript_signer_byte_for_byte() -> None:
    page = (ROOT / "docs" / "websites.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```js\n(.*?)^```$", page, flags=re.S | re.M)
    signer = (ROOT / "docs" / "signer.js").read_text(encoding="utf-8")
    assert signer in blocks, "docs/websites.md must show docs/signer.js whole, in a ```js block"
    assert '--8<-- "docs/signer.js"' not in page


def test_while_the_revocations_cannot_be_read_a_link_is_503_never_served(env: dict[str, str]) -> None:
    """A revocation holds: with Redis unreachable a valid link is answered ``503`` with ``Retry-After`` (the links'
    error answer), not the clip."""
    app = client(env, QUOTECLIP_REDIS_URL="redis://127.0.0.1:9/0")  # nothing listens on the discard port
    answer = app.get(links.sign(quote(), "starzero", S1, key_id="k1"))
    assert answer.status_code == 503 and answer.headers["retry-after"], answer.text
    assert answer.json() == {"detail": "the revoked links cannot be read"}
    assert answer.headers["cache-control"] == "no-store"


def test_the_websites_pages_worked_example_is_what_the_signers_make() -> None:
    """The canonical form's worked example on the page is what the signer makes of its clip (a signer in another
    language is checked against it)."""
    page = (ROOT / "docs" / "websites.md").read_text(encoding="utf-8")
    clip = {
        "source": " https://www.youtube.com/watch?v=Dkm0sjuzgPU\n",
        "start": "18:54",
        "end": 1141.5,
        "caption": "\ufeffThis weird scheduling…\t",
        "watermark": {"text": "StarZero"},
        "profile": "landscape",
    }
    made = links.sign(clip, "starzero", "an-example-secret-0123", variant="poster", expires=1900000000, key_id="k2")
    assert f"link     {made}\n" in page
    canonical = links.canonical({**clip, "variant": "poster", "expires": 1900000000})
    shown = json.dumps(canonical, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    shown = shown.replace("\ufeff", "\\ufeff")  # the page writes U+FEFF as \ufeff
    assert f"JSON     {shown}\n" in page
