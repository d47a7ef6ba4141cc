#!/usr/bin/env python3
"""serving/: an independent traffic generator - LLM INFERENCE SERVING on GPUs (vLLM / SGLang /
TensorRT-LLM style engines), whose communication looks nothing like training.

Written from the wire spec (shared/spec/wire-v1.md), shared/DOMAIN.md, the README, docs/*.md,
tests/independent/README.md and run_scored.sh, borrowing only the file layout, CLI and output
conventions of rl/ (never streams/ nor the detector's tests). The capture writer and record
encoder are the public `commwatch.capture` / `commwatch.wire` helpers.

    gen.py --out DIR --seed N [SCENARIO-PREFIX ...]   -> DIR/NAME.cwcap, DIR/NAME.truth.json

THE MODEL (and its numbers)
---------------------------
Requests arrive in bursts (Poisson arrivals at 1-8 req/s for 5-40 s), separated by idle gaps of
10-90 s in which an engine has nothing to do and issues NO collective at all (its processes live,
the node agents keep heartbeating). Prompts are lognormal around 900 tokens (30-6000), outputs
lognormal around 180 tokens (8-1500). Each engine runs a continuous-batching scheduler: every forward
decodes one token for every running request and prefills waiting prompts up to a token budget
(chunked prefill, 2048 tokens); a forward's device time is 12 ms + 0.22 ms per decoded sequence
+ 0.085 ms per prefilled token (decode forwards 15-60 ms, forwards with a prefill chunk 5-20x
longer), so call rates follow the load. No iterations, so no cw.steps.v1 (the spec's steps topic is
a training loop's iteration timing; a serving engine has none) and no cw.hw.v1.

* TP engine (TP 4 or 8 inside one node, one NCCL TP communicator): a forward is K chunks of compute
  each followed by a small all-reduce of the activations (tokens x hidden x 2 bytes). A real
  forward makes two all-reduces per transformer layer (~64-160); K = 8 recorded all-reduces per
  forward stand for groups of layers (the group's compute before each), except `ctl_fullrate`
  (K = 64, the real count of a 32-layer model; PP stages record 4 each). The scheduler's output reaches the workers by
  shared memory (no collective) 0.05-0.4 ms apart; the sampled tokens come back from the driver
  worker (TP rank 0). A rank's compute is 1 +- 2 % of the base per chunk. All-reduce time 12 us +
  bytes / 170 GB/s (NVLink), completions 0-8 us apart on the members.
* Data-parallel replicas: independent TP engines in one job (one TP comm each), a load balancer
  sending them 1.0 : 0.6 : 0.45 : 0.35 of the traffic (healthy: the lightly loaded ones are idle more).
* PP 2 serving across two nodes (TP 8 per stage): two virtual engines (micro-batches) in flight;
  stage 0 runs its layers, then each TP rank sends the hidden states and the residual (two
  NCCL sends) to the same TP rank of stage 1 on a 2-rank PP comm; stage 1 receives, runs its layers
  and samples; a virtual engine's next step starts when its output is back (1 ms). 25 GB/s across
  nodes. Sends and receives run in the compute stream (blocking on the device).
* Disaggregated prefill/decode (16 ranks): two prefill instances (TP 4, node 0) and two decode
  instances (TP 4, node 1); the proxy sends each request to a prefill and a decode instance at once.
  The decode instance's KV receiver thread posts, per request, 4 receives (one per group of layers) on
  a dedicated 2-rank comm per (prefill TP rank, decode TP rank) pair and a side stream, FIFO, so it
  waits on the prefill (healthy: up to seconds under load); the prefill instance's KV sender thread
  posts the matching sends on its side stream right after the prefill forward. The request joins
  the decode batch once all 4 TP shards arrived (its first token costs one prefill token there).
  The main TP forwards are not blocked by transfers; a transfer that never completes blocks its
  side stream for good (later transfers of that rank never start on the device: no record).
* Autoscaling: a replica scaled up mid-run starts 8 s before its comm init, runs a profiling forward
  of 8192 tokens and 35 eager warm-up forwards (CUDA-graph capture), then gets traffic; a replica
  scaled down stops taking requests, finishes the running ones, destroys its comm and exits.
* Probes: GPU_TIMED (NCCL profiler plugin: device start and end on the host clock, visible to the
  agent 1-3 ms later; decode-only forwards of up to 256 sequences replay CUDA graphs and carry
  GRAPH_CAPTURED; a call queued behind a blocked one never starts on the device and has no record;
  `aux` a per-op-type counter for eager calls, 0 for graph replays); ENQUEUED (a host hook in eager
  mode: t_start = host enqueue; host launch of a forward takes 55 % of its device time and the host
  runs up to 3 forwards ahead (asynchronous / multi-step scheduling), COMPLETED only when the CUDA
  event is seen 0.2-1.5 ms after the device finished; aux 0).
* Node agents: one cw.calls.v1 batch per node and comm every 200 ms (per-node phase, 0-10 ms
  jitter) with the records that became visible since the last (an entry record only when a call is
  still open at a flush); cw.progress.v1 per node and comm every 1 s, idle or not, with `p2p`
  counters for send/recv comms; a rank whose process exited is listed with `"exited": true` for 3
  heartbeats, then no longer (docs/architecture.md's optional field). COMM_INIT at start (1-3 s),
  COMM_DESTROY when an engine shuts down. cw.topology.v1 once per rank with coords {tp, pp, dp}.
  Node clocks: offsets uniform +-6 ms, drift +-3 ppm; every time is on its node's clock.

SIMPLIFICATIONS (stated): K representative all-reduces per forward; no speculative decoding, no
MoE all-to-all, no prefix cache effects; the scheduler's CPU time is a constant 0.6-1.4 ms; the
KV transfer per request is 4 sends per TP rank (a real connector sends per layer).

Faults: a hang = the culprit's worker stops (GPU-timed: after a completed all-reduce, it never enters
the next; host-enqueue: its host stops enqueueing, its peers' hosts run on up to 3 forwards), or a
KV sender/receiver thread that never posts; a slow rank = its compute x factor from the onset.

Truth (NAME.truth.json): job, kind (healthy / hang / slow_rank), culprit ranks, onset (hang: the
culprit's last progress, or the launch of the forward it never joined, or its first unposted
transfer; slow: when the slowdown starts), the capture end (hangs: onset + 90-110 s), the
wait-for reasoning (`wait_for`), the layout (engines, comms with ids), the bursts, exits.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from commwatch import wire  # noqa: E402
from commwatch.capture import CaptureWriter, Message  # noqa: E402

T0_NS = 1796169600 * 10**9  # 2026-12-02 00:00 UTC
GPN = 8
FLUSH_S = 0.2
HB_S = 1.0
INF = float("inf")
AR, SEND, RECV = wire.OP_ALLREDUCE, wire.OP_SEND, wire.OP_RECV
GPU, ENQ = "gpu", "enq"


# ------------------------------------------------------------------------------------------------
# records


class Comm:
    def __init__(self, idx, name, cid, members, node_of):
        self.idx, self.name, self.cid, self.members = idx, name, cid, list(members)
        self.pos = {r: i for i, r in enumerate(self.members)}
        self.n = len(self.members)
        self.nodes = len({node_of[r] for r in self.members})
        self.seq = 0  # next collective seq (members issue the same order)
        self.opcount = 0
        self.init_t = None
        self.destroy_t = None


class Sim:
    FIELDS = ("kind", "rank", "comm", "seq", "op", "nbytes", "peer", "crank", "nranks", "aux",
              "ts", "te", "flags", "vs", "ve")

    def __init__(self, job, world, seed):
        self.job, self.world = job, world
        self.node_of = [r // GPN for r in range(world)]
        self.comms = []
        self.chunks = []
        self.cbuf = []  # collectives: (ranks, cranks, comm, seq, nbytes, nranks, aux, flags, ts, te, vs, ve)
        self.rng = np.random.default_rng(seed)
        self.p2pseq = {}
        self.exit_t = {}  # rank -> process exit time
        self.start_t = {}  # rank -> process start time (scaled up mid-run)

    def comm(self, name, members):
        h = hashlib.blake2b(f"{self.job}/{name}".encode(), digest_size=8).digest()
        c = Comm(len(self.comms), name, int.from_bytes(h, "little") | 1, members, self.node_of)
        self.comms.append(c)
        return c

    def add(self, **cols):
        n = max(np.size(v) for v in cols.values())
        if n == 0:
            return
        out = {}
        for f in self.FIELDS:
            v = np.asarray(cols[f])
            out[f] = np.broadcast_to(v, (n,)).copy() if v.ndim == 0 else v.ravel().copy()
        self.chunks.append(out)

    def arrays(self):
        res = {}
        for f in self.FIELDS:
            dt = np.float64 if f in ("ts", "te", "vs", "ve") else np.int64
            res[f] = np.concatenate([np.asarray(p[f], dtype=dt) for p in self.chunks]) if self.chunks \
                else np.zeros(0, dt)
        if self.cbuf:
            cb = self.cbuf
            lens = np.array([len(t[0]) for t in cb])
            ext = {"kind": np.full(lens.sum(), wire.KIND_CALL), "op": np.full(lens.sum(), AR),
                   "peer": np.full(lens.sum(), -1)}
            for k, f in ((0, "rank"), (1, "crank")):
                ext[f] = np.concatenate([t[k] for t in cb])
            for k, f in ((2, "comm"), (3, "seq"), (4, "nbytes"), (5, "nranks"), (6, "aux"), (7, "flags")):
                ext[f] = np.repeat(np.array([t[k] for t in cb], dtype=np.int64), lens)
            for k, f in ((8, "ts"), (9, "te"), (10, "vs"), (11, "ve")):
                ext[f] = np.concatenate([t[k] for t in cb])
            for f in self.FIELDS:
                res[f] = np.concatenate([res[f], ext[f].astype(res[f].dtype)])
        return res

    # a collective instance: arrays over the members that have a record
    def coll(self, c, ranks, ts, te, vs, ve, flags, nbytes, aux):
        seq = c.seq
        c.seq += 1
        keep = np.isfinite(ts)
        ranks = np.asarray(ranks)
        crank = np.arange(c.n) if len(ranks) == c.n else np.array([c.pos[int(r)] for r in ranks])
        if keep.all():
            self.cbuf.append((ranks, crank, c.idx, seq, int(nbytes), c.n, aux, flags, ts, te, vs, ve))
        elif keep.any():
            self.cbuf.append((ranks[keep], crank[keep], c.idx, seq, int(nbytes), c.n, aux, flags, ts[keep],
                              te[keep], vs[keep], ve[keep]))
        return seq

    def p2p(self, c, rank, peer_rank, op, ts, te, vs, ve, flags, nbytes):
        key = (c.idx, rank, peer_rank, op)
        k = self.p2pseq.get(key, 0)
        self.p2pseq[key] = k + 1
        if math.isfinite(ts):
            self.add(kind=wire.KIND_CALL, rank=rank, comm=c.idx, seq=k, op=op, nbytes=int(nbytes),
                     peer=c.pos[peer_rank], crank=c.pos[rank], nranks=c.n, aux=0, ts=ts, te=te, flags=flags,
                     vs=vs, ve=ve)
        return k


# ------------------------------------------------------------------------------------------------
# load: bursts of requests and a continuous-batching scheduler


def make_bursts(rng, t_begin, t_end, gaps, dur=(5, 40), rate=(1.0, 8.0)):
    """Bursts [(start, end, rate)] separated by idle gaps drawn from `gaps` (a list or a (lo, hi) range)."""
    out = []
    t = t_begin
    i = 0
    while t < t_end:
        d = float(rng.uniform(*dur))
        out.append((t, min(t + d, t_end), float(rng.uniform(*rate))))
        g = gaps[i % len(gaps)] if isinstance(gaps, list) else float(rng.uniform(*gaps))
        t = t + d + g
        i += 1
    return out


def arrivals(rng, bursts, share=1.0):
    reqs = []
    for a, b, rate in bursts:
        t = a
        while True:
            t += float(rng.exponential(1.0 / (rate * share)))
            if t >= b:
                break
            p = int(np.clip(rng.lognormal(math.log(900), 0.8), 30, 6000))
            o = int(np.clip(rng.lognormal(math.log(180), 0.9), 8, 1500))
            reqs.append([t, p, o])
    return reqs


class Sched:
    """Continuous batching with chunked prefill. plan(t) -> (n_dec, n_pref) or None (idle)."""

    def __init__(self, reqs, budget=2048, max_seqs=256):
        self.pending = deque(sorted(reqs))
        self.waiting = deque()  # [remaining prompt, out, req]
        self.running = []  # [remaining out]
        self.budget, self.max_seqs = budget, max_seqs
        self._plan = None

    def next_arrival(self):
        return self.pending[0][0] if self.pending else INF

    def admit(self, t):
        while self.pending and self.pending[0][0] <= t:
            r = self.pending.popleft()
            self.waiting.append([r[1], r[2], r])

    def plan(self, t):
        self.admit(t)
        if not self.waiting and not self.running:
            return None
        n_dec = len(self.running)
        room = self.budget - n_dec
        pref = []
        for w in self.waiting:
            if room <= 0 or n_dec + len(pref) >= self.max_seqs:
                break
            take = min(w[0], room)
            pref.append((w, take))
            room -= take
        self._plan = pref
        return n_dec, sum(tk for _, tk in pref)

    def commit(self):
        self.running = [o - 1 for o in self.running if o > 1]
        for w, take in self._plan:
            w[0] -= take
            if w[0] <= 0:
                self.waiting.remove(w)
                self.running.append(w[1] - 1)
        self._plan = None


def fwd_time(n_dec, n_pref):
    return 0.012 + 0.00022 * n_dec + 0.000085 * n_pref


def ar_dur(nbytes, cross=False):
    return 12e-6 + nbytes / (25e9 if cross else 170e9)


# ------------------------------------------------------------------------------------------------
# a TP engine


class TPEngine:
    """One TP group. GPU-timed (synchronous scheduler) or host-enqueue (host runs ahead, eager)."""

    def __init__(self, sim, name, ranks, probe=GPU, K=8, hidden=8192, graphs=True, Q=3, dp=0, pp=0):
        self.sim, self.name, self.ranks = sim, name, list(ranks)
        self.n = len(ranks)
        self.comm = sim.comm(name, ranks)
        self.probe, self.K, self.hidden, self.graphs, self.Q = probe, K, hidden, graphs, Q
        self.rng = sim.rng
        self.d = np.zeros(self.n)  # device free time per rank
        self.slow = {}  # rank position -> (t_from, factor)
        self.hang = None  # dict(pos, t, chunk) : from the first forward launched at/after t
        self.hung = False  # the culprit stopped
        self.onset = None
        self.fwds = 0
        self.dev_out = []  # per forward: driver output time on the device
        self.host_end = 0.0
        self.dead_from = INF
        self.fwd_log = []  # (t_launch, n_dec, n_pref)
        self.coords = {r: {"tp": i, "pp": pp, "dp": dp} for i, r in enumerate(self.ranks)}

    def factors(self, t):
        s = np.ones(self.n)
        for p, (t0, f) in self.slow.items():
            if t >= t0:
                s[p] = f
        return s

    def chunk_plan(self, n_dec, n_pref):
        T = fwd_time(n_dec, n_pref)
        cj = T * 0.9 / self.K
        return T, cj, T * 0.1, (n_dec + n_pref) * self.hidden * 2

    def forward_gpu(self, t_launch, n_dec, n_pref, begin=None, tail=True):
        """Device-timed forward. Returns per-rank done times (inf where blocked)."""
        sim, rng, n, K = self.sim, self.rng, self.n, self.K
        T, cj, tl, nbytes = self.chunk_plan(n_dec, n_pref)
        s = self.factors(t_launch)
        graph = self.graphs and n_pref == 0 and n_dec <= 256
        flags = wire.FLAG_GPU_TIMED | (wire.FLAG_GRAPH_CAPTURED if graph else 0)
        start = np.maximum(self.d, t_launch + rng.uniform(5e-5, 4e-4, n)) if begin is None else begin
        stop_at = None
        if self.hang is not None and not self.hung and t_launch >= self.hang["t"]:
            stop_at = self.hang["chunk"] if self.hang["chunk"] is not None else int(rng.integers(1, K))
            self.hung = True
        prev = start.copy()
        if self.hung and stop_at is None:
            prev[self.hang["pos"]] = INF
        for j in range(K):
            e = prev + cj * s * (1 + rng.normal(0, 0.02, n))
            if stop_at is not None and j == stop_at:
                p = self.hang["pos"]
                if self.onset is None:
                    self.onset = float(prev[p]) if j > 0 else float(t_launch)
                e[p] = INF
            end = e.max() + ar_dur(nbytes)
            comp = end + rng.uniform(0, 8e-6, n) if math.isfinite(end) else np.full(n, INF)
            aux = 0 if graph else self.comm.opcount + 1
            self.comm.opcount += 1
            vs = e + rng.uniform(1e-3, 3e-3, n)
            ve = comp + rng.uniform(1e-3, 3e-3, n)
            sim.coll(self.comm, self.ranks, e, comp, vs, ve, flags, nbytes, aux)
            prev = comp
            if stop_at is not None and j == stop_at:
                break
        done = prev + (tl * s if tail else 0.0)
        self.d = done
        self.fwds += 1
        self.fwd_log.append((t_launch, n_dec, n_pref))
        return done

    def forward_enq(self, t_host, n_dec, n_pref):
        """Host-enqueue forward: returns (host end, driver's device output time)."""
        sim, rng, n, K = self.sim, self.rng, self.n, self.K
        T, cj, tl, nbytes = self.chunk_plan(n_dec, n_pref)
        s = self.factors(t_host)
        hl = max(0.55 * T, 0.004) / K
        h0 = t_host + rng.uniform(5e-5, 4e-4, n)
        stop_at = None
        if self.hang is not None and not self.hung and t_host >= self.hang["t"]:
            stop_at = self.hang["chunk"] if self.hang["chunk"] is not None else int(rng.integers(1, K))
            self.hung = True
        p = self.hang["pos"] if self.hang else None
        prev = np.maximum(self.d, h0)
        for j in range(K):
            henq = h0 + (j + 1) * hl * (1 + rng.normal(0, 0.03, n))
            if self.hung and (stop_at is None or j >= stop_at):
                if self.onset is None:
                    self.onset = float(henq[p] - hl * 0.5)
                henq[p] = INF
            e = np.maximum(prev + cj * s * (1 + rng.normal(0, 0.02, n)), henq)
            end = e.max() + ar_dur(nbytes)
            comp = end + rng.uniform(0, 8e-6, n) if math.isfinite(end) else np.full(n, INF)
            sim.coll(self.comm, self.ranks, henq, comp, henq + rng.uniform(5e-5, 2e-4, n),
                     comp + rng.uniform(2e-4, 1.5e-3, n), wire.FLAG_ENQUEUED, nbytes, 0)
            prev = comp
        done = prev + tl * s
        self.d = done
        self.fwds += 1
        self.fwd_log.append((t_host, n_dec, n_pref))
        return float(h0.max() + K * hl + 0.0008), float(done[0])

    def serve(self, sched, t_begin, t_end, drain=False):
        """Run the scheduler loop until t_end (or until the engine blocks); drain: finish the running
        requests first (a graceful shutdown)."""
        rng = self.rng
        t = t_begin
        if self.probe == GPU:
            while t < t_end or (drain and (sched.running or sched.waiting)):
                pl = sched.plan(t)
                if pl is None:
                    t = max(t, sched.next_arrival()) + float(rng.uniform(3e-4, 1e-3))
                    continue
                done = self.forward_gpu(t, *pl)
                sched.commit()
                out = float(done[0])
                if not math.isfinite(out) or not np.isfinite(done).all():
                    return INF
                t = out + float(rng.uniform(6e-4, 1.4e-3))
            return t
        # host-enqueue: the host may run Q forwards ahead of the device
        while t < t_end:
            pl = sched.plan(t)
            if pl is None:
                # idle: the host waits for the device to drain, then for the next request
                last = self.dev_out[-1] if self.dev_out else t
                if not math.isfinite(last):
                    return INF
                t = max(t, last, sched.next_arrival()) + float(rng.uniform(3e-4, 1e-3))
                continue
            if len(self.dev_out) >= self.Q:
                gate = self.dev_out[-self.Q]
                if not math.isfinite(gate):
                    return INF
                t = max(t, gate)
            hend, out = self.forward_enq(t, *pl)
            sched.commit()
            self.dev_out.append(out)
            t = hend + float(rng.uniform(6e-4, 1.4e-3))
        return t


# ------------------------------------------------------------------------------------------------
# scenario builders. Each returns (sim, coords, info) with info: culprits, onset, end, notes


def new_sim(sc, seed, world):
    return Sim(sc["job"], world, seed)


def init_comms(sim, t=None):
    for c in sim.comms:
        if c.init_t is None:
            c.init_t = (1.0 + 2.0 * float(sim.rng.random())) if t is None else t


def build_tp(sc, seed):
    """`engines` TP engines (DP replicas) of `tp` ranks each."""
    tp, ne = sc["tp"], sc["engines"]
    sim = new_sim(sc, seed, tp * ne)
    rng = sim.rng
    T = sc["duration"]
    shares = sc.get("shares", [1.0] * ne)
    engines = []
    coords = {}
    for e in range(ne):
        eng = TPEngine(sim, f"tp{e}", range(e * tp, (e + 1) * tp), probe=sc["probe"], K=sc.get("K", 8),
                       graphs=sc.get("graphs", True), dp=e)
        coords.update(eng.coords)
        engines.append(eng)
    info = {"bursts": {}}
    for e, eng in enumerate(engines):
        if e in sc.get("start", {}):
            eng.comm.init_t = sc["start"][e]
    init_comms(sim)
    for e, eng in enumerate(engines):
        if e in sc.get("custom_bursts", {}):
            bursts = sc["custom_bursts"][e]
        else:
            bursts = make_bursts(rng, 4.0 + 3 * float(rng.random()), T, sc.get("gaps", (10, 90)),
                                 dur=sc.get("burst_dur", (5, 40)), rate=sc.get("rate", (1.5, 8.0)))
        reqs = arrivals(rng, bursts, shares[e])
        info["bursts"][eng.name] = [[round(a, 2), round(b, 2), round(r * shares[e], 2)] for a, b, r in bursts]
        f = sc.get("fault")
        if f and f["engine"] == e:
            pos = f["rank"] - e * tp
            if f["type"] == "slow":
                eng.slow[pos] = (f["t"], f["factor"])
            else:
                eng.hang = {"pos": pos, "t": f["t"], "chunk": f.get("chunk")}
        stop = sc.get("shutdown", {}).get(e)
        t_stop = stop if stop is not None else T
        t_go = 3.5
        start = sc.get("start", {}).get(e)
        if start is not None:
            # scaled up mid-run: processes start, comm init, a profiling forward (8192 tokens) and the
            # warm-up forwards of CUDA-graph capture (eager, 35 batch sizes), then the balancer sends traffic
            eng.comm.init_t = start
            for r in eng.ranks:
                sim.start_t[r] = start - 8.0
            t = start + 2.0
            done = eng.forward_gpu(t, 0, 8192)
            t = float(done[0]) + 0.5
            for bs in list(range(256, 0, -8))[:35]:
                eng.graphs = False
                done = eng.forward_gpu(t, bs, 0)
                t = float(done[0]) + float(rng.uniform(0.01, 0.03))
            eng.graphs = sc.get("graphs", True)
            t_go = t + 1.0
            reqs = [q for q in reqs if q[0] >= t_go]
            info["scale_up_ready_s"] = round(t_go, 2)
        last = eng.serve(Sched([r for r in reqs if r[0] < t_stop]), t_go, t_stop, drain=stop is not None)
        if stop is not None:
            # drain: the scheduler stopped admitting at t_stop; let in-flight work finish, then destroy
            t_d = (last if math.isfinite(last) else t_stop) + 1.5 + float(rng.random())
            eng.comm.destroy_t = t_d
            for r in eng.ranks:
                sim.exit_t[r] = t_d + 0.4 + 0.2 * float(rng.random())
        if eng.onset is not None:
            info["onset"] = eng.onset
        info.setdefault("forwards", {})[eng.name] = eng.fwds
    info["engines"] = {eng.name: eng.ranks for eng in engines}
    return sim, coords, info


def build_pp(sc, seed):
    """PP 2 serving, TP 8 per stage, stage 0 on node 0, stage 1 on node 1."""
    tp = 8
    sim = new_sim(sc, seed, 2 * tp)
    rng = sim.rng
    T = sc["duration"]
    A = TPEngine(sim, "tp_stage0", range(0, tp), probe=GPU, K=4, graphs=True, pp=0)
    B = TPEngine(sim, "tp_stage1", range(tp, 2 * tp), probe=GPU, K=4, graphs=True, pp=1)
    pps = [sim.comm(f"pp{i}", [i, tp + i]) for i in range(tp)]
    init_comms(sim)
    coords = {**A.coords, **B.coords}
    f = sc.get("fault")
    if f and f["type"] == "slow":
        (A if f["rank"] < tp else B).slow[f["rank"] % tp] = (f["t"], f["factor"])
    bursts = make_bursts(rng, 5.0, T, sc.get("gaps", (10, 40)), dur=sc.get("burst_dur", (20, 50)),
                         rate=sc.get("rate", (3.0, 8.0)))
    reqs = arrivals(rng, bursts)
    ve = [Sched(reqs[0::2]), Sched(reqs[1::2])]
    ready = [3.5, 3.5]
    nsend = 0
    while True:
        plans = []
        for v in (0, 1):
            pl = ve[v].plan(ready[v])
            plans.append(pl)
        cand = [v for v in (0, 1) if plans[v] is not None]
        if not cand:
            nxt = min(s.next_arrival() for s in ve)
            if nxt >= T:
                break
            for v in (0, 1):
                ready[v] = max(ready[v], nxt)
            continue
        v = min(cand, key=lambda x: ready[x])
        # the other virtual engine's plan stays uncommitted (re-planned next time)
        if ready[v] >= T:
            break
        n_dec, n_pref = plans[v]
        t_launch = ready[v]
        doneA = A.forward_gpu(t_launch, n_dec, n_pref, tail=False)
        nbytes = (n_dec + n_pref) * A.hidden * 2
        # two sends per rank (hidden states, residual), in-stream; stage-1 recvs posted when it is free
        postB = np.maximum(B.d, t_launch + rng.uniform(5e-5, 4e-4, tp))
        sA, sB = doneA.copy(), postB.copy()
        for _k in range(2):
            for i in range(tp):
                es, er = float(sA[i]), float(sB[i])
                end = max(es, er) + ar_dur(nbytes, cross=True) + float(rng.uniform(0, 2e-5))
                e2 = end + float(rng.uniform(0, 5e-6))
                sim.p2p(pps[i], i, tp + i, SEND, es, end, es + float(rng.uniform(1e-3, 3e-3)),
                        end + float(rng.uniform(1e-3, 3e-3)), wire.FLAG_GPU_TIMED, nbytes)
                sim.p2p(pps[i], tp + i, i, RECV, er, e2, er + float(rng.uniform(1e-3, 3e-3)),
                        e2 + float(rng.uniform(1e-3, 3e-3)), wire.FLAG_GPU_TIMED, nbytes)
                sA[i], sB[i] = end, e2
                nsend += 1
        A.d = sA
        doneB = B.forward_gpu(t_launch, n_dec, n_pref, begin=sB)
        ve[v].commit()
        ready[v] = float(doneB[0]) + 0.001 + float(rng.uniform(0, 4e-4))
    info = {"bursts": {"pp": [[round(a, 2), round(b, 2), round(r, 2)] for a, b, r in bursts]},
            "forwards": {"stage0": A.fwds, "stage1": B.fwds}, "pp_sends": nsend,
            "engines": {"stage0": A.ranks, "stage1": B.ranks}}
    return sim, coords, info


def build_disagg(sc, seed):
    """2 prefill instances (TP 4, node 0) -> 2 decode instances (TP 4, node 1) over KV comms."""
    tp = 4
    sim = new_sim(sc, seed, 16)
    rng = sim.rng
    T = sc["duration"]
    P = [TPEngine(sim, f"prefill{i}", range(i * tp, (i + 1) * tp), K=8, graphs=False, dp=i) for i in range(2)]
    D = [TPEngine(sim, f"decode{i}", range(8 + i * tp, 8 + (i + 1) * tp), K=8, graphs=True, dp=2 + i)
         for i in range(2)]
    kv = {(p, d, i): sim.comm(f"kv_p{p}_d{d}_t{i}", [P[p].ranks[i], D[d].ranks[i]])
          for p in range(2) for d in range(2) for i in range(tp)}
    init_comms(sim)
    coords = {}
    for e in P + D:
        coords.update(e.coords)
    bursts = sc.get("bursts_list") or make_bursts(rng, 5.0, T, sc.get("gaps", (10, 60)),
                                                  dur=sc.get("burst_dur", (10, 40)), rate=sc.get("rate", (2.0, 7.0)))
    reqs = arrivals(rng, bursts)
    f = sc.get("fault") or {}
    if f.get("type") == "slow":
        for e in P + D:
            if f["rank"] in e.ranks:
                e.slow[e.ranks.index(f["rank"])] = (f["t"], f["factor"])
    # route: prefill round robin, decode round robin (independently)
    routed = [[], []]
    req_info = []
    for k, r in enumerate(reqs):
        p, d = k % 2, (k // 2 + k) % 2
        routed[p].append(r)
        req_info.append({"req": r, "p": p, "d": d})
    # prefill engines: prefill-only forwards (max_tokens=1 requests); record which requests each forward completed
    kv_ready = {}
    send_free = {}  # (rank) side-stream free
    send_post = {}  # id(req) -> per tp rank post time on prefill side
    kv_send_stuck = f.get("type") == "kv_send_stuck"
    for p, eng in enumerate(P):
        sched = Sched(routed[p], budget=4096, max_seqs=64)
        t = 3.5
        while t < T:
            pl = sched.plan(t)
            if pl is None:
                t = max(t, sched.next_arrival()) + float(rng.uniform(3e-4, 1e-3))
                continue
            finishing = [w[2] for w, take in sched._plan if w[0] - take <= 0]
            done = eng.forward_gpu(t, 0, pl[1])
            sched.commit()
            # prefill requests finish right away (their one token); drop them from running
            sched.running = []
            for rq in finishing:
                send_post[id(rq)] = done.copy()
            t = float(done[0]) + float(rng.uniform(6e-4, 1.4e-3))
    # KV transfers, per comm in request order
    onset = None
    stuck_rank = f.get("rank") if kv_send_stuck else None
    recv_stuck_rank = f.get("rank") if f.get("type") == "kv_recv_hang" else None
    recv_free = {}
    kv_bytes_tok = 80 * 8 * 128 * 2 * 2 // tp  # K and V, 80 layers, 8 KV heads, bf16, per TP shard
    arrivals_d = [[], []]
    for ri in sorted(req_info, key=lambda x: x["req"][0]):
        rq = ri["req"]
        if id(rq) not in send_post:
            continue  # never prefilled within the capture
        p, d = ri["p"], ri["d"]
        nbytes = rq[1] * kv_bytes_tok // 4
        done_all = []
        for i in range(tp):
            src, dst = P[p].ranks[i], D[d].ranks[i]
            c = kv[(p, d, i)]
            # decode side: receiver thread posts when the proxy hands it the request (+2-5 ms)
            post_r = rq[0] + float(rng.uniform(2e-3, 5e-3))
            post_s = float(send_post[id(rq)][i]) + float(rng.uniform(2e-4, 8e-4))
            if stuck_rank is not None and src == stuck_rank and post_s >= f["t"]:
                if onset is None:
                    onset = post_s
                post_s = INF
            if recv_stuck_rank is not None and dst == recv_stuck_rank and post_r >= f["t"]:
                if onset is None:
                    onset = post_r
                post_r = INF
            ts_end = INF
            for _g in range(4):
                es = max(post_s, send_free.get(src, 0.0))
                er = max(post_r, recv_free.get(dst, 0.0))
                if math.isfinite(es) and math.isfinite(er):
                    end = max(es, er) + ar_dur(nbytes, cross=True) + float(rng.uniform(0, 3e-5))
                    e_s, e_r = end, end + float(rng.uniform(0, 5e-6))
                else:
                    e_s = e_r = INF
                sim.p2p(c, src, dst, SEND, es, e_s, es + float(rng.uniform(1e-3, 3e-3)),
                        e_s + float(rng.uniform(1e-3, 3e-3)), wire.FLAG_GPU_TIMED, nbytes)
                sim.p2p(c, dst, src, RECV, er, e_r, er + float(rng.uniform(1e-3, 3e-3)),
                        e_r + float(rng.uniform(1e-3, 3e-3)), wire.FLAG_GPU_TIMED, nbytes)
                # an unposted call occupies no stream; a posted one that never completes blocks it for good
                if math.isfinite(es):
                    send_free[src] = e_s
                if math.isfinite(er):
                    recv_free[dst] = e_r
                ts_end = e_r
            done_all.append(ts_end)
        t_kv = max(done_all)
        if math.isfinite(t_kv):
            arrivals_d[d].append([t_kv + 0.001, 0, rq[2]])
    # a stuck sender thread posts nothing more: its side stream is blocked for good (send_free INF);
    # a stuck receiver: same on the decode side. The decode engines take requests whose KV arrived.
    for d, eng in enumerate(D):
        if recv_stuck_rank is not None and recv_stuck_rank in eng.ranks:
            # the decode rank's process is hung entirely (GIL held by its stuck receiver thread)
            eng.hang = {"pos": eng.ranks.index(recv_stuck_rank), "t": f["t"], "chunk": None}
        sched = Sched([[a, 1, o] for a, _, o in arrivals_d[d]], budget=2048)
        eng.serve(sched, 3.5, T)
    info = {"bursts": {"all": [[round(a, 2), round(b, 2), round(r, 2)] for a, b, r in bursts]},
            "forwards": {e.name: e.fwds for e in P + D}, "requests": len(reqs),
            "engines": {e.name: e.ranks for e in P + D}}
    if onset is not None:
        info["onset"] = onset
    for e in D:
        if e.onset is not None:
            info["onset"] = min(info.get("onset", INF), e.onset)
            info["decode_peers_block_s"] = round(e.onset, 3)
    return sim, coords, info


# ------------------------------------------------------------------------------------------------
# the node agents: batches, heartbeats, topology


def write_capture(sc, sim, coords, path, t_end, seed):
    job, N, node_of = sim.job, sim.world, sim.node_of
    rng = np.random.default_rng(seed * 977 + 1)
    n_nodes = max(node_of) + 1
    off = rng.uniform(-0.006, 0.006, n_nodes)
    drift = rng.uniform(-3e-6, 3e-6, n_nodes)
    nodes = [f"srv-{sc['name'][:6].replace('_', '')}-{i:02d}" for i in range(n_nodes)]

    def ns(t, nd):
        t = np.asarray(t, np.float64)
        return (T0_NS + np.rint((t + off[nd] + drift[nd] * t) * 1e9)).astype(np.int64)

    def ns1(t, nd):
        return int(T0_NS + round((t + off[nd] + drift[nd] * t) * 1e9))

    msgs = []
    for r in range(N):
        nd = node_of[r]
        t = sim.start_t.get(r, 0.0) + 0.2 + 0.05 * float(rng.random())
        v = {"v": 1, "job": job, "ts_ns": ns1(t, nd), "rank": r, "world_size": N, "node": nodes[nd],
             "local_rank": r % GPN, "gpu": "GPU-" + hashlib.md5(f"{job}{r}".encode()).hexdigest()[:12],
             "coords": coords[r]}
        msgs.append(Message("cw.topology.v1", job, v["ts_ns"], json.dumps(v).encode()))
    init_t = {}
    for c in sim.comms:
        for r in c.members:
            ti = c.init_t + 0.01 * float(rng.random())
            init_t[(r, c.idx)] = ti
            sim.add(kind=wire.KIND_COMM_INIT, rank=r, comm=c.idx, seq=0, op=0, nbytes=0, peer=-1, crank=c.pos[r],
                    nranks=c.n, aux=c.nodes, ts=ti, te=0.0, flags=0, vs=ti + 0.001, ve=INF)
            if c.destroy_t is not None:
                td = c.destroy_t + 0.02 * float(rng.random())
                sim.add(kind=wire.KIND_COMM_DESTROY, rank=r, comm=c.idx, seq=0, op=0, nbytes=0, peer=-1,
                        crank=c.pos[r], nranks=c.n, aux=0, ts=td, te=0.0, flags=0, vs=td + 0.001, ve=INF)
    R = sim.arrays()
    R["ve"] = np.where(np.isfinite(R["ve"]), np.maximum(R["ve"], R["vs"] + 1e-6), R["ve"])
    rnode = np.array(node_of)[R["rank"]]
    parts = []
    for nd in range(n_nodes):
        ph = float(rng.uniform(0, FLUSH_S))
        nfl = int((t_end - ph) / FLUSH_S) + 2
        flush = ph + FLUSH_S * np.arange(nfl) + rng.uniform(0, 0.01, nfl)
        sel = np.flatnonzero(rnode == nd)
        if len(sel) == 0:
            continue
        vs, ve = R["vs"][sel], R["ve"][sel]
        fin = np.isfinite(ve)
        bs = np.searchsorted(flush, vs)
        be = np.searchsorted(flush, np.where(fin, ve, 1e18))
        same = fin & (bs == be)
        ce = fin & (be < nfl)
        ce &= flush[np.minimum(be, nfl - 1)] <= t_end
        en = ~same & (bs < nfl)
        en &= flush[np.minimum(bs, nfl - 1)] <= t_end
        for mask, bidx, completed in ((en, bs, False), (ce, be, True)):
            parts.append((nd, sel[mask], bidx[mask], flush[bidx[mask]], completed))
    all_idx = np.concatenate([p[1] for p in parts])
    all_nd = np.concatenate([np.full(len(p[1]), p[0]) for p in parts])
    all_b = np.concatenate([p[2] for p in parts])
    all_ft = np.concatenate([p[3] for p in parts])
    all_c = np.concatenate([np.full(len(p[1]), p[4]) for p in parts])
    recs = wire.empty(len(all_idx))
    recs["kind"] = R["kind"][all_idx]
    recs["op"] = R["op"][all_idx]
    recs["flags"] = R["flags"][all_idx] | np.where(all_c, wire.FLAG_COMPLETED, 0)
    recs["rank"] = R["rank"][all_idx]
    cid = np.array([c.cid for c in sim.comms], dtype=np.uint64)
    recs["comm"] = cid[R["comm"][all_idx]]
    recs["seq"] = R["seq"][all_idx]
    recs["t_start_ns"] = ns(R["ts"][all_idx], all_nd)
    recs["t_end_ns"] = np.where(all_c, ns(np.where(all_c, R["te"][all_idx], 0.0), all_nd), 0)
    recs["bytes"] = R["nbytes"][all_idx]
    recs["comm_rank"] = R["crank"][all_idx]
    recs["peer"] = R["peer"][all_idx]
    recs["nranks"] = R["nranks"][all_idx]
    recs["aux"] = R["aux"][all_idx]
    order = np.lexsort((np.where(all_c, R["ve"][all_idx], R["vs"][all_idx]), R["comm"][all_idx], all_b, all_nd))
    recs = recs[order]
    g_nd, g_b, g_c, g_ft = all_nd[order], all_b[order], R["comm"][all_idx][order], all_ft[order]
    brk = np.flatnonzero((np.diff(g_nd) != 0) | (np.diff(g_b) != 0) | (np.diff(g_c) != 0)) + 1
    starts = np.concatenate([[0], brk]).tolist()
    ends = np.concatenate([brk, [len(recs)]]).tolist()
    ncalls = int(np.count_nonzero(recs["kind"] == wire.KIND_CALL))
    for s0, s1 in zip(starts, ends):
        nd = int(g_nd[s0])
        c = sim.comms[int(g_c[s0])]
        val = wire.encode_batch(recs[s0:s1])
        msgs.append(Message("cw.calls.v1", f"{job}/{wire.comm_hex(c.cid)}", ns1(float(g_ft[s0]) + 0.002, nd), val))
    # heartbeats: collective counters per (rank, comm), p2p counters per (rank, comm, peer, op)
    calls = R["kind"] == wire.KIND_CALL
    isp2p = np.isin(R["op"], [SEND, RECV])
    groups = {}
    for mask, tag in ((calls & ~isp2p, "c"), (calls & isp2p, "p")):
        idx = np.flatnonzero(mask)
        if len(idx) == 0:
            continue
        keyarr = ((R["rank"][idx] * 4096 + R["comm"][idx]) * 64 + np.where(tag == "p", R["peer"][idx], 0)) * 16 \
            + np.where(tag == "p", R["op"][idx], 0)
        o = np.lexsort((R["seq"][idx], keyarr))
        idx, keyarr = idx[o], keyarr[o]
        brk = np.flatnonzero(np.diff(keyarr)) + 1
        for a, z in zip(np.concatenate([[0], brk]).tolist(), np.concatenate([brk, [len(idx)]]).tolist()):
            ii = idx[a:z]
            r, c = int(R["rank"][ii[0]]), int(R["comm"][ii[0]])
            sub = "coll" if tag == "c" else (int(R["peer"][ii[0]]), "send" if R["op"][ii[0]] == SEND else "recv")
            groups.setdefault((r, c), {})[sub] = (np.maximum.accumulate(R["vs"][ii]), np.maximum.accumulate(R["ve"][ii]),
                                                 R["seq"][ii], R["ts"][ii], R["te"][ii])
    n_hb = 0
    for nd in range(n_nodes):
        ph = float(rng.uniform(0, HB_S))
        for c in sim.comms:
            local = [r for r in c.members if node_of[r] == nd]
            if not local:
                continue
            t0 = min(init_t[(r, c.idx)] for r in local) + 0.05
            hb = np.arange(math.ceil((t0 - ph) / HB_S), int((t_end - ph) / HB_S) + 1) * HB_S + ph
            hb = hb + rng.uniform(0, 0.005, len(hb))
            hb = hb[(hb <= t_end) & (hb >= t0)]
            for t in hb.tolist():
                ranks = []
                for r in local:
                    ex = sim.exit_t.get(r, INF)
                    if t > ex + 3 * HB_S + 0.05:
                        continue
                    g = groups.get((r, c.idx), {})
                    ent = {"rank": r, "started": -1, "completed": -1, "t_last_start_ns": 0, "t_last_end_ns": 0}
                    p2p = []
                    for sub, (vsa, vea, seqs, tsa, tea) in sorted(g.items(), key=lambda kv: str(kv[0])):
                        a = int(np.searchsorted(vsa, t, "right")) - 1
                        z = int(np.searchsorted(vea, t, "right")) - 1
                        if sub == "coll":
                            ent["started"] = int(seqs[a]) if a >= 0 else -1
                            ent["completed"] = int(seqs[z]) if z >= 0 else -1
                            ent["t_last_start_ns"] = ns1(float(tsa[a]), nd) if a >= 0 else 0
                            ent["t_last_end_ns"] = ns1(float(tea[z]), nd) if z >= 0 else 0
                        elif a >= 0:
                            p2p.append({"peer": sub[0], "op": sub[1], "started": int(seqs[a]),
                                        "completed": int(seqs[z]) if z >= 0 else -1})
                    if p2p:
                        ent["p2p"] = p2p
                    if t >= ex:
                        ent["exited"] = True
                    ranks.append(ent)
                if not ranks:
                    continue
                tsn = ns1(t, nd)
                v = {"v": 1, "job": job, "node": nodes[nd], "ts_ns": tsn, "comm": wire.comm_hex(c.cid), "ranks": ranks}
                msgs.append(Message("cw.progress.v1", f"{job}/{wire.comm_hex(c.cid)}", tsn,
                                    json.dumps(v, separators=(",", ":")).encode()))
                n_hb += 1
    msgs.sort(key=lambda m: m.ts_ns)
    with CaptureWriter(path) as w:
        for m in msgs:
            w.write(m)
    for m in msgs:  # every batch against the contract
        if m.topic == "cw.calls.v1":
            wire.decode_batch(m.value, comm=wire.parse_comm(m.key.split("/", 1)[1]))
    return {"messages": len(msgs), "call_records": ncalls, "heartbeats": n_hb, "nodes": nodes,
            "clock_offsets_ms": [round(float(o) * 1e3, 2) for o in off]}


# ------------------------------------------------------------------------------------------------
# scenarios


def scenarios():
    S = []
    S.append(dict(name="ctl_bursty_tp8", build="tp", kind="healthy", tp=8, engines=1, probe=GPU, duration=280.0,
                  gaps=[25, 70, 12, 90, 40, 15, 60], burst_dur=(6, 35),
                  desc="one TP 8 engine (Llama-70B class, 8 all-reduces recorded per forward), GPU-timed, CUDA "
                       "graphs in decode; bursts of requests with idle gaps of 12-90 s (no collective at all)",
                  wait_for="healthy: nobody waits on anybody for long; idle gaps have nobody inside a call"))
    S.append(dict(name="ctl_dp_skew", build="tp", kind="healthy", tp=4, engines=4, probe=GPU, duration=220.0,
                  shares=[1.0, 0.6, 0.45, 0.35], gaps=(10, 60),
                  desc="4 data-parallel replicas (TP 4 each, 2 nodes), a load balancer sending 1.0:0.6:0.45:0.35 "
                       "of the traffic: the replicas' call rates differ 2-3x and the light ones idle more",
                  wait_for="healthy: replicas are independent (no comm joins them); a less loaded replica is "
                           "nobody's culprit"))
    S.append(dict(name="ctl_disagg", build="disagg", kind="healthy", duration=200.0,
                  desc="disaggregated prefill/decode: 2 prefill instances (TP 4, node 0) send KV caches to 2 "
                       "decode instances (TP 4, node 1) over 16 two-rank comms; decode receivers wait on prefill",
                  wait_for="healthy: decode receivers wait inside recv for the prefill forward (hundreds of ms "
                           "to seconds under load), then complete"))
    S.append(dict(name="ctl_pp2", build="pp", kind="healthy", duration=200.0,
                  desc="PP 2 serving across two nodes, TP 8 per stage, two micro-batches in flight, activations "
                       "sent stage 0 -> stage 1 on 8 two-rank comms",
                  wait_for="healthy"))
    S.append(dict(name="ctl_shutdown", build="tp", kind="healthy", tp=8, engines=2, probe=GPU, duration=220.0,
                  gaps=(10, 40), shutdown={1: 100.0},
                  desc="2 TP 8 replicas; replica 1 (ranks 8-15, node 1) is scaled down at 100 s: it stops taking "
                       "requests, drains, destroys its comm (COMM_DESTROY) and its processes exit (agent: exited)",
                  wait_for="healthy: nobody waits on the exited ranks; nothing may page"))
    S.append(dict(name="ctl_scale_up", build="tp", kind="healthy", tp=8, engines=3, probe=GPU, duration=180.0,
                  gaps=(8, 30), start={2: 90.0}, shares=[1.0, 0.8, 1.0],
                  desc="autoscaling: 2 TP 8 replicas serve; a third (ranks 16-23, node 2) starts at 82 s: comm init "
                       "at 90 s, a profiling forward of 8192 tokens and 35 CUDA-graph warm-up forwards, then the "
                       "balancer sends it traffic",
                  wait_for="healthy: a new comm and new ranks mid-run; nobody waits on anybody"))
    S.append(dict(name="ctl_fullrate_enq", build="tp", kind="healthy", tp=4, engines=1, probe=ENQ, duration=100.0,
                  K=64, graphs=False, gaps=(10, 30), burst_dur=(8, 20),
                  desc="a TP 4 engine (8B, 32 layers) at the real cadence: 64 all-reduces per forward, eager "
                       "mode, host-enqueue hook (host runs up to 3 forwards ahead)",
                  wait_for="healthy"))
    # ---- faults
    S.append(dict(name="hang_decode_gpu", build="tp", kind="hang", tp=8, engines=2, probe=GPU, duration=260.0,
                  custom_bursts={0: [(5.0, 30.0, 4.0), (60.0, 160.0, 5.0)]}, gaps=(10, 40),
                  fault={"engine": 0, "rank": 5, "type": "hang", "t": 100.0}, culprits=[5], after_s=90.0,
                  desc="2 TP 8 replicas, GPU-timed with CUDA graphs; rank 5's worker stops mid-decode (after an "
                       "all-reduce inside a forward) and never enters the next all-reduce",
                  wait_for="ranks 0-4, 6, 7 are inside all-reduce k of comm tp0 on their devices (their later calls "
                           "never start: no records); rank 5 is inside no call and made no progress: the root. "
                           "Replica 1 (8-15) is unaffected"))
    S.append(dict(name="hang_decode_enq", build="tp", kind="hang", tp=8, engines=2, probe=ENQ, graphs=False,
                  duration=260.0, custom_bursts={0: [(5.0, 30.0, 4.0), (60.0, 160.0, 5.0)]}, gaps=(10, 40),
                  fault={"engine": 0, "rank": 3, "type": "hang", "t": 100.0}, culprits=[3], after_s=90.0,
                  desc="the same under a host-enqueue hook in eager mode: rank 3's host stops enqueueing mid-forward; "
                       "its peers' hosts enqueue 2 more decode steps behind the blocked all-reduce",
                  wait_for="ranks 0-2, 4-7 have the all-reduce rank 3 never enqueued as their oldest open call, "
                           "and ~2 forwards of calls queued behind it (symptoms); rank 3's enqueued calls all "
                           "completed: it is in no call, the root"))
    S.append(dict(name="hang_kv_send", build="disagg", kind="hang", duration=300.0,
                  bursts_list=[(5.0, 40.0, 4.0), (60.0, 240.0, 3.5)],
                  fault={"type": "kv_send_stuck", "rank": 2, "t": 100.0}, culprits=[2], after_s=90.0,
                  desc="disaggregated: prefill rank 2's KV sender thread deadlocks; it never posts its sends, "
                       "while its main loop keeps running prefill forwards with its TP peers",
                  wait_for="the decode ranks of TP position 2 (10, 14) wait inside a recv from rank 2 on their "
                           "KV comm, posted, never matched; rank 2 never entered the matching send (it waits on "
                           "nobody). Their KV receive streams are blocked, so prefill1's TP-2 rank 6 then waits "
                           "inside a send to 10 or 14 whose recv never starts (6 -> 10 -> 2). Rank 2 is the root "
                           "though it still progresses on its TP comm; 6, 10, 14 are victims"))
    S.append(dict(name="hang_kv_recv", build="disagg", kind="hang", duration=300.0,
                  bursts_list=[(5.0, 40.0, 4.0), (60.0, 240.0, 3.5)],
                  fault={"type": "kv_recv_hang", "rank": 13, "t": 100.0}, culprits=[13], after_s=90.0,
                  desc="disaggregated: decode rank 13 (decode1 TP 1) hangs (its process stuck): it posts no more "
                       "KV receives and stops decoding",
                  wait_for="its decode TP peers 12, 14, 15 wait in a decode all-reduce it never entered; prefill "
                           "ranks 1 and 5 wait inside KV sends to it that it never matched (their later sends, to "
                           "decode0's rank 9 too, queue behind on that side stream, so 9 waits in a recv on 1: "
                           "9 -> 1 -> 13); 13 is in no call: the root"))
    S.append(dict(name="hang_after_idle", build="tp", kind="hang", tp=8, engines=2, probe=GPU, duration=260.0,
                  custom_bursts={0: [(4.0, 25.0, 5.0), (95.0, 200.0, 5.0)]}, max_out=500, gaps=(10, 40),
                  fault={"engine": 0, "rank": 6, "type": "hang", "t": 94.9, "chunk": 0}, culprits=[6],
                  after_s=110.0,
                  desc="replica 0 idle ~60 s (nothing to do), then the first all-reduce of the first forward after "
                       "the idle gap: rank 6 never enters it (its worker did not pick up the scheduler's message)",
                  wait_for="ranks 0-5, 7 are inside all-reduce #s on tp0; rank 6 is in no call and last progressed "
                           "before the idle gap like everybody: the rank that never entered is the root"))
    S.append(dict(name="hang_after_idle_enq", build="tp", kind="hang", tp=8, engines=1, probe=ENQ, graphs=False,
                  duration=260.0, custom_bursts={0: [(4.0, 25.0, 5.0), (95.0, 200.0, 5.0)]}, max_out=500,
                  fault={"engine": 0, "rank": 1, "type": "hang", "t": 94.9, "chunk": 0}, culprits=[1],
                  after_s=110.0,
                  desc="single TP 8 engine, host-enqueue: ~60 s idle, then rank 1 never enqueues the first "
                       "forward's calls; the others enqueue 3 forwards",
                  wait_for="ranks 0, 2-7 hold all-reduce #s as their oldest open call with ~3 forwards queued behind; "
                           "rank 1 enqueued nothing: the root"))
    S.append(dict(name="slow_decode_dp", build="tp", kind="slow_rank", tp=4, engines=4, probe=GPU, duration=240.0,
                  shares=[1.0, 0.6, 0.45, 0.35], gaps=(8, 30), rate=(3.0, 8.0),
                  fault={"engine": 1, "rank": 6, "type": "slow", "t": 70.0, "factor": 1.5}, culprits=[6],
                  desc="4 DP replicas with skewed load (as ctl_dp_skew); from 70 s rank 6's GPU (replica 1, TP 2) "
                       "computes 1.5x slower (throttled)",
                  wait_for="ranks 4, 5, 7 enter every all-reduce of tp1 early and wait on 6 (victims); 6 enters "
                           "last every time and waits on nobody"))
    S.append(dict(name="slow_prefill_disagg", build="disagg", kind="slow_rank", duration=220.0,
                  bursts_list=[(5.0, 220.0, 3.5)],
                  fault={"type": "slow", "rank": 5, "t": 70.0, "factor": 1.5}, culprits=[5],
                  desc="disaggregated prefill/decode under steady load; from 70 s prefill rank 5 (prefill1, TP 1) "
                       "computes 1.5x slower",
                  wait_for="prefill1's ranks 4, 6, 7 enter every all-reduce early and wait on 5 (victims); its KV "
                           "sends go out later, so decode receivers wait longer (victims); 5 waits on nobody. "
                           "prefill0 (0-3) is unaffected"))
    S.append(dict(name="slow_pp_stage1", build="pp", kind="slow_rank", duration=220.0, gaps=(8, 25),
                  fault={"type": "slow", "rank": 11, "t": 60.0, "factor": 1.4}, culprits=[11],
                  desc="PP 2 serving; from 60 s stage-1 rank 11 (TP 3 of stage 1) is 1.4x slower",
                  wait_for="stage-1 ranks 8-10, 12-15 wait on 11 in their TP all-reduces; stage 1 becomes the "
                           "bottleneck so stage-0 ranks wait in their sends for stage 1's receives (victims); "
                           "11 waits on nobody"))
    for s in S:
        s.setdefault("culprits", [])
    return S


def run_scenario(sc, out, seed):
    t0 = time.time()
    name = sc["name"]
    sc["job"] = f"serve-{name.replace('_', '-')}-s{seed}"
    sseed = seed * 1000 + sum(ord(ch) for ch in name)
    if sc.get("max_out"):
        global arrivals
        _orig = arrivals

        def arrivals(rng, bursts, share=1.0, _o=_orig, _m=sc["max_out"]):  # noqa: E306
            return [[a, p, min(o, _m)] for a, p, o in _o(rng, bursts, share)]
    try:
        sim, coords, info = {"tp": build_tp, "pp": build_pp, "disagg": build_disagg}[sc["build"]](sc, sseed)
    finally:
        if sc.get("max_out"):
            arrivals = _orig
    f = sc.get("fault")
    onset = None
    if sc["kind"] == "hang":
        onset = info.get("onset")
        if onset is None:
            raise SystemExit(f"{name}: the fault never struck (no traffic after t={f['t']})")
        t_end = min(sc["duration"], onset + sc["after_s"])
    elif sc["kind"] == "slow_rank":
        onset = f["t"]
        t_end = sc["duration"]
    else:
        t_end = sc["duration"]
    stats = write_capture(sc, sim, coords, out / f"{name}.cwcap", t_end, sseed)
    extra = {}
    if name.startswith("hang_after_idle"):
        # the idle gap before the hang on the culprit's engine (from its forward log)
        eng_ranks = info["engines"]["tp0"]
        R = sim.arrays()
        m = (R["kind"] == wire.KIND_CALL) & np.isin(R["rank"], eng_ranks) & np.isfinite(R["te"]) & (R["te"] < onset)
        extra["idle_gap_before_onset_s"] = round(onset - float(R["te"][m].max()), 2)
    truth = {
        "scenario": name, "job": sc["job"], "kind": sc["kind"], "culprit_ranks": sc["culprits"],
        "allowed_extra_ranks": [], "world_size": sim.world, "setup": sc["build"],
        "probe": sc.get("probe", GPU), "description": sc["desc"], "wait_for": sc["wait_for"],
        "fault": f, "onset_ns": int(T0_NS + onset * 1e9) if onset is not None else None,
        "onset_s": round(onset, 3) if onset is not None else None,
        "end_ns": int(T0_NS + t_end * 1e9), "end_s": round(t_end, 3), "t0_ns": T0_NS,
        "engines": info.get("engines"), "bursts": info.get("bursts"), "forwards": info.get("forwards"),
        "comms": [{"name": c.name, "id": wire.comm_hex(c.cid), "members": c.members,
                   "destroyed_s": round(c.destroy_t, 3) if c.destroy_t else None} for c in sim.comms],
        "exits_s": {str(r): round(t, 3) for r, t in sorted(sim.exit_t.items())},
        "scale_up_ready_s": info.get("scale_up_ready_s"), "capture": stats, **extra,
    }
    (out / f"{name}.truth.json").write_text(json.dumps(truth, indent=1))
    print(f"{name:22s} {sc['kind']:9s} ranks {sim.world:3d} records {stats['call_records']:7d} msgs "
          f"{stats['messages']:6d} end {t_end:6.1f}s onset {('%.1f' % onset) if onset is not None else '-':>6s} "
          f"({time.time() - t0:.1f} s)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("prefix", nargs="*")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for sc in scenarios():
        if a.prefix and not any(sc["name"].startswith(p) for p in a.prefix):
            continue
        run_scenario(sc, out, a.seed)


if __name__ == "__main__":
    main()
