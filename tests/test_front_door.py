"""The API's front door in this process (api/server.py, on uvicorn as `quoteclip serve` runs it): while a crowd is
connected, the cyclic collector's full collections wait (each walks every object the crowd's connections made, a
pause for all of them) but for one every ``CROWD_COLLECT`` seconds, and once it has left they come back as they
were."""

from __future__ import annotations

import gc
import socket
import threading
import time
from collections.abc import Callable

import uvicorn

from api import server
from quoteclip.settings import Settings


async def hello(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def until(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_full_collections_wait_while_a_crowd_is_connected_and_come_back_once_it_left(monkeypatch) -> None:
    monkeypatch.setattr(server, "TRIM_AFTER", 0.2)
    monkeypatch.setattr(server, "CROWD_COLLECT", 0.3)
    settings = Settings.from_env({"QUOTECLIP_HEADER_TIMEOUT": "60"})  # (the crowd sends nothing: kept meanwhile)
    before = gc.get_threshold()
    full: list[float] = []  # full collections, when they started

    def counted(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(time.monotonic())

    gc.callbacks.append(counted)
    config = uvicorn.Config(hello, log_config=None, lifespan="off", **server.server_options(settings))
    front = uvicorn.Server(config)
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    running = threading.Thread(target=front.run, kwargs={"sockets": [listening]}, daemon=True)
    running.start()
    crowd: list[socket.socket] = []
    try:
        assert until(lambda: front.started, 10)
        crowd = [socket.create_connection(("127.0.0.1", port)) for _ in range(server.CROWD - 1)]
        time.sleep(0.3)
        assert gc.get_threshold() == before  # (not a crowd yet)
        crowd.append(socket.create_connection(("127.0.0.1", port)))
        assert until(lambda: gc.get_threshold()[2] > 10**9, 5), gc.get_threshold()
        assert gc.get_threshold()[:2] == before[:2]  # (the young generations as they were)
        came = time.monotonic()  # a crowd that stays: still collected in full every CROWD_COLLECT seconds
        assert until(lambda: len([t for t in full if t > came]) >= 2, 5), full
        for sock in crowd:
            sock.close()
        assert until(lambda: gc.get_threshold() == before, 5), gc.get_threshold()
    finally:
        for sock in crowd:
            sock.close()
        front.should_exit = True
        running.join(10)
        gc.set_threshold(*before)
        gc.callbacks.remove(counted)
    assert not running.is_alive()
