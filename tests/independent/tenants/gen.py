#!/usr/bin/env python3
"""tenants/: a shared cluster - many jobs at once in one capture, as one commwatch worker sees a
multi-tenant fleet. Written from the wire spec (wire-v1.md), DOMAIN.md, the READMEs and docs only,
never the detector's code.

    gen.py --out DIR --seed N [PREFIX ...]   ->  DIR/NAME.cwcap + DIR/NAME.truth.json per scenario

Model (the author's simplifications):
- Each job is a set of ranks (8 GPUs a node, 4 for gloo DDP) running a per-step program of compute
  segments and communication ops; a discrete-event engine makes every collective a rendezvous
  (completion = latest entry + transfer, nearly equal on all members) and every send/recv pair one.
  Megatron-like jobs (TP fastest, PP groups with GPipe send/recv, DP all-reduce), FSDP (all-gathers
  forward and backward, reduce-scatters), gloo DDP (bucket all-reduces).
- Probes: GPU-timed plugin records (device start/end; an entry record only when the call is still open
  at an agent read), host-enqueue hook records (entry = host enqueue time up to 20 ms ahead of the
  device, always written, completion from a CUDA event polled 1-10 ms late; a blocked rank has the rest
  of its step enqueued behind the blocked call), host-blocking gloo (real host times).
- Node agents batch records per node and communicator every 200 ms and heartbeat every 1 s (own phase per
  node); heartbeats carry started/completed as the probe saw them, and `exited: true` for 3 periods after a
  process is gone (the documented optional field), then stop naming the rank.
- Every node has its own clock: job offset (ms, or tens of seconds) + a per-node offset of +-15 ms +
  drift. All stamps a node writes (record times, ts_ns of its messages) are on its clock.
- Faults: a rank stopping before a collective (hang), a GPU k-times slower (slow_rank), a rank whose
  completion path stops (probe gives up with COMPLETION_LOST after 20 s; the job runs on), normal job end
  (COMM_DESTROY then exit), preemption (every process killed at once, no destroy), fabric congestion
  slowing inter-node transfers (no culprit).
"""
import argparse
import base64
import heapq
import json
import math
import os
import random
import sys
from collections import defaultdict, deque

import numpy as np

T0 = 1_796_256_000.0  # 2026-12-03T00:00:00Z (seconds)
REC = np.dtype([("kind", "u1"), ("op", "u1"), ("flags", "<u2"), ("rank", "<i4"), ("comm", "<u8"),
                ("seq", "<u8"), ("t_start", "<i8"), ("t_end", "<i8"), ("bytes", "<u8"),
                ("comm_rank", "<i4"), ("peer", "<i4"), ("nranks", "<u4"), ("aux", "<u4")])
assert REC.itemsize == 64
F_COMPLETED, F_GPU, F_GRAPH, F_ENQ, F_LOST = 1, 2, 4, 8, 16
OP = {"allreduce": 1, "allgather": 2, "reducescatter": 3, "broadcast": 4, "send": 6, "recv": 7}
FLUSH = 0.2
HB = 1.0


def ns(x):
    return int(round(x * 1e9))


class Comm:
    __slots__ = ("idx", "cid", "members", "crank", "nodes", "kind", "xfer", "p2p")

    def __init__(self, idx, cid, members, node_of, kind, xfer, p2p=False):
        self.idx, self.cid, self.kind, self.xfer, self.p2p = idx, cid, kind, xfer, p2p
        self.members = list(members)
        self.crank = {r: i for i, r in enumerate(self.members)}
        self.nodes = sorted({node_of[r] for r in self.members})


class Call:
    __slots__ = ("rank", "comm", "op", "seq", "t0", "t1", "nbytes", "peer", "enq", "queued", "it")

    def __init__(self, rank, comm, op, seq, t0, nbytes, peer, it):
        self.rank, self.comm, self.op, self.seq, self.t0 = rank, comm, op, seq, t0
        self.t1 = None
        self.nbytes, self.peer, self.enq, self.queued, self.it = nbytes, peer, None, False, it


class Job:
    """One run of a job id. Times are true seconds from the capture's start."""

    def __init__(self, rng, jid, layout, probe, step_s, start, end, nodes, clock_off, drift_ppm=0.0,
                 steps_msgs=False, fault=None, kill=None, congestion=(), name=None):
        self.rng, self.jid, self.layout, self.probe, self.step_s = rng, jid, layout, probe, step_s
        self.start, self.end, self.kill, self.fault = start, end, kill, fault or {}
        self.steps_msgs, self.congestion = steps_msgs, congestion
        self.name = name or jid
        kind = layout[0]
        if kind == "megatron":
            _, self.tp, self.pp, self.dp = layout
            self.W = self.tp * self.pp * self.dp
            gpn = 8
        elif kind == "fsdp":
            self.W = layout[1]
            gpn = 8
        else:  # ddp (gloo)
            self.W = layout[1]
            gpn = 4
        nn = math.ceil(self.W / gpn)
        assert len(nodes) >= nn, (jid, len(nodes), nn)
        self.nodes = nodes[:nn]
        self.node_of = {r: self.nodes[r // gpn] for r in range(self.W)}
        self.local = {r: r % gpn for r in range(self.W)}
        self.noff = {n: clock_off + rng.uniform(-0.015, 0.015) for n in self.nodes}
        self.ndrift = {n: (drift_ppm + rng.uniform(-2, 2)) * 1e-6 for n in self.nodes}
        self.flush_ph = {n: rng.uniform(0, FLUSH) for n in self.nodes}
        self.hb_ph = {n: rng.uniform(0, HB) for n in self.nodes}
        self.comms = []
        self.rank_comms = defaultdict(list)
        self.coords = {}
        self._build_comms()

    # clocks -------------------------------------------------------------------------------
    def clk(self, node, t):
        return T0 + t + self.noff[node] + self.ndrift[node] * t

    def job_clock_ns(self, t, rank=0):
        return ns(self.clk(self.node_of[rank], t))

    def _new_comm(self, members, kind, xfer, p2p=False):
        c = Comm(len(self.comms), self.rng.getrandbits(64), members, self.node_of, kind, xfer, p2p)
        self.comms.append(c)
        for r in members:
            self.rank_comms[r].append(c)
        return c

    def _build_comms(self):
        S = self.step_s
        kind = self.layout[0]
        if kind == "megatron":
            tp, pp, dp = self.tp, self.pp, self.dp
            self.tpc, self.ppc, self.dpc = {}, {}, {}
            for r in range(self.W):
                d, rem = divmod(r, pp * tp)
                p, t = divmod(rem, tp)
                self.coords[r] = {"tp": t, "pp": p, "dp": d}
            for d in range(dp):
                for p in range(pp):
                    m = [d * pp * tp + p * tp + t for t in range(tp)]
                    c = self._new_comm(m, "tp", S * 0.004)
                    for r in m:
                        self.tpc[r] = c
            if pp > 1:
                for d in range(dp):
                    for t in range(tp):
                        m = [d * pp * tp + p * tp + t for p in range(pp)]
                        c = self._new_comm(m, "pp", S * 0.006, p2p=True)
                        for r in m:
                            self.ppc[r] = c
            if dp > 1:
                for p in range(pp):
                    for t in range(tp):
                        m = [d * pp * tp + p * tp + t for d in range(dp)]
                        c = self._new_comm(m, "dp", S * 0.05)
                        for r in m:
                            self.dpc[r] = c
        elif kind == "fsdp":
            self.world = self._new_comm(list(range(self.W)), "world", S * 0.012)
            for r in range(self.W):
                self.coords[r] = {"dp": r}
        else:
            self.world = self._new_comm(list(range(self.W)), "world", S * 0.04)
            for r in range(self.W):
                self.coords[r] = {"dp": r}

    # faults -------------------------------------------------------------------------------
    def factor(self, r, t):
        f = self.fault
        if f.get("kind") == "slow" and r == f["rank"] and t >= f["at"] and t < f.get("until", 1e18):
            return f["factor"]
        return 1.0

    def xfer_extra(self, comm, t):
        if len(comm.nodes) < 2:
            return 0.0
        for (a, b, extra) in self.congestion:
            if a <= t < b:
                return extra * self.rng.uniform(0.7, 1.3)
        return 0.0

    # programs -----------------------------------------------------------------------------
    def program(self, r, st):
        """Generator of ops for rank r; st is the rank's state (reads st.t at step boundaries)."""
        rng = self.rng
        S = self.step_s
        kind = self.layout[0]
        it = 0
        while it < self.n_iter:
            yield ("B", it)
            if kind == "megatron":
                tp, pp = self.tp, self.pp
                p = self.coords[r]["pp"]
                M = pp if pp > 1 else 1
                unit = S * 0.85 / (M + pp - 1)
                f, b = unit / 3, unit * 2 / 3
                tpc, ppc, dpc = self.tpc[r], self.ppc.get(r), self.dpc.get(r)
                prev = r - tp if p > 0 else None
                nxt = r + tp if p < pp - 1 else None
                for m in range(M):
                    if prev is not None:
                        yield ("R", ppc, prev, 1 << 24)
                    yield ("C", f * 0.5)
                    if tp > 1:
                        yield ("K", tpc, 1, 1 << 25)
                    yield ("C", f * 0.5)
                    if nxt is not None:
                        yield ("S", ppc, nxt, 1 << 24)
                yield ("P", "f")
                for m in range(M):
                    if nxt is not None:
                        yield ("R", ppc, nxt, 1 << 24)
                    yield ("C", b * 0.5)
                    if tp > 1:
                        yield ("K", tpc, 1, 1 << 25)
                    yield ("C", b * 0.5)
                    if prev is not None:
                        yield ("S", ppc, prev, 1 << 24)
                if dpc is not None:
                    yield ("K", dpc, 1, 1 << 28)
                yield ("P", "b")
                yield ("C", S * 0.05)
            elif kind == "fsdp":
                L = 4
                c = self.world
                for _ in range(L):
                    yield ("K", c, 2, 1 << 26)
                    yield ("C", S * 0.22 / L)
                yield ("P", "f")
                for _ in range(L):
                    yield ("K", c, 2, 1 << 26)
                    yield ("C", S * 0.5 / L)
                    yield ("K", c, 3, 1 << 26)
                yield ("P", "b")
                yield ("C", S * 0.08)
            else:
                c = self.world
                yield ("C", S * 0.3)
                yield ("P", "f")
                yield ("C", S * 0.3)
                yield ("K", c, 1, 1 << 25)
                yield ("C", S * 0.25)
                yield ("K", c, 1, 1 << 25)
                yield ("P", "b")
                yield ("C", S * 0.05)
            yield ("E", it)
            it += 1


class RankState:
    __slots__ = ("r", "t", "gen", "calls", "done", "dead", "blocked", "steps", "cur", "tlast")

    def __init__(self, r, t):
        self.r, self.t = r, t
        self.calls, self.steps = [], []
        self.done = self.dead = self.blocked = False
        self.cur = None
        self.tlast = t


def simulate(job):
    """Discrete-event run of a job: every rank's calls with device entry / completion times."""
    rng = job.rng
    st = {r: RankState(r, job.start + rng.uniform(0.5, 1.5)) for r in range(job.W)}
    for s in st.values():
        s.gen = job.program(s.r, s)
    cseq = defaultdict(int)
    pcnt = defaultdict(int)
    inst = {}
    pend = {}
    hang = job.fault if job.fault.get("kind") == "hang" else None
    q = deque(range(job.W))
    while q:
        s = st[q.popleft()]
        r = s.r
        while True:
            try:
                op = next(s.gen)
            except StopIteration:
                s.done = True
                break
            k = op[0]
            if k == "C":
                d = op[1] * job.factor(r, s.t) * (1 + rng.gauss(0, 0.012))
                if rng.random() < 0.0015:
                    d += rng.uniform(0.03, 0.12)  # GC pause / data-loader hiccup
                s.t += max(d, 1e-5)
                continue
            if k == "B":
                s.cur = [op[1], s.t, None, None, None]
                continue
            if k == "P":
                if op[1] == "f":
                    s.cur[2] = s.t
                else:
                    s.cur[3] = s.t
                continue
            if k == "E":
                s.cur[4] = s.t
                s.steps.append(s.cur)
                continue
            if hang and r == hang["rank"] and s.t >= hang["at"]:
                s.dead = True  # stops before this call, forever
                break
            it = s.cur[0]
            if k == "K":
                c = op[1]
                seq = cseq[(r, c.idx)]
                cseq[(r, c.idx)] = seq + 1
                call = Call(r, c, op[2], seq, s.t, op[3], -1, it)
                s.calls.append(call)
                ent = inst.setdefault((c.idx, seq), [])
                ent.append(call)
                if len(ent) == len(c.members):
                    tmax = max(x.t0 for x in ent)
                    tend = tmax + c.xfer * rng.uniform(0.9, 1.1) + job.xfer_extra(c, tmax)
                    del inst[(c.idx, seq)]
                    for x in ent:
                        x.t1 = tend + rng.uniform(0, 4e-5)
                        o = st[x.rank]
                        o.t = x.t1
                        if o is not s:
                            o.blocked = False
                            q.append(x.rank)
                    continue
                s.blocked = True
                break
            else:  # send / recv
                c, peer = op[1], op[2]
                opc = 6 if k == "S" else 7
                key = (c.idx, r, peer, opc)
                seq = pcnt[key]
                pcnt[key] = seq + 1
                call = Call(r, c, opc, seq, s.t, op[3], c.crank[peer], it)
                s.calls.append(call)
                src, dst = (r, peer) if k == "S" else (peer, r)
                mk = (c.idx, src, dst, seq)
                other = pend.pop(mk, None)
                if other is not None:
                    tmax = max(call.t0, other.t0)
                    tend = tmax + c.xfer * rng.uniform(0.9, 1.1) + job.xfer_extra(c, tmax)
                    call.t1 = tend + rng.uniform(0, 4e-5)
                    other.t1 = tend + rng.uniform(0, 4e-5)
                    s.t = call.t1
                    o = st[other.rank]
                    o.t = other.t1
                    o.blocked = False
                    q.append(other.rank)
                    continue
                pend[mk] = call
                s.blocked = True
                break
    # host-enqueue: a rank whose device is blocked has the rest of its step enqueued behind it
    if job.probe == "enq":
        for s in st.values():
            if s.blocked and not s.dead and s.calls:
                last = s.calls[-1]
                h = last.t0
                for op in s.gen:
                    if op[0] == "E":
                        break
                    if op[0] == "C":
                        h += op[1] * 0.02 + 1e-4
                    elif op[0] == "K":
                        c = op[1]
                        seq = cseq[(s.r, c.idx)]
                        cseq[(s.r, c.idx)] = seq + 1
                        cl = Call(s.r, c, op[2], seq, h, op[3], -1, last.it)
                        cl.queued = True
                        cl.enq = h
                        s.calls.append(cl)
                    elif op[0] in ("S", "R"):
                        c, peer = op[1], op[2]
                        opc = 6 if op[0] == "S" else 7
                        key = (c.idx, s.r, peer, opc)
                        seq = pcnt[key]
                        pcnt[key] = seq + 1
                        cl = Call(s.r, c, opc, seq, h, op[3], c.crank[peer], last.it)
                        cl.queued = True
                        cl.enq = h
                        s.calls.append(cl)
        # enqueue times of the calls the device ran: ahead of the device, after the step's sync
        for s in st.values():
            prev = -1e18
            steps = {x[0]: x[1] for x in s.steps}
            for cl in s.calls:
                if cl.queued:
                    continue
                lo = steps.get(cl.it, cl.t0 - 0.02)
                e = max(prev + 5e-5, cl.t0 - rng.uniform(0.0005, 0.02), lo)
                cl.enq = min(e, cl.t0)
                prev = cl.enq
    for s in st.values():
        s.tlast = s.t
    return st


# --------------------------------------------------------------------------------------------
def job_messages(job, st, cap_end, out):
    """Append (ts_ns, line_dict) for every message of the job's agents and hook."""
    rng = job.rng
    f = job.fault
    t_stop = min(cap_end, job.kill if job.kill is not None else 1e18)
    stuck = f if f.get("kind") == "stuck" else None
    probe = job.probe
    pflag = {"gpu": F_GPU, "enq": F_ENQ, "gloo": 0}[probe]
    # process exit times (normal end: destroy, then exit; kill: at kill)
    exit_t = {}
    destroy_t = {}
    for r, s in st.items():
        if job.kill is not None:
            exit_t[r] = job.kill
        elif s.done:
            destroy_t[r] = s.tlast + rng.uniform(0.1, 0.3)
            exit_t[r] = destroy_t[r] + rng.uniform(0.3, 0.6)
    batches = defaultdict(list)  # (node, comm idx, flush k) -> records

    def fk(node, t):
        ph = job.flush_ph[node]
        return max(0, math.ceil((t - ph) / FLUSH - 1e-9))

    def ftime(node, k):
        return job.flush_ph[node] + k * FLUSH

    init_t = {r: st[r].calls[0].t0 - rng.uniform(0.3, 0.45) if st[r].calls else job.start + 0.2
              for r in st}
    # per (rank, comm): visible entry / observed completion times (for heartbeats)
    hbdata = {}
    for r, s in st.items():
        node = job.node_of[r]
        clk = job.clk
        # COMM_INIT
        for c in job.rank_comms[r]:
            ti = init_t[r] + rng.uniform(0, 0.05)
            batches[(node, c.idx, fk(node, ti))].append(
                (2, 0, 0, r, c.cid, 0, ns(clk(node, ti)), ns(clk(node, ti)), 0, c.crank[r], -1,
                 len(c.members), len(c.nodes)))
            if r in destroy_t and destroy_t[r] <= t_stop:
                td = destroy_t[r]
                batches[(node, c.idx, fk(node, td))].append(
                    (3, 0, 0, r, c.cid, 0, ns(clk(node, td)), ns(clk(node, td)), 0, c.crank[r], -1,
                     len(c.members), len(c.nodes)))
        coll = defaultdict(lambda: ([], []))
        p2p = defaultdict(lambda: ([], []))
        for cl in s.calls:
            te = cl.enq if probe == "enq" else cl.t0
            if te > t_stop:
                continue
            t1 = cl.t1 if (cl.t1 is not None and cl.t1 <= t_stop) else None
            if probe == "enq" and t1 is not None:
                t1o = t1 + rng.uniform(0.001, 0.01)
            elif probe == "gpu" and t1 is not None:
                t1o = t1 + rng.uniform(0.0005, 0.004)
            else:
                t1o = t1
            if t1o is not None and t1o > t_stop:
                t1o = None
            lost_at = None
            if stuck and r == stuck["rank"] and t1o is not None and t1o >= stuck["at"]:
                t1o = None
                if te + 20.0 <= min(t_stop, exit_t.get(r, 1e18)):
                    lost_at = max(te + 20.0, stuck["at"] + 0.5)
            c = cl.comm
            peer = cl.peer
            base = (1, cl.op, r, c.cid, cl.seq, cl.nbytes, c.crank[r], peer, len(c.members), 0)
            k1 = fk(node, te)
            tr = ftime(node, k1)
            if probe == "enq" or t1o is None or t1o > tr:
                if tr <= t_stop + FLUSH:
                    batches[(node, c.idx, k1)].append(
                        (1, cl.op, pflag, r, c.cid, cl.seq, ns(clk(node, te)), 0, cl.nbytes,
                         c.crank[r], peer, len(c.members), 0))
            if t1o is not None:
                t0w = te if probe != "enq" else cl.enq
                batches[(node, c.idx, fk(node, t1o))].append(
                    (1, cl.op, pflag | F_COMPLETED, r, c.cid, cl.seq, ns(clk(node, cl.t0 if probe == "gpu" else t0w)),
                     ns(clk(node, t1)), cl.nbytes, c.crank[r], peer, len(c.members), 0))
            if lost_at is not None:
                batches[(node, c.idx, fk(node, lost_at))].append(
                    (1, cl.op, pflag | F_LOST, r, c.cid, cl.seq, ns(clk(node, te)), 0, cl.nbytes,
                     c.crank[r], peer, len(c.members), 0))
            if cl.op in (6, 7):
                p2p[(c.idx, cl.peer, cl.op)][0].append(te)
                p2p[(c.idx, cl.peer, cl.op)][1].append(t1o if t1o is not None else math.inf)
            else:
                coll[c.idx][0].append(te)
                coll[c.idx][1].append(t1o if t1o is not None else math.inf)
        hbdata[r] = ({k: (np.array(v[0]), np.sort(np.array(v[1]))) for k, v in coll.items()},
                     {k: (np.array(v[0]), np.sort(np.array(v[1]))) for k, v in p2p.items()})
    # call batches
    for (node, ci, k), recs in batches.items():
        tf = ftime(node, k)
        if tf > t_stop + FLUSH + 1e-9 or tf > cap_end:
            continue
        c = job.comms[ci]
        arr = np.array(recs, dtype=REC)
        blob = b"CWB1" + np.array([1, 64], "<u2").tobytes() + np.array([len(arr), 0], "<u4").tobytes() + arr.tobytes()
        tsn = ns(job.clk(node, tf))
        out.append((tsn, {"topic": "cw.calls.v1", "key": f"{job.jid}/{c.cid:016x}", "ts_ns": tsn,
                          "value_b64": base64.b64encode(blob).decode()}))
    # heartbeats
    for node in job.nodes:
        locr = [r for r in range(job.W) if job.node_of[r] == node]
        ncomms = sorted({c.idx for r in locr for c in job.rank_comms[r]})
        t = job.hb_ph[node] + math.floor(job.start)
        while t < job.start:
            t += HB
        last_exit = max(exit_t.get(r, 1e18) for r in locr)
        while t <= cap_end:
            if t > last_exit + 3 * HB + 1e-9:
                break
            tsn = ns(job.clk(node, t))
            for ci in ncomms:
                c = job.comms[ci]
                ranks = []
                for r in locr:
                    if r not in c.crank or t < init_t[r]:
                        continue
                    ex = exit_t.get(r)
                    if ex is not None and t > ex + 3 * HB + 1e-9:
                        continue
                    if r in destroy_t and t > destroy_t[r] and not (ex is not None and t >= ex):
                        continue
                    tq = min(t, ex) if ex is not None else t
                    cd, pd = hbdata[r]
                    ent = {"rank": r}
                    a = cd.get(ci)
                    if a is not None and len(a[0]):
                        i = int(np.searchsorted(a[0], tq, "right")) - 1
                        j = int(np.searchsorted(a[1], tq, "right")) - 1
                        ent["started"], ent["completed"] = i, j
                        if i >= 0:
                            ent["t_last_start_ns"] = ns(job.clk(node, a[0][i]))
                        if j >= 0:
                            ent["t_last_end_ns"] = ns(job.clk(node, a[1][j]))
                    else:
                        ent["started"], ent["completed"] = -1, -1
                    if c.p2p:
                        pl = []
                        for (cj, peer, opc), (s0, e0) in pd.items():
                            if cj != ci:
                                continue
                            pl.append({"peer": peer, "op": "send" if opc == 6 else "recv",
                                       "started": int(np.searchsorted(s0, tq, "right")) - 1,
                                       "completed": int(np.searchsorted(e0, tq, "right")) - 1})
                        if pl:
                            ent["p2p"] = pl
                    if ex is not None and t >= ex:
                        ent["exited"] = True
                    ranks.append(ent)
                if ranks:
                    out.append((tsn, {"topic": "cw.progress.v1", "key": f"{job.jid}/{c.cid:016x}", "ts_ns": tsn,
                                      "value": {"v": 1, "job": job.jid, "node": node, "ts_ns": tsn,
                                                "comm": f"{c.cid:016x}", "ranks": ranks}}))
            t += HB * (1 + rng.uniform(-0.002, 0.002))
    # topology
    for r in range(job.W):
        node = job.node_of[r]
        ti = init_t[r] - 0.1
        tsn = ns(job.clk(node, ti))
        out.append((tsn, {"topic": "cw.topology.v1", "key": job.jid, "ts_ns": tsn,
                          "value": {"v": 1, "job": job.jid, "ts_ns": tsn, "rank": r, "world_size": job.W,
                                    "node": node, "local_rank": job.local[r],
                                    "gpu": f"GPU-{job.rng.getrandbits(48):012x}", "coords": job.coords[r]}}))
    # iteration timings
    if job.steps_msgs:
        for r, s in st.items():
            node = job.node_of[r]
            for (it, a, fe, be, e) in s.steps:
                if e is None or e + 0.002 > t_stop or fe is None or be is None:
                    continue
                tsn = ns(job.clk(node, e + 0.002))
                out.append((tsn, {"topic": "cw.steps.v1", "key": job.jid, "ts_ns": tsn,
                                  "value": {"v": 1, "job": job.jid, "rank": r, "iteration": it,
                                            "t_start_ns": ns(job.clk(node, a)), "t_end_ns": ns(job.clk(node, e)),
                                            "phases": {"forward_ms": round((fe - a) * 1e3, 2),
                                                       "backward_ms": round((be - fe) * 1e3, 2),
                                                       "optimizer_ms": round((e - be) * 1e3, 2)}}}))


# --------------------------------------------------------------------------------------------
def validate(lines):
    """Check every message against wire v1 (sections 1, 2, 4). Returns a list of problems."""
    bad = []
    need = {"cw.progress.v1": ("v", "job", "node", "ts_ns", "comm", "ranks"),
            "cw.topology.v1": ("v", "job", "ts_ns", "rank", "world_size", "node", "local_rank"),
            "cw.steps.v1": ("v", "job", "rank", "iteration", "t_start_ns", "t_end_ns")}
    for i, m in enumerate(lines):
        tp = m["topic"]
        if not isinstance(m.get("ts_ns"), int) or m["ts_ns"] <= 0:
            bad.append((i, "ts_ns"))
        if tp == "cw.calls.v1":
            job, _, comm = m["key"].partition("/")
            if len(comm) != 16 or comm != comm.lower():
                bad.append((i, "key comm"))
            b = base64.b64decode(m["value_b64"])
            if b[:4] != b"CWB1" or int.from_bytes(b[4:6], "little") != 1 or int.from_bytes(b[6:8], "little") != 64:
                bad.append((i, "header"))
            n = int.from_bytes(b[8:12], "little")
            if len(b) != 16 + 64 * n or n == 0 or b[12:16] != b"\0\0\0\0":
                bad.append((i, "count"))
                continue
            a = np.frombuffer(b[16:], REC)
            if (a["comm"] != int(comm, 16)).any():
                bad.append((i, "comm != key"))
            if not np.isin(a["kind"], [1, 2, 3]).all():
                bad.append((i, "kind"))
            calls = a[a["kind"] == 1]
            if ((calls["op"] < 1) | (calls["op"] > 11)).any():
                bad.append((i, "op"))
            if (a[a["kind"] != 1]["op"] != 0).any():
                bad.append((i, "op of init"))
            if ((a["comm_rank"] < 0) | (a["comm_rank"] >= a["nranks"].astype(np.int64))).any():
                bad.append((i, "comm_rank"))
            comp = calls[(calls["flags"] & F_COMPLETED) != 0]
            if (comp["t_end"] < comp["t_start"]).any():
                bad.append((i, "t_end < t_start"))
            if (calls[(calls["flags"] & F_COMPLETED) == 0]["t_end"] != 0).any():
                bad.append((i, "t_end without COMPLETED"))
            if (a["t_start"] <= 0).any():
                bad.append((i, "t_start"))
            pp = calls[np.isin(calls["op"], [6, 7])]
            if ((pp["peer"] < 0) | (pp["peer"] >= pp["nranks"].astype(np.int64))).any():
                bad.append((i, "peer"))
            if (calls[~np.isin(calls["op"], [4, 5, 6, 7, 10, 11])]["peer"] != -1).any():
                bad.append((i, "peer of collective"))
            if ((a["flags"] & ~np.uint16(31)) != 0).any():
                bad.append((i, "flags"))
        elif tp in need:
            v = m["value"]
            for k in need[tp]:
                if k not in v:
                    bad.append((i, f"{tp} lacks {k}"))
            if v.get("job") != m["key"].split("/")[0]:
                bad.append((i, "job != key"))
            if tp == "cw.progress.v1":
                if m["key"].split("/")[1] != v["comm"]:
                    bad.append((i, "comm != key"))
                for e in v["ranks"]:
                    if not all(k in e for k in ("rank", "started", "completed")) or e["completed"] > e["started"]:
                        bad.append((i, "progress rank"))
        else:
            bad.append((i, f"topic {tp}"))
        if len(bad) > 20:
            break
    return bad


# --------------------------------------------------------------------------------------------
def rand_layout(rng, W_choices=(8, 16, 24, 32, 48, 64)):
    k = rng.random()
    if k < 0.5:
        W = rng.choice(W_choices)
        tp = rng.choice([t for t in (2, 4, 8) if W % t == 0])
        pps = [p for p in (1, 2, 4) if W % (tp * p) == 0 and W // (tp * p) >= 1]
        pp = rng.choice(pps)
        return ("megatron", tp, pp, W // (tp * pp))
    if k < 0.8:
        return ("fsdp", rng.choice([8, 16, 32]))
    return ("ddp", rng.choice([8, 12, 16]))


def probe_for(rng, layout):
    if layout[0] == "ddp":
        return "gloo"
    return rng.choice(["gpu", "gpu", "enq"])


def step_for(rng, layout):
    if layout[0] == "ddp":
        return round(rng.uniform(0.3, 1.2), 2)
    if layout[0] == "megatron" and layout[2] >= 4:
        return round(rng.uniform(2.0, 8.0), 2)
    return round(rng.uniform(0.5, 5.0), 2)


class NodePool:
    def __init__(self):
        self.n = 0

    def take(self, k):
        out = [f"gpu-{self.n + i:04d}" for i in range(k)]
        self.n += k
        return out


def need_nodes(layout):
    W = layout[1] if layout[0] != "megatron" else layout[1] * layout[2] * layout[3]
    return math.ceil(W / (4 if layout[0] == "ddp" else 8))


def truth_entry(job, kind, culprits=(), onset=None, extra=None):
    e = {"job": job.jid, "run": job.name, "kind": kind, "layout": list(job.layout), "probe": job.probe,
         "ranks": job.W, "step_s": job.step_s, "culprits": list(culprits),
         "victims": [r for r in range(job.W) if r not in culprits] if culprits else [],
         "onset_ns": job.job_clock_ns(onset, culprits[0] if culprits else 0) if onset is not None else None,
         "start_ns": job.job_clock_ns(job.start),
         "clock_offset_s": round(sum(job.noff.values()) / len(job.noff), 3),
         "nodes": job.nodes}
    if extra:
        e.update(extra)
    return e


def build_jobs_fleet(rng):
    pool = NodePool()
    jobs, truths = [], []
    # fixed faulty jobs first (ids stable for d_isolation)
    specs = []
    specs.append(dict(jid="fleet-hang", layout=("megatron", 4, 2, 4), probe="gpu", step=1.6, steps=True,
                      fault={"kind": "hang", "rank": 13, "at": 52.0}))
    specs.append(dict(jid="fleet-slow", layout=("fsdp", 16), probe="gpu", step=1.2, steps=True,
                      fault={"kind": "slow", "rank": 6, "at": 45.0, "factor": 1.5}))
    specs.append(dict(jid="fleet-stuck", layout=("megatron", 8, 1, 4), probe="enq", step=2.0, steps=False,
                      fault={"kind": "stuck", "rank": 19, "at": 50.0}))
    specs.append(dict(jid="fleet-ends", layout=("ddp", 8), probe="gloo", step=0.6, steps=True, end=48.0))
    for i in range(36):
        lay = rand_layout(rng)
        specs.append(dict(jid=f"fleet-{i:02d}", layout=lay, probe=probe_for(rng, lay), step=step_for(rng, lay),
                          steps=rng.random() < 0.4))
    offs = {"fleet-07": 45.0, "fleet-21": -30.0}
    for sp in specs:
        dur = rng.uniform(60, 120)
        start = rng.uniform(0, 4)
        end = sp.get("end", start + dur)
        if sp.get("fault"):
            end = max(end, 140.0)  # faulty jobs run past the capture's end
        off = offs.get(sp["jid"], rng.uniform(-0.04, 0.04))
        j = Job(random.Random(rng.getrandbits(64)), sp["jid"], sp["layout"], sp["probe"], sp["step"], start, end,
                pool.take(need_nodes(sp["layout"])), off, drift_ppm=rng.uniform(-20, 20), steps_msgs=sp["steps"],
                fault=sp.get("fault"))
        f = sp.get("fault")
        if f and f["kind"] == "hang":
            t = truth_entry(j, "hang", [f["rank"]], f["at"])
        elif f and f["kind"] == "slow":
            t = truth_entry(j, "slow_rank", [f["rank"]], f["at"], {"factor": f["factor"]})
        elif f and f["kind"] == "stuck":
            t = truth_entry(j, "stuck_completion", [f["rank"]], f["at"])
        elif "end" in sp or end < 112.0:
            t = truth_entry(j, "job_end", [], None, {"end_ns": j.job_clock_ns(end)})
        else:
            t = truth_entry(j, "none")
        jobs.append(j)
        truths.append(t)
    return jobs, truths, 115.0


def build_churn(rng):
    pool = NodePool()
    jobs, truths = [], []
    cap = 170.0
    for i in range(22):
        lay = rand_layout(rng, (8, 16, 32))
        start = rng.uniform(0, 100)
        ends_early = rng.random() < 0.35
        end = start + (rng.uniform(35, 60) if ends_early else cap)
        j = Job(random.Random(rng.getrandbits(64)), f"churn-{i:02d}", lay, probe_for(rng, lay), step_for(rng, lay),
                start, end, pool.take(need_nodes(lay)), rng.uniform(-0.03, 0.03), steps_msgs=rng.random() < 0.4)
        jobs.append(j)
        if end < cap - 10:
            truths.append(truth_entry(j, "job_end", [], None, {"end_ns": j.job_clock_ns(end)}))
        else:
            truths.append(truth_entry(j, "none"))
    # a job id reused: first run ends at ~55 s, a new run (other world size, fresh comms) at 70 s
    r1 = Job(random.Random(rng.getrandbits(64)), "team-a.pretrain", ("megatron", 4, 2, 2), "gpu", 1.5, 2.0, 55.0,
             pool.take(2), 0.01, steps_msgs=True, name="team-a.pretrain#1")
    r2 = Job(random.Random(rng.getrandbits(64)), "team-a.pretrain", ("megatron", 4, 2, 4), "gpu", 1.8, 70.0, cap,
             pool.take(4), 0.02, steps_msgs=True, name="team-a.pretrain#2")
    jobs += [r1, r2]
    truths.append(truth_entry(r1, "job_end", [], None, {"end_ns": r1.job_clock_ns(55.0),
                                                        "next_run_start_ns": r2.job_clock_ns(70.0)}))
    truths.append(truth_entry(r2, "none"))
    # preempted while a slow-rank incident is open; its nodes go to a new job that hangs a minute later
    pn = pool.take(4)
    p = Job(random.Random(rng.getrandbits(64)), "team-b.sft", ("megatron", 8, 1, 4), "gpu", 1.0, 1.0, cap, pn,
            -0.02, steps_msgs=True, fault={"kind": "slow", "rank": 10, "at": 35.0, "factor": 1.5}, kill=75.0)
    jobs.append(p)
    truths.append(truth_entry(p, "slow_rank", [10], 35.0, {"factor": 1.5, "preempted_ns": p.job_clock_ns(75.0)}))
    n = Job(random.Random(rng.getrandbits(64)), "team-c.finetune", ("fsdp", 32), "enq", 1.4, 85.0, cap, pn,
            0.015, steps_msgs=False, fault={"kind": "hang", "rank": 21, "at": 145.0})
    jobs.append(n)
    truths.append(truth_entry(n, "hang", [21], 145.0, {"placed_on_preempted_nodes": True}))
    return jobs, truths, cap


def build_skew(rng):
    pool = NodePool()
    jobs, truths = [], []
    offs = np.linspace(-90, 90, 12)
    for i, off in enumerate(offs):
        lay = ("megatron", 4, 2, 2) if i in (0, 11) else rand_layout(rng, (8, 16, 32))
        probe = "gpu" if i in (0, 11) else probe_for(rng, lay)
        step = 1.3 if i in (0, 11) else step_for(rng, lay)
        fault = None
        if i == 11:
            fault = {"kind": "hang", "rank": 6, "at": 58.0}
        elif i == 0:
            fault = {"kind": "slow", "rank": 9, "at": 45.0, "factor": 1.3}
        drift = rng.choice([-1, 1]) * rng.uniform(10, 80)
        j = Job(random.Random(rng.getrandbits(64)), f"skew-{i:02d}", lay, probe, step, rng.uniform(0, 3), 110.0,
                pool.take(need_nodes(lay)), float(off), drift_ppm=drift, steps_msgs=(i % 3 == 0), fault=fault)
        jobs.append(j)
        if i == 11:
            truths.append(truth_entry(j, "hang", [6], 58.0))
        elif i == 0:
            truths.append(truth_entry(j, "slow_rank", [9], 45.0, {"factor": 1.3}))
        else:
            truths.append(truth_entry(j, "none"))
    return jobs, truths, 100.0


def build_noisy(rng):
    pool = NodePool()
    jobs, truths = [], []
    for i in range(20):
        lay = rand_layout(rng, (16, 24, 32, 48))
        probe = probe_for(rng, lay)
        step = step_for(rng, lay)
        fault = None
        if i == 0:
            lay, probe, step = ("megatron", 2, 2, 4), "gpu", 1.0
            fault = {"kind": "slow", "rank": 5, "at": 45.0, "until": 72.0, "factor": 1.6}
        # congestion: inter-node transfers longer by 10-20 % of the step, 40-70 s
        frac = rng.uniform(0.10, 0.20)
        j = Job(random.Random(rng.getrandbits(64)), f"noisy-{i:02d}", lay, probe, step, rng.uniform(0, 3), 110.0,
                pool.take(need_nodes(lay)), rng.uniform(-0.03, 0.03), steps_msgs=rng.random() < 0.5, fault=fault)
        # every inter-node transfer longer, ~frac of the step in all
        n_inter = _calls_per_step_inter(j)
        if n_inter:
            j.congestion = ((40.0, 70.0, frac * step / n_inter),)
        jobs.append(j)
        if i == 0:
            truths.append(truth_entry(j, "slow_rank", [5], 45.0, {"factor": 1.6, "congestion": [40, 70]}))
        else:
            truths.append(truth_entry(j, "none", extra={"congestion": [40, 70], "multinode": len(j.nodes) > 1}))
    return jobs, truths, 100.0


def _calls_per_step_inter(j):
    """The most inter-node comm calls any rank makes in one step."""
    class D:
        t = -1.0
    j.n_iter = 1
    best = 0
    for r in range(j.W):
        n = 0
        for op in j.program(r, D):
            if op[0] == "E":
                break
            if op[0] in ("K", "S", "R") and len(op[1].nodes) >= 2:
                n += 1
        best = max(best, n)
    return best


def render(jobs, cap_end):
    out = []
    for j in jobs:
        # every rank runs the same number of iterations (a rank deciding on its own clock would leave
        # its peers waiting in a collective it never enters)
        if j.end < cap_end and j.kill is None:
            j.n_iter = max(3, int((j.end - j.start) / j.step_s))
        else:
            j.n_iter = int(math.ceil((min(j.end, cap_end, j.kill if j.kill is not None else 1e18) + 3.0 - j.start)
                                     / (0.8 * j.step_s))) + 1
        st = simulate(j)
        job_messages(j, st, cap_end, out)
    out.sort(key=lambda x: x[0])
    return [m for _, m in out]


def write(outdir, name, lines, truth):
    bad = validate(lines)
    if bad:
        raise SystemExit(f"{name}: capture fails the spec check: {bad[:5]}")
    p = os.path.join(outdir, name + ".cwcap")
    with open(p, "w") as f:
        for m in lines:
            f.write(json.dumps(m, separators=(",", ":")))
            f.write("\n")
    with open(os.path.join(outdir, name + ".truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
    nrec = sum((len(base64.b64decode(m["value_b64"])) - 16) // 64 for m in lines if "value_b64" in m)
    print(f"{name:36s} {len(lines):8d} messages {nrec:9d} records {os.path.getsize(p) / 1e6:7.1f} MB "
          f"{len(truth['jobs'])} job runs")


SCEN = ["a_fleet40", "b_churn", "c_skew", "d_isolation", "e_noisy_neighbours"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("prefixes", nargs="*")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    want = [s for s in SCEN if not a.prefixes or any(s.startswith(p) for p in a.prefixes)]

    def rng_for(name):
        return random.Random(f"{a.seed}/{name}")

    if "a_fleet40" in want or "d_isolation" in want:
        jobs, truths, cap = build_jobs_fleet(rng_for("a_fleet40"))
        lines = render(jobs, cap)
        if "a_fleet40" in want:
            write(a.out, "a_fleet40", lines, {"scenario": "a_fleet40", "seed": a.seed, "jobs": truths})
        if "d_isolation" in want:
            for t in truths:
                if t["kind"] in ("hang", "slow_rank", "stuck_completion"):
                    sub = [m for m in lines if m["key"].split("/")[0] == t["job"]]
                    nm = "d_isolation_" + t["job"].replace("fleet-", "")
                    write(a.out, nm, sub, {"scenario": nm, "seed": a.seed, "isolation_of": "a_fleet40",
                                           "jobs": [t]})
    for name, fn in (("b_churn", build_churn), ("c_skew", build_skew), ("e_noisy_neighbours", build_noisy)):
        if name in want:
            jobs, truths, cap = fn(rng_for(name))
            write(a.out, name, render(jobs, cap), {"scenario": name, "seed": a.seed, "jobs": truths})


if __name__ == "__main__":
    main()
