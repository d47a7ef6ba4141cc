"""`commwatch bench agent`: the node agent's CPU and memory for an 8-GPU node.

Eight writer processes (one per rank) write call records into their rings at the given
rate (an entry and a completion record per call, spread over three communicators); a
real `commwatch agent` process tails them and publishes to a broker (the embedded one
unless COMMWATCH_KAFKA_BOOTSTRAP is set). The agent's CPU time and peak RSS are read
from outside with psutil.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time

import psutil

from commwatch.settings import Settings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--rate", type=float, default=500.0, help="calls per second per rank")
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _writer(ring_dir: str, job: str, rank: int, rate: float, seconds: float) -> None:
    from commwatch import ring, wire

    w = ring.RingWriter(ring.ring_path(ring_dir, job, rank), rank, job)
    comms = (0x1111, 0x2222 + rank // 2, 0x3333 + rank % 2)  # world, a pair, a stripe
    seqs = [0, 0, 0]
    n = 0
    t_end = time.monotonic() + seconds
    tick = 0.01
    per_tick = rate * tick
    owed = 0.0
    while time.monotonic() < t_end:
        owed += per_tick
        while owed >= 1:
            owed -= 1
            k = n % 3
            n += 1
            c = comms[k]
            s = seqs[k]
            seqs[k] += 1
            now = time.time_ns()
            w.write(wire.KIND_CALL, wire.OP_ALLREDUCE, 0, c, s, now, 0, 1 << 20, rank % 4, -1, 8, 0, now)
            w.write(wire.KIND_CALL, wire.OP_ALLREDUCE, 1, c, s, now, now + 1000, 1 << 20, rank % 4, -1, 8, 0)
        time.sleep(tick)
    w.close(unlink=False)


def run(args: argparse.Namespace, settings: Settings) -> int:
    broker = None
    bootstrap = settings.kafka_bootstrap
    if not bootstrap:
        from commwatch.embedded import EmbeddedBroker

        broker = EmbeddedBroker().start()
        bootstrap = broker.bootstrap
    with tempfile.TemporaryDirectory() as d:
        job = "bench-agent"
        ctx = mp.get_context("spawn")
        writers = [ctx.Process(target=_writer, args=(d, job, r, args.rate, args.seconds + 3))
                   for r in range(args.ranks)]
        for p in writers:
            p.start()
        env = {k: v for k, v in os.environ.items() if not k.startswith("COMMWATCH_")}
        env.update({"COMMWATCH_KAFKA_BOOTSTRAP": bootstrap, "COMMWATCH_RING_DIR": d,
                    "COMMWATCH_TOPIC_PREFIX": "bench" + str(os.getpid()), "COMMWATCH_LOG_LEVEL": "WARNING"})
        agent = subprocess.Popen([sys.executable, "-m", "commwatch.cli", "agent", "--no-metrics", "--duration",
                                  str(args.seconds + 2)], env=env, stdout=subprocess.PIPE, text=True)
        proc = psutil.Process(agent.pid)
        time.sleep(2.0)  # start-up (imports, broker connection) is not the steady state
        c0 = proc.cpu_times()
        t0 = time.monotonic()
        rss = 0
        while time.monotonic() - t0 < args.seconds and agent.poll() is None:
            rss = max(rss, proc.memory_info().rss)
            time.sleep(0.25)
        c1 = proc.cpu_times()
        elapsed = time.monotonic() - t0
        out, _ = agent.communicate(timeout=60)
        for p in writers:
            p.join(30)
    if broker is not None:
        broker.stop()
    cpu = (c1.user + c1.system - c0.user - c0.system) / elapsed
    result = {"ranks": args.ranks, "calls_per_s_per_rank": args.rate,
              "records_per_s": int(args.ranks * args.rate * 2), "seconds": round(elapsed, 1),
              "agent_cpu_cores": round(cpu, 3), "agent_rss_mb": round(rss / 2**20, 1),
              "agent_summary": out.strip().splitlines()[-1] if out.strip() else "",
              "goal": "<= 1 core, <= 1024 MB"}
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:22} {v}")
    return 0
