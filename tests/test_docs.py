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


def test_the_readme_sets_up_in_a_virtual_environment_and_names_the_pages_captions() -> None:
    """What new users met: the README's first commands make a virtual environment before installing, and its
    creators' start, as docs/creators.md, names ``--transcript source`` (the page's own captions) in a command."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    venv, install = readme.find("python3 -m venv"), readme.find("pip install -e .")
    assert 0 <= venv < install, "README.md: a virtual environment is made before the first pip install"
    assert "--transcript source" in readme, "README.md: the creators' start names --transcript source"
    creators = (ROOT / "docs" / "creators.md").read_text(encoding="utf-8")
    commands = [line for line in creators.splitlines() if line.startswith("quoteclip batch")]
    assert any("--transcript source" in line for line in commands), "docs/creators.md: a batch with source captions"


def test_every_test_the_records_name_exists() -> None:
    """RELIABILITY.md, BENCHMARKS.md and the docs pages name the tests behind what they promise; a renamed or
    removed test must not leave a promise pointing at nothing."""
    defined = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        defined |= set(re.findall(r"^(?:async )?def (test_\w+)", path.read_text(encoding="utf-8"), re.MULTILINE))
    for record in [*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md")]:
        named = set(re.findall(r"`(test_\w+)`", record.read_text(encoding="utf-8")))
        assert named - defined == set(), f"{record.name} names tests that do not exist: {sorted(named - defined)}"


def _paragraph(page: str, phrase: str) -> str:
    """The paragraph of a docs page that holds ``phrase`` (its lines joined)."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    found = [p for p in text.split("\n\n") if phrase in " ".join(p.split())]
    assert len(found) == 1, f"docs/{page}: {len(found)} paragraphs say {phrase!r}"
    return " ".join(found[0].split())


def _paths(text: str) -> set[str]:
    return set(re.findall(r"`(/[^`\s]*)`", text))


def test_the_docs_list_the_routes_let_in_without_a_key_as_the_code_does() -> None:
    """With API keys set, the requests ``api/auth.py`` lets in without one, as the HTTP API page's table, the
    security model and the websites page list them: the paths (and their methods), any route's preflight, and the
    clip files that take a signed token instead."""
    from api import auth

    tokened = {f"/clips/{{id}}/{name}" for name in auth.LINK_FILES}
    links = auth.SIGNED_LINKS + "…"
    every = {"any"}
    code = {path: every for path in auth.PUBLIC} | {links: every} | {path: auth.PAGE_METHODS for path in auth.PAGES}
    api = (ROOT / "docs" / "api.md").read_text(encoding="utf-8").split("## Auth", 1)[1].split("\n## ", 1)[0]
    table: dict[str, set[str]] = {}
    for row in re.findall(r"^\| (`.+?|any path) \| (.+?) \| .+ \|$", api, re.MULTILINE):
        methods = set(re.findall(r"`([A-Z]+)`", row[1])) or {row[1]}
        table |= {path: methods for path in _paths(row[0]) or [row[0]]}
    assert table.pop("any path", None) == {auth.PREFLIGHT}, "docs/api.md: the preflight row"
    assert table == code, "docs/api.md's table of the routes let in without a key is not api/auth.py's"
    assert tokened <= _paths(_paragraph("api.md", "also take a signed `?token=")), "docs/api.md: the token routes"
    for page in ("security.md", "websites.md"):
        said = _paragraph(page, "let in without a key")
        assert _paths(said) == set(code) | tokened, f"docs/{page} lists other routes than api/auth.py lets in"
        assert f"`{auth.PREFLIGHT}`" in said and said.count("`GET` and `HEAD`") == 1, f"docs/{page}: the pages' methods"


def test_the_streaming_page_gives_the_cut_bound_the_relays_constants_make() -> None:
    """A viewer of a worker killed outright is cut between ``MISSED_MS`` and ``MISSED_MS + READ_BLOCK_MS`` after
    the worker's last sign of life (``jobs/relay.py``): the page says those numbers, from those constants."""
    from jobs.relay import BEAT, MISSED_MS, READ_BLOCK_MS

    said = _paragraph("streaming.md", "A worker killed outright says nothing")
    missed, block = MISSED_MS / 1000, READ_BLOCK_MS / 1000
    for phrase in (
        f"cut {missed:g} to {missed + block:g} s after its last sign of life",
        f"`BEAT` ({BEAT:g} s)",
        f"`READ_BLOCK_MS` ({block:g} s)",
        f"`MISSED_MS` ({missed:g} s)",
        f"`MISSED_MS` + `READ_BLOCK_MS` = {missed + block:g} s",
    ):
        assert phrase in said, f"docs/streaming.md does not say {phrase!r}"


def test_no_docs_page_shows_an_include_directive() -> None:
    """A reader on a code host sees a page's Markdown as it is: an include directive (``--8<--``) would show them
    the directive, not what it includes."""
    shown = [page.name for page in (ROOT / "docs").glob("*.md") if "--8<--" in page.read_text(encoding="utf-8")]
    assert shown == [], f"docs pages that show an include directive: {shown}"
