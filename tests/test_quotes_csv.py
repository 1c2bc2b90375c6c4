"""One reader of quotes written as CSV, for ``quoteclip batch`` and ``POST /batches``: the caption is the last
column and its unquoted commas belong to it; a dry run that lists a quote it will refuse says so in its exit."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli
from fastapi.testclient import TestClient

from api import create_app
from api.batches import quotes_of_text
from cli.batch import read_quotes
from quoteclip.settings import Settings

COMMAS = "0:04,0:09,This weird scheduling, which I am sure, is odd"


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        (f"start,end,caption\n{COMMAS}\n", {"start": "0:04", "end": "0:09", "caption": COMMAS.split(",", 2)[2]}),
        ("caption\nThis weird scheduling, which I am sure, is odd\n", {"caption": COMMAS.split(",", 2)[2]}),
        ('start,end,caption\n1,2,"quoted, as ever"\n', {"start": "1", "end": "2", "caption": "quoted, as ever"}),
    ],
)
def test_the_command_line_and_the_api_read_a_caption_with_commas_alike(tmp_path, text: str, fields: dict) -> None:
    path = tmp_path / "quotes.csv"
    path.write_text(text)
    assert [(q.line, q.fields) for q in read_quotes(str(path))] == [(2, fields)]
    assert quotes_of_text(text) == [(2, fields)]


def test_batch_dry_run_lists_the_whole_caption(tmp_path) -> None:
    path = tmp_path / "quotes.csv"
    path.write_text(f"start,end,caption\n{COMMAS}\n")
    (tmp_path / "ep.mp4").write_bytes(b"")  # (a dry run reads no source: it is there, as the batch needs)
    done = run_cli("batch", str(tmp_path / "ep.mp4"), str(path), "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["quotes"][0]["caption"] == "This weird scheduling, which I am sure, is odd"


def test_a_dry_run_listing_a_quote_it_will_refuse_exits_1(tmp_path) -> None:
    path = tmp_path / "quotes.jsonl"
    path.write_text('{"start": 1, "end": 2, "caption": "fine"}\nnot json at all\n')
    (tmp_path / "ep.mp4").write_bytes(b"")
    done = run_cli("batch", str(tmp_path / "ep.mp4"), str(path), "--dry-run")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "2\tline 2\t-\t-\t-\tnot a quote: " in done.stdout, done.stdout
    assert "1 of 2 quotes will be refused" in done.stderr, done.stderr


def test_the_page_reads_the_same_caption(queue_env) -> None:
    client = TestClient(create_app(Settings.from_env(queue_env)))
    answer = client.post("/batches", json={"source": "http://127.0.0.1:9/ep.mp4", "quotes": COMMAS + "\n"})
    assert answer.status_code == 200, answer.text
