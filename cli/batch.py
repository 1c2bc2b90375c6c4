"""``quoteclip batch SOURCE QUOTES_FILE``: many quotes of one episode, rendered inline or through the queue.

A quotes file is CSV with a header (``start,end,caption``, or ``caption`` alone with ``--transcript``; the caption
is the last column, and its unquoted commas belong to it), JSON (a list of objects) or JSON lines. A bad line is
reported by its line number and does not stop the others.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from quoteclip.errors import BadInput, QuoteclipError
from quoteclip.quotes import FIELDS, csv_quotes
from quoteclip.settings import Settings
from quoteclip.spec import ClipSpec

from .options import ClipOptions, specs_from_options

MAX_QUOTES = 1000
MAX_FILE_BYTES = 4 * 1024**2


@dataclass(frozen=True)
class Quote:
    line: int  # the line of the file it starts on (a CSV header is line 1), or the item's number in a JSON list
    fields: dict[str, Any]


def read_quotes(path: str) -> list[Quote]:
    """The quotes of a file; BadInput (exit 2) when the file itself is unusable."""
    file = Path(path)
    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            raise BadInput(f"quotes file is over {MAX_FILE_BYTES // 1024**2} MB: {path!r}")
        text = file.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise BadInput(f"quotes file not found: {path!r}") from None
    except UnicodeDecodeError:
        raise BadInput(f"quotes file is not UTF-8 text: {path!r}") from None
    except OSError as exc:
        raise BadInput(f"quotes file cannot be read: {path!r} ({exc.strerror})") from None
    suffix = file.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        quotes = [Quote(n, _object(line, n)) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    elif suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInput(f"quotes file is not valid JSON ({exc.msg} at line {exc.lineno}): {path!r}") from None
        if not isinstance(data, list):
            raise BadInput(f"quotes file must hold a JSON list of quotes: {path!r}")
        quotes = [Quote(n, item if isinstance(item, dict) else {"_bad": item}) for n, item in enumerate(data, 1)]
    else:
        quotes = _csv(text, path)
    if not quotes:
        raise BadInput(f"quotes file has no quotes: {path!r}")
    if len(quotes) > MAX_QUOTES:
        raise BadInput(f"quotes file has {len(quotes)} quotes, over the {MAX_QUOTES} a batch takes: {path!r}")
    return quotes


def _object(line: str, number: int) -> dict[str, Any]:
    try:
        item = json.loads(line)
    except json.JSONDecodeError:
        return {"_bad": line[:80]}
    return item if isinstance(item, dict) else {"_bad": item}


def _csv(text: str, path: str) -> list[Quote]:
    """The rows of a CSV quotes file (``quoteclip.quotes.csv_quotes``, as ``POST /batches`` reads quotes sent as
    text), each with the line it starts on; the whole file is refused (BadInput) for a quote left open."""
    return [Quote(line, fields) for line, fields in csv_quotes(text, f"quotes file {path!r}")]


def listed_quotes(
    path: str, source: str | None = None, shared: ClipOptions | None = None, settings: Settings | None = None
) -> list[dict[str, Any]]:
    """The quotes of a file as read, for ``--dry-run``: number (from 1), line, start, end, caption (None when not
    given), and ``error`` for an item that is not a quote, or (given the batch's ``source``, options and settings)
    whose clip the batch would refuse: an end before its start, a quote longer than its platform takes, an unknown
    field, as the batch builds each clip (a quote whose times a transcript gives is checked when it is found).
    Nothing is rendered or stored, no page is read."""
    listed: list[dict[str, Any]] = []
    for number, quote in enumerate(read_quotes(path), 1):
        fields = quote.fields
        item: dict[str, Any] = {"number": number, "line": quote.line}
        item |= {k: None if fields.get(k) is None else str(fields[k]) for k in ("start", "end", "caption")}
        if "_bad" in fields:
            item["error"] = f"not a quote: {fields['_bad']}"
        elif source is not None and shared is not None and settings is not None:
            timed = fields.get("start") not in (None, "") and fields.get("end") not in (None, "")
            if timed or not shared.transcript:
                try:
                    checked = replace(shared, source=source, transcript=None, snap=None)  # (its words: the batch's)
                    specs_from_options(options_for(quote, checked), settings)
                except BadInput as exc:
                    item["error"] = f"{exc.kind}: {exc}"
        listed.append(item)
    return listed


def options_for(quote: Quote, shared: ClipOptions) -> ClipOptions:
    fields = quote.fields
    if "_bad" in fields:
        raise BadInput(f"not a quote: {fields['_bad']!r}")
    unknown = sorted(set(fields) - FIELDS)
    if unknown:
        raise BadInput(f"unknown fields {unknown} (allowed: start, end, caption)")
    text = {k: str(v) for k, v in fields.items()}
    return replace(shared, start=text.get("start"), end=text.get("end"), caption=text.get("caption"))


Outcome = dict[str, Any]


def run_batch(
    source: str,
    quotes_file: str,
    shared: ClipOptions,
    settings: Settings,
    queue: bool,
    say: Callable[[str], None],
) -> list[Outcome]:
    """Build every quote's spec, then render them inline (or enqueue them and wait for the workers); one outcome
    a quote, in file order: the clip's result plus ``line`` and ``profile``, or ``line`` and ``error``."""
    quotes = read_quotes(quotes_file)
    if shared.transcript and shared.transcript != "source":  # an unusable transcript refuses the batch once (exit 2)
        from quoteclip.transcript import load_transcript

        load_transcript(shared.transcript)
    groups: list[tuple[Quote, list[ClipSpec] | None, str | None]] = []
    refusals = Refusals(quotes_file)
    for quote in quotes:
        try:
            opts = options_for(quote, replace(shared, source=source))
            built = specs_from_options(opts, settings)
            for warning in built[0].warnings:
                print(f"quoteclip: {quotes_file}: line {quote.line}: warning: {warning}", file=sys.stderr)
            groups.append((quote, built, None))
        except BadInput as exc:
            refusals.say(quote.line, f"{exc.kind}: {exc}")
            groups.append((quote, None, f"{exc.kind}: {exc}"))
    todo = [g for _, g, _ in groups if g is not None]
    results = _through_queue(todo, settings, say) if queue else _inline(todo, settings, say)
    outcomes: list[Outcome] = []
    for quote, specs, error in groups:
        if specs is None:
            outcomes.append({"line": quote.line, "error": error})
            continue
        for spec, got in zip(specs, results.pop(0), strict=True):
            if "error" in got:
                refusals.say(quote.line, str(got["error"]))
                outcomes.append(
                    {"line": quote.line, "profile": spec.profile, "platform": spec.platform, "error": got["error"]}
                )
            else:
                outcomes.append(
                    {
                        **got,
                        "line": quote.line,
                        "profile": spec.profile,
                        "platform": spec.platform,
                        "warnings": list(spec.warnings),
                    }
                )
    refusals.close()
    return outcomes


class Refusals:
    """A batch's refusals said once each on stderr, with the line of the first clip it refused; the same refusal of
    more clips is said once more at the end, naming their lines (a source refused for 3 quotes × 4 platforms is
    two lines, not twelve)."""

    def __init__(self, quotes_file: str) -> None:
        self.quotes_file = quotes_file
        self.again: dict[str, list[int]] = {}

    def say(self, line: int, error: str) -> None:
        if error in self.again:
            self.again[error].append(line)
            return
        self.again[error] = []
        print(f"quoteclip: {self.quotes_file}: line {line}: {error}", file=sys.stderr)

    def close(self) -> None:
        for error, lines in self.again.items():
            if lines:
                shown = ", ".join(str(n) for n in dict.fromkeys(lines))
                first = error if len(error) <= 80 else error[:77] + "…"
                print(
                    f"quoteclip: {self.quotes_file}: {len(lines)} more clip{'s' if len(lines) > 1 else ''} refused "
                    f"alike (lines {shown}): {first}",
                    file=sys.stderr,
                )


def _inline(groups: list[list[ClipSpec]], settings: Settings, say: Callable[[str], None]) -> list[list[Outcome]]:
    """Each quote's profiles from one decode of the source."""
    from jobs.pipeline.produce import produce_clips
    from storage import open_storage

    storage = open_storage(settings)
    out: list[list[Outcome]] = []
    began = time.monotonic()
    total = sum(len(g) for g in groups)
    for specs in groups:
        try:
            out.append([r.to_json() for r in produce_clips(specs, settings.for_cli(), storage, check=True)])
        except QuoteclipError as exc:
            out.append([{"error": f"{exc.kind}: {exc}".splitlines()[0]} for _ in specs])
        say(_progress_line([o for group in out for o in group], total, began))
    return out


def _through_queue(groups: list[list[ClipSpec]], settings: Settings, say: Callable[[str], None]) -> list[list[Outcome]]:
    from jobs.pipeline.assets import upload_paths
    from jobs.queue import connect, enqueue_profiles, job_status
    from storage import open_storage

    storage = open_storage(settings)
    connection = connect(settings)
    queued = [
        enqueue_profiles([upload_paths(s, storage) for s in specs], settings, connection, storage, bulk=True)
        for specs in groups
    ]
    ids = [q.job_id for group in queued for q in group]
    stored = {q.job_id for group in queued for q in group if q.link}  # answered from the store: nothing to render
    began = time.monotonic()
    done: dict[str, dict[str, Any]] = {}
    while len(done) < len(set(ids)):
        for job_id in ids:
            if job_id not in done:
                body = job_status(job_id, settings, connection, storage)
                if body["status"] in ("finished", "failed", "stopped", "canceled", "unknown"):
                    done[job_id] = body
                    seen = [
                        {"cached": j in stored} if b["status"] == "finished" else {"error": b["status"]}
                        for j, b in done.items()
                    ]
                    say(_progress_line(seen, len(set(ids)), began))
        if len(done) < len(set(ids)):
            time.sleep(0.5)
    out: list[list[Outcome]] = []
    for group in queued:
        answers: list[Outcome] = []
        for q in group:
            body = done[q.job_id]
            if body["status"] == "finished":
                answers.append(
                    {
                        "status": "finished",
                        "link": body["link"],
                        "key": q.job_id.removeprefix("clip-"),
                        "job_id": q.job_id,
                        "cached": q.job_id in stored,
                    }
                )
            else:
                answers.append({"error": body["error"] or body["status"]})
        out.append(answers)
    return out


def _progress_line(outcomes: list[Outcome], total: int, began: float) -> str:
    """``3/10 clips done (2 rendered, 1 already stored, 0 failed), 12 s so far, about 28 s to go``."""
    failed = sum(1 for o in outcomes if "error" in o)
    stored = sum(1 for o in outcomes if o.get("cached"))
    done, elapsed = len(outcomes), time.monotonic() - began
    eta = elapsed / done * (total - done) if done else 0.0
    counts = f"{done - failed - stored} rendered, {stored} already stored, {failed} failed"
    return f"{done}/{total} clips done ({counts}), {elapsed:.0f} s so far, about {eta:.0f} s to go"
