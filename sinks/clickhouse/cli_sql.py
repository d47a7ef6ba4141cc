"""`commwatch sql "SELECT ..."`: run any query against the history and print the result.

Unqualified table names resolve in the commwatch database (`incidents`, `calls`, ...).
"""

from __future__ import annotations

import argparse
import sys

from commwatch.embedded import clickhouse_client
from commwatch.settings import Settings
from commwatch.sinks.clickhouse.output import FORMATS, render
from commwatch.sinks.clickhouse.schema import check_database_name


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", help="SQL; tables of the commwatch database need no prefix")
    p.add_argument("--format", choices=FORMATS, default="table")


def query_client(settings: Settings):
    """A client whose default database is the commwatch database (created if missing)."""
    db = check_database_name(settings.clickhouse_database)
    client = clickhouse_client(settings)
    client.command(f"CREATE DATABASE IF NOT EXISTS {db}")
    client.database = db
    return client


def run(args: argparse.Namespace, settings: Settings) -> int:
    client = query_client(settings)
    try:
        result = client.query(args.query)
    except Exception as exc:
        print(f"commwatch sql: {str(exc).strip().splitlines()[0]}", file=sys.stderr)
        return 1
    sys.stdout.write(render(result.column_names, result.result_rows, args.format))
    return 0
