"""Hostile but decodable input into the detector core: `feed` may refuse a message with a
`WireError` (the decoder checks every field), and nothing ever escapes `tick`; the state
stays bounded by the input's distinct keys, never by its numbers (seq, times, sizes).

Everything fed here either passes the wire decoder's checks or is refused by it: duplicate
and reordered records, sequence numbers that go backwards or jump, times from 0 to the
decoder's far-future bound, unknown ranks, COMM_DESTROY before COMM_INIT, empty batches,
heartbeats for ranks the comm never saw, thousands of communicators; and, pinned by name,
the inputs that once made it stall, allocate terabytes or raise inside a tick (a huge `seq`
jump, an absurd `nranks`, a `comm_rank` of 10^9).
"""

from __future__ import annotations

import json
import resource
import tracemalloc
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import psutil
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from commwatch import topics, wire
from commwatch.messages import MAX_TS_NS
from commwatch.capture import Message
from commwatch.settings import Settings
from commwatch.streams.detect import Detector
from commwatch.wire import WireError

SETTINGS = Settings.load(env={}, window_instances=8)
JOBS = ("ja", "jb")
COMMS = (0x1, 0xABCDEF, 0xFFFFFFFFFFFFFFFF)
MAX_RANKS = 4096  # the largest communicator this test builds: state may scale with it
I64 = 2**63 - 1

small_or_any = lambda lo, hi, small_hi: st.one_of(st.integers(lo, small_hi), st.integers(lo, hi))  # noqa: E731

record = st.fixed_dictionaries({
    "kind": st.sampled_from((wire.KIND_CALL, wire.KIND_CALL, wire.KIND_COMM_INIT, wire.KIND_COMM_DESTROY)),
    "op": st.integers(0, wire.OP_MAX),
    "flags": st.integers(0, 7),
    "rank": small_or_any(-1, 2**31 - 1, 16),
    # duplicates, reordering, going backwards; and any u64 (huge jumps, negative as int64)
    "seq": small_or_any(0, 2**64 - 1, 40),
    "t_start_ns": small_or_any(0, I64, 2_000_000_000),
    "t_end_ns": small_or_any(0, I64, 2_000_000_000),
    "bytes": st.integers(0, 2**64 - 1),
    "comm_rank": small_or_any(-(2**31), 2**31 - 1, 16),
    "peer": small_or_any(-(2**31), 2**31 - 1, 16),
    # up to MAX_RANKS, or beyond what the decoder accepts (folded to MAX_RANKS unless left absurd)
    "nranks": st.one_of(st.integers(0, 16), st.integers(0, MAX_RANKS), st.integers(wire.MAX_RANKS + 1, 2**32 - 1)),
    "aux": st.integers(0, 2**32 - 1),
    "_fold": st.sampled_from((True, True, True, True, False)),  # one record in five may be absurd
})

rank_progress = st.fixed_dictionaries(
    {"rank": small_or_any(-(2**31), 2**31 - 1, 16), "started": small_or_any(-1, I64, 40),
     "completed": small_or_any(-1, I64, 40)},
    optional={"t_last_start_ns": small_or_any(0, MAX_TS_NS, 2_000_000_000),
              "t_last_end_ns": small_or_any(0, MAX_TS_NS, 2_000_000_000),
              "p2p": st.lists(st.fixed_dictionaries({
                  "peer": small_or_any(-(2**31), 2**31 - 1, 16), "op": st.sampled_from(("send", "recv", "SEND", "x")),
                  "started": small_or_any(-1, I64, 40), "completed": small_or_any(-1, I64, 40)}), max_size=3)},
)

ts = small_or_any(0, I64, 2_000_000_000)
job = st.sampled_from(JOBS)
comm = st.one_of(st.sampled_from(COMMS), st.integers(0, 2**64 - 1))


def sane(r: dict) -> dict:
    """`r` folded into the decoder's bounds (the detector then gets it): most generated
    records are, so the detector sees weird but decodable batches, not only refusals."""
    n = max(1, r["nranks"] % (MAX_RANKS + 1))
    t0 = r["t_start_ns"] % wire.MAX_TS_NS
    t1 = r["t_end_ns"] % wire.MAX_TS_NS
    return {**r, "nranks": n, "comm_rank": r["comm_rank"] % n, "peer": -1 if r["peer"] < 0 else r["peer"] % n,
            "rank": max(-1, r["rank"] % wire.MAX_RANKS), "seq": r["seq"] % wire.MAX_SEQ, "t_start_ns": t0,
            "t_end_ns": max(t0, t1) if r["flags"] & wire.FLAG_COMPLETED else t1,
            "bytes": r["bytes"] % wire.MAX_BYTES, "aux": r["aux"] % (n + 1),
            "op": r["op"] if r["kind"] == wire.KIND_CALL else 0}


def calls_msg(job: str, comm: int, recs: list[dict], t: int, fold: bool = True) -> Message:
    arr = wire.empty(len(recs))
    for i, r in enumerate(recs):
        for k, v in (sane(r) if fold and r.get("_fold", True) else r).items():
            if k != "_fold":
                arr[k][i] = v
    arr["comm"] = comm
    return Message(topics.CALLS, topics.comm_key(job, comm), t, wire.encode_batch(arr))


def progress_msg(job: str, comm: int, ranks: list[dict], t: int) -> Message:
    body = {"v": 1, "job": job, "node": "n0", "ts_ns": t % (2**62), "comm": wire.comm_hex(comm), "ranks": ranks}
    return Message(topics.PROGRESS, topics.comm_key(job, comm), t, json.dumps(body).encode())


def other_msg(kind: str, job: str, rank: int, t: int) -> Message:
    t = t % (2**62)
    body = {
        topics.TOPOLOGY: {"v": 1, "job": job, "ts_ns": t, "rank": abs(rank) % 64, "world_size": 64, "node": "n0"},
        topics.STEPS: {"v": 1, "job": job, "rank": rank, "iteration": rank, "t_start_ns": t, "t_end_ns": t},
        topics.HW: {"v": 1, "job": job, "node": "n0", "ts_ns": t, "rank": rank, "sm_clock_mhz": 1},
    }[kind]
    return Message(kind, job, t, json.dumps(body).encode())


@dataclass(frozen=True)
class Tick:
    """Time passing with no message."""

    now_ns: int


event = st.one_of(
    st.builds(calls_msg, job, comm, st.lists(record, max_size=12), ts),
    st.builds(calls_msg, job, comm, st.just([]), ts),  # empty batch
    st.builds(progress_msg, job, comm, st.lists(rank_progress, max_size=4), ts),
    st.builds(other_msg, st.sampled_from((topics.TOPOLOGY, topics.STEPS, topics.HW)), job,
              small_or_any(-(2**31), 2**31 - 1, 16), ts),
    st.builds(Tick, ts),
)


@contextmanager
def memory_ceiling(extra_bytes: int):
    """Make an allocation beyond `extra_bytes` more raise MemoryError instead of exhausting
    the machine (the address-space limit of this process, restored afterwards)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = psutil.Process().memory_info().vms + extra_bytes
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def feed_all(det: Detector, events) -> int:
    """Feed every event; returns how many the decoder refused. `feed` may raise only
    `WireError` (the caller dead-letters the message); `tick` may raise nothing, ever:
    any exception from it escapes and fails the test."""
    refused = 0
    for ev in events:
        if isinstance(ev, Tick):
            det.tick(ev.now_ns)
            continue
        try:
            det.feed(ev)
        except WireError:
            refused += 1
        det.tick(ev.ts_ns)
    return refused


def state_size(det: Detector) -> tuple[int, int]:
    """(largest per-comm member array, largest per-comm dict) over the detector's comms."""
    comms = det.comm_stage.comms.values()
    arrays = max((c.st.size + c.en.size + c.tag.size for c in comms), default=0)
    dicts = max((len(c.p2p) + len(c.node_of) for c in comms), default=0)
    return arrays, dicts


@pytest.fixture
def ceiling():
    with memory_ceiling(2 * 2**30):
        yield


@hsettings(max_examples=120, deadline=None,
           suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(events=st.lists(event, max_size=40))
def test_hostile_sequences_raise_only_wire_errors_and_state_stays_bounded(ceiling, events):
    det = Detector(SETTINGS)
    feed_all(det, events)
    # replaying the same input again (duplicates, time going backwards) is no different
    feed_all(det, events)
    n_msgs = sum(1 for e in events if not isinstance(e, Tick))
    keys = {(m.key.rpartition("/")[0], m.key.rpartition("/")[2]) for m in events
            if not isinstance(m, Tick) and m.topic in (topics.CALLS, topics.PROGRESS)}
    assert len(det.comm_stage.comms) <= len(keys)
    arrays, dicts = state_size(det)
    slots = 4 * SETTINGS.window_instances
    assert arrays <= slots * (2 * MAX_RANKS + 1)  # per comm: the instance ring over at most MAX_RANKS
    assert dicts <= 2 * 12 * 3 * n_msgs + 4 * 4 * n_msgs  # bounded by what was sent, not by seq or time
    # whatever the detector holds, its health view still renders
    for j in JOBS:
        assert det.health(j)["job"] == j


def test_thousands_of_comms_cost_a_bounded_amount_each():
    det = Detector(SETTINGS)
    n = 500
    rng = np.random.default_rng(7)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i, c in enumerate(rng.integers(1, 2**63, n).tolist()):
            recs = [{"kind": wire.KIND_CALL, "op": wire.OP_ALLREDUCE, "flags": 1, "rank": r, "seq": i % 50,
                     "t_start_ns": 10**9 + i, "t_end_ns": 10**9 + i + 5, "comm_rank": r, "nranks": 4}
                    for r in range(4)]
            det.feed(calls_msg("jmany", c, recs, 10**9 + i, fold=False))
            det.tick(10**9 + i * 1000)
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert len(det.comm_stage.comms) == n
    per_comm = held / n
    print(f"{n} comms of 4 ranks: {held / 2**20:.1f} MiB held, {per_comm / 1024:.1f} KiB per comm")
    assert per_comm < 64 * 1024


@pytest.mark.parametrize("jump", [10**9, wire.MAX_SEQ - 1], ids=["forward_1e9", "to_the_decoder_bound"])
def test_a_huge_seq_jump_costs_no_more_than_a_window(ceiling, jump):
    det = Detector(SETTINGS)
    for seqs, t in (((0, 1), 10**9), ((jump,), 2 * 10**9)):
        recs = [{"kind": wire.KIND_CALL, "op": wire.OP_ALLREDUCE, "flags": 1, "rank": r, "seq": q,
                 "t_start_ns": t, "t_end_ns": t + 5, "comm_rank": r, "nranks": 2} for q in seqs for r in range(2)]
        det.feed(calls_msg("jgap", 0x6A9, recs, t, fold=False))
        det.tick(t + 10**9)
    assert det.stats["records"] == 6
    assert state_size(det)[0] <= 4 * SETTINGS.window_instances * 5


@pytest.mark.parametrize("field,value,reason", [
    ("nranks", 2**32 - 1, "bad_nranks"),
    ("comm_rank", 10**9, "bad_comm_rank"),
    ("seq", 2**63, "bad_seq"),
    ("rank", 10**9, "bad_rank"),
    ("t_start_ns", 2**63 - 1, "bad_time"),
])
def test_an_absurd_record_is_refused_at_decode_and_the_tick_goes_on(ceiling, field, value, reason):
    """The record that once raised inside the tick (or allocated per its claim) is refused by
    `feed`; the comm's good batches before and after still count, and no tick raises."""
    det = Detector(SETTINGS)
    good = {"kind": wire.KIND_CALL, "op": wire.OP_ALLREDUCE, "flags": 1, "rank": 0, "seq": 0,
            "t_start_ns": 10**9, "t_end_ns": 10**9 + 5, "comm_rank": 0, "nranks": 2}
    det.feed(calls_msg("jbig", 0xB16, [good], 10**9, fold=False))
    with pytest.raises(WireError) as err:
        det.feed(calls_msg("jbig", 0xB16, [{**good, field: value}], 10**9 + 1, fold=False))
    assert err.value.reason == reason
    det.feed(calls_msg("jbig", 0xB16, [{**good, "seq": 1}], 10**9 + 2, fold=False))
    for t in range(2, 40):
        det.tick(t * 10**9)  # nothing may escape
    assert det.stats["records"] == 2
    arrays, _ = state_size(det)
    assert arrays <= 4 * SETTINGS.window_instances * (2 * 2 + 1)  # the ring of a 2-rank comm, no more
