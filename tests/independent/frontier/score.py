#!/usr/bin/env python3
"""Strict scorer of frontier/: `score.py --out DIR TRUTH ALERTS [TRUTH ALERTS ...]`.

Reads each capture's truth and the JSON Lines `commwatch replay` wrote (cw.alerts.v1 incident
events: open / update / resolved), folds the events by incident id, and judges:

  healthy    FAIL on any P0/P1; a P2/P3 naming a rank is PARTIAL (FAIL where the truth says
             strict_no_names: the telemetry-only job); P2/P3 naming no rank is fine.
  slow       PASS when an event at P1/P2 names exactly the culprit and no incident ever names
             another rank; PARTIAL when the culprit is named only at P3, or together with
             others, or victims are named elsewhere too; FAIL on any P0, or when victims are
             named and the culprit never is; MISS when nothing names anyone.
  slow_unobservable  a slow rank this probe cannot show (see the truth's expect): FAIL on any
             P0/P1 or any other rank named; PASS when silent, job-level, or naming the culprit.
  hang       PASS with exactly one incident that reaches P0, of an accepted kind, whose P0
             events name exactly the culprits, opened after the fault, and no other incident
             naming a non-culprit; FAIL when a P0 names a non-culprit (a victim) or opens
             before the fault, or a P1 names a non-culprit; PARTIAL for several P0s naming
             only culprits, a P0 naming a subset / no rank / the wrong kind, or another
             incident naming non-culprits; MISS without a P0.
  hang_node  as hang, but the culprit's node agent died with it: the one P0 (hang or
             node_lost) may name the culprit, or node ranks only of that node, or that node
             alone; a P0 naming a rank of another node FAILs.
  flap       FAIL on any P0/P1; P2/P3 naming ranks or nodes other than the flapping node's
             is PARTIAL; otherwise PASS.
  INFO       rows whose truth carries "info" (the model itself is ambiguous) are shown with
             the verdict they would have had, and not counted.

Writes DIR/results.md and DIR/results.json and prints the table.
"""
import argparse
import json
import os
import sys

SEV = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}
BASE_NS = 1767225600 * 10**9


def load_incidents(path):
    inc = {}
    if not os.path.exists(path):
        return inc
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            e = json.loads(line)
            i = inc.setdefault(e["incident"], dict(id=e["incident"], kind=e.get("kind"), events=[]))
            i["events"].append(e)
    for i in inc.values():
        ev = [e for e in i["events"] if e.get("status") != "resolved"] or i["events"]
        i["sev"] = min(SEV.get(e.get("severity"), 9) for e in ev)
        i["opened"] = min(int(e.get("opened_ns") or e.get("ts_ns")) for e in i["events"])
        i["ranks"] = set()
        i["nodes"] = set()
        i["ranks_at"] = {}
        for e in ev:
            rs = set(int(x) for x in e.get("culprit_ranks") or [])
            i["ranks"] |= rs
            i["nodes"] |= set(e.get("culprit_nodes") or [])
            s = SEV.get(e.get("severity"), 9)
            i["ranks_at"].setdefault(s, set()).update(rs)
            i.setdefault("alone_at", set())
            if rs:
                i.setdefault("exact", []).append((s, frozenset(rs)))
        i["p0_ts"] = min((int(e["ts_ns"]) for e in ev if e.get("severity") == "P0"), default=None)
        i["kinds"] = sorted({e.get("kind") for e in i["events"]})
    return inc


def fmt_ranks(rs, limit=8):
    rs = sorted(rs)
    if len(rs) > limit:
        return "[%s, ... %d ranks]" % (", ".join(map(str, rs[:limit])), len(rs))
    return "[%s]" % ", ".join(map(str, rs))


def describe(inc, ref_ns):
    out = []
    for i in sorted(inc.values(), key=lambda x: (x["sev"], x["opened"])):
        t = (i["opened"] - ref_ns) / 1e9
        nodes = "" if i["ranks"] or not i["nodes"] else " nodes %s" % sorted(i["nodes"])
        out.append("P%d %s %s%s @%.1fs" % (i["sev"], "/".join(i["kinds"]), fmt_ranks(i["ranks"]), nodes, t))
    return "; ".join(out) if out else "no incident"


def judge(tr, inc):
    chk = tr["check"]
    C = set(tr["culprit_ranks"])
    fault = tr.get("fault_ns")
    ivals = list(inc.values())
    p0 = [i for i in ivals if i["sev"] == 0]
    p01 = [i for i in ivals if i["sev"] <= 1]
    named = [i for i in ivals if i["ranks"]]
    lat = None
    if chk == "healthy":
        if p01:
            return "FAIL", "P0/P1 on a healthy job", lat
        if named:
            if tr.get("strict_no_names"):
                return "FAIL", "ranks named on a job whose only trouble is its telemetry", lat
            return "PARTIAL", "a P2/P3 names ranks of a healthy job", lat
        if ivals:
            return "PASS", "advisories naming no rank only" + (
                " (one names node(s) %s)" % sorted(set().union(*(i["nodes"] for i in ivals)))
                if any(i["nodes"] for i in ivals) else ""), lat
        return "PASS", "", lat
    if chk == "flap":
        if p01:
            return "FAIL", "P0/P1 for a link that pauses 1.5 s and recovers", lat
        okr = set(tr["flap_ranks"])
        bad = [i for i in ivals if (i["ranks"] - okr) or (i["nodes"] - {tr["flap_node"]})]
        if bad:
            return "PARTIAL", "P2/P3 naming ranks or nodes other than %s" % tr["flap_node"], lat
        return "PASS", ("advisory on %s only" % tr["flap_node"] if ivals else "silent"), lat
    if chk == "slow_unobservable":
        if p01:
            return "FAIL", "P0/P1 where the records cannot tell the slow rank", lat
        others = [i for i in ivals if i["ranks"] - C]
        if others:
            return "FAIL", "other ranks named: %s" % fmt_ranks(set().union(*(i["ranks"] - C for i in others))), lat
        if any(i["ranks"] & C for i in ivals):
            return "PASS", "culprit named though the records barely show it", lat
        return "PASS", ("job-level advisory only" if ivals else "silent"), lat
    if chk == "slow":
        if p0:
            return "FAIL", "P0 on a slow rank", lat
        c = next(iter(C))
        others = [i for i in ivals if i["ranks"] - C]
        exact_hi = [i for i in ivals for s, rs in i.get("exact", []) if rs == frozenset(C) and s in (1, 2)]
        exact_any = [i for i in ivals for s, rs in i.get("exact", []) if rs == frozenset(C)]
        with_c = [i for i in ivals if c in i["ranks"]]
        if with_c:
            lat = (min(i["opened"] for i in with_c) - (fault or BASE_NS)) / 1e9
        if exact_hi and not others:
            return "PASS", "", lat
        if with_c:
            why = []
            if not exact_hi:
                why.append("named alone only at P3" if exact_any else "named only with other ranks")
            if others:
                why.append("other ranks named: %s" % fmt_ranks(set().union(*(i["ranks"] - C for i in others))))
            return "PARTIAL", "; ".join(why), lat
        if others:
            return "FAIL", "victims named, culprit never: %s" % fmt_ranks(set().union(*(i["ranks"] for i in others))), lat
        return "MISS", "culprit never named", lat
    if chk in ("hang", "hang_node"):
        if chk == "hang_node":
            okr = set(tr["node_ranks"])
            kinds = {"hang", "node_lost"}
        else:
            okr = C
            kinds = set(tr.get("accept_kinds", ["hang"]))
        for i in p0:
            if i["ranks_at"].get(0, set()) - okr:
                return "FAIL", "a P0 names non-culprit(s) %s" % fmt_ranks(i["ranks_at"][0] - okr), None
            if fault and i["p0_ts"] < fault - 10**9:
                return "FAIL", "a P0 %.1f s before the fault" % ((fault - i["p0_ts"]) / 1e9), None
        bad1 = [i for i in ivals if i["sev"] == 1 and (i["ranks"] - okr)]
        if bad1:
            return "FAIL", "a P1 names non-culprit(s) %s" % fmt_ranks(set().union(*(i["ranks"] - okr for i in bad1))), None
        if not p0:
            if any(i["ranks"] & C for i in ivals if i["sev"] <= 1):
                return "PARTIAL", "culprit named at P1, no P0", None
            return "MISS", "no P0", None
        first = min(i["p0_ts"] for i in p0)
        lat = (first - fault) / 1e9 if fault else None
        why = []
        if len(p0) > 1:
            why.append("%d incidents reach P0" % len(p0))
        for i in p0:
            rs = i["ranks_at"].get(0, set())
            if not (set(i["kinds"]) & kinds):
                why.append("P0 of kind %s" % "/".join(i["kinds"]))
            if chk == "hang":
                if not rs:
                    why.append("P0 names no rank")
                elif rs != C:
                    why.append("P0 names %s of %s" % (fmt_ranks(rs), fmt_ranks(C)))
            else:
                if not rs and tr["dead_node"] not in i["nodes"]:
                    why.append("P0 names neither a rank nor %s" % tr["dead_node"])
                elif rs and not (rs & C) and rs != okr:
                    why.append("P0 names %s: ranks of the dead node but not the culprit" % fmt_ranks(rs))
        others = [i for i in ivals if i["sev"] > 0 and (i["ranks"] - okr)]
        if others:
            why.append("other incidents name %s" % fmt_ranks(set().union(*(i["ranks"] - okr for i in others))))
        return ("PARTIAL" if why else "PASS"), "; ".join(why), lat
    return "FAIL", "unknown check %r" % chk, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("pairs", nargs="+")
    a = ap.parse_args()
    if len(a.pairs) % 2:
        sys.exit("TRUTH ALERTS pairs expected")
    rows = []
    for tpath, apath in zip(a.pairs[::2], a.pairs[1::2]):
        tr = json.load(open(tpath))
        inc = load_incidents(apath)
        verdict, why, lat = judge(tr, inc)
        shown = verdict
        if tr.get("info"):
            shown = "INFO"
            why = "(would be %s: %s) %s" % (verdict, why, tr["info"])
        ref = tr["fault_ns"] if tr.get("fault_ns") else BASE_NS
        rows.append(dict(name=tr["name"], check=tr["check"], world=tr["world"], probe=tr["probe"],
                         culprits=tr["culprit_ranks"], expect=tr["expect"], verdict=shown, raw_verdict=verdict,
                         why=why, latency_s=None if lat is None else round(lat, 2),
                         incidents=describe(inc, ref), incidents_ref="fault" if tr.get("fault_ns") else "job start",
                         n_incidents=len(inc)))
    counts = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    summary = ", ".join("%d %s" % (counts[k], k) for k in ("PASS", "PARTIAL", "MISS", "FAIL", "INFO") if k in counts)
    lines = ["# frontier/ results", "", "%d job rows: %s" % (len(rows), summary), "",
             "| scenario | ranks | probe | check | culprits | verdict | latency s | why | commwatch's incidents (@ s from fault, or from job start) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %d | %s | %s | %s | **%s** | %s | %s | %s |" % (
            r["name"], r["world"], r["probe"], r["check"], fmt_ranks(r["culprits"]), r["verdict"],
            "" if r["latency_s"] is None else r["latency_s"], r["why"], r["incidents"]))
    lines += ["", "## Expectations", ""]
    for r in rows:
        lines.append("- **%s**: %s" % (r["name"], r["expect"]))
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(dict(summary=counts, rows=rows), f, indent=1)
    w = max(len(r["name"]) for r in rows)
    print("%-*s %6s %-9s %-8s %8s  %s" % (w, "scenario", "ranks", "check", "verdict", "latency", "why / incidents"))
    for r in rows:
        print("%-*s %6d %-9s %-8s %8s  %s%s" % (w, r["name"], r["world"], r["check"], r["verdict"],
                                               "" if r["latency_s"] is None else "%.1fs" % r["latency_s"],
                                               (r["why"] + " | ") if r["why"] else "", r["incidents"]))
    print()
    print("%d job rows: %s" % (len(rows), summary))


if __name__ == "__main__":
    main()
