"""A restarted worker re-finds what was open and says it under the same incident: a slow
rank's incident (its id carries the time it opened, unlike a hang's) is not opened twice.

Drill: a job with a 1.6x rank; kill -9 the worker once the rank is named, restart it, send
the rest. The restarted detector names the rank again from the job's data; its alert
ledger (read back from cw.alerts.v1) knows the incident open for that rank, and the worker
carries on with that incident's id: one open on the alerts topic, its updates and its
resolution under that id, no second incident for the rank.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from commwatch import topics
from commwatch.kafka import Sender, ensure_topics
from commwatch.producers.simulate import JobSpec, parse_fault, simulate
from commwatch.producers.simulate.spec import DEFAULT_START_NS
from commwatch.settings import Settings
from commwatch.streams.app import stream_topics
from test_worker_live import read_all, start_worker, wait_for

pytestmark = pytest.mark.integration


def _slow_open(job: str, rank: int):
    def pred(msg) -> bool:
        inc = json.loads(msg.value())
        return inc["job"] == job and inc["kind"] == "slow_rank" and inc["status"] == "open" \
            and inc["culprit_ranks"] == [rank]
    return pred


def test_a_restarted_worker_carries_on_with_the_open_slow_rank_incident(broker, tmp_path):
    s = Settings.load(env={}, kafka_bootstrap=broker.bootstrap, topic_prefix="k" + uuid.uuid4().hex[:8],
                      data_dir=str(tmp_path), kafka_partitions=2, metrics_port=0)
    ensure_topics(s, broker.bootstrap, stream_topics(s))
    sim = simulate(JobSpec(job="jslow", tp=2, pp=2, dp=2, duration_s=40, step_s=0.5),
                   [parse_fault("slow:rank=5,factor=1.6,at=6s")])
    msgs = list(sim.messages())
    half = DEFAULT_START_NS + 20 * 10**9
    sender = Sender(s, s.kafka_bootstrap)

    def send(part):
        for m in part:
            sender.send(s.topics.name(m.topic), m.key, m.value, timestamp_ms=m.ts_ns // 1_000_000)
        assert sender.flush(15) == 0

    first, _ = start_worker(s, tmp_path / "first.log")
    try:
        send([m for m in msgs if m.ts_ns < half])
        opened, _ = wait_for(s, topics.ALERTS, _slow_open("jslow", 5))
    finally:
        first.kill()
        first.wait(timeout=10)
    slow_id = json.loads(opened.value())["incident"]
    second, _ = start_worker(s, tmp_path / "second.log")
    try:
        send([m for m in msgs if m.ts_ns >= half])
        deadline = time.monotonic() + 60
        while f"incident {slow_id} is already open" not in (tmp_path / "second.log").read_text() \
                and time.monotonic() < deadline:
            assert second.poll() is None, (tmp_path / "second.log").read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(3)
        events = [json.loads(v) for v in read_all(s, topics.ALERTS)]
        slow = [(e["incident"], e["status"], e["culprit_ranks"]) for e in events if e["kind"] == "slow_rank"]
        assert {i for i, _, r in slow if r == [5]} == {slow_id}, slow
        assert [st for i, st, _ in slow].count("open") == 1, slow
    finally:
        second.terminate()
        second.wait(timeout=30)
