"""Stage 2: all communicators of a job together -> incidents (contract 2.6).

Inputs: stage-1 reports (see `comm_stage.py`) and the job-keyed topics (topology, steps,
hardware). Detectors: `hang` / `comm_hang` (wait-for chains), `node_lost`, `job_stalled`,
`slow_rank`, `slow_link`, `hw_fault`. Time is the event time handed in (`now_ns`).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from commwatch import topics
from commwatch.settings import Settings
from commwatch.streams.detect import health
from commwatch.streams.detect.hang import inside_map, walk
from commwatch.streams.detect.incidents import IncidentBook
from commwatch.streams.detect.slow import SlowTracker

TICK_NS = 250_000_000
SLOW_EVAL_NS = 500_000_000
HW_CLOCK_RATIO = 0.85  # SM clock below this share of the job's median is an anomaly
HW_SLOW_EVIDENCE_RATIO = 0.95
STEP_NORMAL = 1.05  # a step within this factor of the learned normal teaches the normal
STEP_LEARN = 0.1
STEP_DRIFT = 0.02
RECENT_STEPS = 1.5  # the current step time: median of steps reported in this many normal steps
P1_AFTER_NS = 10_000_000_000  # a slow rank costing half the job's time is P1 once it lasts this long
HW_HOLD_NS = 10_000_000_000  # a hardware anomaly this old with no slowdown is a hw_fault


@dataclass
class JobState:
    job: str
    book: IncidentBook
    slow: SlowTracker
    node_of: dict[int, str] = field(default_factory=dict)
    coords: dict[int, dict] = field(default_factory=dict)
    node_ranks: dict[str, set] = field(default_factory=dict)
    node_seen: dict[str, int] = field(default_factory=dict)
    waits: dict[str, dict] = field(default_factory=dict)
    comms: dict[str, dict] = field(default_factory=dict)
    steps: deque = field(default_factory=lambda: deque(maxlen=256))
    base_step: dict[int, float] = field(default_factory=dict)
    recent_steps: deque = field(default_factory=lambda: deque(maxlen=4096))
    hw: dict[tuple[str, int], dict] = field(default_factory=dict)
    hw_since: dict[tuple[str, int], int] = field(default_factory=dict)
    last_tick: int = 0
    last_slow_eval: int = 0
    last_iteration: int | None = None


class JobStage:
    """Stage 2 over one or many jobs: `feed_report`, `feed` (topology/steps/hw), `tick`."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.jobs: dict[str, JobState] = {}

    def job(self, job: str) -> JobState:
        js = self.jobs.get(job)
        if js is None:
            s = self.settings
            js = self.jobs[job] = JobState(job, IncidentBook(job, s.resolve_after_s),
                                           SlowTracker(s.slow_impact, s.slow_windows))
        return js

    # ------------------------------------------------------------------------------
    def feed_report(self, rep: dict, now_ns: int) -> list[dict]:
        js = self.job(rep["job"])
        t = rep["type"]
        if t == "window":
            js.slow.window(rep)
        elif t == "p2p_window":
            js.slow.p2p_window(rep)
        elif t == "wait":
            js.waits[rep["comm"]] = rep
        elif t == "wait_clear":
            js.waits.pop(rep["comm"], None)
        elif t == "comm":
            js.comms[rep["comm"]] = rep
        elif t == "node":
            js.node_seen[rep["node"]] = max(js.node_seen.get(rep["node"], 0), rep["ts_ns"])
            ranks = js.node_ranks.setdefault(rep["node"], set())
            for r in rep["ranks"]:
                js.node_of.setdefault(r, rep["node"])
                ranks.add(r)
        return []

    def feed(self, msg, decoded: dict, now_ns: int) -> list[dict]:
        """Topology, steps and hardware messages (`msg.topic` says which); no incident at once."""
        js = self.job(decoded["job"])
        if msg.topic == topics.TOPOLOGY:
            js.node_of[decoded["rank"]] = decoded["node"]
            js.node_ranks.setdefault(decoded["node"], set()).add(decoded["rank"])
            if decoded.get("coords"):
                js.coords[decoded["rank"]] = decoded["coords"]
        elif msg.topic == topics.STEPS:
            dur = decoded["t_end_ns"] - decoded["t_start_ns"]
            js.steps.append(dur)
            js.last_iteration = max(js.last_iteration or 0, decoded["iteration"])
            base = js.base_step.get(decoded["rank"])
            if base is None:
                base = js.base_step[decoded["rank"]] = float(dur)
            else:  # each rank's normal step: learned from normal steps, drifting up only slowly
                rate = STEP_LEARN if dur <= base * STEP_NORMAL else STEP_DRIFT
                js.base_step[decoded["rank"]] = base + rate * (dur - base)
            if len(js.steps) >= 16 and dur > 0:
                js.recent_steps.append((now_ns, 1.0 - base / dur))
        elif msg.topic == topics.HW:
            js.hw[(decoded["node"], decoded.get("rank", -1))] = decoded
        return []

    # ------------------------------------------------------------------------------
    def tick(self, now_ns: int) -> list[dict]:
        out: list[dict] = []
        for js in self.jobs.values():
            if now_ns - js.last_tick < TICK_NS:
                continue
            js.last_tick = now_ns
            lost = self._node_lost(js, now_ns, out)
            self._hangs(js, now_ns, lost, out)
            self._stalled(js, now_ns, out)
            if now_ns - js.last_slow_eval >= SLOW_EVAL_NS:
                js.last_slow_eval = now_ns
                self._slow(js, now_ns, out)
                self._hw(js, now_ns, out)
            out.extend(js.book.expire(now_ns))
        return out

    def health(self, job: str, now_ns: int, drops: dict[str, int] | None = None) -> dict | None:
        """The job's health snapshot (`health.py`); None for a job never seen."""
        js = self.jobs.get(job)
        return None if js is None else health.snapshot(js, now_ns, drops)

    def nodes_of(self, js: JobState, ranks) -> list[str]:
        return sorted({js.node_of[r] for r in ranks if r in js.node_of})

    def median_step_ns(self, js: JobState) -> float:
        if js.steps:
            return float(statistics.median(js.steps))
        gaps = [c["gap_p50_ns"] for c in js.comms.values() if c["gap_p50_ns"] > 0]
        return float(max(gaps)) if gaps else 0.0

    def step_loss(self, js: JobState, now_ns: int) -> float:
        """Share of the current step time lost against each rank's learned normal step (median
        over the steps reported lately; 0 without iteration timings)."""
        if not js.recent_steps:
            return 0.0
        since = now_ns - RECENT_STEPS * statistics.median(js.steps)
        losses = [x for t, x in js.recent_steps if t >= since]
        return max(0.0, float(statistics.median(losses))) if losses else 0.0

    # ------------------------------------------------------------------------------
    def _node_lost(self, js: JobState, now_ns: int, out: list) -> set[str]:
        limit = self.settings.node_lost_periods * self.settings.heartbeat_period_s * 1e9
        if not js.node_seen:
            return set()
        newest = max(js.node_seen.values())
        lost = set()
        for node, seen in sorted(js.node_seen.items()):
            if now_ns - seen >= limit and newest - seen >= limit:
                lost.add(node)
                ranks = sorted(js.node_ranks.get(node, ()))
                out.extend(js.book.assert_(
                    ("node_lost", node), now_ns, kind="node_lost", severity="P0", culprit_ranks=ranks,
                    culprit_nodes=[node], comm="",
                    summary=f"no heartbeat from {node} for {(now_ns - seen) / 1e9:.1f} s ({len(ranks)} ranks)",
                    evidence={"last_heartbeat_ns": seen, "silent_s": round((now_ns - seen) / 1e9, 1), "onset_ns": seen},
                    id_hint=f"{node}-{now_ns}"))
        return lost

    def _hangs(self, js: JobState, now_ns: int, lost: set[str], out: list) -> None:
        if not js.waits:
            return
        inside = inside_map(js.waits)
        timed_out = [c for c in sorted(js.waits) if now_ns - js.waits[c]["since_ns"] >= js.waits[c]["threshold_ns"]]
        if not timed_out:
            return
        oldest = max(now_ns - js.waits[c]["since_ns"] for c in timed_out)
        roots, rc, reached = walk(js.waits, inside, timed_out)
        root_comms = {c: js.waits[c] for c in rc if now_ns - js.waits[c]["since_ns"] >= js.waits[c]["threshold_ns"]}
        waiting = sorted(inside)
        for comm, w in sorted(root_comms.items()):
            ranks = [r for r, _, _ in w["inside"]]
            nodes = w.get("nodes") or self.nodes_of(js, ranks)
            if lost.intersection(nodes) or w.get("unknown"):
                continue  # a lost node (node_lost) or a member never seen: not the transport's fault
            age = (now_ns - w["since_ns"]) / 1e9
            out.extend(js.book.assert_(
                ("comm_hang", comm), now_ns, kind="comm_hang", severity="P0", culprit_ranks=[],
                culprit_nodes=nodes, comm=comm,
                summary=f"all {len(ranks)} members entered {w['op']} #{w['seq']} on comm {comm[:4]}.. and none "
                        f"completes for {age:.1f} s (nodes {', '.join(nodes) or '?'})",
                evidence={"seq": w["seq"], "op": w["op"], "waited_s": round(age, 1), "ranks": ranks,
                          "onset_ns": int(w["since_ns"])},
                id_hint=f"{comm}-{w['seq']}"))
        if not roots:
            return
        root_ranks = sorted(roots)
        nodes = self.nodes_of(js, root_ranks)
        if lost and nodes and set(nodes) <= lost:
            return  # the lost node is the cause: node_lost covers it
        comm, seq = min(roots.values(), key=lambda cs: (js.waits[cs[0]]["since_ns"], cs[0]))
        w = js.waits[comm]
        who = ", ".join(map(str, root_ranks[:8])) + ("..." if len(root_ranks) > 8 else "")
        out.extend(js.book.assert_(
            ("hang",), now_ns, kind="hang", severity="P0", culprit_ranks=root_ranks, culprit_nodes=nodes,
            comm=comm,
            summary=f"rank{'s' if len(root_ranks) > 1 else ''} {who} never entered {w['op']} "
                    f"#{seq if seq >= 0 else w.get('p2p_seq', -1)} on comm "
                    f"{comm[:4]}..; {len(waiting)} ranks waiting {oldest / 1e9:.1f} s",
            evidence={"seq": seq, "op": w["op"], "waiting_ranks": len(waiting), "waited_s": round(oldest / 1e9, 1),
                      "threshold_s": round(w["threshold_ns"] / 1e9, 2), "blocked_comms": reached,
                      "onset_ns": int(now_ns - oldest)},
            id_hint=f"{comm}-{seq if seq >= 0 else 'p2p'}"))

    def _stalled(self, js: JobState, now_ns: int, out: list) -> None:
        if js.waits or not js.comms or not js.node_seen:
            return
        limit = self.settings.node_lost_periods * self.settings.heartbeat_period_s * 1e9
        if now_ns - max(js.node_seen.values()) > limit:
            return  # nobody reports: the job ended or the pipeline lost it, not a stall
        last = max(c["last_progress_ns"] for c in js.comms.values())
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

    def _slow(self, js: JobState, now_ns: int, out: list) -> None:
        fresh = int(max(5e9, 3 * self.median_step_ns(js)))
        keep = {inc.culprit_ranks[0] for inc in js.book.of_kind("slow_rank")}
        found = js.slow.culprits(now_ns, fresh, keep)
        loss = self.step_loss(js, now_ns)
        clocks = self._sm_clocks(js)
        med_clock = statistics.median(clocks.values()) if len(clocks) >= 2 else 0.0
        for rank, ev in sorted(found.items()):
            impact = ev["impact"]
            held = js.book.open.get(("slow_rank", rank))
            lasting = held is not None and now_ns - held.opened_ns >= P1_AFTER_NS
            sev = "P1" if impact >= 0.5 and lasting else "P2" if impact >= 0.2 else "P3"
            if held is not None:
                sev = min(sev, held.severity)  # severity only rises while open: no flapping updates
            clock = clocks.get(rank)
            if clock and med_clock and clock < HW_SLOW_EVIDENCE_RATIO * med_clock:
                ev = {**ev, "sm_clock_mhz": clock, "peers_sm_clock_mhz": med_clock}
            if loss > 0:
                ev = {**ev, "step_loss": round(loss, 3)}
            if rank in js.coords:
                ev = {**ev, "coords": js.coords[rank]}
            out.extend(js.book.assert_(
                ("slow_rank", rank), now_ns, kind="slow_rank", severity=sev, culprit_ranks=[rank],
                culprit_nodes=self.nodes_of(js, [rank]), comm=ev["comms"][0]["comm"] if ev["comms"] else "",
                summary=f"rank {rank} arrives late in {len(ev['comms'])} comm(s); its peers lose "
                        f"{impact * 100:.0f}% of their time waiting on it"
                        + (f" (it runs {ev['slowdown'] * 100:.0f}% slower)" if ev.get("slowdown") else ""),
                evidence=ev, id_hint=f"{rank}-{now_ns}"))
        links = js.slow.slow_links(now_ns, fresh, set(found))
        if links:
            counts: dict[str, int] = {}
            for link in links:
                for n in link["nodes"]:
                    counts[n] = counts.get(n, 0) + 1
            top = max(counts.values())
            nodes = sorted(n for n, c in counts.items() if c == top)
            out.extend(js.book.assert_(
                ("slow_link", tuple(nodes)), now_ns, kind="slow_link", severity="P2", culprit_ranks=[],
                culprit_nodes=nodes, comm=links[0]["comm"],
                summary=f"transfers slow on {len(links)} comm(s) spanning {', '.join(nodes)}; no rank arrives late",
                evidence={"comms": links[:16]}, id_hint=f"{'-'.join(nodes)}-{now_ns}"))

    def _sm_clocks(self, js: JobState) -> dict[int, float]:
        return {r: s["sm_clock_mhz"] for (_, r), s in js.hw.items() if r >= 0 and s.get("sm_clock_mhz")}

    def _hw(self, js: JobState, now_ns: int, out: list) -> None:
        clocks = self._sm_clocks(js)
        med = statistics.median(clocks.values()) if len(clocks) >= 4 else 0.0
        slow_ranks = {r for inc in js.book.of_kind("slow_rank") for r in inc.culprit_ranks}
        for (node, rank), s in sorted(js.hw.items()):
            if rank in slow_ranks:
                continue
            why = []
            if s.get("xid"):
                why.append(f"XID {s['xid']}")
            if s.get("ecc_dbe"):
                why.append(f"{s['ecc_dbe']} ECC double-bit errors")
            clock = s.get("sm_clock_mhz")
            if med and clock and rank >= 0 and clock < HW_CLOCK_RATIO * med:
                why.append(f"SM clock {clock:.0f} MHz vs {med:.0f} MHz on peers")
            if not why:
                js.hw_since.pop((node, rank), None)
                continue
            since = js.hw_since.setdefault((node, rank), now_ns)
            if now_ns - since < HW_HOLD_NS:
                continue  # give a slowdown time to show: then it is a slow_rank with evidence
            sev = "P2" if s.get("xid") or s.get("ecc_dbe") else "P3"
            out.extend(js.book.assert_(
                ("hw_fault", node, rank), now_ns, kind="hw_fault", severity=sev,
                culprit_ranks=[rank] if rank >= 0 else [], culprit_nodes=[node], comm="",
                summary=f"{node}{f' rank {rank}' if rank >= 0 else ''}: {'; '.join(why)}; no measurable slowdown",
                evidence={k: s[k] for k in ("sm_clock_mhz", "throttle_reasons", "xid", "ecc_dbe", "temp_c") if k in s},
                id_hint=f"{node}-{rank}-{now_ns}"))
