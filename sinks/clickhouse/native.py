"""ClickHouse `Native` blocks built straight from numpy columns (the fast insert path).

A Native block is: column count, row count (varints), then per column its name, its type
and its data. Fixed-width columns are the little-endian bytes of a numpy array, so a batch
of call records becomes a block without one Python object per row.

>>> blk = native_block(2, [("rank", "Int32", np.array([3, 4], dtype="<i4"))])
>>> blk[:2]
b'\\x01\\x02'
"""

from __future__ import annotations

import numpy as np


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def native_string(s: str | bytes) -> bytes:
    raw = s.encode("utf-8") if isinstance(s, str) else s
    return varint(len(raw)) + raw


def string_runs(runs: list[tuple[str, int]]) -> bytes:
    """A String column made of runs of one value each: [(value, count), ...]."""
    return b"".join(native_string(v) * n for v, n in runs)


def native_block(rows: int, columns: list[tuple[str, str, np.ndarray | bytes]]) -> bytes:
    """`columns` is [(name, ClickHouse type, numpy array or pre-encoded bytes)]."""
    parts = [varint(len(columns)), varint(rows)]
    for name, typ, data in columns:
        if isinstance(data, np.ndarray):
            if len(data) != rows:
                raise ValueError(f"column {name} has {len(data)} values for {rows} rows")
            data = np.ascontiguousarray(data).tobytes()
        parts += [native_string(name), native_string(typ), data]
    return b"".join(parts)
