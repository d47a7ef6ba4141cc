"""Ring discovery: ownership and path checks, names, removed rings, writers gone (by their lock)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

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
    d = RingDir(tmp_path, uids=frozenset({os.getuid() + 1}))
    assert d.scan()[0] == []
    assert "owned by uid" in d.refused[tmp_path / "j" / "0.ring"]
    assert [s.rank for s in RingDir(tmp_path, uids=None).scan()[0]] == [0]  # `any`: read


def test_gone_writer_is_noticed_by_its_lock_not_its_pid(tmp_path):
    code = ("import sys; from commwatch import ring; "
            "ring.RingWriter(sys.argv[1], rank=0, job='j', capacity=8)")  # exits without finalising
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "j" / "0.ring")], check=True)
    with open(tmp_path / "j" / "0.ring", "r+b") as f:  # its pid now names a live process (this one)
        f.seek(ring.OFF_PID)
        f.write(os.getpid().to_bytes(4, "little"))
    w = make_ring(tmp_path / "j" / "1.ring", rank=1)
    d = RingDir(tmp_path)
    alive = {s.rank: s.writer_alive() for s in d.scan()[0]}
    assert alive == {0: False, 1: True}
    w.close(unlink=True)  # a writer that finalises removes its file: the agent sees it vanish
    _, vanished = d.scan()
    assert [s.rank for s in vanished] == [1] and not vanished[0].writer_alive()


def test_a_second_live_writer_of_a_rank_takes_another_name_and_a_dead_ones_name_is_reused(tmp_path):
    first = make_ring(tmp_path / "j" / "0.ring")
    second = make_ring(tmp_path / "j" / "0.ring")  # same process, but the first one holds the lock
    assert first.path.name == "0.ring" and second.path.name == f"0.{os.getpid()}.ring"
    d = RingDir(tmp_path)
    assert sorted(s.rank for s in d.scan()[0]) == [0, 0]
    first.mm.close()  # the first writer dies without removing its file (a mapping keeps the lock too)
    first.fd, fd = -1, first.fd
    os.close(fd)
    third = make_ring(tmp_path / "j" / "0.ring")
    assert third.path.name == "0.ring"  # free again: replaced
    src = next(s for s in d.sources.values() if s.calls.path.name == "0.ring")
    assert not src.writer_alive()
    d.drop(src)  # the agent finishing the dead writer must not remove the new writer's file
    assert (tmp_path / "j" / "0.ring").exists()
    assert [s.calls.path.name for s in d.scan()[0]] == ["0.ring"]


def test_drop_removes_the_files_of_a_gone_writer(tmp_path):
    code = ("import sys, pathlib; from commwatch import ring; "
            "w = ring.RingWriter(sys.argv[1], rank=3, job='j', capacity=8); "
            "ring.RingWriter(ring.companion(w.path, 'steps'), 3, 'j', 4, ring.STEP_MAGIC); "
            "ring.companion(w.path, 'meta.json').write_text('{}')")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "j" / "3.ring")], check=True)
    d = RingDir(tmp_path)
    (src,) = d.scan()[0]
    assert src.steps is not None and src.meta == {} and not src.writer_alive()
    d.drop(src)
    assert sorted(p.name for p in (tmp_path / "j").iterdir()) == []


def test_agent_removes_a_long_dead_ring_without_publishing_it(settings, tmp_path):
    from commwatch.embedded import free_port
    from commwatch.producers.agent.agent import Agent

    code = ("import sys; from commwatch import ring; "
            "w = ring.RingWriter(sys.argv[1], rank=0, job='j', capacity=8); "
            "w.write(1, 1, 1, 0xA, 0, 10, 20, 8, 0, -1, 2, 0, now_ns=1)")  # last heard of in 1970
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "r" / "j" / "0.ring")], check=True)
    code_recent = code.replace("now_ns=1", "now_ns=__import__('time').time_ns()").replace("rank=0", "rank=1")
    subprocess.run([sys.executable, "-c", code_recent, str(tmp_path / "r" / "j" / "1.ring")], check=True)
    s = settings.replace(ring_dir=str(tmp_path / "r"), kafka_bootstrap=f"127.0.0.1:{free_port()}")
    agent = Agent(s, s.kafka_bootstrap)
    try:
        agent.scan()
        agent.poll()
    finally:
        agent.close(timeout_s=0.1)
    assert not (tmp_path / "r" / "j" / "0.ring").exists()  # stale: dropped unread
    assert agent.records == 1  # the recent one was read (its writer is gone too: it goes the exit way)


def test_a_forked_child_does_not_keep_a_dead_writers_lock(tmp_path):
    code = ("import os, sys, time; from commwatch import ring; "
            "w = ring.RingWriter(sys.argv[1], rank=0, job='j', capacity=8); "
            "pid = os.fork()\n"
            "if pid == 0:\n    os.write(1, b'child\\n'); time.sleep(60); os._exit(0)\n"
            "os.write(1, b'%d\\n' % pid); time.sleep(60)")  # one write a line: the two never interleave
    parent = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "j" / "0.ring")], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    lines = {parent.stdout.readline().strip(), parent.stdout.readline().strip()}  # the child runs (fork is done)
    if "" in lines:  # the parent ended early: say why
        parent.kill()
        pytest.fail(f"writer process ended: rc={parent.wait(10)} stdout={lines} stderr={parent.stderr.read()!r}")
    lines.discard("child")
    child = int(lines.pop())
    try:
        (src,) = RingDir(tmp_path).scan()[0]
        assert src.writer_alive()
        parent.kill()  # the writer dies; its forked child (a data-loader worker) lives on
        parent.wait(10)
        os.kill(child, 0)
        assert not src.writer_alive()
    finally:
        parent.kill()
        try:
            os.kill(child, 9)
        except ProcessLookupError:
            pass


def test_agent_sends_each_iteration_timing_at_its_next_flush_not_its_next_heartbeat(settings, tmp_path):
    """Step records are read at every flush, as call records are: a straggler's slow iteration
    reaches the detector within `agent_flush_s`, not up to a heartbeat period later."""
    from commwatch import messages, topics
    from commwatch.embedded import free_port
    from commwatch.producers.agent.agent import Agent

    d = tmp_path / "r"
    code = ("import sys; from commwatch import ring; "
            "w = ring.RingWriter(sys.argv[1] + '/0.ring', rank=0, job='j', capacity=8); "
            "st = ring.RingWriter(sys.argv[1] + '/0.steps', 0, 'j', 16, ring.STEP_MAGIC); "
            "print('ready', flush=True); sys.stdin.readline(); "
            "st.write_step(7, 10, 20, forward_ms=2.0); print('done', flush=True); sys.stdin.readline()")
    writer = subprocess.Popen([sys.executable, "-c", code, str(d / "j")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # alive: it holds its rings' lock
    s = settings.replace(ring_dir=str(d), kafka_bootstrap=f"127.0.0.1:{free_port()}")
    agent = Agent(s, s.kafka_bootstrap)
    name = agent.topics.name(topics.STEPS)
    put, sent = agent.outbox.put, []
    agent.outbox.put = lambda t, k, v: (sent.append(messages.decode(topics.STEPS, v)) if t == name else None,
                                        put(t, k, v))
    try:
        assert writer.stdout.readline().strip() == "ready"
        agent.tick(100.0)  # scan, flush and the first heartbeat
        writer.stdin.write("\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "done"
        agent.tick(100.1)  # a flush; the next heartbeat is 0.9 s away
        at_flush = [m["iteration"] for m in sent]
    finally:
        writer.stdin.close()
        writer.wait(10)
        agent.close(timeout_s=0.1)
    assert at_flush == [7]
