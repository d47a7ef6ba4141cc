"""Slow rank vs its victims, clock skew, GC blips, slow links, hardware evidence."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from commwatch import topics
from commwatch.capture import Message
from commwatch.messages import validate_incident
from commwatch.streams.detect import job_slow, job_stage, slow
from detect_jobs import MS, S, HandJob, replayed, slow_ranks_of, steps

GEN_B = Path(__file__).resolve().parents[1] / "independent" / "jobs" / "gen.py"

TP, DP = 0xA1, 0xB2
NODES = {0: "n0", 1: "n0", 2: "n0", 3: "n0", 4: "n1", 5: "n1", 6: "n1", 7: "n1"}
COMMS = {TP: [0, 1, 2, 3], 0xA2: [4, 5, 6, 7], DP: [3, 7]}


def _late(delay):
    # rank 1 computes slowly: it is late in TP; its TP peer 3 is therefore late in DP (a victim)
    return {TP: {1: delay}, DP: {3: delay}}


def test_slow_rank_is_the_culprit_not_its_victims_despite_clock_skew(settings):
    j = HandJob(settings, COMMS, NODES)
    skew = {"n1": 40 * MS}  # node clocks disagree by more than the real lag
    steps(j, 6, skew=skew, jitter=2 * MS)
    t_fault = j.now
    steps(j, 8, late=_late(300 * MS), skew=skew, jitter=2 * MS, seed=1)
    slow = j.opened("slow_rank")
    assert [i["culprit_ranks"] for i in slow] == [[1]]
    inc = validate_incident(slow[0])
    assert inc["culprit_nodes"] == ["n0"] and inc["incident"].startswith("j1-slow_rank-1-")
    assert inc["evidence"]["impact"] >= 0.15  # at opening, with windows from before the onset in its horizon
    assert t_fault - 2 * S <= inc["evidence"]["onset_ns"] <= inc["opened_ns"]
    assert (inc["opened_ns"] - t_fault) / (1.3 * S) <= 5  # within 5 iterations (1.3 s once it is slow)
    assert all(i["kind"] == "slow_rank" for i in j.incidents)
    rows = j.det.window_stats()
    late = [r for r in rows if r["comm"] == f"{TP:016x}" and r["window_end_ns"] > inc["opened_ns"] - 3 * S]
    assert late and all(r["last_share"] == 1.0 for r in late if r["rank"] == 1)
    assert {"job", "comm", "rank", "window_end_ns", "instances", "mean_lag_ms", "last_share"} <= set(rows[0])
    assert j.det.window_stats() == []  # drained
    health = j.det.health("j1")
    assert health["ranks"] == 8 and [i["kind"] for i in health["incidents"]] == ["slow_rank"]


def test_skew_alone_and_gc_blip_open_nothing_and_offsets_are_estimated(settings):
    j = HandJob(settings, COMMS, NODES)
    skew = {"n1": 40 * MS}
    steps(j, 6, skew=skew, jitter=3 * MS)
    steps(j, 1, late={TP: {2: 400 * MS}}, skew=skew)  # one GC pause
    steps(j, 8, skew=skew, jitter=3 * MS, seed=2)
    assert j.incidents == []
    offsets = j.det.clock_offsets("j1")
    assert abs((offsets[7] - offsets[3]) - 40 * MS) < 3 * MS


def test_slow_rank_resolves_after_it_recovers(settings):
    j = HandJob(settings, COMMS, NODES)
    steps(j, 5)
    steps(j, 6, late=_late(400 * MS))
    steps(j, 20)
    assert [(i["status"], i["culprit_ranks"]) for i in j.incidents] == [("open", [1]), ("resolved", [1])]


def test_downclocked_gpu_is_evidence_on_the_slow_rank(settings):
    j = HandJob(settings, COMMS, NODES)
    steps(j, 5)
    for r, node in NODES.items():
        hw = {"v": 1, "job": "j1", "node": node, "ts_ns": j.now, "rank": r, "sm_clock_mhz": 1100 if r == 1 else 1980}
        j.send(Message(topics.HW, "j1", j.now, json.dumps(hw).encode()))
    steps(j, 8, late=_late(400 * MS))
    (inc,) = j.opened("slow_rank")
    assert inc["culprit_ranks"] == [1] and inc["evidence"]["sm_clock_mhz"] == 1100
    assert j.opened("hw_fault") == []


def test_hw_anomaly_without_impact_is_hw_fault(settings):
    j = HandJob(settings, COMMS, NODES)
    steps(j, 3)
    for r, node in NODES.items():
        hw = {"v": 1, "job": "j1", "node": node, "ts_ns": j.now, "rank": r, "sm_clock_mhz": 1100 if r == 6 else 1980}
        j.send(Message(topics.HW, "j1", j.now, json.dumps(hw).encode()))
    steps(j, 8)
    assert j.opened() == []  # not yet: a slowdown may still show
    steps(j, 4)
    (inc,) = j.opened()
    assert inc["kind"] == "hw_fault" and inc["culprit_ranks"] == [6] and inc["severity"] == "P3"


def _clocks(j, low: dict[int, int]) -> None:
    for r, node in NODES.items():
        hw = {"v": 1, "job": "j1", "node": node, "ts_ns": j.now, "rank": r, "sm_clock_mhz": low.get(r, 1980)}
        j.send(Message(topics.HW, "j1", j.now, json.dumps(hw).encode()))


@pytest.mark.parametrize("drill", [False, True])
def test_clocks_that_fall_at_once_are_one_hw_fault(settings, monkeypatch, drill):
    """The fourteenth generator's power-capped rack had one P3 hw_fault per GPU (24-31 of
    them). GPUs whose clocks fell together (within `HW_AT_ONCE_NS`) are one notice naming them
    all; one whose clock falls 20 s later is another. Drill: never grouped (one per GPU)."""
    from commwatch.streams.detect import job_hw

    if drill:
        monkeypatch.setattr(job_hw, "HW_AT_ONCE_NS", -1)
    j = HandJob(settings, COMMS, NODES)
    steps(j, 3)
    _clocks(j, {2: 1300, 6: 1200, 7: 1250})
    steps(j, 12)
    first = [(i["culprit_ranks"], i["culprit_nodes"]) for i in j.opened("hw_fault")]
    if drill:
        assert sorted(first) == [([2], ["n0"]), ([6], ["n1"]), ([7], ["n1"])]
        return
    assert first == [([2, 6, 7], ["n0", "n1"])]
    (inc,) = j.opened("hw_fault")
    assert inc["severity"] == "P3" and "3 GPUs of 2 node(s)" in inc["summary"]
    assert inc["evidence"]["sm_clock_mhz"] == {"2": 1300, "6": 1200, "7": 1250}
    steps(j, 8)
    _clocks(j, {2: 1300, 6: 1200, 7: 1250, 0: 1100})
    steps(j, 12)
    later = [(i["culprit_ranks"], i["status"]) for i in j.incidents if i["kind"] == "hw_fault"]
    assert later == [([2, 6, 7], "open"), ([0], "open")]


def test_slow_link_names_the_pair_no_healthy_comm_spans(settings):
    # a ring over n0, n1, n2 is slow; the n0-n1 and n0-n2 comms are not: the n1-n2 link is to blame
    nodes = {0: "n0", 1: "n0", 2: "n1", 3: "n1", 4: "n2", 5: "n2"}
    ring, a, b = 0xC1, 0xC2, 0xC3
    j = HandJob(settings, {ring: [0, 2, 4], a: [1, 3], b: [5, 1]}, nodes)
    steps(j, 6)
    steps(j, 8, xfer={ring: 30 * MS})
    (inc,) = j.opened()
    assert inc["kind"] == "slow_link" and inc["culprit_ranks"] == [] and inc["culprit_nodes"] == ["n1", "n2"]
    assert [c["comm"] for c in inc["evidence"]["comms"]] == [f"{ring:016x}"]


def test_a_slow_link_no_comm_can_place_is_an_advisory_naming_no_node(settings):
    # one ring over n0, n1, n2 and nothing else crosses nodes: any of its three links may be
    # the slow one; naming all three nodes would name the ends of healthy links too
    nodes = {0: "n0", 1: "n1", 2: "n2"}
    ring = 0xC4
    j = HandJob(settings, {ring: [0, 1, 2]}, nodes)
    steps(j, 6)
    steps(j, 8, xfer={ring: 30 * MS})
    (inc,) = j.opened()
    assert (inc["kind"], inc["severity"], inc["culprit_nodes"], inc["culprit_ranks"]) == ("slow_link", "P3", [], [])
    assert inc["evidence"]["candidate_nodes"] == ["n0", "n1", "n2"]


def _ring_with_link_counters(settings, rising: tuple[str, ...]):
    """The ring of the test above, and each node's InfiniBand counters every iteration, as the
    node agent sends them (`cw.hw.v1`, node level; scripted): n0 had errors long before, and
    the `rising` nodes' symbol errors grow while the ring is slow."""
    nodes = {0: "n0", 1: "n1", 2: "n2"}
    ring = 0xC4
    j = HandJob(settings, {ring: [0, 1, 2]}, nodes)
    errors = {"n0": 7, "n1": 0, "n2": 0}

    def counters():
        for node in ("n0", "n1", "n2"):
            msg = {"v": 1, "job": j.job, "node": node, "ts_ns": j.now,
                   "ib": {"mlx5_0": {"tx_bytes": 10**9, "rx_bytes": 10**9, "symbol_errors": errors[node]}}}
            j.send(Message(topics.HW, j.job, j.now, json.dumps(msg).encode()))

    for _ in range(6):
        steps(j, 1)
        counters()
    for _ in range(8):
        steps(j, 1, xfer={ring: 30 * MS})
        for node in rising:
            errors[node] += 40
        counters()
    return j


def test_a_slow_ring_is_placed_on_the_nodes_whose_link_counters_show_errors(settings):
    (inc,) = _ring_with_link_counters(settings, ("n1", "n2")).opened()
    assert (inc["kind"], inc["severity"], inc["culprit_nodes"]) == ("slow_link", "P2", ["n1", "n2"])
    assert inc["evidence"]["candidate_nodes"] == ["n0", "n1", "n2"]
    assert set(inc["evidence"]["ib_symbol_errors"]) == {"n1", "n2"}
    # errors on every node of the ring tell nothing apart: the advisory, as without counters
    (inc,) = _ring_with_link_counters(settings, ("n0", "n1", "n2")).opened()
    assert (inc["severity"], inc["culprit_nodes"]) == ("P3", [])


def test_back_to_back_calls_do_not_hide_the_slow_rank(settings):
    # data parallel calls run back to back (fractions of a millisecond apart: call overhead,
    # noise); the compute lies between the pair comm's calls, where rank 2 is 150 ms slower
    import numpy as np

    pairs, world = {0xD1: [0, 1], 0xD2: [2, 3]}, 0xD3
    j = HandJob(settings, {**pairs, world: [0, 1, 2, 3]}, {r: "n0" for r in range(4)})
    rng = np.random.default_rng(4)
    seq = 0
    for it in range(40):
        t = j.now + 50 * MS
        ends = []
        for comm, ranks in pairs.items():
            starts = {r: t + (150 * MS if r == 2 and it >= 4 else 0) for r in ranks}
            ends.append(max(starts.values()) + MS)
            j.collective(comm, it, starts, ends[-1])
        t = max(ends)
        for _ in range(3):
            starts = {r: t + int(rng.integers(100_000, 400_000)) for r in range(4)}
            t = max(starts.values()) + 200_000
            j.collective(world, seq, starts, t)
            seq += 1
        j.beat(j.now)
    slow = j.opened("slow_rank")
    assert [(i["culprit_ranks"], i["evidence"]["signal"]) for i in slow] == [([2], "collectives")]
    assert slow[0]["evidence"]["busy_ms"] > 100 and j.opened("hang") == []


def test_slow_link_between_pipeline_stages_is_named_by_its_channel(settings):
    # job model, GPU-timed probe, a pipeline stage per node (TP 2, PP 2, DP 4, 2 GPUs a node):
    # only the sends between the stages on nodes 2 and 3 cross the link, no collective spans both
    from commwatch.producers import jobmodel as jm
    from commwatch.streams.detect import Detector

    cfg = jm.JobConfig(job="l1", tp=2, pp=2, dp=4, gpus_per_node=2, probe="gpu", duration_s=35.0, seed=3,
                       faults=(jm.SlowLink(2, 3, 3.0, at_s=15.0),))
    run = jm.run_job(cfg)
    assert [(t["kind"], t["nodes"], t["expect_incident"]) for t in run.truth] == [
        ("slow_link", ["l1-node-02", "l1-node-03"], True)]
    det, events = Detector(settings), []
    for m in jm.merge([run]):
        events += det.feed(m) + det.tick(m.ts_ns)
    opened = [e for e in events if e["status"] == "open"]
    assert [(e["kind"], e["culprit_nodes"]) for e in opened] == [("slow_link", ["l1-node-02", "l1-node-03"])]
    ev = opened[0]["evidence"]["comms"][0]
    assert ev["xfer_ms"] >= 2 * ev["normal_xfer_ms"] and len(ev["ranks"]) == 2
    assert opened[0]["opened_ns"] >= run.truth[0]["onset_ns"]


def test_members_doing_the_same_work_are_measured_over_the_same_instances():
    # two tensor-parallel peers, the same gaps of several kinds (20, 40 and ~122 ms: a kind at
    # three times the typical one, 40.5 ms): which instances count is one decision for both, or one
    # would average in the ~123 ms gaps and the other not (a false 1.5x between equals)
    import numpy as np

    from commwatch.streams.detect.windows import _busy_stats

    ms = 1e6
    a = np.array([20, 41, 20, 123.5, 40, 20, 42, 123.8, 20, 41]) * ms
    b = np.array([20, 41, 20, 121.0, 40, 20, 42, 121.2, 20, 41]) * ms  # the long kind a little shorter
    gaps = np.stack([a, b], axis=1)
    sums, counts, _, _, med, _, _ = _busy_stats(gaps, gaps > 0, span=1e9)
    assert counts[0] == counts[1]
    mean_a, mean_b = sums[0] / counts[0], sums[1] / counts[1]
    assert abs(mean_a / mean_b - 1) < 0.05
    assert med == [30.0, 30.0]  # the typical gap: of the kinds it holds, not the few long ones


def test_a_window_slow_in_every_instance_decides_alone_and_a_pause_does_not():
    # a member 1.6x slower in each of 12 instances is slow in all of them; a member with one
    # 600 ms pause among 11 normal gaps is as slow on average, in one instance
    import numpy as np

    from commwatch.streams.detect.rank_model import RankModel
    from commwatch.streams.detect.windows import _busy_stats

    rng = np.random.default_rng(3)
    gaps = rng.normal(40e6, 2e6, size=(12, 4))
    gaps[:, 1] *= 1.6
    gaps[5, 2] += 600e6
    sums, counts, _, steady, med, _, _ = _busy_stats(gaps, gaps > 0, span=1e9)
    assert steady[1] == 1.0 and steady[2] <= 0.1 and steady[0] == steady[3] == 0.0
    assert sums[2] / counts[2] > 1.5 * sums[0] / counts[0]  # the pause: as slow on average
    assert med[1] > 1.5 * med[0] and med[2] < 1.1 * med[0]  # not typically
    few = _busy_stats(gaps[:4], gaps[:4] > 0, span=1e9)[3]
    assert few == [None, 1.0, None, None]  # too few instances for a share: slow in all of them, or unknown

    def first(steady: bool) -> int | None:
        m = RankModel("numpy", 0.1, 2)
        for s in range(1, 6):
            if m.update(1.6, s * 10**9, s * 10**9, short=1.6, steady=steady) is not None:
                return s
        return None

    assert (first(True), first(False)) == (1, 2)


def test_a_slowing_rank_stays_judged_in_the_comm_it_was_hot_in(settings):
    # two ranks slow down 1.5x at once (job model, TP 2, PP 2, DP 4): as a rank slows, its own
    # gaps grow in its finest comm while a coarser comm's horizon still holds its healthy past
    # and looks finer for a while; were it judged there, its evidence would restart (opened
    # after ~5 iterations instead of ~3)
    from commwatch.streams.bench_detect import feed
    from commwatch.streams.bench_scenarios import jobmodel_cases
    from commwatch.streams.bench_score import score

    case = next(c for c in jobmodel_cases() if c.name == "jm/two-slow-2x2x4")
    built = case.build()
    events, refused = feed(built, settings)
    res = score(events, built.truth, built.jobs, settings.hang_floor_s)
    assert refused == 0 and res["false"] == []
    assert [t["hit"] for t in res["truths"]] == [True, True]
    assert max(t["delay_it"] for t in res["truths"]) <= 4.0


def test_ranks_whose_gaps_are_noisy_alike_are_not_named_and_a_slow_one_still_is(settings):
    """Gaps that hold more than a rank's compute (collectives overlapping it, as DDP's buckets
    and FSDP's prefetched all-gathers do) or last a few milliseconds stray from rank to rank
    and window to window by tens of percent with no rank slower than another. Judged against
    the threshold alone, some rank is over it in a few windows in a row every few seconds
    (found by a generator written apart from the detector: a P1 on a healthy DDP job). The
    job's own spread raises the bar; a rank slower by far more than it is still named."""
    import numpy as np

    dp = {0xD0: list(range(8))}
    j = HandJob(settings, dp, {r: f"n{r // 4}" for r in range(8)})
    rng = np.random.default_rng(5)
    for _ in range(50):  # each rank's gaps up to half longer or shorter, a second at a time
        steps(j, 16, step=60 * MS, late={0xD0: {r: int(rng.integers(0, 35 * MS)) for r in range(8)}})
    assert j.opened("slow_rank") == []
    steps(j, 100, step=60 * MS, late={0xD0: {5: 45 * MS}})
    assert [i["culprit_ranks"] for i in j.opened("slow_rank")] == [[5]]


@pytest.mark.parametrize("scenario, culprits", [("fsdp_healthy_gpu_sep", []), ("fsdp_slow13_gpu_sep", [[13]])])
def test_fsdp_comms_of_one_size_doing_different_work_are_judged_by_their_own_spread(settings, tmp_path, scenario,
                                                                                  culprits):
    """Generator B (written apart from the detector) runs FSDP with its all-gathers and
    reduce-scatters on two comms over the same 32 ranks, GPU-timed: the gaps between one comm's
    calls hold the other's waits and stray by 25-35 % from window to window, the other's by
    4 %. Judged by the spread pooled over the comms of their size, 23 ranks of the healthy job
    were named (P2/P3) in 70 s, one after another, 13 healthy ranks of the job with a 2x rank,
    10 of the one with a 1.3x rank. A comm of many members counts its own spread where it is
    larger, and keeps it while too few of its members have figures to know it anew (once the
    1.3x rank slowed, the noisy comm gave few, and rank 0 was named by the quiet one's)."""
    assert _gen_b_slow_ranks(settings, tmp_path, scenario) == culprits


def _gen_b_slow_ranks(settings, tmp_path, scenario: str, seed: int = 0) -> list[list[int]]:
    """Generator B's job `scenario` (drawn with `SEED` = `seed`) through the detector core: the
    ranks of each slow_rank incident opened."""
    cap = tmp_path / f"{scenario}.{seed}.cwcap"
    subprocess.run([sys.executable, str(GEN_B), scenario, str(cap)], check=True, capture_output=True,
                   env={**os.environ, "SEED": str(seed)})
    return slow_ranks_of(settings, cap)


@pytest.mark.parametrize("drill", [False, True])
def test_a_rank_whose_cost_the_jobs_steps_do_not_show_is_not_named(settings, tmp_path, monkeypatch, drill):
    """Generator B's FSDP job drawn with SEED 11 (32 ranks, one comm, all-gathers 2 ms apart;
    a rank crashes at 30.7 s): rank 23 was 2.7-3.5x between its calls for three windows from
    20.6 s, "the job loses 27 %", while the job's iterations since then took 0.94-1.01 s
    against its 0.95 s baseline: named P2, a healthy rank. Its peers did not wait for it.
    Drill: the rule off, and the hold of the comm's spread (`slow.NOISE_HOLD_NS`), which
    covers this case too (held, the spread keeps those windows from deciding)."""
    if drill:
        monkeypatch.setattr(job_slow, "UNFELT_LOSS", -1.0)
        monkeypatch.setattr(slow, "NOISE_HOLD_NS", 0)
    assert (_gen_b_slow_ranks(settings, tmp_path, "fsdp_crash", seed=11) == []) is not drill


@pytest.mark.parametrize("drill", [False, True])
def test_comms_of_one_size_doing_different_work_are_judged_by_their_own_kinds_spread(
        settings, gen_c, monkeypatch, drill):
    """The third generator's healthy Megatron job (TP 4, PP 2, DP 4, GPU-timed) reduces its
    gradients on a second stream, overlapping backward: the gaps between its data-parallel
    calls hold waits of the compute stream, and stray from window to window by tens of
    percent, the tensor-parallel ones by 1-3 %. Both are comms of 4: pooled by size, their
    spread was the quiet one's, and whole replicas were named (P1) in 60 s. Pooled by kind
    (size and strides between members), nobody. Drill: pooled by size, instances in which
    most members had no gap counted (`windows.MOST_VALID` 0) and the busy share taken for the
    compared one (`SlowTracker._measured`), and the comm's spread not held (`NOISE_HOLD_NS`):
    those three rules cover this case too (with any of them, pooled by size names nobody)."""
    from commwatch.streams.detect import windows
    from commwatch.streams.detect.comm_timing import CommTiming
    from commwatch.streams.detect.slow import SlowTracker

    if drill:
        monkeypatch.setattr(CommTiming, "kind", lambda self: len(self.ranks))
        monkeypatch.setattr(windows, "MOST_VALID", 0.0)
        monkeypatch.setattr(SlowTracker, "_measured", staticmethod(lambda ct, rank, share: share))
        monkeypatch.setattr(slow, "NOISE_HOLD_NS", 0)
    assert (slow_ranks_of(settings, gen_c("s01b")) != []) is drill


@pytest.mark.parametrize("drill", [False, True])
def test_a_rank_computing_like_its_peers_between_its_tp_calls_is_not_named(settings, gen_c, monkeypatch, drill):
    """The third generator's job with context parallelism (TP 2, CP 2), rank 10 1.4x from 20 s:
    its tensor-parallel peer 11 is judged between its context-parallel calls, whose gaps hold
    its waits for rank 10 inside their TP calls (1.35x its CP peer), and was named at P1; between
    their TP calls it computes 0.72x rank 10, as its peers do. Only the culprit is named. Drill:
    without the rule (nor the one that a rank computing clearly less than a slower one found
    with it waits for it, nor the phases' bound that follows the collectives' claim, which
    cover this case too, nor `windows.MOST_VALID`: 11's lone gaps counted), rank 11 too."""
    from commwatch.streams.detect import windows
    from commwatch.streams.detect.slow import SlowTracker

    if drill:
        monkeypatch.setattr(SlowTracker, "_normal_elsewhere", lambda *a: False)
        monkeypatch.setattr(SlowTracker, "_waiting_on_slower", lambda *a: [])
        monkeypatch.setattr(job_slow, "ECHO_CLAIM_SHARE", 0.0)
        monkeypatch.setattr(windows, "MOST_VALID", 0.0)
    named = slow_ranks_of(settings, gen_c("s13b"))
    assert any(11 in ranks for ranks in named) if drill else named == [[10]]


@pytest.mark.parametrize("drill", [False, True])
def test_a_victim_computing_like_its_tp_peer_within_their_groups_spread_is_not_named(
        settings, gen_c, monkeypatch, drill):
    """The third generator's interleaved pipeline (TP 2, PP 4), rank 13 1.5x from 20 s, drawn
    with seed 7000: the last stage's rank 15, found 2.0x between its pipeline calls (they hold
    its waits for the slow stage), computed 1.07x its TP peer between their calls, in TP groups
    whose ratios stray by 2.7-3 %: like its peer within three of that spread, not within half
    slow_impact, and it was named P2. Drill: judged within half slow_impact alone (and its
    phases' bound not following the collectives' claim, which covers this case too), rank 15
    too."""
    from commwatch.streams.detect import slow

    if drill:
        monkeypatch.setattr(slow, "ELSEWHERE_SPREADS", 0.0)
        monkeypatch.setattr(job_slow, "ECHO_CLAIM_SHARE", 0.0)
    assert slow_ranks_of(settings, gen_c("s02b", seed=7000)) == ([[13], [15]] if drill else [[13]])


@pytest.mark.parametrize("drill", [False, True])
def test_a_rank_computing_clearly_faster_than_a_slower_one_in_a_comm_they_share_is_not_named(
        settings, gen_c, monkeypatch, drill):
    """The third generator's 256-rank job (TP 8, PP 2, DP 16), rank 133 1.5x from 15 s, drawn
    with seed 6000: its TP peer 128, found 2.2x between its data-parallel calls (their gaps hold
    its waits for 133 inside their TP calls), was named P2 with it; between their TP calls it
    computed 139 ms to the culprit's 204. It waits for 133 there, although 133 was found by a
    smaller ratio (2.1x) in another comm: which of two is slower, the comm they share says. Its
    1.07x there is also within the TP groups' spread (the test above). Drill: without both
    rules, and with instances in which most members had no gap counted (`windows.MOST_VALID`
    0, which covers this case too), rank 128 is named too (with the TP group's other members)."""
    from commwatch.streams.detect import slow, windows
    from commwatch.streams.detect.slow import SlowTracker

    if drill:
        monkeypatch.setattr(slow, "ELSEWHERE_SPREADS", 0.0)
        monkeypatch.setattr(SlowTracker, "_waiting_on_slower", lambda *a: [])
        monkeypatch.setattr(windows, "MOST_VALID", 0.0)
    named = slow_ranks_of(settings, gen_c("s10c", seed=6000))
    assert any(128 in ranks for ranks in named) if drill else named == [[133]]


def test_a_stall_is_one_gap_far_over_the_other_members_and_a_pause_of_all_is_none():
    import numpy as np

    from commwatch.streams.detect.windows import _busy_stats

    rng = np.random.default_rng(5)
    gaps = rng.normal(40e6, 2e6, size=(30, 4))
    gaps[7, 2] += 1.1e9  # rank 2's data loader: its peers wait inside the next call
    gaps[20, :] += 0.6e9  # a garbage collection of every member at once
    stall = _busy_stats(gaps, gaps > 0, span=3e9)[6]
    assert stall[0] is None and stall[1] is None and stall[3] is None
    assert stall[2][0] == 1 and 1090 < stall[2][1] < 1110
    assert _busy_stats(gaps[21:], gaps[21:] > 0, span=1e9)[6] == [None] * 4


@pytest.mark.parametrize("drill", [False, True])
def test_a_rank_whose_data_loader_stalls_every_4th_iteration_is_named_and_random_stalls_are_not(
        settings, gen_c, monkeypatch, drill):
    """The third generator's Megatron job (TP 2, PP 2, DP 8, GPU-timed), rank 13's data loader
    stuck 1.15 s every 4th iteration from 20 s: the job loses ~20 %, and each stall is one
    long gap, a pause to the rate figures, its TP peer waiting inside the next call. Named
    (P3) once it stalled in 3 windows, and only it; a job whose ranks each stall once at
    random names nobody. Drill: without the stall rule, rank 13 is missed."""
    from commwatch.streams.detect.slow import SlowTracker

    if drill:
        monkeypatch.setattr(SlowTracker, "stalls", lambda self, now_ns: {})
    assert slow_ranks_of(settings, gen_c("s08a")) == ([] if drill else [[13]])
    if not drill:
        assert slow_ranks_of(settings, gen_c("s08b")) == []


@pytest.mark.parametrize("drill", ["", "cost", "repeat"])
def test_a_rank_whose_stalls_cost_under_slow_impact_is_named_once_they_repeat(settings, gen_h, monkeypatch, drill):
    """The eighth generator's allocator retries (TP 4 x PP 2 x DP 4, GPU-timed, drawn with 4):
    rank 17's iteration 300-600 ms longer every 3-7 iterations, 7-8 % of the job's time, under
    `slow_impact` (10 %): named by nothing. Now named P3 by its stalls once they repeat in six
    windows. Its healthy twin with rank 0's logging (150-350 ms every 10 iterations), drawn
    with 1, beside a hang: rank 0 is not named (its cost, estimated on three stalls, 5.6 %).
    Drills: stalls must cost `slow_impact` (`SMALL_SHARE` 1): 17 is missed; a small cost named
    on three stalls (`SMALL_REPEAT` 3): rank 0 is named."""
    from commwatch.streams.detect import stalls

    if drill == "cost":
        monkeypatch.setattr(stalls, "SMALL_SHARE", 1.0)
    if drill == "repeat":
        monkeypatch.setattr(stalls, "SMALL_REPEAT", 3)

    def slow_events(scenario: str, seed: int) -> list[dict]:
        cap, _ = gen_h(scenario, seed)
        events = replayed(settings, cap)
        return [e for e in events if e["kind"] == "slow_rank"]

    retries = slow_events("n10_alloc_retry", 4)
    assert {r for e in retries for r in e["culprit_ranks"]} == (set() if drill == "cost" else {17})
    assert all(e["severity"] == "P3" and e["evidence"]["signal"] == "stalls" for e in retries)
    logging = slow_events("n03b_eval_hang", 1)
    assert [e["culprit_ranks"] for e in logging] == ([[0], [0]] if drill == "repeat" else [])


@pytest.mark.parametrize("drill", [False, True])
def test_a_slow_rank_is_p2_once_it_lasts(settings, gen_h, monkeypatch, drill):
    """The eighth generator's MoE job (32 ranks, 4 expert groups of 8): in each group the rank
    holding the hot expert is 1.2-1.4x for 3-10 iterations, then another. Drawn with 1, its
    hot ranks 11, 13, 23 were named P2 (impact over 0.2 for a while), then resolved: three
    tickets for routing noise. A slowdown costing 20-50 % is P3 until it lasts `P2_AFTER_NS`
    (10 s): they stay P3. The same generator's two slow ranks (1.3x and 1.6x) are named P3 at
    once, and the one costing 36 % becomes P2 ten seconds on. Drill: P2 at once
    (`P2_AFTER_NS` 0). The job's expert parallelism is not counted here (a later test's rule)."""
    monkeypatch.setattr(job_slow.SlowRules, "_experts", staticmethod(lambda js: False))
    if drill:
        monkeypatch.setattr(job_slow, "P2_AFTER_NS", 0)
    cap, truth = gen_h("n02a_moe_routing")
    assert truth["jobs"][0]["culprits"] == []
    sev = {e["severity"] for e in replayed(settings, cap) if e["kind"] == "slow_rank"}
    assert sev == ({"P2", "P3"} if drill else {"P3"})
    if not drill:
        cap, truth = gen_h("n11_two_slow")
        events = [e for e in replayed(settings, cap) if e["kind"] == "slow_rank"]
        assert [(e["status"], e["severity"], e["culprit_ranks"]) for e in events] == [
            ("open", "P3", [14]), ("open", "P3", [30]), ("update", "P2", [30])]
        assert events[2]["ts_ns"] - events[1]["ts_ns"] >= job_slow.P2_AFTER_NS


@pytest.mark.parametrize("drill", [False, True])
def test_in_a_job_whose_slowness_moves_a_slow_rank_is_p2_only_once_it_lasts_longer(settings, gen_h, monkeypatch,
                                                                                    drill):
    """The same MoE job drawn with 2: hot rank 15 is named P3 at 3 s and its incident fades at
    16 s; hot rank 6, named at 6 s, stays over a fifth of the job's time for 10 s (its figures
    decay over the horizon after its stint) and was a P2 ticket. The job's slowness moves (15's
    incident faded a moment before): 6 is P2 only once it lasts `MOVING_P2_AFTER_NS` (30 s),
    and it fades at 30 s. Its twin with a 1.5x rank, drawn with 4: the culprit 21 is named (P1:
    it costs half the job), the hot rank 22 beside it no longer P2. Drill: 10 s there too. The
    job's expert parallelism is not counted here (it is the next test's rule)."""
    monkeypatch.setattr(job_slow.SlowRules, "_experts", staticmethod(lambda js: False))
    if drill:
        monkeypatch.setattr(job_slow, "MOVING_P2_AFTER_NS", job_slow.P2_AFTER_NS)
    cap, truth = gen_h("n02a_moe_routing", seed=2)
    assert truth["jobs"][0]["culprits"] == []
    events = [e for e in replayed(settings, cap) if e["kind"] == "slow_rank"]
    named = {(e["severity"], tuple(e["culprit_ranks"])) for e in events}
    assert ("P3", (15,)) in named and ("P3", (6,)) in named
    assert {sev for sev, _ in named} == ({"P2", "P3"} if drill else {"P3"})
    cap, truth = gen_h("n02b_moe_slow", seed=4)
    assert truth["jobs"][0]["culprits"] == [21]
    events = [e for e in replayed(settings, cap) if e["kind"] == "slow_rank"]
    assert any(e["severity"] == "P1" and e["culprit_ranks"] == [21] for e in events)
    p2 = {r for e in events if e["severity"] in ("P1", "P2") for r in e["culprit_ranks"]}
    assert p2 == ({21, 22} if drill else {21})


@pytest.mark.parametrize("drill", [False, True])
def test_in_a_job_with_expert_parallelism_a_slow_rank_is_p2_only_once_it_lasts_longer(settings, gen_h, monkeypatch,
                                                                                       drill):
    """The same MoE job (its ranks' coords give expert-parallel indices 0-7) drawn with 4: its
    first hot rank, 26, named P3 at 3 s, stayed over a fifth of the job's time until 28 s and
    was a P2 ticket at 13 s: no incident had faded yet, the job's slowness had not moved. In a
    job with expert parallelism a slow rank costing 20-50 % is P2 only once it lasts
    `MOVING_P2_AFTER_NS` (30 s): 26 stays P3. Its twin with a 1.5x rank 21 from 30 s, drawn
    with 1: the hot rank 22 was P2 at 15 s; now only 21 is (at 63 s). Drill: the job's
    expert parallelism not counted (`_experts`)."""
    if drill:
        monkeypatch.setattr(job_slow.SlowRules, "_experts", staticmethod(lambda js: False))
    cap, truth = gen_h("n02a_moe_routing", seed=4)
    assert truth["jobs"][0]["culprits"] == []
    named = {(e["severity"], tuple(e["culprit_ranks"])) for e in replayed(settings, cap) if e["kind"] == "slow_rank"}
    assert ("P3", (26,)) in named
    assert {sev for sev, _ in named} == ({"P2", "P3"} if drill else {"P3"})
    cap, truth = gen_h("n02b_moe_slow", seed=1)
    assert truth["jobs"][0]["culprits"] == [21]
    events = [e for e in replayed(settings, cap) if e["kind"] == "slow_rank"]
    p2 = {r for e in events if e["severity"] in ("P1", "P2") for r in e["culprit_ranks"]}
    assert p2 == ({21, 22} if drill else {21})


@pytest.mark.parametrize("drill", [False, True])
def test_a_rank_blind_in_its_pipeline_comm_is_not_named_from_a_coarser_one_while_it_computes_like_its_peers(
        settings, gen_a, monkeypatch, drill):
    """Generator A's TP=1 pipeline (PP 4, DP 4, GPU-timed) with rank 6 2x from 25 s, its draw
    of seed 3: the last stage of the culprit's pipeline, rank 14, gets no figure from its
    pipeline comm for 4 windows in a row and is then judged between its data-parallel calls,
    whose intervals hold its receives' waits (1.4x its stage), and was named P2. It computes
    0.40 of its time, as its stage's other ranks do (0.39-0.44); the culprit 0.83. Drill:
    without the rule, rank 14 is named too (and without the phases' veto, `_echoes`, which
    holds it back as well in this capture: its iteration phases are its stage's)."""
    from commwatch.streams.detect.job_stage import JobStage
    from commwatch.streams.detect.slow import SlowTracker

    if drill:
        monkeypatch.setattr(SlowTracker, "_waits_in_finer", lambda *a: False)
        monkeypatch.setattr(JobStage, "_echoes", lambda *a: [])
    assert slow_ranks_of(settings, gen_a("slow2x_1x4x4_gpu_r6", seed=3)) == ([[6], [14]] if drill else [[6]])


@pytest.mark.parametrize("scenario, culprits", [("fsdp_slow13_nopause", [[13]]), ("fsdp_commhang", [])])
def test_a_rank_its_peers_do_not_wait_for_is_not_named_slow(settings, tmp_path, scenario, culprits):
    """Generator B's FSDP jobs (one 32-rank comm, GPU-timed): the gaps between the all-gathers
    are launch latency (2 ms), and healthy ranks' ratios there stray by 35-45 %. A healthy rank
    2x in three windows in a row was named (P2, 5 s into the job with a 1.3x rank 13; 28 s into
    the job whose comm later hangs), though its peers did not wait for it: its arrival lag was
    2.2-2.5 times theirs, the culprit's 17 times. Only the culprit is named."""
    assert _gen_b_slow_ranks(settings, tmp_path, scenario) == culprits


@pytest.mark.parametrize("scenario, culprits", [("moe_slow13_enq", [[5]]), ("moe_healthy_enq", [])])
def test_a_rank_whose_waits_hide_it_is_named_by_the_phase_it_computes_apart_when_the_job_slows(
        settings, tmp_path, scenario, culprits):
    """Generator B's MoE job (TP 2, EP 8) under a host-enqueue probe, rank 5 1.3x from 25 s:
    its collectives carry no timing and every peer waits for it inside the all-to-alls, so all
    forward and backward phases stay alike; its optimizer phase (3 % of a step) is 1.3x its
    peers' and the job's steps 5-8 % over its baseline. It was missed; now it is named (P3),
    and the healthy job of that layout names nobody."""
    assert _gen_b_slow_ranks(settings, tmp_path, scenario) == culprits


def test_the_culprit_is_the_rank_its_peers_wait_for():
    """A rank newly named slow in a collective comm of 8 or more arrives there later than
    its peers' median by `LAG_STAND` times their spread around it; in smaller comms and
    pipeline comms the rule says nothing (one or two peers' lags are no typical figure).
    Half of a comm slow (a node holding half of a stage's replicas): each of that half is
    waited on, though its lag is not 4 times the others' typical absolute lag."""
    from commwatch.streams.detect.comm_timing import CommTiming
    from commwatch.streams.detect.slow import LAG_STAND, SlowTracker

    ct = CommTiming(list(range(32)), False)
    peers = {r: -0.76 + 1.52 * ((r * 7) % 32) / 31 for r in range(32)}  # typical |lag| 0.38 ms
    ct.lag_ms = {**peers, 13: 6.23, 21: 0.93}  # generator B: the culprit and a healthy rank
    assert SlowTracker._waited_on(ct, 13) and not SlowTracker._waited_on(ct, 21)
    ct.lag_ms = {**peers, 13: 6.23, 21: 6.0}  # two slow ranks: the median is the others'
    assert SlowTracker._waited_on(ct, 13) and SlowTracker._waited_on(ct, 21)
    ct.lag_ms = {**peers, 21: 0.4 * LAG_STAND + 0.1}
    assert SlowTracker._waited_on(ct, 21)
    half = {r: (15.0 if r < 16 else -15.0) + peers[r] / 10 for r in range(32)}  # 16 of 32 slow
    ct.lag_ms = half
    assert SlowTracker._waited_on(ct, 3) and not SlowTracker._waited_on(ct, 20)
    small = CommTiming([4, 5], False)
    small.lag_ms = {4: 0.6, 5: -0.6}  # a TP pair: each one's lag is the other's, negated
    assert SlowTracker._waited_on(small, 4)
    pipe = CommTiming(list(range(8)), True)
    assert SlowTracker._waited_on(pipe, 3)


def test_a_tensor_parallel_peer_waiting_on_a_slower_rank_is_not_named_with_it():
    """Generator B's MoE job (TP 2, EP 8): rank 6 computes 2x; its TP peer 7 waits for it inside
    their TP calls, so 7's intervals between its expert-parallel calls are 1.25-1.3x its EP
    peers' and it was named too. Between their own TP calls 7 computes 0.6x what 6 does: the
    slower one is what the group waits for. Two ranks of one group slow alike stay named."""
    from commwatch.streams.detect.comm_timing import CommTiming
    from commwatch.streams.detect.slow import SlowTracker

    st = SlowTracker(0.1, 2)
    st.comms = {"tp": CommTiming([6, 7], False), "ep6": CommTiming([0, 2, 4, 6], False),
                "ep7": CommTiming([1, 3, 5, 7], False)}
    found = {6: {"ratio": 1.95, "signal": "collectives"}, 7: {"ratio": 1.27, "signal": "collectives"}}
    long = {"tp": {6: (1.7, 25.0, 15.0, 0.3), 7: (0.6, 15.0, 25.0, 0.3)},
            "ep6": {6: (1.95, 26.0, 13.3, 0.3)}, "ep7": {7: (1.27, 19.5, 15.4, 0.3)}}
    assert st._waiting_on_slower(found, long, set()) == [7]
    # a 1.3x rank (MoE, TP 2): its peer computed 0.89-0.92x of it between their TP calls, 1.12x its
    # expert-parallel peers between its own: within the hysteresis margin, still the victim
    mild = {"tp": {6: (1.09, 20.93, 19.2, 0.85), 7: (0.92, 19.2, 20.93, 0.93)},
            "ep6": {6: (1.27, 17.17, 13.51, 0.67)}, "ep7": {7: (1.12, 15.7, 14.19, 0.69)}}
    assert st._waiting_on_slower({6: {"ratio": 1.27, "signal": "collectives"},
                                  7: {"ratio": 1.12, "signal": "collectives"}}, mild, set()) == [7]
    alike = {"tp": {6: (1.02, 25.0, 24.5, 0.3), 7: (0.98, 24.5, 25.0, 0.3)},
             "ep6": {6: (1.5, 26.0, 17.0, 0.3)}, "ep7": {7: (1.45, 25.0, 17.0, 0.3)}}
    both = {r: {"ratio": x, "signal": "collectives"} for r, x in ((6, 1.5), (7, 1.45))}
    assert st._waiting_on_slower(both, alike, set()) == []


@pytest.mark.parametrize("drill", [False, True])
def test_peers_found_slow_by_far_less_than_their_groups_culprit_wait_for_it(monkeypatch, drill):
    """Generator E's 1.3x rank 613 of a TP 8 x PP 8 x DP 16 job drawn with SEED 5: its whole TP
    group computed 1.19-1.23x the sibling groups between its TP calls (a GPipe schedule's
    bubbles in those gaps), so peers 612 and 614, found 1.13-1.15x in their pipeline comms to
    613's 1.26x, seemed slow themselves (`slow_itself`) and were named with it. A peer that
    computes slower in the group and was found 1.5x the excess or more is what they wait for.
    A launch-bound node (every member found 1.13-1.14x, slow itself) stays named whole.
    Drill: no such rule, 612 and 614 kept."""
    from commwatch.streams.detect.comm_timing import CommTiming
    from commwatch.streams.detect.slow import SlowTracker

    if drill:
        monkeypatch.setattr(slow, "ITSELF_APART", float("inf"))
    group = list(range(608, 616))
    st = SlowTracker(0.1, 2)
    st.comms = {"tp": CommTiming(group, False)}
    st.coords = {r: {"tp": r % 8, "pp": 4, "dp": 9} for r in group}
    gaps = {608: 520.0, 609: 522.0, 610: 519.0, 611: 521.0, 612: 536.0, 613: 557.8, 614: 538.5, 615: 518.0}
    long = {"tp": {r: (g / 530.0, g, 530.0, 0.3) for r, g in gaps.items()}}
    found = {613: {"ratio": 1.26, "signal": "collectives", "slow_itself": "tp"},
             614: {"ratio": 1.133, "signal": "collectives", "slow_itself": "tp"},
             612: {"ratio": 1.149, "signal": "collectives"}}
    assert sorted(st._waiting_on_slower(found, long, set())) == ([] if drill else [612, 614])
    node = {r: {"ratio": 1.125 + 0.002 * (r % 8), "signal": "collectives", "slow_itself": "tp"} for r in group}
    assert st._waiting_on_slower(node, long, set()) == []


def test_a_rank_is_not_judged_in_a_coarser_comm_while_its_finer_one_gives_it_no_figure(monkeypatch):
    """Generator A's TP=1 pipeline (PP 4, DP 4), rank 6 computing 2x: rank 14, the last stage of
    its pipeline, waits on it inside its receives, so its intervals between its data-parallel
    calls (a whole iteration) are 1.38x its stage's. Its pipeline comm, current all along, now
    and then gives it no figure (too few intervals of a kind in the latest windows), and rank 14
    was judged in the data-parallel comm meanwhile, until named at P2. It is not judged then;
    a rank whose only comm is the coarse one still is."""
    from commwatch.streams.detect.comm_timing import CommTiming
    from commwatch.streams.detect.slow import SlowTracker

    st = SlowTracker(0.1, 2)
    st.comms = {"pp": CommTiming([2, 6, 10, 14], True), "dp3": CommTiming([12, 13, 14, 15], False),
                "dp1": CommTiming([4, 5, 6, 7], False)}
    figures: dict = {}
    monkeypatch.setattr(st, "_comm_ratios", lambda now_ns, stale, latest: figures)
    coords = {r: {"pp": r // 4, "dp": r % 4} for r in range(16)}
    named = set()
    for i in range(40):
        now = (i + 1) * 10**9
        for ct in st.comms.values():
            ct.ts_ns, ct.interval_ns = now, 1e9
        figures.clear()
        figures.update({"pp": {14: (1.0, 200.0, 200.0, 0.8)} if i % 4 == 0 else {},
                        "dp3": {14: (1.38, 1045.0, 757.0, 0.7)}, "dp1": {5: (1.38, 1045.0, 757.0, 0.7)}})
        named |= set(st.evaluate(now, coords, 16, set()))
    assert named == {5}


def test_a_rank_whose_finer_comm_stops_giving_it_figures_is_judged_in_a_coarser_one(monkeypatch):
    """The rule above has a bound: a rank whose finer comm goes on closing windows that never
    give it a figure again (its intervals there too few of a kind, window after window) is
    judged in its coarser comm after `BLIND_WINDOWS` of them: slow there, it is named, not
    left unjudged for as long as the finer comm stays current."""
    from commwatch.streams.detect.comm_timing import CommTiming
    from commwatch.streams.detect.slow import BLIND_WINDOWS, SlowTracker

    st = SlowTracker(0.1, 2)
    st.comms = {"pp": CommTiming([2, 6, 10, 14], True), "dp3": CommTiming([12, 13, 14, 15], False)}
    figures: dict = {}
    monkeypatch.setattr(st, "_comm_ratios", lambda now_ns, stale, latest: figures)
    coords = {r: {"pp": r // 4, "dp": r % 4} for r in range(16)}
    first = None
    for i in range(30):
        now = (i + 1) * 10**9
        for ct in st.comms.values():
            ct.ts_ns, ct.interval_ns = now, 1e9
        figures.clear()
        figures.update({"pp": {14: (1.0, 200.0, 200.0, 0.8)} if i == 0 else {2: (1.0, 200.0, 200.0, 0.8)},
                        "dp3": {14: (1.38, 1045.0, 757.0, 0.7)}})
        if 14 in st.evaluate(now, coords, 16, set()) and first is None:
            first = i
    assert first is not None and BLIND_WINDOWS < first <= BLIND_WINDOWS + 3  # unjudged meanwhile, then found there


@pytest.mark.parametrize("drill", [False, True])
def test_an_echo_in_another_pipelines_phases_is_not_named(settings, gen_a, monkeypatch, drill):
    """Generator A's TP=1 pipeline with a 2x rank (6: stage 1 of replica 2), drawn with SEED 2:
    another replica's last stage (12) was 1.10x its stage in backward (its data-parallel
    reduction waits there for the slow pipeline's) while the culprit was 2.0x in forward, and
    was named P3 by its phases. Of phase verdicts, as of the collectives', one whose excess is
    under a third of the largest is its echo. Drill: without that, rank 12 too."""
    from commwatch.streams.detect import steps

    if drill:
        monkeypatch.setattr(steps, "dominant", lambda found, keep=frozenset(): found)
    assert slow_ranks_of(settings, gen_a("slow2x_1x4x4_gpu_r6", seed=2)) == ([[6], [12]] if drill else [[6]])


@pytest.mark.parametrize("drill", [False, True])
def test_a_slow_node_whose_tp_groups_are_slow_as_a_whole_is_named_at_once(settings, gen_a, monkeypatch, drill):
    """Generator A's node 2 (ranks 16-23: four TP pairs of stage 0, a quarter of its replicas)
    1.4x from 20 s, drawn with SEED 3: each rank was hot in its data-parallel comm from 22.4 s,
    but computed like its TP peer between their calls (the peer on the same slow node), and
    was taken for a victim; rank 17 alone was named, P3 at 42 s. A rank computing like peers
    that are slow too is no victim: the node is named in one incident at 25.5 s. Drill: peers
    counted whether slow or not, rank 17 alone (and no TP group slow as a whole by its phases
    either: they name the node too since a stage's several whole groups count, `steps._whole`)."""
    from commwatch.streams.detect import steps as steps_mod
    from commwatch.streams.detect.slow import SlowTracker

    if drill:
        elsewhere = SlowTracker._normal_elsewhere
        monkeypatch.setattr(SlowTracker, "_normal_elsewhere", lambda self, *a: elsewhere(self, *a[:5]))
        monkeypatch.setattr(steps_mod, "_whole", lambda *a: False)
    named = slow_ranks_of(settings, gen_a("slownode_2x2x16_gpu_node2_quarterstage", seed=3))
    assert named == ([[17]] if drill else [list(range(16, 24))])


def test_a_victim_whose_only_tp_peer_is_the_culprit_is_not_named(settings, gen_c):
    """The third generator's interleaved pipeline (TP 2), rank 13 slow from 20 s, drawn with
    seed 6000: its TP peer 12, found slow in a coarser comm, computed less than 13 between
    their TP calls, yet that comm was passed over because its one peer was slow too (the rule
    for a slow node, whose TP groups compute alike), and 12 was named P2 with it (as on
    72778fa). A peer clearly slower there is the one it waits for."""
    assert slow_ranks_of(settings, gen_c("s02b", seed=6000)) == [[13]]


@pytest.mark.parametrize("drill", [False, True])
def test_a_members_lone_gap_where_its_peers_calls_came_back_to_back_is_not_compute(monkeypatch, drill):
    # a data-parallel comm of 16 whose two calls an iteration are 33 ms apart and the next two
    # back to back (generator C's 512-rank job drawn with 19000): member 3 had a 108 ms gap
    # where the others had none (its lateness, not work they did too); counted, it doubled its
    # mean and named it '66 % slower'. Drill: an instance counts wherever any member had a gap
    import numpy as np

    from commwatch.streams.detect import windows

    if drill:
        monkeypatch.setattr(windows, "MOST_VALID", 0.0)
    ms = 1e6
    rng = np.random.default_rng(5)
    gaps = np.zeros((4, 16))
    gaps[1] = rng.normal(33, 1, 16) * ms
    gaps[0, 3], gaps[0, 11] = 107.6 * ms, 10.2 * ms
    gaps[3] = rng.normal(2480, 30, 16) * ms  # the gap that spans the iteration's end (an outlier)
    sums, counts, _, _, _, _, _ = windows._busy_stats(gaps, gaps >= windows.MIN_GAP_NS, span=2.8e9)
    ratio = (sums[3] / counts[3]) / (sums[0] / counts[0])
    assert (ratio < 1.1) is not drill
    assert (counts[3] == counts[0]) is not drill


@pytest.mark.parametrize("drill", [False, True])
def test_ranks_a_slow_link_slows_are_not_named_and_the_link_stays_on_its_node(settings, gen_f, monkeypatch, drill):
    """The sixth generator's NIC at 1/4 bandwidth under TP 16 across two nodes, drawn with 5:
    the link was named P2 on node 3, then 8 of the TP group's 16 ranks looked 13-17 % slower
    between their calls and were named P3 slow ranks, and the TP comm left the link's
    evidence (its ranks counted as slow): the link became a P3 over four nodes. Now the link
    alone, P2 on node 3 to the end. Drill: an open link explains no rank and keeps no comm."""

    if drill:
        monkeypatch.setattr(job_stage.JobStage, "_link_comms", staticmethod(lambda js: set()))
    cap, _ = gen_f("q10_tp16_slow_nic", seed=5)
    events = replayed(settings, cap)
    assert {e["kind"] for e in events} == ({"slow_link", "slow_rank"} if drill else {"slow_link"})
    link = [e for e in events if e["kind"] == "slow_link"][-1]
    assert (link["severity"], link["culprit_nodes"]) == (("P3", []) if drill else ("P2", [f"{link['job']}-n03"]))


@pytest.mark.parametrize("drill", [False, True])
def test_a_lone_straggler_while_a_link_is_slow_is_named_on_time(settings, gen_o, monkeypatch, drill):
    """The fifteenth generator's 2-node job (TP 2 x PP 2 x DP 4) while the spine is congested
    (40-70 s: a P2 link between its two nodes, rightly: nothing inside the job tells a spine
    from their link), rank 5 1.6x from 45 s: found 1.3x against its TP peer on its own node,
    it was held back as the link's victim until the congestion ended, named P3 25.7 s after
    onset. A rank found alone on its node, in a comm the link was not found on and does not
    cross, is not the link's victim. Drill: every member of the link's comms is."""
    from commwatch.capture import CaptureWriter, read_sorted

    if drill:
        monkeypatch.setattr(job_slow, "LINK_LONE_APART", False)
    cap, truth = gen_o("e_noisy_neighbours")
    job = next(j for j in truth["jobs"] if j["job"] == "noisy-00")
    own = [m for m in read_sorted(cap) if (m.key or "").split("/")[0] == job["job"]
           or m.topic != topics.CALLS and json.loads(m.value).get("job") == job["job"]]
    kept = cap.parent / "noisy-00.cwcap"
    with CaptureWriter(kept) as out:
        for m in own:
            out.write(m)
    events = [e for e in replayed(settings, kept) if e["kind"] == "slow_rank"]
    assert {r for e in events for r in e["culprit_ranks"]} == {5}
    delay = (events[0]["ts_ns"] - job["onset_ns"]) / 1e9
    assert (delay > 20) if drill else (delay < 10), delay


@pytest.mark.parametrize("drill", [False, True])
def test_a_slow_link_inside_a_node_and_a_rank_slow_in_its_own_transfers_are_named(settings, gen_g, monkeypatch,
                                                                                  drill):
    """The seventh generator: a node's NVLink degraded (its TP comm's transfers 12x, no rank
    slower) was reported only as the job's unexplained 37 % slowdown: a comm inside one node
    never counted for a link. Rank 17 slow in its own comm kernels (3x transfers in every comm
    it is in, its compute normal): a P3 link over all nodes, no rank named. Now the node's
    link P2, and rank 17 named in a P2 on its node, the one member its slow comms share.
    Drill (on the second): comms inside one node do not count."""

    if drill:
        monkeypatch.setattr(slow.SlowTracker, "_in_node", staticmethod(lambda ct, node_of: False))
    got = {"e05-nvlink-degraded": None}
    for name in ("e07-comm-kernel-slow",) if drill else ("e05-nvlink-degraded", "e07-comm-kernel-slow"):
        cap, _ = gen_g(name)
        events = replayed(settings, cap)
        got[name] = [(e["kind"], e["severity"], e["culprit_ranks"], e["culprit_nodes"]) for e in events
                     if e["severity"] in ("P0", "P1", "P2")]
    assert drill or got["e05-nvlink-degraded"] == [("slow_link", "P2", [], ["node-007"])]
    assert (got["e07-comm-kernel-slow"] == [("slow_link", "P2", [17], ["node-002"])]) is not drill


@pytest.mark.parametrize("drill", ["", "key", "explains"])
def test_a_slow_nic_is_one_incident_that_also_explains_the_jobs_slowdown(settings, gen_d, monkeypatch, drill):
    """Generator D's slow NIC drawn with 10 (its node's transfers slow from 20 s, no rank
    slow): its node pair was named P2, then the node alone in a second P2 a second later, both
    open ten seconds; and the job's 24 % slowdown was reported as unexplained (P3) while the
    link's incident was open. Now one incident, narrowed to the node by an update, and no
    unexplained slowdown. Drills: each node set its own incident; no link explaining it."""

    if drill == "key":
        monkeypatch.setattr(job_stage.JobStage, "_link_key", staticmethod(lambda js, nodes: ("slow_link", tuple(nodes))))
    if drill == "explains":
        monkeypatch.setattr(job_stage.JobStage, "_link_open", staticmethod(lambda js: False))
    cap, _ = gen_d("n01_slow_nic", seed=10)
    events = replayed(settings, cap)
    links = [e for e in events if e["kind"] == "slow_link"]
    unexplained = [e for e in events if e["status"] == "open" and "job_slowdown" in e["evidence"]]
    assert (len({e["incident"] for e in links}) == 1) is (drill != "key")
    assert drill == "key" or links[-1]["culprit_nodes"] == ["node-02"]
    assert (unexplained == []) is (drill != "explains")


@pytest.mark.parametrize("drill", [False, True])
def test_a_slow_rank_nothing_judges_for_a_while_stays_one_incident(settings, gen_g, monkeypatch, drill):
    """The seventh generator's job of 25-32 s steps drawn with 5: its 1.3x rank 25 is named by
    the collectives 13 s into the capture; from 27 s its comm's windows carry no figure for it
    (the iteration's later calls) and the job's step is not known yet (its first iteration ends
    at 31 s), so the book's 10 s quiet period ran out: the incident resolved at 37 s and opened
    again at 57 s, two incidents for one fault. Now it stays open, one incident, to the end.
    Drill: an incident whose rank nothing judges is not kept (`UNJUDGED_KEEP_NS` 0)."""

    if drill:
        monkeypatch.setattr(job_slow, "UNJUDGED_KEEP_NS", 0)
    cap, truth = gen_g("e23-long-steps", 5)
    assert truth["jobs"][0]["culprits"] == [25]
    events = replayed(settings, cap)
    slow_events = [(e["status"], e["culprit_ranks"]) for e in events if e["kind"] == "slow_rank"]
    assert [s for s, r in slow_events if s in ("open", "resolved")] == (
        ["open", "resolved", "open"] if drill else ["open"])
    assert {tuple(r) for _, r in slow_events} == {(25,)}


@pytest.mark.parametrize("drill", [False, True])
def test_two_slow_ranks_of_one_stage_in_two_replicas_stay_named(settings, gen_h, monkeypatch, drill):
    """The eighth generator's TP 4 x PP 2 x DP 4 job: rank 14 1.3x from 20 s, rank 30 (the
    same stage and TP position, another data-parallel replica) 1.6x from 30 s, both found in
    the data-parallel comm they share. 14 was taken to wait for 30 (`_waiting_on_slower`: 30
    computes slower in a comm they share) and its incident resolved 10 s after 30 was named,
    while 14 was as slow: waits for a peer fall inside the calls of the comm a rank was found
    in, not between them. Now both stay named, in their own incidents, to the end. Drill: the
    comm a rank was found in counts for its waits (`FOUND_COMM_APART` off)."""

    if drill:
        monkeypatch.setattr(slow, "FOUND_COMM_APART", False)
    cap, truth = gen_h("n11_two_slow")
    assert truth["jobs"][0]["culprits"] == [14, 30]
    events = replayed(settings, cap)
    opened = [e["culprit_ranks"] for e in events if e["kind"] == "slow_rank" and e["status"] == "open"]
    resolved = [e["culprit_ranks"] for e in events if e["kind"] == "slow_rank" and e["status"] == "resolved"]
    assert opened == [[14], [30]]
    assert resolved == ([[14]] if drill else [])


@pytest.mark.parametrize("drill", [False, True])
def test_two_ranks_of_a_node_found_at_once_are_not_one_node_fault(settings, gen_h, monkeypatch, drill):
    """The eighth generator's MoE job drawn with 5: rank 21 1.5x from 30 s among hot experts
    (a rank of each expert group 1.2-1.4x for 3-10 iterations, then another). Rank 16, hot,
    and 21, of one node of eight, were found at one evaluation and named in one node incident,
    which became a P1 naming both. Two of a node's eight ranks are not a node slow as a whole:
    held back a few seconds (more of the node may follow), each is then named alone (21's P1
    names it alone). Drill: any two ranks of a node found at once are one node fault
    (`NODE_SHARE` 0)."""

    if drill:
        monkeypatch.setattr(job_slow, "NODE_SHARE", 0.0)
    cap, truth = gen_h("n02b_moe_slow", 5)
    assert truth["jobs"][0]["culprits"] == [21]
    events = replayed(settings, cap)
    named = [e["culprit_ranks"] for e in events if e["kind"] == "slow_rank" and 21 in e["culprit_ranks"]]
    paged = {tuple(e["culprit_ranks"]) for e in events if e["kind"] == "slow_rank" and e["severity"] in ("P0", "P1")}
    assert named and (paged == {(16, 21)} if drill else {tuple(n) for n in named} == {(21,)} and paged == {(21,)})


@pytest.mark.parametrize("drill", [False, True])
def test_a_coarse_comm_idle_between_phases_does_not_hide_a_slow_rank_in_its_finer_one(settings, gen_m, monkeypatch,
                                                                                     drill):
    """The thirteenth generator's colocated RL job (32 ranks, rollout engines TP 4, GPU-timed):
    rank 13's GPU 1.5x slower in generation from round 1. Its TP comm showed it (decode
    intervals 1.48x its peers'), but the 32-rank rollout gather, in use and idle through each
    generation, had no current figures, and a comm in use without them made all its members
    unknown: nobody was judged during generation, and rank 13 was never named. A comm whose
    intervals were coarser than those a rank is judged by cannot be its finest. Drill: every
    missing comm may be finer."""
    if drill:
        monkeypatch.setattr(slow.SlowTracker, "_may_be_finer", staticmethod(lambda missing_low, low: True))
    cap, truth = gen_m("slow_rollout")
    assert truth["culprit_ranks"] == [13]
    named = {tuple(e["culprit_ranks"]) for e in replayed(settings, cap) if e["kind"] == "slow_rank"}
    assert named == (set() if drill else {(13,)})
