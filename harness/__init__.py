"""The harness: what measures and tries Mirror from outside, as its users would.

- ``bench/`` — ``mirror bench …``: one module per benchmark, each printing JSON beside the raw
  limit measured in the same run;
- ``evals/`` — ``mirror eval …``: quality evaluations (``memory``, ``curate``);
- ``chaos/`` — ``mirror chaos``: drive conversations over HTTP while killing processes, then check the log;
- ``_http_events`` — one paged read of a conversation's events over HTTP (chaos and curate);
- ``errors``.

May import the stack (to start one), the simulator, the gateway, the runtime, the layers below
and the root helpers; only the CLI imports it. Benchmarks may use the raw broker and DuckDB to
measure the limit beside Mirror's path.
"""

__all__: list[str] = []
