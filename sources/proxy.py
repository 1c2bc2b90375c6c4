"""A loopback HTTP server with Range support over RemoteFiles: what ffmpeg reads for a remote source.

ffmpeg never talks to the origin itself: every byte passes the safety checks, the caps and the block cache.
"""

from __future__ import annotations

import logging
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from quoteclip.errors import QuoteclipError

from .remote import RemoteFile

log = logging.getLogger(__name__)

CHUNK = 512 * 1024


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        log.debug("proxy connection from %s ended", client_address, exc_info=True)  # ffmpeg hung up: normal


class SourceProxy:
    def __init__(self) -> None:
        self.files: dict[str, RemoteFile] = {}
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, name="source-proxy", daemon=True)
        self.thread.start()

    def add(self, remote: RemoteFile) -> str:
        token = secrets.token_hex(12)
        self.files[token] = remote
        port = self.server.server_address[1]
        return f"http://127.0.0.1:{port}/{token}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> SourceProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                log.debug("proxy: " + format, *args)

            def do_HEAD(self) -> None:
                self._serve(head=True)

            def do_GET(self) -> None:
                self._serve(head=False)

            def _serve(self, head: bool) -> None:
                remote = proxy.files.get(self.path.lstrip("/"))
                if remote is None:
                    self.send_error(404)
                    return
                try:
                    size = remote.ensure_size()
                except QuoteclipError:
                    self.send_error(502)
                    return
                start, end = 0, size - 1
                header = self.headers.get("Range", "")
                if header.startswith("bytes="):
                    first, _, last = header[6:].split(",")[0].partition("-")
                    if first:
                        start = int(first)
                        end = min(int(last), size - 1) if last else size - 1
                    elif last:
                        start = max(0, size - int(last))
                    if start >= size:
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{size}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
                else:
                    self.send_response(200)
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(end - start + 1))
                self.end_headers()
                if head:
                    return
                pos = start
                try:
                    while pos <= end:
                        data = remote.read(pos, min(CHUNK, end - pos + 1))
                        if not data:
                            break
                        self.wfile.write(data)
                        pos += len(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # ffmpeg seeks by closing the connection
                except QuoteclipError as exc:
                    log.warning("source read failed: %s", exc)
                    self.close_connection = True

        return Handler
