"""`commwatch notify`: consume cw.alerts.v1 and deliver to the configured destinations.

Destinations come from settings (COMMWATCH_NOTIFY_WEBHOOK_URL, _SLACK_URL, _FEISHU_URL,
_ALERTMANAGER_URL); routing from NOTIFY_MIN_SEVERITY, NOTIFY_KINDS, NOTIFY_GROUP_S and
NOTIFY_REPEAT_P0_S. Offsets are committed once events are handed to the couriers.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time

from confluent_kafka import KafkaError

from commwatch import kafka, topics
from commwatch.capture import Message
from commwatch.decode import decode_message
from commwatch.settings import Settings, SettingsError
from commwatch.sinks.notify.delivery import Dispatcher
from commwatch.sinks.notify.destinations import from_settings
from commwatch.sinks.notify.routing import Router
from commwatch.wire import WireError

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--group", default="commwatch-notify", help="Kafka consumer group (default: %(default)s)")


def serve(settings: Settings, stop: threading.Event, group: str = "commwatch-notify",
          dispatcher: Dispatcher | None = None) -> Router:
    """Run until `stop` is set; returns the router (its counters) at exit."""
    if not settings.kafka_bootstrap:
        raise SettingsError("COMMWATCH_KAFKA_BOOTSTRAP: `commwatch notify` needs a broker")
    destinations = from_settings(settings)
    if dispatcher is None and not destinations:
        raise SettingsError("COMMWATCH_NOTIFY_WEBHOOK_URL: no destination configured "
                            "(set a webhook, Slack, Feishu or Alertmanager URL)")
    dispatcher = dispatcher or Dispatcher(destinations)
    router = Router.from_settings(settings)
    consumer = kafka.consumer(settings, settings.kafka_bootstrap, group)
    consumer.subscribe([settings.topics.alerts])
    try:
        while not stop.is_set():
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
                    continue
                router.offer(inc, now)
            for n in router.due(now):
                dispatcher.send(n)
            if got:
                consumer.commit(asynchronous=True)
    finally:
        for n in router.due(float("inf"), repeats=False):
            dispatcher.send(n)
        dispatcher.drain()
        dispatcher.close()
        consumer.close()
    return router


def run(args: argparse.Namespace, settings: Settings) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    names = ", ".join(d.name for d in from_settings(settings)) or "none"
    print(f"commwatch notify: delivering {settings.topics.alerts} to {names}", file=sys.stderr)
    serve(settings, stop, args.group)
    return 0
