#!/usr/bin/env python3
"""Check frontier/ captures against the wire spec (wire-v1.md), independently of commwatch.

  check.py CAPTURE.cwcap [...]      (a NAME.truth.json beside a capture adds job-level checks)

Checks: every line is a capture message of a contract topic with an integer ts_ns; keys
(`{job}/{comm:016x}` or `{job}`); call batches (magic, version, record size, count, reserved,
every record's comm = the key's); records (kind, op, flag bits, GPU_TIMED xor ENQUEUED,
COMPLETED <=> t_end, t_end >= t_start, COMPLETION_LOST never with COMPLETED, rank in the world,
comm_rank < nranks, one nranks per comm, peer of SEND/RECV a valid other comm rank and -1 for
collectives, COMM_INIT seq 0 and aux = nodes); seq per (rank, comm) strictly increasing among
entry records and among completed records, contiguous from 0 (p2p per (rank, comm, peer, op));
heartbeats (fields, completed <= started, started never going back per rank); topology (one
per rank, world_size); steps (t_end > t_start, iterations increasing); hw samples.
"""
import base64
import json
import os
import sys

import numpy as np

REC = np.dtype([("kind", "u1"), ("op", "u1"), ("flags", "<u2"), ("rank", "<i4"),
                ("comm", "<u8"), ("seq", "<u8"), ("t_start_ns", "<i8"), ("t_end_ns", "<i8"),
                ("bytes", "<u8"), ("comm_rank", "<i4"), ("peer", "<i4"), ("nranks", "<u4"),
                ("aux", "<u4")])
TOPICS = {"cw.calls.v1", "cw.progress.v1", "cw.topology.v1", "cw.steps.v1", "cw.hw.v1"}
HEX = set("0123456789abcdef")


def _is_comm_hex(s):
    return isinstance(s, str) and len(s) == 16 and set(s) <= HEX


def check_capture(path, truth=None):
    errs = []

    def err(msg):
        if len(errs) < 30:
            errs.append(msg)
    if truth is None:
        tp = path[:-len(".cwcap")] + ".truth.json"
        if os.path.exists(tp):
            truth = json.load(open(tp))
    job = truth["job"] if truth else None
    world = truth["world"] if truth else None
    batches = []
    order = 0
    hb_last = {}
    topo = {}
    steps_last = {}
    last_ts = None
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            try:
                m = json.loads(line)
            except ValueError:
                err("line %d: not JSON" % ln)
                continue
            t = m.get("topic")
            k = m.get("key")
            ts = m.get("ts_ns")
            if t not in TOPICS:
                err("line %d: topic %r" % (ln, t))
                continue
            if not isinstance(ts, int) or ts <= 0:
                err("line %d: ts_ns %r" % (ln, ts))
            if last_ts is not None and ts < last_ts:
                err("line %d: lines not sorted by ts_ns" % ln)
            last_ts = ts
            if not isinstance(k, str):
                err("line %d: key %r" % (ln, k))
                continue
            if t in ("cw.calls.v1", "cw.progress.v1"):
                kj, _, kc = k.rpartition("/")
                if not _is_comm_hex(kc) or (job and kj != job):
                    err("line %d: key %r" % (ln, k))
                    continue
            elif job and k != job:
                err("line %d: key %r" % (ln, k))
            if t == "cw.calls.v1":
                if "value_b64" not in m:
                    err("line %d: calls without value_b64" % ln)
                    continue
                raw = base64.b64decode(m["value_b64"])
                if len(raw) < 16 or raw[:4] != b"CWB1":
                    err("line %d: bad batch header" % ln)
                    continue
                ver, rsz = np.frombuffer(raw[4:8], "<u2")
                cnt, res = np.frombuffer(raw[8:16], "<u4")
                if ver != 1 or rsz != 64 or res != 0 or len(raw) != 16 + 64 * int(cnt) or cnt == 0:
                    err("line %d: header ver %d size %d count %d reserved %d len %d" % (ln, ver, rsz, cnt, res, len(raw)))
                    continue
                recs = np.frombuffer(raw[16:], REC)
                if (recs["comm"] != np.uint64(int(kc, 16))).any():
                    err("line %d: record comm differs from key" % ln)
                batches.append((recs, np.arange(order, order + len(recs))))
                order += len(recs)
                continue
            v = m.get("value")
            if not isinstance(v, dict) or v.get("v") != 1 or (job and v.get("job") != job):
                err("line %d: value must be an object with v=1 and the job" % ln)
                continue
            if t == "cw.progress.v1":
                for fld in ("node", "ts_ns", "comm", "ranks"):
                    if fld not in v:
                        err("line %d: heartbeat lacks %s" % (ln, fld))
                if v.get("comm") != kc:
                    err("line %d: heartbeat comm %r vs key" % (ln, v.get("comm")))
                for e in v.get("ranks", []):
                    for fld in ("rank", "started", "completed", "t_last_start_ns", "t_last_end_ns"):
                        if not isinstance(e.get(fld), int):
                            err("line %d: heartbeat rank entry lacks %s" % (ln, fld))
                    if e["completed"] > e["started"] or e["completed"] < -1:
                        err("line %d: rank %d completed %d > started %d" % (ln, e["rank"], e["completed"], e["started"]))
                    key = (v["node"], kc, e["rank"])
                    prev = hb_last.get(key)
                    if prev is not None and (v["ts_ns"] <= prev[0] or e["started"] < prev[1] or e["completed"] < prev[2]):
                        err("line %d: heartbeat of rank %d goes back" % (ln, e["rank"]))
                    hb_last[key] = (v["ts_ns"], e["started"], e["completed"])
                    for p in e.get("p2p", []):
                        if p.get("op") not in ("send", "recv") or not isinstance(p.get("peer"), int) or \
                                p["completed"] > p["started"]:
                            err("line %d: bad p2p entry %r" % (ln, p))
            elif t == "cw.topology.v1":
                for fld in ("ts_ns", "rank", "world_size", "node", "local_rank"):
                    if fld not in v:
                        err("line %d: topology lacks %s" % (ln, fld))
                if world and v.get("world_size") != world:
                    err("line %d: world_size %r" % (ln, v.get("world_size")))
                if v.get("rank") in topo:
                    err("line %d: second topology of rank %r" % (ln, v.get("rank")))
                topo[v.get("rank")] = v
                co = v.get("coords")
                if co is not None and not all(isinstance(x, int) and x >= 0 for x in co.values()):
                    err("line %d: coords %r" % (ln, co))
            elif t == "cw.steps.v1":
                for fld in ("rank", "iteration", "t_start_ns", "t_end_ns"):
                    if not isinstance(v.get(fld), int):
                        err("line %d: steps lacks %s" % (ln, fld))
                if v["t_end_ns"] <= v["t_start_ns"]:
                    err("line %d: step ends before it starts" % ln)
                if v["rank"] in steps_last and v["iteration"] <= steps_last[v["rank"]]:
                    err("line %d: iteration goes back on rank %d" % (ln, v["rank"]))
                steps_last[v["rank"]] = v["iteration"]
                for pk, pv in v.get("phases", {}).items():
                    if pk not in ("forward_ms", "backward_ms", "optimizer_ms") or not pv >= 0:
                        err("line %d: phase %s=%r" % (ln, pk, pv))
            elif t == "cw.hw.v1":
                for fld in ("node", "ts_ns"):
                    if fld not in v:
                        err("line %d: hw lacks %s" % (ln, fld))
    if world and topo and sorted(topo) != list(range(world)):
        err("topology covers %d of %d ranks" % (len(topo), world))
    if not batches:
        err("no call records")
        return errs
    r = np.concatenate([b[0] for b in batches])
    o = np.concatenate([b[1] for b in batches])
    kind, op, fl = r["kind"], r["op"], r["flags"]
    call = kind == 1
    if not np.isin(kind, [1, 2, 3]).all():
        err("record kind outside 1..3")
    if (op > 11).any() or (op[call] == 0).any() or (op[~call] != 0).any():
        err("record op out of range / 0 for a call / set for init-destroy")
    if (fl & ~np.uint16(0x1F)).any():
        err("unknown flag bits")
    if ((fl & 2) & ((fl & 8) >> 2)).any():
        err("GPU_TIMED and ENQUEUED together")
    comp = (fl & 1) != 0
    if (comp & ((fl & 16) != 0)).any():
        err("COMPLETED with COMPLETION_LOST")
    if (call & (comp != (r["t_end_ns"] != 0))).any():
        err("COMPLETED does not match t_end_ns")
    if (comp & (r["t_end_ns"] < r["t_start_ns"])).any():
        err("t_end_ns before t_start_ns")
    if world and ((r["rank"] < 0) | (r["rank"] >= world)).any():
        err("rank outside the world")
    if ((r["comm_rank"] < 0) | (r["comm_rank"].astype(np.int64) >= r["nranks"].astype(np.int64))).any():
        err("comm_rank >= nranks")
    p2p = call & ((op == 6) | (op == 7))
    if (p2p & ((r["peer"] < 0) | (r["peer"].astype(np.int64) >= r["nranks"].astype(np.int64)) |
               (r["peer"] == r["comm_rank"]))).any():
        err("bad SEND/RECV peer")
    if (call & ~p2p & np.isin(op, [1, 2, 3, 8, 9]) & (r["peer"] != -1)).any():
        err("non-rooted collective with a peer")
    init = kind == 2
    if (init & ((r["seq"] != 0) | (r["aux"] < 1))).any():
        err("COMM_INIT seq/aux")
    # one size per comm, one comm_rank per (comm, rank)
    cm = r["comm"]
    u, inv = np.unique(cm, return_inverse=True)
    nr = r["nranks"].astype(np.int64)
    mn = np.full(len(u), 1 << 40)
    mx = np.full(len(u), -1)
    np.minimum.at(mn, inv, nr)
    np.maximum.at(mx, inv, nr)
    if (mn != mx).any():
        err("nranks differs within a comm")
    key = inv.astype(np.int64) * (1 << 22) + r["rank"].astype(np.int64)
    ks = np.unique(np.stack([key, r["comm_rank"].astype(np.int64)]), axis=1)
    if len(np.unique(ks[0])) != ks.shape[1]:
        err("a rank has two comm_ranks in one comm")
    # seq order: (rank, comm[, peer, op]) among entry records and among completed records
    grp = key * (1 << 14) + np.where(p2p, r["peer"].astype(np.int64) * 2 + (op == 7), (1 << 14) - 1)
    for sel, what in ((call & ~comp & ((fl & 16) == 0), "entry"), (call & comp, "completed")):
        g = grp[sel]
        s = r["seq"][sel].astype(np.int64)
        oo = o[sel]
        ix = np.lexsort((oo, g))
        g, s = g[ix], s[ix]
        same = g[1:] == g[:-1]
        if (same & (s[1:] <= s[:-1])).any():
            err("seq not strictly increasing among %s records of a rank and comm" % what)
    g = grp[call]
    s = r["seq"][call].astype(np.int64)
    pairs = np.unique(np.stack([g, s]), axis=1)
    ug, cnt = np.unique(pairs[0], return_counts=True)
    mxs = np.full(len(ug), -1)
    np.maximum.at(mxs, np.searchsorted(ug, pairs[0]), pairs[1])
    if (mxs + 1 != cnt).any():
        err("seq not contiguous from 0 for %d (rank, comm) streams" % int((mxs + 1 != cnt).sum()))
    return errs


def main():
    bad = 0
    for p in sys.argv[1:]:
        e = check_capture(p)
        print("%s: %s" % (os.path.basename(p), "ok" if not e else "; ".join(e)))
        bad += bool(e)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
