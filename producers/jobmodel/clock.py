"""Node clocks: each node's CLOCK_REALTIME is off by a fixed offset and drifts, and may be
stepped once (time sync setting it anew: `step_s` added from true time `step_at_s` on).

>>> c = NodeClock(start_ns=1_000_000_000_000, offset_s=0.03, drift_ppm=20.0)
>>> c.ns(10.0) - 1_000_000_000_000 - 10_000_000_000
30200000
>>> s = NodeClock(start_ns=0, offset_s=0.0, drift_ppm=0.0, step_at_s=5.0, step_s=2.0)
>>> s.ns(4.0), s.ns(6.0)
(4000000000, 8000000000)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class NodeClock:
    start_ns: int  # true time of the job's t = 0
    offset_s: float  # node offset plus the job's offset
    drift_ppm: float
    step_at_s: float = math.inf
    step_s: float = 0.0

    def ns(self, t: float) -> int:
        """This node's reading at true time t (seconds from the job's start)."""
        step = self.step_s if t >= self.step_at_s else 0.0
        return self.start_ns + round((t + self.offset_s + step + t * self.drift_ppm * 1e-6) * 1e9)

    def ns_array(self, t: np.ndarray) -> np.ndarray:
        step = np.where(t >= self.step_at_s, self.step_s, 0.0)
        return self.start_ns + np.round((t + self.offset_s + step + t * self.drift_ppm * 1e-6) * 1e9).astype(np.int64)


def node_clocks(n: int, start_ns: int, rng: np.random.Generator, offset_ms: tuple[float, float],
                drift_ppm: float, job_offset_s: float) -> list[NodeClock]:
    """Offsets of +-(lo..hi) ms (random sign) and drifts of up to +-drift_ppm, per node."""
    lo, hi = offset_ms
    mags = rng.uniform(lo, hi, n) / 1e3
    signs = rng.choice([-1.0, 1.0], n)
    drifts = rng.uniform(-drift_ppm, drift_ppm, n)
    return [NodeClock(start_ns, job_offset_s + float(s * m), float(d)) for s, m, d in zip(signs, mags, drifts)]
