#!/usr/bin/env python3
"""Strict scorer for the "realworld" captures.

    score.py [--out DIR] TRUTH.json ALERTS.jsonl [TRUTH.json ALERTS.jsonl ...]

Incidents are the JSON lines of `commwatch replay` (contract 2.6); events of one
`incident` id are folded into one incident (its most severe severity, every
culprit set it named, first opened_ns, resolution time).

Verdicts
  healthy   PASS iff no incident ever reached P0 or P1 (P2/P3 listed as "other").
  hang      PASS iff exactly one incident ever reached P0, it is kind "hang",
            every event of it at P0 names exactly the truth's culprit ranks, it
            opened at or after the onset, and no other incident at P1 names a
            rank outside the truth; when the truth expects it (the job exited),
            the P0 must resolve after the exit.
  slow_rank PASS iff a slow_rank incident names exactly the culprit, opened at or
            after the onset, no incident of any kind or severity names another
            rank (a victim), and nothing reached P0.
  info      not scored: what was reported is listed.
Delay: opened_ns - onset, in seconds and in iterations (the median iteration
time before the onset).
"""
import argparse
import json
import os
import sys

SEV = {'P0': 0, 'P1': 1, 'P2': 2, 'P3': 3}


def fold(alerts, job):
    inc = {}
    for a in alerts:
        if a.get('job') != job:
            continue
        i = inc.get(a['incident'])
        if i is None:
            i = inc[a['incident']] = {'id': a['incident'], 'kind': a['kind'], 'events': [],
                                      'opened_ns': a.get('opened_ns', a['ts_ns']), 'resolved_ns': None,
                                      'sev': 9, 'p0_ts': None, 'sets': []}
        i['events'].append(a)
        s = SEV.get(a['severity'], 9)
        i['sev'] = min(i['sev'], s)
        if s == 0 and i['p0_ts'] is None:
            i['p0_ts'] = a['ts_ns']
        cs = tuple(sorted(a.get('culprit_ranks') or []))
        if cs not in i['sets']:
            i['sets'].append(cs)
        if a['status'] == 'resolved' and i['resolved_ns'] is None:
            i['resolved_ns'] = a['ts_ns']
    for i in inc.values():
        i['named'] = sorted({r for cs in i['sets'] for r in cs})
        i['severity'] = 'P%d' % i['sev'] if i['sev'] < 9 else '?'
    return sorted(inc.values(), key=lambda x: x['opened_ns'])


def rel(ns, t):
    return None if ns is None else round((ns - t['_t0']) / 1e9, 2)


def short(i, t):
    sets = '/'.join('[' + ','.join(map(str, cs)) + ']' for cs in i['sets']) or '[]'
    r = ' res@%.1fs' % rel(i['resolved_ns'], t) if i['resolved_ns'] else ''
    return '%s %s %s @%.1fs%s' % (i['kind'], i['severity'], sets, rel(i['opened_ns'], t), r)


def score_one(t, alerts):
    t['_t0'] = 1_767_225_600_000_000_000
    incs = fold(alerts, t['job'])
    truth = set(t['culprits'])
    onset = t.get('onset_ns')
    it_s = t.get('iter_s') or None
    res = {'scenario': t['scenario'], 'kind': t['kind'], 'probe': t['probe'], 'ranks': t['ranks'],
           'culprits': t['culprits'], 'onset_s': rel(onset, t), 'iter_s': it_s,
           'incidents': [short(i, t) for i in incs], 'delay_s': None, 'delay_it': None, 'notes': []}
    high = [i for i in incs if i['sev'] <= 1]
    other = [i for i in incs if i['sev'] >= 2]
    res['other'] = [short(i, t) for i in other]
    res['other_naming_non_culprits'] = sum(1 for i in other if set(i['named']) - truth)
    k = t['kind']
    verdict = 'FAIL'
    if k == 'info':
        verdict = 'INFO'
    elif k == 'healthy':
        if high:
            res['notes'].append('%d incident(s) at P0/P1 on a control' % len(high))
        else:
            verdict = 'PASS'
    elif k == 'hang':
        p0 = [i for i in incs if i['sev'] == 0]
        if len(p0) != 1:
            res['notes'].append('%d incidents at P0 (want exactly 1)' % len(p0))
        if p0:
            m = p0[0]
            p0sets = {tuple(sorted(e.get('culprit_ranks') or [])) for e in m['events'] if e['severity'] == 'P0'}
            res['delay_s'] = round((m['opened_ns'] - onset) / 1e9, 2)
            if m['p0_ts'] != m['opened_ns']:
                res['notes'].append('opened at %s, P0 at +%.2fs' % (m['severity'], (m['p0_ts'] - onset) / 1e9))
            ok = len(p0) == 1
            if m['kind'] != 'hang':
                ok = False
                res['notes'].append('P0 kind %s' % m['kind'])
            if p0sets != {tuple(sorted(truth))}:
                ok = False
                res['notes'].append('P0 names %s, truth %s' % (sorted(p0sets), sorted(truth)))
            if m['opened_ns'] < onset:
                ok = False
                res['notes'].append('opened before the onset')
            p1bad = [i for i in incs if i['sev'] == 1 and set(i['named']) - truth]
            if p1bad:
                if ok and m['kind'] == 'hang' and p0sets == {tuple(sorted(truth))} and m['opened_ns'] >= onset:
                    res['notes'].append('the hang itself is named right')
                ok = False
                res['notes'].append('P1 naming non-culprits: ' + '; '.join(short(i, t) for i in p1bad))
            if t.get('expect_resolved'):
                if m['resolved_ns'] is None:
                    ok = False
                    res['notes'].append('P0 never resolved after the job exited')
                elif m['resolved_ns'] < t['exit_ns']:
                    res['notes'].append('resolved before the exit')
                else:
                    res['notes'].append('resolved %.1fs after the exit' % ((m['resolved_ns'] - t['exit_ns']) / 1e9))
            if ok:
                verdict = 'PASS'
    elif k == 'slow_rank':
        hit = [i for i in incs if i['kind'] == 'slow_rank' and tuple(sorted(truth)) in i['sets']]
        victims = [i for i in incs if set(i['named']) - truth]
        p0 = [i for i in incs if i['sev'] == 0]
        ok = bool(hit) and not victims and not p0
        if hit:
            h = hit[0]
            res['delay_s'] = round((h['opened_ns'] - onset) / 1e9, 2)
            if h['opened_ns'] < onset:
                ok = False
                res['notes'].append('named before the onset')
        else:
            res['notes'].append('culprit never named alone in a slow_rank incident')
        if victims:
            res['notes'].append('%d incident(s) name a victim/non-culprit: %s' % (
                len(victims), '; '.join(short(i, t) for i in victims[:4]) + (' ...' if len(victims) > 4 else '')))
        if p0:
            res['notes'].append('%d P0' % len(p0))
        if ok:
            verdict = 'PASS'
    if res['delay_s'] is not None and it_s:
        res['delay_it'] = round(res['delay_s'] / it_s, 2)
    res['verdict'] = verdict
    shown = sorted(incs, key=lambda i: (i['sev'], i['opened_ns']))   # P0/P1 first, then by time
    res['reported'] = '; '.join(short(i, t) for i in shown[:4]) + (
        ' (+%d more)' % (len(shown) - 4) if len(shown) > 4 else '') if incs else 'nothing'
    return res


def table(results):
    out = ['| scenario | probe | ranks | truth | reported (most severe first, up to 4) | verdict | delay s | delay it | other P2/P3 |',
           '|---|---|---|---|---|---|---|---|---|']
    for r in results:
        tr = r['kind'] if not r['culprits'] else '%s %s @%ss' % (r['kind'], r['culprits'], r['onset_s'])
        oth = str(len(r['other'])) + (' (%d name non-culprits)' % r['other_naming_non_culprits']
                                       if r['other_naming_non_culprits'] else '')
        note = (' — ' + '; '.join(r['notes'])) if r['notes'] else ''
        out.append('| %s | %s | %d | %s | %s | **%s**%s | %s | %s | %s |' % (
            r['scenario'], r['probe'], r['ranks'], tr, r['reported'].replace('|', '/'), r['verdict'], note,
            '' if r['delay_s'] is None else r['delay_s'], '' if r['delay_it'] is None else r['delay_it'], oth))
    n = {}
    for r in results:
        n[r['verdict']] = n.get(r['verdict'], 0) + 1
    out.append('')
    out.append('Totals: ' + ', '.join('%s %d' % kv for kv in sorted(n.items())))
    return '\n'.join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument('files', nargs='+')
    a = ap.parse_args()
    if len(a.files) % 2:
        ap.error('give TRUTH.json ALERTS.jsonl pairs')
    results = []
    for tf, af in zip(a.files[::2], a.files[1::2]):
        t = json.load(open(tf))
        alerts = [json.loads(l) for l in open(af) if l.strip()]
        r = score_one(t, alerts)
        r['generator_errors'] = t.get('generator', {}).get('errors', [])
        if r['generator_errors']:          # a capture that failed its own checks proves nothing
            r['verdict'] = 'GEN-ERR'
            r['notes'].insert(0, 'generator checks failed: ' + '; '.join(r['generator_errors']))
        results.append(r)
    md = table(results)
    print(md)
    with open(os.path.join(a.out, 'results.md'), 'w') as fh:
        fh.write(md + '\n')
    with open(os.path.join(a.out, 'results.json'), 'w') as fh:
        json.dump(results, fh, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
