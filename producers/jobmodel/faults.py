"""Faults and situations a job can meet, and the ground truth each one implies.

Times are seconds from the job's start. A truth entry speaks the vocabulary of incidents
(wire contract 2.6): ``kind``, the culprit ``ranks`` / ``nodes`` / ``comm`` an incident
must name exactly, ``at_ns`` (when the fault was injected) and ``onset_ns`` (when its effect
began: for a hang, the first wait that never ends), both on the job's clock (true time plus
the job's clock offset), and ``expect_incident``. Situations that must raise nothing
(pauses, checkpoints, unbalanced stages, a job that ends) have ``expect_incident`` false.
"""

from __future__ import annotations

from dataclasses import dataclass

SLOW_MIN_FACTOR = 1.2  # below this a slowdown is noise, not a slow rank
SLOW_MIN_S = 10.0  # a slowdown must last this long to be expected
SLOW_LINK_MIN_FACTOR = 2.0  # a link this much slower is expected to be found


@dataclass(frozen=True)
class HostHang:
    """The rank's host thread stops enqueueing at `at_s` (a Python thread holds the GIL forever,
    a stuck data loader). Its GPU runs what was already enqueued; its peers wait for it."""

    rank: int
    at_s: float


@dataclass(frozen=True)
class Crash:
    """The rank's process exits at `at_s`: nothing more runs or completes on its GPU. Its agent
    publishes what the ring held, then marks the rank `exited` for 3 heartbeats."""

    rank: int
    at_s: float


@dataclass(frozen=True)
class JobExit:
    """Every process of the job exits: killed at `at_s` (a launcher's timeout kills a hung job),
    or, when `clean`, each rank finishes the iteration it is in at `at_s` and exits once its GPU
    is done (the training loop ended). Open incidents must resolve; nothing may repeat after."""

    at_s: float
    clean: bool = False


@dataclass(frozen=True)
class StuckCompletion:
    """From `at_s` the rank's completion path is stuck (a GPU or driver fault: CUDA events are
    never observed complete): its completed counter stops while its GPU still runs what it was
    given, so its peers complete collectives it reports as not done. Its host stops enqueueing
    `host_after_s` later (the next CUDA call blocks)."""

    rank: int
    at_s: float
    host_after_s: float = 1.5


@dataclass(frozen=True)
class GpuStuck:
    """The first compute kernel the rank's GPU starts from `at_s` never finishes (a spinning or
    faulted kernel): nothing after it on its stream starts. Its host goes on enqueueing until it waits
    for the GPU (the iteration's sync, or a full launch queue); its probe keeps writing. Its
    peers wait inside the next collective on their GPUs; its own entry of that collective is
    only an enqueue."""

    rank: int
    at_s: float


@dataclass(frozen=True)
class CommHang:
    """A transport hang: from `at_s`, instances of the communicator `group` (a layout group
    name such as ``dp.p0.t0``) complete on no member although every member entered."""

    group: str
    at_s: float


@dataclass(frozen=True)
class SlowGpu:
    """The rank's compute runs `factor` times slower from `at_s` (downclock, thermal throttling)."""

    rank: int
    factor: float
    at_s: float = 0.0


@dataclass(frozen=True)
class SlowHost:
    """From `at_s` the rank's host thread is launch-bound: it spends `factor` seconds of CPU per
    second of GPU compute it enqueues (CPU contention, a noisy neighbour, Python overhead), so
    its GPU idles between kernels and the rank runs about `factor` times slower; its peers wait
    for it. Its GPU computes as fast as theirs."""

    rank: int
    factor: float
    at_s: float = 0.0


@dataclass(frozen=True)
class SlowNode:
    """Every GPU of node `node` (its index in the job) computes `factor` times slower from `at_s`
    (a node throttled as a whole: cooling, power capping, a bad host). Its ranks are the
    culprits, named together; where they form whole tensor-parallel groups, no peer of theirs
    on another node shows it."""

    node: int
    factor: float
    at_s: float = 0.0


@dataclass(frozen=True)
class SlowLink:
    """Transfers between nodes `a` and `b` (indices in the job) take `factor` times longer from
    `at_s` (a degraded NIC, cable or switch port): every collective with members on both and
    every send between them. Expected as an incident only if some transfer crossed it."""

    a: int
    b: int
    factor: float
    at_s: float = 0.0


@dataclass(frozen=True)
class HostPause:
    """One host pause of the rank (a GC pause, a data-loader hiccup, a stall): not a fault."""

    rank: int
    at_s: float
    dur_s: float


@dataclass(frozen=True)
class AgentSilent:
    """The node agent of node `node` (its index in the job) sends nothing from `at_s`; the
    training itself goes on."""

    node: int
    at_s: float


Fault = (HostHang | Crash | JobExit | StuckCompletion | GpuStuck | CommHang | SlowGpu | SlowHost | SlowNode | SlowLink | HostPause
         | AgentSilent)
