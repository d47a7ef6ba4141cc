#!/usr/bin/env python3
"""hoststall/: an independent traffic generator for commwatch - what the host does between collectives, and
training-loop control flow.

Written from the wire spec (../shared/spec/wire-v1.md), DOMAIN.md, the READMEs, docs/*.md, run_scored.sh and
islands/ (as a template for capture writing and scoring) only; it shares no code with commwatch and writes
the capture format of spec section 4 itself (JSON Lines, call batches encoded here from spec 1 / 2.1).

The model: one Python training loop per rank (PyTorch / Megatron / DeepSpeed style), each rank a host
timeline and (NCCL jobs) a device timeline with one stream:
- The host runs the loop: `next(data_iter)` (3-15 ms from a prefetching DataLoader; 5-15 s at an epoch
  start on EVERY rank when the non-persistent workers are re-spawned and the sampler reshuffles), Python
  overhead, kernel launches (a layer group's launches cost the host 30-45 % of its device time, more under
  CPU contention: such a rank becomes launch-bound and its device starves), collective launches (0.3 ms),
  host-only phases (a CPU-offloaded Adam step, torch.compile recompilation, an evaluation loop on rank 0,
  GC pauses) and syncs (`loss.item()` every iteration: the host waits for the device; or no per-iteration
  sync: the host runs up to two iterations ahead, bounded by the launch queue).
- The device runs a rank's kernels and collectives in issue order, starting each at max(device free,
  host launch), finishing no sooner than the last launch of its group (launch-bound ranks). A collective
  instance completes on every member at max(members' device arrivals) + its transfer (+ a few us), or
  never when a member never arrives (everything behind it on those streams waits too).
- Jobs: "dense" Megatron-style TP x DP (TP inside a node, rank = dp*TP + tp; per iteration 4 layer groups,
  a TP all-reduce after each forward and backward group, 2 DDP gradient buckets on the DP comm during
  backward, a grad-norm all-reduce on TP, a loss all-reduce on DP), DDP (TP 1: 3 buckets), DeepSpeed
  ZeRO-Offload (stage 2 + CPU Adam: reduce-scatter buckets in backward, an 8-byte overflow all-reduce, a
  device->host copy, the host waits, CPU Adam 0.6-0.8 s with no NCCL call, a host->device copy, 2
  parameter all-gathers), and gloo DDP on CPUs (host-blocking collectives, compute on the host).
- Control flow: epoch boundaries (every rank's loader stalls), a shape change where every rank's
  torch.compile recompiles (12-20 s, per-rank spread ~5 %), evaluation every N steps on every rank (TP
  all-reduces in eval forwards, an eval-loss all-reduce on DP, a barrier on the world comm), evaluation on
  rank 0 only (`if rank == 0: evaluate(); dist.barrier()`: the others wait inside the barrier all-reduce),
  a shared-filesystem stall (every rank's next fetch blocks until the filesystem recovers; the loaders'
  prefetch queues are assumed equally deep on all ranks, so all block in the same iteration), GC pauses.
- Faults: a rank's data-loader worker dies (its `next()` never returns: inside no call, a hang root), also
  at an epoch start; a rank's compile never finishes at a shape change; a rank's CPU Adam deadlocks
  (ZeRO-Offload); rank 0 hangs inside its rank-0-only evaluation (the others in the barrier); a rank blocked
  40 s in a host-side lock, then running on (a hang that clears); a recompilation storm on one rank
  (dynamic-shape guard failures: before its forward on ~70 % of iterations a 3-6 s recompile while its
  peers wait inside its first TP all-reduce, until Dynamo's cache limit of 8 is hit and the frame falls
  back to eager, 1.3x slower compute and 1.5x launch overhead from then on); a CPU-offloaded optimizer 1.6x
  slower on one rank (NUMA misbinding); two ranks of one node (one in each of its two TP groups)
  launch-bound under host CPU contention (3x slower Python).
- Probes: 'gpu' (GPU-timed plugin: one completed record per call with device times, plus an entry record
  GPU_TIMED without COMPLETED when a call is still open after the plugin's sweep period 0.2-0.5 s),
  'enq' (host-enqueue hook: an ENQUEUED entry at enqueue, ENQUEUED|COMPLETED when its CUDA event is
  observed 1-10 ms after the device finished; several calls per rank outstanding, only the oldest can be
  blocked), 'gloo' (host-blocking: an entry record and a completed record, host times, no flag).
- Node agents (8 ranks a node): per node and comm a call batch every 100-200 ms (per-node period and
  phase) with the records written since, heartbeats every 1 s per node and comm (started / completed as of
  the batches sent), topology (with TP/DP coords for Megatron-style jobs) and COMM_INIT at start,
  cw.steps.v1 per rank and iteration where the hook is installed (iteration span at the loop's
  hook.step boundaries: it includes loader stalls and evaluations; forward / backward phases device spans
  (CUDA-event timed; backward includes the DDP bucket waits), optimizer from the backward's end to the
  step's end, host time included for CPU Adam). Node clocks +-5 ms with +-5 ppm drift.
Simplified / left out: pipeline parallelism, a second stream for DDP buckets (buckets are in issue order
on the one stream), the first compilation and NCCL warm-up (the capture starts with a warm job), NVML
samples, job ends (every capture stops while the job runs or hangs), elastic restarts.
Each capture is checked against the spec before it is written (check_capture).

  gen.py --out DIR --seed N [PREFIX ...]
"""
import argparse
import base64
import json
import math
import os
import struct
import zlib

import numpy as np

NS = 1_000_000_000
EPOCH = 1_767_225_600 * NS  # 2026-01-01T00:00:00Z
INF = np.inf
GPN = 8  # GPUs (ranks) per node

OP_ALLREDUCE, OP_ALLGATHER, OP_REDUCESCATTER = 1, 2, 3
F_COMPLETED, F_GPU, F_GRAPH, F_ENQ, F_LOST = 1, 2, 4, 8, 16
K_CALL, K_INIT = 1, 2

# spec section 1, built here from its table (not imported from commwatch)
REC = np.dtype([("kind", "<u1"), ("op", "<u1"), ("flags", "<u2"), ("rank", "<i4"), ("comm", "<u8"),
                ("seq", "<u8"), ("t_start_ns", "<i8"), ("t_end_ns", "<i8"), ("bytes", "<u8"),
                ("comm_rank", "<i4"), ("peer", "<i4"), ("nranks", "<u4"), ("aux", "<u4")])
assert REC.itemsize == 64 and REC.fields["aux"][1] == 60 and REC.fields["comm_rank"][1] == 48
assert REC.fields["t_start_ns"][1] == 24 and REC.fields["bytes"][1] == 40 and REC.fields["peer"][1] == 52


def batch_bytes(recs):
    return b"CWB1" + struct.pack("<HHII", 1, 64, len(recs), 0) + recs.tobytes()


# ----------------------------------------------------------------------------------------------- scenarios
# prog: dense (TP x DP, tp may be 1 = DDP), offload (ZeRO-Offload), gloo (gloo DDP on CPUs)
# T: device seconds of an iteration's compute; ra: 1 = loss.item() sync every iteration, 2 = host runs ahead
SCEN = []


def S(name, **kw):
    SCEN.append(dict(name=name, **kw))


# --- healthy controls: legitimate host-side pauses
S("c01_epoch_loader_stall_gpu", prog="dense", W=64, tp=4, probe="gpu", T=0.9, ra=1, dur=100, steps=True,
  epoch=30, epoch_stall=(6.0, 12.0), expect="control",
  note="TP4 x DP16, plugin; every 30 iterations an epoch starts: every rank's loader re-spawns its workers "
  "and reshuffles for 6-12 s (per-rank spread ~5 %), nobody inside a call but the first to return")
S("c02_recompile_all_enq", prog="dense", W=32, tp=4, probe="enq", T=0.8, ra=1, dur=100, steps=True,
  compile_at=35, compile_s=(14.0, 18.0), expect="control",
  note="TP4 x DP8, host-enqueue hook; at iteration 35 the sequence-length bucket changes: every rank's "
  "torch.compile recompiles 14-18 s (per-rank spread ~5 %) before its forward")
S("c03_zero_offload_gpu", prog="offload", W=32, probe="gpu", T=0.9, ra=1, dur=90, steps=True,
  adam=(0.6, 0.8), expect="control",
  note="DeepSpeed ZeRO-Offload DP32, plugin + hook; CPU Adam 0.6-0.8 s each step, no NCCL call in it")
S("c04_fs_stall_gpu", prog="dense", W=64, tp=8, probe="gpu", T=1.0, ra=1, dur=100, steps=False,
  fs_stall=(45.0, 20.0), expect="control",
  note="TP8 x DP8, plugin only (no hook); the shared filesystem stalls 20 s once at t=45 s: every rank's "
  "next fetch blocks until it recovers (+0-0.5 s per rank)")
S("c05_eval_all_ranks_enq", prog="dense", W=32, tp=2, probe="enq", T=0.7, ra=1, dur=110, steps=True,
  eval_all=(20, 12), expect="control",
  note="TP2 x DP16, host-enqueue; every 20 steps every rank evaluates 12 batches (TP all-reduces only; "
  "the DP comms idle ~6 s), then an eval-loss all-reduce on DP and a barrier on the world comm")
S("c06_rank0_eval_routine_gpu", prog="dense", W=16, tp=1, probe="gpu", T=0.8, ra=1, dur=110, steps=True,
  eval_r0=(25, (6.0, 9.0)), expect="control",
  note="DDP 16 ranks, plugin + hook; every 25 steps rank 0 evaluates alone for 6-9 s (if rank == 0: "
  "evaluate(); dist.barrier()): the other 15 wait inside the barrier all-reduce each time")
S("c07_gc_pauses_queue_enq", prog="dense", W=32, tp=4, probe="enq", T=0.8, ra=2, dur=90, steps=True,
  gc=True, expect="control",
  note="TP4 x DP8, host-enqueue, host up to 2 iterations ahead (no per-iteration sync); rank 0's host "
  "pauses 0.8-1.2 s (gen-2 GC of a large heap) every ~10 s, every other host 0.2-0.4 s every 20-40 s: the "
  "launch queue drains behind each pause and hides it (enqueue gaps on the host, device on time)")
S("c08_gloo_epoch_eval", prog="gloo", W=32, probe="gloo", T=0.5, ra=1, dur=100, steps=True,
  epoch=60, epoch_stall=(5.0, 8.0), eval_all=(80, 8), expect="control",
  note="gloo DDP on CPUs, 32 ranks (4 nodes x 8), host-blocking; an epoch start every 60 steps (5-8 s "
  "loader stall on all ranks), an evaluation every 80 steps then a barrier")
# --- hangs
S("h01_loader_dead_gpu", prog="dense", W=64, tp=4, probe="gpu", T=0.9, ra=1, dur=90, steps=False,
  fault=dict(kind="hang", point="fetch", node=5, local=6, at=55.0), expect="hang",
  note="TP4 x DP16, plugin only; a rank's data-loader worker dies (pin-memory thread waits forever): its "
  "next() never returns, it enters nothing; its TP peers wait in the first forward all-reduce, the rest "
  "in the DP bucket all-reduce")
S("h02_loader_dead_epoch_enq", prog="dense", W=128, tp=4, probe="enq", T=0.8, ra=1, dur=100, steps=True,
  epoch=25, epoch_stall=(6.0, 10.0),
  fault=dict(kind="hang", point="epoch_fetch", node=11, local=1, nth=2), expect="hang",
  note="TP4 x DP32 (128 ranks), host-enqueue; every 25 steps an epoch stall of 6-10 s on all ranks; at "
  "the second one a rank's re-spawned worker hangs: every other rank comes back and waits")
S("h03_host_lock_40s_gloo", prog="gloo", W=16, probe="gloo", T=0.5, ra=1, dur=110, steps=True,
  fault=dict(kind="stall", point="any", node=1, local=3, at=40.0, length=40.0), expect="hang",
  note="gloo DDP 16 ranks; a rank's training thread blocks 40 s on a lock held by its checkpoint-upload "
  "thread (stuck NFS write), then runs on: a hang that clears")
S("h04_host_lock_40s_enq", prog="dense", W=32, tp=8, probe="enq", T=0.8, ra=2, dur=110, steps=True,
  fault=dict(kind="stall", point="any", node=2, local=4, at=35.0, length=40.0), expect="hang",
  note="TP8 x DP4, host-enqueue, host 2 iterations ahead; a rank's host blocked 40 s in a lock (its "
  "device drains its queue, then idles); peers block at the first call it never enqueued with more "
  "queued behind; it runs on afterwards")
S("h05_rank0_eval_hang_gpu", prog="dense", W=16, tp=1, probe="gpu", T=0.8, ra=1, dur=120, steps=True,
  eval_r0=(25, (6.0, 9.0)), fault=dict(kind="hang", point="eval_r0", node=0, local=0, nth=3),
  expect="hang",
  note="as c06, but rank 0's third evaluation never returns (generation loop deadlocked): the others wait "
  "in the barrier as they did twice for 6-9 s, now forever")
S("h06_offload_adam_deadlock_gpu", prog="offload", W=64, probe="gpu", T=0.9, ra=1, dur=90, steps=True,
  adam=(0.6, 0.8), fault=dict(kind="hang", point="adam", node=6, local=2, at=50.0), expect="hang",
  note="ZeRO-Offload DP64; a rank's CPU Adam deadlocks in its OpenMP pool: it never enters the parameter "
  "all-gather, its 63 peers wait inside it")
S("h07_recompile_never_ends_gpu", prog="dense", W=32, tp=4, probe="gpu", T=0.9, ra=1, dur=110, steps=True,
  compile_at=40, compile_s=(12.0, 16.0), fault=dict(kind="hang", point="compile", node=3, local=3, at=0.0),
  expect="hang",
  note="TP4 x DP8, plugin + hook; at a shape change every rank recompiles 12-16 s; one rank's compile "
  "workers deadlock and it never finishes")
# --- slow ranks
S("s01_recompile_storm_gpu", prog="dense", W=64, tp=4, probe="gpu", T=0.9, ra=1, dur=110, steps=True,
  fault=dict(kind="storm", node=2, local=1, at=35.0, p=0.7, stall=(3.0, 6.0), limit=8, eager=1.3),
  expect="storm",
  note="TP4 x DP16; from t=35 s one rank's dynamic shapes fail Dynamo's guards: a 3-6 s recompile before "
  "~70 % of its forwards while its TP peers wait inside the first all-reduce and the rest in DP, then "
  "(cache limit 8) eager fallback, 1.3x compute for good")
S("s02_numa_offload_gpu", prog="offload", W=32, probe="gpu", T=0.9, ra=1, dur=100, steps=True,
  adam=(0.6, 0.8), fault=dict(kind="slow_adam", node=2, local=5, at=40.0, factor=1.6), expect="slow_rank",
  note="ZeRO-Offload DP32; from t=40 s a rank's CPU Adam runs 1.6x slower (process re-bound to the far "
  "NUMA node): it enters every parameter all-gather late, its peers wait there")
S("s03_numa_offload_enq_128", prog="offload", W=128, probe="enq", T=0.9, ra=1, dur=100, steps=True,
  adam=(0.6, 0.8), fault=dict(kind="slow_adam", node=9, local=0, at=40.0, factor=1.6), expect="slow_rank",
  note="ZeRO-Offload DP128, host-enqueue hook; the same 1.6x CPU Adam on one rank")
S("s04_cpu_contention_2ranks_gpu", prog="dense", W=64, tp=4, probe="gpu", T=0.9, ra=1, dur=100, steps=True,
  launch=0.45, fault=dict(kind="contention", node=3, locals=(2, 5), at=40.0, factor=3.0),
  expect="slow_rank",
  note="TP4 x DP16; from t=40 s a noisy neighbour process takes the cores of two ranks of node 3 (local 2 "
  "and 5, one in each of the node's TP groups): their Python runs 3x slower, they become launch-bound; "
  "their 6 TP peers wait in TP all-reduces, everyone else in DP")

NODE_FMT = "gpu-n{:03d}"


# ------------------------------------------------------------------------------------------------ simulator
class Job:
    def __init__(self, sc, seed):
        self.sc = sc
        self.rng = rng = np.random.default_rng([seed, zlib.crc32(sc["name"].encode())])
        self.W = W = sc["W"]
        self.prog = sc["prog"]
        self.tp = sc.get("tp", 1) if self.prog == "dense" else 1
        self.ndp = W // self.tp
        self.nnodes = W // GPN
        self.gloo = sc["probe"] == "gloo"
        self.probe = sc["probe"]
        self.node_name = [NODE_FMT.format(i) for i in range(self.nnodes)]
        self.rank_node = np.arange(W) // GPN
        self.comms = []
        used = set()

        def new_comm(members, kind):
            while True:
                cid = int(rng.integers(1, 2**63))
                if cid not in used:
                    used.add(cid)
                    break
            self.comms.append(dict(id=cid, members=np.array(members, dtype=np.int64), kind=kind, seq=0,
                                   opcount={}))
            return len(self.comms) - 1
        self.groups = {}
        if self.tp > 1:
            self.groups["tp"] = [new_comm([d * self.tp + t for t in range(self.tp)], "tp") for d in range(self.ndp)]
            self.groups["dp"] = [new_comm([d * self.tp + t for d in range(self.ndp)], "dp") for t in range(self.tp)]
            if sc.get("eval_all"):
                self.groups["world"] = [new_comm(list(range(W)), "world")]
        else:
            self.groups["dp"] = [new_comm(list(range(W)), "world")]
            self.groups["world"] = self.groups["dp"]
        # clocks
        self.node_off = rng.uniform(-0.005, 0.005, self.nnodes)
        self.node_drift = rng.uniform(-5e-6, 5e-6, self.nnodes)
        # call lists
        self.calls = {k: [] for k in ("rank", "comm", "seq", "op", "h", "a", "c", "bytes", "crank", "nranks",
                                      "aux")}
        self.steps = []
        self.events = []     # (what, rank or -1, t0, t1)
        self.launch = sc.get("launch", 0.33)
        self.rank_spd = rng.lognormal(0, 0.01, W)   # per-GPU speed spread (healthy)
        self.eager = np.ones(W)
        self.launch_mult = np.ones(W)
        f = sc.get("fault")
        self.fault = f
        self.culprits = []
        if f:
            if f["kind"] == "contention":
                self.culprits = [f["node"] * GPN + l for l in f["locals"]]
            else:
                self.culprits = [f["node"] * GPN + f["local"]]
            f.setdefault("nth", 1)
            f["count"] = 0
            f["done"] = False
            f["storms"] = 0
        self.onset = None
        self.stall_end = None
        # GC pauses (c07): per rank sorted list of [t, length]
        self.pauses = {}
        if sc.get("gc"):
            for r in range(W):
                lst = []
                if r == 0:
                    t = 2.0 + rng.uniform(3, 10)
                    while t < sc["dur"]:
                        lst.append([t, rng.uniform(0.8, 1.2)])
                        t += rng.uniform(8, 12)
                else:
                    t = 2.0 + rng.uniform(5, 35)
                    while t < sc["dur"]:
                        lst.append([t, rng.uniform(0.2, 0.4)])
                        t += rng.uniform(20, 40)
                self.pauses[r] = lst
        self.fs = sc.get("fs_stall")
        self.fs_resume = None

    # ---------------------------------------------------------------- host-side hooks
    def hmult(self):
        """host slowness multiplier per rank (CPU contention, eager fallback's extra launches)."""
        m = self.launch_mult.copy()
        f = self.fault
        if f and f["kind"] == "contention":
            for r in self.culprits:
                if self.h[r] >= f["at"]:
                    m[r] *= f["factor"]
                    if self.onset is None:
                        self.onset = f["at"]
        return m

    def pre(self, point):
        """faults and pauses that strike when a rank's host reaches `point` (before the action)."""
        h = self.h
        for r, lst in self.pauses.items():
            while lst and np.isfinite(h[r]) and h[r] >= lst[0][0]:
                t, L = lst.pop(0)
                self.events.append(("gc_pause", r, float(h[r]), float(h[r] + L)))
                h[r] += L
        if self.fs and point in ("fetch", "epoch_fetch"):
            t_fs, L = self.fs
            hit = np.isfinite(h) & (h >= t_fs) & (h < t_fs + L)
            if np.any(hit):
                if self.fs_resume is None:
                    self.fs_resume = t_fs + L + self.rng.uniform(0, 0.5, self.W)
                    self.events.append(("fs_stall", -1, t_fs, t_fs + L))
                h[hit] = np.maximum(h[hit], self.fs_resume[hit])
        f = self.fault
        if f and not f["done"] and f["kind"] in ("hang", "stall"):
            r = self.culprits[0]
            match = f["point"] == "any" or f["point"] == point or (f["point"] == "fetch" and point == "epoch_fetch")
            if match and np.isfinite(h[r]) and h[r] >= f.get("at", 0.0):
                f["count"] += 1
                if f["count"] >= f["nth"]:
                    f["done"] = True
                    self.onset = float(h[r])
                    if f["kind"] == "hang":
                        self.events.append(("hang", r, float(h[r]), INF))
                        h[r] = INF
                    else:
                        self.stall_end = float(h[r] + f["length"])
                        self.events.append(("lock", r, float(h[r]), self.stall_end))
                        h[r] += f["length"]
        if f and f["kind"] == "storm" and point == "forward":
            r = self.culprits[0]
            if np.isfinite(h[r]) and h[r] >= f["at"] and f["storms"] < f["limit"]:
                if self.onset is None:
                    self.onset = float(h[r])
                if self.rng.random() < f["p"]:
                    L = self.rng.uniform(*f["stall"])
                    self.events.append(("recompile", r, float(h[r]), float(h[r] + L)))
                    h[r] += L
                    f["storms"] += 1
                    if f["storms"] >= f["limit"]:
                        self.eager[r] = f["eager"]
                        self.launch_mult[r] = 1.5
                        self.events.append(("eager_fallback", r, float(h[r]), INF))

    # ---------------------------------------------------------------- actions
    def host(self, dur, point=None):
        self.pre(point)
        self.h = self.h + dur * self.hmult()
        if self.gloo:
            self.d = self.h.copy()

    def gpu(self, dur, point=None):
        """a group of kernels: device dur (per rank), launched by the host over launch*dur."""
        self.pre(point)
        spd = self.rank_spd * self.eager
        if self.gloo:
            st = self.h.copy()
            self.h = self.h + dur * spd
            self.d = self.h.copy()
            return st
        lc = self.launch * dur * self.hmult()
        h0 = self.h
        self.h = h0 + lc
        st = np.maximum(self.d, h0 + 0.00005)
        self.d = np.maximum(st + dur * spd, self.h + 0.0003)
        return st

    def sync(self):
        if not self.gloo:
            self.h = np.maximum(self.h, self.d + 0.0001)

    def coll(self, group, op, nbytes, xfer, point=None):
        self.pre(point)
        self.h = self.h + 0.0003 * self.hmult()
        h = self.h
        a = h.copy() if self.gloo else np.maximum(self.d, h + 0.00002)
        c_all = np.full(self.W, INF)
        rng = self.rng
        L = self.calls
        for ci in self.groups[group]:
            cm = self.comms[ci]
            M = cm["members"]
            am = a[M]
            C = am.max() + xfer * rng.uniform(0.9, 1.1)
            c = C + rng.uniform(2e-6, 40e-6, len(M)) if np.isfinite(C) else np.full(len(M), INF)
            c_all[M] = c
            n = len(M)
            cnt = cm["opcount"].get(op, 0)
            cm["opcount"][op] = cnt + 1
            L["rank"].append(M)
            L["comm"].append(np.full(n, ci))
            L["seq"].append(np.full(n, cm["seq"]))
            L["op"].append(np.full(n, op))
            L["h"].append(h[M].astype(float))
            L["a"].append(am.astype(float))
            L["c"].append(c)
            L["bytes"].append(np.full(n, nbytes))
            L["crank"].append(np.arange(n))
            L["nranks"].append(np.full(n, n))
            L["aux"].append(np.full(n, cnt))
            cm["seq"] += 1
        if self.gloo:
            self.h = c_all.copy()
            self.d = c_all.copy()
        else:
            self.d = c_all
        return a, c_all

    def step_record(self, it, t0, fw0, fw1, bw1, t1):
        if not self.sc.get("steps"):
            return
        end = float(self.sc["dur"])
        for r in range(self.W):
            vals = (t0[r], fw0[r], fw1[r], bw1[r], t1[r])
            if all(np.isfinite(v) for v in vals) and t1[r] < end:
                self.steps.append((r, it, float(t0[r]), float(t1[r]), float(fw1[r] - fw0[r]),
                                   float(bw1[r] - fw1[r]), float(t1[r] - bw1[r])))

    # ---------------------------------------------------------------- programs
    def run(self):
        sc, rng = self.sc, self.rng
        W = self.W
        end = float(sc["dur"])
        self.h = 2.0 + rng.uniform(0, 0.02, W)
        self.d = self.h.copy()
        self.it_t0 = self.h.copy()
        dev_end = {}
        T = sc["T"]
        it = 0
        while it < 5000:
            live = np.where(np.isfinite(self.h), self.h, INF)
            live = np.minimum(live, np.where(np.isfinite(self.d), self.d, INF))
            if not np.any(live < end + 1.0):
                break
            if sc.get("ra", 1) == 2 and it >= 2:
                self.h = np.maximum(self.h, dev_end[it - 2])
            t0 = self.it_t0.copy()
            jit = rng.lognormal(0, 0.02)            # this iteration's batch: every rank alike
            # data
            dl = rng.lognormal(math.log(0.006), 0.4, W)
            point = "fetch"
            ep = sc.get("epoch")
            if ep and it > 0 and it % ep == 0:
                base = rng.uniform(*sc["epoch_stall"])
                dl = dl + base * rng.lognormal(0, 0.05, W)
                point = "epoch_fetch"
                self.events.append(("epoch_stall", -1, float(np.nanmin(self.h)), float(np.nanmin(self.h) + base)))
            self.host(dl, point)
            self.host(rng.uniform(0.002, 0.004, W))   # python overhead
            if sc.get("compile_at") == it:
                base = rng.uniform(*sc["compile_s"])
                cs = base * rng.lognormal(0, 0.05, W)
                self.events.append(("recompile_all", -1, float(np.nanmin(self.h)), float(np.nanmin(self.h) + base)))
                self.host(cs, "compile")
            if self.prog == "offload":
                fw0, fw1, bw1, t1 = self.it_offload(T, jit)
            else:
                fw0, fw1, bw1, t1 = self.it_dense(T, jit)
            self.step_record(it, t0, fw0, fw1, bw1, t1)
            dev_end[it] = self.d.copy()
            self.it_t0 = t1.copy()
            # evaluations after this step
            ea = sc.get("eval_all")
            if ea and (it + 1) % ea[0] == 0:
                self.eval_all(T, ea[1])
            er = sc.get("eval_r0")
            if er and (it + 1) % er[0] == 0:
                self.eval_r0(er[1])
            it += 1
        self.iterations = it

    def dur(self, base, jit):
        return base * jit * self.rng.lognormal(0, 0.012, self.W)

    def it_dense(self, T, jit):
        W, rng = self.W, self.rng
        L = 4
        tp = self.tp > 1
        fw0 = None
        for l in range(L):
            st = self.gpu(self.dur(0.3 * T / L, jit), "forward" if l == 0 else None)
            if fw0 is None:
                fw0 = st
            if tp:
                self.coll("tp", OP_ALLREDUCE, 16 << 20, 0.004)
        fw1 = self.d.copy()
        nb = 2 if tp else 3
        bk = {1: 0, 3: 1} if tp else {1: 0, 2: 1, 3: 2}
        x_dp = 0.045 if not self.gloo else 0.03
        for l in range(L):
            self.gpu(self.dur(0.55 * T / L, jit))
            if tp:
                self.coll("tp", OP_ALLREDUCE, 16 << 20, 0.004)
            if l in bk:
                self.coll("dp", OP_ALLREDUCE, (200 << 20) // nb, x_dp * rng.uniform(0.9, 1.1))
        bw1 = self.d.copy()
        if tp:
            self.coll("tp", OP_ALLREDUCE, 4, 0.0003)   # grad norm
        self.gpu(self.dur(0.05 * T, jit))
        self.coll("dp", OP_ALLREDUCE, 4, 0.0008)      # loss average for logging
        if self.sc.get("ra", 1) == 1:
            self.sync()
            t1 = self.h.copy()
        else:
            t1 = self.d.copy()
        return fw0, fw1, bw1, t1

    def it_offload(self, T, jit):
        W, rng = self.W, self.rng
        fw0 = self.gpu(self.dur(0.25 * T, jit), "forward")
        fw1 = self.d.copy()
        for k in range(3):
            self.gpu(self.dur(0.15 * T, jit))
            self.coll("dp", OP_REDUCESCATTER, 96 << 20, 0.05)
        self.coll("dp", OP_ALLREDUCE, 8, 0.0005)       # overflow check
        bw1 = self.d.copy()
        self.gpu(self.dur(0.03, 1.0))                   # grads device -> host
        self.sync()
        lo, hi = self.sc["adam"]
        ad = rng.uniform(lo, hi) * rng.lognormal(0, 0.02, W)
        f = self.fault
        if f and f["kind"] == "slow_adam":
            r = self.culprits[0]
            if np.isfinite(self.h[r]) and self.h[r] >= f["at"]:
                if self.onset is None:
                    self.onset = float(self.h[r])
                ad[r] *= f["factor"]
        self.host(ad, "adam")
        self.gpu(self.dur(0.02, 1.0))                   # fp16 params host -> device
        for k in range(2):
            self.coll("dp", OP_ALLGATHER, 96 << 20, 0.06)
        self.sync()
        return fw0, fw1, bw1, self.h.copy()

    def eval_all(self, T, nb):
        tp = self.tp > 1
        for e in range(nb):
            self.host(self.rng.lognormal(math.log(0.006), 0.4, self.W), "eval_fetch")
            for l in range(4):
                self.gpu(self.dur(0.3 * T / 4, 1.0))
                if tp:
                    self.coll("tp", OP_ALLREDUCE, 16 << 20, 0.004)
            self.sync()           # eval loss .item() per batch
        self.coll("dp", OP_ALLREDUCE, 4, 0.0008)
        self.coll("world", OP_ALLREDUCE, 4, 0.0015)   # dist.barrier()
        self.sync()
        self.events.append(("eval_all", -1, 0.0, float(np.nanmax(np.where(np.isfinite(self.h), self.h, np.nan)))))

    def eval_r0(self, rng_s):
        d = np.zeros(self.W)
        d[0] = self.rng.uniform(*rng_s)
        t0 = float(self.h[0])
        self.host(d, "eval_r0")
        self.d[0] = max(self.d[0], self.h[0])
        if np.isfinite(self.h[0]):
            self.events.append(("eval_r0", 0, t0, float(self.h[0])))
        self.coll("world", OP_ALLREDUCE, 4, 0.0015)   # dist.barrier()
        self.sync()


# ------------------------------------------------------------------------------------------------ emission
def node_clock(job, nd, t):
    return t + job.node_off[nd] + job.node_drift[nd] * t


def emit(job, out_path, jobid):
    sc, rng = job.sc, job.rng
    end = float(sc["dur"])
    L = {k: np.concatenate(v) for k, v in job.calls.items()}
    n = len(L["rank"])
    h, a, c = L["h"], L["a"], L["c"]
    sweep = rng.uniform(0.2, 0.5, job.W)[L["rank"]]
    poll = rng.uniform(0.001, 0.010, n)
    parts = []
    if job.probe == "gpu":
        with np.errstate(invalid="ignore"):
            e = np.isfinite(a) & (~np.isfinite(c) | ((c - a) > sweep))
        idx = np.nonzero(e)[0]
        parts.append((a[idx] + sweep[idx], np.full(len(idx), F_GPU), a[idx], np.zeros(len(idx)), idx))
        idx = np.nonzero(np.isfinite(a) & np.isfinite(c))[0]
        parts.append((c[idx] + 0.002, np.full(len(idx), F_GPU | F_COMPLETED), a[idx], c[idx], idx))
    elif job.probe == "enq":
        idx = np.nonzero(np.isfinite(h))[0]
        parts.append((h[idx] + 0.0001, np.full(len(idx), F_ENQ), h[idx], np.zeros(len(idx)), idx))
        idx = np.nonzero(np.isfinite(h) & np.isfinite(c))[0]
        parts.append((c[idx] + poll[idx], np.full(len(idx), F_ENQ | F_COMPLETED), h[idx], c[idx] + poll[idx], idx))
    else:  # gloo, host-blocking
        idx = np.nonzero(np.isfinite(h))[0]
        parts.append((h[idx] + 0.00005, np.zeros(len(idx), dtype=np.int64), h[idx], np.zeros(len(idx)), idx))
        idx = np.nonzero(np.isfinite(h) & np.isfinite(c))[0]
        parts.append((c[idx] + 0.00005, np.full(len(idx), F_COMPLETED), h[idx], c[idx], idx))
    wt = np.concatenate([p[0] for p in parts])
    fl = np.concatenate([p[1] for p in parts]).astype(np.uint16)
    ts = np.concatenate([p[2] for p in parts])
    te = np.concatenate([p[3] for p in parts])
    ci = np.concatenate([p[4] for p in parts])
    # agent flushes: per node a period of 100-200 ms from a random phase
    nn = job.nnodes
    period = rng.uniform(0.1, 0.2, nn)
    phase = rng.uniform(0, 0.2, nn)
    node = job.rank_node[L["rank"][ci]]
    fk = np.ceil((wt - phase[node]) / period[node]).astype(np.int64)
    ft = phase[node] + fk * period[node]
    keep = ft <= end
    wt, fl, ts, te, ci, node, fk, ft = (x[keep] for x in (wt, fl, ts, te, ci, node, fk, ft))
    m = len(ci)
    rank = L["rank"][ci]
    comm = L["comm"][ci]
    recs = np.zeros(m, REC)
    recs["kind"] = K_CALL
    recs["op"] = L["op"][ci]
    recs["flags"] = fl
    recs["rank"] = rank
    recs["comm"] = np.array([cm["id"] for cm in job.comms], dtype=np.uint64)[comm]
    recs["seq"] = L["seq"][ci]
    off = job.node_off[node] + job.node_drift[node] * ts
    t0n = EPOCH + int(rng.integers(0, 3600)) * NS
    recs["t_start_ns"] = t0n + np.round((ts + off) * NS).astype(np.int64)
    recs["t_end_ns"] = np.where(fl & F_COMPLETED, t0n + np.round((te + off) * NS).astype(np.int64), 0)
    recs["bytes"] = L["bytes"][ci]
    recs["comm_rank"] = L["crank"][ci]
    recs["peer"] = -1
    recs["nranks"] = L["nranks"][ci]
    recs["aux"] = np.where(job.probe == "gpu", L["aux"][ci] & 0xFFFFFFFF, 0)
    msgs = []
    comm_hex = [f"{cm['id']:016x}" for cm in job.comms]
    # topology and COMM_INIT at t = 1.0 .. 1.3
    t_init = 1.0 + rng.uniform(0, 0.3, job.W)
    for r in range(job.W):
        nd = int(job.rank_node[r])
        tsn = t0n + int(node_clock(job, nd, t_init[r]) * NS)
        v = {"v": 1, "job": jobid, "ts_ns": tsn, "rank": r, "world_size": job.W, "node": job.node_name[nd],
             "local_rank": int(r % GPN), "gpu": f"GPU-{zlib.crc32(f'{jobid}/{r}'.encode()):08x}"}
        if job.prog == "dense" and job.tp > 1:
            v["coords"] = {"tp": int(r % job.tp), "pp": 0, "dp": int(r // job.tp)}
        elif not job.gloo:
            v["coords"] = {"tp": 0, "pp": 0, "dp": r}
        msgs.append((tsn, {"topic": "cw.topology.v1", "key": jobid, "ts_ns": tsn, "value": v}))
    init_time = {}
    for cidx, cm in enumerate(job.comms):
        M = cm["members"]
        nodes_in = len(set(int(x) // GPN for x in M))
        by_node = {}
        for j, r in enumerate(M):
            by_node.setdefault(int(r) // GPN, []).append((int(r), j))
        for nd, lst in by_node.items():
            rr = np.zeros(len(lst), REC)
            for q, (r, j) in enumerate(lst):
                tn = t0n + int(node_clock(job, nd, t_init[r] + 0.01) * NS)
                init_time[(r, cidx)] = tn
                rr[q] = (K_INIT, 0, F_COMPLETED, r, cm["id"], 0, tn, tn, 0, j, -1, len(M), nodes_in)
            tsn = t0n + int(node_clock(job, nd, max(t_init[r] for r, _ in lst) + 0.05) * NS)
            msgs.append((tsn, {"topic": "cw.calls.v1", "key": f"{jobid}/{comm_hex[cidx]}", "ts_ns": tsn,
                               "value_b64": base64.b64encode(batch_bytes(rr)).decode()}))
    # call batches per (node, comm, flush)
    order = np.lexsort((wt, fk, comm, node))
    nd_s, cm_s, fk_s = node[order], comm[order], fk[order]
    brk = np.nonzero((np.diff(nd_s) != 0) | (np.diff(cm_s) != 0) | (np.diff(fk_s) != 0))[0] + 1
    starts = np.concatenate([[0], brk]).astype(np.int64)
    stops = np.concatenate([brk, [m]]).astype(np.int64)
    bjit = rng.uniform(0, 0.01, len(starts))
    sent = np.empty(m)          # when each record's batch was sent (job time)
    for b, (s0, s1) in enumerate(zip(starts, stops)):
        sel = order[s0:s1]
        nd = int(nd_s[s0])
        t = ft[sel[0]] + bjit[b]
        sent[sel] = t
        tsn = t0n + int(node_clock(job, nd, t) * NS)
        msgs.append((tsn, {"topic": "cw.calls.v1", "key": f"{jobid}/{comm_hex[int(cm_s[s0])]}", "ts_ns": tsn,
                           "value_b64": base64.b64encode(batch_bytes(recs[sel])).decode()}))
    # heartbeats: per node and comm every 1 s; state as of the batches sent
    hb_phase = rng.uniform(0, 1.0, nn)
    nc = len(job.comms)
    key = rank.astype(np.int64) * nc + comm
    o2 = np.lexsort((sent, key))
    k2 = key[o2]
    kb = np.concatenate([[0], np.nonzero(np.diff(k2))[0] + 1, [m]]).astype(np.int64)
    seqs = recs["seq"].astype(np.int64)
    state = {}
    for s0, s1 in zip(kb[:-1], kb[1:]):
        if s1 <= s0:
            continue
        sel = o2[s0:s1]
        st = np.maximum.accumulate(seqs[sel])
        done = np.where(fl[sel] & F_COMPLETED, seqs[sel], -1)
        cd = np.maximum.accumulate(done)
        tss = recs["t_start_ns"][sel]
        tes = recs["t_end_ns"][sel]
        lst = np.maximum.accumulate(np.where(seqs[sel] == st, tss, 0))
        lct = np.maximum.accumulate(np.where((done == cd) & (done >= 0), tes, 0))
        state[int(k2[s0])] = (sent[sel], st, cd, lst, lct)
    node_comms = {}
    for cidx, cm in enumerate(job.comms):
        for r in cm["members"]:
            node_comms.setdefault((int(r) // GPN, cidx), []).append(int(r))
    hb_count = 0
    for (nd, cidx), rs in node_comms.items():
        hbs = np.arange(hb_phase[nd] + 1.5, end, 1.0)
        per = []
        for r in rs:
            it = init_time[(r, cidx)]
            kk = r * nc + cidx
            if kk in state:
                f_t, st, cd, lst, lct = state[kk]
                pos = np.searchsorted(f_t, hbs, side="right") - 1
                ok = pos >= 0
                p = np.maximum(pos, 0)
                S_ = np.where(ok, st[p], -1)
                C_ = np.where(ok, cd[p], -1)
                TS = np.where(ok, lst[p], 0)
                TE = np.where(ok & (C_ >= 0), lct[p], 0)
            else:
                S_ = np.full(len(hbs), -1)
                C_ = np.full(len(hbs), -1)
                TS = np.zeros(len(hbs), dtype=np.int64)
                TE = np.zeros(len(hbs), dtype=np.int64)
            TS = np.where(TS == 0, it, TS)
            TE = np.where(TE == 0, it, TE)
            per.append((r, S_, C_, TS, TE))
        ks = f"{jobid}/{comm_hex[cidx]}"
        for q, t in enumerate(hbs):
            tsn = t0n + int(node_clock(job, nd, t) * NS)
            ranks = [{"rank": r, "started": int(S_[q]), "completed": int(C_[q]),
                      "t_last_start_ns": int(TS[q]), "t_last_end_ns": int(TE[q])} for (r, S_, C_, TS, TE) in per]
            msgs.append((tsn, {"topic": "cw.progress.v1", "key": ks, "ts_ns": tsn, "value": {
                "v": 1, "job": jobid, "node": job.node_name[nd], "ts_ns": tsn, "comm": comm_hex[cidx],
                "ranks": ranks}}))
            hb_count += 1
    # iteration timings
    for (r, itn, a0, a1, fw, bw, op) in job.steps:
        nd = int(job.rank_node[r])
        a_ns = t0n + int(node_clock(job, nd, a0) * NS)
        b_ns = max(a_ns + 1, t0n + int(node_clock(job, nd, a1) * NS))
        tsn = t0n + int(node_clock(job, nd, a1 + 0.003) * NS)
        msgs.append((tsn, {"topic": "cw.steps.v1", "key": jobid, "ts_ns": tsn, "value": {
            "v": 1, "job": jobid, "rank": r, "iteration": itn, "t_start_ns": a_ns, "t_end_ns": b_ns,
            "phases": {"forward_ms": round(fw * 1e3, 3), "backward_ms": round(bw * 1e3, 3),
                       "optimizer_ms": round(op * 1e3, 3)}}}))
    check_capture(job, recs, msgs, jobid)
    msgs.sort(key=lambda x: x[0])
    with open(out_path, "w") as fh:
        for _, mm in msgs:
            fh.write(json.dumps(mm, separators=(",", ":")))
            fh.write("\n")
    return t0n, dict(records=int(m), messages=len(msgs), heartbeats=hb_count, steps=len(job.steps))


# ------------------------------------------------------------------------------------------------ checks
def check_capture(job, recs, msgs, jobid):
    """the capture against wire-v1: a failure here is this generator's bug, not the detector's."""
    def fail(msg):
        raise SystemExit(f"[{jobid}] capture check failed: {msg}")
    if not np.all(np.isin(recs["kind"], [1, 2, 3])):
        fail("kind")
    if not np.all((recs["op"] >= 1) & (recs["op"] <= 11)):
        fail("op")
    if np.any(recs["flags"] & ~np.uint16(31)):
        fail("flag bits")
    comp = (recs["flags"] & F_COMPLETED) != 0
    if np.any(comp & (recs["t_end_ns"] < recs["t_start_ns"])):
        fail("t_end < t_start")
    if np.any((~comp) & (recs["t_end_ns"] != 0)):
        fail("t_end set without COMPLETED")
    if np.any(recs["t_start_ns"] <= EPOCH):
        fail("t_start")
    if np.any((recs["comm_rank"] < 0) | (recs["comm_rank"] >= recs["nranks"].astype(np.int64))):
        fail("comm_rank range")
    if np.any((recs["rank"] < 0) | (recs["rank"] >= job.W)):
        fail("rank range")
    if np.any(recs["peer"] != -1):
        fail("peer of an unrooted collective")
    if np.any(((recs["flags"] & F_GPU) != 0) & ((recs["flags"] & F_ENQ) != 0)):
        fail("GPU_TIMED with ENQUEUED")
    if job.probe != "gpu" and np.any(recs["aux"] != 0):
        fail("aux without a plugin")
    # per (rank, comm): one call per seq, seq in call order
    key = recs["rank"].astype(np.int64) * (1 << 40) + (recs["comm"] % np.uint64(1 << 40)).astype(np.int64)
    o = np.lexsort((recs["seq"], key))
    k, s, t = key[o], recs["seq"][o].astype(np.int64), recs["t_start_ns"][o]
    same = k[1:] == k[:-1]
    if np.any(same & (s[1:] < s[:-1])):
        fail("seq order")
    if np.any(same & (s[1:] > s[:-1]) & (t[1:] < t[:-1])):
        fail("seq not in call order")
    # same (rank, comm, seq): same t_start in both records
    dup = same & (s[1:] == s[:-1])
    if np.any(dup & (t[1:] != t[:-1])):
        fail("entry and completion records disagree on t_start")
    # (comm, seq) instance: same op and nranks on every member
    last = {}
    for tsn, mm in sorted(msgs, key=lambda x: x[0]):
        if mm["topic"] == "cw.calls.v1":
            raw = base64.b64decode(mm["value_b64"])
            if raw[:4] != b"CWB1" or (len(raw) - 16) % 64 or \
                    struct.unpack("<I", raw[8:12])[0] != (len(raw) - 16) // 64 or \
                    struct.unpack("<HH", raw[4:8]) != (1, 64):
                fail("batch header")
            rr = np.frombuffer(raw[16:], REC)
            if len(rr) == 0 or np.any(rr["comm"] != rr["comm"][0]) or mm["key"] != f"{jobid}/{int(rr['comm'][0]):016x}":
                fail("batch comm != key")
            continue
        if mm["topic"] != "cw.progress.v1":
            continue
        v = mm["value"]
        for x in v["ranks"]:
            if x["started"] < x["completed"]:
                fail(f"heartbeat started < completed {x}")
            kk = (v["node"], v["comm"], x["rank"])
            p = last.get(kk)
            if p and (x["started"] < p[0] or x["completed"] < p[1]):
                fail(f"heartbeat counters went back {kk}")
            last[kk] = (x["started"], x["completed"])


# ------------------------------------------------------------------------------------------------ truth
def threshold_of(job, onset):
    """the hang threshold as docs/architecture.md and `commwatch config --docs` describe it (defaults):
    max(hang_floor_s 5, hang_step_factor 2 x median step, hang_gap_factor 3 x the longest normal silence of
    any rank, each rank's silence taken on its busiest comm (the least p99 of its comms' intervals between
    its progress: entries and completions)); measured here on the simulated calls before the onset."""
    L = {k: np.concatenate(v) for k, v in job.calls.items()}
    lim = onset if onset is not None else float(job.sc["dur"])
    ent = L["h"] if job.probe != "gpu" else L["a"]
    times = np.concatenate([ent, L["c"]])
    rk = np.concatenate([L["rank"], L["rank"]])
    cm = np.concatenate([L["comm"], L["comm"]])
    ok = np.isfinite(times) & (times < lim)
    times, rk, cm = times[ok], rk[ok], cm[ok]
    key = rk * len(job.comms) + cm
    o = np.lexsort((times, key))
    key, times = key[o], times[o]
    best = {}
    brk = np.concatenate([[0], np.nonzero(np.diff(key))[0] + 1, [len(key)]])
    for s0, s1 in zip(brk[:-1], brk[1:]):
        if s1 - s0 < 3:
            continue
        iv = np.diff(times[s0:s1])
        p99 = float(np.percentile(iv, 99))
        r = int(key[s0]) // len(job.comms)
        best[r] = min(best.get(r, INF), p99)
    silence = max(best.values()) if best else 0.0
    st = [s for s in job.steps if s[3] < lim]
    med = float(np.median([s[3] - s[2] for s in st])) if (st and job.sc.get("steps")) else None
    parts = {"floor": 5.0, "gap": 3.0 * silence}
    if med:
        parts["step"] = 2.0 * med
    thr = max(parts.values())
    return thr, med, silence, parts


def truth_of(job, jobid, t0n, stats):
    sc = job.sc
    end = float(sc["dur"])
    f = sc.get("fault")
    onset = job.onset
    thr, med, sil, parts = threshold_of(job, onset)
    tr = dict(job=jobid, scenario=sc["name"], expect=sc["expect"], world=job.W, prog=job.prog, tp=job.tp,
              probe=job.probe, steps_topic=bool(sc.get("steps")), note=sc["note"], capture_start_ns=t0n,
              capture_end_ns=t0n + int(end * NS), culprits=sorted(job.culprits), onset_ns=None,
              iterations=job.iterations, median_step_s=None if med is None else round(med, 3),
              threshold_s=round(thr, 2), threshold_parts={k: round(v, 2) for k, v in parts.items()},
              threshold_why="max(hang_floor_s 5, 2 x median step (where steps are sent), 3 x the longest normal "
              "silence of any rank on its busiest comm), before the onset", stats=stats)
    ev = [dict(what=e[0], rank=e[1], t0_s=round(e[2], 2), t1_s=(round(e[3], 2) if np.isfinite(e[3]) else None))
          for e in job.events if e[0] != "eval_all"]
    tr["host_events"] = ev[:60]
    tr["culprit_nodes"] = sorted({job.node_name[r // GPN] for r in job.culprits})
    if not f:
        tr["waitfor"] = "healthy: every pause is the training loop's own (no rank is a culprit)"
        return tr
    if onset is None:
        raise SystemExit(f"[{jobid}] the fault of {sc['name']} never struck")
    tr["onset_ns"] = t0n + int(onset * NS)
    tr["onset_s"] = round(onset, 2)
    X = job.culprits
    k = f["kind"]
    if k in ("hang", "stall"):
        grace = 0.0
        why = "threshold + 2 s"
        if f["point"] == "epoch_fetch":
            others = [e for e in job.events if e[0] == "epoch_stall"]
            # the other ranks' stall at this epoch start: they come back, then wait
            grace = max(0.0, others[-1][3] - others[-1][2]) * 1.1 if others else 0.0
            why = ("the others' epoch-start loader stall (they start waiting only when they return) + "
                   "threshold + 2 s")
        elif f["point"] == "compile":
            cs = [e for e in job.events if e[0] == "recompile_all"]
            grace = (cs[-1][3] - cs[-1][2]) * 1.1 if cs else 0.0
            why = "the others' recompilation (they wait only once compiled) + threshold + 2 s"
        if f["point"] == "eval_r0":
            prev = [e[3] - e[2] for e in job.events if e[0] == "eval_r0" and np.isfinite(e[3])]
            longest = max(prev) if prev else 0.0
            tr["previous_evals_s"] = [round(x, 2) for x in prev]
            tr["deadline_s"] = round(max(thr, 2 * longest) + 2.0, 2)
            tr["deadline_why"] = ("docs: a routine hold of the same roots is named once it lasts twice the "
                                  "longest seen (HOLD_FACTOR): max(threshold, 2 x longest earlier rank-0 "
                                  "eval) + 2 s from the onset (the start of the eval that never ends)")
        else:
            tr["deadline_s"] = round(grace + thr + 2.0, 2)
            tr["deadline_why"] = why
        tr["kind"] = "hang"
        r = X[0]
        if k == "stall":
            tr["end_ns"] = t0n + int(job.stall_end * NS)
            tr["end_s"] = round(job.stall_end, 2)
            tr["waitfor"] = (f"rank {r}'s host blocks {f['length']:.0f} s in a lock at {onset:.1f} s: it enqueues "
                             f"nothing, its device drains what was queued and idles, inside no call: the root. "
                             f"Its peers enter the next call it lacks and wait (hard wait on {r}); all other "
                             f"ranks wait on them. At {job.stall_end:.1f} s it runs on and the job recovers: one "
                             f"incident, resolved after that.")
        else:
            tr["waitfor"] = (f"rank {r} stops at {onset:.1f} s in host code ({f['point']}) and never enters "
                             f"another call: the root, inside no call. Its peers wait in the first collective "
                             f"it never entered; the rest wait on them (soft). Every wait ends at {r}.")
        return tr
    # slow kinds: the job's cost
    st = np.array([(s[0], s[2], s[3]) for s in job.steps]) if job.steps else None
    if k == "storm":
        tr["kind"] = "slow_rank"
        rc = [e for e in job.events if e[0] == "recompile" and e[1] == X[0]]
        tr["recompiles"] = [dict(t_s=round(e[2], 1), len_s=round(e[3] - e[2], 1)) for e in rc]
        tr["waitfor"] = (f"rank {X[0]} recompiles 3-6 s before its forward on ~70 % of iterations from "
                         f"{onset:.1f} s ({len(rc)} times), then runs eager 1.3x: it is inside no call while "
                         f"its TP peers wait inside their first forward all-reduce and all other ranks in DP; "
                         f"it waits on nobody: the culprit; its peers are victims. Transient stalls under "
                         f"the hang threshold repeated: a slow rank (or a hang per stall), never its peers.")
    elif k == "slow_adam":
        tr["kind"] = "slow_rank"
        tr["factor"] = f["factor"]
        tr["waitfor"] = (f"rank {X[0]}'s CPU Adam {f['factor']}x slower from {onset:.1f} s: it enters every "
                         f"parameter all-gather last, its {job.W - 1} DP peers wait inside it; its phases: "
                         f"optimizer longer (the others' optimizer phase holds their wait in the all-gather).")
    elif k == "contention":
        tr["kind"] = "slow_rank"
        tr["factor"] = f["factor"]
        tr["waitfor"] = (f"ranks {X} (node {job.node_name[X[0] // GPN]}, one in each of its TP groups) run "
                         f"Python {f['factor']}x slower from {onset:.1f} s: launch-bound, their devices enter "
                         f"every TP all-reduce last (their 3+3 TP peers wait inside), their TP groups reach "
                         f"the DP buckets last (every other rank waits there). Victims: the TP peers and all "
                         f"DP peers.")
    if st is not None and len(st):
        pre = st[(st[:, 1] < onset) & (st[:, 1] > onset - 30)]
        post = st[st[:, 1] > onset + 10]
        if len(pre) and len(post):
            tr["job_step_s_before"] = round(float(np.median(pre[:, 2] - pre[:, 1])), 3)
            tr["job_step_s_after"] = round(float(np.median(post[:, 2] - post[:, 1])), 3)
            tr["job_cost"] = round(1 - tr["job_step_s_before"] / tr["job_step_s_after"], 3)
    return tr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("prefix", nargs="*")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for sc in SCEN:
        if args.prefix and not any(sc["name"].startswith(p) for p in args.prefix):
            continue
        sc = json.loads(json.dumps(sc))
        jobid = f"hs-{sc['name'].split('_')[0]}-s{args.seed}"
        job = Job(sc, args.seed)
        job.run()
        path = os.path.join(args.out, sc["name"] + ".cwcap")
        t0n, stats = emit(job, path, jobid)
        tr = truth_of(job, jobid, t0n, stats)
        with open(os.path.join(args.out, sc["name"] + ".truth.json"), "w") as fh:
            json.dump(tr, fh, indent=1)
        mb = os.path.getsize(path) / 1e6
        print(f"{sc['name']:34s} {job.W:4d} ranks {job.iterations:4d} it {stats['records']:8d} records "
              f"{stats['messages']:7d} msgs {mb:6.1f} MB thr={tr['threshold_s']:5.1f}s "
              f"culprits={tr['culprits']} onset={tr.get('onset_s')}", flush=True)


if __name__ == "__main__":
    main()
