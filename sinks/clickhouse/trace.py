"""A job's calls as a Chrome trace-event / Perfetto JSON file.

One process per job, one track (thread) per rank; each completed call is a complete event
(`ph: "X"`) with times in microseconds, shifted by the rank's estimated clock offset (the
`clock-offsets` query: median distance of the rank's completion times from each
collective's median completion), so that a collective's completions line up across ranks.
Incidents are global instant events (`ph: "i"`, `s: "g"`) at their opening and resolution.
"""

from __future__ import annotations

import json
from typing import IO, Any

from commwatch.sinks.clickhouse.queries import NAMED

PID = 1


def _window(column: str, t_from: int | None, t_to: int | None) -> str:
    cond = ""
    if t_from is not None:
        cond += f" AND toUnixTimestamp64Nano({column}) >= {int(t_from)}"
    if t_to is not None:
        cond += f" AND toUnixTimestamp64Nano({column}) <= {int(t_to)}"
    return cond


def write_trace(client: Any, job: str, out: IO[str], t_from: int | None = None, t_to: int | None = None) -> dict:
    """Write the trace of `job` (optionally limited to [t_from, t_to] ns) to `out`; returns counts."""
    offsets = {int(r): float(ms) for r, _n, ms in
               client.query(NAMED["clock-offsets"].sql, parameters={"job": job}).result_rows}
    calls = client.query(
        "SELECT rank, toString(op), comm, seq, peer, bytes, toUnixTimestamp64Nano(start), toUnixTimestamp64Nano(end) "
        "FROM calls FINAL WHERE job = {job:String}" + _window("start", t_from, t_to) + " ORDER BY rank, start",
        parameters={"job": job},
    ).result_rows
    incidents = client.query(
        "SELECT incident, kind, severity, status, opened_ns, ts_ns, culprit_ranks, culprit_nodes, summary "
        "FROM incidents FINAL WHERE job = {job:String}" + _window("opened_at", t_from, t_to) + " ORDER BY opened_ns",
        parameters={"job": job},
    ).result_rows
    out.write('{"displayTimeUnit": "ms", "otherData": ')
    out.write(json.dumps({"job": job, "clock_offsets_ms": {str(k): v for k, v in offsets.items()}}))
    out.write(', "traceEvents": [\n')
    first = True

    def emit(ev: dict) -> None:
        nonlocal first
        out.write(("" if first else ",\n") + json.dumps(ev, separators=(",", ":")))
        first = False

    emit({"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": f"job {job}"}})
    ranks = sorted({int(r[0]) for r in calls} | set(offsets))
    for rank in ranks:
        emit({"ph": "M", "name": "thread_name", "pid": PID, "tid": rank, "args": {"name": f"rank {rank}"}})
        emit({"ph": "M", "name": "thread_sort_index", "pid": PID, "tid": rank, "args": {"sort_index": rank}})
    for rank, op, comm, seq, peer, nbytes, start, end in calls:
        shift_us = offsets.get(rank, 0.0) * 1000.0
        args = {"comm": comm, "seq": seq, "bytes": nbytes}
        if peer >= 0:
            args["peer"] = peer
        emit({"ph": "X", "name": op, "cat": "nccl", "pid": PID, "tid": rank,
              "ts": round(start / 1000.0 - shift_us, 3), "dur": round(max(end - start, 0) / 1000.0, 3),
              "args": args})
    for inc, kind, sev, status, opened, ts, ranks_, nodes, summary in incidents:
        args = {"incident": inc, "culprit_ranks": list(ranks_), "culprit_nodes": list(nodes), "summary": summary}
        emit({"ph": "i", "s": "g", "name": f"{sev} {kind}", "cat": "incident", "pid": PID, "tid": 0,
              "ts": round(opened / 1000.0, 3), "args": args})
        if status == "resolved":
            emit({"ph": "i", "s": "g", "name": f"resolved {kind}", "cat": "incident", "pid": PID, "tid": 0,
                  "ts": round(ts / 1000.0, 3), "args": {"incident": inc}})
    out.write("\n]}\n")
    return {"calls": len(calls), "incidents": len(incidents), "ranks": len(ranks)}
