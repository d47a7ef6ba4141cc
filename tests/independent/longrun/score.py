#!/usr/bin/env python3
"""Strict scorer of longrun/ (see gen.py's docstring for the scenarios).

    python score.py --out DIR truth1.json alerts1.jsonl [truth2.json alerts2.jsonl ...]

Verdicts, per capture (one job each):
  control (ckpt_all_, eval_, curriculum_, noise_hour_): any P0/P1 = FAIL, any incident naming a rank
      = FAIL, else PASS (incidents of P2/P3 naming no rank are listed, not held against it).
  ckpt_rank0_: no P0/P1 = PASS; exactly one, during the first checkpoint (start - 5 s .. end + 60 s),
      naming nothing or rank 0 only = INFO (allowed: the first occurrence is unknowable); a second
      P0/P1, one outside the first checkpoint or any incident naming a rank other than 0 = FAIL.
  hang (hang_after_ckpt_, hang_in_ckpt_, restart_): any incident naming a rank other than the
      culprit = FAIL; any P0/P1 before the onset = FAIL (hang_in_ckpt_: one at the first checkpoint
      allowed as in ckpt_rank0_); exactly one P0 naming exactly the culprit, opened at or after the
      onset and by the deadline = PASS; named but late, duplicated P0s, or the culprit named below
      P0, or a P0 naming nobody = PARTIAL; nothing naming the culprit = MISS.
  slow (slow_late_, creep_): any P0 = FAIL; any incident naming another rank = FAIL; a P0/P1, or
      any rank named, before the fault began (creep_: before its ramp started) = FAIL; the culprit
      named alone at P1/P2 by the deadline (slow_late_: onset + 20 healthy iterations; creep_: end
      of the capture) = PASS; late or only at P3 = PARTIAL; not named = MISS.
  intermittent_: any P0 = FAIL; any incident naming another rank, or a P0/P1 naming nobody = FAIL;
      each episode counts as found when an incident naming exactly the culprit is open (has
      named it and is not resolved) at some time in [start, end + 30 s]; all three at P1/P2 and
      none opened outside an episode (+60 s) = PASS; some = PARTIAL; none = MISS.
Delays are from the onset (creep_: the 1.2x crossing), in seconds and healthy iterations.
Also: false P0/P1 per healthy job-hour over the healthy jobs (controls and ckpt_rank0_).
"""
import argparse
import json
import os
import sys

SEV = {'P0': 0, 'P1': 1, 'P2': 2, 'P3': 3}


def load_alerts(path):
    msgs = []
    if not os.path.exists(path):
        return msgs
    for line in open(path):
        line = line.strip()
        if not line or not line.startswith('{'):
            continue
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if 'value' in m and isinstance(m['value'], dict):
            m = m['value']
        msgs.append(m)
    return msgs


class Inc:
    def __init__(self, iid):
        self.id = iid
        self.msgs = []

    def add(self, m, t):
        self.msgs.append((t, m))

    def finish(self, end_s):
        self.msgs.sort(key=lambda x: x[0])
        self.kinds = sorted({m.get('kind', '?') for _, m in self.msgs})
        self.ranks = sorted({int(r) for _, m in self.msgs for r in (m.get('culprit_ranks') or [])})
        self.sevs = [m.get('severity', 'P3') for _, m in self.msgs]
        self.best = min(self.sevs, key=lambda s: SEV.get(s, 9))
        self.first = self.msgs[0][0]
        self.resolved = next((t for t, m in self.msgs if m.get('status') == 'resolved'), None)
        self.t_p01 = next((t for t, m in self.msgs if SEV.get(m.get('severity'), 9) <= 1), None)
        self.t_p0 = next((t for t, m in self.msgs if m.get('severity') == 'P0'), None)
        self.t_named = next((t for t, m in self.msgs if m.get('culprit_ranks')), None)
        self.end = self.resolved if self.resolved is not None else end_s
        self.summary = next((m.get('summary', '') for _, m in self.msgs if m.get('summary')), '')

    def named_exactly(self, ranks):
        return self.ranks == sorted(ranks)

    def desc(self):
        s = '%s %s ranks=%s @%s' % ('/'.join(self.kinds), self.best, self.ranks or '[]', mmss(self.first))
        if self.t_p0 is not None and self.t_p0 != self.first:
            s += ' P0@%s' % mmss(self.t_p0)
        if self.resolved is not None:
            s += ' resolved@%s' % mmss(self.resolved)
        return s


def mmss(t):
    if t is None:
        return '-'
    sign = '-' if t < 0 else ''
    t = abs(t)
    return '%s%d:%04.1f' % (sign, int(t // 60), t % 60)


def incidents(msgs, t0, end_s):
    incs = {}
    for m in msgs:
        ts = m.get('ts_ns') or m.get('opened_ns') or t0
        t = (int(ts) - t0) / 1e9
        iid = m.get('incident', '?%d' % len(incs))
        incs.setdefault(iid, Inc(iid)).add(m, t)
    out = list(incs.values())
    for i in out:
        i.finish(end_s)
    out.sort(key=lambda i: i.first)
    return out


def in_window(t, w, before=5.0, after=60.0):
    return w['start_s'] - before <= t <= (w['end_s'] if w.get('end_s') else w['start_s'] + 120) + after


def listing(incs, limit=6):
    if not incs:
        return 'nothing'
    s = '; '.join(i.desc() for i in incs[:limit])
    if len(incs) > limit:
        s += '; ... (%d incidents in all)' % len(incs)
    return s


def score_one(truth, incs):
    kind = truth['score']
    it = truth.get('iter_s') or 3.0
    cul = sorted(truth.get('culprit_ranks') or [])
    onset = truth.get('onset_s')
    notes = []
    verdict = None
    delay = None
    p01 = [i for i in incs if i.t_p01 is not None]
    named = [i for i in incs if i.ranks]
    ckpts = [w for w in truth.get('windows', []) if w['kind'] in ('ckpt0', 'ckptall')]
    res = {'false_p01': 0}

    def first_ckpt_ok(i, allowed):
        return ckpts and in_window(i.t_p01, ckpts[0]) and set(i.ranks) <= set(allowed)

    if kind == 'control':
        res['false_p01'] = len(p01)
        if p01 or named:
            verdict = 'FAIL'
            if p01:
                notes.append('%d P0/P1 on a healthy job' % len(p01))
            if named:
                notes.append('%d incidents name ranks %s' % (len(named), sorted({r for i in named for r in i.ranks})))
        else:
            verdict = 'PASS'
    elif kind == 'ckpt_rank0':
        res['false_p01'] = len(p01)
        wrong = [i for i in incs if set(i.ranks) - {0}]
        if wrong:
            verdict = 'FAIL'
            notes.append('names ranks other than 0: %s' % sorted({r for i in wrong for r in i.ranks} - {0}))
        if len(p01) > 1:
            verdict = 'FAIL'
            notes.append('%d P0/P1 over %d identical checkpoints (first at %s)' % (len(p01), len(ckpts), mmss(p01[0].t_p01)))
        elif len(p01) == 1:
            if first_ckpt_ok(p01[0], [0]):
                verdict = verdict or 'INFO'
                notes.append('one P0/P1 at the first checkpoint (allowed)')
            else:
                verdict = 'FAIL'
                notes.append('the one P0/P1 is not at the first checkpoint (%s)' % mmss(p01[0].t_p01))
        verdict = verdict or 'PASS'
    elif kind == 'hang':
        dl = truth['deadline_s']
        wrong = [i for i in incs if set(i.ranks) - set(cul)]
        pre = [i for i in p01 if i.t_p01 < onset - 1.0]
        fail = False
        if wrong:
            fail = True
            notes.append('names non-culprit ranks %s' % sorted({r for i in wrong for r in i.ranks} - set(cul)))
        if pre:
            if truth.get('allow_first_ckpt') and len(pre) == 1 and first_ckpt_ok(pre[0], truth.get('allowed_ranks', [])):
                notes.append('one P0/P1 at the first checkpoint (allowed)')
            else:
                fail = True
                notes.append('%d P0/P1 before the onset (first %s)' % (len(pre), mmss(pre[0].t_p01)))
        res['false_p01'] = len(pre)
        post_p0 = [i for i in incs if i.t_p0 is not None and i.t_p0 >= onset - 1.0]
        exact = [i for i in post_p0 if i.named_exactly(cul)]
        named_c = [i for i in incs if i.named_exactly(cul) and (i.t_named or i.first) >= onset - 1.0]
        if exact:
            delay = exact[0].t_p0 - onset
        if fail:
            verdict = 'FAIL'
        elif len(post_p0) == 1 and exact and delay <= dl - onset:
            verdict = 'PASS'
        elif exact:
            verdict = 'PARTIAL'
            if delay > dl - onset:
                notes.append('P0 late: %.1f s after the onset, deadline %.0f s' % (delay, dl - onset))
            if len(post_p0) > 1:
                notes.append('%d P0 incidents after the onset' % len(post_p0))
        elif named_c:
            verdict = 'PARTIAL'
            notes.append('culprit named only at %s' % named_c[0].best)
            delay = (named_c[0].t_named or named_c[0].first) - onset
        elif post_p0:
            verdict = 'PARTIAL'
            notes.append('P0 without the culprit (ranks %s)' % post_p0[0].ranks)
        else:
            verdict = 'MISS'
    elif kind == 'slow':
        start = truth.get('ramp_start_s', onset)
        if 'deadline_iters' in truth:
            dl = onset + truth['deadline_iters'] * it
        else:
            dl = truth.get('deadline_s', truth['duration_s'])
        fail = False
        p0 = [i for i in incs if i.t_p0 is not None]
        wrong = [i for i in incs if set(i.ranks) - set(cul)]
        pre = [i for i in incs if (i.t_p01 is not None and i.t_p01 < start - 1.0) or
               (i.ranks and (i.t_named or i.first) < start - 1.0)]
        res['false_p01'] = len([i for i in pre if i.t_p01 is not None])
        if p0:
            fail = True
            notes.append('P0 on a slow rank (%s)' % p0[0].desc())
        if wrong:
            fail = True
            notes.append('names non-culprit ranks %s' % sorted({r for i in wrong for r in i.ranks} - set(cul)))
        if pre:
            fail = True
            notes.append('%d alarms before the fault (first %s)' % (len(pre), pre[0].desc()))
        hits = [i for i in incs if i.named_exactly(cul) and (i.t_named or i.first) >= start - 1.0]
        if hits:
            th = min(i.t_named or i.first for i in hits)
            delay = th - onset
            good = [i for i in hits if SEV.get(i.best, 9) in (1, 2) and (i.t_named or i.first) <= dl]
        if fail:
            verdict = 'FAIL'
        elif not hits:
            verdict = 'MISS'
        elif good:
            verdict = 'PASS'
            delay = min(i.t_named or i.first for i in good) - onset
        else:
            verdict = 'PARTIAL'
            notes.append('culprit named %s at %s (deadline %s)' % (hits[0].best, mmss(th), mmss(dl)))
    elif kind == 'intermittent':
        eps = truth['episodes']
        fail = False
        p0 = [i for i in incs if i.t_p0 is not None]
        wrong = [i for i in incs if set(i.ranks) - set(cul)]
        rankless = [i for i in p01 if not i.ranks]
        if p0:
            fail = True
            notes.append('P0 (%s)' % p0[0].desc())
        if wrong:
            fail = True
            notes.append('names non-culprit ranks %s' % sorted({r for i in wrong for r in i.ranks} - set(cul)))
        if rankless:
            fail = True
            notes.append('P0/P1 naming nobody (%s)' % rankless[0].desc())
        res['false_p01'] = len(rankless)
        hits = [i for i in incs if i.named_exactly(cul)]
        found = []
        delays = []
        for a, b in eps:
            best = None
            for i in hits:
                tn = i.t_named or i.first
                if tn <= b + 30 and i.end >= a:
                    d = max(0.0, tn - a)
                    best = d if best is None else min(best, d)
            found.append(best is not None)
            delays.append(best)
        outside = [i for i in hits if not any(a - 1 <= (i.t_named or i.first) <= b + 60 for a, b in eps)]
        if outside:
            notes.append('culprit named outside an episode at %s' % ', '.join(mmss(i.t_named or i.first) for i in outside))
        lowsev = [i for i in hits if SEV.get(i.best, 9) == 3]
        notes.append('episodes found %d/%d, delays %s' % (sum(found), len(eps),
                     ', '.join('-' if d is None else '%.1f s' % d for d in delays)))
        ds = [d for d in delays if d is not None]
        delay = max(ds) if ds else None
        res['episode_delays_s'] = delays
        if fail:
            verdict = 'FAIL'
        elif not any(found):
            verdict = 'MISS'
        elif all(found) and not outside and not lowsev:
            verdict = 'PASS'
        else:
            verdict = 'PARTIAL'
            if lowsev:
                notes.append('culprit named only at P3 in %d incidents' % len(lowsev))
    else:
        raise SystemExit('unknown score kind %s' % kind)
    res.update(verdict=verdict, delay_s=None if delay is None else round(delay, 2),
               delay_iters=None if delay is None else round(delay / it, 2), notes=notes)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('files', nargs='+')
    a = ap.parse_args()
    if len(a.files) % 2:
        raise SystemExit('give truth/alerts pairs')
    rows = []
    healthy_h = 0.0
    healthy_p01 = 0
    for tp, ap_ in zip(a.files[::2], a.files[1::2]):
        truth = json.load(open(tp))
        msgs = load_alerts(ap_)
        incs = incidents(msgs, truth['t0_ns'], truth['duration_s'])
        r = score_one(truth, incs)
        r.update(name=truth['name'], kind=truth['kind'], probe=truth['probe'], minutes=round(truth['duration_s'] / 60, 1),
                 culprit=truth.get('culprit_ranks') or [], onset=mmss(truth.get('onset_s')),
                 said=listing(incs), incidents=len(incs), messages=len(msgs))
        if truth['score'] in ('control', 'ckpt_rank0'):
            healthy_h += truth['duration_s'] / 3600
            healthy_p01 += r['false_p01']
        if truth['name'].startswith('noise_hour_'):
            r['notes'].append('false P0/P1 per job-hour: %.2f' % (r['false_p01'] / (truth['duration_s'] / 3600)))
        rows.append(r)
    counts = {}
    for r in rows:
        counts[r['verdict']] = counts.get(r['verdict'], 0) + 1
    rate = healthy_p01 / healthy_h if healthy_h else 0.0
    hdr = '| scenario | probe | min | truth | culprit | onset | verdict | delay | what commwatch said | notes |'
    lines = ['# longrun/ results', '', hdr, '|' + '---|' * 10]
    for r in rows:
        d = '-' if r['delay_s'] is None else '%.1f s (%.1f it)' % (r['delay_s'], r['delay_iters'])
        lines.append('| %s | %s | %s | %s | %s | %s | **%s** | %s | %s | %s |' % (
            r['name'], r['probe'], r['minutes'], r['kind'], r['culprit'] or '-', r['onset'], r['verdict'], d,
            r['said'], '; '.join(r['notes']) or ''))
    lines.append('')
    lines.append('Verdicts: ' + ', '.join('%s %d' % (k, v) for k, v in sorted(counts.items())))
    lines.append('False P0/P1 on healthy jobs: %d in %.2f job-hours = %.2f per job-hour' % (healthy_p01, healthy_h, rate))
    md = '\n'.join(lines) + '\n'
    with open(os.path.join(a.out, 'results.md'), 'w') as f:
        f.write(md)
    with open(os.path.join(a.out, 'results.json'), 'w') as f:
        json.dump({'rows': rows, 'counts': counts, 'healthy_job_hours': round(healthy_h, 3),
                   'healthy_false_p01': healthy_p01, 'false_p01_per_job_hour': round(rate, 3)}, f, indent=1)
    print()
    print('%-22s %-5s %-8s %-8s %-16s %s' % ('scenario', 'probe', 'truth', 'verdict', 'delay', 'notes'))
    for r in rows:
        d = '-' if r['delay_s'] is None else '%.1f s/%.1f it' % (r['delay_s'], r['delay_iters'])
        print('%-22s %-5s %-8s %-8s %-16s %s' % (r['name'], r['probe'], r['kind'], r['verdict'], d, '; '.join(r['notes'])))
        print('%-22s   said: %s' % ('', r['said']))
    print()
    print('Verdicts: ' + ', '.join('%s %d' % (k, v) for k, v in sorted(counts.items())))
    print('False P0/P1 on healthy jobs: %d in %.2f job-hours = %.2f per job-hour' % (healthy_p01, healthy_h, rate))


if __name__ == '__main__':
    main()
