#!/usr/bin/env python3
"""quirks: a sixth independent traffic generator for commwatch (probe and job quirks).

Written from shared/spec/wire-v1.md, shared/DOMAIN.md, the top-level README and the READMEs of
tests/independent/{,realworld,ops,fleet}; never from the detector's code nor the other generators' code.
numpy and the standard library only.

    gen.py --out DIR --seed N [PREFIX ...]     write DIR/NAME.cwcap and DIR/NAME.truth.json
    gen.py --list                              list the scenarios

Model (a dataflow simulation, not a timeline script):
- Every rank is a host thread running a program (a Python generator of instructions) that launches
  kernels, NCCL collectives, grouped send/recv (ncclGroupStart/End: one kernel, several p2p ops) and
  CUDA-graph replays (one host launch, many device ops) onto 1-4 in-order device streams. Streams wait
  on each other only through recorded events. The host runs ahead until 24 launches are outstanding,
  syncs at the end of each iteration, and may wait on an event (FSDP's all-gather rate limit).
- A collective (comm, seq) completes on every member at the last device arrival plus a transfer time
  (bandwidth intra-node 150 GB/s, inter-node 22 GB/s, /factor on a degraded NIC), members at most
  12 us apart. A send/recv pair completes together; a p2p group kernel ends when all its pairs have.
- Kernel noise: 1 % per kernel, 1.5 % per rank-iteration. Slowness multiplies one rank's compute
  kernels (never its communication) inside time windows. A hang stops a host (its device drains what
  was queued) or leaves a GPU kernel running forever; a node crash stops host, device and agent.
- Probes: `gpu` (the NCCL profiler plugin: GPU_TIMED device times, entry and completion records learnt
  0.5-3 ms late, NCCL's per-op counter in aux, 0 and GRAPH_CAPTURED for graph replays) and `enq` (a
  PyTorch hook: ENQUEUED host enqueue times, completion observed by a 10 ms event poller, aux 0).
- Agents: call batches per (node, comm) every 200 ms, heartbeats per (node, comm) every 1 s with the
  probe's own counters (and p2p counters), topology once per rank with coords, steps per rank-iteration
  (phases are spans on the compute stream, waits included), NVML samples every 5 s. Node clocks: offset
  +-5 ms, drift +-5 ppm.
Simplifications: no SM contention between overlapping streams; no NCCL channels/protocols; initial
communicator creation is not simulated (COMM_INIT 1 s after the job starts) except the lazy
initialisation in q16; transfers do not depend on concurrent traffic.
"""
import argparse
import base64
import hashlib
import json
import math
import os
import sys
from collections import deque, defaultdict

import numpy as np

T0_NS = 1767225600_000000000
INF = math.inf
REC = np.dtype([('kind', 'u1'), ('op', 'u1'), ('flags', '<u2'), ('rank', '<i4'), ('comm', '<u8'),
                ('seq', '<u8'), ('t_start_ns', '<i8'), ('t_end_ns', '<i8'), ('bytes', '<u8'),
                ('comm_rank', '<i4'), ('peer', '<i4'), ('nranks', '<u4'), ('aux', '<u4')])
assert REC.itemsize == 64
F_COMPLETED, F_GPU, F_GRAPH, F_ENQ, F_LOST = 1, 2, 4, 8, 16
ALLREDUCE, ALLGATHER, REDUCESCATTER, SEND, RECV = 1, 2, 3, 6, 7
LAUNCH = {'K': 6e-6, 'C': 10e-6, 'P': 15e-6, 'GR': 25e-6}
LAT = 5e-6          # launch-to-device latency
QDEPTH = 24         # outstanding host launches before the host blocks


def h64(*parts):
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], 'little')


# ----------------------------------------------------------------------------------------------
# job description

class Comm:
    def __init__(self, name, cid, members, node_of):
        self.name, self.id, self.members = name, cid, list(members)
        self.crank = {g: i for i, g in enumerate(self.members)}
        self.n = len(self.members)
        self.nodes = sorted({node_of[g] for g in self.members})


class Job:
    """One incarnation of a job (one world): ranks, nodes, comms, programs, faults."""

    def __init__(self, jid, world, nodes_of, probe_of, t_start, t_stop, seed):
        self.jid, self.W, self.node_of, self.probe_of = jid, world, nodes_of, probe_of
        self.t_start, self.t_stop, self.seed = t_start, t_stop, seed
        self.comms = {}
        self.rank_comms = defaultdict(list)
        self.coords = {}
        self.slow = defaultdict(list)      # rank -> [(t0, t1, factor)]
        self.stuck = {}                    # rank -> time: first compute kernel starting after it never ends
        self.host_stop = {}                # rank -> time the host stops
        self.dead_at = {}                  # rank -> node crash time (device and agent die)
        self.cut = {}                      # rank -> no records after (killed by the launcher)
        self.teardown = None               # time survivors' agents write COMPLETION_LOST + COMM_DESTROY
        self.nic_slow = {}                 # node -> (t0, bandwidth divisor)
        self.throttle = []                 # (rank, t0, t1) NVML shows thermal throttling
        self.iter0 = 0
        self.prog = None
        self.nstreams = 1
        self.init_t = t_start + 1.0

    def add_comm(self, name, members):
        c = Comm(name, h64(self.seed, self.jid, self.t_start, name), members, self.node_of)
        self.comms[name] = c
        for g in members:
            self.rank_comms[g].append(name)
        return c

    def mult(self, r, t):
        m = 1.0
        for (a, b, f) in self.slow.get(r, ()):
            if a <= t < b:
                m *= f
        return m

    def xfer(self, comm, opc, nbytes, t):
        return self.xfer_nodes(comm.nodes, comm.n, opc, nbytes, t)

    def xfer_nodes(self, nodes, n, opc, nbytes, t):
        nn = len(nodes)
        bw = 150e9 if nn == 1 else 22e9
        if nn > 1:
            for nd in nodes:
                if nd in self.nic_slow and t >= self.nic_slow[nd][0]:
                    bw = 22e9 / self.nic_slow[nd][1]
        if opc == ALLREDUCE:
            vol = 2.0 * (n - 1) / n * nbytes
        elif opc in (ALLGATHER, REDUCESCATTER):
            vol = (n - 1) / n * nbytes
        else:
            vol = nbytes
        return 12e-6 + (6e-6 * math.log2(max(n, 2)) if nn > 1 else 0) + vol / bw


# ----------------------------------------------------------------------------------------------
# simulation

class Op:
    __slots__ = ('r', 's', 'kind', 'dur', 'tag', 'it', 'enq', 'deps', 'start', 'end', 'items',
                 'pending', 'graph', 'pprev')

    def __init__(self, r, s, kind, dur, tag, it, enq, deps, graph):
        self.r, self.s, self.kind, self.dur, self.tag, self.it = r, s, kind, dur, tag, it
        self.enq, self.deps, self.graph = enq, deps, graph
        self.start = self.end = None
        self.items = None
        self.pending = 0
        self.pprev = None


class Item:
    """One NCCL call as the probe reports it."""
    __slots__ = ('r', 'comm', 'opc', 'seq', 'nbytes', 'crank', 'peer', 'nranks', 'aux', 'op', 'end',
                 'key')

    def __init__(self, r, comm, opc, seq, nbytes, crank, peer, nranks, aux, op, key):
        self.r, self.comm, self.opc, self.seq, self.nbytes = r, comm, opc, seq, nbytes
        self.crank, self.peer, self.nranks, self.aux, self.op, self.key = crank, peer, nranks, aux, op, key
        self.end = None


class RankState:
    def __init__(self, job, r, rng):
        self.r = r
        self.gen = job.prog(job, r)
        self.peek = None
        self.t = job.t_start + 2.0 + rng.uniform(0, 0.05)
        self.prev_end = [self.t] * job.nstreams
        self.q = [deque() for _ in range(job.nstreams)]
        self.last_op = [None] * job.nstreams
        self.launches = deque(maxlen=QDEPTH)
        self.marks = {}
        self.cseq = defaultdict(int)
        self.pseq = defaultdict(int)
        self.nccl = defaultdict(int)
        self.stop = min(job.host_stop.get(r, INF), job.t_stop + 3.0, job.dead_at.get(r, INF))
        self.halted = None
        self.items = []
        self.ops0 = []
        self.it_start = {}
        self.it_end = {}
        self.cur_it = None
        self.inits = []                    # (comm name, time) of lazily created comms
        self.stuck_t = None


class Sim:
    def __init__(self, job, seed):
        self.job = job
        self.rng = np.random.default_rng(seed)
        self.R = [RankState(job, r, np.random.default_rng([seed, r])) for r in range(job.W)]
        self.inst = {}
        self.pairs = {}
        self.init_rv = {}
        self.wl = deque(range(job.W))
        self.inq = [True] * job.W

    def wake(self, r):
        if not self.inq[r]:
            self.inq[r] = True
            self.wl.append(r)

    def run(self):
        while self.wl:
            r = self.wl.popleft()
            self.inq[r] = False
            self.advance(r)
        return self

    # device side ---------------------------------------------------------------------------
    def dev_start(self, op):
        job, r = self.job, op.r
        t = op.start
        if op.kind == 'K':
            if t == INF:
                op.end = INF
            elif r in job.stuck and t >= job.stuck[r]:
                op.end = INF
                if self.R[r].stuck_t is None:
                    self.R[r].stuck_t = t
            else:
                op.end = t + op.dur * job.mult(r, t)
        elif op.kind == 'C':
            it = op.items[0]
            ent = self.inst.get(it.key)
            if ent is None:
                ent = self.inst[it.key] = [0, -INF, []]
            ent[0] += 1
            ent[1] = max(ent[1], t)
            ent[2].append(op)
            comm = job.comms[it.comm]
            if ent[0] == comm.n:
                end = ent[1] + job.xfer(comm, it.opc, it.nbytes, ent[1])
                if end != INF and any(end > job.dead_at.get(g, INF) for g in comm.members):
                    return
                for o in ent[2]:
                    o.end = end + (self.rng.uniform(0, 12e-6) if end != INF else 0)
                    o.items[0].end = o.end
                    self.wake(o.r)
                del self.inst[it.key]
        elif op.kind == 'P':
            op.pending = len(op.items)
            for it in op.items:
                ent = self.pairs.pop(it.key, None)
                if ent is None:
                    self.pairs[it.key] = it
                    continue
                comm = job.comms[it.comm]
                o2 = ent.op
                t0 = max(t, o2.start)
                x = job.xfer_nodes({job.node_of[it.r], job.node_of[ent.r]}, 2, SEND, it.nbytes, t0) \
                    if t0 != INF else 0
                end = t0 + x
                if end != INF and end > min(job.dead_at.get(it.r, INF), job.dead_at.get(ent.r, INF)):
                    continue
                it.end = end + self.rng.uniform(0, 5e-6)
                ent.end = end + self.rng.uniform(0, 5e-6)
                for o in (op, o2):
                    o.pending -= 1
                    if o.pending == 0:
                        o.end = max(i.end for i in o.items)
                        self.wake(o.r)

    def advance(self, r):
        job, R = self.job, self.R[r]
        dead = job.dead_at.get(r, INF)
        progressed = True
        while progressed:
            progressed = False
            for s in range(job.nstreams):
                q = R.q[s]
                while q:
                    op = q[0]
                    if op.start is None:
                        t = max(R.prev_end[s], op.enq + LAT)
                        ok = True
                        for d in op.deps:
                            if d.end is None:
                                ok = False
                                break
                            if d.end > t:
                                t = d.end
                        if not ok or t >= dead:
                            break
                        op.pprev = max(R.prev_end[s], op.enq + LAT)
                        op.start = t
                        self.dev_start(op)
                    if op.end is None:
                        break
                    if op.kind == 'K' and op.end > dead:
                        break
                    R.prev_end[s] = op.end
                    q.popleft()
                    progressed = True
            while self.host_step(R):
                progressed = True

    # host side -----------------------------------------------------------------------------
    def host_step(self, R):
        job = self.job
        if R.t >= R.stop:
            if R.halted is None:
                R.halted = R.t
            return False
        if R.peek is None:
            R.peek = next(R.gen)
        ins = R.peek
        k = ins[0]
        if k in ('K', 'C', 'P', 'GR'):
            if len(R.launches) == QDEPTH:
                o = R.launches[0]
                if o.end is None:
                    return False
                if o.end > R.t:
                    R.t = o.end
                if R.t >= R.stop:
                    return False
            if k == 'GR':
                last = None
                for sub in ins[1]:
                    last = self.make_op(R, sub, True)
            else:
                last = self.make_op(R, ins, False)
            R.launches.append(last)
            R.t += LAUNCH[k]
        elif k == 'H':
            R.t += ins[1]
        elif k == 'S':
            for o in R.last_op:
                if o is not None:
                    if o.end is None:
                        return False
                    if o.end > R.t:
                        R.t = o.end
        elif k == 'WAIT':
            o = R.marks.get(ins[1])
            if o is not None:
                if o.end is None:
                    return False
                R.t = max(R.t, o.end)
        elif k == 'IT':
            R.cur_it = ins[1]
            R.it_start[ins[1]] = R.t
        elif k == 'ITE':
            R.it_end[ins[1]] = R.t
        elif k == 'STOP':
            R.stop = R.t
            R.halted = R.t
            return False
        elif k == 'INIT':            # lazy, blocking communicator creation: a host-level rendezvous
            name = ins[1]
            rv = self.init_rv.setdefault(name, {'arr': {}, 'end': None})
            if R.r not in rv['arr']:
                rv['arr'][R.r] = R.t
                comm = job.comms[name]
                if len(rv['arr']) == comm.n:
                    rv['end'] = max(rv['arr'].values()) + 0.35
                    for g in comm.members:
                        self.wake(g)
            if rv['end'] is None:
                return False
            R.t = rv['end'] + self.rng.uniform(0, 2e-4)
            R.inits.append((name, R.t))
        R.peek = None
        return True

    def make_op(self, R, ins, graph):
        job = self.job
        k = ins[0]
        if k == 'K':
            _, s, dur, tag, mark, after = ins
            op = Op(R.r, s, 'K', dur, tag, R.cur_it, R.t, [R.marks[a] for a in after], graph)
        elif k == 'C':
            _, s, cname, opc, nbytes, tag, mark, after = ins
            comm = job.comms[cname]
            op = Op(R.r, s, 'C', 0.0, tag, R.cur_it, R.t, [R.marks[a] for a in after], graph)
            seq = R.cseq[cname]
            R.cseq[cname] += 1
            aux = 0
            if job.probe_of[R.r] == 'gpu' and not graph:
                R.nccl[(cname, opc)] += 1
                aux = R.nccl[(cname, opc)] & 0xffffffff
            op.items = [Item(R.r, cname, opc, seq, nbytes, comm.crank[R.r], -1, comm.n, aux, op,
                             (cname, seq))]
        else:                         # 'P': a group of sends/recvs, one kernel
            _, s, plist, tag = ins
            mark, after = None, ()
            op = Op(R.r, s, 'P', 0.0, tag, R.cur_it, R.t, [], graph)
            op.items = []
            for (opc, cname, peer, nbytes) in plist:
                comm = job.comms[cname]
                k2 = (cname, peer, opc)
                seq = R.pseq[k2]
                R.pseq[k2] += 1
                key = (cname, R.r, peer, seq) if opc == SEND else (cname, peer, R.r, seq)
                op.items.append(Item(R.r, cname, opc, seq, nbytes, comm.crank[R.r], comm.crank[peer],
                                     comm.n, 0, op, key))
        if k != 'P' and mark:
            R.marks[mark] = op
        R.q[op.s].append(op)
        R.last_op[op.s] = op
        if op.items:
            R.items.extend(op.items)
        if op.s == 0:
            R.ops0.append(op)
        return op


# ----------------------------------------------------------------------------------------------
# programs

def K(s, dur, tag, mark=None, after=()):
    return ('K', s, dur, tag, mark, tuple(after))


def C(s, cname, opc, nbytes, tag, mark=None, after=()):
    return ('C', s, cname, opc, nbytes, tag, mark, tuple(after))


def megatron_layout(job, TP, PP, DP, order='dp-pp-tp'):
    """rank = dp*(PP*TP) + pp*TP + tp (DOMAIN), or Megatron-core's tp-dp-pp: rank = tp + TP*(dp + DP*pp)."""
    def rank(tp, pp, dp):
        return dp * PP * TP + pp * TP + tp if order == 'dp-pp-tp' else tp + TP * (dp + DP * pp)
    for dp in range(DP):
        for pp in range(PP):
            for tp in range(TP):
                job.coords[rank(tp, pp, dp)] = {'tp': tp, 'pp': pp, 'dp': dp}
    if TP > 1:
        for dp in range(DP):
            for pp in range(PP):
                job.add_comm(f'tp{dp}.{pp}', [rank(t, pp, dp) for t in range(TP)])
    if PP > 1:
        for dp in range(DP):
            for tp in range(TP):
                job.add_comm(f'pp{dp}.{tp}', [rank(tp, p, dp) for p in range(PP)])
    if DP > 1:
        for pp in range(PP):
            for tp in range(TP):
                job.add_comm(f'dp{pp}.{tp}', [rank(tp, pp, d) for d in range(DP)])
    job.TP, job.PP, job.DP = TP, PP, DP
    job.rank_of = rank


def megatron_prog(job, r):
    """Megatron-style step: M micro-batches (1F1B with batched p2p when PP > 1), TP all-reduces after
    attention and MLP, distributed optimizer (DP reduce-scatter, optimizer, DP all-gather), sync.
    job.graph: each micro-batch's forward and backward is one CUDA-graph replay.
    job.overlap: DP gradient all-reduce buckets on stream 1 during the last micro-batch's backward."""
    c = job.coords[r]
    tp, pp, dp = c['tp'], c['pp'], c['dp']
    TP, PP, DP, M = job.TP, job.PP, job.DP, job.M
    rng = np.random.default_rng([job.seed, 7, r])
    tpc, ppc, dpc = f'tp{dp}.{pp}', f'pp{dp}.{tp}', f'dp{pp}.{tp}'
    prev = job.rank_of(tp, pp - 1, dp) if pp > 0 else None
    nxt = job.rank_of(tp, pp + 1, dp) if pp < PP - 1 else None
    stage_f = job.stage_factor(pp) if hasattr(job, 'stage_factor') else 1.0
    it = job.iter0
    while True:
        yield ('IT', it)
        yield ('H', rng.uniform(0.003, 0.006))
        vf = job.varlen[it % len(job.varlen)] if getattr(job, 'varlen', None) is not None else 1.0
        rf = (1 + rng.normal(0, 0.015)) * stage_f
        kf = job.kf * vf * rf
        act = int(job.act_bytes * vf)

        def kern(base, tag):
            return base * kf * (1 + rng.normal(0, 0.01))

        def fwd(mb):
            out = []
            for ch in range(job.nchunk):
                out.append(K(0, kern(1.0, 'f'), 'f'))
                if TP > 1:
                    out.append(C(0, tpc, ALLREDUCE, act, 'f'))
                out.append(K(0, kern(1.0, 'f'), 'f'))
                if TP > 1:
                    out.append(C(0, tpc, ALLREDUCE, act, 'f'))
            return [('GR', out)] if job.graph else out

        def bwd(mb, last):
            out = []
            for ch in reversed(range(job.nchunk)):
                out.append(K(0, kern(2.0, 'b'), 'b'))
                if TP > 1:
                    out.append(C(0, tpc, ALLREDUCE, act, 'b'))
                out.append(K(0, kern(2.0, 'b'), 'b', mark=f'g{it}.{ch}' if last and job.overlap else None))
                if TP > 1:
                    out.append(C(0, tpc, ALLREDUCE, act, 'b'))
                if last and job.overlap and DP > 1:
                    out.append(C(1, dpc, ALLREDUCE, job.dp_bytes // job.nchunk, 'b',
                                 mark=f'ar{it}.{ch}', after=[f'g{it}.{ch}']))
            return [('GR', out)] if job.graph else out

        def grp(*ops):
            pl = [(opc, ppc, peer, job.act_bytes) for (opc, peer) in ops if peer is not None]
            return [('P', 0, pl, 'p')] if pl else []

        if PP == 1:
            for mb in range(M):
                yield from fwd(mb)
                yield from bwd(mb, mb == M - 1)
        else:
            W = min(PP - pp - 1, M)
            Rm = M - W
            for i in range(W):
                yield from grp((RECV, prev))
                yield from fwd(i)
                yield from grp((SEND, nxt))
            if Rm > 0:
                yield from grp((RECV, prev))
            for i in range(Rm):
                yield from fwd(W + i)
                yield from grp((SEND, nxt), (RECV, nxt))
                yield from bwd(i, i == Rm - 1 and W == 0)
                if i == Rm - 1:
                    yield from grp((SEND, prev))
                else:
                    yield from grp((SEND, prev), (RECV, prev))
            for i in range(W):
                yield from grp((RECV, nxt))
                yield from bwd(Rm + i, i == W - 1)
                yield from grp((SEND, prev))
        if DP > 1:
            if job.overlap:
                yield K(0, job.opt_s * (1 + rng.normal(0, 0.01)), 'o',
                        after=[f'ar{it}.{ch}' for ch in range(job.nchunk)])
            else:
                yield C(0, dpc, REDUCESCATTER, job.dp_bytes, 'b')
                yield K(0, job.opt_s * (1 + rng.normal(0, 0.01)), 'o')
                yield C(0, dpc, ALLGATHER, job.dp_bytes, 'o')
        else:
            yield K(0, job.opt_s, 'o')
        if getattr(job, 'lazy_init', None) and it == job.lazy_init[0]:
            # evaluation: the first collective on a group created with lazy init creates its NCCL comm
            if r == job.lazy_init[1]:
                yield ('STOP',)
            yield ('INIT', 'eval')
            yield C(0, 'eval', ALLREDUCE, 4096, 'o')
        yield ('S',)
        yield ('ITE', it)
        it += 1


def hsdp_layout(job, nnodes):
    for n in range(nnodes):
        job.add_comm(f'shard{n}', [n * 8 + i for i in range(8)])
    for i in range(8):
        job.add_comm(f'rep{i}', [n * 8 + i for n in range(nnodes)])
    for r in range(job.W):
        job.coords[r] = {'dp': r // 8, 'cp': 0, 'tp': 0, 'pp': 0}


def hsdp_prog(job, r):
    """FSDP2 hybrid sharding: per layer an all-gather of parameters in the node (stream 1, at most two
    in flight: the host waits for the all-gather two layers back), forward; backward re-gathers, then
    reduce-scatter of gradients in the node (stream 2) and all-reduce of the shard across nodes
    (stream 3); the optimizer waits for every all-reduce."""
    rng = np.random.default_rng([job.seed, 7, r])
    sh, rp = f'shard{r // 8}', f'rep{r % 8}'
    L = job.L
    it = job.iter0
    while True:
        yield ('IT', it)
        yield ('H', rng.uniform(0.003, 0.006))
        rf = 1 + rng.normal(0, 0.015)

        def kd(base):
            return base * job.kf * rf * (1 + rng.normal(0, 0.01))
        yield C(1, sh, ALLGATHER, job.param_bytes, 'f', mark=f'a{it}.0')
        for l in range(L):
            if l + 1 < L:
                if l >= 1:
                    yield ('WAIT', f'a{it}.{l - 1}')
                yield C(1, sh, ALLGATHER, job.param_bytes, 'f', mark=f'a{it}.{l + 1}')
            yield K(0, kd(1.0), 'f', after=[f'a{it}.{l}'])
        yield C(1, sh, ALLGATHER, job.param_bytes, 'b', mark=f'b{it}.{L - 1}')
        for l in reversed(range(L)):
            if l - 1 >= 0:
                if l + 1 < L:
                    yield ('WAIT', f'b{it}.{l + 1}')
                yield C(1, sh, ALLGATHER, job.param_bytes, 'b', mark=f'b{it}.{l - 1}')
            yield K(0, kd(2.0), 'b', mark=f'g{it}.{l}', after=[f'b{it}.{l}'])
            yield C(2, sh, REDUCESCATTER, job.param_bytes * 2, 'b', mark=f'r{it}.{l}', after=[f'g{it}.{l}'])
            yield C(3, rp, ALLREDUCE, job.param_bytes * 2 // 8, 'b', mark=f'x{it}.{l}', after=[f'r{it}.{l}'])
        yield K(0, job.opt_s * (1 + rng.normal(0, 0.01)), 'o', after=[f'x{it}.{l}' for l in range(L)])
        yield ('S',)
        yield ('ITE', it)
        it += 1


# ----------------------------------------------------------------------------------------------
# capture writing

class Clock:
    def __init__(self, rng, nodes, big=False):
        self.off = {n: rng.uniform(-0.005, 0.005) for n in nodes}
        self.drift = {n: rng.uniform(-5e-6, 5e-6) for n in nodes}
        self.phase = {n: rng.uniform(0, 0.2) for n in nodes}

    def ns(self, node, t):
        return T0_NS + int(round((t + self.off[node] + self.drift[node] * t) * 1e9))

    def ns_arr(self, nodes_arr, t, node_names):
        off = np.array([self.off[n] for n in node_names])[nodes_arr]
        dr = np.array([self.drift[n] for n in node_names])[nodes_arr]
        return T0_NS + np.round((t + off + dr * t) * 1e9).astype(np.int64)


def line(topic, key, ts, value=None, b64=None):
    d = {'topic': topic, 'key': key, 'ts_ns': int(ts)}
    if b64 is not None:
        d['value_b64'] = b64
    else:
        d['value'] = value
    return (int(ts), json.dumps(d, separators=(',', ':')))


def probe_view(job, sim, T_cap):
    """Per call: entry and completion as the probe reports them (visible time, t_start, t_end)."""
    rng = np.random.default_rng([job.seed, 99])
    rows = []
    for R in sim.R:
        r = R.r
        probe = job.probe_of[r]
        cut = min(T_cap, job.cut.get(r, INF), job.dead_at.get(r, INF))
        poll_ph = rng.uniform(0, 0.01)
        for it in R.items:
            op = it.op
            if op.start is None or op.start == INF:
                continue
            if probe == 'gpu':
                ts, vis_e = op.start, op.start + rng.uniform(5e-4, 3e-3)
                if it.end is not None and it.end != INF:
                    te = it.end
                    vis_c = te + rng.uniform(5e-4, 3e-3)
                else:
                    te = vis_c = None
                fl = F_GPU | (F_GRAPH if op.graph else 0)
            else:
                ts, vis_e = op.enq, op.enq + 2e-5
                if it.end is not None and it.end != INF:
                    te = poll_ph + 0.01 * math.ceil((it.end - poll_ph) / 0.01) + 1e-5
                    vis_c = te
                else:
                    te = vis_c = None
                fl = F_ENQ
            if vis_e > cut:
                continue
            if vis_c is not None and vis_c > cut:
                te = vis_c = None
            rows.append((it, ts, vis_e, te, vis_c, fl))
    return rows


def write_job(job, sim, T_cap, clock, out, iter_label=None):
    """Append every message of one job incarnation to out: [(ts_ns, json line)]."""
    W = job.W
    node_names = sorted(set(job.node_of.values()))
    nidx = {n: i for i, n in enumerate(node_names)}
    agent_end = {}
    for r, t in job.dead_at.items():
        agent_end[job.node_of[r]] = min(agent_end.get(job.node_of[r], INF), t)
    rows = probe_view(job, sim, T_cap)
    cname_list = sorted(job.comms)
    cidx = {c: i for i, c in enumerate(cname_list)}
    # --- topology
    for r in range(W):
        nd = job.node_of[r]
        ts = clock.ns(nd, job.t_start + 0.3 + 0.001 * (r % 8))
        out.append(line('cw.topology.v1', job.jid, ts, {
            'v': 1, 'job': job.jid, 'ts_ns': ts, 'rank': r, 'world_size': W, 'node': nd,
            'local_rank': job.local_rank[r], 'gpu': 'GPU-%016x' % h64(job.jid, nd, job.local_rank[r]),
            'coords': job.coords[r]}))
    # --- records
    recs = []   # (vis, node, comm name, record tuple)
    for (it, ts, vis_e, te, vis_c, fl) in rows:
        c = job.comms[it.comm]
        base = (1, it.opc, 0, it.r, c.id, it.seq, 0, 0, it.nbytes, it.crank, it.peer, it.nranks, it.aux)
        recs.append((vis_e, it.r, it.comm, base, fl, ts, 0))
        if te is not None:
            recs.append((vis_c, it.r, it.comm, base, fl | F_COMPLETED, ts, te))
    # COMM_INIT (at job start, or at the lazy creation), COMM_DESTROY at teardown
    lazy = {}
    for R in sim.R:
        for (name, t) in R.inits:
            lazy[(R.r, name)] = t
    for name, c in job.comms.items():
        for g in c.members:
            if name in getattr(job, 'lazy_comms', ()):
                if (g, name) not in lazy:
                    continue
                t = lazy[(g, name)]
            else:
                t = job.init_t + 0.05 * cidx[name] + 0.002 * (g % 8)
            if t > min(T_cap, job.dead_at.get(g, INF)):
                continue
            base = (2, 0, F_COMPLETED, g, c.id, 0, 0, 0, 0, c.crank[g], -1, c.n, len(c.nodes))
            recs.append((t + 1e-4, g, name, base, F_COMPLETED, t, t))
    open_at_kill = defaultdict(list)
    if job.teardown is not None:
        for (it, ts, vis_e, te, vis_c, fl) in rows:
            if te is None and it.r not in job.dead_at:
                open_at_kill[it.r].append((it, ts, fl))
        for r in range(W):
            if r in job.dead_at:
                continue
            td = job.teardown + 0.01 * (r % 8)
            for (it, ts, fl) in open_at_kill[r]:
                c = job.comms[it.comm]
                base = (1, it.opc, 0, it.r, c.id, it.seq, 0, 0, it.nbytes, it.crank, it.peer, it.nranks,
                        it.aux)
                recs.append((td, r, it.comm, base, fl | F_LOST, ts, 0))
            for name in job.rank_comms[r]:
                c = job.comms[name]
                base = (3, 0, F_COMPLETED, r, c.id, 0, 0, 0, 0, c.crank[r], -1, c.n, 0)
                recs.append((td + 0.05, r, name, base, F_COMPLETED, td + 0.05, td + 0.05))
    # batching per (node, comm) every 200 ms
    groups = defaultdict(list)
    for (vis, r, name, base, fl, ts, te) in recs:
        nd = job.node_of[r]
        if vis > min(T_cap, agent_end.get(nd, INF)):
            continue
        ph = clock.phase[nd]
        k = math.ceil((vis - ph) / 0.2)
        flush = ph + 0.2 * k
        if flush > T_cap:
            continue
        rec = list(base)
        rec[2] = fl
        rec[6] = clock.ns(nd, ts)
        rec[7] = clock.ns(nd, te) if te else 0
        groups[(k, nd, name)].append((vis, tuple(rec)))
    for (k, nd, name), lst in groups.items():
        lst.sort(key=lambda x: x[0])
        arr = np.array([x[1] for x in lst], dtype=REC)
        hdr = b'CWB1' + np.array([1, 64], '<u2').tobytes() + np.array([len(arr), 0], '<u4').tobytes()
        ts = clock.ns(nd, clock.phase[nd] + 0.2 * k)
        out.append(line('cw.calls.v1', '%s/%016x' % (job.jid, job.comms[name].id), ts,
                        b64=base64.b64encode(hdr + arr.tobytes()).decode()))
    # --- heartbeats: the probe's counters per (node, comm), every 1 s
    coll_e = defaultdict(list)
    coll_c = defaultdict(list)
    p2p_e = defaultdict(list)
    p2p_c = defaultdict(list)
    for (it, ts, vis_e, te, vis_c, fl) in rows:
        if it.opc in (SEND, RECV):
            p2p_e[(it.r, it.comm, it.peer, it.opc)].append((vis_e, it.seq))
            if te is not None:
                p2p_c[(it.r, it.comm, it.peer, it.opc)].append((vis_c, it.seq))
        else:
            coll_e[(it.r, it.comm)].append((vis_e, it.seq, ts))
            if te is not None:
                coll_c[(it.r, it.comm)].append((vis_c, it.seq, te))

    def prep(lst):
        lst.sort()
        v = np.array([x[0] for x in lst]) if lst else np.zeros(0)
        s = np.maximum.accumulate(np.array([x[1] for x in lst])) if lst else np.zeros(0, int)
        tt = np.array([x[2] for x in lst]) if lst and len(lst[0]) > 2 else None
        return v, s, tt
    cache = {}

    def counters(d, key, T):
        if key not in cache:
            cache[key] = prep(d.get(key[1:], []))
        v, s, tt = cache[key]
        i = np.searchsorted(v, T, side='right')
        if i == 0:
            return -1, 0.0
        return int(s[i - 1]), (tt[i - 1] if tt is not None else 0.0)
    p2p_peers = defaultdict(set)
    for (r, name, peer, opc) in set(p2p_e) | set(p2p_c):
        p2p_peers[(r, name)].add((peer, opc))
    # peers of a PP comm are known from the start
    for name, c in job.comms.items():
        if name.startswith('pp'):
            for g in c.members:
                i = c.crank[g]
                if i > 0:
                    p2p_peers[(g, name)] |= {(i - 1, SEND), (i - 1, RECV)}
                if i < c.n - 1:
                    p2p_peers[(g, name)] |= {(i + 1, SEND), (i + 1, RECV)}
    for name, c in job.comms.items():
        bynode = defaultdict(list)
        for g in c.members:
            bynode[job.node_of[g]].append(g)
        for nd, locs in bynode.items():
            if name in getattr(job, 'lazy_comms', ()):
                ts0 = [lazy[(g, name)] for g in locs if (g, name) in lazy]
                if not ts0:
                    continue
                start = min(ts0)
            else:
                start = job.init_t + 0.05 * cidx[name]
            end = min(T_cap, agent_end.get(nd, INF),
                      job.teardown if job.teardown is not None else INF)
            T = clock.phase[nd] + math.ceil((start + 0.01 - clock.phase[nd]) / 1.0) * 1.0 + 0.5
            while T <= end:
                ranks = []
                for g in locs:
                    st, tls = counters(coll_e, ('e', g, name), T)
                    cp, tle = counters(coll_c, ('c', g, name), T)
                    d = {'rank': g, 'started': st, 'completed': cp,
                         't_last_start_ns': clock.ns(nd, tls) if st >= 0 else 0,
                         't_last_end_ns': clock.ns(nd, tle) if cp >= 0 else 0}
                    pl = []
                    for (peer, opc) in sorted(p2p_peers.get((g, name), ())):
                        k1 = (g, name, peer, opc)
                        if ('pe',) + k1 not in cache:
                            cache[('pe',) + k1] = prep([x + (0.0,) for x in p2p_e.get(k1, [])])
                            cache[('pc',) + k1] = prep([x + (0.0,) for x in p2p_c.get(k1, [])])
                        pst, _ = counters(None, ('pe',) + k1, T)
                        pcp, _ = counters(None, ('pc',) + k1, T)
                        pl.append({'peer': peer, 'op': 'send' if opc == SEND else 'recv',
                                   'started': pst, 'completed': pcp})
                    if pl:
                        d['p2p'] = pl
                    ranks.append(d)
                ts = clock.ns(nd, T)
                out.append(line('cw.progress.v1', '%s/%016x' % (job.jid, c.id), ts, {
                    'v': 1, 'job': job.jid, 'node': nd, 'ts_ns': ts, 'comm': '%016x' % c.id, 'ranks': ranks}))
                T += 1.0
    # --- steps
    for R in sim.R:
        r = R.r
        nd = job.node_of[r]
        cut = min(T_cap, job.cut.get(r, INF), job.dead_at.get(r, INF))
        ph = defaultdict(float)
        for op in R.ops0:
            if op.end is None or op.end == INF or op.it is None or op.tag not in 'fbo':
                continue
            ph[(op.it, op.tag)] += op.end - max(op.pprev, op.enq)
        for it, te in R.it_end.items():
            if te + 0.001 > cut:
                continue
            tsn, ten = clock.ns(nd, R.it_start[it]), clock.ns(nd, te)
            out.append(line('cw.steps.v1', job.jid, clock.ns(nd, te + 0.001), {
                'v': 1, 'job': job.jid, 'rank': r, 'iteration': it, 't_start_ns': tsn, 't_end_ns': ten,
                'phases': {'forward_ms': round(ph[(it, 'f')] * 1e3, 3),
                           'backward_ms': round(ph[(it, 'b')] * 1e3, 3),
                           'optimizer_ms': round(ph[(it, 'o')] * 1e3, 3)}}))
    # --- NVML samples every 5 s
    hrng = np.random.default_rng([job.seed, 5])
    for r in range(W):
        nd = job.node_of[r]
        end = min(T_cap, agent_end.get(nd, INF), job.teardown if job.teardown else INF)
        T = job.t_start + 1.0 + clock.phase[nd]
        while T <= end:
            thr = any(rr == r and a <= T < b for (rr, a, b) in job.throttle)
            ts = clock.ns(nd, T)
            out.append(line('cw.hw.v1', job.jid, ts, {
                'v': 1, 'job': job.jid, 'node': nd, 'ts_ns': ts, 'rank': r,
                'gpu': 'GPU-%016x' % h64(job.jid, nd, job.local_rank[r]),
                'sm_clock_mhz': int(1410 if thr else 1980 - hrng.integers(0, 15)), 'mem_clock_mhz': 2619,
                'power_w': round(float(hrng.uniform(480, 520) if thr else hrng.uniform(600, 690)), 1),
                'temp_c': int(88 if thr else hrng.integers(55, 70)), 'util_pct': 99,
                'throttle_reasons': 0x60 if thr else 0, 'ecc_dbe': 0, 'xid': 0, 'nvlink_errors': 0}))
            T += 5.0
    return rows


# ----------------------------------------------------------------------------------------------
# checks

def check(job, sim, rows, T_cap, truth, errs):
    # framing-level invariants by construction; here: semantic checks on the probe's view
    open_calls = defaultdict(list)
    last_entry = -INF
    entered = defaultdict(set)
    for (it, ts, vis_e, te, vis_c, fl) in rows:
        entered[it.r].add((it.comm, it.seq, it.opc in (SEND, RECV)))
        if te is None:
            open_calls[it.r].append((it, vis_e))
        last_entry = max(last_entry, vis_e)
    # completed collectives complete on all members together (true time)
    by = defaultdict(list)
    for R in sim.R:
        for it in R.items:
            if it.opc not in (SEND, RECV) and it.end is not None and it.end != INF:
                by[(it.comm, it.seq)].append(it.end)
    for k, v in by.items():
        if len(v) != job.comms[k[0]].n or max(v) - min(v) > 25e-6:
            errs.append(f'{job.jid}: collective {k} completed on {len(v)} members, spread {max(v) - min(v):.6f}')
            break
    kind = truth['kind']
    if kind == 'hang':
        cul = truth['culprits']
        onset = truth['onset_s']
        for c in cul:
            if open_calls.get(c):
                errs.append(f'{job.jid}: culprit {c} is inside a call at the end')
        waits = 0
        for r, lst in open_calls.items():
            for (it, v) in lst:
                c = job.comms[it.comm]
                if any(g in cul for g in c.members) and it.opc not in (SEND, RECV):
                    if all((it.comm, it.seq, False) not in entered[g] for g in cul if g in c.members):
                        waits += 1
                if it.opc in (SEND, RECV) and c.members[it.peer] in cul:
                    waits += 1
        if not waits:
            errs.append(f'{job.jid}: nobody waits on a call the culprit never entered')
        if last_entry > onset + 12:
            errs.append(f'{job.jid}: calls still entered {last_entry - onset:.1f} s after the onset')
        if T_cap - onset < 20:
            errs.append(f'{job.jid}: only {T_cap - onset:.1f} s of capture after the onset')
    elif kind in ('stalled',):
        for r, lst in open_calls.items():
            if lst:
                errs.append(f'{job.jid}: rank {r} inside a call in a stall')
                break
    elif kind != 'crash':
        for r, lst in open_calls.items():
            for (it, v) in lst:
                if v < T_cap - 5:
                    errs.append(f'{job.jid}: rank {r} stuck in {it.comm}#{it.seq} since {v:.1f}')
                    return


# ----------------------------------------------------------------------------------------------
# scenarios

def nodes_block(W, prefix):
    return {r: f'{prefix}-n{r // 8:02d}' for r in range(W)}, {r: r % 8 for r in range(W)}


def mk_megatron(jid, seed, TP, PP, DP, T_cap, probe='gpu', order='dp-pp-tp', placement='block', M=4,
                kf=0.025, graph=False, overlap=False, varlen=False, nchunk=1, probe_nodes=None,
                t_start=0.0, node_names=None, iter0=0):
    W = TP * PP * DP
    nn = W // 8
    if placement == 'block':
        node_idx = {r: r // 8 for r in range(W)}
        local = {r: r % 8 for r in range(W)}
    else:                                   # round-robin (srun --distribution=cyclic)
        node_idx = {r: r % nn for r in range(W)}
        local = {r: r // nn for r in range(W)}
    names = node_names or [f'{jid}-n{i:02d}' for i in range(nn)]
    node_of = {r: names[node_idx[r]] for r in range(W)}
    probe_of = {r: (probe_nodes.get(node_idx[r], probe) if probe_nodes else probe) for r in range(W)}
    job = Job(jid, W, node_of, probe_of, t_start, T_cap, seed)
    job.local_rank = local
    megatron_layout(job, TP, PP, DP, order)
    job.M, job.kf, job.graph, job.overlap, job.nchunk = M, kf, graph, overlap, nchunk
    job.act_bytes = 32 << 20
    job.dp_bytes = 1 << 30
    job.opt_s = 0.02
    job.iter0 = iter0
    job.nstreams = 2 if overlap else 1
    if PP > 1:
        job.stage_factor = lambda pp: 1.05 if pp == PP - 1 else 1.0   # loss/logits on the last stage
    if varlen:
        vr = np.random.default_rng([seed, 3])
        job.varlen = np.exp(vr.uniform(math.log(0.5), math.log(2.0), 400))
    job.prog = megatron_prog
    job.layout = f'TP{TP} PP{PP} DP{DP}' + (' (mcore order)' if order != 'dp-pp-tp' else '') + \
        (' round-robin nodes' if placement != 'block' else '')
    return job


def mk_hsdp(jid, seed, nnodes, T_cap, probe='gpu', L=8):
    W = nnodes * 8
    node_of, local = nodes_block(W, jid)
    job = Job(jid, W, node_of, {r: probe for r in range(W)}, 0.0, T_cap, seed)
    job.local_rank = local
    hsdp_layout(job, nnodes)
    job.L, job.kf, job.param_bytes, job.opt_s = L, 0.03, 96 << 20, 0.015
    job.nstreams = 4
    job.prog = hsdp_prog
    job.layout = f'HSDP shard 8 x replicate {nnodes}, {L} layers'
    return job


def truth_of(job, kind, culprits=(), onset=None, allowed=(), **kw):
    t = {'job': job.jid, 'kind': kind, 'culprits': sorted(culprits), 'onset_s': onset,
         'onset_ns': T0_NS + int(onset * 1e9) if onset is not None else None,
         'allowed': sorted(allowed), 'probe': '/'.join(sorted(set(job.probe_of.values()))),
         'ranks': job.W, 'layout': job.layout}
    t.update(kw)
    return t


SCEN = {}


def scenario(name, desc):
    def deco(f):
        SCEN[name] = (desc, f)
        return f
    return deco


def last_stage(job):
    return [r for r, c in job.coords.items() if c.get('pp') == job.PP - 1] if getattr(job, 'PP', 1) > 1 else []


@scenario('q01_graph_healthy', 'CUDA graphs: every micro-batch forward/backward replayed from a graph (GPU-timed, GRAPH_CAPTURED)')
def q01(jid, seed, T=60.0):
    job = mk_megatron(jid, seed, 8, 1, 8, T, graph=True)
    return [(job, lambda j, s: truth_of(j, 'healthy'))], T


@scenario('q02_graph_slow', 'CUDA graphs; rank 21 GPU 1.3x from 20 s')
def q02(jid, seed, T=60.0):
    job = mk_megatron(jid, seed, 8, 1, 8, T, graph=True)
    job.slow[21].append((20.0, INF, 1.3))
    return [(job, lambda j, s: truth_of(j, 'slow_rank', [21], 20.0))], T


@scenario('q03_graph_gpu_stuck', 'CUDA graphs; rank 45 GPU kernel never finishes inside a graph replay (30 s)')
def q03(jid, seed, T=60.0):
    job = mk_megatron(jid, seed, 8, 1, 8, T, graph=True)
    job.stuck[45] = 30.0
    return [(job, lambda j, s: truth_of(j, 'hang', [45], s.R[45].stuck_t))], T


def mixed(jid, seed, T):
    return mk_megatron(jid, seed, 4, 2, 8, T, probe='gpu', probe_nodes={5: 'enq', 6: 'enq'})


@scenario('q04_mixed_healthy', 'mixed probes in one job: nodes 5-6 host-enqueue hook, the rest GPU-timed plugin; 1F1B PP2')
def q04(jid, seed, T=60.0):
    job = mixed(jid, seed, T)
    return [(job, lambda j, s: truth_of(j, 'healthy', allowed=last_stage(j)))], T


@scenario('q05_mixed_slow_enq', 'mixed probes; rank 46 (enqueue-probe node 5) 1.35x from 20 s')
def q05(jid, seed, T=60.0):
    job = mixed(jid, seed, T)
    job.slow[46].append((20.0, INF, 1.35))
    return [(job, lambda j, s: truth_of(j, 'slow_rank', [46], 20.0))], T


def hang_onset(job, sim, r):
    R = sim.R[r]
    ends = [o.end for o in R.ops0 if o.end is not None and o.end != INF]
    for it in R.items:
        if it.end is not None and it.end != INF:
            ends.append(it.end)
    return round(max([R.halted or 0.0] + ends), 4)


@scenario('q06_mixed_hang_enq', 'mixed probes; rank 52 (enqueue-probe node 6) host stops at 30 s')
def q06(jid, seed, T=60.0):
    job = mixed(jid, seed, T)
    job.host_stop[52] = 30.0
    return [(job, lambda j, s: truth_of(j, 'hang', [52], hang_onset(j, s, 52)))], T


@scenario('q07_varlen_healthy', 'sequence-length bucketing: every iteration 0.5x-2x for all ranks together')
def q07(jid, seed, T=60.0):
    job = mk_megatron(jid, seed, 4, 1, 8, T, varlen=True)
    return [(job, lambda j, s: truth_of(j, 'healthy'))], T


@scenario('q08_varlen_slow', 'sequence-length bucketing; rank 14 1.4x from 20 s')
def q08(jid, seed, T=60.0):
    job = mk_megatron(jid, seed, 4, 1, 8, T, varlen=True)
    job.slow[14].append((20.0, INF, 1.4))
    return [(job, lambda j, s: truth_of(j, 'slow_rank', [14], 20.0))], T


@scenario('q09_tp16_slow_gpu', 'TP16 spanning two nodes; rank 19 GPU 1.3x from 20 s')
def q09(jid, seed, T=60.0):
    job = mk_megatron(jid, seed, 16, 1, 4, T, kf=0.03)
    job.slow[19].append((20.0, INF, 1.3))
    return [(job, lambda j, s: truth_of(j, 'slow_rank', [19], 20.0))], T


@scenario('q10_tp16_slow_nic', 'TP16 spanning two nodes; node 3 NIC at 1/4 bandwidth from 20 s (link renegotiated)')
def q10(jid, seed, T=60.0):
    job = mk_megatron(jid, seed, 16, 1, 4, T, kf=0.03)
    job.nic_slow[job.node_of[24]] = (20.0, 4.0)
    return [(job, lambda j, s: truth_of(j, 'link', onset=20.0, allowed=list(range(16, 32)),
                                        slow_node=j.node_of[24]))], T


@scenario('q11_roundrobin_slow', 'round-robin rank placement (rank r on node r % 8, TP groups span 4 nodes); rank 37 1.3x from 20 s')
def q11(jid, seed, T=60.0):
    job = mk_megatron(jid, seed, 4, 1, 16, T, placement='rr')
    job.slow[37].append((20.0, INF, 1.3))
    return [(job, lambda j, s: truth_of(j, 'slow_rank', [37], 20.0))], T


@scenario('q12_hsdp_slow', 'HSDP (FSDP2 hybrid: shard in node, replicate across nodes, 3 comm streams); rank 27 1.3x from 20 s')
def q12(jid, seed, T=60.0):
    job = mk_hsdp(jid, seed, 8, T)
    job.slow[27].append((20.0, INF, 1.3))
    return [(job, lambda j, s: truth_of(j, 'slow_rank', [27], 20.0))], T


@scenario('q13_hsdp_hang', 'HSDP, host-enqueue hook on 3 streams; rank 50 host stops at 30 s')
def q13(jid, seed, T=60.0):
    job = mk_hsdp(jid, seed, 8, T, probe='enq')
    job.host_stop[50] = 30.0
    return [(job, lambda j, s: truth_of(j, 'hang', [50], hang_onset(j, s, 50)))], T


def elastic(jid, seed, T, slow=None):
    Tc, Tk, Tr = 20.0, 26.0, 33.0
    a = mk_megatron(jid, seed, 8, 1, 8, T)
    dead = [r for r in range(64) if a.node_of[r] == a.node_of[40]]
    for r in dead:
        a.dead_at[r] = Tc
    for r in range(64):
        if r not in a.dead_at:
            a.host_stop[r] = Tk
            a.cut[r] = Tk
    a.teardown = Tk + 0.5
    names = [f'{jid}-n{i:02d}' for i in range(8) if i != 5]
    b = mk_megatron(jid, seed + 1, 8, 1, 7, T, t_start=Tr, node_names=names, iter0=10)
    if slow:
        b.slow[slow[0]].append((slow[1], INF, 1.3))

    def ta(j, s):
        return truth_of(j, 'crash', dead, Tc, dead_node=j.node_of[40], restart_s=Tr,
                        restart_ns=T0_NS + int(Tr * 1e9))

    def tb(j, s):
        if slow:
            return truth_of(j, 'slow_rank', [slow[0]], slow[1], restarted=True)
        return truth_of(j, 'healthy', restarted=True)
    return [(a, ta), (b, tb)]


@scenario('q14_elastic_healthy', 'elastic restart: node 5 crashes at 20 s, survivors aborted at 26 s, the job restarts on 7 nodes (56 ranks, new comms, same job id) from iteration 10')
def q14(jid, seed, T=75.0):
    return elastic(jid, seed, T), T


@scenario('q15_elastic_slow', 'elastic restart as q14; after the restart new rank 13 is 1.3x from 50 s')
def q15(jid, seed, T=75.0):
    return elastic(jid, seed, T, slow=(13, 50.0)), T


@scenario('q16_lazy_init_stall', 'evaluation at iteration 25: first all-reduce on a lazily initialised group; rank 13 never reaches it, the 31 others block inside NCCL comm init (no call entered anywhere)')
def q16(jid, seed, T=65.0):
    job = mk_megatron(jid, seed, 4, 1, 8, T)
    job.add_comm('eval', list(range(32)))
    job.lazy_comms = {'eval'}
    job.lazy_init = (25, 13)

    def tr(j, s):
        return truth_of(j, 'stalled', [], round(s.R[13].halted, 3), root_not_observable=13)
    return [(job, tr)], T


@scenario('q17_1f1b_batched_hang', '1F1B with batched send/recv groups, Megatron-core rank order (stages on separate nodes); rank 21 (stage 2) host stops at 30 s')
def q17(jid, seed, T=60.0):
    job = mk_megatron(jid, seed, 2, 4, 4, T, order='tp-dp-pp', M=8, kf=0.012)
    job.host_stop[21] = 30.0
    return [(job, lambda j, s: truth_of(j, 'hang', [21], hang_onset(j, s, 21)))], T


def overlap_job(jid, seed, T):
    return mk_megatron(jid, seed, 4, 1, 16, T, probe='enq', overlap=True, M=2, nchunk=4, kf=0.02)


@scenario('q18_overlap_healthy', 'overlap: TP all-reduces on the compute stream, DP gradient buckets all-reduced on a second stream during backward (host-enqueue hook)')
def q18(jid, seed, T=60.0):
    job = overlap_job(jid, seed, T)
    return [(job, lambda j, s: truth_of(j, 'healthy'))], T


@scenario('q19_overlap_slow', 'overlap as q18; rank 37 1.3x from 20 s')
def q19(jid, seed, T=60.0):
    job = overlap_job(jid, seed, T)
    job.slow[37].append((20.0, INF, 1.3))
    return [(job, lambda j, s: truth_of(j, 'slow_rank', [37], 20.0))], T


@scenario('q20_intermittent', '1F1B PP2 (mcore order); rank 11 1.4x in [12,27) and [42,57) s (thermal cycling; NVML shows it)')
def q20(jid, seed, T=65.0):
    job = mk_megatron(jid, seed, 4, 2, 4, T, order='tp-dp-pp')
    for (a, b) in ((12.0, 27.0), (42.0, 57.0)):
        job.slow[11].append((a, b, 1.4))
        job.throttle.append((11, a, b))
    return [(job, lambda j, s: truth_of(j, 'slow_rank', [11], 12.0, allowed=last_stage(j)))], T


@scenario('q21_throttle_once', 'rank 6 thermally throttled once, 1.5x for 10 s (25-35 s), NVML shows it')
def q21(jid, seed, T=60.0):
    job = mk_megatron(jid, seed, 4, 1, 8, T)
    job.slow[6].append((25.0, 35.0, 1.5))
    job.throttle.append((6, 25.0, 35.0))
    return [(job, lambda j, s: truth_of(j, 'blip', [6], 25.0, allowed=[6], end_s=35.0))], T


@scenario('q22_hsdp256_slow', 'HSDP at 256 ranks (32 nodes, 4 layers); rank 173 1.3x from 20 s')
def q22(jid, seed, T=50.0):
    job = mk_hsdp(jid, seed, 32, T, L=4)
    job.slow[173].append((20.0, INF, 1.3))
    return [(job, lambda j, s: truth_of(j, 'slow_rank', [173], 20.0))], T


# ----------------------------------------------------------------------------------------------

def median_iter(sim, r, before):
    R = sim.R[r]
    d = [R.it_end[i] - R.it_start[i] for i in R.it_end if R.it_end[i] < before]
    return round(float(np.median(d)), 4) if d else None


def generate(name, out, base_seed):
    desc, f = SCEN[name]
    idx = sorted(SCEN).index(name)
    seed = base_seed * 1000 + idx
    jid = 'qk-%s-%d' % (name.split('_')[0], seed)
    jobs, T_cap = f(jid, seed)
    rng = np.random.default_rng([seed, 1])
    lines, truths, errs = [], [], []
    all_nodes = sorted({n for (j, _) in jobs for n in j.node_of.values()})
    clock = Clock(rng, all_nodes)
    for (job, tf) in jobs:
        sim = Sim(job, seed + 17).run()
        truth = tf(job, sim)
        rows = write_job(job, sim, T_cap, clock, lines)
        check(job, sim, rows, T_cap, truth, errs)
        ref = truth['onset_s'] if truth['onset_s'] is not None else T_cap
        if truth['kind'] == 'crash':
            ref = truth['onset_s']
        r0 = min(job.W - 1, 0)
        truth['iter_s'] = median_iter(sim, r0, ref) or median_iter(sim, r0, T_cap)
        truth['nodes'] = {str(r): job.node_of[r] for r in truth['culprits']}
        truths.append(truth)
    lines.sort(key=lambda x: x[0])
    with open(os.path.join(out, name + '.cwcap'), 'w') as fh:
        for _, l in lines:
            fh.write(l + '\n')
    # a lean self-check of the framing
    verify(os.path.join(out, name + '.cwcap'), errs)
    doc = {'scenario': name, 'description': desc, 'seed': seed, 'capture_end_s': T_cap,
           'capture_end_ns': T0_NS + int(T_cap * 1e9), 'jobs': truths, 'gen_errors': errs}
    with open(os.path.join(out, name + '.truth.json'), 'w') as fh:
        json.dump(doc, fh, indent=1)
    return len(lines), errs


def verify(path, errs):
    n = 0
    with open(path) as fh:
        for l in fh:
            d = json.loads(l)
            if d['topic'] != 'cw.calls.v1':
                continue
            b = base64.b64decode(d['value_b64'])
            if b[:4] != b'CWB1':
                errs.append('bad magic')
                return
            cnt = int.from_bytes(b[8:12], 'little')
            if len(b) != 16 + 64 * cnt:
                errs.append('bad batch length')
                return
            a = np.frombuffer(b[16:], REC)
            comp = (a['flags'] & F_COMPLETED) != 0
            if np.any(comp != (a['t_end_ns'] != 0)):
                errs.append('t_end set iff COMPLETED violated')
                return
            if np.any(a['comm'] != int(d['key'].split('/')[1], 16)):
                errs.append('record comm differs from key')
                return
            n += cnt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--list', action='store_true')
    ap.add_argument('prefix', nargs='*')
    a = ap.parse_args()
    if a.list:
        for n in sorted(SCEN):
            print(f'{n:26s} {SCEN[n][0]}')
        return
    os.makedirs(a.out, exist_ok=True)
    for n in sorted(SCEN):
        if a.prefix and not any(n.startswith(p) for p in a.prefix):
            continue
        import time
        t0 = time.time()
        nl, errs = generate(n, a.out, a.seed)
        print(f'{n:26s} {nl:7d} messages  {time.time() - t0:5.1f} s' + (f'  GEN-ERR: {errs[:3]}' if errs else ''),
              flush=True)


if __name__ == '__main__':
    main()
