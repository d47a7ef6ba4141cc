"""Stage-1 window reports -> one message per window on `cw.internal.windows.v2` for ClickHouse.

A `window` report describes one communicator's window of collective instances with
per-rank arrays; it travels as one message (key `{job}`) with the same arrays, and the sink
stores one row per rank and window (`sinks/clickhouse/rows.py`, `decode_window`). One
message per window, not per rank: a worker watching a fast job publishes hundreds of
windows a second, and per-rank messages (8 to 1024 a window) filled its producer's buffer
until stage-1 reports and alerts queued behind them. Per-rank fields without a column
(`inside`: the share of the window the rank spent inside this comm's calls) ride along in
the sink's `extra` column; `offset_ms` lands in `clock_offset_ms`.

>>> window_message({"type": "window", "job": "j", "ts_ns": 9, "comm": "00000000000000aa",
...                 "instances": 64, "ranks": [4, 5], "lag_ms": [0.1, 7.5],
...                 "last_share": [0.0, 1.0], "inside": [0.2, 0.01]})
{'v': 2, 'job': 'j', 'comm': '00000000000000aa', 'window_end_ns': 9, 'instances': 64, \
'ranks': [4, 5], 'mean_lag_ms': [0.1, 7.5], 'last_share': [0.0, 1.0], 'inside': [0.2, 0.01]}
>>> window_message({"type": "wait", "job": "j", "ts_ns": 1}) is None
True
"""

from __future__ import annotations

from typing import Any

PER_RANK = (("lag_ms", "mean_lag_ms"), ("last_share", "last_share"), ("offset_ms", "clock_offset_ms"),
            ("inside", "inside"))


def window_message(report: dict[str, Any]) -> dict[str, Any] | None:
    """The message of a `window` report; None for any other report."""
    if report.get("type") != "window":
        return None
    ranks = [int(r) for r in report.get("ranks") or ()]
    out = {"v": 2, "job": report["job"], "comm": report["comm"], "window_end_ns": int(report["ts_ns"]),
           "instances": int(report.get("instances", 0)), "ranks": ranks}
    for src, dst in PER_RANK:
        values = report.get(src)
        if isinstance(values, list) and len(values) == len(ranks):
            out[dst] = values
    return out
