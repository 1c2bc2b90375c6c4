"""A clip streamed while it renders: the render's fragmented copy (one encode, two muxers), its pieces, the relay
through Redis, and the answers of ``quoteclip serve`` to a signed link's viewers (progressive and HLS) against real
workers, checked by decoding what was streamed and what was stored."""

from __future__ import annotations

import dataclasses
import io
import os
import signal
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import psutil
import pytest
from mediacheck import assert_same_encode, boxes, frame_index, level, top_level_atoms
from starlette.requests import Request

from api.streams import PADDED_FRAGMENTS, PLAYER_BLOCK, ForPlayers, reads_a_head
from jobs.pipeline.produce import produce_clips
from quoteclip import links
from quoteclip.errors import BadInput
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from renderer import plan, render
from renderer.fragments import (
    LAST_FRAGMENT_FRAMES,
    STREAM_MOVFLAGS,
    Piece,
    Splitter,
    codecs,
    filler,
    fragment_frames,
    fragment_seconds,
)
from renderer.frames import first_frame_at
from renderer.head import progressive_head
from renderer.probe import probe
from storage import LocalStorage
from testkit.services import wait_for

RATE = Fraction(30000, 1001)
CHROME = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/142.0.0.0 Safari/537.36"
FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:140.0) Gecko/20100101 Firefox/140.0"
SAFARI = (
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/18.0 Safari/605.1.15"
)
SITE, SECRET = "site", "site-secret-0123456789"


class Collected:
    """A ClipStream that keeps what it is handed (the relay's place in the pipeline, without Redis)."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.pieces: list[Piece] = []
        self.ended: str | None = None
        self.fail_after = fail_after

    def piece(self, piece: Piece) -> None:
        if self.fail_after is not None and len(self.pieces) >= self.fail_after:
            raise ConnectionError("the relay went away")
        self.pieces.append(piece)

    def finished(self) -> None:
        self.ended = "finished"

    def failed(self, reason: str) -> None:
        self.ended = f"failed: {reason}"

    def data(self) -> bytes:
        return b"".join(p.data for p in self.pieces)


def decoded(data: bytes | Path, times: bool = True) -> dict[str, str]:
    """Per stream, a digest of every decoded frame's time and samples: what a player shows and plays (``decoded_digest``
    stream by stream: a fragmented file interleaves its video and sound by the fragment, a faststart one finer).
    Without ``times``: the frames and samples in their order, whatever their times."""
    import hashlib

    digests: dict[str, Any] = {}
    with av.open(io.BytesIO(data) if isinstance(data, bytes) else str(data)) as container:
        for frame in container.decode(*container.streams):
            digest = digests.setdefault("video" if isinstance(frame, av.VideoFrame) else "audio", hashlib.sha256())
            digest.update(f"{frame.time}".encode() if times else b"")
            for plane in frame.planes:
                digest.update(bytes(plane))
    return {name: digest.hexdigest() for name, digest in digests.items()}


def first_frames(data: bytes) -> dict[str, Any]:
    """What a player meets first in an MP4: its first video and audio frames' times, the first picture's gray mean
    (the top-left part, clear of the captions and the watermark) and the picture itself."""
    out: dict[str, Any] = {}
    with av.open(io.BytesIO(data)) as container:
        for frame in container.decode(*container.streams):
            if isinstance(frame, av.VideoFrame) and "video" not in out:
                gray = frame.to_ndarray(format="gray")
                out["video"] = float(frame.time or 0.0)
                out["corner"] = float(gray[: gray.shape[0] * 2 // 5, : gray.shape[1] * 2 // 5].mean())
                out["picture"] = frame.to_ndarray(format="rgb24").astype(np.int16)
            elif isinstance(frame, av.AudioFrame) and "audio" not in out:
                out["audio"] = float(frame.time or 0.0)
            if "video" in out and "audio" in out:
                return out
    return out


def quote(source: str, start: float = 1.068, end: float = 3.5) -> dict[str, Any]:
    return {"source": source, "start": start, "end": end, "caption": "one two three", "watermark": "StarZero"}


# ---- the render's fragmented copy (no services) -----------------------------------------------------------------


def test_a_streamed_render_tees_its_one_encode_into_the_clip_and_a_fragmented_copy(media) -> None:
    """The command as data: one output through the tee muxer, the stored clip a faststart MP4 as without a stream
    and the copy fragmented every 9 frames (not at keyframes: no keyframe option) with the stored clip's edit
    lists, dropped if its reader goes; the encoders keep their headers out of the bitstream as an MP4 output alone
    has them do; the source's decoder is left its automatic threads. A render without a stream is unchanged."""
    src = media(size="320x180", duration=4, gop=60)
    info = probe(str(src), first_frame=False)
    spec = build_spec({"source": str(src), "start": 1, "end": 2})
    alone = plan.build_command(spec, info, str(src), [], "/w/clip.mp4")
    target = plan.Target(spec, [], "/w/clip.mp4", stream="/w/str|eam.mp4")
    teed = plan.build_outputs([target], info, str(src))
    assert "tee" not in alone and "-movflags" in alone and "/w/clip.mp4" in alone
    assert alone[alone.index("-threads") + 1] == "1"  # (a final render of a small source: one decoder thread)
    assert teed[teed.index("-f", teed.index("-map")) + 1] == "tee" and "-movflags" not in teed
    outputs = teed[teed.index("-vframes") + 2]
    clip, copy = outputs.split("|[")
    assert clip == "[f=mp4:movflags=+faststart]/w/clip.mp4"
    # (30 fps; each fragment's samples in decode-time order)
    each = "frag_duration=300000:frag_interleave=1"
    assert copy == f"f=mp4:movflags={STREAM_MOVFLAGS}:{each}:onfail=ignore]/w/str\\|eam.mp4"
    assert "+delay_moov" in STREAM_MOVFLAGS and "frag_keyframe" not in STREAM_MOVFLAGS
    assert teed[teed.index("-flags:v") + 1] == "+global_header" and teed[teed.index("-flags:a") + 1] == "+global_header"
    assert "-threads" not in teed[: teed.index("-i")]


FLAGS = {"-hide_banner", "-nostdin", "-nostats", "-y"}  # ffmpeg's options without a value, as plan gives them


def ffmpeg_parts(argv: list[str]) -> dict[str, Any]:
    """An ffmpeg command as ``plan`` builds it, read back: each input's options and path, the filter graph, each
    output's maps, options and path, and the global options."""
    inputs: list[tuple[dict[str, str], str]] = []
    outputs: list[tuple[list[str], dict[str, str], str]] = []
    graph, options, maps, globals_ = "", {}, [], []
    at = 1
    while at < len(argv):
        arg = argv[at]
        if arg in FLAGS:
            globals_.append(arg)
            at += 1
        elif arg == "-i":
            inputs.append((options, argv[at + 1]))
            options, at = {}, at + 2
        elif arg == "-filter_complex":
            graph, at = argv[at + 1], at + 2
        elif arg == "-map":
            maps.append(argv[at + 1])
            at += 2
        elif arg.startswith("-") and (maps or not outputs):  # an input's or an output's
            assert arg not in options, f"{arg} twice"
            options[arg] = argv[at + 1]
            at += 2
        elif arg.startswith("-"):  # after the last output: the global options
            globals_ += [arg, argv[at + 1]]
            at += 2
        else:
            outputs.append((maps, options, arg))
            options, maps, at = {}, [], at + 1
    return {"inputs": inputs, "graph": graph, "outputs": outputs, "globals": globals_}


def tee_outputs(target: str) -> list[tuple[dict[str, str], str]]:
    """The tee muxer's outputs: each one's options and path (the paths here need no escapes)."""
    found = []
    for output in target.split("|"):
        options, _, path = output.removeprefix("[").partition("]")
        found.append(({"-" + k: v for k, v in (o.split("=", 1) for o in options.split(":"))}, path))
    return found


@pytest.mark.parametrize("size, where", [("320x180", "file"), ("3840x2160", "http")])
def test_a_streamed_render_writes_its_stored_clip_with_the_options_a_render_without_a_stream_has(
    size, where, media
) -> None:
    """The two commands as data, with the production encoder settings: the same inputs, filter graph, maps, poster
    and global options, and the stored clip encoded and muxed with the same options (the tee muxer's first output
    is the stored clip, with the mp4 muxer's options a render without a stream gives it). What differs: the tee
    muxer and its second output, the fragmented copy; the encoders asked for global headers, which an mp4 muxer
    alone has them give (its AVFMT_GLOBALHEADER); and the source's decoder threads (one without a stream for a
    source up to 1080p, ffmpeg's automatic threads with one), which decode the same frames."""
    width, height = (int(n) for n in size.split("x"))
    info = dataclasses.replace(
        probe(str(media(size="320x180", duration=4)), first_frame=False), width=width, height=height
    )
    source = "http://127.0.0.1:1/src.mp4" if where == "http" else "/src/source.mp4"
    spec = build_spec(quote(source) | {"watermark": {"text": "StarZero"}})
    overlays = [plan.Overlay("/w/caption.txt", 0, 560, sequence=True), plan.Overlay("/w/mark.pam", 1000, 20)]
    target = plan.Target(spec, overlays, "/w/clip.mp4", poster=("/w/poster.jpg", 0.0))
    alone = ffmpeg_parts(plan.build_outputs([target], info, source))
    teed = ffmpeg_parts(plan.build_outputs([dataclasses.replace(target, stream="/w/stream.mp4")], info, source))

    assert teed["graph"] == alone["graph"] and teed["globals"] == alone["globals"]
    decoder = dict(alone["inputs"][0][0])
    assert decoder.pop("-threads", None) == ("1" if where == "file" else None)
    assert teed["inputs"] == [(decoder, source), *alone["inputs"][1:]]
    (maps, options, clip), poster = alone["outputs"]
    assert teed["outputs"][1] == poster and teed["outputs"][0][0] == maps
    teed_options, tee = teed["outputs"][0][1:]
    (stored_options, stored), (copy_options, copy) = tee_outputs(tee)
    muxer = {k: options.pop(k) for k in ("-f", "-movflags")}
    assert (stored, stored_options) == (clip, muxer) == ("/w/clip.mp4", {"-f": "mp4", "-movflags": "+faststart"})
    assert teed_options == options | {"-f": "tee", "-flags:v": "+global_header", "-flags:a": "+global_header"}
    assert options["-vcodec"] == "libx264" and options["-preset"] == plan.PRESET and "-threads" not in options
    assert copy == "/w/stream.mp4" and copy_options["-f"] == "mp4" and copy_options["-onfail"] == "ignore"
    assert copy_options["-movflags"] == STREAM_MOVFLAGS and "-frag_duration" in copy_options


def test_the_splitter_cuts_a_fragmented_mp4_into_its_init_and_timed_fragments(media, ffmpeg_bin, tmp_path) -> None:
    """Fed in any split, the splitter gives the init segment (with its codecs) and each fragment whole, in order,
    each timed by its video track: together they are the file less what a player does not need."""
    src = media(size="320x180", fps="30000/1001", duration=4, gop=45)
    fragmented = tmp_path / "fragmented.mp4"
    subprocess.run(
        [ffmpeg_bin, "-hide_banner", "-loglevel", "error", "-i", str(src), "-c:v", "libx264", "-c:a", "aac"]
        + ["-movflags", STREAM_MOVFLAGS, "-frag_duration", "500000", "-f", "mp4", str(fragmented)],
        check=True,
    )
    data = fragmented.read_bytes()
    for step in (1, 7777, len(data)):
        splitter, pieces = Splitter(), []
        for at in range(0, len(data), step):
            pieces += splitter.feed(data[at : at + step])
        assert b"".join(p.data for p in pieces) == data  # (ffmpeg wrote no box a player can do without)
        assert [p.kind for p in pieces] == ["init"] + ["fragment"] * (len(pieces) - 1) and len(pieces) >= 9
        assert pieces[0].data[4:8] == b"ftyp" and pieces[1].data[4:8] == b"moof"
        assert pieces[0].codecs.startswith("avc1.") and pieces[0].codecs.endswith(",mp4a.40.2")
        timed = pieces[1:-1]  # (the last fragment may hold the sound's last samples only)
        assert timed[0].start == 0
        assert all(b.start == pytest.approx(a.start + a.seconds) for a, b in zip(timed, timed[1:], strict=False))
        assert all(p.seconds == pytest.approx(0.5, abs=0.04) for p in timed)
        assert sum(p.seconds for p in pieces[1:]) == pytest.approx(4, abs=0.05)
    assert codecs(pieces[0].data) == pieces[0].codecs


def streamed_fragments(
    src: str, start: float, end: float, ffmpeg_bin: str, tmp_path: Path
) -> tuple[list[Piece], list[int]]:
    """A render's fragmented copy of ``src`` from ``start`` to ``end``: its pieces, and each fragment's frames."""
    info = probe(src, first_frame=False)
    pieces: list[Piece] = []
    spec = build_spec({"source": src, "start": start, "end": end})
    render.render_clips([spec], src, info, tmp_path, ffmpeg_bin, 60, stream=pieces.append)
    frames = []
    for fragment in pieces[1:]:
        with av.open(io.BytesIO(pieces[0].data + fragment.data)) as alone:
            frames.append(sum(1 for p in alone.demux(video=0) if p.size))
    return pieces, frames


@pytest.mark.parametrize("fps", ["24", "30000/1001", "60"])
def test_a_streamed_renders_fragments_hold_9_frames_and_its_head_lists_the_first_ones(
    fps, media, ffmpeg_bin, tmp_path
) -> None:
    """A render's fragments, demuxed (no browser here): the first holds 9 frames at film and NTSC rates and a
    quarter of a second at 60 fps, every one but the last at least 9 (what Chromium's <video src> needs of a head
    before it presents the first frame: tests/test_streaming_browser.py plays one); a fragment lasts two seconds at
    most (a source under 4.5 fps). The head (the init segment with the first fragment's samples in its moov) lists
    exactly that fragment's frames and sound."""
    src = media(size="320x180", fps=fps, duration=3, gop=60)
    pieces, frames = streamed_fragments(str(src), 0.5, 2.9, ffmpeg_bin, tmp_path)
    assert frames[0] >= 9 and min(frames[:-1]) >= 9, frames
    assert frames[0] == fragment_frames(Fraction(fps), sum(frames)), frames  # (72 frames at 29.97: 10 a fragment)
    assert fragment_frames(Fraction(fps), 904) == (15 if fps == "60" else 9)
    assert fragment_seconds(Fraction(fps)) == pytest.approx(max(0.25, 9 / float(Fraction(fps))))
    assert fragment_seconds(Fraction(4)) == 2.0 and fragment_seconds(Fraction(15)) == pytest.approx(9 / 15)
    assert pieces[1].seconds == pytest.approx(frames[0] / float(Fraction(fps)), abs=0.002)
    head = progressive_head(pieces[0].data, pieces[1].data)
    with av.open(io.BytesIO(head)) as alone:
        listed = {s.type: s.frames for s in alone.streams}
        packets = [(p.stream.type, bytes(p)) for p in alone.demux() if p.size]
    with av.open(io.BytesIO(pieces[0].data + pieces[1].data)) as fragmented:
        fragment_packets = [(p.stream.type, bytes(p)) for p in fragmented.demux() if p.size]
    assert listed["video"] == frames[0] and listed["audio"] > 0
    assert sorted(packets) == sorted(fragment_packets)


@pytest.mark.parametrize("count", [72, 73, 74, 109])
def test_a_streams_last_fragment_holds_two_frames_or_more_and_its_sound(count, media, ffmpeg_bin, tmp_path) -> None:
    """A clip whose 9-frame fragments would end in one of one frame, or of its last sound alone, is cut in longer
    fragments: its last holds two frames or more and the sound past its last frame (a last fragment of one frame, or
    of sound alone, never ends in hls.js: tests/test_hls_players.py plays one). At 29.97 fps: 72 frames (8 × 9, its
    sound in a fragment of its own) in 10s, 73 in 10s, 74 in 9s, 109 (12 × 9 + 1; in 10s, 11s or 12s the sound
    would spill) in 13s. Every fragment holds pictures, every one but the last the same number."""
    rate = Fraction(30000, 1001)
    src = media(size="320x180", fps="30000/1001", duration=6, gop=45)
    start = 0.5
    end = round(float((first_frame_at(start, rate) + count) / rate) - 0.01, 3)
    assert first_frame_at(end, rate) - first_frame_at(start, rate) == count
    _, frames = streamed_fragments(str(src), start, end, ffmpeg_bin, tmp_path)
    assert sum(frames) == count and frames[-1] >= LAST_FRAGMENT_FRAMES, frames
    each = {72: 10, 73: 10, 74: 9, 109: 13}[count]
    assert set(frames[:-1]) == {each} and fragment_frames(rate, count) == each, frames


def test_a_head_is_made_of_an_init_segment_and_a_fragment_only() -> None:
    """The head is made of what ffmpeg's fragment muxer writes; anything else is named, and a progressive player is
    then sent the pieces as they are (still a stream it can play, only later)."""
    with pytest.raises(ValueError, match="ftyp and moov"):
        progressive_head(b"\0\0\0\x08free", b"")
    init = struct.pack(">I4s", 16, b"ftyp") + b"isom\0\0\0\0" + struct.pack(">I4s", 8, b"moov")
    with pytest.raises(ValueError, match="one moof and its mdat"):
        progressive_head(init, struct.pack(">I4s", 8, b"mdat"))

    def fragment(tfhd_flags: int, samples: int) -> bytes:
        tfhd = struct.pack(">I4sII", 16, b"tfhd", tfhd_flags, 1)
        trun = struct.pack(">I4sII", 16, b"trun", 0, samples)
        traf = struct.pack(">I4s", 8 + len(tfhd) + len(trun), b"traf") + tfhd + trun
        return struct.pack(">I4s", 8 + len(traf), b"moof") + traf + struct.pack(">I4s", 8, b"mdat")

    with pytest.raises(ValueError, match="count from its moof"):
        progressive_head(init, fragment(0, 1))  # (offsets from the fragment's start, or a base_data_offset)
    with pytest.raises(ValueError, match="run of 1000000 samples"):
        progressive_head(init, fragment(0x20000, 1_000_000))  # (refused before a million samples are listed)
    with pytest.raises(ValueError, match="outside its mdat"):
        progressive_head(init, fragment(0x20000, 1))  # (a sample's bytes must be in the fragment's mdat)
    for head in (True, False):  # (a player not given heads is sent the same)
        players = ForPlayers(head)
        assert players(init) == b""
        sent = players(b"\0\0\0\x08mdat")
        assert sent.startswith(init + b"\0\0\0\x08mdat") and len(sent) == PLAYER_BLOCK
        more = players(b"more")  # (a fragment of the first 3 s: it too ends on a block's end)
        assert more.startswith(b"more") and (len(sent) + len(more)) % PLAYER_BLOCK == 0 and players.rest() == b""
    alone = ForPlayers()
    assert alone(init) == b"" and alone.rest() == init  # (a stream that ended without a fragment)


def test_only_chromiums_player_is_given_a_head() -> None:
    """Chromium's demuxer waits for 21 frames after an init segment without samples; Firefox reads no fragment after
    a moov with samples: Chromium (Chrome, Edge) is given the head, every other player the pieces as they are."""
    edge = CHROME + " Edg/142.0.0.0"
    for agent, head in ((CHROME, True), (edge, True), (FIREFOX, False), (SAFARI, False), ("", False)):
        scope = {"type": "http", "headers": [(b"user-agent", agent.encode())] if agent else []}
        assert reads_a_head(Request(scope)) is head, agent


def test_a_filler_ends_the_bytes_so_far_on_a_blocks_end() -> None:
    for sent in (1, 100, 32760, 32761, 32767, 40000, 65535):
        pad = filler(sent, 32768)
        assert (sent + len(pad)) % 32768 == 0 and len(pad) >= 8
        assert pad[4:8] == b"free" and int.from_bytes(pad[:4], "big") == len(pad) and not pad[8:].strip(b"\0")
    assert filler(0, 32768) == filler(65536, 32768) == b""


@pytest.mark.integration  # two renders with the production encoder, frame by frame: not the everyday tier
def test_a_streamed_render_stores_the_clip_a_render_without_a_stream_stores(media, settings, tmp_path) -> None:
    """With the production encoder (x264 on its automatic threads), the stored clip of a streamed render has the key,
    the frame times, the sound (sample for sample) and the pictures of the clip rendered without a stream: each
    picture the same, or within what x264's frame threads now and then choose differently between any two renders
    of one clip (``assert_same_encode``); the stream decodes to the stored clip's frames and samples; its first frame
    is the source's frame at the quote's start with the caption and the watermark on it, and its picture and sound
    start at 0."""
    src = media(size="320x180", fps="30000/1001", duration=6, gop=45, pattern="levels", bframes=True)
    spec = build_spec(quote(str(src)) | {"watermark": {"text": "StarZero"}})
    plain = produce_clips([spec], settings, LocalStorage(settings.storage_dir))[0]
    stream = Collected()
    streamed = produce_clips([spec], settings, LocalStorage(tmp_path / "streamed"), stream=stream)[0]
    assert not streamed.cached and streamed.key == plain.key and stream.ended == "finished"
    stored = Path(str(streamed.path)).read_bytes()
    assert_same_encode(Path(str(streamed.path)), Path(str(plain.path)))
    assert top_level_atoms(Path(str(streamed.path)))[:3] == ["ftyp", "moov", "free"]  # faststart, as without
    assert decoded(stream.data()) == decoded(stored) and set(decoded(stored)) == {"video", "audio"}
    players = ForPlayers()
    progressive = b"".join(players(p.data) for p in stream.pieces)  # (a signed link's <video src> is sent this)
    assert decoded(progressive) == decoded(stored)
    assert first_frames(progressive)["video"] == 0 and first_frames(progressive)["audio"] == 0
    first, whole = first_frames(stream.data()), first_frames(stored)
    assert first["video"] == 0 and first["audio"] == 0
    assert frame_index(first["corner"], 32) == first_frame_at(1.068, RATE) == 32
    assert np.array_equal(first["picture"], whole["picture"])
    caption, mark = first["picture"][560:700, 200:1080], first["picture"][0:90, 1000:1280]
    flat = level(32)  # the source frame's gray everywhere the overlays are not
    assert float(np.abs(caption.mean(axis=2) - flat).mean()) > 10 and float(np.abs(mark.mean(axis=2) - flat).mean()) > 3
    timings = streamed.timings or {}
    assert timings["first_fragment_at"] >= timings["ffmpeg_started_at"]


def test_a_stream_that_fails_leaves_the_render_and_its_clip_alone(media, settings, tmp_path) -> None:
    """A relay that fails mid-render is told nothing more, the copy is read to its end all the same (ffmpeg never
    waits on it) and the clip is stored; a render that fails tells its stream why."""
    src = media(size="320x180", fps="30000/1001", duration=6, gop=45, pattern="levels")
    spec = build_spec(quote(str(src)))
    broken = Collected(fail_after=2)
    result = produce_clips([spec], settings, LocalStorage(settings.storage_dir), stream=broken)[0]
    assert len(broken.pieces) == 2 and result.path is not None and not result.cached
    assert probe(str(result.path), first_frame=False).duration == pytest.approx(2.432, abs=0.05)
    past = Collected()
    with pytest.raises(BadInput, match="after the end of the video"):
        produce_clips([build_spec(quote(str(src), 8, 9))], settings, LocalStorage(tmp_path / "x"), stream=past)
    assert past.pieces == [] and past.ended is not None and "after the end of the video" in past.ended


# ---- the relay (Redis) -----------------------------------------------------------------------------------------


def test_the_relay_holds_at_most_its_cap_of_a_long_clip(redis_url) -> None:
    """A 180 s clip's fragments (360 of 150 KB: 54 MB) relayed with QUOTECLIP_STREAM_MAX_MB at 8: the stream never
    holds much more than 8 MB in Redis; a viewer that keeps up reads every byte in order; a viewer that comes once
    the start is dropped is not let in (it waits for the stored clip); the stream ends with the clip's length and
    30 s more to live."""
    import asyncio

    from redis import Redis
    from redis.asyncio import Redis as AsyncRedis

    from jobs import relay
    from quoteclip import redis_keys

    job_id = "clip-" + "0" * 32
    connection = Redis.from_url(redis_url)
    cap = 8 * 1024**2
    writer = relay.Relay(connection, job_id, 180.0, cap)
    sent: list[bytes] = []
    peaks: list[int] = []
    joined = threading.Event()  # the first viewer is in before the fragments come (as a click's viewer is)

    async def still_rendering() -> bool:
        return True

    async def viewers() -> tuple[bytes, relay.Begun | None]:
        async with AsyncRedis.from_url(redis_url) as redis:
            begun = await relay.begin(redis, job_id, time.monotonic() + 30, still_rendering)
            joined.set()
            assert begun is not None
            read = b"".join([chunk async for chunk in relay.follow(redis, begun)])
            late = await relay.begin(redis, job_id, time.monotonic() + 0.5, still_rendering)
            return read, late

    def write() -> None:
        init = Piece("init", b"\x00\x00\x00\x08ftyp", codecs="avc1.64001f,mp4a.40.2")
        writer.piece(init)
        sent.append(init.data)
        joined.wait(30)
        for n in range(360):
            data = os.urandom(150_000)
            writer.piece(Piece("fragment", data, n * 0.5, 0.5))
            sent.append(data)
            peaks.append(int(connection.memory_usage(redis_keys.stream(job_id), samples=0) or 0))
            time.sleep(0.002)  # (a render's pace, much faster than real time)
        writer.finished()

    thread = threading.Thread(target=write)
    thread.start()
    read, late = asyncio.run(viewers())
    thread.join()
    writer.close()
    assert read == b"".join(sent) and len(read) > 50 * 1024**2
    print(f"relay: {len(read) / 1024**2:.1f} MB relayed, at most {max(peaks) / 1024**2:.2f} MB held (cap 8 MB)")
    assert max(peaks) <= cap * 1.1, f"the relay held {max(peaks) / 1024**2:.1f} MB"  # (the allocator's rounding)
    assert late is None
    assert 200_000 <= connection.pttl(redis_keys.stream(job_id)) <= 210_000
    connection.close()


# ---- a signed link's viewers, against `quoteclip serve` and real workers ---------------------------------------


@pytest.fixture
def api_settings() -> dict[str, str]:
    """More settings for the API (a test parametrizes it)."""
    return {}


@pytest.fixture
def worker_settings() -> dict[str, str]:
    """More settings for the worker (a test parametrizes it)."""
    return {}


def serving(workers, api_settings: dict[str, str]) -> Iterator[str]:
    """``quoteclip serve`` with a site key, answering on loopback (its address), until the generator is closed."""
    workers.env.update({"QUOTECLIP_SITE_KEYS": f"{SITE}:{SECRET}", "QUOTECLIP_LINK_HOLD": "60"})
    with workers.serve(api_settings) as base:
        yield base


def working(workers, worker_settings: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """A ``quoteclip worker`` waiting for jobs (registered and idle), until the generator is closed."""
    from rq import Worker

    from jobs.queue import connect

    workers.env.update(worker_settings)
    proc = workers.start(burst=False)
    connection = connect(Settings.from_env(workers.full_env()))

    def idle() -> bool:
        return [w.get_state() for w in Worker.all(connection=connection) if w.pid == proc.pid] == ["idle"]

    try:
        wait_for(idle, 60, "the worker")
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stdout:
            proc.stdout.close()
        connection.close()


@pytest.fixture
def stream_api(workers, api_settings) -> Iterator[str]:
    yield from serving(workers, api_settings)


@pytest.fixture
def worker(workers, stream_api, worker_settings, redis_url) -> Iterator[subprocess.Popen[str]]:
    yield from working(workers, worker_settings)


class Viewer(threading.Thread):
    """A player's request for a link, read as it comes: its status, headers, chunks, when its first chunk came,
    and how it ended (None: whole; else the error that cut it)."""

    def __init__(self, url: str, after: threading.Event | None = None, agent: str = "") -> None:
        super().__init__(daemon=True)
        self.url, self.after = url, after
        self.agent = agent  # its User-Agent (httpx's when empty)
        self.first = threading.Event()
        self.status = 0
        self.headers: dict[str, str] = {}
        self.chunks: list[bytes] = []
        self.cut: Exception | None = None

    def run(self) -> None:
        import httpx2 as httpx

        if self.after is not None:
            self.after.wait(120)
        try:
            agent = {"User-Agent": self.agent} if self.agent else {}
            with httpx.stream("GET", self.url, timeout=120, headers=agent) as response:
                self.status, self.headers = response.status_code, dict(response.headers)
                for chunk in response.iter_raw():
                    self.chunks.append(chunk)
                    self.first.set()
        except httpx.HTTPError as exc:
            self.cut = exc
        finally:
            self.first.set()

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)


def stored_clip(workers, key: str) -> bytes:
    """The stored clip (a stream ends once its render is checked, a moment before the clip is stored)."""
    path = Path(workers.env["QUOTECLIP_STORAGE_DIR"]) / f"{key}.mp4"
    wait_for(path.exists, 30, f"the clip {key} stored")
    return path.read_bytes()


def clip_key(workers, clip: dict[str, Any]) -> str:
    """The stored clip's key of a link's clip (the link's spec, as the API builds it)."""
    from jobs.queue import lookup

    spec = build_spec({**clip, "watermark": {"text": clip["watermark"]}})
    settings = Settings.from_env(workers.full_env()).for_queue()
    return lookup(spec, settings, LocalStorage(settings.storage_dir))[0]


def rendered_a_third(workers, clip: dict[str, Any]) -> None:
    """Until the render of ``clip`` is a third done (its job's progress), and still going."""
    from jobs.queue import connect, render_state

    connection = connect(Settings.from_env(workers.full_env()))
    job_id = f"clip-{clip_key(workers, clip)}"
    try:
        wait_for(lambda: render_state(job_id, connection).progress >= 35, 60, "a third of the render")
        assert render_state(job_id, connection).state == "active"
    finally:
        connection.close()


@pytest.mark.slow
def test_viewers_of_a_rendering_clip_join_its_stream_from_the_start(
    stream_api, worker, workers, media, http_source
) -> None:
    """Two viewers of a clip being rendered, the second joining once the first is playing: both get the stream from
    the clip's start, as a stream (no-store, no ETag, no length), and it decodes to the stored clip's frames and
    samples, from the source's frame at the start with picture and sound at 0: Chromium's <video src> its head (the
    first fragment's samples in the moov), Firefox's the init segment and the first fragment as they are, then both
    the same fragments. Once stored, the link answers the stored clip (ETag, a year's cache); a download asked while
    its clip renders gets the finished faststart MP4, never a stream."""
    (http_source.root / "lv.mp4").symlink_to(
        media(size="320x180", fps="30000/1001", duration=24, gop=45, pattern="levels")
    )
    clip = quote(http_source.url("lv.mp4"), 1.068, 21.0)
    url = stream_api + links.sign(clip, SITE, SECRET)
    first = Viewer(url, agent=CHROME)
    first.start()
    assert first.first.wait(60) and first.status == 200, first.headers
    rendered_a_third(workers, clip)  # the second comes once the stream is well under way
    second = Viewer(url, agent=FIREFOX)
    second.start()
    for viewer in (first, second):
        viewer.join(120)
        assert viewer.cut is None and viewer.status == 200, viewer.cut
        assert viewer.headers["cache-control"] == "no-store" and viewer.headers["transfer-encoding"] == "chunked"
        assert "etag" not in viewer.headers and "content-length" not in viewer.headers
        assert viewer.headers["x-stream-codecs"].startswith("avc1.") and viewer.headers["content-type"] == "video/mp4"
        assert viewer.headers["access-control-allow-origin"] == "*"
    assert len(second.chunks) > 3
    # the stream's first bytes end on a progressive player's block (a free box after them), and so do the first
    # fragments after them (the clip's first 3 s), not the others: Chromium's a head (the first fragment's samples in
    # the moov), Firefox's the pieces as they are
    top, plain = boxes(first.body), boxes(second.body)
    assert [kind for kind, _ in top[:6]] == ["ftyp", "moov", "mdat", "free", "moof", "mdat"]
    assert [kind for kind, _ in plain[:6]] == ["ftyp", "moov", "moof", "mdat", "free", "moof"]
    for found in (top, plain):
        frees = [end for kind, end in found if kind == "free"]
        assert all(end % PLAYER_BLOCK == 0 for end in frees) and 1 < len(frees) <= 1 + PADDED_FRAGMENTS, frees
    assert first.body[top[3][1] :] == second.body[plain[4][1] :]  # (the same fragments after the first)
    key = clip_key(workers, clip)
    stored = stored_clip(workers, key)
    assert decoded(first.body) == decoded(stored) == decoded(second.body)
    shown = first_frames(first.body)
    assert shown["video"] == 0 and shown["audio"] == 0 and frame_index(shown["corner"], 32) == 32
    import httpx2 as httpx

    after = httpx.get(url)
    assert after.status_code == 200 and after.content == stored and after.headers["etag"] == f'"{key}"'
    assert after.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert after.headers["content-length"] == str(len(stored))

    other = quote(http_source.url("lv.mp4"), 2.002, 12.0)
    download = Viewer(stream_api + links.sign(other, SITE, SECRET, variant="download"))
    download.start()
    download.join(120)
    assert download.status == 200 and download.headers["content-disposition"].startswith("attachment")
    assert download.headers["etag"] == f'"{clip_key(workers, other)}"'
    assert download.body == stored_clip(workers, clip_key(workers, other))
    saved = Path(workers.tmp) / "download.mp4"
    saved.write_bytes(download.body)
    assert top_level_atoms(saved)[:2] == ["ftyp", "moov"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("api_settings", "worker_settings"),
    [({"QUOTECLIP_STREAM": "false"}, {}), ({}, {"QUOTECLIP_STREAM": "false"})],
    ids=["api", "worker"],
)
def test_with_streaming_off_a_link_is_held_until_its_clip_is_stored(
    stream_api, worker, workers, media, http_source
) -> None:
    """QUOTECLIP_STREAM=false, for the API (its workers relaying) or for the workers (nothing relayed): the first
    request is held while the clip renders and answered with the stored clip, as a link was before streaming."""
    (http_source.root / "lv.mp4").symlink_to(
        media(size="320x180", fps="30000/1001", duration=6, gop=45, pattern="levels")
    )
    clip = quote(http_source.url("lv.mp4"))
    viewer = Viewer(stream_api + links.sign(clip, SITE, SECRET))
    viewer.start()
    viewer.join(120)
    key = clip_key(workers, clip)
    assert viewer.status == 200 and viewer.headers["etag"] == f'"{key}"' and viewer.cut is None
    assert viewer.headers["content-length"] == str(len(stored_clip(workers, key)))
    assert viewer.body == stored_clip(workers, key)


def horse_of(worker: subprocess.Popen[str], timeout: float = 30) -> psutil.Process:
    """The worker's work-horse rendering a clip: its child running ffmpeg (not its scheduler, a child too)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in psutil.Process(worker.pid).children():
            try:
                if any("ffmpeg" in " ".join(p.cmdline()) for p in child.children(recursive=True)):
                    return child
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.05)
    raise AssertionError("the worker has no work-horse running ffmpeg")


@pytest.mark.slow
def test_a_killed_worker_cuts_the_stream_and_the_retried_render_serves_the_clip(
    stream_api, worker, workers, media, http_source
) -> None:
    """The work-horse streaming a clip is killed outright: its viewer's answer is cut within seconds, without its
    last chunk (a player shows an error, not a clip ending early as if whole). The job is tried again from the
    start; asking again gets the clip whole (its new stream, or the stored clip), the stored clip's frames."""
    import httpx2 as httpx

    (http_source.root / "lv.mp4").symlink_to(
        media(size="320x180", fps="30000/1001", duration=24, gop=45, pattern="levels")
    )
    clip = quote(http_source.url("lv.mp4"), 1.068, 21.0)
    url = stream_api + links.sign(clip, SITE, SECRET)
    viewer = Viewer(url)
    viewer.start()
    assert viewer.first.wait(60) and viewer.status == 200
    horse_of(worker).send_signal(signal.SIGKILL)
    killed = time.monotonic()
    viewer.join(30)
    assert not viewer.is_alive() and isinstance(viewer.cut, httpx.RemoteProtocolError), viewer.cut
    cut = time.monotonic() - killed
    print(f"the stream was cut {cut:.1f} s after its work-horse was killed, {len(viewer.body)} bytes in")
    assert cut < 10
    # a player resuming the cut stream (its bytes past those it got) is refused: the render starts again, from the
    # clip's start, and no answer can continue the stream it had
    resumed = httpx.get(url, headers={"Range": f"bytes={len(viewer.body)}-"}, timeout=60)
    assert resumed.status_code == 503 and resumed.headers["retry-after"] == "2", resumed.text
    assert "play it from its start" in resumed.json()["detail"]
    again = Viewer(url)
    again.start()
    again.join(180)
    assert again.status == 200 and again.cut is None
    stored = stored_clip(workers, clip_key(workers, clip))
    assert decoded(again.body) == decoded(stored)


@pytest.mark.slow
def test_a_links_hls_playlist_plays_in_ffmpegs_hls_demuxer(
    stream_api, worker, workers, media, http_source, ffmpeg_bin, tmp_path
) -> None:
    """``…/index.m3u8`` of a clip being rendered: an event playlist of its fragments (no-store), read by ffmpeg's
    HLS demuxer while it grows until it ends; what it reads decodes to the stored clip's frames and samples. Once
    stored, the playlist is not there (404: the player plays the link itself); another variant has none."""
    import httpx2 as httpx

    (http_source.root / "lv.mp4").symlink_to(
        media(size="320x180", fps="30000/1001", duration=24, gop=45, pattern="levels")
    )
    clip = quote(http_source.url("lv.mp4"), 1.068, 21.0)
    link = links.sign(clip, SITE, SECRET)
    playlist = f"{stream_api}{link}/index.m3u8"
    first = httpx.get(playlist, timeout=120)
    assert first.status_code == 200 and first.headers["content-type"] == "application/vnd.apple.mpegurl"
    assert first.headers["cache-control"] == "no-store"
    lines = first.text.splitlines()
    assert "#EXT-X-PLAYLIST-TYPE:EVENT" in lines and '#EXT-X-MAP:URI="init.mp4"' in lines and "1.m4s" in lines
    assert "#EXT-X-ENDLIST" not in lines  # (the render goes on)
    out = tmp_path / "from-hls.mp4"
    # (``-prefer_x_start``: the demuxer then starts where the playlist's EXT-X-START says, its first fragment, as
    # Safari and hls.js do; by default it starts a live playlist three fragments from its end, wherever the render is)
    read = subprocess.run(
        [
            ffmpeg_bin,
            "-hide_banner",
            "-loglevel",
            "error",
            "-prefer_x_start",
            "1",
            "-i",
            playlist,
            "-c",
            "copy",
            "-f",
            "mp4",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert read.returncode == 0, read.stderr
    stored = stored_clip(workers, clip_key(workers, clip))
    # (ffmpeg's HLS demuxer leaves the init segment's edit lists out of the times it gives: its copy starts the
    # picture at the B-frames' delay and the sound with the encoder's priming; the frames and samples are the same)
    assert decoded(out, times=False)["video"] == decoded(stored, times=False)["video"]
    assert httpx.get(playlist).status_code == 404 or "#EXT-X-ENDLIST" in httpx.get(playlist).text
    assert httpx.get(f"{stream_api}{link}/999.m4s").status_code == 404
    poster = links.sign(clip, SITE, SECRET, variant="poster")
    assert httpx.get(f"{stream_api}{poster}/index.m3u8").status_code == 404
    assert httpx.get(f"{stream_api}{link[:-8]}AAAAAAAA.mp4/index.m3u8").status_code == 403


@pytest.mark.slow
def test_a_clicks_clip_is_relayed_and_a_batchs_is_not(workers, queue_env, media, http_source) -> None:
    """Only a click's clip is relayed while it renders (someone may be waiting to play it); a batch's clips, on the
    bulk queue, and a quote's profiles rendered together are not (nobody plays them while they render), and
    neither is anything with streaming off. (Each is asked for by a viewer here: a clip nobody asks for is not
    relayed, tests/test_relay_demand.py.)"""
    from redis import Redis

    from jobs.queue import enqueue_clip, enqueue_profiles
    from quoteclip import redis_keys

    (http_source.root / "lv.mp4").symlink_to(
        media(size="320x180", fps="30000/1001", duration=6, gop=45, pattern="levels")
    )
    settings = Settings.from_env(workers.full_env())
    click = enqueue_clip(build_spec(quote(http_source.url("lv.mp4"))), settings).job_id
    batch = enqueue_clip(build_spec(quote(http_source.url("lv.mp4"), 2, 4)), settings, bulk=True).job_id
    profiles = enqueue_profiles(
        [build_spec({**quote(http_source.url("lv.mp4"), 3, 4), "profile": p}) for p in ("landscape", "square")],
        settings,
    )
    relay = Redis.from_url(queue_env["QUOTECLIP_REDIS_URL"])
    for job_id in [click, batch, *(p.job_id for p in profiles)]:
        relay.set(redis_keys.stream_wanted(job_id), 1, px=60_000)  # (a viewer waits for each)
    workers.burst(1)
    assert relay.exists(redis_keys.stream(click)) == 1  # (kept for the clip's length and 30 s past its end)
    assert relay.exists(redis_keys.stream(batch)) == 0
    assert all(relay.exists(redis_keys.stream(p.job_id)) == 0 for p in profiles)
    relay.close()


@pytest.mark.slow
def test_a_worker_told_to_stop_cuts_the_stream_and_another_renders_the_clip(
    stream_api, workers, media, http_source, redis_url
) -> None:
    """A worker told to stop (SIGTERM, no grace left) while it streams a clip: its render is stopped and its job
    handed back, the viewer's answer is cut without its last chunk, and another worker renders the clip again from
    its start; asking again gets it whole."""
    import httpx2 as httpx

    (http_source.root / "lv.mp4").symlink_to(
        media(size="320x180", fps="30000/1001", duration=24, gop=45, pattern="levels")
    )
    clip = quote(http_source.url("lv.mp4"), 1.068, 21.0)
    url = stream_api + links.sign(clip, SITE, SECRET)
    first = working(workers, {"QUOTECLIP_SHUTDOWN_GRACE": "0"})
    stopping = next(first)
    try:
        viewer = Viewer(url)
        viewer.start()
        assert viewer.first.wait(60) and viewer.status == 200
        stopping.send_signal(signal.SIGTERM)
        told = time.monotonic()
        viewer.join(30)
        assert isinstance(viewer.cut, httpx.RemoteProtocolError), viewer.cut
        print(f"the stream was cut {time.monotonic() - told:.1f} s after its worker was told to stop")
        stopping.wait(60)
    finally:
        first.close()
    second = working(workers, {"QUOTECLIP_SHUTDOWN_GRACE": "120"})
    next(second)
    try:
        again = Viewer(url)
        again.start()
        again.join(180)
        assert again.status == 200 and again.cut is None
        assert decoded(again.body) == decoded(stored_clip(workers, clip_key(workers, clip)))
    finally:
        second.close()


APPLE = {
    "User-Agent": "AppleCoreMedia/1.0.0.21E236 (iPhone; U; CPU OS 17_4 like Mac OS X; en_us)",
    "X-Playback-Session-Id": "8C3E5A0B-1F2D-4C6A-9E7B-5D4C3B2A1908",
}


@pytest.mark.slow
def test_apples_player_is_sent_to_the_hls_playlist_then_gets_ranges_once_stored(
    stream_api, worker, workers, media, http_source
) -> None:
    """Apple's player, as an iPhone's browser asks a ``<video src>``: ``Range: bytes=0-1`` with its
    ``X-Playback-Session-Id``. For a clip being rendered it once got 200 chunked, the whole stream, no length (it
    plays no such answer); now a 302 to the link's HLS event playlist, whose map and segments load. Once the clip
    is stored, its probe gets ``206 bytes 0-1/N``, N the stored clip's size. WebKitGTK, which says "Safari" but
    sends neither, still gets the stream."""
    import httpx2 as httpx

    (http_source.root / "lv.mp4").symlink_to(
        media(size="320x180", fps="30000/1001", duration=24, gop=45, pattern="levels")
    )
    clip = quote(http_source.url("lv.mp4"), 1.068, 21.0)
    link = links.sign(clip, SITE, SECRET)
    probe = httpx.get(f"{stream_api}{link}", headers={**APPLE, "Range": "bytes=0-1"}, timeout=60)
    assert probe.status_code == 302, (probe.status_code, probe.headers)
    assert probe.headers["location"] == f"{link}/index.m3u8" and probe.headers["cache-control"] == "no-store"
    playlist = httpx.get(f"{stream_api}{probe.headers['location']}", headers=APPLE, timeout=120)
    assert playlist.status_code == 200 and playlist.headers["content-type"] == "application/vnd.apple.mpegurl"
    lines = playlist.text.splitlines()
    assert '#EXT-X-MAP:URI="init.mp4"' in lines and "1.m4s" in lines, lines
    for part in ("init.mp4", "1.m4s"):
        got = httpx.get(f"{stream_api}{link}/{part}", headers=APPLE, timeout=60)
        assert got.status_code == 200 and len(got.content) > 0, (part, got.status_code)
    # only the session header (its later requests carry other ranges): the playlist too
    session = httpx.get(f"{stream_api}{link}", headers={**APPLE, "Range": "bytes=0-65535"}, timeout=60)
    assert session.status_code in (302, 206), session.status_code
    key = clip_key(workers, clip)
    wait_for((Path(workers.env["QUOTECLIP_STORAGE_DIR"]) / f"{key}.mp4").exists, 120, "the clip stored")
    size = len(stored_clip(workers, key))
    stored = httpx.get(f"{stream_api}{link}", headers={**APPLE, "Range": "bytes=0-1"}, timeout=60)
    assert stored.status_code == 206 and stored.headers["content-range"] == f"bytes 0-1/{size}", stored.headers
    # WebKitGTK's <video src> of a new clip: no session header, no two-byte probe: the stream, as before
    other = links.sign(quote(http_source.url("lv.mp4"), 2.002, 6.0), SITE, SECRET)
    webkit = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/605.1.15 (KHTML, like Gecko) Safari/605.1.15"}
    with httpx.stream("GET", f"{stream_api}{other}", headers=webkit, timeout=60) as streamed:
        assert streamed.status_code == 200 and "location" not in streamed.headers


# Link-preview crawlers, as their makers document them: Meta's fetches an og:video's first bytes with a range of
# them; X's checks a player card's stream with HEAD and then fetches it. Neither sends cookies.
FACEBOOK = {"User-Agent": "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)"}
TWITTER = {"User-Agent": "Twitterbot/1.0"}


def test_link_preview_crawlers_get_answers_they_can_use(stream_api, worker, workers, media, http_source) -> None:
    """A new quote's link asked as the crawlers ask it: a range with an end (``bytes=0-524287``) of a clip being
    rendered is held until the clip is stored, then answered 206 with the clip's size (never the stream, whose
    length is not known). A HEAD of a link no one has asked says 404 "not rendered yet" (a HEAD never spends a
    render); a GET is held until stored, then the whole clip with its length, and a HEAD after it 200 with the
    length. The og:image (the link's poster) is a JPEG. A player's open range (``bytes=0-``) still gets the stream."""
    import httpx2 as httpx

    (http_source.root / "lv.mp4").symlink_to(
        media(size="320x180", fps="30000/1001", duration=12, gop=45, pattern="levels")
    )
    source = http_source.url("lv.mp4")
    meta = quote(source, 1.068, 4.0)
    ranged = httpx.get(
        f"{stream_api}{links.sign(meta, SITE, SECRET)}", headers={**FACEBOOK, "Range": "bytes=0-524287"}, timeout=60
    )
    assert ranged.status_code == 206, (ranged.status_code, ranged.headers, ranged.text[:200])
    size = len(stored_clip(workers, clip_key(workers, meta)))
    assert ranged.headers["content-range"] == f"bytes 0-{min(524287, size - 1)}/{size}", ranged.headers
    assert "transfer-encoding" not in ranged.headers and ranged.content[4:8] == b"ftyp"
    x = quote(source, 2.002, 5.0)
    card = f"{stream_api}{links.sign(x, SITE, SECRET)}"
    unasked = httpx.head(card, headers=TWITTER, timeout=60)  # (a HEAD never spends a render)
    assert unasked.status_code == 404, unasked.status_code
    fetched = httpx.get(card, headers=TWITTER, timeout=60)  # held until stored: no range, the whole clip
    stored = stored_clip(workers, clip_key(workers, x))
    assert fetched.status_code == 200 and "transfer-encoding" not in fetched.headers, fetched.headers
    assert fetched.content == stored
    from api.fanout import FINDING_KEPT

    time.sleep(FINDING_KEPT)  # (a link's look is shared by the requests of the second after it: the first HEAD's)
    checked = httpx.head(card, headers=TWITTER, timeout=60)
    assert checked.status_code == 200 and int(checked.headers["content-length"]) == len(stored), checked.headers
    poster = links.sign(quote(source, 3.003, 6.0), SITE, SECRET, variant="poster")
    image = httpx.get(f"{stream_api}{poster}", headers=FACEBOOK, timeout=60)
    assert image.status_code == 200 and image.headers["content-type"] == "image/jpeg", image.headers
    assert image.content[:2] == b"\xff\xd8"
    # a player's first request (Chromium's, Firefox's): an open range, the stream as before
    player = links.sign(quote(source, 4.004, 8.0), SITE, SECRET)
    with httpx.stream("GET", f"{stream_api}{player}", headers={"Range": "bytes=0-"}, timeout=60) as streamed:
        assert streamed.status_code == 200 and streamed.headers.get("transfer-encoding") == "chunked", streamed.headers
