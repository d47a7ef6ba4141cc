"""The scenarios of `commwatch bench detect`: what is injected, into which job, and what a
detector should say about it.

Three families. `sim`: the project's simulator (`commwatch.producers.simulate`), as before.
`jobmodel`: the event-level job model (`commwatch.producers.jobmodel`), built apart from
the detectors: host threads that run ahead of in-order GPU streams, rendezvous, and the
four probe modes (`gpu`, `enqueue`, `blocking`, `heartbeats_only`), with hangs, crashes,
stuck completion paths, transport hangs, slow GPUs, jobs that end, several jobs with
different clocks, and healthy controls. `recorded`: probe output recorded on a real GPU
under NCCL (`nccl-patch/test/recorded/`, two-rank jobs: a hang, a host-side straggler and
healthy runs and DDP, each with the plugin and with the hook), published through the node agent
model (`jobmodel.recorded`); found only in a source checkout. `gpuhang-*`: a GPU stuck in a
compute kernel while its host enqueues on, attributed through the device entries today's
probes write (derived for these recordings, `jobmodel.recorded`).

Each scenario builds to a `Built`: messages in event-time order (`ts_ns`, stable, as
`commwatch replay` reads a capture; the three-jobs scenario also in the order a live worker
receives them, where one job's clock running 60 s fast matters), the ground truth (one dict per injected fault or situation, see `jobmodel.faults`), and
per job its step time, its control label (`healthy`, `unbalanced`, `skewed`, or `""` for
a job with a fault) and, for a job that ends, when.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from commwatch import messages, topics, wire
from commwatch.capture import Message

S = 1_000_000_000


@dataclass
class JobInfo:
    step_s: float
    control: str  # "healthy", "unbalanced", "skewed", "routine" (a checkpoint that recurs), or "" (a fault)
    start_ns: int  # on the job's clock
    end_ns: int  # the capture's end, on the job's clock
    ended_ns: int | None = None  # when every process of the job exited
    mode: str = "sim"  # probe mode (jobmodel) or "sim"


@dataclass
class Built:
    messages: list[Message]
    truth: list[dict]
    jobs: dict[str, JobInfo]
    tail_s: float = 0.0  # keep ticking this long after the last message (jobs that end)
    received_ns: list[int] | None = None  # per message, when a live worker receives it (arrival order)


@dataclass
class Case:
    name: str
    family: str  # "sim" or "jobmodel"
    build: Callable[[], Built]
    quick: bool = False
    ranks: int = 0
    tags: tuple[str, ...] = field(default_factory=tuple)


def records_in(msgs: list[Message]) -> int:
    return sum(wire.decode_header(m.value) for m in msgs if m.topic == topics.CALLS)


def fault_steps(built: Built) -> None:
    """Per slow-rank truth, the job's step time as it ran under the fault (`run_step_s`: the
    median duration of the slow ranks' iterations that began at or after its onset, from
    their `cw.steps.v1`): a delay in iterations the job actually ran, which a slowdown
    lengthens. Left out where the capture has no iteration timings."""
    slow = [t for t in built.truth if t["kind"] == "slow_rank" and t.get("expect_incident")]
    if not slow:
        return
    steps: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for m in built.messages:
        if m.topic == topics.STEPS:
            d = messages.decode(topics.STEPS, m.value)
            steps.setdefault((d["job"], d["rank"]), []).append((d["t_start_ns"], d["t_end_ns"]))
    for t in slow:
        durs = sorted(b - a for r in t["ranks"] for a, b in steps.get((t["job"], r), ()) if a >= t["onset_ns"])
        if durs:
            t["run_step_s"] = durs[len(durs) // 2] / S


# --- the project's simulator ---------------------------------------------------------------------
# (tp, pp, dp): 8 .. 4096 ranks, TP 1-8, PP 1-16, DP 1-64
SIM_SMALL = [(1, 1, 8), (2, 2, 2), (8, 1, 2), (2, 2, 4), (1, 4, 8), (4, 2, 4), (8, 2, 4), (2, 4, 8), (1, 1, 64),
             (4, 16, 2)]
SIM_LARGE = [(8, 4, 8), (8, 8, 16), (8, 8, 64)]
SIM_FAULTS = ["hang", "comm_hang", "slow", "slow50", "downclock", "slow_link", "node_lost", "hang_pp"]
SIM_HEALTHY = ["jitter", "gc_blips", "checkpoint", "skew"]
SIM_QUICK = {"hang-2x2x2", "slow-2x2x2", "comm_hang-2x2x4", "slow50-2x2x4", "jitter-2x2x4", "node_lost-2x2x4"}


def sim_cases() -> list[Case]:
    out: list[Case] = []
    i = 0
    for layout in SIM_SMALL:
        world = layout[0] * layout[1] * layout[2]
        for kind in SIM_FAULTS + SIM_HEALTHY:
            if kind in ("slow_link", "node_lost") and world < 16:
                continue  # needs two nodes
            if kind == "hang_pp" and layout[1] == 1:
                continue
            name = f"{kind}-{layout[0]}x{layout[1]}x{layout[2]}"
            out.append(_sim_case(name, layout, kind, seed=i, step_s=2.0 if i % 5 == 4 else 1.0))
            i += 1
    for layout, kinds in zip(SIM_LARGE, (["hang", "slow", "jitter"], ["hang", "slow"], ["hang"])):
        for kind in kinds:
            out.append(_sim_case(f"{kind}-{layout[0]}x{layout[1]}x{layout[2]}", layout, kind, seed=100 + i,
                                 duration_s=22.0))
            i += 1
    return out


def _sim_case(name: str, layout: tuple[int, int, int], kind: str, seed: int, step_s: float = 1.0,
              duration_s: float = 35.0) -> Case:
    def build() -> Built:
        return build_sim(layout, kind, seed, step_s, duration_s)

    return Case("sim/" + name, "sim", build, quick=name in SIM_QUICK, ranks=layout[0] * layout[1] * layout[2],
                tags=("healthy",) if kind in SIM_HEALTHY else ())


def build_sim(layout: tuple[int, int, int], kind: str, seed: int, step_s: float, duration_s: float) -> Built:
    from commwatch.producers.simulate import JobSpec, parse_fault, simulate

    tp, pp, dp = layout
    rng = np.random.default_rng(seed)
    world = tp * pp * dp
    big = world >= 1024
    kw = dict(job=f"b{seed}", tp=tp, pp=pp, dp=dp, duration_s=duration_s, step_s=step_s, seed=seed,
              clock_skew_ms=20.0)
    if big:  # fewer, larger call batches and calls per step keep the default bench in minutes
        kw.update(tp_calls=2, microbatches=2, batch_s=0.5)
    elif world >= 256:
        kw.update(tp_calls=4)
    if kind == "gc_blips":
        kw["gc_blip_rate"] = 0.02
    if kind == "checkpoint":
        kw.update(checkpoint_every_s=15.0, checkpoint_s=12.0)
    if kind == "skew":
        kw.update(clock_skew_ms=50.0, clock_drift_ppm=50.0)
    if kind == "jitter":
        kw["jitter"] = 0.08
    spec = JobSpec(**kw)
    at = 12.0 if big else 15.0
    rank = int(rng.integers(0, world))
    nodes = max(1, world // spec.gpus_per_node)
    faults = []
    if kind == "hang":
        faults.append(f"hang:rank={rank},at={at}s")
    elif kind == "hang_pp":  # the last pipeline stage of replica 0
        faults.append(f"hang:rank={(pp - 1) * tp},at={at}s")
    elif kind == "comm_hang":
        faults.append(f"comm_hang:comm={'dp0' if dp > 1 else 'tp0'},at={at}s")
    elif kind == "slow":
        faults.append(f"slow:rank={rank},factor={1.2 + 0.1 * (seed % 3):.1f},at={at}s")
    elif kind == "slow50":
        faults.append(f"slow:rank={rank},factor=1.6,at={at}s")
    elif kind == "downclock":
        faults.append(f"downclock:rank={rank},at={at}s,mhz=1300")
    elif kind == "slow_link":  # a link between neighbouring nodes that some traffic crosses
        from commwatch.producers.simulate.layout import Layout
        from commwatch.producers.simulate.truth import carried

        lay = Layout(spec.job, tp, pp, dp, gpus_per_node=spec.gpus_per_node)
        a = int(rng.integers(0, nodes - 1))
        a = next((x % (nodes - 1) for x in range(a, a + nodes) if carried(lay, x % (nodes - 1), x % (nodes - 1) + 1)), a)
        faults.append(f"slow_link:nodes=node-{a:02d}+node-{a + 1:02d},factor=3,at={at}s")
    elif kind == "node_lost":
        faults.append(f"node_lost:node=node-{int(rng.integers(0, nodes)):02d},at={at}s")
    elif kind == "gc_blips":
        faults.append(f"blip:rank={rank},at={at}s,ms=600")
    sim = simulate(spec, [parse_fault(f) for f in faults])
    truth = []
    for t in sim.truth():
        t = dict(t)
        t["job"] = spec.job
        t["onset_ns"] = t["at_ns"]
        t["step_s"] = spec.step_s
        truth.append(t)
    control = ("skewed" if kind == "skew" else "healthy") if kind in SIM_HEALTHY else ""
    end = spec.start_ns + round(duration_s * S)
    return Built(list(sim.messages()), truth, {spec.job: JobInfo(spec.step_s, control, spec.start_ns, end)})


# --- the job model --------------------------------------------------------------------------------
L8 = (2, 2, 2)  # TP x PP x DP
L8P = (1, 4, 2)  # a TP=1 pipeline
L8D = (1, 1, 8)  # data parallel only
L16 = (2, 2, 4)
L16P = (1, 8, 2)
L16D = (1, 1, 16)
L32 = (4, 2, 4)
L64 = (2, 4, 8)
L32T8 = (8, 2, 2)  # a tensor-parallel group per node
L16N = (4, 4, 1)  # no data parallelism: the same stage of the other pipelines is a rank's TP peers


def jobmodel_cases() -> list[Case]:
    from commwatch.producers import jobmodel as jm

    out: list[Case] = []

    def add(name: str, layout: tuple[int, int, int], *, quick: bool = False, control: str = "", tail_s: float = 0.0,
            faults: Callable[[int, int], tuple] = lambda world, seed: (), arrival: bool = False, **kw) -> None:
        seed = len(out) + 1
        tp, pp, dp = layout

        def build() -> Built:
            cfg = jm.JobConfig(job=f"m{seed}", tp=tp, pp=pp, dp=dp, seed=seed, faults=faults(tp * pp * dp, seed), **kw)
            run = jm.run_job(cfg)
            built = _built([run], [control], tail_s)
            if arrival:  # as a live worker receives them (a capture sorted by ts_ns would not be)
                built.messages, built.received_ns = map(list, zip(*jm.merge_received([run])))
                # delays on the job's clock: its now is its newest stamp, from the node whose
                # clock runs furthest ahead (seconds, where clocks are not kept in sync)
                ahead = round((max(c.offset_s for c in run.clocks) - cfg.job_clock_offset_s) * S)
                for t in built.truth:
                    t["onset_ns"] += ahead
            return built

        out.append(Case(f"jm/{name}-{tp}x{pp}x{dp}", "jobmodel", build, quick, tp * pp * dp,
                        (control,) if control else ()))

    def pick(world: int, salt: int) -> int:
        return (7 * salt + 3) % world

    # hangs: a host thread stops enqueueing, in every probe mode
    for mode, layouts in (("gpu", (L8, L8P, L16, L64, L16D)), ("enqueue", (L8, L8P, L16, L32)),
                          ("blocking", (L8D, L8)), ("heartbeats_only", (L16, L8P))):
        for n, lay in enumerate(layouts):
            add(f"hang-{mode}", lay, quick=n == 0, probe=mode, duration_s=45.0,
                faults=lambda w, s: (jm.HostHang(rank=pick(w, s), at_s=18.0),))
    # a hang at the first and at the last pipeline stage
    add("hang-first-stage-enqueue", L8P, probe="enqueue", duration_s=45.0, faults=lambda w, s: (jm.HostHang(0, 18.0),))
    add("hang-last-stage-gpu", L16P, probe="gpu", duration_s=45.0, faults=lambda w, s: (jm.HostHang(w - 1, 18.0),))
    # a process exits; its agent says so
    for mode, lay in (("gpu", L16), ("enqueue", L8P), ("blocking", L8D), ("heartbeats_only", L16)):
        add(f"crash-{mode}", lay, quick=mode == "enqueue", probe=mode, duration_s=45.0,
            faults=lambda w, s: (jm.Crash(rank=pick(w, s), at_s=18.0),))
    # a stuck completion path: completions stop, then the host
    for mode, lay in (("gpu", L16), ("enqueue", L8), ("enqueue", L8P)):
        add(f"stuck-completion-{mode}", lay, quick=lay == L8, probe=mode, duration_s=45.0,
            faults=lambda w, s: (jm.StuckCompletion(rank=pick(w, s), at_s=18.0),))
    # a hang, then every process of the job exits: the incident resolves, nothing repeats
    for mode, lay in (("gpu", L8), ("enqueue", L16), ("blocking", L8D)):
        add(f"hang-then-exit-{mode}", lay, quick=mode == "gpu", probe=mode, duration_s=60.0, tail_s=30.0,
            faults=lambda w, s: (jm.HostHang(rank=pick(w, s), at_s=15.0), jm.JobExit(at_s=40.0)))
    # a transport hang: every member enters, none completes (calls queued behind it are symptoms)
    for mode, lay, group in (("gpu", L16, "dp.p1.t0"), ("enqueue", L16, "dp.p0.t1"), ("gpu", L8, "tp.d1.p0"),
                             ("enqueue", L32, "tp.d2.p1"), ("blocking", L8D, "dp.p0.t0")):
        add(f"comm-hang-{group.split('.')[0]}-{mode}", lay, quick=mode == "enqueue" and lay == L16, probe=mode,
            duration_s=45.0, faults=lambda w, s, g=group: (jm.CommHang(group=g, at_s=18.0),))
    # slow GPUs from a point on
    for n, (factor, lay) in enumerate(((1.2, L16), (1.3, L8P), (1.6, L16), (2.4, L8), (1.2, L32), (1.3, L64),
                                       (1.6, L16D), (2.4, L16P), (1.3, L8D), (1.6, L8P))):
        add(f"slow{factor}", lay, quick=n in (1, 2), duration_s=50.0,
            faults=lambda w, s, f=factor: (jm.SlowGpu(rank=pick(w, s), factor=f, at_s=15.0),))
    # slow from the start
    for factor, lay in ((1.3, L16), (2.4, L8P), (1.6, L8D)):
        add(f"slow{factor}-from-start", lay, duration_s=50.0,
            faults=lambda w, s, f=factor: (jm.SlowGpu(rank=pick(w, s), factor=f),))
    # long steps, one rank 2.4x slow from the start: the others wait ~25 s per iteration, yet progress
    for lay in (L16, L8D):
        add("long-steps-slow2.4", lay, quick=lay == L16, duration_s=360.0, work=jm.Workload(step_s=18.0),
            faults=lambda w, s: (jm.SlowGpu(rank=pick(w, 5), factor=2.4),))
    # two slow ranks at once; a slow first or last pipeline stage
    add("two-slow", L16, quick=True, duration_s=50.0, faults=lambda w, s: (jm.SlowGpu(1, 1.5, 15.0), jm.SlowGpu(w - 3, 1.5, 15.0)))
    add("two-slow", L32, duration_s=50.0, faults=lambda w, s: (jm.SlowGpu(2, 1.3, 15.0), jm.SlowGpu(w - 1, 1.6, 15.0)))
    add("slow-first-stage", L8P, duration_s=50.0, faults=lambda w, s: (jm.SlowGpu(0, 1.3, 15.0),))
    add("slow-last-stage", L8P, duration_s=50.0, faults=lambda w, s: (jm.SlowGpu(3, 1.3, 15.0),))
    # compute stragglers that only the step phases show
    add("straggler-enqueue", L16, quick=True, probe="enqueue", duration_s=50.0,
        faults=lambda w, s: (jm.SlowGpu(pick(w, 2), 1.5, 15.0),))
    add("straggler-hb-only", L16, probe="heartbeats_only", duration_s=50.0,
        faults=lambda w, s: (jm.SlowGpu(pick(w, 4), 1.6, 15.0),))
    add("straggler-ddp-hidden-grads", (1, 1, 4), quick=True, probe="blocking", duration_s=50.0, hidden=("grad",),
        work=jm.Workload(loss_allreduce=True), faults=lambda w, s: (jm.SlowGpu(2, 1.5, 15.0),))
    # an agent goes silent; the training goes on
    for lay in (L16, L64):
        add("node-lost", lay, quick=lay == L16, duration_s=40.0, faults=lambda w, s: (jm.AgentSilent(node=1, at_s=15.0),))
    # controls: unbalanced stages (a P3 advisory for the stage at most), healthy jobs, skewed clocks
    for factor, lay in ((1.25, L8P), (1.4, L16), (1.3, L64), (1.35, L16P)):
        add(f"unbalanced{factor}", lay, quick=lay == L16, control="unbalanced", duration_s=50.0,
            stage_factors=tuple([1.0] * (lay[1] - 1) + [factor]))
    add("healthy-jitter", L16, quick=True, control="healthy", duration_s=45.0, jitter=0.08)
    add("healthy-jitter", L64, control="healthy", duration_s=40.0, jitter=0.08)
    add("healthy-jitter-enqueue", L16, control="healthy", probe="enqueue", duration_s=45.0, jitter=0.08)
    add("healthy-gloo", L8D, control="healthy", probe="blocking", duration_s=45.0, jitter=0.05)
    add("healthy-hb-only", L16, control="healthy", probe="heartbeats_only", duration_s=45.0)
    add("healthy-gc-pauses", L16, quick=True, control="healthy", duration_s=60.0, gc_pauses_per_s=0.02)
    add("healthy-gc-pauses-enqueue", L32, control="healthy", probe="enqueue", duration_s=60.0, gc_pauses_per_s=0.02)
    add("healthy-checkpoints", L16, quick=True, control="healthy", duration_s=150.0, checkpoint_every=20,
        checkpoint_s=(20.0, 60.0))
    add("healthy-checkpoints-enqueue", L8P, control="healthy", probe="enqueue", duration_s=150.0, checkpoint_every=25,
        checkpoint_s=(30.0, 50.0))
    add("healthy-stall3s", L16, control="healthy", duration_s=45.0, faults=lambda w, s: (jm.HostPause(5, 20.0, 3.0),))
    add("healthy-long-steps", L16, control="healthy", duration_s=300.0, work=jm.Workload(step_s=18.0))
    add("healthy-job-finishes", L8, control="healthy", duration_s=40.0, tail_s=30.0,
        faults=lambda w, s: (jm.JobExit(25.0, clean=True),))
    add("skewed-clocks", L16, quick=True, control="skewed", duration_s=45.0, clock_offset_ms=(50.0, 100.0),
        clock_drift_ppm=50.0)
    add("skewed-clocks", L64, control="skewed", duration_s=40.0, clock_offset_ms=(50.0, 100.0), clock_drift_ppm=50.0)
    add("skewed-job-clock+60s", L16, control="skewed", duration_s=45.0, job_clock_offset_s=60.0)
    # several jobs watched at once: one runs 60 s fast, one stalls 3 s, one hangs
    for order in ("arrival", "replay"):
        out.append(Case(f"jm/three-jobs-{order}-order", "jobmodel", lambda o=order, s=len(out) + 1: build_three_jobs(s, o),
                        quick=order == "arrival", ranks=48, tags=("multi",)))
    # a GPU stuck in a compute kernel while its host enqueues on: its peers wait inside the next
    # collective on their GPUs (device entries), its own entry is an enqueue (added last: the
    # seeds of the scenarios above stay as they were)
    for lay in (L16, L8, L8P, L64):
        add("gpu-stuck", lay, quick=lay == L16, probe="gpu", duration_s=45.0,
            faults=lambda w, s: (jm.GpuStuck(rank=pick(w, s), at_s=18.0),))
    # a slow link crossed only by the sends between two pipeline stages (a stage per node),
    # GPU-timed: the channel names its pair; no collective spans both nodes
    for lay, gpn in ((L32, 4), (L16, 2)):
        add("slow-link-p2p", lay, quick=lay == L16, probe="gpu", duration_s=40.0, gpus_per_node=gpn,
            faults=lambda w, s: (jm.SlowLink(2, 3, 3.0, at_s=15.0),))
    # node clocks seconds apart (no time sync), received as a live worker receives them: a node
    # whose clock runs behind is not silent, nor are the others when one runs ahead
    skewed = dict(arrival=True, clock_offset_ms=(2000.0, 6000.0))
    add("skewed-node-clocks", L16, quick=True, control="skewed", duration_s=45.0, **skewed)
    add("skewed-node-clocks", L64, control="skewed", duration_s=40.0, probe="enqueue", **skewed)
    add("hang-skewed-node-clocks", L16, duration_s=45.0, faults=lambda w, s: (jm.HostHang(pick(w, s), 18.0),), **skewed)
    add("node-lost-skewed-node-clocks", L16, duration_s=40.0, faults=lambda w, s: (jm.AgentSilent(node=1, at_s=15.0),),
        **skewed)
    # a node's clock set anew mid-run (time sync stepping it back, or on), received as a live
    # worker receives them: the node goes on reporting, and nobody else seems silent
    for by_s, lay, probe in ((-5.0, L16, "gpu"), (5.0, L16, "gpu"), (5.0, L64, "enqueue")):
        add(f"clock-step{by_s:+.0f}s-{probe}", lay, control="skewed", probe=probe, duration_s=45.0, arrival=True,
            clock_step=(1, 20.0, by_s))
    add("hang-after-clock-step+5s", L16, duration_s=45.0, arrival=True, clock_step=(1, 15.0, 5.0),
        faults=lambda w, s: (jm.HostHang(pick(w, s), 25.0),))
    add("slow1.6-skewed-node-clocks", L16, duration_s=50.0, faults=lambda w, s: (jm.SlowGpu(pick(w, s), 1.6, 15.0),),
        **skewed)
    # a node slow as a whole (its GPUs throttled together), named in one incident: where its
    # ranks are whole tensor-parallel groups, their TP peers are as slow as they are
    for factor, lay, probe, gpn in ((1.3, L32T8, "gpu", 8), (1.3, L32T8, "enqueue", 8), (1.4, L16, "gpu", 4),
                                    (1.3, (8, 1, 4), "gpu", 8), (1.3, (1, 1, 32), "gpu", 8)):
        add(f"slow-node{factor}-{probe}", lay, probe=probe, gpus_per_node=gpn, duration_s=50.0,
            faults=lambda w, s, f=factor: (jm.SlowNode(1, f, 15.0),))
    add("slow-node1.6-from-start", L32T8, duration_s=50.0, faults=lambda w, s: (jm.SlowNode(1, 1.6),))
    add("two-slow-same-tp", L16, duration_s=50.0,
        faults=lambda w, s: (jm.SlowGpu(4, 1.5, 15.0), jm.SlowGpu(5, 1.5, 15.0)))
    # a slow rank in a job that checkpoints often (from before the first): after each
    # checkpoint its TP peer's fine comm holds the checkpoint's gap a while, and in coarser
    # comms the peer waits on it
    add("slow1.4-checkpoints", L16, duration_s=120.0, checkpoint_every=15, checkpoint_s=(10.0, 20.0),
        faults=lambda w, s: (jm.SlowGpu(9, 1.4, 5.0),))
    add("slow1.5-jitter0.15", L16, duration_s=50.0, jitter=0.15, faults=lambda w, s: (jm.SlowGpu(6, 1.5, 15.0),))
    add("unbalanced1.3", L32T8, control="unbalanced", duration_s=50.0, stage_factors=(1.0, 1.3))
    add("healthy-jitter", L32T8, control="healthy", duration_s=45.0, jitter=0.08)
    add("healthy-gc-pauses", (4, 2, 4), control="healthy", duration_s=60.0, gc_pauses_per_s=0.03)
    # a node's data late (its link to the broker, its agent stalled), its ranks running
    add("late-node-data-4s", L16, control="healthy", duration_s=45.0, arrival=True, late_node=(1, 20.0, 24.0, 4.0))
    add("late-node-data-2.5s", L64, control="healthy", duration_s=40.0, arrival=True, late_node=(0, 20.0, 25.0, 2.5))
    # a hang soon after a checkpoint (every rank idle 20-25 s at iteration 12, nobody inside a
    # call): the intervals that span it are not the comms' cadence, the threshold stays the job's
    for lay, probe in ((L16, "gpu"), (L8P, "enqueue")):
        add(f"hang-after-checkpoint-{probe}", lay, probe=probe, duration_s=60.0, checkpoint_every=12,
            checkpoint_s=(20.0, 25.0), faults=lambda w, s: (jm.HostHang(pick(w, s), 42.0),))
    # pipelines without data parallelism (added last: a case's seed is its place in this list)
    add("slow1.3-last-stage-no-dp", L16N, duration_s=50.0, faults=lambda w, s: (jm.SlowGpu(15, 1.3, 15.0),))
    add("slow1.3-first-stage-no-dp", L16N, probe="enqueue", duration_s=50.0,
        faults=lambda w, s: (jm.SlowGpu(2, 1.3, 15.0),))
    add("healthy-no-dp", L16N, control="healthy", duration_s=45.0)
    # launch-bound hosts (CPU contention): the GPU idles between kernels, the peers wait
    for mode, lay, factor in (("enqueue", L16, 1.5), ("enqueue", L32, 1.3), ("gpu", L16, 1.5), ("blocking", L8D, 1.4)):
        add(f"slow-host{factor}-{mode}", lay, probe=mode, duration_s=50.0,
            faults=lambda w, s, f=factor: (jm.SlowHost(pick(w, s), f, 15.0),))
    # Megatron-core's own rank order (the stage outermost): a node holds several data-parallel
    # replicas of one stage, so a slow node is part of each of its data-parallel comms
    outer = dict(order="tp-dp-pp", duration_s=50.0)
    add("slow-node1.4-stage-outer", (2, 2, 8), faults=lambda w, s: (jm.SlowNode(1, 1.4, 15.0),), **outer)
    add("slow-node1.3-stage-outer-enqueue", (2, 2, 8), probe="enqueue",
        faults=lambda w, s: (jm.SlowNode(2, 1.3, 15.0),), **outer)
    add("slow1.5-stage-outer", (2, 2, 8), faults=lambda w, s: (jm.SlowGpu(pick(w, s), 1.5, 15.0),), **outer)
    add("healthy-stage-outer", (2, 2, 8), control="healthy", **outer)
    add("unbalanced1.3-stage-outer", (2, 4, 4), control="unbalanced", stage_factors=(1.0, 1.3, 1.0, 1.0), **outer)
    # ... and without the hook's iteration timings (the NCCL plugin alone): the collectives only
    add("slow-node1.4-stage-outer-no-steps", (2, 2, 8), steps=False, faults=lambda w, s: (jm.SlowNode(1, 1.4, 15.0),),
        **outer)
    # a routine that recurs: rank 0 writes a checkpoint alone for 16-21 s every 12 iterations
    # while every other rank waits for it inside a collective (the first looks like a hang;
    # the next ones are the same), and every rank writes one for 70-75 s every 10 (a P2
    # stall the first time)
    add("routine-checkpoints-rank0", L16, control="routine", duration_s=100.0, checkpoint_every=12,
        checkpoint_s=(16.0, 20.0), checkpoint_ranks=(0,))
    add("routine-checkpoints-all", L16, control="routine", duration_s=260.0, checkpoint_every=10,
        checkpoint_s=(70.0, 75.0))
    return out


def build_three_jobs(seed: int, order: str) -> Built:
    """One capture of three 16-rank jobs: A's clocks run 60 s fast (healthy), B is healthy with a
    3 s stall of one rank, C hangs. `order`: "arrival" (as a live worker receives them) or
    "replay" (sorted by `ts_ns`, as `commwatch replay` reads a capture)."""
    from commwatch.producers import jobmodel as jm

    base = dict(tp=2, pp=2, dp=4, duration_s=50.0)
    runs = [jm.run_job(jm.JobConfig(job=f"m{seed}a", seed=seed, job_clock_offset_s=60.0, **base)),
            jm.run_job(jm.JobConfig(job=f"m{seed}b", seed=seed + 1, faults=(jm.HostPause(6, 20.0, 3.0),), **base)),
            jm.run_job(jm.JobConfig(job=f"m{seed}c", seed=seed + 2, faults=(jm.HostHang(9, 22.0),), **base))]
    built = _built(runs, ["skewed", "healthy", ""], 0.0)
    if order == "arrival":  # received as a live worker receives them: its wall clock is the reference
        pairs = jm.merge_received(runs)
        built.messages = [m for m, _ in pairs]
        built.received_ns = [t for _, t in pairs]
    return built


def _built(runs, controls: list[str], tail_s: float) -> Built:
    from commwatch.producers import jobmodel as jm

    jobs = {}
    truth = []
    for run, control in zip(runs, controls):
        cfg = run.config
        start = cfg.start_ns + round(cfg.job_clock_offset_s * S)
        ended = [t["onset_ns"] for t in run.truth if t["kind"] == "job_end"]
        jobs[cfg.job] = JobInfo(run.step_s, control, start, start + round(cfg.duration_s * S),
                                min(ended) if ended else None, cfg.probe)
        truth += [dict(t, mode=cfg.probe) for t in run.truth]
    msgs = jm.merge(runs)
    msgs.sort(key=lambda m: m.ts_ns)  # event time; stable
    return Built(msgs, truth, jobs, tail_s)


# --- recorded on a GPU -----------------------------------------------------------------------------
RECORDED_DIR = Path(__file__).resolve().parents[1] / "nccl-patch" / "test" / "recorded"
RECORDED = ["hang-nccl", "hang-hook", "gpuhang-nccl", "gpuhang-hook", "slow-nccl", "slow-hook", "sem-ws2", "sem-hook",
            "ddp-nccl", "ddp-hook"]


def recorded_cases() -> list[Case]:
    if not RECORDED_DIR.is_dir():
        return []  # an installed package: the recordings live in the source tree
    return [Case(f"rec/{name}", "recorded", lambda n=name: build_recorded(n), quick=True, ranks=2,
                 tags=("healthy",) if name.startswith(("sem-", "ddp-")) else ()) for name in RECORDED]


def build_recorded(name: str) -> Built:
    """The recording's messages; its truth from the job's own log (which rank stopped or
    slowed, when) and its step time from rank 0's completions before the fault."""
    from commwatch.producers.jobmodel import recorded

    rec = recorded.load(RECORDED_DIR, name)
    msgs = sorted(recorded.publish(rec), key=lambda m: m.ts_ns)
    fault = rec.fault()
    calls = rec.calls[0]
    done = calls[(calls["kind"] == wire.KIND_CALL) & ((calls["flags"] & wire.FLAG_COMPLETED) != 0)]
    ends = np.sort(done["t_end_ns"])
    if fault is not None:
        ends = ends[ends < fault["start_ns"]]
    per_step = int(rec.logs[0].get("calls_per_step") or 1)
    step_s = float(np.median(np.diff(ends[::per_step]))) / S if len(ends) > 2 * per_step else 1.0
    truth = []
    if fault is not None:
        f = {"job": name, "ranks": [fault["rank"]], "nodes": [f"{name}-node-{fault['rank']:02d}"], "comm": None,
             "at_ns": fault["start_ns"], "onset_ns": fault["start_ns"], "expect_incident": True, "step_s": step_s,
             "mode": "recorded"}
        if "hang-" in name:  # the host stopped (hang-), or the GPU spun in a kernel (gpuhang-)
            truth.append(dict(f, kind="hang", fault="HostPause"))
        else:
            slow_s = 0.04  # record.sh: --slow-s 0.04
            truth.append(dict(f, kind="slow_rank", fault="HostDelay", factor=round(1 + slow_s / step_s, 2)))
    jobs = {name: JobInfo(step_s, "healthy" if fault is None else "", rec.start_ns, rec.end_ns, mode="recorded")}
    return Built(msgs, truth, jobs)


def all_cases(quick: bool) -> list[Case]:
    cases = sim_cases() + jobmodel_cases() + recorded_cases()
    return [c for c in cases if c.quick] if quick else cases
