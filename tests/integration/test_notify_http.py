"""`commwatch notify` end to end: incidents on the real broker, deliveries to real HTTP
servers on loopback (one of them failing, one port closed)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from commwatch import kafka, messages
from commwatch.embedded import free_port
from commwatch.sinks.notify.cli import serve
from commwatch.sinks.notify.delivery import Dispatcher
from commwatch.sinks.notify.destinations import from_settings

pytestmark = pytest.mark.integration


def incident(n, status="open", severity="P0"):
    now = time.time_ns()
    return {"v": 1, "job": "j1", "incident": f"j1-hang-{n}", "kind": "hang", "severity": severity,
            "status": status, "ts_ns": now, "opened_ns": now - 10**9, "culprit_ranks": [n],
            "culprit_nodes": ["node-0"], "comm": "00000000000000aa", "summary": f"rank {n} hung",
            "evidence": {}}


class Recorder:
    """An HTTP server recording (path, JSON body); answers 500 for the first `fail` requests."""

    def __init__(self, fail: int = 0):
        self.requests: list[tuple[str, object]] = []
        self.fail = fail
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if rec.fail > 0:
                    rec.fail -= 1
                    self.send_response(500)
                else:
                    rec.requests.append((self.path, body))
                    self.send_response(200)
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


@pytest.fixture
def servers():
    made = {name: Recorder(fail=2 if name == "slack" else 0) for name in ("webhook", "slack", "feishu", "am")}
    yield made
    for r in made.values():
        r.close()


def wait_for(cond, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not cond():
        time.sleep(0.05)
    return cond()


def test_incidents_reach_every_destination_despite_a_dead_one(kafka_settings, servers):
    dead = f"http://127.0.0.1:{free_port()}/hook"
    s = kafka_settings.replace(notify_webhook_url=servers["webhook"].url + "/cw",
                               notify_slack_url=servers["slack"].url + "/slack",
                               notify_feishu_url=servers["feishu"].url + "/feishu",
                               notify_alertmanager_url=servers["am"].url, notify_group_s=0.5,
                               notify_repeat_p0_s=1.5, notify_min_severity="P2")
    dests = from_settings(s) + [from_settings(s.replace(notify_webhook_url=dead))[0]]
    dispatcher = Dispatcher(dests, attempts=3, backoff_s=0.05, timeout_s=2.0)
    sender = kafka.Sender(s, s.kafka_bootstrap)
    for ev in (incident(1), incident(2), incident(3, severity="P3"), incident(2, status="resolved")):
        sender.send(s.topics.alerts, "j1", messages.dumps(ev))
    sender.send(s.topics.alerts, "j1", b"not json")
    assert sender.flush(10) == 0
    stop = threading.Event()
    t = threading.Thread(target=serve, args=(s, stop, "notify-test", dispatcher))
    t.start()
    try:
        assert wait_for(lambda: len(servers["am"].requests) >= 2)  # the group, then the P0 repeat
    finally:
        stop.set()
        t.join(20)
    path, body = servers["webhook"].requests[0]
    assert path == "/cw" and body["job"] == "j1"
    # one grouped notification: incident 1 opened, incident 2 seen only resolved; P3 filtered out
    assert sorted((e["incident"], e["event"]) for e in body["events"]) == [("j1-hang-1", "open"),
                                                                          ("j1-hang-2", "resolved")]
    path, body = servers["slack"].requests[0]  # delivered after two 500s
    assert path == "/slack" and set(body) == {"text"} and "j1-hang-1" in body["text"]
    path, body = servers["feishu"].requests[0]
    assert body["msg_type"] == "text" and "j1-hang-2" in body["content"]["text"]
    path, alerts = servers["am"].requests[0]
    assert path == "/api/v2/alerts"
    by_id = {a["labels"]["incident"]: a for a in alerts}
    assert by_id["j1-hang-1"]["labels"]["alertname"] == "commwatch_hang"
    assert by_id["j1-hang-1"]["endsAt"] > by_id["j1-hang-1"]["startsAt"]  # open: held ahead, re-sent
    assert by_id["j1-hang-2"]["endsAt"].endswith("Z") and by_id["j1-hang-2"]["annotations"]["summary"]
    repeat = servers["am"].requests[1][1]
    assert [a["labels"]["incident"] for a in repeat] == ["j1-hang-1"]
    dead_courier = dispatcher.couriers[-1]
    assert dead_courier.stats.failed >= 1 and dead_courier.stats.sent == 0
    assert dispatcher.couriers[1].stats.retries == 2 and dispatcher.couriers[1].stats.sent >= 1
    get = dispatcher.metrics.registry.get_sample_value
    assert get("commwatch_notify_retries_total", {"destination": "slack"}) == 2
    assert get("commwatch_notify_failed_total", {"destination": "webhook"}) == dead_courier.stats.failed
    assert get("commwatch_notify_suppressed_total") == 1  # the P3
    assert get("commwatch_notify_malformed_total", {"reason": "bad_json"}) == 1


def test_offsets_wait_for_the_grouping_window(kafka_settings):
    """An event held in a grouping window is not committed: a crash would re-deliver it."""
    from confluent_kafka import TopicPartition

    hook = Recorder()
    s = kafka_settings.replace(notify_webhook_url=hook.url, notify_group_s=3.0)
    sender = kafka.Sender(s, s.kafka_bootstrap)
    sender.send(s.topics.alerts, "j1", messages.dumps(incident(7)))
    assert sender.flush(10) == 0
    stop = threading.Event()
    t = threading.Thread(target=serve, args=(s, stop, "notify-commit"), daemon=True)
    t.start()
    probe = kafka.consumer(s, s.kafka_bootstrap, "notify-commit")
    parts = [TopicPartition(s.topics.alerts, p) for p in range(s.kafka_partitions)]

    def committed() -> int:
        return sum(max(0, tp.offset) for tp in probe.committed(parts, timeout=5))

    try:
        deadline = time.monotonic() + 30
        while not hook.requests and time.monotonic() < deadline:
            assert committed() == 0, "committed while the event waited in its grouping window"
            time.sleep(0.3)
        assert hook.requests, "the grouped notification never went out"
        deadline = time.monotonic() + 10
        while committed() != 1 and time.monotonic() < deadline:
            time.sleep(0.3)
        assert committed() == 1
    finally:
        stop.set()
        t.join(15)
        probe.close()
        hook.close()
