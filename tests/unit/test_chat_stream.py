"""Reading a streamed answer (SSE chunks) and passing on a stripped reply's pieces: pure, no server."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.cognition.chat_stream import ChunkReader, SSEDecoder, StreamError
from mirror.cognition.llm import StrippedTokens
from mirror.sim.routes import tokens


def _chunk(content: str | None = None, finish: str | None = None) -> str:
    delta = {} if content is None else {"content": content}
    return json.dumps({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


@settings(deadline=None)  # a loaded CI machine must not turn a slow example into a failure
@given(st.lists(st.text(min_size=1, max_size=8), max_size=12), st.integers(1, 7))
def test_events_split_anywhere_decode_to_the_same_pieces(pieces: list[str], cut: int) -> None:
    body = "".join(f"data: {_chunk(piece)}\r\n\r\n" for piece in pieces) + f"data: {_chunk(finish='stop')}\n\n" \
        + ": keep-alive\n\ndata: [DONE]\n\n"
    raw = body.encode()
    decoder, reader = SSEDecoder(), ChunkReader()
    for start in range(0, len(raw), cut):
        for payload in decoder.feed(raw[start:start + cut]):
            reader.read(payload)
    assert decoder.close() == []
    assert reader.content == "".join(pieces) and reader.finish_reason == "stop" and reader.done


def test_usage_errors_and_what_is_not_a_chunk() -> None:
    reader = ChunkReader()
    assert reader.read(json.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}})) == ""
    assert reader.usage == {"prompt_tokens": 3, "completion_tokens": 4}
    with pytest.raises(StreamError) as sent:
        reader.read(json.dumps({"error": {"message": "overloaded"}}))
    assert sent.value.from_server and "overloaded" in str(sent.value)
    for payload in ("{not json", "[1]", json.dumps({"choices": [{"index": 0}]}), json.dumps({"x": 1}),
                    json.dumps({"choices": [{"delta": {"content": 5}}]})):
        with pytest.raises(StreamError) as bad:
            ChunkReader().read(payload)
        assert not bad.value.from_server
    assert SSEDecoder().close() == [] and SSEDecoder().feed(b"data: x") == []


@settings(deadline=None)  # a loaded CI machine must not turn a slow example into a failure
@given(st.lists(st.text(alphabet=" \n\tab", max_size=6), max_size=10))
def test_stripped_pieces_join_to_the_stripped_whole(pieces: list[str]) -> None:
    passed: list[str] = []
    sink = StrippedTokens(passed.append)
    for piece in pieces:
        sink(piece)
    assert "".join(passed) == "".join(pieces).strip()
    assert all(passed)


@settings(deadline=None)  # a loaded CI machine must not turn a slow example into a failure
@given(st.text(max_size=60))
def test_the_simulators_tokens_join_to_its_text(text: str) -> None:
    assert "".join(tokens(text)) == text
