"""Ring discovery: ownership and path checks, removed rings, dead writers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from commwatch import ring
from commwatch.producers.agent.rings import RingDir


def make_ring(path, rank=0):
    return ring.RingWriter(path, rank=rank, job="j", capacity=8)


def test_discovers_rings_with_steps_and_meta(tmp_path):
    make_ring(tmp_path / "j1" / "0.ring")
    ring.RingWriter(tmp_path / "j1" / "0.steps", 0, "j1", 4, ring.STEP_MAGIC)
    (tmp_path / "j1" / "0.meta.json").write_text(json.dumps({"rank": 0, "world_size": 2}))
    make_ring(tmp_path / "j1" / "1.ring", rank=1)
    d = RingDir(tmp_path)
    added, removed = d.scan()
    assert sorted((s.job, s.rank) for s in added) == [("j1", 0), ("j1", 1)] and removed == []
    src0 = next(s for s in added if s.rank == 0)
    assert src0.steps is not None and src0.meta == {"rank": 0, "world_size": 2}
    assert d.scan() == ([], [])
    (tmp_path / "j1" / "1.ring").unlink()
    added, removed = d.scan()
    assert added == [] and [s.rank for s in removed] == [1]


def test_refuses_symlinks_and_rings_outside_the_dir(tmp_path):
    outside = tmp_path / "elsewhere"
    make_ring(outside / "0.ring")
    root = tmp_path / "rings"
    (root / "j").mkdir(parents=True)
    os.symlink(outside / "0.ring", root / "j" / "0.ring")
    os.symlink(outside, root / "linkedjob")
    (root / "j" / "1.ring").write_bytes(b"garbage" * 100)
    d = RingDir(root)
    added, _ = d.scan()
    assert added == []
    assert d.refused[root / "j" / "0.ring"] == "symlink"
    assert d.refused[root / "linkedjob"] == "symlink"
    assert "bad_magic" not in d.refused.get(root / "j" / "1.ring", "")  # retried later, not refused forever


def test_refuses_rings_of_another_uid(tmp_path):
    make_ring(tmp_path / "j" / "0.ring")
    d = RingDir(tmp_path, uid=os.getuid() + 1)
    assert d.scan()[0] == []
    assert "owned by uid" in d.refused[tmp_path / "j" / "0.ring"]


def test_dead_writer_is_noticed(tmp_path):
    code = ("import sys; from commwatch import ring; "
            "ring.RingWriter(sys.argv[1], rank=0, job='j', capacity=8)")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "j" / "0.ring")], check=True)
    make_ring(tmp_path / "j" / "1.ring", rank=1)
    d = RingDir(tmp_path)
    alive = {s.rank: s.writer_alive() for s in d.scan()[0]}
    assert alive == {0: False, 1: True}
