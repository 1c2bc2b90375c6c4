"""A source's own captions as a transcript (``transcript: "source"``, ``--transcript source``): the words a page's
captions carry, with their times, used as a given transcript is (a quote found by its words, the word highlight).

YouTube's automatic captions are read in their ``json3`` form (each word's start; the end derived,
``quoteclip.transcript.parse_json3``), a human-made track first when the page has one; a generic page's ``<track>``
of WebVTT (word-timed or not) counts too. They are read through yt-dlp in the page's extraction (the same egress
proxy, address rules and response cap as the page), and kept beside it in the extraction store (Redis for workers,
files for the CLI) for ``QUOTECLIP_EXTRACTION_TTL``: a quote's render then reads neither the page nor its captions
again.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quoteclip.errors import BadInput, SourceUnavailable
from quoteclip.settings import Settings
from quoteclip.spec import Word
from quoteclip.transcript import find_quote, load_transcript, read_transcript

from . import allowed_hosts, is_direct_media, resolve_source

if TYPE_CHECKING:
    from .extraction import EntryStore

SOURCE = "source"  # the transcript named so is the source's own captions


class NoCaptions(SourceUnavailable):
    """The page carries no captions in the languages asked for."""


def transcript_words(transcript: str, source: str, settings: Settings, entries: EntryStore | None = None) -> list[Word]:
    """The words of ``transcript``: a file's (WebVTT, SRT, a JSON word list, json3), or with ``source`` the
    source's own captions."""
    if transcript == SOURCE:
        return source_words(source, settings, entries=entries)
    return load_transcript(transcript)


def quote_found(
    quote: str, transcript: str, source: str, settings: Settings, entries: EntryStore | None = None
) -> tuple[dict[str, Any], float]:
    """``quote`` found by its words in ``transcript`` (a file, or ``source``: the page's own captions): a clip's
    ``start`` (its first word's start), ``end`` (its last word's end) and ``words`` (the quote's words with the
    times of those they match, for the word highlight), and the match's score. How ``--transcript`` with ``--quote``
    and a request's ``transcript: "source"`` with ``quote`` both find a quote."""
    found, timed = find_quote(quote, transcript_words(transcript, source, settings, entries))
    words = [{"text": w.text, "start": w.start, "end": w.end} for w in timed]
    return {"start": found.start, "end": found.end, "words": words}, found.score


def captions_key(identity: str, langs: tuple[str, ...]) -> str:
    return "captions-" + hashlib.sha256(f"{identity}|{','.join(langs)}".encode()).hexdigest()[:32]


def source_words(
    source: str, settings: Settings, ffmpeg_bin: str = "ffmpeg", entries: EntryStore | None = None
) -> list[Word]:
    """The source page's own captions as words, from the extraction store when another job read them lately.
    ``entries``: the store to keep them (and the page's extraction) in; the job's (Redis in a worker, files for the
    command line) when not given. The API gives Redis, where the workers that render the clip look."""
    from .extraction import Extractions, entry_store
    from .safety import check_url
    from .ytdlp import extract_with_captions

    remote = source.startswith(("http://", "https://"))
    ref = resolve_source(source, allow_local=False) if remote else None
    if ref is None or is_direct_media(ref.input):
        raise BadInput(
            "transcript: source: only a page (YouTube, a site yt-dlp reads) carries captions of its own; "
            "give a transcript file instead"
        )
    langs = settings.source_caption_langs
    if entries is None:
        entries = entry_store(settings.cache_dir / "extractions")
    key = captions_key(ref.identity, langs)
    cached = entries.get(key)
    if cached is not None:
        try:
            return [Word(t, s, e) for t, s, e in json.loads(cached)["words"]]
        except (ValueError, KeyError, TypeError):
            entries.drop(key, only_if=cached)
    check_url(ref.input, allowed_hosts(settings), settings.allow_addresses)  # refused before any request
    with tempfile.TemporaryDirectory(prefix="quoteclip-captions-") as folder:
        found, track = extract_with_captions(
            ref.input,
            Path(folder),
            ffmpeg_bin,
            settings.allow_addresses,
            cookies_file=settings.cookies_file,
            extractor_args=settings.extractor_args,
            proxy=settings.proxy,
            captions=langs,
        )
    # the extraction made here is the render's too (the same formats): kept as the render will look for it
    Extractions(entries, ref.identity, "final", lambda: found, cap=settings.extraction_ttl).get()
    if track is None:
        raise NoCaptions(
            f"transcript: source: the page has no captions in {', '.join(langs)} (QUOTECLIP_SOURCE_CAPTION_LANGS); "
            "give a transcript file instead"
        )
    words = read_transcript(track.text, f"the source's {track.lang} captions")
    kept = {"lang": track.lang, "human": track.human, "words": [[w.text, w.start, w.end] for w in words]}
    if settings.extraction_ttl > 0:
        entries.put(key, json.dumps(kept, separators=(",", ":")), settings.extraction_ttl)
    return words
