"""An assistant drives quoteclip through the Model Context Protocol (api/mcp.py), with the official SDK's own client:
over stdio (``quoteclip mcp`` calling a running ``quoteclip serve``) and over streamable HTTP (``/mcp`` of
``quoteclip serve``), real Redis, a real worker, the loopback video site with its captions.

An assistant-like session finds a quote by its words, renders it for Shorts and gets a playable link; a hostile one
(an unknown tool, oversized arguments, a missing or wrong key, a link outside its site key's scope) is refused as
the API refuses it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from test_sites import episode_files, site  # noqa: F401  (the site's episode and its fixture)
from test_source_captions import rolling_json3

from testkit.faces import serving
from testkit.videosite import SiteCaption

KEY = "mcp-key-0123456789"
SITE, SECRET = "starzero", "site-secret-0123456789"
QUOTE = "Charlie, delta echo!"  # in the json3 track: "charlie" from 300.9, "echo" to 303.9
TOOLS = {
    "find_quote",
    "render_clip",
    "clip_status",
    "cancel_clip",
    "cancel_batch",
    "batch_clips",
    "batch_status",
    "sign_link",
    "revoke_link",
}


@pytest.fixture
def env(queue_env: dict[str, str], site, tmp_path: Path) -> dict[str, str]:  # noqa: F811
    site.episodes["ep1"].captions = [SiteCaption("en", "json3", rolling_json3())]
    keys = tmp_path / "site-keys.json"  # (and a key scoped to another host's sources)
    scoped = {"id": "elsewhere", "secret": "elsewhere-secret-0123456789", "hosts": ["media.example.org"]}
    keys.write_text(json.dumps({"keys": [{"id": SITE, "secret": SECRET}, scoped]}))
    return {
        **queue_env,
        "QUOTECLIP_SOURCE_HOSTS": "*",
        "QUOTECLIP_API_KEYS": KEY,
        "QUOTECLIP_SITE_KEYS_FILE": str(keys),
    }


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data = result.structured_content
    return data.get("result", data) if isinstance(data, dict) and set(data) == {"result"} else data


def error_of(result: Any) -> str:
    assert result.is_error, result.structured_content
    return " ".join(getattr(part, "text", "") for part in result.content)


def probe(data: bytes, folder: Path, ffmpeg_bin: str) -> tuple[int, int]:
    clip = folder / "clip.mp4"
    clip.write_bytes(data)
    import av

    with av.open(str(clip)) as c:
        video = c.streams.video[0]
        return video.width, video.height


async def assistant(client: Any, site_url: str, base: str) -> dict[str, Any]:
    """What an assistant does: list the tools, find the quote, render it for Shorts, and sign a link of it."""
    names = {tool.name for tool in (await client.list_tools()).tools}
    assert TOOLS <= names, names
    found = structured(await client.call_tool("find_quote", {"source": site_url, "quote": QUOTE}))
    assert (found["start"], found["end"]) == (300.9, 303.9) and found["score"] == 1.0, found
    clip = structured(
        await client.call_tool(
            "render_clip",
            {"source": site_url, "quote": QUOTE, "platform": "shorts", "quality": "preview", "wait_seconds": 120},
        )
    )
    assert clip["status"] == "finished" and clip["link"], clip
    assert {"ok", "findings", "measured"} <= set(clip["report"]), clip  # (its manifest's quality report)
    signed = structured(
        await client.call_tool(
            "sign_link", {"site": SITE, "source": site_url, "start": 300.9, "end": 303.9, "base_url": base}
        )
    )
    assert signed["link"].startswith(f"{base}/l/{SITE}"), signed
    return clip


def fetch(url: str) -> bytes:
    request = urllib.request.Request(url, headers={"X-API-Key": KEY})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return answer.read()


@pytest.mark.slow
def test_an_assistant_over_stdio_renders_a_quote_for_shorts(site, env, workers, tmp_path, ffmpeg_bin) -> None:  # noqa: F811
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters

    workers.env = env
    worker = workers.start(burst=False)
    try:
        with serving(workers.full_env()) as api:
            params = StdioServerParameters(
                command=sys.executable,
                args=["-m", "cli", "mcp"],
                env=workers.full_env({"QUOTECLIP_MCP_API": api.base, "QUOTECLIP_MCP_KEY": KEY}),
                cwd=str(Path(__file__).resolve().parent.parent),
            )

            async def session() -> dict[str, Any]:
                async with Client(params) as client:
                    return await assistant(client, site.url("ep1"), api.base)

            clip = asyncio.run(session())
            width, height = probe(fetch(api.base + clip["download_url"]), tmp_path, ffmpeg_bin)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        if worker.stdout:
            worker.stdout.close()
    assert width * 16 == height * 9 and height >= 640, (width, height)  # Shorts' 9:16 (a preview: smaller)


@pytest.mark.slow
def test_an_assistant_over_http_renders_a_quote_and_strangers_are_refused(
    site,  # noqa: F811
    env,
    workers,
    tmp_path,
    ffmpeg_bin,
) -> None:
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    workers.env = env
    worker = workers.start(burst=False)
    try:
        with serving(workers.full_env()) as api:

            async def session(key: str | None) -> Any:
                headers = {"X-API-Key": key} if key else {}
                async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
                    async with Client(streamable_http_client(f"{api.base}/mcp/", http_client=http)) as client:
                        if key != KEY:
                            return await client.list_tools()
                        clip = await assistant(client, site.url("ep1"), api.base)
                        hostile = {
                            "unknown": await client.call_tool("no_such_tool", {}),
                            "oversized": await client.call_tool(
                                "render_clip", {"source": site.url("ep1"), "start": 1, "end": 2, "caption": "x" * 5000}
                            ),
                            "backwards": await client.call_tool(
                                "render_clip", {"source": site.url("ep1"), "start": 5, "end": 2, "wait_seconds": 0}
                            ),
                            "unsigned site": await client.call_tool(
                                "sign_link", {"site": "nobody", "source": site.url("ep1"), "start": 1, "end": 2}
                            ),
                            "out of scope": await client.call_tool(
                                "sign_link", {"site": "elsewhere", "source": site.url("ep1"), "start": 1, "end": 2}
                            ),
                            "not a link": await client.call_tool("revoke_link", {"link": "https://example.com/x"}),
                            "cancel stored": await client.call_tool("cancel_clip", {"clip_id": clip["id"]}),
                            "cancel unknown": await client.call_tool("cancel_clip", {"clip_id": "clip-" + "0" * 32}),
                        }
                        return clip, hostile

            clip, hostile = asyncio.run(session(KEY))
            width, height = probe(fetch(api.base + clip["download_url"]), tmp_path, ffmpeg_bin)
            for key in (None, "wrong-key-0123456789"):
                with pytest.raises(BaseExceptionGroup):  # (the SDK's client fails its session: its task group's)
                    asyncio.run(session(key))
                opening = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
                request = urllib.request.Request(
                    f"{api.base}/mcp/",
                    data=json.dumps(opening).encode(),
                    headers={"Content-Type": "application/json", **({"X-API-Key": key} if key else {})},
                )
                with pytest.raises(urllib.error.HTTPError) as refused:  # the API's 401, before the MCP app
                    urllib.request.urlopen(request, timeout=10)
                refused.value.close()
                assert refused.value.code == 401, key
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        if worker.stdout:
            worker.stdout.close()
    assert width * 16 == height * 9 and height >= 640, (width, height)
    said = {name: error_of(result) for name, result in hostile.items()}
    assert "no_such_tool" in said["unknown"], said
    assert "422" in said["oversized"] and "caption" in said["oversized"], said
    assert "422" in said["backwards"] and "end must be after start" in said["backwards"], said
    assert "422" in said["unsigned site"] and "no key 'nobody'" in said["unsigned site"], said
    assert "422" in said["out of scope"] and "may clip media.example.org only" in said["out of scope"], said
    assert "422" in said["not a link"], said
    assert "409" in said["cancel stored"] and "revoke its links" in said["cancel stored"], said
    assert "404" in said["cancel unknown"], said


def test_without_the_extra_the_command_names_it(tmp_path: Path) -> None:
    """``quoteclip mcp`` where the SDK cannot be imported: exit 2 naming the extra, nothing on stdout."""
    blocker = tmp_path / "blocked"
    (blocker / "mcp").mkdir(parents=True)
    (blocker / "mcp" / "__init__.py").write_text("raise ImportError('no mcp here')\n")
    done = subprocess.run(
        [sys.executable, "-m", "cli", "mcp"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(blocker)},
        cwd=str(Path(__file__).resolve().parent.parent),
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2 and "quoteclip[mcp]" in done.stderr and done.stdout == "", (done.stdout, done.stderr)
