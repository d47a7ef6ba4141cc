"""Stage-1 window reports -> per-rank rows on `cw.internal.windows.v1` for ClickHouse.

A `window` report describes one communicator's window of collective instances with
per-rank arrays; the sink stores one row per rank and window (`sinks/clickhouse/rows.py`):
`{"job", "comm", "rank", "window_end_ns", "instances", "mean_lag_ms", "last_share", ...}`.
Per-rank fields without a column (`inside`: the share of the window the rank spent inside
this comm's calls) ride along in the sink's `extra` column; `offset_ms` lands in
`clock_offset_ms`.

>>> rows = window_rows({"type": "window", "job": "j", "ts_ns": 9, "comm": "00000000000000aa",
...                     "instances": 64, "ranks": [4, 5], "lag_ms": [0.1, 7.5],
...                     "last_share": [0.0, 1.0], "inside": [0.2, 0.01]})
>>> rows[1]
{'v': 1, 'job': 'j', 'comm': '00000000000000aa', 'rank': 5, 'window_end_ns': 9, 'instances': 64, \
'mean_lag_ms': 7.5, 'last_share': 1.0, 'inside': 0.01}
"""

from __future__ import annotations

from typing import Any

WINDOWS = "cw.internal.windows.v1"  # the sink's name for it too (sinks/clickhouse/rows.py)

PER_RANK = (("lag_ms", "mean_lag_ms"), ("last_share", "last_share"), ("offset_ms", "clock_offset_ms"),
            ("inside", "inside"))


def window_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per rank of a `window` report; [] for any other report."""
    if report.get("type") != "window":
        return []
    rows = []
    for i, rank in enumerate(report.get("ranks") or ()):
        row = {"v": 1, "job": report["job"], "comm": report["comm"], "rank": int(rank),
               "window_end_ns": int(report["ts_ns"]), "instances": int(report.get("instances", 0))}
        for src, dst in PER_RANK:
            values = report.get(src)
            if isinstance(values, list) and i < len(values):
                row[dst] = values[i]
        rows.append(row)
    return rows
