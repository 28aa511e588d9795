"""The scripted conversations of the order experiment: short scenes any persona can be put through.

Each message carries a plain emotional charge (a loss, a threat, a kindness, an affront, a
surprise), so a persona's appraisal has something to feel and its formulation a choice to make:
say it, or keep it behind the plan. The same scripts run with both orders; ``--conversations N``
takes the first N (a script again, under another id, when N is larger), ``--turns T`` the first T
messages of each.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SCRIPTS", "Script", "chosen"]


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    messages: tuple[str, ...]


SCRIPTS = (
    Script("loss", (
        "I came to tell you in person: the old man from the harbour died last night.",
        "He asked for you at the end. I'm sorry, I know you two were close once.",
        "He left you this letter. I haven't read it.",
        "Will you be all right on your own tonight?",
    )),
    Script("threat", (
        "There's a man outside who has been watching your door since noon.",
        "He asked me your name and where you sleep. I didn't tell him.",
        "I think he has a knife under his coat.",
        "What do you want me to do?",
    )),
    Script("kindness", (
        "I fixed the broken window for you while you were out. I hope that's all right.",
        "And I brought soup. You looked tired yesterday.",
        "Thank you for trusting me with the key, truly.",
        "Can I come by again tomorrow?",
    )),
    Script("affront", (
        "Honestly, your work is sloppy. Anyone could do better.",
        "People in town laugh at you behind your back, you know.",
        "I'm only being honest. Don't be so touchy.",
        "So, are you going to fix this mess or not?",
    )),
)


def chosen(conversations: int, turns: int | None) -> list[tuple[str, tuple[str, ...]]]:
    """``(name, messages)`` for ``conversations`` conversations, each script's first ``turns`` messages
    (all with ``None``); beyond the shipped scripts they repeat as ``loss-2``, ``threat-2``, …"""
    picked = []
    for index in range(conversations):
        script = SCRIPTS[index % len(SCRIPTS)]
        round_ = index // len(SCRIPTS) + 1
        name = script.name if round_ == 1 else f"{script.name}-{round_}"
        picked.append((name, script.messages[:turns] if turns else script.messages))
    return picked
