"""The load harness's viewers (testkit/viewers.py), which figures 15 and 17 count on: what a reading viewer says it
received, and when, against a loopback server that writes known answers in awkward pieces."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import threading
import time
from collections.abc import Awaitable, Callable

import pytest

from testkit.viewers import LINE_MAX, Watched, _Chunked, idle_viewer, reading_viewer

BODY = bytes(range(256)) * 700  # 179,200 bytes: several of the reader's reads


def chunked(body: bytes, sizes: list[int]) -> bytes:
    out, at = b"", 0
    for size in sizes:
        out += b"%x;ext=1\r\n" % size + body[at : at + size] + b"\r\n"
        at += size
    return out + b"0\r\nX-Trailer: 1\r\n\r\n"


Writer = Callable[[asyncio.StreamWriter], Awaitable[None]]


async def serve(answer: Writer) -> tuple[asyncio.Server, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        try:
            await answer(writer)
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def read_from(answer: Writer, pace: float = 10_000_000) -> Watched:
    """What a reading viewer saw of ``answer``, read at ``pace`` bytes a second."""

    async def run() -> Watched:
        server, port = await serve(answer)
        async with server:
            return await reading_viewer("127.0.0.1", port, "/clip", pace=pace)

    return asyncio.run(run())


async def in_pieces(writer: asyncio.StreamWriter, data: bytes, piece: int, pause: float = 0.0) -> None:
    for at in range(0, len(data), piece):
        writer.write(data[at : at + piece])
        await writer.drain()
        if pause:
            await asyncio.sleep(pause)


def test_a_chunked_body_in_odd_pieces_is_read_whole() -> None:
    sizes = [1000, 70_000, 3, 60_000, len(BODY) - 131_003]
    wire = chunked(BODY, sizes)

    async def answer(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.3)  # (the body's first byte comes well after the head)
        await in_pieces(writer, wire, 7_777)

    async def run() -> tuple[float, Watched]:
        server, port = await serve(answer)
        async with server:
            began = time.monotonic()
            return began, await reading_viewer("127.0.0.1", port, "/clip", pace=10_000_000)

    began, seen = asyncio.run(run())
    assert seen.status == 200 and seen.complete
    assert seen.size == len(BODY)
    assert seen.digest == hashlib.sha256(BODY).hexdigest()
    # the first byte's time is when it came: after the head's pause, before the reader's end
    assert began + 0.25 < seen.first_byte <= seen.last_byte


def test_a_body_with_a_length_and_a_redirect() -> None:
    async def sized(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY[:10])
        await in_pieces(writer, BODY[10:], 50_000)

    async def moved(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:9/clip.mp4?x=1\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    seen = read_from(sized)
    assert seen.complete and seen.size == len(BODY)
    assert seen.digest == hashlib.sha256(BODY).hexdigest()
    redirected = read_from(moved)
    assert redirected.status == 302
    assert redirected.redirect == "http://127.0.0.1:9/clip.mp4?x=1"


@pytest.mark.parametrize("cut_at", [5, 70_010])
def test_a_body_cut_short_is_not_complete(cut_at: int) -> None:
    wire = chunked(BODY, [100_000, len(BODY) - 100_000])

    async def answer(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + wire[:cut_at])
        await writer.drain()

    seen = read_from(answer)
    assert seen.status == 200 and not seen.complete


def test_a_reader_keeps_to_its_pace() -> None:
    async def answer(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY)
        await writer.drain()

    seen = read_from(answer, pace=400_000)
    assert seen.complete
    # 179,200 bytes at 400,000 a second: its last read waits until about 0.3 s after its first
    assert seen.last_byte - seen.first_byte >= 0.25


def test_an_idle_viewer_reads_the_head_and_nothing_of_the_body() -> None:
    async def answer(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")  # (in one write)
        await writer.drain()
        await asyncio.sleep(0.5)

    async def run() -> tuple[int, bytes]:
        server, port = await serve(answer)
        async with server:
            status, sock = await idle_viewer(port, "/clip")
            await asyncio.sleep(0.3)
            with sock:
                return status, sock.recv(100)

    status, left = asyncio.run(run())
    assert status == 200
    assert left == b"5\r\nhello\r\n"  # (the body's bytes were all left in the socket)


def test_the_first_byte_is_when_it_came_not_when_it_was_read() -> None:
    """A reader whose process is busy when the body comes (its event loop held 0.6 s) says the time the kernel
    received the body's first byte, not the time it read it."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    wrote: list[float] = []

    def server() -> None:
        conn, _ = listener.accept()
        with conn:
            while b"\r\n\r\n" not in conn.recv(4096):
                pass
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
            time.sleep(0.2)
            wrote.append(time.monotonic())
            conn.sendall(b"01234")
            time.sleep(1.0)
            conn.sendall(b"56789")

    thread = threading.Thread(target=server, daemon=True)
    thread.start()

    async def run() -> Watched:
        viewer = asyncio.ensure_future(reading_viewer("127.0.0.1", port, "/clip", pace=10_000_000))
        await asyncio.sleep(0.1)
        time.sleep(0.6)  # (the whole process busy while the body's first bytes come)
        return await viewer

    with listener:
        seen = asyncio.run(run())
    thread.join(5)
    assert seen.complete and seen.size == 10
    assert abs(seen.first_byte - wrote[0]) < 0.1, seen.first_byte - wrote[0]


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 64, 65, 4096])
def test_the_chunk_decoder_takes_its_input_split_anywhere(piece: int) -> None:
    extension = b";name=" + b"x" * 1000  # (a long extension: legal, kept under LINE_MAX)
    wire = b"".join(b"%x%s\r\n%s\r\n" % (len(part), extension, part) for part in (BODY[:3000], BODY[3000:3001]))
    wire += b"0\r\nX-Trailer: " + b"t" * 500 + b"\r\n\r\n"
    decoder, out = _Chunked(), b""
    for at in range(0, len(wire), piece):
        out += b"".join(bytes(p) for p in decoder.feed(memoryview(wire[at : at + piece])))
    assert out == BODY[:3001] and decoder.ended


def test_the_chunk_decoder_refuses_a_line_without_end() -> None:
    decoder = _Chunked()
    decoder.feed(memoryview(b"a;" + b"x" * (LINE_MAX - 10)))
    with pytest.raises(ValueError, match="over"):
        decoder.feed(memoryview(b"y" * 20))


def test_an_empty_body_and_bytes_beyond_the_length() -> None:
    async def empty(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    async def beyond(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n0123456789")
        await writer.drain()

    none = read_from(empty)
    assert none.complete and none.size == 0 and not none.first_byte
    five = read_from(beyond)
    assert five.complete and five.size == 5 and five.digest == hashlib.sha256(b"01234").hexdigest()


def test_heads_that_come_in_two_pieces() -> None:
    """A head split across two segments: the reading viewer reads it whole with a body larger than its reads after
    it; the idle viewer waits for its end without spinning."""

    async def split(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Le")
        await writer.drain()
        await asyncio.sleep(0.5)
        writer.write(b"ngth: %d\r\n\r\n" % len(BODY) + BODY)
        await writer.drain()
        await asyncio.sleep(0.3)

    seen = read_from(split)
    assert seen.complete and seen.digest == hashlib.sha256(BODY).hexdigest()

    async def idle() -> tuple[int, float]:
        server, port = await serve(split)
        async with server:
            cpu = time.process_time()
            status, sock = await idle_viewer(port, "/clip")
            sock.close()
            return status, time.process_time() - cpu

    status, cpu = asyncio.run(idle())
    assert status == 200
    assert cpu < 0.1, f"the idle viewer used {cpu:.2f} CPU-s waiting 0.5 s for its head's end"
