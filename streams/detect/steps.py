"""Iteration timings (`cw.steps.v1`) as a second signal (stage 2, one job).

- A compute straggler among ranks that do the same work (the same pipeline stage, from
  `coords.pp`; all ranks without coordinates): per phase (forward, backward), its time over
  the median of its peers', per iteration, judged by the same rank model as the
  collectives' (`rank_model.py`). A phase in which many ranks are slower is one whose
  sections hold collective waits (they wait on someone inside it): it names nobody. This
  sees a slow rank even when its collectives are invisible (a framework calling the backend
  from C++) or carry no timing (host-enqueue probes), as NVIDIA's straggler detection does
  with section timings; where a rank's collectives are timed, they decide (`job_stage.py`).
- Over the kept iterations, not one by one, a tensor-parallel member a few tens of percent
  slower in a job whose iterations stray nearly as much (`_horizon`).
- The job's cadence: the median step time (hang and stall thresholds scale with it).
- A job-level slowdown: the recent median step time against the job's own baseline (the
  fastest typical step seen, learned slowly), reported with its attribution when a slow
  rank explains it.

An iteration is judged once most ranks reported it (or a later one is complete), so
phases are compared between ranks at the same iteration.
"""

from __future__ import annotations

import statistics
from collections import deque

from commwatch.streams.detect.medians import RANGE_SIGMAS
from commwatch.streams.detect.rank_model import FAST_RATIO, RankModel
from commwatch.streams.detect.slow import coords_but, dominant

KEEP_ITERATIONS = 8
RECENT = 3  # the job's current step time: median of the last iterations
WARMUP = 2  # first iterations (compilation, warm-up) teach nothing ...
WARMUP_S = 10.0  # ... but the first alone where it and the next each took this long (`warmed`)
BASE_LEARN = 0.05
PHASES = ("forward_ms", "backward_ms")
LOCAL_PHASE = "optimizer_ms"  # tensor-parallel peers compute it apart (no TP collective waits in it)
KEPT_PHASES = PHASES + (LOCAL_PHASE,)
WAITED_IN_GROUP = True  # TP peers that waited in a phase for a stalled member still count in its group (`_judge`)
ONE_PER_GATHER = True  # of the members of one data-parallel group told apart by `LOCAL_PHASE`, only the slowest counts (`_judge`)
PEERS_WAIT_INSIDE = True  # a member apart in its own compute, whose TP peers alone are slower in a phase, takes their ratio (`_judge`)
WAITED_FOR_APART = True  # a TP group its stage waits for in `LOCAL_PHASE` tells its slow member apart there by its peers (`_apart_in_group`)
PAIR_WAITED_FOR = True  # a TP pair its stage waits for in `LOCAL_PHASE`, of a job with one stage, is slow as a whole (`_pair_waited_for`)
SHARED_IN_GROUP = True  # a member alone over the line, its TP peer nearly as slow in the phase, names nobody (`_judge`)
SHARED_SHARE = 0.5  # ... nearly: this share of its excess at least
BEHIND_SLOW_WAITS = True  # a rank slower in a phase next to a slow rank named in its pipeline waits there for it (`_judge`)
DP_PEERS_WAIT = True  # the members of a data-parallel group but one slower in a phase wait there for it (`_waited_in_reduction`)
WAITS_NOT_STRETCH = True  # a phase a rank was found waiting in is no stretch of its own (`_conclusive`)
STRAGGLER_SHARE = 0.1  # a phase in which more ranks than this share are slow holds waits
PHASE_MIN_SHARE = 0.1  # a phase shorter than this share of the step cannot slow the job (noise)
UNIFORM = 1.15  # phases stretched alike (largest ratio over smallest at most this): a slower device
ALIKE_MIN_SHARE = 0.02  # ... counting phases down to this share of the step (a short forward too)
ALIKE_RATIO = 1.4  # ... each at least this much: one iteration decides ...
ALIKE_QUIET = 1.2  # ... or this much in a quiet job (its noise at most `QUIET`)
OWN_SHARE = 0.5  # ... and a rank told from its TP group by its `LOCAL_PHASE` alone, that stretched this share of theirs at least
QUIET = 0.02
WHOLE_ALIKE = 0.5  # a TP group is slow as a whole when its least slow member's local excess is this share of the most's
LONG_EXCESS_MS = 5000.0  # a phase this much longer than its peers' (and FAST_RATIO x) decides in one iteration
LATE_REPORT_NS = 1_000_000_000  # an iteration most ranks reported waits this long for the others' reports ...
LATE_REPORT_SHARE = 0.1  # ... or this share of a step, if longer (the straggler reports last)
LEVEL_LEARN = 0.2  # a rank's usual `LOCAL_PHASE` ratio: moving average over the iterations without loss
LOCAL_LOSS = 0.05  # the job's steps this much over its baseline, nothing else explaining it: a rank alone slower in `LOCAL_PHASE` does
HORIZON_MIN = 6  # kept iterations a rank's phases must be known in, for a verdict over them (`_horizon`) ...
HORIZON_SIGMAS = 4.0  # ... their median this many of its own standard errors over 1 (the job's noise)
MEDIAN_SE = 1.2533  # a median's standard error over a mean's, for normal draws


class StepTracker:
    def __init__(self, slow_impact: float, slow_windows: int, model: str = "river"):
        self.slow_impact = slow_impact
        self.slow_windows = slow_windows
        self.model_kind = model
        self.iters: dict[int, dict[int, tuple[float, float | None, int]]] = {}
        self.losing = False  # the job's steps `LOCAL_LOSS` over the baseline (till under half of it)
        self.local_level: dict[int, float] = {}  # per rank, its `LOCAL_PHASE` ratio while the job lost nothing
        self.durations: deque = deque(maxlen=64)  # median step time per judged iteration (s)
        self.ends: deque = deque(maxlen=64)  # ... and when it ended (its last report's end)
        self.last_iteration: int | None = None
        self.last_end_ns = 0
        self.judged = -1
        self.ranks: set[int] = set()
        self.models: dict[int, RankModel] = {}
        self.ratio: dict[int, float] = {}
        self.base_s = 0.0
        self.settled_ns: int | None = None  # when the baseline was first taken over `RECENT` iterations
        self.verdicts: dict[int, dict] = {}
        self.fresh = False
        self.spread: deque = deque(maxlen=KEEP_ITERATIONS)  # per judged iteration, (rank, phase) -> its ratio
        self.local_models: dict[int, RankModel] = {}
        self.local_spread: deque = deque(maxlen=KEEP_ITERATIONS)  # per judged iteration, rank -> its `LOCAL_PHASE` ratio
        self.local_verdicts: dict[int, dict] = {}  # ranks alone slower in `LOCAL_PHASE` now (`_judge_local`)
        # per judged iteration, rank -> its `LOCAL_PHASE` ratio, every rank (`_horizon`)
        self.local_raw: deque = deque(maxlen=KEEP_ITERATIONS)
        self.device = False  # the job's collectives run on devices (NCCL): GPU-timed phases hold their kernels

    def add(self, msg: dict) -> None:
        it, rank = msg["iteration"], msg["rank"]
        self.ranks.add(rank)
        if self.judged >= 0 and it <= self.judged:
            return  # late for an iteration already judged
        dur = (msg["t_end_ns"] - msg["t_start_ns"]) / 1e9
        phases = {k: float(v) for k, v in (msg.get("phases") or {}).items() if k in KEPT_PHASES}
        got = self.iters.setdefault(it, {})
        got[rank] = (dur, phases, msg["t_end_ns"])
        if len(got) >= max(2, len(self.ranks)) and it > self.judged:
            self.fresh = True  # every rank seen reported this iteration: it may be judged now
        self.last_iteration = it if self.last_iteration is None else max(self.last_iteration, it)
        if len(self.iters) > KEEP_ITERATIONS:
            for old in sorted(self.iters)[:-KEEP_ITERATIONS]:
                del self.iters[old]

    def median_step_s(self) -> float:
        return statistics.median(self.durations) if self.durations else 0.0

    def rate_per_s(self) -> float | None:
        m = self.median_step_s()
        return round(1.0 / m, 3) if m > 0 else None

    def slowdown(self) -> float | None:
        """Recent step time over the baseline, minus 1 (None before a baseline exists)."""
        if len(self.durations) < WARMUP + RECENT or self.base_s <= 0:
            return None
        recent = statistics.median(list(self.durations)[-RECENT:])
        return round(recent / self.base_s - 1.0, 3)

    def loss_since(self, since_ns: int) -> float | None:
        """The job's steps since `since_ns` over its baseline, minus 1: the median of the
        iterations that ended after it, `RECENT` - 1 of them at least (None: too few, or no
        baseline yet)."""
        after = [d for d, t in zip(self.durations, self.ends) if t > since_ns]
        if len(after) < RECENT - 1 or self.base_s <= 0 or len(self.durations) <= WARMUP:
            return None
        return statistics.median(after) / self.base_s - 1.0

    def loss_around(self, since_ns: int) -> float | None:
        """The job's steps since `since_ns` over its steps before it, minus 1: the median of the
        iterations past the warm-up that ended after it (`RECENT` - 1 at least) over the median
        of those that ended before it (one at least); None: too few either side. Where the
        baseline is not settled before `since_ns` (iterations minutes apart)."""
        durs, ends = list(self.durations)[WARMUP:], list(self.ends)[WARMUP:]
        before = [d for d, t in zip(durs, ends) if t <= since_ns]
        after = [d for d, t in zip(durs, ends) if t > since_ns]
        if not before or len(after) < RECENT - 1:
            return None
        return statistics.median(after) / statistics.median(before) - 1.0

    def evaluate(self, now_ns: int, coords: dict[int, dict], open_ranks: set[int], world: int = 0) -> dict[int, dict]:
        """Judge every complete iteration not judged yet: one every rank that reports
        iterations reported; one most of them reported, once the others have been waited for
        (`LATE_REPORT_NS`, or `LATE_REPORT_SHARE` of a step, after its newest report: the
        straggler reports last, and judged without it an iteration names nobody; generator
        A's 2x rank of a data-parallel job with 20 s steps reported 0.25 s after its 15 peers,
        every iteration was judged without it, and it was missed); or an older one when a later
        is (with `world`, the job's size: only those every rank of it reported, as soon as the
        last one does); returns the ranks slow by their phases now (rank -> evidence)."""
        need = max(len(self.ranks), world)
        cadence = statistics.median(self.durations) if self.durations else None
        for it in sorted(self.iters):
            if it <= self.judged:
                continue
            got = self.iters[it]
            if world:
                if len(got) < need:
                    break
            elif len(got) < need or self.judged < 0:
                # the job's first iteration: which ranks report is not known yet (the first
                # report alone is every rank seen), and its cadence is that iteration's own steps
                step = cadence if cadence is not None else statistics.median(d for d, _, _ in got.values())
                grace = max(LATE_REPORT_NS, LATE_REPORT_SHARE * 1e9 * step)
                waited = len(got) >= max(1, 0.9 * need) and now_ns - max(t for _, _, t in got.values()) >= grace
                if not waited and not any(i > it and len(v) >= 0.9 * need for i, v in self.iters.items()):
                    break
            self._judge(it, got, coords, open_ranks)
            self.judged = it
        return self.verdicts

    def warmed(self) -> bool:
        """Whether the iteration judged last is past the warm-up: more than `WARMUP` judged, or
        the second where it and the first each took `WARMUP_S` or more. Warm-up (compilation,
        autotuning, the allocator's growth) costs seconds, paid in the first iterations; in a
        job whose steps are that long, the second is a step like any other. Generator A's rank
        2.4x slow from the start of a data-parallel job with 29 s steps was named after its
        third iteration (88 s), judged conclusive (every phase stretched alike) by each."""
        d = self.durations
        return len(d) > WARMUP or (len(d) >= 2 and d[0] >= WARMUP_S and d[1] >= WARMUP_S)

    def noise(self) -> float | None:
        """How far a healthy rank's phase ratio strays from 1 in this job, iteration to
        iteration (uneven batches, jitter): per rank and phase, the range of its ratios over
        the kept iterations scaled to a standard deviation (`RANGE_SIGMAS`), the median
        over them. A rank that stands apart in every iteration (slow from the start) moves
        little. None under two of them (not known yet)."""
        return _moves(self.spread)

    @staticmethod
    def _conclusive(stretched: list[float], grouped: bool, noise: float | None, own: float | None = None) -> bool:
        """One iteration decides: a slower device stretches every phase by one factor, a pause
        adds its time to the phase it falls in; every phase stretched alike (each >=
        `ALIKE_RATIO`, or `ALIKE_QUIET` where the job's phases stray `QUIET` at most: there
        1.2x is ten of their deviations; the simulator's GPU downclocked 1.52x from inside an
        iteration had it stretched 1.25x alike, and was named a second slowed iteration
        later). Not for a group slow as a whole: its members wait on each other inside
        their phases, so a member that only waits has them stretched alike too. (One iteration
        decides too where a phase of the rank is `FAST_RATIO` x its peers' and `LONG_EXCESS_MS`
        longer, `_judge`: a pause that long is a fault by itself, and in a job of long steps a
        second iteration comes a minute later. Generator B's rank 2x slower in forward from
        35 s of a job with 30 s steps, 1.9x and 26 s longer in its first slowed iteration, was
        missed in every draw of its 150 s capture: the second ended after it.) A rank found
        waiting in a phase (its TP group slower there as a whole, waiting on a member or on the
        pipeline; or waiting for a peer outside its phases) has that phase stretched by the
        wait, not by its device: no one iteration decides for it (`WAITS_NOT_STRETCH`; the
        eighth generator's allocator retries on rank 17, 300-600 ms every 3-7 iterations: in
        such an iteration the next stage's TP group waited 1.6x in forward for 17's
        activations, and rank 21, 17's pipeline peer, 1.56x in backward for 17 to take its
        gradients; 21 was named P2 on that one iteration, 'every phase stretched alike')."""
        least = ALIKE_QUIET if noise is not None and noise <= QUIET else ALIKE_RATIO
        return (len(stretched) == len(PHASES) and min(stretched) >= least
                and max(stretched) <= UNIFORM * min(stretched) and not grouped
                and (own is None or own - 1.0 >= OWN_SHARE * (min(stretched) - 1.0)))

    @staticmethod
    def _local_ratios(got: dict, members: list[int]) -> dict[int, float]:
        """Per member, its `LOCAL_PHASE` time over the median of the others' (the phase's
        share of the step does not matter here: it only tells a slow TP group's members apart)."""
        vals = {r: got[r][1].get(LOCAL_PHASE, 0.0) for r in members if got[r][1]}
        vals = {r: v for r, v in vals.items() if v > 0}
        if len(vals) < 3:
            return {}
        return {r: v / ref for (r, v), ref in zip(vals.items(), _medians_of_others(list(vals.values()))) if ref > 0}

    def _judge(self, it: int, got: dict, coords: dict[int, dict], open_ranks: set[int]) -> None:
        step = statistics.median(d for d, _, _ in got.values())
        self.durations.append(step)
        self.last_end_ns = max(t for _, _, t in got.values())
        self.ends.append(self.last_end_ns)
        n = len(self.durations)
        if n > WARMUP:
            if self.base_s <= 0 or n <= WARMUP + RECENT:
                self.base_s = statistics.median(list(self.durations)[WARMUP:]) if n > WARMUP else step
                if n == WARMUP + RECENT:
                    self.settled_ns = self.last_end_ns
            elif step < self.base_s:
                self.base_s += BASE_LEARN * (step - self.base_s)
        loss = self.slowdown()
        self.losing = loss is not None and (loss >= LOCAL_LOSS or (self.losing and loss >= LOCAL_LOSS / 2))
        verdicts: dict[int, dict] = {}
        self.ratio = {}
        stretched: dict[int, list[float]] = {}  # per rank, its ratio in each phase (>= ALIKE_MIN_SHARE)
        groups_of: dict[int, tuple] = {}  # ranks of a tensor-parallel group slow as a whole
        waiting: set[int] = set()  # ranks whose slower phase is a wait on their group's slow member
        waited_in: dict[int, set[str]] = {}  # ... and those phases, per rank
        picked: dict[int, float] = {}  # a rank told from its slower TP group by its `LOCAL_PHASE` ratio alone
        local_of: dict[int, float] = {}  # `LOCAL_PHASE` ratios, where a phase had slower groups
        borrowed: set[int] = set()  # ... not slower itself in the phase: its peers' ratio in it (they wait for it)
        spread: dict[tuple[int, str], float] = {}
        for phase in PHASES:
            vals = {r: p[phase] for r, (_, p, _) in got.items() if p and p.get(phase, 0) > 0}
            if len(vals) < 2:
                continue
            groups: dict[int, list[int]] = {}
            for r in vals:
                groups.setdefault(int(coords.get(r, {}).get("pp", 0)), []).append(r)
            expected: dict[int, int] = {}
            for r in self.ranks:  # the ranks that report iterations (a hook may run on some only)
                stage = int(coords.get(r, {}).get("pp", 0))
                expected[stage] = expected.get(stage, 0) + 1
            for stage, members in groups.items():
                if len(members) < 2 or len(members) < expected.get(stage, 0):
                    continue  # a rank of the stage has not reported this iteration: who stands out is not known
                ratios = {}
                for r, ref in zip(members, _medians_of_others([vals[q] for q in members])):
                    if ref > 0 and ref >= PHASE_MIN_SHARE * got[r][0] * 1e3:
                        spread[(r, phase)] = vals[r] / ref
                    if ref > 0 and ref >= ALIKE_MIN_SHARE * got[r][0] * 1e3:
                        stretched.setdefault(r, []).append(vals[r] / ref)
                    if ref > 0 and ref >= PHASE_MIN_SHARE * got[r][0] * 1e3:
                        ratios[r] = (vals[r] / ref, ref)
                # a straggler stands out alone; a phase in which many ranks are slower holds
                # waits (they wait on someone inside the phase), not their own compute. Tensor-
                # parallel peers wait inside the phase for their slow peer (GPU-timed phases
                # hold the NCCL kernels): a TP group over counts once, and which of its members
                # is slow is told by the phase its members compute apart (`LOCAL_PHASE`); when
                # every member is slower there too, the whole group is (a slow node)
                over = [r for r, (x, _) in ratios.items() if x >= 1 + self.slow_impact]
                waited = [r for r in over if self._waited_outside(r, phase, vals[r] - ratios[r][1], got, members, coords)]
                for r in waited:
                    over.remove(r)
                    del ratios[r]
                    waiting.add(r)
                    waited_in.setdefault(r, set()).add(phase)
                # ... or for a slow rank of its pipeline, or of its data-parallel group
                for find in (self._waited_in_pipeline, self._waited_in_reduction):
                    for r in find(over, got, members, coords, open_ranks):
                        over.remove(r)
                        del ratios[r]
                        waiting.add(r)
                        waited_in.setdefault(r, set()).add(phase)
                groups_over: dict = {}
                for r in over:
                    groups_over.setdefault(tp_group(coords.get(r)) or ("rank", r), []).append(r)
                # ... yet they stay in their group: a stalled member whose phase still holds waits
                # for the group's slow member is not the slow one (generator C's 256-rank job
                # drawn with 19000: rank 133 1.5x; its TP peer 132 stalled outside its phases
                # once, its other peers waited for 132 in forward and were left out, and 132,
                # 1.35x in forward for its waits on 133, stood alone and was named P3)
                for r in waited if WAITED_IN_GROUP else ():
                    if tp_group(coords.get(r)) in groups_over:
                        groups_over[tp_group(coords.get(r))].append(r)
                local = self._local_ratios(got, members) if groups_over else {}
                local_of.update(local)
                # ... not a group next to a slow rank in its pipeline: it waits there for that
                # rank's stage, and one iteration's jitter in the short local phase would name
                # a member of it (`_behind_slow`)
                apart = {g: [r for r in group if local.get(r, 0.0) >= 1 + self.slow_impact]
                         if not _behind_slow(g, open_ranks, coords) else [] for g, group in groups_over.items()}
                for g in groups_over if WAITED_FOR_APART else ():
                    if not apart[g] and not _behind_slow(g, open_ranks, coords):
                        told = _apart_in_group([r for r in members if tp_group(coords.get(r)) == g], local, got,
                                               self.slow_impact)
                        if told is not None:
                            apart[g], local[told[0]] = [told[0]], told[1]
                whole = {g for g, group in groups_over.items() if _whole(g, group, apart[g], local, members, coords)
                         or PAIR_WAITED_FOR and len(groups) == 1 and not apart[g] and _pair_waited_for(
                             g, group, members, local, coords, self.slow_impact)}
                # the slow member of a TP group need not be slower in the phase itself: its peers
                # wait for it inside their TP calls, it does not (generator E's 1.25x rank of a TP 8
                # x DP 16 job under a host-enqueue probe, drawn with 7: its seven peers 1.14x in
                # forward, it 1.06x, under `slow_impact`; only it computed its optimizer step
                # slower, 1.17x; named nobody). Alone apart there while every other member is
                # slower in the phase, it is the group's slow member, slower by its peers' ratio
                # (what the group loses waiting on it). Only where the phases hold the TP calls'
                # waits (`device`: CUDA events around NCCL kernels; a host-blocking backend's CPU
                # phases leave them out, as in the gloo job whose TP pair's slow rank, 4x in
                # forward, was passed over for its peer, whose optimizer step had been 1.15x)
                for g, group in groups_over.items() if PEERS_WAIT_INSIDE and self.device else ():
                    if apart[g] or g in whole:
                        continue
                    mates = [r for r in members if tp_group(coords.get(r)) == g]
                    own = [r for r in mates if r not in group and r in ratios and local.get(r, 0.0) >= 1 + self.slow_impact]
                    top = max((ratios[q][0] for q in group if q in ratios), default=0.0)
                    # every other member slower in the phase, and its own step stretched by half
                    # their excess at least (`OWN_SHARE`: a slower device stretches it too)
                    if len(own) == 1 and len(group) + 1 == len(mates) and local[own[0]] - 1.0 >= OWN_SHARE * (top - 1.0):
                        ratios[own[0]] = (max(top, ratios[own[0]][0]), ratios[own[0]][1])
                        borrowed.add(own[0])
                        group.append(own[0])
                        apart[g] = own
                # a member alone over the line whose TP peer is nearly as slow in the phase shares
                # its excess with it: one computes slower, the other waits for it inside its TP
                # calls (GPU-timed phases hold them), and which is which the phase cannot tell.
                # The twelfth generator's rank whose GPU slowed gradually (TP 2 x PP 2 x DP 4):
                # at 1.09x its TP peer's forward, 1.11x, was over the line, its own 1.10x not,
                # and the peer was named P3 a minute before it
                for g, group in groups_over.items() if SHARED_IN_GROUP and self.device else ():
                    if len(group) != 1 or apart[g] or g in whole or group[0] not in ratios:
                        continue
                    r = group[0]
                    excess = ratios[r][0] - 1.0
                    if any(q != r and q in ratios and tp_group(coords.get(q)) == g
                           and ratios[q][0] - 1.0 >= SHARED_SHARE * excess for q in members):
                        ratios.pop(r)
                        waiting.add(r)
                        waited_in.setdefault(r, set()).add(phase)
                if len(groups_over) > max(1, STRAGGLER_SHARE * len(members)) and not (
                        all(len(a) == 1 or g in whole for g, a in apart.items())
                        and 2 * len(groups_over) <= len({tp_group(coords.get(r)) or r for r in members})):
                    continue  # many slower, and not each shown slow by its own compute (at most half): waits
                for g, group in groups_over.items():
                    if len(group) < 2:
                        continue
                    if g in whole:  # every member slower in its own compute too, alike: the group is slow (a slow node)
                        for r in group:
                            groups_of[r] = g
                        continue
                    for r in group:
                        if len(apart[g]) != 1 or r != apart[g][0]:
                            ratios.pop(r, None)
                            waiting.add(r)
                            waited_in.setdefault(r, set()).add(phase)
                        else:
                            picked[r] = local[r]
                for r, (ratio, ref) in ratios.items():
                    if ratio > self.ratio.get(r, 0.0):
                        self.ratio[r] = ratio
                        verdicts.setdefault(r, {})["_best"] = (ratio, ref, phase)
        # the distributed optimizer's all-gather makes every member of a data-parallel group as
        # slow in its optimizer step as the slowest: where every member is slower there, alike,
        # `LOCAL_PHASE` points at the group, not the member. Where it tells several of them
        # apart from their TP groups, the one whose group is slowest is slow (generator E's
        # two 1.3x ranks of a TP 4 x PP 2 x DP 8 job, f17: culprit 11's data-parallel peer 51,
        # whose TP group waits in the pipeline on the other culprit's, was named P3 at 1.1x
        # beside 11's 1.2x); the others wait
        by_gather: dict[tuple, list[int]] = {}
        for r in picked if ONE_PER_GATHER else ():
            key = dp_group(coords.get(r))
            if r in self.ratio and key is not None:
                by_gather.setdefault(key, []).append(r)
        for key, rivals in by_gather.items():
            peers = [q for q in local_of if dp_group(coords.get(q)) == key]
            if len(rivals) < 2 or any(local_of[q] < 1 + self.slow_impact for q in peers):
                continue  # not the group's gather: each computes apart slower itself
            # slowest over the kept iterations in which one of them stood out, this one's
            # included (one iteration's jitter would hand it from one to the other and back, and
            # each time reset the culprit's streak). Iterations before the onset tell nothing of
            # which is slower: counted, their jitter decided it (generator E's f17 drawn with 15:
            # for the first iterations after the onset, 51 won by the kept iterations' medians,
            # 1.00 against 1.00, and was named P3 at 1.14x ten iterations before 11)
            def worst(q: int, d: dict) -> float:
                return max((d[(q, ph)] for ph in PHASES if (q, ph) in d), default=1.0)

            shown = [d for d in (*self.spread, spread) if any(worst(q, d) >= 1 + self.slow_impact for q in rivals)]
            slowest = max(rivals, key=lambda q: (statistics.median([worst(q, d) for d in shown] or [1.0]),
                                                 self.ratio[q], -q))
            for r in rivals:
                if r != slowest:
                    del self.ratio[r]
                    verdicts.pop(r, None)
                    waiting.add(r)
        if spread:
            self.spread.append(spread)
        noise = self.noise()
        for r in waiting - set(self.ratio):
            if r in self.models:  # a streak does not carry over an iteration spent waiting
                self.models[r].idle()
        out = {}
        for r, ratio in self.ratio.items():
            m = self.models.get(r)
            if m is None:
                m = self.models[r] = RankModel(self.model_kind, self.slow_impact, self.slow_windows)
            _, ref, phase = verdicts[r]["_best"]  # its largest phase ratio (`ratio`): ref, phase
            mine = got[r][1][phase]
            long_excess = ratio >= FAST_RATIO and mine - ref >= LONG_EXCESS_MS and r not in groups_of
            alike = () if WAITS_NOT_STRETCH and waited_in.get(r) else stretched.get(r, ())
            onset = m.update(ratio, self.last_end_ns, self.last_end_ns, held=r in open_ranks,
                             conclusive=self._conclusive(alike, r in groups_of, noise, picked.get(r)) or long_excess,
                             noise=noise)
            if onset is None or not self.warmed():  # the first iterations seen (a job resumed
                # from a checkpoint starts at its iteration, and warms up all the same)
                continue
            step_ms = got[r][0] * 1e3
            out[r] = {"ratio": round(ratio, 3), "slowdown": round(ratio - 1.0, 3), "iteration": it, "phase": phase,
                      "phase_ms": round(mine, 3), "peers_phase_ms": round(ref, 3),
                      "impact": round(min(1.0, ((ratio - 1.0) * ref if r in borrowed else mine - ref) / step_ms), 4)
                      if step_ms > 0 else 0.0,
                      "onset_ns": int(onset - step * 1e9), "signal": "phases"}
            if r in groups_of:
                out[r]["group"] = "tp:" + ",".join(f"{k}={v}" for k, v in groups_of[r])
            elif r in picked:
                out[r]["apart"] = True  # told from its TP group, whose members wait for it in the phase
        # a rank slower by a small fraction of the largest excess is its echo (`slow.dominant`):
        # generator A's 2x rank of a TP=1 pipeline, drawn with SEED 2, had another pipeline's
        # last stage 1.10x in backward (its data-parallel reduction waits there for the slow
        # pipeline's), named P3 at the culprit's 2.0x in forward
        self._horizon(it, got, coords, open_ranks, step, noise, out)
        self.verdicts = dominant(out, open_ranks)
        self._judge_local(it, got, coords, open_ranks, step)

    def _horizon(self, it: int, got: dict, coords: dict[int, dict], open_ranks: set[int], step: float,
                 noise: float | None, out: dict[int, dict]) -> None:
        """A tensor-parallel member slower by a few tens of percent in a job whose iterations
        stray nearly as much: judged over the kept iterations, not one by one. Its phases'
        medians over them (forward and backward, each known in `HORIZON_MIN` of them) stand
        `HORIZON_SIGMAS` of their standard error (from the job's noise) over its stage's, and
        over `slow_impact`; of its group, it alone computes slower apart (`LOCAL_PHASE`'s median
        over them), its peers like the stage. Its TP peers wait for it inside their phases, so
        those are stretched too, and in a single iteration jitter makes other groups as slow:
        generator A's 1.25x rank of a 2x2x8 job whose ranks' iterations stray 10 % each, drawn
        with SEED 10, was judged in few iterations (many groups over, or its own phase under
        the threshold the noise sets) and never named in 40 s. Where the peers' local phases
        are slower too (a slow node), or no group (TP = 1: a pipeline's next stage waits inside
        its phases alike), nothing is concluded here."""
        stages: dict[int, list[int]] = {}
        for r in got:
            stages.setdefault(int(coords.get(r, {}).get("pp", 0)), []).append(r)
        raw: dict[int, float] = {}
        for members in stages.values():
            raw.update(self._local_ratios(got, members))
        self.local_raw.append(raw)
        if noise is None or not self.warmed() or len(self.spread) < HORIZON_MIN:
            return
        groups: dict[tuple, list[int]] = {}
        for r in got:
            g = tp_group(coords.get(r))
            if g is not None:
                groups.setdefault(g, []).append(r)

        def median(key, kept: deque) -> float | None:
            vals = [d[key] for d in kept if key in d]
            return statistics.median(vals) if len(vals) >= HORIZON_MIN else None

        def stretched(r: int) -> tuple[float, int, list[float]] | None:
            """(its least phase median, iterations they are over, the medians); None: unknown."""
            meds = [median((r, phase), self.spread) for phase in PHASES]
            if None in meds:
                return None
            return min(meds), min(sum((r, phase) in d for d in self.spread) for phase in PHASES), meds

        def threshold(n: int) -> float:
            return 1 + max(self.slow_impact, HORIZON_SIGMAS * MEDIAN_SE * noise / n ** 0.5)

        # as in a single iteration, a stage in which more than one group (`STRAGGLER_SHARE`) is
        # slower holds waits: a slow rank's data-parallel peers wait for it inside GPU-timed
        # phases (generator A's draw with SEED 1: a peer 1.2x for six iterations, named)
        over: dict[int, int] = {}
        total: dict[int, int] = {}
        for g, members in groups.items():
            stage = int(coords.get(members[0], {}).get("pp", 0))
            total[stage] = total.get(stage, 0) + 1
            figs = [f for f in map(stretched, members) if f is not None]
            if any(x >= threshold(n) for x, n, _ in figs):
                over[stage] = over.get(stage, 0) + 1
        for members in groups.values():
            stage = int(coords.get(members[0], {}).get("pp", 0))
            if len(members) < 2 or over.get(stage, 0) > max(1, STRAGGLER_SHARE * total[stage]):
                continue
            local = {r: median(r, self.local_raw) for r in members}
            apart = [r for r in members if (local[r] or 0.0) >= 1 + self.slow_impact]
            if len(apart) != 1 or any(local[q] is None or local[q] >= 1 + self.slow_impact / 2
                                      for q in members if q != apart[0]):
                continue
            r = apart[0]
            fig = stretched(r)
            if r in out or fig is None:
                continue
            ratio, n, meds = fig
            if ratio < (1 + self.slow_impact / 2 if r in open_ranks else threshold(n)):
                continue
            phase = PHASES[meds.index(max(meds))]
            mine = got[r][1].get(phase, 0.0)
            ref = mine / max(meds) if mine > 0 else 0.0
            step_ms = step * 1e3
            out[r] = {"ratio": round(max(meds), 3), "slowdown": round(max(meds) - 1.0, 3), "iteration": it,
                      "phase": phase, "phase_ms": round(mine, 3), "peers_phase_ms": round(ref, 3),
                      "impact": round(min(1.0, (mine - ref) / step_ms), 4) if step_ms > 0 else 0.0,
                      "onset_ns": int(self.last_end_ns - n * step * 1e9), "signal": "phases",
                      "over_iterations": n}

    @staticmethod
    def _waited_in_pipeline(over: list[int], got: dict, members: list[int], coords: dict[int, dict],
                            open_ranks: set[int]) -> list[int]:
        """Of the ranks slower than their stage in a phase (`over`), those next to a rank named
        slow already in their pipeline (`_behind_slow`), not named themselves: a stage waits for
        its neighbour's activations in forward, and for its gradients in backward, inside the
        phase. The fifteenth generator's 1.6x rank 5 of a TP 2 x PP 2 x DP 4 job, drawn with 4:
        named at 48 s; its next stage's rank 6, 1.2x in forward waiting for its pipeline, was
        named P3 at 55 s (its TP peer 7, 1.1x, under the line)."""
        if not BEHIND_SLOW_WAITS:
            return []
        return [r for r in over if r not in open_ranks and _behind_slow(tp_group(coords.get(r)), open_ranks, coords)]

    def _waited_in_reduction(self, over: list[int], got: dict, members: list[int], coords: dict[int, dict],
                             open_ranks: set[int]) -> list[int]:
        """Of the ranks slower than their stage in a phase (`over`), those that waited there for
        a data-parallel peer: every member of a data-parallel group (three or more) but one is
        over, and that one computes apart slower (`LOCAL_PHASE`, no collective waits in it).
        The group's gradient reduction runs inside the phase and ends when its slowest member's
        gradients are in: its peers wait inside it, the slow member does not. The fifteenth
        generator's 1.5x rank 10 of a TP 8 x DP 4 job, drawn with 4: its data-parallel peers
        2, 18 and 26 1.16x in backward (0.67x in forward, their steps like everyone's), it 1.5x
        in its optimizer step; the three were named P3 beside it."""
        if not DP_PEERS_WAIT:
            return []
        by_dp: dict[tuple, list[int]] = {}
        for r in over:
            g = dp_group(coords.get(r))
            if g is not None:
                by_dp.setdefault(g, []).append(r)
        out: list[int] = []
        local: dict[int, float] | None = None
        for g, group in by_dp.items():
            rest = [r for r in members if dp_group(coords.get(r)) == g and r not in group]
            if len(group) < 2 or len(rest) != 1:
                continue
            if local is None:
                local = self._local_ratios(got, members)
            if local.get(rest[0], 0.0) >= 1 + self.slow_impact:
                out.extend(group)
        return out

    def _waited_outside(self, r: int, phase: str, excess_ms: float, got: dict, members: list[int],
                        coords: dict[int, dict]) -> bool:
        """Whether rank `r`, slower than its stage by `excess_ms` in `phase`, spent that time
        waiting there for a tensor-parallel peer that was outside every phase meanwhile (its
        data loader, its host stalled): the peer's time outside its phases (its step less their
        sum) exceeds `r`'s by half that excess or more, while the peer's phase is not slower.
        The TP calls are inside the phase, so the waiting member's phase holds the peer's stall
        (the third generator's random one-off stalls: two ranks named P1, 1.06 s slower in
        forward in two iterations, their TP peers 1.06 s outside every phase). Only where the
        job's collectives run on devices (`device`, from stage 1): the hook times phases by CUDA
        events there, which hold the collective kernels and their waits; on a host-blocking
        backend it leaves the time inside blocking collectives out of the phases, so a peer
        waiting for a slow rank is outside its phases meanwhile."""
        g = tp_group(coords.get(r))
        if g is None or not self.device:
            return False

        def outside(q: int) -> float:
            dur, phases, _ = got[q]
            return dur * 1e3 - sum(v for v in phases.values() if v > 0)

        mine, own = outside(r), got[r][1].get(phase, 0.0)
        return any(q != r and got[q][1].get(phase, 0.0) <= own - excess_ms / 2 and outside(q) - mine >= excess_ms / 2
                   and tp_group(coords.get(q)) == g for q in members)

    def _judge_local(self, it: int, got: dict, coords: dict[int, dict], open_ranks: set[int], step: float) -> None:
        """Ranks alone slower in `LOCAL_PHASE`, the phase a rank computes apart from its peers
        (no collective waits in it), per stage: a slower device's forward and backward can be
        hidden, every peer waiting for it inside them (MoE's all-to-alls under a host-enqueue
        probe: every rank's phases alike, its collectives untimed), while its local phase
        shows it. That phase is short (a few % of a step: no cost of its own), so it names a
        rank only to explain a job measurably slower than its own baseline (`job_stage.py`,
        `LOCAL_LOSS`); judged by the rank model against the phase's own spread."""
        stages: dict[int, list[int]] = {}
        for r in got:
            stages.setdefault(int(coords.get(r, {}).get("pp", 0)), []).append(r)
        ratios: dict[int, float] = {}
        for members in stages.values():
            local = self._local_ratios(got, members)
            over = [r for r, x in local.items() if x >= 1 + self.slow_impact]
            if len(over) > 1:  # not one straggler: a slow group, or uneven work
                local = {r: x for r, x in local.items() if r not in over}
            ratios.update(local)
        if ratios:
            self.local_spread.append(ratios)
        noise = _moves(self.local_spread)
        out = {}
        for r, ratio in ratios.items():
            m = self.local_models.get(r)
            if m is None:
                m = self.local_models[r] = RankModel(self.model_kind, self.slow_impact, self.slow_windows)
            onset = m.update(ratio, self.last_end_ns, self.last_end_ns, held=r in open_ranks, noise=noise)
            if onset is None or not self.warmed():
                continue
            mine = got[r][1][LOCAL_PHASE]
            out[r] = {"ratio": round(ratio, 3), "slowdown": round(ratio - 1.0, 3), "iteration": it,
                      "phase": LOCAL_PHASE, "phase_ms": round(mine, 3), "peers_phase_ms": round(mine / ratio, 3),
                      "impact": 0.0, "onset_ns": int(onset - step * 1e9), "signal": "phases"}
        for r in [r for r in self.local_models if r not in ratios and r not in open_ranks]:
            self.local_models[r].idle()
        if not self.losing:  # each rank's usual level in the phase, while the job loses nothing
            for r, ratio in ratios.items():
                self.local_level[r] = ratio if r not in self.local_level else \
                    self.local_level[r] + LEVEL_LEARN * (ratio - self.local_level[r])
        self.local_verdicts = out


def _moves(spread: deque) -> float | None:
    """Per key (a rank, or a rank and phase), the range of its ratios over the kept iterations
    scaled to a standard deviation (`RANGE_SIGMAS`); the median over keys (None under two)."""
    per: dict = {}
    for it in spread:
        for key, v in it.items():
            per.setdefault(key, []).append(v)
    moves = [(max(vs) - min(vs)) / RANGE_SIGMAS[min(len(vs), len(RANGE_SIGMAS) - 1)]
             for vs in per.values() if len(vs) >= 2]
    if len(moves) < 2:
        return None
    return float(statistics.median(moves))


def _medians_of_others(values: list[float]) -> list[float]:
    """For each value, the median of all the others (what `statistics.median` gives), from
    one sort: O(n log n) where one median per value is O(n^2) (256 ranks in a stage).

    >>> _medians_of_others([3.0, 1.0, 2.0, 10.0])
    [2.0, 3.0, 3.0, 2.0]
    """
    n = len(values)
    order = sorted(range(n), key=values.__getitem__)
    ranked = [values[i] for i in order]
    where = [0] * n
    for p, i in enumerate(order):
        where[i] = p
    m, out = n - 1, []
    for i in range(n):
        p = where[i]
        hi, lo = m // 2, m // 2 - 1  # the middle of the others, as indices among them
        a = ranked[hi + (hi >= p)]
        out.append(a if m % 2 else (ranked[lo + (lo >= p)] + a) / 2)
    return out


def _whole(g: tuple, group: list[int], apart: list[int], local: dict[int, float], members: list[int],
           coords: dict[int, dict]) -> bool:
    """Whether the tensor-parallel group `g` is slow as a whole in a stage's phase: every
    member of it in the stage is slower (`group`) and slower in its own compute (`apart`:
    `LOCAL_PHASE`), alike (the least excess there `WHOLE_ALIKE` of the largest). Several such
    groups at once are a slow node's, not waits: under Megatron's own rank order (the stage
    outermost) a node holds several data-parallel replicas of one stage, each a whole TP
    group; the job model's 1.3x node holding four of a stage's eight, under a host-enqueue
    probe (its phases the only sign), was taken for waits and named nobody."""
    if len(group) < 2:
        return False
    excess = [local[r] - 1.0 for r in group if r in local]
    return sorted(apart) == sorted(group) == sorted(
        r for r in members if (tp_group(coords.get(r)) or ("rank", r)) == g) and min(excess) >= WHOLE_ALIKE * max(excess)


def _pair_waited_for(g: tuple, group: list[int], members: list[int], local: dict[int, float],
                     coords: dict[int, dict], slow_impact: float) -> bool:
    """Whether the tensor-parallel pair `g` of a job with one stage (no pipeline: nobody it
    could be waiting for in its phases but its own members) is slow as a whole: both slower in
    the phase, and the rest of the stage waiting for them in `LOCAL_PHASE` (their own step
    there `slow_impact` shorter than the stage's: the others' holds the data-parallel
    reduction's wait for them). Which of the two is slow, nothing tells: with no third member,
    `_apart_in_group` has no median to hold either against, and under host-enqueue no record
    separates them (their TP calls complete together). Named together: the eighth generator's
    packed-sequence job (TP 2 x DP 16, host-enqueue), rank 13 1.5x from 35 s, its pair 1.5x in
    forward and backward, its optimizer steps half the stage's, named nobody."""
    mates = [r for r in members if tp_group(coords.get(r)) == g]
    return len(mates) == 2 and sorted(group) == sorted(mates) and all(
        r in local and local[r] <= 1.0 - slow_impact for r in mates)


def _apart_in_group(mates: list[int], local: dict[int, float], got: dict, slow_impact: float
                    ) -> tuple[int, float] | None:
    """The member of a tensor-parallel group slower than its group in `LOCAL_PHASE`, where the
    rest of its stage waits for the group there: every member's local phase is `slow_impact`
    shorter than the stage's (the others' hold their waits for it: the data-parallel
    gradient buckets of a second stream, which the optimizer step waits for), so against the
    stage nobody of it is apart. (it, its time over the median of its group's others), or
    None. The sixth generator's q19 (TP 4 x DP 16, host-enqueue probe, DP buckets overlapping
    backward): rank 37 1.3x from 20 s; its group 1.3x in forward and backward, its peers
    waiting for it inside; their optimizer steps 30 ms against the stage's 300 ms, 37's
    49 ms: named nobody, the job's steps 24 % over its baseline 'unexplained'."""
    if len(mates) < 3 or any(local.get(r, 1.0) > 1.0 - slow_impact for r in mates):
        return None
    vals = [got[r][1].get(LOCAL_PHASE, 0.0) if got[r][1] else 0.0 for r in mates]
    if min(vals) <= 0:
        return None
    rel = {r: v / ref for r, v, ref in zip(mates, vals, _medians_of_others(vals))}
    over = [r for r, x in rel.items() if x >= 1.0 + slow_impact]
    if len(over) != 1 or any(abs(x - 1.0) > slow_impact / 2 for r, x in rel.items() if r != over[0]):
        return None
    return over[0], rel[over[0]]


def dp_group(c: dict | None) -> tuple | None:
    """The ranks of one data-parallel group share every coordinate but `dp` (None: unknown)."""
    return coords_but(c, "dp") if c and "dp" in c else None


def _behind_slow(g: tuple, slow: set[int], coords: dict[int, dict]) -> bool:
    """Whether the TP group `g` (`tp_group`) is next to one named slow (`slow`) in its pipeline:
    the same coordinates but `pp`, one stage before or after. Its members wait for that stage
    inside their phases, every one alike: which of them is slow, if any, a short local phase
    does not tell (generator D's rank 22 slowing gradually, TP 4 x PP 4 x DP 2 under a
    host-enqueue probe, drawn with 18: named at 26 s; at 52 s its next stage's TP group, 1.24x
    in forward waiting for it, had rank 25 1.11x in its optimizer step for one iteration, and
    25 was named P3 beside it)."""
    if not slow or not g or g[0] == "rank":  # no group of known coordinates (`("rank", r)`: the rank alone)
        return False
    mine = dict(g)
    if "pp" not in mine:
        return False
    for q in slow:
        c = coords.get(q)
        if c and "tp" in c and "pp" in c and abs(int(c["pp"]) - int(mine["pp"])) == 1 and all(
                v == mine.get(k) for k, v in c.items() if k not in ("tp", "pp")):
            return True
    return False


def tp_group(c: dict | None) -> tuple | None:
    """The ranks of one tensor-parallel group share every coordinate but `tp` (None: unknown)."""
    return coords_but(c, "tp") if c and "tp" in c else None
