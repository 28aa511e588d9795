"""Issue 35 with the official ``openai`` package against a real gateway, conversation hosts, NATS,
the ingester and the simulator: the client's system messages are the conversation's
instructions (an event when they change, in the Talker's request), and a regenerated or edited
transcript continues on a branch of its own, never as a second turn on ``main``.

Every conversation here is read back from the log at the end: ``replay verify`` over each of its
branches makes no model call and finds nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from mirror.cognition.memory.turn import replay_recall
from mirror.cognition.pipeline import talker_request
from mirror.cognition.prompts import default_prompt_set
from mirror.events.ids import StreamKey
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Fork, Instructions, Recall, Turn
from mirror.replay import History
from mirror.replay.compare import basis_of, config_from
from mirror.replay.verify import talker_bases
from mirror.replay.verify_log import verify_branch
from tests.support.stack import conversation_runtime
from tests.system.test_replay import log_of

CARD = "You are Captain Reed, a terse sea captain. Answer in one sentence."


@pytest.fixture(scope="module")
def served(ray_cluster: None, nats_server: EmbeddedNats,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, object]]:
    from mirror.gateway.app import GatewayServer, GatewaySettings, create_app
    from mirror.gateway.tenants import TenantRegistry

    directory: Path = tmp_path_factory.mktemp("branches")
    token = TenantRegistry(directory / "tenants.json").add("acme")
    with conversation_runtime(nats_server.url, directory, shard="branches", latency="fixed:2") as runtime:
        app = create_app(GatewaySettings(runtime=runtime, tenants_file=str(directory / "tenants.json")))
        with GatewayServer(app) as server:
            yield server.url, token, runtime


def client_of(served: tuple[str, str, object]) -> openai.OpenAI:
    url, token, _ = served
    return openai.OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0, timeout=60)


def ask(client: openai.OpenAI, conversation: str, messages: list[dict[str, str]], key: str | None = None,
        model: str = "mirror-baseline") -> tuple[str, str, dict, dict[str, str]]:
    """One completion: its reply, its branch (header), its ``mirror`` extension and headers."""
    headers = {"X-Mirror-Conversation": conversation, **({"Idempotency-Key": key} if key else {})}
    raw = client.chat.completions.with_raw_response.create(model=model, messages=messages,  # type: ignore[arg-type]
                                                           extra_headers=headers)
    completion = raw.parse()
    extension = (completion.model_extra or {})["mirror"]
    assert raw.headers["x-mirror-branch"] == extension["branch"]
    return completion.choices[0].message.content or "", extension["branch"], extension, dict(raw.headers)


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


async def logged(runtime: object, conversation: str) -> dict[str, list]:
    """Every branch of ``conversation``: its own events, read from the log once it holds them."""
    main = StreamKey("acme", conversation)
    async with log_of(runtime, main) as (bus, log):  # type: ignore[arg-type]
        (summary,) = await log.conversations("acme", conversation)
        branches = {}
        for name in summary.branches:
            key = StreamKey("acme", conversation, name)
            assert await log.wait_committed((await bus.head(key)).fence, timeout=30)
            branches[name] = await log.read(key)
    return branches


async def verified(runtime: object, conversation: str) -> None:
    """``replay verify`` over every branch: no divergence, no model call."""
    main = StreamKey("acme", conversation)
    async with log_of(runtime, main) as (_, log):  # type: ignore[arg-type]
        (summary,) = await log.conversations("acme", conversation)
        for name in summary.branches:
            report = await verify_branch(History(log), StreamKey("acme", conversation, name))
            assert report.ok and report.model_calls == 0 and not report.divergences, (name, report)


async def test_system_messages_are_instructions_recorded_when_they_change(served) -> None:
    client = client_of(served)
    first = [{"role": "system", "content": CARD}, user("Where are we headed?")]
    said, branch, _, headers = ask(client, "reed", first)
    assert branch == "main" and headers["x-mirror-history"] == "none" and "x-mirror-system" not in headers
    history = [{"role": "system", "content": CARD}, user("Where are we headed?"), assistant(said)]
    again, _, _, headers = ask(client, "reed", [*history, user("How long will it take?")])  # the same card again
    assert headers["x-mirror-history"] == "same"
    changed = CARD.replace("terse", "cheerful")
    ask(client, "reed", [{"role": "system", "content": changed}, *history[1:], user("How long will it take?"),
                         assistant(again), user("And the weather?")])
    events = (await logged(served[2], "reed"))["main"]
    instructions = [event for event in events if isinstance(event.payload, Instructions)]
    assert [event.payload.text for event in instructions] == [CARD, changed]  # resent unchanged: nothing
    turns = [event for event in events if isinstance(event.payload, Turn)]
    assert len(turns) == 3 and [event.turn for event in instructions] == [0, 2]
    for instructed in instructions:  # appended with its turn, right before that turn's recall (if any) and the turn
        between = [event for event in events if instructed.seq < event.seq < turns[instructed.turn].seq]
        assert all(isinstance(event.payload, Recall) for event in between)
    await verified(served[2], "reed")
    # The Talker's recorded request is the one the state with the instructions makes: same fingerprint
    async with log_of(served[2], StreamKey("acme", "reed")) as (_, log):
        for instructed in instructions:
            turn = turns[instructed.turn]
            state = await History(log).state_at(StreamKey("acme", "reed"), turn.seq - 1)
            assert state.instructions == instructed.payload.text
            recall = next((event for event in events if event.seq == turn.seq - 1 and isinstance(event.payload, Recall)),
                          None)
            # The Thinker may have appended while the Talker waited for the model: the request was
            # made from one of the states since the previous turn (what replay verify tries too), and
            # the recall from the logged state it names.
            key, since = StreamKey("acme", "reed"), turns[instructed.turn - 1].seq if instructed.turn else 1
            states = {seq: await History(log).state_at(key, seq) for seq in range(since, turn.seq)}
            recall_basis = None if recall is None else basis_of(key, recall, states)
            assert recall is None or recall_basis is not None
            recalled = "" if recall is None or recall_basis is None else replay_recall(
                recall_basis, recall.payload, recall.timestamp).block
            bases = talker_bases(key, state, states, recall, [event for event in events if event.seq < turn.seq])
            requests = [talker_request(base, turn.payload.user_message, default_prompt_set(),
                                       config_from(turn.provenance, turn.payload.mode, talker=True), recalled)
                        for base in bases]
            asked = [request for request in requests if request.fingerprint() == turn.provenance.request_fingerprint]
            assert asked and all(instructed.payload.text in request.messages[0].content for request in asked)
    await verified(served[2], "reed")


async def test_a_regeneration_and_an_edit_are_branches_and_main_keeps_its_turns(served) -> None:
    client = client_of(served)
    one, _, _, _ = ask(client, "swipe", [user("Name a colour.")])
    two, _, _, _ = ask(client, "swipe", [user("Name a colour."), assistant(one), user("Name a fruit.")])
    before = [user("Name a colour."), assistant(one)]
    # regenerate: the same last user message again, without its reply (the card changed meanwhile,
    # so the simulator, which answers the same request alike, answers another reply)
    card = {"role": "system", "content": CARD}
    regenerated, branch, extension, headers = ask(client, "swipe", [card, *before, user("Name a fruit.")], key="swipe-1")
    assert branch.startswith("regen-") and headers["x-mirror-history"] == "forked" and extension["turn"] == 1
    assert regenerated != two
    # the SDK's retry of it with the same Idempotency-Key: the same turn, no new branch
    retried, again, _, headers = ask(client, "swipe", [card, *before, user("Name a fruit.")], key="swipe-1")
    assert (retried, again) == (regenerated, branch) and headers["idempotent-replayed"] == "true"
    # the next turn with the regenerated transcript continues that branch
    after = [card, *before, user("Name a fruit."), assistant(regenerated)]
    _, followed, extension, headers = ask(client, "swipe", [*after, user("Name a tree.")])
    assert followed == branch and headers["x-mirror-history"] == "same" and extension["turn"] == 2
    # edit: an earlier message changed
    edited_reply, edited, extension, headers = ask(client, "swipe", [*before, user("Name a vegetable.")])
    assert edited.startswith("edit-") and edited != branch and headers["x-mirror-history"] == "forked"
    assert extension["turn"] == 1
    _, still, _, _ = ask(client, "swipe", [*before, user("Name a vegetable."), assistant(edited_reply), user("More?")])
    assert still == edited
    branches = await logged(served[2], "swipe")
    assert set(branches) == {"main", branch, edited}  # one branch each: the retry forked nothing
    main_turns = [event.payload for event in branches["main"] if isinstance(event.payload, Turn)]
    assert [(turn.user_message, turn.reply) for turn in main_turns] == [("Name a colour.", one), ("Name a fruit.", two)]
    for name, messages in ((branch, ["Name a fruit.", "Name a tree."]), (edited, ["Name a vegetable.", "More?"])):
        fork, *own = branches[name]
        assert isinstance(fork.payload, Fork) and fork.payload.parent_branch == "main"
        assert [event.payload.user_message for event in own if isinstance(event.payload, Turn)] == messages
    # the regenerated branch's first own turn saw main's first exchange and nothing after it
    async with log_of(served[2], StreamKey("acme", "swipe")) as (_, log):
        at_fork = await History(log).state_at(StreamKey("acme", "swipe", branch), branches[branch][0].seq)
    assert at_fork.turn_count == 1 and at_fork.recent_turns[-1].reply == one
    await verified(served[2], "swipe")
