"""The job simulator: contract semantics of its traffic, realism, faults, truth."""

from __future__ import annotations

import json

import numpy as np
import pytest

from commwatch import messages, topics, wire
from commwatch.capture import read_messages
from commwatch.producers.simulate import FaultError, JobSpec, load_schedule, parse_fault, simulate
from commwatch.producers.simulate.emit import write_capture

S = 1_000_000_000


def run(spec: JobSpec, faults=()):
    sim = simulate(spec, [parse_fault(f) for f in faults])
    msgs = list(sim.messages())
    return sim, msgs


def latest_calls(msgs) -> np.ndarray:
    """All CALL records, keeping the last written one per call (as consumers do)."""
    batches = [wire.decode_batch(m.value, topics.split_comm_key(m.key)[1]) for m in msgs if m.topic == topics.CALLS]
    recs = np.concatenate(batches)
    recs = recs[recs["kind"] == wire.KIND_CALL]
    latest = {}
    for r in recs:
        latest[(int(r["rank"]), int(r["comm"]), int(r["op"]), int(r["peer"]), int(r["seq"]))] = r
    return np.array(list(latest.values()), dtype=wire.RECORD_DTYPE)


@pytest.fixture(scope="module")
def healthy():
    return run(JobSpec(tp=2, pp=4, dp=2, duration_s=3.0, seed=1))


def test_messages_are_ordered_and_valid(healthy):
    sim, msgs = healthy
    ts = [m.ts_ns for m in msgs]
    assert ts == sorted(ts)
    seen = {m.topic for m in msgs}
    assert seen == {topics.CALLS, topics.PROGRESS, topics.TOPOLOGY, topics.STEPS, topics.HW}
    for m in msgs:
        if m.topic == topics.CALLS:
            job, comm = topics.split_comm_key(m.key)
            assert job == "sim" and len(wire.decode_batch(m.value, comm))
        else:
            msg = messages.decode(m.topic, m.value)
            assert messages.dumps(msg) == m.value  # bytes exactly as commwatch.messages.dumps
            assert m.key == ("sim/" + msg["comm"] if m.topic == topics.PROGRESS else "sim")


def test_collective_instances_agree_across_members(healthy):
    sim, msgs = healthy
    recs = latest_calls(msgs)
    coll = recs[~np.isin(recs["op"], wire.P2P_OPS)]
    for comm in sim.layout.comms:
        if comm.kind == "pp":
            continue
        mine = coll[coll["comm"] == comm.id]
        per_rank = {}
        for r in comm.members.tolist():
            rr = mine[mine["rank"] == r]
            rr = rr[np.argsort(rr["seq"])]
            assert rr["seq"].tolist() == list(range(len(rr)))  # counts from 0, no gaps
            per_rank[r] = (rr["seq"].tolist(), rr["op"].tolist())
        assert len({json.dumps(v) for v in per_rank.values()}) == 1  # same instances, same op order
        # completion is near-simultaneous on all members of an instance
        done = mine[(mine["flags"] & wire.FLAG_COMPLETED) > 0]
        for seq in np.unique(done["seq"])[:50]:
            ends = done["t_end_ns"][done["seq"] == seq]
            starts = done["t_start_ns"][done["seq"] == seq]
            assert len(ends) == len(comm.members)
            spread = ends.max() - ends.min()
            assert spread < 0.1 * S  # clocks differ by tens of ms at most
            assert (starts <= ends).all()


def test_send_k_pairs_with_recv_k(healthy):
    sim, msgs = healthy
    recs = latest_calls(msgs)
    pp = [c for c in sim.layout.comms if c.kind == "pp"][0]
    mine = recs[recs["comm"] == pp.id]
    mine = mine[(mine["flags"] & wire.FLAG_COMPLETED) > 0]  # the run's end cuts some pairs in half
    sends = {(int(r["comm_rank"]), int(r["peer"]), int(r["seq"])): r for r in mine if r["op"] == wire.OP_SEND}
    recvs = {(int(r["peer"]), int(r["comm_rank"]), int(r["seq"])): r for r in mine if r["op"] == wire.OP_RECV}
    assert sends and set(sends) == set(recvs)
    for k, s in sends.items():
        r = recvs[k]
        assert abs(int(s["t_end_ns"]) - int(r["t_end_ns"])) < 0.1 * S
        assert int(r["t_end_ns"]) >= int(r["t_start_ns"])
    # 1F1B: stage 0 sends forward to stage 1 and receives gradients back, M per iteration
    fwd = sorted(k[2] for k in sends if k[0] == 0 and k[1] == 1)
    assert fwd == list(range(len(fwd))) and len(fwd) % sim.spec.microbatches == 0
    assert {k[:2] for k in sends} == {(s, s + 1) for s in range(3)} | {(s + 1, s) for s in range(3)}


def test_comm_init_and_topology(healthy):
    sim, msgs = healthy
    inits = np.concatenate([wire.decode_batch(m.value) for m in msgs if m.topic == topics.CALLS])
    inits = inits[inits["kind"] == wire.KIND_COMM_INIT]
    assert len(inits) == sum(len(c.members) for c in sim.layout.comms)
    assert set(inits["aux"].tolist()) == {1, 2}  # 16 ranks on 2 nodes: dp groups span both
    topo = [json.loads(m.value) for m in msgs if m.topic == topics.TOPOLOGY]
    assert sorted(t["rank"] for t in topo) == list(range(16))
    t5 = next(t for t in topo if t["rank"] == 5)
    assert t5["coords"] == {"tp": 1, "pp": 2, "dp": 0, "cp": 0, "ep": 0} and t5["node"] == "node-00"


def test_clock_offsets_between_nodes():
    sim, msgs = run(JobSpec(tp=2, pp=1, dp=8, gpus_per_node=2, duration_s=1.0, clock_skew_ms=20.0))
    # heartbeats at the same true instant (t = 1 s) are stamped with 8 different node clocks
    second = [json.loads(m.value)["ts_ns"] for m in msgs if m.topic == topics.PROGRESS and m.ts_ns > sim.spec.start_ns + S / 2]
    assert len(set(second)) == 8
    assert 0.005 * S < max(second) - min(second) < 0.04 * S


def test_progress_heartbeats_track_seq(healthy):
    sim, msgs = healthy
    tp0 = sim.layout.comm_by_name("tp0")
    beats = [json.loads(m.value) for m in msgs if m.topic == topics.PROGRESS and m.key.endswith(tp0.hex)]
    assert len(beats) == 4  # t = 0, 1, 2, 3 s
    assert [r["started"] for r in beats[0]["ranks"]] == [-1, -1]
    last = beats[-1]["ranks"][0]
    assert last["started"] >= last["completed"] > 100
    pp = [json.loads(m.value) for m in msgs if m.topic == topics.PROGRESS
          and m.key.endswith(sim.layout.comm_by_name("pp0").hex)]
    assert any(r.get("p2p") and r["p2p"][0]["completed"] > 0 for b in pp for r in b["ranks"])


def test_checkpoint_window_has_no_open_calls():
    sim, msgs = run(JobSpec(tp=2, pp=2, dp=2, duration_s=6.0, checkpoint_every_s=2.0, checkpoint_s=2.5))
    assert sim.stats.checkpoints
    a, b = sim.stats.checkpoints[0]
    recs = latest_calls(msgs)
    inside = (recs["t_start_ns"] < sim.spec.start_ns + (b - 0.05) * S) & (
        recs["t_end_ns"] > sim.spec.start_ns + (a + 0.05) * S)
    assert not inside.any()
    assert len(sim.truth_document()["checkpoints"]) == len(sim.stats.checkpoints)
    hb_times = [m.ts_ns for m in msgs if m.topic == topics.PROGRESS]
    assert any(sim.spec.start_ns + a * S < t < sim.spec.start_ns + b * S for t in hb_times)


def test_rank_hang_freezes_job():
    sim, msgs = run(JobSpec(tp=2, pp=2, dp=2, duration_s=6.0), ["hang:rank=3,at=2s"])
    T = sim.spec.start_ns + 2 * S
    allrecs = np.concatenate([wire.decode_batch(m.value) for m in msgs if m.topic == topics.CALLS])
    calls = allrecs[allrecs["kind"] == wire.KIND_CALL]
    culprit = calls[calls["rank"] == 3]
    assert (culprit["t_start_ns"] < T + 0.05 * S).all()  # nothing issued after T (node clock)
    latest = latest_calls(msgs)
    open_ = latest[(latest["flags"] & wire.FLAG_COMPLETED) == 0]
    assert len(open_) and 3 not in open_["rank"].tolist()  # peers wait, the culprit is inside no call
    assert (open_["t_end_ns"] == 0).all()
    last_call = calls["t_start_ns"].max()
    assert last_call < T + 1.5 * S  # the whole job froze
    beats = [m for m in msgs if m.topic == topics.PROGRESS]
    assert max(m.ts_ns for m in beats) > sim.spec.start_ns + 5.5 * S  # heartbeats go on
    steps_after = [m for m in msgs if m.topic == topics.STEPS and json.loads(m.value)["t_end_ns"] > T + S]
    assert not steps_after
    truth = sim.truth()[0]
    assert truth["kind"] == "hang" and truth["ranks"] == [3] and truth["at_ns"] == T and truth["expect_incident"]


def test_comm_hang_every_member_enters():
    sim, msgs = run(JobSpec(tp=2, pp=2, dp=2, duration_s=5.0), ["comm_hang:comm=dp1,at=2s"])
    comm = sim.layout.comm_by_name("dp1")
    latest = latest_calls(msgs)
    mine = latest[latest["comm"] == comm.id]
    open_ = mine[(mine["flags"] & wire.FLAG_COMPLETED) == 0]
    assert sorted(open_["rank"].tolist()) == comm.members.tolist()
    assert len(set(open_["seq"].tolist())) == 1
    assert sim.truth()[0]["comm"] == comm.hex and sim.truth()[0]["kind"] == "comm_hang"


def test_slow_rank_enters_late_and_peers_wait():
    sim, msgs = run(JobSpec(tp=4, pp=1, dp=2, duration_s=4.0, jitter=0.0, gc_blip_rate=0.0),
                    ["slow:rank=1,factor=2,at=0s"])
    recs = latest_calls(msgs)
    tp0 = recs[(recs["comm"] == sim.layout.comm_by_name("tp0").id) & (recs["seq"] > 20)]
    dur = (tp0["t_end_ns"] - tp0["t_start_ns"]).astype(float)
    by_rank = {r: np.median(dur[tp0["rank"] == r]) for r in range(4)}
    assert by_rank[1] < 0.2 * min(by_rank[r] for r in (0, 2, 3))  # culprit arrives last, waits least
    assert sim.truth()[0]["kind"] == "slow_rank" and sim.truth()[0]["expect_incident"]


def test_downclock_shows_in_hardware_samples():
    sim, msgs = run(JobSpec(tp=2, pp=1, dp=2, duration_s=3.0), ["downclock:rank=2,at=1s,mhz=1100"])
    hw = [json.loads(m.value) for m in msgs if m.topic == topics.HW]
    late = [h for h in hw if h["ts_ns"] > sim.spec.start_ns + 1.5 * S]
    assert all(h["sm_clock_mhz"] < 1200 and h["throttle_reasons"] for h in late if h["rank"] == 2)
    assert all(h["sm_clock_mhz"] > 1900 for h in hw if h["rank"] != 2)
    t = sim.truth()[0]
    assert t["kind"] == "slow_rank" and t["hw"] and t["evidence"]["sm_clock_mhz"] == 1100


def test_node_lost_goes_silent():
    sim, msgs = run(JobSpec(tp=2, pp=2, dp=4, duration_s=4.0), ["node_lost:node=node-01,at=2s"])
    T = sim.spec.start_ns + 2 * S
    late = [m for m in msgs if m.ts_ns > T + 0.05 * S]
    nodes = {json.loads(m.value).get("node") for m in late if m.topic in (topics.PROGRESS, topics.HW)}
    assert "node-00" in nodes and "node-01" not in nodes
    t = sim.truth()[0]
    assert t["kind"] == "node_lost" and t["ranks"] == list(range(8, 16))


def test_slow_link_lengthens_transfers_only():
    spec = JobSpec(tp=1, pp=1, dp=4, gpus_per_node=1, duration_s=4.0, jitter=0.0, gc_blip_rate=0.0)
    _, base = run(spec)
    sim, slow = run(spec, ["slow_link:nodes=node-00+node-01,factor=4,at=0s"])
    assert sim.stats.iterations < 4 or len(latest_calls(slow)) < len(latest_calls(base))
    assert sim.truth()[0]["nodes"] == ["node-00", "node-01"] and sim.truth()[0]["ranks"] == []


def test_blip_is_transient_truth():
    sim, msgs = run(JobSpec(tp=2, pp=1, dp=1, duration_s=3.0), ["blip:rank=1,at=1s,ms=400"])
    t = sim.truth()[0]
    assert t["kind"] == "blip" and t["expect_incident"] is False and t["until_ns"] - t["at_ns"] == 400_000_000


def test_deterministic_for_a_seed():
    spec = JobSpec(tp=2, pp=2, dp=1, duration_s=2.0, seed=7)
    assert list(simulate(spec).messages()) == list(simulate(spec).messages())


def test_capture_and_truth_file(tmp_path):
    sim = simulate(JobSpec(tp=2, pp=2, dp=2, duration_s=2.0), [parse_fault("hang:rank=1,at=1s")])
    out = tmp_path / "run.cwcap"
    n = write_capture(sim, out)
    back = list(read_messages(out))
    assert len(back) == n and back == list(sim.messages())


def test_capture_lines_are_the_messages_for_every_feature(tmp_path):
    """The capture path (lines built in bulk) and `messages()` agree, with every fault kind,
    CP/EP comms and a checkpoint; every batch holds one comm's records of one node."""
    spec = JobSpec(tp=2, pp=2, dp=4, cp=2, ep=2, gpus_per_node=4, duration_s=3.0, step_s=0.5,
                   checkpoint_every_s=1.0, checkpoint_s=0.3, seed=3)
    faults = ["node_lost:node=node-03,at=2s", "comm_hang:comm=dp1,at=2.2s", "downclock:rank=5,at=0.5s",
              "slow_link:nodes=node-00+node-01,factor=3,at=1s", "blip:rank=2,at=1s,ms=100"]
    sim = simulate(spec, [parse_fault(f) for f in faults])
    out = tmp_path / "all.cwcap"
    n = write_capture(sim, out)
    counted = (sim.stats.messages, sim.stats.records, dict(sim.stats.by_topic))
    msgs = list(sim.messages())
    assert list(read_messages(out)) == msgs and n == len(msgs) == sum(counted[2].values())
    assert counted == (sim.stats.messages, sim.stats.records, dict(sim.stats.by_topic))
    assert out.read_bytes().count(b"\n") == n
    records = 0
    for m in msgs:
        if m.topic != topics.CALLS:
            continue
        recs = wire.decode_batch(m.value, topics.split_comm_key(m.key)[1])
        records += len(recs)
        assert len(set((recs["rank"] // spec.gpus_per_node).tolist())) == 1
        calls = recs[recs["kind"] == wire.KIND_CALL]
        assert (calls["t_end_ns"] == np.where(calls["flags"] & wire.FLAG_COMPLETED, calls["t_end_ns"], 0)).all()
        assert (calls["t_end_ns"][calls["flags"] & wire.FLAG_COMPLETED == 1] >= calls["t_start_ns"][
            calls["flags"] & wire.FLAG_COMPLETED == 1]).all()
    assert records == sim.stats.records
    lost = S * 2 + spec.start_ns + int(0.05 * S)  # node-03's clock may run ahead a little
    assert not [m for m in msgs if m.ts_ns > lost and '"node-03"'.encode() in m.value[:200]]


def test_base64_encoder_is_the_standard_one():
    """Whichever encoder the capture path uses (pybase64 when installed) writes standard base64."""
    import binascii

    from commwatch.producers.simulate.outbox import b64

    data = np.random.default_rng(0).integers(0, 256, 3 * 1000 + 2, dtype=np.uint8)
    for n in (0, 1, 2, 3, len(data)):
        assert bytes(b64(memoryview(data[:n]))) == binascii.b2a_base64(data[:n].tobytes(), newline=False)


def test_single_rank_job_has_no_communicators():
    sim, msgs = run(JobSpec(tp=1, pp=1, dp=1, duration_s=2.0), ["hang:rank=0,at=1.5s"])
    topics_seen = {m.topic for m in msgs}
    assert topics_seen == {topics.TOPOLOGY, topics.STEPS, topics.HW} and sim.stats.records == 0


def test_fault_specs_and_schedule(tmp_path):
    f = parse_fault("slow_link:nodes=node-00+node-01,factor=3,at=10s")
    assert f.nodes == ("node-00", "node-01") and f.factor == 3.0 and f.at_s == 10.0
    assert parse_fault("blip:rank=3,at=500ms,ms=40").at_s == 0.5
    for bad, word in (("hang:rank=1", "at"), ("nap:rank=1,at=1s", "unknown"), ("slow:rank=1,at=1s", "factor"),
                      ("hang:rank=x,at=1s", "rank"), ("hang:rank=1,at=soon", "at")):
        with pytest.raises(FaultError, match=word):
            parse_fault(bad)
    path = tmp_path / "faults.yaml"
    path.write_text("faults:\n  - hang:rank=17,at=30s\n  - {kind: slow, rank: 5, factor: 1.5, at: 10s}\n")
    assert [f.kind for f in load_schedule(path)] == ["hang", "slow"]
    (tmp_path / "f.json").write_text('[{"kind": "node_lost", "node": "node-03", "at": 40}]')
    assert load_schedule(tmp_path / "f.json")[0].nodes == ("node-03",)
    with pytest.raises(ValueError, match="rank=99"):
        simulate(JobSpec(tp=2, pp=2, dp=2), [parse_fault("hang:rank=99,at=1s")])
    with pytest.raises(ValueError, match="tp9"):
        simulate(JobSpec(tp=2, pp=2, dp=2), [parse_fault("comm_hang:comm=tp9,at=1s")])


def test_a_link_no_traffic_crosses_is_not_an_expected_incident():
    # TP 8 on each node, stages 0/1 on nodes 0/1 and 2/3 of two pipelines; data parallel pairs
    # nodes 0-2 and 1-3: nothing crosses between nodes 1 and 2
    spec = JobSpec(tp=8, pp=2, dp=2, duration_s=2.0)
    quiet = simulate(spec, [parse_fault("slow_link:nodes=node-01+node-02,factor=3,at=1s")]).truth()[0]
    used = simulate(spec, [parse_fault("slow_link:nodes=node-00+node-01,factor=3,at=1s")]).truth()[0]
    assert (quiet["carried"], quiet["expect_incident"]) == (False, False)
    assert (used["carried"], used["expect_incident"]) == (True, True)
