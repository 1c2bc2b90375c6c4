"""A clip played in Chromium while it renders: a signed link's ``<video>`` on another origin (its progressive stream,
and its HLS playlist), the page at ``/`` (its Play button), and a worker killed mid-stream. Headless Chromium
(Debian's package) driven by Playwright, against ``quoteclip serve`` and a worker. The source's frames are each one
gray level, so the first frame Chromium presents names itself."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest
from conftest import CHROMIUM_FLAGS
from mediacheck import frame_index
from test_streaming import SECRET, SITE, horse_of, quote, serving, working

from quoteclip import links
from renderer.frames import first_frame_at

pytestmark = pytest.mark.slow

# What a <video> does once given its source: the first frame Chromium presents (requestVideoFrameCallback: its media
# time, and its gray level, top left, clear of the caption and the watermark), and its events (waiting after it
# played: a stall), until it ends or fails.
# the gray level of the picture the <video> shows, its top left (a JavaScript function of the video)
GRAY = """((v) => {
    const c = document.createElement("canvas");
    c.width = 32; c.height = 18;
    const g = c.getContext("2d");
    g.drawImage(v, 0, 0, v.videoWidth * 0.4, v.videoHeight * 0.4, 0, 0, 32, 18);
    const d = g.getImageData(0, 0, 32, 18).data;
    let sum = 0;
    for (let i = 0; i < d.length; i += 4) sum += 0.299 * d[i] + 0.587 * d[i + 1] + 0.114 * d[i + 2];
    return sum / (d.length / 4);
  })"""
WATCH = """(v) => {
  const seen = {events: [], waits: 0, first: null};
  window.seen = seen;
  const t0 = performance.now();
  for (const name of ["playing", "waiting", "ended", "error"]) v.addEventListener(name, () => {
    seen.events.push(name);
    if (name === "waiting" && seen.events.includes("playing")) seen.waits++;
    if (name === "ended") seen.end = v.currentTime;
  });
  v.requestVideoFrameCallback((now, frame) => {
    seen.first = {gray: GRAY(v), mediaTime: frame.mediaTime, after: (frame.presentationTime - t0) / 1000};
  });
}""".replace("GRAY", GRAY)
AT_ZERO = """async (v) => {
  v.pause();
  const sought = new Promise((done) => v.addEventListener("seeked", done, {once: true}));
  v.currentTime = 0;
  await sought;
  return GRAY(v);
}""".replace("GRAY", GRAY)
START = 1.068  # source frame 32 at 30000/1001 fps


@pytest.fixture
def stream_api(workers) -> Iterator[str]:
    yield from serving(workers, {})


@pytest.fixture
def worker(workers, stream_api, redis_url) -> Iterator[subprocess.Popen[str]]:
    yield from working(workers, {})


@pytest.fixture
def browser(chromium) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def levels(media, http_source) -> str:
    (http_source.root / "lv.mp4").symlink_to(
        media(size="320x180", fps="30000/1001", duration=24, gop=45, pattern="levels")
    )
    return http_source.url("lv.mp4")


def page_with_video(browser: Any, http_source: Any, answers: dict[str, dict[str, str]]) -> Any:
    """A page on another origin (the source server's) with a muted, autoplaying <video>; each answer's headers kept
    by its URL."""
    (http_source.root / "page.html").write_text(
        '<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,">'
        '<video id="v" muted autoplay playsinline crossorigin="anonymous" width="320"></video>'
    )
    page = browser.new_page()
    page.on("response", lambda response: answers.__setitem__(response.url, response.headers))
    page.goto(http_source.url("page.html"))
    return page


def played(page: Any, src: str, timeout: float = 90) -> dict[str, Any]:
    """Give the <video> its source and watch it to its end (or its error)."""
    video = page.locator("#v")
    video.evaluate(WATCH)
    video.evaluate("(v, src) => { v.src = src; }", src)
    page.wait_for_function(
        "window.seen.events.includes('ended') || window.seen.events.includes('error')", timeout=timeout * 1000
    )
    return dict(page.evaluate("window.seen"))


def test_a_link_plays_from_its_stream_while_it_renders(browser, stream_api, worker, levels, http_source) -> None:
    """A <video src> of a clip not stored plays its stream (no-store, no ETag): the first frame Chromium presents is
    the source's frame at the quote's start, at media time 0, and it plays through to the clip's end without a
    stall (the render runs faster than real time)."""
    clip = quote(levels, START, 9.0)
    url = stream_api + links.sign(clip, SITE, SECRET)
    answers: dict[str, dict[str, str]] = {}
    seen = played(page_with_video(browser, http_source, answers), url)
    assert seen["events"][-1] == "ended", seen
    assert answers[url]["cache-control"] == "no-store" and "etag" not in answers[url], answers[url]
    first = seen["first"]
    assert first is not None and first["mediaTime"] == 0
    assert frame_index(first["gray"], 32) == first_frame_at(START, frame_rate()) == 32, first
    assert seen["waits"] == 0 and seen["end"] == pytest.approx(9.0 - START, abs=0.1), seen


def test_a_links_hls_playlist_plays_in_chromium(browser, stream_api, worker, levels, http_source) -> None:
    """Chromium (Debian's build plays HLS itself) plays a clip's HLS playlist, as its stream left it once ended
    (Chromium's own HLS player does not follow an event playlist that grows: it stops at the last segment it was
    given, or fails; ffmpeg's HLS demuxer follows it while it grows, tests/test_streaming.py): the first frame is the
    source's frame at the quote's start, and it plays to the end."""
    import httpx2 as httpx

    clip = quote(levels, START, 9.0)
    link = stream_api + links.sign(clip, SITE, SECRET)
    streamed = httpx.get(link, timeout=120)  # the clip rendered, and streamed, once
    assert streamed.status_code == 200 and streamed.headers["cache-control"] == "no-store"
    playlist = link + "/index.m3u8"
    answers: dict[str, dict[str, str]] = {}
    page = page_with_video(browser, http_source, answers)
    assert page.evaluate("document.createElement('video').canPlayType('application/vnd.apple.mpegurl')") != ""
    seen = played(page, playlist)
    assert seen["events"][-1] == "ended", seen
    assert answers[playlist]["content-type"] == "application/vnd.apple.mpegurl"
    assert frame_index(seen["first"]["gray"], 32) == 32, seen
    assert seen["end"] == pytest.approx(9.0 - START, abs=0.15), seen


def test_the_pages_play_button_plays_the_stream(browser, stream_api, worker, levels) -> None:
    """The page at / (no API key needed here): Play posts the clip and plays it while it renders, from its stream
    (GET /clips/{id}/stream, through Media Source Extensions): the first frame is the source's frame at the quote's
    start, and it plays to the end."""
    page = browser.new_page()
    asked: list[tuple[str, int]] = []
    page.on("response", lambda response: asked.append((response.url, response.status)))
    page.goto(f"{stream_api}/?source={levels}&start={START}&end=9&brand=StarZero")
    page.locator("#player").evaluate(WATCH)
    page.click("#play")
    page.wait_for_function(  # a function, not an expression: the page's policy allows no eval
        "() => window.seen.events.includes('ended') || window.seen.events.includes('error')", timeout=90_000
    )
    seen = page.evaluate("window.seen")
    assert seen["events"][-1] == "ended", seen
    streams = [
        status for url, status in asked if url.startswith(f"{stream_api}/clips/clip-") and url.endswith("/stream")
    ]
    assert streams == [200], asked
    # Playback starts at the clip's start (a loaded machine's player may drop its first few frames: seen once in CI,
    # presented from 0.1001 s), and the picture at media time 0, drawn once the paused player has sought there, is
    # the quote's first frame. (A picture drawn in the frame callback while playing can already be the next frame on
    # a loaded machine: seen once in CI, frame 33 drawn for media time 0.)
    assert seen["first"]["mediaTime"] <= 0.2, seen
    assert frame_index(page.locator("#player").evaluate(AT_ZERO), 32) == 32, seen
    assert page.inner_text("#stage") == "finished" and not page.locator("#play").is_disabled()


def test_a_killed_worker_stops_the_player_with_an_error(browser, stream_api, worker, levels, http_source) -> None:
    """The work-horse streaming a clip to a <video> is killed: the player ends with an error within seconds,
    rather than waiting for more (its answer was cut without its last chunk)."""
    clip = quote(levels, START, 21.0)
    url = stream_api + links.sign(clip, SITE, SECRET)
    answers: dict[str, dict[str, str]] = {}
    page = page_with_video(browser, http_source, answers)
    video = page.locator("#v")
    video.evaluate(WATCH)
    video.evaluate("(v, src) => { v.src = src; }", url)
    page.wait_for_function("window.seen.first !== null", timeout=60_000)
    horse_of(worker).kill()
    killed = time.monotonic()
    page.wait_for_function(
        "window.seen.events.includes('ended') || window.seen.events.includes('error')", timeout=60_000
    )
    seen = page.evaluate("window.seen")
    assert seen["events"][-1] == "error", seen
    print(f"the player stopped with an error {time.monotonic() - killed:.1f} s after the work-horse was killed")
    assert time.monotonic() - killed < 30


# A page for Firefox, which Playwright does not drive here: it plays the link named after its # and posts what it
# saw (its events, where playback ended, the first frame's media time) to the server that gave it.
FIREFOX_PAGE = """<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,">
<video id="v" muted autoplay></video><script>
const v = document.getElementById("v"), seen = {events: [], first: null};
let sent = false;
function report() {
  if (sent) return; sent = true;
  seen.end = v.currentTime; seen.error = v.error && v.error.code;
  fetch("/report", {method: "POST", body: JSON.stringify(seen)});
}
for (const name of ["playing", "waiting", "ended", "error"]) v.addEventListener(name, () => {
  seen.events.push(name);
  if (name === "ended" || name === "error") report();
});
v.requestVideoFrameCallback((now, frame) => { seen.first = frame.mediaTime; });
setTimeout(report, 60000);
v.src = decodeURIComponent(location.hash.slice(1));
</script>"""


def test_a_link_plays_to_its_end_in_firefox_while_it_renders(
    firefox, stream_api, worker, levels, redis_url, tmp_path
) -> None:
    """Firefox (Debian's ESR, headless) given a link of a clip not stored plays its stream to the clip's end. It is
    sent the init segment and the fragments as they are: it reads no fragment after a moov that lists samples
    (given Chromium's head, the first fragment's samples in the moov, it played those 9 frames and ended)."""
    import http.server
    import json
    import queue
    import threading
    from urllib.parse import quote as escaped

    from redis import Redis

    from api.links.metrics import REQUESTS

    clip = quote(levels, START, 9.0)
    url = stream_api + links.sign(clip, SITE, SECRET)
    reports: queue.Queue[dict[str, Any]] = queue.Queue()

    class Page(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = FIREFOX_PAGE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            reports.put(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "user.js").write_text(
        'user_pref("media.autoplay.default", 0);\n'
        'user_pref("browser.shell.checkDefaultBrowser", false);\n'
        'user_pref("datareporting.policy.dataSubmissionEnabled", false);\n'
    )
    counts = Redis.from_url(redis_url)
    streamed = f"{SITE}|clip|streamed"
    before = int(counts.hget(REQUESTS, streamed) or 0)
    page = f"http://127.0.0.1:{server.server_address[1]}/page.html#{escaped(url, safe='')}"
    browser = subprocess.Popen(
        [firefox, "--headless", "--no-remote", "--profile", str(profile), page],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        seen = reports.get(timeout=120)
    finally:
        browser.kill()
        browser.wait(30)
        server.shutdown()
        server.server_close()
    assert int(counts.hget(REQUESTS, streamed) or 0) == before + 1  # (its answer was the stream)
    counts.close()
    assert seen["events"][-1] == "ended" and seen["error"] is None, seen
    assert seen["first"] == 0 and seen["end"] == pytest.approx(9.0 - START, abs=0.1), seen


def frame_rate() -> Any:
    from fractions import Fraction

    return Fraction(30000, 1001)


@pytest.mark.parametrize("fps", ["24", "30000/1001"])
def test_chromium_presents_a_streams_first_frame_from_its_first_fragment_alone(
    fps, browser, media, ffmpeg_bin, http_source, tmp_path
) -> None:
    """A stream as the API sends it (its head: the init segment with the first fragment's samples in its moov, then
    the fragment's mdat, padded to a player's block), held after its first fragment of 9 frames: Chromium presents
    the first frame while the rest is held, so the first frame never waits for the next fragment's encode. (Sent
    the init segment and the first fragment as they are, it waits.)"""
    import http.server
    import threading

    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    from api.streams import ForPlayers
    from quoteclip.spec import build_spec
    from renderer import render
    from renderer.fragments import Piece
    from renderer.probe import probe

    src = media(size="640x360", fps=fps, duration=6, gop=150, pattern="levels")
    spec = build_spec({"source": str(src), "start": 1.5, "end": 5.5, "caption": "An exact quote."})
    pieces: list[Piece] = []
    render.render_clips(
        [spec], str(src), probe(str(src), first_frame=False), tmp_path, ffmpeg_bin, 60, stream=pieces.append
    )
    held, sent_rest = threading.Event(), threading.Event()

    class Stream(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def do_GET(self) -> None:
            self.send_response(200)
            for name, value in (("Content-Type", "video/mp4"), ("Transfer-Encoding", "chunked")):
                self.send_header(name, value)
            self.send_header("Access-Control-Allow-Origin", "*")
            self.end_headers()
            padded = ForPlayers()
            try:
                for piece in pieces[:2]:
                    if data := padded(piece.data):
                        self.chunk(data)
                held.wait(20)
                sent_rest.set()
                for piece in pieces[2:]:
                    self.chunk(padded(piece.data))
                if held_init := padded.rest():
                    self.chunk(held_init)
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        page = page_with_video(browser, http_source, {})
        video = page.locator("#v")
        video.evaluate(WATCH)
        video.evaluate("(v, src) => { v.src = src; }", f"http://127.0.0.1:{server.server_address[1]}/clip.mp4")
        try:
            page.wait_for_function("window.seen.first !== null", timeout=10_000)
            presented_while_held = not sent_rest.is_set()
        except PlaywrightTimeout:
            presented_while_held = False
        finally:
            held.set()
        first = page.evaluate("window.seen.first")
        assert presented_while_held, "Chromium waited for the stream's second fragment"
        expected = first_frame_at(1.5, Fraction(fps))
        assert first["mediaTime"] == 0 and frame_index(first["gray"], expected) == expected, first
    finally:
        server.shutdown()
        server.server_close()
