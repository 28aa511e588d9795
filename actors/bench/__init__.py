"""``mirror bench …``: one module per benchmark, each printing JSON with the raw limit it is
measured against taken in the same run where one exists.

May import everything in ``mirror.actors`` but the CLI (which imports these), and the layers
below. Nothing in the runtime imports a benchmark.
"""

__all__: list[str] = []
