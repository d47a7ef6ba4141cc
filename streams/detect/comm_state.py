"""State of one communicator of one job (stage 1), bounded by the window size.

Per member (indexed by comm rank): the global rank, the highest collective `seq` entered
and completed and since when, the last call start (for gaps). Collective instances live
in a ring of `slots` rows (seq % slots) of entry and completion times; an instance whose
members all completed is *ready* and joins the current window. P2P calls are tracked per
(comm rank, peer, op) for the wait state, and their durations summed per rank.

All updates from a batch are numpy operations over the batch; Python loops run per
instance, per window or per distinct (rank, peer, op), never per record.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from commwatch import wire
from commwatch.streams.detect.p2p_waits import P2PWaits
from commwatch.wire import WireError

GAP_RING = 512
MAX_COMM_RANKS = 1 << 20  # a record claiming a larger comm is refused (WireError), not allocated
RING_CELLS = 1 << 23  # entry/exit cells per comm ring: big comms keep fewer instances
MIN_SLOTS = 16
MAX_SEQ = 1 << 62  # seq beyond this is not a real count: dropped
GAP_REFRESH = 64
WINDOW_MIN_NS = 1_000_000_000  # a window covers at least this much event time


def _footprint(obj, depth: int = 0) -> int:
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, (dict, list, set, tuple, deque)):
        return len(obj)
    if depth < 2 and hasattr(obj, "__dict__"):
        return sum(_footprint(v, depth + 1) for v in vars(obj).values())
    return 0


def _quantile(xs: list[float], q: float) -> float:
    """`np.percentile`'s linear quantile of sorted `xs` (cheap for the small gap ring)."""
    pos = q * (len(xs) - 1)
    i = int(pos)
    if i + 1 >= len(xs):
        return float(xs[-1])
    return float(xs[i] + (xs[i + 1] - xs[i]) * (pos - i))


class CommState:
    def __init__(self, job: str, comm: int, window_instances: int):
        self.job = job
        self.comm = comm
        self.hex = wire.comm_hex(comm)
        self.n = 0
        self.nnodes = 0
        self.rank_of = np.full(0, -1, np.int64)
        self.started = np.full(0, -1, np.int64)
        self.completed = np.full(0, -1, np.int64)
        self.t_in = np.zeros(0, np.int64)
        self.last_start = np.zeros(0, np.int64)
        self.offsets = np.zeros(0, np.float64)
        self.g2c: dict[int, int] = {}
        self.node_of: dict[int, str] = {}
        self.op_of_seq = 0
        # P2P wait state: (comm rank, peer, is_recv) -> [started, completed, since_ns]
        self.p2p: dict[tuple[int, int, int], list[int]] = {}
        # collective instance ring
        self.window = window_instances
        self.slots = 4 * window_instances
        self.tag = np.full(self.slots, -1, np.int64)
        self.ops = np.zeros(self.slots, np.uint8)
        self.bytes = np.zeros(self.slots, np.float64)
        self.st = np.zeros((self.slots, 0), np.int64)
        self.en = np.zeros((self.slots, 0), np.int64)
        self.frontier = -1  # next seq to make ready; -1 until the first collective
        self.win_start = -1
        self.prev_win_anchor = -1  # corrected first-entry time of the previous window's last instance
        self.win_anchor = 0  # raw first-entry time of the previous window's last instance
        self.max_seq = -1
        self.dropped = 0
        # gaps between consecutive calls of a rank (ns), for the hang threshold
        self.gaps = np.zeros(GAP_RING, np.float64)
        self.ngaps = 0
        self._q = (0.0, 0.0)
        self._q_at = 0
        self.last_progress_ns = 0
        self.p2p_win_start = 0
        self.offset_windows = 0
        self.pending: list[bytes] = []  # raw call batches (header and records) not yet applied
        self.pending_n = 0
        self.pending_since = 0  # event time of the oldest pending batch
        self.last_seen_ns = 0  # event time of the last call batch or heartbeat (idle comms are dropped)
        self.p2p_waits = P2PWaits()  # paired SEND/RECV waits per window (p2p_waits.py)

    # ------------------------------------------------------------------------------
    def grow(self, n: int) -> None:
        if n <= self.n:
            return
        if n > MAX_COMM_RANKS:
            raise WireError("comm_too_large", f"comm {self.hex} claims {n} ranks (at most {MAX_COMM_RANKS})")
        add = n - self.n
        slots = max(MIN_SLOTS, min(4 * self.window, RING_CELLS // n))
        if slots != self.slots:  # big comms keep fewer instances: memory stays within RING_CELLS
            self.slots = slots
            self.tag = np.full(slots, -1, np.int64)
            self.ops = np.zeros(slots, np.uint8)
            self.bytes = np.zeros(slots, np.float64)
            self.st = np.zeros((slots, self.n), np.int64)
            self.en = np.zeros((slots, self.n), np.int64)
            self.frontier = self.win_start = -1

        def ext(a: np.ndarray, fill) -> np.ndarray:
            return np.concatenate([a, np.full(add, fill, a.dtype)])

        self.rank_of = ext(self.rank_of, -1)
        self.started = ext(self.started, -1)
        self.completed = ext(self.completed, -1)
        self.t_in = ext(self.t_in, 0)
        self.last_start = ext(self.last_start, 0)
        self.offsets = ext(self.offsets, 0.0)
        self.st = np.concatenate([self.st, np.zeros((self.slots, add), np.int64)], axis=1)
        self.en = np.concatenate([self.en, np.zeros((self.slots, add), np.int64)], axis=1)
        self.n = n

    def footprint(self) -> int:
        """Bytes held in arrays plus entries held in containers (a size that must not grow
        with the length of a run, only with the comm's size and the window)."""
        return _footprint(self)

    def members(self) -> list[int]:
        return [int(r) for r in self.rank_of if r >= 0]

    def nodes(self) -> list[str]:
        return sorted({self.node_of[r] for r in self.members() if r in self.node_of})

    # ------------------------------------------------------------------------------
    def apply_records(self, recs: np.ndarray) -> list[tuple[int, int]]:
        """Fold one batch in; returns the (first, end) seq ranges of windows now closed."""
        if len(recs):
            need = max(int(recs["nranks"].max()), int(recs["comm_rank"].max()) + 1)
            self.grow(need)
            sane = recs["seq"] < MAX_SEQ
            if not sane.all():
                self.dropped += int((~sane).sum())
                recs = recs[sane]
        kinds = recs["kind"]
        cr_all = recs["comm_rank"].astype(np.int64)
        rank = recs["rank"]
        if len(recs) and kinds.min() == wire.KIND_CALL == kinds.max() and cr_all.min() >= 0 and rank.min() >= 0:
            # the usual batch: calls of known ranks only, no masks needed
            self.rank_of[cr_all] = rank
            c, cr = recs, cr_all
        else:
            ok = (cr_all >= 0) & (cr_all < self.n)
            known = ok & (rank >= 0)
            if known.any():
                self.rank_of[cr_all[known]] = rank[known]
            init = ok & (kinds == wire.KIND_COMM_INIT)
            if init.any():
                self.nnodes = max(self.nnodes, int(recs["aux"][init].max()))
            calls = ok & (kinds == wire.KIND_CALL)
            c, cr = recs[calls], cr_all[calls]
        if len(self.g2c) < int(np.count_nonzero(self.rank_of >= 0)):
            self.g2c = {g: i for i, g in enumerate(self.rank_of.tolist()) if g >= 0}
        if not len(c):
            return []
        self._gaps(cr, c["t_start_ns"])
        p2p = (c["op"] == wire.OP_SEND) | (c["op"] == wire.OP_RECV)
        if p2p.any():
            self._apply_p2p(c[p2p], cr[p2p])
            self._p2p_waits_add(c[p2p], cr[p2p])
        coll = ~p2p
        if not coll.any():
            return []
        return self._apply_collectives(c[coll], cr[coll])

    def _gaps(self, cr: np.ndarray, ts: np.ndarray) -> None:
        order = np.lexsort((ts, cr))
        cr_s, ts_s = cr[order], ts[order]
        step = cr_s[1:] != cr_s[:-1]
        first = np.ones(len(cr_s), bool)
        first[1:] = step
        prev = np.empty_like(ts_s)
        prev[1:] = ts_s[:-1]
        prev[first] = self.last_start[cr_s[first]]
        gap = (ts_s - prev).astype(np.float64)
        good = (prev > 0) & (gap > 0)
        last = np.ones(len(cr_s), bool)
        last[:-1] = step
        self.last_start[cr_s[last]] = np.maximum(self.last_start[cr_s[last]], ts_s[last])
        g = gap[good]
        if len(g) > GAP_RING:
            g = g[-GAP_RING:]
        if len(g):
            idx = (self.ngaps + np.arange(len(g))) % GAP_RING
            self.gaps[idx] = g
            self.ngaps += len(g)

    def gap_quantiles(self) -> tuple[float, float]:
        """(p50, p99) of recent gaps between consecutive calls of a rank, in ns.

        Recomputed after every `GAP_REFRESH` new gaps (or while there are few), not per call.
        """
        if self.ngaps != self._q_at and (self.ngaps < GAP_REFRESH or self.ngaps - self._q_at >= GAP_REFRESH):
            g = np.sort(self.gaps[: min(self.ngaps, GAP_RING)]).tolist()
            self._q = (_quantile(g, 0.5), _quantile(g, 0.99))
            self._q_at = self.ngaps
        return self._q

    def _apply_p2p(self, c: np.ndarray, cr: np.ndarray) -> None:
        seq = c["seq"].astype(np.int64)
        is_recv = (c["op"] == wire.OP_RECV).astype(np.int64)
        peer = c["peer"].astype(np.int64)
        done = (c["flags"] & wire.FLAG_COMPLETED) != 0
        key = (cr << 33) | ((peer & 0xFFFFFFFF) << 1) | is_recv
        order = np.lexsort((seq, key))
        key_s, seq_s = key[order], seq[order]
        last = np.ones(len(key_s), bool)
        last[:-1] = key_s[1:] != key_s[:-1]
        ts_s = c["t_start_ns"][order]
        done_s = done[order]
        # highest completed seq per key
        dkey, dseq = key_s[done_s], seq_s[done_s]
        dlast = np.ones(len(dkey), bool)
        dlast[:-1] = dkey[1:] != dkey[:-1]
        comp = dict(zip(dkey[dlast].tolist(), dseq[dlast].tolist()))
        for k, s, t in zip(key_s[last].tolist(), seq_s[last].tolist(), ts_s[last].tolist()):
            tup = (k >> 33, ((k >> 1) & 0xFFFFFFFF), k & 1)
            if tup[1] >= 0x80000000:
                tup = (tup[0], tup[1] - (1 << 32), tup[2])
            st = self.p2p.get(tup)
            if st is None:
                st = self.p2p[tup] = [-1, -1, 0]
            if s > st[0]:
                st[0], st[2] = s, t
            cs = comp.get(k)
            if cs is not None and cs > st[1]:
                st[1] = cs

    # --- P2P wait accounting (slow-rank detection; see p2p_waits.py) ---------------
    def _p2p_waits_add(self, c: np.ndarray, cr: np.ndarray) -> None:
        done = (c["flags"] & wire.FLAG_COMPLETED) != 0
        if done.any():
            c = c[done]
            dur = np.maximum(c["t_end_ns"].astype(np.int64) - c["t_start_ns"].astype(np.int64), 0)
            self.p2p_waits.add(cr[done], c["peer"], c["op"] == wire.OP_RECV, c["seq"], dur)
    # --------------------------------------------------------------------------------

    def _apply_collectives(self, c: np.ndarray, cr: np.ndarray) -> list[tuple[int, int]]:
        seq = c["seq"].astype(np.int64)
        ts = c["t_start_ns"]
        te = c["t_end_ns"]
        done = (c["flags"] & wire.FLAG_COMPLETED) != 0
        # wait state: highest seq entered / completed per member
        order = np.lexsort((seq, cr))
        cr_s, seq_s = cr[order], seq[order]
        last = np.ones(len(cr_s), bool)
        last[:-1] = cr_s[1:] != cr_s[:-1]
        lc, ls = cr_s[last], seq_s[last]
        newer = ls > self.started[lc]
        self.started[lc[newer]] = ls[newer]
        self.t_in[lc[newer]] = ts[order][last][newer]
        if done.any():
            dcr, dseq = cr[done], seq[done]
            o2 = np.lexsort((dseq, dcr))
            dcr, dseq = dcr[o2], dseq[o2]
            l2 = np.ones(len(dcr), bool)
            l2[:-1] = dcr[1:] != dcr[:-1]
            before = self.completed.max() if self.n else -1
            self.completed[dcr[l2]] = np.maximum(self.completed[dcr[l2]], dseq[l2])
            if self.completed.max() > before:
                self.last_progress_ns = max(self.last_progress_ns, int(te[done].max()))
        # instance ring
        smax = int(seq.max())
        self.max_seq = max(self.max_seq, smax)
        if self.frontier < 0:
            self.frontier = int(seq.min())
            self.win_start = self.frontier
        useq = np.unique(seq)
        slot_u = useq % self.slots
        fresh = useq > self.tag[slot_u]
        if fresh.any():
            fs = slot_u[fresh]
            self.tag[fs] = useq[fresh]
            self.st[fs] = 0
            self.en[fs] = 0
        slot = seq % self.slots
        valid = (self.tag[slot] == seq) & (seq >= self.frontier)
        if not valid.all():
            self.dropped += int((~valid).sum())
            slot, cr, ts, te, done, seq = slot[valid], cr[valid], ts[valid], te[valid], done[valid], seq[valid]
            c = c[valid]
        self.st[slot, cr] = ts
        self.ops[slot] = c["op"]
        self.bytes[slot] = c["bytes"]
        self.en[slot[done], cr[done]] = te[done]
        return self._advance()

    def _advance(self) -> list[tuple[int, int]]:
        """Move the frontier over ready instances; returns the windows that closed."""
        closed: list[tuple[int, int]] = []
        while self.frontier <= self.max_seq:
            f = self.frontier
            if self.max_seq - f >= self.slots:  # a jump past the ring: what lies between is gone
                if f > self.win_start:
                    closed.append((self.win_start, f))
                self.dropped += 1
                self.frontier = self.win_start = self.max_seq - self.slots // 2
                self.win_anchor = 0
                continue
            seqs = np.arange(f, self.max_seq + 1)
            rows = seqs % self.slots
            ok = (self.tag[rows] == seqs) & (self.en[rows] > 0).all(axis=1) & (self.st[rows] > 0).all(axis=1)
            nready = len(ok) if ok.all() else int(np.argmin(ok))
            if nready == 0:
                if self.max_seq < f + self.slots // 2:
                    break
                self.dropped += 1  # never completed in time: give up on it
                if f > self.win_start:
                    closed.append((self.win_start, f))
                self.frontier = self.win_start = f + 1
                self.win_anchor = 0
                continue
            anchors = self.st[rows[:nready]].min(axis=1)
            ends = np.arange(f + 1, f + nready + 1)  # window [win_start, e) if closed after each
            wn = self.window_ns()
            i0 = 0
            while i0 < nready:
                ws = self.win_start
                base = self.win_anchor if self.win_anchor > 0 else self.anchor(ws)
                cnt = ends[i0:] - ws
                enough = cnt >= (1 if self.win_anchor > 0 else 2)
                cond = (cnt >= min(2 * self.window, self.slots // 2)) | (enough & (anchors[i0:] - base >= wn))
                if not cond.any():
                    break
                j = i0 + int(np.argmax(cond))
                closed.append((ws, int(ends[j])))
                self.win_start = int(ends[j])
                self.win_anchor = int(anchors[j])
                i0 = j + 1
            self.frontier = f + nready
            if nready < len(ok):
                break
        return closed

    def anchor(self, seq: int) -> int:
        """First-entry time of an instance (raw clocks; used for window spans)."""
        return int(self.st[seq % self.slots].min())

    def window_ns(self) -> float:
        """Event time a window covers at least."""
        p50, _ = self.gap_quantiles()
        return max(WINDOW_MIN_NS, p50)
