"""What a rank's probe writes into its ring, given what really happened (wire spec section 1).

Every communication op the host enqueued is a *call*: its host enqueue time ``h``, its
device start ``s`` (arrival at the rendezvous) and end ``e`` (NaN: never). A probe writes an
entry record and, when it observes completion, a completed record; each record is written
at a true time (``written``), which is when the node agent can first forward it.

| mode | entry record | completed record |
|---|---|---|
| ``gpu`` | at h: ENQUEUED, t_start = h; and, if it runs on the device 1 s without ending, at s + 1..1.25 s: GPU_TIMED, t_start = s (device entry) | at e + 0.5..3 ms: COMPLETED+GPU_TIMED, t_start = s, t_end = e |
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
DEVICE_ENTRY_S = 1.0  # the plugin's and the hook's default: a call on the device this long gets a device entry
SCAN_S = 0.25  # ... written at the probe's next scan


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


@dataclass
class _CallSlot:
    """One call of the rank's iteration program, as its probe numbers it."""

    j: int  # op index in the iteration
    part: int  # send/recv part of a P2P op, -1 for a collective
    comm: int
    op: int
    seq0: int  # seq in iteration 0 (collective ordinal on its comm, or the microbatch of a send/recv)
    per_it: int  # seq added per iteration
    aux0: int = 0
    aux_it: int = 0
    peer: int = -1
    comm_rank: int = 0
    nranks: int = 0
    nbytes: int = 0


def _slots(layout: Layout, rank: int, prog: list, hidden: tuple[str, ...], microbatches: int) -> list[_CallSlot]:
    """The calls of one iteration the probe sees. Collectives count per communicator over the
    visible ones (NCCL's per-operation number, `aux`, over all of them); send/recv number k of
    (comm, peer, op) is microbatch k of the run."""
    slots: list[_CallSlot] = []
    visible: dict[int, int] = {}
    per_op: dict[tuple[int, int], int] = {}
    for j, op in enumerate(prog):
        if op.role in hidden or op.code not in (COLL, P2P):
            continue
        g = layout.group(rank, ROLE_GROUP[op.role])
        if op.code == COLL:
            slots.append(_CallSlot(j=j, part=-1, comm=g.id, op=op.wire_op, seq0=visible.get(g.id, 0), per_it=0,
                                   aux0=per_op.get((g.id, op.wire_op), 0), comm_rank=g.comm_rank(rank),
                                   nranks=g.size, nbytes=op.nbytes))
            visible[g.id] = visible.get(g.id, 0) + 1
            per_op[(g.id, op.wire_op)] = per_op.get((g.id, op.wire_op), 0) + 1
        else:
            for n, part in enumerate(op.parts):
                wop = wire.OP_SEND if part.dir == SEND else wire.OP_RECV
                slots.append(_CallSlot(j=j, part=n, comm=g.id, op=wop, seq0=part.mb, per_it=microbatches,
                                       peer=part.peer, comm_rank=g.comm_rank(rank), nranks=g.size,
                                       nbytes=part.nbytes))
    for c in slots:
        if c.part < 0:
            c.per_it, c.aux_it = visible[c.comm], per_op[(c.comm, c.op)]
    return slots


def calls_of(engine: Engine, layout: Layout, rank: int, hidden: tuple[str, ...]) -> Calls:
    """Every call the rank's host enqueued, as the probe numbers them (hidden roles left out)."""
    rk = engine.ranks[rank]
    slots = _slots(layout, rank, rk.prog, hidden, engine.M)
    n_iter = len(rk.start) // rk.L
    enq = np.full(len(rk.start), np.nan)
    enq[: len(rk.enq)] = rk.enq

    def col(name: str, dtype=np.int64) -> np.ndarray:  # one value per call of every iteration
        return np.tile(np.array([getattr(c, name) for c in slots], dtype=dtype), n_iter)

    its = np.repeat(np.arange(n_iter), len(slots))
    idx = its * rk.L + col("j")
    parts = col("part")
    h, s, e = enq[idx], np.asarray(rk.start)[idx], np.asarray(rk.end)[idx]
    for k in np.flatnonzero((parts >= 0) & np.isfinite(s)):  # a send/recv part ends when its pair does
        e[k] = engine.part_end.get((rank, int(idx[k]), int(parts[k])), np.nan)
    keep = np.isfinite(h)
    return Calls(comm=col("comm", np.uint64)[keep], op=col("op")[keep], seq=(its * col("per_it") + col("seq0"))[keep],
                 aux=(its * col("aux_it") + col("aux0"))[keep], peer=col("peer")[keep],
                 comm_rank=col("comm_rank")[keep], nranks=col("nranks")[keep], nbytes=col("nbytes")[keep],
                 h=h[keep], s=s[keep], e=e[keep])


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
    if mode == "gpu":  # calls that wait on the device: written again as entered there
        scan = (calls.seq * 0.6180339887 + calls.comm.astype(np.float64) * 0.1) % 1.0 * SCAN_S  # the scan's phase
        dev_written = calls.s + DEVICE_ENTRY_S + scan
        dev = np.isfinite(calls.s) & ~(calls.e <= dev_written) & (dev_written < completion_stops)
        if dev.any():
            recs = np.concatenate([recs, _records(calls, rank, clock, wire.FLAG_GPU_TIMED, calls.s, None, with_aux)[dev]])
            written = np.concatenate([written, dev_written[dev]])
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
