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
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

import numpy as np

from mirror.cognition.embeddings import Embedder, MiniLMEmbedder, OpenAIEmbedder
from mirror.cognition.memory import DEFAULT_ANALYZER, MemoryIndex, MemoryItem
from mirror.cognition.openai_client import LLMSettings
from mirror.sim.server import SimLLMServer, SimSettings

EmbedderName = Literal["sim", "minilm"]
EMBEDDERS: tuple[EmbedderName, ...] = ("sim", "minilm")
TOP = 5
NOW = 1_800_000_000.0
RETRIEVERS = ("keyword", "vector", "fused")


@dataclass(frozen=True, slots=True)
class Dialogue:
    """One labelled dialogue: ``turns`` (its own sentences), ``small_talk`` (distractors added to
    it), the later ``question`` and ``needed`` (indices into ``turns`` the question depends on)."""

    dialogue_id: str
    turns: tuple[str, ...]
    small_talk: tuple[str, ...]
    question: str
    needed: tuple[int, ...]

    def items(self) -> list[tuple[str, str]]:
        """``(item id, sentence)`` for every sentence the dialogue stated."""
        return [(f"t{index:02d}", text) for index, text in enumerate(self.turns)] + [
            (f"c{index:02d}", text) for index, text in enumerate(self.small_talk)
        ]

    @property
    def needed_ids(self) -> frozenset[str]:
        return frozenset(f"t{index:02d}" for index in self.needed)


def load_dialogues() -> list[Dialogue]:
    """The shipped set; each dialogue gets small talk picked by its position (deterministic)."""
    data = json.loads(resources.files(__package__).joinpath("dialogues.json").read_text(encoding="utf-8"))
    chitchat, per_dialogue = data["chitchat"], data["chitchat_per_dialogue"]
    dialogues = []
    for position, entry in enumerate(data["dialogues"]):
        start = position * per_dialogue
        small_talk = tuple(chitchat[(start + offset) % len(chitchat)] for offset in range(per_dialogue))
        needed = tuple(entry["needed"])
        if not needed or not all(0 <= index < len(entry["turns"]) for index in needed):
            raise ValueError(f"dialogue {entry['id']!r}: 'needed' must name turns by index, got {needed}")
        dialogues.append(Dialogue(entry["id"], tuple(entry["turns"]), small_talk, entry["question"], needed))
    return dialogues


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


def run_memory_eval(embedder_name: EmbedderName = "sim") -> dict[str, Any]:
    """Recall@5 for keyword-only, vector-only and fused retrieval over the shipped dialogues."""
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


def run_memory_evals(embedders: Sequence[EmbedderName] = EMBEDDERS) -> dict[str, Any]:
    """:func:`run_memory_eval` for each embedder, with the figures side by side (six for both)."""
    runs = {name: run_memory_eval(name) for name in embedders}
    return {
        "figures": {f"{name}_{retriever}_recall_at_5": runs[name]["recall_at_5"][retriever]
                    for name in embedders for retriever in RETRIEVERS},
        "pooled_figures": {f"{name}_{retriever}_recall_at_5": runs[name]["pooled"]["recall_at_5"][retriever]
                           for name in embedders for retriever in RETRIEVERS},
        "runs": runs,
    }


__all__ = ["EMBEDDERS", "Dialogue", "EmbedderName", "load_dialogues", "run_memory_eval", "run_memory_evals"]
