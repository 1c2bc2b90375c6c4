"""A request's ``transcript: "source"`` with ``quote``: the quote found by its words in the page's own captions
(the test video site's json3 track), the clip cut from its first word's start to its last word's end with its
words for the highlight; one extraction for the captions, the API and the worker's render. Bad requests are a 422
naming what was wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from rq.job import Job
from test_sites import assert_exact, episode_files, site  # noqa: F401  (the site's episode and its fixture)
from test_source_captions import rolling_json3

from api import create_app
from quoteclip import redis_keys
from quoteclip.settings import Settings
from testkit.videosite import Episode, SiteCaption

QUOTE = "Charlie, delta echo!"  # in the json3 track: "charlie" from 300.9, "echo" to 303.9


@pytest.fixture
def env(queue_env: dict[str, str], site) -> dict[str, str]:  # noqa: F811
    site.episodes["ep1"].captions = [SiteCaption("en", "json3", rolling_json3())]
    site.episodes["bare1"] = Episode("No captions", 600, site.episodes["ep1"].formats)
    return {**queue_env, "QUOTECLIP_SOURCE_HOSTS": "*"}


@pytest.fixture
def client(env: dict[str, str]) -> TestClient:
    return TestClient(create_app(Settings.from_env(env)), raise_server_exceptions=False)


def test_a_clip_request_with_a_quote_renders_from_its_first_word_to_its_last(
    site,  # noqa: F811
    env,
    client,
    workers,
    tmp_path: Path,
) -> None:
    answer = client.post("/clips", json={"source": site.url("ep1"), "transcript": "source", "quote": QUOTE})
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["id"]
    spec = Job.fetch(job_id, connection=client.app.state.services.connection).args[0]
    assert (spec["start"], spec["end"], spec["caption"]) == (300.9, 303.9, QUOTE)
    assert [(w["text"], w["start"], w["end"]) for w in spec["words"]] == [
        ("Charlie,", 300.9, 301.5),
        ("delta", 301.5, 302.2),
        ("echo!", 302.2, 303.9),
    ]
    workers.env = env
    workers.burst(1)
    got = client.get(answer.json()["download_url"], follow_redirects=True)
    assert got.status_code == 200, got.text[:300]
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(got.content)
    assert_exact(clip, 0.1)  # 300.9 is 0.1 s before the source's flash at 301 s
    assert site.page_loads["ep1"] == 1 and site.caption_loads == {"ep1/0": 1}  # the worker read neither again


def test_a_preview_and_a_batch_find_the_quote_alike(site, client) -> None:  # noqa: F811
    body = {"source": site.url("ep1"), "transcript": "source", "quote": QUOTE}
    preview = client.post("/previews", json=body)
    assert preview.status_code == 200, preview.text
    assert preview.json()["first_frame"]["time"] == 300.9 and preview.json()["duration"] == pytest.approx(3.0)
    # the preview is made in this process: the page's captions and its render share this process's extraction
    assert site.page_loads["ep1"] == 1 and site.caption_loads == {"ep1/0": 1}
    vtt = client.post("/previews/captions", json=body)
    assert vtt.status_code == 200, vtt.text
    assert "Charlie," in vtt.text and "00:00:03.000" in vtt.text  # the cut's 3 s, its words shown
    words = client.post("/previews/words", json={"source": site.url("ep1"), "start": 301.5, "end": 303.9})
    assert words.status_code == 200, words.text
    assert [w["text"] for w in words.json()["words"]][:3] == ["we", "said", "charlie"]
    assert site.page_loads["ep1"] == 1 and site.caption_loads == {"ep1/0": 1}
    batch = client.post(
        "/batches", json={"source": site.url("ep1"), "transcript": "source", "quotes": f"caption\n{QUOTE}"}
    )
    assert batch.status_code == 200, batch.text
    kept = json.loads(client.app.state.services.connection.get(redis_keys.batch_clips(batch.json()["id"])))
    assert (kept[0]["start"], kept[0]["end"]) == (300.9, 303.9), kept
    assert site.page_loads["ep1"] == 2  # the batch's in Redis, where the workers that render it look


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"episode": "bare1", "quote": QUOTE}, "transcript: source: the page has no captions in en"),
        ({"episode": "ep1", "quote": "nothing like it at all"}, "quote: not found in the transcript"),
        ({"source": "http://127.0.0.1:9/ep.mp4", "quote": QUOTE}, "transcript: source: only a page"),
        ({"episode": "ep1", "quote": "  "}, "quote: give the quote's words"),
        ({"episode": "ep1", "transcript": None, "quote": QUOTE}, "start: required (or give transcript"),
        ({"episode": "ep1", "transcript": "mine.vtt", "quote": QUOTE}, "transcript"),
    ],
)
def test_a_bad_quote_request_is_a_422_naming_what_was_wrong(site, client, body: dict, named: str) -> None:  # noqa: F811
    fields = {"transcript": "source", **body}
    episode = fields.pop("episode", None)
    if episode is not None:
        fields["source"] = site.url(episode)
    fields = {k: v for k, v in fields.items() if v is not None}
    for path in ("/clips", "/previews/captions"):
        answer = client.post(path, json=fields)
        assert answer.status_code == 422, (path, answer.status_code, answer.text)
        assert named in answer.json()["detail"], (path, answer.json())
