#!/usr/bin/env python3
"""runtime/: an independent traffic generator for commwatch - behaviours of the NCCL / PyTorch distributed
runtime itself (coalesced collectives, object collectives, comm splits, lazy connection setup, mixed probes,
side-comm barriers, the network proxy thread, InfiniBand retries, collective desync).

Written from the wire spec (/work/shared/spec/wire-v1.md), DOMAIN.md, the READMEs, docs/*.md, run_scored.sh
and islands/ (for its CLI, capture, truth and scoring conventions) only; it shares no code with commwatch and
encodes the call records of spec section 1 / 2.1 itself with numpy.

    python gen.py --out DIR --seed N [SCENARIO-PREFIX ...]

The model (one job per capture):
- W = TP x PP x DP ranks, 8 a node, rank = dp*(PP*TP) + pp*TP + tp (TP fastest). Comms: TP groups, DP groups,
  PP groups (send/recv between neighbour stages), the world comm (init barrier, object collectives, desync
  barrier), optionally a side comm (a barrier comm) and comms created mid-run. With TP = PP = 1 the DP comm
  is the world comm (plain DDP).
- Every iteration, per rank, in issue order: the host syncs on the previous iteration's end (loss.item()),
  loads data (2-8 ms host), optional object collectives; forward per micro-batch and stage (recv from the
  previous stage, compute, 2 TP all-reduces, send on), backward reversed; then the DP gradient reduction:
  buckets of all-reduces, issued one by one or COALESCED (torch `_coalescing_manager` / ncclGroupStart..End:
  k all-reduces launched as one kernel, so their GPU-timed records share device start and end, and under a
  host-enqueue hook their completion is observed by one work object, at one time); a grad-norm all-reduce
  on the TP comm; the optimizer; optional extras (checkpoint barrier, a comm split, a comm used every step).
- One device stream per rank (all comms serialised, a simplification); the host runs ahead of the device by
  at most one iteration; a collective completes on every member at max(device arrivals) + transfer;
  a send is asynchronous for the sender (its stream does not wait), the matching recv blocks the receiver's
  stream until max(send posted, recv posted) + transfer.
- Probes per node: 'gpu' (the NCCL profiler plugin, GPU-timed: t_start/t_end are device times; one completed
  record per call, and an entry record without COMPLETED for a call still open after the plugin's sweep
  period 0.2-0.5 s) or 'enq' (the PyTorch hook: ENQUEUED entry at host enqueue, ENQUEUED|COMPLETED once its
  CUDA event is observed 1-15 ms after the device finished). Node agents flush a call batch per comm every
  200 ms, heartbeat every 1 s per comm from the comm's creation (p2p counters for ranks with send/recv),
  topology (with coords) at start, iteration timings (cw.steps.v1) where stated.
- Clocks: every node +-6 ms off, drift +-8 ppm; a record's two times use the offset at its start.

Scenarios and why their truth is what it is (the wait-for reasoning, in each truth.json too):
- c01 coalesced DDP, 256 ranks: 8 gradient buckets as 2 coalesced groups of 4. Healthy: all waits short.
- c02 object collectives under host-enqueue: every 10 steps all_gather_object (8-byte size all-gather,
  .item() host sync, payload all-gather, host sync), every 25 broadcast_object_list from rank 0. Healthy.
- c03 a comm split mid-run (dist.new_group / ncclCommSplit of the world comm, every rank calls it, host
  blocked ~0.3 s), new comm ids with COMM_INIT mid-run, then a small all-reduce on them every step. Healthy.
- c04 lazy connection setup (NCCL_RUNTIME_CONNECT): every comm's first collective takes 1-5 s on every rank
  (all members entered, none completes for seconds, then all do), and an evaluation comm created lazily at
  ~55 s, used every 20 steps by its members, whose first call also takes 3-5 s. Host-enqueue. Healthy.
- c05 mixed probes: nodes 0 and 2 GPU-timed plugin, nodes 1 and 3 host-enqueue hook, coalesced DP. Healthy.
- c06 rank 0 writes checkpoint metadata for 4-7 s every 50 steps (0.4 s steps) before a barrier that is a
  1-element all-reduce on a side comm: the other 15 ranks wait inside it 4-7 s each time. Periodic by
  design, the job progresses: a control (no P0/P1 allowed).
- c07 an InfiniBand link of node 5 flapping: every 12-20 s, for 1.5-4 s, NCCL retries its queue pairs and
  every inter-node transfer touching node 5 stalls until the link is back. Decision: an infrastructure
  fault, not a rank's and not a hang (every call completes): expect 'slow_link' - nothing may page as a
  hang, and no rank may be named except node 5's ranks in a slow_link / hw_fault incident; silence passes.
- c08 NCCL's proxy thread starved by host CPU contention on node 3 from 40 s: that node's inter-node
  transfers are 1.7x slower (its intra-node TP all-reduces are not). Every DP ring includes node 3, so every
  DP all-reduce of the job is slower, nobody arrives later: expect 'slow_link' as c07 (node 3's ranks).
- s01 coalesced DDP (64 ranks) with rank 37's GPU 1.5x slower from 40 s: it enters every coalesced group
  last, the 63 others wait inside it: culprit 37 alone.
- s02 Megatron TP4 x PP4 x DP4, coalesced DP reduce, rank 22 (dp 1, pp 1, tp 2) 1.3x from 45 s; s03 TP8 x
  PP2 x DP8 (128 ranks), rank 77 1.6x from 40 s. The culprit is late in its TP all-reduces (its TP peers wait
  in them), its stage's sends are late (the next stage waits in recv in forward, the previous one in
  backward), its TP group reaches the coalesced DP reduce last (the other replicas wait). Its TP peers look
  late in DP and PP but wait on it in TP: victims. Culprit: the rank alone.
- s04 mixed probes (c05) with rank 13 (a host-enqueue node) 1.5x from 45 s: its GPU-timed DP peers wait
  inside every DP all-reduce on it, its TP peers (host-enqueue) too; iteration timings show its compute.
- h01 collective desync, GPU-timed, TP8 x DP4: at ~50 s `if rank == 0: dist.barrier()` (a 1-element
  all-reduce on the world comm, host blocked in it). Rank 0 enters world-comm call k; nobody else ever does.
  Rank 0's TP peers enter the next TP all-reduce and wait on rank 0 (which is in the barrier); the other
  replicas wait on them in the DP reduce. Rank 0 waits on the 31 others in the barrier, they all wait on
  rank 0: a deadlock cycle whose divergent member - the rank that called what nobody else calls - is
  rank 0. Culprit: [0]. Onset: rank 0 entering the barrier.
- h02 the same desync under the host-enqueue hook (records carry op BARRIER), TP4 x PP2 x DP4, rank 13.
- h03 coalesced DDP (64 ranks, GPU-timed): rank 45's host stops (a Python deadlock) just before the second
  coalesced group of an iteration at ~50 s. The 63 others launch the group: 4 all-reduces entered together
  on every member but 45, none completes; 45 is inside no call (it completed the first group). Culprit 45.
- h04 all_gather_object under host-enqueue (32 ranks): at the first object round after 45 s rank 9 enters
  and completes the size all-gather, then its host hangs unpickling; the others enter the payload
  all-gather (call k+1 of the world comm), which 9 never enters. Culprit 9, inside no call.
- h05 broadcast_object_list from rank 0 (GPU-timed, TP8 x DP4): at the first round after 50 s rank 0
  completes the size broadcast, then hangs building the payload; the others enter the payload broadcast
  (rooted at 0) and wait on it. Culprit 0.
- h06 mixed probes (c05): rank 26 (a host-enqueue node) hangs in backward at ~55 s before a TP all-reduce:
  its TP peers wait in it, the GPU-timed replicas wait in the DP reduce. Culprit 26.
Simplified / left out: DDP's overlap of bucket reduces with backward (reduces run after backward), one
device stream per rank, no NVML / IB samples, no COMM_DESTROY, GRAPH_CAPTURED never set.
"""
import argparse
import base64
import json
import os
import struct
import zlib

import numpy as np

NS = 1_000_000_000
EPOCH = 1_798_761_600 * NS   # 2027-01-01 UTC
INF = np.inf
OP_AR, OP_AG, OP_RS, OP_BC = 1, 2, 3, 4
OP_SEND, OP_RECV, OP_BARRIER = 6, 7, 9
ROOTED = (4, 5, 10, 11)
F_COMPLETED, F_GPU, F_GRAPH, F_ENQ, F_LOST = 1, 2, 4, 8, 16
K_CALL, K_INIT = 1, 2

# spec section 1, built here from its table
REC = np.dtype([("kind", "<u1"), ("op", "<u1"), ("flags", "<u2"), ("rank", "<i4"), ("comm", "<u8"),
                ("seq", "<u8"), ("t_start_ns", "<i8"), ("t_end_ns", "<i8"), ("bytes", "<u8"),
                ("comm_rank", "<i4"), ("peer", "<i4"), ("nranks", "<u4"), ("aux", "<u4")])
assert REC.itemsize == 64 and REC.fields["aux"][1] == 60 and REC.fields["comm_rank"][1] == 48
assert REC.fields["t_start_ns"][1] == 24 and REC.fields["bytes"][1] == 40 and REC.fields["peer"][1] == 52


def batch_bytes(recs):
    return b"CWB1" + struct.pack("<HHII", 1, 64, len(recs), 0) + recs.tobytes()


SCEN = []


def S(name, **kw):
    base = dict(tp=1, pp=1, dp=16, M=4, T=1.0, dur=100, nb=8, k=1, probe="gpu", steps=False, expect="control",
                fault=None, obj_every=0, bcast_every=0, ckpt_every=0, split_at=None, lazy=False, eval_at=None,
                net=None)
    base.update(kw)
    SCEN.append(dict(name=name, **base))


# --- healthy controls
S("c01_coalesced_ddp_256", dp=256, T=0.8, dur=70, nb=8, k=4, steps=True,
  note="DDP over 256 ranks, 8 buckets coalesced into 2 groups of 4 all-reduces (one kernel each)")
S("c02_object_collectives_hostenq", dp=32, T=0.5, dur=90, nb=6, k=1, probe="enq", obj_every=10,
  bcast_every=25, steps=True,
  note="all_gather_object every 10 steps, broadcast_object_list from rank 0 every 25, host-enqueue hook")
S("c03_comm_split_midrun", tp=8, dp=4, T=0.6, dur=100, nb=6, k=3, split_at=45.0,
  note="ncclCommSplit of the world comm into two 16-rank comms at ~45 s (every rank calls it), then one "
  "small all-reduce on the new comm every step")
S("c04_lazy_connect_hostenq", tp=4, pp=2, dp=4, T=1.0, dur=110, nb=6, k=2, probe="enq", lazy=True,
  eval_at=55.0, steps=True,
  note="runtime connection setup: every comm's first collective 1-5 s on every rank; an eval comm (tp==0 "
  "ranks) created lazily at ~55 s, used every 20 steps, its first call 3-5 s")
S("c05_mixed_probes", tp=8, dp=4, T=0.7, dur=100, nb=6, k=3, probe=["gpu", "enq", "gpu", "enq"], steps=True,
  note="nodes 0 and 2 GPU-timed plugin, nodes 1 and 3 host-enqueue hook; coalesced DP reduce")
S("c06_ckpt_barrier_side_comm", dp=16, T=0.4, dur=120, nb=4, k=1, ckpt_every=50,
  note="rank 0 writes checkpoint metadata 4-7 s every 50 steps, then a 1-element all-reduce barrier on a "
  "side comm; the 15 others wait inside it")
S("c07_ib_flap_retries", tp=8, pp=2, dp=4, T=1.0, dur=110, nb=6, k=3, expect="slow_link", steps=True,
  net=dict(kind="flap", node=5, first=25.0, every=(12.0, 20.0), length=(1.5, 4.0)),
  note="node 5's IB link flaps every 12-20 s for 1.5-4 s; NCCL retries: its inter-node transfers stall")
S("c08_proxy_thread_starved", tp=8, dp=8, T=0.8, dur=100, nb=8, k=4, expect="slow_link",
  net=dict(kind="proxy", node=3, at=40.0, factor=1.7),
  note="host CPU contention on node 3 starves NCCL's proxy thread from 40 s: its inter-node transfers 1.7x")
# --- slow ranks
S("s01_coalesced_slow_gpu", dp=64, T=0.8, dur=100, nb=8, k=4, expect="slow_rank", steps=True,
  fault=dict(kind="slow", rank=37, at=40.0, factor=1.5), note="coalesced DDP, rank 37's GPU 1.5x from 40 s")
S("s02_megatron_coalesced_slow13", tp=4, pp=4, dp=4, T=1.6, M=4, dur=110, nb=8, k=4, expect="slow_rank",
  steps=True, fault=dict(kind="slow", rank=22, at=45.0, factor=1.3),
  note="TP4 x PP4 x DP4, coalesced DP reduce, rank 22 1.3x from 45 s")
S("s03_megatron_coalesced_slow16", tp=8, pp=2, dp=8, T=1.2, M=4, dur=90, nb=8, k=4, expect="slow_rank",
  steps=True, fault=dict(kind="slow", rank=77, at=40.0, factor=1.6),
  note="TP8 x PP2 x DP8 (128 ranks), coalesced DP reduce, rank 77 1.6x from 40 s")
S("s04_mixed_probes_slow_enq", tp=8, dp=4, T=0.7, dur=100, nb=6, k=3, probe=["gpu", "enq", "gpu", "enq"],
  steps=True, expect="slow_rank", fault=dict(kind="slow", rank=13, at=45.0, factor=1.5),
  note="mixed probes, rank 13 on a host-enqueue node 1.5x from 45 s")
# --- hangs
S("h01_desync_barrier_rank0_gpu", tp=8, dp=4, T=0.6, dur=90, nb=6, k=3, expect="hang",
  fault=dict(kind="desync", rank=0, at=50.0), note="`if rank == 0: dist.barrier()` at ~50 s, GPU-timed")
S("h02_desync_barrier_hostenq", tp=4, pp=2, dp=4, T=0.8, dur=100, nb=6, k=2, probe="enq", expect="hang",
  steps=True, fault=dict(kind="desync", rank=13, at=55.0),
  note="rank 13 alone calls dist.barrier() on a conditional path at ~55 s, host-enqueue hook")
S("h03_coalesced_group_hang_gpu", dp=64, T=0.8, dur=90, nb=8, k=4, expect="hang", steps=True,
  fault=dict(kind="hang", rank=45, at=50.0, point="dp_group1"),
  note="rank 45's host stops just before the 2nd coalesced group at ~50 s; the others' group waits")
S("h04_allgather_object_hang_hostenq", dp=32, T=0.5, dur=90, nb=6, probe="enq", obj_every=10, expect="hang",
  fault=dict(kind="hang", rank=9, at=45.0, point="obj_mid"),
  note="rank 9 hangs between the size and the payload all-gather of all_gather_object")
S("h05_broadcast_object_root_hang_gpu", tp=8, dp=4, T=0.6, dur=90, nb=6, k=3, bcast_every=20, expect="hang",
  fault=dict(kind="hang", rank=0, at=50.0, point="bcast_mid"),
  note="broadcast_object_list root rank 0 hangs between the size and the payload broadcast")
S("h06_mixed_probes_hang_enq", tp=8, dp=4, T=0.7, dur=100, nb=6, k=3, probe=["gpu", "enq", "gpu", "enq"],
  expect="hang", steps=True, fault=dict(kind="hang", rank=26, at=55.0, point="bwd"),
  note="mixed probes, rank 26 (host-enqueue node) hangs in backward before a TP all-reduce")


# ------------------------------------------------------------------------------------------------ simulator
class Sim:
    def __init__(self, sc, seed):
        self.sc = sc
        self.rng = rng = np.random.default_rng([seed, zlib.crc32(sc["name"].encode())])
        TP, PP, DP = sc["tp"], sc["pp"], sc["dp"]
        self.TP, self.PP, self.DP = TP, PP, DP
        self.W = W = TP * PP * DP
        assert W % 8 == 0
        self.nn = W // 8
        r = np.arange(W)
        self.c_tp, self.c_pp, self.c_dp = r % TP, (r // TP) % PP, r // (TP * PP)
        self.node = r // 8
        pr = sc["probe"]
        self.isgpu = np.array([(pr if isinstance(pr, str) else pr[n % len(pr)]) == "gpu" for n in self.node])
        self.node_name = [f"rt{zlib.crc32(sc['name'].encode()) % 100:02d}-n{j:03d}" for j in range(self.nn)]
        self.node_off = rng.uniform(-0.006, 0.006, self.nn)
        self.node_drift = rng.uniform(-8e-6, 8e-6, self.nn)
        self.comms = []          # global comm table: dict(id, members, fam, created(per-rank dict), lazy)
        self.fam = {}
        self.used_ids = set()
        self.init_t = {}   # (gid, rank) -> true time of COMM_INIT
        rank_of = lambda d, p, t: d * PP * TP + p * TP + t
        if TP * PP > 1:
            self.add_fam("world", [list(range(W))])
            if TP > 1:
                self.add_fam("tp", [[rank_of(d, p, t) for t in range(TP)] for d in range(DP) for p in range(PP)])
            if PP > 1:
                self.add_fam("pp", [[rank_of(d, p, t) for p in range(PP)] for d in range(DP) for t in range(TP)])
            self.add_fam("dp", [[rank_of(d, p, t) for d in range(DP)] for p in range(PP) for t in range(TP)])
        else:
            self.add_fam("world", [list(range(W))])
            self.fam["dp"] = self.fam["world"]
        if sc["ckpt_every"]:
            self.add_fam("side", [list(range(W))])
        self.calls = {k: [] for k in ("rank", "gid", "seq", "op", "h", "a", "c", "bytes", "crank", "peer",
                                      "nranks", "aux")}
        self.steps = []
        self.events = []
        self.dev = np.full(W, 2.0) + rng.uniform(0, 0.03, W)
        self.host = self.dev - 0.005
        self.f = sc["fault"]
        self.onset = None
        self.flaps = []
        net = sc["net"]
        if net and net["kind"] == "flap":
            t = net["first"]
            while t < sc["dur"]:
                L = rng.uniform(*net["length"])
                self.flaps.append((t, t + L))
                t += L + rng.uniform(*net["every"])

    def add_fam(self, name, groups, created=None, lazy=None):
        rng = self.rng
        M = np.array(groups, dtype=np.int64)
        gids = []
        for g in M:
            while True:
                cid = int(rng.integers(1, 2**63))
                if cid not in self.used_ids:
                    self.used_ids.add(cid)
                    break
            gids.append(len(self.comms))
            self.comms.append(dict(id=cid, members=g, fam=name))
        nodes = self.node[M]
        inter = np.array([len(set(x)) > 1 for x in nodes])
        lz = self.sc["lazy"] if lazy is None else lazy
        F = dict(members=M, gids=np.array(gids), seq=np.zeros(M.shape, np.int64), inter=inter, nodes=nodes,
                 opcount={}, first=np.full(len(M), bool(lz)),
                 p2p=np.zeros((len(M), M.shape[1], M.shape[1], 2), np.int64))
        self.fam[name] = F
        if not lz:
            t0 = 1.0 if created is None else None
            for gi, g in enumerate(M):
                for r in g:
                    self.init_t[(gids[gi], int(r))] = (1.0 + 0.3 * ((int(r) * 7919) % 97) / 97.0) if t0 else \
                        float(created[int(r)])
        return F

    # ------------------------------------------------------------- helpers
    def speed(self, R):
        s = np.ones(len(R))
        f = self.f
        if f and f["kind"] == "slow":
            k = R == f["rank"]
            s[k & (self.dev[R] >= f["at"])] = f["factor"]
        return s

    def compute(self, R, dur, jit):
        self.dev[R] = self.dev[R] + dur * self.speed(R) * jit * self.rng.lognormal(0, 0.02, len(R))
        self.host[R] = self.host[R] + self.rng.uniform(0.0005, 0.002, len(R))

    def maybe_hang(self, point, R=None):
        f = self.f
        if not f or f["kind"] != "hang" or f["point"] != point or self.onset is not None:
            return
        X = f["rank"]
        if R is not None and X not in R:
            return
        if self.host[X] >= f["at"]:
            self.onset = float(self.host[X])
            self.events.append(("hang", X, self.onset, point))
            self.host[X] = INF

    def net_xfer(self, F, gsel, a_max, xfer):
        """apply the network fault to inter-node groups touching the faulty node; returns completion."""
        C = a_max + xfer
        net = self.sc["net"]
        if not net:
            return C
        touch = F["inter"][gsel] & np.any(F["nodes"][gsel] == net["node"], axis=1)
        if net["kind"] == "proxy":
            slow = touch & (a_max >= net["at"])
            C = np.where(slow, a_max + xfer * net["factor"], C)
        else:
            for (w0, w1) in self.flaps:
                hit = touch & (a_max < w1) & (C > w0)
                C = np.where(hit, np.maximum(C, w1) + xfer * 0.5, C)
        return C

    def record(self, R, gid, seq, op, h, a, c, nbytes, crank, peer, nranks, aux):
        n = len(R)
        L = self.calls
        L["rank"].append(np.asarray(R, np.int64))
        L["gid"].append(np.broadcast_to(gid, n).astype(np.int64))
        L["seq"].append(np.broadcast_to(seq, n).astype(np.int64))
        L["op"].append(np.full(n, op))
        for k, v in (("h", h), ("a", a), ("c", c)):
            L[k].append(np.broadcast_to(np.asarray(v, float), n).copy())
        L["bytes"].append(np.full(n, int(nbytes), np.int64))
        L["crank"].append(np.broadcast_to(crank, n).astype(np.int64))
        L["peer"].append(np.broadcast_to(peer, n).astype(np.int64))
        L["nranks"].append(np.broadcast_to(nranks, n).astype(np.int64))
        L["aux"].append(np.broadcast_to(aux, n).astype(np.int64))

    def coll(self, fam, ops, xfer, gsel=None, root=-1, sync=False):
        """collective(s) on the groups gsel of family fam; ops = [(op, bytes)] (several: one coalesced
        kernel). Returns the member matrix."""
        F = self.fam[fam]
        if gsel is None:
            gsel = np.arange(len(F["members"]))
        M = F["members"][gsel]
        G, n = M.shape
        flat = M.ravel()
        rng = self.rng
        h = self.host[flat]
        hs = []
        for _ in ops:
            h = h + rng.uniform(5e-5, 3e-4, flat.size)
            hs.append(h)
        a = np.maximum(self.dev[flat], hs[-1]).reshape(G, n)
        amax = a.max(axis=1)
        xf = np.broadcast_to(np.asarray(xfer, float), (G,)) * rng.uniform(0.9, 1.1, G)
        first = F["first"][gsel]
        setup = np.where(first, rng.uniform(*((1.0, 2.0) if fam == "tp" else (2.0, 5.0)), G), 0.0)
        if np.any(first):
            for gi in np.nonzero(first)[0]:
                for j, r in enumerate(M[gi]):
                    key = (int(F["gids"][gsel][gi]), int(r))
                    if key not in self.init_t and np.isfinite(hs[0][gi * n + j]):
                        self.init_t[key] = float(hs[0][gi * n + j]) - 0.0002
            F["first"][gsel] = False
        C = self.net_xfer(F, gsel, amax, xf) + setup
        c = C[:, None] + rng.uniform(2e-6, 60e-6, (G, n))
        c = np.where(np.isfinite(C)[:, None], c, INF).ravel()
        # the host blocks in connection setup of a lazily connected comm (inside its first call)
        blk = np.repeat(first, n)
        self.host[flat] = np.where(blk & np.isfinite(hs[-1]), np.maximum(hs[-1], np.repeat(amax + setup, n)),
                                   hs[-1])
        self.dev[flat] = c
        gid = np.repeat(F["gids"][gsel], n)
        crank = np.tile(np.arange(n), G)
        seq0 = F["seq"][gsel].ravel()
        for j, (op, nbytes) in enumerate(ops):
            cnt = F["opcount"].setdefault(op, np.zeros(len(F["members"]), np.int64))
            aux = np.repeat(cnt[gsel], n)
            self.record(flat, gid, seq0 + j, op, hs[j], a.ravel(), c, nbytes, crank,
                        root if op in ROOTED else -1, n, aux)
            cnt[gsel] += 1
        F["seq"][gsel] += len(ops)
        if sync:
            self.host[flat] = np.maximum(self.host[flat], c)
        return M

    def solo(self, fam, X, op, nbytes):
        """rank X alone calls a collective on fam (group containing X): it never completes (desync)."""
        F = self.fam[fam]
        gi = int(np.nonzero(np.any(F["members"] == X, axis=1))[0][0])
        j = int(np.nonzero(F["members"][gi] == X)[0][0])
        h = self.host[X] + 0.0002
        a = max(self.dev[X], h)
        cnt = F["opcount"].setdefault(op, np.zeros(len(F["members"]), np.int64))
        self.record([X], F["gids"][gi], F["seq"][gi, j], op, h, a, INF, nbytes, j, -1, F["members"].shape[1],
                    cnt[gi])
        F["seq"][gi, j] += 1
        cnt[gi] += 1
        self.dev[X] = INF
        self.host[X] = INF
        return h

    def p2p(self, fam, gsel, s_idx, r_idx, a_s, h_s, nbytes, xfer):
        """sends from comm rank s_idx to r_idx in groups gsel (posted at a_s / h_s on the senders), matched by
        the receivers now. Senders' streams do not wait; the receivers' do."""
        F = self.fam[fam]
        M = F["members"][gsel]
        G, n = M.shape
        src = M[:, s_idx]
        dst = M[:, r_idx]
        rng = self.rng
        h_r = self.host[dst] + rng.uniform(5e-5, 3e-4, G)
        self.host[dst] = h_r
        a_r = np.maximum(self.dev[dst], h_r)
        amax = np.maximum(a_s, a_r)
        xf = xfer * rng.uniform(0.9, 1.1, G)
        C = amax + xf
        net = self.sc["net"]
        if net:
            touch = (self.node[src] != self.node[dst]) & ((self.node[src] == net["node"]) |
                                                         (self.node[dst] == net["node"]))
            if net["kind"] == "proxy":
                C = np.where(touch & (amax >= net["at"]), amax + xf * net["factor"], C)
            else:
                for (w0, w1) in self.flaps:
                    hit = touch & (amax < w1) & (C > w0)
                    C = np.where(hit, np.maximum(C, w1) + xf * 0.5, C)
        c = np.where(np.isfinite(C), C + rng.uniform(2e-6, 40e-6, G), INF)
        gid = F["gids"][gsel]
        sq_s = F["p2p"][gsel, s_idx, r_idx, 0]
        sq_r = F["p2p"][gsel, r_idx, s_idx, 1]
        self.record(src, gid, sq_s, OP_SEND, h_s, a_s, c, nbytes, s_idx, r_idx, n, 0)
        self.record(dst, gid, sq_r, OP_RECV, h_r, a_r, c, nbytes, r_idx, s_idx, n, 0)
        F["p2p"][gsel, s_idx, r_idx, 0] += 1
        F["p2p"][gsel, r_idx, s_idx, 1] += 1
        self.dev[dst] = c

    # ------------------------------------------------------------- the run
    def run(self):
        sc, rng = self.sc, self.rng
        TP, PP, DP, W = self.TP, self.PP, self.DP, self.W
        T, Mb, end = sc["T"], sc["M"], float(sc["dur"])
        allr = np.arange(W)
        # init barrier on the world comm (torchrun scripts do one after init_process_group)
        self.host[:] = 1.6 + rng.uniform(0, 0.05, W)
        self.coll("world", [(OP_AR, 4)], 0.002, sync=True)
        self.dev = np.maximum(self.dev, self.host)
        prev_end = self.dev.copy()
        stage = [np.nonzero(self.c_pp == s)[0] for s in range(PP)]
        tpF = self.fam.get("tp")
        tp_g_stage = [np.nonzero(self.c_pp[tpF["members"][:, 0]] == s)[0] for s in range(PP)] if tpF else None
        ppF = self.fam.get("pp")
        fwd_c, bwd_c, opt_c = 0.30 * T / Mb, 0.52 * T / Mb, 0.05 * T
        tp_x = 0.004 * T
        bucket_b = 100 << 20
        per_bucket = 0.022 * T if DP > 1 else 0.002
        split_done = sc["split_at"] is None
        eval_F = None
        it = 0
        while it < 5000:
            live = np.minimum(self.dev, self.host)
            if not np.any(np.isfinite(live) & (live < end)):
                break
            jit = rng.lognormal(0, 0.03)
            # loss.item() of the previous iteration, data loading
            self.host = np.maximum(self.host, prev_end) + rng.uniform(0.002, 0.008, W)
            self.maybe_hang("iter")
            it_start = prev_end.copy()
            # object collectives on the world comm
            if sc["obj_every"] and it % sc["obj_every"] == 0 and it > 0:
                self.coll("world", [(OP_AG, 8 * W)], 0.0008, sync=True)      # sizes, then .item()
                self.host = self.host + rng.uniform(0.0005, 0.003, W)       # pickle / unpickle
                self.maybe_hang("obj_mid")
                self.coll("world", [(OP_AG, 4096 * W)], 0.002, sync=True)   # payload, then .cpu()
            if sc["bcast_every"] and it % sc["bcast_every"] == 0 and it > 0:
                self.coll("world", [(OP_BC, 8)], 0.0006, root=0, sync=True)
                self.host = self.host + rng.uniform(0.0005, 0.002, W)
                self.maybe_hang("bcast_mid")
                self.coll("world", [(OP_BC, 65536)], 0.001, root=0, sync=True)
            # forward
            pend = {}
            for m in range(Mb):
                for s in range(PP):
                    R = stage[s]
                    if s > 0:
                        a_s, h_s = pend.pop((m, s - 1))
                        self.p2p("pp", np.arange(len(ppF["members"])), s - 1, s, a_s, h_s, 16 << 20, 0.004)
                    for half in range(2):
                        self.compute(R, fwd_c / 2, jit)
                        if TP > 1:
                            self.coll("tp", [(OP_AR, 32 << 20)], tp_x, gsel=tp_g_stage[s])
                    if s < PP - 1:
                        snd = ppF["members"][:, s]
                        h_s = self.host[snd] + rng.uniform(5e-5, 3e-4, len(snd))
                        self.host[snd] = h_s
                        pend[(m, s)] = (np.maximum(self.dev[snd], h_s), h_s)
            t_fwd = self.dev.copy()
            # backward
            pend = {}
            for m in range(Mb):
                for s in range(PP - 1, -1, -1):
                    R = stage[s]
                    if s < PP - 1:
                        a_s, h_s = pend.pop((m, s + 1))
                        self.p2p("pp", np.arange(len(ppF["members"])), s + 1, s, a_s, h_s, 16 << 20, 0.004)
                    for half in range(2):
                        if m == Mb - 1 and half == 1:
                            self.maybe_hang("bwd", R)
                        self.compute(R, bwd_c / 2, jit)
                        if TP > 1:
                            self.coll("tp", [(OP_AR, 32 << 20)], tp_x, gsel=tp_g_stage[s])
                    if s > 0:
                        snd = ppF["members"][:, s]
                        h_s = self.host[snd] + rng.uniform(5e-5, 3e-4, len(snd))
                        self.host[snd] = h_s
                        pend[(m, s)] = (np.maximum(self.dev[snd], h_s), h_s)
            # gradient reduction on the DP comms: buckets, coalesced k at a time
            k = sc["k"]
            for g in range(0, sc["nb"], k):
                self.maybe_hang(f"dp_group{g // k}")
                nk = min(k, sc["nb"] - g)
                self.coll("dp", [(OP_AR, bucket_b)] * nk, per_bucket * nk)
            t_bwd = self.dev.copy()
            if TP > 1:
                self.coll("tp", [(OP_AR, 4)], 0.0003)              # grad norm
            self.compute(allr, opt_c, jit)
            # extras
            f = self.f
            if f and f["kind"] == "desync" and self.onset is None and self.host[f["rank"]] >= f["at"]:
                X = f["rank"]
                op = OP_AR if self.isgpu[X] else OP_BARRIER
                self.onset = float(self.solo("world", X, op, 4))
                self.events.append(("desync", X, self.onset))
            if sc["ckpt_every"] and it % sc["ckpt_every"] == sc["ckpt_every"] - 1:
                L = rng.uniform(4.0, 7.0)
                self.host = np.maximum(self.host, self.dev)            # state_dict: a device sync
                self.host[0] += L
                self.events.append(("ckpt", 0, float(self.host[0] - L), L))
                self.coll("side", [(OP_AR, 4)], 0.0015, sync=True)
            if not split_done and np.nanmin(np.where(np.isfinite(self.host), self.host, INF)) >= sc["split_at"]:
                # dist.new_group over every rank: ncclCommSplit of the world comm (host-blocking, collective)
                fin = np.isfinite(self.host)
                tsplit = float(np.max(self.host[fin])) + rng.uniform(0.2, 0.4)
                created = np.where(fin, tsplit + rng.uniform(0, 0.02, W), INF)
                half = W // 2
                self.add_fam("split", [list(range(half)), list(range(half, W))], created=created, lazy=False)
                self.host = np.where(fin, created, INF)
                self.events.append(("split", -1, tsplit))
                split_done = True
            if "split" in self.fam:
                self.coll("split", [(OP_AR, 64)], 0.0015)
            if sc["eval_at"] is not None:
                if eval_F is None and np.nanmin(np.where(np.isfinite(self.host), self.host, INF)) >= sc["eval_at"]:
                    eval_F = self.add_fam("eval", [list(np.nonzero(self.c_tp == 0)[0])], lazy=True)
                    self.events.append(("eval_comm", -1, float(np.min(self.host))))
                    eval_it0 = it
                if eval_F is not None and (it - eval_it0) % 20 == 0:
                    self.coll("eval", [(OP_AR, 1024)], 0.003, sync=True)
            if sc["steps"]:
                d = self.dev
                ok = np.isfinite(d) & (d < end)
                for x in np.nonzero(ok)[0]:
                    self.steps.append((int(x), it, float(it_start[x]), float(d[x]),
                                       float(t_fwd[x] - it_start[x]), float(t_bwd[x] - t_fwd[x]),
                                       float(d[x] - t_bwd[x])))
            prev_end = self.dev.copy()
            it += 1
        self.iterations = it


# ------------------------------------------------------------------------------------------------ emission
def clock(sim, node, t):
    return t + sim.node_off[node] + sim.node_drift[node] * t


def emit(sim, out_path, job):
    sc, rng = sim.sc, sim.rng
    end = float(sc["dur"])
    L = {k: np.concatenate(v) for k, v in sim.calls.items()}
    n = len(L["rank"])
    isgpu = sim.isgpu[L["rank"]]
    h, a, c = L["h"], L["a"], L["c"]
    sw = rng.uniform(0.2, 0.5, sim.W)[L["rank"]]
    poll = rng.uniform(0.001, 0.015, n)
    # coalesced calls of one kernel: their completion is observed once (same poll time per kernel)
    key_k = np.round(c * 1e7)
    _, inv = np.unique(np.stack([L["rank"], L["gid"], np.where(np.isfinite(key_k), key_k, -1)]), axis=1,
                       return_inverse=True)
    poll = rng.uniform(0.001, 0.015, inv.max() + 1)[inv.ravel()]
    with np.errstate(invalid="ignore"):
        g_entry = isgpu & np.isfinite(a) & ((c - a) > sw)
    g_done = isgpu & np.isfinite(a) & np.isfinite(c)
    e_entry = (~isgpu) & np.isfinite(h)
    e_done = (~isgpu) & np.isfinite(h) & np.isfinite(c)
    parts = []
    idx = np.nonzero(g_entry)[0]
    parts.append((a[idx] + sw[idx], np.full(len(idx), F_GPU), a[idx], np.zeros(len(idx)), idx))
    idx = np.nonzero(g_done)[0]
    parts.append((c[idx] + 0.002, np.full(len(idx), F_GPU | F_COMPLETED), a[idx], c[idx], idx))
    idx = np.nonzero(e_entry)[0]
    parts.append((h[idx] + 0.0001, np.full(len(idx), F_ENQ), h[idx], np.zeros(len(idx)), idx))
    idx = np.nonzero(e_done)[0]
    parts.append((c[idx] + poll[idx], np.full(len(idx), F_ENQ | F_COMPLETED), h[idx], c[idx] + poll[idx], idx))
    wt = np.concatenate([p[0] for p in parts])
    fl = np.concatenate([p[1] for p in parts]).astype(np.uint16)
    ts = np.concatenate([p[2] for p in parts])
    te = np.concatenate([p[3] for p in parts])
    ci = np.concatenate([p[4] for p in parts])
    nnodes = sim.nn
    phase = rng.uniform(0, 0.2, nnodes)
    node = sim.node[L["rank"][ci]]
    fk = np.ceil((wt - phase[node]) / 0.2).astype(np.int64)
    ft = phase[node] + fk * 0.2
    keep = ft <= end
    wt, fl, ts, te, ci, node, fk, ft = (x[keep] for x in (wt, fl, ts, te, ci, node, fk, ft))
    m = len(ci)
    rank = L["rank"][ci]
    gid = L["gid"][ci]
    ids = np.array([cm["id"] for cm in sim.comms], dtype=np.uint64)
    recs = np.zeros(m, REC)
    recs["kind"] = K_CALL
    recs["op"] = L["op"][ci]
    recs["flags"] = fl
    recs["rank"] = rank
    recs["comm"] = ids[gid]
    recs["seq"] = L["seq"][ci]
    off = sim.node_off[node] + sim.node_drift[node] * ts
    t0n = EPOCH + int(rng.integers(0, 3600)) * NS
    recs["t_start_ns"] = t0n + np.round((ts + off) * NS).astype(np.int64)
    recs["t_end_ns"] = np.where(fl & F_COMPLETED, t0n + np.round((te + off) * NS).astype(np.int64), 0)
    recs["bytes"] = L["bytes"][ci]
    recs["comm_rank"] = L["crank"][ci]
    recs["peer"] = L["peer"][ci]
    recs["nranks"] = L["nranks"][ci]
    p2pm = np.isin(L["op"][ci], (OP_SEND, OP_RECV))
    recs["aux"] = np.where(isgpu[ci] & ~p2pm, L["aux"][ci] + 1, 0)
    msgs = []
    comm_hex = [f"{cm['id']:016x}" for cm in sim.comms]
    TP, PP = sim.TP, sim.PP
    for r in range(sim.W):
        nd = int(sim.node[r])
        tsn = t0n + int(clock(sim, nd, 0.9 + 0.1 * rng.random()) * NS)
        v = {"v": 1, "job": job, "ts_ns": tsn, "rank": r, "world_size": sim.W, "node": sim.node_name[nd],
             "local_rank": int(r % 8), "gpu": f"GPU-{zlib.crc32(f'{job}/{r}'.encode()):08x}"}
        if TP * PP > 1:
            v["coords"] = {"tp": int(sim.c_tp[r]), "pp": int(sim.c_pp[r]), "dp": int(sim.c_dp[r]), "cp": 0, "ep": 0}
        msgs.append((tsn, {"topic": "cw.topology.v1", "key": job, "ts_ns": tsn, "value": v}))
    # COMM_INIT, one batch per (node, comm), written when the last local member joined
    by = {}
    for (g, r), t in sim.init_t.items():
        if np.isfinite(t) and t < end:
            by.setdefault((int(sim.node[r]), g), []).append((r, t))
    init_ns = {}
    for (nd, g), lst in by.items():
        cm = sim.comms[g]
        mem = list(cm["members"])
        nin = len(set(int(x) // 8 for x in mem))
        rr = np.zeros(len(lst), REC)
        for q, (r, t) in enumerate(lst):
            tn = t0n + int(clock(sim, nd, t) * NS)
            init_ns[(g, r)] = tn
            rr[q] = (K_INIT, 0, F_COMPLETED, r, cm["id"], 0, tn, tn, 0, mem.index(r), -1, len(mem), nin)
        tb = max(t for _, t in lst) + rng.uniform(0.01, 0.2)
        tsn = t0n + int(clock(sim, nd, tb) * NS)
        msgs.append((tsn, {"topic": "cw.calls.v1", "key": f"{job}/{comm_hex[g]}", "ts_ns": tsn,
                           "value_b64": base64.b64encode(batch_bytes(rr)).decode()}))
    # call batches per (node, comm, flush)
    order = np.lexsort((wt, fk, gid, node))
    nd_s, g_s, fk_s = node[order], gid[order], fk[order]
    brk = np.nonzero((np.diff(nd_s) != 0) | (np.diff(g_s) != 0) | (np.diff(fk_s) != 0))[0] + 1
    starts = np.concatenate([[0], brk]).astype(np.int64)
    stops = np.concatenate([brk, [m]]).astype(np.int64)
    bj = rng.uniform(0, 0.015, len(starts))
    for b, (s0, s1) in enumerate(zip(starts, stops)):
        sel = order[s0:s1]
        nd = int(nd_s[s0])
        tsn = t0n + int(clock(sim, nd, ft[sel[0]] + bj[b]) * NS)
        msgs.append((tsn, {"topic": "cw.calls.v1", "key": f"{job}/{comm_hex[int(g_s[s0])]}", "ts_ns": tsn,
                           "value_b64": base64.b64encode(batch_bytes(recs[sel])).decode()}))
    # heartbeats per (node, comm) every 1 s from the comm's creation, state as of the agent's last flush
    hb_phase = rng.uniform(0, 1.0, nnodes)
    seqs = recs["seq"].astype(np.int64)
    done = (fl & F_COMPLETED) != 0
    ops = recs["op"]
    iscoll = ~np.isin(ops, (OP_SEND, OP_RECV))
    G = len(sim.comms)
    state = {}
    sel_c = np.nonzero(iscoll)[0]
    key = rank[sel_c].astype(np.int64) * G + gid[sel_c]
    o2 = sel_c[np.lexsort((ft[sel_c], key))]
    k2 = rank[o2].astype(np.int64) * G + gid[o2]
    kb = np.concatenate([[0], np.nonzero(np.diff(k2))[0] + 1, [len(o2)]])
    for s0, s1 in zip(kb[:-1], kb[1:]):
        if s1 <= s0:
            continue
        sel = o2[s0:s1]
        st = np.maximum.accumulate(seqs[sel])
        cd = np.maximum.accumulate(np.where(done[sel], seqs[sel], -1))
        lst = np.maximum.accumulate(np.where(seqs[sel] == st, recs["t_start_ns"][sel], 0))
        lct = np.maximum.accumulate(np.where(done[sel] & (seqs[sel] == cd), recs["t_end_ns"][sel], 0))
        state[int(k2[s0])] = (ft[sel], st, cd, lst, lct)
    pstate = {}
    sel_p = np.nonzero(~iscoll)[0]
    for i in sel_p:
        pstate.setdefault((int(rank[i]), int(gid[i]), int(recs["peer"][i]), int(ops[i])), []).append(i)
    pst = {}
    for kk, lst_ in pstate.items():
        sel = np.array(lst_)
        sel = sel[np.argsort(ft[sel], kind="stable")]
        pst[kk] = (ft[sel], np.maximum.accumulate(seqs[sel]),
                   np.maximum.accumulate(np.where(done[sel], seqs[sel], -1)))
    p2p_by_rank = {}
    for (r, g, pe, op) in pst:
        p2p_by_rank.setdefault((r, g), []).append((pe, op))
    node_comms = {}
    for g, cm in enumerate(sim.comms):
        for r in cm["members"]:
            if (g, int(r)) in init_ns:
                node_comms.setdefault((int(r) // 8, g), []).append(int(r))
    hb_count = 0
    for (nd, g), rs in node_comms.items():
        t_cr = max(sim.init_t[(g, r)] for r in rs)
        hbs = np.arange(hb_phase[nd] + np.ceil(t_cr - hb_phase[nd]) + 0.05, end, 1.0)
        per_rank = []
        for r in rs:
            kk = r * G + g
            it_ = init_ns[(g, r)]
            if kk in state:
                f_t, st, cd, lst, lct = state[kk]
                pos = np.searchsorted(f_t, hbs + 1e-9, side="right") - 1
                ok = pos >= 0
                p = np.maximum(pos, 0)
                S_ = np.where(ok, st[p], -1)
                C_ = np.where(ok, cd[p], -1)
                TS = np.where(ok & (lst[p] > 0), lst[p], it_)
                TE = np.where(ok & (C_ >= 0) & (lct[p] > 0), lct[p], it_)
            else:
                S_ = C_ = np.full(len(hbs), -1)
                TS = TE = np.full(len(hbs), it_)
            pp_ = []
            for (pe, op) in sorted(p2p_by_rank.get((r, g), [])):
                f_t, st, cd = pst[(r, g, pe, op)]
                pos = np.searchsorted(f_t, hbs + 1e-9, side="right") - 1
                ok = pos >= 0
                p = np.maximum(pos, 0)
                pp_.append((pe, "send" if op == OP_SEND else "recv", np.where(ok, st[p], -1),
                            np.where(ok, cd[p], -1)))
            per_rank.append((r, S_, C_, TS, TE, pp_))
        key_s = f"{job}/{comm_hex[g]}"
        for q, t in enumerate(hbs):
            tsn = t0n + int(clock(sim, nd, t) * NS)
            ranks = []
            for (r, S_, C_, TS, TE, pp_) in per_rank:
                x = {"rank": r, "started": int(S_[q]), "completed": int(C_[q]),
                     "t_last_start_ns": int(TS[q]), "t_last_end_ns": int(TE[q])}
                if pp_:
                    x["p2p"] = [{"peer": pe, "op": o, "started": int(a_[q]), "completed": int(b_[q])}
                                for (pe, o, a_, b_) in pp_]
                ranks.append(x)
            msgs.append((tsn, {"topic": "cw.progress.v1", "key": key_s, "ts_ns": tsn, "value": {
                "v": 1, "job": job, "node": sim.node_name[nd], "ts_ns": tsn, "comm": comm_hex[g],
                "ranks": ranks}}))
            hb_count += 1
    for (r, itn, t0, t1, fw, bw, op) in sim.steps:
        nd = int(sim.node[r])
        a_ns = t0n + int(clock(sim, nd, t0) * NS)
        b_ns = max(a_ns + 1, t0n + int(clock(sim, nd, t1) * NS))
        tsn = t0n + int(clock(sim, nd, t1 + 0.003) * NS)
        msgs.append((tsn, {"topic": "cw.steps.v1", "key": job, "ts_ns": tsn, "value": {
            "v": 1, "job": job, "rank": r, "iteration": itn, "t_start_ns": a_ns, "t_end_ns": b_ns,
            "phases": {"forward_ms": round(fw * 1e3, 3), "backward_ms": round(bw * 1e3, 3),
                       "optimizer_ms": round(op * 1e3, 3)}}}))
    check_capture(sim, recs, msgs, job)
    msgs.sort(key=lambda x: x[0])
    with open(out_path, "w") as fh:
        for _, mm in msgs:
            fh.write(json.dumps(mm, separators=(",", ":")))
            fh.write("\n")
    return t0n, dict(records=int(m), messages=len(msgs), heartbeats=hb_count, steps=len(sim.steps),
                     iterations=sim.iterations)


# ------------------------------------------------------------------------------------------------ checks
def check_capture(sim, recs, msgs, job):
    """the capture against wire-v1: a failure here is this generator's bug, not the detector's."""
    def fail(msg):
        raise SystemExit(f"[{job}] capture check failed: {msg}")
    if not np.all((recs["op"] >= 1) & (recs["op"] <= 11)):
        fail("op")
    if np.any(recs["flags"] & ~np.uint16(31)):
        fail("flags bits")
    comp = (recs["flags"] & F_COMPLETED) != 0
    if np.any(comp & (recs["t_end_ns"] < recs["t_start_ns"])):
        fail("t_end < t_start")
    if np.any((~comp) & (recs["t_end_ns"] != 0)):
        fail("t_end set without COMPLETED")
    if np.any((recs["comm_rank"] < 0) | (recs["comm_rank"] >= recs["nranks"].astype(np.int64))):
        fail("comm_rank range")
    if np.any((recs["rank"] < 0) | (recs["rank"] >= sim.W)):
        fail("rank range")
    p2p = np.isin(recs["op"], (OP_SEND, OP_RECV))
    rooted = np.isin(recs["op"], ROOTED)
    if np.any(recs["peer"][~p2p & ~rooted] != -1):
        fail("peer of an unrooted collective")
    if np.any((recs["peer"][p2p | rooted] < 0) | (recs["peer"][p2p | rooted] >= recs["nranks"][p2p | rooted].astype(np.int64))):
        fail("peer range")
    if np.any(p2p & (recs["peer"] == recs["comm_rank"])):
        fail("p2p to self")
    if np.any(((recs["flags"] & F_GPU) != 0) & ((recs["flags"] & F_ENQ) != 0)):
        fail("GPU_TIMED with ENQUEUED")
    if np.any(recs["aux"][p2p] != 0):
        fail("aux of p2p")
    # comm membership consistent: (comm, comm_rank) -> one rank, nranks fixed
    for g, cm in enumerate(sim.comms):
        sel = recs["comm"] == np.uint64(cm["id"])
        if np.any(recs["nranks"][sel] != len(cm["members"])):
            fail("nranks")
        if np.any(cm["members"][recs["comm_rank"][sel]] != recs["rank"][sel]):
            fail("comm_rank vs rank")
    # same (comm, seq) of a collective: one op on every member except the desync
    col = ~p2p
    key = (recs["comm"][col] % np.uint64(1 << 40)).astype(np.int64) * (1 << 22) + recs["seq"][col].astype(np.int64)
    o = np.argsort(key, kind="stable")
    k_, op_ = key[o], recs["op"][col][o]
    if np.any((k_[1:] == k_[:-1]) & (op_[1:] != op_[:-1])):
        fail("one (comm, seq) with two ops")
    # per rank and comm: seq in call order
    kr = recs["rank"][col].astype(np.int64) * (1 << 40) + (recs["comm"][col] % np.uint64(1 << 40)).astype(np.int64)
    o = np.lexsort((recs["seq"][col], kr))
    k, s, t = kr[o], recs["seq"][col][o].astype(np.int64), recs["t_start_ns"][col][o]
    same = k[1:] == k[:-1]
    if np.any(same & (s[1:] > s[:-1]) & (t[1:] + 1_000_000 < t[:-1])):
        fail("seq not in call order")
    last = {}
    for tsn, mm in msgs:
        if mm["topic"] == "cw.calls.v1":
            raw = base64.b64decode(mm["value_b64"])
            if raw[:4] != b"CWB1" or (len(raw) - 16) % 64 or \
                    struct.unpack("<I", raw[8:12])[0] != (len(raw) - 16) // 64 or struct.unpack("<HH", raw[4:8]) != (1, 64):
                fail("batch header")
            rr = np.frombuffer(raw[16:], REC)
            if np.any(rr["comm"] != rr["comm"][0]) or mm["key"] != f"{job}/{int(rr['comm'][0]):016x}":
                fail("batch comm != key")
        if mm["topic"] != "cw.progress.v1":
            continue
    for tsn, mm in sorted((x for x in msgs if x[1]["topic"] == "cw.progress.v1"), key=lambda x: x[0]):
        v = mm["value"]
        for x in v["ranks"]:
            if x["started"] < x["completed"]:
                fail(f"heartbeat started < completed {x}")
            kk = (v["node"], v["comm"], x["rank"])
            p = last.get(kk)
            if p and (x["started"] < p[0] or x["completed"] < p[1]):
                fail(f"heartbeat counters went back {kk}")
            last[kk] = (x["started"], x["completed"])
            for y in x.get("p2p", []):
                if y["started"] < y["completed"]:
                    fail("p2p started < completed")


# ------------------------------------------------------------------------------------------------ truth
def truth_of(sim, sc, job, t0n, stats):
    f = sc["fault"]
    end = float(sc["dur"])
    tr = dict(job=job, scenario=sc["name"], expect=sc["expect"], world=sim.W, note=sc["note"],
              layout=dict(tp=sim.TP, pp=sim.PP, dp=sim.DP, micro_batches=sc["M"]), iteration_s=sc["T"],
              probe=sc["probe"], coalesce=sc["k"], buckets=sc["nb"], capture_start_ns=t0n,
              capture_end_ns=t0n + int(end * NS), culprits=[], onset_ns=None, structural=[], stats=stats,
              events=[list(e) for e in sim.events])
    net = sc["net"]
    if net:
        nd = net["node"]
        tr["link_node"] = sim.node_name[nd]
        tr["link_ranks"] = [int(r) for r in range(sim.W) if sim.node[r] == nd]
        if net["kind"] == "flap":
            tr["onset_ns"] = t0n + int(sim.flaps[0][0] * NS)
            tr["flaps_s"] = [[round(a, 2), round(b, 2)] for a, b in sim.flaps]
            tr["waitfor"] = (f"node {nd}'s IB link flaps (NCCL retries): every inter-node transfer touching it "
                             "stalls until the link is back, on every member at once (all entered, all complete "
                             "late together). No rank arrives late, every call completes: not a hang and no slow "
                             "rank; the fault is the node's link (slow_link / hw_fault naming its node or its "
                             "ranks accepted, silence accepted).")
        else:
            tr["onset_ns"] = t0n + int(net["at"] * NS)
            tr["waitfor"] = (f"node {nd}'s NCCL proxy thread is starved by host CPU contention: its inter-node "
                             f"transfers {net['factor']}x slower; every DP ring includes node {nd}, so every DP "
                             "all-reduce is slower for all members, who still arrive on time; TP (intra-node) "
                             "unaffected. No rank is late: nothing may be named but node "
                             f"{nd}'s ranks in a slow_link / hw_fault incident.")
        return tr
    if not f:
        w = "healthy: every wait is a rendezvous with peers that are progressing"
        if sc["ckpt_every"]:
            w = ("rank 0 writes checkpoint metadata 4-7 s every 50 steps while the others wait inside the side-comm "
                 "barrier; periodic by design, the job progresses: no page")
        if sc["lazy"]:
            w = ("each comm's first collective waits 1-5 s for NCCL's connection setup on every member, then all "
                 "complete; the eval comm's first call too: healthy")
        tr["waitfor"] = w
        return tr
    X = f["rank"]
    tr["culprits"] = [X]
    tr["culprit_node"] = sim.node_name[int(sim.node[X])]
    if f["kind"] == "slow":
        tr["onset_ns"] = t0n + int(f["at"] * NS)
        tr["factor"] = f["factor"]
        tr["waitfor"] = (f"rank {X}'s GPU computes {f['factor']}x slower from {f['at']} s: it enters its TP "
                         "all-reduces, its sends and its DP reduce last; its TP peers wait on it in TP and then "
                         "look late in DP/PP (victims), the other replicas wait in the DP reduce. It waits on "
                         "nobody: the culprit, alone.")
    elif f["kind"] == "desync":
        tr["onset_ns"] = t0n + int(sim.onset * NS)
        tr["waitfor"] = (f"rank {X} alone calls dist.barrier() (a world-comm collective nobody else calls) at "
                         f"{sim.onset:.2f} s, its host blocked in it. Its TP/PP peers wait on it in their next "
                         f"call, the rest of the job on them. {X} waits on everyone in the barrier and everyone "
                         f"waits on {X}: a deadlock cycle whose divergent member is {X}: the culprit. The "
                         "ranks missing from the barrier are victims.")
    elif f["kind"] == "hang":
        tr["onset_ns"] = t0n + int(sim.onset * NS)
        tr["waitfor"] = (f"rank {X}'s host stops at {sim.onset:.2f} s (point '{f['point']}': {sc['note']}); its "
                         "device runs what was queued, then it is inside no call: the root. Every other rank "
                         f"waits, directly or through a chain, in a call {X} never entered.")
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
        job = f"rt-{sc['name'].split('_')[0]}-s{args.seed}"
        sim = Sim(sc, args.seed)
        sim.run()
        if sc["fault"] and sim.onset is None and sc["fault"]["kind"] != "slow":
            raise SystemExit(f"{sc['name']}: fault never triggered")
        path = os.path.join(args.out, sc["name"] + ".cwcap")
        t0n, stats = emit(sim, path, job)
        tr = truth_of(sim, sc, job, t0n, stats)
        with open(os.path.join(args.out, sc["name"] + ".truth.json"), "w") as fh:
            json.dump(tr, fh, indent=1)
        mb = os.path.getsize(path) / 1e6
        print(f"{sc['name']:40s} {sim.W:4d} ranks {sim.iterations:4d} it {stats['records']:8d} records "
              f"{stats['messages']:7d} msgs {mb:6.1f} MB  culprits={tr['culprits']}", flush=True)


if __name__ == "__main__":
    main()
