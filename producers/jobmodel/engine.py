"""Discrete-event execution of a job: host threads, in-order GPU streams, rendezvous.

Each rank has a host thread and one GPU stream. The host walks its program
(`program.iteration`, repeated) and enqueues device ops; it may run ahead of the GPU by
`queue_depth` ops and waits for the GPU at `SYNC`. The GPU runs the enqueued ops in
order: a compute kernel takes its time (x the rank's slowness x jitter); a collective
starts when the GPU reaches it and ends on every member at the same instant (+ a few us)
once every member's GPU has reached it; a send and its recv rendezvous the same way.

Every time is a max() of the times it depends on, so the order in which ranks are
advanced does not change the result: a worklist advances each rank until it waits for
another, and a completed rendezvous wakes its members. Times are float seconds of true
time from the job's start.

Faults act here through a rank's `host_stop` (the host enqueues nothing at or after it:
a hang, a crash, the end of the run), `gpu_stop` (the process is gone: nothing runs or
completes on its GPU after it), `gpu_hang` (the first compute kernel started from then
never ends; its host enqueues on until it waits for the GPU), `finish_after` (the loop ends at the next iteration
boundary), slowness factors from a time on, launch-bound hosts (`host_slow`), host pauses,
communicators whose instances never complete from a time on (a transport hang), and slow
links (transfers between two nodes take longer from a time on: `links`, counted in `slowed`).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np

from commwatch.producers.jobmodel.layout import Group, Layout
from commwatch.producers.jobmodel.program import COLL, COMPUTE, HOST, MARK, ROLE_GROUP, SEND, SYNC, Op

NAN = math.nan
INF = math.inf
LAUNCH_S = 40e-6  # host time to enqueue one device op
HOST_SHARE = 0.02  # host time per device second of compute it enqueues (Python, autograd)
NVLINK_BPS = 150e9
NETWORK_BPS = 20e9
COLL_LATENCY_S = 15e-6


@dataclass
class RankPlan:
    """What a rank runs and what happens to it (all times in seconds of true time)."""

    prog: list[Op]
    factor: float = 1.0  # compute slowness of this rank from the start (unbalanced stage)
    slow: list[tuple[float, float]] = field(default_factory=list)  # (from, factor)
    host_slow: list[tuple[float, float]] = field(default_factory=list)  # (from, host s per compute s): launch-bound
    pauses: list[tuple[float, float]] = field(default_factory=list)  # host pauses (at, seconds)
    checkpoints: dict[int, float] = field(default_factory=dict)  # iteration -> host seconds at its start
    host_stop: float = INF
    gpu_stop: float = INF
    gpu_hang: float = INF  # the first compute kernel the GPU starts from then never ends
    finish_after: float = INF  # the training loop ends at the first iteration boundary from then


class Rank:
    """One rank's execution state and the times of everything it ran."""

    def __init__(self, rank: int, plan: RankPlan, rng: np.random.Generator, jitter: float):
        self.rank = rank
        self.plan = plan
        self.prog = plan.prog
        self.L = len(plan.prog)
        self.rng = rng
        self.jitter = jitter
        self.slow = sorted(plan.slow)
        self.pauses = deque(sorted(plan.pauses))
        self.host_i = 0
        self.host_t = 0.0
        self.host_stopped = False
        self.gpu_i = 0
        self.gpu_t = 0.0
        self.gpu_dead = False
        self.enq: list[float] = []  # host enqueue time per op (host ops: when the host passed them)
        self.start: list[float] = []  # device start (arrival at a rendezvous)
        self.end: list[float] = []  # device end; NaN: never
        self.passed: list[float] = []  # when the GPU was done with the op
        self.jit: list[float] = []  # compute duration multiplier per op
        self.ejit: list[float] = []  # rendezvous end offset per op (s)
        self.marks: list[float] = []  # host time of each iteration's MARK

    def grow(self) -> None:
        """Room for one more iteration (times unknown), with its jitter drawn."""
        n = self.L
        self.start += [NAN] * n
        self.end += [NAN] * n
        self.passed += [NAN] * n
        jit = np.clip(1.0 + self.jitter * self.rng.standard_normal(n), 0.5, 2.0)
        self.jit += jit.tolist()
        self.ejit += self.rng.uniform(0.0, 20e-6, n).tolist()

    def compute_s(self, op: Op, i: int, t: float) -> float:
        f = self.plan.factor
        for at, factor in self.slow:
            if t >= at:
                f *= factor
        return op.dur * f * self.jit[i]


class Engine:
    """Runs every rank's program until each host stops and each GPU drains or blocks."""

    def __init__(self, layout: Layout, plans: list[RankPlan], *, microbatches: int, seed: int, jitter: float,
                 queue_depth: int = 64, comm_hangs: dict[int, float] | None = None,
                 links: tuple[tuple[int, int, float, float], ...] = ()):
        self.layout = layout
        self.M = microbatches
        self.Q = queue_depth
        self.comm_hangs = comm_hangs or {}  # group id -> from time: instances complete on no member
        self.links = links  # slow links: (node a, node b, factor, from time)
        self.slowed = 0  # transfers a slow link lengthened
        self.ranks = [Rank(r, p, np.random.default_rng([seed, r]), jitter) for r, p in enumerate(plans)]
        # per rank and op of the iteration: (group, its instances per iteration, ordinal) of a COLL;
        # instance number = iteration x per-iteration count + ordinal, the same on every member
        self.coll = [collective_numbering(layout, r, p.prog) for r, p in enumerate(plans)]
        self.instances: dict[tuple[int, int], Rendezvous] = {}  # (group id, instance) -> who arrived
        self.hung: list[tuple[int, int, Rendezvous]] = []  # every member arrived, it never completed
        self.p2p: dict[tuple, tuple[float, int, int, int]] = {}  # part key -> (t, rank, op index, part)
        self.part_end: dict[tuple[int, int, int], float] = {}  # (rank, op index, part) -> end
        self.pending: dict[tuple[int, int], list] = {}  # (rank, op index) -> [parts left, max end]
        self._xfer: dict[tuple[int, int], float] = {}
        self.ready: deque[int] = deque()
        self.queued: set[int] = set()

    # --- the worklist -------------------------------------------------------------------
    def run(self) -> "Engine":
        for r in range(len(self.ranks)):
            self.wake(r)
        while self.ready:
            r = self.ready.popleft()
            self.queued.discard(r)
            rk = self.ranks[r]
            while self._host(rk) | self._gpu(rk):
                pass
        return self

    def wake(self, r: int) -> None:
        if r not in self.queued:
            self.queued.add(r)
            self.ready.append(r)

    # --- the host thread ----------------------------------------------------------------
    def _host(self, rk: Rank) -> bool:
        moved = False
        plan = rk.plan
        while not rk.host_stopped:
            i = rk.host_i
            it, j = divmod(i, rk.L)
            op = rk.prog[j]
            t = rk.host_t
            while rk.pauses and rk.pauses[0][0] <= t:
                at, dur = rk.pauses.popleft()
                t = max(t, at) + dur
            if op.code == SYNC:
                if rk.gpu_i < i:  # the GPU has not finished what was enqueued before
                    rk.host_t = t
                    return moved
                t = max(t, rk.gpu_t)
            elif op.code == MARK:
                if j == 0 and len(rk.start) <= i:
                    rk.grow()
                if t < plan.host_stop:
                    rk.marks.append(t)
                if t >= plan.finish_after:
                    rk.host_t = t
                    rk.host_stopped = True
                    return moved
                t += plan.checkpoints.get(it, 0.0)
            elif op.code == HOST:
                t += op.dur * rk.jit[i]
            else:  # a device op needs a free slot in the stream's launch queue
                k = i - self.Q
                if k >= 0:
                    if rk.gpu_i <= k:
                        rk.host_t = t
                        return moved
                    t = max(t, rk.passed[k])
                t += LAUNCH_S + (self._host_share(rk, t) * op.dur if op.code == COMPUTE else 0.0)
            if t >= plan.host_stop:
                rk.host_stopped = True
                return moved
            rk.enq.append(t)
            rk.host_t = t
            rk.host_i += 1
            moved = True
        return moved

    @staticmethod
    def _host_share(rk: Rank, t: float) -> float:
        """Host seconds per device second of compute enqueued at `t`: `HOST_SHARE`, or a
        launch-bound host's (`RankPlan.host_slow`)."""
        share = HOST_SHARE
        for at, f in rk.plan.host_slow:
            if t >= at:
                share = max(share, f)
        return share

    # --- the GPU stream -----------------------------------------------------------------
    def _gpu(self, rk: Rank) -> bool:
        moved = False
        while rk.gpu_i < rk.host_i and not rk.gpu_dead:
            i = rk.gpu_i
            it, j = divmod(i, rk.L)
            op = rk.prog[j]
            if op.code in (SYNC, MARK, HOST):
                rk.passed[i] = rk.gpu_t
                rk.gpu_i += 1
                moved = True
                continue
            s = rk.start[i]
            if s != s:  # NaN: the GPU reaches the op now
                s = max(rk.gpu_t, rk.enq[i])
                if s >= rk.plan.gpu_stop:
                    rk.gpu_dead = True
                    return moved
                rk.start[i] = s
                if op.code == COMPUTE and s >= rk.plan.gpu_hang:  # stuck in this kernel for good
                    rk.gpu_dead = True
                    return moved
                if op.code == COMPUTE:
                    rk.end[i] = s + rk.compute_s(op, i, s)
                elif op.code == COLL:
                    self._arrive(rk, i, it, j, s)
                else:
                    self._post(rk, i, it, op, s)
            e = rk.end[i]
            if e != e:  # waiting at a rendezvous
                return moved
            if e > rk.plan.gpu_stop:
                rk.end[i] = NAN
                rk.gpu_dead = True
                return moved
            rk.passed[i] = e
            rk.gpu_t = e
            rk.gpu_i += 1
            moved = True
        return moved

    def _arrive(self, rk: Rank, i: int, it: int, j: int, s: float) -> None:
        g, per_iter, ordinal = self.coll[rk.rank][j]
        key = (g.id, it * per_iter + ordinal)
        rv = self.instances.get(key)
        if rv is None:
            rv = self.instances[key] = Rendezvous()
        rv.arrive(rk.rank, i, s)
        if len(rv.members) < g.size:
            return
        del self.instances[key]
        hang_from = self.comm_hangs.get(g.id)
        base = rv.last + self._xfer_s(g, rk.prog[j].nbytes) * self._link(self.layout.nodes_of(g), rv.last)
        gone = min(self.ranks[r].plan.gpu_stop for r in g.members)
        if (hang_from is not None and rv.last >= hang_from) or base > gone:
            self.hung.append((g.id, key[1], rv))
            return
        for r, k in rv.members:
            other = self.ranks[r]
            other.end[k] = base + other.ejit[k]
            if r != rk.rank:
                self.wake(r)

    def _post(self, rk: Rank, i: int, it: int, op: Op, s: float) -> None:
        stage = self.layout.stage(rk.rank)
        gid = self.layout.group(rk.rank, "pp").id
        self.pending[(rk.rank, i)] = [len(op.parts), -INF]
        for n, part in enumerate(op.parts):
            src, dst = (stage, part.peer) if part.dir == SEND else (part.peer, stage)
            key = (gid, src, dst, it * self.M + part.mb)
            other = self.p2p.pop(key, None)
            if other is None:
                self.p2p[key] = (s, rk.rank, i, n)
                continue
            t_other, r_other, i_other, n_other = other
            both = max(s, t_other)
            nodes = {self.layout.node_of(rk.rank), self.layout.node_of(r_other)}
            e = both + (part.nbytes / NETWORK_BPS + COLL_LATENCY_S) * self._link(nodes, both)
            if e > min(rk.plan.gpu_stop, self.ranks[r_other].plan.gpu_stop):
                continue  # one side is gone: the pair never completes
            self._part_done(rk.rank, i, n, e)
            self._part_done(r_other, i_other, n_other, e)

    def _part_done(self, r: int, i: int, n: int, e: float) -> None:
        self.part_end[(r, i, n)] = e
        cell = self.pending[(r, i)]
        cell[0] -= 1
        cell[1] = max(cell[1], e)
        if cell[0] == 0:
            rk = self.ranks[r]
            rk.end[i] = cell[1] + rk.ejit[i]
            del self.pending[(r, i)]
            self.wake(r)

    def _link(self, nodes, t: float) -> float:
        """How much longer a transfer among `nodes` starting at `t` takes: slow links it crosses."""
        f = 1.0
        for a, b, factor, at in self.links:
            if t >= at and a in nodes and b in nodes:
                f *= factor
                self.slowed += 1
        return f

    # --- what the run left ----------------------------------------------------------------
    def _xfer_s(self, g: Group, nbytes: int) -> float:
        key = (g.id, nbytes)
        t = self._xfer.get(key)
        if t is None:
            bw = NVLINK_BPS if len(self.layout.nodes_of(g)) == 1 else NETWORK_BPS
            t = self._xfer[key] = COLL_LATENCY_S + 2 * (g.size - 1) / g.size * nbytes / bw
        return t

    def blocked_arrivals(self) -> list[float]:
        """Arrival times at rendezvous that never completed: the waits that never end."""
        out = [rv.first for rv in self.instances.values()]
        out += [rv.first for _g, _n, rv in self.hung]
        out += [t for t, _r, _i, _n in self.p2p.values()]
        return out


class Rendezvous:
    """The members that reached one collective instance, and when."""

    __slots__ = ("members", "first", "last")

    def __init__(self) -> None:
        self.members: list[tuple[int, int]] = []  # (rank, op index)
        self.first = INF
        self.last = -INF

    def arrive(self, rank: int, i: int, t: float) -> None:
        self.members.append((rank, i))
        self.first = min(self.first, t)
        self.last = max(self.last, t)


def collective_numbering(layout: Layout, rank: int, prog: list[Op]) -> list[tuple[Group, int, int] | None]:
    """Per op of an iteration: (group, the group's collectives per iteration, this op's ordinal)
    for a COLL, else None. Every member of a group issues its collectives in the same order."""
    groups = [layout.group(rank, ROLE_GROUP[op.role]) if op.code == COLL else None for op in prog]
    totals = Counter(g.id for g in groups if g is not None)
    seen: Counter = Counter()
    out: list[tuple[Group, int, int] | None] = []
    for g in groups:
        if g is None:
            out.append(None)
        else:
            out.append((g, totals[g.id], seen[g.id]))
            seen[g.id] += 1
    return out
