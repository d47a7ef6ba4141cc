"""The worker's alert ledger follows cw.alerts.v1 on the real broker (`streams/ledger.py`)."""

import time

import pytest

from commwatch import messages
from commwatch.kafka import Sender
from commwatch.streams.ledger import AlertLedger

pytestmark = pytest.mark.integration


def _ev(iid, status="open", ranks=(5,), nodes=("node-00",), kind="slow_rank"):
    return {"incident": iid, "status": status, "job": "j", "kind": kind, "culprit_ranks": list(ranks),
            "culprit_nodes": list(nodes), "severity": "P2", "opened_ns": 100}


def test_a_following_ledger_learns_another_workers_incidents_and_keeps_its_own(kafka_settings):
    """Real broker: the ledger loads an empty alerts topic and follows it. Another worker's
    open for rank 5 (a job whose partitions this worker takes over) is adopted once it is on
    the topic; this process's own incident, resolved here, stays resolved when its earlier
    open is read back."""
    s = kafka_settings
    led = AlertLedger()
    assert led.load(s, s.kafka_bootstrap, follow=True) == 0
    try:
        assert led.admit(_ev("j-hang-c-7", kind="hang", ranks=(2,)))
        assert led.admit(_ev("j-hang-c-7", status="resolved", kind="hang", ranks=(2,)))
        sender = Sender(s, s.kafka_bootstrap)
        for ev in (_ev("j-slow_rank-5-100"), _ev("j-hang-c-7", kind="hang", ranks=(2,))):
            sender.send(s.topics.alerts, b"j", messages.dumps(ev))
        assert sender.flush(10) == 0
        deadline = time.monotonic() + 20
        while led.adopted(_ev("j-slow_rank-5-900", nodes=())) is None:
            assert time.monotonic() < deadline, "the other worker's incident never reached the ledger"
            time.sleep(0.1)
        assert led.adopted(_ev("j-slow_rank-5-900", nodes=()))["incident"] == "j-slow_rank-5-100"
        time.sleep(1.0)  # the own open, read back after it, came through the same partition
        assert led.last["j-hang-c-7"] == "resolved"
    finally:
        led.close()
