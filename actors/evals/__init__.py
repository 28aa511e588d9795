"""``mirror eval …``: quality evaluations, one room per eval, each a plain function returning a
dict (the CLI prints it as JSON): ``memory`` over a labelled data set shipped as package data,
``curate`` over the user's own copy of the CuRaTe benchmark, driven through a stack over HTTP.

May import everything in ``mirror.actors`` but the CLI (which imports these), and the layers
below. Nothing in the runtime imports an eval.
"""

__all__: list[str] = []
