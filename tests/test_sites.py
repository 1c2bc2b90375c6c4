"""Sources as real video sites behave: freshly signed URLs on every page load, the origin's range rules, links that
expire, formats available later, a cookie and headers every media request needs; one extraction per episode."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import run_cli
from mediacheck import first_bright_frame, first_loud_sample

from jobs.pipeline.produce import Stage, produce_clip
from quoteclip.errors import SourceLinkExpired, SourceTransient, SourceUnavailable
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from storage import LocalStorage
from testkit.media import ffmpeg, lavfi
from testkit.videosite import Episode, SiteFormat, VideoSite

EPISODE_SECONDS = 600


@pytest.fixture(scope="session")
def episode_files(ffmpeg_bin, tmp_path_factory) -> dict[str, Path]:
    """A 10-minute episode (flash + beep on every second; keyframes every 10 s) as a site serves it: separate
    video-only and audio-only files (YouTube's adaptive formats), a muxed file and HLS segments of it."""
    folder = tmp_path_factory.mktemp("site")
    files = {
        "video": folder / "ep-video.mp4",
        "audio": folder / "ep-audio.m4a",
        "muxed": folder / "ep.mp4",
        "hls": folder / "hls" / "index.m3u8",
        "dash": folder / "dash" / "manifest.mpd",
    }
    # noise makes the picture cost what real video does (about 1.3 Mbit/s, as 720p): "a few % of the bytes" means
    # something
    base = folder / "base.mp4"
    picture = "color=c=black:s=320x180:r=30:d=20,drawbox=c=white:t=fill:enable='lt(mod(t,1),0.1)',noise=alls=20:allf=t"
    encode = ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-crf", "30"]
    encode += ["-g", "300", "-keyint_min", "300", "-sc_threshold", "0"]
    ffmpeg(ffmpeg_bin, *lavfi(picture), *encode, str(base))
    # the picture by looping (stream copy: quick); the beep made whole, since looped AAC drifts a frame per loop
    loops = str(EPISODE_SECONDS // 20 - 1)
    ffmpeg(ffmpeg_bin, "-stream_loop", loops, "-i", str(base), "-c", "copy", str(files["video"]))
    beep = f"aevalsrc='if(lt(mod(t,1),0.1),0.8*sin(2*PI*1000*t),0)':s=48000:d={EPISODE_SECONDS}"
    ffmpeg(ffmpeg_bin, *lavfi(beep), "-c:a", "aac", str(files["audio"]))
    ffmpeg(ffmpeg_bin, "-i", str(files["video"]), "-i", str(files["audio"]), "-c", "copy", str(files["muxed"]))
    # the same episode as HLS VOD, as ffmpeg's own muxer cuts it: 10 s MPEG-TS segments on the keyframes (their
    # timestamps start at 1.4 s, not 0)
    files["hls"].parent.mkdir()
    segments = str(files["hls"].parent / "seg%03d.ts")
    ffmpeg(
        ffmpeg_bin,
        *["-i", str(files["muxed"]), "-c", "copy", "-f", "hls", "-hls_time", "10", "-hls_playlist_type", "vod"],
        *["-hls_segment_filename", segments, str(files["hls"])],
    )
    # and as DASH: a manifest naming fMP4 fragments (SegmentTemplate), video and audio apart
    files["dash"].parent.mkdir()
    ffmpeg(
        ffmpeg_bin,
        *["-i", str(files["muxed"]), "-map", "0:v", "-map", "0:a", "-c", "copy", "-f", "dash", "-seg_duration", "10"],
        *["-use_template", "1", "-use_timeline", "0", str(files["dash"])],
    )
    return files


@pytest.fixture
def site(episode_files) -> Iterator[VideoSite]:
    server = VideoSite()
    server.episodes["ep1"] = Episode(
        "Episode one",
        EPISODE_SECONDS,
        [
            SiteFormat("137", episode_files["video"], vcodec="avc1.64001f", width=320, height=180),
            SiteFormat("140", episode_files["audio"], ext="m4a", vcodec="none", acodec="mp4a.40.2"),
        ],
    )
    yield server
    server.close()


def clip(settings: Settings, source: str, start: float, end: float, **extra: object):
    stages: list[str] = []
    spec = build_spec({"source": source, "start": start, "end": end, **extra})
    result = produce_clip(spec, settings, LocalStorage(settings.storage_dir), report=lambda s, p: stages.append(s))
    return result, stages


def assert_exact(path: Path, flash_at: float) -> None:
    """The cut starts at the source frame at ``start``: the next flash (a whole second of the source) shows at
    ``flash_at`` in the clip, and its beep with it."""
    flash, beep = first_bright_frame(path), first_loud_sample(path)
    assert flash is not None and beep is not None
    assert abs(flash - flash_at) <= 0.001 + 1 / 60, f"flash at {flash:.3f} s, expected {flash_at}"
    assert abs(beep - flash) <= 0.040, f"beep at {beep:.3f} s, flash at {flash:.3f} s"


def test_page_source_cut_exactly_by_the_origins_rules_one_extraction(site, settings, episode_files) -> None:
    total = sum(f.file.stat().st_size for f in site.episodes["ep1"].formats)
    first, _ = clip(settings, site.url("ep1"), 300.9, 307.9)
    assert_exact(Path(first.path), 0.1)
    assert site.refused == [], site.refused  # no HEAD, no open-ended or over-10-MiB range, headers sent
    assert site.page_loads["ep1"] == 1
    assert first.source_bytes is not None and first.source_bytes < 0.05 * total, (first.source_bytes, total)

    # the same episode by the same page again, overlapping cut: the extraction and the bytes are reused
    second, _ = clip(settings, site.url("ep1"), 301.9, 308.9)
    assert site.page_loads["ep1"] == 1
    assert second.source_bytes is not None and second.source_bytes < 0.25 * first.source_bytes
    assert_exact(Path(second.path), 0.1)

    # the cached extraction ends (as its expiry comes): the next job reads the page again, gets freshly signed
    # URLs, and still finds the bytes it has, cached under the content's identity (not the URL's)
    for entry in (settings.cache_dir / "extractions").glob("*.json"):
        entry.unlink()
    third, _ = clip(settings, site.url("ep1"), 301.9, 308.9, caption="freshly signed")
    assert site.page_loads["ep1"] == 2
    assert third.source_bytes is not None and third.source_bytes < 0.25 * first.source_bytes
    assert site.bytes_sent_twice() == 0


def test_a_link_expiring_mid_job_is_extracted_again_and_the_clip_finishes(site, settings) -> None:
    site.uses_by_load = [3]  # the first page's links answer three requests, then 403
    result, _ = clip(settings, site.url("ep1"), 120.9, 127.9)
    assert_exact(Path(result.path), 0.1)
    assert site.page_loads["ep1"] == 2 and ("ep1/137", "expired link") in site.refused


def test_links_refused_again_after_a_fresh_extraction_say_expired_link(site, settings) -> None:
    site.uses = 0
    with pytest.raises(SourceLinkExpired, match="again after a fresh extraction") as info:
        clip(settings, site.url("ep1"), 10, 12)
    assert info.value.kind == "expired link" and not info.value.permanent
    assert site.page_loads["ep1"] == 2  # one re-extraction, not more


def test_a_format_available_later_is_waited_for(site, settings, episode_files) -> None:
    site.episodes["ep1"].formats[1].available_in = 1.5
    began = time.monotonic()
    result, stages = clip(settings, site.url("ep1"), 30.9, 32.9)
    assert time.monotonic() - began >= 1.0 and Stage.WAITING in stages
    assert not [r for r in site.refused if r[1] == "before available_at"]
    assert_exact(Path(result.path), 0.1)
    # a wait over the operator's limit fails as transient (retried later), naming the variable
    site.episodes["ep1"].formats[1].available_in = 600
    with pytest.raises(SourceTransient, match="QUOTECLIP_AVAILABLE_WAIT"):
        clip(replace(settings, cache_dir=settings.cache_dir / "other"), site.url("ep1"), 40.9, 42.9)


def test_media_behind_a_cookie_gets_the_operators_cookies(site, settings, tmp_path) -> None:
    site.cookie = "session=letmein"
    with pytest.raises(SourceUnavailable, match="cookies"):
        clip(settings, site.url("ep1"), 10, 12)
    jar = tmp_path / "cookies.txt"
    jar.write_text("# Netscape HTTP Cookie File\n127.0.0.1\tFALSE\t/\tFALSE\t0\tsession\tletmein\n")
    done, _ = clip(replace(settings, cookies_file=jar), site.url("ep1"), 10, 12)
    assert abs(done.duration - 2.0) <= 1 / 30
    # the cached extraction holds no cookie: a worker without the file cannot use it
    stored = list((settings.cache_dir / "extractions").glob("*.json"))
    assert stored and all("letmein" not in p.read_text() for p in stored)


def test_cli_renders_share_one_extraction_on_disk(site, tmp_path) -> None:
    env = {
        "QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"),
        "QUOTECLIP_CACHE_DIR": str(tmp_path / "cache"),
        "QUOTECLIP_ALLOW_ADDRESSES": "127.0.0.1/32",
    }
    for start in ("60.9", "64.9"):
        done = run_cli("render", site.url("ep1"), "--start", start, "--end", str(float(start) + 3), "--json", env=env)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["duration"] == pytest.approx(3.0, abs=1 / 30)
    assert site.page_loads["ep1"] == 1


def test_workers_share_one_extraction_through_redis(site, queue_env, workers, redis_url) -> None:
    import redis as redis_lib

    env = {**queue_env, "QUOTECLIP_SOURCE_HOSTS": "*"}
    ids = []
    for start in (200.9, 204.9, 208.9, 212.9):
        queued = run_cli("enqueue", site.url("ep1"), "--start", str(start), "--end", str(start + 2), "--json", env=env)
        assert queued.returncode == 0, queued.stderr
        ids.append(json.loads(queued.stdout)["job_id"])
    workers.env = env
    workers.burst(2)
    for job_id in ids:
        status = json.loads(run_cli("status", job_id, "--json", env=env).stdout)
        assert status["status"] == "finished", status
    assert site.page_loads["ep1"] == 1  # four jobs on two workers, one extraction
    keys = redis_lib.Redis.from_url(redis_url).keys("quoteclip:extraction:*")
    assert len(keys) == 1


def test_an_hls_only_source_fetches_only_the_cuts_segments_and_cuts_exactly(site, settings, episode_files) -> None:
    """ffmpeg never reads the playlist: quoteclip fetches the segments the cut needs (and the first, whose start
    timestamp is the episode's time 0) and ffmpeg cuts a local file of them at the right place."""
    folder = episode_files["hls"].parent
    site.episodes["hls1"] = Episode(
        "HLS only",
        EPISODE_SECONDS,
        [
            SiteFormat(
                "hls-180",
                episode_files["hls"],
                vcodec="avc1.64001f",
                acodec="mp4a.40.2",
                width=320,
                height=180,
                hls=True,
            )
        ],
    )
    total = sum(f.stat().st_size for f in folder.glob("seg*.ts"))
    one, _ = clip(settings, site.url("hls1"), 300.9, 307.9)
    assert_exact(Path(one.path), 0.1)
    assert sorted(site.segments) == ["seg000.ts", "seg030.ts"], site.segments
    assert one.source_bytes is not None and one.source_bytes < 0.05 * total, (one.source_bytes, total)
    # a cut across a segment boundary joins two segments; the ones already fetched come from the cache
    two, _ = clip(settings, site.url("hls1"), 295.9, 302.9)
    assert_exact(Path(two.path), 0.1)
    assert sorted(site.segments) == ["seg000.ts", "seg029.ts", "seg030.ts"], site.segments
    assert site.page_loads["hls1"] == 1 and site.refused == []


def test_a_dash_only_source_fetches_only_the_cuts_fragments_and_cuts_exactly(site, settings, episode_files) -> None:
    """DASH (the manifest read by yt-dlp's MPD parser): the init sections and only the fragments the cut needs (and
    the first, the episode's time 0), separate video and audio, cut exactly and in sync."""
    folder = episode_files["dash"].parent
    site.episodes["dash1"] = Episode(
        "DASH only", EPISODE_SECONDS, [SiteFormat("dash", episode_files["dash"], dash=True)]
    )
    total = sum(f.stat().st_size for f in folder.glob("chunk-*.m4s"))
    one, _ = clip(settings, site.url("dash1"), 300.9, 307.9)
    assert_exact(Path(one.path), 0.1)
    assert one.source_bytes is not None and one.source_bytes < 0.05 * total, (one.source_bytes, total)
    fetched = sorted(set(site.segments))
    assert [n for n in fetched if n.startswith("chunk-stream0")] == [
        "chunk-stream0-00001.m4s",
        "chunk-stream0-00031.m4s",
    ]
    assert site.page_loads["dash1"] == 1 and site.refused == []


def test_every_playlist_entry_passes_the_address_rules(settings, http_source, canary, ffmpeg_bin, tmp_path) -> None:
    from quoteclip.errors import SourceRefused
    from sources.cache import BlockCache
    from sources.hls import HlsFormat
    from sources.http import Fetcher

    (http_source.root / "index.m3u8").write_text(
        f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n{canary.url('secret.mp4')}\n#EXT-X-ENDLIST\n"
    )
    fetcher = Fetcher(None, settings.allow_addresses)
    hls = HlsFormat(http_source.url("index.m3u8"), fetcher, BlockCache(tmp_path / "cache", 10**8), "key")
    with pytest.raises(SourceRefused, match="not allowed"):
        hls.cut(0, 5, tmp_path, "video", ffmpeg_bin)
    assert canary.requests == {}


@pytest.mark.parametrize(
    ("playlist", "message"),
    [
        ("#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1\nv.m3u8\n", "master playlist"),
        ("#EXTM3U\n#EXTINF:10,\na.ts\n", "live"),
        ('#EXTM3U\n#EXT-X-KEY:METHOD=AES-128,URI="k"\n#EXTINF:10,\na.ts\n#EXT-X-ENDLIST\n', "encrypted"),
        ("<html>not a playlist</html>", "not an HLS playlist"),
    ],
    ids=["master", "live", "encrypted", "not-hls"],
)
def test_playlists_quoteclip_cannot_clip_are_refused_by_name(playlist, message) -> None:
    from sources.hls import parse_playlist

    with pytest.raises(SourceUnavailable, match=message):
        parse_playlist(playlist, "https://cdn.example/ep/index.m3u8")


def test_one_proxy_carries_the_extraction_and_the_media(site, settings) -> None:
    """QUOTECLIP_PROXY: the page (yt-dlp, through the egress rules) and the media (the fetcher) leave through the
    operator's proxy, asked for the vetted addresses; without it answering, nothing reaches the site."""
    from sources.egress import EgressProxy

    class OperatorsProxy(EgressProxy):
        def __init__(self) -> None:
            self.seen: list[str] = []
            super().__init__(("127.0.0.1/32",))

        def connect(self, scheme: str, host: str, port: int):  # type: ignore[no-untyped-def]
            self.seen.append(f"{host}:{port}")
            return super().connect(scheme, host, port)

    with OperatorsProxy() as upstream:
        result, _ = clip(replace(settings, proxy=upstream.url), site.url("ep1"), 10.9, 12.9)
    assert_exact(Path(result.path), 0.1)
    site_address = f"127.0.0.1:{site.server.server_address[1]}"
    assert site.requests > 2 and upstream.seen.count(site_address) == site.requests, (upstream.seen, site.requests)
    before = site.requests
    with pytest.raises(SourceTransient):
        clip(replace(settings, proxy="http://127.0.0.1:9", cache_dir=settings.cache_dir / "p"), site.url("ep1"), 20, 22)
    assert site.requests == before


def test_the_proxy_setting_is_checked() -> None:
    from quoteclip.errors import BadInput

    assert Settings.from_env({"QUOTECLIP_PROXY": "http://user:pw@proxy.internal:3128"}).proxy
    for bad in ("socks5://proxy:1080", "proxy.internal:3128", "http://proxy.internal"):
        with pytest.raises(BadInput, match="QUOTECLIP_PROXY"):
            Settings.from_env({"QUOTECLIP_PROXY": bad})


def test_a_tunnel_works_in_a_process_holding_over_1024_files(site) -> None:
    """The egress tunnel waits on its sockets with a selector: select() cannot watch a descriptor past 1024, which a
    long-lived worker or API process reaches (the tunnel then closed without a byte)."""
    import os
    import resource
    import socket

    from sources.egress import EgressProxy
    from sources.safety import proxy_headers

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this machine allows {hard} open files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        port = site.server.server_address[1]
        with (
            EgressProxy(("127.0.0.1/32",)) as egress,
            socket.create_connection(("127.0.0.1", egress.server.server_address[1]), timeout=10) as conn,
        ):
            credential = "".join(f"{k}: {v}\r\n" for k, v in proxy_headers(egress.url).items())
            conn.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{credential}\r\n".encode())
            assert conn.recv(4096).startswith(b"HTTP/1.1 200"), "the tunnel was not opened"
            conn.sendall(f"GET /watch/ep1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200") and b'id="player"' in answer
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_requests_to_one_origin_keep_to_the_configured_rate_and_concurrency(http_source, settings) -> None:
    """QUOTECLIP_ORIGIN_RATE / QUOTECLIP_ORIGIN_CONCURRENCY: at most so many requests a second, and in flight, to
    one host from one job."""
    import threading

    from sources.http import Fetcher

    (http_source.root / "f.bin").write_bytes(bytes(range(256)) * 4096)
    http_source.stalls["f.bin"] = 0.2  # each answer takes a while: requests would overlap if allowed
    fetcher = Fetcher(None, settings.allow_addresses, origin_rate=10.0, per_origin=2)
    began = time.monotonic()
    threads = [
        threading.Thread(target=fetcher.get_range, args=(http_source.url("f.bin"), i * 1000, i * 1000 + 999))
        for i in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fetcher.close()
    assert fetcher.requests == 6 and time.monotonic() - began >= 0.5  # 6 starts at 10 a second
    assert Settings.from_env({"QUOTECLIP_ORIGIN_RATE": "2.5"}).origin_rate == 2.5


def test_an_extraction_lives_no_longer_than_its_links(tmp_path) -> None:
    """The cached entry ends two minutes before the earliest ``expire=`` of its media URLs (YouTube's form), and
    never later than the cap; links that expire sooner are not cached at all."""
    from sources.extraction import Extracted, Extractions, FileEntries, MediaFormat, url_expiry

    now = time.time()
    calls: list[int] = []

    def extract(lifetime: float) -> Extracted:
        calls.append(1)
        url = f"https://media.example/videoplayback?sig=x&expire={int(now + lifetime)}&itag=22"
        return Extracted("id", "t", "Site", 60.0, MediaFormat(url, "22"))

    assert url_expiry("https://r1.googlevideo.com/videoplayback/expire/1700000000/itag/22") == 1700000000.0
    entries = FileEntries(tmp_path / "entries")
    pages = Extractions(entries, "url:https://site.example/watch/1", "final", lambda: extract(300), cap=3600)
    pages.get()
    until = json.loads(next((tmp_path / "entries").glob("*.json")).read_text())["until"]
    assert 170 <= until - now <= 185  # 300 s of link less the 120 s margin
    pages.get()
    assert len(calls) == 1
    short = Extractions(entries, "url:https://site.example/watch/2", "final", lambda: extract(60), cap=3600)
    short.get()
    short.get()
    assert len(calls) == 3  # links expiring within the margin: extracted each time, never cached


def both_families(episode_files) -> Episode:
    """An episode as YouTube lists it for its ``web`` client: plain video and audio files, and an HLS rendition."""
    hls = SiteFormat("hls-180", episode_files["hls"], acodec="mp4a.40.2", width=320, height=180, hls=True)
    return Episode(
        "Both families",
        EPISODE_SECONDS,
        [
            SiteFormat("137", episode_files["video"], vcodec="avc1.64001f", width=320, height=180),
            SiteFormat("140", episode_files["audio"], ext="m4a", vcodec="none", acodec="mp4a.40.2"),
            hls,
        ],
    )


def source_format(settings: Settings, result) -> str | None:
    manifest = settings.storage_dir / f"{result.key}.manifest.json"
    return json.loads(manifest.read_text())["source"].get("format")


def test_plain_formats_refused_fall_back_to_hls_and_the_site_is_remembered(site, settings, episode_files) -> None:
    """HTTPS formats refused (403) after the extraction, as YouTube's web client without a PO token: the clip is cut
    from the page's HLS rendition, exactly, from the cut's segments only; the next clip goes to HLS at once; and a
    page with no plain format left (SABR-only) is read from HLS too."""
    site.episodes["yt1"] = both_families(episode_files)
    site.plain = "refused"
    one, _ = clip(settings, site.url("yt1"), 300.9, 302.9)
    assert_exact(Path(one.path), 0.1)
    assert round(one.duration * 30) == 60  # 2 s at 30 fps: the frame rule
    assert sorted(site.segments) == ["seg000.ts", "seg030.ts"], site.segments
    assert source_format(settings, one) == "hls"
    assert {why for _, why in site.refused} == {"plain refused"}
    assert site.page_loads["yt1"] == 2  # refused again on a fresh extraction's link: refused, not expired
    refused = len(site.refused)

    # the site's refusal is remembered: the next clip reads HLS at once, asking for no plain format
    two, _ = clip(settings, site.url("yt1"), 310.9, 312.9)
    assert_exact(Path(two.path), 0.1)
    assert len(site.refused) == refused and site.page_loads["yt1"] == 2
    assert sorted(site.segments) == ["seg000.ts", "seg030.ts", "seg031.ts"], site.segments
    assert source_format(settings, two) == "hls"

    # then the plain formats leave the page (SABR-only): HLS is chosen by the extraction itself
    site.plain = "gone"
    for entry in (settings.cache_dir / "extractions").glob("*.json"):
        entry.unlink()  # the extraction and the remembered refusal
    three, _ = clip(settings, site.url("yt1"), 320.9, 322.9)
    assert_exact(Path(three.path), 0.1)
    assert source_format(settings, three) == "hls" and len(site.refused) == refused
    assert site.page_loads["yt1"] == 3
    assert sorted(site.segments) == ["seg000.ts", "seg030.ts", "seg031.ts", "seg032.ts"], site.segments


def test_youtube_formats_hls_reads_hls_though_plain_formats_are_served(site, settings, episode_files) -> None:
    site.episodes["yt1"] = both_families(episode_files)
    done, _ = clip(replace(settings, youtube_formats="hls"), site.url("yt1"), 100.9, 102.9)
    assert_exact(Path(done.path), 0.1)
    assert source_format(settings, done) == "hls"
    assert site.bytes_sent["yt1/137"] == 0 and site.bytes_sent["yt1/140"] == 0
    assert sorted(site.segments) == ["seg000.ts", "seg010.ts"], site.segments
    # and by default, the plain formats, said as such
    other = clip(settings, site.url("yt1"), 200.9, 202.9, caption="plain")[0]
    assert source_format(settings, other) == "https" and site.bytes_sent["yt1/137"] > 0


def test_render_finds_the_quote_in_the_sources_own_captions(site, tmp_path) -> None:
    """``--transcript source --quote WORDS`` with no --start/--end: the clip runs from the first word's start to the
    last word's end in the page's automatic captions (json3), cut exactly; one extraction for captions and render."""
    from test_source_captions import rolling_json3

    from testkit.videosite import SiteCaption

    site.episodes["ep1"].captions = [SiteCaption("en", "json3", rolling_json3())]
    env = {
        "QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"),
        "QUOTECLIP_CACHE_DIR": str(tmp_path / "cache"),
        "QUOTECLIP_ALLOW_ADDRESSES": "127.0.0.1/32",
    }
    done = run_cli(
        "render", site.url("ep1"), "--transcript", "source", "--quote", "Charlie, delta echo!", "--json", env=env
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert round(result["duration"] * 30) == 90  # 300.9 → 303.9: 3 s at 30 fps
    assert_exact(Path(result["path"]), 0.1)
    assert site.page_loads["ep1"] == 1 and site.caption_loads == {"ep1/0": 1}
