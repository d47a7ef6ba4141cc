#!/usr/bin/env python3
"""Strict scorer.  python score.py TRUTH.json ALERTS.jsonl [...more pairs]  -> table rows (markdown) + json
Rules: hang/crash -> exactly one P0 (kind hang) with culprit_ranks == truth; comm_hang -> exactly one P0
kind comm_hang on the right comm.  slow -> a slow_rank incident with culprit_ranks == truth.  Any incident
naming a non-culprit rank is a false positive; every P0/P1 on a healthy job is a false alarm (P2/P3 listed)."""
import json, os, sys

SEV = {'P0': 0, 'P1': 1, 'P2': 2, 'P3': 3}


def load_incidents(path):
    inc = {}
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        e = json.loads(line)
        i = inc.get(e['incident'])
        if i is None:
            i = inc[e['incident']] = {'id': e['incident'], 'job': e['job'], 'kind': e['kind'],
                                      'sev_open': e['severity'], 'sev_max': e['severity'],
                                      'culprits_open': sorted(e.get('culprit_ranks') or []),
                                      'culprits_all': set(e.get('culprit_ranks') or []),
                                      'opened_ns': e.get('opened_ns', e['ts_ns']), 'comm': e.get('comm'),
                                      'summary': e.get('summary', ''), 'events': 0, 'resolved_ns': None,
                                      'first_status': e['status']}
        i['events'] += 1
        if SEV[e['severity']] < SEV[i['sev_max']]:
            i['sev_max'] = e['severity']
        i['culprits_all'] |= set(e.get('culprit_ranks') or [])
        i['culprits_last'] = sorted(e.get('culprit_ranks') or [])
        if e['status'] == 'resolved':
            i['resolved_ns'] = e['ts_ns']
    return list(inc.values())


def fmt(i, onset=None):
    d = '' if onset is None else f' +{(i["opened_ns"] - onset) / 1e9:.1f}s'
    cl = i['culprits_open'] if i['culprits_open'] == i['culprits_last'] else f"{i['culprits_open']}->{i['culprits_last']}"
    sev = i['sev_open'] if i['sev_open'] == i['sev_max'] else f"{i['sev_open']}->{i['sev_max']}"
    return f"{i['kind']} {sev} {cl}{d}"


def score(truth, incs):
    rows = []
    for jt in truth['jobs']:
        job = jt['job']
        mine = sorted([i for i in incs if i['job'] == job], key=lambda i: i['opened_ns'])
        f = jt['fault']
        step = jt['step_s_median'] or 1.0
        res = {'scenario': truth['scenario'], 'job': job, 'type': jt['type'], 'probe': jt['probe'],
               'truth': 'healthy', 'reported': [], 'verdict': '', 'delay_s': None, 'delay_iter': None,
               'false': [], 'minor': []}
        if f is None or f['kind'] == 'exit':
            res['truth'] = 'healthy' if f is None else 'exits normally'
            for i in mine:
                (res['false'] if SEV[i['sev_max']] <= 1 else res['minor']).append(fmt(i))
            res['verdict'] = 'PASS' if not res['false'] else f"FAIL: {len(res['false'])} false P0/P1"
            rows.append(res)
            continue
        onset = f['onset_ns']
        cul = sorted(f['culprits'])
        if f['kind'] in ('hang', 'crash', 'comm_hang'):
            exp = f['expect_kind']
            res['truth'] = f"{f['kind']} culprit {cul}" if f['kind'] != 'comm_hang' else f"comm_hang {f['comm'][:6]} (members {len(f['members'])})"
            p0 = [i for i in mine if i['sev_max'] == 'P0' and i['kind'] in ('hang', 'comm_hang')]
            good = []
            for i in p0:
                if i['opened_ns'] < onset:
                    continue
                if exp == 'hang' and i['kind'] == 'hang' and i['culprits_open'] == cul:
                    good.append(i)
                if exp == 'comm_hang' and i['kind'] == 'comm_hang' and i['comm'] == f['comm'] and \
                        (i['culprits_open'] == [] or sorted(i['culprits_open']) == sorted(f['members'])):
                    good.append(i)
            for i in mine:
                if i in good:
                    continue
                named_victim = bool(set(i['culprits_all']) - set(cul))
                early = i['opened_ns'] < onset
                if SEV[i['sev_max']] <= 1 or named_victim or early:
                    why = (' (before onset' if early else ' (') + (', names non-culprit)' if named_victim else ')')
                    why = '' if why == ' ()' else why.replace('(, ', '(')
                    res['false'].append(fmt(i, onset) + why)
                else:
                    res['minor'].append(fmt(i, onset))
            res['reported'] = [fmt(i, onset) for i in good]
            if len(p0) == 1 and len(good) == 1:
                g = good[0]
                res['delay_s'] = round((g['opened_ns'] - onset) / 1e9, 2)
                res['delay_iter'] = round(res['delay_s'] / step, 1)
                if f.get('first_wait_ns'):
                    res['delay_after_first_wait_s'] = round((g['opened_ns'] - f['first_wait_ns']) / 1e9, 2)
                res['verdict'] = 'PASS' if not res['false'] else 'PARTIAL: hit + false incidents'
            elif not p0:
                res['verdict'] = 'FAIL: no P0 hang/comm_hang'
            elif good:
                res['verdict'] = f'FAIL: {len(p0)} P0s (one right)'
            else:
                res['verdict'] = 'FAIL: P0 with wrong kind/culprits'
        elif f['kind'] == 'slow':
            res['truth'] = f"slow x{f['factor']} culprit {cul}"
            good = [i for i in mine if i['kind'] == 'slow_rank' and i['culprits_open'] == cul and i['opened_ns'] >= onset]
            for i in mine:
                if i in good:
                    continue
                named_victim = bool(set(i['culprits_all']) - set(cul))
                early = i['opened_ns'] < onset and SEV[i['sev_max']] <= 1
                if SEV[i['sev_max']] <= 1 or named_victim or early:
                    why = (' (before onset' if i['opened_ns'] < onset else ' (') + (', names non-culprit)' if named_victim else ')')
                    why = '' if why == ' ()' else why.replace('(, ', '(')
                    res['false'].append(fmt(i, onset) + why)
                else:
                    res['minor'].append(fmt(i, onset))
            if good:
                g = good[0]
                res['reported'] = [fmt(g, onset)]
                res['delay_s'] = round((g['opened_ns'] - onset) / 1e9, 2)
                res['delay_iter'] = sum(1 for e in f['culprit_step_ends_ns'] if onset < e <= g['opened_ns'])
                res['verdict'] = 'PASS' if not res['false'] else 'PARTIAL: hit + false incidents'
                if len(good) > 1:
                    res['verdict'] += f' ({len(good)} incidents for it)'
            else:
                res['verdict'] = 'FAIL: missed'
        rows.append(res)
    return rows


def main():
    args = sys.argv[1:]
    allrows = []
    for t, a in zip(args[::2], args[1::2]):
        truth = json.load(open(t))
        allrows += score(truth, load_incidents(a))
    print('| scenario | job (probe) | truth | commwatch hit | delay s / iter | false (P0/P1 or naming non-culprits) | other P2/P3 | verdict |')
    print('|---|---|---|---|---|---|---|---|')
    for r in allrows:
        fl = '; '.join(r['false'][:4]) + (f' (+{len(r["false"]) - 4} more)' if len(r['false']) > 4 else '')
        mi = f"{len(r['minor'])}" if r['minor'] else '0'
        d = '' if r['delay_s'] is None else f"{r['delay_s']} / {r['delay_iter']}"
        print(f"| {r['scenario']} | {r['job']} ({r['probe']}) | {r['truth']} | {'; '.join(r['reported']) or '-'} | {d} | {fl or '-'} | {mi} | {r['verdict']} |")
    json.dump(allrows, open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results.json'), 'w'), indent=1, default=list)


if __name__ == '__main__':
    main()
