"""`JobConfig` -> `run_job` -> `JobRun`: a job executed, observed by its probes, published by
its node agents, with the ground truth of what was injected."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from commwatch import wire
from commwatch.capture import CaptureWriter, Message
from commwatch.producers.jobmodel import faults as F
from commwatch.producers.jobmodel.agent import NodeFeed, Sent, node_messages
from commwatch.producers.jobmodel.clock import NodeClock, node_clocks
from commwatch.producers.jobmodel.engine import INF, Engine, RankPlan
from commwatch.producers.jobmodel.layout import Layout
from commwatch.producers.jobmodel.probe import MODES, Ring, calls_of, comm_inits, write_ring
from commwatch.producers.jobmodel.program import COLL, COMPUTE, PHASE_NAMES, ROLE_GROUP, ROLES, Workload, iteration

# 2026-01-01T00:00:00Z
DEFAULT_START_NS = 1_767_225_600_000_000_000
GC_PAUSE_S = (0.05, 1.0)


@dataclass(frozen=True)
class JobConfig:
    """A job: layout, workload, probe mode, realism knobs and faults (times in seconds).

    `hidden` lists call roles the probe cannot see (`program.ROLES`; e.g. ``("grad",)`` for a
    hook that misses DDP's gradient all-reduce). `stage_factors` slows whole pipeline stages
    from the start (unbalanced stages). Node clocks are off by +-`clock_offset_ms` (a range)
    and drift up to +-`clock_drift_ppm`; `job_clock_offset_s` shifts every node of the job;
    `clock_step` (node, at_s, by_s) sets one node's clock anew mid-run (time sync stepping it).
    `late_node` (node, from_s, to_s, by_s): what that node sends in [from_s, to_s) reaches
    the consumer `by_s` late (a congested link to the broker, a stalled agent), its ranks
    unaffected (`merge_received`).
    """

    job: str = "jm"
    tp: int = 1
    pp: int = 1
    dp: int = 2
    gpus_per_node: int = 8
    order: str = "tp-pp-dp"  # rank order, innermost first (`layout.ORDERS`)
    work: Workload = Workload()
    duration_s: float = 60.0
    probe: str = "gpu"
    hidden: tuple[str, ...] = ()
    faults: tuple = ()
    stage_factors: tuple[float, ...] = ()
    jitter: float = 0.03
    gc_pauses_per_s: float = 0.0
    checkpoint_every: int = 0
    checkpoint_s: tuple[float, float] = (20.0, 60.0)
    checkpoint_ranks: tuple[int, ...] = ()  # who writes a checkpoint (default every rank); the others go on to wait
    clock_offset_ms: tuple[float, float] = (20.0, 50.0)
    clock_drift_ppm: float = 20.0
    job_clock_offset_s: float = 0.0
    clock_step: tuple[int, float, float] | None = None  # (node, at_s, by_s): that node's clock is set anew
    late_node: tuple[int, float, float, float] | None = None  # (node, from_s, to_s, by_s): its messages arrive late
    queue_depth: int = 64
    flush_s: float = 0.2
    heartbeat_s: float = 1.0
    poll_s: float = 0.08
    steps: bool = True
    seed: int = 0
    start_ns: int = DEFAULT_START_NS

    def __post_init__(self) -> None:
        if self.probe not in MODES:
            raise ValueError(f"probe {self.probe!r} is not one of {MODES}")
        unknown = set(self.hidden) - set(ROLES)
        if unknown:
            raise ValueError(f"hidden roles {sorted(unknown)} are not among {ROLES}")
        if not self.job or "/" in self.job:
            raise ValueError(f"job {self.job!r} must be non-empty and hold no '/'")
        if self.stage_factors and len(self.stage_factors) != self.pp:
            raise ValueError(f"stage_factors needs {self.pp} values, got {len(self.stage_factors)}")


@dataclass
class JobRun:
    config: JobConfig
    layout: Layout
    engine: Engine
    clocks: list[NodeClock]
    rings: dict[int, Ring]
    sent: list[Sent]
    truth: list[dict]
    step_s: float
    iterations: int
    extra: dict = field(default_factory=dict)

    @property
    def messages(self) -> list[Message]:
        return [s.msg for s in self.sent]

    @property
    def records(self) -> int:
        return sum(len(r.records) for r in self.rings.values()) if self.config.probe != "heartbeats_only" else 0


def run_job(cfg: JobConfig) -> JobRun:
    layout = Layout(cfg.job, cfg.tp, cfg.pp, cfg.dp, cfg.gpus_per_node, cfg.order)
    rng = np.random.default_rng([cfg.seed, 7])
    for f in cfg.faults:
        _check_fault(f, layout)
    plans = _plans(cfg, layout, rng)
    comm_hangs = {layout.by_name[f.group].id: f.at_s for f in cfg.faults if isinstance(f, F.CommHang)}
    links = tuple((f.a, f.b, f.factor, f.at_s) for f in cfg.faults if isinstance(f, F.SlowLink))
    engine = Engine(layout, plans, microbatches=cfg.work.microbatches, seed=cfg.seed, jitter=cfg.jitter,
                    queue_depth=cfg.queue_depth, comm_hangs=comm_hangs, links=links).run()
    clocks = node_clocks(layout.n_nodes, cfg.start_ns, rng, cfg.clock_offset_ms, cfg.clock_drift_ppm,
                         cfg.job_clock_offset_s)
    if cfg.clock_step is not None:
        node, at_s, by_s = cfg.clock_step
        if not 0 <= node < layout.n_nodes:
            raise ValueError(f"clock_step: node {node} is not one of the job's {layout.n_nodes} nodes")
        clocks[node] = replace(clocks[node], step_at_s=float(at_s), step_s=float(by_s))
    exits = _exits(cfg, layout, engine)
    rings, comms = {}, {}
    for rank in range(layout.world):
        clock = clocks[layout.node_of(rank)]
        calls = calls_of(engine, layout, rank, cfg.hidden)
        ring = write_ring(calls, rank, cfg.probe, clock, np.random.default_rng([cfg.seed, rank, 3]),
                          poll_s=cfg.poll_s, completion_stops=_completion_stops(cfg, rank),
                          dies=exits.get(rank, INF))
        seen = sorted({int(c) for c in np.unique(calls.comm)} | set(_visible_comms(cfg, layout, rank)))
        inits = comm_inits(layout, rank, seen, clock, 0.0)
        rings[rank] = Ring(np.concatenate([inits, ring.records]), np.concatenate([np.zeros(len(inits)), ring.written]))
        comms[rank] = seen
    steps = {r: _steps(cfg, engine, r, clocks[layout.node_of(r)], exits.get(r, INF)) for r in range(layout.world)}
    sent: list[Sent] = []
    silent = {f.node: f.at_s for f in cfg.faults if isinstance(f, F.AgentSilent)}
    for node in range(layout.n_nodes):
        local = layout.ranks_of_node(node)
        feed = NodeFeed(node, clocks[node], {r: rings[r] for r in local}, {r: comms[r] for r in local},
                        steps={r: steps[r] for r in local} if cfg.steps else {},
                        exits={r: exits[r] for r in local if r in exits},
                        publish_calls=cfg.probe != "heartbeats_only", silent_from=silent.get(node, INF))
        sent += node_messages(cfg.job, layout, feed, np.random.default_rng([cfg.seed, node, 11]),
                              end_s=cfg.duration_s, flush_s=cfg.flush_s, heartbeat_s=cfg.heartbeat_s)
    sent.sort(key=lambda s: (s.t, s.node))
    onsets = [f.at_s for f in cfg.faults if not isinstance(f, (F.HostPause,))]
    step_s, iterations = _step_time(engine, min(onsets, default=INF), cfg.duration_s)
    run = JobRun(cfg, layout, engine, clocks, rings, sent, [], step_s, iterations)
    run.truth = truth(run)
    return run


# --- plans: what each rank runs and what happens to it ---------------------------------------
def _check_fault(f, layout: Layout) -> None:
    rank = getattr(f, "rank", None)
    if rank is not None and not 0 <= rank < layout.world:
        raise ValueError(f"{f}: rank outside 0..{layout.world - 1}")
    if isinstance(f, F.CommHang) and f.group not in layout.by_name:
        raise ValueError(f"{f}: no group {f.group!r} (groups: {', '.join(g.name for g in layout.groups[:6])}, ...)")
    if isinstance(f, (F.AgentSilent, F.SlowNode)) and not 0 <= f.node < layout.n_nodes:
        raise ValueError(f"{f}: node outside 0..{layout.n_nodes - 1}")
    if isinstance(f, F.SlowLink) and not (0 <= f.a < layout.n_nodes and 0 <= f.b < layout.n_nodes and f.a != f.b
                                          and f.factor > 0):
        raise ValueError(f"{f}: needs two different nodes in 0..{layout.n_nodes - 1} and a factor > 0")


def _plans(cfg: JobConfig, layout: Layout, rng: np.random.Generator) -> list[RankPlan]:
    step = cfg.work.step_s
    n_iter_max = int(cfg.duration_s / (0.3 * step)) + 4
    every = cfg.checkpoint_every
    ckpt_shared = {it: rng.uniform(*cfg.checkpoint_s) for it in range(every, n_iter_max, every)} if every else {}
    plans = []
    for rank in range(layout.world):
        tp, pp, dp = layout.coords(rank)
        plan = RankPlan(iteration(pp, cfg.pp, cfg.tp, cfg.dp, cfg.work, blocking=cfg.probe == "blocking"))
        plan.factor = cfg.stage_factors[pp] if cfg.stage_factors else 1.0
        plan.host_stop = cfg.duration_s + 3 * step  # the run's end: keep going past the capture
        n_gc = rng.poisson(cfg.gc_pauses_per_s * cfg.duration_s)
        plan.pauses = [(float(a), float(d)) for a, d in zip(rng.uniform(0, cfg.duration_s, n_gc),
                                                              rng.uniform(*GC_PAUSE_S, n_gc))]
        plan.checkpoints = {it: d + float(rng.uniform(0.0, 1.0)) for it, d in ckpt_shared.items()
                            if not cfg.checkpoint_ranks or rank in cfg.checkpoint_ranks}
        for f in cfg.faults:
            if isinstance(f, F.SlowNode) and layout.node_of(rank) == f.node:
                plan.slow.append((f.at_s, f.factor))
            if getattr(f, "rank", rank) != rank:
                continue
            if isinstance(f, F.JobExit) and f.clean:
                plan.finish_after = min(plan.finish_after, f.at_s)
                continue
            if isinstance(f, (F.HostHang, F.Crash, F.JobExit)):
                plan.host_stop = min(plan.host_stop, f.at_s)
            if isinstance(f, (F.Crash, F.JobExit)):
                plan.gpu_stop = min(plan.gpu_stop, f.at_s)
            elif isinstance(f, F.StuckCompletion):
                plan.host_stop = min(plan.host_stop, f.at_s + f.host_after_s)
            elif isinstance(f, F.GpuStuck):  # a kernel never ends; the host runs on until it waits for it
                plan.gpu_hang = min(plan.gpu_hang, f.at_s)
            elif isinstance(f, F.SlowGpu):
                plan.slow.append((f.at_s, f.factor))
            elif isinstance(f, F.SlowHost):
                plan.host_slow.append((f.at_s, f.factor))
            elif isinstance(f, F.HostPause):
                plan.pauses.append((f.at_s, f.dur_s))
        plans.append(plan)
    return plans


def _exits(cfg: JobConfig, layout: Layout, engine: Engine) -> dict[int, float]:
    """When each process that exits is gone: at the fault's time, or, for a clean end, once its
    host left the loop and its GPU finished (plus a moment for the interpreter to exit)."""
    out: dict[int, float] = {}
    for f in cfg.faults:
        ranks = [f.rank] if isinstance(f, F.Crash) else range(layout.world) if isinstance(f, F.JobExit) else []
        for r in ranks:
            rk = engine.ranks[r]
            t = max(rk.host_t, rk.gpu_t) + 0.2 if getattr(f, "clean", False) else f.at_s
            out[r] = min(out.get(r, INF), t)
    return out


def _completion_stops(cfg: JobConfig, rank: int) -> float:
    return min((f.at_s for f in cfg.faults if isinstance(f, F.StuckCompletion) and f.rank == rank), default=INF)


def _visible_comms(cfg: JobConfig, layout: Layout, rank: int) -> list[int]:
    """Communicators the probe knows from their creation (it sees at least one role on them)."""
    kinds = {ROLE_GROUP[r] for r in ROLES if r not in cfg.hidden}
    prog_roles = {op.role for op in iteration(layout.stage(rank), cfg.pp, cfg.tp, cfg.dp, cfg.work) if op.role}
    kinds &= {ROLE_GROUP[r] for r in prog_roles if r not in cfg.hidden}
    return [g.id for g in layout.groups_of(rank) if g.kind in kinds]


# --- iteration timings ---------------------------------------------------------------------------
def _steps(cfg: JobConfig, engine: Engine, rank: int, clock: NodeClock, dies: float) -> list[tuple[float, dict]]:
    """(written, cw.steps.v1) per finished iteration: host marks, phases from device times
    (CUDA events around each microbatch's forward / backward and the optimizer)."""
    rk = engine.ranks[rank]
    blocks: dict[tuple[int, int], list[int]] = {}
    for j, op in enumerate(rk.prog):
        if op.phase >= 0 and op.code in (COMPUTE, COLL):
            blocks.setdefault((op.phase, op.mb), []).append(j)
    start, end = np.asarray(rk.start), np.asarray(rk.end)
    out = []
    for it in range(len(rk.marks) - 1):
        base = it * rk.L
        ms = [0.0, 0.0, 0.0]
        last_end = 0.0
        for (phase, _mb), js in blocks.items():
            a, b = start[base + js[0]], end[base + js[-1]]
            ms[phase] += (b - a) * 1e3
            last_end = max(last_end, b)
        written = max(rk.marks[it + 1], last_end) + 1e-3
        if not math.isfinite(written) or written >= dies:
            break
        msg = {"v": 1, "job": cfg.job, "rank": rank, "iteration": it, "t_start_ns": clock.ns(rk.marks[it]),
               "t_end_ns": clock.ns(rk.marks[it + 1]),
               "phases": {name: round(v, 3) for name, v in zip(PHASE_NAMES, ms)}}
        out.append((written, msg))
    return out


def _step_time(engine: Engine, before: float, end: float) -> tuple[float, int]:
    """Median iteration time over ranks, from iterations that ended before `before` (all when
    fewer than two did), and the most iterations any rank finished within the run."""
    pre, every = [], []
    for rk in engine.ranks:
        m = np.asarray(rk.marks)
        m = m[m <= end]
        d = np.diff(m)
        every.append(d)
        pre.append(d[m[1:] <= before])
    pre_all, all_ = np.concatenate(pre), np.concatenate(every)
    chosen = pre_all if len(pre_all) >= 2 * len(engine.ranks) else all_
    return (float(np.median(chosen)) if len(chosen) else math.nan), max(len(d) for d in every)


# --- ground truth -----------------------------------------------------------------------------
def truth(run: JobRun) -> list[dict]:
    cfg, layout, engine = run.config, run.layout, run.engine
    end = cfg.duration_s

    def ns(t: float) -> int:
        return cfg.start_ns + round((t + cfg.job_clock_offset_s) * 1e9)

    def entry(kind: str, fault: str, at: float, onset: float, ranks=(), nodes=None, comm=None, expect=True,
              **extra) -> dict:
        ranks = sorted(ranks)
        nodes = sorted({layout.node_name(r) for r in ranks}) if nodes is None else nodes
        return {"job": cfg.job, "kind": kind, "fault": fault, "ranks": ranks, "nodes": nodes, "comm": comm,
                "at_ns": ns(at), "onset_ns": ns(onset), "expect_incident": bool(expect), "step_s": run.step_s,
                **extra}

    blocked = engine.blocked_arrivals()
    exits = _exits(cfg, layout, engine)
    out = []
    for f in cfg.faults:
        name = type(f).__name__
        if isinstance(f, (F.HostHang, F.Crash, F.StuckCompletion, F.GpuStuck)):
            waits = [t for t in blocked if t < end]
            onset = max(f.at_s, min(waits)) if waits else f.at_s
            if isinstance(f, F.StuckCompletion):  # seen from its first completion never reported, not
                onset = f.at_s  # from the peers' first wait (its host blocks `host_after_s` later)
            extra = {"exited": True} if isinstance(f, F.Crash) else {"stuck_completion": True} \
                if isinstance(f, F.StuckCompletion) else {"gpu_stuck": True} if isinstance(f, F.GpuStuck) else {}
            out.append(entry("hang", name, f.at_s, onset, [f.rank], expect=bool(waits), **extra))
        elif isinstance(f, F.JobExit):  # onset: the last process is gone
            out.append(entry("job_end", name, f.at_s, max(exits.values()), expect=False, clean=f.clean))
        elif isinstance(f, F.CommHang):
            g = layout.by_name[f.group]
            hung = [rv for gid, _n, rv in engine.hung if gid == g.id]
            onset = min((rv.last for rv in hung), default=f.at_s)
            out.append(entry("comm_hang", name, f.at_s, onset, g.members, comm=g.hex, expect=bool(hung) and onset < end,
                             comm_name=g.name))
        elif isinstance(f, (F.SlowGpu, F.SlowHost)):
            expect = f.factor >= F.SLOW_MIN_FACTOR and f.at_s + F.SLOW_MIN_S <= end
            out.append(entry("slow_rank", name, f.at_s, f.at_s, [f.rank], expect=expect, factor=f.factor))
        elif isinstance(f, F.SlowNode):
            expect = f.factor >= F.SLOW_MIN_FACTOR and f.at_s + F.SLOW_MIN_S <= end
            out.append(entry("slow_rank", name, f.at_s, f.at_s, layout.ranks_of_node(f.node),
                             nodes=[layout.node_names[f.node]], expect=expect, factor=f.factor))
        elif isinstance(f, F.SlowLink):  # expected only if some transfer crossed it
            expect = f.factor >= F.SLOW_LINK_MIN_FACTOR and f.at_s + F.SLOW_MIN_S <= end and engine.slowed > 0
            out.append(entry("slow_link", name, f.at_s, f.at_s, nodes=sorted(layout.node_names[n] for n in (f.a, f.b)),
                             expect=expect, factor=f.factor, carried=engine.slowed > 0))
        elif isinstance(f, F.HostPause):
            out.append(entry("pause", name, f.at_s, f.at_s, [f.rank], expect=False, seconds=f.dur_s))
        elif isinstance(f, F.AgentSilent):
            out.append(entry("node_lost", name, f.at_s, f.at_s, layout.ranks_of_node(f.node),
                             nodes=[layout.node_names[f.node]], expect=f.at_s < end))
    if cfg.stage_factors and max(cfg.stage_factors) > min(cfg.stage_factors):
        stage = int(np.argmax(cfg.stage_factors))
        out.append(entry("unbalanced", "stage_factors", 0.0, 0.0, layout.stage_ranks(stage), expect=False,
                         stage=stage, factor=float(max(cfg.stage_factors) / min(cfg.stage_factors))))
    return out


# --- several jobs in one capture -------------------------------------------------------------------
def merge(runs: list[JobRun]) -> list[Message]:
    """The messages of several jobs in the order a consumer receives them (true send time).
    Jobs must share `start_ns` for their true times to be comparable."""
    return [m for m, _ in merge_received(runs)]


def merge_received(runs: list[JobRun]) -> list[tuple[Message, int]]:
    """As `merge`, with when each message was sent in true time (ns): a consumer's wall clock
    when it arrives, whatever the clock of the job that stamped it."""
    base = runs[0].config.start_ns
    sent = [(s.t + _late(r.config, s) + (r.config.start_ns - base) / 1e9, i, s.node, s.msg)
            for i, r in enumerate(runs) for s in r.sent]
    sent.sort(key=lambda x: x[:3])
    return [(m, base + round(t * 1e9)) for t, _i, _n, m in sent]


def _late(cfg: JobConfig, sent) -> float:
    """How late a message reaches the consumer (`JobConfig.late_node`)."""
    late = cfg.late_node
    return late[3] if late is not None and sent.node == late[0] and late[1] <= sent.t < late[2] else 0.0


def write_capture(path, msgs: list[Message]) -> int:
    """Write messages as a `.cwcap` file (wire contract section 4); returns the count."""
    with CaptureWriter(path) as w:
        for m in msgs:
            w.write(m)
        return w.count


def records_of(msgs: list[Message]) -> np.ndarray:
    """Every record of the `cw.calls.v1` messages, in message order (for tests and tools)."""
    from commwatch import topics

    parts = [wire.decode_batch(m.value) for m in msgs if m.topic == topics.CALLS]
    return np.concatenate(parts) if parts else wire.empty(0)
