"""The prompt set a branch was made with, recorded with the branch, and prompt sets compared.

A recompute's ``fork`` event (:class:`~mirror.events.payloads.Fork`, version 2) records the
prompt set the branch is thought with, so ``replay verify --branch rc-…`` rebuilds it by itself
— also for a branch made over HTTP from one changed template, which has no directory to pass.
What it stores follows the log's storage rule (one copy of each text): the version, a digest
of every template, and the text of only those templates that differ from the built-in default
set. A fork from one changed template costs that template plus ~300 bytes of digests, not the
5.6 KB of the whole set again; a fork with the default set stores no text at all. A persona
conversation's branch records the persona prompt set beside it, by the same rule, its names under
``persona/`` (:func:`persona_prompts_of_fork` rebuilds it).

:func:`prompts_of_fork` rebuilds the set: the recorded texts, the rest from this checkout's
built-in default — each checked against its digest, and the whole against the recorded version,
so a default template that changed since the fork was made is named, never silently used.

:func:`changed_templates` names the templates in which two prompt sets differ, and
:data:`STAGE_TEMPLATES` the templates each stage of the pipeline renders: ``replay verify``
says which changed file made a request the log never answered.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence

from mirror.cognition.persona.prompting import default_persona_prompts
from mirror.cognition.prompts import PromptSet, default_prompt_set
from mirror.events.ids import StreamKey
from mirror.events.payloads import Fork

from .errors import UnknownPromptSet

PERSONA_PREFIX = "persona/"
"""How a fork names the persona prompt set's templates among its own (``persona/appraisal.md``)."""
TEMPLATE_DIGEST_BYTES = 8
"""blake2b-64: 16 hex digits per template, enough to tell an edited template from its default."""

STAGE_TEMPLATES: Mapping[str, tuple[str, ...]] = {
    "talker": ("talker.md", "talker_baseline.md", "talker_memory.md", "talker_portrait.md"),
    "monologue": ("monologue.md", "monologue_continue.md"),
    "controller": ("controller.md", "controller_only.md"),
    "memory": ("memory.md", "contradiction.md"),
    "insight": ("insight.md",),
    "reflection": ("decay.md", "reflect.md"),
}
"""The templates each stage of the pipeline renders (a ``thinker_failed`` event's ``stage``)."""


def template_digest(text: str) -> str:
    """16 hex digits of blake2b-64 over the template's UTF-8 text."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=TEMPLATE_DIGEST_BYTES).hexdigest()


@functools.cache
def built_in_prompt_set() -> PromptSet:
    """This checkout's default prompt set (read once per process: it ships with the code)."""
    return default_prompt_set()


def recorded_fork(parent_branch: str, fork_seq: int, prompts: PromptSet, *, reason: str = "",
                  default: PromptSet | None = None, persona: PromptSet | None = None) -> Fork:
    """The ``fork`` event's payload of a branch thought with ``prompts``: its version, every
    template's digest, and the texts of the templates that differ from ``default`` (the built-in
    set unless given). A persona conversation's branch records its ``persona`` prompt set the same
    way, each name under :data:`PERSONA_PREFIX` (the texts that differ from the built-in persona set)."""
    base = built_in_prompt_set() if default is None else default
    digests = {name: template_digest(text) for name, text in sorted(prompts.templates.items())}
    changed = {name: text for name, text in sorted(prompts.templates.items()) if base.templates.get(name) != text}
    if persona is not None:
        built_in_persona = default_persona_prompts()
        for name, text in sorted(persona.templates.items()):
            digests[PERSONA_PREFIX + name] = template_digest(text)
            if built_in_persona.templates.get(name) != text:
                changed[PERSONA_PREFIX + name] = text
    return Fork(parent_branch, fork_seq, prompts.version, reason, template_digests=digests, changed_templates=changed)


def persona_prompts_of_fork(key: StreamKey, fork: Fork) -> PromptSet | None:
    """The persona prompt set ``fork`` recorded (:func:`recorded_fork`), rebuilt over the built-in
    persona set; ``None`` when it recorded none (a MIRROR conversation's branch, or one made before
    forks recorded it). A template that neither is recorded nor matches its digest in the
    built-in set is :class:`UnknownPromptSet`."""
    recorded = {name[len(PERSONA_PREFIX):]: digest for name, digest in fork.template_digests.items()
                if name.startswith(PERSONA_PREFIX)}
    if not recorded:
        return None
    base = default_persona_prompts()
    templates: dict[str, str] = {}
    unknown: list[str] = []
    for name, digest in sorted(recorded.items()):
        text = fork.changed_templates.get(PERSONA_PREFIX + name, base.templates.get(name))
        if text is None or template_digest(text) != digest:
            unknown.append(name)
        else:
            templates[name] = text
    if unknown:
        raise UnknownPromptSet(key, "persona", f"persona template(s) {', '.join(unknown)} are not recorded and "
                               f"differ from this checkout's built-in persona set ({base.version})")
    return PromptSet(base.name, templates)


def prompts_of_fork(key: StreamKey, fork: Fork, default: PromptSet | None = None) -> PromptSet:
    """The prompt set ``fork`` recorded, rebuilt over ``default`` (the built-in set unless given).

    A fork that recorded no digests (version 1) names only a version: the default set when it is
    that version; otherwise :class:`UnknownPromptSet`, as for any template that neither is
    recorded nor matches its digest in ``default``.
    """
    base = built_in_prompt_set() if default is None else default
    if fork.prompt_set == base.version:
        return base
    if not fork.template_digests:
        raise UnknownPromptSet(key, fork.prompt_set, "its fork event records the version alone (written before "
                               f"forks recorded their templates), and this checkout's default is {base.version}")
    templates: dict[str, str] = {}
    unknown: list[str] = []
    for name, digest in sorted(fork.template_digests.items()):
        if name.startswith(PERSONA_PREFIX):
            continue  # the persona mind's set (persona_prompts_of_fork)
        text = fork.changed_templates.get(name, base.templates.get(name))
        if text is None or template_digest(text) != digest:
            unknown.append(name)
        else:
            templates[name] = text
    if unknown:
        raise UnknownPromptSet(key, fork.prompt_set, f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} "
                               f"not recorded and differ{'s' if len(unknown) == 1 else ''} from this checkout's "
                               f"default ({base.version})")
    rebuilt = PromptSet(fork.prompt_set.rpartition("-")[0] or fork.prompt_set, templates)
    if rebuilt.version != fork.prompt_set:
        raise UnknownPromptSet(key, fork.prompt_set, f"its recorded templates rebuild into {rebuilt.version}")
    return rebuilt


def changed_templates(recorded: PromptSet, used: PromptSet) -> tuple[str, ...]:
    """The templates in which ``used`` differs from ``recorded`` (changed, added or removed), sorted."""
    names = set(recorded.templates) | set(used.templates)
    return tuple(sorted(name for name in names if recorded.templates.get(name) != used.templates.get(name)))


class PromptComparison:
    """How the prompt set a replay uses (``used``) differs from the sets the log was recorded with.

    ``known`` are the prompt sets whose templates this replay can see (the built-in default, the
    set a branch's fork recorded, the one passed in); a recorded version among them is compared
    template by template, any other only by its version. ``met`` collects the recorded versions
    that diverging events carry, for :meth:`notes`.
    """

    def __init__(self, used: PromptSet, known: Sequence[PromptSet] = ()) -> None:
        self.used = used
        self.known = {prompts.version: prompts for prompts in (*known, used)}
        self.met: set[str] = set()

    def changed(self, recorded: str) -> tuple[str, ...] | None:
        """The templates of ``used`` that differ from the recorded set's; None if it is not known here."""
        if recorded == self.used.version:
            return ()
        known = self.known.get(recorded)
        return None if known is None else changed_templates(known, self.used)

    def cause(self, recorded: str, stage: str) -> str:
        """Why a request of ``stage``, recorded under prompt set ``recorded``, has no answer now."""
        self.met.add(recorded)
        changed = self.changed(recorded)
        if recorded == self.used.version or changed == ():
            return "the prompt set is the recorded one: the pipeline code now asks otherwise"
        if changed is None:
            return f"the log was recorded with prompt set {recorded or '(unnamed)'}, the replay uses {self.used.version}"
        used_here = [name for name in changed if name in STAGE_TEMPLATES.get(stage, ())] or list(changed)
        return f"{', '.join(used_here)} changed since the recording"

    def notes(self) -> list[str]:
        """One sentence per recorded prompt set met in a divergence that differs from ``used``."""
        notes = []
        for recorded in sorted(self.met - {self.used.version}):
            changed = self.changed(recorded)
            if changed is None:
                notes.append(f"the log was recorded with prompt set {recorded or '(unnamed)'}, which this checkout "
                             f"does not hold: its templates cannot be compared with {self.used.version}'s")
            elif changed:
                notes.append(f"{', '.join(changed)} changed compared with prompt set {recorded}, which the log was "
                             f"recorded with (replaying with {self.used.version})")
        return notes


__all__ = [
    "PERSONA_PREFIX", "PromptComparison", "STAGE_TEMPLATES", "TEMPLATE_DIGEST_BYTES", "built_in_prompt_set",
    "changed_templates", "persona_prompts_of_fork", "prompts_of_fork", "recorded_fork", "template_digest",
]
