"""Mirror deployed over :class:`~tests.support.netns.Machines` as docs/operations.md ("Several
machines") says: a head and workers, each running its own commands inside its own namespace.

On every machine, one member of the NATS JetStream cluster (``mirror nats --bind … --routes …``)
and a Ray node (``ray start --block``: the head's control store on the first machine, the others
joining it). On the head, the model server (``mirror sim-llm``) and ``mirror up --ray-address
--bind --nats-url --ingest``; on each worker, ``mirror node`` (its gateway, and the ingesters of
the shards whose files it holds). Every machine gets the tenants file (token hashes only) and
Ray's token, as they are copied to real machines; nothing else of the head's disk.

Each command is a process of the machine (:meth:`Machine.run`), its output in
``<machine>/<name>.log``. :meth:`Deployment.boot` starts a worker's commands again after its
processes were killed: the machine rebooted.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.netns import Machine, Machines
from tests.support.waits import until

NATS_PORT = 4222
ROUTE_PORT = 6222
RAY_PORT = 6379
SIM_PORT = 8099
GATEWAY_PORT = 8080
RAY_HEALTH_CHECKS = {"RAY_health_check_period_ms": "2000", "RAY_health_check_timeout_ms": "2000",
                     "RAY_health_check_failure_threshold": "4"}
"""Ray's control store declares a silent node dead after ~threshold x (timeout + period): ~65 s with
Ray's defaults (5 x (10 s + 3 s)), longer than a 30 s partition; ~16 s with these."""
START_S = 180.0
"""Deadline of a machine's commands coming up (Ray and the stack on a loaded 2-core host)."""


@dataclass
class Deployment:
    machines: Machines
    shard_map: str = "1=acme"
    """``--shard-map``: shard 1 holds tenant ``acme``; every other tenant is on shard 0."""
    ingest: dict[str, list[str]] = field(default_factory=lambda: {"h": ["0"], "w1": ["1"]})
    """Which machine runs which shards' ingesters (their DuckDB files on its disk)."""
    tenants: tuple[str, ...] = ("default", "acme")
    ray_cpus: int = 1
    hosts: int = 3
    """``mirror up --hosts``: conversation hosts, dealt one per machine when all three are up."""
    ray_head_env: dict[str, str] = field(default_factory=lambda: dict(RAY_HEALTH_CHECKS))
    """The environment of the head's ``ray start`` (its control store's health checks)."""
    env: dict[str, str] = field(default_factory=dict)
    """More environment for every Mirror command (``MIRROR_*`` settings)."""
    sim_args: tuple[str, ...] = ()
    """More options of the head's ``mirror sim-llm`` (``--latency fixed:240000``: a turn stays in flight)."""
    tokens: dict[str, str] = field(default_factory=dict)
    processes: dict[tuple[str, str], subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def head(self) -> Machine:
        return self.machines.machines[0]

    @property
    def workers(self) -> list[Machine]:
        return self.machines.machines[1:]

    def nats_urls(self) -> str:
        return ",".join(f"nats://{machine.address}:{NATS_PORT}" for machine in self.machines)

    def gateway(self, machine: Machine) -> str:
        return f"http://{machine.address}:{GATEWAY_PORT}"

    def gateways(self) -> list[str]:
        return [self.gateway(machine) for machine in self.machines]

    def run(self, machine: Machine, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        process = machine.run(argv, env=self.env | (env or {}), log=name)
        self.processes[(machine.host, name)] = process
        return process

    def process(self, machine: Machine, name: str) -> subprocess.Popen[bytes]:
        return self.processes[(machine.host, name)]

    def tail(self, machine: Machine, name: str, chars: int = 4000) -> str:
        path = machine.log(name)
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def wait(self, machine: Machine, name: str, predicate, what: str, timeout: float = START_S) -> None:
        """Until ``predicate()``, failing at once (with its log) if the command ``name`` exited."""
        def check():
            process = self.process(machine, name)
            assert process.poll() is None, f"{machine.host}: {name} exited ({process.returncode}):\n{self.tail(machine, name)}"
            return predicate()

        try:
            until(check, f"{machine.host}: {what}", timeout=timeout, poll_s=0.2)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- {machine.host}/{name}.log\n{self.tail(machine, name)}") from None

    # ------------------------------------------------------------------ each command

    def start_nats(self, machine: Machine) -> None:
        routes = ",".join(f"nats://{other.address}:{ROUTE_PORT}" for other in self.machines)
        self.run(machine, "nats", [
            "mirror", "nats", "--bind", machine.address, "--port", str(NATS_PORT), "--cluster-port", str(ROUTE_PORT),
            "--name", f"mirror-{machine.host}", "--routes", routes, "--store", str(machine.data / "nats"),
        ])

    def nats_ready(self, machine: Machine) -> bool:
        log = machine.data / "nats" / "nats-server.log"
        try:
            text = log.read_bytes()
        except FileNotFoundError:
            return False
        return b"Server is ready" in text and (b"JetStream cluster new metadata leader" in text
                                                or b"Self is new JetStream cluster metadata leader" in text)

    def start_ray(self, machine: Machine) -> None:
        common = [f"--node-ip-address={machine.address}", f"--num-cpus={self.ray_cpus}", f"--temp-dir={machine.ray_dir}",
                  "--disable-usage-stats"]
        if machine is self.head:
            argv = ["ray", "start", "--head", "--block", f"--port={RAY_PORT}", "--include-dashboard=false", *common]
        else:
            argv = ["ray", "start", "--block", f"--address={self.head.address}:{RAY_PORT}", *common]
        log = machine.log("ray")
        log.unlink(missing_ok=True)  # "started" is read from this run's log
        self.run(machine, "ray", argv, self.ray_head_env if machine is self.head else None)

    def ray_ready(self, machine: Machine) -> bool:
        log = machine.log("ray")
        return log.exists() and "Ray runtime started" in log.read_text(errors="replace")

    def start_sim(self) -> None:
        self.run(self.head, "sim", ["mirror", "sim-llm", "--host", self.head.address, "--port", str(SIM_PORT),
                                         *self.sim_args])

    def add_tenants(self) -> None:
        """Each tenant's token, made on the head; the tenants file is then copied to the workers."""
        for tenant in self.tenants:
            result = self.head.call(["mirror", "tenants", "add", tenant, "--data", str(self.head.data)], env=self.env)
            assert result.returncode == 0, result.stderr
            self.tokens[tenant] = result.stdout.strip().splitlines()[-1]
        for worker in self.workers:
            shutil.copy(self.head.data / "tenants.json", worker.data / "tenants.json")

    def ingest_flags(self, machine: Machine) -> list[str]:
        return [word for shard in self.ingest.get(machine.host, []) for word in ("--ingest", shard)]

    def start_up(self) -> None:
        self.run(self.head, "up", [
            "mirror", "up", "--ray-address", f"{self.head.address}:{RAY_PORT}", "--bind", self.head.address,
            "--nats-url", self.nats_urls(), "--llm", f"http://{self.head.address}:{SIM_PORT}/v1",
            "--shard-map", self.shard_map, *self.ingest_flags(self.head), "--data", str(self.head.data),
            "--port", str(GATEWAY_PORT), "--hosts", str(self.hosts),
        ])

    def start_node(self, machine: Machine) -> None:
        self.run(machine, "node", [
            "mirror", "node", "--ray-address", f"{self.head.address}:{RAY_PORT}", "--bind", machine.address,
            "--nats-url", self.nats_urls(), "--tenants", str(machine.data / "tenants.json"),
            "--port", str(GATEWAY_PORT), "--shard-map", self.shard_map, *self.ingest_flags(machine),
            "--data", str(machine.data),
        ])

    def serves(self, machine: Machine) -> bool:
        """Whether this machine's gateway answers ``/healthz`` (from the test's own namespace)."""
        try:
            return httpx.get(f"{self.gateway(machine)}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def record(self, machine: Machine) -> dict[str, object] | None:
        """What ``mirror up`` (``stack.json``) or ``mirror node`` (``node.json``) recorded on this machine."""
        path = machine.data / ("stack.json" if machine is self.head else "node.json")
        try:
            return dict(json.loads(path.read_text()))
        except (FileNotFoundError, ValueError):
            return None

    # ------------------------------------------------------------------ whole machines

    def start(self) -> None:
        """Everything, in the order the docs give: NATS everywhere, Ray, the model server, the
        head's stack, then each worker's node."""
        self.add_tenants()
        for machine in self.machines:
            self.start_nats(machine)
        for machine in self.machines:
            self.wait(machine, "nats", lambda m=machine: self.nats_ready(m), "NATS is ready with a meta leader")
        self.start_ray(self.head)
        self.start_sim()
        self.wait(self.head, "ray", lambda: self.ray_ready(self.head), "the Ray head started")
        for worker in self.workers:
            self.start_ray(worker)
        for worker in self.workers:
            self.wait(worker, "ray", lambda w=worker: self.ray_ready(w), "the Ray node joined")
        self.start_up()
        self.wait(self.head, "up", lambda: self.record(self.head) is not None and self.serves(self.head),
                  "mirror up serves")
        for worker in self.workers:
            self.start_node(worker)
        for worker in self.workers:
            self.wait(worker, "node", lambda w=worker: self.record(w) is not None and self.serves(w), "mirror node serves")

    def boot(self, machine: Machine) -> None:
        """Start a worker's commands again (after :meth:`Machine.kill_all`: the machine rebooted),
        without waiting; :meth:`booted` says when it serves again."""
        (machine.data / "node.json").unlink(missing_ok=True)  # a record its killed node could not remove
        self.start_nats(machine)
        self.start_ray(machine)
        self.start_node(machine)

    def booted(self, machine: Machine) -> bool:
        for name in ("nats", "ray", "node"):
            process = self.process(machine, name)
            assert process.poll() is None, f"{machine.host}: {name} exited ({process.returncode}):\n{self.tail(machine, name)}"
        return self.record(machine) is not None and self.serves(machine)

    def restart_exited(self, machine: Machine) -> list[str]:
        """Start again each of a worker's commands that has exited, as a process supervisor on
        the machine (systemd's ``Restart=always``) would; returns their names."""
        starts = {"nats": self.start_nats, "ray": self.start_ray, "node": self.start_node}
        restarted = []
        for name, start in starts.items():
            if self.process(machine, name).poll() is not None:
                start(machine)
                restarted.append(name)
        return restarted

    def stop(self) -> None:
        """The stacks first (each drains its ingesters: SIGTERM is their Ctrl-C), then the rest of
        each machine goes with :meth:`Machines.teardown`."""
        for machine in self.machines:
            name = "up" if machine is self.head else "node"
            process = self.processes.get((machine.host, name))
            if process is not None and process.poll() is None:
                machine.stop(process, timeout=60)


def log_lines(paths: list[Path], needle: str) -> list[str]:
    """The lines of ``paths`` (those that exist) that contain ``needle``."""
    found = []
    for path in paths:
        try:
            found += [line for line in path.read_text(errors="replace").splitlines() if needle in line]
        except (FileNotFoundError, IsADirectoryError):
            continue
    return found


__all__ = ["GATEWAY_PORT", "NATS_PORT", "RAY_PORT", "ROUTE_PORT", "SIM_PORT", "Deployment", "log_lines"]
