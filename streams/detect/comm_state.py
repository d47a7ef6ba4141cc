"""State of one communicator of one job (stage 1), bounded by the comm's size and the window.

Members are kept in *slots*, one per global rank in the order they appear (heartbeats name
global ranks only; records also give the comm rank). Per slot, struct-of-arrays:

- collective counters `started` / `completed` (highest `seq` entered / completed; a call
  whose completion the probe gave up on, COMPLETION_LOST, counts as completed: it is not a
  wait), and whether the member ever reported a completion (`ever_done`: a probe that
  cannot see completions is not a stuck one);
- when its counters last advanced, in the job's event time as the pipeline observed it
  (`adv_ns`, `done_adv_ns`): time that means the same whatever the rank's clock;
- `exited` (its agent said its process is gone, or stopped listing it in heartbeats it
  still sends for the comm: `GONE_BEATS`) and `left` (COMM_DESTROY).

What a record's times mean decides what they are used for (wire spec section 1):

- counters and waits use every record (entered / completed);
- timing (arrival lag, clock offsets, time spent inside calls) uses only records whose
  times are real: GPU_TIMED, or host-blocking (neither GPU_TIMED nor ENQUEUED), COMPLETED
  and not COMPLETION_LOST. Host-enqueue times are never read as arrivals.

Completed collective instances live in a ring of `slots` rows (seq % rows) of start/end
times per member and a timing-valid mask; an instance completed by every member is
*ready* and joins the current window (`windows.py`). P2P calls are tracked per
(slot, peer slot, is_recv) channel for waits, and their timed durations summed per slot.

All updates from a batch are numpy operations over the batch; Python loops run per
distinct rank, channel or window, never per record.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter, deque

import numpy as np

from commwatch import wire
from commwatch.streams.detect.node_lag import SKEW_MIN_NS
from commwatch.wire import WireError

GAP_RING = 512
MAX_COMM_RANKS = 1 << 20  # a record claiming a larger comm is refused (WireError), not allocated
RING_CELLS = 1 << 23  # entry/exit cells per comm ring: big comms keep fewer instances
MIN_ROWS = 16
MAX_SEQ = 1 << 62  # seq beyond this is not a real count: dropped
GAP_REFRESH = 64
WINDOW_MIN_NS = 1_000_000_000  # a window covers at least this much event time
MAX_CHANNELS = 1 << 16  # P2P channels kept per comm
P2P_AHEAD = 16  # entry times kept per channel for calls queued beyond its first open one
MAX_P2P_INTERVALS = 1 << 18  # completed P2P calls kept for the windows not reported yet
_C, _G, _E, _L = wire.FLAG_COMPLETED, wire.FLAG_GPU_TIMED, wire.FLAG_ENQUEUED, wire.FLAG_COMPLETION_LOST
_KNOWN = 0x1F  # the flag bits v1 defines (a consumer ignores the others)


def _by_flags(f) -> np.ndarray:
    """`f(flags)` for every value of the known flag bits: a record's property is one lookup
    (`table[recs["flags"] & _KNOWN]`), not a few array operations (a flush pays numpy's fixed
    cost per operation, and takes several of these)."""
    return np.array([bool(f(b)) for b in range(_KNOWN + 1)])


ON_DEVICE = _by_flags(lambda f: f & (_G | _E))  # the call ran on a device (NCCL)
# a device entry: a call entered before, now seen started on the GPU after waiting there
DEVICE_ENTRY = _by_flags(lambda f: f & (_G | _C | _L) == _G)
DONE = _by_flags(lambda f: f & (_C | _L))  # completed, or given up on
OBSERVED = _by_flags(lambda f: f & _C)  # completion observed
OBSERVED_KEPT = _by_flags(lambda f: f & _C and not f & _L)
# completion observed with real times: the device's, or a blocking host's
TIMED = _by_flags(lambda f: f & _C and not f & _L and (f & _G or not f & _E))
# inside the call, not only queued: its device started it or the host blocked in it
REAL = _by_flags(lambda f: f & _G or not f & _E)
# timed, or a host-enqueue call whose completion its probe observed (`windows.enqueue_gate`)
ENDED = _by_flags(lambda f: (f & _C and not f & _L and (f & _G or not f & _E)) or (f & _C and f & (_E | _G | _L) == _E))
HOST_TIMED = _by_flags(lambda f: not f & _G)  # t_start is the host's entry
# a completion a host-enqueue probe observed without device times: a probe that never says
# when its device started a call (wire spec section 1; `queued_in`)
HOST_DONE = _by_flags(lambda f: f & (_C | _E | _G) == _C | _E)

HOST_PROBES_UNKNOWN = True  # `queued_in` lists no member whose probe cannot see device starts (a drill turns it off)
NO_TIME = 1 << 62  # `edev` of an instance no device start is known for
GONE_BEATS = 2  # heartbeats of its node for the comm in a row that no longer list a rank: its process is gone
RECV_FWD, RECV_BWD, SEND_FWD, SEND_BWD = 0, 1, 2, 3  # P2P call kinds (from/to an earlier/later stage)


def _footprint(obj, depth: int = 0) -> int:
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, (dict, list, set, tuple, deque, Counter)):
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


def _last_sorted(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each distinct key, its last value (keys sorted, values sorted within a key)."""
    last = np.ones(len(keys), bool)
    last[:-1] = keys[1:] != keys[:-1]
    return keys[last], values[last]


class CommState:
    def __init__(self, job: str, comm: int, window_instances: int):
        self.job = job
        self.comm = comm
        self.hex = wire.comm_hex(comm)
        self.n = 0  # slots (members seen)
        self.size = 0  # comm size from records (0: unknown, heartbeats only)
        self.nnodes = 0
        self.rank_of = np.zeros(0, np.int64)
        self.crank = np.zeros(0, np.int64)  # comm rank of each slot, -1 unknown
        self.cr_slot = np.zeros(0, np.int64)  # slot of each comm rank, -1 unknown
        self._gsort = np.zeros(0, np.int64)  # sorted global ranks ...
        self._gslot = np.zeros(0, np.int64)  # ... and their slots
        self._slot: dict[int, int] = {}  # the same, for a heartbeat's few ranks
        self.node_of: dict[int, str] = {}
        self.started = np.zeros(0, np.int64)
        self.completed = np.zeros(0, np.int64)
        self.ever_done = np.zeros(0, bool)
        self.host_done = np.zeros(0, bool)  # its completions come from a host-enqueue probe (`HOST_DONE`)
        self.dev_entry = np.zeros(0, bool)  # it wrote a device entry (`DEVICE_ENTRY`)
        self.adv_ns = np.zeros(0, np.int64)
        self.born_ns = np.zeros(0, np.int64)  # when a member was first seen, by its own stamps
        self.done_adv_ns = np.zeros(0, np.int64)
        self.behind_ns = np.zeros(0, np.int64)  # since when a member's completions are behind d_max (0: not)
        self.seen_done = np.zeros(0, np.int64)  # highest collective its probe saw complete (not given up on) ...
        self.seen_adv_ns = np.zeros(0, np.int64)  # ... and when that last advanced
        self.exited = np.zeros(0, bool)
        self.left = np.zeros(0, bool)
        self.listed: dict[str, set[int]] = {}  # node -> slots its heartbeats for this comm have listed
        self.unlisted: dict[int, int] = {}  # slot -> heartbeats of its node in a row without it
        self.offsets = np.zeros(0, np.float64)
        self.sent = np.zeros(0, np.float64)  # per member: bytes of its completed all-to-alls since the last window ...
        self.sent_n = np.zeros(0, np.int64)  # ... and how many (`windows.window_report`: `bytes_ratio`)
        self.first_ns = 0
        self.d_max = -1  # highest collective completed by any member
        self.d_adv_ns = 0  # when it last advanced
        self.seen_d = -1  # the highest collective a member's probe saw complete (not given up on) ...
        self.seen_d_ns = 0  # ... and when: a collective completes on every member or none (`JobStage._alive_ns`)
        self.open_since = 0  # when a member first entered instance d_max + 1 (0: none yet)
        self.p2p_only = True  # no collective seen yet
        self.device = False  # a call ran on a device (GPU_TIMED or ENQUEUED: NCCL), not blocking a host (gloo)
        # P2P channels: (slot, peer slot, is_recv) -> [started, completed, open_since_ns, entered_at]
        self.p2p: dict[tuple[int, int, int], list[int]] = {}
        self.p2p_ahead: dict[tuple[int, int, int], dict[int, int]] = {}  # channel -> {seq: host entry} beyond the first open
        self.p2p_real: dict[tuple[int, int, int], int] = {}  # channel -> highest seq its rank is known inside
        self.p2p_real_ns: dict[tuple[int, int, int], int] = {}  # channel -> when that became known (its stamp)
        # completed timed P2P calls, kept until the window they fall in is reported
        self.p2p_iv: list[tuple[np.ndarray, ...]] = []  # (slot, start, end, kind: RECV_FWD ... SEND_BWD, peer slot, seq, bytes)
        self.p2p_iv_n = 0
        self.p2p_untimed = 0
        self.p2p_win_start = 0  # start of the next P2P window to report (0: none yet)
        self.permute: bool | None = None  # a collective permute (`windows._permute_busy`); None: not known yet
        # collective instance ring (completed records only)
        self.window = window_instances
        self.rows = 4 * window_instances
        self.tag = np.full(self.rows, -1, np.int64)
        self.ops = np.zeros(self.rows, np.uint8)
        self.bytes = np.zeros(self.rows, np.float64)
        self.etag = np.full(self.rows, -1, np.int64)  # recently entered instances (for waits): ...
        self.eop = np.zeros(self.rows, np.uint8)  # ... their op ...
        self.et = np.zeros((self.rows, 0), np.int64)  # ... and when each member entered them (its clock)
        self.ereal = np.zeros((self.rows, 0), bool)  # ... and whether it is known inside it (not only queued)
        self.edev = np.full(self.rows, NO_TIME, np.int64)  # ... the earliest device start of a call seen queued first
        self.st = np.zeros((self.rows, 0), np.int64)
        self.en = np.zeros((self.rows, 0), np.int64)
        self.ok = np.zeros((self.rows, 0), bool)  # timing valid
        self.frontier = -1  # next seq to make ready; -1 until the first collective
        self.win_start = -1
        self.prev_win_anchor = -1.0  # corrected completion time closing the previous window
        self.gap_typical = 0.0  # typical compute gap (ns) of the last window of `TYPICAL_ROWS` instances or more
        self.win_anchor = 0  # raw first entry of the previous window's last instance
        self.max_seq = -1
        self.dropped: Counter = Counter()
        self.gaps = np.zeros(GAP_RING, np.float64)
        self.ngaps = 0
        self._q = (0.0, 0.0)
        self._q_at = 0
        self.offset_windows = 0
        self.pending: list[tuple[bytes, int, int]] = []  # call batches not yet applied: (raw, event time, count)
        self.pending_n = 0
        self.pending_since = 0
        self.pending_hb: list[tuple[dict, int]] = []  # heartbeats that came after pending batches
        self.flushed_ns = 0  # when pending batches were last applied
        self.last_seen_ns = 0

    # --- membership -----------------------------------------------------------------
    def _grow(self, add: int) -> None:
        def ext(a: np.ndarray, fill) -> np.ndarray:
            return np.concatenate([a, np.full(add, fill, a.dtype)])

        for name, fill in (("rank_of", -1), ("crank", -1), ("started", -1), ("completed", -1),
                           ("ever_done", False), ("host_done", False), ("dev_entry", False), ("adv_ns", 0), ("born_ns", 0), ("done_adv_ns", 0), ("behind_ns", 0),
                           ("seen_done", -1), ("seen_adv_ns", 0), ("exited", False), ("left", False), ("offsets", 0.0),
                           ("sent", 0.0), ("sent_n", 0)):
            setattr(self, name, ext(getattr(self, name), fill))
        self.st = np.concatenate([self.st, np.zeros((self.rows, add), np.int64)], axis=1)
        self.en = np.concatenate([self.en, np.zeros((self.rows, add), np.int64)], axis=1)
        self.ok = np.concatenate([self.ok, np.zeros((self.rows, add), bool)], axis=1)
        self.et = np.concatenate([self.et, np.zeros((self.rows, add), np.int64)], axis=1)
        self.ereal = np.concatenate([self.ereal, np.zeros((self.rows, add), bool)], axis=1)
        self.n += add

    def slots_of(self, ranks: np.ndarray, now_ns: int, ts: np.ndarray | None = None) -> np.ndarray:
        """Slots of global ranks (new ones are added, first seen at `now_ns`, or at the
        earliest of `ts` (aligned with `ranks`) that names them: their node's clock)."""
        idx = np.searchsorted(self._gsort, ranks)
        found = idx < len(self._gsort)
        found[found] = self._gsort[idx[found]] == ranks[found]
        if not found.all():
            new = np.unique(ranks[~found])
            if self.n + len(new) > MAX_COMM_RANKS:
                raise WireError("comm_too_large", f"comm {self.hex} has more than {MAX_COMM_RANKS} members")
            first = self.n
            self._grow(len(new))
            self.rank_of[first:] = new
            self.adv_ns[first:] = 0
            if ts is None:
                self.born_ns[first:] = now_ns
            else:
                born = np.full(len(new), np.iinfo(np.int64).max, np.int64)
                np.minimum.at(born, np.searchsorted(new, ranks[~found]), ts[~found])
                self.born_ns[first:] = born
            g = np.concatenate([self._gsort, new])
            s = np.concatenate([self._gslot, np.arange(first, self.n)])
            order = np.argsort(g, kind="stable")
            self._gsort, self._gslot = g[order], s[order]
            self._slot.update(zip(new.tolist(), range(first, self.n)))
            if not self.first_ns:
                self.first_ns = now_ns
            idx = np.searchsorted(self._gsort, ranks)
        return self._gslot[idx]

    def _set_size(self, size: int) -> None:
        if size > MAX_COMM_RANKS:
            raise WireError("comm_too_large", f"comm {self.hex} claims {size} ranks (at most {MAX_COMM_RANKS})")
        if size > self.size:
            self.cr_slot = np.concatenate([self.cr_slot, np.full(size - self.size, -1, np.int64)])
            self.size = size
            rows = max(MIN_ROWS, min(4 * self.window, RING_CELLS // max(size, 1)))
            if rows != self.rows:  # big comms keep fewer instances: memory stays within RING_CELLS
                self.rows = rows
                self.tag = np.full(rows, -1, np.int64)
                self.ops = np.zeros(rows, np.uint8)
                self.bytes = np.zeros(rows, np.float64)
                self.etag = np.full(rows, -1, np.int64)
                self.eop = np.zeros(rows, np.uint8)
                self.et = np.zeros((rows, self.n), np.int64)
                self.ereal = np.zeros((rows, self.n), bool)
                self.edev = np.full(rows, NO_TIME, np.int64)
                self.st = np.zeros((rows, self.n), np.int64)
                self.en = np.zeros((rows, self.n), np.int64)
                self.ok = np.zeros((rows, self.n), bool)
                self.frontier = self.win_start = -1

    def _ranks_in_order(self) -> None:
        """A comm known from heartbeats only names no comm ranks: take them to be its members'
        global ranks in ascending order (as groups are built), until records say otherwise."""
        order = np.argsort(self.rank_of, kind="stable")
        self.cr_slot = order.astype(np.int64)
        self.crank = np.empty(self.n, np.int64)
        self.crank[order] = np.arange(self.n)

    def members(self) -> list[int]:
        return self.rank_of.tolist()

    def nodes(self) -> list[str]:
        return sorted({self.node_of[r] for r in self.rank_of.tolist() if r in self.node_of})

    def unknown(self) -> int:
        """Members the comm's size promises that were never seen."""
        return max(0, self.size - self.n)

    def footprint(self) -> int:
        """Bytes held in arrays plus entries held in containers (a size that must not grow
        with the length of a run, only with the comm's size and the window)."""
        return _footprint(self)

    # --- time passing -----------------------------------------------------------------
    def _advanced(self, slots: np.ndarray, times: np.ndarray) -> None:
        """Members made progress at `times` (aligned with `slots`, which may repeat): the
        intervals between a member's progress feed the cadence (the first counted from the
        comm's start, or, for a member first seen `SKEW_MIN_NS` or more after it, from then,
        by its own node's stamps: a node whose clock runs 3 s ahead of the others, in a
        capture that has no arrival times to correct it by, added a 4 s gap per member, and
        a hang threshold of 13 s against 5), and `adv_ns` keeps the latest."""
        if not len(slots):
            return
        order = np.lexsort((times, slots))
        sl, t = slots[order], times[order]
        first = np.ones(len(sl), bool)
        first[1:] = sl[1:] != sl[:-1]
        prev = np.empty_like(t)
        prev[1:] = t[:-1]
        base = self.adv_ns[sl[first]]
        born = self.born_ns[sl[first]]
        start = np.where(born - self.first_ns >= SKEW_MIN_NS, born, self.first_ns)
        prev[first] = np.where(base > 0, base, start)
        g = (t - prev).astype(np.float64)
        g = g[g > 0]
        if len(g):
            g = g[-GAP_RING:]
            idx = (self.ngaps + np.arange(len(g))) % GAP_RING
            self.gaps[idx] = g
            self.ngaps += len(g)
        last = np.ones(len(sl), bool)
        last[:-1] = sl[1:] != sl[:-1]
        self.adv_ns[sl[last]] = np.maximum(self.adv_ns[sl[last]], t[last])

    def _advanced_at(self, slots: list[int], t: int) -> None:
        """`_advanced` of distinct members (ascending) that made progress at one time, `t` (a
        heartbeat's): the same figures, element by element (a heartbeat moves a few members;
        numpy's fixed cost per call was most of a heartbeat's)."""
        adv, born, first = self.adv_ns, self.born_ns, self.first_ns
        gaps = []
        for s in slots:
            base = int(adv[s])
            if base > 0:
                prev = base
            else:
                b = int(born[s])
                prev = b if b - first >= SKEW_MIN_NS else first
            if t > prev:
                gaps.append(float(t - prev))
            if t > base:
                adv[s] = t
        if gaps:
            gaps = gaps[-GAP_RING:]
            for i, g in enumerate(gaps):
                self.gaps[(self.ngaps + i) % GAP_RING] = g
            self.ngaps += len(gaps)

    def gap_quantiles(self) -> tuple[float, float]:
        """(p50, p99) of recent intervals between a member's progress (entries or completions),
        in ns of event time. Recomputed after every `GAP_REFRESH` new gaps, not per call."""
        if self.ngaps != self._q_at and (self.ngaps < GAP_REFRESH or self.ngaps - self._q_at >= GAP_REFRESH):
            g = np.sort(self.gaps[: min(self.ngaps, GAP_RING)]).tolist()
            self._q = (_quantile(g, 0.5), _quantile(g, 0.99))
            self._q_at = self.ngaps
        return self._q

    def _d_update(self, done_at: int, entered_at: int) -> None:
        """After counters moved: `done_at` is when the latest completions were made,
        `entered_at` when the earliest entries were."""
        if not self.n:
            return
        d = int(self.completed.max())
        if d > self.d_max:
            self.d_max = d
            self.d_adv_ns = max(self.d_adv_ns, done_at)
            self.behind_ns[(self.behind_ns == 0) & (self.completed < d)] = self.d_adv_ns
            self.open_since = 0
        self.behind_ns[self.completed >= self.d_max] = 0
        if self.open_since == 0 and int(self.started.max()) > self.d_max:
            self.open_since = max(entered_at, self.d_adv_ns)

    # --- records ----------------------------------------------------------------------
    def apply_records(self, recs: np.ndarray, ts: np.ndarray) -> list[tuple[int, int]]:
        """Fold records in, each seen at `ts` (its message's event time, aligned with `recs`);
        returns the (first, end) seq ranges of collective windows now closed."""
        if not len(recs):
            return []
        sane = recs["seq"] < MAX_SEQ
        if not sane.all():
            self.dropped["seq_absurd"] += int((~sane).sum())
            recs, ts = recs[sane], ts[sane]
            if not len(recs):
                return []
        cr = recs["comm_rank"].astype(np.int64)
        nranks = recs["nranks"].astype(np.int64)
        sane = (nranks >= 1) & (nranks <= MAX_COMM_RANKS) & (cr >= -1) & (cr < nranks)
        if not sane.all():  # decoding refuses these; the core never trusts it to
            self.dropped["record_absurd"] += int((~sane).sum())
            recs, ts, cr, nranks = recs[sane], ts[sane], cr[sane], nranks[sane]
            if not len(recs):
                return []
        now_ns = int(ts.min())
        self._set_size(int(nranks.max()))
        rank = recs["rank"].astype(np.int64)
        rank = np.where(rank >= 0, rank, -2 - cr)  # rank unknown: keyed by comm rank (shown negative)
        slot = self.slots_of(rank, now_ns, ts)
        known = cr >= 0
        self.crank[slot[known]] = cr[known]
        self.cr_slot[cr[known]] = slot[known]
        kinds = recs["kind"]
        if not (kinds == wire.KIND_CALL).all():
            init = kinds == wire.KIND_COMM_INIT
            if init.any():
                self.nnodes = max(self.nnodes, int(recs["aux"][init].max()))
                if not self.first_ns:
                    self.first_ns = now_ns
            gone = kinds == wire.KIND_COMM_DESTROY
            if gone.any():
                self.left[slot[gone]] = True
            calls = kinds == wire.KIND_CALL
            recs, slot, ts = recs[calls], slot[calls], ts[calls]
            if not len(recs):
                return []
        flags = recs["flags"] & _KNOWN
        if not self.device and ON_DEVICE[flags].any():
            self.device = True
        # any call record of a member is progress, but a device entry is the opposite
        dev = DEVICE_ENTRY[flags]
        if dev.any():
            self.dev_entry[slot[dev]] = True
            self._advanced(slot[~dev], ts[~dev])
        else:
            self._advanced(slot, ts)
        done = DONE[flags]
        host = HOST_DONE[flags]
        if host.any():
            self.host_done[slot[host]] = True
        observed = OBSERVED[flags]
        timed = TIMED[flags]
        ops = recs["op"]
        p2p = (ops == wire.OP_SEND) | (ops == wire.OP_RECV)
        n_p2p = int(np.count_nonzero(p2p))
        if n_p2p == len(p2p):  # a pipeline comm's batch: no copies (most of its flushes)
            self._apply_p2p(recs, slot, done, timed, ts, flags)
            return []
        if n_p2p:
            self._apply_p2p(recs[p2p], slot[p2p], done[p2p], timed[p2p], ts[p2p], flags[p2p])
        self.p2p_only = False
        seen = OBSERVED_KEPT[flags] & ~p2p
        if seen.any():
            sq, ss, sts = recs["seq"][seen].astype(np.int64), slot[seen], ts[seen]
            newer = sq > self.seen_done[ss]
            if newer.any():
                np.maximum.at(self.seen_adv_ns, ss[newer], sts[newer])
                np.maximum.at(self.seen_done, ss, sq)
            top = int(sq.max())
            if top > self.seen_d:
                self.seen_d, self.seen_d_ns = top, max(self.seen_d_ns, int(sts.max()))
        # inside the call, not only queued: its device started it (GPU_TIMED: a device entry or
        # a completion) or the host blocked in it (neither GPU_TIMED nor ENQUEUED)
        real = REAL[flags]
        # a host-enqueue call whose completion its probe observed: when it saw it is kept (`en`, not
        # a device time: `ok` stays false) for `windows.enqueue_gate`
        ended = ENDED[flags]
        if not n_p2p:
            return self._apply_collectives(recs, slot, done, observed, timed, ts, real, ended)
        coll = ~p2p
        return self._apply_collectives(recs[coll], slot[coll], done[coll], observed[coll], timed[coll], ts[coll],
                                       real[coll], ended[coll])

    def _apply_collectives(self, c: np.ndarray, slot: np.ndarray, done: np.ndarray, observed: np.ndarray,
                           timed: np.ndarray, ts: np.ndarray, real: np.ndarray, ended: np.ndarray
                           ) -> list[tuple[int, int]]:
        seq = c["seq"].astype(np.int64)
        erow = seq % self.rows
        fresh = seq > self.etag[erow]
        if fresh.any():
            fr = erow[fresh]
            self.et[fr] = 0
            self.ereal[fr] = False
            self.edev[fr] = NO_TIME
        self.etag[erow] = np.maximum(self.etag[erow], seq)
        self.eop[erow] = c["op"]
        cur = self.etag[erow] == seq
        if cur.any():  # the first time seen of each member's entry (enqueue, or device start)
            er, es, rc, t0 = erow[cur], slot[cur], real[cur], c["t_start_ns"][cur].astype(np.int64)
            late = rc & (self.et[er, es] != 0) & ~self.ereal[er, es]  # a device start of a call seen queued
            if late.any():
                np.minimum.at(self.edev, er[late], t0[late])
            self.ereal[er[rc], es[rc]] = True
            _, first = np.unique(er * max(self.n, 1) + es, return_index=True)  # a batch may hold a call twice
            er, es, t0 = er[first], es[first], t0[first]
            self.et[er, es] = np.where(self.et[er, es] == 0, t0, self.et[er, es])
        np.maximum.at(self.started, slot, seq)
        old_d = self.d_max
        if done.any():
            ds, dseq = slot[done], seq[done]
            newer = dseq > self.completed[ds]
            if newer.any():
                np.maximum.at(self.done_adv_ns, ds[newer], ts[done][newer])
            np.maximum.at(self.completed, ds, dseq)
            if observed.any():
                self.ever_done[slot[observed]] = True
        beyond = seq > max(old_d, int(self.completed.max()) if self.n else -1)
        adv = done & (seq > old_d)
        self._d_update(int(ts[adv].max()) if adv.any() else int(ts.max()),
                       int(ts[beyond].min()) if beyond.any() else int(ts.max()))
        if not done.any():
            return []
        # instance ring: completed records (the latest record of a call carries its real times)
        if not done.all():
            c, slot, seq, timed, ended = c[done], slot[done], seq[done], timed[done], ended[done]
        self.max_seq = max(self.max_seq, int(seq.max()))
        if self.frontier < 0:
            self.frontier = self.win_start = int(seq.min())
        row = seq % self.rows
        fresh = seq > self.tag[row]
        if fresh.any():  # rows taken by newer instances: cleared (a row's newest instance wins)
            fr = row[fresh]
            np.maximum.at(self.tag, fr, seq[fresh])
            self.st[fr] = 0
            self.en[fr] = 0
            self.ok[fr] = False
        valid = (self.tag[row] == seq) & (seq >= self.frontier)
        if not valid.all():
            self.dropped["instance_out_of_ring"] += int((~valid).sum())
            row, slot, timed, ended, c = row[valid], slot[valid], timed[valid], ended[valid], c[valid]
        t0, t1 = c["t_start_ns"].astype(np.int64), c["t_end_ns"].astype(np.int64)
        self.st[row, slot] = np.maximum(t0, 1)
        self.en[row, slot] = np.where(ended, np.maximum(t1, 1), 1)  # non-zero: completed; 1: when unknown
        self.ok[row, slot] = timed & (t1 >= t0) & (t0 > 0)
        self.ops[row] = c["op"]
        self.bytes[row] = c["bytes"]
        a2a = c["op"] == wire.OP_ALLTOALL  # the one collective whose members' sizes may differ by design
        if a2a.any():
            self.sent += np.bincount(slot[a2a], weights=c["bytes"][a2a].astype(np.float64), minlength=self.n)[: self.n]
            self.sent_n += np.bincount(slot[a2a], minlength=self.n)[: self.n]
        return self._advance()

    def _apply_p2p(self, c: np.ndarray, slot: np.ndarray, done: np.ndarray, timed: np.ndarray, ts: np.ndarray,
                   flags: np.ndarray) -> None:
        host_t = HOST_TIMED[flags]  # t_start is the host's entry
        real = REAL[flags]  # inside on the device, or a blocking host
        peer_cr = c["peer"].astype(np.int64)
        inside = (peer_cr >= 0) & (peer_cr < self.size)
        if not inside.all():
            self.dropped["p2p_peer_unknown"] += int((~inside).sum())
            c, slot, done, timed, peer_cr, ts, host_t, real = (c[inside], slot[inside], done[inside], timed[inside],
                                                               peer_cr[inside], ts[inside], host_t[inside], real[inside])
        if not len(c):
            return
        peer = self.cr_slot[peer_cr]
        peer_cr_all = peer_cr
        seen = peer >= 0
        if not seen.all():  # the peer's comm rank is not mapped to a rank yet: its counters come again
            self.dropped["p2p_peer_unseen"] += int((~seen).sum())
            c, slot, done, timed, peer, ts, host_t, real = (c[seen], slot[seen], done[seen], timed[seen], peer[seen],
                                                            ts[seen], host_t[seen], real[seen])
            peer_cr_all = peer_cr[seen]
            if not len(c):
                return
        is_recv = (c["op"] == wire.OP_RECV).astype(np.int64)
        seq = c["seq"].astype(np.int64)
        key = (slot << 33) | ((peer & 0xFFFFFFFF) << 1) | is_recv
        # per channel, its records in seq order: its newest call, the newest it completed, the
        # newest its rank is known inside
        order = np.lexsort((seq, key))
        k_all, q_all = key[order], seq[order]
        ks, ss = _last_sorted(k_all, q_all)
        d_o, r_o = done[order], real[order]
        comp = dict(zip(*(a.tolist() for a in _last_sorted(k_all[d_o], q_all[d_o])))) if d_o.any() else {}
        if r_o.any():
            rk, rq = _last_sorted(k_all[r_o], q_all[r_o])
            _, rt = _last_sorted(k_all[r_o], ts[order][r_o])
            for k, q, t in zip(rk.tolist(), rq.tolist(), rt.tolist()):
                p = (k >> 1) & 0xFFFFFFFF
                ch = (k >> 33, p - (1 << 32) if p >= 0x80000000 else p, k & 1)
                if q > self.p2p_real.get(ch, -1) and (ch in self.p2p or len(self.p2p) < MAX_CHANNELS):
                    self.p2p_real[ch] = q
                    self.p2p_real_ns[ch] = int(t)
        # the entry of each (channel, seq): its first record whose start is the host's (a device
        # start does not order it among the rank's host calls); channels and calls ascending
        h = order[host_t[order]]
        hk, hq = key[h], seq[h]
        first = np.ones(len(hk), bool)
        first[1:] = (hk[1:] != hk[:-1]) | (hq[1:] != hq[:-1])
        ek, eq, et = hk[first].tolist(), hq[first].tolist(), c["t_start_ns"][h][first].tolist()
        kl, ql, tl = k_all.tolist(), q_all.tolist(), ts[order].tolist()
        for k, s in zip(ks.tolist(), ss.tolist()):
            p = (k >> 1) & 0xFFFFFFFF
            ch = (k >> 33, p - (1 << 32) if p >= 0x80000000 else p, k & 1)
            st = self.p2p.get(ch)
            if st is None:
                if len(self.p2p) >= MAX_CHANNELS:
                    self.dropped["p2p_channels_full"] += 1
                    continue
                st = self.p2p[ch] = [-1, -1, 0, 0]
            st[0] = max(st[0], s)
            cs = comp.get(k)
            if cs is not None and cs > st[1]:
                st[1] = cs
                st[2] = st[3] = 0
            nxt = st[1] + 1
            if st[0] > st[1] and st[2] == 0:
                # open since its last completed call and the first record beyond it came (not
                # since the channel's newest record: a flush may hold a second of its calls)
                lo, hi = bisect_left(kl, k), bisect_right(kl, k)
                j = bisect_right(ql, st[1], lo, hi)
                st[2] = max(max(tl[lo:j], default=0), min(tl[j:hi], default=0))
            # entries of calls queued beyond the first open one: kept (a few per channel) so
            # that its entry time is known once it is the first open one
            lo, hi = bisect_left(ek, k), bisect_right(ek, k)
            ahead = self.p2p_ahead.get(ch)
            j = bisect_right(eq, nxt, lo, hi)
            if j < hi:
                if ahead is None:
                    ahead = self.p2p_ahead[ch] = {}
                for q, te in zip(eq[j:hi], et[j:hi]):
                    if len(ahead) >= P2P_AHEAD:
                        break
                    ahead.setdefault(q, te)
            if ahead:
                for q in [q for q in ahead if q <= st[1]]:
                    del ahead[q]
            if st[0] > st[1] and st[3] == 0:
                i = bisect_left(eq, nxt, lo, hi)
                st[3] = (et[i] if i < hi and eq[i] == nxt else 0) or (ahead.pop(nxt, 0) if ahead else 0)
        # completed timed calls for the P2P windows, by kind: recvs (time inside one is waiting
        # for data) and sends, from or to an earlier or a later stage (forward, backward)
        if timed.any() and self.p2p_iv_n < MAX_P2P_INTERVALS:
            t0 = c["t_start_ns"][timed].astype(np.int64)
            t1 = np.maximum(c["t_end_ns"][timed].astype(np.int64), t0)
            own = self.crank[slot[timed]]
            later = peer_cr_all[timed] > own  # the peer is a later stage
            kind = np.where(is_recv[timed] == 1, np.where(later, RECV_BWD, RECV_FWD), np.where(later, SEND_FWD, SEND_BWD))
            self.p2p_iv.append((slot[timed], t0, t1, kind, peer[timed], seq[timed],
                                c["bytes"][timed].astype(np.int64)))
            self.p2p_iv_n += int(timed.sum())
        elif timed.any():
            self.dropped["p2p_intervals_full"] += int(timed.sum())
        self.p2p_untimed += int((done & ~timed).sum())

    # --- heartbeats -------------------------------------------------------------------
    def _listed(self, node: str, slots: list[int]) -> None:
        """A node's agent lists every local rank of the comm in each heartbeat while the rank's
        process writes (wire spec 2.2); one it listed and then leaves out of `GONE_BEATS` of
        them in a row is gone (its process died: the agent has no ring to read), as if the
        agent had said `exited` (an agent that does not send that field)."""
        now = set(slots)
        seen = self.listed.setdefault(node, set())
        for s in seen - now:
            self.unlisted[s] = self.unlisted.get(s, 0) + 1
            if self.unlisted[s] >= GONE_BEATS:
                self.exited[s] = True
        for s in now:
            if self.unlisted.pop(s, 0) >= GONE_BEATS:
                self.exited[s] = False  # listed again: a process writes for it
        seen |= now

    def apply_progress(self, hb: dict, now_ns: int) -> None:
        """A heartbeat sent at `now_ns` (its event time): counters that moved are progress."""
        node = hb["node"]
        entries = hb["ranks"]
        if not entries:
            return
        known = self._slot
        slots = [known.get(r["rank"], -1) for r in entries]
        if -1 in slots:
            slots = self.slots_of(np.fromiter((r["rank"] for r in entries), np.int64, len(entries)), now_ns).tolist()
        if any(r["started"] >= 0 for r in entries):
            self.p2p_only = False
        if not self.size and any(r.get("p2p") for r in entries):
            self._ranks_in_order()
        self._listed(node, slots)
        moved = []
        for s, r in zip(slots, entries):
            self.node_of[r["rank"]] = node
            if r.get("exited"):
                self.exited[s] = True
            if r["started"] > self.started[s]:
                self.started[s] = r["started"]
                moved.append(s)
            k = self.d_max + 1
            if r["started"] == k and r.get("t_last_start_ns"):  # it entered the first open instance then
                row = k % self.rows
                if self.etag[row] < k:
                    self.etag[row], self.et[row], self.ereal[row], self.edev[row] = k, 0, False, NO_TIME
                if self.etag[row] == k and self.et[row, s] == 0:
                    self.et[row, s] = r["t_last_start_ns"]
            if r["completed"] > self.completed[s]:
                self.completed[s] = r["completed"]
                self.done_adv_ns[s] = now_ns
                self.ever_done[s] = True
                moved.append(s)
            if r["completed"] > self.seen_done[s]:  # a heartbeat's counter: what its probe saw complete
                self.seen_done[s], self.seen_adv_ns[s] = r["completed"], now_ns
            if r["completed"] > self.seen_d:
                self.seen_d, self.seen_d_ns = r["completed"], max(self.seen_d_ns, now_ns)
            if r.get("p2p"):
                for p in r["p2p"]:
                    pcr = p["peer"]
                    if not (0 <= pcr < len(self.cr_slot)) or self.cr_slot[pcr] < 0:
                        continue
                    ch = (s, int(self.cr_slot[pcr]), 1 if str(p["op"]).lower() == "recv" else 0)
                    st = self.p2p.get(ch)
                    if st is None:
                        if len(self.p2p) >= MAX_CHANNELS:
                            continue
                        st = self.p2p[ch] = [-1, -1, 0, 0]
                    if p["started"] > st[0]:
                        st[0] = p["started"]
                        moved.append(s)
                    if p["completed"] > st[1]:
                        st[1] = p["completed"]
                        st[2] = st[3] = 0
                        moved.append(s)
                    if st[0] > st[1] and st[2] == 0:
                        st[2] = now_ns
        if moved:  # nothing moved: the comm's counters, and what follows from them, stand
            self._advanced_at(sorted(set(moved)), now_ns)
            self._d_update(now_ns, now_ns)

    # --- windows ----------------------------------------------------------------------
    def _advance(self) -> list[tuple[int, int]]:
        """Move the frontier over ready instances; returns the windows that closed."""
        closed: list[tuple[int, int]] = []
        while self.frontier <= self.max_seq:
            f = self.frontier
            if self.max_seq - f >= self.rows:  # a jump past the ring: what lies between is gone
                if f > self.win_start:
                    closed.append((self.win_start, f))
                self.dropped["instances_skipped"] += 1
                self.frontier = self.win_start = self.max_seq - self.rows // 2
                self.win_anchor = 0
                continue
            seqs = np.arange(f, self.max_seq + 1)
            rows = seqs % self.rows
            ok = (self.tag[rows] == seqs) & (self.en[rows] != 0).all(axis=1)
            nready = len(ok) if ok.all() else int(np.argmin(ok))
            if nready == 0:
                if self.max_seq < f + self.rows // 2:
                    break
                self.dropped["instance_incomplete"] += 1  # never completed on every member in time
                if f > self.win_start:
                    closed.append((self.win_start, f))
                self.frontier = self.win_start = f + 1
                self.win_anchor = 0
                continue
            anchors = self.st[rows[:nready]].min(axis=1)
            ends = np.arange(f + 1, f + nready + 1)
            wn = self.window_ns()
            i0 = 0
            while i0 < nready:
                ws = self.win_start
                base = self.win_anchor if self.win_anchor > 0 else int(self.st[ws % self.rows].min())
                cnt = ends[i0:] - ws
                enough = cnt >= (1 if self.win_anchor > 0 else 2)
                cond = (cnt >= min(2 * self.window, self.rows // 2)) | (enough & (anchors[i0:] - base >= 0.9 * wn))
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

    def entered_at(self, seq: int, slots: np.ndarray) -> list[int]:
        """When each of `slots` entered instance `seq`, on its own clock (0: not known)."""
        row = seq % self.rows
        if self.etag[row] != seq:
            return [0] * len(slots)
        return self.et[row, slots].tolist()

    def device_start(self, seq: int) -> int:
        """When the first member whose entry into instance `seq` was seen queued (a host
        enqueue) was then seen started on its device, on its clock (0: none seen so). Until a
        device starts it, nobody waits in it: a host enqueues calls ahead of its device."""
        row = seq % self.rows
        if self.etag[row] != seq or self.edev[row] == NO_TIME:
            return 0
        return int(self.edev[row])

    def queued_in(self, seq: int, slots: np.ndarray) -> np.ndarray:
        """Of `slots` (members that entered instance `seq`), those known only to have queued it
        (a host enqueue) while another member is known inside it (its device started it, or
        its host blocked in it): their devices have not reached it. Empty when no member is
        known inside (a probe without device entries tells nothing of it), and never a member
        whose probe observes completions on the host (`host_done`) where no such member of
        the comm ever wrote a device entry: that probe writes none, so its device may well be
        inside. The islands generator's two sites under such
        probes, beside two GPU-timed sites in a 7-10 s WAN all-reduce, were named P0 each outer
        round: "GPU never started AllReduce", a kernel before it said to hold their GPUs."""
        row = seq % self.rows
        if self.etag[row] != seq or not len(slots):
            return slots[:0]
        real = self.ereal[row, slots]
        if not real.any():
            return slots[:0]
        if HOST_PROBES_UNKNOWN and not (self.host_done & self.dev_entry).any():
            # (a probe that observes completions on the host and does write device entries, seen
            # on a member of this comm, tells its members' devices apart: not this one's kind)
            return slots[~real & ~self.host_done[slots]]
        return slots[~real]

    def not_running(self, seq: int, slots: np.ndarray) -> bool:
        """Whether instance `seq`, which `slots` entered, is known not to run yet, where the
        job's probe writes device entries (`CommStage.wait_report`): some of them only queued
        it on their hosts, and none observes completions on the host. A call its members only
        queued waits behind the work before it on their streams, not in its transport."""
        row = seq % self.rows
        if not len(slots) or self.host_done[slots].any():
            return False
        return bool(self.etag[row] == seq and not self.ereal[row, slots].all())

    def op_of(self, seq: int) -> str:
        row = seq % self.rows
        if self.etag[row] == seq and self.eop[row]:
            return wire.op_name(int(self.eop[row]))
        return "collective"

    def window_ns(self) -> float:
        """Event time a window covers at least."""
        p50, _ = self.gap_quantiles()
        return max(WINDOW_MIN_NS, p50)
