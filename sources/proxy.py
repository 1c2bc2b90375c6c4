"""A loopback HTTP server with Range support over RemoteFiles: what ffmpeg reads for a remote source.

ffmpeg never talks to the origin itself: every byte passes the safety checks, the caps and the block cache.
"""

from __future__ import annotations

import logging
import secrets
import threading
from http.server import ThreadingHTTPServer

from quoteclip.errors import QuoteclipError

from .ranges import Body, RangeHandler
from .remote import RemoteFile

log = logging.getLogger(__name__)


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

    def _handler(self) -> type[RangeHandler]:
        proxy = self

        class Handler(RangeHandler):
            def log_message(self, format: str, *args: object) -> None:
                log.debug("proxy: " + format, *args)

            def open_body(self) -> Body | None:
                remote = proxy.files.get(self.path.lstrip("/"))
                if remote is None:
                    self.send_error(404)
                    return None
                try:
                    return Body(remote.ensure_size(), remote.read)
                except QuoteclipError:
                    self.send_error(502)
                    return None

        return Handler
