"""`commwatch query NAME [--job J] [--days N]`: the common questions over the history."""

from __future__ import annotations

import argparse
import sys

from commwatch.settings import Settings
from commwatch.sinks.clickhouse.cli_sql import query_client
from commwatch.sinks.clickhouse.output import FORMATS, render
from commwatch.sinks.clickhouse.queries import DEFAULTS, NAMED


def add_arguments(p: argparse.ArgumentParser) -> None:
    lines = "\n".join(f"  {n:18} {q.description}" for n, q in NAMED.items())
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = "queries:\n" + lines
    p.add_argument("name", choices=sorted(NAMED), metavar="NAME", help="one of the queries listed below")
    p.add_argument("--job", help="job id (queries about one job)")
    p.add_argument("--days", type=int, default=DEFAULTS["days"], help="look-back in days (default: %(default)s)")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("--show-sql", action="store_true", help="print the SQL instead of running it")


def run_named(settings: Settings, name: str, job: str | None, days: int, fmt: str) -> int:
    q = NAMED[name]
    if "job" in q.params and not job:
        print(f"commwatch query {name}: --job is required", file=sys.stderr)
        return 2
    params = {"job": job, "days": days}
    result = query_client(settings).query(q.sql, parameters={k: params[k] for k in q.params})
    sys.stdout.write(render(result.column_names, result.result_rows, fmt))
    return 0


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.show_sql:
        print(NAMED[args.name].sql)
        return 0
    return run_named(settings, args.name, args.job, args.days, args.format)
