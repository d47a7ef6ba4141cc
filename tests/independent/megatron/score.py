#!/usr/bin/env python3
"""Run commwatch replay on every capture in caps/ and score strictly against *.truth.json.

python score.py [CAPDIR] [--no-replay]
"""
import sys, os, json, glob, subprocess, time

REPLAY = os.environ.get("COMMWATCH", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../.venv/bin/commwatch"))
HERE = os.path.dirname(os.path.abspath(__file__))


def replay(cap):
    out = cap[:-6] + ".out"
    t0 = time.time()
    p = subprocess.run([REPLAY, "replay", "--stats", cap], capture_output=True, text=True)
    with open(out, "w") as fh:
        fh.write(p.stdout)
    with open(cap[:-6] + ".stats", "w") as fh:
        fh.write(p.stderr)
    return out, time.time() - t0, p.returncode, p.stderr.strip().splitlines()[-1:] if p.stderr else []


def load_incidents(path):
    inc = {}
    for ln in open(path):
        ln = ln.strip()
        if not ln:
            continue
        e = json.loads(ln)
        i = inc.setdefault(e["incident"], {"events": [], "id": e["incident"]})
        i["events"].append(e)
    for i in inc.values():
        ev = i["events"]
        first, last = ev[0], ev[-1]
        i["kind"] = first["kind"]
        i["opened_ns"] = first.get("opened_ns", first["ts_ns"])
        i["sev_open"] = first["severity"]
        i["sev_max"] = min(e["severity"] for e in ev)   # "P0" < "P1" lexically
        i["culprits_open"] = sorted(first.get("culprit_ranks", []))
        i["culprits_all"] = sorted({r for e in ev for r in e.get("culprit_ranks", [])})
        i["culprit_nodes"] = sorted({n for e in ev for n in e.get("culprit_nodes", [])})
        i["comm"] = first.get("comm", "")
        i["status_last"] = last["status"]
        i["summary"] = first.get("summary", "")[:140]
    return sorted(inc.values(), key=lambda i: i["opened_ns"])


def desc(i, onset_ns, step):
    d = ""
    if onset_ns:
        ds = (i["opened_ns"] - onset_ns) / 1e9
        d = f" @{ds:+.1f}s/{ds / step:+.1f}it"
    cul = i["culprits_all"]
    c = ",".join(map(str, cul)) if len(cul) <= 6 else f"{cul[0]}..{cul[-1]}({len(cul)})"
    return f"{i['kind']} {i['sev_max']} [{c}]{d}"


def score(truth, incs):
    typ = truth["type"]
    cul = sorted(truth.get("culprits", []))
    onset_ns = truth.get("onset_ns")
    step = truth["step_s_nominal"]
    p01 = [i for i in incs if i["sev_max"] in ("P0", "P1")]
    p0 = [i for i in incs if i["sev_max"] == "P0"]
    notes, problems = [], []
    verdict = "PASS"
    delay = None
    if typ == "control":
        if p01:
            verdict = "FAIL"
            problems.append(f"{len(p01)} P0/P1 false alarm(s)")
        if [i for i in incs if i not in p01]:
            notes.append(f"{len(incs) - len(p01)} P2/P3")
    elif typ in ("hang", "comm_hang"):
        early = [i for i in p0 if onset_ns and i["opened_ns"] < onset_ns]
        if early:
            problems.append(f"{len(early)} P0 before the fault")
        cand = [i for i in p0 if i["kind"] in ("hang", "comm_hang") or (truth.get("allow_node_lost") and i["kind"] == "node_lost")]
        fault_p0 = [i for i in cand if not onset_ns or i["opened_ns"] >= onset_ns]
        if len(fault_p0) != 1:
            verdict = "FAIL"
            problems.append(f"{len(fault_p0)} P0 hang incidents (need exactly 1)")
        if fault_p0:
            i = fault_p0[0]
            if typ == "comm_hang":
                ok = i["kind"] == "comm_hang" and i["comm"] == truth.get("hang_comm") and i["culprits_all"] == []
                if not ok:
                    verdict = "FAIL"
                    problems.append(f"first P0 is {i['kind']} on {i['comm']} culprits {i['culprits_all']}, truth comm_hang on {truth.get('hang_comm')}")
            else:
                ok = i["culprits_open"] == cul and i["culprits_all"] == cul
                if not ok and i["kind"] == "node_lost" and truth.get("node") and i["culprit_nodes"] == [truth["node"]] and not i["culprits_all"]:
                    ok = True
                    notes.append("named by node")
                if not ok:
                    verdict = "FAIL"
                    problems.append(f"culprits {i['culprits_all']} != truth {cul}")
            delay = (i["opened_ns"] - onset_ns) / 1e9 if onset_ns else None
            if truth.get("stall_onset_s"):
                notes.append(f"{(i['opened_ns'] - truth['epoch_ns']) / 1e9 - truth['stall_onset_s']:.1f}s after stall began")
        if len(p0) > len(fault_p0):
            extra = [i for i in p0 if i not in fault_p0]
            verdict = "FAIL"
            problems.append(f"{len(extra)} other P0 ({','.join(sorted({x['kind'] for x in extra}))})")
    elif typ == "slow":
        hits = [i for i in incs if i["kind"] == "slow_rank" and i["culprits_all"] == cul
                and i["opened_ns"] >= onset_ns - 1e9]
        if not hits:
            verdict = "FAIL"
            problems.append("no slow_rank with exact culprits")
        else:
            delay = (hits[0]["opened_ns"] - onset_ns) / 1e9
        early = [i for i in incs if i["kind"] == "slow_rank" and i["culprits_all"] and i["opened_ns"] < onset_ns - 1e9]
        if early:
            verdict = "FAIL"
            problems.append(f"{len(early)} slow_rank before onset")
        badp = [i for i in p01 if not (i["kind"] == "slow_rank" and i["culprits_all"] == cul)]
        if badp:
            verdict = "FAIL"
            problems.append(f"{len(badp)} P0/P1 ({','.join(sorted({x['kind'] for x in badp}))})")
        if truth.get("end") is not None:
            end_ns = truth["epoch_ns"] + truth["end"] * 1e9
            after = [i for i in incs if i["opened_ns"] > end_ns]
            if after:
                notes.append(f"{len(after)} incident(s) opened after job end: " + "; ".join(desc(i, None, step) for i in after))
                if any(i["sev_max"] in ("P0", "P1") for i in after):
                    verdict = "FAIL"
            still_open = [i for i in hits if i["status_last"] != "resolved"]
            if still_open:
                notes.append("slow_rank still open at capture end")
    elif typ == "nohang":
        if p01:
            verdict = "FAIL"
            problems.append(f"{len(p01)} P0/P1 while training progresses")
    # victims: any incident naming a rank outside the culprit set (fault scenarios) or any rank (controls)
    truthset = set(cul)
    for i in incs:
        bad = set(i["culprits_all"]) - truthset
        if bad and typ != "control":
            verdict = "FAIL"
            pre = " before onset" if onset_ns and i["opened_ns"] < onset_ns else ""
            problems.append(f"FP {i['kind']} {i['sev_max']} names non-culprit(s) {sorted(bad)[:8]}{pre}")
    if verdict == "FAIL" and truth.get("ambiguous"):
        verdict = "AMBIG"
        notes.append(truth["ambiguous"])
    return verdict, delay, problems, notes


def main():
    capdir = os.path.join(HERE, "caps")
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if args:
        capdir = args[0]
    rows = []
    for cap in sorted(glob.glob(os.path.join(capdir, "*.cwcap"))):
        truth = json.load(open(cap[:-6] + ".truth.json"))
        if "--no-replay" in sys.argv and os.path.exists(cap[:-6] + ".out"):
            out, secs = cap[:-6] + ".out", 0.0
        else:
            out, secs, rc, st = replay(cap)
        incs = load_incidents(out)
        verdict, delay, problems, notes = score(truth, incs)
        step = truth["step_s_nominal"]
        rep = "; ".join(desc(i, truth.get("onset_ns"), step) for i in incs) or "(none)"
        tr = truth["type"]
        if truth.get("culprits"):
            c = truth["culprits"]
            tr += " [" + (",".join(map(str, c)) if len(c) <= 6 else f"{c[0]}..{c[-1]}") + "]"
        if truth.get("onset"):
            tr += f" @{truth['onset']:.0f}s"
        rows.append({"scenario": truth["scenario"], "truth": tr, "reported": rep, "verdict": verdict,
                     "delay_s": delay, "delay_it": (delay / step if delay is not None else None),
                     "problems": problems, "notes": notes, "replay_s": round(secs, 1)})
        print(f"{verdict:5} {truth['scenario']:38} {tr:28} | {rep[:300]} | {'; '.join(problems + notes)[:300]} ({secs:.1f}s)", flush=True)
    with open(os.path.join(HERE, "results.json"), "w") as fh:
        json.dump(rows, fh, indent=1)
    with open(os.path.join(HERE, "results.md"), "w") as fh:
        fh.write("| scenario | truth | commwatch reported (kind sev [culprits] @delay) | delay | verdict |\n|---|---|---|---|---|\n")
        for r in rows:
            d = f"{r['delay_s']:.1f}s / {r['delay_it']:.1f}it" if r["delay_s"] is not None else ""
            v = r["verdict"] + (" (" + "; ".join(r["problems"] + r["notes"]) + ")" if r["problems"] or r["notes"] else "")
            fh.write(f"| {r['scenario']} | {r['truth']} | {r['reported']} | {d} | {v} |\n")
    npass = sum(r["verdict"] == "PASS" for r in rows)
    print(f"\n{npass}/{len(rows)} PASS")


if __name__ == "__main__":
    main()
