"""Kafka clients tuned for commwatch: producers that never block the caller, consumers
that join a group in seconds, and topic creation."""

from __future__ import annotations

import logging
from typing import Any, Iterable

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from commwatch.settings import Settings, SettingsError

log = logging.getLogger(__name__)


def producer(settings: Settings, bootstrap: str, **extra: Any) -> Producer:
    conf = settings.kafka_config(bootstrap)
    conf.update(
        {
            "linger.ms": 20,
            "compression.type": "lz4",
            # Java-compatible key hashing, as faust/aiokafka use: a `{job}` key lands on the
            # same partition number in every topic, so a worker's job agent sees all of a job.
            "partitioner": "murmur2_random",
            "queue.buffering.max.kbytes": 262144,
            "message.max.bytes": max(settings.max_message_bytes + 4096, 1_000_000),
            "log_level": 3,
        }
    )
    conf.update(extra)
    return Producer(conf)


def consumer(settings: Settings, bootstrap: str, group: str, **extra: Any) -> Consumer:
    conf = settings.kafka_config(bootstrap)
    conf.update(
        {
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": settings.kafka_session_timeout_ms,
            "heartbeat.interval.ms": max(500, settings.kafka_session_timeout_ms // 6),
            "topic.metadata.refresh.interval.ms": 2000,
            "fetch.max.bytes": max(settings.max_message_bytes * 2, 52428800),
            "max.partition.fetch.bytes": max(settings.max_message_bytes + 4096, 1048576),
            "log_level": 3,
        }
    )
    conf.update(extra)
    return Consumer(conf)


def ensure_topics(settings: Settings, bootstrap: str, names: Iterable[str] | None = None,
                  partitions: int | None = None, timeout_s: float = 15.0) -> list[str]:
    """Create the contract's topics (or `names`) if missing; returns those it created. A
    broker that does not answer in `timeout_s` raises `SettingsError` naming
    COMMWATCH_KAFKA_BOOTSTRAP."""
    names = list(names) if names is not None else settings.topics.all()
    admin = AdminClient({**settings.kafka_config(bootstrap), "log_level": 0})  # failures are raised, not logged
    try:
        existing = set(admin.list_topics(timeout=timeout_s).topics)
    except KafkaException as exc:
        raise SettingsError(
            f"COMMWATCH_KAFKA_BOOTSTRAP: no Kafka broker answers at {bootstrap} (waited {timeout_s:g} s: "
            f"{exc.args[0].str() if exc.args and hasattr(exc.args[0], 'str') else exc}); is the stack "
            "(`commwatch up`) or your Kafka running, and is the address right?") from None
    wanted = [
        NewTopic(n, num_partitions=partitions or settings.kafka_partitions,
                 replication_factor=settings.kafka_replication)
        for n in names
        if n not in existing
    ]
    if not wanted:
        return []
    made = []
    for name, fut in admin.create_topics(wanted, request_timeout=timeout_s).items():
        try:
            fut.result(timeout=timeout_s)
            made.append(name)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    log.debug("created topics %s", made)
    return made


def partition_counts(settings: Settings, bootstrap: str, names: Iterable[str], timeout_s: float = 15.0) -> dict[str, int]:
    """How many partitions each of the topics `names` has (those that exist)."""
    admin = AdminClient({**settings.kafka_config(bootstrap), "log_level": 0})
    meta = admin.list_topics(timeout=timeout_s).topics
    return {n: len(meta[n].partitions) for n in names if n in meta and meta[n].error is None}


class Sender:
    """Produce without ever blocking: a full local queue drops the message and counts it."""

    def __init__(self, settings: Settings, bootstrap: str, **extra: Any):
        self.producer = producer(settings, bootstrap, **extra)
        self.sent = 0
        self.dropped = 0
        self.failed = 0

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.failed += 1

    def send(self, topic: str, key: str | bytes | None, value: bytes,
             headers: list[tuple[str, bytes]] | None = None, timestamp_ms: int | None = None) -> bool:
        try:
            kw: dict[str, Any] = {"on_delivery": self._delivered}
            if headers:
                kw["headers"] = headers
            if timestamp_ms is not None:
                kw["timestamp"] = int(timestamp_ms)
            self.producer.produce(topic, value=value, key=key, **kw)
        except BufferError:
            self.dropped += 1
            self.producer.poll(0)
            return False
        self.sent += 1
        self.producer.poll(0)
        return True

    def flush(self, timeout_s: float = 10.0) -> int:
        """Wait for delivery; returns messages still queued."""
        return self.producer.flush(timeout_s)
