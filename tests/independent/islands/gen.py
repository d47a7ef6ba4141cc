#!/usr/bin/env python3
"""islands/: an independent traffic generator for commwatch - multi-island / cross-datacenter training.

Written from the wire spec (../shared/spec/wire-v1.md), DOMAIN.md, the READMEs, docs/*.md and run_scored.sh
only; it shares no code with commwatch and writes the capture format of spec section 4 itself (JSON Lines,
call batches encoded here from spec section 1/2.1 with numpy).

The model (DiLoCo / OpenDiLoCo / Streaming DiLoCo / INTELLECT-1 style, HSDP inside each island):
- 2-4 islands ("sites"), each N nodes of 8 GPUs. Rank layout: island-major, then node, then local rank.
- Inner training per iteration (every rank): FSDP-style shard comm per node (8 ranks, NVLink):
  2 forward chunks (ALLGATHER, then compute), 2 backward chunks (compute, then REDUCESCATTER),
  then the HSDP replicate ALLREDUCE across the island's nodes (one comm per local rank l), then the
  optimizer. Collectives are not overlapped with compute (simplified); a collective completes on every
  member at max(arrivals) + transfer (+ a few us per member).
- Outer sync every H inner steps (H = 25-200) over the WAN, pseudo-gradients of shard l:
  * mode 'all': one outer comm per local rank l spanning local rank l of every node of every island;
  * mode 'leader': one outer comm per l over node 0's rank l of each island (2-4 members), then a
    BROADCAST from that leader on the island's replicate comm to the island's other nodes;
  * blocking DiLoCo: the outer ALLREDUCE is on the main stream, the host waits for it, then an outer
    optimizer step (0.2-0.4 s) before inner training resumes;
  * streaming DiLoCo: k fragments, fragment f synced every H/k steps (staggered), launched on a side
    stream at an iteration start and merged tau steps later (the main stream waits for the fragment's
    completion at that merge; the host does not block: NCCL work.wait() is a stream wait).
  The WAN transfer is seconds to tens of seconds (per-round jitter +-12 %); islands whose hardware is
  slower (1.2x by design) arrive later at every outer sync and the others wait inside it: structural.
- Host and device timelines per rank: the host enqueues an iteration's calls 1 iteration ahead at most
  (it syncs on the device's end of iteration n-2 before starting iteration n), ~1 ms per launch; the
  device runs them in order (arrival = max(device free, host enqueue)).
- Probes per island (whole job, or per site in one job): 'gpu' (GPU-timed plugin: t_start/t_end device
  times; one completed record per call, plus an entry record GPU_TIMED without COMPLETED when a call is
  still open after the plugin's sweep period 0.2-0.5 s) and 'enq' (host-enqueue hook: ENQUEUED entry at
  enqueue, ENQUEUED|COMPLETED when its CUDA event is observed, 1-15 ms after the device finished).
- Node agents: per node and comm, a call batch every 200 ms (random phase, 0-15 ms jitter) with the
  records written since; heartbeats every 1 s per node and comm (started/completed as of the agent's
  last flush); topology at start; iteration timings (cw.steps.v1, device times, phases) for some jobs.
- Clocks: each site +-35 ms off, each node +-3 ms more, drift +-10 ppm; an NTP step of a whole site in
  some jobs. A record's two times use the offset in force at its start (a probe converts one call with
  one calibration), so t_end >= t_start always holds.
- Faults: host hangs (the host stops enqueueing; the device runs what was queued), a host stall that
  ends (resumes after L s), a rank's host stopping exactly at the outer sync (never enters it), a GPU
  computing 1.5x slower from an onset, a degraded WAN (outer transfers 2-3x from an onset).
Simplified / left out: FSDP prefetch overlap, gradient accumulation, NVML/IB samples, coords in
topology, job ends (every capture stops while the job runs), agent hiccups, comm re-creation.
Each capture is checked against the spec before it is written (check_capture).

  gen.py --out DIR --seed N [PREFIX ...]
"""
import argparse
import base64
import json
import os
import struct
import sys
import zlib

import numpy as np

NS = 1_000_000_000
EPOCH = 1_767_225_600 * NS  # 2026-01-01T00:00:00Z
INF = np.inf

OP_ALLREDUCE, OP_ALLGATHER, OP_REDUCESCATTER, OP_BROADCAST = 1, 2, 3, 4
F_COMPLETED, F_GPU, F_GRAPH, F_ENQ, F_LOST = 1, 2, 4, 8, 16
K_CALL, K_INIT = 1, 2

# spec section 1, built here from the table (not imported from commwatch)
REC = np.dtype([("kind", "<u1"), ("op", "<u1"), ("flags", "<u2"), ("rank", "<i4"), ("comm", "<u8"),
                ("seq", "<u8"), ("t_start_ns", "<i8"), ("t_end_ns", "<i8"), ("bytes", "<u8"),
                ("comm_rank", "<i4"), ("peer", "<i4"), ("nranks", "<u4"), ("aux", "<u4")])
assert REC.itemsize == 64 and REC.fields["aux"][1] == 60 and REC.fields["comm_rank"][1] == 48


def batch_bytes(recs):
    return b"CWB1" + struct.pack("<HHII", 1, 64, len(recs), 0) + recs.tobytes()


# ----------------------------------------------------------------------------------------------- scenarios
# islands: list of (nodes, hw_factor, probe); T: fast-hardware iteration seconds; H outer period in steps;
# W: (lo, hi) seconds of a full outer sync's WAN transfer; k: fragments (streaming) or 0 (blocking)
SCEN = []


def S(name, **kw):
    SCEN.append(dict(name=name, **kw))


# --- healthy controls
S("c01_2isl_blocking_slowisland", islands=[(4, 1.0, "gpu"), (4, 1.2, "gpu")], T=0.6, H=50, W=(8, 12),
  mode="all", k=0, dur=200, steps=True, expect="control",
  note="2 sites x 4 nodes; site B's GPUs 1.2x slower by design: site A waits ~6 s inside every outer sync")
S("c02_3isl_leader_hostenq", islands=[(4, 1.0, "enq"), (4, 1.0, "enq"), (2, 1.2, "enq")], T=0.4, H=100,
  W=(10, 18), mode="leader", k=0, dur=240, steps=True, expect="control",
  note="3 sites, leader-only outer all-reduce (3 members) then an island broadcast; host-enqueue hook")
S("c03_streaming_4frag", islands=[(8, 1.0, "gpu"), (8, 1.2, "gpu")], T=0.5, H=100, W=(12, 20),
  mode="all", k=4, tau=5, dur=200, steps=False, expect="control",
  note="streaming DiLoCo, 4 fragments staggered every 25 steps, overlapped 5 steps; 128 ranks, plugin only")
S("c04_4isl_ntp_step_mixed", islands=[(2, 1.0, "gpu"), (2, 1.0, "gpu"), (2, 1.2, "enq"), (2, 1.0, "enq")],
  T=0.8, H=40, W=(6, 10), mode="all", k=0, dur=200, steps=True, expect="control",
  ntp=(2, 95.0, 0.085), note="4 sites x 2 nodes; site C (1.2x) and D on the host-enqueue hook; site C's "
  "clocks stepped 85 ms ahead by NTP at t=95 s")
S("c05_4isl_256_long_outer", islands=[(8, 1.0, "gpu"), (8, 1.0, "gpu"), (8, 1.2, "gpu"), (8, 1.0, "gpu")],
  T=1.6, H=25, W=(25, 38), mode="all", k=0, dur=240, steps=True, expect="control",
  note="256 ranks, 4 sites; outer sync every 25 steps (~40 s) taking 25-38 s on the WAN")
S("c06_streaming_hostenq_ntp", islands=[(4, 1.0, "enq"), (4, 1.2, "enq"), (4, 1.0, "enq")], T=0.45,
  H=60, W=(9, 15), mode="all", k=3, tau=4, dur=220, steps=True, expect="control", ntp=(1, 120.0, -0.06),
  note="streaming, 3 fragments, host-enqueue, 96 ranks; site B's clocks stepped 60 ms back at t=120 s")
# --- hangs
S("h01_inner_hang_gpu", islands=[(4, 1.0, "gpu"), (4, 1.2, "gpu"), (2, 1.0, "gpu")], T=0.7, H=60,
  W=(8, 14), mode="all", k=0, dur=200, steps=True, expect="hang",
  fault=dict(kind="host_hang", island=1, node=2, local=5, at=95.0),
  note="a rank of site B stops mid-iteration (a Python deadlock); its island freezes at once, sites A "
  "and C train on until the next outer sync and wait there")
S("h02_inner_hang_hostenq", islands=[(4, 1.0, "enq"), (4, 1.0, "enq")], T=0.5, H=80, W=(8, 12), mode="all",
  k=0, dur=180, steps=True, expect="hang", fault=dict(kind="host_hang", island=0, node=1, local=3, at=80.0),
  note="host-enqueue: the peers have the rest of the iteration and the next one enqueued, only the "
  "oldest blocked")
S("h03_outer_never_entered_gpu", islands=[(4, 1.0, "gpu"), (4, 1.2, "gpu")], T=0.6, H=50, W=(8, 12),
  mode="all", k=0, dur=200, steps=True, expect="hang",
  fault=dict(kind="outer_hang", island=0, node=3, local=6, at=70.0),
  note="a rank of site A stops when it should enter the outer all-reduce (stuck copying pseudo-gradients)")
S("h04_outer_leader_never_entered", islands=[(4, 1.0, "gpu"), (4, 1.0, "gpu"), (4, 1.2, "gpu")], T=0.5,
  H=60, W=(10, 16), mode="leader", k=0, dur=220, steps=False, expect="hang",
  fault=dict(kind="outer_hang", island=1, node=0, local=2, at=60.0),
  note="leader mode: site B's leader of shard 2 never enters the 3-member outer all-reduce; its island "
  "waits in the broadcast, the other leaders in the outer all-reduce")
S("h05_inner_hang_streaming_gpu", islands=[(4, 1.0, "gpu"), (4, 1.2, "gpu")], T=0.5, H=80, W=(12, 20),
  mode="all", k=4, tau=5, dur=200, steps=True, expect="hang",
  fault=dict(kind="host_hang", island=0, node=0, local=1, at=88.0),
  note="streaming: a rank of site A hangs in inner training with fragment syncs in flight")
S("h06_outer_stall_hostenq_streaming", islands=[(4, 1.0, "enq"), (4, 1.2, "enq")], T=0.5, H=80,
  W=(12, 20), mode="all", k=4, tau=5, dur=240, steps=True, expect="hang",
  fault=dict(kind="outer_stall", island=1, node=1, local=4, at=80.0, length=70.0),
  note="host-enqueue streaming: a rank enqueues its fragment all-reduce on the side stream, then its host "
  "stalls 70 s in the outer step's host work; its island peers block, the other site waits at a merge")
# --- slow ranks
S("s01_slow_gpu_fast_island", islands=[(4, 1.0, "gpu"), (4, 1.2, "gpu")], T=0.6, H=50, W=(8, 12),
  mode="all", k=0, dur=200, steps=True, expect="slow_rank",
  fault=dict(kind="slow_gpu", island=0, node=1, local=2, at=70.0, factor=1.5),
  note="a 1.5x GPU in the fast site: its island 1.5x, now the structurally slow site waits for it")
S("s02_slow_gpu_slow_island_plugin", islands=[(4, 1.0, "gpu"), (4, 1.2, "gpu"), (4, 1.0, "gpu")], T=0.5,
  H=60, W=(8, 14), mode="all", k=0, dur=200, steps=False, expect="slow_rank",
  fault=dict(kind="slow_gpu", island=1, node=3, local=7, at=65.0, factor=1.5),
  note="a 1.5x GPU in the 1.2x site (1.8x in all); plugin records only, no iteration timings")
S("s03_slow_gpu_hostenq_streaming", islands=[(4, 1.0, "enq"), (4, 1.0, "enq"), (2, 1.2, "enq")], T=0.5,
  H=60, W=(9, 14), mode="all", k=3, tau=4, dur=200, steps=True, expect="slow_rank",
  fault=dict(kind="slow_gpu", island=0, node=2, local=0, at=60.0, factor=1.5),
  note="host-enqueue streaming: a 1.5x GPU, only the phases can show it")
S("s04_slow_gpu_256_leader", islands=[(8, 1.0, "gpu"), (8, 1.0, "gpu"), (8, 1.2, "gpu"), (8, 1.0, "gpu")],
  T=0.9, H=40, W=(10, 16), mode="leader", k=0, dur=200, steps=True, expect="slow_rank",
  fault=dict(kind="slow_gpu", island=3, node=5, local=4, at=75.0, factor=1.5),
  note="256 ranks, leader mode; a 1.5x GPU in site D")
# --- slow WAN
S("w01_wan_degraded_3site", islands=[(4, 1.0, "gpu"), (4, 1.0, "gpu"), (2, 1.2, "gpu")], T=0.5, H=40,
  W=(8, 11), mode="all", k=0, dur=260, steps=True, expect="slow_link",
  fault=dict(kind="wan", at=80.0, factor=(2.0, 3.0), sites=(0, 1)),
  note="the WAN link between sites A and B degraded: every outer sync 2-3x longer; no rank at fault")
S("w02_wan_degraded_streaming_hostenq", islands=[(4, 1.0, "enq"), (4, 1.2, "enq")], T=0.5, H=60,
  W=(10, 14), mode="all", k=3, tau=4, dur=260, steps=True, expect="slow_link",
  fault=dict(kind="wan", at=70.0, factor=(2.0, 3.0), sites=(0, 1)),
  note="streaming under host-enqueue; the WAN degraded 2-3x from t=70 s; merges now wait for fragments")

SITE = "ABCD"


# ------------------------------------------------------------------------------------------------ simulator
class Sim:
    def __init__(self, sc, seed):
        self.sc = sc
        self.rng = np.random.default_rng([seed, zlib.crc32(sc["name"].encode())])
        rng = self.rng
        isl = sc["islands"]
        self.n_isl = len(isl)
        self.nodes = []          # (island, index in island)
        self.isl_ranks = []
        r = 0
        for i, (nn, hw, probe) in enumerate(isl):
            rs = []
            for j in range(nn):
                self.nodes.append((i, j))
                rs.extend(range(r, r + 8))
                r += 8
            self.isl_ranks.append(np.array(rs))
        self.W = r
        self.rank_isl = np.concatenate([np.full(len(x), i) for i, x in enumerate(self.isl_ranks)])
        self.rank_node = np.arange(self.W) // 8
        self.rank_local = np.arange(self.W) % 8
        self.hw = np.array([isl[i][1] for i in self.rank_isl])
        self.probe = [isl[i][2] for i in self.rank_isl]
        self.node_name = [f"site{SITE[i]}-n{j:02d}" for (i, j) in self.nodes]
        # comms
        self.comms = []  # dict(id, members(np), kind)
        used = set()

        def new_comm(members, kind):
            while True:
                cid = int(rng.integers(1, 2**63))
                if cid not in used:
                    used.add(cid)
                    break
            self.comms.append(dict(id=cid, members=np.array(members), kind=kind, seq=0, opcount={}))
            return len(self.comms) - 1
        self.shard = [new_comm(list(range(8 * n, 8 * n + 8)), "shard") for n in range(len(self.nodes))]
        self.repl = {}
        for i, rs in enumerate(self.isl_ranks):
            for l in range(8):
                self.repl[(i, l)] = new_comm([x for x in rs if x % 8 == l], "repl")
        self.outer = {}
        for l in range(8):
            if sc["mode"] == "all":
                mem = [x for x in range(self.W) if x % 8 == l]
            else:
                mem = [int(rs[l]) for rs in self.isl_ranks]  # node 0 of each island
            self.outer[l] = new_comm(mem, "outer")
        # clocks
        site_off = rng.uniform(-0.035, 0.035, self.n_isl)
        self.node_off = np.array([site_off[i] + rng.uniform(-0.003, 0.003) for (i, j) in self.nodes])
        self.node_drift = rng.uniform(-10e-6, 10e-6, len(self.nodes))
        self.ntp = sc.get("ntp")  # (island, at, step seconds)
        # calls: lists of arrays
        self.calls = {k: [] for k in ("rank", "comm", "seq", "op", "h", "a", "c", "bytes", "crank",
                                      "peer", "nranks", "aux")}
        self.steps = []  # (rank, iteration, t0, t1, fwd, bwd, opt)
        self.fault = sc.get("fault")
        self.host_fault = {}  # rank -> [t0, L, applied]
        f = self.fault
        self.frank = None
        if f and "island" in f:
            self.frank = int(self.isl_ranks[f["island"]][8 * f["node"] + f["local"]])
            if f["kind"] == "host_hang":
                self.host_fault[self.frank] = [f["at"], INF, False]
        self.events = []  # truth annotations
        self.wan_rounds = []  # (start, W, degraded)

    # ----------------------------------------------------------------- helpers
    def node_clock(self, node, t):
        """true seconds -> node clock seconds (offset at t)."""
        off = self.node_off[node] + self.node_drift[node] * t
        if self.ntp and self.nodes[node][0] == self.ntp[0] and t >= self.ntp[1]:
            off = off + self.ntp[2]
        return t + off

    def hostmap(self, R, h):
        """apply host faults (stall or hang) to host times h of ranks R (in place copy)."""
        for r, hf in self.host_fault.items():
            idx = np.nonzero(R == r)[0]
            if len(idx) == 0 or hf[2]:
                continue
            k = idx[0]
            if h[k] >= hf[0]:
                h = h.copy()
                h[k] = h[k] + hf[1] if np.isfinite(hf[1]) else INF
                hf[2] = True
        return h

    def speed(self, R, d):
        s = self.hw[R].copy()
        f = self.fault
        if f and f["kind"] == "slow_gpu":
            k = np.nonzero(R == self.frank)[0]
            if len(k) and d[k[0]] >= f["at"]:
                s[k[0]] *= f["factor"]
        return s

    def coll(self, ci, R, a, h, op, nbytes, xfer, peer=-1):
        """one collective instance on comm ci; R its members (in comm order), a arrivals, h host enqueue.
        returns per-member completion (inf where it never completes)."""
        cm = self.comms[ci]
        assert np.array_equal(cm["members"], R)
        C = np.max(a) + xfer
        c = C + self.rng.uniform(2e-6, 60e-6, len(R)) if np.isfinite(C) else np.full(len(R), INF)
        cnt = cm["opcount"].get(op, 0)
        cm["opcount"][op] = cnt + 1
        n = len(R)
        L = self.calls
        L["rank"].append(R)
        L["comm"].append(np.full(n, ci))
        L["seq"].append(np.full(n, cm["seq"]))
        L["op"].append(np.full(n, op))
        L["h"].append(np.asarray(h, float))
        L["a"].append(np.asarray(a, float))
        L["c"].append(c)
        L["bytes"].append(np.full(n, nbytes))
        L["crank"].append(np.arange(n))
        L["peer"].append(np.full(n, peer))
        L["nranks"].append(np.full(n, n))
        L["aux"].append(np.full(n, cnt & 0xFFFFFFFF))
        cm["seq"] += 1
        return c

    # ----------------------------------------------------------------- the run
    def run(self):
        sc, rng = self.sc, self.rng
        T = sc["T"]
        end = float(sc["dur"])
        Wn = self.W
        dev = np.full(Wn, 2.0) + rng.uniform(0, 0.05, Wn)   # training starts after init
        host = dev - 0.01
        dprev1 = dev.copy()
        dprev2 = dev.copy()
        side = np.zeros(Wn)
        last_end = dev.copy()
        pending = {}  # iteration -> completion array (world-size, inf/0 where not member)
        k = sc["k"]
        H = sc["H"]
        tau = sc.get("tau", 0)
        frag_every = H // k if k else 0
        n_frag_round = 0
        fwd_c = [0.16 * T, 0.16 * T]
        bwd_c = [0.31 * T, 0.31 * T]
        opt_c = 0.04 * T
        ag_b = 384 << 20
        rs_b = 384 << 20
        ar_b = 768 << 20
        outer_b = 3 << 30
        it = 0
        stall_done = False
        while True:
            live = np.minimum(dev, host)
            if not np.any(np.isfinite(live) & (live < end)) or it > 5000:
                break
            # streaming: launch fragment syncs at this iteration's start
            if k and it > 0 and it % frag_every == 0:
                n_frag_round += 1
                comp = np.zeros(Wn)
                hs = np.maximum(host, dprev2) + 0.002
                hs = self.hostmap(np.arange(Wn), hs)
                W = self.wan_time(np.max(np.where(np.isfinite(hs), hs, -1)), frac=1.0 / k)
                for l in range(8):
                    ci = self.outer[l]
                    R = self.comms[ci]["members"]
                    a = np.maximum(np.maximum(side[R], hs[R]), dprev1[R] + 0.02)
                    c = self.coll(ci, R, a, hs[R], OP_ALLREDUCE, outer_b // k, W * rng.uniform(0.99, 1.01))
                    comp[R] = c
                    side[R] = c
                pending[it + tau] = comp
                host = np.where(np.isfinite(hs), hs + 0.003, INF)
                f = self.fault
                if f and f["kind"] == "outer_stall" and not stall_done and hs[self.frank] >= f["at"]:
                    t0 = hs[self.frank] + 0.002
                    self.host_fault[self.frank] = [t0, f["length"], False]
                    self.events.append(("stall", self.frank, t0, t0 + f["length"]))
                    stall_done = True
            if it in pending:
                dev = np.maximum(dev, pending.pop(it) + 0.01)
            # ---- one inner iteration, island by island
            for i, R in enumerate(self.isl_ranks):
                nn = len(R) // 8
                ijit = rng.lognormal(0, 0.03)
                hs = np.maximum(host[R], dprev2[R]) + 0.004
                hs = self.hostmap(R, hs)
                d = dev[R].copy()
                it_start = d.copy()
                h = hs

                def comp(d, dur):
                    s = self.speed(R, d)
                    return d + dur * s * ijit * rng.lognormal(0, 0.02, len(R))

                # forward: all-gather then compute, per chunk
                for ch in range(2):
                    h = self.hostmap(R, h + rng.uniform(0.0005, 0.0015, len(R)))
                    a = np.maximum(d, h)
                    newd = np.empty(len(R))
                    for j in range(nn):
                        sl = slice(8 * j, 8 * j + 8)
                        newd[sl] = self.coll(self.shard[int(R[8 * j]) // 8], R[sl], a[sl], h[sl],
                                             OP_ALLGATHER, ag_b, 0.012 * T * rng.uniform(0.9, 1.1))
                    d = comp(newd, fwd_c[ch])
                t_fwd = d.copy()
                for ch in range(2):
                    d = comp(d, bwd_c[ch])
                    h = self.hostmap(R, h + rng.uniform(0.0005, 0.0015, len(R)))
                    a = np.maximum(d, h)
                    newd = np.empty(len(R))
                    for j in range(nn):
                        sl = slice(8 * j, 8 * j + 8)
                        newd[sl] = self.coll(self.shard[int(R[8 * j]) // 8], R[sl], a[sl], h[sl],
                                             OP_REDUCESCATTER, rs_b, 0.012 * T * rng.uniform(0.9, 1.1))
                    d = newd
                # replicate all-reduce across the island's nodes, one comm per local rank
                h = self.hostmap(R, h + rng.uniform(0.0005, 0.0015, len(R)))
                a = np.maximum(d, h)
                newd = np.empty(len(R))
                for l in range(8):
                    idx = np.arange(l, len(R), 8)
                    newd[idx] = self.coll(self.repl[(i, l)], R[idx], a[idx], h[idx], OP_ALLREDUCE, ar_b,
                                          0.035 * T * rng.uniform(0.9, 1.1))
                t_bwd = newd.copy()
                d = comp(newd, opt_c)
                h = h + 0.002
                if sc.get("steps"):
                    for x in range(len(R)):
                        if np.isfinite(d[x]) and d[x] < end:
                            self.steps.append((int(R[x]), it, float(last_end[R[x]]), float(d[x]),
                                               float(t_fwd[x] - it_start[x]), float(t_bwd[x] - t_fwd[x]),
                                               float(d[x] - t_bwd[x])))
                dprev2[R] = dprev1[R]
                dprev1[R] = d
                last_end[R] = d
                dev[R] = d
                host[R] = h
            # ---- blocking outer sync after every H-th step
            if not k and (it + 1) % H == 0:
                self.outer_sync(dev, host, dprev1, dprev2)
            it += 1

    def wan_time(self, t, frac=1.0):
        sc = self.sc
        lo, hi = sc["W"]
        W = self.rng.uniform(lo, hi) * float(np.clip(self.rng.lognormal(0, 0.08), 0.85, 1.2))
        deg = False
        f = self.fault
        if f and f["kind"] == "wan" and t >= f["at"]:
            W *= self.rng.uniform(*f["factor"])
            deg = True
        self.wan_rounds.append((float(t), W * frac, deg))
        return W * frac

    def outer_sync(self, dev, host, dprev1, dprev2):
        sc, rng = self.sc, self.rng
        Wn = self.W
        allr = np.arange(Wn)
        # the host waits for the iteration (sync), computes the pseudo-gradient, enqueues the outer call
        hs = np.maximum(host, dev) + 0.003
        f = self.fault
        if f and f["kind"] == "outer_hang" and self.frank not in self.host_fault and hs[self.frank] >= f["at"]:
            self.host_fault[self.frank] = [hs[self.frank] - 1e-4, INF, False]
            self.events.append(("outer_hang", self.frank, float(hs[self.frank])))
        hs = self.hostmap(allr, hs)
        a = np.maximum(dev + 0.05, hs)
        finite_a = a[np.isfinite(a)]
        W = self.wan_time(float(np.max(finite_a)) if len(finite_a) else 0.0)
        done = np.full(Wn, INF)
        leaders = set()
        for l in range(8):
            ci = self.outer[l]
            R = self.comms[ci]["members"]
            leaders.update(int(x) for x in R)
            c = self.coll(ci, R, a[R], hs[R], OP_ALLREDUCE, 3 << 30, W * rng.uniform(0.99, 1.01))
            done[R] = c + rng.uniform(0.2, 0.4)   # outer optimizer step
        if sc["mode"] == "leader":
            # island broadcast from the leader (comm rank 0 of the replicate comm) to the other nodes
            hb = np.where(np.isfinite(hs), hs + 0.002, INF)
            hb = self.hostmap(allr, hb)
            for i, R in enumerate(self.isl_ranks):
                for l in range(8):
                    ci = self.repl[(i, l)]
                    M = self.comms[ci]["members"]
                    lead = int(M[0])
                    ab = np.maximum(dev[M] + 0.002, hb[M])
                    ab[0] = max(done[lead], hb[lead])
                    hh = hb[M].copy()
                    hh[0] = max(hh[0], done[lead] - 0.001) if np.isfinite(done[lead]) else INF
                    cb = self.coll(ci, M, ab, hh, OP_BROADCAST, 3 << 30, 0.35 * rng.uniform(0.9, 1.1), peer=0)
                    done[M] = cb
        dev[:] = done
        host[:] = np.where(np.isfinite(done), done + 0.003, INF)
        # the host also waited: keep its enqueue of a stopped rank stopped
        for r, hf in self.host_fault.items():
            if hf[2] and not np.isfinite(hf[1]):
                host[r] = INF
        dprev1[:] = done
        dprev2[:] = done


# ------------------------------------------------------------------------------------------------ emission
def emit(sim, out_path, job):
    sc, rng = sim.sc, sim.rng
    end = float(sc["dur"])
    L = {k: np.concatenate(v) for k, v in sim.calls.items()}
    n = len(L["rank"])
    probe_gpu = np.array([p == "gpu" for p in sim.probe])
    isgpu = probe_gpu[L["rank"]]
    h, a, c = L["h"], L["a"], L["c"]
    sweep = {r: rng.uniform(0.2, 0.5) for r in range(sim.W)}
    sw = np.array([sweep[r] for r in range(sim.W)])[L["rank"]]
    poll = rng.uniform(0.001, 0.015, n)
    rows = []  # (write_time, flags, t_start, t_end, call index)
    # GPU-timed plugin
    g_entry = isgpu & np.isfinite(a) & ((c - a) > sw)
    g_done = isgpu & np.isfinite(a) & np.isfinite(c)
    e_entry = (~isgpu) & np.isfinite(h)
    e_done = (~isgpu) & np.isfinite(h) & np.isfinite(c)
    parts = []
    idx = np.nonzero(g_entry)[0]
    parts.append((a[idx] + sw[idx], np.full(len(idx), F_GPU), a[idx], np.zeros(len(idx)), idx))
    idx = np.nonzero(g_done)[0]
    parts.append((c[idx] + 0.002, np.full(len(idx), F_GPU | F_COMPLETED), a[idx], c[idx], idx))
    idx = np.nonzero(e_entry)[0]
    parts.append((h[idx] + 0.0001, np.full(len(idx), F_ENQ), h[idx], np.zeros(len(idx)), idx))
    idx = np.nonzero(e_done)[0]
    parts.append((c[idx] + poll[idx], np.full(len(idx), F_ENQ | F_COMPLETED), h[idx], c[idx] + poll[idx], idx))
    wt = np.concatenate([p[0] for p in parts])
    fl = np.concatenate([p[1] for p in parts])
    ts = np.concatenate([p[2] for p in parts])
    te = np.concatenate([p[3] for p in parts])
    ci = np.concatenate([p[4] for p in parts])
    # agent flushes: per node every 200 ms from a random phase
    nnodes = len(sim.nodes)
    phase = rng.uniform(0, 0.2, nnodes)
    node = sim.rank_node[L["rank"][ci]]
    fk = np.ceil((wt - phase[node]) / 0.2).astype(np.int64)
    ft = phase[node] + fk * 0.2
    keep = ft <= end
    wt, fl, ts, te, ci, node, fk, ft = (x[keep] for x in (wt, fl, ts, te, ci, node, fk, ft))
    m = len(ci)
    rank = L["rank"][ci]
    comm = L["comm"][ci]
    recs = np.zeros(m, REC)
    recs["kind"] = K_CALL
    recs["op"] = L["op"][ci]
    recs["flags"] = fl
    recs["rank"] = rank
    recs["comm"] = np.array([cm["id"] for cm in sim.comms], dtype=np.uint64)[comm]
    recs["seq"] = L["seq"][ci]
    # node clocks: both times with the offset at the call's start
    off = sim.node_off[node] + sim.node_drift[node] * ts
    if sim.ntp:
        node_isl = np.array([i for (i, j) in sim.nodes])
        off = off + np.where((node_isl[node] == sim.ntp[0]) & (ts >= sim.ntp[1]), sim.ntp[2], 0.0)
    t0n = EPOCH + int(rng.integers(0, 3600)) * NS
    recs["t_start_ns"] = t0n + np.round((ts + off) * NS).astype(np.int64)
    tend = np.where(fl & F_COMPLETED, t0n + np.round((te + off) * NS).astype(np.int64), 0)
    recs["t_end_ns"] = tend
    recs["bytes"] = L["bytes"][ci]
    recs["comm_rank"] = L["crank"][ci]
    recs["peer"] = L["peer"][ci]
    recs["nranks"] = L["nranks"][ci]
    recs["aux"] = np.where(isgpu[ci], L["aux"][ci] + 1, 0)
    # messages: list of (ts_ns, line)
    msgs = []
    comm_hex = [f"{cm['id']:016x}" for cm in sim.comms]
    # topology + COMM_INIT at t = 1.0 .. 1.3
    t_init = 1.0 + rng.uniform(0, 0.3, sim.W)
    for r in range(sim.W):
        nd = int(sim.rank_node[r])
        tsn = t0n + int(sim.node_clock(nd, t_init[r]) * NS)
        msgs.append((tsn, {"topic": "cw.topology.v1", "key": job, "ts_ns": tsn, "value": {
            "v": 1, "job": job, "ts_ns": tsn, "rank": r, "world_size": sim.W, "node": sim.node_name[nd],
            "local_rank": int(r % 8), "gpu": f"GPU-{zlib.crc32(f'{job}/{r}'.encode()):08x}"}}))
    inits = []
    for cidx, cm in enumerate(sim.comms):
        M = cm["members"]
        nodes_in = len(set(int(x) // 8 for x in M))
        for j, r in enumerate(M):
            inits.append((int(r), cidx, j, len(M), nodes_in))
    init_by = {}
    for (r, cidx, j, nr, nin) in inits:
        init_by.setdefault((int(sim.rank_node[r]), cidx), []).append((r, j, nr, nin))
    init_time = {}
    for (nd, cidx), lst in init_by.items():
        rr = np.zeros(len(lst), REC)
        tt = max(t_init[r] for (r, *_ ) in lst) + 0.05
        for q, (r, j, nr, nin) in enumerate(lst):
            tn = t0n + int(sim.node_clock(nd, t_init[r] + 0.01) * NS)
            init_time[(r, cidx)] = tn
            rr[q] = (K_INIT, 0, F_COMPLETED, r, sim.comms[cidx]["id"], 0, tn, tn, 0, j, -1, nr, nin)
        tsn = t0n + int(sim.node_clock(nd, tt) * NS)
        msgs.append((tsn, {"topic": "cw.calls.v1", "key": f"{job}/{comm_hex[cidx]}", "ts_ns": tsn,
                           "value_b64": base64.b64encode(batch_bytes(rr)).decode()}))
    # call batches grouped by (node, comm, flush)
    order = np.lexsort((wt, fk, comm, node))
    nd_s, cm_s, fk_s = node[order], comm[order], fk[order]
    brk = np.nonzero((np.diff(nd_s) != 0) | (np.diff(cm_s) != 0) | (np.diff(fk_s) != 0))[0] + 1
    starts = np.concatenate([[0], brk])
    stops = np.concatenate([brk, [m]])
    batch_jit = rng.uniform(0, 0.015, len(starts))
    for b, (s0, s1) in enumerate(zip(starts, stops)):
        sel = order[s0:s1]
        nd = int(nd_s[s0])
        t = ft[sel[0]] + batch_jit[b]
        tsn = t0n + int(sim.node_clock(nd, t) * NS)
        msgs.append((tsn, {"topic": "cw.calls.v1", "key": f"{job}/{comm_hex[int(cm_s[s0])]}", "ts_ns": tsn,
                           "value_b64": base64.b64encode(batch_bytes(recs[sel])).decode()}))
    # heartbeats: per node and comm, every 1 s; state as of the agent's last flush
    hb_phase = rng.uniform(0, 1.0, nnodes)
    # per (rank, comm): records sorted by flush time -> running max of started / completed
    key = rank.astype(np.int64) * len(sim.comms) + comm
    o2 = np.lexsort((ft, key))
    k2 = key[o2]
    kb = np.concatenate([[0], np.nonzero(np.diff(k2))[0] + 1, [m]])
    state = {}
    seqs = recs["seq"].astype(np.int64)
    for s0, s1 in zip(kb[:-1], kb[1:]):
        sel = o2[s0:s1]
        kk = int(k2[s0])
        f_t = ft[sel]
        st = np.maximum.accumulate(seqs[sel])
        done = np.where(fl[sel] & F_COMPLETED, seqs[sel], -1)
        cd = np.maximum.accumulate(done)
        # times of the latest started / completed call
        tss = recs["t_start_ns"][sel]
        tes = recs["t_end_ns"][sel]
        last_st_t = np.maximum.accumulate(np.where(seqs[sel] == st, tss, 0))
        last_cd_t = np.maximum.accumulate(np.where((done == cd) & (done >= 0), tes, 0))
        state[kk] = (f_t, st, cd, last_st_t, last_cd_t)
    node_comms = {}
    for cidx, cm in enumerate(sim.comms):
        for r in cm["members"]:
            node_comms.setdefault((int(r) // 8, cidx), []).append(int(r))
    hb_count = 0
    for (nd, cidx), rs in node_comms.items():
        tb = hb_phase[nd] + 1.5
        hbs = np.arange(tb, end, 1.0)
        per_rank = []
        for r in rs:
            kk = r * len(sim.comms) + cidx
            it = init_time[(r, cidx)]
            if kk in state:
                f_t, st, cd, lst, lct = state[kk]
                pos = np.searchsorted(f_t, hbs + 1e-9, side="right") - 1
                ok = pos >= 0
                S_ = np.where(ok, st[np.maximum(pos, 0)], -1)
                C_ = np.where(ok, cd[np.maximum(pos, 0)], -1)
                TS = np.where(ok, lst[np.maximum(pos, 0)], it)
                TE = np.where(ok & (C_ >= 0), lct[np.maximum(pos, 0)], it)
            else:
                S_ = np.full(len(hbs), -1)
                C_ = np.full(len(hbs), -1)
                TS = np.full(len(hbs), it)
                TE = np.full(len(hbs), it)
            TE = np.where(TE == 0, it, TE)
            TS = np.where(TS == 0, it, TS)
            per_rank.append((r, S_, C_, TS, TE))
        key_s = f"{job}/{comm_hex[cidx]}"
        for q, t in enumerate(hbs):
            tsn = t0n + int(sim.node_clock(nd, t) * NS)
            ranks = [{"rank": r, "started": int(S_[q]), "completed": int(C_[q]),
                      "t_last_start_ns": int(TS[q]), "t_last_end_ns": int(TE[q])}
                     for (r, S_, C_, TS, TE) in per_rank]
            msgs.append((tsn, {"topic": "cw.progress.v1", "key": key_s, "ts_ns": tsn, "value": {
                "v": 1, "job": job, "node": sim.node_name[nd], "ts_ns": tsn, "comm": comm_hex[cidx],
                "ranks": ranks}}))
            hb_count += 1
    # iteration timings
    for (r, itn, t0, t1, fw, bw, op) in sim.steps:
        nd = int(sim.rank_node[r])
        a_ns = t0n + int(sim.node_clock(nd, t0) * NS)
        b_ns = max(a_ns + 1, t0n + int(sim.node_clock(nd, t1) * NS))
        tsn = t0n + int(sim.node_clock(nd, t1 + 0.003) * NS)
        msgs.append((tsn, {"topic": "cw.steps.v1", "key": job, "ts_ns": tsn, "value": {
            "v": 1, "job": job, "rank": r, "iteration": itn, "t_start_ns": a_ns, "t_end_ns": b_ns,
            "phases": {"forward_ms": round(fw * 1e3, 3), "backward_ms": round(bw * 1e3, 3),
                       "optimizer_ms": round(op * 1e3, 3)}}}))
    check_capture(sim, recs, msgs, job)
    msgs.sort(key=lambda x: x[0])
    with open(out_path, "w") as fh:
        for _, mm in msgs:
            fh.write(json.dumps(mm, separators=(",", ":")))
            fh.write("\n")
    return t0n, dict(records=int(m), messages=len(msgs), heartbeats=hb_count, steps=len(sim.steps))


# ------------------------------------------------------------------------------------------------ checks
def check_capture(sim, recs, msgs, job):
    """the capture against wire-v1: a failure here is this generator's bug, not the detector's."""
    def fail(msg):
        raise SystemExit(f"[{job}] capture check failed: {msg}")
    if not np.all(np.isin(recs["kind"], [1, 2, 3])):
        fail("kind")
    if not np.all((recs["op"] >= 1) & (recs["op"] <= 11)):
        fail("op")
    if np.any(recs["flags"] & ~np.uint16(31)):
        fail("flags bits")
    comp = (recs["flags"] & F_COMPLETED) != 0
    if np.any(comp & (recs["t_end_ns"] < recs["t_start_ns"])):
        fail("t_end < t_start")
    if np.any((~comp) & (recs["t_end_ns"] != 0)):
        fail("t_end set without COMPLETED")
    if np.any(recs["t_start_ns"] <= EPOCH):
        fail("t_start")
    if np.any((recs["comm_rank"] < 0) | (recs["comm_rank"] >= recs["nranks"].astype(np.int64))):
        fail("comm_rank range")
    if np.any((recs["rank"] < 0) | (recs["rank"] >= sim.W)):
        fail("rank range")
    bc = recs["op"] == OP_BROADCAST
    if np.any(recs["peer"][~bc] != -1) or np.any(recs["peer"][bc] != 0):
        fail("peer")
    if np.any((recs["flags"] & F_GPU != 0) & (recs["flags"] & F_ENQ != 0)):
        fail("GPU_TIMED with ENQUEUED in one probe")
    # per (rank, comm): seq in call order (t_start increasing with seq), one call per seq
    key = recs["rank"].astype(np.int64) * (1 << 40) + (recs["comm"] % np.uint64(1 << 40)).astype(np.int64)
    o = np.lexsort((recs["seq"], key))
    k, s, t = key[o], recs["seq"][o].astype(np.int64), recs["t_start_ns"][o]
    same = k[1:] == k[:-1]
    if np.any(same & (s[1:] < s[:-1])):
        fail("seq order")
    newer = same & (s[1:] > s[:-1])
    if np.any(newer & (t[1:] + 100_000_000 < t[:-1])):   # clocks step back by at most 60 ms here
        fail("seq not in call order")
    # heartbeats: started >= completed, counters never go back per (node, comm, rank), JSON ints
    last = {}
    for tsn, mm in sorted(msgs, key=lambda x: x[0]):
        if mm["topic"] != "cw.progress.v1":
            if mm["topic"] == "cw.calls.v1":
                raw = base64.b64decode(mm["value_b64"])
                if raw[:4] != b"CWB1" or (len(raw) - 16) % 64 or struct.unpack("<I", raw[8:12])[0] != (len(raw) - 16) // 64:
                    fail("batch header")
                rr = np.frombuffer(raw[16:], REC)
                if np.any(rr["comm"] != rr["comm"][0]) or mm["key"] != f"{job}/{int(rr['comm'][0]):016x}":
                    fail("batch comm != key")
            continue
        v = mm["value"]
        for x in v["ranks"]:
            if x["started"] < x["completed"]:
                fail(f"heartbeat started < completed {x}")
            kk = (v["node"], v["comm"], x["rank"])
            p = last.get(kk)
            if p and (x["started"] < p[0] or x["completed"] < p[1]):
                fail(f"heartbeat counters went back {kk}")
            last[kk] = (x["started"], x["completed"])


# ------------------------------------------------------------------------------------------------ truth
def truth_of(sim, sc, job, t0n, stats):
    f = sc.get("fault")
    end = float(sc["dur"])
    tr = dict(job=job, scenario=sc["name"], expect=sc["expect"], world=sim.W, note=sc["note"],
              islands=[dict(site=SITE[i], nodes=n, hw_factor=hw, probe=p) for i, (n, hw, p) in enumerate(sc["islands"])],
              outer=dict(mode=sc["mode"], H=sc["H"], fragments=sc["k"], tau=sc.get("tau", 0), W_s=list(sc["W"])),
              iteration_s=sc["T"], capture_start_ns=t0n, capture_end_ns=t0n + int(end * NS),
              culprits=[], onset_ns=None, stats=stats)
    slow_isl = [i for i, (n, hw, p) in enumerate(sc["islands"]) if hw > 1.0]
    tr["structural"] = sorted(int(r) for i in slow_isl for r in sim.isl_ranks[i])
    tr["structural_note"] = (f"site(s) {','.join(SITE[i] for i in slow_isl)} 1.2x slower by design: the other "
                             "sites wait inside every outer sync; at most a P3 advisory")
    rounds = sim.wan_rounds
    tr["outer_rounds"] = [dict(t_s=round(t, 1), wan_s=round(w, 2), degraded=d) for (t, w, d) in rounds if t < end]
    if not f:
        tr["waitfor"] = "healthy: waits in the outer syncs are the WAN transfer plus the slow site's lag (structural)"
        return tr
    X = sim.frank
    if X is not None:
        isl = int(sim.rank_isl[X])
        peers = [int(r) for r in sim.isl_ranks[isl] if r != X]
        others = [int(r) for i, R in enumerate(sim.isl_ranks) if i != isl for r in R]
        tr["culprits"] = [X]
        tr["culprit_node"] = sim.node_name[int(sim.rank_node[X])]
    if f["kind"] == "host_hang":
        tr["onset_ns"] = t0n + int(f["at"] * NS)
        tr["kind"] = "hang"
        tr["waitfor"] = (f"rank {X} (site {SITE[isl]}) stops enqueueing at {f['at']} s (its device runs what "
                         f"was queued) and is then inside no call: the root. Its node's shard comm peers wait in "
                         f"the next all-gather/reduce-scatter it never entered (hard wait on {X}); the island's "
                         f"other nodes wait in the replicate all-reduce on those peers; the other sites train on "
                         f"until the next outer sync, then wait in the outer all-reduce on the blocked island's "
                         f"ranks: {len(peers)} + {len(others)} victims, all waiting on a chain that ends at {X}.")
    elif f["kind"] == "outer_hang":
        ev = [e for e in sim.events if e[0] == "outer_hang"]
        tr["onset_ns"] = t0n + int(ev[0][2] * NS)
        tr["kind"] = "hang"
        tr["waitfor"] = (f"rank {X} stops when it should enter outer all-reduce on shard {X % 8} at "
                         f"{ev[0][2]:.1f} s and enters nothing after: the root, inside no call. The outer comm's "
                         f"other members (the other sites' shard-{X % 8} ranks) wait in it on {X} (hard). "
                         + ("Its island's other nodes wait in the broadcast of the leader (its replicate comm), "
                            "the other leaders in the outer all-reduce, their islands in their broadcasts. "
                            if sc["mode"] == "leader" else
                            f"Its own island's other shards complete their outer all-reduces and wait in the next "
                            f"all-gather on {X}'s node (shard comm), the rest on them. ")
                         + "Every wait ends at " + str(X) + ".")
    elif f["kind"] == "outer_stall":
        ev = [e for e in sim.events if e[0] == "stall"][0]
        tr["onset_ns"] = t0n + int(ev[2] * NS)
        tr["end_ns"] = t0n + int(ev[3] * NS)
        tr["kind"] = "hang"
        tr["waitfor"] = (f"host-enqueue: rank {X} enqueues its fragment all-reduce on the side stream at "
                         f"{ev[2]:.1f} s, then its host stalls {ev[3] - ev[2]:.0f} s in the outer step's host work "
                         f"(GIL released: its completions are still observed). The fragment all-reduce completes "
                         f"(every member entered it). {X}'s device runs its queued calls, then idles: {X} is "
                         f"inside no call. Its node's peers block in the first shard-comm call {X} never "
                         f"enqueued, with the rest of that iteration and the next enqueued behind it (only the "
                         f"oldest blocked); the island's other nodes wait on them in the replicate all-reduce; "
                         f"the other site enters the next fragment all-reduce, which the blocked island never "
                         f"enters, then its main stream waits at the merge {sc.get('tau')} steps later with its "
                         f"next inner calls enqueued behind the stream wait (all members entered, none "
                         f"completes: symptoms). Root: {X}; it resumes at {ev[3]:.1f} s and the job recovers.")
    elif f["kind"] == "slow_gpu":
        tr["onset_ns"] = t0n + int(f["at"] * NS)
        tr["kind"] = "slow_rank"
        tr["factor"] = f["factor"]
        tr["waitfor"] = (f"rank {X}'s GPU computes {f['factor']}x slower from {f['at']} s: it enters every "
                         f"shard-comm collective last (its 7 node peers wait inside), its node enters the "
                         f"replicate all-reduce last (the island's other nodes wait inside), its island reaches "
                         f"every outer sync last (the other sites wait inside it). {X} waits on nobody: the "
                         f"culprit; {len(peers)} island peers and {len(others)} other-site ranks are victims.")
    elif f["kind"] == "wan":
        tr["onset_ns"] = t0n + int(f["at"] * NS)
        tr["kind"] = "slow_link"
        tr["link_sites"] = [SITE[s] for s in f["sites"]]
        tr["waitfor"] = ("the WAN between sites " + " and ".join(SITE[s] for s in f["sites"]) +
                         " degraded 2-3x: every outer all-reduce (spanning all sites) takes 2-3x longer after "
                         "the last member arrived; no rank arrives later than before: nobody is a culprit.")
    return tr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("prefix", nargs="*")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for sc in SCEN:
        if args.prefix and not any(sc["name"].startswith(p) for p in args.prefix):
            continue
        job = f"isl-{sc['name'].split('_')[0]}-s{args.seed}"
        sim = Sim(sc, args.seed)
        sim.run()
        path = os.path.join(args.out, sc["name"] + ".cwcap")
        t0n, stats = emit(sim, path, job)
        tr = truth_of(sim, sc, job, t0n, stats)
        with open(os.path.join(args.out, sc["name"] + ".truth.json"), "w") as fh:
            json.dump(tr, fh, indent=1)
        mb = os.path.getsize(path) / 1e6
        print(f"{sc['name']:40s} {sim.W:4d} ranks {stats['records']:8d} records {stats['messages']:7d} msgs "
              f"{mb:6.1f} MB  culprits={tr['culprits']}", flush=True)


if __name__ == "__main__":
    main()
