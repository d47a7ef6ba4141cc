#!/usr/bin/env python3
"""Validate edges/ captures against wire-v1 (section 1, 2.1-2.5, 4). Usage: check.py FILE.cwcap ..."""
import base64
import json
import sys
from collections import defaultdict

import numpy as np

sys.path.insert(0, __import__('os').path.dirname(__file__))
from gen import REC  # noqa: E402

COLL_OPS = {1, 2, 3, 4, 5, 8, 9, 10, 11}


def check(path):
    errs = []
    recs = []
    hb = 0
    topics = defaultdict(int)
    last_ts = -1
    for ln, line in enumerate(open(path), 1):
        m = json.loads(line)
        t = m['topic']
        topics[t] += 1
        if m['ts_ns'] < last_ts:
            errs.append(f'{ln}: not sorted')
        last_ts = m['ts_ns']
        if t == 'cw.calls.v1':
            raw = base64.b64decode(m['value_b64'])
            if raw[:4] != b'CWB1':
                errs.append(f'{ln}: magic')
            ver, rs = np.frombuffer(raw[4:8], '<u2')
            cnt, res = np.frombuffer(raw[8:16], '<u4')
            if ver != 1 or rs != 64 or res != 0 or len(raw) != 16 + 64 * cnt:
                errs.append(f'{ln}: header {ver} {rs} {cnt} {res} {len(raw)}')
            a = np.frombuffer(raw[16:], REC)
            job, comm = m['key'].split('/')
            if not (a['comm'] == int(comm, 16)).all():
                errs.append(f'{ln}: comm != key')
            recs.append((job, a))
        elif t == 'cw.progress.v1':
            v = m['value']
            hb += 1
            job, comm = m['key'].split('/')
            assert v['v'] == 1 and v['job'] == job and v['comm'] == comm and v['ts_ns'] == m['ts_ns'], line
            for r in v['ranks']:
                assert set(r) >= {'rank', 'started', 'completed', 't_last_start_ns', 't_last_end_ns'}, line
                assert r['completed'] <= r['started'] + 1, line
        elif t == 'cw.topology.v1':
            v = m['value']
            assert m['key'] == v['job'] and {'rank', 'world_size', 'node', 'local_rank', 'gpu'} <= set(v)
        elif t == 'cw.steps.v1':
            v = m['value']
            assert m['key'] == v['job'] and v['t_end_ns'] >= v['t_start_ns'], line
        elif t == 'cw.hw.v1':
            v = m['value']
            assert m['key'] == v['job']
        else:
            errs.append(f'{ln}: topic {t}')
    byjob = defaultdict(list)
    for j, a in recs:
        byjob[j].append(a)
    for j, L in byjob.items():
        a = np.concatenate(L)
        calls = a[a['kind'] == 1]
        if ((calls['flags'] & 1) == 1).any():
            c = calls[(calls['flags'] & 1) == 1]
            if (c['t_end_ns'] < c['t_start_ns']).any():
                errs.append(f'{j}: t_end < t_start')
        if (calls[(calls['flags'] & 1) == 0]['t_end_ns'] != 0).any():
            errs.append(f'{j}: open record with t_end')
        # per comm consistency
        ncomm = {}
        for c in np.unique(a['comm']):
            s = a[a['comm'] == c]
            if len(np.unique(s['nranks'])) != 1:
                errs.append(f'{j}: comm {c:x} nranks differ')
            if (s['comm_rank'] >= s['nranks']).any():
                errs.append(f'{j}: comm_rank >= nranks')
            # comm_rank <-> rank one to one
            pairs = set(zip(s['rank'].tolist(), s['comm_rank'].tolist()))
            if len({p[0] for p in pairs}) != len(pairs) or len({p[1] for p in pairs}) != len(pairs):
                errs.append(f'{j}: comm {c:x} rank/comm_rank not one to one')
            ncomm[c] = {p[1]: p[0] for p in pairs}
            cc = s[(s['kind'] == 1) & np.isin(s['op'], list(COLL_OPS))]
            # same (seq) -> same op/bytes
            key = {}
            for r in cc:
                k = int(r['seq'])
                v = (int(r['op']), int(r['bytes']))
                if key.setdefault(k, v) != v:
                    errs.append(f'{j}: comm {c:x} seq {k} op/bytes differ')
                    break
            # completion times of an instance nearly equal (within 60 ms incl. clock skew)
            done = cc[(cc['flags'] & 1) == 1]
            if len(done):
                order = np.argsort(done['seq'], kind='stable')
                sq = done['seq'][order]
                te = done['t_end_ns'][order]
                brk = np.flatnonzero(np.diff(sq)) + 1
                mx = np.maximum.reduceat(te, np.r_[0, brk])
                mn = np.minimum.reduceat(te, np.r_[0, brk])
                if ((mx - mn) > 60e6).any():
                    errs.append(f'{j}: comm {c:x} completion spread {(mx - mn).max() / 1e6:.1f} ms')
                # seq monotone in time per rank
            for r in np.unique(cc['rank']):
                x = cc[cc['rank'] == r]
                x = x[np.argsort(x['seq'], kind='stable')]
                if (np.diff(x['t_start_ns'].astype(np.int64)) < -1).any() and not (x['flags'] & 8).any():
                    errs.append(f'{j}: rank {r} comm {c:x} seq not time-ordered')
                    break
        # p2p pairing: send k a->b matches recv k on b from a
        p = a[(a['kind'] == 1) & np.isin(a['op'], [6, 7]) & ((a['flags'] & 1) == 1)]
        sends = {(int(r['comm']), int(r['comm_rank']), int(r['peer']), int(r['seq'])): r for r in p if r['op'] == 6}
        recvs = {(int(r['comm']), int(r['peer']), int(r['comm_rank']), int(r['seq'])): r for r in p if r['op'] == 7}
        both = set(sends) & set(recvs)
        bad = sum(1 for k in both if sends[k]['bytes'] != recvs[k]['bytes'])
        if bad:
            errs.append(f'{j}: {bad} p2p pairs with different bytes')
        if p.size and len(both) < 0.9 * min(len(sends), len(recvs)):
            errs.append(f'{j}: p2p pairing poor {len(both)} of {len(sends)}/{len(recvs)}')
        inits = a[a['kind'] == 2]
        if len(inits) and (inits['seq'] != 0).any():
            errs.append(f'{j}: COMM_INIT seq != 0')
    print(f'{path}: {dict(topics)} jobs={len(byjob)} {"OK" if not errs else ""}')
    for e in errs[:20]:
        print('  ERR', e)
    return not errs


if __name__ == '__main__':
    ok = all([check(f) for f in sys.argv[1:]])
    sys.exit(0 if ok else 1)
