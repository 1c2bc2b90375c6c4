"""Source fetching: only the bytes the quote needs, reused across clips, and nothing unsafe let through."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from mediacheck import gray_frames, streams

from jobs.pipeline.produce import produce_clip
from quoteclip.errors import BadInput, SourceRefused, SourceTransient, SourceUnavailable
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from sources.cache import BlockCache
from sources.http import Fetcher
from sources.remote import RemoteFile
from sources.safety import check_url
from storage import LocalStorage
from testkit.media import ffmpeg, lavfi
from testkit.services import free_port


@pytest.fixture(scope="session")
def long_source(media, ffmpeg_bin, tmp_path_factory) -> Path:
    """A 20-minute source (a 20 s clip looped with stream copy: quick to make), keyframes every 10 s."""
    base = media(size="320x180", duration=20, gop=300)
    out = tmp_path_factory.mktemp("long") / "episode.mp4"
    ffmpeg(ffmpeg_bin, "-stream_loop", "59", "-i", str(base), "-c", "copy", str(out))
    return out


def clip(settings: Settings, source: str, start: float, end: float, **extra: object):
    spec = build_spec({"source": source, "start": start, "end": end, **extra})
    return produce_clip(
        spec,
        settings,
        LocalStorage(settings.storage_dir),
    )


def test_seven_seconds_of_twenty_minutes_fetches_under_5_percent(long_source, settings, http_source) -> None:
    (http_source.root / "ep.mp4").symlink_to(long_source)
    size = long_source.stat().st_size
    result = clip(settings, http_source.url("ep.mp4"), 612.0, 619.0, caption="exact quote")
    assert abs(result.duration - 7.0) <= 1 / 30 and (result.width, result.height) == (1280, 720)
    sent = http_source.bytes_sent["ep.mp4"]
    assert sent < 0.05 * size, f"fetched {sent} of {size} bytes"
    assert result.source_bytes == sent


def test_media_is_read_by_a_video_hosts_range_rules(long_source, media, settings, http_source) -> None:
    """A host that answers 403 to HEAD, to requests without a Range, to open-ended ranges and to ranges over
    10 MiB (YouTube's media hosts since 2026) still gives the clip, from a media URL and from a page: the
    source is read only by bounded ranges, so the host refuses nothing."""
    (http_source.root / "ep.mp4").symlink_to(long_source)
    (http_source.root / "clip.mp4").symlink_to(media(size="320x180", duration=6, gop=60))
    (http_source.root / "page.html").write_text("<html><body><video src='/clip.mp4'></video></body></html>")
    http_source.strict |= {"ep.mp4", "clip.mp4"}
    direct = clip(settings, http_source.url("ep.mp4"), 612.0, 619.0)
    page = clip(settings, http_source.url("page.html"), 1.0, 3.0)
    assert abs(direct.duration - 7.0) <= 1 / 30 and abs(page.duration - 2.0) <= 1 / 30
    assert http_source.requests["ep.mp4"] >= 1 and http_source.requests["clip.mp4"] >= 1
    assert http_source.refused == []
    from sources.cache import BLOCK_SIZE
    from sources.remote import MAX_RUN

    assert MAX_RUN * BLOCK_SIZE <= 10 * 1024 * 1024  # the largest request the fetcher can make


def test_two_clips_from_one_source_fetch_the_overlap_once(long_source, settings, http_source) -> None:
    (http_source.root / "ep.mp4").symlink_to(long_source)
    clip(settings, http_source.url("ep.mp4"), 300.0, 307.0)
    first = http_source.bytes_sent["ep.mp4"]
    second = clip(settings, http_source.url("ep.mp4"), 304.0, 311.0)  # overlaps 4 s of the first
    assert second.source_bytes is not None and second.source_bytes < first / 2
    clip(settings, http_source.url("ep.mp4"), 301.0, 305.0)  # inside what is cached: nothing new
    assert http_source.bytes_sent_twice() == 0
    assert http_source.bytes_sent["ep.mp4"] == first + second.source_bytes


def test_cut_is_frame_exact_through_the_fetcher(media, settings, http_source) -> None:
    src = media(size="320x180", fps=30, duration=12, gop=300)
    (http_source.root / "s.mp4").symlink_to(src)
    result = clip(settings, http_source.url("s.mp4"), 5.5, 8.0, fades=False)
    out = Path(str(result.path))
    first = gray_frames(out, limit=1)[0][1]
    errors = [float(np.abs(img - first).mean()) for _, img in gray_frames(src)]
    assert int(np.argmin(errors)) == 165
    assert streams(out)["frames"] == 75


def test_two_workers_never_download_the_same_block_at_once(long_source, settings, http_source) -> None:
    (http_source.root / "ep.mp4").symlink_to(long_source)
    url = http_source.url("ep.mp4")
    cache = BlockCache(settings.cache_dir, 1024**3)
    barrier = threading.Barrier(4)
    results: list[bytes] = []

    def read() -> None:
        remote = RemoteFile(url, Fetcher(("127.0.0.1",), ("127.0.0.1/32",)), cache)
        barrier.wait()
        results.append(remote.read(3_000_000, 2_000_000))

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = long_source.read_bytes()[3_000_000:5_000_000]
    assert results == [expected] * 4
    assert http_source.bytes_sent_twice() == 0


def test_cache_evicts_least_recently_used_blocks(tmp_path) -> None:
    cache = BlockCache(tmp_path, max_bytes=4 * 1024, block_size=1024)
    for i in range(4):
        cache.put("s1", i, bytes([i]) * 1024)
    cache.get("s1", 0)  # recently used
    import os
    import time

    old = time.time() - 100
    for i in (1, 2, 3):
        os.utime(cache.folder("s1") / f"{i:08d}.blk", (old + i, old + i))
    cache.put("s1", 4, b"\x04" * 1024)
    cache.evict()
    kept = sorted(p.name for p in cache.folder("s1").glob("*.blk"))
    assert "00000000.blk" in kept and "00000004.blk" in kept and "00000001.blk" not in kept
    assert sum(p.stat().st_size for p in cache.folder("s1").glob("*.blk")) <= 4 * 1024


def test_lock_files_go_with_their_blocks(tmp_path) -> None:
    """Blocks downloaded under their locks, evicted, dropped: the lock files go with them (the folder holds no
    more lock files than blocks); a lock file a failed download left goes at the next eviction; a block whose
    lock another process holds (a download of it under way) is not removed."""
    import subprocess
    import sys

    cache = BlockCache(tmp_path, max_bytes=8 * 1024, block_size=1024)
    for i in range(40):
        with cache.lock("s1", i):
            cache.put("s1", i, bytes([i]) * 1024)
    with cache.lock("s1", 99):
        pass  # a download that failed: a lock file and no block
    cache.evict()
    folder = cache.folder("s1")
    blocks = {p.stem for p in folder.glob("*.blk")}
    locks = {p.stem for p in folder.glob("*.lock")}
    assert 0 < len(blocks) <= 8 and locks <= blocks

    held = sorted(blocks)[0]
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sys; from filelock import FileLock; l = FileLock({str(folder / (held + '.lock'))!r})"
            "; l.acquire(); print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        cache.drop("s1")
        assert {p.stem for p in folder.glob("*.blk")} == {held}  # the downloading block stays, the rest went
    finally:
        holder.communicate("", timeout=10)
    cache.drop("s1")
    assert list(folder.glob("*.blk")) == [] and list(folder.glob("*.lock")) == []


# ---- safety ---------------------------------------------------------------------------------------------------


def test_host_allowlist(settings, http_source) -> None:
    with pytest.raises(SourceRefused, match=r"source host not allowed: localhost \(see QUOTECLIP_SOURCE_HOSTS; "):
        clip(settings, http_source.url("x.mp4").replace("127.0.0.1", "localhost"), 1, 2)
    assert http_source.requests == {}


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/x.mp4",
        "http://10.1.2.3/x.mp4",
        "http://[::1]/x.mp4",
        "http://0.0.0.0/x.mp4",
        "http://127.0.0.2/x.mp4",
    ],
)
def test_private_and_metadata_addresses_refused(url) -> None:
    with pytest.raises(SourceRefused, match="source address not allowed"):
        check_url(url, None, ("127.0.0.1/32",))
    with pytest.raises(SourceRefused, match="source address not allowed"):
        check_url("http://169.254.169.254/x.mp4", None, ("169.254.0.0/16",))  # metadata: never


def test_redirect_to_private_address_is_refused(settings, http_source, canary) -> None:
    http_source.redirects["ep.mp4"] = canary.url("secret.mp4")
    with pytest.raises(SourceRefused, match=r"source address not allowed: 127.0.0.2"):
        clip(settings, http_source.url("ep.mp4"), 1, 2)
    assert canary.requests == {}


def test_playlist_disguised_as_mp4_cannot_reach_files_or_canary(settings, http_source, canary) -> None:
    for name, target in (("a.mp4", "file:///etc/passwd"), ("b.mp4", canary.url("secret.mp4"))):
        (http_source.root / name).write_text(
            f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n{target}\n#EXT-X-ENDLIST\n"
        )
        with pytest.raises(BadInput, match="not a readable video file"):
            clip(settings, http_source.url(name), 1, 2)
    assert canary.requests == {}
    assert not (settings.storage_dir.exists() and list(settings.storage_dir.iterdir()))


def test_hls_playlist_naming_private_and_file_entries_never_reaches_them(settings, http_source, canary) -> None:
    """An HLS playlist is read by quoteclip, not ffmpeg: every entry passes the address rules (a private address
    or a file: URL is refused before any request)."""
    (http_source.root / "live.m3u8").write_text(
        f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n{canary.url('secret.mp4')}\n#EXTINF:10,\nfile:///etc/passwd\n"
        "#EXT-X-ENDLIST\n"
    )
    with pytest.raises((SourceUnavailable, SourceRefused)):
        clip(settings, http_source.url("live.m3u8"), 1, 2)
    assert canary.requests == {}


def test_page_with_hostile_title_goes_through_yt_dlp_safely(media, settings, http_source, tmp_path) -> None:
    src = media(size="320x180", duration=6, gop=60)
    (http_source.root / "ep.mp4").symlink_to(src)
    title = "../../../tmp/pwned; $(touch /tmp/quoteclip-pwned) `id` %(id)s"
    (http_source.root / "page.html").write_text(
        f"<html><head><title>{title}</title></head><body><video src='/ep.mp4'></video></body></html>"
    )
    result = clip(settings, http_source.url("page.html"), 1, 3)
    assert result.duration == 2.0
    assert not Path("/tmp/quoteclip-pwned").exists() and not Path("/tmp/pwned").exists()
    assert http_source.requests["page.html"] >= 1 and http_source.requests["ep.mp4"] >= 1


def test_source_errors_read_well(settings, http_source) -> None:
    http_source.statuses["down.mp4"] = 503
    with pytest.raises(SourceTransient, match=r"source server error \(HTTP 503\)"):
        clip(settings, http_source.url("down.mp4"), 1, 2)
    with pytest.raises(SourceUnavailable, match=r"source not found \(HTTP 404\)"):
        clip(settings, http_source.url("missing.mp4"), 1, 2)
    http_source.statuses["private.mp4"] = 403
    with pytest.raises(SourceUnavailable, match=r"source refused \(HTTP 403\)"):
        clip(settings, http_source.url("private.mp4"), 1, 2)


def test_an_origin_dripping_bytes_fails_on_the_rate_floor(media, settings, http_source) -> None:
    """One byte every 0.2 s never stalls a read long enough to time out; the rate floor still ends it, measured
    after every byte (not after a 64 KiB chunk that would take hours)."""
    (http_source.root / "drip.mp4").symlink_to(media(size="320x180", duration=6, gop=60))
    http_source.drips["drip.mp4"] = 0.2
    began = time.monotonic()
    with pytest.raises(SourceTransient, match=r"source too slow \(0 KB/s\)"):
        clip(replace(settings, fetch_timeout=5, fetch_rate_grace=2), http_source.url("drip.mp4"), 1, 2)
    took = time.monotonic() - began
    print(f"\ndripping origin: failed after {took:.1f} s (rate grace 2 s)")
    assert took < 10


def test_stalled_source_fails_within_its_timeout(media, settings, http_source) -> None:
    (http_source.root / "slow.mp4").symlink_to(media(size="320x180", duration=6, gop=60))
    http_source.stalls["slow.mp4"] = 3.0
    with pytest.raises(SourceTransient, match="timed out"):
        clip(replace(settings, fetch_timeout=0.5), http_source.url("slow.mp4"), 1, 2)


def test_limits_refuse_before_rendering(media, settings, http_source, ffmpeg_bin, tmp_path) -> None:
    src = media(size="320x180", duration=6, gop=60)
    (http_source.root / "ep.mp4").symlink_to(src)
    url = http_source.url("ep.mp4")
    with pytest.raises(SourceUnavailable, match=r"source is 0:06.000 long, over the 0:05.000 limit"):
        clip(replace(settings, max_source_seconds=5), url, 1, 2)
    with pytest.raises(SourceUnavailable, match=r"source frame size 320x180 is over the limit"):
        clip(replace(settings, max_frame_pixels=320 * 179), url, 1, 2)
    with pytest.raises(SourceUnavailable, match=r"source download exceeds the 0.0625 MB limit"):
        clip(replace(settings, max_fetch_bytes=64 * 1024, cache_dir=tmp_path / "cold-cache"), url, 1, 2)
    many = tmp_path / "many.mp4"
    ffmpeg(ffmpeg_bin, "-i", str(src), "-map", "0:v", *["-map", "0:a"] * 9, "-c", "copy", str(many))
    (http_source.root / "many.mp4").symlink_to(many)
    with pytest.raises(SourceUnavailable, match=r"source has 10 streams, over the limit of 8"):
        clip(settings, http_source.url("many.mp4"), 1, 2)
    assert not (settings.storage_dir.exists() and list(settings.storage_dir.iterdir()))


def test_yt_dlp_finds_deno_and_ejs(tmp_path) -> None:
    """YouTube readiness after pip install alone: yt-dlp's verbose header lists the JS runtime and yt_dlp_ejs."""
    code = (
        "import yt_dlp, sys\n"
        "from sources.ytdlp import ydl_options\n"
        f"opts = ydl_options(__import__('pathlib').Path({str(tmp_path)!r}), 'ffmpeg', verbose=True)\n"
        "with yt_dlp.YoutubeDL(opts) as ydl: ydl.print_debug_header()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    out = done.stdout + done.stderr
    assert "JS runtimes: deno-" in out, out
    assert "yt_dlp_ejs-" in out, out


def test_health_reports_what_extraction_needs_and_warns_when_it_is_missing(tmp_path) -> None:
    """``quoteclip health`` names yt-dlp's version, the JavaScript runtime and the challenge solver; with deno
    hidden (no wheel binary, nothing on PATH) it warns loudly on stderr (Redis and the store stay what health's
    exit code is about)."""
    from conftest import run_cli

    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips")}
    done = run_cli("health", "--json", env=env)
    body = json.loads(done.stdout)
    import yt_dlp.version

    assert body["extraction"]["yt_dlp"] == yt_dlp.version.__version__
    assert body["extraction"]["js_runtime"].startswith("deno ") and body["extraction"]["challenge_solver"].startswith(
        "yt-dlp-ejs "
    )
    assert body["extraction"]["po_token_provider"].startswith("bgutil-ytdlp-pot-provider ")  # the youtube extra
    assert "WARNING" not in done.stderr
    hide = tmp_path / "sitecustomize.py"  # the deno wheel made unimportable, and no deno on PATH
    hide.write_text("import sys\nsys.modules['deno'] = None\n")
    bare = run_cli("health", "--json", env=env | {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert json.loads(bare.stdout)["extraction"]["js_runtime"].startswith("missing")
    assert "WARNING: js_runtime missing" in bare.stderr, bare.stderr
    operator = env | {"QUOTECLIP_COOKIES_FILE": str(tmp_path / "absent.txt"), "QUOTECLIP_EXTRACTOR_ARGS": "youtube"}
    told = run_cli("health", "--json", env=operator)
    extraction = json.loads(told.stdout)["extraction"]
    assert extraction["cookies"].startswith("missing") and extraction["extractor_args"].startswith("bad")
    assert "WARNING: cookies missing" in told.stderr and "WARNING: extractor_args bad" in told.stderr


@pytest.mark.parametrize(
    ("said", "kind", "permanent"),
    [
        ("Sign in to confirm you\u2019re not a bot. Use --cookies-from-browser or --cookies", "bot check", False),
        ("Sign in to confirm your age. This video may be inappropriate for some users.", "login required", True),
        ("Join this channel to get access to members-only content like this video", "login required", True),
        ("The uploader has not made this video available in your country", "geo-blocked", True),
        ("Private video. Sign in if you've been granted access to this video", "private or removed", True),
        ("Video unavailable. This video has been removed by the uploader", "private or removed", True),
        ("Unable to download webpage: HTTP Error 429: Too Many Requests", "throttled", False),
        ("Unable to download webpage: HTTP Error 503: Service Unavailable", "source unavailable", False),
        ("Unsupported URL: https://example.com/", "source unavailable", True),
    ],
)
def test_extraction_errors_have_distinct_reasons(said: str, kind: str, permanent: bool) -> None:
    """Each reason a site refuses gets its own error (its kind is the status's, the log's and the failure
    metric's reason), transient or permanent as its cause is; yt-dlp's own exception goes in."""
    from yt_dlp.utils import DownloadError, ExtractorError

    from quoteclip.errors import QuoteclipError
    from sources.ytdlp import _raise_extraction_error

    with pytest.raises(QuoteclipError) as raised:
        _raise_extraction_error(DownloadError(f"ERROR: [youtube] abc: {said}", ExtractorError(said)))
    assert (raised.value.kind, raised.value.permanent) == (kind, permanent)
    assert said.split(".")[0][:30] in str(raised.value)


def test_a_geo_restricted_extractor_error_is_geo_blocked() -> None:
    from yt_dlp.utils import GeoRestrictedError

    from quoteclip.errors import SourceGeoBlocked
    from sources.ytdlp import _raise_extraction_error

    with pytest.raises(SourceGeoBlocked, match="not offered in this country"):
        _raise_extraction_error(GeoRestrictedError("This video is not available from your location", ["DE"]))


def test_a_page_behind_a_cookie_needs_the_operators_cookies_file(media, settings, http_source, tmp_path) -> None:
    """QUOTECLIP_COOKIES_FILE reaches yt-dlp (as a private copy: the operator's file is never rewritten)."""
    from dataclasses import replace

    (http_source.root / "clip.mp4").symlink_to(media(size="320x180", duration=6, gop=60))
    (http_source.root / "page.html").write_text("<html><body><video src='/clip.mp4'></video></body></html>")
    http_source.cookies["page.html"] = "session=letmein"
    with pytest.raises(SourceUnavailable, match="403"):
        clip(settings, http_source.url("page.html"), 1.0, 3.0)
    jar = tmp_path / "operator-cookies.txt"
    jar.write_text("# Netscape HTTP Cookie File\n127.0.0.1\tFALSE\t/\tFALSE\t0\tsession\tletmein\n")
    before = jar.read_bytes()
    jar.chmod(0o400)  # read-only, as a mounted secret is
    done = clip(replace(settings, cookies_file=jar), http_source.url("page.html"), 1.0, 3.0)
    assert abs(done.duration - 2.0) <= 1 / 30 and jar.read_bytes() == before
    with pytest.raises(SourceUnavailable, match="QUOTECLIP_COOKIES_FILE cannot be read"):
        clip(replace(settings, cookies_file=tmp_path / "missing.txt"), http_source.url("page.html"), 1.5, 3.0)


def test_extractor_args_are_read_as_yt_dlp_reads_them() -> None:
    from quoteclip.errors import BadInput
    from sources.ytdlp import parse_extractor_args

    parsed = parse_extractor_args(("youtube:player_client=default,mweb;po_token=web.gvs+TOKEN", "generic:impersonate"))
    assert parsed["youtube"] == {"player_client": ["default", "mweb"], "po_token": ["web.gvs+TOKEN"]}
    assert "generic" in parsed
    with pytest.raises(BadInput, match="QUOTECLIP_EXTRACTOR_ARGS: wrong --extractor-args formatting"):
        parse_extractor_args(("youtube",))


def test_size_known_when_another_worker_fetched_the_first_block(long_source, settings, http_source) -> None:
    (http_source.root / "ep.mp4").symlink_to(long_source)
    url = http_source.url("ep.mp4")
    cache = BlockCache(settings.cache_dir, 1024**3)
    late = RemoteFile(url, Fetcher(("127.0.0.1",), ("127.0.0.1/32",)), cache)  # made before anything is cached
    first = RemoteFile(url, Fetcher(("127.0.0.1",), ("127.0.0.1/32",)), cache)
    assert first.ensure_size() == long_source.stat().st_size
    assert late.ensure_size() == long_source.stat().st_size  # from the cache's record, no request of its own
    assert http_source.requests["ep.mp4"] == 1


def test_a_source_whose_frames_do_not_decode_is_bad_input(media, settings, tmp_path) -> None:
    """The header is sound, the coded pictures are noise: the probe reads the header only, so the failed render
    is followed by a look at the first frame, and the error says the source is at fault (exit 2, not 1)."""
    data = bytearray(media(size="320x180", duration=4, gop=60).read_bytes())
    mdat, moov = data.index(b"mdat"), data.index(b"moov")
    noise = np.random.default_rng(7).integers(0, 256, (moov if moov > mdat else len(data)) - mdat - 80, np.uint8)
    data[mdat + 64 : mdat + 64 + len(noise)] = noise.tobytes()
    (tmp_path / "noise.mp4").write_bytes(data)
    with pytest.raises(BadInput, match="source has no decodable video frames"):
        produce_clip(
            build_spec({"source": str(tmp_path / "noise.mp4"), "start": 1, "end": 2}),
            settings,
            LocalStorage(settings.storage_dir),
        )
    assert not (settings.storage_dir.exists() and list(settings.storage_dir.iterdir()))


def test_crafted_huge_frame_header_is_refused_without_decoding_it(settings, http_source, ffmpeg_bin, tmp_path) -> None:
    """A real file whose frame is 20000 pixels wide (one tiny MJPEG frame): refused by the size cap."""
    wide = tmp_path / "wide.mov"
    ffmpeg(ffmpeg_bin, *lavfi("color=c=gray:s=20000x8:d=3:r=1"), "-c:v", "mjpeg", "-q:v", "31", str(wide))
    from renderer.probe import probe

    with pytest.raises(SourceUnavailable, match=r"source frame size 20000x8 is over the limit"):
        probe(str(wide), max_pixels=settings.max_frame_pixels)  # from the header: no frame is decoded
    assert probe(str(wide)).width == 20000  # (without the cap the probe decodes the first frame)
    (http_source.root / "wide.mov").symlink_to(wide)
    with pytest.raises(SourceUnavailable, match=r"source frame size 20000x8 is over the limit"):
        clip(settings, http_source.url("wide.mov"), 0.5, 1.5)
    assert not (settings.storage_dir.exists() and list(settings.storage_dir.iterdir()))


def test_endless_stream_without_a_size_is_refused(settings, tmp_path) -> None:
    """A server that ignores ranges and streams forever with no Content-Length (a live stream)."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.recv(65536)
                try:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: video/mp4\r\nConnection: close\r\n\r\n")
                    deadline = time.monotonic() + 5  # bounded: the test server stops by itself
                    while time.monotonic() < deadline and not stop.is_set():
                        conn.sendall(b"\x00" * 65536)
                        time.sleep(0.01)
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    try:
        with pytest.raises((SourceUnavailable, BadInput)) as info:
            clip(settings, f"http://127.0.0.1:{port}/live.mp4", 1, 2)
        assert "no known size" in str(info.value) or "not a readable video" in str(info.value)
    finally:
        stop.set()
        listener.close()


def test_range_header_rules() -> None:
    """The one Range parser the proxy and the test origins share."""
    from sources.ranges import Unsatisfiable, parse_range

    assert parse_range("bytes=0-99", 1000) == (0, 99)
    assert parse_range("bytes=900-", 1000) == (900, 999)
    assert parse_range("bytes=-100", 1000) == (900, 999)
    assert parse_range("bytes=990-2000", 1000) == (990, 999)
    assert parse_range("bytes=0-1,5-9", 1000) == (0, 1)  # the first range only
    assert parse_range("", 1000) is None and parse_range("bytes=x-y", 1000) is None
    for bad in ("bytes=1000-", "bytes=5-2"):
        with pytest.raises(Unsatisfiable):
            parse_range(bad, 1000)


def test_origin_answers_416_past_the_end(http_source, media) -> None:
    import urllib.error
    import urllib.request

    (http_source.root / "a.mp4").symlink_to(media(size="320x180", duration=2, gop=60))
    size = (http_source.root / "a.mp4").stat().st_size
    request = urllib.request.Request(http_source.url("a.mp4"), headers={"Range": f"bytes={size}-"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)
    info.value.close()
    assert info.value.code == 416 and info.value.headers["Content-Range"] == f"bytes */{size}"


@pytest.mark.parametrize("how", ["redirect", "meta-refresh", "source-element-hls", "source-element-dash"])
def test_extraction_never_reaches_a_private_address(settings, http_source, canary, how) -> None:
    """What yt-dlp fetches itself (pages, what they name, redirects) passes the address rules: a page leading to
    the canary on 127.0.0.2 (loopback, not an allowed address) fails, and the canary receives nothing."""
    target = canary.url("secret.html")
    pages = {
        "meta-refresh": f'<html><head><meta http-equiv="refresh" content="0;url={target}"></head><body>x</body></html>',
        "source-element-hls": f'<html><body><video><source src="{canary.url("v.m3u8")}" '
        'type="application/x-mpegURL"></video></body></html>',
        "source-element-dash": f'<html><body><video><source src="{canary.url("v.mpd")}" '
        'type="application/dash+xml"></video></body></html>',
    }
    if how == "redirect":
        http_source.redirects["page.html"] = target
    else:
        (http_source.root / "page.html").write_text(pages[how])
    with pytest.raises((SourceRefused, SourceUnavailable)) as info:
        clip(settings, http_source.url("page.html"), 1, 2)
    assert canary.requests == {}, canary.requests
    assert "127.0.0.2" not in str(info.value) or "not allowed" in str(info.value)


def test_extraction_errors_do_not_tell_open_and_closed_ports_apart(settings, http_source, canary) -> None:
    """A page redirecting into the worker's network gets one answer whether the port there is open or closed."""
    closed = free_port()
    answers = []
    for name, target in (("open.html", canary.url("secret.html")), ("closed.html", f"http://127.0.0.2:{closed}/x")):
        http_source.redirects[name] = target
        with pytest.raises(SourceRefused) as info:
            clip(settings, http_source.url(name), 1, 2)
        answers.append(str(info.value))
    assert answers[0] == answers[1] and canary.requests == {}
    with pytest.raises(SourceRefused):  # the cloud metadata address: refused before any connection
        http_source.redirects["meta.html"] = "http://169.254.169.254/latest/meta-data/"
        clip(settings, http_source.url("meta.html"), 1, 2)


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254 (metadata)
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "2002:c0a8:0101::1",  # 6to4 of 192.168.1.1
        "2001:0:4136:e378:8000:63bf:f5ff:fffe",  # Teredo, client 10.0.0.1
        "::ffff:10.0.0.1",  # IPv4-mapped
        "::127.0.0.1",  # IPv4-compatible
    ],
)
def test_ipv6_transition_ranges_reaching_private_networks_are_refused(address: str) -> None:
    with pytest.raises(SourceRefused, match="not allowed"):
        check_url(f"http://[{address}]/x.mp4", None)


def test_ipv6_transition_ranges_to_public_addresses_pass() -> None:
    assert check_url("http://[64:ff9b::808:808]/x.mp4", None).address == "64:ff9b::808:808"  # NAT64 of 8.8.8.8


@pytest.mark.slow
def test_frames_that_grow_mid_stream_are_refused(settings, ffmpeg_bin, tmp_path) -> None:
    """The first frame passes the size cap, later ones are larger (a stream that changes resolution): the
    decoder's own cap (-max_pixels, on every frame) refuses them; the render fails naming the size."""
    from quoteclip.errors import RenderFailed

    parts = []
    for n, (size, offset) in enumerate((("320x180", 0), ("640x360", 2))):
        part = tmp_path / f"p{n}.ts"
        ffmpeg(
            ffmpeg_bin,
            *lavfi(f"testsrc2=s={size}:r=30:d=2"),
            *["-c:v", "libx264", "-g", "30", "-output_ts_offset", str(offset), "-f", "mpegts", str(part)],
        )
        parts.append(part.read_bytes())
    grown = tmp_path / "grown.ts"
    grown.write_bytes(b"".join(parts))
    capped = replace(settings, max_frame_pixels=320 * 180)
    with pytest.raises(RenderFailed, match="a source frame of 640x360 is over the frame size limit"):
        clip(capped, str(grown), 0.5, 3.5)
    assert not (settings.storage_dir.exists() and list(settings.storage_dir.glob("*.mp4")))
    assert abs(clip(settings, str(grown), 0.5, 3.5).duration - 3.0) < 0.05  # under the default cap it renders


def test_every_spelling_of_a_youtube_video_is_one_source() -> None:
    """One video, one identity (so one clip key and one cache), computed from the URL alone."""
    from sources.identity import url_identity

    same = [
        "https://www.youtube.com/watch?v=Dkm0sjuzgPU",
        "https://youtube.com/watch?v=Dkm0sjuzgPU&t=42",
        "https://m.youtube.com/watch?feature=share&v=Dkm0sjuzgPU",
        "https://music.youtube.com/watch?v=Dkm0sjuzgPU&list=RDx",
        "https://youtu.be/Dkm0sjuzgPU?si=abc&t=1134",
        "https://www.youtube.com/shorts/Dkm0sjuzgPU",
        "https://www.youtube.com/embed/Dkm0sjuzgPU?start=3",
        "https://www.youtube.com/live/Dkm0sjuzgPU",
        "https://www.youtube-nocookie.com/embed/Dkm0sjuzgPU",
        "HTTPS://WWW.YOUTUBE.COM/watch?v=Dkm0sjuzgPU#t=3",
    ]
    assert {url_identity(u) for u in same} == {"youtube:Dkm0sjuzgPU"}
    assert url_identity("https://www.youtube.com/watch?v=otherVideo1") == "youtube:otherVideo1"
    others = [
        "https://www.youtube.com/watch?v=short",
        "https://www.youtube.com/@channel",
        "https://notyoutube.com/watch?v=Dkm0sjuzgPU",
        "https://cdn.example/ep.mp4#frag",
    ]
    assert [url_identity(u) for u in others] == ["url:" + u.split("#")[0] for u in others]


def test_youtube_spellings_share_one_clip_key(settings) -> None:
    from jobs.pipeline.lookup import lookup
    from storage import LocalStorage

    store = LocalStorage(settings.storage_dir)
    keys = {
        lookup(build_spec({"source": u, "start": 1, "end": 2}), settings, store)[0]
        for u in ("https://youtu.be/Dkm0sjuzgPU", "https://m.youtube.com/watch?v=Dkm0sjuzgPU&t=42")
    }
    assert len(keys) == 1
