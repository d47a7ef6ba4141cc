"""Point-to-point calls through the hook on a real 2-rank gloo job: async works complete
from their works, every SEND pairs with a RECV of the same number on the peer."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from commwatch import ring, wire  # noqa: E402
from commwatch.embedded import free_port  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.torch]
JOB = Path(__file__).with_name("p2p_job.py")


def test_isend_irecv_and_batches_complete_from_their_works(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMWATCH_")}
    env.update({"COMMWATCH_RING_DIR": str(tmp_path), "COMMWATCH_JOB_ID": "p2p"})
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(JOB), str(r), str(port)], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for r in (0, 1)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "done"
        calls = {}
        for r in (0, 1):
            reader = ring.RingReader(ring.ring_path(tmp_path, "p2p", r))
            got = []
            deadline = time.monotonic() + 10  # async completions may land just after "done"
            while time.monotonic() < deadline:
                recs, _ = reader.poll()
                got.extend(x for x in recs if x["kind"] == wire.KIND_CALL)
                if sum(1 for x in got if x["flags"] & wire.FLAG_COMPLETED) >= 5:
                    break
                time.sleep(0.05)
            calls[r] = got
    finally:
        for p in procs:
            p.stdin.close()
        for p in procs:
            p.wait(30)
    for r in (0, 1):
        entries = {(int(x["op"]), int(x["seq"])) for x in calls[r] if not x["flags"]}
        done = {(int(x["op"]), int(x["seq"])) for x in calls[r] if x["flags"] == wire.FLAG_COMPLETED}
        # isend+irecv, a batch of both, then send (rank 0) or recv (rank 1): per (peer, op) numbering
        sends, recvs = (3, 2) if r == 0 else (2, 3)
        expected = {(wire.OP_SEND, s) for s in range(sends)} | {(wire.OP_RECV, s) for s in range(recvs)}
        assert entries == done == expected, (r, entries, done)
        assert {int(x["peer"]) for x in calls[r]} == {1 - r}
        assert all(int(x["t_end_ns"]) >= int(x["t_start_ns"]) for x in calls[r] if x["flags"])
