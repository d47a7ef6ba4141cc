"""A hold that recurs is a routine, not a hang: rank 0 writing a checkpoint alone at every
twelfth iteration while every other rank waits for it inside a collective (job model runs fed in
event-time order through the detector, as `commwatch bench detect` feeds them).

- The first such hold pages a P0 naming rank 0 (a rank that never came back looks the same)
  and resolves once rank 0 progresses; the next ones, the same roots silent while the others
  wait on them, page nothing while they last under twice the longest seen.
- A hold that does not end (rank 0 hangs at its third checkpoint) is named, one P0 naming
  rank 0, once it has lasted twice the longest hold seen.
"""

from __future__ import annotations

import pytest

from commwatch.producers import jobmodel as jm
from commwatch.streams import bench_scenarios as bs
from commwatch.streams.bench_detect import feed
from commwatch.streams.detect import job_hangs

S = 1_000_000_000
BASE = dict(job="ck", tp=2, pp=2, dp=4, gpus_per_node=4, duration_s=100.0, seed=4, checkpoint_every=12,
            checkpoint_s=(16.0, 20.0), checkpoint_ranks=(0,))


def _hangs(settings, **kw) -> tuple[list[dict], jm.JobRun]:
    run = jm.run_job(jm.JobConfig(**{**BASE, **kw}))
    events, refused = feed(bs._built([run], [""], 0.0), settings)
    assert refused == 0
    return [e for e in events if e["kind"] in ("hang", "comm_hang") and e["status"] == "open"], run


def _checkpoints(run: jm.JobRun) -> list[tuple[float, float]]:
    """When rank 0's host began each checkpoint it wrote, and how long it took (seconds)."""
    marks, plan = run.engine.ranks[0].marks, run.engine.ranks[0].plan
    return [(marks[it], plan.checkpoints[it]) for it in sorted(plan.checkpoints) if it < len(marks)]


@pytest.mark.parametrize("drill", [False, True])
def test_a_checkpoint_rank_0_writes_alone_pages_once_not_at_every_checkpoint(settings, monkeypatch, drill):
    if drill:  # every hold judged as the first: one P0 per checkpoint
        monkeypatch.setattr(job_hangs.HangRules, "_known_hold", lambda self, js, roots, waited: False)
    opened, run = _hangs(settings)
    ckpts = _checkpoints(run)
    assert len(ckpts) >= 3 and all(d >= 16.0 for _, d in ckpts)  # each longer than the threshold
    assert {tuple(e["culprit_ranks"]) for e in opened} == {(0,)}
    assert (len(opened) >= 2) if drill else (len(opened) == 1), [e["summary"] for e in opened]
    assert opened[0]["culprit_ranks"] == [0]
    assert (opened[0]["opened_ns"] - run.config.start_ns) / S < ckpts[0][0] + ckpts[0][1]  # in the first


@pytest.mark.parametrize("drill", [False, True])
def test_a_rank_0_that_never_returns_from_its_third_checkpoint_is_named_once(settings, monkeypatch, drill):
    if drill:  # a known hold never turns into a hang
        monkeypatch.setattr(job_hangs, "HOLD_FACTOR", 1e9)
    _, healthy = _hangs(settings)
    ckpts = _checkpoints(healthy)
    at = ckpts[2][0] + 1.0  # inside the third checkpoint: rank 0 never comes back
    opened, _ = _hangs(settings, duration_s=140.0, faults=(jm.HostHang(0, at),))
    if drill:
        assert len(opened) == 1  # the first checkpoint's, and the hang never named
        return
    assert [e["culprit_ranks"] for e in opened] == [[0], [0]], [e["summary"] for e in opened]
    late = (opened[1]["opened_ns"] - healthy.config.start_ns) / S - ckpts[2][0]
    longest = max(d for _, d in ckpts[:2])
    # named once it lasted twice the longest hold seen (a hold is timed from the first wait)
    assert 2 * longest - 3.0 <= late <= 2 * longest + 6.0, (late, longest)


@pytest.mark.parametrize("drill", [False, True])
def test_a_checkpoint_every_rank_writes_is_a_stall_once_not_at_every_checkpoint(settings, monkeypatch, drill):
    """Every rank writes a checkpoint for 70-75 s at every tenth iteration, nobody inside a
    call: the first is a P2 `job_stalled` (no progress for the 60 s floor), the next ones,
    under twice the longest such stall seen, nothing. Drill: none remembered."""
    if drill:
        monkeypatch.setattr(job_hangs, "HOLD_FACTOR", 0.0)
    run = jm.run_job(jm.JobConfig(**{**BASE, "checkpoint_every": 10, "checkpoint_s": (70.0, 75.0),
                                     "checkpoint_ranks": (), "duration_s": 260.0}))
    events, refused = feed(bs._built([run], [""], 0.0), settings)
    assert refused == 0
    ckpts = _checkpoints(run)
    assert len([c for c in ckpts if c[0] + 65.0 < 260.0]) >= 3  # three stalls past the floor
    opened = [e for e in events if e["status"] == "open"]
    assert {e["kind"] for e in opened} == {"job_stalled"}
    assert len(opened) == (3 if drill else 1), [e["summary"] for e in opened]


@pytest.mark.parametrize("drill", [False, True])
def test_a_hold_under_the_threshold_teaches_the_next_one(settings, monkeypatch, drill):
    """Rank 0's checkpoints last 3.5-6.5 s (drawn: 4.5, 6.3, 6.4, 5.0, 4.6, 5.4 s) against the
    5 s threshold. The first, under it, pages nothing; it is a hold all the same (rank 0's TP
    peer waited 4.6 s inside their all-reduce, and the wait ended by itself), so the second,
    6.3 s, is a routine under twice it, not a P0 naming rank 0 (the twentieth generator's
    checkpoint barrier paged so at its second checkpoint). Drill: no wait under the threshold
    learnt (`HOLD_LEARN` huge): the second pages."""
    if drill:
        monkeypatch.setattr(job_hangs, "HOLD_LEARN", 1e9)
    opened, run = _hangs(settings, seed=2, checkpoint_s=(3.5, 6.5))
    ckpts = _checkpoints(run)
    assert ckpts[0][1] < 5.0 < ckpts[1][1] < 2 * ckpts[0][1]
    assert [e["culprit_ranks"] for e in opened] == ([[0]] if drill else [])


@pytest.mark.parametrize("busy", [False, True])
def test_a_rank_busy_in_another_blocked_call_holds_nobody(settings, busy):
    """A site's members wait in their broadcast for their leader, 34, for 10 s. Where 34 sat
    meanwhile inside a blocked call of another comm (the islands generator's outer
    all-reduce over the WAN, 5-40 s a round), it held nobody on its own: nothing is learnt,
    and a round it never enters is named at the threshold (it was, 23 s late). Silent (a
    host writing a checkpoint), it held the job: a hold of (34,), 10 s."""
    from commwatch.streams.detect.job_stage import JobStage

    stage = JobStage(settings)
    js = stage.job("j")
    js.root_threshold_ns = 5 * S

    def rep(t: str, comm: str, ts: float, instances=None) -> None:
        r = {"type": t, "job": "j", "comm": comm, "ts_ns": int(ts * S)}
        if instances is not None:
            r["instances"] = instances
        stage.feed_report(r, int(ts * S))

    if busy:
        rep("wait", "wan", 1.0, [{"seq": 1, "op": "AllReduce", "since_ns": 0, "entered": [34, 35, 36], "missing": []}])
    rep("wait", "site", 1.0, [{"seq": 1, "op": "Broadcast", "since_ns": 0, "entered": [40, 41, 42], "missing": [34]}])
    if busy:
        rep("wait_clear", "wan", 9.9)
    rep("wait_clear", "site", 10.0)
    assert js.holds == ({} if busy else {(34,): [10.0 * S]})
    assert js.busy_missing == {}


@pytest.mark.parametrize("drill", [False, True])
def test_a_hold_under_the_threshold_is_no_transport_hang(settings, monkeypatch, drill):
    """Rank 0's first checkpoint takes 4.6 s (drawn with seed 6), under the 5 s threshold.
    Its pipeline pair's transfer and its next stage's TP all-reduce were queued by their
    hosts as it began, and their GPUs reached them only once rank 0 came back: with the
    probe writing device entries (a call whose kernel runs on is written again with its GPU
    start), a call only queued is not running, and its transport is not stuck. Each was a P0
    `comm_hang` 5.1 s after the hosts' enqueues. Drill: queued calls judged as running."""
    from commwatch.streams.detect import comm_stage

    if drill:
        monkeypatch.setattr(comm_stage, "QUEUED_NOT_RUNNING", False)
    opened, run = _hangs(settings, seed=6, checkpoint_s=(3.5, 6.5))
    assert _checkpoints(run)[0][1] < 5.0
    assert [e["kind"] for e in opened] == (["comm_hang"] if drill else [])
