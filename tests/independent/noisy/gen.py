#!/usr/bin/env python3
"""noisy/: healthy noise of real jobs and shared infrastructure, and faults hidden in it.

Written from /work/shared/spec/wire-v1.md, /work/shared/DOMAIN.md, the README, the
independent README and run_scored.sh only (never the detector's code).

    python gen.py --out DIR --seed N [SCENARIO-PREFIX ...]

writes DIR/NAME.cwcap and DIR/NAME.truth.json per scenario (deterministic per seed).

Engine (shared by every scenario): a vectorised per-rank timeline. Each rank has a device
time (and, under host-enqueue probes, a host time). A training iteration is a fixed list of
operations (compute, TP all-reduces, pipeline send/recv, data-parallel buckets, optimizer);
a collective on a group completes at max(member device start) + transfer time, a send/recv
pair at max(send posted, recv posted) + transfer. Pipelines use a GPipe schedule (all
forwards, then all backwards), not 1F1B. Hangs are modelled by a rank that stops issuing
calls (its start time becomes infinite; everything waiting on it never completes, which
propagates through the groups). Host-enqueue probes: the host enqueues ahead of the device,
blocked by a launch-queue depth (outstanding calls) and by a sync at the end of each
iteration (loss.item()); t_start is the enqueue, t_end the observed device completion.
Probes: GPU-timed (plugin), ENQUEUED (hook on NCCL), blocking (gloo).
Node agent: drains each rank's ring every 200 ms; the ring keeps one slot per call that
the probe updates in place, so a call entered and completed between two drains is
forwarded once (completed), a call still open at a drain is forwarded open and later
completed. Batches per (node, comm, drain), at most 2048 records. Heartbeats every 1 s per
node and communicator with p2p counters for pipeline comms. Each node's clock is offset by
up to +-20 ms and drifts by up to +-20 ppm. Iteration timings (cw.steps.v1) where the job
has the hook: forward = iteration start to the end of the forward passes, backward = to
the end of the backward passes, optimizer = the rest (data-parallel reduction included).
No cw.hw.v1 messages.

Scenarios (job ids are the scenario names):
  n01a_varseq_ctl    32 ranks TP2 DP16, host-enqueue, packed sequences: each data-parallel
                     replica's compute varies 0.7-1.4x per micro-batch (TP peers share the
                     micro-batch, so the factor is per replica, not per rank), + 2 % per-rank
                     noise. Control.
  n01b_varseq_slow   the same, rank 13 1.5x slower from t=35 s. slow_rank.
  n02a_moe_routing   32 ranks, EP 8 per node, expert all-to-alls; in each EP group the rank
                     holding the hot expert is 1.2-1.4x slower for 3-10 iterations, then the
                     hot expert moves. Control (a P3 naming a rank that was hot is INFO).
  n02b_moe_slow      the same noise plus rank 21 1.5x slower from t=30 s. slow_rank (a P3 naming
                     a rank that was hot is tolerated, as in n02a).
  n03a_rank0_extra   32 ranks TP4 PP2 DP4 GPU-timed: every 10 iterations a metrics
                     all-reduce on its own small comm and 150-350 ms of logging on rank 0;
                     every 40 iterations a 3 s evaluation loop (forward only, eval comm).
                     Control (a P3 naming rank 0 is INFO).
  n03b_eval_hang     the same; rank 22 stops (stuck data loader) inside the 2nd evaluation.
  n04a_ddp_join      16 ranks gloo DDP (blocking probe), uneven inputs at the epoch end:
                     ranks 3, 9, 14 run out 1-3 iterations early and shadow the all-reduces
                     (Join), then the job ends cleanly (COMM_DESTROY everywhere). Control.
  n04b_ddp_nojoin    the same but rank 9 runs out and leaves the loop without Join: the
                     others hang in the next bucket all-reduce. Hang, culprit 9.
  n05a_async_ckpt    32 ranks TP4 PP2 DP4 host-enqueue: every 30 s all ranks stage the state
                     to host (0.4-0.8 s) and local rank 0 of each node runs a writer thread
                     for 3-5 s that contends for the GIL/CPU (host cost 2.5x, 20-60 ms
                     stalls). Control (P3 naming writer ranks is INFO).
  n05b_ckpt_hang     the same; rank 13 (not a writer) hangs 1 s into the 2nd checkpoint.
  n06a_shared_nic    64 ranks TP8 PP2 DP4 GPU-timed: transfers between node-00 and node-02
                     (data-parallel neighbours of stage 0) 3-6x slower for 2 s every
                     15-20 s. Control (slow_link P2/P3 naming that pair is INFO).
  n06b_nic_plus_slow the same congestion and rank 45 (node-05) 1.35x slower from t=25 s.
  n07_slow8pct       16 ranks gloo DDP, rank 6 8 % slower all run. Control (P3 on it INFO).
  n08_node_replace   64 ranks TP8 PP2 DP4 GPU-timed: node-03 vanishes at t=40 s (records and
                     heartbeats stop), the others wait until the launcher kills them at
                     t=52 s; the job restarts at t=62 s under the same id on node-08 with
                     fresh comms from the checkpoint. Hang culprits: node-03's ranks.
  n09_torchft        16 ranks DDP GPU-timed, one replica per rank: rank 5 stops at t=30 s;
                     after 15 s the survivors abort the comm (COMPLETION_LOST + COMM_DESTROY),
                     rank 5 is killed, a 15-rank comm is created and training continues.
  n10_alloc_retry    32 ranks TP4 PP2 DP4 GPU-timed: rank 17's iteration gets a 300-600 ms
                     cudaMalloc-retry spike every 3-7 iterations. Judged a FAULT (an
                     intermittent straggler costing the job ~8 %; fixable with
                     expandable_segments): P2/P3 slow_rank naming 17 is PASS, P1 PARTIAL.
  n11_two_slow       32 ranks TP4 PP2 DP4 GPU-timed: ranks 14 (dp1 pp1) 1.3x from t=20 s and
                     30 (dp3 pp1) 1.6x from t=30 s. Both must be named.
  n12_enq_deep_hang  32 ranks TP4 DP8 ZeRO-style host-enqueue job, 16-deep launch queue,
                     bucketed DP reduce-scatters interleaved with TP all-reduces: rank 11's
                     host stops at t=35 s; peers enqueue up to 15 more calls of other comms
                     behind the blocked one. Hang, culprit 11.
  n13_large_ctl      2048 ranks TP8 PP4 DP64, GPU-timed plugin that writes completions only
                     (no entry records), 3-5 % per-rank jitter, 22 s. Control.

Simplifications: GPipe instead of 1F1B; one stream per rank (DP buckets do not overlap
backward); transfer times are fixed per op plus noise, not bandwidth models; the hosts'
launch cost is a fixed fraction of device compute; node clocks are offset and drift linearly.
"""
import argparse, base64, hashlib, json, math, os, sys
import numpy as np

INF = np.inf
REC = np.dtype([('kind', 'u1'), ('op', 'u1'), ('flags', '<u2'), ('rank', '<i4'), ('comm', '<u8'),
                ('seq', '<u8'), ('t_start_ns', '<i8'), ('t_end_ns', '<i8'), ('bytes', '<u8'),
                ('comm_rank', '<i4'), ('peer', '<i4'), ('nranks', '<u4'), ('aux', '<u4')])
assert REC.itemsize == 64
CALL, INIT, DESTROY = 1, 2, 3
AR, AG, RS, BC, RED, SEND, RECV, A2A, BAR = 1, 2, 3, 4, 5, 6, 7, 8, 9
COMPLETED, GPU_TIMED, GRAPH, ENQUEUED, LOST = 1, 2, 4, 8, 16
BASE_NS = 1767225600 * 10**9
DRAIN = 0.2
HB = 1.0
MAXBATCH = 2048


def cid(*parts):
    h = hashlib.sha256('/'.join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:8], 'little')


class CommSet:
    def __init__(s, sim, name, members, t):
        s.sim, s.name = sim, name
        s.members = np.asarray(members, dtype=np.int64)
        G, S = s.members.shape
        s.ids = np.array([cid(sim.job, sim.gen, name, g) for g in range(G)], dtype=np.uint64)
        s.seq = np.zeros(G, np.int64)
        s.opseq = {}
        s.p2p = np.zeros((G, S, S), np.int64)
        s.nnodes = np.array([len(set(sim.node_of[m].tolist())) for m in s.members], dtype=np.int64)
        s.t_create = t
        s.t_destroy = np.full(G, INF)
        s.is_p2p = False
        sim.commsets.append(s)
        flat = s.members.ravel()
        gi = np.repeat(np.arange(G), S)
        ti = np.full(flat.size, t) + sim.rng.uniform(0, 0.05, flat.size)
        sim.add(INIT, 0, COMPLETED, flat, s.ids[gi], 0, ti, ti, 0, np.tile(np.arange(S), G), -1, S,
                s.nnodes[gi])

    def destroy(s, gidx, t):
        sim = s.sim
        m = s.members[gidx]
        flat = m.ravel()
        G, S = m.shape
        gi = np.repeat(np.asarray(gidx), S)
        ti = np.full(flat.size, t) + sim.rng.uniform(0, 0.02, flat.size)
        sim.add(DESTROY, 0, COMPLETED, flat, s.ids[gi], 0, ti, ti, 0, np.tile(np.arange(S), G), -1, S, 0)
        s.t_destroy[gidx] = t + 0.02


class Sim:
    """One incarnation of a job (a restart is a new Sim with gen+1 and the same job id)."""

    def __init__(s, job, world, gpn, probe, seed, t_begin=0.0, gen=0, node_names=None,
                 t_stop=60.0, steps=True, entries='open', qdepth=16, hostfrac=0.3, coords=None,
                 clock=None):
        s.job, s.N, s.gpn, s.probe, s.gen = job, world, gpn, probe, gen
        s.rng = np.random.default_rng(seed)
        s.node_of = np.arange(world) // gpn
        nn = (world + gpn - 1) // gpn
        s.node_names = node_names or ['node-%02d' % i for i in range(nn)]
        s.t_begin, s.t_stop = t_begin, t_stop
        s.steps_on, s.entries = steps, entries
        s.td = np.full(world, float(t_begin))
        s.th = s.td.copy()
        s.Q = qdepth
        s.qring = np.full((world, qdepth), -INF)
        s.ncalls = np.zeros(world, np.int64)
        s.hostfrac = hostfrac
        s.hostmult = np.ones(world)
        s.mult = np.ones(world)
        s.stop_at = np.full(world, INF)   # rank stops issuing calls (hang root)
        s.dead_at = np.full(world, INF)   # rank's process/node gone (no more records)
        s.end_at = np.full(world, INF)    # process ended/killed: agent stops reporting
        s.node_dead = {}
        s.xfer_fn = None
        s.commsets = []
        s.R = []
        s.steps = []
        s.coords = coords
        s.clock = clock  # dict node_name -> (offset_s, drift)
        s.flagbase = {'gpu': GPU_TIMED, 'enq': ENQUEUED, 'gloo': 0}[probe]

    # ---- records ----
    def add(s, kind, op, flags, rank, comm, seq, ts, te, nbytes, crank, peer, nranks, aux):
        n = np.size(rank)
        f = lambda v, dt: np.broadcast_to(np.asarray(v, dtype=dt), (n,)).copy()
        s.R.append((f(kind, np.uint8), f(op, np.uint8), f(flags, np.uint16), f(rank, np.int64),
                    f(comm, np.uint64), f(seq, np.int64), f(ts, float), f(te, float), f(nbytes, np.uint64),
                    f(crank, np.int64), f(peer, np.int64), f(nranks, np.int64), f(aux, np.int64)))

    def compute(s, ranks, ms):
        ranks = np.asarray(ranks)
        s.td[ranks] += ms / 1000.0 * s.mult[ranks]
        if s.probe == 'enq':
            s.th[ranks] += ms / 1000.0 * s.hostfrac * s.hostmult[ranks] * (s.mult[ranks] > 0)

    def _enter(s, flat, pre_ms):
        comp = pre_ms / 1000.0 * s.mult[flat]
        if s.probe == 'enq':
            hc = pre_ms / 1000.0 * s.hostfrac * s.hostmult[flat] + 4e-5   # launch cost: not slowed by the GPU
            qfree = s.qring[flat, s.ncalls[flat] % s.Q]
            e = np.maximum(s.th[flat] + hc, qfree)
            e = np.where((e >= s.stop_at[flat]) | (e >= s.dead_at[flat]), INF, e)
            s.th[flat] = e
            dstart = np.maximum(s.td[flat] + comp, e)
            return e, dstart
        r = s.td[flat] + comp
        r = np.where((r >= s.stop_at[flat]) | (r >= s.dead_at[flat]), INF, r)
        return r, r

    def _finish(s, flat, dend):
        s.td[flat] = dend
        if s.probe == 'enq':
            s.qring[flat, s.ncalls[flat] % s.Q] = dend
            s.ncalls[flat] += 1

    def _tend(s, dend):
        if s.probe == 'enq':
            return dend + s.rng.uniform(2e-4, 2e-3, dend.size)
        return dend

    def coll(s, cs, gidx, op, nbytes, xfer_ms, pre_ms=0.0, root=-1):
        gidx = np.atleast_1d(np.asarray(gidx))
        m = cs.members[gidx]
        G, S = m.shape
        flat = m.ravel()
        ts, dstart = s._enter(flat, pre_ms)
        x = xfer_ms / 1000.0 * (1 + 0.05 * s.rng.standard_normal(G).clip(-2, 2))
        if s.xfer_fn is not None:
            x = x * s.xfer_fn(cs, gidx, dstart.reshape(G, S).max(1))
        end = dstart.reshape(G, S).max(1) + x
        deadmin = s.dead_at[m].min(1)
        end = np.where(deadmin < end, INF, end)
        dend = np.repeat(end, S) + s.rng.uniform(0, 3e-5, flat.size)
        s._finish(flat, dend)
        gi = np.repeat(gidx, S)
        seq = cs.seq[gi].copy()
        cs.seq[gidx] += 1
        if s.probe == 'gpu':
            os_ = cs.opseq.setdefault(op, np.zeros(len(cs.ids), np.int64))
            aux = os_[gi] & 0xffffffff
            os_[gidx] += 1
        else:
            aux = 0
        s.add(CALL, op, s.flagbase, flat, cs.ids[gi], seq, ts, s._tend(dend), nbytes,
              np.tile(np.arange(S), G), root, S, aux)
        return end

    def p2p(s, cs, src, dst, nbytes, xfer_ms, pre_ms=0.0, gidx=None):
        cs.is_p2p = True
        if gidx is None:
            gidx = np.arange(len(cs.ids))
        snd = cs.members[gidx, src]
        rcv = cs.members[gidx, dst]
        ts_s, ds = s._enter(snd, pre_ms)
        ts_r, dr = s._enter(rcv, 0.0)
        x = xfer_ms / 1000.0 * (1 + 0.05 * s.rng.standard_normal(len(gidx)).clip(-2, 2))
        if s.xfer_fn is not None:
            x = x * s.xfer_fn(cs, gidx, np.maximum(ds, dr), pair=(src, dst))
        end = np.maximum(ds, dr) + x
        end = np.where(np.minimum(s.dead_at[snd], s.dead_at[rcv]) < end, INF, end)
        s._finish(snd, end + s.rng.uniform(0, 2e-5, end.size))
        s._finish(rcv, end + s.rng.uniform(0, 2e-5, end.size))
        seq = cs.p2p[gidx, src, dst].copy()
        cs.p2p[gidx, src, dst] += 1
        S = cs.members.shape[1]
        s.add(CALL, SEND, s.flagbase, snd, cs.ids[gidx], seq, ts_s, s._tend(s.td[snd]), nbytes, src, dst, S, 0)
        s.add(CALL, RECV, s.flagbase, rcv, cs.ids[gidx], seq, ts_r, s._tend(s.td[rcv]), nbytes, dst, src, S, 0)

    # ---- iterations ----
    def iter_begin(s, it, extra=None):
        if extra is not None:
            if s.probe == 'enq':
                s.th += extra
            else:
                s.td += extra
        s._it = it
        s._t0 = (s.th if s.probe == 'enq' else s.td).copy()
        s._marks = {}

    def mark(s, name):
        s._marks[name] = s.td.copy()

    def iter_end(s):
        if s.probe == 'enq':
            s.th = np.maximum(s.th, s.td)
        if True:
            t1 = s.td.copy()
            f = s._marks.get('fwd', t1)
            b = s._marks.get('bwd', t1)
            s.steps.append((s._it, s._t0.copy(), f, b, t1))

    def now_min(s):
        t = np.minimum(s.td, s.th) if s.probe == 'enq' else s.td
        t = t[np.isfinite(t)]
        return t.min() if t.size else INF

    def alive(s):
        return s.now_min() < s.t_stop


# ------------------------------------------------------------------ output
class Capture:
    def __init__(s, rng):
        s.lines = []
        s.rng = rng
        s.clocks = {}

    def clock(s, node):
        if node not in s.clocks:
            s.clocks[node] = (s.rng.uniform(-0.02, 0.02), s.rng.uniform(-2e-5, 2e-5), s.rng.uniform(0, DRAIN),
                              s.rng.uniform(0, HB))
        return s.clocks[node]

    def ns(s, node, t):
        off, drift, _, _ = s.clock(node)
        return np.round((np.asarray(t, float) * (1 + drift) + off) * 1e9).astype(np.int64) + BASE_NS

    def put(s, topic, key, tsns, value=None, b64=None):
        d = {'topic': topic, 'key': key, 'ts_ns': int(tsns)}
        if b64 is not None:
            d['value_b64'] = b64
        else:
            d['value'] = value
        s.lines.append((int(tsns), json.dumps(d, separators=(',', ':'))))

    def emit(s, sim, t_end_capture, topo_t=None, coords_fn=None):
        job = sim.job
        names = sim.node_names
        for n in names:
            s.clock(n)
        # node end: death of the node or job end of the process
        rank_end = np.minimum(np.minimum(sim.dead_at, sim.end_at), t_end_capture)
        # topology
        tt = sim.t_begin if topo_t is None else topo_t
        for r in range(sim.N):
            nd = names[sim.node_of[r]]
            v = {'v': 1, 'job': job, 'ts_ns': int(s.ns(nd, tt)), 'rank': r, 'world_size': sim.N, 'node': nd,
                 'local_rank': int(r % sim.gpn), 'gpu': 'GPU-%s' % hashlib.md5(f'{nd}/{r % sim.gpn}'.encode()).hexdigest()[:12]}
            if coords_fn:
                v['coords'] = coords_fn(r)
            s.put('cw.topology.v1', job, v['ts_ns'], v)
        if not sim.R:
            return
        cols = [np.concatenate([r[i] for r in sim.R]) for i in range(13)]
        kind, op, flags, rank, comm, seq, ts, te, nb, crank, peer, nranks, aux = cols
        # truncate to the records' producers' lives
        rend = rank_end[rank]
        keep = np.isfinite(ts) & (ts <= rend)
        cols = [c[keep] for c in cols]
        kind, op, flags, rank, comm, seq, ts, te, nb, crank, peer, nranks, aux = cols
        rend = rank_end[rank]
        te = np.where(te <= rend, te, INF)
        node = sim.node_of[rank]
        ph = np.array([s.clocks[names[i]][2] for i in range(len(names))])[node]
        tick_e = np.ceil((ts - ph) / DRAIN - 1e-9) * DRAIN + ph
        tick_c = np.where(np.isfinite(te), np.ceil((te - ph) / DRAIN - 1e-9) * DRAIN + ph, INF)
        if sim.entries == 'open':
            want_e = (tick_e < te) & (tick_e <= rend)
        elif sim.entries == 'all':
            want_e = (tick_e <= rend) & (kind == CALL)
        else:
            want_e = np.zeros(ts.size, bool)
        want_e &= (flags & LOST) == 0
        want_c = np.isfinite(tick_c) & (tick_c <= rend)
        # LOST records: flagged with te=-1 sentinel handled by caller via sim.lost
        ev_idx = np.concatenate([np.nonzero(want_e)[0], np.nonzero(want_c)[0]])
        ev_tick = np.concatenate([tick_e[want_e], tick_c[want_c]])
        ev_done = np.concatenate([np.zeros(want_e.sum(), bool), np.ones(want_c.sum(), bool)])
        recs = np.zeros(ev_idx.size, REC)
        i = ev_idx
        nodes_i = node[i]
        recs['kind'] = kind[i]
        recs['op'] = op[i]
        fl = flags[i].astype(np.uint16)
        lost = (fl & LOST) != 0
        fl = np.where(ev_done & ~lost, fl | COMPLETED, fl & ~np.uint16(COMPLETED)).astype(np.uint16)
        recs['flags'] = fl
        recs['rank'] = rank[i]
        recs['comm'] = comm[i]
        recs['seq'] = seq[i]
        # per-node clock conversion
        tsn = np.zeros(i.size, np.int64)
        ten = np.zeros(i.size, np.int64)
        tkn = np.zeros(i.size, np.int64)
        for nidx in np.unique(nodes_i):
            sel = nodes_i == nidx
            nm = names[nidx]
            tsn[sel] = s.ns(nm, ts[i][sel])
            tev = te[i][sel]
            ten[sel] = np.where(ev_done[sel] & ~lost[sel], s.ns(nm, np.where(np.isfinite(tev), tev, 0)), 0)
            tkn[sel] = s.ns(nm, ev_tick[sel]) + 1_000_000
        recs['t_start_ns'] = tsn
        recs['t_end_ns'] = ten
        recs['bytes'] = nb[i]
        recs['comm_rank'] = crank[i]
        recs['peer'] = peer[i]
        recs['nranks'] = nranks[i]
        recs['aux'] = aux[i]
        # batches per (node, comm, drain tick); within a batch, entries before completions
        order = np.lexsort((ev_done, recs['t_start_ns'], recs['comm'], nodes_i, tkn))
        recs, nodes_i, tkn, cm = recs[order], nodes_i[order], tkn[order], recs['comm'][order]
        if recs.size:
            brk = np.nonzero((np.diff(tkn) != 0) | (np.diff(nodes_i) != 0) | (np.diff(cm.astype(np.int64)) != 0))[0] + 1
            starts = np.concatenate([[0], brk])
            ends = np.concatenate([brk, [recs.size]])
            for a, b in zip(starts, ends):
                for a2 in range(a, b, MAXBATCH):
                    b2 = min(b, a2 + MAXBATCH)
                    hdr = b'CWB1' + np.array([1, 64], '<u2').tobytes() + np.array([b2 - a2, 0], '<u4').tobytes()
                    payload = base64.b64encode(hdr + recs[a2:b2].tobytes()).decode()
                    s.put('cw.calls.v1', '%s/%016x' % (job, int(cm[a])), int(tkn[a]), b64=payload)
        s._heartbeats(sim, cols, rank_end, t_end_capture)
        s._steps(sim, rank_end)

    def _heartbeats(s, sim, cols, rank_end, t_end_capture):
        kind, op, flags, rank, comm, seq, ts, te, nb, crank, peer, nranks, aux = cols
        names = sim.node_names
        call = kind == CALL
        lost = (flags & LOST) != 0
        te_eff = np.where(lost, INF, te)
        idx_all = np.nonzero(call & ~lost)[0]
        srt = idx_all[np.lexsort((ts[idx_all], rank[idx_all], comm[idx_all]))]
        groups = {}
        if srt.size:
            kc, kr = comm[srt], rank[srt]
            brk = np.nonzero((kc[1:] != kc[:-1]) | (kr[1:] != kr[:-1]))[0] + 1
            for a, b in zip(np.concatenate([[0], brk]), np.concatenate([brk, [srt.size]])):
                groups[(int(kc[a]), int(kr[a]))] = srt[a:b]
        for cs in sim.commsets:
            G, S = cs.members.shape
            for g in range(G):
                cidv = cs.ids[g]
                mem = cs.members[g]
                t_from = cs.t_create + 0.05
                by_node = {}
                for pos, r in enumerate(mem):
                    by_node.setdefault(int(sim.node_of[r]), []).append((pos, int(r)))
                for nidx, lst in by_node.items():
                    nm = names[nidx]
                    hph = s.clocks[nm][3]
                    t_to = min(min(rank_end[r] for _, r in lst), cs.t_destroy[g])
                    if not (t_to > t_from):
                        continue
                    k0 = math.ceil((t_from - hph) / HB)
                    k1 = math.floor((t_to - hph) / HB)
                    if k1 < k0:
                        continue
                    ticks = np.arange(k0, k1 + 1) * HB + hph
                    rows = []
                    for pos, r in lst:
                        ix = groups.get((int(cidv), r), np.zeros(0, np.int64))
                        cl = ix[(op[ix] != SEND) & (op[ix] != RECV)]
                        a_ts = np.sort(ts[cl]); a_te = np.sort(te_eff[cl])
                        st = np.searchsorted(a_ts, ticks, 'right') - 1
                        co = np.searchsorted(a_te, ticks, 'right') - 1
                        p2 = []
                        if cs.is_p2p:
                            for o, oname in ((SEND, 'send'), (RECV, 'recv')):
                                so = ix[op[ix] == o]
                                for pe in np.unique(peer[so]):
                                    sp = so[peer[so] == pe]
                                    p2.append((int(pe), oname, np.searchsorted(np.sort(ts[sp]), ticks, 'right') - 1,
                                               np.searchsorted(np.sort(te_eff[sp]), ticks, 'right') - 1))
                        rows.append((r, st, co, a_ts, a_te, p2))
                    tns = s.ns(nm, ticks)
                    key = '%s/%016x' % (sim.job, int(cidv))
                    for k in range(ticks.size):
                        rr = []
                        for r, st, co, a_ts, a_te, p2 in rows:
                            d = {'rank': r, 'started': int(st[k]), 'completed': int(co[k]),
                                 't_last_start_ns': int(s.ns(nm, a_ts[st[k]])) if st[k] >= 0 else 0,
                                 't_last_end_ns': int(s.ns(nm, a_te[co[k]])) if co[k] >= 0 else 0}
                            if p2:
                                d['p2p'] = [{'peer': pe, 'op': on, 'started': int(a[k]), 'completed': int(b[k])}
                                            for pe, on, a, b in p2]
                            rr.append(d)
                        v = {'v': 1, 'job': sim.job, 'node': nm, 'ts_ns': int(tns[k]), 'comm': '%016x' % int(cidv),
                             'ranks': rr}
                        s.put('cw.progress.v1', key, tns[k], v)

    def _steps(s, sim, rank_end):
        names = sim.node_names
        if not sim.steps_on:
            return
        for it, t0, f, b, t1 in sim.steps:
            ok = np.isfinite(t1) & (t1 + 0.005 <= rank_end)
            for r in np.nonzero(ok)[0]:
                nm = names[sim.node_of[r]]
                a, ff, bb, e = (int(x) for x in s.ns(nm, [t0[r], f[r], b[r], t1[r]]))
                ph = {'forward_ms': round((ff - a) / 1e6, 3), 'backward_ms': round((bb - ff) / 1e6, 3),
                      'optimizer_ms': round((e - bb) / 1e6, 3)}
                v = {'v': 1, 'job': sim.job, 'rank': int(r), 'iteration': int(it), 't_start_ns': a, 't_end_ns': e,
                     'phases': ph}
                s.put('cw.steps.v1', sim.job, e + 3_000_000, v)

    def write(s, path):
        s.lines.sort(key=lambda x: x[0])
        with open(path, 'w') as f:
            for _, l in s.lines:
                f.write(l + '\n')


# ------------------------------------------------------------------ job layouts
class Megatron:
    def __init__(s, sim, tp, pp, dp, t=None, extra_world=False):
        s.sim, s.tp, s.pp, s.dp = sim, tp, pp, dp
        t = sim.t_begin if t is None else t
        R = np.arange(tp * pp * dp).reshape(dp, pp, tp)   # rank = dp*PP*TP + pp*TP + tp
        s.R = R
        s.TP = CommSet(sim, 'tp', R.reshape(dp * pp, tp), t) if tp > 1 else None
        s.PP = CommSet(sim, 'pp', R.transpose(0, 2, 1).reshape(dp * tp, pp), t) if pp > 1 else None
        s.DP = CommSet(sim, 'dp', R.transpose(1, 2, 0).reshape(pp * tp, dp), t) if dp > 1 else None
        s.tp_g = [np.nonzero(np.arange(dp * pp) % pp == p)[0] for p in range(pp)]

    def coords(s, r):
        d, p, t = np.argwhere(s.R == r)[0]
        return {'tp': int(t), 'pp': int(p), 'dp': int(d), 'cp': 0, 'ep': 0}

    def stage(s, p):
        return s.R[:, p, :].ravel()

    def fwd(s, p, ms, ntp, tpb, tpx):
        if s.TP is not None and ntp:
            for _ in range(ntp):
                s.sim.coll(s.TP, s.tp_g[p], AR, tpb, tpx, ms / ntp)
        else:
            s.sim.compute(s.stage(p), ms)

    def iteration(s, it, c, mult_fn=None, extra=None, hooks=None):
        sim = s.sim
        sim.iter_begin(it, extra)
        M = c['M']
        for m in range(M):
            if mult_fn:
                sim.mult = mult_fn(it, m)
            for p in range(s.pp):
                s.fwd(p, c['fwd_ms'], c['ntp'], c['tp_bytes'], c['tp_ms'])
                if p < s.pp - 1:
                    sim.p2p(s.PP, p, p + 1, c['pp_bytes'], c['pp_ms'], 0.3)
        sim.mark('fwd')
        for m in range(M):
            if mult_fn:
                sim.mult = mult_fn(it, m)
            for p in reversed(range(s.pp)):
                s.fwd(p, 2 * c['fwd_ms'], c['ntp'], c['tp_bytes'], c['tp_ms'])
                if p > 0:
                    sim.p2p(s.PP, p, p - 1, c['pp_bytes'], c['pp_ms'], 0.3)
        sim.mark('bwd')
        if s.DP is not None:
            nb = c.get('dp_buckets', 2)
            for _ in range(nb):
                sim.coll(s.DP, np.arange(len(s.DP.ids)), RS, c['dp_bytes'] // nb, c['dp_ms'] / nb, 0.5)
        if hooks and 'pre_opt' in hooks:
            hooks['pre_opt'](it)
        sim.compute(np.arange(sim.N), c['opt_ms'])
        if s.DP is not None:
            sim.coll(s.DP, np.arange(len(s.DP.ids)), AG, c['dp_bytes'], c['dp_ms'], 0.2)
        if hooks and 'post' in hooks:
            hooks['post'](it)
        sim.iter_end()


def iter_len(sim):
    with np.errstate(invalid='ignore'):
        return _iter_len(sim)


def _iter_len(sim):
    d = [np.median((t1 - t0)[np.isfinite(t1 - t0)]) for _, t0, _, _, t1 in sim.steps if np.isfinite(t1 - t0).any()]
    return round(float(np.median(d)), 3) if d else None


def jitter(rng, n, sd):
    return 1.0 + sd * rng.standard_normal(n).clip(-3, 3)


def onset_factor(sim, ranks_f):
    """ranks_f: list of (rank, t_on, factor): factor applies when the rank's device time >= t_on."""
    f = np.ones(sim.N)
    for r, t_on, fac in ranks_f:
        if sim.td[r] >= t_on:
            f[r] *= fac
    return f


def truth_job(job, kind, culprits, onset, ranks, probe, allowed, note, iter_s, **kw):
    d = {'job': job, 'kind': kind, 'culprits': sorted(int(x) for x in culprits),
         'onset_s': onset, 'onset_ns': (BASE_NS + int(onset * 1e9)) if onset is not None else None,
         'ranks': ranks, 'probe': probe, 'allowed': sorted(int(x) for x in allowed), 'note': note,
         'iter_s': iter_s}
    d.update(kw)
    return d


PROBE_DESC = {'gpu': 'GPU-timed (plugin)', 'enq': 'host-enqueue (ENQUEUED)', 'gloo': 'host-blocking (gloo)'}

MEG_C = dict(M=4, fwd_ms=45.0, ntp=1, tp_bytes=16 << 20, tp_ms=1.2, pp_bytes=8 << 20, pp_ms=1.5,
             dp_bytes=512 << 20, dp_ms=60.0, dp_buckets=2, opt_ms=25.0)


# ------------------------------------------------------------------ scenarios
def sc_varseq(name, seed, slow):
    T = 65.0
    rng = np.random.default_rng(seed)
    sim = Sim(name, 32, 8, 'enq', seed, t_stop=T, qdepth=16, hostfrac=0.25)
    mg = Megatron(sim, 2, 1, 16)
    c = dict(MEG_C, M=4, fwd_ms=45.0, ntp=1, dp_bytes=1 << 30, dp_ms=80.0, opt_ms=30.0)
    rep = np.arange(32) // 2   # replica of each rank (TP peers share micro-batches)
    slow_l = [(13, 35.0, 1.5)] if slow else []

    def mult_fn(it, m):
        return rng.uniform(0.7, 1.4, 16)[rep] * jitter(rng, 32, 0.02) * onset_factor(sim, slow_l)
    it = 0
    while sim.alive():
        mg.iteration(it, c, mult_fn)
        it += 1
    cap = Capture(np.random.default_rng(seed + 1))
    cap.emit(sim, T, coords_fn=mg.coords)
    it_s = iter_len(sim)
    if slow:
        tj = truth_job(name, 'slow_rank', [13], 35.0, 32, 'enq', [12, 13],
                       'packed sequences 0.7-1.4x per replica and micro-batch; rank 13 1.5x from 35 s. Its TP peer 12 is a '
                       'victim, but under host-enqueue no record separates them (no device start times, the TP all-reduce '
                       'completes on both together), so naming {12, 13} together is PARTIAL, not a victim', it_s, persistent=True, end_s=T)
    else:
        tj = truth_job(name, 'healthy', [], None, 32, 'enq', [],
                       'packed sequences: compute 0.7-1.4x per replica and micro-batch, random; nobody is slow', it_s)
    return cap, [tj]


def sc_moe(name, seed, slow):
    T = 70.0
    rng = np.random.default_rng(seed)
    N = 32
    sim = Sim(name, N, 8, 'gpu', seed, t_stop=T)
    EP = CommSet(sim, 'ep', np.arange(N).reshape(4, 8), 0.0)
    EDP = CommSet(sim, 'edp', np.arange(N).reshape(4, 8).T, 0.0)
    W = CommSet(sim, 'dense_dp', np.arange(N).reshape(1, N), 0.0)
    hot = {}   # ep group -> (rank, until_iter, factor)
    hot_ranks = set()
    slow_l = [(21, 30.0, 1.5)] if slow else []
    it = 0
    while sim.alive():
        for g in range(4):
            if g not in hot or hot[g][1] <= it:
                prev = hot[g][0] if g in hot else -1
                cand = [r for r in range(g * 8, g * 8 + 8) if r != prev]
                r = int(rng.choice(cand))
                hot[g] = (r, it + int(rng.integers(3, 11)), float(rng.uniform(1.2, 1.4)))
                hot_ranks.add(r)
        sim.iter_begin(it)
        for ph, reps in (('f', 1), ('b', 2)):
            for m in range(4):
                base = jitter(rng, N, 0.02) * onset_factor(sim, slow_l)
                for g in range(4):
                    base[hot[g][0]] *= hot[g][2]
                sim.mult = base
                for layer in range(2):
                    sim.coll(EP, np.arange(4), A2A, 8 << 20, 3.0 * reps, 14.0 * reps)   # attention + router, dispatch
                    sim.coll(EP, np.arange(4), A2A, 8 << 20, 3.0 * reps, 30.0 * reps)  # experts, combine
            sim.mark('fwd' if ph == 'f' else 'bwd')
        sim.mult = jitter(rng, N, 0.02)
        sim.coll(W, [0], AR, 256 << 20, 45.0, 0.5)
        sim.coll(EDP, np.arange(8), AR, 128 << 20, 20.0, 0.2)
        sim.compute(np.arange(N), 20.0)
        sim.iter_end()
        it += 1
    cap = Capture(np.random.default_rng(seed + 1))
    cap.emit(sim, T, coords_fn=lambda r: {'tp': 0, 'pp': 0, 'dp': int(r), 'cp': 0, 'ep': int(r % 8)})
    it_s = iter_len(sim)
    if slow:
        tj = truth_job(name, 'slow_rank', [21], 30.0, N, 'gpu', [21],
                       'MoE routing noise (hot expert 1.2-1.4x for 3-10 iterations, moving) plus rank 21 1.5x from 30 s', it_s, persistent=True, end_s=T,
                       info_ok=[{'kinds': ['slow_rank'], 'max_sev': 'P3', 'ranks': sorted(hot_ranks - {21})}])
    else:
        tj = truth_job(name, 'healthy', [], None, N, 'gpu', [],
                       'MoE routing imbalance: hot expert rank 1.2-1.4x for 3-10 iterations then moves; nobody to page',
                       it_s, info_ok=[{'kinds': ['slow_rank'], 'max_sev': 'P3', 'ranks': sorted(hot_ranks)}])
    return cap, [tj]


def sc_rank0(name, seed, hang):
    T = 75.0
    rng = np.random.default_rng(seed)
    sim = Sim(name, 32, 8, 'gpu', seed, t_stop=T)
    mg = Megatron(sim, 4, 2, 4)
    MET = CommSet(sim, 'metrics', np.arange(32).reshape(1, 32), 0.0)
    EV = CommSet(sim, 'eval', mg.R.transpose(1, 2, 0).reshape(8, 4), 0.0)
    c = dict(MEG_C, M=4, fwd_ms=25.0, dp_ms=40.0, opt_ms=20.0)
    hang_info = {}

    def mult_fn(it, m):
        return jitter(rng, 32, 0.02)
    it = 0
    nev = 0
    while sim.alive():
        extra = None
        if it > 0 and it % 10 == 0:
            extra = np.zeros(32)
            extra[0] = rng.uniform(0.15, 0.35)
        mg.iteration(it, c, mult_fn, extra)
        if it % 10 == 9:
            sim.coll(MET, [0], AR, 4096, 0.15, 0.2)
        if it % 40 == 39:
            nev += 1
            for k in range(16):   # ~3 s of eval forward
                if hang and nev == 2 and k == 10 and not hang_info:
                    t_h = float(sim.td[22]) + 0.02
                    sim.stop_at[22] = t_h
                    hang_info['t'] = t_h
                sim.mult = jitter(rng, 32, 0.02)
                for p in range(2):
                    mg.fwd(p, 28.0, 2, 8 << 20, 1.0)
                    if p == 0:
                        sim.p2p(mg.PP, 0, 1, 8 << 20, 1.5, 0.3)
                sim.coll(EV, np.arange(8), AR, 8, 0.2, 0.5)
        it += 1
        if hang and hang_info and not np.isfinite(sim.now_min()):
            break
    cap = Capture(np.random.default_rng(seed + 1))
    cap.emit(sim, T, coords_fn=mg.coords)
    it_s = iter_len(sim)
    if hang:
        tj = truth_job(name, 'hang', [22], round(hang_info.get('t', -1), 3), 32, 'gpu', [22],
                       'rank 22 stops inside the 2nd evaluation loop (rank 0 logging and metrics noise around it)', it_s)
    else:
        tj = truth_job(name, 'healthy', [], None, 32, 'gpu', [],
                       'rank 0 logs 150-350 ms every 10 iterations, metrics all-reduce on its own comm, 3 s eval every 40',
                       it_s, info_ok=[{'kinds': ['slow_rank'], 'max_sev': 'P3', 'ranks': [0]}])
    return cap, [tj]


def sc_ddp(name, seed, mode):
    """gloo DDP, 16 ranks on 2 nodes: mode 'join', 'nojoin', 'slow8'."""
    rng = np.random.default_rng(seed)
    N = 16
    T = 70.0 if mode == 'slow8' else 60.0
    sim = Sim(name, N, 8, 'gloo', seed, t_stop=T)
    W = CommSet(sim, 'world', np.arange(N).reshape(1, N), 0.0)
    n_iter = 10**9
    out_at = {}
    if mode in ('join', 'nojoin'):
        n_iter = 52   # epoch end: the job ends after iteration 51
        out_at = {3: 49, 9: 50, 14: 51} if mode == 'join' else {9: 47}
    slow = np.ones(N)
    if mode == 'slow8':
        slow[6] = 1.08
    it = 0
    info = {}
    end_t = None
    while sim.alive() and it < n_iter:
        sim.iter_begin(it)
        sim.mult = jitter(rng, N, 0.03) * slow
        shadow = np.array([r in out_at and it >= out_at[r] for r in range(N)])
        if mode == 'nojoin' and shadow.any():
            r = int(np.nonzero(shadow)[0][0])
            if r not in info:
                info[r] = float(sim.td[r])
                sim.stop_at[r] = float(sim.td[r])   # left the loop: calls nothing more
                sim.end_at[r] = float(sim.td[r]) + 600   # process alive (waiting in its exit barrier elsewhere)
        sim.mult[shadow] = 0.0
        if mode == 'join':
            sim.coll(W, [0], AR, 4, 0.3, 0.0)   # Join's "still active" all-reduce, every iteration
        sim.compute(np.arange(N), 260.0)        # forward
        sim.mark('fwd')
        for b in range(4):                      # backward with DDP buckets (blocking gloo)
            sim.coll(W, [0], AR, 25 << 20, 35.0, 120.0)
        sim.mark('bwd')
        sim.compute(np.arange(N), 40.0)
        sim.iter_end()
        it += 1
        if mode == 'nojoin' and not np.isfinite(sim.now_min()):
            break
    if mode == 'join':
        end_t = float(np.max(sim.td)) + 0.3
        W.destroy([0], end_t)
        sim.end_at[:] = end_t + 0.5
    cap = Capture(np.random.default_rng(seed + 1))
    cap.emit(sim, T, coords_fn=lambda r: {'tp': 0, 'pp': 0, 'dp': int(r), 'cp': 0, 'ep': 0})
    it_s = iter_len(sim)
    if mode == 'join':
        return cap, [truth_job(name, 'healthy', [], None, N, 'gloo', [],
                               'DDP uneven inputs: ranks 3, 9, 14 run out at iterations 49-51 and shadow the all-reduces '
                               '(Join); clean end at %.1f s, comms destroyed: any open incident should resolve' % end_t,
                               it_s, job_end_s=round(end_t, 3))]
    if mode == 'nojoin':
        return cap, [truth_job(name, 'hang', [9], round(info[9], 3), N, 'gloo', [9],
                               'rank 9 ran out of data and left the loop without Join; 15 ranks wait in the next bucket all-reduce',
                               it_s)]
    return cap, [truth_job(name, 'healthy', [], None, N, 'gloo', [],
                           'rank 6 8 % slower the whole run, under a 10 % impact threshold', it_s,
                           info_ok=[{'kinds': ['slow_rank'], 'max_sev': 'P3', 'ranks': [6]}])]


def sc_ckpt(name, seed, hang):
    T = 80.0
    rng = np.random.default_rng(seed)
    sim = Sim(name, 32, 8, 'enq', seed, t_stop=T, qdepth=16, hostfrac=0.35)
    mg = Megatron(sim, 4, 2, 4)
    c = dict(MEG_C, M=4, fwd_ms=35.0, dp_ms=50.0, opt_ms=20.0)
    writers = np.arange(0, 32, 8)
    ck_times = [30.0, 60.0]
    windows = []
    info = {}
    it = 0
    next_ck = 0
    while sim.alive():
        t_now = float(np.median(sim.th))
        extra = None
        if next_ck < len(ck_times) and t_now >= ck_times[next_ck]:
            extra = rng.uniform(0.4, 0.8, 32)  # staging to pinned host memory, every rank
            dur = float(rng.uniform(3, 5))
            windows.append((t_now + 0.8, t_now + 0.8 + dur))
            next_ck += 1
            if hang and next_ck == 2:
                info['t'] = t_now + 1.8
                sim.stop_at[13] = info['t']

        def mult_fn(it_, m):
            tt = sim.th
            hm = np.ones(32)
            for a, b in windows:
                inw = (tt >= a) & (tt < b)
                hm[writers[inw[writers]]] = 2.5
            sim.hostmult = hm
            return jitter(rng, 32, 0.02)
        if windows:
            a, b = windows[-1]
            w_in = (sim.th[writers] >= a) & (sim.th[writers] < b)
            if w_in.any():
                e = np.zeros(32)
                e[writers[w_in]] = rng.uniform(0.02, 0.06, w_in.sum()) * rng.integers(0, 2, w_in.sum())
                extra = e if extra is None else extra + e
        mg.iteration(it, c, mult_fn, extra)
        it += 1
        if hang and info and not np.isfinite(sim.now_min()):
            break
    cap = Capture(np.random.default_rng(seed + 1))
    cap.emit(sim, T, coords_fn=mg.coords)
    it_s = iter_len(sim)
    if hang:
        return cap, [truth_job(name, 'hang', [13], round(info['t'], 3), 32, 'enq', [13],
                               'rank 13 (not a writer) stops enqueueing 1 s into the 2nd async checkpoint', it_s)]
    return cap, [truth_job(name, 'healthy', [], None, 32, 'enq', [],
                           'async checkpoint every 30 s: 0.4-0.8 s staging on all ranks, then writer threads on local rank 0 '
                           'of each node (ranks 0, 8, 16, 24) steal host CPU for 3-5 s', it_s,
                           info_ok=[{'kinds': ['slow_rank'], 'max_sev': 'P3', 'ranks': writers.tolist()}])]


def sc_nic(name, seed, slow):
    T = 65.0
    rng = np.random.default_rng(seed)
    sim = Sim(name, 64, 8, 'gpu', seed, t_stop=T)
    mg = Megatron(sim, 8, 2, 4)   # node = dp*2 + pp
    c = dict(MEG_C, M=4, fwd_ms=40.0, ntp=1, dp_ms=70.0, opt_ms=20.0)
    bursts = []
    t = float(rng.uniform(8, 14))
    while t < T:
        bursts.append((t, t + 2.0, float(rng.uniform(3, 6))))
        t += float(rng.uniform(15, 20))
    A, B = 0, 2

    def xfer_fn(cs, gidx, t0, pair=None):
        out = np.ones(len(gidx))
        for k, g in enumerate(gidx):
            nodes = set(sim.node_of[cs.members[g]].tolist()) if pair is None else \
                {int(sim.node_of[cs.members[g, pair[0]]]), int(sim.node_of[cs.members[g, pair[1]]])}
            if A in nodes and B in nodes:
                for a, b, f in bursts:
                    if a <= t0[k] < b:
                        out[k] = f
        return out
    sim.xfer_fn = xfer_fn
    slow_l = [(45, 25.0, 1.35)] if slow else []

    def mult_fn(it, m):
        return jitter(rng, 64, 0.02) * onset_factor(sim, slow_l)
    it = 0
    while sim.alive():
        mg.iteration(it, c, mult_fn)
        it += 1
    cap = Capture(np.random.default_rng(seed + 1))
    cap.emit(sim, T, coords_fn=mg.coords)
    it_s = iter_len(sim)
    info = [{'kinds': ['slow_link'], 'max_sev': 'P2', 'ranks': list(range(0, 8)) + list(range(16, 24)),
             'nodes': ['node-00', 'node-02']}]
    bl = ', '.join('%.1f-%.1f s x%.1f' % b for b in bursts)
    if slow:
        return cap, [truth_job(name, 'slow_rank', [45], 25.0, 64, 'gpu', [45],
                               'node-00<->node-02 congested (%s); rank 45 (node-05) 1.35x from 25 s' % bl, it_s, info_ok=info,
                               persistent=True, end_s=T)]
    return cap, [truth_job(name, 'healthy', [], None, 64, 'gpu', [],
                           'shared NIC: node-00<->node-02 transfers 3-6x slower for 2 s: %s' % bl, it_s, info_ok=info)]


def sc_node_replace(name, seed):
    rng = np.random.default_rng(seed)
    cap = Capture(np.random.default_rng(seed + 1))
    c = dict(MEG_C, M=4, fwd_ms=40.0, dp_ms=70.0, opt_ms=20.0)
    sim = Sim(name, 64, 8, 'gpu', seed, t_stop=52.0)
    mg = Megatron(sim, 8, 2, 4)
    t_lost, t_kill, t_restart = 40.0, 52.0, 62.0
    sim.dead_at[24:32] = t_lost
    sim.end_at[:] = t_kill
    it = 0
    while sim.alive():
        mg.iteration(it, c, lambda i, m: jitter(rng, 64, 0.02))
        it += 1
        if not np.isfinite(sim.now_min()):
            break
    cap.emit(sim, 120.0, coords_fn=mg.coords)
    ck_it = (it // 50) * 50
    names = ['node-%02d' % i for i in range(8)]
    names[3] = 'node-08'
    sim2 = Sim(name, 64, 8, 'gpu', seed + 7, t_begin=t_restart, gen=1, node_names=names, t_stop=95.0)
    mg2 = Megatron(sim2, 8, 2, 4, t=t_restart)
    sim2.td += 1.0
    it2 = ck_it
    while sim2.alive():
        mg2.iteration(it2, c, lambda i, m: jitter(rng, 64, 0.02))
        it2 += 1
    cap.emit(sim2, 95.0, coords_fn=mg2.coords)
    return cap, [truth_job(name, 'hang', list(range(24, 32)), t_lost, 64, 'gpu', list(range(24, 32)),
                           'node-03 vanishes at 40 s (ranks 24-31: records and heartbeats stop), survivors killed at 52 s, '
                           'restart at 62 s on node-08 with fresh comms from iteration %d' % ck_it, iter_len(sim),
                           lost_node='node-03', quiet_after_s=t_restart, duration_s=95.0)]


def sc_torchft(name, seed):
    rng = np.random.default_rng(seed)
    T = 80.0
    N = 16
    sim = Sim(name, N, 8, 'gpu', seed, t_stop=T)
    W = CommSet(sim, 'replicas', np.arange(N).reshape(1, N), 0.0)
    t_hang, t_abort = 30.0, 45.0
    sim.stop_at[5] = t_hang
    sim.end_at[5] = t_abort + 0.5
    it = 0
    phase = 0
    alive = np.ones(N, bool)
    W2 = None
    while True:
        if phase == 0 and not np.isfinite(sim.now_min()):
            # abort: the survivors' open calls are given up, comm destroyed, new comm without rank 5
            surv = np.array([r for r in range(N) if r != 5])
            # open (blocked) calls on survivors -> COMPLETION_LOST records at abort
            cols = [np.concatenate([r[i] for r in sim.R]) for i in range(13)]
            kind, op, flags, rank, comm, seq, ts, te = cols[:8]
            openm = (kind == CALL) & np.isfinite(ts) & ~np.isfinite(te)
            for j in np.nonzero(openm)[0]:
                sim.add(CALL, op[j], flags[j] | LOST, rank[j], comm[j], seq[j], ts[j], t_abort + 0.01, cols[8][j],
                        cols[9][j], cols[10][j], cols[11][j], cols[12][j])
            W.destroy([0], t_abort + 0.05)
            W.t_destroy[:] = t_abort + 0.1
            sim.td[surv] = t_abort + 1.5
            sim.stop_at[:] = INF
            sim.stop_at[5] = t_hang
            sim.dead_at[5] = t_abort + 0.5
            sim.td[5] = INF
            W2 = CommSet(sim, 'replicas2', surv.reshape(1, -1), t_abort + 1.0)
            phase = 1
            alive[5] = False
        if not sim.alive():
            break
        ranks = np.nonzero(alive)[0]
        sim.iter_begin(it)
        sim.mult = jitter(rng, N, 0.03)
        C = W if phase == 0 else W2
        sim.compute(ranks, 180.0)
        sim.mark('fwd')
        for b in range(3):
            sim.coll(C, [0], AR, 100 << 20, 25.0, 110.0)
        sim.mark('bwd')
        sim.coll(C, [0], AR, 8, 0.2, 0.5)   # torchft should_commit vote
        sim.compute(ranks, 30.0)
        sim.iter_end()
        it += 1
    # LOST records carry te = abort time but must be emitted without COMPLETED: handled by flags in emit
    cap = Capture(np.random.default_rng(seed + 1))
    cap.emit(sim, T, coords_fn=lambda r: {'tp': 0, 'pp': 0, 'dp': int(r), 'cp': 0, 'ep': 0})
    return cap, [truth_job(name, 'hang', [5], t_hang, N, 'gpu', [5],
                           'torchft: rank 5 stops at 30 s; at 45 s the 15 others abort the comm (COMPLETION_LOST, '
                           'COMM_DESTROY), rank 5 is killed, a 15-rank comm is created and training goes on',
                           iter_len(sim), quiet_after_s=t_abort + 1.0, must_resolve=True)]


def sc_alloc(name, seed):
    rng = np.random.default_rng(seed)
    T = 60.0
    sim = Sim(name, 32, 8, 'gpu', seed, t_stop=T)
    mg = Megatron(sim, 4, 2, 4)
    c = dict(MEG_C, M=4, fwd_ms=40.0, dp_ms=60.0, opt_ms=25.0)
    nxt = int(rng.integers(3, 8))
    it = 0
    spikes = 0
    while sim.alive():
        extra = None
        sp = {}
        if it == nxt:
            nxt = it + int(rng.integers(3, 8))
            sp = {'m': int(rng.integers(0, 4)), 'd': float(rng.uniform(0.3, 0.6))}
            spikes += 1

        def mult_fn(i, m, sp=sp):
            f = jitter(rng, 32, 0.02)
            if sp and m == sp['m']:
                sim.td[17] += sp['d'] / 2   # split over the micro-batch's forward and backward
            return f
        mg.iteration(it, c, mult_fn, extra)
        it += 1
    cap = Capture(np.random.default_rng(seed + 1))
    cap.emit(sim, T, coords_fn=mg.coords)
    return cap, [truth_job(name, 'slow_rank', [17], 0.0, 32, 'gpu', [17],
                           'FAULT (intermittent straggler): rank 17 gets a 300-600 ms cudaMalloc-retry spike every 3-7 '
                           'iterations (%d spikes); P2/P3 expected, P1 over-pages' % spikes, iter_len(sim),
                           sev_ok=['P2', 'P3'], sev_partial=['P1'])]


def sc_two_slow(name, seed):
    rng = np.random.default_rng(seed)
    T = 60.0
    sim = Sim(name, 32, 8, 'gpu', seed, t_stop=T)
    mg = Megatron(sim, 4, 2, 4)
    c = dict(MEG_C, M=4, fwd_ms=40.0, dp_ms=60.0, opt_ms=25.0)
    sl = [(14, 20.0, 1.3), (30, 30.0, 1.6)]
    it = 0
    while sim.alive():
        mg.iteration(it, c, lambda i, m: jitter(rng, 32, 0.02) * onset_factor(sim, sl))
        it += 1
    cap = Capture(np.random.default_rng(seed + 1))
    cap.emit(sim, T, coords_fn=mg.coords)
    return cap, [truth_job(name, 'slow_rank', [14, 30], 20.0, 32, 'gpu', [14, 30],
                           'rank 14 (dp1 pp1 tp2) 1.3x from 20 s, rank 30 (dp3 pp1 tp2) 1.6x from 30 s', iter_len(sim),
                           onsets={'14': 20.0, '30': 30.0}, persistent=True, end_s=T)]


def sc_enq_deep(name, seed):
    rng = np.random.default_rng(seed)
    T = 55.0
    N = 32
    sim = Sim(name, N, 8, 'enq', seed, t_stop=T, qdepth=16, hostfrac=0.2)
    mg = Megatron(sim, 4, 1, 8)
    t_h = 35.0
    sim.stop_at[11] = t_h
    it = 0
    while sim.alive():
        sim.iter_begin(it)
        sim.mult = jitter(rng, N, 0.02)
        for layer in range(4):     # forward: TP all-reduces, ZeRO-3 param all-gathers on DP
            sim.coll(mg.DP, np.arange(4), AG, 64 << 20, 5.0, 3.0)
            sim.coll(mg.TP, np.arange(8), AR, 16 << 20, 1.2, 30.0)
        sim.mark('fwd')
        for layer in range(4):     # backward: TP all-reduce, bucket reduce-scatter on DP
            sim.coll(mg.TP, np.arange(8), AR, 16 << 20, 1.2, 60.0)
            sim.coll(mg.DP, np.arange(4), RS, 128 << 20, 9.0, 0.5)
        sim.mark('bwd')
        sim.compute(np.arange(N), 15.0)
        sim.iter_end()
        it += 1
        if not np.isfinite(sim.now_min()):
            break
    cap = Capture(np.random.default_rng(seed + 1))
    cap.emit(sim, T, coords_fn=mg.coords)
    return cap, [truth_job(name, 'hang', [11], t_h, N, 'enq', [11],
                           'ZeRO-3 style TP4 x DP8 host-enqueue job, 16-deep launch queue; rank 11 host stops at 35 s, '
                           'peers enqueue later calls of other comms behind the blocked one', iter_len(sim))]


def sc_large(name, seed):
    rng = np.random.default_rng(seed)
    T = 20.0
    N = 2048
    sim = Sim(name, N, 8, 'gpu', seed, t_stop=T, steps=False, entries='none')
    mg = Megatron(sim, 8, 4, 64)
    c = dict(MEG_C, M=4, fwd_ms=120.0, ntp=1, tp_bytes=64 << 20, tp_ms=4.0, pp_bytes=32 << 20, pp_ms=4.0,
             dp_bytes=1 << 30, dp_ms=250.0, dp_buckets=1, opt_ms=40.0)
    sd = rng.uniform(0.03, 0.05)
    it = 0
    while sim.alive():
        mg.iteration(it, c, lambda i, m: jitter(rng, N, sd))
        it += 1
    cap = Capture(np.random.default_rng(seed + 1))
    cap.emit(sim, T, coords_fn=mg.coords)
    return cap, [truth_job(name, 'healthy', [], None, N, 'gpu', [],
                           '2048 ranks TP8 PP4 DP64, per-rank jitter %.1f %% per micro-batch, completion-only records' % (sd * 100),
                           iter_len(sim))]


SCEN = {
    'n01a_varseq_ctl': lambda n, s: sc_varseq(n, s, False),
    'n01b_varseq_slow': lambda n, s: sc_varseq(n, s, True),
    'n02a_moe_routing': lambda n, s: sc_moe(n, s, False),
    'n02b_moe_slow': lambda n, s: sc_moe(n, s, True),
    'n03a_rank0_extra': lambda n, s: sc_rank0(n, s, False),
    'n03b_eval_hang': lambda n, s: sc_rank0(n, s, True),
    'n04a_ddp_join': lambda n, s: sc_ddp(n, s, 'join'),
    'n04b_ddp_nojoin': lambda n, s: sc_ddp(n, s, 'nojoin'),
    'n05a_async_ckpt': lambda n, s: sc_ckpt(n, s, False),
    'n05b_ckpt_hang': lambda n, s: sc_ckpt(n, s, True),
    'n06a_shared_nic': lambda n, s: sc_nic(n, s, False),
    'n06b_nic_plus_slow': lambda n, s: sc_nic(n, s, True),
    'n07_slow8pct': lambda n, s: sc_ddp(n, s, 'slow8'),
    'n08_node_replace': sc_node_replace,
    'n09_torchft': sc_torchft,
    'n10_alloc_retry': sc_alloc,
    'n11_two_slow': sc_two_slow,
    'n12_enq_deep_hang': sc_enq_deep,
    'n13_large_ctl': sc_large,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('prefix', nargs='*')
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    import time
    for i, (name, fn) in enumerate(SCEN.items()):
        if a.prefix and not any(name.startswith(p) for p in a.prefix):
            continue
        t0 = time.time()
        seed = a.seed * 1000 + i
        cap, jobs = fn(name, seed)
        path = os.path.join(a.out, name + '.cwcap')
        cap.write(path)
        truth = {'scenario': name, 'seed': a.seed, 'jobs': jobs,
                 'probe_semantics': {j['job']: PROBE_DESC[j['probe']] for j in jobs}}
        with open(os.path.join(a.out, name + '.truth.json'), 'w') as f:
            json.dump(truth, f, indent=1)
        print('%-22s %7d lines %6.1f MB %5.1f s' % (name, len(cap.lines), os.path.getsize(path) / 1e6, time.time() - t0),
              flush=True)


if __name__ == '__main__':
    main()
