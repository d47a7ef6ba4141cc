#!/usr/bin/env python3
"""Strict scorer for origin/: score.py --out DIR TRUTH ALERTS [TRUTH ALERTS ...]

Per scenario, from commwatch's incident events (every event of an incident counts: the ranks it
ever named, the highest severity it ever reached):
  hang  : PASS only with exactly ONE P0 incident in the job, naming exactly the hung ranks;
          no P0 -> MISS; more than one P0, or a P0 naming other ranks -> FAIL.
  slow  : PASS when an incident names exactly the slow ranks (a slow node: its 8 ranks in one
          incident) at P1/P2; only at P3 -> PARTIAL; a slow node named only in parts -> PARTIAL;
          not named -> MISS; named at P0 -> FAIL.
  any   : an incident naming a rank that is no culprit (a victim) -> FAIL; an incident mixing
          the ranks of two faults -> FAIL.
  control: any P0/P1 -> FAIL; P2/P3 naming ranks -> FAIL, except one P3 advisory naming
          exactly the whole heavy stage of an unbalanced pipeline (stage advice) -> PARTIAL;
          P2/P3 naming no rank -> PASS, noted.
INFO is used only where the truth file says the model itself is ambiguous (`info`).
"""
import argparse, json, os

SEV = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}
ORDER = {"FAIL": 0, "MISS": 1, "PARTIAL": 2, "INFO": 3, "PASS": 4}
T0 = 1_767_225_600_000_000_000


def load_incidents(path):
    inc = {}
    for line in open(path):
        line = line.strip()
        if not line: continue
        e = json.loads(line)
        i = inc.setdefault(e["incident"], {"kind": e.get("kind"), "sev": 9, "ranks": set(), "first": e["ts_ns"],
                                           "events": 0, "sev_ts": {}, "summary": e.get("summary", ""), "nodes": set()})
        i["nodes"] |= set(e.get("culprit_nodes") or [])
        i["events"] += 1
        s = SEV.get(e.get("severity"), 9)
        i["sev"] = min(i["sev"], s)
        i["ranks"] |= set(e.get("culprit_ranks") or [])
        if e.get("status") != "resolved":
            for k in range(s, 4):
                i["sev_ts"].setdefault(k, e["ts_ns"])   # first time it was at severity <= k
        i["summary"] = e.get("summary", i["summary"])
    return inc


def fmt(i):
    sev = "P%d" % i["sev"] if i["sev"] < 9 else "?"
    nodes = f" nodes {sorted(i['nodes'])}" if i["nodes"] and not i["ranks"] else ""
    return f"{i['kind']} {sev} {sorted(i['ranks'])}{nodes}"


def score(truth, inc):
    faults = truth["faults"]
    it = truth.get("iteration_s") or 1.0
    sets = [frozenset(f["ranks"]) for f in faults]
    culprits = set().union(*sets) if sets else set()
    notes, verdicts, lat = [], [], []
    p0 = [i for i in inc.values() if i["sev"] == 0]
    # victims / mixed incidents
    for i in inc.values():
        if not i["ranks"]: continue
        vict = i["ranks"] - culprits
        if vict and not (truth["control"] and "heavy_stage_ranks" in truth):
            if not truth["control"]:
                verdicts.append("FAIL"); notes.append(f"names non-culprit ranks {sorted(vict)}: {fmt(i)}")
        elif sets and not any(i["ranks"] <= s for s in sets):
            verdicts.append("FAIL"); notes.append(f"mixes the ranks of two faults: {fmt(i)}")
    if truth["control"]:
        heavy = set(truth.get("heavy_stage_ranks", []))
        for i in inc.values():
            if i["sev"] <= 1:
                verdicts.append("FAIL"); notes.append(f"{fmt(i)} on a healthy job")
            elif i["ranks"]:
                if heavy and i["ranks"] == heavy and i["sev"] == 3:
                    verdicts.append("PARTIAL"); notes.append(f"P3 stage advisory naming the whole heavy stage: {fmt(i)}")
                else:
                    verdicts.append("FAIL"); notes.append(f"{fmt(i)} names ranks on a healthy job")
            else:
                notes.append(f"accepted: {fmt(i)} naming no rank")
        verdicts.append("PASS")
    for f, s in zip(faults, sets):
        onset = T0 + int((f.get("onset_s") or 2.0) * 1e9)
        if f["type"] == "hang":
            exact = [i for i in p0 if i["ranks"] == s]
            if len(p0) == 1 and exact:
                d = (exact[0]["sev_ts"][0] - onset) / 1e9
                verdicts.append("PASS"); lat.append(f"hang {d:.1f} s")
            elif not p0:
                verdicts.append("MISS"); notes.append(f"hang of {sorted(s)} (from {f['onset_s']:.1f} s): no P0")
            else:
                verdicts.append("FAIL"); notes.append(f"hang of {sorted(s)}: P0s {[fmt(i) for i in p0]}")
        else:
            if any(i["ranks"] & s for i in p0):
                verdicts.append("FAIL"); notes.append(f"slow {sorted(s)} named at P0"); continue
            exact = [i for i in inc.values() if i["ranks"] == s and i["sev"] <= 3]
            best = min((i["sev"] for i in exact), default=9)
            if best in (1, 2):
                t = min(i["sev_ts"][2] for i in exact if i["sev"] <= 2)
                d = (t - onset) / 1e9
                verdicts.append("PASS"); lat.append(f"slow {sorted(s)} P{best} {d:.1f} s ({d / it:.0f} it)")
            elif best == 3:
                verdicts.append("PARTIAL"); notes.append(f"slow {sorted(s)} named only at P3")
            else:
                part = [i for i in inc.values() if i["ranks"] and i["ranks"] < s]
                if part and len(s) > 1:
                    verdicts.append("PARTIAL"); notes.append(f"slow node {sorted(s)} named in parts: {[fmt(i) for i in part]}")
                else:
                    verdicts.append("MISS"); notes.append(f"slow {sorted(s)} x{f['factor']} not named")
        if f["type"] == "slow" and truth["faults"] and not any(x["type"] == "hang" for x in faults):
            for i in p0:
                if not i["ranks"]: verdicts.append("FAIL"); notes.append(f"{fmt(i)} naming no rank in a slow-only job")
    v = min(verdicts, key=lambda x: ORDER[x]) if verdicts else "PASS"
    if truth.get("info") and v != "PASS":
        v = "INFO"; notes.append("INFO: " + truth["info"])
    said = "; ".join(fmt(i) for i in sorted(inc.values(), key=lambda i: i["first"])) or "nothing"
    return {"scenario": truth["scenario"], "verdict": v, "truth": "; ".join(
        f"{f['type']} {f['ranks']}" + (f" x{f['factor']}" if "factor" in f else "") for f in faults) or "healthy",
        "said": said, "latency": ", ".join(lat), "notes": notes, "description": truth["description"],
        "wait_for_check": truth.get("wait_for_check", {})}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    rows = []
    for tpath, apath in zip(a.files[::2], a.files[1::2]):
        rows.append(score(json.load(open(tpath)), load_incidents(apath)))
    counts = {}
    for r in rows: counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    md = ["# origin/: faults present from the first iteration", "",
          "| scenario | truth | verdict | commwatch said | detected after | notes |", "|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['scenario']} | {r['truth']} | **{r['verdict']}** | {r['said']} | {r['latency']} | {'; '.join(r['notes'])} |")
    md += ["", "Totals: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda x: ORDER[x[0]]))]
    open(os.path.join(a.out, "results.md"), "w").write("\n".join(md) + "\n")
    json.dump({"rows": rows, "counts": counts}, open(os.path.join(a.out, "results.json"), "w"), indent=1)
    for r in rows:
        print(f"{r['scenario']:24s} {r['verdict']:8s} {r['truth']:28s} | {r['said'][:70]:70s} | {r['latency']}")
        for n in r["notes"]: print(f"{'':26s}- {n}")
    print("Totals:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda x: ORDER[x[0]])))


if __name__ == "__main__":
    main()
