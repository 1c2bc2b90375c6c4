"""Editors: the frame rule (a millisecond time selects one frame), instant previews (the source's own frames,
copied, with an edit list), their fallback, their cache, and POST /previews."""

from __future__ import annotations

import struct
from fractions import Fraction
from pathlib import Path

import av
import pytest
from fastapi.testclient import TestClient
from mediacheck import frame_index, frame_means, streams

from api import create_app
from jobs.pipeline.produce import produce_clip
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from renderer.frames import first_frame_at, frame_span
from storage import LocalStorage

RATES = {"29.97": ("30000/1001", Fraction(30000, 1001)), "25": ("25", Fraction(25))}


def clip(settings: Settings, **fields: object):  # type: ignore[no-untyped-def]
    return produce_clip(build_spec(fields), settings, LocalStorage(settings.storage_dir))


def test_the_frame_rule_on_paper() -> None:
    """A frame's own timestamp, rounded to the millisecond up or down, selects that frame."""
    ntsc = Fraction(30000, 1001)
    for n in range(0, 3000):
        assert first_frame_at(round(float(n / ntsc), 3), ntsc) == n
        assert first_frame_at(round(float(n / Fraction(25)), 3), Fraction(25)) == n
    assert first_frame_at(0.067, ntsc) == 2  # frame 2 starts at 66.733 ms: 67 ms rounds up, and still names it
    assert first_frame_at(0.0673, ntsc) == 3  # more than half a millisecond after it: the next frame
    span = frame_span(0.033, 0.1, ntsc)
    assert (span.first, span.last) == (1, 2)  # frame 3 starts at 100.1 ms, within half a millisecond of 0.1


@pytest.mark.slow
@pytest.mark.parametrize("rate", sorted(RATES))
@pytest.mark.parametrize("quality", ["final", "instant"])
def test_a_millisecond_time_selects_its_frame(media, settings, rate: str, quality: str) -> None:
    """At 29.97 fps frame n starts at n·1001/30000 s; its time rounded to the millisecond (up for n = 2 and 5,
    down for n = 1 and 3) must start the clip on frame n, rendered or copied; the answer names the frame."""
    text, exact = RATES[rate]
    src = media(size="160x90", fps=text, duration=4, gop=45, pattern="levels")
    for n in (1, 2, 3, 5, 47):
        start = round(float(n / exact), 3)
        end = round(float((n + 12) / exact), 3)
        result = clip(settings, source=str(src), start=start, end=end, quality=quality, fades=False)
        assert result.frames is not None and result.frames["first_frame"] == {"index": n, "time": start}
        assert result.frames["last_frame"]["index"] == n + 11
        means = frame_means(Path(str(result.path)), limit=None if quality == "final" else 3)
        assert frame_index(means[0], n) == n, (n, start, means[:3])
        if quality == "final":
            assert len(means) == 12  # n … n + 11: the end's frame is not in the clip


def _elst_media_time(path: Path) -> tuple[int, int]:
    """(media_time, media timescale) of the first track's edit list: where playback starts in its media."""
    data = path.read_bytes()
    elst = data.index(b"elst")
    version = data[elst + 4]
    entry = elst + 12
    media_time = struct.unpack(">q" if version else ">i", data[entry + (8 if version else 4) :][: 8 if version else 4])[
        0
    ]
    mdhd = data.index(b"mdhd", elst)
    scale_at = mdhd + 4 + 4 + (16 if data[mdhd + 4] else 8)
    return int(media_time), struct.unpack(">I", data[scale_at : scale_at + 4])[0]


def test_instant_preview_copies_the_source_packets(media, settings) -> None:
    """No re-encode: the preview's video packets are the source's own bytes, from the keyframe before the cut,
    and its edit list starts playback at the cut (the keyframe preroll hidden)."""
    src = media(size="320x180", duration=8, gop=90, pattern="levels")  # keyframes at 0, 3 and 6 s
    result = clip(settings, source=str(src), start=4.5, end=6.0, quality="instant", caption="copied, not encoded")
    assert result.preview == {"mode": "copy"} and (result.width, result.height) == (320, 180)
    out = Path(str(result.path))
    with av.open(str(src)) as c:
        source_packets = [bytes(p) for p in c.demux(video=0) if p.size]
    with av.open(str(out)) as c:
        copied = [bytes(p) for p in c.demux(video=0) if p.size]
    first = source_packets.index(copied[0])
    assert first == 90  # the keyframe at 3 s, before the cut at 4.5 s
    assert copied == source_packets[first : first + len(copied)] and len(copied) >= 90
    media_time, scale = _elst_media_time(out)
    assert abs(media_time / scale - 1.5) < 1 / 30  # playback starts 1.5 s after that keyframe
    assert frame_index(frame_means(out, limit=1)[0], 135) == 135  # what a player shows first: the frame at 4.5 s
    assert result.sidecars is not None and "vtt" in result.sidecars and "poster" not in result.sidecars


def _edits(path: Path) -> list[tuple[str, int, int, int]]:
    """(handler, segment duration in the movie's units, media time, media timescale) of each track's one edit,
    and the movie's timescale, read from the boxes by hand."""
    data = path.read_bytes()
    mvhd = data.index(b"mvhd")
    movie = struct.unpack(">I", data[mvhd + (24 if data[mvhd + 4] else 16) :][:4])[0]
    out = []
    for elst in [i for i in range(len(data)) if data.startswith(b"elst", i)][:2]:
        version, count = data[elst + 4], struct.unpack(">I", data[elst + 8 : elst + 12])[0]
        assert count == 1
        duration, media_time = struct.unpack(">Qq" if version else ">Ii", data[elst + 12 :][: 16 if version else 8])
        mdhd = data.index(b"mdhd", elst)
        scale = struct.unpack(">I", data[mdhd + (24 if data[mdhd + 4] else 16) :][:4])[0]
        hdlr = data.index(b"hdlr", mdhd)
        out.append((data[hdlr + 12 : hdlr + 16].decode(), duration, media_time, scale))
    return [(h, d, t, s) for h, d, t, s in out] + [("movie", movie, 0, 0)]


@pytest.mark.parametrize("bframes", [False, True])
@pytest.mark.parametrize(
    ("rate", "start", "end", "first", "count"),
    [("29.97", 12.4, 19.8, 372, 222), ("25", 4.5, 10.0, 113, 137)],
)
def test_an_instant_previews_edit_lists_play_exactly_the_cuts_frames(
    media, settings, rate: str, start: float, end: float, first: int, count: int, bframes: bool
) -> None:
    """The edit list starts at the cut's first frame, not at the cut time between two frames (a player shows
    the frame at or before an edit's start), and lasts exactly the cut's frames, not whole packets past them;
    the sound's edit starts and ends with it."""
    text, exact = RATES[rate]
    src = media(size="160x90", fps=text, duration=22, gop=60, pattern="levels", bframes=bframes)
    result = clip(settings, source=str(src), start=start, end=end, quality="instant")
    assert result.frames is not None
    assert (result.frames["first_frame"]["index"], result.frames["last_frame"]["index"]) == (first, first + count - 1)
    edits = _edits(Path(str(result.path)))
    (_, v_duration, v_time, v_scale), (_, a_duration, a_time, a_scale), (_, movie, _, _) = edits
    frame = v_scale / exact  # a frame in the video's media units
    delay = 2 * frame if bframes else 0  # x264's B-frames put the first frame 2 frames into the media's time
    assert v_time == (first - first // 60 * 60) * frame + delay  # the first frame's own time, after the keyframe
    assert v_duration == int(count / exact * movie) == a_duration  # the frames' time, in the movie's units
    assert [h for h, *_ in edits] == ["vide", "soun", "movie"] and a_time >= 0
    assert result.duration == round(float(count / exact), 3)


def test_instant_preview_falls_back_to_encoded_with_a_reason(media, settings, ffmpeg_bin, tmp_path) -> None:
    """A source whose codec an MP4 for browsers cannot carry (MPEG-4 Part 2) gets the encoded preview instead,
    and says why; the cut is the same."""
    import subprocess

    levels = media(size="160x90", duration=4, gop=30, pattern="levels")
    src = tmp_path / "mpeg4.mp4"
    subprocess.run(
        [ffmpeg_bin, "-loglevel", "error", "-i", str(levels), "-c:v", "mpeg4", "-q:v", "2", "-c:a", "copy", str(src)],
        check=True,
    )
    result = clip(settings, source=str(src), start=1.0, end=2.0, quality="instant")
    assert result.preview is not None and result.preview["mode"] == "encoded"
    assert "'mpeg4'" in result.preview["reason"]
    assert (result.width, result.height) == (640, 360)  # the encoded preview's size
    assert frame_index(frame_means(Path(str(result.path)), limit=1)[0], 30) == 30


def test_instant_previews_have_their_own_key_and_are_cached(media, settings) -> None:
    src = str(media(size="160x90", duration=4, gop=30, pattern="levels"))
    instant = clip(settings, source=src, start=1.0, end=2.0, quality="instant")
    final = clip(settings, source=src, start=1.0, end=2.0)
    assert instant.key != final.key and (final.width, final.height) == (1280, 720)
    again = clip(settings, source=src, start=1.0, end=2.0, quality="instant")
    assert again.cached and again.key == instant.key and again.preview == {"mode": "copy"}
    assert again.frames == instant.frames


def test_a_nudged_preview_of_a_remote_source_reuses_the_fetched_bytes(media, settings, http_source) -> None:
    """Editors nudge: the next preview is served from the bytes the first one fetched."""
    from dataclasses import replace

    (http_source.root / "ep.mp4").symlink_to(media(size="640x360", duration=20, gop=150))
    remote = replace(settings, source_hosts=("127.0.0.1",), allow_addresses=("127.0.0.1/32",))
    url = http_source.url("ep.mp4")
    first = clip(remote, source=url, start=11.0, end=14.0, quality="instant")
    nudged = clip(remote, source=url, start=11.1, end=14.1, quality="instant")
    assert first.preview == nudged.preview == {"mode": "copy"}
    assert first.source_bytes and nudged.source_bytes is not None
    assert nudged.source_bytes < 0.25 * first.source_bytes, (first.source_bytes, nudged.source_bytes)


def test_post_previews_answers_the_link_captions_and_frames(media, http_source, queue_env) -> None:
    (http_source.root / "lv.mp4").symlink_to(
        media(size="160x90", fps="30000/1001", duration=4, gop=45, pattern="levels")
    )
    client = TestClient(create_app(Settings.from_env(queue_env)), follow_redirects=False)
    body = {"source": http_source.url("lv.mp4"), "start": 0.067, "end": 1.068, "caption": "one two three four"}
    answer = client.post("/previews", json=body)
    assert answer.status_code == 200, answer.text
    got = answer.json()
    assert got["mode"] == "copy" and got["reason"] is None and got["frame_rate"] == "30000/1001"
    assert got["first_frame"] == {"index": 2, "time": 0.067} and got["last_frame"]["index"] == 31
    mp4 = client.get(got["link"], headers={"Range": "bytes=0-99"})  # a browser seeks only with Range support
    assert mp4.status_code == 206 and len(mp4.content) == 100
    vtt = client.get(got["vtt"])
    assert vtt.status_code == 200 and vtt.text.startswith("WEBVTT") and "one two three four" in vtt.text
    again = client.post("/previews", json=body | {"quality": "final"})  # a preview whatever the body says
    assert again.json()["cached"] is True and again.json()["id"] == got["id"]
    refused = client.post("/previews", json=body | {"callback_url": "https://example.com/hook"})
    assert refused.status_code == 422 and "callback_url" in refused.text
    bad = client.post("/previews", json=body | {"end": 0.01})
    assert bad.status_code == 422 and "end" in bad.text


def test_streams_of_an_instant_preview_are_playable(media, settings) -> None:
    src = media(size="320x180", duration=4, gop=30)
    result = clip(settings, source=str(src), start=1.0, end=3.0, quality="instant")
    info = streams(Path(str(result.path)))
    assert info["width"] == 320 and info["vcodec"] == "h264" and info["acodec"] == "aac"


def test_encoded_previews_read_a_pages_lower_resolution_format(media, settings, http_source) -> None:
    """A page offering 360p and 720p: the encoded preview decodes the 360p file, the final clip the 720p one."""
    from dataclasses import replace

    (http_source.root / "ep360.mp4").symlink_to(media(size="640x360", duration=6, gop=60, pattern="levels"))
    (http_source.root / "ep720.mp4").symlink_to(media(size="1280x720", duration=6, gop=60, pattern="levels"))
    (http_source.root / "page.html").write_text(
        "<html><body><video><source src='/ep720.mp4' type='video/mp4' res='720'>"
        "<source src='/ep360.mp4' type='video/mp4' res='360'></video></body></html>"
    )
    remote = replace(settings, source_hosts=("127.0.0.1",), allow_addresses=("127.0.0.1/32",))
    page = http_source.url("page.html")
    preview = clip(remote, source=page, start=1.0, end=2.0, quality="preview")
    assert http_source.requests.get("ep360.mp4", 0) >= 1 and http_source.requests.get("ep720.mp4", 0) == 0
    assert (preview.width, preview.height) == (640, 360)
    assert frame_index(frame_means(Path(str(preview.path)), limit=1)[0], 30) == 30
    final = clip(remote, source=page, start=1.0, end=2.0)
    assert http_source.requests.get("ep720.mp4", 0) >= 1 and (final.width, final.height) == (1280, 720)
