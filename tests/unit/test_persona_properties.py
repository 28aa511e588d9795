"""Round-trip properties of persona files: a card read and exported again keeps every field.

Cards are generated V2 and V3, with Mirror's keys present or absent, a lorebook, unknown extra
fields in ``data`` and at the top level, and other apps' ``extensions``; each is written as JSON
and as PNG, read, exported as a V3 card (JSON and PNG) and read again.
"""

from __future__ import annotations

import base64
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mirror.cognition.persona import BIG_FIVE_TRAITS, read_persona, to_card, write_card
from mirror.cognition.persona.cards import MIRROR_KEYS, STRING_FIELDS
from mirror.cognition.persona.png import tiny_png, with_card

KNOWN = {"name", "tags", "extensions", "character_book", *STRING_FIELDS}
texts = st.text(max_size=30)
words = st.text(min_size=1, max_size=20).filter(str.strip)
scores = st.floats(min_value=0, max_value=1, allow_nan=False)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
mirror_keys = st.fixed_dictionaries({}, optional={
    "big_five": st.dictionaries(st.sampled_from(BIG_FIVE_TRAITS), scores),
    "hard_goals": st.lists(words, max_size=4),
    "soft_goals": st.lists(words, max_size=4),
    "biography": st.lists(st.fixed_dictionaries({"text": words}, optional={"importance": scores}), max_size=3),
    "relationship": st.dictionaries(words, scores, max_size=3),
    "emotions": st.lists(words, max_size=6, unique=True),
})
lorebook = st.fixed_dictionaries({"entries": st.lists(st.fixed_dictionaries(
    {"keys": st.lists(words, max_size=2), "content": texts},
    optional={"priority": st.integers(0, 100), "enabled": st.booleans(), "extensions": st.dictionaries(texts, json_values, max_size=2)},
), max_size=3)}, optional={"name": texts})
other_apps = st.dictionaries(words.filter(lambda key: key != "mirror"), json_values, max_size=3)
unknown_data = st.dictionaries(words.filter(lambda key: key not in KNOWN), json_values, max_size=3)


@st.composite
def cards(draw: st.DrawFn) -> dict[str, Any]:
    spec = draw(st.sampled_from(["chara_card_v2", "chara_card_v3"]))
    data: dict[str, Any] = {"name": draw(words)}
    for key in STRING_FIELDS:
        if draw(st.booleans()):
            data[key] = draw(texts)
    if draw(st.booleans()):
        data["tags"] = draw(st.lists(words, max_size=3))
    if draw(st.booleans()):
        data["character_book"] = draw(lorebook)
    if spec == "chara_card_v3":
        data.update(draw(st.fixed_dictionaries({}, optional={
            "nickname": texts, "group_only_greetings": st.lists(texts, max_size=2),
            "creation_date": st.integers(0, 2**40), "modification_date": st.integers(0, 2**40),
            "assets": st.lists(st.fixed_dictionaries({"type": texts, "uri": texts, "name": texts, "ext": texts}),
                               max_size=2),
        })))
    data.update(draw(unknown_data))
    extensions: dict[str, Any] = draw(other_apps)
    if draw(st.booleans()):
        extensions["mirror"] = draw(mirror_keys)
    keep_empty: bool = draw(st.booleans())
    if extensions or keep_empty:
        data["extensions"] = extensions
    top = draw(st.dictionaries(words.filter(lambda key: key not in ("spec", "spec_version", "data")), json_values,
                               max_size=2))
    return {**top, "spec": spec, "spec_version": "2.0" if spec == "chara_card_v2" else "3.0", "data": data}


def _subset(small: Any, large: Any) -> bool:
    """Every key and value of ``small`` is in ``large`` (dicts recursively; anything else equal)."""
    if isinstance(small, dict):
        return isinstance(large, dict) and all(key in large and _subset(value, large[key])
                                              for key, value in small.items())
    return bool(small == large)


def _write(document: dict[str, Any], path: Path) -> Path:
    if path.suffix == ".json":
        path.write_text(json.dumps(document))
    else:
        keyword = "ccv3" if document["spec"] == "chara_card_v3" else "chara"
        path.write_bytes(with_card(tiny_png(), keyword, base64.b64encode(json.dumps(document).encode()).decode()))
    return path


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=cards(), container=st.sampled_from(["json", "png"]), export=st.sampled_from(["json", "png"]))
def test_a_card_read_and_exported_again_keeps_every_field(document: dict[str, Any], container: str,
                                                          export: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        persona = read_persona(_write(document, Path(directory) / f"in.{container}"))
        again = read_persona(write_card(persona, Path(directory) / f"out.{export}", export))
    assert again == persona and again.version == persona.version
    assert again.source_format == f"chara_card_v3+{export}"
    exported = to_card(persona)
    # Nothing of the card is lost: every field it had is in the export, with the same value
    # (Mirror's keys are filled in with their defaults, the spec becomes V3).
    original = {**document, "spec": "chara_card_v3", "spec_version": "3.0"}
    original_data = dict(document["data"])
    mirror = original_data.get("extensions", {}).get("mirror", {})
    original_data.pop("extensions", None)
    assert _subset({**original, "data": original_data}, exported)
    assert _subset({k: v for k, v in document["data"].get("extensions", {}).items() if k != "mirror"},
                   exported["data"]["extensions"])
    for key in MIRROR_KEYS:
        if key in mirror and key not in ("big_five", "biography"):
            assert exported["data"]["extensions"]["mirror"][key] == mirror[key]
    for trait, score in mirror.get("big_five", {}).items():
        assert exported["data"]["extensions"]["mirror"]["big_five"][trait] == score
    assert [entry["text"] for entry in exported["data"]["extensions"]["mirror"]["biography"]] == [
        entry["text"] for entry in mirror.get("biography", [])]


@settings(max_examples=50, deadline=None)
@given(document=cards())
def test_the_version_changes_with_the_content_and_not_with_the_container(document: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        as_json = read_persona(_write(document, Path(directory) / "a.json"))
        as_png = read_persona(_write(document, Path(directory) / "a.png"))
        document["data"]["name"] += "!"
        renamed = read_persona(_write(document, Path(directory) / "b.json"))
    assert as_json.version == as_png.version != renamed.version
