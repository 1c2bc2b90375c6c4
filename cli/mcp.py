"""``quoteclip mcp``: quoteclip's tools for an assistant, on stdio (the Model Context Protocol; api/mcp.py)."""

from quoteclip.settings import Settings

from .app import app
from .common import run_guarded


@app.command("mcp")
def mcp() -> None:
    """Serve quoteclip's tools to an assistant over stdio (MCP): find a quote, render a clip, its status, a batch,
    sign and revoke links. Each tool is a call of the API at QUOTECLIP_MCP_API (quoteclip up or serve) with the key
    QUOTECLIP_MCP_KEY, so it meets the API's checks and that key's rate limit. Needs quoteclip[mcp]. Nothing but
    the protocol is written to stdout."""

    def go() -> None:
        from api.mcp import run_stdio, sdk

        sdk()  # the extra, named when it is missing
        settings = Settings.from_env()
        run_stdio(settings.mcp_api, settings.mcp_key)

    run_guarded(go)
