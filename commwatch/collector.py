"""The cyclic garbage collector in a detector process (`commwatch replay`, the worker, the
benches that measure them).

The detector allocates many short-lived objects (reports, small arrays) and keeps many
long-lived ones (a replayed capture's messages, the imported libraries, each comm's state).
With Python's default thresholds a young collection runs every 700 allocations and the
older generations, which hold all the long-lived objects, are walked again and again: 5-9 %
of a 1024-rank replay's detect time (`gc.callbacks`, 4-6 simulated seconds). `settle()`
moves what exists at start-up (the capture once read) out of the collector's way
(`gc.freeze`) and collects young objects every `YOUNG` allocations: 0.01-0.04 s of
collections where there were 0.14-0.43 s. The detector makes few reference cycles; what
it leaves is collected still, less often.
"""

from __future__ import annotations

import gc

YOUNG = 50_000  # allocations between young collections (CPython's default: 700)
OLDER = 10  # young collections between collections of the next generation (default: 10)


def settle() -> None:
    """Freeze what is alive now and space collections out (see the module docstring)."""
    gc.freeze()
    gc.set_threshold(YOUNG, OLDER, OLDER)
