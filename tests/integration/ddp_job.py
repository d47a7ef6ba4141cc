"""A small DistributedDataParallel training job on gloo with the commwatch hook installed.

Run by the end-to-end tests, one process per rank:
`python ddp_job.py RANK WORLD PORT --steps N [--slow-rank R --slow-s S] [--hang-rank R --hang-at I]`.
The slow rank sleeps inside every forward; the hung rank stops before the backward of
iteration I (so it never issues that iteration's gradient all-reduces). The ring
directory and job id come from COMMWATCH_RING_DIR / COMMWATCH_JOB_ID.
"""

from __future__ import annotations

import argparse
import datetime
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from commwatch.producers import hook

WIDTH = 512  # two layers of WIDTH x WIDTH float32: about 2 MB of gradients
BUCKET_MB = 0.5  # buckets of 0.5 MB (DDP's first bucket holds 1 MiB): several all-reduces per backward


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("rank", type=int)
    p.add_argument("world", type=int)
    p.add_argument("port", type=int)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--step-s", type=float, default=0.02)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-s", type=float, default=0.0)
    p.add_argument("--hang-rank", type=int, default=-1)
    p.add_argument("--hang-at", type=int, default=-1)
    a = p.parse_args()
    torch.manual_seed(0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=600))
    hook.install(local_rank=a.rank)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH)),
                bucket_cap_mb=BUCKET_MB)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(a.steps):
        hook.step(i)
        x = torch.randn(16, WIDTH)
        with hook.phase("forward"):
            time.sleep(a.step_s)
            if a.rank == a.slow_rank:
                time.sleep(a.slow_s)
            loss = model(x).square().mean()
        if a.rank == a.hang_rank and i == a.hang_at:
            time.sleep(3600)  # stuck before backward: this iteration's buckets never leave this rank
        with hook.phase("backward"):
            loss.backward()
        with hook.phase("optimizer"):
            opt.step()
            opt.zero_grad()
    hook.step(a.steps)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
