"""``mirror eval persona-order``: does the formulation say what the appraisal felt, appraisal first vs plan first?

Buscaroli & Tamburini found that planning the reply before the visceral appraisal gives a
"rational bias": the words said express the appraised emotion less. This eval lets anyone check
that on any model: the same scripted conversations run once with each order through a stack
over HTTP, and a judge model decides, turn by turn, whether the reply expresses the emotion of
that turn's appraisal.

- :mod:`.scripts` — the shipped scripted conversations (a few short, emotionally charged scenes);
- :mod:`.judge` — the rubric, the ``persona_order_verdict`` schema and one verdict with its provenance;
- :mod:`.run` — the settings, the stack (given or embedded), the judge, the drive and the summary.

May import ``mirror.stack``, ``mirror.sim``, cognition, projections and events (never the CLI, which
imports this). Nothing in the runtime imports it.
"""

from mirror.harness.evals.persona_order.judge import VERDICT_SCHEMA, Verdict, judge_turn
from mirror.harness.evals.persona_order.run import (
    PersonaOrderError,
    PersonaOrderSettings,
    run_persona_order,
)
from mirror.harness.evals.persona_order.scripts import SCRIPTS, Script

__all__ = [
    "SCRIPTS", "VERDICT_SCHEMA", "PersonaOrderError", "PersonaOrderSettings", "Script", "Verdict", "judge_turn",
    "run_persona_order",
]
