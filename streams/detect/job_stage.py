"""Stage 2: all communicators of a job together -> incidents (contract 2.6).

Inputs: stage-1 reports (`comm_stage.py`) and the job-keyed topics (topology, steps,
hardware). Time is the job's own event time handed in (`now_of(job)`).

- `hang` (P0, one per job while it lasts): the wait-for graph (`waits.py`) from the ranks
  waiting in blocked instances to the root ranks. A root is hung when it made no progress
  on any of its comms for the threshold (a slow rank still progressing is not hung), or
  exited, or its completion path is stuck; one that only queued the call its peers are
  inside on their GPUs (device entries) is named as a GPU that never started it. The blocked comms and waiting ranks are
  evidence, updated in place, never new incidents.
- `comm_hang` (P0): a blocked instance that every member entered, none of them held by
  anything older, and none completes.
- The threshold follows the job's cadence: max(`hang_floor_s`, `hang_gap_factor` x the
  longest normal silence of a comm's members (p99), `hang_step_factor` x the median step);
  a root's silence is held against each rank's busiest comm's instead (`_silence`).
- `node_lost` (P0): a node's heartbeats stop while other nodes of the job still report (nodes
  that go silent at once, their ranks with them, are one incident: `AT_ONCE_PERIODS`); while
  other nodes still complete collectives with its ranks in them (its data is late or lost, not
  its ranks), P3 naming the node and no rank a period later (`DATA_LATE_PERIODS`), P2 once
  that lasts `DATA_LOST_P2_NS`.
- `job_stalled` (P2): nobody inside a blocked call and no progress for far longer than usual.
- `slow_rank`: compute shares (`slow.py`) and iteration phases (`steps.py`), one incident
  per culprit; a pipeline stage slower than the others from the start is one P3 advisory
  (`slow_rank` with no culprit rank, `evidence.advisory = "stage_imbalance"`), and a job
  slower than its own baseline with no culprit one P3 (`evidence.job_slowdown`).
- `slow_link` (P2 naming the nodes of the link; P3 naming no node when the slow comms all
  span the same nodes and nothing tells their links apart, unless the nodes' InfiniBand
  symbol errors rose lately on one or two of them: those are named).
- `hw_fault` (XID / ECC deltas, SM clock far below the job's, a GPU that stops answering
  NVML, a completion path stuck while the job still progresses).
- A job whose ranks all exited (agents say so), or that sends nothing for `JOB_SILENT_NS`,
  ends: its open incidents resolve with `evidence.resolved_reason` and nothing repeats.

This file keeps the job's state, its time and liveness (thresholds, silences, what the
comms' reports tell as of when, node loss, the job's end); the rules are mixed in from
`job_hangs.py` (hang, comm_hang, job_stalled), `job_slow.py` (slow_rank) and `job_hw.py`
(slow_link, hw_fault).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from commwatch import topics
from commwatch.settings import Settings
from commwatch.streams.detect import health
from commwatch.streams.detect.comm_stage import QUIET_NS
from commwatch.streams.detect.host_gate import HostGate
from commwatch.streams.detect.incidents import IncidentBook
from commwatch.streams.detect.job_hangs import HangRules
from commwatch.streams.detect.job_hw import HwRules
from commwatch.streams.detect.job_slow import SlowRules
from commwatch.streams.detect.slow import SlowTracker
from commwatch.streams.detect.steps import StepTracker
from commwatch.streams.detect.waits import Analysis

TICK_NS = 250_000_000
SLOW_EVAL_NS = 500_000_000
FRESH_EVAL_NS = 100_000_000  # slow-rank evaluations between the periodic ones (`_slow_due`), at most this often
# a node whose data stopped while its ranks go on (`_node_lost`): information (P3, naming the
# node and no rank: they are not at fault) once it is silent `DATA_LATE_PERIODS` heartbeat
# periods beyond `node_lost_periods`, a ticket (P2) from `DATA_LOST_P2_NS` (the job's hangs
# there cannot be seen). Two jobs of the job model whose one node's data came 2.5-4 s late had
# a P2 each, naming its ranks. A node that crashes looks the same for a moment (a collective
# it was in completes after its last heartbeat): the period more lets that evidence age, and
# its P0 opens naming its ranks (the first, sixth and eighth generators' crashed nodes: a P2
# naming their ranks, raised to P0 0.2-0.8 s later)
DATA_LATE_PERIODS = 1
DATA_LOST_P2_NS = 30_000_000_000
AT_ONCE_PERIODS = 1.5  # nodes whose last heartbeats came this many periods apart at most went silent at once
NODE_GAPS = 8  # a node's latest heartbeat intervals kept (`heard_node`) ...
NODE_GAPS_MIN = 2  # ... its period learnt from this many (their lower median) ...
NODE_PERIOD_SLACK = 1.5  # ... where their median is this much over the configured period ...
NODE_PERIOD_MAX_S = 15.0  # ... up to this
JOB_SILENT_NS = 60_000_000_000  # no message at all from a job this long (at most `state_idle_s`): it ended
QUIET_JOB_PERIODS = 3  # no message at all from a job for this many heartbeat periods: its incidents are held
PAUSE_STEPS = 5  # every rank idle this many of the job's iterations, nobody inside a call: a job-wide pause
PAUSE_SLACK_STEPS = 3  # a comm's gaps over the pause's length by up to this many iterations are the pause's
DATA_REPORTS = ("node", "window", "p2p_window")  # reports that only data (heartbeats, calls) cause
HEARD_SLACK_NS = 1_500_000_000  # a comm's newest report (one a second, `comm_stage.COMM_REPORT_NS`, at ticks
# half a second apart) tells its state up to this much after it (`JobStage.as_of`) ...
BEHIND_MAX_NS = 15_000_000_000  # ... and a comm not reported this long is not waited for (its worker is gone)


@dataclass
class JobState:
    job: str
    book: IncidentBook
    slow: SlowTracker
    steps: StepTracker
    gate: HostGate = field(default_factory=HostGate)
    node_of: dict[int, str] = field(default_factory=dict)
    placed: dict[int, str] = field(default_factory=dict)  # rank -> its node, as its placement said (`placed_anew`)
    coords: dict[int, dict] = field(default_factory=dict)
    peer_coords: tuple[tuple, dict] = ((), {})  # (comms, coordinates) the phases judge by (`SlowRules._phase_coords`)
    world_size: int = 0
    node_ranks: dict[str, set] = field(default_factory=dict)
    node_seen: dict[str, int] = field(default_factory=dict)
    node_joined_ns: int = 0  # when a node was last heard for the first time
    lost_with: dict[str, str] = field(default_factory=dict)  # a node lost with its ranks -> its incident's key node
    node_gaps: dict[str, list[int]] = field(default_factory=dict)  # node -> its latest heartbeat intervals
    node_period: dict[str, float] = field(default_factory=dict)  # node -> its agent's period, where longer (`heard_node`)
    waits: dict[str, dict] = field(default_factory=dict)
    comms: dict[str, dict] = field(default_factory=dict)
    heard: dict[str, int] = field(default_factory=dict)  # comm -> its newest comm/wait report's time (`as_of`)
    members: dict[str, set] = field(default_factory=dict)
    hw: dict[tuple[str, int], dict] = field(default_factory=dict)
    hw_since: dict[tuple[str, int], int] = field(default_factory=dict)
    hw_with: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)  # a GPU's low clock -> its notice's first GPU
    ib_errors: dict[str, list[int]] = field(default_factory=dict)  # node -> [symbol errors, when they last rose]
    last_tick: int = 0
    last_slow_eval: int = 0
    last_fresh_eval: int = 0  # the last slow-rank evaluation between the periodic ones (`_slow_due`)
    last_msg_ns: int = 0
    ended_ns: int = 0
    ended_reason: str = ""
    analysis: Analysis | None = None
    hang_waiters: set = field(default_factory=set)  # ranks seen waiting on a root while the hang is open
    chain: dict | None = None  # the last wait chain shown while a hang is open (`health.snapshot`)
    threshold_ns: float = 0.0
    root_threshold_ns: float = 0.0  # a root's silence (`JobStage.threshold_ns`)
    stuck_since: dict[int, int] = field(default_factory=dict)
    slowdown_since: int = 0
    half_since: dict = field(default_factory=dict)  # slow_rank key -> since when it costs half the job's time (P1)
    idle_since: int = 0  # a job-wide pause going on (`_pauses`): the job's last progress before it
    pause: tuple[float, dict[str, int]] | None = None  # the latest pause: its length (0 while it lasts), each
    # comm's gap p99 before it
    holds: dict[tuple, list[float]] = field(default_factory=dict)  # a hold that ended by itself -> its lengths (`HangRules`)
    holding: tuple | None = None  # a known hold going on: (its key, how long it has lasted)
    busy_missing: dict[tuple[str, int], set[int]] = field(default_factory=dict)  # (comm, seq) of a wait -> the
    # ranks it lacked seen inside a blocked call of another comm meanwhile (`HangRules._busy_missing`)
    stalls: list[float] = field(default_factory=list)  # job-wide stalls that ended by themselves: their lengths
    stalling: int | None = None  # a job-wide stall going on: the job's last progress before it
    phase_waiters: dict[int, int] = field(default_factory=dict)  # rank -> when last taken back as waiting in its phases


class JobStage(HangRules, SlowRules, HwRules):
    """Stage 2 over one or many jobs: `feed_report`, `feed` (topology/steps/hw), `tick`."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.jobs: dict[str, JobState] = {}
        # replay: per job, its nodes whose heartbeats run to the capture's end, and the stamp
        # of each one's last (`streams/replay.py` `capture_ends`): silent after it, the capture
        # ended for that node, not the node (live: empty)
        self.capture_ends: dict[str, dict[str, int]] = {}

    def job(self, job: str) -> JobState:
        js = self.jobs.get(job)
        if js is None:
            s = self.settings
            js = self.jobs[job] = JobState(job, IncidentBook(job, s.resolve_after_s),
                                           SlowTracker(s.slow_impact, s.slow_windows, s.slow_model),
                                           StepTracker(s.slow_impact, s.slow_windows, s.slow_model))
        return js

    def _touch(self, js: JobState, now_ns: int) -> None:
        js.last_msg_ns = max(js.last_msg_ns, now_ns)
        if js.ended_ns and now_ns - js.ended_ns > 0 and js.ended_reason == "no_data":
            js.ended_ns, js.ended_reason = 0, ""  # data again: the job (or the pipeline) is back

    # ------------------------------------------------------------------------------
    def feed_report(self, rep: dict, now_ns: int) -> list[dict]:
        js = self.job(rep["job"])
        t = rep["type"]
        if t in DATA_REPORTS:  # stage 1 reports comms and waits on its own ticks: not a sign of life
            self._touch(js, now_ns)
        elif t in ("comm", "wait", "wait_clear") and rep["ts_ns"] > js.heard.get(rep["comm"], 0):
            js.heard[rep["comm"]] = rep["ts_ns"]
        if t == "window":
            js.slow.window(rep)
            js.gate.window(rep)
        elif t == "p2p_window":
            js.slow.p2p_window(rep)
        elif t == "wait":
            self._busy_missing(js, rep)
            js.waits[rep["comm"]] = rep
        elif t == "wait_clear":
            wait = js.waits.pop(rep["comm"], None)
            if wait is not None and ("hang",) not in js.book.open:
                self._held_below(js, wait, int(rep["ts_ns"]))
            for key in [k for k in js.busy_missing if k[0] == rep["comm"]]:
                del js.busy_missing[key]
        elif t == "comm":
            js.comms[rep["comm"]] = rep
            js.steps.device = js.steps.device or bool(rep.get("device"))
            js.members[rep["comm"]] = set(rep["members"])
        elif t == "node":
            if rep["node"] not in js.node_seen:
                js.node_joined_ns = now_ns
            self.heard_node(js, rep["node"], rep["ts_ns"])
            ranks = js.node_ranks.setdefault(rep["node"], set())
            for r in rep["ranks"]:
                js.node_of.setdefault(r, rep["node"])
                ranks.add(r)
        return []

    def placed_anew(self, job: str, decoded: dict) -> str:
        """Whether a rank's placement (`cw.topology.v1`) says the job runs again as a new world:
        why, or "" if not. A process announces its placement when it starts; one that places a
        known rank on another node, or gives another world size than the job's ranks gave, is
        of a new run under the same job id (an elastic restart on fewer nodes renumbers the
        ranks). Read against the old run's ranks, nodes and counters, the new run's would be
        judged as theirs (the sixth generator's restart on 7 of 8 nodes: the dead node's P0
        kept open and switching to P2 as renumbered ranks 40-47 completed on another node,
        every survivor node named P0 lost as the new run's heartbeats began, and its slow rank
        never named)."""
        js = self.jobs.get(job)
        if js is None or not js.placed:
            return ""
        rank, node, world = decoded["rank"], decoded["node"], decoded["world_size"]
        if js.world_size and world != js.world_size:
            return f"a new world of {world} ranks (it had {js.world_size})"
        if js.placed.get(rank, node) != node:
            return f"rank {rank} now runs on {node} (it ran on {js.placed[rank]})"
        return ""

    def restarted(self, job: str, now_ns: int, why: str) -> list[dict]:
        """The job runs again as a new world (`placed_anew`): what the old run left open is
        resolved, saying so (the caller then forgets the job's state)."""
        js = self.jobs.get(job)
        return js.book.resolve_all(now_ns, "job_restarted", f"the job restarted: {why}") if js else []

    def feed(self, msg, decoded: dict, now_ns: int) -> list[dict]:
        """Topology, steps and hardware messages (`msg.topic` says which); no incident at once."""
        js = self.job(decoded["job"])
        self._touch(js, now_ns)
        if msg.topic == topics.TOPOLOGY:
            js.placed[decoded["rank"]] = decoded["node"]
            js.node_of[decoded["rank"]] = decoded["node"]
            js.node_ranks.setdefault(decoded["node"], set()).add(decoded["rank"])
            js.world_size = max(js.world_size, decoded["world_size"])
            if decoded.get("coords"):
                js.coords[decoded["rank"]] = decoded["coords"]
        elif msg.topic == topics.STEPS:
            js.steps.add(decoded)
        elif msg.topic == topics.HW:
            js.hw[(decoded["node"], decoded.get("rank", -1))] = decoded
            if decoded.get("ib"):
                self._ib(js, decoded["node"], decoded["ib"], now_ns)
        return []

    @staticmethod
    def _ib(js: JobState, node: str, ib: dict, now_ns: int) -> None:
        """A node's InfiniBand symbol errors (summed over its HCAs, counters that only grow):
        when they last rose. The first sample is the baseline (errors from before say nothing)."""
        total = sum(int(c.get("symbol_errors", 0)) for c in ib.values())
        seen = js.ib_errors.get(node)
        if seen is None:
            js.ib_errors[node] = [total, 0]
        elif total != seen[0]:
            seen[:] = [total, now_ns if total > seen[0] else seen[1]]  # lower: the counters were reset

    # ------------------------------------------------------------------------------
    def tick(self, now_of: Callable[[str], int]) -> list[dict]:
        out: list[dict] = []
        for job in list(self.jobs):
            out.extend(self.tick_job(job, now_of(job)))
        return out

    def tick_job(self, job: str, now_ns: int, hold: bool = False, final: bool = False) -> list[dict]:
        """Time passing for one job (at most once per `TICK_NS` of its time). `hold`: its input
        is being caught up on, so nothing is concluded (silences, hangs, lost nodes, the job's
        end, slow ranks from a partial view), and what is open stays open. `final`: the input
        ended (a capture's end): what was received is judged now, whenever the last tick was."""
        js = self.jobs.get(job)
        if js is None:
            return []
        if now_ns - js.last_tick < TICK_NS and not final:
            if hold or js.ended_ns:
                return []
            out = self._fresh_steps(js, now_ns) if js.steps.fresh else []
            if self._slow_due(js, now_ns):
                js.last_fresh_eval = now_ns
                self._slow(js, now_ns, out, periodic=False)
            return out
        js.last_tick = now_ns
        out: list[dict] = []
        if js.ended_ns:
            if now_ns - max(js.ended_ns, js.last_msg_ns) >= self._silent_ns() and not js.book.open:
                del self.jobs[job]  # ended and silent: forgotten (a message later starts it afresh)
            return out
        if not hold:
            if self._ended(js, now_ns, out):
                return out
            step = self.median_step_ns(js)
            self._pauses(js, now_ns, step)
            js.threshold_ns, js.root_threshold_ns = self.threshold_ns(js, step)
            lost = self._node_lost(js, now_ns, out)
            self._hangs(js, now_ns, lost, out)
            self._stalled(js, now_ns, out)
        if hold:
            return out  # an open incident is not asserted while held: it does not expire either
        periodic = now_ns - js.last_slow_eval >= SLOW_EVAL_NS
        if periodic or self._slow_due(js, now_ns):
            if periodic:
                js.last_slow_eval = now_ns
            else:
                js.last_fresh_eval = now_ns
            self._slow(js, now_ns, out, periodic)
            self._hw(js, now_ns, out)
        if now_ns - js.last_msg_ns < self._quiet_job_ns(js):
            out.extend(js.book.expire(now_ns))
        # else the job sends nothing (its agents, or the pipeline from them, went quiet): what
        # is open is not seen, nor is it gone; it stays open till data comes again, or the
        # job ends for want of it (`_ended`: resolved 'no_data', saying so)
        return out

    def _quiet_job_ns(self, js: JobState) -> float:
        """No message at all from a job this long (a few heartbeats): it is quiet, and its open
        incidents do not clear for not being seen (generator B's hung FSDP job, its capture
        over while two other jobs ran on: its P0 resolved 'not seen for 10 s', as if the hang
        had ended by itself)."""
        return QUIET_JOB_PERIODS * self.period_ns(js)

    @staticmethod
    def due_ns(js: JobState) -> int:
        """When the job's next tick does anything, on its clock: its periodic tick, or sooner
        the slow-rank evaluation a new window or a hot rank calls for (`_slow_due`)."""
        due = js.last_tick + TICK_NS
        if not js.ended_ns:
            if js.slow.fresh or js.gate.fresh:
                due = min(due, js.last_fresh_eval + FRESH_EVAL_NS)
            if js.slow.due_ns:
                due = min(due, max(js.slow.due_ns, js.last_fresh_eval + FRESH_EVAL_NS))
        return due

    @staticmethod
    def _slow_due(js: JobState, now_ns: int) -> bool:
        """A slow-rank evaluation between the periodic ones (at most every `FRESH_EVAL_NS`): a
        window arrived that may decide alone (`SlowTracker._hot`), a rank's gating of a
        host-enqueue comm began to hold (`HostGate`), or a rank hot over enough windows reached
        `SLOW_MIN_NS` (time alone concludes it)."""
        if now_ns - js.last_fresh_eval < FRESH_EVAL_NS:
            return False
        return js.slow.fresh or js.gate.fresh or 0 < js.slow.due_ns <= now_ns

    def health(self, job: str, now_ns: int, drops: dict[str, int] | None = None) -> dict | None:
        """The job's health snapshot (`health.py`); None for a job never seen."""
        js = self.jobs.get(job)
        return None if js is None else health.snapshot(js, now_ns, drops)

    def nodes_of(self, js: JobState, ranks) -> list[str]:
        return sorted({js.node_of[r] for r in ranks if r in js.node_of})

    def median_step_ns(self, js: JobState) -> float:
        return js.steps.median_step_s() * 1e9

    def threshold_ns(self, js: JobState, step: float) -> tuple[float, float]:
        """Hang thresholds: the floor, or longer for a job whose ranks normally go long
        without progress (long steps, a slow stage): its own cadence (`step`: the job's median
        iteration, ns; 0 when unknown). Where the step is known, a comm's longest normal
        silence counts `hang_step_factor` times, not `hang_gap_factor` times, once it is most
        of a step: the iterations say what is normal (generator B's host-enqueue job of 31 s
        steps, its hosts running ahead: its comms silent 29 s an iteration, a threshold of
        88 s; its hang, waited on from 62.5 s of a 150 s capture, was never named).
        Two: the job's, from the longest gap of any comm (how long a comm's members may all
        wait in a call: `comm_hang`), and a root's, from the longest normal silence of any
        rank, the least gap of its comms (`_silence`): a comm called once every ten
        iterations (an evaluation's) is silent ten iterations between its calls while its
        members progress in their others."""
        gaps = self._gaps(js, step)
        return self._threshold(step, max(gaps.values(), default=0)), self._threshold(step, self._silence(js, gaps))

    def _threshold(self, step: float, gap: float) -> float:
        s = self.settings
        by_gap = s.hang_gap_factor * gap
        if step > 0 and s.hang_step_factor > 0:
            by_gap = min(by_gap, s.hang_step_factor * max(step, gap))
        return max(s.hang_floor_s * 1e9, by_gap, s.hang_step_factor * step)

    @staticmethod
    def _silence(js: JobState, gaps: dict[str, int]) -> int:
        """The longest normal silence of any rank: per rank the least gap of its comms (known
        ones), the most over ranks. Generator D's evaluation comm used every 10th iteration of
        1 s steps: its 10 s gaps made a 20 s threshold, and a rank that never entered its
        all-reduce, every peer waiting, was not named in the 18 s the capture had left."""
        least: dict[int, int] = {}
        for c, g in gaps.items():
            if g > 0:
                for r in js.members.get(c, ()):
                    if g < least.get(r, 1 << 62):
                        least[r] = g
        if not least:
            return max(gaps.values(), default=0)
        return max(least.values())

    @staticmethod
    def _gaps(js: JobState, step: float) -> dict[str, int]:
        """Per comm, the p99 of its members' intervals between progress: their cadence. Those
        that span the job's latest pause (`_pauses`) are not: while a comm's p99 is over the
        one it had before the pause and no more than that pause (and a few iterations), the
        one before counts."""
        gaps = {c: int(rep["gap_p99_ns"]) for c, rep in js.comms.items()}
        if js.pause is not None:
            length, before = js.pause
            top = length + PAUSE_SLACK_STEPS * step
            gaps = {c: before[c] if before.get(c, g) < g <= top else g for c, g in gaps.items()}
        return gaps

    def _pauses(self, js: JobState, now_ns: int, step: float) -> None:
        """A job-wide pause (a checkpoint, an evaluation; DOMAIN.md): in a job whose iteration
        time is known, no comm made progress for `PAUSE_STEPS` of its iterations, and nobody
        is inside a call (no wait reported, every comm's calls completed). Its members'
        intervals that span it go into each comm's gaps (the p99, for a while): a hang right
        after a 20 s checkpoint waited for a 60 s threshold. Kept: the pause's length, once
        progress resumes, and each comm's gap p99 before it (`_gaps`). In a job whose
        iterations are not known, or are long, a silence that long is its cadence."""
        if step <= 0 or not js.comms:
            return
        last = max(c["last_ns"] for c in js.comms.values())
        if js.idle_since:
            if last > js.idle_since:  # progress again: the pause is over
                js.pause = (float(last - js.idle_since), js.pause[1])
                js.idle_since = 0
            return
        if last <= 0 or now_ns - last < PAUSE_STEPS * step or js.waits or any(
                c.get("s", -1) > c.get("d", -1) for c in js.comms.values()):
            return
        js.idle_since = last
        js.pause = (0.0, self._gaps(js, step))

    # ------------------------------------------------------------------------------
    def _ranks(self, js: JobState) -> set[int]:
        out = set(js.node_of)
        for m in js.members.values():
            out |= m
        return out

    def _exited(self, js: JobState) -> set[int]:
        out: set[int] = set()
        for c in js.comms.values():
            out.update(c["exited"])
        return out

    @staticmethod
    def _left_all(js: JobState) -> set[int]:
        """Ranks that left every communicator they were in (COMM_DESTROY: a clean shutdown)."""
        left: dict[int, bool] = {}
        for comm, members in js.members.items():
            gone = set(js.comms.get(comm, {}).get("left", ()))
            for r in members:
                left[r] = left.get(r, True) and r in gone
        return {r for r, v in left.items() if v}

    def _ended(self, js: JobState, now_ns: int, out: list) -> bool:
        reason = ""
        ranks = self._ranks(js)
        exited = self._exited(js)
        left = self._left_all(js)
        if ranks and exited | left >= ranks:
            reason = "job_ended"
        elif now_ns - js.last_msg_ns >= self._silent_ns():
            reason = "no_data"
        if not reason:
            return False
        js.ended_ns, js.ended_reason = now_ns, reason
        why = ("every rank's process exited" if reason == "job_ended" and exited >= ranks
               else "every rank exited or left all its communicators (COMM_DESTROY)" if reason == "job_ended"
               else f"no message from the job for {(now_ns - js.last_msg_ns) / 1e9:.0f} s")
        out.extend(js.book.resolve_all(now_ns, reason, why))
        js.waits.clear()
        js.busy_missing.clear()
        return True

    def _silent_ns(self) -> float:
        return min(JOB_SILENT_NS, self.settings.state_idle_s * 1e9)

    def silent_since(self, js: JobState, rank: int, now_ns: int) -> int:
        """When the rank last made progress on any of its comms (as the pipeline saw it)."""
        last = 0
        for comm, members in js.members.items():
            if rank not in members:
                continue
            c = js.comms[comm]
            quiet = next((since for r, since in c["quiet"] if r == rank), None)
            last = max(last, quiet if quiet is not None else c["ts_ns"] - QUIET_NS)
        return last

    def _stuck(self, js: JobState, now_ns: int) -> dict[int, tuple[int, int, str]]:
        """Ranks whose completion path is stuck: rank -> (completed, peers' completed, comm), from
        comms whose input is current (when a job's data stops, every counter stops)."""
        out = {}
        stale = self._stale(js, now_ns)
        for comm, c in js.comms.items():
            if comm in stale:
                continue
            for r, done, _since in c["stuck"]:
                if r not in out:
                    out[r] = (done, c["d"], comm)
        return out

    # ------------------------------------------------------------------------------
    def heard_node(self, js: JobState, node: str, ts_ns: int) -> None:
        """A heartbeat of `node` at `ts_ns`. The wire spec fixes each agent's period but not
        its length (default 1 s): one whose heartbeats keep coming further apart than the
        configured period runs with a longer one, learnt from its latest `NODE_GAPS`
        intervals (their lower median, once `NODE_GAPS_MIN` are known; at most
        `NODE_PERIOD_MAX_S`), and its silences are judged against it. The ninth generator's
        agents heartbeating every 2-5 s: a node every 5 s was lost (P0 naming its ranks) at
        each silence of 3.4-4.5 s, four P0s beside one hang, and its healthy twin had a data-late
        notice every 25 s."""
        last = js.node_seen.get(node, 0)
        if ts_ns > last:
            js.node_seen[node] = ts_ns
            if last:
                gaps = js.node_gaps.setdefault(node, [])
                gaps.append(ts_ns - last)
                del gaps[:-NODE_GAPS]
                if len(gaps) >= NODE_GAPS_MIN:
                    typical = min(float(sorted(gaps)[(len(gaps) - 1) // 2]), NODE_PERIOD_MAX_S * 1e9)
                    if typical > self.settings.heartbeat_period_s * 1e9 * NODE_PERIOD_SLACK:
                        js.node_period[node] = typical
                    else:
                        js.node_period.pop(node, None)

    def period_ns(self, js: JobState, node: str | None = None) -> float:
        """A node's heartbeat period (`heard_node`); without one, the longest of the job's."""
        base = self.settings.heartbeat_period_s * 1e9
        if not js.node_period:
            return base
        if node is None:
            return max(base, max(js.node_period.values()))
        return max(base, js.node_period.get(node, base))

    def _node_limit(self, js: JobState, node: str | None = None) -> float:
        """A node silent this long is lost (`node_lost_periods` of its period)."""
        return self.settings.node_lost_periods * self.period_ns(js, node)

    def _node_lost(self, js: JobState, now_ns: int, out: list) -> set[str]:
        if not js.node_seen:
            return set()
        newest = max(js.node_seen.values())
        # a node heard for the first time may run its clock seconds ahead: the job's now jumps,
        # and the others seem that much more silent until their next heartbeat says how far
        # behind their clocks run (stage 1, `node_lag.py`): none is judged lost for a period more
        joining = now_ns - js.node_joined_ns < self._node_limit(js) + self.settings.heartbeat_period_s * 1e9
        lost = set()
        stopped: dict[str, tuple[int, list[int]]] = {}  # node -> (its last heartbeat, its ranks): they stopped too
        gone = self._exited(js) | self._left_all(js)
        ends = self.capture_ends.get(js.job, {})
        for node, seen in sorted(js.node_seen.items()):
            period = self.period_ns(js, node)
            limit = self.settings.node_lost_periods * period
            ranks = sorted(js.node_ranks.get(node, ()))
            if ranks and set(ranks) <= gone:
                continue  # its processes ended, or left every comm: the agent has nothing left to report
            if node in ends and seen >= ends[node] - period:
                continue  # its last heartbeat in the capture: the capture ended there
            if now_ns - seen >= limit and newest - seen >= limit and (
                    not joining or ("node_lost", node) in js.book.open or node in js.lost_with):
                lost.add(node)
                alive = self._alive_ns(js, node, set(ranks), now_ns, limit)
                head = js.lost_with.get(node)
                if alive <= seen or (head is not None and sum(h == head for h in js.lost_with.values()) > 1):
                    stopped[node] = (seen, ranks)  # (a node lost with others stays in their incident)
                    continue
                # its ranks go on: its agent, or the pipeline from it, is silent
                if now_ns - seen < limit + DATA_LATE_PERIODS * period and ("node_lost", node) not in js.book.open:
                    continue  # late, not long: nothing to tell yet (or its ranks stop: a P0)
                silent = (f"no heartbeat from {node} for {(now_ns - seen) / 1e9:.1f} s ({len(ranks)} ranks); its "
                          f"ranks still complete collectives with other nodes ({(now_ns - alive) / 1e9:.1f} s ago): "
                          f"its data is lost or late, not its ranks")
                evidence = {"last_heartbeat_ns": seen, "silent_s": round((now_ns - seen) / 1e9, 1), "onset_ns": seen,
                            "ranks_alive_ns": alive, "data_lost": True, "ranks": ranks}
                out.extend(js.book.assert_(
                    ("node_lost", node), now_ns, kind="node_lost",
                    severity="P2" if now_ns - seen >= DATA_LOST_P2_NS else "P3", culprit_ranks=[],
                    culprit_nodes=[node], comm="", summary=silent, evidence=evidence, id_hint=f"{node}-{now_ns}"))
        # one cause takes a rack's nodes down together (its switch, its power): one P0 for them
        groups = js.book.together({n: v[0] for n, v in stopped.items()},
                                  lambda n: AT_ONCE_PERIODS * self.period_ns(js, n), js.lost_with,
                                  lambda n: ("node_lost", n))
        for node in sorted(js.node_seen):
            if node not in lost and ("node_lost", node) in js.book.open and node not in groups:
                out.extend(js.book.resolve(("node_lost", node), now_ns, "its heartbeats came back"))
        for anchor, nodes in groups.items():
            seen = min(stopped[n][0] for n in nodes)
            ranks = sorted(r for n in nodes for r in stopped[n][1])
            silent = f"no heartbeat from {', '.join(sorted(nodes))} for {(now_ns - seen) / 1e9:.1f} s ({len(ranks)} ranks)"
            if len(nodes) > 1:
                silent = (f"{len(nodes)} nodes went silent at once, their ranks with them: {silent}; a cause they "
                          f"share (a switch, power, their rack) is likely")
            evidence = {"last_heartbeat_ns": seen, "silent_s": round((now_ns - seen) / 1e9, 1), "onset_ns": seen}
            if len(nodes) > 1:
                evidence["nodes_last_heartbeat_ns"] = {n: stopped[n][0] for n in nodes}
            out.extend(js.book.assert_(
                ("node_lost", anchor), now_ns, kind="node_lost", severity="P0", culprit_ranks=ranks,
                culprit_nodes=nodes, comm="", summary=silent, evidence=evidence, id_hint=f"{anchor}-{now_ns}"))
        return lost

    @staticmethod
    def _alive_ns(js: JobState, node: str, ranks: set[int], now_ns: int, limit: float) -> int:
        """The latest evidence from other nodes that a silent node's ranks still run: a
        collective of a comm spanning nodes completes on every member or on none, so one that
        another node completed had the silent node's ranks in it. Current evidence only (within
        `limit`, or the comm's own cadence of progress); 0 when none (its ranks stopped too).
        Calls given up on (COMPLETION_LOST: a watchdog's abort) are no completion of theirs
        (`seen_d_ns`; the sixth generator's node crashed and its survivors aborted 6 s later:
        the node's P0 turned P2, 'its ranks still complete collectives')."""
        alive = 0
        for comm, c in js.comms.items():
            at = c.get("seen_d_ns", 0)
            if at > alive and ranks & js.members.get(comm, set()) and set(c.get("nodes") or ()) - {node} and (
                    now_ns - at < max(limit, c.get("gap_p99_ns", 0))):
                alive = at
        return alive

    def _stale(self, js: JobState, now_ns: int) -> set[str]:
        """Comms whose newest message is older than a few heartbeat periods (of the longest
        of their members' nodes, `heard_node`): their input is behind (or their nodes are
        silent), so what stage 1 says of them is not current."""
        base = self.settings.node_lost_periods * self.settings.heartbeat_period_s * 1e9
        stale = set()
        for c, r in js.comms.items():
            age = now_ns - r.get("seen_ns", now_ns)
            if age < base or self._over(js, c) or (js.node_period and age < self._comm_limit(js, c)):
                continue
            stale.add(c)
        return stale

    def _comm_limit(self, js: JobState, comm: str) -> float:
        """`_node_limit` of the slowest-heartbeating node among a comm's members' (the job's
        longest where a member's node is not known)."""
        nodes = {js.node_of.get(m) for m in js.members.get(comm, ())}
        if not nodes or None in nodes:
            return self._node_limit(js)
        return max(self._node_limit(js, n) for n in nodes)

    @staticmethod
    def _over(js: JobState, comm: str) -> bool:
        """A comm every member left (destroyed) says nothing more: it is over, not behind."""
        left = js.comms.get(comm, {}).get("left")
        return bool(left) and len(left) >= len(js.members.get(comm, ()))

    def _reporting(self, js: JobState, now_ns: int) -> set[str]:
        """Nodes whose heartbeats are current: what they say of their ranks is news."""
        return {n for n, seen in js.node_seen.items() if now_ns - seen < self._node_limit(js, n)}

    def as_of(self, js: JobState, now_ns: int) -> int:
        """Until when every comm of the job is known: its now, or the oldest newest report of
        a comm (`heard`) and `HEARD_SLACK_NS` after it, if sooner. Comms are reported by the
        workers whose partitions hold them: one that runs seconds behind the others reports
        its comms as they were seconds ago, and judged at the job's now (the newest reports'
        time) a rank that waits in one of those comms by now seems silent, and its peers in
        the others seem to wait on it. Two workers, one 2 s behind the other, an 8-rank job
        whose rank 3 hangs: a victim was named with it (its wait in a p2p comm of the worker
        behind not reported yet), or the hang was never named (the comms of the worker behind
        stale at the job's now). Comms every member left, or not reported for
        `BEHIND_MAX_NS` (their worker gone, their partitions not taken over yet) are not waited for."""
        oldest = now_ns
        for c, h in js.heard.items():
            if h < oldest and now_ns - h <= BEHIND_MAX_NS and not self._over(js, c):
                oldest = h
        return min(now_ns, oldest + HEARD_SLACK_NS)
