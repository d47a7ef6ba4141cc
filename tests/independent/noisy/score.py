#!/usr/bin/env python3
"""Strict scorer for noisy/: python score.py --out FOLDER truth1.json alerts1.jsonl ...

Verdicts per job row:
  hang       PASS: exactly one P0, opened after onset, naming exactly the culprits (or, for a lost
             node, a node_lost naming exactly that node); nothing names a rank outside the allowed
             set; no other P0/P1; nothing P0/P1 opened after `quiet_after_s`; the P0 resolved where
             `must_resolve`. Two correct P0s (e.g. hang + node_lost) or an unresolved one: PARTIAL.
             No P0 at all: MISS. Anything else: FAIL.
  slow_rank  PASS: every culprit named by slow_rank incidents at an allowed severity (P1-P3 unless
             the truth says `sev_ok`), none naming a rank outside the allowed set, no P0, no naming
             before the culprit's onset. Some culprits named: PARTIAL; severity only in
             `sev_partial`: PARTIAL; none: MISS.
  healthy    PASS: no incident. Any P0/P1: FAIL. An incident naming a rank or node outside an
             `info_ok` rule: FAIL. P2/P3 incidents that name nobody, or match an `info_ok` rule
             (e.g. a P3 advisory naming the rank that really is 8 % slower, a slow_link naming the
             congested node pair): INFO, because they are defensible advisories that page nobody.
             A job that ends (`job_end_s`) with an incident still open: PARTIAL.
  REFUSED    the capture failed check.py: not scored.
"""
import argparse, json, os, sys
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check as checker  # noqa: E402

BASE_NS = 1767225600 * 10**9
SEV = {'P0': 0, 'P1': 1, 'P2': 2, 'P3': 3}


def load_incidents(path):
    incs = OrderedDict()
    if not os.path.exists(path):
        return incs
    for line in open(path):
        line = line.strip()
        if not line.startswith('{'):
            continue
        try:
            e = json.loads(line)
        except Exception:
            continue
        iid = e.get('incident')
        if not iid:
            continue
        i = incs.setdefault(iid, {'id': iid, 'job': e.get('job'), 'kind': e.get('kind'), 'sev': 9, 'ranks': set(),
                                  'nodes': set(), 'opened': e.get('opened_ns') or e.get('ts_ns'), 'resolved': None,
                                  'first_named': {}})
        if e.get('severity') in SEV:
            i['sev'] = min(i['sev'], SEV[e['severity']])
        for r in e.get('culprit_ranks') or []:
            i['ranks'].add(int(r))
            i['first_named'].setdefault(int(r), e.get('ts_ns'))
        i['nodes'] |= set(e.get('culprit_nodes') or [])
        if e.get('status') == 'resolved':
            i['resolved'] = e.get('ts_ns')
        elif e.get('status') in ('open', 'update'):
            i['resolved'] = None
    return incs


def info_match(inc, rules):
    for r in rules or []:
        if inc['kind'] in r.get('kinds', []) and inc['sev'] >= SEV[r.get('max_sev', 'P3')] \
                and inc['ranks'] <= set(r.get('ranks', [])) and inc['nodes'] <= set(r.get('nodes', inc['nodes'])):
            if 'nodes' not in r and inc['nodes'] and not inc['ranks']:
                continue
            return True
    return False


def fmt(inc, ref_ns):
    t = (inc['opened'] - ref_ns) / 1e9
    return 'P%d %s %s%s %s%+.1fs%s' % (inc['sev'], inc['kind'], sorted(inc['ranks']) if inc['ranks'] else '[]',
                                        (' ' + ','.join(sorted(inc['nodes']))) if inc['nodes'] and not inc['ranks'] else '',
                                        '@', t, ' R' if inc['resolved'] else '')


def judge(tj, incs):
    culp = set(tj['culprits'])
    allowed = set(tj['allowed'])
    rules = tj.get('info_ok', [])
    onset_ns = tj.get('onset_ns') or BASE_NS
    it_s = tj.get('iter_s') or 1.0
    why, verdict, delay = [], None, None
    victims = [i for i in incs if (i['ranks'] - allowed) and not info_match(i, rules)]
    kind = tj['kind']
    if kind == 'healthy':
        hi = [i for i in incs if i['sev'] <= 1]
        badnode = [i for i in incs if not i['ranks'] and i['nodes'] and not info_match(i, rules)]
        if hi:
            verdict = 'FAIL'; why.append('%d P0/P1 on a control' % len(hi))
        if victims:
            nm = sorted(set().union(*[i['ranks'] - allowed for i in victims]))
            relaxed = [dict(r, max_sev='P0') for r in rules]
            sev_only = all(info_match(i, relaxed) for i in victims)
            verdict = 'FAIL'; why.append('names %s%s' % (nm, ' (ranks info_ok only up to %s)' % rules[0].get('max_sev')
                                                          if sev_only and rules else ''))
        if badnode:
            verdict = 'FAIL'; why.append('names nodes %s' % sorted(set().union(*[i['nodes'] for i in badnode])))
        if verdict is None:
            if incs:
                verdict = 'INFO'; why.append('P2/P3 advisories naming nobody or only an info_ok rank/node')
            else:
                verdict = 'PASS'; why.append('silent')
        if tj.get('job_end_s') is not None:
            openi = [i for i in incs if not i['resolved']]
            if openi and verdict in ('PASS', 'INFO'):
                verdict = 'PARTIAL'; why.append('%d incident(s) still open after the job ended' % len(openi))
    elif kind == 'hang':
        p0 = [i for i in incs if i['sev'] == 0]
        lost = tj.get('lost_node')

        def right(i):
            if i['ranks'] == culp:
                return True
            return lost is not None and i['kind'] == 'node_lost' and i['nodes'] == {lost} and i['ranks'] <= allowed
        if not p0:
            verdict = 'MISS'; why.append('no P0')
        elif not all(right(i) for i in p0):
            verdict = 'FAIL'; why.append('P0 names %s (truth %s)' % ([sorted(i['ranks']) or sorted(i['nodes']) for i in p0], sorted(culp)))
        elif any(i['opened'] < onset_ns for i in p0):
            verdict = 'FAIL'; why.append('P0 before onset')
        elif len(p0) > 1:
            verdict = 'PARTIAL'; why.append('%d P0s for one fault' % len(p0))
        else:
            verdict = 'PASS'; why.append('one P0, exact culprits')
        if p0:
            delay = (min(i['opened'] for i in p0) - onset_ns) / 1e9
        p1 = [i for i in incs if i['sev'] == 1]
        if p1:
            verdict = 'FAIL' if any(not right(i) for i in p1) else ('PARTIAL' if verdict == 'PASS' else verdict)
            why.append('%d P1 besides' % len(p1))
        if victims:
            verdict = 'FAIL'; why.append('victims named %s' % sorted(set().union(*[i['ranks'] - allowed for i in victims])))
        qa = tj.get('quiet_after_s')
        if qa is not None:
            late = [i for i in incs if i['sev'] <= 1 and i['opened'] > BASE_NS + qa * 1e9]
            if late:
                verdict = 'FAIL'; why.append('%d P0/P1 after the recovery at %.0f s' % (len(late), qa))
        if tj.get('must_resolve') and p0 and any(not i['resolved'] for i in p0) and verdict == 'PASS':
            verdict = 'PARTIAL'; why.append('P0 never resolved after the recovery')
    else:  # slow_rank
        ok = set(tj.get('sev_ok', ['P1', 'P2', 'P3']))
        part = set(tj.get('sev_partial', []))
        onsets = {int(k): v for k, v in (tj.get('onsets') or {}).items()} or {c: tj['onset_s'] for c in culp}
        named_ok, named_part, early = {}, {}, []
        for i in incs:
            if i['kind'] == 'slow_rank' and i['ranks'] & culp and i['ranks'] <= allowed and not i['ranks'] <= culp:
                for c in i['ranks'] & culp:   # named together with an indistinguishable peer the truth allows
                    named_part[c] = min(named_part.get(c, i['opened']), i['opened'])
                continue
            if i['kind'] != 'slow_rank' or not i['ranks'] or not i['ranks'] <= culp:
                continue
            sv = 'P%d' % i['sev']
            for c in i['ranks']:
                tn = i['first_named'].get(c, i['opened'])
                if tn < BASE_NS + (onsets.get(c, 0.0) or 0.0) * 1e9 - 1e9:
                    early.append(c)
                tgt = named_ok if sv in ok else named_part if sv in part else None
                if tgt is not None:
                    tgt[c] = min(tgt.get(c, tn), tn)
        if any(i['sev'] == 0 for i in incs):
            verdict = 'FAIL'; why.append('P0 on a slow rank')
        elif victims:
            verdict = 'FAIL'; why.append('victims named %s' % sorted(set().union(*[i['ranks'] - allowed for i in victims])))
        elif early:
            verdict = 'FAIL'; why.append('named before onset %s' % sorted(set(early)))
        elif set(named_ok) == culp:
            verdict = 'PASS'; why.append('all culprits named alone')
        elif set(named_ok) | set(named_part) == culp:
            verdict = 'PARTIAL'; why.append('named only at %s or with an allowed peer' % sorted(part))
        elif named_ok or named_part:
            verdict = 'PARTIAL'; why.append('named %s of %s' % (sorted(set(named_ok) | set(named_part)), sorted(culp)))
        else:
            verdict = 'MISS'; why.append('not named')
        nm = dict(named_part); nm.update(named_ok)
        if nm and set(nm) == culp:
            delay = max((nm[c] - BASE_NS) / 1e9 - (onsets.get(c, 0.0) or 0.0) for c in culp)
        if tj.get('persistent') and verdict == 'PASS':
            end_ns = BASE_NS + tj.get('end_s', 0) * 1e9 - 2e9
            gone = [c for c in culp if not any(c in i['ranks'] and (not i['resolved'] or i['resolved'] >= end_ns)
                                                for i in incs if i['kind'] == 'slow_rank')]
            if gone:
                verdict = 'PARTIAL'; why.append('%s resolved while still slow' % sorted(gone))
        others = [i for i in incs if i['sev'] <= 1 and not (i['ranks'] and i['ranks'] <= culp)]
        if others and verdict != 'FAIL':
            verdict = 'FAIL'; why.append('%d other P0/P1' % len(others))
    return verdict, '; '.join(why), delay, (delay / it_s if delay is not None and it_s else None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('pairs', nargs='+')
    a = ap.parse_args()
    rows = []
    for tpath, apath in zip(a.pairs[0::2], a.pairs[1::2]):
        truth = json.load(open(tpath))
        cap = tpath[:-len('.truth.json')] + '.cwcap'
        errs = checker.check(cap) if os.path.exists(cap) else ['capture missing']
        incs_all = load_incidents(apath)
        for tj in truth['jobs']:
            incs = [i for i in incs_all.values() if i['job'] == tj['job']]
            incs.sort(key=lambda i: (i['sev'], i['opened']))
            ref = tj.get('onset_ns') or BASE_NS
            rep = '; '.join(fmt(i, ref) for i in incs[:5]) + (' (+%d more)' % (len(incs) - 5) if len(incs) > 5 else '')
            if errs:
                v, why, d, di = 'REFUSED', 'check.py: ' + errs[0], None, None
            else:
                v, why, d, di = judge(tj, incs)
            truth_s = '%s %s%s' % (tj['kind'], tj['culprits'] if tj['culprits'] else '',
                                   (' @%.1fs' % tj['onset_s']) if tj.get('onset_s') is not None else '')
            rows.append({'scenario': truth['scenario'], 'job': tj['job'], 'probe': tj['probe'], 'ranks': tj['ranks'],
                         'truth': truth_s, 'reported': rep or '-', 'verdict': v, 'why': why,
                         'delay_s': None if d is None else round(d, 2),
                         'delay_iter': None if di is None else round(di, 2), 'note': tj.get('note')})
    tot = OrderedDict((k, 0) for k in ('PASS', 'INFO', 'PARTIAL', 'MISS', 'FAIL', 'REFUSED'))
    for r in rows:
        tot[r['verdict']] += 1
    hdr = '| scenario | job | probe | ranks | truth | reported (most severe first, time from onset) | verdict | why | delay s | delay iterations |'
    lines = [hdr, '|' + '---|' * 10]
    for r in rows:
        lines.append('| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |' % (
            r['scenario'], r['job'], r['probe'], r['ranks'], r['truth'], r['reported'], r['verdict'], r['why'],
            '-' if r['delay_s'] is None else r['delay_s'], '-' if r['delay_iter'] is None else r['delay_iter']))
    total = 'totals: ' + ', '.join('%s %d' % kv for kv in tot.items()) + ' (of %d job rows)' % len(rows)
    md = '# noisy/ results\n\n' + '\n'.join(lines) + '\n\n' + total + '\n'
    with open(os.path.join(a.out, 'results.md'), 'w') as f:
        f.write(md)
    with open(os.path.join(a.out, 'results.json'), 'w') as f:
        json.dump({'rows': rows, 'totals': tot}, f, indent=1)
    print('\n'.join(lines))
    print(total)


if __name__ == '__main__':
    main()
