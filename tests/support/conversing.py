"""A client's two-turn conversation with Mirror, the way the client tests hold it: a gateway on a
real runtime, a recording pass-through in front of it (what the client really sent, and what it
got back, for the assertions and for docs/clients.md's transcripts), and the checks that the
second turn recalled the first.

The pass-through forwards bytes as they come (a streamed reply stays streamed) and answers with
``Connection: close``; it records each exchange whole once the reply has ended.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from tests.support.waits import until

__all__ = ["FACT", "LATER", "Exchange", "Mirror", "mirror_stack", "recording_proxy", "two_turns", "write_transcripts"]

FACT = "I have a severe peanut allergy."
LATER = "Could you suggest a peanut snack for my hike?"
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "accept-encoding"}


@dataclass(frozen=True)
class Exchange:
    """One request a client sent and the reply it got, as bytes crossed the wire."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int
    reply_headers: dict[str, str]
    reply: str

    def header(self, name: str) -> str | None:
        """A request header, by its name in any case (clients differ: Node's fetch sends lowercase)."""
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)

    def transcript(self, keep: int = 200) -> str:
        """The exchange as docs/clients.md shows it: the request line, the headers the client chose
        (not its token nor the SDKs' ``x-stainless-*`` telemetry), the JSON body, the status,
        Mirror's headers and the reply (a stream's first and last events), each trimmed."""
        shown = {k: v for k, v in self.headers.items() if k.lower() not in {"authorization", "content-type", "accept"}
                 and not k.lower().startswith("x-stainless")}
        mirror = {k: v for k, v in self.reply_headers.items() if k.lower().startswith("x-mirror")}
        events = [line for line in self.reply.splitlines() if line.startswith("data: ")]
        reply = [*events[:2], "…", *events[-2:]] if len(events) > 4 else events or [_compact(self.reply)]
        body = json.dumps(self.body, ensure_ascii=False)
        return "\n".join([f"> {self.method} {self.path}", *(f"> {k}: {v}" for k, v in sorted(shown.items())),
                          f"> {_trim(body, keep * 3)}", f"< {self.status}",
                          *(f"< {k}: {v}" for k, v in sorted(mirror.items())), *(f"< {_trim(r, keep * 2)}" for r in reply)])


def _compact(reply: str) -> str:
    """A completion's reply with only what a reader looks for: the text and Mirror's field."""
    try:
        whole = json.loads(reply)
        kept = {"choices": [{"message": {"content": _trim(whole["choices"][0]["message"]["content"], 80)},
                             "finish_reason": whole["choices"][0]["finish_reason"]}], "mirror": whole.get("mirror")}
    except (ValueError, KeyError, IndexError, TypeError):
        return reply.strip()
    return json.dumps(kept, ensure_ascii=False)


def _trim(text: str, keep: int) -> str:
    return text if len(text) <= keep else text[:keep] + " …"


@dataclass
class Mirror:
    """A running gateway as a client sees it: ``url`` (the recording pass-through) and a token."""

    url: str
    token: str
    upstream: str
    exchanges: list[Exchange] = field(default_factory=list)

    def events(self, conversation: str) -> list[dict[str, Any]]:
        answer = httpx.get(f"{self.upstream}/v1/conversations/{conversation}/events", params={"limit": 1000},
                           headers={"Authorization": f"Bearer {self.token}"}, timeout=30)
        return answer.json().get("events", []) if answer.status_code == 200 else []

    def idle(self, conversation: str) -> list[dict[str, Any]]:
        """The conversation's events once it has thought its last turn through."""
        def done() -> bool:
            state = httpx.get(f"{self.upstream}/v1/conversations/{conversation}",
                              headers={"Authorization": f"Bearer {self.token}"}, timeout=30)
            return state.status_code == 200 and not state.json()["thinking"]
        until(done, f"{conversation} done thinking", timeout=60)
        return self.events(conversation)

    def sent(self, conversation: str, at_least: int) -> list[Exchange]:
        """The chat requests that named ``conversation`` (by base URL, a header's value or ``user``),
        once ``at_least`` are recorded (each is recorded when its reply has ended)."""
        def named() -> list[Exchange]:
            found = [e for e in self.exchanges if e.path.endswith("/chat/completions") and (
                e.path.startswith(f"/c/{conversation}/") or conversation in e.headers.values()
                or isinstance(e.body, dict) and e.body.get("user") == conversation)]
            return found if len(found) >= at_least else []
        return until(named, f"{at_least} recorded request(s) for {conversation}")


def turns_of(logged: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event for event in logged if event["type"] == "turn"]


def two_turns(mirror: Mirror, conversation: str, say: Callable[[str], str]) -> list[dict[str, Any]]:
    """``say`` the fact, let Mirror think it through, ``say`` the later question; assert the log holds
    exactly those two turns with the replies the client got, and that the second turn's recall
    named the belief the first left (the simulator is deterministic: its memory stage turns the
    fact into a belief mentioning peanuts). Returns the log."""
    first = say(FACT)
    assert first, "no reply to the first turn"
    mirror.idle(conversation)
    second = say(LATER)
    logged = mirror.idle(conversation)
    turns = turns_of(logged)
    assert [t["payload"]["user_message"] for t in turns] == [FACT, LATER], conversation
    assert [t["payload"]["reply"].strip() for t in turns] == [first.strip(), second.strip()], conversation
    beliefs = {e["payload"]["belief_id"]: e["payload"] for e in logged if e["type"] == "belief"}
    recall = next(e for e in logged if e["type"] == "recall" and e["seq"] == turns[1]["seq"] - 1)
    assert any("peanut" in json.dumps(beliefs[b]) for b in recall["payload"]["belief_ids"] if b in beliefs), \
        f"{conversation}: the second turn did not recall the first"
    return logged


def _handler(upstream: str, record: Callable[[Exchange], None]) -> type[BaseHTTPRequestHandler]:
    class PassThrough(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one exchange per connection: the reply ends when it closes

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            received = bytearray()
            with httpx.Client(timeout=120) as client, \
                    client.stream(self.command, upstream + self.path, content=raw, headers=headers) as answer:
                self.send_response(answer.status_code)
                for key, value in answer.headers.items():
                    if key.lower() not in HOP_BY_HOP | {"content-encoding", "server", "date"}:
                        self.send_header(key, value)
                self.send_header("Connection", "close")
                self.end_headers()
                for chunk in answer.iter_raw():
                    received += chunk
                    self.wfile.write(chunk)
                    self.wfile.flush()
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode(errors="replace")
            record(Exchange(self.command, self.path, headers, body, answer.status_code, dict(answer.headers),
                            received.decode(errors="replace")))

        do_GET = do_POST = _forward

    return PassThrough


@contextlib.contextmanager
def recording_proxy(upstream: str) -> Iterator[tuple[str, list[Exchange]]]:
    """A pass-through to ``upstream`` on a free loopback port: yields its URL and the exchanges so far."""
    exchanges: list[Exchange] = []
    lock = threading.Lock()

    def record(exchange: Exchange) -> None:
        with lock:
            exchanges.append(exchange)

    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(upstream, record))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", exchanges
    finally:
        server.shutdown()
        server.server_close()


def write_transcripts(directory: Path | None, name: str, exchanges: list[Exchange]) -> None:
    """Keep a client's exchanges for docs/clients.md when a directory is given (``MIRROR_TRANSCRIPTS``)."""
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{name}.txt").write_text("\n\n".join(exchange.transcript() for exchange in exchanges) + "\n")


@contextlib.contextmanager
def mirror_stack(nats_url: str, directory: Path, shard: str) -> Iterator[Mirror]:
    """What ``mirror up --llm sim`` runs (the gateway on conversation hosts, an ingester, the
    simulator) on the caller's Ray cluster and broker, behind the recording pass-through."""
    from tests.support.stack import gateway_stack

    with gateway_stack(nats_url, directory, shard=shard, latency="fixed:5", token_delay_ms=5.0) as (url, tokens), \
            recording_proxy(url) as (proxy, exchanges):
        yield Mirror(proxy, tokens["acme"], url, exchanges)
