"""The DuckDB event log and the ingester that fills it from JetStream.

``log`` (``DuckDBEventLog``: the tables, exactly-once commits, reads), ``ingester`` (pull,
commit batch + offset in one transaction, ack; serves the read API), ``_ingest_batch``
(columnar batches for Arrow inserts), ``_regression`` (the ingester's check that its stream is
still the one the log was filled from), ``_erasure`` (forgetting a conversation or a tenant: the tombstones,
the rows, a fresh copy of the file), ``_forgetting`` (the log's forgetting methods: tombstones
remembered, one sweep for many), ``_sweeper`` (the ingester's one sweeping task: what queued
while a sweep ran shares the next one's copy), ``retention`` (the ingester's sweeper of conversations
idle beyond their tenant's policy), ``_reads`` (the range reads' SQL: records, the index, records
that mention a text, the newest snapshot). May import the top of ``mirror.events`` and
``mirror.events.nats`` (the ingester is the bridge from the stream to the file).
"""

__all__: list[str] = []
