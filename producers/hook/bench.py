"""`commwatch bench hook`: the cost the hook adds to one torch.distributed call, on the CPU.

On a one-rank gloo group:

- blocking path (gloo and other host-blocking backends): the wrapper around a call that
  does nothing (the hook's own cost: argument reading, counters, two ring writes), and a
  real gloo all_reduce of a small tensor with and without the hook (its noise included);
- event path (NCCL-like stream backends), on a SCRIPTED device (`ScriptedEvents`, no GPU):
  the training thread's cost of a synchronous call there (entry record, two device events,
  the hand-over to the poller), then the poller thread's time per completion. The scripted
  events cost less than CUDA events (`--cuda` measures those). Calls go in bursts of 1000 and the
  poller's passes run between the bursts, timed apart (live, they run on their own thread
  and take the GIL for that long).

`--cuda` (a GPU with NCCL): the event path for real, on a one-rank NCCL group: the same two
costs with `torch.cuda` events around a call that does nothing, and a real NCCL all_reduce of
a small tensor with and without the hook, its completions left to the live poller thread
(bursts of 1000, the device synchronised after each: host time per call).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from commwatch.settings import Settings

BURST = 1000


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calls", type=int, default=200_000, help="calls per measurement")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--cuda", action="store_true", help="measure the event path on a GPU with NCCL")


def _per_call_us(fn, args, n: int) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn(*args)
        best = min(best, (time.perf_counter_ns() - t0) / n / 1e3)
    return best


def _bursts_us(fn, args, n: int, completions) -> tuple[float, float]:
    """(training thread us per call, poller us per completion) over `n` calls in bursts; the
    poller's passes run between the bursts, on this thread, timed apart."""
    spent = polled = 0
    done = 0
    while done < n:
        k = min(BURST, n - done)
        t0 = time.perf_counter_ns()
        for _ in range(k):
            fn(*args)
        t1 = time.perf_counter_ns()
        while completions.poll():
            pass
        polled += time.perf_counter_ns() - t1
        spent += t1 - t0
        done += k
    return spent / n / 1e3, polled / max(1, completions.completed) / 1e3


def _synced_us(fn, args, n: int, sync) -> float:
    """Host time per call over `n` calls in bursts of BURST, the device synchronised after
    each burst (its wait included: what training would see), best of 3."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter_ns()
        done = 0
        while done < n:
            k = min(BURST, n - done)
            for _ in range(k):
                fn(*args)
            sync()
            done += k
        best = min(best, (time.perf_counter_ns() - t0) / n / 1e3)
    return best


def _cuda(args: argparse.Namespace, settings: Settings) -> dict:
    import datetime

    import torch
    import torch.distributed as dist

    from commwatch.embedded import free_port
    from commwatch.producers.hook.completion import IDLE_S, POLL_S
    from commwatch.producers.hook.events import CudaEvents
    from commwatch.producers.hook.runtime import Hook
    from commwatch.producers.hook.wrap import SPECS, wrap_call

    def noop(tensor, op=None, group=None, async_op=False):
        return None

    if not torch.cuda.is_available() or not dist.is_nccl_available():
        raise SystemExit("commwatch bench hook --cuda: needs a CUDA GPU and torch with NCCL")
    n = min(args.calls, 20_000)
    dev = torch.device("cuda", torch.cuda.current_device())
    with tempfile.TemporaryDirectory() as d:
        s = settings.replace(ring_dir=d, job_id="bench-cuda")
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=60), device_id=dev)
        try:
            t = torch.ones(256, device=dev)
            hook = Hook(s, dist, events=CudaEvents(torch))
            timed = wrap_call(hook, noop, SPECS["all_reduce"])
            timed(t)  # starts the poller; its passes are put off so that the two costs are measured apart
            c = hook.completions
            c.poll_s = c.idle_s = 3600.0
            time.sleep(0.1)
            bare = _per_call_us(noop, (t,), n)
            evented, poller_us = _bursts_us(timed, (t,), n, c)
            completed, dropped = c.completed, c.dropped
            c.poll_s, c.idle_s = POLL_S, IDLE_S  # the live poller again, for the real calls
            real = dist.all_reduce
            hooked = wrap_call(hook, real, SPECS["all_reduce"])
            sync = torch.cuda.synchronize
            nccl_bare = _synced_us(real, (t,), n, sync)
            nccl_hooked = _synced_us(hooked, (t,), n, sync)
            hook.close()
        finally:
            dist.destroy_process_group()
    return {
        "cuda_device": torch.cuda.get_device_name(dev),
        "nccl_version": ".".join(map(str, torch.cuda.nccl.version())),
        "event_path_cuda_added_us_per_call": round(evented - bare, 3),
        "event_path_cuda_poller_us_per_completion": round(poller_us, 3),
        "event_path_cuda_completed": completed,
        "event_path_cuda_dropped": dropped,
        "nccl_all_reduce_us": round(nccl_bare, 2),
        "nccl_all_reduce_hooked_us": round(nccl_hooked, 2),
        "nccl_added_us_per_call": round(nccl_hooked - nccl_bare, 2),
    }


def run(args: argparse.Namespace, settings: Settings) -> int:
    import datetime

    import torch
    import torch.distributed as dist

    from commwatch.embedded import free_port
    from commwatch.producers.hook.events import ScriptedEvents
    from commwatch.producers.hook.runtime import Hook
    from commwatch.producers.hook.wrap import SPECS, wrap_call

    def noop(tensor, op=None, group=None, async_op=False):
        return None

    n = args.calls
    with tempfile.TemporaryDirectory() as d:
        s = settings.replace(ring_dir=d, job_id="bench")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=60))
        try:
            t = torch.ones(16)
            hook = Hook(s, dist, events=None)
            wrapped = wrap_call(hook, noop, SPECS["all_reduce"])
            wrapped(t)  # resolve the group, open the ring
            bare = _per_call_us(noop, (t,), n)
            hooked = _per_call_us(wrapped, (t,), n)
            real = dist.all_reduce
            m = max(1000, n // 20)
            gloo_bare = _per_call_us(real, (t,), m)
            gloo_hooked = _per_call_us(wrap_call(hook, real, SPECS["all_reduce"]), (t,), m)
            hook.close()

            ev = Hook(s.replace(job_id="bench-events"), dist, events=ScriptedEvents(auto=True),
                      stream_backends=frozenset({"gloo"}))
            timed = wrap_call(ev, noop, SPECS["all_reduce"])
            timed(t)  # starts the poller thread; its own passes are put off so that the two costs
            c = ev.completions  # are measured apart
            c.poll_s = c.idle_s = 3600.0
            time.sleep(0.1)
            evented, poller_us = _bursts_us(timed, (t,), n, c)
            completed, dropped = c.completed, c.dropped
            ev.close()
        finally:
            dist.destroy_process_group()
    result = {
        "blocking_added_us_per_call": round(hooked - bare, 3),
        "gloo_all_reduce_us": round(gloo_bare, 2),
        "gloo_all_reduce_hooked_us": round(gloo_hooked, 2),
        "gloo_added_us_per_call": round(gloo_hooked - gloo_bare, 2),
        "event_path_scripted_added_us_per_call": round(evented - bare, 3),
        "event_path_scripted_poller_us_per_completion": round(poller_us, 3),
        "event_path_scripted_completed": completed,
        "event_path_scripted_dropped": dropped,
        "records_per_call": 2,
        "goal_us": 5.0,
    }
    if args.cuda:
        result.update(_cuda(args, settings))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{'measure':46} {'value':>10}")
        for k, v in result.items():
            print(f"{k:46} {v:>10}")
    return 0
