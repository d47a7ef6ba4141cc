#!/usr/bin/env python3
"""Strict scorer of recsys/ (DLRM / TorchRec training jobs): truth files against `commwatch replay` output.

    score.py --out FOLDER TRUTH ALERTS [TRUTH ALERTS ...]   -> FOLDER/results.md, FOLDER/results.json

An incident = every cw.alerts.v1 event sharing one `incident` id; its ranks at an event are that event's
`culprit_ranks`. "After onset" = event ts_ns >= onset - 0.5 s (node clocks are a few ms apart).
`advisory_ok_ranks` in a truth are the ranks holding hot tables: structurally late by design, not faults.
Naming them at P2/P3 (an advisory) is noted as INFO everywhere (P2 called out); at P0/P1 it is a FAIL
everywhere (on a fault row: a named non-culprit).

* healthy control: any P0/P1 event -> FAIL. P2/P3 -> INFO (listed; verdict stays PASS).
* hang: PASS only with exactly one incident reaching P0 after onset, one of whose P0 events names exactly
  the culprit ranks, and no incident naming any other rank after onset (hot-table ranks at P2/P3 excepted). More
  than one P0 incident -> FAIL. A single P0 naming no rank -> PARTIAL. No P0 but a lower-severity incident
  naming exactly the culprits -> PARTIAL. Nothing -> MISS.
* slow_rank: PASS when an incident after onset names the culprit alone at P1 or P2 and nothing names
  another rank; alone only at P3 -> PARTIAL; a P0 naming it alone -> PARTIAL (a page for a job that still
  progresses); a P0 naming anybody else or nobody -> FAIL; nothing -> MISS.
* slow_set (a node's NIC): PASS when an incident after onset names exactly the node's ranks, or names the
  node in `culprit_nodes` (alone) with ranks only from that node, at P1/P2; the same at P3 -> PARTIAL; any
  P0 -> FAIL; nothing -> MISS (its call timings are symmetric over every member; the node's InfiniBand
  symbol errors in cw.hw.v1 are the evidence that can point at it).
* on every fault row: a P0/P1 before onset -> FAIL (false alarm); an incident naming any rank other than
  the culprits after onset (hot-table ranks at P2/P3 excepted) -> FAIL.

Delays are from onset to the first qualifying event, in seconds and in iterations (the job's median
iteration time before the fault).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SEV = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}
TOL_NS = 500_000_000


def load_alerts(path, job):
    incs, other, bad = {}, 0, 0
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


def sev(e):
    return SEV.get(e.get("severity"), 9)


def describe(incs, ref):
    out = []
    for iid, evs in sorted(incs.items(), key=lambda kv: kv[1][0]["ts_ns"]):
        best = min(evs, key=lambda e: (sev(e), e["ts_ns"]))
        seen = []
        for e in evs:
            rs = sorted(e.get("culprit_ranks") or [])
            if not seen or seen[-1] != rs:
                seen.append(rs)
        ranks = " -> ".join(str(rs) if len(rs) <= 10 else f"[{len(rs)} ranks]" for rs in seen)
        when = (evs[0]["ts_ns"] - ref) / 1e9
        nodes = best.get("culprit_nodes") or []
        out.append(f"{best['severity']} {best['kind']} {ranks}{' ' + ','.join(nodes) if nodes else ''} "
                   f"{'+' if when >= 0 else ''}{when:.1f}s")
    return out


def incident_lines(incs):
    """the first event of each incident at its highest severity: for the report."""
    out = []
    for iid, evs in sorted(incs.items(), key=lambda kv: kv[1][0]["ts_ns"]):
        best = min(evs, key=lambda e: (sev(e), e["ts_ns"]))
        out.append({"incident": iid, "severity": best["severity"], "kind": best["kind"],
                    "culprit_ranks": best.get("culprit_ranks"), "culprit_nodes": best.get("culprit_nodes"),
                    "ts_ns": best["ts_ns"], "summary": best.get("summary", "")})
    return out


def score_one(truth, alerts_path):
    job = truth["job"]
    incs, other, bad = load_alerts(alerts_path, job)
    kind = truth["kind"]
    C = set(truth["culprit_ranks"])
    hot = set(truth.get("advisory_ok_ranks", []))
    onset = truth.get("onset_ns")
    it_s = (truth.get("iter_ms_median") or 0) / 1000.0
    row = {"scenario": truth["scenario"], "kind": kind, "culprits": sorted(C), "probe": truth["probe"],
           "setup": truth["setup"], "world": truth["world_size"], "incidents": len(incs),
           "said": describe(incs, onset if onset is not None else truth["t0_ns"]),
           "incident_lines": incident_lines(incs), "delay_s": None, "delay_iters": None, "notes": []}
    if other:
        row["notes"].append(f"{other} events for other jobs")
    if bad:
        row["notes"].append(f"{bad} unreadable alert lines")

    def ranks(e):
        return set(e.get("culprit_ranks") or [])

    if kind == "healthy":
        pages = [(iid, e) for iid, evs in incs.items() for e in evs if sev(e) <= 1]
        advis = [iid for iid, evs in incs.items() if all(sev(e) >= 2 for e in evs)]
        if pages:
            row["verdict"] = "FAIL"
            iid, e = pages[0]
            row["notes"].append(f"{len({i for i, _ in pages})} P0/P1 incident(s) on a healthy control, first: "
                                f"{e['severity']} {e['kind']} {sorted(ranks(e))} at t={(e['ts_ns'] - truth['t0_ns']) / 1e9:.1f}s: "
                                f"{e.get('summary', '')[:200]}")
        else:
            row["verdict"] = "PASS"
        if advis:
            named = sorted({r for iid in advis for e in incs[iid] for r in ranks(e)})
            p2 = [iid for iid in advis if any(sev(e) == 2 for e in incs[iid])]
            row["notes"].append(f"INFO: {len(advis)} P2/P3 advisory incident(s)"
                                f"{f' ({len(p2)} at P2)' if p2 else ''}, naming {named or 'nobody'}"
                                f"{'' if set(named) <= hot else f'; not hot-table ranks: {sorted(set(named) - hot)}'}")
        return row

    before = [(iid, e) for iid, evs in incs.items() for e in evs
              if e["ts_ns"] < onset - TOL_NS and sev(e) <= 1]
    after = {iid: [e for e in evs if e["ts_ns"] >= onset - TOL_NS] for iid, evs in incs.items()}
    after = {k: v for k, v in after.items() if v}

    def is_victim_event(e):
        extra = ranks(e) - C
        if not extra:
            return False
        if extra <= hot and sev(e) >= 2:
            return False          # a hot-table rank's structural lateness as an advisory: INFO below
        return True

    victims = [(iid, e) for iid, evs in after.items() for e in evs if is_victim_event(e)]
    fail = []
    if before:
        iid, e = before[0]
        fail.append(f"{e['severity']} {e['kind']} {sorted(ranks(e))} before onset "
                    f"({(e['ts_ns'] - onset) / 1e9:.1f}s): {e.get('summary', '')[:160]}")
    if victims:
        iid, e = victims[0]
        fail.append(f"names non-culprit rank(s) {sorted(ranks(e) - C)}: {e['severity']} {e['kind']} "
                    f"{sorted(ranks(e)) if len(ranks(e)) <= 12 else str(len(ranks(e))) + ' ranks'} at "
                    f"+{(e['ts_ns'] - onset) / 1e9:.1f}s: {e.get('summary', '')[:200]}")
    hot_adv = [iid for iid, evs in after.items() if any(ranks(e) and ranks(e) - C and ranks(e) - C <= hot for e in evs)
               and all(not (ranks(e) - C) or sev(e) >= 2 for e in evs)]
    if hot_adv:
        p2 = [iid for iid in hot_adv if any(sev(e) == 2 and ranks(e) - C for e in after[iid])]
        row["notes"].append(f"INFO: {len(hot_adv)} advisory incident(s) on hot-table ranks (structural)"
                            f"{f', {len(p2)} of them at P2' if p2 else ''}")

    def set_delay(ev):
        row["delay_s"] = round((ev["ts_ns"] - onset) / 1e9, 2)
        if it_s:
            row["delay_iters"] = round(row["delay_s"] / it_s, 1)

    if kind == "hang":
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

    if kind == "slow_set":
        nodes = set(truth.get("culprit_nodes") or [])
        p0 = [e for evs in after.values() for e in evs if e["severity"] == "P0"]
        if p0:
            fail.append(f"P0 {p0[0]['kind']} {sorted(ranks(p0[0]))} on a job still progressing")
        if fail:
            row["verdict"] = "FAIL"
            row["notes"] += fail
            return row

        def names_set(e):
            if ranks(e) == C:
                return True
            return set(e.get("culprit_nodes") or []) == nodes and ranks(e) <= C

        good = [e for evs in after.values() for e in evs if names_set(e) and e["severity"] in ("P1", "P2")]
        if good:
            row["verdict"] = "PASS"
            set_delay(min(good, key=lambda e: e["ts_ns"]))
            return row
        p3 = [e for evs in after.values() for e in evs if names_set(e) and e["severity"] == "P3"]
        if p3:
            row["verdict"] = "PARTIAL"
            row["notes"].append("the node named at P3 only")
            set_delay(min(p3, key=lambda e: e["ts_ns"]))
            return row
        row["verdict"] = "MISS"
        row["notes"].append("call timings symmetric over every member of the slowed comms; only the node's IB "
                            "symbol errors (cw.hw.v1) point at it")
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
    ap = argparse.ArgumentParser(description="strict scorer of recsys/")
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
        d = "-" if r["delay_s"] is None else f"{r['delay_s']:.1f} s" + (
            f" ({r['delay_iters']:.0f} it)" if r["delay_iters"] is not None else "")
        lines.append(f"| {r['scenario']} | {r['kind']} | {r['culprits'] or '-'} | {r['probe']} | **{r['verdict']}** | "
                     f"{said or 'nothing'} | {d} | {'; '.join(r['notes'])} |")
    summary = ", ".join(f"{k} {v}" for k, v in sorted(tot.items())) + f" (of {len(rows)}; {info} rows with INFO notes)"
    md = "# recsys/ results\n\n" + "\n".join(lines) + f"\n\n**Totals:** {summary}\n"
    out = Path(a.out)
    (out / "results.md").write_text(md)
    (out / "results.json").write_text(json.dumps({"rows": rows, "totals": tot, "info_rows": info}, indent=1))
    w = max(len(r["scenario"]) for r in rows)
    print(f"{'scenario':{w}s}  {'kind':9s} {'culprits':10s} {'probe':5s} {'verdict':8s} {'delay':14s} commwatch said")
    for r in rows:
        d = "-" if r["delay_s"] is None else f"{r['delay_s']:.1f}s" + (
            f"/{r['delay_iters']:.0f}it" if r["delay_iters"] is not None else "")
        cul = str(r["culprits"]) if len(r["culprits"]) <= 3 else f"[{len(r['culprits'])} ranks]"
        print(f"{r['scenario']:{w}s}  {r['kind']:9s} {cul:10s} {r['probe']:5s} {r['verdict']:8s} "
              f"{d:14s} {'; '.join(r['said'][:4]) or 'nothing'}")
        for n in r["notes"]:
            print(f"{'':{w}s}    - {n}")
    print(f"\nTOTAL: {summary}")


if __name__ == "__main__":
    main()
