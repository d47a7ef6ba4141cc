"""Phase timings (cw.steps.v1): a lone compute straggler among ranks doing the same work,
not a phase too short to slow anyone, nor a phase many ranks are slow in (it holds waits);
a slow tensor-parallel group told apart by the phase its members compute apart, or slow as a
whole when they all are there."""

import pytest

from commwatch.capture import read_sorted
from commwatch.decode import decode_messages
from commwatch.streams.detect import Detector, job_slow, steps
from commwatch.streams.detect.steps import StepTracker
from detect_jobs import replayed

S = 1_000_000_000


def _run(phases_of, iterations=12, world=8, device=False):
    coords = {r: {"tp": r % 2, "pp": 0, "dp": r // 2} for r in range(world)}
    st = StepTracker(slow_impact=0.2, slow_windows=2, model="numpy")
    st.device = device  # the job's collectives run on devices: its phases hold their waits
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
    # the group's both members slower alike in the optimizer too: the group is slow as a whole
    # (a slow node), both named as one group; unlike (one 1.5x, one 1.2x: the group is not slow
    # alike, nor is one member alone), nobody
    whole = _run(lambda r, it: {**phases(r, it), "optimizer_ms": 60.0 if it >= 4 and r in (4, 5) else 40.0})
    assert set(whole) == {4, 5} and whole[4]["group"] == whole[5]["group"]
    unlike = _run(lambda r, it: {**phases(r, it), "optimizer_ms": {5: 60.0, 4: 48.0}.get(r, 40.0) if it >= 4 else 40.0})
    assert unlike == {}


@pytest.mark.parametrize("drill", [False, True])
def test_a_slow_member_whose_tp_peers_wait_for_it_inside_a_phase_is_named_by_their_ratio(monkeypatch, drill):
    """Rank 5 computes 1.3x slower: its TP peer 4 waits for it inside forward (1.3x there), 5
    itself not (1.05x, under `slow_impact`); its optimizer step, computed apart, is 1.3x, and
    so is that of its data-parallel peers (1, 3, 7), which wait for it in the distributed
    optimizer's all-gather (generator E's TP 8 x DP 16 job under a host-enqueue probe). Rank 5
    alone of its group is slower in its own compute: named, at its peers' ratio. While 5's own
    compute is like the others', or where the phases do not hold the collectives' waits (a
    host-blocking backend: the gloo job whose TP pair's 4x rank was passed over for its peer,
    its optimizer step 1.15x by chance), its peer 4 is the one slower (in forward), as before.
    Drill: the rule set aside, 4 is named."""
    if drill:
        monkeypatch.setattr(steps, "PEERS_WAIT_INSIDE", False)

    def phases(r, it, local=52.0, peer=1.3):
        late = it >= 4
        fwd = {4: peer, 5: 1.05}.get(r, 1.0) if late else 1.0
        # 5 is as long inside its phases as 4 (the steps are one length): not outside them
        bwd = 500.0 + (300.0 * (peer - 1.05) + 40.0 - local if late and r == 5 else 0.0)
        return {"forward_ms": 300.0 * fwd, "backward_ms": bwd,
                "optimizer_ms": local if late and r % 2 == 1 else 40.0}

    found = _run(phases, device=True)
    assert set(found) == ({4} if drill else {5})
    assert drill or (found[5]["phase"] == "forward_ms" and found[5]["ratio"] >= 1.25)
    assert set(_run(lambda r, it: phases(r, it, local=40.0), device=True)) == {4}
    assert set(_run(phases)) == {4}  # host-blocking


@pytest.mark.parametrize("drill", [False, True])
def test_of_one_data_parallel_gather_only_the_slowest_groups_member_is_named(monkeypatch, drill):
    """Rank 1 computes 1.4x slower: its TP peer 0 waits for it in forward. The TP group {4, 5}
    is slower too (1.2x: it waits elsewhere, a pipeline). The distributed optimizer's all-gather
    makes every member of the data-parallel group of 1 (1, 3, 5, 7) slower in its optimizer
    step alike: it tells 1 apart from its group, and 5 from its group. Only 1, whose group is
    slowest, is named. Each slower in its optimizer step alone (3 and 7 not: no gather), both
    are (two stragglers). Drill: both named either way."""
    if drill:
        monkeypatch.setattr(steps, "ONE_PER_GATHER", False)

    def phases(r, it, gather=True):
        late = it >= 4
        fwd = {0: 1.4, 1: 1.4, 4: 1.2, 5: 1.2}.get(r, 1.0) if late else 1.0
        slow_local = r in (1, 5) or (gather and r % 2 == 1)
        return {"forward_ms": 300.0 * fwd, "backward_ms": 500.0,
                "optimizer_ms": 52.0 if late and slow_local else 40.0}

    assert set(_run(phases)) == ({1, 5} if drill else {1})
    assert set(_run(lambda r, it: phases(r, it, gather=False))) == {1, 5}


def test_of_one_gathers_rivals_the_slowest_since_the_onset_is_named():
    """As above, with the onset at iteration 8 and rank 5 a little slower than rank 1 in forward
    before it (jitter, 1.02x against 0.99x): which of them is slower is judged over the
    iterations in which one of them stood out, not over the kept ones before the onset, whose
    jitter named 5 (generator E's f17 drawn with 15: 51 named P3 ten iterations before 11)."""
    def phases(r, it):
        late = it >= 8
        fwd = {0: 1.4, 1: 1.4, 4: 1.2, 5: 1.2}.get(r, 1.0) if late else {5: 1.02, 1: 0.99}.get(r, 1.0)
        return {"forward_ms": 300.0 * fwd, "backward_ms": 500.0,
                "optimizer_ms": 52.0 if late and r % 2 == 1 else 40.0}

    assert set(_run(phases, iterations=16)) == {1}


def test_a_tp_group_next_to_a_slow_rank_in_its_pipeline_is_not_told_apart_by_its_local_phase():
    """TP 2 x PP 2 x DP 4: rank 1 (stage 0) computes 1.4x slower from iteration 4, its TP peer 0
    waits for it in forward and backward, its optimizer step alone shows it: named. The next
    stage's group of its pipeline, ranks 2 and 3, waits for it there too (1.3x); in two
    iterations rank 3's optimizer step is 1.25x (jitter). That group waits on a stage with a named slow rank:
    3 is not told apart by its local phase (generator D's ramp drawn with 18: 25 named P3 beside
    22). Drill: the same group next to no slow rank (rank 1 healthy, 2 and 3 waiting on
    something else): 3 is named."""
    coords = {r: {"tp": r % 2, "pp": (r // 2) % 2, "dp": r // 4} for r in range(16)}

    def run(culprit: bool) -> dict:
        st = StepTracker(slow_impact=0.2, slow_windows=2, model="numpy")
        st.device = True
        found: dict = {}
        for it in range(16):
            for r in range(16):
                late = it >= 4
                fwd = {0: 1.4, 1: 1.4, 2: 1.3, 3: 1.3}.get(r, 1.0) if late and (culprit or r in (2, 3)) else 1.0
                local = 1.4 if late and culprit and r == 1 else 1.25 if r == 3 and it in (9, 10) else 1.0
                phases = {"forward_ms": 300.0 * fwd, "backward_ms": 500.0 * fwd, "optimizer_ms": 40.0 * local}
                st.add({"v": 1, "job": "j", "rank": r, "iteration": it, "t_start_ns": it * S, "t_end_ns": (it + 1) * S,
                        "phases": phases})
            found.update(st.evaluate((it + 1) * S, coords, set(found)))
        return found

    assert set(run(culprit=True)) == {1}
    assert set(run(culprit=False)) == {3}


def test_a_job_resumed_from_a_checkpoint_warms_up_too():
    # iterations numbered from 5000: rank 5's first two are 2x slow in every phase (a cold
    # data loader, compilation), then it is like the others: nobody is named
    coords = {r: {"tp": 0, "pp": 0, "dp": r} for r in range(8)}
    st = StepTracker(slow_impact=0.2, slow_windows=2, model="numpy")
    found = {}
    for k in range(8):
        it = 5000 + k
        for r in range(8):
            f = 2.0 if r == 5 and k < 2 else 1.0
            st.add({"v": 1, "job": "j", "rank": r, "iteration": it, "t_start_ns": k * S, "t_end_ns": (k + 1) * S,
                    "phases": {"forward_ms": 300.0 * f, "backward_ms": 500.0 * f}})
        found.update(st.evaluate((k + 1) * S, coords, set()))
    assert found == {}


def test_two_stragglers_in_one_stage_are_each_told_apart_by_their_own_compute():
    # ranks 1 and 5 (TP=2: groups {0,1} {2,3} {4,5} {6,7}) are 1.5x slow; each one's TP peer
    # waits for it inside forward and backward, so 4 ranks in 2 groups are slower there
    def phases(r, it):
        slow = it >= 4 and r in (0, 1, 4, 5)
        return {"forward_ms": 450.0 if slow else 300.0, "backward_ms": 750.0 if slow else 500.0,
                "optimizer_ms": 60.0 if it >= 4 and r in (1, 5) else 40.0}

    found = _run(phases)
    assert set(found) == {1, 5}
    # the optimizer does not tell them apart: the slower groups are waits, nobody is named
    assert _run(lambda r, it: {**phases(r, it), "optimizer_ms": 40.0}) == {}
    # three of the four groups slower: more than half the stage, nobody is named
    assert _run(lambda r, it: {"forward_ms": 450.0 if it >= 4 and r < 6 else 300.0,
                               "backward_ms": 750.0 if it >= 4 and r < 6 else 500.0,
                               "optimizer_ms": 60.0 if it >= 4 and r in (1, 3, 5) else 40.0}) == {}


def test_medians_of_the_others_are_what_statistics_gives():
    import random
    import statistics

    from commwatch.streams.detect.steps import _medians_of_others

    rng = random.Random(7)
    for n in range(2, 30):
        for _ in range(50):
            v = [rng.choice([rng.random(), 1.0, 2.0, float(rng.randint(0, 5))]) for _ in range(n)]
            assert _medians_of_others(v) == [statistics.median(v[:i] + v[i + 1:]) for i in range(n)]


def _first_found(phases_of, iterations=12, world=8, step=S):
    """The iteration at whose evaluation a rank was first named, and who."""
    coords = {r: {"tp": 0, "pp": 0, "dp": r} for r in range(world)}
    st = StepTracker(slow_impact=0.2, slow_windows=2, model="numpy")
    for it in range(iterations):
        for r in range(world):
            st.add({"v": 1, "job": "j", "rank": r, "iteration": it, "t_start_ns": it * step,
                    "t_end_ns": (it + 1) * step, "phases": phases_of(r, it)})
        found = st.evaluate((it + 1) * step, coords, set(), world)
        if found:
            return it, set(found)
    return None, set()


def test_every_phase_stretched_alike_decides_in_one_iteration_a_pause_does_not():
    # a slower device stretches forward and backward by one factor: the first such iteration decides
    def slower(r, it):
        f = 1.6 if r == 5 and it >= 6 else 1.0
        return {"forward_ms": 300.0 * f, "backward_ms": 500.0 * f}

    assert _first_found(slower) == (6, {5})
    # a 1.5x slowdown measured 1.45x in one phase and 1.52x in the other is alike too
    assert _first_found(lambda r, it: {"forward_ms": 300.0 * (1.45 if r == 5 and it >= 6 else 1.0),
                                       "backward_ms": 500.0 * (1.52 if r == 5 and it >= 6 else 1.0)}) == (6, {5})
    # ... and a 1.5x slowdown measured under 1.5x in both phases (1.46x, 1.49x)
    assert _first_found(lambda r, it: {"forward_ms": 300.0 * (1.46 if r == 5 and it >= 6 else 1.0),
                                       "backward_ms": 500.0 * (1.49 if r == 5 and it >= 6 else 1.0)}) == (6, {5})
    # a pause lands in one phase: two slow iterations are needed, as before
    assert _first_found(lambda r, it: {"forward_ms": 480.0 if r == 5 and it >= 6 else 300.0,
                                       "backward_ms": 500.0}) == (7, {5})
    # a pause straddling both phases stretches them unequally: not one iteration either
    assert _first_found(lambda r, it: {"forward_ms": 600.0 if r == 5 and it >= 6 else 300.0,
                                       "backward_ms": 800.0 if r == 5 and it >= 6 else 500.0}) == (7, {5})
    # two pauses with a normal iteration between them: the normal one resets the streak
    assert _first_found(lambda r, it: {"forward_ms": {6: 1200.0, 8: 380.0}.get(it, 300.0) if r == 5 else 300.0,
                                       "backward_ms": 500.0}) == (None, set())
    # one such iteration alone (a pause) names nobody
    assert _first_found(lambda r, it: {"forward_ms": 600.0 if r == 5 and it == 6 else 300.0,
                                       "backward_ms": 800.0 if r == 5 and it == 6 else 500.0}) == (None, set())


def _steps_job(reporting):
    """An 8-rank data-parallel job whose ranks in `reporting` send iteration timings, one
    message at a time (rank 5 last); rank 5 computes 1.6x slower from iteration 6. Returns the
    opened slow_rank incidents and the time of rank 5's first slow report."""
    import json

    from detect_jobs import T0, HandJob

    from commwatch import topics
    from commwatch.capture import Message
    from commwatch.settings import Settings

    world = 8
    j = HandJob(Settings.load(env={}), {0xD0: list(range(world))}, {r: f"n{r // 4}" for r in range(world)})
    for r in range(world):
        j.send(Message(topics.TOPOLOGY, "j1", T0, json.dumps({
            "v": 1, "job": "j1", "ts_ns": T0, "rank": r, "world_size": world, "node": f"n{r // 4}", "local_rank": r % 4,
            "coords": {"tp": 0, "pp": 0, "dp": r}}).encode()))
    t, slow_report = T0, None
    for it in range(10):
        f = 1.6 if it >= 6 else 1.0
        end = t + int(0.9 * f * S) + 100 * 1_000_000
        j.beat(t + S // 2)
        for r in reporting:  # rank 5 last: the others wait for it in the gradient all-reduce
            ts = end + (2_000_000 if r == 5 else r * 1000)
            ph = {"forward_ms": 300.0 * (f if r == 5 else 1.0), "backward_ms": 600.0 * (f if r == 5 else 1.0)}
            if it == 6 and r == 5:
                slow_report = ts
            j.send(Message(topics.STEPS, "j1", ts, json.dumps({
                "v": 1, "job": "j1", "rank": r, "iteration": it, "t_start_ns": t, "t_end_ns": ts, "phases": ph}).encode()))
        t = end + 2_000_000
    return j.opened("slow_rank"), slow_report


def test_an_iteration_is_judged_when_its_last_rank_reports_not_at_the_next_evaluation():
    """Live and replay: the slow rank reports each iteration last; its first iteration slower
    in every phase alike opens the incident at that report, between the job's ticks."""
    slow, slow_report = _steps_job(range(8))
    assert [i["culprit_ranks"] for i in slow] == [[5]]
    assert slow[0]["ts_ns"] == slow_report and slow[0]["evidence"]["signal"] == "phases"


def test_a_job_whose_hook_runs_on_some_ranks_is_judged_at_the_next_evaluation():
    """Five of eight ranks report iterations: "every rank reported" never comes; the ranks that
    report are compared at the job's next slow-rank evaluation (every 0.5 s), as before."""
    slow, slow_report = _steps_job([0, 1, 2, 3, 5])
    assert [i["culprit_ranks"] for i in slow] == [[5]] and slow[0]["evidence"]["signal"] == "phases"
    assert slow_report < slow[0]["ts_ns"] <= slow_report + 1_500_000_000


def test_phases_decide_while_the_collectives_see_the_rank_slow_but_have_not_decided(monkeypatch):
    """A data-parallel job (simulated, scripted fault): rank 6 computes 1.6x slower from 15 s.
    Its gradient all-reduce is timed, so the collectives see it hot within a window, but
    need two windows to decide (here: their window of two instances slow in both decides
    alone, 0.04 s before the phases, so that rule is off); its first slow iteration's phases
    decide at once."""
    from commwatch.decode import decode_messages
    from commwatch.settings import Settings
    from commwatch.streams.bench_scenarios import build_sim
    from commwatch.streams.detect import Detector, windows

    monkeypatch.setattr(windows, "ALL_SLOW_MIN", 10**6)

    built = build_sim((1, 1, 8), "slow50", 3, 1.0, 30.0)
    truth = [t for t in built.truth if t["kind"] == "slow_rank"]
    assert len(truth) == 1
    det = Detector(Settings.load(env={}))
    events = det.feed_stream(built.messages, decode_messages(built.messages, 1 << 20))
    opened = [e for e in events if e["status"] == "open" and e["kind"] == "slow_rank"]
    assert [e["culprit_ranks"] for e in opened] == [truth[0]["ranks"]]
    assert opened[0]["evidence"]["signal"] == "phases"
    assert opened[0]["ts_ns"] - truth[0]["onset_ns"] <= 2.2 * S  # 1.7 s; 3.1 s if the phases waited for the collectives


def test_a_rank_slower_only_in_the_phase_it_computes_apart_is_kept_for_a_job_that_slows():
    """Every peer waits for rank 6 inside forward and backward (MoE's all-to-alls), so their
    phases are alike; only the optimizer, computed apart, shows it 1.3x. That phase is a few %
    of a step: it names nobody by itself (`verdicts`), and is kept to explain a job that is
    slower than its baseline (`local_verdicts`, `job_stage.LOCAL_LOSS`). Two ranks slower
    there are no lone straggler."""
    def tracker(slow):
        coords = {r: {"tp": 0, "pp": 0, "dp": r} for r in range(8)}
        st = StepTracker(slow_impact=0.1, slow_windows=2, model="numpy")
        for it in range(12):
            t0 = it * S
            for r in range(8):
                opt = 39.0 if r in slow and it >= 5 else 30.0 + 0.3 * ((r + it) % 3)
                st.add({"v": 1, "job": "j", "rank": r, "iteration": it, "t_start_ns": t0, "t_end_ns": t0 + S,
                        "phases": {"forward_ms": 350.0, "backward_ms": 500.0, "optimizer_ms": opt}})
            st.evaluate((it + 1) * S, coords, set())
        return st

    st = tracker({6})
    assert st.verdicts == {} and set(st.local_verdicts) == {6}
    assert st.local_verdicts[6]["phase"] == "optimizer_ms" and st.local_verdicts[6]["ratio"] >= 1.25
    assert tracker(set()).local_verdicts == {} and tracker({2, 6}).local_verdicts == {}


@pytest.mark.parametrize("drill", [False, True])
def test_a_member_waiting_in_a_phase_for_a_tp_peer_stalled_outside_every_phase_is_not_named(
        settings, gen_c, monkeypatch, drill):
    """The third generator's healthy job with one-off stalls at random (its draw of seed 4000):
    ranks 5 and 7 stall 1.06 s outside every phase in iterations 2 and 3, and their TP peers 4
    and 6 wait for them in forward (their TP calls are in it): 4.2x their stage there, twice,
    named P2 then P1. Their peers spent that time outside their phases (step less the phases'
    sum), so they waited. Nobody is named. Drill: without the rule (and with any two ranks of a
    node one node fault, `job_slow.NODE_SHARE` 0: else two of its eight found at once are held
    back, and these one-off stalls are over before they would be named), ranks 4 and 6 are."""
    from commwatch.capture import read_sorted
    from commwatch.decode import decode_messages
    from commwatch.streams.detect import Detector

    if drill:
        monkeypatch.setattr(StepTracker, "_waited_outside", lambda *a: False)
        monkeypatch.setattr(job_slow, "NODE_SHARE", 0.0)
    msgs = read_sorted(gen_c("s08b", seed=4000))
    events = Detector(settings).feed_stream(msgs, decode_messages(msgs, settings.max_message_bytes))
    named = [e["culprit_ranks"] for e in events if e["kind"] == "slow_rank" and e["status"] == "open"]
    assert named == ([[4, 6]] if drill else [])


@pytest.mark.parametrize("drill", [False, True])
def test_an_iteration_most_ranks_reported_waits_for_the_straggler(settings, gen_a, monkeypatch, drill):
    """Generator A's data-parallel job (16 ranks, host-enqueue, 20 s steps), rank 3 2x from
    40 s, drawn with SEED 1: its collectives carry no timing, so its phases are all there is;
    it reported each iteration 0.25 s after its 15 peers, and the periodic evaluation judged
    each with the 15 (most ranks had reported): it was never compared, and missed. An
    iteration waits a while for the ranks that have not reported. Drill: judged at once, as
    before, nobody is named."""
    from commwatch.capture import read_sorted
    from commwatch.decode import decode_messages
    from commwatch.streams.detect import Detector
    from commwatch.streams.detect import steps

    if drill:
        monkeypatch.setattr(steps, "LATE_REPORT_NS", 0)
        monkeypatch.setattr(steps, "LATE_REPORT_SHARE", 0.0)
    msgs = read_sorted(gen_a("slow2x_longstep_1x1x16_r3", seed=1))
    events = Detector(settings).feed_stream(msgs, decode_messages(msgs, settings.max_message_bytes))
    named = [e["culprit_ranks"] for e in events if e["kind"] == "slow_rank" and e["status"] == "open"]
    assert named == ([] if drill else [[3]])


def test_the_first_iteration_waits_for_the_reports_of_ranks_not_heard_from_yet():
    """The job's first iteration: every rank seen is the first one that reported, so "all
    reported" held at once and the iteration was judged on that one report (no spread learnt,
    nothing compared); it waits a tenth of its steps for the others, as a late one does.
    Drill: judged with the first report alone."""
    st = StepTracker(slow_impact=0.2, slow_windows=2, model="numpy")
    coords = {r: {"tp": 0, "pp": 0, "dp": r} for r in range(8)}
    end = 40 * S
    st.add({"v": 1, "job": "j", "rank": 0, "iteration": 0, "t_start_ns": 0, "t_end_ns": end,
            "phases": {"forward_ms": 13000.0, "backward_ms": 26000.0}})
    st.evaluate(end, coords, set())
    assert st.judged == -1
    for r in range(1, 8):
        st.add({"v": 1, "job": "j", "rank": r, "iteration": 0, "t_start_ns": 0, "t_end_ns": end + S,
                "phases": {"forward_ms": 13000.0, "backward_ms": 26000.0}})
    st.evaluate(end + 2 * S, coords, set())
    assert st.judged == -1  # 1 s after the last report, 4 s (a tenth of 40 s) not passed
    st.evaluate(end + 6 * S, coords, set())
    assert st.judged == 0 and len(st.spread[-1]) == 16


@pytest.mark.parametrize("drill", [False, True])
def test_a_job_of_long_steps_warms_up_in_its_first_iteration(settings, gen_a, monkeypatch, drill):
    """Generator A's data-parallel job with long steps (16 ranks, GPU-timed), rank 3 2.4x slow
    from the start: every phase stretched alike in every iteration, it was named after its
    third iteration (88 s), the first two being warm-up. Warm-up costs seconds: in a job whose
    first two iterations took 10 s or more each, the second is past it, and the rank is named
    at its end (58 s). Drill: warm-up by count alone, named after the third."""
    from commwatch.capture import read_sorted
    from commwatch.decode import decode_messages
    from commwatch.streams.detect import Detector
    from commwatch.streams.detect import steps

    if drill:
        monkeypatch.setattr(steps, "WARMUP_S", float("inf"))
    msgs = read_sorted(gen_a("slowstart_longstep_1x1x16_r3"))
    events = Detector(settings).feed_stream(msgs, decode_messages(msgs, settings.max_message_bytes))
    opened = [e for e in events if e["kind"] == "slow_rank" and e["status"] == "open"]
    assert [e["culprit_ranks"] for e in opened] == [[3]]
    at_s = (opened[0]["opened_ns"] - msgs[0].ts_ns) / S
    assert (at_s > 80) if drill else (at_s < 62)


@pytest.mark.parametrize("drill", [False, True])
def test_a_phase_far_longer_than_its_peers_decides_in_one_iteration(monkeypatch, drill):
    """Generator B's rank 2x slower in forward from 35 s of a job with 30 s steps: 1.9x and
    26 s longer than its peers in its first slowed iteration, it was missed in every draw of
    its 150 s capture (the second slowed iteration ended after it). A phase 1.5x its peers'
    and 5 s longer decides alone; a short pause (1.6x, 0.18 s) still needs a second iteration.
    Drill: no such rule, named an iteration later."""
    from commwatch.streams.detect import steps

    if drill:
        monkeypatch.setattr(steps, "LONG_EXCESS_MS", float("inf"))

    def slower(r, it):
        return {"forward_ms": 30000.0 * (1.8 if r == 5 and it >= 4 else 1.0), "backward_ms": 2000.0}

    assert _first_found(slower, step=40 * S) == ((5 if drill else 4), {5})
    assert _first_found(lambda r, it: {"forward_ms": 480.0 if r == 5 and it >= 6 else 300.0,
                                       "backward_ms": 500.0}) == (7, {5})


@pytest.mark.parametrize("drill", [False, True])
def test_a_tensor_parallel_rank_slower_by_a_fifth_in_a_jittery_job_is_named_over_its_iterations(
        settings, gen_a, monkeypatch, drill):
    """Generator A's 2x2x8 job whose ranks' iterations stray 10 % each (and 5 % of them pause
    on the host), drawn with SEED 10: rank 21 is 1.25x slower from 30 s. Iteration by iteration
    other tensor-parallel groups are as slow by chance, and its own ratio is often under the
    threshold the noise sets: it was never named in 40 s. Over the kept iterations its phases'
    medians stand out, and its local phase tells it from its TP peer: named, alone; the job's
    healthy draw with more jitter (15 %) names nobody; and in the draw with SEED 1 (named by
    the collectives) its data-parallel peer 23, 1.2x for six iterations as it waits inside its
    GPU-timed phases, is not named with it (its stage has two groups that slow)."""
    if drill:
        monkeypatch.setattr(steps, "HORIZON_MIN", 10**6)
    named = {}
    for scenario, seed in (("slow20_jitter_2x2x8_gpu_r21", 10), ("healthy_2x2x8_gpu_jitter15_gc", 10),
                           ("slow20_jitter_2x2x8_gpu_r21", 1)):
        msgs = read_sorted(gen_a(scenario, seed=seed))
        events = Detector(settings).feed_stream(msgs, decode_messages(msgs, settings.max_message_bytes))
        named[scenario, seed] = [e["culprit_ranks"] for e in events if e["status"] == "open"]
    assert named["healthy_2x2x8_gpu_jitter15_gc", 10] == []
    assert named["slow20_jitter_2x2x8_gpu_r21", 1] == [[21]]
    assert (named["slow20_jitter_2x2x8_gpu_r21", 10] == [[21]]) is not drill


@pytest.mark.parametrize("drill", [False, True])
def test_a_quiet_job_decides_on_phases_stretched_alike_by_a_fifth(monkeypatch, drill):
    """The simulator's GPU downclocked 1.52x from inside an iteration of a job whose phases
    stray under 1 %: that iteration had forward and backward stretched 1.25x alike, and the
    rank was named a second slowed iteration later (2.1 healthy iterations after the onset).
    Where the job's phases stray `QUIET` at most, stretched alike by `ALIKE_QUIET` decides in
    one iteration; where they stray 5 %, it does not, nor does a pause.
    Drill: `ALIKE_RATIO` everywhere, the quiet job's rank named an iteration later."""
    import random

    if drill:
        monkeypatch.setattr(steps, "ALIKE_QUIET", steps.ALIKE_RATIO)

    def slower(jitter):
        rng = random.Random(7)

        def phases(r, it):
            f = (1.25 if r == 5 and it >= 6 else 1.0) * (1.0 + rng.uniform(-jitter, jitter))
            return {"forward_ms": 300.0 * f, "backward_ms": 500.0 * f}
        return phases

    it, named = _first_found(slower(0.002))
    assert (it > 6 if drill else it == 6) and named == {5}
    it, named = _first_found(slower(0.05))
    assert it > 6 and named == {5}
    it, named = _first_found(lambda r, it: {"forward_ms": 375.0 if r == 5 and it >= 6 else 300.0,
                                            "backward_ms": 500.0})
    assert it > 6 and named == {5}



@pytest.mark.parametrize("drill", [False, True])
def test_a_tp_group_waiting_on_another_stage_is_not_named_by_one_members_local_jitter(settings, gen_d, monkeypatch,
                                                                                     drill):
    """Generator D's job (TP 4, PP 4, DP 2, host-enqueue) drawn with 7: rank 9 1.5x from 10 s,
    then rank 26 (stage 2) from 45 s. The first stage's TP group of rank 26's pipeline (16-19)
    waits for it: every member 1.23x in forward and 1.27x in backward, alike. In iteration 54
    rank 17's optimizer step (computed apart from its TP peers) took 33 ms against its peers'
    30: 1.10x, the only member apart, so it was taken for the group's slow member, and the
    phases stretched alike made that one iteration conclusive: named P3 at 62 s. A slower
    device stretches what it computes apart too; a 1.10x local step under 1.23x phases is
    jitter. Drill: the local step not weighed against the phases (`OWN_SHARE` 0)."""
    if drill:
        monkeypatch.setattr(steps, "OWN_SHARE", 0.0)
    cap, truth = gen_d("t04_two_in_turn", seed=7)
    events = replayed(settings, cap)
    named = {r for e in events if e["kind"] == "slow_rank" and e["status"] in ("open", "update")
             for r in e["culprit_ranks"]}
    assert named >= {9, 26} and truth["culprits"] == [9, 26]
    assert (17 in named) is drill and named - {9, 17, 26} == set()


@pytest.mark.parametrize("drill", [False, True])
def test_a_slow_node_holding_several_tp_groups_of_a_stage_is_named_by_their_own_compute(monkeypatch, drill):
    """Megatron's own rank order (the stage outermost): a node holds several data-parallel
    replicas of one stage, each a whole TP group. The job model's 1.3x node holding four of a
    stage's eight groups, under a host-enqueue probe (its phases the only sign), was taken for
    waits (many groups slower) and named nobody; each of them is slower in the phase its
    members compute apart, alike: they are named. More than half the groups slower (which
    half is slow cannot be told), or slower without their own compute (waits): nobody.
    Drill: no group counts as whole, nobody."""
    if drill:
        monkeypatch.setattr(steps, "_whole", lambda *a: False)

    def node(slow_ranks, local=True):
        def phases(r, it):
            f = 1.3 if it >= 4 and r in slow_ranks else 1.0
            return {"forward_ms": 300.0 * f, "backward_ms": 500.0 * f, "optimizer_ms": 40.0 * (f if local else 1.0)}
        return phases

    found = _run(node(range(8, 16)), world=16)
    assert (set(found) == set(range(8, 16))) is not drill
    assert drill or len({found[r]["group"] for r in found}) == 4
    assert _run(node(range(6, 16)), world=16) == {}
    assert _run(node(range(8, 16), local=False), world=16) == {}


@pytest.mark.parametrize("drill", [False, True])
def test_a_pipeline_peer_waiting_in_every_phase_for_one_iteration_is_not_named(settings, gen_h, monkeypatch, drill):
    """The eighth generator's allocator retries (TP 4 x PP 2 x DP 4, GPU-timed): rank 17's
    iteration stalls 300-600 ms every 3-7 iterations. In such an iteration the next stage's TP
    group of its replica waits 1.6x in forward for its activations, and rank 21, its pipeline
    peer, 1.56x in backward for it to take the gradients: 21 had every phase stretched alike
    and was named P2 on that one iteration, though its forward was its group's wait. A phase
    a rank was found waiting in is no stretch of its own: 21 is not named (17's own phases
    show only its TP group's wait for it, and never for two iterations in a row; its stalls
    name it, `test_a_rank_whose_stalls_cost_under_slow_impact_is_named_once_they_repeat`).
    Drill: `WAITS_NOT_STRETCH` off."""
    if drill:
        monkeypatch.setattr(steps, "WAITS_NOT_STRETCH", False)
    cap, truth = gen_h("n10_alloc_retry")
    assert truth["jobs"][0]["culprits"] == [17]
    events = replayed(settings, cap)
    named = {r for e in events if e["kind"] == "slow_rank" for r in e["culprit_ranks"]}
    assert (21 in named) is drill
    assert 17 in named


@pytest.mark.parametrize("drill", [False, True])
def test_a_tp_pair_its_replicas_wait_for_is_named_together(settings, gen_h, monkeypatch, drill):
    """The eighth generator's packed-sequence job (TP 2 x DP 16, host-enqueue; each replica's
    compute 0.7-1.4x per micro-batch): rank 13 1.5x from 35 s. Its pair (12, 13) is 1.5x in
    forward and backward, and the other replicas wait for it in their optimizer step (the
    data-parallel reduction): its own is half theirs. With two members and no record telling
    them apart, it was named nobody. Now the pair, together, in one incident (12 is its
    victim: a partial answer, but the replica that holds the job up); the job's healthy twin
    names nobody. Drill: a pair is never slow as a whole (`PAIR_WAITED_FOR` off)."""
    if drill:
        monkeypatch.setattr(steps, "PAIR_WAITED_FOR", False)

    def named(scenario: str) -> list[list[int]]:
        cap, _ = gen_h(scenario)
        msgs = read_sorted(cap)
        last: dict[str, list[int]] = {}
        for e in Detector(settings).feed_stream(msgs, decode_messages(msgs, settings.max_message_bytes)):
            if e["kind"] == "slow_rank":
                last[e["incident"]] = e["culprit_ranks"]
        return list(last.values())

    assert named("n01b_varseq_slow") == ([] if drill else [[12, 13]])
    assert named("n01a_varseq_ctl") == []


@pytest.mark.parametrize("drill", [False, True])
def test_a_tensor_parallel_peer_nearly_as_slow_in_a_phase_is_not_named_for_it(settings, gen_l, monkeypatch, drill):
    """The twelfth generator's rank 2 (TP 2 x PP 2 x DP 4, GPU-timed, steps) whose GPU slows
    gradually over 20 minutes from 6 min in: at ~1.09x its TP peer 3, waiting for it inside
    forward, was 1.11x there, over the line, 2 itself 1.10x, not; 3 was named P3 a minute
    before 2. A member alone over the line whose TP peer is nearly as slow in the phase names
    nobody; the collectives find 2. Drill: the rule off. The first 8.5 minutes replayed."""
    if drill:
        monkeypatch.setattr(steps, "SHARED_IN_GROUP", False)
    cap, truth = gen_l("creep_s1")
    assert truth["culprit_ranks"] == [2]
    events = replayed(settings, cap, truth["t0_ns"] + 510 * 10**9)
    named = {r for e in events if e["kind"] == "slow_rank" for r in e["culprit_ranks"]}
    assert named == ({2, 3} if drill else {2})


@pytest.mark.parametrize("drill", [False, True])
def test_a_peer_that_waited_in_its_phases_is_not_named_once_the_slow_rank_recovers(settings, gen_l, monkeypatch, drill):
    """The twelfth generator's rank 1 (TP 2 x PP 2 x DP 4, GPU-timed, steps) throttled 1.5x for
    2 minutes every 10, from 5 min: named at once by the collectives; its TP peer 0, slower in
    its phases for the waits, was taken back as its waiter throughout, and named P3 "55%
    slower" 9 s after the episode ended, on the episode's kept iterations (its phases normal
    again). A rank seen waiting in its phases stays a waiter while the iterations it waited in
    are kept. Drill: not remembered. The first 7.7 minutes replayed (one episode)."""
    if drill:
        monkeypatch.setattr(job_slow, "KEEP_ITERATIONS", 0)
    cap, truth = gen_l("intermittent_s1")
    assert truth["culprit_ranks"] == [1]
    events = replayed(settings, cap, truth["t0_ns"] + 460 * 10**9)
    named = {r for e in events if e["kind"] == "slow_rank" for r in e["culprit_ranks"]}
    assert named == ({0, 1} if drill else {1})


@pytest.mark.parametrize("drill", [False, True])
def test_a_slow_node_whose_peers_wait_in_backward_costs_what_the_job_lost(settings, gen_n, monkeypatch, drill):
    """The fourteenth generator's node whose 8 GPUs ramp from 1.0x to 1.6x (thermal), TP 8 x
    PP 2 x DP 6: its TP group, slow as a whole, was named by its forward pass alone ("the job
    loses ~5 %"), its data-parallel peers waiting for it inside backward, while the job's steps
    ran 18-21 % over their baseline: a P3 to the end. As the job's one slow unit, it costs what
    the steps lost since it was found: P2 once that holds 20 % for 10 s. Drill: the steps' loss
    not known (`loss_since` None): P3 only."""
    if drill:
        monkeypatch.setattr(StepTracker, "loss_since", lambda self, since_ns: None)
    cap, truth = gen_n("k1-cooling-ramp")
    assert truth["faults"][0]["culprit_ranks"] == list(range(48, 56))
    events = [e for e in replayed(settings, cap) if e["kind"] == "slow_rank"]
    assert {tuple(e["culprit_ranks"]) for e in events} == {tuple(range(48, 56))}
    assert {e["severity"] for e in events} == ({"P3"} if drill else {"P3", "P2"})
    if not drill:
        assert all(e["evidence"]["impact"] >= 0.15 for e in events), [e["evidence"]["impact"] for e in events]


@pytest.mark.parametrize("drill", [False, True])
def test_gpus_whose_clocks_fell_with_a_slow_group_join_its_incident(settings, gen_n, monkeypatch, drill):
    """The fourteenth generator's power-capped rack (its 32 GPUs 1.3x, two whole data-parallel
    replicas of a TP 8 x PP 2 x DP 6 job, NVML clocks 1515-1530 MHz against 1980): one TP group
    was named by its phases, the other 24 GPUs only in a clock notice. GPUs whose clocks fell
    at once with a slow group's, as low, are slowed with it: one incident naming the rack.
    Drill: never alike (`CLOCK_ALIKE` < 0): 8 of the 32."""
    if drill:
        monkeypatch.setattr(job_slow, "CLOCK_ALIKE", -1.0)
    cap, truth = gen_n("p1-rack-powercap")
    rack = truth["faults"][0]["culprit_ranks"]
    assert rack == list(range(32, 64))
    events = [e for e in replayed(settings, cap) if e["kind"] == "slow_rank"]
    assert len({e["incident"] for e in events}) == 1
    named = set().union(*(e["culprit_ranks"] for e in events))
    assert named == (set(range(48, 56)) if drill else set(rack))


@pytest.mark.parametrize("drill", [False, True])
def test_a_job_slowdown_whose_gpus_clocks_fell_together_names_them(settings, gen_n, monkeypatch, drill):
    """The same capped rack drawn with 3: its phases named no group at all (their local phases
    stray too much), the job's steps ran 27 % over their baseline, "no rank explains it", and
    the 32 GPUs were only in a P3 clock notice. A job slowdown no rank explains, while GPUs'
    clocks fell together, is theirs: one slow_rank naming the rack, P2. Drill: no clocks taken
    (`_clocks_fell` empty): nobody named."""
    from commwatch.streams.detect.job_stage import JobStage

    if drill:
        monkeypatch.setattr(JobStage, "_clocks_fell", staticmethod(lambda js, clocks, med: []))
    cap, truth = gen_n("p1-rack-powercap", seed=3)
    events = [e for e in replayed(settings, cap) if e["kind"] == "slow_rank" and e["culprit_ranks"]]
    if drill:
        assert events == []
        return
    assert {tuple(e["culprit_ranks"]) for e in events} == {tuple(truth["faults"][0]["culprit_ranks"])}
    assert events[-1]["severity"] == "P2" and events[0]["evidence"]["signal"] == "clocks"


@pytest.mark.parametrize("drill", [False, True])
def test_data_parallel_peers_waiting_in_backward_for_a_slow_member_are_not_named(monkeypatch, drill):
    """TP 8 x DP 4 (32 ranks, one stage), as the fifteenth generator's team-b.sft drawn with 4:
    rank 10 computes 1.5x slower. Its data-parallel peers 2, 18 and 26 wait for its gradients
    inside their backward's reduction (1.16x, their forward 0.67x, steps like everyone's); 10
    is not slower in backward itself, but 1.5x in its optimizer step, which it computes apart.
    The peers are not named (10 may be, by its optimizer step). Where 10's optimizer step is
    like everyone's, nothing tells the peers' backward from their own: they stay slower there.
    Drill: the peers are named."""
    if drill:
        monkeypatch.setattr(steps, "DP_PEERS_WAIT", False)
    coords = {r: {"tp": r % 8, "pp": 0, "dp": r // 8} for r in range(32)}

    def run(local_slow: bool) -> dict:
        st = StepTracker(slow_impact=0.1, slow_windows=2, model="numpy")
        st.device = True
        found = {}
        for it in range(14):
            t0 = it * S
            for r in range(32):
                fwd, bwd, opt = 295.0, 628.0, 50.0
                if it >= 4:
                    fwd, bwd = (287.0, 1065.0) if r in (2, 18, 26) else (430.0, 915.0)
                    opt = 75.0 if r == 10 and local_slow else 50.0
                st.add({"v": 1, "job": "j", "rank": r, "iteration": it, "t_start_ns": t0, "t_end_ns": t0 + S,
                        "phases": {"forward_ms": fwd, "backward_ms": bwd, "optimizer_ms": opt}})
            found.update(st.evaluate((it + 1) * S, coords, set(found)))
        return found

    named = set(run(local_slow=True))
    assert named & {2, 18, 26} == (set() if not drill else {2, 18, 26})
    assert set(run(local_slow=False)) >= {2, 18, 26}


@pytest.mark.parametrize("drill", [False, True])
def test_a_stage_waiting_for_a_slow_rank_named_in_its_pipeline_is_not_named(monkeypatch, drill):
    """TP 2 x PP 2 x DP 4, as the fifteenth generator's noisy-00 drawn with 4: rank 5 (stage 0
    of the second pipeline) is named slow. Its next stage's rank 6 waits for its pipeline's
    activations inside forward, 1.26x its stage's (its backward shorter by as much: its steps
    like everyone's); its TP peer 7 1.08x. 6 is not named while 5 is; a rank as slow in a
    pipeline with no slow rank named is. Drill: 6 is named."""
    if drill:
        monkeypatch.setattr(steps, "BEHIND_SLOW_WAITS", False)
    coords = {r: {"tp": r % 2, "pp": (r // 2) % 2, "dp": r // 4} for r in range(16)}

    def run(waiter: int) -> dict:
        st = StepTracker(slow_impact=0.1, slow_windows=2, model="numpy")
        st.device = True
        found = {}
        for it in range(14):
            t0 = 2 * it * S  # steps of 1.45 s, every rank's phases in all
            for r in range(16):
                fwd, bwd = (250.0, 1150.0) if coords[r]["pp"] == 0 else (650.0, 750.0)
                if it >= 4 and r == waiter:  # its backward shorter by as much: steps alike
                    fwd, bwd = 820.0, 580.0
                elif it >= 4 and r == waiter + 1:
                    fwd, bwd = 700.0, 700.0
                st.add({"v": 1, "job": "j", "rank": r, "iteration": it, "t_start_ns": t0,
                        "t_end_ns": t0 + 1_450_000_000,
                        "phases": {"forward_ms": fwd, "backward_ms": bwd, "optimizer_ms": 50.0}})
            found.update(st.evaluate(2 * (it + 1) * S, coords, set(found) | {5}))
        return found

    assert (6 in run(6)) == drill
    assert 14 in run(14)  # the fourth pipeline: no slow rank named in it


@pytest.mark.parametrize("drill", [False, True])
def test_a_site_slower_by_design_does_not_take_the_loss_of_a_gpu_slowing_elsewhere(settings, gen_r, monkeypatch,
                                                                                   drill):
    """The islands generator's streaming job under host-enqueue probes: site C's hardware is
    1.2x slower by design (its local phase 1.05-1.10x its stage's from the start: a P3 advice
    for its two nodes), and 60 s in rank 16's GPU of site A slows 1.5x (the job ~22 % slower).
    The loss is not site C's: it was as slow in its local phase before it. Drill: without the
    rule, site C's two incidents become P2 "the job loses ~22 %" 30 s after the onset (the
    shard comms not taken for TP groups either, `PEERS_BY_COMM`: with them 16 is named alone
    at the job's loss, and nothing is left unexplained for site C to take)."""
    if drill:
        monkeypatch.setattr(job_slow, "LOCAL_RISEN", False)
        monkeypatch.setattr(job_slow, "PEERS_BY_COMM", False)
    cap, truth = gen_r("s03_slow_gpu_hostenq_streaming")
    events = replayed(settings, cap)
    site_c = set(truth["structural"])
    by_c = [e for e in events if e["kind"] == "slow_rank" and site_c & set(e["culprit_ranks"])]
    assert by_c and {e["severity"] for e in by_c} == ({"P3", "P2"} if drill else {"P3"})
    assert any(e["culprit_ranks"] == truth["culprits"] for e in events if e["kind"] == "slow_rank")


@pytest.mark.parametrize("drill", [False, True])
@pytest.mark.parametrize("rule", ["PEERS_BY_COMM", "APART_COSTS"])
def test_a_gpu_of_a_shard_group_without_coordinates_is_named_alone_at_its_cost(settings, gen_r, monkeypatch, drill,
                                                                             rule):
    """The same job drawn with 2 (its topology gives no coordinates): rank 16's GPU 1.5x, its
    seven peers of the node's HSDP shard group 1.26x in forward waiting for it inside the
    shard all-gathers, 16 alone 1.5x in its optimizer step; the job's steps ~20 % slower, site
    C's two nodes open at P3 by design from the start. The shard comm (the busiest of each
    rank's comms short of the job) stands for a TP group: 16 is named alone, and at the job's
    loss since, P2. Drills: without the derived groups the node's eight ranks are named
    together; without the cost rule 16 stays P3 ("~10 %", its forward pass alone)."""
    if drill:
        monkeypatch.setattr(job_slow, rule, False)
    cap, truth = gen_r("s03_slow_gpu_hostenq_streaming", 2)
    assert truth["culprits"] == [16]
    events = replayed(settings, cap)
    node = set(range(16, 24))
    named = [e for e in events if e["kind"] == "slow_rank" and node & set(e["culprit_ranks"])]
    if drill and rule == "PEERS_BY_COMM":
        assert any(set(e["culprit_ranks"]) > {16} for e in named)
        return
    assert named and {tuple(e["culprit_ranks"]) for e in named} == {(16,)}
    assert {e["severity"] for e in named} == ({"P3"} if drill else {"P3", "P2"} if len(named) > 1 else {"P2"})


@pytest.mark.parametrize("drill", [False, True])
def test_a_rank_its_phases_name_costs_the_loss_its_local_phase_points_at(settings, gen_s, monkeypatch, drill):
    """The stacks generator's ZeRO-3 job under host-enqueue probes (32 ranks, one data-parallel
    comm): rank 13's GPU 1.5x from 50 s, every peer waiting for it inside the all-gathers and
    reduce-scatters queued on its comm's stream; the job ~48 % slower. Its phases name it at a
    tenth of a step (its forward's excess), its optimizer step says it alone computes slower:
    it costs the loss nothing else explains, and is paged. Drill: without the rule it stays P3
    "~10 %" to the end."""
    if drill:
        monkeypatch.setattr(job_slow, "LOCAL_JOINS", False)
    cap, truth = gen_s("s02_zero3_slow_gpu_enq")
    events = replayed(settings, cap)
    named = [e for e in events if e["kind"] == "slow_rank" and e["culprit_ranks"]]
    assert truth["culprits"] == [13] and {tuple(e["culprit_ranks"]) for e in named} == {(13,)}
    assert min(e["severity"] for e in named) == ("P3" if drill else "P1")
