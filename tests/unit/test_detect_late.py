"""Recommender-shaped jobs (all comms over the whole job). A rank late at its job's
collectives, call after call, that computes like its peers between them: its work outside
every call (a data loader) is slower. Judged only in jobs whose comms all span the whole job.
P1 only once a slow rank has cost half the job's time for a while. A rank that carries more
data than its peers (hot tables) is advice, not a fault."""

import numpy as np
import pytest

from commwatch.streams.detect import job_slow, late
from detect_jobs import MS, S, T0, HandJob, replayed

RANKS = list(range(8))


def _recsys(settings, seconds: int, late_ms=lambda t: 0.0, tp: bool = False, hot: float = 1.0) -> HandJob:
    """8 ranks; per iteration: the input all-to-all (comm 1) once every rank's batch is ready
    (loaders take 0-2 ms; rank 3 `late_ms(seconds into the job)` more), 10 ms, the embedding
    all-to-all forward (comm 2), 30 ms, its backward (comm 2), 10 ms, the dense all-reduce
    (comm 3). `tp`: ranks also pair up in four two-rank comms (a 3D job), the whole-job
    lateness proving nothing there. `hot`: rank 3 holds hot tables, its lookups (the 30 ms) this
    much longer and its all-to-all sends twice as large from the start."""
    rng = np.random.default_rng(1)
    comms = {1: RANKS, 2: RANKS, 3: RANKS}
    if tp:
        comms.update({10 + i: [2 * i, 2 * i + 1] for i in range(4)})
    job = HandJob(settings, comms, {r: f"n{r // 4}" for r in RANKS}, job="rec")
    seq = {c: 0 for c in comms}

    sizes = {3: 2 << 20} if hot > 1 else None

    def call(c: int, starts: dict[int, int], took: int) -> int:
        end = max(starts.values()) + took
        job.collective(c, seq[c], starts, end, op=8 if c < 3 else 1, nbytes=sizes if c < 3 else None)
        seq[c] += 1
        return end

    t, beat = T0 + 10 * MS, T0
    while t < T0 + seconds * S:
        ready = {r: t + int(rng.uniform(0, 2) * MS) for r in RANKS}
        ready[3] += int(late_ms((t - T0) / S) * MS)
        end = call(1, ready, MS)
        if tp:
            for i in range(4):
                end = max(end, call(10 + i, {r: end + MS for r in comms[10 + i]}, MS))
        for c, work in ((2, 10), (2, 30), (3, 10)):
            took = {r: (work * (hot if r == 3 and work == 30 else 1.0) + rng.uniform(0, 0.5)) * MS for r in RANKS}
            end = call(c, {r: end + int(took[r]) for r in RANKS}, 2 * MS)
        t = end + MS
        if t - beat >= S:
            job.beat(t)
            beat = t
    return job


def _named(job: HandJob) -> dict[int, str]:
    out: dict[int, str] = {}
    for i in job.incidents:
        if i["kind"] == "slow_rank":
            for r in i["culprit_ranks"]:
                out[r] = min(out.get(r, "P3"), i["severity"])
    return out


@pytest.mark.parametrize("drill", [False, True])
def test_a_rank_late_at_every_iteration_is_named(settings, monkeypatch, drill):
    """From 20 s rank 3's batches are ready 25 ms late (iterations ~62 -> ~87 ms): it is
    named, by its lateness, and nobody else. Drill: without the rule nothing is."""
    if drill:
        monkeypatch.setattr(late, "LATE", False)
    job = _recsys(settings, 45, lambda s: 25.0 if s >= 20 else 0.0)
    named = _named(job)
    assert set(named) == (set() if drill else {3}), named
    if not drill:
        inc = next(i for i in job.incidents if i["kind"] == "slow_rank")
        assert inc["evidence"]["signal"] == "late" and inc["opened_ns"] >= T0 + 20 * S, inc


def test_jittery_loaders_name_nobody(settings):
    """Every rank's batch ready within 0-2 ms, for 45 s: nothing."""
    assert _named(_recsys(settings, 45)) == {}


def test_lateness_is_not_judged_where_comms_span_part_of_the_job(settings):
    """The same late rank in a job with two-rank comms besides: nothing is concluded from its
    lateness (a rank late at a whole-job call may have waited in a part's)."""
    job = _recsys(settings, 45, lambda s: 25.0 if s >= 20 else 0.0, tp=True)
    assert not any(i["evidence"].get("signal") == "late" for i in job.incidents if i["kind"] == "slow_rank")


@pytest.mark.parametrize("drill", [False, True])
def test_a_slow_rank_is_p1_only_once_it_has_cost_half_the_time_that_long(settings, monkeypatch, drill):
    """Rank 3's loader 25 ms late from 10 s (the job loses ~30 %), then 150 ms late for 2 s
    at 30 s (more than half): P2, never P1. Drill: P1 as soon as the incident is 10 s old."""
    if drill:
        monkeypatch.setattr(job_slow, "HALF_LASTS", False)
    job = _recsys(settings, 45, lambda s: 150.0 if 30 <= s < 32 else 25.0 if s >= 10 else 0.0)
    assert _named(job) == {3: "P1" if drill else "P2"}, _named(job)


@pytest.mark.parametrize("drill", [False, True])
def test_a_rank_with_hot_tables_is_advice_not_a_fault(settings, monkeypatch, drill):
    """Rank 3 holds hot tables from the start: its lookups take 1.6x, its all-to-all sends are
    twice its peers'. It is named at P3 only, with the data it carries. Drill: judged by its
    time alone, it is a P2."""
    if drill:
        monkeypatch.setattr(job_slow, "HEAVY_BY_DESIGN", False)
    job = _recsys(settings, 45, hot=1.6)
    named = _named(job)
    assert named == {3: "P2" if drill else "P3"}, named
    if not drill:
        inc = next(i for i in job.incidents if i["kind"] == "slow_rank")
        assert inc["evidence"]["bytes_ratio"] >= 1.9 and "by design" in inc["summary"], inc


@pytest.mark.parametrize("drill", [False, True])
def test_a_phase_straggler_is_named_beside_a_hot_rank_that_explains_little(settings, gen_q, monkeypatch, drill):
    """The seventeenth generator's host-enqueue recommender job drawn with 2 (16 ranks, steps
    with phases): rank 5's GPU 1.5x from ~28 s, the job ~25 % slower, only its phases show it;
    hot-table rank 0 is named P3 by its phases (~5 %) at the onset. Rank 5 is named within 10 s
    and rises to P2; its incident does not resolve while the fault lasts. Drill: a rank found
    at all (the hot one) stops the job's loss from being explained by a phase straggler: 5 is
    named 28 s after the onset and resolved mid-fault."""
    if drill:
        monkeypatch.setattr(job_slow, "LOCAL_EXPLAINED", 1e-9)  # only where nothing is found, as before
    cap, truth = gen_q("slow_gpu_enq", seed=2)
    assert truth["culprit_ranks"] == [5]
    events = [e for e in replayed(settings, cap) if e["kind"] == "slow_rank" and e["culprit_ranks"] == [5]]
    opened = min(e["opened_ns"] for e in events)
    resolved = [e for e in events if e["status"] == "resolved"]
    if drill:
        assert opened - truth["onset_ns"] > 15 * S and resolved, events
    else:
        assert opened - truth["onset_ns"] < 10 * S and not resolved, events
        assert any(e["severity"] == "P2" for e in events)


@pytest.mark.parametrize("drill", [False, True])
def test_a_rank_late_at_one_call_a_step_is_named_across_windows_cut_by_time(settings, gen_u, monkeypatch, drill):
    """The twenty-first generator's data-parallel job (32 ranks, GPU-timed): rank 21's CPU
    optimizer 1.6x slower from 40.4 s, it enters the parameter all-gather after it ~0.4 s
    after its peers each step and is on time at every other call. The comm's windows, cut by
    time, alternate: four calls holding that all-gather (a quarter of their time waited for
    it), then two with nobody late. Named by its lateness within 10 s of the onset, its
    incident open to the capture's end. Drill: a quiet window ends the run (`MAX_QUIET` 0):
    the lateness names nothing (its compute intervals named it P3 after 24 s, resolved while
    it was still slow)."""
    if drill:
        monkeypatch.setattr(late, "MAX_QUIET", 0)
    cap, truth = gen_u("s02_numa_offload_gpu")
    assert truth["culprits"] == [21]
    events = [e for e in replayed(settings, cap) if e["kind"] == "slow_rank" and e["culprit_ranks"]]
    by_late = [e for e in events if e["evidence"].get("signal") == "late"]
    assert {r for e in events for r in e["culprit_ranks"]} <= {21}
    if drill:
        assert by_late == []
        return
    first = by_late[0]
    assert first["status"] == "open" and first["ts_ns"] - truth["onset_ns"] <= 10 * S
    assert not any(e["status"] == "resolved" for e in events)
