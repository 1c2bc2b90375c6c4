"""POST /batches given hostile text: quotes and transcripts that once answered a bare 500 (a field over the CSV
reader's limit, a lone carriage return, a JSON transcript nested past Python's recursion limit) or held a worker
for minutes (a transcript of hundreds of thousands of words), each answered with a 422 naming what was wrong, in
well under a second; and lines counted right whatever a line ends with."""

from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient

from api import batches, create_app
from quoteclip import redis_keys
from quoteclip.errors import BadInput
from quoteclip.settings import Settings

SOURCE = "http://127.0.0.1:9/ep.mp4"


@pytest.fixture
def client(queue_env) -> TestClient:
    return TestClient(create_app(Settings.from_env(queue_env)), raise_server_exceptions=False)


def _refused(client: TestClient, **body: object) -> str:
    started = time.monotonic()
    answer = client.post("/batches", json={"source": SOURCE, **body})
    assert answer.status_code == 422, (answer.status_code, answer.text[:300])
    assert time.monotonic() - started < 5, "a refusal must come at once"
    return str(answer.json()["detail"])


@pytest.mark.parametrize(
    ("quotes", "named"),
    [
        ("1,2," + "a" * 200_000, "line 1: a field of over 131072 characters"),
        ('1,2,ok\n3,4,"' + "a" * 200_000 + '"', "line 2: a field of over 131072 characters"),
    ],
)
def test_a_field_past_the_csv_readers_limit_is_a_422_naming_its_line(client, quotes: str, named: str) -> None:
    assert named in _refused(client, quotes=quotes)


def test_lines_are_counted_alike_whatever_ends_them(client) -> None:
    """LF, CRLF and a lone CR (an old Mac's line end) each end a line; a quoted caption spanning lines counts its
    lines; a byte-order mark before the header is no column name."""
    for end in ("\n", "\r\n", "\r"):
        text = end.join(["\ufeffstart,end,caption", '1,2,"two', 'lines"', "", "5,3,backwards", "3,4,last", ""])
        answer = client.post("/batches", json={"source": SOURCE, "quotes": text})
        assert answer.status_code == 200, (repr(end), answer.text)
        batch = answer.json()
        assert [(c["quote"], c["line"]) for c in batch["clips"]] == [(1, 2), (3, 6)], repr(end)
        assert [(r["quote"], r["line"]) for r in batch["rejected"]] == [(2, 5)], repr(end)
        kept = json.loads(client.app.state.services.connection.get(redis_keys.batch_clips(batch["id"])))
        assert kept[0]["caption"].split() == ["two", "lines"], repr(end)
        detail = _refused(client, quotes=end.join(['1,2,"left open', "3,4,the next quote", ""]))
        assert "line 1: the quote opened in the caption is not closed, so it runs on into line 2" in detail, detail


def test_a_transcript_nested_past_the_recursion_limit_is_a_422(client) -> None:
    for transcript in ("[" * 100_000, "[" * 50_000 + "]" * 50_000, '{"words": ' * 30_000):
        detail = _refused(client, quotes="caption\nhello world", transcript=transcript)
        assert detail.startswith("bad input: transcript: "), detail


def test_a_transcript_of_too_many_words_is_refused_before_it_is_read(client) -> None:
    cues = "WEBVTT\n\n" + "00:00:01.000 --> 00:00:02.000\nhello\n\n" * (batches.MAX_TRANSCRIPT_WORDS + 1)
    detail = _refused(client, quotes="caption\nhello world", transcript=cues)
    assert f"over the {batches.MAX_TRANSCRIPT_WORDS} words" in detail, detail
    listed = json.dumps([{"text": "hello", "start": 1, "end": 2}] * (batches.MAX_TRANSCRIPT_WORDS + 1))
    detail = _refused(client, quotes="caption\nhello world", transcript=listed)
    assert f"over the {batches.MAX_TRANSCRIPT_WORDS} words" in detail, detail


def test_finding_the_quotes_stops_at_its_time_limit(client, monkeypatch) -> None:
    monkeypatch.setattr(batches, "FINDING_SECONDS", 0.0)
    spoken = json.dumps([{"text": w, "start": i, "end": i + 0.5} for i, w in enumerate("a b c d e f".split())])
    detail = _refused(client, quotes="caption\nb c d\nc d e\n", transcript=spoken)
    assert "finding the quotes in the transcript took over 0 s (1 of 2 looked for)" in detail, detail


def test_a_quote_too_common_to_find_in_time_is_answered_at_once(client) -> None:
    """Finding a quote once cost about its words squared for each place its first or last words occur: a quote of
    thirty "the" in a transcript of nothing else took 107 s (59000 words). It is found at once now (the search
    stops at a match nothing can beat), and a quote whose every place must be compared in full is refused, named."""
    spoken = json.dumps([{"text": "the", "start": i, "end": i + 0.5} for i in range(20_000)])
    started = time.monotonic()
    answer = client.post(
        "/batches",
        json={"source": SOURCE, "quotes": "caption\n" + " ".join(["the"] * 30) + " end", "transcript": spoken},
    )
    assert answer.status_code == 200, answer.text[:300]
    assert time.monotonic() - started < 5, "an answer must come at once"
    assert [c["quote"] for c in answer.json()["clips"]] == [1]
    alternate = json.dumps([{"text": "ab"[i % 2], "start": i, "end": i + 0.5} for i in range(20_000)])
    detail = _refused(client, quotes="caption\na a a a b b b b", transcript=alternate)
    assert "line 2: bad input: quote: its words occur too often in the transcript" in detail, detail


def test_a_json_transcript_of_millions_of_values_is_refused_before_it_is_parsed(client) -> None:
    """18 MB of empty objects took 550 MB and 9 s to parse before its length was seen; its commas and brackets
    are counted first."""
    for values in ("{}", "[]", "0"):
        transcript = "[" + f"{values}," * 6_000_000 + f"{values}]"
        detail = _refused(client, quotes="caption\nhello world", transcript=transcript)
        assert "JSON values, over the" in detail, detail  # counted in the whole body first
        started = time.monotonic()
        with pytest.raises(BadInput, match=f"over the {batches.MAX_TRANSCRIPT_WORDS} words"):
            batches.transcript_words(transcript)  # and in the transcript, wherever it comes from
        assert time.monotonic() - started < 1


def test_a_body_of_millions_of_json_values_is_refused_before_it_is_parsed(client) -> None:
    """A keyed caller's batch body may hold 20 MiB (a transcript): as millions of empty objects in any field it
    took half a gigabyte to parse before a field's limit was seen. Its values are counted first."""
    junk = "[" + "{}," * 6_000_000 + "{}]"
    started = time.monotonic()
    answer = client.post(
        "/batches",
        content=f'{{"source": "{SOURCE}", "quotes": "1,2,x", "junk": {junk}}}',
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 422 and time.monotonic() - started < 5, (answer.status_code, answer.text[:200])
    assert "JSON values" in answer.json()["detail"], answer.text
    quotes = [{"start": 1, "end": 2, "caption": "x"}] * 150_000
    answer = client.post("/batches", json={"source": SOURCE, "quotes": quotes})
    assert answer.status_code == 422 and "JSON values" in answer.json()["detail"], answer.text[:200]
