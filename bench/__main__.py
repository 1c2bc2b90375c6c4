"""Run the benchmark: ``python -m bench [--quick] [--json FILE] [--only GROUPS]``. Prints a markdown table on stdout."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from renderer.ffmpeg import ffmpeg_binary

from . import cli, creators, firstframe, frontdoor, links, previews, queue, render, split, viewers
from .config import RunConfig
from .media import source_1080p
from .report import Machine, Row, machine_line, table, write_json
from .stack import Stack

# the modules, in the table's order; "click" is figures 3a and 3d alone (a part of "queue", for a partial run), and
# "loudness" figure 14a alone and "hls" figures 11b–11d alone (parts of "creators"), "visitor" figures 13h, 13j
# and 13i alone (a part of "firstframe")
GROUPS = (
    "render",
    "queue",
    "click",
    "links",
    "firstframe",
    "visitor",
    "cli",
    "previews",
    "creators",
    "loudness",
    "hls",
    "viewers",
    "frontdoor",
    "split",
)


IDLE_LOAD = 0.5  # a group starts on a machine whose 1-minute load average is at most this per core
SETTLE = 180.0  # seconds a group waits for it


def settled(run: RunConfig, name: str) -> float:
    """Wait (up to ``SETTLE`` s, not in a reduced run) for the machine to be idle; its load average, printed."""
    limit = IDLE_LOAD * (os.cpu_count() or 1)
    deadline = time.monotonic() + (0 if run.quick else SETTLE)
    while os.getloadavg()[0] > limit and time.monotonic() < deadline:
        time.sleep(5)
    load = os.getloadavg()[0]
    print(f"bench: {name} starts at a load average of {load:.2f} ({os.cpu_count()} cores)", file=sys.stderr)
    return load


def run_all(
    run: RunConfig,
    ffmpeg: str,
    work: Path,
    only: frozenset[str] = frozenset(GROUPS),
    loads: dict[str, float] | None = None,
    each: Callable[[list[Row]], None] | None = None,
) -> list[Row]:
    """Every figure of the groups asked for, in the table's order, each group started on an idle machine (its load
    average printed, and kept in ``loads``). A group that started above ``IDLE_LOAD`` a core runs again once the
    machine has settled, and that second measurement is kept (both loads in ``loads``, the second under "NAME
    again"); when it has not settled, the first is kept and said so. Each group's rows go to stderr as soon as it
    ends, and to ``each`` with every row so far, so a run stopped part-way still shows (and keeps) what it
    measured (the table on stdout comes at the end)."""
    rows: list[Row] = []
    loads = loads if loads is not None else {}
    limit = IDLE_LOAD * (os.cpu_count() or 1)

    def measure(name: str, make: Callable[[], list[Row]]) -> None:
        load = settled(run, name)
        loads[name] = round(load, 2)
        group = make()
        if load > limit and not run.quick:
            again = settled(run, f"{name} again")
            if again <= limit:
                print(f"bench: {name} started above {limit:g}: measured again", file=sys.stderr)
                loads[f"{name} again"] = round(again, 2)
                group = make()
            else:
                print(f"bench: {name} started above {limit:g}, and the machine did not settle: kept", file=sys.stderr)
        done(group)

    def done(group: list[Row]) -> None:
        print(table(group), file=sys.stderr, flush=True)
        rows.extend(group)
        if each is not None:
            each(rows)

    source = source_1080p(ffmpeg, run.minutes)
    if "render" in only:
        measure("render", lambda: render.figures(run, ffmpeg, source, work))
    if only & {"queue", "click", "links", "firstframe", "visitor", "cli", "previews"}:
        with Stack(work, source, ffmpeg) as stack:
            stack.start_api()
            if "queue" in only:
                measure("queue", lambda: queue.figures(run, ffmpeg, source, work, stack))
            else:
                stack.start_worker()  # (figures 3–6 start the worker the figures after them share)
                if "click" in only:
                    measure("click", lambda: queue.click_figures(run, ffmpeg, source, work, stack)[0])
            if "links" in only:
                measure("links", lambda: links.figures(run, stack))
            if "firstframe" in only:
                measure("firstframe", lambda: firstframe.figures(run, ffmpeg, stack))
            elif "visitor" in only:  # (figures 13h, 13j and 13i alone; "firstframe" runs them with 13a-13g)
                measure("visitor", lambda: firstframe.visitor_figures(run, ffmpeg, stack))
            if "cli" in only:
                measure("cli", lambda: cli.figures(run, ffmpeg, source, work, stack))
            if "previews" in only:
                measure("previews", lambda: previews.figures(run, ffmpeg, source, work, stack))
    if "creators" in only:
        measure("creators", lambda: creators.figures(run, ffmpeg, source, work))
    else:
        if "hls" in only:
            measure("hls", lambda: creators.hls_figures(run, ffmpeg, source, work))
        if "loudness" in only:
            measure("loudness", lambda: [creators.loudness_figure(run, ffmpeg, source, work)])
    if "viewers" in only:  # (an API of its own: its per-client caps raised for a crowd from one address)
        with Stack(work, source, ffmpeg) as stack:
            stack.env.update(viewers.caps(run))
            stack.start_api()
            stack.start_worker()
            measure("viewers", lambda: viewers.figures(run, stack))
            measure("viewers (cold)", lambda: viewers.figures(run, stack, cold=True))
    if "frontdoor" in only:  # (its doors started one after another, each with figure 15's caps; one worker)
        with Stack(work, source, ffmpeg) as stack:
            stack.start_worker()
            measure("frontdoor", lambda: frontdoor.figures(run, stack, work))
    if "split" in only:  # (a stack of its own: its workers each held to one core)
        measure("split", lambda: split.figures(run, ffmpeg, work))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a reduced run (CI): a 2-minute source, 2 s quotes, 1 repetition without a warm-up, the smallest batches",
    )
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    parser.add_argument(
        "--only",
        default=",".join(GROUPS),
        help=f"the figures' groups to run, comma-separated (default: all of {', '.join(GROUPS)})",
    )
    args = parser.parse_args()
    only = frozenset(name.strip() for name in args.only.split(",") if name.strip())
    if not only or only - set(GROUPS):
        parser.error(f"--only takes groups of {', '.join(GROUPS)}; got {args.only!r}")
    run = RunConfig.quick_check() if args.quick else RunConfig.full()
    ffmpeg = ffmpeg_binary(os.environ.get("FFMPEG_BINARY"))
    work = Path(tempfile.mkdtemp(prefix="quoteclip-bench-"))
    loads: dict[str, float] = {}
    info = Machine.this()

    def keep(rows: list[Row]) -> None:  # (the JSON rewritten as each group ends: a stopped run keeps its groups)
        if args.json:
            write_json(args.json, info, rows, loads)

    try:
        rows = run_all(run, ffmpeg, work, only, loads, keep)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(machine_line(info, run))
    print("load average at each group's start: " + ", ".join(f"{k} {v:.2f}" for k, v in loads.items()) + "\n")
    print(table(rows))
    if args.json:
        write_json(args.json, info, rows, loads)


if __name__ == "__main__":
    main()
