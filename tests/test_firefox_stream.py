"""A clip played in Firefox while it streams: the length shown from the start, what has come played, and a seek
within it. Firefox (Debian's ESR, headless) is driven over WebDriver BiDi, the remote protocol Firefox itself speaks
(a WebSocket, started with ``--remote-debugging-port``): Playwright's Firefox driver needs a Firefox of its own build,
and its BiDi channel asks for commands this ESR does not have (``emulation.setMediaFeaturesOverride``).

Firefox's demuxer, given a fragmented MP4 as it comes, looks ahead from the samples it hands on for the next keyframe
(``MP4TrackDemuxer::SetNextKeyFrameTime``), waiting for the bytes that hold it: a clip keyed once (x264 keys every 250
frames, so a clip under about 8 s has its first frame only) shows nothing in Firefox, not even its length, until its
stream ends. Keyed every second, it plays as it comes, a second behind what has come at most."""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import subprocess
import threading
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_stream_length import FRAME, streamed  # noqa: F401 (a fixture)
from test_streaming import SECRET, SITE, quote, serving, working

from quoteclip import links
from renderer.probe import probe

pytestmark = pytest.mark.slow

# The <video>'s state as the tests read it: its duration (a string: NaN and Infinity are not JSON), where it is,
# what it has (readyState), what it has buffered and what it can seek in, its error and the events it fired.
STATE = """(() => {
  const v = document.getElementById("v");
  const ranges = (r) => Array.from({length: r.length}, (_, i) => [r.start(i), r.end(i)]);
  return {duration: String(v.duration), time: v.currentTime, ready: v.readyState, buffered: ranges(v.buffered),
          seekable: ranges(v.seekable), error: v.error && v.error.code, events: window.seen || []};
})()"""
PAGE = """<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,">
<video id="v" muted autoplay></video><script>
window.seen = [];
for (const name of ["loadedmetadata", "playing", "waiting", "seeked", "ended", "error"])
  document.getElementById("v").addEventListener(name, () => window.seen.push(name));
</script>"""


class Firefox:
    """One headless Firefox and its first tab, over WebDriver BiDi: ``goto`` a page, ``value`` of a script there."""

    def __init__(self, command: str, profile: Path) -> None:
        profile.mkdir()
        (profile / "user.js").write_text(
            'user_pref("media.autoplay.default", 0);\n'
            'user_pref("browser.shell.checkDefaultBrowser", false);\n'
            'user_pref("datareporting.policy.dataSubmissionEnabled", false);\n'
        )
        self.process = subprocess.Popen(
            [command, "--headless", "--no-remote", "--remote-debugging-port=0", "--profile", str(profile)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.said: list[str] = []
        self.address = self._listening()
        self.asked = 0

    def _listening(self) -> str:
        """The BiDi address Firefox prints once it listens (within 60 s); its other lines are kept, and the rest of
        its output read (and dropped) so that it never blocks on a full pipe."""
        assert self.process.stderr is not None
        found: list[str] = []
        ready = threading.Event()

        def read() -> None:
            assert self.process.stderr is not None
            for line in self.process.stderr:
                if not found and (said := re.search(r"WebDriver BiDi listening on (ws://\S+)", line)):
                    found.append(said.group(1) + "/session")
                    ready.set()
                elif len(self.said) < 200:
                    self.said.append(line.rstrip())
            ready.set()

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        if not ready.wait(60) or not found:
            raise RuntimeError("Firefox did not start its remote agent: " + " | ".join(self.said[-5:]))
        return found[0]

    @contextlib.contextmanager
    def session(self) -> Iterator[Firefox]:
        from websockets.sync.client import connect

        with connect(self.address, max_size=None, proxy=None) as self.socket:
            self.command("session.new", {"capabilities": {}})
            self.context = self.command("browsingContext.getTree", {})["contexts"][0]["context"]
            yield self

    def command(self, method: str, params: dict[str, Any]) -> Any:
        self.asked += 1
        self.socket.send(json.dumps({"id": self.asked, "method": method, "params": params}))
        while True:
            answer = json.loads(self.socket.recv(timeout=60))
            if answer.get("id") == self.asked:
                if answer.get("type") == "error":
                    raise RuntimeError(f"{method}: {answer['error']}: {answer.get('message')}")
                return answer["result"]

    def goto(self, url: str) -> None:
        self.command("browsingContext.navigate", {"context": self.context, "url": url, "wait": "complete"})

    def value(self, script: str) -> Any:
        """The value of ``script`` (an expression; a promise is awaited) in the page, through JSON."""
        expression = f"(async () => JSON.stringify(await ({script})))()"
        target = {"context": self.context}
        result = self.command("script.evaluate", {"expression": expression, "target": target, "awaitPromise": True})
        if result["type"] == "exception":
            raise RuntimeError(f"{script[:60]!r}: {result['exceptionDetails']['text']}")
        text = result["result"].get("value")
        return None if text is None else json.loads(text)

    def wait(self, script: str, timeout: float) -> dict[str, Any]:
        """Until ``script`` is true in the page (else TimeoutError); the <video>'s state then."""
        deadline = time.monotonic() + timeout
        while not self.value(script):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{script!r} after {timeout:g} s: {self.value(STATE)}")
            time.sleep(0.05)
        return dict(self.value(STATE))

    def close(self) -> None:
        self.process.kill()
        self.process.wait(30)
        self.reader.join(10)  # (its output read to the end)
        if self.process.stderr is not None:
            self.process.stderr.close()


@pytest.fixture
def browser(firefox: str, tmp_path: Path) -> Iterator[Firefox]:
    pytest.importorskip("websockets", reason="the Firefox tests drive it with the websockets package")
    launched = Firefox(firefox, tmp_path / "profile")
    try:
        with launched.session() as driven:
            yield driven
    finally:
        launched.close()


def page(browser: Firefox, http_source: Any) -> None:
    (http_source.root / "page.html").write_text(PAGE)
    browser.goto(http_source.url("page.html"))


def play(browser: Firefox, url: str) -> None:
    browser.value(f"(document.getElementById('v').src = {json.dumps(url)}, 1)")


def paced_stream(
    pieces: list[bytes], first: int, go: threading.Event, pace: float, sent: list[int]
) -> Generator[str, None, None]:
    """A server answering the stream as the API does (chunked, no length): ``first`` pieces at once, then, once
    ``go`` is set, one every ``pace`` seconds; ``sent`` counts the pieces sent. Its URL."""

    class Stream(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            for name, value in (("Content-Type", "video/mp4"), ("Transfer-Encoding", "chunked")):
                self.send_header(name, value)
            self.end_headers()
            try:
                for n, piece in enumerate(pieces):
                    if n >= first:
                        go.wait(60)
                        time.sleep(pace)
                    if piece:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.flush()
                    sent[0] = n + 1
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stream)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/clip.mp4"
    finally:
        go.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def keyframes_every_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """Renders in this test key a frame every second of the clip (x264 otherwise keys one every 250 frames, and a
    short clip's first frame only): the encoder setting docs/streaming.md asks of a clip that streams to Firefox."""
    from renderer import plan, render

    built = plan.build_outputs

    def build(*args: Any, **kwargs: Any) -> list[str]:
        argv = built(*args, **kwargs)
        for at in reversed([n for n, arg in enumerate(argv) if arg == "-vcodec"]):
            argv[at:at] = ["-force_key_frames", "expr:gte(t,n_forced*1)"]
        return argv

    monkeypatch.setattr(render, "build_outputs", build)


def test_firefox_plays_a_streaming_clip_shows_its_length_and_seeks_in_what_came(
    keyframes_every_second,
    streamed,  # noqa: F811 (a fixture)
    browser,
    http_source,
) -> None:
    """The stream as the API sends Firefox (the init segment, then the fragments as they are) of a clip keyed every
    second, a third of it, then held: Firefox shows the clip's length, plays what has come and can seek in it
    (``seekable`` is what it has buffered); a seek there, the rest coming at the pace it plays, lands on its time
    before the stream ends, and it plays on to the clip's end. (Keyed once, as x264 keys a clip this short, it shows
    nothing, not even the length, until the stream ends: its demuxer waits for the bytes that hold the next
    keyframe.)"""
    from api.streams import ForPlayers

    stream, stored = streamed
    length = probe(str(stored), first_frame=False).duration
    players = ForPlayers(head=False)
    pieces = [players(p.data) for p in stream.pieces]
    sent, go = [0], threading.Event()
    streaming = paced_stream(pieces, len(pieces) // 3, go, 0.3, sent)
    url = next(streaming)
    try:
        page(browser, http_source)
        play(browser, url)
        shown = browser.wait("document.getElementById('v').currentTime > 0.5", 30)
        assert sent[0] == len(pieces) // 3 and not go.is_set(), (sent, shown)  # (held)
        assert float(shown["duration"]) == pytest.approx(length, abs=FRAME), shown
        assert shown["error"] is None and shown["buffered"][-1][1] < length / 2, shown
        assert len(shown["seekable"]) == 1 and shown["seekable"][0] == pytest.approx(shown["buffered"][-1], abs=1e-5)
        target = round(shown["buffered"][-1][1] / 2, 3)
        browser.value("document.getElementById('v').pause()")
        browser.value(f"(document.getElementById('v').currentTime = {target})")
        go.set()  # (the rest comes at about the pace it plays)
        seeked = browser.wait("window.seen.includes('seeked')", 20)
        assert sent[0] < len(pieces) - 3, (sent, seeked)  # (before the stream ends)
        assert seeked["time"] == pytest.approx(target, abs=0.001), seeked
        browser.value("document.getElementById('v').play().then(() => 1)")
        browser.wait(f"document.getElementById('v').currentTime > {target + 0.3}", 20)
        ended = browser.wait("window.seen.includes('ended') || window.seen.includes('error')", 60)
    finally:
        streaming.close()
    assert ended["error"] is None and "ended" in ended["events"], ended
    assert ended["time"] == pytest.approx(length, abs=0.1), ended


@pytest.fixture
def stream_api(workers) -> Iterator[str]:
    yield from serving(workers, {})


@pytest.fixture
def worker(workers, stream_api, redis_url) -> Iterator[subprocess.Popen[str]]:
    yield from working(workers, {})


KEYINT_SECONDS = 250 * 1001 / 30000  # x264's default keyframe interval at 29.97 fps: 8.34 s


def test_firefox_plays_a_links_stream_as_it_comes(browser, stream_api, worker, media, http_source) -> None:
    """A signed link of a 20 s clip not stored, given to Firefox's <video>: it shows the clip's length and plays
    with about a second of the clip come, not once the render has passed the clip's second keyframe, and plays to
    the end. (Measured here at 1080p: playing with 1.15 s buffered, 2.3 s after its src was set, keyed every
    second; with 8.66 s buffered, 13.6 s after, keyed every 250 frames.)"""
    (http_source.root / "src.mp4").symlink_to(
        media(size="1280x720", fps="30000/1001", duration=24, gop=45, pattern="levels")
    )
    clip = quote(http_source.url("src.mp4"), 1.068, 21.0)
    url = stream_api + links.sign(clip, SITE, SECRET)
    page(browser, http_source)
    play(browser, url)
    first = browser.wait("document.getElementById('v').readyState >= 2 || window.seen.includes('error')", 90)
    length = 21.0 - 1.068
    assert first["error"] is None and float(first["duration"]) == pytest.approx(length, abs=0.1), first
    assert first["buffered"][-1][1] < KEYINT_SECONDS - 0.3, first  # (before the render reached 250 frames)
    ended = browser.wait("window.seen.includes('ended') || window.seen.includes('error')", 120)
    assert ended["error"] is None and ended["events"][-1] == "ended", ended
    assert ended["time"] == pytest.approx(length, abs=0.1), ended
