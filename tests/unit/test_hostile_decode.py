"""Hostile input to the decoders: every bad message raises WireError with a reason, and
nothing else ever escapes (the catalogue of `tests/hostile_inputs.py`, and property-based
over random bytes, random JSON, mangled batches and records near every bound)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from commwatch import topics, wire
from commwatch.capture import CaptureLineError, Message, parse_line
from commwatch.decode import decode_message
from commwatch.wire import WireError
from hostile_inputs import CALLS_KEY as KEY_AB, CASES, HW, JOB, MAX_BYTES, PROGRESS, STEPS, TOPOLOGY, batch, js

ALL_TOPICS = [topics.CALLS, topics.PROGRESS, topics.TOPOLOGY, topics.STEPS, topics.HW, topics.ALERTS]
KEY = "j1/00000000000000ab"


def _decode(topic: str, key: str | None, value: bytes, max_bytes: int = 1 << 20, ts_ns: int = 0):
    try:
        return decode_message(Message(topic, key, ts_ns, value), max_bytes=max_bytes)
    except WireError as exc:
        assert exc.reason and exc.detail
        return exc


@hsettings(max_examples=300, deadline=None)
@given(topic=st.sampled_from(ALL_TOPICS), value=st.binary(max_size=512), key=st.one_of(st.none(), st.text(max_size=30)))
def test_random_bytes_never_crash(topic, value, key):
    _decode(topic, key, value)


@hsettings(max_examples=300, deadline=None)
@given(obj=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=6),
    max_leaves=20), topic=st.sampled_from(ALL_TOPICS[1:]))
def test_random_json_never_crashes(obj, topic):
    _decode(topic, "j1/00000000000000ab" if topic == topics.PROGRESS else "j1", json.dumps(obj).encode())


@hsettings(max_examples=200, deadline=None)
@given(n=st.integers(0, 20), kinds=st.lists(st.integers(0, 255), min_size=20, max_size=20),
       ops=st.lists(st.integers(0, 255), min_size=20, max_size=20), cut=st.integers(0, 64 * 21 + 16),
       count=st.integers(0, 2**32 - 1))
def test_mangled_batches_never_crash(n, kinds, ops, cut, count):
    recs = wire.empty(n)
    recs["comm"] = 0xAB
    recs["kind"] = kinds[:n]
    recs["op"] = ops[:n]
    raw = bytearray(wire.encode_batch(recs))
    for variant in (bytes(raw[:cut]), bytes(raw[:8] + count.to_bytes(4, "little") + raw[12:])):
        out = _decode(topics.CALLS, KEY, variant)
        if not isinstance(out, WireError):
            assert np.isin(out.records["kind"], (1, 2, 3)).all()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_hostile_case_is_refused_with_its_reason(case):
    out = _decode(case.topic, case.key, case.value, max_bytes=MAX_BYTES, ts_ns=(case.ts_ms or 0) * 1_000_000)
    assert isinstance(out, WireError), f"{case.name}: accepted"
    assert out.reason == case.reason, f"{case.name}: {out}"
    assert len(str(out)) < 400  # an error names the field; it never carries the payload


def test_the_catalogue_is_large_and_covers_every_record_field():
    assert len(CASES) >= 40
    details = " ".join(str(_decode(c.topic, c.key, c.value, max_bytes=MAX_BYTES)) for c in CASES if not c.ts_ms)
    for field in wire.RECORD_DTYPE.names:
        if field not in ("flags",):  # flags: unknown bits are ignored by contract
            assert f": {field} = " in details, f"no hostile case for record field {field}"


def test_an_absurd_record_is_named_by_index_and_field():
    out = _decode(topics.CALLS, KEY_AB, batch(50, at=37, comm_rank=10**9), max_bytes=MAX_BYTES)
    assert isinstance(out, WireError)
    assert out.reason == "bad_comm_rank" and "record 37: comm_rank = 1000000000 (nranks 4)" in out.detail


def test_the_good_messages_of_the_catalogue_decode():
    """The bases the cases are made from are valid: each case is refused for its one change."""
    for topic, key, value in ((topics.CALLS, KEY_AB, batch(50)), (topics.STEPS, JOB, js(STEPS)),
                              (topics.HW, JOB, js(HW)), (topics.TOPOLOGY, JOB, js(TOPOLOGY)),
                              (topics.PROGRESS, KEY_AB, js(PROGRESS))):
        assert not isinstance(_decode(topic, key, value, max_bytes=MAX_BYTES), WireError), topic


edge = lambda *xs: st.sampled_from(xs)  # noqa: E731
near_edges = st.fixed_dictionaries({
    "kind": edge(0, 1, 1, 2, 3, 4, 255),
    "op": edge(0, 0, 1, wire.OP_MAX, wire.OP_MAX + 1, 255),
    "flags": edge(0, 1, 2, 3, 8, 0xFFFF),
    "rank": edge(-2**31, -2, -1, 0, 5, wire.MAX_RANKS - 1, wire.MAX_RANKS, 2**31 - 1),
    "comm": edge(0xAB, 0xAB, 0xAB ^ (1 << 63), 0),
    "seq": edge(0, 1, wire.MAX_SEQ - 1, wire.MAX_SEQ, 2**63, 2**64 - 1),
    "t_start_ns": edge(-2**63, -1, 0, 10**18, wire.MAX_TS_NS - 1, wire.MAX_TS_NS, 2**63 - 1),
    "t_end_ns": edge(-1, 0, 10**18 - 1, 10**18, 10**18 + 1, wire.MAX_TS_NS - 1, wire.MAX_TS_NS),
    "bytes": edge(0, wire.MAX_BYTES - 1, wire.MAX_BYTES, 2**64 - 1),
    "comm_rank": edge(-2**31, -1, 0, 3, 4, 7, 8, wire.MAX_RANKS, 2**31 - 1),
    "peer": edge(-2**31, -2, -1, 0, 3, 4, 7, 8, 2**31 - 1),
    "nranks": edge(0, 1, 4, 8, wire.MAX_RANKS, wire.MAX_RANKS + 1, 2**32 - 1),
    "aux": edge(0, 1, 4, 8, 9, 2**32 - 1),
})


@hsettings(max_examples=400, deadline=None)
@given(rows=st.lists(near_edges, max_size=24), keyed=st.booleans())
def test_the_fast_check_agrees_with_the_rule_by_rule_check(rows, keyed):
    """`validate_records` first runs a dozen operations over the record words; a record it
    lets through must pass every rule, and it must refuse exactly when a rule fails."""
    recs = wire.empty(len(rows))
    for i, row in enumerate(rows):
        for name, value in row.items():
            recs[name][i] = value
    comm = 0xAB if keyed else None
    faults = wire.record_faults(recs, comm)
    try:
        wire.validate_records(recs, comm)
    except WireError as exc:
        assert faults.any()
        assert exc.detail.startswith(f"record {int(np.argmax(faults))}: ")
    else:
        assert not faults.any()
    # many batches checked together say the same per batch as one by one
    cut = len(rows) // 2
    values = [wire.encode_batch(recs[:cut]), wire.encode_batch(recs[cut:])]
    together = wire.check_batches(values, [0xAB, 0xAB])
    for value, got in zip(values, together):
        try:
            alone = wire.check_batch(value, 0xAB)
        except WireError as exc:
            alone = exc
        assert (got.reason, got.detail) == (alone.reason, alone.detail) if isinstance(alone, WireError) \
            else got == alone


@hsettings(max_examples=200, deadline=None)
@given(line=st.text(max_size=200))
def test_capture_lines_never_crash(line):
    try:
        msg = parse_line(line, 1)
    except CaptureLineError as exc:
        assert exc.reason
    else:
        assert isinstance(msg.value, bytes)
