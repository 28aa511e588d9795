"""What DuckDB and nats-server leave in their files after a delete: the probe behind Mirror's
choices — physical deletion for the log, crypto-shredding for the stream's copy — and what
sealing the stream costs (docs/operations.md, "Forgetting and retention").

Deleting a row or a message does not by itself remove its bytes from a database file or a
broker's block file. This probe writes two conversations' worth of records, each carrying its
conversation's canary string between random bytes (so no compression can hide it), interleaved
as the ingester writes them, deletes one conversation by each means the backends offer, and
counts the canary's occurrences in every file under the data directory, bytewise, after each
step. It also times crypto-shredding's cost: AES-GCM per event with a per-conversation key, and
(:func:`sealing_cost`) the sealing the bus does, per event and in the bus's appends, on and off.

Run it with ``python -m mirror.harness.bench.erasure_residue`` (prints JSON). :func:`scan` is the
scanner the erasure tests use too.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from mirror.events.duckdb.log import SCHEMA

__all__ = ["crypto_cost", "duckdb_residue", "nats_residue", "occurrences", "scan", "sealing_cost"]

RECORDS = 2000
"""Records per conversation: enough to fill several DuckDB row groups' blocks and a NATS block."""
FILLER = 300
"""Random bytes either side of the canary in each record (~650 bytes a record, like an event)."""


def scan(directory: str | os.PathLike[str], needle: bytes) -> dict[str, int]:
    """How many times ``needle`` occurs in each file under ``directory`` (files with none left out).

    Bytewise, whole files, every file: a database, its WAL, a broker's blocks and indexes, KV
    buckets, logs. Reads in chunks with an overlap so a needle across a chunk border counts once."""
    found: dict[str, int] = {}
    chunk = 1 << 20
    for path in sorted(Path(directory).rglob("*")):
        if not path.is_file():
            continue
        count, tail = 0, b""
        try:
            with path.open("rb") as file:
                while block := file.read(chunk):
                    data = tail + block
                    count += data.count(needle)
                    # Keep the last len-1 bytes: a match needs at least one new byte, so none counts twice.
                    tail = data[-(len(needle) - 1):] if len(needle) > 1 else b""
        except OSError:
            continue  # a file removed while scanning (a WAL folded by a checkpoint)
        if count:
            found[str(path.relative_to(directory))] = count
    return found


def occurrences(directory: str | os.PathLike[str], needle: bytes) -> int:
    return sum(scan(directory, needle).values())


def _record(canary: bytes) -> bytes:
    return os.urandom(FILLER) + canary + os.urandom(FILLER)


def _rows(tenant: str, conversation: str, canary: bytes, start: int) -> list[list[Any]]:
    return [[tenant, conversation, "main", start + i, f"{conversation}-{start + i}", "turn", 1, time.time(), i,
             start + i, _record(canary)] for i in range(1, RECORDS + 1)]


def duckdb_residue(root: Path) -> dict[str, Any]:
    """Delete one conversation's rows from a DuckDB file and count its canary after each step."""
    gone, kept = b"CANARY-GONE-duck-7f3e", b"CANARY-KEPT-duck-19ab"
    directory = root / "duckdb"
    directory.mkdir()
    path = directory / "log.duckdb"
    con = duckdb.connect(str(path))
    con.execute(SCHEMA)
    gone_rows, kept_rows = _rows("t", "gone", gone, 0), _rows("t", "kept", kept, 0)
    for offset in range(0, RECORDS, 100):  # interleaved batches, as the ingester commits them
        con.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        gone_rows[offset:offset + 100] + kept_rows[offset:offset + 100])
    steps: list[dict[str, Any]] = []

    def step(name: str, action: Callable[[], object]) -> None:
        started = time.perf_counter()
        action()
        steps.append({"step": name, "seconds": round(time.perf_counter() - started, 4),
                      "gone": scan(directory, gone), "kept": occurrences(directory, kept)})

    step("inserted, checkpointed", lambda: con.execute("CHECKPOINT"))
    step("DELETE (before checkpoint)", lambda: con.execute("DELETE FROM events WHERE conversation = 'gone'"))
    step("CHECKPOINT", lambda: con.execute("CHECKPOINT"))
    step("FORCE CHECKPOINT", lambda: con.execute("FORCE CHECKPOINT"))
    step("VACUUM + CHECKPOINT", lambda: (con.execute("VACUUM events"), con.execute("CHECKPOINT")))
    step("more inserts of the kept conversation", lambda: (
        con.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        _rows("t", "kept", kept, RECORDS)), con.execute("CHECKPOINT")))

    def rewrite() -> None:
        con.execute("BEGIN")
        con.execute("CREATE TABLE events_rewritten AS SELECT * FROM events")
        con.execute("DROP TABLE events")
        con.execute("ALTER TABLE events_rewritten RENAME TO events")
        con.execute("COMMIT")
        con.execute("CHECKPOINT")

    step("table rewritten (CREATE AS SELECT, DROP, RENAME) + CHECKPOINT", rewrite)
    con.close()

    def copy_database() -> None:
        fresh = directory / "fresh.duckdb"
        with duckdb.connect() as copier:
            copier.execute(f"ATTACH '{path}' AS old (READ_ONLY)")
            copier.execute(f"ATTACH '{fresh}' AS fresh")
            copier.execute("COPY FROM DATABASE old TO fresh")
            copier.execute("DETACH old")
            copier.execute("DETACH fresh")
        os.replace(fresh, path)

    step("COPY FROM DATABASE into a fresh file, swapped in", copy_database)
    return {"records_per_conversation": RECORDS, "duckdb": duckdb.__version__, "steps": steps}


async def _nats_residue(root: Path) -> dict[str, Any]:
    import nats

    from mirror.events.nats.server import EmbeddedNats

    directory = root / "nats"
    results: dict[str, Any] = {"records_per_conversation": RECORDS}
    with EmbeddedNats(directory) as server:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        for name, erase in (("PURGE", False), ("ERASE", True)):
            gone, kept = f"CANARY-GONE-{name}-c41d".encode(), f"CANARY-KEPT-{name}-88e0".encode()
            stream = f"PROBE_{name}"
            await js.add_stream(name=stream, subjects=[f"probe{name}.>"])
            gone_seqs = []
            for _ in range(RECORDS):
                gone_seqs.append((await js.publish(f"probe{name}.t.gone.main", _record(gone))).seq)
                await js.publish(f"probe{name}.t.kept.main", _record(kept))
            steps: list[dict[str, Any]] = []

            def record(step: str, seconds: float, gone: bytes = gone, kept: bytes = kept,
                       steps: list[dict[str, Any]] = steps) -> None:
                steps.append({"step": step, "seconds": round(seconds, 4),
                              "gone": scan(directory, gone), "kept": occurrences(directory, kept)})

            record("published", 0.0)
            started = time.perf_counter()
            if erase:
                for seq in gone_seqs:  # STREAM.MSG.DELETE without no_erase: overwritten with random bytes
                    await js.delete_msg(stream, seq)
                record("STREAM.MSG.DELETE (secure erase) each message", time.perf_counter() - started)
                started = time.perf_counter()
            await js.purge_stream(stream, subject=f"probe{name}.t.gone.main")
            record("STREAM.PURGE of the subject", time.perf_counter() - started)
            results[name] = steps
        await nc.close()
        server.stop()
        server.start()
        for name in ("PURGE", "ERASE"):
            gone = f"CANARY-GONE-{name}-c41d".encode()
            results[name].append({"step": "server restarted", "seconds": 0.0, "gone": scan(directory, gone),
                                  "kept": occurrences(directory, f"CANARY-KEPT-{name}-88e0".encode())})
    return results


def nats_residue(root: Path) -> dict[str, Any]:
    """Purge (and securely erase) one conversation's messages from a file stream; count what is left."""
    return asyncio.run(_nats_residue(root))


def crypto_cost(events: int = 20_000, size: int = 650) -> dict[str, Any]:
    """Per-event cost of AES-GCM (a per-conversation 256-bit key, a random 96-bit nonce), against
    the codec's own cost for the same events: what crypto-shredding would add to every write and read."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # only this measurement needs it

    from mirror.events.codec import decode, encode
    from mirror.events.envelope import Event
    from mirror.events.payloads import Turn

    key = AESGCM(AESGCM.generate_key(bit_length=256))
    payload = os.urandom(size)
    started = time.perf_counter()
    sealed = [key.encrypt(os.urandom(12), payload, b"t.c.main") for _ in range(events)]
    encrypt_us = (time.perf_counter() - started) / events * 1e6
    nonce = os.urandom(12)
    blob = key.encrypt(nonce, payload, None)
    started = time.perf_counter()
    for _ in range(events):
        key.decrypt(nonce, blob, None)
    decrypt_us = (time.perf_counter() - started) / events * 1e6
    event = Event(tenant="t", conversation="c", branch="main", seq=1, turn=1, timestamp=time.time(),
                  payload=Turn(user_message="x" * (size // 2), reply="y" * (size // 2)))
    started = time.perf_counter()
    for _ in range(events):
        decode(encode(event))
    codec_us = (time.perf_counter() - started) / events * 1e6
    return {"events": events, "payload_bytes": size, "encrypt_us": round(encrypt_us, 2),
            "decrypt_us": round(decrypt_us, 2), "codec_round_trip_us": round(codec_us, 2),
            "overhead_bytes": len(sealed[0]) - size + 12}


async def _sealed_appends(root: Path, events: int, rounds: int) -> dict[str, Any]:
    """The bus's fenced ``append_many`` of the ingest bench's workload, sealing on and off taking
    turns (a fresh tenant each round, so each conversation's key is made in the round): this
    process's CPU µs per event, median of the rounds; the difference per event and, since a key is
    made once per conversation, per conversation of 30 events."""
    import dataclasses
    import statistics

    from mirror.events.nats.jetstream import JetStreamBus, StreamSettings
    from mirror.events.nats.server import EmbeddedNats
    from mirror.harness.bench.ingest import IngestBenchConfig, bench_tenants, workload

    cpu: dict[str, list[float]] = {"sealed": [], "plain": []}
    per_conversation = 30
    with EmbeddedNats(root / "nats-seal") as server:
        buses = {name: await JetStreamBus.connect(server.url, StreamSettings(seal=name == "sealed"))
                 for name in cpu}
        try:
            for round_ in range(rounds + 1):  # the first warms up (and makes the key stream): not counted
                for name, bus in buses.items():
                    batches = workload(IngestBenchConfig(events=events, conversations=max(1, events // per_conversation)),
                                       bench_tenants(1)[0])
                    heads = [(await bus.head(key)).with_last_seq(0) for key, _ in batches]
                    started = time.process_time()
                    await bus.append_many([(key, batch, head) for (key, batch), head in zip(batches, heads, strict=True)])
                    if round_:
                        cpu[name].append((time.process_time() - started) / events * 1e6)
        finally:
            for bus in buses.values():
                await bus.close()
    medians = {name: round(statistics.median(values), 1) for name, values in cpu.items()}
    return {"events_per_round": events, "rounds": rounds, "append_cpu_us_per_event": medians,
            "append_cpu_us_per_event_all": {name: [round(v, 1) for v in values] for name, values in cpu.items()},
            "sealing_cpu_us_per_event": round(medians["sealed"] - medians["plain"], 1),
            "sealing_cpu_us_per_conversation": round((medians["sealed"] - medians["plain"]) * per_conversation),
            "events_per_conversation": per_conversation,
            "settings": dataclasses.asdict(StreamSettings())}


def sealing_cost(root: Path, events: int = 3000, rounds: int = 4) -> dict[str, Any]:
    """What sealing the stream's copy costs (:mod:`mirror.events.nats.sealing`): CPU µs per event to
    seal and to open the ingest bench's events, against the codec's encode and decode of the same
    events; and the bus's fenced appends with sealing on and off, A/B in one run."""
    from mirror.events.codec import decode, encode
    from mirror.events.nats.sealing import DataKey
    from mirror.harness.bench.ingest import IngestBenchConfig, workload

    plain = [event for _, batch in workload(IngestBenchConfig(events=events, conversations=events // 30))
             for event in batch]
    records = [encode(event) for event in plain]
    sealer = DataKey.new().sealer()

    def per_record(work: Callable[[Any], object], data: list[Any]) -> float:
        started = time.process_time()
        for item in data:
            work(item)
        return round((time.process_time() - started) / len(data) * 1e6, 2)

    sealed = [sealer.seal(record) for record in records]
    return {"records": len(records), "mean_record_bytes": round(sum(map(len, records)) / len(records)),
            "seal_us": per_record(sealer.seal, records), "open_us": per_record(sealer.open, sealed),
            "encode_us": per_record(encode, plain),
            "decode_us": per_record(decode, records),
            "bus": asyncio.run(_sealed_appends(root, events, rounds))}


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="mirror-erasure-"))
    try:
        print(json.dumps({"duckdb": duckdb_residue(root), "nats": nats_residue(root), "crypto": crypto_cost(),
                          "sealing": sealing_cost(root)}, indent=1))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
