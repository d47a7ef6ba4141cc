"""Stage-1 report bundles on the internal topic: encoded with msgspec, read back equal."""

import numpy as np
import pytest

from commwatch.capture import Message
from commwatch.streams.app import decode_report
from commwatch.streams.report_out import REPORTS, bundles, encode_bundle
from commwatch.wire import WireError


def _reports() -> list[dict]:
    return [
        {"type": "window", "job": "j1", "ts_ns": 1_767_225_620_000_000_123, "comm": "ab", "ranks": [0, 1, -2],
         "lag_ms": [2.9413249665552596e-06, -1.6480751708556526e16, 0.1], "busy_ms": [None, 3.5, 0.0],
         "span_ns": np.int64(1_000_000_000), "bytes": np.float64(4.0e6)},
        {"type": "wait", "job": "j1", "ts_ns": 1_767_225_620_500_000_000, "comm": "cd",
         "instances": [{"seq": 7, "op": "AllReduce", "entered": [0], "missing": [1], "t_in": [0, 0]}]},
        {"type": "node", "job": "j2", "ts_ns": 5, "node": "n-01", "ranks": [3, 4]},
    ]


def test_a_bundle_reads_back_as_the_reports_it_holds():
    reps = _reports()
    got = {b["job"]: decode_report(Message(REPORTS, b["job"], b["ts_ns"], encode_bundle(b))) for b in bundles(reps)}
    assert sorted(got) == ["j1", "j2"]
    assert got["j1"]["ts_ns"] == 1_767_225_620_500_000_000  # the newest report's time
    first = got["j1"]["reports"][0]
    assert first["lag_ms"] == [2.9413249665552596e-06, -1.6480751708556526e16, 0.1]  # exact round trip
    assert first["busy_ms"] == [None, 3.5, 0.0]
    assert first["span_ns"] == 1_000_000_000 and type(first["span_ns"]) is int  # numpy scalars as numbers
    assert first["bytes"] == 4.0e6 and type(first["bytes"]) is float
    assert got["j1"]["reports"][1]["instances"] == reps[1]["instances"]
    assert got["j2"]["reports"] == [reps[2]]


def test_what_is_not_json_is_refused_at_encoding():
    with pytest.raises(TypeError, match="object"):
        encode_bundle({"type": "bundle", "job": "j", "ts_ns": 1, "reports": [{"bad": object()}]})


@pytest.mark.parametrize("value, reason", [(b"\x00", "bad_json"), (b'{"type":"bundle","job":"j"}', "not_object"),
                                           (b'{"type":"bundle","job":"j","ts_ns":1,"reports":[{"job":"k"}]}',
                                            "bad_field")])
def test_a_bad_bundle_is_a_wire_error(value, reason):
    with pytest.raises(WireError) as err:
        decode_report(Message(REPORTS, "j", 1, value))
    assert err.value.reason == reason
