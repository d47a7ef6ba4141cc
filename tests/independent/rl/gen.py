#!/usr/bin/env python3
"""rl/: the thirteenth independent traffic generator - RL post-training (RLHF / GRPO / PPO as run by
veRL, OpenRLHF and NeMo-Aligner) and other jobs whose communication cadence alternates between very
different phases, with communicators sitting idle for tens of seconds to minutes while the processes
stay alive.

Written from the wire spec (shared/spec/wire-v1.md), shared/DOMAIN.md, the READMEs, run_scored.sh
and the capture writer API only (never streams/ nor the other generators' code).

    gen.py --out DIR --seed N [SCENARIO-PREFIX ...]   -> DIR/NAME.cwcap, DIR/NAME.truth.json

THE MODEL (and its numbers)
---------------------------
Two layouts, 8 GPUs per node, one process (rank) per GPU:

* split (OpenRLHF / veRL with a separate rollout pool / NeMo-Aligner with a TRT-LLM server): trainer
  ranks 0..T-1 (DeepSpeed ZeRO-3 / FSDP over one "trainer" communicator) and rollout ranks T..N-1
  grouped into vLLM engines of TP 2-4 (one NCCL TP communicator per engine, inside one node).
  Weights go from the trainer to the engines over a "model update" communicator = trainer rank 0 +
  every rollout rank (NCCL, or gloo as OpenRLHF's vllm_sync_backend=gloo allows). A round is:
    rollout: every engine decodes its share of the prompts; the trainer ranks are alive and idle
             (the driver waits for all generations), their communicator sees no call;
    reward + driver work (2-4 s of host time, no collective);
    training: a 64-byte all-reduce of reward statistics (GRPO advantage normalisation) as the
             phase's first collective, log-prob passes (forward-only FSDP all-gathers), then 3-6
             optimizer steps of 2-4 micro-batches (FSDP all-gather per unit forward; all-gather +
             reduce-scatter per unit backward; a 4-byte grad-norm all-reduce); the rollout
             communicators are idle meanwhile;
    weight sync: per bucket (12-80 buckets of 175-350 MB, a 1.5B-14B bf16 model) rank 0 sends an RPC
             to every engine (1-3 ms later the engine's ranks enter the broadcast), all trainer ranks
             all-gather the bucket (ZeRO-3 GatheredParameters), rank 0 broadcasts it on the
             model-update comm, then waits for the engines' acknowledgement (ray.get). Trainer ranks
             other than 0 run ahead into the next bucket's all-gather and wait there for rank 0
             (rank 0 is structurally late in the trainer comm during a sync: healthy).
* colocated (veRL hybrid engine / NeMo-Aligner): every rank trains (FSDP over a "world" comm) and
  hosts a vLLM TP shard (TP 4 engines). A round: wake the engine (2 s host), re-shard the weights
  (all-gathers on a separate "reshard" comm, 40 buckets), decode, then each replica enters an
  all-gather of its rollouts on the world comm as soon as its own generation ends (NeMo-Aligner
  gathers rollout batches across data-parallel ranks): replicas that finish early wait INSIDE that
  all-gather for the long-tail replicas, 10-60 s, healthy. Then sleep/offload, reward, training as
  above on the world comm.

Decoding: token steps of 20-50 ms (step time shrinks to 55 % as sequences finish and the batch
empties), each step = GPU compute chunks separated by tiny TP all-reduces (activations, 0.05-1.6 MB,
10-30 us on NVLink) then the LM head and sampling/scheduling on the host (1-2 ms). Generation length
varies per engine and round: lognormal (sigma 0.12) around the median, and in most rounds 1-2
engines generate 2-3x the median (long-tail sequences): HEALTHY by design. Optionally (vLLM V0's
driver worker) a gloo broadcast of the step's metadata on a per-engine CPU comm before every step:
the non-driver workers enter it right after the previous step and wait ~1.5 ms for the driver
(structurally late in that comm, healthy), plus one stop broadcast at the end of the generation.

Probes (per scenario): GPU_TIMED (NCCL profiler plugin: device start/end on the host clock; an entry
record becomes visible to the agent 1-3 ms after the device started the call, a completion 1-3 ms
after it ended; a call queued behind a blocked one never starts on the device and has no record);
ENQUEUED (host-enqueue hook completing calls from CUDA events: t_start = host enqueue; COMPLETED only
when the event is observed 0.2-1.5 ms after the device finished; the host runs ahead of the device
until a synchronisation point - the sampled token each decode step, the .item() of a loss, a
log-prob copy - so a rank can have several calls enqueued and not completed); blocking (gloo CPU
comms: entry and completion are real host times, flags 0). The plugin fills `aux` with a per-op-type
counter, the hook writes 0.

Node agent: one cw.calls.v1 batch per node and communicator every 200 ms (per-node phase, 0-10 ms
jitter) holding the records that became visible since the previous flush; heartbeats
(cw.progress.v1) per node and communicator every 1 s for every comm a live local rank belongs to,
idle or not; a rank whose process exited is no longer listed 0.7 s later. cw.topology.v1 once per
rank at start (coords: trainer {dp}, rollout/colocated {tp, dp=engine}); cw.steps.v1 from a
training-loop hook for optimizer steps only (scenarios marked `steps`), phases forward/backward/
optimizer measured on the device clock. Node clocks: offsets uniform +-40 ms, drift +-5 ppm; every
time in a record, heartbeat, step and message key time is on the clock of the node that produced it.

SIMPLIFICATIONS (stated)
------------------------
* A decode step's 40-80 tiny all-reduces (two per transformer layer) are represented by `ar_per_tok`
  recorded all-reduces (4 in most scenarios, each standing for a group of layers with the group's
  compute before it) to keep captures at a few hundred thousand records; `ctl_fullrate` runs the real
  cadence (56 all-reduces per 20 ms token step = 2800 calls/s per rollout rank) on a small job.
* FSDP prefetch/overlap is not modelled: all-gathers, compute and reduce-scatters run in sequence on
  one stream. Reference/critic/reward models are not separate actors (their work is driver time).
* CUDA graphs are not modelled (vLLM eager mode, as veRL's enforce_eager).
* An entry record and the completion record of the same call that become visible within one 200 ms
  flush window are sent as the completion record only (consumers keep the latest record anyway).
* Collective durations: latency + bytes x algorithm factor / bandwidth (NVLink 150 GB/s inside a node,
  40 GB/s across nodes, gloo 1.2 GB/s); completions on the members differ by 0-10 us (gloo 0-40 us).
* No cw.hw.v1 samples.
* A dead process (Ray actor exiting) leaves its peers blocked (Ray does not tear the group down); a
  hung process stays alive and keeps being listed in heartbeats with its counters frozen.

Scenario truth (NAME.truth.json): job, kind (healthy / hang / slow_rank / rank_died), culprit ranks,
allowed extra names, onset (the moment the culprit stops or slows), the capture end, and the timeline.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from commwatch import wire  # noqa: E402
from commwatch.capture import CaptureWriter, Message  # noqa: E402

AR, AG, RS, BC = wire.OP_ALLREDUCE, wire.OP_ALLGATHER, wire.OP_REDUCESCATTER, wire.OP_BROADCAST
T0_NS = 1796083200 * 10**9  # 2026-12-01 00:00 UTC
GPN = 8  # GPUs per node
FLUSH_S = 0.2
HB_S = 1.0
LAUNCH = 6e-6  # host cost of launching one kernel
ENQ_COST = 9e-6  # host cost of enqueueing one collective
INF = float("inf")

# ----------------------------------------------------------------------------------------------
# records


class RecBuf:
    """Call records in true seconds (converted to node clocks when written)."""

    FIELDS = ("kind", "rank", "comm", "seq", "op", "nbytes", "peer", "crank", "nranks", "aux",
              "ts", "te", "flags", "vs", "ve")

    def __init__(self):
        self.lists = {f: [] for f in self.FIELDS}
        self.chunks = []

    def add(self, kind, rank, comm, seq, op, nbytes, peer, crank, nranks, aux, ts, te, flags, vs, ve):
        L = self.lists
        L["kind"].append(kind); L["rank"].append(rank); L["comm"].append(comm); L["seq"].append(seq)
        L["op"].append(op); L["nbytes"].append(nbytes); L["peer"].append(peer); L["crank"].append(crank)
        L["nranks"].append(nranks); L["aux"].append(aux); L["ts"].append(ts); L["te"].append(te)
        L["flags"].append(flags); L["vs"].append(vs); L["ve"].append(ve)

    def add_arrays(self, **cols):
        n = len(cols["ts"])
        out = {}
        for f in self.FIELDS:
            v = cols[f]
            out[f] = np.broadcast_to(np.asarray(v), (n,)).copy() if np.ndim(v) == 0 else np.asarray(v).ravel()
        self.chunks.append(out)

    def arrays(self):
        parts = [{f: np.asarray(self.lists[f]) for f in self.FIELDS}] + self.chunks
        res = {}
        for f in self.FIELDS:
            dt = np.float64 if f in ("ts", "te", "vs", "ve") else np.int64
            res[f] = np.concatenate([np.asarray(p[f], dtype=dt) for p in parts if len(p["ts"])]) \
                if any(len(p["ts"]) for p in parts) else np.zeros(0, dt)
        return res


class Comm:
    def __init__(self, idx, name, cid, members, backend, node_of):
        self.idx, self.name, self.cid, self.members, self.backend = idx, name, cid, list(members), backend
        self.pos = {r: i for i, r in enumerate(self.members)}
        self.n = len(self.members)
        self.nodes = len({node_of[r] for r in self.members})


class RankState:
    __slots__ = ("r", "ops", "pc", "th", "tg", "status", "seq", "opseq", "slow", "marks", "stop_t")

    def __init__(self, r):
        self.r, self.ops, self.pc = r, [], 0
        self.th = self.tg = 0.0
        self.status = "run"
        self.seq, self.opseq = {}, {}
        self.slow = 1.0
        self.marks = []
        self.stop_t = None


# ----------------------------------------------------------------------------------------------
# the job simulator: per-rank programs of ops; collectives rendezvous on device (NCCL) or host (gloo)


class Sim:
    def __init__(self, job, world, node_of, probe, seed):
        self.job, self.world, self.node_of, self.probe = job, world, node_of, probe
        self.comms = []
        self.st = [RankState(r) for r in range(world)]
        self.rec = RecBuf()
        self.pending = {}
        self.rnd = random.Random(seed)
        self.np = np.random.default_rng(seed)
        self.decode_info = {}

    def comm(self, name, members, backend="nccl"):
        h = hashlib.blake2b(f"{self.job}/{name}".encode(), digest_size=8).digest()
        cid = int.from_bytes(h, "little") | 1
        c = Comm(len(self.comms), name, cid, members, backend, self.node_of)
        self.comms.append(c)
        return c

    # -- durations
    def coll_dur(self, c, op, nbytes):
        n = c.n
        if c.backend == "gloo":
            lat, bw = 80e-6, 1.2e9
        elif c.nodes > 1:
            lat, bw = 25e-6, 40e9
        else:
            lat, bw = 8e-6, 150e9
        f = {AR: 2 * (n - 1) / max(n, 1), AG: (n - 1) / max(n, 1), RS: (n - 1) / max(n, 1)}.get(op, 1.0)
        if op == BC and c.backend == "gloo":
            f = 1.5  # gloo broadcast over TCP: pipelined sends from the root, ~1.5x the payload time
        return lat + nbytes * f / bw

    # -- record helpers
    def flags_for(self, c):
        if c.backend == "gloo":
            return 0
        return wire.FLAG_GPU_TIMED if self.probe == "gpu" else wire.FLAG_ENQUEUED

    def aux_for(self, st, c, op):
        if c.backend == "gloo" or self.probe != "gpu":
            return 0
        k = (c.idx, op)
        v = st.opseq.get(k, 0)
        st.opseq[k] = v + 1
        return v & 0xFFFFFFFF

    def add_call(self, st, c, seq, op, nbytes, root, arr, enq, end, aux):
        """One call of rank st on comm c: arrival (device or host), enqueue time, end (None = never)."""
        rnd = self.rnd
        fl = self.flags_for(c)
        if c.backend == "gloo":
            ts, vs = arr, arr
            te, ve = (end, end) if end is not None else (0.0, INF)
        elif self.probe == "gpu":
            if arr == INF:
                return  # never started on the device: the plugin has nothing to report
            ts, vs = arr, arr + rnd.uniform(1e-3, 3e-3)
            te, ve = (end, end + rnd.uniform(1e-3, 3e-3)) if end is not None else (0.0, INF)
        else:
            ts, vs = enq, enq + 3e-5
            if end is not None:
                te = end + rnd.uniform(2e-4, 1.5e-3)
                ve = te
            else:
                te, ve = 0.0, INF
        peer = root if op == BC else -1
        self.rec.add(wire.KIND_CALL, st.r, c.idx, seq, op, int(nbytes), peer, c.pos[st.r], c.n, aux,
                     ts, te, fl, vs, ve)

    # -- main loop
    def run(self):
        dq = deque(range(self.world))
        while dq:
            r = dq.popleft()
            if self.st[r].status == "run":
                self.step_rank(r, dq)
        self.drain_hosts()
        self.flush_unfired()

    def step_rank(self, r, dq):
        st = self.st[r]
        ops = st.ops
        rnd = self.rnd
        while st.pc < len(ops):
            op = ops[st.pc]
            k = op[0]
            if k == "gpu":
                st.th += LAUNCH
                st.tg = max(st.tg, st.th) + op[1] * st.slow
            elif k == "host":
                st.th += op[1]
            elif k == "sync":
                st.th = max(st.th, st.tg) + 2e-5
            elif k == "coll":
                c = self.comms[op[1]]
                seq = st.seq.get(c.idx, 0)
                st.seq[c.idx] = seq + 1
                aux = self.aux_for(st, c, op[2])
                if c.backend == "gloo":
                    enq = arr = max(st.th, st.tg) if op[5] else st.th
                else:
                    enq = st.th
                    st.th += ENQ_COST
                    arr = max(st.tg, enq + 5e-6)
                inst = self.pending.setdefault(("c", c.idx, seq), {"arr": {}, "op": op, "aux": {}})
                inst["arr"][r] = (arr, enq)
                inst["aux"][r] = aux
                st.pc += 1
                st.status = "blocked"
                if len(inst["arr"]) == c.n:
                    self.fire_coll(c, seq, inst, dq)
                return
            elif k == "rdv":
                key, n, delay, jit = op[1], op[2], op[3], op[4]
                inst = self.pending.setdefault(("r", key), {"arr": {}})
                inst["arr"][r] = (max(st.th, st.tg) if op[5] else st.th, delay, jit)
                st.pc += 1
                st.status = "blocked"
                if len(inst["arr"]) == n:
                    t = max(a for a, _, _ in inst["arr"].values())
                    for m, (_, d, j) in inst["arr"].items():
                        sm = self.st[m]
                        sm.th = t + d + rnd.uniform(0, j)
                        sm.status = "run"
                        dq.append(m)
                    del self.pending[("r", key)]
                return
            elif k == "decode":
                key, members = op[1], op[2]
                inst = self.pending.setdefault(("d", key), {"arr": {}})
                inst["arr"][r] = True
                st.th = max(st.th, st.tg) + 2e-5
                st.pc += 1
                st.status = "blocked"
                if len(inst["arr"]) == len(members):
                    del self.pending[("d", key)]
                    self.decode(key, members, dq)
                return
            elif k == "slow":
                st.slow = op[1]
            elif k == "mark":
                st.marks.append((op[1], op[2], max(st.th, st.tg)))
            elif k == "hang":
                st.status = "hung"
                st.stop_t = st.th
                st.pc += 1
                return
            elif k == "die":
                st.status = "dead"
                st.stop_t = max(st.th, st.tg)
                st.pc += 1
                return
            else:
                raise ValueError(k)
            st.pc += 1
        st.status = "done"

    def fire_coll(self, c, seq, inst, dq):
        op = inst["op"]
        t = max(a for a, _ in inst["arr"].values())
        dur = self.coll_dur(c, op[2], op[3])
        jit = 4e-5 if c.backend == "gloo" else 1e-5
        for m, (arr, enq) in inst["arr"].items():
            sm = self.st[m]
            end = t + dur + self.rnd.uniform(0, jit)
            self.add_call(sm, c, seq, op[2], op[3], op[4], arr, enq, end, inst["aux"][m])
            if c.backend == "gloo":
                sm.th = end
                sm.tg = max(sm.tg, end) if op[5] else sm.tg
            else:
                sm.tg = end
            sm.status = "run"
            dq.append(m)
        del self.pending[("c", c.idx, seq)]

    def drain_hosts(self):
        """A rank whose device waits forever in an NCCL call keeps enqueueing on its host until the
        next synchronisation point (ENQUEUED probes see those calls; the plugin never does)."""
        for (kind, *rest), inst in list(self.pending.items()):
            if kind != "c":
                continue
            c = self.comms[rest[0]]
            if c.backend == "gloo":
                continue
            for r in inst["arr"]:
                st = self.st[r]
                st.tg = INF
                while st.pc < len(st.ops):
                    op = st.ops[st.pc]
                    k = op[0]
                    if k == "gpu":
                        st.th += LAUNCH
                    elif k == "host":
                        st.th += op[1]
                    elif k == "mark" or k == "slow":
                        pass
                    elif k == "coll" and self.comms[op[1]].backend != "gloo":
                        c2 = self.comms[op[1]]
                        seq = st.seq.get(c2.idx, 0)
                        st.seq[c2.idx] = seq + 1
                        aux = self.aux_for(st, c2, op[2])
                        enq = st.th
                        st.th += ENQ_COST
                        i2 = self.pending.setdefault(("c", c2.idx, seq), {"arr": {}, "op": op, "aux": {}})
                        i2["arr"][r] = (INF, enq)
                        i2["aux"][r] = aux
                    else:
                        break
                    st.pc += 1

    def flush_unfired(self):
        for (kind, *rest), inst in self.pending.items():
            if kind != "c":
                continue
            c = self.comms[rest[0]]
            seq = rest[1]
            op = inst["op"]
            for r, (arr, enq) in inst["arr"].items():
                self.add_call(self.st[r], c, seq, op[2], op[3], op[4], arr, enq, None, inst["aux"][r])

    # -- decode macro: an engine's whole generation of one round, vectorised
    def decode(self, key, members, dq):
        info = self.decode_info[key]
        g = np.random.default_rng(info["seed"])
        tpc = self.comms[info["tp"]]
        cpu = self.comms[info["cpu"]] if info.get("cpu") is not None else None
        M = len(members)
        sts = [self.st[r] for r in members]
        S = np.array([s.th for s in sts])
        slow = np.array([s.slow for s in sts])
        n, A, B, hidden = info["steps"], info["A"], info["B"], info["hidden"]
        gg = 1 if cpu else 0
        per = A + gg
        K = n * per + gg
        frac = np.arange(n) / max(n - 1, 1)
        active = np.maximum(1, np.rint(B * (1 - 0.85 * frac ** 0.6))).astype(np.int64)
        step_t = info["tok_s"] * (0.55 + 0.45 * active / B) * (1 + 0.03 * g.standard_normal(n))
        chunk = step_t * 0.92 / A
        post = step_t * 0.05
        sched = 0.0012 + 0.0006 * g.random(n)
        w = np.zeros((K, M))
        d = np.zeros(K)
        x = np.zeros((K, M))
        is_ar = np.zeros(K, bool)
        ar_idx = (np.arange(n)[:, None] * per + gg + np.arange(A)[None, :])
        is_ar[ar_idx.ravel()] = True
        w[ar_idx.ravel()] = ((chunk[:, None, None] * (1 + 0.01 * g.standard_normal((n, A, M))))
                             * slow[None, None, :] + LAUNCH).reshape(n * A, M)
        bytes_ar = active * hidden * 2
        d_ar = np.array([self.coll_dur(tpc, AR, b) for b in bytes_ar])
        d[ar_idx] = d_ar[:, None]
        x[ar_idx.ravel()] = g.uniform(0, 1e-5, (n * A, M))
        prevpost = np.concatenate([[0.0], post[:-1]])
        first = np.arange(n) * per
        if gg:
            # G_s: the driver samples + schedules, the workers return and wait in the broadcast
            w[first, :] = prevpost[:, None] * slow[None, :] + 1e-4 + 2e-5 * g.random((n, M))
            w[first, 0] += sched
            gb = 2048 + (active * 24)
            d[first] = [self.coll_dur(cpu, BC, b) for b in gb]
            x[first] = g.uniform(0, 4e-5, (n, M))
            w[K - 1, :] = post[-1] * slow + 1e-4
            w[K - 1, 0] += 0.0008
            d[K - 1] = self.coll_dur(cpu, BC, 64)
            x[K - 1] = g.uniform(0, 4e-5, M)
        else:
            w[first, :] += prevpost[:, None] * slow[None, :] + sched[:, None] + g.uniform(0, 5e-5, (n, M))
        # hang truncation
        hang = info.get("hang")
        kh = None
        if hang is not None:
            mh, sh = hang
            kh = sh * per
        Kc = K if kh is None else kh  # completed elements
        xprev = np.vstack([S[None, :], x[:-1]])
        inc = (xprev + w).max(axis=1) + d
        F = np.cumsum(inc)
        Fprev = np.concatenate([[0.0], F[:-1]])
        arr = Fprev[:, None] + xprev + w
        end = F[:, None] + x
        # host step start (enqueue base) per step and member
        if gg:
            hstart = end[first]  # after the metadata broadcast
        else:
            hstart = arr[first] - (w[first] - (prevpost[:, None] * slow[None, :] + sched[:, None]))
            hstart = np.minimum(hstart, arr[first])
        jpos = np.zeros(K, np.int64)
        jpos[ar_idx.ravel()] = np.tile(np.arange(A), n)
        step_of = np.arange(K) // per
        step_of = np.minimum(step_of, n - 1)
        # elements to record: completed [0, Kc); at kh: arrivals of the others; ENQUEUED: the rest of
        # step sh's all-reduces are enqueued by the waiting peers too
        ks_done = np.arange(Kc)
        self._decode_records(members, tpc, cpu, ks_done, is_ar, arr, end, hstart, jpos, step_of, bytes_ar,
                             gg, done=True, who=np.ones(M, bool))
        if kh is not None:
            mh, sh = hang
            who = np.ones(M, bool)
            who[mh] = False
            ks = [kh]
            if self.probe == "enq" and not (gg and not is_ar[kh]):
                ks = [kk for kk in range(kh, min(kh + per - (0 if is_ar[kh] else 0), K)) if is_ar[kk]]
            self._decode_records(members, tpc, cpu, np.array(ks), is_ar, arr, end, hstart, jpos, step_of,
                                 bytes_ar, gg, done=False, who=who)
            for i, s in enumerate(sts):
                if i == mh:
                    s.status = "hung"
                    s.stop_t = float(Fprev[kh] + xprev[kh, i] + (w[kh, i] if gg else 0.0))
                    s.marks.append(("onset", None, s.stop_t))
                else:
                    s.status = "stuck"
            return
        for i, s in enumerate(sts):
            if gg:
                s.th = float(end[K - 1, i])
                s.tg = max(s.tg, s.th)
            else:
                s.tg = float(end[K - 1, i] + post[-1] * slow[i])
                s.th = s.tg + 5e-4
            s.status = "run"
            s.marks.append(("gen_end", info["round"], s.th))
            dq.append(s.r)

    def _decode_records(self, members, tpc, cpu, ks, is_ar, arr, end, hstart, jpos, step_of, bytes_ar, gg,
                        done, who):
        if len(ks) == 0:
            return
        M = len(members)
        for i, r in enumerate(members):
            if not who[i]:
                continue
            st = self.st[r]
            for cc, sel in ((tpc, is_ar[ks]), (cpu, ~is_ar[ks])):
                if cc is None:
                    continue
                kk = ks[sel]
                if len(kk) == 0:
                    continue
                cnt = len(kk)
                base = st.seq.get(cc.idx, 0)
                st.seq[cc.idx] = base + cnt
                seqs = base + np.arange(cnt)
                fl = self.flags_for(cc)
                if cc.backend == "gloo" or self.probe == "gpu":
                    ts = arr[kk, i]
                else:
                    ts = np.minimum(hstart[step_of[kk], i] + 1.2e-4 * (jpos[kk] + 1), arr[kk, i] - 1e-6)
                if cc is tpc and self.probe == "gpu":
                    ab = st.opseq.get((cc.idx, AR), 0)
                    st.opseq[(cc.idx, AR)] = ab + cnt
                    aux = (ab + np.arange(cnt)) & 0xFFFFFFFF
                else:
                    aux = 0
                if done:
                    if cc.backend == "gloo":
                        te = end[kk, i]
                        vs, ve = ts, te
                    elif self.probe == "gpu":
                        te = end[kk, i]
                        vs = ts + self.np.uniform(1e-3, 3e-3, cnt)
                        ve = te + self.np.uniform(1e-3, 3e-3, cnt)
                    else:
                        te = end[kk, i] + self.np.uniform(2e-4, 1.5e-3, cnt)
                        vs, ve = ts + 3e-5, te
                else:
                    te = np.zeros(cnt)
                    ve = np.full(cnt, INF)
                    if cc.backend == "gloo":
                        vs = ts
                    elif self.probe == "gpu":
                        vs = ts + self.np.uniform(1e-3, 3e-3, cnt)
                    else:
                        vs = ts + 3e-5
                    if self.probe == "gpu" and cc is tpc:
                        # only the first one started on the device; the plugin never sees the rest
                        keep = np.zeros(cnt, bool); keep[0] = True
                        ts, vs, te, ve, seqs = ts[keep], vs[keep], te[keep], ve[keep], seqs[keep]
                        aux = aux[keep] if np.ndim(aux) else aux
                        cnt = 1
                if cc is tpc:
                    nb = bytes_ar[step_of[kk]][: cnt]
                    op, peer = AR, -1
                else:
                    nb = 2048
                    op, peer = BC, 0
                self.rec.add_arrays(kind=wire.KIND_CALL, rank=r, comm=cc.idx, seq=seqs, op=op, nbytes=nb,
                                    peer=peer, crank=cc.pos[r], nranks=cc.n, aux=aux, ts=ts, te=te, flags=fl,
                                    vs=vs, ve=ve)


# ----------------------------------------------------------------------------------------------
# program builders


def jit(rnd, v, s=0.02):
    return v * (1 + s * rnd.gauss(0, 1))


class Builder:
    def __init__(self, sc, seed):
        self.sc = sc
        self.rnd = random.Random(seed * 7919 + 17)
        self.g = np.random.default_rng(seed * 104729 + 3)
        self.seed = seed

    # common training phase on comm `tw` for ranks `trs` (FSDP units)
    def training(self, sim, tw, trs, r_idx, it0, faults):
        sc, rnd = self.sc, self.rnd
        U, ub = sc["units"], sc["unit_bytes"]
        f_s, b_s = sc["fwd_s"], sc["bwd_s"]
        mbs, steps, lp = sc["mbs"], sc["opt_steps"], sc["lp_passes"]
        it = it0
        for r in trs:
            o = sim.st[r].ops
            o.append(("mark", "train_start", r_idx))
            f = faults.get(("hang_first_ar", r, r_idx))
            if f:
                o.append(("mark", "onset", None)); o.append(("hang",))
            f = faults.get(("slow_train", r, r_idx))
            if f:
                o.append(("slow", f)); o.append(("mark", "onset", None))
            o.append(("coll", tw.idx, AR, 64, None, False))  # reward statistics (advantage normalisation)
            for p in range(lp):
                for mb in range(sc["lp_mbs"]):
                    for u in range(U):
                        o.append(("coll", tw.idx, AG, ub, None, False))
                        o.append(("gpu", jit(rnd, f_s * 0.8)))
                    o.append(("sync",))  # log-probs copied to the host
            for s in range(steps):
                i = it + s
                o.append(("mark", "it_begin", i))
                for mb in range(mbs):
                    df = faults.get(("die", r, r_idx, s, mb))
                    if df:
                        o.append(("sync",)); o.append(("mark", "onset", None)); o.append(("die",))
                    o.append(("mark", "fwd_b", i))
                    for u in range(U):
                        o.append(("coll", tw.idx, AG, ub, None, False))
                        o.append(("gpu", jit(rnd, f_s)))
                    o.append(("mark", "fwd_e", i))
                    for u in range(U):
                        o.append(("coll", tw.idx, AG, ub, None, False))
                        o.append(("gpu", jit(rnd, b_s)))
                        o.append(("coll", tw.idx, RS, ub, None, False))
                    o.append(("mark", "bwd_e", i))
                    if rnd.random() < 0.03:
                        o.append(("host", rnd.uniform(0.05, 0.25)))  # GC / data collation hiccup
                o.append(("mark", "opt_b", i))
                o.append(("coll", tw.idx, AR, 4, None, False))  # grad norm
                o.append(("gpu", jit(rnd, sc["opt_s"])))
                o.append(("sync",))
                o.append(("mark", "it_end", i))
            o.append(("mark", "train_end", r_idx))
        return it + steps

    def gen_lengths(self, n_eng, r_idx):
        sc = self.sc
        med_steps = sc["median_gen_s"] / (sc["tok_ms"] / 1000 * 0.78)
        fac = np.exp(0.12 * self.g.standard_normal(n_eng))
        tails = sc.get("tails", [1, 2, 1, 2, 0, 1, 2])
        ntail = tails[r_idx % len(tails)]
        if ntail:
            idx = self.g.choice(n_eng, size=min(ntail, n_eng), replace=False)
            fac[idx] = self.g.uniform(2.0, 3.0, len(idx))
        over = sc.get("gen_override", {}).get(r_idx)
        if over is not None:
            fac = np.asarray(over(fac) if callable(over) else over, float)
        return np.maximum(20, np.rint(med_steps * fac)).astype(int), fac


def build_split(sc, seed):
    b = Builder(sc, seed)
    rnd = b.rnd
    T, E, tp = sc["n_train"], sc["engines"], sc["tp"]
    R = E * tp
    N = T + R
    node_of = [r // GPN for r in range(N)]
    sim = Sim(sc["job"], N, node_of, sc["probe"], seed * 31 + 5)
    trs = list(range(T))
    rol = list(range(T, N))
    tw = sim.comm("trainer-fsdp", trs)
    scomm = sim.comm("model-update", [0] + rol, sc.get("sync_backend", "nccl"))
    tpcs = [sim.comm(f"vllm-tp-{e}", rol[e * tp:(e + 1) * tp]) for e in range(E)]
    cpus = [sim.comm(f"vllm-cpu-{e}", rol[e * tp:(e + 1) * tp], "gloo") for e in range(E)] if sc.get("cpu_group") else None
    faults = sc.get("faults", {})
    gloo_sync = scomm.backend == "gloo"
    for r in range(N):
        o = sim.st[r].ops
        o.append(("host", 4.0 + 0.5 * rnd.random()))  # model load, engine start (comms initialised at 1-3 s)
    it = 0
    for ri in range(sc["rounds"]):
        key = f"round{ri}"
        for r in range(N):
            o = sim.st[r].ops
            o.append(("rdv", key, N, 0.002, 0.003, True))
            o.append(("mark", "round", ri))
        # rollout
        steps, fac = b.gen_lengths(E, ri)
        sc.setdefault("_gen", []).append([round(float(f), 2) for f in fac])
        for e in range(E):
            members = rol[e * tp:(e + 1) * tp]
            dk = f"dec{ri}-{e}"
            hang = None
            for pos, r in enumerate(members):
                hf = faults.get(("hang_decode", r, ri))
                if hf is not None:
                    hang = (pos, int(steps[e] * hf))
            sim.decode_info[dk] = {"tp": tpcs[e].idx, "cpu": cpus[e].idx if cpus else None, "steps": int(steps[e]),
                                   "A": sc["ar_per_tok"], "B": sc["batch"], "hidden": sc["hidden"],
                                   "tok_s": sc["tok_ms"] / 1000, "seed": seed * 1000 + ri * 50 + e, "round": ri,
                                   "hang": hang}
            for r in members:
                o = sim.st[r].ops
                o.append(("host", 0.02 + 0.01 * rnd.random()))
                f = faults.get(("slow_gen", r, ri))
                if f:
                    o.append(("slow", f)); o.append(("mark", "onset", None))
                o.append(("mark", "gen_start", ri))
                o.append(("decode", dk, members))
                o.append(("host", 0.01))
        rw = sc["reward_s"] + 0.5 * rnd.random()  # reward scoring on the driver
        for r in range(N):
            o = sim.st[r].ops
            o.append(("rdv", f"gen_done{ri}", N, rw if r < T else 0.001, 0.004, True))
        # training
        it = b.training(sim, tw, trs, ri, it, faults)
        # weight sync
        nb, bb = sc["buckets"], sc["bucket_bytes"]
        for r in range(N):
            sim.st[r].ops.append(("mark", "sync_start", ri))
        for k in range(nb):
            rk, ak = f"rpc{ri}-{k}", f"ack{ri}-{k}"
            for r in trs:
                o = sim.st[r].ops
                if r == 0:
                    o.append(("host", 4e-4))
                    o.append(("rdv", rk, 1 + R, 1e-4, 1e-4, False))
                o.append(("coll", tw.idx, AG, bb, None, False))
                if r == 0:
                    if gloo_sync:
                        o.append(("sync",))
                    o.append(("coll", scomm.idx, BC, bb, 0, False))
                    o.append(("sync",))
                    o.append(("rdv", ak, 1 + R, 3e-4, 3e-4, True))
            for r in rol:
                o = sim.st[r].ops
                o.append(("rdv", rk, 1 + R, 1e-3, 2e-3, False))
                if faults.get(("hang_sync", r, ri, k)):
                    o.append(("mark", "onset", None)); o.append(("hang",))
                o.append(("coll", scomm.idx, BC, bb, 0, False))
                o.append(("gpu", 1.5e-3 * bb / 3.5e8))  # load_weights
                o.append(("sync",))
                o.append(("rdv", ak, 1 + R, 2e-4, 2e-4, True))
        for r in range(N):
            sim.st[r].ops.append(("mark", "sync_end", ri))
    coords = {}
    for r in trs:
        coords[r] = {"dp": r}
    for e in range(E):
        for t in range(tp):
            coords[rol[e * tp + t]] = {"tp": t, "dp": e}
    return sim, coords, {"trainer": trs, "rollout": rol, "engines": [rol[e * tp:(e + 1) * tp] for e in range(E)]}


def build_coloc(sc, seed):
    b = Builder(sc, seed)
    rnd = b.rnd
    E, tp = sc["engines"], sc["tp"]
    N = E * tp
    node_of = [r // GPN for r in range(N)]
    sim = Sim(sc["job"], N, node_of, sc["probe"], seed * 31 + 5)
    allr = list(range(N))
    world = sim.comm("fsdp-world", allr)
    resh = sim.comm("reshard", allr)
    tpcs = [sim.comm(f"vllm-tp-{e}", allr[e * tp:(e + 1) * tp]) for e in range(E)]
    cpus = [sim.comm(f"vllm-cpu-{e}", allr[e * tp:(e + 1) * tp], "gloo") for e in range(E)] if sc.get("cpu_group") else None
    faults = sc.get("faults", {})
    for r in range(N):
        sim.st[r].ops.append(("host", 4.0 + 0.5 * rnd.random()))
    it = 0
    for ri in range(sc["rounds"]):
        steps, fac = b.gen_lengths(E, ri)
        sc.setdefault("_gen", []).append([round(float(f), 2) for f in fac])
        for r in allr:
            o = sim.st[r].ops
            o.append(("rdv", f"round{ri}", N, 0.002, 0.003, True))
            o.append(("mark", "round", ri))
            o.append(("host", jit(rnd, 2.0, 0.05)))  # wake the engine, reload KV cache
            o.append(("mark", "sync_start", ri))
            for k in range(sc["buckets"]):
                o.append(("coll", resh.idx, AG, sc["bucket_bytes"], None, False))
                o.append(("gpu", jit(rnd, 0.06, 0.1)))  # vLLM load_weights of the bucket
            o.append(("sync",))
            o.append(("mark", "sync_end", ri))
        for e in range(E):
            members = allr[e * tp:(e + 1) * tp]
            dk = f"dec{ri}-{e}"
            hang = None
            for pos, r in enumerate(members):
                hf = faults.get(("hang_decode", r, ri))
                if hf is not None:
                    hang = (pos, int(steps[e] * hf))
            sim.decode_info[dk] = {"tp": tpcs[e].idx, "cpu": cpus[e].idx if cpus else None, "steps": int(steps[e]),
                                   "A": sc["ar_per_tok"], "B": sc["batch"], "hidden": sc["hidden"],
                                   "tok_s": sc["tok_ms"] / 1000, "seed": seed * 1000 + ri * 50 + e, "round": ri,
                                   "hang": hang}
            for r in members:
                o = sim.st[r].ops
                f = faults.get(("slow_gen", r, ri))
                if f:
                    o.append(("slow", f)); o.append(("mark", "onset", None))
                o.append(("mark", "gen_start", ri))
                o.append(("decode", dk, members))
                o.append(("gpu", 0.004))
                o.append(("coll", world.idx, AG, 2 * 1024 * 1024, None, False))  # gather the rollouts
                o.append(("sync",))
                o.append(("host", jit(rnd, 1.0, 0.05)))  # sleep the engine / offload
        rw = sc["reward_s"] + 0.3 * rnd.random()  # reward scoring on the driver
        for r in allr:
            sim.st[r].ops.append(("rdv", f"gen_done{ri}", N, rw, 0.004, True))
        it = b.training(sim, world, allr, ri, it, faults)
    coords = {r: {"tp": r % tp, "dp": r // tp} for r in allr}
    return sim, coords, {"trainer": allr, "rollout": allr, "engines": [allr[e * tp:(e + 1) * tp] for e in range(E)]}


# ----------------------------------------------------------------------------------------------
# writing the capture


def write_capture(sc, sim, coords, roles, path, t_end, seed):
    job, N, node_of = sim.job, sim.world, sim.node_of
    rng = np.random.default_rng(seed * 977 + 1)
    n_nodes = max(node_of) + 1
    off = rng.uniform(-0.040, 0.040, n_nodes)
    drift = rng.uniform(-5e-6, 5e-6, n_nodes)
    nodes = [f"node-{i:02d}" for i in range(n_nodes)]

    def ns(t, nd):
        t = np.asarray(t, np.float64)
        return (T0_NS + np.rint((t + off[nd] + drift[nd] * t) * 1e9)).astype(np.int64)

    def ns1(t, nd):
        return int(T0_NS + round((t + off[nd] + drift[nd] * t) * 1e9))

    msgs = []  # (ts_ns, Message)
    # topology
    for r in range(N):
        nd = node_of[r]
        t = 0.2 + 0.05 * rng.random()
        v = {"v": 1, "job": job, "ts_ns": ns1(t, nd), "rank": r, "world_size": N, "node": nodes[nd],
             "local_rank": r % GPN, "gpu": "GPU-" + hashlib.md5(f"{job}{r}".encode()).hexdigest()[:8] + "-rl",
             "coords": coords[r]}
        msgs.append(Message("cw.topology.v1", job, v["ts_ns"], json.dumps(v).encode()))
    # COMM_INIT records (init between 1 and 3 s)
    init_t = {}
    for c in sim.comms:
        t = 1.0 + 2.0 * rng.random()
        for r in c.members:
            ti = t + 0.01 * rng.random()
            init_t[(r, c.idx)] = ti
            sim.rec.add(wire.KIND_COMM_INIT, r, c.idx, 0, 0, 0, -1, c.pos[r], c.n, c.nodes, ti, 0.0, 0, ti, INF)
    R = sim.rec.arrays()
    # the probe writes a call's entry before its completion: a completion never becomes visible first
    R["ve"] = np.where(np.isfinite(R["ve"]), np.maximum(R["ve"], R["vs"] + 1e-6), R["ve"])
    # a dead rank's records after its death never reach the agent
    stop = np.array([sim.st[r].stop_t if sim.st[r].status == "dead" else INF for r in range(N)])
    # --- batching per node
    nrec = len(R["ts"])
    rnode = np.array(node_of)[R["rank"]]
    out_parts = []
    for nd in range(n_nodes):
        ph = rng.uniform(0, FLUSH_S)
        nfl = int((t_end - ph) / FLUSH_S) + 2
        flush = ph + FLUSH_S * np.arange(nfl) + rng.uniform(0, 0.01, nfl)
        sel = np.flatnonzero(rnode == nd)
        if len(sel) == 0:
            continue
        vs, ve = R["vs"][sel], R["ve"][sel]
        bs = np.searchsorted(flush, vs)
        be = np.searchsorted(flush, np.where(np.isfinite(ve), ve, 1e18))
        fin = np.isfinite(ve)
        same = fin & (bs == be)
        # completed records
        ce = fin & (be < nfl)
        ce &= flush[np.minimum(be, nfl - 1)] <= t_end
        # entry records (not merged)
        en = ~same & (bs < nfl)
        en &= flush[np.minimum(bs, nfl - 1)] <= t_end
        for mask, bidx, completed in ((en, bs, False), (ce, be, True)):
            idx = sel[mask]
            bi = bidx[mask]
            ft = flush[bi]
            alive = ft <= stop[R["rank"][idx]] + 0.3
            idx, bi, ft = idx[alive], bi[alive], ft[alive]
            out_parts.append((nd, idx, bi, ft, completed))
    # build the wire records
    all_idx = np.concatenate([p[1] for p in out_parts])
    all_nd = np.concatenate([np.full(len(p[1]), p[0]) for p in out_parts])
    all_b = np.concatenate([p[2] for p in out_parts])
    all_ft = np.concatenate([p[3] for p in out_parts])
    all_c = np.concatenate([np.full(len(p[1]), p[4]) for p in out_parts])
    recs = wire.empty(len(all_idx))
    recs["kind"] = R["kind"][all_idx]
    recs["op"] = R["op"][all_idx]
    fl = R["flags"][all_idx] | np.where(all_c, wire.FLAG_COMPLETED, 0)
    recs["flags"] = fl
    recs["rank"] = R["rank"][all_idx]
    cid = np.array([c.cid for c in sim.comms], dtype=np.uint64)
    recs["comm"] = cid[R["comm"][all_idx]]
    recs["seq"] = R["seq"][all_idx]
    recs["t_start_ns"] = ns(R["ts"][all_idx], all_nd)
    recs["t_end_ns"] = np.where(all_c, ns(R["te"][all_idx], all_nd), 0)
    recs["bytes"] = R["nbytes"][all_idx]
    recs["comm_rank"] = R["crank"][all_idx]
    recs["peer"] = R["peer"][all_idx]
    recs["nranks"] = R["nranks"][all_idx]
    recs["aux"] = R["aux"][all_idx]
    order = np.lexsort((np.where(all_c, R["ve"][all_idx], R["vs"][all_idx]), R["comm"][all_idx], all_b, all_nd))
    recs = recs[order]
    g_nd, g_b, g_c, g_ft = all_nd[order], all_b[order], R["comm"][all_idx][order], all_ft[order]
    brk = np.flatnonzero((np.diff(g_nd) != 0) | (np.diff(g_b) != 0) | (np.diff(g_c) != 0)) + 1
    starts = np.concatenate([[0], brk])
    ends = np.concatenate([brk, [len(recs)]])
    ncalls = int(np.count_nonzero(recs["kind"] == wire.KIND_CALL))
    for s0, s1 in zip(starts.tolist(), ends.tolist()):
        nd = int(g_nd[s0])
        c = sim.comms[int(g_c[s0])]
        ts = ns1(float(g_ft[s0]) + 0.002, nd)
        val = wire.encode_batch(recs[s0:s1])
        msgs.append(Message("cw.calls.v1", f"{job}/{wire.comm_hex(c.cid)}", ts, val))
    # --- heartbeats
    per_rc = {}
    calls = R["kind"] == wire.KIND_CALL
    ordk = np.lexsort((R["seq"], R["comm"], R["rank"]))
    ordk = ordk[calls[ordk]]
    keys = R["rank"][ordk] * 4096 + R["comm"][ordk]
    brk = np.flatnonzero(np.diff(keys)) + 1
    for a, z in zip(np.concatenate([[0], brk]).tolist(), np.concatenate([brk, [len(ordk)]]).tolist()):
        ii = ordk[a:z]
        per_rc[(int(R["rank"][ii[0]]), int(R["comm"][ii[0]]))] = (
            np.maximum.accumulate(R["vs"][ii]), np.maximum.accumulate(R["ve"][ii]), R["seq"][ii], R["ts"][ii], R["te"][ii])
    n_hb = 0
    for nd in range(n_nodes):
        ph = rng.uniform(0, HB_S)
        for c in sim.comms:
            local = [r for r in c.members if node_of[r] == nd]
            if not local:
                continue
            t_init = min(init_t[(r, c.idx)] for r in local)
            hb = np.arange(math.ceil((t_init + 0.1 - ph) / HB_S), int((t_end - ph) / HB_S) + 1) * HB_S + ph
            hb = hb + rng.uniform(0, 0.005, len(hb))
            hb = hb[hb <= t_end]
            cols = {}
            for r in local:
                dat = per_rc.get((r, c.idx))
                if dat is None:
                    cols[r] = None
                    continue
                vsa, vea, seqs, tsa, tea = dat
                si = np.searchsorted(vsa, hb, "right") - 1
                ci = np.searchsorted(vea, hb, "right") - 1
                cols[r] = (si, ci, seqs, tsa, tea)
            for j, t in enumerate(hb.tolist()):
                ranks = []
                for r in local:
                    st = sim.st[r]
                    if st.status == "dead" and t > st.stop_t + 0.7:
                        continue
                    if t < init_t[(r, c.idx)]:
                        continue
                    col = cols[r]
                    if col is None:
                        ranks.append({"rank": r, "started": -1, "completed": -1, "t_last_start_ns": 0, "t_last_end_ns": 0})
                        continue
                    si, ci, seqs, tsa, tea = col
                    a, z = int(si[j]), int(ci[j])
                    ranks.append({"rank": r, "started": int(seqs[a]) if a >= 0 else -1,
                                  "completed": int(seqs[z]) if z >= 0 else -1,
                                  "t_last_start_ns": ns1(float(tsa[a]), nd) if a >= 0 else 0,
                                  "t_last_end_ns": ns1(float(tea[z]), nd) if z >= 0 else 0})
                if not ranks:
                    continue
                tsn = ns1(t, nd)
                v = {"v": 1, "job": job, "node": nodes[nd], "ts_ns": tsn, "comm": wire.comm_hex(c.cid), "ranks": ranks}
                msgs.append(Message("cw.progress.v1", f"{job}/{wire.comm_hex(c.cid)}", tsn,
                                    json.dumps(v, separators=(",", ":")).encode()))
                n_hb += 1
    # --- steps (training-loop hook)
    n_steps = 0
    if sc.get("steps"):
        for r in roles["trainer"]:
            st = sim.st[r]
            nd = node_of[r]
            cur = None
            for lab, arg, t in st.marks:
                if lab == "it_begin":
                    cur = {"it": arg, "b": t, "fwd": 0.0, "bwd": 0.0}
                elif cur is None:
                    continue
                elif lab == "fwd_b":
                    cur["fb"] = t
                elif lab == "fwd_e":
                    cur["fwd"] += t - cur["fb"]; cur["fe"] = t
                elif lab == "bwd_e":
                    cur["bwd"] += t - cur["fe"]
                elif lab == "opt_b":
                    cur["ob"] = t
                elif lab == "it_end":
                    te = t
                    if te + 0.02 > t_end:
                        break
                    v = {"v": 1, "job": job, "rank": r, "iteration": cur["it"], "t_start_ns": ns1(cur["b"], nd),
                         "t_end_ns": ns1(te, nd),
                         "phases": {"forward_ms": round(cur["fwd"] * 1e3, 2), "backward_ms": round(cur["bwd"] * 1e3, 2),
                                    "optimizer_ms": round((te - cur["ob"]) * 1e3, 2)}}
                    msgs.append(Message("cw.steps.v1", job, ns1(te + 0.02, nd), json.dumps(v).encode()))
                    n_steps += 1
                    cur = None
    msgs.sort(key=lambda m: m.ts_ns)
    with CaptureWriter(path) as w:
        for m in msgs:
            w.write(m)
    # check every batch against the contract
    for m in msgs:
        if m.topic == "cw.calls.v1":
            wire.decode_batch(m.value, comm=wire.parse_comm(m.key.split("/", 1)[1]))
    return {"messages": len(msgs), "call_records": ncalls, "heartbeats": n_hb, "steps": n_steps,
            "clock_offsets_ms": [round(float(o) * 1e3, 1) for o in off]}


# ----------------------------------------------------------------------------------------------
# scenarios


def base(**kw):
    d = dict(probe="gpu", rounds=3, ar_per_tok=4, tok_ms=40, batch=192, hidden=4096, median_gen_s=20,
             reward_s=3.0, units=8, unit_bytes=1_750_000_000 // 8 * 8, fwd_s=0.06, bwd_s=0.12, opt_s=0.25,
             mbs=2, opt_steps=4, lp_passes=2, lp_mbs=4, buckets=40, bucket_bytes=350_000_000, steps=False,
             after_s=120.0)
    d.update(kw)
    return d


def scenarios():
    S = []
    # ---- healthy controls
    S.append(base(name="ctl_longtail", setup="coloc", engines=8, tp=4, kind="healthy", rounds=3, tok_ms=40,
                  median_gen_s=18, tails=[2, 1, 2], steps=True,
                  desc="colocated (veRL hybrid / NeMo-Aligner), 32 ranks, GPU-timed: every round 1-2 of 8 "
                       "engines generate 2-3x the median; the others wait inside the world all-gather of rollouts"))
    S.append(base(name="ctl_idle64", setup="split", n_train=32, engines=8, tp=4, kind="healthy", rounds=2,
                  tok_ms=50, median_gen_s=38, tails=[2, 2], opt_steps=5, bucket_bytes=350_000_000, buckets=80,
                  desc="split (OpenRLHF), 64 ranks, GPU-timed: trainer comm idle ~100 s during each rollout, "
                       "rollout TP comms idle ~50 s during training + sync, heartbeats throughout"))
    S.append(base(name="ctl_sync", setup="split", n_train=16, engines=8, tp=2, kind="healthy", rounds=5,
                  tok_ms=35, median_gen_s=13, tails=[1, 1, 0, 1, 1], sync_backend="gloo", buckets=40,
                  bucket_bytes=175_000_000, steps=True, opt_steps=3,
                  desc="split, 32 ranks, GPU-timed NCCL + a gloo (blocking) model-update comm: a 10 s weight "
                       "sync every ~45 s round, rank 0 structurally late in the trainer comm during it"))
    S.append(base(name="ctl_enqueue", setup="coloc", engines=4, tp=4, kind="healthy", probe="enq", cpu_group=True,
                  rounds=3, tok_ms=30, median_gen_s=16, tails=[1, 2, 1], steps=True,
                  desc="colocated, 16 ranks, host-enqueue probes (NCCL completions from CUDA events) and the "
                       "vLLM V0 driver's per-step gloo metadata broadcast (blocking); long-tail generation"))
    S.append(base(name="ctl_fullrate", setup="split", n_train=12, engines=2, tp=2, kind="healthy", rounds=6,
                  ar_per_tok=56, tok_ms=20, median_gen_s=2.0, tails=[1], batch=128, hidden=1536,
                  units=4, unit_bytes=400_000_000, fwd_s=0.08, bwd_s=0.16, opt_steps=4, mbs=4, lp_mbs=2,
                  buckets=12, bucket_bytes=260_000_000, reward_s=2.0,
                  desc="split, 16 ranks (12 trainer, 2 engines of TP 2), GPU-timed, the real decode cadence: 56 TP "
                       "all-reduces per 20 ms token step (a 1.5B model), ~2800 calls/s per rollout rank, then idle"))
    # ---- slow ranks
    S.append(base(name="slow_rollout", setup="coloc", engines=8, tp=4, kind="slow_rank", rounds=3, tok_ms=40,
                  median_gen_s=18, tails=[1, 1, 1], culprits=[13], factor=1.5,
                  faults={("slow_gen", 13, 1): 1.5, ("slow_gen", 13, 2): 1.5},
                  desc="colocated, 32 ranks, GPU-timed: rank 13 (engine 3, tp 1) GPU 1.5x slower from round 1; "
                       "its TP peers wait in every decode all-reduce, the other replicas wait in the rollout gather"))
    S.append(base(name="slow_rollout_split", setup="split", n_train=16, engines=8, tp=2, kind="slow_rank",
                  rounds=4, tok_ms=35, median_gen_s=14, tails=[1, 1, 1, 1], culprits=[27], factor=1.5,
                  faults={("slow_gen", 27, r): 1.5 for r in (1, 2, 3)}, opt_steps=3,
                  desc="split, 32 ranks, GPU-timed: rollout rank 27 (engine 5, tp 1 of TP 2) 1.5x slower from "
                       "round 1; its one TP peer waits in every all-reduce"))
    S.append(base(name="slow_trainer", setup="split", n_train=16, engines=4, tp=4, kind="slow_rank", rounds=4,
                  tok_ms=40, median_gen_s=18, tails=[1, 1, 1, 1], culprits=[6], factor=1.3, opt_steps=6,
                  steps=True, faults={("slow_train", 6, r): 1.3 for r in (1, 2, 3)},
                  desc="split, 32 ranks, GPU-timed, steps: trainer rank 6 GPU 1.3x slower from round 1's "
                       "training phase (FSDP: every other trainer rank waits in each all-gather)"))
    # ---- hangs
    S.append(base(name="hang_sync", setup="split", n_train=16, engines=4, tp=4, kind="hang", rounds=3,
                  tok_ms=40, median_gen_s=18, tails=[1, 1, 1], culprits=[27], buckets=60,
                  faults={("hang_sync", 27, 1, 23): True},
                  desc="split, 32 ranks, GPU-timed: in round 1's weight sync rollout rank 27 never enters "
                       "broadcast #23; rank 0 waits in it, trainer ranks 1-15 wait for rank 0 in the next all-gather"))
    S.append(base(name="hang_rollout", setup="split", n_train=16, engines=4, tp=4, kind="hang", rounds=3,
                  tok_ms=40, median_gen_s=18, tails=[1, 1, 1], culprits=[22],
                  faults={("hang_decode", 22, 1): 0.4},
                  desc="split, 32 ranks, GPU-timed: rollout rank 22 (engine 1, tp 2) stops 40 % into round 1's "
                       "generation; its 3 TP peers wait inside a decode all-reduce, other engines finish and idle"))
    S.append(base(name="hang_rollout_enq", setup="coloc", engines=4, tp=4, kind="hang", probe="enq",
                  cpu_group=True, rounds=3, tok_ms=30, median_gen_s=16, tails=[1, 1, 1], culprits=[8],
                  faults={("hang_decode", 8, 1): 0.5}, steps=True,
                  desc="colocated, 16 ranks, host-enqueue + gloo: engine 2's driver rank 8 stops before a step's "
                       "metadata broadcast; its peers wait in the gloo broadcast, the other 12 ranks in the gather"))
    S.append(base(name="dies_trainer", setup="split", n_train=16, engines=8, tp=2, kind="rank_died", rounds=3,
                  tok_ms=35, median_gen_s=14, tails=[1, 1, 1], culprits=[9], steps=True, opt_steps=4,
                  faults={("die", 9, 1, 2, 1): True},
                  desc="split, 32 ranks, GPU-timed, steps: trainer rank 9's process exits (OOM) in round 1, "
                       "optimizer step 2; its agent stops listing it, the other trainer ranks wait in an all-gather"))
    S.append(base(name="hang_after_idle", setup="split", n_train=16, engines=4, tp=4, kind="hang", probe="enq",
                  rounds=3, tok_ms=40, median_gen_s=30, tails=[1, 0, 1], culprits=[11], steps=True,
                  gen_override={2: [1.0, 0.93, 1.07, 1.95]},
                  faults={("hang_first_ar", 11, 2): True},
                  desc="split, 32 ranks, host-enqueue, steps: the trainer comm idle ~65 s during round 2's "
                       "rollout, then rank 11 never enqueues the phase's first all-reduce; the others enqueue it "
                       "and the next log-prob all-gathers behind it"))
    S.append(base(name="hang_after_idle_gpu", setup="split", n_train=24, engines=4, tp=2, kind="hang",
                  rounds=3, tok_ms=45, median_gen_s=36, tails=[0, 1, 1], culprits=[17],
                  gen_override={1: [1.0, 1.05, 1.6, 0.95]},
                  faults={("hang_first_ar", 17, 1): True}, opt_steps=3,
                  desc="split, 32 ranks (24 trainer + 4 engines of TP 2), GPU-timed: trainer comm idle ~60 s "
                       "during round 1's rollout, then rank 17 (node 2) never enters the phase's first all-reduce"))
    for s in S:
        s.setdefault("culprits", [])
    return S


def marks_of(sim, r, lab):
    return [(a, t) for (l, a, t) in sim.st[r].marks if l == lab]


def run_scenario(sc, out, seed):
    t0 = time.time()
    name = sc["name"]
    sc["job"] = f"rl-{name.replace('_', '-')}-s{seed}"
    sseed = seed * 1000 + sum(ord(ch) for ch in name)
    sim, coords, roles = (build_split if sc["setup"] == "split" else build_coloc)(sc, sseed)
    sim.run()
    N = sim.world
    # onset
    onset = None
    for r in sc["culprits"]:
        m = marks_of(sim, r, "onset")
        if m:
            onset = m[0][1] if onset is None else min(onset, m[0][1])
    # when the waiting becomes visible: the earliest entry of a call that never completes
    first_wait = None
    if sc["kind"] in ("hang", "rank_died"):
        R = sim.rec.arrays()
        nc = (R["kind"] == wire.KIND_CALL) & ~np.isfinite(R["ve"])
        if nc.any():
            first_wait = float(R["ts"][nc].min())
    # capture end
    tr0 = roles["trainer"][0]
    ends = [t for _, t in marks_of(sim, tr0, "train_end")]
    if sc["kind"] in ("hang", "rank_died"):
        onset = min(onset, first_wait) if first_wait is not None else onset
        t_end = onset + sc["after_s"]
    else:
        t_end = ends[-1] - 1.0 if ends else max(s.th for s in sim.st)
    # timeline from the first trainer rank and the engines' first ranks
    tl = []
    for ri in range(sc["rounds"]):
        row = {"round": ri}
        for lab in ("round", "sync_start", "sync_end", "train_start", "train_end"):
            v = [t for a, t in marks_of(sim, tr0, lab) if a == ri]
            if v:
                row[lab + "_s"] = round(v[0], 3)
        gs = [t for e in roles["engines"] for a, t in marks_of(sim, e[0], "gen_start") if a == ri]
        ge = [t for e in roles["engines"] for a, t in marks_of(sim, e[0], "gen_end") if a == ri]
        if gs:
            row["gen_start_s"] = round(min(gs), 3)
        if ge:
            row["gen_end_s"] = [round(t, 3) for t in ge]
        tl.append(row)
    rs = [t for _, t in marks_of(sim, tr0, "round")]
    round_s = float(np.mean(np.diff(rs))) if len(rs) > 1 else None
    its = {}
    for lab, arg, t in sim.st[tr0].marks:
        if lab == "it_begin":
            its[arg] = t
        elif lab == "it_end" and arg in its:
            its[arg] = t - its[arg]
    it_s = float(np.median([v for v in its.values() if v < 1000])) if its else None
    it_list = []
    beg = {}
    for lab, arg, t in sim.st[tr0].marks:
        if lab == "it_begin":
            beg[arg] = t
        elif lab == "it_end" and arg in beg and t <= t_end:
            it_list.append([arg, round(beg[arg], 3), round(t, 3)])
    stats = write_capture(sc, sim, coords, roles, out / f"{name}.cwcap", t_end, sseed)
    victims_note = {
        "slow_rank": "the culprit's TP / FSDP peers (they wait on it) and the replicas waiting at the sync point",
        "hang": "every rank waiting in a call the culprit never entered, and the ranks waiting on them",
        "rank_died": "the trainer ranks waiting in the all-gather the dead rank never entered",
        "healthy": "",
    }[sc["kind"]]
    truth = {
        "scenario": name, "job": sc["job"], "kind": sc["kind"], "culprit_ranks": sc["culprits"],
        "allowed_extra_ranks": sc.get("allowed", []), "world_size": N, "setup": sc["setup"], "probe": sc["probe"],
        "cpu_group_gloo": bool(sc.get("cpu_group")), "sync_backend": sc.get("sync_backend", "nccl"),
        "description": sc["desc"], "victims": victims_note,
        "onset_ns": int(T0_NS + onset * 1e9) if onset is not None else None,
        "onset_s": round(onset, 3) if onset is not None else None,
        "first_wait_s": round(first_wait, 3) if first_wait is not None else None,
        "end_ns": int(T0_NS + t_end * 1e9), "end_s": round(t_end, 3), "t0_ns": T0_NS,
        "slow_factor": sc.get("factor"), "round_s": round(round_s, 2) if round_s else None,
        "iteration_s": round(it_s, 3) if it_s else None, "token_step_ms": sc["tok_ms"],
        "ar_per_token_step": sc["ar_per_tok"], "gen_factors_per_round": sc.get("_gen"),
        "trainer_ranks": roles["trainer"] if sc["setup"] == "split" else "all",
        "engines": roles["engines"], "timeline": tl, "iterations": it_list, "capture": stats,
    }
    (out / f"{name}.truth.json").write_text(json.dumps(truth, indent=1))
    print(f"{name:22s} {sc['kind']:9s} ranks {N:3d} records {stats['call_records']:7d} msgs {stats['messages']:6d} "
          f"end {t_end:6.1f}s onset {('%.1f' % onset) if onset is not None else '-':>6s} "
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
