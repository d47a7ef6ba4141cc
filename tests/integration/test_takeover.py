"""Drill: two `commwatch worker` processes share a job's partitions on the real embedded
broker; the one holding the job's open hang is killed -9, and the other takes its
partitions over (the group rebalances after the session timeout).

Property: the survivor carries the hang on. It comes to own every partition, finds the hang
again from the heartbeats it now reads, and knows it open already (its alert ledger follows
the alerts topic, so it read the dead worker's `open`): on cw.alerts.v1 the hang opens once,
is not resolved while the job is still hung, and no incident opens twice. Without the
ledger following the topic the survivor announces the hang a second time and the drill
fails.

A worker killed and restarted alone is drilled in `test_worker_live.py`.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest
from test_drills import probe
from test_worker_live import is_hang_of, read_all, start_worker, wait_for, wait_logged

from commwatch import topics
from commwatch.kafka import Sender, ensure_topics
from commwatch.producers.simulate import JobSpec, parse_fault, simulate
from commwatch.producers.simulate.spec import DEFAULT_START_NS
from commwatch.settings import Settings
from commwatch.streams.app import stream_topics

pytestmark = pytest.mark.integration

READY_S = 60.0  # both workers own partitions within this


def owned(port: int) -> set[tuple[str, int]]:
    code, body = probe(port, "/readyz")
    return {(t, p) for t, ps in body.get("partitions", {}).items() for p in ps} if code == 200 else set()


def open_hangs(port: int) -> float:
    import urllib.request

    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(v) for v in re.findall(r'^commwatch_incidents_open\{kind="hang",[^}]*\} (\S+)$', body, re.M))


def test_a_worker_taking_over_a_killed_workers_partitions_carries_its_open_hang_on(broker, tmp_path):
    s = Settings.load(env={}, kafka_bootstrap=broker.bootstrap, topic_prefix="tk" + uuid.uuid4().hex[:8],
                      data_dir=str(tmp_path), kafka_partitions=2, metrics_port=0)
    ensure_topics(s, broker.bootstrap, stream_topics(s))
    msgs = list(simulate(JobSpec(job="jtake", tp=2, pp=2, dp=2, duration_s=40, step_s=0.5),
                         [parse_fault("hang:rank=3,at=8s")]).messages())
    half = DEFAULT_START_NS + 20 * 10**9
    sender = Sender(s, s.kafka_bootstrap)

    def send(part):
        for m in part:
            sender.send(s.topics.name(m.topic), m.key, m.value, timestamp_ms=m.ts_ns // 1_000_000)
        assert sender.flush(15) == 0

    workers = [start_worker(s, tmp_path / f"worker{i}.log") + (tmp_path / f"worker{i}.log",) for i in range(2)]
    try:
        deadline = time.monotonic() + READY_S
        while not all(owned(port) for _, port, _ in workers):
            assert time.monotonic() < deadline, "the two workers did not both get partitions"
            time.sleep(0.5)
        every = owned(workers[0][1]) | owned(workers[1][1])
        send([m for m in msgs if m.ts_ns < half])
        opened, _ = wait_for(s, topics.ALERTS, is_hang_of("jtake", 3))
        hang_id = json.loads(opened.value())["incident"]
        deadline = time.monotonic() + 20
        while not any(open_hangs(port) for _, port, _ in workers):
            assert time.monotonic() < deadline, "neither worker counts the hang open"
            time.sleep(0.3)
        holder = next(i for i, (_, port, _) in enumerate(workers) if open_hangs(port))
        killed, _, _ = workers[holder]
        killed.kill()
        killed.wait(timeout=10)
        survivor, port, log = workers[1 - holder]
        deadline = time.monotonic() + READY_S
        while owned(port) != every:  # the group rebalanced: the survivor reads everything
            assert survivor.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"the survivor owns {sorted(owned(port))} of {sorted(every)}"
            time.sleep(0.5)
        send([m for m in msgs if m.ts_ns >= half])
        # "open" or "update" (the dead worker may have updated it): known either way
        assert wait_logged(survivor, log, f"incident {hang_id} is already"), log.read_text()[-3000:]
        deadline = time.monotonic() + 20
        while not open_hangs(port):
            assert time.monotonic() < deadline, "the survivor does not count the hang open"
            time.sleep(0.3)
        events = [json.loads(v) for v in read_all(s, topics.ALERTS)]
        hang = [e["status"] for e in events if e["incident"] == hang_id]
        assert hang.count("open") == 1 and "resolved" not in hang, hang
        opens = [e["incident"] for e in events if e["status"] == "open"]
        assert len(opens) == len(set(opens)), opens
        assert not [e for e in events if e["job"] == "jtake" and e["kind"] == "hang" and e["incident"] != hang_id], events
        # the culprit, not its victims, in every event of it (the other worker's reports of the
        # comms its victims wait in may come seconds after the first worker's)
        assert all(e["culprit_ranks"] == [3] for e in events if e["incident"] == hang_id), events
        assert survivor.poll() is None
    finally:
        for proc, _, _ in workers:
            if proc.poll() is None:
                proc.terminate()
        for proc, _, _ in workers:
            proc.wait(timeout=30)
