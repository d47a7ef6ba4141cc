"""The torch.distributed hook, on a one-process gloo group."""

from __future__ import annotations

import sys
import time
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from commwatch import ring, wire  # noqa: E402
from commwatch.embedded import free_port  # noqa: E402
from commwatch.producers import hook  # noqa: E402
from commwatch.producers.hook.comms import comm_id  # noqa: E402


@pytest.fixture(scope="module")
def group():
    import datetime

    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=30))
    yield dist.group.WORLD
    dist.destroy_process_group()


@pytest.fixture
def installed(group, settings, tmp_path):
    s = settings.replace(ring_dir=str(tmp_path), job_id="jh")
    h = hook.install(s)
    reader = ring.RingReader(ring.ring_path(tmp_path, "jh", 0))
    yield h, reader
    hook.uninstall()


def test_calls_write_entry_and_completion_records(installed):
    h, reader = installed
    t = torch.ones(8)
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    dist.all_gather_into_tensor(torch.zeros(8), t)
    dist.barrier()
    recs, lost = reader.poll()
    wire.validate_records(recs)
    assert lost == 0 and recs["kind"][0] == wire.KIND_COMM_INIT
    calls = recs[1:]
    assert list(calls["op"]) == [1, 1, 4, 4, 2, 2, 9, 9]
    assert list(calls["seq"]) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert list(calls["flags"]) == [0, 1] * 4
    assert list(calls["bytes"][:6]) == [32] * 6 and calls["bytes"][6] == 0
    assert calls["peer"][2] == 0 and calls["peer"][0] == -1  # broadcast root
    done = calls[calls["flags"] == 1]
    assert (done["t_end_ns"] >= done["t_start_ns"]).all() and (calls["t_end_ns"][::2] == 0).all()
    assert set(recs["comm"]) == {comm_id("jh", dist.group.WORLD.group_name, [0])}
    assert h.errors == 0


def test_async_call_completes_through_its_future(installed):
    _, reader = installed
    work = dist.all_reduce(torch.ones(4), async_op=True)
    work.wait()
    recs, _ = reader.poll()
    calls = recs[recs["kind"] == wire.KIND_CALL]
    assert list(calls["flags"]) == [0, 1] and calls["t_end_ns"][1] > 0


def test_default_group_and_explicit_world_share_one_counter(installed):
    _, reader = installed
    dist.all_reduce(torch.ones(1))
    dist.all_reduce(torch.ones(1), group=dist.group.WORLD)
    recs, _ = reader.poll()
    calls = recs[recs["kind"] == wire.KIND_CALL]
    assert list(calls["seq"]) == [0, 0, 1, 1] and len(set(calls["comm"])) == 1


def test_new_groups_get_distinct_ids_and_own_sequence(installed):
    _, reader = installed
    g1 = dist.new_group([0])
    g2 = dist.new_group([0])
    dist.all_reduce(torch.ones(1), group=g1)
    dist.all_reduce(torch.ones(1), group=g2)
    dist.all_reduce(torch.ones(1), group=g2)
    recs, _ = reader.poll()
    inits = recs[recs["kind"] == wire.KIND_COMM_INIT]
    assert len(set(inits["comm"])) == 2
    calls = recs[recs["kind"] == wire.KIND_CALL]
    by_comm = {int(c): sorted(set(int(s) for s in calls["seq"][calls["comm"] == c])) for c in set(calls["comm"])}
    assert sorted(by_comm.values()) == [[0], [0, 1]]


def test_steps_meta_and_uninstall(installed, tmp_path):
    h, _ = installed
    hook.set_coords(tp=0, pp=1, dp=2)
    hook.step()
    with hook.phase("forward"):
        pass
    hook.step()
    hook.step()
    steps = ring.RingReader(ring.ring_path(tmp_path, "jh", 0, "steps"), ring.STEP_MAGIC, ring.STEP_DTYPE)
    recs, _ = steps.poll()
    assert list(recs["iteration"]) == [0, 1] and recs["forward_ms"][0] >= 0
    meta = (tmp_path / "jh" / "0.meta.json").read_text()
    assert '"coords": {"tp": 0, "pp": 1, "dp": 2}' in meta and '"world_size": 1' in meta
    wrapped = dist.all_reduce
    hook.uninstall()
    assert dist.all_reduce is wrapped.__commwatch_wrapped__
    assert not (tmp_path / "jh" / "0.ring").exists()


def test_a_wall_clock_stepped_back_inside_an_iteration_keeps_its_duration(installed, tmp_path, monkeypatch):
    import time

    h, _ = installed
    hook.step()
    real = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real() - 3_000_000_000)  # NTP steps the clock 3 s back
    time.sleep(0.02)
    hook.step()
    steps = ring.RingReader(ring.ring_path(tmp_path, "jh", 0, "steps"), ring.STEP_MAGIC, ring.STEP_DTYPE)
    (rec,) = steps.poll()[0]
    assert 20e6 <= rec["t_end_ns"] - rec["t_start_ns"] < 1e9  # not -3 s: the monotonic clock's duration
    assert abs(rec["t_end_ns"] - (real() - 3_000_000_000)) < 1e9  # ends on the stepped wall clock


def test_phases_leave_out_time_inside_blocking_collectives(installed, tmp_path):
    import time

    from commwatch.producers.hook.wrap import SPECS, wrap_call

    h, _ = installed

    def waits(tensor, op=None, group=None, async_op=False):  # the others arrive 150 ms later
        time.sleep(0.15)

    slow_reduce = wrap_call(h, waits, SPECS["all_reduce"])
    hook.step()
    with hook.phase("forward"):
        time.sleep(0.05)
    with hook.phase("backward"):
        time.sleep(0.05)
        slow_reduce(torch.ones(4))
    hook.step()
    steps = ring.RingReader(ring.ring_path(tmp_path, "jh", 0, "steps"), ring.STEP_MAGIC, ring.STEP_DTYPE)
    (rec,) = steps.poll()[0]
    assert 45 <= rec["forward_ms"] < 100 and 45 <= rec["backward_ms"] < 100  # the 150 ms wait is not compute
    assert rec["t_end_ns"] - rec["t_start_ns"] >= 250e6


def test_megatron_coordinates(installed, monkeypatch, tmp_path):
    ps = types.ModuleType("megatron.core.parallel_state")
    ps.model_parallel_is_initialized = lambda: True
    ps.get_tensor_model_parallel_rank = lambda: 1
    ps.get_pipeline_model_parallel_rank = lambda: 2
    ps.get_data_parallel_rank = lambda: 3
    ps.get_context_parallel_rank = lambda: 0

    def no_ep():
        raise AssertionError("expert parallel group is not initialized")

    ps.get_expert_model_parallel_rank = no_ep
    for name in ("megatron", "megatron.core"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "megatron.core.parallel_state", ps)
    h, _ = installed
    h.use_megatron = True
    hook.step()
    assert h.coords == {"tp": 1, "pp": 2, "dp": 3, "cp": 0}


def test_comm_id_is_order_independent_and_job_scoped():
    assert comm_id("j", "3", [2, 0, 1]) == comm_id("j", "3", [0, 1, 2])
    assert comm_id("j", "3", [0, 1]) != comm_id("j", "4", [0, 1]) != comm_id("k", "3", [0, 1])


def _calls(reader):
    recs, _ = reader.poll()
    return recs[recs["kind"] == wire.KIND_CALL]


def test_ddp_gradient_buckets_are_recorded(installed):
    _, reader = installed
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 32))
    _calls(reader)  # what DDP's construction did
    for _ in range(2):
        model(torch.randn(4, 64)).sum().backward()
    # an async work completes from its future's callback, on the backend's thread: the last
    # completion record may be written just after backward returns
    calls = _calls(reader)
    deadline = time.monotonic() + 10
    while len(calls) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
        calls = np.concatenate([calls, _calls(reader)])
    bucket = (64 * 32 + 32) * 4  # one bucket: every gradient of the layer, float32
    assert list(calls["op"]) == [wire.OP_ALLREDUCE] * 4 and list(calls["bytes"]) == [bucket] * 4
    assert sorted(zip(calls["seq"].tolist(), calls["flags"].tolist())) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert model._comm_hooks  # the default all-reduce, registered at the first forward


def test_ddp_keeps_a_users_own_comm_hook(installed):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    _, reader = installed
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
    model.register_comm_hook(None, default_hooks.fp16_compress_hook)  # after construction, as users do
    model(torch.randn(2, 8)).sum().backward()
    calls = _calls(reader)
    assert [h.__name__ for h, _ in model._comm_hooks] == ["fp16_compress_hook"]
    assert list(calls["bytes"]) == [(8 * 8 + 8) * 2] * 2  # seen through the dist.all_reduce it makes


def test_functional_collectives_complete_when_waited(installed):
    import torch.distributed._functional_collectives as funcol

    _, reader = installed
    out = funcol.all_reduce(torch.ones(16), "sum", dist.group.WORLD)
    entry = _calls(reader)
    assert list(entry["flags"]) == [0] and entry["op"][0] == wire.OP_ALLREDUCE and entry["bytes"][0] == 64
    out = out.wait()
    assert out.sum().item() == 16
    done = _calls(reader)
    assert list(done["flags"]) == [1] and done["seq"][0] == entry["seq"][0]
    parts = funcol.all_gather_tensor(torch.ones(4), 0, dist.group.WORLD)
    parts + 1  # first use waits
    calls = _calls(reader)
    assert list(calls["op"]) == [wire.OP_ALLGATHER] * 2 and list(calls["flags"]) == [0, 1]


def test_coalesced_calls_complete_with_the_managers_work(installed):
    from torch.distributed.distributed_c10d import _coalescing_manager

    _, reader = installed
    a, b = torch.ones(4), torch.ones(8)
    with _coalescing_manager(async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b)
        inside = _calls(reader)
    cm.wait()
    assert list(inside["flags"]) == [0, 0] and list(inside["bytes"]) == [16, 32]
    done = _calls(reader)
    assert sorted(int(s) for s in done["seq"]) == list(inside["seq"]) and set(done["flags"]) == {1}


def test_megatron_aliases_bound_before_install_are_recorded(group, settings, tmp_path, monkeypatch):
    fake = types.ModuleType("megatron.core.tensor_parallel.mappings")
    original = dist.all_gather_into_tensor
    fake.dist_all_gather_func = original  # what Megatron binds at import
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    hook.install(settings.replace(ring_dir=str(tmp_path), job_id="jm"))
    try:
        reader = ring.RingReader(ring.ring_path(tmp_path, "jm", 0))
        assert fake.dist_all_gather_func is dist.all_gather_into_tensor is not original
        fake.dist_all_gather_func(torch.zeros(4), torch.ones(4))
        assert list(_calls(reader)["op"]) == [wire.OP_ALLGATHER] * 2
    finally:
        hook.uninstall()
    assert fake.dist_all_gather_func is original


def test_a_forked_child_runs_without_the_hook(installed):
    import os

    h, _ = installed
    wrapped = dist.all_reduce
    pid = os.fork()
    if pid == 0:  # a data-loader worker: torch restored, the parent's ring let go
        ok = dist.all_reduce is wrapped.__commwatch_wrapped__ and hook.current() is None and h.ring is None
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert dist.all_reduce is wrapped and h.ring is not None  # the parent keeps it
