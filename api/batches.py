"""Batches: many quotes of one source queued behind clicks, collected by one id (status of all, one ZIP)."""

from __future__ import annotations

import json
import secrets
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response, StreamingResponse
from fastapi.routing import APIRoute
from pydantic import Field, ValidationError

from jobs.cancel import cancel_batch
from quoteclip import redis_keys
from quoteclip.errors import BadInput
from quoteclip.platforms import PLATFORMS, parse_platforms
from quoteclip.quotes import csv_quotes
from quoteclip.spec import ClipSpec, build_spec, describe_validation_error, in_profiles, parse_profiles
from quoteclip.transcript import (
    MAX_SEARCH_SECONDS,
    MAX_TRANSCRIPT_BYTES,
    MAX_TRANSCRIPT_WORDS,
    Word,
    find_quote,
    parse_cues,
    parse_json,
)

from .auth import sign_path
from .clips import accepted, accepted_profiles, status_of
from .deps import AllowanceDep, ServicesDep
from .errors import APIError
from .models import MAX_BATCH, BatchRequest, Quote
from .quotes import page_words

MAX_BODY_VALUES = 6 * MAX_TRANSCRIPT_WORDS + 50_000  # a full transcript and a hundred quotes, with room


class _Counted(APIRoute):
    """A route whose JSON body's values (by its commas and brackets) are counted before FastAPI parses it: a keyed
    caller's batch may be 20 MiB (a transcript), and 20 MiB of empty objects takes half a gigabyte to parse."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def counted(request: Request) -> Response:
            if request.method == "POST":
                body = await request.body()  # kept by the request: parsed from this copy
                values = body.count(b",") + body.count(b"{") + body.count(b"[")
                if values > MAX_BODY_VALUES:
                    raise BadInput(
                        f"request: about {values} JSON values, over the {MAX_BODY_VALUES} a batch's body may hold "
                        f"(at most {MAX_BATCH} quotes and a transcript of {MAX_TRANSCRIPT_WORDS} words)"
                    )
            return await handler(request)

        return counted


router = APIRouter(route_class=_Counted)
BATCH_TTL = 7 * 24 * 3600
CHUNK = 1024 * 1024
MAX_QUOTES_TEXT = 256 * 1024
FINDING_SECONDS = 20.0  # finding a batch's quotes in its transcript: past this, the batch is refused
MAX_BATCH_BODY = MAX_TRANSCRIPT_BYTES + 2 * MAX_QUOTES_TEXT  # a batch with its episode's transcript (keyed callers)


class BatchBody(BatchRequest):
    """One source, many quotes; every other field applies to each clip. ``quotes``: a list of quotes (objects with
    start, end and caption), or the text of a quotes file as the batch page sends it (CSV, one quote a line, read
    as ``quoteclip batch`` reads a CSV file; its header is optional). ``transcript``: the episode's transcript
    (WebVTT, SRT or a JSON word list, as text), or ``"source"`` (the page's own captions), to find each quote in
    by its caption, for its words' times, and its start and end where the quote gives none."""

    quotes: (  # type: ignore[assignment]
        Annotated[list[Any], Field(min_length=1, max_length=MAX_BATCH)]
        | Annotated[str, Field(min_length=1, max_length=MAX_QUOTES_TEXT)]
    )
    transcript: str | None = Field(default=None, max_length=MAX_TRANSCRIPT_BYTES)


@router.post("/batches", responses={422: {}, 429: {}, 503: {}})
async def create_batch(request: BatchBody, allowance: AllowanceDep, svc: ServicesDep) -> dict[str, Any]:
    """One source, many quotes: a batch id, and one clip id a quote (identical quotes share one), queued behind
    on-demand clicks. A quote that cannot be rendered (a bad time, a caption too long, …) is left out and named
    in ``rejected`` (its number counted from 1, its ``line`` too when the quotes came as text, and why); the
    others are queued. A batch with no good quote is a 422, and so are quotes given as text with a quote left
    open that runs on into the next line (named by its line). ``profiles``: every quote in each shape, from one
    decode; ``platforms``: every quote for each platform's preset (its shape, caption margins, loudness). Counts
    the clips it will queue against the caller's rate limit, before queueing any; with a ``transcript``, every
    quote it names (each of its shapes) before the transcript is read, and the quotes are found in the API's
    finder threads (api/finders.py)."""
    planned = _planned(request)
    if request.transcript is not None:
        await run_in_threadpool(allowance.take, len(planned.quotes) * planned.shapes)
        good, rejected = await svc.finders.run(_specs, request, planned, svc)
        return await run_in_threadpool(_queued, request, planned, good, rejected, svc)
    good, rejected = await run_in_threadpool(_specs, request, planned, svc)
    await run_in_threadpool(allowance.take, sum(len(specs) for _, specs in good))
    return await run_in_threadpool(_queued, request, planned, good, rejected, svc)


@dataclass(frozen=True)
class Planned:
    """A batch's quotes as given, before any is looked for: the fields they share, their shapes, their lines."""

    common: dict[str, Any]
    profiles: tuple[str, ...] | None
    platforms: tuple[str, ...] | None
    quotes: list[Any]
    lines: dict[int, int]  # quote number → its line in the quotes' text

    @property
    def shapes(self) -> int:
        return len(self.profiles or self.platforms or [None])


def _planned(request: BatchBody) -> Planned:
    common = dict(request.model_extra or {})
    profiles = parse_profiles(common.pop("profiles")) if common.get("profiles") is not None else None
    platforms = _platforms(common.pop("platforms")) if common.get("platforms") is not None else None
    if profiles is not None and platforms is not None:
        raise BadInput("platforms: a platform sets the shape; give platforms or profiles, not both")
    lines: dict[int, int] = {}
    if isinstance(request.quotes, str):
        listed = quotes_of_text(request.quotes)
        lines = {number: line for number, (line, _) in enumerate(listed, start=1)}
        quotes: list[Any] = [fields for _, fields in listed]
    else:
        quotes = request.quotes
    return Planned(common, profiles, platforms, quotes, lines)


def _specs(
    request: BatchBody, planned: Planned, svc: ServicesDep
) -> tuple[list[tuple[int, list[ClipSpec]]], list[dict[str, Any]]]:
    """Each good quote's clips (found in the transcript first, when the batch has one), and the quotes refused."""
    if request.transcript == "source":  # the page's own captions (api/quotes.py)
        spoken: list[Word] | None = page_words(request.source, svc.settings, svc.connection)
    else:
        spoken = transcript_words(request.transcript) if request.transcript is not None else None
    good: list[tuple[int, list[ClipSpec]]] = []  # each good quote's clips
    rejected: list[dict[str, Any]] = []
    began = time.thread_time()  # the CPU time this thread spends finding the batch's quotes
    quotes, lines, platforms = planned.quotes, planned.lines, planned.platforms
    for number, quote in enumerate(quotes, start=1):
        left = FINDING_SECONDS - (time.thread_time() - began)
        if spoken is not None and number > 1 and left <= 0:
            raise BadInput(
                f"transcript: finding the quotes in the transcript took over {FINDING_SECONDS:.0f} s ({number - 1} "
                f"of {len(quotes)} looked for); send fewer quotes a batch, the part of the transcript they are in, or "
                "their start and end"
            )
        try:
            fields = _quote(quote if spoken is None else _found(quote, spoken, min(MAX_SEARCH_SECONDS, left)))
            specs = [
                build_spec(
                    {**planned.common, **over, "source": request.source, **fields},
                    max_seconds=svc.settings.max_clip_seconds,
                    encoder_preset=svc.settings.encoder_preset,
                )
                for over in ([{"platform": name} for name in platforms] if platforms else [{}])
            ]
            good.append((number, in_profiles(specs[0], planned.profiles) if planned.profiles is not None else specs))
        except BadInput as exc:
            rejected.append({"quote": number, **_line(lines, number), "error": f"{exc.kind}: {exc}"})
    if not good:
        named = ("line", "line") if lines else ("quote", "quote")
        reasons = "; ".join(f"{named[0]} {r[named[1]]}: {r['error']}" for r in rejected[:3])
        raise BadInput(f"quotes: no quote of the batch can be rendered ({reasons})")
    return good, rejected


def _queued(
    request: BatchBody,
    planned: Planned,
    good: list[tuple[int, list[ClipSpec]]],
    rejected: list[dict[str, Any]],
    svc: ServicesDep,
) -> dict[str, Any]:
    profiles, lines = planned.profiles, planned.lines
    clips: list[dict[str, Any]] = []
    what: list[dict[str, Any]] = []
    for number, specs in good:
        if profiles is not None:  # every quote in every profile, each quote's profiles from one decode
            made = [c.model_dump() for c in accepted_profiles(svc, specs, request.callback_url, bulk=True)]
        else:
            made = [
                {**accepted(svc, spec, request.callback_url, bulk=True)[0].model_dump(), "profile": spec.profile}
                for spec in specs
            ]
        for clip, spec in zip(made, specs, strict=True):
            platform = {"platform": spec.platform} if spec.platform else {}
            clips.append({**clip, "quote": number, **_line(lines, number), **platform})
            what.append({"id": clip["id"], "quote": number, "profile": clip["profile"], **platform, **_described(spec)})
    batch_id = "batch-" + secrets.token_hex(12)
    with svc.connection.pipeline() as pipe:
        pipe.rpush(redis_keys.batch(batch_id), *[c["id"] for c in clips])
        pipe.expire(redis_keys.batch(batch_id), BATCH_TTL)
        pipe.set(redis_keys.batch_clips(batch_id), json.dumps(what), ex=BATCH_TTL)
        pipe.execute()
    return {
        "id": batch_id,
        "status_url": f"/batches/{batch_id}",
        "archive_url": f"/batches/{batch_id}/archive",
        "clips": clips,
        "rejected": rejected,
    }


def _platforms(value: object) -> tuple[str, ...]:
    """``["shorts", "x"]`` (or ``"shorts,x"``): the platforms every quote is rendered for, each once."""
    if isinstance(value, list) and all(isinstance(name, str) for name in value):
        value = ",".join(value)
    if not isinstance(value, str):
        raise BadInput(f"platforms: a list of platform names ({', '.join(PLATFORMS)}), got {str(value)[:80]!r}")
    try:
        return parse_platforms(value)
    except ValueError as exc:
        raise BadInput(f"platforms: {str(exc).removeprefix('platform: ')}") from None


def quotes_of_text(text: str) -> list[tuple[int, dict[str, str]]]:
    """The quotes of a quotes file's text, each with the line it starts on, read as ``quoteclip batch`` reads a CSV
    file (``quoteclip.quotes.csv_quotes``) but for the header, which is optional here (``start,end,caption``, or
    ``caption`` alone with a transcript; ``start,end,caption`` when the first line names no column). A caption
    holding commas is written in double quotes, or is simply the rest of its line. A quote left open that runs on
    into a line reading as a row of its own is refused naming its line."""
    quotes = csv_quotes(text, "quotes", header_required=False)
    if not quotes:
        raise BadInput("quotes: no quote given (one a line: start,end,caption)")
    if len(quotes) > MAX_BATCH:
        raise BadInput(f"quotes: {len(quotes)} quotes, over the {MAX_BATCH} a batch takes")
    return quotes


def transcript_words(text: str) -> list[Word]:
    """A transcript given as text: a JSON word list (``[{"text", "start", "end"}]`` or ``{"words": [...]}``), or
    WebVTT/SRT cues (word-timed or not), as ``--transcript`` reads a file."""
    text = text.removeprefix("\ufeff")
    if text.lstrip().startswith(("[", "{")):
        # A word is an object of three fields (a bracket, three commas): its values counted before it is parsed.
        values = text.count(",") + text.count("{") + text.count("[")
        if values > 5 * MAX_TRANSCRIPT_WORDS:
            _within(values // 4)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInput(f"transcript: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        except RecursionError:
            raise BadInput("transcript: JSON nested too deeply (a word list is a list of objects)") from None
        listed = data.get("words") if isinstance(data, dict) else data
        _within(len(listed) if isinstance(listed, list) else 0)
        return parse_json(data)
    _within(text.count("-->"))  # each cue holds a word at least: refused before reading cue by cue
    words = parse_cues(text)
    if not words:
        raise BadInput("transcript: no timed words or cues found (WebVTT, SRT or a JSON word list)")
    _within(len(words))
    return words


def _within(words: int) -> None:
    if words > MAX_TRANSCRIPT_WORDS:
        raise BadInput(
            f"transcript: {words} words or cues, over the {MAX_TRANSCRIPT_WORDS} words a batch's transcript may hold "
            "(send the part the quotes are in, or the quotes' start and end)"
        )


def _found(quote: object, spoken: list[Word], seconds: float = MAX_SEARCH_SECONDS) -> object:
    """A quote found in the transcript by its caption, as ``--transcript`` finds one: its words' times, and its
    start and end unless the quote gives them. Finding one is bounded (``quoteclip.transcript.align``): a quote whose
    words occur too often to be found in time is refused, asking for its start and end."""
    if not isinstance(quote, dict) or "_bad" in quote:
        return quote
    caption = str(quote.get("caption") or "")
    if not caption.strip():
        raise BadInput("caption: give the quote's text to find it in the transcript")
    found, timed = find_quote(caption, spoken, max_seconds=seconds)
    words = [{"text": w.text, "start": w.start, "end": w.end} for w in timed]
    return {"start": found.start, "end": found.end, **quote, "words": words}


def _line(lines: dict[int, int], number: int) -> dict[str, int]:
    return {"line": lines[number]} if number in lines else {}


def _quote(quote: object) -> dict[str, Any]:
    """One quote of a batch: start, end and caption, checked (a bad one raises BadInput naming the field)."""
    if not isinstance(quote, dict):
        raise BadInput(f"a quote is an object with start, end and caption, got {str(quote)[:80]!r}")
    if "_bad" in quote:
        raise BadInput(f"not a quote: {quote['_bad']}")
    words = {"words": quote["words"]} if "words" in quote else {}  # found in the transcript
    try:
        return {**Quote.model_validate({k: v for k, v in quote.items() if k != "words"}).model_dump(), **words}
    except ValidationError as exc:
        raise BadInput(describe_validation_error(exc)) from None


def _described(spec: ClipSpec) -> dict[str, Any]:
    return {"start": spec.start, "end": spec.end, "caption": spec.caption, "source": spec.source}


def _what(svc: ServicesDep, batch_id: str) -> dict[str, dict[str, Any]]:
    """What each clip of a batch is, by id (empty for a batch made before this was kept)."""
    raw = svc.connection.get(redis_keys.batch_clips(batch_id))
    return {c["id"]: c for c in json.loads(raw)} if raw else {}


def _members(svc: ServicesDep, batch_id: str) -> list[str]:
    if not batch_id.startswith("batch-") or len(batch_id) > 40:
        raise APIError(404, f"no such batch: {batch_id[:80]!r}")
    ids = [
        i.decode() if isinstance(i, bytes) else str(i) for i in svc.connection.lrange(redis_keys.batch(batch_id), 0, -1)
    ]
    if not ids:
        raise APIError(404, "no such batch (or it expired)")
    return ids


@router.get("/batches/{batch_id}", responses={404: {}})
def get_batch(batch_id: str, svc: ServicesDep) -> dict[str, Any]:
    """Every clip of the batch at once: counts by status, and each clip's status, stage, progress and link."""
    clips = []
    what = _what(svc, batch_id)
    for clip_id in _members(svc, batch_id):
        try:
            body = status_of(svc, clip_id)
        except APIError:
            body = {"status": "unknown", "stage": None, "progress": 0, "link": None, "error": "expired"}
        finished = body["status"] == "finished"
        poster = svc.storage.link(clip_id.removeprefix("clip-"), ".jpg") if finished else None
        clips.append(
            {
                "id": clip_id,
                "status": body["status"],
                "stage": body["stage"],
                "progress": body["progress"],
                "link": svc.link_for(clip_id, body["link"]),
                "error": body["error"],
                "poster": svc.link_for(clip_id, poster, "poster.jpg"),
                "download_url": sign_path(f"/clips/{clip_id}/download", svc.settings),
                **{k: v for k, v in what.get(clip_id, {}).items() if k in ("quote", "profile", "platform")},
            }
        )
    return {"id": batch_id, "counts": dict(Counter(c["status"] for c in clips)), "clips": clips}


@router.delete("/batches/{batch_id}", responses={404: {}})
def cancel_batch_clips(
    batch_id: str,
    svc: ServicesDep,
    force: Annotated[bool, Query(description="stop each render whoever else waits for it")] = False,
) -> dict[str, Any]:
    """Cancel a batch: its request of each of its clips withdrawn (``DELETE /clips/{id}`` for each). A queued clip
    never renders, a rendering one is stopped, one that another request joined renders on for it, a stored one is
    kept. ``canceled``: how many renders stopped; each clip's ``status``, ``canceled`` and ``waiting``."""
    _members(svc, batch_id)  # (404 for an unknown batch, as its status)
    try:
        done = cancel_batch(batch_id, svc.settings, svc.connection, svc.storage, force=force)
    except BadInput:
        raise APIError(404, "no such batch (or it expired)") from None
    clips = [{"id": c["job_id"], **{k: c[k] for k in ("status", "canceled", "waiting")}} for c in done["clips"]]
    return {"id": batch_id, "canceled": done["canceled"], "clips": clips}


class _Sink:
    """A write-only stream that hands what zipfile writes to the response, chunk by chunk."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.offset = 0

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        self.offset += len(data)
        return len(data)

    def tell(self) -> int:
        return self.offset

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        out, self.parts = b"".join(self.parts), []
        return out


@router.get("/batches/{batch_id}/archive", responses={404: {}, 409: {}})
def archive(batch_id: str, svc: ServicesDep) -> StreamingResponse:
    """A ZIP of the batch's finished clips (named as their downloads) and a manifest, streamed as it is read:
    no clip is held whole in memory. 409 while none has finished."""
    members = _members(svc, batch_id)
    finished = []
    for clip_id in members:
        key = clip_id.removeprefix("clip-")
        meta = svc.storage.stat(key)
        if meta is not None:
            finished.append((clip_id, key, meta.get("filename") or f"{key}.mp4"))
    if not finished:
        raise APIError(409, "no clip of this batch has finished yet")

    def stream() -> Iterator[bytes]:
        sink = _Sink()
        names: set[str] = set()
        with zipfile.ZipFile(sink, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:  # type: ignore[call-overload]
            for _, key, filename in finished:
                name = filename if filename not in names else f"{key}.mp4"
                names.add(name)
                with svc.storage.read(key) as src, zf.open(name, mode="w", force_zip64=True) as dst:
                    while chunk := src.read(CHUNK):
                        dst.write(chunk)
                        yield sink.take()
            what = _what(svc, batch_id)
            manifest = {
                "batch": batch_id,
                "clips": [
                    {"id": c, "file": n, **{k: v for k, v in what.get(c, {}).items() if k != "id"}}
                    for c, _, n in finished
                ],
                "missing": [c for c in members if c not in {f[0] for f in finished}],
            }
            zf.writestr("manifest.json", json.dumps(manifest, indent=1))
        yield sink.take()

    return StreamingResponse(
        stream(),
        media_type="application/zip",
        headers={"Content-Disposition": f'attachment; filename="{batch_id}.zip"'},
    )
