"""How soon a slowdown is named after it begins (job model runs fed in event-time order through
the detector, as `commwatch bench detect` feeds them; and the window statistics themselves).

- A window that ends in a run of instances a rank was slow in, after instances it was not,
  holds the onset of a slowdown (a pause lengthens one interval): at >= 1.5x it decides at
  once, though the rank's horizon still holds its healthy past; not a run within the
  window's spread (a noisy job makes runs of slow-looking intervals).
- A window too short in instances for a share (under 6) in which the rank was clearly slow
  in every one is steady.
- A new window that may decide alone is judged when it arrives, not at the next periodic
  evaluation, and a rank hot over enough windows when time alone concludes it; the
  stage-imbalance advisory counts periodic evaluations only (its count is a measure of time).
- A comm in use that never showed a compute interval for 10 s (a data-parallel comm of a job
  with long steps) is nobody's finest: it does not hold back judging ranks in their finest.
"""

from __future__ import annotations

import numpy as np

from commwatch.producers import jobmodel as jm
from commwatch.streams import bench_scenarios as bs
from commwatch.streams.bench_detect import feed
from commwatch.streams.detect import job_stage, slow, windows
from commwatch.streams.detect.rank_model import RankModel

S = 1_000_000_000


def _run(settings, cfg: jm.JobConfig) -> tuple[list[dict], jm.JobRun]:
    run = jm.run_job(cfg)
    events, refused = feed(bs._built([run], [""], 0.0), settings)
    assert refused == 0
    return [e for e in events if e["status"] == "open" and e["kind"] == "slow_rank"], run


def _delay_s(opened: list[dict], run: jm.JobRun) -> float | None:
    """Seconds from the fault's onset to the first incident naming exactly its rank."""
    truth = run.truth[0]
    hit = [e for e in opened if e["culprit_ranks"] == truth["ranks"]]
    return (hit[0]["opened_ns"] - truth["onset_ns"]) / S if hit else None


def test_a_window_ending_in_a_run_of_slow_instances_reports_the_run():
    rng = np.random.default_rng(5)
    gaps = rng.normal(40e6, 1.5e6, size=(16, 6))  # members 0, 4 and 5 healthy
    gaps[10:, 1] *= 1.6  # member 1 slows down at instance 10
    gaps[-1, 2] += 300e6  # member 2: one pause, in the last instance
    gaps[:, 3] *= 1.6  # member 3: slow in all (the steady share says so)
    tail = windows._busy_stats(gaps, gaps > 0, span=1e9)[5]
    assert tail[1][0] == 6 and 1.5 < tail[1][1] < 1.7
    assert tail[0] is None and tail[2] is None and tail[3] is None and tail[4] is None


def _noisy_run(jitter: float) -> list:
    rng = np.random.default_rng(8)
    gaps = 40e6 * (1 + jitter * rng.standard_normal((24, 6))).clip(0.5)
    gaps[18:, 1] = 40e6 * 1.6  # member 1 at 1.6x over the last 6 instances
    return windows._busy_stats(gaps, gaps > 0, span=1e9)[5]


def test_in_a_noisy_job_a_run_within_its_spread_is_no_onset(monkeypatch):
    assert _noisy_run(0.03)[1] is not None
    assert _noisy_run(0.25)[1] is None  # intervals 25 % apart make 1.6x runs by themselves
    monkeypatch.setattr(windows, "NOISE_SIGMAS", 0.0)  # drill: the spread not asked
    assert _noisy_run(0.25)[1] is not None


def test_a_slow_tail_decides_at_once_a_milder_one_does_not():
    onset = 4 * S + S // 2
    m = RankModel("numpy", 0.1, 2)
    assert m.update(1.04, 5 * S, 5 * S, short=1.2, tail=(1.6, onset)) == onset  # the horizon still low
    m = RankModel("numpy", 0.1, 2)
    assert m.update(1.04, 5 * S, 5 * S, short=1.1, tail=(1.3, onset)) is None


def test_a_rank_hot_over_enough_windows_says_when_time_alone_concludes_it():
    m = RankModel("numpy", 0.1, 2)
    hot = 4 * S + S // 2
    assert m.update(1.3, 5 * S, 5 * S, short=1.3, start=hot) is None and m.due == 0  # one window
    assert m.update(1.3, 6 * S, 6 * S, short=1.3) is None and m.due == hot + 2 * S  # two, 2 s not yet
    assert m.update(1.3, 6 * S, m.due, short=1.3) == hot and m.due == 0  # then: concluded
    m.update(1.0, 7 * S, 7 * S, short=1.0)
    assert m.due == 0


def test_too_few_instances_for_a_share_slow_in_every_one_is_steady():
    gaps = np.full((3, 4), 40e6)
    gaps[:, 1] *= 1.6
    gaps[1, 2] += 300e6  # a pause in one of three
    assert windows._busy_stats(gaps, gaps > 0, span=1e9)[3] == [None, 1.0, None, None]


def _slow16() -> jm.JobConfig:  # as the bench's jm/slow1.6-2x2x4
    return jm.JobConfig(job="on", tp=2, pp=2, dp=4, duration_s=30.0, seed=11,
                        faults=(jm.SlowGpu(rank=5, factor=1.6, at_s=15.0),))


def test_a_slowdown_is_named_within_the_window_it_began_in(settings):
    opened, run = _run(settings, _slow16())
    assert [e["culprit_ranks"] for e in opened] == [[5]]
    assert _delay_s(opened, run) <= 1.0  # 0.68 s
    assert opened[0]["evidence"]["onset_ns"] >= run.truth[0]["onset_ns"] - S // 2


def test_drill_without_the_tail_the_slowdown_waits_for_a_whole_slow_window(settings, monkeypatch):
    monkeypatch.setattr(windows, "TAIL_MIN", 10**6)
    opened, run = _run(settings, _slow16())
    assert _delay_s(opened, run) >= 1.3  # 1.52 s


def _slow24() -> jm.JobConfig:
    # the bench's jm/slow2.4-2x2x2, its job name too (comm ids, and so the order windows close in, derive from it)
    return jm.JobConfig(job="m34", tp=2, pp=2, dp=2, duration_s=50.0, seed=34,
                        faults=(jm.SlowGpu(rank=1, factor=2.4, at_s=15.0),))


def _fresh_delay(settings) -> float:
    opened, run = _run(settings, _slow24())
    assert [e["culprit_ranks"] for e in opened if e["culprit_ranks"]] == [[1]]
    assert [e for e in opened if not e["culprit_ranks"]] == []  # no stage advisory from the extra evaluations
    return _delay_s(opened, run)


def test_a_new_window_is_judged_when_it_arrives(settings):
    assert _fresh_delay(settings) <= 1.9  # 1.78 s


def test_drill_judged_at_the_periodic_evaluations_only_it_is_named_later(settings, monkeypatch):
    fresh = _fresh_delay(settings)
    monkeypatch.setattr(job_stage.JobStage, "_slow_due", staticmethod(lambda js, now_ns: False))
    opened, run = _run(settings, _slow24())
    assert _delay_s(opened, run) >= fresh + 0.2  # 2.08 s


def test_drill_advisories_counted_at_every_evaluation_are_raised_early(settings, monkeypatch):
    # a pipeline's first stages compute more in its first seconds (its warm-up); counted at the
    # evaluations new windows call for too (here at every tick), that passes for a structural
    # imbalance
    cfg = jm.JobConfig(job="ad", tp=1, pp=8, dp=2, duration_s=25.0, seed=3,
                       faults=(jm.SlowGpu(rank=13, factor=2.4, at_s=15.0),))
    monkeypatch.setattr(job_stage.JobStage, "_slow_due", staticmethod(lambda js, now_ns: True))
    opened, _ = _run(settings, cfg)
    assert [e for e in opened if not e["culprit_ranks"]] == []
    real = job_stage.JobStage._slow
    monkeypatch.setattr(job_stage.JobStage, "_slow", lambda self, js, now, out, periodic=True: real(self, js, now, out))
    opened, _ = _run(settings, cfg)
    assert [e for e in opened if not e["culprit_ranks"]] != []


def _long_steps() -> jm.JobConfig:  # as the bench's jm/long-steps-slow2.4-2x2x4, shorter
    return jm.JobConfig(job="ls", tp=2, pp=2, dp=4, duration_s=45.0, seed=2, work=jm.Workload(step_s=18.0),
                        faults=(jm.SlowGpu(rank=6, factor=2.4),))


def test_a_coarse_comm_without_intervals_does_not_hold_back_the_finest(settings):
    opened, run = _run(settings, _long_steps())
    assert [e["culprit_ranks"] for e in opened] == [[6]]
    assert _delay_s(opened, run) <= 20.0  # steps of 35 s here


def test_drill_held_back_by_it_the_rank_is_not_named_in_two_iterations(settings, monkeypatch):
    monkeypatch.setattr(slow, "NEVER_FINER_NS", 10**18)
    opened, _ = _run(settings, _long_steps())
    assert [e["culprit_ranks"] for e in opened] == []
