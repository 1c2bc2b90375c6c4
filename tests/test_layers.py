"""Imports go one way: faces → jobs → the pipeline → sources / renderer / watermarks / storage → the shared core.

Every import in the package (lazy ones inside functions too) is read from the source and checked against the
layers; no module imports one above it, and no two modules import each other, directly or around a loop.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("quoteclip", "jobs", "sources", "renderer", "watermarks", "storage", "api")

FACES = {
    "quoteclip.cli",
    "quoteclip.options",
    "quoteclip.batch",
    "quoteclip.demo",
    "quoteclip.up",
    "quoteclip.__main__",
    "quoteclip.launch",
    "worker",
}
PIPELINE = {
    "jobs.pipeline.produce",
    "jobs.pipeline.lookup",
    "jobs.pipeline.manifest",
    "jobs.pipeline.results",
    "jobs.pipeline.stages",
    "jobs.pipeline.tempdirs",
    "jobs.pipeline.keys",
    "jobs.pipeline.assets",
}
COMPONENTS = ("sources", "renderer", "watermarks", "storage")
LAYER_NAMES = {5: "faces", 4: "jobs", 3: "the pipeline", 2: "components", 1: "the shared core"}


def layer(module: str) -> int:
    top = module.split(".")[0]
    if module in FACES or top == "api":
        return 5
    if module in PIPELINE:
        return 3
    if top == "jobs":
        return 4
    if top in COMPONENTS:
        return 2
    return 1  # quoteclip's spec, settings, errors, fonts, transcript, redis_keys, logs, media, embedded


def modules() -> dict[str, Path]:
    found = {"worker": ROOT / "worker.py"}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
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


def test_no_module_imports_a_layer_above_it() -> None:
    known = modules()
    graph = {name: imports(name, path, set(known)) for name, path in known.items()}
    upward = [
        f"{name} ({LAYER_NAMES[layer(name)]}) imports {target} ({LAYER_NAMES[layer(target)]})"
        for name, targets in sorted(graph.items())
        for target in sorted(targets)
        if layer(target) > layer(name) and not (name.startswith("quoteclip") and target == "quoteclip")
    ]
    assert not upward, "\n".join(upward)


def test_no_import_cycles() -> None:
    known = modules()
    graph = {name: imports(name, path, set(known)) - {"quoteclip"} for name, path in known.items()}
    cycles = []
    for start in graph:
        stack = [(start, [start])]
        seen = set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    cycles.append(" → ".join([*trail, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    assert not cycles, "\n".join(sorted(set(cycles))[:10])


def test_the_checker_sees_an_upward_import() -> None:
    """The rule itself: a core module importing a face would be reported."""
    assert layer("quoteclip.spec") < layer("jobs.queue") < layer("quoteclip.cli")
    assert layer("jobs.pipeline.produce") < layer("jobs.queue") and layer("renderer.plan") < layer(
        "jobs.pipeline.produce"
    )
