"""Progress heartbeats from ring records (contract 2.2)."""

from __future__ import annotations

from commwatch import messages, wire
from commwatch.producers.agent.progress import Progress


def records(rows):
    recs = wire.empty(len(rows))
    for i, (kind, op, flags, rank, comm, seq, t0, t1, peer) in enumerate(rows):
        recs[i] = (kind, op, flags, rank, comm, seq, t0, t1, 8, 0, peer, 4, 0)
    return recs


def test_started_and_completed_per_rank_and_comm():
    p = Progress()
    p.update("j", records([
        (2, 0, 0, 0, 0xA, 0, 5, 5, -1),
        (1, 1, 0, 0, 0xA, 0, 10, 0, -1), (1, 1, 1, 0, 0xA, 0, 10, 20, -1),
        (1, 1, 0, 0, 0xA, 1, 30, 0, -1),  # rank 0 waits in seq 1
        (1, 2, 0, 1, 0xA, 0, 12, 0, -1),  # rank 1 entered seq 0 only
        (1, 4, 1, 0, 0xB, 3, 40, 50, 0),
    ]))
    msgs = {m["comm"]: m for _, m in p.messages("node-1", 99)}
    for m in msgs.values():
        messages.validate_progress(m)
    a = {r["rank"]: r for r in msgs[wire.comm_hex(0xA)]["ranks"]}
    assert (a[0]["started"], a[0]["completed"], a[0]["t_last_start_ns"], a[0]["t_last_end_ns"]) == (1, 0, 30, 20)
    assert (a[1]["started"], a[1]["completed"]) == (0, -1) and "t_last_end_ns" not in a[1]
    b = msgs[wire.comm_hex(0xB)]["ranks"]
    assert b == [{"rank": 0, "started": 3, "completed": 3, "t_last_start_ns": 40, "t_last_end_ns": 50}]


def test_comm_init_alone_gives_minus_one_and_destroy_removes():
    p = Progress()
    p.update("j", records([(2, 0, 0, 4, 0xC, 0, 5, 5, -1)]))
    (_, m), = p.messages("n", 1)
    assert m["ranks"] == [{"rank": 4, "started": -1, "completed": -1}]
    p.update("j", records([(3, 0, 0, 4, 0xC, 0, 6, 6, -1)]))
    assert p.messages("n", 2) == []
    for _ in range(3):
        p.messages("n", 3)
    assert p.table == {}  # forgotten after the grace


def test_an_exit_right_after_leaving_is_reported_on_the_comms_left():
    p = Progress()
    p.update("j", records([(2, 0, 0, 4, 0xC, 0, 5, 5, -1), (1, 1, 1, 4, 0xC, 0, 6, 7, -1),
                           (3, 0, 0, 4, 0xC, 0, 8, 8, -1)]))  # a clean finalisation: leave, then exit
    assert p.messages("n", 1) == []
    assert p.exit("j", 4) == 1
    (_, m), = p.messages("n", 2)
    assert m["ranks"] == [{"rank": 4, "started": 0, "completed": 0, "exited": True, "t_last_start_ns": 6,
                           "t_last_end_ns": 7}]
    p.forget("j", 4)
    assert p.messages("n", 3) == []


def test_p2p_counted_per_peer_and_op_apart_from_collectives():
    p = Progress()
    p.update("j", records([
        (1, wire.OP_SEND, 1, 0, 0xD, 0, 1, 2, 1), (1, wire.OP_SEND, 0, 0, 0xD, 1, 3, 0, 1),
        (1, wire.OP_RECV, 1, 0, 0xD, 0, 1, 2, 3),
    ]))
    (_, m), = p.messages("n", 1)
    messages.validate_progress(m)
    r = m["ranks"][0]
    assert (r["started"], r["completed"]) == (-1, -1)
    assert r["p2p"] == [{"peer": 1, "op": "send", "started": 1, "completed": 0},
                        {"peer": 3, "op": "recv", "started": 0, "completed": 0}]


def test_forget_drops_a_rank_everywhere():
    p = Progress()
    p.update("j", records([(1, 1, 0, 0, 0xA, 0, 1, 0, -1), (1, 1, 0, 1, 0xA, 0, 1, 0, -1)]))
    p.forget("j", 0)
    (_, m), = p.messages("n", 1)
    assert [r["rank"] for r in m["ranks"]] == [1]


def test_a_call_given_up_on_is_no_longer_waited_in():
    lost = wire.FLAG_ENQUEUED | wire.FLAG_COMPLETION_LOST
    p = Progress()
    p.update("j", records([(1, 1, wire.FLAG_ENQUEUED, 0, 0xA, 0, 10, 0, -1), (1, 1, lost, 0, 0xA, 0, 10, 0, -1),
                           (1, wire.OP_SEND, wire.FLAG_ENQUEUED, 0, 0xA, 0, 11, 0, 1),
                           (1, wire.OP_SEND, lost, 0, 0xA, 0, 11, 0, 1)]))
    (_, m), = p.messages("n", 1)
    r = m["ranks"][0]
    assert (r["started"], r["completed"]) == (0, 0) and "t_last_end_ns" not in r
    assert r["p2p"] == [{"peer": 1, "op": "send", "started": 0, "completed": 0}]
