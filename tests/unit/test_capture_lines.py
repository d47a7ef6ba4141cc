"""Capture lines: the typed parser (msgspec) and the checked parser agree on every line, valid
or hostile: the same message (a JSON value equal once parsed), or the same reason refused."""

from __future__ import annotations

import base64
import io
import json

from hypothesis import given, settings as hsettings, strategies as st

from commwatch.capture import CaptureLineError, CaptureWriter, Message, _parse_line_checked, parse_line
from commwatch.producers.simulate import JobSpec, simulate

T0 = 1_767_225_600_000_000_000
GOOD = [
    {"topic": "cw.steps.v1", "key": "j", "ts_ns": T0, "value": {"v": 1, "job": "j", "phases": {"f": 1.5}}},
    {"topic": "cw.calls.v1", "key": "j/00000000000000ab", "ts_ns": T0, "value_b64": base64.b64encode(b"CWB1xx").decode()},
    {"topic": "cw.hw.v1", "ts_ns": 0, "value": None, "extra": [1, 2]},
    {"topic": "cw.hw.v1", "key": None, "ts_ns": 5, "value": "caf\u00e9 \u2603"},
]


def outcome(parse, line: str):
    try:
        m = parse(line, 7)
    except CaptureLineError as err:
        return ("refused", err.reason)
    try:
        value = json.loads(m.value)
    except ValueError:
        value = m.value
    return (m.topic, m.key, m.ts_ns, value)


def agree(line: str):
    fast, checked = outcome(parse_line, line), outcome(_parse_line_checked, line)
    assert fast == checked, line
    return fast


def test_good_and_simulated_lines_parse_alike():
    lines = [json.dumps(obj) for obj in GOOD]
    buf = io.StringIO()
    with CaptureWriter(buf) as w:
        for m in simulate(JobSpec(job="lines", tp=2, pp=2, dp=1, duration_s=1.0)).messages():
            w.write(m)
    lines += buf.getvalue().splitlines()
    assert all(agree(line)[0] != "refused" for line in lines)


def test_hostile_lines_refused_alike():
    bad = ['', 'null', '[]', '{"topic": 1, "ts_ns": 0, "value": 1}', '{"topic": "t", "ts_ns": true, "value": 1}',
           '{"topic": "t", "ts_ns": -1, "value": 1}', '{"topic": "t", "ts_ns": 1e3, "value": 1}',
           f'{{"topic": "t", "ts_ns": {2**80}, "value": 1}}', '{"topic": "t", "ts_ns": 0, "key": 3, "value": 1}',
           '{"topic": "t", "ts_ns": 0}', '{"topic": "t", "ts_ns": 0, "value_b64": null}',
           '{"topic": "t", "ts_ns": 0, "value_b64": "!!"}', '{"topic": "t", "ts_ns": 0, "value": NaN}',
           '{"topic": "t", "ts_ns": 0, "value": [' + "[" * 5000 + "]" * 5000 + ']}',
           '{"topic": "t", "ts_ns": 0, "value": 1, "value": 2}', '{"topic": "t", "ts_ns": 0, "value": 1',
           '{"topic": "t", "ts_ns": 0, "value_b64": "QUJD", "value": 1}']
    for line in bad:
        agree(line)
    assert agree('{"topic": "t", "ts_ns": 0, "value_b64": null}') == ("refused", "value_b64 is not base64")


FIELD = st.sampled_from(["topic", "key", "ts_ns", "value", "value_b64", "other"])
VALUE = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8),
                  st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@hsettings(max_examples=400, deadline=None)
@given(st.sampled_from(GOOD), st.dictionaries(FIELD, VALUE, max_size=3), st.sets(FIELD, max_size=2))
def test_mutated_lines_agree(base, changes, dropped):
    obj = {k: v for k, v in {**base, **changes}.items() if k not in dropped}
    agree(json.dumps(obj))


def test_a_json_value_is_kept_as_written():
    m = parse_line('{"topic":"cw.steps.v1","key":"j","ts_ns":3,"value":{"v":1,"job":"j"}}')
    assert m == Message("cw.steps.v1", "j", 3, b'{"v":1,"job":"j"}')
