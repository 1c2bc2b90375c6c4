"""An MP4's edit lists, read and set in place: where playback starts in each track's media and how long it lasts.

ffmpeg's stream copy writes an edit list that starts at the requested time, which lies between two frames (a
player then shows the frame before the cut for a moment), and lasts whole packets (a frame or two past the cut's
end). ``trim`` sets each track's edit to start exactly at the cut's first frame and last exactly its frames. The
boxes are rewritten where they are (the same sizes: the media data does not move).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

CONTAINERS = {b"moov", b"trak", b"edts", b"mdia"}


@dataclass
class Track:
    handler: str  # "vide", "soun", …
    timescale: int  # the media's (mdhd)
    tkhd: tuple[int, int]  # (offset of the duration field in the file, its width in bytes)
    elst: tuple[int, int, int]  # (offset of the first entry, entry count, version)
    edits: list[tuple[int, int]]  # (segment duration in the movie's timescale, media time; -1: an empty edit)


@dataclass
class Movie:
    timescale: int
    mvhd: tuple[int, int]  # (offset of the duration field, its width)
    tracks: list[Track]


def read(path: Path) -> Movie:
    """The movie's timescale and each track's handler, media timescale and edits (``moov`` at the front or not)."""
    with open(path, "rb") as f:
        data = f.read()
    movie = Movie(0, (0, 0), [])
    _walk(data, 0, len(data), movie, None)
    if not movie.timescale:
        raise ValueError(f"{path}: no movie header")
    return movie


def _walk(data: bytes, start: int, end: int, movie: Movie, track: Track | None) -> None:
    at = start
    while at + 8 <= end:
        size, kind = struct.unpack(">I4s", data[at : at + 8])
        header = 8
        if size == 1:
            size, header = struct.unpack(">Q", data[at + 8 : at + 16])[0], 16
        elif size == 0:
            size = end - at
        if size < header or at + size > end:
            raise ValueError(f"a malformed {kind!r} box at {at}")
        body = at + header
        version = data[body]
        if kind == b"mvhd":
            movie.timescale = struct.unpack(
                ">I", data[body + (20 if version else 12) : body + (24 if version else 16)]
            )[0]
            movie.mvhd = (body + 24, 8) if version else (body + 16, 4)
        elif kind == b"trak":
            track = Track("", 0, (0, 0), (0, 0, 0), [])
            _walk(data, body, at + size, movie, track)
            movie.tracks.append(track)
        elif track is not None and kind == b"tkhd":
            track.tkhd = (body + 28, 8) if version else (body + 20, 4)
        elif track is not None and kind == b"mdhd":
            track.timescale = struct.unpack(
                ">I", data[body + (20 if version else 12) : body + (24 if version else 16)]
            )[0]
        elif track is not None and kind == b"hdlr":
            track.handler = data[body + 8 : body + 12].decode("latin-1")
        elif track is not None and kind == b"elst":
            count = struct.unpack(">I", data[body + 4 : body + 8])[0]
            track.elst = (body + 8, count, version)
            entry = body + 8
            for _ in range(count):
                if version:
                    duration, media_time = struct.unpack(">Qq", data[entry : entry + 16])
                    entry += 20
                else:
                    duration, media_time = struct.unpack(">Ii", data[entry : entry + 8])
                    entry += 12
                track.edits.append((duration, media_time))
        elif kind in CONTAINERS:
            _walk(data, body, at + size, movie, track)
        at += size


def trim(path: Path, first: int, last_end: int) -> float:
    """Set the edits so that playback starts at the video's media time ``first`` (the cut's first frame) and lasts
    to ``last_end`` (where its last frame ends), both in the video's media timescale; the other tracks move with
    it. Returns the clip's duration in seconds. Each track must have one edit (ffmpeg's stream copy of a cut)."""
    movie = read(path)
    video = next(t for t in movie.tracks if t.handler == "vide")
    if any(len(t.edits) != 1 or t.edits[0][1] < 0 for t in movie.tracks):
        raise ValueError(f"{path}: edit lists of other than one edit per track")
    shift = first - video.edits[0][1]  # how much later playback starts, in the video's media time
    duration = (last_end - first) * movie.timescale // video.timescale  # the movie's units, never past the frames
    with open(path, "r+b") as f:
        for track in movie.tracks:
            media_time = track.edits[0][1] + round(shift * track.timescale / video.timescale)
            offset, _, version = track.elst
            f.seek(offset)
            f.write(struct.pack(">Qq", duration, media_time) if version else struct.pack(">Ii", duration, media_time))
            _write_duration(f, track.tkhd, duration)
        _write_duration(f, movie.mvhd, duration)
    return duration / movie.timescale


def _write_duration(f: BinaryIO, field: tuple[int, int], duration: int) -> None:
    offset, width = field
    f.seek(offset)
    f.write(struct.pack(">Q" if width == 8 else ">I", duration))
