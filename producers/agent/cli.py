"""`commwatch agent`: run the node agent until interrupted (or for --duration seconds)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from commwatch import discovery
from commwatch.settings import Settings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ring-dir", help="directory of the rings (default: COMMWATCH_RING_DIR)")
    p.add_argument("--job", help="job id for node samples when no ring names one (COMMWATCH_JOB_ID)")
    p.add_argument("--node", help="node name (default: COMMWATCH_NODE_NAME or the host name)")
    p.add_argument("--nvml-replay", metavar="FILE", help="replay NVML readings from a file (JSON Lines)")
    p.add_argument("--ib-root", help="InfiniBand sysfs root (default /sys/class/infiniband)")
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument("--no-metrics", action="store_true", help="do not serve Prometheus metrics")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from commwatch.producers.agent.agent import Agent
    from commwatch.producers.agent.hardware import open_nvml

    changes = {k: v for k, v in (("ring_dir", args.ring_dir), ("job_id", args.job), ("node_name", args.node))
               if v}
    settings = discovery.with_kafka(settings.replace(**changes), "commwatch agent")
    bootstrap = settings.kafka_bootstrap
    if not args.no_metrics:
        from prometheus_client import REGISTRY

        from commwatch.metrics import serve

        _server, port = serve(REGISTRY, settings.metrics_host, settings.metrics_port)
        print(f"commwatch agent: metrics on http://{settings.metrics_host}:{port}/metrics", flush=True)
    try:
        nvml = open_nvml(args.nvml_replay)
    except (OSError, ValueError) as exc:
        print(f"commwatch agent: --nvml-replay: {exc}", file=sys.stderr)
        return 2
    agent = Agent(settings, bootstrap, nvml=nvml, ib_root=args.ib_root)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        agent.run(stop, args.duration)
    except KeyboardInterrupt:
        stop.set()
        agent.close()
    print(f"commwatch agent: {agent.records} records, {agent.outbox.sent} messages sent, "
          f"{agent.outbox.dropped} dropped, {agent.lost} records lost in rings", flush=True)
    return 0
