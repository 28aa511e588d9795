"""Embeddings: the :class:`Embedder` port and its adapters.

``port`` (the :class:`Embedder` protocol, :class:`Embeddings` with their provenance — model,
dimensions, request fingerprint, latency, tokens — and the float32 byte packing events use),
``openai`` (:class:`OpenAIEmbedder`, any OpenAI-compatible ``/v1/embeddings`` through the chat
client's HTTP discipline; the simulator is one), ``minilm`` (:class:`MiniLMEmbedder`, offline
all-MiniLM-L6-v2 in numpy, from the ``[local]`` extra) and ``_bert`` (its encoder).

Part of the cognition layer: may import the rest of ``mirror.cognition`` and ``mirror.events``,
numpy, and (inside :class:`MiniLMEmbedder` only, so the extra stays optional) ``tokenizers`` and
``safetensors``; never the runtime (``actors``, ``replay``).
"""

from .minilm import MINILM_DIMENSIONS, MINILM_MAX_TOKENS, MINILM_MODEL, MiniLMEmbedder, minilm_installed
from .openai import OpenAIEmbedder
from .port import (
    FLOAT32_LE,
    Embedder,
    Embeddings,
    cosine_similarity,
    embedding_fingerprint,
    pack_vector,
    unpack_vector,
)

__all__ = [
    "FLOAT32_LE",
    "MINILM_DIMENSIONS",
    "MINILM_MAX_TOKENS",
    "MINILM_MODEL",
    "Embedder",
    "Embeddings",
    "MiniLMEmbedder",
    "OpenAIEmbedder",
    "cosine_similarity",
    "embedding_fingerprint",
    "minilm_installed",
    "pack_vector",
    "unpack_vector",
]
