"""Cards as front ends write them (issue 35): macros, the greeting, World Info lorebooks, and a
reply's ``finish_reason`` — pure parts, with SillyTavern's own default card (tests/cards/)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from mirror.actors.results import TurnResult
from mirror.cognition.errors import PersonaInvalid
from mirror.cognition.persona import (
    NotACard,
    read_lorebook,
    read_persona,
    substitute,
    with_lorebook,
)
from mirror.cognition.persona.choice import InvalidMindChoice, MindChoice
from mirror.cognition.persona.turn_path import choose_persona, greeting_of, opening
from mirror.cognition.turn import opening_events
from mirror.events.codec import decode, encode
from mirror.events.envelope import make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Greeting, PersonaChosen
from mirror.events.upcasting import upcast
from mirror.gateway.openai.shapes import completion
from mirror.projections.conversation import apply, fold
from mirror.projections.snapshot import snapshot_bytes, state_from_snapshot
from mirror.projections.state import initial_state
from mirror.replay.compare import VerifyReport
from mirror.replay.persona import check_greeting
from tests.support.cli import run_main

CARDS = Path(__file__).parents[1] / "cards"
SERAPHINA = CARDS / "default_Seraphina.png"
ELDORIA = CARDS / "Eldoria.json"
KEY = StreamKey("acme", "glade")
MACROS = ("{{user}}", "{{char}}", "<USER>", "<BOT>")


def test_the_names_and_sillytaverns_static_macros_are_substituted() -> None:
    card = {"description": "{{char}} guards {{user}}.", "personality": "kind", "scenario": "a glade"}
    said = substitute("<USER> meets <bot> ({{CHAR}}, {{User}}): {{description}} {{personality}}{{newline}}"
                      "{{// a note}}{{noop}}{{reverse:abc}} {{original}}{{persona}}|\n{{trim}}\nend",
                      char="Seraphina", user="Ada", card=card)
    assert said == "Ada meets Seraphina (Seraphina, Ada): Seraphina guards Ada. kind\ncba |end"


def test_macros_that_are_not_the_cards_stay_as_written_and_an_empty_user_changes_nothing() -> None:
    for kept in ("{{random:a,b}}", "{{time}}", "{{date}}", "{{roll:d6}}", "{{lastMessage}}", "{{pick::x,y}}"):
        assert substitute(f"{{{{char}}}} at {kept}", char="S", user="U") == f"S at {kept}"
    assert substitute("{{user}} and {{char}}", char="S", user="") == "{{user}} and {{char}}"  # recorded before macros


def test_seraphina_as_mirror_will_use_it_names_the_user_and_the_character() -> None:
    persona = read_persona(SERAPHINA)
    assert persona.name == "Seraphina" and persona.source_format == "chara_card_v2+png"
    view = persona.view("Ada")
    lore = [entry["text"] for entry in view["biography"] if entry["source"] == "lorebook"]
    assert len(lore) == 4 and lore[0].startswith('Ada: "What is Eldoria?"\nSeraphina: *Seraphina turns')
    for key in ("description", "greeting", "example_messages", "scenario", "personality"):
        assert not any(macro in view[key] for macro in MACROS), key
    assert 'Ada: "Describe your traits?"' in view["description"] and view["greeting"].startswith("*You wake")
    assert persona.view()["user_name"] == "User" and 'User: "What is Eldoria?"' in persona.view()["biography"][0]["text"]


@pytest.mark.asyncio
async def test_choosing_seraphina_records_the_user_and_a_substituted_biography_then_her_greeting() -> None:
    chosen = await choose_persona(read_persona(SERAPHINA), None, user_name="Ada")
    assert chosen.user_name == "Ada" and chosen.biography[0].startswith('Ada: "What is Eldoria?"')
    assert not any(macro in text for text in chosen.biography for macro in MACROS)
    assert "{{user}}" in json.loads(chosen.card)["biography"][0]["text"]  # the card itself is kept as written
    payloads = opening(chosen)
    assert [type(p) for p in payloads] == [PersonaChosen, Greeting]
    greeting = payloads[1]
    assert isinstance(greeting, Greeting) and greeting.persona_version == chosen.version
    assert "Seraphina" in greeting.text and greeting.text == read_persona(SERAPHINA).view("Ada")["greeting"]
    events = opening_events(KEY, 1, chosen, 0, 1.0)
    state = fold(events, initial_state(KEY))
    assert state.greeting == greeting.text and state.persona is not None and state.persona.user_name == "Ada"
    assert state.turn_count == 0 and state_from_snapshot(snapshot_bytes(state)) == state
    assert [decode(encode(event)) for event in events] == events


@pytest.mark.asyncio
async def test_a_card_without_first_mes_opens_with_no_greeting() -> None:
    chosen = await choose_persona(replace(read_persona(SERAPHINA), first_mes="  "), None)
    assert greeting_of(chosen) is None and opening(chosen) == (chosen,)


def test_a_greeting_after_the_first_turn_or_in_a_mirror_conversation_changes_nothing() -> None:
    greeting = make_event(KEY, 1, Greeting("Hello.", "0" * 64), turn=0)
    assert apply(initial_state(KEY), greeting).greeting is None


@pytest.mark.asyncio
async def test_verify_checks_the_greeting_against_its_card() -> None:
    chosen = await choose_persona(read_persona(SERAPHINA), None, user_name="Ada")
    persona, greeting = opening_events(KEY, 1, chosen, 0, 1.0)
    report = VerifyReport(KEY, events=2)
    check_greeting(greeting, chosen, report)
    assert report.ok and report.steps == 1
    edited = replace(greeting, payload=Greeting("Hi, I am someone else.", chosen.version))
    check_greeting(edited, chosen, report)
    assert not report.ok and "greeting differs" in report.divergences[0].reason


def test_a_version_1_persona_event_is_upcast_to_no_user_name() -> None:
    assert upcast("persona", 1, {"name": "W", "version": "v", "card": "{}"})["user_name"] == ""


def test_a_world_info_file_is_refused_as_a_card_saying_what_it_is() -> None:
    with pytest.raises(NotACard, match="this is a World Info lorebook, not a character card: attach it"):
        read_persona(ELDORIA)


def test_a_world_info_file_attaches_to_a_persona_as_its_lorebook() -> None:
    book = read_lorebook(ELDORIA)
    assert book["name"] == "Eldoria" and [entry["keys"][0] for entry in book["entries"]] == [
        "eldoria", "shadowfang", "glade", "power"]
    bare = replace(read_persona(SERAPHINA), other_data={}, biography=())
    attached = with_lorebook(bare, book, str(ELDORIA))
    assert [entry.text for entry in attached.biography] == [entry.text for entry in read_persona(SERAPHINA).biography]
    assert attached.other_data["character_book"] == book and attached.version != bare.version
    disabled = {**book, "entries": [{**book["entries"][0], "enabled": False}, *book["entries"][1:]]}
    assert len(with_lorebook(bare, disabled, "x").biography) == 3  # SillyTavern never inserts a disabled entry
    with pytest.raises(PersonaInvalid, match="is not a lorebook"):
        read_lorebook(Path(__file__).parents[2] / "cognition" / "persona" / "examples" / "wren.json")


def test_a_user_name_goes_with_a_persona_and_is_a_name() -> None:
    persona = read_persona(SERAPHINA)
    assert MindChoice("persona", persona, user_name="Ada").user_name == "Ada"
    for bad in ("", "   ", "x" * 101):
        with pytest.raises(InvalidMindChoice, match="user_name"):
            MindChoice("persona", persona, user_name=bad)
    with pytest.raises(InvalidMindChoice, match="needs mind=persona"):
        MindChoice("mirror", user_name="Ada")


def test_a_length_cut_reply_says_so_in_the_completion() -> None:
    result = TurnResult(reply="It was a dark and", turn=0, seq=3, narrative_seq=None, llm_ms=1.0, talk_ms=1.0,
                        append_ms=1.0, turn_ms=3.0, prompt_tokens=40, completion_tokens=8, finish_reason="length")
    body = completion("chatcmpl-1", "mirror", result, "c")
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48}
    assert completion("chatcmpl-2", "mirror", replace(result, finish_reason="stop"), "c")["choices"][0][
        "finish_reason"] == "stop"


def test_persona_show_prints_the_card_text_the_greeting_and_the_lorebook_with_names(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    ran = run_main(monkeypatch, capsys, "persona", "show", str(SERAPHINA), "--user-name", "Ada")
    assert ran.code == 0, ran.err
    assert ran.out.startswith("Seraphina  (chara_card_v2+png, version ")
    for shown in ("as said to: Ada", "greeting:\n  *You wake with a start", 'Ada: "Describe your traits?"',
                  '[0.50 lorebook] Ada: "What is Eldoria?"', "      Seraphina: *Seraphina turns",
                  "[Seraphina's Personality="):  # card text is printed as text, never read as markup
        assert shown in ran.out, shown
    assert "{{user}}" not in ran.out.replace("({{user}} and <USER> become this name)", "")
    shown = json.loads(run_main(monkeypatch, capsys, "persona", "show", str(SERAPHINA), "--json").out)
    assert shown["user_name"] == "User" and shown["greeting"].startswith("*You wake")
    refused = run_main(monkeypatch, capsys, "persona", "show", str(ELDORIA))
    assert refused.code == 2 and "this is a World Info lorebook, not a character card" in refused.err
    attached = json.loads(run_main(monkeypatch, capsys, "persona", "show", str(Path(__file__).parents[2] / "cognition"
                                                                            / "persona" / "examples" / "wren.json"),
                                   "--lorebook", str(ELDORIA), "--json").out)
    assert sum(entry["source"] == "lorebook" for entry in attached["biography"]) == 4
