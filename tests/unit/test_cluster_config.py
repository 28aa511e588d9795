"""``cluster.yaml`` passes Ray's own cluster-config checks, the ones ``ray up`` runs, agrees with
the several-nodes recipe in docs/operations.md on what a node needs to join, and runs the steps
of the README's several-machines recipe, word for word."""

from __future__ import annotations

import copy
import re
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from tests.support.cluster import ROOT, read_recipe

CLUSTER_YAML = ROOT / "cluster.yaml"
MACHINES_MARKER = "<!-- recipe: several-machines -->"
LAUNCHER_ONLY = ("--autoscaling-config",)
"""What ``ray up`` adds to the head's ``ray start`` and a person at a terminal does not."""
SHELL = frozenset({">", ">>", "<", "2>&1", "&"})


def checked(config: dict[str, Any]) -> dict[str, Any]:
    """What ``ray up`` does to a config before it launches anything: fill it out, then validate it
    against the JSON schema shipped in the ray wheel (``ray/autoscaler/ray-schema.json``)."""
    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


def load() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(CLUSTER_YAML.read_text())
    return config


def test_cluster_yaml_passes_rays_validation() -> None:
    prepared = checked(load())
    assert prepared["provider"]["type"] == "local"
    assert prepared["max_workers"] == len(prepared["provider"]["worker_ips"])


@pytest.mark.parametrize(("broken", "error"), [
    (lambda config: config.pop("provider"), KeyError),  # no provider: Ray cannot fill out the defaults
    (lambda config: config.update(max_worker=2), jsonschema.ValidationError),  # a misspelt key: the schema rejects it
])
def test_a_broken_copy_fails_the_same_validation(broken: Any, error: type[Exception]) -> None:
    config = load()
    broken(config)
    with pytest.raises(error):
        checked(config)


def start_command(line: str) -> list[str]:
    words = shlex.split(line)
    return words[words.index("start") - 1:] if "start" in words else []


def test_cluster_yaml_starts_ray_as_the_documented_recipe_does() -> None:
    """Token authentication on every node (a raylet without it cannot join a head that has it)
    and workers joining the head's port."""
    config = load()
    recipe = read_recipe()
    head_lines = [line for line in config["head_start_ray_commands"] if " start " in line]
    worker_lines = [line for line in config["worker_start_ray_commands"] if " start " in line]
    assert head_lines and worker_lines
    for line in head_lines + worker_lines:
        for name, value in recipe.environment.items():
            assert f"{name}={value}" in line, line
    port = next(word.split("=", 1)[1] for line in head_lines for word in start_command(line) if word.startswith("--port="))
    for line in worker_lines:
        assert any(word.startswith("--address=") and word.endswith(f":{port}") for word in start_command(line)), line
    assert any(target.endswith(".ray/auth_token") for target in config["file_mounts"]), "the nodes need the head's token"


def step(words: list[str]) -> tuple[str, ...]:
    """A recipe command as the words that matter: without ``VAR=value`` prefixes, ``setsid``/``nohup``,
    redirections and the launcher's own flags; ``--flag=value`` as ``--flag value``; the program by name."""
    while words and ("=" in words[0] and not words[0].startswith("-") or words[0] in ("setsid", "nohup")):
        words = words[1:]
    kept: list[str] = [Path(words[0]).name]
    for word in words[1:]:
        if word in SHELL or word.startswith((">", "<")):
            break
        flag, equals, value = word.partition("=")
        if flag in LAUNCHER_ONLY:
            continue
        kept += [flag, value] if word.startswith("--") and equals else [word]
    return tuple(kept)


def yaml_steps(commands: list[str]) -> tuple[set[str], list[tuple[str, ...]]]:
    """The variables a cluster.yaml command list exports, and its ray and mirror steps in order."""
    exported: set[str] = set()
    steps = []
    for command in commands:
        for line in command.splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["export"]:
                exported |= {word.split("=", 1)[0] for word in words[1:] if re.match(r"[A-Za-z_]\w*=", word)}
            elif words and step(words)[0] in ("ray", "mirror") and step(words)[1] != "stop":
                steps.append(step(words))
    return exported, steps


def ray_settings(words: list[str]) -> set[str]:
    """The ``RAY_…=value`` settings a command is run with (its prefixes), but for the token one the exports set."""
    settings = set()
    for word in words:
        if not re.match(r"[A-Za-z_]\w*=", word):
            break
        if word.startswith("RAY_") and not word.startswith("RAY_AUTH_MODE="):
            settings.add(word)
    return settings


def test_cluster_yaml_runs_the_readme_recipe_for_several_machines() -> None:
    recipe = read_recipe(ROOT / "README.md", MACHINES_MARKER)
    steps = {" ".join(step(command)[:2]) + (" --head" if "--head" in command else ""): step(command)
             for command in recipe.commands}
    assert list(steps) == ["mirror nats", "ray start --head", "mirror up", "ray start", "mirror node"], list(steps)
    config = load()
    head_exports, head = yaml_steps(config["head_start_ray_commands"])
    worker_exports, worker = yaml_steps(config["worker_start_ray_commands"])
    assert head == [steps["mirror nats"], steps["ray start --head"], steps["mirror up"]]
    assert worker == [steps["mirror nats"], steps["ray start"], steps["mirror node"]]
    assert (head_exports | worker_exports) - {"PATH"} == set(recipe.environment)
    assert "INGEST" in worker_exports and "--ingest 1" in "".join(config["worker_start_ray_commands"])


def test_the_head_declares_a_silent_machine_dead_as_soon_in_both() -> None:
    """The head's Ray runs with the same health-check settings in the README and in cluster.yaml."""
    recipe = read_recipe(ROOT / "README.md", MACHINES_MARKER)
    readme = [ray_settings(command) for command in recipe.commands if "--head" in command]
    config = load()
    yaml_lines = [shlex.split(line) for command in config["head_start_ray_commands"] for line in command.splitlines()
                  if "--head" in line]
    assert len(readme) == len(yaml_lines) == 1
    assert readme[0] == ray_settings(yaml_lines[0]) == {
        "RAY_health_check_period_ms=2000", "RAY_health_check_timeout_ms=2000", "RAY_health_check_failure_threshold=4"}
