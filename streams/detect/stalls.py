"""Stalls: a rank that stops outside every call again and again (a data loader stuck one
iteration in four), mixed into `SlowTracker` (`slow.py`), from the stalls its collective
windows show (`windows.busy_stall`)."""

from __future__ import annotations

import math
import statistics

import numpy as np

from commwatch.streams.detect.windows import STALL_TYPICAL

STALL_HORIZON_NS = 60_000_000_000  # stalls (`windows.busy_stall`) are counted over this much of the latest time ...
STALL_REPEAT = 3  # ... a rank stalling in this many windows of each comm that shows its stalls, nobody else twice, ...
STALL_KEEP = 16  # (windows with stalls kept per rank and comm)
SMALL_SHARE = 0.5  # stalls costing under `slow_impact`, down to this share of it, are named too ...
SMALL_REPEAT = 6  # ... once seen in this many windows of the comm that shows them most (a small cost's estimate settles)


class StallRules:
    """`SlowTracker`'s stall rule (its `comms`, `stall_log`, `slow_impact` and `_stage_groups`
    are the tracker's own)."""

    def stalls(self, now_ns: int, slow: set[int] = frozenset()) -> dict[int, dict]:
        """Ranks that stall outside every call again and again (a data loader stuck one
        iteration in four): rank -> evidence. A stall lengthens one gap of the rank in each of
        its comms while its peers wait inside their next call (`windows.busy_stall`), so the
        rate figures take it for a pause, each time. A rank's stalls are those that show in
        each of its collective comms whose typical gap is short enough to show them (under a
        `STALL_TYPICAL`th of the stall), counted in windows: a rank waiting for a peer's stall
        shows none where it waits (inside that comm's calls), only in comms whose gaps hold the
        wait; a rank whose pipeline neighbour stalled waits with its tensor-parallel peers, none
        longer than another. Named when that is `STALL_REPEAT` windows or more within
        `STALL_HORIZON_NS`, no other rank of the job stalled more than once meanwhile, and it
        costs the job `slow_impact` of its time or more (its mean stall over the mean time
        between them), or `SMALL_SHARE` of that once it stalled in `SMALL_REPEAT` windows of
        the comm that shows it most (its severity follows its cost: P3). The eighth
        generator's allocator retries, rank 17's iteration 300-600 ms longer every 3-7
        iterations, cost its job 7-8 % and were named by nothing with 5 of its draws 1-8; its
        rank 0's logging, 150-350 ms every 10 iterations (4-5 %), is a cost too, but one
        estimate on three of them said 5.6 % (draw 1): a small cost is named on six. Random
        stalls of many ranks (garbage collections, each rank at its own moments: some rank
        stalls three times in a minute by chance), or a pause of every rank at once, name
        nobody. Nor does a rank that waits for a slow one (`slow`: found or named by its
        compute) inside the calls of a collective comm they share (`waits_for`): each
        iteration its gaps in its other comms hold that wait, a stall in their figures, while
        it was inside a call all along (generator C's 256-rank job drawn with 21000: rank
        133 1.5x; its tensor-parallel peer 128, late at every data-parallel reduction by its
        waits on 133, was named P3 'stalls outside every call, 0.48 s at a time')."""
        since = now_ns - STALL_HORIZON_NS
        recent: dict[tuple[int, str], list] = {}
        for key, log in self.stall_log.items():
            events = [e for e in log if e[0] >= since]
            if events and key[1] in self.comms:
                recent[key] = events
        sizes: dict[int, list[float]] = {}
        for (r, _), events in recent.items():
            sizes.setdefault(r, []).extend(e[1] for e in events)
        counted: dict[int, dict[str, int]] = {}
        gap_of: dict[str, float] = {}  # per comm, its members' typical gap (ms; nan: none)

        def comm_gap(c: str, ct) -> float:
            if c not in gap_of:
                typical = ct.typical_of()
                gap_of[c] = float(np.nanmedian(typical)) if np.isfinite(typical).any() else math.nan
            return gap_of[c]

        for r, ms in sizes.items():
            size = statistics.median(ms)
            counts = {}
            for c, ct in self.comms.items():
                if ct.p2p or not ct.busy or r not in ct.ranks:
                    continue
                if STALL_TYPICAL * comm_gap(c, ct) <= size:
                    counts[c] = len(recent.get((r, c), ()))
            if counts and min(counts.values()):
                counted[r] = counts
        out: dict[int, dict] = {}
        for r, counts in counted.items():
            if min(counts.values()) < STALL_REPEAT or any(
                    q != r and min(n.values()) > 1 for q, n in counted.items()) or self.waits_for(r, slow):
                continue
            best = max(counts, key=lambda c: (counts[c], c))
            events = recent[(r, best)]
            period = (events[-1][0] - events[0][0]) / (len(events) - 1)
            mean_ms = sum(e[1] for e in events) / len(events)
            impact = min(1.0, mean_ms * 1e6 / max(period, 1.0))
            if impact < self.slow_impact * SMALL_SHARE or (impact < self.slow_impact and len(events) < SMALL_REPEAT):
                continue
            out[r] = {"ratio": round(1.0 + impact, 3), "slowdown": round(impact, 3), "impact": round(impact, 4),
                      "comm": best, "onset_ns": int(events[0][0]), "signal": "stalls", "stalls": len(events),
                      "stall_ms": round(mean_ms, 1), "every_s": round(period / 1e9, 2)}
        return out

    def waits_for(self, rank: int, slow: set[int]) -> bool:
        """Whether `rank` waits for a rank of `slow` (`_slower_peers`), by the latest
        evaluation's figures over each comm's horizon."""
        return bool(self._slower_peers(rank, slow, self.long))

    def _slower_peers(self, rank: int, cands, long: dict[str, dict[int, tuple]]) -> set[int]:
        """The ranks of `cands` that compute clearly slower than `rank` (by half `slow_impact`,
        the hysteresis margin) in a collective comm they share, by `long`'s figures: `rank`
        waits for them inside that comm's calls. Only a comm whose members are of one pipeline
        stage (by coordinates, where known): across stages they do different work between its
        calls (generator E's TP 8 x PP 4 job without DP drawn with 2: its 1.3x last-stage rank
        computed less between the job's grad-norm all-reduces than a third-stage rank found
        1.12x, was taken to wait for it, and its incident resolved while it was as slow)."""
        out: set[int] = set()
        for ct, res in self._stage_groups(rank, long):
            mine = res[rank][1] * (1.0 + self.slow_impact / 2)
            out.update(q for q in ct.ranks if q != rank and q in res and q in cands and mine < res[q][1])
        return out
