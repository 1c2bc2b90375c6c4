"""The stream's head: the init segment and the first fragment of a render's fragmented copy made one progressive
MP4, as Chromium's ``<video src>`` is best given them (``api/streams.py`` sends it to Chromium's player only).

Its ``moov`` is the init segment's, with each track's sample tables (``stts``, ``ctts``, ``stss``, ``stsc``,
``stsz``, ``stco``) listing the first fragment's samples, and its edit lists lasting to those samples' end (or,
where the init segment declares the clip's length, to it); the fragment's ``mdat`` follows it unchanged. The boxes
and the fragment's samples are read with the splitter's own reader (``renderer/fragments.py``); this module only
writes.

The init segment itself is given the clip's length before it is relayed (``with_length``: known from the cut before
the first frame, ``jobs/pipeline/steps.py``), so a player shows the length while the clip streams; the head keeps
it (``_lasting``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import replace

from .fragments import Sample, children, find, fragment_samples, timescale_of, trak_id, trex_defaults

NON_SYNC = 0x10000  # sample_is_non_sync_sample, in a sample's flags
REBUILT = {b"stts", b"ctts", b"stss", b"stsc", b"stsz", b"stz2", b"stco", b"co64"}


def progressive_head(init: bytes, fragment: bytes) -> bytes:
    """The init segment and the first fragment as a progressive player is best given them: ``ftyp``, a ``moov`` whose
    sample tables list the first fragment's samples, and that fragment's ``mdat`` (the fragments after it follow as
    they are: the ``moov`` keeps its ``mvex``). A player's demuxer (FFmpeg's, in Chromium's ``<video src>``) reads
    a clip's frame rate off the ``moov``'s samples; an init segment without samples leaves it reading 21 frames of
    fragments first, so with this head the first frame plays from a first fragment of a few frames. The samples'
    bytes are the fragment's, in the same order: the head decodes to the fragment's frames and sound, at its times
    (its edit lists, in the ``moov``, are the init segment's). ``ValueError`` when the two are not what ffmpeg's
    muxer writes with ``fragments.STREAM_MOVFLAGS``."""
    tops = list(children(init, 0))
    if [kind for kind, _ in tops][-1:] != [b"moov"] or b"ftyp" not in {kind for kind, _ in tops}:
        raise ValueError("an init segment without its ftyp and moov")
    moov = tops[-1][1]
    parts = list(children(fragment, 0))
    if [kind for kind, _ in parts] != [b"moof", b"mdat"] or sum(len(box) for _, box in parts) != len(fragment):
        raise ValueError("a fragment that is not one moof and its mdat")
    moof, mdat = parts[0][1], parts[1][1]
    if any(int.from_bytes(tfhd[9:12], "big") & 0x20001 != 0x20000 for tfhd in find(moof, b"traf", b"tfhd")):
        raise ValueError("a fragment whose offsets do not count from its moof (default_base_moof)")
    mdat_header = 16 if struct.unpack(">I", mdat[:4])[0] == 1 else 8
    payload = len(moof) + mdat_header  # where the mdat's payload starts in the fragment
    samples = fragment_samples(moof, trex_defaults(moov))
    for track in samples.values():
        if any(s.at < payload or s.at + s.size > len(fragment) for s in track):
            raise ValueError("a fragment's sample outside its mdat")
    prefix = b"".join(box for _, box in tops[:-1])
    movie_scale = timescale_of(next(find(moov, b"mvhd")))

    def head_moov(base: int) -> bytes:  # base: where the mdat's payload starts in the head
        def trak(box: bytes) -> bytes:
            track = samples.get(trak_id(box), [])
            scale = timescale_of(next(find(box, b"mdia", b"mdhd")))
            listed, end = _lasting(track, _duration(next(find(box, b"mdia", b"mdhd")), 16, 24))

            def stbl(box: bytes) -> bytes:
                kept = [child for kind, child in children(box) if kind not in REBUILT]
                return _box(b"stbl", kept[:1] + _tables(listed, base - payload) + kept[1:])

            box = _rebuilt(box, (b"mdia", b"minf", b"stbl"), stbl)
            if not track:
                return box
            return _rebuilt(box, (b"edts", b"elst"), lambda elst: _edits_to(elst, end, scale, movie_scale))

        return _box(b"moov", [trak(child) if kind == b"trak" else child for kind, child in children(moov)])

    base = len(prefix) + len(head_moov(0)) + mdat_header
    return prefix + head_moov(base) + mdat


def with_length(init: bytes, seconds: float) -> bytes:
    """The init segment ``init`` declaring the clip's length, ``seconds``, as a progressive player reads a length off
    an MP4 that is still arriving: the ``mvhd``'s and each ``tkhd``'s duration (the movie's timescale), each
    ``mdhd``'s (its track's: the length past the media time its edit starts at, the encoder's delay or priming),
    and a ``mehd`` in the ``mvex`` (the fragments' whole length). The edit lists are left as they are (each to the
    end of its track's fragments). Without a length a player shows none (``Infinity``) until the last fragment.
    ``ValueError`` when ``init`` is not an ``ftyp`` and a ``moov``."""
    tops = list(children(init, 0))
    if [kind for kind, _ in tops][-1:] != [b"moov"] or b"ftyp" not in {kind for kind, _ in tops}:
        raise ValueError("an init segment without its ftyp and moov")
    if not seconds > 0:
        raise ValueError(f"a clip of {seconds} s")
    moov = tops[-1][1]
    movie = round(seconds * timescale_of(next(find(moov, b"mvhd"))))

    def trak(box: bytes) -> bytes:
        media = round(seconds * timescale_of(next(find(box, b"mdia", b"mdhd"))))
        box = _rebuilt(box, (b"tkhd",), lambda tkhd: _with_duration(tkhd, movie, 20, 28))
        return _rebuilt(box, (b"mdia", b"mdhd"), lambda mdhd: _with_duration(mdhd, media, 16, 24))

    def mvex(box: bytes) -> bytes:
        kept = [child for kind, child in children(box) if kind != b"mehd"]
        mehd = (
            _full_box(b"mehd", 0, struct.pack(">I", movie))
            if movie < 1 << 32
            else _full_box(b"mehd", 1, struct.pack(">Q", movie))
        )
        return _box(b"mvex", [mehd, *kept])

    changed = {b"mvhd": lambda box: _with_duration(box, movie, 16, 24), b"trak": trak, b"mvex": mvex}
    inside = [changed[kind](child) if kind in changed else child for kind, child in children(moov)]
    return b"".join(box for _, box in tops[:-1]) + _box(b"moov", inside)


def _with_duration(box: bytes, duration: int, at: int, at_v1: int) -> bytes:
    """A full box with the duration field its version puts at ``at`` (version 0: 32 bits) or ``at_v1`` (version 1:
    64 bits) past its header set to ``duration`` (a version 0 box whose field cannot hold it keeps its own)."""
    out = bytearray(box)
    if box[8] == 1:
        out[8 + at_v1 : 8 + at_v1 + 8] = struct.pack(">Q", duration)
    elif duration < 1 << 32:
        out[8 + at : 8 + at + 4] = struct.pack(">I", duration)
    return bytes(out)


def _duration(box: bytes, at: int, at_v1: int) -> int:
    """A full box's duration field (where ``_with_duration`` writes it)."""
    field = box[8 + at_v1 : 16 + at_v1] if box[8] == 1 else box[8 + at : 12 + at]
    return int.from_bytes(field, "big")


def _lasting(track: list[Sample], declared: int) -> tuple[list[Sample], int]:
    """A track's head samples as the head lists them, and where its edit ends (its samples' last presentation, from
    their first decode time, in the track's timescale). With the clip's length ``declared`` (the init segment's
    ``mdhd``, ``with_length``), the last sample is listed as lasting to it and the edit ends there, so a player
    reads the clip's length off the head (FFmpeg's demuxer, Chromium's, takes a track's length from its sample
    table and its edit list, not from the ``mdhd`` alone); the fragments after it carry their own decode times
    (``tfdt``), so every sample plays at its time as before."""
    if not track:
        return track, 0
    end = max(s.dts - track[0].dts + s.offset + s.duration for s in track)
    listed = sum(s.duration for s in track)
    if declared <= listed:
        return track, end
    return track[:-1] + [replace(track[-1], duration=declared - listed + track[-1].duration)], end - listed + declared


def _edits_to(elst: bytes, end: int, scale: int, movie_scale: int) -> bytes:
    """An edit list whose edit of unknown length (0: to the end of the fragments, as an init segment has it) lasts to
    ``end`` (the head's samples' last presentation, in the track's ``scale``) instead: an edit of length 0 in a
    ``moov`` with samples presents none of them. The fragments after the head are played on from its end, as they
    are after any ``moov`` with samples."""
    version = elst[8]
    field, count = (">QqI", 20) if version == 1 else (">IiI", 12)
    entries = struct.unpack(">I", elst[12:16])[0]
    out = bytearray(elst)
    for n in range(entries):
        at = 16 + n * count
        duration, media_time, rate = struct.unpack(field, elst[at : at + count])
        if duration == 0 and media_time >= 0:
            length = max(0, -(-(end - media_time) * movie_scale // scale))  # (rounded up: to the last sample's end)
            out[at : at + count] = struct.pack(field, length, media_time, rate)
    return bytes(out)


def _box(kind: bytes, children: list[bytes]) -> bytes:
    body = b"".join(children)
    return struct.pack(">I4s", 8 + len(body), kind) + body


def _full_box(kind: bytes, version: int, body: bytes) -> bytes:
    return _box(kind, [struct.pack(">I", version << 24) + body])


def _rebuilt(box: bytes, path: tuple[bytes, ...], change: Callable[[bytes], bytes]) -> bytes:
    """``box`` with the boxes at ``path`` below it changed (each container on the way rebuilt to its new size)."""
    if not path:
        return change(box)
    inside = [_rebuilt(child, path[1:], change) if kind == path[0] else child for kind, child in children(box)]
    return _box(box[4:8], inside)


def _runs(values: list[int]) -> list[tuple[int, int]]:
    """``values`` as (count, value) runs."""
    runs: list[tuple[int, int]] = []
    for value in values:
        if runs and runs[-1][1] == value:
            runs[-1] = (runs[-1][0] + 1, value)
        else:
            runs.append((1, value))
    return runs


def _tables(samples: list[Sample], shift: int) -> list[bytes]:
    """A track's sample tables for ``samples`` (none: the empty tables of an init segment), each run of samples whose
    bytes follow one another a chunk, placed ``shift`` bytes from where they are in the fragment."""
    chunks: list[list[int]] = []  # [where it starts, where it ends, how many samples, their description]
    for sample in samples:
        if chunks and chunks[-1][1] == sample.at and chunks[-1][3] == sample.description:
            chunks[-1][1:3] = [sample.at + sample.size, chunks[-1][2] + 1]
        else:
            chunks.append([sample.at, sample.at + sample.size, 1, sample.description])
    stts = _runs([s.duration for s in samples])
    tables = [_full_box(b"stts", 0, struct.pack(">I", len(stts)) + b"".join(struct.pack(">II", *r) for r in stts))]
    if any(s.offset for s in samples):
        ctts = _runs([s.offset for s in samples])
        signed = any(s.offset < 0 for s in samples)
        body = b"".join(struct.pack(">Ii" if signed else ">II", *r) for r in ctts)
        tables.append(_full_box(b"ctts", 1 if signed else 0, struct.pack(">I", len(ctts)) + body))
    if any(s.flags & NON_SYNC for s in samples):
        sync = [n for n, s in enumerate(samples, 1) if not s.flags & NON_SYNC]
        tables.append(
            _full_box(b"stss", 0, struct.pack(">I", len(sync)) + b"".join(struct.pack(">I", n) for n in sync))
        )
    stsc = [struct.pack(">III", n, count, description) for n, (_, _, count, description) in enumerate(chunks, 1)]
    stsc = [entry for n, entry in enumerate(stsc) if n == 0 or entry[4:] != stsc[n - 1][4:]]
    tables.append(_full_box(b"stsc", 0, struct.pack(">I", len(stsc)) + b"".join(stsc)))
    sizes = b"".join(struct.pack(">I", s.size) for s in samples)
    tables.append(_full_box(b"stsz", 0, struct.pack(">II", 0, len(samples)) + sizes))
    offsets = b"".join(struct.pack(">I", chunk[0] + shift) for chunk in chunks)
    tables.append(_full_box(b"stco", 0, struct.pack(">I", len(chunks)) + offsets))
    return tables
