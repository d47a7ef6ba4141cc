"""Sink and notifier metrics: names follow the convention, the exposition carries them, and
they move with the stats (deliveries to a real loopback HTTP server and to a closed port)."""

from __future__ import annotations

import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from prometheus_client import generate_latest

from commwatch import messages, topics, wire
from commwatch.capture import Message
from commwatch.embedded import free_port
from commwatch.metrics import NotifyMetrics, SinkMetrics
from commwatch.sinks.clickhouse.batch import SinkBatch
from commwatch.sinks.notify.delivery import Dispatcher
from commwatch.sinks.notify.destinations import Destination, slack_payload, webhook_payload
from commwatch.sinks.notify.routing import Notification

NAME = re.compile(r"^commwatch_[a-z]+(_[a-z]+)+$")
FORBIDDEN_LABELS = {"rank", "node", "job", "gpu", "comm"}


def exposition(m) -> str:
    return generate_latest(m.registry).decode()


@pytest.mark.parametrize("cls", [SinkMetrics, NotifyMetrics])
def test_names_follow_the_convention(cls):
    families = list(cls().registry.collect())
    assert len(families) >= 6
    for fam in families:
        assert NAME.match(fam.name), fam.name
        assert fam.name in (cls.__doc__ or ""), f"{fam.name} is not documented"
        if fam.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in fam.samples), fam.name


def test_sink_exposition_moves_with_its_counts():
    m = SinkMetrics()
    assert "commwatch_sink_rows_total{" not in exposition(m)  # no series before a table is written
    m.rows.labels(table="calls").inc(200)
    m.deadletter.labels(reason="bad_magic").inc()
    m.buffered.set(40)
    text = exposition(m)
    for line in ('commwatch_sink_rows_total{table="calls"} 200.0', "commwatch_sink_flushes_total 0.0",
                 "commwatch_sink_insert_errors_total 0.0", "commwatch_sink_buffered_rows 40.0",
                 'commwatch_sink_deadletter_total{reason="bad_magic"} 1.0', "commwatch_sink_paused 0.0"):
        assert line in text.splitlines(), line
    for fam in m.registry.collect():
        for s in fam.samples:
            assert not FORBIDDEN_LABELS & set(s.labels), (fam.name, s.labels)


def test_batch_counts_rows_by_table():
    r = wire.empty(8)
    now = time.time_ns()
    r["kind"], r["op"], r["flags"] = wire.KIND_CALL, wire.OP_ALLREDUCE, wire.FLAG_COMPLETED
    r["rank"], r["comm"], r["seq"] = np.arange(8) % 4, 7, np.arange(8) // 4
    r["t_start_ns"], r["t_end_ns"] = now, now + 1000
    inc = {"v": 1, "job": "j", "incident": "j-hang-1", "kind": "hang", "severity": "P0", "status": "open",
           "ts_ns": now, "opened_ns": now, "culprit_ranks": [1], "culprit_nodes": [], "comm": f"{7:016x}",
           "summary": "s", "evidence": {}}
    batch = SinkBatch()
    assert batch.table_rows() == {}
    batch.add(Message(topics.CALLS, topics.comm_key("j", 7), now, wire.encode_batch(r)))
    batch.add(Message(topics.ALERTS, "j", now, messages.dumps(inc)))
    assert batch.table_rows() == {"calls": 8, "incidents": 1}
    assert sum(batch.table_rows().values()) == batch.n_rows


class Ok(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *a):
        pass


@pytest.fixture
def ok_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def test_notify_exposition_moves_with_delivery_stats(ok_url):
    m = NotifyMetrics()
    dead = f"http://127.0.0.1:{free_port()}/hook"
    d = Dispatcher([Destination("webhook", ok_url, webhook_payload), Destination("slack", dead, slack_payload)],
                   metrics=m, attempts=2, backoff_s=0.01, timeout_s=2.0)
    event = {"job": "j", "incident": "j-hang-1", "kind": "hang", "severity": "P0", "status": "open",
             "event": "open", "culprit_ranks": [1], "culprit_nodes": [], "summary": "rank 1 hung"}
    try:
        for _ in range(2):
            d.send(Notification("j", [event]))
        d.drain()
    finally:
        d.close()
    ok, failing = d.couriers
    assert ok.stats.sent == 2 and failing.stats.failed == 2 and failing.stats.retries == 2
    get = m.registry.get_sample_value
    assert get("commwatch_notify_sent_total", {"destination": "webhook"}) == ok.stats.sent
    assert get("commwatch_notify_failed_total", {"destination": "slack"}) == failing.stats.failed
    assert get("commwatch_notify_retries_total", {"destination": "slack"}) == failing.stats.retries
    assert get("commwatch_notify_sent_total", {"destination": "slack"}) == 0  # series exist from the start
    text = exposition(m)
    for name in ("commwatch_notify_sent_total", "commwatch_notify_failed_total", "commwatch_notify_retries_total",
                 "commwatch_notify_dropped_total", "commwatch_notify_suppressed_total"):
        assert name in text, name
