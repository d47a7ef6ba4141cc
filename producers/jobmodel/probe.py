"""What a rank's probe writes into its ring, given what really happened (wire spec section 1).

Every communication op the host enqueued is a *call*: its host enqueue time ``h``, its
device start ``s`` (arrival at the rendezvous) and end ``e`` (NaN: never). A probe writes an
entry record and, when it observes completion, a completed record; each record is written
at a true time (``written``), which is when the node agent can first forward it.

| mode | entry record | completed record |
|---|---|---|
| ``gpu`` | at h: ENQUEUED, t_start = h | at e + 0.5..3 ms: COMPLETED+GPU_TIMED, t_start = s, t_end = e |
| ``enqueue`` | at h: ENQUEUED, t_start = h | at the watchdog's next poll p >= e: COMPLETED+ENQUEUED, t_start = h, t_end = p |
| ``blocking`` | at h (= s: the host waited for its GPU): no flag, t_start = h | at e: COMPLETED, t_start = h, t_end = e |
| ``heartbeats_only`` | as ``enqueue``, kept inside the process: only heartbeats leave it | |

Calls queued behind a blocked one on the same stream stay entered and never complete, on
every communicator. A stuck completion path drops completed records from its onset; a
crashed process writes nothing after its exit. Record times are the node's clock.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commwatch import wire
from commwatch.producers.jobmodel.clock import NodeClock
from commwatch.producers.jobmodel.engine import Engine
from commwatch.producers.jobmodel.layout import Layout
from commwatch.producers.jobmodel.program import COLL, P2P, ROLE_GROUP, SEND

MODES = ("gpu", "enqueue", "blocking", "heartbeats_only")
GPU_WRITE_S = (0.5e-3, 3e-3)  # the plugin's completion reaches the ring this long after the GPU ends


@dataclass
class Calls:
    """One rank's calls (one row per collective or per send/recv part), in enqueue order."""

    comm: np.ndarray  # u8
    op: np.ndarray  # wire op code
    seq: np.ndarray  # per comm (collectives) or per (comm, peer, op) (send/recv), probe-visible calls only
    aux: np.ndarray  # NCCL's per-operation number (collectives), else 0
    peer: np.ndarray  # comm rank of the peer (send/recv), else -1
    comm_rank: np.ndarray
    nranks: np.ndarray
    nbytes: np.ndarray
    h: np.ndarray  # host enqueue (s)
    s: np.ndarray  # device start (s)
    e: np.ndarray  # device end (s), NaN if never

    def __len__(self) -> int:
        return len(self.h)


@dataclass
class Ring:
    """What a probe wrote into one rank's ring: records and the true time each was written."""

    records: np.ndarray
    written: np.ndarray


def calls_of(engine: Engine, layout: Layout, rank: int, hidden: tuple[str, ...]) -> Calls:
    """Every call the rank's host enqueued, as the probe numbers them (hidden roles left out)."""
    rk = engine.ranks[rank]
    prog, L = rk.prog, rk.L
    n_iter = len(rk.start) // L
    enq = np.full(len(rk.start), np.nan)
    enq[: len(rk.enq)] = rk.enq
    start, end = np.asarray(rk.start), np.asarray(rk.end)
    visible_per_group: dict[int, int] = {}
    per_op_count: dict[tuple[int, int], int] = {}
    static = []  # (j, part, comm, op, seq ordinal, per-iteration count, aux ordinal, aux count, peer, ...)
    for j, op in enumerate(prog):
        if op.code == COLL and op.role not in hidden:
            g = layout.group(rank, ROLE_GROUP[op.role])
            static.append([j, -1, g, op.wire_op, visible_per_group.get(g.id, 0), -1, op.nbytes])
            visible_per_group[g.id] = visible_per_group.get(g.id, 0) + 1
            per_op_count[(g.id, op.wire_op)] = per_op_count.get((g.id, op.wire_op), 0) + 1
        elif op.code == P2P and op.role not in hidden:
            g = layout.group(rank, "pp")
            for n, part in enumerate(op.parts):
                static.append([j, n, g, wire.OP_SEND if part.dir == SEND else wire.OP_RECV, part.mb, part.peer,
                               part.nbytes])
    aux_seen: dict[tuple[int, int], int] = {}
    cols: dict[str, list] = {k: [] for k in ("j", "part", "comm", "op", "seq0", "per_it", "aux0", "aux_it", "peer",
                                             "comm_rank", "nranks", "nbytes")}
    for j, part, g, wop, ordinal, peer, nbytes in static:
        cols["j"].append(j)
        cols["part"].append(part)
        cols["comm"].append(g.id)
        cols["op"].append(wop)
        cols["peer"].append(peer)
        cols["comm_rank"].append(g.comm_rank(rank))
        cols["nranks"].append(g.size)
        cols["nbytes"].append(nbytes)
        if part < 0:
            cols["seq0"].append(ordinal)
            cols["per_it"].append(visible_per_group[g.id])
            k = (g.id, wop)
            cols["aux0"].append(aux_seen.get(k, 0))
            cols["aux_it"].append(per_op_count[k])
            aux_seen[k] = aux_seen.get(k, 0) + 1
        else:  # send/recv number k of (comm, peer, op) is microbatch mb of its iteration
            cols["seq0"].append(ordinal)
            cols["per_it"].append(engine.M)
            cols["aux0"].append(0)
            cols["aux_it"].append(0)
    a = {k: np.asarray(v, dtype=np.uint64 if k == "comm" else np.int64) for k, v in cols.items()}
    its = np.repeat(np.arange(n_iter), len(a["j"]))
    tile = lambda v: np.tile(v, n_iter)  # noqa: E731
    idx = its * L + tile(a["j"])
    h = enq[idx]
    s = start[idx]
    e = end[idx]
    parts = tile(a["part"])
    for k in np.flatnonzero((parts >= 0) & np.isfinite(s)):  # a send/recv part ends when its pair does
        e[k] = engine.part_end.get((rank, int(idx[k]), int(parts[k])), np.nan)
    is_p2p = parts >= 0
    aux = np.where(is_p2p, 0, its * tile(a["aux_it"]) + tile(a["aux0"]))
    keep = np.isfinite(h)
    return Calls(
        comm=tile(a["comm"])[keep],
        op=tile(a["op"])[keep],
        seq=(its * tile(a["per_it"]) + tile(a["seq0"]))[keep],
        aux=aux[keep],
        peer=tile(a["peer"])[keep],
        comm_rank=tile(a["comm_rank"])[keep],
        nranks=tile(a["nranks"])[keep],
        nbytes=tile(a["nbytes"])[keep],
        h=h[keep], s=s[keep], e=e[keep],
    )


def write_ring(calls: Calls, rank: int, mode: str, clock: NodeClock, rng: np.random.Generator, *,
               poll_s: float, completion_stops: float = np.inf, dies: float = np.inf) -> Ring:
    """The entry and completed records the probe of `mode` writes for these calls."""
    n = len(calls)
    done = np.isfinite(calls.e)
    if mode == "gpu":
        entry_flags = wire.FLAG_ENQUEUED
        done_flags = wire.FLAG_COMPLETED | wire.FLAG_GPU_TIMED
        done_start, done_end = calls.s, calls.e
        done_written = calls.e + rng.uniform(*GPU_WRITE_S, n)
    elif mode in ("enqueue", "heartbeats_only"):
        entry_flags = wire.FLAG_ENQUEUED
        done_flags = wire.FLAG_COMPLETED | wire.FLAG_ENQUEUED
        phase = rng.uniform(0.0, poll_s)
        seen = phase + np.ceil((np.nan_to_num(calls.e, nan=0.0) - phase) / poll_s) * poll_s
        done_start, done_end, done_written = calls.h, seen, seen
    elif mode == "blocking":
        entry_flags = 0
        done_flags = wire.FLAG_COMPLETED
        done_start, done_end, done_written = calls.h, calls.e, calls.e
    else:
        raise ValueError(f"probe mode {mode!r} is not one of {MODES}")
    done &= (done_written < completion_stops)
    with_aux = mode == "gpu"  # the plugin knows NCCL's own numbering
    entry = _records(calls, rank, clock, entry_flags, calls.h, None, with_aux)
    completed = _records(calls, rank, clock, done_flags, done_start, done_end, with_aux)[done]
    written = np.concatenate([calls.h, done_written[done]])
    recs = np.concatenate([entry, completed])
    order = np.argsort(written, kind="stable")
    recs, written = recs[order], written[order]
    alive = written < dies
    return Ring(recs[alive], written[alive])


def _records(calls: Calls, rank: int, clock: NodeClock, flags: int, t_start: np.ndarray,
             t_end: np.ndarray | None, with_aux: bool) -> np.ndarray:
    recs = wire.empty(len(calls))
    recs["kind"] = wire.KIND_CALL
    recs["op"] = calls.op
    recs["flags"] = flags
    recs["rank"] = rank
    recs["comm"] = calls.comm
    recs["seq"] = calls.seq
    recs["t_start_ns"] = clock.ns_array(np.nan_to_num(t_start, nan=0.0))
    if t_end is not None:
        recs["t_end_ns"] = clock.ns_array(np.nan_to_num(t_end, nan=0.0))
    recs["bytes"] = calls.nbytes
    recs["comm_rank"] = calls.comm_rank
    recs["peer"] = calls.peer
    recs["nranks"] = calls.nranks
    if with_aux:
        recs["aux"] = calls.aux
    return recs


def comm_inits(layout: Layout, rank: int, comms: list[int], clock: NodeClock, t: float) -> np.ndarray:
    """COMM_INIT records of the rank for the communicators its probe sees, written at `t`."""
    recs = wire.empty(len(comms))
    by_id = {g.id: g for g in layout.groups_of(rank)}
    for k, cid in enumerate(comms):
        g = by_id[cid]
        recs[k]["kind"] = wire.KIND_COMM_INIT
        recs[k]["rank"] = rank
        recs[k]["comm"] = g.id
        recs[k]["t_start_ns"] = recs[k]["t_end_ns"] = clock.ns(t)
        recs[k]["comm_rank"] = g.comm_rank(rank)
        recs[k]["nranks"] = g.size
        recs[k]["aux"] = len(layout.nodes_of(g))
    return recs
