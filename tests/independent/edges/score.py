#!/usr/bin/env python3
"""Strict scorer for edges/: score.py --out HERE truth1 alerts1 truth2 alerts2 ...

Rules (one row per job of each capture):
- hang (hang, teardown_hang, p2p_deadlock): PASS only with exactly one P0 naming exactly the
  culprit set. A p2p deadlock: a P0 naming one of the pair, or a comm_hang on the pair's comm
  naming no rank, is PARTIAL. Several P0s within the culprits: PARTIAL. A P1 naming the culprits
  and no P0: PARTIAL. Nothing: FAIL.
- slow_rank / slow_comm_rank: PASS when the culprits (all of them, nothing else) are named by
  slow_rank / slow_link (hw_fault too where the truth says hw_ok) incidents of P1-P3 opened after
  onset; a strict subset: PARTIAL; none: FAIL; a P0: FAIL.
- slow_link: PASS with a slow_link / hw_fault incident naming ranks within the allowed set (or
  only the node); a slow_rank naming only allowed ranks: PARTIAL; nothing: FAIL.
- control: nothing, or only tolerated advisories (P2/P3 naming exactly the truth's advisory_ok
  set): PASS; other P2/P3: PARTIAL; P0/P1: FAIL.
- noisy (GC pauses): no P0/P1 and nothing but the culprit named: PASS.
- info: reported, not judged (INFO) unless a P0/P1 or a rank outside the culprits is named (FAIL).
- Everywhere: an incident naming a rank outside the allowed set (a victim), other than a
  tolerated advisory, is FAIL; so is a P0/P1 opened before onset.
"""
import argparse
import json
import os
from collections import defaultdict

SEV = {'P0': 0, 'P1': 1, 'P2': 2, 'P3': 3}


def load_alerts(path):
    inc = {}
    if not os.path.exists(path):
        return inc
    for line in open(path):
        line = line.strip()
        if not line.startswith('{'):
            continue
        try:
            e = json.loads(line)
        except ValueError:
            continue
        k = (e.get('job'), e.get('incident'))
        x = inc.get(k)
        if x is None:
            x = inc[k] = {'job': e.get('job'), 'id': e.get('incident'), 'kind': e.get('kind'),
                          'sev': 9, 'culprits': set(), 'nodes': set(), 'opened': e.get('opened_ns', e.get('ts_ns')),
                          'first_named': {}, 'comm': e.get('comm'), 'statuses': [], 'kinds': set(),
                          'sev_at': {}}
        s = SEV.get(e.get('severity'), 9)
        x['sev'] = min(x['sev'], s)
        x['sev_at'].setdefault(s, e.get('ts_ns'))
        x['kind'] = e.get('kind', x['kind'])
        x['kinds'].add(e.get('kind'))
        x['statuses'].append(e.get('status'))
        for r in e.get('culprit_ranks') or []:
            x['culprits'].add(int(r))
            x['first_named'].setdefault(int(r), e.get('ts_ns'))
        for nd in e.get('culprit_nodes') or []:
            x['nodes'].add(nd)
        if e.get('comm'):
            x['comm'] = e.get('comm')
    return inc


def fmt_inc(x, onset_ns, t0_ns):
    ref = onset_ns if onset_ns is not None else t0_ns
    dt = (x['opened'] - ref) / 1e9 if x['opened'] is not None else float('nan')
    sign = '+' if onset_ns is not None else '@'
    cul = ','.join(str(c) for c in sorted(x['culprits'])) or '-'
    if len(x['culprits']) > 8:
        cul = ','.join(str(c) for c in sorted(x['culprits'])[:8]) + f'..({len(x["culprits"])})'
    kinds = '/'.join(sorted(k for k in x['kinds'] if k))
    return f"P{x['sev']} {kinds} [{cul}] {sign}{dt:.1f}s"


def judge(t, incs):
    cul = set(t['culprits'])
    allowed = set(t.get('allowed') or t['culprits'])
    adv = set(t.get('advisory_ok') or [])
    onset = t.get('onset_ns')
    kind = t['kind']
    mode = t['judge']

    def tolerated(x):
        return adv and x['sev'] >= 2 and x['culprits'] == adv

    victims = [x for x in incs if (x['culprits'] - allowed) and not tolerated(x)]
    early = [x for x in incs if onset is not None and x['sev'] <= 1 and x['opened'] is not None and x['opened'] < onset]
    p0 = [x for x in incs if x['sev'] == 0]
    delay = None

    def d_of(ts):
        if ts is None or onset is None:
            return None
        return (ts - onset) / 1e9

    if mode == 'info':
        bad = [x for x in incs if x['sev'] <= 1 or (x['culprits'] - cul)]
        named = [x for x in incs if x['culprits'] & cul]
        if named:
            delay = d_of(min(min(x['first_named'][c] for c in x['culprits'] & cul) for x in named))
        if bad:
            return 'FAIL', 'P0/P1 or a rank other than the outlier named: ' + '; '.join(
                f"P{x['sev']} {x['kind']} {sorted(x['culprits'])}" for x in bad[:3]), delay
        return 'INFO', ('outlier named ' + ', '.join(f"P{x['sev']} {x['kind']}" for x in named)
                        if named else 'nothing reported') + ' (arguable: see truth note)', delay
    if victims:
        v = sorted(set().union(*[x['culprits'] - allowed for x in victims]))
        return 'FAIL', f'names rank(s) outside the truth {v[:10]}{"..." if len(v) > 10 else ""} ' \
                       f'({"; ".join(sorted({x["kind"] + " P" + str(x["sev"]) for x in victims}))})', None
    if early:
        return 'FAIL', 'P0/P1 before onset: ' + '; '.join(f"{x['kind']} {sorted(x['culprits'])}" for x in early[:3]), None

    if mode == 'control':
        hi = [x for x in incs if x['sev'] <= 1]
        if hi:
            return 'FAIL', f'P{hi[0]["sev"]} {hi[0]["kind"]} {sorted(hi[0]["culprits"])} on a healthy job', None
        lo = [x for x in incs if not tolerated(x)]
        if lo:
            return 'PARTIAL', 'P2/P3 on a healthy job: ' + '; '.join(
                f"P{x['sev']} {x['kind']} {sorted(x['culprits'])[:8]}" for x in lo[:3]), None
        if incs:
            return 'PASS', 'only the tolerated whole-stage advisory', None
        return 'PASS', 'nothing reported', None

    if mode == 'noisy':
        hi = [x for x in incs if x['sev'] <= 1]
        if hi:
            return 'FAIL', f'P{hi[0]["sev"]} {hi[0]["kind"]} {sorted(hi[0]["culprits"])} for GC pauses', None
        named = [x for x in incs if x['culprits'] & cul]
        if named:
            delay = d_of(min(x['opened'] for x in named))
            return 'PASS', 'the pausing rank named at ' + ', '.join(f"P{x['sev']} {x['kind']}" for x in named), delay
        if incs:
            return 'PARTIAL', 'incidents naming nobody: ' + ', '.join(f"P{x['sev']} {x['kind']}" for x in incs), None
        return 'PASS', 'nothing reported', None

    if mode == 'hang':
        if p0:
            delay = d_of(min(x['opened'] for x in p0))
        exact = [x for x in p0 if x['culprits'] == cul]
        if len(p0) == 1 and exact:
            extra = [x for x in incs if x is not p0[0]]
            why = f"one P0 {p0[0]['kind']} naming {sorted(cul)}"
            if extra:
                why += '; also ' + ', '.join(f"P{x['sev']} {x['kind']} {sorted(x['culprits'])}" for x in extra[:3])
            return 'PASS', why, delay
        if kind == 'p2p_deadlock' and len(p0) == 1:
            x = p0[0]
            if x['culprits'] and x['culprits'] < cul:
                return 'PARTIAL', f"one P0 {x['kind']} naming {sorted(x['culprits'])}: one of the two deadlocked ranks", delay
            if not x['culprits'] and x['kind'] == 'comm_hang' and x['comm'] == t.get('comm'):
                return 'PARTIAL', 'comm_hang on the pair\'s PP comm naming no rank', delay
        if len(p0) > 1:
            if all(x['culprits'] and x['culprits'] <= cul for x in p0) and set().union(*[x['culprits'] for x in p0]) == cul:
                return 'PARTIAL', f'{len(p0)} P0 incidents for one hang (culprits right)', delay
            return 'FAIL', f'{len(p0)} P0 incidents: ' + '; '.join(f"{x['kind']} {sorted(x['culprits'])}" for x in p0[:4]), delay
        if p0:
            x = p0[0]
            if x['culprits'] and x['culprits'] < cul:
                return 'PARTIAL', f"P0 names {sorted(x['culprits'])} of {sorted(cul)}", delay
            return 'FAIL', f"P0 {x['kind']} names {sorted(x['culprits']) or 'nobody'}", delay
        p1 = [x for x in incs if x['sev'] == 1 and x['culprits'] == cul]
        if p1:
            return 'PARTIAL', f"no P0; P1 {p1[0]['kind']} naming the culprit", d_of(p1[0]['opened'])
        return 'FAIL', 'missed: no P0' + (' (only ' + ', '.join(f"P{x['sev']} {x['kind']}" for x in incs[:3]) + ')' if incs else ''), None

    if mode == 'slow':
        if p0:
            return 'FAIL', f"P0 {p0[0]['kind']} for a slow rank", None
        okk = {'slow_rank', 'slow_link'} | ({'hw_fault'} if t.get('hw_ok') else set())
        named = [x for x in incs if x['kinds'] & okk and x['culprits'] & cul]
        if onset is not None:
            pre = [x for x in named if x['opened'] < onset]
            if pre:
                return 'FAIL', 'culprit named before the slowdown began: ' + ', '.join(
                    f"P{x['sev']} {x['kind']} {sorted(x['culprits'])}" for x in pre[:2]), None
        got = set().union(*[x['culprits'] for x in named]) & cul if named else set()
        if got:
            ts = [min(x['first_named'][c] for x in named if c in x['culprits']) for c in got]
            delay = d_of(max(ts))
        others = [x for x in incs if x not in named and not tolerated(x)]
        tail = ('; also ' + ', '.join(f"P{x['sev']} {x['kind']} {sorted(x['culprits'])}" for x in others[:3])) if others else ''
        if got == cul:
            return 'PASS', 'named ' + ', '.join(f"P{x['sev']} {x['kind']} {sorted(x['culprits'])}" for x in named[:3]) + tail, delay
        if got:
            return 'PARTIAL', f'named {sorted(got)} of {sorted(cul)}' + tail, delay
        return 'FAIL', 'missed' + (' (only ' + ', '.join(f"P{x['sev']} {x['kind']} {sorted(x['culprits'])}" for x in incs[:3]) + ')' if incs else ''), None

    if mode == 'link':
        if p0:
            return 'FAIL', f"P0 {p0[0]['kind']} for a degraded link", None
        node = t.get('node')
        good = [x for x in incs if x['kinds'] & {'slow_link', 'hw_fault'} and
                ((x['culprits'] and x['culprits'] <= allowed) or (not x['culprits'] and node in x['nodes']))]
        part = [x for x in incs if 'slow_rank' in x['kinds'] and x['culprits'] and x['culprits'] <= allowed]
        if onset is not None:
            pre = [x for x in good + part if x['opened'] < onset]
            if pre:
                return 'FAIL', 'named before the link degraded', None
        if good:
            return 'PASS', f"{good[0]['kind']} naming {sorted(good[0]['culprits']) or sorted(good[0]['nodes'])}", d_of(min(x['opened'] for x in good))
        if part:
            return 'PARTIAL', f"slow_rank naming {sorted(set().union(*[x['culprits'] for x in part]))} (the TP group of the bad link, as ranks)", d_of(min(x['opened'] for x in part))
        return 'FAIL', 'missed' + (' (only ' + ', '.join(f"P{x['sev']} {x['kind']}" for x in incs[:3]) + ')' if incs else ''), None
    return 'INFO', f'unknown judge {mode}', None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('files', nargs='*')
    a = ap.parse_args()
    rows = []
    for tf, af in zip(a.files[0::2], a.files[1::2]):
        tr = json.load(open(tf))
        inc = load_alerts(af)
        byjob = defaultdict(list)
        for (j, _), x in inc.items():
            byjob[j].append(x)
        known = {t['job'] for t in tr['jobs']}
        for t in tr['jobs']:
            incs = sorted(byjob.get(t['job'], []), key=lambda x: (x['sev'], x['opened'] or 0))
            verdict, why, delay = judge(t, incs)
            it = t.get('iter_s')
            truth_s = t['kind'] + (f" {t['culprits']}" if t['culprits'] else '') + \
                (f" allowed {t['allowed'][0]}-{t['allowed'][-1]}" if t['kind'] == 'slow_link' else '') + \
                (f" @{t['onset_s']:.1f}s" if t.get('onset_s') is not None else '')
            rows.append({'scenario': tr['scenario'], 'job': t['job'], 'probe': t['probe'], 'ranks': t['ranks'],
                         'truth': truth_s,
                         'reported': '; '.join(fmt_inc(x, t.get('onset_ns'), t['t0_ns']) for x in incs[:5]) +
                                     (f' (+{len(incs) - 5} more)' if len(incs) > 5 else '') or '-',
                         'verdict': verdict, 'why': why,
                         'delay_s': None if delay is None else round(delay, 2),
                         'delay_it': None if (delay is None or not it) else round(delay / it, 2),
                         'note': t.get('note', '')})
        for j in sorted(set(byjob) - known):
            rows.append({'scenario': tr['scenario'], 'job': j, 'probe': '-', 'ranks': 0, 'truth': 'no such job',
                         'reported': '; '.join(fmt_inc(x, None, 0) for x in byjob[j][:3]), 'verdict': 'FAIL',
                         'why': 'incident for a job id that is not in the capture', 'delay_s': None, 'delay_it': None,
                         'note': ''})
    hdr = ['scenario', 'job', 'probe', 'ranks', 'truth', 'reported (most severe first; time from onset)',
           'verdict', 'why', 'delay s', 'delay it']
    lines = ['| ' + ' | '.join(hdr) + ' |', '|' + '---|' * len(hdr)]
    for r in rows:
        cells = [r['scenario'], r['job'], r['probe'], str(r['ranks']), r['truth'], r['reported'], r['verdict'],
                 r['why'], '' if r['delay_s'] is None else f"{r['delay_s']:.2f}",
                 '' if r['delay_it'] is None else f"{r['delay_it']:.2f}"]
        lines.append('| ' + ' | '.join(c.replace('|', '/') for c in cells) + ' |')
    tot = defaultdict(int)
    for r in rows:
        tot[r['verdict']] += 1
    total = f"totals: {len(rows)} job rows: " + ', '.join(f'{k} {tot[k]}' for k in ('PASS', 'PARTIAL', 'FAIL', 'INFO') if tot[k])
    md = '# edges/ results\n\n' + '\n'.join(lines) + '\n\n' + total + '\n'
    with open(os.path.join(a.out, 'results.md'), 'w') as fh:
        fh.write(md)
    with open(os.path.join(a.out, 'results.json'), 'w') as fh:
        json.dump({'rows': rows, 'totals': dict(tot)}, fh, indent=1)
    print('\n'.join(lines))
    print()
    print(total)


if __name__ == '__main__':
    main()
