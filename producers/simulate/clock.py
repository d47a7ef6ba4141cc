"""Node clocks: true time (float seconds since the job's start) -> a node's clock, int64
ns since the epoch. Each node's clock runs ``offset + drift x t`` off the truth.

>>> c = NodeClocks(np.array([0.0, 0.001]), np.array([1.0, 1.0]), 10**18)
>>> c(1.5, np.array([0, 1])).tolist()
[1000000001500000000, 1000000001501000000]
"""

from __future__ import annotations

import numpy as np


class NodeClocks:
    def __init__(self, off: np.ndarray, drift: np.ndarray, start_ns: int):
        self.off, self.drift, self.start_ns = off, drift, start_ns

    def __call__(self, t: np.ndarray | float, node: np.ndarray | int) -> np.ndarray:
        local = np.asarray(t, dtype=np.float64) * self.drift[node] + self.off[node]
        return np.rint(local * 1e9).astype(np.int64) + self.start_ns

    def into(self, out: np.ndarray, t: np.ndarray, node: np.ndarray) -> None:
        """``out[:] = self(t, node)`` for a 64-bit integer `out`, with no temporaries beyond one."""
        local = t * self.drift[node]
        local += self.off[node]
        local *= 1e9
        np.rint(local, out=local)
        ns = out.view(np.int64)
        np.copyto(ns, local, casting="unsafe")
        ns += self.start_ns
