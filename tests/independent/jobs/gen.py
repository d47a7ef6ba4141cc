#!/usr/bin/env python3
"""Independent telemetry generator for commwatch QA (wire v1).

python gen.py SCENARIO OUT.cwcap   -> writes OUT.cwcap and OUT.truth.json
python gen.py --list

Model: each job is a per-step SPMD program (same op sequence on every rank)
evaluated in lockstep across ranks with numpy.  Every rank has a host thread
(enqueue time) and device streams; a collective instance ends at
max(member ready times) + transfer time (rendezvous).  Faults alter that
dataflow (a host that stops, a transfer that never ends, a process that dies,
compute that slows).  Records are then observed per probe semantics, batched
per node and comm every 200 ms, heartbeats per node and comm every 1 s.
"""
import base64, json, os, struct, sys, hashlib
import numpy as np

INF = np.inf
T0_NS = 1767225600_000_000_000 + 3_600_000_000_000  # base wall time
REC = np.dtype([('kind', 'u1'), ('op', 'u1'), ('flags', '<u2'), ('rank', '<i4'),
                ('comm', '<u8'), ('seq', '<u8'), ('t_start_ns', '<i8'), ('t_end_ns', '<i8'),
                ('bytes', '<u8'), ('comm_rank', '<i4'), ('peer', '<i4'), ('nranks', '<u4'),
                ('aux', '<u4')])
assert REC.itemsize == 64
OPS = {'ALLREDUCE': 1, 'ALLGATHER': 2, 'REDUCESCATTER': 3, 'BROADCAST': 4, 'ALLTOALL': 8}
F_COMPLETED, F_GPU, F_ENQ, F_LOST = 1, 2, 8, 16


class Job:
    def __init__(self, name, jtype, W, gpn, probe, comm_groups, program, seed,
                 host_sync_compute=False, clock_shift=0.0, launch=25e-6):
        self.name, self.jtype, self.W, self.gpn, self.probe = name, jtype, W, gpn, probe
        self.groups = comm_groups          # family -> list of member lists
        self.program = program             # fn(step, rng) -> list of ops
        seed += int(os.environ.get('SEED', '0'))  # SEED: another draw of every job
        self.rng = np.random.default_rng(seed)
        self.host_sync_compute = host_sync_compute
        self.clock_shift = clock_shift
        self.launch = launch
        self.node_of = np.arange(W) // gpn
        self.nnodes = int(self.node_of.max()) + 1
        self.node_off = self.rng.normal(0, 0.02, self.nnodes)      # tens of ms
        self.node_drift = self.rng.normal(0, 3e-6, self.nnodes)
        self.node_phase = self.rng.uniform(0, 0.2, self.nnodes)
        # comm ids
        self.comm_list = []   # (hexid, int id, members)
        self.fam = {}         # family -> (group_id per rank, members lists, comm indices)
        for famname, glist in comm_groups.items():
            gid = np.full(W, -1)
            cidx = []
            for g in glist:
                h = hashlib.sha256(f'{name}/{famname}/{g}'.encode()).digest()
                cid = int.from_bytes(h[:8], 'little')
                self.comm_list.append((f'{cid:016x}', cid, list(g)))
                ci = len(self.comm_list) - 1
                cidx.append(ci)
                for r in g:
                    gid[r] = ci
            self.fam[famname] = gid
        # faults
        self.hang = None      # (rank, T)
        self.crash = None     # (rank, T)
        self.slow = None      # (rank, T, factor)
        self.commhang = None  # (family, group index or None, T)
        self.commhang_fired = None
        self.exit_at = None   # stop issuing steps after this time; exit normally
        self.pause_p = 0.01
        self.jitter = 0.03

    def clock(self, t, ranks_or_nodes, is_node=False):
        n = ranks_or_nodes if is_node else self.node_of[ranks_or_nodes]
        return t * (1 + self.node_drift[n]) + self.node_off[n] + self.clock_shift

    # ------------------------------------------------------------ simulate
    def simulate(self, D):
        W, rng = self.W, self.rng
        host = 0.5 + rng.uniform(0, 0.05, W)
        streams = {}
        seqctr = np.zeros(len(self.comm_list), dtype=np.int64)
        recs = {k: [] for k in ('rank', 'comm', 'seq', 'op', 'bytes', 'ready', 'enq', 'end')}
        steps = []   # (step, rank arr, t_start, t_end, phases dict of arrays)
        self.first_wait = INF
        self.pause_log = []
        step = 0
        while True:
            fin = np.isfinite(host)
            if not fin.any() or host[fin].min() > D:
                break
            if self.exit_at is not None and host[fin].min() > self.exit_at:
                break
            ops = self.program(step, rng)
            ncomp = sum(1 for o in ops if o[0] == 'comp')
            pause_op = np.where(rng.random(W) < self.pause_p, rng.integers(0, max(ncomp, 1), W), -1)
            pause_len = rng.uniform(0.1, 0.3, W)
            self.pause_log += [(int(r), step) for r in np.nonzero(pause_op >= 0)[0]]
            events = {}
            marks = {}
            st_start = host.copy()
            ci = 0
            for op in ops:
                kind = op[0]
                if kind == 'host':
                    host = self._hostcheck(host + op[1](W))
                elif kind == 'mark':
                    c = streams.get('comp', np.zeros(W))
                    marks[op[1]] = np.maximum(c, host) if self.host_sync_compute else c.copy()
                elif kind == 'comp':
                    _, base = op[:2]
                    enq = self._hostcheck(host.copy())
                    cs = streams.get('comp', np.zeros(W))
                    start = np.maximum(cs, enq)
                    for lab in (op[2] if len(op) > 2 else ()):
                        start = np.maximum(start, events[lab])
                    dur = base(W) if callable(base) else np.full(W, base)
                    dur = dur * rng.normal(1.0, self.jitter, W).clip(0.85, 1.2)
                    dur = dur + np.where(pause_op == ci, pause_len, 0.0)
                    if self.slow is not None:
                        r, T, f = self.slow
                        if start[r] >= T:
                            dur[r] *= f
                    end = start + dur
                    if self.crash is not None:
                        r, T = self.crash
                        if end[r] > T:
                            end[r] = INF
                    streams['comp'] = end
                    if len(op) > 3 and op[3]:
                        events[op[3]] = end
                    host = end.copy() if self.host_sync_compute else enq + self.launch
                    ci += 1
                elif kind == 'wait':
                    streams['comp'] = np.maximum(streams.get('comp', np.zeros(W)), events[op[1]])
                elif kind == 'hostwait':
                    host = np.maximum(host, events[op[1]] + 0.0003)
                elif kind == 'sync':
                    m = host.copy()
                    for s in streams.values():
                        m = np.maximum(m, s)
                    host = self._hostcheck(m + 0.0005)
                elif kind == 'coll':
                    # ('coll', family, opname, bytes, xfer_s, stream, after_label, tag)
                    _, fam, opname, nbytes, xfer, sname, after, tag = op
                    gid = self.fam[fam]
                    enq = self._hostcheck(host.copy())
                    host = enq + self.launch
                    ready = np.maximum(streams.get(sname, np.zeros(W)), enq)
                    if after:
                        ready = np.maximum(ready, events[after])
                    end = np.full(W, INF)
                    for c in np.unique(gid[gid >= 0]):
                        mem = np.nonzero(gid == c)[0]
                        rmax = ready[mem].max()
                        e = rmax + xfer * rng.uniform(0.9, 1.15) + rng.uniform(0, 30e-6, len(mem))
                        if self.commhang is not None and self.commhang_fired is None:
                            f2, gi, T = self.commhang
                            if f2 == fam and (gi is None or self.comm_list[c][2] == self.groups[fam][gi]) \
                                    and np.isfinite(rmax) and ready[mem].min() >= T:
                                e[:] = INF
                                self.commhang_fired = (c, rmax, seqctr[c])
                        if self.crash is not None:
                            r, T = self.crash
                            if r in mem and (e.max() > T or not np.isfinite(ready[r])):
                                e[:] = INF
                        if not np.isfinite(rmax):
                            e[:] = INF
                            # first moment a peer waits on a call a stuck rank never enters
                            fr = ready[mem][np.isfinite(ready[mem])]
                            if len(fr):
                                self.first_wait = min(self.first_wait, fr.min())
                        end[mem] = e
                        recs['rank'].append(mem)
                        recs['comm'].append(np.full(len(mem), c))
                        recs['seq'].append(np.full(len(mem), seqctr[c]))
                        recs['op'].append(np.full(len(mem), OPS[opname]))
                        recs['bytes'].append(np.full(len(mem), nbytes))
                        recs['ready'].append(ready[mem])
                        recs['enq'].append(enq[mem])
                        recs['end'].append(e)
                        seqctr[c] += 1
                    streams[sname] = np.where(gid >= 0, end, streams.get(sname, np.zeros(W)))
                    if tag:
                        events[tag] = np.where(gid >= 0, end, 0.0)
                else:
                    raise ValueError(kind)
            ph = {}
            keys = list(marks)
            for a, b in zip(keys, keys[1:] + ['__end']):
                endm = marks[b] if b in marks else host
                if a.endswith('_ms'):
                    with np.errstate(invalid='ignore'):
                        ph[a] = (endm - marks[a]) * 1000
            steps.append((step, st_start, host.copy(), ph))
            step += 1
        self.recs = {k: np.concatenate(v) for k, v in recs.items()}
        self.steps = steps
        return self

    def _hostcheck(self, h):
        for flt in (self.hang, self.crash):
            if flt is not None:
                r, T = flt
                if h[r] >= T:
                    h[r] = INF
        return h

    # ------------------------------------------------------------ observe + emit
    def emit(self, D):
        rng, W = self.rng, self.W
        R = self.recs
        n = len(R['rank'])
        poll_gpu = rng.uniform(0.0005, 0.005, n)
        poll_enq = rng.uniform(0.001, 0.02, n)
        if self.probe == 'gpu':
            t_start = R['ready']; obs_entry = R['ready'] + rng.uniform(0.0005, 0.003, n)
            t_end = R['end']; obs_end = R['end'] + poll_gpu
            base_flags = F_GPU
        elif self.probe == 'enq':
            t_start = R['enq']; obs_entry = R['enq'] + 2e-6
            t_end = R['end'] + poll_enq; obs_end = t_end
            base_flags = F_ENQ
        else:  # blocking (gloo)
            t_start = R['ready']; obs_entry = R['ready']
            t_end = R['end']; obs_end = R['end']
            base_flags = 0
        if self.crash is not None:
            r, T = self.crash
            dead = R['rank'] == r
            obs_entry = np.where(dead & (obs_entry > T), INF, obs_entry)
            obs_end = np.where(dead & (obs_end > T), INF, obs_end)
        self.obs = dict(t_start=t_start, t_end=t_end, obs_entry=obs_entry, obs_end=obs_end)
        lines = []
        # --- versions: entry and completion
        ranks = R['rank']; comm = R['comm']
        cid = np.array([c[1] for c in self.comm_list], dtype=np.uint64)
        crank = np.zeros(n, dtype=np.int64); nr = np.zeros(n, dtype=np.int64)
        pos = {}
        for i, (_, _, mem) in enumerate(self.comm_list):
            for j, r in enumerate(mem):
                pos[(i, r)] = j
        cr_lookup = np.full((len(self.comm_list), W), -1)
        for (i, r), j in pos.items():
            cr_lookup[i, r] = j
        crank = cr_lookup[comm, ranks]
        nr = np.array([len(c[2]) for c in self.comm_list])[comm]
        ver_obs, ver_idx, ver_done = [], [], []
        m = np.isfinite(obs_entry) & (obs_entry <= D)
        ver_obs.append(obs_entry[m]); ver_idx.append(np.nonzero(m)[0]); ver_done.append(np.zeros(m.sum(), bool))
        m2 = np.isfinite(obs_end) & (obs_end <= D)
        ver_obs.append(obs_end[m2]); ver_idx.append(np.nonzero(m2)[0]); ver_done.append(np.ones(m2.sum(), bool))
        vo = np.concatenate(ver_obs); vi = np.concatenate(ver_idx); vd = np.concatenate(ver_done)
        arr = np.zeros(len(vi), dtype=REC)
        arr['kind'] = 1; arr['op'] = R['op'][vi]
        arr['flags'] = base_flags | np.where(vd, F_COMPLETED, 0)
        arr['rank'] = ranks[vi]; arr['comm'] = cid[comm[vi]]; arr['seq'] = R['seq'][vi]
        arr['t_start_ns'] = self._ns(t_start[vi], ranks[vi])
        arr['t_end_ns'] = np.where(vd, self._ns(np.where(vd, t_end[vi], 0), ranks[vi]), 0)
        arr['bytes'] = R['bytes'][vi]; arr['comm_rank'] = crank[vi]; arr['peer'] = -1
        arr['nranks'] = nr[vi]; arr['aux'] = 0
        vnode = self.node_of[ranks[vi]]
        vcomm = comm[vi]
        # COMM_INIT
        ia = []
        for i, (_, c, mem) in enumerate(self.comm_list):
            nn = len(set(self.node_of[mem].tolist()))
            for j, r in enumerate(mem):
                t = 0.05 + 0.01 * i / max(1, len(self.comm_list)) + rng.uniform(0, 0.05)
                ia.append((t, r, i, j, len(mem), nn, 2))
        if self.exit_at is not None:
            for i, (_, c, mem) in enumerate(self.comm_list):
                for j, r in enumerate(mem):
                    t = self.exit_time[r] + rng.uniform(0.05, 0.3)
                    if t <= D:
                        ia.append((t, r, i, j, len(mem), 0, 3))
        ia_arr = np.zeros(len(ia), dtype=REC)
        ia_t = np.array([x[0] for x in ia]); ia_r = np.array([x[1] for x in ia])
        ia_arr['kind'] = [x[6] for x in ia]; ia_arr['rank'] = ia_r
        ia_arr['comm'] = cid[[x[2] for x in ia]]
        ia_arr['t_start_ns'] = self._ns(ia_t, ia_r); ia_arr['t_end_ns'] = ia_arr['t_start_ns']
        ia_arr['comm_rank'] = [x[3] for x in ia]; ia_arr['peer'] = -1
        ia_arr['nranks'] = [x[4] for x in ia]; ia_arr['aux'] = [x[5] for x in ia]
        arr = np.concatenate([arr, ia_arr]); vo = np.concatenate([vo, ia_t])
        vnode = np.concatenate([vnode, self.node_of[ia_r]])
        vcomm = np.concatenate([vcomm, np.array([x[2] for x in ia])])
        # batching: flush at node_phase + k*0.2 (sim time), k = ceil
        ph = self.node_phase[vnode]
        k = np.ceil((vo - ph) / 0.2 + 1e-9)
        flush = ph + k * 0.2
        keep = flush <= D
        order = np.lexsort((vo, vcomm, vnode, k))
        order = order[keep[order]]
        key = np.stack([k[order], vnode[order], vcomm[order]], 1)
        brk = np.nonzero(np.any(np.diff(key, axis=0) != 0, axis=1))[0] + 1
        for seg in np.split(order, brk):
            if len(seg) == 0:
                continue
            nd = vnode[seg[0]]; c = vcomm[seg[0]]
            ts = self._ns_node(flush[seg[0]] + 0.002, nd)
            payload = b'CWB1' + struct.pack('<HHII', 1, 64, len(seg), 0) + arr[seg].tobytes()
            lines.append((ts, {'topic': 'cw.calls.v1', 'key': f'{self.name}/{self.comm_list[c][0]}',
                               'ts_ns': ts, 'value_b64': base64.b64encode(payload).decode()}))
        lines += self._heartbeats(D)
        lines += self._topology()
        lines += self._steps(D)
        return lines

    def _ns(self, t, ranks):
        return (T0_NS + np.round(self.clock(t, ranks) * 1e9)).astype(np.int64)

    def _ns_node(self, t, node):
        return int(T0_NS + round(float(self.clock(t, node, is_node=True)) * 1e9))

    def _heartbeats(self, D):
        R, O = self.recs, self.obs
        out = []
        idx = {}
        for i in range(len(R['rank'])):
            pass
        key = R['comm'] * 100000 + R['rank']
        order = np.argsort(key, kind='stable')
        ks = key[order]
        brk = np.nonzero(np.diff(ks))[0] + 1
        per = {}
        for seg in np.split(order, brk):
            if len(seg) == 0:
                continue
            c, r = int(R['comm'][seg[0]]), int(R['rank'][seg[0]])
            s = R['seq'][seg]
            oe = O['obs_entry'][seg]; o1 = np.argsort(oe, kind='stable')
            od = O['obs_end'][seg]; o2 = np.argsort(od, kind='stable')
            per[(c, r)] = (oe[o1], np.maximum.accumulate(s[o1]), O['t_start'][seg][o1],
                           od[o2], np.maximum.accumulate(s[o2]), O['t_end'][seg][o2])
        for nd in range(self.nnodes):
            t = self.node_phase[nd] + 0.5
            while t <= D:
                if self.exit_at is not None and t > self.exit_time.max() + 1.5:
                    break
                for ci, (hx, _, mem) in enumerate(self.comm_list):
                    loc = [r for r in mem if self.node_of[r] == nd]
                    if not loc:
                        continue
                    rl = []
                    for r in loc:
                        if self.crash is not None and r == self.crash[0] and t > self.crash[1] + 0.5:
                            continue
                        if self.exit_at is not None and t > self.exit_time[r] + 0.5:
                            continue
                        p = per.get((ci, r))
                        d = {'rank': int(r), 'started': -1, 'completed': -1,
                             't_last_start_ns': 0, 't_last_end_ns': 0}
                        if p is not None:
                            a = np.searchsorted(p[0], t, 'right')
                            if a:
                                d['started'] = int(p[1][a - 1])
                                d['t_last_start_ns'] = int(self._ns(np.array([p[2][a - 1]]), np.array([r]))[0])
                            b = np.searchsorted(p[3], t, 'right')
                            if b:
                                d['completed'] = int(p[4][b - 1])
                                d['t_last_end_ns'] = int(self._ns(np.array([p[5][b - 1]]), np.array([r]))[0])
                        rl.append(d)
                    if not rl:
                        continue
                    ts = self._ns_node(t, nd)
                    out.append((ts, {'topic': 'cw.progress.v1', 'key': f'{self.name}/{hx}', 'ts_ns': ts,
                                     'value': {'v': 1, 'job': self.name, 'node': f'{self.name}-node-{nd:02d}',
                                               'ts_ns': ts, 'comm': hx, 'ranks': rl}}))
                t += 1.0
        return out

    def _topology(self):
        out = []
        for r in range(self.W):
            nd = int(self.node_of[r])
            ts = self._ns_node(0.02 + 0.001 * r, nd)
            v = {'v': 1, 'job': self.name, 'ts_ns': ts, 'rank': r, 'world_size': self.W,
                 'node': f'{self.name}-node-{nd:02d}', 'local_rank': int(r % self.gpn),
                 'gpu': f'GPU-{hashlib.md5(f"{self.name}{r}".encode()).hexdigest()[:12]}'}
            if self.coords is not None:
                v['coords'] = self.coords(r)
            out.append((ts, {'topic': 'cw.topology.v1', 'key': self.name, 'ts_ns': ts, 'value': v}))
        return out

    coords = None

    def _steps(self, D):
        out = []
        for (it, t0, t1, ph) in self.steps:
            for r in range(self.W):
                if not (np.isfinite(t1[r]) and t1[r] + 0.003 <= D):
                    continue
                if self.crash is not None and r == self.crash[0] and t1[r] > self.crash[1]:
                    continue
                nd = int(self.node_of[r])
                ts = self._ns_node(t1[r] + 0.003, nd)
                v = {'v': 1, 'job': self.name, 'rank': r, 'iteration': it,
                     't_start_ns': int(self._ns(np.array([t0[r]]), np.array([r]))[0]),
                     't_end_ns': int(self._ns(np.array([t1[r]]), np.array([r]))[0]),
                     'phases': {k: round(float(a[r]), 2) for k, a in ph.items() if np.isfinite(a[r])}}
                out.append((ts, {'topic': 'cw.steps.v1', 'key': self.name, 'ts_ns': ts, 'value': v}))
        return out


# ---------------------------------------------------------------- job types
def lognorm(mu, sigma):
    return lambda W, _r=[None]: None


def fsdp_job(name, W=32, probe='gpu', sep_comm=False, L=20, seed=1, **kw):
    groups = {'dp': [list(range(W))]}
    if sep_comm:
        groups['dp_rs'] = [list(range(W))]
    rs_fam = 'dp_rs' if sep_comm else 'dp'
    ag_stream, rs_stream = ('ag', 'rs') if sep_comm else ('nccl', 'nccl')
    per_layer_bytes = 700_000_000 // L * 2 // 2

    def prog(step, rng):
        ops = [('host', lambda W: rng.lognormal(np.log(0.08), 0.3, W)), ('mark', 'forward_ms')]
        ops.append(('coll', 'dp', 'ALLGATHER', per_layer_bytes, 0.008, ag_stream, None, 'agf0'))
        ops.append(('coll', 'dp', 'ALLGATHER', per_layer_bytes, 0.008, ag_stream, None, 'agf1'))
        for i in range(L):
            ops.append(('wait', f'agf{i}'))
            ops.append(('comp', 0.012))
            if i + 2 < L:
                ops.append(('hostwait', f'agf{i}'))
                ops.append(('coll', 'dp', 'ALLGATHER', per_layer_bytes, 0.008, ag_stream, None, f'agf{i + 2}'))
        ops.append(('comp', 0.006))  # loss
        ops.append(('mark', 'backward_ms'))
        ops.append(('coll', 'dp', 'ALLGATHER', per_layer_bytes, 0.008, ag_stream, None, f'agb{L - 1}'))
        ops.append(('coll', 'dp', 'ALLGATHER', per_layer_bytes, 0.008, ag_stream, None, f'agb{L - 2}'))
        for i in range(L - 1, -1, -1):
            ops.append(('wait', f'agb{i}'))
            ops.append(('comp', 0.024, (), f'g{i}'))
            ops.append(('coll', rs_fam, 'REDUCESCATTER', per_layer_bytes, 0.010, rs_stream, f'g{i}', f'rs{i}'))
            if i - 2 >= 0:
                ops.append(('hostwait', f'agb{i}'))
                ops.append(('coll', 'dp', 'ALLGATHER', per_layer_bytes, 0.008, ag_stream, None, f'agb{i - 2}'))
        ops.append(('wait', 'rs0'))
        ops.append(('mark', 'optimizer_ms'))
        ops.append(('comp', 0.03))
        ops.append(('sync',))
        return ops
    j = Job(name, 'fsdp', W, 8, probe, groups, prog, seed, **kw)
    j.coords = lambda r: {'dp': r}
    return j


def moe_job(name, W=32, TP=2, EP=8, probe='gpu', L=8, seed=2, **kw):
    DP = W // TP
    rank = lambda dp, tp: dp * TP + tp
    groups = {
        'tp': [[rank(d, t) for t in range(TP)] for d in range(DP)],
        'ep': [[rank(b * EP + e, t) for e in range(EP)] for t in range(TP) for b in range(DP // EP)],
        'dp': [[rank(d, t) for d in range(DP)] for t in range(TP)],
        'edp': [[rank(b * EP + e, t) for b in range(DP // EP)] for t in range(TP) for e in range(EP)],
    }

    def prog(step, rng):
        ops = [('host', lambda W: rng.lognormal(np.log(0.06), 0.3, W)), ('mark', 'forward_ms')]
        last = None
        def seqop(ops, comp=None, coll=None, tagn=[0]):
            pass
        n = [0]
        def c(base):
            n[0] += 1
            t = f'c{n[0]}'
            ops.append(('comp', base, (), t))
            return t
        def k(fam, opn, nb, x, after):
            n[0] += 1
            t = f'k{n[0]}'
            ops.append(('coll', fam, opn, nb, x, 'nccl', after, t))
            ops.append(('wait', t))
            return t
        for phase, mult in (('f', 1.0), ('b', 2.0)):
            if phase == 'b':
                ops.append(('mark', 'backward_ms'))
            for l in range(L):
                t = c(0.006 * mult)
                t = k('tp', 'ALLREDUCE', 16 << 20, 0.0008, t)
                t = c(0.001 * mult)
                ops.append(('hostwait', t))   # split sizes copied to host before all_to_all
                t = k('ep', 'ALLTOALL', 32 << 20, 0.003, t)
                imb = rng.lognormal(0, 0.3, W)   # token imbalance, healthy noise
                t = c(lambda W, imb=imb, mult=mult: 0.008 * mult * imb)
                t = k('ep', 'ALLTOALL', 32 << 20, 0.003, t)
                t = k('tp', 'ALLREDUCE', 16 << 20, 0.0008, t)
        t = c(0.002)
        for b in range(4):
            t = k('dp', 'ALLREDUCE', 64 << 20, 0.012, t)
        for b in range(2):
            t = k('edp', 'ALLREDUCE', 64 << 20, 0.008, t)
        ops.append(('mark', 'optimizer_ms'))
        c(0.03)
        ops.append(('sync',))
        return ops
    j = Job(name, 'moe', W, 8, probe, groups, prog, seed, **kw)
    j.coords = lambda r: {'tp': r % TP, 'dp': r // TP, 'ep': (r // TP) % EP}
    return j


def ddp_gloo_job(name, W=8, gpn=4, seed=3, probe_override=None, **kw):
    groups = {'world': [list(range(W))]}
    NB = 6

    def prog(step, rng):
        ops = [('host', lambda W: rng.lognormal(np.log(0.03), 0.3, W)), ('mark', 'forward_ms'),
               ('comp', 0.2), ('mark', 'backward_ms')]
        for b in range(NB):
            ops.append(('comp', 0.06, (), f'b{b}'))
            ops.append(('coll', 'world', 'ALLREDUCE', 25 << 20, 0.025, 'gloo', f'b{b}', f'ar{b}'))
        ops.append(('wait', f'ar{NB - 1}'))
        ops.append(('mark', 'optimizer_ms'))
        ops.append(('comp', 0.02))
        ops.append(('sync',))
        return ops
    if probe_override:   # same DDP program on NCCL: async, GPU compute, host runs ahead
        j = Job(name, 'ddp_nccl', W, 8, probe_override, groups, prog, seed, **kw)
    else:
        j = Job(name, 'ddp_gloo', W, gpn, 'block', groups, prog, seed, host_sync_compute=True, **kw)
    j.coords = lambda r: {'dp': r}
    return j


def long_job(name, W=16, probe='enq', micro=30, seed=4, sync_micro=True, **kw):
    self_sync_micro = sync_micro
    groups = {'dp': [list(range(W))]}

    def prog(step, rng):
        ops = [('mark', 'forward_ms')]
        for m in range(micro):
            ops.append(('host', lambda W: rng.lognormal(np.log(0.02), 0.3, W)))
            ops.append(('comp', 0.33))
            ops.append(('comp', 0.66, (), 'g'))
            if self_sync_micro:
                ops.append(('sync',))   # loss.item() per micro-batch: host cannot run ahead
        ops.append(('mark', 'backward_ms'))
        for b in range(8):
            ops.append(('coll', 'dp', 'ALLREDUCE', 100 << 20, 0.06, 'nccl', 'g', f'ar{b}'))
        ops.append(('wait', 'ar7'))
        ops.append(('coll', 'dp', 'ALLREDUCE', 8, 0.0002, 'nccl', 'ar7', 'loss'))
        ops.append(('mark', 'optimizer_ms'))
        ops.append(('comp', 0.2))
        ops.append(('sync',))
        return ops
    j = Job(name, 'long_step', W, 8, probe, groups, prog, seed, **kw)
    j.coords = lambda r: {'dp': r}
    return j


# ---------------------------------------------------------------- scenarios
def S(job_specs, D):
    return (job_specs, D)


def build(scn):
    """returns (list of (Job, fault dict)), duration"""
    parts = scn.split('_')
    jobs = []
    def mk(jt, name, **kw):
        f = {'fsdp': fsdp_job, 'moe': moe_job, 'ddp': ddp_gloo_job, 'long': long_job}[jt]
        return f(name, **kw)
    table = {
        # job type, kwargs, fault, duration
        'fsdp_healthy':      [('fsdp', 'fsdp-h', dict(W=32, probe='gpu'), None)],
        'fsdp_healthy_enq':  [('fsdp', 'fsdp-he', dict(W=16, probe='enq', sep_comm=True), None)],
        'fsdp_slow13':       [('fsdp', 'fsdp-s13', dict(W=32, probe='gpu'), ('slow', 13, 25.0, 1.3))],
        'fsdp_slow2_enq':    [('fsdp', 'fsdp-s2', dict(W=16, probe='enq', sep_comm=True), ('slow', 5, 25.0, 2.0))],
        'fsdp_hang':         [('fsdp', 'fsdp-hg', dict(W=32, probe='gpu'), ('hang', 21, 30.3))],
        'fsdp_hang_enq':     [('fsdp', 'fsdp-hge', dict(W=16, probe='enq', sep_comm=True), ('hang', 9, 30.3))],
        'fsdp_commhang_enq': [('fsdp', 'fsdp-ch', dict(W=16, probe='enq', sep_comm=True), ('commhang', 'dp_rs', None, 30.0))],
        'fsdp_crash':        [('fsdp', 'fsdp-cr', dict(W=32, probe='gpu'), ('crash', 30, 30.7))],
        'moe_healthy':       [('moe', 'moe-h', dict(W=32), None)],
        'moe_healthy_enq':   [('moe', 'moe-he', dict(W=16, probe='enq', seed=12), None)],
        'moe_slow13':        [('moe', 'moe-s13', dict(W=32), ('slow', 11, 25.0, 1.3))],
        'moe_slow2':         [('moe', 'moe-s2', dict(W=32), ('slow', 6, 25.0, 2.0))],
        'moe_hang':          [('moe', 'moe-hg', dict(W=32), ('hang', 19, 30.4))],
        'moe_hang_enq':      [('moe', 'moe-hge', dict(W=16, probe='enq', seed=12), ('hang', 3, 30.4))],
        'moe_commhang':      [('moe', 'moe-ch', dict(W=32), ('commhang', 'ep', 2, 30.0))],
        'moe_crash':         [('moe', 'moe-cr', dict(W=32), ('crash', 25, 30.2))],
        'ddp_healthy':       [('ddp', 'ddp-h', dict(W=8), None)],
        'ddp_slow13':        [('ddp', 'ddp-s13', dict(W=8), ('slow', 6, 25.0, 1.3))],
        'ddp_slow2':         [('ddp', 'ddp-s2', dict(W=8), ('slow', 2, 25.0, 2.0))],
        'ddp_hang':          [('ddp', 'ddp-hg', dict(W=8), ('hang', 5, 30.2))],
        'ddp_commhang':      [('ddp', 'ddp-ch', dict(W=8), ('commhang', 'world', None, 30.0))],
        'ddp_crash':         [('ddp', 'ddp-cr', dict(W=8), ('crash', 1, 30.2))],
        'long_healthy':      [('long', 'long-h', dict(W=16), None)],
        'long_healthy_runahead': [('long', 'long-hr', dict(W=16, sync_micro=False), None)],
        'long_hang_runahead': [('long', 'long-hgr', dict(W=16, sync_micro=False), ('hang', 12, 45.0))],
        'fsdp_healthy_lowjit': [('fsdp', 'fsdp-hl', dict(W=32, probe='gpu'), None)],
        'fsdp_slow13_lowjit': [('fsdp', 'fsdp-s13l', dict(W=32, probe='gpu'), ('slow', 13, 25.0, 1.3))],
        'fsdp_slow2_lowjit': [('fsdp', 'fsdp-s2l', dict(W=32, probe='gpu'), ('slow', 13, 25.0, 2.0))],
        'long_hang_300s':    [('long', 'long-hg3', dict(W=16), ('hang', 12, 45.0))],
        'fsdp_commhang':     [('fsdp', 'fsdp-chg', dict(W=32, probe='gpu'), ('commhang', 'dp', None, 30.0))],
        'moe_slow13_enq':    [('moe', 'moe-s13e', dict(W=16, probe='enq', seed=12), ('slow', 5, 25.0, 1.3))],
        'long_slow2':        [('long', 'long-s2', dict(W=16), ('slow', 3, 35.0, 2.0))],
        'long_crash':        [('long', 'long-cr', dict(W=16, probe='gpu'), ('crash', 9, 45.0))],
        'multi_overlap_hangA': [('fsdp', 'mA-fsdp', dict(W=16, probe='enq'), ('hang', 10, 80.3)),
                              ('moe', 'mB-moe', dict(W=16, probe='gpu', clock_shift=60.0), None),
                              ('ddp', 'mC-ddp', dict(W=8), None)],
        'multi_overlap_slowB': [('fsdp', 'mA-fsdp', dict(W=16, probe='enq'), None),
                              ('moe', 'mB-moe', dict(W=16, probe='gpu', clock_shift=60.0), ('slow', 9, 20.0, 2.0)),
                              ('ddp', 'mC-ddp', dict(W=8), None)],
        'multi_overlap_hangB': [('fsdp', 'mA-fsdp', dict(W=16, probe='enq'), None),
                              ('moe', 'mB-moe', dict(W=16, probe='gpu', clock_shift=60.0), ('hang', 3, 25.3)),
                              ('ddp', 'mC-ddp', dict(W=8), None)],
        'long_slow2_300s':   [('long', 'long-s23', dict(W=16), ('slow', 3, 35.0, 2.0))],
        'long_crash_300s':   [('long', 'long-cr3', dict(W=16, probe='gpu'), ('crash', 9, 45.0))],
        'fsdp_healthy_gpu_sep': [('fsdp', 'fsdp-hgs', dict(W=32, probe='gpu', sep_comm=True), None)],
        'fsdp_slow13_gpu_sep': [('fsdp', 'fsdp-s13gs', dict(W=32, probe='gpu', sep_comm=True), ('slow', 13, 25.0, 1.3))],
        'fsdp_slow2_gpu_sep': [('fsdp', 'fsdp-s2gs', dict(W=32, probe='gpu', sep_comm=True), ('slow', 13, 25.0, 2.0))],
        'fsdp_healthy_enq_shared': [('fsdp', 'fsdp-hes', dict(W=32, probe='enq', sep_comm=False), None)],
        'ddp_nccl_healthy_gpu': [('ddp', 'ddpn-h', dict(W=8, probe_override='gpu'), None)],
        'ddp_nccl_healthy_enq': [('ddp', 'ddpn-he', dict(W=8, probe_override='enq'), None)],
        'fsdp_healthy_nopause': [('fsdp', 'fsdp-hn', dict(W=32, probe='gpu'), None)],
        'ddp_healthy_nopause': [('ddp', 'ddp-hn', dict(W=8), None)],
        'fsdp_slow13_nopause': [('fsdp', 'fsdp-s13n', dict(W=32, probe='gpu'), ('slow', 13, 25.0, 1.3))],
        'long_slow13':       [('long', 'long-s13', dict(W=16), ('slow', 7, 35.0, 1.3))],
        'long_hang':         [('long', 'long-hg', dict(W=16), ('hang', 12, 45.0))],
        'long_hang_gpu':     [('long', 'long-hgg', dict(W=16, probe='gpu'), ('hang', 4, 50.0))],
        'fsdp_exit':         [('fsdp', 'fsdp-ex', dict(W=16, probe='enq'), ('exit', 40.0))],
        'multi_healthy':     [('fsdp', 'mA-fsdp', dict(W=16, probe='enq'), None),
                              ('moe', 'mB-moe', dict(W=16, probe='gpu', clock_shift=60.0), None),
                              ('ddp', 'mC-ddp', dict(W=8), None)],
        'multi_slow':        [('fsdp', 'mA-fsdp', dict(W=16, probe='enq'), None),
                              ('moe', 'mB-moe', dict(W=16, probe='gpu', clock_shift=60.0), ('slow', 9, 25.0, 2.0)),
                              ('ddp', 'mC-ddp', dict(W=8), None)],
        'multi_hang':        [('fsdp', 'mA-fsdp', dict(W=16, probe='enq', clock_shift=60.0), ('hang', 10, 30.3)),
                              ('moe', 'mB-moe', dict(W=16, probe='gpu'), None),
                              ('ddp', 'mC-ddp', dict(W=8), None)],
        'multi_hang_shifted_other': [('fsdp', 'mA-fsdp', dict(W=16, probe='enq'), ('hang', 10, 30.3)),
                              ('moe', 'mB-moe', dict(W=16, probe='gpu', clock_shift=60.0), None)],
        'multi_exit':        [('fsdp', 'mA-fsdp', dict(W=16, probe='enq'), ('exit', 35.0)),
                              ('moe', 'mB-moe', dict(W=16, probe='gpu', clock_shift=60.0), None)],
    }
    durations = {'long': 150.0}
    spec = table[scn]
    D = 150.0 if scn.startswith('long') else 70.0
    if scn.startswith('multi_overlap'):
        D = 130.0
    if scn.endswith('_300s'):
        D = 300.0
    out = []
    for i, (jt, name, kw, fault) in enumerate(spec):
        kw = dict(kw)
        kw.setdefault('seed', 100 + i * 7 + sum(map(ord, scn)))
        j = mk(jt, name, **kw)
        if fault:
            if fault[0] == 'slow':
                j.slow = (fault[1], fault[2], fault[3])
            elif fault[0] == 'hang':
                j.hang = (fault[1], fault[2])
            elif fault[0] == 'crash':
                j.crash = (fault[1], fault[2])
            elif fault[0] == 'commhang':
                j.commhang = (fault[1], fault[2], fault[3])
            elif fault[0] == 'exit':
                j.exit_at = fault[1]
        if scn.endswith('_lowjit'):
            j.pause_p, j.jitter = 0.0, 0.01
        if scn.endswith('_nopause'):
            j.pause_p = 0.0
        out.append((j, fault))
    return out, D


def main():
    if sys.argv[1] == '--list':
        import inspect
        src = inspect.getsource(build)
        import re
        print('\n'.join(re.findall(r"^\s+'([A-Za-z0-9_]+)':\s+\[", src, re.M)))
        return
    scn, outp = sys.argv[1], sys.argv[2]
    jobs, D = build(scn)
    lines = []
    truth = {'scenario': scn, 'duration_s': D, 't0_ns': T0_NS, 'jobs': []}
    for j, fault in jobs:
        j.simulate(D)
        if j.exit_at is not None:
            j.exit_time = j.steps[-1][2].copy()
        lines += j.emit(D)
        # healthy step time
        shift_ns = int(j.clock_shift * 1e9)
        tn = lambda t: int(T0_NS + shift_ns + t * 1e9)
        tn0 = tn
        with np.errstate(invalid='ignore'):
            durs = np.array([(s[2] - s[1]) for s in j.steps])
        fin = np.isfinite(durs)
        sd = float(np.median(durs[fin])) if fin.any() else None
        jt = {'job': j.name, 'type': j.jtype, 'probe': j.probe, 'world': j.W, 'nodes': j.nnodes,
              'gpus_per_node': j.gpn, 'clock_shift_s': j.clock_shift, 'step_s_median': sd,
              'comms': {hx: mem for hx, _, mem in j.comm_list} if len(j.comm_list) < 12 else len(j.comm_list),
              'records': int(len(j.recs['rank'])), 'fault': None,
              'pauses_rank_step': j.pause_log,
              'step_start_ns': [tn0(float(np.nanmin(np.where(np.isfinite(s[1]), s[1], np.nan)))) for s in j.steps if np.isfinite(s[1]).any()]}
        if fault:
            k = fault[0]
            if k == 'slow':
                r, T, f = j.slow
                # culprit's step ends after onset (for delay in iterations)
                ends = [float(s[2][r]) for s in j.steps if np.isfinite(s[2][r]) and s[2][r] > T]
                jt['fault'] = {'kind': 'slow', 'culprits': [r], 'factor': f, 'onset_ns': tn(T),
                               'culprit_step_ends_ns': [tn(e) for e in ends if e <= D]}
            elif k in ('hang', 'crash'):
                r, T = fault[1], fault[2]
                jt['fault'] = {'kind': k, 'expect_kind': 'hang', 'culprits': [r], 'onset_ns': tn(T),
                               'first_wait_ns': tn(j.first_wait) if np.isfinite(j.first_wait) else None}
            elif k == 'commhang':
                fired = j.commhang_fired
                if fired is None:
                    raise SystemExit('comm hang did not fire')
                c, t, sq = fired
                jt['fault'] = {'kind': 'comm_hang', 'expect_kind': 'comm_hang', 'culprits': [],
                               'comm': j.comm_list[c][0], 'members': j.comm_list[c][2],
                               'seq': int(sq), 'onset_ns': tn(t)}
            elif k == 'exit':
                jt['fault'] = {'kind': 'exit', 'exit_ns': tn(float(j.exit_time.max()))}
        truth['jobs'].append(jt)
    lines.sort(key=lambda x: x[0])
    with open(outp, 'w') as f:
        for _, m in lines:
            f.write(json.dumps(m, separators=(',', ':')) + '\n')
    tp = outp[:-6] if outp.endswith('.cwcap') else outp
    with open(tp + '.truth.json', 'w') as f:
        json.dump(truth, f, indent=1)
    print(f'{scn}: {len(lines)} messages, ' + ', '.join(f"{x['job']} {x['records']} calls step {x['step_s_median']:.2f}s" for x in truth['jobs']))


if __name__ == '__main__':
    main()
