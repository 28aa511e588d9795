"""``mirror bench storage``: what one turn costs in the DuckDB log, with memory off and on.

Production path: the live conversation (:class:`Conversation`, the class the hosts run)
appending through the fenced JetStream bus, committed by the ingester process into DuckDB;
without Ray and the gateway, which write nothing to the log.

Why the log itself and not the codec: issue 12 asks for bytes per turn before and after the
one-copy change and for lean memory events, and what a user pays for is the file the ingester
writes — the ``events`` rows it committed, through the real path (the :class:`Conversation`,
the fenced JetStream bus, the ingester process, the simulator over loopback HTTP). Encoding
events in-process (the former ``scripts/bytes_per_turn.py``) missed the memory stage and the
turn path's recall events, and could not show what DuckDB makes of the bytes on disk.

Each run starts its own nats-server, ingester and simulator in a throwaway directory, so the
file holds exactly one conversation: the same scripted messages (facts stated, restated and
contradicted), ``full`` mode, thinking awaited after every turn. Once the log has caught up
with the stream the ingester is stopped (DuckDB allows one writer per file) and the file is
read here: ``octet_length(data)`` per event type, the events decoded for their model output
and vector bytes, and the file size after a ``CHECKPOINT`` against an empty file with the same
schema (DuckDB allocates whole blocks, so a short conversation's file is mostly that floor).
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from mirror.actors.conversation import Conversation
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.openai_client import LLMSettings
from mirror.cognition.turn import TurnRequest
from mirror.events.codec import decode
from mirror.events.duckdb.log import SCHEMA
from mirror.events.envelope import Event
from mirror.events.ids import StreamKey
from mirror.events.nats.infrastructure import NatsInfrastructure
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Belief, Monologue, Narrative, Turn
from mirror.sim.server import SimLLMServer, SimSettings
from mirror.stack.processes import IngesterProcess

__all__ = ["MESSAGES", "StorageBenchConfig", "model_output_chars", "run_storage_bench", "vector_bytes"]

MESSAGES = (
    "I never eat peanuts: I am allergic.", "Tell me about rivers.", "And mountains?",
    "What should I cook tonight?", "I moved to Lyon last spring.", "Do you remember where I live?",
    "My sister Ann visits next week.", "She loves hiking.", "Suggest a weekend plan for us.",
    "Can we avoid anything with nuts?", "What is the weather like in the Alps in May?",
    "I work as a nurse, nights mostly.", "How do I sleep better after a night shift?",
    "Tell me a short story about a river.", "Why do rivers meander?", "What did I say about Ann?",
    "Recommend a book for the train.", "I prefer non-fiction.", "What about history?",
    "Summarise what you know about me.",
)
"""The scripted user: the same 20 messages the in-process measurement used, so the figures compare."""

KEY = StreamKey("bench", "storage")


@dataclass(frozen=True)
class StorageBenchConfig:
    """``turns`` of the scripted conversation (the messages repeat past 20), in ``mode``."""

    turns: int = 20
    mode: str = "full"
    embedding_dim: int = 384
    """The simulator's vector size: 384 is the offline MiniLM's (1,536 float32 bytes a vector),
    the smallest a real deployment stores; the simulator's own default (64) would understate
    the vectors' share four times over."""
    think_timeout_s: float = 120.0
    """Longest wait for one turn's thinking (and, at the end, for the log to catch up)."""


def model_output_chars(event: Event) -> int:
    """Characters a model wrote into the payload: the reply, the monologue, the narrative and a
    belief's statement. The first three are the in-process script's definition, kept so the
    figures compare; a belief's statement is the extraction's output."""
    payload = event.payload
    if isinstance(payload, Turn):
        return len(payload.reply)
    if isinstance(payload, Monologue):
        return len(payload.reasoning) + len(payload.memory) + len(payload.goal)
    if isinstance(payload, Narrative):
        return len(payload.text)
    if isinstance(payload, Belief):
        return len(payload.statement)
    return 0


def vector_bytes(event: Event) -> int:
    """Bytes of the vectors an event carries (a belief's embedding, a recall's query vector).

    Every ``bytes`` field of a payload is a float32 vector (:mod:`mirror.events.vectors`), so
    they are found by type rather than by name: a new event type with a vector is counted too.
    """
    return sum(
        len(value) for field in dataclasses.fields(event.payload)
        if isinstance(value := getattr(event.payload, field.name), bytes)
    )


@contextmanager
def _log_stack(workdir: Path) -> Iterator[tuple[str, IngesterProcess]]:
    """A nats-server and an ingester process writing ``workdir/log.duckdb``; both stopped after."""
    server = EmbeddedNats(workdir / "nats").start()
    try:
        ingester = IngesterProcess(server.url, workdir / "log.duckdb").start()
        try:
            yield server.url, ingester
        finally:
            ingester.stop()
    finally:
        server.stop()


async def _converse(settings: RuntimeSettings, config: StorageBenchConfig) -> dict[str, Any]:
    """The scripted conversation through the real :class:`Conversation`, then wait for the log."""
    conversation = await Conversation(KEY, settings).start()
    unfinished = 0
    started = time.perf_counter()
    try:
        for index in range(config.turns):
            await conversation.turn(TurnRequest(MESSAGES[index % len(MESSAGES)]))
            if not await conversation.wait_idle(config.think_timeout_s):
                unfinished += 1
        # The last append's stream seq: committed means every event of the run is in the file.
        caught_up = await conversation.log.wait_committed(conversation.head.fence, config.think_timeout_s)
    finally:
        await conversation.stop()
    return {
        "thinking_unfinished": unfinished, "log_caught_up": caught_up,
        "seconds": round(time.perf_counter() - started, 2), "last_seq": conversation.state.last_seq,
    }


def _empty_file_bytes(path: Path) -> int:
    """Size of a log file with the schema and no rows, after a checkpoint: the floor DuckDB's
    block allocation puts under any file, subtracted before dividing by turns."""
    with duckdb.connect(str(path)) as con:
        con.execute(SCHEMA)
        con.execute("CHECKPOINT")
    return path.stat().st_size


def _measure(path: Path, turns: int, empty_bytes: int) -> dict[str, Any]:
    """Read the committed log: bytes by type, model output, vectors, the file on disk."""
    with duckdb.connect(str(path)) as con:
        con.execute("CHECKPOINT")  # the WAL folded in, so the file size is what stays
        rows = con.execute(
            "SELECT type, count(*), sum(octet_length(data)) FROM events GROUP BY type ORDER BY type"
        ).fetchall()
        events = [decode(data) for (data,) in con.execute("SELECT data FROM events ORDER BY seq").fetchall()]
        snapshots = con.execute("SELECT count(*), coalesce(sum(octet_length(state)), 0) FROM snapshots").fetchone()
    wal = path.with_name(path.name + ".wal")
    file_bytes = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    total = sum(int(size) for _, _, size in rows)
    vectors: Counter[str] = Counter()
    for event in events:
        if size := vector_bytes(event):
            vectors[event.type] += size
    output = sum(map(model_output_chars, events))
    raw_responses = sum(len(e.provenance.response or "") for e in events if e.provenance is not None)
    vector_total = sum(vectors.values())
    beliefs = [e.payload for e in events if isinstance(e.payload, Belief)]
    return {
        "events": len(events),
        "events_by_type": {kind: int(count) for kind, count, _ in rows},
        "bytes": total,
        "bytes_per_turn": round(total / turns),
        "bytes_per_turn_by_type": {kind: round(int(size) / turns) for kind, _, size in rows},
        "model_output_chars_per_turn": round(output / turns),
        "bytes_per_output_char": round(total / max(1, output), 2),
        "raw_response_chars_per_turn": round(raw_responses / turns),
        "vector_bytes": vector_total,
        "vector_bytes_by_type": dict(sorted(vectors.items())),
        "vector_share": round(vector_total / max(1, total), 3),
        "belief_operations": dict(sorted(Counter(belief.operation for belief in beliefs).items())),
        "beliefs_with_vector": sum(1 for belief in beliefs if belief.embedding),
        "snapshots": int(snapshots[0]) if snapshots else 0,
        "snapshot_bytes": int(snapshots[1]) if snapshots else 0,
        "file_bytes": file_bytes,
        "empty_file_bytes": empty_bytes,
        "file_bytes_per_turn": round((file_bytes - empty_bytes) / turns),
    }


def _run(config: StorageBenchConfig, memory: bool) -> dict[str, Any]:
    """One conversation in a fresh directory, memory on or off, measured once the ingester stopped."""
    with tempfile.TemporaryDirectory(prefix="mirror-bench-storage-") as data:
        workdir = Path(data)
        with SimLLMServer(SimSettings(embedding_dim=config.embedding_dim)) as sim, _log_stack(workdir) as (nats_url, ingester):
            settings = RuntimeSettings(infrastructure=NatsInfrastructure(nats_url),
                mode=config.mode, memory=memory,
                llm=LLMSettings(base_url=sim.base_url, model="mirror-sim", timeout_s=30),
            )
            driven = asyncio.run(_converse(settings, config))
            ingester.stop()  # the file has one writer; reading it needs the ingester gone
        measured = _measure(workdir / "log.duckdb", config.turns, _empty_file_bytes(workdir / "empty.duckdb"))
    return {"memory": memory, **driven, **measured}


def run_storage_bench(config: StorageBenchConfig) -> dict[str, Any]:
    """Both runs, memory off then on, and what memory adds per turn."""
    off = _run(config, memory=False)
    on = _run(config, memory=True)
    return {
        "turns": config.turns, "mode": config.mode, "embedding_dim": config.embedding_dim,
        "memory_off": off, "memory_on": on,
        "memory_added_bytes_per_turn": on["bytes_per_turn"] - off["bytes_per_turn"],
    }
