"""Stage 2's slow-rank rules for one job, mixed into `JobStage` (`job_stage.py` has the contract).

Compute shares (`slow.py`), iteration phases (`steps.py`) and slow hosts (`host_gate.py`) ->
one `slow_rank` incident per culprit (a node's ranks together, `_slow_units`), not its
victims: echoes of a named rank, ranks waiting in their phases on it, and finds the job does
not feel are held back; a stage slower from the start is one P3 advisory, a job slower than
its own baseline with no culprit one P3, unless GPUs' clocks fell together: then they are
its culprits (`_clocks_fell`); GPUs whose clocks fell with a slow group's join it
(`_clock_mates`).
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import TYPE_CHECKING

from commwatch.streams.detect.job_hw import HW_AT_ONCE_NS, HW_CLOCK_RATIO
from commwatch.streams.detect.steps import KEEP_ITERATIONS, LOCAL_LOSS, tp_group

if TYPE_CHECKING:
    from commwatch.streams.detect.job_stage import JobState

HW_SLOW_EVIDENCE_RATIO = 0.95
CLOCK_ALIKE = 0.1  # GPUs whose clocks fell at once to within this share of a slow group's are slowed with it
LINK_LONE_APART = True  # a rank found alone on its node, in a comm apart from an open link's, is no victim of it (`_link_victims`)
P1_AFTER_NS = 10_000_000_000  # a slow rank costing half the job's time is P1 once it lasts this long
HALF_LASTS = True  # ... and costing `HALF_CLEAR` or more for `HALF_HOLD_NS` (a drill turns it off)
HALF_CLEAR = 0.4
HALF_HOLD_NS = 3_000_000_000
LOCAL_RISEN = True  # ... by a rank slower in its local phase than it was before the loss (a drill turns it off)
PEERS_BY_COMM = True  # a job without coordinates: each rank's busiest comm short of the job stands for its TP group (a drill turns it off)
PEERS_KEEP_NS = 30_000_000_000
LOCAL_JOINS = True  # a rank found by its phases that the local phase also points at costs the unexplained loss
APART_COSTS = True  # a rank told from its TP group by its local phase, alone found, costs the job's loss since (`_felt`)
LOCAL_EXPLAINED = 0.5  # a job's loss is explained once what is found costs this share of it
HEAVY = 1.25  # a lone slow rank whose messages are this much larger than its peers' does more work by design: P3
HEAVY_BY_DESIGN = True  # (a drill turns it off)
P2_AFTER_NS = 10_000_000_000  # one costing a fifth of it is P2 once it lasts this long (P3 before; half of it: P2 at once)
# ... in a job whose slow ranks come and go (another one's incident faded within `MOVING_NS`),
# or one with expert parallelism (a rank's coords name an expert-parallel index), once it lasts
# `MOVING_P2_AFTER_NS`: a hot spot that moves (MoE routing) is no ticket
MOVING_NS = 60_000_000_000
MOVING_P2_AFTER_NS = 30_000_000_000
NODE_JOIN_NS = 5_000_000_000  # a rank joins the incident of another rank of its node opened this recently (`_slow_units`)
NODE_SHARE = 0.5  # ranks of one node found within `NODE_JOIN_NS` are one fault when this share of its ranks or more (`_slow_units`)
UNFELT_SHARE = 3.0  # a rank newly found slow whose job lost under its impact / this since its onset, ...
UNFELT_LOSS = 0.05  # ... and under this, is not named (`_unfelt`)
BASELINE_SLACK_STEPS = 2  # slow in every window from this many steps after the baseline settled, and as long past it: in it (`_in_baseline`)
ECHO_CLAIM_SHARE = 0.5  # phases under this share of the excess the collectives claim: an echo (`_echoes`)
ECHO_SHOWN = True  # a rank standing out in the latest iteration's phases is a culprit to echo (`_echoes`)
JOB_SLOWDOWN = 0.2  # step time this much above the job's baseline with no culprit ...
JOB_SLOWDOWN_HOLD_NS = 20_000_000_000  # ... for this long: a P3
HANG_HOLDS = True  # no slow rank newly named while the job is hung (a drill turns it off)
UNJUDGED_KEEP_NS = 60_000_000_000  # a slow rank nothing judges now stays named this long after it was last found (`_unjudged`)


class SlowRules:
    """The slow_rank rules of `JobStage` (its slow links and hardware are `HwRules`')."""

    def _fresh_steps(self, js: JobState, now_ns: int) -> list[dict]:
        """Every rank reported an iteration between ticks: its phases are judged at once, and the
        slow-rank evaluation runs now if they name a rank not named yet (rather than at the
        next `SLOW_EVAL_NS`: in a job with 1 s steps, up to half an iteration sooner)."""
        js.steps.fresh = False
        out: list[dict] = []
        if not js.world_size:  # the job's size unknown: the next evaluation judges it
            return out
        held, before = self._slow_open(js), js.steps.judged
        verdicts = js.steps.evaluate(now_ns, self._phase_coords(js), held, js.world_size)
        if js.steps.judged > before and set(verdicts) - held:
            js.last_slow_eval = now_ns
            self._slow(js, now_ns, out)
        return out

    @staticmethod
    def _phase_coords(js: JobState) -> dict[int, dict]:
        """The coordinates iteration phases are judged by: the topology's; for a job whose
        topology gives none, each rank's busiest collective comm short of the whole job (the
        one it calls most: an FSDP/HSDP shard group, an engine's TP group) stands for its
        tensor-parallel group, since its members wait for each other inside their phases as
        TP peers do, and which of them is slow their `LOCAL_PHASE` tells (generator islands'
        HSDP job under a host-enqueue probe, drawn with 2: rank 16 1.5x, its seven shard
        peers 1.26x in forward waiting for it inside the shard all-gathers, and the node's
        eight ranks named at 1.4x; only 16 was 1.5x in its optimizer step). Kept until the
        job's comms change, for `PEERS_KEEP_NS` at most."""
        if js.coords or not PEERS_BY_COMM:
            return js.coords
        comms = js.slow.comms
        key = (len(comms), js.last_tick // PEERS_KEEP_NS)
        if js.peer_coords[0] == key:
            return js.peer_coords[1]
        world = js.world_size or len(js.node_of)
        best: dict[int, tuple[int, str, int]] = {}
        for c, ct in comms.items():
            if ct.p2p or not 2 <= len(ct.ranks) < world:
                continue
            for i, r in enumerate(ct.ranks):
                if r not in best or ct.calls > best[r][0]:
                    best[r] = (ct.calls, c, i)
        derived = {r: {"tp": i, "comm": c} for r, (_, c, i) in best.items()}
        js.peer_coords = (key, derived)
        return derived

    @staticmethod
    def _slow_open(js: JobState, rates: bool = False) -> set[int]:
        """Ranks named by open slow-rank incidents; `rates`: only those named for computing
        slower (the rate models hold them), not for stalls (`SlowTracker.stalls`: the rate
        models took each stall for a pause, and would hold the figures it inflates)."""
        return {r for inc in js.book.of_kind("slow_rank") for r in inc.culprit_ranks
                if not rates or inc.evidence.get("signal") != "stalls"}

    @staticmethod
    def _slow_units(js: JobState, found: dict[int, dict], hung: set[int], now_ns: int,
                    out: list[dict] | None = None) -> list[tuple[tuple, list[int], dict]]:
        """Incidents to assert: (key, culprit ranks, evidence). One per slow rank; ranks of one
        node found slow within seconds, one per node (a node throttled as a whole: one page);
        ranks of a group slow as a whole (`slow.py`, `steps.py`), one per group. A rank named by
        an open incident stays in it, whichever way it is found now, and a rank found later
        joins the open incident of its node or group: one fault, one incident.

        A node slow as a whole slows all its ranks, and shows them within seconds: ranks of one
        node found within `NODE_JOIN_NS` of each other are one fault once they are
        `NODE_SHARE` of its ranks or more; the incidents opened for some of them before are then
        merged into the first (resolved, events into `out`), whose culprits they join (generator
        A's slow node of a data-parallel job under host-enqueue, judged by the phases: one of
        its eight ranks first, two 1 s later, one 2 s later, the other four 1 s later; drawn
        with SEED 6, one first, alone, five others 1 s later). Fewer are named each alone: two
        of a node's eight are two faults, or a fault and noise (the eighth generator's MoE job
        drawn with 5: a hot expert's rank, 1.38x for a few iterations, and the 1.5x culprit of
        its node, found at one evaluation, were one incident, then a P1 naming both). A rank
        found long after another of its node is another fault (generator B's DDP job drawn with
        SEED 7: a rank named at 14 s by a pause, its node's 2x culprit found at 27 s joined it,
        and the incident named a non-culprit)."""
        book = js.book
        named = {r: key for key, inc in book.open.items() if inc.kind == "slow_rank" for r in inc.culprit_ranks}
        new = [r for r in found if r not in hung and r not in named]
        size = Counter(js.node_of.values())
        recent: dict[str, list[tuple]] = {}  # node -> its open incidents naming only ranks of it, opened lately
        whole: dict[str, tuple] = {}  # node -> its open incident naming `NODE_SHARE` of its ranks: its fault
        for key, inc in sorted(book.open.items(), key=lambda kv: kv[1].opened_ns):
            nodes = {js.node_of.get(r) for r in inc.culprit_ranks}
            if inc.kind != "slow_rank" or len(nodes) != 1 or None in nodes:
                continue
            node = nodes.pop()
            if len(inc.culprit_ranks) > 1 and len(inc.culprit_ranks) >= NODE_SHARE * size[node]:
                whole.setdefault(node, key)
            if now_ns - inc.opened_ns <= NODE_JOIN_NS:
                recent.setdefault(node, []).append(key)
        together: dict[tuple, list[int]] = {}
        for r in new:
            node = js.node_of.get(r)
            if node is not None:
                together.setdefault(("slow_rank", "node", node), []).append(r)
            if found[r].get("group"):
                together.setdefault(("slow_rank", "group", found[r]["group"]), []).append(r)
        node_open: dict[str, tuple] = {}  # node -> the incident its ranks found now join
        joined: dict[tuple, set[int]] = {}  # that incident -> the ranks of those merged into it
        for node in {k[2] for k in together if k[1] == "node"}:
            keys = recent.get(node, [])
            mates = set(together[("slow_rank", "node", node)]).union(*(book.open[k].culprit_ranks for k in keys))
            if node not in whole and (len(mates) < 2 or len(mates) < NODE_SHARE * size[node]):
                del together[("slow_rank", "node", node)]
                continue
            target = whole.get(node) or (keys[0] if keys else None)
            if target is None:
                continue
            node_open[node] = target
            for key in keys:
                if key == target:
                    continue
                inc = book.open[key]
                joined.setdefault(target, set()).update(inc.culprit_ranks)
                for r in inc.culprit_ranks:
                    named[r] = target
                merged = book.resolve(key, now_ns, f"one fault of {node} with {book.open[target].id}")
                if out is not None:
                    out.extend(merged)
        group_open = {inc.evidence["group"]: key for key, inc in book.open.items()
                      if inc.kind == "slow_rank" and inc.evidence.get("group")}  # a group's members found apart
        units: dict[tuple, tuple[list[int], dict]] = {}
        for r, ev in sorted(found.items()):
            if r in hung:
                continue
            by_node, by_group = ("slow_rank", "node", js.node_of.get(r)), ("slow_rank", "group", ev.get("group"))
            key = (named.get(r) or next((k for k in (by_node, by_group) if k in book.open), None)
                   or group_open.get(ev.get("group")) or node_open.get(by_node[2])
                   or next((k for k in (by_node, by_group) if len(together.get(k, ())) > 1), ("slow_rank", r)))
            units.setdefault(key, ([], ev))[0].append(r)
        res = []
        for key, (ranks, ev) in units.items():
            inc = book.open.get(key)
            ranks = sorted(set(ranks) | set(inc.culprit_ranks if inc else ()) | joined.get(key, set()))
            res.append((key, ranks, {**ev, "ranks": ranks} if len(ranks) > 1 else ev))
        return res

    def _echoes(self, js: JobState, found: dict[int, dict], phased: dict[int, dict], now_ns: int) -> list[int]:
        """Ranks the collectives newly judge slow that the iteration phases show computing like
        their peers (their largest phase ratio in the latest iteration, judged within three
        steps, under half the threshold's excess, or under half the excess the collectives
        claim), while the phases name another rank slower, or an incident does: they wait on
        it, and the waits fall between their calls of the comm they are judged in. A rank that
        computes X slower shows it in its phases (its own work); waits inside a phase add only
        what the rank waited there. Generator A's 2x rank of a TP=1 pipeline drawn with SEED
        10: its previous stage's rank, 1.21-1.35x between its pipeline calls, its phases
        0.97-1.07x (4 % noise), joined the culprit's incident as a slow node. Generator C's
        interleaved pipeline drawn with 12000: its culprit (1.5x in its phases) named at once,
        the next stage's tensor-parallel pair (phases 1.0x) named 11.5 s later as a slow node,
        2x between its TP calls, where its recvs from the culprit's stage sit in an interleaved
        schedule. The phases need not have named it yet: the latest iteration judged shows it
        standing out (`ECHO_SHOWN`; the sixth generator's HSDP job drawn with 2, rank 27 1.3x:
        its node-mate 24, 1.11x between the calls of its cross-node comm (its waits for 27 in
        the node's comm fall there), phases 1.00x, was found a tenth of a second before the
        node's other ranks, with nobody named yet, while the iteration before showed 27 at
        1.25x: named P3, then 27 joined it). Where the phases name nobody (an FSDP job: every rank waits on the culprit
        inside its phases alike), nothing is taken back; nor is a rank slow itself among
        culprits of its own group (`_slow_among`)."""
        named = self._slow_open(js)
        over = 1 + js.slow.slow_impact
        culprits = named | {r for r, ev in phased.items() if ev.get("ratio", 0.0) >= over}
        if ECHO_SHOWN:  # ... or the latest iteration shows one standing out, before its streak names it
            culprits |= {r for r, x in js.steps.ratio.items() if x >= over}
        if not culprits or now_ns - js.steps.last_end_ns > 3 * self.median_step_ns(js):
            return []  # nobody else named, or no recent iteration judged
        half = js.slow.slow_impact / 2
        out = []
        for r, ev in found.items():
            bound = 1 + max(half, ECHO_CLAIM_SHARE * (ev.get("ratio", 1.0) - 1))
            if ev.get("signal") == "collectives" and r not in culprits and not self._slow_among(js, ev, culprits) and \
                    js.steps.ratio.get(r, bound) < bound and not (
                        self._phases_blind(js, r) and ev.get("ratio", 1.0) >= self._named_ratio(js, culprits)):
                out.append(r)
        return out

    @staticmethod
    def _experts(js: JobState) -> bool:
        """Whether the job runs expert parallelism: a rank's coords (`cw.topology.v1`) give
        it an expert-parallel index other than 0 (MoE: tokens are routed to experts unevenly,
        and which rank holds the busiest expert changes as training goes)."""
        return any(c.get("ep") for c in js.coords.values() if isinstance(c, dict))

    @staticmethod
    def _named_ratio(js: JobState, ranks: set[int]) -> float:
        """The largest ratio the open slow-rank incidents naming any of `ranks` were found by."""
        return max((float(inc.evidence.get("ratio", 1.0)) for inc in js.book.open.values()
                    if inc.kind == "slow_rank" and ranks.intersection(inc.culprit_ranks)), default=1.0)

    @staticmethod
    def _phases_blind(js: JobState, rank: int) -> bool:
        """Whether `rank`'s phases compare it only with peers that wait for it: every rank of
        its pipeline stage is of its tensor-parallel group (no data parallelism), so they
        wait for it inside their phases and it computes like them there, whatever it does.
        Such a rank is taken for an echo only where it was found slower by less than the named
        culprits (`_echoes`). Generator E's TP 8 x PP 4 job without DP drawn with SEED 6: its
        1.3x last-stage rank 29, found right after a previous-stage victim (1.1x) was named,
        was taken back as the victim's echo; drawn with 2, that victim, found 1.12x after 29,
        is still its echo."""
        c = js.coords.get(rank)
        group = tp_group(c)
        if group is None:
            return False
        stage = c.get("pp", 0)
        return all(tp_group(q) == group for q in js.coords.values() if q.get("pp", 0) == stage)

    @staticmethod
    def _slow_among(js: JobState, ev: dict, culprits: set[int]) -> bool:
        """Whether a rank found slow is slow itself (`SlowTracker._slow_itself`: slower than
        its group's siblings between its group's calls) in a group that holds a culprit: its
        phases hold its waits for that slower peer, which is slow too (generator E's
        launch-bound node: seven of its eight ranks taken for echoes of the slowest)."""
        group = js.slow.comms.get(ev.get("slow_itself") or "")
        return group is not None and bool(culprits.intersection(group.ranks))

    def _waiting_in_phases(self, js: JobState, found: dict[int, dict], phased: dict[int, dict], now_ns: int) -> set[int]:
        """Ranks the phases alone name that compute clearly faster, between the calls of a
        collective comm they share, than a rank the collectives find slow or an incident names
        (`SlowTracker.waits_for`): their phases hold their waits for it inside that comm's
        calls. Generator E's MoE job (TP 2, DP 32, EP 8, GPU-timed) drawn with 1: its 1.5x
        rank 37 was named by the collectives at once; its seven expert-parallel peers, 1.28x
        in forward (their all-to-alls wait for it there) and slower in their optimizer step
        too (its expert data-parallel all-reduce waits as well), each stood alone in its TP
        pair, and were named P3 as two slow nodes 5 s later. A rank slower than the one it
        shares a comm with is not taken back: the comm's figures say who waits."""
        slow = self._slow_open(js, rates=True) | {r for r, ev in found.items() if ev.get("signal") == "collectives"}
        waited = {r for r in phased if r not in found and js.slow.waits_for(r, slow - {r})} if slow else set()
        for r in waited:
            js.phase_waiters[r] = now_ns
        # the phases judge over the iterations they keep: a rank seen waiting in them lately
        # holds those waits still, after the rank it waited for recovered. The twelfth
        # generator's TP peer of a rank throttled 1.5x for 2 minutes every 10: taken back as
        # its waiter throughout each episode, it was named P3 "55% slower" 9 s after each
        # ended (its phases normal again), on the kept iterations of the episode
        keep = KEEP_ITERATIONS * max(self.median_step_ns(js), 1e9)
        for r, t in list(js.phase_waiters.items()):
            if now_ns - t > keep:
                del js.phase_waiters[r]
            elif r in phased and r not in found:
                waited.add(r)
        return waited

    def _in_baseline(self, js: JobState, rank: int, ev: dict, now_ns: int) -> bool:
        """Whether the job's baseline step was taken while `rank` was already slow, so that
        its cost is in it: every window the collectives judged it in was slow, the first
        begun within `BASELINE_SLACK_STEPS` of the baseline settling, and it has lasted as
        many steps past it (a rank slow in its first windows by chance is normal again by
        then; before the baseline settles, a provisional one judges). A member of a group
        found slow as a whole: the group seemed slower from then (`SlowTracker.group_began`;
        its windows within the group find it like its peers). The tenth generator's
        zero-bubble pipeline (TP 2 x PP 4 x DP 2, hook with steps) with rank 5 1.5x from the
        start: found 1.47x from 3.2 s on, the job's steps never over their baseline, it was
        never named ("unfelt"); its FSDP2 job's rank 13, 2.2x from the start, stayed P3; the
        eleventh's node 1.25x from the start (TP 8 x DP 4), its TP group found slower than its
        siblings from 7.0 s, the baseline settling at 7.1 s, was never named."""
        settled = js.steps.settled_ns
        m = js.slow.models.get(rank)
        if settled is None or m is None:
            return False
        slack = int(BASELINE_SLACK_STEPS * self.median_step_ns(js))
        if settled + slack > now_ns - slack:
            return False
        if ev.get("group"):  # its windows within its group found it like its peers: the group's own figure
            since = js.slow.group_began(ev["group"])
            return since is not None and since <= settled + slack
        return m.slow_throughout(settled + slack)

    @staticmethod
    def _clocks_fell(js: JobState, clocks: dict[int, float], med_clock: float) -> list[tuple[str, int]]:
        """GPUs whose SM clocks are far under the job's (`HW_CLOCK_RATIO`), all of whose clocks fell
        within `HW_AT_ONCE_NS` of each other (one cause), sorted; [] when none, or when they fell
        apart (which explains what is not known)."""
        low = sorted(g for g in js.hw_since if g[1] >= 0 and clocks.get(g[1]) and med_clock
                     and clocks[g[1]] < HW_CLOCK_RATIO * med_clock)
        times = [js.hw_since[g] for g in low]
        return low if low and max(times) - min(times) <= HW_AT_ONCE_NS else []

    @staticmethod
    def _clock_mates(js: JobState, ranks: list[int], low: dict[int, float], clocks: dict[int, float],
                     hung: set[int]) -> set[int]:
        """GPUs named nowhere whose SM clocks fell at once with a slow group's (within
        `HW_AT_ONCE_NS` of its first, `JobState.hw_since`), to as low (within `CLOCK_ALIKE`):
        one cause (a rack's power cap, its cooling) slows them alike, and their incident is
        the group's. Their phases may not show it on their own: the fourteenth generator's
        capped rack, two whole data-parallel replicas, had one TP group of four named (its
        peers' local phases stray too much to call the others slow as a whole) and the other
        24 GPUs in a clock notice."""
        since = [t for (_, r), t in js.hw_since.items() if r in low]
        if not since:
            return set()
        first, level = min(since), statistics.median(low.values())
        named = {r for inc in js.book.of_kind("slow_rank") for r in inc.culprit_ranks}
        return {r for (_, r), t in js.hw_since.items()
                if r >= 0 and r not in ranks and r not in named and r not in hung and clocks.get(r)
                and abs(t - first) <= HW_AT_ONCE_NS and abs(clocks[r] / level - 1.0) <= CLOCK_ALIKE}

    def _felt(self, js: JobState, ev: dict, open_, ranks: list[int], now_ns: int, alone: bool = False,
              alone_since: bool = False) -> float:
        """The share of the job's time a slow rank costs, as its severity and summary give it:
        what the collectives claim, but no more than `UNFELT_SHARE` x what the job's own
        iterations lost since it was found (its incident opened), where the job reports them
        and its baseline was taken before (a rank slow from the start is in its baseline).
        Generator C's healthy job with one-iteration host stalls drawn with 18000: a TP pair
        named P3 with no loss claimed became P1 "the job loses ~92 % of its time waiting on
        them" 24 s later, while the job's iterations ran as fast as before it (a median of
        1.21 s against 1.2-2.3 s). The phases' impact is the job's steps already. Found before
        the baseline settled (it may hold the slowdown), a rank seen at its normal pace before
        (`RankModel.normal`) is held to what the iterations after it was found lost against
        those before (`StepTracker.loss_around`). The thirteenth generator's RL job drawn with
        1 (training iterations of 5.2 s, a weight sync between rounds a minute apart): rank 0,
        broadcasting each bucket alone while its trainer peers waited in the next all-gather,
        was named P3 at the first sync, the baseline settling only at the second round of
        training, and P1 "the job loses ~60 %" at the second sync; its iterations ran 0.1 %
        over those before."""
        impact = ev["impact"]
        steps = js.steps
        since = open_.opened_ns if open_ is not None else ev.get("onset_ns", 0)
        if ev.get("signal") == "phases":
            # its slowest phase's excess, where its peers wait for it in no other phase; a slow
            # node's TP group, whose data-parallel peers wait for it inside backward, costs the
            # job more than its forward pass: where it is the job's one slow unit, its steps'
            # loss since it was found is its cost (the fourteenth generator's node ramping to
            # 1.6x: "the job loses ~5 %" from its forward pass, its steps 18 % over baseline)
            # And so a rank told from its TP group by its local phase (`apart`), its group
            # waiting for it inside the phase, where it is the one unit slow since its onset
            # (`alone_since`: the islands generator's 1.5x GPU of an HSDP shard group, its
            # site's peers and the other sites waiting for it at every sync: "~10 %" from its
            # forward pass, the job's steps 20 % over, beside a site slower by design, open
            # at P3 from the start)
            loss = steps.loss_since(since) if (alone and ev.get("group") or alone_since and ev.get("apart")
                                               and APART_COSTS) and steps.settled_ns is not None and (
                since >= steps.settled_ns) else None
            return impact if loss is None else max(impact, min(1.0, loss))
        if (len(ranks) == 1 or ev.get("group")) and self._in_baseline(js, ranks[0], ev, now_ns):
            return impact
        if steps.settled_ns is None or since < steps.settled_ns:
            m = js.slow.models.get(ranks[0]) if len(ranks) == 1 and not ev.get("group") else None
            loss = steps.loss_around(since) if m is not None and m.normal > 1 else None
        else:
            loss = steps.loss_since(since)
        return impact if loss is None else min(impact, max(0.0, loss) * UNFELT_SHARE)

    def _unjudged(self, js: JobState, seen: set[tuple], now_ns: int) -> None:
        """Open slow-rank incidents not found again now whose ranks the signal that found them
        does not judge now (the collectives: no current figure between the calls of any comm;
        the phases: no iteration past the warm-up judged lately): neither seen nor gone, they
        stay open, for `UNJUDGED_KEEP_NS` after they were last found. The seventh generator's
        job of 25-32 s steps drawn with 5: its 1.3x rank 25 named by the collectives 13 s into
        the capture, its comm's windows without a figure for it from 27 s (the iteration's
        later calls), the job's first iteration judged at 31 s: the incident resolved "not seen
        for 10 s" at 37 s (no step known when it was last found) and opened again, a second
        incident for one fault, at 57 s."""
        phases = now_ns - js.steps.last_end_ns <= 3 * max(self.median_step_ns(js), 1e9) and js.steps.warmed()
        for key, inc in js.book.open.items():
            signal = inc.evidence.get("signal")
            if key in seen or inc.kind != "slow_rank" or signal not in ("collectives", "phases"):
                continue
            judged = js.slow.ratio if signal == "collectives" else js.steps.ratio if phases else {}
            if not any(r in judged for r in inc.culprit_ranks):
                js.book.keep(key, now_ns, UNJUDGED_KEEP_NS)

    @staticmethod
    def _link_comms(js: JobState) -> set[str]:
        """The comms an open slow link that names its nodes (P2) was found on."""
        return {c["comm"] for key, inc in js.book.open.items() if key[0] == "slow_link" and inc.severity == "P2"
                for c in inc.evidence.get("comms", ())}

    def _link_victims(self, js: JobState, found: dict[int, dict]) -> list[int]:
        """Ranks the collectives newly judge slow that are members of a comm a slow link (P2,
        open) was found on: a rank that waits longer in that comm's slowed transfers computes
        "slower" between the calls of its others, and the link explains it. The sixth
        generator's NIC at 1/4 bandwidth under TP 16 across two nodes drawn with 5: the link
        was named P2 on the right node, then 8 of the TP group's ranks looked 13-17 % slower
        between their calls and were named P3 slow ranks (and the TP comm left the link's
        evidence: its ranks counted as slow). Not a rank judged in a comm that the link was not
        found on and that does not cross it (a TP group inside one node of a link between two;
        a link named on one node, its NIC or NVLink, is crossed by every comm on that node),
        found with none of its node-mates: gaps that hold waits in the link's transfers hold
        them for every rank of the node that makes them (the sixth generator's seven ranks of
        the other node, each judged in a data-parallel comm that avoids the NIC, were found
        together). The fifteenth generator's 1.6x GPU in a 2-node job while the spine was
        congested (a P2 link between the two nodes), found 1.3x against its TP peer on its own
        node, was held back for the congestion's 25 s."""
        comms = self._link_comms(js)
        if not comms:
            return []
        named = self._slow_open(js) | {r for key, inc in js.book.open.items() if key[0] == "slow_link"
                                       for r in inc.culprit_ranks}
        links = [set(inc.culprit_nodes) for key, inc in js.book.open.items()
                 if key[0] == "slow_link" and inc.severity == "P2"]
        members: set[int] = set()
        for c in comms:
            members.update(js.members.get(c, ()))

        def explained(r: int, comm) -> bool:
            nodes = set(js.comms.get(comm, {}).get("nodes", ()))
            if comm in comms or not nodes or any(nodes & link and (len(nodes) > 1 or len(link) == 1) for link in links):
                return True  # the comm it was judged in may carry the link's transfers
            node = js.node_of.get(r)  # ... or its gaps hold waits in those that do: its node-mates' too
            return not LINK_LONE_APART or node is None or any(q != r and js.node_of.get(q) == node for q in found)

        return [r for r, ev in found.items() if ev.get("signal") == "collectives" and r in members and r not in named
                and explained(r, ev.get("comm"))]

    def _pipeline_victims(self, js: JobState, found: dict[int, dict]) -> list[int]:
        """Ranks of a group the collectives newly judge slow as a whole (a TP group slower
        between its calls than the other groups of its stage) of which a member shares a
        pipeline comm with a rank an open incident names, slower than the group: the group
        is that rank's next or previous stage in its pipeline, and its intervals hold its
        waits for the activations or gradients of it (received on a stream of their own, its
        compute stream waits for them between its TP calls). The ninth generator's sequence-
        parallel job (TP 4 x PP 2 x DP 4, GPU-timed) with rank 13 of stage 0 1.5x: the next
        stage's TP group of its replica, 28-31, 1.2x between its calls, was named P3 "~20 %
        slower" six seconds after 13."""
        groups = {ev["group"] for ev in found.values() if ev.get("signal") == "collectives" and ev.get("group")}
        named: dict[int, float] = {}
        for inc in js.book.of_kind("slow_rank") if groups else ():
            for r in inc.culprit_ranks:
                named[r] = max(float(inc.evidence.get("ratio", 1.0)), js.slow.ratio.get(r, 1.0))
        if not named:
            return []
        pipes = [m for c, m in js.members.items() if js.comms.get(c, {}).get("p2p_only") and named.keys() & m]
        out = []
        for group in groups:
            ranks = [r for r, ev in found.items() if ev.get("group") == group and r not in named]
            ratio = max((found[r].get("ratio", 1.0) for r in ranks), default=1.0)
            if any(r in m and any(named.get(q, 0.0) > ratio for q in m if q != r) for r in ranks for m in pipes):
                out.extend(ranks)
        return out

    def _unfelt(self, js: JobState, found: dict[int, dict], now_ns: int) -> list[int]:
        """Ranks the collectives newly judge slow whose cost the job's own steps do not show:
        the iterations that ended since the onset (two at least) are within a third of the
        claimed impact of the job's baseline, and within `UNFELT_LOSS` (the claim is rough:
        generator B's 1.3x FSDP rank claimed 60-100 % where its job lost 25 %). A rank that
        computes slower costs its peers their wait for it, every iteration: where nobody
        waited, its intervals held something else. Generator B's FSDP job drawn with SEED 11:
        a rank 2.7-3.5x between its calls (2 ms apart) for three windows, "the job loses
        27 %", while the job's iterations took 0.94-1.01 s against a 0.95 s baseline, was
        named P2."""
        named = self._slow_open(js)
        out = []
        for r, ev in found.items():
            if ev.get("signal") != "collectives" or r in named or ev.get("impact", 0.0) <= 0:
                continue
            if self._in_baseline(js, r, ev, now_ns):
                continue
            loss = js.steps.loss_since(ev.get("onset_ns", 0))
            if loss is not None and loss < min(ev["impact"] / UNFELT_SHARE, UNFELT_LOSS):
                out.append(r)
        return out

    def _slow(self, js: JobState, now_ns: int, out: list, periodic: bool = True) -> None:
        """Slow ranks and groups judged now. The periodic evaluation (every `SLOW_EVAL_NS`),
        not the ones a new window calls for, also judges the iterations most ranks reported
        (`steps.py`; judged more often, more would be judged before their last rank, the
        straggler, reported) and counts the stage-imbalance advisories' evaluations (a steady
        pace keeps that count a measure of time)."""
        hung = set(js.book.open[("hang",)].culprit_ranks) if ("hang",) in js.book.open else set()
        held = self._slow_open(js, rates=True)
        world = js.world_size or len(self._ranks(js))
        js.slow.step_ns = self.median_step_ns(js)
        in_use = {c: r["members"] for c, r in js.comms.items() if r.get("active")}
        found = js.slow.evaluate(now_ns, js.coords, world, held, in_use, self._stale(js, now_ns))
        # phases may hold waits, compute intervals do not: a rank the collectives judge slow is
        # theirs; a lone straggler in a phase where they see nothing (its collectives carry no
        # timing, or are too coarse: a gradient all-reduce the probe does not see) is the phases'
        phased = js.steps.evaluate(now_ns, self._phase_coords(js), held) if periodic else js.steps.verdicts
        for r in self._echoes(js, found, phased, now_ns) + self._unfelt(js, found, now_ns) + self._link_victims(js, found) + \
                self._pipeline_victims(js, found):
            found.pop(r, None)
        waited = self._waiting_in_phases(js, found, phased, now_ns)
        for r, ev in phased.items():
            if r in found:
                found[r]["phases"] = ev
            elif r not in waited and not js.gate.waits_for(r, now_ns):
                found[r] = ev
        for r, ev in js.slow.stalls(now_ns, held | found.keys()).items():
            found.setdefault(r, ev)  # a rank found slow otherwise is that; one that stalls again and again, this
        p2p = {c for c, ct in js.slow.comms.items() if ct.p2p}
        fresh = now_ns - max(5e9, 3 * js.slow.step_ns)
        for r, ev in js.slow.late.found(fresh, world, in_use, p2p, found.keys() | hung).items():
            found.setdefault(r, ev)  # late at every call of a job-wide comm: its work outside them (`late.py`)
        loss = js.steps.slowdown()
        for r, ev in js.gate.evaluate(now_ns).items():  # host-enqueue: the host the job's calls wait for
            cost = round(max(0.0, loss or 0.0), 4)
            found.setdefault(r, {**ev, "impact": cost, "slowdown": cost, "ratio": round(1.0 + cost, 3)})
        explained = sum(max(0.0, ev.get("impact") or 0.0) for ev in found.values())
        if loss is not None and loss >= LOCAL_LOSS and explained < loss * LOCAL_EXPLAINED:
            # the job slower than its baseline and nothing else explains it (what is found costs
            # under half of what the job lost): a rank alone slower in the phase it computes
            # apart does; it costs the job what the rest does not explain. The recommender
            # generator's host-enqueue 1.5x GPU (the job 25 % slower) waited 15 s behind a hot
            # rank's P3 (5 %), was named, and resolved mid-fault when that rank came back
            # Not a rank as slow in it before the loss began (its level then, `local_level`):
            # the loss is not its. The islands generator's by-design 1.2x site (its local phase
            # 1.05-1.10x from the start) became P2 "the job loses ~22 %" when a GPU of another
            # site slowed
            # A rank found already, by a phase's excess alone, is the one it points at: it costs
            # what the others do not explain (the nineteenth generator's ZeRO-3 job under
            # host-enqueue, rank 13 1.5x: its forward 10 % of a step over its peers', the job
            # 48 % slower, every peer waiting for it inside its calls; P3 "~10 %" to the end)
            level = js.steps.local_level
            for r, ev in js.steps.local_verdicts.items():
                if LOCAL_RISEN and ev["ratio"] < level.get(r, 1.0) + self.settings.slow_impact / 2:
                    continue
                if r in found:
                    mine = max(0.0, found[r].get("impact") or 0.0)
                    if LOCAL_JOINS and loss - (explained - mine) > mine:
                        found[r] = {**found[r], "impact": round(loss - (explained - mine), 4)}
                    continue
                found[r] = {**ev, "impact": round(loss - explained, 4)}
        if HANG_HOLDS and ("hang",) in js.book.open:
            # the job is hung: what is measured now spans its stop, and ranks held up behind it
            # seem slow in their last windows. The nineteenth generator's JAX jobs, a GPU or a
            # host stopped, while their rings were judged as pipeline channels: with the P0
            # naming it, a rank of another node "46 % slower computing between calls" (its
            # model-comm intervals held a data-comm call waiting on the stopped node) was named
            # P3 at the same tick (judged as collective permutes, they name none: the rule
            # stays for whatever else seems slow then). A rank named before stays named
            named = {r for inc in js.book.open.values() if inc.kind == "slow_rank" for r in inc.culprit_ranks}
            for r in [r for r in found if r not in named]:
                del found[r]
        clocks = self._sm_clocks(js)
        med_clock = statistics.median(clocks.values()) if len(clocks) >= 2 else 0.0
        units = self._slow_units(js, found, hung, now_ns, out)
        self._unjudged(js, {key for key, _, _ in units}, now_ns)
        for key in js.half_since.keys() - {key for key, _, _ in units}:
            del js.half_since[key]
        for key, ranks, ev in units:
            open_ = js.book.open.get(key)
            # the one unit slow since its onset: every other was open before it (in the steps before)
            onset = ev.get("onset_ns", now_ns)
            alone_since = all(k == key or (k in js.book.open and js.book.open[k].opened_ns < onset) for k, _, _ in units)
            impact = self._felt(js, ev, open_, ranks, now_ns, len(units) == 1, alone_since)
            if impact != ev["impact"]:
                ev = {**ev, "impact": round(impact, 4), "impact_claimed": ev["impact"]}
            # how long it lasts counts as much as what it costs: a slowdown that clears within
            # seconds is worth no ticket. The eighth generator's MoE routing noise (each expert
            # group's hot expert makes its rank 1.2-1.4x for 3-10 iterations, then another) had
            # two to five ranks named P2 per healthy 70 s job, with every draw 1-6; P2 only once
            # it lasts `P2_AFTER_NS`: none with 1, 3 and 5. With 2, 4 and 6 a hot rank stays
            # over a fifth for 10 s (its figures decay over the horizon after its stint), but
            # the job's slowness moves: the incident of another rank faded a moment before.
            # There, P2 once it lasts `MOVING_P2_AFTER_NS` (a slow GPU stays slow); and so in
            # any job with expert parallelism, from its first hot rank: routing moves load
            # between its ranks by design (with 4 and 6 the healthy job's first hot rank, the
            # first slowness of the job, reached P2 after 10 s, and so did its slow twin's)
            age = now_ns - open_.opened_ns if open_ is not None else 0
            after = P2_AFTER_NS
            if impact < 0.5 and age >= P2_AFTER_NS and (self._experts(js) or js.book.faded_since(
                    "slow_rank", now_ns - MOVING_NS, key)):
                after = MOVING_P2_AFTER_NS
            # P1 once open that long and near half the job's time for `HALF_HOLD_NS` (from the
            # first evaluation at `HALF_CLEAR` or more to the first under it): the recommender
            # generator's hot-table rank, 1.8x hotter for 6 iterations now and then (noise by
            # design), open at P2 for 5 s at a fifth, was P1 0.2 s into such a burst
            if impact >= HALF_CLEAR:
                js.half_since.setdefault(key, now_ns)
            else:
                js.half_since.pop(key, None)
            half = js.half_since.get(key)
            held_half = not HALF_LASTS or (half is not None and now_ns - half >= HALF_HOLD_NS)
            sev = ("P1" if impact >= 0.5 and age >= P1_AFTER_NS and held_half else
                   "P2" if impact >= 0.5 or (impact >= 0.2 and age >= after) else "P3")
            heavy, heavy_in = js.slow.heavy(ranks[0]) if len(ranks) == 1 else (1.0, "")
            if heavy >= HEAVY and HEAVY_BY_DESIGN:
                # it carries more data than its peers: more work by design (uneven sharding,
                # routing), advice and not a fault. The seventeenth generator's hot-table ranks,
                # lookups 1.2-1.4x and sends 2-3x, were P2 on every healthy job and P1 on one
                sev = "P3"
                ev = {**ev, "bytes_ratio": round(heavy, 2), "bytes_comm": heavy_in}
            if open_ is not None:
                sev = min(sev, open_.severity)  # severity only rises while open: no flapping updates
            low = {r: clocks[r] for r in ranks if clocks.get(r) and med_clock
                   and clocks[r] < HW_SLOW_EVIDENCE_RATIO * med_clock}
            if low and len(ranks) > 1:
                mates = self._clock_mates(js, ranks, low, clocks, hung)
                if mates:
                    ranks = sorted(set(ranks) | mates)
                    low.update({r: clocks[r] for r in mates})
                    ev = {**ev, "ranks": ranks}
            if low:
                ev = {**ev, "sm_clock_mhz": min(low.values()), "peers_sm_clock_mhz": med_clock}
                if len(ranks) > 1:
                    ev["sm_clock_low_ranks"] = sorted(low)
            if loss is not None and loss > 0:
                ev = {**ev, "job_slowdown": loss}
            if len(ranks) == 1 and ranks[0] in js.coords:
                ev = {**ev, "coords": js.coords[ranks[0]]}
            where = (("its" if len(ranks) == 1 else "their") + " iteration phases") if ev.get("signal") == "phases" \
                else "computing between calls"
            nodes = self.nodes_of(js, ranks)
            pct = max(0.0, ev["slowdown"]) * 100  # a resolving incident's figure may dip under its peers'
            if ev.get("signal") == "host":
                who = (f"rank{'s' if len(ranks) > 1 else ''} {_span(ranks)}: {'its' if len(ranks) == 1 else 'their'} "
                       f"host is the bottleneck: the calls complete {ev['turn_ms']:.0f} ms after "
                       f"{'it enqueues' if len(ranks) == 1 else 'they enqueue'} them, {ev['peers_turn_ms']:.0f} ms "
                       f"after the peers do (CPU contention? a launch-bound host)")
                where = "host-enqueue probe"
            elif ev.get("signal") == "stalls":
                who = (f"rank{'s' if len(ranks) > 1 else ''} {_span(ranks)} stall{'' if len(ranks) > 1 else 's'} outside "
                       f"every call, {ev['stall_ms'] / 1e3:.2f} s at a time, every ~{ev['every_s']:.1f} s "
                       f"({ev['stalls']} times lately: a data loader, allocator retries or a host hiccup?)")
                where = "its peers wait in their next call"
            elif ev.get("signal") == "late":
                who = (f"rank {_span(ranks)} enters the calls of comm {ev['comm']} {ev['lag_ms']:.1f} ms after its "
                       f"peers on average (they {ev['peers_lag_ms']:+.1f} ms), window after window, and computes like them "
                       f"between them: its work outside every call is slower (a data loader? its host? a CPU "
                       f"optimizer step?)")
                where = "its peers wait inside their calls"
            elif len(ranks) == 1:
                who = f"rank {ranks[0]} is {pct:.0f}% slower than the ranks doing the same work"
            else:
                who = (f"ranks {_span(ranks)} ({', '.join(nodes[:4])}{'...' if len(nodes) > 4 else ''}) are "
                       f"~{pct:.0f}% slower than the ranks doing the same work elsewhere")
            out.extend(js.book.assert_(
                key, now_ns, kind="slow_rank", severity=sev, culprit_ranks=ranks, culprit_nodes=nodes,
                comm=ev.get("comm", ""), quiet_ns=int(3 * self.median_step_ns(js)),
                summary=f"{who} ({where}); the job loses ~{max(0.0, impact) * 100:.0f}% of its time waiting on "
                        f"{'it' if len(ranks) == 1 else 'them'}" + (
                            f"; it carries {ev['bytes_ratio']:.1f}x its peers' data in comm {ev['bytes_comm']}: "
                            f"more work by design (uneven sharding or routing?)" if "bytes_ratio" in ev else ""),
                evidence=ev, id_hint=f"{ranks[0]}-{now_ns}"))
        named = self._slow_open(js)
        for adv in js.slow.advisories(js.coords) if periodic else ():
            if named.intersection(adv["ranks"]):
                continue  # ranks of the stage are slow: they explain it (a slow node from the start)
            nodes = self.nodes_of(js, adv["ranks"])
            out.extend(js.book.assert_(
                ("imbalance", adv["stage"]), now_ns, kind="slow_rank", severity="P3", culprit_ranks=[],
                culprit_nodes=[], comm="",
                summary=f"pipeline stage {adv['stage']} ({len(adv['ranks'])} ranks) computes "
                        f"{(adv['ratio'] - 1) * 100:.0f}% more than the other stages since the start: "
                        f"rebalance the stages; no faulty rank",
                evidence={"advisory": "stage_imbalance", "stage": adv["stage"], "ranks": adv["ranks"][:64],
                          "ratio": adv["ratio"], "nodes": nodes[:16]},
                id_hint=f"stage{adv['stage']}"))
        current = now_ns - js.steps.last_end_ns <= 3 * max(js.steps.median_step_s() * 1e9, 1e9)
        unexplained = (loss is not None and loss >= JOB_SLOWDOWN and current and not found and not held and not hung
                       and not self._link_open(js))
        js.slowdown_since = (js.slowdown_since or now_ns) if unexplained else 0
        fell = self._clocks_fell(js, clocks, med_clock) if unexplained else []
        if fell and now_ns - js.slowdown_since >= JOB_SLOWDOWN_HOLD_NS:
            # the job slower than its baseline, no rank found slow, and GPUs whose clocks fell
            # together: they explain it (the fourteenth generator's capped rack, drawn with 3:
            # its phases named no group, its 32 GPUs only in a clock notice)
            ranks = sorted(r for _, r in fell)
            nodes = self.nodes_of(js, ranks)
            held_ns = now_ns - js.slowdown_since
            key = ("slow_rank", "clocks", fell[0])
            open_ = js.book.open.get(key)
            sev = "P2" if loss >= 0.2 and held_ns >= P2_AFTER_NS else "P3"
            out.extend(js.book.assert_(
                key, now_ns, kind="slow_rank", severity=min(sev, open_.severity) if open_ else sev,
                culprit_ranks=ranks, culprit_nodes=nodes, comm="",
                summary=f"the job's steps take {loss * 100:.0f}% longer than its own baseline, and the SM clocks of "
                        f"rank{'s' if len(ranks) > 1 else ''} {_span(ranks)} ({', '.join(nodes[:8])}) fell together "
                        f"to {min(clocks[r] for r in ranks):.0f} MHz vs {med_clock:.0f} MHz on peers: they explain it",
                evidence={"job_slowdown": loss, "impact": round(min(1.0, loss), 4), "signal": "clocks",
                          "sm_clock_mhz": min(clocks[r] for r in ranks), "peers_sm_clock_mhz": med_clock,
                          "onset_ns": min(js.hw_since[g] for g in fell), "ranks": ranks[:64]},
                id_hint=f"clocks-{now_ns}"))
        elif unexplained and now_ns - js.slowdown_since >= JOB_SLOWDOWN_HOLD_NS:
            out.extend(js.book.assert_(
                ("job_slowdown",), now_ns, kind="slow_rank", severity="P3", culprit_ranks=[], culprit_nodes=[],
                comm="", summary=f"the job's steps take {loss * 100:.0f}% longer than its own baseline; "
                                 f"no rank explains it",
                evidence={"job_slowdown": loss, "median_step_s": round(js.steps.median_step_s(), 3),
                          "baseline_step_s": round(js.steps.base_s, 3)},
                id_hint=f"{now_ns}"))
        links, nodes, rank = js.slow.slow_links(now_ns, set(found), js.node_of, self._link_comms(js))
        if links:
            self._slow_link(js, links, nodes, now_ns, out, rank)


def _span(ranks: list[int]) -> str:
    """Ranks as runs.

    >>> _span([8, 9, 10, 11, 24])
    '8-11, 24'
    """
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)
