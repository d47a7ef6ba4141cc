"""Stage 1 applies a comm's buffered calls only when something may come of it (a window to
close, a wait to check, enough or old enough records), and its cheap medians and quantiles
are numpy's."""

import numpy as np

from commwatch.decode import decode_message
from commwatch.producers.simulate import JobSpec, parse_fault, simulate
from commwatch.streams.detect import CommStage, Detector
from commwatch.streams.detect.comm_stage import TICK_FLUSH_AGE_NS
from commwatch.streams.detect.comm_state import _quantile
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
