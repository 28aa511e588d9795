"""Machines that do not share a loopback: Linux network namespaces on a bridge, for the tests of
several machines (``tests/system/test_machines.py``).

:class:`Machines` makes N namespaces, a bridge in the root namespace with a veth pair per
namespace, and addresses from a private /24 of its own (``10.77.X.0/24``: namespace *i* is
``.i+1``, the bridge ``.254``, so the test process reaches every machine). Each namespace has
its own ``lo`` and port space, so every machine may listen on the same ports (4222, 6379, 8080).
A :class:`Machine` runs commands inside its namespace, each in a session of its own; lists and
kills every process in it (``ip netns pids``: what a power failure ends); and is cut off the
network and healed (``ip link set <veth> down``/``up``). Its commands share a PID namespace of
its own with its own ``/proc`` (``unshare --pid --mount-proc``, entered with ``nsenter``), so
they see only the machine's processes: Ray finds "the local raylet" by listing processes, and
with one process table for all machines a worker's driver would join the head's raylet.

What the namespaces do *not* separate is the file system, ``/tmp`` included. So each machine
has its own directory (its data, its ``HOME`` holding Ray's token file ``~/.ray/auth_token`` —
the same token on every machine, as copied in production — and a short Ray temp dir of its
own, since Ray's session files and unix sockets default to ``/tmp/ray``). A machine's processes
are ended by namespace, never by name (``ray stop`` run outside a machine's process table
would stop every Ray process of the host, other people's included).

Names carry the pid of the test process that made them (``mirror-m<pid>-<run>-<host>``, bridge
``mb<pid>-<run>``, veth ``mv<pid>-<run>-<i>``), so parallel runs never clash, and a run deletes
the leftovers of earlier runs whose process is gone (killed before its teardown). Needs root and
iproute2: :func:`netns_permitted` says whether ``ip netns add`` works here.
"""

from __future__ import annotations

import fcntl
import functools
import ipaddress
import itertools
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from tests.support.waits import until

SKIP_REASON = "ip netns not permitted here (needs root and iproute2)"
PREFIX = "mirror-m"
"""Every namespace this harness makes starts with it (then the owner's pid)."""
BRIDGE_PREFIX = "mb"
VETH_PREFIX = "mv"
RAY_DIR_PREFIX = "/tmp/mirror-netns-ray-"
SUBNET = "10.77.{}.0/24"
BRIDGE_HOST = 254
LOCK_FILE = Path("/tmp/mirror-netns.lock")
"""Held while a run picks its /24 and names, so two runs starting together pick different ones."""
PROBE_PORT = 9
"""A port nobody listens on: a connection refused there proves the machine is reachable."""
IFNAMSIZ = 15
INIT = """
import os, time
while True:  # pid 1 of the machine: reap every orphan, as an init does
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.2)
"""

_runs = itertools.count(1)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


@functools.cache
def netns_permitted() -> bool:
    """Whether this process may make network namespaces: one probe namespace added and deleted."""
    if shutil.which("ip") is None:
        return False
    name = f"{PREFIX}{os.getpid()}-probe"
    try:
        if _ip("netns", "add", name, check=False).returncode != 0:
            return False
        return _ip("netns", "delete", name, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _child_of(pid: int) -> int | None:
    """The first child of ``pid`` (the command ``nsenter`` or ``unshare`` started), if any yet."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def namespace_pids(namespace: str) -> list[int]:
    """Every live process whose network namespace is ``namespace``."""
    result = _ip("netns", "pids", namespace, check=False)
    return [int(word) for word in result.stdout.split() if word.isdigit()]


def kill_namespace(namespace: str, *, timeout: float = 30.0) -> list[int]:
    """SIGKILL every process in ``namespace`` until none is left (one may fork meanwhile)."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout
    while pids := namespace_pids(namespace):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        assert time.monotonic() < deadline, f"processes of {namespace} survive SIGKILL: {pids}"
        time.sleep(0.05)
    return killed


def clean_leftovers() -> list[str]:
    """Delete what runs whose test process is gone left behind: their namespaces (and every
    process still in them), bridges and Ray temp dirs. Returns what was deleted."""
    owner = re.compile(rf"^(?:{re.escape(PREFIX)}|{BRIDGE_PREFIX}|{VETH_PREFIX}|{re.escape(RAY_DIR_PREFIX)})(\d+)-")
    deleted = []

    def stale(name: str) -> bool:
        found = owner.match(name)
        return found is not None and not _alive(int(found.group(1)))

    for line in _ip("netns", "list", check=False).stdout.splitlines():
        namespace = line.split()[0] if line.split() else ""
        if stale(namespace):
            kill_namespace(namespace)
            _ip("netns", "delete", namespace, check=False)
            deleted.append(namespace)
    for line in _ip("-o", "link", "show", "type", "bridge", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if stale(name):
            _ip("link", "delete", name, check=False)
            deleted.append(name)
    for path in Path(RAY_DIR_PREFIX).parent.glob(Path(RAY_DIR_PREFIX).name + "*"):
        if stale(str(path)):
            shutil.rmtree(path, ignore_errors=True)
            deleted.append(str(path))
    return deleted


def _subnets_in_use() -> set[str]:
    """The /24s of every IPv4 address of the root namespace."""
    output = _ip("-4", "-o", "addr", "show").stdout
    return {str(ipaddress.ip_interface(word).network) for word in re.findall(r"inet (\S+)", output)}


def reachable(address: str, *, timeout: float = 1.0, namespace: str | None = None) -> bool:
    """Whether ``address`` answers a TCP connection attempt (accepted or refused) within
    ``timeout``, from this process or, given ``namespace``, from inside it. A cut link answers
    nothing: the attempt times out or the host is unreachable."""
    if namespace is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.settimeout(timeout)
            try:
                probe.connect((address, PROBE_PORT))
            except ConnectionRefusedError:
                return True
            except OSError:
                return False
            return True
    code = (f"import tests.support.netns as n, sys; "
            f"sys.exit(0 if n.reachable({address!r}, timeout={timeout!r}) else 1)")
    result = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", code],
                            cwd=Path(__file__).resolve().parents[2], capture_output=True, timeout=timeout + 30)
    return result.returncode == 0


@dataclass
class Machine:
    """One namespace: a host of its own on the bridge (see the module docstring)."""

    host: str
    """Its name in the test (``h``, ``w1``): also the last part of its namespace's name."""
    namespace: str
    address: str
    veth: str
    """The root namespace's end of its veth pair (the bridge port); ``eth0`` is the other end."""
    root: Path
    """Its directory: ``data/``, ``home/`` (``HOME``), logs."""
    ray_dir: Path
    """Its Ray temp dir (``ray start --temp-dir``), short: Ray's unix socket paths hold 107 bytes."""
    bridge_address: str
    env: dict[str, str] = field(default_factory=dict)
    """The environment every command of this machine starts with."""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    init: subprocess.Popen[bytes] | None = None
    """``unshare``, whose child is the first process of the machine's PID namespace (:meth:`boot`)."""
    init_pid: int | None = None

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def home(self) -> Path:
        return self.root / "home"

    def log(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def boot(self) -> None:
        """Start the machine's process table: a new PID namespace (with its own ``/proc``) inside
        its network namespace, whose first process reaps orphans as an init does. Every command
        then runs in it (:meth:`run`), so the machine's programs see only its own processes, as on
        a machine of its own (Ray finds "the local raylet" by listing processes). Done by the
        first :meth:`run` after creation or after :meth:`kill_all`: a reboot."""
        if self.init is not None and self.init.poll() is None:
            return
        self.init = subprocess.Popen(
            ["ip", "netns", "exec", self.namespace, "unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--",
             sys.executable, "-c", INIT],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.init_pid = until(lambda: _child_of(self.init.pid) if self.init else None,
                              f"{self.host}'s init process", timeout=30, poll_s=0.01)

    def _enter(self, argv: Sequence[str], cwd: Path | None) -> list[str]:
        self.boot()
        return ["nsenter", f"--target={self.init_pid}", "--net", "--mount", "--pid", f"--wd={cwd or self.root}",
                "--", *argv]

    def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, log: Path | str | None = None,
            cwd: Path | None = None) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside this machine, in a session of its own, its output to ``log``
        (a path, or a name under this machine's directory; default the program's name).

        The handle is of ``nsenter``, which waits for the command and exits as it does; signal
        the command itself with :meth:`signal` (nsenter passes no signal on)."""
        if log is None:
            log = self.log(Path(argv[0]).name)
        elif isinstance(log, str):
            log = self.log(log)
        with open(log, "ab") as output:
            process = subprocess.Popen(self._enter(argv, cwd), env=self.env | dict(env or {}), stdin=subprocess.DEVNULL,
                                       stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(process)
        return process

    def call(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 60.0,
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside this machine to its end and return what it printed."""
        return subprocess.run(self._enter(argv, cwd), env=self.env | dict(env or {}), capture_output=True, text=True,
                              timeout=timeout)

    def pids(self) -> list[int]:
        """Every live process of this machine (pids as the test's namespace sees them)."""
        return namespace_pids(self.namespace)

    def kill_all(self) -> list[int]:
        """SIGKILL every process of this machine at once: the machine lost power. Returns their
        pids. The next :meth:`run` boots it again."""
        killed = kill_namespace(self.namespace)
        self.reap()
        if self.init is not None:
            self.init.wait(10)
        self.init = self.init_pid = None
        return killed

    def reap(self) -> None:
        """Collect the exit status of the commands started here that have ended."""
        for process in self.processes:
            process.poll()
        self.processes = [process for process in self.processes if process.returncode is None]

    def signal(self, process: subprocess.Popen[bytes], signum: int) -> bool:
        """Send ``signum`` to the command ``process`` runs (False: it has ended)."""
        child = _child_of(process.pid)
        if child is None:
            return False
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            return False
        return True

    def stop(self, process: subprocess.Popen[bytes], *, timeout: float = 30.0) -> int | None:
        """SIGTERM to the command (Ctrl-C's stop), then SIGKILL to what is left of its session
        after ``timeout``."""
        if process.poll() is None and self.signal(process, signal.SIGTERM):
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        for pid in self.pids():
            try:
                if os.getsid(pid) == process.pid:
                    os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if process.poll() is None:
            process.kill()
        return process.wait(10)

    def cut(self, *, side: str = "root") -> None:
        """Take this machine off the network: its veth end in the root namespace down (the switch
        port goes dark; ``side="machine"``: its own ``eth0``, the cable pulled at the machine).
        Returns once traffic has stopped both ways."""
        if side == "root":
            _ip("link", "set", self.veth, "down")
        elif side == "machine":
            _ip("-n", self.namespace, "link", "set", "eth0", "down")
        else:
            raise ValueError(f"side is 'root' or 'machine', not {side!r}")
        assert not reachable(self.address, timeout=0.5), f"{self.host} still answers after its cut"
        assert not reachable(self.bridge_address, timeout=0.5, namespace=self.namespace), \
            f"{self.host} still reaches the bridge after its cut"

    def heal(self, *, timeout: float = 30.0) -> None:
        """Put this machine back on the network (both ends up); returns once traffic flows both ways."""
        _ip("link", "set", self.veth, "up")
        _ip("-n", self.namespace, "link", "set", "eth0", "up")
        until(lambda: reachable(self.address, timeout=0.5), f"{self.host} answers after its heal", timeout=timeout)
        until(lambda: reachable(self.bridge_address, timeout=0.5, namespace=self.namespace),
              f"{self.host} reaches the bridge after its heal", timeout=timeout)

    def copy_ray_logs(self) -> None:
        """Ray's logs (its actors' included) into this machine's directory, to read after the run."""
        logs = self.ray_dir / "session_latest" / "logs"
        if logs.is_dir():
            shutil.copytree(logs, self.root / "ray-logs", symlinks=True, dirs_exist_ok=True,
                            ignore_dangling_symlinks=True)


class Machines:
    """N machines on one bridge (see the module docstring); a context manager that tears
    everything down on exit, also when the test failed: every process of every namespace is
    killed, the namespaces, the bridge and the Ray temp dirs are deleted.

    ``hosts``: the machines' names (``["h", "w1", "w2"]``); ``root``: where their directories
    go (a test's ``tmp_path``); ``env``: what every command starts with (on top of this
    process's environment), to which each machine adds its ``HOME`` and Ray's token mode.
    """

    def __init__(self, hosts: Sequence[str], root: Path, *, env: Mapping[str, str] | None = None) -> None:
        self.hosts = list(hosts)
        self.root = Path(root)
        self.env = dict(env or {})
        self.machines: list[Machine] = []
        self.bridge = ""
        self.run_id = ""
        self.ray_token = secrets.token_hex(16)
        """Ray's auth token, in every machine's ``~/.ray/auth_token`` (the same file copied everywhere)."""

    def __getitem__(self, host: str) -> Machine:
        for machine in self.machines:
            if machine.host == host:
                return machine
        raise KeyError(host)

    def __iter__(self) -> Iterator[Machine]:
        return iter(self.machines)

    def __enter__(self) -> Machines:
        try:
            self._create()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.teardown()

    def _create(self) -> None:
        with LOCK_FILE.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            clean_leftovers()
            used = _subnets_in_use()
            third = next((octet for octet in range(256) if SUBNET.format(octet) not in used), None)
            assert third is not None, "no free 10.77.X.0/24 left on this host"
            self.run_id = f"{os.getpid()}-{next(_runs)}"
            self.bridge = f"{BRIDGE_PREFIX}{self.run_id}"
            assert len(self.bridge) <= IFNAMSIZ, self.bridge
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"10.77.{third}.{BRIDGE_HOST}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        for index, host in enumerate(self.hosts):
            self.machines.append(self._machine(index, host, third))

    def _machine(self, index: int, host: str, third: int) -> Machine:
        namespace = f"{PREFIX}{self.run_id}-{host}"
        veth = f"{VETH_PREFIX}{self.run_id}-{index}"
        assert len(veth) <= IFNAMSIZ, veth
        address = f"10.77.{third}.{index + 1}"
        ray_dir = Path(f"{RAY_DIR_PREFIX}{self.run_id}-{host}")
        root = self.root / host
        machine = Machine(host, namespace, address, veth, root, ray_dir, f"10.77.{third}.{BRIDGE_HOST}")
        _ip("netns", "add", namespace)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        _ip("link", "set", veth, "master", self.bridge, "up")
        _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", namespace, "link", "set", "eth0", "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        for directory in (machine.data, machine.home / ".ray", ray_dir):
            directory.mkdir(parents=True, exist_ok=True)
        token = machine.home / ".ray" / "auth_token"
        token.write_text(self.ray_token)
        token.chmod(0o600)
        machine.env = os.environ | self.env | {
            "HOME": str(machine.home), "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        machine.env.pop("RAY_ADDRESS", None)
        return machine

    def teardown(self) -> None:
        """Every process of every machine killed; namespaces, bridge and Ray temp dirs deleted.
        Everything is tried, whatever fails first; the first failure is raised at the end."""
        errors: list[BaseException] = []
        for machine in self.machines:
            for step in (machine.kill_all, machine.copy_ray_logs,
                         lambda m=machine: _ip("netns", "delete", m.namespace),
                         lambda m=machine: shutil.rmtree(m.ray_dir, ignore_errors=True)):
                try:
                    step()
                except BaseException as exc:  # teardown must reach every part
                    errors.append(exc)
        if self.bridge:
            try:
                _ip("link", "delete", self.bridge, check=False)
            except BaseException as exc:
                errors.append(exc)
        self.machines = []
        self.bridge = ""
        if errors:
            raise errors[0]


__all__ = ["SKIP_REASON", "Machine", "Machines", "clean_leftovers", "kill_namespace", "namespace_pids",
           "netns_permitted", "reachable"]
