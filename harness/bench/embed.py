"""`mirror bench embed`: the offline embedder's speed on this machine.

Production path: the embedder port a stack started with ``embedder="minilm"`` uses for memory
(:class:`MiniLMEmbedder`, its ``embed`` and the encoder ``embed_sync`` it runs in a worker
thread); the default ``endpoint`` embedder asks an HTTP server instead, which this does not time.

Times :class:`MiniLMEmbedder` (all-MiniLM-L6-v2 in numpy) the way memory uses it: one sentence
at a time, as a turn's statement is embedded (p50 ms, sentences/s), and 32 at a time, as a
backfill or an eval embeds (sentences/s). The single-sentence path is also timed through the
async port, which adds the hop to a worker thread. The encoder is measured by itself
(``embed_sync``); tokenising is included, loading is reported apart. CPU time is reported
beside wall time, with the load average, because this machine's two cores are shared: wall
time says what a caller waited, CPU time what the encoder costs.

Needs the ``[local]`` extra (the model and its tokenizer).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

from mirror.cognition.embeddings import MiniLMEmbedder
from mirror.harness.bench._stats import percentile

_SUBJECTS = ("My sister", "The landlord", "Our team lead", "A friend from school", "The doctor", "My neighbour",
             "Grandfather", "The new intern")
_FACTS = (
    "moved to Lisbon last spring and is looking for a flat near the river",
    "is allergic to peanuts, so please never bring the satay again",
    "prefers tea to coffee in the mornings but drinks espresso after lunch",
    "plays the cello in an amateur orchestra that rehearses on Thursdays",
    "said the quarterly report is due on the fourteenth, not the twentieth",
    "has a dog called Biscuit who is afraid of thunderstorms",
    "is training for a half marathon in October and runs before work",
    "thinks the budget for the garden project was far too optimistic",
)


def default_texts(count: int = 64) -> list[str]:
    """Memory-like statements of 12-20 words (16-25 tokens), all different."""
    return [f"{_SUBJECTS[index % len(_SUBJECTS)]} {_FACTS[(index // len(_SUBJECTS) + index) % len(_FACTS)]}"
            f" (note {index})." for index in range(count)]


def run_embed_bench(
    texts: Sequence[str] | None = None, batch: int = 32, repeats: int = 3, blas_threads: int = 1
) -> dict[str, Any]:
    """Sentences/s at batch 1 and at ``batch``, and per-sentence latency, over ``repeats`` passes."""
    texts = list(texts) if texts is not None else default_texts()
    if not texts or batch < 1 or repeats < 1:
        raise ValueError("need at least one text, batch >= 1 and repeats >= 1")
    load_average = os.getloadavg()[0]
    started = time.perf_counter()
    embedder = MiniLMEmbedder(batch_size=batch, blas_threads=blas_threads)
    load_s = time.perf_counter() - started
    embedder.embed_sync(texts[:batch])  # warm up: first-touch of the weights, BLAS thread start

    single_ms: list[float] = []
    cpu_started = time.process_time()
    for _ in range(repeats):
        for text in texts:
            started = time.perf_counter()
            embedder.embed_sync([text])
            single_ms.append((time.perf_counter() - started) * 1000)
    single_cpu_ms = (time.process_time() - cpu_started) * 1000 / len(single_ms)

    batched_s: list[float] = []
    tokens = 0
    cpu_started = time.process_time()
    for _ in range(repeats):
        started = time.perf_counter()
        for start in range(0, len(texts), batch):
            _, counted = embedder.embed_sync(texts[start:start + batch])
            tokens += counted
        batched_s.append(time.perf_counter() - started)
    batched_cpu_ms = (time.process_time() - cpu_started) * 1000 / (repeats * len(texts))

    async def through_the_port() -> list[float]:
        latencies = []
        for text in texts:
            embeddings = await embedder.embed([text])
            latencies.append(embeddings.latency_ms)
        return latencies

    port_ms = asyncio.run(through_the_port())
    return {
        "benchmark": "embed",
        "model": embedder.model,
        "dimensions": embedder.dimensions,
        "cpus": os.cpu_count(),
        "blas_threads": blas_threads,
        "load_average_1m": round(load_average, 1),
        "texts": len(texts),
        "repeats": repeats,
        "batch": batch,
        "mean_tokens_per_text": round(tokens / (repeats * len(texts)), 1),
        "load_s": round(load_s, 3),
        "batch1_sentences_per_s": round(len(single_ms) / (sum(single_ms) / 1000), 1),
        "single_p50_ms": round(statistics.median(single_ms), 2),
        "single_p99_ms": round(percentile(single_ms, 0.99), 2),
        "single_p50_ms_async_port": round(statistics.median(port_ms), 2),
        "single_cpu_ms_per_sentence": round(single_cpu_ms, 2),
        f"batch{batch}_sentences_per_s": round(len(texts) / statistics.median(batched_s), 1),
        f"batch{batch}_cpu_ms_per_sentence": round(batched_cpu_ms, 2),
    }


__all__ = ["default_texts", "run_embed_bench"]
