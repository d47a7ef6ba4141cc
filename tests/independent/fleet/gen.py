#!/usr/bin/env python3
"""fleet: a fifth independent traffic generator for commwatch (fleet-level situations).

Written from shared/spec/wire-v1.md, shared/DOMAIN.md, the top-level README and the READMEs of the
four other generators (for conventions and coverage only). It never read streams/, producers/,
commwatch/, sinks/, docs/, tests/unit, tests/integration nor the other generators' code. numpy and
the standard library only.

    gen.py --out DIR --seed N [PREFIX ...]     writes DIR/NAME.cwcap and DIR/NAME.truth.json
    gen.py --list                              lists the scenarios

MODEL (and its simplifications)
- Megatron layout rank = dp*(PP*TP) + pp*TP + tp, 8 GPUs per node (TP inside a node). Comms: TP
  (all-reduce), PP (point-to-point, comm rank = stage), DP (reduce-scatter before the optimizer,
  all-gather after it: distributed optimizer), MP (grad-norm all-reduce over TP x PP, when PP > 1),
  per scenario an expert-parallel comm (all-to-all), an expert-data-parallel comm and a custom
  4-rank subgroup created by its members only. Every comm starts with COMM_INIT from each member.
- Schedule: GPipe (all forwards, then all backwards) of M micro-batches, not 1F1B; each micro-batch is
  compute / TP all-reduce / compute and a blocking SEND/RECV with the neighbour stage. MoE jobs run
  L layers of attention / dispatch all-to-all / experts / combine all-to-all.
- Dataflow simulation, one host thread and one in-order device stream per rank. The host pays a
  launch cost per op (3 % of the kernel time; under CPU contention more than the kernel itself, so
  the device idles waiting for launches), runs at most 16 ops ahead of the device and synchronises
  at the end of each iteration (loss.item()), then spends 2-6 ms in the data loader. A collective
  completes on all members at its last device arrival plus a transfer time (members <= 15 us apart).
  A P2P pair completes at the later of its two arrivals plus a transfer. Compute kernels jitter
  1 % per op and 2 % per rank-iteration.
- Probes: gpu (GPU_TIMED; device start/end, written 0.5-3 ms after the fact), enq (ENQUEUED; host
  enqueue time, completion when a 10 ms poller sees the CUDA event; a rank blocked in call k still
  enqueues what follows up to its queue depth or its iteration sync), blk (no flag: blocking host
  calls, device == host). Entry and completion records for every call. NCCL's per-op-type number
  in `aux` for gpu probes.
- Agents: one per node; call batches per (node, comm) every 200 ms (per-node phase), heartbeats
  per (node, comm) every 1 s whose counters are the probe's own (so they stay right when the ring
  drops records), p2p counters on PP comms; topology once per rank with coords; steps per rank per
  iteration (phases are CUDA-event section spans on the device: TP waits inside forward/backward,
  the DP reduce-scatter at the end of backward, the all-gather in the optimizer). No hardware
  samples. Timestamps on each node's clock (offset +-5 ms, drift +-5 ppm).
- Faults: a compute multiplier per rank and time window; CPU contention (host launch cost > kernel
  time); a single GPU stall; per-iteration random expert load; random data-loader stalls; a host
  that stops (hang: its device drains what it had queued); a congested node pair (transfers of
  P2P / comms spanning both nodes x20); ring overflow (the agent loses every record of one rank for
  a few seconds, the probe's counters keep counting); heartbeats delayed 1-3 s by an agent; an agent
  that dies (nothing more from its node while the job keeps training); a crash and restart (see
  f12: the dead process's ring is reaped by its agent, which writes COMM_DESTROY for it; the others
  are killed by the launcher 8 s later: their open calls get a COMPLETION_LOST record, then
  COMM_DESTROY; heartbeats of a comm stop once its local ranks destroyed it).
- Not modelled: 1F1B/interleaving, CUDA graphs, NVLink/IB topology beyond the congested pair,
  hardware samples, records out of order inside a batch, agent restarts.

TRUTHS (what a correct detector should say; see README.md for the scoring)
- hang: the rank(s) whose host stopped: inside no call, the others wait on calls it never entered.
  onset = when its device went idle after the host stopped.
- slow_rank: the ranks whose own kernels (or kernel launches) are slower, named alone.
- healthy: nothing at P0/P1; `allowed` ranks may appear at P2/P3 (listed as notes).
"""
import argparse
import base64
import hashlib
import json
import math
import os
import struct
import sys
import time
from collections import defaultdict, deque

import numpy as np

REC = np.dtype([('kind', 'u1'), ('op', 'u1'), ('flags', '<u2'), ('rank', '<i4'), ('comm', '<u8'),
                ('seq', '<u8'), ('t_start_ns', '<i8'), ('t_end_ns', '<i8'), ('bytes', '<u8'),
                ('comm_rank', '<i4'), ('peer', '<i4'), ('nranks', '<u4'), ('aux', '<u4')])
assert REC.itemsize == 64 and REC.fields['aux'][1] == 60 and REC.fields['t_start_ns'][1] == 24

COMPLETED, GPU_TIMED, GRAPH, ENQUEUED, LOST = 1, 2, 4, 8, 16
K_CALL, K_INIT, K_DESTROY = 1, 2, 3
AR, AG, RS, BC, RED, SEND, RECV, A2A = 1, 2, 3, 4, 5, 6, 7, 8
OPNAME = {AR: 'allreduce', AG: 'allgather', RS: 'reducescatter', A2A: 'alltoall', SEND: 'send', RECV: 'recv'}
T0_NS = 1767225600 * 10**9
GPN = 8
QDEPTH = 16

# op tuples: ('C', base_s, tag) compute; ('K', commkey, opcode, bytes, xfer_s, tag) collective;
# ('S'/'R', commkey, peer_comm_rank, bytes, xfer_s) p2p; ('SEC', name); ('SYNC',)


def dh(*parts):
    return int.from_bytes(hashlib.md5('/'.join(str(p) for p in parts).encode()).digest()[:4], 'little')


def comm_hash(*parts):
    h = hashlib.sha256('/'.join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(h[:8], 'little') | 1


class Job:
    def __init__(self, sc, job_id, seed, TP=4, PP=2, DP=4, M=4, T=1.0, probe='gpu', start=0.0,
                 end=60.0, moe=None, run_tag='r0', hosts=None, it0=0, faults=None, node_clock=None,
                 sub=None, margin=None):
        self.sc, self.job, self.TP, self.PP, self.DP, self.M, self.T = sc, job_id, TP, PP, DP, M, T
        self.W = TP * PP * DP
        self.probe, self.start, self.end, self.moe, self.run_tag = probe, start, end, moe, run_tag
        self.rng = np.random.default_rng(seed)
        self.it0 = it0
        self.faults = faults or {}
        self.nnodes = (self.W + GPN - 1) // GPN
        self.hosts = hosts or ['%s-n%03d' % (job_id, n) for n in range(self.nnodes)]
        if node_clock is None:
            node_clock = [(self.rng.uniform(-0.005, 0.005), self.rng.uniform(-5e-6, 5e-6)) for _ in range(self.nnodes)]
        self.node_clock = node_clock
        self.margin = max(5.0, 2.5 * T) if margin is None else margin
        self.sub = sub
        self.comms = {}      # key -> dict(id, members, p2p)
        self.rank_comms = defaultdict(dict)
        self._build_comms()

    # ---------------------------------------------------------------- layout
    def coords(self, r):
        tp = r % self.TP
        pp = (r // self.TP) % self.PP
        dp = r // (self.TP * self.PP)
        return tp, pp, dp

    def node(self, r):
        return r // GPN

    def _add(self, key, members, p2p=False):
        cid = comm_hash(self.job, self.run_tag, key)
        self.comms[key] = dict(id=cid, members=list(members), p2p=p2p,
                               nodes=len({self.node(m) for m in members}))
        for i, m in enumerate(members):
            self.rank_comms[m][key] = i

    def _build_comms(self):
        TP, PP, DP = self.TP, self.PP, self.DP
        R = lambda tp, pp, dp: dp * PP * TP + pp * TP + tp
        for dp in range(DP):
            for pp in range(PP):
                if TP > 1:
                    self._add(('tp', pp, dp), [R(t, pp, dp) for t in range(TP)])
            if PP > 1:
                self._add(('mp', dp), [R(t, p, dp) for p in range(PP) for t in range(TP)])
                for t in range(TP):
                    self._add(('pp', t, dp), [R(t, p, dp) for p in range(PP)], p2p=True)
        if DP > 1:
            for pp in range(PP):
                for t in range(TP):
                    self._add(('dp', t, pp), [R(t, pp, d) for d in range(DP)])
        if self.moe:
            EP = self.moe['EP']
            for pp in range(PP):
                for t in range(TP):
                    for g in range(DP // EP):
                        self._add(('ep', t, pp, g), [R(t, pp, g * EP + e) for e in range(EP)])
                    if DP // EP > 1:
                        for e in range(EP):
                            self._add(('edp', t, pp, e), [R(t, pp, g * EP + e) for g in range(DP // EP)])
        if self.sub:
            self._add(('sub',), self.sub)

    def key_of(self, r, kind):
        tp, pp, dp = self.coords(r)
        if kind == 'tp':
            return ('tp', pp, dp) if self.TP > 1 else None
        if kind == 'pp':
            return ('pp', tp, dp) if self.PP > 1 else None
        if kind == 'mp':
            return ('mp', dp) if self.PP > 1 else None
        if kind == 'dp':
            return ('dp', tp, pp) if self.DP > 1 else None
        if kind == 'ep':
            return ('ep', tp, pp, dp // self.moe['EP'])
        if kind == 'edp':
            k = ('edp', tp, pp, dp % self.moe['EP'])
            return k if k in self.comms else None
        if kind == 'sub':
            return ('sub',) if (self.sub and r in self.sub) else None

    def xfer(self, key, base):
        lk = self.faults.get('link')
        if lk:
            a, b, f = lk
            nodes = {self.node(m) for m in self.comms[key]['members']}
            if a in nodes and b in nodes:
                return base * f
        return base

    # ---------------------------------------------------------------- program
    def program(self, r, it):
        T, M = self.T, self.M
        tp, pp, dp = self.coords(r)
        ops = []
        per = self.faults.get('periodic')
        if per and r in per[0] and it % per[1] == 0 and it > 0:
            ops.append(('C', per[2] * T, 'log'))
        ops.append(('SEC', 'fwd'))
        k_tp, k_pp, k_dp, k_mp = (self.key_of(r, k) for k in ('tp', 'pp', 'dp', 'mp'))
        stage_f = self.faults.get('stage', {}).get(pp, 1.0)
        if self.moe:
            L = self.moe['L']
            k_ep = self.key_of(r, 'ep')
            for l in range(L):
                ops.append(('C', 0.12 * T / L * stage_f, 'fwd'))
                if k_tp:
                    ops.append(('K', k_tp, AR, 16 << 20, 0.0004, 'tp'))
                ops.append(('K', k_ep, A2A, 64 << 20, 0.002, 'ep'))
                ops.append(('C', 0.16 * T / L, 'exp'))
                ops.append(('K', k_ep, A2A, 64 << 20, 0.002, 'ep'))
            ops.append(('SEC', 'bwd'))
            for l in range(L):
                ops.append(('K', k_ep, A2A, 64 << 20, 0.002, 'ep'))
                ops.append(('C', 0.3 * T / L, 'exp'))
                ops.append(('K', k_ep, A2A, 64 << 20, 0.002, 'ep'))
                ops.append(('C', 0.22 * T / L * stage_f, 'bwd'))
                if k_tp:
                    ops.append(('K', k_tp, AR, 16 << 20, 0.0004, 'tp'))
        else:
            fwd = 0.3 * T / M * stage_f
            bwd = 0.55 * T / M * stage_f
            for m in range(M):
                if k_pp and pp > 0:
                    ops.append(('R', k_pp, pp - 1, 8 << 20, 0.0015))
                ops.append(('C', fwd / 2, 'fwd'))
                if k_tp:
                    ops.append(('K', k_tp, AR, 16 << 20, 0.0004, 'tp'))
                ops.append(('C', fwd / 2, 'fwd'))
                if k_pp and pp < self.PP - 1:
                    ops.append(('S', k_pp, pp + 1, 8 << 20, 0.0015))
            ops.append(('SEC', 'bwd'))
            for m in range(M):
                if k_pp and pp < self.PP - 1:
                    ops.append(('R', k_pp, pp + 1, 8 << 20, 0.0015))
                ops.append(('C', bwd / 2, 'bwd'))
                if k_tp:
                    ops.append(('K', k_tp, AR, 16 << 20, 0.0004, 'tp'))
                ops.append(('C', bwd / 2, 'bwd'))
                if k_pp and pp > 0:
                    ops.append(('S', k_pp, pp - 1, 8 << 20, 0.0015))
        if k_dp:
            ops.append(('K', k_dp, RS, 256 << 20, 0.006 * (1 + math.log2(self.DP) / 8), 'dp'))
        if self.moe:
            k_edp = self.key_of(r, 'edp')
            if k_edp:
                ops.append(('K', k_edp, AR, 128 << 20, 0.004, 'edp'))
        ops.append(('SEC', 'opt'))
        if k_mp:
            ops.append(('K', k_mp, AR, 8, 0.0002, 'mp'))
        k_sub = self.key_of(r, 'sub')
        if k_sub:
            ops.append(('K', k_sub, AR, 4096, 0.0002, 'sub'))
        ops.append(('C', 0.06 * T, 'opt'))
        if k_dp:
            ops.append(('K', k_dp, AG, 256 << 20, 0.006 * (1 + math.log2(self.DP) / 8), 'dp'))
        ops.append(('SYNC',))
        return ops

    # ---------------------------------------------------------------- simulation
    def factor(self, r, t, it, tag):
        f = 1.0
        for (ranks, t0, t1, fac) in self.faults.get('slow', ()):
            if r in ranks and t0 <= t < t1:
                f *= fac
        if tag == 'exp':
            rt = self.faults.get('routing')
            if rt:
                f *= self.route[(r, it)]
        return f

    def simulate(self):
        W = self.W
        rng = self.rng
        probe = self.probe
        self.route = {}
        if self.faults.get('routing'):
            mx = self.faults['routing']
            for it in range(100000):
                if self.start + it * self.T * 0.5 > self.end + self.margin + 30:
                    break
                u = rng.random(W)
                for r in range(W):
                    self.route[(r, it)] = 1.0 + mx * u[r] ** 2
        self.records = []            # (kind, op, flags, rank, commkey, seq, ts, te, bytes, cr, peer, nranks, aux, vis)
        self.steps = []              # (rank, it, t_start, t_end, fwd, bwd, opt)
        self.hb_src = defaultdict(list)   # (rank, commkey, 'c'|peer/op) -> list of (seq, vis_entry, ts, vis_end or None, te)
        poll_phase = rng.uniform(0, 0.01, W)
        st = []
        init_t = self.start + 0.5
        for r in range(W):
            st.append(dict(host=init_t + 1.0 + rng.uniform(0, 0.05), dev=0.0, it=self.it0, ops=None, pc=0,
                           q=deque(maxlen=QDEPTH), waiting=None, stopped=False, done=False,
                           seq=defaultdict(int), p2pseq=defaultdict(int), auxseq=defaultdict(int),
                           sec={}, it_start=None, itf=1.0, pend=None, stall_used=False))
            st[r]['dev'] = st[r]['host']
        # COMM_INIT records
        for key, c in self.comms.items():
            for i, m in enumerate(c['members']):
                t = init_t + rng.uniform(0, 0.2)
                self.records.append((K_INIT, 0, COMPLETED, m, key, 0, t, t, 0, i, -1, len(c['members']), c['nodes'], t + 0.001))
        inst = {}
        hang = self.faults.get('hang', {})      # rank -> (t, tag or None)
        launch = self.faults.get('launch')      # (ranks, t0, factor)
        stall = self.faults.get('stall')        # (rank, t, dur)
        dls = self.faults.get('dlstall')        # (prob, lo, hi)
        self.onset = {}
        end_lim = self.end + self.margin
        flags0 = {'gpu': GPU_TIMED, 'enq': ENQUEUED, 'blk': 0}[probe]

        def t_start_of(e, arr):
            return arr if probe == 'gpu' else e

        def vis_start(e, arr):
            if probe == 'gpu':
                return arr + rng.uniform(0.0005, 0.003)
            return e + 0.00002

        def t_end_of(r, c):
            if probe == 'enq':
                ph = poll_phase[r]
                return ph + math.ceil((c - ph) / 0.01) * 0.01
            return c

        def vis_end(te):
            return te + (rng.uniform(0.0005, 0.003) if probe == 'gpu' else 0.00002)

        def emit_call(r, pend, c):
            (opc, key, seq, nb, cr, peer, nr, e, arr, aux, p2pk) = pend
            ts = t_start_of(e, arr)
            ve = vis_start(e, arr)
            self.records.append((K_CALL, opc, flags0, r, key, seq, ts, 0.0, nb, cr, peer, nr, aux, ve))
            hk = (r, key, p2pk)
            if c is None:
                self.hb_src[hk].append((seq, ve, ts, None, 0.0))
                return
            te = t_end_of(r, c)
            vn = vis_end(te)
            self.records.append((K_CALL, opc, flags0 | COMPLETED, r, key, seq, ts, te, nb, cr, peer, nr, aux, vn))
            self.hb_src[hk].append((seq, ve, ts, vn, te))

        def complete(key):
            I = inst[key]
            arrs = I['arr']
            c = max(arrs.values()) + I['xfer']
            res = []
            for m in arrs:
                cm = c + rng.uniform(0, 15e-6)
                res.append((m, cm))
            I['done'] = True
            return res

        runq = deque(range(W))
        inq = set(runq)

        def finish(m, cm):
            s = st[m]
            s['dev'] = cm
            if probe == 'blk':
                s['host'] = cm
            s['q'].append(cm)
            emit_call(m, s['pend'], cm)
            s['pend'] = None
            s['waiting'] = None
            s['pc'] += 1

        def resume(m, cm):
            finish(m, cm)
            if m not in inq:
                runq.append(m)
                inq.add(m)

        while runq:
            r = runq.popleft()
            inq.discard(r)
            s = st[r]
            if s['waiting'] is not None or s['stopped'] or s['done']:
                continue
            while True:
                if s['ops'] is None:
                    if s['host'] > end_lim:
                        s['done'] = True
                        break
                    s['ops'] = self.program(r, s['it'])
                    s['pc'] = 0
                    s['it_start'] = s['host']
                    s['itf'] = float(np.exp(rng.normal(0, 0.02)))
                    s['sec'] = {}
                    h = hang.get(r)
                    if h and h[1] == 'iter' and s['host'] >= h[0]:
                        s['stopped'] = True
                        self.onset[r] = max(s['dev'], s['host'])
                        break
                op = s['ops'][s['pc']]
                typ = op[0]
                if typ == 'SYNC':
                    s['host'] = max(s['host'], s['dev'])
                    sec = s['sec']
                    self.steps.append((r, s['it'], s['it_start'], s['host'],
                                       sec.get('bwd', 0) - sec.get('fwd', 0), sec.get('opt', 0) - sec.get('bwd', 0),
                                       s['dev'] - sec.get('opt', 0)))
                    dl = rng.uniform(0.002, 0.006)
                    if dls and rng.random() < dls[0]:
                        dl += rng.uniform(dls[1], dls[2])
                    s['host'] += dl
                    if probe == 'blk':
                        s['dev'] = max(s['dev'], s['host'])
                    s['it'] += 1
                    s['ops'] = None
                    continue
                if typ == 'SEC':
                    s['sec'][op[1]] = max(s['dev'], s['host'])
                    s['pc'] += 1
                    continue
                # host enqueue time
                if typ == 'C':
                    t_now = max(s['dev'], s['host'])
                    dur = op[1] * self.factor(r, t_now, s['it'], op[2]) * s['itf'] * float(np.exp(rng.normal(0, 0.01)))
                    hcost = 0.03 * dur
                    if launch and r in launch[0] and s['host'] >= launch[1]:
                        hcost = launch[2] * dur
                else:
                    hcost = 0.00002
                e = s['host'] + hcost
                if len(s['q']) == QDEPTH:
                    e = max(e, s['q'][0] + hcost)
                h = hang.get(r)
                if h and h[1] != 'iter' and e >= h[0] and (h[1] is None or (typ == 'K' and op[5] == h[1])):
                    s['stopped'] = True
                    self.onset[r] = max(s['dev'], s['host'])
                    break
                if typ == 'C':
                    if probe == 'blk':
                        start = max(s['dev'], s['host'])
                    else:
                        start = max(s['dev'], e - hcost + 0.00001)
                    d = dur
                    if stall and r == stall[0] and not s['stall_used'] and start >= stall[1]:
                        d += stall[2]
                        s['stall_used'] = True
                    if probe == 'blk':
                        s['dev'] = start + d
                        s['host'] = s['dev']
                    else:
                        # the last kernel cannot start before the host launched it
                        s['dev'] = max(start + d, e + 0.0001)
                        s['host'] = e
                    s['q'].append(s['dev'])
                    s['pc'] += 1
                    continue
                # communication
                s['host'] = e
                arr = max(s['dev'], e)
                if typ == 'K':
                    _, key, opc, nb, xf, tag = op
                    cr = self.rank_comms[r][key]
                    seq = s['seq'][key]
                    s['seq'][key] += 1
                    aux = 0
                    if probe == 'gpu':
                        aux = s['auxseq'][(key, opc)] & 0xffffffff
                        s['auxseq'][(key, opc)] += 1
                    ikey = (key, seq)
                    nr = len(self.comms[key]['members'])
                    s['pend'] = (opc, key, seq, nb, cr, -1, nr, e, arr, aux, 'c')
                    xfer_t = self.xfer(key, xf)
                else:
                    _, key, peer, nb, xf = op
                    cr = self.rank_comms[r][key]
                    opc = SEND if typ == 'S' else RECV
                    k = s['p2pseq'][(key, peer, opc)]
                    s['p2pseq'][(key, peer, opc)] += 1
                    ikey = (key, 'p2p', cr, peer, k) if typ == 'S' else (key, 'p2p', peer, cr, k)
                    nr = len(self.comms[key]['members'])
                    s['pend'] = (opc, key, k, nb, cr, peer, nr, e, arr, 0, (peer, opc))
                    xfer_t = xf
                    lk = self.faults.get('link')
                    if lk:
                        pm = self.comms[key]['members'][peer]
                        if {self.node(r), self.node(pm)} == {lk[0], lk[1]}:
                            xfer_t = xf * lk[2]
                    nr_need = 2
                I = inst.get(ikey)
                if I is None:
                    I = inst[ikey] = dict(arr={}, n=(2 if typ in 'SR' else nr), xfer=xfer_t, done=False)
                I['arr'][r] = arr
                if len(I['arr']) == I['n']:
                    res = complete(ikey)
                    mine = None
                    for m, cm in res:
                        if m == r:
                            mine = cm
                        else:
                            resume(m, cm)
                    finish(r, mine)
                    continue
                s['waiting'] = ikey
                break
        self.st = st
        self.inst = inst
        # ranks left waiting forever (hangs, or past the end): entry records, enq drain
        for r in range(W):
            s = st[r]
            if s['waiting'] is not None and s['pend'] is not None:
                emit_call(r, s['pend'], None)
                if probe == 'enq':
                    self._drain(r, s, emit_call)

    def _drain(self, r, s, emit_call):
        host = s['host']
        n = 1
        for op in s['ops'][s['pc'] + 1:]:
            if op[0] in ('SYNC',) or n >= QDEPTH:
                break
            if op[0] == 'SEC':
                continue
            n += 1
            if op[0] == 'C':
                host += 0.03 * op[1]
                continue
            host += 0.00002
            if op[0] == 'K':
                key = op[1]
                seq = s['seq'][key]
                s['seq'][key] += 1
                cr = self.rank_comms[r][key]
                emit_call(r, (op[2], key, seq, op[3], cr, -1, len(self.comms[key]['members']), host, host, 0, 'c'), None)
            else:
                key, peer = op[1], op[2]
                opc = SEND if op[0] == 'S' else RECV
                k = s['p2pseq'][(key, peer, opc)]
                s['p2pseq'][(key, peer, opc)] += 1
                cr = self.rank_comms[r][key]
                emit_call(r, (opc, key, k, op[3], cr, peer, len(self.comms[key]['members']), host, host, 0, (peer, opc)), None)

    # ---------------------------------------------------------------- emission
    def clock(self, n, t):
        off, dr = self.node_clock[n]
        return t + off + dr * t

    def ns(self, n, t):
        return T0_NS + int(round(self.clock(n, t) * 1e9))

    def messages(self, cap_end, teardown=None, crash_reap=None):
        """Return list of (ts_ns, dict) messages. teardown: time at which every process is killed
        (open calls -> COMPLETION_LOST, comms destroyed). crash_reap: {rank: t} agent-written
        COMM_DESTROY for a dead process."""
        rng = self.rng
        job = self.job
        W = self.W
        msgs = []
        lim = cap_end if teardown is None else min(cap_end, teardown)
        recs = [x for x in self.records if x[13] <= lim]
        drop = self.faults.get('drop')       # (rank, t0, t1)
        if drop:
            recs = [x for x in recs if not (x[3] == drop[0] and drop[1] <= x[13] < drop[2])]
        # a completion seen after `lim` is not in the capture; an entry is
        destroyed = {}
        if teardown is not None:
            open_calls = {}
            for x in self.records:
                if x[0] != K_CALL:
                    continue
                k = (x[3], x[4], x[1], x[10], x[5])
                if x[13] <= lim:
                    if x[2] & COMPLETED:
                        open_calls.pop(k, None)
                    else:
                        open_calls.setdefault(k, x)
                else:
                    pass
            for k, x in open_calls.items():
                r = x[3]
                if crash_reap and r in crash_reap:
                    continue
                tl = teardown + rng.uniform(0.0, 0.05)
                recs.append((K_CALL, x[1], (x[2] | LOST) & ~COMPLETED, r, x[4], x[5], x[6], 0.0, x[8], x[9], x[10], x[11], x[12], tl))
            for key, c in self.comms.items():
                for i, m in enumerate(c['members']):
                    t = crash_reap[m] if (crash_reap and m in crash_reap) else teardown + rng.uniform(0.05, 0.2)
                    recs.append((K_DESTROY, 0, COMPLETED, m, key, 0, t, t, 0, i, -1, len(c['members']), c['nodes'], t + 0.001))
                    destroyed.setdefault((self.node(m), key), []).append(t)
        dead = self.faults.get('agent_dead')    # (node, t)
        # ---- call batches
        if recs:
            keys = list(self.comms)
            kidx = {k: i for i, k in enumerate(keys)}
            n = len(recs)
            arr = np.zeros(n, REC)
            cols = list(zip(*recs))
            arr['kind'] = cols[0]
            arr['op'] = cols[1]
            arr['flags'] = cols[2]
            arr['rank'] = cols[3]
            arr['comm'] = [self.comms[k]['id'] for k in cols[4]]
            arr['seq'] = cols[5]
            ts = np.array(cols[6], float)
            te = np.array(cols[7], float)
            rank = np.array(cols[3], np.int64)
            node = rank // GPN
            offs = np.array([c[0] for c in self.node_clock])[node]
            drs = np.array([c[1] for c in self.node_clock])[node]
            arr['t_start_ns'] = T0_NS + np.round((ts + offs + drs * ts) * 1e9).astype(np.int64)
            ten = T0_NS + np.round((te + offs + drs * te) * 1e9).astype(np.int64)
            arr['t_end_ns'] = np.where(te > 0, ten, 0)
            arr['bytes'] = cols[8]
            arr['comm_rank'] = cols[9]
            arr['peer'] = cols[10]
            arr['nranks'] = cols[11]
            arr['aux'] = cols[12]
            vis = np.array(cols[13], float)
            phase = np.array([(dh(job, i) % 997) / 997 * 0.2 for i in range(self.nnodes)])[node]
            tick = np.ceil((vis - phase) / 0.2)
            ci = np.array([kidx[k] for k in cols[4]])
            order = np.lexsort((vis, tick, ci, node))
            arr, node, ci, tick = arr[order], node[order], ci[order], tick[order]
            brk = np.flatnonzero((np.diff(node) != 0) | (np.diff(ci) != 0) | (np.diff(tick) != 0)) + 1
            starts = np.concatenate(([0], brk))
            ends = np.concatenate((brk, [n]))
            for a, b in zip(starts, ends):
                nd = int(node[a])
                key = keys[ci[a]]
                tflush = float(tick[a] * 0.2 + (dh(job, nd) % 997) / 997 * 0.2)
                if dead and nd == dead[0] and tflush >= dead[1]:
                    continue
                if tflush > cap_end:
                    continue
                body = struct.pack('<4sHHII', b'CWB1', 1, 64, b - a, 0) + arr[a:b].tobytes()
                msgs.append((self.ns(nd, tflush), {'topic': 'cw.calls.v1', 'key': '%s/%016x' % (job, self.comms[key]['id']),
                                                   'value_b64': base64.b64encode(body).decode()}))
        # ---- topology
        for r in range(W):
            tp, pp, dp = self.coords(r)
            nd = self.node(r)
            t = self.start + 0.3
            co = {'tp': tp, 'pp': pp, 'dp': dp}
            if self.moe:
                co['ep'] = dp % self.moe['EP']
            msgs.append((self.ns(nd, t), {'topic': 'cw.topology.v1', 'key': job, 'value': {
                'v': 1, 'job': job, 'ts_ns': self.ns(nd, t), 'rank': r, 'world_size': W, 'node': self.hosts[nd],
                'local_rank': r % GPN, 'gpu': 'GPU-%s' % hashlib.md5(('%s/%d' % (self.hosts[nd], r % GPN)).encode()).hexdigest()[:24],
                'coords': co}}))
        # ---- steps
        for (r, it, t0, t1, f, bw, op) in self.steps:
            nd = self.node(r)
            if t1 + 0.05 > lim:
                continue
            if dead and nd == dead[0] and t1 + 0.05 >= dead[1]:
                continue
            msgs.append((self.ns(nd, t1 + 0.05), {'topic': 'cw.steps.v1', 'key': job, 'value': {
                'v': 1, 'job': job, 'rank': r, 'iteration': it, 't_start_ns': self.ns(nd, t0), 't_end_ns': self.ns(nd, t1),
                'phases': {'forward_ms': round(f * 1e3, 3), 'backward_ms': round(bw * 1e3, 3), 'optimizer_ms': round(op * 1e3, 3)}}}))
        # ---- heartbeats (probe's own counters, so dropped records still count)
        series = {}
        for hk, lst in self.hb_src.items():
            lst.sort()
            seqs = np.array([x[0] for x in lst])
            ve = np.maximum.accumulate(np.array([x[1] for x in lst]))
            tsv = np.array([x[2] for x in lst])
            vn = np.array([x[3] if x[3] is not None else np.inf for x in lst])
            # completion counter: highest k such that all <= k completed and visible
            vn = np.maximum.accumulate(vn)
            ten = np.array([x[4] for x in lst])
            series[hk] = (seqs, ve, tsv, vn, ten)
        hb_delay = self.faults.get('hb_delay')   # node
        by_node_comm = defaultdict(list)
        for key, c in self.comms.items():
            for m in c['members']:
                by_node_comm[(self.node(m), key)].append(m)
        t_first = self.start + 1.0
        for (nd, key), members in sorted(by_node_comm.items(), key=lambda x: (x[0][0], str(x[0][1]))):
            c = self.comms[key]
            ph = (dh(job, nd, 'hb') % 997) / 997
            tstop = lim
            if (nd, key) in destroyed:
                tstop = min(lim + 1.0, max(destroyed[(nd, key)]) + 0.5)
            if dead and nd == dead[0]:
                tstop = min(tstop, dead[1])
            t = math.floor(t_first) + ph
            while t <= min(tstop, cap_end):
                rl = []
                for m in members:
                    ent = {'rank': m}
                    if c['p2p']:
                        ent.update(started=-1, completed=-1, t_last_start_ns=0, t_last_end_ns=0)
                        p2 = []
                        for (peer, opc) in ((c['members'].index(m) - 1, SEND), (c['members'].index(m) - 1, RECV),
                                            (c['members'].index(m) + 1, SEND), (c['members'].index(m) + 1, RECV)):
                            sr = series.get((m, key, (peer, opc)))
                            if sr is None:
                                continue
                            s_, c_ = self._cnt(sr, t)
                            p2.append({'peer': peer, 'op': 'send' if opc == SEND else 'recv', 'started': s_[0], 'completed': c_[0]})
                        ent['p2p'] = p2
                    else:
                        sr = series.get((m, key, 'c'))
                        if sr is None:
                            ent.update(started=-1, completed=-1, t_last_start_ns=0, t_last_end_ns=0)
                        else:
                            (sa, ta), (ca, tb) = self._cnt(sr, t)
                            ent.update(started=sa, completed=ca,
                                       t_last_start_ns=self.ns(nd, ta) if sa >= 0 else 0,
                                       t_last_end_ns=self.ns(nd, tb) if ca >= 0 else 0)
                    rl.append(ent)
                val = {'v': 1, 'job': job, 'node': self.hosts[nd], 'ts_ns': self.ns(nd, t), 'comm': '%016x' % c['id'], 'ranks': rl}
                mts = self.ns(nd, t)
                if hb_delay is not None and nd == hb_delay:
                    mts += int(rng.uniform(1.0, 3.0) * 1e9)
                msgs.append((mts, {'topic': 'cw.progress.v1', 'key': '%s/%016x' % (job, c['id']), 'value': val}))
                t += 1.0
        return msgs

    @staticmethod
    def _cnt(sr, t):
        seqs, ve, tsv, vn, ten = sr
        i = int(np.searchsorted(ve, t, 'right'))
        j = int(np.searchsorted(vn, t, 'right'))
        sa = int(seqs[i - 1]) if i else -1
        ca = int(seqs[j - 1]) if j else -1
        return (sa, float(tsv[i - 1]) if i else 0.0), (ca, float(ten[j - 1]) if j else 0.0)

    def iter_time(self, before=None):
        d = [t1 - t0 for (r, it, t0, t1, *_x) in self.steps if r == 0 and (before is None or t1 < before) and it > self.it0 + 1]
        return float(np.median(d)) if d else self.T


# ==================================================================== self checks
def check_capture(lines, jobs, truth):
    errs = []
    recs_by = defaultdict(list)
    hbs = []
    comm_members = {}
    for j in jobs:
        for key, c in j.comms.items():
            comm_members[(j.job, c['id'])] = c['members']
    for ts, m in lines:
        if m['topic'] == 'cw.calls.v1':
            raw = base64.b64decode(m['value_b64'])
            magic, ver, size, cnt, res = struct.unpack('<4sHHII', raw[:16])
            if magic != b'CWB1' or ver != 1 or size != 64 or res != 0 or len(raw) != 16 + 64 * cnt:
                errs.append('bad batch framing %s' % m['key'])
                continue
            a = np.frombuffer(raw[16:], REC)
            job, ch = m['key'].split('/')
            if not np.all(a['comm'] == int(ch, 16)):
                errs.append('record comm != key comm in %s' % m['key'])
            done = (a['flags'] & COMPLETED) != 0
            if np.any(done != (a['t_end_ns'] != 0)):
                errs.append('t_end set iff COMPLETED violated in %s' % m['key'])
            mem = comm_members.get((job, int(ch, 16)))
            if mem is None:
                errs.append('unknown comm %s' % m['key'])
                continue
            cr = a['comm_rank']
            if np.any(cr < 0) or np.any(cr >= len(mem)) or np.any(np.array(mem)[np.clip(cr, 0, len(mem) - 1)] != a['rank']) \
                    or np.any(a['nranks'] != len(mem)):
                errs.append('rank/comm_rank/nranks mismatch %s' % m['key'])
            recs_by[(job, int(ch, 16))].append((ts, a))
        elif m['topic'] == 'cw.progress.v1':
            hbs.append((ts, m['value']))
    # seq contiguity and collective completion
    delivered = defaultdict(list)     # (job, rank, comm) -> (msg ts, seq, started?)
    for (job, cid), lst in recs_by.items():
        a = np.concatenate([x[1] for x in lst])
        mts = np.concatenate([np.full(len(x[1]), x[0]) for x in lst])
        calls = a['kind'] == K_CALL
        coll = calls & (a['op'] != SEND) & (a['op'] != RECV)
        dropper = None
        for j in jobs:
            if j.job == job and j.faults.get('drop'):
                dropper = j.faults['drop'][0]
        for r in np.unique(a['rank'][coll]):
            if r == dropper:
                continue
            s = np.unique(a['seq'][coll & (a['rank'] == r)])
            if len(s) and (s[0] != 0 or s[-1] != len(s) - 1):
                errs.append('seq gap job %s rank %d comm %016x' % (job, r, cid))
        for r, peer, op in set(zip(a['rank'][calls & ~coll].tolist(), a['peer'][calls & ~coll].tolist(), a['op'][calls & ~coll].tolist())):
            if r == dropper:
                continue
            msk = calls & (a['rank'] == r) & (a['peer'] == peer) & (a['op'] == op)
            s = np.unique(a['seq'][msk])
            if len(s) and (s[0] != 0 or s[-1] != len(s) - 1):
                errs.append('p2p seq gap job %s rank %d comm %016x' % (job, r, cid))
        comp = coll & ((a['flags'] & COMPLETED) != 0)
        if comp.any():
            mem = comm_members[(job, cid)]
            seqs, inv, cnts = np.unique(a['seq'][comp], return_inverse=True, return_counts=True)
            tend = a['t_end_ns'][comp]
            lo = np.full(len(seqs), np.iinfo(np.int64).max)
            hi = np.full(len(seqs), np.iinfo(np.int64).min)
            np.minimum.at(lo, inv, tend)
            np.maximum.at(hi, inv, tend)
            # node clocks differ by up to 10 ms + drift; enq poller 10 ms
            bad = (hi - lo) > 25_000_000
            if bad.any():
                errs.append('collective completions spread > 25 ms job %s comm %016x seq %d' % (job, cid, seqs[bad][0]))
        st_mask = coll
        rk = a['rank'][st_mask]
        sq = a['seq'][st_mask]
        for r_, s_, t_, c_ in zip(rk.tolist(), sq.tolist(), mts[st_mask].tolist(), ((a['flags'][st_mask] & COMPLETED) != 0).tolist()):
            delivered[(job, r_, cid, c_)].append((t_, s_))
    # heartbeats claim only what is delivered within 0.3 s
    dl = {}
    for k, v in delivered.items():
        v.sort()
        tt = np.array([x[0] for x in v])
        ss = np.maximum.accumulate(np.array([x[1] for x in v], np.int64))
        dl[k] = (tt, ss)
    nbad = 0
    for ts, v in hbs[::7]:
        if v['ts_ns'] > truth['capture_end_ns'] - 400_000_000:
            continue    # the recording stops before the batch that follows this heartbeat
        cid = int(v['comm'], 16)
        for e in v['ranks']:
            for fld, c in (('started', False), ('completed', True)):
                if e[fld] < 0:
                    continue
                key = (v['job'], e['rank'], cid, c)
                if key not in dl:
                    if not any(j.faults.get('drop') and j.faults['drop'][0] == e['rank'] for j in jobs):
                        nbad += 1
                    continue
                tt, ss = dl[key]
                i = np.searchsorted(tt, v['ts_ns'] + 300_000_000, 'right')
                if i == 0 or ss[i - 1] < e[fld]:
                    if not any(j.faults.get('drop') and j.faults['drop'][0] == e['rank'] for j in jobs):
                        nbad += 1
                        if nbad <= 3:
                            errs.append('hb %s rank %d %s=%d at %.3f s, delivered %d' % (
                                v['job'], e['rank'], fld, e[fld], (v['ts_ns'] - T0_NS) / 1e9, ss[i - 1] if i else -1))
    if nbad:
        errs.append('%d heartbeat counters ahead of delivered records' % nbad)
    # truths
    for jt in truth['jobs']:
        j = [x for x in jobs if x.job == jt['job']][0]
        if jt['kind'] in ('hang', 'restart') and jt.get('culprits'):
            for c in jt['culprits']:
                if j.st[c]['waiting'] is not None:
                    errs.append('hang culprit %d is inside a call' % c)
                if c not in j.onset:
                    errs.append('hang culprit %d never stopped' % c)
            waiting = [r for r in range(j.W) if j.st[r]['waiting'] is not None and r not in jt['culprits']]
            on_culprit = 0
            for r in waiting:
                ik = j.st[r]['waiting']
                I = j.inst[ik]
                key = ik[0]
                mem = j.comms[key]['members']
                if ik[1] == 'p2p':
                    mem = [mem[ik[2]], mem[ik[3]]]
                if any(c in mem and c not in I['arr'] for c in jt['culprits']):
                    on_culprit += 1
            if on_culprit == 0:
                errs.append('no rank waits on the hang culprit')
            onset = max(j.onset[c] for c in jt['culprits'] if c in j.onset) if j.onset else 0
            last = max((x[7] for x in j.records if x[0] == K_CALL and x[7] > 0), default=0)
            if jt['kind'] == 'hang':
                if last > onset + 10:
                    errs.append('job not frozen 10 s after the onset (last completion %.1f s later)' % (last - onset))
                if onset > truth['capture_end_s'] - 25:
                    errs.append('too little capture left after the hang onset')
        elif jt['kind'] in ('healthy', 'slow_rank', 'structural'):
            stuck = [r for r in range(j.W) if j.st[r]['waiting'] is not None and j.inst[j.st[r]['waiting']]['arr'].get(r, 1e18) < j.end - 1]
            if stuck:
                errs.append('job %s: %d ranks stuck in a call before the end' % (j.job, len(stuck)))
    return errs


# ==================================================================== scenarios
def S(name, probe, desc):
    def deco(f):
        SCEN[name] = (f, probe, desc)
        return f
    return deco


SCEN = {}


def node_ranks(n):
    return list(range(n * GPN, (n + 1) * GPN))


def one(sc, seed, job_kw, truth_kw, cap_end=None):
    j = Job(sc, 'fl-%s-%d' % (sc.split('_')[0], seed % 10000), seed, **job_kw)
    j.simulate()
    t = dict(job=j.job, probe=j.probe, ranks=j.W, layout='TP%d PP%d DP%d%s' % (j.TP, j.PP, j.DP, ' EP%d' % j.moe['EP'] if j.moe else ''))
    t.update(truth_kw)
    return [j], [t], (cap_end or j.end)


@S('f00_healthy', 'gpu', 'control, 64 ranks TP4 PP2 DP8')
def f00(sc, seed):
    return one(sc, seed, dict(TP=4, PP=2, DP=8, probe='gpu', end=60), dict(kind='healthy'))


@S('f01_hetero_node', 'gpu', 'node-03 an older GPU generation: 1.22x in every phase from the start')
def f01(sc, seed):
    return one(sc, seed, dict(TP=4, PP=2, DP=8, probe='gpu', end=60, faults={'slow': [(set(node_ranks(3)), 0, 1e9, 1.22)]}),
               dict(kind='structural', allowed=node_ranks(3), onset_s=0.0))


@S('f02_cpu_contention_node', 'gpu', 'host CPU contention on node-05 from 30 s (launch-bound, ~1.3x)')
def f02(sc, seed):
    return one(sc, seed, dict(TP=8, PP=2, DP=4, probe='gpu', end=70, faults={'launch': (set(node_ranks(5)), 30.0, 1.3)}),
               dict(kind='slow_rank', culprits=node_ranks(5), onset_s=30.0, accept='split'))


@S('f02b_cpu_contention_rank', 'enq', 'noisy CPU neighbour of rank 13 only, from 25 s (launch-bound, ~1.35x)')
def f02b(sc, seed):
    return one(sc, seed, dict(TP=4, PP=2, DP=4, probe='enq', end=65, faults={'launch': ({13}, 25.0, 1.35)}),
               dict(kind='slow_rank', culprits=[13], onset_s=25.0))


@S('f03_rank0_periodic', 'gpu', 'rank 0 logs/evaluates every 10th iteration (+40 % on those)')
def f03(sc, seed):
    return one(sc, seed, dict(TP=4, PP=2, DP=4, probe='gpu', end=70, faults={'periodic': ({0}, 10, 0.4)}),
               dict(kind='healthy', allowed=[0]))


MOE = dict(EP=8, L=4)


@S('f04_moe_routing', 'gpu', 'MoE EP8 all-to-all, random per-iteration expert load (slowest rank changes, <= 1.3x)')
def f04(sc, seed):
    return one(sc, seed, dict(TP=2, PP=1, DP=32, probe='gpu', end=60, T=1.2, moe=MOE, faults={'routing': 0.3}),
               dict(kind='healthy'))


@S('f04b_moe_persistent', 'gpu', 'same, rank 37 1.5x in every phase from 20 s')
def f04b(sc, seed):
    return one(sc, seed, dict(TP=2, PP=1, DP=32, probe='gpu', end=60, T=1.2, moe=MOE,
                              faults={'routing': 0.3, 'slow': [({37}, 20.0, 1e9, 1.5)]}),
               dict(kind='slow_rank', culprits=[37], onset_s=20.0))


@S('f04c_moe_hang', 'enq', 'MoE EP8 (TP1 DP64), rank 45 host stops at 35 s (enq probe)')
def f04c(sc, seed):
    return one(sc, seed, dict(TP=1, PP=1, DP=64, probe='enq', end=65, T=1.2, moe=MOE,
                              faults={'routing': 0.2, 'hang': {45: (35.0, None)}}),
               dict(kind='hang', culprits=[45], onset_s=None))


@S('f05_subgroup_hang', 'gpu', '4-rank custom group {1,14,17,30} (created by its members only); rank 17 stops before it at 35 s')
def f05(sc, seed):
    return one(sc, seed, dict(TP=4, PP=2, DP=4, probe='gpu', end=65, sub=[1, 14, 17, 30],
                              faults={'hang': {17: (35.0, 'sub')}}),
               dict(kind='hang', culprits=[17], onset_s=None))


@S('f06_two_hangs', 'gpu', 'ranks 9 (node-01) and 50 (node-06) stop at the same moment (35 s)')
def f06(sc, seed):
    return one(sc, seed, dict(TP=4, PP=2, DP=8, probe='gpu', end=65, faults={'hang': {9: (35.0, None), 50: (35.0, None)}}),
               dict(kind='hang', culprits=[9, 50], onset_s=None, accept='split'))


@S('f07_last_stage_tp8', 'gpu', 'TP8 PP4 DP1; last stage 1.1x by design; rank 29 (last stage) 1.3x from 20 s')
def f07(sc, seed):
    return one(sc, seed, dict(TP=8, PP=4, DP=1, M=4, probe='gpu', end=60, faults={'stage': {3: 1.1}, 'slow': [({29}, 20.0, 1e9, 1.3)]}),
               dict(kind='slow_rank', culprits=[29], onset_s=20.0, advisory_sets=[node_ranks(3)]))


@S('f08_dp_heavy', 'enq', 'TP8 PP1 DP16 (128 ranks), rank 77 1.25x from 20 s')
def f08(sc, seed):
    return one(sc, seed, dict(TP=8, PP=1, DP=16, M=2, probe='enq', end=55, faults={'slow': [({77}, 20.0, 1e9, 1.25)]}),
               dict(kind='slow_rank', culprits=[77], onset_s=20.0))


@S('f09_large_1024', 'gpu', 'TP8 PP8 DP16 (1024 ranks), rank 613 1.3x from 15 s')
def f09(sc, seed):
    return one(sc, seed, dict(TP=8, PP=8, DP=16, M=2, T=0.5, probe='gpu', end=45, faults={'slow': [({613}, 15.0, 1e9, 1.3)]}),
               dict(kind='slow_rank', culprits=[613], onset_s=15.0))


@S('f10_ring_overflow', 'gpu', "rank 12's ring overflows: every record of it lost 30-34 s; job healthy")
def f10(sc, seed):
    return one(sc, seed, dict(TP=4, PP=2, DP=4, probe='gpu', end=60, faults={'drop': (12, 30.0, 34.0)}),
               dict(kind='healthy'))


@S('f11_hb_delayed', 'blk', "node-02's agent delivers heartbeats 1-3 s late; job healthy (blocking probe)")
def f11(sc, seed):
    return one(sc, seed, dict(TP=4, PP=2, DP=4, probe='blk', end=60, faults={'hb_delay': 2}),
               dict(kind='healthy'))


@S('f12_restart', 'gpu', 'rank 5 crashes at 25 s, launcher kills all 8 s later, job restarts 20 s after (new comms)')
def f12(sc, seed):
    jid = 'fl-f12-%d' % (seed % 10000)
    a = Job(sc, jid, seed, TP=4, PP=2, DP=4, probe='gpu', end=33.0, margin=0.0, run_tag='run1',
            faults={'hang': {5: (25.0, 'iter')}})
    a.simulate()
    td = 25.0 + 8.0
    # restart resumes from iteration 20 (last checkpoint) on the same hosts
    b = Job(sc, jid, seed + 1, TP=4, PP=2, DP=4, probe='gpu', start=td + 20.0, end=95.0, run_tag='run2',
            hosts=a.hosts, node_clock=a.node_clock, it0=20)
    b.simulate()
    a._teardown = (td, {5: None})
    t = dict(job=jid, probe='gpu', ranks=32, layout='TP4 PP2 DP4', kind='restart', culprits=[5], onset_s=None,
             teardown_s=td, restart_s=td + 20.0)
    return [a, b], [t], 95.0


@S('f13_five_jobs', 'mix', 'five jobs at once, steps 0.2/1/3/8/20 s; the 3 s job hangs (rank 21 at 40 s)')
def f13(sc, seed):
    specs = [('A', dict(TP=2, PP=1, DP=8, M=1, T=0.2, probe='gpu'), dict(kind='healthy')),
             ('B', dict(TP=4, PP=2, DP=4, M=4, T=1.0, probe='enq'), dict(kind='healthy')),
             ('C', dict(TP=4, PP=2, DP=4, M=4, T=3.0, probe='gpu', faults={'hang': {21: (40.0, None)}}),
              dict(kind='hang', culprits=[21], onset_s=None)),
             ('D', dict(TP=8, PP=1, DP=2, M=2, T=8.0, probe='blk'), dict(kind='healthy')),
             ('E', dict(TP=4, PP=2, DP=2, M=4, T=20.0, probe='gpu'), dict(kind='healthy'))]
    jobs, truths = [], []
    for i, (nm, kw, tk) in enumerate(specs):
        kw = dict(kw)
        kw.setdefault('faults', {})
        j = Job(sc, 'fl-f13%s-%d' % (nm.lower(), seed % 10000), seed * 7 + i, start=i * 1.7, end=90.0, **kw)
        j.simulate()
        jobs.append(j)
        t = dict(job=j.job, probe=j.probe, ranks=j.W, layout='TP%d PP%d DP%d, %.1f s steps' % (j.TP, j.PP, j.DP, j.T))
        t.update(tk)
        truths.append(t)
    return jobs, truths, 90.0


@S('f14_late_onset', 'gpu', '300 s capture, rank 19 1.2x from 240 s')
def f14(sc, seed):
    return one(sc, seed, dict(TP=4, PP=2, DP=4, M=2, T=2.0, probe='gpu', end=300, faults={'slow': [({19}, 240.0, 1e9, 1.2)]}),
               dict(kind='slow_rank', culprits=[19], onset_s=240.0))


@S('f15_link_congestion', 'gpu', 'link between node-02 and node-03 congested for the whole run (x20 on transfers spanning them)')
def f15(sc, seed):
    return one(sc, seed, dict(TP=8, PP=2, DP=4, probe='gpu', end=60, faults={'link': (2, 3, 20.0)}),
               dict(kind='link', allowed=node_ranks(2) + node_ranks(3), onset_s=0.0))


@S('f16_gpu_blip', 'gpu', 'rank 22 GPU stalls once for 2 s at 30 s')
def f16(sc, seed):
    return one(sc, seed, dict(TP=4, PP=2, DP=4, probe='gpu', end=60, faults={'stall': (22, 30.0, 2.0)}),
               dict(kind='healthy', allowed=[22]))


@S('f17_two_slow', 'enq', 'ranks 11 (node-01) and 52 (node-06) both 1.3x from 20 s')
def f17(sc, seed):
    return one(sc, seed, dict(TP=4, PP=2, DP=8, probe='enq', end=60, faults={'slow': [({11, 52}, 20.0, 1e9, 1.3)]}),
               dict(kind='slow_rank', culprits=[11, 52], onset_s=20.0, accept='split'))


@S('f18_dataloader_noise', 'gpu', 'healthy, but any rank stalls 0.3-1.5 s in its data loader with p=1.5 % per iteration')
def f18(sc, seed):
    return one(sc, seed, dict(TP=4, PP=2, DP=8, probe='gpu', end=60, faults={'dlstall': (0.015, 0.3, 1.5)}),
               dict(kind='healthy'))


@S('f19_agent_dead', 'gpu', "node-02's agent dies at 30 s (nothing more from it); training goes on")
def f19(sc, seed):
    return one(sc, seed, dict(TP=4, PP=2, DP=4, probe='gpu', end=60, faults={'agent_dead': (2, 30.0)}),
               dict(kind='agent_lost', allowed=node_ranks(2)))


@S('f20_hang_blk_dp_heavy', 'blk', 'TP8 PP1 DP16 blocking probe, rank 90 stops at 30 s')
def f20(sc, seed):
    return one(sc, seed, dict(TP=8, PP=1, DP=16, M=2, probe='blk', end=60, faults={'hang': {90: (30.0, None)}}),
               dict(kind='hang', culprits=[90], onset_s=None))


@S('f21_hetero_tp8_enq', 'enq', 'TP8 PP2 DP4: node-06 older GPUs 1.18x from the start (enq probe)')
def f21(sc, seed):
    return one(sc, seed, dict(TP=8, PP=2, DP=4, probe='enq', end=60, faults={'slow': [(set(node_ranks(6)), 0, 1e9, 1.18)]}),
               dict(kind='structural', allowed=node_ranks(6), onset_s=0.0))


@S('f22_slow_256_enq', 'enq', 'TP4 PP4 DP16 (256 ranks), rank 141 1.25x from 20 s')
def f22(sc, seed):
    return one(sc, seed, dict(TP=4, PP=4, DP=16, M=2, T=1.5, probe='enq', end=55, faults={'slow': [({141}, 20.0, 1e9, 1.25)]}),
               dict(kind='slow_rank', culprits=[141], onset_s=20.0))


# ==================================================================== main
def build(name, seed, out):
    f, probe, desc = SCEN[name]
    t_g = time.time()
    jobs, truths, cap_end = f(name, seed)
    lines = []
    for j in jobs:
        td = getattr(j, '_teardown', None)
        if td:
            tdt, reap = td
            c5 = list(reap)[0]
            reap_t = {c5: j.onset.get(c5, tdt - 8) + 1.0}
            lines += j.messages(cap_end, teardown=tdt, crash_reap=reap_t)
        else:
            lines += j.messages(cap_end)
    lines.sort(key=lambda x: x[0])
    truth = dict(scenario=name, description=desc, seed=seed, capture_end_s=cap_end,
                 capture_end_ns=T0_NS + int(cap_end * 1e9), jobs=[])
    for t in truths:
        js = [j for j in jobs if j.job == t['job']]
        j0 = js[0]
        if t['kind'] in ('hang', 'restart'):
            on = max(j0.onset[c] for c in t['culprits'])
            t['onset_s'] = on
        t['onset_ns'] = (T0_NS + int(t['onset_s'] * 1e9)) if t.get('onset_s') is not None else None
        t['iter_s'] = round(j0.iter_time(before=t.get('onset_s') if t.get('onset_s') else None), 4)
        t.setdefault('culprits', [])
        t.setdefault('allowed', [])
        t['nodes'] = {str(r): j0.hosts[j0.node(r)] for r in set(t['culprits']) | set(t['allowed'])}
        truth['jobs'].append(t)
    errs = check_capture(lines, jobs, truth)
    truth['gen_errors'] = errs
    with open(os.path.join(out, name + '.cwcap'), 'w') as fh:
        for ts, m in lines:
            m = dict(m)
            m['ts_ns'] = int(ts)
            fh.write(json.dumps(m, separators=(',', ':')) + '\n')
    with open(os.path.join(out, name + '.truth.json'), 'w') as fh:
        json.dump(truth, fh, indent=1)
    nrec = sum(len(j.records) for j in jobs)
    print('%-26s %5d ranks %6.1fs  records %7d  msgs %6d  %s  (%.1fs)' % (
        name, sum(j.W for j in jobs), cap_end, nrec, len(lines), 'OK' if not errs else 'GEN-ERR: ' + '; '.join(errs[:4]),
        time.time() - t_g), flush=True)
    return not errs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--list', action='store_true')
    ap.add_argument('prefix', nargs='*')
    a = ap.parse_args()
    if a.list:
        for n, (f, p, d) in SCEN.items():
            print('%-26s %-4s %s' % (n, p, d))
        return 0
    if not a.out:
        ap.error('--out is required')
    os.makedirs(a.out, exist_ok=True)
    ok = True
    for i, n in enumerate(SCEN):
        if a.prefix and not any(n.startswith(p) for p in a.prefix):
            continue
        ok &= build(n, a.seed * 1000 + i, a.out)
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
