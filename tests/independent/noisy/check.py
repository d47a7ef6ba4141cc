#!/usr/bin/env python3
"""Check .cwcap captures against wire-v1 (written from the spec alone).

    python check.py FILE.cwcap [...]      prints OK / the errors per file; exit 1 if any fails

What is checked:
  lines: JSON with topic, key, int ts_ns, exactly one of value / value_b64; known topics.
  cw.calls.v1: key job/16-hex comm; header CWB1, version 1, record size 64, count = payload,
    reserved 0, 1 <= count <= 4096; every record's comm = the key's; one node per batch
    (a node agent's batch); kind 1-3; op 1-11 for CALL, 0 otherwise; flags < 32; GPU_TIMED and
    ENQUEUED not both; COMPLETED <=> t_end != 0; COMPLETION_LOST => not COMPLETED; t_end >= t_start;
    rank < world_size; 0 <= comm_rank < nranks; SEND/RECV peer a valid other comm rank; other
    collectives peer -1 except rooted ones (root in range); COMM_INIT seq 0 and 1 <= aux <= nranks;
    the message produced at or after every time its records report (same host clock).
  per communicator: nranks and rank <-> comm_rank consistent; the same (comm, seq) has the same op,
    bytes on every member; each rank's collective seqs start at 0, are contiguous and entered in
    order; a SEND k a->b and RECV k on b from a carry the same bytes; a collective instance
    completes on no member before the last member's entry (50 ms clock tolerance); a completed
    record is never followed by an open one of the same call; ENQUEUED: no call completes while an
    earlier-enqueued call of the same rank stays open (the device runs a stream in order).
  cw.progress.v1: v 1, job/key/comm agree, node = the ranks' placement, -1 <= completed <= started,
    both non-decreasing per (node, comm, rank); consecutive heartbeats <= 1.5 s apart.
  cw.topology.v1: one placement per rank and incarnation, local_rank unique per node and time.
  cw.steps.v1: t_end > t_start, phases >= 0 and summing to the duration (1 ms), iterations
    increasing per rank (a restart may go back to its checkpoint's iteration once).
"""
import base64, json, sys
from collections import defaultdict
import numpy as np

REC = np.dtype([('kind', 'u1'), ('op', 'u1'), ('flags', '<u2'), ('rank', '<i4'), ('comm', '<u8'),
                ('seq', '<u8'), ('t_start_ns', '<i8'), ('t_end_ns', '<i8'), ('bytes', '<u8'),
                ('comm_rank', '<i4'), ('peer', '<i4'), ('nranks', '<u4'), ('aux', '<u4')])
TOPICS = {'cw.calls.v1', 'cw.progress.v1', 'cw.topology.v1', 'cw.steps.v1', 'cw.hw.v1', 'cw.alerts.v1'}
SEND, RECV = 6, 7
ROOTED = {4, 5, 10, 11}
TOL = 50_000_000


def check(path, maxerr=20):
    errs = []

    def err(m):
        if len(errs) < maxerr:
            errs.append(m)
        elif len(errs) == maxerr:
            errs.append('... more')

    msgs = []
    with open(path) as f:
        for i, line in enumerate(f):
            try:
                d = json.loads(line)
            except Exception as e:
                err('line %d: not JSON (%s)' % (i + 1, e)); continue
            if not isinstance(d, dict) or d.get('topic') not in TOPICS or not isinstance(d.get('key'), str) \
                    or not isinstance(d.get('ts_ns'), int) or (('value' in d) == ('value_b64' in d)):
                err('line %d: bad envelope' % (i + 1)); continue
            msgs.append((d['ts_ns'], i, d))
    msgs.sort(key=lambda x: (x[0], x[1]))
    topo = defaultdict(set)     # (job, rank) -> nodes
    world = {}
    seen_lr = {}
    for ts, i, d in msgs:
        if d['topic'] != 'cw.topology.v1':
            continue
        v = d['value']
        job = v.get('job')
        if v.get('v') != 1 or job != d['key'] or not isinstance(v.get('rank'), int) or not isinstance(v.get('world_size'), int):
            err('line %d: bad topology' % (i + 1)); continue
        if not 0 <= v['rank'] < v['world_size']:
            err('line %d: rank outside world' % (i + 1))
        world[job] = max(world.get(job, 0), v['world_size'])
        topo[(job, v['rank'])].add(v['node'])
        k = (job, v['node'], v['local_rank'], v['ts_ns'] // 10**9)
        if k in seen_lr and seen_lr[k] != v['rank']:
            err('line %d: local_rank %s used twice on %s' % (i + 1, v['local_rank'], v['node']))
        seen_lr[k] = v['rank']
    batches = []
    for ts, i, d in msgs:
        if d['topic'] != 'cw.calls.v1':
            continue
        job, _, ch = d['key'].rpartition('/')
        try:
            raw = base64.b64decode(d['value_b64'], validate=True)
        except Exception:
            err('line %d: bad base64' % (i + 1)); continue
        if len(raw) < 16 or raw[:4] != b'CWB1':
            err('line %d: bad magic' % (i + 1)); continue
        ver, size = np.frombuffer(raw[4:8], '<u2')
        cnt, resv = np.frombuffer(raw[8:16], '<u4')
        if ver != 1 or size != 64 or resv != 0 or cnt != (len(raw) - 16) // 64 or (len(raw) - 16) % 64 or not 1 <= cnt <= 4096:
            err('line %d: bad header (ver %d size %d count %d len %d)' % (i + 1, ver, size, cnt, len(raw))); continue
        r = np.frombuffer(raw[16:], REC)
        if len(ch) != 16 or any(c not in '0123456789abcdef' for c in ch) or (r['comm'] != np.uint64(int(ch, 16))).any():
            err('line %d: record comm differs from key %s' % (i + 1, d['key']))
        nodes = set()
        for rk in np.unique(r['rank']):
            nodes |= topo.get((job, int(rk)), {'?'})
        if len(nodes) > 1 and not all(len(topo.get((job, int(rk)), ())) > 1 for rk in np.unique(r['rank'])):
            err('line %d: batch mixes nodes %s' % (i + 1, sorted(nodes)))
        batches.append((job, ts, i, r))
    if not batches:
        return errs
    jobs = sorted({b[0] for b in batches})
    for job in jobs:
        parts = [b for b in batches if b[0] == job]
        R = np.concatenate([b[3] for b in parts])
        mts = np.concatenate([np.full(len(b[3]), b[1], np.int64) for b in parts])
        order_in = np.arange(R.size)
        W = world.get(job, 0)
        k, op, fl = R['kind'], R['op'], R['flags']
        call = k == 1
        bad = lambda m, txt: err('%s: %d records %s (first rank %d comm %016x seq %d)' % (
            job, int(m.sum()), txt, int(R['rank'][m][0]), int(R['comm'][m][0]), int(R['seq'][m][0]))) if m.any() else None
        bad(~np.isin(k, [1, 2, 3]), 'with bad kind')
        bad(call & ~((op >= 1) & (op <= 11)), 'CALL with bad op')
        bad(~call & (op != 0), 'non-CALL with op')
        bad(fl >= 32, 'unknown flag bits')
        bad(((fl & 2) != 0) & ((fl & 8) != 0), 'both GPU_TIMED and ENQUEUED')
        done = (fl & 1) != 0
        bad(done != (R['t_end_ns'] != 0), 'COMPLETED disagrees with t_end')
        bad(done & ((fl & 16) != 0), 'COMPLETED and COMPLETION_LOST')
        bad(done & (R['t_end_ns'] < R['t_start_ns']), 'ending before they start')
        bad((R['rank'] < 0) | (R['rank'] >= W), 'rank outside the world')
        bad((R['nranks'] < 1) | (R['comm_rank'] < 0) | (R['comm_rank'] >= R['nranks'].astype(np.int64)), 'bad comm_rank/nranks')
        p2p = call & ((op == SEND) | (op == RECV))
        bad(p2p & ((R['peer'] < 0) | (R['peer'] >= R['nranks'].astype(np.int64)) | (R['peer'] == R['comm_rank'])), 'bad p2p peer')
        rooted = call & np.isin(op, list(ROOTED))
        bad(call & ~p2p & ~rooted & (R['peer'] != -1), 'collective with a peer')
        bad(rooted & ((R['peer'] < 0) | (R['peer'] >= R['nranks'].astype(np.int64))), 'rooted with bad root')
        bad(~call & (R['peer'] != -1), 'INIT/DESTROY with a peer')
        bad((k == 2) & ((R['seq'] != 0) | (R['aux'] < 1) | (R['aux'] > R['nranks'])), 'COMM_INIT with bad seq/aux')
        bad((k == 3) & (R['aux'] != 0), 'COMM_DESTROY with aux')
        bad(mts < R['t_start_ns'], 'sent before they started')
        bad(done & (mts < R['t_end_ns']), 'sent before they completed')
        # per comm consistency
        cm = R['comm']
        for c in np.unique(cm):
            s = cm == c
            nr = np.unique(R['nranks'][s])
            if nr.size != 1:
                err('%s comm %016x: nranks %s' % (job, int(c), nr.tolist())); continue
            pairs = np.unique(np.stack([R['rank'][s], R['comm_rank'][s]], 1), axis=0)
            if np.unique(pairs[:, 0]).size != pairs.shape[0] or np.unique(pairs[:, 1]).size != pairs.shape[0]:
                err('%s comm %016x: rank<->comm_rank inconsistent' % (job, int(c)))
            cr2r = {int(b): int(a) for a, b in pairs}
            sc = s & call & ~p2p
            if sc.any():
                idx = np.nonzero(sc)[0]
                inst = defaultdict(list)
                for j in idx:
                    inst[int(R['seq'][j])].append(j)
                for sq, js in inst.items():
                    ops = {(int(R['op'][j]), int(R['bytes'][j])) for j in js}
                    if len(ops) > 1:
                        err('%s comm %016x seq %d: members disagree on op/bytes %s' % (job, int(c), sq, sorted(ops)))
                    last = {}
                    for j in js:
                        last[int(R['rank'][j])] = j if int(R['rank'][j]) not in last or mts[j] >= mts[last[int(R['rank'][j])]] else last[int(R['rank'][j])]
                    starts = [int(R['t_start_ns'][j]) for j in js]
                    ends = [int(R['t_end_ns'][j]) for j in last.values() if R['flags'][j] & 1]
                    if ends and len(set(R['rank'][js].tolist())) == int(nr[0]) and min(ends) + TOL < max(starts):
                        err('%s comm %016x seq %d: completed before the last member entered' % (job, int(c), sq))
                # per-rank seq contiguity and order
                for rk in np.unique(R['rank'][sc]):
                    m = sc & (R['rank'] == rk)
                    sq = R['seq'][m].astype(np.int64)
                    st = R['t_start_ns'][m]
                    u, first = np.unique(sq, return_index=True)
                    if u[0] != 0 or (np.diff(u) != 1).any():
                        err('%s comm %016x rank %d: seqs not contiguous from 0' % (job, int(c), rk))
                    if (np.diff(st[first]) < 0).any():
                        err('%s comm %016x rank %d: seqs entered out of order' % (job, int(c), rk))
            sp = s & p2p
            if sp.any():
                key = {}
                for j in np.nonzero(sp)[0]:
                    me = int(R['comm_rank'][j]); pe = int(R['peer'][j])
                    a, b = (me, pe) if R['op'][j] == SEND else (pe, me)
                    kk = (a, b, int(R['seq'][j]), int(R['op'][j]))
                    key[kk] = int(R['bytes'][j])
                for (a, b, sq, o), by in key.items():
                    other = key.get((a, b, sq, RECV if o == SEND else SEND))
                    if other is not None and other != by:
                        err('%s comm %016x: send/recv %d->%d #%d bytes differ' % (job, int(c), a, b, sq))
        # versions: a completed record never followed by an open one
        order = np.lexsort((order_in, mts))
        state = {}
        for j in order[call[order]]:
            kk = (int(R['rank'][j]), int(R['comm'][j]), int(R['seq'][j]), int(R['op'][j]) if p2p[j] else 0,
                  int(R['peer'][j]) if p2p[j] else 0)
            dj = bool(fl[j] & 17)
            if state.get(kk) and not dj:
                err('%s: rank %d comm %016x seq %d reopened after completion' % (job, kk[0], kk[1], kk[2])); break
            state[kk] = state.get(kk, False) or dj
        # ENQUEUED: in-order completion per rank
        enq = call & ((fl & 8) != 0)
        if enq.any():
            latest = {}
            for j in order[enq[order]]:
                kk = (int(R['rank'][j]), int(R['comm'][j]), int(R['seq'][j]), int(R['op'][j]) if p2p[j] else 0,
                      int(R['peer'][j]) if p2p[j] else 0)
                latest[kk] = j
            byrank = defaultdict(list)
            for kk, j in latest.items():
                byrank[kk[0]].append(j)
            for rk, js in byrank.items():
                js = sorted(js, key=lambda j: int(R['t_start_ns'][j]))
                open_seen = False
                for j in js:
                    if fl[j] & 16:
                        continue
                    if not fl[j] & 1:
                        open_seen = True
                    elif open_seen:
                        err('%s rank %d: ENQUEUED call completed behind an older open call' % (job, rk)); break
    # progress
    hb = {}
    prev_vals = {}
    for ts, i, d in msgs:
        t = d['topic']
        if t == 'cw.progress.v1':
            v = d['value']
            job, _, ch = d['key'].rpartition('/')
            if v.get('v') != 1 or v.get('job') != job or v.get('comm') != ch or v.get('ts_ns') != ts or not isinstance(v.get('ranks'), list):
                err('line %d: bad progress envelope' % (i + 1)); continue
            kk = (job, v['node'], ch)
            if kk in hb and ts - hb[kk] > 1_500_000_000 and ts - hb[kk] < 5_000_000_000:
                err('line %d: heartbeat gap %.2f s on %s' % (i + 1, (ts - hb[kk]) / 1e9, kk))
            hb[kk] = ts
            for rr in v['ranks']:
                if v['node'] not in topo.get((job, rr.get('rank')), ()):
                    err('line %d: rank %s not on %s' % (i + 1, rr.get('rank'), v['node']))
                st, co = rr.get('started'), rr.get('completed')
                if not (isinstance(st, int) and isinstance(co, int) and -1 <= co <= st):
                    err('line %d: bad started/completed %s/%s' % (i + 1, st, co)); continue
                pk = kk + (rr['rank'],)
                if pk in prev_vals and (st < prev_vals[pk][0] or co < prev_vals[pk][1]):
                    err('line %d: progress went back for rank %s' % (i + 1, rr['rank']))
                prev_vals[pk] = (st, co)
                for p in rr.get('p2p', []):
                    if p.get('op') not in ('send', 'recv') or not -1 <= p.get('completed', -2) <= p.get('started', -2):
                        err('line %d: bad p2p progress' % (i + 1))
        elif t == 'cw.steps.v1':
            v = d['value']
            if v.get('v') != 1 or v.get('job') != d['key']:
                err('line %d: bad steps envelope' % (i + 1)); continue
            dur = v['t_end_ns'] - v['t_start_ns']
            ph = v.get('phases', {})
            if dur <= 0 or any(x < 0 for x in ph.values()) or (ph and abs(sum(ph.values()) * 1e6 - dur) > 1e6):
                err('line %d: bad step timing' % (i + 1))
    return errs


def main():
    bad = 0
    for p in sys.argv[1:]:
        e = check(p)
        print('%-60s %s' % (p, 'OK' if not e else 'FAIL'))
        for x in e:
            print('   ', x)
        bad += bool(e)
    sys.exit(1 if bad else 0)


if __name__ == '__main__':
    main()
