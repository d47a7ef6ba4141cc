"""`commwatch bench hook`: the cost the hook adds to one torch.distributed call, on the CPU.

Two measurements on a one-rank gloo group: the wrapper around a call that does nothing
(the hook's own cost: argument reading, counters, two ring writes), and a real gloo
all_reduce of a small tensor with and without the hook (the noise of a real call
included).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from commwatch.settings import Settings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calls", type=int, default=200_000, help="calls per measurement")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _per_call_us(fn, args, n: int) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn(*args)
        best = min(best, (time.perf_counter_ns() - t0) / n / 1e3)
    return best


def run(args: argparse.Namespace, settings: Settings) -> int:
    import datetime

    import torch
    import torch.distributed as dist

    from commwatch.embedded import free_port
    from commwatch.producers.hook.runtime import Hook
    from commwatch.producers.hook.wrap import SPECS, wrap_call

    with tempfile.TemporaryDirectory() as d:
        s = settings.replace(ring_dir=d, job_id="bench")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=60))
        try:
            hook = Hook(s, dist)
            t = torch.ones(16)

            def noop(tensor, op=None, group=None, async_op=False):
                return None

            wrapped = wrap_call(hook, noop, SPECS["all_reduce"])
            wrapped(t)  # resolve the group, open the ring
            n = args.calls
            bare = _per_call_us(noop, (t,), n)
            hooked = _per_call_us(wrapped, (t,), n)
            real = dist.all_reduce
            m = max(1000, n // 20)
            gloo_bare = _per_call_us(real, (t,), m)
            gloo_hooked = _per_call_us(wrap_call(hook, real, SPECS["all_reduce"]), (t,), m)
            hook.ring.close(unlink=True)
        finally:
            dist.destroy_process_group()
    result = {
        "hook_added_us_per_call": round(hooked - bare, 3),
        "gloo_all_reduce_us": round(gloo_bare, 2),
        "gloo_all_reduce_hooked_us": round(gloo_hooked, 2),
        "gloo_added_us_per_call": round(gloo_hooked - gloo_bare, 2),
        "records_per_call": 2,
        "goal_us": 5.0,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{'measure':32} {'value':>10}")
        for k, v in result.items():
            print(f"{k:32} {v:>10}")
    return 0
