"""The byte-pattern check of small call batches accepts exactly what numpy's
`validate_records` accepts (property-based over records near every boundary)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings as hsettings, strategies as st

from commwatch import wire
from commwatch.wire import WireError

COMM = 0x00FF00000000AB0A  # has a newline byte and a 0xff: the pattern must escape both

edge = lambda *xs: st.sampled_from(xs)  # noqa: E731
record = st.fixed_dictionaries({
    "kind": edge(0, 1, 2, 3, 4, 255),
    "op": edge(0, wire.OP_MAX, wire.OP_MAX + 1, 128, 255),
    "rank": edge(-2**31, -2, -1, 0, 5, 2**31 - 1),
    "comm": edge(COMM, COMM ^ 1, COMM ^ (1 << 63), 0),
    "t_start_ns": edge(-1, 0, 10**18, 2**63 - 1, -2**63),
    "t_end_ns": edge(-1, 0, 10**18, 2**63 - 1),
    "seq": edge(0, 2**64 - 1),
})


def _reason(fn) -> str | None:
    try:
        fn()
    except WireError as exc:
        return exc.reason
    return None


@hsettings(max_examples=150, deadline=None)
@given(rows=st.lists(record, max_size=wire.FAST_CHECK_RECORDS), keyed=st.booleans())
def test_fast_check_agrees_with_numpy_validation(rows, keyed):
    recs = wire.empty(len(rows))
    for i, row in enumerate(rows):
        for name, value in row.items():
            recs[name][i] = value
    comm = COMM if keyed else None
    value = wire.encode_batch(recs)
    assert _reason(lambda: wire.check_batch(value, comm)) == _reason(lambda: wire.validate_records(recs, comm))
    if _reason(lambda: wire.validate_records(recs, comm)) is None:
        assert wire.check_batch(value, comm) == len(rows)
        assert np.array_equal(wire.decode_batch(value, comm), recs)
