"""A tiny 4-rank data-parallel training job on gloo with the commwatch hook installed.

Run by the end-to-end tests, one process per rank:
`python torch_job.py RANK WORLD PORT --steps N [--slow-rank R --slow-s S] [--hang-rank R --hang-at I]
[--scripted-device]`. The ring directory and job id come from COMMWATCH_RING_DIR / COMMWATCH_JOB_ID.

`--scripted-device` drives the hook's device-stream path without a GPU: gloo is declared a
stream backend and a SCRIPTED device (`ScriptedEvents`) stands in for CUDA events, its
clock running at a different offset on every rank. Its events complete when recorded, so
device times are the host times around each call, seen through the hook's anchoring.
"""

from __future__ import annotations

import argparse
import datetime
import time

import torch
import torch.distributed as dist

from commwatch.producers import hook


def install_on_scripted_device(rank: int) -> None:
    import atexit

    from commwatch.producers.hook import runtime
    from commwatch.producers.hook.events import ScriptedEvents
    from commwatch.settings import Settings

    h = runtime.Hook(Settings.load(), dist, local_rank=rank, events=ScriptedEvents(offset_ns=(rank + 1) * 40_000_000),
                     stream_backends=frozenset({"gloo"}))
    h.patch()
    runtime._HOOK = h
    atexit.register(runtime.uninstall)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("rank", type=int)
    p.add_argument("world", type=int)
    p.add_argument("port", type=int)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--step-s", type=float, default=0.1)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-s", type=float, default=0.0)
    p.add_argument("--hang-rank", type=int, default=-1)
    p.add_argument("--hang-at", type=int, default=-1)
    p.add_argument("--scripted-device", action="store_true")
    a = p.parse_args()
    if a.scripted_device:
        install_on_scripted_device(a.rank)
    else:
        hook.install(local_rank=a.rank)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=600))
    pair = [dist.new_group([0, 1]), dist.new_group([2, 3])][a.rank // 2]  # a "tensor-parallel" pair
    hook.set_coords(tp=a.rank % 2, dp=a.rank // 2, pp=0)
    w = torch.randn(256)
    for i in range(a.steps):
        hook.step(i)
        with hook.phase("forward"):
            time.sleep(a.step_s)
            if a.rank == a.slow_rank:
                time.sleep(a.slow_s)
            if a.rank == a.hang_rank and i == a.hang_at:
                time.sleep(3600)
            y = w * 2
        dist.all_reduce(y, group=pair)
        with hook.phase("backward"):
            grad = y.clone()
            dist.all_reduce(grad)
        with hook.phase("optimizer"):
            w -= 0.001 * grad / a.world
            parts = [torch.zeros(4) for _ in range(a.world)]
            dist.all_gather(parts, grad[:4])
            dist.broadcast(w, src=0)
    hook.step(a.steps)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
