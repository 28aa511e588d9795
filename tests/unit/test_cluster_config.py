"""``cluster.yaml`` passes Ray's own cluster-config checks, the ones ``ray up`` runs, and agrees
with the several-nodes recipe in docs/operations.md on what a node needs to join."""

from __future__ import annotations

import copy
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from tests.support.cluster import read_recipe

CLUSTER_YAML = Path(__file__).resolve().parents[2] / "cluster.yaml"


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
