"""The shell the stateful tests share: one live :class:`Conversation` on an event loop of its own.

Hypothesis runs a state machine's rules synchronously, so each machine owns a loop and drives the
real actor path (``Conversation`` over NATS, an ingester process and the simulator) through it.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, ClassVar

from hypothesis.stateful import RuleBasedStateMachine

from mirror.actors.conversation import Conversation
from mirror.actors.settings import RuntimeSettings
from mirror.events.ids import StreamKey

_names = itertools.count()


class ConversationMachine(RuleBasedStateMachine):
    """Subclasses set ``live_runtime`` (the runtime the conversation runs on) and ``tenant``;
    every run gets a new conversation, so runs never share a stream."""

    live_runtime: ClassVar[RuntimeSettings]
    tenant: ClassVar[str]

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.key = StreamKey(self.tenant, f"c{next(_names)}")
        self.conversation = self.run(Conversation(self.key, self.live_runtime).start())

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)


__all__ = ["ConversationMachine"]
