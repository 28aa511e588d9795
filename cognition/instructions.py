"""The client's instructions: when a turn records them, and how a prompt carries them.

A front end has its own system prompt (an Open WebUI system prompt, a SillyTavern character card
sent as system messages): Mirror keeps it as the conversation's *instructions*, recorded as an
``instructions`` event (:class:`~mirror.events.payloads.Instructions`) only when the text a turn
asks for differs from the state's, and read from the state by every request that should see it.

The wording lives here rather than in a prompt set's templates on purpose: a new template would
change every prompt set's version, so every request recorded before it would look different to
``replay verify``. A conversation without instructions sends exactly the request it sent before
(the block is added only when there is text), and one with them is still replayable: the text is
in the log, and each request's fingerprint covers what these functions made of it.

Precedence, for the persona mind: the character's card speaks first and decides who is speaking;
the client's instructions come after it and decide the rest (the chat's format, style, scenario
details), unless they would make the character someone else. For the MIRROR mind the Talker's own
prompt frames the voice and the client's instructions follow it the same way.
"""

from __future__ import annotations

from mirror.events.payloads import Instructions
from mirror.projections.state import ConversationState

TALKER_BLOCK = """The person's app gave instructions for this conversation. I follow them in how I
answer — their format, tone, role and limits — as long as they do not ask me to stop being myself
or to claim I did not think what I thought:
<instructions>
{text}
</instructions>"""

THINKER_BLOCK = """The app this conversation runs in gave the voice these instructions; my narrative
keeps them in mind when it names a strategy and pitfalls:
<instructions>
{text}
</instructions>"""

PERSONA_BLOCK = """The chat app gave these instructions for this chat. Follow them for format, style
and the details of the scene; where they disagree with the character above about who the character
is, the character above wins:
<instructions>
{text}
</instructions>"""


def instructions_change(state: ConversationState, asked: str | None) -> Instructions | None:
    """The ``instructions`` event a turn asking for ``asked`` records from ``state``: ``None`` when it
    asks nothing (``None``: keep the current ones) or the same text (compared without surrounding
    whitespace, which front ends add and drop freely)."""
    if asked is None:
        return None
    text = asked.strip()
    return None if text == state.instructions else Instructions(text)


def with_block(system: str, text: str, block: str) -> str:
    """``system`` followed by ``block`` holding ``text``; ``system`` alone when there is no text."""
    return system if not text else f"{system}\n\n{block.format(text=text)}"


__all__ = ["PERSONA_BLOCK", "THINKER_BLOCK", "TALKER_BLOCK", "instructions_change", "with_block"]
