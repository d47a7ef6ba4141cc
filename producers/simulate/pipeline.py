"""The 1F1B pipeline schedule as dependency levels that can run vectorised.

Stage ``s`` of ``P`` runs ``min(P-s-1, M)`` warm-up forwards, then alternates one forward
and one backward, then drains the remaining backwards. Forward ``m`` on stage ``s`` needs
forward ``m`` of stage ``s-1``; backward ``m`` needs backward ``m`` of stage ``s+1``. Each
op gets the lowest level above its predecessor on its own stage and above the op it
depends on, so all ops of one level are independent and each stage has at most one op
per level.

>>> [lv.stages.tolist() for lv in levels(2, 2)]
[[0], [0, 1], [1], [0, 1], [1], [0]]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Level:
    stages: np.ndarray  # active stages
    forward: np.ndarray  # per active stage: forward (True) or backward
    mb: np.ndarray  # microbatch
    opidx: np.ndarray  # position of the op in its stage's sequence (0 .. 2M-1)
    recv: np.ndarray  # per active stage: receives from a neighbour first
    peer: np.ndarray  # neighbour stage it receives from (valid where recv)


def stage_ops(s: int, P: int, M: int) -> list[tuple[bool, int]]:
    warm = min(P - s - 1, M)
    ops = [(True, m) for m in range(warm)]
    f, b = warm, 0
    while f < M:
        ops += [(True, f), (False, b)]
        f, b = f + 1, b + 1
    ops += [(False, m) for m in range(b, M)]
    return ops


def levels(P: int, M: int) -> list[Level]:
    ops = [stage_ops(s, P, M) for s in range(P)]
    where = [{op: i for i, op in enumerate(stage)} for stage in ops]
    lvl = [[0] * len(stage) for stage in ops]
    changed = True
    while changed:
        changed = False
        for s in range(P):
            for i, (fwd, m) in enumerate(ops[s]):
                need = lvl[s][i - 1] + 1 if i else 0
                dep = s - 1 if fwd else s + 1
                if 0 <= dep < P:
                    need = max(need, lvl[dep][where[dep][(fwd, m)]] + 1)
                if need > lvl[s][i]:
                    lvl[s][i] = need
                    changed = True
    out = []
    for k in range(max(max(x) for x in lvl) + 1):
        rows = [(s, i) for s in range(P) for i in range(len(ops[s])) if lvl[s][i] == k]
        stages = np.array([s for s, _ in rows], dtype=np.int64)
        fwd = np.array([ops[s][i][0] for s, i in rows], dtype=bool)
        mb = np.array([ops[s][i][1] for s, i in rows], dtype=np.int64)
        recv = np.where(fwd, stages > 0, stages < P - 1)
        peer = np.where(fwd, stages - 1, stages + 1)
        out.append(Level(stages, fwd, mb, np.array([i for _, i in rows], dtype=np.int64), recv, peer))
    return out
