"""`mirror bench inspector`'s count of the vectors in events (the rest runs in tests/system/)."""

from __future__ import annotations

from mirror.harness.bench.inspector import vector_chars


def test_vector_chars_counts_the_vectors_and_nothing_named_like_them() -> None:
    events = [
        {"type": "belief", "payload": {"statement": "x", "embedding": "A" * 40, "embedding_model": "sim"}},
        {"type": "recall", "payload": {"query_embedding": "B" * 12, "beliefs": [{"embedding": "C" * 8}]}},
        {"type": "persona", "payload": {"biography_embeddings": ["D" * 5, "E" * 6]}},
        {"type": "turn", "payload": {"reply": "no vector here"}, "provenance": None},
    ]
    assert vector_chars(events) == 40 + 12 + 8 + 11
