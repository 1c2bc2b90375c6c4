"""A TCP proxy on loopback between one client (a worker) and a server (Redis), for fault tests: ``hold()`` stops
passing bytes either way (what was sent before stays where it was: a reply Redis wrote waits in the proxy's
socket, unread, as a reply lost in a partition does), ``release()`` lets them through again, ``cut()`` drops
every connection and refuses new ones until ``restore()``. With ``delay`` and ``rate`` it shapes what it passes as a
distant network would: each chunk reaches the other side ``delay`` seconds after it came (both ways: a round trip
of twice that; a new connection's first bytes a round trip later still, as after TCP's handshake), and the server's
bytes flow at most ``rate`` bytes a second on each connection."""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from collections.abc import Iterator


class Proxy:
    def __init__(self, upstream: tuple[str, int], delay: float = 0.0, rate: float | None = None) -> None:
        self.upstream = upstream
        self.delay, self.rate = delay, rate
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
            if self.delay or self.rate:
                threading.Thread(target=self._shaped, args=(client, server, None, True), daemon=True).start()
                threading.Thread(target=self._shaped, args=(server, client, self.rate), daemon=True).start()
            else:
                threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
                threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    def _shaped(self, source: socket.socket, target: socket.socket, rate: float | None, opening: bool = False) -> None:
        """Read as it comes; send each chunk once ``delay`` has passed since it came, and no faster than ``rate``;
        ``opening`` (the client's side): nothing before the handshake's round trip and ``delay`` have passed."""
        chunks: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

        def send() -> None:
            free = time.monotonic() + (3 * self.delay if opening else 0.0)  # when the link is next free
            try:
                while True:
                    came, data = chunks.get()
                    if not data:
                        break
                    for n in range(0, len(data), 16384):
                        part = data[n : n + 16384]
                        at = max(came + self.delay, free)
                        wait = at - time.monotonic()
                        if wait > 0:
                            time.sleep(wait)
                        target.sendall(part)
                        free = max(at, time.monotonic()) + (len(part) / rate if rate else 0.0)
            except OSError:
                pass
            finally:
                with contextlib.suppress(OSError):
                    target.shutdown(socket.SHUT_RDWR)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        try:
            while True:
                data = source.recv(65536)
                chunks.put((time.monotonic(), data))
                if not data:
                    break
        except OSError:
            chunks.put((time.monotonic(), b""))

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
