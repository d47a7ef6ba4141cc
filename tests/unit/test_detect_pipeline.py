"""Slow ranks in pipelines: SEND/RECV waits are paired and chained to the late stage, and the
stage's TP peers and the other stages (its victims) are not named."""

import numpy as np
import pytest

from commwatch.producers.simulate import JobSpec, parse_fault, simulate
from commwatch.streams.detect import Detector
from commwatch.streams.detect.p2p_waits import P2PWaits, chain_blame

MS = 1_000_000


def _halves(pw: P2PWaits, sender: int, receiver: int, seq: int, send_ms: float, recv_ms: float, which="both"):
    if which in ("both", "send"):
        pw.add(np.array([sender]), np.array([receiver]), np.array([False]), np.array([seq]),
               np.array([int(send_ms * MS)]))
    if which in ("both", "recv"):
        pw.add(np.array([receiver]), np.array([sender]), np.array([True]), np.array([seq]),
               np.array([int(recv_ms * MS)]))


def test_paired_halves_say_who_was_late_whatever_the_batches():
    pw = P2PWaits()
    _halves(pw, 0, 1, 0, send_ms=2, recv_ms=52)  # the send was posted 50 ms after the recv: 1 waited on 0
    _halves(pw, 1, 0, 0, send_ms=32, recv_ms=2)  # the recv was entered 30 ms after the send: 1 waited on 0
    _halves(pw, 2, 1, 0, send_ms=10, recv_ms=0, which="send")  # its recv comes in the next window
    _halves(pw, 0, 1, 0, send_ms=2, recv_ms=52, which="send")  # the same half twice: counted once
    blame, own = pw.close(3)
    assert blame.tolist() == [80 * MS, 0, 0] and own.tolist() == [0, 80 * MS, 0]
    _halves(pw, 2, 1, 0, send_ms=10, recv_ms=20, which="recv")
    blame, own = pw.close(3)
    assert blame.tolist() == [0, 0, 10 * MS] and own.tolist() == [0, 10 * MS, 0]
    assert pw.close(3)[0].sum() == 0


def test_blame_is_chained_to_the_root_of_the_wait():
    # 3 waits 10 on 2, which relayed a 10 wait on 1; 0 waits 5 on 1 (backward): 1 is the root
    blame, own = chain_blame(4, np.array([3, 2, 0]), np.array([2, 1, 1]), np.array([10.0, 10.0, 5.0]))
    assert blame.tolist() == [0.0, 25.0, 0.0, 0.0] and own.tolist() == [5.0, 0.0, 10.0, 10.0]
    # a cycle ends: blame cannot be passed on beyond what a rank waited itself
    blame, _ = chain_blame(2, np.array([0, 1]), np.array([1, 0]), np.array([4.0, 1.0]))
    assert blame.sum() == pytest.approx(5.0) and blame[1] > blame[0]


def _run(spec: JobSpec, faults: list[str], settings) -> tuple[list[dict], list[dict]]:
    det = Detector(settings)
    incidents, p2p = [], []
    for m in simulate(spec, [parse_fault(f) for f in faults]).messages():
        incidents += det.feed(m) + det.tick(m.ts_ns)
    js = det.job_stage.jobs[spec.job]
    for cs in js.slow.p2p.values():
        p2p.append({int(r): (float(i), float(o)) for r, i, o in zip(cs.ranks, cs.impact_ex, cs.own_ex)})
    return incidents, p2p


@pytest.mark.parametrize("tp,pp,dp,rank", [(2, 4, 1, 2), (1, 4, 2, 1)])
def test_slow_stage_is_the_culprit_not_its_tp_peers_or_other_stages(settings, tp, pp, dp, rank):
    spec = JobSpec(job="pipe", tp=tp, pp=pp, dp=dp, duration_s=16, seed=3, tp_calls=8)
    incidents, p2p = _run(spec, [f"slow:rank={rank},factor=1.6,at=8s"], settings)
    assert [(i["status"], i["kind"], i["culprit_ranks"]) for i in incidents] == [("open", "slow_rank", [rank])]
    # its own pipeline blames it and waits on it
    (pipe,) = [p for p in p2p if rank in p]
    assert pipe[rank][0] == max(i for i, _ in pipe.values()) and pipe[rank][0] >= 0.1
    assert pipe[rank][1] == min(o for _, o in pipe.values())
    assert (incidents[0]["ts_ns"] - spec.start_ns) / 1e9 - 8 <= 5


def test_healthy_pipeline_opens_nothing(settings):
    spec = JobSpec(job="pipe", tp=2, pp=4, dp=1, duration_s=16, seed=4, tp_calls=8, jitter=0.08, gc_blip_rate=0.02)
    incidents, p2p = _run(spec, [], settings)
    assert incidents == [] and p2p
