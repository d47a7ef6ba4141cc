#!/usr/bin/env python3
"""Strict scorer of the quirks captures.

    score.py --out HERE TRUTH ALERTS [TRUTH ALERTS ...]

Reads NAME.truth.json and the JSON Lines of incidents `commwatch replay` wrote for it; prints a
markdown table and writes HERE/results.md and HERE/results.json. Rules (README.md, "Scoring"):
- hang: exactly one incident ever at P0, kind hang, every P0 event naming exactly the culprits, first
  P0 at or after the onset (0.1 s tolerance); no incident of any kind or severity names another rank.
- slow_rank: a slow_rank incident (any severity) naming exactly the culprits, opened at or after the
  onset; no P0 of another kind; no incident names another rank, except P2/P3 naming only `allowed` ranks.
- healthy: any P0/P1 fails; P2/P3 naming ranks outside `allowed` is PARTIAL; others are notes.
- blip: as healthy, and an incident naming the throttled rank must be resolved by the end (else PARTIAL).
- link: P0 fails, naming a rank outside `allowed` fails; slow_link passes; another kind naming only
  allowed ranks is PARTIAL (blames GPUs for a NIC); silence is PARTIAL (missed).
- stalled: a hang P0, or an incident naming some but not all ranks, fails; job_stalled passes;
  silence is PARTIAL.
- crash (before an elastic restart): incidents opened before the restart may name only the dead
  ranks; one left open at the end is PARTIAL (stale). The restarted job is scored by its own truth on
  the incidents opened after the restart.
"""
import argparse
import json
import os
from collections import defaultdict

SEV = {'P0': 0, 'P1': 1, 'P2': 2, 'P3': 3}


def rl(ranks):
    ranks = sorted(ranks)
    if len(ranks) > 6:
        runs, a = [], ranks[0]
        prev = a
        for x in ranks[1:] + [None]:
            if x is not None and x == prev + 1:
                prev = x
                continue
            runs.append(f'{a}-{prev}' if prev != a else f'{a}')
            if x is not None:
                a = prev = x
        return '[' + ','.join(runs) + ']'
    return '[' + ','.join(map(str, ranks)) + ']'


def load_incidents(path):
    incs = defaultdict(lambda: {'events': []})
    if not os.path.exists(path):
        return {}
    with open(path) as fh:
        for l in fh:
            l = l.strip()
            if not l:
                continue
            try:
                d = json.loads(l)
            except ValueError:
                continue
            inc = incs[(d.get('job'), d.get('incident'))]
            inc['job'] = d.get('job')
            inc['kind'] = d.get('kind')
            inc['opened_ns'] = d.get('opened_ns', d.get('ts_ns'))
            inc['events'].append({'ts': d.get('ts_ns'), 'sev': d.get('severity'), 'status': d.get('status'),
                                  'ranks': sorted(d.get('culprit_ranks') or []),
                                  'summary': d.get('summary', '')})
    out = {}
    for k, inc in incs.items():
        inc['events'].sort(key=lambda e: e['ts'])
        inc['ranks'] = sorted({r for e in inc['events'] for r in e['ranks']})
        inc['top'] = min((SEV.get(e['sev'], 9) for e in inc['events']), default=9)
        inc['resolved'] = inc['events'][-1]['status'] == 'resolved'
        inc['first_ts'] = inc['events'][0]['ts']
        out[k] = inc
    return out


def desc(inc, ref_ns):
    t = (inc['opened_ns'] - ref_ns) / 1e9 if ref_ns else None
    s = f"P{inc['top']} {inc['kind']} {rl(inc['ranks'])}"
    if t is not None:
        s += f' {t:+.1f}s'
    if inc['resolved']:
        s += ' (resolved)'
    return s


def score_job(t, incs, cap_end_ns):
    kind = t['kind']
    cul = set(t['culprits'])
    allowed = set(t.get('allowed') or [])
    onset = t.get('onset_ns')
    why, verdict, delay = [], 'PASS', None
    world = set(range(t['ranks']))

    def fail(msg):
        nonlocal verdict
        verdict = 'FAIL'
        why.append(msg)

    def partial(msg):
        nonlocal verdict
        if verdict == 'PASS':
            verdict = 'PARTIAL'
        why.append(msg)

    p0 = [i for i in incs if i['top'] == 0]
    if kind == 'hang':
        if not p0:
            fail('no P0')
        elif len(p0) > 1:
            fail(f'{len(p0)} incidents at P0')
        else:
            i = p0[0]
            if i['kind'] != 'hang':
                fail(f"P0 is {i['kind']}")
            bad = [e for e in i['events'] if e['sev'] == 'P0' and set(e['ranks']) != cul]
            if bad:
                fail(f"a P0 event names {rl(bad[0]['ranks'])}")
            first = min(e['ts'] for e in i['events'] if e['sev'] == 'P0')
            if first < onset - 1e8:
                fail('P0 before the onset')
            delay = (first - onset) / 1e9
        for i in incs:
            extra = set(i['ranks']) - cul
            if extra:
                fail(f"{i['kind']} P{i['top']} names {rl(extra)}")
    elif kind == 'slow_rank':
        for i in p0:
            if i['kind'] != 'slow_rank':
                fail(f"P0 {i['kind']}")
        hits = [i for i in incs if i['kind'] == 'slow_rank' and any(set(e['ranks']) == cul for e in i['events'])]
        ok = [i for i in hits if i['opened_ns'] >= onset - 1e8]
        if not ok:
            fail('slow rank not named' + (' after the onset' if hits else ''))
        else:
            delay = (min(i['opened_ns'] for i in ok) - onset) / 1e9
        for i in incs:
            extra = set(i['ranks']) - cul
            if extra and not (i['top'] >= 2 and set(i['ranks']) <= allowed):
                fail(f"{i['kind']} P{i['top']} names {rl(extra)}")
    elif kind in ('healthy', 'blip'):
        for i in incs:
            if i['top'] <= 1:
                fail(f"P{i['top']} {i['kind']} {rl(i['ranks'])}")
            elif set(i['ranks']) - allowed:
                partial(f"P{i['top']} {i['kind']} names {rl(set(i['ranks']) - allowed)}")
            elif kind == 'blip' and i['ranks'] and not i['resolved']:
                partial(f"{i['kind']} on {rl(i['ranks'])} never resolved")
        if kind == 'blip':
            hit = [i for i in incs if set(i['ranks']) & cul]
            if hit:
                delay = (min(i['opened_ns'] for i in hit) - onset) / 1e9
    elif kind == 'link':
        for i in incs:
            extra = set(i['ranks']) - allowed
            if i['top'] == 0:
                fail(f"P0 {i['kind']}")
            elif extra:
                fail(f"{i['kind']} P{i['top']} names {rl(extra)}")
            elif i['kind'] != 'slow_link' and i['ranks']:
                partial(f"{i['kind']} P{i['top']} blames {rl(i['ranks'])} (a NIC, not their GPUs)")
        links = [i for i in incs if i['kind'] == 'slow_link']
        if links:
            delay = (min(i['opened_ns'] for i in links) - onset) / 1e9
        elif not [i for i in incs if i['ranks']]:
            partial('not reported')
    elif kind == 'stalled':
        for i in incs:
            if i['top'] == 0 and i['kind'] == 'hang':
                fail(f"P0 hang {rl(i['ranks'])}")
            elif i['ranks'] and set(i['ranks']) != world:
                fail(f"{i['kind']} P{i['top']} names {rl(i['ranks'])} (the root cannot be observed)")
        st = [i for i in incs if i['kind'] == 'job_stalled']
        if st:
            delay = (min(i['opened_ns'] for i in st) - onset) / 1e9
        elif verdict == 'PASS':
            partial('no job_stalled')
    elif kind == 'crash':
        dead = cul
        for i in incs:
            extra = set(i['ranks']) - dead
            if extra:
                fail(f"{i['kind']} P{i['top']} names survivors {rl(extra)}")
            elif not i['resolved']:
                partial(f"{i['kind']} {rl(i['ranks'])} still open after the restart")
        hit = [i for i in incs if i['ranks'] or i['kind'] == 'node_lost']
        if hit:
            delay = (min(i['opened_ns'] for i in hit) - onset) / 1e9
    else:
        why.append('unknown truth kind')
    return verdict, why, delay


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('files', nargs='+')
    a = ap.parse_args()
    rows = []
    for tp, ap_ in zip(a.files[0::2], a.files[1::2]):
        with open(tp) as fh:
            doc = json.load(fh)
        incs_all = load_incidents(ap_)
        for t in doc['jobs']:
            incs = [i for (j, _), i in incs_all.items() if j == t['job']]
            # an elastic restart: one job id, two worlds; split the incidents at the restart
            rs = [x.get('restart_ns') for x in doc['jobs'] if x['job'] == t['job'] and x.get('restart_ns')]
            if rs:
                if t.get('restarted'):
                    incs = [i for i in incs if i['opened_ns'] >= rs[0]]
                else:
                    incs = [i for i in incs if i['opened_ns'] < rs[0]]
            incs.sort(key=lambda i: (i['top'], i['opened_ns']))
            if doc.get('gen_errors'):
                verdict, why, delay = 'GEN-ERR', doc['gen_errors'][:3], None
            else:
                verdict, why, delay = score_job(t, incs, doc['capture_end_ns'])
            ref = t.get('onset_ns') or (rs[0] if rs and t.get('restarted') else None)
            truth = t['kind']
            if t['culprits']:
                truth += ' ' + rl(t['culprits'])
            if t.get('allowed') and t['kind'] != 'blip':
                truth += f" (allowed {rl(t['allowed'])})"
            if t.get('restarted'):
                truth += ' after restart'
            it = t.get('iter_s')
            rows.append({'scenario': doc['scenario'], 'job': t['job'], 'probe': t['probe'], 'ranks': t['ranks'],
                         'layout': t['layout'], 'truth': truth,
                         'reported': [desc(i, ref) for i in incs], 'verdict': verdict, 'why': why,
                         'delay_s': round(delay, 2) if delay is not None else None,
                         'delay_it': round(delay / it, 2) if delay is not None and it else None,
                         'iter_s': it})
    lines = ['# quirks results', '',
             '| scenario | job | probe | ranks | truth | reported (most severe first; time from onset) | verdict | why | delay s | delay it |',
             '|---|---|---|---|---|---|---|---|---|---|']
    for r in rows:
        lines.append('| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s |' % (
            r['scenario'], r['job'], r['probe'], r['ranks'], r['truth'], '<br>'.join(r['reported']) or '-',
            r['verdict'], '; '.join(r['why']) or '', r['delay_s'] if r['delay_s'] is not None else '-',
            r['delay_it'] if r['delay_it'] is not None else '-'))
    counts = defaultdict(int)
    for r in rows:
        counts[r['verdict']] += 1
    tot = f"**totals**: {len(rows)} job rows: " + ', '.join(f'{k} {counts[k]}' for k in sorted(counts))
    lines += ['', tot]
    text = '\n'.join(lines) + '\n'
    print(text)
    with open(os.path.join(a.out, 'results.md'), 'w') as fh:
        fh.write(text)
    with open(os.path.join(a.out, 'results.json'), 'w') as fh:
        json.dump({'rows': rows, 'totals': dict(counts)}, fh, indent=1)


if __name__ == '__main__':
    main()
