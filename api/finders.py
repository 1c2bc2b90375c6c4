"""The API's bounded place for work that waits on a stranger's page or spends CPU on a stranger's words: reading a
page's own captions, finding quotes in them or in a batch's transcript.

It has threads of its own (``QUOTECLIP_FINDERS``), never the request threads that answer `/healthz`, stored links
and status polls: 50 slow caption pages at once hold these few threads, and every other route answers in its usual
time. As many requests more may wait for a thread; past that a request is answered `503` with `Retry-After` at
once. A request leaving early (its client gone) keeps its place until its work ends, so the place stays bounded.
Each piece of work is bounded itself: the page by its limits (sources/egress.py), a quote search by its CPU time
(``quoteclip.transcript.MAX_SEARCH_SECONDS``), a batch's by FINDING_SECONDS.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .errors import APIError

T = TypeVar("T")
RETRY_AFTER = "5"


class Finders:
    """``size`` threads of their own, and a place for as many requests more to wait for one."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.pool = ThreadPoolExecutor(size, thread_name_prefix="quoteclip-finder")
        self.places = threading.BoundedSemaphore(2 * size)

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """``work(*args)`` in one of the threads, awaited; `503` at once when every place is taken."""
        if not self.places.acquire(blocking=False):
            raise APIError(
                503,
                f"finding quotes: {2 * self.size} requests are reading pages or finding quotes on this server "
                "already; try again",
                {"Retry-After": RETRY_AFTER},
            )
        try:
            future = self.pool.submit(work, *args)
        except BaseException:
            self.places.release()
            raise
        future.add_done_callback(lambda _: self.places.release())
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
