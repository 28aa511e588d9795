"""The embedded broker runs with the sync setting it was given, as the running server reports it.

nats-server's monitoring endpoint ``/varz`` shows the JetStream config it runs with:
``sync_always`` true for ``sync_interval: always``, and ``sync_interval`` in nanoseconds (its
default two minutes unless set). Each server here gets a monitoring port (``-m``) besides its
usual flags, so the figure read is the process's own, not the file Mirror wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.events.errors import InvalidSyncInterval
from mirror.events.nats.cluster import EmbeddedNatsCluster, cluster_member
from mirror.events.nats.server import EmbeddedNats
from mirror.processes import free_port

TWO_MINUTES_NS = 120 * 10**9


def jetstream_config(monitor_port: int) -> dict[str, Any]:
    varz = httpx.get(f"http://127.0.0.1:{monitor_port}/varz", timeout=10).json()
    config: dict[str, Any] = varz["jetstream"]["config"]
    return config


def monitored(server: EmbeddedNats) -> int:
    """Give ``server`` (not yet started) a monitoring port; returns it."""
    port = free_port()
    server.extra_args = (*server.extra_args, "-m", str(port))
    return port


def test_the_embedded_server_syncs_before_every_acknowledgement_by_default(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    port = monitored(server)
    with server:
        config = jetstream_config(port)
    assert config.get("sync_always") is True
    assert config["store_dir"] == str(tmp_path / "nats" / "jetstream")  # the flags still apply beside the file


def test_a_relaxed_interval_is_the_one_the_server_runs_with(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats", sync_interval="1m30s")  # not nats-server's own default of 2m
    port = monitored(server)
    with server:
        config = jetstream_config(port)
    assert not config.get("sync_always") and config["sync_interval"] == 90 * 10**9


def test_every_node_of_a_cluster_syncs_always_and_keeps_it_when_started_again(tmp_path: Path) -> None:
    cluster = EmbeddedNatsCluster(tmp_path / "nats", 3)
    ports = [monitored(node) for node in cluster.nodes]
    with cluster:
        assert all(jetstream_config(port).get("sync_always") is True for port in ports)
        cluster.kill(1)
        cluster.start_node(1)  # as the supervisor does: the same node, its config written again
        assert jetstream_config(ports[1]).get("sync_always") is True


def test_a_member_of_a_cluster_over_machines_syncs_always_too(tmp_path: Path) -> None:
    """`mirror nats --routes` (one member per machine): alone here, it listens without a meta leader."""
    cluster_port = free_port()
    member = cluster_member(tmp_path / "nats", name="mirror-m0", routes=(f"nats://127.0.0.1:{cluster_port}",),
                            port=free_port(), cluster_port=cluster_port)
    port = monitored(member)
    with member:
        assert jetstream_config(port).get("sync_always") is True


@pytest.mark.parametrize("bad", ["soon", "10", "0s"])
def test_a_bad_value_is_refused_before_anything_starts(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InvalidSyncInterval, match=repr(bad)):
        EmbeddedNats(tmp_path / "single", sync_interval=bad)
    with pytest.raises(InvalidSyncInterval, match=repr(bad)):
        EmbeddedNatsCluster(tmp_path / "cluster", 3, sync_interval=bad)
    assert list(tmp_path.iterdir()) == []  # no store, no config file, no process
