"""``quoteclip batch SOURCE QUOTES_FILE``: many quotes of one episode, rendered inline or through the queue.

A quotes file is CSV with a header (``start,end,caption``, or ``caption`` alone with ``--transcript``), JSON (a
list of objects) or JSON lines. A bad line is reported by its line number and does not stop the others.
"""

from __future__ import annotations

import csv
import io
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .errors import BadInput, QuoteclipError
from .options import ClipOptions, spec_from_options
from .settings import Settings
from .spec import ClipSpec

FIELDS = {"start", "end", "caption"}
MAX_QUOTES = 1000
MAX_FILE_BYTES = 4 * 1024**2


@dataclass(frozen=True)
class Quote:
    line: int  # the line of the file it came from (a CSV header is line 1), or the item's number in a JSON list
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
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip().lower() for h in reader.fieldnames or []]
    if not header or not FIELDS & set(header):
        raise BadInput(f"quotes file needs a CSV header naming start, end and caption (or caption), got {header}")
    unknown = sorted(set(header) - FIELDS)
    if unknown:
        raise BadInput(f"quotes file has unknown columns {unknown} (allowed: start, end, caption): {path!r}")
    reader.fieldnames = header
    quotes = []
    for row in reader:
        fields = {k: v.strip() for k, v in row.items() if k is not None and v is not None and v.strip()}
        if None in row:  # more cells than columns
            fields["_bad"] = "more cells than the header has columns"
        if fields:
            quotes.append(Quote(reader.line_num, fields))
    return quotes


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
    specs: list[tuple[Quote, ClipSpec | None, str | None]] = []
    for quote in quotes:
        try:
            specs.append((quote, spec_from_options(options_for(quote, replace(shared, source=source)), settings), None))
        except BadInput as exc:
            print(f"quoteclip: {quotes_file}: line {quote.line}: {exc.kind}: {exc}", file=sys.stderr)
            specs.append((quote, None, f"{exc.kind}: {exc}"))
    todo = [s for _, s, _ in specs if s is not None]
    results = _through_queue(todo, settings, say) if queue else _inline(todo, settings, say)
    outcomes: list[Outcome] = []
    for quote, spec, error in specs:
        if spec is None:
            outcomes.append({"line": quote.line, "error": error})
            continue
        got = results.pop(0)
        if "error" in got:
            print(f"quoteclip: {quotes_file}: line {quote.line}: {got['error']}", file=sys.stderr)
            outcomes.append({"line": quote.line, "error": got["error"]})
        else:
            outcomes.append({**got, "line": quote.line, "profile": spec.profile})
    return outcomes


def _inline(specs: list[ClipSpec], settings: Settings, say: Callable[[str], None]) -> list[Outcome]:
    from jobs.pipeline import produce_clip
    from storage import open_storage

    storage = open_storage(settings)
    out: list[Outcome] = []
    began = time.monotonic()
    for n, spec in enumerate(specs, 1):
        try:
            result = produce_clip(spec, settings.for_cli(), storage)
            out.append(result.to_json())
        except QuoteclipError as exc:
            out.append({"error": f"{exc.kind}: {exc}".splitlines()[0]})
        say(_progress_line(n, len(specs), began, "rendered inline"))
    return out


def _through_queue(specs: list[ClipSpec], settings: Settings, say: Callable[[str], None]) -> list[Outcome]:
    from jobs.assets import upload_paths
    from jobs.queue import connect, enqueue_clip, job_status
    from storage import open_storage

    storage = open_storage(settings)
    connection = connect(settings)
    queued = [enqueue_clip(upload_paths(s, storage), settings, connection, storage, bulk=True) for s in specs]
    ids = [q.job_id for q in queued]
    stored = {q.job_id for q in queued if q.link}  # answered from the store at once: nothing to render
    began = time.monotonic()
    done: dict[str, dict[str, Any]] = {}
    while len(done) < len(ids):
        for job_id in ids:
            if job_id not in done:
                body = job_status(job_id, settings, connection, storage)
                if body["status"] in ("finished", "failed", "stopped", "canceled", "unknown"):
                    done[job_id] = body
                    say(_progress_line(len(done), len(ids), began, "through the workers"))
        if len(done) < len(ids):
            time.sleep(0.5)
    out: list[Outcome] = []
    for job_id in ids:
        body = done[job_id]
        if body["status"] == "finished":
            out.append({"status": "finished", "link": body["link"], "key": job_id.removeprefix("clip-"),
                        "job_id": job_id, "cached": job_id in stored})  # fmt: skip
        else:
            out.append({"error": body["error"] or body["status"]})
    return out


def _progress_line(done: int, total: int, began: float, how: str) -> str:
    elapsed = time.monotonic() - began
    eta = elapsed / done * (total - done) if done else 0.0
    return f"{done}/{total} clips {how}, {elapsed:.0f} s so far, about {eta:.0f} s to go"
