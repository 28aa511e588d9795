"""The memory eval's shipped data set is well formed, read in process (the eval itself, with the
simulator's embeddings over loopback HTTP: ``tests/system/test_memory_eval.py``)."""

from __future__ import annotations

from mirror.harness.evals.memory import load_dialogues


def test_the_shipped_set_has_forty_dialogues_with_distractors_and_labels() -> None:
    dialogues = load_dialogues()
    assert len(dialogues) >= 40
    assert len({dialogue.dialogue_id for dialogue in dialogues}) == len(dialogues)
    for dialogue in dialogues:
        assert dialogue.needed and len(dialogue.turns) > len(dialogue.needed)  # other facts besides the needed ones
        assert dialogue.small_talk
        assert dialogue.needed_ids <= {item_id for item_id, _ in dialogue.items()}
