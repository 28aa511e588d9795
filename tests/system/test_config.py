"""Configuration through the real `mirror` command: flag > environment > config file > built-in default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def mirror(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {key: value for key, value in os.environ.items() if not key.startswith("MIRROR_")}
    return subprocess.run([sys.executable, "-m", "mirror", *args], cwd=cwd, env=clean | (env or {}),
                          capture_output=True, text=True, timeout=120)


def shown(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


FILE = """
data = "top"                 # shared: every command with --data
[up]
llm = "sim"
max_live_actors = 7
snapshot_every = 50
mode = "baseline"
nats-port = 4333             # dashes read the same
[tenants.add]
data = "tenants-own"
"""


def test_flag_beats_environment_beats_file_beats_default(tmp_path: Path) -> None:
    (tmp_path / "mirror.toml").write_text(FILE)  # found in the working directory without --config
    settings = shown(mirror("up", "--show-config", "--snapshot-every", "70", "--mode", "full", cwd=tmp_path,
                            env={"MIRROR_LLM_URL": "http://127.0.0.1:9/v1", "MIRROR_SNAPSHOT_EVERY": "60",
                                 "MIRROR_MODE": "controller_only"}))
    assert settings["max_live_actors"] == 7  # file only
    assert settings["nats_port"] == 4333  # file only, written with a dash
    assert settings["data_dir"] == "top"  # the file's shared key
    assert settings["llm"] == "http://127.0.0.1:9/v1"  # environment over file
    assert settings["snapshot_every"] == 70 and settings["mode"] == "full"  # flag over environment and file
    assert settings["passivate_after_s"] == 300.0 and settings["gateway_port"] == 8080  # set nowhere: built in
    hours = shown(mirror("up", "--show-config", "--idempotency-window-h", "1.5", cwd=tmp_path))
    assert hours["idempotency_window_s"] == 5400.0  # given in hours, kept in seconds


def test_a_command_table_beats_the_shared_key_and_reaches_other_commands(tmp_path: Path) -> None:
    (tmp_path / "mirror.toml").write_text(FILE)
    added = mirror("tenants", "add", "acme", cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    assert (tmp_path / "tenants-own" / "tenants.json").exists() and not (tmp_path / "top").exists()
    listed = mirror("tenants", "list", "--data", "tenants-own", cwd=tmp_path)
    assert listed.stdout.startswith("acme\tactive")


def test_the_file_comes_from_config_then_mirror_config_then_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "mirror.toml").write_text('[up]\nport = 1001\n')
    (tmp_path / "env.toml").write_text('[up]\nport = 1002\n')
    (tmp_path / "flag.toml").write_text('[up]\nport = 1003\n')
    env = {"MIRROR_CONFIG": str(tmp_path / "env.toml")}
    assert shown(mirror("up", "--show-config", cwd=tmp_path))["gateway_port"] == 1001
    assert shown(mirror("up", "--show-config", cwd=tmp_path, env=env))["gateway_port"] == 1002
    flag = mirror("--config", str(tmp_path / "flag.toml"), "up", "--show-config", cwd=tmp_path, env=env)
    assert shown(flag)["gateway_port"] == 1003


def test_without_a_file_the_cli_defaults_are_the_runtime_defaults(tmp_path: Path) -> None:
    from mirror.actors.settings import RuntimeSettings
    from mirror.events.nats.infrastructure import NatsInfrastructure
    from mirror.stack.embedded import StackSettings

    settings = shown(mirror("up", "--show-config", cwd=tmp_path))
    runtime = RuntimeSettings(infrastructure=NatsInfrastructure(""), llm=None)  # type: ignore[arg-type]  # no LLM: only the defaults are compared
    stack = StackSettings()
    assert settings["passivate_after_s"] == runtime.passivate_after_s == stack.passivate_after_s
    assert settings["idempotency_window_s"] == runtime.idempotency_window_s == stack.idempotency_window_s == 86_400.0
    assert settings["max_live_actors"] == runtime.max_live_actors == stack.max_live_actors
    assert settings["snapshot_every"] == runtime.snapshot_every == stack.snapshot_every
    assert settings["max_message_bytes"] == stack.max_message_bytes
    assert (settings["llm"], settings["mode"], settings["sim_latency"]) == (stack.llm, stack.mode, stack.sim_latency)


@pytest.mark.parametrize(("content", "key", "problem"), [
    ("[up]\nprot = 8080\n", "up.prot", "`mirror up` has no such option"),
    ("[up]\nport = true\n", "up.port", "must be an integer, not True"),
    ('[up]\nport = "8080"\n', "up.port", "must be an integer"),
    ("[up]\nmax_live_actors = 1.5\n", "up.max_live_actors", "must be an integer"),
    ("[up]\nport = 70000\n", "up.port", "less than or equal to 65535"),
    ('[up]\nmode = "fast"\n', "up.mode", "'fast' is not one of"),
    ("[upp]\nport = 1\n", "upp", "no such command `mirror upp`"),
    ("[bench]\nturns = 3\n", "bench.turns", "must be a table"),
    ("port = 1\n", "port", "unknown top-level key"),
    ("data = 3\n", "data", "must be a string"),
    ('[ingest]\nsubject = "mirror.a.*.*"\n', "ingest.subject", "must be a list"),
])
def test_a_bad_file_is_one_line_naming_file_and_key_and_changes_nothing(
        tmp_path: Path, content: str, key: str, problem: str) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(content)
    result = mirror("--config", str(bad), "tenants", "add", "acme", "--data", "d", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"mirror: error: config file {bad}, key {key}: ") and problem in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "d").exists()  # the command did not run


@pytest.mark.parametrize(("content", "problem"), [
    ("[up\nport = 1\n", "not valid TOML"),
    (None, "no such file"),
])
def test_an_unreadable_file_is_one_line(tmp_path: Path, content: str | None, problem: str) -> None:
    path = tmp_path / "mirror.toml"
    if content is not None:
        path.write_text(content)
    result = mirror("up", "--show-config", cwd=tmp_path, env={"MIRROR_CONFIG": str(path)})
    assert result.returncode == 2
    assert result.stderr.startswith(f"mirror: error: config file {path}: ") and problem in result.stderr
    assert result.stderr.count("\n") == 1


def test_the_documented_example_file_is_valid(tmp_path: Path) -> None:
    """The example ``mirror.toml`` of docs/operations.md ("Configuration") is a file ``up`` accepts."""
    guide = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    example = guide.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "mirror.toml").write_text(example)
    settings = shown(mirror("up", "--show-config", cwd=tmp_path))
    assert settings["data_dir"] == "/srv/mirror" and settings["llm"] == "http://127.0.0.1:8000/v1"
    assert settings["max_live_actors"] == 256 and settings["log_level"] == "INFO"


def test_reflection_is_on_by_default_and_can_be_turned_off(tmp_path: Path) -> None:
    assert shown(mirror("up", "--show-config", cwd=tmp_path))["reflection"] is True
    assert shown(mirror("up", "--show-config", "--no-reflection", cwd=tmp_path))["reflection"] is False
    assert shown(mirror("up", "--show-config", cwd=tmp_path, env={"MIRROR_REFLECTION": "false"}))["reflection"] is False


def test_memory_is_on_by_default_and_can_be_turned_off(tmp_path: Path) -> None:
    assert shown(mirror("up", "--show-config", cwd=tmp_path))["memory"] is True
    assert shown(mirror("up", "--show-config", "--no-memory", cwd=tmp_path))["memory"] is False
    assert shown(mirror("up", "--show-config", cwd=tmp_path, env={"MIRROR_MEMORY": "false"}))["memory"] is False


def test_the_shard_map_is_a_shared_key_and_a_bad_one_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "mirror.toml").write_text('shard_map = ["1=acme,globex", "2=initech"]\n')
    settings = shown(mirror("up", "--show-config", cwd=tmp_path))
    assert settings["shard_map"] == [["1", ["acme", "globex"]], ["2", ["initech"]]]
    flag = shown(mirror("up", "--show-config", "--shard-map", "3=hooli", cwd=tmp_path))  # the flag replaces the file's
    assert flag["shard_map"] == [["3", ["hooli"]]]
    (tmp_path / "mirror.toml").write_text('shard_map = ["1=acme", "2=acme"]\n')
    result = mirror("up", "--show-config", cwd=tmp_path)
    assert result.returncode == 2 and "tenant 'acme' is on two shards, '1' and '2'" in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_the_nats_cluster_size_comes_from_flag_environment_or_file(tmp_path: Path) -> None:
    assert shown(mirror("up", "--show-config", cwd=tmp_path))["nats_cluster"] == 1
    assert shown(mirror("up", "--show-config", "--nats-cluster", "3", cwd=tmp_path))["nats_cluster"] == 3
    assert shown(mirror("up", "--show-config", cwd=tmp_path, env={"MIRROR_NATS_CLUSTER": "3"}))["nats_cluster"] == 3
    (tmp_path / "mirror.toml").write_text("[up]\nnats_cluster = 5\n")
    assert shown(mirror("up", "--show-config", cwd=tmp_path))["nats_cluster"] == 5
    (tmp_path / "mirror.toml").write_text("[up]\nnats_cluster = 0\n")
    assert mirror("up", "--show-config", cwd=tmp_path).returncode == 2


def test_the_nats_sync_comes_from_flag_environment_or_file_and_a_bad_one_is_named(tmp_path: Path) -> None:
    assert shown(mirror("up", "--show-config", cwd=tmp_path))["nats_sync"] == "always"
    assert shown(mirror("up", "--show-config", "--nats-sync", "2m", cwd=tmp_path))["nats_sync"] == "2m"
    assert shown(mirror("up", "--show-config", cwd=tmp_path, env={"MIRROR_NATS_SYNC": "10s"}))["nats_sync"] == "10s"
    (tmp_path / "mirror.toml").write_text('[up]\nnats_sync = "ALWAYS"\n')
    assert shown(mirror("up", "--show-config", cwd=tmp_path))["nats_sync"] == "always"
    (tmp_path / "mirror.toml").write_text('[up]\nnats_sync = "soon"\n')
    refused = mirror("up", "--show-config", cwd=tmp_path)
    assert refused.returncode == 2 and "key up.nats_sync: invalid JetStream sync interval 'soon'" in refused.stderr
    (tmp_path / "mirror.toml").unlink()
    refused = mirror("nats", "--sync", "10", cwd=tmp_path)  # a bare number: nats-server would take seconds
    assert refused.returncode == 2 and "'--sync'" in refused.stderr and "interval '10'" in refused.stderr
