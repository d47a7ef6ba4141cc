"""`commwatch bench NAME`: benchmarks that print numbers (a table, then JSON with --json)."""

from __future__ import annotations

import argparse
import importlib

from commwatch.settings import Settings

BENCHES: dict[str, tuple[str, str]] = {
    "simulate": ("commwatch.producers.simulate.bench", "simulator call records/s into a capture file"),
    "detect": ("commwatch.streams.bench_detect", "detection quality and delay over simulated scenarios"),
    "throughput": ("commwatch.streams.bench_throughput", "detector and live pipeline throughput, memory"),
    "sink": ("commwatch.sinks.clickhouse.bench", "rows/s into ClickHouse"),
    "hook": ("commwatch.producers.hook.bench", "added cost per wrapped torch.distributed call"),
    "agent": ("commwatch.producers.agent.bench", "node agent CPU and memory at a given call rate"),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="bench", metavar="NAME", required=True)
    from commwatch import cli

    chosen = next((a for a in cli.ARGV if a in BENCHES), None)
    for name, (module, help_text) in BENCHES.items():
        bp = sub.add_parser(name, help=help_text)
        if name == chosen:
            mod = importlib.import_module(module)
            mod.add_arguments(bp)
            bp.set_defaults(_bench=mod.run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    return int(args._bench(args, settings) or 0)
