"""The typed decoders (`message_schema`, msgspec) never accept what the field checks of
`messages` refuse, and give the same dicts where both accept: on every hostile case of the
catalogue, on a simulated job's messages, and on generated mutations of valid messages."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from commwatch import message_schema, messages, topics
from commwatch.producers.simulate import JobSpec, simulate
from commwatch.wire import MAX_RANKS, MAX_SEQ, MAX_TS_NS, WireError
import hostile_inputs as hi

BASES = {topics.STEPS: hi.STEPS, topics.HW: hi.HW, topics.TOPOLOGY: hi.TOPOLOGY, topics.PROGRESS: hi.PROGRESS}


def slow(topic: str, value: bytes) -> dict | WireError:
    try:
        return messages.VALIDATORS[topic](messages.loads(value))
    except WireError as err:
        return err


def fast(topic: str, value: bytes) -> dict | None:
    decode_typed, across = message_schema.DECODERS[topic]
    try:
        msg = decode_typed(value)
    except message_schema.Refused:
        return None
    return msg if across is None or across(msg) else None


def agree(topic: str, value: bytes) -> tuple[dict | None, dict | WireError]:
    f, s = fast(topic, value), slow(topic, value)
    if f is not None:
        assert not isinstance(s, WireError), f"typed decoder accepted what the checks refuse ({s})"
        assert within(f, s), f"the typed decoder's dict differs: {f} against {s}"
    return f, s


def within(f, s) -> bool:
    """`f` equals `s` where it has a value: unknown fields are dropped, nothing else differs."""
    if isinstance(f, dict):
        return isinstance(s, dict) and all(k in s and within(v, s[k]) for k, v in f.items())
    if isinstance(f, list):
        return isinstance(s, list) and len(f) == len(s) and all(within(a, b) for a, b in zip(f, s))
    return type(f) is type(s) and f == s


@pytest.mark.parametrize("case", [c for c in hi.CASES if c.topic in message_schema.DECODERS], ids=lambda c: c.name)
def test_hostile_cases_refused_by_both(case):
    f, s = agree(case.topic, case.value)
    assert isinstance(s, WireError) or case.reason in ("bad_key", "job_mismatch", "comm_mismatch", "oversized",
                                                        "bad_time")
    # a refused message goes the slow way, which names the reason
    if isinstance(s, WireError):
        assert f is None
        with pytest.raises(WireError) as err:
            messages.decode(case.topic, case.value)
        assert err.value.reason == s.reason


def test_simulated_messages_take_the_typed_path_with_the_same_dicts():
    sim = simulate(JobSpec(job="schema", tp=2, pp=2, dp=2, duration_s=3.0))
    seen = {t: 0 for t in message_schema.DECODERS}
    for m in sim.messages():
        if m.topic in message_schema.DECODERS:
            f, s = agree(m.topic, m.value)
            assert f is not None, f"typed decoder refused a valid {m.topic} message: {m.value[:200]!r}"
            assert f == s, "a field of a valid message was dropped"
            seen[m.topic] += 1
    assert all(seen.values()), seen


TRICKY = st.sampled_from([
    -1, 0, 1, 2, MAX_RANKS - 1, MAX_RANKS, MAX_SEQ - 1, MAX_SEQ, MAX_TS_NS - 1, MAX_TS_NS, 2**63, -(2**63) - 1,
    1.5, 1e400, -0.0, True, False, None, "", "a", "a/b", "x\n", "\x7f", "0" * 16, "00000000000000ab",
    "send", "recv", "SEND", [], {}, [1], {"k": 1}, {"": 1}, {"k": -1}, {"k": 1e9}, {"k": 999999999.5},
])


def _mutate(base: dict, path: list, value) -> dict:
    doc = json.loads(json.dumps(base))
    node = doc
    for key in path[:-1]:
        node = node[key]
    if value is _DROP:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


_DROP = object()


def _paths(obj, prefix=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield [*prefix, k]
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield [*prefix, i]
            yield from _paths(v, (*prefix, i))


@hsettings(max_examples=600, deadline=None)
@given(st.sampled_from(sorted(BASES)), st.data())
def test_mutated_messages_agree(topic, data):
    base = BASES[topic]
    path = data.draw(st.sampled_from(list(_paths(base))))
    value = data.draw(st.one_of(TRICKY, st.just(_DROP), st.integers(), st.floats(allow_nan=False)))
    agree(topic, json.dumps(_mutate(base, path, value)).encode())


def test_decode_takes_the_typed_path_where_msgspec_is_installed():
    messages.decode(topics.STEPS, json.dumps(hi.STEPS).encode())
    assert messages._typed() is message_schema.DECODERS
