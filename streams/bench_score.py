"""Strict scoring of a detector's incidents against ground truth (`commwatch bench detect`).

- A hit needs the exact culprits: `hang` the truth's ranks (all ranks the incident ever
  named, at open or in updates), `comm_hang` the communicator, `node_lost` / `slow_link` the
  nodes. `slow_rank` incidents may name the slow ranks of one job together or apart, but a
  rank named that is not a culprit (a victim) makes the incident false.
- Every incident that hits nothing is false: a victim named, a second incident for the same
  fault (duplicate), a kind nobody injected. Incidents with severity P3 that never name a rank
  are advisories, reported apart.
- A routine control (a checkpoint that recurs) may have one incident of each kind, the first
  time (it cannot be told from a fault yet); every one after it is false.
- A job that ends: every incident open at its end must resolve after it, with no event of it
  after the resolution, and nothing may open afterwards.
- Delays run from the truth's onset to the incident's `opened_ns`, in seconds and in the job's
  iterations; for hangs also beyond the detector's threshold (`evidence.threshold_s`, else
  the configured floor).

`score()` is pure: events and truth in, a dict out. `summarize()` adds scenario results up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

S = 1_000_000_000
SEVERITY = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}
SLACK_NS = S  # an incident may open this much before the truth's onset (clock offsets between nodes)
TRUTH_KINDS = ("hang", "comm_hang", "slow_rank", "node_lost", "slow_link")

# the targets a detector must reach on this bench
TARGET_HANG_EXACT = 0.98
TARGET_HANG_OVER_THRESHOLD_S = 2.0
TARGET_SLOW_PRECISION = 0.95
TARGET_SLOW_RECALL = 0.95
TARGET_SLOW_P95_IT = 5.0
TARGET_SLOW50_P95_IT = 2.0


@dataclass
class Incident:
    """One incident, folded from its events (open, updates, resolve)."""

    id: str
    job: str
    kind: str
    severity: str
    opened_ns: int
    ranks: set[int] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)
    comm: str = ""
    resolved_ns: int | None = None
    after_resolve: int = 0  # events of it after it resolved
    threshold_s: float | None = None
    events: int = 0

    @property
    def advisory(self) -> bool:
        return self.severity == "P3" and not self.ranks

    @property
    def paging(self) -> bool:
        return SEVERITY.get(self.severity, 9) <= 1


def fold(events: list[dict]) -> list[Incident]:
    """Incidents in the order they opened, from a stream of incident events."""
    out: dict[str, Incident] = {}
    for ev in events:
        inc = out.get(ev["incident"])
        if inc is None:
            inc = out[ev["incident"]] = Incident(ev["incident"], ev["job"], ev["kind"], ev["severity"],
                                                 int(ev.get("opened_ns") or ev["ts_ns"]))
        inc.events += 1
        if inc.resolved_ns is not None:
            inc.after_resolve += 1
        if SEVERITY.get(ev["severity"], 9) < SEVERITY.get(inc.severity, 9):
            inc.severity = ev["severity"]
        inc.ranks.update(int(r) for r in ev.get("culprit_ranks") or ())
        inc.nodes.update(ev.get("culprit_nodes") or ())
        inc.comm = inc.comm or ev.get("comm") or ""
        thr = (ev.get("evidence") or {}).get("threshold_s")
        if isinstance(thr, (int, float)) and not isinstance(thr, bool):
            inc.threshold_s = float(thr)
        if ev["status"] == "resolved" and inc.resolved_ns is None:
            inc.resolved_ns = int(ev["ts_ns"])
    return list(out.values())


def score(events: list[dict], truth: list[dict], jobs: dict, hang_floor_s: float) -> dict:
    """Match one scenario's incident events to its truth. `jobs`: job -> object with
    `step_s`, `control`, `ended_ns` (see `bench_scenarios.JobInfo`)."""
    incs = fold(events)
    verdict: dict[str, str] = {}  # incident id -> "hit", or why it is false
    truths = []
    expected = [t for t in truth if t.get("expect_incident")]
    for t in sorted(expected, key=lambda t: t["onset_ns"]):
        if t["kind"] == "slow_rank":
            continue
        ended = getattr(jobs.get(t["job"]), "ended_ns", None)
        cands = [i for i in incs if i.job == t["job"] and i.kind == t["kind"] and i.opened_ns >= t["onset_ns"] - SLACK_NS
                 and (ended is None or i.opened_ns <= ended)]
        exact = [i for i in cands if _exact(i, t) and i.id not in verdict]
        hit = exact[0] if exact else None
        if hit is not None:
            verdict[hit.id] = "hit"
            for dup in exact[1:]:
                verdict[dup.id] = "duplicate"
        truths.append(_truth_row(t, hit, jobs, hang_floor_s, incs))
    truths += _slow_ranks(incs, truth, jobs, verdict)
    routine = _routine_first(incs, jobs)
    false, advisories, firsts = [], [], []
    for i in incs:
        if verdict.get(i.id) == "hit":
            continue
        if i.id in routine:
            firsts.append(_inc_row(i, "a routine, the first time"))
            continue
        if i.advisory:
            advisories.append(_inc_row(i, "advisory"))
            continue
        reason = verdict.get(i.id) or _why_false(i, truth)
        false.append(_inc_row(i, reason))
    return {"truths": truths, "false": false, "advisories": advisories, "routine_first": firsts,
            "ends": _ends(incs, jobs),
            "controls": {job: {"control": info.control,
                               "p0_p1": sum(1 for i in incs if i.job == job and i.paging and i.id not in routine)}
                         for job, info in jobs.items() if info.control},
            "incidents": len(incs)}


def _routine_first(incs: list[Incident], jobs: dict) -> set[str]:
    """A routine control's first incident of each kind: the first checkpoint rank 0 writes alone
    while the others wait for it inside a call cannot be told from a hang, nor the first one
    every rank writes from a stall; the same again is the routine, and said again is false."""
    first: dict[tuple[str, str], Incident] = {}
    for i in sorted(incs, key=lambda i: i.opened_ns):
        if getattr(jobs.get(i.job), "control", "") == "routine":
            first.setdefault((i.job, i.kind), i)
    return {i.id for i in first.values()}


def _exact(i, t: dict) -> bool:
    if t["kind"] == "hang":
        return i.ranks == set(t["ranks"])
    if t["kind"] == "comm_hang":
        return i.comm == t["comm"]
    return i.nodes == set(t["nodes"])  # node_lost, slow_link


def _truth_row(t: dict, hit, jobs: dict, hang_floor_s: float, incs: list[Incident]) -> dict:
    step = t.get("step_s") or getattr(jobs.get(t["job"]), "step_s", math.nan)
    row = {"kind": t["kind"], "job": t["job"], "ranks": t["ranks"][:8], "factor": t.get("factor"),
           "mode": t.get("mode", "sim"), "hit": hit is not None, "delay_s": None, "delay_it": None}
    if hit is not None:
        d = (hit.opened_ns - t["onset_ns"]) / S
        row["delay_s"] = round(d, 3)
        row["delay_it"] = round(d / step, 3) if step and math.isfinite(step) else None
        if t.get("run_step_s"):
            row["delay_run_it"] = round(d / t["run_step_s"], 3)
        if t["kind"] in ("hang", "comm_hang"):
            thr = hit.threshold_s if hit.threshold_s is not None else hang_floor_s
            row["threshold_s"] = thr
            row["threshold_from"] = "evidence" if hit.threshold_s is not None else "hang_floor_s"
            row["over_threshold_s"] = round(d - thr, 3)
    if t["kind"] in ("hang", "comm_hang"):
        row["p0"] = sum(1 for i in incs if i.job == t["job"] and i.severity == "P0")
        row["one_p0"] = hit is not None and hit.severity == "P0" and row["p0"] == 1
    return row


def _slow_ranks(incs: list[Incident], truth: list[dict], jobs: dict, verdict: dict[str, str]) -> list[dict]:
    """Slow ranks of a job may be named in one incident or several; naming any other rank is false."""
    rows = []
    for job in sorted({t["job"] for t in truth if t["kind"] == "slow_rank"} | {i.job for i in incs}):
        slow = [t for t in truth if t["job"] == job and t["kind"] == "slow_rank"]
        if not slow:
            continue  # any slow_rank incident of this job is false for the general reasons
        culprits = {r for t in slow for r in t["ranks"]}  # below-threshold slowdowns may be named too
        owner = {r: t for t in slow if t.get("expect_incident") for r in t["ranks"]}
        first: dict[int, Incident] = {}
        for i in sorted((i for i in incs if i.job == job and i.kind == "slow_rank" and not i.advisory),
                        key=lambda i: i.opened_ns):
            if not i.ranks or not i.ranks <= culprits:
                verdict[i.id] = "victim named" if i.ranks else "no culprit"
                continue
            mine = [r for r in i.ranks if r in owner]
            if any(i.opened_ns < owner[r]["onset_ns"] - SLACK_NS for r in mine):
                verdict[i.id] = "before onset"
                continue
            new = [r for r in mine if r not in first]
            for r in new:
                first[r] = i
            verdict[i.id] = "hit" if new else ("duplicate" if mine else "tolerated")
        for t in sorted((t for t in slow if t.get("expect_incident")), key=lambda t: t["onset_ns"]):
            named = [first[r] for r in t["ranks"] if r in first]
            hit = max(named, key=lambda i: i.opened_ns) if len(named) == len(t["ranks"]) else None
            rows.append(_truth_row(t, hit, jobs, 0.0, incs))
    # a below-threshold slowdown named alone is neither a hit nor false
    for iid, v in list(verdict.items()):
        if v == "tolerated":
            verdict[iid] = "hit"
    return rows


def _why_false(i: Incident, truth: list[dict]) -> str:
    mine = [t for t in truth if t["job"] == i.job and t.get("expect_incident")]
    if not mine:
        return "no fault injected"
    same = [t for t in mine if t["kind"] == i.kind]
    if not same:
        return "another kind"
    if i.kind == "hang" and any(set(t["ranks"]) < i.ranks for t in same):
        return "victim named"
    return "wrong culprit"


def _inc_row(i: Incident, reason: str) -> dict:
    return {"kind": i.kind, "severity": i.severity, "reason": reason, "job": i.job, "ranks": sorted(i.ranks)[:8],
            "nodes": sorted(i.nodes)[:4], "comm": i.comm}


def _ends(incs: list[Incident], jobs: dict) -> list[dict]:
    out = []
    for job, info in jobs.items():
        end = getattr(info, "ended_ns", None)
        if end is None:
            continue
        mine = [i for i in incs if i.job == job]
        open_at_end = [i for i in mine if i.opened_ns <= end and (i.resolved_ns is None or i.resolved_ns >= end)]
        ok = [i for i in open_at_end if i.resolved_ns is not None and i.after_resolve == 0]
        out.append({"job": job, "open_at_end": len(open_at_end), "resolved": len(ok),
                    "events_after_resolve": sum(i.after_resolve for i in mine),
                    "opened_after_end": sum(1 for i in mine if i.opened_ns > end),
                    "resolve_delay_s": [round((i.resolved_ns - end) / S, 2) for i in ok]})
    return out


# --- over many scenarios ---------------------------------------------------------------------------
def _pct(xs: list[float], q: float) -> float | None:
    return round(float(np.percentile(xs, q)), 2) if xs else None


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 3) if b else None


def summarize(results: list[dict], healthy_hours: float) -> dict:
    """Per-kind table, hang figures, controls, job ends and targets over scenario results
    (each a `score()` dict plus `name`)."""
    rows: dict[str, dict] = {}

    def row(kind: str) -> dict:
        return rows.setdefault(kind, {"expected": 0, "hits": 0, "false": 0, "false_p0_p1": 0, "delays": [],
                                      "iters": [], "run_iters": []})

    for res in results:
        for t in res["truths"]:
            keys = [t["kind"]]
            if t["kind"] == "slow_rank" and (t.get("factor") or 0) >= 1.5:
                keys.append("slow_rank>=50%")
            for k in keys:
                r = row(k)
                r["expected"] += 1
                if t["hit"]:
                    r["hits"] += 1
                    r["delays"].append(t["delay_s"])
                    if t["delay_it"] is not None:
                        r["iters"].append(t["delay_it"])
                    if t.get("delay_run_it") is not None:
                        r["run_iters"].append(t["delay_run_it"])
        for f in res["false"]:
            r = row(f["kind"])
            r["false"] += 1
            r["false_p0_p1"] += SEVERITY.get(f["severity"], 9) <= 1
    table = {}
    for k in sorted(rows, key=lambda k: (k not in TRUTH_KINDS and k != "slow_rank>=50%", k)):
        r = rows[k]
        table[k] = {"expected": r["expected"], "hits": r["hits"], "false": r["false"],
                    "false_p0_p1": r["false_p0_p1"],
                    "precision": _ratio(r["hits"], r["hits"] + r["false"]) if k != "slow_rank>=50%" else None,
                    "recall": _ratio(r["hits"], r["expected"]),
                    "false_p0_p1_per_healthy_job_hour": round(r["false_p0_p1"] / healthy_hours, 2)
                    if healthy_hours else None,
                    "delay_s_p50": _pct(r["delays"], 50), "delay_s_p95": _pct(r["delays"], 95),
                    "delay_it_p50": _pct(r["iters"], 50), "delay_it_p95": _pct(r["iters"], 95),
                    "run_iters": len(r["run_iters"]),
                    "delay_run_it_p50": _pct(r["run_iters"], 50), "delay_run_it_p95": _pct(r["run_iters"], 95)}
    hangs = [t for res in results for t in res["truths"] if t["kind"] == "hang"]
    over = [t["over_threshold_s"] for t in hangs if t["hit"]]
    by_mode: dict[str, list[int]] = {}
    for t in hangs:
        cell = by_mode.setdefault(t["mode"], [0, 0])
        cell[0] += t["hit"]
        cell[1] += 1
    comm_hangs = [t for res in results for t in res["truths"] if t["kind"] == "comm_hang"]
    hang = {"injected": len(hangs), "exact_root": sum(t["hit"] for t in hangs),
            "exact_root_rate": _ratio(sum(t["hit"] for t in hangs), len(hangs)),
            "exactly_one_p0": sum(t["one_p0"] for t in hangs),
            "p0_per_hang": round(sum(t["p0"] for t in hangs) / len(hangs), 2) if hangs else None,
            "over_threshold_s_p50": _pct(over, 50), "over_threshold_s_p95": _pct(over, 95),
            "before_threshold": sum(1 for x in over if x < -0.5),
            "threshold_from_evidence": sum(1 for t in hangs if t.get("threshold_from") == "evidence"),
            "by_mode": {m: f"{h}/{n}" for m, (h, n) in sorted(by_mode.items())},
            "comm_hang_exactly_one_p0": f"{sum(t['one_p0'] for t in comm_hangs)}/{len(comm_hangs)}"}
    controls: dict[str, dict] = {}
    for res in results:
        for _job, c in res["controls"].items():
            cell = controls.setdefault(c["control"], {"jobs": 0, "p0_p1": 0})
            cell["jobs"] += 1
            cell["p0_p1"] += c["p0_p1"]
    ends = [e for res in results for e in res["ends"]]
    ended = {"jobs": len(ends), "open_at_end": sum(e["open_at_end"] for e in ends),
             "resolved": sum(e["resolved"] for e in ends),
             "events_after_resolve": sum(e["events_after_resolve"] for e in ends),
             "opened_after_end": sum(e["opened_after_end"] for e in ends),
             "resolve_delay_s_p95": _pct([d for e in ends for d in e["resolve_delay_s"]], 95)}
    unbalanced = [r for r in results if any(c["control"] == "unbalanced" for c in r["controls"].values())]
    adv = {"total": sum(len(r["advisories"]) for r in results),
           "in_unbalanced": sum(len(r["advisories"]) for r in unbalanced),
           "unbalanced_with_one": f"{sum(len(r['advisories']) == 1 for r in unbalanced)}/{len(unbalanced)}"}
    summary = {"kinds": table, "hang": hang, "controls": controls, "job_ends": ended, "advisories": adv,
               "healthy_job_hours": round(healthy_hours, 3)}
    summary["targets"] = targets(summary)
    return summary


def targets(summary: dict) -> list[dict]:
    """The bar a detector must clear, each with the measured value and pass/fail."""
    k, h = summary["kinds"], summary["hang"]
    slow = k.get("slow_rank", {})
    slow50 = k.get("slow_rank>=50%", {})
    controls = summary["controls"]
    out = []

    def add(name: str, value, ok: bool | None, goal: str) -> None:
        out.append({"target": name, "value": value, "goal": goal, "pass": ok})

    rate = h["exact_root_rate"]
    add("hang exact root", rate, rate is not None and rate >= TARGET_HANG_EXACT, f">= {TARGET_HANG_EXACT}")
    add("hang exactly one P0", f"{h['exactly_one_p0']}/{h['injected']}", h["exactly_one_p0"] == h["injected"], "all")
    p95 = h["over_threshold_s_p95"]
    add("hang p95 beyond threshold (s)", p95, p95 is not None and p95 <= TARGET_HANG_OVER_THRESHOLD_S,
        f"<= {TARGET_HANG_OVER_THRESHOLD_S}")
    add("hang before threshold", h["before_threshold"], h["before_threshold"] == 0, "0")
    for name, v, goal in (("slow_rank precision", slow.get("precision"), TARGET_SLOW_PRECISION),
                          ("slow_rank recall", slow.get("recall"), TARGET_SLOW_RECALL)):
        add(name, v, v is not None and v >= goal, f">= {goal}")
    for name, v, goal in (("slow_rank p95 (iterations)", slow.get("delay_it_p95"), TARGET_SLOW_P95_IT),
                          ("slow_rank>=50% p95 (iterations)", slow50.get("delay_it_p95"), TARGET_SLOW50_P95_IT)):
        add(name, v, v is not None and v <= goal, f"<= {goal}")
    for label in ("healthy", "unbalanced", "skewed", "routine"):
        c = controls.get(label)
        if c:
            add(f"P0/P1 on {label} controls ({c['jobs']} jobs)", c["p0_p1"], c["p0_p1"] == 0, "0")
    e = summary["job_ends"]
    if e["jobs"]:
        ok = e["resolved"] == e["open_at_end"] and not e["events_after_resolve"] and not e["opened_after_end"]
        add("ended jobs: open incidents resolved, nothing after",
            f"{e['resolved']}/{e['open_at_end']}, {e['events_after_resolve']} events after, "
            f"{e['opened_after_end']} opened after", ok, "all, 0, 0")
    return out
