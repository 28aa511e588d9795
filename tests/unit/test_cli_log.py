"""`mirror log stats|read` find the log's owner as `replay verify` does: the stack recorded in --data, unless told."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mirror.cli.errors import NoStackRunning
from mirror.cli.log import LogOwner, log_owner


def record_stack(data: Path, **fields: object) -> None:
    """A stack.json as `mirror up` writes it, naming this (live) process as the stack's."""
    data.mkdir(parents=True, exist_ok=True)
    (data / "stack.json").write_text(json.dumps({"url": "http://127.0.0.1:9", "tenant": "default", "token": "t",
                                                 "pid": os.getpid(), **fields}))


def test_the_running_stack_gives_nats_its_default_shard_and_its_shard_map(tmp_path: Path) -> None:
    record_stack(tmp_path, nats_url="nats://127.0.0.1:4999", shard="0", shard_map=["1=acme"])
    assert log_owner(tmp_path, None, []) == LogOwner("nats://127.0.0.1:4999", "0", ["1=acme"])


def test_options_win_over_the_running_stack(tmp_path: Path) -> None:
    record_stack(tmp_path, nats_url="nats://127.0.0.1:4999", shard="0", shard_map=["1=acme"])
    assert log_owner(tmp_path, "nats://10.0.0.2:4222", ["2=globex"]) == LogOwner("nats://10.0.0.2:4222", "0", ["2=globex"])


def test_without_a_stack_nats_url_is_needed(tmp_path: Path) -> None:
    assert log_owner(tmp_path, "nats://10.0.0.2:4222", []) == LogOwner("nats://10.0.0.2:4222", "0", [])
    with pytest.raises(NoStackRunning, match=r"no Mirror stack is running for data dir .*; start one with "
                                             r"`mirror up --data .*`, or pass --nats-url$"):
        log_owner(tmp_path, None, [])
