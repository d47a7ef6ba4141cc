"""The shared-memory ring: layout, publish protocol, wrap-around, overruns."""

from __future__ import annotations

import re
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from commwatch import ring, wire

ROOT = Path(__file__).resolve().parents[2]


def write_calls(w: ring.RingWriter, n: int, start: int = 0) -> None:
    for s in range(start, start + n):
        w.write(wire.KIND_CALL, wire.OP_ALLREDUCE, 0, 0xC0FFEE, s, 1000 + s, 0, 64, 0, -1, 4, 0)


def test_header_offsets_match_the_c_header():
    text = (ROOT / "nccl-patch/include/commwatch_ring.h").read_text()
    asserted = {name: int(off) for name, off in re.findall(r"offsetof\(struct cw_ring_header, (\w+)\) == (\d+)", text)}
    ours = {"magic": ring.OFF_MAGIC, "version": ring.OFF_VERSION, "record_size": ring.OFF_RECORD_SIZE,
            "capacity": ring.OFF_CAPACITY, "write_index": ring.OFF_WRITE_INDEX, "dropped": ring.OFF_DROPPED,
            "heartbeat_ns": ring.OFF_HEARTBEAT, "pid": ring.OFF_PID, "rank": ring.OFF_RANK, "uid": ring.OFF_UID,
            "closed": ring.OFF_CLOSED, "job_id": ring.OFF_JOB, "commit_index": ring.OFF_COMMIT}
    for name, off in ours.items():
        assert asserted[name] == off, name
    assert "CW_RING_HEADER_SIZE 256" in text and ring.HEADER_SIZE == 256


def test_writer_header_and_records(tmp_path):
    w = ring.RingWriter(tmp_path / "j" / "3.ring", rank=3, job="job-7", capacity=16)
    write_calls(w, 5)
    raw = (tmp_path / "j" / "3.ring").read_bytes()
    assert raw[:8] == b"CWRING01"
    assert struct.unpack_from("<IIQQ", raw, 8) == (1, 64, 16, 5)
    assert struct.unpack_from("<i", raw, 52)[0] == 3
    assert raw[64:70] == b"job-7\0"
    recs = np.frombuffer(raw, dtype=wire.RECORD_DTYPE, count=5, offset=256)
    assert list(recs["seq"]) == [0, 1, 2, 3, 4]
    assert set(recs["rank"]) == {3} and set(recs["comm"]) == {0xC0FFEE} and set(recs["peer"]) == {-1}
    wire.validate_records(recs)


def test_reader_tails_across_wrap_around(tmp_path):
    w = ring.RingWriter(tmp_path / "0.ring", rank=0, job="j", capacity=8)
    r = ring.RingReader(tmp_path / "0.ring")
    seen = []
    for chunk in (5, 6, 7, 8):
        write_calls(w, chunk, start=len(seen))
        recs, lost = r.poll()
        assert lost == 0
        seen += [int(s) for s in recs["seq"]]
    assert seen == list(range(26))


def test_reader_counts_records_lost_to_an_overrun(tmp_path):
    w = ring.RingWriter(tmp_path / "0.ring", rank=0, job="j", capacity=8)
    r = ring.RingReader(tmp_path / "0.ring")
    write_calls(w, 3)
    assert len(r.poll()[0]) == 3
    write_calls(w, 20, start=3)  # laps the reader
    recs, lost = r.poll()
    assert lost == 12 and list(recs["seq"]) == list(range(15, 23))
    assert r.lost == 12


def test_unpublished_record_is_waited_for_then_skipped(tmp_path):
    w = ring.RingWriter(tmp_path / "0.ring", rank=0, job="j", capacity=8)
    r = ring.RingReader(tmp_path / "0.ring", stuck_s=0.05)
    write_calls(w, 3)
    w.mm[ring.HEADER_SIZE + 1 * 64] = 0  # record 1 reserved but not published (writer mid-write)
    recs, lost = r.poll()
    assert list(recs["seq"]) == [0] and lost == 0
    assert len(r.poll()[0]) == 0  # still waiting
    time.sleep(0.08)
    recs, lost = r.poll()  # the writer is taken to have died mid-record
    assert list(recs["seq"]) == [2] and lost == 1


def test_reader_refuses_files_that_are_not_rings(tmp_path):
    p = tmp_path / "0.ring"
    p.write_bytes(b"NOTARING" + bytes(300))
    with pytest.raises(ring.RingError) as e:
        ring.RingReader(p)
    assert e.value.reason == "bad_magic"
    p.write_bytes(b"CWR")
    with pytest.raises(ring.RingError) as e:
        ring.RingReader(p)
    assert e.value.reason == "truncated"


def test_capacity_must_be_a_power_of_two(tmp_path):
    with pytest.raises(ring.RingError):
        ring.RingWriter(tmp_path / "0.ring", rank=0, job="j", capacity=12)


def test_step_ring_round_trip(tmp_path):
    w = ring.RingWriter(tmp_path / "0.steps", rank=5, job="j", capacity=4, magic=ring.STEP_MAGIC)
    w.write_step(7, 100, 250, forward_ms=1.5)
    r = ring.RingReader(tmp_path / "0.steps", ring.STEP_MAGIC, ring.STEP_DTYPE)
    recs, _ = r.poll()
    assert int(recs["iteration"][0]) == 7 and int(recs["rank"][0]) == 5 and int(recs["t_end_ns"][0]) == 250
    assert recs["forward_ms"][0] == 1.5 and np.isnan(recs["backward_ms"][0])
    with pytest.raises(ring.RingError):
        ring.RingReader(tmp_path / "0.steps")  # a step ring is not a call ring


def test_commit_index_follows_the_records_and_finalising_says_closed(tmp_path):
    w = ring.RingWriter(tmp_path / "j" / "0.ring", rank=0, job="j", capacity=8)
    r = ring.RingReader(w.path)
    write_calls(w, 11)  # wraps around
    assert int(r.header[ring.OFF_COMMIT // 8]) == r.write_index == 11 and not r.closed
    w.close(unlink=True)
    assert r.closed and not w.path.exists()
    recs, lost = r.poll()  # a reader that has it mapped still reads the rest
    assert lost == 3 and list(recs["seq"]) == list(range(3, 11))
