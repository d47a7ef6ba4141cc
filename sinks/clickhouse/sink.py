"""`Sink`: Kafka topics -> ClickHouse, at least once, with no duplicate visible.

One process owns the sink (`commwatch sink`): the embedded chdb database admits a single
owning process, so the sink does not run inside the stream workers.

- Messages are buffered per table and flushed at `sink_flush_rows` rows or after
  `sink_flush_s` seconds, whichever comes first.
- Kafka offsets are committed only after every table of a flush was inserted.
- A due batch is sealed and written; one that fails stays sealed (same rows, same
  tokens) and is retried with exponential backoff (0.2 s .. 10 s) while new messages
  fill the next batch. Once `sink_max_buffer_rows` rows are held in all, the assigned
  partitions are paused (the consumer keeps polling, so it stays in its group) until
  the inserts succeed. Sealed batches are written and committed in order.
- A retried flush carries the same `insert_deduplication_token`s, so rows already written
  by a flush that failed half-way are not written twice. After a crash, Kafka redelivers
  what was not committed in different batches; the replacing engines and their sort
  keys (incident id, `(job, comm, seq, rank, op, peer)` for calls) fold those rows, and
  `SELECT ... FINAL` shows each once.
- A message that cannot be decoded is counted, sent to the dead-letter topic with header
  `cw-error: <reason>: <detail>`, and skipped.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from commwatch import kafka, topics
from commwatch.capture import Message
from commwatch.metrics import SinkMetrics
from commwatch.settings import Settings, SettingsError
from commwatch.sinks.clickhouse.batch import SINK_TOPICS, SinkBatch
from commwatch.sinks.clickhouse.writer import InsertTarget
from commwatch.wire import WireError

log = logging.getLogger(__name__)

BACKOFF_MIN_S = 0.2
BACKOFF_MAX_S = 10.0


@dataclass
class SinkStats:
    messages: int = 0
    rows: int = 0
    flushes: int = 0
    failed_flushes: int = 0
    deadlettered: int = 0
    paused: int = 0


class Sink:
    """Consume the sink topics and write them through `target` (a `ClickHouseWriter`);
    `stats` and `metrics` count what happened."""

    def __init__(self, settings: Settings, target: InsertTarget, group: str = "commwatch-sink",
                 bootstrap: str | None = None, metrics: SinkMetrics | None = None, liveness: Any = None):
        bootstrap = bootstrap or settings.kafka_bootstrap
        if not bootstrap:
            raise SettingsError("COMMWATCH_KAFKA_BOOTSTRAP: `commwatch sink` needs a broker "
                                "(start one with `commwatch up`)")
        self.settings = settings
        self.target = target
        self.bootstrap = bootstrap
        self.group = group
        self.stats = SinkStats()
        self.metrics = metrics if metrics is not None else SinkMetrics()
        self.liveness = liveness  # `streams.liveness.Liveness`, fed each time the poll loop goes round
        self.offsets_ns: dict[str, dict[int, int]] = defaultdict(dict)
        self.batch = self._new_batch()
        self.sealed: list[SinkBatch] = []
        self._stop = threading.Event()
        self._batch_started = 0.0
        self._retry_at = 0.0
        self._backoff = BACKOFF_MIN_S
        self._paused = False
        self.consumer = None
        self.deadletter = None

    def _new_batch(self) -> SinkBatch:
        return SinkBatch(max_message_bytes=self.settings.max_message_bytes, offsets_ns=self.offsets_ns)

    @property
    def held_rows(self) -> int:
        return self.batch.n_rows + sum(b.n_rows for b in self.sealed)

    def stop(self) -> None:
        self._stop.set()

    # ------------------------------------------------------------------------------------
    def run(self, max_flushes: int | None = None, abandon: bool = False) -> SinkStats:
        """Consume until `stop()` (or `max_flushes` successful flushes). A final flush runs
        on the way out unless `abandon` (which drops the batch, as a crash would)."""
        names = [self.settings.topics.name(t) for t in SINK_TOPICS]
        kafka.ensure_topics(self.settings, self.bootstrap, names)
        self.consumer = kafka.consumer(self.settings, self.bootstrap, self.group)
        self.deadletter = kafka.Sender(self.settings, self.bootstrap)
        self.consumer.subscribe(names, on_revoke=self._on_revoke)
        try:
            while not self._stop.is_set() and (max_flushes is None or self.stats.flushes < max_flushes):
                if self.liveness is not None:
                    self.liveness.polled(self.consumer)
                for m in self.consumer.consume(num_messages=1000, timeout=0.05):
                    self._take(m)
                    if self.batch.n_rows >= self.settings.sink_flush_rows and self._due():
                        self._flush()
                        if max_flushes is not None and self.stats.flushes >= max_flushes:
                            break
                if self._due():
                    self._flush()
                self.metrics.buffered.set(self.held_rows)
            if not abandon:
                self._flush(final=True)
        finally:
            if self.held_rows:
                log.warning("leaving %d unwritten rows uncommitted; Kafka redelivers them", self.held_rows)
            self.batch = self._new_batch()
            self.sealed = []
            self.metrics.buffered.set(0)
            self.deadletter.flush(5.0)
            self.consumer.close()
        return self.stats

    # ------------------------------------------------------------------------------------
    def _take(self, m) -> None:
        err = m.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer error: %s", err)
            return
        self.stats.messages += 1
        base = self.settings.topics.base(m.topic())
        self.metrics.messages.labels(topic=base).inc()
        if not self.batch.spans:
            self._batch_started = time.monotonic()
        self.batch.note(m.topic(), m.partition(), m.offset())
        raw_key = m.key()
        try:
            key = raw_key.decode("utf-8") if raw_key is not None else None
        except UnicodeDecodeError:
            self._dead(m, WireError("bad_key", "key is not UTF-8"))
            return
        _kind, ts_ms = m.timestamp()
        msg = Message(base, key, max(ts_ms, 0) * 1_000_000, m.value() or b"")
        try:
            self.batch.add(msg)
        except WireError as exc:
            self._dead(m, exc)

    def _dead(self, m, exc: WireError) -> None:
        self.stats.deadlettered += 1
        self.metrics.deadletter.labels(reason=exc.reason).inc()
        log.debug("dead-lettering %s[%d]@%d: %s", m.topic(), m.partition(), m.offset(), exc)
        self.deadletter.send(self.settings.topics.deadletter, m.key(), m.value() or b"",
                             headers=[(topics.ERROR_HEADER, str(exc).encode("utf-8"))])

    def _due(self) -> bool:
        if time.monotonic() < self._retry_at:
            return False
        if self.sealed:
            return True
        return bool(self.batch.spans) and (
            self.batch.n_rows >= self.settings.sink_flush_rows
            or time.monotonic() - self._batch_started >= self.settings.sink_flush_s)

    def _flush(self, final: bool = False) -> bool:
        """Seal the current batch and write every sealed batch in order; False on failure."""
        if self.batch.spans:
            self.sealed.append(self.batch)
            self.batch = self._new_batch()
        while self.sealed:
            batch = self.sealed[0]
            positions = batch.commit_positions()
            table_rows = batch.table_rows()
            try:
                rows = batch.flush(self.target)
            except Exception as exc:  # ClickHouse down, network, server error: retry later
                self._failed(exc, final)
                return False
            self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in positions.items()],
                                 asynchronous=False)
            self.sealed.pop(0)
            self.stats.rows += rows
            self.stats.flushes += 1
            self.metrics.flushes.inc()
            for table, n in table_rows.items():
                self.metrics.rows.labels(table=table).inc(n)
        self._backoff = BACKOFF_MIN_S
        self._retry_at = 0.0
        if self._paused:
            self.consumer.resume(self.consumer.assignment())
            self._paused = False
            self.metrics.paused.set(0)
        return True

    def _failed(self, exc: Exception, final: bool) -> None:
        self.stats.failed_flushes += 1
        self.metrics.insert_errors.inc()
        self._retry_at = time.monotonic() + self._backoff
        log.warning("insert of %d rows failed (%s); retrying in %.1f s", self.held_rows, exc, self._backoff)
        self._backoff = min(self._backoff * 2, BACKOFF_MAX_S)
        if self.held_rows >= self.settings.sink_max_buffer_rows and not self._paused and not final:
            self.consumer.pause(self.consumer.assignment())
            self._paused = True
            self.stats.paused += 1
            self.metrics.paused.set(1)
            log.warning("holding %d rows, the bound: consumption paused", self.held_rows)

    def _on_revoke(self, consumer, partitions) -> None:
        """Partitions leave this sink: write what we hold, or drop it for the next owner."""
        if (self.batch.spans or self.sealed) and not self._flush(final=True):
            log.warning("dropping %d unwritten rows on rebalance; Kafka redelivers them", self.held_rows)
            self.batch = self._new_batch()
            self.sealed = []
        self._paused = False
        self.metrics.paused.set(0)
