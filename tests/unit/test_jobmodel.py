"""The job model's semantics (not the detector's): rendezvous, streams, probe modes, agents."""

from __future__ import annotations

import json

import numpy as np
import pytest

from commwatch import messages, topics, wire
from commwatch.producers import jobmodel as jm
from commwatch.producers.jobmodel.probe import calls_of

S = 1_000_000_000


def run(**kw) -> jm.JobRun:
    kw.setdefault("duration_s", 12.0)
    return jm.run_job(jm.JobConfig(**kw))


def latest(msgs) -> dict[tuple, np.void]:
    """The last record written per call (as consumers keep it)."""
    out = {}
    for r in jm.records_of(msgs):
        if r["kind"] == wire.KIND_CALL:
            out[(int(r["rank"]), int(r["comm"]), int(r["op"]), int(r["peer"]), int(r["seq"]))] = r
    return out


@pytest.fixture(scope="module")
def healthy() -> jm.JobRun:
    return run(tp=2, pp=2, dp=2, seed=3)  # 8 ranks on one node: one clock


def test_collectives_complete_on_every_member_at_once(healthy):
    lay = healthy.layout
    ends: dict[tuple[int, int], list[int]] = {}
    for (rank, comm, op, _peer, seq), r in latest(healthy.messages).items():
        if op not in wire.P2P_OPS and r["flags"] & wire.FLAG_COMPLETED:
            ends.setdefault((comm, seq), []).append(int(r["t_end_ns"]))
    sizes = {g.id: g.size for g in lay.groups}
    assert len(ends) > 500
    complete = [v for (comm, _seq), v in ends.items() if len(v) == sizes[comm]]
    assert len(complete) > 0.95 * len(ends)  # the run's end cuts a few instances
    assert max(max(v) - min(v) for v in complete) < 50_000  # 50 us: the same instant + jitter


def test_send_k_pairs_with_recv_k(healthy):
    recs = latest(healthy.messages)
    sends = {(c, r_, p, s) for (r_, c, op, p, s), rec in recs.items() if op == wire.OP_SEND
             and rec["flags"] & wire.FLAG_COMPLETED}
    pp = {g.id: g for g in healthy.layout.groups if g.kind == "pp"}
    assert sends
    for comm, rank, peer, seq in sends:
        g = pp[comm]
        me = g.comm_rank(rank)
        recv = recs[(g.members[peer], comm, wire.OP_RECV, me, seq)]
        send = recs[(rank, comm, wire.OP_SEND, peer, seq)]
        assert abs(int(recv["t_end_ns"]) - int(send["t_end_ns"])) < 100_000


def test_gpu_times_are_ordered(healthy):
    recs = jm.records_of(healthy.messages)
    calls = recs[recs["kind"] == wire.KIND_CALL]
    entry = calls[(calls["flags"] & wire.FLAG_COMPLETED) == 0]
    done = calls[(calls["flags"] & wire.FLAG_COMPLETED) != 0]
    assert (entry["flags"] == wire.FLAG_ENQUEUED).all() and (entry["t_end_ns"] == 0).all()
    assert (done["flags"] == wire.FLAG_COMPLETED | wire.FLAG_GPU_TIMED).all()
    assert (done["t_start_ns"] <= done["t_end_ns"]).all()
    enq = {(int(r["rank"]), int(r["comm"]), int(r["op"]), int(r["peer"]), int(r["seq"])): int(r["t_start_ns"])
           for r in entry}
    later = [int(r["t_start_ns"]) >= enq[(int(r["rank"]), int(r["comm"]), int(r["op"]), int(r["peer"]), int(r["seq"]))]
             for r in done]
    assert all(later)  # the device starts a call after the host enqueued it
    # the host runs ahead: many calls wait in the stream long after their enqueue
    ahead = [int(r["t_start_ns"]) - enq[(int(r["rank"]), int(r["comm"]), int(r["op"]), int(r["peer"]), int(r["seq"]))]
             for r in done]
    assert np.percentile(ahead, 90) > 50_000_000


def test_seq_counts_from_zero_and_members_agree(healthy):
    by: dict[tuple[int, int], list[int]] = {}
    for (rank, comm, op, _peer, seq) in latest(healthy.messages):
        if op not in wire.P2P_OPS:
            by.setdefault((comm, rank), []).append(seq)
    for seqs in by.values():
        assert sorted(seqs) == list(range(len(seqs)))
    for g in healthy.layout.groups:
        if g.kind != "pp":  # every member issues the same instances (the run's end may cut one)
            counts = [len(by[(g.id, r)]) for r in g.members]
            assert max(counts) - min(counts) <= 2


def test_ids_keys_and_messages_follow_the_contract(healthy):
    job = healthy.config.job
    topics_seen = set()
    for m in healthy.messages:
        topics_seen.add(m.topic)
        if m.topic == topics.CALLS:
            key_job, comm = topics.split_comm_key(m.key)
            recs = wire.decode_batch(m.value, comm)  # every record has the key's comm
            assert key_job == job and len(recs)
        else:
            msg = messages.decode(m.topic, m.value)
            assert m.key == (f"{job}/{msg['comm']}" if m.topic == topics.PROGRESS else job)
    assert topics_seen == {topics.CALLS, topics.PROGRESS, topics.TOPOLOGY, topics.STEPS}
    inits = jm.records_of(healthy.messages)
    inits = inits[inits["kind"] == wire.KIND_COMM_INIT]
    assert len(inits) == sum(g.size for g in healthy.layout.groups)
    for g in healthy.layout.groups:
        mine = inits[inits["comm"] == np.uint64(g.id)]
        assert sorted(mine["rank"].tolist()) == list(g.members) and set(mine["nranks"].tolist()) == {g.size}
    other = jm.Layout("other", 2, 2, 2)
    assert not {g.id for g in other.groups} & {g.id for g in healthy.layout.groups}
    topo = [json.loads(m.value) for m in healthy.messages if m.topic == topics.TOPOLOGY]
    assert sorted(t["rank"] for t in topo) == list(range(8))
    assert next(t for t in topo if t["rank"] == 5)["coords"] == {"tp": 1, "pp": 0, "dp": 1, "cp": 0, "ep": 0}


def test_deterministic_for_a_seed():
    a = run(tp=1, pp=2, dp=2, seed=5, duration_s=6.0)
    b = run(tp=1, pp=2, dp=2, seed=5, duration_s=6.0)
    c = run(tp=1, pp=2, dp=2, seed=6, duration_s=6.0)
    assert a.messages == b.messages and a.truth == b.truth
    assert a.messages != c.messages


def test_enqueue_mode_several_calls_entered_only_the_oldest_blocked():
    r = run(tp=2, pp=2, dp=2, probe="enqueue", seed=1, duration_s=20.0, faults=(jm.HostHang(rank=3, at_s=8.0),))
    recs = latest(r.messages)
    flags = {wire.FLAG_ENQUEUED, wire.FLAG_ENQUEUED | wire.FLAG_COMPLETED}
    assert {int(x["flags"]) for x in recs.values()} == flags
    peer = 2  # rank 3's TP peer
    open_calls = [k for k, x in recs.items() if k[0] == peer and not x["flags"] & wire.FLAG_COMPLETED]
    assert len(open_calls) >= 3 and len({k[1] for k in open_calls}) >= 2  # on several communicators
    calls = calls_of(r.engine, r.layout, peer, ())
    outstanding = ~np.isfinite(calls.e)
    reached = outstanding & np.isfinite(calls.s)
    assert outstanding.sum() >= 3
    assert len(np.unique(calls.h[reached])) == 1  # the GPU sits in one op; the rest wait behind it
    assert calls.h[reached][0] == calls.h[outstanding].min()  # the oldest
    # completion was seen by a poller: t_end on its period grid, never before the device end
    clock = r.clocks[0]
    done = [(k, x) for k, x in recs.items() if k[0] == peer and x["flags"] & wire.FLAG_COMPLETED]
    ends = np.array([int(x["t_end_ns"]) for _k, x in done])
    starts = np.array([int(x["t_start_ns"]) for _k, x in done])
    assert len(done) > 100 and (ends > starts).all()
    grid = (ends - ends.min()) / (r.config.poll_s * S)
    assert np.allclose(grid, np.round(grid), atol=1e-3)
    device_end = clock.ns_array(calls.e[np.isfinite(calls.e)])
    assert ends.min() >= device_end.min() and np.sort(ends)[-1] >= np.sort(device_end)[-1]


def test_hung_rank_enqueues_nothing_after_onset():
    # the host enqueues an iteration in a burst, then waits in loss.item(): hang it mid-burst
    healthy = run(tp=2, pp=2, dp=2, seed=2, duration_s=20.0).engine.ranks[5]
    at = (healthy.enq[9 * healthy.L + 10] + healthy.enq[9 * healthy.L + 11]) / 2
    r = run(tp=2, pp=2, dp=2, seed=2, duration_s=20.0, faults=(jm.HostHang(rank=5, at_s=at),))
    assert r.engine.ranks[5].enq == healthy.enq[: 9 * healthy.L + 11]  # the same run up to the hang
    clock = r.clocks[0]
    recs = jm.records_of(r.messages)
    entries = recs[(recs["rank"] == 5) & (recs["kind"] == wire.KIND_CALL) & ((recs["flags"] & wire.FLAG_COMPLETED) == 0)]
    assert len(entries) and entries["t_start_ns"].max() < clock.ns(at)
    peers = recs[(recs["rank"] == 4) & ((recs["flags"] & wire.FLAG_COMPLETED) == 0)]
    assert peers["t_start_ns"].max() > clock.ns(at)  # its TP peer went on enqueueing
    (t,) = r.truth
    assert t["kind"] == "hang" and t["ranks"] == [5] and t["expect_incident"]
    assert clock.ns(at) - 0.1 * S <= t["onset_ns"] <= clock.ns(at + 1.5)
    # heartbeats: the hung rank's counters freeze; the job freezes within a few seconds
    late = [json.loads(m.value) for m in r.messages if m.topic == topics.PROGRESS and m.ts_ns > clock.ns(at + 4)]
    for rank in range(8):
        vals = {(e["started"], e["completed"]) for hb in late for e in hb["ranks"] if e["rank"] == rank
                and hb["comm"] == r.layout.group(rank, "tp").hex}
        assert len(vals) == 1


def test_heartbeats_agree_with_the_records():
    r = run(tp=2, pp=1, dp=4, gpus_per_node=4, seed=4, duration_s=10.0, faults=(jm.HostHang(rank=6, at_s=6.0),))
    sent = [(s.t, s.msg) for s in r.sent]
    checked = 0
    for t, m in sent:
        if m.topic != topics.PROGRESS:
            continue
        hb = json.loads(m.value)
        comm = int(hb["comm"], 16)
        for e in hb["ranks"]:
            def max_seq(until: float, done_only: bool) -> int:
                best = -1
                for t2, m2 in sent:
                    if t2 > until or m2.topic != topics.CALLS or topics.split_comm_key(m2.key)[1] != comm:
                        continue
                    recs = wire.decode_batch(m2.value)
                    recs = recs[(recs["rank"] == e["rank"]) & (recs["kind"] == wire.KIND_CALL)]
                    if done_only:
                        recs = recs[(recs["flags"] & wire.FLAG_COMPLETED) != 0]
                    if len(recs):
                        best = max(best, int(recs["seq"].max()))
                return best
            assert max_seq(t, False) <= e["started"] <= max_seq(t + r.config.flush_s + 1e-6, False)
            assert max_seq(t, True) <= e["completed"] <= max_seq(t + r.config.flush_s + 1e-6, True)
            checked += 1
        if checked > 60:
            break
    assert checked > 60


def test_crash_marks_the_rank_exited_three_times_then_drops_it():
    at = 6.0
    r = run(tp=1, pp=2, dp=4, gpus_per_node=4, seed=8, duration_s=14.0, faults=(jm.Crash(rank=5, at_s=at),))
    node = r.layout.node_of(5)
    recs = jm.records_of(r.messages)
    mine = recs[recs["rank"] == 5]
    assert mine["t_start_ns"].max() < r.clocks[node].ns(at) and mine["t_end_ns"].max() < r.clocks[node].ns(at)
    per_comm: dict[str, list[bool]] = {}
    for m in r.messages:
        if m.topic == topics.PROGRESS:
            hb = json.loads(m.value)
            for e in hb["ranks"]:
                if e["rank"] == 5:
                    per_comm.setdefault(hb["comm"], []).append(bool(e.get("exited")))
    assert len(per_comm) == len(r.layout.groups_of(5))
    for flags in per_comm.values():
        assert flags[-3:] == [True, True, True] and sum(flags) == 3  # then no more reports of it
    assert r.truth[0]["kind"] == "hang" and r.truth[0]["ranks"] == [5] and r.truth[0]["exited"]


def test_stuck_completion_lags_collectives_its_peers_completed():
    r = run(tp=2, pp=1, dp=2, seed=9, duration_s=14.0, faults=(jm.StuckCompletion(rank=1, at_s=6.0, host_after_s=1.0),))
    tp = r.layout.group(1, "tp").hex
    last = {}
    for m in r.messages:
        if m.topic == topics.PROGRESS:
            hb = json.loads(m.value)
            if hb["comm"] == tp:
                for e in hb["ranks"]:
                    last[e["rank"]] = (e["started"], e["completed"])
    (_s0, c0), (s1, c1) = last[0], last[1]
    assert c0 - c1 >= 5  # its peer completed collectives it still reports as not done
    assert s1 > c1 and s1 <= c0 + 1  # it had entered them: its GPU ran them
    assert r.truth[0]["ranks"] == [1] and r.truth[0]["stuck_completion"]


def test_comm_hang_every_member_entered_none_completed():
    r = run(tp=2, pp=1, dp=4, gpus_per_node=4, seed=10, duration_s=14.0, faults=(jm.CommHang("dp.p0.t1", at_s=6.0),))
    g = r.layout.by_name["dp.p0.t1"]
    recs = latest(r.messages)
    seqs = {}
    for rank in g.members:
        mine = [(k[4], x) for k, x in recs.items() if k[0] == rank and k[1] == g.id]
        done = max(s for s, x in mine if x["flags"] & wire.FLAG_COMPLETED)
        seqs[rank] = (done, max(s for s, _ in mine))
    assert len({d for d, _ in seqs.values()}) == 1  # none completed the hung instance
    assert all(s > d for d, s in seqs.values())  # every member entered it
    (t,) = r.truth
    assert t["kind"] == "comm_hang" and t["comm"] == g.hex and t["ranks"] == list(g.members)


def test_blocking_probe_times_are_real_host_times():
    r = run(tp=1, pp=1, dp=4, probe="blocking", seed=11, duration_s=8.0)
    recs = jm.records_of(r.messages)
    calls = recs[recs["kind"] == wire.KIND_CALL]
    assert set(calls["flags"].tolist()) == {0, wire.FLAG_COMPLETED}
    for rank in range(4):
        c = calls_of(r.engine, r.layout, rank, ())
        ok = np.isfinite(c.s)
        assert np.allclose(c.h[ok], c.s[ok])  # the host waited for its GPU, then blocked in the call


def test_heartbeats_only_publishes_no_calls():
    r = run(tp=2, pp=2, dp=2, probe="heartbeats_only", seed=12, duration_s=6.0)
    assert not [m for m in r.messages if m.topic == topics.CALLS]
    hbs = [json.loads(m.value) for m in r.messages if m.topic == topics.PROGRESS]
    assert max(e["completed"] for hb in hbs for e in hb["ranks"]) > 10


def test_iteration_timings_leave_at_the_agents_next_flush(healthy):
    """As the node agent does: a step is read with the call rings, at the first flush after
    it ended (one node, one clock: its send time and its end compare directly)."""
    late = [(m.ts_ns - json.loads(m.value)["t_end_ns"]) / 1e9 for m in healthy.messages if m.topic == topics.STEPS]
    assert len(late) >= 8 and min(late) > 0 and max(late) <= healthy.config.flush_s + 1e-3


def test_hidden_gradient_reduce_leaves_only_the_loss_all_reduce():
    r = run(tp=1, pp=1, dp=4, probe="blocking", hidden=("grad",), work=jm.Workload(loss_allreduce=True), seed=13,
            duration_s=8.0)
    recs = latest(r.messages)
    per_rank = [sum(1 for k in recs if k[0] == rank) for rank in range(4)]
    assert all(abs(n - r.iterations) <= 1 for n in per_rank)  # one visible call per iteration
    assert {k[3] for k in recs} == {-1}


def test_slow_rank_shows_in_phases_and_long_waits_for_its_peers():
    r = run(tp=1, pp=1, dp=4, seed=14, duration_s=120.0, work=jm.Workload(step_s=10.0),
            faults=(jm.SlowGpu(rank=2, factor=2.4),))
    steps = [json.loads(m.value) for m in r.messages if m.topic == topics.STEPS]
    fwd = {rank: np.median([s["phases"]["forward_ms"] for s in steps if s["rank"] == rank]) for rank in range(4)}
    assert 2.2 < fwd[2] / fwd[0] < 2.6 and abs(fwd[1] / fwd[0] - 1) < 0.05
    assert 18.0 < r.step_s < 24.0 and r.iterations >= 4  # the job progresses at the slow rank's pace
    c = calls_of(r.engine, r.layout, 0, ())
    waits = (c.e - c.s)[np.isfinite(c.e)]
    assert waits.max() > 10.0  # a healthy rank waits > 10 s per iteration in its gradient reduce


def test_checkpoint_is_idle_inside_no_call():
    r = run(tp=2, pp=2, dp=2, seed=15, duration_s=40.0, checkpoint_every=5, checkpoint_s=(10.0, 12.0))
    marks = r.engine.ranks[0].marks
    gaps = np.diff(marks)
    k = int(np.argmax(gaps))
    assert gaps[k] > 9.0
    mid = marks[k] + gaps[k] / 2
    for rank in range(8):
        c = calls_of(r.engine, r.layout, rank, ())
        inside = (c.h < mid) & ~(c.e < mid)
        assert not inside.any()


def test_job_clock_offset_and_node_offsets():
    r = run(tp=2, pp=1, dp=8, gpus_per_node=4, seed=16, duration_s=4.0, job_clock_offset_s=60.0)
    offsets = [c.offset_s - 60.0 for c in r.clocks]
    assert all(0.020 <= abs(o) <= 0.050 for o in offsets)
    first = min(m.ts_ns for m in r.messages)
    assert first > r.config.start_ns + 59.9 * S


def test_unbalanced_stage_truth_and_three_jobs_merge():
    a = run(job="a", tp=1, pp=2, dp=2, seed=17, duration_s=6.0, stage_factors=(1.0, 1.3))
    (t,) = a.truth
    assert t["kind"] == "unbalanced" and not t["expect_incident"] and t["ranks"] == [1, 3]
    b = run(job="b", tp=1, pp=2, dp=2, seed=18, duration_s=6.0, job_clock_offset_s=60.0)
    msgs = jm.merge([a, b])
    assert len(msgs) == len(a.messages) + len(b.messages)
    jobs = [m.key.split("/")[0] for m in msgs[: len(msgs) // 2]]
    assert set(jobs) == {"a", "b"}  # interleaved in arrival order despite b's clock


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="probe"):
        jm.JobConfig(probe="nope")
    with pytest.raises(ValueError, match="hidden"):
        jm.JobConfig(hidden=("grads",))
    with pytest.raises(ValueError, match="group"):
        jm.run_job(jm.JobConfig(faults=(jm.CommHang("dp.p9.t0", 1.0),)))


def test_a_job_that_finishes_leaves_no_call_open_and_says_its_ranks_exited():
    r = run(tp=2, pp=2, dp=2, seed=19, duration_s=16.0, faults=(jm.JobExit(8.0, clean=True),))
    recs = latest(r.messages)
    assert recs and all(x["flags"] & wire.FLAG_COMPLETED for x in recs.values())
    (t,) = r.truth
    assert t["kind"] == "job_end" and not t["expect_incident"] and t["onset_ns"] > t["at_ns"]
    hbs = [json.loads(m.value) for m in r.messages if m.topic == topics.PROGRESS]
    exited = [e["rank"] for hb in hbs for e in hb["ranks"] if e.get("exited")]
    assert sorted(set(exited)) == list(range(8))
    assert max(m.ts_ns for m in r.messages) < t["onset_ns"] + 4 * S  # then the agents fall silent
    killed = run(tp=2, pp=2, dp=2, seed=19, duration_s=16.0, faults=(jm.JobExit(8.0),))
    assert not all(x["flags"] & wire.FLAG_COMPLETED for x in latest(killed.messages).values())


def test_slow_link_is_expected_only_where_traffic_crosses_it():
    # a stage per node (2 GPUs a node): nodes 1 and 2 hold stages of different replicas, and
    # data parallel pairs nodes 0-2 and 1-3: nothing crosses between nodes 1 and 2
    def truth(a, b):
        cfg = jm.JobConfig(job="l", tp=2, pp=2, dp=2, gpus_per_node=2, probe="gpu", duration_s=20.0,
                           faults=(jm.SlowLink(a, b, 3.0, at_s=5.0),))
        return jm.run_job(cfg).truth[0]

    used, quiet = truth(0, 1), truth(1, 2)
    assert (used["carried"], used["expect_incident"]) == (True, True)
    assert (quiet["carried"], quiet["expect_incident"]) == (False, False)
    with pytest.raises(ValueError, match="two different nodes"):
        jm.run_job(jm.JobConfig(job="l", tp=2, pp=2, dp=2, faults=(jm.SlowLink(0, 0, 3.0),)))
