"""`mirror chaos`'s checker on constructed logs, its recovery figures, and its option validation."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.cli.app import main
from mirror.harness.chaos import ChaosOptionError, ChaosSettings, check_conversation, parse_kill_kinds
from mirror.harness.chaos.checker import Acknowledged, is_failure_narrative
from mirror.harness.chaos.driver import error_detail, error_kind
from mirror.harness.chaos.report import percentile, recovery


def turn(seq: int, message: str) -> dict[str, Any]:
    return {"seq": seq, "type": "turn", "payload": {"user_message": message, "reply": f"reply to {message}"}}


def event(seq: int, kind: str, **payload: Any) -> dict[str, Any]:
    return {"seq": seq, "type": kind, "payload": payload}


def ack(seq: int, message: str, sent_s: float = 0.0, acked_s: float = 0.1, conversation: str = "c") -> Acknowledged:
    return Acknowledged(conversation, seq, message, sent_s, acked_s)


def test_a_clean_log_passes() -> None:
    events = [turn(1, "m1"), event(2, "monologue"), event(3, "narrative", text="The user talks of the sea."), turn(4, "m2")]
    check = check_conversation("c", [ack(1, "m1"), ack(4, "m2")], events)
    assert check.ok and (check.lost, check.duplicated, check.gaps, check.misplaced) == ([], [], [], [])
    assert check.last_seq == 4 and check.events == 4


def test_an_acknowledged_turn_missing_from_the_log_is_lost() -> None:
    check = check_conversation("c", [ack(1, "m1"), ack(2, "m2")], [turn(1, "m1")])
    assert check.lost == [2] and not check.ok


def test_an_acknowledged_turn_logged_twice_is_duplicated() -> None:
    check = check_conversation("c", [ack(1, "m1")], [turn(1, "m1"), turn(2, "m1")])
    assert check.duplicated == [1] and check.lost == [] and not check.ok


def test_an_acknowledged_turn_at_another_seq_is_misplaced() -> None:
    check = check_conversation("c", [ack(2, "m1")], [turn(1, "m1"), turn(2, "other")])
    assert check.misplaced == [2] and check.lost == [] and not check.ok


def test_a_missing_seq_is_a_gap_and_a_repeated_seq_is_doubled() -> None:
    gapped = check_conversation("c", [ack(1, "m1"), ack(4, "m2")], [turn(1, "m1"), event(2, "monologue"), turn(4, "m2")])
    assert gapped.gaps == [3] and not gapped.ok
    doubled = check_conversation("c", [ack(1, "m1")], [turn(1, "m1"), event(1, "monologue")])
    assert doubled.doubled_seqs == [1] and not doubled.ok


def test_a_logged_attempt_that_was_never_acknowledged_is_counted_not_failed() -> None:
    events = [turn(1, "chaos r c turn 1 try 1"), turn(2, "chaos r c turn 1 try 2"), turn(3, "someone else")]
    check = check_conversation("c", [ack(2, "chaos r c turn 1 try 2")], events, message_prefix="chaos r ")
    assert check.unacknowledged_logged == 1 and check.ok


def test_a_narrative_replaced_by_a_failure_is_caught() -> None:
    failed = event(2, "thinker_failed", stage="controller", error_type="timeout", message="model call timed out after 30 s")
    quoted = check_conversation("c", [ack(1, "m1")], [turn(1, "m1"), failed,
                                                      event(3, "narrative", text="model call timed out after 30 s")])
    assert quoted.failure_narratives == [3] and quoted.thinker_failed == 1 and not quoted.ok
    kept = check_conversation("c", [ack(1, "m1")], [turn(1, "m1"), failed,
                                                    event(3, "narrative", text="The user plans a dinner.")])
    assert kept.failure_narratives == [] and kept.ok  # a failure followed by a real narrative is fine


@pytest.mark.parametrize(("text", "failure"), [
    ("", True), ("   ", True),
    ("Traceback (most recent call last):\n  File ...", True),
    ("LLMTimeout: ReadTimeoutError: no answer", True),
    ("The user mentioned an error in their code yesterday.", False),
    ("They fear the Error of their ways.", False),
])
def test_what_reads_as_a_failure(text: str, failure: bool) -> None:
    assert is_failure_narrative(text, []) is failure


def test_an_unanswering_conversation_fails_its_check() -> None:
    check = check_conversation("c", [ack(1, "m1")], [turn(1, "m1")])
    check.answers = False
    assert not check.ok


def test_recovery_counts_only_turns_sent_after_the_kill() -> None:
    acks = [ack(1, "a", sent_s=9.0, acked_s=12.0, conversation="x"),  # in flight at the kill: not counted
            ack(2, "b", sent_s=10.5, acked_s=11.0, conversation="y"),
            ack(3, "c", sent_s=10.2, acked_s=14.0, conversation="x")]
    assert recovery(10.0, acks) == (1.0, 4.0)
    assert recovery(20.0, acks) == (None, None)


def test_percentiles_are_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0 and percentile([3.0, 1.0, 2.0], 0.99) == 3.0


def test_kill_kinds_are_validated() -> None:
    assert parse_kill_kinds("nats, Actor") == ("nats", "actor") and parse_kill_kinds("") == ()
    with pytest.raises(ChaosOptionError, match="valid kinds are nats, ingester, actor, gateway"):
        parse_kill_kinds("nats,raylet")
    with pytest.raises(ChaosOptionError, match="twice"):
        parse_kill_kinds("nats,nats")
    with pytest.raises(ChaosOptionError):
        ChaosSettings(url="http://x", token="t", every_s=0)


def test_an_unknown_kill_kind_is_exit_2_before_anything_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """No stack in --data and an unreachable --url: the answer is about --kill, so nothing was tried first.
    The `mirror` command's own entry point, in this process: what a shell would see is its exit status."""
    monkeypatch.setattr(sys, "argv", ["mirror", "chaos", "--data", str(tmp_path), "--url", "http://127.0.0.1:9",
                                      "--token", "t", "--kill", "nats,raylet", "--json"])
    with pytest.raises(SystemExit) as exited:
        main()
    out, err = capsys.readouterr()
    assert exited.value.code == 2 and out == ""
    assert "unknown kind 'raylet'" in err and "nats, ingester, actor, gateway" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("response, detail", [
    (httpx.Response(503, json={"detail": "NATS is unavailable (nats://127.0.0.1:4222); retry in 2 s"}),
     "NATS is unavailable (nats://127.0.0.1:4222); retry in 2 s"),
    (httpx.Response(502, text="bad\n  gateway"), "bad gateway"),
    (httpx.Response(409, json={"detail": "x" * 300}), "x" * 99 + "…"),
    (httpx.Response(500, json=["not", "a", "dict"]), "['not', 'a', 'dict']"),
])
def test_an_http_error_is_recorded_with_what_its_body_said(response: httpx.Response, detail: str) -> None:
    assert error_kind(response) == f"http {response.status_code}"
    assert error_detail(response) == detail
