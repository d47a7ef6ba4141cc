"""Slow ranks in pipelines: the slow stage's rank is the culprit; its tensor-parallel peers
and the other stages (its victims: they wait longer, they do not compute longer) are not."""

import pytest

from commwatch.producers.simulate import JobSpec, parse_fault, simulate
from commwatch.streams.detect import Detector


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
