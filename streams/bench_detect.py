"""`commwatch bench detect`: detection quality, delay and speed, scored strictly.

Every scenario (`bench_scenarios`: the project's simulator and the independent job model)
is fed in-process, message by message in event-time order (one multi-job scenario also in
the order a live worker receives them), through the same `Detector` as `commwatch replay`: `feed(msg)` then `tick(msg.ts_ns)` (a message
the detector refuses is counted and skipped), a last tick at the end, for jobs that end
ticks every 0.5 s for a while after, and the end of the capture as replay ends it
(`Detector.finish`). Incidents are scored by `bench_score`: exact
culprits, victims and extra P0/P1s count as false, advisories apart.

Printed: per kind expected / hits / false / precision / recall / false P0/P1 per healthy
job-hour / delay p50, p95 in seconds and iterations (of the job's healthy step time); slow
ranks also in the iterations the job ran under the fault (its slowed steps: a 2x slowdown
found at the end of its first slow iteration is 2 healthy iterations, 1 it ran); hang figures; P0/P1 on controls;
ended jobs; the targets with pass/fail; replay speed in records/s. `--json FILE` writes the
same (and one entry per scenario); `--save DIR` writes each scenario's capture and truth.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from commwatch.decode import decode_messages
from commwatch.settings import Settings
from commwatch.streams.bench_scenarios import Built, Case, all_cases, fault_steps, records_in
from commwatch.streams.bench_score import S, score, summarize
from commwatch.streams.detect import Detector
from commwatch.wire import WireError

TAIL_TICK_S = 0.5


def feed(built: Built, settings: Settings) -> tuple[list[dict], int]:
    """Every incident event the detector emits over the capture; and how many messages it refused."""
    det = Detector(settings)
    received = built.received_ns or [m.ts_ns for m in built.messages]  # live: when each arrived
    decoded = decode_messages(built.messages, settings.max_message_bytes)
    refused = sum(isinstance(d, WireError) for d in decoded)
    events = det.feed_stream(built.messages, decoded, received)
    last = max(received) if received else None
    if last is not None:
        events += det.tick(last)
        for k in range(1, int(built.tail_s / TAIL_TICK_S) + 1):
            events += det.tick(last + round(k * TAIL_TICK_S * S))
        events += det.finish()  # the capture's end, as `commwatch replay` ends it
    return events, refused


def healthy_seconds(built: Built) -> float:
    """Job time not under an injected fault: up to the first expected onset, or the whole run."""
    total = 0.0
    for job, info in built.jobs.items():
        onsets = [t["onset_ns"] for t in built.truth if t["job"] == job and t.get("expect_incident")]
        end = min([info.end_ns] + onsets + ([info.ended_ns] if info.ended_ns else []))
        total += max(0.0, (end - info.start_ns) / S)
    return total


def run_case(case: Case, settings: Settings, save: Path | None) -> dict:
    t0 = time.perf_counter()
    built = case.build()
    fault_steps(built)
    t1 = time.perf_counter()
    events, refused = feed(built, settings)
    t2 = time.perf_counter()
    if save is not None:
        _save(save, case, built, events)
    res = score(events, built.truth, built.jobs, settings.hang_floor_s)
    res.update(name=case.name, family=case.family, ranks=case.ranks, refused=refused,
               records=records_in(built.messages), messages=len(built.messages), build_s=round(t1 - t0, 3),
               detect_s=round(t2 - t1, 3), healthy_s=healthy_seconds(built))
    return res


def _save(folder: Path, case: Case, built: Built, events: list[dict]) -> None:
    from commwatch.capture import CaptureWriter

    folder.mkdir(parents=True, exist_ok=True)
    stem = case.name.replace("/", "_")
    with CaptureWriter(folder / f"{stem}.cwcap") as w:
        for m in built.messages:
            w.write(m)
    (folder / f"{stem}.truth.json").write_text(json.dumps(built.truth, indent=1) + "\n", encoding="utf-8")
    with open(folder / f"{stem}.alerts.jsonl", "w", encoding="utf-8") as fh:
        for ev in events:
            fh.write(json.dumps(ev) + "\n")


def core_speed(settings: Settings) -> dict:
    """Decode and detection timed apart on one 256-rank healthy simulator run: where the time goes."""
    from commwatch.streams.bench_scenarios import build_sim

    built = build_sim((8, 4, 8), "jitter", seed=7, step_s=1.0, duration_s=20.0)
    msgs = built.messages
    t0 = time.perf_counter()
    decoded = decode_messages(msgs)
    t1 = time.perf_counter()
    Detector(settings).feed_stream(msgs, decoded)
    t2 = time.perf_counter()
    records = records_in(msgs)
    return {"messages": len(msgs), "records": records, "records_per_message": round(records / len(msgs), 1),
            "decode_s": round(t1 - t0, 2), "core_s": round(t2 - t1, 2),
            "core_records_per_s": round(records / (t2 - t1)), "decode_records_per_s": round(records / (t1 - t0))}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="a representative subset (a few minutes)")
    p.add_argument("--json", nargs="?", const="-", metavar="FILE", help="also write the JSON (to FILE or stdout)")
    p.add_argument("--only", default="", help="run only scenarios whose name contains this")
    p.add_argument("--verbose", action="store_true", help="one line per scenario on stderr")
    p.add_argument("--save", metavar="DIR", help="write each scenario's capture, truth and alerts into DIR")
    p.add_argument("--no-speed", action="store_true", help="skip the 256-rank decode/detect timing")


def run(args: argparse.Namespace, settings: Settings) -> int:
    import river.anomaly  # noqa: F401  (warm the import: it is not part of detection time)

    save = Path(args.save) if args.save else None
    results = []
    for case in all_cases(args.quick):
        if args.only and args.only not in case.name:
            continue
        res = run_case(case, settings, save)
        results.append(res)
        if args.verbose:
            print(_line(res), file=sys.stderr, flush=True)
    summary = summarize(results, sum(r["healthy_s"] for r in results) / 3600.0)
    summary["by_family"] = {}
    for family in sorted({r["family"] for r in results}):
        mine = [r for r in results if r["family"] == family]
        part = summarize(mine, sum(r["healthy_s"] for r in mine) / 3600.0)
        summary["by_family"][family] = {"scenarios": len(mine), **part}
    records = sum(r["records"] for r in results)
    detect_s = sum(r["detect_s"] for r in results)
    summary.update(scenarios=len(results), largest_ranks=max((r["ranks"] for r in results), default=0),
                   records=records, detect_s=round(detect_s, 2),
                   records_per_s=round(records / detect_s) if detect_s else 0,
                   build_s=round(sum(r["build_s"] for r in results), 2),
                   refused_messages=sum(r["refused"] for r in results))
    if not args.no_speed and results:
        summary["core_speed"] = core_speed(settings)
    _print(summary)
    if args.json:
        summary["runs"] = results
        text = json.dumps(summary, indent=1)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n", encoding="utf-8")
    return 0


def _line(res: dict) -> str:
    missed = [f"{t['kind']}{t['ranks'] if t['kind'] != 'comm_hang' else ''}" for t in res["truths"] if not t["hit"]]
    delays = [f"{t['kind']} {t['delay_s']:.1f}s" for t in res["truths"] if t["hit"]]
    false = [f"{f['severity']} {f['kind']} {f['ranks'] or f['nodes'] or f['comm'][:6]} ({f['reason']})"
             for f in res["false"]]
    extra = ""
    if res["ends"]:
        e = res["ends"][0]
        extra = f"  end: {e['resolved']}/{e['open_at_end']} resolved, {e['events_after_resolve']} after"
    return (f"{res['name']:42s} {res['ranks']:4d}r  hit {delays or '-'}  missed {missed or '-'}  "
            f"false {len(false)}{': ' + '; '.join(false[:4]) if false else ''}"
            f"{'  advisories ' + str(len(res['advisories'])) if res['advisories'] else ''}"
            f"{'  routine first seen ' + str(len(res['routine_first'])) if res.get('routine_first') else ''}{extra}")


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.2f}" if isinstance(x, float) else str(x)


def _print(s: dict) -> None:
    print(f"commwatch bench detect: {s['scenarios']} scenarios, up to {s['largest_ranks']} ranks, "
          f"{s['healthy_job_hours']} healthy job-hours")
    print(f"{'kind':16s} {'exp':>4s} {'hit':>4s} {'false':>5s} {'P0/P1':>5s} {'prec':>5s} {'recall':>6s} "
          f"{'P01/h':>6s} {'p50 s':>6s} {'p95 s':>6s} {'p50 it':>6s} {'p95 it':>6s}")
    for k, r in s["kinds"].items():
        print(f"{k:16s} {r['expected']:4d} {r['hits']:4d} {r['false']:5d} {r['false_p0_p1']:5d} "
              f"{_fmt(r['precision']):>5s} {_fmt(r['recall']):>6s} {_fmt(r['false_p0_p1_per_healthy_job_hour']):>6s} "
              f"{_fmt(r['delay_s_p50']):>6s} {_fmt(r['delay_s_p95']):>6s} {_fmt(r['delay_it_p50']):>6s} "
              f"{_fmt(r['delay_it_p95']):>6s}")
    h = s["hang"]
    print(f"hangs: {h['exact_root']}/{h['injected']} exact root, {h['exactly_one_p0']} with exactly one P0, "
          f"{_fmt(h['p0_per_hang'])} P0 per hang; beyond threshold p50 {_fmt(h['over_threshold_s_p50'])} s, "
          f"p95 {_fmt(h['over_threshold_s_p95'])} s ({h['threshold_from_evidence']} thresholds from evidence), "
          f"{h['before_threshold']} before it; by probe {h['by_mode']}; comm_hang with one P0 "
          f"{h['comm_hang_exactly_one_p0']}")
    print("controls: " + ", ".join(f"{k} {v['jobs']} jobs {v['p0_p1']} P0/P1" for k, v in s["controls"].items())
          + f"; advisories {s['advisories']['total']} ({s['advisories']['in_unbalanced']} on unbalanced jobs; "
          f"unbalanced jobs with exactly one: {s['advisories']['unbalanced_with_one']})")
    for family, f in s["by_family"].items():
        slow, fh = f["kinds"].get("slow_rank", {}), f["hang"]
        print(f"  {family}: {f['scenarios']} scenarios; hang exact root {fh['exact_root']}/{fh['injected']} "
              f"({fh['exactly_one_p0']} with one P0); slow_rank precision {_fmt(slow.get('precision'))} recall "
              f"{_fmt(slow.get('recall'))}; P0/P1 on controls "
              f"{sum(c['p0_p1'] for c in f['controls'].values())}")
    e = s["job_ends"]
    if e["jobs"]:
        print(f"ended jobs: {e['jobs']}, open at end {e['open_at_end']}, resolved {e['resolved']} "
              f"(p95 {_fmt(e['resolve_delay_s_p95'])} s after), events after resolve {e['events_after_resolve']}, "
              f"opened after end {e['opened_after_end']}")
    ran = [(k, s["kinds"][k]) for k in ("slow_rank", "slow_rank>=50%") if k in s["kinds"]]
    if ran:
        print("slow_rank in iterations the job ran under the fault (its slowed steps, not healthy ones): "
              + "; ".join(f"{k} p50 {_fmt(r['delay_run_it_p50'])}, p95 {_fmt(r['delay_run_it_p95'])} "
                          f"({r['run_iters']} with iteration timings)" for k, r in ran))
    print("targets:")
    for t in s["targets"]:
        mark = "n/a " if t["value"] is None else "pass" if t["pass"] else "FAIL"
        print(f"  [{mark}] {t['target']}: {_fmt(t['value'])} (goal {t['goal']})")
    print(f"replay speed: {s['records_per_s']:,} call records/s (decode + detect, one core; {s['records']:,} records "
          f"in {s['detect_s']} s); building the scenarios took {s['build_s']} s; refused messages "
          f"{s['refused_messages']}")
    cs = s.get("core_speed")
    if cs:
        print(f"core only (256 ranks, {cs['records_per_message']} records/message): detect "
              f"{cs['core_records_per_s']:,} records/s; decoding the messages alone {cs['decode_records_per_s']:,} "
              f"records/s")
