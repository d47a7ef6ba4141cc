"""The node agent against the real broker: a writer killed with SIGKILL, and NVML that hangs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from commwatch import messages, ring, topics, wire
from commwatch.producers.agent import agent as agentmod
from commwatch.producers.agent.agent import Agent
from commwatch.producers.agent.hardware import ReplayReader

from agentkit import consume

pytestmark = pytest.mark.integration
COMM = 0xBEEF

WRITER = """
import json, sys, time
from commwatch import ring, wire
d, job, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
w = ring.RingWriter(ring.ring_path(d, job, rank), rank, job, 64)
ring.RingWriter(ring.companion(w.path, "steps"), rank, job, 16, ring.STEP_MAGIC).write_step(0, 10, 20)
ring.companion(w.path, "meta.json").write_text(json.dumps({"v": 1, "job": job, "rank": rank, "world_size": 2}))
w.write(wire.KIND_COMM_INIT, 0, 0, 0xBEEF, 0, 5, 5, 0, rank, -1, 2, 1)
for seq in range(5):
    w.write(wire.KIND_CALL, wire.OP_ALLREDUCE, 0, 0xBEEF, seq, 100 + seq, 0, 64, rank, -1, 2, 0)
    w.write(wire.KIND_CALL, wire.OP_ALLREDUCE, 1, 0xBEEF, seq, 100 + seq, 200 + seq, 64, rank, -1, 2, 0)
w.write(wire.KIND_CALL, wire.OP_ALLREDUCE, 0, 0xBEEF, 5, 105, 0, 64, rank, -1, 2, 0)
print("ready", flush=True)
time.sleep(3600)
"""


def run_agent(agent: Agent) -> tuple[threading.Event, threading.Thread]:
    stop = threading.Event()
    t = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    t.start()
    return stop, t


def progress_of(got: list) -> list[dict]:
    return [messages.decode(topics.PROGRESS, v) for t, _, v in got if t == topics.PROGRESS]


def test_killed_writer_is_drained_reported_exited_then_forgotten_and_its_files_removed(kafka_settings, tmp_path):
    s = kafka_settings.replace(ring_dir=str(tmp_path), node_name="n1", heartbeat_period_s=0.2)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), "jK", "0"], stdout=subprocess.PIPE,
                              text=True)
    assert writer.stdout.readline().strip() == "ready"
    live = ring.RingWriter(ring.ring_path(tmp_path, "jK", 1), 1, "jK", 64)  # rank 1 stays alive
    live.write(wire.KIND_COMM_INIT, 0, 0, COMM, 0, 5, 5, 0, 1, -1, 2, 1)
    agent = Agent(s, s.kafka_bootstrap)
    stop, t = run_agent(agent)
    try:
        consume(s, [topics.PROGRESS], lambda g: any(r["rank"] == 0 for m in progress_of(g) for r in m["ranks"]))
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(10)

        def settled(g: list) -> bool:
            prog = progress_of(g)
            exited = [i for i, m in enumerate(prog) if any(r.get("exited") for r in m["ranks"])]
            return len(exited) >= agentmod.EXIT_BEATS and len(prog) - exited[-1] > 6

        got = consume(s, [topics.PROGRESS, topics.CALLS], settled, timeout_s=30)
    finally:
        stop.set()
        t.join(10)
        writer.kill()
    prog = progress_of(got)
    assert settled(got), [m["ranks"] for m in prog]
    named = [[r for r in m["ranks"] if r["rank"] == 0] for m in prog]
    exited = [i for i, rs in enumerate(named) if rs and rs[0].get("exited")]
    assert len(exited) == agentmod.EXIT_BEATS and exited == list(range(exited[0], exited[0] + len(exited)))
    assert named[exited[0]][0]["started"] == 5 and named[exited[0]][0]["completed"] == 4  # the last known
    assert not any(named[exited[-1] + 1:]), "a heartbeat named rank 0 after its exit was reported"
    assert all(any(r["rank"] == 1 for r in m["ranks"]) for m in prog[exited[-1] + 1:])  # the comm goes on
    calls = [wire.decode_batch(v) for tp, _, v in got if tp == topics.CALLS]
    assert sum(int(((c["rank"] == 0) & (c["kind"] == wire.KIND_CALL)).sum()) for c in calls) == 11
    assert sorted(p.name for p in (tmp_path / "jK").iterdir()) == ["1.ring"]  # rank 0's files are gone
    live.close(unlink=True)


def test_a_hung_nvml_call_does_not_stall_heartbeats(kafka_settings, tmp_path):
    # SCRIPTED NVML: two GPUs; reading GPU 1 blocks for 4 s in the third pass, as a GPU that
    # fell off the bus blocks NVML. Its rank must be reported as not answering, and the
    # heartbeats must go on meanwhile.
    def device(i: int, block: float = 0.0) -> dict:
        raw = {"index": i, "uuid": f"GPU-scripted-{i}", "clock_sm": 1980, "ecc_uncorrected_volatile": 0,
               "xid_events": []}
        return {**raw, "_block_s": block} if block else raw

    replay = tmp_path / "scripted_nvml_hang.jsonl"
    replay.write_text("\n".join(json.dumps({"ts_ns": i, "devices": [device(0), device(1, 4.0 if i == 2 else 0)]})
                                for i in range(60)))
    s = kafka_settings.replace(ring_dir=str(tmp_path / "rings"), node_name="n1", heartbeat_period_s=0.1,
                               hw_period_s=0.1, agent_nvml_timeout_s=0.5)
    w = ring.RingWriter(ring.ring_path(s.ring_dir, "jN", 0), 0, "jN", 64)
    ring.companion(w.path, "meta.json").write_text(json.dumps({"v": 1, "job": "jN", "rank": 0, "local_rank": 1}))
    w.write(wire.KIND_COMM_INIT, 0, 0, COMM, 0, 5, 5, 0, 0, -1, 1, 1)
    agent = Agent(s, s.kafka_bootstrap, nvml=ReplayReader(replay), ib_root=str(tmp_path / "no-ib"))
    stop, t = run_agent(agent)

    def timeouts(g: list) -> list[dict]:
        return [m for m in (messages.decode(topics.HW, v) for tp, _, v in g if tp == topics.HW)
                if m.get("nvml_timeout")]

    def recovered(g: list) -> bool:
        hw = [messages.decode(topics.HW, v) for tp, _, v in g if tp == topics.HW]
        last = max((m["ts_ns"] for m in timeouts(g)), default=None)
        return last is not None and any(m.get("gpu") == "GPU-scripted-1" and "sm_clock_mhz" in m
                                        and m["ts_ns"] > last for m in hw)

    try:
        got = consume(s, [topics.PROGRESS, topics.HW], recovered, timeout_s=40)
    finally:
        stop.set()
        t.join(10)
        w.close(unlink=True)
    out = timeouts(got)
    assert out and {(m["gpu"], m["rank"]) for m in out} == {("GPU-scripted-1", 0)}
    assert recovered(got)
    first, last = min(m["ts_ns"] for m in out), max(m["ts_ns"] for m in out)
    beats = [m["ts_ns"] for m in progress_of(got) if first <= m["ts_ns"] <= last]
    # NVML blocked for ~3.5 s of this window; at one heartbeat per 0.1 s there are ~35. A loop
    # that waited on NVML would have sent none.
    assert (last - first) > 2e9 and len(beats) >= 8


def test_a_writer_that_finalises_is_reported_exited_once_then_forgotten(kafka_settings, tmp_path):
    s = kafka_settings.replace(ring_dir=str(tmp_path), node_name="n1", heartbeat_period_s=0.2)
    w = ring.RingWriter(ring.ring_path(tmp_path, "jF", 0), 0, "jF", 64)
    w.write(wire.KIND_COMM_INIT, 0, 0, COMM, 0, 5, 5, 0, 0, -1, 1, 1)
    w.write(wire.KIND_CALL, wire.OP_ALLREDUCE, wire.FLAG_COMPLETED, COMM, 0, 10, 20, 64, 0, -1, 1, 0)
    agent = Agent(s, s.kafka_bootstrap)
    stop, t = run_agent(agent)
    try:
        consume(s, [topics.PROGRESS], lambda g: bool(progress_of(g)))
        w.write(wire.KIND_COMM_DESTROY, 0, 0, COMM, 0, 30, 30, 0, 0, -1, 1, 0)  # what the hook does at exit
        time.sleep(0.35)  # heartbeats pass between leaving the comm and the exit
        w.close(unlink=True)
        got = consume(s, [topics.PROGRESS], lambda g: sum(
            1 for m in progress_of(g) for r in m["ranks"] if r.get("exited")) >= agentmod.EXIT_BEATS, timeout_s=20)
        time.sleep(1.0)  # five more heartbeat periods
        n = len(progress_of(got))  # read all from the start again: nothing may follow the exit
        everything = progress_of(consume(s, [topics.PROGRESS], lambda g: len(progress_of(g)) > n + 2, timeout_s=8))
    finally:
        stop.set()
        t.join(10)
    assert progress_of(got)
    exited = [r for m in everything for r in m["ranks"] if r.get("exited")]
    assert len(exited) == agentmod.EXIT_BEATS and exited[0]["completed"] == 0
    assert everything[-1]["ranks"][0].get("exited")  # no heartbeat after the exit was reported
    assert not (tmp_path / "jF" / "0.ring").exists()
