#!/usr/bin/env python3
"""longrun/: the long-horizon generator - what happens to a training job over 20-60 minutes.

Written from the wire contract (shared/spec/wire-v1.md), shared/DOMAIN.md and the READMEs only,
without reading the detector.  Every other generator writes 30-300 s captures; these are 21-60
simulated minutes each, where false alarms accumulate (a routine checkpoint pages again and
again), baselines drift (a curriculum makes every step 1.7x longer, a GPU degrades by 3 % a
minute) and a job dies and comes back under the same id.

    python gen.py --out DIR --seed N [PREFIX ...]     (writes DIR/NAME.cwcap + DIR/NAME.truth.json)

Scenarios (one job per capture; durations were cut from the brief's 30-60 min to 21-40 min, the
hour kept for noise_hour_, so that everything replays in ~5 minutes: the detector costs per
message, and the heartbeats every 1 s per node and comm are most of the messages):
  ckpt_rank0_       healthy 31 min, Megatron TP2xPP2xDP4 (16 ranks, 2 nodes of 8), GPU-timed hook;
                    at 8/18/28 min rank 0 writes a checkpoint alone for 30-45 s while all others
                    wait inside a barrier (a 4-byte all-reduce on the world comm).  At most one
                    P0/P1 (the first, unknowable occurrence), none naming a rank other than 0.
  ckpt_all_         healthy 31 min, NCCL plugin at host enqueue (ENQUEUED), distributed checkpoint
                    at 8 and 23 min: every rank leaves the calls for 60-90 s (+-1.5 s per rank),
                    then a world barrier.  Control.
  eval_             healthy 25 min, evaluation every 5 min for ~30 s: forward only, pipeline
                    sends forward only, a small all-reduce per eval step on an eval comm created
                    (COMM_INIT) at the first evaluation.  No steps records during evaluation.
                    Control.
  curriculum_       healthy 40 min, gloo DDP (host-blocking records, 16 ranks, one world comm, 8
                    gradient buckets): sequence-length curriculum, compute of every rank x1.0 ..
                    x1.7 in 0.1 steps every 5 min.  Control (a P3 naming no rank is fine).
  slow_late_        30 min, distributed checkpoints at 8 and 16 min, one rank's compute 1.4x from
                    minute 22.  Culprit named alone (P1/P2) within 20 iterations, no victim.
  creep_            30 min, one rank's compute ramps linearly 1.0 -> 1.5x from minute 4 to 20,
                    then stays.  Named alone by the end; delay counted from the 1.2x crossing
                    (minute 10.4).
  hang_after_ckpt_  23.5 min, plugin at host enqueue, distributed checkpoints at 8 and 16 min, a
                    rank's host stops 60 s after the second one ends (it never enqueues its next
                    call; its peers' hosts keep enqueueing to the end of the iteration, their GPUs
                    block at the oldest call).  Onset = the start of the first iteration it misses.
                    Exactly one P0 naming it within 90 s.
  hang_in_ckpt_     as ckpt_rank0_ with checkpoints at 8/16/24 min, but at the third rank 0 never
                    returns from writing; the others sit in the barrier.  One P0 naming rank 0 by
                    onset + 3 x 45 s + 60 s; the capture runs 270 s past the onset.
  noise_hour_       healthy 60 min, TP2xPP2xDP4: GC pauses of 50-300 ms on random ranks' hosts (~3 %
                    of rank-iterations, at a random point of the host program: hidden when the host
                    is ahead of its GPU), a data-loader hiccup of 0.5-2 s on a random rank about
                    every 100 iterations, NIC congestion bursts (inter-node transfers 1.5x for
                    10-30 s, all ranks alike, every 4-8 min), one node's clock stepped +200 ms by
                    NTP at minute 31.  Control; false P0/P1 per job-hour.
  intermittent_     26 min, one rank's compute 1.5x for 2 minutes at 5, 13 and 21 min (thermal).
                    Named alone in each episode, no victim, no P0.
  restart_          21 min, 16 ranks.  Distributed checkpoint at 6 min, preempted at 10 min (every
                    process killed within 0.3 s; records of in-flight calls stay incomplete, each
                    agent sends one last heartbeat with an optional "exited": true per rank and
                    then nothing for the dead ranks' comms), restarted under the same job id at 12
                    min: new topology messages, new communicators (new ids, COMM_INIT), iterations
                    resume from the checkpoint's number after a slow warm-up; a rank's host hangs at
                    minute 18.  Exactly one P0 naming it within 90 s, no P0/P1 for the preemption.

Model:
  * Megatron layout rank = dp*(PP*TP) + pp*TP + tp, 8 (or 4) GPUs per node; comms TP (all-reduce
    inside each forward and backward micro-batch: one coarse call standing for a layer stack),
    PP (1F1B with batched send/recv pairs as Megatron's send_forward_recv_backward does; sizes
    of one micro-batch's activations), DP (two gradient buckets, all-reduce, inter-node) and a
    world comm (a small all-reduce per iteration standing for loss / grad-norm reductions, and
    the checkpoint barrier).  Each comm has its own id (blake2b of job, name, incarnation).
  * Time is simulated per rank on two timelines: the host enqueues (kernel-launch cost ~12 % of
    the GPU time, 40 us per call) and the GPU runs in order; a collective/p2p completes on every
    member at max(GPU arrivals) + transfer (+ up to 50 us), a batched send/recv pair finishes
    when both its transfers did.  Hosts synchronise at the end of each iteration (loss.item()),
    so under host-enqueue the hosts run ahead by most of an iteration.
  * Probes: GPU-timed hook (GPU_TIMED; a call's entry record is written only if the hook's poller
    sees it running, i.e. it lasted > 20 ms or never ends; completion written 1-10 ms after the
    end); NCCL plugin at host enqueue (ENQUEUED; entry at enqueue, completion when observed, 0.5-5
    ms after the GPU end; no steps records: no hook); gloo (blocking, entry and completion from
    the host).  Records are written into per-rank rings; each node agent flushes one batch per
    comm every 200 ms (own phase) and heartbeats every comm of its local ranks every 1 s with
    started/completed derived only from what it has already read (p2p counters for PP comms).
  * Node clocks: offset +-40 ms, drift +-5 ppm; all times written are the node's.  Compute
    noise ~1.2 % per rank-iteration and ~0.8 % per kernel group; first two iterations after a
    (re)start 3x and 1.5x (warm-up).  cw.steps.v1 per rank per training iteration from the hook:
    start/end at the host's iteration boundaries, forward/backward/optimizer ms as GPU sums of
    the phase's compute and its TP calls (TP waits included, pipeline waits not).
  * ~4 micro-batches x (TP all-reduce in F and B + send/recv) + 2 DP buckets + 1 world all-reduce =
    19 calls per rank per 3.7 s iteration (iterations 2.7 s in the gloo job).
  * Topology at the start (and after a restart), COMM_INIT per rank and comm at init.

Left out / simplified: no cw.hw.v1 samples (no NVML), no CUDA graphs, no sequence parallelism or
distributed optimizer (plain all-reduces), PP = 2 only, DDP buckets in the gloo job run after the
backward instead of overlapping it, checkpoint writes are host time only (no collectives inside
the distributed checkpoint except the final barrier), transfer times do not depend on message
size beyond fixed per-comm values (times the curriculum scale), nothing is lost or duplicated
in the rings.  Truth times are the simulator's reference clock (node clocks are within 60 ms).
"""
import argparse
import base64
import hashlib
import json
import math
import os
import sys
from collections import defaultdict

import numpy as np

REC = np.dtype([('kind', 'u1'), ('op', 'u1'), ('flags', '<u2'), ('rank', '<i4'), ('comm', '<u8'),
                ('seq', '<u8'), ('t_start_ns', '<i8'), ('t_end_ns', '<i8'), ('bytes', '<u8'),
                ('comm_rank', '<i4'), ('peer', '<i4'), ('nranks', '<u4'), ('aux', '<u4')])
assert REC.itemsize == 64
HDR = b'CWB1' + (1).to_bytes(2, 'little') + (64).to_bytes(2, 'little')
F_COMPLETED, F_GPU, F_GRAPH, F_ENQ, F_LOST = 1, 2, 4, 8, 16
OP = dict(allreduce=1, allgather=2, reducescatter=3, broadcast=4, reduce=5, send=6, recv=7,
          alltoall=8, barrier=9)
T0 = 1_767_225_600_000_000_000
INF = float('inf')
HFRAC = 0.12      # host launch time / GPU time
HK = 40e-6        # host cost of one comm call
MIN = 60.0


def cid(*parts):
    return int.from_bytes(hashlib.blake2b('/'.join(map(str, parts)).encode(), digest_size=8).digest(), 'little')


class Comm:
    def __init__(self, job, name, members):
        self.name = name
        self.members = list(members)
        self.idx = {r: i for i, r in enumerate(self.members)}
        self.id = cid(job.jobid, name, job.epoch)
        self.hex = '%016x' % self.id
        self.nnodes = len({job.node_of[r] for r in self.members})
        self.inter = self.nnodes > 1
        self.seq = 0
        self.p2p = False


class Job:
    def __init__(self, name, jobid, rng, probe, W, gpn, TP=1, PP=1, layout='megatron'):
        self.name, self.jobid, self.rng, self.probe = name, jobid, rng, probe
        self.blocking = probe == 'gloo'
        self.W, self.gpn, self.TP, self.PP = W, gpn, TP, PP
        self.DP = W // (TP * PP)
        self.layout = layout
        self.nnodes = W // gpn
        self.node_of = [r // gpn for r in range(W)]
        base = int(rng.integers(1, 60))
        self.node_name = ['node-%03d' % (base + n) for n in range(self.nnodes)]
        self.off = rng.uniform(-0.04, 0.04, self.nnodes)
        self.drift = rng.uniform(-5e-6, 5e-6, self.nnodes)
        self.clock_steps = []          # (node, t, delta)
        self.flush_phase = rng.uniform(0, 0.2, self.nnodes)
        self.hb_phase = rng.uniform(0, 1.0, self.nnodes)
        self.recs = []                 # (rank, emit, kind, op, flags, comm, seq, ts, te, bytes, crank, peer, nranks, aux)
        self.steps = []                # (rank, emit, json dict w/o ts)
        self.topo = []                 # (rank, t, dict)
        self.epochs = []               # (comms list, t_from, t_to, kill times per rank or None)
        self.dead_after = [INF] * W    # emission cut-off per rank (preemption)
        self.exit_hb = []              # (node, t, comm, ranks)
        self.stop = [INF] * W          # host stop times
        self.slow = lambda r, t: 1.0
        self.scale = lambda t: 1.0
        self.net = lambda t: 1.0
        self.noise = False
        self.epoch = 0
        self.iteration = 0
        self.iter_log = []             # (t_start, t_end) of training iterations
        self.keys = {}
        self.ps, self.pr = {}, {}
        self.gc_log = []
        self._tb = 0.0
        self.make_comms()

    # ---------------------------------------------------------------- layout
    def rank_of(self, dp, pp, tp):
        return dp * self.PP * self.TP + pp * self.TP + tp

    def make_comms(self):
        W, TP, PP, DP = self.W, self.TP, self.PP, self.DP
        self.comms = {}
        self.comm_of = [dict() for _ in range(W)]
        self.world = self.add_comm('world', range(W))
        for r in range(W):
            self.comm_of[r]['world'] = self.world
        if self.layout == 'megatron':
            for dp in range(DP):
                for pp in range(PP):
                    c = self.add_comm('tp-%d-%d' % (dp, pp), [self.rank_of(dp, pp, t) for t in range(TP)])
                    for r in c.members:
                        self.comm_of[r]['tp'] = c
                for t in range(TP):
                    c = self.add_comm('pp-%d-%d' % (dp, t), [self.rank_of(dp, p, t) for p in range(PP)])
                    c.p2p = True
                    for r in c.members:
                        self.comm_of[r]['pp'] = c
            for pp in range(PP):
                for t in range(TP):
                    c = self.add_comm('dp-%d-%d' % (pp, t), [self.rank_of(d, pp, t) for d in range(DP)])
                    for r in c.members:
                        self.comm_of[r]['dp'] = c
        self.eval_comm = None
        self.ps, self.pr = {}, {}

    def add_comm(self, name, members):
        c = Comm(self, name, members)
        self.comms[name] = c
        return c

    def coords(self, r):
        if self.layout != 'megatron':
            return {'tp': 0, 'pp': 0, 'dp': r, 'cp': 0, 'ep': 0}
        tp = r % self.TP
        pp = (r // self.TP) % self.PP
        dp = r // (self.TP * self.PP)
        return {'tp': tp, 'pp': pp, 'dp': dp, 'cp': 0, 'ep': 0}

    # ---------------------------------------------------------------- clocks
    def local(self, node, t):
        """node clock for reference time t (scalar or array), seconds"""
        v = t + self.off[node] + self.drift[node] * t
        for n, ts, d in self.clock_steps:
            if n == node:
                v = v + np.where(np.asarray(t) >= ts, d, 0.0) if isinstance(t, np.ndarray) else v + (d if t >= ts else 0.0)
        return v

    # ---------------------------------------------------------------- start / comm init
    def announce(self, t):
        """topology + COMM_INIT for every rank and comm of the current incarnation"""
        for r in range(self.W):
            n = self.node_of[r]
            self.topo.append((r, t + self.rng.uniform(0, 0.5), {
                'v': 1, 'job': self.jobid, 'rank': r, 'world_size': self.W, 'node': self.node_name[n],
                'local_rank': r % self.gpn, 'gpu': 'GPU-%08x' % (cid(self.node_name[n], r % self.gpn) & 0xffffffff),
                'coords': self.coords(r)}))
        ti = t + 3.0
        for c in self.comms.values():
            self.init_comm(c, ti + self.rng.uniform(0, 1.5))
        return ti + 3.0

    def init_comm(self, c, t):
        for r in c.members:
            tt = t + self.rng.uniform(0, 0.05)
            self.recs.append((r, tt + 0.002, 2, 0, 0, c.id, 0, tt, tt, 0, c.idx[r], -1, len(c.members), c.nnodes))
        c.t_init = t

    # ---------------------------------------------------------------- program building
    def coll(self, P, comm, opname, nbytes, xfer, tag=None, members=None):
        k = ('c', comm.name, comm.seq)
        m = comm.members
        seq = comm.seq
        comm.seq += 1
        if comm.inter:
            xfer *= self.net(self._tb)
        self.keys[k] = [len(m), xfer, {r: (OP[opname], comm.id, seq, int(nbytes), comm.idx[r], -1, len(m)) for r in m}]
        for r in m:
            P[r].append(('k', [k], HK, tag))

    def p2p(self, P, comm, r, items, tag=None):
        kl = []
        for kind, peer, nb, xf in items:
            if kind == 'send':
                kk, cnt = (comm.name, r, peer), self.ps
            else:
                kk, cnt = (comm.name, peer, r), self.pr
            n = cnt.get(kk, 0)
            cnt[kk] = n + 1
            k = ('p',) + kk + (n,)
            ent = self.keys.setdefault(k, [2, xf * (self.net(self._tb) if comm.inter else 1.0), {}])
            ent[2][r] = (OP[kind], comm.id, n, int(nb), comm.idx[r], comm.idx[peer], len(comm.members))
            kl.append(k)
        P[r].append(('k', kl, HK * len(kl), tag))

    def comp(self, P, r, dur, tag=None):
        P[r].append(('c', dur, dur * HFRAC, tag))

    def hostonly(self, P, r, dur):
        P[r].append(('c', 0.0, dur, None))

    # ---------------------------------------------------------------- the engine
    def run_phase(self, P, th, tg, step_tags=False):
        """Run one phase (programs P per rank) from host times th and GPU times tg.
        Returns (ok, host_end, gpu_end, tagsums)."""
        W = self.W
        keys = self.keys
        pos = [0] * W
        g = list(tg)
        h = list(th)
        stopped = [False] * W
        pending = {}
        arr = defaultdict(dict)
        endk = {}
        tags = [defaultdict(float) for _ in range(W)]
        starts = {}      # (r,k) -> (e, gs)
        changed = True
        while changed:
            changed = False
            for r in range(W):
                if stopped[r]:
                    continue
                ops = P[r]
                while pos[r] < len(ops):
                    op = ops[pos[r]]
                    if r in pending:
                        kl, e, gs = pending[r]
                    else:
                        if self.blocking:
                            e = g[r]
                            if e >= self.stop[r]:
                                stopped[r] = True
                                break
                            if op[0] == 'c':
                                g[r] = e + max(op[1], op[2])
                                if op[3]:
                                    tags[r][op[3]] += max(op[1], op[2])
                                pos[r] += 1
                                continue
                        else:
                            e = h[r] + op[2]
                            if e >= self.stop[r]:
                                stopped[r] = True
                                break
                            h[r] = e
                            if op[0] == 'c':
                                g[r] = max(g[r], e) + op[1]
                                if op[3]:
                                    tags[r][op[3]] += op[1]
                                pos[r] += 1
                                continue
                        kl = op[1]
                        gs = max(g[r], e)
                        for k in kl:
                            arr[k][r] = gs
                            starts[(r, k)] = (e, gs)
                        pending[r] = (kl, e, gs)
                        changed = True
                    done = True
                    for k in kl:
                        if k not in endk:
                            a = arr[k]
                            if len(a) == keys[k][0]:
                                endk[k] = max(a.values()) + keys[k][1]
                            else:
                                done = False
                    if not done:
                        break
                    ge = max(endk[k] for k in kl)
                    for k in kl:
                        self.emit_call(r, k, starts[(r, k)][0], starts[(r, k)][1], endk[k] + self.rng.uniform(0, 5e-5))
                        del starts[(r, k)]
                    if op[3]:
                        tags[r][op[3]] += ge - gs
                    g[r] = ge
                    del pending[r]
                    pos[r] += 1
                    changed = True
        ok = all(pos[r] == len(P[r]) for r in range(W))
        if not ok:
            # calls entered and never completed
            for (r, k), (e, gs) in sorted(starts.items(), key=lambda x: x[1][1]):
                self.emit_call(r, k, e, gs, None)
            # under host enqueue, the hosts keep enqueueing behind a blocked call until their sync
            if not self.blocking:
                for r in range(W):
                    if stopped[r] or pos[r] >= len(P[r]):
                        continue
                    hh = h[r]
                    for op in P[r][pos[r] + 1:]:
                        hh += op[2]
                        if hh >= self.stop[r]:
                            break
                        if op[0] == 'k':
                            for k in op[1]:
                                self.emit_call(r, k, hh, None, None)
        self.keys = {}
        return ok, h, g, tags

    def emit_call(self, r, k, e, gs, ge):
        op, comm, seq, nb, crank, peer, nranks = self.keys[k][2][r]
        rng = self.rng
        cut = self.dead_after[r]
        if self.probe == 'gpu':
            if gs is None:
                return
            if ge is None or ge - gs > 0.02:
                em = gs + rng.uniform(0.002, 0.01)
                if ge is None or em < ge:
                    if em < cut:
                        self.recs.append((r, em, 1, op, F_GPU, comm, seq, gs, 0.0, nb, crank, peer, nranks, 0))
            if ge is not None:
                em = ge + rng.uniform(0.001, 0.01)
                if em < cut:
                    self.recs.append((r, em, 1, op, F_GPU | F_COMPLETED, comm, seq, gs, ge, nb, crank, peer, nranks, 0))
        elif self.probe == 'enq':
            em = e + 2e-5
            if em < cut:
                self.recs.append((r, em, 1, op, F_ENQ, comm, seq, e, 0.0, nb, crank, peer, nranks, 0))
            if ge is not None:
                te = ge + rng.uniform(0.0005, 0.005)
                if te < cut:
                    self.recs.append((r, te + 1e-5, 1, op, F_ENQ | F_COMPLETED, comm, seq, e, te, nb, crank, peer, nranks, 0))
        else:  # gloo, blocking
            if gs is None:
                return
            if gs + 1e-5 < cut:
                self.recs.append((r, gs + 1e-5, 1, op, 0, comm, seq, gs, 0.0, nb, crank, peer, nranks, 0))
            if ge is not None and ge + 1e-5 < cut:
                self.recs.append((r, ge + 1e-5, 1, op, F_COMPLETED, comm, seq, gs, ge, nb, crank, peer, nranks, 0))


# ==================================================================== phase programs
F_MB, B_MB, OPT = 0.22, 0.44, 0.07


def rank_noise(job):
    return [1.0 + job.rng.normal(0, 0.012) for _ in range(job.W)]


def kn(job):
    return 1.0 + job.rng.normal(0, 0.008)


def megatron_program(job, t, warm=1.0, evaluation=False, M=4):
    P = [[] for _ in range(job.W)]
    job._tb = t
    sc = job.scale(t)
    rn = rank_noise(job)
    act = int(1 * 4096 * 4096 * 2 * sc)
    tpb = int(4096 * 4096 * 2 * 2 * sc)
    ppx = 0.002
    fmul = 0.8 if evaluation else 1.0
    for dp in range(job.DP):
        for pp in range(job.PP):
            grp = [job.rank_of(dp, pp, t_) for t_ in range(job.TP)]
            tpc = job.comm_of[grp[0]]['tp']
            f = {r: F_MB * fmul * sc * warm * rn[r] * job.slow(r, t) for r in grp}
            b = {r: B_MB * sc * warm * rn[r] * job.slow(r, t) for r in grp}

            def F(i):
                for r in grp:
                    job.comp(P, r, f[r] / 2 * kn(job), 'F')
                if job.TP > 1:
                    job.coll(P, tpc, 'allreduce', tpb, 0.003, 'F')
                for r in grp:
                    job.comp(P, r, f[r] / 2 * kn(job), 'F')

            def B(i):
                for r in grp:
                    job.comp(P, r, b[r] / 2 * kn(job), 'B')
                if job.TP > 1:
                    job.coll(P, tpc, 'allreduce', tpb, 0.003, 'B')
                for r in grp:
                    job.comp(P, r, b[r] / 2 * kn(job), 'B')

            def X(items):
                for r in grp:
                    peer = {0: job.rank_of(dp, 1, r % job.TP), 1: job.rank_of(dp, 0, r % job.TP)}[pp]
                    job.p2p(P, job.comm_of[r]['pp'], r, [(kd, peer, act, ppx) for kd in items], None)

            if evaluation:
                for i in range(M):
                    if pp == 0:
                        F(i)
                        X(['send'])
                    else:
                        X(['recv'])
                        F(i)
                continue
            if pp == 0:
                F(0)
                X(['send'])
                for i in range(1, M):
                    F(i)
                    X(['send', 'recv'])
                    B(i - 1)
                X(['recv'])
                B(M - 1)
            else:
                X(['recv'])
                for i in range(M):
                    F(i)
                    B(i)
                    X(['send', 'recv'] if i < M - 1 else ['send'])
    if evaluation:
        if job.eval_comm is None:
            job.eval_comm = job.add_comm('eval', range(job.W))
            job.init_comm(job.eval_comm, t - 0.5)
        job.coll(P, job.eval_comm, 'allreduce', 8, 0.0015, None)
        return P
    for bucket in range(2):
        for c in sorted({job.comm_of[r]['dp'].name for r in range(job.W)}):
            job.coll(P, job.comms[c], 'allreduce', int(380e6), 0.08, None)
    for r in range(job.W):
        job.comp(P, r, OPT * warm * rn[r] * job.slow(r, t) * kn(job), 'O')
    job.coll(P, job.world, 'allreduce', 8, 0.0015, 'O')
    return P


def ddp_program(job, t, warm=1.0):
    P = [[] for _ in range(job.W)]
    job._tb = t
    sc = job.scale(t)
    rn = rank_noise(job)
    for r in range(job.W):
        job.comp(P, r, 0.55 * sc * warm * rn[r] * job.slow(r, t) * kn(job), 'F')
        job.comp(P, r, 1.10 * sc * warm * rn[r] * job.slow(r, t) * kn(job), 'B')
    for bucket in range(8):
        job.coll(P, job.world, 'allreduce', 25 * 2 ** 20, 0.045, 'B')
    for r in range(job.W):
        job.comp(P, r, 0.08 * warm * rn[r] * job.slow(r, t) * kn(job), 'O')
    return P


# ==================================================================== driver
def add_noise(job, P, t):
    """GC pauses and data-loader hiccups on the hosts (noise_hour_)"""
    rng = job.rng
    for r in range(job.W):
        if rng.random() < 0.03:
            i = int(rng.integers(0, len(P[r])))
            d = rng.uniform(0.05, 0.3)
            P[r].insert(i, ('c', 0.0, d, None))
            job.gc_log.append((r, t, d))
    if rng.random() < 0.01:
        r = int(rng.integers(0, job.W))
        d = rng.uniform(0.5, 2.0)
        P[r].insert(0, ('c', 0.0, d, None))
        job.gc_log.append((r, t, -d))


def simulate(job, t_start, t_end, events, on_phase=None, preempt=None):
    """events: list of (time, kind, arg) with kind in ckpt0 / ckptall / eval.
    preempt: (t_kill, t_restart) or None."""
    W = job.W
    t = job.announce(t_start)
    job.epochs.append([list(job.comms.values()), t_start + 3.0, None])
    th = [t + job.rng.uniform(0, 0.3) for _ in range(W)]
    tg = list(th)
    events = sorted(events)
    ei = 0
    warmcount = 0
    counts = defaultdict(int)
    ckpt_iter = 0
    log = []
    while True:
        now = min(th)
        if now >= t_end:
            break
        if ei < len(events) and events[ei][0] <= now:
            et, kind, arg = events[ei]
            ei += 1
            counts[kind] += 1
            P = [[] for _ in range(W)]
            job._tb = now
            if kind == 'ckpt0':
                job.hostonly(P, 0, arg)
                job.coll(P, job.world, 'barrier' if job.blocking else 'allreduce', 4, 0.0015)
                t0 = now
                ok, h, g, _ = job.run_phase(P, th, tg)
                ckpt_iter = job.iteration
            elif kind == 'ckptall':
                for r in range(W):
                    job.hostonly(P, r, arg + job.rng.uniform(-1.5, 1.5))
                job.coll(P, job.world, 'barrier' if job.blocking else 'allreduce', 4, 0.0015)
                ok, h, g, _ = job.run_phase(P, th, tg)
                ckpt_iter = job.iteration
            elif kind == 'eval':
                ok = True
                h, g = th, tg
                tt = now
                while ok and tt < now + arg:
                    P = megatron_program(job, tt, evaluation=True)
                    ok, h, g, _ = job.run_phase(P, h, g)
                    sync = [max(a, b) + 0.01 + job.rng.uniform(0, 0.002) for a, b in zip(h, g)]
                    h, g = sync, list(sync)
                    tt = min(h)
            log.append((kind, counts[kind], now, max(g) if ok else None))
            if on_phase:
                on_phase(job, kind, counts[kind], now, max(g) if ok else None)
            if not ok:
                break
            th = [max(a, b) + 0.02 + job.rng.uniform(0, 0.002) for a, b in zip(h, g)]
            tg = list(th)
            continue
        warm = 3.0 if warmcount == 0 else (1.5 if warmcount == 1 else 1.0)
        warmcount += 1
        P = (megatron_program if job.layout == 'megatron' else ddp_program)(job, now, warm)
        if job.noise:
            add_noise(job, P, now)
        ok, h, g, tags = job.run_phase(P, th, tg)
        if not ok and preempt and now >= preempt[0] - 10:
            # killed: restart under the same job id
            t_re = preempt[1]
            job.epochs[-1][2] = preempt[0] + 1.0
            for c in job.comms.values():
                for n in sorted({job.node_of[r] for r in c.members}):
                    job.exit_hb.append((n, preempt[0] + 1.0 + job.hb_phase[n] * 0.5, c,
                                        [r for r in c.members if job.node_of[r] == n]))
            job.epoch += 1
            job.make_comms()
            job.stop = [INF] * W
            t = job.announce(t_re)
            job.epochs.append([list(job.comms.values()), t_re + 3.0, None])
            job.iteration = ckpt_iter
            th = [t + 20.0 + job.rng.uniform(0, 0.3) for _ in range(W)]
            tg = list(th)
            warmcount = 0
            log.append(('restart', 1, t_re, None))
            if on_phase:
                on_phase(job, 'restart', 1, t_re, t_re)
            preempt = None
            continue
        if not ok:
            log.append(('blocked', job.iteration, now, None))
            job.blocked_at = now
            break
        end = [max(a, b) + 0.015 + job.rng.uniform(0, 0.002) for a, b in zip(h, g)]
        if job.probe != 'enq':
            for r in range(W):
                ph = tags[r]
                job.steps.append((r, end[r] + job.rng.uniform(0.001, 0.02), {
                    'v': 1, 'job': job.jobid, 'rank': r, 'iteration': job.iteration,
                    't_start_ns': th[r], 't_end_ns': end[r],
                    'phases': {'forward_ms': round(ph['F'] * 1000, 2), 'backward_ms': round(ph['B'] * 1000, 2),
                               'optimizer_ms': round(ph['O'] * 1000, 2)}}))
        job.iter_log.append((now, max(end)))
        job.iteration += 1
        th = end
        tg = list(end)
        if on_phase:
            on_phase(job, 'iter', job.iteration, now, max(end))
    if job.epochs[-1][2] is None:
        job.epochs[-1][2] = t_end
    job.phase_log = log
    return log


# ==================================================================== output
def _cum(emit, seq, tval, T):
    """highest seq emitted by each time in T and the time value belonging to it"""
    if len(emit) == 0:
        return np.full(len(T), -1, np.int64), np.zeros(len(T), np.int64)
    o = np.argsort(emit, kind='stable')
    emit, seq, tval = emit[o], seq[o].astype(np.int64), tval[o]
    cm = np.maximum.accumulate(seq)
    # position of the running max
    pos = np.where(seq == cm, np.arange(len(seq)), 0)
    pos = np.maximum.accumulate(pos)
    j = np.searchsorted(emit, T, side='right') - 1
    s = np.where(j >= 0, cm[np.maximum(j, 0)], -1)
    tv = np.where(j >= 0, tval[pos[np.maximum(j, 0)]], 0)
    return s, tv


def last_state(job, R, r, c):
    x = R[(R['rank'] == r) & (R['comm'] == c.id) & (R['kind'] == 1) & (R['op'] < 6)]
    e = {'rank': r, 'started': int(x['seq'].max()) if len(x) else -1}
    y = x[(x['flags'] & F_COMPLETED) != 0]
    e['completed'] = int(y['seq'].max()) if len(y) else -1
    return e


def build(job, t_end):
    """records, batches, heartbeats, steps, topology -> sorted capture lines"""
    rec = [x for x in job.recs if x[1] < job.dead_after[x[0]]]
    W = job.W
    n = len(rec)
    R = np.zeros(n, dtype=REC.descr + [('emit', '<f8'), ('node', '<i4'), ('ts_s', '<f8'), ('te_s', '<f8')])
    cols = list(zip(*rec))
    R['rank'] = cols[0]
    R['emit'] = cols[1]
    R['kind'] = cols[2]
    R['op'] = cols[3]
    R['flags'] = cols[4]
    R['comm'] = np.array(cols[5], dtype=np.uint64)
    R['seq'] = cols[6]
    R['ts_s'] = cols[7]
    R['te_s'] = cols[8]
    R['bytes'] = np.array(cols[9], dtype=np.uint64)
    R['comm_rank'] = cols[10]
    R['peer'] = cols[11]
    R['nranks'] = cols[12]
    R['aux'] = cols[13]
    R['node'] = np.array(job.node_of)[R['rank']]
    keep = R['emit'] <= t_end
    R = R[keep]
    # node-local times
    for nd in range(job.nnodes):
        m = R['node'] == nd
        R['t_start_ns'][m] = (T0 + np.round(job.local(nd, R['ts_s'][m]) * 1e9)).astype(np.int64)
        te = R['te_s'][m]
        R['t_end_ns'][m] = np.where(te > 0, (T0 + np.round(job.local(nd, te) * 1e9)).astype(np.int64), 0)
    lines = []
    # batches: one per node, comm and 200 ms flush
    fl = np.ceil((R['emit'] - job.flush_phase[R['node']]) / 0.2)
    o = np.lexsort((R['emit'], R['comm'], fl, R['node']))
    R = R[o]
    fl = fl[o]
    recs64 = np.zeros(len(R), dtype=REC)
    for f in REC.names:
        recs64[f] = R[f]
    keyv = np.stack([R['node'].astype(np.int64), fl.astype(np.int64), R['comm'].view(np.int64)], axis=1)
    brk = np.nonzero(np.any(keyv[1:] != keyv[:-1], axis=1))[0] + 1
    starts = np.concatenate([[0], brk])
    ends = np.concatenate([brk, [len(R)]])
    for a, b in zip(starts.tolist(), ends.tolist()):
        nd = int(R['node'][a])
        tflush = job.flush_phase[nd] + 0.2 * fl[a]
        ts = int(T0 + job.local(nd, float(tflush)) * 1e9)
        payload = HDR + (b - a).to_bytes(4, 'little') + b'\0\0\0\0' + recs64[a:b].tobytes()
        lines.append((ts, '{"topic":"cw.calls.v1","key":"%s/%016x","ts_ns":%d,"value_b64":"%s"}' % (
            job.jobid, int(R['comm'][a]), ts, base64.b64encode(payload).decode())))
    # heartbeats
    hb = heartbeats_fast(job, R, t_end)
    for ts, topic, key, v in hb:
        lines.append((ts, json.dumps({'topic': topic, 'key': key, 'ts_ns': ts, 'value': v}, separators=(',', ':'))))
    for r, t, v in job.topo:
        ts = int(T0 + job.local(job.node_of[r], t) * 1e9)
        v = dict(v, ts_ns=ts)
        lines.append((ts, json.dumps({'topic': 'cw.topology.v1', 'key': job.jobid, 'ts_ns': ts, 'value': v}, separators=(',', ':'))))
    for r, em, v in job.steps:
        if em > t_end:
            continue
        nd = job.node_of[r]
        v = dict(v)
        v['t_start_ns'] = int(T0 + job.local(nd, v['t_start_ns']) * 1e9)
        v['t_end_ns'] = int(T0 + job.local(nd, v['t_end_ns']) * 1e9)
        ts = int(T0 + job.local(nd, em) * 1e9)
        lines.append((ts, json.dumps({'topic': 'cw.steps.v1', 'key': job.jobid, 'ts_ns': ts, 'value': v}, separators=(',', ':'))))
    lines.sort(key=lambda x: x[0])
    return lines, R


def all_comms(job):
    seen = {}
    for comms, _, _ in job.epochs:
        for c in comms:
            seen[c.id] = c
    if job.eval_comm is not None:
        seen[job.eval_comm.id] = job.eval_comm
    return list(seen.values())


def heartbeats_fast(job, R, t_end):
    out = []
    crec = R[R['kind'] == 1]
    order = np.lexsort((crec['comm'], crec['rank']))
    crec = crec[order]
    kv = np.stack([crec['rank'].astype(np.int64), crec['comm'].view(np.int64)], axis=1)
    brk = np.nonzero(np.any(kv[1:] != kv[:-1], axis=1))[0] + 1 if len(crec) > 1 else np.array([], dtype=np.int64)
    st = np.concatenate([[0], brk]).astype(np.int64)
    en = np.concatenate([brk, [len(crec)]]).astype(np.int64)
    grp = {}
    for a, b in zip(st.tolist(), en.tolist()):
        if b > a:
            grp[(int(crec['rank'][a]), int(crec['comm'][a]))] = (a, b)
    epochs = [(comms + ([job.eval_comm] if (job.eval_comm is not None and i == len(job.epochs) - 1) else []), tf, tt)
              for i, (comms, tf, tt) in enumerate(job.epochs)]
    for comms, t_from, t_to in epochs:
        for c in comms:
            if getattr(c, 't_init', None) is None:
                continue
            for n in sorted({job.node_of[r] for r in c.members}):
                local = [r for r in c.members if job.node_of[r] == n]
                t1 = max(t_from, c.t_init + 0.5)
                k0 = math.ceil(t1 - job.hb_phase[n])
                k1 = math.floor(min(t_to, t_end) - job.hb_phase[n])
                if k1 < k0:
                    continue
                T = job.hb_phase[n] + np.arange(k0, k1 + 1, dtype=np.float64)
                fns = []
                for r in local:
                    a, b = grp.get((r, c.id), (0, 0))
                    fns.append((r, counters_r(crec[a:b], T, c.p2p, r)))
                Tl = job.local(n, T)
                key = '%s/%s' % (job.jobid, c.hex)
                for j in range(len(T)):
                    ts = int(T0 + Tl[j] * 1e9)
                    out.append((ts, 'cw.progress.v1', key,
                                {'v': 1, 'job': job.jobid, 'node': job.node_name[n], 'ts_ns': ts,
                                 'comm': c.hex, 'ranks': [fn(j) for _, fn in fns]}))
    for n, t, c, ranks in job.exit_hb:
        if t > t_end:
            continue
        ts = int(T0 + job.local(n, t) * 1e9)
        out.append((ts, 'cw.progress.v1', '%s/%s' % (job.jobid, c.hex),
                    {'v': 1, 'job': job.jobid, 'node': job.node_name[n], 'ts_ns': ts, 'comm': c.hex,
                     'ranks': [dict(last_state(job, R, r, c), exited=True) for r in ranks]}))
    return out


def counters_r(rr, T, p2p, rank):
    coll = rr[rr['op'] < 6]
    done = coll[(coll['flags'] & F_COMPLETED) != 0]
    s, ts = _cum(coll['emit'], coll['seq'], coll['t_start_ns'], T)
    d, te = _cum(done['emit'], done['seq'], done['t_end_ns'], T)
    pp = []
    if p2p:
        for opn, opc in (('send', 6), ('recv', 7)):
            x = rr[rr['op'] == opc]
            for peer in sorted(set(x['peer'].tolist())):
                y = x[x['peer'] == peer]
                yd = y[(y['flags'] & F_COMPLETED) != 0]
                ps, _ = _cum(y['emit'], y['seq'], y['t_start_ns'], T)
                pd, _ = _cum(yd['emit'], yd['seq'], yd['t_end_ns'], T)
                pp.append((peer, opn, ps.tolist(), pd.tolist()))
    s, ts, d, te = s.tolist(), ts.tolist(), d.tolist(), te.tolist()

    def at(j):
        e = {'rank': rank, 'started': s[j], 'completed': d[j]}
        if s[j] >= 0:
            e['t_last_start_ns'] = ts[j]
        if d[j] >= 0:
            e['t_last_end_ns'] = te[j]
        if pp:
            e['p2p'] = [{'peer': p, 'op': o, 'started': a[j], 'completed': b[j]} for p, o, a, b in pp]
        return e
    return at


# ==================================================================== validation
def validate(lines, job, t_end):
    """check every message against wire v1 before writing"""
    comm_info = {c.id: c for c in all_comms(job)}
    tmin = T0 - 10 ** 9
    tmax = T0 + int((t_end + 10) * 1e9)
    nrec = 0
    chunks = []
    topics = defaultdict(int)
    for ts, line in lines:
        m = json.loads(line)
        assert m['ts_ns'] == ts and tmin <= ts <= tmax, line[:200]
        topic = m['topic']
        topics[topic] += 1
        if topic == 'cw.calls.v1':
            jid, chex = m['key'].split('/')
            assert jid == job.jobid and len(chex) == 16 and chex == chex.lower()
            raw = base64.b64decode(m['value_b64'])
            assert raw[:4] == b'CWB1' and int.from_bytes(raw[4:6], 'little') == 1
            assert int.from_bytes(raw[6:8], 'little') == 64 and raw[12:16] == b'\0\0\0\0'
            cnt = int.from_bytes(raw[8:12], 'little')
            assert len(raw) == 16 + 64 * cnt and cnt > 0
            a = np.frombuffer(raw[16:], dtype=REC)
            assert np.all(a['comm'] == np.uint64(int(chex, 16)))
            chunks.append(a)
            nrec += cnt
        elif topic == 'cw.progress.v1':
            v = m['value']
            assert v['v'] == 1 and v['job'] == job.jobid and m['key'] == '%s/%s' % (job.jobid, v['comm'])
            c = comm_info[int(v['comm'], 16)]
            for e in v['ranks']:
                assert e['rank'] in c.members and job.node_name[job.node_of[e['rank']]] == v['node']
                assert e['started'] >= e['completed'] >= -1
        elif topic == 'cw.topology.v1':
            v = m['value']
            assert 0 <= v['rank'] < v['world_size'] == job.W
        elif topic == 'cw.steps.v1':
            v = m['value']
            assert v['t_end_ns'] >= v['t_start_ns'] and 0 <= v['rank'] < job.W
        else:
            raise AssertionError(topic)
    A = np.concatenate(chunks)
    assert np.all(np.isin(A['kind'], [1, 2, 3])) and np.all((A['flags'] & ~np.uint16(0x1f)) == 0)
    assert np.all((A['rank'] >= 0) & (A['rank'] < job.W))
    assert np.all((A['t_start_ns'] >= tmin) & (A['t_start_ns'] <= tmax))
    for cidv in np.unique(A['comm']):
        c = comm_info[int(cidv)]
        x = A[A['comm'] == cidv]
        mem = np.array(c.members)
        assert np.all(x['nranks'] == len(c.members)) and np.all((x['comm_rank'] >= 0) & (x['comm_rank'] < len(mem)))
        assert np.all(mem[x['comm_rank']] == x['rank'])
        ini = x[x['kind'] != 1]
        assert np.all(ini['op'] == 0) and np.all(ini['seq'] == 0) and np.all(ini['aux'] == c.nnodes)
        cl = x[x['kind'] == 1]
        assert np.all((cl['op'] >= 1) & (cl['op'] <= 11))
        comp = (cl['flags'] & F_COMPLETED) != 0
        assert np.all(comp == (cl['t_end_ns'] != 0))
        assert np.all(cl['t_end_ns'][comp] >= cl['t_start_ns'][comp]) and np.all(cl['t_end_ns'] <= tmax)
        p2p = (cl['op'] == 6) | (cl['op'] == 7)
        assert np.all(cl['peer'][~p2p] == -1)
        assert np.all((cl['peer'][p2p] >= 0) & (cl['peer'][p2p] < cl['nranks'][p2p]) & (cl['peer'][p2p] != cl['comm_rank'][p2p]))
        if job.probe == 'gpu':
            assert np.all(cl['flags'] & F_GPU) and not np.any(cl['flags'] & F_ENQ)
        elif job.probe == 'enq':
            assert np.all(cl['flags'] & F_ENQ) and not np.any(cl['flags'] & F_GPU)
        else:
            assert not np.any(cl['flags'] & (F_ENQ | F_GPU))
        # seq strictly increasing per stream, entries and completions each in order
        sk = np.where(p2p, cl['op'].astype(np.int64) * 100000 + cl['peer'], 0)
        for rv in np.unique(cl['rank']):
            for skv in np.unique(sk[cl['rank'] == rv]):
                for cv in (False, True):
                    m = (cl['rank'] == rv) & (sk == skv) & (comp == cv)
                    sq = cl['seq'][m].astype(np.int64)
                    assert np.all(np.diff(sq) > 0), (c.name, rv, skv, cv)
    return nrec, dict(topics)


# ==================================================================== scenarios
def megajob(name, seed, probe='gpu', W=16, gpn=8, TP=2):
    rng = np.random.default_rng(seed)
    return Job(name, 'lr-%s-s%d' % (name.rstrip('_').replace('_', '-'), seed), rng, probe, W, gpn, TP=TP, PP=2)


def iters_per_s(job):
    d = [b - a for a, b in job.iter_log[5:]] or [2.7]
    return float(np.median(d))


def scenario(name, seed):
    t_s = 0.0
    truth = {'name': name, 'onset_s': None, 'culprit_ranks': [], 'windows': []}
    ckpts = []

    def note(job, kind, cnt, t0, t1):
        if kind in ('ckpt0', 'ckptall', 'eval'):
            ckpts.append({'kind': kind, 'n': cnt, 'start_s': round(t0, 3), 'end_s': round(t1, 3) if t1 else None})

    if name == 'ckpt_rank0_':
        job = megajob(name, seed)
        T = 31 * MIN
        ev = [(m * MIN, 'ckpt0', job.rng.uniform(30, 45)) for m in (8, 18, 28)]
        simulate(job, t_s, T, ev, note)
        truth.update(kind='info', score='ckpt_rank0', allowed_ranks=[0],
                     expect='healthy; rank 0 writes a checkpoint alone for 30-45 s at 8, 18 and 28 min while the others '
                            'wait in a world all-reduce (barrier). At most one P0/P1 in the run (the first occurrence), '
                            'none naming a rank other than 0.')
    elif name == 'ckpt_all_':
        job = megajob(name, seed, probe='enq')
        T = 31 * MIN
        ev = [(m * MIN, 'ckptall', job.rng.uniform(60, 90)) for m in (8, 23)]
        simulate(job, t_s, T, ev, note)
        truth.update(kind='control', score='control', expect='healthy; distributed checkpoint at 8 and 23 min: all ranks '
                     'out of any call for 60-90 s. No P0/P1, no rank named.')
    elif name == 'eval_':
        job = megajob(name, seed)
        T = 25 * MIN
        ev = [(m * MIN, 'eval', 30.0) for m in (5, 10, 15, 20)]
        simulate(job, t_s, T, ev, note)
        truth.update(kind='control', score='control', expect='healthy; ~30 s of forward-only evaluation every 5 min '
                     '(new eval comm at the first). No P0/P1, no rank named.')
    elif name == 'curriculum_':
        rng = np.random.default_rng(seed)
        job = Job(name, 'lr-curriculum-s%d' % seed, rng, 'gloo', 16, 8, layout='ddp')
        T = 40 * MIN
        job.scale = lambda t: 1.0 + 0.1 * min(7, int(t // (5 * MIN)))
        simulate(job, t_s, T, [], note)
        truth.update(kind='control', score='control', allow_rankless=True,
                     expect='healthy gloo DDP; every rank\'s compute grows 1.0 -> 1.7x in 0.1 steps every 5 min. '
                            'No P0/P1, no rank named (a job-level advisory naming no rank is fine).')
    elif name == 'slow_late_':
        job = megajob(name, seed)
        T = 30 * MIN
        cul = int(job.rng.choice([r for r in range(1, 16)]))
        on = 22 * MIN
        job.slow = lambda r, t: 1.4 if (r == cul and t >= on) else 1.0
        ev = [(m * MIN, 'ckptall', job.rng.uniform(60, 90)) for m in (8, 16)]
        simulate(job, t_s, T, ev, note)
        truth.update(kind='slow', score='slow', culprit_ranks=[cul], onset_s=on, deadline_iters=20,
                     expect='rank %d compute 1.4x from minute 22 (after two distributed checkpoints): named alone '
                            '(P1/P2) soon after; no victim; no P0/P1 before the onset.' % cul)
    elif name == 'creep_':
        job = megajob(name, seed)
        T = 30 * MIN
        cul = int(job.rng.choice([r for r in range(1, 16)]))
        a, b = 4 * MIN, 20 * MIN
        job.slow = lambda r, t: (1.0 + 0.5 * min(1.0, max(0.0, (t - a) / (b - a)))) if r == cul else 1.0
        simulate(job, t_s, T, [], note)
        truth.update(kind='slow', score='slow', culprit_ranks=[cul], onset_s=a + 0.4 * (b - a), ramp_start_s=a,
                     deadline_s=T, expect='rank %d GPU degrades linearly 1.0 -> 1.5x from minute 4 to 20, then stays; '
                     'must be named alone by the end of the capture (delay from the 1.2x crossing at minute 10.4).' % cul)
    elif name == 'hang_after_ckpt_':
        job = megajob(name, seed, probe='enq')
        cul = int(job.rng.choice([r for r in range(1, 16)]))
        box = {}

        def on(job_, kind, cnt, t0, t1):
            note(job_, kind, cnt, t0, t1)
            if kind == 'ckptall' and cnt == 2:
                job_.stop[cul] = t1 + 60.0
                box['onset'] = t1 + 60.0
        ev = [(m * MIN, 'ckptall', job.rng.uniform(60, 90)) for m in (8, 16)]
        T = 23.5 * MIN
        simulate(job, t_s, T, ev, on)
        truth.update(kind='hang', score='hang', culprit_ranks=[cul], onset_s=box['onset'], deadline_s=box['onset'] + 90,
                     expect='host-enqueue plugin; rank %d\'s host stops 60 s after the second distributed checkpoint: '
                            'exactly one P0 naming it; nothing P0/P1 at the checkpoints.' % cul)
    elif name == 'hang_in_ckpt_':
        job = megajob(name, seed)
        box = {}
        durs = [job.rng.uniform(30, 45) for _ in range(3)]
        T = 24 * MIN + 330

        # the third checkpoint: rank 0's host never comes back from writing
        orig = job.run_phase

        def run_phase(P, th, tg, step_tags=False):
            if len(ckpts) == 2 and 'onset' not in box and len(P[0]) >= 1 and P[0][0][0] == 'c' and P[0][0][1] == 0.0 \
                    and P[0][0][2] in durs:
                box['onset'] = th[0]
                job.stop[0] = th[0] + 0.001
            return orig(P, th, tg, step_tags)
        job.run_phase = run_phase
        ev = [(m * MIN, 'ckpt0', d) for m, d in zip((8, 16, 24), durs)]
        simulate(job, t_s, T, ev, note)
        truth.update(kind='hang', score='hang', culprit_ranks=[0], onset_s=box['onset'],
                     deadline_s=box['onset'] + 3 * 45 + 60, allow_first_ckpt=True, allowed_ranks=[0],
                     expect='as ckpt_rank0_, but at the third checkpoint rank 0 never returns from writing: one P0 '
                            'naming rank 0 by onset + 195 s; at most one P0/P1 at the first two checkpoints '
                            '(the first), none at the second.')
        T = min(T, box['onset'] + 270)
    elif name == 'noise_hour_':
        job = megajob(name, seed)
        T = 60 * MIN
        job.noise = True
        bursts = []
        t = 3 * MIN
        while t < T:
            d = job.rng.uniform(10, 30)
            bursts.append((t, t + d))
            t += job.rng.uniform(4, 8) * MIN
        job.net = lambda t: 1.5 if any(a <= t < b for a, b in bursts) else 1.0
        nd = int(job.rng.integers(0, job.nnodes))
        job.clock_steps.append((nd, 31 * MIN, 0.2))
        simulate(job, t_s, T, [], note)
        truth.update(kind='control', score='control', bursts=bursts, ntp_step={'node': job.node_name[nd], 't_s': 31 * MIN,
                     'delta_ms': 200}, noise_events=len(job.gc_log),
                     expect='healthy hour with GC pauses, data-loader hiccups, NIC congestion bursts and an NTP step: '
                            'no P0/P1, no rank named.')
    elif name == 'intermittent_':
        job = megajob(name, seed)
        T = 26 * MIN
        cul = int(job.rng.choice([r for r in range(1, 16)]))
        eps = [(m * MIN, m * MIN + 120) for m in (5, 13, 21)]
        job.slow = lambda r, t: 1.5 if r == cul and any(a <= t < b for a, b in eps) else 1.0
        simulate(job, t_s, T, [], note)
        truth.update(kind='slow', score='intermittent', culprit_ranks=[cul], onset_s=eps[0][0], episodes=eps,
                     expect='rank %d throttles 1.5x for 2 min at 5, 13 and 21 min: named alone in each episode, '
                            'no victim, no P0.' % cul)
    elif name == 'restart_':
        job = megajob(name, seed)
        cul = int(job.rng.choice([r for r in range(1, 16)]))
        T = 21 * MIN
        kill = 10 * MIN
        for r in range(16):
            job.stop[r] = kill + 0.1 * job.node_of[r] + job.rng.uniform(0, 0.05)
            job.dead_after[r] = job.stop[r]
        box = {}

        def on(job_, kind, cnt, t0, t1):
            note(job_, kind, cnt, t0, t1)
            if kind == 'restart':
                job_.dead_after = [INF] * job_.W
                job_.stop = [INF] * job_.W
                job_.stop[cul] = 18 * MIN
                box['restart'] = t0
        ev = [(6 * MIN, 'ckptall', job.rng.uniform(60, 90))]
        simulate(job, t_s, T, ev, on, preempt=(kill, kill + 120))
        truth.update(kind='hang', score='hang', culprit_ranks=[cul], onset_s=18 * MIN, deadline_s=18 * MIN + 90,
                     preempt_s=kill, restart_s=kill + 120,
                     expect='preempted at 10 min (all processes killed), restarted under the same job id at 12 min; '
                            'rank %d\'s host hangs at minute 18: exactly one P0 naming it, no P0/P1 for the '
                            'preemption or restart.' % cul)
    else:
        raise SystemExit('unknown scenario ' + name)
    truth['windows'] = ckpts
    if truth['kind'] == 'hang' and getattr(job, 'blocked_at', None) is not None:
        # the culprit's host stopped while it waited at the iteration's end; the hang shows from the
        # first call it never entered: the next iteration's start
        truth['host_stop_s'] = truth['onset_s']
        truth['deadline_s'] += job.blocked_at - truth['onset_s']
        truth['onset_s'] = job.blocked_at
    truth['duration_s'] = T
    truth['job'] = job.jobid
    truth['probe'] = job.probe
    truth['ranks'] = job.W
    truth['iter_s'] = round(iters_per_s(job), 3)
    truth['iterations'] = len(job.iter_log)
    truth['t0_ns'] = T0
    truth['phase_log'] = [(k, n, round(a, 2), None if b is None else round(b, 2)) for k, n, a, b in job.phase_log]
    return job, T, truth


NAMES = ['ckpt_rank0_', 'ckpt_all_', 'eval_', 'curriculum_', 'slow_late_', 'creep_', 'hang_after_ckpt_',
         'hang_in_ckpt_', 'noise_hour_', 'intermittent_', 'restart_']


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('prefix', nargs='*')
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for i, name in enumerate(NAMES):
        if a.prefix and not any(name.startswith(p) or p.startswith(name) for p in a.prefix):
            continue
        seed = a.seed * 1000 + i
        job, T, truth = scenario(name, seed)
        lines, R = build(job, T)
        nrec, topics = validate(lines, job, T)
        path = os.path.join(a.out, name + 's%d' % a.seed)
        with open(path + '.cwcap', 'w') as f:
            for _, line in lines:
                f.write(line)
                f.write('\n')
        truth['name'] = name + 's%d' % a.seed
        truth['records'] = nrec
        truth['messages'] = topics
        with open(path + '.truth.json', 'w') as f:
            json.dump(truth, f, indent=1)
        size = os.path.getsize(path + '.cwcap') / 2 ** 20
        print('%-22s %-7s %2d ranks %5.1f min %5d iters (%.2f s) %8d records %7d lines %6.1f MB  culprit %s onset %s' % (
            truth['name'], job.probe, job.W, T / 60, truth['iterations'], truth['iter_s'], nrec, len(lines), size,
            truth['culprit_ranks'] or '-', '-' if truth['onset_s'] is None else '%.1f s' % truth['onset_s']), flush=True)


if __name__ == '__main__':
    main()
