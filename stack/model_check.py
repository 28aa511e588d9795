"""The model server's check when a stack starts: is there an OpenAI-compatible server at ``--llm``?

One ``GET <base_url>/models`` (every OpenAI-compatible server answers it: vLLM, Ollama, llama.cpp's
server, the hosted APIs, Mirror's simulator), with the API key if one is set, within a few
seconds. What it finds is one line: no server listening, no answer, an API key refused, a path
that is not an OpenAI API (404), an error status or a body that is no model list. ``mirror up``
warns with it and starts anyway (a model server may come up later; turns are a 503 until it
does), or with ``--strict`` refuses to start (:class:`~mirror.stack.errors.ModelServerUnavailable`).

It does not check the model's name: some servers (llama.cpp's) answer any name with their one
model and list another, so a name missing from the list is not an error everywhere.
"""

from __future__ import annotations

import httpx

from mirror.cognition.errors import excerpt, redact
from mirror.cognition.openai_client import HEADER_AUTHORIZATION, LLMSettings

__all__ = ["CHECK_TIMEOUT_S", "model_server_problem"]

CHECK_TIMEOUT_S = 5.0
"""How long the check waits for the model server's answer (a list of models comes at once from a live server)."""
_KEY_REFUSED = (401, 403)
_NOT_FOUND = 404


def model_server_problem(llm: LLMSettings, timeout_s: float = CHECK_TIMEOUT_S) -> str | None:
    """What is wrong with the model server at ``llm.base_url``, in words that follow its URL; None if it answers."""
    url = llm.base_url.rstrip("/") + "/models"
    headers = {HEADER_AUTHORIZATION: f"Bearer {llm.api_key}"} if llm.api_key else {}
    try:
        response = httpx.get(url, headers=headers, timeout=timeout_s)
    except httpx.TimeoutException:
        return f"did not answer GET {url} within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        return f"cannot be reached ({type(exc).__name__}: {redact(str(exc), llm.api_key) or 'no detail'})"
    status = response.status_code
    said = excerpt(redact(response.text.strip(), llm.api_key), 120)
    if status in _KEY_REFUSED:
        return f"refused the API key: GET {url} answered {status} ({said}); set MIRROR_LLM_API_KEY"
    if status == _NOT_FOUND:
        return f"answered GET {url} with 404: is it an OpenAI-compatible API's base URL (it usually ends in /v1)?"
    if not response.is_success:
        return f"answered GET {url} with {status} ({said})"
    try:
        models = response.json().get("data")
    except (ValueError, AttributeError):
        models = None
    if not isinstance(models, list):
        return f"answered GET {url} with something that is not a list of models ({said})"
    return None
