"""The simulator's settings and its schedule of faults and latencies (see sim_llm).

Parsing lives here so the CLI and `SimSettings` share one set of error messages; the schedule
is a pure function of (settings, call index), which is what makes fault runs reproducible.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass

from mirror.sim.errors import InvalidSimSetting

# What each fault does to a chat call is described in sim_llm's docstring.
FAULT_KINDS = ("429", "500", "timeout", "malformed", "empty", "garbage", "no_choices", "no_usage", "echo_error", "cut")
NO_FAULT = "ok"
MAX_EMBEDDING_DIM = 8192
_LATENCY_FORMS = "fixed:MS, uniform:LO,HI or lognormal:MEDIAN_MS,SIGMA (milliseconds), e.g. fixed:50"


@dataclass(frozen=True)
class LatencyModel:
    """How long a model call takes before it answers, in milliseconds."""

    kind: str  # "fixed", "uniform" or "lognormal"
    first: float  # fixed: MS; uniform: LO; lognormal: MEDIAN_MS
    second: float = 0.0  # uniform: HI; lognormal: SIGMA

    def sample_seconds(self, rng: random.Random) -> float:
        if self.kind == "fixed":
            return self.first / 1000
        if self.kind == "uniform":
            return rng.uniform(self.first, self.second) / 1000
        return self.first * math.exp(self.second * rng.gauss(0.0, 1.0)) / 1000


def parse_latency(text: str) -> LatencyModel:
    """`fixed:MS`, `uniform:LO,HI` or `lognormal:MEDIAN_MS,SIGMA`; a clear error otherwise."""
    kind, _, arguments = text.strip().partition(":")
    try:
        numbers = [float(part) for part in arguments.split(",")] if arguments else []
    except ValueError:
        raise InvalidSimSetting("latency", text, _LATENCY_FORMS) from None
    valid = all(math.isfinite(number) and number >= 0 for number in numbers) and (
        (kind == "fixed" and len(numbers) == 1)
        or (kind == "uniform" and len(numbers) == 2 and numbers[0] <= numbers[1])
        or (kind == "lognormal" and len(numbers) == 2 and numbers[0] > 0)
    )
    if not valid:
        raise InvalidSimSetting("latency", text, _LATENCY_FORMS)
    return LatencyModel(kind, *numbers)


def parse_fault_rate(text: str) -> tuple[str, float]:
    """`KIND=RATE` as given to `--fault`, e.g. `500=0.1`."""
    kind, separator, rate = text.partition("=")
    try:
        pair = (kind.strip(), float(rate))
    except ValueError:
        pair = ("", -1.0)
    if not separator or pair[0] not in FAULT_KINDS or not 0.0 <= pair[1] <= 1.0:
        raise InvalidSimSetting("fault", text, f"KIND=RATE with KIND one of {', '.join(FAULT_KINDS)} and 0 <= RATE <= 1")
    return pair


def parse_script(text: str) -> tuple[str, ...]:
    """A comma-separated fault script as given to `--script`, e.g. `ok,429,500`."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


@dataclass(frozen=True)
class SimSettings:
    """Everything that decides how the simulator behaves; validated on construction."""

    latency: str = "fixed:0"
    fault_rates: tuple[tuple[str, float], ...] = ()
    script: tuple[str, ...] = ()
    seed: int = 0
    timeout_hang_s: float = 30.0  # how long a `timeout` fault holds the request before its 504
    retry_after_s: float | None = None  # when set, `429` faults carry a Retry-After header saying this
    model: str = "mirror-sim"
    embedding_dim: int = 64
    fault_schemas: tuple[str, ...] = ()
    """Only chat calls whose ``response_format`` is one of these schemas (by name, e.g.
    ``reflection_portrait``; a nameless llama-cpp schema by what it asks for) take the faults
    ``fault_rates`` draw; empty: every chat call. Lets a test fail one stage (reflection's calls,
    say) and leave the others alone. The script is not filtered: it goes to the next calls."""
    embedding_latency: str | None = None
    """The latency of embedding calls, when it should differ from chat's (``None``: the same).
    A real embedding call of one short message takes a few milliseconds, a chat call hundreds:
    one latency for both makes a benchmark charge memory a chat call's wait per message."""
    token_delay_ms: float = 0.0
    """A streamed answer (``stream: true``) waits this long before each token after the first,
    as a model writing its reply does; the call's latency comes before the first."""

    def __post_init__(self) -> None:
        parse_latency(self.latency)
        if self.embedding_latency is not None:
            parse_latency(self.embedding_latency)
        kinds = [kind for kind, _ in self.fault_rates]
        for kind, rate in self.fault_rates:
            parse_fault_rate(f"{kind}={rate}")
        if len(set(kinds)) != len(kinds):
            raise InvalidSimSetting("fault_rates", self.fault_rates, "each fault kind at most once")
        if sum(rate for _, rate in self.fault_rates) > 1.0 + 1e-9:
            raise InvalidSimSetting("fault_rates", self.fault_rates, "rates that add up to at most 1")
        for entry in self.script:
            if entry not in (NO_FAULT, *FAULT_KINDS):
                raise InvalidSimSetting("script entry", entry, f"one of {NO_FAULT}, {', '.join(FAULT_KINDS)}")
        if not (math.isfinite(self.timeout_hang_s) and self.timeout_hang_s >= 0):
            raise InvalidSimSetting("timeout_hang_s", self.timeout_hang_s, "a finite number of seconds >= 0")
        if self.retry_after_s is not None and not (math.isfinite(self.retry_after_s) and self.retry_after_s >= 0):
            raise InvalidSimSetting("retry_after_s", self.retry_after_s, "None or a finite number of seconds >= 0")
        if not all(isinstance(name, str) and name for name in self.fault_schemas):
            raise InvalidSimSetting("fault_schemas", self.fault_schemas, "a tuple of schema names")
        if not (math.isfinite(self.token_delay_ms) and self.token_delay_ms >= 0):
            raise InvalidSimSetting("token_delay_ms", self.token_delay_ms, "a finite number of milliseconds >= 0")
        if not self.model:
            raise InvalidSimSetting("model", self.model, "a non-empty model name")
        if not 1 <= self.embedding_dim <= MAX_EMBEDDING_DIM:
            raise InvalidSimSetting("embedding_dim", self.embedding_dim, f"1..{MAX_EMBEDDING_DIM}")


def stream_rng(seed: int, index: int, purpose: str) -> random.Random:
    """An independent PRNG per (seed, call index, purpose), so faults never shift latencies."""
    digest = hashlib.sha256(f"{seed}:{index}:{purpose}".encode()).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))


def drawn_fault(settings: SimSettings, index: int) -> str:
    """The fault the rates give the `index`-th chat call (0-based), or "ok"."""
    draw = stream_rng(settings.seed, index, "fault").random()
    cumulative = 0.0
    for kind, rate in settings.fault_rates:
        cumulative += rate
        if draw < cumulative:
            return kind
    return NO_FAULT


__all__ = [
    "FAULT_KINDS", "LatencyModel", "MAX_EMBEDDING_DIM", "NO_FAULT", "SimSettings", "drawn_fault",
    "parse_fault_rate", "parse_latency", "parse_script", "stream_rng",
]
