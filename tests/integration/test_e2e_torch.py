"""End to end: a real 4-rank gloo job with the hook, the real agent, the broker, a live worker.

One rank is made slow (sleeps inside every step) or hangs (blocks before a collective);
the incident on cw.alerts.v1 must name that rank.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("torch")

from commwatch import topics  # noqa: E402
from commwatch.embedded import free_port  # noqa: E402
from commwatch.producers.agent.agent import Agent  # noqa: E402

from agentkit import consume  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.torch]
JOB_SCRIPT = Path(__file__).with_name("torch_job.py")
WORLD = 4


def settings_env(s) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMWATCH_")}
    env.update({"COMMWATCH_KAFKA_BOOTSTRAP": s.kafka_bootstrap, "COMMWATCH_TOPIC_PREFIX": s.topic_prefix,
                "COMMWATCH_DATA_DIR": s.data_dir, "COMMWATCH_RING_DIR": s.ring_dir, "COMMWATCH_JOB_ID": s.job_id,
                "COMMWATCH_HANG_FLOOR_S": str(s.hang_floor_s), "COMMWATCH_METRICS_PORT": "0",
                "COMMWATCH_KAFKA_PARTITIONS": str(s.kafka_partitions)})
    return env


def run_pipeline(s, job_args: list[str], kind: str, timeout_s: float) -> list[dict]:
    env = settings_env(s)
    port = free_port()
    worker = subprocess.Popen([sys.executable, "-m", "commwatch.cli", "worker", "--no-metrics"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ranks = [subprocess.Popen([sys.executable, str(JOB_SCRIPT), str(r), str(WORLD), str(port), *job_args], env=env)
             for r in range(WORLD)]
    agent = Agent(s, s.kafka_bootstrap)
    stop = threading.Event()
    t = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    t.start()
    try:
        got = consume(s, [topics.ALERTS], lambda g: any(json.loads(v)["kind"] == kind for _, _, v in g),
                      timeout_s=timeout_s)
    finally:
        stop.set()
        for p in (*ranks, worker):
            p.kill()
        for p in (*ranks, worker):
            p.wait(10)
        t.join(10)
    return [json.loads(v) for _, _, v in got]


def test_slow_rank_is_named(kafka_settings, tmp_path):
    s = kafka_settings.replace(ring_dir=str(tmp_path / "rings"), job_id="e2e-slow")
    alerts = run_pipeline(s, ["--steps", "300", "--step-s", "0.05", "--slow-rank", "2", "--slow-s", "0.15"],
                          "slow_rank", 60)
    slow = [a for a in alerts if a["kind"] == "slow_rank"]
    assert slow, f"no slow_rank incident; alerts: {alerts}"
    assert slow[0]["culprit_ranks"] == [2] and slow[0]["job"] == "e2e-slow"


def test_hang_is_named_from_device_timed_records(kafka_settings, tmp_path):
    """The device-stream path (SCRIPTED device, see torch_job.py): ENQUEUED entries, GPU_TIMED
    completions after them, through the real agent and worker."""
    from commwatch import wire

    s = kafka_settings.replace(ring_dir=str(tmp_path / "rings"), job_id="e2e-dev", hang_floor_s=2.0)
    alerts = run_pipeline(s, ["--steps", "300", "--step-s", "0.05", "--hang-rank", "2", "--hang-at", "15",
                              "--scripted-device"], "hang", 45)
    hangs = [a for a in alerts if a["kind"] == "hang"]
    assert hangs, f"no hang incident; alerts: {alerts}"
    assert hangs[0]["culprit_ranks"] == [2] and hangs[0]["job"] == "e2e-dev", json.dumps(hangs[0])  # not its waiting pair peer 3
    got = consume(s, [topics.CALLS], lambda g: len(g) >= 20, timeout_s=20)
    recs = [r for _, _, v in got for r in wire.decode_batch(v) if r["kind"] == wire.KIND_CALL]
    flags = {int(r["flags"]) for r in recs}
    entries = [r for r in recs if not r["flags"] & wire.FLAG_COMPLETED]
    done = [r for r in recs if r["flags"] & wire.FLAG_COMPLETED]
    assert {int(r["flags"]) for r in entries} == {wire.FLAG_ENQUEUED}
    assert {int(r["flags"]) for r in done} == {wire.FLAG_COMPLETED | wire.FLAG_GPU_TIMED}, flags
    enq = {(int(r["rank"]), int(r["comm"]), int(r["seq"])): int(r["t_start_ns"]) for r in entries}
    after = [int(r["t_start_ns"]) >= enq[k] and int(r["t_end_ns"]) >= int(r["t_start_ns"])
             for r in done if (k := (int(r["rank"]), int(r["comm"]), int(r["seq"]))) in enq]
    assert after and all(after)  # the device ran each call after its enqueue, on the host clock


def test_hang_is_named(kafka_settings, tmp_path):
    s = kafka_settings.replace(ring_dir=str(tmp_path / "rings"), job_id="e2e-hang", hang_floor_s=2.0)
    alerts = run_pipeline(s, ["--steps", "300", "--step-s", "0.05", "--hang-rank", "1", "--hang-at", "15"],
                          "hang", 45)
    hangs = [a for a in alerts if a["kind"] == "hang"]
    assert hangs, f"no hang incident; alerts: {alerts}"
    assert hangs[0]["culprit_ranks"] == [1] and hangs[0]["job"] == "e2e-hang"
