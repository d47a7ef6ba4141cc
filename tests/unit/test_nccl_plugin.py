"""The C probe in nccl-patch/: its harness passes (plain and under ASan/UBSan), its record
layout is the numpy dtype's, and a ring file it wrote decodes with numpy the way the node
agent reads it, with the completion semantics of wire section 1."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from commwatch import wire
from commwatch.wire import RECORD_DTYPE

ROOT = Path(__file__).resolve().parents[2]
NCCL_PATCH = ROOT / "nccl-patch"
FIELDS = ["kind", "op", "flags", "rank", "comm", "seq", "t_start_ns", "t_end_ns", "bytes",
          "comm_rank", "peer", "nranks", "aux"]
# RING.md, "numpy view"
RING_HEADER = np.dtype([("magic", "S8"), ("version", "<u4"), ("record_size", "<u4"),
                        ("capacity", "<u8"), ("write_index", "<u8"), ("dropped", "<u8"),
                        ("heartbeat_ns", "<i8"), ("pid", "<i4"), ("rank", "<i4"),
                        ("uid", "<u4"), ("closed", "<u4"), ("job_id", "S64"),
                        ("commit_index", "<u8"), ("reserved1", "V120")])
SEM_COMMS = {0xA1A1A1A1A1A1A1A1: (4, 1, 1), 0xB2B2B2B2B2B2B2B2: (8, 2, 2), 0xC3C3C3C3C3C3C3C3: (2, 0, 1)}
SEM_ITERS = 200
SCENARIOS = 19
RECORDED = NCCL_PATCH / "test" / "recorded"
# Per iteration and comm: AllReduce, AllGather (no kernel channels), Broadcast, ReduceScatter,
# Send, Recv. Five get an entry and a completion record, the AllGather one record.
SEM_RECORDS_PER_ITER = 11
ALLGATHER = 2

needs_toolchain = pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("make") is None, reason="gcc and make are required"
)


@pytest.fixture(scope="module")
def harness_run(tmp_path_factory):
    """`make -C nccl-patch test` once, leaving the harness's ring files in a temp dir."""
    ring_dir = tmp_path_factory.mktemp("rings")
    env = dict(os.environ, COMMWATCH_RING_DIR=str(ring_dir))
    proc = subprocess.run(["make", "-C", str(NCCL_PATCH), "test"], env=env, capture_output=True,
                          text=True, timeout=300)
    return proc, ring_dir


def _asan_available() -> bool:
    if shutil.which("gcc") is None:
        return False
    proc = subprocess.run(["gcc", "-fsanitize=address,undefined", "-x", "c", "-o", os.devnull, "-"],
                          input="int main(void) { return 0; }", capture_output=True, text=True)
    return proc.returncode == 0


@needs_toolchain
def test_make_test_passes(harness_run):
    proc, _ = harness_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert f"harness: {SCENARIOS} of {SCENARIOS} scenarios passed" in proc.stdout
    assert "exports: ncclProfiler_v4 ncclProfiler_v5 ncclProfiler_v6" in proc.stdout
    for name in ("fewer channel events than nChannels", "zero channels", "proxy and network events",
                 "graph-captured operations", "channels that never stop", "abort at finalize",
                 "interleaved: 3 comms on 3 threads", "ring lifecycle", "fork:",
                 "recorded: event sequences of a real NCCL replayed", "device entry: a kernel waiting"):
        assert f"PASS {name}" in proc.stdout, name
    # every trace recorded under NCCL 2.28.9 on an H100 replays to the records the GPU run wrote
    traces = sorted(p.name[: -len(".trace")] for p in RECORDED.glob("*.trace"))
    assert len(traces) == 13
    for base in traces:
        assert f"  recorded {base}: " in proc.stdout and f"recorded {base}: 0 records" not in proc.stdout, base
    assert "DIFFERENT" not in proc.stdout
    # device entries: only the rank that waits on its peer's hang (host or GPU) gets one
    for base in traces:
        want = 1 if base in ("hang-nccl.0", "gpuhang-nccl.0") else 0
        assert f"; {want} device entries" in proc.stdout.split(f"  recorded {base}: ")[1].split("\n")[0], base


@needs_toolchain
def test_recorder_forwards_every_call_and_writes_the_trace(tmp_path):
    """The recorder (test/recorder.c) in front of the plugin: the harness's interleaved scenario
    passes through it unchanged, and the trace holds each kind of call."""
    subprocess.run(["make", "-s", "-C", str(NCCL_PATCH), "recorder", "build/harness"], check=True, timeout=300)
    build = NCCL_PATCH / "build"
    trace = tmp_path / "h.trace"
    env = dict(os.environ, COMMWATCH_RECORD_PLUGIN=str(build / "libnccl-profiler-commwatch.so"),
               COMMWATCH_RECORD_FILE=str(trace), COMMWATCH_RING_DIR=str(tmp_path / "rings"))
    proc = subprocess.run([str(build / "harness"), str(build / "libnccl-profiler-commwatch-recorder.so"),
                           "interleaved: 3 comms"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "harness: 1 of 1 scenarios passed" in proc.stdout, proc.stdout + proc.stderr
    lines = trace.read_text().splitlines()
    assert lines[0] == "V 5"
    kinds = {line[0] for line in lines[1:]}
    assert kinds == {"I", "S", "E", "R", "F"}
    assert sum(line.startswith("I ") for line in lines) == 3


@needs_toolchain
@pytest.mark.skipif(not _asan_available(), reason="gcc cannot build with AddressSanitizer here")
def test_harness_passes_under_asan_and_ubsan(tmp_path):
    env = dict(os.environ, COMMWATCH_RING_DIR=str(tmp_path))
    proc = subprocess.run(["make", "-C", str(NCCL_PATCH), "asan"], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert f"harness: {SCENARIOS} of {SCENARIOS} scenarios passed" in proc.stdout
    assert "ERROR: AddressSanitizer" not in proc.stderr and "runtime error" not in proc.stderr


@needs_toolchain
def test_c_record_layout_and_flags_match_python(tmp_path):
    exe = tmp_path / "print_layout"
    subprocess.run(["gcc", "-std=gnu11", "-Wall", "-Werror", "-I", str(NCCL_PATCH / "include"),
                    "-o", str(exe), str(NCCL_PATCH / "test" / "print_layout.c")], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    c_fields = [line.split() for line in out if line and not line.startswith(("sizeof", "flag "))]
    c_flags = {line.split()[1]: int(line.split()[2]) for line in out if line.startswith("flag ")}
    c_size = int(next(line for line in out if line.startswith("sizeof")).split()[1])

    assert list(RECORD_DTYPE.names) == FIELDS
    assert [name for name, _, _ in c_fields] == FIELDS
    for name, offset, size in c_fields:
        dt, off = RECORD_DTYPE.fields[name][:2]
        assert (int(offset), int(size)) == (off, dt.itemsize), name
    assert c_size == RECORD_DTYPE.itemsize == 64
    assert c_flags == {name: getattr(wire, f"FLAG_{name}") for name in
                       ("COMPLETED", "GPU_TIMED", "GRAPH_CAPTURED", "ENQUEUED", "COMPLETION_LOST")}


@needs_toolchain
def test_harness_ring_file_decodes_with_numpy(harness_run):
    """The interleaved scenario's ring, as a reader saw it after the writer closed it."""
    proc, ring_dir = harness_run
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert not (ring_dir / "harness-v5" / "3.ring").exists()  # the writer removed its file
    data = (ring_dir / "harness-v5" / "3.ring.closed").read_bytes()
    hdr = np.frombuffer(data, dtype=RING_HEADER, count=1)[0]
    assert RING_HEADER.itemsize == 256
    assert hdr["magic"] == b"CWRING01" and hdr["version"] == 1 and hdr["record_size"] == 64
    assert hdr["rank"] == 3 and hdr["job_id"] == b"harness-v5" and hdr["dropped"] == 0
    assert hdr["closed"] == 1
    n = int(hdr["write_index"])
    assert n == int(hdr["commit_index"]) == 3 * (2 + SEM_ITERS * SEM_RECORDS_PER_ITER)
    assert len(data) == 256 + 64 * int(hdr["capacity"])

    recs = np.frombuffer(data, dtype=RECORD_DTYPE, offset=256, count=int(hdr["capacity"]))[:n]
    assert set(np.unique(recs["kind"]).tolist()) == {1, 2, 3}
    assert (recs["rank"] == 3).all()

    inits = recs[recs["kind"] == 2]
    assert sorted(inits["comm"].tolist()) == sorted(SEM_COMMS)
    for r in inits:
        nranks, comm_rank, nodes = SEM_COMMS[int(r["comm"])]
        assert (r["nranks"], r["comm_rank"], r["aux"], r["seq"]) == (nranks, comm_rank, nodes, 0)
    assert sorted(recs[recs["kind"] == 3]["comm"].tolist()) == sorted(SEM_COMMS)

    calls = recs[recs["kind"] == 1]
    flags = calls["flags"].astype(int)
    entry = flags == wire.FLAG_ENQUEUED
    lost = flags == wire.FLAG_ENQUEUED | wire.FLAG_COMPLETION_LOST
    done = flags == wire.FLAG_COMPLETED | wire.FLAG_GPU_TIMED
    assert (entry | lost | done).all()  # nothing else: entries are host enqueues, ends GPU times
    assert (calls["t_end_ns"][entry | lost] == 0).all()
    assert (calls["t_end_ns"][done] >= calls["t_start_ns"][done]).all()
    assert lost.sum() == 3 * SEM_ITERS and (calls["op"][lost] == ALLGATHER).all()
    assert entry.sum() == done.sum() == 3 * SEM_ITERS * 5
    p2p = np.isin(calls["op"], [6, 7])
    for comm in SEM_COMMS:
        mine = (calls["comm"] == comm) & ~p2p
        # every collective enters once (an entry, or one record that writes it off) ...
        assert (np.sort(calls["seq"][mine & (entry | lost)]) == np.arange(SEM_ITERS * 4)).all()
        # ... and all but the AllGathers complete on the GPU
        completed = np.sort(calls["seq"][mine & done])
        assert (completed == np.array([s for s in range(SEM_ITERS * 4) if s % 4 != 1])).all()
        sends = calls[(calls["comm"] == comm) & (calls["op"] == 6) & entry]
        assert (np.sort(sends["seq"]) == np.arange(SEM_ITERS)).all()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
