"""End to end: a real 3-rank DistributedDataParallel job on gloo, read back from the rings.

DDP's reducer all-reduces gradient buckets from C++; the hook sees them through the
DDP communication hook it registers. Rank 1 is slow in every forward, rank 2 stops
before the backward of iteration HANG_AT. The records written by the hook must show the
bucket all-reduces with the contract's semantics: rank 1 enters every one of them last
while its peers wait, and in iteration HANG_AT ranks 0 and 1 are inside all-reduces
that rank 2 never entered.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from commwatch import ring, wire  # noqa: E402
from commwatch.embedded import free_port  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.torch]
JOB_SCRIPT = Path(__file__).with_name("ddp_job.py")
WORLD = 3
SLOW, HUNG, HANG_AT = 1, 2, 10
SLOW_S = 0.15
GRAD_BYTES = 2 * (512 * 512 + 512) * 4  # ddp_job.py's model, float32


def read_calls(readers: dict[int, ring.RingReader], calls: dict[int, list]) -> None:
    for r, reader in readers.items():
        recs, lost = reader.poll()
        assert lost == 0
        calls[r].extend(recs[recs["kind"] == wire.KIND_CALL])


def by_seq(recs: list) -> tuple[dict[int, np.void], dict[int, np.void]]:
    entries = {int(x["seq"]): x for x in recs if not x["flags"] & wire.FLAG_COMPLETED}
    done = {int(x["seq"]): x for x in recs if x["flags"] & wire.FLAG_COMPLETED}
    return entries, done


def hang_settled(calls: dict[int, list]) -> bool:
    """Rank 2 has done all its iterations before HANG_AT, and ranks 0 and 1 have entered
    all-reduces beyond them (which they cannot complete)."""
    views = {r: by_seq(c) for r, c in calls.items()}
    if not all(views.values()) or not views[HUNG][0]:
        return False
    if sum(int(d["bytes"]) for d in views[HUNG][1].values()) < HANG_AT * GRAD_BYTES:
        return False  # rank 2 is merely behind its peers in an earlier iteration
    hung_last = max(views[HUNG][0])
    return all(set(e) - set(d) and min(set(e) - set(d)) > hung_last for e, d in (views[0], views[SLOW]))


def test_ddp_gradient_allreduces_with_a_slow_and_a_hung_rank(tmp_path):
    rings = tmp_path / "rings"
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMWATCH_")}
    env.update({"COMMWATCH_RING_DIR": str(rings), "COMMWATCH_JOB_ID": "ddp"})
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(JOB_SCRIPT), str(r), str(WORLD), str(port), "--steps", "40",
                               "--slow-rank", str(SLOW), "--slow-s", str(SLOW_S), "--hang-rank", str(HUNG),
                               "--hang-at", str(HANG_AT)], env=env) for r in range(WORLD)]
    readers: dict[int, ring.RingReader] = {}
    calls: dict[int, list] = {r: [] for r in range(WORLD)}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for r in range(WORLD):
                path = ring.ring_path(rings, "ddp", r)
                if r not in readers and path.exists():
                    readers[r] = ring.RingReader(path)
            read_calls(readers, calls)
            if len(readers) == WORLD and hang_settled(calls):
                break
            assert all(p.poll() is None for p in procs), "a rank exited"
            time.sleep(0.2)
        time.sleep(1.0)  # nothing completes any more
        read_calls(readers, calls)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(30)
    assert hang_settled(calls), f"no hang seen; records per rank: { {r: len(c) for r, c in calls.items()} }"

    views = {r: by_seq(c) for r, c in calls.items()}
    # Semantics of the gloo path: entry (no flag) then completion (COMPLETED) with the same
    # entry time, completion after entry; no device flags.
    for r, c in calls.items():
        assert {int(x["flags"]) for x in c} <= {0, wire.FLAG_COMPLETED}
        assert {int(x["op"]) for x in c} == {wire.OP_ALLREDUCE} and len({int(x["comm"]) for x in c}) == 1
        entries, done = views[r]
        assert set(done) <= set(entries)
        for s, d in done.items():
            assert d["t_start_ns"] == entries[s]["t_start_ns"] <= d["t_end_ns"]
    assert len({int(c[0]["comm"]) for c in calls.values()}) == 1  # one communicator, the same id everywhere

    # Every iteration before the hang all-reduced all gradients, in several buckets.
    completed = sorted(set(views[0][1]) & set(views[SLOW][1]) & set(views[HUNG][1]))
    assert sum(int(views[0][1][s]["bytes"]) for s in completed) == HANG_AT * GRAD_BYTES
    assert len(completed) > HANG_AT  # more than one bucket per iteration
    for s in completed:
        assert len({int(views[r][1][s]["bytes"]) for r in range(WORLD)}) == 1

    # The hang: ranks 0 and 1 are inside iteration HANG_AT's all-reduces; rank 2 entered none.
    hung_entries, hung_done = views[HUNG]
    assert set(hung_entries) == set(hung_done) == set(completed)
    for r in (0, SLOW):
        entries, done = views[r]
        open_seqs = set(entries) - set(done)
        assert open_seqs and min(open_seqs) == max(completed) + 1

    # The slow rank enters last while its peers wait inside the call.
    start = np.array([[int(views[r][0][s]["t_start_ns"]) for s in completed] for r in range(WORLD)])
    dur = np.array([[int(views[r][1][s]["t_end_ns"] - views[r][1][s]["t_start_ns"]) for s in completed]
                    for r in range(WORLD)])
    late = start - start.min(axis=0)
    assert np.mean(start.argmax(axis=0) == SLOW) >= 0.6  # (1/3 if it were not slow; a loaded host jitters)
    assert np.median(late[SLOW]) > SLOW_S / 2 * 1e9
    assert np.median(dur[0]) > SLOW_S / 2 * 1e9 and np.median(dur[SLOW]) < np.median(dur[0])
