"""Signed clip links through the API (api/links/) against real Redis, real rq workers, the local store and S3
(SeaweedFS): refused as a whole when anything is changed, rendered on the first request and held until stored,
answered from the store with ETag, ranges and a cache lifetime no longer than the link's, poster and captions
without the clip, a download with its name, the key's scopes and render allowance, metrics per key."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import report_pass, started
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api import create_app
from quoteclip import links
from quoteclip.settings import Settings

SITE, SECRET = "site", "site-secret-0123456789"
OTHER, OTHER_SECRET = "other", "other-secret-0123456789"
INVALID = {"detail": "this link is not valid"}


@pytest.fixture
def ffmpeg_log(tmp_path: Path) -> Path:
    """Each ffmpeg run's arguments, one line a run (version queries left out)."""
    return tmp_path / "ffmpeg-args.log"


@pytest.fixture
def link_env(queue_env: dict[str, str], tmp_path: Path, ffmpeg_bin: str, ffmpeg_log: Path) -> dict[str, str]:
    wrapper = tmp_path / "ffmpeg-logging"
    wrapper.write_text(
        f'#!/bin/sh\ncase " $* " in *" -version "*) ;; *) echo "$*" >> "{ffmpeg_log}" ;; esac\n'
        f'exec "{ffmpeg_bin}" "$@"\n'
    )
    wrapper.chmod(0o755)
    queue_env.update(
        {
            "QUOTECLIP_SITE_KEYS": f"{SITE}:{SECRET},{OTHER}:{OTHER_SECRET}",
            "QUOTECLIP_LINK_HOLD": "30",
            "QUOTECLIP_STREAM": "false",  # a held answer, then the stored clip (streaming: tests/test_streaming.py)
            "FFMPEG_BINARY": str(wrapper),
        }
    )
    return queue_env


def client_for(env: dict[str, str]) -> TestClient:
    return started(TestClient(create_app(Settings.from_env(env)), follow_redirects=False))


@pytest.fixture
def source_url(media, http_source) -> str:
    (http_source.root / "lv.mp4").symlink_to(
        media(size="320x180", fps="30000/1001", duration=6, gop=45, pattern="levels")
    )
    return http_source.url("lv.mp4")


def quote(source: str, start: float = 1, end: float = 3, **extra: Any) -> dict[str, Any]:
    return {"source": source, "start": start, "end": end, "caption": "one two three", "watermark": "StarZero", **extra}


def link(clip: dict[str, Any], variant: str = "clip", key: str = SITE, secret: str = SECRET, **kw: Any) -> str:
    return links.sign(clip, key, secret, variant=variant, **kw)


def runs(log: Path) -> list[str]:
    """The renders' runs: not a stored clip's quality check (its pass, jobs/pipeline/quality.py: conftest's
    REPORT_PASS)."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [line for line in lines if not report_pass(line)]


def queued(env: dict[str, str]) -> int:
    from rq import Queue

    from jobs.queue import connect

    return Queue("quoteclip", connection=connect(Settings.from_env(env))).count


def held(ask: Callable[[], Any], env: dict[str, str], workers, wait: float = 1.0) -> tuple[Any, float]:
    """``ask()`` in a thread, a burst worker once its job is queued and ``wait`` more seconds have passed (a slow
    worker): its answer and how long it took."""
    answer: dict[str, Any] = {}

    def go() -> None:
        began = time.monotonic()
        answer["response"] = ask()
        answer["seconds"] = time.monotonic() - began

    thread = threading.Thread(target=go)
    thread.start()
    deadline = time.monotonic() + 20
    while queued(env) == 0:
        assert time.monotonic() < deadline, "no job was queued"
        time.sleep(0.05)
    time.sleep(wait)
    workers.burst(1)
    thread.join(60)
    assert not thread.is_alive()
    return answer["response"], answer["seconds"]


def idle(env: dict[str, str], pid: int) -> None:
    """Until the worker ``pid`` has registered and waits for work (its preload done)."""
    from rq import Worker

    from jobs.queue import connect

    connection = connect(Settings.from_env(env))
    deadline = time.monotonic() + 60
    while [w.get_state() for w in Worker.all(connection=connection) if w.pid == pid] != ["idle"]:
        assert time.monotonic() < deadline, "the worker did not start"
        time.sleep(0.05)


def metrics(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_without_site_keys_the_link_routes_do_not_exist(queue_env, source_url) -> None:
    app = client_for(queue_env)
    assert app.get(link(quote(source_url))).status_code == 404
    assert app.get("/embed.js").status_code == 404


def test_a_link_renders_on_first_request_held_until_stored_then_served_from_the_store(
    link_env, workers, source_url, ffmpeg_log
) -> None:
    """The first request starts one render and is answered with the clip once the (slow) worker has stored it;
    then the store answers: ETag from the clip key, ranges (206) for a seeking <video>, HEAD without a body,
    a year's immutable cache for a link without expiry and the remaining life for one with, CORS for any page,
    the download with its readable name; POST /clips of the same fields finds the same clip."""
    app = client_for(link_env)
    clip = quote(source_url)
    first, seconds = held(lambda: app.get(link(clip)), link_env, workers, wait=1.5)
    assert first.status_code == 200, first.text
    assert seconds > 1.5  # held while the worker was slow to come
    assert first.headers["content-type"] == "video/mp4" and first.content[4:8] == b"ftyp"
    key = first.headers["etag"].strip('"')
    assert len(key) == 32 and first.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert first.headers["access-control-allow-origin"] == "*" and first.headers["accept-ranges"] == "bytes"
    assert len(runs(ffmpeg_log)) == 1
    store = Settings.from_env(link_env).storage_dir
    assert first.content == (store / f"{key}.mp4").read_bytes()

    again = app.get(link(clip))
    assert again.status_code == 200 and again.content == first.content and len(runs(ffmpeg_log)) == 1
    head = app.head(link(clip))
    assert head.status_code == 200 and head.content == b"" and head.headers["content-length"] == str(len(first.content))
    part = app.get(link(clip), headers={"Range": "bytes=100-199"})
    assert part.status_code == 206 and part.headers["content-range"] == f"bytes 100-199/{len(first.content)}"
    assert part.content == first.content[100:200]
    assert app.get(link(clip), headers={"If-None-Match": f'"{key}"'}).status_code == 304

    expires = int(time.time()) + 600
    expiring = app.get(link(clip, expires=expires))
    assert expiring.status_code == 200 and expiring.headers["etag"] == f'"{key}"'
    max_age = int(expiring.headers["cache-control"].removeprefix("public, max-age="))
    assert expires - time.time() - 5 <= max_age <= expires - time.time()

    download = app.get(link(clip, "download"))
    name = json.loads((store / f"{key}.json").read_text())["filename"]
    assert name.startswith("one-two-three-1s-")
    assert download.headers["content-disposition"] == f'attachment; filename="{name}"'
    assert download.content == first.content

    posted = app.post("/clips", json=clip)
    assert posted.status_code == 200 and posted.json()["id"] == f"clip-{key}"  # one clip, whichever way asked
    counted = metrics(app)
    assert counted[("quoteclip_link_renders_total", (("key", SITE),))] == 1
    request = "quoteclip_link_requests_total"
    assert counted[(request, (("key", SITE), ("outcome", "rendered"), ("variant", "clip")))] == 1
    assert counted[(request, (("key", SITE), ("outcome", "stored"), ("variant", "clip")))] == 5
    assert counted[(request, (("key", SITE), ("outcome", "stored"), ("variant", "download")))] == 1


def test_past_the_hold_a_503_and_a_head_never_renders(link_env, source_url, ffmpeg_log) -> None:
    """No worker: the request is held for QUOTECLIP_LINK_HOLD seconds, then 503 with Retry-After (not cached), the
    job still queued (a HEAD says 202); a HEAD of a clip nobody asked for is 404 and queues nothing."""
    link_env["QUOTECLIP_LINK_HOLD"] = "1.5"
    app = client_for(link_env)
    began = time.monotonic()
    late = app.get(link(quote(source_url)))
    took = time.monotonic() - began
    assert late.status_code == 503 and late.headers["retry-after"] == "2" and 1.5 <= took < 5, (late.text, took)
    assert late.headers["cache-control"] == "no-store" and late.headers["access-control-allow-origin"] == "*"
    assert "still rendering" in late.json()["detail"]
    assert app.head(link(quote(source_url))).status_code == 202
    assert queued(link_env) == 1
    unasked = app.head(link(quote(source_url, 2, 4)))
    assert unasked.status_code == 404 and unasked.headers["cache-control"] == "no-store"
    assert app.head(link(quote(source_url, 2, 4), "poster")).status_code == 404
    assert queued(link_env) == 1 and runs(ffmpeg_log) == []


def _payload(path: str) -> dict[str, Any]:
    part = path.rsplit("/", 1)[1].split(".")[0]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def _with_payload(path: str, data: dict[str, Any]) -> str:
    """The link with another payload (in canonical form) under its old signature."""
    head, name = path.rsplit("/", 1)
    _, sig, ext = name.split(".")
    return f"{head}/{links.encode(data)}.{sig}.{ext}"


def test_any_change_to_a_link_is_refused_alike(link_env, source_url) -> None:
    """Each field of the clip changed, the key id, the expiry, the signature, the extension, a payload out of
    canonical form, a removed key: 403 with the same one line; past its expiry: 410. The link as signed is
    accepted (a HEAD: not rendered yet)."""
    app = client_for(link_env)
    clip = quote(source_url, profile="vertical", fit="blur", style="karaoke", quality="preview")
    good = link(clip, "download", expires=int(time.time()) + 3600)
    assert app.head(good).status_code == 404  # accepted: only not stored yet
    data = _payload(good)
    changed = {"s": source_url + "?x", "a": 1001, "b": 2999, "c": "one two", "w": "Other", "p": "square"}
    changed |= {"f": "pad", "y": "clean", "q": "final", "v": "poster", "x": data["x"] + 60}
    assert set(changed) == set(data)  # every field the link carries
    tampered = [_with_payload(good, {**data, field: value}) for field, value in changed.items()]
    tampered.append(_with_payload(good, {**data, "l": "brand:StarZero"}))  # a field added
    key_id, payload, sig, ext = links.parse(good)
    tampered += [
        f"/l/{OTHER}/{payload}.{sig}.{ext}",  # another key's id
        f"/l/nobody/{payload}.{sig}.{ext}",  # no such key
        f"/l/{SITE}/{payload}.{links.signature(OTHER_SECRET, SITE, payload)}.{ext}",  # another key's signature
        f"/l/{SITE}/{payload}.{sig[:-1]}{'A' if sig[-1] != 'A' else 'B'}.{ext}",  # one character of the signature
        f"/l/{SITE}/{payload}.{sig}.jpg",  # another variant's extension
        good.replace(f"/l/{SITE}/", f"/l/%{ord(SITE[0]):x}{SITE[1:]}/"),  # the same characters, one escaped
    ]
    spaced = base64.urlsafe_b64encode(json.dumps(data, indent=1).encode()).decode().rstrip("=")
    tampered.append(f"/l/{SITE}/{spaced}.{links.signature(SECRET, SITE, spaced)}.{ext}")  # signed, not canonical
    for path in tampered:
        refused = app.get(path)
        assert (refused.status_code, refused.json()) == (403, INVALID), path
    revoked = {**link_env, "QUOTECLIP_SITE_KEYS": f"{OTHER}:{OTHER_SECRET}"}
    assert client_for(revoked).get(good).json() == INVALID  # a key removed: its links are refused
    expired = app.get(link(clip, expires=int(time.time()) - 1))
    assert expired.status_code == 410 and expired.json() == {"detail": "this link has expired"}
    assert queued(link_env) == 0


def test_a_keys_scopes_and_the_queues_source_rules(link_env, source_url, tmp_path) -> None:
    """A key's hosts, longest clip and link lifetime refuse a link that breaks them (403, naming the scope); the
    service's longest clip too; the queue's source rules (no local path, the host allowlist) answer 422 as
    POST /clips does."""
    keys = tmp_path / "keys.json"
    keys.write_text(
        json.dumps(
            {
                "keys": [
                    {"id": "hosts", "secret": SECRET, "hosts": ["example.com"]},
                    {"id": "short", "secret": SECRET, "max_seconds": 2},
                    {"id": "brief", "secret": SECRET, "lifetime": 3600},
                ]
            }
        )
    )
    link_env.update(
        {"QUOTECLIP_SITE_KEYS_FILE": str(keys), "QUOTECLIP_MAX_CLIP_SECONDS": "4", "QUOTECLIP_ALLOW_LOCAL_SOURCES": ""}
    )
    app = client_for(link_env)
    clip = quote(source_url)

    def answer(path: str) -> tuple[int, str]:
        """A HEAD (a link accepted answers 404: not rendered yet, and nothing starts), and a refusal's reason."""
        status = app.head(path).status_code
        return status, app.get(path).json()["detail"] if status in (403, 422) else ""

    assert answer(link(clip, key="hosts")) == (403, "the site key hosts may clip sources of example.com only")
    assert answer(link(quote(source_url, 1, 3.5), key="short")) == (
        403,
        "the clip is 2.5 s long, over the 2 s the site key short allows",
    )
    assert answer(link(clip, key="short"))[0] == 404  # within its scope: only not rendered yet
    assert answer(link(clip, key="brief")) == (403, "the site key brief's links must expire within 3600 s")
    assert answer(link(clip, key="brief", expires=int(time.time()) + 7200))[0] == 403
    assert answer(link(clip, key="brief", expires=links.rounded_expiry(3600)))[0] == 404
    assert answer(link(quote(source_url, 0, 5))) == (403, "the clip is 5 s long, over the 4 s the service allows")
    for variant in ("clip", "captions", "poster"):  # refused before the store is asked or the captions made
        local = app.get(link(quote("/etc/passwd"), variant))
        assert local.status_code == 422 and "local paths are not allowed" in local.json()["detail"]
        assert app.head(link(quote("/etc/passwd"), variant)).status_code == 422
        elsewhere = app.get(link(quote("https://evil.example/ep.mp4"), variant))
        assert elsewhere.status_code == 422 and "source host not allowed: evil.example" in elsewhere.json()["detail"]
    assert queued(link_env) == 0


def test_a_brand_bound_keys_links_carry_its_brand_whatever_they_name(link_env, workers, source_url, tmp_path) -> None:
    """The key's brand is the clip's watermark: a link naming another mark, or none, renders the brand (the
    manifest's spec, and the clip is the one POST /clips makes with the brand)."""
    keys = tmp_path / "keys.json"
    brand = {"text": "StarZero", "position": "bottom-left", "opacity": 0.9}
    keys.write_text(json.dumps({"keys": [{"id": "brand", "secret": SECRET, "brand": brand}]}))
    link_env["QUOTECLIP_SITE_KEYS_FILE"] = str(keys)
    app = client_for(link_env)
    answer, _ = held(lambda: app.get(link(quote(source_url, watermark="Other"), key="brand")), link_env, workers, 0)
    assert answer.status_code == 200, answer.text
    key = answer.headers["etag"].strip('"')
    unmarked = {k: v for k, v in quote(source_url).items() if k != "watermark"}
    assert app.head(link(unmarked, key="brand")).headers["etag"] == f'"{key}"'  # the same clip: the brand's
    manifest = json.loads((Settings.from_env(link_env).storage_dir / f"{key}.manifest.json").read_text())
    assert manifest["spec"]["watermark"]["text"] == "StarZero"
    assert manifest["spec"]["watermark"]["position"] == "bottom-left"
    posted = app.post("/clips", json={**quote(source_url), "watermark": brand})
    assert posted.status_code == 200 and posted.json()["id"] == f"clip-{key}"


def test_the_poster_is_rendered_alone_and_either_render_serves_the_other(
    link_env, workers, source_url, ffmpeg_log
) -> None:
    """A poster link renders one frame (no mp4 stored, no H.264 encode, a 1280x720 JPEG, faster than the clip);
    the clip's render later writes the same JPEG there, and a poster link of a stored clip renders nothing."""
    from PIL import Image

    app = client_for(link_env)
    worker = workers.start(burst=False)
    try:
        idle(link_env, worker.pid)
        began = time.monotonic()
        poster = app.get(link(quote(source_url), "poster"))
        poster_s = time.monotonic() - began
        assert poster.status_code == 200, poster.text
        assert poster.headers["content-type"] == "image/jpeg" and poster.headers["etag"].endswith('.jpg"')
        assert Image.open(io.BytesIO(poster.content)).size == (1280, 720)
        key = poster.headers["etag"].strip('"').removesuffix(".jpg")
        store = Settings.from_env(link_env).storage_dir
        assert not (store / f"{key}.mp4").exists()
        (only,) = runs(ffmpeg_log)
        assert "libx264" not in only and "-vframes 1" in only and "poster.jpg" in only
        began = time.monotonic()
        clip = app.get(link(quote(source_url)))
        clip_s = time.monotonic() - began
        assert clip.status_code == 200 and clip.headers["etag"] == f'"{key}"'
        assert (store / f"{key}.jpg").read_bytes() == poster.content  # the full render's poster: the same bytes
        other = app.get(link(quote(source_url, 2, 4), "poster"))  # a stored clip's poster: no render
        assert other.status_code == 200 and len(runs(ffmpeg_log)) == 3
        assert app.get(link(quote(source_url, 2, 4), "poster")).content == other.content
        assert len(runs(ffmpeg_log)) == 3
    finally:
        worker.terminate()
        worker.wait(30)
        if worker.stdout:
            worker.stdout.close()
    print(f"\nposter alone {poster_s:.2f} s, the clip {clip_s:.2f} s (request to answer, one worker)")
    assert poster_s < clip_s


def test_captions_come_from_the_spec_without_a_render(link_env, workers, source_url, ffmpeg_log) -> None:
    app = client_for(link_env)
    captions = app.get(link(quote(source_url), "captions"))
    assert captions.status_code == 200 and captions.headers["content-type"] == "text/vtt; charset=utf-8"
    assert captions.text.startswith("WEBVTT") and "one two three" in captions.text
    assert captions.headers["access-control-allow-origin"] == "*" and "immutable" in captions.headers["cache-control"]
    assert queued(link_env) == 0 and runs(ffmpeg_log) == []
    clip, _ = held(lambda: app.get(link(quote(source_url))), link_env, workers, wait=0)
    key = clip.headers["etag"].strip('"')
    assert (Settings.from_env(link_env).storage_dir / f"{key}.vtt").read_text() == captions.text
    assert app.get(link(quote(source_url, caption=""), "captions")).text == "WEBVTT\n"


def test_a_clip_that_cannot_be_rendered_is_422_and_not_tried_again(link_env, workers, source_url, ffmpeg_log) -> None:
    """A quote past the video's end is signed validly but fails in the worker for good: the held request answers
    422 with the reason, and later requests answer it at once without another job."""
    app = client_for(link_env)
    past = link(quote(source_url, 8, 9))
    failed, _ = held(lambda: app.get(past), link_env, workers, wait=0)
    assert failed.status_code == 422, failed.text
    assert "quote starts after the end of the video" in failed.json()["detail"]
    assert failed.headers["cache-control"] == "no-store"
    began = time.monotonic()
    again = app.get(past)
    assert again.status_code == 422 and time.monotonic() - began < 2 and queued(link_env) == 0
    assert app.head(past).status_code == 422


def test_renders_are_limited_per_site_key(link_env, source_url) -> None:
    """QUOTECLIP_LINK_RENDERS renders a minute per key: the next link that would render is 429 with Retry-After;
    another key has its own allowance; a stored clip is answered whatever the count; counted in /metrics."""
    from jobs.pipeline.produce import produce_clip
    from quoteclip.spec import build_spec
    from storage import open_storage

    link_env.update({"QUOTECLIP_LINK_RENDERS": "2", "QUOTECLIP_LINK_HOLD": "0.2"})
    app = client_for(link_env)
    answers = [app.get(link(quote(source_url, n, n + 1))).status_code for n in range(3)]
    assert answers == [503, 503, 429], answers
    limited = app.get(link(quote(source_url, 3, 4)))
    assert limited.status_code == 429 and 1 <= int(limited.headers["retry-after"]) <= 60
    assert limited.headers["access-control-allow-origin"] == "*" and "2 renders" in limited.json()["detail"]
    assert app.get(link(quote(source_url, 0, 1))).status_code == 503  # its render is underway: joined, not limited
    assert app.get(link(quote(source_url, 3, 4), key=OTHER, secret=OTHER_SECRET)).status_code == 503
    stored = Settings.from_env(link_env).for_queue()
    made = produce_clip(build_spec(quote(source_url, 4, 5)), stored, open_storage(stored))  # rendered elsewhere
    assert app.get(link(quote(source_url, 4, 5))).headers["etag"] == f'"{made.key}"'
    counted = metrics(app)
    assert counted[("quoteclip_link_renders_total", (("key", SITE),))] == 2
    assert counted[("quoteclip_link_renders_total", (("key", OTHER),))] == 1
    requests = "quoteclip_link_requests_total"
    assert counted[(requests, (("key", SITE), ("outcome", "limited"), ("variant", "clip")))] == 2
    assert counted[(requests, (("key", SITE), ("outcome", "unavailable"), ("variant", "clip")))] == 3
    assert counted[(requests, (("key", SITE), ("outcome", "stored"), ("variant", "clip")))] == 1


def test_api_keys_guard_the_rest_and_links_and_the_embed_need_none(link_env, source_url) -> None:
    link_env["QUOTECLIP_API_KEYS"] = "k-secret"
    app = client_for(link_env)
    assert app.head(link(quote(source_url))).status_code == 404  # not 401: the link's signature lets it in
    assert app.get(link(quote(source_url), "captions")).status_code == 200
    assert app.get("/l/site/nothing").json() == INVALID  # no key needed to be told a link is not one
    assert app.get("/l/site/x/y").status_code == 404  # nothing else behind /l/
    embed = app.get("/embed.js")
    assert embed.status_code == 200 and embed.headers["content-type"].startswith("text/javascript")
    assert 'customElements.define("quote-clip"' in embed.text and "public, max-age=" in embed.headers["cache-control"]
    assert embed.headers["x-content-type-options"] == "nosniff"  # a script only as the script it is
    assert app.get("/embed.js", headers={"If-None-Match": embed.headers["etag"]}).status_code == 304
    assert app.post("/clips", json=quote(source_url)).status_code == 401
    assert app.get("/metrics").status_code == 401


@pytest.fixture
def s3_env(link_env: dict[str, str], s3) -> dict[str, str]:
    link_env.update(s3.env())
    link_env["QUOTECLIP_LINK_TTL"] = "300"
    return link_env


def test_with_s3_a_stored_link_redirects_to_the_bucket_for_no_longer_than_the_link_lives(
    s3_env, s3, workers, source_url
) -> None:
    """With an S3 store the link answers 302 to the presigned object, cached a minute less than the presigned link
    lives (and no longer than the signed link); the poster rendered alone is stored in the bucket beside where the
    clip goes."""
    app = client_for(s3_env)
    poster, _ = held(lambda: app.get(link(quote(source_url), "poster")), s3_env, workers, wait=0)
    assert poster.status_code == 302, poster.text
    assert poster.headers["cache-control"] == "public, max-age=240"  # QUOTECLIP_LINK_TTL less a minute
    assert poster.headers["access-control-allow-origin"] == "*"
    assert ".jpg?" in poster.headers["location"] and "X-Amz-Expires=300" in poster.headers["location"]
    with urllib.request.urlopen(poster.headers["location"]) as response:
        assert response.read(3) == b"\xff\xd8\xff"
    names = {o["Key"] for o in s3.client().list_objects_v2(Bucket=s3.bucket)["Contents"]}
    assert len(names) == 1 and names.pop().endswith(".jpg")
    clip, _ = held(lambda: app.get(link(quote(source_url))), s3_env, workers, wait=0)
    assert clip.status_code == 302 and ".mp4?" in clip.headers["location"]
    with urllib.request.urlopen(clip.headers["location"]) as response:
        assert response.read(8)[4:8] == b"ftyp"
    expires = int(time.time()) + 100
    capped = app.get(link(quote(source_url), "download", expires=expires))
    assert capped.status_code == 302
    assert int(capped.headers["cache-control"].removeprefix("public, max-age=")) <= expires - time.time()
    assert app.head(link(quote(source_url), "poster")).status_code == 302


def test_a_held_request_is_woken_by_the_workers_announcement(link_env, workers, source_url, monkeypatch) -> None:
    """With the app's lifespan (its subscription to the workers' announcements) and the fallback look a minute
    apart, the held request is answered within moments of the worker's end."""
    from api import events

    monkeypatch.setattr(events, "FALLBACK", 60.0)
    with contextlib.nullcontext(client_for(link_env)) as app:  # (started: its lifespan runs)
        deadline = time.monotonic() + 10
        while not app.app.state.services.events.subscribed:  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, "the API never subscribed to the job events"
            time.sleep(0.02)
        ended: list[float] = []
        answer: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: answer.update(r=app.get(link(quote(source_url))), at=time.monotonic()))
        thread.start()
        while queued(link_env) == 0:
            time.sleep(0.05)
        workers.burst(1)
        ended.append(time.monotonic())
        thread.join(60)
    assert answer["r"].status_code == 200
    assert answer["at"] < ended[0] + 2, "answered long after the worker ended: no announcement woke it"


@pytest.mark.parametrize("kind", ["video", "audiogram", "artwork"])
def test_the_poster_alone_is_the_full_renders_poster(kind: str, media, settings, ffmpeg_bin, tmp_path) -> None:
    """The poster rendered alone (no services: the pipeline itself) is byte for byte the poster the clip's full
    render writes: a video's frame with captions (karaoke, a sequence of states) and watermark, an audiogram's
    waveform over its colour, over a source's artwork."""
    from jobs.pipeline.produce import produce_clip, produce_poster
    from quoteclip.spec import build_spec
    from storage import LocalStorage
    from testkit.media import ffmpeg, lavfi, with_artwork

    tone = "aevalsrc='if(lt(mod(t,1),0.5),0.8*sin(2*PI*440*t),0)':s=48000:d=6"
    if kind == "video":
        source = media(size="320x180", fps="30000/1001", duration=6, gop=45, pattern="levels")
    else:
        source = tmp_path / "episode.mp3"
        ffmpeg(ffmpeg_bin, *lavfi(tone), "-c:a", "libmp3lame", str(source))
    if kind == "artwork":
        cover, plain = tmp_path / "cover.png", source
        source = tmp_path / "with-art.mp3"
        ffmpeg(ffmpeg_bin, *lavfi("color=c=0xd01010:s=300x300"), "-frames:v", "1", str(cover))
        with_artwork(ffmpeg_bin, plain, cover, source)
    spec = build_spec(
        {
            "source": str(source),
            "start": 1.068,
            "end": 3.5,
            "caption": "one two three four five",
            "watermark": "StarZero",
            "style": {"preset": "karaoke"},
        }
    )
    store = LocalStorage(settings.storage_dir)
    alone = produce_poster(spec, settings.for_cli(), store)
    assert not alone.cached and not (settings.storage_dir / f"{alone.key}.mp4").exists()
    picture = (settings.storage_dir / f"{alone.key}.jpg").read_bytes()
    assert produce_poster(spec, settings.for_cli(), store).cached  # found, not rendered again
    clip = produce_clip(spec, settings.for_cli(), store)
    assert clip.key == alone.key and (settings.storage_dir / f"{clip.key}.jpg").read_bytes() == picture


@pytest.mark.slow
def test_a_download_waits_for_a_render_longer_than_the_links_hold(link_env, source_url, workers) -> None:
    """A browser's download (``<a href>``) saves nothing of a 503 and acts on no ``Retry-After``: it is held up to
    ``QUOTECLIP_DOWNLOAD_HOLD`` (once ``QUOTECLIP_LINK_HOLD``, 0.5 s here, which a render outlasts: it got 503),
    and saves the clip; the poster's link, not a download, is still answered 503 past the link's hold."""
    env = {**link_env, "QUOTECLIP_LINK_HOLD": "0.5", "QUOTECLIP_DOWNLOAD_HOLD": "90"}
    app = client_for(env)
    workers.env = env
    worker = workers.start(burst=False)
    try:
        poster = app.get(link(quote(source_url, 1, 5), "poster"))
        download = app.get(link(quote(source_url, 1, 5), "download"))
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        if worker.stdout:
            worker.stdout.close()
    assert poster.status_code == 503 and "still rendering after 0.5 s" in poster.json()["detail"], poster.text
    assert download.status_code == 200 and download.content[4:8] == b"ftyp", download.status_code
    assert download.headers["content-disposition"].startswith("attachment;")
