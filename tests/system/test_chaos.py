"""`mirror chaos` against a real `mirror up --llm sim`: conversations over HTTP while its processes die.

One stack per parametrisation (the embedded NATS, and a 3-node NATS cluster) and one run of
the issue's command, ``--kill nats,ingester,actor,gateway --every 3``: nothing acknowledged is
lost, doubled or out of place, seqs are gapless, no narrative is a failure, every conversation
answers afterwards, and every kill was recovered from. The report is printed (run with ``-s``):
the "Chaos" figures of docs/operations.md come from it.
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

pytestmark = pytest.mark.long  # ~90 s a run: .ci/run runs it with -m long

STACKS = [
    pytest.param((), id="embedded"),
    # A 3-node NATS cluster: the killer finds every nats-server among the stack's descendants and
    # kills one of them (a follower or the stream's leader, as the seed falls).
    pytest.param(("--nats-cluster", "3"), id="nats-cluster"),
]

def chaos(data: Path, *options: str) -> tuple[int, dict[str, Any]]:
    command = [sys.executable, "-m", "mirror", "chaos", "--data", str(data), "--json", *options]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.stdout.strip(), f"exit {done.returncode}, no report:\n{done.stderr[-3000:]}"
    report = json.loads(done.stdout)
    print(f"\n$ mirror chaos {' '.join(options)}\nexit {done.returncode}\n{json.dumps(report, indent=1)}")
    return done.returncode, report


@pytest.fixture(scope="module", params=STACKS)
def report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    directory = tmp_path_factory.mktemp("chaos")
    data, log = directory / "data", directory / "up.log"
    process, _ = start_up(data, log, *request.param, reflection=True)  # as users start it: long, not in the default run
    try:
        code, report = chaos(data, "--kill", "nats,ingester,actor,gateway", "--every", "3", "--conversations", "6",
                             "--turns", "8", "--timeout", "180", "--catch-up", "60")
        yield report | {"exit": code}
    finally:
        assert ctrl_c(process) == 0, log.read_text()[-3000:]


def test_every_kind_is_killed_and_nothing_acknowledged_is_lost(report: dict[str, Any]) -> None:
    assert set(report["kills_by_kind"]) == {"nats", "ingester", "actor", "gateway"}, report["kills"]
    assert (report["lost"], report["duplicated"], report["gaps"], report["misplaced"]) == (0, 0, 0, 0)
    assert report["doubled_seqs"] == 0 and report["failure_narratives"] == 0
    assert report["turns_acknowledged"] == 6 * 8 + 6  # every turn, and each conversation's last answer
    assert report["conversations_answering"] == 6 and report["conversations_unchecked"] == []
    assert report["turns_unverified"] == 0
    assert report["recovery_s"]["not_recovered"] == 0  # the gateway's included: it serves again
    assert report["peak_processes"] >= report["processes_at_start"] > 0
    assert report["ok"] and report["exit"] == 0
