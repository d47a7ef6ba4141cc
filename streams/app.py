"""The live pipeline: one faust app (service, timers, producer of incidents) around the
detector core, with two halves that each read their topics a poll at a time
(`streams/poll_reader.py`: aiokafka in the worker's event loop, one consumer group each).

- comm half: `cw.calls.v1` + `cw.progress.v1` (key `{job}/{comm}`) -> `CommStage` ->
  reports on `cw.internal.reports.v1` (key `{job}`); its window reports also go to
  `cw.internal.windows.v2` (one message per window) for the ClickHouse sink, both produced
  with librdkafka (`streams/report_out.py`). One validation pass over a poll's call
  batches, the detector fed at once.
- job half: reports + `cw.topology.v1` + `cw.steps.v1` + `cw.hw.v1` (key `{job}`, partitions
  by range: all of a job on one worker) -> `JobStage` -> incidents on `cw.alerts.v1`.

Neither goes through faust's per-event agents: each message cost ~190 us there, and each
hop a turn of the loop; a worker busy with calls starved faust's job agent until no alert
came at all. The halves alternate poll by poll.

A message that does not decode goes to `cw.deadletter.v1` unchanged with its reason
(`streams/deadletter.py`), is counted, and the stream goes on.

Both halves drive one `Detector` (`streams/detect/detector.py`), the object `commwatch
replay` runs, in the one event loop.

Time. Each job's now is its own newest event time (the Kafka timestamp, which producers
set to the event's `ts_ns`, exactly as a capture file's `ts_ns`) plus the wall-clock time
elapsed since it was seen, so a job that goes fully silent still ages and no job's clock
moves another's. A timer ticks every `TICK_S`. At start-up, while a partition has not
delivered yet, every job is *held*: its clock does not run on and nothing that concludes
from silence is judged for it. Later a job whose input is behind is still judged: what
stage 1 says of a comm whose messages are behind is stale (`seen_ns`), and stage 2 concludes
nothing from stale comms. A poll that spans a job's ticks (a backlog) is fed in runs with the
job ticked between them, as replay does.

State. Detector state is kept in memory, not in faust tables. After a restart the
consumer group resumes from its committed offsets and the detectors rebuild from the
progress heartbeats (every node sends one per comm per `heartbeat_period_s`): a hang is
seen again one heartbeat period after restart at the latest, because heartbeats carry
each rank's `started`/`completed` and `t_last_start_ns`; slow-rank windows refill after
`window_instances` collectives. The `AlertLedger` keeps a restarted worker from
re-announcing incidents that are already open (ids are stable).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from pathlib import Path
from typing import Any, Callable

import faust
from faust.app.base import BootStrategy

from commwatch import messages, topics
from commwatch.capture import Message
from commwatch.decode import CallBatch, decode_message, decode_messages
from commwatch.metrics import StreamMetrics
from commwatch.settings import Settings, SettingsError
from commwatch.streams.poll_reader import PollReader
from commwatch.streams.deadletter import error_headers
from commwatch.streams.ledger import AlertLedger
from commwatch.streams.liveness import Liveness, TopicKeeper
from commwatch.streams.report_out import REPORTS, ReportOut, decode_bundle
from commwatch.wire import WireError

log = logging.getLogger(__name__)

TICK_S = 0.5
STARTUP_GRACE_S = 30.0
LAG_EVERY_S = 2.0
LET_GO_S = 15.0  # a partition not assigned here this long went to another worker (`Pipeline.let_go`)
FORGET_S = 30.0  # what the detector forgot is forgotten by the partition bookkeeping this often (`Pipeline.forget`)
HEALTH_EVERY_NS = 1_000_000_000  # a job's health snapshot is published this often (its event time)


def stream_topics(settings: Settings) -> list[str]:
    """Every topic the worker needs to exist: the contract's and the internal ones."""
    return settings.topics.all() + [settings.topics.name(n) for n in (REPORTS, topics.WINDOWS, topics.HEALTH)]


def check_partitions(settings: Settings) -> None:
    """Each half's input topics must have one partition count: a comm's calls and heartbeats
    (key `{job}/{comm}`), and a job's reports, topology, steps and hw (key `{job}`), land on
    the same partition number of each only then, and partitions are assigned by range, the
    same numbers to one worker (`poll_reader.py`). Topics made before the worker (a producer
    that started first, on a broker that creates topics on first use with its own default)
    may differ: the worker refuses to start, naming them, rather than split a comm or a job
    between workers. Raises `SettingsError`."""
    from commwatch.kafka import partition_counts

    t = settings.topics
    halves = ((t.calls, t.progress), (t.name(REPORTS), t.topology, t.steps, t.hw))
    counts = partition_counts(settings, settings.kafka_bootstrap, [n for half in halves for n in half])
    for half in halves:
        if len({counts[n] for n in half if n in counts}) > 1:
            listed = ", ".join(f"{n} has {counts[n]}" for n in half if n in counts)
            raise SettingsError(
                f"COMMWATCH_KAFKA_PARTITIONS: the topics a worker reads together must have one partition "
                f"count ({listed}): give them all the largest (kafka-topics --alter --partitions N), or "
                f"recreate them with COMMWATCH_KAFKA_PARTITIONS set, before starting workers")


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


LEARN_SHARE = 4  # node clocks are learnt from the last 1/LEARN_SHARE of a progress partition's records in a poll


def _learnable(polled: list, reader, kept: list) -> list[bool]:
    """Per kept record, whether node clocks may be learnt from it (`node_lag.py`): heartbeats
    only (every node sends them, hung or not: a batch is dated by its ranks' node), in the
    last quarter of the records a poll read of a partition, and only when it read that
    partition to its end. Those just came; the rest waited in the broker, and a backlog's
    receipt time says how long they waited, not how far their clocks are off (read at once,
    a hung job's last call batches seemed their node's clock 11 s behind, and its hang was
    never alerted)."""
    cut: dict[Any, int] = {}
    for tp, records in polled:
        if tp.topic.endswith(topics.PROGRESS) and (reader.highwater(tp) or 1 << 62) <= records[-1].offset + 1:
            cut[tp] = records[len(records) - 1 - len(records) // LEARN_SHARE].offset
    return [r.offset >= cut.get((r.topic, r.partition), 1 << 62) for r in kept]


class Pipeline:
    """The worker's engine-free half: the detector core's two halves, wall-clock reference,
    per-job catch-up state, dead-letter decisions, metrics."""

    def __init__(self, settings: Settings, metrics: StreamMetrics, ledger: AlertLedger | None = None,
                 wall_ns: Callable[[], int] = time.time_ns):
        from commwatch.streams.detect import Detector

        self.settings = settings
        self.metrics = metrics
        self.ledger = ledger or AlertLedger()
        self.detector = Detector(settings)
        self.detector.held = self.held
        self.wall_ns = wall_ns
        self.jobs: set[str] = set()
        self.job_parts: dict[str, set] = {}  # job -> partitions its messages came from
        self.comm_parts: dict[Any, set[tuple[str, int]]] = {}  # calls/progress partition -> (job, comm) read from it
        self._away: dict[Any, float] = {}  # partition read before -> since when it is not assigned here (monotonic)
        self._away_jobs: set[str] = set()  # jobs whose every partition is away, not let go yet: held
        self._away_comms: set[tuple[str, str]] = set()  # (job, comm hex) read from a partition away: not reported
        # at start-up, a partition not read yet: every job is held (from the start: a poll
        # may come before the first lag check, and a restarted worker's first poll may hold
        # one partition's heartbeats and not another's)
        self.unread = True
        self._forgot_at = 0.0
        self.health_at: dict[str, int] = {}
        self.newest_ns = 0
        self.started = time.monotonic() - process_age_s()
        self.first_processed_s: float | None = None

    def _seen(self, base: str, ts_ns: int, job: str, tp: Any, count: int = 1) -> None:
        """`count` messages of `base` from `job` (the newest at `ts_ns`) were read from `tp`."""
        self.metrics.messages.labels(topic=base).inc(count)
        self.jobs.add(job)
        if tp is not None:
            self.job_parts.setdefault(job, set()).add(tp)
        self.newest_ns = max(self.newest_ns, ts_ns)
        if self.first_processed_s is None:
            self.first_processed_s = time.monotonic() - self.started
            log.info("first message processed %.2f s after the process started", self.first_processed_s)

    def let_go(self, comm_now: set, job_now: set, mono: float | None = None) -> None:
        """The readers' assignments now: the comms read from a calls or progress partition
        that has not been this worker's for `LET_GO_S`, and the jobs none of whose reports,
        topology, steps or hw partitions has, are dropped (`Detector.let_go`). A partition
        away for less (a rebalance under way, an assignment not yet whole), or an empty
        assignment, drops nothing: partitions that come back keep their state. Meanwhile
        what is away is not judged: a job is held (`held`), a comm not reported
        (`comm_tick`): no data of theirs comes here any more, and judged for want of it, a
        hung job whose partitions went to a worker that joined was resolved "not seen for
        10 s" here while the other carried it on, and this worker's stale reports of a comm
        would reach the stage 2 that reads the other worker's fresh ones."""
        mono = time.monotonic() if mono is None else mono
        held = comm_now | job_now
        for tp in held:
            self._away.pop(tp, None)

        def gone(tp) -> bool:
            return mono - self._away.setdefault(tp, mono) >= LET_GO_S

        comms: set[tuple[str, int]] = set()
        if comm_now:
            away: set[tuple[str, str]] = set()
            for tp in [tp for tp in self.comm_parts if tp not in comm_now]:
                if gone(tp):
                    comms |= self.comm_parts.pop(tp)
                else:
                    away.update((job, f"{comm:016x}") for job, comm in self.comm_parts[tp])
            self._away_comms = away
        jobs = []
        if job_now:
            comm_topics = (self.settings.topics.calls, self.settings.topics.progress)
            self._away_jobs = set()
            for job, tps in list(self.job_parts.items()):
                mine = {tp for tp in tps if tp.topic not in comm_topics}
                if mine and not mine & job_now:
                    if all([gone(tp) for tp in mine]):
                        jobs.append(job)
                        del self.job_parts[job]
                        self.jobs.discard(job)
                    else:
                        self._away_jobs.add(job)
        if comms or jobs:
            log.info("partitions gone to another worker: %d comms and %d jobs let go", len(comms), len(jobs))
            self.detector.let_go(comms, jobs)
        if mono - self._forgot_at >= FORGET_S:
            self._forgot_at = mono
            self.forget()

    def forget(self) -> None:
        """Drop the partitions remembered for comms and jobs the detector no longer holds
        (idle, ended, pruned): a worker watching job after job for weeks kept every one's
        comms and partitions, and counted every job it had ever seen as watched."""
        held = self.detector.comm_stage.comms
        for tp, keys in list(self.comm_parts.items()):
            keys.intersection_update(held)
            if not keys:
                del self.comm_parts[tp]
        live = self.detector.comm_stage.by_job.keys() | self.detector.job_stage.jobs.keys()
        for job in [j for j in self.jobs if j not in live]:
            self.jobs.discard(job)
            self.job_parts.pop(job, None)

    def held(self, job: str) -> bool:
        """At start-up, before every partition has delivered, nothing is concluded for any job
        (a partial view). Later, a job whose input partition is behind is still judged: what
        stage 1 knows of a comm whose input is behind is stale (`seen_ns`), and stage 2 draws
        no conclusion from stale comms. A job whose every partition went to another worker
        is held till it is let go (`let_go`)."""
        return self.unread or job in self._away_jobs

    def comm_messages(self, items: list[tuple[str, Message, Any]],
                      learn: list[bool] | None = None) -> tuple[list[dict], list[WireError | None]]:
        """Stage 1 for the calls/progress messages one poll returned, in order: their call
        batches validated together (`decode_messages`, one numpy pass), then fed to the
        detector at once (`Detector.comm_feed`). Returns the reports, and per message None
        or the `WireError` that refused it (the others go on). `learn`: per item, whether node
        clocks are learnt from it (`_learnable`; None: all)."""
        decoded = decode_messages([m for _, m, _ in items], self.settings.max_message_bytes)
        errors: list[WireError | None] = []
        good_m: list[Message] = []
        good_d: list = []
        learnt: list[bool] | None = None if learn is None else []
        records = 0
        seen: dict[tuple[str, str, Any], list[int]] = {}  # (topic, job, partition) -> [messages, newest]
        for (base, msg, tp), d in zip(items, decoded):
            if isinstance(d, WireError):
                errors.append(d)
                continue
            errors.append(None)
            if type(d) is CallBatch:
                records += d.count
                job, comm = d.job, d.comm
            else:
                job, comm = d["job"], int(d["comm"], 16)
            if tp is not None:
                self.comm_parts.setdefault(tp, set()).add((job, comm))
            got = seen.get((base, job, tp))
            if got is None:
                seen[(base, job, tp)] = [1, msg.ts_ns]
            else:
                got[0] += 1
                got[1] = max(got[1], msg.ts_ns)
            good_m.append(msg)
            good_d.append(d)
            if learnt is not None:
                learnt.append(learn[len(errors) - 1])
        for (base, job, tp), (count, newest) in seen.items():
            self._seen(base, newest, job, tp, count)
        reports = self.detector.comm_feed(good_m, good_d, self.wall_ns(), learnt) if good_m else []
        self.metrics.records.inc(records)
        return reports, errors

    def job_message(self, base: str, msg: Message, tp: Any = None) -> list[dict]:
        """Stage 2 for one report or topology/steps/hw message; raises `WireError`."""
        if base == REPORTS:
            bundle = decode_report(msg)
            self._seen(base, msg.ts_ns, bundle["job"], tp)
            out: list[dict] = []
            for report in bundle["reports"]:
                out.extend(self.detector.job_feed_report(report, self.wall_ns()))
            return out
        decoded = decode_message(msg, self.settings.max_message_bytes)
        self._seen(base, msg.ts_ns, decoded["job"], tp)
        return self.detector.job_feed(msg, decoded, self.wall_ns())

    def comm_tick(self) -> list[dict]:
        reports = self.detector.comm_tick(self.wall_ns())
        if self._away_comms:  # comms of partitions gone elsewhere: the worker that reads them reports them
            reports = [r for r in reports if (r["job"], r.get("comm")) not in self._away_comms]
        return reports

    def job_tick(self) -> list[dict]:
        return self.detector.job_tick(self.wall_ns())

    def admit(self, incidents: list[dict]) -> list[dict]:
        """Incidents worth publishing (not repeats), accounted in the metrics and the log."""
        out = []
        for inc in incidents:
            inc = self._carried_on(inc)
            if self.ledger.admit(inc):
                self.metrics.incident(inc)
                out.append(inc)
            elif inc["status"] == "open":  # open already (said before a restart, or by another worker): carried on here
                self.metrics.incident(inc, published=False)
        return out

    def _carried_on(self, inc: dict) -> dict:
        """An incident a restarted detector re-found under a new id (`AlertLedger.adopted`) as
        the one open before: its id and opening time, at the higher severity. Said again, it
        repeats that one (the ledger drops it), or, more severe now, updates it."""
        before = self.ledger.adopted(inc)
        if before is None:
            return inc
        was = before.get("severity") or inc["severity"]
        opened = int(before.get("opened_ns") or inc["opened_ns"])
        if not self.detector.adopt(inc["job"], inc["incident"], before["incident"], opened, was):
            return inc
        sev = min(inc["severity"], was)
        return {**inc, "incident": before["incident"], "opened_ns": opened, "severity": sev,
                "status": "update" if sev != was else "open"}

    def health(self) -> list[dict]:
        """Snapshots of the jobs whose stage 2 runs here and whose last one is a period old
        (each job's own event time)."""
        out = []
        ref = self.wall_ns()
        for job in self.detector.jobs():
            now = self.detector.job_clocks.now(job, ref, not self.held(job))
            if now - self.health_at.get(job, 0) >= HEALTH_EVERY_NS:
                self.health_at[job] = now
                out.append(self.detector.health(job, ref))
        for job in [j for j in self.health_at if j not in self.detector.job_stage.jobs]:
            del self.health_at[job]
        return out

    def dead(self, err: WireError) -> None:
        self.metrics.deadletter.labels(reason=err.reason).inc()


def decode_report(msg: Message) -> dict:
    """A bundle of stage-1 reports of one job from the internal topic; raises `WireError`."""
    try:
        bundle = decode_bundle(msg.value)
    except ValueError as exc:  # msgspec's DecodeError is one
        raise WireError("bad_json", f"report is not JSON ({exc})") from None
    if not isinstance(bundle, dict) or bundle.get("type") != "bundle" or not isinstance(bundle.get("job"), str) \
            or not isinstance(bundle.get("reports"), list):
        raise WireError("not_object", "report is not a bundle object with a job and reports")
    for rep in bundle["reports"]:
        if not isinstance(rep, dict) or rep.get("job") != bundle["job"] or not isinstance(rep.get("type"), str) \
                or not isinstance(rep.get("ts_ns"), int):
            raise WireError("bad_field", "a report of the bundle has no type, ts_ns or the bundle's job")
    return bundle


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

    # faust's consumer is not started: the halves read with their own clients (no faust agent)
    app.boot_strategy = BootStrategy(app, enable_kafka_consumer=False)

    def topic(*names: str) -> Any:
        return app.topic(*names, key_type=bytes, value_type=bytes, key_serializer="raw",
                         value_serializer="raw", allow_empty=True)

    alerts_out = topic(t.alerts)
    health_out = topic(t.name(topics.HEALTH))
    deadletter_out = topic(t.deadletter)
    assigned_at: dict[Any, float] = {}
    creds = broker_credentials(settings)
    reader = PollReader(settings, [t.calls, t.progress], creds, group="commwatch-comm")
    job_reader = PollReader(settings, [t.name(REPORTS), t.topology, t.steps, t.hw], creds, group="commwatch-job")
    report_out = ReportOut(settings)

    # Published messages carry their event time as the Kafka timestamp, like every input.
    # Stage-1 reports go through librdkafka (`ReportOut`); incidents, health and dead
    # letters (few) through faust: agents await each send (backpressure), the timer only
    # queues (it must not stall).
    async def publish_reports(reports: list[dict]) -> None:
        await report_out.publish(reports)
        pipeline.metrics.reports.inc(len(reports))

    async def publish_incidents(incidents: list[dict], wait: bool = True) -> None:
        for inc in pipeline.admit(incidents):
            log.log(logging.INFO if inc["status"] in ("open", "resolved") else logging.DEBUG,
                    "incident %s: %s %s %s in job %s, culprit ranks %s on %s: %s", inc["incident"], inc["status"],
                    inc["severity"], inc["kind"], inc["job"], inc["culprit_ranks"], inc["culprit_nodes"],
                    inc["summary"])
            kw = {"key": str(inc["job"]).encode(), "value": messages.dumps(inc), "timestamp": inc["ts_ns"] / 1e9}
            if wait:
                await alerts_out.send(**kw)
            else:
                alerts_out.send_soon(**kw)

    async def dead_letter(m: Any, err: WireError, timestamp: float) -> None:
        """`m`: an aiokafka record (topic, partition, offset, key, value)."""
        pipeline.dead(err)
        log.debug("dead-letter %s[%d]@%d: %s", m.topic, m.partition, m.offset, err)
        await deadletter_out.send(key=m.key, value=m.value, timestamp=timestamp,
                                  headers=error_headers(err, m.topic, m.partition, m.offset))

    @app.task
    async def comm_half() -> None:
        """Calls and progress, a poll at a time (`PollReader`): one validation pass over its
        call batches, the detector fed at once, one publication of its reports. It starts
        once the job half's reader has partitions (or after `STARTUP_GRACE_S`): read alone,
        a backlog would be judged before the job half could see its jobs."""
        began = time.monotonic()
        while not job_reader.assignment() and time.monotonic() - began < STARTUP_GRACE_S:
            await asyncio.sleep(0.1)
        try:
            while True:
                polled = await reader.poll()
                liveness.beat("consume")
                if not polled:
                    continue
                items, kept = [], []
                for tp, records in polled:
                    base = t.base(tp.topic)
                    for r in records:
                        try:
                            items.append((base, to_message(base, r.key, r.timestamp * 1_000_000, r.value), tp))
                            kept.append(r)
                        except WireError as err:
                            await dead_letter(r, err, r.timestamp / 1000)
                if len(polled) > 1:  # partitions merged in time order, as one stream would deliver them
                    order = sorted(range(len(items)), key=lambda i: items[i][1].ts_ns)
                    items, kept = [items[i] for i in order], [kept[i] for i in order]
                learn = _learnable(polled, reader, kept)
                reports, errors = pipeline.comm_messages(items, learn) if items else ([], [])
                for r, err in zip(kept, errors):
                    if err is not None:
                        await dead_letter(r, err, r.timestamp / 1000)
                await publish_reports(reports)
        finally:  # the worker stops: its client leaves the group, its reports are delivered
            await reader.stop()
            left = report_out.close()
            if left:
                log.warning("%d stage-1 report or window message(s) left undelivered at stop", left)

    @app.task
    async def job_half() -> None:
        """Reports, topology, steps and hw, a poll at a time (`PollReader`, partitions by
        range: all of a job's on this worker), each message handled in partition order; a bad
        one is dead-lettered and the others go on; one publication of the poll's incidents."""
        try:
            while True:
                polled = await job_reader.poll()
                liveness.beat("consume")
                out: list[dict] = []
                for tp, records in polled:
                    base = t.base(tp.topic)
                    for r in records:
                        try:
                            out.extend(pipeline.job_message(
                                base, to_message(base, r.key, r.timestamp * 1_000_000, r.value), tp))
                        except WireError as err:
                            await dead_letter(r, err, r.timestamp / 1000)
                if out:
                    await publish_incidents(out)
        finally:
            await job_reader.stop()

    async def lag_of(names: set[str]) -> tuple[dict[Any, int], bool]:
        """Messages behind the partition end, per assigned partition of `names`, after the
        last processed offset; and whether a partition with messages to read has delivered
        nothing since it was assigned, less than `STARTUP_GRACE_S` ago (at start-up, before
        every partition is read, no job's detection may conclude from those read first).
        Nothing assigned yet counts as unread too."""
        lags, unread = {}, False
        mono = time.monotonic()
        for consumer in (job_reader, reader):
            done = consumer.processed
            for tp in consumer.assignment():
                if tp.topic not in names:
                    continue
                last = done.get(tp)
                high = consumer.highwater(tp) or 0
                if last is None:
                    first_seen = assigned_at.setdefault(tp, mono)
                    if high > 0 and mono - first_seen < STARTUP_GRACE_S:
                        try:
                            pos = await consumer.position(tp)
                        except Exception:  # noqa: BLE001 - no position yet: count it unread
                            pos = None
                        unread |= pos is None or pos < high
                    lags[tp] = 0
                else:
                    lags[tp] = max(0, high - (last + 1))
        if not (reader.assignment() and job_reader.assignment()) and mono - pipeline.started < STARTUP_GRACE_S:
            unread = True  # a reader's group has not assigned it partitions yet: a partial view
        return lags, unread or not lags  # nothing assigned yet: nothing is known

    lag_state = {"at": 0.0}

    @app.timer(TICK_S)
    async def tick() -> None:
        liveness.beat("tick")
        lags, unread = await lag_of({t.calls, t.progress, t.name(REPORTS), t.topology, t.steps, t.hw})
        assignment = job_reader.assignment() | reader.assignment()
        liveness.assigned(((tp.topic, tp.partition) for tp in assignment), sum(lags.values()), unread)
        if keeper is not None:
            keeper.poll()
            liveness.problem = keeper.error
        pipeline.unread = unread
        pipeline.let_go(reader.assignment(), job_reader.assignment())
        await publish_reports(pipeline.comm_tick())
        await publish_incidents(pipeline.job_tick(), wait=False)
        for snap in pipeline.health():
            pipeline.metrics.observe_health(snap)
            health_out.send_soon(key=snap["job"].encode(), value=messages.dumps(snap), timestamp=snap["ts_ns"] / 1e9)
        now = time.monotonic()
        if now - lag_state["at"] >= LAG_EVERY_S:
            lag_state["at"] = now
            m = pipeline.metrics
            per_topic: dict[str, int] = {}
            for tp, lag in lags.items():
                per_topic[tp.topic] = per_topic.get(tp.topic, 0) + lag
            for name, lag in per_topic.items():
                m.consumer_lag.labels(topic=t.base(name)).set(lag)
            m.jobs.set(len(pipeline.jobs))
            drops = pipeline.detector.drops()
            failed = report_out.failed()
            if failed:
                drops["report_undelivered"] = failed
            m.count_drops(drops)
            if pipeline.newest_ns:
                m.event_age.set(time.time() - pipeline.newest_ns / 1e9)

    return app
