"""The detector core: both stages and the per-job clocks, one object for live and replay.

`commwatch replay`, the benches and the tests call `feed(msg)` and `tick(ref_ns)`: stage-1
reports go straight to stage 2 in process. The live worker (`streams/app.py`) drives the
very same object through its two halves, because there the reports travel through Kafka
(partitioned by job) between them:

- comm half (`cw.calls.v1`, `cw.progress.v1`, key `{job}/{comm}`): `comm_feed(msgs, decoded,
  ref_ns)` (a poll's messages at once) and `comm_tick(ref_ns)` return reports;
- job half (reports, topology, steps, hw, key `{job}`): `job_feed_report(report, ref_ns)`,
  `job_feed(msg, decoded, ref_ns)` and `job_tick(ref_ns)` return incidents. Each half also
  ticks a job as its data arrives (time passes with the data), and not at all while the job
  is `held` (live: its input partitions are behind).

Time. Each job's now comes from its own messages (`clock.JobClocks`): its newest event
time plus the reference time elapsed since (`ref_ns`: the worker's wall clock live, the
capture's clock in replay). No job's clock moves another job's detection. Nothing here
reads the wall clock.

Nothing raised by one message's state escapes a tick: a failure inside a job's evaluation
is counted (`drops()["tick_errors"]`) and that job's tick is skipped, others go on.

>>> from commwatch.settings import Settings
>>> det = Detector(Settings.load(env={}))
>>> det.tick(10**18)
[]
>>> det.health("j1")["ranks"]
0
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from typing import Callable

import numpy as np

from commwatch import topics, wire
from commwatch.capture import Message
from commwatch.decode import CallBatch, decode_message, message_job
from commwatch.settings import Settings
from commwatch.streams.detect import health
from commwatch.streams.detect.clock import JobClocks
from commwatch.streams.detect.comm_stage import CommStage
from commwatch.streams.detect.job_stage import JobStage
from commwatch.streams.detect.node_lag import SKEW_MIN_NS
from commwatch.wire import WireError

log = logging.getLogger(__name__)

WINDOW_BACKLOG = 4096  # window reports kept for `window_stats()` between drains
COMM_TOPICS = (topics.CALLS, topics.PROGRESS)
ROW_FIELDS = ("lag_ms", "last_share", "inside", "offset_ms")
MAX_DUE_TICKS = 64  # ticks run between two messages at most (a gap of many ticks: the rest at the message)


def _never(_job: str) -> bool:
    return False


class Detector:
    """Both stages over many jobs; see the module docstring."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.comm_stage = CommStage(settings)
        self.job_stage = JobStage(settings)
        self.comm_clocks = JobClocks()
        self.job_clocks = JobClocks()
        self.stats: Counter = Counter()
        self.ref_ns = 0
        self._windows: deque = deque(maxlen=WINDOW_BACKLOG)
        self._errors: Counter = Counter()
        self._idle_until = 0  # `tick` has nothing to do for any job before this reference time
        self._due: dict[str, int | float] = {}  # per job, the same (`_job_due`), as of its last tick
        self._dirty: set[str] = set()  # jobs touched since their last tick: due at once
        # a job whose input is being caught up on (live: its partitions are behind) is *held*:
        # nothing is concluded for it, and its clock does not run on with the reference
        self.held: Callable[[str], bool] = _never

    # --- replay / in-process --------------------------------------------------------
    def feed(self, msg: Message, ref_ns: int | None = None) -> list[dict]:
        """Decode (raising `WireError`), then both stages; returns incident events. `ref_ns`:
        when the message was received (a live worker's wall clock); by default, as in replay,
        its own time (the capture is read in time order)."""
        if msg.topic == topics.ALERTS:
            self.stats["ignored_alerts"] += 1
            return []
        return self.feed_decoded(msg, decode_message(msg, self.settings.max_message_bytes), ref_ns)

    def feed_decoded(self, msg: Message, decoded, ref_ns: int | None = None) -> list[dict]:
        """As `feed`, for a message decoded already (`decode_message`'s result)."""
        ref = msg.ts_ns if ref_ns is None else ref_ns
        if ref > self.ref_ns:
            self.ref_ns = ref
        if type(decoded) is CallBatch:
            return self._local(self.comm_feed_one(msg, decoded, self.ref_ns))
        if msg.topic in COMM_TOPICS:
            return self._local(self.comm_feed([msg], [decoded], self.ref_ns))
        return self.job_feed(msg, decoded, self.ref_ns)

    def feed_stream(self, msgs: list[Message], decoded: list, refs: list[int] | None = None) -> list[dict]:
        """The detector over messages in time order, as replay and the benches run it:
        `decoded` per message its `decode_messages` result (a `WireError` is skipped; the
        caller counts it), `refs` when each was received (default: its own time). Time ticks
        after every message, as it would for a worker fed one message at a time (feeding a
        run of them at once moves when windows close against the job's ticks: slow-rank
        delays changed by up to 0.6 s either way, for a 5 % gain), and before it every tick
        that fell due since, at the time it fell due (`_due_before`). Returns incident events."""
        out: list[dict] = []
        alerts = topics.ALERTS
        for i, msg in enumerate(msgs):
            d = decoded[i]
            ref = msg.ts_ns if refs is None else refs[i]
            if ref > self._idle_until > self.ref_ns:
                out.extend(self._due_before(ref))
            if type(d) is CallBatch:  # most messages: `feed_decoded`'s first case, without its dispatch
                if ref > self.ref_ns:
                    self.ref_ns = ref
                got = self.comm_feed_one(msg, d, self.ref_ns)
                if got:
                    out.extend(self._local(got))
            elif msg.topic == alerts:
                self.stats["ignored_alerts"] += 1
            elif not isinstance(d, WireError):
                out.extend(self.feed_decoded(msg, d, ref))
            if ref >= self._idle_until or self.ref_ns >= self._idle_until:
                out.extend(self.tick(ref))
            elif ref > self.ref_ns:  # `tick`'s early return, without the call
                self.ref_ns = ref
        return out

    def _due_before(self, ref_ns: int) -> list[dict]:
        """Every job's ticks that fell due before `ref_ns`, each at the reference time it fell
        due: a job is ticked on its own clock's schedule, not when another job's message
        happens to come. Replayed alone, generator B's FSDP job whose rank hangs among two
        other jobs opened its P0 a second later than in the combined capture (its heartbeats
        a second apart were its only ticks); of the 44 jobs of its draws 9 and 10, 7 differed
        alone (verdicts moved by 20-500 ms), none now up to a job's last message."""
        out: list[dict] = []
        for _ in range(MAX_DUE_TICKS):
            due = self._idle_until
            if not self.ref_ns < due < ref_ns:
                break
            out.extend(self.tick(due))
        return out

    def tick(self, ref_ns: int) -> list[dict]:
        if ref_ns > self.ref_ns:
            self.ref_ns = ref_ns
        if self.ref_ns < self._idle_until:  # every job's stages would return at once
            return []
        if self.held is not _never:  # live: the worker's timer ticks every job
            out = self._local(self.comm_tick(self.ref_ns))
            out.extend(self.job_tick(self.ref_ns))
            self._idle_until = 0
            return out
        return self._tick_due(self.ref_ns)

    def _tick_due(self, ref_ns: int) -> list[dict]:
        """`comm_tick` then `job_tick` (replay, nothing held), of the jobs whose tick would do
        anything: touched since their last tick, due (`_job_due`), or with an iteration's
        phases waiting to be judged (`JobStage.tick_job` judges them at any tick). The others'
        stages would return at once: ticked at every other job's message, the 40 jobs of a
        capture of the fifteenth generator had their stages called 1.3M times in its first 60k
        messages, 66k of those calls due or touched."""
        due, dirty = self._due, self._dirty
        out: list[dict] = []
        comm_clocks, stage = self.comm_clocks, self.comm_stage
        comm_ticked = [j for j in stage.by_job if j in dirty or due.get(j, 0) <= ref_ns]
        for job in comm_ticked:
            out.extend(self._guard(job, stage.tick_job, job, comm_clocks.now(job, ref_ns)))
        out = self._local(self._kept(out))
        job_clocks, jstage = self.job_clocks, self.job_stage
        ticked = [j for j, js in jstage.jobs.items()
                  if j in dirty or due.get(j, 0) <= ref_ns or (js.steps.fresh and not js.ended_ns)]
        for job in ticked:
            out.extend(self._guard(job, jstage.tick_job, job, job_clocks.now(job, ref_ns), False))
        for job in [j for j in job_clocks.jobs() if j not in jstage.jobs]:
            job_clocks.forget(job)  # ended and forgotten by stage 2: stage 1 lets it go too
            stage.forget_job(job)
            comm_clocks.forget(job)
            dirty.add(job)
        for job in {*comm_ticked, *ticked, *dirty}:
            d = self._job_due(job)
            if d is None:
                due.pop(job, None)
            else:
                due[job] = d
        dirty.clear()
        self._idle_until = min(due.values(), default=float("inf"))
        return out

    def _job_due(self, job: str) -> int | float | None:
        """The reference time from which a tick does anything for `job`: its stage-1 or
        stage-2 tick is due (each at most once per `TICK_NS` of the job's own time); None for
        a job neither stage knows. Only the job's own messages and ticks move it (`_touched`)."""
        due: int | float | None = None
        if job in self.comm_stage.by_job:
            due = self.comm_clocks.due_ref(job, self.comm_stage.next_tick_ns(job))
            if due is None:
                return 0
        js = self.job_stage.jobs.get(job)
        if js is not None:
            r = self.job_clocks.due_ref(job, self.job_stage.due_ns(js))
            if r is not None:
                due = r if due is None or r < due else due
            elif due is None:
                due = float("inf")
        return due

    def finish(self) -> list[dict]:
        """The input ended (`commwatch replay` at a capture's end): time does not run on, but
        every job's stage 2 judges what it received once more, at its now. Its periodic tick
        (`job_stage.TICK_NS`) may not have come since the last reports: generator C's
        watchdog abort drawn with 14000, whose ranks' exits reached stage 2 in the capture's
        last 70 ms, kept its hang open (the job had ended). Returns incident events."""
        out = self.tick(self.ref_ns)
        for job in list(self.job_stage.jobs):
            if not self.held(job):
                now = self.job_clocks.now(job, self.ref_ns)
                out.extend(self._guard(job, self.job_stage.tick_job, job, now, False, True))
        return out

    def _touched(self, job: str) -> None:
        """A message of `job` moved its clocks or its state: its ticks may be due sooner (live,
        every job is ticked at the worker's timer: nothing is kept per job)."""
        if self.held is _never:
            self._dirty.add(job)
        self._idle_until = 0

    def _local(self, reports: list[dict]) -> list[dict]:
        out: list[dict] = []
        for rep in reports:
            out.extend(self.job_feed_report(rep, self.ref_ns))
        return out

    # --- comm half --------------------------------------------------------------------
    def comm_feed(self, msgs: list[Message], decoded: list, ref_ns: int, learn: list[bool] | None = None) -> list[dict]:
        """Stage 1 for calls/progress messages in arrival order (a consumer poll; replay feeds
        one at a time), all valid (`decode_messages` results, no `WireError`); returns reports.
        Per job: its clock observes the messages at once, stage 1 buffers them in order (a
        comm's batches are folded in together at its next flush) and ticks once if due.
        `learn`: per message, whether node clocks are learnt from it (`CommStage.learn_lags`;
        default all)."""
        self.stats["messages"] += len(msgs)
        # node clocks (`node_lag.py`) learnt before feeding: stamps on the job's clock
        at = self.comm_stage.learn_lags(msgs, decoded, ref_ns, learn)
        by_job: dict[str, tuple[list, list, list]] = {}
        records = 0
        for msg, d, t in zip(msgs, decoded, at):
            if type(d) is CallBatch:
                records += d.count
                job = d.job
            else:
                job = d["job"]
            run = by_job.get(job)
            if run is None:
                run = by_job[job] = ([], [], [])
            run[0].append(msg)
            run[1].append(d)
            run[2].append(t)
        self.stats["records"] += records
        out: list[dict] = []
        for job, (ms, ds, at) in by_job.items():
            if job in self.job_stage.jobs and any(self._restarted(job, d) for d in ds):
                self._forget(job)
            own = [a if a < m.ts_ns else m.ts_ns for m, a in zip(ms, at)]
            newest = max(own)
            top = self._clock_top(self.comm_clocks, job, newest, ref_ns)
            if top < newest:
                own = [t if t < top else top for t in own]
            stamps = [a if a < top else top for a in at]
            self.comm_clocks.observe_many(job, own, ref_ns)
            if len(ms) > 1 and max(stamps) >= self.comm_stage.next_tick_ns(job):
                ms, ds, stamps = self._ticked_runs(job, ms, ds, stamps, out)
            got = self._comm_job(job, self._feed_many, (ms, ds, stamps), ref_ns)
            if got:
                out.extend(got)
        return self._kept(out) if out else out

    def _clock_top(self, clocks: JobClocks, job: str, newest: int, ref_ns: int) -> int:
        """How far stamps moved onto the job's clock (`learn_lags`) may go: its newest own
        stamp, `newest` (of the messages in hand) included. A skew dates a node behind as the
        others; it never moves the job's clock, which observes the stamps as they came, or as
        moved back (a node whose clock was set ahead of an established job's, `node_lag.py`).
        Nor does a stamp more than `SKEW_MIN_NS` ahead of an established job's now while its
        clock runs with the reference (not held: a backlog read at speed runs ahead of it):
        it is a node whose clock was set ahead, its lag not learnt yet; it is taken as that."""
        top = clocks.stamp(job)
        if newest <= top:
            return top
        if newest - top > SKEW_MIN_NS and job in clocks and not self.held(job) and self.comm_stage.established(
                job, ref_ns):
            cap = clocks.now(job, ref_ns) + SKEW_MIN_NS
            return newest if newest < cap else cap
        return newest

    def _restarted(self, job: str, decoded) -> bool:
        """A job that ended because every rank's process exited (or left its comms) runs again
        under the same id (an elastic restart, a job id reused): a communicator is initialised
        anew (COMM_INIT), or a heartbeat lists a live rank whose counter went back below what
        it had reached (a rank's placement, `job_feed`, says so too). Its old state is
        forgotten, or the new run would be read against the old one's counters, and ignored
        as ended."""
        js = self.job_stage.jobs.get(job)
        if js is None or js.ended_reason != "job_ended":
            return False
        if type(decoded) is CallBatch:
            return bool((decoded.records["kind"] == wire.KIND_COMM_INIT).any())
        st = self.comm_stage.comms.get((job, int(decoded["comm"], 16))) if "comm" in decoded else None
        if st is None or "ranks" not in decoded:
            return False
        for r in decoded["ranks"]:
            s = st._slot.get(r.get("rank"))
            if not r.get("exited") and s is not None and r.get("started", -1) < st.started[s]:
                return True
        return False

    def _forget(self, job: str) -> None:
        self.job_stage.jobs.pop(job, None)
        self.comm_stage.forget_job(job)
        self.job_clocks.forget(job)
        self.comm_clocks.forget(job)
        self._touched(job)

    def _feed_many(self, ms: list, ds: list, stamps: list[int], now: int) -> list[dict]:
        return self.comm_stage.feed_many(ms, ds, now, stamps)

    def _ticked_runs(self, job: str, ms: list, ds: list, stamps: list[int], out: list) -> tuple[list, list, list]:
        """A poll of a job that spans its ticks (a backlog read at speed): the runs of messages
        before each tick that falls inside it are fed and the job ticked at the time they
        reached, as replay does message by message (fed at once, a comm's pending records
        would span seconds of its calls and overrun its instance ring). Returns the rest."""
        stage = self.comm_stage
        lo, due = 0, stage.next_tick_ns(job)
        for i, ts in enumerate(stamps[:-1]):
            if ts >= due:
                out.extend(self._guard(job, stage.feed_many, ms[lo:i + 1], ds[lo:i + 1], ts, stamps[lo:i + 1]))
                out.extend(self._guard(job, stage.tick_job, job, ts))
                lo, due = i + 1, stage.next_tick_ns(job)
        if lo:
            self._touched(job)
        return ms[lo:], ds[lo:], stamps[lo:]

    def comm_feed_one(self, msg: Message, batch: CallBatch, ref_ns: int) -> list[dict]:
        """`comm_feed` of one call batch (replay's path, message by message: the same steps
        without grouping a poll by job)."""
        stats, job, stage, clocks = self.stats, batch.job, self.comm_stage, self.comm_clocks
        stats["messages"] += 1
        stats["records"] += batch.count
        js = self.job_stage.jobs.get(job)
        if js is not None and js.ended_reason == "job_ended" and self._restarted(job, batch):
            self._forget(job)
        moved = stage.learn_one(msg, batch, ref_ns)
        own = moved if moved < msg.ts_ns else msg.ts_ns
        top = clocks.stamp(job)
        if own > top:
            top = self._clock_top(clocks, job, own, ref_ns)
        now = clocks.observed_now(job, own if own < top else top, ref_ns)
        at = moved if moved < top else top
        try:  # as `_guard`, without its call (replay's path: one per message)
            got = stage.feed_calls(batch, now, at if at < now else now)
        except Exception:  # noqa: BLE001 - see `_guard`
            got = self._failed(job)
        got = self._ticked(job, now, got)
        return self._kept(got) if got else got

    def _comm_job(self, job: str, feed, args: tuple, ref_ns: int) -> list[dict]:
        """One job's messages into stage 1 at its now (its clock has observed them), then its
        tick if due; keeps `_idle_until` right."""
        now = self.comm_clocks.now(job, ref_ns)
        return self._ticked(job, now, self._guard(job, feed, *args, now))

    def _ticked(self, job: str, now: int, got: list[dict]) -> list[dict]:
        """After a job's messages were fed at its `now`: its stage-1 tick if due (time passes
        with the data too: a worker catching up on a backlog ticks as replay does), and
        `_idle_until` kept right. Returns `got` with the tick's reports."""
        clocks, stage = self.comm_clocks, self.comm_stage
        due = stage.next_tick_ns(job)
        if now >= due:
            got.extend(self._guard(job, stage.tick_job, job, now))
            due = stage.next_tick_ns(job)
        if got or job not in stage.by_job:
            self._touched(job)
        else:  # only this job's clock moved: its stage-1 tick may be due sooner
            r = clocks.due_ref(job, due)
            if r < self._idle_until:
                self._idle_until = r
            if self.held is _never and job not in self._dirty and r < self._due.get(job, 0):
                self._due[job] = r
        return got

    def _kept(self, reports: list[dict]) -> list[dict]:
        """Reports pass through; timed windows are also kept for `window_stats()`."""
        for rep in reports:
            if rep["type"] == "window" and "inside" in rep:
                self._windows.append(rep)
        return reports

    def comm_tick(self, ref_ns: int) -> list[dict]:
        """Time passing for stage 1 (each job on its own clock); returns reports."""
        out: list[dict] = []
        for job in list(self.comm_stage.by_job):
            now = self.comm_clocks.now(job, ref_ns, not self.held(job))
            out.extend(self._guard(job, self.comm_stage.tick_job, job, now))
        return self._kept(out)

    # --- job half ---------------------------------------------------------------------
    def job_feed_report(self, rep: dict, ref_ns: int) -> list[dict]:
        job = rep["job"]
        self._touched(job)
        self.job_clocks.observe(job, int(rep["ts_ns"]), ref_ns)
        now = self.job_clocks.now(job, ref_ns)
        out = self._guard(job, self.job_stage.feed_report, rep, now)
        out.extend(self._guard(job, self.job_stage.tick_job, job, now, self.held(job)))
        return out

    def job_feed(self, msg: Message, decoded: dict, ref_ns: int) -> list[dict]:
        """Stage 2 for one topology/steps/hw message."""
        self.stats["messages"] += 1
        job = decoded.get("job") or message_job(msg)
        self._touched(job)
        out: list[dict] = []
        if msg.topic == topics.TOPOLOGY and job in self.job_stage.jobs:
            # a process of a new run announces its placement: the job runs again, after it
            # ended or as a new world (`JobStage.placed_anew`): what the old run left open
            # resolves, and its state is forgotten
            if self.job_stage.jobs[job].ended_reason == "job_ended":
                self._forget(job)
            elif why := self._guard(job, self.job_stage.placed_anew, job, decoded):
                out = self._guard(job, self.job_stage.restarted, job, self.job_clocks.now(job, ref_ns), why)
                self._forget(job)
        stamp = msg.ts_ns + min(0, self.comm_stage.skew_of(job, decoded))
        self.job_clocks.observe(job, min(stamp, self._clock_top(self.job_clocks, job, stamp, ref_ns)), ref_ns)
        now = self.job_clocks.now(job, ref_ns)
        out.extend(self._guard(job, self.job_stage.feed, msg, decoded, now))
        out.extend(self._guard(job, self.job_stage.tick_job, job, now, self.held(job)))
        return out

    def job_tick(self, ref_ns: int) -> list[dict]:
        out: list[dict] = []
        for job in list(self.job_stage.jobs):
            held = self.held(job)
            out.extend(self._guard(job, self.job_stage.tick_job, job, self.job_clocks.now(job, ref_ns, not held),
                                   held))
        for job in [j for j in self.job_clocks.jobs() if j not in self.job_stage.jobs]:
            self.job_clocks.forget(job)  # ended and forgotten by stage 2: stage 1 lets it go too
            self.comm_stage.forget_job(job)
            self.comm_clocks.forget(job)
        return out

    def _guard(self, job: str, fn, *args) -> list[dict]:
        """Run one job's step; an exception is counted, logged (the first few), and the job's
        state is reset (it rebuilds from the next heartbeats) instead of stopping the stream."""
        try:
            return fn(*args)
        except Exception:  # noqa: BLE001 - see the docstring
            return self._failed(job)

    def _failed(self, job: str) -> list[dict]:
        """`_guard`'s handling of an exception (called inside its `except`: logged with its trace)."""
        if self.held is _never:
            self._dirty.add(job)
        self._errors["tick_errors"] += 1
        if self._errors["tick_errors"] <= 10:
            log.exception("detector failed on job %s; its state is reset", job)
        self.job_stage.jobs.pop(job, None)
        self.comm_stage.forget_job(job)
        return []

    def let_go(self, comms=(), jobs=()) -> None:
        """Input partitions gone to another worker (a rebalance): the state of their comms
        (stage 1) and jobs (stage 2) is dropped, and nothing is said of it (no wait goes on
        being reported, no incident resolves for want of data): the worker that reads them now
        rebuilds it and says what is so."""
        self.comm_stage.let_go(comms)
        for job in jobs:
            self.job_stage.jobs.pop(job, None)
            self.job_clocks.forget(job)
        self._idle_until = 0

    def adopt(self, job: str, iid: str, old_id: str, opened_ns: int, severity: str) -> bool:
        """Carry the open incident `iid` of `job` on under `old_id` (`IncidentBook.adopt`)."""
        js = self.job_stage.jobs.get(job)
        return js is not None and js.book.adopt(iid, old_id, opened_ns, severity)

    # ------------------------------------------------------------------------------
    def jobs(self) -> list[str]:
        return sorted(self.job_stage.jobs)

    def now(self, job: str) -> int:
        return self.job_clocks.now(job, self.ref_ns)

    def health(self, job: str, ref_ns: int | None = None) -> dict:
        """The job's health snapshot (docs/architecture.md, "Job health snapshots")."""
        now = self.job_clocks.now(job, self.ref_ns if ref_ns is None else ref_ns)
        snap = self.job_stage.health(job, now, self.drops(job))
        return snap if snap is not None else health.empty(job, now)

    def drops(self, job: str | None = None) -> dict[str, int]:
        """Cumulative counts of what the core dropped or refused, by reason (metrics and the
        job health), for one job or all."""
        out: Counter = Counter()
        for (j, _), st in self.comm_stage.comms.items():
            if job is None or j == job:
                out.update(st.dropped)
        if job is None:
            out.update(self._errors)
            if self.comm_clocks.held_back or self.job_clocks.held_back:
                out["clock_jumps"] = self.comm_clocks.held_back + self.job_clocks.held_back
        return dict(out)

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
                    "inside": cols[2][i], "clock_offset_ms": cols[3][i],
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
                local = {int(r): float(o) for r, o in zip(st.rank_of.tolist(), st.offsets.tolist())}
                shared = [r for r in local if r in glob]
                if glob and not shared:
                    rest.append(st)
                    continue
                shift = float(np.median([glob[r] - local[r] for r in shared])) if shared else 0.0
                for r, off in local.items():
                    glob.setdefault(r, off + shift)
            if len(rest) == len(pending):  # disconnected from the rest: its own scale
                for r, o in zip(rest[0].rank_of.tolist(), rest[0].offsets.tolist()):
                    glob.setdefault(int(r), float(o))
                rest = rest[1:]
            pending = rest
        return {r: int(round(v)) for r, v in sorted(glob.items())}
