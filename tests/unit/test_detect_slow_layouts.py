"""Slow ranks in layouts the simulator does not draw, from the fifth independent generator
(`tests/independent/fleet`): a pipeline without data parallelism, whose pipeline comms
compare a rank with its own tensor-parallel peers, and an MoE job whose expert-parallel
peers wait for a slow rank inside their phases."""

import pytest

from commwatch.streams.detect import job_slow, job_stage, slow, steps, windows
from detect_jobs import slow_ranks_of


@pytest.mark.parametrize("drill", [None, "tp_compared", "typical_rows"])
def test_a_slow_rank_of_a_pipeline_without_data_parallelism_is_named(settings, gen_e, monkeypatch, drill):
    """TP 8 x PP 4, no DP, GPU-timed: rank 29 (last stage) 1.3x from 20 s, 1.15x between its
    TP calls. Two rules name it. Its pipeline comm compares it with the same stage of the
    other pipelines, here its own TP peers, which wait for it inside their TP calls: judged
    there (the shortest intervals) it was 1.06x. And its TP comm's windows alternated seven
    instances of an iteration with one alone whose gap spans the iteration's end (the
    pipeline's drain, alike for every member): 1.35x and 1.01x, its streak reset by each.
    Drills: either rule alone off (`SlowTracker._tp_compared`, `windows.TYPICAL_ROWS`), it
    is never named."""
    if drill == "tp_compared":
        monkeypatch.setattr(slow.SlowTracker, "_tp_compared", lambda *a: set())
    elif drill == "typical_rows":
        monkeypatch.setattr(windows, "TYPICAL_ROWS", 0)
    cap, truth = gen_e("f07_last_stage_tp8")
    assert truth["jobs"][0]["culprits"] == [29]
    assert slow_ranks_of(settings, cap) == ([] if drill else [[29]])


@pytest.mark.parametrize("drill", [False, True])
def test_expert_parallel_peers_waiting_on_a_slow_rank_in_their_phases_are_not_named(settings, gen_e, monkeypatch,
                                                                                     drill):
    """MoE (TP 2, DP 32, EP 8, GPU-timed): rank 37 1.5x from 20 s, named by the collectives
    at once. Its seven expert-parallel peers wait for it inside their all-to-alls (forward
    1.28x) and their expert data-parallel all-reduce (optimizer step): each alone slower in
    its TP pair, they were named P3 by their phases as two slow nodes. Between the calls of
    the comm they share with it they compute clearly faster than it: they wait for it.
    Drill: the phases' verdicts not weighed against the comms' figures
    (`JobStage._waiting_in_phases`)."""
    if drill:
        monkeypatch.setattr(job_stage.JobStage, "_waiting_in_phases", lambda *a: set())
    cap, truth = gen_e("f04b_moe_persistent")
    assert truth["jobs"][0]["culprits"] == [37]
    named = slow_ranks_of(settings, cap)
    assert named[0] == [37]
    assert (named == [[37]]) is not drill


@pytest.mark.parametrize("drill", [False, True])
def test_a_rank_is_not_taken_to_wait_for_a_rank_of_another_stage(settings, gen_e, monkeypatch, drill):
    """The same layout drawn with 2: the 1.3x rank 29 named from 24 s. From 39.5 s the third
    stage's rank 21, its pipeline neighbour, was found 1.12x between its TP calls; between the
    job's grad-norm all-reduces (every rank of the job) 29 computed less than 21, so it was
    taken to wait for 21, its incident resolved at 49.5 s while it was as slow, and 21 was
    named instead. Ranks of different stages do different work between a comm's calls.
    Drill: coordinates unknown to that comparison (`SlowTracker.coords` always empty)."""
    if drill:
        monkeypatch.setattr(slow.SlowTracker, "coords", property(lambda self: {}, lambda self, v: None),
                            raising=False)
    cap, truth = gen_e("f07_last_stage_tp8", seed=2)
    assert truth["jobs"][0]["culprits"] == [29]
    named = slow_ranks_of(settings, cap)
    assert named[0] == [29]
    assert (named == [[29]]) is not drill


@pytest.mark.parametrize("drill", [False, True])
def test_a_culprit_whose_stage_is_one_tp_group_is_no_echo(settings, gen_e, monkeypatch, drill):
    """The same layout drawn with 6: rank 21, whose pipeline partner is the 1.3x rank 29,
    computes 1.1x its TP peers between its TP calls (its receives from 29 fall there) and was
    named P3 first; 29, found 1.3x 0.7 s later, was taken back as its echo, its phases 1.01x:
    its stage is one TP group, whose members wait for it inside their phases. A rank whose
    stage holds no other group is never taken for an echo: 29 is named (21 stays named
    too: left). Drill: the phases taken at their word, 29 never named."""
    if drill:
        monkeypatch.setattr(job_stage.JobStage, "_phases_blind", staticmethod(lambda js, rank: False))
    cap, _ = gen_e("f07_last_stage_tp8", seed=6)
    named = {r for ranks in slow_ranks_of(settings, cap) for r in ranks}
    assert (29 in named) is not drill


@pytest.mark.parametrize("drill", [False, True])
def test_every_rank_of_a_launch_bound_node_is_named(settings, gen_e, monkeypatch, drill):
    """TP 8 x PP 2 x DP 4, GPU-timed: node-05's eight hosts launch-bound from 30 s (~1.3x),
    one TP group. Inside their TP calls they wait for the slowest of them, rank 41; but each
    computes 1.13-1.17x the other stage-1 TP groups between those calls, and is 1.14x in its
    pipeline comm: slow itself, not a victim of 41 (its phases, which hold those waits, show
    ~1.0x). All eight named, in incidents naming only them. Drill: nobody taken to be slow
    itself (`SlowTracker._slow_itself`): 41 alone."""
    if drill:
        monkeypatch.setattr(slow.SlowTracker, "_slow_itself", lambda *a: None)
    cap, truth = gen_e("f02_cpu_contention_node")
    node = truth["jobs"][0]["culprits"]
    assert node == list(range(40, 48))
    named = slow_ranks_of(settings, cap)
    assert all(set(ranks) <= set(node) for ranks in named)
    assert sorted({r for ranks in named for r in ranks}) == ([41] if drill else node)


@pytest.mark.parametrize("drill", [False, True])
def test_a_rank_slow_itself_is_marked_in_the_group_that_holds_the_named_ranks(settings, gen_e, monkeypatch, drill):
    """The launch-bound node drawn with SEED 5: ranks 40 and 42 named first; rank 41 was slow
    itself both in its TP group (with them) and in its data-parallel comm (without them), and
    the latter, met first, was taken, so it was not marked, and the phases took it and five
    others for echoes of 40 and 42 (P3 naming two of eight). The comm that holds the named
    ranks is taken: all eight named. Drill: the first comm it is slow itself in, marked only
    if it holds them."""
    if drill:
        first = slow.SlowTracker._slow_itself

        def old(self, rank, found, long, kinds, within=frozenset()):
            group = first(self, rank, found, long, kinds)
            return group if group is not None and within <= set(self.comms[group].ranks) else None

        monkeypatch.setattr(slow.SlowTracker, "_slow_itself", old)
    cap, truth = gen_e("f02_cpu_contention_node", seed=5)
    node = truth["jobs"][0]["culprits"]
    named = sorted({r for ranks in slow_ranks_of(settings, cap) for r in ranks})
    assert (named == node) is not drill and set(named) <= set(node)


@pytest.mark.parametrize("drill", [None, "levels", "lag"])
def test_a_slow_node_holding_half_of_a_stages_replicas_is_named(settings, gen_a, monkeypatch, drill):
    """Generator A drawn with 18, TP 2 x PP 2 x DP 8 laid out as Megatron does (the pipeline
    stage outermost): node 2 holds half of stage 1's data-parallel replicas, 1.4x from 25 s,
    so four of each 8-member data-parallel comm's members are slow. Their ratios there stand
    apart and hold (1.3-1.4x, the others 0.7x): levels apart that hold are structure, not the
    comm's noise (its level spread was 0.4, over every threshold); and each slow member
    arrives later than the others' median by far more than their spread around it, though
    not 4x their typical lag (the median arrival lies between the two halves). It was only
    the job's unexplained 28 % slowdown. Drills: the level spread not capped by the members'
    moves (`slow.LEVEL_MOVES`), or lag against the others' typical absolute lag: silence (the
    phases, which name the node by its TP groups slow as a whole, `steps._whole`, set aside:
    the collectives alone are tested here)."""
    import numpy as np

    from commwatch.streams.detect import steps

    if drill:
        monkeypatch.setattr(steps, "_whole", lambda *a: False)
    if drill == "levels":
        monkeypatch.setattr(slow, "LEVEL_MOVES", 1e9)
    elif drill == "lag":
        def waited_on(ct, rank):
            lags = ct.lag_ms
            mine = lags.get(rank)
            if ct.p2p or len(lags) < slow.LAG_MEMBERS or mine is None or not np.isfinite(mine):
                return True
            others = np.abs(np.fromiter((v for q, v in lags.items() if q != rank), np.float64))
            return bool(mine >= slow.LAG_STAND * max(float(np.nanmedian(others)), slow.LAG_FLOOR_MS))
        monkeypatch.setattr(slow.SlowTracker, "_waited_on", staticmethod(waited_on))
    named = [ranks for ranks in slow_ranks_of(settings, gen_a("slownode_2x2x8_gpu_node2", seed=18)) if ranks]
    assert named == ([] if drill else [list(range(16, 24))])  # the drills: the job's slowdown, no rank


@pytest.mark.parametrize("scenario, culprits", [("q19_overlap_slow", [[37]]), ("q18_overlap_healthy", []),
                                                ("q19_overlap_slow:drill", [[]])])
def test_a_tp_group_its_stage_waits_for_in_the_optimizer_step_names_its_member_slower_there(
        settings, gen_f, monkeypatch, scenario, culprits):
    """The sixth generator's TP 4 x DP 16 job under a host-enqueue probe, its data-parallel
    gradient buckets all-reduced on a second stream during backward: rank 37 1.3x from 20 s.
    Its collectives carry no timing; its TP group is 1.3x in forward and backward, its peers
    waiting for it inside; every other rank's optimizer step waits for the buckets (300 ms),
    the group's does not (30 ms), 37's is 49 ms. Against the stage nobody of the group stood
    apart: nothing named, the job's steps 24 % over its baseline 'unexplained'. Now 37, by its
    group (`steps._apart_in_group`); the healthy job of that layout names nobody. Drill: the
    rule off, 37 is missed again (the job's slowdown is one P3 naming nobody)."""
    name, _, drill = scenario.partition(":")
    if drill:
        monkeypatch.setattr(steps, "WAITED_FOR_APART", False)
    cap, truth = gen_f(name)
    assert truth["jobs"][0]["culprits"] == ([37] if name == "q19_overlap_slow" else [])
    assert slow_ranks_of(settings, cap) == culprits


@pytest.mark.parametrize("drill", [False, True])
def test_a_node_mate_waiting_for_an_hsdp_rank_found_before_the_phases_name_it_is_its_echo(
        settings, gen_f, monkeypatch, drill):
    """The sixth generator's HSDP job (shard inside a node, replicate across nodes, GPU-timed)
    drawn with 2: rank 27 1.3x from 20 s. Its node-mates wait for it in the node's comm, and
    those waits fall between the calls of their cross-node comm: 24 was found there at 1.11x a
    tenth of a second before the node's other ranks, its phases 1.00x, while the iteration
    before showed 27 at 1.25x (its streak not long enough to name it yet). Nobody being named,
    24 was named P3, and 27 joined it. Now the latest iteration's stand-out is a culprit to
    echo (`job_slow.ECHO_SHOWN`): 27 alone. Drill: the rule off, 24 is named (alone: two of a
    node's ranks are no node fault, `job_slow.NODE_SHARE`), and 27."""
    if drill:
        monkeypatch.setattr(job_slow, "ECHO_SHOWN", False)
    cap, truth = gen_f("q12_hsdp_slow", seed=2)
    assert truth["jobs"][0]["culprits"] == [27]
    assert slow_ranks_of(settings, cap) == ([[24], [27]] if drill else [[27]])


@pytest.mark.parametrize("drill", [False, True])
def test_ranks_of_a_slow_node_found_one_by_one_end_in_one_incident(settings, gen_a, monkeypatch, drill):
    """Generator A's DP job under host-enqueue (16 ranks, two nodes), node-01 1.4x from 20 s,
    drawn with SEED 32: its phases find rank 8 first, 12 and 15 a second later, 9 two seconds
    after them, the other four a second later. Two or three of a node's eight are no node
    fault (`job_slow.NODE_SHARE`): 12 and 15 are named each alone; with 9, half the node is
    found within `NODE_JOIN_NS`, and their incidents are merged into 8's, which ends naming the
    node's eight ranks. Drill: incidents opened within no time of each other are never merged
    (`NODE_JOIN_NS` 0): the node's ranks end in four incidents."""
    from commwatch.capture import read_sorted
    from commwatch.decode import decode_messages
    from commwatch.streams.detect import Detector

    if drill:
        monkeypatch.setattr(job_slow, "NODE_JOIN_NS", 0)
    msgs = read_sorted(gen_a("slownode_1x1x16_enq_node1", 32))
    events = Detector(settings).feed_stream(msgs, decode_messages(msgs, settings.max_message_bytes))
    last: dict[str, dict] = {}
    for e in events:
        if e["kind"] == "slow_rank":
            last[e["incident"]] = e
    kept = [e["culprit_ranks"] for e in last.values() if e["status"] != "resolved"]
    merged = [e["culprit_ranks"] for e in last.values() if "one fault of" in e["summary"]]
    assert all(r in range(8, 16) for e in last.values() for r in e["culprit_ranks"])
    assert (kept, merged) == (([[8], [12], [15], [9], [10, 11, 13, 14]], []) if drill
                              else ([list(range(8, 16))], [[12], [15]]))
