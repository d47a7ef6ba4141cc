#!/usr/bin/env python3
"""stacks/: an independent traffic generator for commwatch - training stacks the other generators leave out.

Written from the wire spec (../shared/spec/wire-v1.md), DOMAIN.md, the READMEs, docs/architecture.md (probe
semantics only), run_scored.sh and islands/ (its CLI, capture writing, spec check and scorer conventions); it
shares no code with commwatch and writes the capture format of spec section 4 itself (JSON Lines, call
batches encoded here from spec sections 1 / 2.1 with numpy).

The model. Every job is simulated per rank on a host timeline (when the Python / runtime thread issues a call)
and device timelines (one per CUDA stream that matters); a collective instance starts on a member when its
stream is free, its host has issued it and its device dependency (an event on another stream) is met, and
completes on every member at max(member arrivals) + transfer (+ a few us). A host that stops issues nothing
more; its device runs what was queued and then idles. Hosts run ahead of their GPUs until a real host sync.

1. DeepSpeed ZeRO-3 (stack "zero3", 32-128 ranks, one data-parallel comm over all ranks). Per iteration:
   forward over L = 12 layers, each layer's pre-forward hook issuing the parameter all-gathers of layers
   i..i+2 not yet issued (prefetch: several all-gathers issued ahead of the layer that needs them), the layer's
   compute waiting on its own all-gather; backward in reverse with the same prefetch (ZeRO-3 gathers again),
   and a gradient reduce-scatter bucket every 2 layers issued from the reduce stream once the bucket's backward
   compute is done (it overlaps the rest of backward); at the end the default stream waits for the reduce
   stream, computes the overflow flag / grad norm and all-reduces it (8 bytes), the host reads it (.item():
   the iteration's only host sync), then the partitioned optimizer. Calls of one process group share that
   comm's NCCL stream (PyTorch's ProcessGroupNCCL), so the all-gathers, reduce-scatters and the all-reduce
   run on the device in issue order: a reduce-scatter waiting for backward compute holds the next prefetched
   all-gathers behind it. The host runs ~0.2 s ahead of the device (Python hook overhead 2-3 ms a layer).
2. DeepSpeed pipeline engine ("pipe", PP 4 x DP 8, pipe-major ranks: a stage per node). DeepSpeed's
   TrainSchedule (its even/odd stage ordering of SendGrad/RecvActivation and RecvGrad/SendActivation, 1F1B-like
   steady state, M = 8 micro-batches, LoadMicroBatch on the first and last stage), torch send/recv on a 2-rank
   NCCL comm per neighbour pair and replica (ProcessGroupNCCL's p2p comms), each p2p followed by a stream wait
   (the device runs a stage's instructions in order); at the step's end ReduceTiedGrads (an all-reduce between
   the first and last stage of each replica: tied embeddings), ReduceGrads (2 all-reduce buckets on the stage's
   data-parallel comm), OptimizerStep, then the loss all-reduced over the last stage's data-parallel comm and
   broadcast from the last stage over each replica's pipe comm; the host reads it (the only host sync).
   Phases in cw.steps.v1: sums of the device compute of forward / backward passes, and the optimizer.
3. DeepSpeed-Ulysses ("ulysses", SP 8 in a node x DP 4): per layer two all-to-alls (before and after
   attention) in forward and two in backward on the node's sequence-parallel comm (the compute stream waits on
   each), ZeRO-2 over the sequence-data-parallel comm of all ranks: gradient reduce-scatter buckets overlapping
   backward on that comm's stream, the overflow all-reduce, the host sync, the optimizer and the all-gather of
   the updated parameters.
4. JAX/XLA on GPU ("jax", 32-64 ranks, mesh data (nodes) x model (8 in a node)): no cw.steps.v1 at all, only
   the NCCL plugin's call records, the agents' heartbeats and the agents' topology (no coords). Per step, a
   scan over L = 6 layers: an async all-gather start two layers ahead on the async collective stream (data
   comm, same size every scan iteration), the done waited before the layer; 2 ring collective-permutes per
   layer (ring attention: every rank sends to model rank m+1 and receives from m-1 at once, grouped, on the
   permute stream, overlapped with an attention block); backward: all-gathers again two ahead and an async
   reduce-scatter start per layer (same stream), dones waited at the end; a world all-reduce of the grad norm;
   the optimizer. Async dispatch keeps the host <= 2 steps ahead. Some jobs run each step as a CUDA graph (one
   launch per step): their records carry GRAPH_CAPTURED, aux 0 (NCCL's own number is not known in replays)
   and the probe's own per-comm count.
5. gloo DDP ("gloo", 8 ranks on 2 nodes, host-blocking probe, 60-90 ms steps): a buffer broadcast from rank 0
   at each forward (blocking), 3 gradient-bucket all-reduces during backward run in order by gloo's worker (the
   record's start is when the worker started it), the reducer's wait at backward's end, the optimizer.

Probes: "gpu" (GPU-timed plugin: a completed record per call with device times, plus an entry record
GPU_TIMED without COMPLETED when a call is still open after the plugin's sweep period 0.2-0.5 s, also for
graph replays), "enq" (spec-only host-enqueue hook: ENQUEUED entry at enqueue, ENQUEUED|COMPLETED when the
CUDA event is observed 1-15 ms after the device finished; it writes no device entries), "blk" (gloo: entry and
completion at real host times, no flags). COMPLETION_LOST: the hook gives up on a rank's unobserved calls
15 s after its completion path stopped (ENQUEUED|COMPLETION_LOST, t_end 0). Agents: per node and comm, a call
batch every 200 ms (random phase, 0-15 ms jitter); heartbeats every 1 s per node and comm with started /
completed of collectives as of the agent's last flush (COMPLETION_LOST is not a completion) and a "p2p" list per
rank (peer = comm rank, op send / recv) where the rank has send/recv on that comm; topology at start; COMM_INIT
per rank and comm. Clocks: each node +-4 ms, drift +-5 ppm; a record's two times use the offset at its start.
Faults: a host stopping before a tagged call (a prefetch all-gather, the second all-to-all of a layer, a
pipeline SendActivation, a step's graph launch / dispatch, a gloo broadcast), a GPU stopping inside a
collective-permute (chosen where its other streams are idle: nothing else of it is in flight), a GPU (or a
gloo host's CPU) computing 1.3-2x slower from an onset, a driver fault after which a rank's completions are no
longer observed and its host blocks at its next sync (its GPU ran what was queued), a last stage 1.35x
heavier by design.
Simplified / left out: tensor parallelism, activation checkpointing, ZeRO-3 parameter release and its
max-live limits (the prefetch depth is fixed at 2), DeepSpeed's pipe meta-data exchange at the first step,
gloo's second worker thread, NVML / IB samples, job ends (every capture stops while the job runs), comm
re-creation, agent hiccups. Each capture is checked against the spec before it is written (check_capture).

  gen.py --out DIR --seed N [PREFIX ...]
"""
import argparse
import base64
import json
import os
import struct
import zlib

import numpy as np

NS = 1_000_000_000
EPOCH = 1_767_225_600 * NS  # 2026-01-01T00:00:00Z
INF = np.inf

OP_ALLREDUCE, OP_ALLGATHER, OP_REDUCESCATTER, OP_BROADCAST = 1, 2, 3, 4
OP_SEND, OP_RECV, OP_ALLTOALL = 6, 7, 8
OPNAME = {1: "all-reduce", 2: "all-gather", 3: "reduce-scatter", 4: "broadcast", 6: "send", 7: "recv",
          8: "all-to-all"}
F_COMPLETED, F_GPU, F_GRAPH, F_ENQ, F_LOST = 1, 2, 4, 8, 16
K_CALL, K_INIT = 1, 2

# spec section 1, built here from the table (not imported from commwatch)
REC = np.dtype([("kind", "<u1"), ("op", "<u1"), ("flags", "<u2"), ("rank", "<i4"), ("comm", "<u8"),
                ("seq", "<u8"), ("t_start_ns", "<i8"), ("t_end_ns", "<i8"), ("bytes", "<u8"),
                ("comm_rank", "<i4"), ("peer", "<i4"), ("nranks", "<u4"), ("aux", "<u4")])
assert REC.itemsize == 64 and REC.fields["aux"][1] == 60 and REC.fields["comm_rank"][1] == 48
assert REC.fields["t_start_ns"][1] == 24 and REC.fields["bytes"][1] == 40 and REC.fields["peer"][1] == 52


def batch_bytes(recs):
    return b"CWB1" + struct.pack("<HHII", 1, 64, len(recs), 0) + recs.tobytes()


# ----------------------------------------------------------------------------------------------- scenarios
SCEN = []


def S(name, **kw):
    SCEN.append(dict(name=name, **kw))


# --- healthy controls (one per stack, two for ZeRO-3 and JAX probes)
S("c01_zero3_ctrl_gpu", stack="zero3", W=64, probe="gpu", T=0.8, dur=110, steps=True, expect="control",
  note="ZeRO-3, 64 ranks, GPU-timed plugin: prefetched all-gathers, reduce-scatter buckets overlapping "
  "backward, overflow all-reduce, all on the DP comm's NCCL stream")
S("c02_zero3_ctrl_enq", stack="zero3", W=32, probe="enq", T=0.7, dur=100, steps=True, expect="control",
  note="ZeRO-3, 32 ranks, host-enqueue hook: the host issues the whole forward's all-gathers ~0.2 s ahead")
S("c03_pipe_ctrl", stack="pipe", PP=4, DP=8, M=8, probe="gpu", f=0.022, dur=120, steps=True,
  expect="control", note="DeepSpeed pipeline engine PP 4 x DP 8, TrainSchedule, 8 micro-batches, tied "
  "embedding all-reduce, loss broadcast; stages balanced within 4 %")
S("c04_ulysses_ctrl", stack="ulysses", SP=8, DP=4, probe="gpu", T=0.9, dur=100, steps=True,
  expect="control", note="DeepSpeed-Ulysses SP 8 x DP 4 (ZeRO-2 over all 32), 4 all-to-alls per layer")
S("c05_jax_ctrl", stack="jax", W=64, probe="gpu", T=1.3, dur=80, expect="control",
  note="JAX/XLA, 64 ranks, no steps: async all-gathers two layers ahead, ring permutes, scan")
S("c06_jax_graph_ctrl", stack="jax", W=32, probe="gpu", graph=True, T=0.8, dur=80, expect="control",
  note="JAX/XLA, 32 ranks, every step one CUDA graph replay (GRAPH_CAPTURED), no steps")
S("c07_gloo_ctrl", stack="gloo", W=8, probe="blk", T=0.075, dur=60, steps=True, expect="control",
  note="gloo DDP, 8 ranks on 2 nodes, host-blocking, ~75 ms steps, buffer broadcast + 3 buckets")
# --- structural
S("t01_pipe_heavy_last_stage", stack="pipe", PP=4, DP=8, M=8, probe="gpu", f=0.022, last_factor=1.35,
  dur=130, steps=True, expect="structural",
  note="pipeline engine whose last stage (LM head + loss) is 1.35x heavier from the first step: the other "
  "stages wait for it in every iteration by design; at most one P3 advisory, no slow_rank naming a rank")
# --- slow ranks
S("s01_zero3_slow_gpu", stack="zero3", W=128, probe="gpu", T=0.8, dur=105, steps=True, expect="slow_rank",
  fault=dict(kind="slow", rank=77, at=50.0, factor=1.5),
  note="ZeRO-3 128 ranks GPU-timed, rank 77's GPU 1.5x slower from 50 s")
S("s02_zero3_slow_gpu_enq", stack="zero3", W=32, probe="enq", T=0.7, dur=120, steps=True,
  expect="slow_rank", fault=dict(kind="slow", rank=13, at=50.0, factor=1.5),
  note="ZeRO-3 32 ranks host-enqueue, rank 13's GPU 1.5x slower from 50 s: only its phases show it")
S("s03_pipe_mid_stage_slow", stack="pipe", PP=4, DP=8, M=8, probe="gpu", f=0.022, dur=130, steps=True,
  expect="slow_rank", fault=dict(kind="slow", rank=21, at=60.0, factor=1.3),
  note="pipeline engine, stage 2 of 4 (a middle stage), replica 5: rank 21's GPU 1.3x slower from 60 s")
S("s04_jax_slow_gpu", stack="jax", W=48, probe="gpu", T=1.3, dur=130, expect="slow_rank",
  fault=dict(kind="slow", rank=23, at=50.0, factor=1.4),
  note="JAX 48 ranks, no steps: rank 23's GPU 1.4x slower from 50 s")
S("s05_gloo_slow_rank", stack="gloo", W=8, probe="blk", T=0.075, dur=80, steps=True, expect="slow_rank",
  fault=dict(kind="slow", rank=6, at=30.0, factor=2.0),
  note="gloo DDP 8 ranks: rank 6 computes 2x slower (CPU contention) from 30 s")
# --- hangs
S("h01_zero3_prefetch_ag_hang", stack="zero3", W=64, probe="gpu", T=0.8, dur=120, steps=True,
  expect="hang", fault=dict(kind="host_stop", rank=29, at=60.0, tags=("ag_fwd",)),
  note="ZeRO-3 64 ranks GPU-timed: rank 29's host stops in the prefetch coordinator before issuing a "
  "forward prefetch all-gather; its peers wait inside it with the next prefetches queued behind")
S("h02_ulysses_a2a_hang", stack="ulysses", SP=8, DP=4, probe="gpu", T=0.9, dur=110, steps=True,
  expect="hang", fault=dict(kind="host_stop", rank=22, at=55.0, tags=("a2a2",)),
  note="Ulysses: rank 22 stops before the second all-to-all of an attention layer")
S("h03_pipe_send_never_posted", stack="pipe", PP=4, DP=8, M=8, probe="gpu", f=0.022, dur=120, steps=True,
  expect="hang", fault=dict(kind="host_stop", rank=11, at=60.0, tags=("send_act",)),
  note="pipeline engine: stage 1 of replica 3 (rank 11) never posts a SendActivation")
S("h04_jax_permute_gpu_stop", stack="jax", W=64, probe="gpu", T=1.3, dur=110, expect="hang",
  fault=dict(kind="gpu_stop", rank=43, at=55.0),
  note="JAX 64 ranks: rank 43's GPU stops inside a ring collective-permute")
S("h05_jax_graph_rank_stop", stack="jax", W=32, probe="gpu", graph=True, T=0.8, dur=100, expect="hang",
  fault=dict(kind="host_stop", rank=12, at=50.0, tags=("step",)),
  note="JAX CUDA-graph job: rank 12's host stops launching step graphs")
S("h06_gloo_hang", stack="gloo", W=8, probe="blk", T=0.075, dur=80, steps=True, expect="hang",
  fault=dict(kind="host_stop", rank=2, at=35.0, tags=("bcast",)),
  note="gloo DDP: rank 2 stops (a stuck data-loader worker) before the next forward's buffer broadcast")
S("h07_zero3_completion_lost", stack="zero3", W=32, probe="enq", T=0.7, dur=120, steps=True,
  expect="hang", fault=dict(kind="lost", rank=22, at=60.0, tags=("sync",), timeout=15.0),
  note="ZeRO-3 host-enqueue: rank 22's driver wedges at 60 s: its completions stop being observed, its host "
  "blocks at its next .item(); its GPU ran what was queued; 15 s later its probe writes COMPLETION_LOST")


# ------------------------------------------------------------------------------------------------ simulator
def ds_train_schedule(M, P, s):
    """DeepSpeed's TrainSchedule for stage s (its step -> micro-batch mapping and command order)."""
    def step_to_mb(step_id):
        ev_st, ev_s = step_id % 2 == 0, s % 2 == 0
        if ev_st and ev_s:
            return step_id // 2 - s // 2, True
        if not ev_st and not ev_s:
            return (step_id - 1) // 2 - s // 2, True
        if ev_st and not ev_s:
            return step_id // 2 - P + (s + 1) // 2, False
        return (step_id - 1) // 2 - P + 1 + s // 2, False

    out = []
    prev = -1
    total = 2 * (M + P - 1)
    vm = lambda m: 0 <= m < M  # noqa: E731
    vs = lambda x: 0 <= x < P  # noqa: E731
    for st in range(total):
        mb, fwd = step_to_mb(st)
        if fwd:
            if vm(prev) and vs(s - 1):
                out.append(("send_grad", prev))
            if vm(mb) and vs(s - 1):
                out.append(("recv_act", mb))
        else:
            if vm(mb) and vs(s + 1):
                out.append(("recv_grad", mb))
            if vm(prev) and vs(s + 1):
                out.append(("send_act", prev))
        if (s == 0 or s == P - 1) and fwd and vm(mb):
            out.append(("load", mb))
        if vm(mb):
            out.append(("fwd" if fwd else "bwd", mb))
        prev = mb
    out += [("tied",), ("reduce",), ("opt",)]
    return out


class Sim:
    FIELDS = ("rank", "comm", "seq", "op", "h", "a", "c", "bytes", "crank", "peer", "nranks", "aux", "p2p")

    def __init__(self, sc, seed):
        self.sc = sc
        self.rng = np.random.default_rng([seed, zlib.crc32(sc["name"].encode())])
        rng = self.rng
        st = sc["stack"]
        if st == "pipe":
            W, gpn = sc["PP"] * sc["DP"], sc["DP"]
        elif st == "ulysses":
            W, gpn = sc["SP"] * sc["DP"], sc["SP"]
        elif st == "gloo":
            W, gpn = sc["W"], 4
        else:
            W, gpn = sc["W"], 8
        self.W, self.gpn = W, gpn
        self.nnodes = W // gpn
        self.rank_node = np.arange(W) // gpn
        pre = {"zero3": "z3", "pipe": "pp", "ulysses": "uly", "jax": "jx", "gloo": "cpu"}[st]
        self.node_name = [f"{pre}-n{j:02d}" for j in range(self.nnodes)]
        self.probe = sc["probe"]
        self.graph = bool(sc.get("graph"))
        self.hw = np.ones(W)
        self.node_off = rng.uniform(-0.004, 0.004, self.nnodes)
        self.node_drift = rng.uniform(-5e-6, 5e-6, self.nnodes)
        self.fams = []
        self.comm_ids = []
        self.comm_members = []
        self._used = set()
        self.calls = {k: [] for k in self.FIELDS}
        self.steps = []
        self.events = []
        self.fault = sc.get("fault")
        self.frank = self.fault["rank"] if self.fault else None
        self.hstopped = False
        self.dead = None      # (rank, time) a GPU stopped
        self.h = np.zeros(W)
        self.ALL = np.arange(W)
        self.sj = 1.0

    # ----------------------------------------------------------------- helpers
    def node_clock(self, node, t):
        return t + self.node_off[node] + self.node_drift[node] * t

    def family(self, groups):
        G = np.array(groups, dtype=np.int64)
        cis = []
        for g in G:
            while True:
                cid = int(self.rng.integers(1, 2**63))
                if cid not in self._used:
                    self._used.add(cid)
                    break
            self.comm_ids.append(cid)
            self.comm_members.append(g.copy())
            cis.append(len(self.comm_ids) - 1)
        ng, n = G.shape
        fam = dict(ci=np.array(cis), G=G, n=n, seq=np.zeros(ng, np.int64), opc={},
                   p2p=[np.zeros(ng, np.int64), np.zeros(ng, np.int64)], ring=np.zeros(ng, np.int64))
        self.fams.append(fam)
        return fam

    def _rec(self, rank, ci, seq, op, h, a, c, nbytes, crank, peer, nranks, aux, p2p):
        m = len(rank)
        L = self.calls
        L["rank"].append(np.asarray(rank, np.int64))
        L["comm"].append(np.broadcast_to(np.asarray(ci, np.int64), (m,)).copy())
        L["seq"].append(np.broadcast_to(np.asarray(seq, np.int64), (m,)).copy())
        L["op"].append(np.full(m, op))
        L["h"].append(np.asarray(h, float))
        L["a"].append(np.asarray(a, float))
        L["c"].append(np.asarray(c, float))
        L["bytes"].append(np.full(m, nbytes, np.int64))
        L["crank"].append(np.broadcast_to(np.asarray(crank, np.int64), (m,)).copy())
        L["peer"].append(np.broadcast_to(np.asarray(peer, np.int64), (m,)).copy())
        L["nranks"].append(np.full(m, nranks))
        L["aux"].append(np.broadcast_to(np.asarray(aux, np.int64), (m,)).copy())
        L["p2p"].append(np.full(m, p2p))

    def launch(self, cost, idx=None):
        if idx is None:
            self.h = self.h + cost * self.rng.uniform(0.7, 1.3, self.W)
        else:
            self.h[idx] = self.h[idx] + cost * self.rng.uniform(0.7, 1.3, len(idx))

    def issue(self, tag, idx=None):
        """the host (of ranks idx) issues a call tagged tag now; a host fault may stop it here."""
        f, X = self.fault, self.frank
        if f and f["kind"] in ("host_stop", "lost") and not self.hstopped and tag in f["tags"]:
            if (idx is None or X in idx) and self.h[X] >= f["at"]:
                self.hstopped = True
                self.events.append(("host_stop", X, float(self.h[X]), tag))
                self.h[X] = INF
        return (self.h if idx is None else self.h[idx]).copy()

    def compute(self, idx, start, dur):
        s = self.hw[idx] * self.sj * self.rng.lognormal(0, 0.02, len(idx))
        f = self.fault
        if f and f["kind"] == "slow":
            s = np.where((idx == self.frank) & (start >= f["at"]), s * f["factor"], s)
        end = start + dur * s
        if self.dead is not None:
            end = np.where((idx == self.dead[0]) & (end > self.dead[1]), INF, end)
        return end

    def coll(self, fam, a, h, op, nbytes, xfer, peer=-1, sel=None):
        """one collective instance on every comm of fam (or the groups sel); a / h world-size arrays
        (arrival on the device, host issue), read at the members. Returns a world array of completions
        (NaN outside the members)."""
        G = fam["G"] if sel is None else fam["G"][sel]
        cis = fam["ci"] if sel is None else fam["ci"][sel]
        gi = np.arange(len(fam["G"])) if sel is None else np.asarray(sel)
        ng, n = G.shape
        A = a[G]
        Cg = A.max(axis=1) + xfer * self.rng.uniform(0.93, 1.07, ng)
        if self.dead is not None:
            X, Td = self.dead
            Cg = np.where((G == X).any(axis=1) & (Cg > Td), INF, Cg)
        Cm = Cg[:, None] + self.rng.uniform(2e-6, 40e-6, (ng, n))
        out = np.full(self.W, np.nan)
        out[G.ravel()] = Cm.ravel()
        seq = fam["seq"][gi]
        cnt = fam["opc"].setdefault(op, np.zeros(len(fam["G"]), np.int64))
        aux = cnt[gi] + 1
        self._rec(G.ravel(), np.repeat(cis, n), np.repeat(seq, n), op, h[G].ravel(), A.ravel(), Cm.ravel(),
                  nbytes, np.tile(np.arange(n), ng), peer, n, np.repeat(aux, n), False)
        fam["seq"][gi] += 1
        cnt[gi] += 1
        return out

    def p2p(self, fam, src, a_s, a_r, h_s, h_r, nbytes, xfer):
        """send from comm rank src to comm rank 1-src on every 2-rank comm of fam (arrays by group)."""
        G = fam["G"]
        ng = len(G)
        C = np.maximum(a_s, a_r) + xfer * self.rng.uniform(0.9, 1.1, ng)
        cs = C + self.rng.uniform(1e-6, 20e-6, ng)
        cr = C + self.rng.uniform(1e-6, 20e-6, ng)
        seq = fam["p2p"][src].copy()
        fam["p2p"][src] += 1
        self._rec(G[:, src], fam["ci"], seq, OP_SEND, h_s, a_s, cs, nbytes, src, 1 - src, 2, 0, True)
        self._rec(G[:, 1 - src], fam["ci"], seq, OP_RECV, h_r, a_r, cr, nbytes, 1 - src, src, 2, 0, True)
        return cs, cr

    def ring(self, fam, a, h, nbytes, xfer, kill=None):
        """a grouped collective-permute: every member sends to comm rank j+1 and receives from j-1.
        Returns the world array of when each member's grouped kernel ends."""
        G = fam["G"]
        ng, n = G.shape
        A = a[G]
        nx = (np.arange(n) + 1) % n
        pv = (np.arange(n) - 1) % n
        CH = np.maximum(A, A[:, nx]) + xfer * self.rng.uniform(0.9, 1.1, (ng, n))   # channel j -> j+1
        if kill is not None:
            g, j = np.argwhere(G == kill)[0]
            CH[g, j] = INF
            CH[g, pv[j]] = INF
        cs = CH + self.rng.uniform(1e-6, 20e-6, (ng, n))
        cr = CH[:, pv] + self.rng.uniform(1e-6, 20e-6, (ng, n))
        seq = np.repeat(fam["ring"], n)
        fam["ring"] += 1
        cis = np.repeat(fam["ci"], n)
        cr_ = np.tile(np.arange(n), ng)
        self._rec(G.ravel(), cis, seq, OP_SEND, h[G].ravel(), A.ravel(), cs.ravel(), nbytes, cr_,
                  np.tile(nx, ng), n, 0, True)
        self._rec(G.ravel(), cis, seq, OP_RECV, h[G].ravel(), A.ravel(), cr.ravel(), nbytes, cr_,
                  np.tile(pv, ng), n, 0, True)
        out = np.full(self.W, np.nan)
        out[G.ravel()] = np.maximum(cs, cr).ravel()
        return out

    def add_steps(self, it, idx, t0, t1, fw, bw, op):
        self.steps.append((it, np.asarray(idx), np.asarray(t0, float), np.asarray(t1, float),
                           np.asarray(fw, float), np.asarray(bw, float), np.asarray(op, float)))

    def live(self, dev):
        end = float(self.sc["dur"])
        lv = np.minimum(dev, self.h)
        return bool(np.any(np.isfinite(lv) & (lv < end)))

    def coords(self, r):
        st = self.sc["stack"]
        if st == "pipe":
            return {"tp": 0, "pp": int(r // self.sc["DP"]), "dp": int(r % self.sc["DP"])}
        if st == "ulysses":
            return {"tp": 0, "pp": 0, "dp": int(r // self.sc["SP"]), "cp": int(r % self.sc["SP"])}
        if st in ("zero3", "gloo"):
            return {"tp": 0, "pp": 0, "dp": int(r)}
        return None   # JAX: the agent knows no coordinates

    def run(self):
        getattr(self, "run_" + self.sc["stack"])()

    # ----------------------------------------------------------------- 1. ZeRO-3
    def run_zero3(self):
        sc, rng, W, A = self.sc, self.rng, self.W, self.ALL
        T, L, P, per_bucket = sc["T"], 12, 2, 2
        dp = self.family([list(range(W))])
        f_c, b_c, o_c = 0.28 * T / L, 0.56 * T / L, 0.06 * T
        ag_x, rs_x, ar_x = 0.017 * T, 0.05 * T, 0.0012
        ag_bytes, rs_bytes = 560 << 20, 1120 << 20
        comp = 3.0 + rng.uniform(0, 0.05, W)
        nccl = comp.copy()
        self.h = comp - 0.02
        it = 0
        while self.live(comp) and it < 20000:
            self.sj = rng.lognormal(0, 0.03)
            it_start = comp.copy()
            ag, nxt = {}, 0
            for i in range(L):
                self.launch(0.0025)                       # pre-forward hook (partitioned-param coordinator)
                while nxt <= min(L - 1, i + P):
                    self.launch(0.0003)
                    hh = self.issue("ag_fwd")
                    c = self.coll(dp, np.maximum(nccl, hh), hh, OP_ALLGATHER, ag_bytes, ag_x)
                    nccl, ag[nxt] = c, c
                    nxt += 1
                self.launch(0.0012)
                comp = self.compute(A, np.maximum.reduce([comp, self.h, ag[i]]), f_c)
            self.launch(0.002)
            comp = self.compute(A, np.maximum(comp, self.h), 0.02 * T)   # loss
            t_fwd = comp.copy()
            ag, nxt = {}, L - 1
            for i in range(L - 1, -1, -1):
                self.launch(0.0025)                       # pre-backward hook
                while nxt >= max(0, i - P):
                    self.launch(0.0003)
                    hh = self.issue("ag_bwd")
                    c = self.coll(dp, np.maximum(nccl, hh), hh, OP_ALLGATHER, ag_bytes, ag_x)
                    nccl, ag[nxt] = c, c
                    nxt -= 1
                self.launch(0.002)
                comp = self.compute(A, np.maximum.reduce([comp, self.h, ag[i]]), b_c)
                if i % per_bucket == 0:                   # a gradient bucket is full: reduce stream
                    self.launch(0.0005)
                    hh = self.issue("rs")
                    nccl = self.coll(dp, np.maximum.reduce([nccl, hh, comp]), hh, OP_REDUCESCATTER,
                                     rs_bytes, rs_x)
            comp = np.maximum(comp, nccl)                 # default stream waits for the reduce stream
            self.launch(0.001)
            comp = self.compute(A, np.maximum(comp, self.h), 0.003)      # overflow flag / grad norm
            hh = self.issue("ar")
            c = self.coll(dp, np.maximum.reduce([nccl, hh, comp]), hh, OP_ALLREDUCE, 8, ar_x)
            nccl = c
            comp = np.maximum(comp, c)
            t_bwd = comp.copy()
            self.issue("sync")                            # overflow.item(): the host waits for the flag
            self.h = np.maximum(self.h, c + rng.uniform(0.0002, 0.001, W))
            self.launch(0.004)
            comp = self.compute(A, np.maximum(comp, self.h), o_c)
            self.add_steps(it, A, it_start, comp, t_fwd - it_start, t_bwd - t_fwd, comp - t_bwd)
            it += 1

    # ----------------------------------------------------------------- 2. DeepSpeed pipeline engine
    def run_pipe(self):
        sc, rng, W = self.sc, self.rng, self.W
        P, DP, M = sc["PP"], sc["DP"], sc["M"]
        R = [np.arange(s * DP, (s + 1) * DP) for s in range(P)]
        pair = [self.family([[s * DP + d, (s + 1) * DP + d] for d in range(DP)]) for s in range(P - 1)]
        dpf = [self.family([list(R[s])]) for s in range(P)]
        ppf = self.family([[s * DP + d for s in range(P)] for d in range(DP)])
        tied = self.family([[d, (P - 1) * DP + d] for d in range(DP)])
        stage_w = [1.03, 1.0, 1.0, 1.02] if P == 4 else [1.0] * P
        for s in range(P):
            self.hw[R[s]] = stage_w[s]
        self.hw[R[P - 1]] *= sc.get("last_factor", 1.0)
        progs = [ds_train_schedule(M, P, s) for s in range(P)]
        f_c, b_c, o_c, load_c = sc["f"], 2.0 * sc["f"], 0.05, 0.002
        act_bytes, act_x = 24 << 20, 0.0035
        dev = 3.0 + rng.uniform(0, 0.05, W)
        self.h = dev - 0.02
        match = {"send_act": (1, "recv_act"), "recv_act": (-1, "send_act"),
                 "send_grad": (-1, "recv_grad"), "recv_grad": (1, "send_grad")}
        it = 0

        def local(s, dur, tag=None, cost=0.0015):
            idx = R[s]
            self.launch(cost, idx)
            if tag:
                self.issue(tag, idx)
            e = self.compute(idx, np.maximum(dev[idx], self.h[idx]), dur)
            dur_ = e - np.maximum(dev[idx], self.h[idx])
            dev[idx] = e
            return dur_

        def coll_on(fam, idx, op, nbytes, xfer, tag, peer=-1, sel=None):
            self.launch(0.0004, idx)
            hh = np.full(W, np.nan)
            hh[idx] = self.issue(tag, idx)
            a = np.full(W, np.nan)
            a[idx] = np.maximum(dev[idx], hh[idx])
            c = self.coll(fam, a, hh, op, nbytes, xfer, peer=peer, sel=sel)
            dev[idx] = c[idx]

        while self.live(dev) and it < 20000:
            self.sj = rng.lognormal(0, 0.03)
            it_start = dev.copy()
            fsum, bsum = np.zeros(W), np.zeros(W)
            pc = [0] * P
            while True:
                progressed = False
                for s in range(P):
                    while pc[s] < len(progs[s]):
                        ins = progs[s][pc[s]]
                        k = ins[0]
                        if k == "load":
                            local(s, load_c, cost=0.001)
                        elif k == "fwd":
                            fsum[R[s]] += local(s, f_c, tag="fwd")
                        elif k == "bwd":
                            bsum[R[s]] += local(s, b_c, tag="bwd")
                        elif k in match:
                            d, other = match[k]
                            q = s + d
                            if not (pc[q] < len(progs[q]) and progs[q][pc[q]] == (other, ins[1])):
                                break
                            snd, rcv = (s, q) if k.startswith("send") else (q, s)
                            act = k.endswith("act")
                            fam = pair[min(s, q)]
                            src = 0 if act else 1
                            Is, Ir = R[snd], R[rcv]
                            self.launch(0.0004, Is)
                            hs = self.issue("send_act" if act else "send_grad", Is)
                            self.launch(0.0004, Ir)
                            hr = self.issue("recv_act" if act else "recv_grad", Ir)
                            a_s, a_r = np.maximum(dev[Is], hs), np.maximum(dev[Ir], hr)
                            cs, cr = self.p2p(fam, src, a_s, a_r, hs, hr, act_bytes, act_x)
                            dev[Is], dev[Ir] = cs, cr
                            pc[q] += 1
                        elif k == "tied":
                            if P > 1 and s in (0, P - 1):
                                q = P - 1 if s == 0 else 0
                                if not (pc[q] < len(progs[q]) and progs[q][pc[q]][0] == "tied"):
                                    break
                                coll_on(tied, np.concatenate([R[0], R[P - 1]]), OP_ALLREDUCE, 400 << 20,
                                        0.02, "tied")
                                pc[q] += 1
                        elif k == "reduce":
                            for _b in range(2):
                                coll_on(dpf[s], R[s], OP_ALLREDUCE, 700 << 20, 0.03, "reduce")
                        elif k == "opt":
                            local(s, o_c, tag="opt", cost=0.003)
                        pc[s] += 1
                        progressed = True
                if not progressed:
                    break
            assert all(pc[s] == len(progs[s]) for s in range(P)), "pipeline schedule deadlocked"
            # loss: all-reduce over the last stage's DP comm, broadcast from the last stage to the pipe
            coll_on(dpf[P - 1], R[P - 1], OP_ALLREDUCE, 4, 0.0008, "loss")
            coll_on(ppf, self.ALL, OP_BROADCAST, 4, 0.001, "loss_bcast", peer=P - 1)
            self.issue("sync")
            self.h = np.maximum(self.h, dev + rng.uniform(0.0002, 0.001, W))   # loss.item()
            opt = np.full(W, o_c)
            self.add_steps(it, self.ALL, it_start, dev, fsum, bsum, opt * self.hw)
            it += 1

    # ----------------------------------------------------------------- 3. DeepSpeed-Ulysses
    def run_ulysses(self):
        sc, rng, W, A = self.sc, self.rng, self.W, self.ALL
        SP, DP, T, L = sc["SP"], sc["DP"], sc["T"], 8
        spf = self.family([[n * SP + j for j in range(SP)] for n in range(DP)])
        world = self.family([list(range(W))])
        qkv, attn, mlp = 0.05 * T / L, 0.12 * T / L, 0.12 * T / L
        a2a_b, a2a_x = 48 << 20, 0.0025
        rs_b, rs_x, ag_x = 900 << 20, 0.04 * T, 0.05 * T
        comp = 3.0 + rng.uniform(0, 0.05, W)
        wq = comp.copy()
        self.h = comp - 0.02
        it = 0

        def a2a(comp, tag):
            self.launch(0.0004)
            hh = self.issue(tag)
            return self.coll(spf, np.maximum(comp, hh), hh, OP_ALLTOALL, a2a_b, a2a_x)

        def cp(comp, dur, cost=0.0015):
            self.launch(cost)
            return self.compute(A, np.maximum(comp, self.h), dur)

        while self.live(comp) and it < 20000:
            self.sj = rng.lognormal(0, 0.03)
            it_start = comp.copy()
            for i in range(L):
                comp = cp(comp, qkv)
                comp = a2a(comp, "a2a1")              # scatter heads, gather the sequence
                comp = cp(comp, attn)
                comp = a2a(comp, "a2a2")              # back to sequence-sharded
                comp = cp(comp, mlp)
            comp = cp(comp, 0.02 * T)
            t_fwd = comp.copy()
            for i in range(L - 1, -1, -1):
                comp = cp(comp, 2 * mlp)
                comp = a2a(comp, "a2a2_bwd")
                comp = cp(comp, 2 * attn)
                comp = a2a(comp, "a2a1_bwd")
                comp = cp(comp, 2 * qkv)
                if i % 2 == 0:
                    self.launch(0.0005)
                    hh = self.issue("rs")
                    wq = self.coll(world, np.maximum.reduce([wq, hh, comp]), hh, OP_REDUCESCATTER, rs_b, rs_x)
            comp = np.maximum(comp, wq)
            comp = cp(comp, 0.003)
            hh = self.issue("ar")
            c = self.coll(world, np.maximum.reduce([wq, hh, comp]), hh, OP_ALLREDUCE, 8, 0.0012)
            wq = c
            comp = np.maximum(comp, c)
            t_bwd = comp.copy()
            self.issue("sync")
            self.h = np.maximum(self.h, c + rng.uniform(0.0002, 0.001, W))
            comp = cp(comp, 0.05 * T, cost=0.003)
            hh = self.issue("ag")
            wq = self.coll(world, np.maximum.reduce([wq, hh, comp]), hh, OP_ALLGATHER, rs_b * 2, ag_x)
            comp = np.maximum(comp, wq)
            self.add_steps(it, A, it_start, comp, t_fwd - it_start, t_bwd - t_fwd, comp - t_bwd)
            it += 1

    # ----------------------------------------------------------------- 4. JAX / XLA
    def run_jax(self):
        sc, rng, W, A = self.sc, self.rng, self.W, self.ALL
        N, T, L, RB = W // 8, sc["T"], 6, 2
        data = self.family([[n * 8 + m for n in range(N)] for m in range(8)])
        model = self.family([[n * 8 + m for m in range(8)] for n in range(N)])
        world = self.family([list(range(W))])
        qkv, blk, mlp, opt = 0.045 * T / L, 0.05 * T / L, 0.09 * T / L, 0.04 * T
        ag_b, ag_x, rs_x = 320 << 20, 0.011 * T, 0.016 * T
        perm_b, perm_x = 32 << 20, 0.004 * T
        comp = 3.0 + rng.uniform(0, 0.05, W)
        agq, cpq = comp.copy(), comp.copy()
        d1, d2 = comp.copy(), comp.copy()
        self.h = comp - 0.05
        graph = self.graph
        f = self.fault
        it = 0
        while self.live(comp) and it < 20000:
            self.sj = rng.lognormal(0, 0.03)
            self.h = np.maximum(self.h, d2) + rng.uniform(0.001, 0.003, W)   # async dispatch, 2 steps deep
            hs = self.issue("step")

            def H():
                if graph:
                    return hs.copy()
                self.launch(0.00004)
                return self.h.copy()

            ag = {}

            def AG(i):
                nonlocal agq
                hh = H()
                agq = self.coll(data, np.maximum.reduce([agq, hh, comp]), hh, OP_ALLGATHER, ag_b, ag_x)
                ag[i] = agq

            def cp(comp, dur):
                return self.compute(A, np.maximum(comp, H()), dur)

            def permute(comp):
                nonlocal cpq
                hh = H()
                a = np.maximum.reduce([cpq, hh, comp])
                kill = None
                if f and f["kind"] == "gpu_stop" and self.dead is None:
                    X = self.frank
                    if a[X] >= f["at"] and agq[X] <= a[X] and comp[X] <= a[X]:
                        kill = X
                        self.dead = (X, float(a[X]))
                        self.events.append(("gpu_stop", X, float(a[X])))
                cpq = self.ring(model, a, hh, perm_b, perm_x, kill=kill)
                if kill is not None:
                    cpq[kill] = INF
                return cpq

            AG(0)
            AG(1)
            for i in range(L):
                if i + 2 < L:
                    AG(i + 2)
                comp = np.maximum(comp, ag[i])
                comp = cp(comp, qkv)
                for _k in range(RB):
                    done = permute(comp)
                    comp = cp(comp, blk)
                    comp = np.maximum(comp, done)
                comp = cp(comp, mlp)
            comp = cp(comp, 0.02 * T)
            ag = {}
            AG(L - 1)
            AG(L - 2)
            for i in range(L - 1, -1, -1):
                if i - 2 >= 0:
                    AG(i - 2)
                comp = np.maximum(comp, ag[i])
                comp = cp(comp, 2 * mlp)
                for _k in range(RB):
                    done = permute(comp)
                    comp = cp(comp, 2 * blk)
                    comp = np.maximum(comp, done)
                comp = cp(comp, 2 * qkv)
                hh = H()
                agq = self.coll(data, np.maximum.reduce([agq, hh, comp]), hh, OP_REDUCESCATTER, ag_b, rs_x)
            comp = np.maximum(comp, agq)
            hh = H()
            comp = self.coll(world, np.maximum(comp, hh), hh, OP_ALLREDUCE, 4, 0.0015)
            comp = cp(comp, opt)
            d2, d1 = d1, comp.copy()
            it += 1

    # ----------------------------------------------------------------- 5. gloo DDP
    def run_gloo(self):
        sc, rng, W, A = self.sc, self.rng, self.W, self.ALL
        T, nb = sc["T"], 3
        world = self.family([list(range(W))])
        fwd, bwd, opt = 0.3 * T, 0.52 * T, 0.07 * T
        b_bytes, b_x = 24 << 20, 0.07 * T
        self.h = 3.0 + rng.uniform(0, 0.05, W)
        gq = self.h.copy()
        it = 0
        while self.live(self.h) and it < 100000:
            self.sj = rng.lognormal(0, 0.05)
            it_start = self.h.copy()
            hh = self.issue("bcast")                    # DDP broadcast_buffers at forward (blocking)
            a = np.maximum(hh, gq)
            c = self.coll(world, a, a, OP_BROADCAST, 64 << 10, 0.0008, peer=0)
            gq = c
            self.h = c + rng.uniform(2e-5, 1e-4, W)
            self.h = self.compute(A, self.h, fwd * rng.lognormal(0, 0.04))
            t_fwd = self.h.copy()
            for b in range(nb):
                self.h = self.compute(A, self.h, bwd / nb)
                hh = self.issue("ar")
                a = np.maximum(hh, gq)                  # gloo's worker runs the buckets in order
                gq = self.coll(world, a, a, OP_ALLREDUCE, b_bytes, b_x)
            self.h = np.maximum(self.h, gq) + rng.uniform(2e-5, 1e-4, W)   # the reducer waits
            t_bwd = self.h.copy()
            self.h = self.compute(A, self.h, opt)
            self.add_steps(it, A, it_start, self.h, t_fwd - it_start, t_bwd - t_fwd, self.h - t_bwd)
            it += 1


# ------------------------------------------------------------------------------------------------ emission
def emit(sim, out_path, job):
    sc, rng = sim.sc, sim.rng
    end = float(sc["dur"])
    L = {k: np.concatenate(v) for k, v in sim.calls.items()}
    n = len(L["rank"])
    h, a, c = L["h"], L["a"], L["c"]
    f = sim.fault
    parts = []   # (write time, flags, t_start, t_end, call index)
    if sim.probe == "gpu":
        base = F_GPU | (F_GRAPH if sim.graph else 0)
        sw = rng.uniform(0.2, 0.5, sim.W)[L["rank"]]
        ent = np.isfinite(a) & ((c - a) > sw)
        don = np.isfinite(a) & np.isfinite(c)
        idx = np.nonzero(ent)[0]
        parts.append((a[idx] + sw[idx], np.full(len(idx), base), a[idx], np.zeros(len(idx)), idx))
        idx = np.nonzero(don)[0]
        parts.append((c[idx] + 0.002, np.full(len(idx), base | F_COMPLETED), a[idx], c[idx], idx))
    elif sim.probe == "enq":
        poll = rng.uniform(0.001, 0.015, n)
        obs = c + poll
        ent = np.isfinite(h)
        don = ent & np.isfinite(c)
        if f and f["kind"] == "lost":
            X, Tf = f["rank"], f["at"]
            gone = (L["rank"] == X) & ent & ~(obs <= Tf)
            don = don & ~gone
            idx = np.nonzero(gone)[0]
            tl = np.maximum(Tf, h[idx]) + f["timeout"]
            parts.append((tl, np.full(len(idx), F_ENQ | F_LOST), h[idx], np.zeros(len(idx)), idx))
        idx = np.nonzero(ent)[0]
        parts.append((h[idx] + 0.0001, np.full(len(idx), F_ENQ), h[idx], np.zeros(len(idx)), idx))
        idx = np.nonzero(don)[0]
        parts.append((obs[idx], np.full(len(idx), F_ENQ | F_COMPLETED), h[idx], obs[idx], idx))
    else:   # host-blocking
        ent = np.isfinite(a)
        don = ent & np.isfinite(c)
        idx = np.nonzero(ent)[0]
        parts.append((a[idx] + 0.0001, np.zeros(len(idx), np.int64), a[idx], np.zeros(len(idx)), idx))
        idx = np.nonzero(don)[0]
        parts.append((c[idx] + 0.0001, np.full(len(idx), F_COMPLETED), a[idx], c[idx], idx))
    wt = np.concatenate([p[0] for p in parts])
    fl = np.concatenate([p[1] for p in parts]).astype(np.int64)
    ts = np.concatenate([p[2] for p in parts])
    te = np.concatenate([p[3] for p in parts])
    ci = np.concatenate([p[4] for p in parts]).astype(np.int64)
    nnodes = sim.nnodes
    phase = rng.uniform(0, 0.2, nnodes)
    node = sim.rank_node[L["rank"][ci]]
    fk = np.ceil((wt - phase[node]) / 0.2).astype(np.int64)
    ft = phase[node] + fk * 0.2
    keep = ft <= end
    wt, fl, ts, te, ci, node, fk, ft = (x[keep] for x in (wt, fl, ts, te, ci, node, fk, ft))
    m = len(ci)
    rank = L["rank"][ci]
    comm = L["comm"][ci]
    isp2p = L["p2p"][ci]
    recs = np.zeros(m, REC)
    recs["kind"] = K_CALL
    recs["op"] = L["op"][ci]
    recs["flags"] = fl
    recs["rank"] = rank
    comm_id = np.array(sim.comm_ids, dtype=np.uint64)
    recs["comm"] = comm_id[comm]
    recs["seq"] = L["seq"][ci]
    off = sim.node_off[node] + sim.node_drift[node] * ts
    t0n = EPOCH + int(rng.integers(0, 3600)) * NS
    recs["t_start_ns"] = t0n + np.round((ts + off) * NS).astype(np.int64)
    recs["t_end_ns"] = np.where(fl & F_COMPLETED, t0n + np.round((te + off) * NS).astype(np.int64), 0)
    recs["bytes"] = L["bytes"][ci]
    recs["comm_rank"] = L["crank"][ci]
    recs["peer"] = L["peer"][ci]
    recs["nranks"] = L["nranks"][ci]
    aux_ok = (sim.probe == "gpu") and not sim.graph
    recs["aux"] = np.where(aux_ok & ~isp2p, L["aux"][ci], 0)
    msgs = []
    comm_hex = [f"{x:016x}" for x in sim.comm_ids]
    NC = len(sim.comm_ids)
    # topology + COMM_INIT at t = 1.0 .. 1.3
    t_init = 1.0 + rng.uniform(0, 0.3, sim.W)
    for r in range(sim.W):
        nd = int(sim.rank_node[r])
        tsn = t0n + int(sim.node_clock(nd, t_init[r]) * NS)
        v = {"v": 1, "job": job, "ts_ns": tsn, "rank": r, "world_size": sim.W, "node": sim.node_name[nd],
             "local_rank": int(r % sim.gpn), "gpu": f"GPU-{zlib.crc32(f'{job}/{r}'.encode()):08x}"}
        co = sim.coords(r)
        if co:
            v["coords"] = co
        msgs.append((tsn, {"topic": "cw.topology.v1", "key": job, "ts_ns": tsn, "value": v}))
    init_by = {}
    for cidx, M in enumerate(sim.comm_members):
        nodes_in = len(set(int(x) // sim.gpn for x in M))
        for j, r in enumerate(M):
            init_by.setdefault((int(sim.rank_node[r]), cidx), []).append((int(r), j, len(M), nodes_in))
    init_time = {}
    for (nd, cidx), lst in init_by.items():
        rr = np.zeros(len(lst), REC)
        tt = max(t_init[r] for (r, *_) in lst) + 0.05
        for q, (r, j, nr, nin) in enumerate(lst):
            tn = t0n + int(sim.node_clock(nd, t_init[r] + 0.01) * NS)
            init_time[(r, cidx)] = tn
            rr[q] = (K_INIT, 0, F_COMPLETED, r, sim.comm_ids[cidx], 0, tn, tn, 0, j, -1, nr, nin)
        tsn = t0n + int(sim.node_clock(nd, tt) * NS)
        msgs.append((tsn, {"topic": "cw.calls.v1", "key": f"{job}/{comm_hex[cidx]}", "ts_ns": tsn,
                           "value_b64": base64.b64encode(batch_bytes(rr)).decode()}))
    # call batches grouped by (node, comm, flush)
    order = np.lexsort((wt, fk, comm, node))
    nd_s, cm_s, fk_s = node[order], comm[order], fk[order]
    brk = np.nonzero((np.diff(nd_s) != 0) | (np.diff(cm_s) != 0) | (np.diff(fk_s) != 0))[0] + 1
    starts = np.concatenate([[0], brk])
    stops = np.concatenate([brk, [m]])
    batch_jit = rng.uniform(0, 0.015, len(starts))
    for b, (s0, s1) in enumerate(zip(starts, stops)):
        sel = order[s0:s1]
        nd = int(nd_s[s0])
        tsn = t0n + int(sim.node_clock(nd, ft[sel[0]] + batch_jit[b]) * NS)
        msgs.append((tsn, {"topic": "cw.calls.v1", "key": f"{job}/{comm_hex[int(cm_s[s0])]}", "ts_ns": tsn,
                           "value_b64": base64.b64encode(batch_bytes(recs[sel])).decode()}))
    # heartbeats: per node and comm every 1 s, state as of the agent's last flush
    hb_phase = rng.uniform(0, 1.0, nnodes)
    seqs = recs["seq"].astype(np.int64)
    done_f = (fl & F_COMPLETED) != 0
    # channel: 0 = collectives; 1 + 2 * peer + (op == RECV) = a p2p channel
    chan = np.where(isp2p, 1 + 2 * recs["peer"].astype(np.int64) + (recs["op"] == OP_RECV), 0)
    key = (rank.astype(np.int64) * NC + comm) * 4096 + chan
    o2 = np.lexsort((ft, key))
    k2 = key[o2]
    kb = np.concatenate([[0], np.nonzero(np.diff(k2))[0] + 1, [m]])
    state = {}
    for s0, s1 in zip(kb[:-1], kb[1:]):
        sel = o2[s0:s1]
        st = np.maximum.accumulate(seqs[sel])
        cd = np.maximum.accumulate(np.where(done_f[sel], seqs[sel], -1))
        ls = np.maximum.accumulate(recs["t_start_ns"][sel])
        le = np.maximum.accumulate(np.where(done_f[sel], recs["t_end_ns"][sel], 0))
        state[int(k2[s0])] = (ft[sel], st, cd, ls, le)
    chans = {}
    for kk in state:
        chans.setdefault(kk // 4096, []).append(kk % 4096)
    node_comms = {}
    for cidx, M in enumerate(sim.comm_members):
        for r in M:
            node_comms.setdefault((int(r) // sim.gpn, cidx), []).append(int(r))
    hb_count = 0
    for (nd, cidx), rs in node_comms.items():
        hbs = np.arange(hb_phase[nd] + 1.5, end, 1.0)
        per_rank = []
        for r in rs:
            rk = r * NC + cidx
            it_ = init_time[(r, cidx)]
            ch = {}
            TS = np.full(len(hbs), it_, np.int64)
            TE = np.full(len(hbs), it_, np.int64)
            for cc in sorted(chans.get(rk, [])):
                f_t, st, cd, ls, le = state[rk * 4096 + cc]
                pos = np.searchsorted(f_t, hbs + 1e-9, side="right") - 1
                ok = pos >= 0
                p = np.maximum(pos, 0)
                S_ = np.where(ok, st[p], -1)
                C_ = np.where(ok, cd[p], -1)
                ch[cc] = (S_, C_)
                TS = np.maximum(TS, np.where(ok, ls[p], 0))
                TE = np.maximum(TE, np.where(ok, le[p], 0))
            per_rank.append((r, ch, TS, TE))
        key_s = f"{job}/{comm_hex[cidx]}"
        for q, t in enumerate(hbs):
            tsn = t0n + int(sim.node_clock(nd, t) * NS)
            ranks = []
            for (r, ch, TS, TE) in per_rank:
                coll_st = ch.get(0)
                e = {"rank": r, "started": int(coll_st[0][q]) if coll_st else -1,
                     "completed": int(coll_st[1][q]) if coll_st else -1,
                     "t_last_start_ns": int(TS[q]), "t_last_end_ns": int(TE[q])}
                p2 = []
                for cc, (S_, C_) in ch.items():
                    if cc == 0 or S_[q] < 0:
                        continue
                    p2.append({"peer": int((cc - 1) // 2), "op": "recv" if (cc - 1) % 2 else "send",
                               "started": int(S_[q]), "completed": int(C_[q])})
                if p2:
                    e["p2p"] = p2
                ranks.append(e)
            msgs.append((tsn, {"topic": "cw.progress.v1", "key": key_s, "ts_ns": tsn, "value": {
                "v": 1, "job": job, "node": sim.node_name[nd], "ts_ns": tsn, "comm": comm_hex[cidx],
                "ranks": ranks}}))
            hb_count += 1
    # iteration timings (hook jobs only; JAX has none)
    nsteps = 0
    if sc.get("steps"):
        for (itn, idx, t0s, t1s, fw, bw, op) in sim.steps:
            for j, r in enumerate(idx):
                t0, t1 = float(t0s[j]), float(t1s[j])
                if not (np.isfinite(t0) and np.isfinite(t1)) or t1 > end:
                    continue
                if f and f["kind"] == "lost" and r == f["rank"] and t1 > f["at"]:
                    continue   # its hook's CUDA events are not observed any more
                nd = int(sim.rank_node[r])
                a_ns = t0n + int(sim.node_clock(nd, t0) * NS)
                b_ns = max(a_ns + 1, t0n + int(sim.node_clock(nd, t1) * NS))
                tsn = t0n + int(sim.node_clock(nd, t1 + 0.003) * NS)
                msgs.append((tsn, {"topic": "cw.steps.v1", "key": job, "ts_ns": tsn, "value": {
                    "v": 1, "job": job, "rank": int(r), "iteration": int(itn), "t_start_ns": a_ns,
                    "t_end_ns": b_ns, "phases": {"forward_ms": round(float(fw[j]) * 1e3, 3),
                                                 "backward_ms": round(float(bw[j]) * 1e3, 3),
                                                 "optimizer_ms": round(float(op[j]) * 1e3, 3)}}}))
                nsteps += 1
    check_capture(sim, recs, msgs, job)
    msgs.sort(key=lambda x: x[0])
    with open(out_path, "w") as fh:
        for _, mm in msgs:
            fh.write(json.dumps(mm, separators=(",", ":")))
            fh.write("\n")
    return t0n, dict(records=int(m), messages=len(msgs), heartbeats=hb_count, steps=nsteps,
                     lost=int(np.count_nonzero(fl & F_LOST)))


# ------------------------------------------------------------------------------------------------ checks
def check_capture(sim, recs, msgs, job):
    """the capture against wire-v1: a failure here is this generator's bug, not the detector's."""
    def fail(msg):
        raise SystemExit(f"[{job}] capture check failed: {msg}")
    if not np.all(np.isin(recs["kind"], [1, 2, 3])):
        fail("kind")
    if not np.all((recs["op"] >= 1) & (recs["op"] <= 11)):
        fail("op")
    fl = recs["flags"]
    if np.any(fl & ~np.uint16(31)):
        fail("flags bits")
    comp = (fl & F_COMPLETED) != 0
    if np.any(comp & (recs["t_end_ns"] < recs["t_start_ns"])):
        fail("t_end < t_start")
    if np.any((~comp) & (recs["t_end_ns"] != 0)):
        fail("t_end set without COMPLETED")
    if np.any(comp & ((fl & F_LOST) != 0)):
        fail("COMPLETED with COMPLETION_LOST")
    if np.any(recs["t_start_ns"] <= EPOCH):
        fail("t_start")
    if np.any((recs["comm_rank"] < 0) | (recs["comm_rank"] >= recs["nranks"].astype(np.int64))):
        fail("comm_rank range")
    if np.any((recs["rank"] < 0) | (recs["rank"] >= sim.W)):
        fail("rank range")
    op = recs["op"]
    p2p = (op == OP_SEND) | (op == OP_RECV)
    rooted = op == OP_BROADCAST
    other = ~p2p & ~rooted
    if np.any(recs["peer"][other] != -1):
        fail("peer of an unrooted collective")
    if np.any((recs["peer"][rooted | p2p] < 0) | (recs["peer"][rooted | p2p] >= recs["nranks"][rooted | p2p])):
        fail("peer range")
    if np.any(recs["peer"][p2p] == recs["comm_rank"][p2p]):
        fail("p2p to itself")
    if np.any(((fl & F_GPU) != 0) & ((fl & F_ENQ) != 0)):
        fail("GPU_TIMED with ENQUEUED in one probe")
    if np.any(((fl & F_GRAPH) != 0) & ((fl & F_GPU) == 0)):
        fail("GRAPH_CAPTURED without GPU_TIMED (this generator's graph jobs are plugin-only)")
    if np.any(recs["aux"][p2p] != 0):
        fail("aux of a p2p call")
    # members of a comm: global rank <-> comm rank fixed, nranks = comm size
    ids = np.array(sim.comm_ids, dtype=np.uint64)
    oid = np.argsort(ids)
    pos = np.searchsorted(ids[oid], recs["comm"])
    if np.any(pos >= len(ids)) or np.any(ids[oid][np.minimum(pos, len(ids) - 1)] != recs["comm"]):
        fail("unknown comm")
    ci = oid[pos]
    sizes = np.array([len(M) for M in sim.comm_members])
    if np.any(recs["nranks"] != sizes[ci]):
        fail("nranks != comm size")
    mx = sizes.max()
    mtab = np.full((len(sizes), mx), -1, np.int64)
    for i, M in enumerate(sim.comm_members):
        mtab[i, :len(M)] = M
    if np.any(mtab[ci, recs["comm_rank"]] != recs["rank"]):
        fail("rank is not the comm's member at comm_rank")
    # per (rank, comm, channel): seq in call order, one seq per call
    chan = np.where(p2p, 1 + 2 * recs["peer"].astype(np.int64) + (op == OP_RECV), 0)
    key = (recs["rank"].astype(np.int64) * len(sim.comm_ids) + ci) * 4096 + chan
    o = np.lexsort((recs["seq"], key))
    k, s, t = key[o], recs["seq"][o].astype(np.int64), recs["t_start_ns"][o]
    same = k[1:] == k[:-1]
    newer = same & (s[1:] > s[:-1])
    if np.any(newer & (t[1:] + 20_000_000 < t[:-1])):
        fail("seq not in call order")
    eq = same & (s[1:] == s[:-1])
    if np.any(eq & (recs["op"][o][1:] != recs["op"][o][:-1])):
        fail("two ops with one seq")
    # every completed SEND k a->b has a completed RECV k on b from a, same bytes
    t0c = min(m[0] for m in msgs)
    sd = np.nonzero((op == OP_SEND) & comp &
                    (recs["t_end_ns"] < t0c + int((float(sim.sc["dur"]) - 8.0) * NS)))[0]
    rv = np.nonzero((op == OP_RECV) & comp)[0]
    rset = {(int(recs["comm"][i]), int(recs["comm_rank"][i]), int(recs["peer"][i]), int(recs["seq"][i])):
            int(recs["bytes"][i]) for i in rv}
    for i in sd:
        kk = (int(recs["comm"][i]), int(recs["peer"][i]), int(recs["comm_rank"][i]), int(recs["seq"][i]))
        if rset.get(kk) != int(recs["bytes"][i]):
            fail(f"completed send without its completed recv {kk}")
    # a collective completes on every member or on none (among completed records of one instance)
    f = sim.fault
    lost_rank = f["rank"] if f and f["kind"] == "lost" else -1
    cc = np.nonzero(comp & ~p2p & (recs["rank"] != lost_rank))[0]
    ik = ci[cc].astype(np.int64) * (1 << 32) + recs["seq"][cc].astype(np.int64)
    uik, ucnt = np.unique(ik, return_counts=True)
    tmax = np.zeros(len(uik), np.int64)
    np.maximum.at(tmax, np.searchsorted(uik, ik), recs["t_end_ns"][cc])
    # (instances near the capture's end may be cut by the flush cut-off: only check instances well inside)
    last = {}
    for tsn, mm in sorted(msgs, key=lambda x: x[0]):
        if mm["topic"] == "cw.calls.v1":
            raw = base64.b64decode(mm["value_b64"])
            if raw[:4] != b"CWB1" or (len(raw) - 16) % 64 or \
                    struct.unpack("<I", raw[8:12])[0] != (len(raw) - 16) // 64:
                fail("batch header")
            rr = np.frombuffer(raw[16:], REC)
            if np.any(rr["comm"] != rr["comm"][0]) or mm["key"] != f"{job}/{int(rr['comm'][0]):016x}":
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
            for y in x.get("p2p", []):
                if y["started"] < y["completed"] or y["op"] not in ("send", "recv"):
                    fail(f"heartbeat p2p {y}")
    # a collective completes on every member or on none (the lost rank's completions are not observed;
    # instances in the capture's last seconds may be cut by the flush cut-off)
    t0 = min(m[0] for m in msgs)
    cut = t0 + int((float(sim.sc["dur"]) - 8.0) * NS)
    cidx = (uik >> 32).astype(np.int64)
    expect = sizes[cidx] - np.array([lost_rank in sim.comm_members[i] for i in cidx], dtype=np.int64)
    bad = (ucnt != expect) & (tmax < cut)
    if np.any(bad):
        b = np.nonzero(bad)[0][0]
        fail(f"collective instance completed on {ucnt[b]} of {expect[b]} members")


# ------------------------------------------------------------------------------------------------ truth
def truth_of(sim, sc, job, t0n, stats):
    f = sc.get("fault")
    end = float(sc["dur"])
    st = sc["stack"]
    tr = dict(job=job, scenario=sc["name"], stack=st, expect=sc["expect"], world=sim.W, probe=sim.probe,
              graph=sim.graph, steps=bool(sc.get("steps")), note=sc["note"], capture_start_ns=t0n,
              capture_end_ns=t0n + int(end * NS), culprits=[], victims=[], kind=None, onset_ns=None,
              structural=[], stats=stats,
              comms=[dict(id=f"{cid:016x}", members=[int(x) for x in M])
                     for cid, M in zip(sim.comm_ids, sim.comm_members)])
    if st == "pipe":
        P, DP = sc["PP"], sc["DP"]
        tr["layout"] = f"PP {P} x DP {DP}, rank = stage * {DP} + replica; a stage per node"
    elif st == "ulysses":
        tr["layout"] = f"SP {sc['SP']} (a node) x DP {sc['DP']}, rank = replica * {sc['SP']} + sp"
    elif st == "jax":
        tr["layout"] = f"mesh data {sim.W // 8} (nodes) x model 8 (in a node), rank = node * 8 + model"
    else:
        tr["layout"] = f"{sim.W} ranks, {sim.gpn} a node"
    if sc["expect"] == "structural":
        P, DP = sc["PP"], sc["DP"]
        tr["kind"] = "structural"
        tr["structural"] = [int(x) for x in range((P - 1) * DP, P * DP)]
        tr["structural_note"] = (f"the last stage (ranks {(P - 1) * DP}-{P * DP - 1}) computes "
                                 f"{sc['last_factor']}x the others from the first iteration (LM head + loss): "
                                 "every other stage waits for it in its recvs and the tied all-reduce, every "
                                 "iteration, by design. A tuning advice for the stage at most (one P3), not a "
                                 "faulty rank: no slow_rank may name a rank.")
        tr["waitfor"] = "healthy, unbalanced by design; no culprit"
        return tr
    if not f:
        tr["waitfor"] = "healthy: every wait is the job's own overlap and rendezvous; no culprit"
        return tr
    X = int(f["rank"])
    tr["culprits"] = [X]
    tr["culprit_node"] = sim.node_name[int(sim.rank_node[X])]
    tr["victims"] = [int(r) for r in range(sim.W) if r != X]
    ev = [e for e in sim.events if e[0] in ("host_stop", "gpu_stop")]
    if f["kind"] == "slow":
        tr["kind"] = "slow_rank"
        tr["factor"] = f["factor"]
        tr["onset_ns"] = t0n + int(f["at"] * NS)
        if st == "zero3":
            why = (f"rank {X}'s GPU computes {f['factor']}x slower from {f['at']} s. Its backward finishes each "
                   f"bucket late, so its reduce-scatters start late on its NCCL stream and the prefetched "
                   f"all-gathers queued behind them start late too; it reaches the overflow all-reduce last. "
                   f"Every other rank (one DP comm) waits inside those calls for {X}; {X} waits for nobody: "
                   f"the culprit. " + ("Under the host-enqueue hook the records hold enqueue times only: its "
                                       "forward/backward phases (1.5x its peers' compute) show it; the peers' "
                                       "waits fall in their backward and optimizer phases."
                                       if sim.probe == "enq" else ""))
        elif st == "pipe":
            P, DP = sc["PP"], sc["DP"]
            s, d = X // DP, X % DP
            why = (f"rank {X} (stage {s}, replica {d}) computes {f['factor']}x slower from {f['at']} s. In replica "
                   f"{d}, stage {s + 1} waits in RecvActivation for its activations and stage {s - 1} in RecvGrad "
                   f"for its gradients (hard p2p waits on {X}), so the whole replica {d} reaches the step-end "
                   f"collectives late; the other replicas' ranks of every stage wait inside the stage's DP "
                   f"all-reduce, the tied all-reduce and the loss broadcast on replica {d}'s ranks, which "
                   f"themselves waited on {X}. Its stage peers in other replicas compute at the normal speed: "
                   f"{X} is the only rank late in its own compute (phases 1.3x its stage's); every wait chain "
                   f"ends at {X}.")
        elif st == "jax":
            why = (f"rank {X}'s GPU computes {f['factor']}x slower from {f['at']} s. Its ring neighbours (model "
                   f"comm, in its node) wait in every collective-permute on its late start, its node's ranks "
                   f"then reach their data-comm all-gathers / reduce-scatters late (their peers on other nodes "
                   f"wait there on them) and the world all-reduce last. No iteration timings: only GPU-timed "
                   f"records. {X} waits for nobody: the culprit; the rest are victims.")
        else:
            why = (f"gloo: rank {X}'s host computes {f['factor']}x slower from {f['at']} s (CPU contention): it "
                   f"enters every bucket all-reduce and the buffer broadcast last; the 7 others block inside "
                   f"them (blocking probe: real host times). Its forward/backward phases are 2x; the others' "
                   f"backward phases hold the waits.")
        tr["waitfor"] = why
        return tr
    tr["kind"] = "hang"
    tr["onset_ns"] = t0n + int(ev[0][2] * NS) if ev else t0n + int(f["at"] * NS)
    onset = ev[0][2] if ev else f["at"]
    tr["onset_s"] = round(float(onset), 3)
    if f["kind"] == "host_stop" and st == "zero3":
        why = (f"rank {X}'s host stops at {onset:.2f} s in ZeRO-3's prefetch coordinator, before issuing a forward "
               f"prefetch all-gather; its GPU runs what it had queued (the earlier all-gathers complete on "
               f"every member) and idles: {X} is inside no call and waits for nobody: the root. All 63 others "
               f"are inside that all-gather on the DP comm (GPU-timed: their devices started it), with their "
               f"next prefetched all-gathers queued behind it on the same NCCL stream (symptoms: not started "
               f"on the device) and their compute stream waiting on it.")
    elif f["kind"] == "host_stop" and st == "ulysses":
        SP = sc["SP"]
        why = (f"rank {X}'s host stops at {onset:.2f} s before the second all-to-all of an attention layer; its "
               f"device drains and idles: inside no call, the root. Its {SP - 1} sequence-parallel peers (its "
               f"node) wait inside that all-to-all (hard wait on {X}); the other replicas finish the step's "
               f"compute and wait inside the gradient reduce-scatter on the all-rank comm, which {X}'s node "
               f"never reaches: every chain ends at {X}.")
    elif f["kind"] == "host_stop" and st == "pipe":
        P, DP = sc["PP"], sc["DP"]
        s, d = X // DP, X % DP
        why = (f"rank {X} (stage {s}, replica {d}) stops at {onset:.2f} s just before posting SendActivation to "
               f"stage {s + 1}: the send is never posted. {X} is inside no call (its earlier recvs and sends "
               f"completed). Rank {(s + 1) * DP + d} (stage {s + 1}) waits inside the matching RecvActivation (hard "
               f"wait on {X}); stage {s - 1} of replica {d} waits in RecvGrad for a gradient {X} never sends; "
               f"later stages wait in their recvs on their predecessors; the other replicas finish their "
               f"micro-batches and wait inside each stage's DP gradient all-reduce / the tied all-reduce for "
               f"replica {d}'s ranks. Root: {X}.")
    elif f["kind"] == "gpu_stop":
        why = (f"rank {X}'s GPU stops at {onset:.2f} s inside a ring collective-permute (a grouped send to model "
               f"rank m+1 and recv from m-1); nothing else of it was in flight. Its send and recv never "
               f"complete; its left neighbour's send into it and its right neighbour's recv from it never "
               f"complete either (their other channel of that permute completed): those two wait on {X} in a "
               f"p2p channel. {X} is inside a call but its GPU has stopped: it is the one common member of both "
               f"stuck channels, and nothing it waits on is stuck elsewhere. The other ranks finish the permute "
               f"and wait in the next data-comm all-gather / world all-reduce on ranks of {X}'s node (victims "
               f"waiting on victims). The culprit is {X} (a GPU stop, not a transport fault: every other "
               f"channel of the same comm completes).")
    elif f["kind"] == "host_stop" and st == "jax":
        why = (f"rank {X}'s host stops launching step graphs at {onset:.2f} s (CUDA-graph replays, "
               f"GRAPH_CAPTURED); its GPU finishes the replays already launched (async dispatch up to 2 steps "
               f"ahead) and idles: inside no call, the root. The other ranks launch the next replay and wait "
               f"inside its first all-gather on the data comm of {X}'s model index / the ring permute of "
               f"{X}'s node, the rest on them.")
    elif f["kind"] == "host_stop" and st == "gloo":
        why = (f"gloo: rank {X} stops at {onset:.2f} s (a stuck data-loader worker) before the next forward's "
               f"buffer broadcast from rank 0; it is inside no call. The 7 others block inside that broadcast "
               f"(blocking probe: their entries are real host times, no completion) on {X}. Root: {X}.")
    elif f["kind"] == "lost":
        why = (f"host-enqueue ZeRO-3: at {f['at']} s rank {X}'s driver wedges (DOMAIN.md: a completion path "
               f"stuck is a strong sign of a GPU or driver fault on that rank). Its probe observes no "
               f"completion after that; its GPU runs what was queued, so its peers see those collectives "
               f"complete while {X} still reports them incomplete. {X}'s host blocks at its next .item() "
               f"({onset:.2f} s) and never enqueues the next iteration's first all-gather: it looks missing. "
               f"{f['timeout']:.0f} s later its probe writes COMPLETION_LOST for its unobserved calls (not a "
               f"wait). Its 31 peers wait inside the next iteration's first all-gather (only the oldest "
               f"blocked; the rest of their forward enqueued behind it). {X} is the root; onset = its driver "
               f"fault.")
        tr["onset_ns"] = t0n + int(f["at"] * NS)
        tr["host_blocked_s"] = round(float(onset), 3)
    else:
        why = "?"
    tr["waitfor"] = why
    return tr


def main():
    np.seterr(invalid="ignore")
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("prefix", nargs="*")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for sc in SCEN:
        if args.prefix and not any(sc["name"].startswith(p) for p in args.prefix):
            continue
        job = f"stk-{sc['name'].split('_')[0]}-s{args.seed}"
        sim = Sim(sc, args.seed)
        sim.run()
        f = sc.get("fault")
        if f and f["kind"] in ("host_stop", "lost", "gpu_stop") and not sim.events:
            raise SystemExit(f"{sc['name']}: the fault never fired")
        path = os.path.join(args.out, sc["name"] + ".cwcap")
        t0n, stats = emit(sim, path, job)
        tr = truth_of(sim, sc, job, t0n, stats)
        with open(os.path.join(args.out, sc["name"] + ".truth.json"), "w") as fh:
            json.dump(tr, fh, indent=1)
        mb = os.path.getsize(path) / 1e6
        print(f"{sc['name']:32s} {sim.W:4d} ranks {stats['records']:8d} records {stats['messages']:7d} msgs "
              f"{mb:6.1f} MB  culprits={tr['culprits']}", flush=True)


if __name__ == "__main__":
    main()
