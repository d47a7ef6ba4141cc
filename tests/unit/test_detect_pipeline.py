"""Slow ranks in pipelines: the slow stage's rank is the culprit; its tensor-parallel peers
and the other stages (its victims: they wait longer, they do not compute longer) are not."""

import pytest

from commwatch.producers.simulate import JobSpec, parse_fault, simulate
from commwatch.streams.detect import Detector
from detect_jobs import replayed, slow_ranks_of


def _run(spec: JobSpec, faults: list[str], settings) -> tuple[list[dict], Detector]:
    det = Detector(settings)
    incidents = []
    for m in simulate(spec, [parse_fault(f) for f in faults]).messages():
        incidents += det.feed(m) + det.tick(m.ts_ns)
    return incidents, det


@pytest.mark.parametrize("tp,pp,dp,rank", [(2, 4, 1, 2), (1, 4, 2, 1), (1, 4, 2, 7), (1, 2, 4, 0)])
def test_slow_stage_is_the_culprit_not_its_tp_peers_or_other_stages(settings, tp, pp, dp, rank):
    spec = JobSpec(job="pipe", tp=tp, pp=pp, dp=dp, duration_s=16, seed=3, tp_calls=8)
    incidents, det = _run(spec, [f"slow:rank={rank},factor=1.6,at=8s"], settings)
    assert [(i["status"], i["kind"], i["culprit_ranks"]) for i in incidents if i["status"] != "update"] == [
        ("open", "slow_rank", [rank])]
    assert {tuple(i["culprit_ranks"]) for i in incidents} == {(rank,)}
    ev = incidents[0]["evidence"]
    assert ev["ratio"] >= 1.1 and ev["signal"] in ("collectives", "phases")
    # its victims wait longer but compute as fast as their peers
    ratios = det.job_stage.jobs["pipe"].slow.ratio
    assert max(v for r, v in ratios.items() if r != rank) < 1.1
    assert (incidents[0]["ts_ns"] - spec.start_ns) / 1e9 - 8 <= 5


def test_healthy_pipeline_opens_nothing(settings):
    spec = JobSpec(job="pipe", tp=2, pp=4, dp=1, duration_s=16, seed=4, tp_calls=8, jitter=0.08, gc_blip_rate=0.02)
    incidents, det = _run(spec, [], settings)
    assert incidents == []
    assert det.job_stage.jobs["pipe"].slow.ratio  # every rank was judged


@pytest.mark.parametrize("drill", [False, True])
def test_pipelines_whose_receives_overlap_their_compute_raise_no_stage_advisory(settings, gen_i, monkeypatch, drill):
    """The ninth generator's healthy pipelines post their receives ahead on a stream of their
    own (as Megatron overlaps them): summed, the shares inside calls leave every rank 0.02-0.11
    of its time to compute, and the ratios of such figures made a P3 "rebalance the stages"
    for a stage of its 1F1B job (stages 0 and 3, 1.8x, 3.9x) and of its interleaved job with
    context parallelism (3.2x); none is heavier. No advisory where the other stages compute
    under `IMBALANCE_MIN_COMPUTE`. The job model's unbalanced stages keep theirs (the bench's
    controls). Drill: the floor at 0."""
    from commwatch.streams.detect import slow

    if drill:
        monkeypatch.setattr(slow, "IMBALANCE_MIN_COMPUTE", 0.0)
    stages = {}
    for scenario in ("uneven_healthy", "cp_vpp_healthy"):
        cap, truth = gen_i(scenario)
        assert truth[0]["kind"] == "healthy"
        stages[scenario] = {e["evidence"]["stage"] for e in replayed(settings, cap)
                            if e["evidence"].get("advisory") == "stage_imbalance"}
    assert stages == ({"uneven_healthy": {0, 3}, "cp_vpp_healthy": {0}} if drill else
                      {"uneven_healthy": set(), "cp_vpp_healthy": set()})


@pytest.mark.parametrize("drill", [False, True])
def test_the_next_stage_of_a_slow_ranks_pipeline_is_not_named_with_it(settings, gen_i, monkeypatch, drill):
    """The ninth generator's sequence-parallel job (TP 4 x PP 2 x DP 4, GPU-timed, receives
    overlapped on their own stream), rank 13 of stage 0 1.5x from 20 s: the next stage's TP
    group of its replica, 28-31, waits for its activations between its TP calls (1.2x) and
    was named P3 as a group slow as a whole, six seconds after 13. A group of which a member
    shares a pipeline comm with a named rank slower than it is its victim (`_pipeline_victims`).
    Drill: the rule off."""
    from commwatch.streams.detect.job_slow import SlowRules

    if drill:
        monkeypatch.setattr(SlowRules, "_pipeline_victims", lambda self, js, found: [])
    cap, truth = gen_i("sp_slow")
    assert truth[0]["culprits"] == [13]
    assert slow_ranks_of(settings, cap) == ([[13], [28, 29, 30, 31]] if drill else [[13]])
