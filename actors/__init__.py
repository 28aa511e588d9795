"""Actors: the runtime — where conversations live and the log is owned, as Ray actors.

A layer (the fifth): may import ``replay``, ``cognition``, ``projections`` and ``events``; the rooms
above it (``gateway``, ``stack``, ``harness``, ``cli``) import it, nothing below does. What lives here:

- ``settings`` — :class:`RuntimeSettings`, everything a conversation needs, frozen, built at the edge;
- ``clients`` — the connections a conversation talks through, opened through the infrastructure;
- ``conversation`` — one live conversation in plain asyncio (its settings, turns, thinking, snapshots);
- ``rebuild`` — a conversation's state rebuilt on activation: the log's snapshot + tail, then the bus;
- ``persona_mind`` — a conversation's choice of mind (the ``persona`` event a first turn records);
- ``branching`` — a turn placed by its client's transcript: its branch checked, forked or caught up first;
- ``handle`` — :class:`ConversationHandle`, the one typed way callers reach a live conversation;
- ``token_stream`` — a streamed turn: the reply's pieces as they are written, then the acknowledged result;
- ``conversation_actor`` — a conversation as a Ray actor of its own (the dedicated placement);
- ``placement/`` — where live conversations run (hosts or dedicated actors) and their handles;
- ``directory`` — live dedicated actors per node, passivation when a node holds too many;
- ``ingester_actor`` — each shard's log owner (the DuckDB ingester) as a supervised Ray actor;
- ``recompute_driver`` — recompute jobs as Ray generator tasks with bounded model concurrency;
- ``metrics_targets`` — every process serving Prometheus metrics, found through Ray's named actors (``http_sd``);
- ``log_file`` — the warnings of the runtime's Ray processes, appended to one file the stack relays;
- ``results`` (what crosses Ray back to callers) and ``errors``.

Modules are imported by path, so importing the package never starts or imports Ray.
"""

__all__: list[str] = []
