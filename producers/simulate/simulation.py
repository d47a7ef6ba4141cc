"""`simulate(spec, faults)`: the messages that the job's node agents and hooks would send.

Per node agent (clock = true time + the node's offset + drift x t):

- ``cw.calls.v1``: every ``batch_s`` one batch per communicator with the records of the
  node's ranks in that window. A call that starts and completes within one window is
  written once, completed; a call still open at a flush is written then as an entry record
  (COMPLETED clear, ``t_end_ns`` 0) and again, completed, in the window where it ends.
  COMM_INIT records open the run.
- ``cw.progress.v1``: every ``heartbeat_s`` per communicator of the node, also during
  hangs and checkpoints; PP communicators (send/recv only) report ``p2p`` counters.
- ``cw.topology.v1`` once per rank, ``cw.steps.v1`` per rank and iteration, ``cw.hw.v1``
  per rank every ``hw_period_s``.

A lost node's agent sends nothing from its loss time on. Messages come out in
non-decreasing ``ts_ns``: the engine guarantees no later call starts before its horizon, so
everything stamped before the earliest node clock at the horizon is final.
"""

from __future__ import annotations

import collections
import hashlib
import math
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from commwatch import topics, wire
from commwatch.capture import Message
from commwatch.producers.simulate import payloads
from commwatch.producers.simulate.engine import INF, Calls, Chunk, Engine, resolve
from commwatch.producers.simulate.layout import Layout
from commwatch.producers.simulate.schedule import Fault
from commwatch.producers.simulate.spec import JobSpec
from commwatch.producers.simulate.truth import fault_truth

SM_MHZ = 1980
ROW = np.dtype((np.void, wire.RECORD_SIZE))
THROTTLE_HW_SLOWDOWN = 0x8
P2P_DIRS = ((wire.OP_SEND, 1, "send"), (wire.OP_SEND, -1, "send"), (wire.OP_RECV, -1, "recv"),
            (wire.OP_RECV, 1, "recv"))  # (op, peer stage - own stage, name)


@dataclass
class SimStats:
    messages: int = 0
    records: int = 0  # call records written (entry and completion records both count)
    calls: int = 0  # call instances issued per rank
    iterations: int = 0
    by_topic: collections.Counter = field(default_factory=collections.Counter)
    checkpoints: list[tuple[float, float]] = field(default_factory=list)


def gpu_uuid(job: str, rank: int) -> str:
    h = hashlib.blake2b(f"{job}/gpu/{rank}".encode(), digest_size=16).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class Simulation:
    """A simulated run; `messages()` regenerates it (deterministic for a seed)."""

    def __init__(self, spec: JobSpec, faults: list[Fault] | tuple[Fault, ...] = ()):
        self.spec = spec
        self.faults = list(faults)
        self.layout = Layout(spec.job, spec.tp, spec.pp, spec.dp, spec.cp, spec.ep, spec.gpus_per_node)
        self.effects = resolve(self.faults, self.layout)
        self.stats = SimStats()

    def truth(self) -> list[dict]:
        return [fault_truth(f, self.spec, self.layout) for f in self.faults]

    def truth_document(self) -> dict:
        """Ground truth file content: spec, layout, faults, checkpoint windows (after a run)."""
        s = self.spec
        return {
            "spec": s.to_dict(),
            "layout": self.layout.describe(),
            "faults": self.truth(),
            "checkpoints": [{"at_ns": s.start_ns + round(a * 1e9), "until_ns": s.start_ns + round(b * 1e9)}
                            for a, b in self.stats.checkpoints],
            "clock": "at_ns/until_ns are true time; each node's clock adds its offset and drift",
        }

    def messages(self) -> Iterator[Message]:
        self.stats = SimStats()
        return _Run(self).run()


def simulate(spec: JobSpec, faults: list[Fault] | tuple[Fault, ...] = ()) -> Simulation:
    return Simulation(spec, faults)


class _Run:
    def __init__(self, sim: Simulation):
        self.sim = sim
        self.spec = spec = sim.spec
        self.lay = lay = sim.layout
        self.eff = sim.effects
        self.engine = Engine(spec, lay, sim.effects)
        rng = np.random.default_rng([spec.seed, 2])
        self.off = rng.uniform(-spec.clock_skew_ms, spec.clock_skew_ms, lay.n_nodes) * 1e-3
        self.drift = 1.0 + rng.uniform(-spec.clock_drift_ppm, spec.clock_drift_ppm, lay.n_nodes) * 1e-6
        self.rng = rng
        self.job_json = payloads.jstr(spec.job)
        self.n_kinds = len(lay.kinds)
        self.comm_table = np.stack([lay.comm_of_rank[k] for k in lay.kinds]) if lay.kinds else np.zeros((0, 0))
        self.crank_table = np.stack([lay.crank_of_rank[k] for k in lay.kinds]) if lay.kinds else np.zeros((0, 0))
        self.comm_size = np.array([len(c.members) for c in lay.comms], dtype=np.uint32)
        self.comm_keys = [topics.comm_key(spec.job, c.id) for c in lay.comms]
        self.lost_at = np.full(lay.n_nodes, INF)
        for node, at in self.eff.node_lost_at.items():
            self.lost_at[node] = at
        self.pp_kind = lay.kinds.index("pp") if "pp" in lay.kinds else -1
        self.gpus = [gpu_uuid(spec.job, r) for r in range(lay.world_size)]
        self.node_comms = lay.node_comms()
        self.stage = lay.coords["pp"]
        self.pending: list[tuple[int, int, Message]] = []
        self.by_topic = sim.stats.by_topic = collections.Counter()
        self.order = 0
        self.pend_recs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # records, w, group key
        # heartbeat state: collectives per (rank, kind), p2p per (rank, direction)
        R = lay.world_size
        self.started = np.full(R * max(self.n_kinds, 1), -1, dtype=np.int64)
        self.completed = self.started.copy()
        self.last_start = np.full(self.started.shape, -INF)
        self.last_end = self.last_start.copy()
        self.p2p_started = np.full(R * 4, -1, dtype=np.int64)
        self.p2p_completed = self.p2p_started.copy()
        self.ev_start: list[tuple[np.ndarray, ...]] = []
        self.ev_end: list[tuple[np.ndarray, ...]] = []
        self.next_hb = 0
        self.next_hw = 0
        self.temp = rng.integers(55, 70, R)

    # --- clocks and queue -----------------------------------------------------------------
    def clock(self, t: np.ndarray | float, node: np.ndarray | int) -> np.ndarray:
        """True seconds -> the node's clock in ns since the epoch."""
        local = np.asarray(t, dtype=np.float64) * self.drift[node] + self.off[node]
        return np.rint(local * 1e9).astype(np.int64) + self.spec.start_ns

    def push(self, ts: int, topic: str, key: str, value: bytes) -> None:
        self.pending.append((ts, self.order, Message(topic, key, ts, value)))
        self.order += 1
        self.by_topic[topic] += 1

    def release(self, before_ns: int | None) -> list[Message]:
        self.pending.sort()
        if before_ns is None:
            n = len(self.pending)
        else:
            lo, hi = 0, len(self.pending)
            while lo < hi:
                mid = (lo + hi) // 2
                if self.pending[mid][0] < before_ns:
                    lo = mid + 1
                else:
                    hi = mid
            n = lo
        out, self.pending = self.pending[:n], self.pending[n:]
        self.sim.stats.messages += n
        return [m for _, _, m in out]

    # --- the run ---------------------------------------------------------------------------
    def run(self) -> Iterator[Message]:
        spec = self.spec
        dur = spec.duration_s
        self.opening()
        horizon = 0.0
        while horizon < dur:
            chunk = self.engine.step()
            self.sim.stats.iterations += 1
            if chunk.checkpoint and chunk.checkpoint[0] < dur:
                self.sim.stats.checkpoints.append(chunk.checkpoint)
            self.take_calls(chunk.calls)
            self.take_steps(chunk)
            horizon = min(chunk.horizon, dur)
            final = horizon >= dur
            self.flush_windows(horizon)
            self.heartbeats(horizon, final)
            self.hardware(horizon, final)
            if final:
                break
            yield from self.release(int(self.clock(horizon, np.arange(self.lay.n_nodes)).min()))
        yield from self.release(None)

    def opening(self) -> None:
        lay, spec = self.lay, self.spec
        nodes = np.arange(lay.n_nodes)
        t0 = self.clock(0.0, nodes).tolist()
        for node, entries in enumerate(self.node_comms):
            name = lay.node_names[node]
            for r in lay.ranks_of_node(node):
                coords = {k: int(lay.coords[k][r]) for k in ("tp", "pp", "dp", "cp", "ep")}
                self.push(t0[node], topics.TOPOLOGY, spec.job,
                          payloads.topology(self.job_json, t0[node], r, lay.world_size, name,
                                            r % spec.gpus_per_node, self.gpus[r], coords))
            for cidx, ranks in entries:
                recs = wire.empty(len(ranks))
                recs["kind"] = wire.KIND_COMM_INIT
                recs["rank"] = ranks
                recs["comm"] = lay.comm_ids[cidx]
                recs["t_start_ns"] = t0[node]
                recs["t_end_ns"] = t0[node]
                kind = lay.kinds.index(lay.comms[cidx].kind)
                recs["comm_rank"] = self.crank_table[kind, ranks]
                recs["nranks"] = self.comm_size[cidx]
                recs["aux"] = lay.comm_nodes[cidx]
                self.push(t0[node], topics.CALLS, self.comm_keys[cidx], wire.encode_batch(recs))
                self.sim.stats.records += len(recs)

    # --- calls -----------------------------------------------------------------------------
    def take_calls(self, c: Calls) -> None:
        spec, lay = self.spec, self.lay
        dur, bs = spec.duration_s, spec.batch_s
        issued = c.t0 < dur
        if not issued.all():
            c = Calls(*(getattr(c, f)[issued] for f in Calls.__dataclass_fields__))
        self.sim.stats.calls += len(c)
        self.track(c)
        node = lay.node_of_rank[c.rank]
        done = c.t1 <= dur
        ws = np.floor(c.t0 / bs).astype(np.int64) + 1
        we = np.where(done, np.floor(np.where(done, c.t1, 0.0) / bs).astype(np.int64) + 1, -1)
        last_w = math.floor(dur / bs + 1e-9)
        lost = self.lost_at[node]
        entry = (ws != we) & (ws <= last_w) & (ws * bs < lost)
        finish = done & (we <= last_w) & (we * bs < lost)
        idx = np.concatenate([np.nonzero(entry)[0], np.nonzero(finish)[0]])
        n_entry = int(entry.sum())
        if not len(idx):
            return
        rank, kind = c.rank[idx], c.kind[idx].astype(np.int64)
        nd = node[idx]
        cidx = self.comm_table[kind, rank]
        recs = np.empty(len(idx), dtype=wire.RECORD_DTYPE)
        recs["kind"] = wire.KIND_CALL
        recs["op"] = c.op[idx]
        flags = np.full(len(idx), wire.FLAG_COMPLETED, dtype=np.uint16)
        flags[:n_entry] = 0
        recs["flags"] = flags
        recs["rank"] = rank
        recs["comm"] = lay.comm_ids[cidx]
        recs["seq"] = c.seq[idx]
        recs["t_start_ns"] = self.clock(c.t0[idx], nd)
        t_end = self.clock(np.where(flags.astype(bool), c.t1[idx], 0.0), nd)
        t_end[:n_entry] = 0
        recs["t_end_ns"] = t_end
        recs["bytes"] = c.nbytes[idx]
        recs["comm_rank"] = self.crank_table[kind, rank]
        recs["peer"] = c.peer[idx]
        recs["nranks"] = self.comm_size[cidx]
        recs["aux"] = 0
        w = np.concatenate([ws[entry], we[finish]])
        key = (w * lay.n_nodes + nd) * len(lay.comms) + cidx
        self.pend_recs.append((recs, w, key))

    def flush_windows(self, horizon: float) -> None:
        """Emit every batch whose flush time is at or before the horizon."""
        if not self.pend_recs:
            return
        lay, bs = self.lay, self.spec.batch_s
        recs = np.concatenate([p[0] for p in self.pend_recs])
        w = np.concatenate([p[1] for p in self.pend_recs])
        key = np.concatenate([p[2] for p in self.pend_recs])
        ready = w * bs <= horizon + 1e-12
        rows = recs.view(ROW)  # one 64-byte item per record: fancy indexing copies rows whole
        if not ready.all():
            keep = ~ready
            self.pend_recs = [(rows[keep].view(wire.RECORD_DTYPE), w[keep], key[keep])]
            rows, key = rows[ready], key[ready]
        else:
            self.pend_recs = []
        if not len(rows):
            return
        order = np.argsort(key)
        rows, key = rows[order], key[order]
        starts = np.concatenate([[0], np.flatnonzero(np.diff(key)) + 1])
        ends = np.append(starts[1:], len(key))
        gkey = key[starts]
        cidx = gkey % len(lay.comms)
        rest = gkey // len(lay.comms)
        node = rest % lay.n_nodes
        ts = self.clock((rest // lay.n_nodes) * bs, node).tolist()
        buf = rows.tobytes()
        pack = wire.BATCH_HEADER.pack
        magic, version, size = wire.BATCH_MAGIC, wire.BATCH_VERSION, wire.RECORD_SIZE
        keys = self.comm_keys
        pending, order_no = self.pending, self.order
        calls = topics.CALLS
        for a, b, c, t in zip(starts.tolist(), ends.tolist(), cidx.tolist(), ts):
            value = pack(magic, version, size, b - a, 0) + buf[a * 64:b * 64]
            pending.append((t, order_no, Message(calls, keys[c], t, value)))
            order_no += 1
        self.order = order_no
        self.by_topic[calls] += len(starts)
        self.sim.stats.records += len(rows)

    # --- heartbeats ------------------------------------------------------------------------
    def track(self, c: Calls) -> None:
        """Queue start/end events for the progress state."""
        p2p = (c.op == wire.OP_SEND) | (c.op == wire.OP_RECV)
        coll = ~p2p
        S = max(self.n_kinds, 1)
        ck = c.rank[coll] * S + c.kind[coll]
        if p2p.any():
            r = c.rank[p2p]
            d = c.peer[p2p] - self.stage[r]
            send = c.op[p2p] == wire.OP_SEND
            direction = np.where(send, np.where(d > 0, 0, 1), np.where(d < 0, 2, 3))
            pk = r * 4 + direction
        else:
            pk = np.zeros(0, dtype=np.int64)
        self.ev_start.append((c.t0[coll], ck, c.seq[coll], c.t0[p2p], pk, c.seq[p2p]))
        fin = np.isfinite(c.t1)
        self.ev_end.append((c.t1[coll & fin], c.rank[coll & fin] * S + c.kind[coll & fin], c.seq[coll & fin],
                            c.t1[p2p & fin], pk[fin[p2p]], c.seq[p2p & fin]))

    def _apply(self, events: list, h: float, seq_c: np.ndarray, last: np.ndarray, seq_p: np.ndarray) -> list:
        if not events:
            return events
        t, k, s, tp_, kp, sp = (np.concatenate([e[i] for e in events]) for i in range(6))
        m = t <= h
        np.maximum.at(seq_c, k[m], s[m])
        np.maximum.at(last, k[m], t[m])
        mp = tp_ <= h
        np.maximum.at(seq_p, kp[mp], sp[mp])
        return [(t[~m], k[~m], s[~m], tp_[~mp], kp[~mp], sp[~mp])]

    def heartbeats(self, horizon: float, final: bool) -> None:
        spec, lay = self.spec, self.lay
        S = max(self.n_kinds, 1)
        while True:
            h = self.next_hb * spec.heartbeat_s
            if h > spec.duration_s or (h >= horizon and not final) or (final and h > horizon):
                return
            self.next_hb += 1
            self.ev_start = self._apply(self.ev_start, h, self.started, self.last_start, self.p2p_started)
            self.ev_end = self._apply(self.ev_end, h, self.completed, self.last_end, self.p2p_completed)
            nodes = lay.node_of_rank
            has_s = np.isfinite(self.last_start)
            has_e = np.isfinite(self.last_end)
            rank_of_slot = np.arange(lay.world_size * S) // S
            ls = np.where(has_s, self.clock(np.where(has_s, self.last_start, 0.0), nodes[rank_of_slot]), -1).tolist()
            le = np.where(has_e, self.clock(np.where(has_e, self.last_end, 0.0), nodes[rank_of_slot]), -1).tolist()
            started, completed = self.started.tolist(), self.completed.tolist()
            p2ps, p2pc = self.p2p_started.tolist(), self.p2p_completed.tolist()
            ts_all = self.clock(h, np.arange(lay.n_nodes)).tolist()
            for node, entries in enumerate(self.node_comms):
                if h >= self.lost_at[node]:
                    continue
                name, ts = lay.node_names[node], ts_all[node]
                for cidx, ranks in entries:
                    comm = lay.comms[cidx]
                    kind = lay.kinds.index(comm.kind)
                    items = []
                    for r in ranks:
                        i = r * S + kind
                        p2p = ""
                        if kind == self.pp_kind:
                            st = int(self.stage[r])
                            p2p = ",".join(
                                payloads.p2p_entry(st + d, name_, p2ps[r * 4 + j], p2pc[r * 4 + j])
                                for j, (_, d, name_) in enumerate(P2P_DIRS) if 0 <= st + d < spec.pp)
                        items.append(payloads.progress_rank(
                            r, started[i], completed[i], ls[i] if ls[i] >= 0 else None,
                            le[i] if le[i] >= 0 else None, p2p))
                    self.push(ts, topics.PROGRESS, self.comm_keys[cidx],
                              payloads.progress(self.job_json, name, ts, comm.hex, items))

    # --- steps and hardware ----------------------------------------------------------------
    def take_steps(self, chunk: Chunk) -> None:
        lay, spec = self.lay, self.spec
        ok = np.isfinite(chunk.t_end) & (chunk.t_end <= spec.duration_s)
        ranks = np.nonzero(ok)[0]
        nodes = lay.node_of_rank[ranks]
        ok_nodes = chunk.t_end[ranks] < self.lost_at[nodes]
        ranks, nodes = ranks[ok_nodes], nodes[ok_nodes]
        t0 = self.clock(chunk.t_start[ranks], nodes).tolist()
        t1 = self.clock(chunk.t_end[ranks], nodes).tolist()
        f = np.round(chunk.forward_s[ranks] * 1e3, 3).tolist()
        b = np.round(chunk.backward_s[ranks] * 1e3, 3).tolist()
        o = np.round(chunk.optimizer_s[ranks] * 1e3, 3).tolist()
        for i, r in enumerate(ranks.tolist()):
            self.push(t1[i], topics.STEPS, spec.job,
                      payloads.steps(self.job_json, r, chunk.iteration, t0[i], t1[i], f[i], b[i], o[i]))

    def hardware(self, horizon: float, final: bool) -> None:
        spec, lay = self.spec, self.lay
        R = lay.world_size
        nodes = lay.node_of_rank
        while True:
            h = self.next_hw * spec.hw_period_s
            if h > spec.duration_s or (h >= horizon and not final) or (final and h > horizon):
                return
            self.next_hw += 1
            sm = SM_MHZ - self.rng.integers(0, 16, R)
            power = np.round(600 + self.rng.normal(0, 12, R), 1)
            util = self.rng.integers(96, 101, R)
            throttle = np.zeros(R, dtype=np.int64)
            if any(a <= h < b for a, b in self.sim.stats.checkpoints):
                util[:] = self.rng.integers(0, 5, R)
                power = np.round(power * 0.35, 1)
            for rank, (at, until, mhz) in self.eff.downclock.items():
                if at <= h < until:
                    sm[rank] = int(mhz) - int(self.rng.integers(0, 16))
                    power[rank] = round(float(power[rank]) * mhz / SM_MHZ, 1)
                    throttle[rank] = THROTTLE_HW_SLOWDOWN
            temp = self.temp + self.rng.integers(-1, 2, R)
            ts = self.clock(h, nodes).tolist()
            alive = (h < self.lost_at[nodes]).tolist()
            sm_l, pw_l, ut_l, th_l, te_l = sm.tolist(), power.tolist(), util.tolist(), throttle.tolist(), temp.tolist()
            names = lay.node_names
            for r in range(R):
                if alive[r]:
                    self.push(ts[r], topics.HW, spec.job,
                              payloads.hw(self.job_json, names[r // spec.gpus_per_node], ts[r], r, self.gpus[r],
                                          sm_l[r], pw_l[r], te_l[r], ut_l[r], th_l[r]))
