"""A job's health snapshot (docs/architecture.md, "Job health snapshots"): bounded whatever
the job's size, built from stage-2 state only (so a worker that runs a job's stage 2 can
publish it without the job's comm state)."""

from __future__ import annotations

MAX_COMMS = 256
MAX_BINS = 1024
MAX_LATE = 16
MAX_EDGES = 256


def _lateness(lag: dict[int, float], world: int) -> dict:
    """Max lag per bin of consecutive ranks, at most `MAX_BINS` bins."""
    if not lag:
        return {"bin": 1, "values_ms": []}
    n = max(world, max(lag) + 1)
    size = max(1, -(-n // MAX_BINS))
    values: list[float | None] = [None] * (-(-n // size))
    for r, v in lag.items():
        i = r // size
        values[i] = v if values[i] is None else max(values[i], v)
    return {"bin": size, "values_ms": [None if v is None else round(v, 3) for v in values]}


def comm_kind(members: list[int], coords: dict[int, dict]) -> str:
    """`tp`, `pp`, `dp`, ... : the one parallel coordinate that varies among a comm's members
    (from the topology's `coords`); `world` when several vary; "" when unknown."""
    known = [coords[r] for r in members if r in coords]
    if len(known) < 2 or len(known) < len(members):
        return ""
    varying = [k for k in known[0] if len({c.get(k) for c in known}) > 1]
    return varying[0] if len(varying) == 1 else "world" if varying else ""


def snapshot(js, now_ns: int, drops: dict[str, int] | None = None) -> dict:
    """The health of one job (`JobState` of `job_stage.py`)."""
    book = js.book
    incidents = [book.event(i, "open", now_ns) for i in book.open.values()]
    kinds = {i["kind"] for i in incidents if i["culprit_ranks"] or i["culprit_nodes"] and i["kind"] != "node_lost"
             or i["kind"] == "comm_hang"}  # a node_lost naming no rank: its data is late, its ranks run
    if js.ended_ns:
        state = "ended"
    elif kinds & {"hang", "comm_hang", "node_lost"}:
        state = "hang"
    elif "job_stalled" in kinds:
        state = "stalled"
    elif "slow_rank" in kinds:
        state = "slow"
    elif any(c["d"] >= 0 for c in js.comms.values()):
        state = "running"
    else:
        state = "starting"
    ranks: set[int] = set(js.node_of)
    exited: set[int] = set()
    for c in js.comms.values():
        ranks.update(c["members"])
        exited.update(c["exited"])
    comms = []
    for comm, c in js.comms.items():
        kind = comm_kind(c["members"], js.coords)
        w = js.waits.get(comm)
        since = min((i["since_ns"] for i in w["instances"]), default=now_ns) if w else now_ns
        inside = len({r for i in w["instances"] for r in i["entered"]}) if w else 0
        comms.append({"comm": comm, "kind": kind, "members": len(c["members"]), "nodes": c["nodes"], "started": c["s"],
                      "completed": c["d"], "inside": inside, "blocked_s": round(max(now_ns - since, 0) / 1e9, 2),
                      "last_progress_ns": int(c.get("last_ns", 0))})
    comms.sort(key=lambda c: (-c["blocked_s"], c["comm"]))
    lag = js.slow.lateness()
    late = sorted(lag.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_LATE]
    chain = None
    an = js.analysis
    hung = any(i["kind"] in ("hang", "comm_hang") for i in incidents)
    named = [sorted(i["culprit_ranks"]) for i in incidents if i["kind"] == "hang"]
    # the chain shown explains the open hang: an analysis naming other roots (a comm's input
    # briefly behind on a loaded worker) does not replace the last chain that matched it
    agrees = an is not None and (not named or sorted(an.roots) in named or js.chain is None)
    if agrees and (an.roots or an.comm_roots) and hung:
        chain = js.chain = {"roots": sorted(an.roots), "edges": an.edges[:MAX_EDGES],
                            "blocked_comms": sorted({x.comm for x in an.blocked})[:MAX_COMMS], "ts_ns": int(now_ns)}
    elif hung:  # this tick's analysis has no root, or others (a comm's input behind): the last one seen, with its time
        chain = js.chain
    else:
        js.chain = None
    world = max(js.world_size, max(ranks) + 1 if ranks else 0)
    median_s = js.steps.median_step_s() or None
    return {
        "v": 1, "type": "health", "job": js.job, "ts_ns": int(now_ns), "state": state,
        "world_size": world, "ranks": len(ranks),
        "nodes": sorted(js.node_seen) or sorted(set(js.node_of.values())),
        "exited_ranks": sorted(exited)[:MAX_COMMS],
        "step": {"iteration": js.steps.last_iteration, "median_s": round(median_s, 4) if median_s else None,
                 "rate_per_s": js.steps.rate_per_s(), "slowdown": js.steps.slowdown(),
                 "paused_s": round(max(now_ns - js.idle_since, 0) / 1e9, 1) if js.idle_since else None},
        "comms": comms[:MAX_COMMS],
        "lateness": _lateness(lag, world),
        "late_ranks": [{"rank": r, "lag_ms": round(v, 3), "slowdown": round(js.slow.ratio.get(r, 1.0) - 1.0, 3)}
                       for r, v in late],
        "incidents": incidents,
        "wait_chain": chain,
        "drops": dict(drops or {}),
    }


def empty(job: str, now_ns: int) -> dict:
    """The snapshot of a job nothing is known about yet."""
    return {"v": 1, "type": "health", "job": job, "ts_ns": int(now_ns), "state": "starting", "world_size": 0,
            "ranks": 0, "nodes": [], "exited_ranks": [],
            "step": {"iteration": None, "median_s": None, "rate_per_s": None, "slowdown": None, "paused_s": None},
            "comms": [], "lateness": {"bin": 1, "values_ms": []}, "late_ranks": [], "incidents": [],
            "wait_chain": None, "drops": {}}
