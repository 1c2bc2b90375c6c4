"""PO tokens, to the edge the tests can reach without YouTube: the ``youtube`` extra's provider plugin is loaded by
an extraction's yt-dlp, the operator's extractor arguments and cookies reach it as set, and YouTube's refusals read
as what they are (``source refused: YouTube wants a PO token for this format``), naming the settings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from quoteclip.settings import Settings
from testkit.videosite import Episode, SiteFormat, VideoSite

ARGS = "youtube:player_client=web,mweb;po_token=web.gvs+TOKEN youtubepot-bgutilhttp:base_url=http://127.0.0.1:4999"
# what yt-dlp's YouTube extractor warns when it leaves a client's formats out (its words, 2026.10)
SKIPPED = (
    "web client https formats require a GVS PO Token which was not provided. They will be skipped as they may yield "
    'HTTP Error 403. You can manually pass a GVS PO Token for this client with --extractor-args "youtube:po_token='
    'web.gvs+XXX"'
)
PROVIDER_DOWN = (
    "[pot:bgutil:http] Error reaching GET http://127.0.0.1:4416/ping (caused by TransportError). Please make sure "
    "that the server is reachable at http://127.0.0.1:4416."
)


def test_the_provider_plugin_the_arguments_and_the_cookies_reach_yt_dlp(tmp_path) -> None:
    """As an extraction builds its yt-dlp (sources.ytdlp: the options, the operator's, the handlers), no network:
    the bgutil provider plugin (the ``youtube`` extra) is registered, YouTube's extractor reads ``player_client``
    and ``po_token``, the provider its ``base_url``, and the operator's cookies are in the jar."""
    from yt_dlp.extractor.youtube.pot._registry import _pot_providers

    from sources.ytdlp import ResponseCap, operator_options, ydl_options, youtube_dl

    jar = tmp_path / "cookies.txt"
    jar.write_text("# Netscape HTTP Cookie File\n.youtube.com\tTRUE\t/\tTRUE\t0\tSID\tsigned-in\n")
    settings = Settings.from_env({"QUOTECLIP_EXTRACTOR_ARGS": ARGS, "QUOTECLIP_COOKIES_FILE": str(jar)})
    work = tmp_path / "job"
    work.mkdir()
    options = ydl_options(work, "ffmpeg") | operator_options(work, settings.cookies_file, settings.extractor_args)
    with youtube_dl(options, ResponseCap(1024)) as ydl:
        providers = set(_pot_providers.value)
        youtube = ydl.get_info_extractor("Youtube")
        assert youtube._configuration_arg("player_client") == ["web", "mweb"]
        assert youtube._configuration_arg("po_token", casesense=True) == ["web.gvs+TOKEN"]
        base = youtube._configuration_arg("base_url", ie_key="youtubepot-bgutilhttp", casesense=True)
        assert base == ["http://127.0.0.1:4999"]
        assert [c.value for c in ydl.cookiejar if c.name == "SID"] == ["signed-in"]
    assert {"BgUtilHTTP", "BgUtilScriptDeno", "BgUtilScriptNode"} <= providers, providers
    assert jar.read_text().count("signed-in") == 1  # the operator's file as it was (yt-dlp wrote a private copy)


@pytest.fixture
def youtube_like(tmp_path: Path) -> Iterator[VideoSite]:
    media = tmp_path / "media.mp4"
    media.write_bytes(b"\0" * 4096)  # refused before any byte: nothing reads it
    site = VideoSite()
    site.episodes["yt1"] = Episode("Plain formats only", 600, [SiteFormat("18", media, acodec="mp4a.40.2")])
    yield site
    site.close()


def test_a_plain_format_refused_with_no_hls_rendition_wants_a_po_token(youtube_like, settings) -> None:
    """YouTube's plain format answers 403 on a fresh extraction's link too, and the page has no HLS rendition: the
    job fails once, naming the cures (the settings), not as an expired link retried for nothing."""
    from test_sites import clip

    from sources.ytdlp import PoTokenWanted

    youtube_like.plain = "refused"
    with pytest.raises(PoTokenWanted) as refused:
        clip(settings, youtube_like.youtube_url("yt1"), 10, 12)
    said = f"{refused.value.kind}: {refused.value}"
    assert said.startswith("source refused: YouTube wants a PO token for this format (format 18, HTTP 403"), said
    assert "QUOTECLIP_YOUTUBE_FORMATS=hls" in said and "QUOTECLIP_EXTRACTOR_ARGS" in said
    assert refused.value.permanent and youtube_like.page_loads["yt1"] == 2


def test_formats_left_out_for_want_of_a_po_token_say_so_and_what_the_provider_said(youtube_like, settings) -> None:
    from sources.opener import page_extractions
    from sources.ytdlp import PoTokenWanted

    youtube_like.plain = "gone"
    youtube_like.warnings = [SKIPPED, PROVIDER_DOWN]
    from sources import resolve_source

    ref = resolve_source(youtube_like.youtube_url("yt1"), allow_local=False)
    with pytest.raises(PoTokenWanted) as refused:
        page_extractions(ref, settings, settings.cache_dir, "ffmpeg", False).get()
    said = str(refused.value)
    assert said.startswith("YouTube wants a PO token for this format (yt-dlp left out every format that wants one)")
    assert "; the PO-token provider said: " in said and "Error reaching GET http://127.0.0.1:4416/ping" in said
