"""The embedded broker serves Kafka clients (`commwatch up` leaving no orphan: test_stack.py)."""

from __future__ import annotations

import time

from commwatch.kafka import Sender, consumer, ensure_topics


def test_produce_consume_roundtrip(kafka_settings, broker):
    s = kafka_settings
    sender = Sender(s, broker.bootstrap)
    for i in range(50):
        sender.send(s.topics.steps, key="j1", value=f"m{i}".encode())
    assert sender.flush(10) == 0 and sender.failed == 0
    c = consumer(s, broker.bootstrap, group=f"{s.topic_prefix}-g")
    c.subscribe([s.topics.steps])
    got = []
    deadline = time.time() + 30
    while len(got) < 50 and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(50))


def test_topics_are_prefixed(kafka_settings, broker):
    from confluent_kafka.admin import AdminClient

    names = set(AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=5).topics)
    assert f"{kafka_settings.topic_prefix}.cw.calls.v1" in names
    assert f"{kafka_settings.topic_prefix}.cw.deadletter.v1" in names
