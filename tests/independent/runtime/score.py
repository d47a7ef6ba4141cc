#!/usr/bin/env python3
"""runtime/ strict scorer: score.py --out FOLDER TRUTH ALERTS [TRUTH ALERTS ...]

The conventions of islands/score.py (copied, not imported). Reads each truth (gen.py) and the incident events
`commwatch replay` wrote (wire spec 2.6, JSON Lines), groups events by `incident` id (kind, highest severity
over its life, the union of its culprit ranks, its first event's time), and gives each row one verdict:

  expect = hang (a rank hung, or diverged into a collective nobody else calls; truth.culprits, onset_ns):
    FAIL    any incident (any kind or severity) naming a rank that is not a culprit; any P0/P1 opened before
            the onset; any P0/P1 after it that is not a hit ("not matching the fault").
    PASS    exactly one P0 `hang` incident whose culprits are exactly truth.culprits, opened after onset.
    PARTIAL the culprits named exactly, but by more than one P0 `hang` incident, or only at P1-P3 / in
            another kind.
    MISS    nothing names the culprit, and no FAIL condition.
  expect = slow_rank (a GPU 1.3-1.6x slower; truth.culprits):
    FAIL    a victim named, a P0 at all, a P1 not a slow_rank naming exactly the culprit alone.
    PASS    a `slow_rank` incident naming exactly the culprit alone at P1 or P2, opened after onset.
    PARTIAL named alone at P3 only.
    MISS    not named.
  expect = slow_link (a node's network path degraded: an IB link flapping with NCCL retries, or NCCL's proxy
    thread starved; every call completes, no rank arrives late). Nothing may page as a rank's fault:
    FAIL    any P0; any P1 that is not `slow_link` / `hw_fault`; any P0/P1 before the onset; any incident naming
            a rank, except a `slow_link` or `hw_fault` incident naming only ranks of the faulty node
            (truth.link_ranks).
    PASS    otherwise: a `slow_link` / `hw_fault` incident, or a P2/P3 naming no rank ("link"), or nothing at
            all ("silent"); the detail says which.
  expect = control (healthy):
    FAIL    any P0/P1.
    PARTIAL a P2 naming ranks (a ticket for a healthy job).
    PASS    otherwise (P3 advisories allowed; listed in the detail).

Delays are from the truth onset to the hit's first event (alert ts_ns is the job's clock: node clocks are
a few ms apart, so delays are +-0.01 s).
"""
import argparse
import json
import os
import sys

SEV = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}


def load_incidents(path):
    inc = {}
    if not os.path.exists(path):
        return inc
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        a = json.loads(line)
        i = inc.setdefault(a["incident"], dict(id=a["incident"], kind=a["kind"], sev=9, culprits=set(),
                                               first=a["ts_ns"], events=[], statuses=[]))
        sv = SEV.get(a.get("severity"), 9)
        if sv <= 2 and "p2_at" not in i:
            i["p2_at"] = a["ts_ns"]
        i["sev"] = min(i["sev"], sv)
        i["culprits"] |= set(a.get("culprit_ranks") or [])
        i["first"] = min(i["first"], a["ts_ns"])
        i["events"].append(a)
        i["statuses"].append(a["status"])
        i["kind"] = a["kind"]
        i["nodes"] = a.get("culprit_nodes") or []
    return list(inc.values())


def fmt(i, t0):
    c = sorted(i["culprits"])
    cs = (",".join(map(str, c[:6])) + (f",..({len(c)})" if len(c) > 6 else "")) if c else "-"
    return f"{i['kind']} P{i['sev']} [{cs}] @{(i['first'] - t0) / 1e9:.1f}s"


def judge(tr, incs):
    t0 = tr["capture_start_ns"]
    onset = tr.get("onset_ns")
    cul = set(tr.get("culprits") or [])
    struct = set(tr.get("structural") or [])
    exp = tr["expect"]
    why = []
    if exp == "info":
        return "INFO", "; ".join(fmt(i, t0) for i in incs) or "nothing", None

    def tolerated(i):  # the by-design slow site's advisory
        return i["sev"] == 3 and i["culprits"] and i["culprits"] <= struct

    def structural_p2(i):  # the by-design slow site ticketed (P2) before any fault: as on a control
        return (i["sev"] == 2 and i["culprits"] and i["culprits"] <= struct and onset is not None
                and i.get("p2_at", 0) < onset)

    fails = []
    for i in incs:
        if exp == "slow_link":
            break
        bad = i["culprits"] - cul
        if bad and not tolerated(i) and not structural_p2(i):
            fails.append(f"names non-culprit {sorted(bad)[:8]}{'..' if len(bad) > 8 else ''}: {fmt(i, t0)}")
    if exp == "control":
        for i in incs:
            if i["sev"] <= 1:
                fails.append(f"P{i['sev']} on a control: {fmt(i, t0)}")
        if fails:
            return "FAIL", "; ".join(dict.fromkeys(fails)), None
        p2 = [i for i in incs if i["sev"] == 2 and i["culprits"]]
        if p2:
            return "PARTIAL", "P2 naming ranks on a control: " + "; ".join(fmt(i, t0) for i in p2), None
        return "PASS", ("advisories: " + "; ".join(fmt(i, t0) for i in incs)) if incs else "silent", None
    # faults: P0/P1 before onset are false alarms
    for i in incs:
        if i["sev"] <= 1 and i["first"] < onset:
            fails.append(f"P{i['sev']} before onset: {fmt(i, t0)}")
    if exp == "slow_link":
        linkr = set(tr.get("link_ranks") or [])
        fails = []
        for i in incs:
            ok_kind = i["kind"] in ("slow_link", "hw_fault")
            if i["culprits"] and not (ok_kind and i["culprits"] <= linkr):
                fails.append(f"names ranks: {fmt(i, t0)}")
            if i["sev"] == 0 or (i["sev"] == 1 and not ok_kind):
                fails.append(f"page: {fmt(i, t0)}")
            if i["sev"] <= 1 and i["first"] < onset:
                fails.append(f"P{i['sev']} before onset: {fmt(i, t0)}")
        if fails:
            return "FAIL", "; ".join(dict.fromkeys(fails)), None
        link = [i for i in incs if i["first"] >= onset and (i["kind"] in ("slow_link", "hw_fault") or not i["culprits"])]
        if link:
            d = (min(i["first"] for i in link) - onset) / 1e9
            return "PASS", "link: " + "; ".join(fmt(i, t0) for i in link), d
        return "PASS", ("silent (no incident after onset)" + ("; " + "; ".join(fmt(i, t0) for i in incs) if incs else "")), None
    if exp == "hang":
        hits = [i for i in incs if i["kind"] == "hang" and i["sev"] == 0 and i["culprits"] == cul
                and i["first"] >= onset]
        for i in incs:
            if i["sev"] <= 1 and i not in hits and i["first"] >= onset:
                fails.append(f"P{i['sev']} not matching the fault: {fmt(i, t0)}")
        if fails:
            return "FAIL", "; ".join(dict.fromkeys(fails)), None
        if len(hits) == 1:
            d = (hits[0]["first"] - onset) / 1e9
            res = [e for e in hits[0]["events"] if e["status"] == "resolved"]
            extra = ""
            if tr.get("end_ns"):
                extra = (f", resolved {(res[-1]['ts_ns'] - tr['end_ns']) / 1e9:+.1f}s after the stall ended"
                         if res else ", not resolved after the stall ended")
            return "PASS", f"{fmt(hits[0], t0)} (+{d:.1f}s){extra}", d
        if len(hits) > 1:
            return "PARTIAL", "culprit named by several P0s: " + "; ".join(fmt(i, t0) for i in hits), \
                (min(i["first"] for i in hits) - onset) / 1e9
        named = [i for i in incs if i["culprits"] & cul]
        if named:
            return "PARTIAL", "culprit named, not as one P0 hang: " + "; ".join(fmt(i, t0) for i in named), None
        return "MISS", ("nothing names the culprit; " + "; ".join(fmt(i, t0) for i in incs)) if incs else \
            "nothing at all", None
    if exp == "slow_rank":
        for i in incs:
            if i["sev"] == 0:
                fails.append(f"P0 on a slow rank: {fmt(i, t0)}")
            elif i["sev"] == 1 and not (i["kind"] == "slow_rank" and i["culprits"] == cul):
                fails.append(f"P1 not matching the fault: {fmt(i, t0)}")
        if fails:
            return "FAIL", "; ".join(dict.fromkeys(fails)), None
        alone = [i for i in incs if i["kind"] == "slow_rank" and i["culprits"] == cul and i["first"] >= onset]
        good = [i for i in alone if i["sev"] in (1, 2)]
        if good:
            d = (min(i["first"] for i in good) - onset) / 1e9
            return "PASS", "; ".join(fmt(i, t0) for i in alone) + f" (+{d:.1f}s)", d
        if alone:
            d = (min(i["first"] for i in alone) - onset) / 1e9
            return "PARTIAL", "named alone at P3 only: " + "; ".join(fmt(i, t0) for i in alone), d
        return "MISS", ("not named; " + "; ".join(fmt(i, t0) for i in incs)) if incs else "nothing at all", None
    return "FAIL", f"unknown expectation {exp}", None


def judge_capped(tr, incs):
    v, d, delay = judge(tr, incs)
    struct = set(tr.get("structural") or [])
    onset = tr.get("onset_ns")
    if v == "PASS" and tr["expect"] != "control" and onset is not None:
        caps = [i for i in incs if i["sev"] == 2 and i["culprits"] and i["culprits"] <= struct
                and i.get("p2_at", 0) < onset]
        if caps:
            return "PARTIAL", d + "; structural P2 before onset: " + "; ".join(fmt(i, tr["capture_start_ns"])
                                                                              for i in caps), delay
    return v, d, delay


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
        v, detail, delay = judge_capped(tr, incs)
        rows.append(dict(scenario=tr["scenario"], job=tr["job"], expect=tr["expect"], culprits=tr["culprits"],
                         verdict=v, delay_s=None if delay is None else round(delay, 2), detail=detail,
                         incidents=[fmt(i, tr["capture_start_ns"]) for i in incs]))
    counts = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    w = max(len(r["scenario"]) for r in rows)
    print(f"{'scenario':{w}s}  {'expect':9s} {'verdict':8s} {'delay':>7s}  detail")
    for r in rows:
        d = "" if r["delay_s"] is None else f"{r['delay_s']:.1f}s"
        print(f"{r['scenario']:{w}s}  {r['expect']:9s} {r['verdict']:8s} {d:>7s}  {r['detail'][:160]}")
    summ = ", ".join(f"{k} {counts[k]}" for k in ("PASS", "PARTIAL", "MISS", "FAIL", "INFO") if k in counts)
    print(f"\n{len(rows)} rows: {summ}")
    md = ["# runtime/ results", "", f"{len(rows)} rows: {summ}", "",
          "| scenario | expect | culprits | verdict | delay | detail |", "|---|---|---|---|---|---|"]
    for r in rows:
        d = "" if r["delay_s"] is None else f"{r['delay_s']:.1f} s"
        det = r["detail"].replace("|", "/")
        md.append(f"| {r['scenario']} | {r['expect']} | {r['culprits'] or '-'} | {r['verdict']} | {d} | {det} |")
    open(os.path.join(args.out, "results.md"), "w").write("\n".join(md) + "\n")
    json.dump(dict(rows=rows, counts=counts), open(os.path.join(args.out, "results.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
