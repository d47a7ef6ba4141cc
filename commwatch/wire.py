"""The 64-byte call record and the call batch of wire contract v1 (sections 1, 2.1).

One numpy structured dtype describes the record; `nccl-patch/include/commwatch_record.h`
declares the same layout in C, and a test proves the two agree.

>>> recs = empty(2)
>>> recs["kind"] = KIND_CALL; recs["op"] = OP_ALLREDUCE; recs["comm"] = 0xABC
>>> recs["nranks"] = 2; recs["comm_rank"] = [0, 1]
>>> out = decode_batch(encode_batch(recs), comm=0xABC)
>>> int(out["comm"][1])
2748
"""

from __future__ import annotations

import struct

import numpy as np

RECORD_SIZE = 64
BATCH_MAGIC = b"CWB1"
BATCH_VERSION = 1
BATCH_HEADER = struct.Struct("<4sHHII")
BATCH_HEADER_SIZE = BATCH_HEADER.size  # 16
# Bounds of a sane record (`validate_records`); anything beyond is refused at decode.
MAX_RANKS = 1 << 20  # global ranks and communicator sizes
MAX_SEQ = 1 << 48  # a rank making a million calls a second for eight years stays below
MAX_BYTES = 1 << 44  # 16 TiB in one call
MAX_TS_NS = 1_689_906_000 << 32  # about 2200-01-01 (a multiple of 2**32): later is far future

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
    """A zeroed record array of length n with `peer` = -1 and `nranks` = 1 (a valid
    COMM_INIT-less one-rank comm until the caller fills the fields in)."""
    recs = np.zeros(n, dtype=RECORD_DTYPE)
    recs["peer"] = -1
    recs["nranks"] = 1
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
    """Validate one `cw.calls.v1` value as `decode_batch` does; returns the record count."""
    count = decode_header(value)
    validate_records(np.frombuffer(value, dtype=RECORD_DTYPE, count=count, offset=BATCH_HEADER_SIZE), comm)
    return count


def check_batches(values: list[bytes], comms: list[int]) -> list[int | WireError]:
    """Validate many `cw.calls.v1` values at once (what one consumer poll returned): one
    numpy pass over all their records. Returns, per value, its record count or the
    `WireError` that `check_batch` raises for it (found again value by value only when
    something is wrong)."""
    out: list[int | WireError] = []
    bodies, keep = [], []
    for i, value in enumerate(values):
        try:
            count = decode_header(value)
        except WireError as err:
            out.append(err)
            continue
        out.append(count)
        bodies.append(memoryview(value)[BATCH_HEADER_SIZE:])
        keep.append(i)
    if not keep:
        return out
    counts = np.array([out[i] for i in keep], dtype=np.int64)
    recs = np.frombuffer(b"".join(bodies), dtype=RECORD_DTYPE)
    want = np.repeat(np.array([comms[i] & 0xFFFFFFFFFFFFFFFF for i in keep], dtype=np.uint64), counts)
    if len(recs) == 0 or _words_ok(recs, want):
        return out
    bad = record_faults(recs, want)
    ends = np.cumsum(counts)
    per_value = np.add.reduceat(bad, ends - counts) if len(bad) else np.zeros(len(keep), np.int64)
    for j in np.flatnonzero((per_value > 0) & (counts > 0)).tolist():
        i = keep[j]
        try:
            check_batch(values[i], comms[i])
        except WireError as err:
            out[i] = err
    return out


def _checks(recs: np.ndarray, comm: int | np.ndarray | None) -> list[tuple[str, str, np.ndarray]]:
    """(reason, field, mask of records that break the rule), in the order they are reported."""
    kind, op = recs["kind"], recs["op"]
    rank, comm_rank, peer = recs["rank"], recs["comm_rank"], recs["peer"]
    nranks = recs["nranks"].astype(np.int64)
    t0, t1 = recs["t_start_ns"], recs["t_end_ns"]
    out = [
        ("unknown_kind", "kind", (kind < KIND_CALL) | (kind > KIND_COMM_DESTROY)),
        ("unknown_op", "op", (op > OP_MAX) | ((kind != KIND_CALL) & (op != OP_UNKNOWN))),
    ]
    if comm is not None:
        want = np.asarray(comm).astype(np.uint64) if isinstance(comm, np.ndarray) else np.uint64(comm)
        out.append(("comm_mismatch", "comm", recs["comm"] != want))
    out += [
        ("bad_rank", "rank", (rank < -1) | (rank >= MAX_RANKS)),
        ("bad_nranks", "nranks", (nranks < 1) | (nranks > MAX_RANKS)),
        ("bad_comm_rank", "comm_rank", (comm_rank < 0) | (comm_rank >= nranks)),
        ("bad_peer", "peer", (peer < -1) | (peer >= nranks)),
        ("bad_seq", "seq", recs["seq"] >= np.uint64(MAX_SEQ)),
        ("bad_time", "t_start_ns", (t0 < 0) | (t0 >= MAX_TS_NS)),
        ("bad_time", "t_end_ns", (t1 < 0) | (t1 >= MAX_TS_NS)),
        ("bad_bytes", "bytes", recs["bytes"] >= np.uint64(MAX_BYTES)),
        ("bad_aux", "aux", (kind == KIND_COMM_INIT) & (recs["aux"] > nranks)),
    ]
    return out


def record_faults(recs: np.ndarray, comm: int | np.ndarray | None = None) -> np.ndarray:
    """Boolean mask of the records that break a rule of `validate_records`."""
    bad = np.zeros(len(recs), dtype=bool)
    for _reason, _field, mask in _checks(recs, comm):
        bad |= mask
    return bad


def validate_records(recs: np.ndarray, comm: int | np.ndarray | None = None) -> None:
    """Check every field of every record at once (numpy over the whole array); raises
    `WireError(reason, detail)` naming the first record and field that break a rule.

    `comm` is the communicator the records must carry: one id for a batch (from its key),
    or one per record when many batches are checked together.

    Rules (beyond kind and op): `rank` in [-1, MAX_RANKS) (-1: unknown); `nranks` in
    [1, MAX_RANKS]; `comm_rank` in [0, nranks); `peer` in [-1, nranks); `seq` below
    MAX_SEQ; both times in [0, MAX_TS_NS); `bytes` below MAX_BYTES; non-CALL kinds have op
    0; a COMM_INIT's node count (`aux`) is at most `nranks`. Flag bits a consumer does not
    know are ignored (contract section 1), and `t_end_ns` of a call not COMPLETED is not
    read. A COMPLETED call may end before it started: its node's clock was set back while it
    ran (the detector leaves such times out of timing).

    The common case (nothing wrong) costs a dozen numpy operations over the record words;
    only a batch that fails them is checked rule by rule for the exact reason.
    """
    if len(recs) == 0 or _words_ok(recs, comm):
        return
    checks = _checks(recs, comm)
    bad = checks[0][2].copy()
    for _reason, _field, mask in checks[1:]:
        bad |= mask
    if not bad.any():
        return
    i = int(np.argmax(bad))
    for reason, name, mask in checks:
        if mask[i]:
            context = _context(recs, i, name)
            if name == "comm":
                want = comm[i] if isinstance(comm, np.ndarray) else comm
                context = f" (the key says {int(want) & 0xFFFFFFFFFFFFFFFF:016x})"
            raise WireError(reason, f"record {i}: {name} = {_field_text(recs, i, name)}{context}")


# The range rules on whole 32-bit words: word k of a record is bad when (word + ADD[k]) mod 2**32
# exceeds MAX[k] (rank, nranks, and the high words of seq, both times and bytes).
_WORD_ADD = np.zeros(16, np.uint32)
_WORD_MAX = np.full(16, 0xFFFFFFFF, np.uint32)
_WORD_ADD[1], _WORD_MAX[1] = 1, MAX_RANKS  # rank in [-1, MAX_RANKS)
_WORD_ADD[14], _WORD_MAX[14] = 0xFFFFFFFF, MAX_RANKS - 1  # nranks in [1, MAX_RANKS]
_WORD_MAX[5] = (MAX_SEQ >> 32) - 1
_WORD_MAX[7] = _WORD_MAX[9] = (MAX_TS_NS >> 32) - 1  # a negative time has its top bit set
_WORD_MAX[11] = (MAX_BYTES >> 32) - 1
# kind | op << 8 -> allowed
_KIND_OP_OK = np.zeros(1 << 16, bool)
_KIND_OP_OK[KIND_CALL | (np.arange(OP_MAX + 1) << 8)] = True
_KIND_OP_OK[[KIND_COMM_INIT, KIND_COMM_DESTROY]] = True


_U4, _U2, _I8 = np.dtype("<u4"), np.dtype("<u2"), np.dtype("<i8")
_TILED = 1024  # records covered by the tiled bounds (larger arrays broadcast: same result)
_TILED_ADD, _TILED_MAX = np.tile(_WORD_ADD, _TILED), np.tile(_WORD_MAX, _TILED)
_count = np.count_nonzero  # far cheaper than ndarray.any() on small arrays


def _words_ok(recs: np.ndarray, comm: int | np.ndarray | None) -> bool:
    """True when every record passes every rule of `validate_records` (False: look closer)."""
    recs = np.ascontiguousarray(recs)
    n = len(recs)
    flat = recs.view(_U4)
    if n <= _TILED:
        words_bad = (flat + _TILED_ADD[: 16 * n]) > _TILED_MAX[: 16 * n]
    else:
        words_bad = (flat.reshape(-1, 16) + _WORD_ADD) > _WORD_MAX
    w16 = recs.view(_U2)[::32]  # kind | op << 8
    if _count(words_bad) or _count(_KIND_OP_OK[w16]) != n:
        return False
    nranks = recs["nranks"]
    if _count(recs["comm_rank"].view(_U4) >= nranks) or _count(recs["peer"].view(_U4) + np.uint32(1) > nranks):
        return False
    if _count(recs["aux"] > nranks) and _count((w16 == KIND_COMM_INIT) & (recs["aux"] > nranks)):
        return False
    if comm is not None:
        want = np.asarray(comm).astype(np.uint64) if isinstance(comm, np.ndarray) else np.uint64(comm)
        if _count(recs["comm"] != want):
            return False
    return True


def _field_text(recs: np.ndarray, i: int, name: str) -> str:
    value = int(recs[name][i])
    return f"{value:016x}" if name == "comm" else str(value)


def _context(recs: np.ndarray, i: int, name: str) -> str:
    if name in ("comm_rank", "peer", "aux"):
        return f" (nranks {int(recs['nranks'][i])})"
    if name == "t_end_ns":
        return f" (t_start_ns {int(recs['t_start_ns'][i])}, flags {int(recs['flags'][i])})"
    if name == "op":
        return f" (kind {int(recs['kind'][i])})"
    return ""


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
