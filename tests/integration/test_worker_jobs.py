"""The live worker is the replay detector: the same capture gives the same incidents both
ways; and in one live worker every job runs on its own clock.

Both tests publish to a worker of their own (a fresh topic prefix), started on the real
embedded broker, and read `cw.alerts.v1` back.
"""

from __future__ import annotations

import io
import json
import time
import uuid

import pytest

from commwatch import topics
from commwatch.capture import CaptureWriter
from commwatch.kafka import Sender, ensure_topics
from commwatch.producers.simulate import JobSpec, parse_fault, simulate
from commwatch.producers.simulate.spec import DEFAULT_START_NS
from commwatch.settings import Settings
from commwatch.streams.app import stream_topics
from commwatch.streams.replay import replay
from test_worker_live import read_all, start_worker

pytestmark = pytest.mark.integration
S = 1_000_000_000


def _worker(broker, tmp_path, tag: str):
    s = Settings.load(env={}, kafka_bootstrap=broker.bootstrap, topic_prefix=tag + uuid.uuid4().hex[:8],
                      data_dir=str(tmp_path), kafka_partitions=2, metrics_port=0)
    ensure_topics(s, broker.bootstrap, stream_topics(s))
    proc, _ = start_worker(s, tmp_path / "worker.log")
    return s, proc


def _publish(s: Settings, msgs, sent_at=lambda m: m.ts_ns) -> None:
    """Send the messages as their producers would have: paced by when each was sent."""
    sender = Sender(s, s.kafka_bootstrap)
    t0, w0 = sent_at(msgs[0]), time.monotonic()
    for m in msgs:
        ahead = (sent_at(m) - t0) / 1e9 - (time.monotonic() - w0)
        if ahead > 0.05:
            sender.flush(5)
            time.sleep(ahead)
        sender.send(s.topics.name(m.topic), m.key, m.value, timestamp_ms=m.ts_ns // 1_000_000)
    assert sender.flush(30) == 0


def _opens(events: list[dict]) -> list[tuple]:
    return sorted({(e["job"], e["kind"], tuple(e["culprit_ranks"])) for e in events if e["status"] == "open"})


def _wait_alerts(s: Settings, want, timeout_s: float = 120.0) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        events = [json.loads(v) for v in read_all(s, topics.ALERTS)]
        if want(events) or time.monotonic() > deadline:
            return events
        time.sleep(2)


def test_live_worker_and_replay_give_the_same_incidents(broker, tmp_path):
    """Parity: one capture (a slow rank, then a hang) published to a live worker on the real
    broker as its producers would (paced by event time), and replayed offline: the same
    incidents open, with the same culprits."""
    spec = JobSpec(job="parity", tp=2, pp=2, dp=2, duration_s=30, step_s=0.5, seed=11)
    sim = simulate(spec, [parse_fault("slow:rank=5,factor=1.6,at=6s"), parse_fault("hang:rank=2,at=18s")])
    msgs = list(sim.messages())
    path = tmp_path / "parity.cwcap"
    with CaptureWriter(path) as w:
        for m in msgs:
            w.write(m)
    out = io.StringIO()
    replay(str(path), Settings.load(env={}, data_dir=str(tmp_path)), out, io.StringIO())
    offline = [json.loads(line) for line in out.getvalue().splitlines()]
    expected = _opens(offline)
    assert expected == [("parity", "hang", (2,)), ("parity", "slow_rank", (5,))], expected

    s, proc = _worker(broker, tmp_path, "par")
    try:
        _publish(s, msgs)
        live = _wait_alerts(s, lambda ev: len(_opens(ev)) >= len(expected))
        time.sleep(5)  # nothing more opens
        live = [json.loads(v) for v in read_all(s, topics.ALERTS)]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert _opens(live) == expected


def test_a_job_whose_clocks_run_60_s_fast_changes_no_other_jobs_detection(broker, tmp_path):
    """Three jobs in one live worker, published as their producers would (paced): `ahead`
    (every node clock 60 s fast, healthy), `stall` (one rank pauses 3 s once: nothing to
    page) and `hung` (a hang at 8 s): the stall raises no P0/P1, and the hang is named after
    its threshold, not seconds after its onset."""
    base = DEFAULT_START_NS + 10_000 * S
    jobs = [
        (JobSpec(job="ahead", tp=2, dp=2, duration_s=24, step_s=0.5, seed=1, start_ns=base + 60 * S), []),
        (JobSpec(job="stall", tp=2, dp=2, duration_s=24, step_s=0.5, seed=2, start_ns=base),
         ["blip:rank=1,at=10s,ms=3000"]),
        (JobSpec(job="hung", tp=2, dp=2, duration_s=24, step_s=0.5, seed=3, start_ns=base), ["hang:rank=3,at=8s"]),
    ]
    # what arrives together is what happens together: the fast job's messages carry stamps
    # 60 s ahead, but are sent when the others' of the same moment are
    def sent_at(m) -> int:
        return m.ts_ns - (60 * S if m.key.startswith("ahead") else 0)

    msgs = sorted((m for spec, faults in jobs for m in simulate(spec, [parse_fault(f) for f in faults]).messages()),
                  key=sent_at)
    s, proc = _worker(broker, tmp_path, "clk")
    try:
        _publish(s, msgs, sent_at)
        events = _wait_alerts(s, lambda ev: any(e["job"] == "hung" and e["kind"] == "hang" for e in ev))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    paging = [e for e in events if e["status"] == "open" and e["severity"] in ("P0", "P1")]
    assert [(e["job"], e["kind"], e["culprit_ranks"]) for e in paging] == [("hung", "hang", [3])], paging
    hang = paging[0]
    onset = base + 8 * S
    assert hang["opened_ns"] - onset >= hang["evidence"]["threshold_s"] * S * 0.9


def test_a_job_whose_node_clocks_disagree_by_seconds_pages_only_its_hang(broker, tmp_path):
    """One job (the independent job model) whose node clocks are 2-6 s apart, published as
    its agents send (paced by true time; each message stamped by its node's clock), with a
    hang at 10 s: the live worker, its wall clock the reference, learns how far each node's
    clock runs behind (`node_lag.py`) and pages that hang once, naming its rank; no node is
    taken for lost and no other call for hung."""
    from commwatch.producers import jobmodel as jm

    cfg = jm.JobConfig(job="nodeclk", tp=2, pp=2, dp=4, gpus_per_node=4, duration_s=24.0, seed=4,
                       clock_offset_ms=(2000.0, 6000.0), faults=(jm.HostHang(rank=9, at_s=10.0),))
    run = jm.run_job(cfg)
    offsets = [c.offset_s for c in run.clocks]
    assert max(offsets) - min(offsets) > 2.0
    pairs = jm.merge_received([run])
    sent = {id(m): t for m, t in pairs}
    s, proc = _worker(broker, tmp_path, "nclk")
    try:
        _publish(s, [m for m, _ in pairs], lambda m: sent[id(m)])
        events = _wait_alerts(s, lambda ev: any(e["kind"] == "hang" for e in ev), timeout_s=60.0)
        time.sleep(3)  # nothing more opens
        events = [json.loads(v) for v in read_all(s, topics.ALERTS)]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    paging = [e for e in events if e["status"] == "open" and e["severity"] in ("P0", "P1")]
    assert [(e["kind"], e["culprit_ranks"]) for e in paging] == [("hang", [9])], paging
