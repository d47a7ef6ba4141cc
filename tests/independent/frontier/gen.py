#!/usr/bin/env python3
"""frontier/: an independent traffic generator for commwatch (tenth generator).

Written from the wire spec (../../../../shared/spec/wire-v1.md), DOMAIN.md, the READMEs and
../run_scored.sh only; it never read the detector (streams/, commwatch/) nor another
generator's code. It covers schedules and parallelisms of current frameworks and the
realities of the telemetry path:

  zb_*        zero-bubble pipeline (ZB-H1 style: backward split into B and W, W fills bubbles)
  dualpipe_*  bidirectional pipeline, two stages per rank, sends/recvs to both neighbours grouped
  fsdp_*      FSDP2/HSDP with all-gather prefetch and reduce-scatter overlapped with backward,
              GPU-timed (hook) and host-enqueue (plugin) variants
  moe_*       expert parallel + data parallel, dispatch/combine all-to-all, routing noise +-20 %
  atp_*       async tensor parallelism: TP collectives cut into 4-8 chunks overlapped with GEMMs
  telem_*     telemetry path: a backlogged agent (3-8 s late), flush cadence 0.1-1 s, bursts
  scale_*     4096 ranks (TP 8 x PP 4 x DP 128), a few seconds of steps
  varlen_*    variable-length sequences (a different replica heavy each step) vs a real slow GPU
  nicflap     a node's inter-node links pause 1.5 s every 20 s
  agentdead_hang  a rank hangs and its node's agent dies at the same moment

How the model works (and its simplifications, stated):

* Every rank runs a *program*: the ops its host issues, in host order. Device ops run on
  streams (one per rank for compute, one per process group for its NCCL kernels, as
  torch's ProcessGroupNCCL does: all collectives of one group serialise on one stream in
  issue order, whatever user stream they were issued from). Cross-stream dependencies are
  CUDA events. A collective starts on a rank when its stream reaches it; it ends on every
  member at (latest member start) + transfer time (+ a few us of jitter): a rendezvous.
  SEND k from a to b pairs with RECV k on b from a; grouped p2p ops (batch_isend_irecv)
  start together and free their stream when all of them are done.
* The host runs ahead of the device: it only waits at real synchronisation points
  (loss/grad-norm .item(), Megatron's torch.cuda.synchronize() after batched p2p, MoE
  token-count copies to the host) and when 1024 kernel launches are pending (each coarse op
  counts the kernels it stands for: 2 for a GEMM chunk, 25-90 for a layer's pass). Times
  are max-plus (no resource contention inside a GPU beyond stream order); compute ops are
  coarse (a layer chunk), with +-2-3 % noise per op; slow GPUs multiply compute time only.
* Faults: a host that stops issuing (Python deadlock / a hook stuck) at a given op; a compute
  kernel that never ends (that rank's compute stream freezes; its NCCL streams still run
  what they can); a node agent that dies; a NIC whose inter-node transfers pause.
* Probes: GPU_TIMED (the hook or the plugin with device times): an entry record only when
  the probe's 5 ms poll sees the call running, then a completed record; calls never
  started on the device are invisible. ENQUEUED (plugin at host enqueue): an entry record at
  enqueue for every call, a completed record when the completion is observed (device end +
  0.05-2 ms); a few calls' completions are lost (COMPLETION_LOST, the probe's event pool
  overflowed) in the async-TP and FSDP host-enqueue jobs. aux carries NCCL's per-op-type
  number only for the plugin.
* Node agent: every flush (0.18-0.22 s, or 0.1-1 s where jittered) one cw.calls.v1 batch per
  communicator with the records its local rings got since the last flush; heartbeats every
  1 s for every comm of its local ranks (started/completed from what the rings hold, p2p per
  peer); topology once at start; cw.steps.v1 from the hook (at each iteration end, through the
  agent). Node clocks are offset +-25 ms and drift +-20 ppm; all times a node writes are its
  clock.
* A capture line's ts_ns is when the agent produced the message, on its node's clock (Kafka's
  CreateTime): for the backlogged agent that is 3-8 s after it built the batch or heartbeat
  (the backlog is in the agent, before produce()), for the stalled one all messages of a 4 s
  gap are produced together at its end. Messages not produced when the capture ends are not
  in it (a late node's last seconds are missing, as in a real recording).
* Pipeline schedules are derived once per job from a unit-time dry run (an order every rank
  keeps; p2p grouped and ordered by the dry run's time of the data, so the static order
  cannot deadlock) and then timed with real durations. DualPipe has no W split here;
  ZB-H1's W passes fill what would idle, under 1F1B's activation-memory cap.
* Left out: contention between streams inside a GPU, NCCL algorithm/channel detail (a
  collective's time is bytes over a bus bandwidth plus latency), memory, CUDA graphs, GC
  pauses, evaluation and checkpoints, comm destroy at exit (captures end mid-training).

Expectations (truth files carry them row by row): a hang wants exactly one P0 naming exactly
its culprit; a slow rank wants the culprit named alone at P1/P2 and no victim named; healthy
jobs no P0/P1 and no rank named (P2/P3 naming no rank is fine). The async-TP host-enqueue slow
rank is scored as unobservable (its records carry no per-rank trace: see its truth). The NIC
flap allows at most a P2/P3 naming the flapping node or its ranks. The dead-agent hang accepts
one P0 (hang or node_lost) naming the culprit or ranks only of its node.
"""
import argparse
import base64
import collections
import json
import math
import os
import random
import sys
import time
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

INF = float("inf")
BASE_NS = 1767225600 * 10**9  # 2026-01-01T00:00:00Z

# --- wire constants (spec section 1) ------------------------------------------------------
K_CALL, K_INIT, K_DESTROY = 1, 2, 3
OP = dict(allreduce=1, allgather=2, reducescatter=3, broadcast=4, reduce=5, send=6, recv=7,
          alltoall=8, barrier=9, gather=10, scatter=11)
F_COMPLETED, F_GPU, F_GRAPH, F_ENQ, F_LOST = 1, 2, 4, 8, 16
REC = np.dtype([("kind", "u1"), ("op", "u1"), ("flags", "<u2"), ("rank", "<i4"),
                ("comm", "<u8"), ("seq", "<u8"), ("t_start_ns", "<i8"), ("t_end_ns", "<i8"),
                ("bytes", "<u8"), ("comm_rank", "<i4"), ("peer", "<i4"), ("nranks", "<u4"),
                ("aux", "<u4")])
assert REC.itemsize == 64

# op kinds inside the engine
COMPUTE, COLL, P2P, HSYNC, HWORK, MARK = range(6)


class Op:
    __slots__ = ("kind", "stream", "dur", "deps", "grp", "glen", "comm", "cop", "seq", "peer",
                 "nbytes", "hc", "enq", "start", "end", "tag", "aux", "nk")

    def __init__(self, kind, stream=None, dur=0.0, deps=(), hc=0.0):
        self.kind = kind
        self.stream = stream
        self.dur = dur
        self.deps = deps
        self.grp = 0
        self.glen = 1
        self.comm = None
        self.cop = 0
        self.seq = 0
        self.peer = -1
        self.nbytes = 0
        self.hc = hc
        self.enq = None
        self.start = None
        self.end = None
        self.tag = None
        self.aux = 0
        self.nk = 1          # CUDA kernels (launch-queue entries) this op stands for


class Comm:
    def __init__(self, idx, cid, name, members, nodes_of):
        self.idx = idx
        self.cid = cid
        self.name = name
        self.members = list(members)
        self.n = len(self.members)
        self.crank = {g: i for i, g in enumerate(self.members)}
        nodes = sorted({nodes_of[g] for g in self.members})
        self.nodes = nodes
        self.nnodes = len(nodes)
        self.inter = self.nnodes > 1
        self.bw = 20e9 if self.inter else 180e9     # bytes/s, effective bus bandwidth
        self.lat = 40e-6 if self.inter else 12e-6
        self.pause = None                            # (period, length, phase, node) NIC flap

    def coll_time(self, cop, nbytes):
        n = self.n
        if n <= 1:
            return self.lat
        if cop == "allreduce":
            f = 2.0 * (n - 1) / n
        elif cop in ("allgather", "reducescatter", "alltoall"):
            f = (n - 1) / n
        else:
            f = 1.0
        return self.lat * (1 + math.log2(n)) + f * nbytes / self.bw


class Job:
    """Programs of every rank, the comms, placement; then the engine times them."""

    def __init__(self, name, world, gpn, seed, probe="hook", enq=False, coords=None):
        self.name = name
        self.job = "frontier-" + name
        self.world = world
        self.gpn = gpn
        self.node_of = [r // gpn for r in range(world)]
        self.nnodes = (world + gpn - 1) // gpn
        self.rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        self.pr = random.Random(seed * 7919 + zlib.crc32(name.encode()))
        self.probe = probe            # "hook" (GPU-timed, steps) or "plugin" (aux = NCCL number)
        self.enq = enq                # host-enqueue probe (ENQUEUED) instead of GPU-timed
        self.coords = coords or [None] * world
        self.comms = []
        self.comm_by_name = {}
        self.rank_comms = [[] for _ in range(world)]
        self.progs = [[] for _ in range(world)]
        self.streams = [collections.OrderedDict() for _ in range(world)]
        self.devlist = [[] for _ in range(world)]
        self.cseq = [dict() for _ in range(world)]     # comm idx -> next collective seq
        self.pseq = [dict() for _ in range(world)]     # (comm idx, peer crank, cop) -> next
        self.nccl_no = [dict() for _ in range(world)]  # (comm idx, cop) -> NCCL's own number
        self.gid = 0
        self.speed = np.ones(world)                    # compute time multiplier per rank
        self.host_stop_idx = [None] * world            # host never issues this op or later
        self.stuck_op = [None] * world                 # this compute op never ends (stream frozen)
        self.qkern = 1024                              # pending launches before the host blocks
        self.lost_p = 0.0                              # ENQUEUED: completion lost probability
        self.used_ids = set()

    # --- structure -----------------------------------------------------------------
    def node_name(self, n):
        return "node-%03d" % n if self.nnodes > 99 else "node-%02d" % n

    def comm(self, name, members):
        while True:
            cid = int(self.rng.integers(1, 2**63 - 1)) | (1 << 63 if self.rng.random() < .5 else 0)
            if cid not in self.used_ids:
                break
        self.used_ids.add(cid)
        c = Comm(len(self.comms), cid, name, members, self.node_of)
        self.comms.append(c)
        self.comm_by_name[name] = c
        for g in c.members:
            self.rank_comms[g].append(c)
        return c

    # --- program building ------------------------------------------------------------
    def _add(self, r, op):
        prog = self.progs[r]
        idx = len(prog)
        prog.append(op)
        if op.stream is not None:
            self.streams[r].setdefault(op.stream, []).append(idx)
            self.devlist[r].append(idx)
        return idx

    def compute(self, r, dur, deps=(), stream="c", hc=None, noise=0.025, nk=30):
        d = dur * self.speed[r] * (1.0 + noise * self.pr.gauss(0.0, 1.0)) if noise else dur * self.speed[r]
        op = Op(COMPUTE, stream, max(d, 1e-5), tuple(deps), 1.2e-5 * nk if hc is None else hc)
        op.nk = nk
        return self._add(r, op)

    def coll(self, r, comm, cop, nbytes, deps=(), stream=None, dur=None, hc=3e-5):
        op = Op(COLL, stream or ("nccl", comm.idx), dur if dur is not None else comm.coll_time(cop, nbytes),
                tuple(deps), hc)
        op.comm = comm
        op.cop = cop
        op.nbytes = int(nbytes)
        s = self.cseq[r].get(comm.idx, 0)
        op.seq = s
        self.cseq[r][comm.idx] = s + 1
        k = (comm.idx, cop)
        op.aux = self.nccl_no[r].get(k, 0)
        self.nccl_no[r][k] = op.aux + 1
        return self._add(r, op)

    def p2p(self, r, comm, cop, peer_global, nbytes, deps=(), grp=0, stream=None, hc=2e-5):
        op = Op(P2P, stream or ("nccl", comm.idx), comm.lat + nbytes / (comm.bw if self.node_of[r] != self.node_of[peer_global] else 150e9),
                tuple(deps), hc)
        op.comm = comm
        op.cop = cop
        op.nbytes = int(nbytes)
        op.peer = comm.crank[peer_global]
        k = (comm.idx, op.peer, cop)
        s = self.pseq[r].get(k, 0)
        op.seq = s
        self.pseq[r][k] = s + 1
        op.grp = grp
        return self._add(r, op)

    def new_group(self):
        self.gid += 1
        return self.gid

    def sync(self, r, targets, cost=2e-5):
        """host waits for the device end of every target op (.item(), synchronize)."""
        return self._add(r, Op(HSYNC, None, cost, tuple(t for t in targets if t is not None)))

    def device_sync(self, r, cost=2e-5):
        """torch.cuda.synchronize(): wait for the last op of every stream so far."""
        return self.sync(r, [q[-1] for q in self.streams[r].values() if q], cost)

    def host(self, r, dur):
        return self._add(r, Op(HWORK, None, dur))

    def mark(self, r, tag):
        op = Op(MARK)
        op.tag = tag
        return self._add(r, op)

    # --- the engine ------------------------------------------------------------------------
    def run(self, t_begin):
        """time every program (max-plus fixpoint); unresolved ops never happen."""
        W = self.world
        progs = self.progs
        for r in range(W):
            # group lengths: consecutive ops of one stream with the same group id
            for q in self.streams[r].values():
                i = 0
                while i < len(q):
                    op = progs[r][q[i]]
                    if op.grp:
                        j = i + 1
                        while j < len(q) and progs[r][q[j]].grp == op.grp:
                            j += 1
                        op.glen = j - i
                        i = j
                    else:
                        i += 1
        hptr = [0] * W
        host_t = [t_begin + 0.0] * W
        # launch queue: op i of the device list is enqueued only once the ops that keep more
        # than qkern kernels pending ahead of it are done (approximated in issue order)
        qwait = []
        for r in range(W):
            dl = self.devlist[r]
            cum = np.cumsum([progs[r][i].nk for i in dl])
            j = np.searchsorted(cum, cum - self.qkern, side="left") - 1
            qw = {}
            for p in np.nonzero(j >= 0)[0].tolist():
                qw[dl[p]] = dl[int(j[p])]
            qwait.append(qw)
        sptr = [dict((s, 0) for s in self.streams[r]) for r in range(W)]
        spend = [dict((s, None) for s in self.streams[r]) for r in range(W)]
        coll_inst = {}
        p2p_inst = {}
        rnd = self.pr.random
        dirty = collections.deque(range(W))
        indirty = [True] * W
        pauses = [c.pause for c in self.comms]

        def end_of(c, T, d):
            p = pauses[c.idx]
            e = T + d
            if p is None:
                return e
            period, length, phase = p
            # transfer progress stops while the link is down
            k = math.floor((T - phase) / period)
            a = phase + k * period
            t = T
            rem = d
            while True:
                if t < a:
                    if t + rem <= a:
                        return t + rem
                    rem -= a - t
                    t = a
                if t < a + length:
                    t = a + length
                a += period
                if t < a and t + rem <= a:
                    return t + rem

        def wake(rr):
            if not indirty[rr]:
                indirty[rr] = True
                dirty.append(rr)

        while dirty:
            r = dirty.popleft()
            indirty[r] = False
            prog = progs[r]
            n = len(prog)
            stop_i = self.host_stop_idx[r]
            qw = qwait[r]
            stuck_i = self.stuck_op[r]
            changed = True
            while changed:
                changed = False
                # host pass
                i = hptr[r]
                ht = host_t[r]
                while i < n:
                    if stop_i is not None and i >= stop_i:
                        break
                    op = prog[i]
                    k = op.kind
                    if k == HSYNC:
                        blocked = False
                        for d in op.deps:
                            e = prog[d].end
                            if e is None or e == INF:
                                blocked = True
                                break
                            if e > ht:
                                ht = e
                        if blocked:
                            break
                        ht += op.dur
                        op.enq = ht
                    elif k == HWORK:
                        ht += op.dur
                        op.enq = ht
                    elif k == MARK:
                        op.enq = ht
                    else:
                        w = qw.get(i)
                        if w is not None:
                            e = prog[w].end
                            if e is None or e == INF:
                                break
                            if e > ht:
                                ht = e
                        ht += op.hc
                        op.enq = ht
                    i += 1
                if i != hptr[r]:
                    changed = True
                hptr[r] = i
                host_t[r] = ht
                # device pass, per stream
                for s, q in self.streams[r].items():
                    p = sptr[r][s]
                    nq = len(q)
                    while p < nq:
                        pend = spend[r][s]
                        free = -INF
                        if pend is not None:
                            dead = False
                            for j in pend:
                                e = prog[j].end
                                if e is None:
                                    dead = True
                                    break
                                if e > free:
                                    free = e
                            if dead or free == INF:
                                break
                        op = prog[q[p]]
                        g = op.glen
                        members = [prog[q[p + x]] for x in range(g)] if g > 1 else (op,)
                        st = free
                        ok = True
                        for m in members:
                            if m.enq is None:
                                ok = False
                                break
                            if m.enq > st:
                                st = m.enq
                            for d in m.deps:
                                e = prog[d].end
                                if e is None or e == INF:
                                    ok = False
                                    break
                                if e > st:
                                    st = e
                            if not ok:
                                break
                        if not ok:
                            break
                        for m in members:
                            m.start = st
                            if m.kind == COMPUTE:
                                m.end = INF if (stuck_i is not None and q[p] == stuck_i) else st + m.dur
                            elif m.kind == COLL:
                                c = m.comm
                                key = (c.idx, m.seq)
                                inst = coll_inst.get(key)
                                if inst is None:
                                    inst = [0, -INF, 0.0, []]
                                    coll_inst[key] = inst
                                inst[0] += 1
                                if st > inst[1]:
                                    inst[1] = st
                                if m.dur > inst[2]:
                                    inst[2] = m.dur
                                inst[3].append((m, r))
                                if inst[0] == c.n:
                                    e0 = end_of(c, inst[1], inst[2])
                                    for mm, rr in inst[3]:
                                        mm.end = e0 + 4e-6 * rnd()
                                        if rr != r:
                                            wake(rr)
                                    del coll_inst[key]
                            else:  # P2P
                                c = m.comm
                                me = c.crank[r]
                                if m.cop == "send":
                                    key = (c.idx, me, m.peer, m.seq)
                                else:
                                    key = (c.idx, m.peer, me, m.seq)
                                other = p2p_inst.pop(key, None)
                                if other is None:
                                    p2p_inst[key] = (m, r)
                                else:
                                    om, orr = other
                                    T = max(st, om.start)
                                    d = max(m.dur, om.dur)
                                    e0 = end_of(c, T, d) if pauses[c.idx] is not None and \
                                        self.node_of[r] != self.node_of[orr] else T + d
                                    m.end = e0 + 2e-6 * rnd()
                                    om.end = e0 + 2e-6 * rnd()
                                    if orr != r:
                                        wake(orr)
                        spend[r][s] = [q[p + x] for x in range(g)]
                        p += g
                        changed = True
                    sptr[r][s] = p
        # unresolved: never
        for r in range(W):
            for op in progs[r]:
                if op.start is not None and op.end is None:
                    op.end = INF
        self.host_final = host_t


# ------------------------------------------------------------------------------------------
# pipeline schedules: unit-time dry runs that fix every rank's order
# ------------------------------------------------------------------------------------------

def dry_run(P, chunk_pos, M, policy, dur):
    """chunk_pos[c][s] = pp position of stage s of chunk c; M micro-batches per chunk.
    policy(pos, ready, state) picks the next task list. dur: dict kind -> unit time.
    Returns per position a list of ('task', [(kind, c, mb)], t0, t1) in order."""
    C = len(chunk_pos)
    S = P
    stage_of = {}
    for c in range(C):
        for s in range(S):
            stage_of[(c, chunk_pos[c][s])] = s
    done = {}  # (kind, c, s, mb) -> finish time
    nxt = {(k, c, s): 0 for k in "FBW" for c in range(C) for s in range(S)}
    busy_until = [0] * P
    out = [[] for _ in range(P)]
    t = 0
    total = C * S * M * (3 if "W" in dur else 2)
    ndone = 0
    guard = 0
    while ndone < total:
        guard += 1
        assert guard < 100000, "dry run stuck"
        for pos in range(P):
            if busy_until[pos] > t:
                continue
            ready = []
            for c in range(C):
                s = next(ss for ss in range(S) if chunk_pos[c][ss] == pos)
                mbF = nxt[("F", c, s)]
                if mbF < M and (s == 0 or done.get(("F", c, s - 1, mbF), INF) <= t):
                    ready.append(("F", c, s, mbF))
                mbB = nxt[("B", c, s)]
                if mbB < M and done.get(("F", c, s, mbB), INF) <= t and \
                        (s == S - 1 or done.get(("B", c, s + 1, mbB), INF) <= t):
                    ready.append(("B", c, s, mbB))
                if "W" in dur:
                    mbW = nxt[("W", c, s)]
                    if mbW < M and done.get(("B", c, s, mbW), INF) <= t:
                        ready.append(("W", c, s, mbW))
            pick = policy(pos, ready, nxt, S, M)
            if not pick:
                continue
            d = sum(dur[k] for k, _, _, _ in pick)
            if len(pick) == 2:
                d = max(dur[pick[0][0]], dur[pick[1][0]]) + 1  # overlapped pair
            t1 = t + d
            for k, c, s, mb in pick:
                done[(k, c, s, mb)] = t1
                nxt[(k, c, s)] += 1
                ndone += 1
            busy_until[pos] = t1
            out[pos].append(("task", [(k, c, mb) for k, c, s, mb in pick], t, t1))
        t += 1
    return out


def policy_1f1b(P):
    def pol(pos, ready, nxt, S, M):
        for k, c, s, mb in ready:
            if k == "B":
                return [(k, c, s, mb)]
        for k, c, s, mb in ready:
            if k == "F" and nxt[("F", c, s)] - nxt[("B", c, s)] < S - s:
                return [(k, c, s, mb)]
        return None
    return pol


def policy_zbh1(P):
    def pol(pos, ready, nxt, S, M):
        for k, c, s, mb in ready:
            if k == "B":
                return [(k, c, s, mb)]
        for k, c, s, mb in ready:
            if k == "F" and nxt[("F", c, s)] - nxt[("W", c, s)] < S - s:
                return [(k, c, s, mb)]
        for k, c, s, mb in ready:
            if k == "W":
                return [(k, c, s, mb)]
        return None
    return pol


def policy_dualpipe(P):
    def pol(pos, ready, nxt, S, M):
        Bs = [x for x in ready if x[0] == "B"]
        Fs = [x for x in ready if x[0] == "F" and nxt[("F", x[1], x[2])] - nxt[("B", x[1], x[2])] < S - x[2] + 1]
        for b in Bs:
            for f in Fs:
                if f[1] != b[1]:
                    return [f, b]           # forward of one direction overlapped with backward of the other
        if Bs:
            return [max(Bs, key=lambda x: nxt[("F", x[1], x[2])] - nxt[("B", x[1], x[2])])]
        if Fs:
            return [min(Fs, key=lambda x: (nxt[("F", x[1], x[2])] - nxt[("B", x[1], x[2])], x[1] != (0 if pos < P / 2 else 1)))]
        return None
    return pol


def pipeline_items(P, chunk_pos, dry):
    """host-order items per position: p2p groups keyed by the dry run's time of the data,
    compute tasks at their start time. Both sides of a pair sort by the same key."""
    S = P
    items = [[] for _ in range(P)]
    for pos in range(P):
        for _, tasks, t0, t1 in dry[pos]:
            items[pos].append((t0, 1, 0, ("task", tasks)))
    for pos in range(P):
        for _, tasks, t0, t1 in dry[pos]:
            for k, c, mb in tasks:
                s = next(ss for ss in range(S) if chunk_pos[c][ss] == pos)
                if k == "F" and s < S - 1:
                    dst = chunk_pos[c][s + 1]
                    tag = ("act", c, mb)
                    items[pos].append((t1, 0, (0, c, mb), ("send", dst, tag)))
                    items[dst].append((t1, 0, (0, c, mb), ("recv", pos, tag)))
                if k == "B" and s > 0:
                    dst = chunk_pos[c][s - 1]
                    tag = ("grad", c, mb)
                    items[pos].append((t1, 0, (1, c, mb), ("send", dst, tag)))
                    items[dst].append((t1, 0, (1, c, mb), ("recv", pos, tag)))
    out = []
    for pos in range(P):
        lst = sorted(items[pos], key=lambda x: (x[0], x[1], x[2]))
        res = []
        for t, cls, _, it in lst:
            if cls == 0:
                if res and res[-1][0] == "grp" and res[-1][1] == t:
                    res[-1][2].append(it)
                else:
                    res.append(["grp", t, [it]])
            else:
                res.append(["task", t, it[1]])
        out.append(res)
    return out


# ------------------------------------------------------------------------------------------
# probes, node agents, capture
# ------------------------------------------------------------------------------------------

class Telemetry:
    """How each node's agent flushes and delivers (defaults: a healthy agent)."""

    def __init__(self, job):
        self.flush = {}        # node -> (lo, hi) flush interval
        self.late = {}         # node -> (lo, hi) backlog delay of every message
        self.bursts = {}       # node -> list of (gap start, gap length): messages held, then sent at once
        self.dead = {}         # node -> time the agent died (nothing after; unflushed records lost)
        self.hb_period = 1.0
        self.hw = None         # fn(job, node, t) -> dict of hw fields or None


def local_clock(job, t_init):
    rng = job.rng
    off = rng.uniform(-0.025, 0.025, job.nnodes)
    drift = rng.uniform(-20e-6, 20e-6, job.nnodes)
    return off, drift


def emit(job, tel, t_init, t_end, path):
    """probe records -> rings -> agents -> capture lines (sorted by ts_ns)."""
    rnd = job.pr.random
    W = job.world
    off, drift = local_clock(job, t_init)
    node_of = np.array(job.node_of)

    def loc_ns(t, node):  # vectorised true time (s, rel) -> node clock ns
        t = np.asarray(t, dtype=np.float64)
        return BASE_NS + np.round((t + off[node] + drift[node] * (t - t_init)) * 1e9).astype(np.int64)

    # --- records ------------------------------------------------------------------
    cols = {k: [] for k in ("wt", "kind", "op", "flags", "rank", "cidx", "seq", "ts", "te", "bytes",
                            "crank", "peer", "nranks", "aux")}
    wt_, kind_, op_, fl_, rk_, ci_, sq_, ts_, te_, by_, cr_, pe_, nr_, ax_ = (cols[k] for k in cols)
    plugin = job.probe == "plugin"
    poll = 5e-3   # GPU-timed probes see a call in progress at their 5 ms poll
    init_t = {}
    for r in range(W):
        lastw = {}
        # COMM_INIT, once per comm, at start-up
        for c in job.rank_comms[r]:
            ti = t_init + 0.05 + 1.0 * c.idx / len(job.comms) + 0.02 * rnd()
            init_t[(r, c.idx)] = ti
            wt_.append(ti); kind_.append(K_INIT); op_.append(0); fl_.append(F_COMPLETED); rk_.append(r)
            ci_.append(c.idx); sq_.append(0); ts_.append(ti); te_.append(ti); by_.append(0)
            cr_.append(c.crank[r]); pe_.append(-1); nr_.append(c.n); ax_.append(c.nnodes)
        for op in job.progs[r]:
            k = op.kind
            if k != COLL and k != P2P:
                continue
            if op.enq is None:
                continue
            c = op.comm
            code = OP[op.cop]
            crank = c.crank[r]
            peer = op.peer if k == P2P else -1
            aux = op.aux if (plugin and k == COLL) else 0
            st, en = op.start, op.end
            if job.enq:
                recs = [(op.enq + 5e-6, F_ENQ, op.enq, 0.0)]
                if st is not None and en != INF:
                    obs = en + 5e-5 + 2e-3 * rnd()
                    if job.lost_p and rnd() < job.lost_p:
                        recs.append((obs, F_ENQ | F_LOST, op.enq, 0.0))
                    else:
                        recs.append((obs, F_ENQ | F_COMPLETED, op.enq, obs))
            else:
                if st is None:
                    continue
                seen = st + poll * rnd()
                recs = []
                if en > seen:
                    recs.append((seen, F_GPU, st, 0.0))
                if en != INF:
                    recs.append((en + poll * rnd(), F_GPU | F_COMPLETED, st, en))
            lk = (c.idx, peer, code if k == P2P else 0)
            for w, fl, a, b in recs:
                # a probe writes one stream's records in the order it observes them
                kk = lk + (fl & F_COMPLETED,)
                lw = lastw.get(kk)
                if lw is not None and w <= lw:
                    w = lw + 1e-7
                lastw[kk] = w
                wt_.append(w); kind_.append(K_CALL); op_.append(code); fl_.append(fl); rk_.append(r)
                ci_.append(c.idx); sq_.append(op.seq); ts_.append(a); te_.append(b); by_.append(op.nbytes)
                cr_.append(crank); pe_.append(peer); nr_.append(c.n); ax_.append(aux)
    wt = np.array(wt_)
    rank = np.array(rk_, dtype=np.int64)
    rnode = node_of[rank]
    # a dead agent loses what it had not flushed; the capture ends at t_end
    keep = wt <= t_end
    for n, td in tel.dead.items():
        keep &= ~((rnode == n) & (wt >= td - 0.0))
    idx = np.nonzero(keep)[0]
    wt = wt[idx]
    rank = rank[idx]
    rnode = rnode[idx]
    cidx = np.array(ci_, dtype=np.int64)[idx]
    recs = np.zeros(len(idx), dtype=REC)
    recs["kind"] = np.array(kind_, dtype=np.uint8)[idx]
    recs["op"] = np.array(op_, dtype=np.uint8)[idx]
    recs["flags"] = np.array(fl_, dtype=np.uint16)[idx]
    recs["rank"] = rank
    recs["comm"] = np.array([c.cid for c in job.comms], dtype=np.uint64)[cidx]
    recs["seq"] = np.array(sq_, dtype=np.uint64)[idx]
    tsa = np.array(ts_)[idx]
    tea = np.array(te_)[idx]
    recs["t_start_ns"] = loc_ns(tsa, rnode)
    recs["t_end_ns"] = np.where(tea > 0, loc_ns(tea, rnode), 0)
    recs["bytes"] = np.array(by_, dtype=np.uint64)[idx]
    recs["comm_rank"] = np.array(cr_, dtype=np.int32)[idx]
    recs["peer"] = np.array(pe_, dtype=np.int32)[idx]
    recs["nranks"] = np.array(nr_, dtype=np.uint32)[idx]
    recs["aux"] = np.array(ax_, dtype=np.uint32)[idx]
    del cols, wt_, kind_, op_, fl_, rk_, ci_, sq_, ts_, te_, by_, cr_, pe_, nr_, ax_

    out = []   # (node, produce time true, topic, key, value-json or None, b64 or None)
    job_id = job.job

    # --- agent flushes -----------------------------------------------------------------
    flushes = {}
    for n in range(job.nnodes):
        lo, hi = tel.flush.get(n, (0.18, 0.22))
        t = t_init + rnd() * hi
        fl = []
        while t <= t_end + hi:
            fl.append(t)
            t += lo + (hi - lo) * rnd()
        flushes[n] = np.array(fl)
    order = np.lexsort((wt, cidx, rnode))
    recs = recs[order]
    wt = wt[order]
    rnode = rnode[order]
    cidx = cidx[order]
    fidx = np.empty(len(wt), dtype=np.int64)
    for n in range(job.nnodes):
        m = rnode == n
        fidx[m] = np.searchsorted(flushes[n], wt[m], side="left")
    # group by (node, flush, comm); within a group keep write order
    order = np.lexsort((wt, cidx, fidx, rnode))
    recs = recs[order]
    g_node = rnode[order]
    g_f = fidx[order]
    g_c = cidx[order]
    if len(order):
        brk = np.nonzero((np.diff(g_node) != 0) | (np.diff(g_f) != 0) | (np.diff(g_c) != 0))[0] + 1
        starts = np.concatenate(([0], brk))
        ends = np.concatenate((brk, [len(order)]))
    else:
        starts = ends = np.array([], dtype=np.int64)
    hdr_cache = {}
    for a, b in zip(starts.tolist(), ends.tolist()):
        n = int(g_node[a])
        ft = flushes[n][g_f[a]]
        c = job.comms[int(g_c[a])]
        for a2 in range(a, b, 4096):
            b2 = min(b, a2 + 4096)
            cnt = b2 - a2
            hdr = hdr_cache.get(cnt)
            if hdr is None:
                hdr = b"CWB1" + np.array([1, 64], "<u2").tobytes() + np.array([cnt, 0], "<u4").tobytes()
                hdr_cache[cnt] = hdr
            payload = base64.b64encode(hdr + recs[a2:b2].tobytes()).decode()
            out.append((n, ft + 0.001 + 0.002 * rnd(), "cw.calls.v1", "%s/%016x" % (job_id, c.cid), None, payload))

    # --- heartbeats -------------------------------------------------------------------------
    rk = recs["rank"].astype(np.int64)
    cc = g_c
    fl = recs["flags"]
    sq = recs["seq"].astype(np.int64)
    opc = recs["op"]
    isp2p = (opc == OP["send"]) | (opc == OP["recv"])
    iscall = recs["kind"] == K_CALL
    # each record's write time again (recs are in flush-group order now)
    wtg = wt[order]
    tsn = recs["t_start_ns"]
    ten = recs["t_end_ns"]

    def prog_state(ii):
        if len(ii) == 0:
            return None
        o2 = np.argsort(wtg[ii], kind="stable")
        ii = ii[o2]
        w = wtg[ii]
        s = sq[ii]
        cm = np.maximum.accumulate(s)
        ar = np.arange(len(s))
        pos = np.maximum.accumulate(np.where(s == cm, ar, -1))
        st_ns = tsn[ii][pos]
        comp = (fl[ii] & F_COMPLETED) != 0
        sc = np.where(comp, s, -1)
        ccm = np.maximum.accumulate(sc)
        cpos = np.maximum.accumulate(np.where(comp & (sc == ccm), ar, -1))
        en_ns = np.where(cpos >= 0, ten[ii][np.maximum(cpos, 0)], 0)
        return w, cm, st_ns, ccm, en_ns

    def at(state, t):
        if state is None:
            return -1, 0, -1, 0
        w, cm, st_ns, ccm, en_ns = state
        j = np.searchsorted(w, t, side="right") - 1
        if j < 0:
            return -1, 0, -1, 0
        return int(cm[j]), int(st_ns[j]), int(ccm[j]), int(en_ns[j])

    # index records by (rank, comm)
    keyrc = rk * 4096 + cc
    o = np.argsort(keyrc, kind="stable")
    ks = keyrc[o]
    uk, first = np.unique(ks, return_index=True)
    last = np.concatenate((first[1:], [len(ks)]))
    span = {int(k): (int(a), int(b)) for k, a, b in zip(uk, first, last)}
    pe_all = recs["peer"]
    for n in range(job.nnodes):
        if n in tel.dead and tel.dead[n] <= t_init:
            continue
        ranks_n = [r for r in range(W) if job.node_of[r] == n]
        comms_n = {}
        for r in ranks_n:
            for c in job.rank_comms[r]:
                comms_n.setdefault(c.idx, []).append(r)
        phase = rnd() * tel.hb_period
        ticks = np.arange(t_init + 0.5 + phase, t_end + 1e-9, tel.hb_period)
        if len(ticks) == 0:
            continue
        tick_ns = loc_ns(ticks, np.full(len(ticks), n))
        for ci, rs in sorted(comms_n.items()):
            c = job.comms[ci]
            t_known = min(init_t[(r, ci)] for r in rs)   # the agent learns a comm at its init
            entries = [[] for _ in ticks]
            for r in rs:
                sp = span.get(r * 4096 + ci)
                coll_state = None
                p2p_states = []
                if sp is not None:
                    ii = o[sp[0]:sp[1]]
                    ic = ii[iscall[ii]]
                    coll_state = prog_state(ic[~isp2p[ic]])
                    ip = ic[isp2p[ic]]
                    if len(ip):
                        for pv in sorted(set(pe_all[ip].tolist())):
                            for oc, on in ((OP["send"], "send"), (OP["recv"], "recv")):
                                jj = ip[(opc[ip] == oc) & (pe_all[ip] == pv)]
                                if len(jj):
                                    p2p_states.append((pv, on, prog_state(jj)))
                if coll_state is not None:
                    w, cm, st_ns, ccm, en_ns = coll_state
                    js = np.searchsorted(w, ticks, side="right") - 1
                    vals = [(-1, -1, 0, 0) if j < 0 else (int(cm[j]), int(ccm[j]), int(st_ns[j]), int(en_ns[j]))
                            for j in js.tolist()]
                else:
                    vals = [(-1, -1, 0, 0)] * len(ticks)
                for k, t in enumerate(ticks):
                    s_, cp, sn, en = vals[k]
                    e = '{"rank":%d,"started":%d,"completed":%d,"t_last_start_ns":%d,"t_last_end_ns":%d' % (
                        r, s_, cp, sn, en)
                    if p2p_states:
                        ps = []
                        for pv, on, stt in p2p_states:
                            s2, _, c2, _ = at(stt, t)
                            if s2 < 0 and c2 < 0:
                                continue      # nothing with this peer yet
                            ps.append('{"peer":%d,"op":"%s","started":%d,"completed":%d}' % (pv, on, s2, c2))
                        if ps:
                            e += ',"p2p":[' + ",".join(ps) + "]"
                    entries[k].append(e + "}")
            for k, t in enumerate(ticks):
                if t < t_known:
                    continue
                v = '{"v":1,"job":"%s","node":"%s","ts_ns":%d,"comm":"%016x","ranks":[%s]}' % (
                    job_id, job.node_name(n), tick_ns[k], c.cid, ",".join(entries[k]))
                out.append((n, t + 0.001 + 0.002 * rnd(), "cw.progress.v1", "%s/%016x" % (job_id, c.cid), v, None))

    # --- topology (hook/agent, once at start) --------------------------------------------------
    for r in range(W):
        n = job.node_of[r]
        t = t_init + 0.4 + 0.2 * rnd()
        co = job.coords[r]
        v = {"v": 1, "job": job_id, "ts_ns": int(loc_ns(t, n)), "rank": r, "world_size": W,
             "node": job.node_name(n), "local_rank": r % job.gpn,
             "gpu": "GPU-%08x-%04x-%04x" % (zlib.crc32(("%s/%d" % (job_id, r)).encode()), n, r % job.gpn)}
        if co:
            v["coords"] = co
        out.append((n, t + 0.01, "cw.topology.v1", job_id, json.dumps(v, separators=(",", ":")), None))

    # --- iteration timings (the hook's step(); written at each iteration end) ---------------------
    if job.probe == "hook":
        for r in range(W):
            n = job.node_of[r]
            cur = None
            ph = {}
            lastph = None
            for op in job.progs[r]:
                if op.kind != MARK or op.enq is None:
                    continue
                tag = op.tag
                if tag[0] == "step":
                    cur = (tag[1], op.enq)
                    ph = {}
                    lastph = None
                elif tag[0] == "phase" and cur is not None:
                    if lastph is not None:
                        ph[lastph[0]] = ph.get(lastph[0], 0.0) + op.enq - lastph[1]
                    lastph = (tag[1], op.enq) if tag[1] else None
                elif tag[0] == "stepend" and cur is not None:
                    if lastph is not None:
                        ph[lastph[0]] = ph.get(lastph[0], 0.0) + op.enq - lastph[1]
                    v = '{"v":1,"job":"%s","rank":%d,"iteration":%d,"t_start_ns":%d,"t_end_ns":%d' % (
                        job_id, r, cur[0], loc_ns(cur[1], n), loc_ns(op.enq, n))
                    if ph:
                        v += ',"phases":{%s}' % ",".join('"%s_ms":%.3f' % (k, 1e3 * x) for k, x in sorted(ph.items()))
                    v += "}"
                    w = op.enq + 2e-4
                    if w <= t_end and not (n in tel.dead and w >= tel.dead[n]):
                        fi = np.searchsorted(flushes[n], w)
                        ft = flushes[n][min(fi, len(flushes[n]) - 1)]
                        out.append((n, ft + 0.001, "cw.steps.v1", job_id, v, None))
                    cur = None

    # --- hardware samples --------------------------------------------------------------------
    if tel.hw is not None:
        for n in range(job.nnodes):
            t = t_init + 1.0 + rnd()
            while t <= t_end:
                f = tel.hw(job, n, t)
                if f is not None:
                    v = {"v": 1, "job": job_id, "node": job.node_name(n), "ts_ns": int(loc_ns(t, n))}
                    v.update(f)
                    out.append((n, t + 0.002, "cw.hw.v1", job_id, json.dumps(v, separators=(",", ":")), None))
                t += 5.0

    # --- delivery: backlog, bursts, dead agents; ts_ns = produce time on the node's clock ------
    byn = collections.defaultdict(list)
    for i, m in enumerate(out):
        byn[m[0]].append(i)
    lines = []
    nmsg = collections.Counter()
    for n, ii in byn.items():
        ii.sort(key=lambda i: out[i][1])
        pt = np.array([out[i][1] for i in ii])
        if n in tel.dead:
            ok = pt < tel.dead[n]
            ii = [i for i, k in zip(ii, ok) if k]
            pt = pt[ok]
        if n in tel.late:
            lo, hi = tel.late[n]
            # the backlog wanders between lo and hi
            x = np.cumsum(job.rng.normal(0, 0.15, len(pt)))
            d = lo + (hi - lo) * (0.5 + 0.5 * np.sin(0.35 * (pt - t_init) + 0.3 * np.tanh(x / 20)))
            pt = np.maximum.accumulate(pt + d)
        for gs, gl in tel.bursts.get(n, ()):
            m = (pt >= gs) & (pt < gs + gl)
            pt = np.where(m, gs + gl + 1e-4 * np.cumsum(m), pt)
            pt = np.maximum.accumulate(pt)
        tsn_ = loc_ns(pt, np.full(len(pt), n))
        for i, t, tn in zip(ii, pt.tolist(), tsn_.tolist()):
            if t > t_end:
                continue
            _, _, topic, key, v, b64 = out[i]
            nmsg[topic] += 1
            if b64 is not None:
                lines.append((tn, '{"topic":"%s","key":"%s","ts_ns":%d,"value_b64":"%s"}' % (topic, key, tn, b64)))
            else:
                lines.append((tn, '{"topic":"%s","key":"%s","ts_ns":%d,"value":%s}' % (topic, key, tn, v)))
    lines.sort(key=lambda x: x[0])
    with open(path, "w") as f:
        for _, s in lines:
            f.write(s)
            f.write("\n")
    return dict(messages=dict(nmsg), records=int(len(recs)), offsets_ms=[round(1e3 * x, 2) for x in off])


# ------------------------------------------------------------------------------------------
# job builders
# ------------------------------------------------------------------------------------------

def grid_layout(job, TP, PP, DP):
    """rank = dp*(PP*TP) + pp*TP + tp (Megatron's order); comms of every group."""
    W = TP * PP * DP
    assert W == job.world
    pos = {}
    for r in range(W):
        dp, rem = divmod(r, PP * TP)
        pp, tp = divmod(rem, TP)
        pos[r] = (tp, pp, dp)
        job.coords[r] = {"tp": tp, "pp": pp, "dp": dp}
    rank = lambda tp, pp, dp: dp * PP * TP + pp * TP + tp
    g = dict(tp={}, pp={}, dp={}, mp={})
    for dp in range(DP):
        for pp in range(PP):
            if TP > 1:
                g["tp"][(pp, dp)] = job.comm("tp%d.%d" % (pp, dp), [rank(t, pp, dp) for t in range(TP)])
        for tp in range(TP):
            if PP > 1:
                g["pp"][(tp, dp)] = job.comm("pp%d.%d" % (tp, dp), [rank(tp, p, dp) for p in range(PP)])
        if TP * PP > 1:
            g["mp"][dp] = job.comm("mp%d" % dp, [rank(t, p, dp) for p in range(PP) for t in range(TP)])
    for pp in range(PP):
        for tp in range(TP):
            if DP > 1:
                g["dp"][(tp, pp)] = job.comm("dp%d.%d" % (tp, pp), [rank(tp, pp, d) for d in range(DP)])
    return pos, rank, g


def build_pipeline(job, TP, PP, DP, chunk_pos, M, policy, dry_dur, cost, iters, opts):
    """Megatron-style pipeline job: per step the dry-run order, TP all-reduces inside each
    F/B task, DP gradient buckets, grad-norm all-reduce + .item(), optimizer.
    cost: kind -> seconds of compute for one task (per chunk). opts: dict of knobs."""
    pos, rank, g = grid_layout(job, TP, PP, DP)
    dry = dry_run(PP, chunk_pos, M, policy, dry_dur)
    items = pipeline_items(PP, chunk_pos, dry)
    C = len(chunk_pos)
    act_bytes = opts.get("act_bytes", 16 << 20)
    tp_ars = opts.get("tp_ars", 2)
    sync_p2p = opts.get("sync_p2p", True)
    grad_bytes = opts.get("grad_bytes", 200 << 20)
    hooks = opts.get("hook")  # fn(job, r, it, where, idx) for fault placement
    for it in range(iters):
        for r in range(job.world):
            tp, pp, dp = pos[r]
            tpc = g["tp"].get((pp, dp))
            ppc = g["pp"].get((tp, dp))
            job.mark(r, ("step", it))
            job.host(r, 0.004 + 0.004 * job.pr.random())  # get_batch
            recv_idx = {}
            task_last = {}
            chunk_last = {}
            for kind, t, payload in items[pp]:
                if kind == "grp":
                    gid = job.new_group()
                    for sr, ppos, tag in payload:
                        peer = rank(tp, ppos, dp)
                        deps = ()
                        if sr == "send":
                            prod = ("F" if tag[0] == "act" else "B", tag[1], tag[2])
                            deps = (task_last[prod],)
                        i = job.p2p(r, ppc, sr, peer, act_bytes, deps, grp=gid)
                        if sr == "recv":
                            recv_idx[tag] = i
                    if sync_p2p:
                        job.device_sync(r)
                    continue
                tasks = payload
                deps = []
                total = 0.0
                for k, c, mb in tasks:
                    s = next(ss for ss in range(PP) if chunk_pos[c][ss] == pp)
                    if k == "F" and s > 0:
                        deps.append(recv_idx[("act", c, mb)])
                    if k == "B" and s < PP - 1:
                        deps.append(recv_idx[("grad", c, mb)])
                    total += cost[k](s) if callable(cost[k]) else cost[k]
                if len(tasks) == 2:
                    total *= 0.88   # DualPipe hides part of one pass's communication/compute
                kinds = [k for k, _, _ in tasks]
                nar = 0 if kinds == ["W"] else tp_ars * len([k for k in kinds if k != "W"])
                if hooks:
                    hooks(job, r, it, ("task", tuple(tasks)), len(job.progs[r]))
                if tpc is None or nar == 0:
                    last = job.compute(r, total, deps, nk=50)
                else:
                    last = None
                    piece = total / nar
                    prev = deps
                    for a in range(nar):
                        ci = job.compute(r, piece, prev, nk=25)
                        last = job.coll(r, tpc, "allreduce", act_bytes, (ci,))
                        prev = (last,)
                for k, c, mb in tasks:
                    task_last[(k, c, mb)] = last
                    if k in ("B", "W"):
                        chunk_last[c] = last
            # DP gradient buckets (overlap_grad_reduce: fire when the chunk's grads are done)
            dpc = g["dp"].get((tp, pp))
            ends = []
            if dpc is not None:
                for c in range(C):
                    for b in range(opts.get("buckets", 2)):
                        ends.append(job.coll(r, dpc, "allreduce", grad_bytes // opts.get("buckets", 2), (chunk_last[c],)))
            mpc = g["mp"].get(dp)
            if mpc is not None:
                gn = job.coll(r, mpc, "allreduce", 4, tuple(ends) or (chunk_last[0],))
                job.sync(r, [gn])
            job.compute(r, opts.get("opt", 0.012), (), nk=60)
            job.mark(r, ("stepend", it))
    return pos, rank, g


def step_times(job, r):
    """(iteration, host start, host end) of rank r from its marks."""
    res = {}
    for op in job.progs[r]:
        if op.kind == MARK and op.enq is not None:
            if op.tag[0] == "step":
                res.setdefault(op.tag[1], [op.enq, None])
            elif op.tag[0] == "stepend" and op.tag[1] in res:
                res[op.tag[1]][1] = op.enq
    return res


def last_activity(job):
    """latest finite device end / host time over all ranks."""
    m = 0.0
    for r in range(job.world):
        for op in job.progs[r]:
            if op.end is not None and op.end != INF and op.end > m:
                m = op.end
    return m


def build_fsdp(job, L, iters, fwd, bwd, where, hsdp=True, opt=0.012):
    """FSDP2 / HSDP: shard group = a node's 8 ranks, replicate group = one local rank per node.
    Forward: all-gather of layer i+1 issued (prefetch) before layer i's compute; backward:
    re-gather with prefetch, reduce-scatter of each layer's grads right after its backward
    (same process group, so it serialises with the all-gathers on that group's NCCL stream),
    HSDP all-reduce of the shard over the replicate group, clip_grad_norm_'s all-reduce,
    optimizer, loss.item() (the host runs about a backward ahead)."""
    W = job.world
    g = job.gpn
    shard = [job.comm("shard%d" % n, list(range(n * g, (n + 1) * g))) for n in range(W // g)]
    rep = [job.comm("rep%d" % l, list(range(l, W, g))) for l in range(g)] if hsdp and W > g else None
    world = job.comm("world", list(range(W)))
    pbytes = 96 << 20
    for it in range(iters):
        for r in range(W):
            sc = shard[r // g]
            rc = rep[r % g] if rep else None
            job.mark(r, ("step", it))
            job.host(r, 0.006 + 0.006 * job.pr.random())
            job.mark(r, ("phase", "forward"))
            ag = {0: job.coll(r, sc, "allgather", pbytes // g)}
            comp = {}
            for i in range(L):
                if i + 1 < L:
                    ag[i + 1] = job.coll(r, sc, "allgather", pbytes // g, (comp[i - 1],) if i >= 1 else ())
                comp[i] = job.compute(r, fwd, (ag[i],), nk=40)
            loss = job.compute(r, 0.002, (comp[L - 1],), nk=8)
            job.mark(r, ("phase", "backward"))
            bag = {L - 1: job.coll(r, sc, "allgather", pbytes // g, (loss,))}
            bc = {}
            red = []
            for i in reversed(range(L)):
                if i - 1 >= 0:
                    bag[i - 1] = job.coll(r, sc, "allgather", pbytes // g, (bc[i + 1],) if i + 1 < L else (loss,))
                bc[i] = job.compute(r, bwd, (bag[i],), nk=90)
                where[(r, it, "rs", i)] = len(job.progs[r])
                rs = job.coll(r, sc, "reducescatter", 2 * pbytes // g, (bc[i],))
                red.append(job.coll(r, rc, "allreduce", 2 * pbytes // g, (rs,)) if rc else rs)
            job.mark(r, ("phase", "optimizer"))
            gn = job.coll(r, world, "allreduce", 4, tuple(red))
            job.compute(r, opt, (gn,), nk=60)
            job.sync(r, [loss])          # loss.item() for the log line
            job.mark(r, ("stepend", it))


def build_moe(job, L, M, iters, attn, expert, tok, where):
    """expert parallel (EP = a node's 8 ranks) + data parallel. Per layer and micro-batch:
    attention, router, the token counts copied to the host (all-to-all split sizes: a host
    sync), dispatch all-to-all, experts (time ~ tokens received), combine all-to-all; the
    backward mirrors it. Dense grads all-reduced over the world, expert grads over the
    expert-data-parallel group (same local rank on every node)."""
    W = job.world
    g = job.gpn
    ep = [job.comm("ep%d" % n, list(range(n * g, (n + 1) * g))) for n in range(W // g)]
    edp = [job.comm("edp%d" % l, list(range(l, W, g))) for l in range(g)]
    world = job.comm("world", list(range(W)))
    for r in range(W):
        job.coords[r] = {"tp": 0, "pp": 0, "dp": r, "ep": r % g}
    tb = 24 << 20
    for it in range(iters):
        for r in range(W):
            e = ep[r // g]
            job.mark(r, ("step", it))
            job.host(r, 0.005 + 0.004 * job.pr.random())
            prev = ()
            eb_last = None
            job.mark(r, ("phase", "forward"))
            fw = []
            for mb in range(M):
                for l in range(L):
                    f = tok[it, mb, l, r]
                    a = job.compute(r, attn, prev, nk=20)
                    ro = job.compute(r, 0.0006, (a,), nk=4)
                    job.sync(r, [ro])
                    d = job.coll(r, e, "alltoall", int(tb * f), (ro,), dur=e.coll_time("alltoall", tb * f))
                    x = job.compute(r, expert * f, (d,), nk=12)
                    cmb = job.coll(r, e, "alltoall", int(tb * f), (x,), dur=e.coll_time("alltoall", tb * f))
                    prev = (cmb,)
                fw.append(job.compute(r, 0.001, prev, nk=6))
            job.mark(r, ("phase", "backward"))
            for mb in reversed(range(M)):
                prev = (fw[mb],) if mb == M - 1 else prev
                for l in reversed(range(L)):
                    f = tok[it, mb, l, r]
                    cb = job.coll(r, e, "alltoall", int(tb * f), prev, dur=e.coll_time("alltoall", tb * f))
                    xb = job.compute(r, 2 * expert * f, (cb,), nk=24)
                    db = job.coll(r, e, "alltoall", int(tb * f), (xb,), dur=e.coll_time("alltoall", tb * f))
                    ab = job.compute(r, 2 * attn, (db,), nk=40)
                    prev = (ab,)
                    eb_last = xb
            job.mark(r, ("phase", "optimizer"))
            b1 = job.coll(r, world, "allreduce", 160 << 20, prev)
            b2 = job.coll(r, world, "allreduce", 160 << 20, prev)
            b3 = job.coll(r, edp[r % g], "allreduce", 256 << 20, (eb_last,))
            gn = job.coll(r, world, "allreduce", 4, (b1, b2, b3))
            job.sync(r, [gn])
            job.compute(r, 0.010, (), nk=60)
            job.mark(r, ("stepend", it))


def build_atp(job, L, chunks, iters, gemm, where):
    """async TP (TP = a node's 8 ranks) x DP: each layer's all-gather and reduce-scatter cut
    into c chunks; GEMM chunk i waits only for its all-gather chunk, reduce-scatter chunk i
    only for its GEMM chunk. All chunks of a layer serialise on the TP group's stream.
    DP gradient buckets per layer overlap the backward."""
    W = job.world
    g = job.gpn
    D = W // g
    tpc = [job.comm("tp%d" % d, list(range(d * g, (d + 1) * g))) for d in range(D)]
    dpc = [job.comm("dp%d" % t, list(range(t, W, g))) for t in range(g)]
    world = job.comm("world", list(range(W)))
    for r in range(W):
        job.coords[r] = {"tp": r % g, "pp": 0, "dp": r // g}
    ab = 48 << 20
    for it in range(iters):
        for r in range(W):
            t = tpc[r // g]
            job.mark(r, ("step", it))
            job.host(r, 0.004 + 0.004 * job.pr.random())
            prev = ()
            for l in range(L):
                c = chunks[l]
                ags = [job.coll(r, t, "allgather", ab // c // g, prev) for _ in range(c)]
                g1 = [job.compute(r, gemm / c, (ags[i],), hc=6e-5, nk=2) for i in range(c)]
                last = None
                for i in range(c):
                    g2 = job.compute(r, 0.8 * gemm / c, (g1[i],), hc=6e-5, nk=2)
                    last = job.coll(r, t, "reducescatter", ab // c, (g2,))
                prev = (job.compute(r, 0.0012, (last,), nk=6),)
            bucket = []
            for l in reversed(range(L)):
                c = chunks[l]
                ags = [job.coll(r, t, "allgather", ab // c // g, prev) for _ in range(c)]
                g1 = [job.compute(r, 2 * gemm / c, (ags[i],), hc=6e-5, nk=2) for i in range(c)]
                last = None
                for i in range(c):
                    g2 = job.compute(r, 1.6 * gemm / c, (g1[i],), hc=6e-5, nk=2)
                    last = job.coll(r, t, "reducescatter", ab // c, (g2,))
                wg = job.compute(r, 0.0015, (last,), nk=10)
                prev = (wg,)
                bucket.append(job.coll(r, dpc[r % g], "allreduce", 64 << 20, (wg,)))
            gn = job.coll(r, world, "allreduce", 4, tuple(bucket))
            job.sync(r, [gn])
            job.compute(r, 0.010, (), nk=60)
            job.mark(r, ("stepend", it))


def build_varlen(job, TP, L, iters, layer, heavy, where):
    """Megatron TP x DP, no pipeline; each replica's compute this step scales with its
    tokens (heavy[it, dp]); TP all-reduces twice per layer and pass, DP buckets every two
    layers of the backward, grad norm + .item()."""
    W = job.world
    D = W // TP
    pos, rank, g = grid_layout(job, TP, 1, D)
    world = job.comm("world", list(range(W)))
    for it in range(iters):
        for r in range(W):
            tp, _, dp = pos[r]
            tpc = g["tp"][(0, dp)]
            dpc = g["dp"][(tp, 0)]
            f = heavy[it, dp]
            job.mark(r, ("step", it))
            job.host(r, 0.004 + 0.006 * job.pr.random())
            job.mark(r, ("phase", "forward"))
            prev = ()
            for l in range(L):
                for h in range(2):
                    c = job.compute(r, layer * f / 2, prev, nk=20)
                    prev = (job.coll(r, tpc, "allreduce", 32 << 20, (c,)),)
            job.mark(r, ("phase", "backward"))
            buckets = []
            for l in reversed(range(L)):
                for h in range(2):
                    c = job.compute(r, layer * f, prev, nk=40)
                    prev = (job.coll(r, tpc, "allreduce", 32 << 20, (c,)),)
                if l % 2 == 0:
                    buckets.append(job.coll(r, dpc, "allreduce", 100 << 20, prev))
            job.mark(r, ("phase", "optimizer"))
            gn = job.coll(r, world, "allreduce", 4, tuple(buckets))
            job.sync(r, [gn])
            job.compute(r, 0.010, (), nk=60)
            job.mark(r, ("stepend", it))


# ------------------------------------------------------------------------------------------
# scenarios
# ------------------------------------------------------------------------------------------

def _ns(t):
    return int(BASE_NS + round(t * 1e9))


def truth(job, check, expect, culprits=(), fault_t=None, **kw):
    t = dict(name=job.name, job=job.job, world=job.world, gpn=job.gpn,
             probe=("plugin host-enqueue (ENQUEUED)" if job.enq else
                    ("plugin GPU-timed" if job.probe == "plugin" else "hook GPU-timed")),
             check=check, expect=expect, culprit_ranks=sorted(int(c) for c in culprits),
             culprit_nodes=sorted({job.node_name(job.node_of[c]) for c in culprits}),
             fault_ns=_ns(fault_t) if fault_t is not None else None, info=None)
    t.update(kw)
    return t


def healthy_end(job):
    return last_activity(job) + 1.0


def sc_zb(seed, slow):
    name = "zb_slow" if slow else "zb_healthy"
    job = Job(name, 16, 8, seed, probe="hook")
    P, u = 4, 0.020
    culprit = 0 * 8 + 2 * 2 + 1   # tp 1, pp 2 (a middle stage), dp 0
    if slow:
        job.speed[culprit] = 1.5
    build_pipeline(job, 2, P, 2, [list(range(P))], 8, policy_zbh1(P), dict(F=1, B=1, W=1),
                   dict(F=u, B=u, W=0.8 * u), 40, dict(act_bytes=12 << 20))
    job.run(1.5)
    tel = Telemetry(job)
    desc = ("ZB-H1 zero-bubble pipeline, TP 2 x PP 4 x DP 2, 8 micro-batches, backward split into "
            "B (input grad) and W (weight grad), W deferred into bubbles; Megatron p2p with "
            "synchronize after each batched send/recv")
    if slow:
        return job, tel, healthy_end(job), truth(
            job, "slow", "rank %d (tp 1, pp 2 of 4) 1.5x slower for the whole run: named alone, P1/P2; "
            "its TP peer, its stage neighbours and DP peers are victims" % culprit, [culprit], 1.5,
            description=desc, slowdown=1.5)
    return job, tel, healthy_end(job), truth(job, "healthy", "no P0/P1, no rank named", description=desc)


def sc_dualpipe(seed, hang):
    name = "dualpipe_hang" if hang else "dualpipe_healthy"
    job = Job(name, 16, 8, seed, probe="plugin")
    P, u = 4, 0.018
    culprit = 1 * 8 + 1 * 2 + 0   # tp 0, pp 1, dp 1
    hit = {}

    def hook(job, r, it, what, idx):
        if hang and r == culprit and it == 20:
            hit.setdefault("n", 0)
            hit["n"] += 1
            if hit["n"] == 7:           # the 7th compute task of step 20: mid-step
                job.stuck_op[r] = idx
                hit["task"] = what
    build_pipeline(job, 2, P, 2, [list(range(P)), list(range(P))[::-1]], 6, policy_dualpipe(P),
                   dict(F=1, B=2), dict(F=u, B=2 * u), 36 if not hang else 26,
                   dict(act_bytes=12 << 20, sync_p2p=False, hook=hook))
    job.run(1.5)
    tel = Telemetry(job)
    desc = ("DualPipe-style bidirectional pipeline, TP 2 x PP 4 x DP 2: each rank holds stage i and "
            "stage P-1-i, 6 micro-batches enter from each end, a forward of one direction overlapped "
            "with a backward of the other, sends/recvs to both neighbours batched together")
    if hang:
        op = job.progs[culprit][job.stuck_op[culprit]]
        ft = op.start + op.dur
        return job, tel, ft + 30.0, truth(
            job, "hang", "rank %d's compute kernel never ends in step 20 (its GPU stops mid-step): one P0 "
            "naming rank %d only" % (culprit, culprit), [culprit], ft, description=desc,
            detail="stuck in %s" % (hit.get("task"),))
    return job, tel, healthy_end(job), truth(job, "healthy", "no P0/P1, no rank named", description=desc)


def sc_fsdp(seed, variant, enq=False):
    name = ("fsdp_enq_" if enq else "fsdp_") + variant
    job = Job(name, 32, 8, seed, probe="plugin" if enq else "hook", enq=enq)
    if enq:
        job.lost_p = 0.002
    where = {}
    slow_rank = 27 if enq else 13
    hang_rank = 9 if enq else 22
    if variant == "slow":
        job.speed[slow_rank] = 1.3
    build_fsdp(job, 8, 42 if variant != "hang" else 34, 0.015, 0.030, where)
    if variant == "hang":
        it, layer = (25, 5) if enq else (30, 3)
        job.host_stop_idx[hang_rank] = where[(hang_rank, it, "rs", layer)]
    job.run(1.5)
    tel = Telemetry(job)
    desc = ("FSDP2/HSDP, 4 nodes x 8: shard group = node, replicate group across nodes; 8 layers; "
            "next layer's all-gather issued before the current layer's compute, reduce-scatter + "
            "replicate all-reduce right after each layer's backward, overlapped with the next; "
            + ("probe: NCCL plugin at host enqueue (ENQUEUED), 0.2 % of completions lost"
               if enq else "probe: the hook (GPU-timed), steps with phases"))
    if variant == "slow":
        return job, tel, healthy_end(job), truth(
            job, "slow", "rank %d 1.3x slower (whole run): named alone, P1/P2; its shard group waits "
            "on it at every all-gather and reduce-scatter" % slow_rank +
            (" (host-enqueue: the host is launch-queue bound late in each step, so the slow GPU delays "
             "its enqueues: it is the last to enqueue ~2x as often as its peers, ~5 ms later on average)"
             if enq else ""), [slow_rank], 1.5,
            description=desc, slowdown=1.3)
    if variant == "hang":
        ft = job.host_final[hang_rank]
        return job, tel, ft + 30.0, truth(
            job, "hang", "rank %d's host stops just before layer %d's reduce-scatter (it never enters "
            "it); its shard peers wait in it (and, host-enqueue, queue many calls behind it): one P0 "
            "naming rank %d" % (hang_rank, layer, hang_rank), [hang_rank], ft, description=desc)
    return job, tel, healthy_end(job), truth(job, "healthy", "no P0/P1, no rank named", description=desc)


def sc_moe(seed, slow):
    name = "moe_slow" if slow else "moe_healthy"
    job = Job(name, 16, 8, seed, probe="hook")
    L, M, iters = 4, 2, 50
    tok = 1.0 + job.rng.uniform(-0.2, 0.2, (iters, M, L, 16))
    culprit = 11
    if slow:
        job.speed[culprit] = 1.4
    build_moe(job, L, M, iters, 0.006, 0.010, tok, {})
    job.run(1.5)
    tel = Telemetry(job)
    desc = ("MoE: expert parallel 8 (a node) x data parallel 2, 4 layers x 2 micro-batches, dispatch and "
            "combine all-to-all per layer and pass, tokens per rank +-20 % per micro-batch and layer by "
            "design (a different rank is the hot one every time), token counts copied to the host")
    if slow:
        return job, tel, healthy_end(job), truth(
            job, "slow", "rank %d's GPU 1.4x slower for the whole run, under the routing noise: named "
            "alone, P1/P2" % culprit, [culprit], 1.5, description=desc, slowdown=1.4)
    return job, tel, healthy_end(job), truth(job, "healthy", "routing noise only: no P0/P1, no rank named",
                                             description=desc)


def sc_atp(seed, variant, enq=False):
    name = ("atp_enq_" if enq else "atp_") + variant
    job = Job(name, 32, 8, seed, probe="plugin", enq=enq)
    if enq:
        job.lost_p = 0.003
    culprit = 6 if enq else 19
    if variant == "slow":
        job.speed[culprit] = 1.5
    build_atp(job, 4, [4, 6, 8, 5], 22, 0.012, {})
    job.run(1.5)
    tel = Telemetry(job)
    desc = ("async tensor parallelism, TP 8 (a node) x DP 4: each layer's all-gather and reduce-scatter "
            "cut into 4, 6, 8, 5 chunks overlapped with GEMM chunks (~100 small collectives per rank "
            "and step), DP buckets per layer in the backward; probe: NCCL plugin" +
            (" at host enqueue (ENQUEUED), 0.3 % of completions lost" if enq else " (GPU-timed)"))
    if variant == "slow" and enq:
        return job, tel, healthy_end(job), truth(
            job, "slow_unobservable", "rank %d 1.5x slower (whole run), but under this probe it leaves no "
            "per-rank trace in the records: the host enqueues a whole step (~250 launches, under the "
            "1024-deep queue) and blocks only at the grad-norm .item(), so every rank's entries are host "
            "times right after a common sync, and completions are simultaneous; no steps (plugin only). "
            "Expected: no P0/P1 and no other rank named (naming rank %d is welcome, a job-level "
            "advisory naming no rank is fine)" % (culprit, culprit), [culprit], 1.5,
            description=desc, slowdown=1.5)
    if variant == "slow":
        return job, tel, healthy_end(job), truth(
            job, "slow", "rank %d 1.5x slower (whole run): named alone, P1/P2 (it enters the "
            "reduce-scatter chunks late, not the all-gathers)" % culprit, [culprit], 1.5,
            description=desc, slowdown=1.5)
    return job, tel, healthy_end(job), truth(job, "healthy", "no P0/P1, no rank named", description=desc)


def telem_common(job, hang):
    """4 nodes x 8, TP 4 x PP 2 x DP 4, 1F1B, the hook."""
    P, u = 2, 0.022
    iters = 56
    hit = {}
    culprit = 3 * 8 + 1 * 4 + 2   # node 3: dp 3, pp 1, tp 2

    def hook(job, r, it, what, idx):
        if hang and r == culprit and it == 34:
            hit["n"] = hit.get("n", 0) + 1
            if hit["n"] == 5:
                job.host_stop_idx[r] = idx
    build_pipeline(job, 4, P, 4, [list(range(P))], 6, policy_1f1b(P), dict(F=1, B=2),
                   dict(F=u, B=2 * u), iters if not hang else 40, dict(act_bytes=16 << 20, hook=hook))
    job.run(1.5)
    return culprit


def sc_telem(seed, hang):
    name = "telem_hang" if hang else "telem_healthy"
    job = Job(name, 32, 8, seed, probe="hook")
    culprit = telem_common(job, hang)
    tel = Telemetry(job)
    tel.late[1] = (3.0, 8.0)                 # node 1's producer backlogged 3-8 s
    for n in range(job.nnodes):
        tel.flush[n] = (0.1, 1.0)            # flush cadence jitters 0.1-1 s
    desc = ("1F1B TP 4 x PP 2 x DP 4 (4 nodes), the hook; node-01's agent publishes everything 3-8 s "
            "late (backlogged producer), every agent flushes every 0.1-1 s (jittered)")
    if not hang:
        tel.bursts[2] = [(12.0, 4.0), (24.0, 4.0)]   # node 2: nothing for 4 s, then all at once
        desc += "; node-02's messages held for 4 s twice (at 12 s and 24 s) and delivered in a burst"
        return job, tel, healthy_end(job), truth(
            job, "healthy", "healthy job, only its telemetry is late or bursty: no P0/P1 and no rank "
            "named at any severity", description=desc, strict_no_names=True,
            late_node=job.node_name(1), burst_node=job.node_name(2))
    ft = job.host_final[culprit]
    return job, tel, ft + 30.0, truth(
        job, "hang", "rank %d (node-03) stops issuing mid-step 34 (Python deadlock) while node-01's "
        "telemetry is 3-8 s late: exactly one P0 naming rank %d, never node-01's ranks" % (culprit, culprit),
        [culprit], ft, description=desc, late_node=job.node_name(1))


def sc_scale(seed, hang):
    name = "scale_hang" if hang else "scale_healthy"
    job = Job(name, 4096, 8, seed, probe="plugin")
    P, u = 4, 0.020
    culprit = 77 * 32 + 1 * 8 + 3   # dp 77, pp 1, tp 3
    hit = {}

    def hook(job, r, it, what, idx):
        if hang and r == culprit and it == 2:
            hit["n"] = hit.get("n", 0) + 1
            if hit["n"] == 4:
                job.host_stop_idx[r] = idx
    build_pipeline(job, 8, P, 128, [list(range(P))], 4, policy_1f1b(P), dict(F=1, B=2),
                   dict(F=u, B=2 * u), 3 if not hang else 4, dict(act_bytes=16 << 20, tp_ars=1, buckets=1, hook=hook))
    job.run(1.5)
    tel = Telemetry(job)
    desc = "4096 ranks: TP 8 (a node) x PP 4 x DP 128, 1F1B with 4 micro-batches, NCCL plugin (GPU-timed), 512 nodes"
    if hang:
        ft = job.host_final[culprit]
        return job, tel, ft + 15.0, truth(
            job, "hang", "rank %d (dp 77, pp 1, tp 3) stops issuing mid-step 2: one P0 naming it, not its "
            "4095 victims" % culprit, [culprit], ft, description=desc)
    return job, tel, healthy_end(job), truth(job, "healthy", "no P0/P1, no rank named", description=desc)


def sc_varlen(seed, slow):
    name = "varlen_slow" if slow else "varlen_healthy"
    job = Job(name, 16, 8, seed, probe="hook")
    iters, D = 50, 8
    heavy = job.rng.uniform(0.85, 1.0, (iters, D))
    for it in range(iters):
        heavy[it, job.rng.integers(D)] = job.rng.uniform(1.3, 1.6)
        if job.rng.random() < 0.3:
            heavy[it, job.rng.integers(D)] = job.rng.uniform(1.2, 1.4)
    culprit = 3 * 2 + 0   # dp 3, tp 0
    if slow:
        job.speed[culprit] = 1.4
    build_varlen(job, 2, 6, iters, 0.012, heavy, {})
    job.run(1.5)
    tel = Telemetry(job)
    desc = ("TP 2 x DP 8, variable-length sequences: each step one replica (sometimes two) gets "
            "1.2-1.6x the tokens, a different one every step; the others 0.85-1.0x")
    if slow:
        return job, tel, healthy_end(job), truth(
            job, "slow", "rank %d's GPU 1.4x slower for the whole run (its TP peer rank %d is a victim): "
            "named alone, P1/P2" % (culprit, culprit + 1), [culprit], 1.5, description=desc, slowdown=1.4)
    return job, tel, healthy_end(job), truth(job, "healthy", "legitimate imbalance only: no P0/P1, no rank named",
                                             description=desc)


def sc_nicflap(seed):
    job = Job("nicflap", 32, 8, seed, probe="plugin")
    P, u = 2, 0.040
    period, length, phase = 20.0, 1.5, 9.0
    flap_node = 1
    # TP 8 x PP 2 x DP 2: node = dp*2 + pp
    orig = job.comm

    def comm_with_pause(name, members):
        c = orig(name, members)
        if c.inter and any(job.node_of[m] == flap_node for m in c.members):
            c.pause = (period, length, phase)
        return c
    job.comm = comm_with_pause
    build_pipeline(job, 8, P, 2, [list(range(P))], 4, policy_1f1b(P), dict(F=1, B=2),
                   dict(F=u, B=2 * u), 80, dict(act_bytes=32 << 20, tp_ars=2, buckets=2))
    job.run(1.5)
    tel = Telemetry(job)
    flaps = []

    def hw(job, n, t):
        k = max(0, math.floor((t - phase) / period) + 1) if t >= phase else 0
        v = {"ib": {"mlx5_%d" % i: {"tx_bytes": int(t * 9.1e9), "rx_bytes": int(t * 9.0e9),
                                    "symbol_errors": (37 * k if n == flap_node else 0)} for i in range(2)}}
        return v
    tel.hw = hw
    t_end = healthy_end(job)
    t = phase
    while t < t_end:
        flaps.append(round(t, 2))
        t += period
    return job, tel, t_end, truth(
        job, "flap", "node-01's inter-node links pause 1.5 s every 20 s (at %s s), all its cross-node comms "
        "stall then recover; ranks are healthy. Expected: no P0, no P1; at most a P2/P3 link or node "
        "advisory naming node-01 (or only its ranks)" % flaps, [],
        None, flap_node=job.node_name(flap_node),
        flap_ranks=[r for r in range(32) if job.node_of[r] == flap_node],
        description="TP 8 x PP 2 x DP 2 (node = dp*2+pp), 1F1B, NCCL plugin; node samples with IB "
                    "counters every 5 s (node-01's symbol errors rise at each flap)")


def sc_agentdead(seed):
    job = Job("agentdead_hang", 32, 8, seed, probe="hook")
    P, u = 2, 0.030
    culprit = 1 * 16 + 0 * 8 + 5    # dp 1, pp 0, tp 5 -> node 2
    hit = {}

    def hook(job, r, it, what, idx):
        if r == culprit and it == 25:
            hit["n"] = hit.get("n", 0) + 1
            if hit["n"] == 3:
                job.stuck_op[r] = idx
    build_pipeline(job, 8, P, 2, [list(range(P))], 4, policy_1f1b(P), dict(F=1, B=2),
                   dict(F=u, B=2 * u), 30, dict(act_bytes=24 << 20, hook=hook))
    job.run(1.5)
    op = job.progs[culprit][job.stuck_op[culprit]]
    ft = op.start + op.dur
    tel = Telemetry(job)
    node = job.node_of[culprit]
    tel.dead[node] = op.start + 0.05
    nranks = [r for r in range(32) if job.node_of[r] == node]
    return job, tel, ft + 30.0, truth(
        job, "hang_node", "rank %d's compute kernel never ends in step 25 and node-02's agent dies at the same "
        "moment (no records, heartbeats or steps from node-02 afterwards). Accepted: exactly one P0, a "
        "hang or node_lost, naming rank %d or node-02 with ranks only from node-02 (%s); a P0 naming a "
        "rank of another node fails" % (culprit, culprit, nranks), [culprit], ft,
        node_ranks=nranks, dead_node=job.node_name(node),
        description="TP 8 x PP 2 x DP 2 (node = dp*2+pp), 1F1B, the hook")


SCENARIOS = [
    ("zb_healthy", lambda s: sc_zb(s, False)),
    ("zb_slow", lambda s: sc_zb(s, True)),
    ("dualpipe_healthy", lambda s: sc_dualpipe(s, False)),
    ("dualpipe_hang", lambda s: sc_dualpipe(s, True)),
    ("fsdp_healthy", lambda s: sc_fsdp(s, "healthy")),
    ("fsdp_slow", lambda s: sc_fsdp(s, "slow")),
    ("fsdp_hang", lambda s: sc_fsdp(s, "hang")),
    ("fsdp_enq_slow", lambda s: sc_fsdp(s, "slow", enq=True)),
    ("fsdp_enq_hang", lambda s: sc_fsdp(s, "hang", enq=True)),
    ("moe_healthy", lambda s: sc_moe(s, False)),
    ("moe_slow", lambda s: sc_moe(s, True)),
    ("atp_healthy", lambda s: sc_atp(s, "healthy")),
    ("atp_slow", lambda s: sc_atp(s, "slow")),
    ("atp_enq_slow", lambda s: sc_atp(s, "slow", enq=True)),
    ("telem_healthy", lambda s: sc_telem(s, False)),
    ("telem_hang", lambda s: sc_telem(s, True)),
    ("scale_healthy", lambda s: sc_scale(s, False)),
    ("scale_hang", lambda s: sc_scale(s, True)),
    ("varlen_healthy", lambda s: sc_varlen(s, False)),
    ("varlen_slow", lambda s: sc_varlen(s, True)),
    ("nicflap", sc_nicflap),
    ("agentdead_hang", sc_agentdead),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("prefix", nargs="*")
    a = ap.parse_args()
    if a.list:
        print("\n".join(n for n, _ in SCENARIOS))
        return
    if not a.out:
        ap.error("--out is required")
    import check
    os.makedirs(a.out, exist_ok=True)
    bad = 0
    for i, (name, fn) in enumerate(SCENARIOS):
        if a.prefix and not any(name.startswith(p) for p in a.prefix):
            continue
        t0 = time.time()
        job, tel, t_end, tr = fn(a.seed * 1000 + i)
        t1 = time.time()
        path = os.path.join(a.out, name + ".cwcap")
        info = emit(job, tel, 0.0, t_end, path)
        t2 = time.time()
        tr["seed"] = a.seed
        tr["capture_s"] = round(t_end, 1)
        tr["node_clock_offsets_ms"] = [float(x) for x in info["offsets_ms"][:16]]
        tr["messages"] = info["messages"]
        tr["records"] = info["records"]
        with open(os.path.join(a.out, name + ".truth.json"), "w") as f:
            json.dump(tr, f, indent=1)
        msg = ""
        if not a.no_check:
            errs = check.check_capture(path, tr)
            if errs:
                bad += 1
                msg = "  CHECK FAILED: " + "; ".join(errs[:5])
        print("%-18s %5d ranks %7d records %6.1f MB  sim %.1fs emit %.1fs check %.1fs%s" % (
            name, job.world, info["records"], os.path.getsize(path) / 1e6, t1 - t0, t2 - t1,
            time.time() - t2, msg), flush=True)
    if bad:
        sys.exit("check.py rejected %d capture(s)" % bad)


if __name__ == "__main__":
    main()
