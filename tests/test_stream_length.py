"""A streamed clip's length, declared in its init segment before the first frame (``renderer.head.with_length``, from
the pipeline's ``steps.encode``): the ``mvhd``, ``tkhd`` and ``mdhd`` durations and a ``mehd``, the edit lists as
ffmpeg wrote them; the stream's head (``progressive_head``) keeps it; the stored clip is the one a render without a
stream stores. And Chromium, given the stream as the API sends it and held after a few fragments, shows the length
while the rest has not come."""

from __future__ import annotations

import io
import struct
import threading
from collections.abc import Generator
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import pytest
from test_streaming import Collected, quote

from jobs.pipeline.produce import produce_clips
from quoteclip.spec import build_spec
from renderer.fragments import children, find, timescale_of
from renderer.head import progressive_head, with_length
from renderer.probe import probe
from storage import LocalStorage

RATE = Fraction(30000, 1001)
FRAME = float(1 / RATE)


def duration_of(box: bytes, at: int) -> int:
    """A version 0 full box's 32-bit duration, ``at`` bytes past its version and flags."""
    assert box[8] == 0
    return int(struct.unpack(">I", box[12 + at : 16 + at])[0])


def moov_of(data: bytes) -> bytes:
    return next(box for kind, box in children(data, 0) if kind == b"moov")


@pytest.fixture
def streamed(media, settings, tmp_path) -> tuple[Collected, Path]:
    """A 7.9 s clip rendered by the pipeline with its stream collected: (the stream, the stored clip)."""
    src = media(size="320x180", fps="30000/1001", duration=12, gop=45, pattern="levels", bframes=True)
    stream = Collected()
    result = produce_clips(
        [build_spec(quote(str(src), 1.068, 9.0))], settings, LocalStorage(tmp_path / "s"), stream=stream
    )[0]
    assert stream.ended == "finished" and result.path is not None
    return stream, Path(str(result.path))


def test_the_init_segment_declares_the_clips_length(streamed) -> None:
    """Every duration of the init segment is the stored clip's length (within a frame): the movie's and each track's
    header, each track's media header, and a ``mehd`` for the fragments; the edit lists are the ones ffmpeg wrote
    (an edit to the end of the fragments, from the encoder's delay). A demuxer reading the stream, or only its
    head, reads the length."""
    stream, stored = streamed
    length = probe(str(stored), first_frame=False).duration
    moov = moov_of(stream.pieces[0].data)
    movie = timescale_of(next(find(moov, b"mvhd")))
    assert duration_of(next(find(moov, b"mvhd")), 12) / movie == pytest.approx(length, abs=FRAME)
    mehd = next(find(moov, b"mvex", b"mehd"))
    assert duration_of(mehd, 0) == duration_of(next(find(moov, b"mvhd")), 12)
    traks = list(find(moov, b"trak"))
    assert len(traks) == 2
    for trak in traks:
        assert duration_of(next(find(trak, b"tkhd")), 16) / movie == pytest.approx(length, abs=FRAME)
        mdhd = next(find(trak, b"mdia", b"mdhd"))
        assert duration_of(mdhd, 12) / timescale_of(mdhd) == pytest.approx(length, abs=FRAME)
        elst = next(find(trak, b"edts", b"elst"))
        assert struct.unpack(">I", elst[12:16])[0] == 1 and struct.unpack(">I", elst[16:20])[0] == 0  # (to the end)
    with av.open(io.BytesIO(stream.data()), "r") as whole:
        assert whole.duration is not None and whole.duration / 1e6 == pytest.approx(length, abs=FRAME)
    head = progressive_head(stream.pieces[0].data, stream.pieces[1].data)
    with av.open(io.BytesIO(head), "r") as alone:  # (the head alone: its first fragment's 9 frames, and the length)
        assert alone.duration is not None and alone.duration / 1e6 == pytest.approx(length, abs=FRAME)
        assert alone.streams.video[0].frames == 9


def test_a_length_is_refused_where_there_is_no_init_segment() -> None:
    with pytest.raises(ValueError, match="ftyp and moov"):
        with_length(b"\0\0\0\x08free", 1.0)


def held_stream(pieces: list[bytes], held: threading.Event, sent: int) -> Generator[str, None, None]:
    """A server answering the stream as the API does (chunked, no length), holding after ``sent`` pieces until
    ``held`` is set; its URL."""
    import http.server

    class Stream(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def chunk(self, data: bytes) -> None:
            if data:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        def do_GET(self) -> None:
            self.send_response(200)
            for name, value in (("Content-Type", "video/mp4"), ("Transfer-Encoding", "chunked")):
                self.send_header(name, value)
            self.send_header("Access-Control-Allow-Origin", "*")
            self.end_headers()
            try:
                for piece in pieces[:sent]:
                    self.chunk(piece)
                held.wait(60)
                for piece in pieces[sent:]:
                    self.chunk(piece)
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/clip.mp4"
    finally:
        held.set()
        server.shutdown()
        server.server_close()


@pytest.mark.slow
@pytest.mark.parametrize("held_after", ["head", "a third"])
def test_chromium_shows_the_length_of_a_clip_still_streaming(streamed, chromium, http_source, held_after) -> None:
    """Chromium's <video src> given the stream as the API sends Chromium (its head, then the fragments), held after
    its head (the init segment and the first fragment) or after a third of the clip: its duration is the clip's
    length, not Infinity, while the rest has not come; it presents the first frame from the head alone, and plays
    what has come."""
    from conftest import CHROMIUM_FLAGS
    from playwright.sync_api import sync_playwright
    from test_streaming_browser import WATCH, page_with_video

    from api.streams import ForPlayers

    stream, stored = streamed
    length = probe(str(stored), first_frame=False).duration
    players = ForPlayers(True)
    pieces = [players(p.data) for p in stream.pieces]
    sent = 2 if held_after == "head" else len(pieces) // 3
    held = threading.Event()
    streaming = held_stream(pieces, held, sent)
    url = next(streaming)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
            try:
                page = page_with_video(browser, http_source, {})
                video = page.locator("#v")
                video.evaluate(WATCH)
                video.evaluate("(v, src) => { v.src = src; }", url)
                page.wait_for_function("window.seen.first !== null", timeout=30_000)
                if held_after != "head":
                    page.wait_for_function("document.getElementById('v').currentTime > 0.5", timeout=30_000)
                seen: dict[str, Any] = video.evaluate(
                    "(v) => ({duration: String(v.duration), buffered: v.buffered.end(v.buffered.length - 1),"
                    " first: window.seen.first.mediaTime})"
                )
                assert not held.is_set()
            finally:
                browser.close()
    finally:
        streaming.close()
    assert seen["first"] == 0 and seen["buffered"] < length / 2, seen  # (still streaming)
    assert float(seen["duration"]) == pytest.approx(length, abs=FRAME), seen


@pytest.mark.slow
def test_chromium_does_not_seek_a_clip_still_streaming(streamed, chromium, http_source) -> None:
    """What Chromium's <video src> does with a seek while the stream has not ended (held after a third of the clip):
    an answer without a size and byte ranges is a "streaming" source to it, and a streaming source of a finite length
    has ``seekable`` [0, 0] (media/blink's ``WebMediaPlayerImpl::Seekable``): a seek within what has come goes to the
    start. (A size and ranges are not a way out for a stream: FFmpeg's MP4 demuxer, Chromium's, reads every fragment
    of a seekable input before its first frame.) docs/streaming.md says so; if Chromium changes, this test fails."""
    from conftest import CHROMIUM_FLAGS
    from playwright.sync_api import sync_playwright
    from test_streaming_browser import WATCH, page_with_video

    from api.streams import ForPlayers

    players = ForPlayers(True)
    pieces = [players(p.data) for p in streamed[0].pieces]
    held = threading.Event()
    streaming = held_stream(pieces, held, len(pieces) // 3)
    url = next(streaming)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
            try:
                page = page_with_video(browser, http_source, {})
                video = page.locator("#v")
                video.evaluate(WATCH)
                video.evaluate("(v, src) => { v.src = src; }", url)
                page.wait_for_function("document.getElementById('v').currentTime > 0.5", timeout=30_000)
                # the seek is asked while the stream is held; Chromium says where it landed once more comes, so the
                # stream goes on right after it is asked (as a render's next fragments come)
                before: dict[str, Any] = video.evaluate(
                    """(v) => {
                      const ranges = (r) => Array.from({length: r.length}, (_, i) => [r.start(i), r.end(i)]);
                      const before = {buffered: ranges(v.buffered), seekable: ranges(v.seekable)};
                      v.pause();
                      v.addEventListener("seeked", () => { window.landed = v.currentTime; }, {once: true});
                      v.currentTime = before.buffered[0][1] / 2;
                      return before;
                    }"""
                )
                assert not held.is_set()
                held.set()
                page.wait_for_function("window.landed !== undefined", timeout=30_000)
                seen = {**before, "landed": page.evaluate("window.landed")}
            finally:
                browser.close()
    finally:
        streaming.close()
    print(f"\nChromium, a stream held after a third: {seen}")
    assert seen["buffered"][0][1] > 1 and seen["seekable"] == [[0, 0]], seen
    assert seen["landed"] == 0, seen
