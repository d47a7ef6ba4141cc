"""A simulated run sent through the real broker and recorded back yields the same messages."""

from __future__ import annotations

from collections import Counter

import pytest

from commwatch import cli
from commwatch.capture import read_messages
from commwatch.kafka import Sender
from commwatch.producers.simulate import JobSpec, parse_fault, simulate
from commwatch.producers.simulate.emit import send_kafka

pytestmark = pytest.mark.integration


def test_simulate_to_broker_and_record_back(kafka_settings, tmp_path):
    sim = simulate(JobSpec(job="rt", tp=2, pp=2, dp=2, duration_s=3.0), [parse_fault("hang:rank=5,at=2s")])
    sent = list(sim.messages())
    res = send_kafka(iter(sent), Sender(kafka_settings, kafka_settings.kafka_bootstrap), kafka_settings.topics)
    assert res.sent == len(sent) and not res.failed and not res.queued_at_exit
    out = tmp_path / "rec.cwcap"
    rc = cli.main(["--kafka-bootstrap", kafka_settings.kafka_bootstrap, "--topic-prefix", kafka_settings.topic_prefix,
                   "record", "--out", str(out), "--idle-exit", "3", "--duration", "60"])
    assert rc == 0
    back = list(read_messages(out))
    assert Counter((m.topic, m.key, m.value) for m in back) == Counter((m.topic, m.key, m.value) for m in sent)
    # Kafka timestamps are the produce times, in ms
    assert Counter(m.ts_ns for m in back) == Counter(m.ts_ns // 1_000_000 * 1_000_000 for m in sent)


def test_simulate_cli_to_kafka(kafka_settings, tmp_path):
    truth = tmp_path / "t.json"
    rc = cli.main(["--kafka-bootstrap", kafka_settings.kafka_bootstrap, "--topic-prefix", kafka_settings.topic_prefix,
                   "simulate", "--ranks", "8", "--tp", "2", "--pp", "2", "--dp", "2", "--duration", "1",
                   "--kafka", "--truth", str(truth)])
    assert rc == 0 and truth.exists()
