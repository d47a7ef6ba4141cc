#!/usr/bin/env python3
"""Strict scorer of the "sched" generator (written from the spec, not from the detector).

    python score.py --out FOLDER TRUTH ALERTS [TRUTH ALERTS ...]

TRUTH is NAME.truth.json (a list of truth objects, see gen.py), ALERTS the JSON Lines that
`commwatch replay NAME.cwcap` printed (cw.alerts.v1 incident events, spec 2.6). The capture
NAME.cwcap next to TRUTH is checked with check.py first; a capture check.py rejects is not
scored (verdict REJECTED, exit status 2).

Events are folded per incident id: the most severe severity it reached, the culprit ranks of
every event, the time it opened and the time it first reached its most severe level.

hang:      PASS  exactly one incident ever at P0, every P0 event of it naming exactly the
                 culprits, nothing at P0/P1 before the onset, no P0/P1 naming another rank
           PARTIAL  P0 naming exactly the culprits, but more than one P0 incident (duplicates
                 naming the culprits or nobody)
           MISS  no P0 naming the culprits and no P0/P1 naming another rank
           FAIL  any P0/P1 incident naming a rank that is not a culprit (a victim), even
                 together with the culprit; P0/P1 naming ranks before the onset
slow_rank: PASS  an incident naming exactly the culprit (alone at every event) opened after the
                 onset (and, for a transient, before end_ok), no incident at P0-P2 naming any
                 other rank after the onset, no P0 at all
           PARTIAL  the same, but a P3 names another rank
           MISS  the culprit never named alone (in its window)
           FAIL  an incident at P0-P2 names another rank (a victim), any P0, or P0-P2 naming
                 ranks before the onset
healthy:   PASS  nothing; INFO  P2/P3 naming nobody or only allowed ranks (not slow_rank);
           FAIL  any P0/P1, any slow_rank naming a rank (with no_slow_rank in truth: any
                 slow_rank incident at all), P2/P3 naming a rank not allowed
info_only: INFO  whatever was reported (described in "why"), unless a P0/P1 names a rank
                 outside the culprits and allowed ranks: FAIL
"""
import argparse, json, os, sys
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check as checker

SEV = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}


def fold(path, job):
    inc = OrderedDict()
    bad = 0
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                e = json.loads(line)
            except Exception:
                bad += 1
                continue
            if e.get("job") != job:
                continue
            i = inc.setdefault(e["incident"], {"id": e["incident"], "kind": e.get("kind"), "events": [],
                                               "sev": 9, "open_ts": e.get("ts_ns"), "sev_ts": None, "ranks": set(), "nodes": set()})
            s = SEV.get(e.get("severity"), 9)
            cr = tuple(sorted(int(x) for x in e.get("culprit_ranks") or []))
            i["events"].append((e.get("ts_ns"), s, cr, e.get("status"), e.get("kind")))
            i["ranks"] |= set(cr)
            i["nodes"] |= set(e.get("culprit_nodes") or [])
            i["kind"] = e.get("kind") or i["kind"]
            if s < i["sev"]:
                i["sev"], i["sev_ts"] = s, e.get("ts_ns")
    return list(inc.values()), bad


def p(s):
    return f"P{s}" if s < 9 else "P?"


def describe(incs, ref_ns, limit=6):
    out = []
    for i in sorted(incs, key=lambda x: (x["sev"], x["open_ts"] or 0))[:limit]:
        dt = ((i["sev_ts"] or i["open_ts"]) - ref_ns) / 1e9
        rk = ",".join(str(r) for r in sorted(i["ranks"]))
        dto = (i["open_ts"] - ref_ns) / 1e9
        when = f"{dto:+.1f}s" if i["sev_ts"] == i["open_ts"] else f"{dto:+.1f}s ({p(i['sev'])} {dt:+.1f}s)"
        extra = "" if i["ranks"] else ("" if not i["nodes"] else " " + ",".join(sorted(i["nodes"])))
        out.append(f"{p(i['sev'])} {i['kind']} [{rk}]{extra} {when}")
    if len(incs) > limit:
        out.append(f"+{len(incs) - limit} more")
    return "; ".join(out) if out else "nothing"


def score_row(t, incs):
    kind, cul = t["kind"], set(t["culprits"])
    onset = t["onset_ns"]
    allowed = set(t.get("allowed_ranks") or [])
    it_s = t.get("iter_s") or 1.0
    delay = None
    why = []
    if t.get("info_only"):
        bad = [i for i in incs if i["sev"] <= 1 and (i["ranks"] - cul - allowed)]
        if bad:
            return "FAIL", f"info-only row, but {p(bad[0]['sev'])} {bad[0]['kind']} names {sorted(bad[0]['ranks'] - cul - allowed)} (outside culprits/allowed)", None
        exact = [i for i in incs if i["ranks"] == cul]
        if exact:
            e = min(exact, key=lambda i: i["open_ts"])
            delay = (e["open_ts"] - onset) / 1e9 if onset else None
            why.append(f"culprit {sorted(cul)} named alone at {p(e['sev'])} ({e['kind']})")
        elif incs:
            top = min(incs, key=lambda i: i["sev"])
            why.append(f"culprit {sorted(cul)} not named alone; most severe: {p(top['sev'])} {top['kind']} naming "
                       f"{sorted(top['ranks']) or 'no rank'}{' nodes ' + ','.join(sorted(top['nodes'])) if top['nodes'] else ''}")
        else:
            why.append("nothing reported")
        return "INFO", "information-only: " + "; ".join(why), delay
    if kind == "healthy":
        hi = [i for i in incs if i["sev"] <= 1]
        if hi:
            return "FAIL", f"{p(hi[0]['sev'])} {hi[0]['kind']} naming {sorted(hi[0]['ranks'])} on a healthy job", None
        sl = [i for i in incs if i["kind"] == "slow_rank" and (i["ranks"] or t.get("no_slow_rank"))]
        if sl:
            return "FAIL", f"slow_rank {p(sl[0]['sev'])} naming {sorted(sl[0]['ranks']) or 'no rank'} on a healthy job" + \
                (" (this control allows no slow_rank of any severity)" if not sl[0]["ranks"] else ""), None
        na = [i for i in incs if i["ranks"] - allowed]
        if na:
            return "FAIL", f"{p(na[0]['sev'])} {na[0]['kind']} naming {sorted(na[0]['ranks'] - allowed)} on a healthy job", None
        if incs:
            return "INFO", f"{len(incs)} P2/P3 incident(s) naming nobody or only allowed ranks", None
        return "PASS", "nothing reported", None
    pre = [i for i in incs if i["open_ts"] < onset and i["sev"] <= (1 if kind == "hang" else 2) and i["ranks"]]
    if pre:
        i = pre[0]
        return "FAIL", f"{p(i['sev'])} {i['kind']} naming {sorted(i['ranks'])} opened {(i['open_ts'] - onset) / 1e9:+.1f} s before the onset", None
    if kind == "hang":
        p0 = [i for i in incs if i["sev"] == 0]
        if not p0:
            low = [i for i in incs if cul & i["ranks"]]
            if low:
                return "MISS", f"no P0; culprit named only at {p(min(i['sev'] for i in low))}", None
            return "MISS", "no P0", None
        exact_inc = []
        for i in p0:
            sets = {cr for (ts, s, cr, st, k) in i["events"] if s == 0}
            if sets == {tuple(sorted(cul))}:
                exact_inc.append((i, "all"))
            elif tuple(sorted(cul)) in sets:
                exact_inc.append((i, "some"))
        # an incident at P0/P1 naming a victim fails the row
        vict = [x for x in incs if x["sev"] <= 1 and (x["ranks"] - cul)]
        if vict:
            x = vict[0]
            with_c = " (with the culprit)" if cul & x["ranks"] else ""
            return "FAIL", f"{p(x['sev'])} {x['kind']} names {sorted(x['ranks'] - cul)}{with_c}: victims, not the culprit {sorted(cul)}", None
        if not exact_inc:
            return "MISS", f"P0 {p0[0]['kind']} names {sorted(p0[0]['ranks']) or 'no rank'}, not the culprit {sorted(cul)}", None
        i, how = exact_inc[0]
        t_exact = min(ts for (ts, s, cr, st, k) in i["events"] if s == 0 and set(cr) == cul)
        delay = (t_exact - onset) / 1e9
        if len(p0) > 1:
            return "PARTIAL", f"P0 names exactly the culprit, but {len(p0)} P0 incidents ({', '.join(sorted({x['kind'] for x in p0}))})", delay
        notes = [x for x in incs if x is not i and x["sev"] >= 2]
        return "PASS", f"one P0 {i['kind']} naming exactly {sorted(cul)}" + (f" (+{len(notes)} P2/P3)" if notes else ""), delay
    # slow_rank / slow_link (scored like a slow rank)
    end_ok = t.get("end_ok_ns")
    p0 = [i for i in incs if i["sev"] == 0]
    if p0:
        return "FAIL", f"P0 {p0[0]['kind']} naming {sorted(p0[0]['ranks'])} on a job that never hung", None
    vict = [i for i in incs if i["sev"] <= 2 and (i["ranks"] - cul)]
    if vict:
        i = vict[0]
        return "FAIL", f"{p(i['sev'])} {i['kind']} names {sorted(i['ranks'] - cul)} (not the culprit {sorted(cul)})" + \
            (" together with the culprit" if cul & i["ranks"] else ""), None
    named = [i for i in incs if i["ranks"] == cul]
    if not named:
        return "MISS", "culprit never named" + (f"; {len(incs)} incident(s) naming nobody" if incs else ""), None
    first = min(named, key=lambda i: i["open_ts"])
    delay = (first["open_ts"] - onset) / 1e9
    if end_ok and first["open_ts"] > end_ok:
        return "MISS", f"culprit named only {delay:.1f} s after onset, after the slowdown ended", delay
    p3 = [i for i in incs if i["sev"] == 3 and (i["ranks"] - cul)]
    if p3:
        return "PARTIAL", f"culprit named ({p(first['sev'])} {first['kind']}), but P3 {p3[0]['kind']} names {sorted(p3[0]['ranks'] - cul)}", delay
    return "PASS", f"{p(first['sev'])} {first['kind']} names exactly {sorted(cul)}", delay


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("pairs", nargs="+")
    a = ap.parse_args()
    if len(a.pairs) % 2:
        sys.exit("TRUTH ALERTS pairs expected")
    rows = []
    rejected = False
    for k in range(0, len(a.pairs), 2):
        tpath, apath = a.pairs[k], a.pairs[k + 1]
        truths = json.load(open(tpath))
        cap = tpath[:-len(".truth.json")] + ".cwcap"
        errs = checker.check(cap) if os.path.exists(cap) else [f"capture {cap} missing"]
        for t in truths:
            ref = t["onset_ns"] if t.get("onset_ns") else t.get("t0_ns", 0)
            row = {"scenario": t["scenario"], "job": t["job"], "probe": t["probe"], "ranks": t["ranks"],
                   "truth": f"{t['kind']} {t['culprits'] if t['culprits'] else ''}".strip()
                   + (f" @{(t['onset_ns'] - t['t0_ns']) / 1e9:.1f}s" if t.get("onset_ns") and t.get("t0_ns") else "")
                   + (" (info-only)" if t.get("info_only") else ""),
                   "note": t.get("note", "")}
            if errs:
                rejected = True
                row.update(reported="-", verdict="REJECTED", why="check.py: " + "; ".join(errs[:3]), delay_s=None, delay_it=None)
                rows.append(row)
                continue
            incs, badl = fold(apath, t["job"])
            v, why, d = score_row(t, incs)
            if badl:
                why += f" ({badl} unparsable alert lines)"
            row.update(reported=describe(incs, ref), verdict=v, why=why,
                       delay_s=None if d is None else round(d, 2),
                       delay_it=None if d is None else round(d / (t.get("iter_s") or 1.0), 2))
            rows.append(row)
    cols = ["scenario", "job", "probe", "ranks", "truth", "reported", "verdict", "why", "delay_s", "delay_it"]
    head = ["scenario", "job", "probe", "ranks", "truth", "reported (most severe first, time from onset)", "verdict", "why", "delay s", "delay it"]
    md = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        md.append("| " + " | ".join("" if r[c] is None else str(r[c]).replace("|", "/") for c in cols) + " |")
    counts = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    md.append("")
    md.append(f"{len(rows)} rows: {summary}")
    text = "\n".join(md)
    print(text)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"rows": rows, "summary": counts}, f, indent=1)
    if rejected:
        sys.exit(2)


if __name__ == "__main__":
    main()
