"""Persona files: each format reads, every invalid case names its file and key, the examples load."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from mirror.cognition.errors import PersonaInvalid
from mirror.cognition.persona import (
    DEFAULT_BIG_FIVE,
    DEFAULT_EMOTIONS,
    DEFAULT_LOREBOOK_IMPORTANCE,
    DEFAULT_RELATIONSHIP,
    EXAMPLES,
    read_persona,
    write_card,
)
from mirror.cognition.persona.png import card_texts, tiny_png, with_card


def card(spec: str = "chara_card_v2", **data: Any) -> dict[str, Any]:
    return {"spec": spec, "spec_version": "2.0" if spec.endswith("v2") else "3.0", "data": {"name": "Ada", **data}}


def png_with(text_chunks: dict[str, dict[str, Any]]) -> bytes:
    png = tiny_png()
    for keyword, document in text_chunks.items():
        encoded = base64.b64encode(json.dumps(document).encode()).decode()
        # with_card removes the other card chunk; append by hand to keep both
        chunks = png[:-12]
        data = keyword.encode() + b"\0" + encoded.encode()
        chunk = struct.pack(">I4s", len(data), b"tEXt") + data + struct.pack(">I", zlib.crc32(b"tEXt" + data))
        png = chunks + chunk + png[-12:]
    return png


def test_a_v2_json_card_reads_with_defaults_for_every_mirror_key(tmp_path: Path) -> None:
    path = tmp_path / "ada.json"
    path.write_text(json.dumps(card(description="A mathematician.", tags=["math"])))
    persona = read_persona(path)
    assert persona.name == "Ada" and persona.description == "A mathematician." and persona.tags == ("math",)
    assert persona.big_five == DEFAULT_BIG_FIVE and persona.relationship == DEFAULT_RELATIONSHIP
    assert persona.emotions == DEFAULT_EMOTIONS and persona.hard_goals == () and persona.biography == ()
    assert persona.source_format == "chara_card_v2+json"
    assert len(persona.version) == 64


def test_a_v3_json_card_keeps_its_v3_fields(tmp_path: Path) -> None:
    path = tmp_path / "ada.json"
    extra = {"nickname": "Countess", "group_only_greetings": ["Hello all"], "creation_date": 1, "assets": []}
    path.write_text(json.dumps(card("chara_card_v3", **extra)))
    persona = read_persona(path)
    assert persona.source_format == "chara_card_v3+json"
    assert persona.other_data == extra


def test_a_png_card_prefers_ccv3_over_chara(tmp_path: Path) -> None:
    path = tmp_path / "ada.png"
    path.write_bytes(png_with({"chara": card(description="old"), "ccv3": card("chara_card_v3", description="new")}))
    persona = read_persona(path)
    assert persona.description == "new" and persona.source_format == "chara_card_v3+png"
    only_v2 = tmp_path / "v2.png"
    only_v2.write_bytes(png_with({"chara": card(description="old")}))
    assert read_persona(only_v2).source_format == "chara_card_v2+png"


def test_a_native_toml_file_reads_with_the_same_schema(tmp_path: Path) -> None:
    path = tmp_path / "ada.toml"
    path.write_text(
        'name = "Ada"\ndescription = "A mathematician."\n'
        "[extensions.mirror]\nhard_goals = [\"finish the notes\"]\n"
        "big_five = { openness = 0.9 }\n"
        '[[extensions.mirror.biography]]\ntext = "Wrote the first program."\nimportance = 1.0\n'
    )
    persona = read_persona(path)
    assert persona.source_format == "native+toml"
    assert persona.big_five["openness"] == 0.9 and persona.big_five["neuroticism"] == 0.5
    assert persona.hard_goals == ("finish the notes",)
    assert [(entry.text, entry.importance) for entry in persona.biography] == [("Wrote the first program.", 1.0)]
    again = read_persona(write_card(persona, tmp_path / "ada.png", "png"))
    assert again == persona and again.version == persona.version


def test_lorebook_entries_become_biography_with_normalised_priority(tmp_path: Path) -> None:
    book = {"entries": [{"keys": ["a"], "content": "first", "priority": 10},
                        {"keys": ["b"], "content": "second", "priority": 5},
                        {"keys": ["c"], "content": "third"}]}
    path = tmp_path / "ada.json"
    path.write_text(json.dumps(card(character_book=book)))
    persona = read_persona(path)
    assert [(e.text, e.importance, e.source) for e in persona.biography] == [
        ("first", 1.0, "lorebook"), ("second", 0.5, "lorebook"), ("third", DEFAULT_LOREBOOK_IMPORTANCE, "lorebook")]
    assert persona.other_data["character_book"] == book  # the book itself is kept too


def test_the_shipped_examples_load_and_round_trip(tmp_path: Path) -> None:
    examples = sorted(EXAMPLES.iterdir())
    assert {path.suffix for path in examples} == {".json", ".png"}
    for path in examples:
        persona = read_persona(path)
        assert persona.hard_goals and persona.biography and persona.big_five
        for format in ("json", "png"):
            again = read_persona(write_card(persona, tmp_path / f"{path.stem}.{format}", format))
            assert again == persona and again.version == persona.version


def test_a_png_card_keeps_its_image_and_other_chunks_on_export(tmp_path: Path) -> None:
    source = tmp_path / "in.png"
    image = with_card(tiny_png(), "chara", base64.b64encode(json.dumps(card()).encode()).decode())
    source.write_bytes(image)
    out = write_card(read_persona(source), tmp_path / "out.png", "png")
    assert card_texts(out.read_bytes()).keys() == {"ccv3"}
    assert out.read_bytes().startswith(tiny_png()[:-12])  # IHDR and IDAT as they were


INVALID: list[tuple[str, Any, str]] = [
    ("big five out of range", card(extensions={"mirror": {"big_five": {"openness": 1.7}}}),
     "data.extensions.mirror.big_five.openness: 1.7 is not in [0, 1]"),
    ("unknown trait", card(extensions={"mirror": {"big_five": {"humour": 0.5}}}),
     "data.extensions.mirror.big_five.humour: unknown trait"),
    ("a trait that is text", card(extensions={"mirror": {"big_five": {"openness": "high"}}}),
     "data.extensions.mirror.big_five.openness: 'high' is not a number"),
    ("a trait that is a bool", card(extensions={"mirror": {"big_five": {"openness": True}}}),
     "data.extensions.mirror.big_five.openness: True is not a number"),
    ("hard goals not a list", card(extensions={"mirror": {"hard_goals": "win"}}),
     "data.extensions.mirror.hard_goals: expected a list"),
    ("an empty hard goal", card(extensions={"mirror": {"hard_goals": ["a", ""]}}),
     "data.extensions.mirror.hard_goals[1]: is empty"),
    ("a soft goal not text", card(extensions={"mirror": {"soft_goals": [3]}}),
     "data.extensions.mirror.soft_goals[0]: 3 is not a string"),
    ("biography without text", card(extensions={"mirror": {"biography": [{"importance": 0.5}]}}),
     "data.extensions.mirror.biography[0].text: is missing"),
    ("biography importance out of range", card(extensions={"mirror": {"biography": [{"text": "x", "importance": -1}]}}),
     "data.extensions.mirror.biography[0].importance: -1 is not in [0, 1]"),
    ("biography unknown key", card(extensions={"mirror": {"biography": [{"text": "x", "weight": 1}]}}),
     "data.extensions.mirror.biography[0].weight: unknown key"),
    ("relationship out of range", card(extensions={"mirror": {"relationship": {"trust": 2}}}),
     "data.extensions.mirror.relationship.trust: 2 is not in [0, 1]"),
    ("emotions named twice", card(extensions={"mirror": {"emotions": ["joy", "joy"]}}),
     "data.extensions.mirror.emotions: 'joy' is named twice"),
    ("an unknown mirror key", card(extensions={"mirror": {"big5": {}}}),
     "data.extensions.mirror.big5: unknown key"),
    ("mirror not a table", card(extensions={"mirror": []}), "data.extensions.mirror: expected a table"),
    ("no name", {"spec": "chara_card_v2", "data": {}}, "data.name: is missing"),
    ("an empty name", card(name=""), "data.name: is empty"),
    ("a description not text", card(description=7), "data.description: 7 is not a string"),
    ("tags not a list", card(tags="a,b"), "data.tags: expected a list"),
    ("an unknown spec", {"spec": "chara_card_v9", "data": {"name": "A"}}, "spec: 'chara_card_v9' is not"),
    ("data not a table", {"spec": "chara_card_v2", "data": "A"}, "data: expected a table"),
    ("a lorebook entry without text", card(character_book={"entries": [{"content": 5}]}),
     "data.character_book.entries[0].content: 5 is not a string"),
    ("a lorebook priority not a number", card(character_book={"entries": [{"content": "x", "priority": "hi"}]}),
     "data.character_book.entries[0].priority: 'hi' is not a number"),
    ("lorebook entries not a list", card(character_book={"entries": {}}),
     "data.character_book.entries: expected a list"),
]


@pytest.mark.parametrize(("document", "message"), [case[1:] for case in INVALID], ids=[case[0] for case in INVALID])
def test_every_invalid_card_names_its_file_and_key(tmp_path: Path, document: Any, message: str) -> None:
    for container in ("json", "png"):
        path = tmp_path / f"bad.{container}"
        if container == "json":
            path.write_text(json.dumps(document))
        else:
            path.write_bytes(with_card(tiny_png(), "ccv3", base64.b64encode(json.dumps(document).encode()).decode()))
        with pytest.raises(PersonaInvalid) as caught:
            read_persona(path)
        assert str(caught.value).startswith(f"persona file {path}: {message}")
        assert caught.value.file == str(path)


@pytest.mark.parametrize(("name", "content", "message"), [
    ("bad.json", b"{not json", "$: is not JSON"),
    ("nan.json", b'{"spec": "chara_card_v2", "data": {"name": "A", "extensions": {"x": NaN}}}', "$: is not JSON"),
    ("bad.toml", b"name = ", "$: is not TOML"),
    ("list.json", b"[]", "$: expected a table"),
    ("plain.png", tiny_png(), "tEXt: the PNG has no 'ccv3' or 'chara' text chunk"),
    ("broken.png", tiny_png()[:-3], "$: is not a valid PNG"),
    ("crc.png", tiny_png()[:-1] + b"\0", "$: is not a valid PNG"),
    ("b64.png", with_card(tiny_png(), "chara", "***"), "tEXt.chara: is not base64"),
    ("notjson.png", with_card(tiny_png(), "ccv3", base64.b64encode(b"{").decode()), "tEXt.ccv3: is not JSON"),
])
def test_unreadable_files_name_the_file_and_where(tmp_path: Path, name: str, content: bytes, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(PersonaInvalid, match="^" + f"persona file {path}: {message}".replace("$", r"\$")
                       .replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        read_persona(path)


def test_a_missing_file_is_a_persona_error(tmp_path: Path) -> None:
    with pytest.raises(PersonaInvalid, match="cannot be read"):
        read_persona(tmp_path / "absent.json")
