"""Cards as front ends write them (issue 35), end to end: SillyTavern's Seraphina and her World
Info lorebook through a real gateway, NATS (its key-value store), Ray, DuckDB and the simulator;
the prompts the model receives; ``finish_reason: length`` and the model's usage through the
``openai`` package."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from mirror.cognition.llm import LLM, ChatRequest, ChatResponse
from mirror.cognition.persona import read_persona
from mirror.cognition.persona.background import PERSONA_STAGES, persona_step
from mirror.cognition.persona.prompting import default_persona_prompts
from mirror.cognition.persona.turn_path import choose_persona
from mirror.cognition.pipeline import MirrorConfig, talk, talker_request
from mirror.cognition.prompts import default_prompt_set
from mirror.cognition.turn import compose_persona_turn
from mirror.events.ids import StreamKey
from mirror.events.nats.server import EmbeddedNats
from mirror.projections.conversation import apply
from mirror.projections.state import initial_state
from mirror.sim.server import SimLLMServer, SimSettings
from tests.support.sim import sim_client
from tests.support.stack import conversation_runtime
from tests.support.waits import until

CARDS = Path(__file__).parents[1] / "cards"
SERAPHINA = CARDS / "default_Seraphina.png"
ELDORIA = CARDS / "Eldoria.json"
WREN = Path(__file__).parents[2] / "cognition" / "persona" / "examples" / "wren.json"
MACROS = ("{{user}}", "{{char}}", "<USER>", "<BOT>")
TALKER_MAX_TOKENS = 8
"""Small enough that the simulator's Talker prose is cut (its finish_reason ``length``)."""


class Recording:
    """The LLM port, passing every request on and keeping it: what the model received."""

    def __init__(self, llm: LLM) -> None:
        self.llm = llm
        self.requests: list[ChatRequest] = []

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        return await self.llm.chat(request)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.llm.embed(texts)


async def test_every_prompt_seraphina_is_given_names_the_user_and_her_never_a_macro() -> None:
    """The turn path (think, appraisal, plan, formulation) and the four background steps, their
    requests as the simulator receives them: the card's description, the greeting in the history,
    the lorebook entries retrieved — all with Ada and Seraphina, none with ``{{user}}``."""
    key = StreamKey("acme", "glade")
    config = MirrorConfig(mode="baseline", memory=False, reflection=False, model="sim-1")
    prompts = default_persona_prompts()
    with SimLLMServer(SimSettings()) as sim:
        async with sim_client(sim) as client:
            llm = Recording(client)
            chosen = await choose_persona(read_persona(SERAPHINA), None, user_name="Ada")
            composed = await compose_persona_turn(initial_state(key), "Where am I? Who are you?", llm=llm, embedder=None,
                                                  prompts=prompts, config=config, now=1.0, chosen=chosen)
            state = initial_state(key)
            for event in composed.events(key, 1):
                state = apply(state, event)
            for stage in PERSONA_STAGES:
                thinking = await persona_step(state, stage, llm, None, prompts, config)
                assert thinking.thoughts
    assert [event.type for event in composed.events(key, 1)][:2] == ["persona", "greeting"]
    texts = ["\n".join(message.content for message in request.messages) for request in llm.requests]
    assert len(texts) == 4 + len(PERSONA_STAGES)
    for text in texts:
        assert "Seraphina" in text and not any(macro in text for macro in MACROS), text[:300]
    assert all("Ada" in text for text in texts[:4])  # the path's steps carry the card's text (Ada is in it)
    formulation = llm.requests[3].messages
    assert formulation[1].role == "assistant" and formulation[1].content.startswith("*You wake with a start")
    assert formulation[2].content == "Where am I? Who are you?"
    assert any('Ada: "What is Eldoria?"' in text or 'Ada: "What are Shadowfangs?"' in text for text in texts[1:4]), \
        "a lorebook entry reached the plan/appraisal/formulation prompts, with the user's name"


async def test_the_model_s_finish_reason_travels_plain_and_streamed() -> None:
    """The simulator cuts its prose at ``max_tokens`` and says ``length``, as a model does: the
    client hands that on (plain and streamed), and so does the Talker."""
    state = initial_state(StreamKey("acme", "cut"))
    config = MirrorConfig(mode="baseline", memory=False, reflection=False, model="sim-1",
                          talker_max_tokens=TALKER_MAX_TOKENS)
    request = talker_request(state, "Tell me a long story.", default_prompt_set(), config, "")
    with SimLLMServer(SimSettings()) as sim:
        async with sim_client(sim) as client:
            plain = await client.chat(request)
            pieces: list[str] = []
            streamed = await client.chat_streamed(request, pieces.append)
            said = await talk(state, "Tell me a long story.", client, default_prompt_set(), config)
            roomy = await client.chat(replace(request, max_tokens=1024))
    assert plain.finish_reason == streamed.finish_reason == said.finish_reason == "length"
    assert "".join(pieces) == streamed.content and roomy.finish_reason == "stop"


@pytest.fixture(scope="module")
def stack(ray_cluster: None, nats_server: EmbeddedNats,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """A gateway whose Talker may write :data:`TALKER_MAX_TOKENS` tokens (a cut reply)."""
    from mirror.gateway.app import GatewayServer, GatewaySettings, create_app
    from mirror.gateway.tenants import TenantRegistry

    directory = tmp_path_factory.mktemp("cards")
    registry = TenantRegistry(directory / "tenants.json")
    # Tenants of their own: the persona store is a bucket on the session's broker, which other
    # modules' tenants (acme, globex) share.
    tokens = {tenant: registry.add(tenant) for tenant in ("cards", "cards-other")}
    with conversation_runtime(nats_server.url, directory, shard="cards", latency="fixed:2",
                              talker_max_tokens=TALKER_MAX_TOKENS) as runtime:
        app = create_app(GatewaySettings(runtime=runtime, tenants_file=str(directory / "tenants.json")))
        with GatewayServer(app) as server:
            yield server.url, tokens


def client_of(stack: tuple[str, dict[str, str]], tenant: str = "cards") -> httpx.Client:
    url, tokens = stack
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens[tenant]}"}, timeout=60)


def test_seraphina_is_found_by_her_card_s_name_and_opens_with_her_greeting(stack) -> None:
    with client_of(stack) as client:
        stored = client.post("/v1/personas", content=SERAPHINA.read_bytes(), headers={"Content-Type": "image/png"})
        assert stored.status_code == 201 and stored.json()["name"] == "seraphina", stored.text
        shown = client.get("/v1/personas/Seraphina", params={"user_name": "Ada"})
        assert shown.status_code == 200 and shown.json()["name"] == "seraphina"
        assert shown.json()["persona"]["greeting"].startswith("*You wake") and shown.json()["persona"]["user_name"] == "Ada"
        answer = client.post("/v1/conversations/glade/turns", json={"message": "Where am I?", "persona": "Seraphina",
                                                                     "user_name": "Ada"})
        assert answer.status_code == 200, answer.text
        summary = client.get("/v1/conversations/glade").json()
        assert summary["mind"] == "persona" and summary["greeting"].startswith("*You wake")
        state = client.get("/v1/conversations/glade/persona").json()
        assert state["greeting"] == summary["greeting"] and state["user_name"] == "Ada" and state["name"] == "Seraphina"
        def opened() -> list[dict[str, Any]]:
            found = [e for e in client.get("/v1/conversations/glade/events").json()["events"]
                     if e["type"] in ("persona", "greeting", "turn")]
            return found if len(found) >= 3 else []

        events = until(opened, "glade's persona, greeting and turn in the log")
        assert [event["type"] for event in events[:3]] == ["persona", "greeting", "turn"]
        assert events[1]["payload"]["text"] == summary["greeting"] and events[0]["payload"]["user_name"] == "Ada"
        again = client.post("/v1/conversations/glade", json={"persona": "seraphina", "user_name": "Bob"})
        assert again.status_code == 409 and "user_name" in again.text


def test_a_world_info_file_is_refused_as_a_card_and_attached_as_a_lorebook(stack) -> None:
    with client_of(stack) as client:
        refused = client.post("/v1/personas", content=ELDORIA.read_bytes(), headers={"Content-Type": "application/json"})
        assert refused.status_code == 400
        assert "this is a World Info lorebook, not a character card: attach it" in refused.json()["detail"]
        assert "eldoria" not in client.get("/v1/personas").json()["personas"]
        stored = client.post("/v1/personas", content=WREN.read_bytes(), headers={"Content-Type": "application/json"})
        assert stored.status_code == 201
        attached = client.post("/v1/personas/Wren Halloway/lorebook", content=ELDORIA.read_bytes(),
                               params={"book_name": "Eldoria"})
        assert attached.status_code == 200, attached.text
        lore = [entry["text"] for entry in attached.json()["persona"]["biography"] if entry["source"] == "lorebook"]
        assert len(lore) == 4 and lore[0].startswith('User: "What is Eldoria?"\nWren Halloway:')
        assert attached.json()["version"] != stored.json()["version"]
        assert client.get("/v1/personas/wren-halloway").json()["version"] == attached.json()["version"]
        not_a_book = client.post("/v1/personas/wren-halloway/lorebook", content=WREN.read_bytes())
        assert not_a_book.status_code == 400 and "is not a lorebook" in not_a_book.json()["detail"]


def test_a_name_two_cards_show_is_a_409_naming_both(stack) -> None:
    with client_of(stack, "cards-other") as client:
        for name in ("seraphina-a", "seraphina-b"):
            assert client.post("/v1/personas", params={"name": name}, content=SERAPHINA.read_bytes()).status_code == 201
        ambiguous = client.post("/v1/conversations/twice/turns", json={"message": "hello", "persona": "SERAPHINA"})
        assert ambiguous.status_code == 409 and ambiguous.json()["candidates"] == [
            "seraphina-a (Seraphina)", "seraphina-b (Seraphina)"]
        assert client.get("/v1/conversations/twice").status_code == 404  # nothing was made of it
        assert client.get("/v1/personas/nobody").status_code == 404


def test_a_length_cut_reply_is_finish_reason_length_with_the_model_s_usage(stack) -> None:
    url, tokens = stack
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=tokens["cards"], max_retries=0, timeout=60)
    headers = {"X-Mirror-Conversation": "cut"}
    plain = client.chat.completions.create(model="mirror-baseline", messages=[{"role": "user", "content": "Go on."}],
                                           extra_headers=headers)
    assert plain.choices[0].finish_reason == "length"
    with client_of(stack) as native:
        turn: dict[str, Any] = until(lambda: next((e for e in native.get("/v1/conversations/cut/events").json()["events"]
                                                   if e["type"] == "turn"), {}), "cut's turn in the log")
    provenance = turn["provenance"]
    assert plain.usage is not None and (plain.usage.prompt_tokens, plain.usage.completion_tokens) == (
        provenance["prompt_tokens"], provenance["completion_tokens"])  # the model's own count
    stream = client.chat.completions.create(model="mirror-baseline", stream=True, extra_headers=headers,
                                            messages=[{"role": "user", "content": "Go on."},
                                                      {"role": "assistant", "content": plain.choices[0].message.content},
                                                      {"role": "user", "content": "And then?"}])
    reasons = [chunk.choices[0].finish_reason for chunk in stream if chunk.choices and chunk.choices[0].finish_reason]
    assert reasons == ["length"]
