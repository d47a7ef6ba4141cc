"""Slow ranks and slow links from stage-1 window reports (stage 2, one job).

Per (comm, rank) the tracker keeps the latest window's *excess* over the rank's own
normal: for collectives the larger of `impact` (share of wall time its peers waited on it
alone) and `slowdown` (its median lateness over its peers' time between instances: not
diluted by pipeline bubbles, not moved by one pause); for SEND/RECV comms the waiting it
caused its pipeline, chained to the root (`p2p_waits.py`); and `own` (share of wall time it
waited on others). The normal is learned online, only from windows that do not look
anomalous, so a fault does not teach itself as normal (P2P comms learn their first windows
as normal: a pipeline's bubbles are structural waits); a river `GaussianScorer` per
(comm, rank) scores the window's mean lag against the rank's history (evidence).

A culprit is late in every group it belongs to and waits on nobody: its excess stays
>= `slow_impact` for `slow_windows` consecutive windows of a comm and `SLOW_MIN_NS` (a GC
blip lasts one or two windows; `P2P_MIN_NS` for P2P comms), or at once when its median
slowdown is large over many instances. It is a victim, not a culprit, when it waits on a
far later peer in any group (its TP peers wait on it in TP; the other stages wait on it in
P2P), when its own waiting reaches half its impact, or when it is late in its pipeline only
and on time in its collectives. Among suspects of one pipeline, the one that waits least
in P2P is the cause.

A slow link: a multi-node comm's transfer time (last arrival to completion) rises well
above its normal for consecutive windows while none of its ranks arrives late.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

LEARN = 0.1  # weight of a new normal window in the learned baselines
GRACE = 3  # windows of a comm before its baselines are trusted
OWN_DECAY = 0.5  # waiting on others is remembered for a few windows (victims recover last)
SLOW_MIN_NS = 3e9  # lateness must last this long (event time) before it is a slow rank
P2P_MIN_NS = 6e9  # the same for the waits a rank causes in SEND/RECV pairs (windows not aligned to iterations)
FAST_FACTOR = 2.0  # a median slowdown this many times `slow_impact` ...
FAST_INSTANCES = 8  # ... over at least this many instances of a window opens without waiting SLOW_MIN_NS
LINK_FACTOR = 1.5
LINK_MIN_MS = 1.0


@dataclass
class CommSlow:
    ranks: np.ndarray
    base_impact: np.ndarray
    base_own: np.ndarray
    impact_ex: np.ndarray
    own_ex: np.ndarray
    streak: np.ndarray
    hot_since: np.ndarray
    lag_ms: np.ndarray
    last_share: np.ndarray
    windows: int = 0
    instances: int = 0
    ts_ns: int = 0
    span_ns: int = 0
    nodes: list = field(default_factory=list)
    base_xfer: float = -1.0
    xfer_ms: float = 0.0
    link_streak: int = 0
    slowdown: np.ndarray = field(default_factory=lambda: np.zeros(0))
    wall: np.ndarray = field(default_factory=lambda: np.zeros(0))  # impact as reported (share of wall time)
    scorers: dict = field(default_factory=dict)
    lag_score: dict = field(default_factory=dict)


def _new(ranks: list[int]) -> CommSlow:
    n = len(ranks)
    z = np.zeros(n)
    return CommSlow(np.asarray(ranks), z.copy(), z.copy(), z.copy(), z.copy(), np.zeros(n, int), z.copy(), z.copy(),
                    z.copy())


class SlowTracker:
    def __init__(self, slow_impact: float, slow_windows: int):
        self.slow_impact = slow_impact
        self.slow_windows = slow_windows
        self.comms: dict[str, CommSlow] = {}
        self.p2p: dict[str, CommSlow] = {}

    def _comm(self, table: dict, rep: dict) -> CommSlow:
        cs = table.get(rep["comm"])
        if cs is None or len(cs.ranks) != len(rep["ranks"]):
            cs = table[rep["comm"]] = _new(rep["ranks"])
        cs.ranks = np.asarray(rep["ranks"])
        return cs

    def _excess(self, cs: CommSlow, rep: dict, learn_first: bool = False) -> np.ndarray:
        """Impact and own waiting over the learned normal; returns the ranks hot now.

        `learn_first`: the mean impact of the first `GRACE` windows is the normal (structural
        waits, such as a pipeline's bubbles), and no rank is hot before."""
        impact = np.asarray(rep["impact"], float)
        own = np.asarray(rep["own"], float)
        if learn_first and cs.windows < GRACE:  # the mean of the first windows is the normal
            cs.base_impact += (impact - cs.base_impact) / (cs.windows + 1)
        elif cs.windows == 0:
            cs.base_impact[:] = np.minimum(impact, self.slow_impact / 2)
        if cs.windows == 0:
            cs.base_own[:] = np.minimum(own, np.median(own))
        cs.impact_ex = impact - cs.base_impact
        cs.own_ex = np.maximum(own - cs.base_own, OWN_DECAY * cs.own_ex)
        hot = cs.impact_ex >= self.slow_impact
        if learn_first and cs.windows < GRACE:
            hot[:] = False
        cs.hot_since = np.where(hot & (cs.streak == 0), float(rep["ts_ns"] - rep["span_ns"]), cs.hot_since)
        cs.streak = np.where(hot, cs.streak + 1, 0)
        normal_i = cs.impact_ex < self.slow_impact / 2
        cs.base_impact[normal_i] += LEARN * (impact[normal_i] - cs.base_impact[normal_i])
        normal_o = own - cs.base_own < self.slow_impact / 2
        cs.base_own[normal_o] += LEARN * (own[normal_o] - cs.base_own[normal_o])
        cs.windows += 1
        cs.ts_ns, cs.span_ns = rep["ts_ns"], rep["span_ns"]
        return hot

    def window(self, rep: dict) -> None:
        cs = self._comm(self.comms, rep)
        cs.slowdown = np.asarray(rep.get("slowdown", np.zeros(len(cs.ranks))), float)
        cs.wall = np.asarray(rep["impact"], float)
        # late by a share of the wall time (impact) or of its peers' compute time (slowdown)
        hot = self._excess(cs, {**rep, "impact": np.maximum(np.asarray(rep["impact"], float), cs.slowdown)})
        cs.lag_ms = np.asarray(rep["lag_ms"], float)
        cs.last_share = np.asarray(rep["last_share"], float)
        cs.instances = rep["instances"]
        cs.nodes = rep.get("nodes", [])
        self._score_lag(cs, hot)
        xfer = float(rep.get("xfer_ms", 0.0))
        cs.xfer_ms = xfer
        if cs.base_xfer < 0:
            cs.base_xfer = xfer
        elif xfer >= LINK_FACTOR * cs.base_xfer + LINK_MIN_MS and cs.windows > GRACE:
            cs.link_streak += 1
        else:
            cs.link_streak = 0
            cs.base_xfer += LEARN * (xfer - cs.base_xfer)

    def _score_lag(self, cs: CommSlow, hot: np.ndarray) -> None:
        """River scores the lag of ranks that look late; every rank's scorer learns its normal."""
        cs.lag_score = {}
        for i in np.flatnonzero(hot | (cs.last_share > 0.5)).tolist():
            r = int(cs.ranks[i])
            sc = cs.scorers.get(r)
            if sc is not None:
                cs.lag_score[r] = round(float(sc.score_one(None, float(cs.lag_ms[i]))), 3)
        if cs.windows % 4 == 1 or hot.any():
            for i in np.flatnonzero(~hot).tolist():
                r = int(cs.ranks[i])
                sc = cs.scorers.get(r)
                if sc is None:
                    from river import anomaly  # imported on first use: it pulls in scipy

                    sc = cs.scorers[r] = anomaly.GaussianScorer(window_size=64, grace_period=GRACE)
                sc.learn_one(None, float(cs.lag_ms[i]))

    def p2p_window(self, rep: dict) -> None:
        """Waits in SEND/RECV pairs: `impact` is the waiting a rank caused, chained to the root."""
        self._excess(self._comm(self.p2p, rep), rep, learn_first=True)

    # ------------------------------------------------------------------------------
    def culprits(self, now_ns: int, fresh_ns: int, keep: set[int] = frozenset()) -> dict[int, dict]:
        """Ranks judged slow now, with their impact and evidence.

        Ranks in `keep` (already open) stay slow while their impact is at least half the
        opening level (hysteresis, no flapping).
        """
        impact: dict[int, float] = {}
        streak: dict[int, int] = {}
        where: dict[int, list] = {}
        own: dict[int, float] = {}
        cost: dict[int, float] = {}
        slower: dict[int, float] = {}
        onset: dict[int, int] = {}
        tables = [(comm, cs, False) for comm, cs in self.comms.items()]
        tables += [(comm, cs, True) for comm, cs in self.p2p.items()]
        for comm, cs, p2p in tables:
            if now_ns - cs.ts_ns > fresh_ns:
                continue
            sel = cs.streak > 0
            if keep:
                sel = sel | np.isin(cs.ranks, list(keep))
            for i in np.flatnonzero(sel).tolist():
                r = int(cs.ranks[i])
                if cs.impact_ex[i] > impact.get(r, 0.0):
                    impact[r] = float(cs.impact_ex[i])
                # what its peers lose (wall time), apart from how much slower it is than they are
                cost[r] = max(cost.get(r, 0.0), float(cs.impact_ex[i] if p2p else min(cs.impact_ex[i], cs.wall[i])))
                if not p2p:
                    slower[r] = max(slower.get(r, 0.0), float(cs.slowdown[i]))
                s = int(cs.streak[i])
                strong = (not p2p and s > 0 and cs.instances >= FAST_INSTANCES
                          and min(cs.slowdown[i], cs.impact_ex[i]) >= FAST_FACTOR * self.slow_impact)
                if strong:
                    s = max(s, self.slow_windows)  # late by much in most instances: no pause does that
                elif cs.ts_ns - cs.hot_since[i] < (P2P_MIN_NS if p2p else SLOW_MIN_NS):
                    s = 0  # too short yet: a GC pause may straddle two windows, a pipeline's phase shift a few
                streak[r] = max(streak.get(r, 0), s)
                if cs.streak[i] > 0:  # lateness began with the window that first showed it
                    onset[r] = min(onset.get(r, cs.ts_ns), int(cs.hot_since[i]))
                ev = {"comm": comm, "impact": round(float(cs.impact_ex[i]), 4)}
                if p2p:  # the waiting it caused in SEND/RECV pairs, chained through the pipeline
                    ev["p2p"] = True
                else:
                    ev.update(lag_ms=float(cs.lag_ms[i]), last_share=float(cs.last_share[i]),
                              slowdown=round(float(cs.slowdown[i]), 4), lag_score=cs.lag_score.get(r))
                where.setdefault(r, []).append(ev)
        if not impact:
            return {}
        suspects = {r for r, s in streak.items() if s >= self.slow_windows and impact[r] >= self.slow_impact}
        suspects |= {r for r in keep if impact.get(r, 0.0) >= self.slow_impact / 2}
        if not suspects:
            return {}
        waits_on_late: set[int] = set()
        coll_impact: dict[int, float] = {}
        half = self.slow_impact / 2
        for _, cs, p2p in tables:
            if now_ns - cs.ts_ns > fresh_ns:
                continue
            top2 = np.sort(cs.impact_ex)[-2:]
            for i in np.flatnonzero(np.isin(cs.ranks, list(suspects))).tolist():
                r = int(cs.ranks[i])
                own[r] = max(own.get(r, 0.0), float(cs.own_ex[i]))
                if not p2p:
                    coll_impact[r] = max(coll_impact.get(r, -1.0), float(cs.impact_ex[i]))
                latest_other = top2[0] if len(top2) > 1 and cs.impact_ex[i] >= top2[-1] else top2[-1]
                if cs.own_ex[i] >= half and latest_other >= max(self.slow_impact, 2 * cs.impact_ex[i]):
                    waits_on_late.add(r)  # in this group it waits on a peer far later than itself
        out = {}
        for r in sorted(suspects):
            if r not in keep:
                if own.get(r, 0.0) >= 0.5 * impact[r] or r in waits_on_late:
                    continue  # it waits on someone else: a victim
                if coll_impact.get(r, half) < half:
                    continue  # late in its pipeline only, on time in its collectives: not slow itself
            out[r] = {"impact": round(cost[r], 4), "slowdown": round(slower.get(r, 0.0), 4),
                      "own_wait": round(own.get(r, 0.0), 4), "comms": where[r]}
            if r in onset:
                out[r]["onset_ns"] = onset[r]
        # suspects of one pipeline: the bottleneck stage is the one that waits least in P2P
        for cs in self.p2p.values():
            both = [i for i in np.flatnonzero(np.isin(cs.ranks, list(out))).tolist() if int(cs.ranks[i]) not in keep]
            if len(both) > 1 and now_ns - cs.ts_ns <= fresh_ns:
                best = min(both, key=lambda i: (cs.own_ex[i], int(cs.ranks[i])))
                for i in both:
                    if i != best:
                        out.pop(int(cs.ranks[i]), None)
        return out

    def slow_links(self, now_ns: int, fresh_ns: int, slow_ranks: set[int]) -> list[dict]:
        """Multi-node comms whose transfer time rose while none of their ranks is late."""
        hot = []
        for comm, cs in self.comms.items():
            if now_ns - cs.ts_ns > fresh_ns or len(cs.nodes) < 2 or cs.link_streak < self.slow_windows:
                continue
            if slow_ranks.intersection(cs.ranks.tolist()) or (cs.impact_ex >= self.slow_impact).any():
                continue
            hot.append({"comm": comm, "nodes": list(cs.nodes), "xfer_ms": cs.xfer_ms,
                        "normal_xfer_ms": round(cs.base_xfer, 3)})
        return hot
