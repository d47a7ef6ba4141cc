"""The node agents' call batches (`cw.calls.v1`).

Every ``batch_s`` a node's agent flushes one batch per communicator with the records of
its ranks in that window. A call that starts and completes within one window is written
once, completed; a call still open at a flush is written then as an entry record
(COMPLETED clear, ``t_end_ns`` 0) and again, completed, in the window where it ends.

Records are assembled column-wise as eight little-endian 64-bit words (the layout of
contract section 1), grouped into batches with one stable sort on (window, node,
communicator) (within a batch, records keep the order the engine made them), and packed
with their headers into one buffer that base64 encodes in one pass (`pack`).
"""

from __future__ import annotations

import math

import numpy as np

from commwatch import wire
from commwatch.producers.simulate.clock import NodeClocks
from commwatch.producers.simulate.engine import Calls
from commwatch.producers.simulate.layout import Layout
from commwatch.producers.simulate.outbox import Outbox
from commwatch.producers.simulate.records import U64, pack, word0, words
from commwatch.producers.simulate.spec import JobSpec


class Batcher:
    """Windows the calls of each iteration and hands finished batches to the outbox."""

    def __init__(self, spec: JobSpec, lay: Layout, clock: NodeClocks, lost_at: np.ndarray, comm_keys: list[str],
                 outbox: Outbox):
        self.spec, self.lay, self.clock, self.lost_at = spec, lay, clock, lost_at
        self.comm_keys, self.outbox = comm_keys, outbox
        self.records = 0
        R = lay.world_size
        # per slot = kind * R + rank
        self.comm_of_slot = (np.concatenate([lay.comm_of_rank[k] for k in lay.kinds]) if lay.kinds
                             else np.zeros(0, dtype=np.int64))
        crank = (np.concatenate([lay.crank_of_rank[k] for k in lay.kinds]) if lay.kinds
                 else np.zeros(0, dtype=np.int32))
        nranks = np.array([len(c.members) for c in lay.comms], dtype=np.int64)
        self.crank = crank
        # record words that depend on the slot only (word 0 less op and flags; word 6 less peer)
        self.rank_word = word0(wire.KIND_CALL, 0, 0, np.tile(np.arange(R), len(lay.kinds)))
        self.comm_word = lay.comm_ids[self.comm_of_slot]
        self.crank_word = crank.astype(np.int64).astype(U64)
        self.nranks_word = nranks[self.comm_of_slot].astype(U64)
        self.n_slots = R
        self.any_lost = bool(np.isfinite(lost_at).any())
        self.last_w = math.floor(spec.duration_s / spec.batch_s + 1e-9)
        self._rows: list[np.ndarray] = []
        self._w: list[np.ndarray] = []
        self._key: list[np.ndarray] = []
        self._grid: np.ndarray | None = None  # reused by every flush

    def add(self, c: Calls) -> None:
        """Records of issued calls `c` (true times within the run), pending until flushed."""
        lay, bs = self.lay, self.spec.batch_s
        dur = self.spec.duration_s
        done = c.t1 <= dur
        ws = np.floor(c.t0 / bs).astype(np.int64) + 1
        we = np.where(done, np.floor(np.where(done, c.t1, 0.0) / bs).astype(np.int64) + 1, -1)
        entry = (ws != we) & (ws <= self.last_w)
        finish = done & (we <= self.last_w)
        if self.any_lost:  # a lost node's agent flushes nothing from its loss on
            lost = self.lost_at[lay.node_of_rank[c.rank]]
            entry &= ws * bs < lost
            finish &= we * bs < lost
        if entry.any():
            ie = np.flatnonzero(entry)
            self._part(c, ie, False, ws[ie])
        if finish.all():  # the usual case: no copy of the columns
            self._part(c, None, True, we)
        elif finish.any():
            i_f = np.flatnonzero(finish)
            self._part(c, i_f, True, we[i_f])

    def _part(self, c: Calls, sel: np.ndarray | None, completed: bool, w: np.ndarray) -> None:
        """Entry (COMPLETED clear, t_end_ns 0) or completion records of the calls `sel` picks
        (all when None), flushed in windows `w`."""
        def take(col: np.ndarray) -> np.ndarray:
            return col if sel is None else col[sel]

        lay = self.lay
        rank = take(c.rank)
        slot = take(c.kind).astype(np.int64)
        slot *= self.n_slots
        slot += rank
        nd = lay.node_of_rank[rank]
        rows = words(len(rank))
        op = take(c.op)
        w0 = op.astype(U64)
        w0 <<= U64(8)
        if completed:
            w0 |= U64(wire.FLAG_COMPLETED << 16)
        # a send is posted without blocking (the model computes on while it waits for its
        # receiver): its entry is an enqueue, its duration no wait (wire spec, ENQUEUED)
        w0 |= np.where(op == wire.OP_SEND, U64(wire.FLAG_ENQUEUED << 16), U64(0))
        np.bitwise_or(w0, self.rank_word[slot], out=rows[0])
        rows[1] = self.comm_word[slot]
        rows[2] = take(c.seq)
        self.clock.into(rows[3], take(c.t0), nd)
        if completed:
            self.clock.into(rows[4], take(c.t1), nd)
        else:
            rows[4] = 0
        rows[5] = take(c.nbytes)
        w6 = take(c.peer).astype(U64)
        w6 <<= U64(32)
        np.bitwise_or(w6, self.crank_word[slot], out=rows[6])
        rows[7] = self.nranks_word[slot]  # aux 0
        self._rows.append(rows)
        self._w.append(w)
        self._key.append((w * lay.n_nodes + nd) * len(lay.comms) + self.comm_of_slot[slot])

    def flush(self, horizon: float) -> None:
        """Emit every batch whose flush time is at or before the horizon."""
        if not self._rows:
            return
        lay, bs = self.lay, self.spec.batch_s
        parts = self._rows
        w, key = (np.concatenate(x) if len(x) > 1 else x[0] for x in (self._w, self._key))
        ready = w * bs <= horizon + 1e-12
        if ready.all():
            self._rows, self._w, self._key = [], [], []
            order = np.argsort(key, kind="stable")
        else:
            keep = ~ready
            lo, kept = 0, []
            for p in parts:
                kept.append(p[:, keep[lo:lo + p.shape[1]]])
                lo += p.shape[1]
            self._rows = [np.concatenate(kept, axis=1) if len(kept) > 1 else kept[0]]
            self._w, self._key = [w[keep]], [key[keep]]
            ridx = np.flatnonzero(ready)
            order = ridx[np.argsort(key[ridx], kind="stable")]
        if not len(order):
            return
        key = key[order]
        starts = np.flatnonzero(np.diff(key)) + 1
        counts = np.diff(np.concatenate([[0], starts, [len(key)]]))
        gkey = key[np.concatenate([[0], starts])]
        n_comms = len(lay.comms)
        cidx = gkey % n_comms
        agent_flush = gkey // n_comms  # window * n_nodes + node
        node = agent_flush % lay.n_nodes
        ts = self.clock((agent_flush // lay.n_nodes) * bs, node).tolist()
        keys = self.comm_keys
        packed = pack(parts, counts, order, self._grid)
        self._grid = packed.grid
        self.outbox.batches([keys[c] for c in cidx.tolist()], ts, packed, agent_flush)
        self.records += len(order)
