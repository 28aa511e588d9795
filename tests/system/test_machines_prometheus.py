"""A real Prometheus (Debian's ``prometheus``) scrapes a two-machine deployment through the one
scrape config docs/operations.md gives: ``http_sd`` at the head's gateway ``/metrics/targets``.
The head (``mirror up``: a gateway, a conversation host, shard 0's ingester) and a worker
(``mirror node``: its gateway, shard 1's ingester, a host Ray placed there) are network namespaces
with addresses of their own (``tests/support/netns.py``); every component of both is found, on
its machine's address, and up, and the turns made through both gateways are counted on both
shards' ingesters."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mirror.processes import free_port, terminate_process
from tests.support.deployment import Deployment
from tests.support.netns import SKIP_REASON, Machines, netns_permitted
from tests.support.waits import until
from tests.system.test_prometheus import query, scrape_config, value

PROMETHEUS = shutil.which("prometheus")
HOSTS = ["h", "w1"]

pytestmark = [
    pytest.mark.machines,
    pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus is not installed (apt-get install prometheus)"),
]


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    if not netns_permitted():
        pytest.skip(SKIP_REASON)
    with Machines(HOSTS, tmp_path) as machines:
        deployed = Deployment(machines, ingest={"h": ["0"], "w1": ["1"]}, hosts=2)
        try:
            deployed.start()
            yield deployed
        finally:
            deployed.stop()


def test_prometheus_scrapes_every_component_of_both_machines(deployment: Deployment, tmp_path: Path) -> None:
    head, worker = deployment.head, deployment.workers[0]
    for index, gateway in enumerate(deployment.gateways()):  # turns on both shards, through both gateways
        for tenant in ("default", "acme"):
            answer = httpx.post(f"{gateway}/v1/conversations/scraped-{index}/turns", json={"message": "hello"},
                                headers={"Authorization": f"Bearer {deployment.tokens[tenant]}"}, timeout=120)
            assert answer.status_code == 200, answer.text
    listed = httpx.get(f"{deployment.gateway(head)}/metrics/targets", timeout=10).json()
    where = {(target["labels"]["component"], target["targets"][0].rsplit(":", 1)[0]) for target in listed}
    assert {("gateway", head.address), ("gateway", worker.address), ("ingester", head.address),
            ("ingester", worker.address)} <= where, listed
    assert any(component == "host" for component, _ in where), listed

    config = tmp_path / "prometheus.yml"
    config.write_text(scrape_config(deployment.gateway(head)))
    port = free_port()
    assert PROMETHEUS is not None
    process = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                f"--web.listen-address=127.0.0.1:{port}"],
                               stdout=(tmp_path / "prometheus.log").open("ab"), stderr=subprocess.STDOUT)
    prometheus = f"http://127.0.0.1:{port}"
    try:
        def every_target_up() -> bool:
            assert process.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            try:
                ups = query(prometheus, "up == 1")
            except httpx.HTTPError:
                return False
            return {series["metric"]["instance"] for series in ups} >= {target["targets"][0] for target in listed}

        until(every_target_up, f"every listed target of both machines scraped and up ({len(listed)})", timeout=120,
              poll_s=0.5)
        machines = {series["metric"]["instance"].rsplit(":", 1)[0] for series in query(prometheus, "up == 1")}
        assert machines == {head.address, worker.address}
        # Both shards' ingesters committed the turns (default on shard 0 at the head, acme on shard 1 at the worker).
        until(lambda: all((value(prometheus, f'sum(mirror_ingested_events_total{{shard="{shard}"}})') or 0) >= 2
                          for shard in ("0", "1")), "both shards' commits scraped", timeout=60, poll_s=0.5)
        assert value(prometheus, "sum(mirror_turns_total)") == 4
    finally:
        terminate_process(process, 15)
