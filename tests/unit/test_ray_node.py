"""When ``mirror node`` counts its Ray node as lost (and exits): only on a final answer — the head
says the node is not alive, or the local raylet refuses connections — never on silence."""

from __future__ import annotations

import pytest

from mirror.stack.errors import NodeLost
from mirror.stack.ray_node import NodeLook, lost_reason

NODE = "263f9b6b6c7db53f080a1308ac5ff4d66e000312d69c6515c2a2172b"


def look(alive: bool | None, refused: bool) -> NodeLook:
    return NodeLook(NODE, "10.77.0.3:40123", alive, refused)


@pytest.mark.parametrize(("alive", "refused"), [(True, False), (None, False)])
def test_a_node_the_head_counts_alive_or_cannot_answer_about_is_not_lost(alive: bool | None, refused: bool) -> None:
    # None: the head does not answer (a partition, a restarting head): it may again, and then nothing was lost
    assert lost_reason(look(alive, refused)) is None


@pytest.mark.parametrize("refused", [False, True])
def test_a_node_the_head_declared_dead_is_lost(refused: bool) -> None:
    reason = lost_reason(look(False, refused))
    assert reason is not None and "declared it dead" in reason and NODE[:12] in reason


@pytest.mark.parametrize("alive", [True, None])
def test_a_raylet_that_refuses_connections_is_lost_before_the_head_has_noticed(alive: bool | None) -> None:
    reason = lost_reason(look(alive, True))
    assert reason is not None and "10.77.0.3:40123" in reason and "gone" in reason


def test_the_error_says_how_to_come_back_in_one_line() -> None:
    reason = lost_reason(look(False, False))
    assert reason is not None
    message = str(NodeLost("10.77.0.1:6379", reason))
    assert "\n" not in message and "ray start --address 10.77.0.1:6379" in message and "mirror node" in message
