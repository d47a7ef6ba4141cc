"""Rings recorded on a real GPU, published as their node agents would publish them.

`nccl-patch/gpu/record.sh` runs small NCCL jobs on a GPU machine and keeps what each rank's
probe (the plugin or the hook) wrote into its ring: `<name>.<rank>.calls` (64-byte call
records), `<name>.<rank>.steps` (hook step records) and `<name>.<rank>.log.json` (what the
job did and when: the fault's rank and times). The committed copies live in
`nccl-patch/test/recorded/`.

The records carry real times and real probe semantics (entries at host enqueue, GPU-timed
completions, graph replays, async works); only the publishing is modelled: each record is
taken as written when its latest time passed (an entry at its enqueue, a completion at its
end), and the node agent model of `agent.py` turns the rings into call batches, heartbeats,
topology and step messages, one node per rank (the two ranks of a recorded job ran as two
NCCL hosts).

Device entries are newer than the recordings: today both probes write a call once more as
entered on the device (GPU_TIMED, not COMPLETED, the device's start) when it has run there
1 s without finishing. The model adds that record to the recorded rings from the call's own
GPU-timed completion (same start; written 1 s after it, plus the scan's phase, and only if
the completion came later). Derived, not recorded: `make -C nccl-patch test` replays the
NCCL traces through the current plugin and checks that it writes such entries for the same
calls (rank 0 of `hang` and `gpuhang`, which waits) and for no other run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from commwatch import messages, topics, wire
from commwatch.capture import Message
from commwatch.producers.jobmodel.agent import NodeFeed, node_messages
from commwatch.producers.jobmodel.clock import NodeClock
from commwatch.producers.jobmodel.layout import Layout
from commwatch.producers.jobmodel.probe import DEVICE_ENTRY_S, SCAN_S, Ring
from commwatch.ring import STEP_DTYPE

S = 1_000_000_000
GPU_DONE = wire.FLAG_COMPLETED | wire.FLAG_GPU_TIMED
PHASES = ("forward_ms", "backward_ms", "optimizer_ms")


@dataclass
class Recording:
    """One recorded job: per rank its call records, step records and log."""

    name: str
    calls: dict[int, np.ndarray]
    steps: dict[int, np.ndarray]
    logs: dict[int, dict]

    @property
    def world(self) -> int:
        return len(self.calls)

    @property
    def start_ns(self) -> int:
        return min(int(log["t0"]) for log in self.logs.values())

    @property
    def end_ns(self) -> int:
        return max(int(log["end"]) for log in self.logs.values())

    def fault(self) -> dict | None:
        """{"rank", "start_ns", "end_ns"?} of the injected fault, from the logs."""
        for rank, log in self.logs.items():
            if "fault_start" in log:
                return {"rank": rank, "start_ns": int(log["fault_start"]), "end_ns": log.get("fault_end")}
        return None


def load(directory: str | Path, name: str) -> Recording:
    d = Path(directory)
    calls, steps, logs = {}, {}, {}
    for path in sorted(d.glob(f"{name}.*.calls")):
        rank = int(path.name[len(name) + 1:].split(".")[0])
        calls[rank] = np.fromfile(path, dtype=wire.RECORD_DTYPE)
        logs[rank] = json.loads((d / f"{name}.{rank}.log.json").read_text())
        sp = d / f"{name}.{rank}.steps"
        if sp.exists():
            steps[rank] = np.fromfile(sp, dtype=STEP_DTYPE)
    if not calls:
        raise FileNotFoundError(f"no {name}.*.calls in {d}")
    return Recording(name, calls, steps, logs)


def device_entries(recs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The device entries today's probes write for these recorded calls (module docstring),
    each with the time it is written in `t_end_ns`'s place: (records, written_ns)."""
    f = recs["flags"].astype(np.int64)
    timed = (recs["kind"] == wire.KIND_CALL) & ((f & GPU_DONE) == GPU_DONE) & ((f & wire.FLAG_COMPLETION_LOST) == 0)
    c = recs[timed]
    scan = (c["seq"].astype(np.float64) * 0.6180339887) % 1.0 * SCAN_S
    written = c["t_start_ns"] + ((DEVICE_ENTRY_S + scan) * S).astype(np.int64)
    late = written < c["t_end_ns"]
    out = c[late].copy()
    out["flags"] = wire.FLAG_GPU_TIMED | (out["flags"] & wire.FLAG_GRAPH_CAPTURED)
    out["t_end_ns"] = 0
    return out, written[late]


def _ring(recs: np.ndarray, start_ns: int) -> Ring:
    dev, dev_written = device_entries(recs)
    written_ns = np.concatenate([np.maximum(recs["t_start_ns"], recs["t_end_ns"]), dev_written])
    recs = np.concatenate([recs, dev])
    order = np.argsort(written_ns, kind="stable")
    return Ring(recs[order], (written_ns[order] - start_ns) / S)


def _step_messages(job: str, recs: np.ndarray, start_ns: int) -> list[tuple[float, Message]]:
    out = []
    for r in recs[recs["kind"] == 1]:
        msg = {"v": 1, "job": job, "rank": int(r["rank"]), "iteration": int(r["iteration"]),
               "t_start_ns": int(r["t_start_ns"]), "t_end_ns": int(r["t_end_ns"])}
        phases = {k: round(float(r[k]), 3) for k in PHASES if not np.isnan(r[k])}
        if phases:
            msg["phases"] = phases
        out.append(((int(r["t_end_ns"]) - start_ns) / S, Message(topics.STEPS, job, int(r["t_end_ns"]),
                                                              messages.dumps(msg))))
    return out


def publish(rec: Recording, job: str | None = None, *, flush_s: float = 0.2, heartbeat_s: float = 1.0,
            tail_s: float = 3.0, seed: int = 0) -> list[Message]:
    """Every message the job's node agents would have sent, in send order. Ranks are laid out
    as data-parallel peers, one per node. The agents keep running `tail_s` after the job."""
    job = job or rec.name
    start = rec.start_ns - S  # t = 0 one second before the first process started
    layout = Layout(job, 1, 1, rec.world, gpus_per_node=1)
    clock = NodeClock(start, 0.0, 0.0)
    end_s = (rec.end_ns - start) / S + tail_s
    rng = np.random.default_rng(seed)
    sent: list[tuple[float, int, Message]] = []
    for rank, recs in sorted(rec.calls.items()):
        ring = _ring(recs.copy(), start)
        inits = recs[recs["kind"] == wire.KIND_COMM_INIT]
        born = {topics.comm_key(job, int(c)): int(t) for c, t in zip(inits["comm"], inits["t_start_ns"])}
        feed = NodeFeed(rank, clock, {rank: ring}, {rank: sorted({int(c) for c in inits["comm"]})})
        for s in node_messages(job, layout, feed, rng, end_s=end_s, flush_s=flush_s, heartbeat_s=heartbeat_s):
            # an agent reports a comm once it has read the comm's COMM_INIT
            if s.msg.topic != topics.PROGRESS or s.msg.ts_ns >= born.get(s.msg.key, 0):
                sent.append((s.t, s.node, s.msg))
        if rank in rec.steps:
            sent += [(t, rank, m) for t, m in _step_messages(job, rec.steps[rank], start)]
    sent.sort(key=lambda x: (x[0], x[1]))
    return [m for _t, _n, m in sent]
