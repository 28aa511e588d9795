"""How the client commands find a running stack and talk to its HTTP gateway.

``mirror up`` (and ``mirror demo`` when it starts its own stack) records the gateway in
``<data dir>/stack.json``; :func:`find_stack` reads it, or takes an explicit ``--url`` and
``--token``. :class:`GatewayClient` is a small synchronous httpx client of the public API —
turns (whole, or streamed: :meth:`GatewayClient.turn_stream`), summaries, paged events, the
server-sent event stream, time travel, memory, the portrait
and reflections — that turns every transport or
HTTP failure into one typed error saying what to do, so the CLI prints one line, not a trace.

Errors (``MirrorError`` → ``CLIError`` → …, in :mod:`mirror.cli.errors`):

    NoStackRunning          no live stack for the data directory and no --url given
    MissingToken            --url without a token (also a ValueError)
    GatewayUnavailable      the gateway could not be reached (connection refused, timeout)
    GatewayRequestFailed    the gateway answered with an HTTP error (bad token, unknown id, …)
    ReplyCut                a streamed turn failed after its reply began (its ``error`` event)
"""

from __future__ import annotations

import json
import string
import time
import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from mirror.cli.errors import GatewayRequestFailed, GatewayUnavailable, MissingToken, NoStackRunning, ReplyCut
from mirror.cognition.http_transport import pool_limits
from mirror.stack.embedded import running_stack

TURN_TIMEOUT_S = 660.0  # a sync turn waits for the previous thinking (minutes on the offline model)
TURN_ATTEMPTS = 2
"""A turn is sent again once when its connection broke: its idempotency key makes that safe."""
IDEMPOTENCY_HEADER = "Idempotency-Key"
REQUEST_TIMEOUT_S = 30.0
STREAM_READ_TIMEOUT_S = 60.0  # the gateway sends a keep-alive comment every 15 s
PAGE_LIMIT = 1000  # the events API's largest page
REFLECTIONS_PAGE = 200  # the reflections API's largest page
CONNECTED_COMMENT = ": connected"


@dataclass(frozen=True)
class StackTarget:
    """Where the gateway is, with which token; ``pid`` and ``tenant`` are known from stack.json."""

    url: str
    token: str
    tenant: str | None = None
    pid: int | None = None
    data_dir: Path | None = None


def find_stack(data_dir: Path, url: str | None = None, token: str | None = None) -> StackTarget:
    """An explicit ``url`` wins; otherwise the live stack recorded in ``data_dir``."""
    running = running_stack(data_dir)
    if url:
        if not token and running and running["url"].rstrip("/") == url.rstrip("/"):
            token = running["token"]
        if not token:
            raise MissingToken(url)
        return StackTarget(url=url.rstrip("/"), token=token)
    if running is None:
        raise NoStackRunning(data_dir)
    return StackTarget(url=running["url"], token=token or running["token"], tenant=running.get("tenant"),
                       pid=running.get("pid"), data_dir=Path(data_dir))


class GatewayClient:
    """The gateway's API for one token (one tenant). Use as a context manager, or call close()."""

    def __init__(self, target: StackTarget) -> None:
        self.target = target
        self._http = httpx.Client(base_url=target.url, headers={"Authorization": f"Bearer {target.token}"},
                                  timeout=REQUEST_TIMEOUT_S, limits=pool_limits())

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise GatewayUnavailable(self.target.url, _reason(exc)) from exc
        _raise_for_status(method, path, response)
        return response.json()

    def turn(self, conversation: str, message: str, *, sync: bool = False,
             mind: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send a user message; with ``sync`` the previous turn's thinking finishes first. ``mind``
        (``{"mind", "persona", "order"}``) chooses a new conversation's mind with its first turn."""
        path = conversation_path(conversation, "turns")
        # One key for this message: the retry below (a connection that broke before the answer came
        # back) is answered by the turn the first attempt appended, never a second turn.
        headers = {IDEMPOTENCY_HEADER: str(uuid.uuid4())}
        for attempt in range(TURN_ATTEMPTS):
            try:
                return self._request("POST", path, json={"message": message, **(mind or {})}, headers=headers,
                                     params={"sync": "true" if sync else "false"}, timeout=TURN_TIMEOUT_S)
            except GatewayUnavailable:
                if attempt + 1 == TURN_ATTEMPTS:
                    raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    def turn_stream(self, conversation: str, message: str, *, sync: bool = False,
                    mind: dict[str, Any] | None = None) -> Generator[str | dict[str, Any], None, None]:
        """:meth:`turn` with ``?stream=true``: the reply's pieces (``str``) as the model writes them,
        then the turn's JSON (``dict``, as :meth:`turn` returns it), which the gateway sends only once
        the ``turn`` event is acknowledged. A failure before the first piece is the usual
        :class:`GatewayRequestFailed`; after it, :class:`ReplyCut`. Exhaust or close the iterator
        (closing it early leaves the turn to finish on the server)."""
        path = conversation_path(conversation, "turns")
        timeout = httpx.Timeout(REQUEST_TIMEOUT_S, read=TURN_TIMEOUT_S)
        try:
            with self._http.stream("POST", path, json={"message": message, **(mind or {})}, timeout=timeout,
                                   headers={IDEMPOTENCY_HEADER: str(uuid.uuid4())},
                                   params={"sync": "true" if sync else "false", "stream": "true"}) as response:
                if response.status_code >= 400:
                    response.read()
                    _raise_for_status("POST", path, response)
                for name, data in _server_sent_events(response.iter_lines()):
                    if name == "token":
                        yield str(data["text"])
                    elif name == "turn":
                        yield data
                        return
                    elif name == "error":
                        raise ReplyCut(path, str(data.get("error")), str(data.get("detail")))
        except httpx.TransportError as exc:
            raise GatewayUnavailable(self.target.url, f"the streamed turn broke: {_reason(exc)}") from exc
        raise GatewayUnavailable(self.target.url, "the streamed turn ended without its turn event")

    def choose(self, conversation: str, mind: dict[str, Any]) -> dict[str, Any]:
        """Fix a conversation's mind before its first turn (the same choice again is a no-op; another a 409)."""
        return self._request("POST", conversation_path(conversation), json=mind)

    def persona_state(self, conversation: str, *, at: int | None = None) -> dict[str, Any]:
        """The character's emotions, relationship, goals and last steps (``GET …/persona``)."""
        return self._request("GET", conversation_path(conversation, "persona"), params=_given(at=at))

    def personas(self) -> list[str]:
        return self._request("GET", "/v1/personas")["personas"]

    def push_persona(self, raw: bytes, *, name: str | None = None, toml: bool = False) -> dict[str, Any]:
        """Store a persona file's bytes (card JSON/PNG, or TOML) in the tenant's store."""
        content_type = "application/toml" if toml else "image/png" if raw.startswith(b"\x89PNG") else "application/json"
        return self._request("POST", "/v1/personas", content=raw, params=_given(name=name),
                             headers={"Content-Type": content_type})

    def attach_lorebook(self, persona: str, raw: bytes, *, book_name: str | None = None) -> dict[str, Any]:
        """Attach a World Info lorebook's bytes (JSON) to a stored persona (``POST /v1/personas/{name}/lorebook``)."""
        return self._request("POST", f"/v1/personas/{quote(persona, safe='')}/lorebook", content=raw,
                             params=_given(book_name=book_name), headers={"Content-Type": "application/json"})

    def conversations(self) -> list[dict[str, Any]]:
        return self._request("GET", "/v1/conversations")["conversations"]

    def forget(self, conversation: str) -> dict[str, Any]:
        """Start forgetting the conversation (every branch): its erasure job."""
        return self._request("DELETE", conversation_path(conversation))

    def export(self, conversation: str | None = None, *, tenant: str | None = None) -> bytes:
        """The archive of ``conversation`` (every branch), or of the whole ``tenant`` (admin)."""
        path = conversation_path(conversation) + "/export" if conversation else f"/v1/tenants/{path_segment(tenant)}/export"
        try:
            response = self._http.get(path)
        except httpx.TransportError as exc:
            raise GatewayUnavailable(self.target.url, _reason(exc)) from exc
        _raise_for_status("GET", path, response)
        return response.content

    def import_archive(self, archive: bytes, *, tenant: str | None = None, force: bool = False) -> dict[str, Any]:
        """Import an archive (:meth:`export`'s); what was appended."""
        return self._request("POST", "/v1/import", content=archive, params=_given(tenant=tenant, force=force or None),
                             headers={"Content-Type": "application/x-tar"})

    def forget_job(self, conversation: str) -> dict[str, Any]:
        return self._request("GET", conversation_path(conversation) + "/forget")

    def forget_tenant(self, tenant: str) -> dict[str, Any]:
        """Start forgetting the whole ``tenant`` (admin): its erasure job."""
        return self._request("DELETE", f"/v1/tenants/{path_segment(tenant)}")

    def forget_tenant_job(self, tenant: str) -> dict[str, Any]:
        return self._request("GET", f"/v1/tenants/{path_segment(tenant)}/forget")

    def summary(self, conversation: str) -> dict[str, Any]:
        return self._request("GET", conversation_path(conversation))

    def events_page(self, conversation: str, *, after: int = 0, limit: int = PAGE_LIMIT) -> list[dict[str, Any]]:
        """Committed events with seq > ``after``, at most ``limit``, in seq order."""
        return self._request("GET", conversation_path(conversation, "events"),
                             params={"after": after, "limit": limit})["events"]

    def events(self, conversation: str, *, after: int = 0) -> Iterator[dict[str, Any]]:
        """Every committed event with seq > ``after``, page after page."""
        while True:
            page = self.events_page(conversation, after=after)
            yield from page
            if len(page) < PAGE_LIMIT:
                return
            after = page[-1]["seq"]

    def events_through(self, conversation: str, *, after: int, through: int,
                       timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """Events ``after+1 .. through``, waiting while the ingester commits them (it lags the stream)."""
        found: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout_s
        while True:  # a polling wait, not a retry: no request failed, the events are just not logged yet
            found += [e for e in self.events(conversation, after=after) if e["seq"] <= through]
            after = found[-1]["seq"] if found else after
            if after >= through or time.monotonic() > deadline:
                return found
            time.sleep(0.1)

    def state(self, conversation: str, *, at: int | None = None, at_time: str | None = None,
              branch: str = "main") -> dict[str, Any]:
        return self._request("GET", conversation_path(conversation, "state"),
                             params=_given(branch=branch, at=at, at_time=at_time))

    def diff(self, conversation: str, *, source: int | None = None, target: int | None = None,
             from_branch: str = "main", to_branch: str = "main") -> dict[str, Any]:
        return self._request("GET", conversation_path(conversation, "diff"),
                             params=_given(from_branch=from_branch, to_branch=to_branch, **{"from": source, "to": target}))

    def memory(self, conversation: str, query: str, *, at: int | None = None, branch: str = "main",
               limit: int | None = None) -> dict[str, Any]:
        """What ``query`` recalls at seq ``at`` (default: the last), with every item's ranks and scores."""
        return self._request("GET", conversation_path(conversation, "memory"),
                             params=_given(query=query, branch=branch, at=at, limit=limit))

    def memory_items(self, conversation: str, what: str, *, at: int | None = None,
                     branch: str = "main") -> dict[str, Any]:
        """The projected ``beliefs``, ``edges`` or ``reviews`` at seq ``at`` (default: the last)."""
        return self._request("GET", conversation_path(conversation, what), params=_given(branch=branch, at=at))

    def portrait(self, conversation: str, *, at: int | None = None, branch: str = "main") -> dict[str, Any]:
        """The portrait at seq ``at`` (default: the last), with the last reflection and the counts."""
        return self._request("GET", conversation_path(conversation, "portrait"), params=_given(branch=branch, at=at))

    def reflections(self, conversation: str, *, at: int | None = None, branch: str = "main") -> dict[str, Any]:
        """Every reflection up to seq ``at`` (page after page, joined) and the failed attempts."""
        path = conversation_path(conversation, "reflections")
        answer = self._request("GET", path, params=_given(branch=branch, at=at, limit=REFLECTIONS_PAGE))
        while len(answer["reflections"]) < answer["count"]:
            page = self._request("GET", path, params=_given(branch=branch, at=answer["seq"], limit=REFLECTIONS_PAGE,
                                                            after=answer["reflections"][-1]["number"]))
            if not page["reflections"]:
                break
            answer["reflections"] += page["reflections"]
        return answer

    def reflection(self, conversation: str, number: int, *, branch: str = "main") -> dict[str, Any]:
        """What reflection ``number`` (1-based) changed."""
        return self._request("GET", conversation_path(conversation, "reflections", number),
                             params=_given(branch=branch))

    def reflect(self, conversation: str) -> dict[str, Any]:
        """Force a reflection now (it waits for the thinking behind it, then makes two model calls)."""
        return self._request("POST", conversation_path(conversation, "reflect"), timeout=TURN_TIMEOUT_S)

    def start_recompute(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", "/v1/recompute", json=body)

    def recompute_status(self, job: str) -> dict[str, Any]:
        return self._request("GET", f"/v1/recompute/{path_segment(job)}")

    def stream(self, conversation: str) -> EventStream:
        return EventStream(self, conversation)


class EventStream:
    """The conversation's server-sent events; entered once the gateway has subscribed.

    Entering waits for the gateway's ``: connected`` comment, so every event published after
    ``__enter__`` returns is delivered: a caller can open the stream, then read history from
    the events API, and miss nothing in between (it may see an event twice: compare seqs).
    """

    def __init__(self, client: GatewayClient, conversation: str) -> None:
        self._client = client
        self._path = conversation_path(conversation, "stream")
        self._context: Any = None
        self._lines: Iterator[str] | None = None

    def __enter__(self) -> EventStream:
        timeout = httpx.Timeout(REQUEST_TIMEOUT_S, read=STREAM_READ_TIMEOUT_S)
        try:
            self._context = self._client._http.stream("GET", self._path, timeout=timeout)
            response = self._context.__enter__()
            if response.status_code >= 400:
                response.read()
                _raise_for_status("GET", self._path, response)
            self._lines = response.iter_lines()
            for line in self._lines:
                if line.startswith(CONNECTED_COMMENT):
                    break
        except httpx.TransportError as exc:
            self.__exit__(None, None, None)
            raise GatewayUnavailable(self._client.target.url, _reason(exc)) from exc
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._context is not None:
            context, self._context = self._context, None
            context.__exit__(None, None, None)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Events as they are published (``data:`` lines joined per message; comments skipped)."""
        assert self._lines is not None, "enter the stream first"
        data: list[str] = []
        try:
            for line in self._lines:
                if line.startswith("data:"):
                    data.append(line[5:].lstrip())
                elif not line and data:
                    yield json.loads("\n".join(data))
                    data = []
        except httpx.TransportError as exc:
            raise GatewayUnavailable(self._client.target.url, f"the event stream broke: {_reason(exc)}") from exc


def _server_sent_events(lines: Iterator[str]) -> Iterator[tuple[str, Any]]:
    """(event name, its JSON data) per server-sent event; comments skipped, the name ``message`` when none."""
    name, data = "message", list[str]()
    for line in lines:
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line:
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", []


_PLAIN = frozenset(string.ascii_letters + string.digits + "_-")


def path_segment(value: object) -> str:
    """``value`` as one path segment: every byte outside ``[A-Za-z0-9_-]`` (the identifier alphabet) percent-encoded.

    The commands validate ids before any request (:func:`mirror.cli.options.identifier`); this is the second
    guard, so that no id can ever add a query string (``?``), a segment (``/``) or a step up (``..``, which
    httpx would resolve before sending: ``.`` is encoded too) to the URL it is put in.
    """
    return "".join(char if char in _PLAIN else "".join(f"%{byte:02X}" for byte in char.encode())
                   for char in str(value))


def conversation_path(conversation: str, *rest: object) -> str:
    """``/v1/conversations/{conversation}/{rest…}``, each part one encoded segment (:func:`path_segment`)."""
    return "/".join(("/v1/conversations", *(path_segment(part) for part in (conversation, *rest))))


def _given(**params: Any) -> dict[str, Any]:
    """Query parameters without the ones left at None (the API's defaults apply to those)."""
    return {name: value for name, value in params.items() if value is not None}


def _raise_for_status(method: str, path: str, response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    raise GatewayRequestFailed(method, path, response.status_code, str(detail)[:300])


def _reason(exc: httpx.TransportError) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


__all__ = [
    "CONNECTED_COMMENT", "EventStream", "GatewayClient", "PAGE_LIMIT", "REFLECTIONS_PAGE", "REQUEST_TIMEOUT_S",
    "STREAM_READ_TIMEOUT_S", "StackTarget", "TURN_TIMEOUT_S", "conversation_path", "find_stack", "path_segment",
]
