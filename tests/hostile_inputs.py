"""A catalogue of hostile input: one message per way a producer (buggy, old, or hostile)
can break the wire contract, each with the `WireError` reason the decoder must give.

Used by the unit test of the decoder, by the replay test (every case skipped and counted,
replay goes on) and by the live worker test (every case on the dead-letter topic with its
reason, the worker goes on). Scripted by hand: each value is built here, not recorded.
"""

from __future__ import annotations

import json
from typing import NamedTuple

import numpy as np

from commwatch import topics, wire

MAX_BYTES = 64 * 1024  # `max_message_bytes` the tests run with (the oversized case exceeds it)
COMM = 0xAB
JOB = "jhostile"
CALLS_KEY = f"{JOB}/{COMM:016x}"
T0 = 1_767_225_600_000_000_000


class Case(NamedTuple):
    name: str
    topic: str
    key: str | None
    value: bytes
    reason: str
    ts_ms: int | None = None  # the message's own (Kafka) time, when the case is about it


def good_records(n: int = 4) -> np.ndarray:
    """`n` completed AllReduce records of a 4-rank comm that pass every check."""
    recs = wire.empty(n)
    recs["kind"] = wire.KIND_CALL
    recs["op"] = wire.OP_ALLREDUCE
    recs["flags"] = wire.FLAG_COMPLETED
    recs["comm"] = COMM
    recs["rank"] = np.arange(n) % 4
    recs["comm_rank"] = np.arange(n) % 4
    recs["nranks"] = 4
    recs["seq"] = np.arange(n) // 4
    recs["t_start_ns"] = T0
    recs["t_end_ns"] = T0 + 1_000_000
    recs["bytes"] = 1 << 20
    return recs


def batch(n: int = 4, at: int = 0, **fields) -> bytes:
    """A call batch of `n` good records, record `at` changed by `fields`."""
    recs = good_records(n)
    for name, value in fields.items():
        recs[name][at] = value
    return wire.encode_batch(recs)


def header(value: bytes, **changes) -> bytes:
    magic, version, rsize, count, reserved = wire.BATCH_HEADER.unpack_from(value, 0)
    fields = {"magic": magic, "version": version, "rsize": rsize, "count": count, "reserved": reserved}
    fields.update(changes)
    return wire.BATCH_HEADER.pack(*fields.values()) + value[wire.BATCH_HEADER_SIZE:]


STEPS = {"v": 1, "job": JOB, "rank": 3, "iteration": 12, "t_start_ns": T0, "t_end_ns": T0 + 10**9,
         "phases": {"forward_ms": 400.0, "backward_ms": 600.0}}
HW = {"v": 1, "job": JOB, "node": "node-01", "ts_ns": T0, "rank": 3, "gpu": "GPU-1", "sm_clock_mhz": 1980,
      "power_w": 600.0, "temp_c": 60, "ecc_dbe": 0, "ib": {"mlx5_0": {"tx_bytes": 1, "rx_bytes": 2}}}
TOPOLOGY = {"v": 1, "job": JOB, "ts_ns": T0, "rank": 3, "world_size": 8, "node": "node-01",
            "coords": {"tp": 1, "pp": 0, "dp": 1}}
PROGRESS = {"v": 1, "job": JOB, "node": "node-01", "ts_ns": T0, "comm": f"{COMM:016x}",
            "ranks": [{"rank": 3, "started": 10, "completed": 9, "t_last_start_ns": T0, "t_last_end_ns": T0,
                       "p2p": [{"peer": 1, "op": "send", "started": 2, "completed": 2}]}]}


def js(base: dict, **changes) -> bytes:
    return json.dumps({**base, **changes}).encode()


def rank0(base: dict, **changes) -> bytes:
    """A progress heartbeat whose first rank entry is changed."""
    return js(base, ranks=[{**base["ranks"][0], **changes}])


def p2p0(**changes) -> bytes:
    entry = {**PROGRESS["ranks"][0], "p2p": [{**PROGRESS["ranks"][0]["p2p"][0], **changes}]}
    return js(PROGRESS, ranks=[entry])


def _cases() -> list[Case]:
    C, S, H, T, P = topics.CALLS, topics.STEPS, topics.HW, topics.TOPOLOGY, topics.PROGRESS
    K = CALLS_KEY
    good = batch()
    init = dict(kind=wire.KIND_COMM_INIT, op=0, flags=0, t_end_ns=0)
    cases = [
        # --- call batch framing
        Case("batch shorter than its header", C, K, b"\x00" * 7, "truncated"),
        Case("empty calls value", C, K, b"", "truncated"),
        Case("wrong magic", C, K, b"CWB2" + good[4:], "bad_magic"),
        Case("JSON sent to the calls topic", C, K, js(STEPS), "bad_magic"),
        Case("unknown batch version", C, K, header(good, version=2), "bad_version"),
        Case("record size not 64", C, K, header(good, rsize=32), "bad_record_size"),
        Case("body not a whole number of records", C, K, good[:-10], "truncated"),
        Case("count says more records than sent", C, K, header(good, count=9), "count_mismatch"),
        Case("count says fewer records than sent", C, K, header(good, count=1), "count_mismatch"),
        # --- every field of a call record
        Case("kind 0", C, K, batch(kind=0), "unknown_kind"),
        Case("kind 9", C, K, batch(kind=9), "unknown_kind"),
        Case("op beyond the table", C, K, batch(op=200), "unknown_op"),
        Case("COMM_INIT carrying an op", C, K, batch(**{**init, "op": wire.OP_ALLREDUCE}), "unknown_op"),
        Case("record comm differs from the key", C, K, batch(comm=0xCD), "comm_mismatch"),
        Case("global rank below -1", C, K, batch(rank=-5), "bad_rank"),
        Case("global rank 10^9", C, K, batch(rank=10**9), "bad_rank"),
        Case("nranks 0", C, K, batch(nranks=0), "bad_nranks"),
        Case("nranks 2^32-1", C, K, batch(nranks=2**32 - 1), "bad_nranks"),
        Case("nranks 2^21 (beyond the largest comm)", C, K, batch(nranks=2**21), "bad_nranks"),
        Case("comm_rank 10^9", C, K, batch(comm_rank=10**9), "bad_comm_rank"),
        Case("comm_rank -1", C, K, batch(comm_rank=-1), "bad_comm_rank"),
        Case("comm_rank equal to nranks", C, K, batch(comm_rank=4), "bad_comm_rank"),
        Case("peer outside the comm", C, K, batch(op=wire.OP_SEND, peer=99), "bad_peer"),
        Case("peer below -1", C, K, batch(op=wire.OP_RECV, peer=-7), "bad_peer"),
        Case("seq 2^63 (negative as int64)", C, K, batch(seq=2**63), "bad_seq"),
        Case("seq 2^60", C, K, batch(seq=2**60), "bad_seq"),
        Case("start time negative", C, K, batch(t_start_ns=-1), "bad_time"),
        Case("start time at int64's end", C, K, batch(t_start_ns=2**63 - 1, t_end_ns=2**63 - 1), "bad_time"),
        Case("end time negative", C, K, batch(t_end_ns=-5), "bad_time"),
        Case("bytes 2^63", C, K, batch(bytes=2**63), "bad_bytes"),
        Case("COMM_INIT on more nodes than ranks", C, K, batch(**init, aux=5), "bad_aux"),
        Case("one absurd record among 50 good ones", C, K, batch(50, at=37, comm_rank=10**9), "bad_comm_rank"),
        # --- keys of call batches
        Case("calls key without a comm", C, JOB, good, "bad_key"),
        Case("calls key with no key at all", C, None, good, "bad_key"),
        Case("calls key comm not hex", C, f"{JOB}/zz000000000000ab", good, "bad_key"),
        Case("calls key comm too short", C, f"{JOB}/ab", good, "bad_key"),
        Case("calls key with an empty job", C, f"/{COMM:016x}", good, "bad_key"),
        Case("calls key job with a control character", C, f"j\x01b/{COMM:016x}", good, "bad_job"),
        Case("calls key job of 300 characters", C, "j" * 300 + f"/{COMM:016x}", good, "bad_job"),
        Case("oversized calls message", C, K, batch(MAX_BYTES // 64 + 10), "oversized"),
        # --- JSON framing
        Case("steps not JSON", S, JOB, b"{not json", "bad_json"),
        Case("steps empty value", S, JOB, b"", "bad_json"),
        Case("steps invalid UTF-8", S, JOB, b'{"v":1,"job":"\xff\xfe"}', "bad_json"),
        Case("steps nested 100k deep", S, JOB, b"[" * 60_000, "bad_json"),
        Case("steps a JSON string", S, JOB, b'"just a string"', "not_object"),
        Case("steps a JSON list", S, JOB, b"[]", "not_object"),
        Case("a call batch on the steps topic", S, JOB, good, "bad_json"),
        Case("steps with NaN", S, JOB, js(STEPS).replace(b"400.0", b"NaN"), "bad_number"),
        Case("steps without iteration", S, JOB, json.dumps({k: v for k, v in STEPS.items()
                                                            if k != "iteration"}).encode(), "missing_field"),
        Case("steps rank as a string", S, JOB, js(STEPS, rank="3"), "bad_field"),
        Case("steps rank as a bool", S, JOB, js(STEPS, rank=True), "bad_field"),
        Case("steps version 2", S, JOB, js(STEPS, v=2), "bad_version"),
        Case("oversized steps message", S, JOB, js(STEPS, pad="x" * MAX_BYTES), "oversized"),
        # --- JSON fields
        Case("steps ending before they start", S, JOB, js(STEPS, t_end_ns=T0 - 1), "bad_time"),
        Case("steps rank 10^9", S, JOB, js(STEPS, rank=10**9), "bad_rank"),
        Case("steps rank negative", S, JOB, js(STEPS, rank=-1), "bad_rank"),
        Case("steps iteration -1", S, JOB, js(STEPS, iteration=-1), "bad_seq"),
        Case("steps phase negative", S, JOB, js(STEPS, phases={"forward_ms": -3.0}), "bad_field"),
        Case("steps phase 1e300 ms", S, JOB, js(STEPS, phases={"forward_ms": 1e300}), "bad_field"),
        Case("steps phase not a number", S, JOB, js(STEPS, phases={"forward_ms": "slow"}), "bad_field"),
        Case("steps 4097 phases", S, JOB, js(STEPS, phases={f"{i}": 1 for i in range(4097)}), "too_many"),
        Case("steps time far in the future", S, JOB, js(STEPS, t_end_ns=2**63 - 1), "bad_time"),
        # --- job ids
        Case("job id empty", S, "", js(STEPS, job=""), "bad_job"),
        Case("job id with '/'", S, "a/b", js(STEPS, job="a/b"), "bad_job"),
        Case("job id with a newline", S, "j\n1", js(STEPS, job="j\n1"), "bad_job"),
        Case("job id with DEL", S, "j\x7f", js(STEPS, job="j\x7f"), "bad_job"),
        Case("job id of 10k characters", S, "j" * 10_000, js(STEPS, job="j" * 10_000), "bad_job"),
        Case("job differs from the key", S, "jother", js(STEPS), "job_mismatch"),
        Case("steps without a key", S, None, js(STEPS), "bad_key"),
        # --- the message's own time (producer-set Kafka timestamp; the capture's ts_ns)
        Case("message time in 2250", S, JOB, js(STEPS), "bad_time", ts_ms=8_835_984_000_000),
        # --- hardware samples
        Case("hw time negative", H, JOB, js(HW, ts_ns=-1), "bad_time"),
        Case("hw time at int64's end", H, JOB, js(HW, ts_ns=2**63 - 1), "bad_time"),
        Case("hw time beyond int64", H, JOB, js(HW, ts_ns=10**20), "bad_time"),
        Case("hw temperature Infinity", H, JOB, js(HW).replace(b'"temp_c": 60', b'"temp_c": Infinity'),
             "bad_number"),
        Case("hw power negative", H, JOB, js(HW, power_w=-1.0), "bad_field"),
        Case("hw clock 1e300 MHz", H, JOB, js(HW, sm_clock_mhz=1e300), "bad_field"),
        Case("hw XID negative", H, JOB, js(HW, xid=-1), "bad_field"),
        Case("hw rank negative", H, JOB, js(HW, rank=-3), "bad_rank"),
        Case("hw node with control characters", H, JOB, js(HW, node="n\x00de"), "bad_name"),
        Case("hw gpu id of 1000 characters", H, JOB, js(HW, gpu="G" * 1000), "bad_name"),
        Case("hw IB counter negative", H, JOB, js(HW, ib={"mlx5_0": {"tx_bytes": -1}}), "bad_field"),
        Case("hw IB counters not an object", H, JOB, js(HW, ib={"mlx5_0": 7}), "not_object"),
        # --- rank placement
        Case("topology rank at world_size", T, JOB, js(TOPOLOGY, rank=8), "bad_rank"),
        Case("topology world_size 0", T, JOB, js(TOPOLOGY, world_size=0, rank=0), "bad_rank"),
        Case("topology world_size 2^40", T, JOB, js(TOPOLOGY, world_size=2**40), "bad_rank"),
        Case("topology local_rank negative", T, JOB, js(TOPOLOGY, local_rank=-1), "bad_rank"),
        Case("topology coordinate a string", T, JOB, js(TOPOLOGY, coords={"tp": "one"}), "bad_field"),
        Case("topology coordinate 10^9", T, JOB, js(TOPOLOGY, coords={"pp": 10**9}), "bad_field"),
        # --- progress heartbeats
        Case("progress comm not hex", P, K, js(PROGRESS, comm="zz" * 8), "bad_field"),
        Case("progress comm in upper case", P, K, js(PROGRESS, comm=f"{COMM:016X}"), "bad_field"),
        Case("progress comm differs from the key", P, K, js(PROGRESS, comm="00000000000000cd"), "comm_mismatch"),
        Case("progress keyed by job only", P, JOB, js(PROGRESS), "bad_key"),
        Case("progress ranks not a list", P, K, js(PROGRESS, ranks={"3": 1}), "bad_field"),
        Case("progress rank 10^9", P, K, rank0(PROGRESS, rank=10**9), "bad_rank"),
        Case("progress started 2^62", P, K, rank0(PROGRESS, started=2**62), "bad_seq"),
        Case("progress completed -5", P, K, rank0(PROGRESS, completed=-5), "bad_seq"),
        Case("progress last end negative", P, K, rank0(PROGRESS, t_last_end_ns=-1), "bad_time"),
        Case("progress p2p op unknown", P, K, p2p0(op="x"), "bad_field"),
        Case("progress p2p peer negative", P, K, p2p0(peer=-1), "bad_peer"),
        Case("progress p2p started 2^63", P, K, p2p0(started=2**63), "bad_seq"),
    ]
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "case names are unique"
    return cases


CASES = _cases()
