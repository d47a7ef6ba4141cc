"""Hangs as real probes see them (hand-made, scripted message sequences).

- Host-enqueue probes (ENQUEUED): a rank has many calls entered and not completed; only the
  oldest can be blocked, the ones queued behind it are symptoms: one P0 naming the root,
  no comm_hang for the comms whose members all enqueued a call behind it.
- A rank whose completion counter stopped while its peers completed later instances (a stuck
  completion path) and which then stopped enqueueing is the root, named once.
- Every member inside the same instance, none held elsewhere, none completing: comm_hang.
- A rank whose process exited is the root (evidence `exited`); when every rank exited, the
  job ends: its incidents resolve with that reason and nothing repeats.
- A slow rank that still progresses is not hung, however long its peers wait.
"""

from __future__ import annotations

import json

from commwatch import topics, wire
from commwatch.capture import Message
from commwatch.streams.detect import Detector

S = 1_000_000_000
MS = 1_000_000
T0 = 1_767_225_600 * S
ENQ = wire.FLAG_ENQUEUED
DONE = wire.FLAG_COMPLETED


class Script:
    """A job of comms (comm id -> global ranks, comm-rank order) on nodes (rank -> node).
    `enter` / `complete` write call records; `beat` writes heartbeats of the counters."""

    def __init__(self, settings, comms: dict[int, list[int]], nodes: dict[int, str], job: str = "j"):
        self.job, self.comms, self.nodes = job, comms, nodes
        self.det = Detector(settings)
        self.t = T0
        self.events: list[dict] = []
        self.count = {(c, r): [-1, -1] for c, rs in comms.items() for r in rs}
        self.exited: set[int] = set()
        for comm, ranks in comms.items():
            self._batch(comm, [dict(kind=wire.KIND_COMM_INIT, rank=r, seq=0, t_start_ns=self.t) for r in ranks])

    def _batch(self, comm: int, rows: list[dict]) -> None:
        ranks = self.comms[comm]
        recs = wire.empty(len(rows))
        for i, row in enumerate(rows):
            recs[i]["kind"] = row.get("kind", wire.KIND_CALL)
            recs[i]["op"] = row.get("op", wire.OP_ALLREDUCE if recs[i]["kind"] == wire.KIND_CALL else 0)
            recs[i]["flags"] = row.get("flags", 0)
            recs[i]["rank"] = row["rank"]
            recs[i]["comm"] = comm
            recs[i]["seq"] = row["seq"]
            recs[i]["t_start_ns"] = row["t_start_ns"]
            recs[i]["t_end_ns"] = row.get("t_end_ns", 0)
            recs[i]["comm_rank"] = ranks.index(row["rank"])
            recs[i]["nranks"] = len(ranks)
        self.send(Message(topics.CALLS, topics.comm_key(self.job, comm), self.t, wire.encode_batch(recs)))

    def send(self, msg: Message) -> None:
        self.events += self.det.feed(msg) + self.det.tick(msg.ts_ns)

    def enter(self, comm: int, seq: int, ranks, flags: int = ENQ) -> None:
        self._batch(comm, [dict(rank=r, seq=seq, t_start_ns=self.t, flags=flags) for r in ranks])
        for r in ranks:
            self.count[(comm, r)][0] = max(self.count[(comm, r)][0], seq)

    def complete(self, comm: int, seq: int, ranks, flags: int = ENQ | DONE) -> None:
        self._batch(comm, [dict(rank=r, seq=seq, t_start_ns=self.t - 5 * MS, t_end_ns=self.t, flags=flags)
                           for r in ranks])
        for r in ranks:
            c = self.count[(comm, r)]
            c[0], c[1] = max(c[0], seq), max(c[1], seq)

    def step(self, comm: int, seq: int, ranks=None) -> None:
        """Every member (or `ranks`) enters and completes `seq` (host-enqueue probe)."""
        ranks = self.comms[comm] if ranks is None else ranks
        self.enter(comm, seq, ranks)
        self.t += 2 * MS
        self.complete(comm, seq, ranks)

    def beat(self) -> None:
        for comm, ranks in self.comms.items():
            by_node: dict[str, list] = {}
            for r in ranks:
                s, d = self.count[(comm, r)]
                entry = {"rank": r, "started": s, "completed": d}
                if r in self.exited:
                    entry["exited"] = True
                by_node.setdefault(self.nodes[r], []).append(entry)
            for node, entries in sorted(by_node.items()):
                hb = {"v": 1, "job": self.job, "node": node, "ts_ns": self.t, "comm": f"{comm:016x}",
                      "ranks": entries}
                self.send(Message(topics.PROGRESS, topics.comm_key(self.job, comm), self.t, json.dumps(hb).encode()))

    def wait(self, seconds: float, every: float = 1.0) -> None:
        end = self.t + int(seconds * S)
        while self.t < end:
            self.t = min(end, self.t + int(every * S))
            self.beat()

    def opened(self, kind: str | None = None) -> list[dict]:
        return [e for e in self.events if e["status"] == "open" and (kind is None or e["kind"] == kind)]


TP0, TP1, DP0, DP1, EXTRA = 0xA0, 0xA1, 0xD0, 0xD1, 0xE0
NODES = {0: "n0", 1: "n0", 2: "n1", 3: "n1"}
LAYOUT = {TP0: [0, 1], TP1: [2, 3], DP0: [0, 2], DP1: [1, 3], EXTRA: [0, 1, 2, 3]}


def _healthy(s: Script, iterations: int, start: int = 0) -> None:
    for it in range(start, start + iterations):
        for comm in (TP0, TP1, DP0, DP1, EXTRA):
            s.step(comm, it)
        s.t += 200 * MS
        s.beat()


def test_host_enqueue_hang_is_one_p0_naming_the_root_not_the_calls_queued_behind(settings):
    s = Script(settings, LAYOUT, NODES)
    _healthy(s, 5)
    t_hang = s.t
    # rank 1's host hangs. Its TP peer 0 enqueues TP #5 (blocked: rank 1 never entered it) and,
    # running ahead, DP #5 and EXTRA #5; ranks 2 and 3 enqueue everything: TP1 #5 completes,
    # DP1 #5 waits on rank 1, DP0 #5 and EXTRA #5 have every member but 1 entered ...
    s.enter(TP0, 5, [0])
    s.step(TP1, 5)
    s.enter(DP0, 5, [0, 2])  # every member entered, none completes: queued behind TP0 on rank 0
    s.enter(DP1, 5, [3])
    s.enter(EXTRA, 5, [0, 2, 3])
    s.wait(15)
    assert [(e["kind"], e["severity"], e["culprit_ranks"]) for e in s.opened()] == [("hang", "P0", [1])]
    inc = s.opened("hang")[0]
    assert inc["evidence"]["roots"][0]["reason"] == "silent"
    assert f"{DP0:016x}" in inc["evidence"]["blocked_comms"]  # the symptom is evidence, not an incident
    delay = (inc["ts_ns"] - t_hang) / S
    assert delay <= inc["evidence"]["threshold_s"] + 2
    health = s.det.health("j")
    assert health["state"] == "hang" and health["wait_chain"]["roots"] == [1]
    # a tick whose analysis finds no root while the hang is open (a comm's input behind; a live
    # page test on a loaded machine showed no chain then): the page keeps the last chain found
    js = s.det.job_stage.jobs["j"]
    an = js.analysis
    js.analysis = None
    kept = s.det.health("j")["wait_chain"]
    assert kept["roots"] == [1] and kept["ts_ns"] == health["wait_chain"]["ts_ns"]
    # ... and one naming another root than the open hang's (a victim, on an input briefly behind)
    an.roots = {0: an.roots[1]}
    js.analysis = an
    kept = s.det.health("j")["wait_chain"]
    assert kept["roots"] == [1] and kept["ts_ns"] == health["wait_chain"]["ts_ns"]


def test_comm_hang_only_when_every_member_is_in_it_and_held_nowhere_else(settings):
    s = Script(settings, LAYOUT, NODES)
    _healthy(s, 5)
    s.enter(DP1, 5, [1, 3])  # both members inside, nothing older anywhere, never completes
    s.wait(12)
    assert [(e["kind"], e["culprit_ranks"], e["comm"]) for e in s.opened()] == [("comm_hang", [], f"{DP1:016x}")]


GPU = wire.FLAG_GPU_TIMED  # without COMPLETED: a device entry (the call started on the GPU)


def test_a_gpu_that_never_started_the_call_its_peers_wait_in_is_the_root(settings):
    """Rank 1's GPU is stuck in a kernel while its host enqueues on: it entered TP #5 and, behind it,
    DP1 #5 by enqueue only; rank 0's GPU is inside TP #5 (device entry), rank 3's inside DP1 #5.
    One P0 hang names rank 1 (its GPU never started the call), not rank 0, and no comm_hang."""
    s = Script(settings, LAYOUT, NODES)
    _healthy(s, 5)
    t_hang = s.t
    s.enter(TP0, 5, [0, 1])
    s.t += 1 * MS
    s.enter(DP1, 5, [1, 3])
    s.enter(DP0, 5, [0, 2])  # rank 0 queued this behind TP #5; rank 2 is inside it
    s.step(TP1, 5)
    s.t += 1 * S
    s.enter(TP0, 5, [0], flags=GPU)
    s.enter(DP1, 5, [3], flags=GPU)
    s.enter(DP0, 5, [2], flags=GPU)
    s.wait(15)
    assert [(e["kind"], e["severity"], e["culprit_ranks"]) for e in s.opened()] == [("hang", "P0", [1])]
    root = s.opened("hang")[0]["evidence"]["roots"][0]
    assert root["reason"] == "not_started" and root["comm"] == f"{TP0:016x}" and root["seq"] == 5
    # a device entry is not progress: the waiters' silence runs from their last real progress
    inc = s.opened("hang")[0]
    assert (inc["ts_ns"] - t_hang) / S <= inc["evidence"]["threshold_s"] + 1.0


def test_without_device_entries_the_same_hang_names_nobody(settings):
    """The same calls from a probe that writes no device entry: nothing tells rank 0 from rank 1,
    so the blocked TP #5 is a comm_hang naming no rank; never a victim."""
    s = Script(settings, LAYOUT, NODES)
    _healthy(s, 5)
    s.enter(TP0, 5, [0, 1])
    s.t += 1 * MS
    s.enter(DP1, 5, [1, 3])
    s.step(TP1, 5)
    s.wait(15)
    assert [(e["kind"], e["culprit_ranks"]) for e in s.opened()] == [("comm_hang", [])]


def test_a_queued_rank_held_by_an_older_blocked_call_is_a_symptom(settings):
    """Rank 1 only queued DP1 #5 (rank 3 is inside it), but rank 1 waits inside TP #5, entered
    earlier, for rank 0, which never entered it: the root is rank 0, not rank 1."""
    s = Script(settings, LAYOUT, NODES)
    _healthy(s, 5)
    s.enter(TP0, 5, [1])
    s.t += 1 * MS
    s.enter(DP1, 5, [1, 3])
    s.step(TP1, 5)
    s.t += 1 * S
    s.enter(TP0, 5, [1], flags=GPU)
    s.enter(DP1, 5, [3], flags=GPU)
    s.wait(15)
    assert [(e["kind"], e["culprit_ranks"]) for e in s.opened()] == [("hang", [0])]
    assert s.opened("hang")[0]["evidence"]["roots"][0]["reason"] == "silent"


def test_device_entries_are_not_progress(settings):
    """A transport hang seen by a probe with device entries: both members are inside DP1 #5 and
    write device entries 1 s later. Those are no progress: the comm_hang opens as soon as
    without them (a member's silence runs from its last call entered or completed)."""
    opened = []
    for device_entries in (False, True):
        s = Script(settings, LAYOUT, NODES)
        _healthy(s, 5)
        t_hang = s.t
        s.enter(DP1, 5, [1, 3])
        if device_entries:
            s.t += 1 * S
            s.enter(DP1, 5, [1, 3], flags=GPU)
        s.wait(14 if device_entries else 15)
        [inc] = s.opened()
        assert (inc["kind"], inc["culprit_ranks"]) == ("comm_hang", [])
        opened.append((inc["ts_ns"] - t_hang) / S)
    assert abs(opened[1] - opened[0]) < 0.5, opened


def _completed_but_by(s: Script, it: int, rank: int) -> list[tuple[int, int]]:
    """Iteration `it` of every comm; in those `rank` belongs to, its completion is not reported
    (its peers complete). Returns (when each of those completed, comm)."""
    done = []
    for comm in (TP0, DP1):
        s.step(comm, it)
    for comm in (TP1, DP0, EXTRA):
        s.enter(comm, it, LAYOUT[comm])
        s.t += 2 * MS
        s.complete(comm, it, [r for r in LAYOUT[comm] if r != rank])
        done.append((s.t, comm))
    return done


def test_a_stuck_completion_path_is_the_root_once(settings):
    s = Script(settings, LAYOUT, NODES)
    _healthy(s, 3)
    # rank 2's completions stop being reported: it keeps entering, its peers complete
    for it in range(3, 10):
        _completed_but_by(s, it, 2)
        s.t += 200 * MS
        s.beat()
    # ... then its host stops too: its peers wait in #10 for it
    s.enter(TP1, 10, [3])
    s.enter(DP0, 10, [0])
    s.wait(15)
    opened = s.opened()
    assert [(e["kind"], e["severity"], e["culprit_ranks"]) for e in opened] == [("hang", "P0", [2])], opened
    root = opened[0]["evidence"]["roots"][0]
    assert root["reason"] == "completion_stuck" and root["completed"] == 2 and root["peers_completed"] == 9
    assert "GPU or driver fault" in opened[0]["summary"]


def test_a_probe_giving_up_on_completions_its_peers_see_is_a_stuck_completion_path(settings):
    """The fifteenth generator's host-enqueue job: rank 2's probe stops seeing its completions
    while the job runs on (its peers complete every instance), and 2 s after each call gives it
    up (COMPLETION_LOST: counted as completed, not a wait). Its heartbeats' `completed` stays
    where its probe last saw one. A collective completes on every member or none: its
    completion path is stuck, a P2 `hw_fault` once that lasts 30 s, though the given-up calls
    move its counter on (before, they cleared it after 2 s and nothing was ever said)."""
    s = Script(settings, LAYOUT, NODES)
    _healthy(s, 3)
    t_stuck = s.t
    lost = []
    for it in range(3, 3 + 60):
        lost += [(at + 2 * S, comm, it) for at, comm in _completed_but_by(s, it, 2)]
        for at, comm, seq in [x for x in lost if x[0] <= s.t]:
            s._batch(comm, [dict(rank=2, seq=seq, t_start_ns=at - 2 * S, flags=ENQ | wire.FLAG_COMPLETION_LOST)])
        lost = [x for x in lost if x[0] > s.t]
        s.t += 800 * MS
        s.beat()
    opened = s.opened()
    assert [(e["kind"], e["severity"], e["culprit_ranks"]) for e in opened] == [("hw_fault", "P2", [2])], opened
    assert 30 <= (opened[0]["ts_ns"] - t_stuck) / S <= 40
    assert "completions stopped at #2" in opened[0]["summary"]


def test_an_exited_rank_is_the_root_and_a_job_whose_ranks_all_exited_ends(settings):
    s = Script(settings, LAYOUT, NODES)
    _healthy(s, 4)
    s.exited = {3}  # rank 3's process died; its agent says so
    s.enter(TP1, 4, [2])
    s.enter(DP1, 4, [1])
    s.wait(12)
    (inc,) = s.opened()
    assert inc["kind"] == "hang" and inc["culprit_ranks"] == [3]
    assert inc["evidence"]["roots"][0]["reason"] == "exited" and "exited" in inc["summary"]
    s.exited = {0, 1, 2, 3}
    s.wait(3)
    resolved = [e for e in s.events if e["status"] == "resolved"]
    assert [(e["incident"], e["evidence"]["resolved_reason"]) for e in resolved] == [(inc["incident"], "job_ended")]
    n = len(s.events)
    s.wait(120, every=5)  # the agents go quiet for good: nothing more is said about the job
    assert len(s.events) == n and s.det.health("j")["state"] in ("ended", "starting")


def test_a_slow_rank_that_still_progresses_is_not_hung(settings):
    """Long steps: the DP peers wait 25 s per iteration for rank 1, which computes slowly but
    keeps completing its tensor-parallel calls the whole time."""
    s = Script(settings, {TP0: [0, 1], DP1: [1, 3], DP0: [0, 2], TP1: [2, 3]}, NODES)
    seq = {TP0: 0, TP1: 0}
    for it in range(4):
        s.step(DP0, it)
        s.enter(DP1, it, [3])  # rank 3 waits for rank 1 for ~25 s
        for _ in range(50):
            for comm in (TP0, TP1):
                s.step(comm, seq[comm])
                seq[comm] += 1
            s.t += 500 * MS
            s.beat()
        s.enter(DP1, it, [1])
        s.t += 2 * MS
        s.complete(DP1, it, [1, 3])
        s.beat()
    assert s.opened() == []
