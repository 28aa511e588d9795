"""The memory eval: does recall find the earlier sentences a later question needs?

Each dialogue's stated sentences (its own turns and its share of small talk) become memory
items, one per sentence, embedded with the chosen embedder; the question is embedded the same
way and recalled with :class:`~mirror.cognition.memory.MemoryIndex`. Per dialogue, recall@5 =
(needed sentences among the top 5) / (needed sentences); the figures are the means over the
dialogues, for the keyword ranking alone, the vector ranking alone and the fused recall.

Every item is stamped with the recall's own time, so decay is 1 for all and the fused figure
measures fusion alone.

``pooled`` asks the same questions of one memory holding every dialogue's sentences (~250
items, as a long-lived conversation would hold): the per-dialogue memories have ~11 items, so
their top 5 is nearly half of everything and says little about ranking. Embedders: ``sim`` (the simulator's ``/v1/embeddings`` through a real
loopback server and :class:`OpenAIEmbedder`, 64 dimensions: fast, for tests) and ``minilm``
(the offline all-MiniLM-L6-v2 from the ``[local]`` extra, 384 dimensions: the meaningful one).

``reflection`` (unless turned off) is the same per-dialogue recall@5 before and after one
reflection's decay step has been applied to each dialogue's beliefs, by the simulator or a
given model (:mod:`.reflection`): a reflection that loses facts shows there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import numpy as np

from mirror.cognition.embeddings import Embedder, MiniLMEmbedder, OpenAIEmbedder
from mirror.cognition.memory import DEFAULT_ANALYZER, MemoryIndex, MemoryItem
from mirror.cognition.openai_client import LLMSettings
from mirror.sim.server import SimLLMServer, SimSettings

from .dialogues import NOW, RETRIEVERS, TOP, Dialogue, load_dialogues
from .reflection import ReflectionEvalSettings, reflection_column

EmbedderName = Literal["sim", "minilm"]
EMBEDDERS: tuple[EmbedderName, ...] = ("sim", "minilm")


@contextmanager
def _embedder(name: EmbedderName) -> Iterator[Embedder]:
    if name == "minilm":
        yield MiniLMEmbedder()
    elif name == "sim":
        with SimLLMServer(SimSettings()) as server:
            yield OpenAIEmbedder(LLMSettings(base_url=server.base_url, model="mirror-sim"))
    else:
        raise ValueError(f"unknown embedder {name!r}; choose one of {EMBEDDERS}")


async def _embed_all(embedder: Embedder, texts: Sequence[str]) -> tuple[dict[str, np.ndarray], str]:
    try:
        embeddings = await embedder.embed(list(texts))
    finally:
        await embedder.aclose()
    return dict(zip(texts, embeddings.vectors, strict=True)), embeddings.model


def _recall_at(found: Iterable[str], needed: frozenset[str]) -> float:
    return len(needed & set(list(found)[:TOP])) / len(needed)


def run_memory_eval(embedder_name: EmbedderName = "sim", reflection: ReflectionEvalSettings | None = None) -> dict[str, Any]:
    """Recall@5 for keyword-only, vector-only and fused retrieval over the shipped dialogues;
    with ``reflection``, the same before and after a reflection's decay step (``reflection``)."""
    dialogues = load_dialogues()
    texts = sorted({text for dialogue in dialogues for _, text in dialogue.items()} | {d.question for d in dialogues})
    started = time.perf_counter()
    with _embedder(embedder_name) as embedder:
        vectors, model = asyncio.run(_embed_all(embedder, texts))
    embed_s = time.perf_counter() - started
    totals = dict.fromkeys(RETRIEVERS, 0.0)
    missed: list[dict[str, Any]] = []
    for dialogue in dialogues:
        index = MemoryIndex(
            MemoryItem(belief_id=item_id, statement=text, embedding=vectors[text], last_reinforced=NOW)
            for item_id, text in dialogue.items()
        )
        query_vector = vectors[dialogue.question]
        keyword, vector = index.rankings(dialogue.question, query_vector)
        fused = index.recall(dialogue.question, query_vector, NOW, limit=TOP).belief_ids
        scores = {name: _recall_at(found, dialogue.needed_ids) for name, found in zip(RETRIEVERS, (keyword, vector, fused), strict=True)}
        for name in RETRIEVERS:
            totals[name] += scores[name]
        if scores["fused"] < 1.0:
            missed.append({"dialogue": dialogue.dialogue_id, **{name: round(value, 3) for name, value in scores.items()}})
    count = len(dialogues)
    figures = {name: round(totals[name] / count, 4) for name in RETRIEVERS}
    pooled = _pooled(dialogues, vectors)
    reflected = {} if reflection is None else {"reflection": reflection_column(dialogues, vectors, reflection)}
    return {
        "embedder": embedder_name,
        "model": model,
        "dimensions": int(next(iter(vectors.values())).shape[0]),
        "analyzer": DEFAULT_ANALYZER,
        "dialogues": count,
        "items_per_dialogue": round(sum(len(d.items()) for d in dialogues) / count, 1),
        "needed_per_dialogue": round(sum(len(d.needed) for d in dialogues) / count, 2),
        "recall_at_5": figures,
        "fused_beats_both": figures["fused"] > max(figures["keyword"], figures["vector"]),
        "pooled": pooled,
        "embed_s": round(embed_s, 2),
        "fused_misses": missed,
        **reflected,
    }


def _pooled(dialogues: Sequence[Dialogue], vectors: dict[str, np.ndarray]) -> dict[str, Any]:
    """Recall@5 of each retriever with every dialogue's sentences in one memory (small talk once)."""
    items: dict[str, str] = {}
    for dialogue in dialogues:
        for item_id, text in dialogue.items():
            items[f"{dialogue.dialogue_id}/{item_id}" if item_id.startswith("t") else f"chitchat/{text}"] = text
    index = MemoryIndex(MemoryItem(belief_id=key, statement=text, embedding=vectors[text], last_reinforced=NOW)
                        for key, text in items.items())
    totals = dict.fromkeys(RETRIEVERS, 0.0)
    for dialogue in dialogues:
        needed = frozenset(f"{dialogue.dialogue_id}/{item_id}" for item_id in dialogue.needed_ids)
        query_vector = vectors[dialogue.question]
        keyword, vector = index.rankings(dialogue.question, query_vector)
        fused = index.recall(dialogue.question, query_vector, NOW, limit=TOP).belief_ids
        for name, found in zip(RETRIEVERS, (keyword, vector, fused), strict=True):
            totals[name] += _recall_at(found, needed)
    return {"items": len(items), "recall_at_5": {name: round(totals[name] / len(dialogues), 4) for name in RETRIEVERS}}


def run_memory_evals(embedders: Sequence[EmbedderName] = EMBEDDERS,
                     reflection: ReflectionEvalSettings | None = None) -> dict[str, Any]:
    """:func:`run_memory_eval` for each embedder, with the figures side by side (six for both);
    with ``reflection``, its column's figures before and after too."""
    runs = {name: run_memory_eval(name, reflection) for name in embedders}
    reflected = {} if reflection is None else {"reflection_figures": {
        f"{name}_{retriever}_recall_at_5_{when}": runs[name]["reflection"][f"recall_at_5_{when}"][retriever]
        for name in embedders for retriever in RETRIEVERS for when in ("before", "after")}}
    return {
        "figures": {f"{name}_{retriever}_recall_at_5": runs[name]["recall_at_5"][retriever]
                    for name in embedders for retriever in RETRIEVERS},
        "pooled_figures": {f"{name}_{retriever}_recall_at_5": runs[name]["pooled"]["recall_at_5"][retriever]
                           for name in embedders for retriever in RETRIEVERS},
        **reflected,
        "runs": runs,
    }


__all__ = ["EMBEDDERS", "Dialogue", "EmbedderName", "ReflectionEvalSettings", "load_dialogues", "run_memory_eval",
           "run_memory_evals"]
