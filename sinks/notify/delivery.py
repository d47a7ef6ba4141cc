"""Delivery: one worker thread and one bounded queue per destination, so a destination
that fails or hangs never delays the others. Each POST is retried with exponential
backoff; a notification that still fails is counted and logged, and delivery goes on.
Each courier counts in its `DeliveryStats` and in the shared `NotifyMetrics`."""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from commwatch.metrics import NotifyMetrics
from commwatch.sinks.notify.destinations import Destination
from commwatch.sinks.notify.routing import Notification

log = logging.getLogger(__name__)

QUEUE_MAX = 1000


@dataclass
class DeliveryStats:
    sent: int = 0
    failed: int = 0
    retries: int = 0
    dropped: int = 0


def post_json(url: str, body: object, timeout_s: float, headers: tuple[tuple[str, str], ...] = ()) -> int:
    req = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"), method="POST",
                                 headers={"Content-Type": "application/json", **dict(headers)})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # raises HTTPError on 4xx/5xx
        return resp.status


class Courier:
    """Delivers notifications to one destination from its own thread."""

    def __init__(self, dest: Destination, attempts: int = 4, backoff_s: float = 0.5, timeout_s: float = 5.0,
                 metrics: NotifyMetrics | None = None):
        self.dest = dest
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.stats = DeliveryStats()
        m = metrics if metrics is not None else NotifyMetrics()
        self._sent, self._failed, self._retries, self._dropped = (
            c.labels(destination=dest.name) for c in (m.sent, m.failed, m.retries, m.dropped))
        self.queue: queue.Queue[Notification | None] = queue.Queue(QUEUE_MAX)
        self.thread = threading.Thread(target=self._loop, name=f"notify-{dest.name}", daemon=True)
        self.thread.start()

    def submit(self, n: Notification) -> None:
        try:
            self.queue.put_nowait(n)
        except queue.Full:
            self.stats.dropped += 1
            self._dropped.inc()
            log.warning("%s: queue full, notification for job %s dropped", self.dest.name, n.job)

    def close(self, timeout_s: float = 10.0) -> None:
        self.queue.put(None)
        self.thread.join(timeout_s)

    def _loop(self) -> None:
        while (n := self.queue.get()) is not None:
            try:
                self._deliver(n)
            finally:
                self.queue.task_done()

    def _deliver(self, n: Notification) -> None:
        body = self.dest.payload(n)
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            try:
                post_json(self.dest.url, body, self.timeout_s, self.dest.headers)
                self.stats.sent += 1
                self._sent.inc()
                return
            except (urllib.error.URLError, OSError, ValueError) as exc:
                if attempt == self.attempts:
                    self.stats.failed += 1
                    self._failed.inc()
                    log.warning("%s: giving up on job %s after %d attempts: %s", self.dest.name, n.job, attempt, exc)
                    return
                self.stats.retries += 1
                self._retries.inc()
                time.sleep(delay)
                delay *= 2


class Dispatcher:
    """Fans each notification out to every destination's courier; all count in `metrics`."""

    def __init__(self, destinations: list[Destination], metrics: NotifyMetrics | None = None,
                 **courier_kw: float):
        self.metrics = metrics if metrics is not None else NotifyMetrics()
        self.couriers = [Courier(d, metrics=self.metrics, **courier_kw) for d in destinations]

    def send(self, n: Notification) -> None:
        for c in self.couriers:
            if c.dest.refresh or not n.refresh:
                c.submit(n)

    def idle(self) -> bool:
        """Every notification handed over so far was delivered or given up."""
        return all(c.queue.unfinished_tasks == 0 for c in self.couriers)

    def drain(self, timeout_s: float = 10.0) -> None:
        """Wait until every queued notification was delivered or given up."""
        deadline = time.monotonic() + timeout_s
        for c in self.couriers:
            while c.queue.unfinished_tasks and time.monotonic() < deadline:
                time.sleep(0.01)

    def close(self) -> None:
        for c in self.couriers:
            c.close()
