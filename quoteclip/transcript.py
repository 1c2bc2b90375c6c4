"""Transcripts (WebVTT, SRT, JSON word lists) and finding a quote in one by its words.

YouTube's automatic captions (what yt-dlp fetches as VTT) carry a time for every word
(``word<00:00:01.520><c> next</c>``) and repeat each line in the next cue; both are understood. Cues without
word times have their span shared among their words by length. Their ``json3`` form (``parse_json3``) gives each
word's start (``segs[].tOffsetMs`` within events of ``tStartMs``/``dDurationMs``) and no end: a word ends where the
next one starts, or with its event.
"""

from __future__ import annotations

import html
import json
import math
import re
import time
import unicodedata
from collections import Counter
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path

from .errors import BadInput
from .spec import Word

_CUE_TIME = re.compile(r"^\s*((?:\d+:)?\d{1,2}:\d{2}[.,]\d{1,3})\s*-->\s*((?:\d+:)?\d{1,2}:\d{2}[.,]\d{1,3})")
_INLINE = re.compile(r"<((?:\d+:)?\d{1,2}:\d{2}\.\d{3})>")
_TAG = re.compile(r"<[^>]*>")
MAX_TRANSCRIPT_BYTES = 20 * 1024 * 1024
# Words a transcript may hold, whoever sends it (a file, a batch's text, a page's own captions): about seven hours of
# speech at 150 words a minute. A page's caption track is read to at most MAX_TRACK_BYTES.
MAX_TRANSCRIPT_WORDS = 60_000
MAX_TRACK_BYTES = 4 * 1024 * 1024
DEFAULT_THRESHOLD = 0.8


@dataclass(frozen=True)
class Alignment:
    start: float
    end: float
    score: float
    words: list[Word]


def _seconds(stamp: str) -> float:
    parts = stamp.replace(",", ".").split(":")
    total = 0.0
    for part in parts:
        total = total * 60 + float(part)
    return round(total, 3)


def spread(text: str, start: float, end: float) -> list[Word]:
    """Times for words that have none: the span from ``start`` to ``end`` shared by character count (a syllable
    proxy; a word weighs its letters plus one for the gap after it)."""
    tokens = text.split()
    weights = [len(t) + 1 for t in tokens]
    total = sum(weights) or 1
    out, t = [], start
    for token, w in zip(tokens, weights, strict=True):
        span = (end - start) * w / total
        out.append(Word(token, round(t, 3), round(t + span, 3)))
        t += span
    return out


def parse_cues(text: str) -> list[Word]:
    """Words with times from WebVTT or SRT text. A cue that ends before it starts is refused (BadInput) naming the
    cue: its number, the line of its times, and those times."""
    cues: list[tuple[str, float, float, list[str]]] = []  # (which cue, start, end, its text lines)
    block: list[tuple[int, str]] = []  # a block's lines (cues are separated by blank lines), with their numbers
    for number, line in enumerate([*text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), ""], 1):
        if line.strip():
            block.append((number, line))
            continue
        for k, (at, head) in enumerate(block):
            match = _CUE_TIME.match(head)
            if match:
                cue = f"cue {len(cues) + 1} (line {at})"
                start, end = _seconds(match.group(1)), _seconds(match.group(2))
                if end < start:
                    raise BadInput(f"transcript: {cue} ends before it starts: {match.group(1)} --> {match.group(2)}")
                cues.append((cue, start, end, [text for _, text in block[k + 1 :]]))
                break
        block = []
    word_timed = any(_INLINE.search(line) for _, _, _, lines in cues for line in lines)
    words: list[Word] = []
    for cue, start, end, lines in cues:
        try:
            for line in lines:
                if word_timed and not _INLINE.search(line):
                    continue  # a rolling repeat of the previous cue's line
                if word_timed:
                    words += _inline_words(line, start, end)
                else:
                    clean = html.unescape(_TAG.sub("", line)).strip()
                    if clean:
                        words += spread(clean, start, end)
        except ValueError as exc:
            raise BadInput(f"transcript: {cue}: {_reason(exc)}") from None
    if not words:
        raise BadInput("transcript: no timed text found (expected WebVTT, SRT or a JSON word list)")
    return words


def _reason(exc: ValueError) -> str:
    return str(exc).splitlines()[0]


def _inline_words(line: str, start: float, end: float) -> list[Word]:
    pieces = _INLINE.split(line)  # text, time, text, time, text …
    times = [start] + [_seconds(p) for p in pieces[1::2]]
    texts = [html.unescape(_TAG.sub("", p)).strip() for p in pieces[0::2]]
    out = []
    for n, text in enumerate(texts):
        if not text:
            continue
        t0 = times[n]
        t1 = times[n + 1] if n + 1 < len(times) else end
        out += spread(text, t0, max(t0, t1))
    return out


def parse_json(data: object) -> list[Word]:
    items = data.get("words") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise BadInput('transcript: a JSON transcript is a list of {text, start, end} (or {"words": [...]})')
    words = []
    for n, item in enumerate(items):
        try:
            text = str(item.get("text", item.get("word", ""))).strip()
            start, end = float(item["start"]), float(item["end"])
        except (AttributeError, KeyError, TypeError, ValueError):
            raise BadInput(f"transcript: word {n} needs text, start and end, got {str(item)[:80]!r}") from None
        if not text:
            continue
        if not (math.isfinite(start) and math.isfinite(end)) or start < 0:
            raise BadInput(f"transcript: word {n} ({text[:40]!r}) needs times of 0 or more, got {start} to {end}")
        if end < start:
            raise BadInput(f"transcript: word {n} ({text[:40]!r}) ends at {end}, before its start {start}")
        words.append(Word(text, start, end))
    return words


def parse_json3(data: object) -> list[Word]:
    """Words from YouTube's ``json3`` captions: each segment's start is its event's ``tStartMs`` plus its
    ``tOffsetMs``; its end is the next word's start, or its event's end (``tStartMs + dDurationMs``) when that comes
    first. An event repeating words already read (the rolling display's events overlap) adds nothing; a segment
    holding several words without times of their own (a human-made track's line) has its span shared among them."""
    events = data.get("events") if isinstance(data, dict) else None
    if not isinstance(events, list):
        raise BadInput('transcript: json3 captions are {"events": [...]}')
    timed: list[tuple[float, str, float]] = []  # (start, text, the event's end), seconds
    for n, event in enumerate(events):
        if not isinstance(event, dict) or not isinstance(event.get("segs"), list):
            continue  # a window or style event, no text
        try:
            begin = float(event.get("tStartMs") or 0) / 1000
            until = begin + float(event.get("dDurationMs") or 0) / 1000
            segs = [(float(seg.get("tOffsetMs") or 0) / 1000, str(seg.get("utf8") or "")) for seg in event["segs"]]
            if not all(math.isfinite(t) for t in (begin, until, *(o for o, _ in segs))):
                raise ValueError("not finite")
        except (AttributeError, TypeError, ValueError):
            raise BadInput(f"transcript: json3 event {n} has no readable times: {str(event)[:80]!r}") from None
        try:
            for k, (offset, text) in enumerate(segs):
                clean = " ".join(html.unescape(text).split())
                if not clean:
                    continue  # a line break ("\n") or a space
                start = begin + offset
                if len(clean.split()) > 1:  # several words with one time: shared up to the next segment (or the end)
                    later = [o for o, t in segs[k + 1 :] if t.strip()]
                    spoken = spread(clean, start, max(start, begin + later[0] if later else until))
                    timed += [(w.start, w.text, until) for w in spoken]
                else:
                    timed.append((start, clean, until))
        except ValueError as exc:
            raise BadInput(f"transcript: json3 event {n}: {_reason(exc)}") from None
    timed.sort(key=lambda item: item[0])
    words: list[Word] = []
    seen: set[tuple[float, str]] = set()
    for start, text, _until in timed:
        if (round(start, 3), text) in seen:
            continue  # a rolling repeat
        seen.add((round(start, 3), text))
        words.append(Word(text, round(start, 3), round(start, 3)))
    ends = {(round(s, 3), t): u for s, t, u in timed}
    out = []
    for n, word in enumerate(words):
        until = ends[(word.start, word.text)]
        following = words[n + 1].start if n + 1 < len(words) else until
        end = min(following, until) if following > word.start else until
        out.append(Word(word.text, word.start, round(max(end, word.start), 3)))
    if not out:
        raise BadInput("transcript: the json3 captions hold no words")
    return out


def read_transcript(text: str, name: str, max_words: int = MAX_TRANSCRIPT_WORDS) -> list[Word]:
    """Words from a transcript's text: JSON (a word list, or YouTube's json3 captions), else WebVTT or SRT. More than
    ``max_words`` words is refused (BadInput), counted before the text is parsed where its form allows (a cue, a
    json3 segment, a JSON object each hold one word at least) and after; so is JSON nested too deeply, and times
    that are not finite numbers."""
    if text.lstrip().startswith(("[", "{")):
        # each of a word list's words is an object; each of json3's words has a segment's "utf8" text
        within(text.count('"utf8"') if '"events"' in text else text.count("{") - 1, name, max_words)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInput(f"transcript: {name} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
        except RecursionError:
            raise BadInput(f"transcript: {name} is JSON nested too deeply (a transcript is a list of words)") from None
        words = parse_json3(data) if isinstance(data, dict) and "events" in data else parse_json(data)
    else:
        within(text.count("-->"), name, max_words)
        words = parse_cues(text)
    within(len(words), name, max_words)
    return words


def within(words: int, name: str, max_words: int = MAX_TRANSCRIPT_WORDS) -> None:
    """Refuse a transcript of more than ``max_words`` words (or cues, or JSON objects, counted before parsing)."""
    if words > max_words:
        raise BadInput(
            f"transcript: {name} holds {words} words or cues, over the {max_words} a transcript may hold "
            "(send the part the quotes are in, or the quotes' start and end)"
        )


def load_transcript(path: str | Path) -> list[Word]:
    file = Path(path)
    try:
        if file.stat().st_size > MAX_TRANSCRIPT_BYTES:
            raise BadInput(f"transcript: {str(path)!r} is over {MAX_TRANSCRIPT_BYTES // 1024**2} MB")
        raw = file.read_bytes()
    except FileNotFoundError:
        raise BadInput(f"transcript: file not found: {str(path)!r}") from None
    except OSError as exc:
        raise BadInput(f"transcript: cannot read {str(path)!r} ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise BadInput(f"transcript: {str(path)!r} is not UTF-8 text") from None
    return read_transcript(text, repr(str(path)))


FILLERS = {"um", "uh", "er", "erm", "ah", "hmm", "mm", "uhm"}
_CONTRACTIONS = {"n't": "not", "'re": "are", "'ve": "have", "'ll": "will", "'d": "would", "'m": "am"}


def _expand(word: str) -> list[str]:
    """English contractions as the words they stand for ("I'm" → I am), so either form matches the other."""
    low = word.casefold().replace("’", "'")
    for tail, full in _CONTRACTIONS.items():
        if low.endswith(tail) and len(low) > len(tail):
            head = low[: -len(tail)]
            return [("will" if head == "wo" else "can" if head == "ca" else head), full]
    return [word]


def normalize(token: str) -> str:
    token = unicodedata.normalize("NFKC", token).casefold()
    return "".join(ch for ch in token if unicodedata.category(ch)[0] in "LN")


def _close(a: str, b: str) -> bool:
    """Small transcription differences: "schedule"/"scheduling", "gonna"/"going" are not; "colour"/"color" are."""
    if a == b:
        return True
    shorter, longer = sorted((len(a), len(b)))
    if shorter < 4:
        return False
    if (a.startswith(b[:-1]) or b.startswith(a[:-1])) and longer - shorter <= 3:
        return True
    # a ratio of 0.8 needs 2·shorter/(shorter+longer) ≥ 0.8 at best; then the bounds difflib computes cheaply first
    if 2 * shorter < 0.8 * (shorter + longer):
        return False
    matcher = SequenceMatcher(None, a, b)
    return matcher.quick_ratio() >= 0.8 and matcher.ratio() >= 0.8


class Budget:
    """The CPU time (this thread's) one search may spend: ``spend`` raises BadInput, naming the quote, once it is
    past."""

    def __init__(self, seconds: float, quote: str) -> None:
        self.until = time.thread_time() + seconds
        self.seconds, self.quote = seconds, quote

    def spend(self) -> None:
        if time.thread_time() > self.until:
            raise BadInput(
                f"quote: looking for it in the transcript took over {self.seconds:g} s of CPU; give its start and "
                f"end, or a transcript of the part it is in: {self.quote[:80]!r}"
            )


def _fuzzy(window: list[str], wanted: list[str]) -> list[str]:
    """The window with each token replaced by a quote token it is close to, so near misses still match."""
    return _Near(window, wanted).window(0, len(window))


class _Near:
    """A transcript's tokens, each as the quote token it is close to (itself when it is one of the quote's, or close
    to none), found the first time a window reads it and remembered: a search looks only around the places its
    anchors occur, so a transcript of 20,000 distinct words costs only the few it reads (its CPU counted in
    ``budget``)."""

    def __init__(self, tokens: list[str], wanted: list[str], budget: Budget | None = None) -> None:
        self.tokens, self.budget = tokens, budget
        self.vocabulary = set(wanted)
        self.unique = list(dict.fromkeys(wanted))  # the first close one wins: a repeated quote word changes nothing
        self.chosen: dict[str, str] = {}

    def window(self, lo: int, hi: int) -> list[str]:
        return [self.of(t) for t in self.tokens[lo:hi]]

    def of(self, t: str) -> str:
        if t in self.vocabulary:
            return t
        if t not in self.chosen:
            if self.budget is not None and len(self.chosen) % 64 == 0:
                self.budget.spend()
            self.chosen[t] = next((q for q in self.unique if _close(t, q)), t)
        return self.chosen[t]


# Finding a quote compares a window of about its words with it at each place its first or last three words occur.
# A place whose window cannot beat the best match so far (too few of the quote's words in it) is skipped, and the
# search stops at a perfect match; past MAX_COMPARISONS windows compared in full, or MAX_SEARCH_SECONDS of CPU (the
# near misses looked for included), it stops and names the quote.
MAX_COMPARISONS = 4000
MAX_SEARCH_SECONDS = 2.0
CEILING_PAIRS = 200_000  # distinct transcript words × distinct quote words looked up for the search's ceiling


def align(
    quote: str,
    words: list[Word],
    threshold: float = DEFAULT_THRESHOLD,
    max_comparisons: int = MAX_COMPARISONS,
    max_seconds: float = MAX_SEARCH_SECONDS,
) -> Alignment:
    """Find ``quote`` in ``words``: tolerant of case, punctuation and small transcription differences.

    Bounded: a place whose window holds too few of the quote's words to beat the best match found is not compared,
    and a perfect match ends the search, so a quote of common words ("the the the …") in a long transcript takes a
    fraction of a second; a quote needing over ``max_comparisons`` full comparisons, or over ``max_seconds`` of this
    thread's CPU time in all, is refused (BadInput), asking for its start and end."""
    budget = Budget(max_seconds, quote)
    wanted = quote_tokens(quote)
    if not wanted:
        raise BadInput("quote: the quote's text has no words to look for")
    tokens, owner = _parts([w.text for w in words], drop_fillers=True)  # each token points back at its word
    near = _Near(tokens, wanted, budget)  # each token as the quote token it is close to, looked up when first read
    n = len(wanted)
    want = Counter(wanted)
    anchors = set(wanted[: min(3, n)]) | set(wanted[-min(3, n) :])
    width = n + max(2, n // 5)
    best = (0.0, 0, 0)
    compared = 0
    # no window scores above the share of the quote's words the whole transcript holds: reached, the search ends.
    # Known when the transcript's distinct words are few enough to look each up (else only a perfect match ends it)
    ceiling = 1.0
    distinct = set(tokens)
    if len(distinct) * len(set(wanted)) <= CEILING_PAIRS:
        total = Counter(near.of(t) for t in tokens)
        ceiling = min(1.0, sum(min(c, total[t]) for t, c in want.items()) / n)
    for i, token in enumerate(tokens):
        if token not in anchors:
            continue
        for offset in range(min(3, n)):
            lo = max(0, i - offset if token == wanted[offset] else i)
            window = near.window(lo, lo + width)
            # at most the quote's words the window holds can match: the score is at most that over n
            have = Counter(window)
            if sum(min(c, have[t]) for t, c in want.items()) / n <= best[0]:
                continue
            compared += 1
            if compared % 64 == 0:
                budget.spend()
            if compared > max_comparisons:
                raise BadInput(
                    f"quote: its words occur too often in the transcript to find a quote of {n} words in time "
                    f"({max_comparisons} places compared); give its start and end: {quote[:80]!r}"
                )
            blocks = [b for b in SequenceMatcher(None, wanted, window, autojunk=False).get_matching_blocks() if b.size]
            if not blocks:
                continue
            first, last = blocks[0], blocks[-1]
            matched = sum(b.size for b in blocks)
            span = last.b + last.size - first.b
            score = matched / max(n, span)  # words found, less words in between that the quote lacks
            if score > best[0]:
                best = (score, lo + first.b, lo + last.b + last.size - 1)
        if best[0] >= ceiling:
            break  # nothing scores above it (a perfect match, or all of the quote the transcript holds)
    score, a, b = best
    score = min(1.0, round(score, 3))
    if tokens:
        a, b = owner[a], owner[b]
    if score < threshold:
        raise BadInput(
            f"quote: not found in the transcript (best match scores {score:.2f}, below the {threshold:.2f} "
            f"threshold): {quote[:80]!r}"
        )
    found = words[a : b + 1]
    return Alignment(found[0].start, found[-1].end, score, found)


def find_quote(quote: str, words: list[Word], max_seconds: float = MAX_SEARCH_SECONDS) -> tuple[Alignment, list[Word]]:
    """``quote`` found in a transcript's ``words`` (``align``), and its own words with the times of those they match
    (``retime``): a clip's start and end, and its word highlight. The one way a quote is found, by the command line's
    ``--transcript``, a batch's transcript and a request's ``transcript: "source"``."""
    if not quote.strip():
        raise BadInput("quote: give the quote's text to find it in the transcript")
    found = align(quote, words, max_seconds=max_seconds)
    return found, retime(quote, found.words)


def quote_tokens(quote: str) -> list[str]:
    """The words ``align`` looks for in a quote: normalized (case, punctuation), contractions expanded."""
    return _parts(quote.split(), drop_fillers=False)[0]


def _parts(texts: list[str], drop_fillers: bool) -> tuple[list[str], list[int]]:
    """Normalized tokens of ``texts`` (contractions expanded), each with the index of the text it came from."""
    tokens, owner = [], []
    for n, text in enumerate(texts):
        for part in _expand(text):
            token = normalize(part)
            if token and not (drop_fillers and token in FILLERS):
                tokens.append(token)
                owner.append(n)
    return tokens, owner


def retime(text: str, spoken: list[Word]) -> list[Word]:
    """The words of ``text`` (the quote as it should read) with times taken from the transcript words they
    match; words the transcript lacks get times between their neighbours', and those before the first word found or
    after the last share that word's time (so a clip's caption keeps them: "🔥 …", "… (applause)")."""
    tokens = text.split()
    if not tokens or not spoken:
        return []
    wanted, want_owner = _parts(tokens, drop_fillers=False)
    heard, heard_owner = _parts([w.text for w in spoken], drop_fillers=True)
    heard = _fuzzy(heard, wanted)
    times: list[tuple[float, float] | None] = [None] * len(tokens)
    for block in SequenceMatcher(None, wanted, heard, autojunk=False).get_matching_blocks():
        for k in range(block.size):
            n, w = want_owner[block.a + k], spoken[heard_owner[block.b + k]]
            old = times[n]
            times[n] = (w.start, w.end) if old is None else (min(old[0], w.start), max(old[1], w.end))
    start, end = spoken[0].start, spoken[-1].end
    matched = [t for t in times if t is not None]
    first, last = (matched[0], matched[-1]) if matched else ((start, end), (start, end))
    out: list[Word] = []
    for n, token in enumerate(tokens):
        t = times[n]
        if t is None:
            nxt = next((x for x in times[n + 1 :] if x is not None), None)
            if not out:  # before the first word found: it shares that word's time
                t = first
            elif nxt is None:  # after the last word found: it shares that word's time
                t = last
            else:
                t = (out[-1].end, nxt[0])
        out.append(Word(token, t[0], max(t[0], t[1])))
    return out
