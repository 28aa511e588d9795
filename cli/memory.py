"""`mirror memory show|search|reviews`: a conversation's long-term memory, read over the HTTP API.

Like ``mirror replay state``, these ask a running stack (``--data``, or ``--url``/``--token``)
and print what the API answers: Rich tables for people, or with ``--json`` the API's own JSON
unchanged (so scripts and tests see exactly the numbers the gateway computed). Every command
takes ``--at SEQ`` and ``--branch``: memory as it was at any point of the log.

``show`` reads beliefs, edges and reviews in three requests; the first one fixes the seq and the
other two ask for that same seq, so the three lists are one consistent moment even while the
conversation goes on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console, RenderableType

from mirror.cli.options import BRANCH, CONVERSATION, DATA_DIR, GATEWAY_TOKEN, GATEWAY_URL, gateway_client
from mirror.cli.tables import Field, fitted

__all__ = ["memory_app"]

memory_app = typer.Typer(help="A conversation's long-term memory: beliefs, causal edges, review items, recall.", rich_markup_mode="markdown")

AT = typer.Option(None, "--at", min=0, help="The seq to look at (default: the last).")
AS_JSON = typer.Option(False, "--json", help="Print the API's JSON instead of tables.")


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _console() -> Console:
    return Console(highlight=False)


@memory_app.command("show")
def show(
    conversation: str = CONVERSATION, at: int = AT, branch: str = BRANCH, as_json: bool = AS_JSON,
    data: Path = DATA_DIR, url: str = GATEWAY_URL, token: str = GATEWAY_TOKEN,
) -> None:
    """Beliefs, causal edges and open review items, as they were right after event --at."""
    with gateway_client(data, url, token) as client:
        beliefs = client.memory_items(conversation, "beliefs", at=at, branch=branch)
        seq = beliefs["seq"]
        edges = client.memory_items(conversation, "edges", at=seq, branch=branch)
        reviews = client.memory_items(conversation, "reviews", at=seq, branch=branch)
    result = {key: beliefs[key] for key in ("conversation", "branch", "seq", "timestamp")}
    result.update(beliefs=beliefs["beliefs"], edges=edges["edges"], reviews=reviews["reviews"])
    if as_json:
        _print_json(result)
        return
    console = _console()
    console.print(f"{result['conversation']} ({result['branch']}) at seq {result['seq']}")
    console.print(_beliefs_table(console, result["beliefs"]))
    console.print(_edges_table(console, result["edges"]))
    console.print(_reviews_table(console, result["reviews"]))


@memory_app.command("search")
def search(
    conversation: str = CONVERSATION, query: str = typer.Argument(...), at: int = AT, branch: str = BRANCH,
    limit: int = typer.Option(5, "--limit", min=1, max=50, help="Most beliefs to recall."),
    as_json: bool = AS_JSON,
    data: Path = DATA_DIR, url: str = GATEWAY_URL, token: str = GATEWAY_TOKEN,
) -> None:
    """What QUERY recalls, as the Talker would get it: ranks, fused score, decay, edges, reviews."""
    with gateway_client(data, url, token) as client:
        result = client.memory(conversation, query, at=at, branch=branch, limit=limit)
    if as_json:
        _print_json(result)
        return
    console = _console()
    console.print(f"{result['conversation']} ({result['branch']}) at seq {result['seq']}: {result['query']!r}")
    console.print(_recall_table(console, result["items"]))
    if result["reviews"]:
        console.print(_reviews_table(console, result["reviews"]))
    if result["edges"]:
        console.print(_edges_table(console, result["edges"]))
    if result["rendered"]:
        console.print("what the Talker reads:", style="bold")
        console.print(result["rendered"], markup=False)


@memory_app.command("reviews")
def reviews(
    conversation: str = CONVERSATION, at: int = AT, branch: str = BRANCH, as_json: bool = AS_JSON,
    data: Path = DATA_DIR, url: str = GATEWAY_URL, token: str = GATEWAY_TOKEN,
) -> None:
    """Open review items: pairs of beliefs that contradict each other (both kept, never merged)."""
    with gateway_client(data, url, token) as client:
        result = client.memory_items(conversation, "reviews", at=at, branch=branch)
    if as_json:
        _print_json(result)
        return
    console = _console()
    console.print(_reviews_table(console, result["reviews"]))


def _rank(rank: int | None) -> str:
    return "-" if rank is None else str(rank)


# Each table fits the terminal (:mod:`.tables`): ids whole, statements wrapped; the figures a
# reader can most spare are left out first when the terminal is narrow (--json has them all).
BELIEF_FIELDS = (Field("belief", "id"), Field("kind", "id"), Field("type", "id", drop=4), Field("about", drop=3),
                 Field("statement"), Field("confidence", "number", drop=2), Field("strength", "number", drop=5),
                 Field("recalls", "number", drop=6), Field("dims", "number", drop=7))
EDGE_FIELDS = (Field("src"), Field("relation", "id"), Field("dst"), Field("origin", "id", drop=2),
               Field("confidence", "number", drop=3), Field("contradicted by", drop=1))
REVIEW_FIELDS = (Field("review", "id", drop=2), Field("seq", "number", drop=1), Field("belief", "id"),
                 Field("statement"), Field("opposes", "id"), Field("opposed statement"))
RECALL_FIELDS = (Field("#", "number"), Field("belief", "id"), Field("kind", "id", drop=6), Field("statement"),
                 Field("bm25", "number", drop=4), Field("vector", "number", drop=5), Field("fused", "number", drop=3),
                 Field("strength", "number", drop=2), Field("score", "number", drop=1))


def _beliefs_table(console: Console, beliefs: list[dict[str, Any]]) -> RenderableType:
    return fitted(console, f"beliefs ({len(beliefs)})", BELIEF_FIELDS, [
        [belief["belief_id"], belief["kind"], belief["memory_type"], belief["about"], belief["statement"],
         f"{belief['confidence']:.2f}", f"{belief['strength']:.3f}", str(belief["recall_count"]),
         str(belief["embedding_dimensions"])] for belief in beliefs])


def _edges_table(console: Console, edges: list[dict[str, Any]]) -> RenderableType:
    rows = []
    for edge in edges:
        contradicted = "; ".join(" -".join(key[:2]) + "-> " + key[2] for key in edge["contradicted_by"])
        rows.append([edge["src"], edge["relation"], edge["dst"], edge["origin"], f"{edge['confidence']:.2f}", contradicted])
    return fitted(console, f"edges ({len(edges)})", EDGE_FIELDS, rows)


def _reviews_table(console: Console, reviews: list[dict[str, Any]]) -> RenderableType:
    return fitted(console, f"open reviews ({len(reviews)})", REVIEW_FIELDS, [
        [review["review_id"], str(review["seq"]), review["belief_id"], review["statement"], review["opposed_id"],
         review["opposed_statement"]] for review in reviews])


def _recall_table(console: Console, items: list[dict[str, Any]]) -> RenderableType:
    return fitted(console, f"recalled ({len(items)})", RECALL_FIELDS, [
        [str(place), item["belief_id"], item["kind"], item["statement"], _rank(item["bm25_rank"]),
         _rank(item["vector_rank"]), f"{item['fused']:.4f}", f"{item['strength']:.3f}", f"{item['score']:.4f}"]
        for place, item in enumerate(items, start=1)])
