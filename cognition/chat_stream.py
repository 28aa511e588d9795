"""Reading a streamed Chat Completions answer: server-sent events of ``chat.completion.chunk``.

Pure (no I/O): :class:`SSEDecoder` turns the body's bytes, as they arrive, into the ``data:``
payloads of complete events; :class:`ChunkReader` reads each payload and keeps what the whole
answer needs — the content so far, the finish reason and the usage (sent by servers that honour
``stream_options.include_usage``, in a last chunk without choices). The stream ends at
``data: [DONE]``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import excerpt

__all__ = ["DONE", "ChunkReader", "SSEDecoder", "StreamError"]

DONE = "[DONE]"


class StreamError(ValueError):
    """A payload that is not a chunk, or an error the server sent inside the stream."""

    def __init__(self, message: str, *, from_server: bool = False) -> None:
        super().__init__(message)
        self.from_server = from_server


class SSEDecoder:
    """Bytes in, the ``data`` of each complete event out (multi-line data joined by newlines)."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []

    def feed(self, piece: bytes) -> list[str]:
        self._buffer += piece
        payloads: list[str] = []
        while True:
            end = self._buffer.find(b"\n")
            if end < 0:
                return payloads
            line = self._buffer[:end].rstrip(b"\r").decode("utf-8")
            self._buffer = self._buffer[end + 1:]
            if not line:  # a blank line ends the event
                if self._data:
                    payloads.append("\n".join(self._data))
                    self._data = []
            elif line.startswith("data:"):
                self._data.append(line[5:].removeprefix(" "))
            # comments (":") and other fields (event:, id:, retry:) carry nothing a chunk needs

    def close(self) -> list[str]:
        """What an unterminated last event held (a server that closed without the blank line)."""
        payloads = self.feed(b"\n\n") if self._buffer or self._data else []
        return payloads


@dataclass
class ChunkReader:
    """The whole answer, built from its chunks (see the module docstring)."""

    pieces: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Mapping[str, Any] | None = None
    done: bool = False

    @property
    def content(self) -> str:
        return "".join(self.pieces)

    def read(self, payload: str) -> str:
        """The new text ``payload`` brings ("" for none); :class:`StreamError` for what is not a chunk."""
        if payload.strip() == DONE:
            self.done = True
            return ""
        try:
            chunk = json.loads(payload)
        except ValueError as exc:
            raise StreamError(f"a streamed chunk is not JSON: {excerpt(payload)!r}") from exc
        if not isinstance(chunk, dict):
            raise StreamError(f"a streamed chunk is JSON {type(chunk).__name__}, not an object")
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message") if isinstance(error, Mapping) else error
            raise StreamError(f"the server sent an error in the stream: {excerpt(str(message))}", from_server=True)
        usage = chunk.get("usage")
        if isinstance(usage, Mapping):
            self.usage = usage
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise StreamError(f"a streamed chunk without choices: {excerpt(payload)}")
        if not choices:
            return ""  # the usage chunk
        choice = choices[0]
        delta = choice.get("delta") if isinstance(choice, Mapping) else None
        if not isinstance(delta, Mapping):
            raise StreamError(f"a streamed chunk without choices[0].delta: {excerpt(payload)}")
        if isinstance(choice.get("finish_reason"), str):
            self.finish_reason = choice["finish_reason"]
        text = delta.get("content")
        if text is None:
            return ""
        if not isinstance(text, str):
            raise StreamError(f"a streamed delta's content is {type(text).__name__}, not text")
        if text:
            self.pieces.append(text)
        return text
