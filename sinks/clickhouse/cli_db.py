"""`commwatch db migrate`: create or upgrade the ClickHouse schema."""

from __future__ import annotations

import argparse

from commwatch.embedded import clickhouse_client
from commwatch.settings import Settings
from commwatch.sinks.clickhouse.schema import MIGRATIONS, migrate


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("migrate", help="apply pending schema migrations (idempotent)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    client = clickhouse_client(settings)
    applied = migrate(client, settings)
    db = settings.clickhouse_database
    if applied:
        print(f"{db}: applied migrations {', '.join(map(str, applied))}")
    else:
        print(f"{db}: up to date (version {MIGRATIONS[-1].version})")
    return 0
