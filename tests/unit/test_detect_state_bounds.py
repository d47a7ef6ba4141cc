"""Detector state is bounded by the window and the job's size, never by the run's length,
and the state of a job that stopped sending is dropped after `state_idle_s`."""

from __future__ import annotations

from commwatch.producers.simulate import JobSpec, simulate
from commwatch.settings import Settings
from commwatch.streams.detect import Detector

SETTINGS = Settings.load(env={}, window_instances=4, state_idle_s=20.0)
S = 1_000_000_000


def _run(det: Detector, spec: JobSpec) -> int:
    last = 0
    for msg in simulate(spec).messages():
        det.feed(msg)
        det.tick(msg.ts_ns)
        last = msg.ts_ns
    det.tick(last + S)  # folds in what is still pending
    return last


def _footprints(det: Detector, job: str) -> dict:
    return {st.hex: (st.rows, len(st.tag), st.footprint())
            for (j, _), st in det.comm_stage.comms.items() if j == job}


def test_long_run_ends_with_the_same_footprint_as_a_short_one():
    spec = dict(job="jb", tp=2, pp=2, dp=1, tp_calls=2, microbatches=2, seed=3, jitter=0.05)
    short, long = Detector(SETTINGS), Detector(SETTINGS)
    _run(short, JobSpec(duration_s=3.0, **spec))
    _run(long, JobSpec(duration_s=18.0, **spec))
    fp_short, fp_long = _footprints(short, "jb"), _footprints(long, "jb")
    assert len(fp_short) >= 3 and fp_short.keys() == fp_long.keys()
    for comm, (slots, tags, size) in fp_short.items():
        # rings identical; the rest within what a run's last batches leave in flight
        assert fp_long[comm][:2] == (slots, tags) and abs(fp_long[comm][2] - size) <= size // 100
    # the long run cycled the instance rings many times over
    assert max(st.max_seq / st.rows for st in long.comm_stage.comms.values()) > 4


def test_state_of_an_idle_job_is_dropped_and_live_jobs_keep_theirs():
    det = Detector(SETTINGS)
    end_a = _run(det, JobSpec(job="ja", tp=2, dp=2, duration_s=4.0, tp_calls=2, seed=1))
    assert {j for j, _ in det.comm_stage.comms} == {"ja"} and "ja" in det.job_stage.jobs
    # job B starts later and runs past A's idle limit: A's comms, nodes and job state go
    _run(det, JobSpec(job="jb", tp=2, dp=2, duration_s=40.0, tp_calls=2, seed=2, start_ns=end_a + S))
    assert {j for j, _ in det.comm_stage.comms} == {"jb"}
    assert set(det.job_stage.jobs) == {"jb"}
    assert all(j == "jb" for j, _ in det.comm_stage._node_seen)
