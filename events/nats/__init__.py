"""NATS adapters of the event ports.

``jetstream`` (``JetStreamBus``: fenced, deduplicated appends; stream settings), ``sealing``
(each message sealed with its conversation's data key, kept in a key-value bucket and erased
on a forget: crypto-shredding of the stream's copy), ``_publisher``
(pipelined publishes behind the fence), ``_atomic`` (a step's events as one atomic batch, on a
replicated stream), ``_pull`` (a pull consumer's batches), ``_client``
(Mirror's NATS client: raw handlers, reconnect waits), ``log_service`` (the log's read API over
NATS request-reply: ``LogService`` in the ingester, ``LogClient`` elsewhere), ``infrastructure``
(``NatsInfrastructure``: how a process opens the bus and its shards' logs), ``key_value``
(a JetStream key-value bucket for small shared records: the persona store), ``counters``
(the shared-counters port on a key-value bucket, changed by compare-and-set: the tenants' limits), ``server`` and
``cluster`` (the embedded nats-server and a cluster of them on loopback).

May import the top of ``mirror.events`` (envelope, payloads, codec, ids, ports, errors) and
nats-py; never ``mirror.events.duckdb``. Nothing outside ``mirror.events`` should need
nats-py: what other layers need goes through the ports.
"""

__all__: list[str] = []
