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
- `node_lost` (P0): a node's heartbeats stop while other nodes of the job still report; P2
  while other nodes still complete collectives with its ranks in them (its data is late).
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
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable

from commwatch import topics
from commwatch.settings import Settings
from commwatch.streams.detect import health, waits
from commwatch.streams.detect.comm_stage import QUIET_NS
from commwatch.streams.detect.host_gate import HostGate
from commwatch.streams.detect.incidents import IncidentBook
from commwatch.streams.detect.slow import SlowTracker
from commwatch.streams.detect.steps import LOCAL_LOSS, StepTracker, tp_group

TICK_NS = 250_000_000
SLOW_EVAL_NS = 500_000_000
FRESH_EVAL_NS = 100_000_000  # slow-rank evaluations between the periodic ones (`_slow_due`), at most this often
HW_CLOCK_RATIO = 0.85  # SM clock below this share of the job's median is an anomaly
HW_SLOW_EVIDENCE_RATIO = 0.95
P1_AFTER_NS = 10_000_000_000  # a slow rank costing half the job's time is P1 once it lasts this long
NODE_JOIN_NS = 5_000_000_000  # a rank joins the incident of another rank of its node opened this recently (`_slow_units`)
HW_HOLD_NS = 10_000_000_000  # a hardware anomaly this old with no slowdown is a hw_fault
STUCK_HW_NS = 30_000_000_000  # a stuck completion path while the job progresses: a hw_fault after this
JOB_SILENT_NS = 60_000_000_000  # no message at all from a job this long (at most `state_idle_s`): it ended
QUIET_JOB_PERIODS = 3  # no message at all from a job for this many heartbeat periods: its incidents are held
UNFELT_SHARE = 3.0  # a rank newly found slow whose job lost under its impact / this since its onset, ...
UNFELT_LOSS = 0.05  # ... and under this, is not named (`_unfelt`)
ECHO_CLAIM_SHARE = 0.5  # phases under this share of the excess the collectives claim: an echo (`_echoes`)
JOB_SLOWDOWN = 0.2  # step time this much above the job's baseline with no culprit ...
JOB_SLOWDOWN_HOLD_NS = 20_000_000_000  # ... for this long: a P3
IB_ERRORS_RECENT_NS = 60_000_000_000  # a node whose IB symbol errors rose this recently is a slow link's suspect
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
    coords: dict[int, dict] = field(default_factory=dict)
    world_size: int = 0
    node_ranks: dict[str, set] = field(default_factory=dict)
    node_seen: dict[str, int] = field(default_factory=dict)
    node_joined_ns: int = 0  # when a node was last heard for the first time
    waits: dict[str, dict] = field(default_factory=dict)
    comms: dict[str, dict] = field(default_factory=dict)
    heard: dict[str, int] = field(default_factory=dict)  # comm -> its newest comm/wait report's time (`as_of`)
    members: dict[str, set] = field(default_factory=dict)
    hw: dict[tuple[str, int], dict] = field(default_factory=dict)
    hw_since: dict[tuple[str, int], int] = field(default_factory=dict)
    ib_errors: dict[str, list[int]] = field(default_factory=dict)  # node -> [symbol errors, when they last rose]
    last_tick: int = 0
    last_slow_eval: int = 0
    last_fresh_eval: int = 0  # the last slow-rank evaluation between the periodic ones (`_slow_due`)
    last_msg_ns: int = 0
    ended_ns: int = 0
    ended_reason: str = ""
    analysis: waits.Analysis | None = None
    hang_waiters: set = field(default_factory=set)  # ranks seen waiting on a root while the hang is open
    chain: dict | None = None  # the last wait chain shown while a hang is open (`health.snapshot`)
    threshold_ns: float = 0.0
    root_threshold_ns: float = 0.0  # a root's silence (`JobStage.threshold_ns`)
    stuck_since: dict[int, int] = field(default_factory=dict)
    slowdown_since: int = 0
    idle_since: int = 0  # a job-wide pause going on (`_pauses`): the job's last progress before it
    pause: tuple[float, dict[str, int]] | None = None  # the latest pause: its length (0 while it lasts), each
    # comm's gap p99 before it


class JobStage:
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
            js.waits[rep["comm"]] = rep
        elif t == "wait_clear":
            js.waits.pop(rep["comm"], None)
        elif t == "comm":
            js.comms[rep["comm"]] = rep
            js.steps.device = js.steps.device or bool(rep.get("device"))
            js.members[rep["comm"]] = set(rep["members"])
        elif t == "node":
            if rep["node"] not in js.node_seen:
                js.node_joined_ns = now_ns
            js.node_seen[rep["node"]] = max(js.node_seen.get(rep["node"], 0), rep["ts_ns"])
            ranks = js.node_ranks.setdefault(rep["node"], set())
            for r in rep["ranks"]:
                js.node_of.setdefault(r, rep["node"])
                ranks.add(r)
        return []

    def feed(self, msg, decoded: dict, now_ns: int) -> list[dict]:
        """Topology, steps and hardware messages (`msg.topic` says which); no incident at once."""
        js = self.job(decoded["job"])
        self._touch(js, now_ns)
        if msg.topic == topics.TOPOLOGY:
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
        if now_ns - js.last_msg_ns < self._quiet_job_ns():
            out.extend(js.book.expire(now_ns))
        # else the job sends nothing (its agents, or the pipeline from them, went quiet): what
        # is open is not seen, nor is it gone; it stays open till data comes again, or the
        # job ends for want of it (`_ended`: resolved 'no_data', saying so)
        return out

    def _quiet_job_ns(self) -> float:
        """No message at all from a job this long (a few heartbeats): it is quiet, and its open
        incidents do not clear for not being seen (generator B's hung FSDP job, its capture
        over while two other jobs ran on: its P0 resolved 'not seen for 10 s', as if the hang
        had ended by itself)."""
        return QUIET_JOB_PERIODS * self.settings.heartbeat_period_s * 1e9

    @staticmethod
    def due_ns(js: JobState) -> int:
        """When the job's next tick does anything, on its clock: its periodic tick, or sooner
        the slow-rank evaluation a new window or a hot rank calls for (`_slow_due`)."""
        due = js.last_tick + TICK_NS
        if not js.ended_ns:
            if js.slow.fresh:
                due = min(due, js.last_fresh_eval + FRESH_EVAL_NS)
            if js.slow.due_ns:
                due = min(due, max(js.slow.due_ns, js.last_fresh_eval + FRESH_EVAL_NS))
        return due

    @staticmethod
    def _slow_due(js: JobState, now_ns: int) -> bool:
        """A slow-rank evaluation between the periodic ones (at most every `FRESH_EVAL_NS`): a
        window arrived that may decide alone (`SlowTracker._hot`), or a rank hot over enough
        windows reached `SLOW_MIN_NS` (time alone concludes it)."""
        if now_ns - js.last_fresh_eval < FRESH_EVAL_NS:
            return False
        return js.slow.fresh or 0 < js.slow.due_ns <= now_ns

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
    def _node_lost(self, js: JobState, now_ns: int, out: list) -> set[str]:
        limit = self.settings.node_lost_periods * self.settings.heartbeat_period_s * 1e9
        if not js.node_seen:
            return set()
        newest = max(js.node_seen.values())
        # a node heard for the first time may run its clock seconds ahead: the job's now jumps,
        # and the others seem that much more silent until their next heartbeat says how far
        # behind their clocks run (stage 1, `node_lag.py`): none is judged lost for a period more
        joining = now_ns - js.node_joined_ns < limit + self.settings.heartbeat_period_s * 1e9
        lost = set()
        exited = self._exited(js)
        ends = self.capture_ends.get(js.job, {})
        period = self.settings.heartbeat_period_s * 1e9
        for node, seen in sorted(js.node_seen.items()):
            ranks = sorted(js.node_ranks.get(node, ()))
            if ranks and set(ranks) <= exited:
                continue  # its processes ended: the agent has nothing left to report
            if node in ends and seen >= ends[node] - period:
                continue  # its last heartbeat in the capture: the capture ended there
            if now_ns - seen >= limit and newest - seen >= limit and (
                    not joining or ("node_lost", node) in js.book.open):
                lost.add(node)
                silent = f"no heartbeat from {node} for {(now_ns - seen) / 1e9:.1f} s ({len(ranks)} ranks)"
                evidence = {"last_heartbeat_ns": seen, "silent_s": round((now_ns - seen) / 1e9, 1), "onset_ns": seen}
                alive = self._alive_ns(js, node, set(ranks), now_ns, limit)
                if alive > seen:  # its ranks go on: its agent, or the pipeline from it, is silent
                    evidence["ranks_alive_ns"] = alive
                    silent += (f"; its ranks still complete collectives with other nodes ("
                               f"{(now_ns - alive) / 1e9:.1f} s ago): its data is lost or late, not its ranks")
                out.extend(js.book.assert_(
                    ("node_lost", node), now_ns, kind="node_lost", severity="P2" if alive > seen else "P0",
                    culprit_ranks=ranks, culprit_nodes=[node], comm="", summary=silent, evidence=evidence,
                    id_hint=f"{node}-{now_ns}"))
            elif ("node_lost", node) in js.book.open:
                out.extend(js.book.resolve(("node_lost", node), now_ns, "its heartbeats came back"))
        return lost

    @staticmethod
    def _alive_ns(js: JobState, node: str, ranks: set[int], now_ns: int, limit: float) -> int:
        """The latest evidence from other nodes that a silent node's ranks still run: a
        collective of a comm spanning nodes completes on every member or on none, so one that
        another node completed had the silent node's ranks in it. Current evidence only (within
        `limit`, or the comm's own cadence of progress); 0 when none (its ranks stopped too)."""
        alive = 0
        for comm, c in js.comms.items():
            at = c.get("d_ns", 0)
            if at > alive and ranks & js.members.get(comm, set()) and set(c.get("nodes") or ()) - {node} and (
                    now_ns - at < max(limit, c.get("gap_p99_ns", 0))):
                alive = at
        return alive

    def _stale(self, js: JobState, now_ns: int) -> set[str]:
        """Comms whose newest message is older than a few heartbeat periods: their input is
        behind (or their nodes are silent), so what stage 1 says of them is not current."""
        limit = self.settings.node_lost_periods * self.settings.heartbeat_period_s * 1e9
        return {c for c, r in js.comms.items() if now_ns - r.get("seen_ns", now_ns) >= limit and not self._over(js, c)}

    @staticmethod
    def _over(js: JobState, comm: str) -> bool:
        """A comm every member left (destroyed) says nothing more: it is over, not behind."""
        left = js.comms.get(comm, {}).get("left")
        return bool(left) and len(left) >= len(js.members.get(comm, ()))

    def _reporting(self, js: JobState, now_ns: int) -> set[str]:
        """Nodes whose heartbeats are current: what they say of their ranks is news."""
        limit = self.settings.node_lost_periods * self.settings.heartbeat_period_s * 1e9
        return {n for n, seen in js.node_seen.items() if now_ns - seen < limit}

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

    def _hangs(self, js: JobState, now_ns: int, lost: set[str], out: list) -> None:
        if not js.waits:
            js.analysis = None
            held = js.book.open.get(("hang",))
            if held is not None and all(self.silent_since(js, r, now_ns) > held.opened_ns for r in held.culprit_ranks):
                # nobody waits any more and its roots progress again: over (a rank-0-only
                # checkpoint longer than the threshold, a stall that ended), not after the quiet
                # period, while the job has been running for that long already
                out.extend(js.book.resolve(("hang",), now_ns, "its root ranks progress again"))
            return
        at = self.as_of(js, now_ns)  # what every comm's reports tell: waits and silences are judged then
        reporting = self._reporting(js, at)
        if js.node_seen and not reporting:
            js.book.keep(("hang",), now_ns)  # not known to be over either (`_ended` ends the job)
            return  # nobody reports any more: the job ended or the pipeline lost it, not a hang
        stale = self._stale(js, at)
        # a comm that never completed a call has no cadence yet: its first wait may be a long
        # first iteration (compilation, calls enqueued far ahead of the compute): warm-up
        warm = self.settings.hang_warmup_s * 1e9
        current = {c: w for c, w in js.waits.items() if c not in stale and (
            js.comms.get(c, {}).get("done", True) or all(at - i["since_ns"] >= warm for i in w["instances"]))}
        thr, root_thr = js.threshold_ns, js.root_threshold_ns
        exited = self._exited(js)
        stuck = self._stuck(js, at)
        # a rank that left one comm (destroyed, to be created anew under another id) still
        # waits and progresses in its others: gone only once it left them all. Generator D's
        # data-parallel comms re-created mid-run: every rank had left one, and none was waited on
        left = self._left_all(js)
        # a rank silent for the threshold is hung once others wait on it inside a call (for the
        # floor: the threshold measures the rank's own silence against its cadence; peers reach
        # the call it never entered only at their own pace, within that cadence)
        # a rank inside a P2P call whose other side completed its own: the transfer is over
        # for the peer, and this side's completion never came (its process died inside the
        # call, or its completion path is stuck): it waits on nobody, and its call is no
        # transport hang. Generator A's node whose eight processes died just after entering
        # their pipeline recvs (its agent heartbeating on), drawn with SEED 6: the eight recvs,
        # their sends completed, were eight comm_hangs (one P0 naming no rank), and the eight
        # dead ranks were never named
        done_by_peer = {i["entered"][0] for w in current.values() for i in w["instances"] if i.get("peer_done")}
        an = waits.analyse(current, at, min(thr, self.settings.hang_floor_s * 1e9),
                           exited | set(stuck) | left | done_by_peer)
        js.analysis = an
        # comms with a call entered and not completed whose wait is not reported yet (it is,
        # once waited in for a second): a member silent there may be inside that call
        unreported = {c for c, rep in js.comms.items() if c not in js.waits and not rep.get("p2p_only")
                      and rep.get("s", -1) > rep.get("d", -1)}
        inside = self._inside_unjudged(js, current, stale)
        roots = []
        for r, (comm, seq, op, p2p) in sorted(an.roots.items()):
            node = js.node_of.get(r)
            if node in lost:
                continue  # its node is lost: node_lost covers it
            if any(r in js.members.get(c, ()) for c in stale):
                continue  # a comm of it has news not read yet (its input is behind): not known silent
            if r in exited:
                reason = "exited"
            elif r in stuck:
                reason = "completion_stuck"
            elif at - self.silent_since(js, r, at) >= root_thr:
                if r in inside or any(r in js.members.get(c, ()) for c in unreported):
                    continue  # maybe blocked in a call of it, behind someone else: not known hung yet
                reason = "not_started" if r in an.not_started else "silent"
            else:
                continue  # still progressing elsewhere: slow, not hung (the slow detectors judge it)
            roots.append((r, reason, comm, seq, op, p2p))
        if roots:
            skip = exited | set(stuck) | left | inside | {
                r for w in current.values() for i in w["instances"] for r in i["entered"]}
            skip.update(r for c in stale | unreported for r in js.members.get(c, ()))
            roots.extend(self._died_with(js, at, roots, skip, root_thr))
        waited = at - an.oldest_since_ns
        if ("hang",) in js.book.open:
            js.hang_waiters |= an.waiting
        else:
            js.hang_waiters = set(an.waiting)
        roots, comm_roots = self._torn_down(js, at, roots, an.comm_roots)
        if roots:
            self._assert_hang(js, now_ns, at, an, roots, waited, root_thr, out)
        elif ("hang",) in js.book.open and any(r in js.members.get(c, ()) for c in stale
                                               for r in js.book.open[("hang",)].culprit_ranks):
            # a comm of its roots is behind (its node's data late, a worker that took its
            # partition over catching up): not known to progress again, the hang is kept
            # open. Two workers, a hung job's partitions moving to the one that joined: its
            # P0 resolved "not seen for 10 s", and opened again under its id once data came
            js.book.keep(("hang",), now_ns)
        comm_roots = [x for x in comm_roots if not lost.intersection(js.comms.get(x.comm, {}).get("nodes", ()))
                      and set(js.comms.get(x.comm, {}).get("nodes") or ()) <= reporting
                      # a comm a member of which exited is no transport hang: the exit explains it
                      and not (exited & (set(x.entered) | js.members.get(x.comm, set())))
                      and at - x.since_ns >= thr
                      # calls queued far ahead (host enqueue) wait behind compute while their
                      # ranks progress: a transport hang stops every member
                      and all(at - self.silent_since(js, r, at) >= thr for r in x.entered)]
        if comm_roots:
            x = min(comm_roots, key=lambda i: (i.since_ns, i.comm))
            nodes = sorted({n for i in comm_roots for n in js.comms.get(i.comm, {}).get("nodes", ())})
            age = (at - x.since_ns) / 1e9
            out.extend(js.book.assert_(
                ("comm_hang",), now_ns, kind="comm_hang", severity="P0", culprit_ranks=[], culprit_nodes=nodes,
                comm=x.comm,
                summary=f"all {len(x.entered)} members entered {x.op} #{x.seq} on comm {x.comm[:4]}.. and none "
                        f"completes for {age:.1f} s (nodes {', '.join(nodes) or '?'})",
                evidence={"seq": x.seq, "op": x.op, "waited_s": round(age, 1), "ranks": sorted(x.entered)[:64],
                          "comms": [i.comm for i in comm_roots][:16], "threshold_s": round(thr / 1e9, 2),
                          "onset_ns": int(x.since_ns)},
                id_hint=f"{x.comm}-{x.seq}"))

    @staticmethod
    def _inside_unjudged(js: JobState, current: dict, stale: set[str]) -> set[int]:
        """Ranks inside a call whose wait is not judged yet (its comm never completed a call:
        a first wait may be a long first iteration): they wait there, they are not silent.
        Generator D's hang at the first iteration: a TP group's three members inside all-reduce
        #0, the fourth never in it, the next stage waiting on all four in its recvs: the P0
        named the four."""
        return {r for c, w in js.waits.items() if c not in current and c not in stale
                for i in w["instances"] for r in i["entered"]}

    def _died_with(self, js: JobState, now_ns: int, roots: list, skip: set[int], thr: float) -> list[tuple]:
        """The ranks of a silent root's node that fell silent with it (within `thr` of it),
        silent for the threshold as it is, inside no call: a node's processes die together
        (its agent heartbeating on), and nobody waits on some of them yet when the hang is
        named. Generator A's node of eight processes crashing, drawn with SEED 13: the P0
        named seven, the eighth (its pipeline partner on the same node, its data-parallel
        peers not yet at their next reduction) joined a second later. A victim is inside the
        call it waits in, or still progresses: neither is named."""
        named = {x[0] for x in roots}
        out = []
        for r, reason, *_ in list(roots):
            node = js.node_of.get(r)
            if reason != "silent" or node is None:
                continue
            since = self.silent_since(js, r, now_ns)
            for q in sorted(js.node_ranks.get(node, ())):
                if q in named or q in skip:
                    continue
                quiet = self.silent_since(js, q, now_ns)
                if quiet and now_ns - quiet >= thr and abs(quiet - since) <= thr:
                    named.add(q)
                    out.append((q, "silent", "", -1, "", False))
        return out

    def _torn_down(self, js: JobState, now_ns: int, roots: list, comm_roots: list) -> tuple[list, list]:
        """While a hang is open its victims may be torn down (a watchdog aborts them): their
        processes exit, the probe gives up on the calls of those left (COMPLETION_LOST), and the
        waits change shape: a rank waiting on an exited one since the hang began seems a root,
        and a call blocked since then, its peer's side given up on, every member entered (a
        transport hang). So while it is open a root is one of its culprits, or a rank that fell
        silent before it began and did not exit; and calls blocked since it began are its
        symptoms. The third generator's watchdog abort, 40 s after a hang: the P0 was updated
        to name two victims with the root, and a second P0 opened (a comm_hang). A rank never
        seen waiting on a root while it is open is no victim: a second root, however soon after
        the onset it fell silent (generator E's two ranks that stop at once, drawn with SEED 5:
        rank 9's silence began a few milliseconds after rank 50's wait, which dates the hang,
        and its TP peers' wait reached the threshold 0.25 s later; 9 was never named)."""
        held = js.book.open.get(("hang",))
        if held is None:
            return roots, comm_roots
        onset = held.evidence.get("onset_ns", held.opened_ns)
        roots = [x for x in roots if x[0] in held.culprit_ranks
                 or (x[1] != "exited" and (self.silent_since(js, x[0], now_ns) < onset
                                           or self._never_waited(js, x[0])))]
        return roots, [x for x in comm_roots if x.since_ns < onset]

    @staticmethod
    def _never_waited(js: JobState, rank: int) -> bool:
        """Whether `rank` was never seen waiting on a root while the open hang lasted."""
        return rank not in js.hang_waiters

    def _assert_hang(self, js: JobState, now_ns: int, at: int, an: waits.Analysis, roots: list, waited: int,
                     thr: float, out: list) -> None:
        ranks = sorted(r for r, *_ in roots)
        stuck = self._stuck(js, at)
        detail = []
        for r, reason, comm, seq, op, p2p in roots[:16]:
            d = {"rank": r, "reason": reason, "comm": comm, "seq": seq, "op": op, "p2p": p2p, "node": js.node_of.get(r)}
            if reason == "completion_stuck":
                d["completed"], d["peers_completed"] = stuck[r][0], stuck[r][1]
            detail.append(d)
        first = next((d for d in detail if d["op"]), detail[0])
        held = js.book.open.get(("hang",))
        if not first["op"] and held is not None and held.evidence.get("op"):
            # no root in a call any more (its peers' calls given up on, a watchdog's abort):
            # the call it never entered is the one said when the hang opened
            first = {**first, "comm": held.comm, "seq": held.evidence["seq"], "op": held.evidence["op"],
                     "p2p": held.evidence.get("roots", [{}])[0].get("p2p", False)}
        who = ", ".join(map(str, ranks[:8])) + ("..." if len(ranks) > 8 else "")
        s = "s" if len(ranks) > 1 else ""
        if first["reason"] == "exited":
            what = f"rank{s} {who} exited; peers wait in {first['op']} #{first['seq']} on comm {first['comm'][:4]}.."
        elif first["reason"] == "completion_stuck":
            what = (f"rank{s} {who}: completions stopped at #{first['completed']} while peers completed "
                    f"#{first['peers_completed']} (GPU or driver fault suspected); never entered {first['op']} "
                    f"#{first['seq']} on comm {first['comm'][:4]}..")
        elif first["reason"] == "not_started":
            what = (f"rank{s} {who}: GPU never started {first['op']} #{first['seq']} on comm {first['comm'][:4]}.. "
                    f"(enqueued by the host; peers wait in it on their GPUs: a kernel before it holds the GPU)")
        else:
            what = f"rank{s} {who} never entered {first['op']} #{first['seq']} on comm {first['comm'][:4]}.."
        blocked = sorted({x.comm for x in an.blocked})
        # the hang began when it began: an open one's onset never moves later. Its victims torn
        # down (a watchdog's abort) reshape the waits, and the oldest left may be younger: its
        # onset moved 0.4 s later, past a victim's silence, and `_torn_down` kept that victim
        # as a rank silent before the hang began (generator C's abort drawn with 34000: the P0
        # updated to name 25 with 26)
        onset = int(an.oldest_since_ns)
        if held is not None and held.evidence.get("onset_ns"):
            onset = min(onset, int(held.evidence["onset_ns"]))
        out.extend(js.book.assert_(
            ("hang",), now_ns, kind="hang", severity="P0", culprit_ranks=ranks, culprit_nodes=self.nodes_of(js, ranks),
            comm=first["comm"],
            summary=f"{what}; {len(an.waiting)} ranks waiting {waited / 1e9:.1f} s",
            evidence={"roots": detail, "seq": first["seq"], "op": first["op"], "waiting_ranks": len(an.waiting),
                      "waited_s": round(waited / 1e9, 1), "threshold_s": round(thr / 1e9, 2),
                      "blocked_comms": blocked[:32], "blocked_instances": len(an.blocked), "deadlock": an.deadlock,
                      "onset_ns": onset},
            id_hint=f"{first['comm']}-{'p2p' if first['p2p'] else ''}{first['seq']}"))

    def _stalled(self, js: JobState, now_ns: int, out: list) -> None:
        if js.waits or not js.comms or not js.node_seen:
            return
        limit = self.settings.node_lost_periods * self.settings.heartbeat_period_s * 1e9
        if now_ns - max(js.node_seen.values()) > limit:
            return  # nobody reports: the job ended or the pipeline lost it, not a stall
        last = max(c["last_ns"] for c in js.comms.values())
        if last <= 0:
            return
        need = max(self.settings.stall_floor_s * 1e9, self.settings.stall_step_factor * self.median_step_ns(js))
        idle = now_ns - last
        if idle >= need:
            out.extend(js.book.assert_(
                ("job_stalled",), now_ns, kind="job_stalled", severity="P2", culprit_ranks=[], culprit_nodes=[],
                comm="", summary=f"no rank inside a call and no progress for {idle / 1e9:.0f} s",
                evidence={"idle_s": round(idle / 1e9, 1), "limit_s": round(need / 1e9, 1), "onset_ns": int(last)},
                id_hint=f"{now_ns}"))

    # ------------------------------------------------------------------------------
    def _fresh_steps(self, js: JobState, now_ns: int) -> list[dict]:
        """Every rank reported an iteration between ticks: its phases are judged at once, and the
        slow-rank evaluation runs now if they name a rank not named yet (rather than at the
        next `SLOW_EVAL_NS`: in a job with 1 s steps, up to half an iteration sooner)."""
        js.steps.fresh = False
        out: list[dict] = []
        if not js.world_size:  # the job's size unknown: the next evaluation judges it
            return out
        held, before = self._slow_open(js), js.steps.judged
        verdicts = js.steps.evaluate(now_ns, js.coords, held, js.world_size)
        if js.steps.judged > before and set(verdicts) - held:
            js.last_slow_eval = now_ns
            self._slow(js, now_ns, out)
        return out

    @staticmethod
    def _slow_open(js: JobState, rates: bool = False) -> set[int]:
        """Ranks named by open slow-rank incidents; `rates`: only those named for computing
        slower (the rate models hold them), not for stalls (`SlowTracker.stalls`: the rate
        models took each stall for a pause, and would hold the figures it inflates)."""
        return {r for inc in js.book.of_kind("slow_rank") for r in inc.culprit_ranks
                if not rates or inc.evidence.get("signal") != "stalls"}

    @staticmethod
    def _slow_units(js: JobState, found: dict[int, dict], hung: set[int], now_ns: int
                    ) -> list[tuple[tuple, list[int], dict]]:
        """Incidents to assert: (key, culprit ranks, evidence). One per slow rank; ranks of one
        node found slow at once, one per node (a node throttled as a whole: one page); ranks of
        a group slow as a whole (`slow.py`, `steps.py`), one per group. A rank named by an open
        incident stays in it, whichever way it is found now, and a rank found later joins the
        open incident of its node or group: one fault, one incident (generator A's slow node of
        a data-parallel job under host-enqueue, judged by the phases: seven of its eight ranks
        in one incident, the eighth 3 s later in another; drawn with SEED 6, one of them first,
        alone, and five others 1 s later in a second incident). A rank alone joins only within
        `NODE_JOIN_NS` of its incident's opening: a node slowing as a whole shows its ranks
        within seconds, a rank found long after another of its node is another fault
        (generator B's DDP job drawn with SEED 7: a rank named at 14 s by a pause, its node's
        2x culprit found at 27 s joined it, and the incident named a non-culprit)."""
        named = {r: key for key, inc in js.book.open.items() if inc.kind == "slow_rank" for r in inc.culprit_ranks}
        node_open: dict[str, tuple] = {}  # node -> the first open incident naming a rank of it
        for r, key in named.items():
            if js.node_of.get(r) is not None and now_ns - js.book.open[key].opened_ns <= NODE_JOIN_NS:
                node_open.setdefault(js.node_of[r], key)
        new = [r for r in found if r not in hung and r not in named]
        together: dict[tuple, list[int]] = {}
        for r in new:
            node = js.node_of.get(r)
            if node is not None:
                together.setdefault(("slow_rank", "node", node), []).append(r)
            if found[r].get("group"):
                together.setdefault(("slow_rank", "group", found[r]["group"]), []).append(r)
        units: dict[tuple, tuple[list[int], dict]] = {}
        for r, ev in sorted(found.items()):
            if r in hung:
                continue
            by_node, by_group = ("slow_rank", "node", js.node_of.get(r)), ("slow_rank", "group", ev.get("group"))
            key = (named.get(r) or next((k for k in (by_node, by_group) if k in js.book.open), None)
                   or node_open.get(by_node[2])
                   or next((k for k in (by_node, by_group) if len(together.get(k, ())) > 1), ("slow_rank", r)))
            units.setdefault(key, ([], ev))[0].append(r)
        out = []
        for key, (ranks, ev) in units.items():
            inc = js.book.open.get(key)
            ranks = sorted(set(ranks) | set(inc.culprit_ranks if inc else ()))
            out.append((key, ranks, {**ev, "ranks": ranks} if len(ranks) > 1 else ev))
        return out

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
        schedule. Where the phases name nobody (an FSDP job: every rank waits on the culprit
        inside its phases alike), nothing is taken back; nor is a rank slow itself among
        culprits of its own group (`_slow_among`)."""
        named = self._slow_open(js)
        culprits = named | {r for r, ev in phased.items() if ev.get("ratio", 0.0) >= 1 + js.slow.slow_impact}
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

    def _waiting_in_phases(self, js: JobState, found: dict[int, dict], phased: dict[int, dict]) -> set[int]:
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
        if not slow:
            return set()
        return {r for r in phased if r not in found and js.slow.waits_for(r, slow - {r})}

    @staticmethod
    def _felt(js: JobState, ev: dict, open_) -> float:
        """The share of the job's time a slow rank costs, as its severity and summary give it:
        what the collectives claim, but no more than `UNFELT_SHARE` x what the job's own
        iterations lost since it was found (its incident opened), where the job reports them
        and its baseline was taken before (a rank slow from the start is in its baseline).
        Generator C's healthy job with one-iteration host stalls drawn with 18000: a TP pair
        named P3 with no loss claimed became P1 "the job loses ~92 % of its time waiting on
        them" 24 s later, while the job's iterations ran as fast as before it (a median of
        1.21 s against 1.2-2.3 s). The phases' impact is the job's steps already."""
        impact = ev["impact"]
        steps = js.steps
        since = open_.opened_ns if open_ is not None else ev.get("onset_ns", 0)
        if ev.get("signal") == "phases" or steps.settled_ns is None or since < steps.settled_ns:
            return impact
        loss = steps.loss_since(since)
        return impact if loss is None else min(impact, max(0.0, loss) * UNFELT_SHARE)

    def _unfelt(self, js: JobState, found: dict[int, dict]) -> list[int]:
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
        phased = js.steps.evaluate(now_ns, js.coords, held) if periodic else js.steps.verdicts
        for r in self._echoes(js, found, phased, now_ns) + self._unfelt(js, found):
            found.pop(r, None)
        waited = self._waiting_in_phases(js, found, phased)
        for r, ev in phased.items():
            if r in found:
                found[r]["phases"] = ev
            elif r not in waited and not js.gate.waits_for(r, now_ns):
                found[r] = ev
        for r, ev in js.slow.stalls(now_ns, held | found.keys()).items():
            found.setdefault(r, ev)  # a rank found slow otherwise is that; one that stalls again and again, this
        loss = js.steps.slowdown()
        for r, ev in js.gate.evaluate(now_ns).items():  # host-enqueue: the host the job's calls wait for
            cost = round(max(0.0, loss or 0.0), 4)
            found.setdefault(r, {**ev, "impact": cost, "slowdown": cost, "ratio": round(1.0 + cost, 3)})
        if not found and loss is not None and loss >= LOCAL_LOSS:
            # the job slower than its baseline and nothing else explains it: a rank alone slower
            # in the phase it computes apart does; it costs the job what the job lost
            found = {r: {**ev, "impact": loss} for r, ev in js.steps.local_verdicts.items()}
        clocks = self._sm_clocks(js)
        med_clock = statistics.median(clocks.values()) if len(clocks) >= 2 else 0.0
        for key, ranks, ev in self._slow_units(js, found, hung, now_ns):
            open_ = js.book.open.get(key)
            impact = self._felt(js, ev, open_)
            if impact < ev["impact"]:
                ev = {**ev, "impact": round(impact, 4), "impact_claimed": ev["impact"]}
            lasting = open_ is not None and now_ns - open_.opened_ns >= P1_AFTER_NS
            sev = "P1" if impact >= 0.5 and lasting else "P2" if impact >= 0.2 else "P3"
            if open_ is not None:
                sev = min(sev, open_.severity)  # severity only rises while open: no flapping updates
            low = {r: clocks[r] for r in ranks if clocks.get(r) and med_clock
                   and clocks[r] < HW_SLOW_EVIDENCE_RATIO * med_clock}
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
                       f"({ev['stalls']} times lately: a data loader or host hiccup?)")
                where = "its peers wait in their next call"
            elif len(ranks) == 1:
                who = f"rank {ranks[0]} is {pct:.0f}% slower than the ranks doing the same work"
            else:
                who = (f"ranks {_span(ranks)} ({', '.join(nodes[:4])}{'...' if len(nodes) > 4 else ''}) are "
                       f"~{pct:.0f}% slower than the ranks doing the same work elsewhere")
            out.extend(js.book.assert_(
                key, now_ns, kind="slow_rank", severity=sev, culprit_ranks=ranks, culprit_nodes=nodes,
                comm=ev.get("comm", ""), quiet_ns=int(3 * self.median_step_ns(js)),
                summary=f"{who} ({where}); the job loses ~{max(0.0, impact) * 100:.0f}% of its time waiting on "
                        f"{'it' if len(ranks) == 1 else 'them'}",
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
        if unexplained and now_ns - js.slowdown_since >= JOB_SLOWDOWN_HOLD_NS:
            out.extend(js.book.assert_(
                ("job_slowdown",), now_ns, kind="slow_rank", severity="P3", culprit_ranks=[], culprit_nodes=[],
                comm="", summary=f"the job's steps take {loss * 100:.0f}% longer than its own baseline; "
                                 f"no rank explains it",
                evidence={"job_slowdown": loss, "median_step_s": round(js.steps.median_step_s(), 3),
                          "baseline_step_s": round(js.steps.base_s, 3)},
                id_hint=f"{now_ns}"))
        links, nodes = js.slow.slow_links(now_ns, set(found), js.node_of)
        if links:
            self._slow_link(js, links, nodes, now_ns, out)

    @staticmethod
    def _link_open(js: JobState) -> bool:
        """Whether a slow link's incident is open: it explains the job's slowdown (generator
        D's slow NIC drawn with 10: its P2 open, the job's 24 % slowdown was also reported as
        unexplained, P3)."""
        return any(key[0] == "slow_link" for key in js.book.open)

    @staticmethod
    def _link_key(js: JobState, nodes: list[str]) -> tuple:
        """The incident key of a slow link between `nodes`: an open slow-link incident of any
        of them, as its nodes are narrowed down or widened (one incident per fault), else
        theirs. Generator D's slow NIC drawn with 10: its node pair named P2, then that node
        alone in a second P2 a second later, both open ten seconds."""
        for key, inc in js.book.open.items():
            if key[0] == "slow_link" and set(key[1]) & set(nodes):
                return key
        return ("slow_link", tuple(nodes))

    @classmethod
    def _slow_link(cls, js: JobState, links: list[dict], nodes: list[str], now_ns: int, out: list) -> None:
        evidence: dict = {"comms": links[:16]}
        summary = f"transfers slow on {len(links)} comm(s) spanning {', '.join(nodes)}; no rank is slow"
        erring = [n for n in nodes if now_ns - js.ib_errors.get(n, (0, -IB_ERRORS_RECENT_NS))[1] < IB_ERRORS_RECENT_NS]
        if len(nodes) > 2 and 1 <= len(erring) <= 2:  # the nodes' link counters tell which link
            evidence.update(candidate_nodes=nodes, ib_symbol_errors={n: js.ib_errors[n][0] for n in erring})
            summary = (f"transfers slow on {len(links)} comm(s) spanning {len(nodes)} nodes; no rank is slow, "
                       f"and InfiniBand symbol errors rose on {', '.join(erring)} only")
            nodes = erring
        if len(nodes) <= 2:
            out.extend(js.book.assert_(
                cls._link_key(js, nodes), now_ns, kind="slow_link", severity="P2", culprit_ranks=[],
                culprit_nodes=nodes, comm=links[0]["comm"], summary=summary, evidence=evidence,
                id_hint=f"{'-'.join(nodes)}-{now_ns}"))
        else:  # every slow comm spans the same nodes: which of their links is slow is not known
            out.extend(js.book.assert_(
                cls._link_key(js, nodes), now_ns, kind="slow_link", severity="P3", culprit_ranks=[],
                culprit_nodes=[], comm=links[0]["comm"],
                summary=f"transfers slow on {len(links)} comm(s) spanning {', '.join(nodes)}; no rank is slow, "
                        f"and no comm tells which of their links it is",
                evidence={"comms": links[:16], "candidate_nodes": nodes}, id_hint=f"{'-'.join(nodes)}-{now_ns}"))

    def _sm_clocks(self, js: JobState) -> dict[int, float]:
        return {r: s["sm_clock_mhz"] for (_, r), s in js.hw.items() if r >= 0 and s.get("sm_clock_mhz")}

    def _hw(self, js: JobState, now_ns: int, out: list) -> None:
        clocks = self._sm_clocks(js)
        med = statistics.median(clocks.values()) if len(clocks) >= 4 else 0.0
        slow_ranks = {r for inc in js.book.of_kind("slow_rank") for r in inc.culprit_ranks}
        hung = set(js.book.open[("hang",)].culprit_ranks) if ("hang",) in js.book.open else set()
        for (node, rank), s in sorted(js.hw.items()):
            if rank in slow_ranks:
                continue
            why = []
            if s.get("xid"):
                why.append(f"XID {s['xid']}")
            if s.get("ecc_dbe"):
                why.append(f"{s['ecc_dbe']} new ECC double-bit errors")
            if s.get("nvml_timeout"):
                why.append("the GPU stopped answering NVML")
            clock = s.get("sm_clock_mhz")
            if med and clock and rank >= 0 and clock < HW_CLOCK_RATIO * med:
                why.append(f"SM clock {clock:.0f} MHz vs {med:.0f} MHz on peers")
            if not why:
                js.hw_since.pop((node, rank), None)
                continue
            since = js.hw_since.setdefault((node, rank), now_ns)
            if now_ns - since < HW_HOLD_NS and not (s.get("xid") or s.get("ecc_dbe") or s.get("nvml_timeout")):
                continue  # give a slowdown time to show: then it is a slow_rank with evidence
            sev = "P2" if s.get("xid") or s.get("ecc_dbe") or s.get("nvml_timeout") else "P3"
            out.extend(js.book.assert_(
                ("hw_fault", node, rank), now_ns, kind="hw_fault", severity=sev,
                culprit_ranks=[rank] if rank >= 0 else [], culprit_nodes=[node], comm="",
                summary=f"{node}{f' rank {rank}' if rank >= 0 else ''}: {'; '.join(why)}",
                evidence={k: s[k] for k in ("sm_clock_mhz", "throttle_reasons", "xid", "ecc_dbe", "temp_c",
                                            "nvml_timeout") if k in s},
                id_hint=f"{node}-{rank}-{now_ns}"))
        for rank, (done, peers, comm) in sorted(self._stuck(js, now_ns).items()):
            if rank in hung:
                continue
            since = js.stuck_since.setdefault(rank, now_ns)
            if now_ns - since < STUCK_HW_NS:
                continue
            node = js.node_of.get(rank, "")
            out.extend(js.book.assert_(
                ("completion_stuck", rank), now_ns, kind="hw_fault", severity="P2", culprit_ranks=[rank],
                culprit_nodes=[node] if node else [], comm=comm,
                summary=f"rank {rank}: completions stopped at #{done} while its peers completed #{peers} on comm "
                        f"{comm[:4]}..; the job still progresses (GPU or driver fault suspected)",
                evidence={"completed": done, "peers_completed": peers, "comm": comm}, id_hint=f"{rank}-{now_ns}"))
        js.stuck_since = {r: t for r, t in js.stuck_since.items() if r in self._stuck(js, now_ns)}


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
