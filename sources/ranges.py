"""One HTTP Range handler: ``Range: bytes=…`` parsed once, 206 / 416 / 200 answered alike wherever quoteclip
serves bytes by range (the loopback source proxy ffmpeg reads, and the tests' origin servers)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

from quoteclip.errors import QuoteclipError

log = logging.getLogger(__name__)

CHUNK = 512 * 1024


class Unsatisfiable(Exception):
    """The range starts at or past the end of the body (answered 416)."""


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """The first range of a ``bytes=`` header as (first, last) byte, inclusive and clipped to ``size``; None
    when there is no (usable) range header, so the whole body is sent."""
    if not header.startswith("bytes="):
        return None
    first, _, last = header[6:].split(",")[0].strip().partition("-")
    try:
        if first:
            start = int(first)
            end = min(int(last), size - 1) if last else size - 1
        elif last:
            start, end = max(0, size - int(last)), size - 1
        else:
            return None
    except ValueError:
        return None
    if start >= size or end < start:
        raise Unsatisfiable(header)
    return start, end


@dataclass
class Body:
    """What a range handler serves: its size, how to read a span of it, its type."""

    size: int
    read: Callable[[int, int], bytes]  # (offset, count) → bytes (fewer at the end)
    content_type: str = "application/octet-stream"


class RangeHandler(BaseHTTPRequestHandler):
    """Serves ``open_body()`` with Range support. Subclasses say what a path is; hooks see what was sent."""

    protocol_version = "HTTP/1.1"
    chunk = CHUNK

    def open_body(self) -> Body | None:
        """The body for ``self.path``, or None after answering the request some other way (404, 502, …)."""
        raise NotImplementedError

    def sent(self, start: int, count: int) -> None:
        """Called once a response body ends, with the span actually written."""

    def after_chunk(self) -> None:
        """Called after each chunk is written (a test server may stall here)."""

    def send_empty(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self) -> None:
        self.serve(head=True)

    def do_GET(self) -> None:
        self.serve(head=False)

    def serve(self, head: bool) -> None:
        body = self.open_body()
        if body is None:
            return
        try:
            span = parse_range(self.headers.get("Range", ""), body.size)
        except Unsatisfiable:
            self.send_empty(416, {"Content-Range": f"bytes */{body.size}"})
            return
        start, end = span if span is not None else (0, body.size - 1)
        self.send_response(206 if span is not None else 200)
        if span is not None:
            self.send_header("Content-Range", f"bytes {start}-{end}/{body.size}")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", body.content_type)
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        if head:
            return
        pos = start
        try:
            while pos <= end:
                data = body.read(pos, min(self.chunk, end - pos + 1))
                if not data:
                    break
                self.wfile.write(data)
                pos += len(data)
                self.after_chunk()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the reader hung up (ffmpeg seeks by closing the connection)
        except QuoteclipError as exc:
            log.warning("source read failed: %s", exc)
            self.close_connection = True
        finally:
            self.sent(start, pos - start)
