"""Late arrivals: a rank that comes late to its job's collectives, call after call, while it
computes like its peers between them (`slow.SlowTracker`'s ratios see nothing): its own
work outside every call takes longer. A data loader or a feature pipeline slower on one
rank makes it the last to enter the first collective of every iteration; its peers wait
inside that call. The compute ratios leave the gap across an iteration's end out (it holds
waits in other comms), so the recommender generator's rank whose loader was 2x slower
(gloo, 82 -> 103 ms iterations, the rank last into the input all-to-all in 92 % of them)
was named by nothing.

Judged only where lateness cannot be a wait elsewhere: in a job each of whose comms in use
is a collective over the whole job (data parallel, FSDP, a recommender's all-to-alls). All
members leave a collective together; one that arrives later at the next one of any comm
spent longer outside every call since. In a 3D job a rank late at its data-parallel
all-reduce may have waited for its tensor-parallel peer; nothing is judged there.

A window of a comm counts against a rank when its mean arrival lag (`windows.lag_ms`, on
clocks aligned by the collectives' common completion) stands `LAG_STAND` times its peers'
spread over their median, and the peers' wait it makes (the excess over the window's span)
costs `slow_impact` of the time or more; half that while its incident is open. Named
after `LATE_WINDOWS` such windows in a row lasting `LATE_MIN_NS` at least; the cost is the
incident's impact. Host-enqueue records carry no lag: nothing is judged on them."""

from __future__ import annotations

import numpy as np

LATE = True  # the rule is on (a drill turns it off)
LATE_WINDOWS = 3  # windows of a comm in a row in which the rank was late enough
LATE_MIN_NS = 3_000_000_000  # ... over this much event time at least
LAG_STAND = 4.0  # its mean lag over the peers' median, in their median absolute deviations ...
LAG_FLOOR_MS = 0.5  # ... counting that deviation as this much at least (bursty loaders)
MIN_MEMBERS = 4  # a comm of fewer members has no peers' median to speak of


class LateArrivals:
    """Per comm, the run of windows in which one rank came late: [rank, windows in a row, since,
    latest cost, its lag, the peers' lag, latest window] (only the latest rank of a window can
    be the one all wait for: a comm holds one run at most)."""

    def __init__(self, slow_impact: float):
        self.impact = slow_impact
        self.runs: dict[str, list] = {}

    def window(self, comm: str, ranks: list[int], rep: dict, held: set[int]) -> None:
        """One collective window's figures (`windows.window_report`)."""
        lags = np.asarray([np.nan if v is None else v for v in rep.get("lag_ms") or ()], float)
        span_ms = rep.get("span_ns", 0) / 1e6
        if len(lags) != len(ranks) or len(ranks) < MIN_MEMBERS or span_ms <= 0 or not np.isfinite(lags).all():
            self.runs.pop(comm, None)
            return
        top = int(np.argmax(lags))
        others = np.delete(lags, top)
        mid = float(np.median(others))
        mad = max(float(np.median(np.abs(others - mid))), LAG_FLOOR_MS)
        excess = float(lags[top]) - mid
        cost = excess * rep.get("timed", rep.get("instances", 0)) / span_ms
        rank = ranks[top]
        if excess < LAG_STAND * mad or cost < (self.impact / 2 if rank in held else self.impact):
            self.runs.pop(comm, None)
            return
        run = self.runs.get(comm)
        if run is None or run[0] != rank:
            run = self.runs[comm] = [rank, 0, rep["ts_ns"], 0.0, 0.0, 0.0, 0]
        run[1] += 1
        run[3:] = [cost, float(lags[top]), mid, rep["ts_ns"]]

    def found(self, fresh_ns: int, world: int, in_use: dict[str, list[int]], p2p: set[str],
              skip: set[int]) -> dict[int, dict]:
        """Ranks late now: rank -> evidence. `in_use`: comm -> members of the job's comms in use;
        judged only when each is a collective (`p2p`: those that are not) over all `world` ranks.
        `fresh_ns`: a run whose latest window is older than this is stale. `skip`: ranks found
        otherwise."""
        if not LATE or not in_use or p2p.intersection(in_use) or any(len(m) != world for m in in_use.values()):
            return {}
        out: dict[int, dict] = {}
        for comm, (r, n, since, cost, lag, mid, ts) in self.runs.items():
            if r in skip or n < LATE_WINDOWS or ts - since < LATE_MIN_NS or ts < fresh_ns or comm not in in_use:
                continue
            if r in out and out[r]["impact"] >= cost:
                continue
            out[r] = {"ratio": round(1.0 + cost, 3), "slowdown": round(cost, 3), "impact": round(cost, 4),
                      "comm": comm, "onset_ns": int(since), "signal": "late", "lag_ms": round(lag, 2),
                      "peers_lag_ms": round(mid, 2), "late_windows": n}
        return out

    def forget(self, comm: str) -> None:
        self.runs.pop(comm, None)
