#!/usr/bin/env python3
"""Edge-case traffic for commwatch, written from the wire spec and DOMAIN.md only.

One paragraph: every scenario is a discrete-event simulation of per-rank programs
(Megatron-style 1F1B pipelines with TP/PP/DP communicators, sequence-parallel TP,
single-node TP, MoE all-to-all over an expert-parallel comm, a sub-communicator
created by ncclCommSplit mid-run, a final checkpoint/barrier/teardown), executed on
one CUDA stream per rank with separate host (enqueue) and device timelines. A
collective completes on every member only when its last member has reached it on the
device, plus a transfer time; P2P send/recv parts pair up by (comm, src, dst, k) and a
batched group (send_forward_recv_backward etc.) ends when all its parts have paired.
Probes: GPU-timed (device entry/exit, polled every 20 ms: calls shorter than a poll are
written once, completed; longer ones are written at entry and at completion),
host-enqueue (entry = host enqueue time, several calls outstanding, completion when
the event poller sees it) and blocking (gloo: host = device). Node agents batch
records per node and communicator every 200 ms and send progress heartbeats per node
and communicator every second; topology at start, `cw.steps.v1` per rank and
iteration (where the Megatron hook is present), NVML-style `cw.hw.v1` samples in a few
scenarios, node clocks offset by up to +-20 ms with a few ppm drift. Faults are
injected in the programs or in the timing model, and every scenario writes its truth.

Model simplifications (stated honestly):
- One stream per rank: DP reductions do not overlap backward; no CUDA graphs.
- Transfer time = latency + algorithm factor x bytes / bandwidth x lognormal noise,
  times the worst factor of any member (a rank slow in its comm kernels slows the
  whole ring) and of the comm itself (a degraded NVLink); no congestion model.
- Host enqueue cost of a compute block is a fixed fraction (about 25 %) of its device
  time; the host syncs with the device once per iteration (grad-norm .item()), so the
  host runs at most one iteration ahead; no launch-queue depth limit.
- A P2P group is one fused kernel: all its parts get the group's end time.
- Phases in `cw.steps.v1` are sums of device time of the ops of each phase (as CUDA
  events around sections would measure, waits included); step t_start/t_end are host
  times at the iteration boundaries.
- The GPU-timed probe knows a call's device start only at its next 20 ms poll; the
  host-enqueue probe sees completion 0.2-3 ms after the device finished.
- A probe restart drops the ring's unread records and everything written in the gap;
  the restarted probe keeps per-comm sequence numbers (taken from NCCL) and writes no
  new COMM_INIT; the agent leaves the rank out of heartbeats during the gap.
- A hung rank's process stays alive (its node keeps heartbeating); a job that ends
  cleanly destroys its comms (COMM_DESTROY) and its agents stop heartbeating them.
- ncclCommSplit is modelled as a 0.1-0.3 s host block on the members plus COMM_INIT;
  non-members see nothing.
"""
import argparse
import base64
import json
import math
import os
from collections import deque

import numpy as np

REC = np.dtype([('kind', 'u1'), ('op', 'u1'), ('flags', '<u2'), ('rank', '<i4'), ('comm', '<u8'),
                ('seq', '<u8'), ('t_start_ns', '<i8'), ('t_end_ns', '<i8'), ('bytes', '<u8'),
                ('comm_rank', '<i4'), ('peer', '<i4'), ('nranks', '<u4'), ('aux', '<u4')])
assert REC.itemsize == 64
assert [REC.fields[n][1] for n in REC.names] == [0, 1, 2, 4, 8, 16, 24, 32, 40, 48, 52, 56, 60]

K_CALL, K_INIT, K_DESTROY = 1, 2, 3
AR, AG, RS, BC, RED, SEND, RECV, A2A, BAR = 1, 2, 3, 4, 5, 6, 7, 8, 9
F_COMPLETED, F_GPU, F_GRAPH, F_ENQ, F_LOST = 1, 2, 4, 8, 16

# program op codes
COMP, HOST, SYNC, COLL, P2P, ITER, ITEREND, INIT, DESTROY = range(9)
PH_NONE, PH_FWD, PH_BWD, PH_OPT = 0, 1, 2, 3

T0_BASE = 1_790_000_000_000_000_000  # 2026-09-22, ns


class Comm:
    __slots__ = ('idx', 'cid', 'members', 'pos', 'kind', 'bw', 'lat', 'xf', 'nnodes', 'init_t',
                 'p2p', 'job')

    def __init__(self, job, idx, cid, members, kind, bw, lat):
        self.job, self.idx, self.cid, self.members, self.kind = job, idx, cid, list(members), kind
        self.pos = {r: i for i, r in enumerate(self.members)}
        self.bw, self.lat, self.xf = bw, lat, []
        self.nnodes = len({job.ranks[r].node for r in members})
        self.init_t = {}
        self.p2p = False


class Rank:
    __slots__ = ('g', 'node', 'local', 'probe', 'coords', 'prog', 'cf', 'xf', 'iter_cf', 'stop',
                 'gc', 'gap', 'ctr', 'pctr', 'nctr', 'poll_ph', 'hw')

    def __init__(self, g, node, local, probe):
        self.g, self.node, self.local, self.probe = g, node, local, probe
        self.coords, self.prog = None, []
        self.cf, self.xf, self.iter_cf = [], [], {}
        self.stop = None          # (t_after, comm_idx or None)
        self.gc = None            # (first, period, dur)
        self.gap = None           # probe restart (t0, t1)
        self.ctr, self.pctr, self.nctr = {}, {}, {}
        self.poll_ph = 0.0
        self.hw = None


def factor(lst, t):
    f = 1.0
    for a, b, x in lst:
        if a <= t < b:
            f *= x
    return f


class Job:
    def __init__(self, jid, rng, nranks, probe='gpu', gpn=8, node_names=None, clocks=None,
                 t0_ns=T0_BASE, steps=True, hw=False, local_base=0):
        self.jid, self.rng, self.t0_ns = jid, rng, t0_ns
        self.steps_on, self.hw_on = steps, hw
        nn = (nranks + gpn - 1) // gpn
        self.node_names = node_names or [f'node-{i:03d}' for i in range(nn)]
        # clock: (offset s, drift s/s) per node; agent flush phase and heartbeat phase
        if clocks is None:
            clocks = [(float(rng.uniform(-0.02, 0.02)), float(rng.uniform(-3e-6, 3e-6)),
                       float(rng.uniform(0, 0.2)), float(rng.uniform(0, 1.0))) for _ in range(nn)]
        self.clocks = clocks
        self.ranks = []
        for g in range(nranks):
            pr = probe[g] if isinstance(probe, (list, tuple)) else probe
            rk = Rank(g, g // gpn, local_base + g % gpn, pr)
            rk.poll_ph = float(rng.uniform(0, 0.02))
            self.ranks.append(rk)
        self.comms = []
        self.gpu_uuid = [f'GPU-{rng.integers(0, 2**32):08x}-{rng.integers(0, 2**16):04x}-{g:04x}'
                         for g in range(nranks)]
        self.used_cids = set()
        self.truth = None
        self.events = {}  # filled by simulate
        self.T_end = None

    def new_comm(self, members, kind, bw, lat):
        cid = int(self.rng.integers(1, 2**63)) | (int(self.rng.integers(0, 2)) << 63)
        c = Comm(self, len(self.comms), cid, members, kind, bw, lat)
        self.comms.append(c)
        return c

    def clk(self, node, t):
        off, dr = self.clocks[node][0], self.clocks[node][1]
        return np.int64(self.t0_ns) + np.round((np.asarray(t) + off + dr * np.asarray(t)) * 1e9).astype(np.int64)

    # ---- program helpers -------------------------------------------------
    def coll(self, r, c, op, nbytes, ph, root=-1):
        rk = self.ranks[r]
        s = rk.ctr.get(c.idx, 0)
        rk.ctr[c.idx] = s + 1
        a = rk.nctr.get((c.idx, op), 0)
        rk.nctr[(c.idx, op)] = a + 1
        rk.prog.append((COLL, c.idx, op, nbytes, s, a, ph, root))

    def p2p(self, r, parts, ph):
        """parts: list of (is_send, comm, peer_global, nbytes)"""
        rk = self.ranks[r]
        out = []
        for is_send, c, peer, nb in parts:
            key = (c.idx, peer, is_send)
            k = rk.pctr.get(key, 0)
            rk.pctr[key] = k + 1
            out.append((is_send, c.idx, peer, nb, k))
            c.p2p = True
        if out:
            rk.prog.append((P2P, tuple(out), ph))

    def comp(self, r, dur, ph, it):
        self.ranks[r].prog.append((COMP, dur, ph, it))


# ---------------------------------------------------------------------------
# transfer model
def algo(op, n):
    if n <= 1:
        return 0.0
    if op == AR:
        return 2.0 * (n - 1) / n
    if op in (AG, RS, A2A):
        return (n - 1) / n
    if op in (BAR,):
        return 0.0
    return 1.0


# ---------------------------------------------------------------------------
# the engine
def simulate(job, T_end):
    R = job.ranks
    nR = len(R)
    rng = job.rng
    C = job.comms
    h = [0.0] * nR
    d = [0.0] * nR
    pc = [0] * nR
    state = [0] * nR  # 0 runnable/running, 1 blocked, 2 stopped(hang), 3 done
    gc_next = [r.gc[0] if r.gc else 1e18 for r in R]
    # calls: list of lists [rank, comm, op, seq, bytes, peer, aux, enq, start, end, ph, kind]
    calls = []
    insts = {}
    p2pw = {}
    groups = {}
    ph_acc = [[0.0, 0.0, 0.0, 0.0] for _ in range(nR)]
    steps = []     # (rank, it, h_start, h_end, fwd, bwd, opt)
    iter_start = [None] * nR
    stops = {}
    inits = []     # (rank, comm, t, kind)
    runq = deque(range(nR))
    inq = [True] * nR
    lognorm = rng.lognormal

    def xfer(c, op, nb, t, members):
        base = c.lat + algo(op, len(c.members)) * nb / c.bw
        f = factor(c.xf, t)
        mf = 1.0
        for m in members:
            xf = R[m].xf
            if xf:
                mf = max(mf, factor(xf, t))
        return base * f * mf * float(lognorm(0.0, 0.05))

    def finish_rank(m, end):
        d[m] = end
        if R[m].probe == 'blk':
            h[m] = max(h[m], end)
        if state[m] == 1:
            state[m] = 0
            if not inq[m]:
                runq.append(m)
                inq[m] = True

    while runq:
        r = runq.popleft()
        inq[r] = False
        if state[r] != 0:
            continue
        rk = R[r]
        prog = rk.prog
        blk = rk.probe == 'blk'
        while pc[r] < len(prog):
            hr, dr = h[r], d[r]
            if min(hr, dr) > T_end + 1.0:
                state[r] = 3
                break
            op = prog[pc[r]]
            typ = op[0]
            if rk.stop is not None and hr >= rk.stop[0] and typ in (COLL, P2P, COMP) and \
                    (rk.stop[1] is None or (typ == COLL and op[1] == rk.stop[1])):
                state[r] = 2
                stops[r] = hr
                break
            if hr >= gc_next[r]:
                hr += rk.gc[2]
                gc_next[r] += rk.gc[1]
            pc[r] += 1
            if typ == COMP:
                dur = op[1]
                f = factor(rk.cf, dr) if rk.cf else 1.0
                if rk.iter_cf:
                    f *= rk.iter_cf.get(op[3], 1.0)
                dur *= f
                st = max(dr, hr + 2e-5)
                dr = st + dur
                hr += 0.25 * op[1] + 2e-5
                ph_acc[r][op[2]] += dur
                if blk:
                    hr = dr
                h[r], d[r] = hr, dr
            elif typ == HOST:
                h[r] = hr + op[1]
                if blk:
                    h[r] = max(h[r], dr)
                    d[r] = h[r]
            elif typ == SYNC:
                h[r] = max(hr, dr)
            elif typ == ITER:
                iter_start[r] = (op[1], hr, list(ph_acc[r]))
                h[r] = hr
            elif typ == ITEREND:
                it, hs, acc0 = iter_start[r]
                a = ph_acc[r]
                steps.append((r, it, hs, hr, (a[1] - acc0[1]) * 1e3, (a[2] - acc0[2]) * 1e3,
                              (a[3] - acc0[3]) * 1e3))
                h[r] = hr
            elif typ == INIT:
                c = C[op[1]]
                t = hr + op[2]
                inits.append((r, op[1], t, K_INIT))
                c.init_t[r] = t
                h[r] = t
                d[r] = max(dr, t)
            elif typ == DESTROY:
                inits.append((r, op[1], hr + 0.01, K_DESTROY))
                h[r] = hr + 0.01
            elif typ == COLL:
                _, ci, cop, nb, seq, aux, ph, root = op
                c = C[ci]
                enq = hr
                hr += 2e-5
                st = max(dr, hr)
                cid = len(calls)
                peer = c.pos[c.members[root]] if root >= 0 else -1
                calls.append([r, ci, cop, seq, nb, peer, aux, enq, st, math.nan, ph, 0])
                h[r] = hr
                d[r] = st
                key = (ci, seq)
                ent = insts.get(key)
                if ent is None:
                    ent = insts[key] = [len(c.members), st, []]
                ent[0] -= 1
                if st > ent[1]:
                    ent[1] = st
                ent[2].append(cid)
                if ent[0] == 0:
                    del insts[key]
                    mem = [calls[k][0] for k in ent[2]]
                    end = ent[1] + xfer(c, cop, nb, ent[1], mem)
                    for k in ent[2]:
                        cl = calls[k]
                        e = end + float(rng.uniform(0, 3e-5))
                        cl[9] = e
                        ph_acc[cl[0]][cl[10]] += e - cl[8]
                        finish_rank(cl[0], e)
                    # current rank continues
                    state[r] = 0
                    if blk:
                        h[r] = max(h[r], d[r])
                else:
                    state[r] = 1
                    break
            elif typ == P2P:
                parts, ph = op[1], op[2]
                enq = hr
                hr += 2e-5 * len(parts)
                st = max(dr, hr)
                h[r] = hr
                d[r] = st
                gid = (r, pc[r])
                grp = groups[gid] = [len(parts), st, [], ph, st]
                for is_send, ci, peer, nb, k in parts:
                    c = C[ci]
                    cid = len(calls)
                    calls.append([r, ci, SEND if is_send else RECV, k, nb, c.pos[peer], 0, enq, st,
                                  math.nan, ph, 1])
                    grp[2].append(cid)
                    key = (ci, r, peer, k) if is_send else (ci, peer, r, k)
                    other = p2pw.pop(key, None)
                    if other is None:
                        p2pw[key] = (gid, st)
                    else:
                        ogid, ost = other
                        pend = max(st, ost) + xfer(c, SEND, nb, max(st, ost), (r, ogid[0]))
                        for g_ in (gid, ogid):
                            gg = groups[g_]
                            gg[0] -= 1
                            if pend > gg[1]:
                                gg[1] = pend
                            if gg[0] == 0 and g_ != gid:
                                del groups[g_]
                                e = gg[1] + float(rng.uniform(0, 3e-5))
                                for kk in gg[2]:
                                    calls[kk][9] = e
                                ph_acc[g_[0]][gg[3]] += e - gg[4]
                                finish_rank(g_[0], e)
                if grp[0] == 0:
                    del groups[gid]
                    e = grp[1] + float(rng.uniform(0, 3e-5))
                    for kk in grp[2]:
                        calls[kk][9] = e
                    ph_acc[r][ph] += e - st
                    d[r] = e
                    if blk:
                        h[r] = max(h[r], e)
                else:
                    state[r] = 1
                    break
        else:
            state[r] = 3
    # host-enqueue probes: a rank blocked on the device keeps enqueueing until its next sync
    for r in range(nR):
        rk = R[r]
        if state[r] != 1 or rk.probe != 'enq':
            continue
        hr = h[r]
        for op in rk.prog[pc[r]:]:
            if hr > T_end:
                break
            typ = op[0]
            if typ == SYNC:
                break
            if typ == COMP:
                hr += 0.25 * op[1] + 2e-5
            elif typ == HOST:
                hr += op[1]
            elif typ == COLL:
                _, ci, cop, nb, seq, aux, ph, root = op
                c = C[ci]
                peer = c.pos[c.members[root]] if root >= 0 else -1
                calls.append([r, ci, cop, seq, nb, peer, aux, hr, math.nan, math.nan, ph, 0])
                hr += 2e-5
            elif typ == P2P:
                for is_send, ci, peer, nb, k in op[1]:
                    c = C[ci]
                    calls.append([r, ci, SEND if is_send else RECV, k, nb, c.pos[peer], 0, hr,
                                  math.nan, math.nan, op[2], 1])
                hr += 2e-5 * len(op[1])
            elif typ in (ITER, ITEREND, INIT, DESTROY):
                pass
    job.sim = dict(calls=calls, steps=steps, stops=stops, inits=inits, state=state, h=h, d=d)
    job.T_end = T_end
    return job.sim


# ---------------------------------------------------------------------------
# serialisation
def emit(job, out_lines):
    """Append (ts_ns, json line) for every message of this job to out_lines."""
    sim = job.sim
    T_end = job.T_end
    R = job.ranks
    C = job.comms
    rng = job.rng
    jid = job.jid
    calls = sim['calls']
    n = len(calls)
    A = np.array([c[:7] for c in calls], dtype=np.int64).reshape(-1, 7) if n else np.zeros((0, 7), np.int64)
    Ft = np.array([c[7:10] for c in calls], dtype=np.float64).reshape(-1, 3) if n else np.zeros((0, 3))
    rank, ci, op, seq, nb, peer, aux = (A[:, i] for i in range(7))
    enq, st, end = Ft[:, 0], Ft[:, 1], Ft[:, 2]
    probe = np.array([{'gpu': 0, 'enq': 1, 'blk': 2}[R[r].probe] for r in range(len(R))])[rank] if n else np.zeros(0, int)
    pollph = np.array([rk.poll_ph for rk in R])[rank] if n else np.zeros(0)
    P = 0.02
    # observation times
    gpu = probe == 0
    enqp = probe == 1
    blkp = probe == 2
    st_obs = np.where(gpu, np.ceil((st - pollph) / P) * P + pollph, np.where(enqp, enq, st))
    st_obs = np.where(np.isnan(st) & gpu, np.nan, st_obs)
    lag = rng.uniform(2e-4, 3e-3, n)
    end_obs = np.where(gpu, np.ceil((end - pollph) / P) * P + pollph, np.where(enqp, end + lag, end))
    t_start = np.where(gpu, st, np.where(enqp, enq, st))
    t_end_v = np.where(gpu | blkp, end, end + lag)
    # probe restarts: drop records written in the gap and the unread ring before it
    drop_st = np.zeros(n, bool)
    drop_en = np.zeros(n, bool)
    for rk in R:
        if rk.gap:
            g0, g1 = rk.gap
            ph = job.clocks[rk.node][2]
            last_flush = math.floor((g0 - ph) / 0.2) * 0.2 + ph
            m = rank == rk.g
            drop_st |= m & (st_obs > last_flush) & (st_obs < g1)
            # the restarted probe never learns about calls entered before it attached
            drop_en |= m & (end_obs > last_flush) & ((end_obs < g1) | (st_obs < g1))
    # entry records: enq/blk always; gpu when still running at the poll
    has_end = ~np.isnan(end_obs) & (end_obs <= T_end)
    w_entry = ~np.isnan(st_obs) & (st_obs <= T_end) & ~drop_st
    w_entry &= ~gpu | ~has_end | (end_obs > st_obs)
    w_end = has_end & ~drop_en
    flags_base = np.where(gpu, F_GPU, np.where(enqp, F_ENQ, 0)).astype(np.int64)
    nranks = np.array([len(c.members) for c in C])[ci] if n else np.zeros(0, int)
    cids = np.array([c.cid for c in C], dtype=np.uint64)
    comm_rank = np.array([C[ci[i]].pos[rank[i]] for i in range(n)], dtype=np.int64) if n else np.zeros(0, int)
    node_of = np.array([rk.node for rk in R])
    recs = []

    def mk(mask, completed, wtime):
        k = int(mask.sum())
        a = np.zeros(k, REC)
        a['kind'] = K_CALL
        a['op'] = op[mask]
        a['flags'] = flags_base[mask] | (F_COMPLETED if completed else 0)
        a['rank'] = rank[mask]
        a['comm'] = cids[ci[mask]]
        a['seq'] = seq[mask]
        nodes = node_of[rank[mask]]
        offs = np.array([job.clocks[x][0] for x in range(len(job.clocks))])[nodes]
        drs = np.array([job.clocks[x][1] for x in range(len(job.clocks))])[nodes]
        ts = t_start[mask]
        a['t_start_ns'] = job.t0_ns + np.round((ts + offs + drs * ts) * 1e9).astype(np.int64)
        if completed:
            te = t_end_v[mask]
            a['t_end_ns'] = job.t0_ns + np.round((te + offs + drs * te) * 1e9).astype(np.int64)
        a['bytes'] = nb[mask]
        a['comm_rank'] = comm_rank[mask]
        a['peer'] = peer[mask]
        a['nranks'] = nranks[mask]
        a['aux'] = np.where(gpu[mask], aux[mask] & 0xffffffff, 0)
        recs.append((a, wtime[mask], nodes, ci[mask]))

    mk(w_entry, False, st_obs)
    mk(w_end, True, end_obs)
    # COMM_INIT / COMM_DESTROY
    if sim['inits']:
        ii = [x for x in sim['inits'] if x[2] <= T_end]
        k = len(ii)
        a = np.zeros(k, REC)
        wt = np.zeros(k)
        nodes = np.zeros(k, int)
        cis = np.zeros(k, int)
        for j, (r, c_, t, kind) in enumerate(ii):
            c = C[c_]
            a[j]['kind'] = kind
            a[j]['flags'] = F_COMPLETED
            a[j]['rank'] = r
            a[j]['comm'] = c.cid
            tn = int(job.clk(R[r].node, t))
            a[j]['t_start_ns'] = tn
            a[j]['t_end_ns'] = tn
            a[j]['comm_rank'] = c.pos[r]
            a[j]['peer'] = -1
            a[j]['nranks'] = len(c.members)
            a[j]['aux'] = c.nnodes if kind == K_INIT else 0
            wt[j] = t
            nodes[j] = R[r].node
            cis[j] = c_
        recs.append((a, wt, nodes, cis))
    allrec = np.concatenate([x[0] for x in recs])
    wt = np.concatenate([x[1] for x in recs])
    nodes = np.concatenate([x[2] for x in recs]).astype(np.int64)
    cis = np.concatenate([x[3] for x in recs]).astype(np.int64)
    fph = np.array([job.clocks[x][2] for x in range(len(job.clocks))])[nodes]
    fl = np.ceil((wt - fph) / 0.2).astype(np.int64)
    ft = fl * 0.2 + fph
    keep = ft <= T_end
    allrec, ft, nodes, cis, fl, wt = allrec[keep], ft[keep], nodes[keep], cis[keep], fl[keep], wt[keep]
    order = np.lexsort((wt, cis, fl, nodes))
    allrec, ft, nodes, cis, fl = allrec[order], ft[order], nodes[order], cis[order], fl[order]
    if len(allrec):
        brk = np.flatnonzero((np.diff(nodes) != 0) | (np.diff(fl) != 0) | (np.diff(cis) != 0)) + 1
        starts = np.concatenate([[0], brk])
        ends = np.concatenate([brk, [len(allrec)]])
        for s, e in zip(starts, ends):
            nd = int(nodes[s])
            tsn = int(job.clk(nd, ft[s]))
            c = C[int(cis[s])]
            hdr = b'CWB1' + np.array([1, 64], '<u2').tobytes() + np.array([e - s, 0], '<u4').tobytes()
            val = base64.b64encode(hdr + allrec[s:e].tobytes()).decode()
            out_lines.append((tsn, json.dumps({'topic': 'cw.calls.v1', 'key': f'{jid}/{c.cid:016x}',
                                               'ts_ns': tsn, 'value_b64': val}, separators=(',', ':'))))
    # ---- heartbeats -------------------------------------------------------
    is_p2p = np.isin(op, [SEND, RECV]) if n else np.zeros(0, bool)
    order = np.lexsort((seq, ci, rank)) if n else np.zeros(0, int)
    # index by (rank, comm) -> arrays
    per = {}
    if n:
        srt_r, srt_c = rank[order], ci[order]
        brk = np.flatnonzero((np.diff(srt_r) != 0) | (np.diff(srt_c) != 0)) + 1
        for s, e in zip(np.concatenate([[0], brk]), np.concatenate([brk, [n]])):
            idx = order[s:e]
            per[(int(srt_r[s]), int(srt_c[s]))] = idx
    destroy_t = {}
    for r, c_, t, kind in sim['inits']:
        if kind == K_DESTROY:
            destroy_t[(r, c_)] = t
    for c in C:
        bynode = {}
        for m in c.members:
            if m in c.init_t:
                bynode.setdefault(R[m].node, []).append(m)
        for nd, mem in bynode.items():
            hph = job.clocks[nd][3]
            t_first = min(c.init_t[m] for m in mem)
            ticks = np.arange(math.ceil(t_first - hph) + hph, T_end, 1.0)
            if len(ticks) == 0:
                continue
            info = []
            for m in mem:
                idx = per.get((m, c.idx), np.zeros(0, int))
                ic = idx[~is_p2p[idx]]
                so = st_obs[ic]
                eo = end_obs[ic]
                so = np.where(np.isnan(so), np.inf, so)
                eo = np.where(np.isnan(eo), np.inf, eo)
                # seq order == time order on one stream; make monotone for searchsorted
                so_m = np.maximum.accumulate(so) if len(so) else so
                eo_m = np.maximum.accumulate(eo) if len(eo) else eo
                ns = np.searchsorted(so_m, ticks, 'right')
                ne = np.searchsorted(eo_m, ticks, 'right')
                p2pinfo = []
                ip = idx[is_p2p[idx]]
                if len(ip):
                    for pe in np.unique(peer[ip]):
                        for o in (SEND, RECV):
                            sel = ip[(peer[ip] == pe) & (op[ip] == o)]
                            if not len(sel):
                                continue
                            sel = sel[np.argsort(seq[sel])]
                            a1 = np.maximum.accumulate(np.where(np.isnan(st_obs[sel]), np.inf, st_obs[sel]))
                            a2 = np.maximum.accumulate(np.where(np.isnan(end_obs[sel]), np.inf, end_obs[sel]))
                            p2pinfo.append((int(pe), 'send' if o == SEND else 'recv',
                                            np.searchsorted(a1, ticks, 'right'),
                                            np.searchsorted(a2, ticks, 'right')))
                info.append((m, ic, so, eo, ns, ne, p2pinfo))
            for ti, t in enumerate(ticks):
                rl = []
                for m, ic, so, eo, ns, ne, p2pinfo in info:
                    if c.init_t[m] > t or destroy_t.get((m, c.idx), 1e18) <= t:
                        continue
                    gp = R[m].gap
                    if gp and gp[0] <= t < gp[1]:
                        continue
                    s_ = int(ns[ti]) - 1
                    e_ = int(ne[ti]) - 1
                    ent = {'rank': m, 'started': s_, 'completed': e_,
                           't_last_start_ns': int(job.clk(nd, t_start[ic[s_]])) if s_ >= 0 else 0,
                           't_last_end_ns': int(job.clk(nd, t_end_v[ic[e_]])) if e_ >= 0 else 0}
                    if p2pinfo:
                        ent['p2p'] = [{'peer': pe, 'op': o, 'started': int(a[ti]) - 1,
                                       'completed': int(b[ti]) - 1} for pe, o, a, b in p2pinfo]
                    rl.append(ent)
                if not rl:
                    continue
                tsn = int(job.clk(nd, t))
                out_lines.append((tsn, json.dumps({'topic': 'cw.progress.v1', 'key': f'{jid}/{c.cid:016x}',
                                                   'ts_ns': tsn, 'value': {
                                                       'v': 1, 'job': jid, 'node': job.node_names[nd],
                                                       'ts_ns': tsn, 'comm': f'{c.cid:016x}', 'ranks': rl}},
                                                  separators=(',', ':'))))
    # ---- topology -----------------------------------------------------------
    for rk in R:
        t = 0.2 + 0.01 * rk.local
        tsn = int(job.clk(rk.node, t))
        v = {'v': 1, 'job': jid, 'ts_ns': tsn, 'rank': rk.g, 'world_size': len(R),
             'node': job.node_names[rk.node], 'local_rank': rk.local, 'gpu': job.gpu_uuid[rk.g]}
        if rk.coords:
            v['coords'] = rk.coords
        out_lines.append((tsn, json.dumps({'topic': 'cw.topology.v1', 'key': jid, 'ts_ns': tsn, 'value': v},
                                          separators=(',', ':'))))
    # ---- steps --------------------------------------------------------------
    if job.steps_on:
        for r, it, hs, he, fw, bw, opt in sim['steps']:
            if he > T_end:
                continue
            nd = R[r].node
            tsn = int(job.clk(nd, he + 0.001))
            v = {'v': 1, 'job': jid, 'rank': r, 'iteration': it, 't_start_ns': int(job.clk(nd, hs)),
                 't_end_ns': int(job.clk(nd, he)),
                 'phases': {'forward_ms': round(fw, 3), 'backward_ms': round(bw, 3), 'optimizer_ms': round(opt, 3)}}
            out_lines.append((tsn, json.dumps({'topic': 'cw.steps.v1', 'key': jid, 'ts_ns': tsn, 'value': v},
                                              separators=(',', ':'))))
    # ---- hardware samples -----------------------------------------------------
    if job.hw_on:
        for rk in R:
            ph = float(rng.uniform(0, 5))
            for t in np.arange(2.0 + ph, T_end, 5.0):
                slow = rk.hw(t) if rk.hw else None
                clk = 1980 - int(rng.integers(0, 3)) * 15
                thr = 0x4 if rng.random() < 0.15 else 0
                pw = float(rng.normal(640, 25))
                tc = int(rng.integers(58, 70))
                if slow:
                    clk, thr, pw, tc = slow
                tsn = int(job.clk(rk.node, t))
                v = {'v': 1, 'job': jid, 'node': job.node_names[rk.node], 'ts_ns': tsn, 'rank': rk.g,
                     'gpu': job.gpu_uuid[rk.g], 'sm_clock_mhz': clk, 'mem_clock_mhz': 2619,
                     'power_w': round(pw, 1), 'temp_c': tc, 'util_pct': int(rng.integers(93, 100)),
                     'throttle_reasons': thr, 'ecc_dbe': 0, 'xid': 0, 'nvlink_errors': 0}
                out_lines.append((tsn, json.dumps({'topic': 'cw.hw.v1', 'key': jid, 'ts_ns': tsn, 'value': v},
                                                  separators=(',', ':'))))


# ---------------------------------------------------------------------------
# program builders
NVL_BW, IB_BW = 300e9, 45e9
NVL_LAT, IB_LAT = 15e-6, 40e-6


def comm_params(job, members):
    nn = len({job.ranks[m].node for m in members})
    return (NVL_BW, NVL_LAT) if nn == 1 else (IB_BW, IB_LAT * (1 + math.log2(nn)))


def mkcomm(job, members, kind):
    bw, lat = comm_params(job, members)
    return job.new_comm(members, kind, bw, lat)


def init_comms(job, order, t_from=0.5):
    """COMM_INIT programs: every rank inits its comms in creation order."""
    for c in order:
        dur = 0.05 + 0.02 * c.nnodes ** 0.5
        for m in c.members:
            job.ranks[m].prog.append((INIT, c.idx, dur))


class Mega:
    """Megatron layout: rank = dp*(PP*TP) + pp*TP + tp."""

    def __init__(self, job, TP, PP, DP, world=True):
        self.job, self.TP, self.PP, self.DP = job, TP, PP, DP
        W = TP * PP * DP
        assert W == len(job.ranks)
        self.rk = lambda tp, pp, dp: dp * PP * TP + pp * TP + tp
        for r in range(W):
            tp, pp, dp = r % TP, (r // TP) % PP, r // (TP * PP)
            job.ranks[r].coords = {'tp': tp, 'pp': pp, 'dp': dp, 'cp': 0, 'ep': 0}
        order = []
        self.world = mkcomm(job, range(W), 'world') if world else None
        if world:
            order.append(self.world)
        self.tp = {}
        self.pp = {}
        self.dp = {}
        self.emb = {}
        self.mp = {}
        for dp in range(DP):
            for pp in range(PP):
                c = mkcomm(job, [self.rk(t, pp, dp) for t in range(TP)], 'tp')
                for t in range(TP):
                    self.tp[self.rk(t, pp, dp)] = c
                order.append(c)
        if PP > 1:
            for dp in range(DP):
                for t in range(TP):
                    mem = [self.rk(t, p, dp) for p in range(PP)]
                    c = mkcomm(job, mem, 'pp')
                    for m in mem:
                        self.pp[m] = c
                    order.append(c)
        if DP > 1:
            for pp in range(PP):
                for t in range(TP):
                    mem = [self.rk(t, pp, d) for d in range(DP)]
                    c = mkcomm(job, mem, 'dp')
                    for m in mem:
                        self.dp[m] = c
                    order.append(c)
        if PP > 1:
            for dp in range(DP):
                for t in range(TP):
                    mem = [self.rk(t, 0, dp), self.rk(t, PP - 1, dp)]
                    c = mkcomm(job, mem, 'emb')
                    for m in mem:
                        self.emb[m] = c
                    order.append(c)
        if TP * PP > 1:
            for dp in range(DP):
                mem = [self.rk(t, p, dp) for p in range(PP) for t in range(TP)]
                c = mkcomm(job, mem, 'mp')
                for m in mem:
                    self.mp[m] = c
                order.append(c)
        self.order = order
        init_comms(job, order)
        if world:  # torch.distributed.barrier() at the end of Megatron's initialisation
            for r in range(W):
                job.coll(r, self.world, AR, 4, PH_NONE)
                job.ranks[r].prog.append((SYNC,))

    def build(self, iters, M, L, f, b, opt=0.04, dl=0.02, sp=False, act_bytes=64 << 20,
              tp_bytes=64 << 20, dp_bytes=1 << 30, stage_scale=None, jit=0.02, it_jit=0.01,
              deadlock=None, extra=None, teardown=None, start_it=0):
        job = self.job
        rng = job.rng
        TP, PP, DP = self.TP, self.PP, self.DP
        W = len(job.ranks)
        stage_scale = stage_scale or [1.0] * PP
        for it in range(start_it, start_it + iters):
            # per-rank iteration noise, shared by nobody
            itf = rng.lognormal(0, it_jit, W)
            hiccup = rng.random(W) < 0.02
            for r in range(W):
                tp, pp, dp = r % TP, (r // TP) % PP, r // (TP * PP)
                job.ranks[r].prog.append((ITER, it))
                job.ranks[r].prog.append((HOST, dl * float(rng.lognormal(0, 0.2)) + (float(rng.uniform(0.05, 0.15)) if hiccup[r] else 0.0)))
            for r in range(W):
                tp, pp, dp = r % TP, (r // TP) % PP, r // (TP * PP)
                sc = stage_scale[pp] * itf[r]
                tpc = self.tp.get(r) if TP > 1 else None
                ppc = self.pp.get(r)
                nxt = self.rk(tp, pp + 1, dp) if pp < PP - 1 else None
                prv = self.rk(tp, pp - 1, dp) if pp > 0 else None
                dl_pair = deadlock and it == deadlock[0] and r in deadlock[1]
                noise = rng.lognormal(0, jit, 4 * M * L + 8)
                ni = iter(noise)

                def fwd(mb):
                    for l in range(L):
                        if sp and tpc:
                            job.coll(r, tpc, AG, tp_bytes, PH_FWD)
                        job.comp(r, f / L * 0.4 * sc * next(ni), PH_FWD, it)
                        if tpc:
                            job.coll(r, tpc, RS if sp else AR, tp_bytes, PH_FWD)
                        if sp and tpc:
                            job.coll(r, tpc, AG, tp_bytes, PH_FWD)
                        job.comp(r, f / L * 0.6 * sc * next(ni), PH_FWD, it)
                        if tpc:
                            job.coll(r, tpc, RS if sp else AR, tp_bytes, PH_FWD)

                def bwd(mb):
                    for l in range(L):
                        if sp and tpc:
                            job.coll(r, tpc, AG, tp_bytes, PH_BWD)
                        job.comp(r, b / L * 0.6 * sc * next(ni), PH_BWD, it)
                        if tpc:
                            job.coll(r, tpc, RS if sp else AR, tp_bytes, PH_BWD)
                        if sp and tpc:
                            job.coll(r, tpc, AG, tp_bytes, PH_BWD)
                        job.comp(r, b / L * 0.4 * sc * next(ni), PH_BWD, it)
                        if tpc:
                            job.coll(r, tpc, RS if sp else AR, tp_bytes, PH_BWD)

                def grp(parts, ph):
                    parts = [p for p in parts if p is not None]
                    if not parts:
                        return
                    peers = {p[2] for p in parts}
                    if dl_pair and len(parts) == 2 and parts[0][0] != parts[1][0] and \
                            peers <= set(deadlock[1]):
                        # the ordering bug: unbatched, send first
                        for p in sorted(parts, key=lambda p: not p[0]):
                            job.p2p(r, [p], ph)
                        return
                    job.p2p(r, parts, ph)

                sf = lambda: (True, ppc, nxt, act_bytes) if nxt is not None else None
                rf = lambda: (False, ppc, prv, act_bytes) if prv is not None else None
                sb = lambda: (True, ppc, prv, act_bytes) if prv is not None else None
                rb = lambda: (False, ppc, nxt, act_bytes) if nxt is not None else None
                if PP == 1:
                    for mb in range(M):
                        fwd(mb)
                        bwd(mb)
                else:
                    w = min(PP - pp - 1, M)
                    for i in range(w):
                        grp([rf()], PH_FWD)
                        fwd(i)
                        grp([sf()], PH_FWD)
                    rem = M - w
                    if rem > 0:
                        grp([rf()], PH_FWD)
                    for i in range(rem):
                        fwd(w + i)
                        grp([sf(), rb()], PH_FWD)
                        bwd(i)
                        if i == rem - 1:
                            grp([sb()], PH_BWD)
                        else:
                            grp([sb(), rf()], PH_BWD)
                    for i in range(w):
                        grp([rb()], PH_BWD)
                        bwd(rem + i)
                        grp([sb()], PH_BWD)
                if extra:
                    extra(self, r, it)
                # gradient reduction (distributed optimizer)
                if DP > 1:
                    job.coll(r, self.dp[r], RS, dp_bytes, PH_BWD)
                if r in self.emb:
                    job.coll(r, self.emb[r], AR, 256 << 20, PH_OPT)
                if r in self.mp:
                    job.coll(r, self.mp[r], AR, 4, PH_OPT)
                job.ranks[r].prog.append((SYNC,))
                job.comp(r, opt * float(rng.lognormal(0, 0.03)), PH_OPT, it)
                if DP > 1:
                    job.coll(r, self.dp[r], AG, dp_bytes, PH_OPT)
                job.ranks[r].prog.append((ITEREND,))
        if teardown:
            ck = teardown
            for r in range(W):
                job.ranks[r].prog.append((SYNC,))
                job.ranks[r].prog.append((HOST, ck * float(rng.lognormal(0, 0.05))))
                job.coll(r, self.world, AR, 4, PH_NONE)
                job.ranks[r].prog.append((SYNC,))
                for c in reversed(self.order):
                    if r in c.pos:
                        job.ranks[r].prog.append((DESTROY, c.idx))
                job.ranks[r].prog.append((HOST, 0.2))


# ---------------------------------------------------------------------------
def measure_iter(job):
    st = [s for s in job.sim['steps'] if s[0] == 0]
    if len(st) >= 3:
        return float(np.median([b[3] - a[3] for a, b in zip(st[:-1], st[1:])]))
    return None


def truth(job, kind, culprits, onset, **kw):
    d = {'job': job.jid, 'kind': kind, 'culprits': sorted(int(c) for c in culprits),
         'onset_s': None if onset is None else round(float(onset), 3),
         'onset_ns': None if onset is None else int(job.t0_ns + onset * 1e9),
         't0_ns': job.t0_ns, 'ranks': len(job.ranks),
         'probe': ','.join(sorted({r.probe for r in job.ranks})),
         'allowed': sorted(int(c) for c in kw.pop('allowed', culprits))}
    d.update(kw)
    job.truth = d
    return d


def mkjob(ctx, i, nranks, **kw):
    jid = f"ed-{ctx['name'].split('-')[0]}-{ctx['seed'] * 1000 + i}"
    return Job(jid, ctx['rng'], nranks, **kw)


def hung_onset(job, r):
    return job.sim['stops'].get(r)


# ---------------------------------------------------------------------------
# scenarios
def s_p2p(ctx, deadlock):
    job = mkjob(ctx, 0, 64, probe='gpu')
    mg = Mega(job, 1, 8, 8)
    pair = None
    T = 70.0
    dl = None
    if deadlock:
        dp = int(ctx['rng'].integers(0, 8))
        st = int(ctx['rng'].integers(1, 6))
        pair = (mg.rk(0, st, dp), mg.rk(0, st + 1, dp))
        dl = (24, pair)
    mg.build(60, M=8, L=1, f=0.03, b=0.06, deadlock=dl, dp_bytes=400 << 20)
    simulate(job, T)
    it_s = measure_iter(job)
    if deadlock:
        calls = job.sim['calls']
        blocked = [c for c in calls if c[0] in pair and math.isnan(c[9]) and c[2] == SEND]
        onset = max(min(c[8] for c in blocked if c[0] == p) for p in pair)
        truth(job, 'p2p_deadlock', pair, onset, iter_s=it_s, judge='hang',
              comm=f'{mg.pp[pair[0]].cid:016x}',
              note=f'ranks {pair[0]} and {pair[1]} (pp {st},{st + 1} of dp {dp}) each blocked in an '
                   'unbatched SEND to the other (ordering bug); every member of that P2P channel is '
                   'inside a call. Culprits = the pair; a comm_hang on their PP comm naming no rank is PARTIAL')
    else:
        truth(job, 'healthy', [], None, iter_s=it_s, judge='control', note='TP1 PP8 DP8 1F1B, batched P2P')
    return [job], T


def s_teardown(ctx, hang):
    job = mkjob(ctx, 0, 32, probe='gpu')
    mg = Mega(job, 4, 2, 4)
    mg.build(36, M=4, L=2, f=0.06, b=0.12, teardown=1.5)
    culprit = None
    if hang:
        culprit = int(ctx['rng'].integers(0, 32))
        job.ranks[culprit].stop = (30.0, mg.world.idx)
    # a bystander job in the same pipeline keeps the replay clock running
    by = mkjob(ctx, 1, 16, probe='blk', node_names=[f'node-{100 + i:03d}' for i in range(2)])
    mb = Mega(by, 1, 1, 16)
    mb.build(80, M=2, L=2, f=0.1, b=0.2, dp_bytes=200 << 20)
    T = 80.0
    simulate(job, T)
    simulate(by, T)
    it_s = measure_iter(job)
    if hang:
        truth(job, 'teardown_hang', [culprit], hung_onset(job, culprit), iter_s=it_s, judge='hang',
              note='after the last iteration every rank saves a checkpoint, then a world barrier; '
                   f'rank {culprit} never leaves its checkpoint save, the other 31 wait in the barrier')
    else:
        end = max(job.sim['h'])
        truth(job, 'healthy', [], None, iter_s=it_s, judge='control',
              note=f'job ends cleanly at ~{end:.0f} s: checkpoint, barrier, COMM_DESTROY, heartbeats stop')
    truth(by, 'healthy', [], None, iter_s=measure_iter(by), judge='control', note='bystander job in the same pipeline: 16 ranks, data parallel only, gloo (blocking probe)')
    return [job, by], T


def s_nvlink(ctx):
    job = mkjob(ctx, 0, 64, probe='gpu', hw=True)
    mg = Mega(job, 8, 2, 4)
    node = int(ctx['rng'].integers(0, 8))
    on = 20.0
    c = mg.tp[node * 8]
    c.xf.append((on, 1e9, 12.0))
    mg.build(60, M=4, L=4, f=0.06, b=0.12, sp=True, tp_bytes=96 << 20)
    T = 75.0
    simulate(job, T)
    mem = c.members
    truth(job, 'slow_link', [], on, allowed=mem, iter_s=measure_iter(job), judge='link',
          node=job.node_names[node],
          note=f'NVLink of {job.node_names[node]} degraded to ~PCIe speed: TP comm of ranks {mem[0]}-{mem[-1]} '
               'transfers 12x slower; no rank computes slower. PASS: slow_link/hw_fault within that TP '
               'group/node; a slow_rank naming only them: PARTIAL')
    return [job], T


def s_two_slow(ctx):
    job = mkjob(ctx, 0, 64, probe='gpu')
    mg = Mega(job, 4, 2, 8)
    rng = ctx['rng']
    pp, dp = int(rng.integers(0, 2)), int(rng.integers(0, 8))
    a, b = rng.choice(4, 2, replace=False)
    cul = [mg.rk(int(a), pp, dp), mg.rk(int(b), pp, dp)]
    on = 15.0
    for x in cul:
        job.ranks[x].cf.append((on, 1e9, 1.3))
    mg.build(60, M=4, L=2, f=0.06, b=0.12)
    T = 70.0
    simulate(job, T)
    truth(job, 'slow_rank', cul, on, iter_s=measure_iter(job), judge='slow',
          note='two ranks of one TP group compute 1.3x slower from onset; both, and only them')
    return [job], T


def s_commslow(ctx):
    job = mkjob(ctx, 0, 64, probe='gpu')
    mg = Mega(job, 4, 2, 8)
    cul = int(ctx['rng'].integers(0, 64))
    on = 15.0
    job.ranks[cul].xf.append((on, 1e9, 3.0))
    mg.build(60, M=4, L=2, f=0.06, b=0.12, dp_bytes=2 << 30)
    T = 70.0
    simulate(job, T)
    truth(job, 'slow_comm_rank', [cul], on, iter_s=measure_iter(job), judge='slow',
          note='SM contention from another process: every collective this rank is in transfers 3x slower; '
               'its compute and entry times are normal. Named alone (slow_rank or slow_link) = PASS')
    return [job], T


def s_tp8(ctx, slow):
    job = mkjob(ctx, 0, 8, probe='gpu', steps=False)
    for r in job.ranks:
        r.coords = {'tp': r.g, 'pp': 0, 'dp': 0, 'cp': 0, 'ep': 0}
    world = mkcomm(job, range(8), 'world')
    tp = mkcomm(job, range(8), 'tp')
    init_comms(job, [world, tp])
    rng = ctx['rng']
    cul = int(rng.integers(0, 8))
    on = 20.0
    if slow:
        job.ranks[cul].cf.append((on, 1e9, 1.4))
    L = 8
    for it in range(200):
        itf = rng.lognormal(0, 0.01, 8)
        for r in range(8):
            p = job.ranks[r].prog
            p.append((ITER, it))
            p.append((HOST, 0.01 * float(rng.lognormal(0, 0.2))))
            nz = rng.lognormal(0, 0.02, 4 * L + 2)
            k = 0
            for l in range(L):
                for part in (0.4, 0.6):
                    job.comp(r, 0.25 / L * part * itf[r] * nz[k], PH_FWD, it); k += 1
                    job.coll(r, tp, AR, 32 << 20, PH_FWD)
            for l in range(L):
                for part in (0.6, 0.4):
                    job.comp(r, 0.5 / L * part * itf[r] * nz[k], PH_BWD, it); k += 1
                    job.coll(r, tp, AR, 32 << 20, PH_BWD)
            job.coll(r, world, AR, 4, PH_OPT)  # loss for logging
            job.coll(r, tp, AR, 4, PH_OPT)     # grad norm
            p.append((SYNC,))
            job.comp(r, 0.03, PH_OPT, it)
            p.append((ITEREND,))
    T = 65.0
    simulate(job, T)
    it_s = float(np.median(np.diff([s[3] for s in job.sim['steps'] if s[0] == 0])))
    if slow:
        truth(job, 'slow_rank', [cul], on, iter_s=it_s, judge='slow',
              note='single node, TP 8 only, NCCL plugin only (no steps): one rank 1.4x slower')
    else:
        truth(job, 'healthy', [], None, iter_s=it_s, judge='control', note='single node TP 8, plugin only')
    return [job], T


def s_large(ctx):
    rng = ctx['rng']
    job = mkjob(ctx, 0, 2048, probe='gpu', steps=False)
    mg = Mega(job, 8, 1, 256, world=False)
    cul = int(rng.integers(0, 2048))
    job.ranks[cul].stop = (12.0 + float(rng.uniform(0, 1)), None)
    mg.build(22, M=2, L=2, f=0.12, b=0.24, dp_bytes=512 << 20, dl=0.02)
    T = 28.0
    simulate(job, T)
    truth(job, 'hang', [cul], hung_onset(job, cul), iter_s=1.0, judge='hang',
          note='2048 ranks (TP8 x DP256, plugin only, no steps), one rank stops issuing (host stuck)')
    st = [s for s in job.sim['calls'] if s[0] == 0 and s[2] == AG]
    if len(st) > 3:
        job.truth['iter_s'] = round(float(np.median(np.diff([c[8] for c in st]))), 3)
    return [job], T


def s_restart(ctx):
    job = mkjob(ctx, 0, 32, probe='enq')
    mg = Mega(job, 4, 2, 4)
    rng = ctx['rng']
    r = int(rng.integers(0, 32))
    g0 = 30.0 + float(rng.uniform(0, 5))
    job.ranks[r].gap = (g0, g0 + 2.0)
    mg.build(60, M=4, L=2, f=0.06, b=0.12)
    T = 70.0
    simulate(job, T)
    truth(job, 'healthy', [], None, iter_s=measure_iter(job), judge='control', restart_rank=r,
          note=f'host-enqueue probe of rank {r} restarts at {g0:.1f} s: its ring is re-created, records of the '
               '2 s gap (and the unread ring) are lost, seq numbers continue; the job is healthy')
    return [job], T


def s_moe(ctx, hang, probe='gpu'):
    rng = ctx['rng']
    job = mkjob(ctx, 0, 64, probe=probe)
    for r in job.ranks:
        r.coords = {'tp': 0, 'pp': 0, 'dp': r.g, 'cp': 0, 'ep': r.g}
    world = mkcomm(job, range(64), 'world')
    ep = mkcomm(job, range(64), 'ep')
    dpc = mkcomm(job, range(64), 'dp')
    init_comms(job, [world, ep, dpc])
    cul = int(rng.integers(0, 64))
    if hang:
        job.ranks[cul].stop = (35.0 + float(rng.uniform(0, 2)), ep.idx)
    M, L = 4, 3
    for it in range(80):
        itf = rng.lognormal(0, 0.01, 64)
        load = rng.lognormal(0, 0.06, (M, L, 64))  # routing imbalance per microbatch and layer
        for r in range(64):
            p = job.ranks[r].prog
            p.append((ITER, it))
            p.append((HOST, 0.02 * float(rng.lognormal(0, 0.2))))
            for mb in range(M):
                for l in range(L):
                    job.comp(r, 0.012 * itf[r], PH_FWD, it)
                    job.coll(r, ep, A2A, 24 << 20, PH_FWD)
                    job.comp(r, 0.02 * itf[r] * load[mb, l, r], PH_FWD, it)
                    job.coll(r, ep, A2A, 24 << 20, PH_FWD)
                for l in range(L):
                    job.coll(r, ep, A2A, 24 << 20, PH_BWD)
                    job.comp(r, 0.04 * itf[r] * load[mb, l, r], PH_BWD, it)
                    job.coll(r, ep, A2A, 24 << 20, PH_BWD)
                    job.comp(r, 0.024 * itf[r], PH_BWD, it)
            job.coll(r, dpc, AR, 600 << 20, PH_BWD)
            job.coll(r, world, AR, 4, PH_OPT)
            p.append((SYNC,))
            job.comp(r, 0.03, PH_OPT, it)
            p.append((ITEREND,))
    T = 75.0 if hang else 65.0
    simulate(job, T)
    if hang:
        truth(job, 'hang', [cul], hung_onset(job, cul), iter_s=measure_iter(job), judge='hang',
              note=f'MoE, expert parallel over all 64 ranks: rank {cul} never enters the next all-to-all'
                   + (' (host stuck; host-enqueue probe: the others keep enqueueing the rest of the iteration '
                      'behind the blocked all-to-all)' if probe == 'enq' else ''))
    else:
        truth(job, 'healthy', [], None, iter_s=measure_iter(job), judge='control',
              note='MoE all-to-all over 64 ranks with routing imbalance noise (6 % per microbatch/layer)')
    return [job], T


def s_split(ctx, hang):
    rng = ctx['rng']
    job = mkjob(ctx, 0, 32, probe='gpu')
    mg = Mega(job, 4, 2, 4)
    sub_members = [mg.rk(0, 1, d) for d in range(4)]  # tp 0 of the last stage, every replica
    sub = mkcomm(job, sub_members, 'split')
    k_split = 14
    cul = sub_members[int(rng.integers(0, 4))]
    if hang:
        job.ranks[cul].stop = (45.0 + float(rng.uniform(0, 2)), sub.idx)

    def extra(m, r, it):
        if r not in sub.pos:
            return
        if it == k_split:
            job.ranks[r].prog.append((INIT, sub.idx, 0.1 + 0.05 * sub.pos[r] / 4))
        if it >= k_split:
            job.coll(r, sub, AR, 8 << 10, PH_BWD)  # per-token loss statistics of the last stage
    mg.build(60, M=4, L=2, f=0.06, b=0.12, extra=extra)
    T = 75.0 if hang else 65.0
    simulate(job, T)
    split_t = min(sub.init_t.values())
    if hang:
        truth(job, 'hang', [cul], hung_onset(job, cul), iter_s=measure_iter(job), judge='hang',
              split_at_s=round(split_t, 2),
              note=f'comm created by ncclCommSplit at ~{split_t:.0f} s for ranks {sub_members}; rank {cul} '
                   'never enters its all-reduce; the other members wait in it, the rest in DP reduce-scatter')
    else:
        truth(job, 'healthy', [], None, iter_s=measure_iter(job), judge='control', split_at_s=round(split_t, 2),
              note=f'ncclCommSplit at ~{split_t:.0f} s for ranks {sub_members}, used every iteration after')
    return [job], T


def s_unbalanced(ctx, slow):
    rng = ctx['rng']
    job = mkjob(ctx, 0, 32, probe='gpu')
    mg = Mega(job, 2, 4, 4)
    cul = mg.rk(int(rng.integers(0, 2)), 0, int(rng.integers(0, 4)))
    on = 20.0
    if slow:
        job.ranks[cul].cf.append((on, 1e9, 1.3))
    mg.build(60, M=6, L=2, f=0.05, b=0.1, stage_scale=[1.0, 1.0, 1.0, 1.2])
    T = 70.0
    simulate(job, T)
    last = [r for r in range(32) if (r // 2) % 4 == 3]
    if slow:
        truth(job, 'slow_rank', [cul], on, iter_s=measure_iter(job), judge='slow', advisory_ok=last,
              note=f'last stage 20 % heavier by design; rank {cul} (first stage) 1.3x slower from {on:.0f} s. '
                   'A P2/P3 advisory naming the whole last stage is tolerated')
    else:
        truth(job, 'healthy', [], None, iter_s=measure_iter(job), judge='control', advisory_ok=last,
              note='last pipeline stage 20 % heavier by design (all its ranks): tuning advice at most, '
                   'P2/P3 naming exactly the whole stage tolerated')
    return [job], T


def s_every4(ctx):
    rng = ctx['rng']
    job = mkjob(ctx, 0, 32, probe='gpu')
    mg = Mega(job, 4, 1, 8)
    cul = int(rng.integers(0, 32))
    job.ranks[cul].iter_cf = {it: 2.0 for it in range(3, 200, 4)}
    mg.build(80, M=4, L=2, f=0.08, b=0.16)
    T = 65.0
    simulate(job, T)
    truth(job, 'intermittent', [cul], 3.0, iter_s=measure_iter(job), judge='info',
          note='a data-dependent outlier: this rank computes 2x slower in every 4th iteration (long sequences), '
               'normal otherwise. Naming it is defensible, so is silence (DOMAIN: "a single slow iteration" is '
               'noise, but this one recurs). INFO unless victims or a P0/P1 hang are named')
    return [job], T


def s_clockdrop(ctx):
    rng = ctx['rng']
    job = mkjob(ctx, 0, 64, probe='gpu', hw=True)
    mg = Mega(job, 4, 2, 8)
    cul = int(rng.integers(0, 64))
    on = 25.0 + float(rng.uniform(0, 3))
    job.ranks[cul].cf.append((on, 1e9, 1.25))
    job.ranks[cul].hw = lambda t: (1590, 0x88, 455.0, 61) if t >= on else None
    mg.build(60, M=4, L=2, f=0.06, b=0.12)
    T = 70.0
    simulate(job, T)
    truth(job, 'slow_rank', [cul], on, iter_s=measure_iter(job), judge='slow', hw_ok=True,
          note='GPU clock drops 1980 -> 1590 MHz (HW slowdown + power brake in throttle_reasons) and the rank '
               'computes 1.25x slower; healthy GPUs show SW power cap now and then. slow_rank or hw_fault '
               'naming it alone = PASS')
    return [job], T


def s_gc(ctx, gc):
    rng = ctx['rng']
    job = mkjob(ctx, 0, 32, probe='enq')
    mg = Mega(job, 4, 2, 4)
    cul = int(rng.integers(0, 32))
    if gc:
        job.ranks[cul].gc = (12.0 + float(rng.uniform(0, 3)), 10.0, 2.0)
    mg.build(60, M=4, L=2, f=0.06, b=0.12)
    T = 70.0
    simulate(job, T)
    if gc:
        truth(job, 'gc_pauses', [cul], job.ranks[cul].gc[0], iter_s=measure_iter(job), judge='noisy',
              note='host-enqueue probe; rank host stalled 2 s every 10 s (GC) while its GPU drains the queue: '
                   'its peers wait up to ~1.5 s each time. No P0/P1; a P2/P3 naming only this rank is fine')
    else:
        truth(job, 'healthy', [], None, iter_s=measure_iter(job), judge='control', note='host-enqueue probe, healthy')
    return [job], T


def s_twojobs(ctx):
    rng = ctx['rng']
    names = [f'gpu-{rng.integers(100, 900)}-{i:02d}' for i in range(8)]
    clocks = [(float(rng.uniform(-0.02, 0.02)), float(rng.uniform(-3e-6, 3e-6)),
               float(rng.uniform(0, 0.2)), float(rng.uniform(0, 1.0))) for _ in range(8)]
    ja = mkjob(ctx, 0, 32, probe='gpu', gpn=4, node_names=names, clocks=clocks, t0_ns=T0_BASE)
    jb = mkjob(ctx, 1, 32, probe='gpu', gpn=4, node_names=names, clocks=clocks, t0_ns=T0_BASE, local_base=4)
    ma = Mega(ja, 4, 2, 4)
    mb = Mega(jb, 4, 2, 4)
    ma.build(60, M=4, L=2, f=0.06, b=0.12)
    cul = int(rng.integers(0, 32))
    jb.ranks[cul].stop = (40.0 + float(rng.uniform(0, 2)), None)
    mb.build(60, M=4, L=2, f=0.05, b=0.1)
    T = 75.0
    simulate(ja, T)
    simulate(jb, T)
    truth(ja, 'healthy', [], None, iter_s=measure_iter(ja), judge='control',
          note='shares its 8 nodes (same names, GPUs 0-3) and rank numbers with the other job, which hangs')
    truth(jb, 'hang', [cul], hung_onset(jb, cul), iter_s=measure_iter(jb), judge='hang',
          note='GPUs 4-7 of the same 8 nodes; rank stops issuing (host stuck)')
    return [ja, jb], T


def s_longsteps(ctx):
    rng = ctx['rng']
    job = mkjob(ctx, 0, 32, probe='gpu')
    mg = Mega(job, 4, 4, 2)
    cul = int(rng.integers(0, 32))
    on = 10.0
    job.ranks[cul].cf.append((on, 1e9, 1.3))
    mg.build(12, M=16, L=4, f=0.45, b=0.9, dp_bytes=2 << 30, opt=0.4)
    T = 170.0
    simulate(job, T)
    truth(job, 'slow_rank', [cul], on, iter_s=measure_iter(job), judge='slow',
          note='iterations of ~25 s (16 microbatches, PP 4); one rank 1.3x slower from 10 s in')
    return [job], T


SCEN = [
    ('e01-p2p-deadlock', lambda c: s_p2p(c, True)),
    ('e02-p2p-control', lambda c: s_p2p(c, False)),
    ('e03-teardown-hang', lambda c: s_teardown(c, True)),
    ('e04-teardown-clean', lambda c: s_teardown(c, False)),
    ('e05-nvlink-degraded', s_nvlink),
    ('e06-two-slow-tp', s_two_slow),
    ('e07-comm-kernel-slow', s_commslow),
    ('e08-tp8-slow', lambda c: s_tp8(c, True)),
    ('e09-tp8-control', lambda c: s_tp8(c, False)),
    ('e10-large-hang', s_large),
    ('e11-probe-restart', s_restart),
    ('e12-moe-a2a-hang', lambda c: s_moe(c, True)),
    ('e13-moe-a2a-control', lambda c: s_moe(c, False)),
    ('e14-split-hang', lambda c: s_split(c, True)),
    ('e15-split-control', lambda c: s_split(c, False)),
    ('e16-unbalanced-slow', lambda c: s_unbalanced(c, True)),
    ('e17-unbalanced-control', lambda c: s_unbalanced(c, False)),
    ('e18-every4th', s_every4),
    ('e19-clock-drop', s_clockdrop),
    ('e20-enq-gc', lambda c: s_gc(c, True)),
    ('e21-enq-control', lambda c: s_gc(c, False)),
    ('e22-two-jobs', s_twojobs),
    ('e23-long-steps', s_longsteps),
    ('e24-moe-a2a-hang-enq', lambda c: s_moe(c, True, 'enq')),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('prefix', nargs='*')
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for i, (name, fn) in enumerate(SCEN):
        if a.prefix and not any(name.startswith(p) for p in a.prefix):
            continue
        ctx = {'name': name, 'seed': a.seed, 'rng': np.random.default_rng([a.seed, i])}
        jobs, T = fn(ctx)
        lines = []
        for j in jobs:
            emit(j, lines)
        lines.sort(key=lambda x: x[0])
        with open(os.path.join(a.out, name + '.cwcap'), 'w') as fh:
            for _, l in lines:
                fh.write(l)
                fh.write('\n')
        tr = {'scenario': name, 'seed': a.seed, 'duration_s': T, 'jobs': [j.truth for j in jobs]}
        with open(os.path.join(a.out, name + '.truth.json'), 'w') as fh:
            json.dump(tr, fh, indent=1)
        ncalls = sum(len(j.sim['calls']) for j in jobs)
        desc = '; '.join(f"{j.jid}: {j.truth['kind']} {j.truth['culprits'] or ''}".strip() for j in jobs)
        print(f'{name:28s} {len(lines):7d} msgs {ncalls:8d} calls  {desc}', flush=True)


if __name__ == '__main__':
    main()
