"""Decoded contract messages -> ClickHouse rows.

Calls stay columnar: a `CallBatch` becomes numpy columns (completed CALL records only)
and then one Native block; `comm` becomes 16 lowercase hex digits on the way, the format
of every table and wire key. The JSON topics are low-volume and become plain row lists.

The internal topic `cw.internal.windows.v2` (key `{job}`) carries the live workers'
window statistics, one JSON object per communicator window with per-rank arrays:
`{"v": 2, "job", "comm", "window_end_ns", "instances", "ranks": [...], "mean_lag_ms": [...],
"last_share": [...], "clock_offset_ms": [...], "inside": [...]}` (`streams/window_message.py`);
the sink stores one row per rank and window. `clock_offset_ms` is the rank's clock minus
the job's reference clock; `inside` is kept as JSON in the `extra` column.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable

import numpy as np

from commwatch import messages, topics
from commwatch.topics import WINDOWS
from commwatch.decode import CallBatch
from commwatch.sinks.clickhouse.native import hex_strings, native_block, string_runs
from commwatch.sinks.clickhouse.schema import NS, OP_ENUM
from commwatch.wire import FLAG_COMPLETED, KIND_CALL, WireError

MS = 1_000_000

CALL_TYPES = (
    ("comm", "String"), ("seq", "UInt64"), ("rank", "Int32"), ("op", OP_ENUM), ("peer", "Int32"),
    ("bytes", "UInt64"), ("start", NS), ("end", NS), ("start_corrected", NS),
)


def call_columns(batch: CallBatch, offsets_ns: dict[int, int] | None = None) -> dict[str, np.ndarray]:
    """Completed CALL records of a batch as columns; `offsets_ns` maps rank -> clock offset."""
    r = batch.records
    keep = (r["kind"] == KIND_CALL) & ((r["flags"] & FLAG_COMPLETED) != 0)
    r = r[keep]
    start = r["t_start_ns"].astype(np.int64)
    corrected = start
    if offsets_ns:
        ranks = r["rank"]
        known = np.fromiter(offsets_ns.keys(), dtype=np.int64)
        vals = np.fromiter(offsets_ns.values(), dtype=np.int64)
        order = np.argsort(known)
        known, vals = known[order], vals[order]
        pos = np.clip(np.searchsorted(known, ranks), 0, len(known) - 1)
        hit = known[pos] == ranks
        corrected = start - np.where(hit, vals[pos], 0)
    return {
        "comm": r["comm"], "seq": r["seq"], "rank": r["rank"], "op": r["op"].astype(np.int8),
        "peer": r["peer"], "bytes": r["bytes"], "start": start, "end": r["t_end_ns"].astype(np.int64),
        "start_corrected": corrected,
    }


def calls_block(chunks: list[tuple[str, dict[str, np.ndarray]]]) -> tuple[int, bytes]:
    """(rows, Native block) for [(job, columns)]."""
    n = sum(len(c["seq"]) for _, c in chunks)
    cols: list[tuple[str, str, Any]] = [("job", "String", string_runs([(job, len(c["seq"])) for job, c in chunks]))]
    for name, typ in CALL_TYPES:
        values = np.concatenate([c[name] for _, c in chunks]) if chunks else np.zeros(0, dtype=np.uint64)
        cols.append((name, typ, hex_strings(values) if name == "comm" else values))
    return n, native_block(n, cols)


def _ms(ns: int) -> int:
    return int(ns) // MS


INCIDENT_COLUMNS = (
    "v", "job", "incident", "kind", "severity", "status", "ts_ns", "opened_ns", "opened_at", "updated_at",
    "resolved_at", "culprit_ranks", "culprit_nodes", "comm", "summary", "evidence",
)


def incident_row(m: dict) -> list:
    return [
        m["v"], m["job"], m["incident"], m["kind"], m["severity"], m["status"], m["ts_ns"], m["opened_ns"],
        _ms(m["opened_ns"]), _ms(m["ts_ns"]), _ms(m["ts_ns"]) if m["status"] == "resolved" else None,
        m["culprit_ranks"], m["culprit_nodes"], m["comm"], m["summary"],
        json.dumps(m["evidence"], separators=(",", ":"), allow_nan=False),
    ]


STEPS_COLUMNS = ("job", "rank", "iteration", "start", "end", "duration_ms", "phases")


def steps_row(m: dict) -> list:
    return [m["job"], m["rank"], m["iteration"], m["t_start_ns"], m["t_end_ns"],
            (m["t_end_ns"] - m["t_start_ns"]) / MS, {k: float(v) for k, v in (m.get("phases") or {}).items()}]


HW_COLUMNS = (
    "job", "node", "ts", "rank", "gpu", "sm_clock_mhz", "mem_clock_mhz", "power_w", "temp_c", "util_pct",
    "throttle_reasons", "ecc_dbe", "xid", "nvlink_errors", "ib",
)


def hw_row(m: dict) -> list:
    nums = [None if m.get(k) is None else float(m[k])
            for k in ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temp_c", "util_pct")]
    ints = [max(0, int(m.get(k) or 0)) for k in ("throttle_reasons", "ecc_dbe", "xid", "nvlink_errors")]
    rank = m.get("rank")
    return [m["job"], m["node"], _ms(m["ts_ns"]), -1 if rank is None else rank, m.get("gpu") or "", *nums, *ints,
            json.dumps(m.get("ib") or {}, separators=(",", ":"))]


TOPOLOGY_COLUMNS = ("job", "rank", "ts", "world_size", "node", "local_rank", "gpu", "coords")


def topology_row(m: dict) -> list:
    local = m.get("local_rank")
    return [m["job"], m["rank"], _ms(m["ts_ns"]), m["world_size"], m["node"], -1 if local is None else local,
            m.get("gpu") or "", dict(m.get("coords") or {})]


WINDOW_COLUMNS = ("job", "comm", "rank", "window_end", "instances", "mean_lag_ms", "last_share",
                  "clock_offset_ms", "extra")
WINDOW_KNOWN = frozenset(WINDOW_COLUMNS) | {"window_end_ns", "v"}


WINDOW_ARRAYS = ("mean_lag_ms", "last_share", "clock_offset_ms", "inside")


def _number_or_none(v: Any) -> bool:
    return v is None or (type(v) in (int, float) and math.isfinite(v))


def window_rows(obj: Any) -> list[dict]:
    """The rows of one window message (see the module docstring), one per rank; raises
    `WireError` naming the field at fault."""
    messages._check(obj, "window", {"v": messages.INT, "job": messages.STR, "comm": messages.STR,
                                    "window_end_ns": messages.INT, "ranks": messages.LIST},
                    {"instances": messages.INT})
    if obj["v"] != 2:
        raise WireError("bad_version", f"window message version {obj['v']!r} is not 2")
    messages._time(obj, "window", "window_end_ns")
    ranks = obj["ranks"]
    if not all(type(r) is int for r in ranks):
        raise WireError("bad_field", "window.ranks holds a value that is not an integer")
    arrays = {}
    for name in WINDOW_ARRAYS:
        values = obj.get(name)
        if values is None:
            continue
        if not isinstance(values, list) or len(values) != len(ranks) or not all(map(_number_or_none, values)):
            raise WireError("bad_field", f"window.{name} is not a list of numbers, one per rank")
        arrays[name] = values
    base = {"job": obj["job"], "comm": obj["comm"], "window_end_ns": obj["window_end_ns"],
            "instances": obj.get("instances") or 0}
    return [{**base, "rank": rank, **{name: values[i] for name, values in arrays.items()}}
            for i, rank in enumerate(ranks)]


def window_row(m: dict) -> list:
    extra = {k: v for k, v in m.items() if k not in WINDOW_KNOWN}
    return [m["job"], m["comm"], m["rank"], _ms(m["window_end_ns"]), max(0, int(m.get("instances") or 0)),
            float(m.get("mean_lag_ms") or 0.0), float(m.get("last_share") or 0.0),
            float(m.get("clock_offset_ms") or 0.0), json.dumps(extra, separators=(",", ":"))]


# contract topic -> (table, columns, row builder)
ROW_TABLES: dict[str, tuple[str, tuple[str, ...], Callable[[dict], list]]] = {
    topics.ALERTS: ("incidents", INCIDENT_COLUMNS, incident_row),
    topics.STEPS: ("steps", STEPS_COLUMNS, steps_row),
    topics.HW: ("hw", HW_COLUMNS, hw_row),
    topics.TOPOLOGY: ("topology", TOPOLOGY_COLUMNS, topology_row),
    WINDOWS: ("windows", WINDOW_COLUMNS, window_row),
}


def decode_window(value: bytes, key_job: str | None) -> list[dict]:
    """The rows of one message of `cw.internal.windows.v2`; raises `WireError`."""
    obj = messages.loads(value)
    rows = window_rows(obj)
    if key_job and obj["job"] != key_job:
        raise WireError("job_mismatch", f"window job {obj['job']!r} differs from key job {key_job!r}")
    return rows
