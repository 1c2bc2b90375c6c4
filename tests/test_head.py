"""The stream's head (``renderer/head.py``): the init segment and the first fragment of a fragmented copy made one
MP4 with the fragment's samples in its ``moov``. Fuzzed over the layouts ffmpeg's fragment muxer writes (frame
rates, sizes, GOPs, B-frames, sound or none, where the clip starts and how long it is, fragment lengths, movie and
track timescales), each cut by the splitter: the head's boxes walk cleanly, its tables agree with one another and
with the fragment, its edit lists last to its samples' end, and it decodes to the first fragment's frames and
sound at the times the fragments decode to."""

from __future__ import annotations

import hashlib
import io
import math
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from mediacheck import boxes

from renderer.fragments import STREAM_MOVFLAGS, Piece, Splitter
from renderer.head import progressive_head

# The handful of sources the layouts are cut from (each encoded once a session by conftest's ``media``): frame rates
# from under 5 fps to 60, all-intra to long GOPs, with and without B-frames and sound.
SOURCES = [
    {"fps": "30000/1001", "size": "160x90", "gop": 12, "audio": True, "bframes": True},
    {"fps": 24, "size": "176x144", "gop": 48, "audio": True, "bframes": False},
    {"fps": 60, "size": "128x72", "gop": 30, "audio": False, "bframes": True},
    {"fps": 25, "size": "96x64", "gop": 1, "audio": True, "bframes": False},
    {"fps": 12, "size": "64x48", "gop": 6, "audio": True, "bframes": True},
    {"fps": 4, "size": "160x90", "gop": 4, "audio": True, "bframes": False},
]
SOURCE_SECONDS = 3
CONTAINERS = {"moov", "trak", "mdia", "minf", "stbl", "edts", "dinf", "mvex", "udta"}


# ---- the layouts: a source's packets, cut and muxed as the stream's copy is ------------------------------------


def fragmented(
    source: Path,
    start_key: int,
    frames: int,
    fragment_us: int,
    movie_timescale: int = 1000,
    video_timescale: int = 0,
) -> bytes:
    """``frames`` video packets of ``source`` from its keyframe ``start_key`` (and the sound they span), their times
    from the keyframe's, muxed into a fragmented MP4 with the stream's flags (``STREAM_MOVFLAGS``) and fragments of
    ``fragment_us``: a clip's copy as the render writes it, at layouts the render's own settings do not reach."""
    options = {"movflags": STREAM_MOVFLAGS, "frag_duration": str(fragment_us), "movie_timescale": str(movie_timescale)}
    if video_timescale:
        options["video_track_timescale"] = str(video_timescale)
    out = io.BytesIO()
    with av.open(str(source)) as src:
        packets = [p for p in src.demux() if p.dts is not None and p.pts is not None]
        video = [p for p in packets if p.stream.type == "video"]
        keys = [n for n, p in enumerate(video) if p.is_keyframe]
        first = keys[start_key % len(keys)]
        kept = set(map(id, video[first : first + frames]))
        vtb = src.streams.video[0].time_base
        assert vtb is not None
        begin = video[first].pts * vtb
        end = max((p.pts + (p.duration or 0)) * vtb for p in video[first : first + frames])
        with av.open(out, "w", format="mp4", options=options) as muxer:
            streams = {s.index: muxer.add_stream_from_template(s) for s in src.streams}
            for packet in packets:
                tb = packet.stream.time_base
                assert tb is not None
                if packet.stream.type == "video":
                    if id(packet) not in kept:
                        continue
                elif (packet.pts + (packet.duration or 0)) * tb <= begin or packet.pts * tb >= end:
                    continue  # (the sound the video spans, the packet across its start included)
                shift = round(begin / tb)
                packet.pts, packet.dts = packet.pts - shift, packet.dts - shift
                packet.stream = streams[packet.stream.index]
                muxer.mux(packet)
    return out.getvalue()


def pieces_of(data: bytes, step: int) -> list[Piece]:
    splitter, pieces = Splitter(), []
    for at in range(0, len(data), step):
        pieces += splitter.feed(data[at : at + step])
    return pieces


# ---- reading the head back (the test's own reading of the tables, not the product's) ---------------------------


def walk(data: bytes, start: int = 0, path: str = "") -> Iterator[tuple[str, bytes]]:
    """Every box below ``data[start:]`` as (its path, its bytes), asserting each level's boxes fill it exactly."""
    at = start
    for kind, end in boxes(data[start:]):
        end += start
        size = end - at
        assert size >= 8 and end <= len(data), f"{path}/{kind}: a box of {size} bytes at {at} in {len(data)}"
        box = data[at:end]
        yield f"{path}/{kind}", box
        header = 16 if struct.unpack(">I", box[:4])[0] == 1 else 8
        if kind in CONTAINERS:
            yield from walk(box, header, f"{path}/{kind}")
        elif kind == "stsd":  # (its entries: one sample entry, whose fixed fields come before its boxes)
            yield from walk(box, header + 8, f"{path}/{kind}")
        at = end
    assert at == len(data), f"{path}: boxes end at {at}, the box at {len(data)}"


def full(box: bytes) -> tuple[int, bytes]:
    """A full box's version and its body past the version and flags."""
    return box[8], box[12:]


def table(box: bytes, entry: str) -> list[tuple[int, ...]]:
    """A table box's entries (a count, then entries of ``entry``'s struct)."""
    _, body = full(box)
    (count,) = struct.unpack(">I", body[:4])
    size = struct.calcsize(entry)
    assert 4 + count * size == len(body), f"{box[4:8]!r}: {count} entries in {len(body) - 4} bytes"
    return [struct.unpack(entry, body[4 + n * size : 4 + (n + 1) * size]) for n in range(count)]


@dataclass
class Track:
    """One ``trak`` of the head as a player reads it."""

    track_id: int
    timescale: int
    handler: str
    durations: list[int]
    offsets: list[int]
    sync: list[int] | None
    sizes: list[int]
    chunks: list[tuple[int, int]]  # (where, how many samples)
    edits: list[tuple[int, int]]  # (duration in the movie's timescale, media time)

    def presented_end(self) -> int:
        """Where the last presented sample ends, in the track's timescale."""
        dts, end = 0, 0
        for duration, offset in zip(self.durations, self.offsets, strict=True):
            end = max(end, dts + offset + duration)
            dts += duration
        return end

    def sample_bytes(self, data: bytes) -> list[bytes]:
        found, sizes = [], iter(self.sizes)
        for where, count in self.chunks:
            for _ in range(count):
                size = next(sizes)
                found.append(data[where : where + size])
                where += size
        return found


def tracks(head: bytes) -> tuple[int, list[Track], tuple[int, int]]:
    """The head's movie timescale, its tracks and where its ``mdat``'s payload is (start, end)."""
    found = dict(walk(head))
    assert [kind for kind, _ in boxes(head)][-2:] == ["moov", "mdat"] and "/ftyp" in found
    mvhd = found["/moov/mvhd"]
    movie = struct.unpack(">I", mvhd[20:24] if mvhd[8] == 0 else mvhd[28:32])[0]
    mdat_end = len(head)
    mdat_start = mdat_end - len(found["/mdat"]) + (16 if struct.unpack(">I", found["/mdat"][:4])[0] == 1 else 8)
    moov = found["/moov"]
    out = []
    for _, trak in (item for item in walk(moov, 8, "/moov") if item[0] == "/moov/trak"):
        parts = dict(walk(trak, 8))
        tkhd, mdhd = parts["/tkhd"], parts["/mdia/mdhd"]
        track_id = struct.unpack(">I", tkhd[20:24] if tkhd[8] == 0 else tkhd[28:32])[0]
        scale = struct.unpack(">I", mdhd[20:24] if mdhd[8] == 0 else mdhd[28:32])[0]
        stbl = "/mdia/minf/stbl"
        durations = [d for count, d in table(parts[f"{stbl}/stts"], ">II") for _ in range(count)]
        offsets = [0] * len(durations)
        if f"{stbl}/ctts" in parts:
            version, _ = full(parts[f"{stbl}/ctts"])
            offsets = [
                o for count, o in table(parts[f"{stbl}/ctts"], ">Ii" if version else ">II") for _ in range(count)
            ]
        sync = [n for (n,) in table(parts[f"{stbl}/stss"], ">I")] if f"{stbl}/stss" in parts else None
        _, stsz = full(parts[f"{stbl}/stsz"])
        uniform, count = struct.unpack(">II", stsz[:8])
        sizes = [uniform] * count if uniform else list(struct.unpack(f">{count}I", stsz[8:]))
        assert len(stsz) == 8 + (0 if uniform else 4 * count)
        where = [w for (w,) in table(parts[f"{stbl}/stco"], ">I")]
        runs = table(parts[f"{stbl}/stsc"], ">III")
        assert [first for first, _, _ in runs] == sorted({first for first, _, _ in runs}) and (
            not runs or runs[0][0] == 1
        )
        per_chunk = []
        for n in range(1, len(where) + 1):
            per_chunk.append(next(per for first, per, _ in reversed(runs) if first <= n))
        edits = []
        if "/edts/elst" in parts:
            version, _ = full(parts["/edts/elst"])
            edits = [(d, t) for d, t, _ in table(parts["/edts/elst"], ">QqI" if version else ">IiI")]
        hdlr = parts["/mdia/hdlr"][16:20].decode("latin-1")
        out.append(
            Track(
                track_id, scale, hdlr, durations, offsets, sync, sizes, list(zip(where, per_chunk, strict=True)), edits
            )
        )
    return movie, out, (mdat_start, mdat_end)


def frames(data: bytes) -> dict[int, list[tuple[Any, ...]]]:
    """Per track (its id), each decoded frame: (pts, time, a digest of its pixels or samples), in decode output."""
    with av.open(io.BytesIO(data)) as container:
        out: dict[int, list[tuple[Any, ...]]] = {s.id: [] for s in container.streams}
        for packet in container.demux():  # (each stream's last, empty packet flushes its decoder)
            for frame in packet.decode():
                digest = hashlib.sha256(b"".join(bytes(plane) for plane in frame.planes)).hexdigest()
                out[packet.stream.id].append((frame.pts, frame.time, digest))
    return out


def packets(data: bytes) -> dict[int, list[bytes]]:
    """Per track, its packets' bytes in decode order."""
    with av.open(io.BytesIO(data)) as container:
        out: dict[int, list[bytes]] = {s.id: [] for s in container.streams}
        for packet in container.demux():
            if packet.size:
                out[packet.stream.id].append(bytes(packet))
    return out


# ---- what every head must be -----------------------------------------------------------------------------------


def assert_a_whole_head(init: bytes, first: bytes, whole: bytes) -> bytes:
    """The head of ``init`` and ``first`` (the first fragment of ``whole``, the copy they were cut from): its boxes
    walk cleanly, each track's tables list the fragment's samples (the same count in every table, the same bytes in
    the same order, every chunk inside the ``mdat``), its edits last to the samples' end (never short of it, at most
    one tick of the movie's timescale past it), and it decodes to the fragment's frames and sound at the times the
    fragments decode to."""
    head = progressive_head(init, first)
    movie, listed, (payload, mdat_end) = tracks(head)
    fragment = packets(init + first)
    assert sorted(t.track_id for t in listed) == sorted(fragment)
    shown, reference, everything = frames(head), frames(init + first), frames(whole)
    assert shown == reference
    for track_id, decoded in shown.items():
        assert set(decoded) <= set(everything[track_id])  # (the same frames, at the same times, in the whole copy)
    for track in listed:
        count = len(track.durations)
        assert count == len(track.offsets) == len(track.sizes) == sum(n for _, n in track.chunks), track
        assert count == len(fragment[track.track_id])
        if track.sync is not None:
            assert track.sync == sorted(set(track.sync)) and all(1 <= n <= count for n in track.sync)
        sizes = iter(track.sizes)
        for where, n in track.chunks:
            assert payload <= where and where + sum(next(sizes) for _ in range(n)) <= mdat_end
        assert track.sample_bytes(head) == fragment[track.track_id]
        if count:
            span_end = track.presented_end()
            for duration, media_time in track.edits:
                if media_time >= 0:  # (an empty edit, -1, is the init's gap before the track starts)
                    span = Fraction(span_end - media_time, track.timescale)
                    assert Fraction(duration, movie) >= span, (track.handler, duration, movie, span)
                    assert Fraction(duration - 1, movie) < span, (track.handler, duration, movie, span)
    return head


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    source=st.integers(0, len(SOURCES) - 1),
    start_key=st.integers(0, 6),
    length=st.integers(1, 80),
    fragment_ms=st.integers(1, 2500),
    movie_timescale=st.sampled_from([1000, 1000, 600, 90000, 10, 1]),
    video_timescale=st.sampled_from([0, 0, 1000, 600, 90000]),
    step=st.integers(64, 1 << 17),
)
def test_every_layout_the_splitter_gives_makes_a_head_that_plays_the_first_fragment(
    media, source, start_key, length, fragment_ms, movie_timescale, video_timescale, step
) -> None:
    src = media(duration=SOURCE_SECONDS, **SOURCES[source])
    whole = fragmented(src, start_key, length, fragment_ms * 1000, movie_timescale, video_timescale)
    pieces = pieces_of(whole, step)
    assert b"".join(p.data for p in pieces) == whole
    assert [p.kind for p in pieces[:2]] == ["init", "fragment"]
    assume(not sound_within_one_frame(progressive_head(pieces[0].data, pieces[1].data)))
    assert_a_whole_head(pieces[0].data, pieces[1].data, whole)


def sound_within_one_frame(head: bytes) -> bool:
    """Whether the head's sound is presented for less than one of its frames (1024 samples of AAC): a stream cut
    inside a sound frame with that frame alone in its first fragment. FFmpeg's demuxer (Chromium's) presents no
    sound of such an edit in a ``moov`` with samples, where it decodes the fragments' part of a frame; a render's
    first fragment holds at least a quarter of a second, its sound from the encoder's first frame."""
    _, listed, _ = tracks(head)
    for track in listed:
        if track.handler == "soun" and track.durations:
            media_time = max(t for _, t in track.edits) if track.edits else 0
            if track.presented_end() - media_time < max(track.durations):
                return True
    return False


# ---- its edit lists, rounded up ---------------------------------------------------------------------------------


def test_the_heads_edits_last_to_the_end_of_its_last_samples_at_the_streams_own_timescales(
    media, ffmpeg_bin, tmp_path
) -> None:
    """The copy as a render writes it (x264 with B-frames and AAC, the stream's flags, fragments of 9 frames at
    29.97 fps) in a movie timescale of milliseconds (FFmpeg's default before 9, whose muxer picks one each track's
    times fit in; ``FFMPEG_BINARY`` may name either): 9 frames last 300.3 ms, and the sound's span is no whole
    number of milliseconds either. Each edit is rounded up to the next millisecond: one rounded down would end
    before the last sample does."""
    src = media(size="160x90", fps="30000/1001", duration=SOURCE_SECONDS, gop=45, bframes=True)
    copy = tmp_path / "copy.mp4"
    subprocess.run(
        [ffmpeg_bin, "-hide_banner", "-loglevel", "error", "-i", str(src), "-c:v", "libx264", "-bf", "3"]
        + ["-c:a", "aac", "-movflags", STREAM_MOVFLAGS, "-frag_duration", "300300", "-movie_timescale", "1000"]
        + ["-f", "mp4", str(copy)],
        check=True,
    )
    whole = copy.read_bytes()
    pieces = pieces_of(whole, 1 << 16)
    head = assert_a_whole_head(pieces[0].data, pieces[1].data, whole)
    movie, listed, _ = tracks(head)
    assert movie == 1000 and sorted(t.handler for t in listed) == ["soun", "vide"]
    for track in listed:
        ((duration, media_time),) = [edit for edit in track.edits if edit[1] >= 0]
        span = Fraction(track.presented_end() - media_time, track.timescale) * movie
        assert span.denominator != 1, (track.handler, span)  # (rounding has something to round)
        assert duration == math.ceil(span), (track.handler, duration, span)
    video = next(t for t in listed if t.handler == "vide")
    assert len(video.durations) == 9 and video.presented_end() - video.edits[-1][1] == 9 * 1001


def test_a_head_at_a_coarse_movie_timescale_still_presents_its_last_samples(media) -> None:
    """At a movie timescale of tenths of a second, an edit rounded down would end on the tenth before its track's
    last sample ends, and FFmpeg's demuxer (Chromium's) would leave out the sound frame that starts past it: the
    head presents every frame and sound frame of the first fragment, the last ones included."""
    src = media(duration=SOURCE_SECONDS, **SOURCES[0])
    whole = fragmented(src, 0, 60, 300_000, movie_timescale=10)
    pieces = pieces_of(whole, 1 << 16)
    head = assert_a_whole_head(pieces[0].data, pieces[1].data, whole)
    shown = frames(head)
    reference = frames(pieces[0].data + pieces[1].data)
    for track in tracks(head)[1]:
        assert shown[track.track_id] and shown[track.track_id][-1] == reference[track.track_id][-1], track.handler
    assert len(shown[next(t.track_id for t in tracks(head)[1] if t.handler == "vide")]) == 9
