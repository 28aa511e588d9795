"""``mirror bench …``: one module per benchmark, each printing JSON with the raw limit it is
measured against taken in the same run where one exists.

``ingest`` (bench ingest, with ``_sync_cost``: what sync always costs writers awaiting each ack),
``turns`` (bench turns, with ``_first_token``: a streamed turn and the model's own first token), ``persona_turns`` (bench turns --mind persona), ``timetravel`` (bench timetravel),
``recompute`` (bench recompute), ``live_actors`` (bench actors), ``live_hold`` (bench actors
--hold), ``recovery`` (bench recovery), ``storage`` (bench storage), ``recall`` (bench recall),
``embed`` (bench embed), ``codec`` (bench codec: the event codec against msgspec), ``pipeline`` (bench pipeline), ``inspector`` (bench inspector), ``reflection`` (bench reflection, with
``_script``, its scripted user), ``tenants`` (bench tenants: fair share beside a flooding tenant, and overload, with ``_slot_time``: where
the model slots' time went, from the hosts' metrics), ``report`` (bench report: the quick ones re-run, docs/benchmarks.md's table
rewritten from their JSON), ``erasure_residue`` (what DuckDB and nats-server leave in their files
after a delete, and AES-GCM's cost: the probe behind forgetting's design), ``atomic_batch`` (a step's events as
one JetStream atomic batch against one fenced publish each, on R1 and R3: why batches go to replicated streams only), ``lifecycle`` (bench
lifecycle: export and import throughput, erase time per 1,000 events against a fresh copy of
the same file), ``model_client`` (the model client's own CPU per chat, streamed chat and embedding
call), ``host_turn`` (a conversation's own CPU per thought-through turn, in one process); ``_stacks`` (the stacks they start), ``_hosts`` (conversation
hosts' figures and the progress line), ``_refusals`` (a turn refused for overload waited out as the
``openai`` SDK does, counted apart from errors), ``_cpu`` (CPU time by process role, waiting for a quiet
machine) and ``_stats`` (percentiles) are theirs to share.

Each module's docstring says the production path it exercises ("Production path: …").

Part of the harness (see :mod:`mirror.harness`): may import the stack, the simulator, the
runtime and the layers below. Nothing in the runtime imports a benchmark.
"""

__all__: list[str] = []
