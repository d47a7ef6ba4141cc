"""`commwatch incidents --job J`: what went wrong in a job, from ClickHouse."""

from __future__ import annotations

import argparse

from commwatch.settings import Settings
from commwatch.sinks.clickhouse.cli_query import run_named
from commwatch.sinks.clickhouse.output import FORMATS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--job", required=True, help="job id")
    p.add_argument("--format", choices=FORMATS, default="table")


def run(args: argparse.Namespace, settings: Settings) -> int:
    return run_named(settings, "incidents", args.job, 0, args.format)
