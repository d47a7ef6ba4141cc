"""The Kafka -> ClickHouse sink on the real broker and real chdb: restart mid-stream,
ClickHouse failing for a while, malformed messages."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from commwatch import kafka, messages, topics, wire
from commwatch.sinks.clickhouse.schema import migrate
from commwatch.sinks.clickhouse.sink import Sink
from commwatch.sinks.clickhouse.writer import ClickHouseWriter

pytestmark = pytest.mark.integration
COMM = 0xABCDEF


def incident_events(job: str, n: int) -> list[dict]:
    """Each incident opens, updates, resolves: 3 events, the last one must win."""
    now = time.time_ns()
    out = []
    for i in range(n):
        for step, status in enumerate(("open", "update", "resolved")):
            out.append({"v": 1, "job": job, "incident": f"{job}-hang-{i}", "kind": "hang", "severity": "P0",
                        "status": status, "ts_ns": now + i * 1000 + step * 10**9, "opened_ns": now + i * 1000,
                        "culprit_ranks": [i % 8], "culprit_nodes": [f"n{i % 2}"], "comm": f"{COMM:016x}",
                        "summary": "s", "evidence": {}})
    return out


def produce(settings, items):
    sender = kafka.Sender(settings, settings.kafka_bootstrap)
    for topic, key, value in items:
        assert sender.send(settings.topics.name(topic), key, value)
    assert sender.flush(10) == 0


def calls_message(job, first_seq, n_seq):
    r = wire.empty(n_seq * 4)
    idx = np.arange(len(r))
    r["kind"], r["op"], r["flags"] = wire.KIND_CALL, wire.OP_ALLREDUCE, wire.FLAG_COMPLETED
    r["rank"], r["comm"], r["seq"] = idx % 4, COMM, first_seq + idx // 4
    r["t_start_ns"] = time.time_ns()
    r["t_end_ns"] = r["t_start_ns"] + 1000
    return (topics.CALLS, topics.comm_key(job, COMM), wire.encode_batch(r))


def final_counts(client, db, job):
    inc = client.query(f"SELECT incident, status, count() OVER (PARTITION BY incident) FROM {db}.incidents FINAL "
                       f"WHERE job = '{job}'").result_rows
    calls = client.query(f"SELECT count(), uniqExact(seq, rank) FROM {db}.calls FINAL WHERE job = '{job}'").result_rows
    return inc, calls[0]


def test_restart_mid_stream_leaves_each_row_exactly_once(kafka_settings, ch_client, ch_settings):
    s = kafka_settings.replace(clickhouse_dsn=ch_settings.clickhouse_dsn,
                               clickhouse_database=ch_settings.clickhouse_database, sink_flush_rows=20,
                               sink_flush_s=0.2)
    migrate(ch_client, s)
    events = incident_events("jr", 40)
    items = [(topics.ALERTS, "jr", messages.dumps(e)) for e in events]
    items += [calls_message("jr", k * 10, 10) for k in range(10)]
    produce(s, items)
    target = ClickHouseWriter(ch_client, s.clickhouse_database)
    first = Sink(s, target, group="sink-restart").run(max_flushes=2, abandon=True)  # dies holding a batch
    assert first.flushes == 2 and first.rows < 520  # stopped mid-stream
    second = Sink(s, target, group="sink-restart")
    deadline = time.monotonic() + 30
    t = threading.Thread(target=second.run)
    t.start()
    try:
        while time.monotonic() < deadline:
            inc, calls = final_counts(ch_client, s.clickhouse_database, "jr")
            if len(inc) == 40 and calls[0] == 400:
                break
            time.sleep(0.3)
    finally:
        second.stop()
        t.join(20)
    inc, calls = final_counts(ch_client, s.clickhouse_database, "jr")
    assert len(inc) == 40 and all(r[1] == "resolved" and r[2] == 1 for r in inc)
    assert calls == (400, 400)


class FlakyTarget:
    """ClickHouse 'unreachable' for the first `failures` inserts, then the real engine."""

    def __init__(self, real, failures):
        self.real, self.failures, self.calls = real, failures, 0

    def _maybe_fail(self):
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionError("ClickHouse unreachable (test)")

    def insert_block(self, table, block, token):
        self._maybe_fail()
        self.real.insert_block(table, block, token)

    def insert_rows(self, table, columns, rows, token):
        self._maybe_fail()
        self.real.insert_rows(table, columns, rows, token)


def test_outage_retries_with_bounded_memory_and_deadletters_malformed(kafka_settings, ch_client, ch_settings):
    s = kafka_settings.replace(clickhouse_dsn=ch_settings.clickhouse_dsn,
                               clickhouse_database=ch_settings.clickhouse_database, sink_flush_rows=10,
                               sink_flush_s=0.1, sink_max_buffer_rows=1000)
    migrate(ch_client, s)
    items = [calls_message("jo", k * 50, 50) for k in range(12)]  # 2400 rows, > the bound
    items += [(topics.ALERTS, "jo", b'{"v": 1, "job": "jo"'), (topics.CALLS, "jo/zz", b"CWB1junk")]
    produce(s, items)
    target = FlakyTarget(ClickHouseWriter(ch_client, s.clickhouse_database), failures=4)
    sink = Sink(s, target, group="sink-outage")
    t = threading.Thread(target=sink.run)
    t.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if final_counts(ch_client, s.clickhouse_database, "jo")[1][0] == 2400:
                break
            time.sleep(0.3)
    finally:
        sink.stop()
        t.join(20)
    assert final_counts(ch_client, s.clickhouse_database, "jo")[1] == (2400, 2400)
    raw = ch_client.query(f"SELECT count() FROM {s.clickhouse_database}.calls WHERE job = 'jo'").result_rows[0][0]
    assert raw == 2400  # retried inserts carried their dedup tokens: no double rows even before merges
    assert sink.stats.failed_flushes == 4 and sink.stats.paused >= 1
    assert sink.stats.deadlettered == 2
    get = sink.metrics.registry.get_sample_value
    assert get("commwatch_sink_rows_total", {"table": "calls"}) == sink.stats.rows == 2400
    assert get("commwatch_sink_insert_errors_total") == 4 and get("commwatch_sink_flushes_total") == sink.stats.flushes
    assert get("commwatch_sink_messages_total", {"topic": topics.CALLS}) == 13  # 12 batches, 1 malformed
    dead = [s for f in sink.metrics.registry.collect() for s in f.samples if s.name == "commwatch_sink_deadletter_total"]
    assert sum(s.value for s in dead) == 2 and all(s.labels["reason"] for s in dead)
    assert get("commwatch_sink_paused") == 0 and get("commwatch_sink_buffered_rows") == 0
    c = kafka.consumer(s, s.kafka_bootstrap, "dl-check")
    c.subscribe([s.topics.deadletter])
    got = []
    deadline = time.monotonic() + 15
    while len(got) < 2 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(dict(m.headers())[topics.ERROR_HEADER].decode())
    c.close()
    assert sorted(g.split(":")[0] for g in got) == ["bad_json", "bad_key"]
