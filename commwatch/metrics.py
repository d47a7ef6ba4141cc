"""Every Prometheus metric commwatch exposes, in one place.

Names follow `commwatch_<subsystem>_<name>_<unit>`; counters end in `_total`, times are
seconds. No label ever carries a rank or a node (cardinality): per-rank detail belongs in
ClickHouse. Only the per-job health gauges (`commwatch_job_*`, `JobHealthGauges`) carry a
job (`job_name`, not `job`, which Prometheus gives every target) and at most a
communicator, with a bounded number of series per job. Each process builds its metrics on its own `CollectorRegistry`
(so tests and several workers in one interpreter never collide) and serves them with
`serve()` on `settings.metrics_host:settings.metrics_port` (loopback by default; port 0
picks a free one).

A part that adds metrics adds a class here, built on a registry, and documents each name
in the class docstring.

>>> m = StreamMetrics()
>>> m.messages.labels(topic="cw.calls.v1").inc()
>>> m.registry.get_sample_value("commwatch_stream_messages_total", {"topic": "cw.calls.v1"})
1.0
"""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

log = logging.getLogger(__name__)

# Detection delays run from ~1 s (a hang at the floor) to minutes (a slow rank over windows).
DELAY_BUCKETS = (1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600)


class StreamMetrics:
    """Metrics of a live stream worker (`commwatch worker`).

    - `commwatch_stream_up` (gauge): 1 while the worker's agents run.
    - `commwatch_stream_messages_total{topic}` (counter): Kafka messages consumed, by contract
      topic name (including `cw.internal.reports.v1`).
    - `commwatch_stream_records_total` (counter): call records decoded from `cw.calls.v1` batches.
    - `commwatch_stream_deadletter_total{reason}` (counter): messages sent to `cw.deadletter.v1`,
      by `WireError` reason (`bad_magic`, `bad_key`, `not_json`, ...).
    - `commwatch_stream_reports_total` (counter): stage-1 reports published to the internal topic.
    - `commwatch_stream_alerts_total{kind,status}` (counter): incident events published to
      `cw.alerts.v1`.
    - `commwatch_stream_consumer_lag_messages{topic}` (gauge): messages behind the end of the
      assigned partitions of each topic, summed over partitions.
    - `commwatch_stream_event_age_seconds` (gauge): wall clock minus the newest event time seen
      (how far the worker runs behind the producers; meaningful only for live producers).
    - `commwatch_stream_jobs_watched` (gauge): jobs with input in this worker's partitions.
    - `commwatch_incidents_open{kind,severity}` (gauge): incidents open in this worker's
      detector: those it published as open and has not resolved, and those it found open
      already (opened before its restart, or by the worker whose partitions it took over).
    - `commwatch_detection_delay_seconds{kind}` (histogram): event time from the fault's onset
      to the incident's `opened_ns`, as far as the incident's evidence tells the onset (see
      `detection_delay_s`); incidents that do not tell are not observed.
    - `commwatch_stream_dropped_total{reason}` (counter): what the detector core dropped or
      refused after decoding, by reason (`Detector.drops()`: e.g. `records`, call records
      outside a comm's instance ring); counted by the increase at each tick.
    - `commwatch_job_*{job_name,...}` (gauges): each job's health, from the snapshots this
      worker publishes; see `JobHealthGauges`.
    """

    def __init__(self, registry: CollectorRegistry | None = None):
        r = self.registry = registry if registry is not None else CollectorRegistry()
        self.up = Gauge("commwatch_stream_up", "1 while the stream worker's agents run", registry=r)
        self.messages = Counter(
            "commwatch_stream_messages", "Kafka messages consumed, by contract topic", ["topic"], registry=r
        )
        self.records = Counter("commwatch_stream_records", "call records decoded from call batches", registry=r)
        self.deadletter = Counter(
            "commwatch_stream_deadletter", "messages sent to the dead-letter topic, by reason", ["reason"],
            registry=r,
        )
        self.reports = Counter("commwatch_stream_reports", "stage-1 reports published", registry=r)
        self.alerts = Counter(
            "commwatch_stream_alerts", "incident events published, by kind and status", ["kind", "status"],
            registry=r,
        )
        self.consumer_lag = Gauge(
            "commwatch_stream_consumer_lag_messages", "messages behind the partition ends, by topic", ["topic"],
            registry=r,
        )
        self.event_age = Gauge(
            "commwatch_stream_event_age_seconds", "wall clock minus the newest event time seen", registry=r
        )
        self.jobs = Gauge("commwatch_stream_jobs_watched", "jobs with input in this worker", registry=r)
        self.incidents_open = Gauge(
            "commwatch_incidents_open", "open incidents, by kind and severity", ["kind", "severity"], registry=r
        )
        self.detection_delay = Histogram(
            "commwatch_detection_delay_seconds", "event time from a fault's onset to its incident opening",
            ["kind"], buckets=DELAY_BUCKETS, registry=r,
        )
        self.dropped = Counter(
            "commwatch_stream_dropped", "what the detector dropped or refused, by reason", ["reason"], registry=r
        )
        self._open: dict[str, tuple[str, str]] = {}
        self._drops_seen: dict[str, int] = {}
        self.job_health = JobHealthGauges()
        r.register(self.job_health)

    def observe_health(self, snapshot: dict[str, Any]) -> None:
        """Take a job health snapshot as published on `cw.internal.health.v1`."""
        self.job_health.observe(snapshot)

    def count_drops(self, cumulative: dict[str, int]) -> None:
        """Advance `commwatch_stream_dropped_total` to the detector's cumulative counts by
        reason (a count that went down, e.g. state forgotten, starts again from there)."""
        for reason, total in cumulative.items():
            before = self._drops_seen.get(reason, 0)
            if total > before:
                self.dropped.labels(reason=reason).inc(total - before)
            self._drops_seen[reason] = total

    def incident(self, inc: dict[str, Any], published: bool = True) -> None:
        """Account one incident event (contract 2.6). `published`: False for an `open` this
        worker did not publish, since it is open already (said by an earlier run of it, or by
        the worker whose partitions it took over): the incident is open here from now on (its
        updates and resolution come from here), but no alert went out for it."""
        kind, severity, status = inc.get("kind", "?"), inc.get("severity", "?"), inc.get("status", "?")
        if published:
            self.alerts.labels(kind=kind, status=status).inc()
        iid = inc.get("incident", "")
        before = self._open.pop(iid, None)
        if status != "resolved":
            self._open[iid] = (kind, severity)
        if status == "open" and before is None and published:
            delay = detection_delay_s(inc)
            if delay is not None:
                self.detection_delay.labels(kind=kind).observe(delay)
        counts: dict[tuple[str, str], int] = {}
        for key in self._open.values():
            counts[key] = counts.get(key, 0) + 1
        for key in {before, (kind, severity)} - {None}:
            counts.setdefault(key, 0)  # type: ignore[arg-type]
        for (k, s), n in counts.items():
            self.incidents_open.labels(kind=k, severity=s).set(n)


JOB_STATES = ("starting", "running", "slow", "hang", "stalled", "ended")
TOP_LATE = 5  # slots of the latest ranks per job
TOP_BLOCKED = 4  # blocked communicators per job
JOB_EXPIRY_S = 30.0  # a job with no snapshot for this long (wall clock) has left this worker


class JobHealthGauges:
    """Per-job health gauges, from the job health snapshots (docs/architecture.md).

    Bounded cardinality whatever the job's size: per job at most 6 state series, one series
    per open incident kind and severity, `TOP_LATE` late-rank slots and `TOP_BLOCKED` blocked
    communicators. A rank is a value (`commwatch_job_late_rank`), never a label. A job's
    series go away `JOB_EXPIRY_S` after its last snapshot (the job was pruned, or another
    worker took its partition).

    - `commwatch_job_state{job_name,state}`: 1 for the job's state (starting, running, slow,
      hang, stalled, ended), 0 for the others.
    - `commwatch_job_ranks{job_name}`: ranks seen.
    - `commwatch_job_iterations_per_second{job_name}`: iteration rate (jobs that report steps).
    - `commwatch_job_step_seconds{job_name}`: median iteration time (jobs that report steps).
    - `commwatch_job_incidents_open{job_name,kind,severity}`: open incidents.
    - `commwatch_job_late_rank{job_name,slot}`: the rank in slot 1..5 of the latest ranks
      (slot 1 the latest), and `commwatch_job_late_rank_lag_seconds{job_name,slot}` its
      clock-corrected arrival lag behind its peers.
    - `commwatch_job_hang_wait_seconds{job_name}`: longest time a communicator of the job has
      been waiting in its oldest incomplete collective (0 when none waits).
    - `commwatch_job_comm_blocked_seconds{job_name,comm}`: the same per communicator, for the
      (at most 4) communicators blocked longest.

    >>> g = JobHealthGauges(monotonic=lambda: 0.0)
    >>> g.observe({"job": "j1", "state": "hang", "ranks": 8, "incidents": [], "late_ranks": [],
    ...            "comms": [{"comm": "00000000000000aa", "blocked_s": 7.5}]})
    >>> [s.value for f in g.collect() for s in f.samples if s.name == "commwatch_job_hang_wait_seconds"]
    [7.5]
    """

    def __init__(self, expiry_s: float = JOB_EXPIRY_S, monotonic: Callable[[], float] = time.monotonic):
        self.expiry_s = expiry_s
        self.monotonic = monotonic
        self.lock = threading.Lock()
        self.jobs: dict[str, tuple[float, dict[str, Any]]] = {}  # job -> (seen at, figures)

    def observe(self, snap: dict[str, Any]) -> None:
        job = snap.get("job")
        if not isinstance(job, str) or not job:
            return
        step = snap.get("step") or {}
        incidents: dict[tuple[str, str], int] = {}
        for inc in snap.get("incidents") or ():
            key = (str(inc.get("kind", "?")), str(inc.get("severity", "?")))
            incidents[key] = incidents.get(key, 0) + 1
        blocked = sorted(((float(c.get("blocked_s") or 0.0), str(c.get("comm"))) for c in snap.get("comms") or ()
                          if (c.get("blocked_s") or 0) > 0), reverse=True)
        figures = {
            "state": snap.get("state"), "ranks": snap.get("ranks"),
            "rate": step.get("rate_per_s"), "step_s": step.get("median_s"), "incidents": incidents,
            "late": [(int(r["rank"]), float(r["lag_ms"]) / 1e3) for r in (snap.get("late_ranks") or ())[:TOP_LATE]],
            "blocked": blocked[:TOP_BLOCKED],
        }
        with self.lock:
            self.jobs[job] = (self.monotonic(), figures)

    def _current(self) -> dict[str, dict[str, Any]]:
        now = self.monotonic()
        with self.lock:
            for job in [j for j, (seen, _) in self.jobs.items() if now - seen > self.expiry_s]:
                del self.jobs[job]
            return {job: figures for job, (_, figures) in self.jobs.items()}

    def describe(self) -> list[GaugeMetricFamily]:
        return list(self._families())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        return iter(self._families(self._current()))

    def _families(self, jobs: dict[str, dict[str, Any]] | None = None) -> list[GaugeMetricFamily]:
        def fam(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=["job_name", *labels])

        state = fam("commwatch_job_state", "1 for the job's health state", ["state"])
        ranks = fam("commwatch_job_ranks", "ranks seen in the job", [])
        rate = fam("commwatch_job_iterations_per_second", "iteration rate of the job", [])
        step = fam("commwatch_job_step_seconds", "median iteration time of the job", [])
        incidents = fam("commwatch_job_incidents_open", "open incidents of the job", ["kind", "severity"])
        late = fam("commwatch_job_late_rank", "rank in each slot of the job's latest ranks (slot 1 the latest)",
                   ["slot"])
        lag = fam("commwatch_job_late_rank_lag_seconds", "arrival lag behind its peers of the rank in each slot",
                  ["slot"])
        wait = fam("commwatch_job_hang_wait_seconds", "longest wait of a communicator in its oldest call", [])
        blocked = fam("commwatch_job_comm_blocked_seconds", "wait of the longest-blocked communicators",
                      ["comm"])
        for job, f in sorted((jobs or {}).items()):
            for s in JOB_STATES:
                state.add_metric([job, s], 1.0 if f["state"] == s else 0.0)
            if isinstance(f["ranks"], int):
                ranks.add_metric([job], f["ranks"])
            if f["rate"] is not None:
                rate.add_metric([job], f["rate"])
            if f["step_s"] is not None:
                step.add_metric([job], f["step_s"])
            for (kind, severity), n in sorted(f["incidents"].items()):
                incidents.add_metric([job, kind, severity], n)
            for slot, (rank, lag_s) in enumerate(f["late"], 1):
                late.add_metric([job, str(slot)], rank)
                lag.add_metric([job, str(slot)], lag_s)
            wait.add_metric([job], f["blocked"][0][0] if f["blocked"] else 0.0)
            for seconds, comm in f["blocked"]:
                blocked.add_metric([job, comm], seconds)
        return [state, ranks, rate, step, incidents, late, lag, wait, blocked]


class SinkMetrics:
    """Metrics of the ClickHouse sink (`commwatch sink`), moved with its `SinkStats`.

    - `commwatch_sink_messages_total{topic}` (counter): Kafka messages consumed, by contract topic.
    - `commwatch_sink_rows_total{table}` (counter): rows written to ClickHouse, by table, counted
      once their flush succeeded (a retried flush counts once).
    - `commwatch_sink_flushes_total` (counter): flushes written and committed.
    - `commwatch_sink_insert_errors_total` (counter): flush attempts that failed (each is retried
      with backoff).
    - `commwatch_sink_buffered_rows` (gauge): rows held and not yet written, in all batches.
    - `commwatch_sink_paused` (gauge): 1 while consumption is paused because the buffer reached
      `sink_max_buffer_rows`.
    - `commwatch_sink_deadletter_total{reason}` (counter): messages sent to `cw.deadletter.v1`,
      by `WireError` reason.
    """

    def __init__(self, registry: CollectorRegistry | None = None):
        r = self.registry = registry if registry is not None else CollectorRegistry()
        self.messages = Counter(
            "commwatch_sink_messages", "Kafka messages consumed, by contract topic", ["topic"], registry=r
        )
        self.rows = Counter("commwatch_sink_rows", "rows written to ClickHouse, by table", ["table"], registry=r)
        self.flushes = Counter("commwatch_sink_flushes", "flushes written and committed", registry=r)
        self.insert_errors = Counter("commwatch_sink_insert_errors", "flush attempts that failed", registry=r)
        self.buffered = Gauge("commwatch_sink_buffered_rows", "rows held and not yet written", registry=r)
        self.paused = Gauge("commwatch_sink_paused", "1 while consumption is paused on a full buffer", registry=r)
        self.deadletter = Counter(
            "commwatch_sink_deadletter", "messages sent to the dead-letter topic, by reason", ["reason"],
            registry=r,
        )


class NotifyMetrics:
    """Metrics of the notifier (`commwatch notify`), moved with its `DeliveryStats`.

    `destination` is the destination's kind (`webhook`, `slack`, `feishu`, `alertmanager`).

    - `commwatch_notify_sent_total{destination}` (counter): notifications delivered.
    - `commwatch_notify_failed_total{destination}` (counter): notifications given up after every
      attempt failed.
    - `commwatch_notify_retries_total{destination}` (counter): delivery attempts that failed and
      were retried.
    - `commwatch_notify_dropped_total{destination}` (counter): notifications dropped because the
      destination's queue was full.
    - `commwatch_notify_suppressed_total` (counter): incident events routing kept back (below
      `notify_min_severity`, a kind not in `notify_kinds`, or nothing new since the last one).
    - `commwatch_notify_malformed_total{reason}` (counter): messages on `cw.alerts.v1` skipped as
      not following the contract, by `WireError` reason.
    """

    def __init__(self, registry: CollectorRegistry | None = None):
        r = self.registry = registry if registry is not None else CollectorRegistry()
        self.sent = Counter("commwatch_notify_sent", "notifications delivered", ["destination"], registry=r)
        self.failed = Counter(
            "commwatch_notify_failed", "notifications given up after every attempt", ["destination"], registry=r
        )
        self.retries = Counter(
            "commwatch_notify_retries", "failed delivery attempts retried", ["destination"], registry=r
        )
        self.dropped = Counter(
            "commwatch_notify_dropped", "notifications dropped on a full queue", ["destination"], registry=r
        )
        self.suppressed = Counter("commwatch_notify_suppressed", "incident events routing kept back", registry=r)
        self.malformed = Counter(
            "commwatch_notify_malformed", "incident messages skipped as malformed, by reason", ["reason"],
            registry=r,
        )


ONSET_SECONDS = ("waited_s", "silent_s", "idle_s")  # evidence keys: how long the condition had lasted


def detection_delay_s(inc: dict[str, Any]) -> float | None:
    """Seconds from onset to opening: `opened_ns - evidence.onset_ns`, else the evidence's
    own duration (`waited_s` of a hang, `silent_s` of a lost node, `idle_s` of a stall).

    >>> detection_delay_s({"opened_ns": 9_000_000_000, "evidence": {"onset_ns": 1_000_000_000}})
    8.0
    >>> detection_delay_s({"opened_ns": 5, "evidence": {"waited_s": 6.5}})
    6.5
    >>> detection_delay_s({"opened_ns": 5, "evidence": {}}) is None
    True
    """
    ev = inc.get("evidence") or {}
    onset, opened = ev.get("onset_ns"), inc.get("opened_ns")
    if isinstance(onset, int) and isinstance(opened, int):
        return max(0.0, (opened - onset) / 1e9)
    for key in ONSET_SECONDS:
        value = ev.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return max(0.0, float(value))
    return None


def serve(registry: CollectorRegistry, host: str, port: int,
          routes: dict[str, Callable[[], tuple[bool, dict]]] | None = None,
          key: str = "COMMWATCH_METRICS_PORT") -> tuple[Any, int]:
    """Serve `registry` on http://host:port/metrics in a daemon thread, and each of `routes`
    (path -> check returning (ok, JSON body); 200 when ok, else 503); returns (server, port).
    A port that cannot be bound raises `SettingsError` naming `key`."""
    from commwatch.settings import SettingsError

    checks = dict(routes or {})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0]
            if path in checks:
                try:
                    ok, body = checks[path]()
                except Exception as exc:  # noqa: BLE001 - a failing check is a failed probe
                    ok, body = False, {"ok": False, "reason": f"check failed: {exc}"}
                self._reply(200 if ok else 503, "application/json", json.dumps(body).encode())
            elif path in ("/metrics", "/"):
                self._reply(200, CONTENT_TYPE_LATEST, generate_latest(registry))
            else:
                self._reply(404, "text/plain", b"not found\n")

        def _reply(self, code: int, ctype: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:  # probes every few seconds: no access log
            pass

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except (OSError, OverflowError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise SettingsError(f"{key}: cannot serve metrics on {host}:{port} ({why}); "
                            f"set {key}=0 for a free port, or another port") from None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    bound = server.server_address[1]
    log.info("metrics on http://%s:%d/metrics%s", host, bound, "".join(f", {p}" for p in checks))
    return server, bound
