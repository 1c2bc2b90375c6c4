"""A loopback HTTP server with Range support over RemoteFiles: what ffmpeg reads for a remote source.

ffmpeg never talks to the origin itself: every byte passes the safety checks, the caps and the block cache.
"""

from __future__ import annotations

import logging
import secrets

from quoteclip.errors import QuoteclipError

from .loopback import LoopbackServer
from .ranges import Body, RangeHandler
from .remote import RemoteFile

log = logging.getLogger(__name__)


class SourceProxy(LoopbackServer):
    name = "source-proxy"

    def __init__(self) -> None:
        self.files: dict[str, RemoteFile] = {}
        super().__init__()

    def add(self, remote: RemoteFile) -> str:
        token = secrets.token_hex(12)
        self.files[token] = remote
        return f"{self.url}/{token}"

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
