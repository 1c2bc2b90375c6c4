"""Figures 7a–7e: the editors' previews (an instant stream copy, an encoded preview from a source only in 1080p and
from a page that also offers 360p) against the final render of the same quote, a nudge over HTTP, and a cold
``quoteclip render --quality preview`` against its bare ffmpeg equivalent."""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from functools import partial
from pathlib import Path

from renderer.plan import PREVIEW_AUDIO_BITRATE, PREVIEW_CRF, PREVIEW_PRESET

from .cli import COMMAND
from .config import BRAND, CAPTION, RunConfig
from .inline import render_inline
from .media import episode
from .report import Comparison, Reading, Row
from .stack import Stack, clip_body
from .timing import pair_ratio, paired, percentile

START = 61.0  # where the quotes of figures 7a–7c and 7e start, seconds into the episode
PREVIEW_QUOTE = 20.0  # figure 7e's quote, seconds (the quick run's: its own quote length)


def figures(run: RunConfig, ffmpeg: str, source: Path, work: Path, stack: Stack) -> list[Row]:
    """Previews against the final render of the same quote, both sides warmed and repeated alike."""
    rows: list[Row] = []
    q = run.quote  # figures 7b–7d
    for length in run.lengths:
        instant, final = paired(
            partial(render_inline, source, START, length, work, "instant"),
            partial(render_inline, source, START, length, work),
            run,
        )
        ratio = pair_ratio(instant, final)
        rows.append(
            Comparison.of(
                f"7a. instant preview (stream copy, edit list) vs final render, {length:g} s quote",
                instant,
                final,
                ratio,
                "≤ 0.1×",
                ratio <= 0.1,
            )
        )
    preview, final = paired(
        lambda: render_inline(source, START, q, work, "preview"),
        lambda: render_inline(source, START, q, work),
        run,
    )
    ratio = pair_ratio(preview, final)
    rows.append(  # the preview's target, for the case it was set for (7c is the case that meets it)
        Comparison.of(
            f"7b. encoded preview (640×360, ultrafast) vs final render, {q:g} s, source only in 1080p",
            preview,
            final,
            ratio,
            "≤ 0.25×",
            ratio <= 0.25,
        )
    )
    low = episode(ffmpeg, run.minutes, 360, "700k")
    www = stack.http.root
    (www / "episode-360p.mp4").unlink(missing_ok=True)
    (www / "episode-360p.mp4").symlink_to(low.resolve())
    (www / "page.html").write_text(
        "<html><body><video><source src='/episode.mp4' type='video/mp4' res='1080'>"
        "<source src='/episode-360p.mp4' type='video/mp4' res='360'></video></body></html>"
    )
    page = stack.http.url("page.html")
    preview, final = paired(
        lambda: render_inline(page, START, q, work, "preview"),
        lambda: render_inline(page, START, q, work),
        run,
    )
    ratio = pair_ratio(preview, final)
    rows.append(
        Comparison.of(
            f"7c. encoded preview vs final render, {q:g} s, page source offering 360p and 1080p "
            "(the preview decodes 360p; both extract the page and read through the warm block cache)",
            preview,
            final,
            ratio,
            "≤ 0.25×",
            ratio <= 0.25,
        )
    )
    rows.append(nudges(run, stack))
    rows.append(cold_preview(run, ffmpeg, source, work, stack))
    return rows


def cold_preview(run: RunConfig, ffmpeg: str, source: Path, work: Path, stack: Stack) -> Comparison:
    """Figure 7e: a cold ``quoteclip render --quality preview`` process (local 1080p source, a fresh local folder
    store each time, caption and watermark) against a bare ffmpeg transcode of the same span to 640×360 with the
    preview's x264 preset and quality and AAC: what an editor's preview costs beyond the transcode itself."""
    length = run.quote if run.quick else PREVIEW_QUOTE
    source = source.resolve()
    env = {k: v for k, v in stack.env.items() if not k.startswith(("QUOTECLIP_S3_", "AWS_"))}
    for name in ("PYTHONDONTWRITEBYTECODE", "QUOTECLIP_REDIS_URL", "FFMPEG_BINARY"):
        env.pop(name, None)  # (as figure 8a: byte-code written, no Redis, the wheel's ffmpeg)
    argv = [
        *COMMAND,
        *("render", str(source), "--start", str(START), "--end", str(START + length)),
        *("--caption", CAPTION, "--watermark", BRAND, "--quality", "preview", "--json"),
    ]
    bare_argv = [
        *(ffmpeg, "-hide_banner", "-loglevel", "error", "-y"),
        *("-ss", f"{START:.3f}", "-i", str(source), "-t", f"{length:.3f}", "-vf", "scale=-2:360"),
        *("-c:v", "libx264", "-preset", PREVIEW_PRESET, "-crf", str(PREVIEW_CRF)),
        *("-c:a", "aac", "-b:a", PREVIEW_AUDIO_BITRATE, str(work / "bare-preview.mp4")),
    ]

    def preview() -> None:
        store = tempfile.mkdtemp(dir=work, prefix="preview-store-")
        out = subprocess.run(argv, env=env | {"QUOTECLIP_STORAGE_DIR": store}, capture_output=True, text=True, cwd=work)
        if out.returncode != 0:
            raise SystemExit(f"bench: quoteclip render --quality preview failed: {out.stderr.strip()}")

    ours, other = paired(preview, lambda: subprocess.run(bare_argv, check=True), run)
    ratio = pair_ratio(ours, other)
    return Comparison.of(
        f"7e. cold `quoteclip render --quality preview` process, {length:g} s quote, source only in 1080p "
        f"(local, local folder store) vs bare ffmpeg to 640×360 {PREVIEW_PRESET} with AAC",
        ours,
        other,
        ratio,
        "≤ 1.15×",
        ratio <= 1.15,
    )


def nudges(run: RunConfig, stack: Stack) -> Reading:
    """Figure 7d: POST /previews as the edit page sends it on every nudge, the source's bytes cached by a first
    preview."""
    at = min(300.0, run.minutes * 30)  # mid-episode
    q = run.quote
    body = clip_body(stack, at, q)
    status, answer = stack.call("POST", "/previews", body)
    if status != 200:
        raise SystemExit(f"bench: POST /previews answered {status}: {answer}")
    times = []
    for i in range(1, run.nudges + 1):
        t = time.perf_counter()
        status, answer = stack.call("POST", "/previews", body | {"start": at + i / 30, "end": at + q + i / 30})
        times.append(time.perf_counter() - t)
        if status != 200 or answer.get("mode") != "copy":
            raise SystemExit(f"bench: POST /previews answered {status}: {answer}")
    return Reading(
        f"7d. POST /previews over HTTP for a one-frame nudge, {q:g} s quote, source bytes cached",
        f"p50 {1000 * statistics.median(times):.0f} ms, "
        f"p95 {1000 * percentile(times, 0.95):.0f} ms over {len(times)} nudges",
        "report",
        None,
    )
