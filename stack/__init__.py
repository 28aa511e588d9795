"""The embedded stack: everything ``mirror up`` runs on one machine, and the one place where
adapters are chosen.

- ``embedded`` — :class:`EmbeddedStack` (``mirror up``): NATS (one server, a cluster, or one at
  a URL), Ray, an ingester per shard, the model (simulator, offline model or a URL), the
  gateways; it builds the runtime's infrastructure (``NatsInfrastructure``) and settings and
  hands them down;
- ``node`` — :class:`MirrorNode` (``mirror node``): another machine of the deployment, joined to
  the head's Ray cluster: its gateway and the ingesters of the shards on its disk;
- ``machine`` — what both run on a machine in Ray (joining, ingesters, gateways, the record
  file, their supervision), written once;
- ``published`` — the head's settings, published in the cluster for the nodes' gateways;
- ``addresses`` — ``--bind``, ``--advertise`` and the URLs handed out, checked;
- ``processes`` — the child processes the CLI starts (an ingester per shard, the simulator);
- ``supervisor`` — restarts a child process that died, the same way it was started;
- ``ray_node`` — whether this machine's Ray node is still in the cluster (``mirror node`` exits
  when it is not);
- ``model_check`` — the check of a model server at a URL when the stack starts (``--strict``);
- ``log_relay`` — follows the warnings the Ray processes append to ``warnings.log`` and logs
  them again in the stack's process (``mirror up``'s stderr);
- ``local_model`` — the offline model's llama.cpp server (the ``[local]`` extra);
- ``errors``.

May import the gateway, the runtime (``mirror.actors``), the simulator (``mirror.sim``, to start
it), the layers below and the root helpers; the harness and the CLI import it.
"""

__all__: list[str] = []
