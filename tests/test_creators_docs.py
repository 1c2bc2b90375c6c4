"""docs/creators.md's transcript examples are files quoteclip reads as the page says."""

from __future__ import annotations

import re
from pathlib import Path

from quoteclip.transcript import load_transcript

PAGE = Path(__file__).resolve().parents[1] / "docs" / "creators.md"


def examples() -> dict[str, str]:
    """The page's fenced examples under "Word-timed transcripts", by their language (vtt, srt, json)."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("### Word-timed transcripts", 1)[1].split("\n## ", 1)[0]
    return {lang: body for lang, body in re.findall(r"```(\w+)\n(.*?)```", section, re.S)}


def test_each_transcript_example_reads_as_the_page_says(tmp_path) -> None:
    shown = examples()
    assert set(shown) == {"vtt", "srt", "json"}
    files = {}
    for lang, body in shown.items():
        files[lang] = tmp_path / f"example.{lang}"
        files[lang].write_text(body, encoding="utf-8")
    vtt = load_transcript(files["vtt"])  # a time for every word; the repeated line left out
    assert [w.text for w in vtt] == [
        "this",
        "weird",
        "scheduling",
        "which",
        "reduce",
        "the",
        "bubble",
        "the",
        "wastage",
    ]
    assert [w.start for w in vtt[:3]] == [1133.96, 1134.2, 1134.52]
    assert vtt[-1].end == 1141.0  # (the last word ends with its cue)
    srt = load_transcript(files["srt"])  # times by cue, shared among the cue's words
    assert (srt[0].text, srt[0].start, srt[2].end, srt[3].start, srt[-1].end) == (
        "This",
        1134.0,
        1136.4,
        1136.4,
        1141.0,
    )
    words = load_transcript(files["json"])
    assert [(w.text, w.start, w.end) for w in words] == [
        ("This", 1134.0, 1134.2),
        ("weird", 1134.2, 1134.52),
        ("scheduling,", 1134.52, 1135.1),
    ]
