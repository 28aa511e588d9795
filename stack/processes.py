"""Child processes the CLI starts: an ingester per shard (`mirror ingest`) and the simulator (`mirror sim-llm`)."""

from __future__ import annotations

import asyncio
import ctypes
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from mirror.events.errors import LogUnavailable
from mirror.events.nats.jetstream import connect_nats
from mirror.events.nats.log_service import LogClient
from mirror.processes import free_port, kill_process, terminate_process


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the parent dies, so a killed benchmark leaves no orphan."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class IngesterProcess:
    """`mirror ingest` in its own OS process, as in production; tests SIGKILL it."""

    def __init__(self, nats_url: str, db_path: str | Path, *, shard: str = "0", log_path: str | Path | None = None,
                 subjects: tuple[str, ...] = (), shard_map: tuple[str, ...] = (),
                 linger_ms: float | None = None) -> None:
        self.nats_url = nats_url
        self.subjects = subjects
        self.shard_map = shard_map
        """``SHARD=TENANT,TENANT`` entries: the child takes its filter from them (``--shard-map``)."""
        self.linger_ms = linger_ms
        """``--linger-ms`` (None: the command's default); a long one keeps the log visibly behind the stream."""
        self.db_path = Path(db_path)
        self.shard = shard
        self.log_path = Path(log_path) if log_path else self.db_path.with_suffix(".ingest.log")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> IngesterProcess:
        command = [
            sys.executable, "-m", "mirror", "ingest",
            "--nats-url", self.nats_url, "--db", str(self.db_path), "--shard", self.shard,
        ]
        for subject in self.subjects:
            command += ["--subject", subject]
        for entry in self.shard_map:
            command += ["--shard-map", entry]
        if self.linger_ms is not None:
            command += ["--linger-ms", f"{self.linger_ms:g}"]
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, preexec_fn=_die_with_parent
            )
        asyncio.run(self._wait_ready(timeout))
        return self

    async def _wait_ready(self, timeout: float) -> None:
        nc = await connect_nats(self.nats_url, name="mirror-ingest-probe")
        client = LogClient(nc, shard=self.shard, timeout=1.0)
        deadline = time.monotonic() + timeout
        try:
            while True:
                if self.process is not None and self.process.poll() is not None:
                    raise RuntimeError(
                        f"ingester exited with {self.process.returncode}; see {self.log_path}:\n"
                        + self.log_path.read_text(errors="replace")[-3000:]
                    )
                try:
                    await client.stats()
                    return
                except LogUnavailable:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.05)
        finally:
            await nc.close()

    def stop(self, timeout: float = 30.0) -> None:
        terminate_process(self.process, timeout)
        self.process = None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def kill(self) -> None:
        kill_process(self.process)
        self.process = None


class SimProcess:
    """`mirror sim-llm` in its own OS process: the simulator's work never shares Mirror's GIL."""

    def __init__(self, *, latency: str = "fixed:0", port: int = 0, log_path: str | Path | None = None,
                 embedding_latency: str | None = None, host: str = "127.0.0.1", token_delay_ms: float = 0.0) -> None:
        """``embedding_latency``: embedding calls at their own latency (default: ``latency``);
        ``host``: the address it listens on (``mirror up --bind``); ``token_delay_ms``: between
        the tokens of a streamed answer."""
        self.latency = latency
        self.embedding_latency = embedding_latency
        self.token_delay_ms = token_delay_ms
        self.host = host
        self.port = port or free_port(host)
        self.log_path = Path(log_path) if log_path else None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def start(self, timeout: float = 30.0) -> SimProcess:
        command = [sys.executable, "-m", "mirror", "sim-llm", "--host", self.host, "--port", str(self.port),
                   "--latency", self.latency, "--log-level", "WARNING"]
        if self.embedding_latency is not None:
            command += ["--embedding-latency", self.embedding_latency]
        if self.token_delay_ms:
            command += ["--token-delay", f"{self.token_delay_ms:g}"]
        output = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output, stderr=output,
                                            preexec_fn=_die_with_parent)
        finally:
            if not isinstance(output, int):  # a log file of ours, not DEVNULL
                output.close()
        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=self.url, timeout=0.5) as client:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"the simulator exited with {self.process.returncode}; see {self.log_path}")
                try:
                    if client.get("/healthz").status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the simulator did not answer on {self.url} within {timeout}s")
                time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> None:
        terminate_process(self.process, timeout)
        self.process = None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def stats(self) -> dict[str, Any]:
        """GET /_sim/stats: the simulator's counters (calls, faults, in flight)."""
        return httpx.get(f"{self.url}/_sim/stats", timeout=5).raise_for_status().json()


__all__ = ["IngesterProcess", "SimProcess"]
