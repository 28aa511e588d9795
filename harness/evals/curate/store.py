"""The results file, ``<out>/curate.duckdb``: one row per dialogue × mode × scenario × prompt set.

Tables:

- ``runs``: one row per invocation (``run_id``), with its settings as JSON (seed, max_tokens,
  modes, scenarios, timing, the LLM and judge), started and finished times;
- ``results``: keyed by (``run_name``, ``dialogue``, ``mode``, ``scenario``, ``prompt_set``).
  ``status`` is ``started`` while the dialogue is driven, ``driven`` once its final answer is in
  (with ``error`` if the judge then failed), ``rated`` once judged (or ``failed`` with its
  ``error``). A re-run skips ``rated`` rows — that is what makes a run resumable — only judges
  ``driven`` ones (a judge that was down costs no re-driving), and
  starts any other row again under a fresh conversation id (``attempt`` + 1), recording the
  abandoned one in ``abandoned``: a half-driven conversation is never continued, since the
  turns it already holds would not be the ones a fresh dialogue would send at the same pace.
- ``abandoned``: conversation ids given up on, with why.

``prompt_set`` is ``default`` for rows of the live run (the stack's own prompt set) and the
recompute's prompt-set version for ``--compare-prompts`` rows. Every operation opens the file
and closes it again, so another process may read it between writes (DuckDB lets one process
hold a file at a time).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

__all__ = ["LIVE_PROMPT_SET", "RESULTS_FILE", "ResultRow", "ResultsStore"]

RESULTS_FILE = "curate.duckdb"
LIVE_PROMPT_SET = "default"
LOCK_RETRY_S = 10.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, run_name TEXT NOT NULL, settings JSON NOT NULL,
    started DOUBLE NOT NULL, finished DOUBLE
);
CREATE TABLE IF NOT EXISTS results (
    run_name TEXT NOT NULL, dialogue TEXT NOT NULL, mode TEXT NOT NULL, scenario INTEGER NOT NULL,
    prompt_set TEXT NOT NULL, conversation TEXT NOT NULL, branch TEXT NOT NULL DEFAULT 'main',
    attempt INTEGER NOT NULL DEFAULT 1, run_id TEXT NOT NULL, category TEXT, constraint_text TEXT,
    turns JSON, choices JSON, final_question TEXT, final_answer TEXT, rating INTEGER, rationale TEXT,
    judge_provenance JSON, tokens_in BIGINT, tokens_out BIGINT, talker_tokens_in BIGINT, talker_tokens_out BIGINT,
    talker_llm_ms DOUBLE, model_ms DOUBLE, talker_model TEXT, paused_s DOUBLE, status TEXT NOT NULL, error TEXT, updated DOUBLE NOT NULL,
    PRIMARY KEY (run_name, dialogue, mode, scenario, prompt_set)
);
CREATE TABLE IF NOT EXISTS abandoned (
    conversation TEXT NOT NULL, run_name TEXT NOT NULL, dialogue TEXT NOT NULL, mode TEXT NOT NULL,
    scenario INTEGER NOT NULL, prompt_set TEXT NOT NULL, status TEXT NOT NULL, reason TEXT, abandoned_at DOUBLE NOT NULL
);
"""
_RESULT_COLUMNS = ("run_name", "dialogue", "mode", "scenario", "prompt_set", "conversation", "branch", "attempt",
                   "run_id", "category", "constraint_text", "turns", "choices", "final_question", "final_answer",
                   "rating", "rationale", "judge_provenance", "tokens_in", "tokens_out", "talker_tokens_in",
                   "talker_tokens_out", "talker_llm_ms", "model_ms", "talker_model", "paused_s", "status", "error", "updated")


@dataclass(frozen=True, slots=True)
class ResultRow:
    """A row of ``results`` as read back (JSON columns decoded)."""

    values: dict[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @property
    def unit(self) -> tuple[str, str, int]:
        return self.values["dialogue"], self.values["mode"], int(self.values["scenario"])


class ResultsStore:
    def __init__(self, out_dir: Path) -> None:
        self.out_dir = Path(out_dir)
        self.path = self.out_dir / RESULTS_FILE

    @contextmanager
    def _connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        deadline = time.monotonic() + LOCK_RETRY_S
        while True:  # another process (a reader, a test) may hold the file for a moment
            try:
                connection = duckdb.connect(str(self.path), read_only=read_only)
                break
            except duckdb.IOException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        try:
            yield connection
        finally:
            connection.close()

    def create(self) -> ResultsStore:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        with self._connect() as connection:
            connection.execute(_SCHEMA)
        return self

    def start_run(self, run_id: str, run_name: str, settings: dict[str, Any]) -> None:
        with self._connect() as connection:
            connection.execute("INSERT INTO runs VALUES (?, ?, ?, ?, NULL)",
                               [run_id, run_name, json.dumps(settings, sort_keys=True), time.time()])

    def finish_run(self, run_id: str) -> None:
        with self._connect() as connection:
            connection.execute("UPDATE runs SET finished = ? WHERE run_id = ?", [time.time(), run_id])

    def runs(self) -> list[dict[str, Any]]:
        with self._connect() as connection:
            rows = connection.execute("SELECT run_id, run_name, settings, started, finished FROM runs ORDER BY started").fetchall()
        return [{"run_id": r[0], "run_name": r[1], "settings": json.loads(r[2]), "started": r[3], "finished": r[4]}
                for r in rows]

    def rows(self, run_name: str, prompt_set: str | None = LIVE_PROMPT_SET) -> list[ResultRow]:
        """The run's rows for one prompt set (``None``: every prompt set), in a stable order."""
        query = f"SELECT {', '.join(_RESULT_COLUMNS)} FROM results WHERE run_name = ?"
        params: list[Any] = [run_name]
        if prompt_set is not None:
            query += " AND prompt_set = ?"
            params.append(prompt_set)
        with self._connect() as connection:
            found = connection.execute(query + " ORDER BY dialogue, mode, scenario, prompt_set", params).fetchall()
        rows = []
        for values in found:
            row = dict(zip(_RESULT_COLUMNS, values, strict=True))
            for name in ("turns", "choices", "judge_provenance"):
                row[name] = None if row[name] is None else json.loads(row[name])
            rows.append(ResultRow(row))
        return rows

    def get(self, *, run_name: str, dialogue: str, mode: str, scenario: int, prompt_set: str) -> ResultRow | None:
        """One unit's row, if it has one."""
        found = [row for row in self.rows(run_name, prompt_set) if row.unit == (dialogue, mode, scenario)]
        return found[0] if found else None

    def begin(self, *, run_name: str, run_id: str, dialogue: str, mode: str, scenario: int, prompt_set: str,
              conversation_base: str, category: str, constraint: str, turns: Sequence[str],
              choices: dict[str, Any], branch: str = "main") -> str:
        """Record that a unit is being driven; the conversation id to use (a fresh attempt if one was left unfinished)."""
        key = [run_name, dialogue, mode, scenario, prompt_set]
        with self._connect() as connection:
            previous = connection.execute(
                "SELECT conversation, attempt, status, error FROM results WHERE run_name = ? AND dialogue = ? AND mode = ? "
                "AND scenario = ? AND prompt_set = ?", key).fetchone()
            attempt = 1
            if previous is not None:
                conversation, attempt, status, error = previous
                if status == "rated":
                    raise ValueError(f"{dialogue}/{mode}/s{scenario} is rated already ({conversation})")
                if branch == "main":  # a live conversation left half-driven is abandoned; a branch is resumed by recompute
                    connection.execute("INSERT INTO abandoned VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                       [conversation, run_name, dialogue, mode, scenario, prompt_set, status,
                                        error or "interrupted before it was rated", time.time()])
                    attempt += 1
                connection.execute("DELETE FROM results WHERE run_name = ? AND dialogue = ? AND mode = ? "
                                   "AND scenario = ? AND prompt_set = ?", key)
            conversation = conversation_base if branch != "main" or attempt == 1 else f"{conversation_base}-a{attempt}"
            values = dict.fromkeys(_RESULT_COLUMNS)
            values.update(run_name=run_name, dialogue=dialogue, mode=mode, scenario=scenario, prompt_set=prompt_set,
                          conversation=conversation, branch=branch, attempt=attempt, run_id=run_id, category=category,
                          constraint_text=constraint, turns=json.dumps(list(turns), ensure_ascii=False),
                          choices=json.dumps(choices), final_question=turns[-1] if turns else None,
                          status="started", updated=time.time())
            connection.execute(f"INSERT INTO results ({', '.join(_RESULT_COLUMNS)}) VALUES "
                               f"({', '.join('?' for _ in _RESULT_COLUMNS)})", [values[c] for c in _RESULT_COLUMNS])
        return conversation

    def finish(self, *, run_name: str, dialogue: str, mode: str, scenario: int, prompt_set: str, **fields: Any) -> None:
        """Set the given columns of a unit's row (``status``, ``rating``…); JSON columns take Python values."""
        for name in ("judge_provenance",):
            if name in fields and not isinstance(fields[name], str | None):
                fields[name] = json.dumps(fields[name], sort_keys=True, ensure_ascii=False)
        unknown = set(fields) - set(_RESULT_COLUMNS)
        if unknown:
            raise ValueError(f"unknown result column(s) {sorted(unknown)}")
        fields["updated"] = time.time()
        assignments = ", ".join(f"{name} = ?" for name in fields)
        with self._connect() as connection:
            connection.execute(f"UPDATE results SET {assignments} WHERE run_name = ? AND dialogue = ? AND mode = ? "
                               "AND scenario = ? AND prompt_set = ?",
                               [*fields.values(), run_name, dialogue, mode, scenario, prompt_set])

    def abandoned(self, run_name: str) -> list[dict[str, Any]]:
        with self._connect() as connection:
            rows = connection.execute("SELECT conversation, dialogue, mode, scenario, prompt_set, status, reason FROM "
                                      "abandoned WHERE run_name = ? ORDER BY abandoned_at", [run_name]).fetchall()
        return [dict(zip(("conversation", "dialogue", "mode", "scenario", "prompt_set", "status", "reason"), r, strict=True))
                for r in rows]
