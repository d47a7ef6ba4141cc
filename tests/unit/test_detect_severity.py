"""A slow rank's severity follows what the job loses: the share of the job's time the
collectives claim a rank costs is capped by what the job's own iterations lost since it was
found (`JobStage._felt`), where the job reports its iterations and its baseline predates the
finding."""

from types import SimpleNamespace

import pytest

from commwatch.streams.detect import job_slow
from commwatch.streams.detect.job_slow import UNFELT_SHARE
from commwatch.streams.detect.job_stage import JobStage
from commwatch.streams.detect.rank_model import RankModel
from detect_jobs import replayed
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


def _felt(durations, opened_s, signal="collectives", claim=0.92, model=None, now_s=None):
    js = SimpleNamespace(steps=_steps(durations), slow=SimpleNamespace(models={} if model is None else {0: model}))
    open_ = SimpleNamespace(opened_ns=int(opened_s * S))
    now = int((sum(durations) if now_s is None else now_s) * S)
    ev = {"impact": claim, "signal": signal, "onset_ns": int(opened_s * S)}
    return JobStage.__new__(JobStage)._felt(js, ev, open_, [0], now)


def _model(ratios: list[float], start_s: float) -> RankModel:
    """A rank's model fed one window a second from `start_s` (its end), each at the ratio given."""
    m = RankModel("numpy", 0.1, 2)
    for i, x in enumerate(ratios):
        t = int((start_s + i) * S)
        m.update(x, t, t, start=t - S)
    return m


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


@pytest.mark.parametrize("seen_normal", [True, False])
def test_a_claim_made_before_the_baseline_settled_is_held_to_the_iterations_before_it(seen_normal):
    # the thirteenth generator's RL job drawn with 1: training iterations of 5.2 s in rounds a
    # minute apart, rank 0 found 1.6x at the weight sync after the first round (three
    # iterations, two of them warm-up), the baseline settling only in the second round
    normal = _model([1.0, 1.02, 0.99], start_s=1.0)
    assert normal.normal > 1
    felt = _felt([5.2, 5.21, 5.2, 5.2, 5.21, 5.22], opened_s=16.0, model=normal if seen_normal else None)
    # a rank never seen at its normal pace may be slow in every iteration there is: the claim stands
    assert felt == (pytest.approx((5.21 / 5.2 - 1) * UNFELT_SHARE) if seen_normal else 0.92)
    # a job that did lose, against the iterations before
    assert _felt([5.2, 5.2, 5.2, 8.0, 8.0, 8.0], opened_s=16.0, model=normal) == 0.92


def test_a_rank_slow_in_every_window_since_the_baseline_was_taken_keeps_its_claim_once_it_lasts_past_it():
    # the tenth generator's FSDP2 job (hook with steps) with rank 13 2.2x from the start: its
    # first windows came as the baseline settled (3.6 s), its onset dated 4.25 s; the job's
    # steps never rose over a baseline that held it, and its incident stayed P3 "unfelt"
    durations = [1.2] * 16  # the baseline settles at the fifth iteration's end, 6 s; slack 2 steps
    assert _felt(durations, opened_s=9.0, model=_model([1.5] * 12, start_s=7.0)) == 0.92
    # slow from its first window, but that came long after the baseline: the steps judge it
    assert _felt(durations, opened_s=16.0, model=_model([1.5] * 4, start_s=15.0)) == 0.0
    # judged normal twice (once may be the warm-up), then slow: the baseline was taken without it
    assert _felt(durations, opened_s=9.0, model=_model([1.0, 1.0] + [1.5] * 10, start_s=7.0)) == 0.0
    # slow throughout, but not yet lasted past the baseline (slow in its first windows by chance?)
    assert _felt(durations, opened_s=9.0, model=_model([1.5] * 3, start_s=7.0), now_s=9.5) == 0.0


@pytest.mark.parametrize("drill", [False, True])
def test_a_healthy_rl_job_whose_rank_0_broadcasts_the_weights_alone_pages_nobody(settings, gen_m, monkeypatch, drill):
    """The thirteenth generator's healthy RL job (32 ranks, trainer and rollout GPUs apart,
    GPU-timed, a gloo weight sync every round): rank 0 broadcasts each bucket alone while its
    15 trainer peers wait in the next all-gather, 9 s every minute. Named P3 at the first sync
    (before the job's baseline settled), it rose to P1 "the job loses ~60 %" at the second,
    its training iterations 0.1 % over those before. Drill: a claim made before the baseline
    settled stands, and P1 follows the incident's age (each sync, 9 s, costs half the job's
    time for less than the 10 s `HALF_LASTS` asks for)."""
    from commwatch.streams.detect.steps import StepTracker

    if drill:
        monkeypatch.setattr(StepTracker, "loss_around", lambda self, since_ns: None)
        monkeypatch.setattr(job_slow, "HALF_LASTS", False)
    cap, truth = gen_m("ctl_sync")
    assert truth["kind"] == "healthy"
    paged = {(e["severity"], tuple(e["culprit_ranks"])) for e in replayed(settings, cap)
             if e["severity"] in ("P0", "P1")}
    assert paged == ({("P1", (0,))} if drill else set())


@pytest.mark.parametrize("drill", [False, True])
def test_a_rank_slow_from_the_start_of_a_job_that_reports_steps_is_named_and_rises_to_p2(settings, gen_j, monkeypatch,
                                                                                       drill):
    """The tenth generator's zero-bubble pipeline (TP 2 x PP 4 x DP 2, hook GPU-timed, with
    steps), rank 5 1.5x from the start: the collectives found it 1.47x from its first windows,
    the job's steps never rose over their baseline (taken with it slow) and it was never
    named, "unfelt". Now P3, then P2 once it lasts. Drill: no rank slow throughout."""
    if drill:
        monkeypatch.setattr(RankModel, "slow_throughout", lambda self, until_ns: False)
    cap, truth = gen_j("zb_slow")
    assert truth["culprit_ranks"] == [5]
    named = {(e["severity"], tuple(e["culprit_ranks"])) for e in replayed(settings, cap) if e["kind"] == "slow_rank"}
    assert named == (set() if drill else {("P3", (5,)), ("P2", (5,))})


@pytest.mark.parametrize("drill", [False, True])
def test_a_rank_slow_from_the_start_whose_first_window_held_the_warm_up_is_named(settings, gen_k, monkeypatch, drill):
    """The eleventh generator's Megatron job (TP 4 x PP 2 x DP 4, GPU-timed, steps; iterations
    0-2 2-8x longer on every rank), rank 30 1.5x from the start, rank 23 hung at 41 s: 30's
    first window, inside the warm-up, was judged 1.0x, and every later one 1.43-1.50x; read as
    normal once, it was "unfelt" and never named. One window judged normal is allowed. Drill:
    none allowed."""
    if drill:
        monkeypatch.setattr(RankModel, "slow_throughout",
                            lambda self, until_ns: self.normal == 0 and 0 < self.first_ns <= until_ns)
    cap, truth = gen_k("slow_then_hang")
    assert [f["ranks"] for f in truth["faults"]] == [[30], [23]]
    named = {(e["kind"], e["severity"], tuple(e["culprit_ranks"])) for e in replayed(settings, cap)}
    hang = {("hang", "P0", (23,))}
    assert named == (hang if drill else hang | {("slow_rank", "P3", (30,)), ("slow_rank", "P2", (30,))})


@pytest.mark.parametrize("drill", [False, True])
def test_a_node_slow_from_the_start_is_named_as_one_group(settings, gen_k, monkeypatch, drill):
    """The eleventh generator's TP 8 x DP 4 job (GPU-timed, steps), node-01's eight ranks (one
    TP group) 1.25x from the start: its group was found slower than its siblings from 7.0 s,
    as the baseline settled (7.1 s), and judged as one from 10 s; its members' windows within
    the group had found them 1.0x, like each other: "unfelt", never named. Now one incident
    naming the eight, P3 then P2. Drill: the group's figure not consulted (`group_since`
    never kept)."""
    from commwatch.streams.detect.slow import SlowTracker

    if drill:
        monkeypatch.setattr(SlowTracker, "group_since", property(lambda self: {}, lambda self, v: None), raising=False)
    cap, truth = gen_k("slownode_tp8")
    assert truth["faults"][0]["ranks"] == list(range(8, 16))
    named = {(e["kind"], e["severity"], tuple(e["culprit_ranks"])) for e in replayed(settings, cap)}
    node = tuple(range(8, 16))
    assert named == (set() if drill else {("slow_rank", "P3", node), ("slow_rank", "P2", node)})
