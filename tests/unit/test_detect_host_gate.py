"""A launch-bound host under a host-enqueue probe: the rank whose enqueue the job's calls wait for.

Host-enqueue records carry no device time, so a slow GPU is invisible in them; a host that
cannot keep up is not: its calls complete at once after it enqueues them, while its peers,
whose hosts run ahead, enqueued them long before (`windows.enqueue_gate`, `host_gate.py`).
Two independent models of a launch-bound host: the job model's (`jm.SlowHost`, written for
this rule) and the fifth generator's noisy CPU neighbour (written before it, apart).
"""

from __future__ import annotations

import numpy as np
import pytest

from commwatch.producers import jobmodel as jm
from commwatch.streams import bench_scenarios as bs
from commwatch.streams.bench_detect import feed
from commwatch.streams.detect import host_gate, windows
from commwatch.streams.detect.comm_state import CommState
from detect_jobs import slow_ranks_of

S = 1_000_000_000


def _slow_host(probe: str, factor: float = 1.5) -> jm.JobConfig:
    return jm.JobConfig(job="gate", tp=2, pp=2, dp=4, probe=probe, duration_s=45.0, seed=5,
                        faults=(jm.SlowHost(rank=5, factor=factor, at_s=15.0),) if factor else ())


def _opened(settings, cfg: jm.JobConfig) -> tuple[list[dict], jm.JobRun]:
    run = jm.run_job(cfg)
    events, refused = feed(bs._built([run], [""], 0.0), settings)
    assert refused == 0
    return [e for e in events if e["status"] == "open" and e["severity"] in ("P0", "P1", "P2", "P3")], run


@pytest.mark.parametrize("drill", [False, True])
def test_a_launch_bound_host_under_host_enqueue_is_named(settings, monkeypatch, drill):
    """Job model, TP 2 x PP 2 x DP 4, host-enqueue: rank 5's host spends 1.5 s per second of
    compute it enqueues from 15 s (the job's steps 23 % longer). Its calls complete ~80 ms
    after it enqueues them (the probe's 80 ms poll), 500-1000 ms after its peers do. Named
    alone within 3.5 s of the onset (3.3 s: stage 2 evaluates when its run of gating
    windows begins to hold, not at its next periodic evaluation, 3.8 s), its summary saying so.
    Drill: no window counts as gated (`host_gate.GATE_SHARE` above 1, and no run of partly
    gated windows holds): only the job's slowdown is reported, with no culprit."""
    if drill:
        monkeypatch.setattr(host_gate, "GATE_SHARE", 1.01)
        monkeypatch.setattr(host_gate, "STEADY_WINDOWS", 10**6)
    opened, run = _opened(settings, _slow_host("enqueue"))
    named = [e["culprit_ranks"] for e in opened if e["kind"] == "slow_rank" and e["culprit_ranks"]]
    if drill:
        assert named == []
        return
    assert named == [[5]]
    first = next(e for e in opened if e["culprit_ranks"] == [5])
    print("named after", (first["ts_ns"] - run.truth[0]["onset_ns"]) / S)
    assert first["ts_ns"] - run.truth[0]["onset_ns"] <= 3.5 * S
    assert first["evidence"]["signal"] == "host" and "host is the bottleneck" in first["summary"]
    assert first["evidence"]["turn_ms"] < 0.25 * first["evidence"]["peers_turn_ms"]


def test_a_healthy_host_enqueue_job_gates_nothing(settings):
    """The same job without the fault: no window of any comm has a member gating a call."""
    opened, _ = _opened(settings, _slow_host("enqueue", factor=0))
    assert opened == []


@pytest.mark.parametrize("drill", [False, True])
def test_generator_e_noisy_cpu_neighbour_is_named(settings, gen_e, monkeypatch, drill):
    """Generator E (TP 4 x PP 2 x DP 4, host-enqueue, 10 ms completion poll): rank 13's host
    launch-bound from 25 s (~1.35x). Nothing named it before this rule (its TP group's phases
    hold its waits). Drill: the windows report no gating (`windows.GATE_RATIO` 0)."""
    if drill:
        monkeypatch.setattr(windows, "GATE_RATIO", 0.0)
    cap, truth = gen_e("f02b_cpu_contention_rank")
    assert truth["jobs"][0]["culprits"] == [13]
    assert slow_ranks_of(settings, cap) == ([] if drill else [[13]])


def test_a_host_pause_gates_a_few_calls_not_seconds_of_them():
    """A host pause (a garbage collection) gates the calls right after it; a run of gating
    windows must span `GATE_HOLD_NS` with two windows at least. Stage 2 evaluates once a run
    begins to hold (`fresh`)."""
    gate = host_gate.HostGate()

    def win(t_s: float, share: float, n: int = 8) -> None:
        gate.window({"comm": "c1", "ts_ns": int(t_s * S), "ranks": [0, 1, 2, 3], "gate": [0.0, share, 0.0, 0.0],
                     "gate_n": n, "turn_ms": [400.0, 5.0, 390.0, 410.0]})

    win(10.0, 0.0)
    win(11.0, 1.0)
    assert gate.evaluate(11 * S) == {}  # one window
    win(11.5, 1.0)
    assert gate.evaluate(11.5 * S) == {}  # two, 0.5 s apart
    win(12.0, 0.2)  # the pause is over
    win(13.0, 0.9)
    assert not gate.fresh
    win(14.0, 0.8)
    assert gate.fresh
    found = gate.evaluate(14 * S)
    assert list(found) == [1] and found[1]["onset_ns"] == 13 * S and found[1]["peers_turn_ms"] == 400.0
    assert gate.waits_for(0, 14 * S) and not gate.waits_for(1, 14 * S)
    assert not gate.fresh
    assert gate.evaluate(20 * S) == {}  # no gating window for 6 s: stale


def test_a_host_slow_in_part_of_its_step_gates_some_calls_of_every_window():
    """A host slow in one phase of its step (its CPU optimizer) gates the calls after it and no
    other: a share of each window under `GATE_SHARE`. One member alone gating some calls in
    `STEADY_WINDOWS` windows in a row spanning `STEADY_HOLD_NS` is found; a window in which
    nobody, or another member too, gated one breaks the run."""
    gate = host_gate.HostGate()

    def win(t_s: float, gates: list[float]) -> None:
        gate.window({"comm": "c1", "ts_ns": int(t_s * S), "ranks": [0, 1, 2, 3], "gate": gates,
                     "gate_n": 6, "turn_ms": [520.0, 380.0, 510.0, 530.0]})

    for t in range(10, 14):
        win(t, [0.0, 0.167, 0.0, 0.0])
    win(14, [0.0, 0.167, 0.167, 0.0])  # another member gated one too: not a host slower than the rest
    for t in range(15, 19):
        win(t, [0.0, 0.333, 0.0, 0.0])
    assert gate.evaluate(18 * S) == {} and not gate.fresh  # four windows
    win(19, [0.0, 0.167, 0.0, 0.0])
    assert gate.fresh
    found = gate.evaluate(19 * S)
    assert list(found) == [1] and found[1]["onset_ns"] == 15 * S and found[1]["gated_windows"] == 5
    assert gate.waits_for(2, 19 * S)
    win(20, [0.0, 0.0, 0.0, 0.0])  # the host keeps up again
    assert gate.evaluate(20 * S) == {}


@pytest.mark.parametrize("drill", [False, True])
def test_generator_u_cpu_optimizer_slower_on_one_host_is_named(settings, gen_u, monkeypatch, drill):
    """The twenty-first generator's ZeRO-Offload job (DP 128, host-enqueue): rank 72's CPU Adam
    1.6x slower from 40.6 s, the job's steps 28 % longer, its 127 peers waiting 0.42 s a step
    inside the parameter all-gather it enqueues last (1-2 of each window's 6 calls). Named
    alone. Drill: a run of partly gated windows never holds (`STEADY_WINDOWS` 10**6): a P3
    naming no rank ("no rank explains it"), as before this rule."""
    if drill:
        monkeypatch.setattr(host_gate, "STEADY_WINDOWS", 10**6)
    cap, truth = gen_u("s03_numa_offload_enq_128")
    assert truth["culprits"] == [72]
    assert slow_ranks_of(settings, cap) == ([[]] if drill else [[72]])

    """Enqueue and observed completion are both on the member's node clock: a node clock
    1 s off changes nothing. Completions whose probe gave up (COMPLETION_LOST) or that carry
    device times (GPU_TIMED) are not turns."""
    st = CommState("j", 1, 64)
    st.n = 3
    st.host_done = np.ones(3, bool)
    st.st = np.array([[1_000, 1_000 + S, 2_000], [5_000, 5_000 + S, 6_000]], np.int64) + 10 * S
    st.en = st.st + np.array([[400e6, 5e6, 380e6], [420e6, 6e6, 410e6]]).astype(np.int64)
    rep = windows.enqueue_gate(st, np.array([0, 1]))
    assert rep["gate"] == [0.0, 1.0, 0.0] and rep["gate_n"] == 2
    st.en[1, 2] = 1  # one member's completion not observed: that instance does not count
    assert windows.enqueue_gate(st, np.array([0, 1]))["gate_n"] == 1


def test_only_host_enqueue_members_are_compared_in_a_comm_with_both_probes():
    """A data-parallel comm over nodes of both probes (the twentieth generator's mixed job):
    a GPU-timed member's record spans its time inside the call (5 ms), a host-enqueue
    member's from its host's enqueue to the completion it observed (400 ms, its host ran
    ahead). Only the host-enqueue members are compared: nobody gated, the GPU-timed members'
    turns are unknown. With one host-enqueue member left, nothing is compared."""
    st = CommState("j", 1, 64)
    st.n = 4
    st.host_done = np.array([False, False, True, True])
    st.st = np.array([[1_000, 1_500, 2_000, 3_000], [5_000, 5_500, 6_000, 7_000]], np.int64) + 10 * S
    st.en = st.st + np.array([[5e6, 6e6, 400e6, 410e6], [5e6, 4e6, 420e6, 405e6]]).astype(np.int64)
    rep = windows.enqueue_gate(st, np.array([0, 1]))
    assert rep["gate"] == [0.0, 0.0, 0.0, 0.0] and rep["gate_n"] == 2
    assert rep["turn_ms"][:2] == [None, None] and 400 <= rep["turn_ms"][2] <= 420
    st.host_done[3] = False
    assert windows.enqueue_gate(st, np.array([0, 1])) == {}
