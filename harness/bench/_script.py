"""The scripted user of ``mirror bench reflection``: a long conversation that gives memory and reflection work.

A seeded mix, the same for every run with the same seed (so the reflection-on and -off
conversations hear the same words):

- **facts** about the user, drawn from word lists with enough combinations that most are new:
  beliefs accumulate, and old ones go untouched long enough to become decay candidates;
- **safety constraints** (an allergy, asthma, a medication), stated early and restated rarely:
  beliefs the decay step must never forget nor decay (rule ``protected``);
- **restatements** of an earlier fact: reinforced beliefs grow strong (rule ``strong``);
- **contradictions** of an earlier fact (the same words, negated): contradiction reviews open
  (trigger ``review``, rule ``open_review``);
- **questions**: open loops the simulator's decay answer proposes to forget;
- **small talk** of fewer than three words: nothing to remember.

The simulator's memory answers (:mod:`mirror.sim.memory`) read these sentences: one belief per
sentence of three words or more, a question an open loop, a negated restatement a contradiction.
"""

from __future__ import annotations

import random

PLACES = ("Lyon", "Porto", "Krakow", "Ghent", "Bergen", "Seville", "Trieste", "Utrecht", "Bologna", "Tallinn",
          "Cork", "Graz", "Bilbao", "Leipzig", "Turku", "Nantes")
WHEN = ("spring", "summer", "autumn", "winter", "month", "year")
RELATIONS = ("sister", "brother", "cousin", "neighbour", "friend", "colleague", "uncle", "aunt")
NAMES = ("Ann", "Ben", "Chloe", "Dana", "Emil", "Farah", "Gus", "Hana", "Ivo", "Jun", "Kira", "Luis")
JOBS = ("nurse", "baker", "pilot", "teacher", "plumber", "librarian", "chemist", "gardener", "architect", "welder")
SKILLS = ("the cello", "Portuguese", "pottery", "chess", "woodwork", "sketching", "sailing", "Japanese", "juggling")
ACTIVITIES = ("go hiking", "bake bread", "play football", "visit museums", "go swimming", "repair bicycles",
              "watch old films", "cook curry", "grow tomatoes", "go climbing")
TOPICS = ("rivers", "volcanoes", "bees", "glaciers", "lighthouses", "tides", "comets", "forests", "deserts", "coral")
SAFETY = (
    "I am allergic to peanuts and I carry an EpiPen everywhere.",
    "My daughter has asthma, so she always needs her inhaler nearby.",
    "I take blood pressure medication every morning with breakfast.",
)
SMALL_TALK = ("Ha, nice.", "Thanks!", "Okay.", "Right.", "Good morning!", "Hmm.", "Interesting.", "Sure thing.")

_KINDS = ("fact", "question", "restate", "contradict", "small_talk")
_WEIGHTS = (45, 15, 15, 5, 20)
SAFETY_EVERY = 150
"""A safety constraint is stated in the first turns and one is restated every this many turns."""


def _fact(rng: random.Random) -> str:
    shape = rng.randrange(5)
    if shape == 0:
        return f"I visited {rng.choice(PLACES)} last {rng.choice(WHEN)} with {rng.choice(NAMES)}."
    if shape == 1:
        return f"My {rng.choice(RELATIONS)} {rng.choice(NAMES)} just started working as a {rng.choice(JOBS)}."
    if shape == 2:
        return f"I have been learning {rng.choice(SKILLS)} since last {rng.choice(WHEN)}."
    if shape == 3:
        return f"On weekends I like to {rng.choice(ACTIVITIES)} in {rng.choice(PLACES)}."
    return f"Lately I have been reading about {rng.choice(TOPICS)} near {rng.choice(PLACES)}."


def script(turns: int, seed: int = 0) -> list[str]:
    """``turns`` user messages, a pure function of ``turns`` and ``seed``."""
    rng = random.Random(f"mirror-bench-reflection:{seed}")
    stated: list[str] = []
    messages: list[str] = []
    for index in range(turns):
        if index < len(SAFETY) * 3 and index % 3 == 1:
            message = SAFETY[index // 3]
        elif index and index % SAFETY_EVERY == 0:
            message = f"Please remember: {rng.choice(SAFETY)}"
        else:
            kind = rng.choices(_KINDS, _WEIGHTS)[0] if stated else "fact"
            if kind == "fact":
                message = _fact(rng)
                stated.append(message)
            elif kind == "question":
                message = f"Why do {rng.choice(TOPICS)} change so much over the {rng.choice(WHEN)}?"
            elif kind == "restate":
                message = f"As I told you before: {rng.choice(stated)}"
            elif kind == "contradict":
                fact = rng.choice(stated).rstrip(".")
                message = f"Actually that is not true any more: not {fact[0].lower()}{fact[1:]}."
            else:
                message = rng.choice(SMALL_TALK)
        messages.append(message)
    return messages


__all__ = ["SAFETY", "SAFETY_EVERY", "script"]
