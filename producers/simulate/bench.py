"""`commwatch bench simulate`: call records per second from the simulator into a capture file,
by the wall clock and per second of this process's CPU time (the fairer figure on a shared
machine)."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from commwatch.producers.simulate.emit import write_capture
from commwatch.producers.simulate.outbox import B64_IMPL
from commwatch.producers.simulate.simulation import Simulation
from commwatch.producers.simulate.spec import JobSpec
from commwatch.settings import Settings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--pp", type=int, default=16)
    p.add_argument("--dp", type=int, default=32)
    p.add_argument("--duration", type=float, default=5.0, help="seconds of simulated time")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace, settings: Settings) -> int:
    spec = JobSpec(job="bench", tp=args.tp, pp=args.pp, dp=args.dp, duration_s=args.duration)
    sim = Simulation(spec)
    with tempfile.TemporaryDirectory(dir=settings.data_dir if os.path.isdir(settings.data_dir) else None) as d:
        path = os.path.join(d, "bench.cwcap")
        t0, c0 = time.perf_counter(), time.process_time()
        messages = write_capture(sim, path)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        size = os.path.getsize(path)
    st = sim.stats
    result = {
        "ranks": spec.world_size, "tp": spec.tp, "pp": spec.pp, "dp": spec.dp, "sim_seconds": spec.duration_s,
        "records": st.records, "messages": messages, "capture_bytes": size, "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3), "records_per_s": round(st.records / seconds),
        "records_per_cpu_s": round(st.records / cpu), "base64": B64_IMPL,
        "sim_speed": round(spec.duration_s / seconds, 3),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>15}  {v}")
    return 0
