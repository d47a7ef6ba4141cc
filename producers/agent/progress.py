"""Per-communicator progress of the local ranks, from the records seen (contract 2.2).

`completed` counts observed completions (COMPLETED) and calls the probe gave up on
(COMPLETION_LOST): the rank is no longer waiting in those, as the detectors read the same
records. `t_last_end_ns` comes from observed completions only.
A rank whose process is gone is reported with `"exited": true` (see docs/architecture.md)
on every communicator it was in, including those it left (COMM_DESTROY) in the last
`LEFT_GRACE` heartbeats: a process that finalises leaves all its communicators just before
it exits, and its exit must still be reported on them.

>>> from commwatch import wire
>>> recs = wire.empty(2); recs["kind"] = 1; recs["op"] = 1; recs["comm"] = 7; recs["rank"] = 3
>>> recs["seq"] = [4, 4]; recs["flags"] = [0, 1]; recs["t_start_ns"] = 10; recs["t_end_ns"] = [0, 20]
>>> p = Progress(); p.update("j", recs)
>>> p.messages("n", 99)[0][1]["ranks"][0]["started"]
4
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from commwatch import wire

P2P_NAMES = {wire.OP_SEND: "send", wire.OP_RECV: "recv"}
LEFT_GRACE = 3  # heartbeats a rank's state is kept after it left a communicator


@dataclass
class RankState:
    started: int = -1
    completed: int = -1
    t_last_start_ns: int = 0
    t_last_end_ns: int = 0
    p2p: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # (peer, op) -> [started, completed]
    exited: bool = False  # the rank's process is gone (its last heartbeats say so)
    left: int = -1  # heartbeats since it left the communicator; -1 while a member

    def as_json(self, rank: int) -> dict:
        out: dict = {"rank": rank, "started": self.started, "completed": self.completed}
        if self.exited:
            out["exited"] = True
        if self.t_last_start_ns:
            out["t_last_start_ns"] = self.t_last_start_ns
        if self.t_last_end_ns:
            out["t_last_end_ns"] = self.t_last_end_ns
        if self.p2p:
            out["p2p"] = [{"peer": peer, "op": P2P_NAMES[op], "started": s, "completed": c}
                          for (peer, op), (s, c) in sorted(self.p2p.items())]
        return out


class Progress:
    """(job, comm) -> rank -> RankState, updated one record array at a time."""

    def __init__(self) -> None:
        self.table: dict[tuple[str, int], dict[int, RankState]] = {}

    def update(self, job: str, recs: np.ndarray) -> None:
        if len(recs) == 0:
            return
        kinds = recs["kind"]
        for r in recs[kinds == wire.KIND_COMM_INIT]:
            self.table.setdefault((job, int(r["comm"])), {}).setdefault(int(r["rank"]), RankState()).left = -1
        calls = recs[kinds == wire.KIND_CALL]
        if len(calls):
            p2p = np.isin(calls["op"], wire.P2P_OPS)
            self._collectives(job, calls[~p2p])
            self._p2p(job, calls[p2p])
        for r in recs[kinds == wire.KIND_COMM_DESTROY]:
            st = self.table.get((job, int(r["comm"])), {}).get(int(r["rank"]))
            if st is not None:
                st.left = 0

    def _collectives(self, job: str, calls: np.ndarray) -> None:
        if not len(calls):
            return
        keys, inverse = np.unique(calls[["comm", "rank"]], return_inverse=True)
        observed = (calls["flags"] & wire.FLAG_COMPLETED) != 0
        done = observed | ((calls["flags"] & wire.FLAG_COMPLETION_LOST) != 0)
        seq = calls["seq"].astype(np.int64)
        for i, key in enumerate(keys):
            m = inverse == i
            st = self.table.setdefault((job, int(key["comm"])), {}).setdefault(int(key["rank"]), RankState())
            st.started = max(st.started, int(seq[m].max()))
            st.t_last_start_ns = max(st.t_last_start_ns, int(calls["t_start_ns"][m].max()))
            md = m & done
            if md.any():
                st.completed = max(st.completed, int(seq[md].max()))
            mo = m & observed
            if mo.any():
                st.t_last_end_ns = max(st.t_last_end_ns, int(calls["t_end_ns"][mo].max()))

    def _p2p(self, job: str, calls: np.ndarray) -> None:
        done = (calls["flags"] & (wire.FLAG_COMPLETED | wire.FLAG_COMPLETION_LOST)) != 0
        for r, d in zip(calls, done):
            st = self.table.setdefault((job, int(r["comm"])), {}).setdefault(int(r["rank"]), RankState())
            cell = st.p2p.setdefault((int(r["peer"]), int(r["op"])), [-1, -1])
            seq = int(r["seq"])
            cell[0] = max(cell[0], seq)
            if d:
                cell[1] = max(cell[1], seq)

    def exit(self, job: str, rank: int) -> int:
        """Mark `rank` exited on every communicator it is in; returns how many."""
        n = 0
        for (j, _comm), ranks in self.table.items():
            st = ranks.get(rank) if j == job else None
            if st is not None:
                st.exited = True
                n += 1
        return n

    def forget(self, job: str, rank: int) -> None:
        for key in [k for k in self.table if k[0] == job]:
            self.table[key].pop(rank, None)
            if not self.table[key]:
                del self.table[key]

    def messages(self, node: str, ts_ns: int) -> list[tuple[str, dict]]:
        """(job, cw.progress.v1 message) for every communicator with a local rank; called once
        per heartbeat (it ages the states of ranks that left)."""
        out = []
        for key in list(self.table):
            ranks = self.table[key]
            shown = []
            for rank, st in sorted(ranks.items()):
                if st.left >= 0 and not st.exited:
                    st.left += 1
                    if st.left > LEFT_GRACE:
                        del ranks[rank]
                    continue
                shown.append(st.as_json(rank))
            if not ranks:
                del self.table[key]
            if shown:
                job, comm = key
                out.append((job, {"v": 1, "job": job, "node": node, "ts_ns": ts_ns, "comm": wire.comm_hex(comm),
                                  "ranks": shown}))
        return out
