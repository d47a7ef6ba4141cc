#!/usr/bin/env python3
"""Check a capture against shared/spec/wire-v1.md (written from the spec only).

    python check.py FILE.cwcap [...]      exit 1 if any file is rejected

Checks: JSON Lines with topic/key/ts_ns and value or value_b64; known topics; key forms
(`{job}/{comm}` with 16 lowercase hex digits for calls and progress, `{job}` otherwise); call
batches (magic CWB1, version 1, record size 64, count matching the length, reserved 0, every
record's comm equal to the key's); records (kind 1..3, op 0..11 and 0 for non-CALL kinds, only
flag bits 0-4, COMPLETED iff t_end_ns != 0, t_end >= t_start, comm_rank < nranks, peer -1 for
unrooted collectives and a valid comm rank for SEND/RECV, COMM_INIT seq 0 and aux = nodes >= 1);
per rank and comm: collective seqs contiguous from 0 and entered in seq order, SEND/RECV seqs
contiguous per (peer, op); a call's entry and completion records agree; members of one collective
instance agree on op, bytes and nranks; every CALL's rank has a COMM_INIT for its comm; heartbeats
(v, job, node, comm matching the key, ranks with started >= completed >= -1, each rank a member,
counters never going backwards per node/comm/rank, one fixed period per node agent); steps and
topology fields.
"""
import base64, json, re, sys
from collections import defaultdict
import numpy as np

REC_DT = np.dtype([('kind', 'u1'), ('op', 'u1'), ('flags', '<u2'), ('rank', '<i4'), ('comm', '<u8'),
                   ('seq', '<u8'), ('t_start_ns', '<i8'), ('t_end_ns', '<i8'), ('bytes', '<u8'),
                   ('comm_rank', '<i4'), ('peer', '<i4'), ('nranks', '<u4'), ('aux', '<u4')])
assert REC_DT.itemsize == 64
TOPICS = {"cw.calls.v1", "cw.progress.v1", "cw.topology.v1", "cw.steps.v1", "cw.hw.v1", "cw.alerts.v1"}
HEX16 = re.compile(r"^[0-9a-f]{16}$")
SEND, RECV = 6, 7
ROOTED = {4, 5, 10, 11}


def check(path, max_errors=20):
    errs = []

    def err(msg):
        if len(errs) < max_errors:
            errs.append(msg)
    recs, hbs, jobs = [], [], set()
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            try:
                m = json.loads(line)
            except Exception as e:
                err(f"line {ln}: not JSON ({e})"); continue
            t, k, ts = m.get("topic"), m.get("key"), m.get("ts_ns")
            if t not in TOPICS:
                err(f"line {ln}: unknown topic {t!r}"); continue
            if not isinstance(k, str) or not isinstance(ts, int):
                err(f"line {ln}: key/ts_ns missing or mistyped"); continue
            if t in ("cw.calls.v1", "cw.progress.v1"):
                parts = k.rsplit("/", 1)
                if len(parts) != 2 or not HEX16.match(parts[1]):
                    err(f"line {ln}: key {k!r} is not job/comm16hex"); continue
                job, comm = parts[0], int(parts[1], 16)
            else:
                job, comm = k, None
            jobs.add(job)
            if t == "cw.calls.v1":
                try:
                    raw = base64.b64decode(m["value_b64"], validate=True)
                except Exception as e:
                    err(f"line {ln}: bad value_b64 ({e})"); continue
                if len(raw) < 16 or raw[:4] != b"CWB1":
                    err(f"line {ln}: bad batch magic"); continue
                ver, rsz = np.frombuffer(raw[4:8], '<u2')
                cnt, rsv = np.frombuffer(raw[8:16], '<u4')
                if ver != 1 or rsz != 64 or rsv != 0 or len(raw) != 16 + 64 * int(cnt) or cnt == 0:
                    err(f"line {ln}: batch header ver={ver} size={rsz} count={cnt} reserved={rsv} len={len(raw)}"); continue
                R = np.frombuffer(raw[16:], REC_DT)
                if np.any(R['comm'] != np.uint64(comm)):
                    err(f"line {ln}: record comm differs from the key's")
                recs.append(R)
                continue
            v = m.get("value")
            if not isinstance(v, dict) or v.get("v") != 1 or v.get("job") != job:
                err(f"line {ln}: value missing, v != 1 or job != key's"); continue
            if t == "cw.progress.v1":
                if v.get("comm") != parts[1] or not isinstance(v.get("node"), str) or not isinstance(v.get("ts_ns"), int):
                    err(f"line {ln}: heartbeat comm/node/ts_ns"); continue
                for it in v.get("ranks", []):
                    s_, c_ = it.get("started"), it.get("completed")
                    if not all(isinstance(x, int) for x in (it.get("rank"), s_, c_)) or not (s_ >= c_ >= -1):
                        err(f"line {ln}: heartbeat rank entry {it}")
                    for p in it.get("p2p", []):
                        if p.get("op") not in ("send", "recv") or not (p.get("started", -2) >= p.get("completed", -2) >= -1):
                            err(f"line {ln}: heartbeat p2p entry {p}")
                hbs.append((v["node"], comm, v["ts_ns"], v["ranks"]))
            elif t == "cw.steps.v1":
                if not all(isinstance(v.get(x), int) for x in ("rank", "iteration", "t_start_ns", "t_end_ns")) or v["t_end_ns"] < v["t_start_ns"]:
                    err(f"line {ln}: steps fields")
            elif t == "cw.topology.v1":
                if not all(isinstance(v.get(x), int) for x in ("rank", "world_size", "ts_ns")) or not isinstance(v.get("node"), str):
                    err(f"line {ln}: topology fields")
            elif t == "cw.hw.v1":
                if not isinstance(v.get("node"), str) or not isinstance(v.get("ts_ns"), int):
                    err(f"line {ln}: hw fields")
    if len(jobs) != 1:
        err(f"expected one job per capture, found {sorted(jobs)}")
    if not recs:
        err("no call records")
        return errs
    R = np.concatenate(recs)
    kind, op, fl = R['kind'], R['op'], R['flags']
    if np.any((kind < 1) | (kind > 3)):
        err("record kind outside 1..3")
    if np.any(op > 11) or np.any((kind != 1) & (op != 0)):
        err("record op outside 0..11 or non-zero on a non-CALL record")
    if np.any(fl & ~np.uint16(31)):
        err("unknown flag bits set")
    call = R[kind == 1]
    comp = (call['flags'] & 1) != 0
    if np.any(comp != (call['t_end_ns'] != 0)):
        err("COMPLETED set iff t_end_ns != 0 violated")
    if np.any(comp & (call['t_end_ns'] < call['t_start_ns'])):
        err("t_end_ns < t_start_ns on a completed call")
    if np.any(R['comm_rank'] < 0) or np.any(R['comm_rank'].astype(np.int64) >= R['nranks'].astype(np.int64)):
        err("comm_rank outside 0..nranks-1")
    p2p = (call['op'] == SEND) | (call['op'] == RECV)
    if np.any(p2p & ((call['peer'] < 0) | (call['peer'].astype(np.int64) >= call['nranks'].astype(np.int64)))):
        err("SEND/RECV peer is not a comm rank")
    unr = ~p2p & ~np.isin(call['op'], list(ROOTED))
    if np.any(unr & (call['peer'] != -1)):
        err("unrooted collective with peer != -1")
    init = R[kind == 2]
    if np.any(init['seq'] != 0) or np.any(init['aux'] < 1):
        err("COMM_INIT with seq != 0 or aux (nodes) < 1")
    members = defaultdict(dict)
    for x in init:
        members[int(x['comm'])][int(x['rank'])] = (int(x['comm_rank']), int(x['nranks']))
    # per-call consistency: keep the latest record of each call
    key_rank = call['rank'].astype(np.int64)
    per = defaultdict(list)
    for i in range(len(call)):
        x = call[i]
        c = int(x['comm']); r = int(x['rank'])
        if r not in members.get(c, {}):
            err(f"CALL on comm {c:016x} by rank {r} without COMM_INIT"); continue
        if members[c][r] != (int(x['comm_rank']), int(x['nranks'])):
            err(f"rank {r} comm {c:016x}: comm_rank/nranks differ from its COMM_INIT")
        o = int(x['op'])
        k = (r, c, 'c') if o not in (SEND, RECV) else (r, c, int(x['peer']), o)
        per[k].append((int(x['seq']), int(x['t_start_ns']), int(x['flags']) & 1, int(x['t_end_ns']), o, int(x['bytes'])))
    inst = {}
    for k, lst in per.items():
        byseq = {}
        for seq, ts, cflag, te, o, b in lst:
            if seq in byseq:
                p = byseq[seq]
                if p[0] != ts or p[2] != o or p[3] != b:
                    err(f"{k} seq {seq}: entry and completion records disagree")
            byseq[seq] = (ts, cflag, o, b)
        seqs = sorted(byseq)
        if seqs != list(range(len(seqs))):
            err(f"{k}: seqs not contiguous from 0 (first gap near {next((i for i, s in enumerate(seqs) if s != i), None)})")
        tss = [byseq[s][0] for s in seqs]
        if any(b < a for a, b in zip(tss, tss[1:])):
            err(f"{k}: calls entered out of seq order")
        if k[2] == 'c':
            for s in seqs:
                ts, cf, o, b = byseq[s]
                key = (k[1], s)
                if key in inst and inst[key] != (o, b):
                    err(f"collective {k[1]:016x} #{s}: members disagree on op/bytes")
                inst[key] = (o, b)
    # heartbeats: members, monotone counters, fixed period per node
    last = {}
    per_node_ts = defaultdict(set)
    for node, comm, ts, ranks in sorted(hbs, key=lambda x: x[2]):
        per_node_ts[node].add(ts)
        for it in ranks:
            r = it["rank"]
            if comm in members and r not in members[comm]:
                err(f"heartbeat of {node} on {comm:016x} lists rank {r}, not a member")
            k = (node, comm, r)
            if k in last and (it["started"] < last[k][0] or it["completed"] < last[k][1]):
                err(f"heartbeat counters went backwards for {k}")
            last[k] = (it["started"], it["completed"])
    for node, tss in per_node_ts.items():
        d = np.diff(sorted(tss)) / 1e9
        if len(d) > 2 and (d.max() - d.min()) > 0.25 * np.median(d) + 0.05:
            err(f"{node}: heartbeat period not fixed ({d.min():.2f}..{d.max():.2f} s)")
    return errs


def main():
    bad = 0
    for p in sys.argv[1:]:
        e = check(p)
        print(f"{p}: {'OK' if not e else 'REJECTED'}")
        for x in e:
            print("   ", x)
        bad |= bool(e)
    sys.exit(1 if bad else 0)


if __name__ == '__main__':
    main()
