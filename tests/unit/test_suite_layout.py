"""The suite's own layout, checked on the source: ``tests/unit/`` starts no process and no server.

A unit test runs in this process against in-process adapters (the in-memory bus and log, a
DuckDB file, pure functions). Whatever needs nats-server, the simulator over HTTP, Ray, a child
process or a listening socket is a system test (``tests/system/``), or part of a port's contract
suite (``tests/contract/``). The rule is read from each module's syntax tree: the fixtures that
start servers, the classes and modules that start processes, and the calls that open a listener
or a child.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent
SERVER_FIXTURES = frozenset({"nats_server", "nats_url", "sim", "sim_server", "ray_cluster", "ray_session", "bus",
                             "event_log"})
"""The root conftest's fixtures that start (or need) a server: nats-server, the simulator, Ray;
``bus`` and ``event_log`` are parametrized over adapters that include the JetStream ones."""
STARTERS = frozenset({"EmbeddedNats", "EmbeddedNatsCluster", "SimLLMServer", "ThreadedServer", "IngesterProcess",
                      "RayIngester", "EmbeddedStack", "start_ray", "local_ray", "conversation_runtime",
                      "gateway_stack", "reset_stream", "start_up", "ctrl_c", "Session", "sim_client", "Machines"})
"""Names whose import means a server or process: the embedded broker, the simulator's HTTP server,
the ingester as a child process or Ray actor, the stack, and the test helpers that start them."""
PROCESS_MODULES = frozenset({"subprocess", "multiprocessing", "ray"})
"""Modules whose import is a process (or Ray) started by the test."""
PURE_RAY = frozenset({"ray.exceptions", "ray.autoscaler._private.util"})
"""Parts of Ray that start nothing: its exception classes and the cluster-config validator ``ray up`` runs."""
STARTING_CALLS = frozenset({"start_server", "start_unix_server", "create_subprocess_exec", "create_subprocess_shell",
                            "fork", "Popen", "getfixturevalue"})
"""Calls that open a listening socket or start a child, and the dynamic way to ask for a fixture
(whose argument is checked like a parameter)."""


def violations(source: str) -> list[str]:
    """What in ``source`` starts a process or a server, one line each (empty when nothing does)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            found += [f"line {node.lineno}: {node.name} takes the fixture {arg.arg!r}"
                      for arg in arguments if arg.arg in SERVER_FIXTURES]
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: imports {alias.name}" for alias in node.names
                      if _process_module(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if _process_module(node.module):
                found.append(f"line {node.lineno}: imports from {node.module}")
            found += [f"line {node.lineno}: imports {alias.name} from {node.module}" for alias in node.names
                      if alias.name in STARTERS]
        elif isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called == "getfixturevalue" or _is_usefixtures(node.func):
                found += [f"line {node.lineno}: asks for the fixture {arg.value!r}" for arg in node.args
                          if isinstance(arg, ast.Constant) and arg.value in SERVER_FIXTURES]
            elif called in STARTING_CALLS:
                found.append(f"line {node.lineno}: calls {called}")
    return found


def _process_module(name: str) -> bool:
    return name not in PURE_RAY and any(name == module or name.startswith(f"{module}.") for module in PROCESS_MODULES)


def _is_usefixtures(func: ast.expr) -> bool:
    return isinstance(func, ast.Attribute) and func.attr == "usefixtures"


MODULES = sorted(path for path in UNIT.glob("*.py") if path.name != "__init__.py")


@pytest.mark.parametrize("path", MODULES, ids=[path.name for path in MODULES])
def test_a_unit_module_starts_no_process_and_no_server(path: Path) -> None:
    found = violations(path.read_text())
    assert not found, f"tests/unit/{path.name} starts a process or a server (move it to tests/system/):\n" + "\n".join(found)


def test_the_check_sees_each_way_of_starting_one() -> None:
    """The rule is only as good as what it catches: one example of each kind."""
    examples = {
        "async def test_x(nats_url: str) -> None: ...": "fixture 'nats_url'",
        "def test_x(sim): ...": "fixture 'sim'",
        "@pytest.fixture\ndef fixture(ray_cluster): ...": "fixture 'ray_cluster'",
        "pytestmark = pytest.mark.usefixtures('event_log')": "fixture 'event_log'",
        "def test_x(request): request.getfixturevalue('bus')": "fixture 'bus'",
        "import subprocess": "imports subprocess",
        "import ray": "imports ray",
        "from ray.util import placement_group": "imports from ray.util",
        "from mirror.events.nats.server import EmbeddedNats": "imports EmbeddedNats",
        "from mirror.sim.server import SimLLMServer, SimSettings": "imports SimLLMServer",
        "from tests.support.stack import local_ray": "imports local_ray",
        "from tests.support.up import start_up": "imports start_up",
        "async def f(): await asyncio.start_server(handler, '127.0.0.1', 0)": "calls start_server",
        "async def f(): await asyncio.create_subprocess_exec('mirror')": "calls create_subprocess_exec",
    }
    for source, expected in examples.items():
        assert any(expected in line for line in violations(source)), (source, violations(source))
    pure = ("from ray.exceptions import ActorDiedError\nfrom mirror.sim.settings import SimSettings\n"
            "from tests.support.event_log import log_of\nfrom tests.support.cluster import read_recipe\ndef test_x(tmp_path, memory_bus): ...")
    assert violations(pure) == []
