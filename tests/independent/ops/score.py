#!/usr/bin/env python3
"""Strict scorer for the "ops" captures.

    score.py [--out DIR] TRUTH.json ALERTS.jsonl [TRUTH.json ALERTS.jsonl ...]

The events of one `incident` id are folded (most severe severity, every culprit set
named, first opened_ns, first resolution).

healthy    PASS iff no incident reaches P0 or P1 (P2/P3 are listed as notes).
hang       PASS iff exactly one incident ever reaches P0; it is kind `hang`; every P0
           event names exactly the truth's culprits; it opened at or after the onset;
           no other incident at P0/P1 names a rank outside the culprits (ranks of
           `also`, a second real culprit of the named kind, excepted).
slow_rank  PASS iff a `slow_rank` incident names exactly the culprit, opened at or after
           the onset; no incident of any kind or severity names another rank; no P0.
           With `recover_ns`: that incident must also resolve, and no incident may open
           later than recover + 2 s.
slow_seq   several culprits one after another: each must be named alone in a slow_rank
           incident opened inside its own slow window (>= its onset, < its end); no
           incident names a non-culprit; no P0.
info       not scored.
A truth whose generator checks failed is GEN-ERR.
Delay = opened_ns - onset, in seconds and iterations (median iteration before onset).
"""
import argparse
import json
import os
import sys

SEV = {'P0': 0, 'P1': 1, 'P2': 2, 'P3': 3}


def fold(alerts, job):
    out = {}
    for a in alerts:
        if a.get('job') != job:
            continue
        i = out.setdefault(a['incident'], dict(id=a['incident'], kind=a['kind'], sev=9, sets=[], ev=[],
                                               opened=a.get('opened_ns', a['ts_ns']), resolved=None))
        i['ev'].append(a)
        i['sev'] = min(i['sev'], SEV.get(a.get('severity'), 9))
        cs = tuple(sorted(a.get('culprit_ranks') or []))
        if cs not in i['sets']:
            i['sets'].append(cs)
        if a.get('status') == 'resolved' and i['resolved'] is None:
            i['resolved'] = a['ts_ns']
    for i in out.values():
        i['named'] = {r for cs in i['sets'] for r in cs}
        i['nodes'] = sorted({n for e in i['ev'] for n in (e.get('culprit_nodes') or [])})
    return sorted(out.values(), key=lambda i: i['opened'])


def desc(i, t0):
    sets = '/'.join('[' + ','.join(map(str, s)) + ']' for s in i['sets'])
    nodes = (' nodes ' + ','.join(i['nodes'])) if (i['nodes'] and not any(i['sets'][0:1]) or i['kind'] == 'slow_link') else ''
    res = ' res@%.1fs' % ((i['resolved'] - t0) / 1e9) if i['resolved'] else ''
    return '%s P%s %s%s @%.1fs%s' % (i['kind'], i['sev'] if i['sev'] < 9 else '?', sets, nodes, (i['opened'] - t0) / 1e9, res)


def score(t, alerts):
    t0 = t['t0_ns']
    incs = fold(alerts, t['job'])
    cul = set(t['culprits'])
    onset = t.get('onset_ns')
    r = dict(scenario=t['scenario'], kind=t['kind'], probe=t['probe'], ranks=t['ranks'], culprits=t['culprits'],
             onset_s=None if onset is None else round((onset - t0) / 1e9, 2), iter_s=t.get('iter_s'),
             notes=[], delay_s=None, delay_it=None, desc=t.get('desc', ''))
    r['incidents'] = [desc(i, t0) for i in incs]
    hi = [i for i in incs if i['sev'] <= 1]
    lo = [i for i in incs if i['sev'] >= 2]
    k = t['kind']
    ok = False
    if k == 'info':
        v = 'INFO'
    elif k == 'healthy':
        ok = not hi
        if hi:
            r['notes'].append('%d P0/P1 on a healthy job' % len(hi))
        if lo:
            r['notes'].append('P2/P3 (note): ' + '; '.join(desc(i, t0) for i in lo[:3]))
    elif k == 'hang':
        also = {x for v in (t.get('also') or {}).values() for x in v}
        also_kinds = set((t.get('also') or {}).keys())
        p0 = [i for i in incs if i['sev'] == 0]
        ok = len(p0) == 1
        if len(p0) != 1:
            r['notes'].append('%d incidents at P0 (want 1)' % len(p0))
        if p0:
            m = p0[0]
            sets = {tuple(sorted(e.get('culprit_ranks') or [])) for e in m['ev'] if e.get('severity') == 'P0'}
            r['delay_s'] = round((m['opened'] - onset) / 1e9, 2)
            if m['kind'] != 'hang':
                ok = False
                r['notes'].append('P0 is %s' % m['kind'])
            if sets != {tuple(sorted(cul))}:
                ok = False
                r['notes'].append('P0 names %s, truth %s' % (sorted(sets), sorted(cul)))
            if m['opened'] < onset:
                ok = False
                r['notes'].append('P0 opened %.1fs before the onset' % ((onset - m['opened']) / 1e9))
        bad = [i for i in hi if i not in p0[:1] and (i['named'] - cul) and
               not (i['kind'] in also_kinds and i['named'] <= also and i['sev'] >= 1)]
        if bad:
            ok = False
            r['notes'].append('P0/P1 naming non-culprits: ' + '; '.join(desc(i, t0) for i in bad[:3]))
        if also:
            seen = [i for i in incs if i['kind'] in also_kinds and i['named'] == also]
            r['notes'].append('the other culprit %s %s' % (sorted(also), 'named: ' + desc(seen[0], t0) if seen else 'not named'))
    elif k in ('slow_rank', 'slow_seq'):
        windows = t['seq'] if k == 'slow_seq' else [dict(culprits=t['culprits'], onset_ns=onset, end_ns=None)]
        ok = True
        delays = []
        for w in windows:
            want = tuple(sorted(w['culprits']))
            hits = [i for i in incs if i['kind'] == 'slow_rank' and want in i['sets']]
            inwin = [i for i in hits if i['opened'] >= w['onset_ns'] and (w['end_ns'] is None or i['opened'] < w['end_ns'])]
            if not inwin:
                ok = False
                r['notes'].append('%s never named alone in a slow_rank incident inside its window%s' % (
                    list(want), (' (named at %s)' % ', '.join('%.1fs' % ((i['opened'] - t0) / 1e9) for i in hits)) if hits else ''))
            else:
                h = inwin[0]
                delays.append((h['opened'] - w['onset_ns']) / 1e9)
                if t.get('recover_ns'):
                    if h['resolved'] is None:
                        ok = False
                        r['notes'].append('never resolved after the recovery')
                    else:
                        r['notes'].append('resolved %.1fs after the recovery' % ((h['resolved'] - t['recover_ns']) / 1e9))
        if delays:
            r['delay_s'] = round(delays[0], 2)
            if len(delays) > 1:
                r['notes'].append('delays %s s' % ', '.join('%.2f' % d for d in delays))
        vict = [i for i in incs if i['named'] - cul]
        if vict:
            ok = False
            r['notes'].append('%d incident(s) name a non-culprit: %s' % (len(vict), '; '.join(desc(i, t0) for i in vict[:3])))
        p0 = [i for i in incs if i['sev'] == 0]
        if p0:
            ok = False
            r['notes'].append('%d P0' % len(p0))
        if t.get('recover_ns'):
            late = [i for i in incs if i['opened'] > t['recover_ns'] + 2e9]
            if late:
                ok = False
                r['notes'].append('opened after the recovery: ' + '; '.join(desc(i, t0) for i in late[:3]))
    if k != 'info':
        v = 'PASS' if ok else 'FAIL'
    if t.get('generator', {}).get('errors'):
        v = 'GEN-ERR'
        r['notes'].insert(0, 'generator checks failed: ' + '; '.join(t['generator']['errors']))
    if r['delay_s'] is not None and r['iter_s']:
        r['delay_it'] = round(r['delay_s'] / r['iter_s'], 2)
    r['verdict'] = v
    shown = sorted(incs, key=lambda i: (i['sev'], i['opened']))
    r['reported'] = ('; '.join(desc(i, t0) for i in shown[:4]) + (' (+%d more)' % (len(shown) - 4) if len(shown) > 4 else '')) if incs else 'nothing'
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument('files', nargs='+')
    a = ap.parse_args()
    if len(a.files) % 2:
        ap.error('TRUTH ALERTS pairs')
    res = []
    for tf, af in zip(a.files[::2], a.files[1::2]):
        t = json.load(open(tf))
        al = [json.loads(x) for x in open(af) if x.strip()]
        res.append(score(t, al))
    lines = ['| scenario | probe | ranks | truth | reported (most severe first) | verdict | delay s | delay it |',
             '|---|---|---|---|---|---|---|---|']
    for r in res:
        tr = r['kind'] + (' %s' % r['culprits'] if r['culprits'] else '') + (' @%ss' % r['onset_s'] if r['onset_s'] is not None else '')
        note = (' — ' + '; '.join(r['notes'])) if r['notes'] else ''
        lines.append('| %s | %s | %d | %s | %s | **%s**%s | %s | %s |' % (
            r['scenario'], r['probe'], r['ranks'], tr, r['reported'].replace('|', '/'), r['verdict'], note.replace('|', '/'),
            '' if r['delay_s'] is None else r['delay_s'], '' if r['delay_it'] is None else r['delay_it']))
    tot = {}
    for r in res:
        tot[r['verdict']] = tot.get(r['verdict'], 0) + 1
    lines += ['', 'Totals: ' + ', '.join('%s %d' % kv for kv in sorted(tot.items()))]
    md = '\n'.join(lines)
    print(md)
    with open(os.path.join(a.out, 'results.md'), 'w') as fh:
        fh.write(md + '\n')
    with open(os.path.join(a.out, 'results.json'), 'w') as fh:
        json.dump(res, fh, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
