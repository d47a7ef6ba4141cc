"""Both stages in one process: the detector core as `commwatch replay`, tests and benches run it.

>>> from commwatch.settings import Settings
>>> det = Detector(Settings.load(env={}))
>>> det.tick(10**18)
[]
>>> det.health("j1")["ranks"]
0
"""

from __future__ import annotations

from collections import Counter, deque

import numpy as np

from commwatch import topics
from commwatch.capture import Message
from commwatch.decode import CallBatch, decode_message
from commwatch.settings import Settings
from commwatch.streams.detect import comm_stage, health, job_stage
from commwatch.streams.detect.comm_stage import CommStage
from commwatch.streams.detect.job_stage import JobStage

PRUNE_NS = 10_000_000_000  # idle jobs are looked for this often (event time)
WINDOW_BACKLOG = 4096  # window reports kept for `window_stats()` between drains

ROW_FIELDS = ("lag_ms", "last_share", "impact", "own")


class Detector:
    """`feed(msg)` decodes (raising `WireError`), runs stage 1 then stage 2; `tick(now_ns)`."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.comm_stage = CommStage(settings)
        self.job_stage = JobStage(settings)
        self.stats: Counter = Counter()
        self.now_ns = 0
        self._windows: deque = deque(maxlen=WINDOW_BACKLOG)
        self._job_seen: dict[str, int] = {}
        self._last_prune = 0
        self._next_tick = 0  # before this (event time) a tick has nothing to do

    def feed(self, msg: Message) -> list[dict]:
        if msg.topic == topics.ALERTS:
            self.stats["ignored_alerts"] += 1
            return []
        return self.feed_decoded(msg, decode_message(msg, self.settings.max_message_bytes))

    def feed_decoded(self, msg: Message, decoded) -> list[dict]:
        """As `feed`, for a message decoded already (`decode_message`'s result)."""
        if msg.ts_ns > self.now_ns:
            self.now_ns = msg.ts_ns
        self.stats["messages"] += 1
        if isinstance(decoded, CallBatch):  # the hot path: most messages are small call batches
            self.stats["records"] += decoded.count
            self._job_seen[decoded.job] = self.now_ns
            reports = self.comm_stage.feed_calls(decoded, self.now_ns)
            return self._reports(reports) if reports else reports
        if isinstance(decoded, dict) and isinstance(decoded.get("job"), str):
            self._job_seen[decoded["job"]] = self.now_ns
        if msg.topic == topics.PROGRESS:
            return self._reports(self.comm_stage.feed(msg, decoded, self.now_ns))
        jobs = len(self.job_stage.jobs)
        out = self.job_stage.feed(msg, decoded, self.now_ns)
        if len(self.job_stage.jobs) != jobs:  # a new job: its first tick is due at once
            self._next_tick = 0
        return out

    def _reports(self, reports: list[dict]) -> list[dict]:
        out: list[dict] = []
        for rep in reports:
            if rep["job"] not in self.job_stage.jobs:
                self._next_tick = 0
            if rep["type"] == "window":
                self._windows.append(rep)
            out.extend(self.job_stage.feed_report(rep, self.now_ns))
        return out

    def tick(self, now_ns: int) -> list[dict]:
        if now_ns > self.now_ns:
            self.now_ns = now_ns
        if self.now_ns < self._next_tick:  # called per message: nothing is due most of the time
            return []
        out = self._reports(self.comm_stage.tick(self.now_ns))
        out.extend(self.job_stage.tick(self.now_ns))
        if self.now_ns - self._last_prune >= PRUNE_NS:
            self._last_prune = self.now_ns
            self.prune_jobs(self.now_ns)
        jobs = min((js.last_tick for js in self.job_stage.jobs.values()), default=self.now_ns)
        self._next_tick = min(self.comm_stage.last_tick + comm_stage.TICK_NS, jobs + job_stage.TICK_NS,
                              self._last_prune + PRUNE_NS)
        return out

    def prune_jobs(self, now_ns: int) -> None:
        """Forget jobs with no message for `state_idle_s` and no open incident (comms are
        pruned by the comm stage itself)."""
        idle = self.settings.state_idle_s * 1e9
        for job in [j for j, t in self._job_seen.items() if now_ns - t >= idle]:
            js = self.job_stage.jobs.get(job)
            if js is None or not js.book.open:
                self.job_stage.jobs.pop(job, None)
                del self._job_seen[job]

    # ------------------------------------------------------------------------------
    def health(self, job: str) -> dict:
        """The job's health snapshot (docs/architecture.md, "Job health snapshots")."""
        snap = self.job_stage.health(job, self.now_ns, self.drops())
        return snap if snap is not None else health.empty(job, self.now_ns)

    def drops(self) -> dict[str, int]:
        """Cumulative counts of what the detector dropped or refused, by reason (for metrics and
        the job health): `records` (call records outside a comm's instance ring, or absurd)."""
        return {"records": sum(st.dropped for st in self.comm_stage.comms.values())}

    def window_stats(self) -> list[dict]:
        """Drain per-rank window rows (for the ClickHouse sink): one dict per rank and window."""
        rows = []
        while self._windows:
            rep = self._windows.popleft()
            cols = [rep[f] for f in ROW_FIELDS]
            for i, rank in enumerate(rep["ranks"]):
                if rank < 0:
                    continue
                rows.append({
                    "job": rep["job"], "comm": rep["comm"], "rank": rank, "window_end_ns": rep["ts_ns"],
                    "instances": rep["instances"], "mean_lag_ms": cols[0][i], "last_share": cols[1][i],
                    "impact": cols[2][i], "wait_share": cols[3][i],
                })
        return rows

    def clock_offsets(self, job: str) -> dict[int, int]:
        """Estimated clock offset of each rank in ns, on one scale for the whole job.

        Each comm estimates offsets relative to its own members; comms are chained through
        shared ranks (largest comm first), so the scale is that of the largest comm.
        """
        comms = sorted(((st.n, st.hex, st) for (j, _), st in self.comm_stage.comms.items()
                        if j == job and st.offset_windows > 0), key=lambda x: (-x[0], x[1]))
        glob: dict[int, float] = {}
        pending = [st for _, _, st in comms]
        while pending:
            rest = []
            for st in pending:
                local = {int(st.rank_of[c]): float(st.offsets[c]) for c in np.flatnonzero(st.rank_of >= 0).tolist()}
                shared = [r for r in local if r in glob]
                if glob and not shared:
                    rest.append(st)
                    continue
                shift = float(np.median([glob[r] - local[r] for r in shared])) if shared else 0.0
                for r, off in local.items():
                    glob.setdefault(r, off + shift)
            if len(rest) == len(pending):  # disconnected from the rest: its own scale
                first = rest[0]
                for c in np.flatnonzero(first.rank_of >= 0).tolist():
                    glob.setdefault(int(first.rank_of[c]), float(first.offsets[c]))
                rest = rest[1:]
            pending = rest
        return {r: int(round(v)) for r, v in sorted(glob.items())}
