#!/usr/bin/env python3
"""recsys/: an independent generator of recommendation-model training jobs (DLRM / TorchRec style).

Written from the wire spec (wire-v1.md), DOMAIN.md, the README and docs only; it shares no code and
no model with the detector or its simulator.

    gen.py --out DIR --seed N [SCENARIO-PREFIX ...]   -> DIR/<scenario>.cwcap + DIR/<scenario>.truth.json

What is modelled (per rank, per iteration, vectorised over ranks; real times, then each node's clock):

* Hybrid parallel: embedding tables sharded model-parallel over all ranks, dense MLPs data-parallel.
  Three communicators in a table-wise (TW) job, as TrainPipelineSparseDist drives them:
    - D ("data dist", world): the KJT input distribution of the NEXT batch, two all-to-alls (splits
      then ids/lengths), on the pipeline's data-dist stream. The host must read the splits (a host
      sync) before it can post the ids/lengths all-to-all, at the end of the iteration: hosts run
      at most about one iteration ahead of their GPU.
    - E ("embedding", world): the pooled-embedding forward all-to-all after the embedding lookups,
      and the backward all-to-all of embedding gradients in the middle of the dense backward.
    - G ("DDP", world): the dense gradient all-reduce in 2 buckets on DDP's stream, overlapped with
      the dense backward (bucket 0 ready at 35 % of it, bucket 1 at its end).
  Row-wise (RW) jobs use a reduce-scatter of pooled embeddings forward and an all-gather of their
  gradients backward on E instead. Two-level jobs split every E all-to-all into an intra-node
  all-to-all (one comm per node) followed by an inter-node all-to-all (one comm per local rank).
* Sizes skewed by design: ranks holding hot tables look up more rows (lookups 1.2-1.4x) and send
  2-3x more bytes in the forward all-to-all (their records' `bytes` say so: each rank's own send
  payload); an all-to-all lasts as long as its largest transfer, for every member. These
  ranks are structurally late at the forward all-to-all from the first iteration: not a fault.
* Host data loading per rank (a loader with a 2-batch prefetch queue), bursty (lognormal, and now
  and then a 2.5x burst); an input-bound control whose loaders are slower than the GPU (a shared
  storage factor per batch plus each rank's own), so that every rank waits on data in turn.
* Noise: per-batch global factor (KJT lengths vary), per rank-iteration lognormal compute noise,
  rare 5-15 ms host hiccups (GC).
* Probes: GPU-timed plugin records (a completion record per call; an entry record only for a call
  still open on the device at one of its agent's 200 ms reads), host-enqueue hook records (entry at
  enqueue, completion only when observed from a CUDA event; with many calls outstanding per rank),
  and gloo (blocking: real host entry and return). Agents batch per node and comm every 200 ms and
  heartbeat every 1 s per comm; node clocks a few ms apart; topology at start; cw.steps.v1 from
  the hook (iteration times, phases timed by CUDA events, so they include waits) in some jobs;
  cw.hw.v1 InfiniBand samples every 5 s in the two-level job.
* Faults: a rank whose host stops before its forward all-to-all (GPU-timed and host-enqueue), a
  rank whose host stops in its backward before a DDP bucket, a GPU 1.5x slower (lookups, MLPs,
  embedding backward), a rank whose data loading becomes 2x slower (late at the input all-to-all),
  a NIC degraded on one node of a two-level job (inter-node all-to-alls and the all-reduce slower
  for every member: call timings cannot say which node; its NIC's symbol errors can), a rank whose
  Python thread stops mid-iteration holding the GIL with a 2-deep pipeline (host-enqueue: its hook
  reports nothing after the stop, its peers wait in the oldest calls while later ones queue), gloo
  variants (a hang and a slow loader).

Simplifications (stated): an uneven all-to-all (all_to_all_single with split sizes) is recorded as
one ALLTOALL collective per rank, as a hook at the torch level sees it (NCCL itself runs it as grouped
send/recv, which a plugin on older NCCL would record as SEND/RECV pairs); the first pipeline batches' input distribution is not recorded (the
pipeline's fill); one NCCL stream per communicator; collective completion is the members' latest
device start plus a size-dependent duration (plus a few us of jitter); the dense MLP, embedding
lookups and their backward are single kernels per iteration; no optimizer-state all-reduces, no
metrics all-reduce, no evaluation, no checkpoints; GPU-timed device starts are exact; heartbeat
counters are the agent's view at heartbeat time; node clocks do not drift.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np

REC = np.dtype([("kind", "u1"), ("op", "u1"), ("flags", "<u2"), ("rank", "<i4"), ("comm", "<u8"),
                ("seq", "<u8"), ("t_start_ns", "<i8"), ("t_end_ns", "<i8"), ("bytes", "<u8"),
                ("comm_rank", "<i4"), ("peer", "<i4"), ("nranks", "<u4"), ("aux", "<u4")])
assert REC.itemsize == 64
F_COMPLETED, F_GPU, F_GRAPH, F_ENQ, F_LOST = 1, 2, 4, 8, 16
OP = {"allreduce": 1, "allgather": 2, "reducescatter": 3, "alltoall": 8}
INF = np.inf
MS = 1e-3
FLUSH = 0.2
HB = 1.0
T0 = 1_780_000_000.0  # seconds; job start (true time)


# ---------------------------------------------------------------------------------------------
# job model
# ---------------------------------------------------------------------------------------------

class Job:
    def __init__(self, name, seed, W, probe, shard="tw", depth=1, dur=60.0, iter_ms=30.0,
                 hot=None, steps=False, fault=None, input_bound=False, hw=False, desc=""):
        self.name, self.W, self.probe, self.shard, self.depth = name, W, probe, shard, depth
        self.dur, self.steps, self.fault, self.input_bound, self.hw, self.desc = dur, steps, fault or {}, input_bound, hw, desc
        self.rng = np.random.default_rng(seed)
        self.nodes = W // 8
        self.node_of = np.arange(W) // 8
        self.off = self.rng.uniform(-4e-3, 4e-3, self.nodes)          # node clock offsets (s)
        self.fphase = self.rng.uniform(0, FLUSH, self.nodes)          # agent read phases
        self.hphase = self.rng.uniform(0, HB, self.nodes)
        s = iter_ms / 30.0                                            # scale of the whole iteration
        self.lookup = 6.0 * MS * s
        self.dense = 10.0 * MS * s
        self.embbwd = 5.0 * MS * s
        self.opt = 1.0 * MS * s
        self.hostwork = 4.0 * MS * s                                  # python/launch cost per iteration
        self.hot = np.ones(W) if hot is None else hot                 # lookup factor per rank
        self.sendf = 1.0 + (self.hot - 1.0) * 5.0                     # hot tables send much more
        self.a2a_base = 2.2 * MS * s                                  # forward all-to-all, normal member
        self.bwd_base = 2.0 * MS * s
        self.bucket = 1.2 * MS * s
        self.gloo = probe == "gloo"
        # the loader's mean time per batch against the job's own iteration (about 1.2x iter_ms on a GPU job,
        # 2.4x on gloo, whose all-to-alls and all-reduce run on the CPU): 0.65 of it, 1.35 when input-bound
        est_iter = (2.4 if self.gloo else 1.2) * iter_ms * MS
        self.load_base = (1.35 if input_bound else 0.65) * est_iter
        if self.gloo:
            self.a2a_base *= 3; self.bwd_base *= 3; self.bucket *= 4
        self.comms = {}
        self.calls = []          # (comm_name, op, bytes, enq[W], start[W], end[W], members-mask)
        self.iters = []          # per iteration: H, Hnext, fwd_ms, bwd_ms, opt_ms
        self.truth_onset = None
        self._mk_comms()

    # communicators -----------------------------------------------------------------------------
    def _cid(self):
        return int(self.rng.integers(1, 2**63)) | (1 << 63)

    def _mk_comms(self):
        W = self.W
        world = np.arange(W)
        self.comms["D"] = dict(id=self._cid(), groups=[world], label="data_dist")
        self.comms["G"] = dict(id=self._cid(), groups=[world], label="ddp")
        if self.shard == "2level":
            self.comms["Ei"] = dict(id=None, groups=[np.arange(n * 8, n * 8 + 8) for n in range(self.nodes)],
                                    ids=[self._cid() for _ in range(self.nodes)], label="emb_intra")
            self.comms["Ex"] = dict(id=None, groups=[np.arange(l, W, 8) for l in range(8)],
                                    ids=[self._cid() for _ in range(8)], label="emb_inter")
        else:
            self.comms["E"] = dict(id=self._cid(), groups=[world], label="emb")
        for c in self.comms.values():
            if c["id"] is not None:
                c["ids"] = [c["id"]]

    def gmax(self, cname, x):
        """latest member time of each group, per rank."""
        c = self.comms[cname]
        out = np.empty_like(x)
        for g in c["groups"]:
            out[g] = x[g].max()
        return out

    def coll(self, cname, op, nbytes, enq, ready, free, dur):
        """one collective instance per group of comm cname: device start, completion per rank."""
        nbytes = np.broadcast_to(np.asarray(nbytes, dtype=float), (self.W,)).astype(np.int64)
        start = np.maximum(np.maximum(enq, ready), free)
        m = self.gmax(cname, start)
        end = m + dur + self.rng.uniform(2e-6, 25e-6, self.W)
        end[~np.isfinite(m)] = INF
        self.calls.append((cname, op, nbytes, enq.copy(), start.copy(), end.copy()))
        return start, end

    # simulation -------------------------------------------------------------------------------
    def run(self):
        W, rng, f = self.W, self.rng, self.fault
        P = self.depth
        H = np.full(W, T0) + rng.uniform(0, 2 * MS, W)
        Dfree = np.full(W, T0); Efree = np.full(W, T0); E2free = np.full(W, T0); Gfree = np.full(W, T0)
        deffree = np.full(W, T0)
        gpu_prev = np.full(W, T0)
        vals_done = {b: np.full(W, T0) for b in range(P)}
        splits_end = {}
        # loader: batch b ready at R[b]; queue of 2
        Q = 2
        R = {}
        take = {}
        Rprev = np.full(W, T0 - 1.0)
        for b in range(P):
            take[b] = np.full(W, T0 - 0.5)
        hot_windows = []
        if f.get("type") == "hotburst":
            for _ in range(3):
                a = rng.uniform(15, self.dur - 10)
                hot_windows.append(a)
            self.hot_windows = sorted(round(float(a), 2) for a in hot_windows)
        cul = f.get("rank")
        i = 0
        end_t = T0 + self.dur
        while True:
            fin = np.isfinite(H)
            if not fin.any() or np.nanmin(np.where(fin, H, np.nan)) > end_t:
                break
            tnow = float(np.min(H[fin]))
            gf = math.exp(rng.normal(0, 0.05))                         # batch content, all ranks
            noise = np.exp(rng.normal(0, 0.03, W)) * gf
            gpu = np.ones(W)
            hotf = self.hot.copy()
            sendf = self.sendf.copy()
            if f.get("type") == "slow_gpu" and tnow >= T0 + f["at"]:
                gpu[cul] = f.get("factor", 1.5)
                self.truth_onset = self.truth_onset or tnow
            if f.get("type") == "hotburst":
                for a in hot_windows:
                    if T0 + a <= tnow < T0 + a + 6 * self.lookup * 5:      # ~6 iterations
                        hotf[f["rank"]] *= 1.8; sendf[f["rank"]] *= 1.8
            a2a_dur = self.a2a_base * sendf.max() * gf
            bwd_dur = self.bwd_base * sendf.max() * gf
            inter_mult = 1.0
            ddp_mult = 1.0
            if f.get("type") == "nic" and tnow >= T0 + f["at"]:
                inter_mult = f.get("factor", 2.5); ddp_mult = 1.6
                self.truth_onset = self.truth_onset or tnow
            stop_at = None
            if f.get("type") in ("hang_fwd", "hang_ddp", "stop") and tnow >= T0 + f["at"] and self.truth_onset is None:
                stop_at = {"hang_fwd": "fwd", "hang_ddp": "b1", "stop": "bwd"}[f["type"]]

            h = H.copy()
            hic = rng.random(W) < 0.003
            h = h + np.where(hic, rng.uniform(5 * MS, 15 * MS, W), 0.0)

            def stop(point):
                if stop_at == point:
                    self.truth_onset = float(h[cul])
                    self.stop_time = float(h[cul])
                    h[cul] = INF

            # ---- data loading of batch b = i + P
            b = i + P
            lf = np.exp(rng.normal(0, 0.15, W)) * np.where(rng.random(W) < 0.04, 2.5, 1.0)
            if self.input_bound:
                lf = lf * math.exp(rng.normal(0, 0.2))
            if f.get("type") == "slow_loader" and tnow >= T0 + f["at"]:
                lf[cul] *= 2.0
                self.truth_onset = self.truth_onset or tnow
            gate = take.get(b - Q, np.full(W, T0 - 1.0))
            R[b] = np.maximum(Rprev, gate) + self.load_base * lf
            Rprev = R[b]
            h = np.maximum(h, R[b]) + 0.3 * MS
            take[b] = h.copy()

            if not self.gloo:
                # ---- splits all-to-all of batch b (data-dist stream)
                s_st, s_en = self.coll("D", "alltoall", 4 * W * 26, h, h, Dfree, 0.06 * MS)
                Dfree = s_en; splits_end[b] = s_en
                h = h + 0.15 * MS
                stop("fwd")
                # ---- forward of batch i
                lk_st = np.maximum(np.maximum(h, deffree), vals_done.pop(i))
                lk_en = lk_st + self.lookup * hotf * gpu * noise
                h = h + 0.4 * MS
                if self.shard == "2level":
                    st1, en1 = self.coll("Ei", "alltoall", 8e6 * sendf, h, lk_en, Efree, 0.25 * a2a_dur)
                    Efree = en1
                    h = h + 0.1 * MS
                    fw_st, fw_en = self.coll("Ex", "alltoall", 2.4e7 * sendf, h, en1, E2free, 0.75 * a2a_dur * inter_mult)
                    E2free = fw_en
                elif self.shard == "rw":
                    fw_st, fw_en = self.coll("E", "reducescatter", int(3.2e7), h, lk_en, Efree, a2a_dur)
                    Efree = fw_en
                else:
                    fw_st, fw_en = self.coll("E", "alltoall", 3.2e7 * sendf, h, lk_en, Efree, a2a_dur)
                    Efree = fw_en
                h = h + 0.6 * MS
                d_st = np.maximum(fw_en, lk_en)
                dfwd = 0.4 * self.dense * gpu * noise
                dbwd = 0.6 * self.dense * gpu * noise
                # ---- backward: bucket 0, embedding-grad all-to-all, bucket 1
                stop("b0")
                b0_st, b0_en = self.coll("G", "allreduce", int(2.6e7), h + 0.3 * MS, d_st + dfwd + 0.35 * dbwd, Gfree,
                                         self.bucket * ddp_mult * gf)
                Gfree = b0_en
                h = h + 0.5 * MS
                stop("bwd")
                br = d_st + dfwd + 0.5 * dbwd
                if self.shard == "2level":
                    st1, en1 = self.coll("Ei", "alltoall", int(8e6), h, br, Efree, 0.25 * bwd_dur)
                    Efree = en1
                    h = h + 0.1 * MS
                    bw_st, bw_en = self.coll("Ex", "alltoall", int(2.4e7), h, en1, E2free, 0.75 * bwd_dur * inter_mult)
                    E2free = bw_en
                elif self.shard == "rw":
                    bw_st, bw_en = self.coll("E", "allgather", int(3.2e7), h, br, Efree, bwd_dur)
                    Efree = bw_en
                else:
                    bw_st, bw_en = self.coll("E", "alltoall", int(3.2e7), h, br, Efree, bwd_dur)
                    Efree = bw_en
                h = h + 0.5 * MS
                stop("b1")
                b1_st, b1_en = self.coll("G", "allreduce", int(2.6e7), h + 0.3 * MS, d_st + dfwd + dbwd, Gfree,
                                         self.bucket * ddp_mult * gf)
                Gfree = b1_en
                eb_en = np.maximum(bw_en, d_st + dfwd + dbwd) + self.embbwd * hotf * gpu * noise
                gpu_end = np.maximum(eb_en, b1_en) + self.opt * gpu
                deffree = gpu_end
                h = h + self.hostwork
                # ---- host sync on the splits of batch b, then its ids/lengths all-to-all
                h = np.maximum(h, splits_end.pop(b)) + 0.1 * MS
                v_st, v_en = self.coll("D", "alltoall", int(6e6), h, h, Dfree, 0.5 * MS * gf)
                Dfree = v_en
                vals_done[b] = v_en
                h = h + 0.2 * MS
                Hn = np.maximum(h, gpu_prev)          # at most about one iteration ahead of the GPU
                # phases as CUDA events see them (including waits)
                fwd_ms = (d_st + dfwd - lk_st) / MS
                bwd_ms = (eb_en - (d_st + dfwd)) / MS
                opt_ms = (gpu_end - np.maximum(eb_en, b1_en)) / MS
                self.iters.append((H.copy(), Hn.copy(), fwd_ms, bwd_ms, opt_ms, gpu_end.copy()))
                gpu_prev = gpu_end
                H = Hn
            else:
                # ---- gloo: everything blocks the host
                _, e = self.coll("D", "alltoall", 4 * W * 26, h, h, h, 0.15 * MS); h = e.copy()
                _, e = self.coll("D", "alltoall", int(6e6), h, h, h, 1.5 * MS * gf); h = e.copy()
                h0 = h.copy()
                stop("fwd")
                h = h + self.lookup * hotf * gpu * noise
                _, e = self.coll("E", "alltoall", 3.2e7 * sendf, h, h, h, a2a_dur); h = e.copy()
                h = h + 0.4 * self.dense * gpu * noise
                fwd_ms = (h - h0) / MS
                h1 = h.copy()
                h = h + 0.5 * 0.6 * self.dense * gpu * noise
                stop("bwd")
                _, e = self.coll("E", "alltoall", int(3.2e7), h, h, h, bwd_dur); h = e.copy()
                h = h + 0.5 * 0.6 * self.dense * gpu * noise + self.embbwd * hotf * gpu * noise
                stop("b1")
                _, e = self.coll("G", "allreduce", int(5.2e7), h, h, h, 2 * self.bucket * gf); h = e.copy()
                bwd_ms = (h - h1) / MS
                h = h + self.opt * 3
                opt_ms = np.full(W, self.opt * 3 / MS)
                self.iters.append((H.copy(), h.copy(), fwd_ms, bwd_ms, opt_ms, h.copy()))
                H = h + 0.2 * MS
            i += 1
        self.n_iters = i


# ---------------------------------------------------------------------------------------------
# probe, agent and capture writing
# ---------------------------------------------------------------------------------------------

def ns(t):
    return int(round(t * 1e9))


def emit(job: Job, out: Path, fname: str):
    W = job.W
    end_t = T0 + job.dur
    lines = []   # (ts_ns, str)
    jid = job.name
    t_start = T0 - 5.0

    # topology
    for r in range(W):
        n = int(job.node_of[r])
        v = {"v": 1, "job": jid, "ts_ns": ns(t_start + job.off[n]), "rank": r, "world_size": W,
             "node": f"node-{n:02d}", "local_rank": r % 8, "gpu": f"GPU-{job.name[:6]}-{r:04x}"}
        lines.append((v["ts_ns"], json.dumps({"topic": "cw.topology.v1", "key": jid, "ts_ns": v["ts_ns"], "value": v})))

    # per (comm id) records
    comm_list = []   # (cid, members array, cname)
    for cname, c in job.comms.items():
        for g, cid in zip(c["groups"], c["ids"]):
            comm_list.append((cid, g, cname))
    gidx = {}
    for cid, g, cname in comm_list:
        for cr, r in enumerate(g):
            gidx[(cname, int(r))] = (cid, cr, len(g))

    # gather calls per comm name
    per = {}
    for cname, op, nbytes, enq, st, en in job.calls:
        per.setdefault(cname, []).append((op, nbytes, enq, st, en))

    stop_cut = np.full(W, INF)
    if job.fault.get("type") == "stop" and hasattr(job, "stop_time"):
        stop_cut[job.fault["rank"]] = job.stop_time     # GIL held: the hook reports nothing after it

    recs = []     # structured arrays
    vis = []      # visibility time (s, true)
    hb_data = {}  # (cid) -> per member arrays of (started times, completed times) by seq
    for cname, lst in per.items():
        n = len(lst)
        ENQ = np.stack([x[2] for x in lst])   # [n, W]
        ST = np.stack([x[3] for x in lst])
        EN = np.stack([x[4] for x in lst])
        ops = np.array([OP[x[0]] for x in lst], dtype=np.uint8)
        NB = np.stack([x[1] for x in lst]).astype(np.uint64)   # [n, W]: each rank's own payload
        seqs = np.arange(n)
        # what the probe reports for each rank
        if job.probe == "gpu":
            entered_t = ST.copy()
        else:
            entered_t = ENQ.copy()
        rep_end = np.where(EN > stop_cut[None, :], INF, EN)
        for r in range(W):
            cid, cr, nr = gidx[(cname, r)]
            n_node = int(job.node_of[r])
            ent = entered_t[:, r]
            ok = np.isfinite(ent)
            ent_seq = seqs[ok]
            ee = rep_end[ok, r]
            es = ent[ok]
            ST_r = ST[ok, r]; ENQ_r = ENQ[ok, r]
            hb_data.setdefault(cid, {})[r] = (es, ee)
            m = len(ent_seq)
            if m == 0:
                continue
            base = np.zeros(m, REC)
            base["kind"] = 1; base["op"] = ops[ok]; base["rank"] = r; base["comm"] = cid
            base["seq"] = ent_seq; base["bytes"] = NB[ok, r]; base["comm_rank"] = cr; base["peer"] = -1
            base["nranks"] = nr
            base["aux"] = 0
            off = job.off[n_node]
            done = np.isfinite(ee)
            ph = job.fphase[n_node]
            if job.probe == "gpu":
                # completion record for completed calls; entry record if open at an agent read
                fl = ph + np.ceil((ST_r - ph) / FLUSH) * FLUSH
                open_at_read = fl < ee
                a = base[open_at_read].copy()
                a["flags"] = F_GPU
                a["t_start_ns"] = np.round((ST_r[open_at_read] + off) * 1e9).astype(np.int64)
                a["t_end_ns"] = 0
                recs.append(a); vis.append(np.stack([fl[open_at_read] - 1e-6, np.full(a.size, n_node)], 1))
                c = base[done].copy()
                c["flags"] = F_GPU | F_COMPLETED
                c["t_start_ns"] = np.round((ST_r[done] + off) * 1e9).astype(np.int64)
                c["t_end_ns"] = np.round((ee[done] + off) * 1e9).astype(np.int64)
                recs.append(c); vis.append(np.stack([ee[done], np.full(c.size, n_node)], 1))
            else:
                fl_flag = F_ENQ if job.probe == "enq" else 0
                a = base.copy()
                a["flags"] = fl_flag
                a["t_start_ns"] = np.round((ENQ_r + off) * 1e9).astype(np.int64)
                a["t_end_ns"] = 0
                recs.append(a); vis.append(np.stack([ENQ_r, np.full(m, n_node)], 1))
                c = base[done].copy()
                c["flags"] = fl_flag | F_COMPLETED
                c["t_start_ns"] = np.round((ENQ_r[done] + off) * 1e9).astype(np.int64)
                # a completion is observed from a CUDA event by a poller (host-enqueue): a little later
                lag = 0.0 if job.probe == "gloo" else 0.4 * MS
                c["t_end_ns"] = np.round((ee[done] + lag + off) * 1e9).astype(np.int64)
                recs.append(c); vis.append(np.stack([ee[done] + lag, np.full(c.size, n_node)], 1))

    # COMM_INIT records
    init = []
    for cid, g, cname in comm_list:
        nn = len(set(int(job.node_of[r]) for r in g))
        a = np.zeros(len(g), REC)
        a["kind"] = 2; a["rank"] = g; a["comm"] = cid; a["comm_rank"] = np.arange(len(g)); a["peer"] = -1
        a["nranks"] = len(g); a["aux"] = nn
        tt = T0 - 3.0 + job.rng.uniform(0, 0.5, len(g))
        a["t_start_ns"] = np.round((tt + job.off[job.node_of[g]]) * 1e9).astype(np.int64)
        a["t_end_ns"] = a["t_start_ns"]
        init.append(a); vis.append(np.stack([tt, job.node_of[g].astype(float)], 1))
    recs += init
    R = np.concatenate(recs)
    V = np.concatenate(vis)
    keep = V[:, 0] <= end_t
    R = R[keep]; V = V[keep]
    node = V[:, 1].astype(int)
    fidx = np.ceil((V[:, 0] - job.fphase[node]) / FLUSH + 1e-9).astype(np.int64)
    order = np.lexsort((R["seq"], fidx, R["comm"], node))
    R = R[order]; node = node[order]; fidx = fidx[order]
    key = np.stack([node, R["comm"].view(np.int64), fidx], 1)
    brk = np.nonzero(np.any(key[1:] != key[:-1], axis=1))[0] + 1
    starts = np.concatenate([[0], brk]); ends = np.concatenate([brk, [len(R)]])
    nrec = 0
    for s, e in zip(starts, ends):
        n = int(node[s]); cid = int(R["comm"][s]); fi = int(fidx[s])
        tflush = job.fphase[n] + fi * FLUSH + job.rng.uniform(0.5 * MS, 3 * MS)
        if tflush > end_t:
            continue
        body = R[s:e]
        payload = b"CWB1" + struct.pack("<HHII", 1, 64, e - s, 0) + body.tobytes()
        ts = ns(tflush + job.off[n])
        lines.append((ts, '{"topic": "cw.calls.v1", "key": "%s/%016x", "ts_ns": %d, "value_b64": "%s"}'
                      % (jid, cid, ts, base64.b64encode(payload).decode())))
        nrec += e - s

    # heartbeats
    for cid, g, cname in comm_list:
        nodes = sorted(set(int(job.node_of[r]) for r in g))
        for n in nodes:
            mem = [int(r) for r in g if job.node_of[r] == n]
            tt = T0 - 2.0 + job.hphase[n]
            data = []
            for r in mem:
                es, ee = hb_data.get(cid, {}).get(r, (np.zeros(0), np.zeros(0)))
                data.append((r, np.maximum.accumulate(es) if es.size else es,
                             np.maximum.accumulate(np.where(np.isfinite(ee), ee, INF)) if ee.size else ee, es, ee))
            while tt <= end_t:
                ranks = []
                for r, ces, cee, es, ee in data:
                    st = int(np.searchsorted(ces, tt, side="right")) - 1
                    co = int(np.searchsorted(cee, tt, side="right")) - 1
                    d = {"rank": r, "started": st, "completed": co,
                         "t_last_start_ns": ns(es[st] + job.off[n]) if st >= 0 else 0,
                         "t_last_end_ns": ns(ee[co] + job.off[n]) if co >= 0 else 0}
                    ranks.append(d)
                ts = ns(tt + job.off[n])
                v = {"v": 1, "job": jid, "node": f"node-{n:02d}", "ts_ns": ts, "comm": "%016x" % cid, "ranks": ranks}
                lines.append((ts, json.dumps({"topic": "cw.progress.v1", "key": "%s/%016x" % (jid, cid), "ts_ns": ts, "value": v},
                                             separators=(",", ":"))))
                tt += HB + job.rng.uniform(-2 * MS, 2 * MS)

    # steps (from the hook)
    nsteps = 0
    if job.steps:
        for it, (H, Hn, fw, bw, op, ge) in enumerate(job.iters):
            ok = np.isfinite(Hn) & np.isfinite(fw) & np.isfinite(bw) & (Hn <= end_t)
            for r in np.nonzero(ok)[0]:
                n = int(job.node_of[r])
                ts = ns(max(Hn[r], ge[r]) + 0.5 * MS + job.off[n])
                v = {"v": 1, "job": jid, "rank": int(r), "iteration": it, "t_start_ns": ns(H[r] + job.off[n]),
                     "t_end_ns": ns(Hn[r] + job.off[n]),
                     "phases": {"forward_ms": round(float(fw[r]), 3), "backward_ms": round(float(bw[r]), 3),
                                "optimizer_ms": round(float(op[r]), 3)}}
                lines.append((ts, json.dumps({"topic": "cw.steps.v1", "key": jid, "ts_ns": ts, "value": v},
                                             separators=(",", ":"))))
                nsteps += 1

    # hardware samples (InfiniBand counters, deltas) every 5 s per node
    if job.hw:
        tx = {}
        for n in range(job.nodes):
            tt = T0 + job.rng.uniform(0, 5)
            while tt <= end_t:
                sym = 0
                rate = 1.0
                if job.fault.get("type") == "nic" and n == job.fault["node"] and job.truth_onset and tt >= job.truth_onset:
                    sym = int(job.rng.integers(40, 400)); rate = 1 / job.fault.get("factor", 2.5)
                ib = {f"mlx5_{k}": {"tx_bytes": int(5 * 9e9 * rate * job.rng.uniform(0.95, 1.05)),
                                    "rx_bytes": int(5 * 9e9 * rate * job.rng.uniform(0.95, 1.05)),
                                    "symbol_errors": sym if k == 0 else 0} for k in range(1)}
                ts = ns(tt + job.off[n])
                v = {"v": 1, "job": jid, "node": f"node-{n:02d}", "ts_ns": ts, "ib": ib}
                lines.append((ts, json.dumps({"topic": "cw.hw.v1", "key": jid, "ts_ns": ts, "value": v})))
                tt += 5.0

    lines.sort(key=lambda x: x[0])
    cap = out / f"{fname}.cwcap"
    with open(cap, "w") as fh:
        for _, l in lines:
            fh.write(l); fh.write("\n")
    return cap, nrec, len(lines), nsteps


# ---------------------------------------------------------------------------------------------
# validation against the wire spec
# ---------------------------------------------------------------------------------------------

def validate(cap: Path, W: int):
    latest = {}
    n = 0
    topics = {"cw.calls.v1", "cw.progress.v1", "cw.topology.v1", "cw.steps.v1", "cw.hw.v1"}
    with open(cap) as fh:
        for line in fh:
            m = json.loads(line)
            assert m["topic"] in topics, m["topic"]
            assert isinstance(m["ts_ns"], int) and isinstance(m["key"], str)
            if m["topic"] == "cw.calls.v1":
                raw = base64.b64decode(m["value_b64"])
                assert raw[:4] == b"CWB1"
                ver, size, count, res = struct.unpack("<HHII", raw[4:16])
                assert ver == 1 and size == 64 and res == 0 and len(raw) == 16 + 64 * count and count > 0
                a = np.frombuffer(raw[16:], REC)
                job, comm = m["key"].split("/")
                assert len(comm) == 16 and np.all(a["comm"] == int(comm, 16))
                assert np.all(np.isin(a["kind"], [1, 2, 3]))
                assert np.all((a["rank"] >= 0) & (a["rank"] < W))
                assert np.all(a["comm_rank"] < a["nranks"].astype(np.int64))
                call = a["kind"] == 1
                assert np.all(np.isin(a["op"][call], list(OP.values())))
                assert np.all(a["op"][~call] == 0)
                comp = (a["flags"] & F_COMPLETED) != 0
                assert np.all(a["t_end_ns"][call & ~comp] == 0)
                assert np.all(a["t_end_ns"][call & comp] >= a["t_start_ns"][call & comp])
                assert not np.any((a["flags"] & F_GPU != 0) & (a["flags"] & F_ENQ != 0))
                assert np.all(a["peer"][call] == -1)
                n += count
            elif m["topic"] == "cw.progress.v1":
                v = m["value"]
                assert v["v"] == 1 and v["comm"] == m["key"].split("/")[1]
                for rr in v["ranks"]:
                    assert rr["completed"] <= rr["started"] or rr["started"] == -1 and rr["completed"] == -1, rr
            elif m["topic"] == "cw.steps.v1":
                v = m["value"]
                assert v["t_end_ns"] >= v["t_start_ns"] and 0 <= v["rank"] < W
                assert set(v["phases"]) <= {"forward_ms", "backward_ms", "optimizer_ms"}
    return n


# ---------------------------------------------------------------------------------------------
# scenarios
# ---------------------------------------------------------------------------------------------

def hot_vec(rng, W, k, lo=1.2, hi=1.4):
    h = np.ones(W)
    ranks = rng.choice(W, k, replace=False)
    h[ranks] = rng.uniform(lo, hi, k)
    return h, sorted(int(r) for r in ranks)


def scenarios(seed):
    S = []
    rs = np.random.default_rng(seed * 7919 + 13)

    def add(name, kind, culprits, **kw):
        S.append((name, kind, culprits, kw))

    def pick(W, hot_ranks):
        c = int(rs.integers(0, W))
        while c in hot_ranks:
            c = int(rs.integers(0, W))
        return c

    # healthy controls
    h32, hr32 = hot_vec(rs, 16, 3)
    add("ctl_skew_tw", "healthy", [], W=16, probe="gpu", hot=h32, hot_ranks=hr32, steps=True, iter_ms=30,
        desc="TW sharding, 3 hot-table ranks (1.2-1.4x lookups, 2-3x sends), GPU-timed, steps")
    h24, hr24 = hot_vec(rs, 16, 2)
    add("ctl_hotburst", "healthy", [], W=16, probe="gpu", hot=h24, hot_ranks=hr24, iter_ms=30,
        fault={"type": "hotburst", "rank": hr24[0]},
        desc=f"hot-shard rank {hr24[0]} 1.8x hotter for ~6 iterations, three times (noise)")
    h16, hr16 = hot_vec(rs, 16, 2)
    add("ctl_input_bound", "healthy", [], W=16, probe="enq", hot=h16, hot_ranks=hr16, steps=True, iter_ms=25,
        input_bound=True, desc="host-enqueue; loaders 1.35x the GPU time, bursty, shared storage factor")
    h128, hr128 = hot_vec(rs, 128, 8)
    add("ctl_128", "healthy", [], W=128, probe="gpu", hot=h128, hot_ranks=hr128, iter_ms=65, dur=60,
        desc="128 ranks TW, 8 hot-table ranks, GPU-timed")
    hrw, hrrw = hot_vec(rs, 24, 2, 1.1, 1.2)
    add("ctl_rw", "healthy", [], W=24, probe="gpu", hot=hrw, hot_ranks=hrrw, shard="rw", iter_ms=50,
        desc="row-wise sharding: reduce-scatter fwd, all-gather bwd, GPU-timed, steps")
    hg, hrg = hot_vec(rs, 16, 2)
    add("ctl_gloo", "healthy", [], W=16, probe="gloo", hot=hg, hot_ranks=hrg, iter_ms=33, steps=True,
        desc="gloo CPU training (blocking calls, real times)")
    h2l, hr2l = hot_vec(rs, 24, 3)
    add("ctl_2level", "healthy", [], W=24, probe="gpu", hot=h2l, hot_ranks=hr2l, shard="2level", iter_ms=45, hw=True,
        desc="two-level all-to-all (intra-node then inter-node comms), GPU-timed, IB samples")

    # hangs
    h, hr = hot_vec(rs, 32, 3); c = pick(32, hr)
    add("hang_fwd_a2a_gpu", "hang", [c], W=32, probe="gpu", hot=h, hot_ranks=hr, iter_ms=40, dur=60,
        fault={"type": "hang_fwd", "rank": c, "at": rs.uniform(30, 40)},
        desc="host stops before the forward all-to-all (GPU-timed)")
    h, hr = hot_vec(rs, 24, 3); c = pick(24, hr)
    add("hang_fwd_a2a_enq", "hang", [c], W=24, probe="enq", hot=h, hot_ranks=hr, iter_ms=40, dur=60, steps=True,
        fault={"type": "hang_fwd", "rank": c, "at": rs.uniform(30, 40)},
        desc="host stops before the forward all-to-all (host-enqueue; later calls queued)")
    h, hr = hot_vec(rs, 24, 2); c = pick(24, hr)
    add("hang_ddp_gpu", "hang", [c], W=24, probe="gpu", hot=h, hot_ranks=hr, iter_ms=40, dur=60,
        fault={"type": "hang_ddp", "rank": c, "at": rs.uniform(30, 40)},
        desc="host stops in backward before DDP bucket 1 (GPU-timed)")
    h, hr = hot_vec(rs, 16, 2); c = pick(16, hr)
    add("hang_ddp_enq", "hang", [c], W=16, probe="enq", hot=h, hot_ranks=hr, iter_ms=50, dur=60,
        fault={"type": "hang_ddp", "rank": c, "at": rs.uniform(30, 40)},
        desc="host stops in backward before DDP bucket 1 (host-enqueue)")
    h, hr = hot_vec(rs, 16, 2); c = pick(16, hr)
    add("stop_pipe2_enq", "hang", [c], W=16, probe="enq", hot=h, hot_ranks=hr, iter_ms=30, dur=60, depth=2,
        fault={"type": "stop", "rank": c, "at": rs.uniform(30, 40)},
        desc="2-deep pipeline; Python stops holding the GIL mid-backward, hook reports nothing after")
    h, hr = hot_vec(rs, 16, 2); c = pick(16, hr)
    add("hang_fwd_gloo", "hang", [c], W=16, probe="gloo", hot=h, hot_ranks=hr, iter_ms=33, dur=60,
        fault={"type": "hang_fwd", "rank": c, "at": rs.uniform(30, 40)},
        desc="gloo: a rank never enters the forward all-to-all")

    # slow ranks
    h, hr = hot_vec(rs, 24, 3); c = pick(24, hr)
    add("slow_gpu_tw", "slow_rank", [c], W=24, probe="gpu", hot=h, hot_ranks=hr, iter_ms=35, dur=80,
        fault={"type": "slow_gpu", "rank": c, "at": rs.uniform(25, 35)}, desc="GPU 1.5x (GPU-timed)")
    h, hr = hot_vec(rs, 16, 2); c = pick(16, hr)
    add("slow_gpu_enq", "slow_rank", [c], W=16, probe="enq", hot=h, hot_ranks=hr, iter_ms=45, dur=70, steps=True,
        fault={"type": "slow_gpu", "rank": c, "at": rs.uniform(25, 35)}, desc="GPU 1.5x (host-enqueue, steps)")
    h, hr = hot_vec(rs, 24, 2, 1.1, 1.2); c = pick(24, hr)
    add("slow_gpu_rw", "slow_rank", [c], W=24, probe="gpu", hot=h, hot_ranks=hr, shard="rw", iter_ms=50, dur=80,
        fault={"type": "slow_gpu", "rank": c, "at": rs.uniform(25, 35)}, desc="GPU 1.5x in a row-wise job")
    h, hr = hot_vec(rs, 24, 2); c = pick(24, hr)
    add("slow_loader_gpu", "slow_rank", [c], W=24, probe="gpu", hot=h, hot_ranks=hr, iter_ms=40, dur=80,
        fault={"type": "slow_loader", "rank": c, "at": rs.uniform(25, 35)},
        desc="one rank's data loading 2x slower: late at the input all-to-all")
    h, hr = hot_vec(rs, 16, 2); c = pick(16, hr)
    add("slow_loader_gloo", "slow_rank", [c], W=16, probe="gloo", hot=h, hot_ranks=hr, iter_ms=33, dur=80,
        fault={"type": "slow_loader", "rank": c, "at": rs.uniform(25, 35)}, desc="gloo, one loader 2x slower")
    h, hr = hot_vec(rs, 32, 3); nd = int(rs.integers(0, 4))
    add("nic_2level", "slow_set", list(range(nd * 8, nd * 8 + 8)), W=32, probe="gpu", hot=h, hot_ranks=hr,
        shard="2level", iter_ms=50, dur=80, hw=True, culprit_nodes=[f"node-{nd:02d}"],
        fault={"type": "nic", "node": nd, "at": rs.uniform(35, 50), "factor": 2.5},
        desc=f"node-{nd:02d}'s NIC degraded (2.5x): every inter-node all-to-all slower for all members; "
             "IB symbol errors on that node")
    return S


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("prefixes", nargs="*")
    a = ap.parse_args()
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    for k, (name, kind, culprits, kw) in enumerate(scenarios(a.seed)):
        if a.prefixes and not any(name.startswith(p) for p in a.prefixes):
            continue
        hot_ranks = kw.pop("hot_ranks", [])
        cnodes = kw.pop("culprit_nodes", [])
        job = Job(f"rs-{name}-s{a.seed}", a.seed * 1000 + k, **kw)
        with np.errstate(invalid="ignore"):
            job.run()
        cap, nrec, nmsg, nsteps = emit(job, out, name)
        nval = validate(cap, job.W)
        assert nval == nrec
        onset = job.truth_onset
        if kind != "healthy" and onset is None:
            print(f"!! {name}: fault never happened", file=sys.stderr)
            sys.exit(1)
        truth = {"scenario": name, "job": job.name, "kind": kind, "culprit_ranks": culprits,
                 "culprit_nodes": cnodes, "advisory_ok_ranks": hot_ranks,
                 "onset_ns": ns(onset) if onset else None, "t0_ns": ns(T0),
                 "probe": {"gpu": "gpu", "enq": "enq", "gloo": "gloo"}[job.probe],
                 "setup": f"{job.shard} W={job.W} depth={job.depth} iter~{kw.get('iter_ms', 30)}ms dur={job.dur:.0f}s: {job.desc}",
                 "world_size": job.W, "iterations": job.n_iters,
                 "fault": {k2: (v if not isinstance(v, (np.integer, np.floating)) else v.item()) for k2, v in job.fault.items()}}
        (out / f"{name}.truth.json").write_text(json.dumps(truth, indent=1))
        sz = cap.stat().st_size / 1e6
        med = float(np.median([np.median(x[1] - x[0]) for x in job.iters[5:50]]) / MS)
        truth["iter_ms_median"] = round(med, 2)
        if hasattr(job, "hot_windows"):
            truth["hot_windows_s"] = job.hot_windows
        (out / f"{name}.truth.json").write_text(json.dumps(truth, indent=1))
        print(f"{name:20s} W={job.W:3d} {job.probe:4s} iters={job.n_iters:5d} (~{med:.0f} ms) records={nrec:8d} "
              f"messages={nmsg:6d} steps={nsteps:6d} {sz:6.1f} MB  culprits={culprits} onset="
              f"{'-' if onset is None else f'{onset - T0:.1f}s'}", flush=True)


if __name__ == "__main__":
    main()
