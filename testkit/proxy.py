"""A TCP proxy on loopback between one client (a worker) and a server (Redis), for fault tests: ``hold()`` stops
passing bytes either way (what was sent before stays where it was: a reply Redis wrote waits in the proxy's
socket, unread, as a reply lost in a partition does), ``release()`` lets them through again, ``cut()`` drops
every connection and refuses new ones until ``restore()``."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


class Proxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.flowing = threading.Event()
        self.flowing.set()
        self.refusing = False
        self.closed = False
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, database: int | str = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{database}"

    def upstream_ports(self) -> set[int]:
        """The local ports of the proxy's connections to the server (how the server names these clients)."""
        with self.lock:
            return {server.getsockname()[1] for _, server in self.pairs}

    def hold(self) -> None:
        self.flowing.clear()

    def release(self) -> None:
        self.flowing.set()

    def cut(self) -> None:
        self.refusing = True
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for client, server in pairs:
            for end in (client, server):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
                end.close()

    def restore(self) -> None:
        self.refusing = False

    def close(self) -> None:
        self.closed = True
        self.release()
        self.cut()
        self.listener.close()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.pairs.append((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                self.flowing.wait()
                data = source.recv(65536)
                if not data:
                    break
                self.flowing.wait()  # held after the read: the bytes wait here, unsent
                target.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, target):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def proxy_to(host: str, port: int) -> Iterator[Proxy]:
    proxy = Proxy((host, port))
    try:
        yield proxy
    finally:
        proxy.close()
