"""One rank of a small NCCL job for recording what the probes see on a real GPU.

Run by `nccl-patch/gpu/record.sh` on a machine with a GPU (never by the test suite):

    python workload.py SCENARIO --rank R --world W --port P --out DIR [--probe hook]

The plugin (or the recorder in front of it) is chosen by the caller through
NCCL_PROFILER_PLUGIN; `--probe hook` installs the PyTorch hook instead. Every rank uses
cuda:0: a two-rank job on one GPU runs with a distinct NCCL_HOSTID per rank, so NCCL
takes the ranks for two hosts and connects them through its socket transport.

A thread of this process follows the probe's ring files from the moment they appear and,
once the probe has closed them, writes what it read to DIR/<job>.<rank>.calls (64-byte
call records) and DIR/<job>.<rank>.steps (hook step records), as the node agent would
have seen them.

Scenarios:
- semantics: every kind of call once or a few times: synchronous collectives on the
  default group and on two more groups, async works, P2P (two ranks), collectives from two
  threads on their own streams, a CUDA-graph-captured all_reduce replayed three times and
  one 256 MiB all_reduce;
- hang: a training loop (matmuls, --buckets gradient all_reduces per step (4 of 4 MiB), host synchronised
  every 4 steps, so the host runs ahead); rank --fault stops for --fault-s seconds before
  iteration --fault-at, then goes on;
- gpuhang: the same loop; before iteration --fault-at rank --fault's GPU spins in a kernel for
  about --fault-s seconds (`torch.cuda._sleep`) while its host goes on enqueueing: a GPU stuck
  in compute, which no call probe sees start;
- slow: the same loop; from iteration --fault-at on, rank --fault spends --slow-s more on the
  host before it launches each step's work (a host-side straggler: data loading, GC); with
  two ranks on one GPU, extra GPU work would slow both ranks alike;
- ddp: DistributedDataParallel on NCCL (two Linear layers of 2048, buckets of 4 MiB), --steps
  steps with the hook's phases;
- fsdp: FSDP2 (`fully_shard` per layer and on the model) on NCCL, the same two layers, --steps
  steps;
- train: the loop, timed per step (host synchronised every step), for the overhead table.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist


def follow(ring_dir: Path, job: str, rank: int, out: Path, stop: threading.Event) -> None:
    from commwatch import ring

    readers: dict[Path, ring.RingReader] = {}
    got: dict[str, list[np.ndarray]] = {"calls": [], "steps": []}
    deadline = None
    while True:
        base = ring_dir / job
        for p in sorted(base.glob("*")) if base.exists() else []:
            if p in readers or p.suffix not in (".ring", ".steps") or p.name.split(".")[0] != str(rank):
                continue
            try:
                readers[p] = (ring.RingReader(p) if p.suffix == ".ring"
                              else ring.RingReader(p, magic=ring.STEP_MAGIC, dtype=ring.STEP_DTYPE))
            except (OSError, ring.RingError):
                continue
        for p, r in readers.items():
            recs, lost = r.poll()
            if lost:
                print(f"follower: {lost} records lost on {p.name}", file=sys.stderr)
            if len(recs):
                got["calls" if p.suffix == ".ring" else "steps"].append(recs)
        if stop.is_set():
            deadline = deadline or time.monotonic() + 5.0
            if all(r.closed for r in readers.values()) or time.monotonic() > deadline:
                for p, r in readers.items():
                    recs, _ = r.poll()
                    if len(recs):
                        got["calls" if p.suffix == ".ring" else "steps"].append(recs)
                break
        time.sleep(0.005)
    for kind, chunks in got.items():
        if chunks:
            np.concatenate(chunks).tofile(out / f"{job}.{rank}.{kind}")
    print(f"follower {job} rank {rank}: " + ", ".join(f"{k} {sum(len(c) for c in v)}" for k, v in got.items())
          + f", closed {[r.closed for r in readers.values()]}", file=sys.stderr)


def semantics(rank: int, world: int, dev: torch.device, log: dict) -> None:
    x = torch.randn(1 << 20, device=dev)
    for _ in range(4):
        dist.all_reduce(x)
    g1 = dist.new_group(list(range(world)))
    g2 = dist.new_group(list(range(world)))
    small = torch.randn(4096, device=dev)
    ag = torch.empty(4096 * world, device=dev)
    rs_in = torch.randn(4096 * world, device=dev)
    rs = torch.empty(4096, device=dev)
    for _ in range(3):
        dist.all_reduce(x, group=g1)
        dist.all_gather_into_tensor(ag, small, group=g2)
        dist.reduce_scatter_tensor(rs, rs_in, group=g1)
        dist.broadcast(x, src=0, group=g2)
    log["sync"] = time.time_ns()
    works = [dist.all_reduce(x, async_op=True) for _ in range(3)]
    for w in works:
        w.wait()
    log["async"] = time.time_ns()
    if world > 1:
        peer = 1 - rank
        a, b = torch.randn(65536, device=dev), torch.empty(65536, device=dev)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, a, peer), dist.P2POp(dist.irecv, b, peer)])
        for r in reqs:
            r.wait()
        if rank == 0:
            dist.send(a, 1)
        else:
            dist.recv(b, 0)
        log["p2p"] = time.time_ns()

    def on_thread(group, n: int) -> None:
        s = torch.cuda.Stream(device=dev)
        t = torch.randn(1 << 18, device=dev)
        with torch.cuda.stream(s):
            for _ in range(n):
                dist.all_reduce(t, group=group)
        s.synchronize()

    ths = [threading.Thread(target=on_thread, args=(g, 5)) for g in (g1, g2)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    log["threads"] = time.time_ns()
    try:
        y = torch.randn(1 << 16, device=dev)
        s = torch.cuda.Stream(device=dev)
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            dist.all_reduce(y)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            dist.all_reduce(y)
        torch.cuda.synchronize()
        log["graph_captured"] = time.time_ns()
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        log["graph_replayed"] = time.time_ns()
    except Exception as e:  # recorded, not fatal: the rest of the run still counts
        log["graph_error"] = repr(e)
    z = torch.randn(64 << 20, device=dev)
    t0 = time.time_ns()
    dist.all_reduce(z)
    log["big_enqueued"] = [t0, time.time_ns()]
    torch.cuda.synchronize()
    log["big_done"] = time.time_ns()


def ddp(a: argparse.Namespace, dev: torch.device, log: dict, hook=None) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    width = 2048
    net = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width)).to(dev)
    model = DDP(net, device_ids=[dev.index], bucket_cap_mb=4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    phase = hook.phase if hook is not None else (lambda name: contextlib.nullcontext())
    for i in range(a.steps):
        if hook is not None:
            hook.step(i)
        x = torch.randn(512, width, device=dev)
        with phase("forward"):
            loss = model(x).square().mean()
        with phase("backward"):
            loss.backward()
        with phase("optimizer"):
            opt.step()
            opt.zero_grad()
        torch.cuda.synchronize()


def fsdp(a: argparse.Namespace, dev: torch.device, log: dict, hook=None) -> None:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    width = 2048
    layers = [torch.nn.Linear(width, width) for _ in range(2)]
    model = torch.nn.Sequential(layers[0], torch.nn.ReLU(), layers[1]).to(dev)
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(a.steps):
        if hook is not None:
            hook.step(i)
        loss = model(torch.randn(512, width, device=dev)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        torch.cuda.synchronize()


def loop(a: argparse.Namespace, dev: torch.device, log: dict, hook=None) -> list[float]:
    torch.manual_seed(a.rank)
    w = [torch.randn(a.dim, a.dim, device=dev) / a.dim ** 0.5 for _ in range(4)]
    x = torch.randn(a.dim // 4, a.dim, device=dev)
    grads = [torch.randn(a.bucket_kib * 256, device=dev) for _ in range(a.buckets)]
    steps = []
    sync_every = 1 if a.scenario == "train" else 4
    spin = None
    for it in range(a.steps):
        if a.scenario == "hang" and a.rank == a.fault and it == a.fault_at:
            log["fault_start"] = time.time_ns()
            time.sleep(a.fault_s)
            log["fault_end"] = time.time_ns()
        if a.scenario == "slow" and a.rank == a.fault and it == a.fault_at:
            log["fault_start"] = time.time_ns()
        if a.scenario == "gpuhang" and a.rank == a.fault and it == a.fault_at:
            spin = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            log["fault_start"] = time.time_ns()
            spin[0].record()
            torch.cuda._sleep(int(a.fault_s * 1.98e9))  # cycles at the H100's 1.98 GHz
            spin[1].record()
        t0 = time.perf_counter()
        if hook is not None:
            hook.step(it)
        if a.scenario == "slow" and a.rank == a.fault and it >= a.fault_at:
            time.sleep(a.slow_s)
        h = x
        for _ in range(a.compute):
            for m in w:
                h = torch.tanh(h @ m)
        for gi, g in enumerate(grads):
            g.mul_(0.5).add_(h.mean())
            dist.all_reduce(g)
        if (it + 1) % sync_every == 0:
            torch.cuda.synchronize()
        steps.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    if a.scenario == "gpuhang" and a.rank == a.fault:
        log["fault_gpu_ms"] = round(spin[0].elapsed_time(spin[1]), 1)
    if a.scenario == "train":  # host time per enqueued call, nothing synchronised in between
        small = torch.randn(256, device=dev)
        for _ in range(100):
            dist.all_reduce(small)
        torch.cuda.synchronize()
        n = 3000 if a.world == 1 else 200  # two ranks on one GPU: ~4.5 ms a call (time slices)
        t0 = time.perf_counter()
        for _ in range(n):
            dist.all_reduce(small)
        log["enqueue_us_per_call"] = round((time.perf_counter() - t0) / n * 1e6, 3)
        torch.cuda.synchronize()
        log["calls_drained_s"] = round(time.perf_counter() - t0, 4)
    return steps


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=["semantics", "hang", "gpuhang", "slow", "ddp", "fsdp", "train"])
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--port", type=int, default=29500)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--probe", choices=["nccl", "hook"], default="nccl")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--compute", type=int, default=4, help="rounds of four matmuls per step")
    p.add_argument("--dim", type=int, default=2048, help="matmul size")
    p.add_argument("--slow-s", type=float, default=0.04)
    p.add_argument("--buckets", type=int, default=4, help="gradient all_reduce calls per step")
    p.add_argument("--bucket-kib", type=int, default=4096, help="size of each")
    p.add_argument("--fault", type=int, default=1)
    p.add_argument("--fault-at", type=int, default=20)
    p.add_argument("--fault-s", type=float, default=8.0)
    a = p.parse_args()
    job = os.environ.get("COMMWATCH_JOB_ID", "default")
    ring_dir = Path(os.environ.get("COMMWATCH_RING_DIR", "/dev/shm/commwatch"))
    a.out.mkdir(parents=True, exist_ok=True)
    follow_stop = threading.Event()
    follower = None
    if a.scenario != "train":
        follower = threading.Thread(target=follow, args=(ring_dir, job, a.rank, a.out, follow_stop), daemon=True)
        follower.start()
    hook = None
    if a.probe == "hook":
        from commwatch.producers import hook

        hook.install(local_rank=0)
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    log: dict = {"scenario": a.scenario, "rank": a.rank, "world": a.world, "probe": a.probe,
                 "plugin": os.environ.get("NCCL_PROFILER_PLUGIN", ""), "t0": time.time_ns()}
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=120), device_id=dev)
    log["init_done"] = time.time_ns()
    if a.scenario == "semantics":
        semantics(a.rank, a.world, dev, log)
    elif a.scenario == "ddp":
        ddp(a, dev, log, hook)
    elif a.scenario == "fsdp":
        fsdp(a, dev, log, hook)
    else:
        steps = loop(a, dev, log, hook)
        warm = steps[10:]
        log["step_ms_median"] = round(statistics.median(warm) * 1e3, 4)
        log["step_ms_p10_p90"] = [round(float(np.percentile(warm, q)) * 1e3, 4) for q in (10, 90)]
        log["calls_per_step"] = a.buckets
    log["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
    log["torch"] = torch.__version__
    dist.destroy_process_group()
    log["end"] = time.time_ns()
    if hook is not None:
        from commwatch.producers.hook import runtime

        runtime.uninstall()
    follow_stop.set()
    if follower is not None:
        follower.join(timeout=10)
    with open(a.out / f"{job}.{a.rank}.log.json", "w") as f:
        json.dump(log, f)
    print(json.dumps(log))


if __name__ == "__main__":
    main()
