"""Stage 1 applies a comm's buffered calls only when something may come of it (a window to
close, a wait to check, enough or old enough records), and its cheap medians and quantiles
are numpy's."""

import warnings

import numpy as np
import pytest

from commwatch import wire
from commwatch.decode import decode_message
from commwatch.producers.simulate import JobSpec, parse_fault, simulate
from commwatch.streams.detect import CommStage, Detector
from commwatch.streams.detect.comm_stage import TICK_FLUSH_AGE_NS, WAIT_REPORT_NS
from commwatch.streams.detect.comm_state import CommState, _quantile
from commwatch.streams.detect.medians import nanmedian
from commwatch.streams.detect.windows import _median


def test_buffered_calls_wait_for_a_due_tick_but_never_long(settings):
    spec = JobSpec(job="cad", tp=2, pp=2, dp=2, duration_s=6, seed=5, tp_calls=8)
    stage = CommStage(settings)
    kept, types = 0, set()
    for msg in simulate(spec, []).messages():
        reports = stage.feed(msg, decode_message(msg), msg.ts_ns) + stage.tick(lambda job, t=msg.ts_ns: t)
        types.update(r["type"] for r in reports)
        if stage._job_tick.get("cad") == msg.ts_ns:  # a tick ran
            for st in stage.comms.values():
                assert not st.pending or msg.ts_ns - st.pending_since < TICK_FLUSH_AGE_NS
                kept += bool(st.pending)
    assert kept > 0  # some ticks left a comm's calls buffered
    assert {"window", "p2p_window"} <= types


def test_a_hang_is_still_seen_in_time(settings):
    spec = JobSpec(job="cad", tp=2, pp=1, dp=2, duration_s=14, seed=6, tp_calls=4)
    det = Detector(settings)
    opened = []
    for m in simulate(spec, [parse_fault("hang:rank=1,at=4s")]).messages():
        opened += [i for i in det.feed(m) + det.tick(m.ts_ns) if i["status"] == "open"]
    hangs = [i for i in opened if i["kind"] in ("hang", "comm_hang")]
    assert hangs and 1 in hangs[0]["culprit_ranks"]
    assert (hangs[0]["ts_ns"] - spec.start_ns) / 1e9 - 4 <= settings.hang_floor_s + 2


def test_a_jobs_tick_between_due_times_does_nothing(settings):
    spec = JobSpec(job="cad", tp=2, duration_s=1, seed=5)
    msg = next(m for m in simulate(spec, []).messages() if m.topic == "cw.progress.v1")
    stage = CommStage(settings)
    stage.feed(msg, decode_message(msg), msg.ts_ns)
    assert stage.tick(lambda job: msg.ts_ns) and stage._job_tick["cad"] == msg.ts_ns
    assert stage.tick(lambda job: msg.ts_ns + 100_000_000) == [] and stage._job_tick["cad"] == msg.ts_ns
    stage.tick(lambda job: msg.ts_ns + 600_000_000)
    assert stage._job_tick["cad"] == msg.ts_ns + 600_000_000


def test_cheap_median_and_quantile_are_numpys():
    rng = np.random.default_rng(3)
    for shape in [(1, 1), (1, 2), (3, 5), (4, 4), (9, 2), (64, 8)]:
        a = rng.normal(size=shape) * 1e9
        for axis in (0, 1):
            assert np.allclose(_median(a, axis), np.median(a, axis=axis), rtol=0, atol=1e-6)
    for n in (1, 2, 3, 64, 512):
        g = rng.exponential(1e6, n)
        xs = np.sort(g).tolist()
        assert np.allclose([_quantile(xs, 0.5), _quantile(xs, 0.99)], np.percentile(g, (50, 99)), rtol=1e-12)


def _p2p(rank, crank, peer, seq, t_ns, done, op=wire.OP_SEND):
    r = wire.empty(1)
    r["kind"], r["op"], r["comm"], r["rank"], r["comm_rank"] = wire.KIND_CALL, op, 0xC3, rank, crank
    r["peer"], r["seq"], r["nranks"], r["t_start_ns"] = peer, seq, 2, t_ns
    if done:
        r["flags"], r["t_end_ns"] = wire.FLAG_COMPLETED, t_ns + 1_000_000
    return r


def test_when_a_p2p_channel_opened_does_not_depend_on_when_it_was_flushed(settings):
    """Send #0 completes and #1 is entered in a batch seen at T; #2 is queued behind it in a
    batch seen 0.8 s later. The channel is open since T whether both batches are applied in
    one flush (a P2P comm flushes about once a second) or one at a time."""
    T, later = 5_000_000_000, 5_800_000_000
    first = np.concatenate([_p2p(4, 1, 0, 0, T - 2_000_000, True, wire.OP_RECV),
                            _p2p(3, 0, 1, 0, T - 2_000_000, True), _p2p(3, 0, 1, 1, T - 1_000_000, False)])
    second = _p2p(3, 0, 1, 2, later - 1_000_000, False)
    since = []
    for flushes in ([(first, T), (second, later)], [(np.concatenate([first, second]), None)]):
        st = CommState("j1", 0xC3, settings.window_instances)
        for recs, at in flushes:
            ts = np.full(len(recs), at, np.int64) if at else np.array([T, T, T, later], np.int64)
            st.apply_records(recs, ts)
        channel = st.p2p[(0, 1, 0)]  # rank 3 (slot 0) sending to rank 4 (slot 1)
        assert channel[:2] == [2, 0]  # entered up to #2, completed #0
        since.append(channel[2])
    assert since == [T, T]


def test_an_open_p2p_call_flushes_its_comm_only_once_it_may_be_reported(settings):
    stage = CommStage(settings)
    st = stage.state("j1", 0xC3)
    T = 5_000_000_000
    st.apply_records(np.concatenate([_p2p(4, 1, 0, 0, T, False, wire.OP_RECV), _p2p(3, 0, 1, 0, T, False)]),
                     np.array([T, T], np.int64))
    st.pending_since = T + WAIT_REPORT_NS  # records pending, young: nothing else is due
    st.pending_n = 1
    st.p2p_win_start = T + WAIT_REPORT_NS  # its P2P window is not due either
    assert not stage._report_due(st, T + WAIT_REPORT_NS // 2 + 100_000_000)
    assert stage._report_due(st, T + WAIT_REPORT_NS)


def test_cheap_nanmedian_is_numpys_with_and_without_gaps():
    rng = np.random.default_rng(4)
    for shape in [(1, 1), (2, 3), (7, 8), (8, 7, 5)]:
        a = rng.normal(size=shape) * 1e9
        for x in (a, np.where(rng.random(shape) < 0.3, np.nan, a)):  # all finite (a partition), with gaps
            for axis in range(len(shape)):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # a slice of nans only: nan
                    want = np.nanmedian(x, axis=axis)
                np.testing.assert_allclose(nanmedian(x, axis), want, rtol=0, atol=1e-6, equal_nan=True)


def _ticks_and_incidents(settings, specs, faults):
    """Replay's path over the jobs' messages in time order: per job, how many times its stages'
    ticks were called, and its incident events."""
    from collections import Counter

    from commwatch.decode import decode_messages

    msgs = sorted((m for s in specs for m in simulate(s, faults.get(s.job, [])).messages()), key=lambda m: m.ts_ns)
    det = Detector(settings)
    calls: Counter = Counter()
    for stage in (det.comm_stage, det.job_stage):
        def spy(job, *args, orig=stage.tick_job):
            calls[job] += 1
            return orig(job, *args)
        stage.tick_job = spy
    events = det.feed_stream(msgs, decode_messages(msgs)) + det.finish()
    return calls, events


@pytest.mark.parametrize("drill", [False, True])
def test_a_job_is_ticked_on_its_own_schedule_not_at_every_other_jobs_message(settings, monkeypatch, drill):
    """Replay ticks a job when its own tick falls due or its own data came, never because another
    job's message came: a capture of 40 jobs spent three quarters of its replay calling every
    job's stages at every other job's message. What each job is told is the same alone.
    Drill: every job ticked whenever any is (`Detector.tick`'s live path)."""
    if drill:
        monkeypatch.setattr(Detector, "_tick_due", lambda self, ref: self._local(self.comm_tick(ref)) + self.job_tick(ref))
    busy = JobSpec(job="busy", tp=4, pp=2, dp=4, duration_s=30, seed=3, tp_calls=8)
    quiet = JobSpec(job="quiet", tp=2, pp=1, dp=1, duration_s=30, seed=4, step_s=3.0)
    faults = {"quiet": [parse_fault("hang:rank=1,at=8s")]}
    alone, events_alone = _ticks_and_incidents(settings, [quiet], faults)
    both, events = _ticks_and_incidents(settings, [busy, quiet], faults)
    mine = [e for e in events if e["job"] == "quiet"]
    assert any(e["kind"] == "hang" and e["culprit_ranks"] == [1] for e in mine)
    if not drill:  # ticked at the busy job's every message, its P0 opened 0.5 s sooner than alone
        assert [(e["status"], e["kind"], e["culprit_ranks"], e["ts_ns"]) for e in mine] == [
            (e["status"], e["kind"], e["culprit_ranks"], e["ts_ns"]) for e in events_alone]
    assert both["busy"] > 4 * alone["quiet"]
    assert (both["quiet"] <= alone["quiet"] * 1.2 + 10) is not drill, (both, alone)


def test_a_live_worker_keeps_no_per_job_tick_state(settings):
    """Live, the worker's timer ticks every job (`Detector.held` is the pipeline's): the per-job
    due times and touched marks that replay keeps would only grow with every job it ever saw."""
    from commwatch.decode import decode_messages

    det = Detector(settings)
    det.held = lambda job: False
    for name in ("l1", "l2", "l3"):
        msgs = [m for m in simulate(JobSpec(job=name, tp=2, duration_s=3, seed=1), []).messages()
                if m.topic in ("cw.calls.v1", "cw.progress.v1")]
        det.comm_feed(msgs, decode_messages(msgs), msgs[-1].ts_ns)
    assert det.comm_stage.by_job and not det._dirty and not det._due
