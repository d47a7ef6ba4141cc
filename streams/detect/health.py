"""A job's health snapshot (docs/architecture.md, "Job health snapshots"): bounded whatever
the job's size, built from stage-2 state only (so a worker that runs a job's stage 2 can
publish it without the job's comm state)."""

from __future__ import annotations

import statistics

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


def snapshot(js, now_ns: int, drops: dict[str, int] | None = None) -> dict:
    """The health of one job (`JobState` of `job_stage.py`)."""
    book = js.book
    incidents = [book.event(i, "open", now_ns) for i in book.open.values()]
    kinds = {i["kind"] for i in incidents}
    if kinds & {"hang", "comm_hang", "node_lost"}:
        state = "hang"
    elif "job_stalled" in kinds:
        state = "stalled"
    elif "slow_rank" in kinds:
        state = "slow"
    elif any(c.get("last_progress_ns", 0) > 0 for c in js.comms.values()):
        state = "running"
    else:
        state = "starting"
    ranks = set(js.node_of)
    for c in js.comms.values():
        ranks.update(c.get("members") or ())
    comms = []
    for comm, c in js.comms.items():
        w = js.waits.get(comm)
        blocked = (now_ns - w["since_ns"]) / 1e9 if w else 0.0
        comms.append({"comm": comm, "members": len(c.get("members") or ()), "nodes": c.get("nodes") or [],
                      "started": int(w["seq"]) if w else -1, "completed": int(w["seq"]) - 1 if w else -1,
                      "inside": len(w["inside"]) if w else 0, "blocked_s": round(max(blocked, 0.0), 2),
                      "last_progress_ns": int(c.get("last_progress_ns", 0))})
    comms.sort(key=lambda c: (-c["blocked_s"], c["comm"]))
    lag: dict[int, float] = {}
    slowdown: dict[int, float] = {}
    for cs in js.slow.comms.values():
        for i, r in enumerate(cs.ranks.tolist()):
            if r < 0 or i >= len(cs.lag_ms):
                continue
            lag[r] = max(lag.get(r, 0.0), float(cs.lag_ms[i]))
            if i < len(cs.slowdown):
                slowdown[r] = max(slowdown.get(r, 0.0), float(cs.slowdown[i]))
    late = sorted(lag.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_LATE]
    chain = None
    hang = next((i for i in incidents if i["kind"] == "hang"), None)
    if hang is not None:
        edges = []
        roots = set(hang["culprit_ranks"])
        for comm, w in sorted(js.waits.items()):
            for r, _, _ in w["inside"]:
                for m in w["missing"]:
                    edges.append([int(r), int(m), comm])
        chain = {"roots": sorted(roots), "edges": edges[:MAX_EDGES], "blocked_comms": sorted(js.waits)}
    steps = list(js.steps)
    median_s = statistics.median(steps) / 1e9 if steps else None
    return {
        "v": 1, "type": "health", "job": js.job, "ts_ns": int(now_ns), "state": state,
        "world_size": max(ranks) + 1 if ranks else 0, "ranks": len(ranks),
        "nodes": sorted(js.node_seen) or sorted(set(js.node_of.values())),
        "exited_ranks": [],
        "step": {"iteration": js.last_iteration, "median_s": median_s,
                 "rate_per_s": round(1 / median_s, 3) if median_s else None, "slowdown": None},
        "comms": comms[:MAX_COMMS],
        "lateness": _lateness(lag, max(ranks) + 1 if ranks else 0),
        "late_ranks": [{"rank": r, "lag_ms": round(v, 3), "slowdown": round(slowdown.get(r, 0.0), 3)}
                       for r, v in late],
        "incidents": incidents,
        "wait_chain": chain,
        "drops": dict(drops or {}),
    }


def empty(job: str, now_ns: int) -> dict:
    """The snapshot of a job nothing is known about yet."""
    return {"v": 1, "type": "health", "job": job, "ts_ns": int(now_ns), "state": "starting", "world_size": 0,
            "ranks": 0, "nodes": [], "exited_ranks": [],
            "step": {"iteration": None, "median_s": None, "rate_per_s": None, "slowdown": None},
            "comms": [], "lateness": {"bin": 1, "values_ms": []}, "late_ranks": [], "incidents": [],
            "wait_chain": None, "drops": {}}
