"""Signed links attacked where the first tests did not look: site key settings of every bad shape (a clear message
naming the entry, never a traceback), ``quoteclip sign --check`` against what the service itself answers, revoking
a clip through a link that has expired, and link requests asking Redis for revocations through the API's one pool
(no connection of their own). Real Redis, the app and the command line; nothing is rendered (a ``HEAD`` of a clip
not stored is ``404``)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import front_door, started
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api import create_app
from quoteclip import links
from quoteclip.errors import BadInput
from quoteclip.settings import Settings

S1 = "secret-one-0123456789"
SOURCE = "http://127.0.0.1:9/episode.mp4"  # the test environment's allowed host; never fetched here


def quote(**extra: Any) -> dict[str, Any]:
    return {"source": SOURCE, "start": 1, "end": 3, "caption": "one two three", **extra}


@pytest.fixture
def env(queue_env: dict[str, str]) -> dict[str, str]:
    queue_env.update(
        {"QUOTECLIP_SITE_KEYS": f"starzero:k1:{S1}", "QUOTECLIP_ALLOW_LOCAL_SOURCES": "", "QUOTECLIP_STREAM": "false"}
    )
    return queue_env


def keys_file(tmp_path: Path, entry: dict[str, Any] | str) -> dict[str, str]:
    path = tmp_path / "keys.json"
    text = entry if isinstance(entry, str) else json.dumps({"keys": [{"id": "starzero", **entry}]})
    path.write_text(text, encoding="utf-8")
    return {"QUOTECLIP_SITE_KEYS_FILE": str(path)}


GOOD = {"secrets": {"k1": S1}}
BAD_FILES = [  # a keys file entry, and what the message must say
    ({**GOOD, "lifetime": 1e400}, "lifetime must be a number of seconds"),  # JSON's 1e400 is infinity
    ({**GOOD, "lifetime": float("nan")}, "lifetime must be a number of seconds"),  # JSON's NaN, as Python reads it
    ({**GOOD, "max_seconds": float("nan")}, "max_seconds must be a number of seconds"),  # else: no longest clip
    ({**GOOD, "max_seconds": 1e400}, "max_seconds must be a number of seconds"),
    ({**GOOD, "lifetime": 0.5}, "lifetime must be a number of seconds"),  # else: 0 s
    ({**GOOD, "lifetime": links.MAX_LIFETIME + 1}, "to 315360000 (ten years)"),  # else: every link refused when signed
    ({"secrets": {"k1": "secret-\ud800-0123456789"}}, "the secret of key k1 must be UTF-8 text"),
    ({**GOOD, "extra": 1, "hosts": ["youtube.com"]}, "not extra"),  # the unknown field named
    ({**GOOD, "brand": 5}, "brand is not a watermark (Input should be a valid dictionary"),
    ({**GOOD, "brand": {"text": "StarZero", "bogus": 1}}, "brand is not a watermark (Extra inputs"),  # not the key's
    ({"secrets": {"bad key": S1}}, "a key id must be 1-64 letters, digits, - or _, got 'bad key'"),
    ({**GOOD, "lifetime": True}, "lifetime must be a number of seconds"),  # (a bool is no number here)
    ({"secrets": {"k1": S1 + "\n"}}, "the secret of key k1 must not begin or end with whitespace"),
]


@pytest.mark.parametrize(("entry", "said"), BAD_FILES)
def test_a_bad_keys_file_entry_is_named_never_a_traceback(
    tmp_path: Path, entry: dict[str, Any] | str, said: str
) -> None:
    with pytest.raises(BadInput) as raised:
        Settings.from_env(keys_file(tmp_path, entry)).sites()
    message = str(raised.value)
    assert "QUOTECLIP_SITE_KEYS_FILE key 1 (starzero)" in message and said in message, message
    assert "errors.pydantic.dev" not in message and "\n" not in message


def test_a_secret_that_is_not_utf8_is_named_at_sign_and_at_serve_start() -> None:
    """An environment's bytes that are not UTF-8 reach Python as lone surrogates: the key is refused by name (else
    every link of it would be a 500 at the service, an internal error at ``quoteclip sign``)."""
    import os

    bad = os.fsdecode(b"starzero:k1:secret-\xff-0123456789")
    with pytest.raises(BadInput, match=r"QUOTECLIP_SITE_KEYS entry 'starzero': the secret of key k1 must"):
        Settings.from_env({"QUOTECLIP_SITE_KEYS": bad}).sites()


@pytest.mark.parametrize(
    "keys",
    [f"starzero:k1: {S1}", f"starzero: {S1},other:{S1}", f"starzero:k2:{S1},starzero:k1:\u00a0{S1}"],
)
def test_a_secret_with_whitespace_at_an_end_is_named(keys: str) -> None:
    """``site:k1: SECRET`` kept the space in the secret: every link a signer given the secret makes was a 403 nobody
    could explain. A secret beginning or ending with whitespace is refused by name (the whitespace around a whole
    item is not part of it: it is dropped)."""
    with pytest.raises(BadInput, match=r"QUOTECLIP_SITE_KEYS entry 'starzero': .*must not begin or end"):
        Settings.from_env({"QUOTECLIP_SITE_KEYS": keys}).sites()


def sign_cli(env: dict[str, str], *args: str) -> tuple[int, str]:
    """``quoteclip sign`` in this process (as the command line runs it): its exit code and its output (the link
    alone when it succeeds, without the warning that it is a path)."""
    import cli.sign  # noqa: F401 (registers the command)
    from cli.app import app

    answer = CliRunner().invoke(app, ["sign", *args], env=env)
    said = answer.stderr if answer.stderr_bytes and answer.exit_code else ""
    return answer.exit_code, (answer.stdout + said).strip()


def test_sign_check_passes_what_the_service_accepts_and_names_a_malformed_source(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A key scoped to ``youtube.com``: its host with the root's trailing dot is answered by the service, so
    ``--check`` passes it too (it compared hosts its own way); a malformed source is bad input, not an internal
    error; a host off the scope is refused by both."""
    scoped = {"id": "scoped", "secrets": {"k1": S1}, "hosts": ["youtube.com"], "max_seconds": 2.5}
    env.update(keys_file(tmp_path, json.dumps({"keys": [scoped]})))
    env.update({"QUOTECLIP_SOURCE_HOSTS": "youtube.com", "QUOTECLIP_SITE_KEYS": ""})
    app = started(TestClient(create_app(Settings.from_env(env)), follow_redirects=False))
    for source, end, service in (
        ("https://youtube.com./watch?v=x", "3", 404),
        ("https://www.YouTube.com/watch?v=x", "3.5", 404),
        ("https://youtube.com/watch?v=x", "3.501", 403),  # over the key's 2.5 s
        ("https://youtube.com@evil.example/x", "3", 403),
    ):
        code, out = sign_cli(env, source, "--start", "1", "--end", end, "--site", "scoped", "--check")
        link = out if code == 0 else links.sign({"source": source, "start": 1, "end": end}, "scoped", S1, key_id="k1")
        assert app.head(links.path_of(link)).status_code == service, (source, end)
        assert (code == 0) is (service == 404), (source, end, out)
    code, out = sign_cli(env, "https://[bad/x", "--start", "1", "--end", "3", "--site", "scoped")
    assert code == 2 and "source URL is malformed" in out and "internal error" not in out, out
    brands = tmp_path / "brands"
    brands.mkdir()
    (brands / "there.png").write_bytes(b"a brand file, never drawn here")
    env["QUOTECLIP_BRAND_DIR"] = str(brands)
    app = started(TestClient(create_app(Settings.from_env(env)), follow_redirects=False))
    for logo, service in (("brand:there.png", 404), ("brand:missing.png", 422)):
        args = ("https://youtube.com/x", "--start", "1", "--end", "3", "--site", "scoped", "--watermark", logo)
        code, out = sign_cli(env, *args)
        unchecked = {"source": args[0], "start": 1, "end": 3, "logo": logo}
        link = out if code == 0 else links.sign(unchecked, "scoped", S1, key_id="k1")
        assert app.head(links.path_of(link)).status_code == service, (logo, out)
        assert (code == 0) is (service == 404), (logo, out)


def test_an_expired_link_still_revokes_its_clip(env: dict[str, str]) -> None:
    """A key whose links expire makes a new link every step: the one at hand may have expired while the clip's
    current links live. ``--clip`` takes it (its signature still proves the clip); the link alone is still
    refused (an expired link needs no revoking)."""
    from conftest import run_cli, started

    old = links.sign(quote(), "starzero", S1, expires=int(time.time()) - 10, key_id="k1")
    current = links.sign(quote(), "starzero", S1, expires=int(time.time()) + 3600, key_id="k1")
    app = started(TestClient(create_app(Settings.from_env(env)), follow_redirects=False))
    assert app.head(current).status_code == 404
    alone = run_cli("revoke", old, env=env)
    assert alone.returncode == 2 and "expired already" in alone.stderr, alone.stderr
    whole = run_cli("revoke", old, "--clip", env=env)
    assert whole.returncode == 0 and "revoked every link of the site starzero" in whole.stdout, whole.stderr
    assert "has expired already: it needs no entry" in whole.stdout
    # which Redis was written, so a revocation sent to another Redis than the service's is seen at once
    assert f"in Redis {env['QUOTECLIP_REDIS_URL']}" in whole.stdout, whole.stdout
    assert app.get(current).status_code == 410


def test_link_requests_ask_for_revocations_through_the_apis_one_pool(env: dict[str, str], tmp_path: Path) -> None:
    """200 link requests (verified, revocation looked up: a ``HEAD`` of a clip not stored, a stored clip's ``GET``,
    a revoked link's ``GET``, a stream part) open no Redis connection of their own: the server counts none
    received. (A Redis server of its own: one the other tests share counts their connections too.)"""
    from testkit.services import start_private_redis

    started = start_private_redis(tmp_path)
    if started is None:
        pytest.skip("needs redis-server on the PATH")
    proc, env["QUOTECLIP_REDIS_URL"] = started
    try:
        _count_connections_of_link_requests(env)
    finally:
        proc.terminate()
        proc.wait()


def _count_connections_of_link_requests(env: dict[str, str]) -> None:
    from api.clips import clip_spec
    from api.links.fields import link_fields
    from jobs.pipeline.lookup import lookup
    from storage import open_storage

    settings = Settings.from_env(env)
    app = started(TestClient(create_app(settings), follow_redirects=False))
    link, stored, revoked = (links.sign(quote(caption=c), "starzero", S1, key_id="k1") for c in ("a", "b", "c"))
    site = settings.sites()["starzero"]
    clip = links.verify(links.path_of(stored), site.signers())
    key, _ = lookup(clip_spec(link_fields(clip, site), settings), settings, open_storage(settings))
    Path(env["QUOTECLIP_STORAGE_DIR"]).mkdir(parents=True, exist_ok=True)
    (Path(env["QUOTECLIP_STORAGE_DIR"]) / f"{key}.mp4").write_bytes(b"\0" * 1000)  # answered as it is
    server = redis.Redis.from_url(env["QUOTECLIP_REDIS_URL"])
    server.set("quoteclip:links:revoked:" + links.link_hash(links.path_of(revoked)), "1")
    asks = (
        lambda: app.head(link),
        lambda: app.get(stored),
        lambda: app.get(revoked),
        lambda: app.get(links.path_of(revoked) + "/index.m3u8"),
    )
    answers = {ask().status_code for ask in asks}  # the pool's first connections
    received = int(server.info("stats")["total_connections_received"])
    for n in range(200):
        answers.add(asks[n % 4]().status_code)
    opened = int(server.info("stats")["total_connections_received"]) - received
    clients = len(server.client_list())
    server.close()
    said = f"{opened} Redis connections opened, {clients} clients"
    print(f"200 link requests (HEAD 404, stored 200, GET 410, part 410): {said}")
    assert answers == {200, 404, 410} and opened == 0, (answers, opened)


def test_a_hash_in_capitals_revokes_the_same_link(env: dict[str, str]) -> None:
    """Hex is hex: ``DELETE /links/{HASH}`` in capitals (as some tools print SHA-256) revokes the link, not a 422."""
    env["QUOTECLIP_API_KEYS"] = "api-key-0123456789"
    app = started(TestClient(create_app(Settings.from_env(env)), follow_redirects=False))
    link = links.sign(quote(), "starzero", S1, key_id="k1")
    digest = links.link_hash(links.path_of(link)).upper()
    answer = app.delete(f"/links/{digest}", headers={"X-API-Key": "api-key-0123456789"})
    assert answer.status_code == 200 and answer.json()["hash"] == digest.lower(), answer.text
    assert app.get(link).status_code == 410
    with_link = app.request(
        "DELETE", f"/links/{digest}", json={"link": link}, headers={"X-API-Key": "api-key-0123456789"}
    )
    assert with_link.status_code == 200, with_link.text


@pytest.mark.parametrize(
    ("seconds", "said"),
    [("0", "--expires must be 1 s to 315360000 s"), ("-5", "--expires must be 1 s"), ("315360001", "(ten years)")],
)
def test_sign_expires_out_of_its_range_is_named(seconds: str, said: str) -> None:
    """``--expires 0`` or below signed a link dead within the minute (the expiry rounded up), which a page would show
    as broken; past ten years the message named an absolute unix time the operator never gave."""
    env = {"QUOTECLIP_SITE_KEYS": f"starzero:k1:{S1}"}
    code, out = sign_cli(env, SOURCE, "--start", "1", "--end", "3", "--site", "starzero", "--expires", seconds)
    assert code == 2 and said in out and "--expires" in out, out


def test_a_links_path_is_found_whatever_its_base_holds() -> None:
    """A service behind a proxy at ``https://proxy.example/l`` has links ``…/l/l/site/…``: ``quoteclip revoke`` and
    ``DELETE /links/{hash}`` read the link's path from its end, not from the first ``/l/``."""
    for base in ("https://proxy.example/l", "https://proxy.example/l/l/", "https://x.example/a/l/b", ""):
        link = links.sign(quote(), "starzero", S1, base, key_id="k1")
        assert links.path_of(link + "?utm=/l/x#/l/y") == links.path_of(link) == link[len(base.rstrip("/")) :], base


HOSTS = ["youtube.com", "www.youtube.com", "YouTube.COM", "youtube.com.", "m.youtube.com.", "evilyoutube.com",
         "youtube.com.evil.example", "vimeo.com", "[::1]", "127.0.0.1", "youtube.com:8443", "user@youtube.com",
         "youtube.com@vimeo.com", "xn--ytube-pta.com", "[bad"]  # fmt: skip


def test_sign_check_and_the_service_decide_alike_on_every_spelling(env: dict[str, str], tmp_path: Path) -> None:
    """Sources with hosts in every spelling a URL allows, schemes and lengths around the key's bound, each crossed
    with the others: what ``quoteclip sign`` signs by default (``--check``: the key's scopes and the service's source
    rules, set here) the service answers (a ``HEAD``: ``404``, not rendered yet), and what it refuses the service
    refuses (``403``, ``422``)."""
    import itertools

    scoped = {"id": "scoped", "secrets": {"k1": S1}, "hosts": ["youtube.com"], "max_seconds": 2.5}
    env.update(keys_file(tmp_path, json.dumps({"keys": [scoped]})))
    env.update({"QUOTECLIP_SOURCE_HOSTS": "youtube.com,vimeo.com,127.0.0.1", "QUOTECLIP_SITE_KEYS": ""})
    app = started(TestClient(create_app(Settings.from_env(env)), follow_redirects=False))
    seen: dict[str, int] = {}
    ways = [("https://", "3"), ("https://", "3.501"), ("HTTP://", "3.5"), ("ftp://", "3"), ("", "3")]
    for host, (scheme, end) in itertools.product(HOSTS, ways):
        source = f"{scheme}{host}/watch?v=x"
        code, out = sign_cli(env, source, "--start", "1", "--end", end, "--site", "scoped")
        assert code in (0, 2) and "internal error" not in out, out
        unchecked = {"source": source, "start": 1, "end": end}
        link = out if code == 0 else links.sign(unchecked, "scoped", S1, key_id="k1")
        status = app.head(links.path_of(link)).status_code
        assert (code == 0) is (status == 404), (source, end, out, status)
        seen[f"{code}/{status}"] = seen.get(f"{code}/{status}", 0) + 1
    print(f"sign --check and the service on {sum(seen.values())} links (exit/status: count): {seen}")
    assert seen.get("0/404", 0) >= 5, seen


def test_a_clip_revoked_under_a_branded_key_takes_its_links_whatever_mark_they_name(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A key with a brand draws it whatever a link names, so links naming another watermark or logo are the same
    clip: revoking the clip takes them all (the clip's hash leaves out what the brand replaces). Another clip of the
    key stays answered."""
    branded = {"id": "branded", "secrets": {"k1": S1}, "brand": "StarZero"}
    env.update(keys_file(tmp_path, json.dumps({"keys": [branded]})))
    env.update({"QUOTECLIP_SITE_KEYS": "", "QUOTECLIP_API_KEYS": "api-key-0123456789"})
    app = started(TestClient(create_app(Settings.from_env(env)), follow_redirects=False))
    named = links.sign(quote(watermark="Other"), "branded", S1, key_id="k1")
    same = [links.sign(quote(**mark), "branded", S1, key_id="k1") for mark in ({}, {"logo": "brand:x.png"})]
    other = links.sign(quote(caption="another clip"), "branded", S1, key_id="k1")
    digest = links.link_hash(links.path_of(named))
    answer = app.request(
        "DELETE", f"/links/{digest}", json={"link": named, "clip": True}, headers={"X-API-Key": "api-key-0123456789"}
    )
    assert answer.status_code == 200, answer.text
    assert [app.head(link).status_code for link in (named, *same, other)] == [410, 410, 410, 404]


def test_a_crowd_asking_a_new_link_at_once_verifies_it_once(env: dict[str, str], monkeypatch) -> None:
    """40 requests for a link not verified yet, written at once on connections of their own to the API on uvicorn
    (a ``HEAD`` of a clip not stored: 404 each): its signature is checked once, the requests that came while the
    first read the deny list finding it verified. Each still reads the deny list: once it is revoked, the same
    crowd is answered 410."""
    checked: list[str] = []
    verify = links.verify

    def counted(path: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        checked.append(path)
        return verify(path, *args, **kwargs)

    monkeypatch.setattr(links, "verify", counted)
    settings = Settings.from_env(env)
    link = links.path_of(links.sign(quote(caption="a crowd"), "starzero", S1, key_id="k1"))
    request = f"HEAD {link} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()

    def crowd(port: int) -> set[bytes]:
        socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(40)]
        for sock in socks:
            sock.sendall(request)
        statuses = set()
        for sock in socks:
            with sock:
                sock.settimeout(10)
                statuses.add(sock.recv(65536).split(b"\r\n", 1)[0])
        return statuses

    with front_door(create_app(settings), settings, lifespan="on") as port:
        assert crowd(port) == {b"HTTP/1.1 404 Not Found"}
        assert checked == [link], len(checked)
        redis.Redis.from_url(env["QUOTECLIP_REDIS_URL"]).set("quoteclip:links:revoked:" + links.link_hash(link), "1")
        assert crowd(port) == {b"HTTP/1.1 410 Gone"}


def test_a_revoked_link_is_410_before_its_scopes_are_refused(env: dict[str, str], tmp_path: Path) -> None:
    """A link over its key's longest clip is refused 403; once revoked it is 410, whether it was verified (and
    kept) before or is asked for the first time; with the deny list unreadable, 503."""
    scoped = {"id": "scoped", "secrets": {"k1": S1}, "max_seconds": 2.5}
    env.update(keys_file(tmp_path, json.dumps({"keys": [scoped]})))
    env["QUOTECLIP_SITE_KEYS"] = ""
    app = started(TestClient(create_app(Settings.from_env(env)), follow_redirects=False))
    asked, fresh = (links.path_of(links.sign(quote(end=4, caption=c), "scoped", S1, key_id="k1")) for c in "ab")
    assert app.head(asked).status_code == 403
    server = redis.Redis.from_url(env["QUOTECLIP_REDIS_URL"])
    for link in (asked, fresh):
        server.set("quoteclip:links:revoked:" + links.link_hash(link), "1")
        assert [app.head(link).status_code for _ in range(2)] == [410, 410], link
    server.close()
    env["QUOTECLIP_REDIS_URL"] = "redis://127.0.0.1:1/0"
    away = started(TestClient(create_app(Settings.from_env(env)), follow_redirects=False))
    assert away.head(links.path_of(links.sign(quote(end=4, caption="c"), "scoped", S1, key_id="k1"))).status_code == 503


def test_a_revoked_clip_is_refused_under_every_spelling_of_its_source(env: dict[str, str]) -> None:
    """``revoke --clip`` names what the clip is, as the store's key does: the same video as ``youtu.be/ID``,
    ``m.youtube.com/…`` or with ``#t=1``, the same file with a ``#fragment`` or an upper-case host, are all refused
    (they once served the revoked clip, same ETag); an upper-case scheme is refused as a source. Another clip
    stays answered."""
    env.update({"QUOTECLIP_SOURCE_HOSTS": "*", "QUOTECLIP_API_KEYS": "api-key-0123456789"})
    app = started(TestClient(create_app(Settings.from_env(env)), follow_redirects=False))
    video = "Dkm0sjuzgPU"
    spellings = {
        f"https://www.youtube.com/watch?v={video}": [
            f"https://youtu.be/{video}",
            f"https://m.youtube.com/watch?v={video}",
            f"https://www.youtube.com/watch?v={video}#t=1",
            f"https://www.youtube.com/shorts/{video}",
        ],
        SOURCE: [f"{SOURCE}#t=1", f"{SOURCE}#x"],
        "http://clips.example/episode.mp4": ["http://CLIPS.Example/episode.mp4"],
    }
    for revoked, others in spellings.items():
        link = links.sign(quote(source=revoked), "starzero", S1, key_id="k1")
        assert app.head(link).status_code == 404, revoked  # verified, not stored: no render for a HEAD
        answer = app.request(
            "DELETE",
            f"/links/{links.link_hash(links.path_of(link))}",
            json={"link": link, "clip": True},
            headers={"X-API-Key": "api-key-0123456789"},
        )
        assert answer.status_code == 200, answer.text
        for spelled in others:
            other = links.sign(quote(source=spelled), "starzero", S1, key_id="k1")
            assert app.head(other).status_code == 410, spelled
    upper = links.sign(quote(source="HTTP://clips.example/episode.mp4"), "starzero", S1, key_id="k1")
    assert app.head(upper).status_code in (403, 410, 422)
    assert app.get(upper).status_code != 200
    kept = links.sign(quote(source=f"https://youtu.be/{video}", caption="another clip"), "starzero", S1, key_id="k1")
    assert app.head(kept).status_code == 404


def test_link_answers_say_nosniff(env: dict[str, str]) -> None:
    """A link's answer is only what its type says (a browser never sniffs a caption file into a page): a captions
    link made from its spec, and a clip not stored."""
    app = started(TestClient(create_app(Settings.from_env(env)), follow_redirects=False))
    captions = app.get(links.sign(quote(), "starzero", S1, key_id="k1", variant="captions"))
    assert captions.status_code == 200 and captions.headers["content-type"].startswith("text/vtt"), captions.text
    missing = app.head(links.sign(quote(), "starzero", S1, key_id="k1"))
    assert missing.status_code == 404
    for answer in (captions, missing):
        assert answer.headers["x-content-type-options"] == "nosniff"
