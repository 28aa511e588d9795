"""The settings of one ``mirror eval curate`` run, built once by the CLI and checked before anything starts.

:meth:`CurateSettings.from_options` takes the command's options as typed (``--modes`` and
``--scenarios`` as text, ``--data`` possibly absent) and returns the checked settings, or raises
:class:`~mirror.harness.evals.curate.errors.CurateOptionError` naming the option and how to fix it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mirror.harness.evals.curate.assembly import SCENARIOS
from mirror.harness.evals.curate.errors import CurateOptionError
from mirror.harness.evals.curate.report import MODES

__all__ = ["TIMINGS", "CurateSettings", "StackLookup", "parse_modes", "parse_scenarios"]

TIMINGS = ("human", "sync")
_RUN_NAME = re.compile(r"[A-Za-z0-9_]{1,24}")


def parse_modes(text: str) -> tuple[str, ...]:
    """``"baseline,full"`` → ``("baseline", "full")``; unknown or repeated modes are refused."""
    modes = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [mode for mode in modes if mode not in MODES]
    if not modes or unknown:
        raise CurateOptionError(f"--modes {text!r}: {'unknown mode ' + ', '.join(map(repr, unknown)) if unknown else 'no mode'}; "
                                f"choose from {', '.join(MODES)} (comma-separated)")
    if len(set(modes)) != len(modes):
        raise CurateOptionError(f"--modes {text!r} names a mode twice")
    return modes


def parse_scenarios(text: str) -> tuple[int, ...]:
    """``"1-5"``, ``"1,2,5"`` or ``"2"`` → the scenarios in order; each must be one of 1–5."""
    chosen: list[int] = []
    for part in (part.strip() for part in text.split(",")):
        if not part:
            continue
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if match is None:
            raise CurateOptionError(f"--scenarios {text!r}: {part!r} is not a number or a range like 1-5")
        low, high = int(match[1]), int(match[2] or match[1])
        if low > high or low not in SCENARIOS or high not in SCENARIOS:
            raise CurateOptionError(f"--scenarios {text!r}: scenarios are 1 to 5, got {part!r}")
        chosen += [scenario for scenario in range(low, high + 1) if scenario not in chosen]
    if not chosen:
        raise CurateOptionError(f"--scenarios {text!r}: no scenario; give e.g. 1-5 or 1,2,5")
    return tuple(chosen)


STRUCTURED_OUTPUTS = ("json_schema", "json_object_schema", "json_object", "none")

StackLookup = Callable[[str | None, str | None, Path | None], tuple[str | None, str | None]]
"""``(url, token, stack_data)`` → the gateway to drive and its token. The CLI's finds a ``mirror up``
recorded in ``stack_data`` (or a missing token for a given ``url``); it may raise its own error."""


def _as_given(url: str | None, token: str | None, stack_data: Path | None) -> tuple[str | None, str | None]:
    return url, token


@dataclass(frozen=True)
class CurateSettings:
    data_dir: Path
    """The CuRaTe spreadsheets (the user's own copy)."""
    out_dir: Path
    modes: tuple[str, ...] = MODES
    scenarios: tuple[int, ...] = SCENARIOS
    limit: int | None = None
    concurrency: int = 4
    timing: str = "sync"
    time_scale: float = 1.0
    seed: int = 0
    max_tokens: int = 512
    memory: bool | None = None
    """Each conversation's long-term memory (sent with every turn): None, the stack's setting. The papers'
    architecture has none, so ``False`` compares the four modes as they measured them."""
    run_name: str = "curate"
    llm: str = "sim"
    """With no ``url``: the embedded stack's model, ``sim``, ``local`` or an OpenAI-compatible base URL."""
    llm_model: str = ""
    llm_api_key: str | None = None
    judge: str = "sim"
    """``sim`` (a loopback simulator) or an OpenAI-compatible base URL."""
    judge_model: str = ""
    judge_api_key: str | None = None
    judge_structured_output: str = "json_schema"
    """How the rating schema is sent (``LLMSettings.structured_output``): ``json_schema`` (OpenAI, vLLM,
    llama.cpp's server), ``json_object_schema`` (llama-cpp-python's server, e.g. ``mirror up --llm local``'s),
    ``json_object`` or ``none``."""
    url: str | None = None
    """A running stack's gateway; None starts an embedded stack in ``stack_data``."""
    token: str | None = None
    stack_data: Path | None = None
    sim_latency: str = "fixed:20"

    def __post_init__(self) -> None:
        if not _RUN_NAME.fullmatch(self.run_name):
            raise CurateOptionError(f"--run {self.run_name!r}: 1 to 24 letters, digits or underscores "
                                    "(it prefixes every conversation id)")
        if self.timing not in TIMINGS:
            raise CurateOptionError(f"--timing {self.timing!r}: choose human or sync")
        if self.limit is not None and self.limit < 1:
            raise CurateOptionError(f"--limit {self.limit}: at least 1")
        if self.concurrency < 1:
            raise CurateOptionError(f"--concurrency {self.concurrency}: at least 1")
        if self.time_scale < 0:
            raise CurateOptionError(f"--time-scale {self.time_scale}: must not be negative")
        if self.max_tokens < 1:
            raise CurateOptionError(f"--max-tokens {self.max_tokens}: at least 1")
        if self.judge != "sim" and not self.judge.startswith(("http://", "https://")):
            raise CurateOptionError(f"--judge {self.judge!r}: 'sim' or an OpenAI-compatible base URL (http://…/v1)")
        if self.judge_structured_output not in STRUCTURED_OUTPUTS:
            raise CurateOptionError(f"--judge-structured-output {self.judge_structured_output!r}: choose one of "
                                    + ", ".join(STRUCTURED_OUTPUTS))
        if self.url is None and self.llm not in ("sim", "local") and not self.llm.startswith(("http://", "https://")):
            raise CurateOptionError(f"--llm {self.llm!r}: 'sim', 'local' or an OpenAI-compatible base URL")
        if self.url is not None and not self.token:
            raise CurateOptionError("--url needs --token (the tenant's bearer token)")

    @classmethod
    def from_options(cls, *, data: Path | None, out: Path, modes: str, scenarios: str, compare_prompts: Path | None = None,
                     limit: int | None = None, concurrency: int = 4, timing: str = "sync", time_scale: float = 1.0,
                     seed: int = 0, max_tokens: int = 512, memory: bool | None = None, run_name: str = "curate",
                     llm: str = "sim", llm_model: str = "", llm_api_key: str | None = None, judge: str = "sim",
                     judge_model: str = "", judge_api_key: str | None = None,
                     judge_structured_output: str = "json_schema", url: str | None = None, token: str | None = None,
                     stack_data: Path | None = None, sim_latency: str = "fixed:20",
                     find_stack: StackLookup = _as_given) -> CurateSettings:
        """The settings of ``mirror eval curate``'s options, checked in the order the options are read.

        ``--data`` is needed unless the run compares prompts (``compare_prompts``, which only reads
        the run's results). ``find_stack`` resolves ``url`` and ``token`` (see :data:`StackLookup`).
        """
        if data is None and compare_prompts is None:
            raise CurateOptionError("--data DIR is needed: the directory of your CuRaTe spreadsheets "
                                    "(inputs.xlsx, facts.xlsx, trivia.xlsx, prefs.xlsx)")
        url, token = find_stack(url, token, stack_data)
        return cls(data_dir=data or Path("."), out_dir=out, modes=parse_modes(modes), scenarios=parse_scenarios(scenarios),
                   limit=limit, concurrency=concurrency, timing=timing, time_scale=time_scale, seed=seed,
                   max_tokens=max_tokens, memory=memory, run_name=run_name, llm=llm, llm_model=llm_model,
                   llm_api_key=llm_api_key, judge=judge, judge_model=judge_model, judge_api_key=judge_api_key,
                   judge_structured_output=judge_structured_output, url=url, token=token, stack_data=stack_data,
                   sim_latency=sim_latency)

    def recorded(self) -> dict[str, Any]:
        """What the ``runs`` table keeps: everything but the secrets."""
        values = {key: (str(value) if isinstance(value, Path) else value) for key, value in asdict(self).items()
                  if key not in ("token", "llm_api_key", "judge_api_key")}
        values["modes"], values["scenarios"] = list(self.modes), list(self.scenarios)
        return values
