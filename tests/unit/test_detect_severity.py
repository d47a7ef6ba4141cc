"""A slow rank's severity follows what the job loses: the share of the job's time the
collectives claim a rank costs is capped by what the job's own iterations lost since it was
found (`JobStage._felt`), where the job reports its iterations and its baseline predates the
finding."""

from types import SimpleNamespace

import pytest

from commwatch.streams.detect.job_slow import UNFELT_SHARE
from commwatch.streams.detect.job_stage import JobStage
from commwatch.streams.detect.steps import StepTracker

S = 1_000_000_000


def _steps(durations: list[float]) -> StepTracker:
    """Four ranks doing the same work, each iteration as long as `durations` says (s)."""
    st = StepTracker(slow_impact=0.1, slow_windows=2, model="numpy")
    coords = {r: {"tp": 0, "pp": 0, "dp": r} for r in range(4)}
    t = 0
    for it, d in enumerate(durations):
        end = t + int(d * S)
        for r in range(4):
            st.add({"v": 1, "job": "j", "rank": r, "iteration": it, "t_start_ns": t, "t_end_ns": end,
                    "phases": {"forward_ms": d * 400, "backward_ms": d * 500}})
        st.evaluate(end, coords, set())
        t = end
    return st


def _felt(durations, opened_s, signal="collectives", claim=0.92):
    js = SimpleNamespace(steps=_steps(durations))
    open_ = SimpleNamespace(opened_ns=int(opened_s * S))
    return JobStage._felt(js, {"impact": claim, "signal": signal, "onset_ns": int(opened_s * S)}, open_)


def test_a_claim_the_jobs_iterations_do_not_show_is_cut_to_what_they_lost():
    # generator C's healthy job drawn with 18000 (host stalls): P1 "the job loses 92 %" while
    # its iterations after the incident opened ran as before it
    assert _felt([1.2] * 10 + [1.2, 2.3, 1.2, 1.2, 2.3, 1.2, 1.2], opened_s=12.5) == 0.0


def test_a_job_that_lost_keeps_the_claim():
    felt = _felt([1.2] * 10 + [1.6] * 6, opened_s=12.5)
    assert felt == pytest.approx(min(0.92, (1.6 / 1.2 - 1) * UNFELT_SHARE))
    assert felt > 0.5


@pytest.mark.parametrize("case", ["from_start", "phases", "no_steps"])
def test_the_claim_stands_where_the_steps_cannot_judge_it(case):
    if case == "no_steps":
        assert _felt([], opened_s=12.5) == 0.92
    elif case == "phases":  # the phases' impact is measured on the job's steps already
        assert _felt([1.2] * 16, opened_s=12.5, signal="phases") == 0.92
    else:  # found before the baseline was taken: a rank slow from the start is in it
        assert _felt([1.2] * 16, opened_s=1.0) == 0.92
