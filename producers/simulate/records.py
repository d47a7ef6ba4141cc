"""Call records (contract section 1) built as 64-bit words, and call batches (2.1) packed
so that one base64 pass encodes them all.

>>> cols = words(3)
>>> cols[:] = 0
>>> cols[0] = word0(wire.KIND_CALL, wire.OP_SEND, wire.FLAG_COMPLETED, np.array([7, 8, 9]))
>>> cols[6] = pair(np.array([1, 2, 3]), -1)
>>> p = pack([cols], np.array([2, 1]))
>>> a = bytes(p.buf[p.start[0]:p.start[0] + p.size[0]])
>>> recs = wire.decode_batch(a)
>>> recs["rank"].tolist(), recs["op"].tolist(), recs["peer"].tolist(), int(recs["flags"][0])
([7, 8], [6, 6], [-1, -1], 1)
>>> wire.decode_batch(bytes(p.buf[p.start[1]:p.start[1] + p.size[1]]))["comm_rank"].tolist()
[3]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commwatch import wire

U64 = np.uint64
WORD = np.dtype("<u8")  # records are little-endian on every host
HEADER_WORD = int.from_bytes(wire.BATCH_HEADER.pack(wire.BATCH_MAGIC, wire.BATCH_VERSION, wire.RECORD_SIZE, 0, 0)[:8],
                             "little")  # magic, version, record size; the next word is count | reserved << 32


def words(n: int) -> np.ndarray:
    """(8, n) column-major record words: word k of record j is ``cols[k, j]``."""
    return np.empty((8, n), dtype=WORD)


def word0(kind: int, op: np.ndarray | int, flags: np.ndarray | int, rank: np.ndarray) -> np.ndarray:
    """kind u8 | op u8 | flags u16 | rank i32."""
    return (np.asarray(rank, dtype=np.int64).astype(U64) << U64(32)) | (np.asarray(flags, dtype=U64) << U64(16)) \
        | (np.asarray(op, dtype=U64) << U64(8)) | U64(kind)


def pair(lo: np.ndarray, hi: np.ndarray | int) -> np.ndarray:
    """Two 32-bit fields (lo first) as one word; negative values as two's complement."""
    return (np.asarray(hi, dtype=np.int64).astype(U64) << U64(32)) | (np.asarray(lo, dtype=np.int64).astype(U64)
                                                                       & U64(0xFFFFFFFF))


@dataclass
class Packed:
    """Call batches laid out for one base64 pass: batch i is ``buf[start[i]:start[i] + size[i]]``,
    every start a multiple of 3 and each batch followed by zero bytes up to one."""

    buf: memoryview
    start: np.ndarray
    size: np.ndarray
    grid: np.ndarray  # the rows behind `buf`


def pack(parts: list[np.ndarray], counts: np.ndarray, order: np.ndarray | None = None,
         grid: np.ndarray | None = None) -> Packed:
    """Batches of ``counts[i]`` records each, taking in turn the records ``order`` picks
    (indices into `parts` read as one column set; all of them, in order, when None).
    `grid`, the ``Packed.grid`` of an earlier call whose buffer is no longer read, is reused
    when big enough (fresh memory costs page faults).

    Rows of 64 bytes: batch i's header fills the last 16 bytes of row ``h[i]`` (a multiple of
    3, so its byte offset ``64*h + 48`` is too) and its records the rows after it; the next
    batch starts at the next multiple of 3 rows. The bytes in between are never read.
    Records are scattered to their rows straight from the column sets; those not picked
    land in the first row after them."""
    counts = np.asarray(counts, dtype=np.int64)
    span = (counts + 3) // 3 * 3  # header row + records, rounded up to 3 rows
    h = np.cumsum(span) - span
    n_rows = int(span.sum())
    if grid is None or len(grid) < n_rows + 1:
        grid = np.empty((n_rows + n_rows // 4 + 1, 8), dtype=WORD)
    first = np.cumsum(counts) - counts
    dest = np.repeat(h + 1 - first, counts) + np.arange(int(counts.sum()))
    if order is not None:
        picked = dest
        dest = np.full(sum(p.shape[1] for p in parts), n_rows, dtype=np.int64)  # not picked
        dest[order] = picked
    a = 0
    for p in parts:
        grid[dest[a:a + p.shape[1]]] = p.T
        a += p.shape[1]
    grid[h, 6] = HEADER_WORD
    grid[h, 7] = counts
    size = wire.BATCH_HEADER_SIZE + counts * wire.RECORD_SIZE
    tail = h + 1 + counts
    padded = tail < h + span  # a row after the last record: zero the pad bytes base64 reads
    grid[tail[padded], 0] = 0
    buf = memoryview(grid.view(np.uint8).reshape(-1)[:n_rows * wire.RECORD_SIZE])
    return Packed(buf, h * wire.RECORD_SIZE + 48, size, grid)
