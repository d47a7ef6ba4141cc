#!/usr/bin/env python3
"""Strict scorer of serving/ (LLM inference serving jobs): truth files against `commwatch replay` output.

    score.py --out FOLDER TRUTH ALERTS [TRUTH ALERTS ...]   -> FOLDER/results.md, FOLDER/results.json

Rules (an incident = every cw.alerts.v1 event sharing one `incident` id; its ranks at an event are
that event's `culprit_ranks`; "after onset" = event ts_ns >= onset - 0.5 s, node clocks being tens of
ms apart):

* healthy control: any P0/P1 event -> FAIL; P2/P3 advisories -> INFO (listed, verdict stays PASS).
* hang: PASS only with exactly one incident reaching P0 after onset, one of whose P0 events
  names exactly the culprit ranks, and no incident naming any other rank (outside the allowed extras)
  after onset. More than one P0 incident -> FAIL. A P0 naming nobody and nothing else -> PARTIAL. No P0
  but a lower-severity incident naming exactly the culprits -> PARTIAL. Nothing -> MISS.
* slow_rank: PASS when an incident after onset names the culprit alone at P1 or P2 and no incident
  names another rank after onset; the culprit named alone only at P3 -> PARTIAL; a P0 naming it alone
  -> PARTIAL (a page for a job still progressing); a P0 naming nobody -> FAIL; nothing -> MISS.
* on every fault row: a P0/P1 before onset -> FAIL (false alarm); an incident naming a victim (any
  rank but the culprits and allowed extras) after onset, at any severity -> FAIL.

A slow_rank verdict also requires that no P0 names anybody (a page for a job still serving).
Delays are from onset to the first qualifying event, in seconds (serving has no iterations).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SEV = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}
TOL_NS = 500_000_000


def load_alerts(path, job):
    incs = {}
    other = 0
    bad = 0
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        try:
            a = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if a.get("job") != job:
            other += 1
            continue
        incs.setdefault(a["incident"], []).append(a)
    for v in incs.values():
        v.sort(key=lambda e: e["ts_ns"])
    return incs, other, bad


def describe(incs, t0, onset_ns):
    out = []
    for iid, evs in sorted(incs.items(), key=lambda kv: kv[1][0]["ts_ns"]):
        best = min(evs, key=lambda e: (SEV.get(e["severity"], 9), e["ts_ns"]))
        seen = []
        for e in evs:
            rs = sorted(e.get("culprit_ranks") or [])
            if not seen or seen[-1] != rs:
                seen.append(rs)
        ranks = " -> ".join(str(rs) for rs in seen)
        ref = onset_ns if onset_ns is not None else t0
        when = (evs[0]["ts_ns"] - ref) / 1e9
        out.append(f"{best['severity']} {best['kind']} {ranks} {'+' if when >= 0 else ''}{when:.1f}s")
    return out


def score_one(truth, alerts_path):
    job = truth["job"]
    incs, other, bad = load_alerts(alerts_path, job)
    kind = truth["kind"]
    C = set(truth["culprit_ranks"])
    allowed = set(truth.get("allowed_extra_ranks", []))
    onset = truth.get("onset_ns")
    row = {"scenario": truth["scenario"], "kind": kind, "culprits": sorted(C), "probe": truth["probe"],
           "setup": truth["setup"], "world": truth["world_size"], "incidents": len(incs),
           "said": describe(incs, truth["t0_ns"], onset), "delay_s": None, "notes": []}
    if other:
        row["notes"].append(f"{other} events for other jobs")
    if bad:
        row["notes"].append(f"{bad} unreadable alert lines")

    def ranks(e):
        return set(e.get("culprit_ranks") or [])

    if kind == "healthy":
        pages = [(iid, e) for iid, evs in incs.items() for e in evs if SEV.get(e["severity"], 9) <= 1]
        advis = [iid for iid, evs in incs.items() if all(SEV.get(e["severity"], 9) >= 2 for e in evs)]
        if pages:
            row["verdict"] = "FAIL"
            iid, e = pages[0]
            row["notes"].append(f"{len({i for i, _ in pages})} P0/P1 incident(s) on a healthy control, first: "
                                f"{e['severity']} {e['kind']} {sorted(ranks(e))} at t={(e['ts_ns'] - truth['t0_ns']) / 1e9:.1f}s: "
                                f"{e.get('summary', '')[:160]}")
        else:
            row["verdict"] = "PASS"
            if advis:
                row["notes"].append(f"INFO: {len(advis)} P2/P3 advisory incident(s)")
        return row

    before = [(iid, e) for iid, evs in incs.items() for e in evs
              if e["ts_ns"] < onset - TOL_NS and SEV.get(e["severity"], 9) <= 1]
    after = {iid: [e for e in evs if e["ts_ns"] >= onset - TOL_NS] for iid, evs in incs.items()}
    after = {k: v for k, v in after.items() if v}
    victims = [(iid, e) for iid, evs in after.items() for e in evs if ranks(e) - C - allowed]
    fail = []
    if before:
        iid, e = before[0]
        fail.append(f"{e['severity']} {e['kind']} {sorted(ranks(e))} before onset "
                    f"({(e['ts_ns'] - onset) / 1e9:.1f}s)")
    if victims:
        iid, e = victims[0]
        fail.append(f"names non-culprit rank(s) {sorted(ranks(e) - C - allowed)}: {e['severity']} {e['kind']} "
                    f"{sorted(ranks(e))} at +{(e['ts_ns'] - onset) / 1e9:.1f}s: {e.get('summary', '')[:140]}")

    def set_delay(ev):
        row["delay_s"] = round((ev["ts_ns"] - onset) / 1e9, 2)

    if kind in ("hang", "rank_died"):
        p0 = {iid: [e for e in evs if e["severity"] == "P0"] for iid, evs in after.items()}
        p0 = {k: v for k, v in p0.items() if v}
        exact = [e for evs in p0.values() for e in evs if ranks(e) == C]
        if len(p0) > 1:
            fail.append(f"{len(p0)} P0 incidents")
        if fail:
            row["verdict"] = "FAIL"
            row["notes"] += fail
            if exact:
                set_delay(min(exact, key=lambda e: e["ts_ns"]))
            return row
        if len(p0) == 1 and exact:
            row["verdict"] = "PASS"
            set_delay(min(exact, key=lambda e: e["ts_ns"]))
            return row
        if len(p0) == 1:
            row["verdict"] = "PARTIAL"
            row["notes"].append("one P0 naming no rank")
            set_delay(min(next(iter(p0.values())), key=lambda e: e["ts_ns"]))
            return row
        lower = [e for evs in after.values() for e in evs if ranks(e) == C]
        if lower:
            ev = min(lower, key=lambda e: e["ts_ns"])
            row["verdict"] = "PARTIAL"
            row["notes"].append(f"culprit named at {ev['severity']} only")
            set_delay(ev)
            return row
        row["verdict"] = "MISS"
        return row

    # slow_rank
    p0_exact = [e for evs in after.values() for e in evs if e["severity"] == "P0" and ranks(e) == C]
    p0_other = [e for evs in after.values() for e in evs if e["severity"] == "P0" and ranks(e) != C]
    if p0_other:
        e = p0_other[0]
        fail.append(f"P0 {e['kind']} {sorted(ranks(e))} on a job still progressing")
    if fail:
        row["verdict"] = "FAIL"
        row["notes"] += fail
        return row
    good = [e for evs in after.values() for e in evs if ranks(e) == C and e["severity"] in ("P1", "P2")]
    if good:
        row["verdict"] = "PASS"
        set_delay(min(good, key=lambda e: e["ts_ns"]))
        return row
    if p0_exact:
        row["verdict"] = "PARTIAL"
        row["notes"].append("named alone at P0 (a page for a slow rank)")
        set_delay(min(p0_exact, key=lambda e: e["ts_ns"]))
        return row
    p3 = [e for evs in after.values() for e in evs if ranks(e) == C and e["severity"] == "P3"]
    if p3:
        row["verdict"] = "PARTIAL"
        row["notes"].append("named alone at P3 only")
        set_delay(min(p3, key=lambda e: e["ts_ns"]))
        return row
    row["verdict"] = "MISS"
    return row


def main():
    ap = argparse.ArgumentParser(description="strict scorer of serving/")
    ap.add_argument("--out", required=True)
    ap.add_argument("pairs", nargs="+")
    a = ap.parse_args()
    if len(a.pairs) % 2:
        ap.error("TRUTH ALERTS pairs expected")
    rows = []
    for tp, ap_ in zip(a.pairs[::2], a.pairs[1::2]):
        truth = json.loads(Path(tp).read_text())
        rows.append(score_one(truth, ap_))
    tot = {}
    for r in rows:
        tot[r["verdict"]] = tot.get(r["verdict"], 0) + 1
    info = sum(1 for r in rows if any(n.startswith("INFO") for n in r["notes"]))
    lines = ["| scenario | kind | culprits | probe | verdict | commwatch said | delay | notes |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        said = "; ".join(r["said"][:5]) + (f"; (+{len(r['said']) - 5} more)" if len(r["said"]) > 5 else "")
        if r["delay_s"] is not None:
            d = f"{r['delay_s']:.1f} s"
        else:
            d = "-"
        lines.append(f"| {r['scenario']} | {r['kind']} | {r['culprits'] or '-'} | {r['probe']} | **{r['verdict']}** | "
                     f"{said or 'nothing'} | {d} | {'; '.join(r['notes'])} |")
    summary = ", ".join(f"{k} {v}" for k, v in sorted(tot.items())) + f" (of {len(rows)}; {info} controls with P2/P3 INFO)"
    md = "# serving/ results\n\n" + "\n".join(lines) + f"\n\n**Totals:** {summary}\n"
    out = Path(a.out)
    (out / "results.md").write_text(md)
    (out / "results.json").write_text(json.dumps({"rows": rows, "totals": tot, "info_controls": info}, indent=1))
    w = max(len(r["scenario"]) for r in rows)
    print(f"{'scenario':{w}s}  {'kind':9s} {'culprits':9s} {'probe':5s} {'verdict':8s} delay      commwatch said")
    for r in rows:
        d = f"{r['delay_s']:.1f}s" if r["delay_s"] is not None else "-"
        print(f"{r['scenario']:{w}s}  {r['kind']:9s} {str(r['culprits'] or '-'):9s} {r['probe']:5s} {r['verdict']:8s} "
              f"{d:10s} {'; '.join(r['said'][:4]) or 'nothing'}")
        for n in r["notes"]:
            print(f"{'':{w}s}    - {n}")
    print(f"\nTOTAL: {summary}")


if __name__ == "__main__":
    main()
