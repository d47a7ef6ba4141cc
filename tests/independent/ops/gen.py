#!/usr/bin/env python3
"""ops: a fourth independent traffic generator for commwatch (operational situations).

    gen.py --out DIR [--seed N] [--list] [PREFIX ...]

Writes DIR/NAME.cwcap (wire-v1 section 4) and DIR/NAME.truth.json per scenario.
Written from shared/spec/wire-v1.md and shared/DOMAIN.md only (numpy + stdlib).

Model and its simplifications
-----------------------------
* Layout: Megatron order rank = dp*(PP*TP) + pp*TP + tp, 8 GPUs per node, TP inside
  a node, PP and DP across nodes. Communicators: one per TP group, PP group, DP group,
  plus a world comm (grad-norm all-reduce); scenarios add an evaluation comm or
  re-create the DP comms. Every comm is created by a blocking init (all members join,
  50 ms) that writes COMM_INIT; DP comms re-created mid-run write COMM_DESTROY first.
* Schedule: GPipe (all forwards, then all backwards) of M micro-batches, not 1F1B.
  A micro-batch is compute / TP all-reduce / compute / TP all-reduce, with a blocking
  SEND/RECV of the activation (gradient) to the next (previous) stage. Then DP
  reduce-scatter, world all-reduce (grad norm), optimizer compute, DP all-gather.
* Host and device: each rank is a host thread and ONE in-order device stream. The host
  enqueues op k when op k-12 has finished (launch-queue depth 12) and synchronises at
  every iteration start (loss.item()), after a 2-6 ms data-loader wait. Blocking probes
  (gloo-like, no flags) enqueue nothing ahead: host time == device time.
* Collectives complete on all members at (last device arrival + transfer) + <15 us
  jitter; SEND/RECV pairs complete together when both are posted. Deadlocks (a cycle
  of waits) and hung ranks leave calls entered and never completed.
* Probes: gpu = GPU_TIMED, entry written 1 ms after device start, completion 1 ms after
  device end; enq = ENQUEUED, entry at host enqueue, completion when a 10 ms poller
  observes it; blk = no flag, host entry and host return. Every call has an entry record
  and (if it completes) a completion record. aux = per-op-type NCCL counter (gpu/enq).
* Agents: per node, per communicator batches every 200 ms (per-node phase; 1 s where a
  scenario says so). Heartbeats per (node, comm) every 1 s, counters = what the agent
  has forwarded by then (records written up to its last flush), p2p counters for PP.
  Topology once per rank (coords), steps per rank per iteration (section spans on the
  device: a section includes its waits; t_end on the node's clock, t_start = t_end minus
  a monotonic duration, so an NTP step never makes a step negative). No hardware samples.
* Clocks: every timestamp (record times, message ts_ns, heartbeats, steps) is on the
  node's clock: offset +-2 ms, drift +-5 ppm by default; scenarios add NTP steps or
  larger drift.
* Slowness multiplies a rank's compute kernels only (a function of time). A degraded NIC
  multiplies the transfer time of every comm that spans the node and other nodes.
* Hang: the culprit's host stops enqueueing (at a time, at an iteration start, or before
  a given call); its device drains what was queued. Onset = max(host stop, culprit's
  last device completion).
* "Plugin missing" node: its agent knows its ranks and comms (from the hook) but its
  rings are empty: heartbeats with started = completed = -1, no call records; steps
  and topology still come from the Python hook.
"""
import argparse
import base64
import hashlib
import json
import math
import os
import sys
from bisect import bisect_right
from collections import deque, defaultdict

import numpy as np

T0 = 1_767_225_600_000_000_000
INF = float('inf')
EPS = 5e-6
QDEPTH = 12
ALLREDUCE, ALLGATHER, REDUCESCATTER, SEND, RECV = 1, 2, 3, 6, 7
F_COMPLETED, F_GPU, F_ENQ = 1, 2, 8
REC = np.dtype([('kind', 'u1'), ('op', 'u1'), ('flags', '<u2'), ('rank', '<i4'), ('comm', '<u8'),
                ('seq', '<u8'), ('t_start_ns', '<i8'), ('t_end_ns', '<i8'), ('bytes', '<u8'),
                ('comm_rank', '<i4'), ('peer', '<i4'), ('nranks', '<u4'), ('aux', '<u4')])
assert REC.itemsize == 64
HDR = np.dtype([('magic', 'S4'), ('version', '<u2'), ('recsize', '<u2'), ('count', '<u4'), ('res', '<u4')])


# ----------------------------------------------------------------------------- scenarios
def slow_const(f, t_on, t_off=INF):
    return lambda t: f if t_on <= t < t_off else 1.0


def slow_cycle(f, t_on, on_s, off_s):
    return lambda t: f if t >= t_on and ((t - t_on) % (on_s + off_s)) < on_s else 1.0


def slow_ramp(f_end, t_on, ramp_s):
    return lambda t: 1.0 if t < t_on else 1.0 + (f_end - 1.0) * min(1.0, (t - t_on) / ramp_s)


BASE = dict(layout=(4, 4, 2), M=4, dur=50, probe='gpu')
SCEN = [
    dict(name='b00_healthy', kind='healthy', desc='baseline 3D job, nothing wrong'),
    dict(name='t01_thermal_cycle', kind='slow_rank', culprits=[13], onset=15.0, dur=60,
         slow={13: slow_cycle(1.5, 15.0, 8, 8)},
         desc='rank 13 throttles 1.5x for 8 s, normal 8 s, repeating from 15 s'),
    dict(name='t02_ramp', kind='slow_rank', culprits=[22], onset=10.0, dur=70, probe='enq',
         slow={22: slow_ramp(1.6, 10.0, 60.0)},
         desc='rank 22 slows gradually from 1.0x at 10 s to 1.6x at 70 s (1.1x at 20 s)'),
    dict(name='t03_recover', kind='slow_rank', culprits=[6], onset=12.0, recover=32.0, dur=65,
         slow={6: slow_const(1.6, 12.0, 32.0)},
         desc='rank 6 1.6x from 12 s to 32 s, then healthy: its incident must resolve, nothing new after'),
    dict(name='t04_two_in_turn', kind='slow_seq', dur=75, probe='enq',
         seq=[dict(culprits=[9], onset=10.0, end=35.0), dict(culprits=[26], onset=45.0, end=75.0)],
         slow={9: slow_const(1.5, 10.0, 35.0), 26: slow_const(1.5, 45.0)},
         desc='rank 9 1.5x 10-35 s, then rank 26 (another node) 1.5x from 45 s'),
    dict(name='s01_eval_comm', kind='healthy', dur=60, evals=dict(every=10, mb=8),
         desc='evaluation every 10 iterations on a world-size comm created at the first one (forward-only, its own all-reduce)'),
    dict(name='s02_grad_accum', kind='healthy', dur=50, probe='enq', layout=(8, 1, 4), M=16,
         desc='TP8 x DP4, 16 micro-batches accumulated: DP reduction once per ~2 s step, TP ~30 calls/s'),
    dict(name='s02b_grad_accum_slow', kind='slow_rank', culprits=[19], onset=20.0, dur=55, probe='enq',
         layout=(8, 1, 4), M=16, slow={19: slow_const(1.4, 20.0)},
         desc='same, rank 19 1.4x from 20 s'),
    dict(name='s03_recreate', kind='healthy', dur=50, probe='blk', recreate=25,
         desc='DP comms destroyed and re-created (new ids, seq from 0) at iteration 25, 1.5 s re-init pause'),
    dict(name='s03b_recreate_hang', kind='hang', culprits=[5], dur=50, recreate=25,
         hang=dict(rank=5, before='new_dp'),
         desc='same; rank 5 never enters its first call on the re-created DP comm'),
    dict(name='s04_long_pause', kind='healthy', dur=80, probe='enq', pause=dict(iter=15, s=40.0),
         desc='40 s rank-local evaluation after iteration 15: every rank idle, nobody in a call'),
    dict(name='c01_ntp_plus2', kind='healthy', clock_steps={2: (25.0, +2.0)},
         desc="node-02's clock steps +2 s at 25 s"),
    dict(name='c02_ntp_minus3', kind='healthy', probe='blk', clock_steps={1: (25.0, -3.0)},
         desc="node-01's clock steps -3 s at 25 s (blocking probe)"),
    dict(name='c03_ntp_minus3_hang', kind='hang', culprits=[27], clock_steps={1: (20.0, -3.0)},
         hang=dict(rank=27, t=30.0),
         desc="node-01's clock steps -3 s at 20 s; rank 27 (node-03) hangs at 30 s"),
    dict(name='c04_drift_slow', kind='slow_rank', culprits=[17], onset=35.0, dur=75, drift_ppm=150, off_ms=20,
         slow={17: slow_const(1.3, 35.0)},
         desc='node clocks +-20 ms and +-150 ppm apart; rank 17 1.3x from 35 s'),
    dict(name='h01_mismatch', kind='info', culprits=[10], dur=45, probe='enq', mismatch=dict(rank=10, iter=20),
         desc='rank 10 issues the world all-reduce before its DP reduce-scatter at iteration 20: it and its DP peers wait on each other'),
    dict(name='h02_hang_while_slow', kind='hang', culprits=[20], also={'slow_rank': [3]}, dur=55,
         slow={3: slow_const(1.5, 10.0)}, hang=dict(rank=20, t=35.0),
         desc='rank 3 1.5x from 10 s (its slow_rank incident open), rank 20 hangs at 35 s'),
    dict(name='h03_eval_comm_hang', kind='hang', culprits=[14], dur=50, probe='enq', evals=dict(every=10, mb=8),
         hang=dict(rank=14, before='eval', eval=2),
         desc='eval comm created mid-run; at the 3rd evaluation rank 14 never enters the eval all-reduce'),
    dict(name='h04_first_iter', kind='hang', culprits=[11], dur=30, hang=dict(rank=11, iter=0),
         desc='rank 11 joins every comm, then hangs before its first call of iteration 0'),
    dict(name='h05_dataloader', kind='hang', culprits=[25], dur=50, probe='enq', hang=dict(rank=25, iter=25),
         desc="rank 25's host blocks in the data loader before iteration 25 (nothing of its own outstanding)"),
    dict(name='i01a_noplugin', kind='healthy', noplugin=[3],
         desc='node-03 sends heartbeats (counters -1) and steps but no call records'),
    dict(name='i01b_noplugin_slow', kind='slow_rank', culprits=[4], onset=20.0, noplugin=[3],
         slow={4: slow_const(1.4, 20.0)},
         desc='node-03 without plugin; rank 4 (node-00) 1.4x from 20 s'),
    dict(name='i02a_batch1s', kind='healthy', probe='blk', agent_period={1: 1.0},
         desc="node-01's agent batches every 1 s"),
    dict(name='i02b_batch1s_hang', kind='hang', culprits=[12], probe='enq', agent_period={1: 1.0},
         hang=dict(rank=12, t=30.0),
         desc="node-01's agent batches every 1 s; rank 12 (node-01) hangs at 30 s"),
    dict(name='n01_slow_nic', kind='info', culprit_nodes=['node-02'], onset=20.0, nic=dict(node=2, f=5.0, t=20.0),
         desc="node-02's NIC 5x slower from 20 s: its ranks' cross-node transfers slow, compute normal"),
    dict(name='L01_512_hang', kind='hang', culprits=[300], dur=18, layout=(8, 4, 16), M=2,
         hang=dict(rank=300, t=9.0), desc='512 ranks (TP8 PP4 DP16), rank 300 hangs at 9 s'),
]


# ----------------------------------------------------------------------------- model
class Comm:
    def __init__(self, job, name, members, gpn):
        self.name = name
        self.id = int.from_bytes(hashlib.blake2b(('%s/%s' % (job, name)).encode(), digest_size=8).digest(), 'little')
        self.hex = '%016x' % self.id
        self.members = list(members)
        self.idx = {r: i for i, r in enumerate(members)}
        self.nodes = sorted({r // gpn for r in members})
        self.n = len(members)


class Op:
    __slots__ = ('r', 't', 'dur', 'comm', 'opc', 'nb', 'peer', 'seq', 'aux', 'it', 'ph', 'inst',
                 'pre', 'ld', 'sync', 'h', 's', 'e', 'tag')

    def __init__(self, r, t, it, ph, dur=0.0, comm=None, opc=0, nb=0, peer=-1, sync=False, pre=0.0, ld=0.0, tag=None):
        self.r, self.t, self.it, self.ph, self.dur, self.comm, self.opc, self.nb = r, t, it, ph, dur, comm, opc, nb
        self.peer, self.sync, self.pre, self.ld, self.tag = peer, sync, pre, ld, tag
        self.seq = 0
        self.aux = 0
        self.inst = None
        self.h = self.s = self.e = None


class Inst:
    __slots__ = ('ops', 'n', 'arr', 'smax', 'comm', 'nb', 'span', 'done', 'kind')

    def __init__(self, n, comm, nb, span, kind):
        self.ops, self.n, self.arr, self.smax, self.comm, self.nb, self.span, self.done, self.kind = [], n, 0, -1.0, comm, nb, span, False, kind


class Job:
    pass


def build(sc, seed):
    rng = np.random.default_rng(seed)
    j = Job()
    j.sc, j.rng = sc, rng
    j.name = sc['name']
    j.job = 'ops-%s-%d' % (sc['name'].split('_')[0], seed)
    TP, PP, DP = sc['layout']
    j.TP, j.PP, j.DP = TP, PP, DP
    gpn = j.gpn = 8
    W = j.W = TP * PP * DP
    j.nnodes = (W + gpn - 1) // gpn
    j.dur = float(sc['dur'])
    j.probe = sc['probe']
    M = sc['M']
    tf, tb, topt = 0.040, 0.080, 0.030
    coords = [(r % TP, (r // TP) % PP, r // (TP * PP)) for r in range(W)]
    j.coords = coords
    tpc = {(d, p): Comm(j.job, 'tp-%d-%d' % (d, p), [d * PP * TP + p * TP + t for t in range(TP)], gpn)
           for d in range(DP) for p in range(PP)} if TP > 1 else {}
    ppc = {(d, t): Comm(j.job, 'pp-%d-%d' % (d, t), [d * PP * TP + p * TP + t for p in range(PP)], gpn)
           for d in range(DP) for t in range(TP)} if PP > 1 else {}
    dpc = {(p, t): Comm(j.job, 'dp-%d-%d' % (p, t), [d * PP * TP + p * TP + t for d in range(DP)], gpn)
           for p in range(PP) for t in range(TP)} if DP > 1 else {}
    dpc2 = {(p, t): Comm(j.job, 'dp2-%d-%d' % (p, t), [d * PP * TP + p * TP + t for d in range(DP)], gpn)
            for p in range(PP) for t in range(TP)} if (DP > 1 and sc.get('recreate')) else {}
    world = Comm(j.job, 'world', range(W), gpn)
    evalc = Comm(j.job, 'eval', range(W), gpn) if sc.get('evals') else None
    j.comms = list(tpc.values()) + list(ppc.values()) + list(dpc.values()) + list(dpc2.values()) + [world] + ([evalc] if evalc else [])
    j.comm_by_id = {c.id: c for c in j.comms}
    it_est = (M + PP - 1) * (tf + tb) + topt + 0.05
    j.it_est = it_est
    pause = sc.get('pause')
    n_iter = int((j.dur - (pause['s'] if pause else 0)) / it_est) + 3
    ev = sc.get('evals')
    rec_it = sc.get('recreate')
    mm = sc.get('mismatch')
    speed = np.exp(rng.normal(0, 0.01, W))
    prog = []
    for r in range(W):
        t, p, d = coords[r]
        ops = []
        nz = lambda: float(np.exp(rng.normal(0, 0.02)))
        first = [True]

        def add(op):
            if first[0]:
                op.sync = True
                op.pre += 0.5 + 0.3 * rng.random()       # process start
                first[0] = False
            ops.append(op)
        inits = ([tpc[(d, p)]] if tpc else []) + ([ppc[(d, t)]] if ppc else []) + ([dpc[(p, t)]] if dpc else []) + [world]
        for c in inits:
            add(Op(r, 'I', -1, 'i', comm=c))
        evals_done = 0
        for it in range(n_iter):
            dp_comm = dpc2[(p, t)] if (rec_it is not None and it >= rec_it and dpc2) else (dpc.get((p, t)))
            ld = 0.002 + 0.004 * rng.random()
            extra = 0.0
            if pause and it == pause['iter']:
                extra = pause['s']
            head = []
            if rec_it is not None and it == rec_it and dpc2:
                head = [Op(r, 'D', it, 'x', comm=dpc[(p, t)]), Op(r, 'I', it, 'x', comm=dpc2[(p, t)])]
                extra += 1.5
            body = []

            def fwd(m, ph):
                if p > 0:
                    body.append(Op(r, 'R', it, ph, comm=ppc[(d, t)], opc=RECV, nb=4 << 20, peer=p - 1))
                for _ in range(2):
                    body.append(Op(r, 'C', it, ph, dur=tf / 2 * speed[r] * nz()))
                    if tpc:
                        body.append(Op(r, 'X', it, ph, comm=tpc[(d, p)], opc=ALLREDUCE, nb=8 << 20))
                if p < PP - 1:
                    body.append(Op(r, 'S', it, ph, comm=ppc[(d, t)], opc=SEND, nb=4 << 20, peer=p + 1))
            for m in range(M):
                fwd(m, 'f')
            for m in range(M):
                if p < PP - 1:
                    body.append(Op(r, 'R', it, 'b', comm=ppc[(d, t)], opc=RECV, nb=4 << 20, peer=p + 1))
                for _ in range(2):
                    body.append(Op(r, 'C', it, 'b', dur=tb / 2 * speed[r] * nz()))
                    if tpc:
                        body.append(Op(r, 'X', it, 'b', comm=tpc[(d, p)], opc=ALLREDUCE, nb=8 << 20))
                if p > 0:
                    body.append(Op(r, 'S', it, 'b', comm=ppc[(d, t)], opc=SEND, nb=4 << 20, peer=p - 1))
            tail = []
            rs = Op(r, 'X', it, 'o', comm=dp_comm, opc=REDUCESCATTER, nb=400 << 20, tag='dp') if dp_comm else None
            wa = Op(r, 'X', it, 'o', comm=world, opc=ALLREDUCE, nb=8, tag='world')
            pair = [x for x in (rs, wa) if x]
            if mm and r == mm['rank'] and it == mm['iter']:
                pair.reverse()
            tail += pair
            tail.append(Op(r, 'C', it, 'o', dur=topt * speed[r] * nz()))
            if dp_comm:
                tail.append(Op(r, 'X', it, 'o', comm=dp_comm, opc=ALLGATHER, nb=400 << 20, tag='dp'))
            seq_ops = head + body + tail
            seq_ops[0].sync = True
            seq_ops[0].pre = ld + extra
            seq_ops[0].ld = ld
            for o in seq_ops:
                add(o)
            if ev and (it + 1) % ev['every'] == 0:
                eops = []
                if evals_done == 0:
                    eops.append(Op(r, 'I', it, 'e', comm=evalc))
                body = []
                for m in range(ev['mb']):
                    fwd(m, 'e')
                eops += body
                eops.append(Op(r, 'C', it, 'e', dur=0.01 * nz()))
                eops.append(Op(r, 'X', it, 'e', comm=evalc, opc=ALLREDUCE, nb=8, tag=('eval', evals_done)))
                eops[0].sync = True
                eops[0].pre = 0.002
                for o in eops:
                    add(o)
                evals_done += 1
        prog.append(ops)
    # sequence numbers and instances
    insts = {}
    for r in range(W):
        cnt = defaultdict(int)
        acnt = defaultdict(int)
        for o in prog[r]:
            if o.t == 'X':
                o.seq = cnt[o.comm.id]
                cnt[o.comm.id] += 1
                o.aux = acnt[(o.comm.id, o.opc)]
                acnt[(o.comm.id, o.opc)] += 1
                key = ('X', o.comm.id, o.seq)
                n = o.comm.n
                span = len(o.comm.nodes) > 1
            elif o.t in 'SR':
                o.seq = cnt[(o.comm.id, o.peer, o.t)]
                cnt[(o.comm.id, o.peer, o.t)] += 1
                me = o.comm.idx[r]
                src, dst = (me, o.peer) if o.t == 'S' else (o.peer, me)
                key = ('P', o.comm.id, src, dst, o.seq)
                n = 2
                span = (o.comm.members[src] // gpn) != (o.comm.members[dst] // gpn)
            elif o.t == 'I':
                key = ('I', o.comm.id)
                n = o.comm.n
                span = len(o.comm.nodes) > 1
            else:
                continue
            i = insts.get(key)
            if i is None:
                i = insts[key] = Inst(n, o.comm, o.nb, span, o.t)
            i.ops.append(o)
            o.inst = i
    j.prog, j.insts = prog, insts
    # slowness and NIC
    j.slow = sc.get('slow', {})
    j.nic = sc.get('nic')
    return j


def xfer(j, inst, t):
    if inst.kind == 'I':
        return 0.05
    if not inst.span:
        x = 0.00015 + inst.nb / 150e9
    else:
        x = 0.0012 + inst.nb / 2e10
        if j.nic and t >= j.nic['t'] and j.nic['node'] in inst.comm.nodes:
            x *= j.nic['f']
    return x


def simulate(j):
    W = j.W
    prog = j.prog
    rng = j.rng
    blk = j.probe == 'blk'
    hlast = [0.0] * W
    ptr = [0] * W
    hang = j.sc.get('hang')
    j.hstop = None
    stopped = [False] * W
    jit = rng.random(200003) * 1.5e-5
    jc = [0]
    q = deque(range(W))
    inq = [True] * W

    def wake(r):
        if not inq[r]:
            inq[r] = True
            q.append(r)

    def hang_pred(o, h):
        if 't' in hang:
            return h >= hang['t']
        if 'iter' in hang:
            return o.it >= hang['iter'] and o.t != 'I'
        if hang.get('before') == 'new_dp':
            return o.t == 'X' and o.comm.name.startswith('dp2-')
        if hang.get('before') == 'eval':
            return o.t == 'X' and o.tag == ('eval', hang['eval'])
        return False

    def complete(inst):
        inst.done = True
        base = inst.smax + xfer(j, inst, inst.smax) if inst.smax < INF else INF
        for o in inst.ops:
            if o.e is None:
                k = jc[0] = (jc[0] + 1) % len(jit)
                o.e = base + jit[k]
            wake(o.r)

    def advance(r):
        ops = prog[r]
        k = ptr[r]
        n = len(ops)
        while k < n:
            o = ops[k]
            if o.s is None:
                pe = ops[k - 1].e if k else 0.0
                if o.sync or blk:
                    h = max(hlast[r], pe) + o.pre + (EPS if not o.sync else 0.0)
                else:
                    h = hlast[r] + EPS
                    if k >= QDEPTH:
                        h = max(h, ops[k - QDEPTH].e)
                if hang and r == hang['rank'] and not stopped[r] and h < INF and hang_pred(o, h):
                    stopped[r] = True
                    j.hstop = hang['t'] if 't' in hang else h
                if stopped[r]:
                    h = INF
                hlast[r] = h
                o.h = h
                s = h if h > pe else pe
                o.s = s
                if o.inst is not None:
                    inst = o.inst
                    inst.arr += 1
                    if s > inst.smax:
                        inst.smax = s
                    if inst.arr == inst.n and not inst.done:
                        complete(inst)
            if o.e is None:
                if o.t == 'C':
                    if o.s == INF:
                        o.e = INF
                    else:
                        f = 1.0
                        sf = j.slow.get(r)
                        if sf:
                            f = sf(o.s)
                        o.e = o.s + o.dur * f
                elif o.t == 'D':
                    o.e = o.s
                else:
                    break
            k += 1
        ptr[r] = k

    while True:
        while q:
            r = q.popleft()
            inq[r] = False
            advance(r)
        stuck = False
        for r in range(W):
            if ptr[r] < len(prog[r]):
                o = prog[r][ptr[r]]
                inst = o.inst
                inst.done = True
                for x in inst.ops:
                    if x.e is None:
                        x.e = INF
                    wake(x.r)
                stuck = True
        if not stuck:
            break
    if hang:
        c = hang['rank']
        last = max((o.e for o in prog[c] if o.e < INF), default=0.0)
        j.onset = max(j.hstop if j.hstop is not None else INF, last)


# ----------------------------------------------------------------------------- wire
def make_clocks(j):
    rng = j.rng
    sc = j.sc
    off = rng.uniform(-1, 1, j.nnodes) * sc.get('off_ms', 2) * 1e-3
    drift = rng.uniform(-1, 1, j.nnodes) * sc.get('drift_ppm', 5) * 1e-6
    steps = sc.get('clock_steps', {})

    def local(node, t):
        t = np.asarray(t, dtype=float)
        x = t + off[node] + drift[node] * t
        if node in steps:
            ts, dl = steps[node]
            x = x + np.where(t >= ts, dl, 0.0)
        return np.round(x * 1e9).astype(np.int64) + T0
    j.local = local
    j.clock = dict(off_ms=[round(x * 1e3, 3) for x in off], drift_ppm=[round(x * 1e6, 2) for x in drift],
                   steps={('node-%02d' % k): v for k, v in steps.items()})


def node_name(n):
    return 'node-%02d' % n


def emit(j):
    """Returns (messages, aux) where messages = [(ts_local_ns, true_t, dict)]."""
    sc, rng, W, gpn, dur = j.sc, j.rng, j.W, j.gpn, j.dur
    noplug = set(sc.get('noplugin', []))
    probe = j.probe
    poll_ph = rng.random(W) * 0.01
    rows = []   # w, node, commid, kind, opc, flags, rank, seq, ts, te, nb, crank, peer, nranks, aux
    for r in range(W):
        node = r // gpn
        if node in noplug:
            continue
        for o in j.prog[r]:
            if o.t == 'C':
                continue
            c = o.comm
            cr = c.idx[r]
            if o.t == 'I':
                if o.e < INF:
                    rows.append((o.e + 0.001, node, c.id, 2, 0, F_COMPLETED, r, 0, o.e, o.e, 0, cr, -1, c.n, len(c.nodes)))
                continue
            if o.t == 'D':
                if o.s < INF:
                    rows.append((o.s + 0.0005, node, c.id, 3, 0, F_COMPLETED, r, 0, o.s, o.s, 0, cr, -1, c.n, 0))
                continue
            peer = o.peer if o.t in 'SR' else -1
            aux = (o.aux & 0xffffffff) if (o.t == 'X' and probe != 'blk') else 0
            if probe == 'gpu':
                if o.s == INF:
                    continue
                rows.append((o.s + 0.001, node, c.id, 1, o.opc, F_GPU, r, o.seq, o.s, 0.0, o.nb, cr, peer, c.n, aux))
                if o.e < INF:
                    rows.append((o.e + 0.001, node, c.id, 1, o.opc, F_GPU | F_COMPLETED, r, o.seq, o.s, o.e, o.nb, cr, peer, c.n, aux))
            elif probe == 'enq':
                if o.h == INF:
                    continue
                rows.append((o.h + 1e-5, node, c.id, 1, o.opc, F_ENQ, r, o.seq, o.h, 0.0, o.nb, cr, peer, c.n, aux))
                if o.e < INF:
                    ob = poll_ph[r] + math.ceil((o.e - poll_ph[r]) / 0.01) * 0.01
                    rows.append((ob, node, c.id, 1, o.opc, F_ENQ | F_COMPLETED, r, o.seq, o.h, ob, o.nb, cr, peer, c.n, aux))
            else:
                if o.s == INF:
                    continue
                rows.append((o.s + 1e-5, node, c.id, 1, o.opc, 0, r, o.seq, o.s, 0.0, o.nb, cr, peer, c.n, aux))
                if o.e < INF:
                    rows.append((o.e + 1e-5, node, c.id, 1, o.opc, F_COMPLETED, r, o.seq, o.s, o.e, o.nb, cr, peer, c.n, aux))
    A = np.array(rows, dtype=float) if rows else np.zeros((0, 15))
    commids = np.array([x[2] for x in rows], dtype=np.uint64)
    per = np.full(j.nnodes, 0.2)
    for n, p in sc.get('agent_period', {}).items():
        per[n] = p
    fph = rng.random(j.nnodes) * per
    node = A[:, 1].astype(int)
    w = A[:, 0]
    fl = fph[node] + np.ceil((w - fph[node]) / per[node]) * per[node]
    keep = fl <= dur
    A, commids, node, fl, w = A[keep], commids[keep], node[keep], fl[keep], w[keep]
    msgs = []
    # call batches
    order = np.lexsort((w, fl, commids, node))
    A, commids, node, fl = A[order], commids[order], node[order], fl[order]
    rec = np.zeros(len(A), dtype=REC)
    rec['kind'] = A[:, 3]
    rec['op'] = A[:, 4]
    rec['flags'] = A[:, 5]
    rec['rank'] = A[:, 6]
    rec['comm'] = commids
    rec['seq'] = A[:, 7]
    tsn = np.zeros(len(A), dtype=np.int64)
    ten = np.zeros(len(A), dtype=np.int64)
    for n in range(j.nnodes):
        m = node == n
        if m.any():
            tsn[m] = j.local(n, A[m, 8])
            te = A[m, 9]
            ten[m] = np.where(te > 0, j.local(n, te), 0)
    rec['t_start_ns'] = tsn
    rec['t_end_ns'] = ten
    rec['bytes'] = A[:, 10]
    rec['comm_rank'] = A[:, 11]
    rec['peer'] = A[:, 12]
    rec['nranks'] = A[:, 13]
    rec['aux'] = A[:, 14]
    if len(A):
        brk = np.flatnonzero((np.diff(node) != 0) | (np.diff(commids) != 0) | (np.diff(fl) != 0)) + 1
        starts = np.concatenate(([0], brk))
        ends = np.concatenate((brk, [len(A)]))
        for a, b in zip(starts, ends):
            hdr = np.zeros(1, dtype=HDR)
            hdr['magic'] = b'CWB1'
            hdr['version'] = 1
            hdr['recsize'] = 64
            hdr['count'] = b - a
            n = int(node[a])
            msgs.append((int(j.local(n, fl[a])), float(fl[a]), dict(
                topic='cw.calls.v1', key='%s/%016x' % (j.job, int(commids[a])),
                value_b64=base64.b64encode(hdr.tobytes() + rec[a:b].tobytes()).decode())))
    # per-node flush times (for heartbeat counters: what the agent forwarded by its last flush)
    j.per, j.fph = per, fph
    # heartbeats
    rank_view = defaultdict(lambda: ([], [], [], []))   # (rank, commid) -> ent_w, ent_ts, cmp_w, cmp_te (true)
    p2p_view = defaultdict(lambda: ([], []))            # (rank, commid, peer, op) -> ent_w, cmp_w
    p2p_keys = defaultdict(list)                        # (rank, commid) -> [(peer, op)]
    for x in rows:
        if x[3] != 1:
            continue
        wx, rr, cid, opc, fg = x[0], int(x[6]), x[2], x[4], int(x[5])
        if opc in (SEND, RECV):
            pk = (rr, cid, int(x[12]), 'send' if opc == SEND else 'recv')
            if pk not in p2p_view:
                p2p_keys[(rr, cid)].append(pk[2:])
            v = p2p_view[pk]
            (v[1] if fg & F_COMPLETED else v[0]).append(wx)
        else:
            v = rank_view[(rr, cid)]
            if fg & F_COMPLETED:
                v[2].append(wx)
                v[3].append(x[9])
            else:
                v[0].append(wx)
                v[1].append(x[8])
    init_t = defaultdict(dict)    # comm -> rank -> init time
    dest_t = defaultdict(dict)
    for r in range(W):
        for o in j.prog[r]:
            if o.t == 'I' and o.e < INF:
                init_t[o.comm.id][r] = o.e
            if o.t == 'D' and o.s < INF:
                dest_t[o.comm.id][r] = o.s
    hph = rng.random(j.nnodes)
    nhb = 0
    for c in j.comms:
        if c.id not in init_t:
            continue
        for n in c.nodes:
            loc = [r for r in c.members if r // gpn == n]
            t_in = min(init_t[c.id].get(r, INF) for r in loc)
            t_out = max(dest_t[c.id].get(r, INF) for r in loc)
            if t_in == INF:
                continue
            k0 = max(0, math.ceil(t_in - hph[n]))
            T = hph[n] + k0
            while T <= dur:
                if T >= t_out:
                    break
                tf = fph[n] + math.floor((T - fph[n]) / per[n] + 1e-12) * per[n]   # last flush <= T
                ranks = []
                for r in loc:
                    if r not in init_t[c.id] or init_t[c.id][r] > T:
                        continue
                    if n in noplug:
                        ranks.append(dict(rank=r, started=-1, completed=-1, t_last_start_ns=0, t_last_end_ns=0))
                        continue
                    v = rank_view.get((r, c.id))
                    ns = bisect_right(v[0], tf) if v else 0
                    nc = bisect_right(v[2], tf) if v else 0
                    e = dict(rank=r, started=max(ns, nc) - 1, completed=nc - 1,
                             t_last_start_ns=int(j.local(n, v[1][ns - 1])) if ns else 0,
                             t_last_end_ns=int(j.local(n, v[3][nc - 1])) if nc else 0)
                    if c.name.startswith('pp-'):
                        pl = []
                        for pe, opn in p2p_keys.get((r, c.id), []):
                                pv = p2p_view[(r, c.id, pe, opn)]
                                pl.append(dict(peer=pe, op=opn, started=max(bisect_right(pv[0], tf), bisect_right(pv[1], tf)) - 1,
                                               completed=bisect_right(pv[1], tf) - 1))
                        e['p2p'] = sorted(pl, key=lambda z: (z['peer'], z['op']))
                    ranks.append(e)
                ts = int(j.local(n, T))
                msgs.append((ts, T, dict(topic='cw.progress.v1', key='%s/%s' % (j.job, c.hex), value=dict(
                    v=1, job=j.job, node=node_name(n), ts_ns=ts, comm=c.hex, ranks=ranks))))
                nhb += 1
                T += 1.0
    # topology
    for r in range(W):
        n = r // gpn
        t = 0.3 + 0.1 * rng.random()
        tp, pp, dp = j.coords[r]
        ts = int(j.local(n, t))
        msgs.append((ts, t, dict(topic='cw.topology.v1', key=j.job, value=dict(
            v=1, job=j.job, ts_ns=ts, rank=r, world_size=W, node=node_name(n), local_rank=r % gpn,
            gpu='GPU-%08x' % (hash((j.job, r)) & 0xffffffff), coords=dict(tp=tp, pp=pp, dp=dp, cp=0, ep=0)))))
    # steps
    j.iter_times = defaultdict(list)
    for r in range(W):
        n = r // gpn
        byit = defaultdict(list)
        for o in j.prog[r]:
            if o.it >= 0 and o.ph in 'fbo':
                byit[o.it].append(o)
        for it in sorted(byit):
            ops = byit[it]
            if ops[0].h == INF or ops[-1].e == INF:
                break
            t_s = ops[0].h - ops[0].ld
            t_e = ops[-1].e
            if t_e + 0.003 > dur:
                break
            ph = {}
            for key, name in (('f', 'forward_ms'), ('b', 'backward_ms'), ('o', 'optimizer_ms')):
                xs = [o for o in ops if o.ph == key and o.t == 'C']
                if key == 'o':
                    ph[name] = round(sum(o.e - o.s for o in xs) * 1e3, 3)
                elif xs:
                    ys = [o for o in ops if o.ph == key]
                    ph[name] = round((max(o.e for o in ys) - min(o.s for o in ys)) * 1e3, 3)
            j.iter_times[r].append((t_s, t_e))
            msgs.append((int(j.local(n, t_e + 0.003)), t_e + 0.003, dict(topic='cw.steps.v1', key=j.job, value=dict(
                v=1, job=j.job, rank=r, iteration=it, t_start_ns=int(j.local(n, t_e)) - int(round((t_e - t_s) * 1e9)),
                t_end_ns=int(j.local(n, t_e)),
                phases=ph))))
    return msgs


# ----------------------------------------------------------------------------- verify
def verify(j, msgs):
    errs = []
    counts = defaultdict(int)
    W, gpn = j.W, j.gpn
    noplug = set(j.sc.get('noplugin', []))
    cidx = {c.id: i for i, c in enumerate(j.comms)}
    idxmap = np.full((len(j.comms), W), -1, dtype=np.int64)
    for i, c in enumerate(j.comms):
        idxmap[i, c.members] = np.arange(c.n)
    topo = {}
    for ts, tt, m in msgs:
        counts[m['topic']] += 1
        if m['topic'] == 'cw.topology.v1':
            topo[m['value']['rank']] = m['value']['node']
    if sorted(topo) != list(range(W)):
        errs.append('topology does not cover every rank once')
    cols = defaultdict(list)
    for ts, tt, m in msgs:
        if m['topic'] != 'cw.calls.v1':
            continue
        raw = base64.b64decode(m['value_b64'])
        h = np.frombuffer(raw[:16], dtype=HDR)[0]
        if h['magic'] != b'CWB1' or h['version'] != 1 or h['recsize'] != 64 or len(raw) != 16 + 64 * int(h['count']):
            errs.append('bad batch header')
            continue
        recs = np.frombuffer(raw[16:], dtype=REC)
        cid = int(m['key'].split('/')[1], 16)
        if cid not in cidx:
            errs.append('unknown comm %x' % cid)
            continue
        if (recs['comm'] != cid).any():
            errs.append('record comm differs from key')
        ci = cidx[cid]
        comp = (recs['flags'] & F_COMPLETED) != 0
        if ((recs['t_end_ns'] != 0) != comp).any():
            errs.append('t_end set iff COMPLETED violated')
        rk = recs['rank'].astype(np.int64)
        if (rk < 0).any() or (rk >= W).any() or (idxmap[ci, rk] != recs['comm_rank']).any() \
                or (recs['nranks'] != j.comms[ci].n).any():
            errs.append('rank/comm inconsistent with topology (comm %s)' % j.comms[ci].name)
            continue
        if noplug and np.isin(rk // gpn, list(noplug)).any():
            errs.append('record from a plugin-less node')
        call = recs['kind'] == 1
        cols['rank'].append(rk[call])
        cols['ci'].append(np.full(call.sum(), ci))
        cols['seq'].append(recs['seq'][call].astype(np.int64))
        cols['comp'].append(comp[call])
        cols['peer'].append(recs['peer'][call].astype(np.int64))
        cols['op'].append(recs['op'][call].astype(np.int64))
        cols['tt'].append(np.full(call.sum(), tt))
    C = {k: np.concatenate(v) for k, v in cols.items()} if cols else {}
    counts['records'] = int(sum(len(x) for x in cols.get('rank', [])))
    hbview = {}
    if C:
        isp = (C['op'] == SEND) | (C['op'] == RECV)
        key = ((C['rank'] * len(j.comms) + C['ci']) * 64 + np.where(isp, C['peer'] + 1, 0)) * 16 + np.where(isp, C['op'], 0)
        o = np.lexsort((C['seq'], C['tt'], key))
        key, seq, comp, tt = key[o], C['seq'][o], C['comp'][o], C['tt'][o]
        brk = np.flatnonzero(np.diff(key)) + 1
        for a, b in zip(np.concatenate(([0], brk)), np.concatenate((brk, [len(key)]))):
            u = np.unique(seq[a:b])
            if u[0] != 0 or u[-1] != len(u) - 1:
                errs.append('seq not contiguous from 0 for key %d' % key[a])
                break
            k = int(key[a])
            if k % 16 == 0 and (k // 16) % 64 == 0:       # collectives of (rank, comm)
                s = seq[a:b]
                cs = np.where(comp[a:b], s, -1)
                hbview[k // 1024] = (tt[a:b], np.maximum.accumulate(s), np.maximum.accumulate(cs))
    bad = 0
    for ts, tt, m in msgs:
        if m['topic'] != 'cw.progress.v1':
            continue
        cid = int(m['value']['comm'], 16)
        ci = cidx[cid]
        c = j.comms[ci]
        plugless = int(m['value']['node'][5:]) in noplug
        for e in m['value']['ranks']:
            r = e['rank']
            if r not in c.idx:
                errs.append('heartbeat rank %d not in comm %s' % (r, c.name))
                break
            if plugless:
                if e['started'] != -1 or e['completed'] != -1:
                    bad += 1
                continue
            v = hbview.get(r * len(j.comms) + ci)
            st = cp = -1
            if v is not None:
                n = int(np.searchsorted(v[0], tt + 1e-9, side='right'))
                if n:
                    st, cp = int(v[1][n - 1]), int(v[2][n - 1])
            if e['started'] != st or e['completed'] != cp:
                bad += 1
    if bad:
        errs.append('%d heartbeat counters disagree with delivered records' % bad)
    # collectives: complete together, never before the last arrival
    spread = 0
    for i in j.insts.values():
        es = [o.e for o in i.ops]
        if all(e < INF for e in es):
            if max(es) - min(es) > 2e-5 or min(es) < max(o.s for o in i.ops):
                spread += 1
        elif any(e < INF for e in es):
            spread += 1
    if spread:
        errs.append('%d instances not completed together' % spread)
    # per-kind truth checks
    k = j.sc['kind']
    allops = [o for ops in j.prog for o in ops]
    if k == 'hang':
        c = j.sc['hang']['rank']
        if j.onset == INF:
            errs.append('hang never started')
        else:
            inside = [o for o in j.prog[c] if o.s < INF and o.e == INF]
            if inside:
                errs.append('culprit is inside a call after the onset')
            waiting = [o for o in allops if o.r != c and o.s < j.dur - 5 and o.e == INF and o.inst is not None
                       and any(x.r == c and x.s == INF for x in o.inst.ops)]
            if not waiting:
                errs.append('nobody waits on the culprit')
            late = max(o.e for o in allops if o.e < INF)
            if late > j.onset + 10:
                errs.append('job not frozen 10 s after the onset')
            if j.onset > j.dur - min(15.0, 0.45 * j.dur):
                errs.append('onset too late in the capture')
    elif k in ('healthy', 'slow_rank', 'slow_seq'):
        stuck = [o for o in allops if o.s < j.dur - 3 and o.e == INF]
        if stuck:
            errs.append('%d calls never complete in a job without a hang' % len(stuck))
    return errs, dict(counts)


# ----------------------------------------------------------------------------- main
def run_one(sc, seed, out):
    j = build(sc, seed)
    simulate(j)
    make_clocks(j)
    msgs = emit(j)
    errs, counts = verify(j, msgs)
    msgs.sort(key=lambda x: x[0])
    with open(os.path.join(out, sc['name'] + '.cwcap'), 'w') as fh:
        for ts, tt, m in msgs:
            m2 = {'topic': m['topic'], 'key': m['key'], 'ts_ns': ts}
            if 'value' in m:
                m2['value'] = m['value']
            else:
                m2['value_b64'] = m['value_b64']
            fh.write(json.dumps(m2, separators=(',', ':')) + '\n')
    # iteration time: median of rank 0's iterations before the onset
    onset = sc.get('onset')
    if sc['kind'] == 'hang':
        onset = j.onset
    elif sc['kind'] == 'slow_seq':
        onset = sc['seq'][0]['onset']
    lim = onset if onset is not None else j.dur
    its = [e - s for s, e in j.iter_times[0] if e <= lim] or [e - s for s, e in j.iter_times[0]]
    iter_s = round(float(np.median(its[1:] or its)), 3) if its else round(j.it_est, 3)
    kind = sc['kind']
    truth = dict(scenario=sc['name'], job=j.job, kind=kind, probe=j.probe, ranks=j.W,
                 layout=dict(tp=j.TP, pp=j.PP, dp=j.DP, gpus_per_node=j.gpn),
                 culprits=sc.get('culprits', []), t0_ns=T0, dur_s=j.dur,
                 onset_ns=None if onset is None or onset == INF else int(T0 + onset * 1e9),
                 iter_s=iter_s, desc=sc['desc'], seed=seed, clocks=j.clock)
    if 'recover' in sc:
        truth['recover_ns'] = int(T0 + sc['recover'] * 1e9)
    if 'also' in sc:
        truth['also'] = sc['also']
    if kind == 'slow_seq':
        truth['seq'] = [dict(culprits=x['culprits'], onset_ns=int(T0 + x['onset'] * 1e9), end_ns=int(T0 + x['end'] * 1e9))
                        for x in sc['seq']]
        truth['culprits'] = sorted({r for x in sc['seq'] for r in x['culprits']})
    if 'culprit_nodes' in sc:
        truth['culprit_nodes'] = sc['culprit_nodes']
    truth['generator'] = dict(errors=errs, counts=counts)
    with open(os.path.join(out, sc['name'] + '.truth.json'), 'w') as fh:
        json.dump(truth, fh, indent=1)
    return j, errs, counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), 'caps'))
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--list', action='store_true')
    ap.add_argument('prefixes', nargs='*')
    a = ap.parse_args()
    scs = []
    for i, s in enumerate(SCEN):
        sc = dict(BASE)
        sc.update(s)
        sc['_i'] = i
        if a.prefixes and not any(sc['name'].startswith(p) for p in a.prefixes):
            continue
        scs.append(sc)
    if a.list:
        for sc in scs:
            print('%-24s %-9s %-4s %s' % (sc['name'], sc['kind'], sc['probe'], sc['desc']))
        return 0
    os.makedirs(a.out, exist_ok=True)
    import time
    for sc in scs:
        t = time.time()
        j, errs, counts = run_one(sc, a.seed * 1000 + sc['_i'], a.out)
        print('%-24s %4d ranks %5.1fs  records %7d  msgs %6d  %s  (%.1fs)' % (
            sc['name'], j.W, j.dur, counts.get('records', 0), sum(v for k, v in counts.items() if k != 'records'),
            'OK' if not errs else 'GEN-ERR: ' + '; '.join(errs), time.time() - t), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
