"""Media and playlists an origin serves badly cost neither a clip, a worker nor the origin: a deadline per request
(headers dripped a byte at a time, a body dripped), a bound on the segments one clip fetches and playlists whose
durations or keys are absurd, an origin that ignores Range read once, and links that expire every few requests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from test_sites import assert_exact
from test_sites import episode_files as episode_files  # the session's episode, a fixture shared with test_sites
from test_sites import site as site  # the video site serving it (separate video and audio formats, as YouTube's)

from jobs.pipeline.produce import produce_clip
from quoteclip.errors import SourceTransient
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from storage import LocalStorage
from testkit.faces import serving, user_env
from testkit.media import ffmpeg, lavfi
from testkit.videosite import Episode, SiteFormat, VideoSite


def clip(settings: Settings, source: str, start: float, end: float, **extra: object):
    spec = build_spec({"source": source, "start": start, "end": end, **extra})
    return produce_clip(spec, settings, LocalStorage(settings.storage_dir))


def timed(call, *args, **kwargs) -> tuple[BaseException | None, float]:
    """What ``call`` raised (None when it returned) and the seconds it took."""
    began = time.monotonic()
    try:
        call(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001  (the test reads whatever it raised)
        return exc, time.monotonic() - began
    return None, time.monotonic() - began


# ---- a deadline per request: the headers, then the body's rate from the request's start -----------------------


def test_an_origin_dripping_its_headers_fails_the_clip_within_the_header_timeout(media, settings, http_source) -> None:
    """The status line at once, then a header byte every 0.5 s: no read ever stalls, yet the request ends at the
    header timeout with a transient error naming the slowness; one request, not retried inside the job."""
    (http_source.root / "drip.mp4").symlink_to(media(size="320x180", duration=6, gop=60))
    http_source.header_drips["drip.mp4"] = (0.5, 60)
    failed, took = timed(clip, replace(settings, fetch_header_timeout=1.5), http_source.url("drip.mp4"), 1, 2)
    print(f"\norigin dripping its headers: the clip failed after {took:.1f} s (header timeout 1.5 s)")
    assert isinstance(failed, SourceTransient) and not failed.permanent, failed
    assert "source too slow: no response headers within 1.5 s (QUOTECLIP_FETCH_HEADER_TIMEOUT)" in str(failed)
    assert took < 1.5 + 2.0
    assert http_source.requests["drip.mp4"] == 1


@pytest.mark.parametrize("slow", ["index.m3u8", "seg1.ts"])
def test_a_playlist_or_segment_host_dripping_its_headers_fails_within_the_header_timeout(
    slow, settings, http_source, ffmpeg_bin, tmp_path
) -> None:
    """The same deadline for what HLS and DASH sources fetch: the playlist, and each segment."""
    from sources.cache import BlockCache
    from sources.hls import HlsFormat
    from sources.http import Fetcher

    make_segments(http_source.root, ffmpeg_bin, count=2)
    http_source.header_drips[slow] = (0.5, 60)
    fetcher = Fetcher(None, settings.allow_addresses, header_timeout=1.5)
    cache = BlockCache(tmp_path / "cache", 10**8)

    def cut() -> None:
        HlsFormat(http_source.url("index.m3u8"), fetcher, cache, "key").cut(3.0, 5.0, tmp_path, "video", ffmpeg_bin)

    failed, took = timed(cut)
    assert isinstance(failed, SourceTransient) and "no response headers within 1.5 s" in str(failed), failed
    assert took < 1.5 + 2.0
    assert http_source.requests[slow] == 1


def test_a_body_dripped_after_slow_headers_fails_on_the_rate_floor_counted_from_the_request(
    media, settings, http_source
) -> None:
    """Headers dripped for 3 s (under the header timeout), then a body a byte every 0.5 s: the rate floor counts
    from the request, so the first body byte, past the 2 s grace, ends it (not 2 s after the headers)."""
    (http_source.root / "slow.mp4").symlink_to(media(size="320x180", duration=6, gop=60))
    http_source.header_drips["slow.mp4"] = (0.25, 3.0)
    http_source.drips["slow.mp4"] = 0.5
    quick = replace(settings, fetch_header_timeout=10, fetch_rate_grace=2)
    failed, took = timed(clip, quick, http_source.url("slow.mp4"), 1, 2)
    print(f"\nslow headers, then a dripped body: the clip failed after {took:.1f} s (grace 2 s, headers 3 s)")
    assert isinstance(failed, SourceTransient) and not failed.permanent, failed
    said = str(failed)
    assert said.startswith("source too slow (0 KB/s) over ") and "QUOTECLIP_MIN_FETCH_RATE" in said, said
    assert float(said.split(" over ")[1].split(" s")[0]) >= 3.0  # the wait for the headers counted
    assert took < 3.0 + 1.5


def test_a_redirect_whose_body_drips_is_followed_at_once(media, settings, http_source) -> None:
    """A redirect (or refusal) with a long body dripped a byte at a time: the body is never read (the connection is
    closed instead of drained), so the redirect is followed at once."""
    (http_source.root / "ep.mp4").symlink_to(media(size="320x180", duration=6, gop=60))
    http_source.redirects["moved.mp4"] = http_source.url("ep.mp4")
    http_source.slow_redirects["moved.mp4"] = 0.05
    failed, took = timed(clip, settings, http_source.url("moved.mp4"), 1, 2)
    assert failed is None, failed
    assert took < 10, f"{took:.1f} s"


def test_workers_and_previews_are_not_held_by_origins_dripping_headers(media, queue_env, workers, http_source) -> None:
    """Against a running ``quoteclip serve`` and a real worker: four previews of origins that drip their headers
    (every preview slot of the API) are each answered 503 within the header timeout, and a preview of a sound
    source is made right after; a queued clip of such an origin fails its try within the timeout too (transient:
    the queue retries it later)."""
    good = media(size="320x180", duration=6, gop=60)
    (http_source.root / "good.mp4").symlink_to(good)
    for i in range(5):
        (http_source.root / f"drip{i}.mp4").symlink_to(good)
        http_source.header_drips[f"drip{i}.mp4"] = (0.5, 60)
    env = {**queue_env, "QUOTECLIP_FETCH_HEADER_TIMEOUT": "2"}
    answers: dict[int, tuple[int, str, float]] = {}

    def preview(i: int, name: str) -> None:
        body = json.dumps({"source": http_source.url(name), "start": 1, "end": 2}).encode()
        request = urllib.request.Request(base + "/previews", body, {"Content-Type": "application/json"})
        began = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=60) as resp:
                answers[i] = (resp.status, resp.read().decode(), time.monotonic() - began)
        except urllib.error.HTTPError as exc:
            answers[i] = (exc.code, exc.read().decode(), time.monotonic() - began)

    with serving(user_env(env)) as (_, _, base):
        threads = [threading.Thread(target=preview, args=(i, f"drip{i}.mp4")) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=70)
        preview(4, "good.mp4")
    print(
        "\npreviews of origins dripping their headers: "
        + ", ".join(f"{a[0]} after {a[2]:.1f} s" for a in answers.values())
    )
    for i in range(4):
        status, text, took = answers[i]
        assert status == 503 and "no response headers within 2 s" in text, (status, text)
        assert took < 2 + 3.0
    assert answers[4][0] == 200, answers[4]

    queued = run_cli("enqueue", http_source.url("drip4.mp4"), "--start", "1", "--end", "2", "--json", env=env)
    assert queued.returncode == 0, queued.stderr
    job_id = json.loads(queued.stdout)["job_id"]
    workers.env = env
    began = time.monotonic()
    workers.burst(1)
    took = time.monotonic() - began
    status = json.loads(run_cli("status", job_id, "--json", env=env).stdout)
    print(f"queued clip of an origin dripping its headers: its try ended after {took:.1f} s (worker start included)")
    assert "source too slow: no response headers within 2 s" in str(status["error"]), status
    assert status["status"] != "failed" or status.get("permanent") is not True
    from redis import Redis
    from rq.job import Job

    job = Job.fetch(job_id, connection=Redis.from_url(queue_env["QUOTECLIP_REDIS_URL"]))
    assert job.meta["permanent"] is False and job.meta["error_kind"] == "source unavailable"
    assert took < 30
    assert http_source.requests["drip4.mp4"] == 1


# ---- helpers ----------------------------------------------------------------------------------------------------


def make_segments(folder: Path, ffmpeg_bin: str, count: int, seconds: float = 4.0) -> list[str]:
    """``count`` MPEG-TS segments of ``seconds`` each (one keyframe each) and a VOD playlist naming them."""
    source = folder / "whole.ts"
    gop = str(int(25 * seconds))
    ffmpeg(
        ffmpeg_bin,
        *lavfi(f"testsrc2=size=160x90:rate=25:duration={count * seconds}"),
        *["-c:v", "libx264", "-preset", "ultrafast", "-g", gop, "-keyint_min", gop, "-sc_threshold", "0"],
        *["-f", "hls", "-hls_time", str(seconds), "-hls_playlist_type", "vod"],
        *["-hls_segment_filename", str(folder / "seg%d.ts"), str(folder / "index.m3u8")],
    )
    source.unlink(missing_ok=True)
    return sorted(p.name for p in folder.glob("seg*.ts"))


# ---- an origin that ignores Range: read once, whole, into the block cache -------------------------------------------


def test_an_origin_that_ignores_range_is_read_once_and_cut_exactly(media, settings, http_source) -> None:
    """Python's http.server answers a Range with 200 and the whole file: the file is read once, from its first byte
    to its last, and the clip is frame-exact; a second clip of it fetches nothing."""
    import numpy as np
    from mediacheck import gray_frames, streams

    src = media(size="640x360", fps=30, duration=30, gop=300)
    size = src.stat().st_size
    (http_source.root / "plain.mp4").symlink_to(src)
    http_source.ignores_range.add("plain.mp4")
    result = clip(settings, http_source.url("plain.mp4"), 5.5, 8.0, fades=False)
    sent = http_source.bytes_sent["plain.mp4"]
    requests = http_source.requests["plain.mp4"]
    print(f"\norigin ignoring Range: {sent} bytes sent for a {size}-byte file, {requests} requests")
    assert sent <= size and result.source_bytes is not None and result.source_bytes <= size, (sent, size)
    out = Path(str(result.path))
    first = gray_frames(out, limit=1)[0][1]
    errors = [float(np.abs(img - first).mean()) for _, img in gray_frames(src)]
    assert int(np.argmin(errors)) == 165
    assert streams(out)["frames"] == 75
    again = clip(settings, http_source.url("plain.mp4"), 20.0, 21.0)
    assert again.source_bytes == 0 and http_source.bytes_sent["plain.mp4"] == sent


def test_readers_of_an_origin_that_ignores_range_read_it_once_between_them(media, settings, http_source) -> None:
    """Four readers (as four workers on one machine) of such an origin at once: one reads it whole, the others wait
    for its blocks; every reader gets the right bytes, and the body is received once in all."""
    from sources.cache import BlockCache
    from sources.http import Fetcher
    from sources.remote import RemoteFile

    src = media(size="640x360", fps=30, duration=30, gop=300)
    (http_source.root / "plain.mp4").symlink_to(src)
    http_source.ignores_range.add("plain.mp4")
    cache = BlockCache(settings.cache_dir, 1024**3)
    barrier = threading.Barrier(4)
    fetchers = [Fetcher(("127.0.0.1",), ("127.0.0.1/32",)) for _ in range(4)]
    results: dict[int, bytes] = {}

    def read(i: int) -> None:
        remote = RemoteFile(http_source.url("plain.mp4"), fetchers[i], cache)
        barrier.wait()
        results[i] = remote.read(1_000_000 * (i + 1), 500_000)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    data = src.read_bytes()
    assert all(results[i] == data[1_000_000 * (i + 1) : 1_000_000 * (i + 1) + 500_000] for i in range(4))
    assert sum(f.fetched for f in fetchers) == len(data), [f.fetched for f in fetchers]


def test_a_reader_answered_whole_after_another_read_it_whole_does_not_read_it_again(
    media, settings, http_source
) -> None:
    """A reader whose request was on its way while another read the whole file (its answer, the whole body again,
    arrives after the other's read ended): it takes the cached blocks and leaves that body unread."""
    from sources.cache import BlockCache
    from sources.http import Fetcher
    from sources.remote import RemoteFile

    src = media(size="640x360", fps=30, duration=30, gop=300)
    (http_source.root / "plain.mp4").symlink_to(src)
    http_source.ignores_range.add("plain.mp4")
    cache = BlockCache(settings.cache_dir, 1024**3)
    first, late = (Fetcher(("127.0.0.1",), ("127.0.0.1/32",)) for _ in range(2))
    asking, first_done = threading.Event(), threading.Event()
    get_range = late.get_range

    def after_the_first(*args: Any, **kwargs: Any) -> Any:
        asking.set()
        assert first_done.wait(60)
        return get_range(*args, **kwargs)

    late.get_range = after_the_first  # type: ignore[method-assign]
    got: list[bytes] = []
    reader = threading.Thread(
        target=lambda: got.append(RemoteFile(http_source.url("plain.mp4"), late, cache).read(3_000_000, 500_000))
    )
    reader.start()
    assert asking.wait(60)
    RemoteFile(http_source.url("plain.mp4"), first, cache).read(1_000_000, 500_000)
    first_done.set()
    reader.join(timeout=60)
    data = src.read_bytes()
    assert got == [data[3_000_000:3_500_000]]
    assert (first.fetched, late.fetched) == (len(data), 0)


def test_an_origin_ignoring_range_with_a_file_over_the_limits_is_refused_before_its_body(
    media, settings, http_source
) -> None:
    """Over QUOTECLIP_MAX_FETCH_MB (or over half the block cache) the file is refused as soon as its headers say its
    size, naming the limit; not one byte of its body is read."""
    from quoteclip.errors import SourceUnavailable
    from sources.cache import BlockCache
    from sources.http import Fetcher
    from sources.remote import RemoteFile

    src = media(size="640x360", fps=30, duration=30, gop=300)
    (http_source.root / "plain.mp4").symlink_to(src)
    http_source.ignores_range.add("plain.mp4")
    url = http_source.url("plain.mp4")
    with pytest.raises(SourceUnavailable, match=r"over the 1 MB limit for one clip \(QUOTECLIP_MAX_FETCH_MB\)"):
        clip(replace(settings, max_fetch_bytes=1024**2), url, 1, 2)
    fetcher = Fetcher(("127.0.0.1",), ("127.0.0.1/32",), max_bytes=1024**2)
    with pytest.raises(SourceUnavailable, match=r"ignores byte ranges .* over the 1 MB limit for one clip"):
        RemoteFile(url, fetcher, BlockCache(settings.cache_dir, 1024**3)).read(3_000_000, 1000)
    assert fetcher.fetched == 0
    small = BlockCache(settings.cache_dir / "small", 8 * 1024**2)
    fetcher = Fetcher(("127.0.0.1",), ("127.0.0.1/32",))
    with pytest.raises(SourceUnavailable, match=r"over half the 8 MB block cache \(QUOTECLIP_CACHE_MAX_MB\)"):
        RemoteFile(url, fetcher, small).read(0, 1000)
    assert fetcher.fetched == 0


# ---- playlists: sane durations, a bound on the segments of one cut, tags read as tags ------------------------------


def hls(http_source, playlist: str, tmp_path: Path, ffmpeg_bin: str, start: float = 5.0, end: float = 7.0):
    """Serve ``playlist`` as index.m3u8 beside the generated segments and cut [start, end] from it."""
    from sources.cache import BlockCache
    from sources.hls import HlsFormat
    from sources.http import Fetcher

    (http_source.root / "index.m3u8").write_text(playlist)
    fetcher = Fetcher(None, ("127.0.0.1/32",))
    cache = BlockCache(tmp_path / "cache", 10**8)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return HlsFormat(http_source.url("index.m3u8"), fetcher, cache, "key").cut(start, end, work, "video", ffmpeg_bin)


def segment_requests(http_source) -> int:
    return sum(n for name, n in http_source.requests.items() if name.endswith(".ts"))


def playlist_of(durations: list[str], names: list[str] | None = None, head: str = "") -> str:
    names = names or ["seg0.ts"] * len(durations)
    body = "".join(f"#EXTINF:{d},\n{n}\n" for d, n in zip(durations, names, strict=True))
    return f"#EXTM3U\n#EXT-X-TARGETDURATION:4\n{head}{body}#EXT-X-ENDLIST\n"


def test_a_playlist_of_thousands_of_tiny_segments_costs_the_segment_host_nothing(
    http_source, ffmpeg_bin, tmp_path
) -> None:
    """5000 segments of 0.0001 s (one clip once made 4000 GETs of them): refused as bad input when the playlist
    is read, before any segment is asked for."""
    from quoteclip.errors import BadInput

    make_segments(http_source.root, ffmpeg_bin, count=2)
    with pytest.raises(BadInput, match=r"a segment of 0.0001 s \(number 1 of 5000\): under the 0.01 s"):
        hls(http_source, playlist_of(["0.0001"] * 5000), tmp_path, ffmpeg_bin, 0.0, 0.4)
    assert http_source.requests["index.m3u8"] == 1 and segment_requests(http_source) == 0


def test_one_cut_fetches_a_bounded_number_of_segments(http_source, ffmpeg_bin, tmp_path) -> None:
    """Segments of 0.05 s (each a sane length alone): a 2 s cut would need 50 of them, over the bound (its span with
    preroll over 0.5 s, plus 3): refused with none fetched. Sound 4 s segments: the cut's segment and the first."""
    from quoteclip.errors import BadInput
    from sources.hls import segment_limit

    names = make_segments(http_source.root, ffmpeg_bin, count=3)
    assert segment_limit(1.0, 3.0) == 8
    with pytest.raises(BadInput, match=r"needs 50 segments for a 2 s cut, over the 8 one cut may fetch"):
        hls(http_source, playlist_of(["0.05"] * 400), tmp_path, ffmpeg_bin, 1.0, 3.0)
    assert segment_requests(http_source) == 0
    cut = hls(http_source, playlist_of(["4.000000"] * 3, names), tmp_path, ffmpeg_bin, 5.0, 7.0)
    assert cut.path.stat().st_size > 0
    assert {n: http_source.requests[n] for n in names} == {"seg0.ts": 1, "seg1.ts": 1, "seg2.ts": 0}


@pytest.mark.parametrize(
    ("duration", "message"),
    [
        ("1e308", "bad segment duration: '#EXTINF:1e308,'"),
        ("inf", "bad segment duration: '#EXTINF:inf,'"),
        ("nan", "bad segment duration: '#EXTINF:nan,'"),
        ("-4", "bad segment duration: '#EXTINF:-4,'"),
        ("soon", "bad segment duration: '#EXTINF:soon,'"),
        ("100000", r"a segment of 100000 s \(number 1\): durations run from 0 to 86400 s"),
        ("0.001", r"a segment of 0.001 s \(number 1 of 2\): under the 0.01 s"),
    ],
)
def test_absurd_segment_durations_are_bad_input_and_fetch_nothing(
    duration, message, http_source, ffmpeg_bin, tmp_path
) -> None:
    from quoteclip.errors import BadInput

    names = make_segments(http_source.root, ffmpeg_bin, count=2)
    with pytest.raises(BadInput, match=message) as refused:
        hls(http_source, playlist_of([duration, "4"], names), tmp_path, ffmpeg_bin, 1.0, 2.0)
    assert refused.value.permanent and refused.value.kind == "bad input"
    assert segment_requests(http_source) == 0


def test_a_short_last_segment_is_sound(http_source, ffmpeg_bin, tmp_path) -> None:
    names = make_segments(http_source.root, ffmpeg_bin, count=2)
    cut = hls(http_source, playlist_of(["4", "0.001"], names), tmp_path, ffmpeg_bin, 1.0, 2.0)
    assert cut.path.stat().st_size > 0


@pytest.mark.parametrize(
    ("head", "refused"),
    [
        ("#EXT-X-KEY:METHOD=NONE\n", None),
        ('#EXT-X-KEY:METHOD=AES-128,URI="https://keys.example/k?METHOD=NONE"\n', "EXT-X-KEY METHOD=AES-128"),
        ('#EXT-X-KEY:URI="k",METHOD=SAMPLE-AES,KEYFORMAT="identity"\n', "EXT-X-KEY METHOD=SAMPLE-AES"),
        ('#EXT-X-KEY:URI="k, METHOD=NONE"\n', "EXT-X-KEY without its METHOD"),
        ("# no EXT-X-KEY:METHOD=AES-128 here\n", None),
        ('#EXT-X-MAP-NOTE:URI="#EXT-X-KEY:METHOD=AES-128"\n', None),
    ],
    ids=["method-none", "aes-with-none-in-uri", "sample-aes", "none-inside-quotes", "comment", "other-tag"],
)
def test_ext_x_key_is_read_as_a_tag(head, refused, http_source, ffmpeg_bin, tmp_path) -> None:
    """Only an EXT-X-KEY tag whose METHOD attribute is not NONE is encryption; the text elsewhere (a URI, a quoted
    value, a comment, another tag) is not. Refused playlists fetch no segment."""
    from quoteclip.errors import SourceUnavailable

    names = make_segments(http_source.root, ffmpeg_bin, count=2)
    names = [names[0], names[1] + "?EXT-X-KEY:METHOD=AES-128"]  # the text in a segment's URI is no tag either
    playlist = playlist_of(["4", "4"], names, head)
    if refused is None:
        assert hls(http_source, playlist, tmp_path, ffmpeg_bin, 5.0, 6.0).path.stat().st_size > 0
        assert segment_requests(http_source) == 2
    else:
        with pytest.raises(SourceUnavailable, match=refused):
            hls(http_source, playlist, tmp_path, ffmpeg_bin, 5.0, 6.0)
        assert segment_requests(http_source) == 0


def test_a_page_offering_a_playlist_of_tiny_segments_fails_its_clip_as_bad_input(
    settings, ffmpeg_bin, tmp_path
) -> None:
    """End to end, from a video site's page (yt-dlp's extraction) to the clip: the playlist of 5000 segments of
    0.0001 s fails the clip as bad input (permanent), and the site's segment host is asked for nothing."""
    from quoteclip.errors import BadInput

    folder = tmp_path / "hls"
    folder.mkdir()
    make_segments(folder, ffmpeg_bin, count=2)
    (folder / "index.m3u8").write_text(playlist_of(["0.0001"] * 5000))
    site = VideoSite()
    site.episodes["tiny"] = Episode("Tiny segments", 0.5, [SiteFormat("hls", folder / "index.m3u8", hls=True)])
    try:
        with pytest.raises(BadInput, match="source playlist has a segment of 0.0001 s") as refused:
            clip(settings, site.url("tiny"), 0.0, 0.4)
    finally:
        site.close()
    assert refused.value.permanent
    assert site.segments == [] and site.page_loads["tiny"] == 1


# ---- links that expire every few requests -------------------------------------------------------------------------


def test_links_expiring_every_few_requests_are_extracted_again_until_the_clip_is_done(site, settings) -> None:
    """Every link the site signs answers two requests, then 403 (the clip reads the video in five): each refused
    link had read bytes, so the page is extracted again, twice here (once was all a job did), and the clip finishes,
    exact. The audio's refused link is renewed by the video's extraction, not one of its own."""
    site.uses = 2
    result = clip(settings, site.url("ep1"), 120.9, 127.9)
    assert_exact(Path(str(result.path)), 0.1)
    expired = [r for r in site.refused if r[1] == "expired link"]
    print(f"\nlinks good for 2 requests: {site.page_loads['ep1']} page loads, {len(expired)} refused requests")
    assert site.page_loads["ep1"] == 3, site.page_loads
    assert ("ep1/140", "expired link") in expired and len(expired) == len(site.refused) == 3


def test_a_fresh_link_that_never_works_fails_as_expired_link_after_one_extraction(site, settings) -> None:
    from quoteclip.errors import SourceLinkExpired

    site.uses = 0
    with pytest.raises(SourceLinkExpired, match="again after a fresh extraction and before any byte") as failed:
        clip(settings, site.url("ep1"), 10, 12)
    assert failed.value.kind == "expired link" and not failed.value.permanent
    assert site.page_loads["ep1"] == 2  # the first extraction and one fresh one
    assert len(site.refused) == 2  # its first link, then the fresh one: refused once each


@pytest.mark.slow
def test_links_good_for_one_request_end_at_the_jobs_bound_of_fresh_extractions(site, settings) -> None:
    """Each link answers once: every refused link made progress, yet one job extracts the page at most
    MAX_REEXTRACTIONS times more, then fails as expired link (transient: the queue retries it later)."""
    from quoteclip.errors import SourceLinkExpired
    from sources.opener import MAX_REEXTRACTIONS

    site.uses = 1  # (a 50 s cut: nine media requests)
    with pytest.raises(SourceLinkExpired, match=f"after {MAX_REEXTRACTIONS} fresh extractions in this job") as failed:
        clip(settings, site.url("ep1"), 120.9, 170.9)
    assert not failed.value.permanent
    assert site.page_loads["ep1"] == 1 + MAX_REEXTRACTIONS


def test_a_full_source_cache_is_the_machines_fault(media, http_source, tmp_path) -> None:
    """The block cache on a full disk (a 300 KB tmpfs in a private mount namespace): the read fails as this
    machine's fault (a worker hands such a job back), and the file says so, not a cut-short source that ffmpeg
    would call invalid data."""
    import json

    src = media(size="640x360", fps=30, duration=6, gop=60)
    (http_source.root / "ep.mp4").symlink_to(src)
    cache = tmp_path / "cache"
    cache.mkdir()
    probe = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from quoteclip.errors import QuoteclipError\n"
        "from sources.cache import BlockCache\n"
        "from sources.http import Fetcher\n"
        "from sources.remote import RemoteFile\n"
        "fetcher = Fetcher(('127.0.0.1',), ('127.0.0.1/32',))\n"
        "remote = RemoteFile(sys.argv[1], fetcher, BlockCache(Path(sys.argv[2]), 10**9))\n"
        "try:\n"
        "    remote.read(0, 2_000_000)\n"
        "    print(json.dumps({'read': True}))\n"
        "except QuoteclipError as exc:\n"
        "    print(json.dumps({'kind': exc.kind, 'message': str(exc), 'error': remote.error is exc}))\n"
    )
    script = f'mount -t tmpfs -o size=300k tmpfs "{cache}" && exec "{sys.executable}" -c "$0" "$1" "$2"'
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, probe, http_source.url("ep.mp4"), str(cache)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if "mount" in done.stderr and done.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"could not mount a small tmpfs in a private namespace: {done.stderr}")
        pytest.skip(f"no private mount namespace here: {done.stderr.strip()}")
    answer = json.loads(done.stdout)
    assert answer == {
        "kind": "machine fault",
        "message": "the source cache could not be written (No space left on device)",
        "error": True,
    }, done.stderr
