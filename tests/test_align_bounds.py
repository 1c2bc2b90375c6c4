"""Finding a quote is bounded: a quote of common words in a long transcript answers within a second."""

from __future__ import annotations

import random
import time

import pytest

from quoteclip.errors import BadInput
from quoteclip.spec import Word
from quoteclip.transcript import align, find_quote


def episode(count: int, seed: int = 7) -> list[Word]:
    """An episode's worth of words: "the" about one word in twelve, as in speech, and a few hundred others."""
    rng = random.Random(seed)
    vocab = ["the"] * 6 + "a of and to in is it that we you for was on are with as be this have at".split()
    vocab += [f"word{k}" for k in range(400)]
    return [Word(rng.choice(vocab), round(i * 0.3, 3), round(i * 0.3 + 0.25, 3)) for i in range(count)]


@pytest.fixture(scope="module")
def long_episode() -> list[Word]:
    return episode(59_000)


def test_thirty_the_in_a_long_transcript_answers_at_once(long_episode: list[Word]) -> None:
    began = time.perf_counter()
    with pytest.raises(BadInput, match=r"not found in the transcript \(best match scores 0\.\d+"):
        align(" ".join(["the"] * 30), long_episode)
    assert time.perf_counter() - began < 2.0


@pytest.mark.parametrize("quote", [" ".join(["the"] * 30), " ".join(["the"] * 30) + " end"])
def test_thirty_the_in_a_transcript_of_nothing_else_answers_at_once(quote: str) -> None:
    """The case that took 107 s: every word a place to compare the quote at, each comparison quadratic."""
    words = [Word("the", i * 0.3, i * 0.3 + 0.25) for i in range(59_000)]
    began = time.perf_counter()
    found = align(quote, words)
    assert time.perf_counter() - began < 2.0
    assert (found.start, found.end) == (0.0, words[29].end)  # the first thirty: nothing scores better


def test_a_quote_in_a_long_transcript_is_found_quickly(long_episode: list[Word]) -> None:
    quote = " ".join(w.text for w in long_episode[30_000:30_025])
    began = time.perf_counter()
    found, timed = find_quote(quote, long_episode)
    assert time.perf_counter() - began < 2.0
    assert (found.start, found.end, found.score) == (long_episode[30_000].start, long_episode[30_024].end, 1.0)
    assert [w.text for w in timed] == quote.split()


def test_a_quote_needing_too_many_comparisons_is_refused() -> None:
    # every window holds all the quote's words, never in its order: each place must be compared in full
    words = [Word("a" if i % 2 else "b", i * 0.3, i * 0.3 + 0.2) for i in range(2000)]
    with pytest.raises(BadInput, match="occur too often in the transcript .* give its start and end"):
        align("a a a a b b b b", words, max_comparisons=50)
