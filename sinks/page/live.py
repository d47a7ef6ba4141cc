"""Live state for the page from Kafka: job health snapshots (`cw.internal.health.v1`) and
incident events (`cw.alerts.v1`), read by one background thread into a `LiveState`.

The reader joins no consumer group and commits nothing: every page process sees every
partition. It starts each partition a bounded backlog before its end (the last few minutes
of snapshots and the recent incidents), so a page started mid-run shows the heatmap and the
incidents at once. Partitions added later are picked up within `REFRESH_S`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from typing import Any

from commwatch import messages, topics
from commwatch.settings import Settings
from commwatch.sinks.page.state import MAX_COLUMNS, LiveState
from commwatch.wire import WireError

log = logging.getLogger(__name__)

BACKLOG = {topics.HEALTH: MAX_COLUMNS, topics.ALERTS: 2000}  # messages per partition read at start
REFRESH_S = 10.0  # look for new partitions (and forget idle jobs) this often
RETRY_S = 2.0


class LiveFeed:
    """`start()` a daemon thread that feeds `state` until `stop()`."""

    def __init__(self, settings: Settings, state: LiveState):
        self.settings = settings
        self.state = state
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None
        self.connected = False
        self.error: str | None = None
        self.messages = 0
        self.refused = 0
        self.ready = threading.Event()  # set once every partition is assigned
        self._assigned: set[tuple[str, int]] = set()
        self._backlog_end: dict[tuple[str, int], int] = {}  # offsets below this were written before start

    def start(self) -> "LiveFeed":
        self.thread = threading.Thread(target=self._run, name="page-live-feed", daemon=True)
        self.thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout_s)

    def status(self) -> dict[str, Any]:
        return {"connected": self.connected, "error": self.error, "messages": self.messages,
                "refused": self.refused + self.state.refused, "bootstrap": self.settings.kafka_bootstrap}

    # ------------------------------------------------------------------------------------
    def _run(self) -> None:
        from commwatch.kafka import consumer

        while not self.stop_event.is_set():
            c = None
            try:
                c = consumer(self.settings, self.settings.kafka_bootstrap,
                             group=f"commwatch-page-{uuid.uuid4().hex[:12]}")
                self._follow(c)
            except Exception as exc:  # the broker is away: say so on the page, try again
                self.connected = False
                self.error = f"{type(exc).__name__}: {exc}"
                log.warning("live feed: %s; retrying in %.0f s", self.error, RETRY_S)
                self.stop_event.wait(RETRY_S)
            finally:
                if c is not None:
                    c.close()
                self._assigned.clear()

    def _follow(self, c: Any) -> None:
        names = {self.settings.topics.name(b): b for b in BACKLOG}
        next_refresh = 0.0
        while not self.stop_event.is_set():
            if time.monotonic() >= next_refresh:
                complete = self._assign_new(c, names)
                self.state.forget_idle()
                next_refresh = time.monotonic() + (REFRESH_S if complete else RETRY_S / 2)
            for msg in c.consume(500, 0.5):
                err = msg.error()
                if err is not None:
                    if not err.retriable() and err.fatal():
                        raise RuntimeError(str(err))
                    continue
                self._take(names.get(msg.topic()), msg)

    def _assign_new(self, c: Any, names: dict[str, str]) -> bool:
        """Assign partitions not read yet; returns whether every topic exists."""
        from confluent_kafka import TopicPartition

        meta = c.list_topics(timeout=10)
        self.connected, self.error = True, None
        missing = [n for n in names if n not in meta.topics]
        if missing:
            self.error = f"waiting for topics {', '.join(missing)} (no worker has created them yet)"
        new = []
        for name, base in names.items():
            t = meta.topics.get(name)
            if t is None or t.error is not None:
                continue
            for p in t.partitions:
                if (name, p) in self._assigned:
                    continue
                low, high = c.get_watermark_offsets(TopicPartition(name, p), timeout=10)
                self._backlog_end[(name, p)] = high
                new.append(TopicPartition(name, p, max(low, high - BACKLOG[base])))
        if new:
            c.incremental_assign(new)
            self._assigned |= {(tp.topic, tp.partition) for tp in new}
            log.info("live feed: reading %d more partitions", len(new))
        if not missing:
            self.ready.set()
        return not missing

    def _take(self, base: str | None, msg: Any) -> None:
        self.messages += 1
        live = msg.offset() >= self._backlog_end.get((msg.topic(), msg.partition()), 0)
        try:
            if base == topics.HEALTH:
                if not self.state.feed_health(json.loads(msg.value()), live=live):
                    log.debug("live feed: not a health snapshot at %s[%d]@%d", msg.topic(), msg.partition(),
                              msg.offset())
            elif base == topics.ALERTS:
                self.state.feed_incident(messages.decode(topics.ALERTS, msg.value()))
        except (ValueError, TypeError, WireError) as exc:
            self.refused += 1
            log.debug("live feed: skipped %s[%d]@%d: %s", msg.topic(), msg.partition(), msg.offset(), exc)
