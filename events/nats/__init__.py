"""NATS adapters of the event ports: the JetStream bus, the log's read API over NATS
request-reply (service and client), the embedded nats-server and cluster, and Mirror's NATS client.

May import the top of ``mirror.events`` (envelope, payloads, codec, ids, ports, errors) and
nats-py; never ``mirror.events.duckdb``. Nothing outside ``mirror.events`` should need
nats-py: what other layers need goes through the ports.
"""

__all__: list[str] = []
