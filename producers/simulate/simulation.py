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

Where the work is: `engine` (timing model), `batches` and `records` (call records as
columns of 64-bit words, one stable sort per flush, batches packed for one base64 pass),
`progress` (heartbeats from cached %-templates), `outbox` (the time-ordered queue; for a
capture it holds finished line pieces, not Messages), `emit` (gathered writes).
"""

from __future__ import annotations

import collections
import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from commwatch import topics, wire
from commwatch.capture import Message
from commwatch.producers.simulate import payloads
from commwatch.producers.simulate.batches import Batcher
from commwatch.producers.simulate.clock import NodeClocks
from commwatch.producers.simulate.engine import INF, Calls, Chunk, Engine, resolve
from commwatch.producers.simulate.layout import Layout
from commwatch.producers.simulate.outbox import Outbox
from commwatch.producers.simulate.progress import Progress
from commwatch.producers.simulate.records import pack, pair, word0, words
from commwatch.producers.simulate.schedule import Fault
from commwatch.producers.simulate.spec import JobSpec
from commwatch.producers.simulate.truth import fault_truth

SM_MHZ = 1980
THROTTLE_HW_SLOWDOWN = 0x8


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
        """Every message of the run, in non-decreasing ``ts_ns``."""
        self.stats = SimStats()
        return itertools.chain.from_iterable(_Run(self, lines=False).run())

    def capture_chunks(self) -> Iterator[list]:
        """The run as capture-file lines (contract section 4): lists of bytes-like pieces to
        be written in order (``os.writev``). These are the lines
        `commwatch.capture.read_messages` reads back into exactly `messages()`."""
        self.stats = SimStats()
        return (chunk for chunk in _Run(self, lines=True).run() if chunk)


def simulate(spec: JobSpec, faults: list[Fault] | tuple[Fault, ...] = ()) -> Simulation:
    return Simulation(spec, faults)


class _Run:
    def __init__(self, sim: Simulation, lines: bool):
        self.sim = sim
        self.spec = spec = sim.spec
        self.lay = lay = sim.layout
        self.eff = sim.effects
        self.engine = Engine(spec, lay, sim.effects)
        rng = np.random.default_rng([spec.seed, 2])
        off = rng.uniform(-spec.clock_skew_ms, spec.clock_skew_ms, lay.n_nodes) * 1e-3
        drift = 1.0 + rng.uniform(-spec.clock_drift_ppm, spec.clock_drift_ppm, lay.n_nodes) * 1e-6
        self.clock = NodeClocks(off, drift, spec.start_ns)
        self.rng = rng
        self.job_json = payloads.jstr(spec.job)
        self.comm_keys = [topics.comm_key(spec.job, c.id) for c in lay.comms]
        self.lost_at = np.full(lay.n_nodes, INF)
        for node, at in self.eff.node_lost_at.items():
            self.lost_at[node] = at
        self.gpus = [gpu_uuid(spec.job, r) for r in range(lay.world_size)]
        self.outbox = Outbox(lines)
        sim.stats.by_topic = self.outbox.by_topic
        self.batcher = Batcher(spec, lay, self.clock, self.lost_at, self.comm_keys, self.outbox)
        self.node_comms = lay.node_comms()
        self.progress = Progress(spec, lay, self.clock, self.lost_at, self.comm_keys, self.node_comms, self.outbox)
        self.init_records = 0
        self.next_hb = 0
        self.next_hw = 0
        self.temp = rng.integers(55, 70, lay.world_size)

    def release(self, before_ns: int | None) -> list:
        out = self.outbox.release(before_ns)
        st = self.sim.stats
        st.messages = self.outbox.released
        st.records = self.batcher.records + self.init_records
        return out

    # --- the run ---------------------------------------------------------------------------
    def run(self) -> Iterator[list]:
        """Lists of released Messages or capture-line pieces, in order, one per iteration."""
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
            self.batcher.flush(horizon)
            self.heartbeats(horizon, final)
            self.hardware(horizon, final)
            if final:
                break
            yield self.release(int(self.clock(horizon, np.arange(self.lay.n_nodes)).min()))
        yield self.release(None)

    def opening(self) -> None:
        """Per node: a topology message per rank, then a COMM_INIT batch per communicator."""
        lay, spec = self.lay, self.spec
        t0 = self.clock(0.0, np.arange(lay.n_nodes)).tolist()
        node_comms = self.node_comms
        coords = {k: lay.coords[k].tolist() for k in ("tp", "pp", "dp", "cp", "ep")}
        topo = [payloads.topology(self.job_json, t0[r // spec.gpus_per_node], r, lay.world_size,
                                  lay.node_names[r // spec.gpus_per_node], r % spec.gpus_per_node, self.gpus[r],
                                  {k: v[r] for k, v in coords.items()})
                for r in range(lay.world_size)]
        b_node, b_comm, b_count, ranks = [], [], [], []
        for node, entries in enumerate(node_comms):
            for cidx, members in entries:
                b_node.append(node)
                b_comm.append(cidx)
                b_count.append(len(members))
                ranks += members
        counts = np.array(b_count, dtype=np.int64)
        cidx = np.repeat(np.array(b_comm, dtype=np.int64), counts)
        node = np.repeat(np.array(b_node, dtype=np.int64), counts)
        rank = np.array(ranks, dtype=np.int64)
        kind_of_comm = np.array([lay.kinds.index(c.kind) for c in lay.comms], dtype=np.int64)
        t = np.array(t0, dtype=np.int64)[node]
        rows = words(len(rank))
        rows[0] = word0(wire.KIND_COMM_INIT, 0, 0, rank)
        rows[1] = lay.comm_ids[cidx]
        rows[2] = 0
        rows[3] = t
        rows[4] = t
        rows[5] = 0
        slot = kind_of_comm[cidx] * lay.world_size + rank
        rows[6] = pair(self.batcher.crank[slot], -1)
        rows[7] = pair(self.batcher.nranks_word[slot], lay.comm_nodes[cidx])
        self.init_records = len(rank)
        ts_b = [t0[n] for n in b_node]
        _, inits, n_inits = self.outbox.batch_items([self.comm_keys[c] for c in b_comm], ts_b, pack([rows], counts),
                                                    np.array(b_node, dtype=np.int64))
        init_of = dict(zip(dict.fromkeys(b_node), zip(inits, n_inits)))  # one item per node, nodes in order
        topo_items = self.outbox.json_items(topics.TOPOLOGY, spec.job, [t0[r // spec.gpus_per_node]
                                                                        for r in range(lay.world_size)], topo)
        items, ts, counts_ = [], [], []
        for n in range(lay.n_nodes):
            rs = lay.ranks_of_node(n)
            items += topo_items[rs[0]:rs[-1] + 1]
            ts += [t0[n]] * len(rs)
            counts_ += [1] * len(rs)
            if n in init_of:
                item, k = init_of[n]
                items.append(item)
                ts.append(t0[n])
                counts_.append(k)
        self.outbox.add(ts, items, counts_)
        self.outbox.by_topic[topics.TOPOLOGY] += len(topo)
        self.outbox.by_topic[topics.CALLS] += len(b_comm)

    def take_calls(self, c: Calls) -> None:
        issued = c.t0 < self.spec.duration_s
        if not issued.all():
            c = Calls(*(getattr(c, f)[issued] for f in Calls.__dataclass_fields__))
        self.sim.stats.calls += len(c)
        self.progress.track(c)
        self.batcher.add(c)

    def heartbeats(self, horizon: float, final: bool) -> None:
        spec = self.spec
        while True:
            h = self.next_hb * spec.heartbeat_s
            if h > spec.duration_s or (h >= horizon and not final) or (final and h > horizon):
                return
            self.next_hb += 1
            self.progress.beat(h)

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
        job, it, steps = self.job_json, chunk.iteration, payloads.steps
        self.outbox.json(topics.STEPS, spec.job, t1, [steps(job, r, it, *v) for r, *v in
                                                      zip(ranks.tolist(), t0, t1, f, b, o)])

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
            alive = np.nonzero(h < self.lost_at[nodes])[0]
            ts = self.clock(h, nodes[alive]).tolist()
            job, names, gpus, hw = self.job_json, lay.node_names, self.gpus, payloads.hw
            values = [hw(job, names[n], t, r, gpus[r], *v) for r, n, t, *v in
                      zip(alive.tolist(), nodes[alive].tolist(), ts, sm[alive].tolist(), power[alive].tolist(),
                          temp[alive].tolist(), util[alive].tolist(), throttle[alive].tolist())]
            self.outbox.json(topics.HW, spec.job, ts, values)
