"""``mirror eval …``: quality evaluations that ship with Mirror, one room per eval, each a plain
function returning a dict (the CLI prints it as JSON) over a labelled data set shipped as
package data.

May import everything in ``mirror.actors`` but the CLI (which imports these), and the layers
below. Nothing in the runtime imports an eval.
"""

__all__: list[str] = []
