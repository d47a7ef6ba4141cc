"""Node agents: what each node publishes, when, and with which clock (wire spec section 2).

Per node, from a random phase: every `flush_s` one `cw.calls.v1` batch per communicator
holding the records its ranks wrote since the last flush, and the iteration timings
(`cw.steps.v1`) written since; every `heartbeat_s` one `cw.progress.v1` heartbeat per
communicator with a local rank (the progress the records showed: highest collective `seq`
entered / completed, latest times, send/recv counters), and at the first heartbeat each
rank's placement (`cw.topology.v1`). A rank whose process is gone is reported with
``"exited": true`` for 3 heartbeats, then no more. A message's `ts_ns` is the node's clock
at send time; the true send time orders the capture (what a live consumer receives).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from commwatch import messages, topics, wire
from commwatch.capture import Message
from commwatch.producers.jobmodel.clock import NodeClock
from commwatch.producers.jobmodel.layout import Layout
from commwatch.producers.jobmodel.probe import Ring

EXITED_HEARTBEATS = 3
P2P_NAMES = {wire.OP_SEND: "send", wire.OP_RECV: "recv"}


@dataclass
class NodeFeed:
    """Everything one node agent can read, and how it behaves."""

    node: int
    clock: NodeClock
    rings: dict[int, Ring]  # local rank -> its ring (COMM_INIT records included)
    comms: dict[int, list[int]]  # local rank -> communicators its probe sees
    steps: dict[int, list[tuple[float, dict]]] = field(default_factory=dict)  # rank -> [(written, msg)]
    exits: dict[int, float] = field(default_factory=dict)  # rank -> when its process exited
    publish_calls: bool = True
    silent_from: float = np.inf


@dataclass
class Sent:
    t: float  # true send time (s from the job's start)
    node: int
    msg: Message


def node_messages(job: str, layout: Layout, feed: NodeFeed, rng: np.random.Generator, *, end_s: float,
                  flush_s: float, heartbeat_s: float) -> list[Sent]:
    stop = min(end_s, feed.silent_from)
    out: list[Sent] = []
    phase = rng.uniform(0.0, flush_s) if feed.publish_calls else None
    if phase is not None:
        out += _call_batches(job, feed, phase, flush_s, stop)
    beats = np.arange(rng.uniform(0.05, heartbeat_s), stop, heartbeat_s)
    if len(beats) == 0:
        return out
    out += _topology(job, layout, feed, beats[0])
    out += _heartbeats(job, layout, feed, beats)
    out += _steps(job, feed, beats[0] % flush_s if phase is None else phase, flush_s, stop)
    return out


def _call_batches(job: str, feed: NodeFeed, phase: float, period: float, stop: float) -> list[Sent]:
    rings = [feed.rings[r] for r in sorted(feed.rings)]
    recs = np.concatenate([r.records for r in rings])
    written = np.concatenate([r.written for r in rings])
    flush = phase + np.maximum(np.ceil((written - phase) / period), 1) * period  # first flush at or after
    keep = flush <= stop
    recs, flush, written = recs[keep], flush[keep], written[keep]
    order = np.lexsort((written, recs["comm"], flush))
    recs, flush = recs[order], flush[order]
    out = []
    if not len(recs):
        return out
    cut = np.flatnonzero((np.diff(flush) != 0) | (np.diff(recs["comm"].astype(np.uint64)) != 0)) + 1
    for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(recs)]):
        t = float(flush[lo])
        key = topics.comm_key(job, int(recs["comm"][lo]))
        out.append(Sent(t, feed.node, Message(topics.CALLS, key, feed.clock.ns(t), wire.encode_batch(recs[lo:hi]))))
    return out


def _topology(job: str, layout: Layout, feed: NodeFeed, t: float) -> list[Sent]:
    out = []
    for rank in sorted(feed.rings):
        tp, pp, dp = layout.coords(rank)
        msg = {"v": 1, "job": job, "ts_ns": feed.clock.ns(t), "rank": rank, "world_size": layout.world,
               "node": layout.node_names[feed.node], "local_rank": rank % layout.gpus_per_node,
               "gpu": f"GPU-{job}-{rank:05d}", "coords": {"tp": tp, "pp": pp, "dp": dp, "cp": 0, "ep": 0}}
        out.append(Sent(t, feed.node, Message(topics.TOPOLOGY, job, feed.clock.ns(t), messages.dumps(msg))))
    return out


@dataclass
class _Track:
    """A cumulative counter the agent keeps from the records it read: at a heartbeat time,
    the highest seq (and latest time) among records written by then."""

    written: np.ndarray
    seq: np.ndarray
    t_ns: np.ndarray

    @classmethod
    def of(cls, recs: np.ndarray, written: np.ndarray, time_field: str) -> "_Track":
        return cls(written, np.maximum.accumulate(recs["seq"].astype(np.int64)) if len(recs) else np.zeros(0, np.int64),
                   np.maximum.accumulate(recs[time_field]) if len(recs) else np.zeros(0, np.int64))

    def at(self, t: float) -> tuple[int, int]:
        k = int(np.searchsorted(self.written, t, side="right"))
        return (-1, 0) if k == 0 else (int(self.seq[k - 1]), int(self.t_ns[k - 1]))


def _rank_tracks(ring: Ring, comm: int) -> tuple[_Track, _Track, dict[tuple[int, int], tuple[_Track, _Track]]]:
    recs, written = ring.records, ring.written
    calls = (recs["kind"] == wire.KIND_CALL) & (recs["comm"] == np.uint64(comm))
    done = (recs["flags"] & wire.FLAG_COMPLETED) != 0
    p2p = np.isin(recs["op"], wire.P2P_OPS)
    coll = calls & ~p2p
    started = _Track.of(recs[coll], written[coll], "t_start_ns")
    completed = _Track.of(recs[coll & done], written[coll & done], "t_end_ns")
    pairs: dict[tuple[int, int], tuple[_Track, _Track]] = {}
    sel = calls & p2p
    for peer, op in sorted({(int(p), int(o)) for p, o in zip(recs["peer"][sel], recs["op"][sel])}):
        m = sel & (recs["peer"] == peer) & (recs["op"] == op)
        pairs[(peer, op)] = (_Track.of(recs[m], written[m], "t_start_ns"),
                             _Track.of(recs[m & done], written[m & done], "t_end_ns"))
    return started, completed, pairs


def _heartbeats(job: str, layout: Layout, feed: NodeFeed, beats: np.ndarray) -> list[Sent]:
    by_comm: dict[int, list[int]] = {}
    for rank in sorted(feed.comms):
        for c in feed.comms[rank]:
            by_comm.setdefault(c, []).append(rank)
    tracks = {(r, c): _rank_tracks(feed.rings[r], c) for c, ranks in by_comm.items() for r in ranks}
    # the agent notices an exit at its next heartbeat, reports the rank `exited` 3 times, then drops it
    first_gone = {r: int(np.searchsorted(beats, t)) for r, t in feed.exits.items()}
    out = []
    node_name = layout.node_names[feed.node]
    for k, t in enumerate(beats.tolist()):
        ts = feed.clock.ns(t)
        for c in sorted(by_comm):
            entries = []
            for rank in by_comm[c]:
                gone = first_gone.get(rank, len(beats))
                if k < gone + EXITED_HEARTBEATS:
                    entries.append(_rank_entry(rank, tracks[(rank, c)], t, exited=k >= gone))
            if entries:
                msg = {"v": 1, "job": job, "node": node_name, "ts_ns": ts, "comm": wire.comm_hex(c), "ranks": entries}
                out.append(Sent(t, feed.node, Message(topics.PROGRESS, topics.comm_key(job, c), ts,
                                                      messages.dumps(msg))))
    return out


def _rank_entry(rank: int, tracks, t: float, exited: bool) -> dict:
    started, completed, pairs = tracks
    s, t_start = started.at(t)
    c, t_end = completed.at(t)
    entry: dict = {"rank": rank, "started": s, "completed": c}
    if t_start:
        entry["t_last_start_ns"] = t_start
    if t_end:
        entry["t_last_end_ns"] = t_end
    p2p = []
    for (peer, op), (ps, pc) in pairs.items():
        s_p, _ = ps.at(t)
        if s_p >= 0:
            p2p.append({"peer": peer, "op": P2P_NAMES[op], "started": s_p, "completed": pc.at(t)[0]})
    if p2p:
        entry["p2p"] = p2p
    if exited:
        entry["exited"] = True
    return entry


def _steps(job: str, feed: NodeFeed, phase: float, period: float, stop: float) -> list[Sent]:
    """Each iteration timing at the first flush after it was written (the agent reads the
    step rings at every flush, as it reads the call rings)."""
    out = []
    for rank in sorted(feed.steps):
        for written, msg in feed.steps[rank]:
            t = phase + max(np.ceil((written - phase) / period), 1) * period
            if t <= stop:
                out.append(Sent(t, feed.node, Message(topics.STEPS, job, feed.clock.ns(t), messages.dumps(msg))))
    return out
