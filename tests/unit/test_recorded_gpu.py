"""Probe output RECORDED on a real GPU (H100, NCCL 2.28.9, torch 2.11; how: nccl-patch/gpu/record.sh,
what: nccl-patch/test/recorded/README.md), checked for the wire contract's completion semantics and
replayed through the node agent model and the detector.

Two ranks ran on one GPU as two NCCL hosts (a distinct NCCL_HOSTID each, socket transport), so
their collectives ran real NCCL kernels with real waits: in `hang-*` rank 1 stopped for 8 s
before an iteration while rank 0 kept enqueueing; in `slow-*` rank 1 spent 40 ms more per step on
the host; in `gpuhang-*` rank 1's GPU spun 8 s in a kernel while its host went on. `*-nccl` rings
were written by the profiler plugin, `*-hook` rings by the PyTorch hook.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from commwatch import wire
from commwatch.producers.jobmodel import recorded
from commwatch.settings import Settings
from commwatch.streams.detect import Detector

DIR = Path(__file__).resolve().parents[2] / "nccl-patch" / "test" / "recorded"
S = 1_000_000_000
ENTRY = wire.FLAG_ENQUEUED
GPU_DONE = wire.FLAG_COMPLETED | wire.FLAG_GPU_TIMED


def calls(name: str, rank: int) -> np.ndarray:
    r = recorded.load(DIR, name).calls[rank]
    return r[r["kind"] == wire.KIND_CALL]


def pairs(recs: np.ndarray) -> dict[tuple, list[np.void]]:
    out: dict[tuple, list] = {}
    for r in recs:
        out.setdefault((int(r["comm"]), int(r["op"]) if r["op"] in wire.P2P_OPS else -1, int(r["peer"]) if
                        r["op"] in wire.P2P_OPS else -1, int(r["seq"])), []).append(r)
    return out


@pytest.mark.parametrize("rank", [0, 1])
def test_plugin_on_real_nccl_enters_at_enqueue_and_completes_from_the_gpu(rank):
    recs = calls("sem-ws2", rank)
    log = recorded.load(DIR, "sem-ws2").logs[rank]
    by_call = pairs(recs)
    assert len(by_call) == 37  # 34 collectives on 3 comms, 3 sends and receives
    for key, rs in by_call.items():
        flags = sorted(int(r["flags"]) & ~wire.FLAG_GRAPH_CAPTURED for r in rs)
        assert flags == [GPU_DONE, ENTRY], key  # one entry at enqueue, one GPU-timed completion
        entry = next(r for r in rs if not r["flags"] & wire.FLAG_COMPLETED)
        done = next(r for r in rs if r["flags"] & wire.FLAG_COMPLETED)
        assert entry["t_end_ns"] == 0 and done["t_start_ns"] <= done["t_end_ns"]
        assert done["t_end_ns"] >= entry["t_start_ns"], key  # completion after enqueue
        assert (entry["flags"] & wire.FLAG_GRAPH_CAPTURED) == (done["flags"] & wire.FLAG_GRAPH_CAPTURED)
    # the CUDA graph: captured once, replayed three times, each replay an operation of its own
    graph = recs[(recs["flags"] & wire.FLAG_GRAPH_CAPTURED) != 0]
    assert len(graph) == 6 and len(np.unique(graph["seq"])) == 3
    # 256 MiB: the host call returned at once; the GPU finished >100 ms later, and so did the record
    big = recs[recs["bytes"] == 256 << 20]
    enq0, enq1 = log["big_enqueued"]
    assert enq1 - enq0 < 5_000_000
    done = big[(big["flags"] & wire.FLAG_COMPLETED) != 0][0]
    assert done["t_end_ns"] - enq1 > 100_000_000
    assert abs(int(done["t_end_ns"]) - log["big_done"]) < 20_000_000  # GPU clock mapped to the host's


def test_plugin_sees_nothing_of_one_rank_comms_under_nccl_2_28():
    """World size 1: NCCL runs a one-rank comm's collectives without any profiler task event."""
    r = recorded.load(DIR, "sem-ws1").calls[0]
    assert set(r["kind"].tolist()) == {wire.KIND_COMM_INIT, wire.KIND_COMM_DESTROY}
    assert (r["kind"] == wire.KIND_COMM_INIT).sum() == 3


def test_hook_on_real_nccl_times_sync_calls_on_the_gpu_and_async_works_on_the_host():
    recs = calls("sem-hook", 0)
    by_call = pairs(recs)
    kinds = {}
    for key, rs in by_call.items():
        flags = tuple(sorted(int(r["flags"]) for r in rs))
        kinds[flags] = kinds.get(flags, 0) + 1
        done = [r for r in rs if r["flags"] & wire.FLAG_COMPLETED]
        entry = [r for r in rs if not r["flags"] & (wire.FLAG_COMPLETED | wire.FLAG_COMPLETION_LOST)]
        assert len(entry) == 1 and entry[0]["flags"] & wire.FLAG_ENQUEUED, key
        for d in done:
            assert d["t_end_ns"] >= entry[0]["t_start_ns"] and d["t_end_ns"] >= d["t_start_ns"], key
    lost = wire.FLAG_ENQUEUED | wire.FLAG_COMPLETION_LOST | wire.FLAG_GRAPH_CAPTURED
    assert kinds == {
        (GPU_DONE, ENTRY): 29,  # synchronous calls: device events around them
        (ENTRY, ENTRY | wire.FLAG_COMPLETED): 5,  # async works (3 all_reduce, batched send+recv): host-seen
        (ENTRY | wire.FLAG_GRAPH_CAPTURED, lost): 1,  # the capture: given up (replays never reach Python)
    }
    big = recs[(recs["bytes"] == 256 << 20) & ((recs["flags"] & wire.FLAG_GPU_TIMED) != 0)][0]
    log = recorded.load(DIR, "sem-hook").logs[0]
    assert big["t_end_ns"] - log["big_enqueued"][1] > 100_000_000


def test_hook_sees_every_ddp_gradient_bucket_on_nccl_that_the_plugin_sees():
    """DDP on NCCL (2 ranks, buckets of 4 MiB, 30 steps): the hook's comm hook sees every gradient
    all_reduce NCCL ran, entered at enqueue and completed from its work after it; only DDP's
    start-up broadcasts and the all_gather of its set-up reach NCCL without Python."""
    for rank in (0, 1):
        hook, plugin = calls("ddp-hook", rank), calls("ddp-nccl", rank)
        ar = lambda r: r[r["op"] == wire.OP_ALLREDUCE]  # noqa: E731
        entries = lambda r: r[(r["flags"] & (wire.FLAG_COMPLETED | wire.FLAG_COMPLETION_LOST)) == 0]  # noqa: E731
        assert sorted(entries(ar(hook))["bytes"].tolist()) == sorted(entries(ar(plugin))["bytes"].tolist())
        assert len(entries(ar(hook))) == 59  # the first step's one bucket, then two per step (rebuilt)
        done = ar(hook)[(ar(hook)["flags"] & wire.FLAG_COMPLETED) != 0]
        assert len(done) == 59 and (done["flags"] == wire.FLAG_ENQUEUED | wire.FLAG_COMPLETED).all()
        assert (done["t_end_ns"] >= done["t_start_ns"]).all()
        assert set(plugin["op"].tolist()) - set(hook["op"].tolist()) == {wire.OP_BROADCAST, wire.OP_ALLGATHER}


def test_hook_sees_every_fsdp2_collective_on_nccl_that_the_plugin_sees():
    """FSDP2 (`fully_shard`) on NCCL, 10 steps: the same 40 all_gather and 20 reduce_scatter per rank
    through the hook as through the plugin, each GPU-timed."""
    for rank in (0, 1):
        hook, plugin = calls("fsdp-hook", rank), calls("fsdp-nccl", rank)
        for recs in (hook, plugin):
            entries = recs[(recs["flags"] & (wire.FLAG_COMPLETED | wire.FLAG_COMPLETION_LOST)) == 0]
            assert (entries["op"] == wire.OP_ALLGATHER).sum() == 40
            assert (entries["op"] == wire.OP_REDUCESCATTER).sum() == 20
            assert ((recs["flags"] & wire.FLAG_COMPLETED) != 0).sum() == 60
            assert (recs["flags"][(recs["flags"] & wire.FLAG_COMPLETED) != 0] == GPU_DONE).all()
        assert sorted(hook["bytes"].tolist()) == sorted(plugin["bytes"].tolist())


def run_detector(name: str) -> tuple[recorded.Recording, list[dict]]:
    rec = recorded.load(DIR, name)
    det = Detector(Settings.load())
    events = []
    for m in recorded.publish(rec):
        events += det.feed(m)
        events += det.tick(m.ts_ns)
    return rec, events


@pytest.mark.parametrize("name", ["hang-nccl", "hang-hook"])
def test_recorded_hang_names_the_rank_that_stopped_once(name):
    rec, events = run_detector(name)
    fault = rec.fault()
    opened = [e for e in events if e["status"] == "open"]
    assert [(e["kind"], e["severity"], e["culprit_ranks"]) for e in opened] == [("hang", "P0", [1])]
    assert fault["start_ns"] + 5 * S <= opened[0]["opened_ns"] < fault["end_ns"]
    assert [e["status"] for e in events] == ["open", "resolved"]  # resolved once the job moved on


@pytest.mark.parametrize("name", ["gpuhang-nccl", "gpuhang-hook"])
def test_recorded_gpu_stuck_in_compute_names_the_rank_whose_gpu_never_started_the_call(name):
    """Rank 1's GPU spun 8 s in a kernel while its host went on enqueueing. Both hosts entered the
    blocked all_reduce and neither completes; rank 0's GPU is inside it (its probe writes a device
    entry after 1 s there), rank 1's never started it. One P0 hang names rank 1, as a GPU that never
    started the call, and no comm_hang opens. The device entry is derived from the recorded
    completion (`recorded.py`); the harness checks the plugin writes it from the NCCL trace."""
    rec, events = run_detector(name)
    opened = [e for e in events if e["status"] == "open"]
    assert [(e["kind"], e["severity"], e["culprit_ranks"]) for e in opened] == [("hang", "P0", [1])]
    assert opened[0]["evidence"]["roots"][0]["reason"] == "not_started"
    assert "GPU never started" in opened[0]["summary"]
    assert rec.fault()["start_ns"] + 5 * S <= opened[0]["opened_ns"] < rec.fault()["start_ns"] + 8 * S  # spun 8 s
    assert [e["status"] for e in events if e["incident"] == opened[0]["incident"]][-1] == "resolved"
    for rank, n in ((0, 1), (1, 0)):  # the waiter has the device entry, the stuck GPU none
        assert len(recorded.device_entries(calls(name, rank))[0]) == n
    first = {}
    for rank in (0, 1):
        c = calls(name, rank)
        done = c[((c["flags"] & wire.FLAG_GPU_TIMED) != 0) & (c["t_end_ns"] - c["t_start_ns"] > 5 * S)]
        first[rank] = done  # the blocked all_reduce: on rank 0 its GPU waited inside it for 8 s
    assert len(first[0]) == 1 and len(first[1]) == 0
    seq = first[0]["seq"][0]
    c1 = calls(name, 1)
    late = c1[(c1["seq"] == seq) & ((c1["flags"] & wire.FLAG_GPU_TIMED) != 0)][0]
    assert late["t_start_ns"] - first[0]["t_start_ns"][0] > 7 * S  # rank 1's GPU reached it 8 s later


def test_without_device_entries_a_gpu_stuck_in_compute_names_no_victim(monkeypatch):
    """The same recording from probes that write no device entry (older ones): nothing tells the
    waiter from the stuck GPU, so one P0 comm_hang names no rank; never rank 0."""
    monkeypatch.setattr(recorded, "DEVICE_ENTRY_S", 1e9)
    _, events = run_detector("gpuhang-nccl")
    opened = [e for e in events if e["status"] == "open"]
    assert [(e["kind"], e["severity"], e["culprit_ranks"]) for e in opened] == [("comm_hang", "P0", [])]


@pytest.mark.parametrize("name", ["slow-nccl", "slow-hook"])
def test_recorded_host_straggler_is_the_only_rank_named(name):
    rec, events = run_detector(name)
    assert events and all(e["kind"] == "slow_rank" and e["culprit_ranks"] == [1] for e in events)
    assert all(e["severity"] in ("P2", "P3") for e in events)  # ~30 % slower: not a page
    assert min(e["opened_ns"] for e in events) > rec.fault()["start_ns"]


@pytest.mark.parametrize("name", ["sem-ws1", "sem-ws2", "sem-hook", "ddp-hook", "ddp-nccl", "fsdp-hook", "fsdp-nccl"])
def test_recorded_healthy_runs_raise_nothing(name):
    _, events = run_detector(name)
    assert events == []
