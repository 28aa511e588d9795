"""Every gateway route with a conversation or branch parameter refuses a bad one with the same 400, first.

The routes are read from the gateway's own ``/openapi.json``, so a new route is covered without a list to keep.
A bad conversation goes in the path, percent-encoded as one segment (as the CLI's client sends any id); a bad
branch in each query parameter named ``branch``, ``from_branch`` or ``to_branch``, with a conversation that does
not exist: the id is checked before anything is looked up, so the answer is the 400, never a 404. Ids with a
``/`` or empty cannot be one path segment at all (the router never reaches a route for them); as a branch they
get the same 400. Nothing is created by any of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from mirror.cli.gateway_client import path_segment
from mirror.events.errors import InvalidIdentifier
from mirror.events.ids import validate_identifier
from mirror.events.nats.server import EmbeddedNats
from mirror.gateway.openai.errors import is_openai_path
from tests.support.stack import gateway_stack
from tests.system.test_cli_ids import BAD_IDS

pytestmark = pytest.mark.long  # ~15 s: every route; .ci/run runs it with -m long

BRANCH_PARAMETERS = ("branch", "from_branch", "to_branch")
CHAT_BODY = {"model": "mirror", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def gateway(ray_cluster: None, nats_server: EmbeddedNats,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with gateway_stack(nats_server.url, tmp_path_factory.mktemp("gateway-ids"), shard="ids", latency="fixed:0") as (url, tokens), \
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens['acme']}"}, timeout=60) as client:
        yield client


def conversation_routes(client: httpx.Client) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path template, operation) of every route whose path names a conversation."""
    paths = client.get("/openapi.json").json()["paths"]
    return [(method.upper(), path, operation) for path, operations in paths.items() if "{conversation}" in path
            for method, operation in operations.items()]


def refused(template: str, kind: str, bad: str) -> tuple[int, dict[str, Any]]:
    """The 400 every route answers: Mirror's ``detail``, or on the OpenAI-compatible routes (``/c/{conversation}/v1``)
    OpenAI's error shape with the same words and where the name came from."""
    if not is_openai_path(template):
        return 400, {"detail": refusal(kind, bad)}
    return 400, {"error": {"message": f"{refusal(kind, bad)} (named by the base URL's path /c/{{conversation}}/v1)",
                           "type": "invalid_request_error", "param": None, "code": "invalid_conversation"}}


def refusal(kind: str, bad: str) -> str:
    with pytest.raises(InvalidIdentifier) as refused:
        validate_identifier(kind, bad)
    return str(refused.value)


def ask(client: httpx.Client, method: str, template: str, operation: dict[str, Any], conversation: str,
        **query: str) -> httpx.Response:
    """The route with ``conversation`` (already a segment) in its path, a value for every other required
    parameter, ``query`` added, and a body where it takes one."""
    path = template.replace("{conversation}", conversation).replace("{number}", "1")
    params = {p["name"]: "x" for p in operation.get("parameters", ()) if p["in"] == "query" and p.get("required")}
    body = None
    if "requestBody" in operation:
        body = CHAT_BODY if is_openai_path(template) else {"message": "hi"}
    return client.request(method, path, params={**params, **query}, json=body)


def test_every_route_refuses_a_bad_conversation_or_branch_with_the_same_400(gateway: httpx.Client) -> None:
    routes = conversation_routes(gateway)
    assert len(routes) >= 15  # the walk found them (turns, summary, events, state, diff, memory, portrait, …)
    checked_branches = 0
    for method, template, operation in routes:
        where = f"{method} {template}"
        for bad in BAD_IDS:
            if bad and "/" not in bad:
                response = ask(gateway, method, template, operation, path_segment(bad))
                assert (response.status_code, response.json()) == refused(template, "conversation", bad), where
        for name in (p["name"] for p in operation.get("parameters", ()) if p["name"] in BRANCH_PARAMETERS):
            checked_branches += 1
            for bad in BAD_IDS:
                response = ask(gateway, method, template, operation, "c1", **{name: bad})
                assert (response.status_code, response.json()) == (400, {"detail": refusal("branch", bad)}), (where, name)
    assert checked_branches >= 10
    assert gateway.get("/v1/conversations").json()["conversations"] == []  # nothing was created
    assert gateway.get("/v1/conversations/c1").status_code == 404
