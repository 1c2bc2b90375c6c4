"""A request held while the clip it names renders (a ``<video src>`` or an ``<a href>`` cannot act on a 202): a
clip link's ``GET`` is answered with the clip as it renders once its stream begins (api/streams.py); otherwise (a
download, a poster, a ``HEAD``, streaming off, a render without a stream) the request waits for the stored clip,
woken by the worker's announcements (api/events.py), for at most ``QUOTECLIP_LINK_HOLD`` seconds, then 503 with
``Retry-After``; so is a range with an end (a link-preview crawler's ``bytes=0-524287``), answered ``206`` once
stored. A clip link's HLS parts (``…/index.m3u8``, ``init.mp4``, ``N.m4s``) are answered from the same
stream.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from jobs.pipeline.stages import Stage
from jobs.queue import RenderState, render_state

from .. import streams
from ..caps import CapReached, address
from ..clips import RETRY_AFTER
from ..deps import Services
from .cache import Stored, stored_response
from .first import Pending, first_look, job_id
from .outcomes import CORS, Answer, Outcome, error_response
from .verify import Linked

RELOAD_WAIT = 5.0  # seconds a blocking reload of a stream under way waits for the segment it asks


async def link_answer(request: Request, svc: Services, linked: Linked) -> Answer:
    """A link's answer: the first one (api/links/first.py), else the clip as it renders, else held until stored."""
    first = await first_look(request, svc, linked)
    if isinstance(first, Answer):
        return first
    if apples_player(request, svc, linked):  # (the render started or joined: its playlist follows it)
        playlist = f"{request.url.path}/{streams.PLAYLIST_NAME}"
        headers = {**CORS, "Location": playlist, "Cache-Control": "no-store"}
        return linked.answer(Response(status_code=302, headers=headers), Outcome.STREAMED)
    with capped(svc, linked, "held", request):  # (per client address: api/caps.py)
        deadline = time.monotonic() + held_for(svc, linked)
        early = await answer_while_rendering(request, svc, first, deadline)
        if early is not None:
            return early
        found = await hold(svc, first, deadline)
    return await run_in_threadpool(after_hold, request, svc, first, found)


def held_for(svc: Services, linked: Linked) -> float:
    """Seconds a link's request waits for its clip: ``QUOTECLIP_LINK_HOLD``, longer for a download (a browser's
    ``<a href>`` saves nothing of a 503, and acts on no ``Retry-After``)."""
    if linked.variant == "download":
        return max(svc.settings.link_hold, svc.settings.download_hold)
    return svc.settings.link_hold


def apples_player(request: Request, svc: Services, linked: Linked) -> bool:
    """Whether a clip link's ``GET`` comes from Apple's media player (every browser and in-app browser of an iPhone
    plays a ``<video src>`` with it), known by what only it sends: its ``X-Playback-Session-Id`` header, or the
    two-byte range probe it opens with (``Range: bytes=0-1``). It plays only answers that honour ranges with a
    known length, which a clip being rendered has not: it is sent to the link's HLS event playlist instead
    (docs/streaming.md). A user agent alone decides nothing (WebKitGTK says "Safari" and plays the stream)."""
    if linked.variant != "clip" or request.method != "GET" or not svc.settings.stream:
        return False
    headers = request.headers
    return "x-playback-session-id" in headers or headers.get("range", "").replace(" ", "") == "bytes=0-1"


@contextmanager
def capped(svc: Services, linked: Linked, kind: str, request: Request) -> Iterator[None]:
    """One of the client's ``kind`` (held requests) for the block, else refused: 429 with ``Retry-After``."""
    try:
        release = svc.caps.take(kind, address(request))
    except CapReached as over:
        raise linked.refused(429, over.detail, Outcome.LIMITED, over.headers) from None
    try:
        yield
    finally:
        release()


async def part_answer(request: Request, svc: Services, linked: Linked, part: str) -> Answer:
    """A clip link's HLS stream while it renders: the playlist (an event playlist of the fragments so far; asked
    for a clip not stored, it starts or joins the render as the link itself does), the init segment and fragments.
    Not streaming (stored, streaming off, the render ended): 404, and the player plays the link itself."""
    if linked.variant != "clip":
        return Answer(streams.not_streamed(CORS, "only a clip link streams"), None)
    try:
        svc.caps.part(address(request))
    except CapReached as over:
        raise linked.refused(429, over.detail, Outcome.LIMITED, over.headers) from None
    job = await svc.hub.job(linked, functools.partial(job_id, svc, linked))
    if part != streams.PLAYLIST_NAME:
        return Answer(await streams.part_answer(svc, job, part, CORS, request), None)
    # a player's reload, or a render's stream underway; a blocking reload (``_HLS_msn=N``, the card's, asked as soon
    # as it has segment N-1) of a stream under way waits here for its segment: no held slot, no new reader
    wait = RELOAD_WAIT if (streams.asked_segment(request) or 0) > 1 else 0.0
    playing = await streams.playlist_answer(svc, job, CORS, wait=wait, request=request)
    if playing is not None:
        return Answer(playing, None)
    first = await first_look(request, svc, linked)  # start (or join) the render
    if isinstance(first, Answer):  # stored: the link itself plays it
        return first if first.response.status_code >= 400 else replace(first, response=streams.not_streamed(CORS))
    deadline = time.monotonic() + svc.settings.link_hold
    with capped(svc, linked, "held", request):
        found = await streams.joined(svc, first.job_id, deadline)
        if found is not None:
            left = max(0.0, deadline - time.monotonic())
            playing = await streams.playlist_answer(svc, first.job_id, CORS, wait=left, request=request)
            if playing is not None:
                return linked.answer(playing, Outcome.STREAMED)
    if time.monotonic() >= deadline:
        return await run_in_threadpool(after_hold, request, svc, first, None)
    return Answer(streams.not_streamed(CORS), None)


async def answer_while_rendering(request: Request, svc: Services, pending: Pending, deadline: float) -> Answer | None:
    """A request for a clip being rendered, answered with the clip as it renders: the fragments its worker relays,
    from the clip's start, as they come (api/streams.py), once its stream begins (before ``deadline``). None, and the
    request is held until the clip is stored (``hold``), for a download (the finished MP4, never a half-made one), a
    poster, a ``HEAD``, with streaming off, or when the render ends without a stream."""
    if pending.linked.variant != "clip" or request.method != "GET" or not svc.settings.stream:
        return None
    if bounded_range(request) or crawler(request):  # (bytes at known offsets, a file with its length: once stored)
        return None
    if streams.resumed(request):  # a player resuming a stream that was cut: the clip is rendered anew
        response = error_response(503, streams.RESUMED, {"Retry-After": RETRY_AFTER})
        return pending.linked.answer(response, Outcome.UNAVAILABLE)
    try:
        release = svc.caps.take("streams", address(request))
    except CapReached as over:
        raise pending.linked.refused(429, over.detail, Outcome.LIMITED, over.headers) from None
    try:
        found = await streams.joined(svc, pending.job_id, deadline)
    except BaseException:
        release()
        raise
    if found is None:
        release()
        return None
    head = svc.settings.stream_head and streams.reads_a_head(request)
    streamed = streams.RelayResponse(found, svc, CORS, progressive=True, head=head, release=release)
    return pending.linked.answer(streamed, Outcome.STREAMED)


BOUNDED = re.compile(r"\Abytes=\d+-\d+\Z")


def bounded_range(request: Request) -> bool:
    """Whether a request asks for a range with an end (``bytes=0-524287``, as link-preview crawlers ask an
    ``og:video``), which the stream of a clip being rendered cannot honour with its length: such a request is held
    until the clip is stored, then answered ``206`` with the clip's size. A player's ``bytes=0-`` (Chromium's,
    Firefox's first request) has no end and gets the stream; Apple's ``bytes=0-1`` probe is answered before
    (``apples_player``)."""
    return bool(BOUNDED.match(request.headers.get("range", "").replace(" ", "")))


# Link-preview crawlers, by the names their makers give them in their user agents (each documents its own): they
# fetch a page's og:video or player-card stream to read it, never to play it as it comes.
CRAWLERS = re.compile(
    r"facebookexternalhit|facebookcatalog|meta-externalagent|Twitterbot|LinkedInBot|Slackbot|Discordbot|"
    r"TelegramBot|WhatsApp|Pinterestbot|redditbot|Applebot|Googlebot|bingbot|Embedly|iframely",
    re.IGNORECASE,
)


def crawler(request: Request) -> bool:
    """Whether a request comes from a link-preview crawler (by its user agent: a crawler names itself): its GET of a
    clip being rendered is held until the clip is stored, then answered with the file and its length, rather than
    the stream (whose length is not known) a player is sent."""
    return bool(CRAWLERS.search(request.headers.get("user-agent", "")))


async def hold(svc: Services, pending: Pending, deadline: float) -> Stored | RenderState | None:
    """Wait for the clip (or poster) to be stored, woken by the worker's announcements on its job: the stored
    clip, the job's failure, or None once ``deadline`` (``QUOTECLIP_LINK_HOLD`` seconds from the request) has
    passed. Each look reads the job (Redis); the store is asked only once the job says it has stored its work (the
    store is written before the job says so), so a thousand held requests do not ask the bucket at every look."""
    async with svc.events.watch(pending.job_id) as watch:  # registered before the first look: no change missed
        while True:
            state = await run_in_threadpool(render_state, pending.job_id, svc.connection)
            if state.state == "failed":
                return state
            if state.state != "active" or state.stage == Stage.FINISHED.value:
                found = await run_in_threadpool(pending.ready)
                if found is not None or state.state != "active":  # stored, or the job ended without storing it
                    return found or state
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            await watch.changed(left)


def after_hold(request: Request, svc: Services, pending: Pending, found: Stored | RenderState | None) -> Answer:
    """The held request's answer: the stored clip, the render's failure for good (422), else 503 to try again."""
    linked = pending.linked
    if isinstance(found, Stored):
        return linked.answer(stored_response(request, svc.settings, linked, found), Outcome.RENDERED)
    if isinstance(found, RenderState) and found.state == "failed" and found.permanent:
        return linked.answer(error_response(422, str(found.error)), Outcome.FAILED)
    if found is None:
        detail = f"still rendering after {held_for(svc, linked):g} s; try again"
    else:
        detail = f"the render did not finish ({found.error or found.state}); try again"
    return linked.answer(error_response(503, detail, {"Retry-After": RETRY_AFTER}), Outcome.UNAVAILABLE)
