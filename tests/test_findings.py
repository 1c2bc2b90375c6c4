"""A crowd asking one link at once shares one look at the store and the queue (api/fanout.py ``Findings``): the
bucket is asked once for fifty requests, not fifty times; and a failing look is shared, never kept."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio.to_thread
import pytest
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from fastapi.testclient import TestClient

from api import create_app
from api.fanout import Findings, blocking_client
from quoteclip import links
from quoteclip.settings import Settings

SITE, SECRET = "site", "site-secret-0123456789"


def test_requests_at_once_share_one_answer_and_later_ones_take_it_for_a_while() -> None:
    findings = Findings(kept=0.5)
    calls: list[int] = []
    gate = threading.Event()

    def make() -> int:
        calls.append(1)
        gate.wait(5)
        return len(calls)

    async def crowd() -> None:
        asks = [asyncio.ensure_future(findings.look("k", make)) for _ in range(20)]
        await asyncio.sleep(0.3)  # (all twenty asking while the first makes it)
        asks[0].cancel()  # the first to ask leaves, and another: the others' answer still comes
        asks[5].cancel()
        gate.set()
        answers = await asyncio.gather(*asks, return_exceptions=True)
        assert isinstance(answers.pop(5), asyncio.CancelledError)
        assert isinstance(answers.pop(0), asyncio.CancelledError)
        assert answers == [1] * 18 and len(calls) == 1 and findings.made == 1
        assert await findings.look("k", make) == 1  # within ``kept``: taken, not made
        await asyncio.sleep(0.6)
        assert await findings.look("k", make) == 2 and findings.made == 2  # past it: made anew

    asyncio.run(crowd())


def test_requests_waiting_for_a_look_under_way_hold_no_worker_thread() -> None:
    """Only the first request's look takes a worker thread: with two threads in all, both could be taken by the
    crowd's requests waiting for it, and nothing else in the process would run in a thread until it was made."""
    findings = Findings()
    gate = threading.Event()

    def make() -> int:
        gate.wait(5)
        return 1

    async def crowd() -> None:
        anyio.to_thread.current_default_thread_limiter().total_tokens = 2
        asks = [asyncio.ensure_future(findings.look("k", make)) for _ in range(20)]
        await asyncio.sleep(0.2)
        try:
            assert await asyncio.wait_for(run_in_threadpool(lambda: 42), 2) == 42
        finally:
            gate.set()
        assert await asyncio.gather(*asks) == [1] * 20

    asyncio.run(crowd())


def test_a_failure_is_shared_by_those_waiting_but_never_kept() -> None:
    findings = Findings(kept=60)
    gate = threading.Event()

    def failing() -> int:
        gate.wait(5)
        raise RuntimeError("the store failed")

    async def crowd() -> None:
        asks = [asyncio.ensure_future(findings.look("k", failing)) for _ in range(5)]
        await asyncio.sleep(0.2)
        gate.set()
        errors = await asyncio.gather(*asks, return_exceptions=True)
        assert all(isinstance(e, RuntimeError) for e in errors)
        assert await findings.look("k", lambda: 7) == 7  # (asked again: made, not the failure)

    asyncio.run(crowd())


@pytest.fixture
def source_url(media, http_source) -> str:
    (http_source.root / "crowd.mp4").symlink_to(media(size="320x180", duration=4, gop=30))
    return http_source.url("crowd.mp4")


@pytest.mark.integration
def test_fifty_heads_of_one_new_clips_link_ask_the_store_once(queue_env: dict[str, str], s3, source_url: str) -> None:
    env = {**queue_env, **s3.env(), "QUOTECLIP_SITE_KEYS": f"{SITE}:{SECRET}"}
    env.pop("QUOTECLIP_STORAGE_DIR")
    app = create_app(Settings.from_env(env))
    clip = {"source": source_url, "start": 1, "end": 2, "caption": "a crowd", "watermark": "StarZero"}
    path = links.sign(clip, SITE, SECRET)
    with TestClient(app, follow_redirects=False) as client:
        storage = app.state.services.storage
        stat = storage.stat
        asked: list[Any] = []

        def counted(*args: Any, **kwargs: Any) -> Any:
            asked.append(args)
            time.sleep(0.2)  # (a slow bucket: the others arrive while the first asks)
            return stat(*args, **kwargs)

        storage.stat = counted
        with ThreadPoolExecutor(50) as pool:
            statuses = list(pool.map(lambda _: client.head(path).status_code, range(50)))
    assert statuses == [404] * 50  # (not rendered yet: a HEAD never starts one)
    assert 1 <= len(asked) <= 3, f"the store was asked {len(asked)} times for 50 requests at once"


def test_a_thread_holding_a_pooled_connection_never_waits_for_itself(redis_url: str) -> None:
    """The API's threads share a pool of one or two connections (QUOTECLIP_API_REDIS_CONNECTIONS); rq's enqueue of
    a job that waits on others reads them while its pipeline watches. Eight threads doing that at once through a
    pool of one all finish: the one holding the pool's connection is given another at once, closed after."""
    client = blocking_client(redis_url, 1)
    client.set("nested-key", b"1")

    def nested(_: int) -> Any:
        with client.pipeline() as pipe:
            pipe.watch("nested-watched")  # (holds a connection until the pipeline ends)
            return client.get("nested-key")  # (another, while it is held)

    with ThreadPoolExecutor(8) as pool:
        got = [f.result(timeout=5) for f in [pool.submit(nested, n) for n in range(8)]]
    assert got == [b"1"] * 8
    pool_ = client.connection_pool
    assert len(pool_._connections) == 1, "a connection beyond the cap was kept"  # type: ignore[attr-defined]
    client.close()


def test_link_counts_wait_in_the_process_and_reach_redis_within_half_a_second(redis_url: str) -> None:
    """A link request's count costs no Redis command of its own: counted in memory, added in Redis with the others
    by a timer within ``FLUSH`` seconds (and at once by a /metrics scrape)."""
    from redis import Redis

    from api.links import metrics
    from api.links.outcomes import Answer, Outcome

    connection = Redis.from_url(redis_url)
    answer = Answer(Response(), Outcome.STORED, "crowd", "clip")
    for _ in range(200):
        metrics.count(connection, answer)
    assert connection.hget(metrics.REQUESTS, "crowd|clip|stored") is None  # (not yet: one pipeline later)
    time.sleep(metrics.FLUSH + 0.5)
    assert connection.hget(metrics.REQUESTS, "crowd|clip|stored") == b"200"
    connection.close()


def test_the_nesting_pool_uses_only_what_redis_py_gives_a_pool() -> None:
    """``NestingPool`` builds on redis-py's ``BlockingConnectionPool``: its ``connection_class`` and
    ``connection_kwargs``, and its ``get_connection``/``release``. A redis-py that renames them fails here, in the
    everyday tier (no Redis needed: the address refuses)."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    from api.fanout import NestingPool

    pool = NestingPool.from_url("redis://127.0.0.1:1/0", max_connections=1, timeout=0.1, socket_connect_timeout=0.5)
    assert pool.connection_kwargs["port"] == 1 and callable(pool.connection_class)
    with pytest.raises(RedisConnectionError):
        pool.get_connection()  # (the pool's own: refused)
    assert getattr(pool._held, "count", 0) == 0  # (a connection not given is not counted)
    pool._held.count = 1  # a thread holding one asks another: made beyond the cap, at once
    with pytest.raises(RedisConnectionError):
        pool.get_connection()
    assert not pool._beyond and pool._held.count == 1
    pool.disconnect()
