"""Wake status long-polls the moment a worker reports on their job: one Redis pub/sub subscription per API
process (workers publish on ``quoteclip:events:<job id>`` at each stage or progress change, jobs.status.announce).
Without it (Redis restarting, an app run without its lifespan) a long-poll looks again every ``POLL`` seconds."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis.exceptions import RedisError

from quoteclip import redis_keys, redis_url

log = logging.getLogger(__name__)

POLL = 0.05  # seconds between looks while not subscribed (one Redis read each)
FALLBACK = 0.5  # seconds between looks while subscribed: for changes no worker announces (a work-horse killed)
RETRY = 1.0  # seconds before subscribing again after Redis went away


class JobEvents:
    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url
        self.subscribed = False
        self._waiting: dict[str, set[asyncio.Event]] = {}

    async def listen(self) -> None:
        """Run for the app's life (its lifespan starts and cancels it): subscribe, and set the events of the
        long-polls waiting on each job a message names."""
        prefix = redis_keys.events("")
        while True:
            try:
                async with redis_url.async_client(self.redis_url) as redis, redis.pubsub() as pubsub:
                    await pubsub.psubscribe(redis_keys.EVENTS)
                    self.subscribed = True
                    self._wake_all()  # those that began waiting unsubscribed wait on the shorter step no longer
                    async for message in pubsub.listen():
                        if message["type"] == "pmessage":
                            job_id = message["channel"].decode()[len(prefix) :]
                            for event in self._waiting.get(job_id, ()):
                                event.set()
            except (RedisError, OSError) as exc:
                log.warning("job events: %s; long-polls look every %.2f s until Redis answers again", exc, POLL)
            finally:
                self.subscribed = False
                self._wake_all()
            await asyncio.sleep(RETRY)

    def _wake_all(self) -> None:
        for events in self._waiting.values():
            for event in events:
                event.set()

    @asynccontextmanager
    async def watch(self, job_id: str) -> AsyncIterator[Watch]:
        """Register before reading the job's status, so a change announced in between is not missed."""
        watch = Watch(self)
        self._waiting.setdefault(job_id, set()).add(watch.event)
        try:
            yield watch
        finally:
            waiting = self._waiting.get(job_id, set())
            waiting.discard(watch.event)
            if not waiting:
                self._waiting.pop(job_id, None)


class Watch:
    def __init__(self, events: JobEvents) -> None:
        self.events = events
        self.event = asyncio.Event()

    async def changed(self, timeout: float) -> None:
        """Until the job's next announcement, the next look (``FALLBACK`` or ``POLL`` seconds), or ``timeout``."""
        step = FALLBACK if self.events.subscribed else POLL
        try:
            await asyncio.wait_for(self.event.wait(), max(0.0, min(timeout, step)))
        except TimeoutError:
            pass
        self.event.clear()
