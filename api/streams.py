"""A clip answered while it renders: the fragments its worker relays (jobs/relay.py), streamed to the viewer as they
come, for a signed link's ``<video src>`` (api/links/), its HLS playlist (a progressive fragmented MP4 is not
played by Safari without ranges) and the page at ``/`` (``GET /clips/{id}/stream``, read by the page's player through
Media Source Extensions with the key it signed in with).

A streamed answer is the clip as it is made: ``Cache-Control: no-store``, no ``ETag``, no length (chunked). A viewer
joins from the clip's start; the answer ends with the stream's end, or is cut without its last chunk when the render
stops (the worker killed, or told to stop and the job handed back): the player shows an error, and asking again
joins the next render or gets the stored clip. Viewers that come once the clip is stored get the stored clip.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import re
import struct
import time
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from redis.exceptions import RedisError
from starlette.types import Receive, Scope, Send

from jobs import relay
from jobs.queue import JOB_ID
from renderer.fragments import FRAGMENT_SECONDS, filler
from renderer.head import progressive_head

from .caps import CapReached, address
from .deps import Services, ServicesDep
from .fanout import Clip, etag
from .server import ABORT, SEND_BUFFER, WRITE_CHUNK

log = logging.getLogger(__name__)

router = APIRouter()

NO_STORE = "no-store"
CODECS = "X-Stream-Codecs"  # a streamed answer's codecs (avc1.…,mp4a.40.2), for a MediaSource (the page's player)
PLAYLIST = "application/vnd.apple.mpegurl"
PLAYLIST_NAME = "index.m3u8"  # a clip link's HLS playlist: …/l/{key}/{link}/index.m3u8
INIT_NAME = "init.mp4"  # its init segment (the playlist's map); its fragments are N.m4s
PLAYLIST_STEP = 0.02  # seconds between looks for a joined stream's first fragments
# A playlist is answered once it lists this much of the clip (or the whole, once the stream has ended): a player
# reloads a growing playlist after a fragment's length at the soonest (hls.js near its end; RFC 8216 asks a target
# duration), so a first answer of one fragment (0.3 s, its picture and sound both buffered to about 0.23 s) ran out
# before the next reload brought more: hls.js stalled at 0.18 s. Two fragments cost the first frame one fragment's
# encode. A player that asks for a segment (RFC 8216bis's ``_HLS_msn`` delivery directive: the card asks for the
# first, then for each next one as soon as it has the last) is answered once that segment is listed instead.
PLAYLIST_LEAD = 0.5
SEGMENT = re.compile(r"\A([1-9][0-9]{0,5})\.m4s\Z")
# A progressive player reads a growing answer in blocks: Chromium's media cache hands its demuxer whole 32 KiB blocks
# only, until the answer ends, and Firefox's keeps 32 KiB blocks too. The end of the first fragment (its sound comes
# after its pictures) would wait in a part block for the next fragment's bytes, a fragment's encode later; a ``free``
# box after the stream's head (its init segment and first fragment, ``progressive_head``) ends the bytes so far on a
# block's end, and the first frame plays from the head alone. The next ``PADDED_FRAGMENTS`` end on a block's end too
# (each fragment's last samples would otherwise wait a fragment, and the player run that much behind what was sent:
# a stall in its first seconds); later fragments are not padded: by then the player is ahead of its playback.
PLAYER_BLOCK = 32 * 1024
PADDED_FRAGMENTS = 10  # fragments after the head that end on a block's end too (3 s at 0.3 s a fragment)
# A viewer's chunks are written from the clip's own bytes, one ``writev`` at a time as its socket takes them
# (api/server.py ``WRITE_CHUNK``): a thousand viewers hold no copy each (a viewer costs the API tens of KB, not MBs).
# Each viewer takes one chunk in turn, then lets the clip's other viewers take theirs: the clip's first chunk
# reaches every viewer before any is sent its second (when each wrote what its socket took before the next
# viewer's turn, the last viewers waited on the first ones' megabytes). Where the server cannot (HTTP/1.0, another
# server), the chunks go through the app's ``send`` this much at a time, each once the connection has sent the one
# before: a viewer holds at most about this much of the stream's bytes of its own (64 KiB rather than 16: each
# slice costs the API the same calls whatever its size).
SLICE = 64 * 1024
# A streamed answer's socket buffers at most this much of it in the system: a viewer that stops reading stalls its
# answer there (and is cut at the send deadline) rather than after the megabytes the system's buffers grow to;
# 256 KiB keeps 20 Mbit/s flowing over a 100 ms round trip, many times a clip's rate.
SEND_BUFFER_BYTES = 256 * 1024


async def joined(svc: Services, job_id: str, deadline: float) -> Clip | None:
    """The job's stream as this process reads it (api/fanout.py: one reader a clip, whatever its viewers), once it
    can be joined from its start, or None: streaming is off, the render ended without one (stored, failed, or its
    worker does not stream), or ``deadline`` passed. The caller makes its answer at once (``RelayResponse``): the
    reader counts its viewers, and stops when none is left."""
    if not svc.settings.stream:
        return None
    clip = svc.hub.clip(job_id)
    async with clip.viewer():
        try:
            await asyncio.wait_for(clip.settled.wait(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            return None
    if clip.begun is None or (clip.done and clip.cut is not None):
        return None
    return clip


def reads_a_head(request: Request) -> bool:
    """Whether a progressive player is given the stream's head (``progressive_head``): Chromium's ``<video src>``
    (Chrome, Edge, Opera…: ``Chrome/`` in the User-Agent), whose demuxer, FFmpeg's, reads 21 frames of fragments
    after an init segment without samples before it presents one. Every other player is sent the init segment and
    the fragments as they are: Firefox reads no fragment after a ``moov`` that lists samples (it played the head's
    9 frames and ended), and reads fragments as they come."""
    return "Chrome/" in request.headers.get("user-agent", "")


class ForPlayers:
    """A stream's pieces as a progressive player is sent them: the init segment and the first fragment, as one head
    (``progressive_head``: a ``moov`` with the first fragment's samples, then its ``mdat``) where ``head`` is asked
    (``reads_a_head``) or as they are, with a ``free`` box to the end of a player's block (``PLAYER_BLOCK``), then
    the other fragments as they are. The init segment is held until the first fragment comes (``__call__`` gives
    nothing for it); ``rest`` gives what is still held at the end."""

    def __init__(self, head: bool = True) -> None:
        self.head = head
        self.init: bytes | None = None
        self.pieces = 0
        self.sent = 0  # bytes given so far

    def __call__(self, piece: bytes) -> bytes:
        self.pieces += 1
        if self.pieces == 1:
            self.init = piece
            return b""
        if self.pieces == 2 and self.init is not None:
            init, self.init = self.init, None
            first = init + piece
            if self.head:
                try:
                    first = progressive_head(init, piece)
                except (ValueError, struct.error, StopIteration, IndexError, ZeroDivisionError) as exc:
                    log.warning("a stream's head was sent as its init segment and first fragment: %s", exc)
            out = first + filler(len(first), PLAYER_BLOCK)
        elif self.pieces <= 2 + PADDED_FRAGMENTS:  # (the player not yet ahead: each ends on a block's end)
            out = piece + filler(self.sent + len(piece), PLAYER_BLOCK)
        else:
            out = piece
        self.sent += len(out)
        return out

    def rest(self) -> bytes:
        init, self.init = self.init, None
        return init or b""


class RelayResponse(StreamingResponse):
    """A streamed answer, sent from its clip's one reader (api/fanout.py) at the viewer's own pace, that can end
    without its last chunk: when the stream is cut, the connection is closed with the body incomplete (a player
    then shows an error, never a clip that ends early as if whole). A viewer that takes longer than
    ``QUOTECLIP_STREAM_SEND_TIMEOUT`` for a chunk (beyond the clip's time it was sent ahead of the time since it
    joined: a player that has buffered ahead pauses its reading until it has played what it has), or falls
    behind what was relayed since it joined by more than ``QUOTECLIP_STREAM_VIEWER_MB``, is cut at once: its
    connection aborted, what it had buffered freed; the clip's other viewers never wait for it. ``release`` is
    called once the answer ends (a per-client cap's count)."""

    def __init__(
        self,
        clip: Clip,
        settings_of: Services,
        headers: dict[str, str],
        progressive: bool,
        head: bool = False,
        release: Callable[[], None] | None = None,
    ) -> None:
        assert clip.begun is not None
        self.clip, self.progressive, self.head, self.release = clip, progressive, head, release
        self.send_timeout = settings_of.settings.stream_send_timeout
        self.behind = settings_of.settings.stream_viewer_bytes
        self.abort: Callable[[], None] | None = None
        self.write_chunk: Callable[[memoryview], Awaitable[bool]] | None = None
        clip.viewers += 1  # (counted until the answer ends)
        self._counted = True
        super().__init__(
            iter(()),
            media_type="video/mp4",
            # (X-Accel-Buffering: a proxy in front, nginx, passes it on as it comes: docs/deploy.md)
            headers={"Cache-Control": NO_STORE, "X-Accel-Buffering": "no", CODECS: clip.begun.codecs, **headers},
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        extensions = scope.get("extensions", {})
        self.abort = extensions.get(ABORT)
        self.write_chunk = extensions.get(WRITE_CHUNK)
        if (send_buffer := extensions.get(SEND_BUFFER)) is not None:
            send_buffer(SEND_BUFFER_BYTES)
        try:
            if self.write_chunk is not None:  # (its writer tells a viewer gone: no task of its own listens for it)
                await self.stream_response(send)
            else:
                await super().__call__(scope, receive, send)
        finally:
            self.done()

    def done(self) -> None:
        if self._counted:
            self._counted = False
            self.clip.viewers -= 1
            if self.release is not None:
                self.release()
            self.clip.hub.left(self.clip)

    def _maker(self) -> Callable[[bytes], bytes] | None:
        # (a MediaSource is given the fragments as they are)
        return ForPlayers(self.head) if self.progressive else None

    async def stream_response(self, send: Send) -> None:
        clip, kind = self.clip, (self.progressive, self.head)
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        position = sent = 0
        joined_at: int | None = None
        began = time.monotonic()
        while True:
            made = clip.outputs(kind, self._maker)
            joined_at = made.size if joined_at is None else joined_at
            if position < len(made.chunks):
                if made.size - max(sent, joined_at) > self.behind:
                    return await self._cut(f"it fell {self.behind // 1024**2} MB behind the stream")
                chunk = made.chunks[position]
                position += 1
                # (a player that has the clip ahead of its playback may stop reading until it has played it)
                ahead = max(0.0, (position - 1) * FRAGMENT_SECONDS - (time.monotonic() - began))
                try:
                    async with asyncio.timeout(self.send_timeout + ahead):  # (no task of its own)
                        if not await self._send_chunk(send, chunk):
                            return  # (the viewer gone)
                except TimeoutError:
                    return await self._cut(f"a chunk took longer than {self.send_timeout + ahead:.0f} s to reach it")
                sent += len(chunk)
                await asyncio.sleep(0)  # (the clip's other viewers take their chunk before this one takes its next)
            elif clip.done:
                if clip.cut is not None or not made.closed:
                    log.warning(
                        "the stream of %s was cut (%s): its viewer's player stops with an error", clip.job_id, clip.cut
                    )
                    return  # the last chunk never sent: the server closes the connection
                break
            else:
                await clip.changed()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send_chunk(self, send: Send, chunk: bytes) -> bool:
        """One chunk of the stream to the viewer: written from the clip's own bytes where the server can
        (api/server.py ``WRITE_CHUNK``), else through ``send`` a slice at a time (what its connection buffers stays
        small); False when the viewer is gone."""
        if self.write_chunk is not None:
            return await self.write_chunk(memoryview(chunk))
        for at in range(0, len(chunk), SLICE):
            await send({"type": "http.response.body", "body": chunk[at : at + SLICE], "more_body": True})
        return True

    async def _cut(self, why: str) -> None:
        """A viewer that does not keep up: its connection aborted (what it had buffered freed), or, on a server
        without the abort (api/server.py), closed. The server learns the connection is gone before the answer ends
        (one turn of the event loop): it would log an answer left incomplete as an error, for every viewer cut."""
        log.info("a viewer of %s was cut: %s", self.clip.job_id, why)
        self.done()
        if self.abort is not None:
            self.abort()
            await asyncio.sleep(0)


def is_part(name: str) -> bool:
    """Whether ``name`` is one of a link's HLS parts: its playlist, its init segment or a fragment."""
    return name in (PLAYLIST_NAME, INIT_NAME) or SEGMENT.match(name) is not None


RESUMED = "this clip's stream stopped, and its render starts again: play it from its start"
RANGE_FROM = re.compile(r"\A\s*bytes\s*=\s*([0-9]+)\s*-")


def resumed(request: Request) -> bool:
    """Whether a request for a clip not stored asks for its bytes past the first (``Range: bytes=N-``, N > 0): a player
    resuming a stream that was cut. Its render starts again, its new stream from the clip's start (and the stored clip
    is not the stream's bytes), so no answer can continue it: it is refused, and the player shows an error (a player
    first asks from byte 0, or for the whole)."""
    found = RANGE_FROM.match(request.headers.get("range", ""))
    return found is not None and int(found.group(1)) > 0


def playlist(index: relay.Index) -> str:
    """An HLS event playlist of the stream's fragments so far (CMAF: the init segment as its map, each fragment a
    segment of its own), ended once the stream has ended; it starts at the clip's start."""
    longest = max((seconds for _, _, seconds in index.fragments), default=FRAGMENT_SECONDS)
    lines = [
        "#EXTM3U",
        "#EXT-X-VERSION:7",
        f"#EXT-X-TARGETDURATION:{max(1, math.ceil(longest))}",
        "#EXT-X-PLAYLIST-TYPE:EVENT",
        "#EXT-X-START:TIME-OFFSET=0,PRECISE=YES",
        "#EXT-X-MEDIA-SEQUENCE:1",
        f'#EXT-X-MAP:URI="{INIT_NAME}"',
    ]
    for number, _, seconds in index.fragments:
        lines += [f"#EXTINF:{seconds:.6f},", f"{number}.m4s"]
    if index.ended:
        lines.append("#EXT-X-ENDLIST")
    return "\n".join(lines) + "\n"


def matches(request: Request | None, tag: str) -> bool:
    given = request.headers.get("if-none-match", "") if request is not None else ""
    return bool(given) and (given.strip() == "*" or tag in (each.strip() for each in given.split(",")))


def kept_answer(
    request: Request | None, body: bytes | str, tag: str, media_type: str, cors: dict[str, str]
) -> Response:
    """A part or playlist made once (api/fanout.py), with its ``ETag``; 304 when the player has it."""
    headers = {"Cache-Control": NO_STORE, "ETag": tag, **cors}
    if matches(request, tag):
        return Response(status_code=304, headers=headers)
    return Response(body, media_type=media_type, headers=headers)


async def part_answer(
    svc: Services, job_id: str, part: str, cors: dict[str, str], request: Request | None = None
) -> Response:
    """A stream's init segment (``init.mp4``) or fragment (``N.m4s``), 404 when it is not there (not relayed yet,
    dropped, or gone once the clip is stored): from this process's reader of the clip when it has it, else from the
    parts kept in memory, else from the relay (one read, through the shared pool, then kept)."""
    found = SEGMENT.match(part)
    number = 0 if part == INIT_NAME else int(found.group(1)) if found else None
    if number is None or not svc.settings.stream:
        return not_streamed(cors)
    data: bytes | None
    clip = svc.hub.clips.get(job_id)
    if clip is not None and clip.begun is not None and clip.cut is None and number < len(clip.pieces):
        attempt, data = clip.begun.attempt, clip.pieces[number]
    else:
        try:
            index = await svc.hub.index(job_id)
            if index is None:
                return not_streamed(cors)
            attempt = index.attempt
            data = svc.hub.parts.get((job_id, attempt, number))
            if data is None:
                data = await relay.segment(svc.hub.redis(), job_id, number, attempt)
                if data is not None:
                    svc.hub.builds["part"] += 1
                    svc.hub.parts.put((job_id, attempt, number), data)
        except RedisError:
            data = None
        if data is None:
            return not_streamed(cors)
    assert data is not None
    return kept_answer(request, data, etag(job_id, attempt, number), "video/mp4", cors)


async def playlist_answer(
    svc: Services, job_id: str, cors: dict[str, str], wait: float = 0.0, request: Request | None = None
) -> Response | None:
    """The stream's playlist when it can be joined from its start and lists ``PLAYLIST_LEAD`` seconds of the clip
    (or the segment the request asks for: ``asked_segment``) or has ended with a fragment, waiting up to ``wait``
    seconds for them, else None; built once for each state of the stream (its fragments, its end)."""
    if not svc.settings.stream:
        return None
    asked = asked_segment(request)
    deadline = time.monotonic() + wait
    try:
        while True:
            index = await svc.hub.index(job_id)
            if index is None or index.aborted or not index.whole:
                return None
            if asked is not None:
                enough = len(index.fragments) >= asked
            else:
                enough = sum(seconds for _, _, seconds in index.fragments) >= PLAYLIST_LEAD
            if index.fragments and (enough or index.ended):
                state = (job_id, index.attempt, len(index.fragments), index.fragments[-1][0], index.ended)
                text, tag = svc.hub.playlist(state, functools.partial(playlist, index))
                return kept_answer(request, text, tag, PLAYLIST, cors)
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(PLAYLIST_STEP)
    except RedisError:
        return None


def asked_segment(request: Request | None) -> int | None:
    """The media sequence number a playlist request asks to be answered with (``_HLS_msn=N``: RFC 8216bis's blocking
    reload directive, the segments numbered from 1), or None."""
    given = request.query_params.get("_HLS_msn", "") if request is not None else ""
    return int(given) if given.isdigit() and len(given) <= 6 else None


def not_streamed(cors: dict[str, str], detail: str = "this clip is not streaming: play its link") -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=404, headers={"Cache-Control": NO_STORE, **cors})


# ---- the page's player: a clip posted with POST /clips, streamed by its id --------------------------------------


@router.get("/clips/{clip_id}/stream", include_in_schema=False, responses={404: {}})
async def clip_stream(clip_id: str, request: Request, svc: ServicesDep) -> Response:
    """A clip being rendered (``POST /clips`` answered 202), streamed while it renders, for the page's player (Media
    Source Extensions: a fetch with the page's key, the fragments appended as they come). 404 when it is not
    streaming (stored already, streaming off, or its render ended without a stream): the page then waits for the
    stored clip as before. Needs the API key as every clip route does (a ``fetch`` sends it; a ``<video src>``
    cannot: links that play in a ``<video src>`` are the signed links)."""
    if not JOB_ID.match(clip_id):
        return not_streamed({}, f"no such clip: {clip_id[:80]!r}")
    try:
        release = svc.caps.take("streams", address(request))
    except CapReached as over:
        headers = {"Cache-Control": NO_STORE, **over.headers}
        return JSONResponse({"detail": over.detail}, status_code=429, headers=headers)
    try:
        found = await joined(svc, clip_id, time.monotonic() + svc.settings.link_hold)
    except BaseException:
        release()
        raise
    if found is None:
        release()
        return not_streamed({})
    return RelayResponse(found, svc, {}, progressive=False, release=release)
