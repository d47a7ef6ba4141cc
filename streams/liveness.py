"""Liveness and readiness of a long-running loop (the stream worker, the sink, the notifier),
fed by the loop itself and read by the HTTP server that serves `/metrics`.

- `/livez`: 200 while the loop has made progress within `stall_s`; 503 with the reason
  when it has not. Progress is a beat from the loop's own code (the worker's timer tick
  and each consumed event; the sink's and notifier's poll loop), never from the server's
  thread, which answers even while the loop is stuck.
- `/readyz`: 200 when alive, partitions are assigned and the consumer is caught up
  (lag at most `ready_lag` messages, where the loop measures lag: the worker); 503 with
  the reason otherwise.

Both answer JSON: `{"ok": .., "reason": .., "last": {"tick": age_s, ..}, "assigned": ..,
"lag": .., "partitions": {topic: [p, ..]}}`.

>>> t = [100.0]
>>> live = Liveness(stall_s=30, monotonic=lambda: t[0])
>>> live.beat("tick"); live.assigned([("cw.calls.v1", 0)], lag=0)
>>> live.live()[0], live.ready()[0]
(True, True)
>>> t[0] += 31
>>> ok, body = live.live()
>>> ok, body["reason"]
(False, 'the loop made no progress for 31.0 s (tick; limit 30 s)')
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterable

log = logging.getLogger(__name__)

READY_LAG = 1000  # messages behind the partition ends that still count as caught up


class Liveness:
    """Last progress of a loop, by kind of beat, and its consumer's assignment and lag.

    Beats are plain assignments of a float (safe to read from the server's thread)."""

    def __init__(self, stall_s: float, monotonic: Callable[[], float] = time.monotonic,
                 ready_lag: int = READY_LAG, name: str = "loop"):
        self.stall_s = stall_s
        self.ready_lag = ready_lag
        self.name = name
        self.monotonic = monotonic
        self.started = monotonic()
        self.last: dict[str, float] = {}
        self._partitions: dict[str, list[int]] = {}
        self._lag: int | None = None
        self._assignment_at = float("-inf")
        self._unread = False
        self.problem: str | None = None  # set by the loop: a reason not to be ready (e.g. broker lost)

    def beat(self, what: str = "tick") -> None:
        """The loop made progress (`what`: tick, consume, poll ...)."""
        self.last[what] = self.monotonic()

    def assigned(self, partitions: Iterable[tuple[str, int]], lag: int | None, unread: bool = False) -> None:
        """The consumer's assignment (topic, partition), its total lag in messages, and
        whether a partition that holds data has not delivered yet (start-up)."""
        self._unread = unread
        parts: dict[str, list[int]] = {}
        for topic, partition in partitions:
            parts.setdefault(topic, []).append(int(partition))
        self._partitions = {t: sorted(p) for t, p in sorted(parts.items())}
        self._lag = lag

    def polled(self, consumer: Any) -> None:
        """A poll loop went round (`consumer`: a confluent-kafka consumer): beat, and refresh
        the assignment once a second (lag is not measured: readiness needs the assignment)."""
        now = self.monotonic()
        self.last["poll"] = now
        if now - self._assignment_at >= 1.0:
            self._assignment_at = now
            self.assigned(((tp.topic, tp.partition) for tp in consumer.assignment()), None)

    def _body(self, now: float) -> dict[str, Any]:
        return {"name": self.name, "up_s": round(now - self.started, 1),
                "last": {k: round(now - v, 1) for k, v in sorted(self.last.items())},
                "assigned": sum(len(p) for p in self._partitions.values()), "lag": self._lag,
                "partitions": self._partitions}

    def live(self) -> tuple[bool, dict[str, Any]]:
        """Alive when the loop beat within `stall_s`, and, while messages wait to be read
        (lag > 0), one was consumed within `stall_s`: a loop whose timer runs but whose
        consumer died or hangs is not alive."""
        now = self.monotonic()
        body = self._body(now)
        newest = max(self.last.values(), default=self.started)
        idle = now - newest
        reason = None
        if idle > self.stall_s:
            which = max(self.last, key=self.last.get) if self.last else "start"
            reason = f"the loop made no progress for {idle:.1f} s ({which}; limit {self.stall_s:g} s)"
        elif self._lag and now - self.last.get("consume", self.started) > self.stall_s:
            waited = now - self.last.get("consume", self.started)
            reason = f"{self._lag} messages wait and none was consumed for {waited:.1f} s (limit {self.stall_s:g} s)"
        body.update(ok=reason is None, reason=reason)
        return reason is None, body

    def ready(self) -> tuple[bool, dict[str, Any]]:
        ok, body = self.live()
        if not ok:
            return False, body
        reason = None
        if self.problem:
            reason = self.problem
        elif not body["assigned"]:
            reason = "no partitions assigned"
        elif self._unread:
            reason = "a partition that holds data has not been read yet"
        elif self._lag is not None and self._lag > self.ready_lag:
            reason = f"behind: {self._lag} messages to read (caught up at {self.ready_lag} or fewer)"
        body.update(ok=reason is None, reason=reason)
        return reason is None, body

    def routes(self) -> dict[str, Callable[[], tuple[bool, dict[str, Any]]]]:
        """HTTP paths for `commwatch.metrics.serve`."""
        return {"/livez": self.live, "/readyz": self.ready}


class TopicKeeper:
    """Re-creates the worker's topics when the broker has lost them (a memory-only broker
    that restarted comes back empty): checked every `every_s` from the loop's timer, the
    check itself in a thread so the loop never waits on the broker."""

    def __init__(self, ensure: Callable[[], list[str]], every_s: float = 5.0,
                 monotonic: Callable[[], float] = time.monotonic):
        self.ensure = ensure
        self.every_s = every_s
        self.monotonic = monotonic
        self.next_at = monotonic() + every_s
        self.recreated = 0
        self.error: str | None = None
        self._busy = threading.Lock()

    def poll(self) -> None:
        """Called from the loop's timer; returns at once."""
        now = self.monotonic()
        if now < self.next_at or self._busy.locked():
            return
        self.next_at = now + self.every_s
        threading.Thread(target=self._check, name="topic-keeper", daemon=True).start()

    def _check(self) -> None:
        with self._busy:
            try:
                made = self.ensure()
            except Exception as exc:  # noqa: BLE001 - any broker failure is reported, never raised
                self.error = f"broker unreachable: {exc}"[:300]
                log.warning("topic check failed: %s", exc)
                return
            self.error = None
            if made:
                self.recreated += len(made)
                log.warning("the broker had lost %d topics (restarted empty?): re-created %s", len(made), made)
