"""A real Prometheus (Debian's ``prometheus``) scrapes a running `mirror up` through the one scrape
config docs/operations.md gives (``http_sd`` at the gateway's ``/metrics/targets``): every
component is found and up, and PromQL over its HTTP API counts exactly the turns made and the
latency histogram's observations of them. `mirror top --once` then shows the same stack."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.processes import free_port, terminate_process
from tests.support.up import ctrl_c, start_up
from tests.support.waits import until

PROMETHEUS = shutil.which("prometheus")
TURNS = 7
CONVERSATIONS = ("metered-a", "metered-b")

pytestmark = [
    pytest.mark.long,
    pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus is not installed (apt-get install prometheus; "
                                                  ".ci/run installs it)"),
]


def scrape_config(gateway: str) -> str:
    """The docs' scrape config, with intervals short enough for a test."""
    return f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: mirror
    http_sd_configs:
      - url: {gateway}/metrics/targets
        refresh_interval: 1s
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("prometheus")
    process, info = start_up(root / "data", root / "up.log")
    try:
        yield {**info, "root": root}
    finally:
        ctrl_c(process)


@pytest.fixture(scope="module")
def prometheus(stack: dict[str, Any]) -> Iterator[str]:
    root: Path = stack["root"]
    config = root / "prometheus.yml"
    config.write_text(scrape_config(stack["url"]))
    port = free_port()
    assert PROMETHEUS is not None
    process = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={root / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=(root / "prometheus.log").open("ab"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            assert process.poll() is None, (root / "prometheus.log").read_text()[-3000:]
            try:
                return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False
        until(ready, "prometheus ready", timeout=60, poll_s=0.2)
        yield url
    finally:
        terminate_process(process, 15)


def query(prometheus: str, promql: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": promql}, timeout=10)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["data"]["result"])


def value(prometheus: str, promql: str) -> float | None:
    result = query(prometheus, promql)
    return float(result[0]["value"][1]) if result else None


def test_prometheus_finds_every_component_and_counts_the_turns(stack: dict[str, Any], prometheus: str) -> None:
    with httpx.Client(base_url=stack["url"], headers={"Authorization": f"Bearer {stack['token']}"}, timeout=60) as http:
        for index in range(TURNS):
            conversation = CONVERSATIONS[index % len(CONVERSATIONS)]
            answer = http.post(f"/v1/conversations/{conversation}/turns", json={"message": f"message {index}"})
            assert answer.status_code == 200, answer.text
        # Unauthenticated, and it lists what Prometheus scrapes (hosts exist once a conversation needed one).
        targets = httpx.get(f"{stack['url']}/metrics/targets", timeout=10).json()
        assert {target["labels"]["component"] for target in targets} == {"gateway", "host", "ingester"}, targets
    # Every component up, through the targets the gateway lists: the gateway processes, the hosts, the ingester.
    def components() -> dict[str, int]:
        ups = query(prometheus, "up")
        found: dict[str, int] = {}
        for series in ups:
            if series["value"][1] == "1":
                found[series["metric"]["component"]] = found.get(series["metric"]["component"], 0) + 1
        return found if found == listed else {}
    listed: dict[str, int] = {}
    for target in targets:
        listed[target["labels"]["component"]] = listed.get(target["labels"]["component"], 0) + 1
    until(components, f"every listed target scraped and up ({listed})", timeout=90, poll_s=0.5)
    assert listed["ingester"] == 1 and listed["gateway"] >= 1 and listed["host"] >= 1

    turns = until(lambda: value(prometheus, "sum(mirror_turns_total)") == TURNS or None,
                  f"Prometheus counting {TURNS} turns", timeout=60, poll_s=0.5)
    assert turns
    assert value(prometheus, "sum(mirror_turn_duration_seconds_count)") == TURNS
    assert value(prometheus, 'sum(mirror_turn_duration_seconds_bucket{le="+Inf"})') == TURNS
    assert value(prometheus, "sum(mirror_turn_overhead_seconds_count)") == TURNS
    # The gateway counted the same requests under the route's template (never the conversation's id).
    route = until(lambda: value(prometheus, 'sum(mirror_http_requests_total{route="/v1/conversations/{conversation}'
                                            '/turns",method="POST",status="200"})') == TURNS or None,
                  "the gateways' count of the turn route", timeout=60, poll_s=0.5)
    assert route
    labels = {value for series in query(prometheus, '{__name__=~"mirror_.*"}') for value in series["metric"].values()}
    assert not any(conversation in label for label in labels for conversation in CONVERSATIONS), labels
    # The Talker's model calls by stage, with tokens; the ingester committed what the turns appended.
    assert value(prometheus, 'sum(mirror_model_call_duration_seconds_count{stage="talker"})') == TURNS
    assert (value(prometheus, 'sum(mirror_model_tokens_total{stage="talker",type="output",tenant="default"})') or 0) > 0
    until(lambda: (value(prometheus, "sum(mirror_ingested_events_total)") or 0) >= 2 * TURNS or None,
          "the ingester's commits scraped", timeout=60, poll_s=0.5)
    assert value(prometheus, "sum(mirror_conversations_live)") == len(CONVERSATIONS)


def test_mirror_top_once_shows_the_running_stack(stack: dict[str, Any], prometheus: str) -> None:
    shown = subprocess.run([sys.executable, "-m", "mirror", "top", "--once", "--url", stack["url"]],
                           capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    assert "default" in shown.stdout and "talker" in shown.stdout, shown.stdout
    assert "gateway" in shown.stdout and "ingester" in shown.stdout, shown.stdout
