"""Benchmark figures for creators (several profiles from one decode, loudness, platform presets) and for real-site
sources (a page whose media URLs change with every extraction; an HLS-only episode)."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobs.pipeline.produce import produce_clip, produce_clips
from quoteclip.settings import Settings
from quoteclip.spec import build_spec, in_profiles
from renderer.probe import probe
from renderer.render import measure_loudness
from storage import LocalStorage
from testkit import add_plugins_to_path, with_plugins
from testkit.videosite import Episode, SiteFormat, VideoSite

from .config import BRAND, CAPTION, RunConfig
from .inline import cli_settings
from .report import Comparison, Reading, Row
from .timing import paired, process_cpu

PROFILES = ("landscape", "vertical", "square")
# the test video site's yt-dlp extractor is a plugin: on the path before yt-dlp first loads its plugins
add_plugins_to_path()


def figures(run: RunConfig, ffmpeg: str, source: Path, work: Path) -> list[Row]:
    rows = profiles_figures(run, source, work)
    rows.append(page_batch_figure(run, source, work))
    rows += hls_figures(run, ffmpeg, source, work)
    rows.append(loudness_figure(run, ffmpeg, source, work))
    rows += platforms_figures(run, source, work)
    return rows


def _settings(work: Path, name: str) -> Settings:
    return cli_settings(work / f"store-{name}", work / f"cache-{name}")


def profiles_figures(run: RunConfig, source: Path, work: Path) -> list[Row]:
    """10. A batch of quotes × 3 profiles: one decode per quote (ours) against three separate renders of the same
    quote, and against one profile, alternating per quote (each side a new quote: no cached clip)."""
    length = run.quote
    quotes = run.profile_quotes
    multi, separate, single, cpu_multi = [], [], [], 0.0
    settings = _settings(work, "profiles")
    storage = LocalStorage(settings.storage_dir)

    def spec(start: float, tag: str) -> Any:
        return build_spec(
            {
                "source": str(source),
                "start": start,
                "end": start + length,
                "caption": f"{CAPTION} {tag}",
                "watermark": {"text": BRAND},
            }
        )

    for _ in range(run.warmup):  # of both paths
        produce_clips(in_profiles(spec(30.0, "warm"), PROFILES), settings, storage)
        for name in PROFILES:
            produce_clip(spec(30.0, "warm-single").model_copy(update={"profile": name}), settings, storage)
    for i in range(quotes):
        start = 60.0 + 11 * i
        c = process_cpu()
        t = time.perf_counter()
        produce_clips(in_profiles(spec(start, "multi"), PROFILES), settings, storage)
        multi.append(time.perf_counter() - t)
        cpu_multi += process_cpu() - c
        t = time.perf_counter()
        for name in PROFILES:
            produce_clip(spec(start, "separate").model_copy(update={"profile": name}), settings, storage)
        separate.append(time.perf_counter() - t)
        t = time.perf_counter()
        produce_clip(spec(start, "single"), settings, storage)
        single.append(time.perf_counter() - t)
    shutil.rmtree(settings.storage_dir, ignore_errors=True)
    vs_one = statistics.median(m / s for m, s in zip(multi, single, strict=True))
    vs_three = statistics.median(m / s for m, s in zip(multi, separate, strict=True))
    output_seconds = quotes * len(PROFILES) * length
    return [
        Comparison.of(
            f"10a. {quotes} quotes × 3 profiles (landscape, vertical, square), {length:g} s, from the 1080p episode: "
            "one decode per quote vs one profile's render of the same quote",
            multi,
            single,
            vs_one,
            "≤ 2.2×",
            vs_one <= 2.2,
        ),
        Comparison.of(
            "10b. the same batch: one decode per quote vs three separate renders per quote",
            multi,
            separate,
            vs_three,
            "report (< 1: cheaper)",
            None,
        ),
        Reading(
            "10c. the same batch's cost",
            f"{sum(multi):.1f} s wall for {quotes * len(PROFILES)} clips, "
            f"{cpu_multi / output_seconds:.2f} CPU-s per output second",
            "report",
            None,
        ),
    ]


def page_batch_figure(run: RunConfig, source: Path, work: Path) -> Reading:
    """11a. A batch of quotes from one page whose media URLs are signed afresh at every extraction and expire
    soon (the extraction cache then lasts 10 s), through ``quoteclip batch``: extractions made, bytes fetched,
    no byte fetched twice."""
    quotes, first, q = run.page_quotes, run.page_first, run.quote
    site = VideoSite(lifetime=130.0)  # expire= 130 s ahead: an extraction is reused for 10 s, then made again
    try:
        site.episodes["episode"] = Episode(
            "Episode",
            1200,
            [SiteFormat("22", source, vcodec="avc1.640028", acodec="mp4a.40.2", width=1920, height=1080)],
        )
        quotes_file = work / "page-quotes.jsonl"
        lines = [
            json.dumps({"start": first + 9 * i, "end": first + q + 9 * i, "caption": f"{CAPTION} {i}"})
            for i in range(quotes)
        ]
        quotes_file.write_text("\n".join(lines) + "\n")
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("QUOTECLIP_")},
            "QUOTECLIP_STORAGE_DIR": str(work / "store-page"),
            "QUOTECLIP_CACHE_DIR": str(work / "cache-page"),
            "QUOTECLIP_ALLOW_ADDRESSES": "127.0.0.1/32",
            "PYTHONPATH": with_plugins(os.environ),
        }
        t = time.perf_counter()
        argv = [
            sys.executable,
            "-m",
            "cli",
            "batch",
            site.url("episode"),
            str(quotes_file),
            "--watermark",
            BRAND,
            "--json",
        ]
        done = subprocess.run(argv, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t
        failed = json.loads(done.stdout)["failed"] if done.stdout else quotes
        if failed:
            print(f"bench: page batch: {done.stderr.strip()[-2000:]}", file=sys.stderr)
        fetched = sum(site.bytes_sent.values())
        size = source.stat().st_size
        twice = site.bytes_sent_twice()
        return Reading(
            f"11a. batch of {quotes} quotes from one page source whose media URLs change at every "
            "extraction (links signed for 130 s), quoteclip batch",
            f"{wall:.1f} s wall, {site.page_loads['episode']} extractions, "
            f"{fetched / 1024**2:.1f} MB fetched of {size / 1024**2:.0f} MB, {twice} bytes fetched "
            f"twice, {len(site.refused)} requests refused by the site's rules, {failed} failed",
            "no byte fetched twice",
            twice == 0 and not failed and done.returncode == 0,
        )
    finally:
        site.close()


def hls_figures(run: RunConfig, ffmpeg: str, source: Path, work: Path) -> list[Row]:
    """11b–11d: the episode cut once into an HLS rendition (8 s MPEG-TS segments), then read by its figures."""
    folder = work / "hls"
    folder.mkdir(exist_ok=True)
    try:
        playlist = hls_rendition(ffmpeg, source, folder)
        return [hls_figure(run, source, work, playlist), *hls_fallback_figures(run, source, work, playlist)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def hls_rendition(ffmpeg: str, source: Path, folder: Path) -> Path:
    """The episode as an HLS rendition in ``folder``: its playlist (``index.m3u8``), 8 s segments beside it."""
    playlist = folder / "index.m3u8"
    subprocess.run(
        [
            ffmpeg,
            "-hide_banner",
            "-loglevel",
            "error",
            "-y",
            "-i",
            str(source),
            "-c",
            "copy",
            "-f",
            "hls",
            "-hls_time",
            "8",
            "-hls_playlist_type",
            "vod",
            "-hls_segment_filename",
            str(folder / "seg%04d.ts"),
            str(playlist),
        ],
        check=True,
    )
    return playlist


def _segments(playlist: Path) -> list[tuple[str, float, float, int]]:
    """The playlist's segments in order: (name, start, end in seconds, size in bytes)."""
    out, at, length = [], 0.0, 0.0
    for line in playlist.read_text().splitlines():
        if line.startswith("#EXTINF:"):
            length = float(line.removeprefix("#EXTINF:").split(",")[0])
        elif line and not line.startswith("#"):
            out.append((line, at, at + length, (playlist.parent / line).stat().st_size))
            at += length
    return out


def hls_figure(run: RunConfig, source: Path, work: Path, playlist: Path) -> Comparison:
    """11b. A clip of an HLS-only episode (8 s segments) against the same clip of the local file."""
    first, q = run.hls_first, run.quote
    total = sum(size for *_, size in _segments(playlist))
    site = VideoSite()
    counter = iter(range(10_000))
    try:
        site.episodes["hls"] = Episode(
            "HLS",
            1200,
            [SiteFormat("hls", playlist, vcodec="avc1.640028", acodec="mp4a.40.2", width=1920, height=1080, hls=True)],
        )
        fetched: list[int] = []

        def clip(src: str) -> Callable[[], None]:
            def run() -> None:
                n = next(counter)
                name = f"hls-{n}"
                settings = _settings(work, name)
                spec = build_spec(
                    {
                        "source": src,
                        "start": first + 9 * n,
                        "end": first + q + 9 * n,
                        "caption": CAPTION,
                        "watermark": {"text": BRAND},
                    }
                )
                result = produce_clip(spec, settings, LocalStorage(settings.storage_dir))
                if src.startswith("http"):
                    fetched.append(result.source_bytes or 0)
                shutil.rmtree(settings.storage_dir, ignore_errors=True)
                shutil.rmtree(settings.cache_dir, ignore_errors=True)

            return run

        ours, local = paired(clip(site.url("hls")), clip(str(source)), run)
    finally:
        site.close()
    got = statistics.median(fetched)
    ratio = statistics.median(a / b for a, b in zip(ours, local, strict=True))
    return Comparison.of(
        f"11b. {q:g} s clip of an HLS-only episode (8 s segments, cold cache, a fresh extraction each) vs "
        f"the same clip of the local file; fetched {got / 1024**2:.1f} MB of {total / 1024**2:.0f} MB "
        f"of segments ({100 * got / total:.1f}%)",
        ours,
        local,
        ratio,
        "< 5% of the bytes",
        got < 0.05 * total,
    )


# the site's plain formats in figures 11c and 11d (testkit.videosite.VideoSite.plain): the figure, what its page
# does, and the extractions a clip may cost (a refusal on the first link is checked on a fresh extraction's link
# before HLS is read)
HLS_FALLBACKS = {
    "refused": (
        "11c",
        "whose page lists a plain 1080p file and its HLS rendition, the plain file refused (HTTP 403) after the "
        "extraction",
        2,
    ),
    "gone": ("11d", "whose page lists only its HLS rendition, the plain file left out (SABR-only)", 1),
}


def hls_fallback_figures(run: RunConfig, source: Path, work: Path, playlist: Path) -> list[Row]:
    """11c, 11d. A clip of an episode listed as YouTube lists it for its ``web`` client: a plain 1080p file and an
    HLS rendition of it (8 s segments). Its plain format refused with 403 after the extraction (YouTube without a PO
    token; 11c), or left out of the page (SABR-only; 11d): each clip from a cold cache (no refusal remembered), a new
    quote, against the same clip of the local file. Per clip: the page's extractions, the format family the clip's
    manifest names, the bytes and segments fetched against the quote's own share (its seconds of the segments'
    bytes; the segments it spans)."""
    return [hls_fallback_figure(run, source, work, playlist, plain) for plain in HLS_FALLBACKS]


def hls_fallback_figure(run: RunConfig, source: Path, work: Path, playlist: Path, plain: str) -> Comparison:
    """One of 11c and 11d: the site's plain formats ``plain`` (see ``HLS_FALLBACKS``)."""
    number, how, extractions = HLS_FALLBACKS[plain]
    first, q = run.hls_first, run.quote
    segments = _segments(playlist)
    total = sum(size for *_, size in segments)
    seconds = segments[-1][2]
    site = VideoSite(plain=plain)
    counter = iter(range(10_000))
    seen: list[dict[str, Any]] = []
    try:
        site.episodes["yt"] = Episode(
            "Both families",
            seconds,
            [
                SiteFormat("22", source, vcodec="avc1.640028", acodec="mp4a.40.2", width=1920, height=1080),
                SiteFormat(
                    "hls", playlist, vcodec="avc1.640028", acodec="mp4a.40.2", width=1920, height=1080, hls=True
                ),
            ],
        )

        def clip(src: str) -> Callable[[], None]:
            def go() -> None:
                n = next(counter)
                settings = _settings(work, f"{plain}-{n}")
                start = first + 9 * n
                spec = build_spec(
                    {
                        "source": src,
                        "start": start,
                        "end": start + q,
                        "caption": CAPTION,
                        "watermark": {"text": BRAND},
                    }
                )
                loads, sent, refused = site.page_loads["yt"], sum(site.bytes_sent.values()), len(site.refused)
                fetched = len(site.segments)
                result = produce_clip(spec, settings, LocalStorage(settings.storage_dir))
                if src.startswith("http"):
                    manifest = settings.storage_dir / f"{result.key}.manifest.json"
                    spanned = [s for s in segments if s[1] < start + q and s[2] > start]
                    seen.append(
                        {
                            "extractions": site.page_loads["yt"] - loads,
                            "refused": len(site.refused) - refused,
                            "family": json.loads(manifest.read_text())["source"].get("format"),
                            "bytes": sum(site.bytes_sent.values()) - sent,
                            "segments": len(site.segments) - fetched,
                            "spanned": len(spanned),
                            "spanned_bytes": sum(size for *_, size in spanned),
                        }
                    )
                shutil.rmtree(settings.storage_dir, ignore_errors=True)
                shutil.rmtree(settings.cache_dir, ignore_errors=True)

            return go

        ours, local = paired(clip(site.url("yt")), clip(str(source)), run)
    finally:
        site.close()

    def median(key: str) -> float:
        return statistics.median(s[key] for s in seen)

    families = sorted({str(s["family"]) for s in seen})
    beyond = max(s["segments"] - s["spanned"] for s in seen)
    got, share = median("bytes"), total * q / seconds
    ratio = statistics.median(a / b for a, b in zip(ours, local, strict=True))
    return Comparison.of(
        f"{number}. {q:g} s clip of an episode {how} (8 s segments, cold cache) vs the same clip of the local "
        f"file; per clip, median of {len(seen)}: extractions {median('extractions'):g}, requests refused "
        f"{median('refused'):g}, read in {', '.join(families)}, segments fetched {median('segments'):g} (the quote "
        f"spans {median('spanned'):g}; at most {beyond} beyond it), fetched {got / 1024**2:.1f} MB of "
        f"{total / 1024**2:.0f} MB ({100 * got / total:.1f}%; the quote's share of the episode "
        f"{share / 1024**2:.1f} MB, the segments it spans {median('spanned_bytes') / 1024**2:.1f} MB)",
        ours,
        local,
        ratio,
        f"HLS, ≤ {extractions} extraction{'s' if extractions > 1 else ''}, ≤ 1 segment beyond the quote's, "
        "< 5% of the bytes",
        families == ["hls"]
        and max(s["extractions"] for s in seen) <= extractions
        and beyond <= 1
        and got < 0.05 * total,
    )


def loudness_figure(run: RunConfig, ffmpeg: str, source: Path, work: Path) -> Comparison:
    """14a. A clip levelled to -14 LUFS (its cut's sound measured by a pass of its own, then one gain) against the
    same clip unlevelled: the same warm-up and repetitions, alternating, each pair a new quote (nothing stored), the
    same quote on both sides of a pair. The measuring pass is also timed alone, as many times, for its share of the
    difference."""
    q = run.quote
    settings = _settings(work, "loudness")
    storage = LocalStorage(settings.storage_dir)

    def clip(loudness: float | None) -> Callable[[], None]:
        counter = iter(range(10_000))  # (each side its own count: the n-th run of each is the same quote)

        def go() -> None:
            start = round(0.4 * run.minutes * 60) + 9 * next(counter)  # (a new quote each run, in the source)
            level = {} if loudness is None else {"loudness": loudness}
            spec = build_spec(
                {
                    "source": str(source),
                    "start": start,
                    "end": start + q,
                    "caption": CAPTION,
                    "watermark": {"text": BRAND},
                    **level,
                }
            )
            produce_clip(spec, settings, storage)

        return go

    levelled, plain = paired(clip(-14.0), clip(None), run)
    shutil.rmtree(settings.storage_dir, ignore_errors=True)
    ratio = statistics.median(a / b for a, b in zip(levelled, plain, strict=True))
    info = probe(str(source))
    passes = []
    for n in range(run.reps):
        t = time.perf_counter()
        measure_loudness(info, str(source), (round(0.4 * run.minutes * 60) + 9 * n, q), ffmpeg, 60)
        passes.append(time.perf_counter() - t)
    return Comparison.of(
        f"14a. {q:g} s clip levelled to -14 LUFS (measured, then one gain) vs the same clip unlevelled (the same "
        "quote in each pair, a new one each pair), from the 1080p episode;"
        f" the measuring pass alone: {statistics.median(passes):.3f} s median",
        levelled,
        plain,
        ratio,
        "≤ 1.10×",
        ratio <= 1.10,
    )


PLATFORMS = ("shorts", "x", "linkedin")  # vertical, landscape and square: the shapes of PROFILES


def platforms_figures(run: RunConfig, source: Path, work: Path) -> list[Row]:
    """14b. A batch of one episode's quotes for three platforms (Shorts, X, LinkedIn: each quote's three clips from
    one decode, levelled, captions in the apps' margins) against today's three shapes from one decode (landscape,
    vertical, square), alternating per quote, each side a new quote."""
    length = run.quote
    quotes = run.profile_quotes
    settings = _settings(work, "platforms")
    storage = LocalStorage(settings.storage_dir)

    def quote(start: float, tag: str, extra: dict[str, Any]) -> Any:
        return build_spec(
            {
                "source": str(source),
                "start": start,
                "end": start + length,
                "caption": f"{CAPTION} {tag}",
                "watermark": {"text": BRAND},
                **extra,
            }
        )

    def for_platforms(start: float, tag: str) -> list[Any]:
        return [quote(start, tag, {"platform": name}) for name in PLATFORMS]

    for _ in range(run.warmup):  # of both sides
        produce_clips(for_platforms(40.0, "warm"), settings, storage)
        produce_clips(in_profiles(quote(40.0, "warm", {}), PROFILES), settings, storage)
    platforms, profiles = [], []
    cpu_platforms = 0.0
    for i in range(quotes):
        start = round(0.6 * run.minutes * 60) + 11 * i
        c = process_cpu()
        t = time.perf_counter()
        produce_clips(for_platforms(start, "platforms"), settings, storage)
        platforms.append(time.perf_counter() - t)
        cpu_platforms += process_cpu() - c
        t = time.perf_counter()
        produce_clips(in_profiles(quote(start, "profiles", {}), PROFILES), settings, storage)
        profiles.append(time.perf_counter() - t)
    shutil.rmtree(settings.storage_dir, ignore_errors=True)
    ratio = statistics.median(a / b for a, b in zip(platforms, profiles, strict=True))
    return [
        Comparison.of(
            f"14b. {quotes} quotes × 3 platforms (shorts, x, linkedin), {length:g} s, from the 1080p episode, one "
            "decode per quote vs the same quotes × 3 profiles (landscape, vertical, square) from one decode",
            platforms,
            profiles,
            ratio,
            "report (the measuring pass and the levelling)",
            None,
        ),
        Reading(
            "14c. the three-platform batch's cost",
            f"{sum(platforms):.1f} s wall for {quotes * len(PLATFORMS)} clips, "
            f"{cpu_platforms / (quotes * len(PLATFORMS) * length):.2f} CPU-s per output second",
            "report",
            None,
        ),
    ]
