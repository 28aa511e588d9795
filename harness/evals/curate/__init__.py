"""``mirror eval curate``: the MIRROR papers' CuRaTe benchmark, driven through the real stack over HTTP.

One module per concept:

- :mod:`.errors` — ``CurateError`` and its kinds (under the harness's ``HarnessError``);
- :mod:`.data` — the user's own copy of the four spreadsheets, read with openpyxl;
- :mod:`.assembly` — the user messages of a dialogue × scenario (pure, seeded, choices recorded);
- :mod:`.timing` — a person's pace between turns (``--timing human``);
- :mod:`.judge` — the rubric, the ``curate_rating`` schema and one rating with its provenance;
- :mod:`.store` — ``<out>/curate.duckdb``: runs, one result row per unit, abandoned conversations;
- :mod:`.drive` — one dialogue over HTTP, and the model's work read back from its events;
- :mod:`.settings` — the run's frozen settings and the option parsing (checked before anything starts);
- :mod:`.run` — the whole run: the stack (given or embedded), the judge, the units, the summary;
- :mod:`.report` — accuracy per scenario × mode against the baseline, markdown, Rich and PNG plots;
- :mod:`.compare` — ``--compare-prompts``: recompute with a changed prompt set and judge again.

May import ``mirror.actors`` (but not the CLI, which imports this), cognition, projections and
events. Nothing in the runtime imports it. openpyxl and matplotlib are imported inside the
functions that use them.
"""

from mirror.harness.evals.curate.assembly import SUFFIX, AssembledDialogue, assemble
from mirror.harness.evals.curate.compare import prompt_files, run_compare
from mirror.harness.evals.curate.data import CurateData, CurateRow, load_data
from mirror.harness.evals.curate.errors import CurateDataError, CurateDriveError, CurateError, CurateOptionError
from mirror.harness.evals.curate.run import run_curate
from mirror.harness.evals.curate.settings import CurateSettings, parse_modes, parse_scenarios

__all__ = [
    "SUFFIX", "AssembledDialogue", "CurateData", "CurateDataError", "CurateDriveError", "CurateError",
    "CurateOptionError", "CurateRow", "CurateSettings", "assemble", "load_data", "parse_modes", "parse_scenarios",
    "prompt_files", "run_compare", "run_curate",
]
