#!/usr/bin/env python3
"""hoststall/ strict scorer: score.py --out FOLDER TRUTH ALERTS [TRUTH ALERTS ...]

Reads each truth (gen.py) and the incident events `commwatch replay` wrote (wire spec 2.6, JSON Lines),
groups events by `incident` id (kind, highest severity over its life, the union of its culprit ranks, its
first event's time, whether and when it resolved), and gives each row one verdict.

Incidents opened before a fault's onset are judged as on a control (below). After the onset:

  expect = control (healthy; every pause is the loop's own: epoch-start loader stalls, recompilation on
  every rank, CPU-offloaded optimizer steps, a shared-filesystem stall, evaluations, rank 0 evaluating
  alone while the others wait in a barrier, GC pauses hidden by the launch queue):
    FAIL    any P0/P1 (naming ranks or not).
    PARTIAL a P2 naming ranks (a ticket for a healthy job).
    PASS    otherwise (P3 advisories and job-level P2s naming no rank, e.g. job_stalled, listed).
  expect = hang (truth.culprits: one rank; onset_ns; end_ns for a stall that clears):
    FAIL    any incident naming a rank that is not a culprit (a victim), or any P0/P1 that is not a hit
            (a comm_hang naming nobody, a node_lost, a P0 before the onset ...).
    PASS    exactly one P0 `hang` incident whose culprits are exactly truth.culprits, opened after the
            onset; for a stall that clears, also resolved after it cleared (one incident, resolved).
    PARTIAL the culprits named exactly, but by several P0 `hang` incidents, or only at P1-P3 or in another
            kind, or (a stall that clears) the one P0 never resolved.
    MISS    nothing names the culprit, and no FAIL condition.
    The delay (first event of the hit - onset) is compared with truth.deadline_s: the docs' threshold
    (max(5 s, 2 x median step, 3 x the longest normal silence)) + 2 s, plus the others' legitimate pause
    where the hang hides behind one (an epoch stall, a recompilation), or for rank 0's routine evaluation
    max(threshold, twice the longest earlier hold) + 2 s (docs: HOLD_FACTOR). Reported, not judged.
  expect = slow_rank (truth.culprits: one rank, or two ranks of one node under CPU contention):
    FAIL    any incident naming a non-culprit (a victim), any P0, a P1 that is not `slow_rank` naming
            culprits only.
    PASS    `slow_rank` incidents at P1/P2 naming culprits only, opened after onset, whose union is
            exactly truth.culprits (one incident naming both, or one each). The delay is to the last
            culprit's P2 (or P1); the first naming (maybe at P3) is in the detail.
    PARTIAL only some culprits named (alone), or only at P3, or in another kind.
    MISS    not named.
  expect = storm (a recompilation storm on one rank: repeated 3-6 s host stalls, then eager 1.3x):
    FAIL    any incident naming a victim, any P0/P1 not naming exactly the culprit.
    PASS    the culprit named alone by `slow_rank` at P1/P2, or by one P0/P1 `hang`, with at most one P0.
    PARTIAL the culprit named alone, but by several P0s (a page per stall), or only at P3.
    MISS    not named.

A FAIL's detail also says what the row would have been without its failures ("|| otherwise ...").
Times are the job's clock (alert ts_ns; node clocks a few ms apart).
"""
import argparse
import json
import os
import sys

SEV = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}


def load_incidents(path):
    inc = {}
    if not os.path.exists(path):
        return []
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        a = json.loads(line)
        i = inc.setdefault(a["incident"], dict(id=a["incident"], kind=a["kind"], sev=9, culprits=set(),
                                               first=a["ts_ns"], events=[], resolved=None))
        sv = SEV.get(a.get("severity"), 9)
        if sv <= 2 and "p2_at" not in i:
            i["p2_at"] = a["ts_ns"]
        i["sev"] = min(i["sev"], sv)
        i["culprits"] |= set(a.get("culprit_ranks") or [])
        i["first"] = min(i["first"], a["ts_ns"])
        i["events"].append(a)
        i["kind"] = a["kind"]
        if a.get("status") == "resolved":
            i["resolved"] = a["ts_ns"]
    return sorted(inc.values(), key=lambda i: i["first"])


def fmt(i, t0):
    c = sorted(i["culprits"])
    cs = (",".join(map(str, c[:8])) + (f",..({len(c)})" if len(c) > 8 else "")) if c else "-"
    s = f"{i['kind']} P{i['sev']} [{cs}] @{(i['first'] - t0) / 1e9:.1f}s"
    if i["resolved"] is not None:
        s += f" (resolved @{(i['resolved'] - t0) / 1e9:.1f}s)"
    return s


def judge(tr, incs):
    t0 = tr["capture_start_ns"]
    exp = tr["expect"]
    onset = tr.get("onset_ns")
    cul = set(tr.get("culprits") or [])
    fails, caps, notes = [], [], []

    def control_rules(lst, tag):
        for i in lst:
            if i["sev"] <= 1:
                fails.append(f"P{i['sev']} {tag}: {fmt(i, t0)}")
            elif i["sev"] == 2 and i["culprits"]:
                caps.append(f"P2 naming ranks {tag}: {fmt(i, t0)}")
            else:
                notes.append(fmt(i, t0))

    if exp == "control":
        control_rules(incs, "on a control")
        if fails:
            return "FAIL", "; ".join(fails), None
        if caps:
            return "PARTIAL", "; ".join(caps), None
        return "PASS", ("advisories: " + "; ".join(notes)) if notes else "silent", None

    pre = [i for i in incs if i["first"] < onset]
    post = [i for i in incs if i["first"] >= onset]
    control_rules(pre, "before the onset")
    for i in post:
        bad = i["culprits"] - cul
        if bad:
            fails.append(f"names non-culprit {sorted(bad)[:8]}{'..' if len(bad) > 8 else ''}: {fmt(i, t0)}")

    def finish(v, detail, delay):
        if fails:
            return "FAIL", "; ".join(dict.fromkeys(fails)) + f" || otherwise {v}: {detail}", delay
        if v == "PASS" and caps:
            return "PARTIAL", detail + "; " + "; ".join(caps), delay
        if pre and notes:
            detail += "; before onset: " + "; ".join(n for n in notes)
        return v, detail, delay

    if exp == "hang":
        hits = [i for i in post if i["kind"] == "hang" and i["sev"] == 0 and i["culprits"] == cul]
        for i in post:
            if i["sev"] <= 1 and i not in hits:
                fails.append(f"P{i['sev']} not matching the fault: {fmt(i, t0)}")
        others = [fmt(i, t0) for i in post if i not in hits and i["sev"] >= 2]
        extra = ("; also " + "; ".join(others)) if others else ""
        if len(hits) == 1:
            h = hits[0]
            d = (h["first"] - onset) / 1e9
            dl = tr.get("deadline_s")
            when = f" (+{d:.1f}s, {'within' if dl is None or d <= dl else 'LATE vs'} deadline {dl}s)"
            if tr.get("end_ns"):
                if h["resolved"] is None:
                    return finish("PARTIAL", f"{fmt(h, t0)}{when}, never resolved after the stall ended at "
                                  f"{(tr['end_ns'] - t0) / 1e9:.1f}s" + extra, d)
                if h["resolved"] < tr["end_ns"]:
                    return finish("PARTIAL", f"{fmt(h, t0)}{when}, resolved before the stall ended" + extra, d)
                when += f", resolved {(h['resolved'] - tr['end_ns']) / 1e9:+.1f}s after the stall ended"
            return finish("PASS", f"{fmt(h, t0)}{when}" + extra, d)
        if len(hits) > 1:
            d = (hits[0]["first"] - onset) / 1e9
            return finish("PARTIAL", "culprit named by several P0s: " + "; ".join(fmt(i, t0) for i in hits) + extra, d)
        named = [i for i in post if i["culprits"] & cul]
        if named:
            return finish("PARTIAL", "culprit named, not as one P0 hang: " + "; ".join(fmt(i, t0) for i in named), None)
        return finish("MISS", ("nothing names the culprit; " + "; ".join(fmt(i, t0) for i in post)) if post
                      else "nothing after the onset", None)

    if exp == "slow_rank":
        for i in post:
            if i["sev"] == 0:
                fails.append(f"P0 on a slow rank: {fmt(i, t0)}")
            elif i["sev"] == 1 and not (i["kind"] == "slow_rank" and i["culprits"] and i["culprits"] <= cul):
                fails.append(f"P1 not matching the fault: {fmt(i, t0)}")
        alone = [i for i in post if i["kind"] == "slow_rank" and i["culprits"] and i["culprits"] <= cul]
        good = [i for i in alone if i["sev"] in (1, 2)]
        named = set().union(*[i["culprits"] for i in good]) if good else set()
        step = tr.get("median_step_s") or None
        if good and named == cul:
            d1 = (max(min(i["first"] for i in alone if r in i["culprits"]) for r in cul) - onset) / 1e9
            d = (max(min(i["p2_at"] for i in good if r in i["culprits"]) for r in cul) - onset) / 1e9
            its = f", {d / step:.1f} iterations" if step else ""
            return finish("PASS", "; ".join(fmt(i, t0) for i in alone) +
                          f" (every culprit named +{d1:.1f}s, at P2 or higher +{d:.1f}s{its})", d)
        if good:
            return finish("PARTIAL", f"only {sorted(named)} of {sorted(cul)} named: " +
                          "; ".join(fmt(i, t0) for i in alone), None)
        if alone:
            d = (min(i["first"] for i in alone) - onset) / 1e9
            return finish("PARTIAL", "named alone at P3 only: " + "; ".join(fmt(i, t0) for i in alone), d)
        other = [i for i in post if i["culprits"] and i["culprits"] <= cul]
        if other:
            return finish("PARTIAL", "named, not as slow_rank: " + "; ".join(fmt(i, t0) for i in other), None)
        return finish("MISS", ("not named; " + "; ".join(fmt(i, t0) for i in post)) if post else "nothing after the onset", None)

    if exp == "storm":
        for i in post:
            if i["sev"] <= 1 and i["culprits"] != cul:
                fails.append(f"P{i['sev']} not naming exactly the culprit: {fmt(i, t0)}")
        exact = [i for i in post if i["culprits"] == cul]
        p0 = [i for i in exact if i["sev"] == 0]
        slow = [i for i in exact if i["kind"] == "slow_rank" and i["sev"] in (1, 2)]
        hang1 = [i for i in exact if i["kind"] == "hang" and i["sev"] <= 1]
        good = slow or (hang1 if len(hang1) == 1 else [])
        if good and len(p0) <= 1:
            d = (min(i.get("p2_at", i["first"]) for i in good) - onset) / 1e9
            return finish("PASS", "; ".join(fmt(i, t0) for i in exact) + f" (+{d:.1f}s)", d)
        if len(p0) > 1:
            d = (min(i["first"] for i in p0) - onset) / 1e9
            return finish("PARTIAL", f"culprit named alone but paged {len(p0)} times: " +
                          "; ".join(fmt(i, t0) for i in exact), d)
        if exact:
            d = (min(i["first"] for i in exact) - onset) / 1e9
            return finish("PARTIAL", "named alone at P3 only: " + "; ".join(fmt(i, t0) for i in exact), d)
        return finish("MISS", ("not named; " + "; ".join(fmt(i, t0) for i in post)) if post else "nothing after the onset", None)
    return "FAIL", f"unknown expectation {exp}", None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("pairs", nargs="+")
    args = ap.parse_args()
    if len(args.pairs) % 2:
        sys.exit("score.py: TRUTH ALERTS pairs expected")
    rows = []
    for tp, ap_ in zip(args.pairs[0::2], args.pairs[1::2]):
        tr = json.load(open(tp))
        incs = load_incidents(ap_)
        v, detail, delay = judge(tr, incs)
        rows.append(dict(scenario=tr["scenario"], job=tr["job"], expect=tr["expect"], culprits=tr["culprits"],
                         onset_s=tr.get("onset_s"), deadline_s=tr.get("deadline_s"), threshold_s=tr.get("threshold_s"),
                         verdict=v, delay_s=None if delay is None else round(delay, 2), detail=detail,
                         incidents=[fmt(i, tr["capture_start_ns"]) for i in incs]))
    counts = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    w = max(len(r["scenario"]) for r in rows)
    print(f"{'scenario':{w}s}  {'expect':9s} {'culprits':10s} {'verdict':8s} {'delay':>7s}  detail")
    for r in rows:
        d = "" if r["delay_s"] is None else f"{r['delay_s']:.1f}s"
        cs = ",".join(map(str, r["culprits"])) or "-"
        print(f"{r['scenario']:{w}s}  {r['expect']:9s} {cs:10s} {r['verdict']:8s} {d:>7s}  {r['detail'][:200]}")
    summ = ", ".join(f"{k} {counts[k]}" for k in ("PASS", "PARTIAL", "MISS", "FAIL") if k in counts)
    print(f"\n{len(rows)} rows: {summ}")
    md = ["# hoststall/ results", "", f"{len(rows)} rows: {summ}", "",
          "| scenario | expect | culprits | onset | verdict | delay | detail |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        d = "" if r["delay_s"] is None else f"{r['delay_s']:.1f} s"
        o = "" if r["onset_s"] is None else f"{r['onset_s']:.1f} s"
        det = r["detail"].replace("|", "/")
        md.append(f"| {r['scenario']} | {r['expect']} | {r['culprits'] or '-'} | {o} | {r['verdict']} | {d} | {det} |")
    open(os.path.join(args.out, "results.md"), "w").write("\n".join(md) + "\n")
    json.dump(dict(rows=rows, counts=counts), open(os.path.join(args.out, "results.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
