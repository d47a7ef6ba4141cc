"""Hang, comm_hang, node_lost, job_stalled and checkpoint pauses on hand-made jobs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from commwatch import topics, wire
from commwatch.capture import Message
from commwatch.messages import validate_incident
from commwatch.streams.detect import job_stage
from detect_jobs import MS, S, HandJob, replayed, steps

TP, DP, PP = 0xA1, 0xB2, 0xC3
NODES = {0: "n0", 1: "n0", 2: "n0", 3: "n0", 4: "n1", 5: "n1"}


def _job(settings):
    return HandJob(settings, {TP: [0, 1, 2, 3], DP: [3, 4]}, NODES)


def test_hang_names_the_rank_that_never_entered_not_its_victims(settings):
    j = _job(settings)
    steps(j, 8)
    t = j.now + S
    # rank 1 never enters TP #8; rank 3 waits in TP, so rank 4 waits on 3 in DP (a victim)
    j.collective(TP, 8, {0: t, 2: t, 3: t}, None)
    j.collective(DP, 8, {4: t + 5 * MS}, None)
    j.heartbeats(t + 20 * S)
    hangs = j.opened("hang")
    assert len(hangs) == 1 and len(j.opened()) == 1
    inc = validate_incident(hangs[0])
    assert inc["culprit_ranks"] == [1] and inc["culprit_nodes"] == ["n0"]
    assert inc["incident"] == f"j1-hang-{TP:016x}-8" and inc["severity"] == "P0"
    delay = (inc["opened_ns"] - (t - S)) / S  # rank 1's last progress: the previous step
    assert 5.0 <= delay <= 7.0  # threshold (floor 5 s) + at most a heartbeat and a tick
    assert abs(inc["evidence"]["onset_ns"] - t) < 100 * MS  # time to detect is queryable


def test_hang_culprit_found_through_another_comm(settings):
    j = _job(settings)
    steps(j, 8)
    t = j.now + S
    # rank 4 never enters DP #8; rank 3 waits in DP; ranks 0-2 wait on rank 3 in TP
    j.collective(DP, 8, {3: t}, None)
    j.collective(TP, 8, {0: t + 5 * MS, 1: t + 5 * MS, 2: t + 5 * MS}, None)
    j.heartbeats(t + 12 * S)
    (inc,) = j.opened()
    assert inc["kind"] == "hang" and inc["culprit_ranks"] == [4] and inc["culprit_nodes"] == ["n1"]
    assert inc["evidence"]["blocked_comms"] == [f"{TP:016x}", f"{DP:016x}"]


def test_comm_hang_when_every_member_entered(settings):
    j = _job(settings)
    steps(j, 8)
    t = j.now + S
    j.collective(DP, 8, {3: t, 4: t + MS}, None)
    j.heartbeats(t + 12 * S)
    (inc,) = j.opened()
    assert inc["kind"] == "comm_hang" and inc["comm"] == f"{DP:016x}"
    assert inc["culprit_ranks"] == [] and inc["culprit_nodes"] == ["n0", "n1"]


def test_checkpoint_pause_opens_nothing_and_long_idle_is_job_stalled(settings):
    j = _job(settings)
    steps(j, 8)
    j.heartbeats(j.now + 40 * S)  # a 40 s checkpoint: nobody inside a call
    steps(j, 4)
    assert j.opened() == []
    j.heartbeats(j.now + 70 * S)  # idle past max(60 s, 10 x step)
    (inc,) = j.opened()
    assert inc["kind"] == "job_stalled" and inc["severity"] == "P2"


def _timed_steps(j, n):
    """`steps`, each iteration also reported by every rank (cw.steps.v1): the job's iteration
    time is known."""
    import json

    from commwatch import topics
    from commwatch.capture import Message

    for _ in range(n):
        start = j.now
        steps(j, 1)
        for r in NODES:
            j.send(Message(topics.STEPS, "j1", j.now, json.dumps({
                "v": 1, "job": "j1", "rank": r, "iteration": j.iteration, "t_start_ns": start, "t_end_ns": j.now,
                "phases": {"forward_ms": 300.0, "backward_ms": 600.0}}).encode()))
        j.iteration += 1


def test_a_hang_right_after_a_checkpoint_waits_for_the_usual_threshold(settings, monkeypatch):
    """Generator A: every rank idle in a 20 s checkpoint, then rank 3 hangs 8 s later. Each
    comm's members' intervals that span the checkpoint lifted its gap p99 to 21 s, and the
    threshold to 3x that: named after 63 s. A job-wide pause (nobody inside a call for 5
    iterations) is not the comms' cadence: named after the floor. Without the rule, not
    within 40 s."""
    from commwatch.streams.detect.job_stage import JobStage

    def run():
        j = _job(settings)
        j.iteration = 0
        _timed_steps(j, 10)
        j.heartbeats(j.now + 20 * S)  # the checkpoint: nobody inside a call
        _timed_steps(j, 8)
        t = j.now + S
        j.collective(TP, j.state[(TP, 0)][0] + 1, {0: t, 1: t, 2: t}, None)  # rank 3 never enters
        j.heartbeats(t + 40 * S)
        return t, j.opened()

    t, opened = run()
    assert [(i["kind"], i["culprit_ranks"]) for i in opened] == [("hang", [3])]
    assert opened[0]["opened_ns"] - (t - S) <= 7 * S  # its last progress: the iteration before
    monkeypatch.setattr(JobStage, "_pauses", lambda self, js, now_ns, step: None)
    assert run()[1] == []


def test_a_job_wide_pause_is_shown_in_the_job_health_while_it_lasts(settings):
    """The health snapshot (live page, `commwatch status`) says how long a job-wide pause has
    lasted (every rank idle 5 iterations, nobody inside a call): a checkpoint, told from a hang
    at a glance; nothing once the job makes progress again."""
    from commwatch.commands.status import job_lines

    j = _job(settings)
    j.iteration = 0
    _timed_steps(j, 10)
    assert j.det.health("j1")["step"]["paused_s"] is None
    j.heartbeats(j.now + 20 * S)
    health = j.det.health("j1")
    assert 19 <= health["step"]["paused_s"] <= 21 and health["state"] == "running"  # since its last progress
    assert "paused 20 s" in job_lines(health, False)[0][0]
    _timed_steps(j, 2)
    assert j.det.health("j1")["step"]["paused_s"] is None and j.opened() == []


@pytest.mark.parametrize("drill", [False, True])
def test_a_comm_hang_names_the_node_whose_infiniband_errors_rose(settings, monkeypatch, drill):
    """The fourteenth generator's NIC dying inside a data-parallel all-reduce: every member
    entered, none completes, and they look alike in the call records; the node agents'
    InfiniBand counters tell which link: symbol errors rising on n1 alone. The comm_hang names
    n1 and its member (rank 4), the other nodes as candidates. Drill: counters not read
    (`IB_ERRORS_RECENT_NS` 0): no rank named."""
    from commwatch.streams.detect import job_hw

    if drill:
        monkeypatch.setattr(job_hw, "IB_ERRORS_RECENT_NS", 0)
    j = _job(settings)
    steps(j, 8)
    for errors in (0, 40, 300):  # n1's errors rise; n0's stay
        for node in ("n0", "n1"):
            hw = {"v": 1, "job": "j1", "node": node, "ts_ns": j.now,
                  "ib": {"mlx5_0": {"symbol_errors": errors if node == "n1" else 3}}}
            j.send(Message(topics.HW, "j1", j.now, json.dumps(hw).encode()))
        steps(j, 1)
    t = j.now + S
    j.collective(DP, j.state[(DP, 3)][0] + 1, {3: t, 4: t + MS}, None)
    j.heartbeats(t + 12 * S)
    (inc,) = j.opened()
    assert inc["kind"] == "comm_hang" and inc["comm"] == f"{DP:016x}"
    if drill:
        assert inc["culprit_ranks"] == [] and inc["culprit_nodes"] == ["n0", "n1"]
        return
    assert inc["culprit_ranks"] == [4] and inc["culprit_nodes"] == ["n1"]
    assert inc["evidence"]["candidate_nodes"] == ["n0", "n1"] and inc["evidence"]["ib_symbol_errors"] == {"n1": 300}
    assert "symbol errors rose lately on n1 only" in inc["summary"]


def test_node_lost_after_three_silent_periods_and_resolves(settings):
    j = HandJob(settings, {TP: [0, 1, 2, 3], DP: [3, 4, 5]}, NODES)
    steps(j, 4)
    t = j.now
    j.heartbeats(t + 6 * S, silent_nodes=("n1",))
    lost = j.opened("node_lost")
    assert len(lost) == 1 and lost[0]["culprit_nodes"] == ["n1"] and lost[0]["culprit_ranks"] == [4, 5]
    assert lost[0]["severity"] == "P0" and 3 * S <= lost[0]["opened_ns"] - t <= 4 * S
    j.heartbeats(j.now + 15 * S)
    assert [i["status"] for i in j.incidents if i["kind"] == "node_lost"] == ["open", "resolved"]
    back = [i for i in j.incidents if i["kind"] == "node_lost"][-1]
    assert back["summary"].endswith("[resolved: its heartbeats came back]")
    assert back["evidence"]["resolved_reason"] == "cleared"


RACK = {0: "n0", 1: "n0", 2: "n1", 3: "n1", 4: "n2", 5: "n2", 6: "n3", 7: "n3"}


@pytest.mark.parametrize("drill", [False, True])
def test_nodes_that_go_silent_at_once_are_one_p0(settings, monkeypatch, drill):
    """The fourteenth generator's rack whose top-of-rack switch dies: its four nodes' agents
    and ranks stop at once, and each node was a P0 of its own (four pages for one cause).
    Nodes whose last heartbeats came within `AT_ONCE_PERIODS` periods of each other are one
    incident naming them all: here n1 and n2, silent from the same second (n2 one heartbeat
    later; rank 4 is in no comm, so not known to run there), the hang of the survivors covered by it. Drill: never grouped (two P0s)."""
    if drill:
        monkeypatch.setattr(job_stage, "AT_ONCE_PERIODS", -1.0)
    j = HandJob(settings, {TP: [0, 1, 2, 3], DP: [1, 3, 5, 7]}, RACK)
    steps(j, 4)
    t = j.now
    j.beat(t + S, silent_nodes=("n1",))
    j.now = t + S
    j.heartbeats(t + 8 * S, silent_nodes=("n1", "n2"))
    pages = [i for i in j.incidents if i["severity"] in ("P0", "P1") and i["status"] == "open"]
    if drill:
        assert sorted(i["culprit_nodes"][0] for i in pages) == ["n1", "n2"]
        return
    (inc,) = pages
    events = [i for i in j.incidents if i["incident"] == inc["incident"]]
    assert inc["kind"] == "node_lost" and events[-1]["culprit_nodes"] == ["n1", "n2"]
    assert events[-1]["culprit_ranks"] == [2, 3, 5] and "2 nodes went silent at once" in events[-1]["summary"]
    assert inc["evidence"]["onset_ns"] == t


def test_nodes_lost_far_apart_are_two_incidents(settings):
    """Two nodes lost 20 s apart are two faults: two P0s, each naming its own node."""
    j = HandJob(settings, {TP: [0, 1, 2, 3], DP: [1, 3, 5, 7]}, RACK)
    steps(j, 4)
    j.heartbeats(j.now + 20 * S, silent_nodes=("n1",))
    j.heartbeats(j.now + 8 * S, silent_nodes=("n1", "n2"))
    pages = sorted(tuple(i["culprit_nodes"]) for i in j.incidents if i["severity"] == "P0" and i["status"] == "open")
    assert pages == [("n1",), ("n2",)]
    assert all(len(i["culprit_nodes"]) == 1 for i in j.incidents if i["kind"] == "node_lost")


@pytest.mark.parametrize("drill", [False, True])
def test_a_node_whose_agent_heartbeats_less_often_is_judged_by_its_own_period(settings, gen_i, monkeypatch, drill):
    """The ninth generator's job (TP 4 x PP 2 x DP 4, GPU-timed) whose four node agents send
    heartbeats every 2, 3, 5 and 4 s (the spec fixes each agent's period, 1 s by default),
    rank 17 hung at 17 s: its hang was one P0, and the nodes heartbeating every 5 and 4 s were
    lost (P0 naming their ranks) at each silence over 3 s, four P0s more. A node's period is
    learnt from its heartbeats' intervals: only the hang. Drill: no period learnt
    (`NODE_PERIOD_SLACK` infinite)."""
    if drill:
        monkeypatch.setattr(job_stage, "NODE_PERIOD_SLACK", float("inf"))
    cap, truth = gen_i("cadence_hang")
    assert truth[0]["culprits"] == [17]
    pages = {(e["kind"], tuple(e["culprit_ranks"])) for e in replayed(settings, cap)
             if e["status"] == "open" and e["severity"] in ("P0", "P1")}
    lost = {("node_lost", tuple(range(16, 24))), ("node_lost", tuple(range(24, 32)))}
    assert pages == ({("hang", (17,))} | lost if drill else {("hang", (17,))})


def test_a_silent_node_whose_ranks_still_complete_collectives_is_not_paged(settings):
    """Nothing from n1 reaches the pipeline (its agent, or the network to the broker), but
    rank 3 on n0 still completes data-parallel collectives that n1's ranks 4 and 5 are in:
    those ranks run, their data is late: nothing while it could be a node that crashed a
    moment ago (one heartbeat period beyond `node_lost_periods`), then a P3 naming n1 and no
    rank, a P2 once that lasts `DATA_LOST_P2_NS` (the job's hangs there cannot be seen). Once
    nothing completes any more, a P0 naming n1's ranks."""
    from commwatch.streams.detect.job_stage import DATA_LOST_P2_NS

    j = HandJob(settings, {TP: [0, 1, 2, 3], DP: [3, 4, 5]}, NODES)
    steps(j, 4)
    silent_from = j.now
    told = (settings.node_lost_periods + 1) * settings.heartbeat_period_s * S

    def n0_only(seconds: int) -> None:  # n0's calls and heartbeats only
        for _ in range(seconds):
            base = j.now + S
            j.collective(TP, j.state[(TP, 0)][0] + 1, {r: base for r in (0, 1, 2, 3)}, base + 2 * MS)
            j.collective(DP, j.state[(DP, 3)][0] + 1, {3: base + 10 * MS}, base + 12 * MS)
            j.beat(j.now, silent_nodes=("n1",))

    n0_only(3)
    assert not [i for i in j.incidents if i["kind"] == "node_lost"]
    n0_only(3)
    (lost,) = j.opened("node_lost")
    assert told <= lost["ts_ns"] - silent_from <= told + 2 * S
    assert lost["severity"] == "P3" and lost["culprit_nodes"] == ["n1"] and lost["culprit_ranks"] == []
    assert lost["evidence"]["ranks"] == [4, 5] and "ranks_alive_ns" in lost["evidence"]
    assert "not its ranks" in lost["summary"]
    assert j.det.health("j1")["state"] != "hang"
    n0_only(int(DATA_LOST_P2_NS / S) - 6)
    events = [(i["status"], i["severity"]) for i in j.incidents if i["kind"] == "node_lost"]
    assert events == [("open", "P3"), ("update", "P2")]
    raised = [i for i in j.incidents if i["kind"] == "node_lost"][-1]
    assert DATA_LOST_P2_NS <= raised["ts_ns"] - silent_from <= DATA_LOST_P2_NS + 3 * S
    assert raised["culprit_ranks"] == [] and not [i for i in j.incidents if i["severity"] in ("P0", "P1")]
    j.heartbeats(j.now + 8 * S, silent_nodes=("n1",))  # n0 stops too: no collective completes
    last = [i for i in j.incidents if i["kind"] == "node_lost"][-1]
    assert last["severity"] == "P0" and last["culprit_ranks"] == [4, 5]


@pytest.mark.parametrize("drill", [False, True])
def test_a_node_that_crashes_right_after_its_last_heartbeat_opens_one_p0_naming_its_ranks(settings, monkeypatch,
                                                                                          drill):
    """n1 falls silent and a collective its ranks were in completes on n0 a moment later (they
    ran a little past n1's last heartbeat), then nothing of theirs completes: for that moment
    the node looks like one whose data is late. Its incident opens once, a P0 naming n1's
    ranks (not a notice naming no rank, raised a moment later). Drill: told as soon as it is
    judged silent (`DATA_LATE_PERIODS` 0): a P3 naming no rank first."""
    from commwatch.streams.detect import job_stage

    if drill:
        monkeypatch.setattr(job_stage, "DATA_LATE_PERIODS", 0)
    j = HandJob(settings, {TP: [0, 1, 2, 3], DP: [3, 4, 5]}, NODES)
    steps(j, 4)
    for i in range(16):  # n0's calls and heartbeats only, every half second: n1's ranks gone after 1 s
        base = j.now + S // 2
        j.collective(TP, j.state[(TP, 0)][0] + 1, {r: base for r in (0, 1, 2, 3)}, base + 2 * MS)
        if i == 1:
            j.collective(DP, j.state[(DP, 3)][0] + 1, {3: base + 10 * MS}, base + 12 * MS)
        j.beat(j.now, silent_nodes=("n1",))
    events = [i for i in j.incidents if i["kind"] == "node_lost"]
    assert events and events[0]["status"] == "open" and len({i["incident"] for i in events}) == 1
    first = (events[0]["severity"], events[0]["culprit_ranks"])
    assert first == (("P3", []) if drill else ("P0", [4, 5])), events[0]["summary"]
    assert (events[-1]["severity"], events[-1]["culprit_ranks"]) == ("P0", [4, 5])


def _pipeline_pair(settings):
    """Ranks 3 (node n0) and 4 (n1) with a pipeline comm `PP` beside the TP comm: three healthy
    exchanges (3 sends to 4, 4 receives), heartbeats after. Returns the job and a maker of
    one P2P record of `PP`."""
    import numpy as np

    from commwatch import topics, wire
    from commwatch.capture import Message

    j = HandJob(settings, {TP: [0, 1, 2, 3], PP: [3, 4]}, NODES)
    steps(j, 3)  # TP only below: PP carries sends/recvs

    def p2p(rank, cr, op, peer, seq, t, done):
        r = wire.empty(1)
        r["kind"], r["op"], r["comm"], r["rank"], r["comm_rank"] = wire.KIND_CALL, op, PP, rank, cr
        r["peer"], r["seq"], r["nranks"], r["t_start_ns"] = peer, seq, 2, t
        if done:
            r["flags"], r["t_end_ns"] = wire.FLAG_COMPLETED, t + MS
        return r

    t = j.now
    for k in range(3):
        batch = np.concatenate([p2p(3, 0, wire.OP_SEND, 1, k, t + k * S, True),
                                p2p(4, 1, wire.OP_RECV, 0, k, t + k * S, True)])
        j.send(Message(topics.CALLS, topics.comm_key("j1", PP), t + k * S + 2 * MS, wire.encode_batch(batch)))
    j.heartbeats(t + 3 * S)
    return j, p2p


def test_p2p_hang_names_the_peer_that_never_posted_its_recv(settings):
    from commwatch import topics, wire
    from commwatch.capture import Message

    j, p2p = _pipeline_pair(settings)
    t = j.now + S
    # rank 3 enters send #3 to rank 4, which never posts the matching recv
    j.send(Message(topics.CALLS, topics.comm_key("j1", PP), t + MS,
                   wire.encode_batch(p2p(3, 0, wire.OP_SEND, 1, 3, t, False))))
    j.heartbeats(t + 12 * S)
    (inc,) = j.opened()
    assert inc["kind"] == "hang" and inc["culprit_ranks"] == [4] and inc["culprit_nodes"] == ["n1"]
    assert inc["incident"] == f"j1-hang-{PP:016x}-p2p3" and "never entered Recv #3" in inc["summary"]


@pytest.mark.parametrize("drill", [False, True])
def test_a_rank_that_died_in_a_recv_its_sender_completed_is_named_not_the_transport(settings, monkeypatch, drill):
    """Rank 4 enters recv #3 and dies inside it; rank 3's send #3 completes (the data left it),
    and its send #4 waits for a recv rank 4 never posts. Rank 4's open recv, its other side
    complete, is no transport hang: the rank is named (generator A's node whose processes died
    just after entering their pipeline recvs, drawn with SEED 6: one comm_hang naming no
    rank). Drill: the completed other side not reported, a comm_hang."""
    import numpy as np

    from commwatch import topics, wire
    from commwatch.capture import Message
    from commwatch.streams.detect.comm_stage import CommStage

    if drill:
        report = CommStage.wait_report

        def without(self, st, now_ns):
            rep = report(self, st, now_ns)
            for i in (rep or {}).get("instances", ()):
                i.pop("peer_done", None)
            return rep

        monkeypatch.setattr(CommStage, "wait_report", without)
    j, p2p = _pipeline_pair(settings)
    t = j.now + S
    batch = np.concatenate([p2p(3, 0, wire.OP_SEND, 1, 3, t, True), p2p(4, 1, wire.OP_RECV, 0, 3, t, False),
                            p2p(3, 0, wire.OP_SEND, 1, 4, t + 10 * MS, False)])
    j.send(Message(topics.CALLS, topics.comm_key("j1", PP), t + 20 * MS, wire.encode_batch(batch)))
    j.heartbeats(t + 12 * S)
    (inc,) = j.opened()
    if drill:
        assert inc["kind"] == "comm_hang" and inc["culprit_ranks"] == []
    else:
        assert inc["kind"] == "hang" and inc["culprit_ranks"] == [4] and inc["culprit_nodes"] == ["n1"]



def test_a_rank_blocked_in_a_call_whose_wait_is_not_reported_yet_is_not_named(settings):
    """Rank 2 hangs before the pair's call #9; rank 3 is inside it, ranks 0 and 1 wait in the
    world comm for both. The pair's wait reports reach stage 2 late (seen in a loaded live
    run: stage 1 reports a wait once it is a second old, counted from the comm's last
    completion as it arrived): until they do, the pair's comm report says a call is entered
    and not completed, so rank 3 may be inside it and is not named; then rank 2 alone is."""
    import json

    from commwatch.decode import decode_message
    from commwatch.streams.detect import CommStage, JobStage

    pair, world = 0xC3, 0xD4
    j = HandJob(settings, {pair: [2, 3], world: [0, 1, 2, 3]}, {0: "n0", 1: "n0", 2: "n1", 3: "n1"})
    steps(j, 8)
    t = j.now + S
    j.collective(pair, 9, {3: t}, None)
    j.collective(world, 9, {0: t + 10 * MS, 1: t + 10 * MS}, None)
    j.heartbeats(t + 12 * S)
    stage1, stage2 = CommStage(settings), JobStage(settings)
    named = []
    for msg in j.sent:
        reports = stage1.feed(msg, decode_message(msg), msg.ts_ns) + stage1.tick(lambda job: msg.ts_ns)
        for rep in reports:
            if rep["type"] == "wait" and rep["comm"] == f"{pair:016x}" and msg.ts_ns < t + 8 * S:
                continue  # the pair's wait, late
            named += stage2.feed_report(json.loads(json.dumps(rep)), msg.ts_ns)
        named += stage2.tick(lambda job: msg.ts_ns)
    hangs = [i for i in named if i["kind"] == "hang"]
    assert hangs and all(i["culprit_ranks"] == [2] for i in hangs)


def test_a_rank_whose_completions_stop_while_it_runs_is_not_hung(settings):
    """Rank 4's completion path stops (its probe never again sees a call complete) while its GPU
    runs on: it enters every later call on the device, and its peers complete their sides of
    them (a collective completes on every member or on none; a recv completes only once its
    send did). Its own open calls are nobody's wait: no hang while the job progresses (a P2
    `hw_fault` says so once it lasts). Found by a generator written apart from the detector."""
    from commwatch import topics, wire
    from commwatch.capture import Message

    j = HandJob(settings, {TP: [0, 1, 2, 3], DP: [3, 4], PP: [3, 4]}, NODES)

    def rec(comm, rank, cr, op, peer, seq, t, done, nranks=2):
        r = wire.empty(1)
        r["kind"], r["op"], r["comm"], r["rank"], r["comm_rank"] = wire.KIND_CALL, op, comm, rank, cr
        r["peer"], r["seq"], r["nranks"], r["t_start_ns"] = peer, seq, nranks, t
        r["flags"] = wire.FLAG_GPU_TIMED | (wire.FLAG_COMPLETED if done else 0)
        r["t_end_ns"] = t + 2 * MS if done else 0
        return r

    for k in range(30):
        t = j.now + S
        j.collective(TP, k, {r: t for r in range(4)}, t + 2 * MS)
        ok = k < 5  # rank 4's completions are seen for the first five iterations only
        for comm, op, peer in ((DP, wire.OP_ALLREDUCE, -1), (PP, wire.OP_SEND, 1)):
            mine = rec(comm, 3, 0, op, peer, k, t + 3 * MS, True)
            j.send(Message(topics.CALLS, topics.comm_key("j1", comm), t + 6 * MS, wire.encode_batch(mine)))
        for comm, op, peer in ((DP, wire.OP_ALLREDUCE, -1), (PP, wire.OP_RECV, 0)):
            his = rec(comm, 4, 1, op, peer, k, t + 3 * MS, ok)
            j.send(Message(topics.CALLS, topics.comm_key("j1", comm), t + 6 * MS, wire.encode_batch(his)))
            j.state[(comm, 4)][0] = k
            if ok:
                j.state[(comm, 4)][1] = k
        j.state[(DP, 3)][:2] = [k, k]
        j.state[(PP, 3)][:2] = [k, k]
        j.now = t + 10 * MS
        j.beat(j.now)
    assert [(i["kind"], i["severity"]) for i in j.opened() if i["severity"] in ("P0", "P1")] == []


def test_a_rank_its_agent_stops_listing_died_and_is_the_root(settings):
    """An agent that does not say `exited` still stops listing a rank whose process died in the
    heartbeats it sends for the comm (wire spec 2.2). Rank 4 dies inside DP #8, which every
    member entered: none completes it, yet it is no transport hang: one P0 hang naming rank 4.
    Found by a generator written apart from the detector."""
    j = HandJob(settings, {TP: [0, 1, 2, 3], DP: [3, 4, 5]}, NODES)
    steps(j, 8)
    t = j.now + S
    j.collective(TP, 8, {0: t, 1: t, 2: t, 3: t}, t + 2 * MS)
    j.collective(DP, 8, {3: t + 3 * MS, 4: t + 3 * MS, 5: t + 3 * MS}, None)
    j.heartbeats(t + 12 * S, gone=(4,))
    opened = j.opened()
    assert [(i["kind"], i["severity"], i["culprit_ranks"]) for i in opened] == [("hang", "P0", [4])], opened
    assert opened[0]["evidence"]["roots"][0]["reason"] == "exited"


def test_a_job_whose_ranks_all_left_their_comms_ends_and_its_incidents_resolve(settings):
    """A clean shutdown says so through COMM_DESTROY records alone (an agent that sends no
    `exited`): once every rank has left every comm it was in, the job has ended and its open
    incidents resolve, nothing repeating after."""
    import numpy as np

    from commwatch import topics, wire
    from commwatch.capture import Message

    j = _job(settings)
    steps(j, 8)
    t = j.now + S
    j.collective(TP, 8, {0: t, 2: t, 3: t}, None)  # rank 1 never enters: a hang
    j.heartbeats(t + 8 * S)
    (inc,) = j.opened()
    assert inc["kind"] == "hang"
    for comm, ranks in j.comms.items():
        recs = wire.empty(len(ranks))
        recs["kind"], recs["comm"], recs["rank"] = wire.KIND_COMM_DESTROY, comm, ranks
        recs["comm_rank"], recs["nranks"], recs["t_start_ns"] = np.arange(len(ranks)), len(ranks), j.now
        j.send(Message(topics.CALLS, topics.comm_key(j.job, comm), j.now + MS, wire.encode_batch(recs)))
    j.heartbeats(j.now + 3 * S)
    resolved = [i for i in j.incidents if i["status"] == "resolved"]
    assert [(i["incident"], i["evidence"]["resolved_reason"]) for i in resolved] == [(inc["incident"], "job_ended")]
    n = len(j.incidents)
    j.heartbeats(j.now + 30 * S)
    assert len(j.incidents) == n


def test_a_job_id_run_again_after_its_job_ended_is_watched_afresh(settings):
    """Every rank of run 1 exits (its agents say so): the job ends. Run 2 starts under the same
    job id (an elastic restart, or the id left to its default): its communicators are
    initialised again and their counters start over. It is a new job, not the ended one's
    late data: its hang is named (seen with real torchrun jobs: run 2 went unwatched)."""
    import json

    import numpy as np

    from commwatch import topics, wire
    from commwatch.capture import Message

    j = _job(settings)
    steps(j, 8)
    for t in [j.now + k * S for k in range(1, 5)]:  # every process of run 1 exited
        for comm, ranks in j.comms.items():
            for node in sorted({j.nodes[r] for r in ranks}):
                rs = [{"rank": r, "started": 7, "completed": 7, "exited": True} for r in ranks if j.nodes[r] == node]
                hb = {"v": 1, "job": j.job, "node": node, "ts_ns": t, "comm": f"{comm:016x}", "ranks": rs}
                j.send(Message(topics.PROGRESS, topics.comm_key(j.job, comm), t, json.dumps(hb).encode()))
        j.now = t
    assert j.det.health("j1")["state"] == "ended"
    j.now += 10 * S
    for comm, ranks in j.comms.items():  # run 2: the same communicators, initialised again
        recs = wire.empty(len(ranks))
        recs["kind"], recs["comm"], recs["rank"] = wire.KIND_COMM_INIT, comm, ranks
        recs["comm_rank"], recs["nranks"], recs["t_start_ns"] = np.arange(len(ranks)), len(ranks), j.now
        j.send(Message(topics.CALLS, topics.comm_key(j.job, comm), j.now, wire.encode_batch(recs)))
        for r in ranks:
            j.state[(comm, r)] = [-1, -1, 0, 0]
    steps(j, 6)
    t = j.now + S
    j.collective(TP, 6, {0: t, 2: t, 3: t}, None)  # rank 1 never enters TP #6
    j.heartbeats(t + 12 * S)
    hangs = j.opened("hang")
    assert [(i["culprit_ranks"], i["severity"]) for i in hangs] == [([1], "P0")]


LONG = 0xD4
LONG_NODES = {0: "n0", 1: "n0", 2: "n1", 3: "n1"}


def _long_steps(j, n: int, step: int, hung: int | None = None) -> None:
    """`n` iterations of a data-parallel job whose ranks compute `step` and then all-reduce
    their gradients; `hung` stops after its last completion (the others enter and wait)."""
    for _ in range(n):
        seq = j.state[(LONG, 0)][0] + 1
        j.heartbeats(j.now + step)
        t = j.now + 10 * MS
        if hung is not None:
            j.collective(LONG, seq, {r: t for r in range(4) if r != hung}, None)
            j.heartbeats(j.now + 100 * S)
            return
        j.collective(LONG, seq, {r: t for r in range(4)}, t + 20 * MS)


def test_a_hang_in_a_long_step_job_is_named_by_its_roots_silence_against_its_cadence(settings):
    """Ranks normally go 20 s without progress: the threshold is 3 x that. A rank that stops is
    named when its own silence passes it; its peers reach the call it never enters 20 s after
    its last progress and do not need to wait the threshold on top of that (they did: named
    81 s after its last progress). Found by a generator written apart from the detector."""
    j = HandJob(settings, {LONG: [0, 1, 2, 3]}, LONG_NODES)
    _long_steps(j, 8, 20 * S)
    last = j.now  # rank 3's last progress: the previous all-reduce's completion
    _long_steps(j, 1, 20 * S, hung=3)
    (inc,) = j.opened()
    assert inc["kind"] == "hang" and inc["culprit_ranks"] == [3]
    thr = inc["evidence"]["threshold_s"]
    assert 50 <= thr <= 70
    assert (inc["opened_ns"] - last) / S <= thr + 2.0


@pytest.mark.parametrize("drill", [False, True])
def test_a_hang_in_a_long_step_job_whose_hosts_run_ahead_waits_twice_its_step_not_thrice_its_silence(
        settings, tmp_path, monkeypatch, drill):
    """Generator B's 16-rank job of 31 s steps under host-enqueue, its hosts running ahead (no
    sync per microbatch): its comms' calls are enqueued as an iteration starts and complete as
    it ends, so its members go 29 s without progress every iteration, and 3 x that made a
    threshold of 88 s: its hang, waited on from 62.5 s of the 150 s capture, was never named.
    Where the iterations are known they say what is normal: twice the longer of a step and
    that silence (61 s). Drill: the silence counts three times whatever the step."""
    from commwatch.capture import read_sorted
    from commwatch.decode import decode_messages
    from commwatch.streams.detect import Detector
    from commwatch.streams.detect.job_stage import JobStage

    if drill:
        def thrice(self, js, step):
            s = self.settings
            return max(s.hang_floor_s * 1e9, s.hang_gap_factor * max(self._gaps(js, step).values(), default=0),
                       s.hang_step_factor * step)

        monkeypatch.setattr(JobStage, "threshold_ns", thrice)
    gen = Path(__file__).resolve().parents[1] / "independent" / "jobs" / "gen.py"
    cap = tmp_path / "long_hang_runahead.cwcap"
    subprocess.run([sys.executable, str(gen), "long_hang_runahead", str(cap)], check=True, capture_output=True)
    msgs = read_sorted(cap)
    events = Detector(settings).feed_stream(msgs, decode_messages(msgs, settings.max_message_bytes))
    hangs = [e for e in events if e["status"] == "open" and e["kind"] in ("hang", "comm_hang")]
    assert ([(e["kind"], e["culprit_ranks"]) for e in hangs] == [("hang", [12])]) is not drill
    if hangs:
        assert 55 <= hangs[0]["evidence"]["threshold_s"] <= 65


def test_a_node_whose_report_of_a_long_steps_completion_comes_a_moment_late_is_not_stuck(settings):
    """Completions 20 s apart: between node n0's report of the latest one and node n1's, 20 ms
    later, n1's ranks are behind their peers, but not stuck (a stuck completion path stays
    behind). Found by a generator written apart from the detector (30 s steps, hosts running
    ahead): they were named the root of a P0 hang in a healthy job."""
    j = HandJob(settings, {LONG: [0, 1, 2, 3]}, LONG_NODES)
    _long_steps(j, 4, 20 * S)
    seq = j.state[(LONG, 0)][0] + 1
    t = j.now + 10 * MS
    j.collective(LONG, seq, {r: t for r in range(4)}, None)
    j.heartbeats(t + 20 * S)
    j.collective(LONG, seq, {0: t, 1: t}, j.now + 10 * MS)  # n0's report; n1's comes 20 ms later
    st = j.det.comm_stage.comms[("j1", LONG)]
    j.det.comm_stage._flush(st, j.now)  # what the next tick would apply
    assert st.d_max == seq and st.completed.min() == seq - 1
    assert j.det.comm_stage.comm_report(st, j.now + 10 * MS)["stuck"] == []
    assert j.det.comm_stage.comm_report(st, j.now + 3 * S)["stuck"] != []  # still behind 3 s later: stuck


@pytest.mark.parametrize("seed", [2000, 34000])
@pytest.mark.parametrize("drill", [False, True])
def test_a_watchdogs_abort_after_a_hang_adds_no_culprit_and_no_comm_hang(settings, gen_c, monkeypatch, drill, seed):
    """The third generator's job (host-enqueue, 32 ranks; its draws of seed 2000 and 34000): rank 26 hangs,
    and 40 s later a watchdog aborts every rank. As the victims are torn down (some exit
    first; the probe gives up on the others' calls, COMPLETION_LOST) the waits change shape:
    ranks waiting on an exited one since the hang began seemed roots (the P0 was updated to
    name 16, 17 and 26), and pipeline channels blocked since the hang began, their peer's call
    given up on, a transport hang (a second P0). One P0, naming rank 26 from open to resolve.
    With 34000 the waits left after the abort were younger than the hang: its onset moved
    0.4 s later, past victim 25's silence, and the P0 was updated to name 25 with 26 (an open
    hang's onset never moves later now). Drill: a hang's culprits judged afresh at every
    tick, and every blocked instance a comm_hang candidate."""
    from commwatch.capture import read_sorted
    from commwatch.decode import decode_messages
    from commwatch.streams.detect import Detector
    from commwatch.streams.detect.job_stage import JobStage

    if drill:
        monkeypatch.setattr(JobStage, "_torn_down", lambda self, js, now_ns, roots, comm_roots: (roots, comm_roots))
    msgs = read_sorted(gen_c("s11", seed=seed))
    events = Detector(settings).feed_stream(msgs, decode_messages(msgs, settings.max_message_bytes))
    p0 = [e for e in events if e["severity"] == "P0"]
    assert ({e["incident"] for e in p0} == {p0[0]["incident"]}) is not drill
    assert ({tuple(e["culprit_ranks"]) for e in p0} == {(26,)}) is not drill


@pytest.mark.parametrize("drill", [False, True])
def test_a_node_whose_processes_die_together_is_named_whole_at_once(settings, gen_a, monkeypatch, drill):
    """Generator A's job (TP 2, PP 2, DP 8, GPU-timed) drawn with SEED 13: the eight processes
    of node 3 die at 30 s, its agent heartbeating on. When the hang was named, nobody waited
    on rank 29 yet (its pipeline partner on the same node, its data-parallel peers not at
    their next reduction): the P0 opened naming seven, and 29 joined a second later. The
    node's ranks silent since the roots fell silent, inside no call, are named with them.
    Drill: without them."""
    from commwatch.capture import read_sorted
    from commwatch.decode import decode_messages
    from commwatch.streams.detect import Detector
    from commwatch.streams.detect.job_stage import JobStage

    if drill:
        monkeypatch.setattr(JobStage, "_died_with", lambda self, js, now_ns, roots, skip, thr, since: [])
    msgs = read_sorted(gen_a("crash_node_agent_on_2x2x8_gpu_node3", seed=13))
    events = Detector(settings).feed_stream(msgs, decode_messages(msgs, settings.max_message_bytes))
    p0 = [e for e in events if e["severity"] == "P0"]
    assert {e["incident"] for e in p0} == {p0[0]["incident"]} and p0[0]["kind"] == "hang"
    assert p0[-1]["culprit_ranks"] == list(range(24, 32))
    assert (p0[0]["culprit_ranks"] == list(range(24, 32))) is not drill


@pytest.mark.parametrize("drill", [False, True])
def test_a_rank_that_went_idle_after_the_hang_is_not_named_with_it(settings, gen_m, monkeypatch, drill):
    """The thirteenth generator's RL job (separate trainer and rollout GPUs, GPU-timed, drawn
    with 1): rollout rank 22 stops 40 % into its generation, its three TP peers wait inside a
    decode all-reduce. Engine 0 (ranks 16-19, on 22's node, in none of its comms) finishes its
    generation 2.1 s later and sits idle, inside no call, waiting for a weight sync that never
    comes. The P0 was updated to name the four idle ranks with 22 (`_died_with`: silent on the
    root's node, within the threshold of it). One P0, naming 22 alone. Drill: a rank counted as
    dying with the root however long it progressed after the first wait on it."""
    from commwatch.streams.detect import job_hangs

    if drill:
        monkeypatch.setattr(job_hangs, "OUTLIVED_PERIODS", float("inf"))
    cap, truth = gen_m("hang_rollout")
    p0 = _hangs_of(settings, cap)
    assert p0 and {e["incident"] for e in p0} == {p0[0]["incident"]} and p0[0]["culprit_ranks"] == [22]
    assert ({tuple(e["culprit_ranks"]) for e in p0} == {(22,)}) is not drill


def _hangs_of(settings, cap) -> list[dict]:
    from commwatch.capture import read_sorted
    from commwatch.decode import decode_messages
    from commwatch.streams.detect import Detector

    msgs = read_sorted(cap)
    events = Detector(settings).feed_stream(msgs, decode_messages(msgs, settings.max_message_bytes))
    return [e for e in events if e["severity"] == "P0"]


@pytest.mark.parametrize("drill", [False, True])
def test_a_hang_at_the_first_iteration_names_the_rank_in_no_call(settings, gen_d, monkeypatch, drill):
    """Generator D's job (TP 4, PP 4, DP 2, GPU-timed): a rank stops before its first call; its
    TP peers wait inside all-reduce #0 (a comm that never completed a call: its wait is not
    judged yet), the next stage waits on all four in its recvs. The P0 named the four; the
    three inside a call wait there. Drill: ranks inside unjudged calls counted silent."""
    from commwatch.streams.detect.job_stage import JobStage

    if drill:
        monkeypatch.setattr(JobStage, "_inside_unjudged", staticmethod(lambda js, current, stale: set()))
    cap, truth = gen_d("h04_first_iter")
    p0 = _hangs_of(settings, cap)
    assert len({e["incident"] for e in p0}) == 1 and p0[0]["kind"] == "hang"
    assert (p0[0]["culprit_ranks"] == truth["culprits"]) is not drill


@pytest.mark.parametrize("drill", [False, True])
def test_a_hang_in_a_comm_created_anew_is_named(settings, gen_d, monkeypatch, drill):
    """Generator D's job destroys its data-parallel comms at iteration 25 and creates them
    anew under new ids; a rank stops before its first call on the new one. Every rank had
    left a comm, and was taken as gone (out of every wait); the destroyed comms, silent
    since, as input behind. Nothing was named in 22 s. Drill: a destroyed comm is behind."""
    from commwatch.streams.detect.job_stage import JobStage

    if drill:
        stale = JobStage._stale

        def behind(self, js, now_ns):
            limit = self.settings.node_lost_periods * self.settings.heartbeat_period_s * 1e9
            return stale(self, js, now_ns) | {c for c, r in js.comms.items()
                                              if now_ns - r.get("seen_ns", now_ns) >= limit}

        monkeypatch.setattr(JobStage, "_stale", behind)
    cap, truth = gen_d("s03b_recreate_hang")
    p0 = _hangs_of(settings, cap)
    assert ([e["culprit_ranks"] for e in p0[:1]] == [truth["culprits"]]) is not drill
    assert len({e["incident"] for e in p0}) <= 1


@pytest.mark.parametrize("drill", [False, True])
def test_a_hang_in_a_comm_called_every_tenth_iteration_waits_for_the_jobs_cadence(settings, gen_d, monkeypatch,
                                                                                  drill):
    """Generator D's job evaluates every 10th iteration (1 s steps) on its own comm; a rank
    never enters the evaluation's all-reduce, every peer waits. The comm's 10 s gaps made
    the threshold 20 s; its members progress every iteration in their other comms. Drill:
    the job's threshold from its rarest comm."""
    from commwatch.streams.detect.job_stage import JobStage

    if drill:
        monkeypatch.setattr(JobStage, "_silence", staticmethod(lambda js, gaps: max(gaps.values(), default=0)))
    cap, truth = gen_d("h03_eval_comm_hang")
    p0 = _hangs_of(settings, cap)
    assert [e["culprit_ranks"] for e in p0[:1]] == ([] if drill else [truth["culprits"]])
    if not drill:
        assert p0[0]["opened_ns"] - truth["onset_ns"] <= 7 * S


@pytest.mark.parametrize("drill", [False, True])
def test_a_hang_whose_root_progresses_again_resolves_at_once(settings, gen_c, monkeypatch, drill):
    """The third generator's job in which rank 0 alone writes a checkpoint for 15 s while the
    31 others wait in a barrier: until it ends it cannot be told from a hang of rank 0 (a P0
    naming it). Once nobody waits and rank 0 progresses again, the P0 resolves within the
    heartbeat that shows it, not after the quiet period (10 s) of a job running again. Drill:
    without the rule, it resolves after the quiet period."""
    from commwatch.capture import read_sorted
    from commwatch.decode import decode_messages
    from commwatch.streams.detect import Detector
    from commwatch.streams.detect.incidents import IncidentBook

    if drill:
        monkeypatch.setattr(IncidentBook, "resolve", lambda self, key, now_ns, why: [])
    msgs = read_sorted(gen_c("s06c"))
    events = Detector(settings).feed_stream(msgs, decode_messages(msgs, settings.max_message_bytes))
    hang = [e for e in events if e["kind"] == "hang"]
    assert [e["status"] for e in hang] == ["open", "resolved"] and hang[0]["culprit_ranks"] == [0]
    write_ends = hang[0]["opened_ns"] + int(9.4 * S)  # rank 0 wrote for 15 s, named after 5.6 s
    assert (hang[1]["ts_ns"] - write_ends <= 2 * S) is not drill
    assert ("progress again" in hang[1]["summary"]) is not drill


@pytest.mark.parametrize("drill", [False, True])
def test_a_blocked_call_is_waited_in_from_its_first_device_start_not_its_enqueue(settings, monkeypatch, drill):
    """The bench's GPU-timed data-parallel job (16 ranks) whose rank 6 stops at 18 s: its
    peers' hosts enqueued all-reduce #38 at 18.11 s, their GPUs reached it at 18.97 s (device
    entries). Waited in from the enqueue, its P0 said "15 ranks waiting 5.1 s" 4.3 s after
    the first GPU waited. Drill: no device start, the P0 before the threshold."""
    from commwatch.streams import bench_scenarios as bs
    from commwatch.streams.bench_detect import feed
    from commwatch.streams.detect.comm_state import CommState

    if drill:
        monkeypatch.setattr(CommState, "device_start", lambda self, seq: 0)
    case = next(c for c in bs.jobmodel_cases() if c.name == "jm/hang-gpu-1x1x16")
    built = case.build()
    events, refused = feed(built, settings)
    opened = [e for e in events if e["status"] == "open"]
    assert refused == 0 and [(e["kind"], e["culprit_ranks"]) for e in opened] == [("hang", [6])]
    onset = next(t["onset_ns"] for t in built.truth if t["kind"] == "hang")  # the first GPU waits
    waited_s = (opened[0]["opened_ns"] - onset) / S
    assert (waited_s < 4.6) if drill else (5.0 <= waited_s < 5.5)


@pytest.mark.parametrize("drill", [False, True])
def test_two_ranks_that_stop_at_once_are_both_named_in_one_p0(settings, gen_e, monkeypatch, drill):
    """Generator E's two hangs drawn with SEED 5 (TP 4 x PP 2 x DP 8, ranks 9 and 50 stop at
    35.4 s): the P0 opened on rank 50 as its peers' wait reached the threshold; 0.25 s later
    rank 9's did, but its silence began a few milliseconds after the hang's onset, which the
    rule against victims torn down after a hang reads as a victim's: 9 was never named. A
    rank never seen waiting on a root while the hang is open is a second root. Drill: only
    silence before the onset counts, and the P0 names 50 alone."""
    from commwatch.capture import read_sorted
    from commwatch.decode import decode_messages
    from commwatch.streams.detect import Detector
    from commwatch.streams.detect.job_stage import JobStage

    if drill:
        monkeypatch.setattr(JobStage, "_never_waited", staticmethod(lambda js, rank: False))
    cap, truth = gen_e("f06_two_hangs", seed=5)
    msgs = read_sorted(cap)
    events = Detector(settings).feed_stream(msgs, decode_messages(msgs, settings.max_message_bytes))
    hangs = [e for e in events if e["kind"] == "hang"]
    assert len({e["incident"] for e in hangs}) == 1 and all(e["severity"] == "P0" for e in hangs)
    assert hangs[-1]["culprit_ranks"] == ([50] if drill else sorted(truth["jobs"][0]["culprits"]))


@pytest.mark.parametrize("drill", [False, True])
def test_a_job_restarted_on_fewer_nodes_under_its_id_resolves_the_old_run_and_is_watched_afresh(
        settings, gen_f, monkeypatch, drill):
    """The sixth generator's elastic restart (q15: TP 8 x DP 8, GPU-timed): node 5 crashes at
    20 s (no COMM_DESTROY from its ranks: the job never ends), the survivors abort at 26 s
    (COMPLETION_LOST, then COMM_DESTROY), and at 33 s the job runs again under its id on the
    7 other nodes, 56 ranks renumbered; its new rank 13 is 1.3x from 50 s. The new run's
    placements (`cw.topology.v1`: another world size, ranks on other nodes) restart the job:
    the dead node's P0 resolves, saying so, and rank 13 is named alone. The abort's given-up
    calls are no completion of the dead node's ranks (its P0 stays P0 till the restart).
    Drill: placements not read as a new run (`JobStage.placed_anew`): the dead node's
    incident stays open, read against renumbered ranks, and rank 13 is never named."""
    from commwatch.capture import read_sorted
    from commwatch.decode import decode_messages
    from commwatch.streams.detect import Detector
    from commwatch.streams.detect.job_stage import JobStage

    if drill:
        monkeypatch.setattr(JobStage, "placed_anew", lambda *a: "")
    cap, truth = gen_f("q15_elastic_slow")
    crash, slow = truth["jobs"]
    assert crash["culprits"] == list(range(40, 48)) and slow["culprits"] == [13] and slow["ranks"] == 56
    msgs = read_sorted(cap)
    events = Detector(settings).feed_stream(msgs, decode_messages(msgs, settings.max_message_bytes))
    lost = [e for e in events if e["kind"] == "node_lost"]
    named = [e["culprit_ranks"] for e in events if e["kind"] == "slow_rank" and e["status"] != "resolved"]
    if drill:
        assert lost[-1]["status"] != "resolved" and not named
        return
    assert {e["culprit_nodes"][0] for e in lost} == {crash["nodes"]["40"]}
    assert lost[-1]["status"] == "resolved" and lost[-1]["evidence"]["resolved_reason"] == "job_restarted"
    assert lost[-1]["ts_ns"] >= truth["jobs"][1]["onset_ns"] - 20 * 10**9  # at the restart (33 s), not the end
    assert [(e["status"], e["severity"]) for e in lost] == [("open", "P0"), ("resolved", "P0")]
    assert named and all(r == [13] for r in named)


@pytest.mark.parametrize("drill", [False, True])
def test_a_p2p_deadlock_names_both_ranks_of_the_cycle(settings, gen_g, monkeypatch, drill):
    """The seventh generator's pipeline ranks 35 and 36 each inside an unbatched send to the
    other (an ordering bug): each waits for the other's recv, a cycle; the one that more ranks
    waited on (35) was named alone. Now both, in one P0 (the wait graph alone, then the
    capture). Drill: one rank of the cycle only."""
    from commwatch.capture import read_sorted
    from commwatch.decode import decode_messages
    from commwatch.streams.detect import Detector, waits

    if drill:
        monkeypatch.setattr(waits, "_cycle_ranks", lambda hard, inside, coll=None: sorted(hard)[:1])
    p2p = {"instances": [
        {"seq": 7, "op": "Send", "since_ns": 0, "entered": [35], "missing": [36], "p2p": True},
        {"seq": 7, "op": "Send", "since_ns": 0, "entered": [36], "missing": [35], "p2p": True},
        {"seq": 8, "op": "Send", "since_ns": 0, "entered": [34], "missing": [35], "p2p": True}]}
    g = waits.analyse({"pp": p2p}, now_ns=10 ** 10, threshold_ns=5 * 10 ** 9, terminal=set())
    assert g.deadlock and (sorted(g.roots) == [35, 36]) is not drill
    cap, _ = gen_g("e01-p2p-deadlock")
    msgs = read_sorted(cap)
    events = Detector(settings).feed_stream(msgs, decode_messages(msgs, settings.max_message_bytes))
    p0 = [e for e in events if e["severity"] == "P0"]
    assert len({e["incident"] for e in p0}) == 1 and p0[0]["kind"] == "hang"
    assert (p0[-1]["culprit_ranks"] == [35, 36]) is not drill


@pytest.mark.parametrize("drill", [False, True])
def test_a_deadlock_of_call_order_names_the_rank_that_broke_it(settings, gen_i, monkeypatch, drill):
    """The ninth generator's job (TP 4 x DP 8, GPU-timed, two data-parallel comms of the same
    8 members, both on the compute stream): at iteration 20 rank 21 calls the second's
    all-reduce before the first's, its 7 peers the other way round. 21 sits in the one, the 7
    in the other, each lacking the others: a cycle, and one P0 named all 8. The ranks waiting
    in the cycle's instance fewer of its ranks wait in broke the order: 21 alone. A cycle of equals (two
    pipeline ranks each inside a send to the other, the previous test) names both. Drill: every
    rank of the cycle (`_cycle_ranks` returning all it is given)."""
    from commwatch.streams.detect import waits

    if drill:
        monkeypatch.setattr(waits, "_cycle_ranks", lambda hard, inside, coll=None: hard)
    peers = [1, 5, 9, 13, 17, 25, 29]
    w = {"dp": {"instances": [{"seq": 20, "op": "AllReduce", "since_ns": 0, "entered": peers, "missing": [21]}]},
         "dp2": {"instances": [{"seq": 20, "op": "AllReduce", "since_ns": 0, "entered": [21], "missing": peers}]}}
    g = waits.analyse(w, now_ns=10 ** 10, threshold_ns=5 * 10 ** 9, terminal=set())
    assert g.deadlock and sorted(g.roots) == (sorted(peers + [21]) if drill else [21])
    cap, truth = gen_i("order_deadlock")
    assert truth[0]["culprits"] == [21]
    p0 = [e for e in replayed(settings, cap) if e["severity"] == "P0"]
    assert len({e["incident"] for e in p0}) == 1 and p0[0]["kind"] == "hang"
    assert {r for e in p0 for r in e["culprit_ranks"]} == (set(peers + [21]) if drill else {21})
    assert "call order differs" in p0[0]["summary"]
    # under a host-enqueue probe (rank 10 enqueued the second comm's all-reduce first): every
    # member entered both, none completes; each rank's own entry times tell its order, and the
    # ranks disagree: one rank broke it (a comm_hang naming no rank before; the drill, too)
    cap, truth = gen_i("order_deadlock_enq")
    assert truth[0]["culprits"] == [10]
    p0 = [(e["kind"], tuple(e["culprit_ranks"])) for e in replayed(settings, cap) if e["severity"] == "P0"]
    assert set(p0) == ({("comm_hang", ())} if drill else {("hang", (10,))})



@pytest.mark.parametrize("drill", [False, True])
def test_a_rank_alone_in_an_extra_collective_is_named_not_the_stage_sending_to_its_peers(monkeypatch, drill):
    """The twentieth generator's desync (TP 4 x PP 2 x DP 4, host-enqueue): rank 13 alone
    calls a barrier on the world comm; its TP peers 12, 14, 15 wait in their all-reduce for
    it; the previous stage's ranks 8-11 wait inside their sends to 12-15. A cycle (the barrier
    waits for 8-11). One send is waited in by one rank at most, so 8-11 looked as few as 13,
    and the P0 widened to [8, 9, 10, 11, 13]. The collective instances say who broke the
    order: 13 alone where its peers are three. Drill: the counts of every instance alike."""
    from commwatch.streams.detect import waits

    if drill:
        plain = waits._cycle_ranks
        monkeypatch.setattr(waits, "_cycle_ranks", lambda hard, inside, coll=None: plain(hard, inside))
    w = {"world": {"instances": [{"seq": 1, "op": "Barrier", "since_ns": 0, "entered": [13],
                                  "missing": [8, 9, 10, 11, 12, 14, 15]}]},
         "tp": {"instances": [{"seq": 850, "op": "AllReduce", "since_ns": 0, "entered": [12, 14, 15], "missing": [13]}]}}
    for k in range(4):
        w[f"pp{k}"] = {"instances": [{"seq": 201, "op": "Send", "since_ns": 0, "entered": [8 + k],
                                      "missing": [12 + k], "p2p": True}]}
    g = waits.analyse(w, now_ns=10 ** 10, threshold_ns=5 * 10 ** 9, terminal=set())
    assert g.deadlock and sorted(g.roots) == ([8, 9, 10, 11, 13] if drill else [13])


@pytest.mark.parametrize("drill", [False, True])
def test_a_leader_leaving_a_long_wan_call_whose_own_completion_comes_late_is_not_hung(settings, monkeypatch, drill):
    """Two sites, each a leader and a member ({0, 1} on a, {2, 3} on b): the leaders meet in a
    20 s all-reduce over the WAN (their comm's first call) while each member waits for its
    leader in its site's broadcast. Node b's completion arrives first; node a's agent sends
    rank 0's 1.5 s later. Meanwhile rank 0 is inside a call its peer completed: it completed it
    too (a collective completes on every member or none), and it is no root (the islands
    generator's leaders were named hung by their sites' broadcast, a false P0 per outer round).
    Drill: without the rule, rank 0 is named "silent" since it entered the all-reduce."""
    from commwatch.streams.detect import comm_stage

    if drill:
        monkeypatch.setattr(comm_stage, "IMPLIED_DONE", False)
    wan, site_a, site_b = 0xE1, 0xE2, 0xE3
    j = HandJob(settings, {wan: [0, 2], site_a: [0, 1], site_b: [2, 3]}, {0: "a", 1: "a", 2: "b", 3: "b"})
    for i in range(10):
        t = j.now + S
        j.collective(site_a, i, {0: t, 1: t}, t + 2 * MS)
        j.collective(site_b, i, {2: t, 3: t}, t + 2 * MS)
        j.beat(j.now)
    t = j.now + S
    j.collective(wan, 0, {0: t, 2: t}, None)
    j.collective(site_a, 10, {1: t}, None, op=wire.OP_BROADCAST)
    j.collective(site_b, 10, {3: t}, None, op=wire.OP_BROADCAST)
    end = t + 20 * S
    j.heartbeats(end)
    j.collective(wan, 0, {2: t}, end)  # node b's completion ...
    j.heartbeats(end + 1500 * MS, period=250 * MS)
    j.collective(wan, 0, {0: t}, end)  # ... node a's, 1.5 s later
    j.now = end + 1600 * MS
    j.collective(site_a, 10, {0: j.now, 1: t}, j.now + 5 * MS, op=wire.OP_BROADCAST)
    j.collective(site_b, 10, {2: end + 100 * MS, 3: t}, j.now + 5 * MS, op=wire.OP_BROADCAST)
    j.heartbeats(j.now + 3 * S)
    hangs = [i for i in j.incidents if i["kind"] == "hang"]
    assert (hangs == []) is not drill, hangs
    if drill:
        assert hangs[0]["culprit_ranks"] == [0] and hangs[0]["evidence"]["roots"][0]["reason"] == "silent"


@pytest.mark.parametrize("drill", [False, True])
def test_ranks_whose_probe_cannot_see_device_starts_are_not_said_to_be_stuck_behind_a_kernel(
        settings, monkeypatch, drill):
    """A comm of two GPU-timed ranks (0, 1) and two under a host-enqueue probe that observes
    completions on the host (2, 3: entries ENQUEUED, completions COMPLETED+ENQUEUED, no device
    entries, as wire spec section 1 allows). An 8 s all-reduce over a slow link: 0 and 1 write
    that their devices are inside it; 2 and 3 can only say they enqueued it. Nothing tells
    that their devices have not started it: no P0 "GPU never started" (the islands generator's
    mixed sites, a false P0 per WAN round). Drill: without the rule, 2 and 3 are named."""
    from commwatch.streams.detect import comm_state

    if drill:
        monkeypatch.setattr(comm_state, "HOST_PROBES_UNKNOWN", False)
    comm = 0xF1
    ranks = [0, 1, 2, 3]
    j = HandJob(settings, {comm: ranks}, {0: "g0", 1: "g1", 2: "h0", 3: "h1"})
    gpu_done = wire.FLAG_COMPLETED | wire.FLAG_GPU_TIMED
    host_done = wire.FLAG_COMPLETED | wire.FLAG_ENQUEUED

    def records(seq: int, flags: dict[int, int], start: int, end: int, at: int) -> None:
        rows = sorted(flags)
        recs = wire.empty(len(rows))
        recs["kind"], recs["op"], recs["comm"], recs["seq"] = wire.KIND_CALL, wire.OP_ALLREDUCE, comm, seq
        recs["rank"], recs["comm_rank"], recs["nranks"], recs["bytes"] = rows, rows, len(ranks), 1 << 20
        recs["flags"] = [flags[r] for r in rows]
        recs["t_start_ns"], recs["t_end_ns"] = start, end
        for r in rows:
            st = j.state[(comm, r)]
            st[0], st[2] = seq, start
            if flags[r] & wire.FLAG_COMPLETED:
                st[1], st[3] = seq, end
        j.now = at
        j.send(Message(topics.CALLS, topics.comm_key(j.job, comm), at, wire.encode_batch(recs)))

    for seq in range(12):
        t = j.now + S
        records(seq, {0: gpu_done, 1: gpu_done, 2: host_done, 3: host_done}, t, t + 5 * MS, t + 200 * MS)
        j.beat(j.now)
    t = j.now + S
    records(12, {2: wire.FLAG_ENQUEUED, 3: wire.FLAG_ENQUEUED}, t, 0, t + 100 * MS)
    records(12, {0: wire.FLAG_GPU_TIMED, 1: wire.FLAG_GPU_TIMED}, t, 0, t + 400 * MS)
    j.heartbeats(t + 8 * S, period=250 * MS)
    records(12, {0: gpu_done, 1: gpu_done, 2: host_done, 3: host_done}, t, t + 8 * S, t + 8200 * MS)
    j.heartbeats(j.now + 3 * S)
    hangs = [i for i in j.incidents if i["kind"] == "hang"]
    assert (hangs == []) is not drill, hangs
    if drill:
        assert hangs[0]["culprit_ranks"] == [2, 3] and "never started" in hangs[0]["summary"]


@pytest.mark.parametrize("drill", [False, True])
def test_a_gpu_stopping_inside_a_ring_permute_is_the_root_of_its_two_stuck_channels(settings, gen_s, monkeypatch,
                                                                                   drill):
    """The stacks generator's JAX job (64 ranks, no coordinates, GPU-timed): rank 43's GPU stops
    inside a ring collective-permute (grouped send to m+1, recv from m-1, on every rank of its
    node's model comm at once). Its channels 42->43 and 43->44 stay stuck with both ends inside,
    the comm's six other channels complete. A dead link stalls its own channel only: one P0
    hang naming 43. Drill: without the rule, a comm_hang naming nobody."""
    from commwatch.streams.detect import job_hangs

    if drill:
        monkeypatch.setattr(job_hangs, "SHARED_CHANNEL_ROOT", False)
    cap, truth = gen_s("h04_jax_permute_gpu_stop")
    events = replayed(settings, cap)
    p0 = [e for e in events if e["severity"] == "P0" and e["status"] == "open"]
    if drill:
        assert [e["kind"] for e in p0] == ["comm_hang"] and p0[0]["culprit_ranks"] == []
        return
    assert truth["culprits"] == [43]
    assert [(e["kind"], e["culprit_ranks"]) for e in p0] == [("hang", [43])]
    assert "GPU stopped" in p0[0]["summary"]


@pytest.mark.parametrize("drill", [False, True])
def test_no_rank_is_newly_named_slow_while_its_job_is_hung(settings, gen_s, monkeypatch, drill):
    """The same JAX job: the P0 naming rank 43 opens 5.5 s after its GPU stopped. Its rings
    judged as a pipeline's channels (as before collective permutes were known,
    `windows.PERMUTE_MIN`), ranks of other nodes, held up behind the stop (their model-comm
    intervals span a data-comm call waiting on 43's node), seemed 20-50 % slower "computing
    between calls" at that tick: whatever seems slow while a job is hung, nothing but the P0
    opens. Drill: without the rule, a slow_rank naming a victim opens too."""
    from commwatch.streams.detect import job_slow, windows

    monkeypatch.setattr(windows, "PERMUTE_MIN", 10**6)
    if drill:
        monkeypatch.setattr(job_slow, "HANG_HOLDS", False)
    cap, truth = gen_s("h04_jax_permute_gpu_stop")
    opened = [(e["kind"], e["culprit_ranks"]) for e in replayed(settings, cap) if e["status"] == "open"]
    victims = [r for _, ranks in opened for r in ranks if r not in truth["culprits"]]
    if drill:
        assert victims and ("slow_rank", [victims[0]]) in opened
        return
    assert opened == [("hang", [43])]
