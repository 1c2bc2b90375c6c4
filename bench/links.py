"""Figures 12a–12c: signed clip links over HTTP to ``quoteclip serve`` and a worker (S3 store), as a page's
``<video src>``, ``<video poster>`` and ``<a href>`` ask for them: a stored clip's link answered, a new clip's link
from request to last byte beside ``POST /clips`` + long-poll + download of the same kind of clip, and a poster
rendered alone beside the clip of the same quote."""

from __future__ import annotations

import statistics
import time
import urllib.request

from quoteclip import links as signed

from .config import SITE_KEY, RunConfig
from .report import Comparison, Reading, Row
from .stack import Stack, click_to_file, clip_body
from .timing import pair_ratio, percentile


def figures(run: RunConfig, stack: Stack) -> list[Row]:
    """Run with the worker of figures 3–6 (the clip of figure 3a's first quote is stored)."""
    q = run.quote
    long = stack.http.root.joinpath("episode.mp4").stat().st_size > 200 * 1024**2
    first, step = (900.0, 10.0) if long else (104.0, 5.0)  # quotes no other figure renders
    starts = iter([first + step * i for i in range(3 * run.reps)])
    rows: list[Row] = [stored_link(run, stack)]

    by_link, by_post = [], []
    for _ in range(run.reps):  # alternating: a new clip by its link, then a new clip by POST /clips, cold cache
        stack.clear_source_cache()
        by_link.append(to_last_byte(stack, link(stack, next(starts), q)))
        stack.clear_source_cache()
        by_post.append(click_to_file(stack, next(starts), q, whole=True))
    rows.append(
        Comparison.of(
            f"12b. new clip, {q:g} s quote, cold source cache: its signed link, request → last byte (one request, "
            "answered with the clip's stream while the worker renders) vs POST /clips → long-poll → download to the "
            "last byte",
            by_link,
            by_post,
            pair_ratio(by_link, by_post),
            "report",
            None,
        )
    )

    posters, clips = [], []
    for _ in range(run.reps):  # the poster of a new quote first, then the clip of the same quote, cold cache each
        start = next(starts)
        stack.clear_source_cache()
        posters.append(to_last_byte(stack, link(stack, start, q, "poster")))
        stack.clear_source_cache()
        clips.append(to_last_byte(stack, link(stack, start, q)))
    rows.append(
        Comparison.of(
            f"12c. poster alone (a new quote's poster link: one frame, no H.264 encode) vs the clip of the same "
            f"quote by its link, {q:g} s, request → last byte, cold source cache",
            posters,
            clips,
            pair_ratio(posters, clips),
            "report",
            None,
        )
    )
    return rows


def stored_link(run: RunConfig, stack: Stack) -> Reading:
    """Figure 12a: a stored clip's link, as a CDN's origin request or a page's would ask it: the answer is the
    redirect to the bucket's presigned link (verify the link, the store's HEAD, presign)."""
    path = link(stack, 100.0, run.quote)  # figure 3a's first quote
    renders = stack.renders()
    times = []
    for _ in range(run.hits):
        t = time.perf_counter()
        status, _, body = stack.request("GET", path)
        times.append(time.perf_counter() - t)
        if status != 302:
            raise SystemExit(f"bench: a stored clip's link answered {status}: {body[:200]!r}")
    time.sleep(1.0)  # a render started by a miss would show in the count by now
    p50, p95 = statistics.median(times), percentile(times, 0.95)
    return Reading(
        "12a. a stored clip's signed link over HTTP (GET /l/…: signature, S3 HEAD, presign → 302), one "
        "kept-alive connection",
        f"p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms over {len(times)} requests, "
        f"renders started: {stack.renders() - renders}",
        "p50 < 50 ms, no render",
        p50 < 0.05 and stack.renders() == renders,
    )


def link(stack: Stack, start: float, length: float, variant: str = "clip", source: str | None = None) -> str:
    """The path of the signed link to figure 3's kind of clip (caption and watermark) at ``start`` (of the episode
    ``source``, another than figure 3's)."""
    return signed.sign(clip_body(stack, start, length, source), SITE_KEY[0], SITE_KEY[1], variant=variant)


def to_last_byte(stack: Stack, path: str) -> float:
    """A link asked for as a page does, to the last byte: a clip's stream while it renders, a stored clip's redirect
    to the bucket followed, a poster held until stored; seconds."""
    t = time.perf_counter()
    status, headers, body = stack.request("GET", path)
    if status == 302:
        with urllib.request.urlopen(headers["location"]) as resp:
            resp.read()
    elif status != 200:
        raise SystemExit(f"bench: a link answered {status}: {body[:200]!r}")
    return time.perf_counter() - t
