"""What the live page knows about the jobs being watched, bounded in memory.

`LiveState` keeps, per job, the latest health snapshot (docs/architecture.md, "Job health
snapshots"), a bounded history of its `lateness` columns (the rank x time heatmap) and the
latest event of its recent incidents (`cw.alerts.v1`). It is fed by one thread (the Kafka
reader) and read by the HTTP handlers; every method takes the lock.

A snapshot read from the topic's backlog at start-up (`live=False`) fills the page but does
not make the job look alive: `age_s` counts from the last snapshot received live.

>>> st = LiveState(monotonic=lambda: 100.0)
>>> st.feed_health({"job": "j1", "ts_ns": 5, "state": "running", "ranks": 2,
...                 "lateness": {"bin": 1, "values_ms": [0.0, 3.5]}})
True
>>> [(j["job"], j["state"], j["stale"]) for j in st.jobs()]
[('j1', 'running', False)]
>>> st.lateness("j1")["columns"]
[{'ts_ns': 5, 'values_ms': [0.0, 3.5]}]
"""

from __future__ import annotations

import math
import threading
import time
from array import array
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

MAX_JOBS = 500
MAX_COLUMNS = 600  # heatmap columns kept per job: 10 minutes of one snapshot a second
MAX_INCIDENTS = 100  # incidents remembered per job (their latest event)
STALE_S = 5.0  # no live snapshot for this long: the job is shown as not updating
FORGET_S = 3600.0  # no live snapshot for this long: the job leaves the page
BRIEF = ("incident", "kind", "severity", "status", "culprit_ranks", "culprit_nodes", "comm", "summary",
         "opened_ns", "ts_ns")


def brief(inc: dict[str, Any]) -> dict[str, Any]:
    """The fields of an incident event the page shows (evidence left out)."""
    return {k: inc.get(k) for k in BRIEF}


@dataclass
class JobView:
    job: str
    snapshot: dict[str, Any] | None = None
    received: float | None = None  # monotonic time of the last live snapshot
    touched: float = 0.0  # monotonic time of the last message of any kind
    bin: int = 1
    columns: deque = field(default_factory=lambda: deque(maxlen=MAX_COLUMNS))  # (ts_ns, array('f'))
    incidents: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> latest event, brief


class LiveState:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic):
        self.monotonic = monotonic
        self.lock = threading.Lock()
        self.views: dict[str, JobView] = {}
        self.refused = 0  # messages that were not a usable snapshot or incident

    # --- feeding ------------------------------------------------------------------------
    def _view(self, job: str, now: float) -> JobView:
        view = self.views.get(job)
        if view is None:
            if len(self.views) >= MAX_JOBS:
                oldest = min(self.views.values(), key=lambda v: v.touched)
                del self.views[oldest.job]
            view = self.views[job] = JobView(job)
        view.touched = now
        return view

    def feed_health(self, snap: Any, live: bool = True) -> bool:
        """Take one health snapshot; False (and counted) if it is not one."""
        if not (isinstance(snap, dict) and isinstance(snap.get("job"), str) and snap["job"]
                and isinstance(snap.get("ts_ns"), int)):
            self.refused += 1
            return False
        now = self.monotonic()
        with self.lock:
            view = self._view(snap["job"], now)
            if view.snapshot is not None and snap["ts_ns"] <= view.snapshot["ts_ns"]:
                return True  # not newer (read again after a reconnect, or a worker that lost the job late)
            view.snapshot = snap
            if live:
                view.received = now
            late = snap.get("lateness") or {}
            values = late.get("values_ms")
            bin_ = late.get("bin")
            if isinstance(values, list) and values and isinstance(bin_, int) and bin_ >= 1:
                if bin_ != view.bin:
                    view.columns.clear()
                    view.bin = bin_
                col = array("f", (math.nan if not isinstance(v, (int, float)) else float(v) for v in values))
                view.columns.append((snap["ts_ns"], col))
        return True

    def feed_incident(self, event: dict[str, Any]) -> None:
        """Take one incident event (contract 2.6, already validated)."""
        now = self.monotonic()
        with self.lock:
            view = self._view(event["job"], now)
            before = view.incidents.get(event["incident"])
            if before is not None and (before.get("ts_ns") or 0) > event["ts_ns"]:
                return
            view.incidents[event["incident"]] = brief(event)
            if len(view.incidents) > MAX_INCIDENTS:
                gone = min(view.incidents.values(),
                           key=lambda i: (i.get("status") != "resolved", i.get("ts_ns") or 0))
                del view.incidents[gone["incident"]]

    def forget_idle(self) -> None:
        """Drop jobs with no live snapshot (or no message at all) for `FORGET_S`."""
        now = self.monotonic()
        with self.lock:
            for job, view in list(self.views.items()):
                if now - max(view.received or 0.0, view.touched) > FORGET_S:
                    del self.views[job]

    # --- reading ------------------------------------------------------------------------
    def _age(self, view: JobView, now: float) -> float | None:
        return None if view.received is None else round(now - view.received, 2)

    def jobs(self) -> list[dict[str, Any]]:
        """One summary per job with a snapshot, most recently updated first."""
        now = self.monotonic()
        out = []
        with self.lock:
            views = sorted(self.views.values(), key=lambda v: -(v.received or 0.0))
            for view in views:
                snap = view.snapshot
                if snap is None:
                    continue
                step = snap.get("step") or {}
                age = self._age(view, now)
                out.append({
                    "job": view.job, "state": snap.get("state"), "ranks": snap.get("ranks"),
                    "world_size": snap.get("world_size"), "nodes": len(snap.get("nodes") or ()),
                    "iteration": step.get("iteration"), "rate_per_s": step.get("rate_per_s"),
                    "step_s": step.get("median_s"),
                    "open_incidents": [brief(i) for i in snap.get("incidents") or ()],
                    "ts_ns": snap["ts_ns"], "age_s": age, "stale": age is None or age > STALE_S,
                })
        return out

    def job(self, job: str) -> dict[str, Any] | None:
        """The latest snapshot and the incidents seen on the stream; None for an unknown job."""
        now = self.monotonic()
        with self.lock:
            view = self.views.get(job)
            if view is None:
                return None
            age = self._age(view, now)
            return {"job": job, "health": view.snapshot, "age_s": age, "stale": age is None or age > STALE_S,
                    "incidents": list(view.incidents.values())}

    def lateness(self, job: str, after_ns: int = 0) -> dict[str, Any] | None:
        """Heatmap columns newer than `after_ns` (`values_ms` with null where unknown)."""
        with self.lock:
            view = self.views.get(job)
            if view is None:
                return None
            cols = [(ts, col) for ts, col in view.columns if ts > after_ns]
            bin_ = view.bin
        return {"job": job, "bin": bin_, "max_columns": MAX_COLUMNS,
                "columns": [{"ts_ns": ts, "values_ms": [None if math.isnan(v) else round(v, 3) for v in col]}
                            for ts, col in cols]}


def merge_incidents(*sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per incident, the latest event (`ts_ns`) winning; open ones first, then the
    most recently opened."""
    latest: dict[str, dict[str, Any]] = {}
    for source in sources:
        for inc in source:
            iid = inc.get("incident")
            if not iid:
                continue
            before = latest.get(iid)
            if before is None or (inc.get("ts_ns") or 0) >= (before.get("ts_ns") or 0):
                latest[iid] = inc
    return sorted(latest.values(), key=lambda i: (i.get("status") == "resolved", -(i.get("opened_ns") or 0)))
