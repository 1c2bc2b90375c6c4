"""A stream's fragments with their tracks' samples interleaved, as a progressive player is best sent them.

ffmpeg's MP4 muxer writes a fragment's ``mdat`` one track after the other: all the fragment's pictures, then all its
sound. A progressive player reads a growing answer in whole blocks (Chromium's media cache hands its demuxer 32 KiB
blocks only until the answer ends, api/streams.py), so the last part block of the bytes so far waits for the next
fragment's; with the sound at the end of each fragment, that part block holds the newest fragment's sound, and the
player can play none of the fragment (a player plays where it has both tracks): a viewer of a clip still rendering
is a whole fragment behind what was sent, and a render that keeps only a little ahead of the player at its start
(a busy machine, a page opening in the same browser) leaves it waiting (a stall). Interleaved, the samples are laid
out in the order of their decode times, both tracks a few at a time, and all but the last few samples before the
part block play. The samples, their times and their bytes are the same: only where they lie in the ``mdat``, and
the ``moof`` that says so (a run, ``trun``, for each stretch of one track), change.

Nothing else is rewritten: each ``traf``'s header (``tfhd``, its offsets counting from the ``moof``, as
``default_base_moof`` writes them) and decode time (``tfdt``) are kept; every run states each sample's duration,
size, flags and composition offset. ``renderer/head.py`` makes the stream's head from an interleaved first fragment
as from any other.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import replace

from .fragments import Piece, Sample, children, find, fragment_samples, timescale_of, trak_id, trex_defaults

log = logging.getLogger(__name__)

BASE_IS_MOOF = 0x20000  # tfhd: offsets count from the moof (default_base_moof)
BASE_OFFSET = 0x1  # tfhd: an explicit base_data_offset
# trun flags: a data offset, then each sample's duration, size, flags and composition offset
RUN_FLAGS = 0x1 | 0x100 | 0x200 | 0x400 | 0x800


class Interleaver:
    """A stream's pieces in, the same pieces out with each fragment ``interleaved`` (read against the init segment
    before it). A fragment it cannot read goes on as it is (and is said once in the log)."""

    def __init__(self) -> None:
        self.defaults: dict[int, tuple[int, int, int, int]] = {}
        self.timescales: dict[int, int] = {}
        self.warned = False

    def __call__(self, piece: Piece) -> Piece:
        if piece.kind == "init":
            moov = next((box for kind, box in children(piece.data, 0) if kind == b"moov"), None)
            if moov is not None:
                self.defaults = trex_defaults(moov)
                self.timescales = {
                    trak_id(trak): timescale_of(next(find(trak, b"mdia", b"mdhd"))) for trak in find(moov, b"trak")
                }
            return piece
        try:
            return replace(piece, data=interleaved(piece.data, self.defaults, self.timescales))
        except (ValueError, struct.error, StopIteration, IndexError) as exc:
            if not self.warned:
                self.warned = True
                log.warning("the stream's fragments are relayed as the muxer wrote them: %s", exc)
            return piece


def interleaved(fragment: bytes, defaults: dict[int, tuple[int, int, int, int]], timescales: dict[int, int]) -> bytes:
    """``fragment`` (a ``moof`` and its ``mdat``) with its tracks' samples laid out by decode time (seconds, from
    each track's ``timescales``), one run for each stretch of one track's samples; ``defaults`` are the init
    segment's ``trex`` values (``fragments.trex_defaults``). A fragment of one track, or whose samples are in that
    order already, comes back as it is. ``ValueError`` when it is not what ffmpeg's muxer writes with
    ``fragments.STREAM_MOVFLAGS``."""
    parts = list(children(fragment, 0))
    if [kind for kind, _ in parts] != [b"moof", b"mdat"] or sum(len(box) for _, box in parts) != len(fragment):
        raise ValueError("a fragment that is not one moof and its mdat")
    moof, mdat = parts[0][1], parts[1][1]
    if struct.unpack(">I", mdat[:4])[0] == 1:
        raise ValueError("a fragment with a 64-bit mdat")
    for tfhd in find(moof, b"traf", b"tfhd"):
        if int.from_bytes(tfhd[9:12], "big") & (BASE_IS_MOOF | BASE_OFFSET) != BASE_IS_MOOF:
            raise ValueError("a fragment whose offsets do not count from its moof (default_base_moof)")
    samples = fragment_samples(moof, defaults)
    payload = len(moof) + 8
    for track_id, track in samples.items():
        if track_id not in timescales or timescales[track_id] <= 0:
            raise ValueError(f"a fragment's track {track_id} the init segment does not name")
        if any(s.at < payload or s.at + s.size > len(fragment) for s in track):
            raise ValueError("a fragment's sample outside its mdat")
    order = sorted(
        (
            (s.dts / timescales[track_id], track_id, n)
            for track_id, track in samples.items()
            for n, s in enumerate(track)
        ),
    )
    laid = [(track_id, samples[track_id][n]) for _, track_id, n in order]
    runs: list[tuple[int, list[Sample]]] = []  # (track, its samples), in the mdat's order
    for track_id, sample in laid:
        if runs and runs[-1][0] == track_id:
            runs[-1][1].append(sample)
        else:
            runs.append((track_id, [sample]))
    if len(runs) <= len(samples):  # (one track, or the tracks one after the other already)
        return fragment

    def rebuilt(offsets: list[int]) -> bytes:
        """The moof with each track's runs (``offsets``: where each run's bytes start, from the moof)."""
        trafs = []
        at = iter(offsets)
        where = {id(run): next(at) for run in runs}
        for traf in find(moof, b"traf"):
            track_id = struct.unpack(">I", next(find(traf, b"tfhd"))[12:16])[0]
            kept = [box for kind, box in children(traf) if kind != b"trun"]
            own = [_trun(run, where[id(run)]) for run in runs if run[0] == track_id]
            trafs.append(_box(b"traf", kept + own))
        inside = [box if kind != b"traf" else b"" for kind, box in children(moof)]
        return _box(b"moof", [box for box in inside if box] + trafs)

    size = len(rebuilt([0] * len(runs)))
    offsets, at = [], size + 8
    for _, run in runs:
        offsets.append(at)
        at += sum(s.size for s in run)
    data = b"".join(fragment[s.at : s.at + s.size] for _, s in laid)
    return rebuilt(offsets) + struct.pack(">I4s", 8 + len(data), b"mdat") + data


def _trun(run: tuple[int, list[Sample]], offset: int) -> bytes:
    samples = run[1]
    signed = any(s.offset < 0 for s in samples)
    fields = b"".join(
        struct.pack(">IIIi" if signed else ">IIII", s.duration, s.size, s.flags, s.offset) for s in samples
    )
    header = struct.pack(">I", (1 if signed else 0) << 24 | RUN_FLAGS) + struct.pack(">Ii", len(samples), offset)
    return _box(b"trun", [header + fields])


def _box(kind: bytes, inside: list[bytes]) -> bytes:
    body = b"".join(inside)
    return struct.pack(">I4s", 8 + len(body), kind) + body
