"""Imports go one way: faces → jobs → the pipeline → components → the shared core.

A module's layer follows from its path (``LAYERS``): a new file lands in the layer of its folder. Every import in
the project (lazy ones inside functions too) is read from the source and checked: no module imports one above it,
no component imports another (the renderer may draw with ``watermarks``), and no two modules import each other,
directly or around a loop.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from testkit import product_packages

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = product_packages()  # every package the wheel ships: a new one needs a layer below

# (path prefix, layer), the first that matches a module's path from the project root wins.
LAYERS = (
    ("worker.py", 5),
    ("cli/", 5),
    ("api/", 5),
    ("jobs/pipeline/", 3),
    ("jobs/", 4),
    ("sources/", 2),
    ("renderer/", 2),
    ("watermarks/", 2),
    ("storage/", 2),
    ("quoteclip/", 1),
)
LAYER_NAMES = {5: "faces", 4: "jobs", 3: "the pipeline", 2: "components", 1: "the shared core"}
# Components that one component may use: the renderer draws brand marks with watermarks.
COMPONENT_USES = {("renderer", "watermarks")}


def layer(path: str) -> int:
    for prefix, number in LAYERS:
        if path == prefix or path.startswith(prefix):
            return number
    raise AssertionError(f"{path}: no layer (add its folder to LAYERS)")


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {"worker": root / "worker.py"} if (root / "worker.py").exists() else {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Project modules ``name`` imports (``from x import y`` counts as x.y when that is a module)."""
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def missing(root: Path = ROOT) -> list[str]:
    """Imports of project modules that do not exist (a relative import left behind by a move, say): the scanner
    would otherwise count them as imports of the package around them."""
    known = modules(root)
    found = []
    for name, path in sorted(known.items()):
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*parent, base] if base else parent)
                bases = [base]
            elif isinstance(node, ast.Import):
                bases = [alias.name for alias in node.names]
            else:
                continue
            for base in bases:
                if base.split(".")[0] in (*PACKAGES, "worker") and base not in known:
                    found.append(f"{name} imports {base}, which does not exist")
    return found


def graph(root: Path = ROOT) -> tuple[dict[str, Path], dict[str, set[str]]]:
    known = modules(root)
    # ``quoteclip`` itself (the package's __init__) is imported on the way to any of its modules: not an edge
    edges = {name: imports(name, path, set(known)) - {"quoteclip"} for name, path in known.items()}
    return known, edges


def wrong_imports(root: Path = ROOT) -> list[str]:
    known, edges = graph(root)

    def where(name: str) -> str:
        return known[name].relative_to(root).as_posix()

    found = []
    for name, targets in sorted(edges.items()):
        for target in sorted(targets):
            here, there = layer(where(name)), layer(where(target))
            crossing = (
                here == there == 2
                and name.split(".")[0] != target.split(".")[0]
                and (name.split(".")[0], target.split(".")[0]) not in COMPONENT_USES
            )
            if there > here or crossing:
                found.append(f"{name} ({LAYER_NAMES[here]}) imports {target} ({LAYER_NAMES[there]})")
    return found


def cycles(root: Path = ROOT) -> list[str]:
    _, edges = graph(root)
    found = []
    for start in edges:
        stack = [(start, [start])]
        seen = set()
        while stack:
            node, trail = stack.pop()
            for nxt in edges.get(node, ()):
                if nxt == start:
                    found.append(" → ".join([*trail, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    return sorted(set(found))


def test_every_module_has_a_layer() -> None:
    for path in modules().values():
        layer(path.relative_to(ROOT).as_posix())


def test_no_module_imports_a_layer_above_it_or_another_component() -> None:
    assert not wrong_imports(), "\n".join(wrong_imports())


def test_every_project_import_exists() -> None:
    assert not missing(), "\n".join(missing())


def test_no_import_cycles() -> None:
    found = cycles()
    assert not found, "\n".join(found[:10])


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A small tree of the project's shape whose modules import only downwards."""
    files = {
        "worker.py": "from cli import app\n",
        "quoteclip/__init__.py": "",
        "quoteclip/spec.py": "import json\n",
        "cli/__init__.py": "",
        "cli/app.py": "from jobs.queue import enqueue\n",
        "jobs/__init__.py": "",
        "jobs/queue.py": "from .pipeline import produce\n",
        "jobs/pipeline/__init__.py": "",
        "jobs/pipeline/produce.py": "from renderer import plan\nfrom sources import opener\n",
        "renderer/__init__.py": "",
        "renderer/plan.py": "from quoteclip.spec import ClipSpec\nfrom watermarks import draw\n",
        "watermarks/__init__.py": "",
        "watermarks/draw.py": "from quoteclip import spec\n",
        "sources/__init__.py": "",
        "sources/opener.py": "def open_source():\n    from quoteclip.spec import ClipSpec\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert wrong_imports(tmp_path) == [] and cycles(tmp_path) == [] and missing(tmp_path) == []
    return tmp_path


def test_the_checker_sees_an_upward_import(planted: Path) -> None:
    """The scanner itself, on a planted tree: a core module importing a face (inside a function, relatively), a
    component importing the pipeline, and a component importing another are each reported."""
    (planted / "quoteclip/spec.py").write_text("def f():\n    from cli import app\n")
    (planted / "sources/opener.py").write_text("from jobs.pipeline.produce import x\nfrom renderer.plan import y\n")
    assert wrong_imports(planted) == [
        "quoteclip.spec (the shared core) imports cli.app (faces)",
        "sources.opener (components) imports jobs.pipeline.produce (the pipeline)",
        "sources.opener (components) imports renderer.plan (components)",
    ]


def test_the_checker_sees_an_import_of_nothing(planted: Path) -> None:
    (planted / "cli/app.py").write_text("def f():\n    from .transcript import align\n")
    assert missing(planted) == ["cli.app imports cli.transcript, which does not exist"]


def test_the_checker_sees_a_cycle(planted: Path) -> None:
    (planted / "watermarks/draw.py").write_text("from renderer import plan\n")
    assert cycles(planted) == [
        "renderer.plan → watermarks.draw → renderer.plan",
        "watermarks.draw → renderer.plan → watermarks.draw",
    ]


def test_a_new_file_takes_its_folders_layer(planted: Path) -> None:
    (planted / "cli/new.py").write_text("from jobs.queue import enqueue\n")  # a face: allowed
    (planted / "quoteclip/newcore.py").write_text("from jobs.queue import enqueue\n")  # core: not allowed
    assert wrong_imports(planted) == ["quoteclip.newcore (the shared core) imports jobs.queue (jobs)"]
