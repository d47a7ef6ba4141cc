"""Columnar ingest: many messages decoded together, ticks skipped while nothing is due,
heartbeats folded in behind a comm's pending records. Each is a shortcut that must give
what the message-by-message path gives."""

import json
import zlib

import numpy as np

from commwatch import topics, wire
from commwatch.capture import Message
from commwatch.decode import CallBatch, decode_message, decode_messages
from commwatch.producers.simulate import JobSpec, parse_fault, simulate
from commwatch.streams.detect import CommStage, Detector
from commwatch.wire import WireError
from detect_jobs import S, T0


def _outcome(fn):
    try:
        res = fn()
    except WireError as err:
        return ("error", err.reason, err.detail)
    if isinstance(res, CallBatch):
        return ("calls", res.job, res.comm, res.count, bytes(res.value))
    if isinstance(res, WireError):
        return ("error", res.reason, res.detail)
    return ("json", json.dumps(res, sort_keys=True))


def _hostile(msgs: list[Message]) -> list[Message]:
    """The simulator's messages with some call batches and heartbeats broken."""
    out = []
    for i, m in enumerate(msgs):
        if m.topic == topics.CALLS and i % 7 == 3:
            recs = wire.decode_batch(m.value).copy()
            recs["rank"][len(recs) // 2] = 10**9  # one absurd record refuses its whole batch
            m = m._replace(value=wire.encode_batch(recs))
        elif m.topic == topics.CALLS and i % 11 == 5:
            m = m._replace(value=m.value[:-3])  # truncated
        elif m.topic == topics.CALLS and i % 13 == 6:
            m = m._replace(key=m.key.rpartition("/")[0] + "/0123456789abcdef")  # the key names another comm
        elif m.topic == topics.PROGRESS and i % 5 == 2:
            m = m._replace(value=m.value.replace(b'"started"', b'"begun"', 1))
        out.append(m)
    return out


def test_decoding_many_messages_together_gives_what_decoding_each_gives(settings):
    msgs = _hostile(list(simulate(JobSpec(job="j", tp=2, pp=2, dp=2, duration_s=3)).messages()))
    together = [_outcome(lambda d=d: d) for d in decode_messages(msgs, settings.max_message_bytes)]
    alone = [_outcome(lambda m=m: decode_message(m, settings.max_message_bytes)) for m in msgs]
    assert together == alone
    reasons = {o[1] for o in alone if o[0] == "error"}
    assert {"bad_rank", "truncated", "comm_mismatch", "missing_field"} <= reasons
    assert sum(o[0] == "calls" for o in alone) > 100


def _events(det: Detector, msgs: list[Message]) -> list[dict]:
    out = []
    for m in msgs:
        out += det.feed(m)
        out += det.tick(m.ts_ns)
    for k in range(1, 40):
        out += det.tick(msgs[-1].ts_ns + k * S // 2)
    return out


def test_ticks_skipped_while_nothing_is_due_change_nothing(settings):
    faults = [parse_fault("slow:rank=5,factor=1.6,at=4s"), parse_fault("hang:rank=2,at=14s")]
    msgs = list(simulate(JobSpec(job="j", tp=2, pp=2, dp=2, duration_s=20), faults).messages())
    fast = Detector(settings)
    every = Detector(settings)
    every.held = lambda job: False  # not the default: every tick runs in full
    got, want = _events(fast, msgs), _events(every, msgs)
    assert {(e["kind"], e["status"]) for e in want} >= {("hang", "open"), ("slow_rank", "open")}
    assert got == want


def _two_rank_batch(seq: int) -> bytes:
    recs = wire.empty(2)
    recs["kind"], recs["op"], recs["flags"] = wire.KIND_CALL, wire.OP_ALLREDUCE, wire.FLAG_COMPLETED | wire.FLAG_GPU_TIMED
    recs["comm"], recs["rank"], recs["comm_rank"], recs["nranks"] = 0xAB, [0, 1], [0, 1], 2
    recs["seq"], recs["t_start_ns"], recs["t_end_ns"] = seq, T0, T0 + 1000
    return wire.encode_batch(recs)


def _heartbeat(at: int, completed: int) -> Message:
    hb = {"v": 1, "job": "j", "node": "n0", "ts_ns": at, "comm": "00000000000000ab",
          "ranks": [{"rank": 0, "started": completed, "completed": completed}]}
    return Message(topics.PROGRESS, "j/00000000000000ab", at, json.dumps(hb).encode())


def test_a_heartbeat_behind_pending_records_is_applied_after_them(settings):
    from commwatch.streams.detect.comm_stage import HB_WAIT_NS

    """Records are older than the heartbeat that follows them: the completion they carry is
    dated by their own message, not by the later heartbeat that repeats it."""
    stage = CommStage(settings)
    first = Message(topics.CALLS, "j/00000000000000ab", T0, _two_rank_batch(0))
    stage.feed(first, decode_message(first), T0)
    stage.tick_job("j", T0 + S)  # the comm is known: later batches wait for a flush
    calls = Message(topics.CALLS, "j/00000000000000ab", T0 + 2 * S, _two_rank_batch(1))
    stage.feed(calls, decode_message(calls), T0 + 2 * S)
    hb = _heartbeat(T0 + 2 * S + S // 10, 1)
    stage.feed(hb, decode_message(hb), hb.ts_ns)
    st = stage.comms[("j", 0xAB)]
    assert st.pending and st.pending_hb, "the heartbeat waits behind the pending batch"
    stage.tick_job("j", T0 + 3 * S)
    assert st.pending_hb, "while records flow they carry its progress: it waits up to HB_WAIT_NS"
    assert T0 + 4 * S >= hb.ts_ns + HB_WAIT_NS
    stage.tick_job("j", T0 + 4 * S)
    assert not st.pending and not st.pending_hb
    assert st.completed.tolist() == [1, 1]
    assert st.done_adv_ns[0] == T0 + 2 * S  # the records' time: applied first


def test_heartbeats_waiting_behind_records_are_bounded(settings):
    from commwatch.streams.detect.comm_stage import MAX_PENDING_HB

    stage = CommStage(settings)
    first = Message(topics.CALLS, "j/00000000000000ab", T0, _two_rank_batch(0))
    stage.feed(first, decode_message(first), T0)
    stage.tick_job("j", T0 + S)
    calls = Message(topics.CALLS, "j/00000000000000ab", T0 + 2 * S, _two_rank_batch(1))
    stage.feed(calls, decode_message(calls), T0 + 2 * S)
    st = stage.comms[("j", 0xAB)]
    for i in range(3 * MAX_PENDING_HB):  # no tick: only the bound flushes them
        hb = _heartbeat(T0 + 2 * S, 1)
        stage.feed(hb, decode_message(hb), T0 + 2 * S)
        if not st.pending:  # flushed: batch again
            stage.feed(calls, decode_message(calls), T0 + 2 * S)
        assert len(st.pending_hb) <= MAX_PENDING_HB


def test_a_poll_of_two_jobs_fed_at_once_leaves_what_one_at_a_time_does(settings):
    """The live comm half hands a whole poll to stage 1 (`Detector.comm_feed`): per job its
    messages are buffered in order, so after the same ticks each comm holds what feeding
    them one by one gives: the same counters, the same instance ring."""
    msgs = sorted([m for job, seed in (("ja", 1), ("jb", 2))
                   for m in simulate(JobSpec(job=job, tp=2, pp=2, dp=2, duration_s=4, seed=seed)).messages()
                   if m.topic in (topics.CALLS, topics.PROGRESS)], key=lambda m: m.ts_ns)
    decoded = decode_messages(msgs)
    one, poll = Detector(settings), Detector(settings)
    for m, d in zip(msgs, decoded):
        one.comm_feed([m], [d], m.ts_ns)
    for lo in range(0, len(msgs), 64):
        poll.comm_feed(msgs[lo:lo + 64], decoded[lo:lo + 64], msgs[min(lo + 63, len(msgs) - 1)].ts_ns)
    end = msgs[-1].ts_ns + 3 * S
    one.comm_tick(end)
    poll.comm_tick(end)
    assert one.stats == poll.stats and sorted(one.comm_stage.comms) == sorted(poll.comm_stage.comms)
    assert {j for j, _ in poll.comm_stage.comms} == {"ja", "jb"}
    for key, a in one.comm_stage.comms.items():
        b = poll.comm_stage.comms[key]
        assert not a.pending and not b.pending
        assert a.completed.tolist() == b.completed.tolist() and a.started.tolist() == b.started.tolist()
        assert np.array_equal(a.tag, b.tag) and np.array_equal(a.en, b.en)


def test_replay_one_batch_at_a_time_gives_what_the_poll_path_gives(settings):
    """Replay feeds a call batch through `Detector.comm_feed_one` (no grouping of a poll by
    job); the live comm half through `comm_feed`. Message by message, both give the same
    incidents, the same stage-1 reports and the same window rows."""
    faults = [parse_fault("slow:rank=5,factor=1.6,at=4s"), parse_fault("hang:rank=2,at=14s")]
    msgs = list(simulate(JobSpec(job="j", tp=2, pp=2, dp=2, duration_s=20), faults).messages())
    decoded = decode_messages(msgs)
    fast, poll = Detector(settings), Detector(settings)
    reports: dict[int, list] = {id(fast): [], id(poll): []}
    for det in (fast, poll):
        feed_report = det.job_feed_report
        det.job_feed_report = lambda rep, ref, f=feed_report, out=reports[id(det)]: out.append(rep) or f(rep, ref)
    got = fast.feed_stream(msgs, decoded)
    want = []
    for m, d in zip(msgs, decoded):
        want += poll._due_before(m.ts_ns)  # the ticks that fell due since, as replay runs them
        if m.topic in (topics.CALLS, topics.PROGRESS):
            for rep in poll.comm_feed([m], [d], m.ts_ns):
                want += poll.job_feed_report(rep, m.ts_ns)
        else:
            want += poll.job_feed(m, d, m.ts_ns)
        want += poll.tick(m.ts_ns)
    assert fast.stats["records"] > 0
    assert {(e["kind"], e["status"]) for e in want} >= {("hang", "open"), ("slow_rank", "open")}
    assert got == want
    assert reports[id(fast)] == reports[id(poll)] and len(reports[id(fast)]) > 100
    assert fast.window_stats() == poll.window_stats()
    assert fast.stats == poll.stats


def test_a_backlog_read_in_big_polls_loses_no_instance_and_finds_what_replay_finds(settings):
    """A worker catching up reads seconds of a job in one poll (2000 messages here: about
    3 s of this 64-rank job). Fed at once, a tensor-parallel comm's pending records would
    span more instances than its ring keeps: they were dropped (`instance_out_of_ring`) and
    its windows lost. The poll is fed in runs, the job ticked between them as replay does."""
    msgs = list(simulate(JobSpec(job="j", tp=8, pp=2, dp=4, duration_s=25),
                         [parse_fault("slow:rank=5,factor=1.6,at=6s")]).messages())
    decoded = decode_messages(msgs)
    replay = Detector(settings)
    want = replay.feed_stream(msgs, decoded) + replay.tick(msgs[-1].ts_ns + 1)
    live = Detector(settings)
    got = []
    for lo in range(0, len(msgs), 2000):
        ms, ds = msgs[lo:lo + 2000], decoded[lo:lo + 2000]
        ref = ms[-1].ts_ns  # the poll is read at once: the reference is when it was read
        comm = [i for i, m in enumerate(ms) if m.topic in (topics.CALLS, topics.PROGRESS)]
        for rep in live.comm_feed([ms[i] for i in comm], [ds[i] for i in comm], ref):
            got += live.job_feed_report(rep, ref)
        got += [e for i, m in enumerate(ms) if i not in set(comm) for e in live.job_feed(m, ds[i], ref)]
        got += live.tick(ref)
    got += live.tick(msgs[-1].ts_ns + 1)
    assert replay.drops() == {} and live.drops() == {}
    assert live.stats["records"] == replay.stats["records"]

    def found(events):
        return {(e["kind"], e["status"], tuple(e["culprit_ranks"])) for e in events if e["status"] == "open"}

    assert found(got) == found(want) == {("slow_rank", "open", (5,))}


def test_a_backlog_read_one_partition_ahead_of_another_loses_no_instance(settings):
    """Catching up, a worker may read seconds of one partition before another's: the job's
    clock and ticks run ahead of the comms of the partition read later, which get no tick
    while their seconds of calls arrive. A comm flushes once its pending calls could span
    half its instance ring, whatever the job's ticks."""
    msgs = [m for m in simulate(JobSpec(job="j", tp=8, pp=2, dp=4, duration_s=12)).messages()
            if m.topic in (topics.CALLS, topics.PROGRESS)]
    decoded = decode_messages(msgs)
    part = [zlib.crc32(m.key.encode()) % 2 for m in msgs]  # two partitions by key
    first = [i for i, p in enumerate(part) if p == 0]
    later = [i for i, p in enumerate(part) if p == 1]
    live = Detector(settings)
    for part in (first, later):
        for lo in range(0, len(part), 2000):
            idx = part[lo:lo + 2000]
            live.comm_feed([msgs[i] for i in idx], [decoded[i] for i in idx], msgs[idx[-1]].ts_ns)
    live.comm_tick(msgs[-1].ts_ns + 1)
    assert live.stats["records"] > 500_000 // 5
    assert live.drops() == {}


def test_a_node_is_heard_from_at_its_heartbeats_time_not_the_jobs_now(settings):
    """A poll read at once moves the job's clock to its newest message before its messages
    are fed: a heartbeat early in it was dated seconds late, so its node seemed that much
    younger than the others (a worker behind on a job reported those lost, and at once not)."""
    stage = CommStage(settings)
    hb = _heartbeat(T0, 1)
    got = stage.feed(hb, decode_message(hb), T0 + 4 * S)  # read when the job's clock is 4 s on
    nodes = [r for r in got if r["type"] == "node"]
    assert [(r["node"], r["ts_ns"]) for r in nodes] == [("n0", T0)]
