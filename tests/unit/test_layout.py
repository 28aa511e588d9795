"""The layout's rules, checked on the source: imports point one way, adapters stay behind their
ports, rooms say what they hold, modules stay small."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("events", "projections", "cognition", "replay", "actors")
"""Bottom to top: a layer may import the layers before it, never one after it."""
MAX_LINES = 600
BACKENDS_BEHIND_PORTS = {"nats": "events", "duckdb": "events"}
"""Libraries only the named layer may import: everything else reaches them through its ports."""
RAW_BACKEND_USERS = ("actors/bench/", "actors/evals/curate/store.py")
"""Benchmarks time the raw broker next to Mirror's path (the in-run limit), so they may use it; the
CuRaTe eval keeps its own results file in DuckDB (its output, not the event log behind the port)."""


def _modules() -> list[tuple[str, Path]]:
    found = []
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            found.append((layer, path))
    return found


def _imports(path: Path) -> list[tuple[str, int]]:
    """Absolute names imported by ``path`` (relative imports resolve inside their own layer)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append((node.module, node.lineno))
    return names


MODULES = _modules()


@pytest.mark.parametrize(("layer", "path"), MODULES, ids=[str(p.relative_to(ROOT)) for _, p in MODULES])
def test_imports_point_down_and_backends_stay_behind_ports(layer: str, path: Path) -> None:
    allowed = set(LAYERS[: LAYERS.index(layer) + 1])
    for name, line in _imports(path):
        parts = name.split(".")
        if parts[0] == "mirror" and len(parts) > 1 and parts[1] in LAYERS:
            assert parts[1] in allowed, f"{path.relative_to(ROOT)}:{line} imports {name}: {layer} may import {sorted(allowed)}"
        owner = BACKENDS_BEHIND_PORTS.get(parts[0])
        if owner is not None and not str(path.relative_to(ROOT)).startswith(RAW_BACKEND_USERS):
            assert layer == owner, f"{path.relative_to(ROOT)}:{line} imports {name}: only {owner}/ talks to {parts[0]}"


def test_every_package_says_what_it_holds() -> None:
    for layer in LAYERS:
        for init in sorted((ROOT / layer).rglob("__init__.py")):
            doc = ast.get_docstring(ast.parse(init.read_text()))
            assert doc and len(doc) > 40, f"{init.relative_to(ROOT)} needs a docstring saying what lives there"


def test_modules_stay_small() -> None:
    roots = [ROOT / layer for layer in LAYERS] + [ROOT / "tests"]
    too_long = {
        str(path.relative_to(ROOT)): count
        for root in roots for path in sorted(root.rglob("*.py"))
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert too_long == {}


def test_every_public_module_names_its_public_surface() -> None:
    missing = []
    for _, path in MODULES:
        if path.name.startswith("_") and path.name != "__init__.py":
            continue  # private modules: their package's __all__ is the surface
        tree = ast.parse(path.read_text())
        names = {
            target.id
            for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name)
        }
        if "__all__" not in names:
            missing.append(str(path.relative_to(ROOT)))
    assert missing == []
