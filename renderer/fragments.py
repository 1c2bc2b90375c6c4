"""A render's fragmented copy, read while ffmpeg writes it: the byte stream split into its init segment (``ftyp`` and
``moov``) and its fragments (``moof`` and ``mdat``), each fragment with its time and length, for a relay to hand to
viewers while the clip renders.

ffmpeg writes the fragmented copy beside the stored clip from the same encode (``plan.build_outputs``: a ``tee`` of
one encoder into two MP4 muxers), into a FIFO named ``stream.mp4`` in the render's folder; ``read_fragments`` reads
it in a thread of the rendering process. Nothing here parses more than box headers and the few fields that time a
fragment (``mdhd``, ``hdlr``, ``tkhd``, ``trex``, ``tfhd``, ``tfdt``, ``trun``) and name its codecs (``avcC``,
``esds``).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import math
import os
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

log = logging.getLogger(__name__)

# Fragments are cut by duration (``frag_duration``), not at keyframes: the encoder's keyframes stay where a render
# without a stream puts them. The first fragment is the one a player waits for: it holds at least a quarter of a
# second and at least ``FRAGMENT_FRAMES`` frames, and the shorter it is the sooner ffmpeg has it out (its encode waits
# for x264's lookahead to fill). Chromium's ``<video src>`` presents the first frame of 9 once it is given them in a
# ``moov`` with samples (the stream's head, ``renderer/head.py``: its demuxer, FFmpeg's, reads the frame rate off
# them; after an init segment without samples it reads 21 frames of fragments first); MSE and HLS players take the
# fragments as they are.
FRAGMENT_SECONDS = 0.25
FRAGMENT_FRAMES = 9
FRAGMENT_MAX_SECONDS = 2.0  # (a source under 4.5 fps: Chromium then waits for a second fragment, HLS and MSE do not)
# A stream's last fragment holds at least ``LAST_FRAGMENT_FRAMES`` frames and all of the sound past its last frame: a
# stream whose last fragment holds one frame, or sound alone, never ends in hls.js (its issues #4783 and #7646: the
# player stalls a few frames before the end). The muxer starts a fragment when a packet of any track comes a
# fragment's span after that track's first in it, and the sound reaches up to about 80 ms past the picture's span
# (the AAC encoder's priming and its last frame's padding, and the packets interleaved ahead of the picture's): the
# last fragment's picture stays ``AUDIO_SLACK`` short of a whole fragment.
LAST_FRAGMENT_FRAMES = 2
AUDIO_SLACK = Fraction(8, 100)
# empty_moov: the init segment before any sample; default_base_moof: fragments that stand alone (CMAF, HLS);
# delay_moov: the init written with the first fragment, once the muxer knows where each track starts, so it carries
# the same edit lists as the stored clip (the B-frames' composition delay, the AAC encoder's priming): the streamed
# picture and sound start at 0 and decode to the stored clip's frames and samples; skip_trailer: no ``mfra`` index
# after the last fragment (a stream is read once, from the start).
STREAM_MOVFLAGS = "+empty_moov+default_base_moof+delay_moov+skip_trailer"
# Each fragment's samples laid out in the order of their decode times, one track's run at a time (the muxer's
# ``frag_interleave``; without it, all of a fragment's pictures, then all its sound). A progressive player reads a
# growing answer in whole blocks (Chromium's media cache hands its demuxer 32 KiB blocks only until the answer ends,
# api/streams.py), so the newest fragment's last bytes wait for the next fragment's; a player plays where it has both
# tracks, so with the sound at the end of each fragment it could play none of the newest fragment, and a viewer of a
# clip still rendering was a whole fragment behind what was sent (a stall when the render keeps only a little ahead
# of the player). Interleaved, all but the last few samples before the held-back bytes play. The samples, their
# times and their bytes are the same.
STREAM_INTERLEAVE = 1
READ_SIZE = 1 << 16
PIPE_BYTES = 1 << 20  # the FIFO's buffer: several fragments of a 1080p clip (the system's default cap, pipe-max-size)
INIT_BOXES = {b"ftyp", b"moov"}
CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"stsd", b"mvex", b"moof", b"traf", b"avc1", b"mp4a"}
# sample entries hold fixed fields before their child boxes: (the entry, the bytes before its children)
SAMPLE_ENTRY = {b"avc1": 78, b"mp4a": 28, b"stsd": 8}


@dataclass(frozen=True)
class Piece:
    """One piece of the fragmented copy: its ``init`` segment (with the ``codecs`` a MediaSource asks for), or a
    ``fragment`` with where it starts in the clip and how long it lasts (seconds, by its video track)."""

    kind: str  # "init" or "fragment"
    data: bytes
    start: float = 0.0
    seconds: float = 0.0
    codecs: str = ""


@dataclass
class _Track:
    timescale: int = 0
    handler: bytes = b""


@dataclass
class Splitter:
    """Bytes in, pieces out: ``feed`` takes the copy's bytes as they come (any split), and returns the pieces they
    complete. Boxes other than the init's and the fragments' (``free``, ``mfra``, …) are left out."""

    _buffer: bytearray = field(default_factory=bytearray)
    _init: list[bytes] = field(default_factory=list)
    _fragment: list[bytes] = field(default_factory=list)
    _tracks: dict[int, _Track] = field(default_factory=dict)
    _defaults: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)
    initialized: bool = False

    def feed(self, data: bytes) -> list[Piece]:
        self._buffer += data
        pieces = []
        for kind, box in self._boxes():
            if kind in INIT_BOXES and not self.initialized:
                self._init.append(box)
                if kind == b"moov":
                    self._tracks, self._defaults = _tracks(box), trex_defaults(box)
                    self.initialized = True
                    init = b"".join(self._init)
                    pieces.append(Piece("init", init, codecs=codecs(init)))
            elif kind == b"moof" and self.initialized:
                self._fragment = [box]
            elif kind == b"mdat" and self._fragment:
                moof = self._fragment[0]
                start, seconds = _timing(moof, self._tracks, self._defaults)
                pieces.append(Piece("fragment", moof + box, start, seconds))
                self._fragment = []
        return pieces

    def _boxes(self) -> Iterator[tuple[bytes, bytes]]:
        while len(self._buffer) >= 8:
            size, kind = struct.unpack(">I4s", self._buffer[:8])
            if size == 1:
                if len(self._buffer) < 16:
                    return
                size = struct.unpack(">Q", self._buffer[8:16])[0]
            if size < 8:
                raise ValueError(f"a box of {size} bytes in the fragmented copy")
            if len(self._buffer) < size:
                return
            box = bytes(self._buffer[:size])
            del self._buffer[:size]
            yield kind, box


def read_fragments(path: Path, sink: Callable[[Piece], None], ready: threading.Event) -> None:
    """Read the FIFO ``path`` to its end (ffmpeg closing it, or ``unblock``), handing each piece to ``sink`` in order.
    ``ready`` is set once the FIFO is open for reading. A sink that fails is told nothing more, but the FIFO is read
    to its end all the same: ffmpeg, writing into it, must never wait on a relay that stopped."""
    splitter = Splitter()
    relaying = True
    fd = os.open(path, os.O_RDONLY)  # (waits for ffmpeg, or ``unblock``, to open it for writing)
    _widen(fd)
    ready.set()
    try:
        while chunk := os.read(fd, READ_SIZE):
            if not relaying:
                continue
            try:
                for piece in splitter.feed(chunk):
                    sink(piece)
            except Exception as exc:  # noqa: BLE001  (the stream stops; the render, and its stored clip, go on)
                log.warning("the clip's stream stopped relaying: %s", exc)
                relaying = False
    finally:
        os.close(fd)


def _widen(fd: int) -> None:
    """Give the FIFO ``PIPE_BYTES`` of buffer (Linux; elsewhere, or past the system's cap, it keeps its own), so
    ffmpeg writes a whole fragment into it without waiting for this reader to be scheduled."""
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
    except OSError:
        pass


def fragment_seconds(rate: Fraction) -> float:
    """How long each fragment of a clip at ``rate`` frames a second is: ``FRAGMENT_FRAMES`` frames, at least
    ``FRAGMENT_SECONDS`` and at most ``FRAGMENT_MAX_SECONDS`` (9 frames at 24 fps are 0.375 s, at 29.97 fps 0.300 s;
    at 60 fps a quarter of a second holds 15; at 4 fps two seconds hold 8)."""
    if rate <= 0:
        return FRAGMENT_SECONDS
    return min(FRAGMENT_MAX_SECONDS, max(FRAGMENT_SECONDS, float(FRAGMENT_FRAMES / rate)))


def fragment_frames(rate: Fraction, frames: int) -> int:
    """How many frames each fragment of a clip of ``frames`` frames at ``rate`` holds: those of ``fragment_seconds``
    (whole frames), or the fewest over that, within ``FRAGMENT_MAX_SECONDS``, whose last fragment holds
    ``LAST_FRAGMENT_FRAMES`` or more and is ``AUDIO_SLACK`` short of a whole one (109 frames at 29.97 fps: fragments
    of 13, the last of 5, not 12 of 9 and one of 1); where none is (a source of a few frames a second), the fewest
    under it, else those of ``fragment_seconds``."""
    if rate <= 0:
        return FRAGMENT_FRAMES
    base = max(FRAGMENT_FRAMES, math.ceil(rate * Fraction(FRAGMENT_SECONDS)))
    most = max(1, math.floor(rate * Fraction(FRAGMENT_MAX_SECONDS)))
    base = max(1, min(base, most))
    for each in [*range(base, max(base, most) + 1), *range(base - 1, 0, -1)]:
        if _ends_whole(frames % each, each, rate, frames):
            return each
    return base


def _ends_whole(last: int, each: int, rate: Fraction, frames: int) -> bool:
    return last >= min(LAST_FRAGMENT_FRAMES, frames) and Fraction(each - last) / rate >= AUDIO_SLACK


def fragment_us(rate: Fraction, frames: int) -> int:
    """The muxer's ``frag_duration`` (microseconds) that cuts a fragment every ``fragment_frames`` frames: it starts a
    fragment at the first frame whose time from the fragment's first reaches it, so it is that span rounded down."""
    if rate <= 0:
        return round(FRAGMENT_SECONDS * 1_000_000)
    return math.floor(fragment_frames(rate, frames) * 1_000_000 / rate)


def filler(sent: int, block: int) -> bytes:
    """A ``free`` box that brings a stream of ``sent`` bytes to the next multiple of ``block`` (nothing when it is one
    already). Players and demuxers skip a ``free`` box wherever it stands between top-level boxes."""
    gap = -sent % block
    if gap == 0:
        return b""
    if gap < 8:  # (a box has at least its 8-byte header)
        gap += block
    return struct.pack(">I4s", gap, b"free") + bytes(gap - 8)


def unblock(path: Path) -> None:
    """Open ``path`` for writing and close it at once, so a reader still waiting for ffmpeg to open it (ffmpeg
    failed before its outputs opened) reads the end of the stream. No reader waiting: nothing happens."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno not in (errno.ENXIO, errno.ENOENT):  # ENXIO: no reader is waiting
            raise
        return
    os.close(fd)


# ---- the few fields a relay needs ------------------------------------------------------------------------------


def children(box: bytes, start: int = 8) -> Iterator[tuple[bytes, bytes]]:
    """The boxes inside ``box`` (from ``start``: past its header, and past a sample entry's fixed fields)."""
    at = start
    while at + 8 <= len(box):
        size, kind = struct.unpack(">I4s", box[at : at + 8])
        if size == 1:
            size = struct.unpack(">Q", box[at + 8 : at + 16])[0]
        if size < 8 or at + size > len(box):
            return
        yield kind, box[at : at + size]
        at += size


def find(box: bytes, *path: bytes) -> Iterator[bytes]:
    """Every box at ``path`` below ``box`` (each step a child of the one before)."""
    if not path:
        yield box
        return
    kind = box[4:8]
    for child_kind, child in children(box, 8 + SAMPLE_ENTRY.get(kind, 0)):
        if child_kind == path[0]:
            yield from find(child, *path[1:])


def _tracks(moov: bytes) -> dict[int, _Track]:
    tracks: dict[int, _Track] = {}
    for trak in find(moov, b"trak"):
        track_id, timescale = trak_id(trak), timescale_of(next(find(trak, b"mdia", b"mdhd")))
        hdlr = next(find(trak, b"mdia", b"hdlr"))
        tracks[track_id] = _Track(timescale, hdlr[16:20])
    return tracks


def _timing(
    moof: bytes, tracks: dict[int, _Track], defaults: dict[int, tuple[int, int, int, int]]
) -> tuple[float, float]:
    """(start, length) of a fragment in seconds, by its video track (its first track when it has none)."""
    timed = []
    for track_id, samples in fragment_samples(moof, defaults).items():
        track = tracks.get(track_id, _Track())
        if track.timescale and samples:
            seconds = sum(s.duration for s in samples) / track.timescale
            timed.append((track.handler == b"vide", samples[0].dts / track.timescale, seconds))
    if not timed:
        return 0.0, 0.0
    timed.sort(key=lambda t: not t[0])  # the video track first
    return timed[0][1], timed[0][2]


def codecs(init: bytes) -> str:
    """The RFC 6381 codecs of an init segment (``avc1.64001f,mp4a.40.2``), as a MediaSource or an HLS playlist names
    them; empty when it names none this reads (H.264 and AAC only)."""
    found = []
    for kind, box in children(init, 0):
        if kind != b"moov":
            continue
        for stsd in find(box, b"trak", b"mdia", b"minf", b"stbl", b"stsd"):
            for avcc in find(stsd, b"avc1", b"avcC"):
                found.append(f"avc1.{avcc[9:12].hex()}")
            for esds in find(stsd, b"mp4a", b"esds"):
                found.append(f"mp4a.40.{_audio_object_type(esds[12:])}")
    return ",".join(found)


def _audio_object_type(data: bytes) -> int:
    """The AAC audio object type in an ``esds``' descriptors (its DecoderSpecificInfo's first five bits: ES_Descriptor
    → DecoderConfigDescriptor → DecoderSpecificInfo); 2 (AAC LC) when they cannot be read."""

    def descriptor(at: int) -> tuple[int, int, int]:  # (tag, where its body starts, its size)
        tag, size, at = data[at], 0, at + 1
        for _ in range(4):
            size = size << 7 | data[at] & 0x7F
            at += 1
            if not data[at - 1] & 0x80:
                break
        return tag, at, size

    try:
        tag, at, _ = descriptor(0)
        if tag != 0x03:
            return 2
        flags = data[at + 2]
        at += 3 + (2 if flags & 0x80 else 0) + (1 + data[at + 3] if flags & 0x40 else 0) + (2 if flags & 0x20 else 0)
        tag, at, _ = descriptor(at)
        if tag != 0x04:
            return 2
        tag, at, _ = descriptor(at + 13)
        return data[at] >> 3 if tag == 0x05 else 2
    except IndexError:
        return 2


# ---- the samples a fragment lists (read by the splitter to time it, and by the head: renderer/head.py) -----


@dataclass(frozen=True)
class Sample:
    duration: int
    size: int
    flags: int
    offset: int  # composition offset
    at: int  # where its bytes are, in the fragment
    description: int  # its sample description's index
    dts: int  # its decode time


MAX_RUN_SAMPLES = 1 << 16  # (a fragment holds a few dozen)


def trak_id(trak: bytes) -> int:
    tkhd = next(find(trak, b"tkhd"))
    return int(struct.unpack(">I", tkhd[20:24] if tkhd[8] == 0 else tkhd[28:32])[0])


def timescale_of(header: bytes) -> int:
    """An ``mvhd``'s or ``mdhd``'s timescale (the same place in both, by version)."""
    return int(struct.unpack(">I", header[20:24] if header[8] == 0 else header[28:32])[0])


def trex_defaults(moov: bytes) -> dict[int, tuple[int, int, int, int]]:
    """Per track: its fragments' default (sample description index, duration, size, flags)."""
    defaults = {}
    for trex in find(moov, b"mvex", b"trex"):
        track_id, *values = struct.unpack(">IIIII", trex[12:32])
        defaults[track_id] = (values[0], values[1], values[2], values[3])
    return defaults


def fragment_samples(moof: bytes, defaults: dict[int, tuple[int, int, int, int]]) -> dict[int, list[Sample]]:
    """Per track, the samples a fragment's ``moof`` lists, each with its decode time (from its ``tfdt``) and where its
    bytes are in the fragment (the ``moof`` at 0, as ``default_base_moof`` has every ``traf`` count its offsets
    from)."""
    found: dict[int, list[Sample]] = {}
    for traf in find(moof, b"traf"):
        tfhd = next(find(traf, b"tfhd"))
        flags = int.from_bytes(tfhd[9:12], "big")
        track_id = struct.unpack(">I", tfhd[12:16])[0]
        description, duration, size, sample_flags = defaults.get(track_id, (1, 0, 0, 0))
        given, at = {}, 16 + (8 if flags & 0x1 else 0)  # (past a base_data_offset)
        for bit in (0x2, 0x8, 0x10, 0x20):  # the fields tfhd's flags say it holds, in their order
            if flags & bit:
                given[bit] = struct.unpack(">I", tfhd[at : at + 4])[0]
                at += 4
        description, duration = given.get(0x2, description), given.get(0x8, duration)
        size, sample_flags = given.get(0x10, size), given.get(0x20, sample_flags)
        track = found.setdefault(track_id, [])
        tfdt = next(find(traf, b"tfdt"), None)
        dts = track[-1].dts + track[-1].duration if track else 0
        if tfdt is not None:
            dts = struct.unpack(">Q", tfdt[12:20])[0] if tfdt[8] == 1 else struct.unpack(">I", tfdt[12:16])[0]
        data_at = 0
        for trun in find(traf, b"trun"):
            version, run_flags = trun[8], int.from_bytes(trun[9:12], "big")
            count = struct.unpack(">I", trun[12:16])[0]
            per = 4 * sum(1 for bit in (0x100, 0x200, 0x400, 0x800) if run_flags & bit)
            if count > MAX_RUN_SAMPLES or count * per > len(trun):
                raise ValueError(f"a fragment's run of {count} samples")
            at = 16
            if run_flags & 0x1:
                data_at = struct.unpack(">i", trun[at : at + 4])[0]
                at += 4
            first_flags = None
            if run_flags & 0x4:
                first_flags = struct.unpack(">I", trun[at : at + 4])[0]
                at += 4
            for n in range(count):
                d, s, f, o = duration, size, sample_flags, 0
                if run_flags & 0x100:
                    d = struct.unpack(">I", trun[at : at + 4])[0]
                    at += 4
                if run_flags & 0x200:
                    s = struct.unpack(">I", trun[at : at + 4])[0]
                    at += 4
                if run_flags & 0x400:
                    f = struct.unpack(">I", trun[at : at + 4])[0]
                    at += 4
                elif n == 0 and first_flags is not None:
                    f = first_flags
                if run_flags & 0x800:
                    o = struct.unpack(">i" if version else ">I", trun[at : at + 4])[0]
                    at += 4
                track.append(Sample(d, s, f, o, data_at, description, dts))
                data_at += s
                dts += d
    return found
