"""uvicorn, httptools and asyncio held to the contract the API's front door relies on (api/server.py subclasses
uvicorn's httptools protocol and its request cycle, reads their attributes, and waits on the selector loop's writer
callbacks). No server runs here: the names, what they are, their signatures, and the attributes a protocol and a
cycle built as uvicorn builds them carry. A scan of the product's code finds every name starting with ``_`` it
takes from another object than its own, and each must be listed here (or be a public name spelled so).

pyproject.toml pins uvicorn and httptools to the minors this file was run against. To take a new minor: install
it, run this file, and read each failure's "relied on by" for what to look at."""

from __future__ import annotations

import ast
import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from uvicorn.config import Config
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("api", "cli", "jobs", "quoteclip", "sources", "renderer", "storage", "watermarks")
SERVER = "api/server.py GuardedProtocol"

# the methods of uvicorn's httptools protocol the front door overrides, each calling uvicorn's own first
OVERRIDDEN = {
    "connection_made": f"{SERVER} (the connection cap, the headers' deadline, the sweep of closing connections)",
    "data_received": f"{SERVER} (the head limit counted as the bytes arrive)",
    "on_message_begin": f"{SERVER} (a request's headers' deadline from its first byte)",
    "on_headers_complete": f"{SERVER} (the extensions a stream's answer uses; HTTP/1.0's close-delimited answer)",
    "on_message_complete": f"{SERVER} (no deadline while a request is answered)",
    "connection_lost": f"{SERVER} (memory handed back once a crowd has left)",
    "on_response_complete": f"{SERVER} (a kept-alive connection between requests may make room for a newcomer)",
    "pause_writing": f"{SERVER} (the send deadline armed while a client takes none of its answer)",
    "resume_writing": f"{SERVER} (the send deadline disarmed: the client took some)",
}
# attributes of the protocol read or written
PROTOCOL_ATTRIBUTES = {
    "connections": f"{SERVER} (the server's set of connections: counted against the cap, swept for closing ones)",
    "cycle": f"{SERVER} (the request under way: its class swapped for HTTP/1.0, its send used for a chunk)",
    "flow": f"{SERVER} (uvicorn's flow control: a chunk waits on its drain)",
    "parser": f"{SERVER} (a request begun: its head counted)",
    "scope": f"{SERVER} (the request's scope, its extensions set before its task runs)",
    "transport": f"{SERVER} (the connection's transport: aborted, its buffer limits set)",
    "loop": f"{SERVER} (the event loop: timers, the socket's writer callback)",
}
# attributes of the request cycle read or written
CYCLE_ATTRIBUTES = {
    "chunked_encoding": f"{SERVER} and _Http10Cycle (whether the answer is framed in chunks)",
    "expected_content_length": "api/server.py _Http10Cycle (a close-delimited answer's length counted down)",
    "response_started": "api/server.py _Http10Cycle (the answer's start seen once)",
    "disconnected": f"{SERVER} (a chunk for a connection gone is not written)",
    "scope": "api/server.py _Http10Cycle (the request's method)",
}
# names starting with "_" the product takes from another object than its own, and who relies on each
PRIVATE_NAMES = {
    "loop._add_writer": f"{SERVER}._until_writable (asyncio's selector loop: a chunk waits for its socket)",
    "loop._remove_writer": f"{SERVER}._stop_waiting (asyncio's selector loop)",
    "queue._enqueue_job": "jobs/maintenance.py (rq: held by tests/test_contracts.py)",
}
# public names spelled with a leading underscore, and the project's own objects' names read across modules
NOT_PRIVATE = {
    "os._exit",  # the documented way to end a forked child
    "named._replace",  # namedtuple's public API
    "oldest._disarm",  # api/server.py: another connection of the same class
    "waiting._made_of",  # api/fanout.py: its own future's mark
    "worker._settle",  # jobs/worker.py: its own worker
    "remote._mark_whole",  # sources/remote.py: its own source
}


def _protocol() -> tuple[HttpToolsProtocol, asyncio.AbstractEventLoop]:
    async def app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover (never called)
        pass

    config = Config(app, loop="asyncio")
    config.load()
    loop = asyncio.new_event_loop()
    return HttpToolsProtocol(config, ServerState(), {}, _loop=loop), loop


@pytest.mark.parametrize("name", sorted(OVERRIDDEN))
def test_the_protocol_methods_we_override_are_uvicorns(name: str) -> None:
    method = HttpToolsProtocol.__dict__.get(name)
    assert callable(method), f"uvicorn's HttpToolsProtocol has no {name} of its own: relied on by {OVERRIDDEN[name]}"
    from api.server import GuardedProtocol

    ours, theirs = inspect.signature(getattr(GuardedProtocol, name)), inspect.signature(method)
    assert list(ours.parameters) == list(theirs.parameters), (
        f"HttpToolsProtocol.{name}{theirs} changed: relied on by {OVERRIDDEN[name]}"
    )


def test_a_protocol_built_as_uvicorn_builds_it_has_the_attributes_we_read() -> None:
    protocol, loop = _protocol()
    try:
        for name, who in PROTOCOL_ATTRIBUTES.items():
            assert hasattr(protocol, name), f"uvicorn's HttpToolsProtocol has no {name!r}: relied on by {who}"
        assert isinstance(protocol.connections, set), f"connections: relied on by {PROTOCOL_ATTRIBUTES['connections']}"
    finally:
        loop.close()


def test_a_cycle_has_the_send_and_attributes_we_use() -> None:
    protocol, loop = _protocol()
    try:
        flow = FlowControl(transport=None)  # type: ignore[arg-type]
        assert hasattr(flow, "write_paused") and inspect.iscoroutinefunction(flow.drain), (
            f"uvicorn's FlowControl: relied on by {PROTOCOL_ATTRIBUTES['flow']}"
        )
        cycle = RequestResponseCycle(
            scope={"type": "http", "method": "GET", "http_version": "1.1"},  # type: ignore[typeddict-item]
            transport=None,  # type: ignore[arg-type]
            flow=flow,
            logger=protocol.logger,
            access_logger=protocol.access_logger,
            access_log=False,
            default_headers=[],
            message_event=asyncio.Event(),
            expect_100_continue=False,
            keep_alive=True,
            on_response=lambda: None,
        )
        for name, who in CYCLE_ATTRIBUTES.items():
            assert hasattr(cycle, name), f"uvicorn's RequestResponseCycle has no {name!r}: relied on by {who}"
        assert inspect.iscoroutinefunction(RequestResponseCycle.send), "RequestResponseCycle.send: _Http10Cycle"
    finally:
        loop.close()


def test_the_headers_complete_callback_makes_the_cycle_before_its_task_runs() -> None:
    """on_headers_complete makes ``self.cycle`` and schedules its task (``create_task``): the front door sets the
    request's extensions, and HTTP/1.0's cycle class, after uvicorn's call and before the task runs."""
    source = inspect.getsource(HttpToolsProtocol.on_headers_complete)
    starts = inspect.getsource(HttpToolsProtocol._start_asgi_task)
    assert "self.cycle = RequestResponseCycle(" in source and "self._start_asgi_task(self.cycle" in source, (
        f"HttpToolsProtocol.on_headers_complete changed: relied on by {OVERRIDDEN['on_headers_complete']}"
    )
    assert "create_task" in starts, (
        f"HttpToolsProtocol._start_asgi_task: relied on by {OVERRIDDEN['on_headers_complete']}"
    )


def test_the_selector_loops_writer_callbacks_are_there() -> None:
    loop = asyncio.SelectorEventLoop()
    try:
        for name in ("_add_writer", "_remove_writer"):
            assert callable(getattr(loop, name, None)), (
                f"asyncio's selector loop: relied on by {PRIVATE_NAMES[f'loop.{name}']}"
            )
        assert list(inspect.signature(loop._add_writer).parameters)[:2] == ["fd", "callback"]
    finally:
        loop.close()


def test_uvicorn_run_takes_the_options_we_pass() -> None:
    from api.server import server_options
    from quoteclip.settings import Settings

    options = server_options(Settings())
    inspect.signature(uvicorn.run).bind("app:app", host="127.0.0.1", port=1, log_config=None, **options)
    inspect.signature(Config).bind("app:app", **options)


def test_every_private_name_the_product_takes_from_another_object_is_listed() -> None:
    found = set()
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
                    continue
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    continue
                found.add(ast.unparse(node).removeprefix("self."))
    unlisted = sorted(found - set(PRIVATE_NAMES) - NOT_PRIVATE)
    assert not unlisted, f"private names of another object, not listed in {Path(__file__).name}: {unlisted}"
    gone = sorted((set(PRIVATE_NAMES) | NOT_PRIVATE) - found)
    assert not gone, f"listed here but no longer used (take them out): {gone}"
