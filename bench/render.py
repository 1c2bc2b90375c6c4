"""Figures 1, 1b and 2: a render in a warm process against the limit (a bare ffmpeg transcode of the same segment)
and against moviepy."""

from __future__ import annotations

import statistics
from functools import partial
from pathlib import Path

from quoteclip.fonts import default_font_path

from . import baselines
from .config import BRAND, CAPTION, RunConfig
from .inline import render_inline
from .report import Comparison, Reading, Row
from .timing import pair_ratio, paired

START = 61.0  # where the quotes of figures 1 and 2 start, seconds into the episode


def figures(run: RunConfig, ffmpeg: str, source: Path, work: Path) -> list[Row]:
    rows = render_vs_limit(run, ffmpeg, source, work)
    rows.append(moviepy_vs_ours(run, source, work))
    return rows


def render_vs_limit(run: RunConfig, ffmpeg: str, source: Path, work: Path) -> list[Row]:
    rows: list[Row] = []
    for length in run.lengths:
        timings: list[dict[str, float]] = []
        ours, bare = paired(
            partial(render_inline, source, START, length, work, timings=timings),
            partial(baselines.bare_ffmpeg, ffmpeg, str(source), START, length, work / "b.mp4"),
            run,
        )
        ratio = pair_ratio(ours, bare)
        rows.append(
            Comparison.of(f"1. render {length:g} s quote vs bare ffmpeg", ours, bare, ratio, "≤ 1.05×", ratio <= 1.05)
        )
        rows.append(render_parts(length, ours, bare, timings[run.warmup :]))  # (not the warm-up's)
    return rows


def render_parts(length: float, ours: list[float], bare: list[float], timings: list[dict[str, float]]) -> Reading:
    """Figure 1b: where figure 1's render spends its time besides ffmpeg, from the timings each of its timed
    renders wrote (p50 over the runs): the source opened and probed (the overlays are drawn meanwhile), the
    render's work besides ffmpeg (plan, output check), the store, and the rest of the call (spec, lookup,
    temporary folder); ffmpeg's own run against the bare transcodes."""

    def ms(xs: list[float]) -> str:
        return f"{1000 * statistics.median(xs):.0f}"

    parts = {
        "open + probe (overlays drawn beside it)": [t["open_probe_s"] for t in timings],
        "render besides ffmpeg (plan, output check)": [t["render_s"] - t["ffmpeg_s"] for t in timings],
        "store (4 sidecars, then the mp4)": [t["store_s"] for t in timings],
        "the rest of the call (spec, lookup, temporary folder)": [
            w - t["open_probe_s"] - t["render_s"] - t["store_s"] for w, t in zip(ours, timings, strict=True)
        ],
    }
    text = "; ".join(f"{k} {ms(v)}" for k, v in parts.items())
    return Reading(
        f"1b. the {length:g} s render's time besides ffmpeg, ms p50 over the {len(timings)} timed runs",
        f"added {ms([o - b for o, b in zip(ours, bare, strict=True)])} (ours minus the bare transcode "
        f"after it); {text}; ffmpeg {ms([t['ffmpeg_s'] for t in timings])} against the bare "
        f"transcodes' {ms(bare)}",
        "report",
        None,
    )


def moviepy_vs_ours(run: RunConfig, source: Path, work: Path) -> Comparison:
    """Both warmed up (moviepy's imports and ours are loaded before the first timed run), same repetitions."""
    font = str(default_font_path())
    length = run.moviepy_length
    ours, mp = paired(
        lambda: render_inline(source, START, length, work),
        lambda: baselines.moviepy_clip(str(source), START, START + length, CAPTION, BRAND, font, work / "moviepy.mp4"),
        run,
    )
    speedup = pair_ratio(mp, ours)
    return Comparison.of(
        f"2. moviepy 2 composite of the {length:g} s clip vs ours",
        ours,
        mp,
        speedup,
        "ours ≥ 10× faster",
        speedup >= 10,
    )
