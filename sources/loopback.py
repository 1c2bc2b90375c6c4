"""A threaded HTTP server on a free loopback port, run for the length of a ``with`` block (the source proxy
ffmpeg reads, and the egress proxy yt-dlp goes out through)."""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

log = logging.getLogger(__name__)
POLL_INTERVAL = 0.02  # seconds


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        log.debug("loopback connection from %s ended", client_address, exc_info=True)  # a client hung up: normal


class LoopbackServer:
    name = "loopback"

    def __init__(self) -> None:
        self.server = _Server(("127.0.0.1", 0), self._handler())
        # shutdown() waits for the serving loop to look at its flag: every 20 ms, not the default 0.5 s, which every
        # remote render (and every page extraction) would otherwise pay on closing
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": POLL_INTERVAL}, name=self.name, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
