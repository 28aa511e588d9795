"""Issue 38: a chat completion whose transcript is exactly ``main``'s turns is placed by ``main``'s
conversation (digests compared), without waiting for the log; anything else still waits for it.

The ingester lingers 1 s before each commit, so right after a turn the log is behind the stream,
and the gateway's read barrier waits for it a millisecond at most: a request that waited for the
log (the alignment from it, which an edited transcript needs) would mostly be a 503 here, while
the quick placement, which never asks the log, is answered every time. Real NATS, ingester
process, DuckDB, Ray, gateway over HTTP and the simulator.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from mirror.events.nats.server import EmbeddedNats
from tests.support.stack import gateway_stack

LINGER_MS = 1000.0
"""The ingester's longest linger: a turn's events reach the log up to a second after its answer."""
SETTLE_S = 0.001
"""The gateway's read barrier: a read waits this long at most for the log to catch up, then is a 503."""


@pytest.fixture(scope="module")
def stack(ray_cluster: None, nats_server: EmbeddedNats,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with gateway_stack(nats_server.url, tmp_path_factory.mktemp("quick"), shard="quick", latency="fixed:0",
                       ingest_linger_ms=LINGER_MS, read_settle_timeout_s=SETTLE_S) as (url, tokens):
        yield url, tokens["acme"]


def completion(client: httpx.Client, messages: list[tuple[str, str]]) -> httpx.Response:
    return client.post("/v1/chat/completions", headers={"X-Mirror-Conversation": "quick"}, json={
        "model": "mirror", "messages": [{"role": role, "content": text} for role, text in messages]})


def test_a_transcript_that_is_mains_turns_is_placed_without_waiting_for_the_log(stack: tuple[str, str]) -> None:
    url, token = stack
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        said: list[tuple[str, str]] = []
        for message in ("Name a colour.", "Name a fruit.", "Name a tree."):
            answer = completion(client, [*said, ("user", message)])
            assert answer.status_code == 200, answer.text
            assert answer.headers["x-mirror-history"] == ("same" if said else "none")
            assert answer.headers["x-mirror-branch"] == "main"
            said += [("user", message), ("assistant", answer.json()["choices"][0]["message"]["content"])]
        # The same transcript but for a reply the client wrote itself: not main's turns, so it is aligned
        # from the log: forked, or a 503 while the log is behind; either way main keeps its three turns.
        edited = [*said[:-1], ("assistant", "A willow, I'd say."), ("user", "Why?")]
        answer = completion(client, edited)
        assert answer.status_code in (200, 503), answer.text
        assert answer.status_code == 503 or answer.headers["x-mirror-history"] == "forked"
        answer = completion(client, [*said, ("user", "Name a river.")])
        assert answer.status_code == 200 and answer.headers["x-mirror-history"] == "same", answer.text
        assert answer.json()["mirror"]["turn"] == 3
