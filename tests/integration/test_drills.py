"""Fault drills on the real embedded broker with real `commwatch worker` processes.

- the broker dies and a new one starts on the same address (memory-only: every topic and
  committed offset is gone): a hang sent afterwards is still detected;
- one job floods the pipeline while another hangs: the hang is still detected, and the
  delay with and without the flood is printed.

A worker killed mid-run and restarted is drilled in `test_worker_live.py`; ClickHouse
failing for a while under the sink in `test_sink.py`.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from test_worker_live import is_hang_of, send_job, start_worker, wait_for

from commwatch import topics
from commwatch.embedded import EmbeddedBroker, free_port
from commwatch.kafka import ensure_topics
from commwatch.producers.simulate import JobSpec, parse_fault, simulate
from commwatch.producers.simulate.spec import DEFAULT_START_NS
from commwatch.settings import Settings
from commwatch.streams.app import stream_topics
from commwatch.streams.bench_throughput import AlertWatch, produce

pytestmark = pytest.mark.integration


def stream_settings(bootstrap: str, tmp_path, partitions: int = 2) -> Settings:
    s = Settings.load(env={}, kafka_bootstrap=bootstrap, topic_prefix="d" + uuid.uuid4().hex[:8],
                      data_dir=str(tmp_path), kafka_partitions=partitions, metrics_port=0)
    ensure_topics(s, bootstrap, stream_topics(s))
    return s


def test_broker_restart_then_a_hang_is_still_detected(tmp_path):
    port = free_port()
    broker = EmbeddedBroker(port=port, log_path=tmp_path / "broker1.log").start()
    s = stream_settings(broker.bootstrap, tmp_path)
    log = tmp_path / "worker.log"
    worker, _ = start_worker(s, log)
    restarted_worker = None
    try:
        send_job(s, "jbefore", DEFAULT_START_NS, "hang:rank=1,at=8s")
        wait_for(s, topics.ALERTS, is_hang_of("jbefore", 1), timeout_s=45)
        broker.proc.kill()  # no clean shutdown: the broker's process is gone
        broker.proc.wait(5)
        broker = EmbeddedBroker(port=port, log_path=tmp_path / "broker2.log").start()
        ensure_topics(s, broker.bootstrap, stream_topics(s))  # memory-only: recreate the topics
        t0 = time.monotonic()
        send_job(s, "jafter", DEFAULT_START_NS + 300 * 10**9, "hang:rank=6,at=8s")
        try:
            wait_for(s, topics.ALERTS, is_hang_of("jafter", 6), timeout_s=40)
            outcome = f"the same worker reconnected; hang alert {time.monotonic() - t0:.1f} s after the restart"
            assert worker.poll() is None
        except AssertionError:
            # what a supervisor (Kubernetes liveness probe, systemd) does: restart the worker
            alive = worker.poll() is None
            worker.terminate()
            worker.wait(30)
            restarted_worker, _ = start_worker(s, tmp_path / "worker2.log")
            send_job(s, "jafter2", DEFAULT_START_NS + 600 * 10**9, "hang:rank=6,at=8s")
            wait_for(s, topics.ALERTS, is_hang_of("jafter2", 6), timeout_s=45)
            outcome = (f"the worker ({'still running' if alive else 'exited'}) did not recover in 40 s; "
                       f"restarted, it alerted {time.monotonic() - t0:.1f} s after the broker restart")
        print("broker restart drill:", outcome)
    finally:
        for proc in (worker, restarted_worker):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(30)
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
