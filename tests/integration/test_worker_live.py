"""A live `commwatch worker` on the real embedded broker, fed by the real simulator.

One worker process serves the module (a fresh topic prefix); each test sends its own
simulated job, placed later in event time than the previous one (the worker's clock is
the newest event time it has seen).
"""

from __future__ import annotations

import json
import os
from collections import Counter
import re
import subprocess
import sys
import time
import urllib.request
import uuid

import hostile_inputs as hostile
import pytest

from commwatch import topics
from commwatch.kafka import Sender, consumer
from commwatch.producers.simulate import JobSpec, parse_fault, simulate
from commwatch.producers.simulate.spec import DEFAULT_START_NS
from commwatch.settings import Settings
from commwatch.streams.app import stream_topics
from commwatch.streams.deadletter import parse_error

pytestmark = pytest.mark.integration


def worker_env(s: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMWATCH_")}
    env.update({
        "COMMWATCH_KAFKA_BOOTSTRAP": s.kafka_bootstrap, "COMMWATCH_TOPIC_PREFIX": s.topic_prefix,
        "COMMWATCH_DATA_DIR": s.data_dir, "COMMWATCH_KAFKA_PARTITIONS": str(s.kafka_partitions),
        "COMMWATCH_METRICS_PORT": "0", "COMMWATCH_LOG_LEVEL": "INFO",
        "COMMWATCH_MAX_MESSAGE_BYTES": str(s.max_message_bytes),
    })
    return env


def start_worker(s: Settings, log_path) -> tuple[subprocess.Popen, int]:
    """Start `commwatch worker`; returns the process and its metrics port."""
    out = open(log_path, "ab")
    proc = subprocess.Popen([sys.executable, "-m", "commwatch.cli", "worker"], env=worker_env(s),
                            stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = re.search(rb"metrics on http://[^:]+:(\d+)/metrics", log_path.read_bytes())
        if m:
            return proc, int(m.group(1))
        assert proc.poll() is None, log_path.read_text()
        time.sleep(0.1)
    raise AssertionError("worker printed no metrics address:\n" + log_path.read_text())


@pytest.fixture(scope="module")
def live(broker, tmp_path_factory):
    from commwatch.kafka import ensure_topics

    d = tmp_path_factory.mktemp("worker")
    s = Settings.load(env={}, kafka_bootstrap=broker.bootstrap, topic_prefix="w" + uuid.uuid4().hex[:8],
                      data_dir=str(d), kafka_partitions=2, metrics_port=0, max_message_bytes=hostile.MAX_BYTES)
    ensure_topics(s, broker.bootstrap, stream_topics(s))
    proc, port = start_worker(s, d / "worker.log")
    yield s, proc, port, d / "worker.log"
    proc.terminate()
    proc.wait(timeout=30)


def send_job(s: Settings, job: str, start_ns: int, fault: str) -> list[dict]:
    """Send a small simulated job, fast (not paced); returns the injected truth."""
    sim = simulate(JobSpec(job=job, tp=2, pp=2, dp=2, duration_s=20, step_s=0.5, start_ns=start_ns),
                   [parse_fault(fault)])
    sender = Sender(s, s.kafka_bootstrap)
    for m in sim.messages():
        sender.send(s.topics.name(m.topic), m.key, m.value, timestamp_ms=m.ts_ns // 1_000_000)
    assert sender.flush(15) == 0
    return sim.truth()


def wait_for(s: Settings, topic: str, pred, timeout_s: float = 60.0):
    c = consumer(s, s.kafka_bootstrap, group="t" + uuid.uuid4().hex)
    c.subscribe([s.topics.name(topic)])
    try:
        deadline = time.monotonic() + timeout_s
        seen = []
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            seen.append(msg)
            if pred(msg):
                return msg, seen
        raise AssertionError(f"nothing matching on {topic} in {timeout_s} s; saw {len(seen)} messages")
    finally:
        c.close()


def read_all(s: Settings, topic: str) -> list[bytes]:
    """Every value on a topic now, read partition by partition to the end."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    name = s.topics.name(topic)
    c = consumer(s, s.kafka_bootstrap, group="t" + uuid.uuid4().hex, **{"enable.partition.eof": True})
    parts = c.list_topics(name, timeout=10).topics[name].partitions
    c.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in parts])
    values, pending, deadline = [], set(parts), time.monotonic() + 20
    try:
        while pending and time.monotonic() < deadline:
            msg = c.poll(0.3)
            if msg is None:
                continue
            if msg.error():
                pending.discard(msg.partition())
            else:
                values.append(msg.value())
    finally:
        c.close()
    assert not pending, f"{name}: partitions {pending} not read to the end"
    return values


def is_hang_of(job: str, rank: int):
    def pred(msg) -> bool:
        inc = json.loads(msg.value())
        return inc["job"] == job and inc["kind"] == "hang" and inc["status"] == "open" and rank in inc["culprit_ranks"]
    return pred


def test_hang_alert_names_the_culprit(live):
    s, proc, _port, log = live
    truth = send_job(s, "jhang", DEFAULT_START_NS, "hang:rank=5,at=8s")
    assert truth[0]["ranks"] == [5]
    msg, seen = wait_for(s, topics.ALERTS, is_hang_of("jhang", 5))
    inc = json.loads(msg.value())
    assert msg.key() == b"jhang"
    assert inc["culprit_ranks"] == [5], inc
    assert proc.poll() is None
    assert re.search(r"first message processed [\d.]+ s after", log.read_text())
    # the job's health snapshot names the hang's root while it is open
    snap_msg, _ = wait_for(s, topics.HEALTH, lambda m: json.loads(m.value())["job"] == "jhang"
                           and json.loads(m.value())["state"] == "hang")
    snap = json.loads(snap_msg.value())
    assert snap["wait_chain"]["roots"] == [5], snap["wait_chain"]
    assert [i["culprit_ranks"] for i in snap["incidents"] if i["kind"] == "hang"] == [[5]]
    assert snap["ranks"] == 8 and snap["comms"]


def test_garbage_is_dead_lettered_and_the_stream_goes_on(live):
    s, proc, port, _log = live
    garbage = b"\x00not a call batch"
    sender = Sender(s, s.kafka_bootstrap)
    sender.send(s.topics.calls, "jdead/00000000000000ab", garbage)
    assert sender.flush(10) == 0
    dead, _ = wait_for(s, topics.DEADLETTER, lambda m: m.value() == garbage, timeout_s=30)
    headers = dict(dead.headers())
    reason, detail = parse_error(headers[topics.ERROR_HEADER])
    assert reason == "bad_magic" and detail
    assert headers["cw-source-topic"] == s.topics.calls.encode()
    assert dead.key() == b"jdead/00000000000000ab"
    # the worker goes on: a later job's hang is still found
    send_job(s, "jafter", DEFAULT_START_NS + 200 * 10**9, "hang:rank=2,at=8s")
    wait_for(s, topics.ALERTS, is_hang_of("jafter", 2))
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert re.search(r'commwatch_stream_deadletter_total\{reason="bad_magic"\} 1\.0', body), body
    assert re.search(r'commwatch_incidents_open\{kind="hang",severity="P\d"\} [1-9]', body), body
    assert proc.poll() is None


def sending(s: Settings):
    """A function that sends messages to their topics (stamped with their event time) and
    waits till the broker has them."""
    sender = Sender(s, s.kafka_bootstrap)

    def send(part) -> None:
        for m in part:
            sender.send(s.topics.name(m.topic), m.key, m.value, timestamp_ms=m.ts_ns // 1_000_000)
        assert sender.flush(15) == 0
    return send


def killed_midway(broker, tmp_path, tag: str, fault: str, opened_pred, duration_s: float, half_s: float):
    """Drill: a worker fed a simulated job up to `half_s`, killed -9 once `opened_pred` sees its
    incident on cw.alerts.v1, a second worker started and fed the rest. Returns the settings,
    the incident the first worker opened and the second worker's process and log."""
    from commwatch.kafka import ensure_topics

    s = Settings.load(env={}, kafka_bootstrap=broker.bootstrap, topic_prefix=tag + uuid.uuid4().hex[:8],
                      data_dir=str(tmp_path), kafka_partitions=2, metrics_port=0)
    ensure_topics(s, broker.bootstrap, stream_topics(s))
    msgs = list(simulate(JobSpec(job="j" + tag, tp=2, pp=2, dp=2, duration_s=duration_s, step_s=0.5),
                         [parse_fault(fault)]).messages())
    half = DEFAULT_START_NS + int(half_s * 10**9)
    send = sending(s)
    first, _ = start_worker(s, tmp_path / "first.log")
    try:
        send([m for m in msgs if m.ts_ns < half])
        opened, _ = wait_for(s, topics.ALERTS, opened_pred)
    finally:
        first.kill()
        first.wait(timeout=10)
    second, _ = start_worker(s, tmp_path / "second.log")
    send([m for m in msgs if m.ts_ns >= half])
    return s, json.loads(opened.value()), second, tmp_path / "second.log"


def wait_logged(proc, log, text: str, timeout_s: float = 60.0) -> bool:
    """Whether `text` appears in the worker's log within `timeout_s` (the worker must live)."""
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text():
        assert proc.poll() is None, log.read_text()[-3000:]
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_killed_worker_restarts_without_losing_or_repeating_incidents(broker, tmp_path):
    """Drill: kill -9 mid-run, restart. Property: on cw.alerts.v1 the open hang is neither
    lost (the restarted worker finds it again from the heartbeats) nor announced twice (its
    alert ledger, read back from the alerts topic, knows it is open); no incident opens twice.
    Without the ledger the restarted worker never logs the hang as already open and the
    test fails."""
    restarted = time.monotonic()
    s, opened, second, log = killed_midway(broker, tmp_path, "restart", "hang:rank=3,at=8s", is_hang_of("jrestart", 3),
                                           36, 18)
    hang_id = opened["incident"]
    try:
        assert wait_logged(second, log, f"incident {hang_id} is already open"), log.read_text()[-3000:]
        print(f"restarted worker re-detected the open hang {time.monotonic() - restarted:.1f} s into the drill")
        # everything said about the job: one open of the hang, and no other incident opened twice
        events = [json.loads(v) for v in read_all(s, topics.ALERTS)]
        opens = [e["incident"] for e in events if e["status"] == "open"]
        assert opens.count(hang_id) == 1, events
        assert len(opens) == len(set(opens)), opens
    finally:
        second.terminate()
        second.wait(timeout=30)


def test_a_restarted_worker_carries_on_with_the_open_slow_rank_incident(broker, tmp_path):
    """Drill: the same with a 1.6x rank, whose incident id carries the time it opened (a
    hang's does not). Property: the restarted detector names the rank again, and the worker
    carries on under the open incident's id (its ledger knows it open for that rank): one
    open, no second incident for the rank. Before, it opened a second one, and the first
    never resolved."""
    def slow_open(msg) -> bool:
        inc = json.loads(msg.value())
        return inc["job"] == "jslow" and inc["kind"] == "slow_rank" and inc["status"] == "open" \
            and inc["culprit_ranks"] == [5]

    s, opened, second, log = killed_midway(broker, tmp_path, "slow", "slow:rank=5,factor=1.6,at=6s", slow_open, 40, 20)
    try:
        wait_logged(second, log, f"incident {opened['incident']} is already open")
        time.sleep(3)
        events = [json.loads(v) for v in read_all(s, topics.ALERTS)]
        slow = [(e["incident"], e["status"], e["culprit_ranks"]) for e in events if e["kind"] == "slow_rank"]
        assert {i for i, _, r in slow if r == [5]} == {opened["incident"]}, slow
        assert [st for _, st, _ in slow].count("open") == 1, slow
    finally:
        second.terminate()
        second.wait(timeout=30)


def test_every_hostile_case_is_dead_lettered_with_its_reason_and_the_worker_goes_on(live):
    """Each case of the hostile catalogue (and a key that is not UTF-8) reaches the
    dead-letter topic unchanged, with the reason the decoder gives; the worker stays up and
    still finds a later hang."""
    s, proc, port, _log = live
    odd_key = b"\xff\xfe/00000000000000ab"
    sender = Sender(s, s.kafka_bootstrap)
    for case in hostile.CASES:
        assert sender.send(s.topics.name(case.topic), case.key, case.value, timestamp_ms=case.ts_ms)
    assert sender.send(s.topics.calls, odd_key, hostile.batch())
    assert sender.flush(15) == 0
    mine = {c.key.encode() if c.key is not None else None for c in hostile.CASES} | {odd_key}
    want = Counter((s.topics.name(c.topic), c.reason) for c in hostile.CASES) + Counter({(s.topics.calls, "bad_key"): 1})
    got: Counter = Counter()
    sent = {(s.topics.name(c.topic), c.value) for c in hostile.CASES} | {(s.topics.calls, hostile.batch())}

    def collect(msg) -> bool:
        if msg.key() in mine:
            headers = dict(msg.headers())
            source = headers["cw-source-topic"].decode()
            assert (source, msg.value() or b"") in sent  # unchanged, byte for byte
            got[(source, parse_error(headers[topics.ERROR_HEADER])[0])] += 1
        return got == want

    wait_for(s, topics.DEADLETTER, collect, timeout_s=90)
    assert proc.poll() is None
    send_job(s, "jafterhostile", DEFAULT_START_NS + 400 * 10**9, "hang:rank=4,at=8s")
    wait_for(s, topics.ALERTS, is_hang_of("jafterhostile", 4))
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    counted = sum(float(v) for v in re.findall(r'^commwatch_stream_deadletter_total\{[^}]*\} (\S+)$', body, re.M))
    assert counted >= len(hostile.CASES) + 1, body
    assert proc.poll() is None
