"""Quotes written as CSV: how ``quoteclip batch`` reads a quotes file and ``POST /batches`` reads quotes sent as
text (the batch page's box), one reader for both.

A row is ``start,end,caption`` (or the columns its header names: ``caption`` alone with a transcript). The caption
is the last column: a caption holding commas is written in double quotes, or is simply the rest of its line (its
unquoted commas belong to it). A quote left open that runs on into a line reading as a row of its own is refused,
naming its line; a field past the CSV reader's limit is refused naming the line it starts on.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from typing import Any

from .errors import BadInput

FIELDS = {"start", "end", "caption"}
DEFAULT_COLUMNS = ["start", "end", "caption"]
TIME = re.compile(r"-?\d+(?::\d+){0,2}(?:\.\d*)?")


def csv_quotes(text: str, where: str, header_required: bool = True) -> list[tuple[int, dict[str, str]]]:
    """The quotes of CSV ``text``, each with the line it starts on (a header is line 1) and its fields (blank
    ones left out; ``_bad`` saying why a row is not a quote). ``where`` begins every refusal (``quotes file 'q.csv'``,
    ``quotes``). With ``header_required`` the first row is the header (naming start, end and caption, or caption);
    without, the first row is a header only when it names caption and nothing but the columns, else every row is
    ``start,end,caption``. Blank lines are skipped; any line end (LF, CRLF, a lone CR) is one line."""
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    reader = csv.reader(io.StringIO(text))
    rows = _rows(reader, where)
    columns, end = DEFAULT_COLUMNS, 0
    if header_required:
        columns = [h.strip().lower() for h in next(rows, [])]
        if not columns or not FIELDS & set(columns):
            raise BadInput(f"{where}: needs a CSV header naming start, end and caption (or caption), got {columns}")
        unknown = sorted(set(columns) - FIELDS)
        if unknown:
            raise BadInput(f"{where}: unknown columns {unknown} (allowed: start, end, caption)")
        end = reader.line_num
    quotes: list[tuple[int, dict[str, str]]] = []
    for cells in rows:
        line, end = end + 1, reader.line_num  # a row may span lines: it starts just after the last one ended
        names = [cell.strip().lower() for cell in cells]
        if not header_required and not quotes and columns is DEFAULT_COLUMNS and "caption" in names:
            if set(names) <= FIELDS:
                columns = names  # the header
                continue
        if not any(cell.strip() for cell in cells):
            continue
        for name, cell in zip(columns, cells, strict=False):
            refuse_a_row_inside(cell, name, line, columns, where)
        if len(cells) > len(columns) and columns[-1] == "caption":  # the caption is the rest of the line
            cells = [*cells[: len(columns) - 1], ",".join(cells[len(columns) - 1 :])]
        fields = {name: cell.strip() for name, cell in zip(columns, cells, strict=False) if cell.strip()}
        if len(cells) > len(columns):
            fields["_bad"] = f"{len(cells)} cells, the header names {len(columns)} columns"
        quotes.append((line, fields))
    return quotes


def _rows(reader: Any, where: str) -> Iterator[list[str]]:
    """The rows of a CSV reader; a field past the reader's limit is refused naming the line it starts on."""
    while True:
        start = reader.line_num + 1
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            if "field larger than field limit" not in str(exc):
                raise BadInput(f"{where}: line {start}: not readable as CSV ({exc})") from None
            raise BadInput(
                f"{where}: line {start}: a field of over {csv.field_size_limit()} characters (a caption is far "
                "shorter: is a quote left open?)"
            ) from None
        yield cells


def refuse_a_row_inside(cell: str, column: str, line: int, header: list[str], where: str) -> None:
    """A cell with a line break followed by a line that reads as a row (a time where the header has its first
    time column, and more cells after it) is a quote left open, which swallowed the rows after it: BadInput. A
    quoted cell with a line break followed by anything else is a legitimate multi-line caption."""
    at = next((i for i, name in enumerate(header) if name in ("start", "end")), None)
    if at is None or "\n" not in cell:  # a caption-only file has no row shape to tell a row from text
        return
    for offset, text in enumerate(cell.split("\n")[1:], 1):
        row = next(csv.reader([text]), [])
        if len(row) > max(at, 1) and TIME.fullmatch(row[at].strip()):
            raise BadInput(
                f"{where}: line {line}: the quote opened in the {column} is not closed, so it runs on into line "
                f"{line + offset} ({text.strip()[:40]!r}), which reads as a row of its own; close it "
                '(a quote inside a caption is written "")'
            )
