"""The batch page and POST /batches given the quotes as text: the quotes are read as ``quoteclip batch`` reads a
CSV file (one check: a quote left open that runs on into the next line is refused, named by its line, on the page
as from the command line); a transcript finds each quote's times and words; and the page applies a brand kit (a
logo uploaded, a caption style, shapes, the blurred fill) so a vertical clip of a landscape source shows the
blurred fill, not bars, and the logo, in its pixels."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import CHROMIUM_FLAGS, serving_with_a_worker
from fastapi.testclient import TestClient
from mediacheck import rgb_frame

from api import create_app
from cli.batch import read_quotes
from quoteclip import redis_keys
from quoteclip.errors import BadInput
from quoteclip.settings import Settings

OPEN = '1,2,"unclosed quote, here\n3.0,4.0,the next quote\n'
WATCH_VIOLATIONS = """
window.violations = [];
document.addEventListener("securitypolicyviolation", (e) => window.violations.push(e.violatedDirective));
"""


@pytest.fixture
def client(queue_env) -> TestClient:
    return TestClient(create_app(Settings.from_env(queue_env)))


def test_a_quote_left_open_is_refused_by_its_line_as_the_command_line_refuses_it(client, tmp_path) -> None:
    answer = client.post("/batches", json={"source": "http://127.0.0.1:9/ep.mp4", "quotes": OPEN})
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert detail.startswith("bad input: quotes: line 1: the quote opened in the caption is not closed"), detail
    assert "into line 2 ('3.0,4.0,the next quote')" in detail, detail
    csv_file = tmp_path / "quotes.csv"
    csv_file.write_text("start,end,caption\n" + OPEN)
    with pytest.raises(BadInput) as cli:
        read_quotes(str(csv_file))
    # the same words (the file's lines are one further down: its header)
    same = detail.split("line 1: ", 1)[1].replace("line 2", "line 3")
    assert str(cli.value).endswith("line 2: " + same), (str(cli.value), detail)


def test_quotes_as_text_are_named_by_their_lines(client, queue_env) -> None:
    """Blank lines skipped, a caption with commas in double quotes or as the rest of its line, an optional
    header; a bad quote named by its line, the others queued."""
    text = 'start,end,caption\n1,2.5,"first, quoted"\n\n5,3,backwards\n3,4.5,second, with a comma\n'
    answer = client.post("/batches", json={"source": "http://127.0.0.1:9/ep.mp4", "quotes": text})
    assert answer.status_code == 200, answer.text
    batch = answer.json()
    assert [(c["quote"], c["line"]) for c in batch["clips"]] == [(1, 2), (3, 5)]
    assert batch["rejected"] == [
        {"quote": 2, "line": 4, "error": "bad input: end must be after start, got start=5.0 end=3.0"}
    ]
    kept = json.loads(client.app.state.services.connection.get(redis_keys.batch_clips(batch["id"])))
    assert [c["caption"] for c in kept] == ["first, quoted", "second, with a comma"]


def test_a_transcript_times_quotes_given_by_their_words(client) -> None:
    spoken = [
        {"text": w, "start": round(0.5 + 0.4 * i, 3), "end": round(0.8 + 0.4 * i, 3)}
        for i, w in enumerate("so this is the quote we want and then some more".split())
    ]
    text = "caption\nthe quote we want\nnothing like it at all\n"
    body = {"source": "http://127.0.0.1:9/ep.mp4", "quotes": text, "transcript": json.dumps(spoken)}
    answer = client.post("/batches", json=body)
    assert answer.status_code == 200, answer.text
    batch = answer.json()
    assert [r["line"] for r in batch["rejected"]] == [3], batch["rejected"]
    kept = json.loads(client.app.state.services.connection.get(redis_keys.batch_clips(batch["id"])))
    assert [(c["start"], c["end"]) for c in kept] == [(1.7, 3.2)]  # "the" starts at 1.7, "want" ends at 3.2
    bad = client.post("/batches", json={**body, "transcript": "[{"})
    assert bad.status_code == 422 and bad.json()["detail"].startswith("bad input: transcript: not valid JSON")


def test_platforms_render_every_quote_in_each_platforms_preset(client) -> None:
    body = {"source": "http://127.0.0.1:9/ep.mp4", "quotes": "1,2.5,one\n3,4,two", "platforms": ["shorts", "x"]}
    answer = client.post("/batches", json=body)
    assert answer.status_code == 200, answer.text
    batch = answer.json()
    made = [(c["line"], c["profile"], c["platform"]) for c in batch["clips"]]
    assert made == [(1, "vertical", "shorts"), (1, "landscape", "x"), (2, "vertical", "shorts"), (2, "landscape", "x")]
    kept = json.loads(client.app.state.services.connection.get(redis_keys.batch_clips(batch["id"])))
    assert [c["platform"] for c in kept] == ["shorts", "x"] * 2
    both = client.post("/batches", json={**body, "profiles": ["square"]})
    assert both.status_code == 422 and "give platforms or profiles, not both" in both.json()["detail"]
    unknown = client.post("/batches", json={**body, "platforms": ["shorts", "vine"]})
    assert unknown.status_code == 422 and "unknown platform 'vine'" in unknown.json()["detail"], unknown.text


@pytest.fixture
def served(workers, request) -> Iterator[str]:
    """``quoteclip serve`` and a worker, storing clips in the local folder or, with the parameter ``"s3"``, in
    S3 (SeaweedFS: the page's posters and players then load from the store's own origin)."""
    if getattr(request, "param", "local") == "s3":
        workers.env.update(request.getfixturevalue("s3").env())
    with serving_with_a_worker(workers) as base:
        yield base


def logo_png(path: Path) -> Path:
    from PIL import Image

    Image.new("RGBA", (96, 96), (255, 0, 255, 255)).save(path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("served", ["local", "s3"], indirect=True)
def test_the_batch_page_applies_a_brand_kit_and_refuses_a_quote_left_open(
    chromium, served, media, http_source, tmp_path
) -> None:
    """From the page: a brand style file fills the form (a vertical shape, fit blur, a caption style), a logo is
    uploaded: the vertical clip of a landscape source has the blurred picture (not black) above the picture and
    the logo in its top right corner; a quote left open is named by its line."""
    from playwright.sync_api import sync_playwright

    (http_source.root / "ep.mp4").symlink_to(media(size="320x180", duration=4, gop=30))
    query = urllib.parse.urlencode({"source": http_source.url("ep.mp4"), "quotes": "1,2.5,a branded quote"})
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            page.add_init_script(WATCH_VIOLATIONS)
            page.goto(f"{served}/batch?{query}")
            page.fill("#quotes", OPEN)
            page.click("#go")
            page.wait_for_function("() => document.getElementById('summary').textContent.includes('line')")
            refused = page.inner_text("#summary")
            page.fill("#quotes", "1,2.5,a branded quote")
            page.select_option("#fit", "pad")
            kit = {"style": {"preset": "bold-outline", "highlight": "#00FF00"}, "fit": "blur", "profiles": ["vertical"]}
            kit["watermark"] = {"text": "Kit", "position": "top-right"}
            (tmp_path / "brand.json").write_text(json.dumps(kit))
            page.set_input_files("#brandfile", str(tmp_path / "brand.json"))  # the file --style-file reads
            page.wait_for_function("() => document.getElementById('brand').value === 'Kit'")
            filled = page.evaluate(
                "() => ['fit', 'preset', 'highlight'].map((id) => document.getElementById(id).value)"
                ".concat([...document.querySelectorAll('#shapes input:checked')].map((b) => b.value))"
            )
            page.set_input_files("#logo", str(logo_png(tmp_path / "logo.png")))
            page.click("#go")
            page.wait_for_function(
                "() => [...document.querySelectorAll('.clip .poster img')].filter(i => i.naturalWidth).length === 1",
                timeout=120_000,
            )
            download = page.get_attribute(".clip a.dl", "href")
            violations = page.evaluate("window.violations")
        finally:
            browser.close()
    assert refused.startswith("bad input: quotes: line 1: the quote opened in the caption is not closed"), refused
    assert violations == [], violations
    assert filled == ["blur", "bold-outline", "#00ff00", "vertical"], filled
    clip = tmp_path / "clip.mp4"
    with urllib.request.urlopen(f"{served}{download}") as resp:
        clip.write_bytes(resp.read())
    frame = rgb_frame(clip, at=0.5)  # 1280 rows × 720 columns; the picture is the middle 405 rows
    assert frame.shape[:2] == (1280, 720)
    fill = frame[150:400, 40:560]  # above the picture, clear of the logo
    luma = 0.299 * fill[..., 0] + 0.587 * fill[..., 1] + 0.114 * fill[..., 2]
    assert luma.mean() > 40 and luma.std() > 3, (luma.mean(), luma.std())  # the blurred picture, not a black bar
    mark = frame[30:55, 665:690].reshape(-1, 3).mean(axis=0)  # the logo: 6% of 720 tall, 3% in from the corner
    assert mark[0] > 180 and mark[2] > 180 and mark[1] < 90, mark
