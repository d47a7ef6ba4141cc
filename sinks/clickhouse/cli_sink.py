"""`commwatch sink`: write the contract's topics into ClickHouse until interrupted.

Runs the schema migrations first, then consumes cw.alerts.v1, cw.calls.v1, cw.steps.v1,
cw.hw.v1, cw.topology.v1 and cw.internal.windows.v2 (see `commwatch.sinks.clickhouse.sink`).
Metrics (`SinkMetrics`) are served on `COMMWATCH_METRICS_HOST:COMMWATCH_METRICS_PORT`
(`--set metrics_port=0` picks a free port, `--no-metrics` serves none). With the embedded
ClickHouse, this process owns the database and serves the history endpoint
(`endpoint.py`, on `COMMWATCH_QUERY_PORT`) that the other commands query through.
"""

from __future__ import annotations

import argparse
import logging
import signal

from commwatch import discovery
from commwatch.embedded import clickhouse_client
from commwatch.metrics import SinkMetrics, serve
from commwatch.settings import Settings
from commwatch.sinks.clickhouse.endpoint import QueryEndpoint
from commwatch.sinks.clickhouse.schema import migrate
from commwatch.sinks.clickhouse.sink import Sink
from commwatch.sinks.clickhouse.writer import ClickHouseWriter
from commwatch.streams.liveness import Liveness

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--group", default="commwatch-sink", help="Kafka consumer group (default: %(default)s)")
    p.add_argument("--no-metrics", action="store_true", help="do not serve Prometheus metrics")


def run(args: argparse.Namespace, settings: Settings) -> int:
    settings = discovery.with_kafka(settings, "commwatch sink")
    metrics = SinkMetrics()
    liveness = Liveness(settings.liveness_stall_s, name="sink")
    if not args.no_metrics:  # before the migrations, so a probe sees the process alive while they wait
        _server, port = serve(metrics.registry, settings.metrics_host, settings.metrics_port, liveness.routes())
        print(f"commwatch sink: metrics on http://{settings.metrics_host}:{port}/metrics", flush=True)
    client = clickhouse_client(settings, own=True)
    migrate(client, settings)
    sink = Sink(settings, ClickHouseWriter(client, settings.clickhouse_database), group=args.group,
                metrics=metrics, liveness=liveness)
    signal.signal(signal.SIGTERM, lambda *_: sink.stop())
    signal.signal(signal.SIGINT, lambda *_: sink.stop())
    endpoint = db_path = None
    if settings.clickhouse_url.startswith("chdb://"):  # the others query the history through this process
        db_path = settings.clickhouse_url[len("chdb://"):]
        endpoint = QueryEndpoint(db_path, port=settings.query_port).start()
        discovery.write_owner(db_path, endpoint.url, endpoint.token, "commwatch sink")
        print(f"commwatch sink: history endpoint on {endpoint.url}", flush=True)
    log.info("sink writing to %s database %s", settings.clickhouse_url.split("@")[-1], settings.clickhouse_database)
    try:
        stats = sink.run()
    finally:
        if endpoint is not None:
            discovery.remove_owner(db_path)
            endpoint.stop()
    log.info("sink stopped: %s", stats)
    return 0
