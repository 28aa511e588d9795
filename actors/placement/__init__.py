"""Where live conversations run, and how callers reach them.

Two placements (``RuntimeSettings.placement``):

- ``hosted`` (default): many conversations per **conversation host** (``host``, a Ray actor
  running a :class:`~mirror.actors.placement.table.HostedConversations`), a few hosts per
  node; a conversation's host is chosen by rendezvous hashing (``routing``).
- ``dedicated``: one Ray actor per conversation (:mod:`mirror.actors.conversation_actor`),
  capped per node by the directory.

``refs.conversation_ref(key, settings)`` answers a handle with one interface for both. May
import ``ray``, :mod:`mirror.actors.conversation`, ``conversation_actor``, ``directory``,
``results`` and ``errors``; nothing here imports the gateway or the CLI.
"""

from .refs import HostedRef, Placement, conversation_ref, default_host_count, placement_of
from .routing import host_for

__all__ = ["HostedRef", "Placement", "conversation_ref", "default_host_count", "host_for", "placement_of"]
