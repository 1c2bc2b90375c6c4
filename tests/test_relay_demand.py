"""A rendering clip's fragments are relayed only once a viewer waits for them (``jobs/relay.py``, on demand): a render
nobody watches writes nothing to the relay's Redis; a viewer who comes mid-render, or at its very end, is relayed the
whole stream from its init segment, in order; the API's wait for a stream says a viewer waits. Real Redis."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from jobs import relay
from quoteclip import redis_keys
from renderer.fragments import Piece


def pieces(count: int) -> list[Piece]:
    """An init segment and ``count`` fragments (the relay reads only their kind, bytes and times)."""
    made = [Piece("init", b"I" * 100, codecs="avc1.64001f")]
    made += [Piece("fragment", bytes([n]) * 1000, start=0.3 * n, seconds=0.3) for n in range(1, count + 1)]
    return made


@pytest.fixture
def connection(redis_url: str) -> Iterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    client.close()


def writer(redis_url: str, job_id: str, max_bytes: int = 96 * 1024**2) -> relay.Relay:
    return relay.Relay(Redis.from_url(redis_url), job_id, 3.0, max_bytes, on_demand=True)


def stored_bytes(connection: Redis, job_id: str) -> list[bytes]:
    """The pieces' bytes the stream holds, in order, and ``end`` where it ended."""
    entries = connection.xrange(redis_keys.stream(job_id))
    return [fields.get(b"d", fields.get(b"k")) for _, fields in entries]


def test_a_render_nobody_watches_writes_nothing_to_the_relay(redis_url, connection) -> None:
    job_id = "clip-unwatched"
    relayed = writer(redis_url, job_id)
    for piece in pieces(5):
        relayed.piece(piece)
    relayed.finished()
    relayed.close()
    assert connection.exists(redis_keys.stream(job_id), redis_keys.stream_index(job_id)) == 0
    assert relayed.state == "ended" and not relayed.watched


@pytest.mark.parametrize("comes_after", [0, 3, 5])
def test_a_viewer_who_comes_mid_render_is_relayed_the_whole_stream(redis_url, connection, comes_after) -> None:
    """A viewer waits (as ``begin`` says it) after ``comes_after`` fragments, before the first, mid-render or after
    the last and before the render is checked: the stream holds the init segment and every fragment, in order, and
    its end; a follower reads every byte."""
    job_id = f"clip-late-{comes_after}"
    made = pieces(5)
    relayed = writer(redis_url, job_id)
    for piece in made[: comes_after + 1]:
        relayed.piece(piece)
    assert connection.exists(redis_keys.stream(job_id)) == 0  # (nobody asked yet)

    async def viewer() -> list[bytes]:
        redis = AsyncRedis.from_url(redis_url)
        try:
            await relay.want(redis, job_id)
            for piece in made[comes_after + 1 :]:
                relayed.piece(piece)
            await asyncio.to_thread(relayed.finished)

            async def rendering() -> bool:
                return True

            begun = await relay.begin(redis, job_id, time.monotonic() + 10, rendering)
            assert begun is not None and begun.codecs == "avc1.64001f"
            return [chunk async for chunk in relay.follow(redis, begun)]
        finally:
            await redis.aclose()

    got = asyncio.run(viewer())
    relayed.close()
    assert got == [p.data for p in made]
    assert stored_bytes(connection, job_id) == [p.data for p in made] + [b"end"]


def test_the_wait_for_a_stream_says_a_viewer_waits(redis_url, connection) -> None:
    job_id = "clip-wanted"

    async def wait() -> relay.Begun | None:
        redis = AsyncRedis.from_url(redis_url)

        async def rendering() -> bool:
            return True

        try:
            return await relay.begin(redis, job_id, time.monotonic() + 0.3, rendering)
        finally:
            await redis.aclose()

    assert asyncio.run(wait()) is None
    left = connection.pttl(redis_keys.stream_wanted(job_id))
    assert 0 < left <= relay.WANTED_MS


def test_a_render_kept_past_the_relays_cap_is_not_relayed_from_a_later_ask(redis_url, connection) -> None:
    """What the worker keeps for a viewer who has not come is bounded by the relay's cap: past it, a later viewer
    waits for the stored clip (the stream is not relayed without its start)."""
    job_id = "clip-kept-over"
    relayed = writer(redis_url, job_id, max_bytes=3000)
    for piece in pieces(5):
        relayed.piece(piece)
    connection.set(redis_keys.stream_wanted(job_id), 1, px=5000)
    relayed.finished()
    relayed.close()
    assert connection.exists(redis_keys.stream(job_id)) == 0 and relayed.waiting == []
