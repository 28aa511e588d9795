"""Where live conversations run, and how callers reach them.

Two placements in Ray (``RuntimeSettings.placement``), and one without:

- ``hosted`` (default): many conversations per **conversation host** (``host``, a Ray actor
  running a :class:`~mirror.actors.placement.table.HostedConversations`), a few hosts per
  node; a conversation's host is chosen by rendezvous hashing (``routing``).
- ``dedicated``: one Ray actor per conversation (:mod:`mirror.actors.conversation_actor`),
  capped per node by the directory;
- ``local``: a table in this very process, without Ray (tests, one-process embedding).

``table`` is the live conversations of one host (activation, mailboxes, LRU cap, idle
passivation), plain asyncio; ``host`` runs it as a Ray actor; ``routing`` picks a host by
rendezvous hashing; ``handles.conversation_handle(key, settings)`` answers a
:class:`~mirror.actors.handle.ConversationHandle` for either Ray placement, ``local`` one
without Ray. May import ``ray`` and the rest of :mod:`mirror.actors`; nothing here imports the
gateway or the CLI.
"""

from .handles import (
    DedicatedConversation,
    HostedConversation,
    Placement,
    conversation_handle,
    default_host_count,
    placement_of,
)
from .routing import host_for

__all__ = [
    "DedicatedConversation", "HostedConversation", "Placement", "conversation_handle", "default_host_count",
    "host_for", "placement_of",
]
