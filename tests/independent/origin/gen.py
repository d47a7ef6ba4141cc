#!/usr/bin/env python3
"""origin/: faults present FROM THE FIRST ITERATION, written apart from the detector.

Written from the wire spec (wire-v1.md), DOMAIN.md, the READMEs and run_scored.sh only.
A job that starts on a bad node never shows a healthy baseline: a detector comparing the job
with its own past sees nothing. Every scenario starts with a realistic warm-up (iterations 0-2
are 2-10x longer on every rank, one random rank up to 1.5x slower again in iteration 0).

Usage: gen.py --out DIR --seed N [PREFIX ...]   writes NAME.cwcap + NAME.truth.json per scenario.

Model (true time in seconds from the job's launch; every rank runs one program of operations):
  * A rendezvous engine: compute ops advance a rank's GPU stream; a collective starts on a rank
    when its stream reaches it and ends on every member at max(entries) + transfer (+ <=20 us
    per member); a send/recv pair ends at max(send, recv entry) + transfer. One stream per rank
    (pipeline sends, TP and DP collectives in program order): no overlap of communication with
    compute. Megatron pipelines are GPipe (all forwards, then all backwards), not 1F1B.
  * Probes.  GPU_TIMED: entry record when the probe sees the kernel start (0.3-2 ms later),
    completion record 0.1-2 ms after the end, times converted to the host clock.  ENQUEUED
    (host-enqueue): the host launches ops ahead of the GPU, at most 6 ops ahead of the device,
    and waits for the device at the end of every iteration (loss.item()); entry = enqueue time,
    completion = when the watchdog observed it (0.1-2 ms after the device end).  Blocking
    (gloo): entry and end are host times of the blocking call.
  * Clocks: every node's clock is off by N(0, 10 ms) (clipped to 30 ms) and drifts +-20 ppm.
  * Node agents flush their ranks' rings every 200 ms (+-10 ms jitter, random phase), one
    cw.calls.v1 batch per comm, and heartbeat every 1 s per comm (collective started/completed
    and p2p counters as the agent knew them at that instant).  ts_ns is the node's clock.
  * The hook (where the job has one) sends topology with coords and cw.steps.v1 per rank and
    iteration with forward/backward/optimizer phases measured on the GPU timeline (so they
    include waits inside the phase).  Plugin-only jobs send topology without coords, no steps.
  * Noise: every compute op x N(1, 2 %), every rank-iteration x N(1, 1 %), a 1 % chance of a
    20-60 ms data-loader hiccup per rank-iteration.  No hardware samples, no COMM_DESTROY.
  * A slow rank multiplies all of its compute by its factor (the GPU is slow); a slow node
    multiplies all of its 8 ranks.  A hung rank stops issuing anything at a point of its
    program (stuck in Python / a data loader / init): it is in no call.
"""
import argparse, base64, json, math, os, random, sys
import numpy as np

REC = np.dtype([("kind", "u1"), ("op", "u1"), ("flags", "<u2"), ("rank", "<i4"), ("comm", "<u8"),
                ("seq", "<u8"), ("t_start_ns", "<i8"), ("t_end_ns", "<i8"), ("bytes", "<u8"),
                ("comm_rank", "<i4"), ("peer", "<i4"), ("nranks", "<u4"), ("aux", "<u4")])
assert REC.itemsize == 64
ALLREDUCE, ALLGATHER, REDUCESCATTER, BROADCAST, SEND, RECV = 1, 2, 3, 4, 6, 7
F_COMPLETED, F_GPU, F_ENQ = 1, 2, 8
T0_NS = 1_767_225_600_000_000_000
OPNAME = {1: "allreduce", 2: "allgather", 3: "reducescatter", 4: "broadcast", 6: "send", 7: "recv"}


class Comm:
    def __init__(self, idx, cid, name, members):
        self.idx, self.cid, self.name, self.members = idx, cid, name, list(members)
        self.crank = {g: i for i, g in enumerate(self.members)}
        self.nodes = len({g // 8 for g in self.members})


class Job:
    """W = TP x PP x DP, rank = dp*(PP*TP) + pp*TP + tp, 8 ranks per node."""

    def __init__(self, rng, name, kind, tp=1, pp=1, dp=1, probe="gpu", steps=True, hook=True):
        self.rng, self.name, self.kind = rng, name, kind
        self.tp, self.pp, self.dp, self.W = tp, pp, dp, tp * pp * dp
        self.probe, self.steps, self.hook = probe, steps, hook
        self.comms, self.progs = [], [[] for _ in range(self.W)]
        self.cnt = {}
        self.world = self.add_comm("world", range(self.W))
        self.tpg, self.ppg, self.dpg = {}, {}, {}
        for d in range(dp):
            for p in range(pp):
                if tp > 1:
                    c = self.add_comm(f"tp{d}.{p}", [self.rank(t, p, d) for t in range(tp)])
                    for t in range(tp): self.tpg[self.rank(t, p, d)] = c
        for d in range(dp):
            for t in range(tp):
                if pp > 1:
                    c = self.add_comm(f"pp{d}.{t}", [self.rank(t, p, d) for p in range(pp)])
                    for p in range(pp): self.ppg[self.rank(t, p, d)] = c
        for p in range(pp):
            for t in range(tp):
                if dp > 1 and (tp > 1 or pp > 1):
                    c = self.add_comm(f"dp{p}.{t}", [self.rank(t, p, d) for d in range(dp)])
                    for d in range(dp): self.dpg[self.rank(t, p, d)] = c
                elif dp > 1:
                    for d in range(dp): self.dpg[self.rank(t, p, d)] = self.world
        self.factor = [1.0] * self.W          # slow GPUs (constant)
        self.ramp = {}                        # rank -> list of factors per iteration (thermal)
        self.stage_w = [1.0] * pp             # per-stage compute weight (unbalanced by design)
        self.hostwork = {}                    # rank -> seconds of host-only work per iteration
        self.cut = {}                         # hung rank -> program length at which it stops

    def rank(self, t, p, d): return d * self.pp * self.tp + p * self.tp + t

    def coords(self, r): return (r % self.tp, (r // self.tp) % self.pp, r // (self.tp * self.pp))

    def add_comm(self, name, members):
        c = Comm(len(self.comms), self.rng.getrandbits(64) | 1, name, members)
        self.comms.append(c)
        return c

    # program builders ---------------------------------------------------------------
    def C(self, r, dur): self.progs[r].append(("C", dur))

    def M(self, r, tag): self.progs[r].append(("M", tag))

    def X(self, r, comm, opc, nbytes, xfer, root=-1):
        k = (r, comm.idx)
        s = self.cnt.get(k, 0); self.cnt[k] = s + 1
        self.progs[r].append(("X", comm.idx, s, opc, nbytes, xfer, root))

    def P(self, r, comm, opc, peer, nbytes, xfer):
        k = (r, comm.idx, peer, opc)
        s = self.cnt.get(k, 0); self.cnt[k] = s + 1
        self.progs[r].append(("P", comm.idx, s, opc, nbytes, xfer, peer))

    def fac(self, r, it):
        f = self.factor[r]
        if r in self.ramp:
            rp = self.ramp[r]; f *= rp[min(it, len(rp) - 1)]
        return f

    def build(self, n_iter, warm, spread_rank, spread_f, body):
        rng = self.rng
        for r in range(self.W):               # the job's first collective: a world allreduce
            self.X(r, self.world, ALLREDUCE, 8, 0.0004)
            self.C(r, 0.05)
        for it in range(n_iter):
            for r in range(self.W):
                w = warm[it] if it < len(warm) else 1.0
                f = self.fac(r, it) * w * rng.gauss(1.0, 0.01)
                if it == 0 and r == spread_rank: f *= spread_f
                self.M(r, ("I", it))
                if rng.random() < 0.01: self.C(r, rng.uniform(0.02, 0.06))
                body(self, r, it, f)
                self.M(r, ("E", it))
                self.progs[r].append(("S",))

    def jit(self, d): return d * max(0.5, self.rng.gauss(1.0, 0.02))


# ------------------------------------------------------------------- job bodies
def megatron_body(f_ms=40.0, mb=4, blocks=1):
    """GPipe over PP stages, TP allreduce after attention and MLP of every micro-batch."""
    def body(j, r, it, f):
        t, p, d = j.coords(r)
        fw = f_ms / 1000 * f * j.stage_w[p]
        tpc, ppc = j.tpg.get(r), j.ppg.get(r)
        def chunk(dur):
            for _ in range(2 * blocks):
                j.C(r, j.jit(dur / (2 * blocks)))
                if tpc: j.X(r, tpc, ALLREDUCE, 16 << 20, 0.0006)
        for m in range(mb):
            if p > 0: j.P(r, ppc, RECV, ppc.crank[j.rank(t, p - 1, d)], 8 << 20, 0.0008)
            chunk(fw)
            if p < j.pp - 1: j.P(r, ppc, SEND, ppc.crank[j.rank(t, p + 1, d)], 8 << 20, 0.0008)
        j.M(r, "F")
        for m in range(mb):
            if p < j.pp - 1: j.P(r, ppc, RECV, ppc.crank[j.rank(t, p + 1, d)], 8 << 20, 0.0008)
            chunk(2 * fw)
            if p > 0: j.P(r, ppc, SEND, ppc.crank[j.rank(t, p - 1, d)], 8 << 20, 0.0008)
        j.M(r, "B")
        if j.dp > 1:
            for _ in range(3): j.X(r, j.dpg[r], ALLREDUCE, 100 << 20, 0.008)
        j.X(r, j.world, ALLREDUCE, 8, 0.0004)     # grad norm / loss: every rank, every step
        j.C(r, j.jit(0.02 * f))                   # optimizer
    return body


def ddp_body(f_ms=60.0, buckets=4):
    def body(j, r, it, f):
        j.C(r, j.jit(f_ms / 1000 * f)); j.M(r, "F")
        for _ in range(buckets):
            j.C(r, j.jit(2 * f_ms / 1000 * f / buckets))
            j.X(r, j.world, ALLREDUCE, 25 << 20, 0.014)   # gloo bucket, blocking
        j.M(r, "B")
        j.C(r, j.jit(0.012 * f))
    return body


def fsdp_body(layers=8, f_ms=8.0):
    def body(j, r, it, f):
        for _ in range(layers):
            j.X(r, j.world, ALLGATHER, 64 << 20, 0.003); j.C(r, j.jit(f_ms / 1000 * f))
        j.M(r, "F")
        for _ in range(layers):
            j.X(r, j.world, ALLGATHER, 64 << 20, 0.003); j.C(r, j.jit(2 * f_ms / 1000 * f))
            j.X(r, j.world, REDUCESCATTER, 64 << 20, 0.003)
        j.M(r, "B")
        j.C(r, j.jit(0.01 * f))
    return body


def tp_dp_body(f_ms=25.0, blocks=4):
    def body(j, r, it, f):
        tpc = j.tpg.get(r)
        for ph, mul in (("F", 1), ("B", 2)):
            for _ in range(2 * blocks):
                j.C(r, j.jit(mul * f_ms / 1000 * f / 2))
                if tpc: j.X(r, tpc, ALLREDUCE, 16 << 20, 0.0005)
            if ph == "B" and r in j.hostwork: j.progs[r].insert(len(j.progs[r]) - 6, ("H", j.hostwork[r]))
            j.M(r, ph)
        for _ in range(4): j.X(r, j.dpg[r], ALLREDUCE, 100 << 20, 0.007)
        j.X(r, j.world, ALLREDUCE, 8, 0.0004)
        j.C(r, j.jit(0.015 * f))
    return body


# ------------------------------------------------------------------- engine
def simulate(j, t0s, tally_after, cset=frozenset()):
    """Rendezvous engine over all rank programs; returns start/end arrays per rank."""
    W, progs, comms = j.W, j.progs, j.comms
    start = [np.full(len(p), np.nan) for p in progs]
    end = [np.full(len(p), np.nan) for p in progs]
    ptr, t = [0] * W, list(t0s)
    pend = {}
    last = np.zeros(W); part = np.zeros(W); wait = np.zeros(W); j.cross = [0, 0]
    rnd = random.Random(j.rng.getrandbits(32)).random
    stack = list(range(W))
    while stack:
        r = stack.pop()
        p, S, E = progs[r], start[r], end[r]
        while ptr[r] < len(p):
            i = ptr[r]; op = p[i]; ty = op[0]
            if ty == "C":
                S[i] = t[r]; t[r] += op[1]; E[i] = t[r]; ptr[r] = i + 1; continue
            if ty != "X" and ty != "P":
                S[i] = E[i] = t[r]; ptr[r] = i + 1; continue
            if ty == "X":
                key = (op[1], op[2]); n = len(comms[op[1]].members)
            else:
                a, b = (r, comms[op[1]].members[op[6]])
                key = (op[1], op[2], a, b) if op[3] == SEND else (op[1], op[2], b, a)
                n = 2
            d = pend.setdefault(key, {})
            if r in d: break
            d[r] = (t[r], i); S[i] = t[r]
            if len(d) < n: break
            emax = max(e for e, _ in d.values())
            tend = emax + op[5]
            if emax > tally_after:
                lr = max(d, key=lambda m: d[m][0])
                last[lr] += 1
                if cset and not cset.issuperset(d) and not cset.isdisjoint(d):
                    j.cross[0] += 1; j.cross[1] += lr in cset
                for m, (e, _) in d.items(): part[m] += 1; wait[m] += emax - e
            for m, (e, k) in d.items():
                te = tend + 2e-5 * rnd()
                end[m][k] = te; t[m] = te; ptr[m] = k + 1
                if m != r: stack.append(m)
            del pend[key]
    return start, end, t, (last, part, wait)


def host_times(j, r, start, end, t0):
    """Host-enqueue times: launch ahead of the device, at most Q ops, sync at iteration end."""
    p, S, E = j.progs[r], start[r], end[r]
    H = np.full(len(p), np.nan); h = t0; Q = 6; clip = 0.0
    for i, op in enumerate(p):
        ty = op[0]
        if ty == "S":
            if i == 0 or np.isnan(E[i - 1]): break
            h = max(h, E[i - 1]); H[i] = h; continue
        if ty == "H": h += op[1]; H[i] = h; continue
        if ty == "M": H[i] = h; continue
        if i >= Q:
            g = S[i - Q]
            if np.isnan(g): break
            h = max(h, g)
        h += 0.0003 if ty == "C" else 0.00003
        if not np.isnan(S[i]) and h > S[i]:
            clip = max(clip, h - S[i]); h = S[i]
        H[i] = h
    return H, clip


# ------------------------------------------------------------------- capture writer
class Clock:
    def __init__(self, rng, nodes):
        self.off = [max(-0.03, min(0.03, rng.gauss(0, 0.010))) for _ in range(nodes)]
        self.drift = [rng.uniform(-2e-5, 2e-5) for _ in range(nodes)]

    def ns(self, node, t):
        return T0_NS + np.round((np.asarray(t) + self.off[node] + self.drift[node] * np.asarray(t)) * 1e9).astype(np.int64)


def emit(j, out, name, truth, start, end, t_end, hang_ranks=()):
    rng = j.rng
    nodes = (j.W + 7) // 8
    clk = Clock(rng, nodes)
    lines = []
    def line(topic, key, ts, value=None, b64=None):
        d = {"topic": topic, "key": key, "ts_ns": int(ts)}
        if b64 is not None: d["value_b64"] = b64
        else: d["value"] = value
        lines.append(d)
    # topology
    for r in range(j.W):
        node = r // 8
        v = {"v": 1, "job": j.name, "ts_ns": int(clk.ns(node, 0.4 + 0.01 * (r % 8))), "rank": r,
             "world_size": j.W, "node": f"node-{node:02d}", "local_rank": r % 8, "gpu": f"GPU-{j.name}-{r:04x}"}
        if j.hook:
            t, p, d = j.coords(r); v["coords"] = {"tp": t, "pp": p, "dp": d, "cp": 0, "ep": 0}
        line("cw.topology.v1", j.name, v["ts_ns"], v)
    # records: rows of (rank, comm, seq, kind, op, flags, ts, te, bytes, crank, peer, nranks, aux, write)
    rows = []
    init_t = {}
    for c in j.comms:
        ti = 1.0 + 0.3 * rng.random()
        for g in c.members:
            init_t[(g, c.idx)] = ti
            rows.append((g, c.idx, 0, 2, 0, F_COMPLETED, ti, ti + 0.05, 0, c.crank[g], -1, len(c.members), c.nodes, ti + 0.05))
    ent = {}   # (rank, comm) -> lists for heartbeats
    for r in range(j.W):
        p, S, E = j.progs[r], start[r], end[r]
        if j.probe == "enq":
            Hh, clip = host_times(j, r, start, end, S[0] if len(S) else 0.0)
            truth["model"].setdefault("host_clip_ms", 0.0)
            truth["model"]["host_clip_ms"] = max(truth["model"]["host_clip_ms"], round(clip * 1e3, 3))
        for i, op in enumerate(p):
            if op[0] not in ("X", "P"): continue
            c = j.comms[op[1]]
            if j.probe == "gpu":
                if np.isnan(S[i]): continue
                ts, te = S[i], E[i]; fl = F_GPU
                w1 = ts + rng.uniform(0.0003, 0.002); w2 = te + rng.uniform(0.0001, 0.002)
            elif j.probe == "enq":
                if np.isnan(Hh[i]): continue
                ts = Hh[i]; fl = F_ENQ
                te = E[i] + rng.uniform(0.0001, 0.002) if not np.isnan(E[i]) else np.nan
                w1 = ts + 0.00005; w2 = te
            else:
                if np.isnan(S[i]): continue
                ts, te = S[i], E[i]; fl = 0
                w1 = ts + 0.00002; w2 = te + 0.00002
            peer = op[6] if op[0] == "P" else op[6]
            aux = (op[2] + 1) & 0xFFFFFFFF if op[0] == "X" else 0
            base = (r, c.idx, op[2], 1, op[3], fl, ts, 0.0, op[4], c.crank[r], peer, len(c.members), aux)
            rows.append(base + (w1,))
            if not np.isnan(te):
                rows.append(base[:5] + (fl | F_COMPLETED, ts, te) + base[8:] + (w2,))
            kk = (r, c.idx, "c" if op[0] == "X" else (op[6], op[3]))
            L = ent.setdefault(kk, ([], [], [], []))
            L[0].append(w1); L[1].append(ts)
            if not np.isnan(te): L[2].append(w2); L[3].append(te)
    rows = [x for x in rows if x[-1] <= t_end]
    rows.sort(key=lambda x: x[-1])
    n = len(rows)
    A = np.zeros(n, REC)
    col = list(zip(*rows))
    rank = np.array(col[0], np.int32); cidx = np.array(col[1], np.int64)
    node = rank // 8
    A["rank"] = rank; A["comm"] = np.array([c.cid for c in j.comms], np.uint64)[cidx]
    A["seq"] = np.array(col[2], np.uint64); A["kind"] = col[3]; A["op"] = col[4]; A["flags"] = col[5]
    ts = np.array(col[6]); te = np.array(col[7])
    for nd in range(nodes):
        m = node == nd
        A["t_start_ns"][m] = clk.ns(nd, ts[m])
        A["t_end_ns"][m] = np.where(te[m] > 0, clk.ns(nd, te[m]), 0)
    A["bytes"] = np.array(col[8], np.uint64); A["comm_rank"] = col[9]; A["peer"] = col[10]
    A["nranks"] = col[11]; A["aux"] = np.array(col[12], np.uint32)
    wt = np.array(col[13])
    validate(A, j)
    # agent flushes every 200 ms per node
    for nd in range(nodes):
        m = np.nonzero(node == nd)[0]
        if not len(m): continue
        ph = rng.uniform(0, 0.2)
        k = np.ceil((wt[m] - ph) / 0.2).astype(np.int64)
        ft = ph + 0.2 * k + ((k * 2654435761 + nd * 97) % 1000) / 1000 * 0.02 - 0.01
        ft = np.maximum(ft, wt[m] + 1e-5)
        order = np.lexsort((wt[m], cidx[m], k))
        m, k, ft = m[order], k[order], ft[order]
        brk = np.nonzero((np.diff(k) != 0) | (np.diff(cidx[m]) != 0))[0] + 1
        for g in np.split(np.arange(len(m)), brk):
            fts = float(ft[g].max())
            if fts > t_end: continue
            idx = m[g]
            c = j.comms[int(cidx[idx[0]])]
            hdr = b"CWB1" + np.array([1, 64], "<u2").tobytes() + np.array([len(idx), 0], "<u4").tobytes()
            line("cw.calls.v1", f"{j.name}/{c.cid:016x}", clk.ns(nd, fts),
                 b64=base64.b64encode(hdr + A[idx].tobytes()).decode())
    # heartbeats every 1 s per node and comm
    ent = {k: tuple(np.array(x) for x in v) for k, v in ent.items()}
    p2pk = {}
    for (rr, ci, kk) in ent:
        if kk != "c": p2pk.setdefault((rr, ci), []).append(kk)
    for nd in range(nodes):
        local = [r for r in range(nd * 8, min(j.W, nd * 8 + 8))]
        cl = [c for c in j.comms if any(g in c.crank for g in local)]
        tt = 1.5 + rng.uniform(0, 1.0)
        while tt <= t_end:
            for c in cl:
                if max(init_t[(g, c.idx)] for g in c.members) > tt: continue
                ranks = []
                for g in local:
                    if g not in c.crank: continue
                    e = {"rank": g, "started": -1, "completed": -1}
                    L = ent.get((g, c.idx, "c"))
                    if L is not None:
                        s = int(np.searchsorted(L[0], tt, "right")); q = int(np.searchsorted(L[2], tt, "right"))
                        e["started"], e["completed"] = s - 1, q - 1
                        if s: e["t_last_start_ns"] = int(clk.ns(nd, L[1][s - 1]))
                        if q: e["t_last_end_ns"] = int(clk.ns(nd, L[3][q - 1]))
                    p2p = []
                    for kk in p2pk.get((g, c.idx), ()):
                        L = ent[(g, c.idx, kk)]
                        s = int(np.searchsorted(L[0], tt, "right")); q = int(np.searchsorted(L[2], tt, "right"))
                        p2p.append({"peer": int(kk[0]), "op": OPNAME[kk[1]], "started": s - 1, "completed": q - 1})
                    if p2p: e["p2p"] = sorted(p2p, key=lambda x: (x["peer"], x["op"]))
                    ranks.append(e)
                ts_ = int(clk.ns(nd, tt))
                line("cw.progress.v1", f"{j.name}/{c.cid:016x}", ts_,
                     {"v": 1, "job": j.name, "node": f"node-{nd:02d}", "ts_ns": ts_, "comm": f"{c.cid:016x}", "ranks": ranks})
            tt += 1.0 + rng.uniform(-0.005, 0.005)
    # steps (hook): GPU-timeline phases of every completed iteration
    if j.steps:
        for r in range(j.W):
            p, S = j.progs[r], start[r]
            marks = {}
            for i, op in enumerate(p):
                if op[0] == "M" and not np.isnan(S[i]): marks[op[1]] = S[i]
            it = 0
            while ("E", it) in marks:
                a, b = marks[("I", it)], marks[("E", it)]
                if b + 0.001 > t_end: break
                v = {"v": 1, "job": j.name, "rank": r, "iteration": it,
                     "t_start_ns": int(clk.ns(r // 8, a)), "t_end_ns": int(clk.ns(r // 8, b))}
                v["phases"] = dict(j.phase_ms[r][it]) if hasattr(j, "phase_ms") else {}
                line("cw.steps.v1", j.name, clk.ns(r // 8, b + 0.001), v)
                it += 1
    lines.sort(key=lambda d: d["ts_ns"])
    path = os.path.join(out, name + ".cwcap")
    with open(path, "w") as fh:
        for d in lines: fh.write(json.dumps(d, separators=(",", ":")) + "\n")
    truth["capture"] = {"messages": len(lines), "records": int(n), "bytes": os.path.getsize(path),
                        "clock_offsets_ms": [round(o * 1e3, 2) for o in clk.off]}
    with open(os.path.join(out, name + ".truth.json"), "w") as fh:
        json.dump(truth, fh, indent=1)
    return n, len(lines)


def validate(A, j):
    """The capture's records against wire-v1 section 1."""
    assert A.dtype.itemsize == 64
    assert np.isin(A["kind"], [1, 2, 3]).all(), "kind"
    assert (A["op"] <= 11).all() and (A["op"][A["kind"] != 1] == 0).all(), "op"
    assert (A["flags"] & ~np.uint16(0x1F) == 0).all(), "flags"
    assert ((A["rank"] >= 0) & (A["rank"] < j.W)).all(), "rank"
    assert ((A["comm_rank"] >= 0) & (A["comm_rank"].astype(np.int64) < A["nranks"].astype(np.int64))).all(), "comm_rank"
    comp = (A["flags"] & F_COMPLETED) != 0
    assert (A["t_end_ns"][~comp] == 0).all() and (A["t_end_ns"][comp] >= A["t_start_ns"][comp]).all(), "times"
    p2p = np.isin(A["op"], [SEND, RECV])
    assert ((A["peer"][p2p] >= 0) & (A["peer"][p2p].astype(np.int64) < A["nranks"][p2p].astype(np.int64))).all(), "peer"
    call = A["kind"] == 1
    assert not (call & ~p2p & (A["op"] != BROADCAST) & (A["peer"] != -1)).any(), "peer -1"
    # seq of entry records non-decreasing per (rank, comm) [collectives] / (rank, comm, peer, op) [p2p]
    e = A[call & ~comp]
    last = {}
    for rec in e:
        k = (int(rec["rank"]), int(rec["comm"])) if rec["op"] not in (SEND, RECV) else \
            (int(rec["rank"]), int(rec["comm"]), int(rec["peer"]), int(rec["op"]))
        s = int(rec["seq"])
        assert s >= last.get(k, -1), f"seq not monotonic {k}"
        last[k] = s


# ------------------------------------------------------------------- scenarios
def warmup(rng):
    return [rng.uniform(4.0, 8.0), rng.uniform(1.8, 3.0), rng.uniform(1.05, 1.3)]


def run_job(j, body, dur, est_iter, out, name, truth, hang=None):
    """Build, simulate (longer if needed), check the wait-for graph, write the capture."""
    rng = j.rng
    warm = warmup(rng)
    spread = (rng.randrange(j.W), rng.uniform(1.2, 1.5))
    n_iter = int(dur / est_iter * 1.3) + 6
    t0s = [2.0 + rng.uniform(0, 0.4) for _ in range(j.W)]
    snap = rng.getstate()
    while True:
        rng.setstate(snap)
        j.progs = [[] for _ in range(j.W)]; j.cnt = {}
        j.build(n_iter, warm, spread[0], spread[1], body)
        if hang:
            hang(j)
        cset = frozenset(r for f in truth["faults"] if f["type"] == "slow" for r in f["ranks"])
        start, end, tf, (last, part, wait) = simulate(j, t0s, 12.0, cset)
        if hang or min(tf) >= dur + 1: break
        n_iter = int(n_iter * 1.4) + 2
    # phases from the GPU timeline
    j.phase_ms = []
    for r in range(j.W):
        ph, marks, cur = [], {}, None
        for i, op in enumerate(j.progs[r]):
            if op[0] == "M" and not np.isnan(start[r][i]): marks[op[1] if isinstance(op[1], tuple) else (op[1], cur)] = start[r][i]
            if op[0] == "M" and isinstance(op[1], tuple) and op[1][0] == "I": cur = op[1][1]
        it = 0
        while ("E", it) in marks and ("F", it) in marks and ("B", it) in marks:
            a, f, b, e = marks[("I", it)], marks[("F", it)], marks[("B", it)], marks[("E", it)]
            ph.append({"forward_ms": round((f - a) * 1e3, 2), "backward_ms": round((b - f) * 1e3, 2),
                       "optimizer_ms": round((e - b) * 1e3, 2)})
            it += 1
        j.phase_ms.append(ph)
    # iteration time (median of rank 0's iterations after warm-up)
    marks0 = [start[0][i] for i, op in enumerate(j.progs[0]) if op[0] == "M" and isinstance(op[1], tuple) and op[1][0] == "I"]
    marks0 = [m for m in marks0 if not np.isnan(m)]
    it_s = float(np.median(np.diff(marks0[4:]))) if len(marks0) > 6 else est_iter
    truth["iteration_s"] = round(it_s, 4)
    truth["iteration0_s"] = round(float(marks0[1] - marks0[0]), 3) if len(marks0) > 1 else None
    truth["duration_s"] = dur
    # own check: who arrives last at the rendezvous (after t=12 s, before any hang)
    share = np.divide(last, part, out=np.zeros_like(last), where=part > 0)
    mw = np.divide(wait, part, out=np.zeros_like(wait), where=part > 0)
    chk = {}
    for f in truth["faults"]:
        if f["type"] != "slow": continue
        cs = f["ranks"]
        others = [r for r in range(j.W) if r not in cs]
        top = max(others, key=lambda r: share[r])
        chk[",".join(map(str, cs))] = {
            "culprit_last_share": round(float(np.mean(share[cs])), 3),
            "mixed_rendezvous": j.cross[0], "last_is_culprit_in_mixed": round(j.cross[1] / max(1, j.cross[0]), 3),
            "top_other_rank": int(top), "top_other_last_share": round(float(share[top]), 3),
            "culprit_mean_wait_ms": round(float(np.mean(mw[cs])) * 1e3, 2),
            "others_mean_wait_ms": round(float(np.mean(mw[others])) * 1e3, 2),
            "culprit_is_where_waiting_ends": bool(np.mean(mw[cs]) < np.min(mw[others]) + 1e-9)}
    truth["wait_for_check"] = chk
    for f in truth["faults"]:
        if f["type"] == "hang": f["onset_s"] = round(float(tf[f["ranks"][0]]), 4)
        if "onset_iter" in f and len(marks0) > f["onset_iter"]: f["onset_s"] = round(float(marks0[f["onset_iter"]]), 4)
    truth["model"] = {"ranks": j.W, "tp": j.tp, "pp": j.pp, "dp": j.dp, "probe": j.probe,
                      "steps": j.steps, "hook": j.hook, "warmup_multipliers": [round(x, 2) for x in warm],
                      "iter0_spread_rank": spread[0], "iter0_spread_factor": round(spread[1], 2)}
    return emit(j, out, name, truth, start, end, dur)


def hang_at_time(rank, t_hang, est_iter, truth):
    """Rank stops at the start of the iteration that begins near t_hang (stuck in its data loader)."""
    def h(j):
        it_target = max(1, int(round((t_hang - 2.0) / est_iter)))
        for i, op in enumerate(j.progs[rank]):
            if op[0] == "M" and op[1] == ("I", it_target):
                j.cut[rank] = i + 1; del j.progs[rank][i + 1:]; break
        truth["hang_iteration"] = it_target
    return h


def hang_cut_first(rank, kind):
    def h(j):
        p = j.progs[rank]
        for i, op in enumerate(p):
            if (kind == "X" and op[0] == "X") or (kind == "SEND" and op[0] == "P" and op[3] == SEND):
                del p[i:]; break
    return h


LAYOUTS = {  # name: (tp, pp, dp, probe, steps, hook, body factory, est iteration s)
    "meg": (4, 2, 4, "gpu", True, True, lambda: megatron_body(40, 4), 0.72),
    "ddp": (1, 1, 12, "blk", True, True, lambda: ddp_body(60, 4), 0.25),
    "ddp16": (1, 1, 16, "blk", True, True, lambda: ddp_body(60, 4), 0.25),
    "pp": (1, 4, 4, "gpu", False, False, lambda: megatron_body(15, 8), 0.55),
    "fsdp": (1, 1, 16, "gpu", True, True, lambda: fsdp_body(8, 8.0), 0.28),
    "tp8": (8, 1, 4, "gpu", True, True, lambda: tp_dp_body(25, 4), 0.27),
    "therm": (2, 2, 4, "gpu", True, True, lambda: megatron_body(30, 4), 0.5),
    "enq": (4, 1, 4, "enq", True, True, lambda: tp_dp_body(25, 4), 0.27),
    "unbal": (2, 4, 2, "gpu", True, True, lambda: megatron_body(15, 8), 0.6),
    "meg16": (4, 2, 2, "gpu", True, True, lambda: megatron_body(40, 4), 0.72),
}


def scenarios():
    S = []
    def slow(name, lay, factor, desc, pick=None, dur=50):
        S.append((name, lay, dur, desc, {"slow": [(pick, factor)]}))
    slow("slow13_megatron", "meg", 1.3, "Megatron TP4xPP2xDP4, GPU-timed + steps: one rank 1.3x from iteration 0")
    slow("slow16_megatron", "meg", 1.6, "Megatron TP4xPP2xDP4, GPU-timed + steps: one rank 1.6x from iteration 0")
    slow("slow13_ddp_gloo", "ddp", 1.3, "DDP 12 ranks, gloo host-blocking + steps: one rank 1.3x from iteration 0")
    slow("slow16_ddp_gloo", "ddp16", 1.6, "DDP 16 ranks, gloo host-blocking + steps: one rank 1.6x from iteration 0")
    slow("slow13_pipe_plugin", "pp", 1.3, "PP4xDP4 TP1, GPU-timed plugin only (no steps): one rank 1.3x from iteration 0")
    slow("slow16_pipe_plugin", "pp", 1.6, "PP4xDP4 TP1, GPU-timed plugin only (no steps): one rank 1.6x from iteration 0")
    slow("slow13_fsdp", "fsdp", 1.3, "FSDP 16 ranks, GPU-timed + steps: one rank 1.3x from iteration 0")
    slow("slow16_fsdp", "fsdp", 1.6, "FSDP 16 ranks, GPU-timed + steps: one rank 1.6x from iteration 0")
    S.append(("slownode_tp8", "tp8", 50, "TP8xDP4, GPU-timed + steps: a whole node (8 ranks) 1.25x from the start", {"node": 1.25}))
    S.append(("thermal_early", "therm", 50, "TP2xPP2xDP4, GPU-timed + steps: one rank normal, throttles to 1.4x within iterations 3-5", {"thermal": 1.4}))
    S.append(("ctl_warmup_megatron", "meg", 50, "healthy Megatron TP4xPP2xDP4 with a 2-10x warm-up and one rank 1.2-1.5x in iteration 0", {}))
    S.append(("ctl_warmup_ddp", "ddp16", 50, "healthy DDP 16 ranks gloo with a 2-10x warm-up", {}))
    S.append(("ctl_rank0_logging", "enq", 50, "healthy TP4xDP4 host-enqueue: rank 0 does 25 ms of host logging per step while its GPU is busy", {"log": 0.025}))
    S.append(("hang_init_gpu", "meg16", 60, "TP4xPP2xDP2 GPU-timed: one rank never enters the job's first collective (stuck in init)", {"hang_first": "X"}))
    S.append(("hang_init_enq", "enq", 60, "TP4xDP4 host-enqueue: one rank never enters the job's first collective (stuck in init)", {"hang_first": "X"}))
    S.append(("hang_first_send", "pp", 60, "PP4xDP4 TP1 GPU-timed plugin: a stage-0 rank never posts its first pipeline send", {"hang_first": "SEND"}))
    S.append(("slow_then_hang", "meg", 60, "Megatron TP4xPP2xDP4 GPU-timed: one rank 1.5x from the start, another rank hangs at ~40 s (iteration 35)", {"slow": [(None, 1.5)], "hang_at": 27.0}))
    S.append(("ctl_unbalanced_stages", "unbal", 50, "TP2xPP4xDP2 GPU-timed: last stage 1.4x heavier by design (LM head), no faulty rank", {"unbal": 1.4}))
    S.append(("unbal_plus_slow", "unbal", 50, "TP2xPP4xDP2 GPU-timed: last stage 1.4x by design + one first-stage rank 1.5x", {"unbal": 1.4, "slow_stage0": 1.5}))
    return S


def make(name, lay, dur, desc, spec, out, seed):
    rng = random.Random(f"{seed}:{name}")
    tp, pp, dp, probe, steps, hook, bf, est = LAYOUTS[lay]
    job = f"origin-{name}-{seed}"
    j = Job(rng, job, lay, tp, pp, dp, probe, steps, hook)
    truth = {"scenario": name, "job": job, "description": desc, "control": not any(
        k in spec for k in ("slow", "node", "thermal", "hang_first", "hang_at", "slow_stage0")), "faults": []}
    onset = 2.0
    for pick, fac in spec.get("slow", []):
        r = pick if pick is not None else rng.randrange(j.W)
        j.factor[r] *= fac
        truth["faults"].append({"type": "slow", "ranks": [r], "factor": fac, "onset_s": onset, "from": "iteration 0"})
    if "node" in spec:
        nd = rng.randrange(j.W // 8)
        rs = list(range(nd * 8, nd * 8 + 8))
        for r in rs: j.factor[r] *= spec["node"]
        truth["faults"].append({"type": "slow", "ranks": rs, "factor": spec["node"], "onset_s": onset,
                                "node": f"node-{nd:02d}", "from": "iteration 0", "one_incident": True})
    if "thermal" in spec:
        r = rng.randrange(j.W); k = rng.choice([3, 4])
        j.ramp[r] = [1.0] * k + [1.0 + (spec["thermal"] - 1) * 0.5, spec["thermal"]]
        truth["faults"].append({"type": "slow", "ranks": [r], "factor": spec["thermal"], "onset_s": None, "onset_iter": k,
                                "from": f"iteration {k} (1.2x), iteration {k + 1} on 1.4x"})
    if "unbal" in spec:
        j.stage_w[pp - 1] = spec["unbal"]
        truth["heavy_stage_ranks"] = [r for r in range(j.W) if j.coords(r)[1] == pp - 1]
    if "slow_stage0" in spec:
        r = rng.choice([r for r in range(j.W) if j.coords(r)[1] == 0])
        j.factor[r] *= spec["slow_stage0"]
        truth["faults"].append({"type": "slow", "ranks": [r], "factor": spec["slow_stage0"], "onset_s": onset, "from": "iteration 0"})
    if "log" in spec:
        j.hostwork[0] = spec["log"]
    hang = None
    if "hang_first" in spec:
        if spec["hang_first"] == "SEND":
            r = rng.choice([r for r in range(j.W) if j.coords(r)[1] == 0])
        else:
            r = rng.randrange(1, j.W)
        hang = hang_cut_first(r, spec["hang_first"])
        truth["faults"].append({"type": "hang", "ranks": [r], "onset_s": None})
    if "hang_at" in spec:
        slow_r = truth["faults"][0]["ranks"][0]
        st = j.coords(slow_r)
        cand = [r for r in range(j.W) if j.coords(r)[2] != st[2] and j.tpg.get(r) is not j.tpg.get(slow_r)]
        r = rng.choice(cand)
        hang = hang_at_time(r, spec["hang_at"], est, truth)
        truth["faults"].append({"type": "hang", "ranks": [r], "onset_s": None})
    nrec, nmsg = run_job(j, bf(), dur, est, out, name, truth, hang)
    return truth, nrec, nmsg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True); ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("prefix", nargs="*")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name, lay, dur, desc, spec in scenarios():
        if a.prefix and not any(name.startswith(p) for p in a.prefix): continue
        truth, nrec, nmsg = make(name, lay, dur, desc, spec, a.out, a.seed)
        fl = "; ".join(f"{f['type']} {f['ranks']}" for f in truth["faults"]) or "control"
        print(f"{name:26s} {truth['model']['ranks']:3d} ranks  iter {truth['iteration_s']:.3f} s  "
              f"{nrec:7d} records {nmsg:6d} msgs  {truth['capture']['bytes'] / 1e6:6.1f} MB  {fl}", flush=True)


if __name__ == "__main__":
    main()
