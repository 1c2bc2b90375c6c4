"""The documentation: the site builds strictly, and the README stays a short front door.

`mkdocs.yml` turns broken links, broken anchors, pages missing from the nav and snippets of files that do not
exist into warnings, and `strict` makes any warning fail the build: one build checks them all.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 150


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml")]
        + ["--site-dir", str(tmp_path / "site")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}{done.stderr}"
    assert (tmp_path / "site" / "index.html").is_file()


def test_the_readme_is_a_short_front_door() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, over {README_MAX_LINES}"


def test_every_test_the_records_name_exists() -> None:
    """RELIABILITY.md, BENCHMARKS.md and the docs pages name the tests behind what they promise; a renamed or
    removed test must not leave a promise pointing at nothing."""
    defined = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        defined |= set(re.findall(r"^(?:async )?def (test_\w+)", path.read_text(encoding="utf-8"), re.MULTILINE))
    for record in [*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md")]:
        named = set(re.findall(r"`(test_\w+)`", record.read_text(encoding="utf-8")))
        assert named - defined == set(), f"{record.name} names tests that do not exist: {sorted(named - defined)}"
