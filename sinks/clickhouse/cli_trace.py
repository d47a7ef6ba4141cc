"""`commwatch trace --job J [--from T] [--to T] --out trace.json`: open it in ui.perfetto.dev.

T is nanoseconds since the epoch or an ISO 8601 time (UTC unless it names a zone).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from commwatch.settings import Settings
from commwatch.sinks.clickhouse.cli_sql import query_client
from commwatch.sinks.clickhouse.trace import write_trace


def parse_time(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither nanoseconds nor an ISO 8601 time") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp() * 1_000_000) * 1000


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--job", required=True)
    p.add_argument("--from", dest="t_from", type=parse_time, help="first call start (default: the job's first)")
    p.add_argument("--to", dest="t_to", type=parse_time, help="last call start (default: the job's last)")
    p.add_argument("--out", default="trace.json", help="output file (default: %(default)s)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    client = query_client(settings)
    with open(args.out, "w", encoding="utf-8") as out:
        counts = write_trace(client, args.job, out, args.t_from, args.t_to)
    if not counts["calls"] and not counts["incidents"]:
        print(f"commwatch trace: no calls or incidents of job {args.job!r} in that window", file=sys.stderr)
    print(f"{args.out}: {counts['calls']} calls on {counts['ranks']} ranks, {counts['incidents']} incidents "
          "(open it in https://ui.perfetto.dev)")
    return 0
