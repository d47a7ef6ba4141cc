#!/usr/bin/env python3
"""Independent traffic generator #9 ("sched"): communication SCHEDULES and OVERLAP as real
frameworks run them, and faults that vary in time.

Written only from shared/spec/wire-v1.md, shared/DOMAIN.md, the project README, the
independent-tests README and run_scored.sh. Nothing here is taken from the detector, the
simulator or the other generators.

    python gen.py --out DIR --seed N [PREFIX ...]

writes DIR/NAME.cwcap and DIR/NAME.truth.json for every scenario whose name starts with one
of the prefixes (all when none is given). Deterministic per seed.

THE MODEL
---------
A small discrete-event engine runs every rank as a HOST thread plus several in-order CUDA
STREAMS (compute, a data-parallel comm stream, four pipeline P2P streams, a context-parallel
ring stream, an auxiliary stream):

* the host walks its program and enqueues kernels at its own pace (a few microseconds per
  launch, plus host work: data loading, logging); it blocks only at explicit synchronisations
  (`loss.item()`, grad-norm `.item()`, an optimizer step that reads a flag), so it runs up to an
  iteration ahead of its GPU, as PyTorch does;
* each stream runs its kernels in order; a kernel starts at max(previous kernel's end on the
  stream, its enqueue + launch latency, the end of the event it waits on (cudaStreamWaitEvent:
  the compute stream waiting on a DP bucket or on a received activation));
* a collective is a rendezvous: it ends on every member at max(entries of all members) +
  its transfer time (alpha + bytes / bus bandwidth with NCCL's ring factors, NVLink inside a
  node, InfiniBand across nodes); P2P send k pairs with recv k per (comm, peer); an NCCL group
  (ncclGroupStart/End around a send and a recv) is one kernel that ends when every partner
  op of the group has started;
* a slow GPU stretches its compute kernels by a factor that may vary in time (step, pulse,
  thermal ramp); a bad NVLink lane stretches the transfer time of the collectives of the
  comms that use it (every member sees the same longer call; nobody enters late);
* a hang is the host of one rank stopping at a point of its program (a Python deadlock, a
  stuck metric computation): what it enqueued before still runs; everything else waits.

Schedules written out: Megatron 1F1B (warm-up, steady state, cool-down) with P2P on separate
send/recv streams (as with overlap_p2p_comm), the interleaved (virtual pipeline) order of
Megatron-core (forward k: chunk (k mod PP*V) div PP; warm-up (PP-p-1)*2+(V-1)*PP),
sequence parallelism (per layer AG / RS instead of AR), the distributed optimizer with
grad reduce-scatter buckets on a second stream during the last micro-batch's backward and
param all-gather buckets overlapped with the next forward, gradient accumulation, context
parallel ring attention (grouped send+recv per ring step on their own stream, the attention
blocks waiting on them), tied-embedding and loss all-reduces that only the first / last stage
run, a rank-0-only barrier pause, an async metrics all-reduce waited on one iteration later,
CUDA-graph-captured layers.

PROBES (the flags of spec section 1)
* GPU_TIMED: t_start/t_end are device times of the NCCL kernel. The record of a call is
  written when the kernel starts on the device (the entry) and again when it ends: a call
  queued behind a blocked kernel on the same stream has NOT started, so it has no record and
  does not count as "started" in heartbeats (reading of "entered" for a GPU-timed probe).
* ENQUEUED: t_start is the host enqueue time; the completion is observed only when the host
  next synchronises with the GPU or when the hook's watchdog thread next polls its events
  (every 1 s in this model), and t_end is that observation time (the hook only knows the
  call had completed by then). COMPLETED is never set on host return.
* GRAPH_CAPTURED (with GPU_TIMED): layers replayed from CUDA graphs; aux is 0 (no NCCL
  sequence number for graph replays).

RECORDS AND AGENTS
* Each node agent flushes its ranks' rings every 200 ms (1 s in the cadence scenarios), one
  cw.calls.v1 batch per communicator with records of that comm. A call whose entry and
  completion fall into the same flush is sent once, completed (the probe updated its ring slot
  in place before the agent drained it; the spec lets consumers keep the latest, and lets a
  probe write only the completed record) - otherwise the entry record (COMPLETED clear,
  t_end 0) and later the completion record are both sent. This halves capture size.
* COMM_INIT records (seq 0, times = init time, aux = nodes in the comm) open each rank's comms.
* cw.progress.v1 heartbeats per agent per comm of its local ranks at the agent's period
  (1 s default). The spec says "a fixed period (default 1 s)": a period is fixed per agent but
  configurable, so the cadence scenarios give agents fixed periods of 2, 3, 4 or 5 s. They carry
  started/completed of collectives and, for comms with P2P, the optional "p2p" list.
* cw.topology.v1 per rank (with Megatron coords), cw.steps.v1 per rank per iteration (host
  times of the iteration boundaries, no phases: this hook does not time phases), cw.hw.v1
  samples only in the thermal-ramp scenario.
* Every node has its own clock: offset N(0, 15 ms) and drift of up to +-20 ppm; all times a
  node writes (record times, message ts_ns) are in its clock. Messages are written in node
  order; replay sorts by ts_ns.

SIMPLIFICATIONS: no NCCL channels/protocols; transfer noise is a few percent; one DP comm
stream; the launch queue is unbounded between synchronisations; no phases in steps; truth
onset times are in the reference clock (nodes differ from it by tens of ms).

TRUTH: a list of objects {job, scenario, kind (healthy|hang|slow_rank|slow_link), culprits,
onset_ns, expect_incident, info_only, allowed_ranks, end_ok_ns (transient: the last time a
naming still counts as "while slow" plus 10 s), iter_s, probe, ranks, note}.
"""
import argparse, base64, hashlib, heapq, json, math, os, sys
from collections import deque, defaultdict
import numpy as np

T0 = 1767225600 * 10**9  # reference epoch of every job (different jobs get different offsets)
ALLREDUCE, ALLGATHER, REDUCESCATTER, BROADCAST, REDUCE, SEND, RECV, ALLTOALL, BARRIER = 1, 2, 3, 4, 5, 6, 7, 8, 9
F_COMPLETED, F_GPU, F_GRAPH, F_ENQ, F_LOST = 1, 2, 4, 8, 16
REC_DT = np.dtype([('kind', 'u1'), ('op', 'u1'), ('flags', '<u2'), ('rank', '<i4'), ('comm', '<u8'),
                   ('seq', '<u8'), ('t_start_ns', '<i8'), ('t_end_ns', '<i8'), ('bytes', '<u8'),
                   ('comm_rank', '<i4'), ('peer', '<i4'), ('nranks', '<u4'), ('aux', '<u4')])
assert REC_DT.itemsize == 64
GPN = 8  # GPUs per node


# ----------------------------------------------------------------------------- engine
class Op:
    __slots__ = ('r', 'comm', 'stream', 'tenq', 'dur', 'keys', 'xfer', 'start', 'end', 'dep', 'recs', 'reg', 'graph')

    def __init__(self, r, stream, tenq, dur=0.0, keys=None, xfer=0.0, dep=None, recs=None, graph=False):
        self.r, self.stream, self.tenq, self.dur, self.keys, self.xfer = r, stream, tenq, dur, keys, xfer
        self.dep, self.recs, self.graph = dep, recs, graph
        self.start = self.end = None
        self.reg = False


class Comm:
    def __init__(self, cid, name, members):
        self.cid, self.name, self.members = cid, name, list(members)
        self.index = {g: i for i, g in enumerate(self.members)}
        self.n = len(self.members)
        self.nodes = len({g // GPN for g in self.members})
        self.intra = self.nodes == 1
        self.link_factor = 1.0


class Engine:
    LAUNCH = 8e-6      # host cost of one launch
    LAT = 5e-6         # launch -> device latency

    def __init__(self, nranks, rng, slow=None):
        self.N, self.rng = nranks, rng
        self.slow = slow or (lambda r, t: 1.0)
        self.comms = {}
        self.progs = [[] for _ in range(nranks)]
        self.gens = [None] * nranks
        self.rv = {}              # key -> [expected, list of ops]
        self.h = [0.0] * nranks
        self.pc = [0] * nranks
        self.streams = [defaultdict(list) for _ in range(nranks)]
        self.heads = [defaultdict(int) for _ in range(nranks)]
        self.pend = [dict() for _ in range(nranks)]
        self.cseq = [defaultdict(int) for _ in range(nranks)]
        self.pseq = [defaultdict(int) for _ in range(nranks)]
        self.tseq = [defaultdict(int) for _ in range(nranks)]
        self.syncs = [[] for _ in range(nranks)]
        self.steps = [[] for _ in range(nranks)]
        self.stopped = [None] * nranks
        self.commops = [[] for _ in range(nranks)]
        self.t_limit = 1e9          # the host starts no iteration after this (end of the capture)
        self.ended = [False] * nranks
        self.linkf = {}           # comm id -> (onset s, factor): a degraded link from onset on

    def add_comm(self, job, name, members):
        cid = int.from_bytes(hashlib.blake2b(f"{job}/{name}/{tuple(members)}".encode(), digest_size=8).digest(), 'little')
        c = Comm(cid, name, members)
        self.comms[name] = c
        return c

    # transfer time of one call
    def xfer_time(self, comm, op, nbytes):
        n = comm.n
        bw = 160e9 if comm.intra else 22e9
        alpha = 12e-6 if comm.intra else 35e-6
        if op == ALLREDUCE:
            f = 2.0 * (n - 1) / n
        elif op in (ALLGATHER, REDUCESCATTER):
            f = (n - 1) / n
        elif op == BARRIER:
            f, nbytes = 0.0, 0
        else:
            f = 1.0
        t = alpha * (1 + math.log2(max(n, 2))) + f * nbytes / bw
        return t * float(self.rng.uniform(0.97, 1.06))

    # ---------------------------------------------------------------- host side
    def _enqueue(self, r, stream, op):
        dep = self.pend[r].pop(stream, None)
        op.dep = dep
        self.streams[r][stream].append(op)

    def _tail(self, r, stream):
        s = self.streams[r][stream]
        return s[-1] if s else None

    def _coll(self, r, ins, h):
        _, stream, cname, opc, nbytes, root, graph = ins
        c = self.comms[cname]
        seq = self.cseq[r][cname]; self.cseq[r][cname] += 1
        tq = self.tseq[r][(cname, opc)]; self.tseq[r][(cname, opc)] += 1
        key = ('c', cname, seq)
        if key not in self.rv:
            self.rv[key] = [c.n, []]
        rec = (c.cid, opc, seq, nbytes, c.index[r], root, c.n, 0 if graph else (tq & 0xffffffff))
        return Op(r, stream, h, keys=[key], xfer=self.xfer_time(c, opc, nbytes), recs=[rec], graph=graph)

    def _p2p(self, r, cname, opc, peer_g, nbytes):
        c = self.comms[cname]
        k = self.pseq[r][(cname, peer_g, opc)]; self.pseq[r][(cname, peer_g, opc)] += 1
        src, dst = (r, peer_g) if opc == SEND else (peer_g, r)
        key = ('p', cname, src, dst, k)
        if key not in self.rv:
            self.rv[key] = [2, []]
        rec = (c.cid, opc, k, nbytes, c.index[r], c.index[peer_g], c.n, 0)
        return key, rec, self.xfer_time(c, opc, nbytes)

    def step_host(self, r):
        prog, pc, h = self.progs[r], self.pc[r], self.h[r]
        progressed = False
        while self.stopped[r] is None and not self.ended[r]:
            if pc >= len(prog):
                nxt = next(self.gens[r], None) if self.gens[r] is not None else None
                if nxt is None:
                    break
                del prog[:pc]        # keep memory flat: executed instructions are not needed
                pc = 0
                prog.extend(nxt)
                continue
            ins = prog[pc]
            t = ins[0]
            if t == 'K':       # compute kernel: stream, duration
                self._enqueue(r, ins[1], Op(r, ins[1], h, dur=ins[2], graph=len(ins) > 3 and ins[3]))
                h += self.LAUNCH
            elif t == 'C':     # collective
                self._enqueue(r, ins[1], self._coll(r, ins, h))
                h += 2.5 * self.LAUNCH
            elif t == 'P':     # single p2p or NCCL group of p2p: stream, comm, [(op, peer, bytes)]
                keys, recs, xf = [], [], 0.0
                for (opc, peer, nb) in ins[3]:
                    k, rec, x = self._p2p(r, ins[2], opc, peer, nb)
                    keys.append(k); recs.append(rec); xf = max(xf, x)
                self._enqueue(r, ins[1], Op(r, ins[1], h, keys=keys, xfer=xf, recs=recs))
                h += 2.5 * self.LAUNCH * len(recs)
            elif t == 'W':     # stream ins[1] waits for the current tail of stream ins[2]
                tail = self._tail(r, ins[2])
                if tail is not None:
                    prev = self.pend[r].get(ins[1])
                    self.pend[r][ins[1]] = tail if prev is None else ('multi', prev, tail)
                h += 2e-6
            elif t == 'H':     # host work
                h += ins[1]
            elif t == 'S':     # host synchronises with streams ins[1] (tuple)
                mx = h
                ok = True
                for s in ins[1]:
                    tail = self._tail(r, s)
                    if tail is not None:
                        if tail.end is None:
                            ok = False; break
                        mx = max(mx, tail.end)
                if not ok:
                    break
                h = mx + 30e-6
                self.syncs[r].append(h)
            elif t == 'STEP':  # iteration boundary marker: ('STEP', it, 'b'|'e')
                if ins[2] == 'b' and h > self.t_limit:
                    self.ended[r] = True
                    break
                self.steps[r].append((ins[1], ins[2], h))
            elif t == 'STOP':
                self.stopped[r] = h
                break
            pc += 1
            progressed = True
        self.pc[r], self.h[r] = pc, h
        return progressed

    # ---------------------------------------------------------------- device side
    def _dep_end(self, dep):
        if dep is None:
            return 0.0
        if isinstance(dep, tuple):
            a, b = self._dep_end(dep[1]), self._dep_end(dep[2])
            return None if a is None or b is None else max(a, b)
        return dep.end

    def step_streams(self, r, wake):
        progressed = False
        for s, ops in self.streams[r].items():
            hd = self.heads[r][s]
            while hd < len(ops):
                op = ops[hd]
                if op.start is None:
                    de = self._dep_end(op.dep)
                    if de is None:
                        break
                    prev = ops[hd - 1].end if hd else 0.0
                    op.start = max(op.tenq + self.LAT, prev, de)
                    if op.keys is None:
                        op.end = op.start + op.dur * self.slow(r, op.start)
                    else:
                        self.commops[r].append(op)
                        lf = self.linkf.get(op.recs[0][0])
                        if lf is not None and op.start >= lf[0]:
                            op.xfer *= lf[1]
                if op.keys is not None and op.end is None:
                    if not op.reg:
                        op.reg = True
                        for k in op.keys:
                            ent = self.rv[k]
                            ent[1].append(op)
                            if len(ent[1]) == ent[0]:
                                for o in ent[1]:
                                    if o.r != r:
                                        wake(o.r)
                    full = True
                    mx = op.start
                    xf = op.xfer
                    for k in op.keys:
                        ent = self.rv[k]
                        if len(ent[1]) < ent[0]:
                            full = False; break
                        for o in ent[1]:
                            mx = max(mx, o.start)
                            if k[0] == 'c':
                                xf = max(xf, o.xfer)
                    if not full:
                        break
                    op.end = mx + xf + float(self.rng.uniform(0, 15e-6))
                hd += 1
                progressed = True
            self.heads[r][s] = hd
        return progressed

    def run(self):
        work = deque(range(self.N))
        inq = [True] * self.N

        def wake(x):
            if not inq[x]:
                inq[x] = True
                work.append(x)
        while work:
            r = work.popleft()
            inq[r] = False
            while True:
                a = self.step_host(r)
                b = self.step_streams(r, wake)
                if not (a or b):
                    break


# ----------------------------------------------------------------------------- jobs
class Layout:
    """Megatron rank order: tp fastest, then cp, dp, pp (Megatron-core's default 'tp-cp-ep-dp-pp')."""

    def __init__(self, tp=1, cp=1, dp=1, pp=1):
        self.tp, self.cp, self.dp, self.pp = tp, cp, dp, pp
        self.N = tp * cp * dp * pp

    def coords(self, r):
        tp = r % self.tp; r //= self.tp
        cp = r % self.cp; r //= self.cp
        dp = r % self.dp; r //= self.dp
        return dict(tp=tp, cp=cp, dp=dp, pp=r)

    def rank(self, tp=0, cp=0, dp=0, pp=0):
        return tp + self.tp * (cp + self.cp * (dp + self.dp * pp))

    def group(self, r, dims):
        c = self.coords(r)
        out = []
        for g in range(self.N):
            cg = self.coords(g)
            if all(cg[k] == c[k] for k in ('tp', 'cp', 'dp', 'pp') if k not in dims):
                out.append(g)
        return out


def gname(prefix, members):
    return f"{prefix}:{members[0]}"


class Cfg(dict):
    __getattr__ = dict.get


def build_megatron(eng, job, L, cfg, rng):
    """Create comms and each rank's program for cfg.iters iterations."""
    N = L.N
    names = defaultdict(dict)   # rank -> role -> comm name
    for r in range(N):
        for role, dims in (('tp', ('tp',)), ('pp', ('pp',)), ('dpcp', ('dp', 'cp')), ('cp', ('cp',)),
                           ('mp', ('tp', 'pp')), ('world', ('tp', 'cp', 'dp', 'pp'))):
            mem = L.group(r, dims)
            if len(mem) < 2 and role != 'world':
                continue
            nm = gname(role, mem)
            if nm not in eng.comms:
                eng.add_comm(job, nm, mem)
            names[r][role] = nm
        if cfg.embed and L.pp > 1:
            c = L.coords(r)
            if c['pp'] in (0, L.pp - 1):
                mem = [L.rank(tp=c['tp'], cp=c['cp'], dp=c['dp'], pp=0), L.rank(tp=c['tp'], cp=c['cp'], dp=c['dp'], pp=L.pp - 1)]
                nm = gname('emb', mem)
                if nm not in eng.comms:
                    eng.add_comm(job, nm, mem)
                names[r]['emb'] = nm
        if cfg.second_dp:   # a second comm over the same DP members (Megatron builds several)
            mem = L.group(r, ('dp', 'cp'))
            nm = gname('dp2', mem)
            if nm not in eng.comms:
                eng.add_comm(job, nm, mem)
            names[r]['dp2'] = nm
    if cfg.link_bad is not None:
        eng.linkf[eng.comms[names[cfg.link_bad]['tp']].cid] = (cfg.link_onset, cfg.link_factor)
    for r in range(N):
        eng.gens[r] = megatron_program(r, L, cfg, names[r], rng, eng)
    return names


def layer_f(cfg, rng):
    return cfg.t_layer * float(rng.lognormal(0, 0.02))


def megatron_program(r, L, cfg, nm, rng, eng):
    c = L.coords(r)
    p, PP, V, m = c['pp'], L.pp, cfg.vpp or 1, cfg.mb
    TP, CP = L.tp, L.cp
    tpc = nm.get('tp')
    H = cfg.hidden or 8192
    act = cfg.seq * H * 2 // CP        # activation bytes of one micro-batch on this rank (bf16)
    graph = bool(cfg.graph)
    prog = []
    ring_next = L.rank(tp=c['tp'], cp=c['cp'], dp=c['dp'], pp=(p + 1) % PP)
    ring_prev = L.rank(tp=c['tp'], cp=c['cp'], dp=c['dp'], pp=(p - 1) % PP)
    cp_next = L.rank(tp=c['tp'], cp=(c['cp'] + 1) % CP, dp=c['dp'], pp=p)
    cp_prev = L.rank(tp=c['tp'], cp=(c['cp'] - 1) % CP, dp=c['dp'], pp=p)
    nb = cfg.buckets or 2
    grad_bytes = cfg.grad_bytes or 2 * 10**9 // (TP * PP)

    def layer(fwd, mbi):
        mult = 1.0 if fwd else 2.0
        t = layer_f(cfg, rng) * mult
        if CP > 1:   # ring attention: CP-1 grouped send/recv steps, attention blocks wait on them
            kv = act * 2 // max(TP, 1)
            for s in range(CP - 1):
                prog.append(('P', 'cpr', nm['cp'], [(SEND, cp_next, kv), (RECV, cp_prev, kv)]))
                prog.append(('K', 'comp', t * 0.35 / CP))
                prog.append(('W', 'comp', 'cpr'))
            prog.append(('K', 'comp', t * 0.35 / CP))
            t = t * 0.65
        if TP > 1:
            if cfg.sp:
                for _ in range(2):
                    prog.append(('C', 'comp', tpc, ALLGATHER, act // TP * (TP - 1), -1, graph))
                    prog.append(('K', 'comp', t / 2, graph))
                    prog.append(('C', 'comp', tpc, REDUCESCATTER, act, -1, graph))
            else:
                for _ in range(2):
                    prog.append(('K', 'comp', t / 2, graph))
                    prog.append(('C', 'comp', tpc, ALLREDUCE, act, -1, graph))
        else:
            prog.append(('K', 'comp', t))

    # interleaved / 1F1B schedule for this stage
    total = m * V
    def fchunk(k):
        return (k % (PP * V)) // PP
    def bchunk(k):
        return V - 1 - (k % (PP * V)) // PP
    if V > 1:
        warm = min((PP - p - 1) * 2 + (V - 1) * PP, total)
    else:
        warm = min(PP - p - 1, total)
    order = [('F', k) for k in range(warm)]
    kf, kb = warm, 0
    while kf < total:
        order.append(('F', kf)); kf += 1
        order.append(('B', kb)); kb += 1
    while kb < total:
        order.append(('B', kb)); kb += 1

    def fwd(k, first_mb_of_iter, ag_waits):
        ch = fchunk(k) if V > 1 else 0
        has_prev = PP > 1 and not (p == 0 and ch == 0)
        has_next = PP > 1 and not (p == PP - 1 and ch == V - 1)
        if has_prev:
            prog.append(('P', 'rf', nm['pp'], [(RECV, ring_prev, act)]))
            prog.append(('W', 'comp', 'rf'))
        for li in range(cfg.layers):
            if ag_waits and li in ag_waits:
                prog.append(('W', 'comp', 'dp'))
            layer(True, k)
        if cfg.embed and p == PP - 1 and ch == V - 1:
            prog.append(('K', 'comp', cfg.t_layer * 0.3))  # loss
        if has_next:
            prog.append(('W', 'sf', 'comp'))
            prog.append(('P', 'sf', nm['pp'], [(SEND, ring_next, act)]))

    def bwd(k, last):
        ch = bchunk(k) if V > 1 else 0
        has_next = PP > 1 and not (p == PP - 1 and ch == V - 1)
        has_prev = PP > 1 and not (p == 0 and ch == 0)
        if has_next:
            prog.append(('P', 'rb', nm['pp'], [(RECV, ring_next, act)]))
            prog.append(('W', 'comp', 'rb'))
        # the distributed optimizer's grad reduce-scatter overlaps the last backward pass
        overlap_rs = cfg.overlap and last
        per = max(1, cfg.layers // nb)
        for li in range(cfg.layers):
            layer(False, k)
            if overlap_rs and (li + 1) % per == 0 and (li + 1) // per <= nb:
                prog.append(('W', 'dp', 'comp'))
                prog.append(('C', 'dp', nm['dpcp'], REDUCESCATTER, grad_bytes // nb // V, -1, False))
        if has_prev:
            prog.append(('W', 'sb', 'comp'))
            prog.append(('P', 'sb', nm['pp'], [(SEND, ring_prev, act)]))

    for it in range(cfg.iters):
        prog.append(('STEP', it, 'b'))
        prog.append(('H', cfg.t_host * float(rng.uniform(0.8, 1.3))))  # data loader / batch prep
        ag_waits = None
        if cfg.overlap and 'dpcp' in nm:
            # param all-gather of each bucket on the DP stream, the forward's layers wait on it
            prog.append(('W', 'dp', 'comp'))     # after the previous optimizer step
            for b in range(nb):
                prog.append(('C', 'dp', nm['dpcp'], ALLGATHER, grad_bytes // nb, -1, False))
            ag_waits = {0}
        nB = 0
        nF = 0
        for kind, k in order:
            if cfg.stop_at and cfg.stop_at(r, it, kind, k, prog) == 'stop':
                yield prog[:]
                return
            if kind == 'F':
                fwd(k, nF == 0, ag_waits if nF == 0 else None); nF += 1
            else:
                nB += 1
                last_chunk_last = (V == 1 and nB == total) or (V > 1 and k >= total - PP)
                bwd(k, nB == total if not cfg.overlap else last_chunk_last)
        if cfg.stop_at and cfg.stop_at(r, it, 'END', 0, prog) == 'stop':
            yield prog[:]
            return
        # end of iteration collectives
        if cfg.embed and 'emb' in nm:
            prog.append(('C', 'comp', nm['emb'], ALLREDUCE, 256 * 10**6 // TP, -1, False))
        if 'dpcp' in nm:
            if cfg.overlap:
                prog.append(('W', 'comp', 'dp'))
            elif cfg.pre_dp:
                cfg.pre_dp(r, it, prog, nm)
            else:
                for b in range(nb):
                    prog.append(('C', 'comp', nm['dpcp'], ALLREDUCE, grad_bytes // nb, -1, False))
        if cfg.embed and p == PP - 1 and 'dpcp' in nm:
            prog.append(('C', 'comp', nm['dpcp'], ALLREDUCE, 8, -1, False))      # loss average over DP
        if 'mp' in nm:
            prog.append(('C', 'comp', nm['mp'], ALLREDUCE, 8, -1, False))        # grad norm
        prog.append(('K', 'comp', cfg.t_opt))                                     # optimizer step
        if cfg.after_opt:
            cfg.after_opt(r, it, prog, nm)
        prog.append(('S', ('comp', 'dp')))                                # loss / grad norm .item()
        prog.append(('STEP', it, 'e'))
        chunk = prog[:]
        prog.clear()
        yield chunk


# ----------------------------------------------------------------------------- output
def node_clocks(nnodes, rng):
    off = rng.normal(0, 0.015, nnodes)
    drift = rng.uniform(-20e-6, 20e-6, nnodes)
    return off, drift


def emit(path, job, t0, eng, L, cfg, rng, probe, t_end_s, flush_s=0.2, hb_periods=None, hw=None):
    """Turn the engine's result into a capture file. Returns the number of records."""
    N = eng.N
    nnodes = (N + GPN - 1) // GPN
    off, drift = node_clocks(nnodes, rng)

    def nclk(node, t):
        return (np.asarray(t, dtype=np.float64) * (1 + drift[node]) + off[node])

    def ns(x):
        return np.round(np.asarray(x, dtype=np.float64) * 1e9).astype(np.int64) + np.int64(t0)

    graph_flag = F_GRAPH if cfg.graph else 0
    lines = []
    # topology
    for r in range(N):
        cc = L.coords(r)
        lines.append({"topic": "cw.topology.v1", "key": job, "ts_ns": int(ns(nclk(r // GPN, -2.0))),
                      "value": {"v": 1, "job": job, "ts_ns": int(ns(nclk(r // GPN, -2.0))), "rank": r, "world_size": N,
                                "node": f"node-{r // GPN:02d}", "local_rank": r % GPN, "gpu": f"GPU-{hashlib.md5(f'{job}{r}'.encode()).hexdigest()[:12]}",
                                "coords": {"tp": cc['tp'], "pp": cc['pp'], "dp": cc['dp'], "cp": cc['cp'], "ep": 0}}})
    # per-op arrays
    rows = []   # (rank, cid, op, seq, bytes, comm_rank, peer, nranks, aux, ts, te, vis_e, vis_c, graph)
    for r in range(N):
        syncs = np.array(eng.syncs[r] + [1e18])
        for op in eng.commops[r]:
            if probe == 'gpu':
                ts, vis_e = op.start, op.start + 4e-4
                te = op.end
                vis_c = None if te is None else te + 4e-4
            else:
                ts, vis_e = op.tenq, op.tenq + 5e-5
                if op.end is None:
                    te = vis_c = None
                else:
                    i = np.searchsorted(syncs, op.end)
                    sy = syncs[i]
                    wd = math.floor(op.end) + 1.0 + (r % 8) * 0.01   # watchdog poll each second
                    te = min(sy, wd)
                    vis_c = te + 5e-5
            for rec in op.recs:
                rows.append((r,) + rec + (ts, -1.0 if te is None else te, vis_e, -1.0 if vis_c is None else vis_c, op.graph))
        # queued (enqueued, not started) calls of an ENQUEUED probe are entered too
        if probe == 'enq':
            for s, ops in eng.streams[r].items():
                for op in ops:
                    if op.keys is not None and op.start is None:
                        # never started on the device: build its record from the rendezvous keys
                        for rec in op.recs:
                            rows.append((r,) + rec + (op.tenq, -1.0, op.tenq + 5e-5, -1.0, op.graph))
    A = np.array([x[:13] for x in rows], dtype=np.float64) if rows else np.zeros((0, 13))
    G = np.array([x[13] for x in rows], dtype=bool)
    rank = A[:, 0].astype(np.int64)
    node = rank // GPN
    vis_e, vis_c, ts, te = A[:, 11], A[:, 12], A[:, 9], A[:, 10]
    ok_e = vis_e <= t_end_s
    done = (vis_c >= 0) & (vis_c <= t_end_s)
    keep = ok_e
    # flush ticks per node
    phase = (np.arange(nnodes) * 0.037) % flush_s
    tick_e = np.ceil((vis_e - phase[node]) / flush_s).astype(np.int64)
    tick_c = np.where(done, np.ceil((vis_c - phase[node]) / flush_s), -1).astype(np.int64)
    send_entry = keep & (tick_e != tick_c)
    send_comp = keep & done
    recs = []
    for sel, comp in ((send_entry, False), (send_comp, True)):
        idx = np.nonzero(sel)[0]
        R = np.zeros(len(idx), dtype=REC_DT)
        R['kind'] = 1
        R['op'] = A[idx, 2].astype(np.uint8)
        fl = np.full(len(idx), F_GPU if probe == 'gpu' else F_ENQ, dtype=np.uint16)
        fl |= np.where(G[idx], graph_flag, 0).astype(np.uint16)
        if comp:
            fl |= F_COMPLETED
        R['flags'] = fl
        R['rank'] = rank[idx]
        R['seq'] = A[idx, 3].astype(np.uint64)
        nd = node[idx]
        R['t_start_ns'] = ns(ts[idx] * (1 + drift[nd]) + off[nd])
        R['t_end_ns'] = ns(te[idx] * (1 + drift[nd]) + off[nd]) if comp else 0
        R['bytes'] = A[idx, 4].astype(np.uint64)
        R['comm_rank'] = A[idx, 5].astype(np.int32)
        R['peer'] = A[idx, 6].astype(np.int32)
        R['nranks'] = A[idx, 7].astype(np.uint32)
        R['aux'] = A[idx, 8].astype(np.uint32)
        recs.append((idx, R, np.where(comp, tick_c[idx], tick_e[idx]), comp))
    # the comm ids do not survive float64: keep them exactly from rows
    cids = np.array([x[1] for x in rows], dtype=np.uint64)
    for idx, R, tk, comp in recs:
        R['comm'] = cids[idx]
    allR = np.concatenate([x[1] for x in recs]) if recs else np.zeros(0, REC_DT)
    allT = np.concatenate([x[2] for x in recs]) if recs else np.zeros(0, np.int64)
    allV = np.concatenate([np.where(x[3], vis_c[x[0]], vis_e[x[0]]) for x in recs]) if recs else np.zeros(0)
    allN = allR['rank'] // GPN
    # COMM_INIT records at t = -1 s, flushed in tick 0-
    inits = []
    for cname, c in eng.comms.items():
        for g in c.members:
            x = np.zeros(1, REC_DT)[0]
            x['kind'] = 2; x['rank'] = g; x['comm'] = c.cid; x['seq'] = 0
            tt = int(ns(nclk(g // GPN, -1.0 + 0.001 * (g % 8))))
            x['t_start_ns'] = tt; x['t_end_ns'] = tt
            x['comm_rank'] = c.index[g]; x['peer'] = -1; x['nranks'] = c.n; x['aux'] = c.nodes
            inits.append(x)
    initR = np.array(inits, dtype=REC_DT)
    initT = np.full(len(initR), -10**6, dtype=np.int64)
    allR = np.concatenate([initR, allR]); allT = np.concatenate([initT, allT])
    allV = np.concatenate([np.full(len(initR), -1.0), allV]); allN = allR['rank'] // GPN
    order = np.lexsort((allV, allR['comm'], allT, allN))
    allR, allT, allN = allR[order], allT[order], allN[order]
    # group into batches (node, tick, comm)
    if len(allR):
        brk = np.nonzero((np.diff(allN) != 0) | (np.diff(allT) != 0) | (np.diff(allR['comm'].astype(np.int64)) != 0))[0] + 1
        starts = np.concatenate([[0], brk]); ends = np.concatenate([brk, [len(allR)]])
        for a, b in zip(starts, ends):
            nd, tk = int(allN[a]), int(allT[a])
            tflush = -0.9 if tk == -10**6 else tk * flush_s + phase[nd]
            hdr = b'CWB1' + np.array([1, 64], '<u2').tobytes() + np.array([b - a, 0], '<u4').tobytes()
            lines.append({"topic": "cw.calls.v1", "key": f"{job}/{int(allR['comm'][a]):016x}",
                          "ts_ns": int(ns(nclk(nd, tflush + 0.002))),
                          "value_b64": base64.b64encode(hdr + allR[a:b].tobytes()).decode()})
    # heartbeats
    per_rc = defaultdict(lambda: defaultdict(list))   # (rank, cid) -> key -> list of (seq, ts, te, vis_e, vis_c)
    for i, x in enumerate(rows):
        r, cid, opc = x[0], x[1], x[2]
        kk = 'c' if opc not in (SEND, RECV) else ('p', x[6], opc)
        per_rc[(r, cid)][kk].append((x[3], x[9], x[10], x[11], x[12]))
    cid_members = {c.cid: c for c in eng.comms.values()}
    hb_periods = hb_periods or [1.0] * nnodes
    for nd in range(nnodes):
        P = hb_periods[nd]
        local = [g for g in range(nd * GPN, min(N, nd * GPN + GPN))]
        comms_here = [c for c in eng.comms.values() if any(g in c.index for g in local)]
        ticks = np.arange(P * 0.5 + (nd * 0.113) % P, t_end_s, P)
        # precompute per rank/comm arrays
        pre = {}
        for c in comms_here:
            for g in local:
                if g not in c.index:
                    continue
                d = per_rc.get((g, c.cid), {})
                ent = {}
                for kk, lst in d.items():
                    a = np.array(sorted(lst), dtype=np.float64)
                    ve = np.maximum.accumulate(a[:, 3])
                    vc = np.where(a[:, 4] < 0, 1e18, a[:, 4])
                    vc = np.maximum.accumulate(vc)
                    ent[kk] = (a, ve, vc)
                pre[(g, c.cid)] = ent
        for t in ticks:
            for c in comms_here:
                rk = []
                for g in local:
                    if g not in c.index:
                        continue
                    ent = pre[(g, c.cid)]
                    item = {"rank": g, "started": -1, "completed": -1}
                    if 'c' in ent:
                        a, ve, vc = ent['c']
                        i = int(np.searchsorted(ve, t, 'right')) - 1
                        j = int(np.searchsorted(vc, t, 'right')) - 1
                        item["started"] = int(a[i, 0]) if i >= 0 else -1
                        item["completed"] = int(a[j, 0]) if j >= 0 else -1
                        if i >= 0:
                            item["t_last_start_ns"] = int(ns(nclk(nd, a[i, 1])))
                        if j >= 0:
                            item["t_last_end_ns"] = int(ns(nclk(nd, a[j, 2])))
                    p2 = []
                    for kk, (a, ve, vc) in ent.items():
                        if kk == 'c':
                            continue
                        i = int(np.searchsorted(ve, t, 'right')) - 1
                        j = int(np.searchsorted(vc, t, 'right')) - 1
                        p2.append({"peer": int(kk[1]), "op": "send" if kk[2] == SEND else "recv",
                                   "started": int(a[i, 0]) if i >= 0 else -1, "completed": int(a[j, 0]) if j >= 0 else -1})
                    if p2:
                        item["p2p"] = p2
                    rk.append(item)
                tsn = int(ns(nclk(nd, t)))
                lines.append({"topic": "cw.progress.v1", "key": f"{job}/{c.cid:016x}", "ts_ns": tsn,
                              "value": {"v": 1, "job": job, "node": f"node-{nd:02d}", "ts_ns": tsn, "comm": f"{c.cid:016x}", "ranks": rk}})
    # steps
    for r in range(N):
        b = {}
        for it, be, t in eng.steps[r]:
            if be == 'b':
                b[it] = t
            elif it in b and t <= t_end_s:
                tsn = ns(nclk(r // GPN, [b[it], t]))
                lines.append({"topic": "cw.steps.v1", "key": job, "ts_ns": int(tsn[1]) + 100000,
                              "value": {"v": 1, "job": job, "rank": r, "iteration": it, "t_start_ns": int(tsn[0]), "t_end_ns": int(tsn[1])}})
    if hw:
        lines.extend(hw(nclk, ns))
    with open(path, 'w') as f:
        for ln in lines:
            f.write(json.dumps(ln, separators=(',', ':')))
            f.write('\n')
    return int(len(allR))


# ----------------------------------------------------------------------------- scenarios
def slow_fn(culprit, onset, f, until=None, ramp=None, seed=0):
    """Compute-time factor per (rank, time). Everyone has small static skill noise."""
    rr = np.random.default_rng(seed + 77)
    base = 1.0 + rr.normal(0, 0.008, 4096)

    def fn(r, t):
        x = base[r]
        if r == culprit and t >= onset:
            if ramp:
                x *= 1.0 + (f - 1.0) * min(1.0, (t - onset) / ramp)
            elif until is None or t < until:
                x *= f
        return x
    return fn


SCEN = []


def scenario(name):
    def deco(fn):
        SCEN.append((name, fn))
        return fn
    return deco


def truth(job, name, kind, culprits, onset, it_s, probe, N, expect=True, info_only=False, allowed=None, end_ok=None, note=""):
    return {"job": job, "scenario": name, "kind": kind, "culprits": sorted(int(x) for x in culprits),
            "onset_ns": None if onset is None else T0 + int(round(onset * 1e9)), "expect_incident": expect,
            "info_only": info_only, "allowed_ranks": sorted(allowed or []),
            "end_ok_ns": None if end_ok is None else T0 + int(round(end_ok * 1e9)), "t0_ns": T0,
            "iter_s": it_s, "probe": probe, "ranks": N, "note": note}


def run_job(name, seed, L, cfg, probe, t_end_s, slow=None, **emit_kw):
    rng = np.random.default_rng(seed)
    eng = Engine(L.N, rng, slow)
    eng.t_limit = t_end_s + 1.0
    job = f"sched-{name}"
    names = build_megatron(eng, job, L, cfg, rng)
    eng.run()
    return eng, job, names, rng


def check_covers(eng, t_end_s, name):
    """A job must still be running at the end of its capture (else it would look stalled)."""
    last = max((t for st in eng.steps for it, be, t in st if be == 'e'), default=0.0)
    stopped = any(x is not None for x in eng.stopped)
    if last < t_end_s and not stopped and not name.startswith('order'):
        raise SystemExit(f"{name}: program ends at {last:.1f} s before the capture end {t_end_s} s: raise iters")


def iter_time(eng):
    st = eng.steps[0]
    b = {it: t for it, be, t in st if be == 'b'}
    e = [(it, t) for it, be, t in st if be == 'e']
    d = [t - b[it] for it, t in e if it in b and it >= 2]
    return float(np.median(d)) if d else 1.0


def finish(out, name, eng, job, L, cfg, rng, probe, t_end_s, truths, **kw):
    n = emit(os.path.join(out, name + '.cwcap'), job, T0, eng, L, cfg, rng, probe, t_end_s, **kw)
    with open(os.path.join(out, name + '.truth.json'), 'w') as f:
        json.dump(truths, f, indent=1)
    return n


def mk_cfg(**kw):
    base = dict(iters=100000, mb=4, layers=4, t_layer=0.012, t_host=0.004, t_opt=0.03, seq=4096, hidden=8192,
                sp=False, overlap=False, buckets=2, vpp=1)
    base.update(kw)
    return Cfg(base)


def sc_generic(out, name, seed, L, cfg, probe, t_end_s, kind, culprits, onset, slow=None, info_only=False,
               allowed=None, end_ok=None, note="", onset_from_stop=None, no_slow_rank=False, **ekw):
    eng, job, names, rng = run_job(name, seed, L, cfg, probe, t_end_s, slow)
    it_s = iter_time(eng)
    check_covers(eng, t_end_s, name)
    if onset_from_stop is not None:
        onset = eng.stopped[onset_from_stop]
        assert onset is not None, "culprit never reached its stop point"
    tr = [truth(job, name, kind, culprits, onset, round(it_s, 4), probe, L.N, expect=kind != 'healthy',
                info_only=info_only, allowed=allowed, end_ok=end_ok, note=note)]
    if no_slow_rank:
        tr[0]["no_slow_rank"] = True
    n = finish(out, name, eng, job, L, cfg, rng, probe, t_end_s, tr, **ekw)
    return n, it_s


def stop_hook(culprit, it_stop, kind_stop, k_stop=0):
    def f(r, it, kind, k, prog):
        if r == culprit and it == it_stop and kind == kind_stop and k == k_stop:
            prog.append(('STOP',))
            return 'stop'
    return f


# 1. sequence parallelism
@scenario("sp_healthy")
def s1(out, seed):
    L = Layout(tp=4, pp=2, dp=4)
    return sc_generic(out, "sp_healthy", seed, L, mk_cfg(sp=True, mb=6, layers=2, t_layer=0.016), 'gpu', 55.0, 'healthy', [], None,
                      slow=slow_fn(-1, 0, 1, seed=seed), note="TP4 PP2 DP4, SP (AG+RS per layer), 1F1B, GPU-timed")


@scenario("sp_slow")
def s1b(out, seed):
    L = Layout(tp=4, pp=2, dp=4)
    return sc_generic(out, "sp_slow", seed, L, mk_cfg(sp=True, mb=6, layers=2, t_layer=0.016), 'gpu', 55.0, 'slow_rank', [13], 20.0,
                      slow=slow_fn(13, 20.0, 1.5, seed=seed), note="rank 13 (tp1 dp3 pp0) compute 1.5x from 20 s")


# 2. distributed optimizer with overlap
def distopt_cfg(**kw):
    return mk_cfg(overlap=True, buckets=4, layers=6, mb=4, t_layer=0.014, grad_bytes=3 * 10**9 // 4, **kw)


@scenario("distopt_healthy")
def s2(out, seed):
    L = Layout(tp=4, dp=8)
    return sc_generic(out, "distopt_healthy", seed, L, distopt_cfg(), 'gpu', 55.0, 'healthy', [], None,
                      slow=slow_fn(-1, 0, 1, seed=seed), note="TP4 DP8, grad RS buckets on a 2nd stream in backward, param AG overlapped with forward")


@scenario("distopt_slow")
def s2b(out, seed):
    L = Layout(tp=4, dp=8)
    return sc_generic(out, "distopt_slow", seed, L, distopt_cfg(), 'gpu', 55.0, 'slow_rank', [9], 15.0,
                      slow=slow_fn(9, 15.0, 1.3, seed=seed), note="rank 9 compute 1.3x from 15 s")


@scenario("distopt_enq_healthy")
def s2c(out, seed):
    L = Layout(tp=4, dp=8)
    return sc_generic(out, "distopt_enq_healthy", seed, L, distopt_cfg(), 'enq', 55.0, 'healthy', [], None,
                      slow=slow_fn(-1, 0, 1, seed=seed), note="host-enqueue probe, completions seen at host syncs / 1 s watchdog")


@scenario("distopt_enq_slow")
def s2d(out, seed):
    L = Layout(tp=4, dp=8)
    return sc_generic(out, "distopt_enq_slow", seed, L, distopt_cfg(), 'enq', 55.0, 'slow_rank', [22], 15.0,
                      slow=slow_fn(22, 15.0, 1.3, seed=seed), info_only=True,
                      note="host-enqueue probe, rank 22 compute 1.3x from 15 s. Information-only: every host enqueues its iteration "
                           "right after the common .item() sync, so entries (host times) are alike on every rank, and completions are "
                           "observed at host syncs or the 1 s watchdog poll, common to all members of a collective; no per-rank trace "
                           "of a compute straggler reaches the wire (steps carry no phases). A P0/P1 naming another rank still fails")


# 3. gradient accumulation, 16 micro-batches
def ga_cfg(**kw):
    return mk_cfg(mb=16, layers=2, t_layer=0.02, buckets=2, grad_bytes=4 * 10**9 // 8, **kw)


@scenario("ga16_healthy")
def s3(out, seed):
    L = Layout(tp=8, dp=4)
    return sc_generic(out, "ga16_healthy", seed, L, ga_cfg(), 'gpu', 70.0, 'healthy', [], None,
                      slow=slow_fn(-1, 0, 1, seed=seed), note="TP8 DP4, 16 micro-batches, DP all-reduce once per step")


@scenario("ga16_dp_hang")
def s3b(out, seed):
    L = Layout(tp=8, dp=4)
    cfg = ga_cfg(stop_at=stop_hook(19, 12, 'END'))
    return sc_generic(out, "ga16_dp_hang", seed, L, cfg, 'gpu', 70.0, 'hang', [19], None, onset_from_stop=19,
                      slow=slow_fn(-1, 0, 1, seed=seed),
                      note="rank 19 (tp3 dp2) stops after its 16th micro-batch of iteration 12: never enters the DP all-reduce")


# 4. interleaved pipeline + context parallel ring attention
def cp_cfg(**kw):
    return mk_cfg(vpp=2, mb=4, layers=1, t_layer=0.03, seq=8192, **kw)


@scenario("cp_vpp_healthy")
def s4(out, seed):
    L = Layout(tp=2, cp=4, pp=4)
    return sc_generic(out, "cp_vpp_healthy", seed, L, cp_cfg(), 'gpu', 50.0, 'healthy', [], None,
                      slow=slow_fn(-1, 0, 1, seed=seed), note="TP2 CP4 PP4 (VPP 2), ring attention grouped send/recv")


@scenario("cp_vpp_slow")
def s4b(out, seed):
    L = Layout(tp=2, cp=4, pp=4)
    return sc_generic(out, "cp_vpp_slow", seed, L, cp_cfg(), 'gpu', 50.0, 'slow_rank', [13], 18.0,
                      slow=slow_fn(13, 18.0, 1.5, seed=seed), note="rank 13 (tp1 cp2 pp1) compute 1.5x from 18 s")


# 5. collective order mismatch deadlock
def order_swap_cfg(culprit, it_bad, host_first):
    """Two DP all-reduces per iteration (dpcp, then dp2); at `it_bad` the culprit issues them
    the other way round (after a host hiccup when `host_first`)."""
    def pre_dp(r, it, prog, nm):
        a = ('C', 'comp', nm['dpcp'], ALLREDUCE, 2 * 10**9 // 4, -1, False)
        b = ('C', 'comp', nm['dp2'], ALLREDUCE, 4 * 10**6, -1, False)
        if r == culprit and it == it_bad:
            if host_first:
                prog.append(('H', 0.0))
            prog.append(b); prog.append(a)
        else:
            prog.append(a); prog.append(b)
    return mk_cfg(second_dp=True, pre_dp=pre_dp, layers=6, mb=4)


@scenario("order_deadlock")
def s5(out, seed):
    L = Layout(tp=4, dp=8)
    culprit, it_bad = 21, 20
    cfg = order_swap_cfg(culprit, it_bad, host_first=True)
    # onset: the culprit's B call (measured after the run)
    eng, job, names, rng = run_job("order_deadlock", seed, L, cfg, 'gpu', 60.0, slow_fn(-1, 0, 1, seed=seed))
    it_s = iter_time(eng)
    cid_b = eng.comms[names[culprit]['dp2']]
    onset = None
    for op in eng.commops[culprit]:
        if op.recs[0][0] == cid_b.cid and op.end is None:
            onset = op.start
    tr = [truth(job, "order_deadlock", 'hang', [culprit], onset, round(it_s, 4), 'gpu', L.N,
                note=f"rank 21 calls AR on dp2 before AR on dpcp at iteration {it_bad}; its 7 DP peers call dpcp then dp2; "
                     "same stream: 21 sits in dp2, peers sit in dpcp, each waiting for the other")]
    n = finish(out, "order_deadlock", eng, job, L, cfg, rng, 'gpu', 60.0, tr)
    return n, it_s


# 6. transient and ramp
@scenario("transient_slow")
def s6(out, seed):
    L = Layout(tp=4, pp=2, dp=4)
    return sc_generic(out, "transient_slow", seed, L, mk_cfg(), 'gpu', 65.0, 'slow_rank', [26], 18.0,
                      slow=slow_fn(26, 18.0, 1.6, until=38.0, seed=seed), end_ok=48.0,
                      note="rank 26 (tp2 pp1 dp2) 1.6x from 18 s to 38 s, then normal")


@scenario("ramp_slow")
def s6b(out, seed):
    L = Layout(tp=4, pp=2, dp=4)
    culprit, onset, ramp = 6, 15.0, 60.0

    def hw(nclk, ns):
        out_l = []
        for t in np.arange(0.5, 85.0, 5.0):
            for g in range(8):
                f = 1.0
                if g == culprit and t >= onset:
                    f = 1.0 + 0.6 * min(1.0, (t - onset) / ramp)
                tsn = int(ns(nclk(0, t)))
                out_l.append({"topic": "cw.hw.v1", "key": "sched-ramp_slow", "ts_ns": tsn,
                              "value": {"v": 1, "job": "sched-ramp_slow", "node": "node-00", "ts_ns": tsn, "rank": g,
                                        "sm_clock_mhz": int(1980 / f), "temp_c": int(62 + 25 * (f - 1) / 0.6),
                                        "power_w": 650.0, "util_pct": 99, "throttle_reasons": 0x40 if f > 1.05 else 0}})
        return out_l
    return sc_generic(out, "ramp_slow", seed, L, mk_cfg(), 'gpu', 85.0, 'slow_rank', [culprit], onset,
                      slow=slow_fn(culprit, onset, 1.6, ramp=ramp, seed=seed), hw=hw,
                      note="rank 6 thermal ramp 1.0x -> 1.6x from 15 s to 75 s; named by the end")


# 7. rare metrics comm
def rare_cfg(culprit=None, it_hang=None):
    def after_opt(r, it, prog, nm):
        if (it + 1) % 50 == 0:
            if r == culprit and it == it_hang:
                prog.append(('STOP',))
                return
            prog.append(('H', 0.003))
            prog.append(('W', 'aux', 'comp'))
            prog.append(('C', 'aux', nm['world'], ALLREDUCE, 64, -1, False))   # async metrics AR, waited next iteration
        if it % 50 == 0 and it > 0:
            prog.append(('S', ('aux',)))                                        # the async work's wait()
    return mk_cfg(mb=2, layers=2, t_layer=0.012, after_opt=after_opt)


@scenario("rare_healthy")
def s7(out, seed):
    L = Layout(tp=4, pp=2, dp=4)
    return sc_generic(out, "rare_healthy", seed, L, rare_cfg(), 'gpu', 90.0, 'healthy', [], None,
                      slow=slow_fn(-1, 0, 1, seed=seed), note="world all-reduce of metrics every 50 steps (async, waited next step)")


@scenario("rare_hang")
def s7b(out, seed):
    L = Layout(tp=4, pp=2, dp=4)
    return sc_generic(out, "rare_hang", seed, L, rare_cfg(culprit=11, it_hang=149), 'gpu', 90.0, 'hang', [11], None,
                      onset_from_stop=11, slow=slow_fn(-1, 0, 1, seed=seed),
                      note="rank 11 stops before the 3rd metrics all-reduce (iteration 149); the rest of the job is healthy until then")


# 8. different call counts per rank by design
@scenario("uneven_healthy")
def s8(out, seed):
    L = Layout(tp=2, dp=4, pp=4)

    def after_opt(r, it, prog, nm):
        if it % 10 == 9:
            if r == 0:
                prog.append(('S', ('comp',)))
                prog.append(('H', 0.08))   # rank 0 writes logs / tensorboard before the barrier
            prog.append(('C', 'comp', nm['world'], BARRIER, 0, -1, False))
    cfg = mk_cfg(embed=True, mb=8, layers=3, after_opt=after_opt)
    return sc_generic(out, "uneven_healthy", seed, L, cfg, 'gpu', 60.0, 'healthy', [], None,
                      slow=slow_fn(-1, 0, 1, seed=seed),
                      note="first/last stage embedding AR, last stage loss AR + loss compute, rank 0 late at a barrier every 10 steps by design; "
                           "no slow_rank of any severity allowed", no_slow_rank=True)


# 9. agent cadences
@scenario("cadence_healthy")
def s9(out, seed):
    L = Layout(tp=4, pp=2, dp=4)
    return sc_generic(out, "cadence_healthy", seed, L, mk_cfg(), 'gpu', 60.0, 'healthy', [], None,
                      slow=slow_fn(-1, 0, 1, seed=seed), flush_s=1.0, hb_periods=[2.0, 3.0, 5.0, 4.0],
                      note="agents flush calls every 1 s, heartbeats every 2/3/5/4 s per node")


@scenario("cadence_hang")
def s9b(out, seed):
    L = Layout(tp=4, pp=2, dp=4)
    cfg = mk_cfg(stop_at=stop_hook(17, 20, 'F', 3))
    return sc_generic(out, "cadence_hang", seed, L, cfg, 'gpu', 60.0, 'hang', [17], None, onset_from_stop=17,
                      slow=slow_fn(-1, 0, 1, seed=seed), flush_s=1.0, hb_periods=[2.0, 3.0, 5.0, 4.0],
                      note="rank 17 (node 2, heartbeats every 5 s) host stops at iteration 20 before its 4th forward")


# 10. bad NVLink lane
@scenario("link_tp8")
def s10(out, seed):
    L = Layout(tp=8, dp=8)
    onset = 20.0
    cfg = mk_cfg(layers=4, mb=3, t_layer=0.018, link_bad=19, link_factor=3.0, link_onset=onset)
    eng, job, names, rng = run_job("link_tp8", seed, L, cfg, 'gpu', 60.0, slow_fn(-1, 0, 1, seed=seed))
    it_s = iter_time(eng)
    comm = eng.comms[names[19]['tp']]
    tr = [truth(job, "link_tp8", 'slow_link', [19], onset, round(it_s, 4), 'gpu', L.N, info_only=True,
                allowed=comm.members,
                note="rank 19's NVLink lane degraded from 20 s: every TP all-reduce of node 2's TP group takes 3x longer on all 8 members; "
                     "nobody enters late inside the group; the group arrives late at the DP all-reduces. From timings the 8 members cannot be "
                     "told apart: a correct detector names node-02 / its TP comm (slow_link) or the 8 ranks as a group, not one rank; info-only")]
    check_covers(eng, 60.0, "link_tp8")
    n = finish(out, "link_tp8", eng, job, L, cfg, rng, 'gpu', 60.0, tr)
    return n, it_s


# extra: CUDA-graph-captured layers and a slow rank
@scenario("graph_slow")
def s11(out, seed):
    L = Layout(tp=4, dp=8)
    return sc_generic(out, "graph_slow", seed, L, mk_cfg(graph=True, layers=6), 'gpu', 55.0, 'slow_rank', [5], 20.0,
                      slow=slow_fn(5, 20.0, 1.5, seed=seed), note="CUDA-graph replays (GRAPH_CAPTURED, aux 0), rank 5 1.5x from 20 s")


@scenario("order_deadlock_enq")
def s12(out, seed):
    L = Layout(tp=4, dp=8)
    culprit, it_bad = 10, 18
    cfg = order_swap_cfg(culprit, it_bad, host_first=False)
    eng, job, names, rng = run_job("order_deadlock_enq", seed, L, cfg, 'enq', 60.0, slow_fn(-1, 0, 1, seed=seed))
    it_s = iter_time(eng)
    cid_b = eng.comms[names[culprit]['dp2']]
    onset = None
    for s, ops in eng.streams[culprit].items():
        for op in ops:
            if op.keys is not None and op.recs[0][0] == cid_b.cid and op.end is None and onset is None:
                onset = op.tenq
    tr = [truth(job, "order_deadlock_enq", 'hang', [culprit], onset, round(it_s, 4), 'enq', L.N, info_only=True, allowed=L.group(culprit, ('dp',)),
                note="host-enqueue probe: rank 10 enqueues dp2 then dpcp, its DP peers dpcp then dp2: on both comms every member has "
                     "ENTERED and none completes (a comm_hang to a naive reading); the oldest outstanding call says 10 is in dp2, peers in "
                     "dpcp. Information-only: a two-comm cycle of enqueued calls, the divergent rank is only found by majority")]
    n = finish(out, "order_deadlock_enq", eng, job, L, cfg, rng, 'enq', 60.0, tr)
    return n, it_s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('prefix', nargs='*')
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    import time
    for i, (name, fn) in enumerate(SCEN):
        if a.prefix and not any(name.startswith(p) for p in a.prefix):
            continue
        t = time.time()
        n, it_s = fn(a.out, a.seed * 1000 + i)
        sz = os.path.getsize(os.path.join(a.out, name + '.cwcap')) / 1e6
        print(f"{name:24s} records {n:8d}  {sz:6.1f} MB  iteration {it_s:6.3f} s  ({time.time() - t:5.1f} s)", flush=True)


if __name__ == '__main__':
    main()
