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
from test_drills import metric_sum, probe
from test_worker_live import is_hang_of, read_all, sending, start_worker, wait_for, wait_logged

from commwatch import topics
from commwatch.kafka import ensure_topics
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
    send = sending(s)
    workers = [start_worker(s, tmp_path / f"worker{i}.log") + (tmp_path / f"worker{i}.log",) for i in range(2)]
    try:
        deadline = time.monotonic() + READY_S
        while not all(owned(port) for _, port, _ in workers):
            assert time.monotonic() < deadline, "the two workers did not both get partitions"
            time.sleep(0.5)
        every = owned(workers[0][1]) | owned(workers[1][1])
        # the job's first seconds, read by both workers before the rest: a worker that has not
        # reported a job's comms at all yet lets the other's stage 2 take a rank waiting in
        # them for silent (a known limit, docs/architecture.md), not what this drill is about
        early = [m for m in msgs if m.ts_ns < DEFAULT_START_NS + 4 * 10**9]
        send(early)
        deadline = time.monotonic() + 30
        while sum(metric_sum(port, "commwatch_stream_messages_total") for _, port, _ in workers) < len(early):
            assert time.monotonic() < deadline, "the two workers did not read the job's first seconds"
            time.sleep(0.3)
        send([m for m in msgs if DEFAULT_START_NS + 4 * 10**9 <= m.ts_ns < half])
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


def test_a_worker_joining_takes_over_partitions_and_nothing_is_said_twice(broker, tmp_path):
    """Drill: one worker holds two hung jobs (one on each partition); a second worker joins and
    the group gives it one partition of every topic. Property: each hang opens once, names its
    culprit alone, and is not resolved: the worker that gave a job away lets it go silently
    (`LET_GO_S` after the rebalance) instead of resolving it for want of data, and the one that
    took it carries it on (its ledger follows the alerts topic) and counts it open."""
    s = Settings.load(env={}, kafka_bootstrap=broker.bootstrap, topic_prefix="tj" + uuid.uuid4().hex[:8],
                      data_dir=str(tmp_path), kafka_partitions=2, metrics_port=0)
    ensure_topics(s, broker.bootstrap, stream_topics(s))
    jobs = {"jjoin": 3, "jmove": 5}  # their keys fall on partitions 0 and 1 (librdkafka: CRC32 of the key)
    msgs = sorted((m for job, rank in jobs.items()
                   for m in simulate(JobSpec(job=job, tp=2, pp=2, dp=2, duration_s=45, step_s=0.5),
                                     [parse_fault(f"hang:rank={rank},at=8s")]).messages()), key=lambda m: m.ts_ns)
    half = DEFAULT_START_NS + 20 * 10**9
    send = sending(s)
    first, first_port = start_worker(s, tmp_path / "first.log")
    second = None
    try:
        send([m for m in msgs if m.ts_ns < half])
        ids = {}
        for job, rank in jobs.items():
            opened, _ = wait_for(s, topics.ALERTS, is_hang_of(job, rank))
            ids[job] = json.loads(opened.value())["incident"]
        second, second_port = start_worker(s, tmp_path / "second.log")
        deadline = time.monotonic() + READY_S
        while not (owned(first_port) and owned(second_port)):
            assert time.monotonic() < deadline, "the joining worker got no partitions"
            time.sleep(0.5)
        send([m for m in msgs if m.ts_ns >= half])
        assert wait_logged(first, tmp_path / "first.log", "partitions gone to another worker", timeout_s=40), \
            (tmp_path / "first.log").read_text()[-3000:]
        deadline = time.monotonic() + 20
        while open_hangs(first_port) + open_hangs(second_port) < len(jobs):
            assert time.monotonic() < deadline, (open_hangs(first_port), open_hangs(second_port))
            time.sleep(0.3)
        assert open_hangs(second_port) >= 1  # the job that moved is carried on where it went
        events = [json.loads(v) for v in read_all(s, topics.ALERTS)]
        for job, rank in jobs.items():
            said = [(e["incident"], e["status"], e["culprit_ranks"]) for e in events if e["job"] == job]
            assert {i for i, _, _ in said} == {ids[job]}, said
            assert [st for _, st, _ in said].count("open") == 1 and "resolved" not in [st for _, st, _ in said], said
            assert all(r == [rank] for _, _, r in said), said
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for proc in (first, second):
            if proc is not None:
                proc.wait(timeout=30)
