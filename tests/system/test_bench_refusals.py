"""The benches' turns wait out a refusal as the openai SDK does: against a real uvicorn that refuses."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from mirror.harness.bench._refusals import MAX_RETRIES, Refusals, post_retrying
from mirror.serving import bind_socket

ANSWERS: dict[str, list[tuple[int, dict[str, Any], dict[str, str]]]] = {
    # path -> what it answers, in order (the last one from then on)
    "/refused-twice": [(503, {"error": "AdmissionRefused"}, {"retry-after": "0"})] * 2 + [(200, {"reply": "hi"}, {})],
    "/refused-always": [(503, {"error": "AdmissionRefused"}, {"retry-after": "0"})],
    "/tenant-share": [(429, {"error": "AdmissionRefused"}, {"retry-after": "0"}), (200, {"reply": "hi"}, {})],
    "/log-behind": [(503, {"detail": "the ingester did not answer load in 2s"}, {"retry-after": "0"}),
                    (200, {"reply": "hi"}, {})],
    "/broken": [(503, {"detail": "no Retry-After"}, {}), (200, {"reply": "hi"}, {})],
}


def _app() -> Any:
    asked: dict[str, int] = {}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        path = scope["path"]
        answers = ANSWERS[path]
        status, body, headers = answers[min(asked.get(path, 0), len(answers) - 1)]
        asked[path] = asked.get(path, 0) + 1
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                *((name.encode(), value.encode()) for name, value in headers.items())]})
        await send({"type": "http.response.body", "body": json.dumps(body).encode()})

    return app


@pytest.fixture
def server() -> Iterator[str]:
    sock = bind_socket("127.0.0.1", 0, "refusing test server")
    served = uvicorn.Server(uvicorn.Config(_app(), log_config=None, log_level="warning", access_log=False,
                                           lifespan="off"))
    thread = threading.Thread(target=served.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not served.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    served.should_exit = True
    thread.join(10)


async def _post(server: str, path: str, refusals: Refusals) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server) as client:
        return await post_retrying(client, path, {"message": "hello"}, refusals)


async def test_a_turn_refused_twice_is_answered_by_the_third_try_and_counted_apart(server: str) -> None:
    refusals = Refusals()
    response = await _post(server, "/refused-twice", refusals)
    assert response.status_code == 200
    assert (refusals.refusals, refusals.unavailable, refusals.refused_turns) == (2, 0, 1)


async def test_a_turn_still_refused_after_the_sdks_retries_is_the_callers_error(server: str) -> None:
    refusals = Refusals()
    response = await _post(server, "/refused-always", refusals)
    assert response.status_code == 503
    assert (refusals.refusals, refusals.refused_turns) == (MAX_RETRIES + 1, 1)


async def test_a_429_of_the_tenants_share_and_a_dependency_behind_are_waited_out_too(server: str) -> None:
    refusals = Refusals()
    assert (await _post(server, "/tenant-share", refusals)).status_code == 200
    assert (await _post(server, "/log-behind", refusals)).status_code == 200
    assert refusals.figures() == {"refusals": 1, "unavailable": 1, "refused_turns": 2, "refusals_waited_s": 0.0}


async def test_a_503_without_retry_after_is_not_sent_again(server: str) -> None:
    refusals = Refusals()
    assert (await _post(server, "/broken", refusals)).status_code == 503
    assert refusals.figures()["refused_turns"] == 0
