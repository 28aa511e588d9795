"""The embedded stack on one machine (``mirror up``, ``mirror demo``) and the child processes
the CLI starts (an ingester per shard, the simulator).

May import the conversation runtime, the gateway and ``mirror.actors.llm`` (to start what it
runs), and the layers below; the CLI and the benchmarks import it.
"""

__all__: list[str] = []
