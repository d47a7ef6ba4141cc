"""`commwatch notify`: consume cw.alerts.v1 and deliver to the configured destinations.

Destinations come from settings (COMMWATCH_NOTIFY_WEBHOOK_URL, _SLACK_URL, _FEISHU_URL,
_ALERTMANAGER_URL); routing from NOTIFY_MIN_SEVERITY, NOTIFY_KINDS, NOTIFY_GROUP_S and
NOTIFY_REPEAT_P0_S. Offsets are committed only when no event waits in a grouping window
and every notification handed over was delivered: a crash re-delivers (at least once)
rather than loses. At start the notifier re-reads the alerts topic up to the group's
committed offsets to learn what it had already notified, so a restart neither repeats
those notifications nor stops refreshing the incidents still open in Alertmanager.
Metrics (`NotifyMetrics`) are served on `COMMWATCH_METRICS_HOST:COMMWATCH_METRICS_PORT`
(`--set metrics_port=0` picks a free port, `--no-metrics` serves none).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from commwatch import discovery, kafka, topics
from commwatch.capture import Message
from commwatch.decode import decode_message
from commwatch.metrics import NotifyMetrics
from commwatch.metrics import serve as serve_metrics
from commwatch.settings import Settings, SettingsError
from commwatch.sinks.notify.delivery import Dispatcher
from commwatch.sinks.notify.destinations import from_settings
from commwatch.sinks.notify.routing import Router
from commwatch.streams.liveness import Liveness
from commwatch.wire import WireError

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--group", default="commwatch-notify", help="Kafka consumer group (default: %(default)s)")
    p.add_argument("--no-metrics", action="store_true", help="do not serve Prometheus metrics")


def serve(settings: Settings, stop: threading.Event, group: str = "commwatch-notify",
          dispatcher: Dispatcher | None = None, metrics: NotifyMetrics | None = None,
          liveness: Liveness | None = None) -> Router:
    """Run until `stop` is set; returns the router (its counters) at exit. Everything is
    counted in `dispatcher.metrics` (built on `metrics` when no dispatcher is given)."""
    if not settings.kafka_bootstrap:
        raise SettingsError("COMMWATCH_KAFKA_BOOTSTRAP: `commwatch notify` needs a broker")
    destinations = from_settings(settings)
    if dispatcher is None and not destinations:
        raise SettingsError("COMMWATCH_NOTIFY_WEBHOOK_URL: no destination configured "
                            "(set a webhook, Slack, Feishu or Alertmanager URL)")
    dispatcher = dispatcher or Dispatcher(destinations, metrics=metrics)
    metrics = dispatcher.metrics
    router = Router.from_settings(settings)
    known = rebuild(settings, group, router, time.monotonic())
    log.info("notifier state rebuilt: %d incident events already notified, %d incidents open", known,
             sum(1 for t in router.tracked.values() if not t.state[0]))
    consumer = kafka.consumer(settings, settings.kafka_bootstrap, group)
    consumer.subscribe([settings.topics.alerts])
    dirty = False
    try:
        while not stop.is_set():
            if liveness is not None:
                liveness.polled(consumer)
            got = consumer.consume(num_messages=500, timeout=0.1)
            now = time.monotonic()
            for m in got:
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        log.warning("consumer error: %s", m.error())
                    continue
                key = m.key().decode("utf-8", "replace") if m.key() else None
                try:
                    inc = decode_message(Message(topics.ALERTS, key, 0, m.value() or b""))
                except WireError as exc:
                    log.warning("skipping malformed incident at %s[%d]@%d: %s",
                                m.topic(), m.partition(), m.offset(), exc)
                    metrics.malformed.labels(reason=exc.reason).inc()
                    continue
                if not router.offer(inc, now):
                    metrics.suppressed.inc()
            for n in router.due(now):
                dispatcher.send(n)
            dirty = dirty or bool(got)
            # safe to commit once nothing waits in a grouping window and every notification
            # handed to the couriers was delivered (or given up): a crash then re-delivers
            # the events after the commit, and loses none
            if dirty and not router.pending and dispatcher.idle():
                consumer.commit(asynchronous=False)
                dirty = False
    finally:
        for n in router.due(float("inf"), repeats=False):
            dispatcher.send(n)
        dispatcher.drain()
        dispatcher.close()
        consumer.close()
    return router


def rebuild(settings: Settings, group: str, router: Router, now: float, timeout_s: float = 30.0) -> int:
    """Teach `router` every incident event the group had committed (notified before a
    restart), so that open incidents keep being refreshed and nothing is sent twice; returns
    the events read."""
    topic = settings.topics.alerts
    reader = kafka.consumer(settings, settings.kafka_bootstrap, group, **{"enable.partition.eof": True})
    try:
        meta = reader.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None:
            return 0
        committed = reader.committed([TopicPartition(topic, p) for p in meta.partitions], timeout=timeout_s)
        ends = {tp.partition: tp.offset for tp in committed if tp.offset > 0}
        if not ends:
            return 0
        reader.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        count, deadline = 0, time.monotonic() + timeout_s
        while ends and time.monotonic() < deadline:
            for m in reader.consume(num_messages=500, timeout=0.5):
                p = m.partition()
                if p not in ends:
                    continue
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        del ends[p]
                    continue
                if m.offset() >= ends[p]:
                    del ends[p]
                    continue
                key = m.key().decode("utf-8", "replace") if m.key() else None
                try:
                    router.remember(decode_message(Message(topics.ALERTS, key, 0, m.value() or b"")), now)
                    count += 1
                except WireError:
                    pass
        if ends:
            log.warning("notifier state: partitions %s not read to their committed offsets", sorted(ends))
        return count
    finally:
        reader.close()


def run(args: argparse.Namespace, settings: Settings) -> int:
    settings = discovery.with_kafka(settings, "commwatch notify")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    names = ", ".join(d.name for d in from_settings(settings)) or "none"
    print(f"commwatch notify: delivering {settings.topics.alerts} to {names}", file=sys.stderr)
    metrics = NotifyMetrics()
    liveness = Liveness(settings.liveness_stall_s, name="notify")
    if not args.no_metrics:
        _server, port = serve_metrics(metrics.registry, settings.metrics_host, settings.metrics_port,
                                      liveness.routes())
        print(f"commwatch notify: metrics on http://{settings.metrics_host}:{port}/metrics", file=sys.stderr)
    serve(settings, stop, args.group, metrics=metrics, liveness=liveness)
    return 0
