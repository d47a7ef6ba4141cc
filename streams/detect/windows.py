"""Window features of one communicator (stage 1), from timed records only.

A collective window is a run of instances completed by every member. Where every
member's times are real (GPU_TIMED or host-blocking; `CommState.ok`), the window gives:

- clock offsets: collectives complete at nearly the same instant on every member, so a
  member's offset is the median over the window of its completion minus the instance's
  median completion, blended into a running estimate (robust, follows slow drift);
- `lag_ms`: mean clock-corrected arrival lag against the instance's median arrival (the
  heatmap's lateness), `last_share`: share of instances a member arrived last;
- `inside`: the share of the window's wall time each member spent inside this comm's calls
  (durations on its own clock: free of skew). Stage 2 adds a rank's shares over its comms:
  what is left is the time it computed (`slow.py`);
- `xfer_ms`: median time from the last arrival to completion (slow links).

A P2P window (send/recv only) covers event time instead: per member the share of the
window spent inside timed recv calls (waiting for data; a send is posted and overlaps the
sender's compute, so it is not counted).

Host-enqueue records give no timing: a window without timed instances says so
(`timed` 0) and carries no `inside`.
"""

from __future__ import annotations

import numpy as np

from commwatch.streams.detect.comm_state import CommState

OFFSET_BLEND = 0.3


def _median(a: np.ndarray, axis: int) -> np.ndarray:
    """`np.median` along `axis` (no NaN handling), at a fraction of its fixed cost."""
    m = a.shape[axis]
    h = m // 2
    if m % 2:
        return np.partition(a, h, axis=axis).take(h, axis=axis)
    p = np.partition(a, (h - 1, h), axis=axis)
    return (p.take(h - 1, axis=axis) + p.take(h, axis=axis)) / 2


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
        return rep
    rows = rows[timed]
    start = state.st[rows].astype(np.float64)
    end = state.en[rows].astype(np.float64)
    w_off = _median(end - _median(end, 1)[:, None], 0)
    if state.offset_windows == 0:
        state.offsets[:] = w_off
    else:
        state.offsets += OFFSET_BLEND * (w_off - state.offsets)
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
    rep.update({
        "span_ns": int(span),
        "lag_ms": _r(lag.mean(axis=0) / 1e6, 3),
        "last_share": _r(np.bincount(last, minlength=n) / kt, 3),
        "inside": _r(np.minimum(inside, 1.0)),
        "offset_ms": _r(state.offsets / 1e6, 3),
        "xfer_ms": round(float(_median(done - cs.max(axis=1), 0)) / 1e6, 3),
        "bytes": float(_median(state.bytes[rows], 0)),
    })
    return rep


def p2p_reports(state: CommState, now_ns: int, width_ns: int, lag_ns: int) -> list[dict]:
    """The P2P windows `[a, a + width_ns)` (aligned to multiples of `width_ns`) that ended
    at least `lag_ns` ago: per member the share of the window spent inside timed recvs,
    each recv clipped to the window (a recv that waited across a window's edge counts in
    each window for its part; waiting `lag_ns` before reporting lets most of them complete)."""
    out: list[dict] = []
    if not state.p2p_iv and not state.p2p_untimed:
        return out
    if state.p2p_win_start == 0:
        first = min(int(t0.min()) for _, t0, _ in state.p2p_iv) if state.p2p_iv else now_ns
        state.p2p_win_start = first // width_ns * width_ns
    if now_ns - state.p2p_win_start > 8 * width_ns + lag_ns:  # far behind (idle, or a jump): skip ahead
        state.p2p_win_start = (now_ns - lag_ns) // width_ns * width_ns - width_ns
    if state.p2p_iv:
        slot, t0, t1 = (np.concatenate([iv[k] for iv in state.p2p_iv]) for k in range(3))
    else:
        slot = t0 = t1 = np.zeros(0, np.int64)
    while state.p2p_win_start + width_ns + lag_ns <= now_ns:
        a = state.p2p_win_start
        b = a + width_ns
        over = np.clip(np.minimum(t1, b) - np.maximum(t0, a), 0, None).astype(np.float64)
        inside = np.bincount(slot, weights=over, minlength=state.n)[: state.n]
        calls = int(np.count_nonzero(over))
        rep = {"type": "p2p_window", "job": state.job, "ts_ns": int(b), "comm": state.hex, "span_ns": int(width_ns),
               "ranks": state.rank_of.tolist(), "calls": calls, "untimed": int(state.p2p_untimed)}
        if calls:
            rep["inside"] = _r(np.minimum(inside / width_ns, 1.0))
            rep["crank"] = state.crank.tolist()
        out.append(rep)
        state.p2p_untimed = 0
        state.p2p_win_start = b
    keep = t1 > state.p2p_win_start
    state.p2p_iv = [(slot[keep], t0[keep], t1[keep])] if keep.any() else []
    state.p2p_iv_n = int(keep.sum())
    return out
