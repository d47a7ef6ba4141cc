"""The node agent against the real broker: what it publishes, and a Kafka outage."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from commwatch import messages, ring, topics, wire
from commwatch.embedded import EmbeddedBroker, free_port
from commwatch.producers.agent.agent import Agent
from commwatch.producers.agent.hardware import ReplayReader

from agentkit import consume

pytestmark = pytest.mark.integration
NVML = Path(__file__).resolve().parents[1] / "data" / "nvml" / "scripted_h100x8_downclock.jsonl"


def rank_files(d: Path, job: str, rank: int, comm: int = 0xFEED) -> ring.RingWriter:
    ring.RingWriter(d / job / f"{rank}.steps", rank, job, 16, ring.STEP_MAGIC).write_step(0, 10, 20, forward_ms=2.0)
    (d / job / f"{rank}.meta.json").write_text(json.dumps(
        {"v": 1, "job": job, "rank": rank, "world_size": 2, "node": "n1", "local_rank": rank,
         "coords": {"dp": rank}}))
    w = ring.RingWriter(d / job / f"{rank}.ring", rank, job, 64)
    w.write(wire.KIND_COMM_INIT, 0, 0, comm, 0, 5, 5, 0, rank, -1, 2, 1)
    return w


def test_agent_publishes_calls_progress_topology_steps_hw(kafka_settings, tmp_path):
    s = kafka_settings.replace(ring_dir=str(tmp_path), node_name="n1")
    writers = [rank_files(tmp_path, "jA", r) for r in (0, 1)]
    for seq in range(3):
        for r, w in enumerate(writers):
            w.write(wire.KIND_CALL, wire.OP_ALLREDUCE, 0, 0xFEED, seq, 100 + seq, 0, 64, r, -1, 2, 0)
            if seq < 2 or r == 0:  # rank 1 never completes seq 2
                w.write(wire.KIND_CALL, wire.OP_ALLREDUCE, 1, 0xFEED, seq, 100 + seq, 200 + seq, 64, r, -1, 2, 0)
    agent = Agent(s, s.kafka_bootstrap, nvml=ReplayReader(NVML), ib_root=str(tmp_path / "no-ib"))
    deadline = time.monotonic() + 20
    while not agent.hw.worker.samples and time.monotonic() < deadline:
        time.sleep(0.05)  # NVML's thread has taken its first pass
    agent.tick()
    agent.close()
    got = consume(s, [topics.CALLS, topics.PROGRESS, topics.TOPOLOGY, topics.STEPS, topics.HW],
                  lambda g: {t for t, _, _ in g} >= {topics.CALLS, topics.PROGRESS, topics.TOPOLOGY, topics.STEPS,
                                                    topics.HW} and sum(t == topics.TOPOLOGY for t, _, _ in g) >= 2)
    calls = [wire.decode_batch(v, comm=0xFEED) for t, k, v in got if t == topics.CALLS]
    assert all(k == "jA/000000000000feed" for t, k, _ in got if t in (topics.CALLS, topics.PROGRESS))
    assert sum(len(c) for c in calls) == 2 + 11
    prog = [messages.decode(topics.PROGRESS, v) for t, _, v in got if t == topics.PROGRESS][-1]
    assert prog["node"] == "n1"
    assert {r["rank"]: (r["started"], r["completed"]) for r in prog["ranks"]} == {0: (2, 2), 1: (2, 1)}
    topo = {m["rank"]: m for m in (messages.decode(topics.TOPOLOGY, v) for t, _, v in got if t == topics.TOPOLOGY)}
    assert {r: (m["world_size"], m["coords"], m["node"]) for r, m in topo.items()} == {
        0: (2, {"dp": 0}, "n1"), 1: (2, {"dp": 1}, "n1")}
    steps = [messages.decode(topics.STEPS, v) for t, _, v in got if t == topics.STEPS]
    assert {(m["rank"], m["iteration"], m["phases"]["forward_ms"]) for m in steps} == {(0, 0, 2.0), (1, 0, 2.0)}
    hw = [messages.decode(topics.HW, v) for t, _, v in got if t == topics.HW]
    assert {m.get("rank") for m in hw if "gpu" in m} >= {0, 1} and any("cpu_pct" in m for m in hw)


def test_kafka_outage_keeps_newest_data_bounded_and_recovers(settings, tmp_path):
    port = free_port()
    s = settings.replace(ring_dir=str(tmp_path), kafka_bootstrap=f"127.0.0.1:{port}", agent_buffer_bytes=8192)
    w = rank_files(tmp_path, "jB", 0)
    agent = Agent(s, s.kafka_bootstrap, max_inflight=4)
    t0 = time.monotonic()
    seq = 0
    for _ in range(30):
        for _ in range(20):
            w.write(wire.KIND_CALL, wire.OP_ALLREDUCE, 1, 0xFEED, seq, 1, 2, 8, 0, -1, 2, 0)
            seq += 1
        agent.tick()
    assert time.monotonic() - t0 < 5.0  # never waited on the absent broker
    assert agent.outbox.dropped > 0 and agent.outbox.bytes <= 8192
    broker = EmbeddedBroker(port=port).start()
    try:
        from commwatch.kafka import ensure_topics

        ensure_topics(s, broker.bootstrap)
        deadline = time.monotonic() + 20
        while agent.outbox.queue and time.monotonic() < deadline:
            agent.tick()
            time.sleep(0.05)
        agent.close()
        got = consume(s, [topics.CALLS], lambda g: any(
            int(wire.decode_batch(v)["seq"].max()) == seq - 1 for _, _, v in g))
        newest = max(int(wire.decode_batch(v)["seq"].max()) for _, _, v in got)
        assert newest == seq - 1  # the last records written made it once the broker came back
    finally:
        broker.stop()
