"""Figures 13a–13h: a clip not stored, played while it renders. From the request (a signed link given to an autoplaying
muted ``<video>`` in Chromium, on a page of another origin; or the ``/`` page's Play button) to the first frame
Chromium presents (``requestVideoFrameCallback``), for 7, 30 and 120 s clips of a Range-served 1080p source with a
keyframe every 5 s, its bytes in the block cache (and again from a cold cache), with its parts, the stalls while the
render goes on, and the relay's cost; beside today's click → link → first byte of the same kind of clip; and the
whole render with its stream against the same render without one, in wall time and in CPU seconds. 13a–13c keep one
page open across their clicks; 13h opens a new page for each click, as a visitor meets a quote page, and plays each
clip to its end."""

from __future__ import annotations

import math
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC
from pathlib import Path
from typing import Any

from rq import Worker
from rq.job import Job

from jobs.queue import connect
from quoteclip import links as signed
from quoteclip import redis_keys
from quoteclip.spec import build_spec

from .config import BRAND, SITE_KEY, RunConfig
from .media import source_1080p_gop5
from .report import Comparison, Reading, Row
from .stack import Stack
from .timing import pair_ratio, percentile, process_cpu

SOURCE = "episode-gop5.mp4"
CAPTION = "An exact quote, on one line."  # figure 13's one-line caption
FIRST_START = 20.0  # the first quote's start; each next one 2.37 s later (its keyframe 0–5 s before it)
STEP = 2.37
TARGET = "p50 ≤ 1.0 s, p95 ≤ 1.5 s"
VISITOR_TARGET = "p50 ≤ 1.0 s, p95 ≤ 1.5 s, no stall"
# 13h's clicks per clip length, each played to its end at its own pace (a 120 s clip takes 2 minutes): 30 clicks,
# within about 7 minutes. A quick run makes one click of each of its lengths, two of its first.
VISITOR_CLICKS = {7.0: 26, 30.0: 3, 120.0: 1}
VISITOR_OFFSET = 1.13  # 13h's quotes start this far past 13a–13c's (new clips, their keyframe 0–5 s before them)
# 13h's clicks on a cold source (each quote of an episode no one has clipped: a new name of the source, the block
# cache emptied), of its first length, each to its first frame
VISITOR_COLD = 30
# The page on another origin: a muted autoplaying <video>; given a link, what it presents first and when, and each
# stall after it began playing (a `waiting` event: when, at which media time, how far the bytes it had reached).
WATCH = """(src) => {
  const v = document.getElementById("v");
  const seen = {events: [], waits: 0, first: null, playing: null, ended: null, stalls: []};
  window.seen = seen;
  for (const name of ["playing", "waiting", "ended", "error"]) v.addEventListener(name, () => {
    seen.events.push(name);
    if (name === "playing" && seen.playing === null) seen.playing = performance.now();
    if (name === "ended" && seen.ended === null) seen.ended = performance.now();
    if (name === "waiting" && seen.playing !== null) {
      seen.waits++;
      const b = v.buffered;
      seen.stalls.push({at: (performance.now() - seen.t0) / 1000, time: v.currentTime,
        buffered: b.length ? b.end(b.length - 1) : 0, duration: v.duration});
    }
  });
  v.requestVideoFrameCallback((now, frame) => {
    seen.first = frame.presentationTime;
    seen.mediaTime = frame.mediaTime;
  });
  window.watched = v;
  seen.wall = Date.now();  // the wall clock at the request (the job's and the network's times are wall-clock times)
  seen.t0 = performance.now();
  PLAY
}"""
# the link as a page's autoplaying <video src>
WATCH_LINK = WATCH.replace("PLAY", "v.src = src;")
# the link in a <quote-clip> card (/embed.js), played by a click on its button: its own <video>, fed the link's HLS
# parts through Media Source while the clip renders
WATCH_CARD = WATCH.replace(
    'const v = document.getElementById("v");',
    'const card = document.createElement("quote-clip"); card.setAttribute("src", src); document.body.append(card);\n'
    '  const v = card.shadowRoot.querySelector("video");',
).replace("PLAY", 'card.shadowRoot.querySelector("button.play").click();')
WATCH = WATCH_LINK
STOP = """() => { const v = window.watched || document.getElementById("player");
  v.pause(); v.removeAttribute("src"); v.load(); document.querySelector("quote-clip")?.remove(); }"""


def figures(run: RunConfig, ffmpeg: str, stack: Stack) -> list[Row]:
    """Run with the API and the one worker of the figures before (S3 store)."""
    chromium = chromium_path()
    if chromium is None:
        return [
            Reading("13. first frame presented in Chromium", "not measured: no Chromium (or Playwright)", TARGET, None)
        ]
    from playwright.sync_api import sync_playwright

    # quotes of one length, each a new clip: the warm-up's, the timed clicks', today's and the cold cache's
    clicks = run.warmup + run.first_frames + 2 * run.cold_first_frames + run.reps
    source = prepare(run, ffmpeg, stack, clicks)
    rows: list[Row] = []
    with sync_playwright() as p:
        browser = launch(p, chromium)
        try:
            page = browser.new_page()
            page.goto(stack.http.url(PAGE))
            relay_bytes: dict[float, list[int]] = {}
            for letter, length in zip("abc", run.first_frame_lengths, strict=False):
                starts = iter(FIRST_START + STEP * i for i in range(clicks + 1))
                cached(stack)  # every block of the source in the cache
                for _ in range(run.warmup):  # (the first click of a length met a colder worker and browser)
                    first_frame(stack, page, next(starts), length, {})
                warm = [first_frame(stack, page, next(starts), length, relay_bytes) for _ in range(run.first_frames)]
                today = [today_click(stack, next(starts), length) for _ in range(run.cold_first_frames)]
                cold = []
                for _ in range(run.cold_first_frames):
                    stack.clear_source_cache()
                    cold.append(first_frame(stack, page, next(starts), length, relay_bytes))
                rows.append(reading(f"13{letter}.", length, warm, cold, today))
            page.close()
            cached(stack)
            starts = iter(FIRST_START + 0.5 + STEP * i for i in range(run.reps))
            played = [page_play(stack, browser, next(starts), run.first_frame_lengths[0]) for _ in range(run.reps)]
            rows.append(page_reading(run.first_frame_lengths[0], played))
            rows += visitors(run, stack, browser)
            rows.append(distant_visitor(run, stack, browser))
        finally:
            browser.close()
    rows.append(relay_reading(relay_bytes))
    rows += stream_cost(run, source, stack.work)
    return rows


def visitor_figures(run: RunConfig, ffmpeg: str, stack: Stack) -> list[Row]:
    """Figure 13h alone (the API and one worker started): the visitor's way, a new page per click."""
    chromium = chromium_path()
    if chromium is None:
        return [Reading("13h. first frame presented in Chromium", "not measured: no Chromium", VISITOR_TARGET, None)]
    from playwright.sync_api import sync_playwright

    prepare(run, ffmpeg, stack, 0)
    with sync_playwright() as p:
        browser = launch(p, chromium)
        try:
            return [*visitors(run, stack, browser), distant_visitor(run, stack, browser)]
        finally:
            browser.close()


PAGE = "first-frame.html"
CARD_PAGE = "first-frame-card.html"


def chromium_path() -> str | None:
    """Chromium, when it and Playwright are installed."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def prepare(run: RunConfig, ffmpeg: str, stack: Stack, clicks: int) -> Path:
    """Figure 13's source (long enough for ``clicks`` quotes of each length, and 13h's) served by the loopback
    origin, and the page on another origin that plays a link: the source."""
    clicks = max(clicks, 2 * (sum(visitor_clicks(run).values()) + run.warmup))  # (13h's and 13j's, in turn)
    seconds = FIRST_START + VISITOR_OFFSET + STEP * (clicks + 1) + max(run.first_frame_lengths)
    source = source_1080p_gop5(ffmpeg, math.ceil(seconds / 60))
    (stack.http.root / SOURCE).unlink(missing_ok=True)
    (stack.http.root / SOURCE).symlink_to(source.resolve())
    (stack.http.root / PAGE).write_text(
        '<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,">'
        '<video id="v" muted autoplay playsinline width="640"></video>'
    )
    (stack.http.root / CARD_PAGE).write_text(
        '<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,">'
        f'<script src="http://127.0.0.1:{stack.port}/embed.js"></script>'
    )
    return source


def launch(p: Any, chromium: str) -> Any:
    return p.chromium.launch(
        executable_path=chromium,
        args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--autoplay-policy=no-user-gesture-required"],
    )


# ---- one click ------------------------------------------------------------------------------------------------


def clip(stack: Stack, start: float, length: float, source: str | None = None) -> dict[str, Any]:
    return {
        "source": source or stack.http.url(SOURCE),
        "start": start,
        "end": start + length,
        "caption": CAPTION,
        "watermark": BRAND,
    }


def job_of(stack: Stack, body: dict[str, Any]) -> str:
    """The job id of a clip (its content key), as the API and the worker compute it."""
    from jobs.queue import lookup
    from storage import open_storage

    settings = stack.settings().for_queue()
    spec = build_spec({**body, "watermark": {"text": body["watermark"]}})
    return f"clip-{lookup(spec, settings, open_storage(settings))[0]}"


def finished(stack: Stack, job_id: str, timeout: float = 900) -> Job:
    """Wait for the job's end (and the worker back to idle): the job."""
    connection = connect(stack.settings())
    deadline = time.monotonic() + timeout
    while True:
        job = Job.fetch(job_id, connection=connection)
        status = job.get_status(refresh=False)
        if status is not None and status.value in ("finished", "failed"):
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: {job_id} did not finish within {timeout:g} s")
        time.sleep(0.05)
    if status.value != "finished":
        raise SystemExit(f"bench: {job_id} failed: {job.meta.get('error')}")
    while any(w.get_state() != "idle" for w in Worker.all(connection=connection)):
        time.sleep(0.05)
    return job


def epoch(moment: Any) -> float:
    return float((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp())


def first_frame(
    stack: Stack,
    page: Any,
    start: float,
    length: float,
    relay_bytes: dict[float, list[int]],
    to_end: bool = False,
    watch: str = WATCH_LINK,
    source: str | None = None,
) -> dict[str, Any]:
    """A new clip's signed link given to the <video>: seconds from the request to the first frame presented, to
    "playing", the stalls until the render ended (``to_end``: until the clip ended, played at its own pace, and each
    stall's moment under "stalls at"), and the parts (from the browser's clock, its network timing and the job's own
    timings). ``source``: another episode's URL than figure 13's."""
    body = clip(stack, start, length, source)
    link = f"http://127.0.0.1:{stack.port}" + signed.sign(body, SITE_KEY[0], SITE_KEY[1])
    job_id = job_of(stack, body)
    timing: dict[str, Any] = {}

    def answered(response: Any) -> None:
        if response.url == link or (response.url.startswith(link + "/") and not timing):  # (a card: its first part)
            timing.update(response.request.timing)

    page.on("response", answered)
    page.evaluate(watch, link)
    page.wait_for_function("() => window.seen.first !== null || window.seen.events.includes('error')", timeout=600_000)
    if to_end:  # (looked at every quarter of a second: the page's frames are left to the player)
        page.wait_for_function(
            "() => window.seen.ended !== null || window.seen.events.includes('error')",
            polling=250,
            timeout=round((3 * length + 600) * 1000),
        )
    if page.evaluate("() => window.seen.events.includes('error')"):
        failed = page.evaluate("() => [window.seen.events, window.watched.error?.message]")
        raise SystemExit(f"bench: the <video> failed: {failed}")
    job = finished(stack, job_id)
    key = redis_keys.stream(job_id)
    held = connect(stack.settings()).memory_usage(key, samples=0)
    time.sleep(0.5)
    seen = page.evaluate("() => window.seen")
    page.evaluate(STOP)
    page.remove_listener("response", answered)
    if seen["first"] is None or (to_end and seen["ended"] is None):
        raise SystemExit(f"bench: the <video> failed: {seen['events']}")
    relay_bytes.setdefault(length, []).append(int(held or 0))
    # performance.now() runs on the monotonic clock from the page's opening; the wall clock, which the job's and the
    # network's times are read on, may be stepped while one page lives (figure 13c of 2026-12-02 read a job picked
    # up 17.9 s after its request and its first byte 17.6 s after its first frame): the browser's moments are placed
    # on the wall clock from the one read at the request
    t0 = seen["wall"] / 1000
    shown = t0 + (seen["first"] - seen["t0"]) / 1000
    first_byte = (
        (timing["startTime"] + timing["responseStart"]) / 1000 if timing.get("responseStart", -1) >= 0 else shown
    )
    timings = job.meta.get("timings") or {}
    started = epoch(job.started_at) if job.started_at else t0
    ffmpeg = float(timings.get("ffmpeg_started_at", started))
    fragment = float(timings.get("first_fragment_at", ffmpeg))
    out: dict[str, Any] = {
        "total": shown - t0,
        "playing": (seen["playing"] - seen["t0"]) / 1000 if seen["playing"] is not None else float("nan"),
        "stalls": float(seen["waits"]),
        "media_time": float(seen.get("mediaTime") or 0.0),
        "request → job picked up": started - t0,
        "picked up → ffmpeg started (fetch, probe, overlays)": ffmpeg - started,
        "ffmpeg → first fragment (preroll decode, first fragment encode)": fragment - ffmpeg,
        "first fragment → first byte in the browser (relay, API)": first_byte - fragment,
        "first byte → first frame presented (Chromium)": shown - first_byte,
        "stalls at": seen["stalls"],
    }
    said = f"bench: first frame {length:g} s clip at {start:.2f}: {out['total']:.3f} s"
    if to_end:
        said += f", {int(out['stalls'])} stalls to its end" + "".join(
            f"; at {s['at']:.2f} s, media {s['time']:.2f} s of {s['duration']:.2f}, buffered to {s['buffered']:.2f}"
            for s in seen["stalls"]
        )
    print(said, file=sys.stderr)
    return out


def today_click(stack: Stack, start: float, length: float) -> float:
    """Today's path for the same kind of clip, the source's bytes cached: POST /clips → long-poll → the link's first
    byte (as figure 3a times it)."""
    body = clip(stack, start, length)
    t = time.perf_counter()
    status, answer = stack.call("POST", "/clips", body)
    if status not in (200, 202):
        raise SystemExit(f"bench: POST /clips answered {status}: {answer}")
    job_id = answer["id"]
    while answer.get("status") not in ("finished", "failed"):
        _, answer = stack.call("GET", f"/clips/{job_id}?wait=20")
    if answer["status"] != "finished":
        raise SystemExit(f"bench: job failed: {answer['error']}")
    import urllib.request

    with urllib.request.urlopen(str(answer["link"])) as resp:
        resp.read(1)
    finished(stack, job_id)
    return time.perf_counter() - t


def page_play(stack: Stack, browser: Any, start: float, length: float) -> float:
    """The / page's Play button for a new clip: seconds from the click to the first frame presented. (The page's
    Content-Security-Policy allows no eval, which Playwright's waits use: the harness's context bypasses it.)"""
    context = browser.new_context(bypass_csp=True)
    page = context.new_page()
    try:
        query = f"source={stack.http.url(SOURCE)}&start={start:.3f}&end={start + length:.3f}&brand={BRAND}"
        page.goto(f"http://127.0.0.1:{stack.port}/?{query}")
        page.evaluate(
            """() => { const v = document.getElementById("player"); window.seen = {first: null};
              v.requestVideoFrameCallback((now, frame) => { window.seen.first = frame.presentationTime; });
              window.seen.t0 = performance.now(); document.getElementById("play").click(); }"""
        )
        page.wait_for_function("() => window.seen.first !== null", timeout=600_000)
        seen = page.evaluate("() => window.seen")
        page.wait_for_function("() => !document.getElementById('play').disabled", timeout=900_000)  # (its render's end)
        while any(w.get_state() != "idle" for w in Worker.all(connection=connect(stack.settings()))):
            time.sleep(0.05)
        return float(seen["first"] - seen["t0"]) / 1000
    finally:
        page.close()
        context.close()


def visitor_clicks(run: RunConfig) -> dict[float, int]:
    """13h's clicks per length: ``VISITOR_CLICKS`` (1 for a length it does not name); a quick run's 2, 1, …."""
    if run.quick:
        return {length: 2 if n == 0 else 1 for n, length in enumerate(run.first_frame_lengths)}
    return {length: VISITOR_CLICKS.get(length, 1) for length in run.first_frame_lengths}


def visitors(run: RunConfig, stack: Stack, browser: Any) -> tuple[Reading, Reading, Reading]:
    """Figure 13h: the visitor's way. One Chromium open; for each click a new browser context and page (no page,
    cache or connection kept from the click before) opens the page on another origin, which sets its muted
    autoplaying <video>'s src to a new quote's signed link: from that moment (the page's clock) to the first frame
    presented, and the stalls (`waiting` after `playing`) until the clip's `ended`, played at its own pace. The
    source's bytes cached, the worker idle before each click (its render, and the clip before, ended).

    And, click for click beside it, 13j: a new quote's link in a ``<quote-clip>`` card (/embed.js) on the same kind
    of page, from the click on its play button. Each 13h click is followed by a 13j click, in the same conditions.

    Then 13h's clicks on a cold source: ``VISITOR_COLD`` quotes, each of an episode no one has clipped (a new name
    of the source, the block cache emptied), to the first frame."""
    cached(stack)
    starts = iter(FIRST_START + VISITOR_OFFSET + STEP * i for i in range(10_000))
    counts = visitor_clicks(run)
    for _ in range(run.warmup):  # (the figure's first pages met a colder browser)
        visitor_click(stack, browser, next(starts), run.first_frame_lengths[0], to_end=False)
        visitor_click(stack, browser, next(starts), run.first_frame_lengths[0], to_end=False, card=True)
    clicks: dict[float, list[dict[str, Any]]] = {}
    cards: dict[float, list[dict[str, Any]]] = {}
    for length, count in counts.items():
        for _ in range(count):
            clicks.setdefault(length, []).append(visitor_click(stack, browser, next(starts), length))
            cards.setdefault(length, []).append(visitor_click(stack, browser, next(starts), length, card=True))
    cold = []
    for _ in range(1 if run.quick else VISITOR_COLD):
        source = stack.new_episode(SOURCE)
        stack.clear_source_cache()
        cold.append(
            visitor_click(stack, browser, next(starts), run.first_frame_lengths[0], to_end=False, source=source)
        )
    link = visitor_reading(clicks)
    return link, card_reading(cards, clicks), cold_visitor_reading(run.first_frame_lengths[0], cold)


def visitor_click(
    stack: Stack,
    browser: Any,
    start: float,
    length: float,
    to_end: bool = True,
    card: bool = False,
    source: str | None = None,
) -> dict[str, Any]:
    """One visitor's click: a new context and page, the link set as the <video>'s src (or given to a
    ``<quote-clip>`` card, its button clicked), played to its end."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(stack.http.url(CARD_PAGE if card else PAGE))
        if card:
            page.wait_for_function("() => customElements.get('quote-clip') !== undefined", timeout=30_000)
        watch = WATCH_CARD if card else WATCH_LINK
        return first_frame(stack, page, start, length, {}, to_end=to_end, watch=watch, source=source)
    finally:
        context.close()


# ---- the rows -------------------------------------------------------------------------------------------------


def reading(
    label: str, length: float, warm: list[dict[str, Any]], cold: list[dict[str, Any]], today: list[float]
) -> Reading:
    totals = [c["total"] for c in warm]
    p50, p95 = statistics.median(totals), percentile(totals, 0.95)
    parts = [name for name in warm[0] if "→" in name]
    cold_totals = [c["total"] for c in cold]
    return Reading(
        f"{label} first frame presented in Chromium, {length:g} s clip not stored (a new quote), its signed link in "
        "an autoplaying muted <video> on another origin, from the request; a 1080p source served by range, a "
        "keyframe every 5 s, its bytes in the block cache",
        f"p50 {p50:.2f} s, p95 {p95:.2f} s over {len(totals)} clicks ('playing' p50 "
        f"{statistics.median(c['playing'] for c in warm):.2f} s; stalls while it rendered: "
        f"{int(sum(c['stalls'] for c in warm))}); parts (medians): "
        + ", ".join(f"{name} {statistics.median(c[name] for c in warm):.2f}" for name in parts)
        + f"; cold source cache: p50 {statistics.median(cold_totals):.2f} s over {len(cold_totals)}; "
        f"today, click → link → first byte: p50 {statistics.median(today):.2f} s over {len(today)}",
        TARGET,
        p50 <= 1.0 and p95 <= 1.5,
    )


def page_reading(length: float, played: list[float]) -> Reading:
    return Reading(
        f"13d. first frame presented in Chromium from the / page's Play button (POST /clips, then its stream through "
        f"Media Source Extensions), {length:g} s clip not stored, the source's bytes cached",
        f"p50 {statistics.median(played):.2f} s, p95 {percentile(played, 0.95):.2f} s over {len(played)} clicks",
        "report",
        None,
    )


def visitor_reading(clicks: dict[float, list[dict[str, Any]]]) -> Reading:
    every = [c for each in clicks.values() for c in each]
    totals = [c["total"] for c in every]
    p50, p95 = statistics.median(totals), percentile(totals, 0.95)
    stalls = int(sum(c["stalls"] for c in every))
    stalled = sum(1 for c in every if c["stalls"])
    by_length = "; ".join(
        f"{length:g} s: p50 {statistics.median(c['total'] for c in each):.2f}, p95 "
        f"{percentile([c['total'] for c in each], 0.95):.2f} over {len(each)} ("
        + ", ".join(f"{c['total']:.2f}" for c in each)
        + ")"
        for length, each in clicks.items()
    )
    parts = [name for name in every[0] if "→" in name]
    return Reading(
        "13h. first frame presented in Chromium as a visitor meets it: one browser open, a new page (a new context) "
        "for each click, from the moment the page sets its autoplaying muted <video>'s src to a new quote's signed "
        "link (another origin) to the first frame presented; each clip played to its end at its own pace, the "
        "stalls counted to it; the source's bytes cached, the worker idle before each click",
        f"p50 {p50:.2f} s, p95 {p95:.2f} s over {len(totals)} clicks; by length (s): {by_length}; stalls ('waiting' "
        f"after 'playing', to the clip's end): {stalls} in {stalled} of {len(every)} clicks; 'playing' p50 "
        f"{statistics.median(c['playing'] for c in every):.2f} s; parts (medians): "
        + ", ".join(f"{name} {statistics.median(c[name] for c in every):.2f}" for name in parts),
        VISITOR_TARGET,
        p50 <= 1.0 and p95 <= 1.5 and stalls == 0,
    )


def cold_visitor_reading(length: float, clicks: list[dict[str, Any]]) -> Reading:
    """13h on a cold source: each click a quote of an episode no one has clipped."""
    totals = [c["total"] for c in clicks]
    p50, p95 = statistics.median(totals), percentile(totals, 0.95)
    parts = [name for name in clicks[0] if "→" in name]
    return Reading(
        f"13h cold. the same as 13h, {length:g} s clips, each a quote of an episode no one has clipped (a new name of "
        "the source, probed afresh, its block cache emptied: the cut's bytes read from the loopback origin), to the "
        "first frame presented (not played to its end), the worker idle before each click",
        f"p50 {p50:.2f} s, p95 {p95:.2f} s over {len(totals)} clicks; 'playing' p50 "
        f"{statistics.median(c['playing'] for c in clicks):.2f} s; parts (medians): "
        + ", ".join(f"{name} {statistics.median(c[name] for c in clicks):.2f}" for name in parts),
        TARGET,
        p50 <= 1.0 and p95 <= 1.5,
    )


def card_reading(cards: dict[float, list[dict[str, Any]]], links: dict[float, list[dict[str, Any]]]) -> Reading:
    """13j: the card's first frames beside 13h's (the same clicks' twins), p50 and p95 within 0.1 s of theirs."""
    every = [c["total"] for each in cards.values() for c in each]
    plain = [c["total"] for each in links.values() for c in each]
    stalls = int(sum(c["stalls"] for each in cards.values() for c in each))
    p50, p95 = statistics.median(every), percentile(every, 0.95)
    l50, l95 = statistics.median(plain), percentile(plain, 0.95)
    by_length = "; ".join(
        f"{length:g} s: p50 {statistics.median(c['total'] for c in each):.2f} over {len(each)}"
        for length, each in cards.items()
    )
    return Reading(
        "13j. the same as 13h with the link in a <quote-clip> card (/embed.js: the link's HLS parts through Media "
        "Source while the clip renders), from the click on its play button to the first frame presented; each card "
        "click follows a 13h click, a new quote each, the worker idle before each",
        f"p50 {p50:.2f} s, p95 {p95:.2f} s over {len(every)} clicks (13h's beside them: p50 {l50:.2f} s, p95 "
        f"{l95:.2f} s: {p50 - l50:+.2f} s, {p95 - l95:+.2f} s); by length: {by_length}; stalls to the clip's end: "
        f"{stalls}",
        "p50 and p95 within 0.1 s of 13h's",
        p50 - l50 <= 0.1 and p95 - l95 <= 0.1,
    )


def relay_reading(held: dict[float, list[int]]) -> Reading:
    return Reading(
        "13e. what a streamed clip holds in the relay's Redis once rendered (MEMORY USAGE of its stream: the whole "
        "clip's fragments, kept for the clip's length and 30 s more)",
        ", ".join(f"{length:g} s clip: {statistics.median(sizes) / 1024**2:.1f} MB" for length, sizes in held.items()),
        "report",
        None,
    )


def cached(stack: Stack) -> None:
    """Every block of figure 13's source in the workers' block cache (read through it once, as a render reads)."""
    from sources import resolve_source
    from sources.opener import open_source

    settings = stack.settings().for_queue()
    with tempfile.TemporaryDirectory() as tmp:
        ref = resolve_source(stack.http.url(SOURCE), allow_local=False)
        with open_source(ref, settings, Path(tmp), "ffmpeg") as opened:
            remote = opened.remotes[0]
            size = remote.ensure_size()
            for offset in range(0, size, 8 * 1024**2):
                remote.read(offset, min(8 * 1024**2, size - offset))


def stream_cost(run: RunConfig, source: Path, work: Path) -> list[Row]:
    """Figures 13f and 13g: the same quote rendered in this process with its stream (the fragmented copy read and
    kept) and without, alternating which goes first (the second of a pair reads a source the first left in the page
    cache), the run's repetitions after its warm-up pairs: the whole render's wall time and the ratio (13f), and the
    CPU seconds of this process and its ffmpeg for each render, the median of the per-pair ratios by length (13g: the
    work a stream adds, which a busy machine's spells move less than they move wall time)."""
    from jobs.pipeline.produce import produce_clips
    from quoteclip.settings import Settings
    from storage import LocalStorage

    class Kept:
        def __init__(self) -> None:
            self.size = 0

        def piece(self, piece: Any) -> None:
            self.size += len(piece.data)

        def finished(self) -> None:
            pass

        def failed(self, reason: str) -> None:
            pass

    rows: list[Row] = []
    cpu_ratios: list[str] = []
    for length in run.first_frame_lengths:
        wall: dict[str, list[float]] = {"stream": [], "plain": []}
        cpu: dict[str, list[float]] = {"stream": [], "plain": []}
        for n in range(-run.warmup, run.reps):
            start = FIRST_START + STEP * (n + run.warmup)
            sides = ("stream", "plain")
            for side in sides if n % 2 == 0 else sides[::-1]:
                folder = work / f"cost-{side}"
                shutil.rmtree(folder, ignore_errors=True)
                settings = Settings(storage_dir=folder, allow_local_sources=True, cache_dir=work / "cost-cache")
                spec = build_spec(
                    {
                        "source": str(source),
                        "start": start,
                        "end": start + length,
                        "caption": CAPTION,
                        "watermark": {"text": BRAND},
                    }
                )
                c = process_cpu()
                t = time.perf_counter()
                produce_clips(
                    [spec], settings.for_cli(), LocalStorage(folder), stream=Kept() if side == "stream" else None
                )
                if n >= 0:
                    wall[side].append(time.perf_counter() - t)
                    cpu[side].append(process_cpu() - c)
        ratio = pair_ratio(wall["stream"], wall["plain"])
        rows.append(
            Comparison.of(
                f"13f. the whole render of a {length:g} s clip with its stream (a fragmented copy of the same encode, "
                "decoded on automatic threads) vs without (in-process, the same quote, each pair in turn led by one "
                "side)",
                wall["stream"],
                wall["plain"],
                ratio,
                "≤ 1.05×",
                ratio <= 1.05,
            )
        )
        cpu_ratios.append(
            f"{length:g} s {pair_ratio(cpu['stream'], cpu['plain']):.2f}× "
            f"({statistics.median(cpu['stream']):.1f} / {statistics.median(cpu['plain']):.1f} CPU-s)"
        )
    rows.append(
        Reading(
            "13g. CPU seconds of the same renders (this process and its ffmpeg), with the stream vs without: the "
            "median of the per-pair ratios, and the medians",
            "; ".join(cpu_ratios),
            "report",
            None,
        )
    )
    return rows


# ---- 13i: the visitor of a page on a distant network ------------------------------------------------------------

DISTANT_DELAY = 0.020  # seconds each way between the visitor and the service (a 40 ms round trip)
DISTANT_RATE = 50e6 / 8  # bytes a second the service's answers reach the visitor at (50 Mbit/s)
DISTANT_CLICKS = 20
DISTANT_WAIT = 3.0  # seconds between the page's load and the visitor's play
DISTANT_TARGET = "p95 ≤ 1.5 s"


def distant_visitor(run: RunConfig, stack: Stack, browser: Any) -> Reading:
    """Figure 13i: a visitor on a page of another origin with ``<video preload="none">`` (its poster's link asked
    as the page loads), through a proxy that adds ``DISTANT_DELAY`` each way and holds the answers to
    ``DISTANT_RATE``; play pressed ``DISTANT_WAIT`` s after the load; seconds from play to the first frame
    presented. Each click is a quote of an episode no one has clipped (a new name of the source, the block cache
    emptied): its poster, then its clip, rendered for this visitor."""
    from testkit.proxy import Proxy

    proxy = Proxy(("127.0.0.1", stack.port), delay=DISTANT_DELAY, rate=DISTANT_RATE)
    base = f"http://127.0.0.1:{proxy.port}"
    played, posters = [], []
    try:
        for n in range(2 if run.quick else DISTANT_CLICKS):
            source = stack.new_episode(SOURCE)
            stack.clear_source_cache()
            body = clip(stack, FIRST_START + STEP * n, run.first_frame_lengths[0], source)
            link = base + signed.sign(body, SITE_KEY[0], SITE_KEY[1])
            poster = base + signed.sign(body, SITE_KEY[0], SITE_KEY[1], variant="poster")
            page_name = f"distant-{n}.html"
            (stack.http.root / page_name).write_text(
                '<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,">'
                f'<video id="v" preload="none" muted playsinline width="640" poster="{poster}" src="{link}"></video>'
            )
            context = browser.new_context()
            try:
                page = context.new_page()
                poster_seen: dict[str, float] = {}
                page.on(
                    "response",
                    lambda r, p=poster, seen=poster_seen: (
                        seen.setdefault("at", time.monotonic()) if r.url == p else None
                    ),
                )
                loaded = time.monotonic()
                page.goto(stack.http.url(page_name))
                time.sleep(DISTANT_WAIT)
                page.evaluate(
                    """() => { const v = document.getElementById("v"); window.seen = {first: null, error: null};
                      v.addEventListener("error", () => { window.seen.error = v.error && v.error.message; });
                      v.requestVideoFrameCallback((now, frame) => { window.seen.first = frame.presentationTime; });
                      window.seen.t0 = performance.now(); v.play(); }"""
                )
                page.wait_for_function(
                    "() => window.seen.first !== null || window.seen.error !== null", timeout=600_000
                )
                seen = page.evaluate("() => window.seen")
                if seen["first"] is None:
                    raise SystemExit(f"bench: the distant visitor's <video> failed: {seen['error']}")
                played.append(float(seen["first"] - seen["t0"]) / 1000)
                if "at" in poster_seen:
                    posters.append(poster_seen["at"] - loaded)
                finished(stack, job_of(stack, body))
                print(f"bench: distant visitor {n}: first frame {played[-1]:.3f} s after play", file=sys.stderr)
            finally:
                context.close()
    finally:
        proxy.close()
    p50, p95 = statistics.median(played), percentile(played, 0.95)
    return Reading(
        f"13i. first frame presented in Chromium for a visitor {DISTANT_DELAY * 2000:g} ms away at "
        f"{DISTANT_RATE * 8 / 1e6:g} Mbit/s (a shaping proxy before the API): a page of another origin with "
        f'<video preload="none"> (its poster asked as it loads), play pressed {DISTANT_WAIT:g} s after the load, a '
        f"{run.first_frame_lengths[0]:g} s quote of an episode no one has clipped (cold source cache), from play",
        f"p50 {p50:.2f} s, p95 {p95:.2f} s over {len(played)} clicks (the poster answered "
        f"{statistics.median(posters) if posters else float('nan'):.2f} s after the page's load, median)",
        DISTANT_TARGET,
        p95 <= 1.5,
    )
