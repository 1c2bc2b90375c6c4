"""Figures 8a–8c: a cold ``quoteclip render`` process, as a creator's script or a site's cron job runs it."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from . import baselines
from .config import BRAND, CAPTION, RunConfig
from .report import Comparison, Reading, Row
from .stack import Stack
from .timing import pair_ratio, paired

# the command as a user runs it: the console script pip installed beside this interpreter (``python -m`` when
# there is none, as in an environment where the project is on the path but not installed)
_SCRIPT = Path(sys.executable).with_name("quoteclip")
COMMAND = (str(_SCRIPT),) if _SCRIPT.is_file() else (sys.executable, "-m", "cli")

# what a cold render's own process imports: the render command's modules and the render path (figure 8c)
RENDER_IMPORTS = "cli.app, cli.clips, cli.options, jobs.pipeline.produce"

# whose modules a cold render imports, by the first part of the module's name (the rest: the standard library)
IMPORT_GROUPS = {
    "typer": "typer (the command line)",
    "pydantic": "pydantic",
    "pydantic_core": "pydantic",
    "annotated_types": "pydantic",
    "typing_inspection": "pydantic",
    "typing_extensions": "pydantic",
    "av": "PyAV",
    "PIL": "Pillow (captions, watermark)",
    "ffmpeg": "ffmpeg-python (plan)",
    "past": "ffmpeg-python (plan)",
    "future": "ffmpeg-python (plan)",
    "quoteclip": "quoteclip's own",
    "jobs": "quoteclip's own",
    "renderer": "quoteclip's own",
    "sources": "quoteclip's own",
    "storage": "quoteclip's own",
    "watermarks": "quoteclip's own",
}


def figures(run: RunConfig, ffmpeg: str, source: Path, work: Path, stack: Stack) -> list[Row]:
    """A render (local source, fresh local folder store each time) and a stored clip answered (no ffmpeg), each
    against the bare transcode of the same quote. Byte-code is written on the warm-up run and reused, as in an installed
    package."""
    length, start = run.quote, 61.0
    source = source.resolve()
    base = {k: v for k, v in stack.env.items() if not k.startswith(("QUOTECLIP_S3_", "AWS_"))}
    base.pop("PYTHONDONTWRITEBYTECODE", None)
    base.pop("QUOTECLIP_REDIS_URL", None)  # the inline CLI needs no Redis
    base.pop("FFMPEG_BINARY", None)  # the CLI finds the wheel's ffmpeg (the bare side's) as a user's finds it
    if os.environ.get("FFMPEG_BINARY"):
        base["FFMPEG_BINARY"] = ffmpeg

    def cli(src: str, store: Path | None, extra: dict[str, str] | None = None) -> Callable[[], None]:
        env = {**base, **(extra or {})}
        if store is not None:
            env["QUOTECLIP_STORAGE_DIR"] = str(store)
        argv = [
            *COMMAND,
            "render",
            src,
            "--start",
            str(start),
            "--end",
            str(start + length),
            "--caption",
            CAPTION,
            "--watermark",
            BRAND,
            "--json",
        ]

        def render() -> None:
            out = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=work)
            if out.returncode != 0:
                raise SystemExit(f"bench: quoteclip render failed: {out.stderr.strip()}")

        return render

    def fresh_store() -> None:
        cli(str(source), Path(tempfile.mkdtemp(dir=work, prefix="cli-store-")))()

    def bare() -> None:
        baselines.bare_ffmpeg(ffmpeg, str(source), start, length, work / "bare.mp4")

    rows: list[Row] = []
    ours, other = paired(fresh_store, bare, run)
    ratio = pair_ratio(ours, other)
    rows.append(
        Comparison.of(
            f"8a. cold `quoteclip render` process, {length:g} s quote (local source, local folder store) vs "
            "bare ffmpeg",
            ours,
            other,
            ratio,
            "≤ 1.15×",
            ratio <= 1.15,
        )
    )
    store = work / "cli-stored"
    cases = [
        ("local source, local folder store", str(source), {}, 0.15),
        ("plain-URL source, local folder store", stack.http.url("episode.mp4"), {}, 0.15),
        ("local source, S3 store", str(source), stack.s3.env(), None),
    ]
    for label, src, extra, target in cases:
        answer = cli(src, store if not extra else None, extra)
        answer()  # stores the clip (the warm-up below then finds it)
        ours, other = paired(answer, bare, run)
        ratio = pair_ratio(ours, other)
        rows.append(
            Comparison.of(
                f"8b. stored clip answered by a cold `quoteclip render` ({label}) vs bare {length:g} s transcode",
                ours,
                other,
                ratio,
                f"≤ {target}×" if target else "report",
                ratio <= target if target else None,
            )
        )
    rows.append(import_figure(run, base, work))
    return rows


def import_figure(run: RunConfig, env: dict[str, str], work: Path) -> Reading:
    """Figure 8c: what a cold render's imports cost (``python -X importtime``, byte-code written): the command's
    own process (the command and the render path), and PyAV in the probe helper beside it; median of the runs,
    each module's own time summed by the package it belongs to."""

    def imports(code: str) -> dict[str, float]:
        out = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            env=env,
            capture_output=True,
            text=True,
            cwd=work,
            check=True,
        )
        groups: dict[str, float] = {}
        for line in out.stderr.splitlines():
            parts = line.removeprefix("import time:").split("|")
            if len(parts) != 3 or not parts[0].strip().isdigit():
                continue
            name = parts[2].strip().split(".")[0]
            group = IMPORT_GROUPS.get(name, "site + standard library")
            groups[group] = groups.get(group, 0.0) + int(parts[0]) / 1e6
        return groups

    runs, helper = [], []
    for _ in range(run.import_runs):
        runs.append(imports(f"import {RENDER_IMPORTS}"))
        helper.append(imports("import av")[IMPORT_GROUPS["av"]])
    totals = [sum(g.values()) for g in runs]
    middle = runs[totals.index(statistics.median_low(totals))]
    text = ", ".join(f"{k} {1000 * v:.0f}" for k, v in sorted(middle.items(), key=lambda kv: -kv[1]))
    return Reading(
        "8c. imports of a cold `quoteclip render`'s own process (the command and the render path) "
        "and of its probe helper (PyAV, beside them), `python -X importtime`, byte-code written, ms",
        f"{1000 * sum(middle.values()):.0f} ms: {text}; helper: PyAV {1000 * statistics.median(helper):.0f}",
        "report",
        None,
    )
