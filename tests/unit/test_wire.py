import numpy as np
import pytest

from commwatch import wire
from commwatch.wire import WireError


def _recs(n=3, comm=0x1234):
    r = wire.empty(n)
    r["kind"] = wire.KIND_CALL
    r["op"] = wire.OP_ALLREDUCE
    r["comm"] = comm
    r["seq"] = np.arange(n)
    r["rank"] = np.arange(n)
    r["t_start_ns"] = 1_000 + np.arange(n)
    return r


def test_record_layout_matches_contract():
    offsets = {name: wire.RECORD_DTYPE.fields[name][1] for name in wire.RECORD_DTYPE.names}
    assert offsets == {
        "kind": 0, "op": 1, "flags": 2, "rank": 4, "comm": 8, "seq": 16, "t_start_ns": 24,
        "t_end_ns": 32, "bytes": 40, "comm_rank": 48, "peer": 52, "nranks": 56, "aux": 60,
    }
    assert wire.RECORD_DTYPE.itemsize == 64


def test_roundtrip():
    recs = _recs()
    out = wire.decode_batch(wire.encode_batch(recs), comm=0x1234)
    assert (out == recs).all()
    assert wire.encode_batch(recs)[:4] == b"CWB1"


@pytest.mark.parametrize(
    "mangle,reason",
    [
        (lambda b: b"XXXX" + b[4:], "bad_magic"),
        (lambda b: b[:4] + (2).to_bytes(2, "little") + b[6:], "bad_version"),
        (lambda b: b[:6] + (32).to_bytes(2, "little") + b[8:], "bad_record_size"),
        (lambda b: b[:10], "truncated"),
        (lambda b: b[:-10], "truncated"),
        (lambda b: b[:8] + (9).to_bytes(4, "little") + b[12:], "count_mismatch"),
        (lambda b: b"", "truncated"),
    ],
)
def test_decode_errors(mangle, reason):
    with pytest.raises(WireError) as err:
        wire.decode_batch(mangle(wire.encode_batch(_recs())), comm=0x1234)
    assert err.value.reason == reason


def test_comm_mismatch_kind_and_op():
    with pytest.raises(WireError, match="comm_mismatch"):
        wire.decode_batch(wire.encode_batch(_recs()), comm=0x9999)
    r = _recs()
    r["kind"][1] = 9
    with pytest.raises(WireError, match="unknown_kind"):
        wire.decode_batch(wire.encode_batch(r))
    r = _recs()
    r["op"][2] = 200
    with pytest.raises(WireError, match="unknown_op"):
        wire.decode_batch(wire.encode_batch(r))


def test_comm_hex():
    assert wire.comm_hex(0x9F2C4D1E00A1B2C3) == "9f2c4d1e00a1b2c3"
    assert wire.parse_comm("9f2c4d1e00a1b2c3") == 0x9F2C4D1E00A1B2C3
    with pytest.raises(WireError):
        wire.parse_comm("xyz")


def test_a_call_across_a_clock_set_back_is_kept_with_its_times_left_out_of_timing():
    """CLOCK_REALTIME set back while a call ran: its record ends before it started. A real
    probe writes that (the job model's `clock-step` scenarios do, on 12 of 7,325 messages);
    refusing it lost the batch's other calls. It is kept: its completion counts, its times
    are not read as timing."""
    from commwatch.streams.detect.comm_state import CommState

    recs = _recs(4)
    recs["flags"] = wire.FLAG_COMPLETED | wire.FLAG_GPU_TIMED
    recs["seq"] = 0
    recs["nranks"], recs["comm_rank"] = 4, np.arange(4)
    recs["t_start_ns"] = 1_767_225_600_000_000_000 + np.arange(4)
    recs["t_end_ns"] = recs["t_start_ns"] + 500
    recs["t_end_ns"][2] = recs["t_start_ns"][2] - 2_000_000_000
    out = wire.decode_batch(wire.encode_batch(recs), comm=0x1234)
    assert (out == recs).all()
    st = CommState("j", 0x1234, 8)
    st.apply_records(out, np.full(4, 10**12, np.int64))
    assert st.completed.tolist() == [0, 0, 0, 0]
    assert st.ok[0].tolist() == [True, True, False, True]
