"""The 64-byte call record and the call batch of wire contract v1 (sections 1, 2.1).

One numpy structured dtype describes the record; `nccl-patch/include/commwatch_record.h`
declares the same layout in C, and a test proves the two agree.

>>> recs = np.zeros(2, dtype=RECORD_DTYPE)
>>> recs["kind"] = KIND_CALL; recs["op"] = OP_ALLREDUCE; recs["comm"] = 0xABC
>>> recs["peer"] = -1
>>> out = decode_batch(encode_batch(recs), comm=0xABC)
>>> int(out["comm"][1])
2748
"""

from __future__ import annotations

import functools
import re
import struct

import numpy as np

RECORD_SIZE = 64
BATCH_MAGIC = b"CWB1"
BATCH_VERSION = 1
BATCH_HEADER = struct.Struct("<4sHHII")
BATCH_HEADER_SIZE = BATCH_HEADER.size  # 16
FAST_CHECK_RECORDS = 64  # batches up to this size are checked by a byte pattern, not numpy

RECORD_DTYPE = np.dtype(
    [
        ("kind", "<u1"),
        ("op", "<u1"),
        ("flags", "<u2"),
        ("rank", "<i4"),
        ("comm", "<u8"),
        ("seq", "<u8"),
        ("t_start_ns", "<i8"),
        ("t_end_ns", "<i8"),
        ("bytes", "<u8"),
        ("comm_rank", "<i4"),
        ("peer", "<i4"),
        ("nranks", "<u4"),
        ("aux", "<u4"),
    ]
)
assert RECORD_DTYPE.itemsize == RECORD_SIZE

KIND_CALL = 1
KIND_COMM_INIT = 2
KIND_COMM_DESTROY = 3
KINDS = {KIND_CALL: "CALL", KIND_COMM_INIT: "COMM_INIT", KIND_COMM_DESTROY: "COMM_DESTROY"}

FLAG_COMPLETED = 1  # t_end_ns is valid: completion was observed
FLAG_GPU_TIMED = 2  # t_start_ns / t_end_ns are device start / end, converted to host CLOCK_REALTIME
FLAG_GRAPH_CAPTURED = 4
FLAG_ENQUEUED = 8  # t_start_ns is a host enqueue on an asynchronous stream, not arrival
FLAG_COMPLETION_LOST = 16  # the probe gave up on this call's completion: not a wait
FLAGS_KNOWN = FLAG_COMPLETED | FLAG_GPU_TIMED | FLAG_GRAPH_CAPTURED | FLAG_ENQUEUED | FLAG_COMPLETION_LOST

OP_UNKNOWN = 0
OP_ALLREDUCE = 1
OP_ALLGATHER = 2
OP_REDUCESCATTER = 3
OP_BROADCAST = 4
OP_REDUCE = 5
OP_SEND = 6
OP_RECV = 7
OP_ALLTOALL = 8
OP_BARRIER = 9
OP_GATHER = 10
OP_SCATTER = 11
OP_NAMES = (
    "Unknown",
    "AllReduce",
    "AllGather",
    "ReduceScatter",
    "Broadcast",
    "Reduce",
    "Send",
    "Recv",
    "AllToAll",
    "Barrier",
    "Gather",
    "Scatter",
)
OP_MAX = len(OP_NAMES) - 1
P2P_OPS = (OP_SEND, OP_RECV)


class WireError(ValueError):
    """A message that does not follow the wire contract; `reason` is a short stable code."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def op_name(op: int) -> str:
    return OP_NAMES[op] if 0 <= op <= OP_MAX else f"op{op}"


def empty(n: int) -> np.ndarray:
    """A zeroed record array of length n with `peer` = -1."""
    recs = np.zeros(n, dtype=RECORD_DTYPE)
    recs["peer"] = -1
    return recs


def encode_batch(records: np.ndarray) -> bytes:
    """Header + records, as written to `cw.calls.v1`."""
    if records.dtype != RECORD_DTYPE:
        records = records.astype(RECORD_DTYPE)
    header = BATCH_HEADER.pack(BATCH_MAGIC, BATCH_VERSION, RECORD_SIZE, len(records), 0)
    return header + np.ascontiguousarray(records).tobytes()


def decode_header(value: bytes) -> int:
    """Validate a batch header and return its record count."""
    if value is None or len(value) < BATCH_HEADER_SIZE:
        n = 0 if value is None else len(value)
        raise WireError("truncated", f"batch of {n} bytes is shorter than its 16-byte header")
    magic, version, rsize, count, _reserved = BATCH_HEADER.unpack_from(value, 0)
    if magic != BATCH_MAGIC:
        raise WireError("bad_magic", f"batch magic {magic!r} is not {BATCH_MAGIC!r}")
    if version != BATCH_VERSION:
        raise WireError("bad_version", f"batch version {version} is not {BATCH_VERSION}")
    if rsize != RECORD_SIZE:
        raise WireError("bad_record_size", f"record size {rsize} is not {RECORD_SIZE}")
    body = len(value) - BATCH_HEADER_SIZE
    if body % RECORD_SIZE:
        raise WireError("truncated", f"batch body of {body} bytes is not a whole number of records")
    if body // RECORD_SIZE != count:
        raise WireError("count_mismatch", f"header says {count} records, value holds {body // RECORD_SIZE}")
    return count


def decode_batch(value: bytes, comm: int | None = None) -> np.ndarray:
    """Decode and validate one `cw.calls.v1` value into a record array (read-only view).

    `comm`, when given (from the message key), must equal every record's comm.
    Raises `WireError` with a reason code on any contract violation.
    """
    count = check_batch(value, comm)
    return np.frombuffer(value, dtype=RECORD_DTYPE, count=count, offset=BATCH_HEADER_SIZE)


def check_batch(value: bytes, comm: int | None = None) -> int:
    """Validate one `cw.calls.v1` value as `decode_batch` does, without building the array;
    returns the record count.

    Small batches (the common case: a node's calls of one comm over ~100 ms) are checked by
    one compiled byte pattern, which costs far less than numpy's per-call overhead; a batch
    the pattern refuses goes through `validate_records` for the exact reason.
    """
    count = decode_header(value)
    if count <= FAST_CHECK_RECORDS and _records_pattern(comm).fullmatch(value, BATCH_HEADER_SIZE) is not None:
        return count
    validate_records(np.frombuffer(value, dtype=RECORD_DTYPE, count=count, offset=BATCH_HEADER_SIZE), comm)
    return count



@functools.lru_cache(maxsize=4096)
def _records_pattern(comm: int | None) -> re.Pattern:
    """Records that pass `validate_records`: kind 1-3, op <= OP_MAX, rank >= -1, the comm,
    non-negative start and end times (little-endian: the sign is the top bit of the last byte)."""
    comm_bytes = rb".{8}" if comm is None else re.escape(struct.pack("<Q", comm & 0xFFFFFFFFFFFFFFFF))
    record = (
        b"[\\x%02x-\\x%02x][\\x00-\\x%02x].." % (KIND_CALL, KIND_COMM_DESTROY, OP_MAX)
        + rb"(?:...[\x00-\x7f]|\xff\xff\xff\xff)"  # rank: >= 0, or -1
        + comm_bytes
        + rb".{15}[\x00-\x7f]"  # seq, t_start_ns
        + rb".{7}[\x00-\x7f]"  # t_end_ns
        + rb".{24}"
    )
    return re.compile(rb"(?:" + record + rb")*", re.DOTALL)


def validate_records(recs: np.ndarray, comm: int | None = None) -> None:
    """Vectorised checks of kinds, ops, comm and times; raises `WireError`."""
    if len(recs) == 0:
        return
    kinds = recs["kind"]
    bad = (kinds < KIND_CALL) | (kinds > KIND_COMM_DESTROY)
    if bad.any():
        i = int(np.argmax(bad))
        raise WireError("unknown_kind", f"record {i} has kind {int(kinds[i])}")
    ops = recs["op"]
    bad = ops > OP_MAX
    if bad.any():
        i = int(np.argmax(bad))
        raise WireError("unknown_op", f"record {i} has op {int(ops[i])}")
    if comm is not None:
        bad = recs["comm"] != np.uint64(comm)
        if bad.any():
            i = int(np.argmax(bad))
            raise WireError(
                "comm_mismatch", f"record {i} has comm {int(recs['comm'][i]):016x}, key says {comm:016x}"
            )
    if (recs["t_start_ns"] < 0).any() or (recs["t_end_ns"] < 0).any():
        raise WireError("bad_time", "negative timestamp in batch")
    if (recs["rank"] < -1).any():
        raise WireError("bad_rank", "global rank below -1 (unknown) in batch")


def comm_hex(comm: int) -> str:
    """Communicator id as the contract's 16 lowercase hex digits."""
    return f"{int(comm) & 0xFFFFFFFFFFFFFFFF:016x}"


def parse_comm(text: str) -> int:
    if len(text) != 16:
        raise WireError("bad_key", f"comm {text!r} is not 16 hex digits")
    try:
        return int(text, 16)
    except ValueError:
        raise WireError("bad_key", f"comm {text!r} is not 16 hex digits") from None
