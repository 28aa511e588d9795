"""Model servers Mirror can start itself: the deterministic simulator (``sim``) and the offline
local model (``local``, the ``[local]`` extra).

Both are real OpenAI-compatible HTTP servers; the client side lives in ``mirror.cognition``.
Their errors are in ``errors``. May import ``mirror.events`` (free ports),
``mirror.projections`` (the token estimate), ``mirror.actors._threaded_server`` and
``mirror.actors.errors``; nothing else in the actor layer.
"""

__all__: list[str] = []
