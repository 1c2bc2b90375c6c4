"""The site's copies of the records kept at the repository's root.

BENCHMARKS.md, RELIABILITY.md and CONTRIBUTING.md live at the root, where a reader on a code host finds them. Their
pages under ``docs/`` say so in a few lines a reader can follow; on the site, this hook shows the record itself in
their place, so the site and the root never differ and no page shows an include directive to anyone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# page under docs/ → the root file the site shows in its place
RECORDS = {"benchmarks.md": "BENCHMARKS.md", "reliability.md": "RELIABILITY.md", "contributing.md": "CONTRIBUTING.md"}


def on_page_read_source(page: Any, config: Any) -> str | None:
    record = RECORDS.get(page.file.src_uri)
    if record is None:
        return None
    return (Path(config.config_file_path).parent / record).read_text(encoding="utf-8")
