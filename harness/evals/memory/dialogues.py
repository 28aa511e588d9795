"""The memory eval's labelled set: :class:`Dialogue` and :func:`load_dialogues` (``dialogues.json``).

Each dialogue's stated sentences (its own turns and its share of small talk) are what a
conversation would remember; the later ``question`` needs the sentences named by ``needed``.
Recall is asked at :data:`NOW` (every item stamped with it, so decay is 1 for all) for the
:data:`TOP` items, by each of :data:`RETRIEVERS`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

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


__all__ = ["NOW", "RETRIEVERS", "TOP", "Dialogue", "load_dialogues"]
