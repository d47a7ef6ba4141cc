"""`commwatch bench detect`: detection quality, delay and speed over simulated scenarios.

Each scenario is a simulated job (layouts of 8 to 4096 ranks, every fault kind, healthy
controls with jitter, GC blips, checkpoint pauses and clock skew) fed in-process, in event
time, through the same `Detector` as `commwatch replay`. Incidents are matched to the
simulator's ground truth: a culprit is localized when an incident of the fault's kind names
the injected rank (nodes for `slow_link` / `node_lost`, the comm for `comm_hang`).

Printed per kind: precision, recall and F1 of culprit localization, detection delay p50/p95
in seconds and in iterations; false incidents on healthy runs; replay speed in records/s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass

import numpy as np

from commwatch.settings import Settings
from commwatch.streams.detect import Detector

# (tp, pp, dp): 8 .. 4096 ranks, TP 1-8, PP 1-16, DP 1-64
SMALL = [(1, 1, 8), (2, 2, 2), (8, 1, 2), (2, 2, 4), (1, 4, 8), (4, 2, 4), (8, 2, 4), (2, 4, 8), (1, 1, 64),
         (4, 16, 2)]
LARGE = [(8, 4, 8), (8, 8, 16), (8, 8, 64)]
FAULTS = ["hang", "comm_hang", "slow", "slow50", "downclock", "slow_link", "node_lost", "hang_pp"]
HEALTHY = ["jitter", "gc_blips", "checkpoint", "skew"]


@dataclass
class Scenario:
    name: str
    tp: int
    pp: int
    dp: int
    kind: str
    seed: int
    duration_s: float = 35.0
    step_s: float = 1.0

    @property
    def ranks(self) -> int:
        return self.tp * self.pp * self.dp


def scenarios(quick: bool) -> list[Scenario]:
    out: list[Scenario] = []
    layouts = SMALL[:4] if quick else SMALL
    i = 0
    for n, layout in enumerate(layouts):
        kinds = FAULTS + HEALTHY
        if quick:  # each kind once or twice over the four small layouts
            kinds = (FAULTS[:4] + HEALTHY[:2]) if n % 2 == 0 else (FAULTS[4:] + HEALTHY[2:])
        for kind in kinds:
            if kind in ("slow_link", "node_lost") and layout[0] * layout[1] * layout[2] < 16:
                continue  # needs two nodes
            if kind == "hang_pp" and layout[1] == 1:
                continue
            out.append(Scenario(f"{kind}-{layout[0]}x{layout[1]}x{layout[2]}", *layout, kind, seed=i,
                                step_s=2.0 if i % 5 == 4 else 1.0))
            i += 1
    if not quick:
        for layout, kinds in zip(LARGE, (["hang", "slow", "jitter"], ["hang", "slow"], ["hang"])):
            for kind in kinds:
                out.append(Scenario(f"{kind}-{layout[0]}x{layout[1]}x{layout[2]}", *layout, kind, seed=100 + i,
                                    duration_s=22.0))
                i += 1
    return out


def build(sc: Scenario):
    from commwatch.producers.simulate import JobSpec, parse_fault, simulate

    rng = np.random.default_rng(sc.seed)
    world = sc.ranks
    big = world >= 1024
    kw = dict(job=f"b{sc.seed}", tp=sc.tp, pp=sc.pp, dp=sc.dp, duration_s=sc.duration_s, step_s=sc.step_s,
              seed=sc.seed, clock_skew_ms=20.0)
    if big:  # fewer, larger call batches and calls per step keep the default bench in minutes
        kw.update(tp_calls=2, microbatches=2, batch_s=0.5)
    elif world >= 256:
        kw.update(tp_calls=4)
    if sc.kind == "gc_blips":
        kw["gc_blip_rate"] = 0.02
    if sc.kind == "checkpoint":
        kw.update(checkpoint_every_s=15.0, checkpoint_s=12.0)
    if sc.kind == "skew":
        kw.update(clock_skew_ms=50.0, clock_drift_ppm=50.0)
    if sc.kind == "jitter":
        kw["jitter"] = 0.08
    spec = JobSpec(**kw)
    at = 12.0 if big else 15.0
    rank = int(rng.integers(0, world))
    nodes = max(1, world // spec.gpus_per_node)
    faults = []
    if sc.kind == "hang":
        faults.append(f"hang:rank={rank},at={at}s")
    elif sc.kind == "hang_pp":  # the last pipeline stage of replica 0
        faults.append(f"hang:rank={(sc.pp - 1) * sc.tp},at={at}s")
    elif sc.kind == "comm_hang":
        faults.append(f"comm_hang:comm={'dp0' if sc.dp > 1 else 'tp0'},at={at}s")
    elif sc.kind == "slow":
        faults.append(f"slow:rank={rank},factor={1.2 + 0.1 * (sc.seed % 3):.1f},at={at}s")
    elif sc.kind == "slow50":
        faults.append(f"slow:rank={rank},factor=1.6,at={at}s")
    elif sc.kind == "downclock":
        faults.append(f"downclock:rank={rank},at={at}s,mhz=1300")
    elif sc.kind == "slow_link":
        a = int(rng.integers(0, nodes - 1))
        faults.append(f"slow_link:nodes=node-{a:02d}+node-{a + 1:02d},factor=3,at={at}s")
    elif sc.kind == "node_lost":
        faults.append(f"node_lost:node=node-{int(rng.integers(0, nodes)):02d},at={at}s")
    elif sc.kind == "gc_blips":
        faults.append(f"blip:rank={rank},at={at}s,ms=600")
    sim = simulate(spec, [parse_fault(f) for f in faults])
    return spec, sim


def localized(inc: dict, truth: dict) -> bool:
    if inc["kind"] != truth["kind"]:
        return False
    if truth["kind"] in ("hang", "slow_rank"):
        return bool(set(truth["ranks"]) & set(inc["culprit_ranks"]))
    if truth["kind"] == "comm_hang":
        return inc["comm"] == truth["comm"] or set(inc["culprit_nodes"]) == set(truth["nodes"])
    return bool(set(truth["nodes"]) & set(inc["culprit_nodes"]))


def run_one(sc: Scenario, settings: Settings) -> dict:
    t0 = time.perf_counter()
    spec, sim = build(sc)
    msgs = list(sim.messages())
    t1 = time.perf_counter()
    det = Detector(settings)
    incidents = []
    for m in msgs:
        incidents += det.feed(m)
        incidents += det.tick(m.ts_ns)
    if msgs:
        incidents += det.tick(msgs[-1].ts_ns)
    t2 = time.perf_counter()
    truths = [t for t in sim.truth() if t.get("expect_incident")]
    opened = [i for i in incidents if i["status"] == "open"]
    found = []
    for t in truths:
        hits = [i for i in opened if localized(i, t) and i["ts_ns"] >= t["at_ns"]]
        delay = (hits[0]["ts_ns"] - t["at_ns"]) / 1e9 if hits else None
        found.append({"kind": t["kind"], "factor": t.get("factor"), "hit": bool(hits), "delay_s": delay,
                      "delay_it": None if delay is None else delay / spec.step_s})
    wrong = [i for i in opened if not any(localized(i, t) for t in truths)]
    return {"name": sc.name, "ranks": sc.ranks, "healthy": sc.kind in HEALTHY, "truths": found,
            "wrong": [{"kind": i["kind"], "severity": i["severity"], "culprit_ranks": i["culprit_ranks"][:8],
                       "culprit_nodes": i["culprit_nodes"][:8]} for i in wrong],
            "opened": len(opened), "records": det.stats["records"], "sim_s": t1 - t0, "detect_s": t2 - t1}


def _pct(xs: list[float], q: float) -> float | None:
    return round(float(np.percentile(xs, q)), 2) if xs else None


def summarize(results: list[dict]) -> dict:
    kinds: dict[str, dict] = {}

    def row(k: str) -> dict:
        return kinds.setdefault(k, {"expected": 0, "localized": 0, "wrong": 0, "delays": [], "iters": []})

    for res in results:
        for t in res["truths"]:
            keys = [t["kind"]] + (["slow_rank>=50%"] if t["kind"] == "slow_rank" and (t["factor"] or 0) >= 1.5 else [])
            for k in keys:
                r = row(k)
                r["expected"] += 1
                if t["hit"]:
                    r["localized"] += 1
                    r["delays"].append(t["delay_s"])
                    r["iters"].append(t["delay_it"])
        for w in res["wrong"]:
            row(w["kind"])["wrong"] += 1
    table = {}
    for k, r in sorted(kinds.items()):
        tp = r["localized"]
        prec = tp / (tp + r["wrong"]) if tp + r["wrong"] else None
        rec = tp / r["expected"] if r["expected"] else None
        f1 = 2 * prec * rec / (prec + rec) if prec and rec else (0.0 if prec is not None and rec is not None else None)
        table[k] = {"expected": r["expected"], "localized": tp, "false": r["wrong"],
                    "precision": None if prec is None else round(prec, 3), "recall": None if rec is None else round(rec, 3),
                    "f1": None if f1 is None else round(f1, 3),
                    "delay_s_p50": _pct(r["delays"], 50), "delay_s_p95": _pct(r["delays"], 95),
                    "delay_it_p50": _pct(r["iters"], 50), "delay_it_p95": _pct(r["iters"], 95)}
    healthy = [r for r in results if r["healthy"]]
    records = sum(r["records"] for r in results)
    detect_s = sum(r["detect_s"] for r in results)
    return {
        "scenarios": len(results),
        "kinds": table,
        "healthy_runs": len(healthy),
        "healthy_false_incidents": sum(len(r["wrong"]) for r in healthy),
        "healthy_p0_p1": sum(1 for r in healthy for w in r["wrong"] if w["severity"] in ("P0", "P1")),
        "false_incidents_all": sum(len(r["wrong"]) for r in results),
        "records": records,
        "detect_s": round(detect_s, 2),
        "records_per_s": round(records / detect_s) if detect_s else 0,
        "simulate_s": round(sum(r["sim_s"] for r in results), 2),
        "largest_ranks": max((r["ranks"] for r in results), default=0),
    }


def core_speed(settings: Settings) -> dict:
    """Decode and detection timed apart on one 256-rank healthy run: where the time goes."""
    from commwatch.decode import decode_message

    _, sim = build(Scenario("speed", 8, 4, 8, "jitter", seed=7, duration_s=20.0))
    msgs = list(sim.messages())
    t0 = time.perf_counter()
    decoded = [decode_message(m) for m in msgs]
    t1 = time.perf_counter()
    det = Detector(settings)
    for m, d in zip(msgs, decoded):
        det.feed_decoded(m, d)
        det.tick(m.ts_ns)
    t2 = time.perf_counter()
    records = det.stats["records"]
    return {"messages": len(msgs), "records": records, "records_per_message": round(records / len(msgs), 1),
            "decode_s": round(t1 - t0, 2), "core_s": round(t2 - t1, 2),
            "core_records_per_s": round(records / (t2 - t1)), "decode_records_per_s": round(records / (t1 - t0))}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="a few small scenarios (~1-2 min)")
    p.add_argument("--json", nargs="?", const="-", metavar="FILE", help="also write the JSON (to FILE or stdout)")
    p.add_argument("--only", default="", help="run only scenarios whose name contains this")
    p.add_argument("--verbose", action="store_true", help="one line per scenario on stderr")


def run(args: argparse.Namespace, settings: Settings) -> int:
    import river.anomaly  # noqa: F401  (warm the import: it is not part of detection time)

    results = []
    for sc in scenarios(args.quick):
        if args.only and args.only not in sc.name:
            continue
        res = run_one(sc, settings)
        results.append(res)
        if args.verbose:
            miss = [t["kind"] for t in res["truths"] if not t["hit"]]
            print(f"{res['name']:28s} {res['ranks']:5d} ranks  opened {res['opened']}  missed {miss}  "
                  f"wrong {res['wrong']}  {res['records'] / max(res['detect_s'], 1e-9):,.0f} rec/s",
                  file=sys.stderr)
    summary = summarize(results)
    summary["core_speed"] = core_speed(settings)
    summary["runs"] = results
    print(f"commwatch bench detect: {summary['scenarios']} scenarios, up to {summary['largest_ranks']} ranks")
    print(f"{'kind':16s} {'exp':>4s} {'hit':>4s} {'false':>5s} {'prec':>6s} {'recall':>6s} {'f1':>6s} "
          f"{'p50 s':>6s} {'p95 s':>6s} {'p50 it':>6s} {'p95 it':>6s}")

    def f(x) -> str:
        return "-" if x is None else f"{x:.2f}" if isinstance(x, float) else str(x)

    for k, r in summary["kinds"].items():
        print(f"{k:16s} {r['expected']:4d} {r['localized']:4d} {r['false']:5d} {f(r['precision']):>6s} "
              f"{f(r['recall']):>6s} {f(r['f1']):>6s} {f(r['delay_s_p50']):>6s} {f(r['delay_s_p95']):>6s} "
              f"{f(r['delay_it_p50']):>6s} {f(r['delay_it_p95']):>6s}")
    print(f"healthy runs: {summary['healthy_runs']}, false incidents {summary['healthy_false_incidents']} "
          f"(P0/P1: {summary['healthy_p0_p1']}); false incidents over all runs: {summary['false_incidents_all']}")
    print(f"replay speed: {summary['records_per_s']:,} call records/s (decode + detect, one core; "
          f"{summary['records']:,} records in {summary['detect_s']} s); simulation took {summary['simulate_s']} s")
    cs = summary["core_speed"]
    print(f"core only (256 ranks, {cs['records_per_message']} records/message): detect {cs['core_records_per_s']:,} "
          f"records/s; decoding the messages alone {cs['decode_records_per_s']:,} records/s")
    if args.json:
        text = json.dumps(summary, indent=1)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
    return 0
