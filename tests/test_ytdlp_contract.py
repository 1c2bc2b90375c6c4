"""yt-dlp held to its contract: every name quoteclip uses that is not yt-dlp's public API (``sources.ytdlp.
PRIVATE_NAMES``), and the documented handler contract it writes its request handlers to, checked against the
installed yt-dlp. A failure names the name and the yt-dlp version, so a new release that breaks one says so at once
(``.ci/ytdlp-newest`` runs these against the newest yt-dlp on the package index)."""

from __future__ import annotations

import functools
import inspect
from importlib import metadata
from typing import Any

import pytest

VERSION = metadata.version("yt-dlp")


def broken(name: str, what: str) -> str:
    return f"yt-dlp {VERSION}: {name} {what} (sources/ytdlp.py relies on it)"


def test_every_private_name_is_checked_here() -> None:
    from sources.ytdlp import PRIVATE_NAMES

    source = inspect.getsource(inspect.getmodule(test_every_private_name_is_checked_here))  # type: ignore[arg-type]
    assert all(f'"{name}"' in source for name in PRIVATE_NAMES), "a private name without its contract test here"


def test_requests_rh_is_a_request_handler_built_by_the_documented_parameters() -> None:
    name = "yt_dlp.networking._requests.RequestsRH"
    try:
        from yt_dlp.networking._requests import RequestsRH
    except ImportError as exc:
        pytest.fail(broken(name, f"cannot be imported ({exc})"))
    from yt_dlp.networking import RequestHandler

    assert issubclass(RequestsRH, RequestHandler), broken(name, "is no longer a RequestHandler")
    assert RequestsRH.RH_KEY == "Requests", broken(name, f"has another key ({RequestsRH.RH_KEY})")
    parameters = inspect.signature(RequestHandler.__init__).parameters
    for parameter in ("logger", "headers", "cookiejar", "timeout", "proxies", "verbose"):
        assert parameter in parameters, broken("yt_dlp.networking.RequestHandler", f"takes no {parameter}=")
    for method in ("validate", "send", "close"):
        assert callable(getattr(RequestsRH, method, None)), broken(name, f"has no {method}()")
    assert {"http", "https"} <= set(RequestsRH._SUPPORTED_URL_SCHEMES), broken(name, "no longer takes http(s)")


def test_request_director_is_the_instances_cached_handlers() -> None:
    """A YoutubeDL's handlers are its ``_request_director`` (a cached property, built on first use by the public
    ``build_request_director``) and every request it makes goes through it: a subclass's own property replaces
    it."""
    import yt_dlp

    name = "yt_dlp.YoutubeDL._request_director"
    found = inspect.getattr_static(yt_dlp.YoutubeDL, "_request_director", None)
    assert isinstance(found, functools.cached_property), broken(name, f"is no longer a cached property ({found!r})")
    assert "_request_director" in inspect.getsource(yt_dlp.YoutubeDL.urlopen), broken(name, "is not what urlopen uses")
    parameters = list(inspect.signature(yt_dlp.YoutubeDL.build_request_director).parameters)
    assert parameters[:3] == ["self", "handlers", "preferences"], broken(
        "yt_dlp.YoutubeDL.build_request_director", f"takes {parameters}"
    )


def test_an_extractions_youtube_dl_holds_quoteclips_handlers_alone() -> None:
    from sources.ytdlp import ResponseCap, youtube_dl

    with youtube_dl({"quiet": True}, ResponseCap(10)) as ydl:
        handlers = ydl._request_director.handlers
        assert sorted(handlers) == ["Data", "Quoteclip"], broken("yt_dlp.YoutubeDL._request_director", "was not used")


def test_the_documented_handler_contract_holds() -> None:
    """What a ``RequestHandler`` subclass redefines, by the class's own documentation: ``_send``, the supported
    schemes, proxy schemes and features (None: unchecked), ``_check_extensions``; a ``Response`` built from a file,
    a URL and headers; ``HTTPError.response``."""
    from yt_dlp.networking import RequestHandler, Response
    from yt_dlp.networking.exceptions import HTTPError

    name = "yt_dlp.networking.RequestHandler"
    assert getattr(RequestHandler._send, "__isabstractmethod__", False), broken(name, "_send is no longer the hook")
    for attribute in ("_SUPPORTED_URL_SCHEMES", "_SUPPORTED_PROXY_SCHEMES", "_SUPPORTED_FEATURES"):
        assert hasattr(RequestHandler, attribute), broken(name, f"has no {attribute}")
    assert callable(getattr(RequestHandler, "_check_extensions", None)), broken(name, "has no _check_extensions")
    assert list(inspect.signature(Response.__init__).parameters)[1:7] == [
        "fp",
        "url",
        "headers",
        "status",
        "reason",
        "extensions",
    ], broken("yt_dlp.networking.Response", "is built otherwise")
    assert "response" in inspect.signature(HTTPError.__init__).parameters, broken(
        "yt_dlp.networking.exceptions.HTTPError", "has no response"
    )


def test_the_hls_rendition_is_chosen_by_yt_dlps_format_selector() -> None:
    """``build_format_selector`` (public) over a page's formats, as yt-dlp itself calls the selector."""
    import yt_dlp

    from sources.ytdlp import hls_choice

    def fmt(format_id: str, protocol: str, height: int, acodec: str = "mp4a.40.2") -> dict[str, Any]:
        return {
            "format_id": format_id,
            "protocol": protocol,
            "height": height,
            "url": f"https://cdn.example/{format_id}",
            "vcodec": "avc1",
            "acodec": acodec,
            "ext": "mp4",
        }

    formats = [fmt("93", "m3u8_native", 360), fmt("18", "https", 360), fmt("95", "m3u8_native", 720)]
    formats += [fmt("96", "m3u8_native", 1080), fmt("137", "https", 1080, acodec="none")]
    with yt_dlp.YoutubeDL({"quiet": True, "format_sort": ["res:720"]}) as ydl:
        ydl.sort_formats({"formats": formats})
        chosen = hls_choice(ydl, {"id": "x", "formats": formats})
        preview = hls_choice(ydl, {"id": "x", "formats": formats}, preview=True)
    selector = "yt_dlp.YoutubeDL.build_format_selector"
    assert [f["format_id"] for f in chosen] == ["95"], broken(selector, f"chose {chosen}")
    assert [f["format_id"] for f in preview] == ["93"], broken(selector, f"chose {preview} for a preview")


def test_extractor_args_are_parsed_by_yt_dlps_own_option_parser() -> None:
    from sources.ytdlp import parse_extractor_args

    parsed = parse_extractor_args(("youtube:player_client=web,mweb;po_token=web.gvs+TOKEN",))
    assert parsed == {"youtube": {"player_client": ["web", "mweb"], "po_token": ["web.gvs+TOKEN"]}}, broken(
        "yt_dlp.parse_options", f"parsed --extractor-args as {parsed}"
    )


def test_constraints_pin_the_versions_ci_tested_and_the_image_installs_with_them() -> None:
    """constraints.txt (pip freeze of CI's environment) pins the installed yt-dlp; the Dockerfile installs with it,
    and can take a newer yt-dlp alone (``--build-arg YTDLP=…``)."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    pins = {}
    for line in (root / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not pinned with =="
            pins[name.lower()] = version
    assert pins.get("yt-dlp") == VERSION, f"constraints.txt pins yt-dlp {pins.get('yt-dlp')}, CI runs {VERSION}"
    assert "quoteclip" not in pins
    dockerfile = (root / "Dockerfile").read_text()
    assert "constraints.txt ./" in dockerfile and '".[speaker]" -c constraints.txt' in dockerfile
    assert "ARG YTDLP" in dockerfile and '"yt-dlp[default]==$YTDLP"' in dockerfile
    assert "constraints.txt" not in (root / ".dockerignore").read_text()


def test_a_720p_hls_rendition_comes_before_a_plain_format_under_720p() -> None:
    """A YouTube page left with format 18 (360p, plain) by SABR-only streaming, and HLS renditions: the 720p HLS
    one is read; with a plain 720p format, the plain one still comes first."""
    import yt_dlp

    from sources.ytdlp import FORMAT, FORMAT_SORT

    def fmt(format_id: str, protocol: str, height: int) -> dict[str, Any]:
        return {
            "format_id": format_id,
            "protocol": protocol,
            "height": height,
            "url": f"https://cdn.example/{format_id}",
            "vcodec": "avc1",
            "acodec": "mp4a.40.2",
            "ext": "mp4",
        }

    def chosen(formats: list[dict[str, Any]]) -> str:
        with yt_dlp.YoutubeDL({"quiet": True, "format_sort": FORMAT_SORT}) as ydl:
            ydl.sort_formats({"formats": formats})
            found = list(
                ydl.build_format_selector(FORMAT)(
                    {"formats": formats, "has_merged_format": True, "incomplete_formats": False}
                )
            )
        return str(found[0]["format_id"])

    sabr = [fmt("18", "https", 360), fmt("93", "m3u8_native", 360), fmt("95", "m3u8_native", 720)]
    assert chosen(sabr) == "95"
    assert chosen([*sabr, fmt("22", "https", 720)]) == "22"
