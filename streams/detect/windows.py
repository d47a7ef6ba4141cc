"""Window features of one communicator: per-rank arrival lag, clock-corrected (stage 1).

Collectives complete at nearly the same instant on every member, so each rank's clock
offset is the median, over the window, of its completion time minus the instance's
median completion time; it is blended into a running estimate (robust to single bad
instances, following slow drift). Entry times corrected by the offsets give each rank's
arrival lag against its peers, free of clock skew.

Per rank and window: `lag_ms` (mean lag against the instance median), `last_share`
(share of instances it arrived last), `impact` (time all peers waited on it alone, i.e.
last arrival minus second-last, summed, over the window's span: the share of wall time it
cost), `own` (time it waited on others, over the span: high for victims) and `slowdown`
(median over instances of its lateness over the time its peers took since the previous
instance: 0.6 for a rank computing 1.6x slower, however idle the comm is otherwise).
"""

from __future__ import annotations

import numpy as np

from commwatch.streams.detect.comm_state import CommState

OFFSET_BLEND = 0.3
MIN_INTERVAL_NS = 100_000.0  # shorter gaps between instances are not compute: no ratio
SLOWDOWN_MIN_INSTANCES = 4


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
    rows = np.arange(a, b) % state.slots
    ready = (state.st[rows] > 0).all(axis=1) & (state.en[rows] > 0).all(axis=1)
    rows = rows[ready]
    k = len(rows)
    if n < 2 or k == 0:
        return None
    start = state.st[rows].astype(np.float64)
    end = state.en[rows].astype(np.float64)
    dev = end - _median(end, 1)[:, None]
    w_off = _median(dev, 0)
    if state.offset_windows == 0:
        state.offsets[:] = w_off
    else:
        state.offsets += OFFSET_BLEND * (w_off - state.offsets)
    state.offset_windows += 1
    cs = start - state.offsets
    ce = end - state.offsets
    lag = cs - _median(cs, 1)[:, None]
    part = np.partition(cs, n - 2, axis=1)
    smax, second = part[:, -1], part[:, -2]
    last = np.argmax(cs, axis=1)
    lastwait = smax - second
    wait = smax[:, None] - cs
    anchor_end = float(cs[-1].min())
    anchor_start = state.prev_win_anchor if state.prev_win_anchor > 0 else float(cs[0].min())
    span = anchor_end - anchor_start
    if span <= 0:
        span = float(ce.max() - cs.min())
    span = max(span, 1.0)
    state.prev_win_anchor = anchor_end
    done = _median(ce, 1)
    xfer = done - smax
    slowdown = _slowdown(done, second, lastwait, last, n)
    return {
        "type": "window",
        "job": state.job,
        "ts_ns": int(now_ns),
        "comm": state.hex,
        "seq": [int(a), int(b)],
        "instances": int(k),
        "span_ns": int(span),
        "ranks": state.rank_of.tolist(),
        "lag_ms": _r(lag.mean(axis=0) / 1e6, 3),
        "last_share": _r(np.bincount(last, minlength=n) / k, 3),
        "impact": _r(np.bincount(last, weights=lastwait, minlength=n) / span),
        "own": _r(wait.sum(axis=0) / span),
        "slowdown": _r(slowdown),
        "xfer_ms": round(float(_median(xfer, 0)) / 1e6, 3),
        "bytes": float(_median(state.bytes[rows], 0)),
        "nodes": state.nodes(),
    }


def _slowdown(done: np.ndarray, second: np.ndarray, lastwait: np.ndarray, last: np.ndarray, n: int) -> np.ndarray:
    """Per rank, the median over instances of how much longer it took than its peers to get
    from the previous instance's completion to this one: its lateness over the peers' time
    (0 where it was not last). Bubbles and idle time do not dilute it, and one pause (a GC
    blip) moves one instance, not the median."""
    k = len(done)
    if k <= SLOWDOWN_MIN_INSTANCES:  # too few instances for a median to ignore one pause
        return np.zeros(n)
    interval = np.maximum(second[1:] - done[:-1], MIN_INTERVAL_NS)
    per = np.zeros((k - 1, n))
    per[np.arange(k - 1), last[1:]] = lastwait[1:] / interval
    return _median(per, 0)


def p2p_report(state: CommState, now_ns: int) -> dict | None:
    """Who waited on whom in SEND/RECV pairs since the last report (`p2p_waits.py`).

    Per rank: `impact` (the waiting it caused its peers, chained to the root, over the
    span and the number of peers: the share of an average peer's time lost on it) and
    `own` (the time it waited on others, over the span).
    """
    span = now_ns - state.p2p_win_start
    if state.p2p_win_start == 0 or span <= 0:
        state.p2p_win_start = now_ns
        state.p2p_waits.close(state.n)
        return None
    blame, own = state.p2p_waits.close(state.n)
    state.p2p_win_start = now_ns
    return {
        "type": "p2p_window",
        "job": state.job,
        "ts_ns": int(now_ns),
        "comm": state.hex,
        "span_ns": int(span),
        "ranks": state.rank_of.tolist(),
        "impact": _r(blame / span / max(1, state.n - 1)),
        "own": _r(own / span),
    }
