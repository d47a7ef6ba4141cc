"""The live pipeline as one faust app: two agents around the detector core.

- `comm` agent: `cw.calls.v1` + `cw.progress.v1` (key `{job}/{comm}`) -> `CommStage` ->
  reports on `cw.internal.reports.v1` (key `{job}`); the per-rank rows of its window
  reports also go to `cw.internal.windows.v1` for the ClickHouse sink.
- `job` agent: reports + `cw.topology.v1` + `cw.steps.v1` + `cw.hw.v1` (key `{job}`) ->
  `JobStage` -> incidents on `cw.alerts.v1` (key `{job}`).

A message that does not decode goes to `cw.deadletter.v1` unchanged with its reason
(`streams/deadletter.py`), is counted, and the stream goes on.

Time. Detectors run on event time: `feed()` gets the message's own time (the Kafka
timestamp, which producers set to the event's `ts_ns`, exactly as a capture file's
`ts_ns`). A timer calls `tick(now)` every `TICK_S` with `now` = the newest event time
seen plus the wall-clock time elapsed since it was seen, so a job that goes fully
silent (its node agents dead) still times out. Ticks are skipped while the agent has a
backlog (consumer lag > 0): catching up on old data, the data itself carries time.

State. Detector state is kept in memory, not in faust tables. After a restart the
consumer group resumes from its committed offsets and the detectors rebuild from the
progress heartbeats (every node sends one per comm per `heartbeat_period_s`): a hang is
seen again one heartbeat period after restart at the latest, because heartbeats carry
each rank's `started`/`completed` and `t_last_start_ns`; slow-rank windows refill after
`window_instances` collectives. The `AlertLedger` keeps a restarted worker from
re-announcing incidents that are already open (ids are stable).
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import time
from pathlib import Path
from typing import Any, Callable

import faust

from commwatch import messages, topics
from commwatch.capture import Message
from commwatch.decode import CallBatch, decode_message
from commwatch.metrics import StreamMetrics
from commwatch.settings import Settings
from commwatch.streams.deadletter import error_headers
from commwatch.streams.ledger import AlertLedger
from commwatch.streams.liveness import Liveness, TopicKeeper
from commwatch.streams.window_rows import WINDOWS, window_rows
from commwatch.wire import WireError

log = logging.getLogger(__name__)

REPORTS = "cw.internal.reports.v1"
TICK_S = 0.5
STARTUP_GRACE_S = 30.0
LAG_EVERY_S = 2.0


def stream_topics(settings: Settings) -> list[str]:
    """Every topic the worker needs to exist: the contract's and the internal ones."""
    return settings.topics.all() + [settings.topics.name(REPORTS), settings.topics.name(WINDOWS)]


def broker_credentials(settings: Settings) -> Any:
    """faust credentials for the configured security protocol (None for PLAINTEXT)."""
    proto = settings.kafka_security_protocol
    if proto == "PLAINTEXT":
        return None
    context = None
    if proto.endswith("SSL"):
        context = ssl.create_default_context(cafile=settings.kafka_ssl_ca_location or None)
        if settings.kafka_ssl_certificate_location:
            context.load_cert_chain(
                settings.kafka_ssl_certificate_location,
                settings.kafka_ssl_key_location or None,
                settings.kafka_ssl_key_password or None,
            )
    if proto.startswith("SASL"):
        return faust.SASLCredentials(
            username=settings.kafka_sasl_username,
            password=settings.kafka_sasl_password,
            mechanism=settings.kafka_sasl_mechanism,
            ssl_context=context,
        )
    return faust.SSLCredentials(context)


class EventClock:
    """Newest event time seen, advanced by wall-clock time since it was seen."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic):
        self.monotonic = monotonic
        self.max_ns = 0
        self.seen_at = 0.0

    def observe(self, ts_ns: int) -> None:
        if ts_ns > self.max_ns:
            self.max_ns = ts_ns
            self.seen_at = self.monotonic()

    def now(self) -> int:
        if not self.max_ns:
            return 0
        return self.max_ns + int((self.monotonic() - self.seen_at) * 1e9)


def process_age_s() -> float:
    """Seconds since this process started (Linux /proc, to 10 ms; 0 elsewhere)."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))


def to_message(topic: str, key: bytes | None, ts_ns: int, value: bytes | None) -> Message:
    """A Kafka record as the contract's `Message`; raises `WireError("bad_key")`."""
    try:
        text = key.decode("utf-8") if key is not None else None
    except UnicodeDecodeError:
        raise WireError("bad_key", "key is not UTF-8") from None
    return Message(topic, text, ts_ns, value or b"")


class Pipeline:
    """The worker's engine-free half: stages, clocks, dead-letter decisions, metrics."""

    def __init__(self, settings: Settings, metrics: StreamMetrics, ledger: AlertLedger | None = None):
        from commwatch.streams.detect import CommStage, JobStage

        self.settings = settings
        self.metrics = metrics
        self.ledger = ledger or AlertLedger()
        self.comm_stage = CommStage(settings)
        self.job_stage = JobStage(settings)
        self.comm_clock = EventClock()
        self.job_clock = EventClock()
        self.jobs: set[str] = set()
        self.started = time.monotonic() - process_age_s()
        self.first_processed_s: float | None = None

    def _seen(self, base: str, msg: Message) -> None:
        self.metrics.messages.labels(topic=base).inc()
        if self.first_processed_s is None:
            self.first_processed_s = time.monotonic() - self.started
            log.info("first message processed %.2f s after the process started", self.first_processed_s)

    def comm_message(self, base: str, msg: Message) -> list[dict]:
        """Stage 1 for one calls/progress message; raises `WireError`."""
        self._seen(base, msg)
        decoded = decode_message(msg, self.settings.max_message_bytes)
        if isinstance(decoded, CallBatch):
            self.metrics.records.inc(decoded.count)
            self.jobs.add(decoded.job)
        else:
            self.jobs.add(decoded["job"])
        self.comm_clock.observe(msg.ts_ns)
        return self.comm_stage.feed(msg, decoded, msg.ts_ns)

    def job_message(self, base: str, msg: Message) -> list[dict]:
        """Stage 2 for one report or topology/steps/hw message; raises `WireError`."""
        self._seen(base, msg)
        if base == REPORTS:
            try:
                report = json.loads(msg.value)
            except ValueError as exc:
                raise WireError("bad_json", f"report is not JSON ({exc})") from None
            if not isinstance(report, dict) or "job" not in report:
                raise WireError("not_object", "report is not an object with a job")
            ts = report.get("ts_ns")
            now = ts if isinstance(ts, int) and not isinstance(ts, bool) else msg.ts_ns
            self.job_clock.observe(now)
            return self.job_stage.feed_report(report, now)
        decoded = decode_message(msg, self.settings.max_message_bytes)
        self.jobs.add(decoded["job"])
        self.job_clock.observe(msg.ts_ns)
        return self.job_stage.feed(msg, decoded, msg.ts_ns)

    def admit(self, incidents: list[dict]) -> list[dict]:
        """Incidents worth publishing (not repeats), accounted in the metrics."""
        out = []
        for inc in incidents:
            if self.ledger.admit(inc):
                self.metrics.incident(inc)
                out.append(inc)
        return out

    def dead(self, err: WireError) -> None:
        self.metrics.deadletter.labels(reason=err.reason).inc()


def create_app(settings: Settings, pipeline: Pipeline, liveness: Liveness | None = None,
               keeper: TopicKeeper | None = None) -> faust.App:
    """The faust app of one worker process (one per process: faust apps are not reentrant).

    `liveness` is fed from the loop (each consumed event, each timer tick, the assignment
    and lag); `keeper` re-creates topics a restarted broker lost."""
    liveness = liveness or Liveness(settings.liveness_stall_s)
    t = settings.topics
    app = faust.App(
        t.name("commwatch-stream"),
        broker=[f"kafka://{b.strip()}" for b in settings.kafka_bootstrap.split(",")],
        broker_credentials=broker_credentials(settings),
        datadir=str(Path(settings.data_dir) / "faust"),
        key_serializer="raw",
        value_serializer="raw",
        # Join the group in seconds on a fresh broker, and notice a dead worker quickly.
        broker_session_timeout=settings.kafka_session_timeout_ms / 1000,
        broker_heartbeat_interval=max(0.5, settings.kafka_session_timeout_ms / 6000),
        broker_rebalance_timeout=max(6.0, settings.kafka_session_timeout_ms / 1000),
        broker_commit_every=500,
        broker_commit_interval=1.0,
        broker_max_poll_records=2000,
        consumer_auto_offset_reset="earliest",
        stream_wait_empty=False,
        stream_buffer_maxsize=8192,
        producer_linger=0.02,
        producer_max_request_size=max(settings.max_message_bytes + 4096, 1_000_000),
        consumer_max_fetch_size=max(settings.max_message_bytes + 4096, 4_194_304),
        topic_disable_leader=True,
        topic_allow_declare=False,
        topic_partitions=settings.kafka_partitions,
        web_enabled=False,
    )

    def topic(*names: str) -> Any:
        return app.topic(*names, key_type=bytes, value_type=bytes, key_serializer="raw",
                         value_serializer="raw", allow_empty=True)

    comm_in = topic(t.calls, t.progress)
    job_in = topic(t.name(REPORTS), t.topology, t.steps, t.hw)
    reports_out = topic(t.name(REPORTS))
    windows_out = topic(t.name(WINDOWS))
    alerts_out = topic(t.alerts)
    deadletter_out = topic(t.deadletter)
    processed: dict[Any, int] = {}
    assigned_at: dict[Any, float] = {}

    # Published messages carry their event time as the Kafka timestamp, like every input.
    # Agents await each send (backpressure); the timer only queues (it must not stall).
    async def publish_reports(reports: list[dict], wait: bool = True) -> None:
        for rep in reports:
            kw = {"key": str(rep["job"]).encode(), "value": messages.dumps(rep), "timestamp": rep["ts_ns"] / 1e9}
            if wait:
                await reports_out.send(**kw)
            else:
                reports_out.send_soon(**kw)
            for row in window_rows(rep):
                windows_out.send_soon(key=kw["key"], value=messages.dumps(row), timestamp=kw["timestamp"])
        pipeline.metrics.reports.inc(len(reports))

    async def publish_incidents(incidents: list[dict], wait: bool = True) -> None:
        for inc in pipeline.admit(incidents):
            kw = {"key": str(inc["job"]).encode(), "value": messages.dumps(inc), "timestamp": inc["ts_ns"] / 1e9}
            if wait:
                await alerts_out.send(**kw)
            else:
                alerts_out.send_soon(**kw)

    async def dead_letter(event: Any, err: WireError) -> None:
        m = event.message
        pipeline.dead(err)
        log.debug("dead-letter %s[%d]@%d: %s", m.topic, m.partition, m.offset, err)
        await deadletter_out.send(key=m.key, value=m.value, timestamp=m.timestamp,
                                  headers=error_headers(err, m.topic, m.partition, m.offset))

    def kafka_message(event: Any) -> tuple[str, Message]:
        m = event.message
        processed[m.tp] = m.offset
        base = t.base(m.topic)
        return base, to_message(base, m.key, int(m.timestamp * 1e9), m.value)

    async def consume(stream: Any, handle: Callable[[str, Message], list[dict]],
                      publish: Callable[[list[dict]], Any]) -> None:
        """Decode and handle each event; a bad one is dead-lettered and the stream goes on."""
        async for event in stream.events():
            try:
                base, msg = kafka_message(event)
                out = handle(base, msg)
            except WireError as err:
                await dead_letter(event, err)
                continue
            finally:
                liveness.beat("consume")
            await publish(out)

    @app.agent(comm_in, name="comm")
    async def comm_agent(stream: Any) -> None:
        await consume(stream, pipeline.comm_message, publish_reports)

    @app.agent(job_in, name="job")
    async def job_agent(stream: Any) -> None:
        await consume(stream, pipeline.job_message, publish_incidents)

    def lag_of(names: set[str]) -> tuple[int, dict[str, int]]:
        """Messages behind the partition ends, after the last processed offset.

        A partition that holds data but has delivered nothing since it was assigned counts
        as behind by its whole length for `STARTUP_GRACE_S`: otherwise, at start-up, time
        taken from a partition that is already flowing would make the comms of a partition
        not yet read look stuck (a false hang). After the grace period it counts as caught
        up (a partition of finished jobs only, after a restart)."""
        total, per_topic = 0, {}
        consumer = app.consumer
        mono = time.monotonic()
        for tp in consumer.assignment():
            if tp.topic not in names:
                continue
            last = processed.get(tp)
            high = consumer.highwater(tp) or 0
            if last is None:
                first_seen = assigned_at.setdefault(tp, mono)
                lag = high if mono - first_seen < STARTUP_GRACE_S else 0
            else:
                lag = max(0, high - (last + 1))
            per_topic[tp.topic] = per_topic.get(tp.topic, 0) + lag
            total += lag
        return total, per_topic

    comm_names = {t.calls, t.progress}
    job_names = {t.name(REPORTS), t.topology, t.steps, t.hw}
    lag_state = {"at": 0.0}

    @app.timer(TICK_S)
    async def tick() -> None:
        liveness.beat("tick")
        comm_lag, comm_topics = lag_of(comm_names)
        job_lag, job_topics = lag_of(job_names)
        liveness.assigned(((tp.topic, tp.partition) for tp in app.consumer.assignment()), comm_lag + job_lag)
        if keeper is not None:
            keeper.poll()
            liveness.problem = keeper.error
        if comm_lag == 0 and pipeline.comm_clock.max_ns:
            await publish_reports(pipeline.comm_stage.tick(pipeline.comm_clock.now()), wait=False)
        if job_lag == 0 and pipeline.job_clock.max_ns:
            await publish_incidents(pipeline.job_stage.tick(pipeline.job_clock.now()), wait=False)
        now = time.monotonic()
        if now - lag_state["at"] >= LAG_EVERY_S:
            lag_state["at"] = now
            m = pipeline.metrics
            for name, lag in {**comm_topics, **job_topics}.items():
                m.consumer_lag.labels(topic=t.base(name)).set(lag)
            m.jobs.set(len(pipeline.jobs))
            m.count_drops({"records": sum(st.dropped for st in pipeline.comm_stage.comms.values())})
            newest = max(pipeline.comm_clock.max_ns, pipeline.job_clock.max_ns)
            if newest:
                m.event_age.set(time.time() - newest / 1e9)

    return app
