#!/usr/bin/env python3
"""Independent traffic generator "realworld" for commwatch (third check).

Written from the wire spec (shared/spec/wire-v1.md), shared/DOMAIN.md and the
README only; it shares no code and no assumption with the detector or with
the two other independent generators.  numpy + the standard library.

Model (a dataflow simulation, not a timeline replay):

* each rank = one host thread that runs a program (a Python generator of
  instructions) and enqueues work on 1-2 GPU streams; the host runs ahead of
  the device until either the launch queue is full (QD outstanding ops) or it
  synchronises (loss.item() at the end of the iteration);
* a stream runs its ops in order; an op starts at max(previous op's end,
  enqueue time, awaited cross-stream event);
* a collective instance (comm, seq) completes on every member at
  max(device arrival) + transfer (+ a few us of jitter per member);
* send/recv rendezvous: SEND number k a->b pairs with RECV number k on b from
  a; a p2p *group* (batch_isend_irecv) is one stream op whose parts progress
  independently; the group ends when all its parts did;
* gloo (host-blocking) calls block the host thread itself.

Probes (wire spec section 1, "What the times mean"):
  gpu  GPU_TIMED: device start/end (the probe learns them 0.5-3 ms later);
  enq  ENQUEUED: t_start = host enqueue; completion only when a poller
       thread observes the CUDA event (poll grid of 20 ms per rank;
       t_end = observation time);
  blk  neither flag (gloo): host times of a blocking call.

Node agents batch call records per (node, comm) every 200 ms, send a
progress heartbeat per (node, comm) every 1 s (counters from the probe's own
view, never from what was delivered), topology once per rank, steps per rank
per iteration (forwarded by the agent; phases from CUDA events on the compute
stream: "wall" = section time including the waits of collectives inside the
section, "compute" = sum of compute kernels only; gloo: host times).
Node clocks: offset + drift per node; every time in a message is the node's
clock.

Usage:  gen.py --out caps [SCENARIO ...]   (default: all)   gen.py --list
"""
import argparse
import base64
import json
import math
import os
import random
import struct
import sys
import time
from collections import deque

import numpy as np

# --------------------------------------------------------------------------
# wire constants (spec section 1)
REC = np.dtype([('kind', 'u1'), ('op', 'u1'), ('flags', '<u2'), ('rank', '<i4'),
                ('comm', '<u8'), ('seq', '<u8'), ('t_start_ns', '<i8'),
                ('t_end_ns', '<i8'), ('bytes', '<u8'), ('comm_rank', '<i4'),
                ('peer', '<i4'), ('nranks', '<u4'), ('aux', '<u4')])
assert REC.itemsize == 64
assert REC.fields['aux'][1] == 60 and REC.fields['t_end_ns'][1] == 32
K_CALL, K_INIT, K_DESTROY = 1, 2, 3
AR, AG, RS, BC_, RED, SEND, RECV, A2A, BAR = 1, 2, 3, 4, 5, 6, 7, 8, 9
F_COMPLETED, F_GPU, F_GRAPH, F_ENQ, F_LOST = 1, 2, 4, 8, 16
BATCH_HDR = struct.Struct('<4sHHII')
T0_NS = 1_767_225_600_000_000_000      # 2026-01-01 00:00:00 UTC
BATCH_S = 0.2
HB_S = 1.0


class Comm:
    __slots__ = ('idx', 'cid', 'name', 'members', 'crank', 'n', 'nnodes', 'intra', 'stream')

    def hex(self):
        return '%016x' % self.cid


class Call:
    __slots__ = ('rank', 'comm', 'seq', 'op', 'nbytes', 'crank', 'peer', 'nranks', 'aux',
                 't_enq', 't_ds', 't_de', 'p2p', 'peer_g')

    def __init__(self):
        self.t_ds = None
        self.t_de = None


class Op:
    __slots__ = ('kind', 'stream', 'dur', 'enq', 'start', 'end', 'calls', 'npend', 'ev', 'tag', 'hostw')

    def __init__(self, kind, stream):
        self.kind = kind
        self.stream = stream
        self.dur = 0.0
        self.enq = 0.0
        self.start = None
        self.end = None
        self.calls = None
        self.npend = 0
        self.ev = None
        self.tag = None
        self.hostw = None


class RankSim:
    def __init__(self, r, nstreams):
        self.r = r
        self.q = [deque() for _ in range(nstreams)]
        self.sfree = [0.0] * nstreams
        self.host_t = 0.0
        self.prog = None
        self.cur = None
        self.blocked = None
        self.done = False
        self.hung = False
        self.stop_t = None
        self.enq_log = []
        self.events = {}
        self.ev_wait = {}
        self.coll_seq = {}
        self.op_seq = {}
        self.p2p_seq = {}
        self.iters = {}
        self.marks = []
        self.hmarks = []
        self.ksum = {}
        self.hang_t = None
        self.hang_pred = None
        self.slow_onset = None
        self.rng = None


COST = {'K': 150e-6, 'C': 30e-6, 'G': 40e-6}
QD = 48          # launch-queue depth in (coarse) ops


class Sim:
    def __init__(self, J):
        self.J = J
        self.inst = {}
        self.chan = {}
        self.work = deque()
        self.calls = []
        self.rnd = random.Random(J.seed * 7 + 1)
        self.ranks = [RankSim(r, J.nstreams) for r in range(J.n)]
        for R in self.ranks:
            R.rng = random.Random(J.seed * 1000003 + R.r * 7919 + 17)
            R.host_t = J.start_t[R.r]
        for R in self.ranks:
            R.prog = J.program(J, R)
        for h in J.hangs:
            R = self.ranks[h['rank']]
            R.hang_t = h['t']
            R.hang_pred = h['pred']

    # ---- calls
    def new_call(self, R, ci, op, nbytes, root, t):
        c = self.J.comms[ci]
        k = R.coll_seq.get(ci, 0)
        R.coll_seq[ci] = k + 1
        a = R.op_seq.get((ci, op), 0)
        R.op_seq[(ci, op)] = a + 1
        x = Call()
        x.rank = R.r
        x.comm = ci
        x.seq = k
        x.op = op
        x.nbytes = int(nbytes)
        x.crank = c.crank[R.r]
        x.peer = c.crank[root] if root >= 0 else -1
        x.nranks = c.n
        x.aux = a & 0xffffffff
        x.t_enq = t
        x.p2p = False
        x.peer_g = -1
        self.calls.append(x)
        return x

    def new_p2p(self, R, ci, op, peer_g, nbytes, t):
        c = self.J.comms[ci]
        key = (ci, peer_g, op)
        k = R.p2p_seq.get(key, 0)
        R.p2p_seq[key] = k + 1
        x = Call()
        x.rank = R.r
        x.comm = ci
        x.seq = k
        x.op = op
        x.nbytes = int(nbytes)
        x.crank = c.crank[R.r]
        x.peer = c.crank[peer_g]
        x.nranks = c.n
        x.aux = 0
        x.t_enq = t
        x.p2p = True
        x.peer_g = peer_g
        self.calls.append(x)
        return x

    # ---- engine
    def set_end(self, R, op, t):
        op.end = t
        if op.kind == 'R':
            R.events[op.ev] = t
            for s2 in R.ev_wait.pop(op.ev, ()):
                self.work.append((1, R, s2))
        w = op.hostw
        if w is not None:
            op.hostw = None
            w.blocked = None
            self.work.append((0, w, 0))

    def arrive_coll(self, R, op, call, t):
        key = (call.comm, call.seq)
        inst = self.inst.get(key)
        if inst is None:
            inst = self.inst[key] = [0, t, []]
        inst[0] += 1
        if t > inst[1]:
            inst[1] = t
        inst[2].append((R, op, call))
        c = self.J.comms[call.comm]
        if inst[0] < c.n:
            return
        del self.inst[key]
        for (_, _, c2) in inst[2]:
            if c2.op != call.op or c2.nbytes != call.nbytes:
                raise RuntimeError('generator bug: collective mismatch on %s seq %d: %s' %
                                   (c.name, call.seq, [(x[2].rank, x[2].op, x[2].nbytes) for x in inst[2]]))
        T = inst[1] + self.J.xfer(c, call.op, call.nbytes)
        jit = self.J.coll_jitter
        for (R2, op2, c2) in inst[2]:
            c2.t_de = T + self.rnd.random() * jit
            if op2 is not None:
                self.set_end(R2, op2, c2.t_de)
                if R2 is not R:
                    self.work.append((1, R2, op2.stream))
            else:
                if R2.blocked is c2:
                    R2.host_t = c2.t_de
                    R2.blocked = None
                    if R2 is not R:
                        self.work.append((0, R2, 0))

    def arrive_group(self, R, op, t):
        op.npend = len(op.calls)
        if op.npend == 0:
            self.set_end(R, op, t)
            return
        for call in op.calls:
            call.t_ds = t
            if call.op == SEND:
                key = (call.comm, R.r, call.peer_g, call.seq)
            else:
                key = (call.comm, call.peer_g, R.r, call.seq)
            ch = self.chan.get(key)
            if ch is None:
                self.chan[key] = (R, op, call)
                continue
            del self.chan[key]
            R2, op2, c2 = ch
            if c2.op == call.op or c2.nbytes != call.nbytes:
                raise RuntimeError('generator bug: p2p mismatch %s' % (key,))
            T = max(t, c2.t_ds) + self.J.p2p_xfer(R.r, R2.r, call.nbytes)
            for (Rx, opx, cx) in ((R, op, call), (R2, op2, c2)):
                cx.t_de = T + self.rnd.random() * 5e-6
                opx.npend -= 1
                if opx.npend == 0:
                    self.set_end(Rx, opx, max(cc.t_de for cc in opx.calls))
                    if Rx is not R:
                        self.work.append((1, Rx, opx.stream))

    def pump_stream(self, R, s):
        q = R.q[s]
        while q:
            op = q[0]
            if op.start is None:
                t = R.sfree[s]
                if op.enq > t:
                    t = op.enq
                k = op.kind
                if k == 'W':
                    et = R.events.get(op.ev)
                    if et is None:
                        lst = R.ev_wait.setdefault(op.ev, [])
                        if s not in lst:
                            lst.append(s)
                        return
                    if et > t:
                        t = et
                op.start = t
                if k == 'K':
                    self.set_end(R, op, t + op.dur)
                elif k == 'C':
                    c = op.calls[0]
                    c.t_ds = t
                    self.arrive_coll(R, op, c, t)
                elif k == 'G':
                    self.arrive_group(R, op, t)
                else:
                    self.set_end(R, op, t)
            if op.end is None:
                return
            R.sfree[s] = op.end
            q.popleft()

    def pump_host(self, R):
        while True:
            if R.blocked is not None or R.done:
                return
            ins = R.cur
            if ins is None:
                ins = next(R.prog, None)
                if ins is None:
                    R.done = True
                    R.stop_t = R.host_t
                    return
                R.cur = ins
            k = ins[0]
            if R.hang_t is not None and R.host_t >= R.hang_t and R.hang_pred(ins):
                R.done = True
                R.hung = True
                R.stop_t = R.host_t
                return
            if k == 'K' or k == 'C' or k == 'G':
                n = len(R.enq_log)
                if n >= QD:
                    old = R.enq_log[n - QD]
                    if old.end is None:
                        old.hostw = R
                        R.blocked = old
                        return
                    if old.end > R.host_t:
                        R.host_t = old.end
                R.host_t += COST[k]
                op = Op(k, ins[1])
                op.enq = R.host_t
                if k == 'K':
                    op.dur = ins[2]
                    op.tag = ins[3]
                    kk = (ins[3][0], ins[3][1])
                    R.ksum[kk] = R.ksum.get(kk, 0.0) + ins[2]
                elif k == 'C':
                    op.calls = [self.new_call(R, ins[2], ins[3], ins[4], ins[5], R.host_t)]
                else:
                    op.calls = [self.new_p2p(R, ci, o, pg, nb, R.host_t) for (ci, o, pg, nb) in ins[2]]
                R.q[op.stream].append(op)
                R.enq_log.append(op)
                R.cur = None
                self.pump_stream(R, op.stream)
                continue
            if k == 'R' or k == 'W' or k == 'M':
                R.host_t += 2e-6
                op = Op(k, ins[1])
                op.enq = R.host_t
                if k == 'M':
                    op.tag = ins[2]
                    R.marks.append(op)
                else:
                    op.ev = ins[2]
                R.q[ins[1]].append(op)
                R.cur = None
                self.pump_stream(R, ins[1])
                continue
            if k == 'H':
                R.host_t += ins[1]
                if len(ins) > 2:            # host compute (gloo): account it like kernels
                    kk = (ins[2][0], ins[2][1])
                    R.ksum[kk] = R.ksum.get(kk, 0.0) + ins[1]
            elif k == 'SYNC':
                for s in ins[1]:
                    q = R.q[s]
                    if q:
                        last = q[-1]
                        if last.end is None:
                            last.hostw = R
                            R.blocked = last
                            return
                        if last.end > R.host_t:
                            R.host_t = last.end
                    elif R.sfree[s] > R.host_t:
                        R.host_t = R.sfree[s]
            elif k == 'BC':
                R.cur = None
                c = self.new_call(R, ins[1], ins[2], ins[3], -1, R.host_t)
                c.t_ds = R.host_t
                self.arrive_coll(R, None, c, R.host_t)
                if c.t_de is None:
                    R.blocked = c
                    return
                R.host_t = c.t_de
            elif k == 'IT0':
                R.iters[ins[1]] = [R.host_t, None]
            elif k == 'IT1':
                R.iters[ins[1]][1] = R.host_t
            elif k == 'HM':
                R.hmarks.append((ins[1], R.host_t))
            else:
                raise RuntimeError('bad instruction %r' % (ins,))
            R.cur = None

    def run(self):
        for R in self.ranks:
            self.work.append((0, R, 0))
        work = self.work
        while work:
            typ, R, s = work.popleft()
            if typ == 0:
                self.pump_host(R)
            else:
                self.pump_stream(R, s)


# --------------------------------------------------------------------------
# jobs


class Job:
    """Topology, communicators, cost model and per-rank programs."""

    def __init__(self, name, n, seed, cfg):
        self.name = name
        self.n = n
        self.seed = seed
        self.cfg = cfg
        self.gpn = cfg.get('gpus_per_node', 8)
        self.node = [r // self.gpn for r in range(n)]
        self.nnodes = max(self.node) + 1
        self.coords = [None] * n
        self.comms = []
        self.rank_comms = [[] for _ in range(n)]
        self.nstreams = 1
        self.hangs = []
        self.rng = np.random.default_rng(seed)
        self.prnd = random.Random(seed * 31 + 5)
        self.coll_jitter = 15e-6
        self.gloo = False
        self.start_t = [1.0 + self.prnd.random() * 0.05 for _ in range(n)]
        self.t_stop = cfg['duration'] + 3.0
        self.cid_seen = set()

    def add_comm(self, name, members, stream=0):
        c = Comm()
        c.idx = len(self.comms)
        while True:
            cid = int(self.rng.integers(1, 2 ** 63 - 1)) | (int(self.rng.integers(0, 2)) << 63)
            if cid not in self.cid_seen:
                break
        self.cid_seen.add(cid)
        c.cid = cid
        c.name = name
        c.members = list(members)
        c.crank = {m: i for i, m in enumerate(members)}
        c.n = len(members)
        nodes = {self.node[m] for m in members}
        c.nnodes = len(nodes)
        c.intra = c.nnodes == 1
        c.stream = stream
        for m in members:
            self.rank_comms[m].append(c.idx)
        self.comms.append(c)
        return c.idx

    def xfer(self, c, op, nbytes):
        n = c.n
        if self.gloo:
            lat, bw = 300e-6, 1.5e9
        elif c.intra:
            lat, bw = 12e-6, 180e9
        else:
            lat, bw = 35e-6, 22e9
        if op == AR:
            f = 2.0 * (n - 1) / n
        elif op in (AG, RS, A2A):
            f = (n - 1) / n
        else:
            f = 1.0
        return lat * (1 + 0.5 * math.log2(max(n, 2))) + nbytes * f / bw

    def p2p_xfer(self, a, b, nbytes):
        if self.node[a] == self.node[b]:
            return 10e-6 + nbytes / 150e9
        return 30e-6 + nbytes / 22e9

    # ---- per-rank noise / faults (set up by scenarios)
    def iter_factor(self, R, it):
        """compute-time multiplier of rank R for iteration it (decided when the
        host starts the iteration)."""
        cfg = self.cfg
        f = R.rng.lognormvariate(0.0, cfg.get('it_sigma', 0.02))
        f *= cfg.get('rank_base', {}).get(R.r, 1.0)
        slow = cfg.get('slow')
        if slow and R.r in slow['ranks'] and R.host_t >= slow['t']:
            if R.slow_onset is None:
                R.slow_onset = R.host_t
            f *= slow['factor']
        return f

    def host_delay(self, R, it):
        cfg = self.cfg
        d = cfg.get('dl_ms', 2.0) * 1e-3 * (0.5 + R.rng.random())
        gc = cfg.get('gc')
        if gc and it >= gc['first'] and (it - gc['first']) % gc['every'] == 0:
            x = gc['lo'] + (gc['hi'] - gc['lo']) * R.rng.random()
            d += x
            R.__dict__.setdefault('gc', []).append((it, round(R.host_t, 2), round(x, 3)))
        hic = cfg.get('hiccup')
        if hic:
            cnt = getattr(R, 'hic_n', 0)
            if it >= 2 and cnt < hic.get('cap', 10 ** 9) and R.rng.random() < hic['p']:
                R.hic_n = cnt + 1
                x = hic['lo'] + (hic['hi'] - hic['lo']) * R.rng.random()
                d += x
                R.__dict__.setdefault('stalls', []).append((it, round(R.host_t, 2), round(x, 3)))
        inter = cfg.get('intermittent')
        if inter and R.r in inter['ranks'] and R.host_t >= inter['t']:
            if getattr(R, 'inter_first', None) is None:
                R.inter_first = it
            if (it - R.inter_first) % inter['every'] == 0:
                if R.slow_onset is None:
                    R.slow_onset = R.host_t
                x = inter['stall_s'] * (0.9 + 0.2 * R.rng.random())
                d += x
                R.__dict__.setdefault('stalls', []).append((it, round(R.host_t, 2), round(x, 3)))
        return d

    def pre_iter(self, R, it):
        """instructions run before iteration it starts (checkpoints)."""
        ck = self.cfg.get('ckpt')
        if not ck or it != ck['it']:
            return []
        if ck['mode'] == 'all_idle':
            return [('H', ck['secs'] * (0.98 + 0.04 * R.rng.random()))]
        # rank 0 writes, everyone meets in a barrier (an all-reduce of one int)
        out = []
        if R.r == 0:
            out.append(('H', ck['secs']))
        out.append(('C', 0, self.world, AR, 4, -1))
        out.append(('SYNC', (0,)))
        return out


def lnj(R, sigma=0.03):
    return R.rng.lognormvariate(0.0, sigma)


# ---- pipeline schedules ---------------------------------------------------

def schedule(P, M, vp, s):
    """Megatron's 1F1B (vp=1) or interleaved 1F1B (vp>1) order of compute
    steps for stage s: list of ('F'|'B', microbatch, chunk)."""
    if vp == 1:
        w = min(P - s - 1, M)
        out = [('F', m, 0) for m in range(w)]
        for i in range(M - w):
            out.append(('F', w + i, 0))
            out.append(('B', i, 0))
        out += [('B', m, 0) for m in range(M - w, M)]
        return out
    assert M % P == 0
    total = M * vp

    def fch(k):
        return (k % (P * vp)) // P

    def mb(k):
        return (k // (P * vp)) * P + k % P
    w = min((P - s - 1) * 2 + (vp - 1) * P, total)
    F = [('F', mb(k), fch(k)) for k in range(total)]
    B = [('B', mb(k), vp - 1 - fch(k)) for k in range(total)]
    out = F[:w]
    for i in range(total - w):
        out.append(F[w + i])
        out.append(B[i])
    out += B[total - w:]
    return out


def p2p_groups(P, vp, steps, s):
    """p2p parts (op, peer stage) before step i (i = 0..len) : sends of step i-1's
    outputs + recvs of step i's inputs (Megatron's send_X_recv_Y groups)."""
    V = P * vp
    ins, outs = [], []
    for (fb, m, c) in steps:
        v = c * P + s
        if fb == 'F':
            ins.append([] if v == 0 else [(RECV, (v - 1) % P)])
            outs.append([] if v == V - 1 else [(SEND, (v + 1) % P)])
        else:
            ins.append([] if v == V - 1 else [(RECV, (v + 1) % P)])
            outs.append([] if v == 0 else [(SEND, (v - 1) % P)])
    g = []
    if vp == 1:
        # 1F1B: send_forward_recv_backward / send_backward_recv_forward between steps
        for i in range(len(steps) + 1):
            parts = (outs[i - 1] if i > 0 else []) + (ins[i] if i < len(steps) else [])
            g.append(parts)
        return g
    # interleaved: Megatron posts one group per unit; a unit is one warmup or
    # cooldown step, or one steady (F, B) pair: the group after a unit sends its
    # outputs and receives the inputs of the next unit (both its F and its B).
    total = len(steps)
    w = min((P - s - 1) * 2 + (vp - 1) * P, total // 2)
    nsteady = total // 2 - w
    units = [[i] for i in range(w)]
    for k in range(nsteady):
        units.append([w + 2 * k, w + 2 * k + 1])
    units += [[i] for i in range(w + 2 * nsteady, total)]
    g = [[] for _ in range(total + 1)]
    prev = []
    for u in units:
        parts = [x for i in prev for x in outs[i]] + [x for i in u for x in ins[i]]
        g[u[0]] = parts
        prev = u
    g[total] = [x for i in prev for x in outs[i]]
    return g


def build_megatron(name, seed, cfg):
    tp, pp, dp, cp = cfg['tp'], cfg['pp'], cfg['dp'], cfg.get('cp', 1)
    n = tp * pp * dp * cp
    J = Job(name, n, seed, cfg)
    J.kind = 'megatron'
    J.nstreams = 2 if cfg.get('overlap') else 1

    def rank(t, p, d, c=0):
        return d * (pp * cp * tp) + p * (cp * tp) + c * tp + t
    J.rank_of = rank
    for r in range(n):
        t = r % tp
        c = (r // tp) % cp
        p = (r // (tp * cp)) % pp
        d = r // (tp * cp * pp)
        J.coords[r] = {'tp': t, 'pp': p, 'dp': d, 'cp': c, 'ep': 0}
    J.tp_comm, J.pp_comm, J.dp_comm, J.cp_comm, J.emb_comm = {}, {}, {}, {}, {}
    dstream = 1 if cfg.get('overlap') else 0
    for d in range(dp):
        for p in range(pp):
            for c in range(cp):
                if tp > 1:
                    ci = J.add_comm('tp', [rank(t, p, d, c) for t in range(tp)])
                    for t in range(tp):
                        J.tp_comm[rank(t, p, d, c)] = ci
    for d in range(dp):
        for c in range(cp):
            for t in range(tp):
                if pp > 1:
                    ci = J.add_comm('pp', [rank(t, p, d, c) for p in range(pp)])
                    for p in range(pp):
                        J.pp_comm[rank(t, p, d, c)] = ci
                    ce = J.add_comm('emb', [rank(t, 0, d, c), rank(t, pp - 1, d, c)])
                    J.emb_comm[rank(t, 0, d, c)] = ce
                    J.emb_comm[rank(t, pp - 1, d, c)] = ce
    for p in range(pp):
        for t in range(tp):
            if cp > 1:
                for d in range(dp):
                    ci = J.add_comm('cp', [rank(t, p, d, c) for c in range(cp)])
                    for c in range(cp):
                        J.cp_comm[rank(t, p, d, c)] = ci
                ci = J.add_comm('dpcp', [rank(t, p, d, c) for d in range(dp) for c in range(cp)], dstream)
                for d in range(dp):
                    for c in range(cp):
                        J.dp_comm[rank(t, p, d, c)] = ci
            else:
                ci = J.add_comm('dp', [rank(t, p, d) for d in range(dp)], dstream)
                for d in range(dp):
                    J.dp_comm[rank(t, p, d)] = ci
    J.world = J.add_comm('world', list(range(n)))
    vp = cfg.get('vp', 1)
    M = cfg['M']
    J.sched = [schedule(pp, M, vp, s) for s in range(pp)]
    J.groups = [p2p_groups(pp, vp, J.sched[s], s) if pp > 1 else [[]] * (len(J.sched[s]) + 1)
                for s in range(pp)]
    sf = cfg.get('stage_factor') or [1.0] * pp
    J.stage_factor = sf
    J.program = megatron_program
    return J


def megatron_program(J, R):
    cfg = J.cfg
    r = R.r
    co = J.coords[r]
    s, tpi, dpi, cpi = co['pp'], co['tp'], co['dp'], co['cp']
    tp, pp, cp = cfg['tp'], cfg['pp'], cfg.get('cp', 1)
    steps = J.sched[s]
    groups = J.groups[s]
    tpc = J.tp_comm.get(r)
    ppc = J.pp_comm.get(r)
    dpc = J.dp_comm.get(r)
    cpc = J.cp_comm.get(r)
    embc = J.emb_comm.get(r)
    ov = bool(cfg.get('overlap'))
    nl, nb = cfg.get('nl', 2), cfg.get('nb', 4)
    f_s = cfg['f_ms'] * 1e-3
    br = cfg.get('b_ratio', 2.0)
    tpb, p2pb, dpb = cfg.get('tp_bytes', 16 << 20), cfg.get('p2p_bytes', 32 << 20), cfg.get('dp_bytes', 256 << 20)
    cpb = cfg.get('cp_bytes', 24 << 20)
    phase_mode = cfg.get('phases', 'wall')
    last_b = max(i for i, st in enumerate(steps) if st[0] == 'B')
    opt_s = cfg.get('opt_ms', 30) * 1e-3
    it = 0
    while R.host_t < J.t_stop:
        for x in J.pre_iter(R, it):
            yield x
        fac = J.iter_factor(R, it)
        yield ('IT0', it)
        yield ('H', J.host_delay(R, it))
        if ov and it > 0:
            yield ('W', 0, ('ag', it - 1))
        for i, (fb, mb, ch) in enumerate(steps):
            g = groups[i]
            if g:
                yield ('G', 0, [(ppc, o, J.rank_of(tpi, ps, dpi, cpi), p2pb) for (o, ps) in g])
            ph = 'forward' if fb == 'F' else 'backward'
            yield ('M', 0, ('b', it, ph))
            base = f_s * J.stage_factor[s] * (1.0 if fb == 'F' else br) * fac
            lastb = (fb == 'B' and i == last_b)
            nch = nb if (lastb and ov) else nl
            for j in range(nch):
                d = base / nch * lnj(R)
                tag = (it, ph, i, j, lastb)
                if cpc is not None:
                    yield ('K', 0, d * 0.35, tag)
                    o = 1 - cpi if cp == 2 else None
                    nxt = J.rank_of(tpi, s, dpi, (cpi + 1) % cp)
                    prv = J.rank_of(tpi, s, dpi, (cpi - 1) % cp)
                    yield ('G', 0, [(cpc, SEND, nxt, cpb), (cpc, RECV, prv, cpb)])
                    yield ('K', 0, d * 0.65, tag)
                else:
                    yield ('K', 0, d, tag)
                if tpc is not None:
                    yield ('C', 0, tpc, AR, tpb, -1)
                if lastb and ov:
                    yield ('R', 0, ('bk', it, j))
                    yield ('W', 1, ('bk', it, j))
                    yield ('C', 1, dpc, RS, dpb // nb, -1)
            yield ('M', 0, ('e', it, ph))
        g = groups[len(steps)]
        if g:
            yield ('G', 0, [(ppc, o, J.rank_of(tpi, ps, dpi, cpi), p2pb) for (o, ps) in g])
        if ov:
            yield ('R', 1, ('rsd', it))
            yield ('W', 0, ('rsd', it))
        else:
            for j in range(nb):
                yield ('C', 0, dpc, RS, dpb // nb, -1)
        if embc is not None:
            yield ('C', 0, embc, AR, cfg.get('emb_bytes', 64 << 20), -1)
        yield ('M', 0, ('b', it, 'optimizer'))
        yield ('C', 0, J.world, AR, 8, -1)
        yield ('K', 0, opt_s * fac * lnj(R), (it, 'optimizer', -1, 0, False))
        yield ('M', 0, ('e', it, 'optimizer'))
        if ov:
            yield ('R', 0, ('opt', it))
            yield ('W', 1, ('opt', it))
            for j in range(nb):
                yield ('C', 1, dpc, AG, dpb // nb // 2, -1)
            if s == pp - 1:
                yield ('C', 1, dpc, AR, 4, -1)
            yield ('R', 1, ('ag', it))
            if s == pp - 1:
                yield ('W', 0, ('ag', it))
        else:
            for j in range(nb):
                yield ('C', 0, dpc, AG, dpb // nb // 2, -1)
            if s == pp - 1:
                yield ('C', 0, dpc, AR, 4, -1)
        yield ('SYNC', (0,))
        yield ('IT1', it)
        it += 1


def build_moe(name, seed, cfg):
    ep, nrep = cfg['ep'], cfg['nrep']
    n = ep * nrep
    J = Job(name, n, seed, cfg)
    J.kind = 'moe'
    J.nstreams = 1
    J.ep_comm, J.edp_comm = {}, {}
    for g in range(nrep):
        ci = J.add_comm('ep', [g * ep + e for e in range(ep)])
        for e in range(ep):
            J.ep_comm[g * ep + e] = ci
    for e in range(ep):
        ci = J.add_comm('edp', [g * ep + e for g in range(nrep)])
        for g in range(nrep):
            J.edp_comm[g * ep + e] = ci
    J.world = J.add_comm('world', list(range(n)))
    for r in range(n):
        J.coords[r] = {'tp': 0, 'pp': 0, 'dp': r // ep, 'cp': 0, 'ep': r % ep}
    J.program = moe_program
    return J


def moe_program(J, R):
    cfg = J.cfg
    r = R.r
    epc, edpc = J.ep_comm[r], J.edp_comm[r]
    M, L = cfg['M'], cfg.get('L', 2)
    attn, expert = cfg['attn_ms'] * 1e-3, cfg['expert_ms'] * 1e-3
    a2ab = cfg.get('a2a_bytes', 32 << 20)
    nb = cfg.get('nb', 2)
    it = 0
    while R.host_t < J.t_stop:
        fac = J.iter_factor(R, it)
        lo, hi = cfg.get('route', (1.0, 1.0))
        efac = lo + (hi - lo) * R.rng.random()     # hot experts move every iteration
        yield ('IT0', it)
        yield ('H', J.host_delay(R, it))
        for m in range(M):
            yield ('M', 0, ('b', it, 'forward'))
            tag = (it, 'forward', m, 0, False)
            for l in range(L):
                yield ('K', 0, attn * fac * lnj(R), tag)
                yield ('C', 0, epc, A2A, a2ab, -1)
                yield ('K', 0, expert * fac * efac * lnj(R), tag)
                yield ('C', 0, epc, A2A, a2ab, -1)
            yield ('M', 0, ('e', it, 'forward'))
            yield ('M', 0, ('b', it, 'backward'))
            tag = (it, 'backward', m, 0, False)
            for l in range(L):
                yield ('K', 0, 2 * expert * fac * efac * lnj(R), tag)
                yield ('C', 0, epc, A2A, a2ab, -1)
                yield ('K', 0, 2 * attn * fac * lnj(R), tag)
                yield ('C', 0, epc, A2A, a2ab, -1)
            yield ('M', 0, ('e', it, 'backward'))
        for j in range(nb):
            yield ('C', 0, J.world, AR, cfg.get('dense_bytes', 128 << 20) // nb, -1)
        yield ('C', 0, edpc, AR, cfg.get('expert_bytes', 256 << 20), -1)
        yield ('M', 0, ('b', it, 'optimizer'))
        yield ('C', 0, J.world, AR, 8, -1)
        yield ('K', 0, cfg.get('opt_ms', 30) * 1e-3 * fac * lnj(R), (it, 'optimizer', -1, 0, False))
        yield ('M', 0, ('e', it, 'optimizer'))
        yield ('SYNC', (0,))
        yield ('IT1', it)
        it += 1


def build_gloo(name, seed, cfg):
    n = cfg['n']
    J = Job(name, n, seed, cfg)
    J.kind = 'gloo'
    J.gloo = True
    J.coll_jitter = 400e-6
    J.nstreams = 1
    J.world = J.add_comm('world', list(range(n)))
    for r in range(n):
        J.coords[r] = {'tp': 0, 'pp': 0, 'dp': r, 'cp': 0, 'ep': 0}
    J.program = gloo_program
    return J


def gloo_program(J, R):
    cfg = J.cfg
    f, b, o = cfg['f_ms'] * 1e-3, cfg['b_ms'] * 1e-3, cfg.get('opt_ms', 20) * 1e-3
    nb = cfg.get('nb', 4)
    bb = cfg.get('bucket_bytes', 25 << 20)
    it = 0
    while R.host_t < J.t_stop:
        fac = J.iter_factor(R, it)
        yield ('IT0', it)
        yield ('H', J.host_delay(R, it))
        yield ('HM', ('b', it, 'forward'))
        yield ('H', f * fac * lnj(R), (it, 'forward'))
        yield ('HM', ('e', it, 'forward'))
        yield ('HM', ('b', it, 'backward'))
        for j in range(nb):
            yield ('H', b / nb * fac * lnj(R), (it, 'backward'))
            yield ('BC', J.world, AR, bb, ('bucket', it, j))
        yield ('HM', ('e', it, 'backward'))
        yield ('HM', ('b', it, 'optimizer'))
        yield ('H', o * fac * lnj(R), (it, 'optimizer'))
        yield ('BC', J.world, AR, 8, ('norm', it, 0))
        yield ('HM', ('e', it, 'optimizer'))
        yield ('IT1', it)
        it += 1


# --------------------------------------------------------------------------
# emission: probe view -> records -> agent batches / heartbeats / steps


def seg_cummax(gid, x):
    """running max of x within each run of equal gid (arrays already sorted
    by gid, then seq); NaN stays NaN (an event not seen stays not seen)."""
    nan = np.isnan(x)
    y = np.where(nan, -1e9, x) + gid * 1e6
    y = np.maximum.accumulate(y) - gid * 1e6
    y[nan] = np.nan
    return y


class View:
    pass


def probe_view(J, S, sc, rnd):
    calls = S.calls
    N = len(calls)
    V = View()
    V.rank = np.fromiter((c.rank for c in calls), np.int64, N)
    V.comm = np.fromiter((c.comm for c in calls), np.int64, N)
    V.seq = np.fromiter((c.seq for c in calls), np.int64, N)
    V.op = np.fromiter((c.op for c in calls), np.int64, N)
    V.nbytes = np.fromiter((c.nbytes for c in calls), np.int64, N)
    V.crank = np.fromiter((c.crank for c in calls), np.int64, N)
    V.peer = np.fromiter((c.peer for c in calls), np.int64, N)
    V.nranks = np.fromiter((c.nranks for c in calls), np.int64, N)
    V.aux = np.fromiter((c.aux for c in calls), np.int64, N)
    V.p2p = np.fromiter((c.p2p for c in calls), bool, N)
    V.peer_g = np.fromiter((c.peer_g for c in calls), np.int64, N)
    V.t_enq = np.fromiter((c.t_enq for c in calls), float, N)
    V.t_ds = np.fromiter((np.nan if c.t_ds is None else c.t_ds for c in calls), float, N)
    V.t_de = np.fromiter((np.nan if c.t_de is None else c.t_de for c in calls), float, N)
    probe = sc['probe']
    if probe == 'gpu':
        V.ent = V.t_ds.copy()
        V.end = V.t_de.copy()
        V.ent_obs = V.ent + rnd.uniform(0.5e-3, 3e-3, N)
        V.end_obs = V.end + rnd.uniform(0.5e-3, 3e-3, N)
        V.base = F_GPU
        V.aux_out = V.aux.copy()
        V.aux_out[V.p2p] = 0
    elif probe == 'enq':
        V.ent = V.t_enq.copy()
        V.ent_obs = V.ent.copy()
        P = sc.get('poll_s', 0.02)
        ph = rnd.uniform(0, P, J.n)[V.rank]
        V.end = ph + np.ceil((V.t_de - ph) / P) * P
        V.end_obs = V.end.copy()
        V.base = F_ENQ
        V.aux_out = np.zeros(N, np.int64)
    else:
        V.ent = V.t_enq.copy()
        V.ent_obs = V.ent + 20e-6
        V.end = V.t_de.copy()
        V.end_obs = V.end + 20e-6
        V.base = 0
        V.aux_out = np.zeros(N, np.int64)
    # one running order per (rank, comm) for collectives, per (rank, comm, peer, op) for p2p
    key = np.where(V.p2p, ((V.rank * 4096 + V.comm) * 8192 + V.peer + 1) * 16 + V.op,
                   (V.rank * 4096 + V.comm) * 8192 * 16)
    _, gid = np.unique(key, return_inverse=True)
    V.gid = gid
    order = np.lexsort((V.seq, gid))
    inv = np.empty_like(order)
    inv[order] = np.arange(N)
    for name in ('ent_obs', 'end_obs'):
        x = getattr(V, name)[order]
        setattr(V, name, seg_cummax(gid[order].astype(float), x)[inv])
    # exits (watchdog abort): nothing observed after a rank's exit
    V.exit = np.full(J.n, np.inf)
    return V


def node_clock(J, sc, rnd):
    off_ms = sc.get('clock_off_ms', 2.0)
    ppm = sc.get('drift_ppm', 5.0)
    off = rnd.uniform(-off_ms, off_ms, J.nnodes) * 1e-3
    drift = rnd.uniform(-ppm, ppm, J.nnodes) * 1e-6
    return off, drift


def emit(J, S, sc, V, path, rnd):
    T_END = float(sc['duration'])
    job = sc['job']
    off, drift = node_clock(J, sc, rnd)

    def clk(t, node):
        t = np.asarray(t, float)
        return (T0_NS + np.round((t + off[node] + drift[node] * t) * 1e9)).astype(np.int64)

    def clk1(t, node):
        return int(T0_NS + round((t + off[node] + drift[node] * t) * 1e9))
    nodes = np.asarray(J.node)
    bph = rnd.uniform(0, BATCH_S, J.nnodes)
    hph = rnd.uniform(0, HB_S, J.nnodes)
    gap = sc.get('agent_gap')            # (node, t0, t1)

    def tick_of(obs, node):
        k = np.ceil((obs - bph[node]) / BATCH_S - 1e-9)
        k = np.maximum(k, 0)
        t = bph[node] + k * BATCH_S
        if gap is not None:
            g, a, b = gap
            m = (node == g) & (t >= a) & (t < b)
            if m.any():
                kb = np.ceil((b - bph[g]) / BATCH_S - 1e-9)
                t = np.where(m, bph[g] + kb * BATCH_S, t)
        return t

    exit_t = V.exit
    N = len(V.rank)
    ex = exit_t[V.rank]
    ent_ok = ~np.isnan(V.ent) & (V.ent_obs <= ex)
    end_ok = ~np.isnan(V.end) & (V.end_obs <= ex) & ent_ok
    V.ent_ok, V.end_ok = ent_ok, end_ok
    rows = []          # (call index array, kind of row)

    def add_rows(idx, flags, tstart, tend, obs, kind=K_CALL):
        rows.append(dict(idx=idx, flags=flags, tstart=tstart, tend=tend, obs=obs, kind=kind))

    # entry rows and completion rows
    ie = np.nonzero(ent_ok)[0]
    ic = np.nonzero(end_ok)[0]
    add_rows(ie, np.full(len(ie), V.base), V.ent[ie], None, V.ent_obs[ie])
    add_rows(ic, np.full(len(ic), V.base | F_COMPLETED), V.ent[ic], V.end[ic], V.end_obs[ic])
    lost = sc.get('lost_at_exit')
    if lost is not None:
        il = np.nonzero(ent_ok & ~end_ok & np.isfinite(ex) & ~np.isin(V.rank, lost['killed']))[0]
        add_rows(il, np.full(len(il), V.base | F_LOST), V.ent[il], None, ex[il] - 0.5e-3)
    nrow = sum(len(x['idx']) for x in rows)
    rec = np.zeros(nrow, REC)
    r_node = np.zeros(nrow, np.int64)
    r_comm = np.zeros(nrow, np.int64)
    r_obs = np.zeros(nrow)
    r_call = np.zeros(nrow, np.int64)
    r_isentry = np.zeros(nrow, bool)
    r_iscomp = np.zeros(nrow, bool)
    p = 0
    for i, x in enumerate(rows):
        idx = x['idx']
        n = len(idx)
        sl = slice(p, p + n)
        rk = V.rank[idx]
        nd = nodes[rk]
        rec['kind'][sl] = K_CALL
        rec['op'][sl] = V.op[idx]
        rec['flags'][sl] = x['flags']
        rec['rank'][sl] = rk
        rec['comm'][sl] = np.array([J.comms[c].cid for c in V.comm[idx]], np.uint64) if n else []
        rec['seq'][sl] = V.seq[idx]
        rec['t_start_ns'][sl] = clk(x['tstart'], nd)
        rec['t_end_ns'][sl] = 0 if x['tend'] is None else clk(x['tend'], nd)
        rec['bytes'][sl] = V.nbytes[idx]
        rec['comm_rank'][sl] = V.crank[idx]
        rec['peer'][sl] = V.peer[idx]
        rec['nranks'][sl] = V.nranks[idx]
        rec['aux'][sl] = V.aux_out[idx]
        r_node[sl] = nd
        r_comm[sl] = V.comm[idx]
        r_obs[sl] = x['obs']
        r_call[sl] = idx
        r_isentry[sl] = (i == 0)
        r_iscomp[sl] = (i == 1)
        p += n
    r_tick = tick_of(r_obs, r_node)
    # ---- quirks on the call records
    stats = {}
    keep = np.ones(nrow, bool)
    if sc.get('drop'):
        keep &= rnd.random(nrow) >= sc['drop']
        stats['dropped_records'] = int((~keep).sum())
    if sc.get('ooo'):
        # entry records delivered 1-2 batches after their completion record
        comp_tick = np.full(N, np.nan)
        comp_tick[r_call[r_iscomp]] = r_tick[r_iscomp]
        cand = r_isentry & ~np.isnan(comp_tick[r_call]) & (rnd.random(nrow) < sc['ooo'])
        r_tick = np.where(cand, comp_tick[r_call] + BATCH_S * rnd.integers(1, 3, nrow), r_tick)
        stats['late_entries'] = int(cand.sum())
    extra = []
    if sc.get('dup'):
        d = np.nonzero((rnd.random(nrow) < sc['dup']) & keep)[0]
        extra = d
        stats['duplicates'] = int(len(d))
    sel = np.nonzero(keep)[0]
    tick = r_tick[sel]
    if len(extra):
        sel = np.concatenate([sel, extra])
        tick = np.concatenate([tick, r_tick[extra] + BATCH_S * rnd.integers(0, 3, len(extra))])
    # COMM_INIT / COMM_DESTROY
    init_rows = []
    init_t = {}
    for r in range(J.n):
        for ci in J.rank_comms[r]:
            t = J.start_t[r] - 0.6 + 0.05 * ci / max(1, len(J.comms)) + rnd.uniform(0, 0.02)
            init_t[(r, ci)] = t
            init_rows.append((r, ci, t, K_INIT))
    for (r, t) in sc.get('destroy', []):
        for ci in J.rank_comms[r]:
            init_rows.append((r, ci, t, K_DESTROY))
    ir = np.zeros(len(init_rows), REC)
    i_node = np.zeros(len(init_rows), np.int64)
    i_comm = np.zeros(len(init_rows), np.int64)
    i_obs = np.zeros(len(init_rows))
    for k, (r, ci, t, kind) in enumerate(init_rows):
        c = J.comms[ci]
        ir[k] = (kind, 0, 0, r, c.cid, 0, clk1(t, J.node[r]), clk1(t, J.node[r]), 0,
                 c.crank[r], -1, c.n, c.nnodes if kind == K_INIT else 0)
        i_node[k] = J.node[r]
        i_comm[k] = ci
        i_obs[k] = t
    i_tick = tick_of(i_obs, i_node)
    allrec = np.concatenate([rec[sel], ir])
    a_node = np.concatenate([r_node[sel], i_node])
    a_comm = np.concatenate([r_comm[sel], i_comm])
    a_tick = np.concatenate([tick, i_tick])
    a_obs = np.concatenate([r_obs[sel], i_obs])
    m = a_tick <= T_END
    allrec, a_node, a_comm, a_tick, a_obs = allrec[m], a_node[m], a_comm[m], a_tick[m], a_obs[m]
    order = np.lexsort((a_obs, a_comm, a_node, a_tick))
    allrec, a_node, a_comm, a_tick = allrec[order], a_node[order], a_comm[order], a_tick[order]
    lines = []          # (ts_ns, seq, text)
    nl = 0
    if len(allrec):
        brk = np.nonzero((np.diff(a_tick) != 0) | (np.diff(a_node) != 0) | (np.diff(a_comm) != 0))[0] + 1
        starts = np.concatenate([[0], brk])
        ends = np.concatenate([brk, [len(allrec)]])
        raw = allrec.tobytes()
        for s0, e0 in zip(starts.tolist(), ends.tolist()):
            c = J.comms[int(a_comm[s0])]
            nd = int(a_node[s0])
            body = BATCH_HDR.pack(b'CWB1', 1, 64, e0 - s0, 0) + raw[s0 * 64:e0 * 64]
            ts = clk1(float(a_tick[s0]), nd)
            lines.append((ts, nl, '{"topic": "cw.calls.v1", "key": "%s/%s", "ts_ns": %d, "value_b64": "%s"}'
                          % (job, c.hex(), ts, base64.b64encode(body).decode())))
            nl += 1
    stats['call_records'] = int(len(allrec))
    stats['call_batches'] = nl
    # ---- heartbeats (the probe's own counters: right even when records are lost)
    hb_msgs = 0
    exited_for = sc.get('exit_hb_s', 2.5)
    grp_ent = {}
    # per (rank, comm) collective arrays; per (rank, comm, peer, op) p2p arrays
    coll = ~V.p2p
    order = np.lexsort((V.seq, V.gid))
    g_sorted = V.gid[order]
    brk = np.nonzero(np.diff(g_sorted))[0] + 1
    for seg in np.split(order, brk):
        if not len(seg):
            continue
        i0 = seg[0]
        eo = np.where(ent_ok[seg], V.ent_obs[seg], np.inf)
        co = np.where(end_ok[seg], V.end_obs[seg], np.inf)
        if V.p2p[i0]:
            gk = (int(V.rank[i0]), int(V.comm[i0]), True, int(V.peer[i0]), int(V.op[i0]))
        else:
            gk = (int(V.rank[i0]), int(V.comm[i0]), False, -1, 0)
        grp_ent[gk] = (
            eo, co, V.ent[seg], V.end[seg])
    rank_p2p = {}
    for k in grp_ent:
        if k[2]:
            rank_p2p.setdefault((k[0], k[1]), []).append(k)
    for nd in range(J.nnodes):
        local = [r for r in range(J.n) if J.node[r] == nd]
        comms = sorted({ci for r in local for ci in J.rank_comms[r]})
        Ts = hph[nd] + np.arange(0, int(T_END) + 2) * HB_S
        Ts = Ts[Ts <= T_END]
        if gap is not None and gap[0] == nd:
            Ts = Ts[(Ts < gap[1]) | (Ts >= gap[2])]
        for ci in comms:
            c = J.comms[ci]
            mem = [r for r in local if r in c.crank]
            t_join = max(init_t[(r, ci)] for r in mem)
            blocks = []
            for r in mem:
                ck = coll_key(grp_ent, r, ci)
                if ck is not None:
                    eo, co, te, tn = grp_ent[ck]
                    st = np.searchsorted(eo, Ts, 'right') - 1
                    cp = np.searchsorted(co, Ts, 'right') - 1
                else:
                    eo = co = te = tn = None
                    st = cp = np.full(len(Ts), -1)
                pp_ = []
                for pk in rank_p2p.get((r, ci), []):
                    peo, pco, _, _ = grp_ent[pk]
                    pp_.append((pk[3], 'send' if pk[4] == SEND else 'recv',
                                np.searchsorted(peo, Ts, 'right') - 1, np.searchsorted(pco, Ts, 'right') - 1))
                blocks.append((r, st, cp, te, tn, pp_))
            for j, T in enumerate(Ts.tolist()):
                if T < t_join:
                    continue
                ranks = []
                for (r, st, cp, te, tn, pp_) in blocks:
                    if T > exit_t[r] + exited_for:
                        continue
                    s_, c_ = int(st[j]), int(cp[j])
                    d = {'rank': r, 'started': s_, 'completed': c_,
                         't_last_start_ns': clk1(float(te[s_]), nd) if s_ >= 0 else 0,
                         't_last_end_ns': clk1(float(tn[c_]), nd) if c_ >= 0 else 0}
                    if pp_:
                        d['p2p'] = [{'peer': pe, 'op': on, 'started': int(a[j]), 'completed': int(b[j])}
                                    for (pe, on, a, b) in pp_]
                    if T > exit_t[r]:
                        d['exited'] = True
                    ranks.append(d)
                if not ranks:
                    continue
                ts = clk1(T, nd)
                msg = {'v': 1, 'job': job, 'node': 'node-%03d' % nd, 'ts_ns': ts, 'comm': c.hex(),
                       'ranks': ranks}
                lines.append((ts, nl, json.dumps({'topic': 'cw.progress.v1', 'key': '%s/%s' % (job, c.hex()),
                                                  'ts_ns': ts, 'value': msg}, separators=(', ', ': '))))
                nl += 1
                hb_msgs += 1
    stats['heartbeats'] = hb_msgs
    # ---- topology
    for r in range(J.n):
        nd = J.node[r]
        t = 0.05 + rnd.uniform(0, 0.1)
        ts = clk1(t, nd)
        v = {'v': 1, 'job': job, 'ts_ns': ts, 'rank': r, 'world_size': J.n, 'node': 'node-%03d' % nd,
             'local_rank': r % J.gpn, 'gpu': 'GPU-%08x-%04x' % (J.seed & 0xffffffff, r),
             'coords': J.coords[r]}
        if sc.get('no_coords'):
            del v['coords']
        lines.append((ts, nl, json.dumps({'topic': 'cw.topology.v1', 'key': job, 'ts_ns': ts, 'value': v})))
        nl += 1
    # ---- steps
    nsteps = 0
    phase_mode = J.cfg.get('phases', 'host' if J.gloo else 'wall')
    for R in S.ranks:
        r = R.r
        nd = J.node[r]
        ph = phase_table(R, phase_mode)
        for it, (t0, t1) in sorted(R.iters.items()):
            if t1 is None or t1 > exit_t[r] or it not in ph:
                continue
            tt = float(tick_of(np.array([t1 + 0.002]), np.array([nd]))[0])
            if tt > T_END:
                continue
            ts = clk1(tt, nd)
            f, b, o = ph[it]
            v = {'v': 1, 'job': job, 'rank': r, 'iteration': it, 't_start_ns': clk1(t0, nd),
                 't_end_ns': clk1(t1, nd),
                 'phases': {'forward_ms': round(f * 1e3, 3), 'backward_ms': round(b * 1e3, 3),
                            'optimizer_ms': round(o * 1e3, 3)}}
            lines.append((ts, nl, json.dumps({'topic': 'cw.steps.v1', 'key': job, 'ts_ns': ts, 'value': v})))
            nl += 1
            nsteps += 1
    stats['steps'] = nsteps
    # ---- hardware samples (nominal; no hint of any fault)
    if sc.get('hw'):
        for nd in range(J.nnodes):
            local = [r for r in range(J.n) if J.node[r] == nd]
            for T in np.arange(hph[nd] + 0.5, T_END, 5.0).tolist():
                if gap is not None and gap[0] == nd and gap[1] <= T < gap[2]:
                    continue
                ts = clk1(T, nd)
                for r in local:
                    v = {'v': 1, 'job': job, 'node': 'node-%03d' % nd, 'ts_ns': ts, 'rank': r,
                         'gpu': 'GPU-%08x-%04x' % (J.seed & 0xffffffff, r),
                         'sm_clock_mhz': 1980, 'mem_clock_mhz': 2619,
                         'power_w': round(float(rnd.uniform(560, 680)), 1), 'temp_c': int(rnd.integers(58, 71)),
                         'util_pct': int(rnd.integers(93, 100)), 'throttle_reasons': 0, 'ecc_dbe': 0,
                         'xid': 0, 'nvlink_errors': 0,
                         'ib': {'mlx5_%d' % (r % 4): {'tx_bytes': int(T * 2.1e10), 'rx_bytes': int(T * 2.1e10),
                                                      'symbol_errors': 0}}}
                    lines.append((ts, nl, json.dumps({'topic': 'cw.hw.v1', 'key': job, 'ts_ns': ts, 'value': v})))
                    nl += 1
    lines.sort(key=lambda x: (x[0], x[1]))
    with open(path, 'w') as fh:
        for _, _, s in lines:
            fh.write(s)
            fh.write('\n')
    stats['lines'] = len(lines)
    stats['clock_off_ms'] = [round(float(x) * 1e3, 2) for x in off]
    return stats, clk1


def coll_key(grp_ent, r, ci):
    k = (r, ci, False, -1, 0)
    return k if k in grp_ent else None


def phase_table(R, mode):
    """iteration -> (forward_s, backward_s, optimizer_s)."""
    out = {}
    if mode == 'host':
        acc = {}
        open_ = {}
        for (tag, t) in R.hmarks:
            be, it, ph = tag
            if be == 'b':
                open_[(it, ph)] = t
            else:
                acc.setdefault(it, {}).setdefault(ph, 0.0)
                acc[it][ph] += t - open_.pop((it, ph))
        for it, d in acc.items():
            out[it] = (d.get('forward', 0.0), d.get('backward', 0.0), d.get('optimizer', 0.0))
        return out
    if mode == 'compute':
        its = {k[0] for k in R.ksum}
        for it in its:
            out[it] = (R.ksum.get((it, 'forward'), 0.0), R.ksum.get((it, 'backward'), 0.0),
                       R.ksum.get((it, 'optimizer'), 0.0))
        for op in R.marks:          # only iterations whose sections all ran on the device
            if op.start is None:
                out.pop(op.tag[1], None)
        return out
    acc = {}
    bad = set()
    open_ = {}
    for op in R.marks:
        be, it, ph = op.tag
        if op.start is None:
            bad.add(it)
            continue
        if be == 'b':
            open_[(it, ph)] = op.start
        else:
            d = acc.setdefault(it, {})
            d[ph] = d.get(ph, 0.0) + op.start - open_.pop((it, ph))
    for it, d in acc.items():
        if it in bad:
            continue
        out[it] = (d.get('forward', 0.0), d.get('backward', 0.0), d.get('optimizer', 0.0))
    return out


# --------------------------------------------------------------------------
# the generator's own checks


def sanity(J, S, sc, V, truth):
    """Checks on the simulated job and the probe view; returns (facts, errors)."""
    facts, errs = {}, []
    T_END = float(sc['duration'])
    coll = np.nonzero(~V.p2p)[0]
    # 1. collective instances: all members, same time of completion, after the last arrival
    key = V.comm[coll] * (1 << 32) + V.seq[coll]
    o = np.argsort(key, kind='stable')
    ks = key[o]
    ci = coll[o]
    uk, st, cnt = np.unique(ks, return_index=True, return_counts=True)
    nr = V.nranks[ci[st]]
    done = ~np.isnan(V.t_de[ci])
    ndone = np.add.reduceat(done.astype(int), st)
    partial = (ndone > 0) & ((ndone < cnt) | (cnt != nr))
    if partial.any():
        errs.append('%d collective instances completed on some members only' % partial.sum())
    de = np.where(done, V.t_de[ci], np.nan)
    ds = V.t_ds[ci]
    full = ndone == cnt
    with np.errstate(invalid='ignore'):
        spread = np.fmax.reduceat(np.nan_to_num(de, nan=-1e9), st) - np.fmin.reduceat(np.nan_to_num(de, nan=1e9), st)
        late = np.fmax.reduceat(np.nan_to_num(ds, nan=-1e9), st) - np.fmin.reduceat(np.nan_to_num(de, nan=1e9), st)
    sp = spread[full & (ndone > 0)]
    facts['coll_instances'] = int(len(uk))
    facts['coll_completion_spread_max_us'] = round(float(sp.max()) * 1e6, 1) if len(sp) else None
    if len(sp) and sp.max() > (J.coll_jitter + 1e-6):
        errs.append('collective completion spread %.1f us' % (sp.max() * 1e6))
    lt = late[full & (ndone > 0)]
    if len(lt) and lt.max() > 0:
        errs.append('a collective completed before its last member arrived')
    # same view in the probe's times (enq: poll grid)
    ev = V.end[ci]
    with np.errstate(invalid='ignore'):
        psp = np.fmax.reduceat(np.nan_to_num(ev, nan=-1e9), st) - np.fmin.reduceat(np.nan_to_num(ev, nan=1e9), st)
    psp = psp[full & (ndone > 0)]
    facts['probe_t_end_spread_max_ms'] = round(float(psp.max()) * 1e3, 3) if len(psp) else None
    # 2. per (rank, comm) seqs contiguous from 0
    gk = V.gid
    o = np.lexsort((V.seq, gk))
    g2, s2 = gk[o], V.seq[o]
    firsts = np.concatenate([[True], np.diff(g2) != 0])
    expect = np.arange(len(o)) - np.maximum.accumulate(np.where(firsts, np.arange(len(o)), 0))
    if (s2 != expect).any():
        errs.append('seq numbers not contiguous from 0 on some (rank, comm)')
    # members of a comm: seqs entered differ only by what is in flight
    # 3. p2p pairs
    pi = np.nonzero(V.p2p)[0]
    if len(pi):
        snd = pi[V.op[pi] == SEND]
        rcv = pi[V.op[pi] == RECV]
        ks_ = {(int(V.comm[i]), int(V.rank[i]), int(V.peer_g[i]), int(V.seq[i])): i for i in snd.tolist()}
        bad = 0
        unmatched_done = 0
        for i in rcv.tolist():
            j = ks_.get((int(V.comm[i]), int(V.peer_g[i]), int(V.rank[i]), int(V.seq[i])))
            if j is None:
                if not np.isnan(V.t_de[i]):
                    unmatched_done += 1
                continue
            a, b = V.t_de[i], V.t_de[j]
            if np.isnan(a) != np.isnan(b):
                bad += 1
            elif not np.isnan(a):
                if abs(a - b) > 1e-5 or a < max(V.t_ds[i], V.t_ds[j]):
                    bad += 1
        facts['p2p_pairs'] = int(len(rcv))
        if bad or unmatched_done:
            errs.append('p2p pairs inconsistent: %d, recv completed without send: %d' % (bad, unmatched_done))
    # 4. iterations
    nits = [sum(1 for v in R.iters.values() if v[1] is not None and v[1] <= T_END) for R in S.ranks]
    facts['iterations_min_max'] = [min(nits), max(nits)]
    # 5. truth-specific
    kind = truth['kind']
    ex = V.exit[V.rank]
    pend_at = lambda T: (V.ent_ok & (V.ent_obs <= T) & ~(V.end_ok & (V.end_obs <= T)))
    if kind in ('healthy', 'info'):
        stuck = V.ent_ok & (V.ent_obs <= T_END - 4.0) & ~(V.end_ok & (V.end_obs <= T_END))
        if kind == 'healthy' and stuck.any():
            errs.append('healthy job has %d calls entered before end-4s and never completed' % stuck.sum())
        if kind == 'healthy' and min(nits) < 10:
            errs.append('too few iterations')
    if kind == 'hang':
        c = truth['culprits'][0]
        Tc = min(T_END, float(V.exit.min()) - 0.01)
        pend = pend_at(Tc)
        mine = pend & (V.rank == c)
        if mine.any():
            errs.append('culprit %d is inside %d call(s) at %.1fs: not a root' % (c, mine.sum(), Tc))
        # victims: pending calls that wait for the culprit (it never entered that instance / posted that peer op)
        vic = set()
        for i in np.nonzero(pend & (V.rank != c))[0].tolist():
            cm = J.comms[int(V.comm[i])]
            if c not in cm.crank:
                continue
            if V.p2p[i]:
                if int(V.peer_g[i]) != c:
                    continue
                back = RECV if V.op[i] == SEND else SEND
                n_c = S.ranks[c].p2p_seq.get((int(V.comm[i]), int(V.rank[i]), back), 0)
                if n_c <= V.seq[i]:
                    vic.add(int(V.rank[i]))
            else:
                if S.ranks[c].coll_seq.get(int(V.comm[i]), 0) <= V.seq[i]:
                    vic.add(int(V.rank[i]))
        facts['direct_waiters'] = sorted(vic)
        if not vic:
            errs.append('no rank waits in a call the culprit never entered')
        npend_ranks = len(set(V.rank[pend].tolist()))
        facts['ranks_inside_a_call_at_check'] = npend_ranks
        # frozen: nothing completes in the last 5 s before the check
        recent = V.end_ok & (V.end_obs > Tc - 5) & (V.end_obs <= Tc)
        facts['completions_last5s_before_check'] = int(recent.sum())
        if truth.get('frozen_expected', True) and recent.any():
            errs.append('job not frozen 5 s before the check (%d completions)' % recent.sum())
    if kind == 'slow_rank':
        c = truth['culprits'][0]
        R = S.ranks[c]
        if R.slow_onset is None:
            errs.append('slow rank never became slow')
    return facts, errs


def verify_capture(path, job, J, check_upper=True):
    """Read the capture back as a consumer would and check it: framing, field
    rules, and that heartbeat counters agree with the delivered records."""
    errs = []
    cid2 = {J.comms[i].cid: i for i in range(len(J.comms))}
    recs = []
    rts = []
    hbs = []
    topics = {}
    last_ts = -1
    with open(path) as fh:
        for ln, line in enumerate(fh):
            m = json.loads(line)
            tp = m['topic']
            topics[tp] = topics.get(tp, 0) + 1
            if not isinstance(m['ts_ns'], int):
                errs.append('line %d: ts_ns not int' % ln)
            if m['ts_ns'] < last_ts:
                errs.append('line %d: not sorted' % ln)
            last_ts = m['ts_ns']
            if not m['key'].startswith(job):
                errs.append('line %d: key' % ln)
            if tp == 'cw.calls.v1':
                b = base64.b64decode(m['value_b64'])
                magic, ver, size, count, res = BATCH_HDR.unpack_from(b)
                if magic != b'CWB1' or ver != 1 or size != 64 or res != 0 or len(b) != 16 + 64 * count or count == 0:
                    errs.append('line %d: bad batch header' % ln)
                    continue
                a = np.frombuffer(b, REC, count, 16)
                kc = int(m['key'].split('/')[1], 16)
                if (a['comm'] != kc).any():
                    errs.append('line %d: record comm differs from key' % ln)
                recs.append(a)
                rts.append(np.full(count, m['ts_ns'], np.int64))
            elif tp == 'cw.progress.v1':
                v = m['value']
                if v['comm'] != m['key'].split('/')[1]:
                    errs.append('line %d: heartbeat comm' % ln)
                for rr in v['ranks']:
                    hbs.append((v['ts_ns'], rr['rank'], cid2[int(v['comm'], 16)], rr['started'], rr['completed']))
            elif tp in ('cw.topology.v1', 'cw.steps.v1', 'cw.hw.v1'):
                v = m['value']
                if v.get('job') != job or v.get('v') != 1:
                    errs.append('line %d: job/v' % ln)
            else:
                errs.append('line %d: topic %s' % (ln, tp))
    a = np.concatenate(recs)
    ts = np.concatenate(rts)
    calls = a['kind'] == K_CALL
    if not np.isin(a['kind'], [1, 2, 3]).all():
        errs.append('bad kind')
    comp = (a['flags'] & F_COMPLETED) != 0
    if (((a['t_end_ns'] != 0) != comp) & calls).any():
        errs.append('t_end_ns set iff COMPLETED violated')
    if (comp & calls & (a['t_end_ns'] < a['t_start_ns'])).any():
        errs.append('t_end < t_start')
    # heartbeat lower bound: every record delivered (message ts <= heartbeat ts) is counted
    coll = calls & ~np.isin(a['op'], [SEND, RECV])
    t_last = int(ts.max()) if len(ts) else 0
    cidx = np.array([cid2[int(x)] for x in a['comm']], np.int64) if len(a) else np.zeros(0, np.int64)
    H = np.array(hbs, np.int64).reshape(-1, 5)
    viol_lo = viol_hi = 0
    nchk = 0
    if len(H):
        for (r, c) in set(zip(H[:, 1].tolist(), H[:, 2].tolist())):
            hm = (H[:, 1] == r) & (H[:, 2] == c)
            h = H[hm]
            m = coll & (a['rank'] == r) & (cidx == c)
            o = np.argsort(ts[m], kind='stable')
            t_r = ts[m][o]
            s_r = a['seq'][m][o].astype(np.int64)
            c_r = np.where(comp[m][o], s_r, -1)
            if len(t_r):
                smax = np.maximum.accumulate(s_r)
                cmax = np.maximum.accumulate(c_r)
            for (hts, _, _, hs, hc) in h.tolist():
                nchk += 1
                k = np.searchsorted(t_r, hts, 'right') if len(t_r) else 0
                ds = int(smax[k - 1]) if k else -1
                dc = int(cmax[k - 1]) if k else -1
                if hs < ds or hc < dc:
                    viol_lo += 1
                if check_upper and hts <= t_last - 400_000_000:
                    k2 = np.searchsorted(t_r, hts + 300_000_000, 'right') if len(t_r) else 0
                    us = int(smax[k2 - 1]) if k2 else -1
                    uc = int(cmax[k2 - 1]) if k2 else -1
                    if hs > us or hc > uc:
                        viol_hi += 1
    if viol_lo:
        errs.append('%d heartbeats behind delivered records' % viol_lo)
    if viol_hi:
        errs.append('%d heartbeats ahead of records delivered within 0.3 s' % viol_hi)
    return {'topics': topics, 'records': int(len(a)), 'heartbeat_rank_checks': nchk}, errs


# --------------------------------------------------------------------------
# scenarios


def P_lastb(j):
    return lambda ins: ins[0] == 'K' and ins[3][1] == 'backward' and ins[3][4] and ins[3][3] == j


def P_fwd(ins):
    return ins[0] == 'K' and ins[3][1] == 'forward'


def P_anyk(ins):
    return ins[0] == 'K'


def P_steady_b(ins):
    return ins[0] == 'K' and ins[3][1] == 'backward' and ins[3][3] == 0 and not ins[3][4]


def P_gloo_bucket(j):
    return lambda ins: ins[0] == 'BC' and ins[4][0] == 'bucket' and ins[4][2] == j


MEG = dict(tp=4, pp=2, dp=4, M=8, f_ms=40, overlap=True, nl=2, nb=4, duration=60, stage_factor=[1.0, 1.04])
ILV = dict(tp=2, pp=4, dp=4, M=8, vp=2, nl=1, nb=4, f_ms=25, overlap=False, duration=50,
           stage_factor=[1.0, 1.0, 1.0, 1.05])
PPL = dict(tp=1, pp=8, dp=4, M=8, f_ms=20, overlap=True, nl=1, nb=2, duration=50)
CPJ = dict(tp=2, pp=1, dp=8, cp=2, M=2, f_ms=100, overlap=True, nl=2, nb=2, duration=50, phases='compute')
MOE = dict(ep=8, nrep=4, M=4, L=2, attn_ms=10, expert_ms=20, duration=60, route=(0.7, 1.3), phases='wall')
GLO = dict(n=32, f_ms=150, b_ms=300, nb=4, duration=60, opt_ms=20, dl_ms=8)
SCALE = dict(tp=8, pp=4, dp=16, M=4, f_ms=110, overlap=True, nl=1, nb=2, duration=32, it_sigma=0.03,
             hiccup=dict(p=0.01, lo=0.05, hi=0.3), stage_factor=[1.0, 1.0, 1.0, 1.08])


def D(base, **kw):
    d = dict(base)
    d.update(kw)
    return d


SCENARIOS = [
    # 1. two NCCL streams per rank (overlap_grad_reduce: DP reduce-scatter on a 2nd stream)
    dict(name='s01a_2stream_healthy_enq', build='megatron', cfg=MEG, probe='enq', kind='healthy', hw=True,
         desc='Megatron TP4 PP2 DP4, DP buckets on a 2nd stream overlapping backward; host-enqueue probe'),
    dict(name='s01b_2stream_healthy_gpu', build='megatron', cfg=MEG, probe='gpu', kind='healthy', hw=True,
         desc='same job, GPU-timed probe'),
    dict(name='s01c_2stream_hang_enq', build='megatron', cfg=MEG, probe='enq', kind='hang',
         hang=dict(rank=13, t=30.0, pred=P_lastb(2)),
         desc='rank 13 (tp1 pp1 dp1) host stops enqueueing mid-backward after 2 of 4 DP buckets; host-enqueue probe'),
    dict(name='s01d_2stream_slow15_gpu', build='megatron', cfg=D(MEG, slow=dict(ranks=[22], t=25.0, factor=1.5)),
         probe='gpu', kind='slow_rank', culprits=[22],
         desc='rank 22 (tp2 pp1 dp2) computes 1.5x slower from 25 s; GPU-timed'),
    # 2. interleaved (virtual) pipeline
    dict(name='s02a_interleaved_healthy_gpu', build='megatron', cfg=ILV, probe='gpu', kind='healthy',
         desc='TP2 PP4 DP4, 2 model chunks per rank (interleaved 1F1B), GPU-timed'),
    dict(name='s02b_interleaved_slow_mid_gpu', build='megatron', cfg=D(ILV, slow=dict(ranks=[13], t=20.0, factor=1.5)),
         probe='gpu', kind='slow_rank', culprits=[13],
         desc='rank 13 (stage 2 of 4, tp1 dp1) 1.5x slower from 20 s'),
    dict(name='s02c_interleaved_hang_first_enq', build='megatron', cfg=ILV, probe='enq', kind='hang',
         hang=dict(rank=16, t=25.0, pred=P_fwd),
         desc='rank 16 (first stage, tp0 dp2) host stops before a forward chunk; host-enqueue probe'),
    # 3. lossy probes (ring overflow)
    dict(name='s03a_lossy_healthy_gpu', build='megatron', cfg=MEG, probe='gpu', kind='healthy', drop=0.02,
         desc='2% of call records dropped at random (entry without completion or the reverse); heartbeats right'),
    dict(name='s03b_lossy_hang_gpu', build='megatron', cfg=MEG, probe='gpu', kind='hang', drop=0.02,
         hang=dict(rank=5, t=30.0, pred=P_anyk),
         desc='rank 5 (tp1 pp1 dp0) host stops; 2% of records dropped'),
    dict(name='s03c_lossy_healthy_enq', build='megatron', cfg=MEG, probe='enq', kind='healthy', drop=0.03,
         desc='3% of records dropped, host-enqueue probe'),
    # 4. agent restart
    dict(name='s04_agent_restart_gpu', build='megatron', cfg=D(ILV, vp=1, M=8, nl=2, overlap=True), probe='gpu',
         kind='healthy', agent_gap=(2, 25.0, 29.0),
         desc='node 2 agent sends nothing for 4 s (25-29 s) then delivers its backlog; ranks kept training'),
    # 5. out of order + duplicates
    dict(name='s05_ooo_dup_healthy_enq', build='megatron', cfg=D(MEG, dp=2), probe='enq', kind='healthy',
         ooo=0.03, dup=0.02,
         desc='3% of entry records delivered 1-2 batches after their completion record; 2% of records sent twice'),
    # 6. GC, checkpoints
    dict(name='s06a_gc_sync_healthy_gpu', build='megatron', cfg=D(MEG, duration=70, gc=dict(first=10, every=20, lo=0.3, hi=0.8)),
         probe='gpu', kind='healthy',
         desc='every rank pauses 0.3-0.8 s (GC) at the start of the same iteration every 20 iterations'),
    dict(name='s06b_ckpt_idle_healthy_enq', build='megatron', cfg=D(MEG, duration=75, ckpt=dict(it=22, secs=15.0, mode='all_idle')),
         probe='enq', kind='healthy',
         desc='every rank writes its checkpoint shard for 15 s between two iterations (nobody inside a call)'),
    dict(name='s06c_ckpt_rank0_barrier_info_gpu', build='megatron', cfg=D(MEG, duration=75, ckpt=dict(it=22, secs=15.0, mode='rank0')),
         probe='gpu', kind='info',
         desc='INFORMATIONAL, not scored: rank 0 alone writes 15 s while the 31 others wait in a barrier '
              '(indistinguishable from a hang of rank 0 until it ends; see README)'),
    # 7. expert parallel, uneven routing
    dict(name='s07a_ep_healthy_gpu', build='moe', cfg=MOE, probe='gpu', kind='healthy',
         desc='MoE EP8 x 4, all-to-all; expert compute per rank varies +-30% per iteration at random'),
    dict(name='s07b_ep_slow14_gpu', build='moe', cfg=D(MOE, slow=dict(ranks=[11], t=25.0, factor=1.4)),
         probe='gpu', kind='slow_rank', culprits=[11],
         desc='same, rank 11 persistently 1.4x from 25 s'),
    # 8. intermittent slow rank
    dict(name='s08a_dataloader_every4_gpu', build='megatron',
         cfg=D(MEG, tp=2, pp=2, dp=8, intermittent=dict(ranks=[13], t=20.0, every=4, stall_s=1.15)),
         probe='gpu', kind='slow_rank', culprits=[13],
         desc='rank 13 (tp1 pp0 dp3) data loader stalls one iteration time on every 4th iteration from 20 s'),
    dict(name='s08b_random_hiccups_healthy_gpu', build='megatron',
         cfg=D(MEG, tp=2, pp=2, dp=8, hiccup=dict(p=0.02, lo=1.05, hi=1.25, cap=2)),
         probe='gpu', kind='healthy',
         desc='every rank has the same one-iteration data-loader stall at random iterations (p=2%, at most 2 per rank)'),
    # 9. clock drift
    dict(name='s09a_drift_healthy_gpu', build='megatron', cfg=dict(tp=4, pp=1, dp=8, M=4, f_ms=60, overlap=True, nl=2, nb=4,
                                                               duration=60, phases='compute'),
         probe='gpu', kind='healthy', clock_off_ms=30.0, drift_ppm=50.0, hw=True,
         desc='TP4 DP8; node clocks +-30 ms apart, drifting +-50 ppm'),
    dict(name='s09b_drift_slow13_gpu', build='megatron', cfg=dict(tp=4, pp=1, dp=8, M=4, f_ms=60, overlap=True, nl=2, nb=4,
                                                              duration=60, phases='compute',
                                                              slow=dict(ranks=[19], t=25.0, factor=1.3)),
         probe='gpu', kind='slow_rank', culprits=[19], clock_off_ms=30.0, drift_ppm=50.0,
         desc='same, rank 19 1.3x slower from 25 s'),
    # 10. scale
    dict(name='s10a_scale512_healthy_gpu', build='megatron', cfg=SCALE, probe='gpu', kind='healthy',
         desc='512 ranks TP8 PP4 DP16, 3% iteration noise, 1% random 50-300 ms host hiccups, last stage 8% heavier'),
    dict(name='s10b_scale512_hang_gpu', build='megatron', cfg=SCALE, probe='gpu', kind='hang',
         hang=dict(rank=300, t=14.0, pred=P_anyk),
         desc='same, rank 300 (tp4 pp1 dp9) host stops at 14 s'),
    dict(name='s10c_scale256_slow15_gpu', build='megatron', cfg=D(SCALE, pp=2, M=6, f_ms=90, stage_factor=[1.0, 1.05],
                                                                slow=dict(ranks=[133], t=14.0, factor=1.5)),
         probe='gpu', kind='slow_rank', culprits=[133],
         desc='256 ranks TP8 PP2 DP16, rank 133 (tp5 pp0 dp8) 1.5x slower from 14 s'),
    # 11. watchdog abort after a hang
    dict(name='s11_watchdog_abort_enq', build='megatron', cfg=D(MEG, duration=80), probe='enq', kind='hang',
         hang=dict(rank=26, t=20.0, pred=P_fwd), abort_after=40.0,
         desc='rank 26 host stops at 20 s; 40 s later every process exits (COMPLETION_LOST, COMM_DESTROY, '
              'heartbeats flag exited then stop)'),
    # 12. p2p hang
    dict(name='s12_p2p_hang_gpu', build='megatron', cfg=PPL, probe='gpu', kind='hang',
         hang=dict(rank=11, t=25.0, pred=P_steady_b),
         desc='PP8 DP4 (no TP): rank 11 (stage 3, dp1) host stuck between send_forward_recv_backward and '
              'send_backward_recv_forward: its next send is never posted'),
    # 13. context parallel
    dict(name='s13a_cp_healthy_gpu', build='megatron', cfg=CPJ, probe='gpu', kind='healthy',
         desc='TP2 CP2 DP8: ring attention send/recv inside each layer'),
    dict(name='s13b_cp_slow14_gpu', build='megatron', cfg=D(CPJ, slow=dict(ranks=[10], t=20.0, factor=1.4)),
         probe='gpu', kind='slow_rank', culprits=[10],
         desc='rank 10 (tp0 cp1 dp2) 1.4x slower from 20 s'),
    # 14. gloo, host-blocking probe
    dict(name='s14a_gloo_healthy_blk', build='gloo', cfg=GLO, probe='blk', kind='healthy',
         desc='32-rank gloo DDP (CPU), 4 blocking all-reduce buckets inside backward'),
    dict(name='s14b_gloo_hang_blk', build='gloo', cfg=GLO, probe='blk', kind='hang',
         hang=dict(rank=21, t=25.0, pred=P_gloo_bucket(2)),
         desc='rank 21 deadlocks in Python before bucket 2 of its backward'),
    dict(name='s14c_gloo_slow15_blk', build='gloo', cfg=D(GLO, slow=dict(ranks=[9], t=20.0, factor=1.5)),
         probe='blk', kind='slow_rank', culprits=[9],
         desc='rank 9 1.5x slower from 20 s'),
]


def heavier(J, S, onset, T_END):
    """Ranks whose own compute per iteration (kernel time, excluding every
    wait) is >= 10% above the median of the ranks doing the same work, after
    the onset (or over the whole run): must be exactly the slow culprits."""
    t0 = onset if onset is not None else 0.0
    per = {}
    for R in S.ranks:
        its = [it for it, v in R.iters.items() if v[0] >= t0 and v[1] is not None and v[1] <= T_END]
        if not its:
            continue
        per[R.r] = sum(v for (it, ph), v in R.ksum.items() if it in its) / len(its)
    if J.gloo:
        groups = {0: list(per)}
    else:
        groups = {}
        for r in per:
            groups.setdefault(J.coords[r]['pp'], []).append(r)
    out = {}
    for g, rs in groups.items():
        med = float(np.median([per[r] for r in rs]))
        for r in rs:
            if per[r] >= 1.10 * med:
                out[str(r)] = round(per[r] / med, 3)
    return out


def build(spec, seed):
    b = spec['build']
    cfg = dict(spec['cfg'])
    if b == 'megatron':
        return build_megatron(spec['name'], seed, cfg)
    if b == 'moe':
        return build_moe(spec['name'], seed, cfg)
    return build_gloo(spec['name'], seed, cfg)


def run_scenario(spec, idx, outdir, base_seed=1000):
    t_wall = time.time()
    seed = base_seed + idx * 17
    J = build(spec, seed)
    sc = dict(spec)
    sc['duration'] = J.cfg['duration']
    sc['job'] = 'rw-' + spec['name'].split('_')[0]
    if 'hang' in spec:
        h = spec['hang']
        J.hangs = [dict(rank=h['rank'], t=h['t'], pred=h['pred'])]
    S = Sim(J)
    S.run()
    rnd = np.random.default_rng(seed + 1)
    V = probe_view(J, S, sc, rnd)
    truth = {'scenario': spec['name'], 'job': sc['job'], 'kind': spec['kind'], 'culprits': [],
             'onset_ns': None, 'probe': spec['probe'], 'ranks': J.n, 'duration_s': sc['duration'],
             'desc': spec['desc']}
    onset = None
    if spec['kind'] == 'hang':
        c = spec['hang']['rank']
        R = S.ranks[c]
        if not R.hung:
            raise RuntimeError('%s: hang never triggered' % spec['name'])
        dev_idle = max([R.sfree[s] for s in range(J.nstreams)] +
                       [x for x in V.end_obs[(V.rank == c) & ~np.isnan(V.end_obs)].tolist()] + [R.stop_t])
        onset = dev_idle
        truth['culprits'] = [c]
        truth['host_stop_s'] = round(R.stop_t, 4)
        truth['onset_s'] = round(onset, 4)
        if spec.get('abort_after'):
            X = onset + spec['abort_after']
            for r in range(J.n):
                V.exit[r] = X + (1.0 if r == c else float(rnd.uniform(0, 0.5)))
            sc['destroy'] = [(r, float(V.exit[r])) for r in range(J.n) if r != c]
            sc['lost_at_exit'] = {'killed': [c]}
            truth['exit_ns'] = T0_NS + int(X * 1e9)
            truth['expect_resolved'] = True
    elif spec['kind'] == 'slow_rank':
        c = spec['culprits'][0]
        onset = S.ranks[c].slow_onset
        truth['culprits'] = [c]
        truth['onset_s'] = None if onset is None else round(onset, 4)
        sl = J.cfg.get('slow') or J.cfg.get('intermittent')
        truth['factor'] = sl.get('factor', 'stall %.2fs every %d iterations' % (sl.get('stall_s', 0), sl.get('every', 0)))
    if onset is not None:
        truth['onset_ns'] = T0_NS + int(round(onset * 1e9))
    durs = [v[1] - v[0] for R in S.ranks for (it, v) in R.iters.items()
            if v[1] is not None and (onset is None or v[1] < onset) and v[1] <= sc['duration']]
    truth['iter_s'] = round(float(np.median(durs)), 4) if durs else None
    path = os.path.join(outdir, spec['name'] + '.cwcap')
    stats, _ = emit(J, S, sc, V, path, rnd)
    facts, errs = sanity(J, S, sc, V, truth)
    vf, verrs = verify_capture(path, sc['job'], J,
                               check_upper=not (spec.get('drop') or spec.get('agent_gap') or spec.get('ooo')))
    truth['generator'] = {'stats': stats, 'facts': facts, 'verify': vf, 'errors': errs + verrs,
                          'seconds': round(time.time() - t_wall, 1)}
    if spec.get('agent_gap'):
        truth['agent_gap'] = spec['agent_gap']
    st = {R.r: R.stalls for R in S.ranks if getattr(R, 'stalls', None)}
    if st:
        truth['host_stalls'] = st        # rank -> [(iteration, host time s, stall s)]
    gcs = sorted({x[1] for R in S.ranks for x in getattr(R, 'gc', [])})
    if gcs:
        truth['gc_pause_starts_s'] = [gcs[0]] + [g for a, g in zip(gcs, gcs[1:]) if g - a > 2]
    hv = heavier(J, S, onset if spec['kind'] == 'slow_rank' else None, sc['duration'])
    truth['generator']['facts']['heavier_than_peers'] = hv
    want = set(map(str, truth['culprits'])) if (spec['kind'] == 'slow_rank' and J.cfg.get('slow')) else set()
    if set(hv) != want:
        truth['generator']['errors'].append('ranks computing >=10%% more than their peers %s, expected %s'
                                            % (sorted(hv), sorted(want)))
    truth['comms'] = {c.hex(): {'name': c.name, 'members': c.members if c.n <= 64 else c.n}
                      for c in J.comms}
    truth['coords'] = {str(r): J.coords[r] for r in truth['culprits']}
    with open(os.path.join(outdir, spec['name'] + '.truth.json'), 'w') as fh:
        json.dump(truth, fh, indent=1)
    return truth


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default='caps')
    ap.add_argument('--list', action='store_true')
    ap.add_argument('--seed', type=int, default=1000, help='base seed (another draw of every scenario)')
    ap.add_argument('names', nargs='*')
    a = ap.parse_args()
    if a.list:
        for s in SCENARIOS:
            print(s['name'], '-', s['desc'])
        return 0
    os.makedirs(a.out, exist_ok=True)
    bad = 0
    for i, s in enumerate(SCENARIOS):
        if a.names and not any(s['name'].startswith(n) for n in a.names):
            continue
        t = run_scenario(s, i, a.out, a.seed)
        g = t['generator']
        print('%-36s %4d ranks %7d records %6d lines iters %s  %5.1fs  %s' % (
            s['name'], t['ranks'], g['stats']['call_records'], g['stats']['lines'],
            g['facts']['iterations_min_max'], g['seconds'],
            'ERRORS: ' + '; '.join(g['errors']) if g['errors'] else 'checks ok'), flush=True)
        bad += bool(g['errors'])
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
