#!/usr/bin/env python3
"""Strict scorer of infra/ (correlated infrastructure faults): truth files against `commwatch replay` output.

    score.py --out FOLDER TRUTH ALERTS [TRUTH ALERTS ...]   -> FOLDER/results.md, FOLDER/results.json

An incident = every cw.alerts.v1 event sharing one `incident` id. An event's ranks are its `culprit_ranks`,
its nodes its `culprit_nodes`. "After onset" = event ts_ns >= onset - 0.5 s (node clocks are ms apart).

Rows without a culprit:
* control (healthy, an NTP step of a rack): any P0/P1 event -> FAIL; P2/P3 advisories -> INFO note, PASS.
* ending (a drained node and an orderly teardown): any P0/P1 -> FAIL; P2/P3 -> INFO note.
* no_culprit (fabric-wide congestion): any P0/P1 -> FAIL; any incident naming a rank or a node -> FAIL;
  a P2/P3 naming nobody (a job-level slowdown, a node-less link advisory) -> INFO note, PASS.

Fault rows (one or two faults; truth["faults"]):
* any P0/P1 event before the first onset -> FAIL. After it, an event naming a rank or node outside every
  fault's culprit set (and the fault's `partial_ranks`, and for slow_link incidents the link's nodes'
  ranks) -> FAIL: it names a victim.
* hang: its P0 incidents = incidents with a P0 event at or after its onset. More than one -> FAIL. One whose
  P0 event names exactly the culprit ranks (or, where the truth accepts nodes, exactly its nodes and no
  other rank) -> PASS; one naming nobody, a strict subset of the set, or only ranks of `partial_ranks` (what
  the call records alone support, e.g. every member of a comm hung on its transport) -> PARTIAL; one naming
  a rank of neither -> FAIL. No P0 but a lower incident naming exactly the set -> PARTIAL. Nothing -> MISS.
* slow (a rank, or a set of ranks / nodes): an event naming exactly the set (or an `alt_sets` set, or, where
  nodes are accepted, exactly its nodes with no rank outside it) at P1/P2 -> PASS; at P3 or P0 -> PARTIAL;
  naming a strict subset of it (below P0) -> PARTIAL; nothing -> MISS.
* link: a slow_link event naming exactly the link's nodes at P1/P2 -> PASS; at P3, or naming a subset of
  them, or naming no node with evidence.candidate_nodes exactly them -> PARTIAL; nothing -> MISS.
* any P0 after the first onset not belonging to a hang fault (a page on a job that still progresses) ->
  FAIL, unless it names exactly a slow fault's set (then that fault is PARTIAL at best).
The row's verdict: FAIL if anything failed, else the worst of its faults' (MISS, PARTIAL, PASS). A row the
truth marks information-only is reported INFO, with the verdict it would have had in its notes.

Delays: from the fault's onset to the first qualifying event, in seconds and in iterations (rank 0's
iteration ends meanwhile).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SEV = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}
TOL_NS = 500_000_000
WORST = {"PASS": 0, "PARTIAL": 1, "MISS": 2}


def load(path, job):
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


def R(e):
    return frozenset(e.get("culprit_ranks") or [])


def N(e):
    return frozenset(e.get("culprit_nodes") or [])


def sev(e):
    return SEV.get(e.get("severity"), 9)


def ranges(rs):
    rs = sorted(rs)
    out, i = [], 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return "[" + ",".join(out) + "]"


def describe(incs, ref_ns):
    out = []
    for iid, evs in sorted(incs.items(), key=lambda kv: kv[1][0]["ts_ns"]):
        best = min(evs, key=lambda e: (sev(e), e["ts_ns"]))
        seen = []
        for e in evs:
            s = ranges(R(e)) if R(e) else ("nodes " + ",".join(sorted(N(e))) if N(e) else "[]")
            if not seen or seen[-1] != s:
                seen.append(s)
        when = (evs[0]["ts_ns"] - ref_ns) / 1e9
        st = " (resolved)" if evs[-1].get("status") == "resolved" else ""
        out.append(f"{best['severity']} {best['kind']} {' -> '.join(seen)} {'+' if when >= 0 else ''}{when:.1f}s{st}")
    return out


def its_between(truth, a_ns, b_ns):
    t0 = truth["t0_ns"]
    a, b = (a_ns - t0) / 1e9, (b_ns - t0) / 1e9
    return sum(1 for _, s, e in truth.get("iterations", []) if a < e <= b)


def fmt_ev(e, ref):
    what = ranges(R(e)) if R(e) else (",".join(sorted(N(e))) or "nobody")
    return f"{e['severity']} {e['kind']} {what} at {(e['ts_ns'] - ref) / 1e9:+.1f}s: {e.get('summary', '')[:150]}"


def score_one(truth, alerts_path):
    job = truth["job"]
    incs, other, bad = load(alerts_path, job)
    faults = truth.get("faults", [])
    onsets = [f["onset_ns"] for f in faults] or ([truth["onset_ns"]] if truth.get("onset_ns") else [])
    ref = min(onsets) if onsets else truth["t0_ns"]
    culprits = sorted({r for f in faults for r in f["culprit_ranks"]})
    row = {"scenario": truth["scenario"], "kind": truth["row_kind"] if len(faults) < 2 else "+".join(f["kind"] for f in faults),
           "culprits": culprits, "culprit_nodes": sorted({n for f in faults for n in f.get("culprit_nodes", [])}),
           "probe": truth["probe"], "setup": truth["setup"], "world": truth["world_size"],
           "incidents": len(incs), "said": describe(incs, ref), "faults": [], "notes": [],
           "delay_s": None, "delay_iterations": None}
    if other:
        row["notes"].append(f"{other} events for other jobs")
    if bad:
        row["notes"].append(f"{bad} unreadable alert lines")
    events = [e for evs in incs.values() for e in evs]
    kind = truth["row_kind"]
    fail = []

    if kind in ("control", "ending", "no_culprit"):
        pages = sorted((e for e in events if sev(e) <= 1), key=lambda e: e["ts_ns"])
        if pages:
            fail.append(f"{len({e['incident'] for e in pages})} P0/P1 incident(s) on a job with no culprit, first: "
                        + fmt_ev(pages[0], ref))
        if truth.get("forbid_named"):
            named = sorted((e for e in events if R(e) or N(e)), key=lambda e: e["ts_ns"])
            if named:
                fail.append(f"{len({e['incident'] for e in named})} incident(s) name a rank or node on a fault with "
                            "no culprit, first: " + fmt_ev(named[0], ref))
        adv = [iid for iid, evs in incs.items() if all(sev(e) >= 2 for e in evs)]
        if adv:
            row["notes"].append(f"INFO: {len(adv)} P2/P3 advisory incident(s)")
        row["verdict"] = "FAIL" if fail else "PASS"
        row["notes"] += fail
        return finish(truth, row)

    first = min(onsets)
    before = [e for e in events if e["ts_ns"] < first - TOL_NS and sev(e) <= 1]
    if before:
        fail.append("before onset: " + fmt_ev(min(before, key=lambda e: e["ts_ns"]), ref))
    after = [e for e in events if e["ts_ns"] >= first - TOL_NS]
    allowed_r = set(culprits)
    allowed_n = set(row["culprit_nodes"])
    link_r = set()
    for f in faults:
        allowed_r |= set(f.get("partial_ranks", []))
        allowed_n |= set(f.get("partial_nodes", []))
        for s in f.get("alt_sets", []):
            allowed_r |= set(s)
        if f["kind"] == "link":
            link_r |= set(f.get("link_ranks", []))
    vict = [e for e in after if (R(e) - allowed_r - (link_r if e["kind"] == "slow_link" else set()))
            or (N(e) - allowed_n)]
    if vict:
        e = min(vict, key=lambda e: e["ts_ns"])
        extra = sorted(R(e) - allowed_r - (link_r if e["kind"] == "slow_link" else set()))
        fail.append(f"names non-culprit {'rank(s) ' + ranges(extra) if extra else 'node(s) ' + ','.join(sorted(N(e) - allowed_n))}"
                    f" ({len({x['incident'] for x in vict})} incident(s)), first: " + fmt_ev(e, ref))
    hangs = [f for f in faults if f["kind"] == "hang"]
    hang_on = min((f["onset_ns"] for f in hangs), default=None)
    # P0s that no hang explains
    p0_stray = [e for e in after if e["severity"] == "P0" and (hang_on is None or e["ts_ns"] < hang_on - TOL_NS)]
    slow_sets = {frozenset(f["culprit_ranks"]): f for f in faults if f["kind"] == "slow"}
    paged = {}
    for e in p0_stray:
        if R(e) in slow_sets:
            paged.setdefault(slow_sets[R(e)]["id"], e)
        else:
            fail.append("P0 on a job still progressing: " + fmt_ev(e, ref))
            break
    for f in faults:
        fr = score_fault(truth, f, incs, after, paged.get(f["id"]))
        row["faults"].append(fr)
        if fr.get("fail"):
            fail.append(f"{f['id']}: {fr['fail']}")
    if fail:
        row["verdict"] = "FAIL"
    else:
        row["verdict"] = max((fr["verdict"] for fr in row["faults"]), key=lambda v: WORST[v])
    for fr in row["faults"]:
        d = f", {fr['delay_s']:.1f} s / {fr['delay_iterations']} it" if fr.get("delay_s") is not None else ""
        row["notes"].append(f"{fr['id']}: {fr['verdict']}{d}" + (f" ({fr['why']})" if fr.get("why") else ""))
    row["notes"] += fail
    ds = [fr for fr in row["faults"] if fr.get("delay_s") is not None]
    if ds:
        row["delay_s"] = [fr["delay_s"] for fr in ds] if len(faults) > 1 else ds[0]["delay_s"]
        row["delay_iterations"] = [fr["delay_iterations"] for fr in ds] if len(faults) > 1 else ds[0]["delay_iterations"]
    return finish(truth, row)


def finish(truth, row):
    if truth.get("info_only"):
        row["notes"].insert(0, f"INFO row ({truth.get('info_reason')}); would be {row['verdict']}")
        row["verdict"] = "INFO"
    return row


def score_fault(truth, f, incs, after, paged_ev):
    C = frozenset(f["culprit_ranks"])
    CN = frozenset(f.get("culprit_nodes", []))
    on = f["onset_ns"]
    out = {"id": f["id"], "kind": f["kind"], "verdict": "MISS", "delay_s": None, "delay_iterations": None}
    evs = [e for e in after if e["ts_ns"] >= on - TOL_NS]

    def hit(e, why=None, verdict="PASS"):
        out["verdict"] = verdict
        out["delay_s"] = round((e["ts_ns"] - on) / 1e9, 2)
        out["delay_iterations"] = its_between(truth, on, e["ts_ns"])
        if why:
            out["why"] = why
        return out

    def exact(e):
        if R(e) == C:
            return True
        if R(e) and any(R(e) == frozenset(s) for s in f.get("alt_sets", [])):
            return True
        return bool(f.get("accept_nodes")) and N(e) == CN and R(e) <= C and (not R(e) or R(e) == C)

    if f["kind"] == "hang":
        p0inc = {e["incident"] for e in evs if e["severity"] == "P0"}
        if len(p0inc) > 1:
            out["verdict"] = "FAIL"
            out["fail"] = f"{len(p0inc)} P0 incidents for one fault"
            return out
        if len(p0inc) == 1:
            iid = next(iter(p0inc))
            p0 = [e for e in incs[iid] if e["severity"] == "P0" and e["ts_ns"] >= on - TOL_NS]
            PR = frozenset(f.get("partial_ranks", []))
            PN = frozenset(f.get("partial_nodes", []))
            bad = [e for e in p0 if R(e) - C - PR]
            if bad:
                out["verdict"] = "FAIL"
                out["fail"] = "its P0 names rank(s) outside the culprit set: " + fmt_ev(bad[0], on)
                return out
            ex = [e for e in p0 if exact(e)]
            if ex:
                return hit(ex[0])
            sub = [e for e in p0 if R(e) and R(e) < C]
            if sub:
                return hit(sub[0], f"its P0 names {len(R(sub[0]))} of the {len(C)} culprits", "PARTIAL")
            part = [e for e in p0 if R(e) and R(e) <= PR]
            if part:
                return hit(part[0], "its P0 names the members of the hung comm(s), which the call records "
                                    "cannot tell apart", "PARTIAL")
            return hit(p0[0], "one P0 naming no culprit rank" + (f" (nodes {','.join(sorted(N(p0[0])))})"
                                                                 if N(p0[0]) else ""), "PARTIAL")
        low = [e for e in evs if exact(e)]
        if low:
            return hit(low[0], f"named exactly at {low[0]['severity']} only", "PARTIAL")
        return out

    if f["kind"] == "slow":
        good = [e for e in evs if exact(e) and e["severity"] in ("P1", "P2")]
        if good:
            return hit(good[0])
        p3 = [e for e in evs if exact(e) and e["severity"] == "P3"]
        if paged_ev is not None:
            return hit(paged_ev, "named exactly at P0 (a page for a job still progressing)", "PARTIAL")
        if p3:
            return hit(p3[0], "named exactly at P3 only", "PARTIAL")
        sub = [e for e in evs if R(e) and R(e) < C and e["severity"] != "P0"]
        if sub:
            e = max(sub, key=lambda e: len(R(e)))
            return hit(min(sub, key=lambda e: e["ts_ns"]), f"names at most {len(R(e))} of the {len(C)} ranks", "PARTIAL")
        return out

    if f["kind"] == "link":
        links = [e for e in evs if e["kind"] == "slow_link"]
        good = [e for e in links if N(e) == CN and e["severity"] in ("P1", "P2")]
        if good:
            return hit(good[0])
        p3 = [e for e in links if N(e) == CN]
        if p3:
            return hit(p3[0], f"named exactly at {p3[0]['severity']}", "PARTIAL")
        sub = [e for e in links if N(e) and N(e) < CN]
        if sub:
            return hit(sub[0], f"names {len(N(sub[0]))} of the {len(CN)} nodes", "PARTIAL")
        cand = [e for e in links if not N(e) and frozenset((e.get("evidence") or {}).get("candidate_nodes") or []) == CN]
        if cand:
            return hit(cand[0], "a node-less advisory whose candidate_nodes are exactly the rack's", "PARTIAL")
        if links:
            c = (links[0].get("evidence") or {}).get("candidate_nodes")
            out["why"] = f"slow_link {links[0]['severity']} naming {sorted(N(links[0])) or 'no node'}" + \
                         (f", candidates {c}" if c else "")
        return out
    raise ValueError(f["kind"])


def main():
    ap = argparse.ArgumentParser(description="strict scorer of infra/")
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

    def cul(r):
        if r["culprits"]:
            return ranges(r["culprits"])
        return ",".join(r["culprit_nodes"]) or "-"

    def dly(r):
        if r["delay_s"] is None:
            return "-"
        if isinstance(r["delay_s"], list):
            return "; ".join(f"{s:.1f} s, {i} it" for s, i in zip(r["delay_s"], r["delay_iterations"]))
        return f"{r['delay_s']:.1f} s, {r['delay_iterations']} it"

    lines = ["| scenario | kind | culprits | probe | verdict | commwatch said | delay | notes |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        said = "; ".join(r["said"][:5]) + (f"; (+{len(r['said']) - 5} more)" if len(r["said"]) > 5 else "")
        lines.append(f"| {r['scenario']} | {r['kind']} | {cul(r)} | {r['probe']} | **{r['verdict']}** | "
                     f"{said or 'nothing'} | {dly(r)} | {'; '.join(r['notes'])} |")
    summary = ", ".join(f"{k} {v}" for k, v in sorted(tot.items())) + \
        f" (of {len(rows)}; {info} rows with P2/P3 INFO)"
    md = "# infra/ results\n\n" + "\n".join(lines) + f"\n\n**Totals:** {summary}\n"
    out = Path(a.out)
    (out / "results.md").write_text(md)
    (out / "results.json").write_text(json.dumps({"rows": rows, "totals": tot, "info_controls": info}, indent=1))
    w = max(len(r["scenario"]) for r in rows)
    print(f"{'scenario':{w}s}  {'kind':10s} {'culprits':14s} {'probe':5s} {'verdict':8s} {'delay':18s} commwatch said")
    for r in rows:
        print(f"{r['scenario']:{w}s}  {r['kind'][:10]:10s} {cul(r)[:14]:14s} {r['probe']:5s} {r['verdict']:8s} "
              f"{dly(r)[:18]:18s} {'; '.join(r['said'][:3]) or 'nothing'}")
        for n in r["notes"]:
            print(f"{'':{w}s}    - {n}")
    print(f"\nTOTAL: {summary}")


if __name__ == "__main__":
    main()
