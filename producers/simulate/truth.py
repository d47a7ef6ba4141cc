"""Ground truth of injected faults, in the vocabulary of incidents (contract 2.6).

One dict per fault: ``kind`` (``hang``, ``comm_hang``, ``slow_rank``, ``slow_link``,
``node_lost``, ``blip``; a GPU downclock is ``slow_rank`` with ``"hw": true`` and the SM clock
drop under ``evidence``), the culprit ``ranks`` and ``nodes`` (a comm hang lists the
communicator's members and nodes; a slow link its two nodes and no ranks), ``comm`` (16 hex
for a comm hang, else null), ``at_ns``/``until_ns`` in true time (null: until the end),
``factor``, and ``expect_incident``: whether a detector should open an incident. Transient
blips never should; slow ranks when compute is >= 1.2x slower for >= 10 s; slow links at
>= 2x that some traffic crosses (``carried``); nothing that starts after the run ends.
"""

from __future__ import annotations

from commwatch.producers.simulate.layout import Layout
from commwatch.producers.simulate.schedule import Fault
from commwatch.producers.simulate.spec import JobSpec

SLOW_RANK_MIN_FACTOR = 1.2
SLOW_LINK_MIN_FACTOR = 2.0
SLOW_MIN_S = 10.0
NORMAL_SM_MHZ = 1980


def fault_truth(f: Fault, spec: JobSpec, layout: Layout) -> dict:
    def ns(t: float | None) -> int | None:
        return None if t is None else spec.start_ns + round(t * 1e9)

    def node_of(rank: int) -> str:
        return layout.node_names[rank // spec.gpus_per_node]

    starts_in_run = f.at_s < spec.duration_s
    out = {"kind": f.kind, "ranks": [], "nodes": [], "comm": None, "at_ns": ns(f.at_s), "until_ns": ns(f.until_s),
           "factor": f.factor, "expect_incident": starts_in_run, "fault": f.kind}
    if f.kind in ("hang", "slow", "downclock", "blip"):
        out["ranks"], out["nodes"] = [f.rank], [node_of(f.rank)]
    if f.kind in ("slow", "downclock"):
        out["kind"] = "slow_rank"
        long_enough = f.for_s is None or f.for_s >= SLOW_MIN_S
        out["expect_incident"] = starts_in_run and f.factor >= SLOW_RANK_MIN_FACTOR and long_enough
    if f.kind == "downclock":
        out["hw"] = True
        out["evidence"] = {"sm_clock_mhz": f.mhz, "normal_sm_clock_mhz": NORMAL_SM_MHZ}
    elif f.kind == "comm_hang":
        comm = layout.comm_by_name(f.comm or "")
        out["ranks"] = comm.members.tolist()
        out["nodes"] = sorted({node_of(int(r)) for r in comm.members})
        out["comm"] = comm.hex
        out["comm_name"] = comm.name
    elif f.kind == "slow_link":
        out["nodes"] = list(f.nodes)
        long_enough = f.for_s is None or f.for_s >= SLOW_MIN_S
        out["carried"] = carried(layout, *(layout.node_index(n) for n in f.nodes))
        out["expect_incident"] = (starts_in_run and f.factor >= SLOW_LINK_MIN_FACTOR and long_enough
                                  and out["carried"])
    elif f.kind == "node_lost":
        node = layout.node_index(f.nodes[0])
        out["nodes"] = [f.nodes[0]]
        out["ranks"] = layout.ranks_of_node(node)
    elif f.kind == "blip":
        out["until_ns"] = ns(f.at_s + f.ms / 1e3)
        out["expect_incident"] = False
    return out


def carried(layout: Layout, a: int, b: int) -> bool:
    """Whether any of the job's traffic crosses the link between nodes `a` and `b`: a collective
    with members on both, or a send between neighbouring pipeline stages on them. A link
    nothing crosses can be as slow as it likes: no probe can see it, and no incident is due."""
    nodes = layout.node_of_rank
    for kind in layout.kinds:
        g = nodes[layout.groups(kind)]
        if kind == "pp":
            hit = ((g[:, :-1] == a) & (g[:, 1:] == b)) | ((g[:, :-1] == b) & (g[:, 1:] == a))
        else:
            hit = (g == a).any(axis=1) & (g == b).any(axis=1)
        if hit.any():
            return True
    return False
