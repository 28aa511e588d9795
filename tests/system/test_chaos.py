"""`mirror chaos` against a real `mirror up --llm sim`: conversations over HTTP while its processes die.

One stack per parametrisation (the embedded one; the NATS cluster's hook is below), two runs:

1. ``--kill nats,ingester,actor``: what the stack survives today — nothing acknowledged lost,
   doubled or gapped, every conversation answers afterwards;
2. the issue's command, ``--kill nats,ingester,actor,gateway``: the gateway kill is not survived
   yet (see ``GATEWAY_NOT_RESTARTED``), so that run asserts what is true and the wanted outcome is
   a strict xfail that starts failing — passing — the day a restarted gateway serves again.

The reports are printed (run with ``-s``): the README's "Chaos" figures come from them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.up import ctrl_c, start_up

pytestmark = pytest.mark.slow

STACKS = [
    pytest.param((), id="embedded"),
    # The hook for `mirror up --nats-cluster N` (being built in parallel): the killer finds every
    # nats-server among the stack's descendants and kills one of them, so this needs no other change.
    pytest.param(("--nats-cluster", "3"), id="nats-cluster",
                 marks=pytest.mark.skip(reason="`mirror up --nats-cluster N` is not built yet; enable this when it lands")),
]

GATEWAY_NOT_RESTARTED = (
    "Ray restarts a killed GatewayActor (max_restarts=-1), but only __init__ runs again: start(), "
    "which binds the port and serves uvicorn, is called once by start_gateways(), so the restarted "
    "gateway never listens and every later request is refused (ConnectError) until `mirror up` restarts"
)


def chaos(data: Path, *options: str) -> tuple[int, dict[str, Any]]:
    command = [sys.executable, "-m", "mirror", "chaos", "--data", str(data), "--json", *options]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.stdout.strip(), f"exit {done.returncode}, no report:\n{done.stderr[-3000:]}"
    report = json.loads(done.stdout)
    print(f"\n$ mirror chaos {' '.join(options)}\nexit {done.returncode}\n{json.dumps(report, indent=1)}")
    return done.returncode, report


@pytest.fixture(scope="module", params=STACKS)
def reports(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    directory = tmp_path_factory.mktemp("chaos")
    data, log = directory / "data", directory / "up.log"
    process, _ = start_up(data, log, *request.param)
    try:
        survived = chaos(data, "--kill", "nats,ingester,actor", "--every", "3", "--conversations", "6",
                         "--turns", "8", "--timeout", "180", "--catch-up", "60")
        # The issue's command; bounded, since after the gateway kill no turn is answered.
        issue = chaos(data, "--kill", "nats,ingester,actor,gateway", "--every", "3", "--conversations", "6",
                      "--turns", "8", "--timeout", "60", "--catch-up", "20")
        yield {"survived": survived, "issue": issue}
    finally:
        assert ctrl_c(process) == 0, log.read_text()[-3000:]


def test_nothing_acknowledged_is_lost_when_nats_the_ingester_and_hosts_are_killed(reports: dict[str, Any]) -> None:
    code, report = reports["survived"]
    assert report["kills_by_kind"].keys() == {"nats", "ingester", "actor"}, report["kills"]
    assert (report["lost"], report["duplicated"], report["gaps"], report["misplaced"]) == (0, 0, 0, 0)
    assert report["doubled_seqs"] == 0 and report["failure_narratives"] == 0
    assert report["turns_acknowledged"] == 6 * 8 + 6  # every turn, and each conversation's last answer
    assert report["conversations_answering"] == 6 and report["conversations_unchecked"] == []
    assert report["turns_unverified"] == 0
    assert report["recovery_s"]["not_recovered"] == 0
    assert report["peak_processes"] >= report["processes_at_start"] > 0
    assert report["ok"] and code == 0


def test_the_issues_command_kills_every_kind_and_the_gateway_kill_is_not_survived(reports: dict[str, Any]) -> None:
    """What is true today: every kind is killed; after the gateway kill nothing answers (see GATEWAY_NOT_RESTARTED)."""
    code, report = reports["issue"]
    assert set(report["kills_by_kind"]) == {"nats", "ingester", "actor", "gateway"}, report["kills"]
    gateway_kill = next(kill for kill in report["kills"] if kill["kind"] == "gateway" and kill["pid"])
    assert gateway_kill["recovery_s"] is None  # no turn sent after it was ever acknowledged
    assert "ConnectError" in report["errors_by_kind"]
    assert report["conversations_answering"] == 0 and len(report["conversations_unchecked"]) == 6
    assert report["turns_unverified"] == report["turns_acknowledged"]  # the log is read through the dead gateway
    # Up to the gateway kill nothing acknowledged went missing: the kills before it all recovered.
    before = [kill for kill in report["kills"] if kill["pid"] and kill["at_s"] < gateway_kill["at_s"]]
    assert before and all(kill["recovery_s"] is not None for kill in before)
    assert not report["ok"] and code == 1


@pytest.mark.xfail(strict=True, reason=GATEWAY_NOT_RESTARTED)
def test_the_issues_command_passes(reports: dict[str, Any]) -> None:
    code, report = reports["issue"]
    assert report["ok"] and code == 0
    assert (report["lost"], report["duplicated"], report["gaps"]) == (0, 0, 0)
    assert report["conversations_answering"] == 6
