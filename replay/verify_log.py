"""Verify what a log holds: the conversations asked for, each branch with its own prompt set.

What ``mirror replay verify`` runs over a log. It resolves the names first, so a typo fails
instead of passing: a conversation the tenant's log does not hold is :class:`UnknownConversation`,
a branch it does not have :class:`UnknownBranch` (naming the branches it has). With ``all``
conversations, those without the branch are left out, and none having it is an error too.

A forked branch is verified from its parent's state at the fork, with the prompt set its
``fork`` event recorded (:func:`~mirror.replay.prompt_record.prompts_of_fork`) unless one is
given: a recompute branch verifies with zero model calls without being handed a directory (one
whose templates cannot be rebuilt is :class:`UnknownPromptSet`, which says to pass them).
``main``, and a branch whose fork predates the record (version 1), use the given set or this
checkout's built-in default. The sets at hand are passed on
as known, so a divergence names the templates that changed. A persona conversation's branch is
verified with the persona prompt set its fork recorded, unless one is given.
"""

from __future__ import annotations

from mirror.cognition.prompts import PromptSet
from mirror.events.ids import MAIN_BRANCH, StreamKey
from mirror.events.log import EventLogReader

from .errors import UnknownBranch, UnknownConversation, UnknownPromptSet
from .history import History
from .prompt_record import built_in_prompt_set, persona_prompts_of_fork, prompts_of_fork
from .verify import VerifyReport, verify_events


async def keys_to_verify(log: EventLogReader, tenant: str, conversation: str | None,
                         branch: str = MAIN_BRANCH) -> list[StreamKey]:
    """The branch ``branch`` of ``conversation`` (or of every conversation that has it, for
    ``None``); an unknown conversation or branch is an error, not an empty list."""
    if conversation is not None:
        key = StreamKey(tenant, conversation, branch)
        if await log.last_seq(key) > 0:
            return [key]
        summary = next((item for item in await log.conversations(tenant) if item.conversation == conversation), None)
        if summary is None:
            raise UnknownConversation(tenant, conversation)
        raise UnknownBranch(key, f"conversation {conversation!r} has no branch {branch!r} "
                                 f"(its branches: {', '.join(summary.branches)})")
    summaries = await log.conversations(tenant)
    keys = [StreamKey(tenant, item.conversation, branch) for item in summaries if branch in item.branches]
    if summaries and not keys:
        raise UnknownBranch(f"tenant {tenant!r}", f"none of its {len(summaries)} conversation(s) has a branch {branch!r}")
    return keys


async def verify_branch(history: History, key: StreamKey, prompts: PromptSet | None = None,
                        persona_prompts: PromptSet | None = None) -> VerifyReport:
    """Verify ``key``'s own events (from its fork point, for a forked branch) with ``prompts``, or
    with the prompt set the branch was made with (see the module docstring); a persona
    conversation's steps with ``persona_prompts`` (default: the built-in persona set)."""
    built_in = built_in_prompt_set()
    point = await history.fork_point(key) if key.branch != MAIN_BRANCH else None
    fork = point.fork if point is not None else None
    recorded = None
    if fork is not None and fork.template_digests:  # a fork of version 1 names a version only
        try:
            recorded = prompts_of_fork(key, fork, built_in)
        except UnknownPromptSet:
            if prompts is None:
                raise  # nothing else to verify with: say what is missing
    used = prompts or recorded or built_in
    recorded_persona = None
    if fork is not None:
        try:
            recorded_persona = persona_prompts_of_fork(key, fork)
        except UnknownPromptSet:
            if persona_prompts is None:
                raise  # nothing else to verify the persona's steps with: say what is missing
    base = await history.state_at(key, point.fork_seq if point else 0)
    known = [prompt_set for prompt_set in (recorded, built_in, recorded_persona) if prompt_set is not None]
    return await verify_events(key, base, await history.log.read(key), used, known_prompt_sets=known,
                               persona_prompts=persona_prompts or recorded_persona)


async def verify_conversations(log: EventLogReader, tenant: str, conversation: str | None, branch: str = MAIN_BRANCH,
                               prompts: PromptSet | None = None,
                               persona_prompts: PromptSet | None = None) -> list[VerifyReport]:
    """One report per conversation asked for (``None``: every one of ``tenant``'s with ``branch``)."""
    history = History(log, materialize=False)
    return [await verify_branch(history, key, prompts, persona_prompts)
            for key in await keys_to_verify(log, tenant, conversation, branch)]


__all__ = ["keys_to_verify", "verify_branch", "verify_conversations"]
