"""`mirror replay state|diff|verify` and `mirror recompute`.

``state`` and ``diff`` ask the HTTP API of a running stack. ``verify`` runs *here*, with this
checkout's pipeline code and prompts, over events read from the log's owner through NATS —
it is the check to run after touching the pipelines. ``recompute`` starts a job through the
API and follows its progress. :mod:`.app` registers ``replay_app`` as ``mirror replay`` and
``recompute`` as a command of its own.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import typer

from mirror.cli.options import (
    BRANCH,
    CONVERSATION,
    DATA_DIR,
    GATEWAY_TOKEN,
    GATEWAY_URL,
    SHARD_MAP,
    Mode,
    gateway_client,
    identifier,
)
from mirror.cli.prompts import TEMPLATE_COUNT, read_prompt_dir

# The commands import the stack, NATS, cognition, the replay layer and rich.progress in their bodies: see app.py.
__all__ = ["persona_templates", "recompute", "recompute_templates", "replay_app", "verify_lines"]

replay_app = typer.Typer(help="Look back at conversations: state at any event, diffs, deterministic replay.", rich_markup_mode="markdown")

PROMPTS = typer.Option(None, "--prompts", help="Prompt-set directory (default: the set a branch's fork recorded, else the built-in set).")


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


@replay_app.command("state")
def state(
    conversation: str = CONVERSATION,
    at: int = typer.Option(None, "--at", min=0, help="The seq to look at (default: the last)."),
    at_time: str = typer.Option(None, "--at-time", help="Or an ISO 8601 time, e.g. 2026-11-23T12:00:00Z."),
    branch: str = BRANCH,
    data: Path = DATA_DIR, url: str = GATEWAY_URL, token: str = GATEWAY_TOKEN,
) -> None:
    """Print the conversation's state exactly as it was right after event --at (JSON)."""
    with gateway_client(data, url, token) as client:
        _print_json(client.state(conversation, at=at, at_time=at_time, branch=branch))


@replay_app.command("diff")
def diff(
    conversation: str = CONVERSATION,
    source: int = typer.Option(None, "--from", min=0, help=(
        "Seq of the earlier state (default: 0 on one branch; with --to-branch, the head of --from-branch).")),
    target: int = typer.Option(None, "--to", min=0, help="Seq of the later state (default: the last)."),
    from_branch: str = typer.Option("main", "--from-branch", callback=identifier("branch")),
    to_branch: str = typer.Option("main", "--to-branch", callback=identifier("branch")),
    as_json: bool = typer.Option(False, "--json", help="Print the diff as JSON instead of a summary."),
    data: Path = DATA_DIR, url: str = GATEWAY_URL, token: str = GATEWAY_TOKEN,
) -> None:
    """What changed between two states (two seqs, or two branches): the narrative, and every belief,
    edge and review item added, removed or changed (with the fields that changed).

    Across branches (--to-branch rc-…) it compares the two heads unless --from/--to say otherwise.
    """
    from mirror.replay.diff import diff_lines

    with gateway_client(data, url, token) as client:
        result = client.diff(conversation, source=source, target=target, from_branch=from_branch, to_branch=to_branch)
    if as_json:
        _print_json(result)
        return
    typer.echo("\n".join(diff_lines(result)))


@replay_app.command("verify")
def verify(
    conversation: str = typer.Argument(None, help="Conversation id (or --all).", callback=identifier("conversation")),
    all_conversations: bool = typer.Option(False, "--all", help="Every conversation of the tenant."),
    tenant: str = typer.Option(None, "--tenant", help="Tenant (default: the stack's default tenant).",
                               callback=identifier("tenant")),
    branch: str = BRANCH,
    prompts: Path = PROMPTS,
    nats_url: str | None = typer.Option(None, "--nats-url", envvar="MIRROR_NATS_URL",
                                 help="NATS of the log's owner (default: the stack found in --data)."),
    shard: str = typer.Option(None, "--shard", help="Log shard (default: the tenant's, by the stack's shard map or --shard-map)."),
    shard_map: list[str] = SHARD_MAP,
    as_json: bool = typer.Option(False, "--json", help="One JSON report per conversation."),
    data: Path = DATA_DIR,
) -> None:
    """Re-run every recorded step with this checkout's pipelines and report any divergence.

    Makes no model calls: every request is answered from the responses recorded in the log,
    matched by fingerprint. A recompute branch is verified with the prompt set its fork
    recorded (--prompts overrides it); main with --prompts or the built-in set. Exit status 1
    when anything diverges (use it in CI), 2 for a conversation or branch the log does not hold.
    """
    from mirror.cognition.persona.prompting import persona_prompt_set
    from mirror.cognition.prompts import load_prompt_set
    from mirror.events.shards import DEFAULT_SHARD, ShardMap
    from mirror.stack.embedded import running_stack

    if conversation is None and not all_conversations:
        raise ValueError("name a conversation or pass --all")
    running = running_stack(data) or {}
    nats_url = nats_url or running.get("nats_url")
    if not nats_url:
        raise ValueError(f"no stack runs for {data} and no --nats-url given")
    prompt_set = load_prompt_set(prompts) if prompts else None
    # The persona templates of DIR/persona/ when it holds them; else a branch's recorded set, or the built-in one.
    persona_prompts = persona_prompt_set(prompts) if prompts and (prompts / "persona").is_dir() else None
    tenant = tenant or running.get("tenant") or "default"
    shards = ShardMap.parse(shard_map or running.get("shard_map", []), default=running.get("shard", DEFAULT_SHARD))
    reports = asyncio.run(_verify(nats_url, shard or shards.shard_of(tenant), tenant, conversation, branch, prompt_set,
                                  persona_prompts))
    if not reports and not as_json:
        typer.echo(f"tenant {tenant!r} has no conversations yet: nothing to verify")
    for report in reports:
        if as_json:
            typer.echo(json.dumps(report.as_dict(), ensure_ascii=False, default=str))
        else:
            typer.echo("\n".join(verify_lines(report.as_dict())))
    if any(not report.ok for report in reports):
        raise typer.Exit(1)


SHOWN_DIVERGENCES = 5


def verify_lines(report: dict[str, Any]) -> list[str]:
    """A verify report (:meth:`~mirror.replay.VerifyReport.as_dict`) as a person reads it: a verdict
    line, then, when it diverges, how the prompt set differs from the recorded one and the first
    divergences."""
    where = f"{report['tenant']}/{report['conversation']}/{report['branch']}"
    divergences = report["divergences"]
    verdict = "ok" if report["ok"] else f"DIVERGES ({len(divergences)})"
    lines = [f"{where}: {verdict} — {report['steps']} steps replayed, {report['recorded_answers']} recorded answers, "
             f"{report['model_calls']} model calls, {report['unverifiable']} unverifiable"]
    lines += [f"    prompts: {note}" for note in report.get("prompt_notes", ())]
    lines += [f"    seq {divergence['seq']}: {divergence['reason']}" for divergence in divergences[:SHOWN_DIVERGENCES]]
    if len(divergences) > SHOWN_DIVERGENCES:
        lines.append(f"    … and {len(divergences) - SHOWN_DIVERGENCES} more (--json lists them all)")
    return lines


PERSONA_DIRECTORY = "persona"
"""The sub-directory of a prompt directory that holds persona templates (``mirror recompute``)."""


def recompute_templates(directory: Path) -> dict[str, str]:
    """The templates a recompute sends: those in ``directory``; a file that is no template is refused
    (``controler.md`` would otherwise be dropped without a word and the recompute run unchanged)."""
    from mirror.cognition.errors import PromptSetError
    from mirror.cognition.prompts import TEMPLATES

    found = read_prompt_dir(directory, TEMPLATES)
    if found.unknown:
        raise PromptSetError(f"{directory}: {', '.join(found.unknown)} {'is' if len(found.unknown) == 1 else 'are'} "
                             f"not a template (templates are {', '.join(TEMPLATES)}); "
                             "rename or move it (`mirror prompts diff` compares the directory with the default set)")
    if not found.templates and not (directory / PERSONA_DIRECTORY).is_dir():  # persona/ alone: only those change
        raise PromptSetError(f"{directory} holds none of the templates ({', '.join(TEMPLATES)}); "
                             f"`mirror prompts export {directory}` writes the default set there to edit")
    return dict(found.templates)


def persona_templates(directory: Path) -> dict[str, str]:
    """The persona templates a recompute sends: those in ``directory/persona/`` (none without it);
    a file there that is no persona template is refused."""
    from mirror.cognition.errors import PromptSetError
    from mirror.cognition.persona.prompting import PERSONA_TEMPLATES

    if not (directory / PERSONA_DIRECTORY).is_dir():
        return {}
    found = read_prompt_dir(directory / PERSONA_DIRECTORY, PERSONA_TEMPLATES)
    if found.unknown:
        raise PromptSetError(f"{directory / PERSONA_DIRECTORY}: {', '.join(found.unknown)} "
                             f"{'is' if len(found.unknown) == 1 else 'are'} not a persona template (persona templates "
                             f"are {', '.join(PERSONA_TEMPLATES)})")
    return dict(found.templates)


async def _verify(nats_url: str, shard: str, tenant: str, conversation: str | None, branch: str,
                  prompt_set: Any, persona_prompts: Any = None) -> list[Any]:
    from mirror.events.nats.infrastructure import NatsInfrastructure
    from mirror.replay import verify_conversations

    connections = await NatsInfrastructure(nats_url, shard=shard).connect(name="mirror-verify")
    try:
        return await verify_conversations(connections.log(tenant), tenant, conversation, branch, prompt_set,
                                          persona_prompts)
    finally:
        await connections.close()


def recompute(
    prompts: Path = typer.Option(
        ..., "--prompts", help=f"Directory of the changed templates: any of the {TEMPLATE_COUNT} (`mirror prompts export DIR` "
                               "writes them all); those it lacks stay the stack's."),
    conversations: list[str] = typer.Option(None, "--conversation", help="Only these (repeatable; default: all).",
                                            callback=identifier("conversation")),
    from_seq: int = typer.Option(1, "--from-seq", min=1, help="Re-think from this seq on (fork after from_seq - 1)."),
    mode: Mode | None = typer.Option(None, "--mode", help="Thinking mode on the branch (default: as recorded)."),
    counterfactual: bool = typer.Option(False, "--counterfactual", help="Regenerate the Talker's replies too."),
    branch: str = typer.Option(None, "--branch", help="Branch name (default: derived from the prompts and options).",
                               callback=identifier("branch")),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Most model calls in flight at once."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    data: Path = DATA_DIR, url: str = GATEWAY_URL, token: str = GATEWAY_TOKEN,
) -> None:
    """Re-think a tenant's conversations on a branch with a changed prompt set (main is never written).

    --prompts needs only the templates that change, as `POST /v1/recompute` does. Runs on the
    stack's Ray cluster as tasks, with a progress bar here; interrupted runs resume when started
    again with the same options (the branch continues, nothing is duplicated).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    body = {"prompts": recompute_templates(prompts), "persona_prompts": persona_templates(prompts),
            "conversations": conversations or [], "from_seq": from_seq,
            "mode": mode, "counterfactual": counterfactual, "branch": branch,
            "concurrency": concurrency}
    with gateway_client(data, url, token) as client:
        status = client.start_recompute(body)
        with Progress(TextColumn("recompute → {task.fields[branch]}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), transient=as_json) as bar:
            task = bar.add_task("recompute", total=None, branch=status["branch"])
            while status["status"] == "running":
                time.sleep(0.25)
                status = client.recompute_status(status["job"])
                bar.update(task, total=status["total"], completed=status["done"])
    if status["status"] == "failed":
        raise ValueError(f"recompute failed: {status['error']}")
    from mirror.actors.recompute_driver import summary

    if as_json:
        _print_json(status["report"])
    else:
        typer.echo(summary(status["report"]))
