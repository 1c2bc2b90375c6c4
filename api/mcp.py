"""quoteclip for assistants: a Model Context Protocol server (the official ``mcp`` SDK, ``quoteclip[mcp]``) whose
tools are the HTTP API's routes, called with the caller's API key.

So every tool meets what the API's caller meets, by construction: the same validation and errors (the API's
``detail`` is the tool's error), the same rate limit (the key's), quote finding in the API's bounded finder threads,
a site key's scopes when a link is signed (``POST /links``), an API key to revoke. Two transports:

- ``quoteclip mcp``: stdio, for a desktop assistant; its calls go to ``QUOTECLIP_MCP_API`` (``quoteclip up`` or
  ``quoteclip serve``) with ``QUOTECLIP_MCP_KEY``.
- streamable HTTP at ``/mcp`` of ``quoteclip serve`` itself, behind the API's keys; its calls go to the same app in
  this process, with the key the caller sent.

docs/agents.md says how to add it to an assistant.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote as quoted

from quoteclip.errors import BadInput

EXTRA = "quoteclip[mcp]"
WAIT_STEP = 25.0  # seconds one status long-poll holds (the API's limit is 30)
TERMINAL = {"finished", "failed", "stopped", "canceled"}
# the API key the caller of /mcp sent (set for each request by ``Keyed``; read by the in-process caller)
CALLER_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("quoteclip_mcp_key", default=None)

Call = Callable[[str, str, dict[str, Any] | None, dict[str, Any] | None], Awaitable[dict[str, Any]]]


def sdk() -> Any:
    """The MCP SDK's server module, or BadInput naming the extra to install."""
    try:
        from mcp.server import mcpserver
    except ImportError:
        raise BadInput(f"the MCP server needs the mcp extra: pip install '{EXTRA}'") from None
    return mcpserver


def api_caller(client: Any, key: Callable[[], str | None]) -> Call:
    """A call of the API through ``client`` (an ``httpx2.AsyncClient`` on its address, or on the app in this
    process): the answer's JSON, or the tool's error carrying the API's own ``detail`` and status."""
    from mcp.server.mcpserver.exceptions import ToolError

    async def call(
        method: str, path: str, body: dict[str, Any] | None = None, params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        given = key()
        headers = {"X-API-Key": given} if given else {}
        answer = await client.request(method, path, json=body, params=params, headers=headers, timeout=60)
        try:
            data = answer.json()
        except ValueError:
            data = {"detail": answer.text[:300]}
        if answer.status_code >= 400:
            detail = data.get("detail") if isinstance(data, dict) else data
            said = detail if isinstance(detail, str) else str(detail)[:500]
            wait = answer.headers.get("retry-after")
            raise ToolError(f"{answer.status_code}: {said}" + (f" (retry after {wait} s)" if wait else ""))
        return data if isinstance(data, dict) else {"result": data}

    return call


def server(call: Call) -> Any:
    """The MCP server and its tools, each a route of the API."""
    mcpserver = sdk()
    mcp = mcpserver.MCPServer(
        name="quoteclip",
        instructions=(
            "quoteclip renders exact-quote video clips: find a quote by its words in a video page's captions "
            "(find_quote), render it (render_clip: any platform, shape or brand; it waits for the link), ask a "
            "job's status (clip_status), queue many quotes of one source (batch_clips, batch_status), sign a "
            "public link for a website (sign_link) and revoke one (revoke_link)."
        ),
    )

    @mcp.tool()
    async def find_quote(source: str, quote: str) -> dict[str, Any]:
        """Find a quote by its words in the source page's own captions (YouTube or another yt-dlp site): its
        start and end (seconds), its words with their times, and how well it matched (1.0: every word)."""
        return await call("POST", "/quotes/find", {"source": source, "quote": quote}, None)

    @mcp.tool()
    async def render_clip(
        source: str,
        start: float | None = None,
        end: float | None = None,
        quote: str | None = None,
        caption: str | None = None,
        platform: str | None = None,
        profile: str | None = None,
        watermark: str | None = None,
        quality: str | None = None,
        snap: str | None = None,
        wait_seconds: float = 120.0,
    ) -> dict[str, Any]:
        """Render a clip of ``source`` from ``start`` to ``end`` (seconds), or of the ``quote`` found by its words
        in the page's captions when no times are given; ``caption`` burned in (the quote's words by default),
        ``platform`` (shorts, reels, tiktok, x, …) or ``profile`` (landscape, vertical, square), ``watermark``
        text; ``snap`` "words" moves given times to the nearest word boundaries of the quote's words (with
        ``quote``: the page's captions). Waits up to ``wait_seconds`` for the clip: its status, ``link`` (a playable
        MP4), ``poster_url`` and ``download_url``."""
        body: dict[str, Any] = {"source": source}
        for name, value in (
            ("start", start),
            ("end", end),
            ("caption", caption),
            ("platform", platform),
            ("profile", profile),
            ("quality", quality),
            ("snap", snap),
        ):
            if value is not None:
                body[name] = value
        if watermark is not None:
            body["watermark"] = {"text": watermark}
        if quote is not None:
            body.update(transcript="source", quote=quote)
        accepted = await call("POST", "/clips", body, None)
        return await _waited(call, accepted, wait_seconds, report=True)

    @mcp.tool()
    async def clip_status(clip_id: str, wait_seconds: float = 0.0) -> dict[str, Any]:
        """A clip job's status (queued, started, finished, failed), its stage and progress, and once finished its
        ``link``; with ``wait_seconds``, it answers once the clip has finished or failed, or when they have
        passed."""
        return await _waited(call, {"id": clip_id}, wait_seconds)

    @mcp.tool()
    async def cancel_clip(clip_id: str) -> dict[str, Any]:
        """Cancel a clip job not yet stored: a queued one never renders, a rendering one is stopped; one that other
        requests joined renders on for them (``waiting``: how many). Refused (409) for a stored clip (revoke its
        links instead) or one that had failed."""
        return await call("DELETE", f"/clips/{quoted(clip_id, safe='')}", None, None)

    @mcp.tool()
    async def cancel_batch(batch_id: str) -> dict[str, Any]:
        """Cancel a batch: each of its clips not yet stored is canceled as ``cancel_clip`` cancels one (stored
        clips are kept). How many renders stopped, and each clip's answer."""
        return await call("DELETE", f"/batches/{quoted(batch_id, safe='')}", None, None)

    @mcp.tool()
    async def batch_clips(
        source: str,
        quotes: list[dict[str, Any]] | str,
        platforms: list[str] | None = None,
        transcript: str | None = None,
    ) -> dict[str, Any]:
        """Queue one clip a quote of ``source``: ``quotes`` as objects (start, end, caption) or as the text of a
        quotes CSV; ``platforms`` renders each for every platform named; ``transcript`` ("source": the page's
        captions) finds each quote's times by its caption. The batch's id, its clips and the quotes refused."""
        body: dict[str, Any] = {"source": source, "quotes": quotes}
        if platforms:
            body["platforms"] = ",".join(platforms)
        if transcript is not None:
            body["transcript"] = transcript
        return await call("POST", "/batches", body, None)

    @mcp.tool()
    async def batch_status(batch_id: str) -> dict[str, Any]:
        """A batch's clips, each with its status and, once finished, its link."""
        return await call("GET", f"/batches/{quoted(batch_id, safe='')}", None, None)

    @mcp.tool()
    async def sign_link(
        site: str,
        source: str,
        start: float,
        end: float,
        caption: str | None = None,
        watermark: str | None = None,
        variant: str = "clip",
        expires: int | None = None,
        base_url: str | None = None,
    ) -> dict[str, Any]:
        """A signed public link for a website's page (``variant``: clip, download, poster or captions), made with
        the service's key for ``site``; refused when the key's scopes or the service would refuse the clip."""
        body: dict[str, Any] = {"site": site, "source": source, "start": start, "end": end, "variant": variant}
        for name, value in (
            ("caption", caption),
            ("watermark", watermark),
            ("expires", expires),
            ("base_url", base_url),
        ):
            if value is not None:
                body[name] = value
        return await call("POST", "/links", body, None)

    @mcp.tool()
    async def revoke_link(link: str, whole_clip: bool = False, delete_clip: bool = False) -> dict[str, Any]:
        """Revoke a signed link (it answers 410 from now on); ``whole_clip``: every link of its site naming its
        clip; ``delete_clip``: the stored clip removed too."""
        from quoteclip import links

        try:
            digest = links.link_hash(links.path_of(link.strip()))
        except links.LinkError as exc:
            from mcp.server.mcpserver.exceptions import ToolError

            raise ToolError(f"422: link: {exc}") from None
        body = {"link": link, "clip": whole_clip, "delete_clip": delete_clip}
        return await call("DELETE", f"/links/{digest}", body, None)

    return mcp


async def _waited(call: Call, accepted: dict[str, Any], wait_seconds: float, report: bool = False) -> dict[str, Any]:
    """The clip's status once it has ended, or once ``wait_seconds`` have passed (the API's long-poll, in steps),
    with the links of its poster, download and report beside its own; with ``report``, once finished, the report
    itself (``GET /clips/{id}/report``: counted against the caller's rate limit, as the route is)."""
    from mcp.server.mcpserver.exceptions import ToolError

    clip_id = str(accepted.get("id"))
    deadline = time.monotonic() + max(0.0, min(wait_seconds, 600.0))
    status = accepted if "status" in accepted else await call("GET", f"/clips/{quoted(clip_id, safe='')}", None, None)
    while status.get("status") not in TERMINAL and time.monotonic() < deadline:
        step = min(WAIT_STEP, deadline - time.monotonic())
        status = await call("GET", f"/clips/{quoted(clip_id, safe='')}", None, {"wait": f"{step:.1f}"})
    clip = f"/clips/{quoted(clip_id, safe='')}"
    extra: dict[str, Any] = {
        "download_url": f"{clip}/download",
        "poster_url": f"{clip}/poster.jpg",
        "captions_url": f"{clip}/captions.vtt",
        "report_url": f"{clip}/report",
    }
    if report and status.get("status") == "finished":  # its manifest's report (docs/creators.md, "Checking a clip")
        try:
            extra["report"] = await call("GET", f"{clip}/report", None, None)
        except ToolError as missed:
            extra["report"] = {"detail": str(missed)}
    return {**accepted, **status, **{k: v for k, v in extra.items() if k not in status}}


def run_stdio(api: str, key: str | None) -> None:
    """``quoteclip mcp``: the tools on stdio, calling the API at ``api`` with ``key``."""
    import anyio
    import httpx2

    async def main() -> None:
        async with httpx2.AsyncClient(base_url=api) as client:
            await server(api_caller(client, lambda: key)).run_stdio_async()

    anyio.run(main)


class Keyed:
    """The ASGI app of ``/mcp`` under ``quoteclip serve``: the MCP SDK's streamable HTTP app, with the key its
    caller sent (``Authorization: Bearer``, ``X-API-Key``) kept for the tools' calls of the API."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from .auth import given_key

        if scope["type"] == "http":
            headers = {bytes(k).lower(): bytes(v) for k, v in scope.get("headers", [])}
            token = CALLER_KEY.set(given_key(headers))
            try:
                await self.app(scope, receive, send)
            finally:
                CALLER_KEY.reset(token)
            return
        await self.app(scope, receive, send)


def mounted(app: Any) -> tuple[Any, Any]:
    """The ``/mcp`` app for ``app`` (its tools calling ``app`` in this process with the caller's key), and the
    context manager its session manager runs in (entered by the app's lifespan). None, None without the extra."""
    try:
        sdk()
        import httpx2
    except (BadInput, ImportError):
        return None, None
    client = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://quoteclip.internal")
    mcp = server(api_caller(client, CALLER_KEY.get))
    http = mcp.streamable_http_app(streamable_http_path="/", stateless_http=True, json_response=True)
    return Keyed(http), mcp.session_manager.run
