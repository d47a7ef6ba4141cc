"""Node clocks seconds apart within a job (no time sync), messages in arrival order.

The job model (an independent generator) stamps each node's messages with its own clock, off
by 2-6 s either way; they are fed as a live worker receives them (true send time as the
reference). Without learning how far each node's clock runs behind (`node_lag.py`), a
healthy job of this kind opened P0 `node_lost`, `hang` and `comm_hang` incidents (checked:
the tests below fail with `SKEW_MIN_NS` set beyond reach).
"""

from __future__ import annotations

import io
import json

import pytest

from commwatch import topics
from commwatch.decode import decode_messages
from commwatch.producers import jobmodel as jm
from commwatch.streams import replay
from commwatch.streams.detect import Detector, comm_state, detector, job_stage, node_lag, windows
from commwatch.wire import WireError

S = 1_000_000_000
SKEWED = (2000.0, 6000.0)
ALL = ("P0", "P1", "P2", "P3")


def _run(settings, clock_offset_ms=SKEWED, gpus_per_node=4, **kw) -> list[dict]:
    run = jm.run_job(jm.JobConfig(job="j", clock_offset_ms=clock_offset_ms, gpus_per_node=gpus_per_node, **kw))
    if clock_offset_ms == SKEWED:
        assert max(c.offset_s for c in run.clocks) - min(c.offset_s for c in run.clocks) > 2.0
    msgs, received = zip(*jm.merge_received([run]))
    det = Detector(settings)
    events = det.feed_stream(list(msgs), decode_messages(list(msgs), settings.max_message_bytes), list(received))
    return events + det.tick(received[-1] + S)


def _paged(events: list[dict], severities: tuple[str, ...] = ("P0", "P1")) -> list[tuple]:
    return sorted({(e["kind"], tuple(e["culprit_ranks"])) for e in events
                   if e["status"] == "open" and e["severity"] in severities})


@pytest.mark.parametrize("layout,probe", [((2, 2, 4), "gpu"), ((2, 4, 8), "enqueue")])
def test_a_healthy_job_whose_node_clocks_disagree_by_seconds_pages_nobody(settings, layout, probe):
    tp, pp, dp = layout
    assert _paged(_run(settings, tp=tp, pp=pp, dp=dp, probe=probe, duration_s=40.0, seed=3), ALL) == []


def test_a_hang_is_one_p0_naming_its_rank_and_a_silent_agent_its_node(settings):
    hang = _run(settings, tp=2, pp=2, dp=4, duration_s=45.0, seed=4, faults=(jm.HostHang(rank=9, at_s=18.0),))
    assert _paged(hang) == [("hang", (9,))]
    lost = _run(settings, tp=2, pp=2, dp=4, duration_s=40.0, seed=5, faults=(jm.AgentSilent(node=1, at_s=15.0),))
    # training goes on: its peers complete collectives with its ranks, so its data is lost, not
    # its ranks: a notice naming its node and no rank (25 s silent: under `DATA_LOST_P2_NS`)
    assert _paged(lost, ("P3",)) == [("node_lost", ())] and _paged(lost, ("P0", "P1", "P2")) == []
    assert {n for e in lost if e["kind"] == "node_lost" for n in e["culprit_nodes"]} == {"j-node-01"}


def test_the_fix_is_what_passes(settings, monkeypatch):
    """The drill: with skews never learnt, the healthy job raises an incident (a node seems
    silent while its ranks run: its data late), so the test above can fail."""
    monkeypatch.setattr(node_lag, "SKEW_MIN_NS", 10**15)
    assert _paged(_run(settings, tp=2, pp=2, dp=4, probe="gpu", duration_s=40.0, seed=3), ALL) != []


def test_a_late_heartbeat_of_one_node_is_not_taken_for_a_skew():
    """A backlog delays some heartbeats of every node by seconds; a clock behind, all of one
    node's. Only the latter is a skew (a late one moves a node's by half the time since its
    last heartbeat at most)."""
    lags = node_lag.NodeLags()
    for t in range(10):
        for node in "abc":
            late = 3 * S if (t, node) in ((4, "a"), (5, "b"), (6, "c")) else 0
            lags.observe("j", node, late + (5 * S if node == "c" else 0), t * S)
            skew = lags.skew("j", node)
            assert skew == (5 * S if node == "c" else 0) or late and skew <= S // 2 + (5 * S if node == "c" else 0)


# A node's clock set 5 s ahead mid-run (time sync stepping it), in the job above. Before
# the fix the job's clock followed it: the other nodes seemed 5 s silent at once (a P0
# `node_lost` for 6 of 7 in the bench's 64-rank job), and a hang 10 s later was found 23 s after onset
# instead of 5; the offsets between its ranks and the others' took ~20 windows to follow
# (a P2 `slow_link` between the two nodes).
STEP = dict(tp=2, pp=2, dp=4, duration_s=45.0, clock_step=(1, 20.0, 5.0))


def test_a_node_clock_set_ahead_mid_run_pages_nobody_and_a_later_hang_is_found_on_time(settings):
    assert _paged(_run(settings, seed=3, **STEP), ("P0", "P1", "P2")) == []
    hang = _run(settings, seed=4, **{**STEP, "clock_step": (1, 15.0, 5.0)}, faults=(jm.HostHang(rank=9, at_s=25.0),))
    assert [e["kind"] for e in hang if e["status"] == "open" and e["severity"] == "P0"] == ["hang"]
    assert _paged(hang) == [("hang", (9,))]


def test_the_step_fix_is_what_passes(settings, monkeypatch):
    """The drills: a job's clock that follows a node set ahead pages `node_lost`; offsets
    blended slowly after the step raise a `slow_link` (two nodes, clocks otherwise in sync)."""
    monkeypatch.setattr(node_lag, "ESTABLISHED_NS", 10**18)
    assert "node_lost" in {k for k, _ in _paged(_run(settings, seed=3, **STEP), ("P0", "P1", "P2"))}
    monkeypatch.undo()
    two_nodes = dict(STEP, clock_offset_ms=(20.0, 50.0), gpus_per_node=8)  # the bench's scenario
    assert _paged(_run(settings, seed=3, **two_nodes), ("P0", "P1", "P2")) == []
    monkeypatch.setattr(windows, "OFFSET_STEP_NS", 10**18)
    assert [k for k, _ in _paged(_run(settings, seed=3, **two_nodes), ("P0", "P1", "P2"))] == ["slow_link"]


def _live(settings, by_s: float, faults=()) -> list[dict]:
    """As a worker learns node clocks (`streams/app.py`): polls of 0.1 s of arrivals, lags
    learnt from heartbeats only (a node's call batches take its skew, never teach it)."""
    run = jm.run_job(jm.JobConfig(job="j", tp=2, pp=2, dp=4, duration_s=45.0, seed=3, gpus_per_node=4,
                                  clock_step=(1, 20.0, by_s), faults=faults))
    msgs, received = zip(*jm.merge_received([run]))
    decoded = decode_messages(list(msgs), settings.max_message_bytes)
    det, out, i = Detector(settings), [], 0
    while i < len(msgs):
        ref = received[i] + S // 10
        j = next((k for k in range(i, len(msgs)) if received[k] > ref), len(msgs))
        poll = [(m, d) for m, d in zip(msgs[i:j], decoded[i:j]) if not isinstance(d, WireError)]
        comm = [(m, d) for m, d in poll if m.topic in (topics.CALLS, topics.PROGRESS)]
        if comm:
            ms, ds = map(list, zip(*comm))
            for rep in det.comm_feed(ms, ds, ref, [m.topic == topics.PROGRESS for m in ms]):
                out += det.job_feed_report(rep, ref)  # the worker's job half reads them back
        for m, d in poll:
            if m.topic not in (topics.CALLS, topics.PROGRESS):
                out += det.job_feed(m, d, ref)
        out += det.tick(ref)
        i = j
    return out


def test_live_a_node_clock_set_back_or_ahead_pages_nobody_and_a_hang_after_it_is_found(settings, monkeypatch):
    """Live, a node set 5 s back seemed silent until its smallest lag followed (a P0
    `node_lost`); set 5 s ahead, its call batches moved the job's clock before its next
    heartbeat said how far ahead it runs, every comm seemed stale after, and a hang 10 s later
    was never alerted. (A node that seems silent while its ranks run is told as soon as it is
    judged silent here, `DATA_LATE_PERIODS` 0: nothing may seem silent.)"""
    monkeypatch.setattr(job_stage, "DATA_LATE_PERIODS", 0)
    assert _paged(_live(settings, -5.0), ALL) == []
    assert _paged(_live(settings, 5.0), ALL) == []
    for by_s in (-5.0, 5.0):
        events = _live(settings, by_s, faults=(jm.HostHang(rank=9, at_s=30.0),))
        assert _paged(events) == [("hang", (9,))]
        hang = next(e for e in events if e["status"] == "open" and e["kind"] == "hang")
        assert hang["evidence"]["threshold_s"] < 2 * settings.hang_floor_s


def test_the_live_fixes_are_what_passes(settings, monkeypatch):
    monkeypatch.setattr(node_lag, "SET_BACK_NS", 10**18)
    monkeypatch.setattr(job_stage, "DATA_LATE_PERIODS", 0)
    assert ("node_lost", ()) in _paged(_live(settings, -5.0), ALL)  # its data seems late (its ranks run)
    monkeypatch.undo()
    monkeypatch.setattr(detector, "SKEW_MIN_NS", 10**18)  # the job's clocks take any stamp
    # the node's stamps 5 s ahead lengthen its comms' silences: the job's threshold grows
    # (11.6 s, where the fixed run's is the 5 s floor; a root's, from each rank's busiest comm,
    # may not)
    seen = _thresholds(monkeypatch)
    _live(settings, 5.0, faults=(jm.HostHang(rank=9, at_s=30.0),))
    assert max(seen) >= 2 * settings.hang_floor_s * 1e9


def _thresholds(monkeypatch) -> list[float]:
    """The job's hang thresholds (for a comm_hang; `JobStage.threshold_ns`) as evaluated."""
    from commwatch.streams.detect.job_stage import JobStage

    seen: list[float] = []
    real = JobStage.threshold_ns

    def spy(self, js, step):
        out = real(self, js, step)
        seen.append(out[0])
        return out

    monkeypatch.setattr(JobStage, "threshold_ns", spy)
    return seen


# The same jobs as a capture (`commwatch replay`): sorted by stamp, no arrival times to learn
# node clocks from. Before: the nodes whose clocks run behind seemed lost as the capture ended
# (2 P0 `node_lost` in the healthy 16-rank job, 4 P0 and 6 P2 in the 64-rank one), and the
# first progress of a node running ahead, counted from the comm's first sighting on another
# node's clock, made every comm's cadence seconds long: the hang's threshold was 21 s, not 5.
def _replayed(settings, tmp_path, **kw) -> list[dict]:
    run = jm.run_job(jm.JobConfig(job="j", clock_offset_ms=SKEWED, gpus_per_node=4, **kw))
    path = tmp_path / "skewed.cwcap"
    jm.write_capture(path, run.messages)
    out = io.StringIO()
    replay.replay(str(path), settings, out, io.StringIO())
    return [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.mark.parametrize("layout,probe", [((2, 2, 4), "gpu"), ((2, 4, 8), "enqueue")])
def test_replay_of_a_job_whose_node_clocks_disagree_pages_nobody_at_the_capture_end(settings, tmp_path, layout,
                                                                                      probe):
    tp, pp, dp = layout
    assert _paged(_replayed(settings, tmp_path, tp=tp, pp=pp, dp=dp, probe=probe, duration_s=45.0, seed=3),
                  ("P0", "P1", "P2")) == []


def test_replay_of_a_hang_among_disagreeing_node_clocks_keeps_the_jobs_threshold(settings, tmp_path):
    events = _replayed(settings, tmp_path, tp=2, pp=2, dp=4, duration_s=45.0, seed=4,
                       faults=(jm.HostHang(rank=9, at_s=18.0),))
    assert _paged(events, ("P0", "P1", "P2")) == [("hang", (9,))]
    assert [e["evidence"]["threshold_s"] for e in events if e["status"] == "open"] == [settings.hang_floor_s]


def test_the_capture_end_and_own_first_sightings_are_what_passes(settings, tmp_path, monkeypatch):
    """The drills: nodes ending a capture judged as live would seem lost; first gaps counted
    from the comm's first sighting whatever the member's clock lengthen the threshold."""
    monkeypatch.setattr(replay, "END_SPAN_S", 0.0)
    assert "node_lost" in {k for k, _ in _paged(_replayed(settings, tmp_path, tp=2, pp=2, dp=4, probe="gpu",
                                                          duration_s=45.0, seed=3))}
    monkeypatch.undo()
    monkeypatch.setattr(comm_state, "SKEW_MIN_NS", 10**18)
    seen = _thresholds(monkeypatch)
    _replayed(settings, tmp_path, tp=2, pp=2, dp=4, duration_s=45.0, seed=4, faults=(jm.HostHang(rank=9, at_s=18.0),))
    assert max(seen) > 2 * settings.hang_floor_s * 1e9
