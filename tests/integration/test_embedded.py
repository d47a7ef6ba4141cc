"""The embedded broker: serves Kafka clients, and never outlives its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

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


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_commwatch_up_leaves_no_orphan(sig, tmp_path):
    env = {**os.environ, "COMMWATCH_DATA_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "commwatch.cli", "up"], stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    assert "embedded broker on 127.0.0.1:" in line
    kids = _children(proc.pid)
    assert kids, "the broker runs as a child process"
    proc.send_signal(sig)
    proc.wait(timeout=15)
    deadline = time.time() + 10
    while any(_alive(k) for k in kids) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(_alive(k) for k in kids), f"broker outlived its parent after {sig!r}"
