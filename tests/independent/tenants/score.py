#!/usr/bin/env python3
"""Strict scorer of tenants/: every job of a multi-tenant capture scored on its own.

    score.py --out FOLDER TRUTH ALERTS [TRUTH ALERTS ...]   -> FOLDER/results.md, results.json, a table

Rules (as the other generators': a hang is a hit only with exactly one P0 naming exactly its culprits; a
slow rank only when named alone; an incident naming a victim, and every P0/P1 on a control, is a failure):
- none (healthy): any P0/P1 -> FAIL; P2/P3 are counted in the reason.
- job_end: any P0/P1 -> FAIL; an incident left open at the capture's end -> PARTIAL.
- hang: a P0/P1 before the onset -> FAIL; two or more P0 after it -> FAIL; an incident naming a victim
  -> FAIL; exactly one P0, kind hang, naming exactly the culprits -> PASS; a P0 naming nobody or of
  another kind, or the culprits named below P0 -> PARTIAL; nothing -> MISS.
- slow_rank: a P0/P1 before the onset, a victim named, or a P0/P1 hang/comm_hang -> FAIL; a slow_rank
  naming exactly the culprit -> PASS; the culprit named by another kind only -> PARTIAL; nothing -> MISS.
  Preempted: anything opened after the preemption, P0/P1 -> FAIL, else PARTIAL; an incident of the run
  still open at the end -> PARTIAL.
- stuck_completion (the job runs on): a P0/P1 -> FAIL; a victim named -> FAIL; the culprit named alone
  (P2/P3) -> PASS; nothing -> MISS.
Delay: from the onset (the job's clock) to the first event that made the verdict, in seconds.
Isolation (d_isolation_*): the job's incidents alone vs in the combined capture: same kinds, culprits
and top severities, first-hit delay within 1 s; otherwise FAIL.
"""
import argparse
import json
import os
import sys
from collections import OrderedDict

SEV = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}


def load_alerts(path):
    ev = []
    with open(path) as f:
        for ln in f:
            ln = ln.strip()
            if not ln:
                continue
            try:
                m = json.loads(ln)
            except ValueError:
                continue
            if isinstance(m, dict) and "incident" in m:
                ev.append(m)
    return ev


def incidents_of(events, job):
    inc = OrderedDict()
    for e in events:
        if e.get("job") != job:
            continue
        i = inc.setdefault(e["incident"], {"id": e["incident"], "events": [], "kind": e.get("kind"),
                                           "opened": e.get("opened_ns", e["ts_ns"]), "sev": 9,
                                           "named": set(), "resolved": None, "reason": None})
        i["events"].append(e)
        i["kind"] = e.get("kind", i["kind"])
        i["sev"] = min(i["sev"], SEV.get(e.get("severity"), 9))
        i["named"] |= set(e.get("culprit_ranks") or [])
        if e.get("status") == "resolved":
            i["resolved"] = e["ts_ns"]
            i["reason"] = (e.get("evidence") or {}).get("resolved_reason")
    return list(inc.values())


def sevname(s):
    return f"P{s}" if s < 9 else "?"


def describe(i, t0):
    rel = (i["opened"] - t0) / 1e9 if t0 else 0.0
    res = "open at end" if i["resolved"] is None else f"resolved {(i['resolved'] - t0) / 1e9:+.1f}s ({i['reason']})"
    return (f"{i['kind']} {sevname(i['sev'])} ranks {sorted(i['named'])} opened {rel:+.1f}s, {res}; "
            f"{(i['events'][-1].get('summary') or '')[:140]}")


def judge(t, incs):
    """Returns (verdict, reason, delay_s, detail lines)."""
    kind = t["kind"]
    cul = set(t["culprits"])
    vic = set(t["victims"])
    onset = t.get("onset_ns")
    ref = onset or t["start_ns"]
    detail = [describe(i, ref) for i in incs]
    pp = [i for i in incs if i["sev"] <= 1]
    if kind in ("none", "job_end"):
        if pp:
            i = pp[0]
            return "FAIL", f"{len(pp)} P0/P1 on a {'healthy' if kind == 'none' else 'normally ending'} job: " \
                           f"{i['kind']} {sevname(i['sev'])} ranks {sorted(i['named'])}", None, detail
        low = [i for i in incs if i["sev"] > 1]
        if kind == "job_end":
            opn = [i for i in incs if i["resolved"] is None]
            if opn:
                return "PARTIAL", f"{len(opn)} incident(s) left open after the job ended", None, detail
            return "PASS", f"no P0/P1 ({len(low)} P2/P3, all resolved)" if low else "silent, ended", None, detail
        return "PASS", "no P0/P1 (" + str(len(low)) + " P2/P3: " + ", ".join(
            f"{i['kind']} {sevname(i['sev'])}" + (f" ranks {sorted(i['named'])[:6]}" if i["named"] else "")
            for i in low) + ")" if low else "silent", None, detail
    before = [i for i in pp if i["opened"] < onset - 0.5e9]
    if before:
        i = before[0]
        return "FAIL", f"P0/P1 before the onset: {i['kind']} ranks {sorted(i['named'])}", None, detail
    after = [i for i in incs if i["opened"] >= onset - 0.5e9]
    named_vic = [i for i in after if i["named"] & vic]
    preempt = t.get("preempted_ns")

    def first_hit(i, pred):
        for e in i["events"]:
            if pred(e):
                return (e["ts_ns"] - onset) / 1e9
        return None

    if named_vic:
        i = named_vic[0]
        return "FAIL", f"names victim(s) {sorted(i['named'] & vic)[:8]}: {i['kind']} {sevname(i['sev'])}", None, detail
    if kind == "hang":
        p0 = [i for i in after if i["sev"] == 0]
        if len(p0) >= 2:
            return "FAIL", f"{len(p0)} P0 for one hang: " + "; ".join(
                f"{i['kind']} {sorted(i['named'])}" for i in p0), None, detail
        if len(p0) == 1:
            i = p0[0]
            d = first_hit(i, lambda e: e.get("severity") == "P0" and set(e.get("culprit_ranks") or []) == cul)
            if i["kind"] == "hang" and d is not None:
                return "PASS", f"one P0 hang naming {sorted(cul)}", d, detail
            if not i["named"]:
                return "PARTIAL", f"one P0 {i['kind']} naming nobody", None, detail
            return "PARTIAL", f"one P0 {i['kind']} naming {sorted(i['named'])}", d, detail
        low = [i for i in after if i["named"] & cul]
        if low:
            i = low[0]
            return "PARTIAL", f"culprit named only at {sevname(i['sev'])} ({i['kind']})", \
                first_hit(i, lambda e: True), detail
        return "MISS", "no P0 for the hang" + (f" ({len(after)} other incidents)" if after else ""), None, detail
    if kind == "slow_rank":
        hangs = [i for i in after if i["sev"] <= 1 and i["kind"] in ("hang", "comm_hang", "node_lost", "job_stalled")
                 and (preempt is None or i["opened"] < preempt)]
        if hangs:
            i = hangs[0]
            return "FAIL", f"{i['kind']} {sevname(i['sev'])} ranks {sorted(i['named'])} on a slow (running) job", \
                None, detail
        if preempt is not None:
            late = [i for i in incs if i["opened"] > preempt + 0.5e9]
            if late:
                i = late[0]
                v = "FAIL" if i["sev"] <= 1 else "PARTIAL"
                return v, f"opened after the preemption: {i['kind']} {sevname(i['sev'])} ranks {sorted(i['named'])}", \
                    None, detail
        hit = [i for i in after if i["kind"] == "slow_rank" and i["named"] == cul]
        if hit:
            i = hit[0]
            d = first_hit(i, lambda e: set(e.get("culprit_ranks") or []) == cul)
            if preempt is not None:
                opn = [x for x in incs if x["resolved"] is None]
                if opn:
                    return "PARTIAL", f"slow rank named, but {len(opn)} incident(s) left open after the preemption", \
                        d, detail
                bad = [x for x in incs if x["resolved"] is not None and x["resolved"] >= preempt
                       and x["reason"] not in (None, "job_ended", "no_data")]
                return "PASS", f"slow_rank {sevname(i['sev'])} naming {sorted(cul)}; resolved with the preemption" + \
                    (f" ({bad[0]['reason']})" if bad else ""), d, detail
            return "PASS", f"slow_rank {sevname(i['sev'])} naming {sorted(cul)} alone", d, detail
        other = [i for i in after if i["named"] == cul]
        if other:
            i = other[0]
            return "PARTIAL", f"culprit named by {i['kind']} {sevname(i['sev'])} only", first_hit(i, lambda e: True), detail
        return "MISS", "slow rank not named" + (f" ({len(after)} other incidents)" if after else ""), None, detail
    if kind == "stuck_completion":
        if [i for i in after if i["sev"] <= 1]:
            i = [i for i in after if i["sev"] <= 1][0]
            return "FAIL", f"{i['kind']} {sevname(i['sev'])} ranks {sorted(i['named'])} on a job that runs on", \
                None, detail
        hit = [i for i in after if i["named"] == cul]
        if hit:
            i = hit[0]
            return "PASS", f"{i['kind']} {sevname(i['sev'])} naming {sorted(cul)}", first_hit(i, lambda e: True), detail
        return "MISS", "stuck completion path not named", None, detail
    return "FAIL", f"unknown truth kind {kind}", None, detail


def runs_split(truth_jobs, events):
    """Assign incidents to runs; a job id used by several runs splits at each run's start."""
    by_id = {}
    for t in truth_jobs:
        by_id.setdefault(t["job"], []).append(t)
    out = {}
    for jid, runs in by_id.items():
        runs.sort(key=lambda t: t["start_ns"])
        incs = incidents_of(events, jid)
        for k, t in enumerate(runs):
            lo = t["start_ns"] if k else -1
            hi = runs[k + 1]["start_ns"] if k + 1 < len(runs) else 1 << 62
            out[t["run"]] = [i for i in incs if lo <= i["opened"] < hi]
    return out


def signature(incs):
    return sorted((i["kind"], tuple(sorted(i["named"])), sevname(i["sev"])) for i in incs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("pairs", nargs="+")
    a = ap.parse_args()
    if len(a.pairs) % 2:
        sys.exit("pairs of TRUTH ALERTS expected")
    caps = []
    for k in range(0, len(a.pairs), 2):
        truth = json.load(open(a.pairs[k]))
        ev = load_alerts(a.pairs[k + 1])
        caps.append((truth, ev))
    combined = {}
    rows = []
    for truth, ev in caps:
        sp = runs_split(truth["jobs"], ev)
        known = {t["job"] for t in truth["jobs"]}
        stray = sorted({e.get("job") for e in ev} - known)
        for t in truth["jobs"]:
            v, why, d, det = judge(t, sp[t["run"]])
            row = {"scenario": truth["scenario"], "job": t["run"], "truth": t["kind"], "culprits": t["culprits"],
                   "verdict": v, "reason": why, "delay_s": None if d is None else round(d, 2),
                   "incidents": det, "probe": t.get("probe"), "layout": t.get("layout")}
            rows.append(row)
            combined[(truth["scenario"], t["run"])] = (row, sp[t["run"]])
        if stray:
            rows.append({"scenario": truth["scenario"], "job": "(unknown jobs)", "truth": "-", "culprits": [],
                         "verdict": "FAIL", "reason": f"incidents for jobs not in the capture: {stray}",
                         "delay_s": None, "incidents": []})
    # isolation comparisons
    for truth, ev in caps:
        src = truth.get("isolation_of")
        if not src:
            continue
        for t in truth["jobs"]:
            mine = combined.get((truth["scenario"], t["run"]))
            other = combined.get((src, t["run"]))
            name = truth["scenario"] + "/isolation"
            if other is None:
                rows.append({"scenario": name, "job": t["run"], "truth": "isolation", "culprits": t["culprits"],
                             "verdict": "n/a", "reason": f"{src} not scored in this run", "delay_s": None,
                             "incidents": []})
                continue
            sa, sb = signature(mine[1]), signature(other[1])
            da, db = mine[0]["delay_s"], other[0]["delay_s"]
            probs = []
            if sa != sb:
                probs.append(f"alone {sa} vs combined {sb}")
            if mine[0]["verdict"] != other[0]["verdict"]:
                probs.append(f"verdict alone {mine[0]['verdict']} vs combined {other[0]['verdict']}")
            if (da is None) != (db is None) or (da is not None and abs(da - db) > 1.0):
                probs.append(f"delay alone {da} vs combined {db}")
            rows.append({"scenario": name, "job": t["run"], "truth": "isolation", "culprits": t["culprits"],
                         "verdict": "FAIL" if probs else "PASS",
                         "reason": "; ".join(probs) if probs else f"same incidents alone and combined ({len(sa)})"
                         + (f", delay {da} vs {db} s" if da is not None else ""),
                         "delay_s": None if da is None or db is None else round(da - db, 2), "incidents": []})
    counts = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    faulty = [r for r in rows if r["truth"] in ("hang", "slow_rank", "stuck_completion")]
    ds = sorted(r["delay_s"] for r in faulty if r["verdict"] == "PASS" and r["delay_s"] is not None)
    summ = " ".join(f"{k} {counts[k]}" for k in ("PASS", "PARTIAL", "MISS", "FAIL", "n/a") if k in counts)
    lines = ["# tenants/ results", "", f"{len(rows)} rows: {summ}", ""]
    if ds:
        lines.append(f"faulty-job hits: {len(ds)}, delay p50 {ds[len(ds) // 2]:.2f} s, max {ds[-1]:.2f} s")
        lines.append("")
    lines += ["| scenario | job | truth | culprits | verdict | reason | delay s |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['scenario']} | {r['job']} | {r['truth']} | {r['culprits']} | {r['verdict']} | "
                     f"{r['reason'].replace('|', '/')} | {'' if r['delay_s'] is None else r['delay_s']} |")
    lines += ["", "## Incidents of the rows not PASS", ""]
    for r in rows:
        if r["verdict"] not in ("PASS", "n/a") and r["incidents"]:
            lines.append(f"- {r['scenario']} / {r['job']} ({r['truth']} {r['culprits']}):")
            for d in r["incidents"][:12]:
                lines.append(f"  - {d}")
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"counts": counts, "rows": rows}, f, indent=1)
    w = max(len(r["scenario"]) + len(r["job"]) + 1 for r in rows)
    for r in rows:
        print(f"{(r['scenario'] + '/' + r['job']):{w}s} {r['truth']:16s} {r['verdict']:7s} "
              f"{'' if r['delay_s'] is None else format(r['delay_s'], '6.2f'):>6s}  {r['reason'][:110]}")
    print(f"\n{len(rows)} rows: {summ}")


if __name__ == "__main__":
    main()
