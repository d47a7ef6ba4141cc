"""`commwatch demo`: the whole pipeline on the embedded default, in about two minutes.

Runs the stack of `commwatch up` (`commwatch.stack`: the embedded broker unless
`COMMWATCH_KAFKA_BOOTSTRAP` names one, live stream workers, the ClickHouse sink, the live
page when installed; no node agent) and a simulated 3D-parallel job in real time with a
schedule of faults: a slow rank from 20 %
of the run, then a hang of another rank at 60 %. It redraws the job's health every second
(ranks, progress per communicator kind, open incidents and their culprits) and ends with
the injected faults against the incidents detected. Exit status 0 when every expected
fault was detected with the right culprit, 1 otherwise.

Child processes log to `<data_dir>/demo/*.log`; all of them are stopped on exit and on
Ctrl-C. While it runs, `commwatch status` and the history commands reach it through the
data directory like any stack.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from commwatch import topics
from commwatch.settings import Settings

log = logging.getLogger(__name__)

DRAIN_S = 4.0  # after the job ends: let the last alerts arrive
SLOW_AT = 0.2
HANG_AT = 0.6
SLOW_FACTOR = 1.6


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", type=float, default=120.0, help="whole demo, seconds (default: %(default)s)")
    p.add_argument("--ranks", type=int, default=64, help="world size, = tp x pp x dp (default: %(default)s)")
    p.add_argument("--tp", type=int, default=4)
    p.add_argument("--pp", type=int, default=4)
    p.add_argument("--dp", type=int, default=4)
    p.add_argument("--workers", type=int, default=1, help="live stream workers (default: %(default)s)")
    p.add_argument("--no-sink", action="store_true", help="do not write incidents to ClickHouse")
    p.add_argument("--job", help="job id (default: demo-HHMMSS)")


def fault_schedule(job_s: float, world: int) -> list[str]:
    """A slow rank, then a hang of another rank; times scale with the job's length."""
    slow_rank = (world * 5 // 16) % world
    hang_rank = (world * 11 // 16 + 1) % world
    if hang_rank == slow_rank:
        hang_rank = (slow_rank + 1) % world
    return [f"slow:rank={slow_rank},factor={SLOW_FACTOR},at={job_s * SLOW_AT:.1f}s",
            f"hang:rank={hang_rank},at={job_s * HANG_AT:.1f}s"]


def match(truth: list[dict], incidents: list[dict]) -> list[dict]:
    """For each expected fault, the first incident of its kind naming its rank."""
    rows = []
    for t in truth:
        if not t.get("expect_incident", True):
            continue
        same_kind = [i for i in incidents if i["kind"] == t["kind"]]
        right = [i for i in same_kind if set(t["ranks"]) & set(i.get("culprit_ranks") or [])]
        hit = min(right or same_kind, key=lambda i: i["opened_ns"], default=None)
        rows.append({
            "fault": t["kind"], "ranks": t["ranks"], "at_ns": t["at_ns"],
            "incident": hit, "culprit_ok": bool(right),
            "delay_s": (hit["opened_ns"] - t["at_ns"]) / 1e9 if hit else None,
        })
    return rows


def summary_lines(job: str, rows: list[dict], incidents: list[dict]) -> list[str]:
    lines = [f"summary of job {job}: injected fault -> detected incident",
             f"  {'fault':<10} {'rank':>5}  {'detected':<10} {'culprit':<10} {'delay s':>8}  verdict"]
    for r in rows:
        inc = r["incident"]
        culprit = ",".join(map(str, inc.get("culprit_ranks") or [])) if inc else "-"
        delay = f"{r['delay_s']:8.1f}" if r["delay_s"] is not None else f"{'-':>8}"
        verdict = "OK" if r["culprit_ok"] else ("WRONG CULPRIT" if inc else "MISSED")
        lines.append(f"  {r['fault']:<10} {','.join(map(str, r['ranks'])):>5}  "
                     f"{inc['kind'] if inc else '-':<10} {culprit:<10} {delay}  {verdict}")
    used = {r["incident"]["incident"] for r in rows if r["incident"]}
    extra = [i for i in incidents if i["incident"] not in used]
    for i in extra:
        culprit = ",".join(map(str, i.get("culprit_ranks") or [])) or "-"
        lines.append(f"  {'(none)':<10} {'':>5}  {i['kind']:<10} {culprit:<10} {'':>8}  extra: {i.get('summary', '')}")
    return lines


def run(args: argparse.Namespace, settings: Settings) -> int:
    from commwatch.kafka import consumer
    from commwatch.producers.simulate.layout import Layout
    from commwatch.stack import Stack, StackFailed, child_env
    from commwatch.streams.health_view import HealthView

    started = time.monotonic()
    if args.tp * args.pp * args.dp != args.ranks:
        print(f"commwatch demo: --ranks {args.ranks} != --tp {args.tp} x --pp {args.pp} x --dp {args.dp}",
              file=sys.stderr)
        return 2
    job = args.job or time.strftime("demo-%H%M%S")
    log_dir = Path(settings.data_dir).absolute() / "demo"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    components = ("worker", "page") if args.no_sink else ("worker", "sink", "page")
    stack = Stack(settings, components=components, workers=args.workers, log_dir=log_dir, command="commwatch demo")
    try:
        stack.start()
        settings = stack.settings
        print(f"commwatch demo: job {job}, {args.ranks} ranks (tp {args.tp} x pp {args.pp} x dp {args.dp}); "
              f"broker {settings.kafka_bootstrap}; logs in {log_dir}", flush=True)
        if "page" in stack.ports:
            print(f"live page: {stack.url('page')}", flush=True)

        watch = consumer(settings, settings.kafka_bootstrap, group=f"commwatch-demo-{job}")
        watch.subscribe([settings.topics.alerts, settings.topics.progress, settings.topics.topology])
        sink = "sink" in stack.ports
        job_s = max(10.0, args.duration - (time.monotonic() - started) - DRAIN_S - (8.0 if sink else 2.0))
        faults = fault_schedule(job_s, args.ranks)
        truth_file = log_dir / f"{job}.truth.json"
        sim_argv = ["simulate", "--kafka", "--realtime", "--job", job, "--ranks", str(args.ranks),
                    "--tp", str(args.tp), "--pp", str(args.pp), "--dp", str(args.dp),
                    "--duration", f"{job_s:.1f}", "--truth", str(truth_file)]
        for f in faults:
            sim_argv += ["--fault", f]
        sim = stack.supervisor.start("simulate", sim_argv, child_env(settings), restart=False).proc
        print(f"commwatch demo: simulating {job_s:.0f} s with faults {', '.join(faults)}", flush=True)

        layout = Layout(job, args.tp, args.pp, args.dp)
        view = HealthView(job, {c.hex: c.name for c in layout.comms})
        incidents = follow(watch, settings, view, sim, stack, job_s + DRAIN_S)
        watch.close()
        if sim.poll() != 0:
            print(f"commwatch demo: the simulator failed (see {log_dir / 'simulate.log'})", file=sys.stderr)
            return 1
        truth = json.loads(truth_file.read_text())["faults"]
        rows = match(truth, incidents)
        print("\n".join(summary_lines(job, rows, incidents)))
        stack.stop()  # the workers first, then the sink, which writes what they published
        if sink:
            print(f"incidents stored in ClickHouse; see them with:  commwatch incidents --job {job}")
        print(f"commwatch demo: done in {time.monotonic() - started:.0f} s")
        return 0 if rows and all(r["culprit_ok"] for r in rows) else 1
    except StackFailed as exc:
        print(f"commwatch demo: FAILED: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ncommwatch demo: interrupted", file=sys.stderr)
        return 130
    finally:
        stack.stop()


def follow(watch: Any, settings: Settings, view: Any, sim: subprocess.Popen, stack: Any,
           max_s: float) -> list[dict]:
    """Consume alerts/progress/topology, redraw the view every second, until the job ends
    (plus a drain), or `max_s`. Returns the latest state of every incident of the job."""
    tty = sys.stdout.isatty()
    end = time.monotonic() + max_s
    ended_at = None
    next_draw = 0.0
    draws = 0
    while time.monotonic() < end:
        if ended_at is None and sim.poll() is not None:
            ended_at = time.monotonic()
            end = min(end, ended_at + DRAIN_S)
        for msg in watch.consume(500, 0.2):
            if msg.error():
                continue
            try:
                value = json.loads(msg.value())
            except ValueError:
                continue
            base = settings.topics.base(msg.topic())
            if isinstance(value, dict) and view.feed(base, value) and not tty and base == topics.ALERTS:
                print(view.incident_line(value), flush=True)
        now = time.monotonic()
        if now >= next_draw:
            next_draw = now + 1.0
            if tty:
                sys.stdout.write("\x1b[H\x1b[J" + view.render() + "\n")
                sys.stdout.flush()
            elif draws % 10 == 0:
                print(view.render().splitlines()[0], flush=True)
            draws += 1
        stack.check()  # restarts a component that died; raises StackFailed past the bound
    if tty:
        print(view.render())
    return [i for i in view.incidents.values()]
