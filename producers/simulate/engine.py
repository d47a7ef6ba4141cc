"""The timing model: every rank's calls, one iteration at a time, vectorised over ranks.

Times are float seconds of true time since the job's start; ``inf`` means "never" (a call
not issued, or one that never completes). Per iteration each stage runs its 1F1B ops
(`pipeline.levels`); an op first receives from its neighbour stage (send/recv rendezvous:
both complete at max(post times) + transfer), then computes in ``tp_calls`` chunks, each
followed by a TP AllReduce (plus a CP AllGather before and two EP AllToAlls after, when
those dimensions exist), then posts its send (non-blocking). The iteration ends with a DP
ReduceScatter, the optimizer and a DP AllGather. A collective completes on every member at
max(entry times) + transfer time + a few microseconds, so a late rank makes its peers wait.

Faults act on this model: a hung rank's entries from its hang time on become ``inf``, which
propagates through every rendezvous until the whole job is frozen; a comm hang makes the
first instance entered after its time never complete; slow ranks and downclocked GPUs scale
compute; slow links scale the transfer time of every comm spanning both nodes; a lost
node's ranks hang at its loss time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from commwatch import wire
from commwatch.producers.simulate.layout import Layout
from commwatch.producers.simulate.pipeline import levels
from commwatch.producers.simulate.schedule import Fault
from commwatch.producers.simulate.spec import JobSpec

INF = np.inf
COMPLETE_JITTER_S = 20e-6  # spread of completion times across the members of one instance
GC_MEAN_S = 0.08
# shares of the healthy iteration time
SHARE_DP_RS, SHARE_DP_AG, SHARE_OPT = 0.04, 0.03, 0.03
SHARE_P2P = 0.02  # of one microbatch slot
SHARE_TP_COMM = 0.12  # of one forward op
BYTES = {"tp": 16 << 20, "cp": 32 << 20, "ep": 8 << 20, "pp": 8 << 20, "dp_rs": 512 << 20, "dp_ag": 256 << 20}


@dataclass
class Calls:
    """Column arrays of call records (true times, float seconds)."""

    rank: np.ndarray
    kind: np.ndarray  # index into Layout.kinds
    seq: np.ndarray
    op: np.ndarray
    t0: np.ndarray  # entry, inf = not issued
    t1: np.ndarray  # completion, inf = never
    nbytes: np.ndarray
    peer: np.ndarray  # SEND/RECV: peer's comm rank; else -1

    def __len__(self) -> int:
        return len(self.rank)


@dataclass
class Chunk:
    """What one iteration produced."""

    iteration: int
    calls: Calls
    horizon: float  # no call of a later iteration starts before this
    t_start: np.ndarray  # per rank (flat) iteration start
    t_end: np.ndarray  # per rank iteration end, inf if it never ended
    forward_s: np.ndarray
    backward_s: np.ndarray
    optimizer_s: np.ndarray
    checkpoint: tuple[float, float] | None = None


@dataclass
class Effects:
    """Faults resolved against the layout into per-rank arrays (rank-grid shape)."""

    hang_at: np.ndarray
    comm_hang_at: dict[str, np.ndarray]
    slow: list[tuple[np.ndarray, float, float, float]] = field(default_factory=list)
    links: list[tuple[int, int, float, float, float]] = field(default_factory=list)
    blips: list[tuple[int, float, float]] = field(default_factory=list)
    node_lost_at: dict[int, float] = field(default_factory=dict)
    downclock: dict[int, tuple[float, float, float]] = field(default_factory=dict)  # rank -> at, until, mhz


def resolve(faults: list[Fault], layout: Layout) -> Effects:
    """Check every fault against the layout (ValueError naming it) and build the effects."""
    shape = layout.shape
    eff = Effects(np.full(shape, INF), {k: np.full(shape, INF) for k in layout.kinds})
    hang_flat = eff.hang_at.reshape(-1)

    def rank_of(f: Fault) -> int:
        if f.rank is None or f.rank >= layout.world_size:
            raise ValueError(f"{f.kind} fault: rank={f.rank} outside 0..{layout.world_size - 1}")
        return f.rank

    for f in faults:
        until = INF if f.until_s is None else f.until_s
        if f.kind == "hang":
            r = rank_of(f)
            hang_flat[r] = min(hang_flat[r], f.at_s)
        elif f.kind == "node_lost":
            node = layout.node_index(f.nodes[0])
            ranks = layout.ranks_of_node(node)
            hang_flat[ranks] = np.minimum(hang_flat[ranks], f.at_s)
            eff.node_lost_at[node] = min(eff.node_lost_at.get(node, INF), f.at_s)
        elif f.kind == "comm_hang":
            comm = layout.comm_by_name(f.comm or "")
            arr = eff.comm_hang_at[comm.kind].reshape(-1)
            arr[comm.members] = np.minimum(arr[comm.members], f.at_s)
        elif f.kind in ("slow", "downclock"):
            r = rank_of(f)
            mask = np.zeros(shape, dtype=bool)
            mask.reshape(-1)[r] = True
            eff.slow.append((mask, f.at_s, until, float(f.factor)))
            if f.kind == "downclock":
                eff.downclock[r] = (f.at_s, until, float(f.mhz))
        elif f.kind == "slow_link":
            a, b = (layout.node_index(n) for n in f.nodes)
            eff.links.append((a, b, f.at_s, until, float(f.factor)))
        elif f.kind == "blip":
            eff.blips.append((rank_of(f), f.at_s, float(f.ms) / 1e3))
    return eff


class Engine:
    def __init__(self, spec: JobSpec, layout: Layout, effects: Effects):
        self.spec, self.lay, self.eff = spec, layout, effects
        self.rng = np.random.default_rng([spec.seed, 1])
        P, M = spec.pp, spec.microbatches
        self.levels = levels(P, M)
        slot = spec.step_s * (1 - SHARE_DP_RS - SHARE_DP_AG - SHARE_OPT) / (M + P - 1)
        self.t_f, self.t_b = slot / 3, 2 * slot / 3
        self.x_p2p = SHARE_P2P * slot
        self.x_tp = SHARE_TP_COMM * self.t_f / spec.tp_calls
        self.compute_share = 1 - SHARE_TP_COMM
        self.x_dp_rs, self.x_dp_ag, self.opt_s = (SHARE_DP_RS * spec.step_s, SHARE_DP_AG * spec.step_s,
                                                  SHARE_OPT * spec.step_s)
        self.kind_index = {k: i for i, k in enumerate(layout.kinds)}
        self.t = np.zeros(layout.shape)
        self.sendF = np.full((M,) + layout.shape, INF)
        self.sendB = np.full((M,) + layout.shape, INF)
        self.iteration = 0
        self.blip_done = [False] * len(effects.blips)
        self.next_checkpoint = spec.checkpoint_every_s or INF
        # per kind, per rank: does the rank's group span both nodes of slow link i
        self.spans = {k: [self._spans(k, a, b) for a, b, *_ in effects.links] for k in layout.kinds}
        self._parts: list[tuple] = []
        # fault arrays that are all inf change nothing: skip them on the hot path
        self.hangs = bool(np.isfinite(effects.hang_at).any())
        self.comm_hangs = {k for k, a in effects.comm_hang_at.items() if np.isfinite(a).any()}

    def _spans(self, kind: str, a: int, b: int) -> np.ndarray:
        nodes = self.lay.node_of_rank[self.lay.groups(kind)]
        hit = (nodes == a).any(axis=1) & (nodes == b).any(axis=1)
        return hit[self.lay.comm_of_rank[kind] - self.lay.kind_base[kind]].reshape(self.lay.shape)

    # ------------------------------------------------------------------------------------
    def _groupmax(self, kind: str, e: np.ndarray) -> np.ndarray:
        if kind == "tp":
            return e.max(axis=3, keepdims=True)
        if kind == "cp":
            return e.max(axis=1, keepdims=True)
        if kind == "dp":
            return e.max(axis=0, keepdims=True)
        ep = self.spec.ep
        shp = e.shape
        m = e.reshape((shp[0] // ep, ep) + shp[1:]).max(axis=1, keepdims=True)
        return np.broadcast_to(m, (shp[0] // ep, ep) + shp[1:]).reshape(shp)

    def _collective(self, kind: str, e: np.ndarray, ranks: np.ndarray, sel, seq, op: int, nbytes: int,
                    x: float) -> np.ndarray:
        """Members enter at `e`; returns completion times (inf = never). `sel` picks the
        stage columns of the per-rank fault arrays."""
        if self.hangs:
            e = np.where(e >= self.eff.hang_at[sel], INF, e)
        emax = self._groupmax(kind, e)
        xs = x
        for i, (_, _, at, until, factor) in enumerate(self.eff.links):
            span = self.spans[kind][i][sel]
            xs = xs * np.where(span & (emax >= at) & (emax < until), factor, 1.0)
        c = emax + xs + self.rng.random(e.shape) * COMPLETE_JITTER_S
        if kind in self.comm_hangs:
            c = np.where(emax >= self.eff.comm_hang_at[kind][sel], INF, c)
        self._parts.append((ranks, self.kind_index[kind], seq, op, e, c, nbytes, -1))
        return c

    def _factor(self, t: np.ndarray, sel) -> np.ndarray | float:
        fac: np.ndarray | float = 1.0
        for mask, at, until, factor in self.eff.slow:
            fac = fac * np.where(mask[sel] & (t >= at) & (t < until), factor, 1.0)
        return fac

    def _pauses(self, t: np.ndarray, dur: np.ndarray, ranks: np.ndarray) -> np.ndarray:
        """Natural GC-like pauses plus scheduled blips falling in this op."""
        spec = self.spec
        extra = np.where(self.rng.random(t.shape) < spec.gc_blip_rate * dur,
                         np.minimum(self.rng.exponential(GC_MEAN_S, t.shape), 4 * GC_MEAN_S), 0.0)
        for i, (rank, at, pause) in enumerate(self.eff.blips):
            if self.blip_done[i]:
                continue
            hit = (ranks == rank) & (t + dur >= at)
            if hit.any():
                extra = extra + np.where(hit, pause, 0.0)
                self.blip_done[i] = True
        return extra

    # ------------------------------------------------------------------------------------
    def _level(self, lv, it: int) -> tuple[np.ndarray, np.ndarray]:
        spec, lay = self.spec, self.lay
        P, M, n_tp = spec.pp, spec.microbatches, spec.tp_calls
        act = lv.stages
        sel = (slice(None), slice(None), act, slice(None))
        sub = self.t[sel]
        ranks = lay.grid[sel]
        # receive from the neighbour stage
        if lv.recv.any():
            loc = np.nonzero(lv.recv)[0]
            stages, peers, mbs = act[loc], lv.peer[loc], lv.mb[loc]
            rsel = (slice(None), slice(None), stages, slice(None))
            post = np.where(lv.forward[loc][:, None, None, None],
                            self.sendF[(mbs, slice(None), slice(None), peers)],
                            self.sendB[(mbs, slice(None), slice(None), peers)])
            post = np.moveaxis(post, 0, 2)
            e = sub[:, :, loc, :]
            e = np.where(e >= self.eff.hang_at[rsel], INF, e)
            both = np.maximum(post, e)
            x = self.x_p2p
            nodes_r = lay.node_of_rank[lay.grid[rsel]]
            nodes_s = lay.node_of_rank[lay.grid[(slice(None), slice(None), peers, slice(None))]]
            for a, b, at, until, factor in self.eff.links:
                link = ((nodes_r == a) & (nodes_s == b)) | ((nodes_r == b) & (nodes_s == a))
                x = x * np.where(link & (both >= at) & (both < until), factor, 1.0)
            done = both + x + self.rng.random(both.shape) * COMPLETE_JITTER_S
            if "pp" in self.kind_index:
                done = np.where(both >= self.eff.comm_hang_at["pp"][rsel], INF, done)
            sub[:, :, loc, :] = done
            seq = (it * M + mbs)[None, None, :, None]
            pp = self.kind_index["pp"]
            self._parts.append((lay.grid[rsel], pp, seq, wire.OP_RECV, e, done, BYTES["pp"],
                                peers[None, None, :, None]))
            self._parts.append((lay.grid[(slice(None), slice(None), peers, slice(None))], pp, seq,
                                wire.OP_SEND, post, done, BYTES["pp"], stages[None, None, :, None]))
        # compute, interleaved with TP (and CP, EP) collectives
        fwd = lv.forward[None, None, :, None]
        base = np.where(fwd, self.t_f, self.t_b)
        start = sub.copy()
        fac = self._factor(sub, sel)
        sub = sub + self._pauses(sub, base * fac, ranks)
        op_seq = lv.opidx[None, None, :, None]
        if spec.cp > 1:
            sub = self._collective("cp", sub, ranks, sel, it * 2 * M + op_seq, wire.OP_ALLGATHER, BYTES["cp"],
                                   self.x_tp)
        chunk = base * fac * (self.compute_share / n_tp)
        for j in range(n_tp):
            x = self.rng.standard_normal(sub.shape)  # in place: sub + chunk * (1 + jitter * x).clip(0.5)
            x *= spec.jitter
            x += 1
            np.maximum(x, 0.5, out=x)
            x *= chunk
            x += sub
            e = x
            if spec.tp > 1:
                sub = self._collective("tp", e, ranks, sel, (it * 2 * M + op_seq) * n_tp + j, wire.OP_ALLREDUCE,
                                       BYTES["tp"], self.x_tp)
            else:
                sub = np.where(e >= self.eff.hang_at[sel], INF, e) if self.hangs else e
        if spec.ep > 1:
            for j in range(2):
                sub = self._collective("ep", sub, ranks, sel, (it * 2 * M + op_seq) * 2 + j, wire.OP_ALLTOALL,
                                       BYTES["ep"], self.x_tp)
        # post sends (non-blocking): forward to the next stage, backward to the previous
        post = np.where(sub >= self.eff.hang_at[sel], INF, sub) if self.hangs else sub
        for table, want in ((self.sendF, lv.forward & (act < P - 1)), (self.sendB, ~lv.forward & (act > 0))):
            if want.any():
                loc = np.nonzero(want)[0]
                table[(lv.mb[loc], slice(None), slice(None), act[loc])] = np.moveaxis(post[:, :, loc, :], 2, 0)
        self.t[sel] = sub
        return act, np.where(fwd, sub - start, 0.0), np.where(fwd, 0.0, sub - start)

    def step(self) -> Chunk:
        """Run one iteration; returns its calls and timing."""
        with np.errstate(invalid="ignore"):  # inf - inf where a rank froze
            return self._step()

    def _step(self) -> Chunk:
        spec, lay = self.spec, self.lay
        it = self.iteration
        t_start = self.t.copy()
        fwd_s = np.zeros(lay.shape)
        bwd_s = np.zeros(lay.shape)
        for lv in self.levels:
            act, f, b = self._level(lv, it)
            fwd_s[:, :, act, :] += f
            bwd_s[:, :, act, :] += b
        everything = (slice(None),) * 4
        if spec.dp > 1:
            self.t = self._collective("dp", self.t, lay.grid, everything, 2 * it, wire.OP_REDUCESCATTER,
                                      BYTES["dp_rs"] // spec.dp, self.x_dp_rs)
        before_opt = self.t
        self.t = self.t + self.opt_s * self._factor(self.t, everything)
        if spec.dp > 1:
            self.t = self._collective("dp", self.t, lay.grid, everything, 2 * it + 1, wire.OP_ALLGATHER,
                                      BYTES["dp_ag"] // spec.dp, self.x_dp_ag)
        else:
            self.t = np.where(self.t >= self.eff.hang_at, INF, self.t)
        t_end = self.t.copy()
        checkpoint = None
        if np.isfinite(self.t).all() and self.t.min() >= self.next_checkpoint:
            idle_from = float(self.t.max())
            checkpoint = (idle_from, idle_from + spec.checkpoint_s)
            self.t = np.full_like(self.t, checkpoint[1])  # a new array: records hold the old one
            while self.next_checkpoint <= self.t.min():
                self.next_checkpoint += spec.checkpoint_every_s
        self.iteration += 1
        return Chunk(it, self._collect(), float(self.t.min()), t_start.ravel(), t_end.ravel(),
                     fwd_s.ravel(), bwd_s.ravel(), (t_end - before_opt).ravel(), checkpoint)

    def _collect(self) -> Calls:
        """The iteration's parts as flat columns, written in place (no per-part copies)."""
        parts, self._parts = self._parts, []
        sizes = np.array([p[4].size for p in parts], dtype=np.int64)
        n = int(sizes.sum())
        rank = np.empty(n, dtype=np.int64)
        seq = np.empty(n, dtype=np.int64)
        t0 = np.empty(n)
        t1 = np.empty(n)
        peer = np.empty(n, dtype=np.int32)
        a = 0
        for (ranks, _, sq, _, e, c, _, pr), size in zip(parts, sizes.tolist()):
            b = a + size
            shape = e.shape
            rank[a:b].reshape(shape)[...] = ranks
            seq[a:b].reshape(shape)[...] = sq
            t0[a:b].reshape(shape)[...] = e
            t1[a:b].reshape(shape)[...] = c
            peer[a:b].reshape(shape)[...] = pr
            a = b
        kind, op, nbytes = (np.array([p[i] for p in parts], dtype=dt) for i, dt in
                            ((1, np.int8), (3, np.uint8), (6, np.uint64)))
        return Calls(rank, np.repeat(kind, sizes), seq, np.repeat(op, sizes), t0, t1, np.repeat(nbytes, sizes), peer)
