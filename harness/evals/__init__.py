"""``mirror eval …``: quality evaluations, one room per eval, each a plain function returning a
dict (the CLI prints it as JSON): ``memory`` over a labelled data set shipped as package data,
``curate`` over the user's own copy of the CuRaTe benchmark, driven through a stack over HTTP,
``persona_order`` (the persona mind's order experiment: shipped scripts, plan first vs appraisal
first, a judge model over the same client).

Part of the harness (see :mod:`mirror.harness`): may import the stack, the simulator, the
runtime and the layers below; the CLI imports these. Nothing in the runtime imports an eval.
"""

__all__: list[str] = []
