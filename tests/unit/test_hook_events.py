"""The hook's device-stream path, driven through the real wrappers and the real poller.

There is no GPU here. The device is SCRIPTED (`ScriptedEvents`): a one-process gloo group
is declared a stream backend, every tensor is declared on the device, and the test plays
the device: it decides when each recorded event completes and at which device time, on
a device clock that runs at a scripted offset from the host clock. What is under test is
the hook's own logic: flags, anchoring of device times to the host clock, completion
only once the end event has completed, timeouts, the bounded queue.
"""

from __future__ import annotations

import datetime
import time

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from commwatch import ring, wire  # noqa: E402
from commwatch.embedded import free_port  # noqa: E402
from commwatch.producers.hook.events import ScriptedEvents  # noqa: E402
from commwatch.producers.hook.runtime import Hook  # noqa: E402

ENQ, DONE, GPU = wire.FLAG_ENQUEUED, wire.FLAG_COMPLETED, wire.FLAG_GPU_TIMED
LOST, GRAPH = wire.FLAG_COMPLETION_LOST, wire.FLAG_GRAPH_CAPTURED
OFFSET_NS = 37_000_000  # the scripted device clock runs 37 ms ahead of the host clock


@pytest.fixture(scope="module")
def group():
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=30))
    yield dist.group.WORLD
    dist.destroy_process_group()


@pytest.fixture
def device_hook(group, settings, tmp_path):
    """A hook whose gloo group is treated as a stream backend on a scripted device."""
    src = ScriptedEvents(offset_ns=OFFSET_NS, auto=False)
    h = Hook(settings.replace(ring_dir=str(tmp_path), job_id="je"), dist, events=src,
             stream_backends=frozenset({"gloo"}), completion_timeout_s=30.0)
    h.patch()
    h.open()
    reader = ring.RingReader(h.ring.path)
    yield h, src, reader
    h.close()


def calls_until(reader, pred, timeout_s=15.0):
    """Every CALL record read so far, once `pred(records)` holds (or the deadline passes)."""
    got = []
    deadline = time.monotonic() + timeout_s
    while True:
        recs, _ = reader.poll()
        got.extend(r for r in recs if r["kind"] == wire.KIND_CALL)
        if pred(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.01)


def test_sync_call_completes_with_device_times_once_its_end_event_completes(device_hook):
    h, src, reader = device_hook
    t_before = time.time_ns()
    dist.all_reduce(torch.ones(8))  # returns at once: the device has not run it yet
    start, end = src.recorded
    entry = calls_until(reader, lambda g: len(g) >= 1)
    assert len(entry) == 1 and entry[0]["flags"] == ENQ and entry[0]["t_start_ns"] >= t_before
    time.sleep(0.2)  # the poller runs meanwhile and must not complete it
    assert calls_until(reader, lambda g: False, timeout_s=0.0) == []
    # the scripted device starts the collective 2 ms after the enqueue and ends it 3 ms later
    t0 = int(entry[0]["t_start_ns"])
    src.finish(start, t0 + 2_000_000 + OFFSET_NS)
    src.finish(end, t0 + 5_000_000 + OFFSET_NS)
    done = calls_until(reader, lambda g: len(g) >= 1)
    assert len(done) == 1
    r = done[0]
    assert r["flags"] == DONE | GPU and r["seq"] == entry[0]["seq"] and r["bytes"] == 32
    assert abs(int(r["t_start_ns"]) - (t0 + 2_000_000)) <= 1000  # device times on the host clock
    assert abs(int(r["t_end_ns"]) - (t0 + 5_000_000)) <= 1000
    assert h.completions.completed == 1 and h.completions.lost == 0 and h.completions.dropped == 0


def run_call(src, reader, start_after_ns, end_after_ns):
    """One all_reduce that the scripted device runs at the given delays after its enqueue."""
    n = len(src.recorded)
    dist.all_reduce(torch.ones(2))
    start, end = src.recorded[n:n + 2]
    t0 = int(calls_until(reader, lambda g: len(g) >= 1)[0]["t_start_ns"])
    src.finish(start, t0 + start_after_ns + src.offset_ns)
    src.finish(end, t0 + end_after_ns + src.offset_ns)
    return t0, calls_until(reader, lambda g: len(g) >= 1)[0]


def test_call_waiting_on_the_device_gets_one_device_entry_and_a_queued_one_none(device_hook):
    """A call its device started and has not finished for `device_entry_s` is written once more
    as entered there (GPU_TIMED, not COMPLETED, the device's start); the call queued behind it,
    whose start event has not completed, is not."""
    h, src, reader = device_hook
    h.completions.device_entry_s = 0.2
    dist.all_reduce(torch.ones(2))
    dist.all_reduce(torch.ones(2))
    s1, e1, s2, e2 = src.recorded[-4:]
    entries = calls_until(reader, lambda g: len(g) >= 2)
    t0 = int(entries[0]["t_start_ns"])
    src.finish(s1, t0 + 3_000_000 + OFFSET_NS)  # the first reaches the device and waits there
    got = calls_until(reader, lambda g: len(g) >= 1)
    assert len(got) == 1
    r = got[0]
    assert r["flags"] == GPU and r["seq"] == entries[0]["seq"] and r["t_end_ns"] == 0
    assert abs(int(r["t_start_ns"]) - (t0 + 3_000_000)) <= 1000
    time.sleep(0.5)  # more passes: written once, and nothing for the queued call
    assert calls_until(reader, lambda g: False, timeout_s=0.0) == []
    src.finish(e1, t0 + 900_000_000 + OFFSET_NS)
    src.finish(s2, t0 + 901_000_000 + OFFSET_NS)
    src.finish(e2, t0 + 902_000_000 + OFFSET_NS)
    done = calls_until(reader, lambda g: len(g) >= 2)
    assert [int(x["flags"]) for x in done] == [DONE | GPU, DONE | GPU]
    assert h.completions.device_entries == 1


def test_device_times_follow_the_host_clock_through_reanchoring(device_hook):
    h, src, reader = device_hook
    h.completions.anchor_s = 0.05
    run_call(src, reader, 1_000_000, 2_000_000)  # the poller runs, anchored at the old offset
    src.offset_ns = OFFSET_NS + 250_000_000  # the host clock was stepped back by 250 ms (NTP)
    anchors = src.anchors
    deadline = time.monotonic() + 15
    while src.anchors < anchors + 2 and time.monotonic() < deadline:
        time.sleep(0.02)  # the idle poller re-anchors
    assert src.anchors >= anchors + 2
    t0, r = run_call(src, reader, 1_000_000, 4_000_000)
    assert r["flags"] == DONE | GPU
    assert abs(int(r["t_start_ns"]) - (t0 + 1_000_000)) <= 1000
    assert abs(int(r["t_end_ns"]) - (t0 + 4_000_000)) <= 1000


def test_async_op_completes_when_its_work_is_seen_completed(device_hook):
    h, src, reader = device_hook
    work = dist.all_reduce(torch.ones(4), async_op=True)
    work.wait()
    recs = calls_until(reader, lambda g: len(g) >= 2)
    assert [int(r["flags"]) for r in recs] == [ENQ, ENQ | DONE]  # host times, never GPU_TIMED
    assert recs[1]["t_end_ns"] >= recs[1]["t_start_ns"] == recs[0]["t_start_ns"]
    assert src.recorded == []  # an async op is not bracketed by events


def test_captured_call_is_reported_lost_at_once(device_hook):
    h, src, reader = device_hook
    src.capturing = True  # the scripted stream is being captured into a CUDA graph
    dist.all_reduce(torch.ones(4))
    recs = calls_until(reader, lambda g: len(g) >= 2)
    assert [int(r["flags"]) for r in recs] == [ENQ | GRAPH, ENQ | GRAPH | LOST]
    assert recs[1]["t_end_ns"] == 0


def test_unseen_completion_becomes_completion_lost_after_the_timeout(device_hook):
    h, src, reader = device_hook
    h.completions.timeout_s = 0.3
    dist.all_reduce(torch.ones(4))  # the scripted device never runs it
    recs = calls_until(reader, lambda g: len(g) >= 2)
    assert [int(r["flags"]) for r in recs] == [ENQ, ENQ | LOST] and recs[1]["t_end_ns"] == 0
    assert h.completions.lost == 1 and h.completions.completed == 0


def test_full_queue_drops_and_counts_without_blocking(device_hook):
    h, src, reader = device_hook
    h.completions.capacity = 2
    for _ in range(4):
        dist.all_reduce(torch.ones(1))  # none completes: the queue fills
    recs = calls_until(reader, lambda g: len(g) >= 6)
    lost = [r for r in recs if r["flags"] & LOST]
    assert h.completions.dropped == 2 and sorted(int(r["seq"]) for r in lost) == [2, 3]
    for ev in src.recorded[:4]:  # the device now runs the first two calls
        src.finish(ev, src.device_now())
    recs = calls_until(reader, lambda g: len(g) >= 2)
    assert sorted((int(r["seq"]), int(r["flags"])) for r in recs) == [(0, DONE | GPU), (1, DONE | GPU)]


def test_close_gives_up_on_open_calls(device_hook):
    h, src, reader = device_hook
    dist.all_reduce(torch.ones(1))
    calls_until(reader, lambda g: len(g) >= 1)
    h.completions.close()
    recs, _ = reader.poll()
    calls = recs[recs["kind"] == wire.KIND_CALL]
    assert [int(f) for f in calls["flags"]] == [ENQ | LOST]


def test_functional_collective_completes_after_its_wait_on_the_device(device_hook):
    import torch.distributed._functional_collectives as funcol

    h, src, reader = device_hook
    out = funcol.all_reduce(torch.ones(4), "sum", dist.group.WORLD)
    entry = calls_until(reader, lambda g: len(g) >= 1)
    assert [int(r["flags"]) for r in entry] == [ENQ] and len(src.recorded) == 1  # the start event
    out.wait()  # the caller's stream now waits for it: the end event goes after the wait
    assert len(src.recorded) == 2
    t0 = int(entry[0]["t_start_ns"])
    src.finish(src.recorded[0], t0 + 1_000_000 + OFFSET_NS)
    src.finish(src.recorded[1], t0 + 3_000_000 + OFFSET_NS)
    r = calls_until(reader, lambda g: len(g) >= 1)[0]
    assert r["flags"] == DONE | GPU and abs(int(r["t_end_ns"]) - (t0 + 3_000_000)) <= 1000
