"""Slow ranks, pipeline imbalance and slow links from stage-1 windows (stage 2, one job).

The culprit of a slowdown is where the waiting ends: it computes slower than the ranks
that do the same work, while its victims compute as fast as ever and only wait longer.
So each rank is judged by its *compute share*: the share of wall time it spends outside
communication calls, `1 - sum of its comms' inside shares` (`windows.py`: durations on the
rank's own clock, from timed records only, so clock skew does not enter). A slow rank's
share is its slowdown times its peers' (1.3x slower: 1.3x the share); a victim's is its
peers', whatever it waits on and wherever (tensor, data or pipeline parallel).

Peers are the ranks that do the same work: the same pipeline stage (`coords.pp` from the
topology), or, without coordinates, the members of the rank's collective comms (tensor and
data parallel groups are inside one stage), never a world-sized comm. A rank's `ratio` is
its compute share over the median of its peers'.

- `slow_rank`: ratio >= 1 + `slow_impact` sustained (`slow_windows` new windows and
  `SLOW_MIN_NS`), or >= `FAST_RATIO` in two new windows in a row (a large slowdown is
  named within about two iterations). Hysteresis: an open one stays while its ratio is
  >= 1 + `slow_impact` / 2. Whether a ratio is anomalous is decided by the rank model
  (`rank_model.py`: river or numpy rules).
- Pipeline imbalance: a whole stage computes `IMBALANCE` more than the other stages, from
  the start and throughout: tuning advice for the stage, not a faulty rank (`advisories`).
- Slow link: a multi-node comm's transfer time (last arrival to completion) rises well
  above its normal for consecutive windows while none of its ranks is slow.

Ranks with a comm whose records carry no timing (host-enqueue probes) get no ratio here;
their iteration phases (`steps.py`) still can.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from commwatch.streams.detect.rank_model import RankModel

FRESH_WINDOWS = 4.0  # a comm's window older than this many of its own intervals (and 5 s) is stale
MIN_COMPUTE = 0.02
IMBALANCE = 0.2  # a stage computing this much more than the others ...
IMBALANCE_EVALS = 10  # ... in this many evaluations, from its first ones on, is an advisory
ECHO_SHARE = 0.25  # a slowdown under this share of the largest one in the job is its echo
LINK_FACTOR = 1.5
LINK_MIN_MS = 1.0
LINK_GRACE = 3
LEARN = 0.1
HORIZON_NS = 4_000_000_000  # inside shares are summed over this much of the latest windows ...
HORIZON_WINDOWS = 16  # ... and at most this many (a window's edges cut calls: longer sums, smaller error)


@dataclass
class CommTiming:
    ranks: list[int]
    p2p: bool
    ts_ns: int = 0
    interval_ns: float = 0.0
    inside: dict[int, float] | None = None  # None: untimed (host-enqueue); else over the horizon
    latest: dict[int, float] = field(default_factory=dict)  # inside shares of the latest window alone
    hist: deque = field(default_factory=lambda: deque(maxlen=HORIZON_WINDOWS))  # (ts, span, inside array)
    lag_ms: dict[int, float] = field(default_factory=dict)
    crank: list[int] | None = None
    windows: int = 0
    nodes: list[str] = field(default_factory=list)
    xfer_ms: float = 0.0
    base_xfer: float = -1.0
    link_streak: int = 0


def dominant(found: dict[int, dict], keep: set[int] = frozenset()) -> dict[int, dict]:
    """Drop ranks whose excess is a small fraction of the largest one's: a large slowdown
    perturbs its victims' schedules (a partial iteration in a window), and what they show is
    its echo, not a fault of theirs. Ranks already open stay (hysteresis)."""
    if len(found) < 2:
        return found
    top = max(ev["ratio"] for ev in found.values()) - 1.0
    return {r: ev for r, ev in found.items() if r in keep or ev["ratio"] - 1.0 >= top * ECHO_SHARE}


def _median(xs: list[float]) -> float:
    return float(np.median(xs)) if xs else 0.0


class SlowTracker:
    def __init__(self, slow_impact: float, slow_windows: int, model: str = "river"):
        self.slow_impact = slow_impact
        self.slow_windows = slow_windows
        self.comms: dict[str, CommTiming] = {}
        self.models: dict[int, RankModel] = {}
        self.model_kind = model
        self.stamp: dict[int, int] = {}  # rank -> end of its latest window ...
        self.span: dict[int, float] = {}  # ... and that window's span
        self.ratio: dict[int, float] = {}
        self.compute: dict[int, float] = {}
        self.stage_evals: dict[int, list[int]] = {}  # stage -> [evaluations imbalanced, evaluations]
        self.stage_ratio: dict[int, float] = {}
        self.evals = 0

    # --- inputs -----------------------------------------------------------------------
    def _timing(self, rep: dict, p2p: bool) -> CommTiming:
        ct = self.comms.get(rep["comm"])
        if ct is None or ct.ranks != rep["ranks"]:
            ct = self.comms[rep["comm"]] = CommTiming(list(rep["ranks"]), p2p)
        if ct.ts_ns:
            gap = rep["ts_ns"] - ct.ts_ns
            ct.interval_ns = gap if ct.interval_ns == 0 else ct.interval_ns + 0.2 * (gap - ct.interval_ns)
        ct.ts_ns = rep["ts_ns"]
        ct.windows += 1
        ct.nodes = rep.get("nodes") or ct.nodes
        return ct

    @staticmethod
    def _horizon(ct: CommTiming, ts_ns: int, span_ns: float, inside: list[float]) -> None:
        """Inside shares over the latest windows covering `HORIZON_NS`, weighted by span."""
        ct.hist.append((ts_ns, float(span_ns), np.asarray(inside, float)))
        ct.latest = dict(zip(ct.ranks, inside))
        keep = max(HORIZON_NS, 2 * ct.interval_ns)
        total = 0.0
        acc = np.zeros(len(inside))
        for t, span, vals in reversed(ct.hist):
            acc += vals * span
            total += span
            if ts_ns - t + span >= keep:
                break
        ct.inside = dict(zip(ct.ranks, (acc / max(total, 1.0)).tolist()))

    def window(self, rep: dict) -> None:
        ct = self._timing(rep, p2p=False)
        if not rep.get("timed"):
            ct.inside = None
            ct.hist.clear()
            return
        ranks = rep["ranks"]
        self._horizon(ct, rep["ts_ns"], rep["span_ns"], rep["inside"])
        ct.lag_ms = dict(zip(ranks, rep["lag_ms"]))
        xfer = float(rep.get("xfer_ms", 0.0))
        ct.xfer_ms = xfer
        if ct.base_xfer < 0:
            ct.base_xfer = xfer
        elif xfer >= LINK_FACTOR * ct.base_xfer + LINK_MIN_MS and ct.windows > LINK_GRACE:
            ct.link_streak += 1
        else:
            ct.link_streak = 0
            ct.base_xfer += LEARN * (xfer - ct.base_xfer)

    def p2p_window(self, rep: dict) -> None:
        ct = self._timing(rep, p2p=True)
        if rep.get("calls", 0) == 0:
            if rep.get("untimed"):
                ct.inside = None
                ct.hist.clear()
            return  # an idle pipeline comm: its last shares stand
        self._horizon(ct, rep["ts_ns"], rep["span_ns"], rep["inside"])
        ct.crank = rep.get("crank")

    def forget_comm(self, comm: str) -> None:
        self.comms.pop(comm, None)

    # --- evaluation -------------------------------------------------------------------
    def _fresh(self, ct: CommTiming, now_ns: int) -> bool:
        return now_ns - ct.ts_ns <= max(5e9, FRESH_WINDOWS * ct.interval_ns)

    def compute_shares(self, now_ns: int, in_use: dict[str, list[int]] | None = None,
                       latest: bool = False) -> dict[int, float]:
        """Each rank's share of wall time outside communication calls (ranks all of whose
        comms in use, `in_use`: comm -> members, are timed and fresh), over the horizon, or
        over each comm's latest window (`latest`)."""
        inside: dict[int, float] = {}
        unknown: set[int] = set()
        for comm, members in (in_use or {}).items():
            if comm not in self.comms:  # in use, but no window yet: its share is not known
                unknown.update(members)
        stamp = self.stamp
        for ct in self.comms.values():
            if ct.inside is None or not self._fresh(ct, now_ns):
                unknown.update(ct.ranks)
                continue
            for r, v in (ct.latest if latest else ct.inside).items():
                inside[r] = inside.get(r, 0.0) + v
                if ct.ts_ns > stamp.get(r, 0):
                    stamp[r] = ct.ts_ns
                    self.span[r] = ct.hist[-1][1] if ct.hist else 0.0
        return {r: max(MIN_COMPUTE, 1.0 - v) for r, v in inside.items() if r not in unknown}

    def peer_groups(self, coords: dict[int, dict], world: int) -> dict[int, list[int]]:
        """Ranks doing the same work as each rank (itself included)."""
        groups: dict[int, list[int]] = {}
        if coords:
            by_stage: dict[int, list[int]] = {}
            for r, c in coords.items():
                by_stage.setdefault(int(c.get("pp", 0)), []).append(r)
            for members in by_stage.values():
                for r in members:
                    groups[r] = members
        sets: dict[int, set[int]] = {}
        sizes = [len(ct.ranks) for ct in self.comms.values() if not ct.p2p]
        big = max(sizes, default=0)
        for ct in self.comms.values():
            if ct.p2p or len(ct.ranks) < 2 or (len(ct.ranks) >= world > 0 and len(ct.ranks) == big and len(sizes) > 1):
                continue
            for r in ct.ranks:
                if r not in groups:
                    sets.setdefault(r, set()).update(ct.ranks)
        for r, s in sets.items():
            groups[r] = sorted(s)
        return groups

    def evaluate(self, now_ns: int, coords: dict[int, dict], world: int, open_ranks: set[int],
                 in_use: dict[str, list[int]] | None = None) -> dict[int, dict]:
        """Slow ranks now: rank -> evidence (`ratio`, `compute_share`, `impact`, `onset_ns`, `comms`)."""
        self.evals += 1
        compute = self.compute_shares(now_ns, in_use)
        self.compute = compute
        groups = self.peer_groups(coords, world)
        ratios, refs = self._ratios(compute, groups)
        short, _ = self._ratios(self.compute_shares(now_ns, in_use, latest=True), groups)
        self.ratio = ratios
        out = {}
        for r, ratio in ratios.items():
            m = self.models.get(r)
            if m is None:
                m = self.models[r] = RankModel(self.model_kind, self.slow_impact, self.slow_windows)
            stamp = self.stamp.get(r, now_ns)
            verdict = m.update(ratio, stamp, now_ns, held=r in open_ranks, short=short.get(r, ratio),
                               start=stamp - int(self.span.get(r, 0)))
            if verdict is None:
                continue
            comms = [{"comm": c, "inside": round(ct.inside.get(r, 0.0), 4), "lag_ms": ct.lag_ms.get(r)}
                     for c, ct in sorted(self.comms.items()) if ct.inside and r in ct.inside]
            out[r] = {"ratio": round(ratio, 3), "slowdown": round(ratio - 1.0, 3), "compute_share": round(compute[r], 4),
                      "peers_compute_share": round(refs[r], 4), "impact": round(min(1.0, (ratio - 1.0) * refs[r]), 4),
                      "onset_ns": int(verdict), "comms": comms[:16], "signal": "collectives"}
        for r in list(self.models):
            if r not in ratios and r not in open_ranks:
                self.models[r].idle()
        return dominant(out, open_ranks)

    @staticmethod
    def _ratios(compute: dict[int, float], groups: dict[int, list[int]]) -> tuple[dict[int, float], dict[int, float]]:
        ratios: dict[int, float] = {}
        refs: dict[int, float] = {}
        for r, share in compute.items():
            peers = [compute[q] for q in groups.get(r, ()) if q != r and q in compute]
            if not peers:
                continue
            ref = _median(peers)
            if ref > 0:
                ratios[r] = share / ref
                refs[r] = ref
        return ratios, refs

    def stages(self, coords: dict[int, dict]) -> dict[int, list[int]]:
        """Pipeline stages: from coordinates, else from the comm ranks of the P2P comms."""
        out: dict[int, list[int]] = {}
        if coords:
            for r, c in coords.items():
                out.setdefault(int(c.get("pp", 0)), []).append(r)
            return out
        for ct in self.comms.values():
            if ct.p2p and ct.crank:
                for r, cr in zip(ct.ranks, ct.crank):
                    if cr >= 0:
                        out.setdefault(cr, []).append(r)
        return out

    def advisories(self, coords: dict[int, dict]) -> list[dict]:
        """Stages that compute `IMBALANCE` more than the other stages, from the start on."""
        stages = self.stages(coords)
        med = {s: _median([self.compute[r] for r in rs if r in self.compute]) for s, rs in stages.items()}
        med = {s: v for s, v in med.items() if v > 0}
        out = []
        if len(med) < 2:
            return out
        for s, v in med.items():
            others = _median([w for t, w in med.items() if t != s])
            ratio = v / others if others > 0 else 0.0
            count = self.stage_evals.setdefault(s, [0, 0])
            count[1] += 1
            if ratio >= 1 + IMBALANCE:
                count[0] += 1
            self.stage_ratio[s] = ratio
            # structural: imbalanced in most of its first evaluations (a later change is a fault)
            if count[0] >= IMBALANCE_EVALS and count[0] * 4 >= count[1] * 3 and ratio >= 1 + IMBALANCE / 2:
                out.append({"stage": s, "ranks": sorted(stages[s]), "ratio": round(ratio, 3)})
        return out

    def slow_links(self, now_ns: int, slow_ranks: set[int]) -> list[dict]:
        hot = []
        for comm, ct in self.comms.items():
            if ct.p2p or not self._fresh(ct, now_ns) or len(ct.nodes) < 2 or ct.link_streak < self.slow_windows:
                continue
            if slow_ranks.intersection(ct.ranks) or any(self.ratio.get(r, 1.0) >= 1 + self.slow_impact
                                                        for r in ct.ranks):
                continue
            hot.append({"comm": comm, "nodes": list(ct.nodes), "xfer_ms": ct.xfer_ms,
                        "normal_xfer_ms": round(ct.base_xfer, 3)})
        return hot

    def lateness(self) -> dict[int, float]:
        """Each rank's largest mean arrival lag (ms) in its comms' latest windows."""
        out: dict[int, float] = {}
        for ct in self.comms.values():
            for r, v in ct.lag_ms.items():
                if v is not None and v > out.get(r, -1e18):
                    out[r] = v
        return out
