#!/usr/bin/env python3
"""infra/: the fourteenth independent traffic generator - correlated infrastructure faults at cluster scale.

Written from the wire spec (shared/spec/wire-v1.md), DOMAIN.md, the READMEs, run_scored.sh and the output
format of rl/score.py only; it shares no code or assumption with the detector.

    gen.py --out DIR --seed N [PREFIX ...]   -> DIR/NAME.cwcap, DIR/NAME.truth.json (one job per capture)

Theme: faults whose root is a set of machines, or no machine at all, as large-fleet reports describe them
(Llama 3's 54-day run: 419 interruptions; top-of-rack switches, power, cooling, fabric congestion, host
maintenance). Megatron-style jobs: TP 8 inside a node, PP 2-4, DP across nodes, 8 GPUs per node, 4 nodes
per rack, rank = dp*PP*TP + pp*TP + tp, node = rank // 8, rack = node // 4. Most jobs are recorded by the
NCCL plugin (GPU_TIMED), some by a host-enqueue hook (ENQUEUED: entry = host enqueue, completion = observed
CUDA-event completion) and one gloo DDP job (host-blocking, no flag). Node agents batch records every
140-200 ms (per node) and heartbeat every 1 s; node clocks are a few ms apart and drift 10 ppm; hardware
samples every 5 s per GPU and per node (InfiniBand counters).

The model and its simplifications:

* Iteration = GPipe-ordered pipeline (all forwards of M micro-batches, then all backwards), each micro-batch
  phase one recorded TP all-reduce between two compute halves (one recorded TP call stands for a layer
  block), blocking send/recv between neighbour stages (the send completes when the receiver posted its recv
  and the transfer is done), then 2 data-parallel all-reduce buckets (not overlapped with backward), a
  grad-norm all-reduce on the model-parallel group (TP x PP ranks of a replica), the optimizer. About 10-24
  calls per rank per iteration, far fewer than a real job's 90-220/s (a size budget).
* Collective completion = last member's entry + transfer; members complete within ~50 us of each other.
  Transfer noise 3 %; compute noise per rank-iteration 2 %, per iteration 2 %, per segment 1 %, GC /
  data-loader stalls of 20-120 ms with probability 0.2 % per rank-iteration; the last stage computes 8 %
  more than the others (loss, embeddings) by design.
* Network faults act on the wire part (transfer) of inter-node calls only: a call is "inter-node" when its
  members span nodes (TP groups are inside a node: NVLink, never affected). A degraded top-of-rack switch
  slows every inter-node transfer with an end in its rack (intra-rack node-to-node traffic goes through it
  too), fabric congestion every inter-node transfer. A dead link makes every transfer touching it that
  would finish after the death never finish.
* A NIC serves 2 GPUs (4 NICs per node) in the NIC-death jobs, 1 GPU (8 per node) elsewhere; a dying NIC
  shows InfiniBand symbol errors for ~15 s, then its counters freeze and its port reports DOWN (`ib`
  optional fields `port_state`, `link_downed`).
* The plugin rewrites a call's ring slot when the call completes, so a GPU-timed call's entry record reaches
  the agent only when the call was still open at one of the agent's reads (the completed record carries
  the entry time too); the hook (host-enqueue, gloo) writes both records every time.
* Device times are used for phases of cw.steps.v1 (as if Megatron's timers synchronised); forward_ms =
  iteration start to last forward, backward_ms includes the data-parallel buckets, optimizer_ms the
  grad-norm all-reduce and the optimizer.
* Host-enqueue: the host enqueues an iteration's calls ahead of the device (launch cost 10 % of the
  compute it launches) and synchronises on the grad norm at the end of each iteration; the device is never
  launch-bound (the host time is clamped to the device start).
* A rank that "stops" stops on its device at the given time: it enters no further call (in no call).
* Clock steps (NTP) apply to every timestamp the node writes, message ts_ns included (Kafka CreateTime).
* A rack whose switch dies: its agents' messages after the death never reach the broker (no message from
  those nodes after it); its ranks are isolated.
* A drained node's ranks finish their iteration and exit cleanly (COMM_DESTROY on each comm, heartbeats
  say `exited` for 3 periods, then the node goes down); the launcher tears the rest of the job down 2.5 s
  later (pending calls COMPLETION_LOST, COMM_DESTROY, `exited`).
"""

from __future__ import annotations

import argparse
import base64
import json
import struct
import sys
import time
from pathlib import Path

import numpy as np

REC = np.dtype([("kind", "u1"), ("op", "u1"), ("flags", "<u2"), ("rank", "<i4"), ("comm", "<u8"),
                ("seq", "<u8"), ("t_start_ns", "<i8"), ("t_end_ns", "<i8"), ("bytes", "<u8"),
                ("comm_rank", "<i4"), ("peer", "<i4"), ("nranks", "<u4"), ("aux", "<u4")])
assert REC.itemsize == 64
OFFS = {"kind": 0, "op": 1, "flags": 2, "rank": 4, "comm": 8, "seq": 16, "t_start_ns": 24, "t_end_ns": 32,
        "bytes": 40, "comm_rank": 48, "peer": 52, "nranks": 56, "aux": 60}
assert all(REC.fields[k][1] == v for k, v in OFFS.items())

CALL, INIT, DESTROY = 1, 2, 3
ALLREDUCE, SEND, RECV = 1, 6, 7
F_COMPLETED, F_GPU, F_GRAPH, F_ENQ, F_LOST = 1, 2, 4, 8, 16
EPOCH = 1767225600 * 10**9
GPN = 8          # GPUs per node
NPR = 4          # nodes per rack
TOL = 1e-9


# ----------------------------------------------------------------------------------------------- scenarios

def scenarios():
    """name -> config. Onsets in simulated seconds from the job's start (t = 0 true time)."""
    S = []

    def add(**kw):
        kw.setdefault("M", kw["PP"])
        kw.setdefault("probe", "gpu")
        kw.setdefault("steps", False)
        kw.setdefault("nics", 8)
        kw.setdefault("faults", [])
        S.append(kw)

    # 1. healthy controls
    add(name="h1-healthy-512", TP=8, PP=2, DP=32, step=2.0, dur=60, steps=True, kind="control",
        desc="healthy, 512 ranks (TP8 x PP2 x DP32, 64 nodes, 16 racks), GPU-timed, steps")
    add(name="h2-healthy-96", TP=8, PP=2, DP=6, step=0.6, dur=60, kind="control",
        desc="healthy, 96 ranks, 0.6 s steps, plugin only (no steps topic)")
    add(name="h3-healthy-enq-64", TP=8, PP=2, DP=4, step=0.6, dur=60, probe="enq", steps=True, kind="control",
        desc="healthy, 64 ranks, host-enqueue hook, 0.6 s steps")
    # 2. fabric-wide congestion
    add(name="c1-fabric-congestion", TP=8, PP=2, DP=6, step=1.2, dur=70, kind="no_culprit",
        faults=[("link", "all", 35.0, 1.4)],
        desc="every inter-node transfer 1.4x from 35 s, all ranks alike")
    # 3. top-of-rack switch degraded
    add(name="t1-tor-degraded", TP=8, PP=4, DP=3, step=1.2, dur=75, kind="link",
        faults=[("link", ("rack", 1), 38.0, 1.5)],
        desc="rack 1's ToR: every inter-node transfer with an end in its 4 nodes 1.5x from 38 s")
    # 4. a rack power-capped
    add(name="p1-rack-powercap", TP=8, PP=2, DP=6, step=1.0, dur=75, steps=True, kind="slow",
        faults=[("compute", ("rack", 1), 40.0, 1.3, None, "power")],
        desc="rack 1's 32 GPUs compute 1.3x from 40 s (power cap, NVML shows it)")
    # 5. a rack switch dies
    add(name="d1-rack-switch-dies", TP=8, PP=2, DP=6, step=1.0, dur=70, kind="hang",
        faults=[("linkdead", ("rack", 2), 40.0), ("silent", ("rack", 2), 40.0)],
        desc="rack 2's switch dies at 40 s: its 32 ranks cut off, its 4 agents silent")
    # 6. host maintenance drain
    add(name="m1-node-drain", TP=8, PP=2, DP=4, step=0.8, dur=70, kind="ending",
        faults=[("drain", ("node", 5), 55.0)],
        desc="node 5 drained at 55 s: its 8 ranks exit cleanly, job torn down 2.5 s later")
    # 7. cooling fault
    add(name="k1-cooling-ramp", TP=8, PP=2, DP=6, step=1.5, dur=100, steps=True, kind="slow",
        faults=[("compute", ("node", 6), 30.0, 1.6, 90.0, "thermal")],
        desc="node 6's 8 GPUs ramp 1.0 -> 1.6x over 30-90 s (thermal, NVML clocks fall)")
    # 8. two unrelated faults
    add(name="x1-two-faults", TP=8, PP=2, DP=6, step=1.0, dur=85, kind="multi",
        faults=[("compute", ("ranks", [21]), 25.0, 1.5, None, None), ("stop", ("ranks", [83]), 55.0)],
        desc="rank 21 (rack 0) 1.5x from 25 s; rank 83 (rack 2) stops at 55 s")
    # 9. rack-wide NTP step
    add(name="n1-ntp-rack-step", TP=8, PP=2, DP=6, step=1.0, dur=70, steps=True, kind="control",
        faults=[("ntp", ("rack", 2), 40.0, 2.0)],
        desc="rack 2's 4 node clocks step 2 s forward at 40 s, job healthy")
    # 10. NIC death in a DP all-reduce
    add(name="l1-nic-dies-dp-hang", TP=8, PP=2, DP=6, step=1.0, dur=65, nics=4, kind="hang",
        faults=[("nicdie", 9, 1, 40.0)],
        desc="node 9's NIC mlx5_1 (GPUs 2,3) dies inside a data-parallel all-reduce bucket near 40 s")
    # 11. straggler hidden by a power-capped rack
    add(name="s1-straggler-in-capped-rack", TP=8, PP=2, DP=6, step=1.0, dur=75, steps=True, kind="multi",
        faults=[("compute", ("rack", 2), 40.0, 1.3, None, "power"),
                ("compute", ("ranks", [77]), 40.0, 1.5, None, None)],
        desc="rack 2 (ranks 64-95) 1.3x from 40 s, rank 77 inside it a further 1.5x (1.95x)")
    # 12. host-enqueue and gloo variants
    add(name="e1-enq-rack-switch-dies", TP=8, PP=2, DP=6, step=0.8, dur=70, probe="enq", kind="hang",
        faults=[("linkdead", ("rack", 1), 40.0), ("silent", ("rack", 1), 40.0)],
        desc="host-enqueue: rack 1's switch dies at 40 s, agents silent")
    add(name="e2-enq-rack-powercap", TP=8, PP=4, DP=3, step=1.5, dur=75, probe="enq", steps=True, kind="slow",
        faults=[("compute", ("rack", 2), 40.0, 1.3, None, "power")],
        desc="host-enqueue: rack 2 (one whole replica) 1.3x from 40 s")
    add(name="e3-enq-nic-dies-dp-hang", TP=8, PP=2, DP=4, step=0.8, dur=65, probe="enq", nics=4, kind="hang",
        faults=[("nicdie", 5, 2, 40.0)],
        desc="host-enqueue: node 5's NIC mlx5_2 (GPUs 4,5) dies inside a data-parallel bucket near 40 s")
    add(name="g1-gloo-two-faults", TP=1, PP=1, DP=64, M=1, step=0.5, dur=90, probe="gloo", steps=True,
        kind="multi", faults=[("compute", ("ranks", [12]), 30.0, 1.5, None, None),
                              ("stop", ("ranks", [45]), 55.0)],
        desc="gloo DDP 64 ranks: rank 12 (rack 0) 1.5x from 30 s; rank 45 (rack 1) stops at 55 s")
    return S


# ----------------------------------------------------------------------------------------------- simulator

class Job:
    def __init__(self, cfg, seed):
        self.cfg = cfg
        self.rng = np.random.default_rng(seed)
        self.TP, self.PP, self.DP, self.M = cfg["TP"], cfg["PP"], cfg["DP"], cfg["M"]
        self.R = self.TP * self.PP * self.DP
        self.grid = np.arange(self.R).reshape(self.DP, self.PP, self.TP)
        self.node_of = np.arange(self.R) // GPN
        self.nnodes = (self.R + GPN - 1) // GPN
        self.job = "infra-" + cfg["name"].split("-")[0]
        self.probe = cfg["probe"]
        rng = self.rng
        # clocks: offset a few ms, drift 10 ppm
        self.clk_off = rng.uniform(-0.004, 0.004, self.nnodes)
        self.clk_drift = rng.uniform(-10e-6, 10e-6, self.nnodes)
        self.clk_step = []          # (nodes set, T, step)
        self.silent = {}            # node -> T (nothing produced after)
        # timing
        S = cfg["step"]
        self.dp_x = 0.05 * S
        self.mp_x = 0.0004
        self.tp_x = 0.0015
        self.p2p_x = 0.003
        self.opt = 0.04 * S
        self.f = 0.83 * S / (3.0 * (self.M + self.PP - 1))
        self.nb = 2 if self.TP > 1 else 4
        self.comms = []             # list of dict(id, members(list of ranks), kind)
        self._mkcomms()
        self.events = []
        self.compute_faults, self.stop_faults, self.link_faults = [], [], []
        self.drain = None
        for fl in cfg["faults"]:
            self._add_fault(fl)

    # -- structure
    def ranks_of(self, sel):
        if sel == "all":
            return list(range(self.R))
        k, v = sel
        if k == "rack":
            return [r for r in range(self.R) if self.node_of[r] // NPR == v]
        if k == "node":
            return [r for r in range(self.R) if self.node_of[r] == v]
        return list(v)

    def nodes_of(self, ranks):
        return sorted({int(self.node_of[r]) for r in ranks})

    def node_name(self, n):
        return f"{self.cfg['name'][:2]}-r{n // NPR:02d}n{n % NPR}"

    def _newcomm(self, members, kind):
        cid = int(self.rng.integers(1, 2**63))
        self.comms.append({"id": cid, "members": [int(m) for m in members], "kind": kind})
        return len(self.comms) - 1

    def _mkcomms(self):
        DP, PP, TP = self.DP, self.PP, self.TP
        g = self.grid
        self.tp_comm = np.full((DP, PP), -1)
        self.dp_comm = np.full((PP, TP), -1)
        self.pp_comm = np.full((DP, TP), -1)
        self.mp_comm = np.full(DP, -1)
        if TP > 1:
            for d in range(DP):
                for p in range(PP):
                    self.tp_comm[d, p] = self._newcomm(g[d, p, :], "tp")
        for p in range(PP):
            for t in range(TP):
                self.dp_comm[p, t] = self._newcomm(g[:, p, t], "dp")
        if PP > 1:
            for d in range(DP):
                for t in range(TP):
                    self.pp_comm[d, t] = self._newcomm(g[d, :, t], "pp")
        if TP * PP > 1:
            for d in range(DP):
                self.mp_comm[d] = self._newcomm(g[d].ravel(), "mp")

    def _add_fault(self, fl):
        kind = fl[0]
        if kind == "compute":
            _, sel, onset, fac, ramp_end, hw = fl
            mask = np.isin(self.grid, self.ranks_of(sel))
            self.compute_faults.append(dict(mask=mask, onset=onset, fac=fac, ramp_end=ramp_end, hw=hw,
                                            ranks=self.ranks_of(sel)))
        elif kind == "stop":
            _, sel, T = fl
            self.stop_faults.append(dict(mask=np.isin(self.grid, self.ranks_of(sel)), T=T))
        elif kind == "link":
            _, sel, onset, fac = fl
            self.link_faults.append(dict(ranks=set(self.ranks_of(sel)), onset=onset, fac=fac, dead=False))
        elif kind == "linkdead":
            _, sel, T = fl
            self.link_faults.append(dict(ranks=set(self.ranks_of(sel)), onset=T, fac=None, dead=True))
        elif kind == "silent":
            _, sel, T = fl
            for n in self.nodes_of(self.ranks_of(sel)):
                self.silent[n] = T
        elif kind == "ntp":
            _, sel, T, step = fl
            self.clk_step.append((set(self.nodes_of(self.ranks_of(sel))), T, step))
        elif kind == "drain":
            _, sel, T = fl
            self.drain = dict(ranks=self.ranks_of(sel), T=T, exit=None, teardown=None)
        elif kind == "nicdie":
            _, node, nic, T = fl
            gpn = GPN // self.cfg["nics"]
            ranks = [node * GPN + nic * gpn + i for i in range(gpn)]
            self.nic = dict(node=node, nic=nic, ranks=ranks, T=T)
            self.link_faults.append(dict(ranks=set(ranks), onset=T, fac=None, dead=True))

    def _touch(self, members_arr):
        """members_arr: (..., k) ranks of each group -> list of bool arrays (...), one per link fault;
        only groups spanning nodes count."""
        nodes = self.node_of[members_arr]
        inter = (nodes != nodes[..., :1]).any(axis=-1)
        out = []
        for lf in self.link_faults:
            hit = np.isin(members_arr, list(lf["ranks"])).any(axis=-1)
            out.append(hit & inter)
        return out

    def clock(self, node, t):
        """true seconds -> node clock seconds (vectorised over t)."""
        c = t + self.clk_off[node] + self.clk_drift[node] * t
        for nodes, T, st in self.clk_step:
            if node in nodes:
                c = c + np.where(t >= T, st, 0.0)
        return c

    # -- timing helpers
    def cfac(self, sl, t):
        f = np.ones(np.shape(t))
        for cf in self.compute_faults:
            m = cf["mask"][sl]
            if cf["ramp_end"] is None:
                g = np.where(t >= cf["onset"], cf["fac"], 1.0)
            else:
                x = np.clip((t - cf["onset"]) / (cf["ramp_end"] - cf["onset"]), 0.0, 1.0)
                g = 1.0 + (cf["fac"] - 1.0) * x
            f = np.where(m, f * g, f)
        return f

    def seg(self, sl, start, nominal, extra=0.0):
        noise = self.rng.normal(1.0, 0.01, np.shape(start)) * self.it_noise[sl] * self.g_noise
        end = start + nominal * noise * self.cfac(sl, start) + extra
        for sf in self.stop_faults:
            m = sf["mask"][sl]
            end = np.where(m & (end > sf["T"]), np.inf, end)
        self.hstate[sl] = self.hstate[sl] + 0.10 * nominal
        return end

    def xfer(self, start, base, touches):
        d = base * self.rng.normal(1.0, 0.03, np.shape(start)).clip(0.85, 1.2)
        done = start + d
        for lf, tm in zip(self.link_faults, touches):
            if lf["dead"]:
                continue
            done = np.where(tm & (start >= lf["onset"]), start + d * lf["fac"], done)
        for lf, tm in zip(self.link_faults, touches):
            if lf["dead"]:
                done = np.where(tm & (done > lf["onset"]), np.inf, done)
        return done

    def host(self, sl, dev_entry):
        self.hstate[sl] = self.hstate[sl] + 0.00005
        return np.minimum(self.hstate[sl], dev_entry)

    def emit(self, ranks, comm, op, seq, t0, t1, h, nbytes, crank, peer, nranks):
        shp = np.shape(ranks)
        b = lambda x, dt: np.broadcast_to(np.asarray(x, dtype=dt), shp).ravel()
        self.events.append(dict(rank=b(ranks, np.int64), comm=b(comm, np.int64), op=b(op, np.int64),
                                seq=b(seq, np.int64), t0=b(t0, float), t1=b(t1, float), h=b(h, float),
                                nbytes=b(nbytes, np.int64), crank=b(crank, np.int64), peer=b(peer, np.int64),
                                nranks=b(nranks, np.int64)))

    # -- the run
    def run(self):
        DP, PP, TP, M = self.DP, self.PP, self.TP, self.M
        g = self.grid
        rng = self.rng
        D = self.cfg["dur"]
        ready = rng.uniform(0.0, 0.02, (DP, PP, TP))
        self.hstate = ready.copy()
        # touches per group type
        t_dp = self._touch(np.transpose(g, (1, 2, 0)))                      # (PP,TP)
        t_mp = self._touch(g.reshape(DP, -1))                               # (DP,)
        t_pp = [self._touch(np.stack([g[:, p, :], g[:, p + 1, :]], -1)) for p in range(PP - 1)]  # (DP,TP)
        t_tp = self._touch(g)                                               # (DP,PP) (never inter-node)
        tp_seq = dp_seq = mp_seq = 0
        p2p = {}
        self.iters = []                                                     # per iteration dict of arrays

        def pseq(p, peer, op):
            k = (p, peer, op)
            v = p2p.get(k, 0)
            p2p[k] = v + 1
            return v

        stage_w = np.ones(PP)
        stage_w[-1] = 1.08
        it = 0
        while it < 2000:
            fin = ready[np.isfinite(ready)]
            if fin.size == 0 or fin.min() > D:
                break
            it_start = ready.copy()
            self.it_noise = rng.normal(1.0, 0.02, (DP, PP, TP)).clip(0.9, 1.1)
            self.g_noise = float(np.clip(rng.normal(1.0, 0.02), 0.93, 1.07))
            stall = np.where(rng.random((DP, PP, TP)) < 0.002, rng.uniform(0.02, 0.12, (DP, PP, TP)), 0.0)
            send_enter = {}
            # ---------------- forward
            for m in range(M):
                for p in range(PP):
                    sl = (slice(None), p, slice(None))
                    if p > 0:
                        r_ent, s_ent = ready[:, p, :], send_enter[p - 1]
                        done = self.xfer(np.maximum(r_ent, s_ent), self.p2p_x, t_pp[p - 1])
                        hr = self.host(sl, r_ent)
                        hs = self.host((slice(None), p - 1, slice(None)), s_ent)
                        self.emit(g[:, p, :], self.pp_comm, RECV, pseq(p, p - 1, RECV), r_ent,
                                  done + rng.uniform(0, 5e-5, r_ent.shape), hr, 8 << 20, p, p - 1, PP)
                        self.emit(g[:, p - 1, :], self.pp_comm, SEND, pseq(p - 1, p, SEND), s_ent,
                                  done + rng.uniform(0, 5e-5, r_ent.shape), hs, 8 << 20, p - 1, p, PP)
                        ready[:, p - 1, :] = done
                        ready[:, p, :] = done
                    nom = self.f * 0.5 * stage_w[p]
                    a = self.seg(sl, ready[:, p, :], nom, stall[:, p, :] if m == 0 else 0.0)
                    if TP > 1:
                        st = a.max(axis=1)                                   # (DP,)
                        done = self.xfer(st, self.tp_x, [x[:, p] for x in t_tp])
                        h = self.host(sl, a)
                        self.emit(g[:, p, :], self.tp_comm[:, p][:, None], ALLREDUCE, tp_seq, a,
                                  done[:, None] + rng.uniform(0, 5e-5, a.shape), h, 16 << 20,
                                  np.arange(TP)[None, :], -1, TP)
                        a = np.broadcast_to(done[:, None], a.shape) + rng.uniform(0, 5e-5, a.shape)
                    b = self.seg(sl, a, nom)
                    if p < PP - 1:
                        send_enter[p] = b
                    ready[:, p, :] = b
                if TP > 1:
                    tp_seq += 1
            fwd_end = ready.copy()
            # ---------------- backward
            bsend = {}
            for m in range(M):
                for p in reversed(range(PP)):
                    sl = (slice(None), p, slice(None))
                    if p < PP - 1:
                        r_ent, s_ent = ready[:, p, :], bsend[p + 1]
                        done = self.xfer(np.maximum(r_ent, s_ent), self.p2p_x, t_pp[p])
                        hr = self.host(sl, r_ent)
                        hs = self.host((slice(None), p + 1, slice(None)), s_ent)
                        self.emit(g[:, p, :], self.pp_comm, RECV, pseq(p, p + 1, RECV), r_ent,
                                  done + rng.uniform(0, 5e-5, r_ent.shape), hr, 8 << 20, p, p + 1, PP)
                        self.emit(g[:, p + 1, :], self.pp_comm, SEND, pseq(p + 1, p, SEND), s_ent,
                                  done + rng.uniform(0, 5e-5, r_ent.shape), hs, 8 << 20, p + 1, p, PP)
                        ready[:, p + 1, :] = done
                        ready[:, p, :] = done
                    nom = self.f * stage_w[p]
                    a = self.seg(sl, ready[:, p, :], nom)
                    if TP > 1:
                        st = a.max(axis=1)
                        done = self.xfer(st, self.tp_x, [x[:, p] for x in t_tp])
                        h = self.host(sl, a)
                        self.emit(g[:, p, :], self.tp_comm[:, p][:, None], ALLREDUCE, tp_seq, a,
                                  done[:, None] + rng.uniform(0, 5e-5, a.shape), h, 16 << 20,
                                  np.arange(TP)[None, :], -1, TP)
                        a = np.broadcast_to(done[:, None], a.shape) + rng.uniform(0, 5e-5, a.shape)
                    b = self.seg(sl, a, nom)
                    if p > 0:
                        bsend[p] = b
                    ready[:, p, :] = b
                if TP > 1:
                    tp_seq += 1
            if PP == 1 and TP == 1:
                pass
            # ---------------- data-parallel buckets
            sl = (slice(None), slice(None), slice(None))
            for bk in range(self.nb):
                ent = ready.copy()
                st = ent.max(axis=0)                                         # (PP,TP)
                done = self.xfer(st, self.dp_x, t_dp)
                h = self.host(sl, ent)
                self.emit(g, self.dp_comm[None, :, :], ALLREDUCE, dp_seq, ent,
                          done[None] + rng.uniform(0, 5e-5, ent.shape), h, 256 << 20,
                          np.arange(DP)[:, None, None], -1, DP)
                dp_seq += 1
                ready = np.broadcast_to(done[None], ent.shape) + rng.uniform(0, 5e-5, ent.shape)
            dp_end = ready.copy()
            # ---------------- grad norm on the model-parallel group, optimizer
            if TP * PP > 1:
                ent = self.seg(sl, ready, 0.002)
                st = ent.reshape(DP, -1).max(axis=1)
                done = self.xfer(st, self.mp_x, t_mp)
                h = self.host(sl, ent)
                self.emit(g, self.mp_comm[:, None, None], ALLREDUCE, mp_seq, ent,
                          done[:, None, None] + rng.uniform(0, 5e-5, ent.shape), h, 4,
                          np.arange(PP * TP).reshape(1, PP, TP), -1, PP * TP)
                mp_seq += 1
                ready = np.broadcast_to(done[:, None, None], ent.shape) + rng.uniform(0, 5e-5, ent.shape)
            # host syncs on the grad norm, then enqueues the optimizer and the next iteration
            self.hstate = ready + 0.0005
            ready = self.seg(sl, ready, self.opt)
            ready = ready + rng.uniform(0.001, 0.004, ready.shape)          # data loader
            self.iters.append(dict(start=it_start, fwd=fwd_end, dp=dp_end, end=ready.copy()))
            # drain: at the iteration boundary after T, the drained ranks leave
            if self.drain is not None and self.drain["exit"] is None:
                dm = np.isin(g, self.drain["ranks"])
                e = ready[dm]
                if np.isfinite(e).all() and e.max() >= self.drain["T"]:
                    Te = float(e.max())
                    self.stop_faults.append(dict(mask=dm, T=Te + 1e-6))
                    self.drain["exit"] = Te + 0.3
                    self.drain["teardown"] = Te + 2.8
            it += 1
        return self


# ----------------------------------------------------------------------------------------------- writer

def concat_events(job):
    ev = {k: np.concatenate([e[k] for e in job.events]) for k in job.events[0]}
    ev["comm_id"] = np.array([c["id"] for c in job.comms], dtype=np.uint64)[ev["comm"]]
    return ev


class Writer:
    def __init__(self, job):
        self.job = job
        self.lines = []     # (ts_ns, line)

    def add(self, topic, key, ts_ns, value=None, b64=None):
        if b64 is not None:
            line = '{"topic":"%s","key":"%s","ts_ns":%d,"value_b64":"%s"}' % (topic, key, ts_ns, b64)
        else:
            line = '{"topic":"%s","key":"%s","ts_ns":%d,"value":%s}' % (
                topic, key, ts_ns, json.dumps(value, separators=(",", ":")))
        self.lines.append((ts_ns, line))


def ns(x):
    return (EPOCH + np.round(np.asarray(x) * 1e9)).astype(np.int64)


def build(cfg, seed):
    job = Job(cfg, seed)
    if "nicdie" in [f[0] for f in cfg["faults"]]:
        # find the data-parallel bucket around T in a fault-free pre-run (same draws): the NIC dies inside it
        pre = Job(dict(cfg, faults=[]), seed).run()
        nic = job.nic
        d, p = divmod(nic["node"], job.PP)
        t_local = (nic["ranks"][0] % GPN)
        ev = concat_events(pre)
        sel = (ev["rank"] == nic["ranks"][0]) & (ev["nbytes"] == 256 << 20) & (ev["t0"] >= nic["T"])
        i = np.argmin(np.where(sel, ev["t0"], np.inf))
        last_in = ev["t0"][(ev["comm"] == ev["comm"][i]) & (ev["seq"] == ev["seq"][i])].max()
        T = float(last_in + 0.4 * (ev["t1"][i] - last_in))
        nic["T"] = T
        nic["bucket_seq"] = int(ev["seq"][i])
        nic["dp_comm_idx"] = [int(job.dp_comm[p, (r % GPN)]) for r in nic["ranks"]]
        for lf in job.link_faults:
            if lf["dead"]:
                lf["onset"] = T
    job.run()
    ev = concat_events(job)
    return job, ev


def write_capture(job, ev, path):
    cfg = job.cfg
    rng = np.random.default_rng(int(job.rng.integers(1 << 31)))
    D = cfg["dur"]
    R = job.R
    W = Writer(job)
    probe = job.probe
    flag0 = {"gpu": F_GPU, "enq": F_ENQ, "gloo": 0}[probe]
    key_of = lambda cid: f"{job.job}/{cid:016x}"
    n_ev = len(ev["rank"])
    node = job.node_of[ev["rank"]]
    # entry time per probe, write times
    t_start = np.where(np.isfinite(ev["h"]), ev["h"], ev["t0"]) if probe == "enq" else ev["t0"]
    w_e = t_start + rng.uniform(0.0002, 0.0015, n_ev)
    w_c = ev["t1"] + (rng.uniform(0.0002, 0.003, n_ev) if probe == "enq" else rng.uniform(0.0002, 0.0015, n_ev))
    w_c = np.maximum(w_c, np.where(np.isfinite(w_e), w_e, -np.inf) + 2e-5)   # a completion is written after its entry
    lost = np.zeros(n_ev, bool)
    exit_t = np.full(R, np.inf)
    if job.drain is not None and job.drain["exit"] is not None:
        exit_t[:] = job.drain["teardown"] + 0.2
        exit_t[job.drain["ranks"]] = job.drain["exit"]
        ex = exit_t[ev["rank"]]
        gone = t_start > ex - 0.25
        pend = (~gone) & (ev["t1"] > ex - 0.25)
        lost = pend.copy()
        keep = ~gone
        w_c = np.where(pend, ex - 0.2, w_c)
        ev = {k: v[keep] for k, v in ev.items()}
        t_start, w_e, w_c, lost, node = t_start[keep], w_e[keep], w_c[keep], lost[keep], node[keep]
        n_ev = len(t_start)
    # the records
    has_e = np.isfinite(t_start) & (w_e <= D)
    has_c = (np.isfinite(ev["t1"]) | lost) & (w_c <= D)
    # node agents read the rings every 140-200 ms (per node)
    flush = {}
    for n in range(job.nnodes):
        per = rng.uniform(0.14, 0.2)
        ticks = node_ticks(job, rng, n, per, 0, -2.5)
        flush[n] = np.sort(ticks + rng.uniform(-0.01, 0.01, ticks.size))
    fwd_e = has_e.copy()
    if probe == "gpu":
        # the plugin rewrites a call's ring slot at completion: an entry record reaches the agent only when
        # the call was still open at one of its reads (consumers keep the latest anyway)
        nxt = np.full(n_ev, np.inf)
        for n in range(job.nnodes):
            m = node == n
            tk = np.append(flush[n], np.inf)
            nxt[m] = tk[np.searchsorted(flush[n], w_e[m], side="left")]
        fwd_e &= nxt < np.where(has_c, w_c, np.inf)
    comm_nodes = [len({int(job.node_of[m]) for m in c["members"]}) for c in job.comms]
    is_coll = ev["op"] == ALLREDUCE

    def recs(mask, completed):
        n = int(mask.sum())
        r = np.zeros(n, REC)
        r["kind"] = CALL
        r["op"] = ev["op"][mask]
        fl = np.full(n, flag0, np.uint16)
        if completed:
            lo = lost[mask]
            fl = np.where(lo, fl | F_LOST, fl | F_COMPLETED).astype(np.uint16)
        r["flags"] = fl
        r["rank"] = ev["rank"][mask]
        r["comm"] = ev["comm_id"][mask]
        r["seq"] = ev["seq"][mask]
        nd = node[mask]
        ts = t_start[mask]
        r["t_start_ns"] = ns(clock_vec(job, nd, ts))
        if completed:
            te = ev["t1"][mask]
            tv = ns(clock_vec(job, nd, np.where(np.isfinite(te), te, 0.0)))
            r["t_end_ns"] = np.where(lost[mask], 0, tv)
        r["bytes"] = ev["nbytes"][mask]
        r["comm_rank"] = ev["crank"][mask]
        r["peer"] = ev["peer"][mask]
        r["nranks"] = ev["nranks"][mask]
        aux = np.where(ev["op"][mask] == ALLREDUCE, ev["seq"][mask] & 0xFFFFFFFF, 0)
        r["aux"] = aux if probe == "gpu" else 0
        return r, nd, (w_c if completed else w_e)[mask], ev["comm"][mask]

    re, ne, we, ce = recs(fwd_e, False)
    rc, nc, wc, cc = recs(has_c, True)
    # COMM_INIT (and COMM_DESTROY at exit)
    ir, inn, iw, ic = [], [], [], []
    for ci, c in enumerate(job.comms):
        for cr, rk in enumerate(c["members"]):
            t = -2.0 + rng.uniform(0, 0.5)
            ir.append((INIT, rk, c["id"], t, t, len(c["members"]), cr, comm_nodes[ci]))
            inn.append(job.node_of[rk]); iw.append(t + 0.001); ic.append(ci)
            if np.isfinite(exit_t[rk]):
                t2 = exit_t[rk] - 0.1 + rng.uniform(0, 0.05)
                ir.append((DESTROY, rk, c["id"], t2, t2, len(c["members"]), cr, 0))
                inn.append(job.node_of[rk]); iw.append(t2 + 0.001); ic.append(ci)
    xr = np.zeros(len(ir), REC)
    for i, (k, rk, cid, a, b, nr, cr, aux) in enumerate(ir):
        xr[i] = (k, 0, F_COMPLETED, rk, cid, 0, 0, 0, 0, cr, -1, nr, aux)
    inn = np.array(inn); iw = np.array(iw); ic = np.array(ic)
    xr["t_start_ns"] = ns(clock_vec(job, inn, iw - 0.001))
    xr["t_end_ns"] = xr["t_start_ns"]
    allr = np.concatenate([xr, re, rc])
    alln = np.concatenate([inn, ne, nc]).astype(np.int64)
    allw = np.concatenate([iw, we, wc])
    allc = np.concatenate([ic, ce, cc]).astype(np.int64)
    # node agents: flush ticks every 140-200 ms, heartbeats every 1 s
    nrec = 0
    for n in range(job.nnodes):
        ticks = flush[n]
        sel = np.nonzero(alln == n)[0]
        ti = np.searchsorted(ticks, allw[sel], side="left")
        ok = ti < ticks.size
        sel, ti = sel[ok], ti[ok]
        order = np.lexsort((allw[sel], allc[sel], ti))
        sel, ti = sel[order], ti[order]
        cs = allc[sel]
        brk = np.nonzero((np.diff(ti) != 0) | (np.diff(cs) != 0))[0] + 1
        starts = np.concatenate([[0], brk])
        ends = np.concatenate([brk, [sel.size]])
        tick_ns = ns(clock_vec(job, np.full(ticks.size, n), ticks))
        for a, b in zip(starts, ends):
            idx = sel[a:b]
            body = allr[idx]
            hdr = b"CWB1" + struct.pack("<HHII", 1, 64, len(body), 0)
            W.add("cw.calls.v1", key_of(job.comms[cs[a]]["id"]), int(tick_ns[ti[a]]),
                  b64=base64.b64encode(hdr + body.tobytes()).decode())
            nrec += len(body)
    heartbeats(job, ev, W, rng, t_start, w_e, w_c, lost, has_e, has_c, exit_t)
    hw_samples(job, W, rng)
    steps_and_topology(job, W, rng, exit_t)
    W.lines.sort(key=lambda x: x[0])
    with open(path, "w") as fh:
        for _, line in W.lines:
            fh.write(line)
            fh.write("\n")
    return nrec, len(W.lines)


def clock_vec(job, nodes, t):
    nodes = np.asarray(nodes, dtype=np.int64)
    t = np.asarray(t, dtype=float)
    c = t + job.clk_off[nodes] + job.clk_drift[nodes] * t
    for nset, T, st in job.clk_step:
        m = np.isin(nodes, list(nset)) & (t >= T)
        c = c + np.where(m, st, 0.0)
    return c


def node_ticks(job, rng, n, period, phase_lo, t_lo):
    D = job.cfg["dur"]
    ticks = t_lo + rng.uniform(0, period) + np.arange(int((D - t_lo) / period) + 2) * period
    ticks = ticks[ticks <= D]
    if n in job.silent:
        ticks = ticks[ticks <= job.silent[n]]
    if job.drain is not None and job.drain["exit"] is not None and n in job.nodes_of(job.drain["ranks"]):
        ticks = ticks[ticks <= job.drain["exit"] + 3.2]
    return ticks


def heartbeats(job, ev, W, rng, t_start, w_e, w_c, lost, has_e, has_c, exit_t):
    """Every 1 s per node and comm of its ranks: highest seq entered / completed as the agent read them."""
    t_end = ev["t1"]
    ticks = {n: node_ticks(job, rng, n, 1.0, 0, -1.5) for n in range(job.nnodes)}
    tick_ns = {n: ns(clock_vec(job, np.full(t.size, n), t)) for n, t in ticks.items()}
    groups = {}
    key = ev["comm"] * 100000 + ev["rank"]
    order = np.lexsort((ev["seq"], ev["peer"], ev["op"], key))
    k_s, op_s, pe_s = key[order], ev["op"][order], ev["peer"][order]
    brk = np.nonzero((np.diff(k_s) != 0) | (np.diff(op_s) != 0) | (np.diff(pe_s) != 0))[0] + 1
    for a, b in zip(np.concatenate([[0], brk]), np.concatenate([brk, [order.size]])):
        idx = order[a:b]
        ci, rk, op, pe = (int(ev["comm"][idx[0]]), int(ev["rank"][idx[0]]), int(ev["op"][idx[0]]),
                          int(ev["peer"][idx[0]]))
        n = int(job.node_of[rk])
        tk = ticks[n]
        we = np.sort(np.where(has_e[idx], w_e[idx], np.inf))
        wc = np.sort(np.where(has_c[idx] & ~lost[idx], w_c[idx], np.inf))
        ts = np.sort(np.where(has_e[idx], t_start[idx], np.inf))
        te = np.sort(np.where(has_c[idx] & ~lost[idx], t_end[idx], np.inf))
        ne = np.searchsorted(we, tk, side="right")
        nc = np.searchsorted(wc, tk, side="right")
        tsn = ns(clock_vec(job, np.full(ts.size, n), np.where(np.isfinite(ts), ts, 0.0)))
        ten = ns(clock_vec(job, np.full(te.size, n), np.where(np.isfinite(te), te, 0.0)))
        tls = np.where(ne > 0, tsn[np.maximum(ne - 1, 0)], 0)
        tle = np.where(nc > 0, ten[np.maximum(nc - 1, 0)], 0)
        groups.setdefault((ci, rk), []).append((op, pe, (ne - 1).tolist(), (nc - 1).tolist(), tls.tolist(),
                                                tle.tolist()))
    for ci, c in enumerate(job.comms):
        cid = f"{c['id']:016x}"
        key = f"{job.job}/{cid}"
        by_node = {}
        for r in c["members"]:
            by_node.setdefault(int(job.node_of[r]), []).append(r)
        for n, mine in by_node.items():
            tk, tn = ticks[n].tolist(), tick_ns[n].tolist()
            node = job.node_name(n)
            for j, t in enumerate(tk):
                rows = []
                for r in mine:
                    ex = exit_t[r]
                    if t > ex + 3.05:
                        continue
                    st, cp, tls, tle = -1, -1, 0, 0
                    p2 = []
                    for op, pe, ne, nc, ls, le in groups.get((ci, r), []):
                        if op == ALLREDUCE:
                            st, cp, tls, tle = ne[j], nc[j], ls[j], le[j]
                        else:
                            p2.append({"peer": pe, "op": "send" if op == SEND else "recv",
                                       "started": ne[j], "completed": nc[j]})
                            tls, tle = max(tls, ls[j]), max(tle, le[j])
                    row = {"rank": r, "started": st, "completed": cp, "t_last_start_ns": tls, "t_last_end_ns": tle}
                    if p2:
                        row["p2p"] = p2
                    if t > ex:
                        row["exited"] = True
                    rows.append(row)
                if rows:
                    W.add("cw.progress.v1", key, tn[j], {"v": 1, "job": job.job, "node": node, "ts_ns": tn[j],
                                                         "comm": cid, "ranks": rows})


def hw_samples(job, W, rng):
    D = job.cfg["dur"]
    nics = job.cfg["nics"]
    nic = getattr(job, "nic", None)
    for n in range(job.nnodes):
        t0 = rng.uniform(0, 5.0) - 2.0
        ticks = np.arange(t0, D, 5.0)
        if n in job.silent:
            ticks = ticks[ticks <= job.silent[n]]
        if job.drain is not None and job.drain["exit"] is not None:
            lim = job.drain["exit"] if n in job.nodes_of(job.drain["ranks"]) else job.drain["teardown"] + 0.2
            ticks = ticks[ticks <= lim]
        tx = rng.uniform(1e12, 5e12, nics)
        sym = np.zeros(nics, np.int64)
        downed = np.zeros(nics, np.int64)
        ranks = [r for r in range(job.R) if job.node_of[r] == n]
        for t in ticks:
            tn = int(ns(clock_vec(job, [n], [t]))[0])
            for r in ranks:
                f, hwk = 1.0, None
                for cf in job.compute_faults:
                    if r in cf["ranks"] and cf["hw"] and t >= cf["onset"]:
                        if cf["ramp_end"] is None:
                            ff = cf["fac"]
                        else:
                            ff = 1 + (cf["fac"] - 1) * min(1.0, (t - cf["onset"]) / (cf["ramp_end"] - cf["onset"]))
                        f *= ff
                        hwk = cf["hw"]
                sm = int(round(1980 / f / 15) * 15) - (15 if rng.random() < 0.1 else 0)
                temp = int(rng.normal(64, 2))
                power = float(round(rng.normal(620, 25), 1))
                thr = 0
                if hwk == "power":
                    power = float(round(rng.normal(455, 4), 1))
                    thr = 0x4 if f > 1.01 else 0
                elif hwk == "thermal":
                    temp = int(64 + (f - 1.0) * 45 + rng.normal(0, 1))
                    thr = (0x20 | 0x40) if f > 1.03 else 0
                    power = float(round(620 / f, 1))
                W.add("cw.hw.v1", job.job, tn + 1000 * (r % GPN),
                      {"v": 1, "job": job.job, "node": job.node_name(n), "ts_ns": tn + 1000 * (r % GPN),
                       "rank": r, "gpu": f"GPU-{job.comms[0]['id'] % 65536:04x}-{r:05d}",
                       "sm_clock_mhz": sm, "mem_clock_mhz": 2619, "power_w": power, "temp_c": temp,
                       "util_pct": int(min(100, rng.normal(97, 2))), "throttle_reasons": thr,
                       "ecc_dbe": 0, "xid": 0, "nvlink_errors": 0})
            ib = {}
            for k in range(nics):
                dead = nic is not None and nic["node"] == n and nic["nic"] == k
                if dead and t >= nic["T"] - 15:
                    sym[k] += int(rng.integers(40, 400))
                if not (dead and t >= nic["T"]):
                    tx[k] += 5.0 * rng.uniform(8e9, 12e9)
                d = {"tx_bytes": int(tx[k]), "rx_bytes": int(tx[k] * 0.98), "symbol_errors": int(sym[k])}
                if dead and t >= nic["T"]:
                    downed[k] = 1
                    d["port_state"] = "DOWN"
                elif nic is not None:
                    d["port_state"] = "ACTIVE"
                if nic is not None:
                    d["link_downed"] = int(downed[k])
                ib[f"mlx5_{k}"] = d
            W.add("cw.hw.v1", job.job, tn + 9000,
                  {"v": 1, "job": job.job, "node": job.node_name(n), "ts_ns": tn + 9000, "ib": ib})


def steps_and_topology(job, W, rng, exit_t):
    D = job.cfg["dur"]
    g = job.grid
    for r in range(job.R):
        n = int(job.node_of[r])
        d, p, t = np.argwhere(g == r)[0]
        ts = int(ns(clock_vec(job, [n], [-3.0 + rng.uniform(0, 0.3)]))[0])
        W.add("cw.topology.v1", job.job, ts,
              {"v": 1, "job": job.job, "ts_ns": ts, "rank": r, "world_size": job.R, "node": job.node_name(n),
               "local_rank": r % GPN, "gpu": f"GPU-{job.comms[0]['id'] % 65536:04x}-{r:05d}",
               "coords": {"tp": int(t), "pp": int(p), "dp": int(d), "cp": 0, "ep": 0}})
    if not job.cfg["steps"]:
        return
    for i, itr in enumerate(job.iters):
        st, fw, dp, en = itr["start"], itr["fwd"], itr["dp"], itr["end"]
        for r in range(job.R):
            d, p, t = np.unravel_index(r, g.shape)
            e = en[d, p, t]
            if not np.isfinite(e) or e > D or e > exit_t[r]:
                continue
            n = int(job.node_of[r])
            if n in job.silent and e > job.silent[n]:
                continue
            s = st[d, p, t]
            a, b = clock_vec(job, [n, n], [s, e])
            W.add("cw.steps.v1", job.job, int(ns(clock_vec(job, [n], [e + 0.001]))[0]),
                  {"v": 1, "job": job.job, "rank": r, "iteration": i, "t_start_ns": int(ns(a)), "t_end_ns": int(ns(b)),
                   "phases": {"forward_ms": round((fw[d, p, t] - s) * 1e3, 2),
                              "backward_ms": round((dp[d, p, t] - fw[d, p, t]) * 1e3, 2),
                              "optimizer_ms": round((e - dp[d, p, t]) * 1e3, 2)}})


# ----------------------------------------------------------------------------------------------- checks

def check_sim(job, ev):
    """Rendezvous semantics in true time: no member completes a collective before every member entered;
    members complete within 1 ms of each other; a send/recv pair completes after both sides entered."""
    coll = ev["op"] == ALLREDUCE
    key = ev["comm"][coll] * 10**7 + ev["seq"][coll]
    t0, t1 = ev["t0"][coll], ev["t1"][coll]
    order = np.argsort(key, kind="stable")
    k, a, b = key[order], t0[order], t1[order]
    brk = np.nonzero(np.diff(k))[0] + 1
    mx_in = np.maximum.reduceat(a, np.concatenate([[0], brk]))
    mn_out = np.minimum.reduceat(b, np.concatenate([[0], brk]))
    mx_out = np.maximum.reduceat(b, np.concatenate([[0], brk]))
    fin = np.isfinite(mn_out)
    assert (mn_out[fin] >= mx_in[fin] - TOL).all(), "a collective completed before its last entry"
    ff = fin & np.isfinite(mx_out)
    assert ((mx_out[ff] - mn_out[ff]) < 1e-3).all(), "completions spread"
    assert not (np.isfinite(mx_out) & ~np.isfinite(mn_out)).any() and not (fin & ~np.isfinite(mx_out)).any(), \
        "a collective completed on some members only"
    p = ~coll
    assert (ev["t1"][p] >= ev["t0"][p] - TOL).all()
    assert (ev["t1"] >= ev["t0"] - TOL).all()
    if job.probe == "enq":
        f = np.isfinite(ev["t0"])
        assert (ev["h"][f] <= ev["t0"][f] + TOL).all(), "host enqueue after device start"


TOPICS = {"cw.calls.v1", "cw.progress.v1", "cw.topology.v1", "cw.steps.v1", "cw.hw.v1"}


def validate(path, job):
    """Read the capture back and check every message against wire v1."""
    comm_ids = {c["id"] for c in job.comms}
    n_lines = n_recs = 0
    bodies, keyc, counts = [], [], []
    for line in open(path):
        m = json.loads(line)
        n_lines += 1
        assert set(m) in ({"topic", "key", "ts_ns", "value"}, {"topic", "key", "ts_ns", "value_b64"}), m.keys()
        assert m["topic"] in TOPICS and isinstance(m["ts_ns"], int)
        if m["topic"] in ("cw.calls.v1", "cw.progress.v1"):
            jb, cs = m["key"].split("/")
            assert jb == job.job and len(cs) == 16 and cs == cs.lower() and int(cs, 16) in comm_ids
        else:
            assert m["key"] == job.job
        if m["topic"] == "cw.calls.v1":
            raw = base64.b64decode(m["value_b64"])
            assert raw[:4] == b"CWB1"
            ver, size, count, res = struct.unpack("<HHII", raw[4:16])
            assert (ver, size, res) == (1, 64, 0) and len(raw) == 16 + 64 * count and count > 0
            bodies.append(raw[16:])
            keyc.append(int(cs, 16))
            counts.append(count)
            n_recs += count
        elif m["topic"] == "cw.progress.v1":
            v = m["value"]
            assert v["v"] == 1 and v["job"] == job.job and v["comm"] == cs and isinstance(v["ts_ns"], int)
            for rr in v["ranks"]:
                assert {"rank", "started", "completed", "t_last_start_ns", "t_last_end_ns"} <= set(rr)
                assert rr["completed"] <= rr["started"] or rr["started"] == -1 and rr["completed"] == -1
        elif m["topic"] == "cw.topology.v1":
            v = m["value"]
            assert {"v", "job", "ts_ns", "rank", "world_size", "node"} <= set(v) and v["world_size"] == job.R
        elif m["topic"] == "cw.steps.v1":
            v = m["value"]
            assert {"v", "job", "rank", "iteration", "t_start_ns", "t_end_ns"} <= set(v) and v["t_end_ns"] > v["t_start_ns"]
        elif m["topic"] == "cw.hw.v1":
            v = m["value"]
            assert {"v", "job", "node", "ts_ns"} <= set(v)
    r = np.frombuffer(b"".join(bodies), REC)
    assert (r["comm"] == np.repeat(np.array(keyc, dtype=np.uint64), counts)).all(), "record comm != key comm"
    assert np.isin(r["kind"], [1, 2, 3]).all()
    call = r["kind"] == 1
    assert np.isin(r["op"][call], list(range(12))).all() and (r["op"][~call] == 0).all()
    assert ((r["flags"] & ~np.uint16(31)) == 0).all()
    comp = (r["flags"] & 1) != 0
    assert (r["t_end_ns"][~comp] == 0).all()
    assert (r["t_end_ns"][comp] >= r["t_start_ns"][comp] - 5_000_000).all()
    assert ((r["flags"][comp & call] & F_LOST) == 0).all(), "COMPLETED and COMPLETION_LOST together"
    assert (r["comm_rank"] >= 0).all() and (r["comm_rank"] < r["nranks"]).all()
    assert ((r["peer"] >= 0) | (r["op"] == ALLREDUCE) | ~call).all()
    assert ((r["peer"] == -1) | np.isin(r["op"], [SEND, RECV])).all()
    assert (r["rank"] >= 0).all() and (r["rank"] < job.R).all()
    # per (rank, comm): one COMM_INIT
    init = r[r["kind"] == INIT]
    assert len(np.unique(init[["rank", "comm"]])) == len(init) == sum(len(c["members"]) for c in job.comms)
    return n_lines, n_recs


# ----------------------------------------------------------------------------------------------- truth

def ranges(rs):
    rs = sorted(rs)
    out, i = [], 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ",".join(out)


def make_truth(job, ev):
    cfg = job.cfg
    R = job.R
    allr = set(range(R))
    nn = lambda rs: [job.node_name(n) for n in job.nodes_of(rs)]
    probe = {"gpu": "gpu", "enq": "enq", "gloo": "block"}[cfg["probe"]]
    t = dict(job=job.job, scenario=cfg["name"], setup=cfg["desc"], probe=probe, world_size=R,
             layout=f"TP{job.TP} x PP{job.PP} x DP{job.DP}, {job.nnodes} nodes, {(job.nnodes + NPR - 1) // NPR} racks",
             row_kind=cfg["kind"], t0_ns=int(EPOCH), capture_end_ns=int(EPOCH + cfg["dur"] * 1e9),
             info_only=False, info_reason=None, faults=[], victims=[], forbid_named=False,
             nodes={job.node_name(n): [r for r in range(R) if job.node_of[r] == n] for n in range(job.nnodes)})
    # rank 0's iterations, true time
    t["iterations"] = [[i, round(float(it["start"].ravel()[0]), 3), round(float(it["end"].ravel()[0]), 3)]
                       for i, it in enumerate(job.iters) if np.isfinite(it["end"].ravel()[0])]
    kind = cfg["kind"]
    F = cfg["faults"]
    on = lambda s: int(EPOCH + s * 1e9)
    if kind == "control":
        t["expect"] = "no P0/P1 incident; P2/P3 advisories are listed as INFO"
        if F and F[0][0] == "ntp":
            t["onset_ns"] = on(F[0][2])
            t["reasoning"] = ("the job is healthy; 4 nodes' clocks (and their messages' ts_ns) jump 2 s forward at "
                              f"{F[0][2]} s: their data then seems 2 s late or early against the others. Nothing "
                              "is wrong with any rank: no P0/P1.")
        else:
            t["reasoning"] = "healthy job with realistic noise: no P0/P1."
    elif kind == "ending":
        dr = job.drain
        t["onset_ns"] = on(dr["exit"])
        t["expect"] = "no P0/P1 (an orderly drain and teardown)"
        t["drained_ranks"] = dr["ranks"]
        t["drained_nodes"] = nn(dr["ranks"])
        t["reasoning"] = (f"host maintenance: node {t['drained_nodes']}'s 8 ranks finish their iteration and exit "
                          f"cleanly at {dr['exit']:.1f} s (COMM_DESTROY on every comm, heartbeats 'exited'); "
                          f"the others wait ~2.5 s in their next calls until the launcher tears the job down at "
                          f"{dr['teardown']:.1f} s (pending calls COMPLETION_LOST, COMM_DESTROY). Nobody hung: no P0/P1.")
    elif kind == "no_culprit":
        t["onset_ns"] = on(F[0][2])
        t["forbid_named"] = True
        t["expect"] = "no incident naming a rank or a node, no P0/P1; a P2/P3 job-level slowdown naming nobody is fine"
        t["reasoning"] = ("fabric-wide congestion slows every inter-node transfer 1.4x on every rank alike; no rank, "
                          "node or link is to blame more than another.")
    elif kind == "link":
        lf = F[0]
        rs = job.ranks_of(lf[1])
        t["faults"].append(dict(id="tor", kind="link", culprit_ranks=[], culprit_nodes=nn(rs), onset_ns=on(lf[2]),
                                expected_severity="P2", link_ranks=rs,
                                why=("the rack's switch slows every inter-node transfer with an end in its 4 nodes: "
                                     "the pipeline send/recv between those nodes (intra-rack, through the ToR) and "
                                     "their replicas' grad-norm all-reduce are 1.5x on the wire while the same "
                                     "calls of the other racks are not; every data-parallel all-reduce spans all "
                                     "racks and slows too. Compute is unchanged: no rank is slow.")))
        t["victims"] = sorted(allr)
        t["expect"] = ("a P1-P3 slow-link incident naming exactly the rack's 4 nodes (P3 or a subset: PARTIAL; a "
                       "node-less advisory whose evidence.candidate_nodes are exactly them: PARTIAL); any incident "
                       "naming a rank (slow_rank) is a false positive")
    elif kind == "slow":
        cf = F[0]
        rs = job.ranks_of(cf[1])
        t["faults"].append(dict(id="slow", kind="slow", culprit_ranks=rs, culprit_nodes=nn(rs), onset_ns=on(cf[2]),
                                expected_severity="P2", accept_nodes=True,
                                why=(f"{len(rs)} GPUs of {len(nn(rs))} node(s) compute {cf[3]}x"
                                     + (f" (ramping from {cf[2]} s to {cf[4]} s)" if cf[4] else "")
                                     + ": they enter every data-parallel collective late, their peers wait there; "
                                       "the pipeline neighbours of a slow stage wait in their send/recv. The whole "
                                       "set is the culprit (naming it by its ranks or by exactly its nodes); naming "
                                       "only some of them is PARTIAL.")))
        t["victims"] = sorted(allr - set(rs))
        t["expect"] = "one P1/P2 incident naming exactly the set (P3: PARTIAL; a strict subset: PARTIAL)"
    elif kind == "hang":
        fk = F[0][0]
        if fk == "linkdead":
            rs = job.ranks_of(F[0][1])
            t["faults"].append(dict(id="rack-dies", kind="hang", culprit_ranks=rs, culprit_nodes=nn(rs),
                                    onset_ns=on(F[0][2]), expected_severity="P0", accept_nodes=True,
                                    why=("the rack's switch dies: its 4 nodes are cut off (ranks and agents). Every "
                                         "other rank ends up waiting, directly or through its peers, in a call "
                                         "whose missing or stuck members are the rack's ranks; the rack's agents "
                                         "are silent, so the rack is where every wait ends. One fault: exactly one "
                                         "P0 naming exactly the 32 ranks (or exactly the 4 nodes); two P0s (e.g. a "
                                         "node_lost and a hang) fail.")))
            t["victims"] = sorted(allr - set(rs))
        else:
            nic = job.nic
            rs = nic["ranks"]
            dpm = sorted({m for ci in nic["dp_comm_idx"] for m in job.comms[ci]["members"]})
            dpids = ["%016x" % job.comms[c]["id"] for c in nic["dp_comm_idx"]]
            t["faults"].append(dict(
                id="nic-dies", kind="hang", culprit_ranks=rs, culprit_nodes=nn(rs), onset_ns=on(nic["T"]),
                expected_severity="P0", accept_nodes=True, partial_ranks=dpm, partial_nodes=nn(dpm),
                nic=f"{job.node_name(nic['node'])}/mlx5_{nic['nic']}",
                why=(f"NIC mlx5_{nic['nic']} of {job.node_name(nic['node'])} (serving GPUs/ranks {rs}) dies at "
                     f"{nic['T']:.2f} s inside data-parallel all-reduce #{nic['bucket_seq']} of the comms "
                     f"{dpids}. Wait-for: every member of those "
                     "comms entered that all-reduce and none completes - DOMAIN.md's comm-level (transport) hang; "
                     "their TP peers (same nodes) complete their own buckets and wait in the next call, the "
                     "grad-norm all-reduce of the model-parallel group, which the blocked ranks never enter; the "
                     "other stages wait there and in their send/recv. So the waiting ends at the hung DP comms, "
                     "whose members are the ranks blocked first. Which member's link died the call records cannot "
                     "tell (all look alike); the node's own InfiniBand counters can: symbol errors on that NIC only "
                     "for 15 s, then its counters freeze and its port is DOWN. Truth: the NIC's ranks (or their "
                     "node, naming no other rank). One P0 naming nobody (a comm_hang) or exactly all members of "
                     "the hung DP comms (what the call records alone support) is PARTIAL; naming a TP peer "
                     "waiting in the next call fails.")))
            t["victims"] = sorted(allr - set(rs))
        t["expect"] = "exactly one P0 naming exactly the culprit set"
    elif kind == "multi":
        cf, sf = F[0], F[1]
        if sf[0] == "stop":
            a, b = job.ranks_of(cf[1]), job.ranks_of(sf[1])
            t["faults"].append(dict(id="slow-gpu", kind="slow", culprit_ranks=a, culprit_nodes=nn(a),
                                    onset_ns=on(cf[2]), expected_severity="P2", accept_nodes=False,
                                    why=f"rank {a[0]} computes {cf[3]}x from {cf[2]} s: late in every collective "
                                        "of its comms; its TP / data-parallel peers and pipeline neighbours wait."))
            t["faults"].append(dict(id="hang", kind="hang", culprit_ranks=b, culprit_nodes=nn(b),
                                    onset_ns=on(sf[2]), expected_severity="P0", accept_nodes=False,
                                    why=f"rank {b[0]} stops issuing calls at {sf[2]} s (in no call, its process "
                                        "and agent alive): everyone else waits for it, directly or through peers. "
                                        "The slow rank is a victim of this hang."))
            t["victims"] = sorted(allr - set(a) - set(b))
            t["expect"] = "a P1/P2 incident naming the slow rank alone, and one P0 naming the stopped rank alone"
        else:
            a, b = job.ranks_of(cf[1]), job.ranks_of(sf[1])
            t["faults"].append(dict(id="capped-rack", kind="slow", culprit_ranks=a, culprit_nodes=nn(a),
                                    onset_ns=on(cf[2]), expected_severity="P2", accept_nodes=True,
                                    alt_sets=[sorted(set(a) - set(b))],
                                    why=f"rack ranks {ranges(a)} compute {cf[3]}x from {cf[2]} s (power cap): the "
                                        "set (with or without the straggler inside it, named apart) is a culprit."))
            t["faults"].append(dict(id="straggler", kind="slow", culprit_ranks=b, culprit_nodes=nn(b),
                                    onset_ns=on(sf[2]), expected_severity="P2", accept_nodes=False,
                                    why=f"rank {b[0]} computes a further {sf[3]}x on top of the cap "
                                        f"({cf[3] * sf[3]:.2f}x): its 7 TP peers (capped like it) wait for it in "
                                        "every TP all-reduce, so it stands out from its rack-mates. It must be "
                                        "named alone; its TP peers named alone are victims of it."))
            t["victims"] = sorted(allr - set(a))
            t["expect"] = "the capped set named (exactly), and the straggler named alone"
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("prefix", nargs="*")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tot_b = 0
    for i, cfg in enumerate(scenarios()):
        if a.prefix and not any(cfg["name"].startswith(p) for p in a.prefix):
            continue
        t0 = time.time()
        seed = a.seed * 1000 + i
        job, ev = build(cfg, seed)
        check_sim(job, ev)
        cap = out / f"{cfg['name']}.cwcap"
        nrec, nlines = write_capture(job, ev, cap)
        truth = make_truth(job, ev)
        truth["seed"] = seed
        (out / f"{cfg['name']}.truth.json").write_text(json.dumps(truth, indent=1))
        vl, vr = validate(cap, job)
        assert vl == nlines and vr == nrec, (vl, nlines, vr, nrec)
        sz = cap.stat().st_size
        tot_b += sz
        print(f"{cfg['name']:32s} {job.R:4d} ranks {len(job.iters):4d} it  {nrec:8d} records {nlines:7d} msgs "
              f"{sz / 1e6:6.1f} MB  {time.time() - t0:5.1f} s  valid", flush=True)
    print(f"total {tot_b / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
