"""The inspector (`/inspector`) in a real browser: headless Chromium (Debian's package, driven by
Playwright) against a real `mirror up --llm sim` — real NATS, Ray, DuckDB and HTTP.

It logs in with a token, opens a conversation, moves the timeline and checks the narrative shown
is `state?at=`'s, opens Why on a reply and finds its recall, recomputes from the page with an
edited prompt and finds the difference marked in Compare, follows live and sees a new turn
arrive, and shows an error for a wrong token, an unknown conversation and a broker that is down.
With ``MIRROR_SCREENSHOTS=DIR`` it also saves the main views there (``scripts/screenshots`` makes
the docs' pictures that way). Marked ``browser``: not in the default run; ``.ci/run`` installs
Chromium and runs them. Skipped only when no Chromium is installed.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.cognition.prompts import DEFAULT_PROMPT_SETS
from mirror.sim.server import SimLLMServer, SimSettings
from tests.support.browser import CHROMIUM_ARGS, chromium_path
from tests.support.up import ctrl_c, start_up
from tests.support.waits import until

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(chromium_path() is None, reason="no Chromium installed (apt-get install chromium)")]

playwright_api = pytest.importorskip("playwright.sync_api")

WREN = Path(__file__).resolve().parents[2] / "cognition" / "persona" / "examples" / "wren.json"
MESSAGES = ("I have a severe peanut allergy.", "My sister Ana lives in Lisbon and she is a nurse.",
            "I am planning a trip to Lisbon because Ana invited me.", "What should I eat there?",
            "Ana says the custard tarts are famous.", "I will stay three weeks in April.", "I work as a teacher.",
            "My school gives me the time off.", "I am nervous about flying.", "Ana will meet me at the airport.")
"""Ten turns: reflection's cooldown, so the page has a portrait to show."""
TIMEOUT_MS = 60_000


def _settled(http: httpx.Client, conversation: str, last: str, turn: int) -> list[dict[str, Any]]:
    """The conversation's events once its last turn's thinking ended with a ``last`` event."""
    def done() -> list[dict[str, Any]]:
        events = http.get(f"/v1/conversations/{conversation}/events", params={"limit": 1000}).json()["events"]
        return events if any(e["type"] == last and e["turn"] == turn for e in events) else []
    return until(done, f"{conversation}'s thinking after turn {turn}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("inspector")
    process, stack = start_up(root / "data", root / "up.log", reflection=True)
    try:
        with httpx.Client(base_url=stack["url"], headers={"Authorization": f"Bearer {stack['token']}"}, timeout=120) as http:
            turns = [http.post("/v1/conversations/trip/turns", params={"sync": "true"}, json={"message": text}).json()
                     for text in MESSAGES]
            _settled(http, "trip", "memory_step", turns[-1]["turn"])
            # ten turns: reflection runs by itself (a burst of beliefs) or, forced, now; a 409 says it ran
            reflected = http.post("/v1/conversations/trip/reflect")
            assert reflected.status_code == 200 or reflected.json().get("reason") == "cooldown", reflected.text
            events = _settled(http, "trip", "reflection", turns[-1]["turn"])
            card = json.loads(WREN.read_text())
            for index, text in enumerate(("Hello, who are you?", "I lost my job today.")):
                body: dict[str, Any] = {"message": text}
                if index == 0:
                    body |= {"mind": "persona", "persona": card}
                answer = http.post("/v1/conversations/wren-talk/turns", params={"sync": "true"}, json=body)
                assert answer.status_code == 200, answer.text
            _settled(http, "wren-talk", "episode", answer.json()["turn"])
        yield {**stack, "turns": turns, "events": events, "log": root / "up.log"}
    finally:
        ctrl_c(process)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=chromium_path(), args=list(CHROMIUM_ARGS))
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"the page threw: {errors}"


def api(stack: dict[str, Any]) -> httpx.Client:
    return httpx.Client(base_url=stack["url"], headers={"Authorization": f"Bearer {stack['token']}"}, timeout=120)


def shot(page: Any, name: str) -> None:
    """Save the view for the docs when ``MIRROR_SCREENSHOTS`` names a folder."""
    folder = os.environ.get("MIRROR_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"inspector-{name}.png"), full_page=False)


def flat(text: str) -> str:
    """``text`` with its runs of white space as one space, as a page's paragraph shows it."""
    return " ".join(text.split())


def log_in(page: Any, stack: dict[str, Any], where: str = "") -> None:
    page.goto(f"{stack['url']}/inspector{where}#token={stack['token']}")


def test_a_token_in_the_fragment_logs_in_lists_the_conversations_and_leaves_the_address_bar(page, stack) -> None:
    log_in(page, stack)
    row = page.locator("#conversations tr[data-conversation=trip]")
    row.wait_for()
    assert "token=" not in page.url  # moved to session storage, out of the address bar and history
    assert page.evaluate("sessionStorage.getItem('mirror.inspector.token')") == stack["token"]
    cells = row.locator("td").all_inner_texts()
    assert cells[:4] == ["trip", "mirror", str(len(MESSAGES)), str(len(stack["events"]))]
    persona = page.locator("#conversations tr[data-conversation=wren-talk] td").nth(1)
    assert persona.inner_text() == "persona"
    page.fill("#search", "wren")
    page.locator("#conversations tr[data-conversation=trip]").wait_for(state="detached")
    assert page.locator("#conversations tr[data-conversation]").count() == 1
    shot(page, "conversations")


def test_a_token_typed_in_the_field_logs_in(page, stack) -> None:
    page.goto(f"{stack['url']}/inspector")
    page.locator("#welcome").wait_for()
    page.fill("#token", stack["token"])
    page.click("#token-save")
    page.locator("#conversations tr[data-conversation=trip]").wait_for()


def test_the_timeline_shows_the_narrative_state_at_gives_for_that_seq(page, stack) -> None:
    narratives = [e for e in stack["events"] if e["type"] == "narrative"]
    before_any = narratives[0]["seq"] - 1
    with api(stack) as http:
        expected = {seq: http.get("/v1/conversations/trip/state", params={"at": seq}).json()
                    for seq in (before_any, narratives[0]["seq"], narratives[-1]["seq"], narratives[-1]["seq"] + 1)}
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    log_in(page, stack, "?conversation=trip")
    page.locator("#mind[data-seq]").wait_for()
    # one conversation is looked up by its id (its summary), never by loading the tenant's list
    paths = [httpx.URL(url).path for url in asked]
    assert "/v1/conversations/trip" in paths and "/v1/conversations" not in paths
    # turns are counted from 1 on the page (the API's `turn` is 0-based), as the CLI and the list count them
    first, last = stack["turns"][0], stack["turns"][-1]
    assert page.inner_text(f"#dialogue .turn[data-seq='{first['seq']}'] .who") == "user · turn 1"
    assert page.inner_text(f"#dialogue .turn[data-seq='{last['seq']}'] .who") == f"user · turn {len(MESSAGES)}"
    timeline = page.locator("#timeline")
    for seq, state in expected.items():
        timeline.focus()
        page.keyboard.press("Home")  # the first seq, then right-arrow presses up to the one wanted
        for _ in range(seq - 1):
            page.keyboard.press("ArrowRight")
        page.locator(f"#mind[data-seq='{seq}']").wait_for()
        assert page.inner_text("#seq") == str(seq)
        shown = page.inner_text("#narrative")
        assert shown == (state["narrative"] or "No narrative yet."), seq
    # the narrative's change since the previous one is marked, word by word
    last = narratives[-1]
    page.goto(f"{stack['url']}/inspector?conversation=trip&at={last['seq']}")
    page.locator(f"#mind[data-seq='{last['seq']}']").wait_for()
    assert page.locator("#narrative-diff ins").count() > 0 and page.locator("#narrative-diff del").count() > 0
    # the portrait the reflection wrote, from its seq on
    portrait = next(e for e in stack["events"] if e["type"] == "reflection")
    with api(stack) as http:
        reflected = http.get("/v1/conversations/trip/state", params={"at": portrait["seq"]}).json()["portrait"]
    page.locator("#timeline").focus()
    page.keyboard.press("End")
    page.locator(f"#mind[data-seq='{page.inner_text('#seq-last')}']").wait_for()
    assert reflected and page.inner_text("#portrait") == reflected
    shot(page, "conversation")


def test_a_conversation_opens_from_its_timeline_and_the_turns_in_view_never_every_event(page, stack) -> None:
    asked: list[httpx.URL] = []
    page.on("request", lambda request: asked.append(httpx.URL(request.url)))
    turns = stack["turns"]
    log_in(page, stack, f"?conversation=trip&at={turns[0]['seq']}")
    page.locator(f"#mind[data-seq='{turns[0]['seq']}']").wait_for()
    # the dialogue holds the selected turn and the five after it (conversation.js's TURNS_AFTER)
    shown = page.locator("#dialogue .turn").evaluate_all("(turns) => turns.map((turn) => Number(turn.dataset.seq))")
    assert shown == [turn["seq"] for turn in turns[:6]]
    assert page.locator("#strip .tick").count() >= len(stack["events"])  # the whole timeline, from the index
    assert any(url.path == "/v1/conversations/trip/timeline" for url in asked)
    reads = [url for url in asked if url.path == "/v1/conversations/trip/events"]
    assert reads and all("until" in url.params and url.params.get("vectors") != "true" for url in reads)  # ranges only
    page.click("#seq-last-button")
    page.locator(f"#dialogue .turn[data-seq='{turns[-1]['seq']}']").wait_for()
    # the line under the timeline: type · turn · time from the index, then what the event says, once read
    page.wait_for_function("() => document.querySelector('#seq-event').textContent.split('·').length >= 4")


def test_why_on_a_belief_lists_its_recalls(page, stack) -> None:
    with api(stack) as http:
        beliefs = http.get("/v1/conversations/trip/state").json()["beliefs"]
        recalled = max(beliefs, key=lambda belief: belief["recall_count"])
        total = http.get("/v1/conversations/trip/why", params={"belief": recalled["belief_id"]}).json()["recalls"]["total"]
    assert total >= 1, "no belief of the conversation was recalled"
    log_in(page, stack, "?conversation=trip")
    page.click(f"#beliefs button.belief[data-belief='{recalled['belief_id']}']")
    page.locator("#why ol.recalls li").first.wait_for()
    assert page.locator("#why ol.recalls li").count() == min(total, 50)
    assert page.locator("#why button.more-recalls").is_hidden() == (total <= 50)


def test_why_on_a_reply_shows_the_recall_it_answered_from_and_its_model_call(page, stack) -> None:
    recalled = [turn for turn in stack["turns"] if turn["recall_seq"] is not None]
    assert recalled, "no turn recalled anything: the conversation cannot show Why's recall"
    turn = recalled[-1]
    with api(stack) as http:
        recall = http.get("/v1/conversations/trip/events", params={"after": turn["recall_seq"] - 1, "limit": 1}).json()["events"][0]
    log_in(page, stack, "?conversation=trip")
    page.click(f"#dialogue .reply[data-seq='{turn['seq']}']")
    cause = page.locator("#why .cause[data-role=recall]")
    cause.wait_for()
    assert cause.get_attribute("data-seq") == str(turn["recall_seq"])
    assert recall["type"] == "recall" and recall["payload"]["query"][:40] in cause.inner_text()
    provenance = page.locator("#why table.provenance").first.inner_text()
    assert "model" in provenance and "tokens" in provenance and " ms" in provenance
    shot(page, "why")


def test_why_on_a_belief_shows_the_turn_it_came_from(page, stack) -> None:
    log_in(page, stack, "?conversation=trip")
    belief = page.locator("#beliefs button.belief").first
    belief.wait_for()
    belief.click()
    source = page.locator("#why .cause[data-role=source_turn]")
    source.wait_for()
    with api(stack) as http:
        event = http.get("/v1/conversations/trip/events", params={"after": int(source.get_attribute("data-seq")) - 1,
                                                                  "limit": 1}).json()["events"][0]
    assert event["type"] == "turn" and event["payload"]["user_message"][:30] in source.inner_text()


def test_a_persona_conversation_shows_its_emotions_relationship_and_goals(page, stack) -> None:
    with api(stack) as http:
        persona = http.get("/v1/conversations/wren-talk/state").json()["persona"]
    log_in(page, stack, "?conversation=wren-talk")
    page.locator("#persona #emotions").wait_for()
    rows = page.locator("#persona #emotions tr")
    assert rows.count() == len(persona["emotions"])
    for name, value in persona["emotions"].items():
        assert page.locator(f"#persona #emotions tr[data-name='{name}'] td.number").inner_text() == f"{value:.2f}"
    assert page.locator("#persona #relationship tr").count() == len(persona["relationship"])
    assert page.locator("#persona ol.goals li").count() == len(persona["hard_goals"])
    shot(page, "persona")


def test_a_recompute_started_from_the_page_opens_in_compare_with_the_difference_marked(page, stack) -> None:
    log_in(page, stack, "?conversation=trip")
    page.locator("#mind[data-seq]").wait_for()
    page.click("#recompute-open")
    page.locator("#recompute-dialog[open]").wait_for()
    page.select_option("#recompute-template", label="controller.md")
    original = (DEFAULT_PROMPT_SETS / "default" / "controller.md").read_text()
    assert page.input_value("#recompute-text") == original
    page.fill("#recompute-text", original + "\nI keep it brief.\n")
    shot(page, "recompute")
    asked: list[tuple[str, int]] = []  # each answer the page got while it watched, in order
    page.on("response", lambda response: asked.append((response.url, response.status)))
    page.click("#recompute-start")
    page.locator("body[data-view=compare-view]").wait_for(timeout=180_000)
    # what it asked up to the job's last status (then Compare asks for states and the diff)
    watching = asked[:max(index for index, (url, _) in enumerate(asked) if "/v1/recompute/" in url) + 1]
    right = page.input_value("#right-branch")
    # each round asks for the job and the branch's new events: no state folded, no 404 before the branch exists
    assert not [url for url, _ in watching if "/state" in url], watching
    assert not [(url, status) for url, status in watching if status >= 400], watching
    rounds = [url for url, _ in watching if "/events" in url]
    assert rounds and all(f"branch={right}" in url for url in rounds)
    with api(stack) as http:
        own = http.get("/v1/conversations/trip/events", params={"branch": right, "limit": 1000}).json()["events"]
    assert page.text_content("#recompute-status").startswith(f"done: branch {right} ends at seq {own[-1]['seq']} ")
    assert page.get_attribute("#recompute-progress", "value") == page.get_attribute("#recompute-progress", "max")
    page.locator("#compare-summary[data-changed=true]").wait_for()
    narrative = page.locator("#compare-narrative[data-changed=true]")
    narrative.wait_for()
    assert narrative.locator(".left del").count() > 0 and narrative.locator(".right ins").count() > 0
    assert right != "main" and page.input_value("#left-branch") == "main"
    with api(stack) as http:  # what the page marks is what the diff says
        across = http.get("/v1/conversations/trip/diff", params={"to_branch": right}).json()
    assert across["narrative_changed"]
    shot(page, "compare")


def test_following_live_shows_a_new_turn_as_it_arrives(page, stack) -> None:
    log_in(page, stack, "?conversation=trip")
    page.locator("#live-status[data-live=true]").wait_for()
    page.check("#follow")
    with api(stack) as http:
        turn = http.post("/v1/conversations/trip/turns", json={"message": "Is the food there safe for me?"}).json()
    page.locator(f"#dialogue .turn[data-seq='{turn['seq']}']").wait_for()
    page.locator(f"#live-feed li[data-seq='{turn['seq']}']").wait_for()
    assert "Is the food there safe for me?" in page.inner_text(f"#dialogue .turn[data-seq='{turn['seq']}']")
    page.wait_for_function("(seq) => Number(document.querySelector('#timeline').max) >= seq", arg=turn["seq"])
    with api(stack) as http:
        _settled(http, "trip", "memory_step", turn["turn"])
    page.locator("#live-status[data-kind=idle]").wait_for()  # the thinking that followed, seen to end
    shot(page, "live")


def test_a_thinking_stage_that_fails_is_shown_as_it_happens(page, tmp_path: Path) -> None:
    """A model that fails every memory extraction: the failure arrives live, in red, and the mind
    at that event says which stage failed while the state before it stays in force."""
    failing = SimSettings(fault_rates=(("500", 1.0),), fault_schemas=("memory_extraction",))
    with SimLLMServer(failing) as sim:
        process, stack = start_up(tmp_path / "data", tmp_path / "up.log", "--llm", sim.base_url)
        try:
            with api(stack) as http:
                first = http.post("/v1/conversations/shaky/turns", params={"sync": "true"}, json={"message": "I am Ana."})
                assert first.status_code == 200, first.text
            log_in(page, stack, "?conversation=shaky")
            page.locator("#live-status[data-live=true]").wait_for()
            page.check("#follow")
            with api(stack) as http:
                second = http.post("/v1/conversations/shaky/turns", json={"message": "I live in Lisbon."}).json()
            failure = page.locator("#live-feed li.failure")
            failure.first.wait_for(timeout=120_000)  # after the model client's retries
            assert "memory failed" in failure.first.inner_text()
            page.locator("#live-status[data-kind=failure]").wait_for()
            assert "memory" in page.inner_text("#message")
            page.locator("#failure").wait_for()  # followed: the mind at the failure names it
            assert "memory failed" in page.inner_text("#failure") and second["seq"] < int(failure.first.get_attribute("data-seq"))
        finally:
            ctrl_c(process)


def test_a_wrong_token_shows_an_error_not_a_blank_page(page, stack) -> None:
    page.goto(f"{stack['url']}/inspector#token=mrr_not-a-token")
    message = page.locator("#message")
    message.wait_for()
    assert "401" in message.inner_text() and "token" in message.inner_text()
    assert page.locator("#welcome").is_visible()


def test_an_unknown_conversation_shows_an_error(page, stack) -> None:
    log_in(page, stack, "?conversation=nobody-here")
    message = page.locator("#message")
    message.wait_for()
    assert "nobody-here" in message.inner_text() and "Not found" in message.inner_text()


def test_a_forgotten_conversation_shows_its_tombstone_not_an_error(page, stack) -> None:
    with api(stack) as http:
        answer = http.post("/v1/conversations/forget-me/turns", params={"sync": "true"}, json={"message": "hello"})
        assert answer.status_code == 200, answer.text
        job = http.delete("/v1/conversations/forget-me").json()
        until(lambda: http.get(job["poll"]).json()["status"] == "forgotten", "the sweep to finish", timeout=60)
        gone = http.get("/v1/conversations/forget-me")
        assert gone.status_code == 410 and gone.json()["tombstone"]["events"] == job["events"]
    log_in(page, stack, "?conversation=forget-me")
    page.locator("#tombstone-view").wait_for()
    field = lambda name: page.locator(f'#tombstone dd[data-field="{name}"]').inner_text()  # noqa: E731
    assert field("events erased") == str(job["events"]) and field("status") == "forgotten"
    assert field("conversation") == "forget-me" and field("erasure finished") != "not yet"
    assert page.locator("#message").is_hidden() and page.locator("#conversation-view").is_hidden()
    shot(page, "tombstone")


def test_a_broker_that_is_down_shows_the_503_and_the_page_recovers(page, stack) -> None:
    log_in(page, stack)
    page.locator("#conversations tr[data-conversation=trip]").wait_for()
    os.kill(stack["nats_pid"], signal.SIGSTOP)  # the broker stops answering (its process is frozen)
    try:
        page.click("#list-refresh")
        message = page.locator("#message")
        message.wait_for()
        assert "503" in message.inner_text() and "Try again in" in message.inner_text()
    finally:
        os.kill(stack["nats_pid"], signal.SIGCONT)
    def answers() -> bool:
        loads = int(page.get_attribute("#conversations", "data-loads") or 0)
        page.click("#list-refresh")  # clears the message, then shows the list or the error again
        page.wait_for_function("(loads) => Number(document.querySelector('#conversations').dataset.loads || 0) > loads"
                               " || !document.querySelector('#message').hidden", arg=loads)
        return page.locator("#message").is_hidden()
    until(answers, "the list answering again after the broker came back", poll_s=0.5)


def test_closing_the_recompute_dialog_stops_watching_the_job(page, stack) -> None:
    log_in(page, stack, "?conversation=trip")
    page.locator("#mind[data-seq]").wait_for()
    page.click("#recompute-open")
    page.locator("#recompute-dialog[open]").wait_for()
    page.select_option("#recompute-template", label="controller.md")
    page.fill("#recompute-text", page.input_value("#recompute-text") + "\nI answer in one sentence.\n")
    rounds: list[str] = []
    page.on("request", lambda request: rounds.append(request.url) if "/v1/recompute/" in request.url else None)
    with page.expect_request(lambda request: "/v1/recompute/" in request.url) as first:
        page.click("#recompute-start")
    job = httpx.URL(first.value.url).path.rsplit("/", 1)[-1]
    page.locator("#recompute-dialog[data-watching=true]").wait_for()
    page.click("#recompute-cancel")
    page.locator("#recompute-dialog:not([open]):not([data-watching])").wait_for(state="attached")
    seen = len(rounds)
    with api(stack) as http:  # the job runs on after the dialog closed; wait for it to end
        until(lambda: http.get(f"/v1/recompute/{job}").json()["status"] != "running", f"recompute job {job} ending",
              timeout=180, poll_s=0.5)
    assert len(rounds) == seen, rounds[seen:]  # the page stopped asking when its dialog closed
    assert page.locator("body[data-view=conversation-view]").is_visible()  # and did not open Compare


def test_the_state_cache_keeps_the_most_recently_used_states_only(page, stack) -> None:
    kept = 64  # conversation.js's KEPT_STATES
    assert len(stack["events"]) > kept + 3, "the conversation is too short to pass the cache's bound"
    asked: list[int] = []
    page.on("request", lambda request: asked.append(int(httpx.URL(request.url).params["at"]))
            if "/state" in request.url and "at=" in request.url else None)
    log_in(page, stack, "?conversation=trip&at=1")
    page.locator("#mind[data-seq='1']").wait_for()
    for seq in range(2, kept + 4):
        page.click("#seq-next")
        page.locator(f"#mind[data-seq='{seq}']").wait_for()
    before = len(asked)
    page.click("#seq-prev")  # a state used a moment ago: still kept, not asked again
    page.locator(f"#mind[data-seq='{kept + 2}']").wait_for()
    assert kept + 2 not in asked[before:]
    with page.expect_request(lambda request: "/state" in request.url and httpx.URL(request.url).params.get("at") == "1"):
        page.click("#seq-first")  # the least recently used: evicted, so asked again
    page.locator("#mind[data-seq='1']").wait_for()


def test_bad_values_in_the_address_bar_are_said_not_replaced(page, stack) -> None:
    last = len(stack["events"])  # main's events, each with its seq, before any later test added a turn
    log_in(page, stack, "?conversation=trip&at=9999")
    message = page.locator("#message")
    message.wait_for()
    assert "at=9999 is past the end" in message.inner_text() and "ends at seq" in message.inner_text()
    page.locator("#mind[data-seq]").wait_for()
    assert int(page.get_attribute("#mind", "data-seq") or 0) >= last
    page.goto(f"{stack['url']}/inspector?conversation=trip&compare=main,nope@3")
    message.wait_for()
    assert 'no branch "nope"' in message.inner_text() and "its branches: main" in message.inner_text()
    assert page.inner_text("#compare-summary") == "" and page.locator("#compare-body section").count() == 0


def test_compare_shows_a_persona_s_episodes_that_differ(page, stack) -> None:
    with api(stack) as http:
        events = http.get("/v1/conversations/wren-talk/events", params={"limit": 1000}).json()["events"]
    episode = [e for e in events if e["type"] == "episode"][-1]
    log_in(page, stack, f"?conversation=wren-talk&compare=main@{episode['seq'] - 1},main@{episode['seq']}")
    page.locator("#compare-summary[data-changed=true]").wait_for()
    section = page.locator("#compare-episodes[data-changed=true]")
    section.wait_for()
    assert flat(episode["payload"]["text"]) in flat(section.locator("li.added").inner_text())
    assert f"turn {episode['turn'] + 1} " in section.locator("li.added").inner_text()


def test_why_on_a_persona_reply_shows_the_texts_it_retrieved(page, stack) -> None:
    with api(stack) as http:
        events = http.get("/v1/conversations/wren-talk/events", params={"limit": 1000}).json()["events"]
        retrieval = [e for e in events if e["type"] == "retrieval"][-1]
        persona = http.get("/v1/conversations/wren-talk/state", params={"at": retrieval["seq"]}).json()["persona"]
    turns, entries = retrieval["payload"]["episode_turns"], retrieval["payload"]["biography_entries"]
    assert turns or entries, "the persona retrieved nothing: Why has no text to show"
    reply = next(e for e in events if e["type"] == "turn" and e["seq"] > retrieval["seq"])
    log_in(page, stack, "?conversation=wren-talk")
    page.click(f"#dialogue .reply[data-seq='{reply['seq']}']")
    cause = page.locator("#why .cause[data-role=retrieval]")
    cause.wait_for()
    for index in entries:
        item = cause.locator(f"li.biography[data-entry='{index}']")
        assert flat(item.inner_text()) == flat(f"biography {index + 1}: {persona['biography'][index]}")
    texts = {e["turn"]: e["text"] for e in persona["episodes"]}
    for turn in turns:
        shown = cause.locator(f"li.episode[data-turn='{turn}']").inner_text()
        assert flat(shown) == flat(f"episode of turn {turn + 1}: {texts[turn]}")


def test_a_persona_without_hard_goals_shows_no_hard_goals_heading(page, stack) -> None:
    card = json.loads(WREN.read_text())
    card["data"]["extensions"]["mirror"]["hard_goals"] = []
    with api(stack) as http:
        answer = http.post("/v1/conversations/no-goals/turns", params={"sync": "true"},
                           json={"message": "Hello.", "mind": "persona", "persona": card})
        assert answer.status_code == 200, answer.text
        assert http.get("/v1/conversations/no-goals/state").json()["persona"]["hard_goals"] == []
    log_in(page, stack, "?conversation=no-goals")
    page.locator("#persona #emotions").wait_for()
    assert "Hard goals" not in page.inner_text("#persona") and page.locator("#persona ol.goals").count() == 0
