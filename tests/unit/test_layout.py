"""The layout's rules, checked on the source: imports point one way, adapters stay behind their
ports, rooms say what they hold, modules stay small, and the wheel's map covers the tree."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _room_names() -> tuple[str, ...]:
    """setup.py's ROOMS, the one list of rooms (read, not imported: importing it would run ``setup()``)."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    return next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                and any(isinstance(target, ast.Name) and target.id == "ROOMS" for target in node.targets))


ROOM_NAMES = _room_names()
LAYERS = ("events", "projections", "cognition", "replay", "actors")
"""Bottom to top: a layer may import the layers before it, never one after it."""
ROOMS: dict[str, frozenset[str]] = {
    **{layer: frozenset(LAYERS[: index + 1]) for index, layer in enumerate(LAYERS)},
    "sim": frozenset({"events", "projections", "sim"}),
    "gateway": frozenset({*LAYERS, "gateway"}),
    "stack": frozenset({*LAYERS, "sim", "gateway", "stack"}),
    "harness": frozenset({*LAYERS, "sim", "gateway", "stack", "harness"}),
    "cli": frozenset({*LAYERS, "sim", "gateway", "stack", "harness", "cli"}),
}
"""Every room at the top of the tree and the rooms it may import (itself included). ``sim`` sits
beside the layers so any layer's tests can start it; nothing in the runtime imports it."""
ROOT_HELPERS: dict[str, frozenset[str]] = {"modes": frozenset(), "processes": frozenset(), "serving": frozenset({"events"}),
                                           "metrics": frozenset(), "tracing": frozenset()}
"""Modules of the root package (``mirror/``) that every room may import, and what they may import."""
MAX_LINES = 600
BACKENDS_BEHIND_PORTS = {"nats": "events", "duckdb": "events"}
"""Libraries only the named layer may import: everything else reaches them through its ports."""
RAW_BACKEND_USERS = ("harness/bench/", "harness/evals/curate/store.py")
"""Benchmarks time the raw broker next to Mirror's path (the in-run limit), so they may use it; the
CuRaTe eval keeps its own results file in DuckDB (its output, not the event log behind the port)."""


def _modules() -> list[tuple[str, Path]]:
    found = []
    for room in ROOMS:
        for path in sorted((ROOT / room).rglob("*.py")):
            found.append((room, path))
    for helper in ROOT_HELPERS:
        found.append((helper, ROOT / "mirror" / f"{helper}.py"))
    return found


def _imports(path: Path) -> list[tuple[str, int]]:
    """Absolute names imported by ``path`` (relative imports resolve inside their own room)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append((node.module, node.lineno))
    return names


MODULES = _modules()


@pytest.mark.parametrize(("room", "path"), MODULES, ids=[str(p.relative_to(ROOT)) for _, p in MODULES])
def test_imports_point_down_and_backends_stay_behind_ports(room: str, path: Path) -> None:
    allowed = ROOT_HELPERS.get(room, ROOMS.get(room, frozenset()))
    where = str(path.relative_to(ROOT))
    for name, line in _imports(path):
        parts = name.split(".")
        if parts[0] == "mirror" and len(parts) > 1:
            target = parts[1]
            if target in ROOT_HELPERS and room not in ROOT_HELPERS:
                continue  # every room may use the root helpers
            assert target in allowed, f"{where}:{line} imports {name}: {room} may import {sorted(allowed)}"
        owner = BACKENDS_BEHIND_PORTS.get(parts[0])
        if owner is not None and not where.startswith(RAW_BACKEND_USERS):
            assert room == owner, f"{where}:{line} imports {name}: only {owner}/ talks to {parts[0]}"


def test_the_rooms_are_the_tree() -> None:
    """setup.py's ROOMS (what the wheel maps and lint checks) are the folders at the top that are packages, and
    each has its import rules here: a package folder that is no room, or a room that is no folder, fails."""
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py")} - {"mirror", "tests"}
    assert sorted(packages - set(ROOM_NAMES)) == [], "packages at the top that are not rooms in setup.py's ROOMS"
    assert sorted(set(ROOM_NAMES) - packages) == [], "rooms in setup.py's ROOMS that are not package folders"
    assert set(ROOMS) == set(ROOM_NAMES), "every room needs its import rules in ROOMS here, and only rooms"


def test_every_package_says_what_it_holds() -> None:
    for room in ROOMS:
        for init in sorted((ROOT / room).rglob("__init__.py")):
            doc = ast.get_docstring(ast.parse(init.read_text()))
            assert doc and len(doc) > 40, f"{init.relative_to(ROOT)} needs a docstring saying what lives there"


def test_every_room_names_its_modules_in_its_docstring() -> None:
    """A room's docstring lists what lives in it: each module and sub-package is named there."""
    unnamed = []
    for room in ROOMS:
        for init in sorted((ROOT / room).rglob("__init__.py")):
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            for child in sorted(init.parent.iterdir()):
                name = child.stem if child.suffix == ".py" else child.name
                is_module = child.suffix == ".py" and child.name != "__init__.py"
                if (is_module or (child / "__init__.py").exists()) and name not in doc:
                    unnamed.append(f"{child.relative_to(ROOT)} is not named in {init.relative_to(ROOT)}")
    assert unnamed == []


def test_modules_stay_small() -> None:
    roots = [ROOT / room for room in ROOMS] + [ROOT / "tests", ROOT / "mirror"]
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
