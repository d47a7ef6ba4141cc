"""What has been said on `cw.alerts.v1`, so a restarted worker repeats nothing.

Detector state lives in memory and is rebuilt from heartbeats after a restart; the
rebuilt detector then re-opens incidents that were already open before. The worker reads
the alerts topic at start, and on as other workers write it, remembers the last status of
every incident, and drops an event that would only repeat it: no incident is lost (a resolution still goes out) and none
is duplicated. A hang's id is stable (the job, the communicator and the sequence); a slow
rank's, a lost node's or a slowdown's carries the time it opened, so the rebuilt detector
names it anew: an `open` of an id never seen, for the job, kind and culprits of an incident
still open that this process did not open, is that incident (`adopted`): the worker carries
on under its id (a restart while a slow rank was named opened a second incident for it, and
the first never resolved).

>>> led = AlertLedger()
>>> led.admit({"incident": "j-hang-1", "status": "open"})
True
>>> led.admit({"incident": "j-hang-1", "status": "open"})
False
>>> led.admit({"incident": "j-hang-1", "status": "resolved"})
True
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from commwatch import kafka
from commwatch.settings import Settings

log = logging.getLogger(__name__)


class AlertLedger:
    """Last published status per incident id; `admit()` says whether an event is news.

    An `open` of an incident already open and a `resolved` of one already resolved are
    repeats (what a restarted detector says again); `update`s always pass. `load(follow=True)`
    goes on reading the alerts topic in a thread once it has read it to the end: the other
    workers' incidents are known as they are said, so a worker that takes over a job's
    partitions carries on with its open incidents (`adopted`). What this process says of an
    incident is authoritative for it: read back from the topic, its own events change nothing.
    """

    def __init__(self) -> None:
        self.last: dict[str, str] = {}
        self.suppressed = 0
        self._open: dict[tuple, dict[str, Any]] = {}  # (job, kind, culprits) -> the last event of an open incident
        self._own: set[str] = set()  # ids this process has said something of
        self._lock = threading.RLock()  # `admit` in the worker's loop, `note` in the follower thread
        self._stop = threading.Event()

    @staticmethod
    def _match(inc: dict[str, Any]) -> tuple | None:
        """What names an incident across a restart: its job, kind and culprit ranks (its nodes
        where it names no rank: a lost node); None where it names neither."""
        ranks, nodes = inc.get("culprit_ranks") or (), inc.get("culprit_nodes") or ()
        if not ranks and not nodes:
            return None
        return inc.get("job"), inc.get("kind"), tuple(sorted(ranks)), () if ranks else tuple(sorted(nodes))

    def _track(self, inc: dict[str, Any]) -> None:
        iid = inc.get("incident", "")
        for key in [k for k, ev in self._open.items() if ev.get("incident") == iid]:
            del self._open[key]
        key = self._match(inc)
        if inc.get("status") != "resolved" and key is not None:
            self._open[key] = inc

    def note(self, inc: dict[str, Any]) -> None:
        """An event read from the alerts topic (another process's, or an earlier run's)."""
        with self._lock:
            if inc.get("incident", "") in self._own:
                return
            self.last[inc.get("incident", "")] = inc.get("status", "")
            self._track(inc)

    def adopted(self, inc: dict[str, Any]) -> dict[str, Any] | None:
        """For the `open` of an incident id never seen: the last event of an incident still
        open with the same job, kind and culprits that this process did not say (a restarted
        worker's detector re-finding it, or one taking over another's partitions), else None.
        Incidents that name no rank and no node (a job's slowdown nobody explains, a stage's
        imbalance) are not matched."""
        with self._lock:
            if inc.get("status") != "open" or inc.get("incident", "") in self.last:
                return None
            key = self._match(inc)
            before = self._open.get(key) if key is not None else None
            if before is None or before.get("incident") in self._own:
                return None
            return before

    def admit(self, inc: dict[str, Any]) -> bool:
        iid, status = inc.get("incident", ""), inc.get("status", "")
        with self._lock:
            self._own.add(iid)
            before = self.last.get(iid)
            repeat = (status == "open" and before in ("open", "update")) or (status == "resolved" and before == status)
            if repeat:
                self.suppressed += 1
                if self.suppressed == 1 or self.suppressed % 100 == 0:
                    log.info("incident %s is already %s; not repeated (%d repeats so far)", iid, before,
                             self.suppressed)
                return False
            self.last[iid] = status
            self._track(inc)
            return True

    def open_count(self) -> int:
        with self._lock:
            return sum(1 for s in self.last.values() if s != "resolved")

    def load(self, settings: Settings, bootstrap: str, timeout_s: float = 10.0, follow: bool = False) -> int:
        """Read the alerts topic from the beginning to its current end; returns events read.
        `follow`: then go on reading it in a daemon thread (`close()` stops it)."""
        topic = settings.topics.alerts
        consumer = kafka.consumer(settings, bootstrap, group=f"{topic}.ledger", **{"enable.partition.eof": True})
        following = False
        try:
            meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
            if meta is None or not meta.partitions:
                return 0
            parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions]
            pending = set()
            for tp in parts:
                lo, hi = consumer.get_watermark_offsets(tp, timeout=timeout_s)
                if hi > lo:
                    pending.add(tp.partition)
            consumer.assign(parts)
            read = 0
            deadline = time.monotonic() + timeout_s
            while pending and time.monotonic() < deadline:
                inc = self._next(consumer, pending)
                if inc is not None:
                    self.note(inc)
                    read += 1
            if pending:
                log.warning("alert ledger: partitions %s of %s not read to the end in %.0f s",
                            sorted(pending), topic, timeout_s)
            if follow:
                threading.Thread(target=self._follow, args=(consumer,), name="alert-ledger", daemon=True).start()
                following = True
            return read
        finally:
            if not following:
                consumer.close()

    @staticmethod
    def _next(consumer: Any, pending: set) -> dict[str, Any] | None:
        """The next incident event read (None: nothing, an error, or not an object); a
        partition read to its end leaves `pending`."""
        msg = consumer.poll(0.2)
        if msg is None:
            return None
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                pending.discard(msg.partition())
            return None
        try:
            inc = json.loads(msg.value())
        except ValueError:
            return None
        return inc if isinstance(inc, dict) else None

    def _follow(self, consumer: Any) -> None:
        try:
            while not self._stop.is_set():
                try:
                    inc = self._next(consumer, set())
                except Exception as exc:  # noqa: BLE001 - the broker gone a while: the client reconnects
                    log.debug("alert ledger: %s", exc)
                    continue
                if inc is not None:
                    self.note(inc)
        finally:
            consumer.close()

    def close(self) -> None:
        self._stop.set()
