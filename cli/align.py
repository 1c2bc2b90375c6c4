"""``quoteclip align``: find a quote in a transcript by its words."""

from typing import Annotated

import typer

from .app import app
from .common import JsonOpt, emit, run_guarded


@app.command("align")
def align(
    transcript: Annotated[
        str,
        typer.Argument(
            help="A WebVTT, SRT or JSON word-list (or json3) transcript; or a page's URL, or `source` with --source: "
            "the page's own captions."
        ),
    ],
    quote: Annotated[str, typer.Option("--quote", help="The quote's words.")],
    threshold: Annotated[float, typer.Option("--threshold", help="Lowest alignment score accepted.")] = 0.8,
    source: Annotated[str | None, typer.Option("--source", help="The page whose own captions `source` names.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Find a quote in a transcript by its words: start, end, score and the words with their times."""

    def go() -> None:
        from quoteclip.errors import BadInput
        from quoteclip.settings import Settings
        from quoteclip.transcript import align, load_transcript

        if transcript.startswith(("http://", "https://")) or transcript == "source":
            from sources.captions import source_words

            page = transcript if transcript != "source" else source
            if not page:
                raise BadInput("transcript: source: name the page with --source URL")
            words = source_words(page, Settings.from_env())
        else:
            words = load_transcript(transcript)
        found = align(quote, words, threshold)
        body = {
            "start": found.start,
            "end": found.end,
            "score": found.score,
            "words": [{"text": w.text, "start": w.start, "end": w.end} for w in found.words],
        }
        emit(body, as_json, f"{found.start:.3f} {found.end:.3f} score {found.score:.2f}")

    run_guarded(go, as_json)
