#!/usr/bin/env python3
"""Strict scorer for the fleet generator.

    score.py --out DIR TRUTH.json ALERTS.jsonl [TRUTH.json ALERTS.jsonl ...]

Prints a markdown table and writes DIR/results.md and DIR/results.json. Rules (README.md):
- hang: PASS iff the P0 incidents name exactly the culprits: one P0 incident of kind `hang` whose
  every P0 event names exactly the culprits, or (accept=split, several culprits) several P0 `hang`
  incidents each naming a disjoint non-empty subset of them, together all of them; first P0 at or
  after the onset (0.1 s clock tolerance); no incident of any kind or severity names a non-culprit.
- slow_rank: PASS iff `slow_rank` incidents at P1-P3 name the culprits alone (one naming exactly
  them, or with accept=split several naming subsets that together name them), opened at or after
  the onset; nothing reaches P0; no incident of any severity names a non-culprit (a P3 naming
  exactly one of the truth's `advisory_sets` excepted).
- healthy: FAIL on any P0/P1; P2/P3 are listed (and marked when they name a rank not `allowed`).
- structural: FAIL on any P0/P1, or on any incident naming a rank outside `allowed`.
- link: FAIL on any P0/P1 naming ranks, or on a P2/P3 naming a rank outside `allowed`.
- agent_lost: FAIL on a P0/P1 of a kind other than node_lost, or on any incident naming a rank
  outside `allowed`.
- restart: FAIL when an incident names a rank other than the crashed one, when one opens after the
  restart, or when one is still open at the end of the capture.
"""
import argparse
import json
import os
import sys
from collections import defaultdict

SEV = {'P0': 0, 'P1': 1, 'P2': 2, 'P3': 3}


def load_alerts(path):
    out = []
    if not os.path.exists(path):
        return out
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def incidents(alerts, job):
    inc = {}
    for a in alerts:
        if a.get('job') != job:
            continue
        i = inc.setdefault(a['incident'], dict(id=a['incident'], kind=a.get('kind'), events=[], sevs=set(),
                                               opened=a.get('opened_ns', a['ts_ns']), status=None, first_sev={}))
        i['events'].append(a)
        sev = a.get('severity', 'P3')
        i['sevs'].add(sev)
        i['first_sev'].setdefault(sev, a['ts_ns'])
        i['status'] = a.get('status')
        i['opened'] = min(i['opened'], a.get('opened_ns', a['ts_ns']))
    for i in inc.values():
        i['best'] = min(SEV.get(s, 3) for s in i['sevs'])
        i['named'] = set()
        for e in i['events']:
            i['named'] |= set(e.get('culprit_ranks') or [])
        i['sets'] = [frozenset(e.get('culprit_ranks') or []) for e in i['events']]
    return sorted(inc.values(), key=lambda i: (i['best'], i['opened']))


def fmt(i, onset_ns, t0_ns):
    names = sorted(i['named'])
    nm = ','.join(map(str, names[:10])) + (',..(%d)' % len(names) if len(names) > 10 else '')
    ref = onset_ns if onset_ns is not None else t0_ns
    return 'P%d %s [%s] %+.1fs%s' % (i['best'], i['kind'], nm, (i['opened'] - ref) / 1e9,
                                     ' res' if i['status'] == 'resolved' else '')


def score_job(t, alerts, truth):
    incs = incidents(alerts, t['job'])
    kind = t['kind']
    cul = set(t.get('culprits') or [])
    allowed = set(t.get('allowed') or [])
    adv = [set(x) for x in t.get('advisory_sets') or []]
    onset = t.get('onset_ns')
    tol = 100_000_000
    why = []
    verdict = 'PASS'
    delay = None
    notes = []
    if truth.get('gen_errors'):
        return 'GEN-ERR', None, ['; '.join(truth['gen_errors'][:3])], incs
    if kind == 'hang':
        p0 = [i for i in incs if 'P0' in i['sevs']]
        p0sets = []
        for i in p0:
            p0sets += [frozenset(e.get('culprit_ranks') or []) for e in i['events'] if e.get('severity') == 'P0']
        ok = False
        if not p0:
            why.append('no P0')
        elif len(p0) == 1 and p0[0]['kind'] == 'hang' and all(s == cul for s in p0sets):
            ok = True
        elif t.get('accept') == 'split' and all(i['kind'] == 'hang' for i in p0):
            per = []
            for i in p0:
                s = set().union(*[set(e.get('culprit_ranks') or []) for e in i['events'] if e.get('severity') == 'P0'])
                per.append(s)
            flat = [r for s in per for r in s]
            ok = all(s and s <= cul for s in per) and set(flat) == cul and len(flat) == len(set(flat))
            if not ok:
                why.append('P0s name %s' % [sorted(s) for s in per])
        else:
            why.append('%d P0 incidents (%s) naming %s' % (len(p0), ','.join(i['kind'] for i in p0),
                                                           sorted({r for s in p0sets for r in s})))
        if ok:
            first = min(i['first_sev']['P0'] for i in p0)
            delay = (first - onset) / 1e9
            if first < onset - tol:
                ok = False
                why.append('P0 %.1f s before the onset' % -delay)
        bad = set().union(*[i['named'] for i in incs]) - cul if incs else set()
        if bad:
            why.append('names non-culprit(s) %s' % sorted(bad)[:12])
            ok = False
        verdict = 'PASS' if ok else 'FAIL'
    elif kind == 'slow_rank':
        ok = True
        if any('P0' in i['sevs'] for i in incs):
            ok = False
            why.append('a P0')
        hits = [i for i in incs if i['kind'] == 'slow_rank' and i['best'] >= 1 and i['named'] and i['named'] <= cul]
        bad = set()
        for i in incs:
            extra = i['named'] - cul
            if extra:
                if i['best'] == 3 and any(i['named'] == a for a in adv):
                    notes.append('stage advisory %s' % sorted(i['named']))
                    continue
                bad |= extra
        if bad:
            ok = False
            why.append('names non-culprit(s) %s' % sorted(bad)[:12])
        exact = [i for i in hits if i['named'] == cul]
        named_union = set().union(*[i['named'] for i in hits]) if hits else set()
        if exact:
            first = min(i['opened'] for i in exact)
        elif t.get('accept') == 'split' and named_union == cul:
            first = max(min(i['opened'] for i in hits if r in i['named']) for r in cul)
        else:
            first = None
            ok = False
            why.append('culprits not named alone' if not hits else 'only %s named' % sorted(named_union))
        if first is not None:
            delay = (first - onset) / 1e9
            early = [i for i in hits if i['opened'] < onset - tol]
            if early:
                ok = False
                why.append('named %.1f s before the onset' % ((onset - min(i['opened'] for i in early)) / 1e9))
        verdict = 'PASS' if ok else 'FAIL'
    elif kind == 'healthy':
        hi = [i for i in incs if i['best'] <= 1]
        if hi:
            verdict = 'FAIL'
            why.append('P0/P1 on a healthy job')
        for i in incs:
            if i['best'] >= 2 and i['named'] - allowed:
                notes.append('P%d names %s' % (i['best'], sorted(i['named'] - allowed)[:8]))
    elif kind == 'structural':
        if any(i['best'] <= 1 for i in incs):
            verdict = 'FAIL'
            why.append('P0/P1 for a structural slowness')
        bad = set().union(*[i['named'] for i in incs]) - allowed if incs else set()
        if bad:
            verdict = 'FAIL'
            why.append('names rank(s) off the slow node %s' % sorted(bad)[:12])
        if any(i['named'] and i['named'] <= allowed for i in incs):
            notes.append('node named (acceptable)')
    elif kind == 'link':
        for i in incs:
            if i['best'] <= 1 and i['named']:
                verdict = 'FAIL'
                why.append('P%d %s names ranks' % (i['best'], i['kind']))
            elif i['named'] - allowed:
                verdict = 'FAIL'
                why.append('names rank(s) off the congested nodes %s' % sorted(i['named'] - allowed)[:12])
    elif kind == 'agent_lost':
        for i in incs:
            if i['best'] <= 1 and i['kind'] != 'node_lost':
                verdict = 'FAIL'
                why.append('P%d %s' % (i['best'], i['kind']))
            if i['named'] - allowed:
                verdict = 'FAIL'
                why.append('names rank(s) off the silent node %s' % sorted(i['named'] - allowed)[:12])
    elif kind == 'restart':
        rs = t0 = truth['capture_end_ns'] - int(truth['capture_end_s'] * 1e9)
        restart_ns = t0 + int(t['restart_s'] * 1e9)
        for i in incs:
            if i['named'] - cul:
                verdict = 'FAIL'
                why.append('names %s' % sorted(i['named'] - cul)[:12])
            if i['opened'] >= restart_ns:
                verdict = 'FAIL'
                why.append('%s opened after the restart' % i['kind'])
            if i['status'] != 'resolved':
                verdict = 'FAIL'
                why.append('%s still open at the end' % i['kind'])
        p0 = [i for i in incs if 'P0' in i['sevs'] and i['named'] == cul]
        if p0:
            delay = (min(i['first_sev']['P0'] for i in p0) - onset) / 1e9
            notes.append('crash named P0')
    else:
        verdict = 'INFO'
    nr = [i for i in incs if not i['named']]
    if nr:
        notes.append('%d incident(s) naming no rank (%s)' % (len(nr), ', '.join(sorted({'P%d %s' % (i['best'], i['kind']) for i in nr}))))
    return verdict, delay, why + notes, incs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('files', nargs='+')
    a = ap.parse_args()
    rows = []
    pairs = list(zip(a.files[0::2], a.files[1::2]))
    for tf, af in pairs:
        truth = json.load(open(tf))
        alerts = load_alerts(af)
        t0 = truth['capture_end_ns'] - int(truth['capture_end_s'] * 1e9)
        for t in truth['jobs']:
            verdict, delay, why, incs = score_job(t, alerts, truth)
            rep = [fmt(i, t.get('onset_ns'), t0) for i in incs]
            truth_s = t['kind']
            if t.get('culprits'):
                truth_s += ' %s' % t['culprits']
            if t.get('allowed') and t['kind'] != 'slow_rank':
                truth_s += ' (allowed %d-%d)' % (min(t['allowed']), max(t['allowed'])) if len(t['allowed']) > 1 else ' (allowed %s)' % t['allowed']
            rows.append(dict(scenario=truth['scenario'], job=t['job'], probe=t['probe'], ranks=t['ranks'], layout=t.get('layout'),
                             truth=truth_s, reported=rep, verdict=verdict, why=why,
                             delay_s=None if delay is None else round(delay, 2),
                             delay_it=None if delay is None or not t.get('iter_s') else round(delay / t['iter_s'], 2),
                             iter_s=t.get('iter_s')))
    hdr = '| scenario | job | probe | ranks | truth | reported (most severe first; time from onset) | verdict | delay s | delay it |'
    lines = [hdr, '|' + '---|' * 9]
    for r in rows:
        rep = '; '.join(r['reported'][:5]) + (' (+%d more)' % (len(r['reported']) - 5) if len(r['reported']) > 5 else '')
        v = r['verdict'] + (': ' + '; '.join(r['why']) if r['why'] else '')
        lines.append('| %s | %s | %s | %d | %s | %s | %s | %s | %s |' % (
            r['scenario'], r['job'], r['probe'], r['ranks'], r['truth'], rep or '-', v,
            '-' if r['delay_s'] is None else '%.2f' % r['delay_s'], '-' if r['delay_it'] is None else '%.2f' % r['delay_it']))
    tot = defaultdict(int)
    for r in rows:
        tot[r['verdict']] += 1
    lines.append('')
    lines.append('**totals**: %d job rows: ' % len(rows) + ', '.join('%s %d' % (k, v) for k, v in sorted(tot.items())))
    text = '\n'.join(lines)
    print(text)
    with open(os.path.join(a.out, 'results.md'), 'w') as fh:
        fh.write('# fleet results\n\n' + text + '\n')
    with open(os.path.join(a.out, 'results.json'), 'w') as fh:
        json.dump(dict(rows=rows, totals=dict(tot)), fh, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
