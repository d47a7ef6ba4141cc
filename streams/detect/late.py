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
after `LATE_WINDOWS` such windows, in a row but for up to `MAX_QUIET` at a time in which
nobody came late, lasting `LATE_MIN_NS` at least, when the wait it made in the latest late
window and the quiet ones before it costs as much; that cost is the incident's impact. Host-enqueue records carry no lag: nothing is judged on them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LATE = True  # the rule is on (a drill turns it off)
LATE_WINDOWS = 3  # windows of a comm in a row in which the rank was late enough
LATE_MIN_NS = 3_000_000_000  # ... over this much event time at least
LAG_STAND = 4.0  # its mean lag over the peers' median, in their median absolute deviations ...
LAG_FLOOR_MS = 0.5  # ... counting that deviation as this much at least (bursty loaders)
MIN_MEMBERS = 4  # a comm of fewer members has no peers' median to speak of
MAX_QUIET = 2  # windows in a row in which nobody came late that do not end a rank's run ...
QUIET_STAND = 20.0  # ... when its latest late window stood this many deviations over its peers


@dataclass
class _Run:
    rank: int
    since: int  # its first late window's end
    windows: int = 0  # late windows
    quiet: int = 0  # windows in a row since its last late one in which nobody came late
    waited_ms: float = 0.0  # the peers' wait it made in the quiet windows since its last late one
    span_ms: float = 0.0  # ... and their spans
    cost: float = 0.0  # its latest late window's cost, with the quiet windows before it
    need: float = 0.0  # the cost its latest late window was held to
    stand: float = 0.0  # how far that window's lag stood over the peers' (in their deviations)
    lag: float = 0.0  # its lag and the peers' in its latest late window
    mid: float = 0.0
    ts: int = 0  # the latest window's end


class LateArrivals:
    """Per comm, the run of windows in which one rank came late (only the latest rank of a
    window can be the one all wait for: a comm holds one run at most). A window in which nobody
    came late does not end it (`MAX_QUIET` in a row at most) after a late window that stood far
    out (`QUIET_STAND`): a comm's windows are cut by time, and the one call a step that a rank
    comes late to falls in every other window of some comms. Not after one that stood out by a
    little: in a jittery job (the second generator's gloo DDP, loaders 0-30 ms apart) some
    rank stands 4-6 deviations out in most windows, and such lateness, broken by a window,
    is chance. What the run costs is the peers' wait it made in its latest late window and the
    quiet ones before it. The twenty-first generator's data-parallel job whose rank 21 ran its CPU
    optimizer 1.6x slower (GPU-timed, 32 ranks): 100-150 ms late on average at the windows of
    four calls holding the parameter all-gather after it, a quarter of their time, and not late
    at the two-call windows between them; each of those ended the run, and it was named only by
    its compute intervals, P3 after 24 s, resolved while still slow."""

    def __init__(self, slow_impact: float):
        self.impact = slow_impact
        self.runs: dict[str, _Run] = {}

    def window(self, comm: str, ranks: list[int], rep: dict, held: set[int]) -> None:
        """One collective window's figures (`windows.window_report`)."""
        lags = np.asarray([np.nan if v is None else v for v in rep.get("lag_ms") or ()], float)
        span_ms = rep.get("span_ns", 0) / 1e6
        if len(lags) != len(ranks) or len(ranks) < MIN_MEMBERS or span_ms <= 0 or not np.isfinite(lags).all():
            self.runs.pop(comm, None)
            return
        timed = rep.get("timed", rep.get("instances", 0))
        top = int(np.argmax(lags))
        others = np.delete(lags, top)
        mid = float(np.median(others))
        mad = max(float(np.median(np.abs(others - mid))), LAG_FLOOR_MS)
        excess = float(lags[top]) - mid
        cost = excess * timed / span_ms
        rank = ranks[top]
        need = self.impact / 2 if rank in held else self.impact
        run = self.runs.get(comm)
        if excess < LAG_STAND * mad or cost < need:  # nobody came late in this window
            if run is None or run.quiet >= MAX_QUIET or run.stand < QUIET_STAND or run.rank not in ranks:
                self.runs.pop(comm, None)
                return
            i = ranks.index(run.rank)
            run.quiet += 1
            run.waited_ms += max(0.0, float(lags[i]) - float(np.median(np.delete(lags, i)))) * timed
            run.span_ms += span_ms
            run.ts = rep["ts_ns"]
            return
        if run is None or run.rank != rank:
            run = self.runs[comm] = _Run(rank, rep["ts_ns"])
        run.windows += 1
        run.cost = (run.waited_ms + excess * timed) / (run.span_ms + span_ms)
        run.quiet, run.waited_ms, run.span_ms = 0, 0.0, 0.0
        run.need, run.stand, run.lag, run.mid, run.ts = need, excess / mad, float(lags[top]), mid, rep["ts_ns"]

    def found(self, fresh_ns: int, world: int, in_use: dict[str, list[int]], p2p: set[str],
              skip: set[int]) -> dict[int, dict]:
        """Ranks late now: rank -> evidence. `in_use`: comm -> members of the job's comms in use;
        judged only when each is a collective (`p2p`: those that are not) over all `world` ranks.
        `fresh_ns`: a run whose latest window is older than this is stale. `skip`: ranks found
        otherwise."""
        if not LATE or not in_use or p2p.intersection(in_use) or any(len(m) != world for m in in_use.values()):
            return {}
        out: dict[int, dict] = {}
        for comm, run in self.runs.items():
            r = run.rank
            if (r in skip or run.windows < LATE_WINDOWS or run.ts - run.since < LATE_MIN_NS or run.ts < fresh_ns
                    or comm not in in_use):
                continue
            cost = run.cost
            if cost < run.need or (r in out and out[r]["impact"] >= cost):
                continue
            out[r] = {"ratio": round(1.0 + cost, 3), "slowdown": round(cost, 3), "impact": round(cost, 4),
                      "comm": comm, "onset_ns": int(run.since), "signal": "late", "lag_ms": round(run.lag, 2),
                      "peers_lag_ms": round(run.mid, 2), "late_windows": run.windows}
        return out

    def forget(self, comm: str) -> None:
        self.runs.pop(comm, None)
