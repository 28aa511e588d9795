"""What a ``fork`` event records of its prompt set (``Fork`` version 2), and rebuilding it: only
the templates that differ from the built-in set are stored, every one is checked by its digest,
and a fork of version 1 still decodes (its maps empty: unknown)."""

from __future__ import annotations

import msgpack
import pytest

from mirror.cognition.prompts import TEMPLATES, PromptSet, default_prompt_set
from mirror.events.codec import decode, encode
from mirror.events.envelope import make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Fork
from mirror.replay import PromptComparison, UnknownPromptSet, prompts_of_fork, recorded_fork
from mirror.replay.prompt_record import STAGE_TEMPLATES, changed_templates, template_digest

BRANCH = StreamKey("acme", "c", "rc-0123456789ab")


def with_changed(template: str, name: str = "custom") -> PromptSet:
    default = default_prompt_set()
    return PromptSet(name, {**default.templates, template: default.templates[template] + "\nI keep it brief.\n"})


def test_a_fork_with_the_default_set_stores_digests_and_no_text() -> None:
    default = default_prompt_set()
    fork = recorded_fork("main", 4, default, reason="recompute")
    assert fork.prompt_set == default.version and fork.changed_templates == {}
    assert fork.template_digests == {name: template_digest(default.templates[name]) for name in TEMPLATES}
    assert prompts_of_fork(BRANCH, fork) == default


def test_a_fork_from_one_changed_template_stores_that_template_alone_and_rebuilds_the_set() -> None:
    changed = with_changed("controller.md")
    fork = recorded_fork("main", 0, changed, reason="recompute")
    assert fork.changed_templates == {"controller.md": changed.templates["controller.md"]}
    record = encode(make_event(BRANCH, 1, fork))
    assert decode(record).payload == fork
    rebuilt = prompts_of_fork(BRANCH, decode(record).payload)  # type: ignore[arg-type]  # a Fork: encoded above
    assert rebuilt.version == changed.version and rebuilt.templates == changed.templates
    # The record costs the changed template and ~30 bytes a digest, not the whole set again.
    whole_set = sum(len(text.encode()) for text in changed.templates.values())
    without = encode(make_event(BRANCH, 1, Fork("main", 0, changed.version, "recompute")))
    extra = len(record) - len(without)
    assert extra < len(changed.templates["controller.md"].encode()) + 40 * len(TEMPLATES) < whole_set


def test_a_template_neither_recorded_nor_todays_default_is_named() -> None:
    fork = recorded_fork("main", 0, with_changed("monologue.md"))
    drifted = Fork(fork.parent_branch, fork.fork_seq, fork.prompt_set, fork.reason,
                   {**fork.template_digests, "talker.md": "0" * 16}, fork.changed_templates)
    with pytest.raises(UnknownPromptSet, match="talker.md is not recorded and differs from this checkout's default"):
        prompts_of_fork(BRANCH, drifted)
    with pytest.raises(UnknownPromptSet, match="pass --prompts"):
        prompts_of_fork(BRANCH, fork, default=with_changed("talker.md", name="default"))


def test_a_version_1_fork_decodes_with_nothing_recorded_and_names_a_version_only() -> None:
    record = msgpack.unpackb(encode(make_event(BRANCH, 1, Fork("main", 3, "custom-0123456789ab", "recompute"))),
                             raw=False)
    record["schema"] = 1
    for name in ("template_digests", "changed_templates"):
        del record["payload"][name]
    fork = decode(msgpack.packb(record, use_bin_type=True)).payload
    assert fork == Fork("main", 3, "custom-0123456789ab", "recompute", {}, {})
    with pytest.raises(UnknownPromptSet, match="records the version alone"):
        prompts_of_fork(BRANCH, fork)
    default = default_prompt_set()
    assert prompts_of_fork(BRANCH, Fork("main", 3, default.version)) == default


def test_prompt_sets_compared_name_the_templates_that_differ() -> None:
    default, changed = default_prompt_set(), with_changed("controller.md")
    assert changed_templates(default, changed) == ("controller.md",)
    assert changed_templates(default, PromptSet("x", {**default.templates, "extra.md": "y"})) == ("extra.md",)
    comparison = PromptComparison(changed, [default])
    assert comparison.changed(default.version) == ("controller.md",)
    assert comparison.changed("elsewhere-0123456789ab") is None
    assert comparison.cause(default.version, "controller") == "controller.md changed since the recording"
    assert comparison.cause(changed.version, "monologue").startswith("the prompt set is the recorded one")
    assert comparison.notes() == [f"controller.md changed compared with prompt set {default.version}, which the log "
                                  f"was recorded with (replaying with {changed.version})"]


def test_every_template_belongs_to_one_stage() -> None:
    named = [name for names in STAGE_TEMPLATES.values() for name in names]
    assert sorted(named) == sorted(TEMPLATES)
