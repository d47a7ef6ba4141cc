"""Window features of one communicator (stage 1), from timed records only.

A collective window is a run of instances completed by every member. Where every
member's times are real (GPU_TIMED or host-blocking; `CommState.ok`), the window gives:

- clock offsets: collectives complete at nearly the same instant on every member, so a
  member's offset is the median over the window of its completion minus the instance's
  median completion, blended into a running estimate (robust, follows slow drift); one
  that moved by `OFFSET_STEP_NS` or more since is taken at once (its clock was set anew:
  drift never moves it that far in a window);
- `lag_ms`: mean clock-corrected arrival lag against the instance's median arrival (the
  heatmap's lateness), `last_share`: share of instances a member arrived last;
- `inside`: the share of the window's wall time each member spent inside this comm's calls
  (durations on its own clock: free of skew). Stage 2 adds a rank's shares over its comms:
  what is left is the time it computed (`slow.py`);
- `xfer_ms`: median time from the last arrival to completion (slow links).
- `busy_stall`: per member, [instances, ms] of its stalls in the window: gaps that exceed the
  other members' for the same instance by `STALL_MIN_NS` and `STALL_TYPICAL` x the typical
  gap (a data loader stuck once in a while, outside every call: its peers wait inside the
  next one), None without any.

A P2P window (send/recv only) covers event time instead: per member the share of the
window spent inside timed recv calls (waiting for data; a send is posted and overlaps the
sender's compute, so it is not counted).

Host-enqueue records give no timing: a window without timed instances says so
(`timed` 0) and carries no `inside`. Where their probe observed each member's completion
(ENQUEUED and COMPLETED), the window says which member the comm waited for to *enqueue*
(`enqueue_gate`): hosts run ahead of their GPUs, so a call completes long after its members
enqueued it, on each member's own clock alike; a member whose host is the bottleneck (CPU
contention, a launch-bound model) enqueues last, and the call completes at once after, while
the others enqueued it long before (`gate`, `gate_n`, `turn_ms`).
"""

from __future__ import annotations

import numpy as np

from commwatch.streams.detect.comm_state import RECV_BWD, CommState
from commwatch.streams.detect.medians import median as _median
from commwatch.streams.detect.medians import EXACT_OTHERS, OTHERS, nanmedian, others_median

OFFSET_BLEND = 0.3
OFFSET_STEP_NS = 50_000_000
MIN_GAP_NS = 50_000  # shorter gaps between calls are not compute (back-to-back calls)
MIN_GAPS = 1  # a member's busy figures need this many gaps in the window (stage 2 pools windows)
OUTLIER = 3.0  # an instance whose gap is over this many times the typical one holds waits, not compute
TYPICAL_ROWS = 4  # a window of fewer instances takes the typical gap of the comm's last window of more (`_busy_stats`)
STEADY_RATIO = 1.25  # an instance's gap this much over the others' is slow (`busy_steady`) ...
STEADY_MIN = 6  # ... counted over this many instances of the window at least (a share) ...
ALL_SLOW_MIN = 2  # ... or, under that, clearly slow in every one of this many at least (1.0)
NOISE_SIGMAS = 4.0  # clearly slow: this many times the window's spread of ratios over 1 (`_clear_ratio`)
TAIL_MIN = 4  # a run of slow instances ending the window (`busy_tail`) counts from this many ...
TAIL_SHARE = 0.25  # ... and this share of the window's counted instances ...
TAIL_STEADY = 0.8  # ... slow in this share of them, after instances slow in at most the rest's share
P2P_CLASSES = 16  # P2P compute intervals: the kinds of the calls before and after the gap
MOST_VALID = 0.5  # an instance counts in the busy figures where more than this share of members had a gap in it
STALL_MIN_NS = 100_000_000  # a member's gap this much over the other members' for the same instance ...
STALL_TYPICAL = 3.0  # ... and this many times the window's typical gap is a stall (`busy_stall`)
GATE_RATIO = 0.25  # a member's enqueue-to-completion under this share of the other members' ...
GATE_MIN_NS = 50_000_000  # ... and this much shorter: the call waited for its host (`enqueue_gate`)
UNEVEN = 0.1  # members' message sizes this far apart are reported (`_bytes_ratio`)
PERMUTE_MIN = 3  # members of a P2P comm that may be a collective permute (two are a pipeline's pair)


def _r(a: np.ndarray, nd: int = 4) -> list[float]:
    return np.round(a, nd).tolist()


def window_report(state: CommState, a: int, b: int, now_ns: int) -> dict | None:
    """The report of instances [a, b) of `state`; None when there is nothing to compare."""
    n = state.n
    rows = np.arange(a, b) % state.rows
    ready = (state.tag[rows] == np.arange(a, b)) & (state.en[rows] != 0).all(axis=1)
    rows = rows[ready]
    k = len(rows)
    if n < 2 or k == 0:
        return None
    timed = state.ok[rows].all(axis=1)
    kt = int(timed.sum())
    rep = {"type": "window", "job": state.job, "ts_ns": int(now_ns), "comm": state.hex, "seq": [int(a), int(b)],
           "instances": int(k), "timed": kt, "ranks": state.rank_of.tolist(), "nodes": state.nodes()}
    if kt == 0:
        rep.update(enqueue_gate(state, rows))
        return rep
    rows = rows[timed]
    start = state.st[rows].astype(np.float64)
    end = state.en[rows].astype(np.float64)
    w_off = _median(end - _median(end, 1)[:, None], 0)
    if state.offset_windows == 0:
        state.offsets[:] = w_off
    else:
        moved = w_off - state.offsets
        state.offsets += np.where(np.abs(moved) >= OFFSET_STEP_NS, 1.0, OFFSET_BLEND) * moved
    state.offset_windows += 1
    cs = start - state.offsets
    ce = end - state.offsets
    lag = cs - _median(cs, 1)[:, None]
    last = np.argmax(cs, axis=1)
    done = _median(ce, 1)
    anchor_end = float(done[-1])
    anchor_start = state.prev_win_anchor if state.prev_win_anchor > 0 else float(cs[0].min())
    state.prev_win_anchor = anchor_end
    span = anchor_end - anchor_start
    if span <= 0:
        span = float(ce.max() - cs.min())
    span = max(span, 1.0) * kt / k  # mixed windows: the timed instances' share of the span
    inside = (end - start).sum(axis=0) / span
    busy, nbusy, share, steady, med, tail, stall = _collective_busy(state, a, b, span)
    rep.update({
        "span_ns": int(span),
        "lag_ms": _r(lag.mean(axis=0) / 1e6, 3),
        "last_share": _r(np.bincount(last, minlength=n) / kt, 3),
        "inside": _r(np.minimum(inside, 1.0)),
        "offset_ms": _r(state.offsets / 1e6, 3),
        "xfer_ms": round(float(_median(done - cs.max(axis=1), 0)) / 1e6, 3),
        "bytes": float(_median(state.bytes[rows], 0)),
        "busy_ms": busy, "busy_n": nbusy, "busy_share": share, "busy_steady": steady, "busy_med_ms": med,
        "busy_tail": tail, "busy_stall": stall,
    })
    heavy = _bytes_ratio(state)
    if heavy is not None:
        rep["bytes_ratio"] = heavy
    return rep


def _bytes_ratio(state: CommState) -> list[float] | None:
    """Each member's mean all-to-all size since the last window over the members' median, where
    they differ by `UNEVEN` or more (a recommender's hot tables, a hot expert's returns), else
    None; the sums start afresh. Only all-to-alls: every other collective has its members move
    equal counts, and a mean over a window of mixed calls (an FSDP comm's 64 MiB
    reduce-scatters and 4-byte all-reduces) differs by which of them fell in it: the third
    generator's 1.3x GPU read as carrying 1.5x its peers' data."""
    with np.errstate(all="ignore"):
        mean = state.sent / state.sent_n
    state.sent[:] = 0.0
    state.sent_n[:] = 0
    ok = np.isfinite(mean) & (mean > 0)
    if ok.sum() < 2:
        return None
    mid = float(np.median(mean[ok]))
    ratio = np.where(ok, mean / mid, 1.0)
    return _r(ratio, 3) if float(np.abs(ratio - 1.0).max()) >= UNEVEN else None


def enqueue_gate(state: CommState, rows: np.ndarray) -> dict:
    """Who the comm's calls waited for, by host-enqueue records: per instance whose every
    member's completion was observed, each member's *turn* (its probe saw the call complete
    this long after its host enqueued it, both on its own clock: no offset enters) against the
    other members'. A member whose turn is under `GATE_RATIO` of theirs and `GATE_MIN_NS`
    shorter *gated* the instance: the call ran as soon as its host enqueued it, while theirs
    had run ahead. Returns per member the share of instances it gated (`gate`), how many
    were counted (`gate_n`) and its median turn (`turn_ms`), or nothing when none counts.
    Generator E's rank whose CPU a neighbour shares (TP 4 x PP 2 x DP 4): 4-6 ms against
    350 ms in its TP comm, in every instance from its onset; before it, nobody's under 0.9 of
    the others'. Only members whose probe is host-enqueue (`CommState.host_done`) are
    compared: a GPU-timed member's turn is its time inside the call, not since its host
    enqueued it (its gate share is 0, its turn None). The twentieth generator's job with
    GPU-timed and host-enqueue nodes in one data-parallel comm had every GPU-timed rank's
    host named "the bottleneck", 675 ms before its peers, in its first seconds."""
    host = np.flatnonzero(state.host_done)
    if len(host) < 2:
        return {}
    st = state.st[rows][:, host]
    en = state.en[rows][:, host]
    seen = ((en > 1) & (st > 1)).all(axis=1)
    if not seen.any():
        return {}
    turn = (en[seen] - st[seen]).astype(np.float64)  # instances x host-enqueue members
    others = others_median(turn.T[None, :, :])[0].T
    gated = (turn < GATE_RATIO * others) & (others - turn >= GATE_MIN_NS)
    gate = np.zeros(state.n)
    gate[host] = gated.mean(axis=0)
    turns: list[float | None] = [None] * state.n
    for i, t in zip(host.tolist(), _r(_median(turn, 0) / 1e6, 1)):
        turns[i] = t
    return {"gate": _r(gate, 3), "gate_n": int(len(turn)), "turn_ms": turns}


def _busy_stats(gaps: np.ndarray, valid: np.ndarray, span: float, comm: CommState | None = None
                ) -> tuple[list, list[int], list[float], list, list, list, list]:
    """Per member (columns): the sum of its compute gaps (ms, None without any) and their
    count, leaving out the instances (rows) whose gap is over `OUTLIER` x the typical one, by
    the members' median (a gap that spans an iteration's end holds waits in other comms); and
    the sum of all its valid gaps over `span`. Which instances count is decided for all
    members at once: every member is measured over the same work (a cut per member, at a
    length where gaps of two kinds meet, would take one kind for one member and not for
    another: a bias of tens of percent between members doing the same work). So an instance
    counts only where most members had a gap in it (`MOST_VALID`): where the others' calls
    came back to back, a member's lone gap is its lateness, not compute they did too
    (generator C's healthy 512-rank job drawn with 19000: data-parallel comms with one 33 ms
    gap an iteration, and one back to back; now and then one member had a ~100 ms gap where
    its peers had none, in two windows in a row for six ranks of a node: named P2 '66 %
    slower'). Last, per
    member, the share of those instances in which its gap is `STEADY_RATIO` x the others'
    (None under `STEADY_MIN` of them): a slowdown lengthens every gap, a pause one. And the
    median of its counted gaps (ms, None without any): a slower device lengthens them all,
    waits in other comms that fall in some gaps (a stage waiting on its neighbour) do not
    move it. And the slowdown that began inside the window, if any (`_tail`), and its stalls
    (`_stalls`). A window of fewer than `TYPICAL_ROWS` instances cannot tell its typical
    gap: it takes the comm's last one (`CommState.gap_typical`) where that is shorter
    (generator E's TP 8 x PP 4 job drawn with 1: its TP comm's windows held seven instances
    of an iteration, then one alone whose gap spans the iteration's end, the pipeline's
    drain, 870 ms against 120 ms, alike for every member: its 1.3x rank's windows alternated
    1.35x and 1.01x, and its streak never reached two)."""
    with np.errstate(invalid="ignore"):
        allg = np.where(valid, gaps, np.nan)
        row = nanmedian(allg, 1)
        typical = nanmedian(row, 0) if len(row) else np.nan
        cut = typical
        if comm is not None and len(row) >= TYPICAL_ROWS and np.isfinite(typical):
            comm.gap_typical = float(typical)
        elif comm is not None and len(row) < TYPICAL_ROWS and comm.gap_typical > 0:
            cut = min(typical, comm.gap_typical)
        keep = valid & ((row <= OUTLIER * cut) & (valid.sum(axis=1) > MOST_VALID * valid.shape[1]))[:, None]
    stall = _stalls(allg, row, typical)
    cnt = keep.sum(axis=0)
    sums = np.where(keep, gaps, 0.0).sum(axis=0)
    enough = (valid.sum(axis=0) >= MIN_GAPS).tolist()
    sums = [round(s / 1e6, 4) if e else None for s, e in zip(sums.tolist(), enough)]
    cnt = [c if e else 0 for c, e in zip(cnt.tolist(), enough)]
    total = np.where(valid, gaps, 0.0).sum(axis=0) / max(span, 1.0)
    kept = np.where(keep, gaps, np.nan).T  # members x instances
    with np.errstate(invalid="ignore"):
        ratio = kept / others_median(kept)
        slow = ratio >= STEADY_RATIO
    over = slow.sum(axis=1).tolist()
    med = [round(m / 1e6, 4) if c else None for m, c in zip(nanmedian(kept, 1).tolist(), cnt)]
    few = [ALL_SLOW_MIN <= c < STEADY_MIN and o == c for o, c in zip(over, cnt)]
    if not any(few) and max(over, default=0) < TAIL_MIN:  # no member slow enough for either (most windows)
        steady = [round(o / c, 3) if c >= STEADY_MIN else None for o, c in zip(over, cnt)]
        return sums, cnt, _r(np.minimum(total, 1.0)), steady, med, [None] * len(cnt), stall
    thr = _clear_ratio(ratio)
    with np.errstate(invalid="ignore"):
        every = (ratio >= thr[:, None]).sum(axis=1).tolist()
    steady = [round(o / c, 3) if c >= STEADY_MIN else 1.0 if f and e == c else None
              for o, e, c, f in zip(over, every, cnt, few)]
    return sums, cnt, _r(np.minimum(total, 1.0)), steady, med, _tail(ratio, slow, thr, cnt), stall


def _stalls(gaps: np.ndarray, row: np.ndarray, typical: float) -> list:
    """Per member (columns of `gaps`, instances x members, nan where not valid), its stalls in
    the window as [instances, ms over the other members' gaps], None without any: a gap
    `STALL_MIN_NS` and `STALL_TYPICAL` x the typical gap (`typical`, the members' median
    per instance is `row`) longer than the other members' median for the same instance.
    A rank stuck outside every call for a while (its data loader) has one such gap in each
    comm it is in; its peers wait inside their next call (their gaps stay short), and a
    pause of every member (a garbage collection at one iteration) stretches all gaps alike.
    Counted over every instance, also those the busy figures leave out (a stall of one of
    two members lifts the instance's median)."""
    n = gaps.shape[1]
    none = [None] * n
    if n < 2 or not len(row) or not np.isfinite(typical):
        return none
    need = max(STALL_MIN_NS, STALL_TYPICAL * typical)
    with np.errstate(invalid="ignore"):
        if not (np.nanmax(np.where(np.isfinite(gaps), gaps, -np.inf), axis=1) - np.nanmin(
                np.where(np.isfinite(gaps), gaps, np.inf), axis=1) >= need).any():
            return none  # no instance with a member that far over another (most windows)
        over = gaps.T - others_median(gaps.T)  # members x instances
        hit = over >= need
    if not hit.any():
        return none
    cnt = hit.sum(axis=1).tolist()
    ms = np.where(hit, over, 0.0).sum(axis=1) / 1e6
    return [[c, round(float(m), 3)] if c else None for c, m in zip(cnt, ms.tolist())]


def _clear_ratio(ratio: np.ndarray) -> np.ndarray:
    """Per member, the ratio over which its instance is clearly slow, for a decision on few
    instances (a run ending the window, all of 2 to 5): `STEADY_RATIO`, or `NOISE_SIGMAS`
    times the spread of the other members' ratios around 1 (robust; in a noisy job it is
    more: intervals alone make runs of slow-looking ones). In a small group the member's own
    ratios are left out of its spread (a slow member would widen it); in a large one they
    barely move it."""
    dev = np.abs(ratio - 1.0)
    n = len(dev)
    if n > EXACT_OTHERS:
        fine = dev[np.isfinite(dev)]
        sigma = np.full(n, 1.4826 * float(np.median(fine)) if len(fine) else 0.0)
    elif n >= 2:
        others = dev[OTHERS[n]].reshape(n, -1)  # per member, the other members' deviations
        sigma = np.nan_to_num(1.4826 * nanmedian(others, 1))
    else:
        sigma = np.zeros(n)
    return np.maximum(STEADY_RATIO, 1.0 + NOISE_SIGMAS * sigma)


def _tail(ratio: np.ndarray, slow: np.ndarray, clear: np.ndarray, cnt: list[int]) -> list:
    """Per member (rows of `ratio`: its gap over the others' per instance, nan where not
    counted), the slowdown that began inside the window, as [instances, their mean ratio]:
    the longest run of instances ending the window, at least `TAIL_MIN` and `TAIL_SHARE` of
    the member's counted ones, slow (`slow`) in `TAIL_STEADY` of them, after instances slow
    in at most 1 - `TAIL_STEADY` (at least one), whose median ratio is clearly over the
    spread of every member's ratios before it (`NOISE_SIGMAS`; with fewer than 2 x
    `TAIL_MIN` of them, over `clear`); else None. A slowdown lengthens every gap from its onset on
    (but for an odd one); a pause lengthens one; a noisy member makes runs of slow-looking
    gaps as wide as its spread."""
    k = ratio.shape[1]
    out: list = [None] * len(cnt)
    if k < TAIL_MIN + 1:
        return out
    finite = np.isfinite(ratio)
    cum_n = np.concatenate([np.zeros((len(cnt), 1)), np.cumsum(finite, axis=1)], axis=1)  # before instance j
    cum_s = np.concatenate([np.zeros((len(cnt), 1)), np.cumsum(slow & finite, axis=1)], axis=1)
    tot_n, tot_s = cum_n[:, -1:], cum_s[:, -1:]
    suf_n, suf_s = tot_n - cum_n, tot_s - cum_s
    starts = np.concatenate([slow & finite, np.zeros((len(cnt), 1), bool)], axis=1)  # a run begins slow
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = (starts & (cum_n >= 1) & (cum_s <= (1 - TAIL_STEADY) * cum_n) & (suf_n >= TAIL_MIN)
              & (suf_n >= TAIL_SHARE * tot_n) & (suf_s >= TAIL_STEADY * suf_n))
    for i in np.nonzero(ok.any(axis=1))[0].tolist():
        j = int(np.argmax(ok[i]))  # the earliest onset: the longest run
        before, after = ratio[:, :j][finite[:, :j]], ratio[i, j:][finite[i, j:]]
        need = (1.0 + NOISE_SIGMAS * 1.4826 * float(np.median(np.abs(before - 1.0)))
                if len(before) >= 2 * TAIL_MIN else float(clear[i]))
        if float(np.median(after)) >= max(need, STEADY_RATIO):
            out[i] = [len(after), round(float(after.mean()), 3)]
    return out


def _collective_busy(state: CommState, a: int, b: int, span: float
                     ) -> tuple[list, list[int], list[float], list, list, list, list]:
    """Busy gaps of a collective window: per member, from the end of instance k to its entry
    into k + 1 (its own clock: no skew), for consecutive instances of [a - 1, b) that every
    member completed with real times. Peers do the same work between two instances of a
    comm, so a member computing slower has longer gaps; a victim waits inside the calls."""
    seqs = np.arange(max(a - 1, 0), b)
    rows = seqs % state.rows
    ok = (state.tag[rows] == seqs) & state.ok[rows].all(axis=1)
    pair = ok[:-1] & ok[1:]
    if not pair.any():
        return [None] * state.n, [0] * state.n, [0.0] * state.n, [None] * state.n, [None] * state.n, [None] * state.n, \
            [None] * state.n
    r0, r1 = rows[:-1][pair], rows[1:][pair]
    gaps = (state.st[r1] - state.en[r0]).astype(np.float64)
    return _busy_stats(gaps, gaps >= MIN_GAP_NS, span, state)


def p2p_reports(state: CommState, now_ns: int, width_ns: int, lag_ns: int) -> list[dict]:
    """The P2P windows `[a, a + width_ns)` (aligned to multiples of `width_ns`) that ended
    at least `lag_ns` ago: per member the share of the window spent inside timed recvs,
    each recv clipped to the window (a recv that waited across a window's edge counts in
    each window for its part; waiting `lag_ns` before reporting lets most of them complete)."""
    out: list[dict] = []
    if not state.p2p_iv and not state.p2p_untimed:
        return out
    if state.p2p_win_start == 0:
        first = min(int(iv[1].min()) for iv in state.p2p_iv) if state.p2p_iv else now_ns
        state.p2p_win_start = first // width_ns * width_ns
    if now_ns - state.p2p_win_start > 8 * width_ns + lag_ns:  # far behind (idle, or a jump): skip ahead
        state.p2p_win_start = (now_ns - lag_ns) // width_ns * width_ns - width_ns
    if state.p2p_iv:
        slot, t0, t1, kind, peer, seq, nb = (np.concatenate([iv[k] for iv in state.p2p_iv]) for k in range(7))
    else:
        slot = t0 = t1 = kind = peer = seq = nb = np.zeros(0, np.int64)
    recv = kind <= RECV_BWD
    while state.p2p_win_start + width_ns + lag_ns <= now_ns:
        a = state.p2p_win_start
        b = a + width_ns
        over = np.where(recv, np.clip(np.minimum(t1, b) - np.maximum(t0, a), 0, None), 0).astype(np.float64)
        inside = np.bincount(slot, weights=over, minlength=state.n)[: state.n]
        calls = int(np.count_nonzero(over))
        rep = {"type": "p2p_window", "job": state.job, "ts_ns": int(b), "comm": state.hex, "span_ns": int(width_ns),
               "ranks": state.rank_of.tolist(), "calls": calls, "untimed": int(state.p2p_untimed)}
        if calls:
            rep["inside"] = _r(np.minimum(inside / width_ns, 1.0))
            rep["crank"] = state.crank.tolist()
            rep.update(_p2p_busy(state.n, slot, t0, t1, kind, a, b, width_ns))
            rep["links"] = _transfers(state, slot, peer, seq, t1 - t0, recv, t1, a, b, nb)
            permute = _permute_busy(state, slot, t0, t1, recv, peer, seq, a, b, width_ns)
            if permute is not None:
                rep["permute"] = permute
        out.append(rep)
        state.p2p_untimed = 0
        state.p2p_win_start = b
    # keep what a later window needs: calls not over, and each member's last recv before it
    keep = t1 > state.p2p_win_start - width_ns
    state.p2p_iv = [(slot[keep], t0[keep], t1[keep], kind[keep], peer[keep], seq[keep], nb[keep])] if keep.any() else []
    state.p2p_iv_n = int(keep.sum())
    return out


def _permute_busy(state: CommState, slot: np.ndarray, t0: np.ndarray, t1: np.ndarray, recv: np.ndarray,
                  peer: np.ndarray, seq: np.ndarray, a: int, b: int, span: float) -> dict | None:
    """A collective permute's window as a collective's busy figures (`_busy_stats`), or None
    where the comm is no collective permute. In a collective permute (JAX's ring attention,
    XLA's collective-permute; a ring of grouped send/recv) every member sends to one other
    and receives from one other in each instance, at once: instance k is every member's k-th
    send and k-th recv (P2P seqs count per peer and kind, wire spec section 2), and its
    members do the same work between instances, as a collective's do. Judged like a
    pipeline's channels instead (each member against the same comm rank of other comms), a
    ring's intervals, which hold every other comm's calls in between, vary by tens of
    percent between healthy rings, and a slow GPU's ring neighbours, waiting inside the
    permute for it, then reached the job's other comms late and were named with it. A comm
    is one once a window shows every member sending to one other (each its own), never where
    a member sends to two (a pipeline's middle stage sends forward and back): kept in
    `CommState.permute`. Per member, its instance runs from its earlier entry to its later
    completion of the two calls; a gap is from its completion of instance k to its entry
    into k + 1 (its own clock), for k + 1 entered in [a, b)."""
    n = state.n
    if n < PERMUTE_MIN or state.permute is False:
        return None
    sends = np.unique(slot[~recv] * n + peer[~recv])
    recvs = np.unique(slot[recv] * n + peer[recv])
    if len(np.unique(sends // n)) != len(sends) or len(np.unique(recvs // n)) != len(recvs):
        state.permute = False  # a member sends to (or receives from) two others
        return None
    if state.permute is None and (len(sends) != n or len(np.unique(sends % n)) != n):
        return None  # not every member seen sending yet, each to its own peer
    state.permute = True
    empty = {"busy_ms": [None] * n, "busy_n": [0] * n, "busy_share": [0.0] * n}
    if not len(seq):
        return empty
    q0 = int(seq.min())
    cells = (int(seq.max()) - q0 + 1) * n
    if cells > 64 * len(seq) + 64 * n:  # seqs far apart (a member far behind): nothing to pair
        return empty
    key = (seq - q0) * n + slot
    entry = np.full(cells, np.iinfo(np.int64).max, np.int64)
    end = np.zeros(cells, np.int64)
    calls = np.bincount(key, minlength=cells)
    np.minimum.at(entry, key, t0)
    np.maximum.at(end, key, t1)
    entry, end, calls = entry.reshape(-1, n), end.reshape(-1, n), calls.reshape(-1, n)
    whole = (calls >= 2).all(axis=1)  # every member's send and recv of the instance completed
    pair = np.flatnonzero(whole[:-1] & whole[1:])
    pair = pair[((entry[pair + 1] >= a) & (entry[pair + 1] < b)).any(axis=1)]
    if not len(pair):
        return empty
    gaps = (entry[pair + 1] - end[pair]).astype(np.float64)
    busy, nbusy, share, steady, med, tail, stall = _busy_stats(gaps, gaps >= MIN_GAP_NS, span)
    return {"busy_ms": busy, "busy_n": nbusy, "busy_share": share, "busy_steady": steady, "busy_med_ms": med,
            "busy_tail": tail, "busy_stall": stall, "instances": len(pair)}


def _transfers(state: CommState, slot: np.ndarray, peer: np.ndarray, seq: np.ndarray, dur: np.ndarray,
               recv: np.ndarray, t1: np.ndarray, a: int, b: int, nbytes: np.ndarray) -> list[list]:
    """Per channel (receiver, sender) with recvs that ended in [a, b): the median transfer time
    of its messages, in ms, and their median size in bytes. A send k and its recv k each last
    their wait for the other plus the transfer; the later of the two waits for nothing, so the
    shorter of the two durations is the transfer, each timed on its own rank's clock (no
    offset between nodes in it, and no wait for a slow sender or receiver). `[rank, sender
    rank, ms, bytes]` each (`slow.py`: a channel whose messages vary in size, as a serving
    engine's prefill and decode activations and KV caches do, is judged against its size)."""
    r = np.flatnonzero(recv & (t1 >= a) & (t1 < b))
    s_ = np.flatnonzero(~recv)
    if not len(r) or not len(s_):
        return []
    n = max(state.n, 1)
    # (receiver, sender) channel and seq of every recv and send, a recv next to its send
    ch = np.concatenate([slot[r] * n + peer[r], peer[s_] * n + slot[s_]])
    sq = np.concatenate([seq[r], seq[s_]])
    idx = np.concatenate([r, s_])
    is_r = np.arange(len(idx)) < len(r)
    order = np.lexsort((~is_r, sq, ch))
    ch, sq, idx, is_r = ch[order], sq[order], idx[order], is_r[order]
    pair = np.flatnonzero((ch[1:] == ch[:-1]) & (sq[1:] == sq[:-1]) & is_r[:-1] & ~is_r[1:])
    if not len(pair):
        return []
    x = np.minimum(dur[idx[pair]], dur[idx[pair + 1]]).astype(np.float64)
    size = nbytes[idx[pair]]
    ch = ch[pair]
    order = np.lexsort((x, ch))
    ch, x = ch[order], x[order]
    uk, first, counts = np.unique(ch, return_index=True, return_counts=True)
    med = x[first + counts // 2]
    sz = size[order]
    so = np.lexsort((sz, ch))  # sizes sorted within each channel (its groups as `first` says)
    med_b = sz[so][first + counts // 2]
    ranks = state.rank_of
    return [[int(ranks[k // n]), int(ranks[k % n]), round(v / 1e6, 4), int(nb_)]
            for k, v, nb_ in zip(uk.tolist(), med.tolist(), med_b.tolist())]


def _p2p_busy(n: int, slot: np.ndarray, t0: np.ndarray, t1: np.ndarray, kind: np.ndarray, a: int, b: int,
              span: float) -> dict:
    """Compute intervals of a P2P window: per member, the gaps between its timed P2P calls
    (outside every one of them: their times are waits, wire spec section 1) that end in
    [a, b): the compute of a pass (1F1B receives, computes, sends). Kept apart by class (the
    kinds of the calls before and after the gap: `P2P_CLASSES` = 4 x 4), so the same work is
    compared with the same work whatever mix of passes a window holds; per class its shortest
    in the window (a gap across an iteration's end holds waits in other comms, never less)."""
    order = np.lexsort((t0, slot))
    es, e0, e1, ek = slot[order], t0[order], t1[order], kind[order]
    same = np.zeros(len(es), bool)
    same[1:] = es[1:] == es[:-1]
    if not len(es):
        return {"busy_cls_ms": [[None] * n] * P2P_CLASSES, "busy_cls_n": [[0] * n] * P2P_CLASSES,
                "busy_share": [0.0] * n}
    # the latest end among a member's calls so far (their union): time outside every call is
    # a gap; a running max that starts afresh at each member (lifted by a step per member)
    rel = e1 - e1.min()
    lift = np.cumsum(~same) * (int(rel.max()) + 1)
    ends = np.maximum.accumulate(rel + lift) - lift + e1.min()
    sel = same & (e0 >= a) & (e0 < b)
    idx = np.flatnonzero(sel)
    gap = (e0[idx] - ends[idx - 1]).astype(np.float64)
    cls = ek[idx - 1] * 4 + ek[idx]
    ok = gap >= MIN_GAP_NS
    low = np.full(P2P_CLASSES * n, np.inf)
    np.minimum.at(low, cls[ok] * n + es[idx[ok]], gap[ok])  # per class and member, its shortest
    cnt = np.bincount(cls[ok] * n + es[idx[ok]], minlength=P2P_CLASSES * n)
    low = low.reshape(P2P_CLASSES, n)
    share = np.bincount(es[idx[ok]], weights=gap[ok], minlength=n)[:n] / max(span, 1.0)
    ms = np.where(np.isfinite(low), low / 1e6, np.nan)
    return {"busy_cls_ms": [[None if v != v else round(v, 4) for v in row] for row in ms.tolist()],
            "busy_cls_n": cnt.reshape(P2P_CLASSES, n).tolist(), "busy_share": _r(np.minimum(share, 1.0))}
