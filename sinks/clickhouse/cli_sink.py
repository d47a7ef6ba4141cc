"""`commwatch sink`: write the contract's topics into ClickHouse until interrupted.

Runs the schema migrations first, then consumes cw.alerts.v1, cw.calls.v1, cw.steps.v1,
cw.hw.v1, cw.topology.v1 and cw.internal.windows.v1 (see `commwatch.sinks.clickhouse.sink`).
"""

from __future__ import annotations

import argparse
import logging
import signal

from commwatch.embedded import clickhouse_client
from commwatch.settings import Settings
from commwatch.sinks.clickhouse.schema import migrate
from commwatch.sinks.clickhouse.sink import Sink
from commwatch.sinks.clickhouse.writer import ClickHouseWriter

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--group", default="commwatch-sink", help="Kafka consumer group (default: %(default)s)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    client = clickhouse_client(settings)
    migrate(client, settings)
    sink = Sink(settings, ClickHouseWriter(client, settings.clickhouse_database), group=args.group)
    signal.signal(signal.SIGTERM, lambda *_: sink.stop())
    signal.signal(signal.SIGINT, lambda *_: sink.stop())
    log.info("sink writing to %s database %s", settings.clickhouse_url.split("@")[-1], settings.clickhouse_database)
    stats = sink.run()
    log.info("sink stopped: %s", stats)
    return 0
