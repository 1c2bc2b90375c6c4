"""A request's quote found by its words in the page's own captions (``transcript: "source"`` with ``quote``).

The request names no start or end: the service reads the page's captions (``sources.captions.source_words``, through
the same egress proxy, address rules and response cap as a render's extraction) and finds the quote in them as
``quoteclip render --transcript source --quote`` does (``sources.captions.quote_found``): the clip runs from its
first word's start to its last word's end, its words timed for the word highlight.

Where it runs: in the API's finder threads (api/finders.py: a few threads of their own, a bounded queue, `503` past
it), never in the request threads that answer every other route, nor on the event loop. It cannot wait for a
worker: a clip's identity (its cache key, its link, whether it is stored already) is made of its start and end,
needed before it is queued, and a quote not found is the caller's 422 now rather than a failed job later. The page's
extraction and its captions are kept in the shared extraction store (Redis), so the worker rendering the clip reads
neither again.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from quoteclip.errors import BadInput
from quoteclip.settings import Settings
from quoteclip.spec import MAX_CAPTION_CHARS, MAX_SOURCE_CHARS, Word
from sources.captions import SOURCE, NoCaptions, quote_found, source_words
from sources.extraction import EntryStore, RedisEntries

from .deps import RateLimited, ServicesDep


def quote_fields(fields: dict[str, Any], settings: Settings, connection: Any | None) -> dict[str, Any]:
    """A request's fields with its ``transcript`` and ``quote`` resolved: with ``transcript: "source"``, the quote
    found in the page's captions gives ``start`` and ``end`` (unless the request gives them), ``words`` and the
    ``caption`` (unless given). Without them, the fields as they are (less the two, when empty).

    ``connection``: Redis when a worker renders the clip (the page's extraction and captions kept where the workers
    look); None when this process renders it (a preview: kept in this process's own store, which its render reads)."""
    fields = dict(fields)
    transcript, quote = fields.pop("transcript", None), fields.pop("quote", None)
    if transcript is None:
        if quote is not None:
            raise BadInput('quote: a quote is found by its words with transcript: "source" (the page\'s captions)')
        return fields
    if transcript != SOURCE:
        raise BadInput(
            f'transcript: "source" (the page\'s own captions) is the one a request may name, got {transcript!r}'
        )
    text = str(quote or "").strip()
    if not text:
        raise BadInput("quote: give the quote's words to find it in the page's captions (transcript: \"source\")")
    if len(text) > MAX_CAPTION_CHARS:
        raise BadInput(f"quote: at most {MAX_CAPTION_CHARS} characters, got {len(text)}")
    try:
        found, _score = quote_found(text, SOURCE, str(fields.get("source") or ""), settings, _store(connection))
    except NoCaptions as exc:
        raise BadInput(str(exc)) from None
    for name in ("start", "end"):
        if fields.get(name) is None:
            fields[name] = found[name]
    fields["words"] = found["words"]
    if not fields.get("caption"):
        fields["caption"] = text
    return fields


def page_words(source: str, settings: Settings, connection: Any | None) -> list[Word]:
    """The page's own captions as words (a batch's ``transcript: "source"``, the edit page's word list), a page
    without them a BadInput. ``connection`` as for ``quote_fields``."""
    try:
        return source_words(source, settings, entries=_store(connection))
    except NoCaptions as exc:
        raise BadInput(str(exc)) from None


def _store(connection: Any | None) -> EntryStore | None:
    return RedisEntries(connection) if connection is not None else None


router = APIRouter()
AROUND = 30.0  # seconds of words before a cut's start and after its end that the edit page lists


WIDEST_WORDS = 600.0  # seconds from a window's start to its end that /previews/words answers at most (and AROUND)


class SourceWordsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    source: str = Field(min_length=1, max_length=MAX_SOURCE_CHARS)
    start: float | None = Field(default=None, ge=0)
    end: float | None = Field(default=None, ge=0)


class SourceWords(BaseModel):
    words: list[dict[str, Any]]  # {text, start, end}, source seconds


@router.post("/previews/words", response_model=SourceWords, responses={422: {}, 429: {}, 503: {}})
async def words_of_source(request: SourceWordsRequest, _: RateLimited, svc: ServicesDep) -> SourceWords:
    """The page's own captions as timed words, for the edit page's word list and word nudges: the words from 30 s
    before ``start`` (0 when not given) to 30 s after ``end`` (``start`` when not given), a window of at most
    WIDEST_WORDS seconds. Read through the extraction store of this process, where its previews look (one
    extraction for the page, its captions and the editor's previews), in the API's finder threads; a page without
    captions, or a media file, is a 422 naming why."""
    start = request.start if request.start is not None else 0.0
    end = request.end if request.end is not None else start
    if end < start:
        raise BadInput(f"end must be after start, got start={start} end={end}")
    if end - start > WIDEST_WORDS:
        raise BadInput(
            f"end: the words of at most {WIDEST_WORDS:g} s are answered at once, got start={start} end={end}"
        )
    words = await svc.finders.run(page_words, request.source, svc.settings, None)  # kept where the previews look
    low, high = start - AROUND, end + AROUND
    return SourceWords(
        words=[{"text": w.text, "start": w.start, "end": w.end} for w in words if w.end >= low and w.start <= high]
    )


class FindRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str = Field(min_length=1, max_length=MAX_SOURCE_CHARS)
    quote: str = Field(min_length=1, max_length=MAX_CAPTION_CHARS)


class Found(BaseModel):
    start: float  # the quote's first word's start, source seconds
    end: float  # its last word's end
    score: float  # how well its words matched the captions' (1.0: every word, in order)
    words: list[dict[str, Any]]  # the quote's words as it reads, with the times of those they match


@router.post("/quotes/find", response_model=Found, responses={422: {}, 429: {}, 503: {}})
async def find_quote(request: FindRequest, _: RateLimited, svc: ServicesDep) -> Found:
    """A quote found by its words in the page's own captions, as ``transcript: "source"`` finds it for a clip: its
    start, end, words and score (counted as one clip against the caller's rate limit, before the page is read; found
    in the API's finder threads). The page's extraction and captions are kept where the workers look, so a clip of
    the quote asked next reads neither again."""

    def found() -> Found:
        try:
            fields, score = quote_found(request.quote, SOURCE, request.source, svc.settings, _store(svc.connection))
        except NoCaptions as exc:
            raise BadInput(str(exc)) from None
        return Found(start=fields["start"], end=fields["end"], score=score, words=fields["words"])

    return await svc.finders.run(found)
