"""Hand-made jobs for the detector tests: a few comms, explicit entry/exit times, heartbeats."""

from __future__ import annotations

import json

import numpy as np

from commwatch import topics, wire
from commwatch.capture import Message
from commwatch.streams.detect import Detector

S = 1_000_000_000
MS = 1_000_000
T0 = 1_767_225_600 * S


class HandJob:
    """`comms`: comm id -> global ranks in comm-rank order; `nodes`: rank -> node."""

    def __init__(self, settings, comms: dict[int, list[int]], nodes: dict[int, str], job: str = "j1"):
        self.job, self.comms, self.nodes = job, comms, nodes
        self.det = Detector(settings)
        self.incidents: list[dict] = []
        self.sent: list[Message] = []
        self.state = {(c, r): [-1, -1, 0, 0] for c, rs in comms.items() for r in rs}  # started, completed, t_s, t_e
        self.now = T0
        for comm, ranks in comms.items():
            recs = wire.empty(len(ranks))
            recs["kind"] = wire.KIND_COMM_INIT
            recs["comm"] = comm
            recs["rank"] = ranks
            recs["comm_rank"] = np.arange(len(ranks))
            recs["nranks"] = len(ranks)
            recs["t_start_ns"] = T0
            self.send(Message(topics.CALLS, topics.comm_key(job, comm), T0, wire.encode_batch(recs)))

    def send(self, msg: Message) -> None:
        self.sent.append(msg)
        self.incidents += self.det.feed(msg)
        self.incidents += self.det.tick(msg.ts_ns)

    def collective(self, comm: int, seq: int, starts: dict[int, int], end: int | None, skew: dict | None = None,
                   op: int = wire.OP_ALLREDUCE, nbytes: dict[int, int] | None = None) -> None:
        """Ranks of `starts` enter `seq` at the given times; all complete at `end` (None: never);
        each sends 1 MiB, or `nbytes[rank]`."""
        ranks = self.comms[comm]
        skew = skew or {}
        rows = [r for r in ranks if r in starts]
        recs = wire.empty(len(rows))
        recs["kind"] = wire.KIND_CALL
        recs["op"] = op
        recs["comm"] = comm
        recs["seq"] = seq
        recs["rank"] = rows
        recs["comm_rank"] = [ranks.index(r) for r in rows]
        recs["nranks"] = len(ranks)
        recs["bytes"] = [(nbytes or {}).get(r, 1 << 20) for r in rows]
        recs["t_start_ns"] = [starts[r] + skew.get(self.nodes[r], 0) for r in rows]
        if end is not None:
            recs["flags"] = wire.FLAG_COMPLETED
            recs["t_end_ns"] = [end + skew.get(self.nodes[r], 0) for r in rows]
        for r in rows:
            st = self.state[(comm, r)]
            st[0], st[2] = seq, starts[r]
            if end is not None:
                st[1], st[3] = seq, end
        ts = max(starts.values()) if end is None else end
        self.now = max(self.now, ts + MS)
        self.send(Message(topics.CALLS, topics.comm_key(self.job, comm), self.now, wire.encode_batch(recs)))

    def transfer(self, comm: int, seq: int, src: int, dst: int, sent: int | None, posted: int | None,
                 end: int | None, nbytes: int = 1 << 20) -> None:
        """One send/receive pair of a point-to-point comm, its `seq`-th on that channel: `src`
        enters its send at `sent` and `dst` its receive at `posted` (None: never); both complete
        at `end` (None: never); the message is `nbytes` long."""
        ranks = self.comms[comm]
        rows = [(r, peer, op, t) for r, peer, op, t in ((src, dst, wire.OP_SEND, sent), (dst, src, wire.OP_RECV, posted))
                if t is not None]
        recs = wire.empty(len(rows))
        recs["kind"] = wire.KIND_CALL
        recs["op"] = [op for _, _, op, _ in rows]
        recs["comm"] = comm
        recs["seq"] = seq
        recs["rank"] = [r for r, _, _, _ in rows]
        recs["comm_rank"] = [ranks.index(r) for r, _, _, _ in rows]
        recs["peer"] = [ranks.index(peer) for _, peer, _, _ in rows]
        recs["nranks"] = len(ranks)
        recs["bytes"] = nbytes
        recs["t_start_ns"] = [t for _, _, _, t in rows]
        if end is not None:
            recs["flags"] = wire.FLAG_COMPLETED
            recs["t_end_ns"] = end
        self.now = max(self.now, (end if end is not None else max(t for *_, t in rows)) + MS)
        self.send(Message(topics.CALLS, topics.comm_key(self.job, comm), self.now, wire.encode_batch(recs)))

    def place(self, coords: dict[int, dict]) -> None:
        """Each rank's placement (`cw.topology.v1`), with its coordinates."""
        for r, c in sorted(coords.items()):
            msg = {"v": 1, "job": self.job, "ts_ns": self.now, "rank": r, "world_size": len(coords),
                   "node": self.nodes[r], "local_rank": r, "coords": c}
            self.send(Message(topics.TOPOLOGY, self.job, self.now, json.dumps(msg).encode()))

    def heartbeats(self, until: int, period: int = S, silent_nodes: tuple = (), gone: tuple = ()) -> None:
        """Every node sends a heartbeat per comm each period until `until` (`gone`: ranks its
        agent no longer lists)."""
        t = self.now + period
        while t <= until:
            self.beat(t, silent_nodes, gone)
            self.now = t
            t += period

    def beat(self, t: int, silent_nodes: tuple = (), gone: tuple = ()) -> None:
        """One heartbeat per node and comm at `t`."""
        for comm, ranks in self.comms.items():
            by_node: dict[str, list] = {}
            for r in ranks:
                if self.nodes[r] in silent_nodes or r in gone:
                    continue
                s, c, ts_, te = self.state[(comm, r)]
                by_node.setdefault(self.nodes[r], []).append(
                    {"rank": r, "started": s, "completed": c, "t_last_start_ns": ts_, "t_last_end_ns": te})
            for node, rs in sorted(by_node.items()):
                hb = {"v": 1, "job": self.job, "node": node, "ts_ns": t, "comm": f"{comm:016x}", "ranks": rs}
                self.send(Message(topics.PROGRESS, topics.comm_key(self.job, comm), t, json.dumps(hb).encode()))

    def opened(self, kind: str | None = None) -> list[dict]:
        return [i for i in self.incidents if i["status"] == "open" and (kind is None or i["kind"] == kind)]


def steps(job: HandJob, n: int, step: int = S, late: dict[int, dict[int, int]] | None = None,
          skew: dict | None = None, jitter: int = 0, seed: int = 0, xfer: dict[int, int] | None = None) -> None:
    """`n` iterations: each comm runs one collective per iteration; `late[comm][rank]` delays a
    rank's entry (and so everyone's completion); a comm's transfer takes `xfer[comm]` (2 ms) after
    its last entry; each comm starts 10 ms after the previous one."""
    rng = np.random.default_rng(seed)
    late = late or {}
    for _ in range(n):
        base = job.now + step
        for i, (comm, ranks) in enumerate(job.comms.items()):
            seq = job.state[(comm, ranks[0])][0] + 1
            t = base + i * 10 * MS
            starts = {r: t + late.get(comm, {}).get(r, 0) + int(rng.integers(0, jitter + 1)) for r in ranks}
            job.collective(comm, seq, starts, max(starts.values()) + (xfer or {}).get(comm, 2 * MS), skew)
        job.beat(job.now)


def replayed(settings, cap, until_ns: int | None = None) -> list[dict]:
    """A capture through the detector core, as `commwatch replay` runs it: its incident events
    (`until_ns`: only its messages stamped before, as if it ended there)."""
    from commwatch.capture import read_sorted
    from commwatch.decode import decode_messages
    from commwatch.streams.detect import Detector

    msgs = read_sorted(cap)
    if until_ns is not None:
        msgs = [m for m in msgs if m.ts_ns < until_ns]
    return Detector(settings).feed_stream(msgs, decode_messages(msgs, settings.max_message_bytes))


def slow_ranks_of(settings, cap) -> list[list[int]]:
    """A capture through the detector core: per slow_rank incident, in the order they opened,
    every rank it named (at its opening or in an update: a rank found later joins the open
    incident of its node)."""
    events = replayed(settings, cap)
    named: dict[str, set[int]] = {}
    for e in events:
        if e["kind"] == "slow_rank" and e["status"] in ("open", "update"):
            named.setdefault(e["incident"], set()).update(e["culprit_ranks"])
    return [sorted(ranks) for ranks in named.values()]
