"""Hostile input to the decoders: every bad message raises WireError with a reason, and
nothing else ever escapes (property-based over random bytes and mangled batches)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from commwatch import messages, topics, wire
from commwatch.capture import CaptureLineError, Message, parse_line
from commwatch.decode import decode_message
from commwatch.wire import WireError

ALL_TOPICS = [topics.CALLS, topics.PROGRESS, topics.TOPOLOGY, topics.STEPS, topics.HW, topics.ALERTS]
KEY = "j1/00000000000000ab"


def _decode(topic: str, key: str | None, value: bytes):
    try:
        return decode_message(Message(topic, key, 0, value), max_bytes=1 << 20)
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


@pytest.mark.parametrize(
    "topic,value,reason",
    [
        (topics.CALLS, b"\x00" * 7, "truncated"),
        (topics.CALLS, b"CWB2" + b"\x00" * 12, "bad_magic"),
        (topics.STEPS, b'"just a string"', "not_object"),
        (topics.STEPS, b"[]", "not_object"),
        (topics.HW, b'{"v":1,"job":"j1","node":"n","ts_ns":1,"temp_c":Infinity}', "bad_number"),
        (topics.HW, b'{"v":1,"job":"j1","node":"n","ts_ns":99999999999999999999}', "bad_time"),
        (topics.STEPS, b'{"v":1,"job":"j1","rank":"0","iteration":1,"t_start_ns":1,"t_end_ns":2}', "bad_field"),
        (topics.TOPOLOGY, b'{"v":1,"job":"j1","ts_ns":1,"rank":-1,"world_size":4,"node":"n"}', "bad_field"),
        (topics.STEPS, b"{" * 100000, "bad_json"),
    ],
)
def test_each_hostile_case_has_a_reason(topic, value, reason):
    out = _decode(topic, KEY if topic == topics.CALLS else "j1", value)
    assert isinstance(out, WireError) and out.reason == reason


def test_oversized_is_rejected_before_parsing():
    out = _decode(topics.STEPS, "j1", b" " * (2 << 20))
    assert isinstance(out, WireError) and out.reason == "oversized"


@hsettings(max_examples=200, deadline=None)
@given(line=st.text(max_size=200))
def test_capture_lines_never_crash(line):
    try:
        msg = parse_line(line, 1)
    except CaptureLineError as exc:
        assert exc.reason
    else:
        assert isinstance(msg.value, bytes)
