"""The benchmark's results: one row per figure, the machine they were measured on, the markdown table, the JSON."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from renderer.ffmpeg import ffmpeg_binary, ffmpeg_version

from .config import RunConfig


@dataclass(frozen=True)
class Spread:
    """Wall-clock seconds of one side's timed runs."""

    min: float
    median: float
    max: float

    @classmethod
    def of(cls, xs: list[float]) -> Spread:
        return cls(min(xs), statistics.median(xs), max(xs))

    def __str__(self) -> str:
        return f"{self.min:.2f} / {self.median:.2f} / {self.max:.2f}"


@dataclass(frozen=True)
class Comparison:
    """A figure timed against an alternative (the limit, or what a user would otherwise do): both sides' runs and
    a ratio (usually the median of the per-pair ratios ours / other)."""

    figure: str
    ours: Spread
    other: Spread
    ratio: float
    target: str
    met: bool | None

    @classmethod
    def of(
        cls, figure: str, ours: list[float], other: list[float], ratio: float, target: str, met: bool | None
    ) -> Comparison:
        return cls(figure, Spread.of(ours), Spread.of(other), ratio, target, met)


@dataclass(frozen=True)
class Reading:
    """A figure read as one line of text (sizes, counts, percentiles, parts of a time)."""

    figure: str
    value: str
    target: str
    met: bool | None


Row = Comparison | Reading


@dataclass(frozen=True)
class Machine:
    cores: str
    cpu: str
    memory_gib: str
    python: str
    ffmpeg: str
    date: str
    commit: str = "unknown"  # the product's and the harness's (git HEAD; "+changes" when the tree differs)

    @classmethod
    def this(cls) -> Machine:
        model = "unknown"
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        return cls(
            cores=str(os.cpu_count()),
            cpu=model,
            memory_gib=f"{psutil.virtual_memory().total / 1024**3:.0f}",
            python=platform.python_version(),
            ffmpeg=ffmpeg_version(ffmpeg_binary(None)),
            date=time.strftime("%Y-%m-%d"),
            commit=_commit(),
        )


def _commit() -> str:
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def machine_line(info: Machine, run: RunConfig) -> str:
    return (
        f"machine: {info.cores} cores, {info.cpu}, {info.memory_gib} GiB, Python {info.python}, "
        f"ffmpeg {info.ffmpeg}, {info.date}, commit {info.commit}; {run.describe()}"
    )


def table(rows: list[Row]) -> str:
    out = [
        "| figure | ours (min / median / max s) | alternative (min / median / max s) | result | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        met = {True: "yes", False: "**no**", None: "–"}[r.met]
        if isinstance(r, Reading):
            out.append(f"| {r.figure} | | | {r.value} | {r.target} | {met} |")
        else:
            out.append(f"| {r.figure} | {r.ours} | {r.other} | {r.ratio:.2f}× | {r.target} | {met} |")
    return "\n".join(out)


def write_json(path: Path, info: Machine, rows: list[Row], loads: dict[str, float] | None = None) -> None:
    """The machine, each group's load average at its start, and every row, as the table has them (a comparison's
    sides as min / median / max)."""
    body = {"machine": asdict(info), "loads": loads or {}, "rows": [asdict(r) for r in rows]}
    path.write_text(json.dumps(body, indent=1, default=str))
