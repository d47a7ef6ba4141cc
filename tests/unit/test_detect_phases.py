"""Phase timings (cw.steps.v1): a lone compute straggler among ranks doing the same work,
not a phase too short to slow anyone, nor a phase many ranks are slow in (it holds waits);
a slow tensor-parallel group told apart by the phase its members compute apart."""

from commwatch.streams.detect.steps import StepTracker

S = 1_000_000_000


def _run(phases_of, iterations=12, world=8):
    coords = {r: {"tp": r % 2, "pp": 0, "dp": r // 2} for r in range(world)}
    st = StepTracker(slow_impact=0.2, slow_windows=2, model="numpy")
    found = {}
    for it in range(iterations):
        t0 = it * S
        for r in range(world):
            st.add({"v": 1, "job": "j", "rank": r, "iteration": it, "t_start_ns": t0, "t_end_ns": t0 + S,
                    "phases": phases_of(r, it)})
        found.update(st.evaluate((it + 1) * S, coords, set(found)))
    return found


def test_a_lone_slow_phase_names_its_rank():
    found = _run(lambda r, it: {"forward_ms": 450.0 if r == 5 and it >= 4 else 300.0, "backward_ms": 500.0})
    assert set(found) == {5} and found[5]["phase"] == "forward_ms" and found[5]["impact"] >= 0.1


def test_a_phase_too_short_to_matter_names_nobody():
    # backward takes under a millisecond of a one-second step: 40 % slower there is noise
    found = _run(lambda r, it: {"forward_ms": 300.0, "backward_ms": 0.084 if r == 3 else 0.057})
    assert found == {}


def test_a_phase_many_ranks_are_slow_in_holds_waits():
    found = _run(lambda r, it: {"forward_ms": 450.0 if r in (2, 3, 4) else 300.0, "backward_ms": 500.0})
    assert found == {}


def test_a_whole_tensor_parallel_group_slow_in_a_phase_names_nobody():
    # GPU-timed phases hold the NCCL kernels: rank 4's TP peer 5 waits for it inside forward
    # (2 of 32 ranks: few enough to look like stragglers)
    found = _run(lambda r, it: {"forward_ms": 450.0 if r in (4, 5) and it >= 4 else 300.0, "backward_ms": 500.0},
                 world=32)
    assert found == {}
    alone = _run(lambda r, it: {"forward_ms": 450.0 if r == 4 and it >= 4 else 300.0, "backward_ms": 500.0}, world=32)
    assert set(alone) == {4}


def test_a_slow_tensor_parallel_group_is_told_apart_by_the_phase_its_members_compute_apart():
    # rank 5 is 1.5x slow; its TP peer 4 waits for it in every TP collective of forward and
    # backward, so both are equally slow there; only in the optimizer (no TP waits) is 5 alone
    def phases(r, it):
        slow = it >= 4 and r in (4, 5)
        return {"forward_ms": 450.0 if slow else 300.0, "backward_ms": 750.0 if slow else 500.0,
                "optimizer_ms": 60.0 if slow and r == 5 else 40.0}

    found = _run(phases)
    assert set(found) == {5} and found[5]["phase"] in ("forward_ms", "backward_ms")
    # the optimizer says nothing apart: nobody is named (as without it)
    assert _run(lambda r, it: {**phases(r, it), "optimizer_ms": 40.0}) == {}
    # the group's both members slower in the optimizer too: nobody
    assert _run(lambda r, it: {**phases(r, it), "optimizer_ms": 60.0 if it >= 4 and r in (4, 5) else 40.0}) == {}


def test_medians_of_the_others_are_what_statistics_gives():
    import random
    import statistics

    from commwatch.streams.detect.steps import _medians_of_others

    rng = random.Random(7)
    for n in range(2, 30):
        for _ in range(50):
            v = [rng.choice([rng.random(), 1.0, 2.0, float(rng.randint(0, 5))]) for _ in range(n)]
            assert _medians_of_others(v) == [statistics.median(v[:i] + v[i + 1:]) for i in range(n)]
