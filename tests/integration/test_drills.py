"""Fault drills on the real embedded broker with real `commwatch worker` processes.

- the broker dies and a new one starts on the same address (memory-only: every topic and
  committed offset is gone): the running worker re-creates its topics and re-joins by
  itself, and a hang sent afterwards is still detected;
- one job floods the pipeline while another hangs: the hang is still detected, and the
  delay with and without the flood is printed.

A worker killed mid-run and restarted is drilled in `test_worker_live.py`; ClickHouse
failing for a while under the sink in `test_sink.py`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest
from test_worker_live import is_hang_of, send_job, start_worker, wait_for, worker_env

from commwatch import topics
from commwatch.embedded import EmbeddedBroker, free_port
from commwatch.kafka import ensure_topics
from commwatch.producers.simulate import JobSpec, parse_fault, simulate
from commwatch.producers.simulate.spec import DEFAULT_START_NS
from commwatch.settings import Settings
from commwatch.streams.app import REPORTS, stream_topics
from commwatch.streams.bench_throughput import AlertWatch, produce

pytestmark = pytest.mark.integration

STARTUP_S = 60  # workers started together on a fresh broker consume every partition within this (docs/scaling.md)


def stream_settings(bootstrap: str, tmp_path, partitions: int = 2) -> Settings:
    s = Settings.load(env={}, kafka_bootstrap=bootstrap, topic_prefix="d" + uuid.uuid4().hex[:8],
                      data_dir=str(tmp_path), kafka_partitions=partitions, metrics_port=0)
    ensure_topics(s, bootstrap, stream_topics(s))
    return s


def topics_exist(s: Settings, names: list[str]) -> bool:
    from confluent_kafka.admin import AdminClient

    try:
        have = AdminClient(s.kafka_config()).list_topics(timeout=2).topics
    except Exception:  # noqa: BLE001 - a broker still starting
        return False
    return all(n in have for n in names)


def probe(port: int, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_worker_survives_a_broker_restart_by_itself(tmp_path):
    """Property: a memory-only broker that dies and comes back empty on the same address is
    survived by the running worker with no restart and no help: it re-creates its topics,
    its consumer re-joins, a hang sent afterwards is alerted by the same process, and its
    liveness and readiness say 200 again. (Nothing in this test creates a topic after the
    restart: without the worker's own re-creation no topic exists and no alert comes.)"""
    port = free_port()
    broker = EmbeddedBroker(port=port, log_path=tmp_path / "broker1.log").start()
    s = stream_settings(broker.bootstrap, tmp_path)
    worker, mport = start_worker(s, tmp_path / "worker.log")
    try:
        send_job(s, "jbefore", DEFAULT_START_NS, "hang:rank=1,at=8s")
        wait_for(s, topics.ALERTS, is_hang_of("jbefore", 1), timeout_s=90)
        broker.proc.kill()  # no clean shutdown: the broker's process and all it held are gone
        broker.proc.wait(5)
        broker = EmbeddedBroker(port=port, log_path=tmp_path / "broker2.log").start()
        t0 = time.monotonic()
        names = stream_topics(s)
        deadline = time.monotonic() + 60
        while not topics_exist(s, names):
            assert time.monotonic() < deadline, "the worker did not re-create its topics"
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            time.sleep(0.5)
        recreated = time.monotonic() - t0
        send_job(s, "jafter", DEFAULT_START_NS + 300 * 10**9, "hang:rank=6,at=8s")
        wait_for(s, topics.ALERTS, is_hang_of("jafter", 6), timeout_s=90)
        alerted = time.monotonic() - t0
        assert worker.poll() is None  # the same process
        deadline = time.monotonic() + 60
        while (live := probe(mport, "/livez"))[0] != 200 or (ready := probe(mport, "/readyz"))[0] != 200:
            assert time.monotonic() < deadline, (live, ready)
            time.sleep(0.5)
        assert ready[1]["assigned"] > 0
        print(f"broker restart drill: topics re-created by the worker {recreated:.1f} s after the restart, "
              f"hang alert {alerted:.1f} s after it, same worker process")
    finally:
        if worker.poll() is None:
            worker.terminate()
            worker.wait(30)
        broker.stop()


def paced_hang(s: Settings, job: str, flood: list | None) -> float:
    """Send `job` at wall-clock pace with a hang at 4 s (a flood, if given, produced in full
    the moment the hang starts); returns the alert's delay beyond onset + threshold."""
    watch = AlertWatch(s)
    try:
        start = time.time_ns() + 10**9
        sim = simulate(JobSpec(job=job, tp=2, pp=2, dp=2, step_s=0.5, duration_s=13, start_ns=start),
                       [parse_fault("hang:rank=3,at=4s")])
        at = sim.truth()[0]["at_ns"] / 1e9
        flooder = None
        if flood is not None:
            def go() -> None:
                time.sleep(max(0.0, at - time.time()))
                produce(s, flood)
            flooder = threading.Thread(target=go)
            flooder.start()
        produce(s, sim.messages(), realtime=True)
        if flooder:
            flooder.join(120)
        deadline = time.monotonic() + 40
        while (got := watch.first_open(job, "hang")) is None:
            assert time.monotonic() < deadline, f"no hang alert for {job}"
            time.sleep(0.2)
    finally:
        watch.close()
    arrived, inc = got
    assert inc["culprit_ranks"] == [3], inc
    return arrived - (at + float(inc["evidence"].get("threshold_s", s.hang_floor_s)))


def test_a_flood_from_one_job_does_not_hide_another_jobs_hang(broker, tmp_path):
    s = stream_settings(broker.bootstrap, tmp_path)
    worker, _ = start_worker(s, tmp_path / "worker.log")
    try:
        quiet = paced_hang(s, "bquiet", None)
        big = JobSpec(job="aflood", tp=8, pp=2, dp=4, duration_s=20, start_ns=time.time_ns() - 30 * 10**9)
        flood_sim = simulate(big)
        flood = list(flood_sim.messages())
        flooded = paced_hang(s, "bflooded", flood)
        print(f"flood drill: job B's hang alerted {quiet:.2f} s beyond onset + threshold alone, {flooded:.2f} s "
              f"while job A flooded {flood_sim.stats.records} call records in {len(flood)} messages")
        assert worker.poll() is None
    finally:
        worker.terminate()
        worker.wait(30)


def metric_sum(port: int, name: str) -> float:
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return 0.0
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", body, re.M))


@pytest.mark.parametrize("workers", [2, 3])  # 3: partitions (4) not a multiple of the workers
def test_workers_started_together_on_a_fresh_broker_consume_every_partition(tmp_path, workers):
    """Property: N workers started at the same moment on a broker with no topics (they create
    them themselves, concurrently) share every input partition among them and consume what
    is in each, all within STARTUP_S; every worker is ready then, and owns the same partition
    numbers of each of the job half's topics, and of the comm half's."""
    broker = EmbeddedBroker(log_path=tmp_path / "broker.log").start()
    s = Settings.load(env={}, kafka_bootstrap=broker.bootstrap, topic_prefix="m" + uuid.uuid4().hex[:8],
                      data_dir=str(tmp_path), kafka_partitions=4, metrics_port=0)
    procs: list = []
    try:
        t0 = time.monotonic()
        logs = [tmp_path / f"worker{i}.log" for i in range(workers)]
        outs = [open(p, "ab") for p in logs]
        procs = [subprocess.Popen([sys.executable, "-m", "commwatch.cli", "worker"], env=worker_env(s),
                                  stdout=out, stderr=subprocess.STDOUT) for out in outs]
        ports = [wait_port(p, log) for p, log in zip(procs, logs)]
        inputs = [s.topics.name(t) for t in topics.INPUTS]
        sent = produce_everywhere(s, inputs)
        wanted = {(t, p) for t in inputs + [s.topics.name(REPORTS)] for p in range(s.kafka_partitions)}
        deadline = t0 + STARTUP_S
        while True:
            answers = [probe(port, "/readyz") for port in ports]
            owned = {(t, p) for _, body in answers for t, ps in body.get("partitions", {}).items() for p in ps}
            consumed = sum(metric_sum(port, "commwatch_stream_messages_total") for port in ports)
            if all(code == 200 for code, _ in answers) and wanted <= owned and consumed >= sent:
                break
            for proc, log in zip(procs, logs):
                assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, (f"after {STARTUP_S} s: {consumed:.0f}/{sent} consumed, "
                                                 f"missing {sorted(wanted - owned)}, {answers}")
            time.sleep(0.5)
        # each half's topics are co-partitioned: a worker owns the same partition numbers of
        # each, so a job's reports, topology, steps and hw (one key, one partitioner) meet there,
        # and so do a comm's calls and heartbeats
        for together in ([s.topics.name(REPORTS), s.topics.topology, s.topics.steps, s.topics.hw],
                         [s.topics.calls, s.topics.progress]):
            for _, body in answers:
                owns = {t: sorted(body.get("partitions", {}).get(t, [])) for t in together}
                assert len({tuple(ps) for ps in owns.values()}) == 1, owns
        print(f"{workers} workers on a fresh broker: every partition assigned and consumed "
              f"{time.monotonic() - t0:.1f} s after start")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            proc.wait(30)
        broker.stop()


def wait_port(proc, log) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = re.search(rb"metrics on http://[^:]+:(\d+)/metrics", log.read_bytes())
        if m:
            return int(m.group(1))
        assert proc.poll() is None, log.read_text()
        time.sleep(0.1)
    raise AssertionError("no metrics address:\n" + log.read_text())


def produce_everywhere(s: Settings, names: list[str]) -> int:
    """One valid message of its topic in every partition of each input topic (partitions
    chosen explicitly, so none is empty); returns how many were sent."""
    from confluent_kafka import Producer

    from hostile_inputs import HW, PROGRESS, STEPS, TOPOLOGY, batch, js

    job = "jhostile"
    values = {topics.CALLS: (f"{job}/{0xAB:016x}", batch()), topics.PROGRESS: (f"{job}/{0xAB:016x}", js(PROGRESS)),
              topics.TOPOLOGY: (job, js(TOPOLOGY)), topics.STEPS: (job, js(STEPS)), topics.HW: (job, js(HW))}
    producer = Producer(s.kafka_config())
    deadline = time.monotonic() + 60
    while not topics_exist(s, names):  # the workers create them
        assert time.monotonic() < deadline, "no worker created the topics"
        time.sleep(0.2)
    count = 0
    for name in names:
        key, value = values[s.topics.base(name)]
        for p in range(s.kafka_partitions):
            producer.produce(name, value=value, key=key, partition=p)
            count += 1
    assert producer.flush(15) == 0
    return count
