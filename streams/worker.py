"""`commwatch worker`: one live stream worker process (the faust app of `streams/app.py`).

Start as many as the input topics have partitions; they share the work through the
consumer group. It refuses to start where the topics it reads together differ in their
partition counts (`streams/app.py` `check_partitions`): a comm's calls and heartbeats, or a
job's topics, would be split between workers. Metrics are served on
`COMMWATCH_METRICS_HOST:COMMWATCH_METRICS_PORT` (`--set metrics_port=0` picks a free port),
with `/livez` and `/readyz` beside them (`streams/liveness.py`). SIGTERM or Ctrl-C stops it
cleanly.

A broker that restarts empty (the embedded one keeps everything in memory) is survived
without a restart: every few seconds the worker checks that its topics exist and
re-creates those that are gone, and its consumer re-joins the group by itself.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from commwatch import collector, discovery
from commwatch.kafka import ensure_topics
from commwatch.metrics import StreamMetrics, serve
from commwatch.settings import Settings
from commwatch.streams.liveness import Liveness, TopicKeeper

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-metrics", action="store_true", help="do not serve Prometheus metrics")


def run(args: argparse.Namespace, settings: Settings) -> int:
    settings = discovery.with_kafka(settings, "commwatch worker")
    import faust

    from commwatch.streams.app import Pipeline, check_partitions, create_app, stream_topics
    from commwatch.streams.ledger import AlertLedger

    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    ensure_topics(settings, settings.kafka_bootstrap, stream_topics(settings))
    check_partitions(settings)
    metrics = StreamMetrics()
    liveness = Liveness(settings.liveness_stall_s, name="worker")
    keeper = TopicKeeper(lambda: ensure_topics(settings, settings.kafka_bootstrap, stream_topics(settings)))
    if not args.no_metrics:
        _server, port = serve(metrics.registry, settings.metrics_host, settings.metrics_port, liveness.routes())
        print(f"commwatch worker: metrics on http://{settings.metrics_host}:{port}/metrics "
              f"(liveness /livez, readiness /readyz)", flush=True)
    ledger = AlertLedger()
    known = ledger.load(settings, settings.kafka_bootstrap, follow=True)
    log.info("alert ledger: %d events read, %d incidents open", known, ledger.open_count())
    pipeline = Pipeline(settings, metrics, ledger)
    app = create_app(settings, pipeline, liveness, keeper)
    collector.settle()
    worker = faust.Worker(app, loglevel=settings.log_level, quiet=True, redirect_stdouts=False)
    worker.spinner = None
    metrics.up.set(1)
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        metrics.up.set(0)
        ledger.close()
    return 0
