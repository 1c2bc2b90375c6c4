"""A clip streamed to a visitor's player while it renders (figure 13h): what a progressive player can play of the
bytes it has. Chromium's media cache hands its demuxer whole 32 KiB blocks only until the answer ends, so the
newest fragment's last bytes wait for the next fragment's; a player plays where it has both tracks. Each streamed
fragment lays its samples out in decode-time order (the muxer's frag_interleave, renderer/fragments.py
STREAM_INTERLEAVE), so the bytes a player has play to
about their own time; as ffmpeg's muxer writes it (all the pictures, then all the sound), a fragment whose end is
held back plays not at all, and the player runs a fragment behind what was sent (a stall when the render keeps only
a little ahead of it)."""

from __future__ import annotations

import io
import struct

import av
import pytest
from test_streaming import Collected, decoded, quote

from jobs.pipeline.produce import produce_clips
from quoteclip.spec import build_spec
from renderer.fragments import Piece, children, find, fragment_samples, timescale_of, trak_id, trex_defaults
from renderer.head import progressive_head
from storage import LocalStorage


@pytest.fixture
def relayed(media, settings, tmp_path) -> tuple[Collected, str]:
    """A 4 s clip (a source with B-frames) rendered by the pipeline, its stream as the relay is handed it: (the
    stream, the stored clip)."""
    src = media(size="640x360", fps="30000/1001", duration=8, gop=60, bframes=True)
    stream = Collected()
    result = produce_clips(
        [build_spec(quote(str(src), 1.068, 5.068))], settings, LocalStorage(tmp_path / "s"), stream=stream
    )[0]
    assert stream.ended == "finished" and result.path is not None
    return stream, str(result.path)


def tracks_of(init: bytes) -> tuple[dict[int, tuple[int, int, int, int]], dict[int, int]]:
    moov = next(box for kind, box in children(init, 0) if kind == b"moov")
    scales = {trak_id(trak): timescale_of(next(find(trak, b"mdia", b"mdhd"))) for trak in find(moov, b"trak")}
    return trex_defaults(moov), scales


def laid_out(fragment: Piece, init: Piece) -> list[tuple[float, float, int]]:
    """The fragment's samples in the order of their bytes: (decode time, duration, track), seconds."""
    defaults, scales = tracks_of(init.data)
    moof = fragment.data[: struct.unpack(">I", fragment.data[:4])[0]]
    samples = [
        (s.at, s.dts / scales[track], s.duration / scales[track], track)
        for track, run in fragment_samples(moof, defaults).items()
        for s in run
    ]
    return [(dts, duration, track) for _, dts, duration, track in sorted(samples)]


def playable(fragment: Piece, init: Piece, have: int) -> float:
    """Seconds of the fragment a player plays with its first ``have`` bytes: to where both tracks' samples are whole,
    each track's from its start, in decode order (the shorter of the two)."""
    defaults, scales = tracks_of(init.data)
    moof = fragment.data[: struct.unpack(">I", fragment.data[:4])[0]]
    ends = []
    for track, run in fragment_samples(moof, defaults).items():
        reached = run[0].dts
        for sample in run:
            if sample.at + sample.size > have:
                break
            reached = sample.dts + sample.duration
        ends.append((reached - run[0].dts) / scales[track])
    return min(ends)


def test_each_fragment_lays_its_samples_out_in_decode_order(relayed) -> None:
    """In every fragment's bytes the samples of the picture and the sound come in the order of their decode times
    (within one sample), not one track after the other: a player given all but a fragment's last samples plays all
    but their time."""
    stream, _ = relayed
    init, fragments = stream.pieces[0], stream.pieces[1:]
    both = [f for f in fragments if len({track for _, _, track in laid_out(f, init)}) == 2]
    assert len(both) >= len(fragments) - 1 >= 10
    for fragment in both:
        order = laid_out(fragment, init)
        for (dts, duration, _), (later, _, _) in zip(order, order[1:], strict=False):
            assert later >= dts - duration - 1e-6, (fragment.start, order)
        moof_size = struct.unpack(">I", fragment.data[:4])[0]
        last = max(
            s.at for run in fragment_samples(fragment.data[:moof_size], tracks_of(init.data)[0]).values() for s in run
        )
        longest = max(duration for _, duration, _ in order)
        # the fragment's last sample held back (the part block's bytes): the rest plays, less about two samples
        assert playable(fragment, init, last) >= fragment.seconds - 2 * longest - 1e-6, fragment.start


def test_a_fragment_with_half_its_bytes_held_back_still_plays_in_part(relayed) -> None:
    """Half a fragment's sample bytes held back (a part block of a player's 32 KiB): a player still plays some of it
    (as ffmpeg's muxer writes it, the sound all last, none). The first fragment is not held back: it goes in the
    stream's head, which ends on a block's end (api/streams.py)."""
    stream, _ = relayed
    init, fragments = stream.pieces[0], stream.pieces[2:-1]
    for fragment in fragments:
        moof_size = struct.unpack(">I", fragment.data[:4])[0]
        half = moof_size + 8 + (len(fragment.data) - moof_size - 8) // 2
        assert playable(fragment, init, half) > 0, fragment.start


def test_the_interleaved_stream_decodes_to_the_stored_clip_and_makes_a_head(relayed) -> None:
    """The stream, interleaved, decodes to the stored clip's frames and sound; its head (Chromium's first answer)
    holds the first fragment's frames."""
    stream, stored = relayed
    assert decoded(stream.data()) == decoded(stored)
    init, first = stream.pieces[0], stream.pieces[1]
    head = progressive_head(init.data, first.data)
    with av.open(io.BytesIO(head)) as alone:
        assert alone.streams.video[0].frames == 9


def test_a_progressive_players_first_fragments_end_on_its_blocks_end(relayed) -> None:
    """A progressive player is given the head and the fragments of the clip's first 3 s each ending on a 32 KiB
    block's end (a ``free`` box after it): the player's media cache hands over every byte of a fragment as soon as
    it is sent, not a fragment later; later fragments are sent as they are. The stream still decodes whole."""
    from api.streams import PLAYER_BLOCK, ForPlayers

    stream, stored = relayed
    for head in (True, False):
        players = ForPlayers(head=head)
        sent = 0
        ends = []
        given = []
        for piece in stream.pieces:
            out = players(piece.data)
            given.append(out)
            sent += len(out)
            if out:
                ends.append((piece.start, sent))
        if not head:  # (the stream as Firefox is given it: the init segment, the fragments, the free boxes)
            assert decoded(b"".join(given) + players.rest()) == decoded(stored)
        early = [end % PLAYER_BLOCK for start, end in ends if start < 3.0]
        assert len(early) >= 10 and not any(early), early
        assert any(end % PLAYER_BLOCK for start, end in ends if start > 3.5), "later fragments were padded too"
