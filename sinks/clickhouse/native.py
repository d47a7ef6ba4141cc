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


_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def hex_strings(values: np.ndarray) -> bytes:
    """A String column of uint64 values as 16 lowercase hex digits each (the comm id format).

    >>> hex_strings(np.array([255], dtype=np.uint64))
    b'\\x1000000000000000ff'
    """
    values = np.asarray(values, dtype=np.uint64)
    starts = np.flatnonzero(values[1:] != values[:-1]) + 1
    if len(starts) * 16 < len(values):  # long runs (a batch is one comm): one string per run
        bounds = np.concatenate(([0], starts, [len(values)]))
        return b"".join((b"\x10" + f"{int(values[a]):016x}".encode()) * int(b - a)
                        for a, b in zip(bounds[:-1], bounds[1:]))
    raw = np.ascontiguousarray(values, dtype=">u8").view(np.uint8).reshape(-1, 8)
    out = np.empty((len(raw), 17), dtype=np.uint8)
    out[:, 0] = 16  # the varint length of each string
    out[:, 1::2] = _HEX_DIGITS[raw >> 4]
    out[:, 2::2] = _HEX_DIGITS[raw & 15]
    return out.tobytes()


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
