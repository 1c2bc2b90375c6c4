"""Renders in the benchmark's own process, as ``quoteclip render`` makes them (without the process's start-up)."""

from __future__ import annotations

import time
from pathlib import Path

from jobs.pipeline.produce import produce_clip
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from storage import LocalStorage

from .config import BRAND, CAPTION


def cli_settings(storage_dir: Path, cache_dir: Path) -> Settings:
    """The command line's settings with a local folder store, a source cache, local files and the loopback
    servers (127.0.0.1 only) allowed."""
    return Settings(
        storage_dir=storage_dir,
        allow_local_sources=True,
        source_hosts=("127.0.0.1",),
        allow_addresses=("127.0.0.1/32",),
        cache_dir=cache_dir,
    ).for_cli()


def render_inline(
    source: Path | str,
    start: float,
    length: float,
    work: Path,
    quality: str = "final",
    timings: list[dict[str, float]] | None = None,
) -> None:
    """What ``quoteclip render`` does (without process start-up): probe, overlays, one ffmpeg pass, store.
    A URL source is read over loopback through the block cache in ``work`` (warm after the first run).
    ``timings``: each render's own timings (the pipeline's, as a job's meta has them) are appended to it."""
    store = work / f"store-{time.monotonic_ns()}"
    settings = cli_settings(store, work / "inline-cache")
    spec = build_spec(
        {
            "source": str(source),
            "start": start,
            "end": start + length,
            "caption": CAPTION,
            "watermark": {"text": BRAND},
            "quality": quality,
        }
    )
    result = produce_clip(spec, settings, LocalStorage(store))  # (the stores go with the work folder, after the run)
    if timings is not None and result.timings is not None:
        timings.append(result.timings)
