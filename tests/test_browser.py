"""The demo page in a real browser: headless Chromium (Debian's package) driven by Playwright, against the
API and a worker on loopback. Click "Download clip", see progress, get a playable mp4."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import CHROMIUM_FLAGS, serving_with_a_worker
from mediacheck import streams

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"

pytestmark = pytest.mark.slow


@pytest.fixture
def served(workers, queue_env, tmp_path) -> Iterator[str]:
    """``quoteclip serve`` and ``quoteclip worker`` as real processes on loopback."""
    with serving_with_a_worker(workers) as base:
        yield base


def test_download_button_in_chromium(chromium, served, media, http_source, tmp_path) -> None:
    from playwright.sync_api import sync_playwright

    (http_source.root / "ep.mp4").symlink_to(media(size="640x360", duration=8, gop=60))
    page_url = f"{served}/?source={http_source.url('ep.mp4')}&start=1&end=6&brand=StarZero"
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(accept_downloads=True)
            page.goto(page_url)
            assert page.inner_text("#times") == "1–6"
            assert page.inner_text("#who") == ""  # no speaker or episode but the ones the address names
            edit_link = page.get_attribute("#edit-link", "href") or ""
            assert edit_link.startswith("edit?source=") and "start=1&end=6" in edit_link
            assert page.get_attribute("a[href='batch']", "href") == "batch"
            page.goto(page_url + "&speaker=Ada+Lovelace&episode=Notes")
            assert page.inner_text("#who") == "Ada Lovelace · Notes · "
            page.goto(page_url)
            stages: list[str] = []
            console: list[str] = []
            page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
            with page.expect_download(timeout=120_000) as download_info:
                page.click("#download")
                page.wait_for_function("() => document.getElementById('stage').textContent !== 'ready'")
                stages.append(page.inner_text("#stage"))
            download = download_info.value
            saved = tmp_path / "clip.mp4"
            download.save_as(saved)
            page.wait_for_function("() => document.getElementById('player').readyState >= 1", timeout=30_000)
            assert page.inner_text("#stage") == "finished"
            duration = page.evaluate("document.getElementById('player').duration")
            page.screenshot(path=str(ARTIFACTS / "demo-page.png"), full_page=True)
        finally:
            browser.close()
    info = streams(saved)
    assert (info["vcodec"], info["width"], info["height"]) == ("h264", 1280, 720)
    assert abs(info["duration"] - 5.0) < 0.1 and abs(duration - 5.0) < 0.1
    # the first stage the page showed: "queued", or the long-poll's "<stage> <progress>%" if it answered first
    assert stages and stages[0].split()[0] in {"queued", "waiting", "fetching", "rendering", "finished"}, stages
    assert not [line for line in console if line.startswith("error")], console


GRAB = """(id) => {
  const v = document.getElementById(id);
  const c = document.createElement("canvas");
  c.width = 32; c.height = 18;
  const g = c.getContext("2d");
  g.drawImage(v, 0, 0, v.videoWidth * 0.4, v.videoHeight * 0.4, 0, 0, 32, 18);  // top left: no caption, no mark
  const d = g.getImageData(0, 0, 32, 18).data;
  let sum = 0;
  for (let i = 0; i < d.length; i += 4) sum += 0.299 * d[i] + 0.587 * d[i + 1] + 0.114 * d[i + 2];
  return sum / (d.length / 4);
}"""


# The frame a player shows at the very end of a video: paused, sought to its duration (as a user drags the bar to
# the end), then grabbed as GRAB does.
AT_END = (
    """async (id) => {
  const v = document.getElementById(id);
  v.pause();
  await new Promise((done) => { v.addEventListener("seeked", done, { once: true }); v.currentTime = v.duration; });
  await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
  return ("""
    + GRAB
    + """)(id);
}"""
)


def test_edit_page_previews_nudges_and_renders_in_chromium(chromium, served, media, http_source, tmp_path) -> None:
    """The first frame Chromium shows is the source frame at ``start`` (a 29.97 fps source whose frames are each
    one gray level, so a canvas grab names the frame); a one-frame nudge moves it by exactly one source frame;
    word and 100 ms nudges land on the frame the rule names; "Render final" starts on the preview's frame."""
    import json
    import urllib.parse

    from mediacheck import frame_index, frame_means
    from playwright.sync_api import sync_playwright

    (http_source.root / "lv.mp4").symlink_to(
        media(size="320x180", fps="30000/1001", duration=6, gop=45, pattern="levels", bframes=True)
    )
    words = [
        {"text": "one", "start": 0.5, "end": 0.9},
        {"text": "two", "start": 1.2, "end": 1.6},
        {"text": "three", "start": 1.7, "end": 2.4},
    ]
    query = urllib.parse.urlencode(
        {
            "source": http_source.url("lv.mp4"),
            "start": "1.068",
            "end": "2.5",
            "brand": "StarZero",
            "words": json.dumps(words),
        }
    )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        console: list[str] = []
        try:
            page = browser.new_page(accept_downloads=True)
            page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
            page.goto(f"{served}/edit?{query}")
            page.click("#preview")  # a cut the address names waits for the user's click
            shown: list[tuple[int, int]] = []  # (frame the page names, frame Chromium shows)

            def after(count: int) -> None:
                page.wait_for_function(f"() => window.previews >= {count}", timeout=60_000)
                named = int(page.inner_text("#f-start"))
                shown.append((named, frame_index(page.evaluate(GRAB, "player"), named)))

            after(1)  # 1.068 s: frame 32 starts at 1.06773 s (the millisecond rounds up)
            last_named = int(page.inner_text("#f-end"))
            last_shown = frame_index(page.evaluate(AT_END, "player"), last_named)  # the preview's end, in Chromium
            page.keyboard.press("]")
            after(2)
            page.keyboard.press("[")
            after(3)
            page.keyboard.press("[")
            after(4)
            page.keyboard.press("e")  # the next word's start: 1.2 s
            after(5)
            page.keyboard.press("}")  # 100 ms later: 1.3 s
            after(6)
            assert page.input_value("#start") == "1.300" and page.inner_text("#t-start") == "1.301"  # frame 39
            page.screenshot(path=str(ARTIFACTS / "edit-page.png"), full_page=True)
            page.click("#render")
            page.wait_for_function("() => window.finalShown === true", timeout=120_000)
            final_first = frame_index(page.evaluate(GRAB, "final"), 39)
            href = page.get_attribute("#download", "href")
        finally:
            browser.close()
    assert shown == [(32, 32), (33, 33), (32, 32), (31, 31), (36, 36), (39, 39)], shown
    assert (last_named, last_shown) == (74, 74)  # 2.5 s: frame 75 starts at 2.5025 s, so the cut ends on 74
    assert final_first == 39
    saved = tmp_path / "final.mp4"
    with urllib.request.urlopen(f"{served}/{href}") as resp:
        saved.write_bytes(resp.read())
    assert frame_index(frame_means(saved, limit=1, corner=0.4)[0], 39) == 39 and streams(saved)["width"] == 1280
    assert not [line for line in console if line.startswith("error")], console


def test_batch_page_shows_each_clips_poster_and_download_in_chromium(chromium, served, media, http_source) -> None:
    """The batch page: two quotes in two shapes and a bad line; each clip's card shows its poster (in its shape)
    and a download, the bad line is named by its line and the rest is made; the ZIP holds them all."""
    import io
    import urllib.parse
    import zipfile

    from playwright.sync_api import sync_playwright

    (http_source.root / "ep.mp4").symlink_to(media(size="640x360", duration=8, gop=60))
    query = urllib.parse.urlencode(
        {
            "source": http_source.url("ep.mp4"),
            "quotes": "1,2.5,first quote\n\n5,3,backwards\n3,4.5,second, with a comma",
        }
    )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        console: list[str] = []
        try:
            page = browser.new_page()
            page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
            page.goto(f"{served}/batch?{query}")
            page.click("#go")
            page.wait_for_function(
                "() => [...document.querySelectorAll('.clip .poster img')].filter(i => i.complete && i.naturalWidth)"
                ".length === 4",
                timeout=120_000,
            )
            sizes = page.evaluate(
                "[...document.querySelectorAll('.clip .poster img')].map(i => [i.naturalWidth, i.naturalHeight])"
            )
            labels = [el.inner_text() for el in page.query_selector_all(".clip strong")]
            rejected = page.inner_text("#rejected")
            counts = page.inner_text("#counts")
            downloads = [el.get_attribute("href") for el in page.query_selector_all(".clip a.dl")]
            archive = page.get_attribute("#archive", "href")
            page.screenshot(path=str(ARTIFACTS / "batch-page.png"), full_page=True)
        finally:
            browser.close()
    assert sizes == [[1280, 720], [720, 1280]] * 2, sizes
    assert labels == ["line 1 · landscape", "line 1 · vertical", "line 4 · landscape", "line 4 · vertical"]
    assert rejected == "line 3: bad input: end must be after start, got start=5.0 end=3.0"  # named by its line
    assert counts == "4 finished · 0 failed · 0 to go · 1 line left out"
    assert len(downloads) == 4 and len(set(downloads)) == 4, downloads  # a download on every card, each its own
    for href in downloads:
        with urllib.request.urlopen(f"{served}{href}") as resp:
            assert resp.read(8)[4:8] == b"ftyp"
    with urllib.request.urlopen(f"{served}{archive}") as resp:
        names = zipfile.ZipFile(io.BytesIO(resp.read())).namelist()
    assert len(names) == 5 and names[-1] == "manifest.json"
    assert not [line for line in console if line.startswith("error")], console


def test_edit_page_corrects_the_captions_words_for_the_preview_and_the_final(
    chromium, served, media, http_source, queue_env, tmp_path
) -> None:
    """The editor corrects misheard words in the page: a correction that keeps the word count keeps each word's
    time, one that changes it ("open AI" → "OpenAI") spreads the new words over the replaced words' span; the
    preview's captions change at once (no render), and the final is rendered with the corrected words, which its
    manifest records. Bare /edit shows no stray text and no active "Render final" before a preview."""
    import json
    import urllib.parse

    from playwright.sync_api import sync_playwright

    (http_source.root / "ep.mp4").symlink_to(media(size="320x180", duration=6, gop=45))
    heard = [
        {"text": "we", "start": 1.0, "end": 1.2},
        {"text": "use", "start": 1.2, "end": 1.5},
        {"text": "open", "start": 1.5, "end": 1.8},
        {"text": "AI", "start": 1.8, "end": 2.1},
        {"text": "models", "start": 2.1, "end": 2.6},
    ]
    query = urllib.parse.urlencode(
        {"source": http_source.url("ep.mp4"), "start": "1.0", "end": "2.7", "words": json.dumps(heard)}
    )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            page.goto(f"{served}/edit")
            bare = (page.inner_text("#times"), page.is_disabled("#render"))
            page.goto(f"{served}/edit?{query}")
            page.click("#preview")
            page.wait_for_function("() => window.previews >= 1", timeout=60_000)
            assert page.input_value("#caption") == "we use open AI models"
            page.fill("#caption", "We use open AI models.")  # the same five words: each keeps its time
            page.wait_for_function("() => window.captionCues.some((cue) => cue[2].includes('models.'))")
            same_count = page.evaluate("window.captionCues")
            page.fill("#caption", "We use OpenAI models.")  # two heard words become one
            page.wait_for_function("() => window.captionCues.some((cue) => cue[2].includes('OpenAI'))")
            fewer = page.evaluate("window.captionCues")
            words = json.loads(page.input_value("#words"))
            page.click("#render")
            page.wait_for_function("() => window.finalShown === true", timeout=120_000)
        finally:
            browser.close()
    assert bare == ("", True)
    # the final's captions, laid out by the service: a cue per spoken word, until the clip's end (1.7 s)
    assert same_count == [
        [0.0, 0.2, "<c.hl>We</c> use open AI models."],
        [0.2, 0.5, "We <c.hl>use</c> open AI models."],
        [0.5, 0.8, "We use <c.hl>open</c> AI models."],
        [0.8, 1.1, "We use open <c.hl>AI</c> models."],
        [1.1, 1.7, "We use open AI <c.hl>models.</c>"],
    ]
    assert words == [
        {"text": "We", "start": 1.0, "end": 1.2},
        {"text": "use", "start": 1.2, "end": 1.5},
        {"text": "OpenAI", "start": 1.5, "end": 2.1},  # the span of "open AI"
        {"text": "models.", "start": 2.1, "end": 2.6},
    ]
    assert fewer == [
        [0.0, 0.2, "<c.hl>We</c> use OpenAI models."],
        [0.2, 0.5, "We <c.hl>use</c> OpenAI models."],
        [0.5, 1.1, "We use <c.hl>OpenAI</c> models."],
        [1.1, 1.7, "We use OpenAI <c.hl>models.</c>"],
    ]
    manifests = list((Path(queue_env["QUOTECLIP_STORAGE_DIR"])).glob("*.manifest.json"))
    finals = [json.loads(m.read_text()) for m in manifests if json.loads(m.read_text())["spec"]["quality"] == "final"]
    assert len(finals) == 1
    spec = finals[0]["spec"]
    assert spec["caption"] == "We use OpenAI models." and [w["text"] for w in spec["words"]] == [
        "We",
        "use",
        "OpenAI",
        "models.",
    ]


def test_edit_page_shows_the_previews_report_before_render_final(chromium, served, media, http_source) -> None:
    """A cut typed 100 ms into a word: the preview's report (GET /clips/{id}/report) says so under it, naming the
    word; a cut on the word's start reports nothing. Render final is offered with the preview, the report or not."""
    import json
    import urllib.parse

    from playwright.sync_api import sync_playwright

    (http_source.root / "ep.mp4").symlink_to(media(size="320x180", duration=6, gop=45))
    heard = [{"text": "we", "start": 1.0, "end": 1.2}, {"text": "use", "start": 1.2, "end": 1.5}]
    seen = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            for n, start in enumerate(("1.3", "1.2"), start=1):
                query = urllib.parse.urlencode(
                    {"source": http_source.url("ep.mp4"), "start": start, "end": "1.5", "words": json.dumps(heard)}
                )
                page.goto(f"{served}/edit?{query}")
                page.click("#preview")
                page.wait_for_function("() => window.previews >= 1", timeout=60_000)
                disabled = page.is_disabled("#render")  # (offered once the preview shows, its report or not)
                page.wait_for_function("() => window.reported >= 1", timeout=60_000)
                seen.append((page.inner_text("#report"), disabled))
                assert n == len(seen)
        finally:
            browser.close()
    assert seen[0][0] == "check: cut inside a word: the clip starts 100 ms into the word 'use' (1.2-1.5 s)", seen
    assert seen[1][0] == "check: nothing found", seen
    assert not seen[0][1] and not seen[1][1]


def test_pages_open_without_a_key_and_the_user_signs_in_on_the_page(
    chromium, workers, queue_env, media, http_source, tmp_path
) -> None:
    """With QUOTECLIP_API_KEYS set, the page shells open without a key (they hold no data) and every data route
    still needs one: the edit page asks for it on the page, keeps it for the tab (never in the address) and
    sends it with each call; a wrong key is asked for again."""
    import urllib.error
    import urllib.parse

    from playwright.sync_api import sync_playwright

    (http_source.root / "ep.mp4").symlink_to(media(size="320x180", duration=6, gop=45))
    workers.env["QUOTECLIP_API_KEYS"] = "k-secret"
    worker = workers.start(burst=False)
    try:
        with workers.serve() as base:
            for shell in ("/", "/edit", "/batch", "/pages.js"):
                with urllib.request.urlopen(base + shell) as shown:
                    assert shown.status == 200, shell  # no key needed
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(urllib.request.Request(base + "/previews", data=b"{}", method="POST"))
            refused.value.close()
            assert refused.value.code == 401  # the data routes still need one
            query = urllib.parse.urlencode({"source": http_source.url("ep.mp4"), "start": "1.0", "end": "2.5"})
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
                try:
                    page = browser.new_page()
                    page.goto(f"{base}/edit?{query}")
                    page.click("#preview")
                    page.wait_for_selector("#sign-in", timeout=30_000)
                    page.fill("#api-key", "not-the-key")
                    page.click("#sign-in button")
                    page.wait_for_selector("#sign-in", timeout=30_000)  # refused: asked again
                    again = page.inner_text("#sign-in")
                    page.fill("#api-key", "k-secret")
                    page.click("#sign-in button")
                    page.wait_for_function("() => window.previews >= 1", timeout=60_000)
                    page.click("#render")
                    page.wait_for_function("() => window.finalShown === true", timeout=120_000)
                    stored = page.evaluate("sessionStorage.getItem('quoteclip.key')")
                    address = page.url
                finally:
                    browser.close()
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        if worker.stdout:
            worker.stdout.close()
    assert "not accepted" in again and stored == "k-secret" and "k-secret" not in address
