"""Liveness and readiness: what makes each fail, and the HTTP answers beside /metrics."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

from commwatch.metrics import StreamMetrics, serve
from commwatch.streams.liveness import Liveness, TopicKeeper


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_loop_that_stops_beating_is_not_alive():
    clock = Clock()
    live = Liveness(stall_s=30, monotonic=clock)
    live.beat("tick")
    clock.t += 29
    assert live.live()[0]
    clock.t += 2
    ok, body = live.live()
    assert not ok and "no progress for 31.0 s (tick" in body["reason"]
    live.beat("tick")
    assert live.live()[0]


def test_a_timer_that_runs_while_messages_wait_unconsumed_is_not_alive():
    """The timer beats, but the consumer died: lag > 0 and no consume for stall_s."""
    clock = Clock()
    live = Liveness(stall_s=30, monotonic=clock)
    live.beat("consume")
    for _ in range(40):
        clock.t += 1
        live.beat("tick")
        live.assigned([("cw.calls.v1", 0)], lag=500)
    ok, body = live.live()
    assert not ok and body["reason"].startswith("500 messages wait and none was consumed for 40.0 s")
    live.assigned([("cw.calls.v1", 0)], lag=0)  # idle, nothing to read: alive
    assert live.live()[0]


def test_readiness_needs_partitions_and_a_small_lag():
    clock = Clock()
    live = Liveness(stall_s=30, monotonic=clock, ready_lag=100)
    live.beat("tick")
    ok, body = live.ready()
    assert not ok and body["reason"] == "no partitions assigned"
    live.assigned([("cw.calls.v1", 1), ("cw.calls.v1", 0), ("cw.progress.v1", 0)], lag=101)
    ok, body = live.ready()
    assert not ok and body["reason"].startswith("behind: 101 messages")
    live.beat("consume")
    live.assigned([("cw.calls.v1", 1), ("cw.calls.v1", 0), ("cw.progress.v1", 0)], lag=3)
    ok, body = live.ready()
    assert ok and body["partitions"] == {"cw.calls.v1": [0, 1], "cw.progress.v1": [0]} and body["assigned"] == 3
    live.problem = "broker unreachable: timed out"
    assert live.ready() == (False, {**body, "ok": False, "reason": "broker unreachable: timed out"})


def test_the_probes_answer_beside_metrics_and_follow_the_loop():
    """Served from the metrics thread, the answer still follows the loop: a loop that stops
    beating turns /livez into 503 while /metrics keeps answering."""
    live = Liveness(stall_s=1.0, name="worker")
    m = StreamMetrics()
    server, port = serve(m.registry, "127.0.0.1", 0, live.routes())
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            live.beat("tick")
            live.assigned([("t", 0)], lag=0)
            time.sleep(0.05)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        def get(path):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                    return r.status, r.read()
            except urllib.error.HTTPError as err:
                return err.code, err.read()

        deadline = time.monotonic() + 10
        while get("/readyz")[0] != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        status, body = get("/livez")
        assert status == 200 and json.loads(body)["name"] == "worker"
        stop.set()
        t.join()
        deadline = time.monotonic() + 10
        while (got := get("/livez"))[0] != 503:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert "no progress" in json.loads(got[1])["reason"]
        assert get("/readyz")[0] == 503
        status, body = get("/metrics")
        assert status == 200 and b"commwatch_stream_up" in body
        assert get("/nothing")[0] == 404
    finally:
        stop.set()
        server.shutdown()


def test_the_topic_keeper_reports_what_it_recreated_and_broker_errors():
    made = [["cw.calls.v1", "cw.progress.v1"], []]
    keeper = TopicKeeper(lambda: made.pop(0), every_s=0.0)
    keeper.poll()
    deadline = time.monotonic() + 5
    while keeper.recreated != 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)

    def down():
        raise RuntimeError("no broker")

    keeper = TopicKeeper(down, every_s=0.0)
    keeper.poll()
    while keeper.error is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert keeper.error == "broker unreachable: no broker"


def test_not_ready_while_a_partition_holding_data_is_unread():
    clock = Clock()
    live = Liveness(stall_s=30, monotonic=clock)
    live.beat("tick")
    live.assigned([("cw.calls.v1", 0)], lag=0, unread=True)
    ok, body = live.ready()
    assert not ok and body["reason"] == "a partition that holds data has not been read yet"
    live.assigned([("cw.calls.v1", 0)], lag=0)
    assert live.ready()[0]
