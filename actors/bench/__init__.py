"""``mirror bench …``: one module per benchmark, each printing JSON with the raw limit it is
measured against taken in the same run where one exists.

``ingest`` (bench ingest), ``turns`` (bench turns), ``timetravel`` (bench timetravel),
``recompute`` (bench recompute), ``live_actors`` (bench actors), ``pipeline`` (bench pipeline);
``_stacks`` (the stacks they start) and ``_stats`` (percentiles) are theirs to share.

May import everything in ``mirror.actors`` but the CLI (which imports these), and the layers
below. Nothing in the runtime imports a benchmark.
"""

__all__: list[str] = []
