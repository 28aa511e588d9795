"""Idempotent turns over HTTP (a real gateway, conversation hosts, NATS, the ingester, the
simulator): ``Idempotency-Key`` on the native route and on chat completions, and the official
``openai`` package's own retry after the connection was cut between the append and the response.

The cut is made by a loopback proxy in front of the gateway that forwards the first request,
lets the gateway append and answer, and then closes the client's connection without a byte of
the answer: what a client sees when its gateway dies after the append. The SDK's retry (its
default policy: connection errors are retried) carries the same key and is answered by the turn
already logged.
"""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from mirror.events.nats.server import EmbeddedNats
from tests.support.stack import conversation_runtime
from tests.system.test_openai_api import logged_turns

pytestmark = pytest.mark.long  # ~22 s: a gateway stack and the openai SDK; .ci/run runs it with -m long


@pytest.fixture(scope="module")
def served(ray_cluster: None, nats_server: EmbeddedNats,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    from mirror.gateway.app import GatewayServer, GatewaySettings, create_app
    from mirror.gateway.tenants import TenantRegistry

    directory = tmp_path_factory.mktemp("idempotent")
    token = TenantRegistry(directory / "tenants.json").add("acme")
    with conversation_runtime(nats_server.url, directory, shard="idem", latency="fixed:100", mode="baseline",
                              memory=False) as runtime:
        app = create_app(GatewaySettings(runtime=runtime, tenants_file=str(directory / "tenants.json")))
        with GatewayServer(app) as server:
            yield server.url, token


def post_turn(url: str, token: str, conversation: str, message: str, key: str | None,
              header: str = "Idempotency-Key") -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", **({header: key} if key else {})}
    return httpx.post(f"{url}/v1/conversations/{conversation}/turns", json={"message": message}, headers=headers,
                      timeout=60)


def test_a_retried_turn_is_answered_once_and_logged_once(served: tuple[str, str]) -> None:
    url, token = served
    first = post_turn(url, token, "native", "Where is the lighthouse?", "n-1")
    again = post_turn(url, token, "native", "Where is the lighthouse?", "n-1", header="X-Idempotency-Key")
    assert first.status_code == again.status_code == 200
    assert "Idempotent-Replayed" not in first.headers and again.headers["Idempotent-Replayed"] == "true"
    assert (again.json()["seq"], again.json()["reply"]) == (first.json()["seq"], first.json()["reply"])
    reused = post_turn(url, token, "native", "Where is the harbour?", "n-1")
    assert reused.status_code == 422 and "'n-1' was used by the turn at seq" in reused.json()["detail"]
    malformed = post_turn(url, token, "native", "Where is the harbour?", "has spaces")
    assert malformed.status_code == 400 and "idempotency key" in malformed.json()["detail"]
    later = post_turn(url, token, "native", "And the harbour?", None)  # the anchor: a turn after the refusals
    assert later.json()["seq"] == first.json()["seq"] + 1
    turns = logged_turns(url, token, "native", at_least=2)
    assert [turn["payload"]["user_message"] for turn in turns] == ["Where is the lighthouse?", "And the harbour?"]
    assert turns[0]["payload"]["idempotency_key"] == "n-1" and turns[1]["payload"]["idempotency_key"] is None


def test_duplicates_sent_at_once_log_one_turn(served: tuple[str, str]) -> None:
    url, token = served
    post_turn(url, token, "together", "Hello.", None)  # activated: the duplicates race for the turn only
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: post_turn(url, token, "together", "Tell me about the tides.", "t-1"),
                                range(4)))
    assert {answer.status_code for answer in answers} == {200}
    assert len({(answer.json()["seq"], answer.json()["reply"]) for answer in answers}) == 1
    assert [answer.headers.get("Idempotent-Replayed") for answer in answers].count("true") == 3
    post_turn(url, token, "together", "Anchor.", None)
    turns = logged_turns(url, token, "together", at_least=3)
    assert [turn["payload"]["user_message"] for turn in turns] == ["Hello.", "Tell me about the tides.", "Anchor."]


class CuttingProxy:
    """A loopback HTTP/1.1 proxy to ``target``: the first ``cuts`` requests are forwarded and
    answered by the target, then the client's connection is closed without the answer."""

    def __init__(self, target: str, cuts: int = 1) -> None:
        self.target, self.cuts, self.requests = target, cuts, 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._one, args=(client,), daemon=True).start()

    def _one(self, client: socket.socket) -> None:
        with client:
            reader = client.makefile("rb")
            request_line = reader.readline().decode()
            headers: dict[str, str] = {}
            while (line := reader.readline().decode()) not in ("\r\n", "\n", ""):
                name, _, value = line.partition(":")
                headers[name.strip()] = value.strip()
            body = reader.read(int(headers.get("Content-Length") or headers.get("content-length") or 0))
            method, path, _ = request_line.split(" ", 2)
            forwarded = {name: value for name, value in headers.items()
                         if name.lower() not in ("host", "content-length", "connection", "accept-encoding")}
            answer = httpx.request(method, f"{self.target}{path}", headers=forwarded, content=body, timeout=60)
            self.requests += 1
            if self.requests <= self.cuts:
                client.shutdown(socket.SHUT_RDWR)  # the turn is appended; its answer never leaves
                return
            head = [f"HTTP/1.1 {answer.status_code} {answer.reason_phrase}", "Connection: close",
                    f"Content-Length: {len(answer.content)}"]
            head += [f"{name}: {value}" for name, value in answer.headers.items()
                     if name.lower() not in ("content-length", "connection", "transfer-encoding", "content-encoding")]
            client.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + answer.content)

    def close(self) -> None:
        self._listener.close()


def test_the_openai_sdks_own_retry_after_a_cut_connection_logs_one_turn(served: tuple[str, str]) -> None:
    url, token = served
    proxy = CuttingProxy(url)
    try:
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=token, max_retries=2, timeout=60)
        key = str(uuid.uuid4())
        completion = client.chat.completions.create(
            model="mirror", messages=[{"role": "user", "content": "What did the keeper see?"}],
            extra_headers={"X-Mirror-Conversation": "sdk-retry", "Idempotency-Key": key})
    finally:
        proxy.close()
    assert proxy.requests == 2  # the first answer was cut; the SDK retried once, by itself
    reply = completion.choices[0].message.content
    post_turn(url, token, "sdk-retry", "Anchor.", None)
    turns = logged_turns(url, token, "sdk-retry", at_least=2)
    assert [turn["payload"]["user_message"] for turn in turns] == ["What did the keeper see?", "Anchor."]
    assert turns[0]["payload"]["reply"] == reply and turns[0]["payload"]["idempotency_key"] == key
