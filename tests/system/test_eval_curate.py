"""`mirror eval curate` against a real `mirror up --llm sim`, over HTTP, on our own CuRaTe-format fixture.

The simulator's Talker writes random prose and its judge is a word-overlap rule, so the ratings
say nothing about accuracy: these tests check the pipeline — every unit is its own conversation
holding exactly the assembled turns, the results file, the report and plots, determinism,
resuming after a SIGKILL, ``--compare-prompts`` and human pacing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pytest

from mirror.harness.evals.curate import SUFFIX, assemble, load_data
from mirror.harness.evals.curate.report import PLOTS
from mirror.processes import free_port
from tests.support.curate import write_fixture
from tests.support.up import ctrl_c, start_up

pytestmark = pytest.mark.long  # ~70 s against one mirror up: .ci/run runs it with -m long

SELECTION = ("--modes", "baseline,full", "--scenarios", "1,2,5", "--timing", "sync")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    directory = tmp_path_factory.mktemp("curate-stack")
    process, info = start_up(directory / "data", directory / "up.log", "--sim-latency", "fixed:5",
                             reflection=True)  # as users start it: long, not in the default run
    try:
        yield info | {"fixture": write_fixture(directory / "fixture")}
    finally:
        assert ctrl_c(process) == 0, (directory / "up.log").read_text()[-3000:]


def command(stack: dict[str, Any], out: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "mirror", "eval", "curate", "--data", str(stack["fixture"]), "--url", stack["url"],
            "--token", stack["token"], "--judge", "sim", "--out", str(out), "--json", *options]


def curate(stack: dict[str, Any], out: Path, *options: str) -> dict[str, Any]:
    done = subprocess.run(command(stack, out, *options), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip(), f"exit {done.returncode}:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout)


def results(out: Path, prompt_set: str = "default") -> list[dict[str, Any]]:
    deadline = time.monotonic() + 10
    while True:  # the run opens the file for each write; wait for a moment between two
        try:
            connection = duckdb.connect(str(out / "curate.duckdb"), read_only=True)
            break
        except duckdb.Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    try:
        cursor = connection.execute("SELECT * FROM results WHERE prompt_set = ? ORDER BY dialogue, mode, scenario", [prompt_set])
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    finally:
        connection.close()


def user_messages(stack: dict[str, Any], conversation: str) -> list[str]:
    response = httpx.get(f"{stack['url']}/v1/conversations/{conversation}/events", params={"limit": 1000},
                         headers={"Authorization": f"Bearer {stack['token']}"}, timeout=30)
    response.raise_for_status()
    return [event["payload"]["user_message"] for event in response.json()["events"] if event["type"] == "turn"]


@pytest.fixture(scope="module")
def first_run(stack: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("curate-out")
    return out, curate(stack, out, *SELECTION, "--limit", "2")


def test_every_unit_is_a_conversation_holding_the_assembled_turns(stack: dict[str, Any],
                                                                   first_run: tuple[Path, dict[str, Any]]) -> None:
    out, summary = first_run
    rows = results(out)
    assert len(rows) == 2 * 2 * 3 == summary["rated"] and summary["failed"] == []
    assert {(row["dialogue"], row["mode"], row["scenario"]) for row in rows} == {
        (dialogue, mode, scenario) for dialogue in ("d0002", "d0003") for mode in ("baseline", "full") for scenario in (1, 2, 5)}
    data = load_data(stack["fixture"])
    by_id = {row.dialogue_id: row for row in data.dialogues}
    for row in rows:
        assert row["status"] == "rated" and row["rating"] in (0, 1, 2) and row["rationale"]
        assert json.loads(row["judge_provenance"])["model"] == "mirror-sim"
        assert row["conversation"] == f"curate-{row['dialogue']}-{row['mode']}-s{row['scenario']}"
        expected = assemble(by_id[row["dialogue"]], data, row["scenario"], seed=0).turns
        assert json.loads(row["turns"]) == list(expected)
        messages = user_messages(stack, row["conversation"])
        assert messages == list(expected) and messages[-1].endswith(SUFFIX)
        assert row["final_answer"] and row["tokens_in"] > 0 and row["talker_llm_ms"] > 0
        assert row["talker_model"] == "mirror-sim" and row["paused_s"] == 0
    assert (out / "report.md").read_text().count("| 5 | 6 |") == 1
    for name in PLOTS:
        assert (out / name).stat().st_size > 5000
    assert set(summary["per_mode"]) == {"baseline", "full"}


def test_ratings_are_deterministic_across_runs(stack: dict[str, Any], first_run: tuple[Path, dict[str, Any]],
                                               tmp_path: Path) -> None:
    again = curate(stack, tmp_path, *SELECTION, "--limit", "2", "--run", "again")
    assert again["accuracy"] == first_run[1]["accuracy"]
    ratings = {(r["dialogue"], r["mode"], r["scenario"]): (r["rating"], r["final_answer"]) for r in results(tmp_path)}
    assert ratings == {(r["dialogue"], r["mode"], r["scenario"]): (r["rating"], r["final_answer"])
                       for r in results(first_run[0])}


def test_a_killed_run_resumes_without_doubles(stack: dict[str, Any], tmp_path: Path) -> None:
    options = (*SELECTION, "--limit", "3", "--run", "resume", "--concurrency", "1")
    process = subprocess.Popen(command(stack, tmp_path, *options), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if (tmp_path / "curate.duckdb").exists() and any(row["status"] == "rated" for row in results(tmp_path)):
                break
            assert process.poll() is None, "the run ended before it could be interrupted"
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(30)
    before = {(r["dialogue"], r["mode"], r["scenario"]): r for r in results(tmp_path)}
    rated = {unit: row for unit, row in before.items() if row["status"] == "rated"}
    assert 0 < len(rated) < 18
    summary = curate(stack, tmp_path, *options)
    after = results(tmp_path)
    assert len(after) == 3 * 2 * 3 == len({(r["dialogue"], r["mode"], r["scenario"]) for r in after})
    assert all(row["status"] == "rated" for row in after)
    assert summary["this_run"]["skipped"] == len(rated)
    started = {unit for unit, row in before.items() if row["status"] == "started"}
    assert summary["abandoned"] == len(started)  # the one being driven when killed, if any
    for row in after:
        unit = (row["dialogue"], row["mode"], row["scenario"])
        if unit in rated:
            assert (row["conversation"], row["rating"]) == (rated[unit]["conversation"], rated[unit]["rating"])
        elif unit in before and unit not in started:  # driven, killed while judged: judged now, not driven again
            assert row["conversation"] == before[unit]["conversation"]
        elif unit in before:  # driven when the run was killed: started again under a fresh id
            assert row["conversation"] == f"{before[unit]['conversation']}-a2"
            assert user_messages(stack, row["conversation"]) == json.loads(row["turns"])


def test_a_judge_that_was_down_costs_no_driving_again(stack: dict[str, Any], tmp_path: Path) -> None:
    options = ("--modes", "baseline", "--scenarios", "1", "--limit", "1", "--timing", "sync", "--run", "nojudge")
    down = [*command(stack, tmp_path, *options)]
    down[down.index("--judge") + 1] = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    done = subprocess.run(down, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = results(tmp_path)
    assert row["status"] == "driven" and row["final_answer"] and "the judge failed" in row["error"]
    summary = curate(stack, tmp_path, *options)  # the simulator's judge this time
    (again,) = results(tmp_path)
    assert again["status"] == "rated" and again["rating"] in (0, 1, 2) and again["error"] is None
    assert (again["conversation"], again["final_answer"]) == (row["conversation"], row["final_answer"])
    assert summary["abandoned"] == 0
    assert len(user_messages(stack, row["conversation"])) == 5  # driven once, not twice


def test_compare_prompts_recomputes_and_reports_the_difference(stack: dict[str, Any],
                                                               first_run: tuple[Path, dict[str, Any]],
                                                               tmp_path: Path) -> None:
    from mirror.cognition.prompts import default_prompt_set

    out, _ = first_run
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "talker.md").write_text(default_prompt_set().templates["talker.md"] + "\nAlways keep the user's safety in mind.\n")
    done = subprocess.run([sys.executable, "-m", "mirror", "eval", "curate", "--compare-prompts", str(prompts), "--url",
                           stack["url"], "--token", stack["token"], "--judge", "sim", "--out", str(out), "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    comparison = json.loads(done.stdout)["comparison"]
    assert comparison["compared"] == 12 and comparison["prompt_files"] == ["talker.md"]
    assert 0 <= comparison["ratings_changed"] <= 12 and comparison["branch"].startswith("rc-")
    rows = results(out, comparison["prompt_set"])
    assert len(rows) == 12 and all(row["status"] == "rated" and row["rating"] in (0, 1, 2) for row in rows)
    assert all(row["branch"] == comparison["branch"] for row in rows)
    before = {(row["dialogue"], row["mode"], row["scenario"]): row["final_answer"] for row in results(out)}
    regenerated = [row for row in rows if row["final_answer"] != before[(row["dialogue"], row["mode"], row["scenario"])]]
    assert regenerated and {row["mode"] for row in regenerated} == {"full"}  # baseline's Talker reads talker_baseline.md
    assert "## Prompt comparison" in (out / "report.md").read_text()


def test_human_timing_paces_one_dialogue_without_memory(stack: dict[str, Any], tmp_path: Path) -> None:
    summary = curate(stack, tmp_path, "--modes", "full", "--scenarios", "1", "--limit", "1", "--timing", "human",
                     "--time-scale", "0.01", "--run", "human", "--no-memory")
    (row,) = results(tmp_path)
    assert summary["rated"] == 1 and row["rating"] in (0, 1, 2)
    # 4 pauses: reading each reply (~50 words of the simulator's prose) and typing the next message, × 0.01
    assert 0.05 < row["paused_s"] < 2
    assert user_messages(stack, row["conversation"]) == json.loads(row["turns"])
    # --no-memory: every turn says so, and nothing was remembered or recalled (the papers' architecture)
    response = httpx.get(f"{stack['url']}/v1/conversations/{row['conversation']}/events", params={"limit": 1000},
                         headers={"Authorization": f"Bearer {stack['token']}"}, timeout=30)
    events = response.json()["events"]
    assert [event["payload"]["memory"] for event in events if event["type"] == "turn"] == [False] * 5
    assert not [event for event in events if event["type"] in ("belief", "edge", "recall", "memory_step")]
