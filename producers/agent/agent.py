"""The node agent: local rings -> Kafka (calls, progress, topology, steps, hardware).

One loop, every `agent_flush_s` (0.1 s): read every ring, publish the new records as one
`cw.calls.v1` batch per (job, communicator) and each new iteration timing (`cw.steps.v1`,
one message per rank and iteration whenever it is sent: sending at once costs no message
and lets a straggler be named an iteration sooner). Every `heartbeat_period_s`: a progress
heartbeat per communicator from what the records showed (contract 2.2), writer liveness
and changed placements. Every `hw_period_s`: a hardware sample, from readings
that NVML's own thread took (the loop never waits on NVML). Publishing goes through a
bounded buffer (`Outbox`), so a Kafka outage costs old data, never a stall.

A rank whose writer is gone (its ring lock is free, or it removed its files) is read to
the end, reported with `"exited": true` in the heartbeats of every communicator it was in
for `EXIT_BEATS` heartbeat periods, then no longer reported; its files are removed.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

import numpy as np

from commwatch import messages, topics, wire
from commwatch.kafka import Sender, ensure_topics
from commwatch.producers.agent import metrics
from commwatch.producers.agent.hardware import HardwareSampler
from commwatch.producers.agent.outbox import Outbox
from commwatch.producers.agent.progress import Progress
from commwatch.producers.agent.rings import RankSource, RingDir
from commwatch.settings import Settings
from commwatch.wire import WireError

log = logging.getLogger(__name__)

TOPOLOGY_REPEAT_S = 30.0  # placements are re-sent so a restarted worker relearns them
EXIT_BEATS = 3  # heartbeats that report a gone rank as exited before it is dropped
SCAN_PERIOD_S = 1.0
PHASES = ("forward_ms", "backward_ms", "optimizer_ms")


class Agent:
    def __init__(self, settings: Settings, bootstrap: str, *, nvml: Any = None, ib_root: str | None = None,
                 max_inflight: int = 5000):
        self.settings = settings
        self.node = settings.node_name or socket.gethostname()
        self.topics = settings.topics
        self.rings = RingDir(settings.ring_dir, settings.ring_uids(os.getuid()))
        self.progress = Progress()
        self.hw = HardwareSampler(nvml, **({"ib_root": ib_root} if ib_root else {}), period_s=settings.hw_period_s,
                                  timeout_s=settings.agent_nvml_timeout_s)
        self.outbox = Outbox(settings.agent_buffer_bytes, max_inflight)
        self.bootstrap = bootstrap
        self.sender = Sender(settings, bootstrap, **{
            "queue.buffering.max.kbytes": 65536,
            "message.timeout.ms": 30000,
            "reconnect.backoff.max.ms": 2000,
        })
        self.max_batch = max(1, (settings.max_message_bytes - wire.BATCH_HEADER_SIZE) // wire.RECORD_SIZE)
        self.records = 0
        self.lost = 0
        self._next = {"scan": 0.0, "hb": 0.0, "hw": 0.0, "topo": time.monotonic() + TOPOLOGY_REPEAT_S}
        self._topics_ready = threading.Event()

    # --- publishing ---------------------------------------------------------------------
    def _put_json(self, base: str, key: str, msg: dict) -> None:
        try:
            messages.VALIDATORS[base](msg)
        except WireError as exc:
            log.warning("not publishing an invalid %s message: %s", base, exc)
            return
        self.outbox.put(self.topics.name(base), key, messages.dumps(msg))
        metrics.MESSAGES.labels(base).inc()

    def _put_calls(self, job: str, recs: np.ndarray) -> None:
        order = np.argsort(recs["comm"], kind="stable")
        recs = recs[order]
        comms, starts = np.unique(recs["comm"], return_index=True)
        ends = list(starts[1:]) + [len(recs)]
        name = self.topics.calls
        for comm, a, b in zip(comms, starts, ends):
            key = topics.comm_key(job, int(comm))
            for lo in range(a, b, self.max_batch):
                self.outbox.put(name, key, wire.encode_batch(recs[lo:min(b, lo + self.max_batch)]))
                metrics.BATCHES.inc()
                metrics.MESSAGES.labels(topics.CALLS).inc()

    # --- the loop's parts ---------------------------------------------------------------
    def scan(self) -> None:
        added, vanished = self.rings.scan()
        if vanished:  # the writers removed their files: read what they published last
            self._drain(vanished)
        now_ns = time.time_ns()
        stale_ns = int(self.settings.state_idle_s * 1e9)
        for src in added:  # left by a writer that died long before this agent started
            if not src.writer_alive() and now_ns - src.calls.heartbeat_ns > stale_ns:
                log.warning("removing %s: its writer is gone and it is older than %.0f s, not publishing it",
                            src.calls.path, self.settings.state_idle_s)
                self.rings.drop(src)
        added = [s for s in added if s.key in self.rings.sources]
        if added:
            self.topology(now_ns, [s for s in added if s.meta])
        metrics.RINGS.set(len(self.rings.sources))

    def _drain(self, sources: list[RankSource]) -> None:
        by_job: dict[str, list[np.ndarray]] = {}
        for src in sources:
            recs, lost = src.calls.poll()
            if lost:
                self.lost += lost
                metrics.RECORDS_LOST.inc(lost)
                log.warning("job %s rank %d: %d records overwritten before they were read",
                            src.job, src.rank, lost)
            if len(recs):
                by_job.setdefault(src.job, []).append(recs)
        for job, parts in by_job.items():
            recs = parts[0] if len(parts) == 1 else np.concatenate(parts)
            try:
                wire.validate_records(recs)
            except WireError as exc:  # a writer bug: keep only the well-formed records
                log.warning("job %s: dropping malformed records: %s", job, exc)
                ok = (recs["kind"] >= wire.KIND_CALL) & (recs["kind"] <= wire.KIND_COMM_DESTROY) & \
                     (recs["op"] <= wire.OP_MAX) & (recs["t_start_ns"] >= 0) & (recs["t_end_ns"] >= 0)
                recs = recs[ok]
            self.progress.update(job, recs)
            self._put_calls(job, recs)
            self.records += len(recs)
            metrics.RECORDS.inc(len(recs))

    def poll(self) -> None:
        sources = list(self.rings.sources.values())
        self._drain(sources)
        for src in sources:
            if not src.exited:
                self._steps(src)

    def heartbeat(self, now_ns: int) -> None:
        sources = list(self.rings.sources.values())
        for src in sources:
            if not src.exited and not src.writer_alive():
                self._exit(src, sources)
        for job, msg in self.progress.messages(self.node, now_ns):
            self._put_json(topics.PROGRESS, topics.comm_key(job, int(msg["comm"], 16)), msg)
        dead = dropped = 0
        changed = []
        for src in sources:
            if src.exited:
                dead += 1
                src.exit_beats += 1
                if src.exit_beats >= EXIT_BEATS:  # reported long enough: no stale heartbeats
                    if not self._other_writer(src, sources):
                        self.progress.forget(src.job, src.rank)
                    self.rings.drop(src)
                continue
            dropped += src.calls.dropped
            self.rings.open_steps(src)
            if self.rings.read_meta(src):
                changed.append(src)
        metrics.RINGS_DEAD.set(dead)
        metrics.WRITER_DROPPED.set(dropped)
        if changed:
            self.topology(now_ns, changed)

    @staticmethod
    def _other_writer(src: RankSource, sources: list[RankSource]) -> bool:
        """Another live writer of the same rank (a restarted process under another name)."""
        return any(o is not src and not o.exited and o.job == src.job and o.rank == src.rank for o in sources)

    def _exit(self, src: RankSource, sources: list[RankSource]) -> None:
        """The writer is gone: publish what it left and report the rank exited."""
        self._drain([src])
        self._steps(src)
        src.exited = True
        comms = 0 if self._other_writer(src, sources) else self.progress.exit(src.job, src.rank)
        how = "removed its files" if src.vanished else "is gone (its ring lock is free)"
        log.warning("job %s rank %d: writer pid %d %s; reporting it exited on %d communicators (%s)",
                    src.job, src.rank, src.pid, how, comms, src.calls.path)

    def _steps(self, src: RankSource) -> None:
        if src.steps is None:
            return
        recs, lost = src.steps.poll()
        for r in recs:
            msg = {"v": 1, "job": src.job, "rank": int(r["rank"]), "iteration": int(r["iteration"]),
                   "t_start_ns": int(r["t_start_ns"]), "t_end_ns": int(r["t_end_ns"])}
            phases = {k: round(float(r[k]), 3) for k in PHASES if not np.isnan(r[k])}
            if phases:
                msg["phases"] = phases
            self._put_json(topics.STEPS, src.job, msg)

    def topology(self, now_ns: int, sources: list[RankSource]) -> None:
        for src in sources:
            m = src.meta or {}
            msg = {"v": 1, "job": src.job, "ts_ns": now_ns, "rank": src.rank,
                   "world_size": m.get("world_size", 0), "node": m.get("node") or self.node}
            for k in ("local_rank", "gpu", "coords"):
                if m.get(k) is not None:
                    msg[k] = m[k]
            self._put_json(topics.TOPOLOGY, src.job, msg)

    def hardware(self, now_ns: int) -> None:
        jobs: dict[str, dict[Any, int]] = {}
        for src in self.rings.sources.values():
            gpus = jobs.setdefault(src.job, {})
            m = src.meta or {}
            if m.get("gpu"):
                gpus[m["gpu"]] = src.rank
            elif m.get("local_rank") is not None:
                gpus[m["local_rank"]] = src.rank
        if self.settings.job_id:
            jobs.setdefault(self.settings.job_id, {})
        for msg in self.hw.sample(self.node, now_ns, jobs):
            self._put_json(topics.HW, msg["job"], msg)

    # --- driving ------------------------------------------------------------------------
    def tick(self, now: float | None = None) -> None:
        """One pass of the loop at monotonic time `now`."""
        now = time.monotonic() if now is None else now
        nxt = self._next
        if now >= nxt["scan"]:
            self.scan()
            nxt["scan"] = now + SCAN_PERIOD_S
        self.poll()
        now_ns = time.time_ns()
        if now >= nxt["hb"]:
            self.heartbeat(now_ns)
            nxt["hb"] = now + self.settings.heartbeat_period_s
        if now >= nxt["topo"]:
            self.topology(now_ns, [s for s in self.rings.sources.values() if s.meta])
            nxt["topo"] = now + TOPOLOGY_REPEAT_S
        if now >= nxt["hw"]:
            self.hardware(now_ns)
            nxt["hw"] = now + self.settings.hw_period_s
        self.outbox.pump(self.sender)

    def _ensure_topics(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                ensure_topics(self.settings, self.bootstrap, timeout_s=5.0)
                self._topics_ready.set()
                return
            except Exception as exc:
                log.warning("Kafka at %s not reachable yet (%s); buffering", self.bootstrap, exc)
                stop.wait(5.0)

    def run(self, stop: threading.Event | None = None, duration_s: float | None = None) -> None:
        stop = stop or threading.Event()
        threading.Thread(target=self._ensure_topics, args=(stop,), daemon=True, name="cw-topics").start()
        end = time.monotonic() + duration_s if duration_s else float("inf")
        period = self.settings.agent_flush_s
        log.info("agent on %s: rings under %s, Kafka %s", self.node, self.settings.ring_dir, self.bootstrap)
        while not stop.is_set() and time.monotonic() < end:
            t0 = time.monotonic()
            self.tick(t0)
            stop.wait(max(0.0, period - (time.monotonic() - t0)))
        self.close()

    def close(self, timeout_s: float = 5.0) -> None:
        self.hw.close()
        self.poll()
        self.heartbeat(time.time_ns())
        self.outbox.pump(self.sender)
        self.sender.flush(timeout_s)
        self.outbox.pump(self.sender)
        self.sender.flush(timeout_s)
        for src in self.rings.sources.values():
            src.close()
        self.rings.sources.clear()
