"""A bounded buffer in front of the Kafka producer that keeps the newest data.

While Kafka is reachable, messages pass straight through to the producer. While it is
not, at most `max_inflight` messages sit in the producer (librdkafka retries and
reconnects them) and the rest wait here; when the byte budget is exceeded the oldest
waiting messages are dropped and counted. Nothing here ever blocks.

>>> box = Outbox(budget_bytes=10)
>>> box.put("t", "k", b"123456"); box.put("t", "k", b"abcdef")
>>> box.dropped, [v for _, _, v in box.queue]
(1, [b'abcdef'])
"""

from __future__ import annotations

import collections
from typing import Any

from commwatch.producers.agent import metrics


class Outbox:
    def __init__(self, budget_bytes: int, max_inflight: int = 5000):
        self.budget = budget_bytes
        self.max_inflight = max_inflight
        self.queue: collections.deque[tuple[str, str, bytes]] = collections.deque()
        self.bytes = 0
        self.dropped = 0
        self.sent = 0

    def put(self, topic: str, key: str, value: bytes) -> None:
        self.queue.append((topic, key, value))
        self.bytes += len(value)
        while self.bytes > self.budget and len(self.queue) > 1:
            _, _, old = self.queue.popleft()
            self.bytes -= len(old)
            self.dropped += 1
            metrics.DROPPED.inc()
        metrics.BUFFER.set(self.bytes)

    def pump(self, sender: Any) -> int:
        """Hand waiting messages to the producer while it is keeping up; returns how many."""
        n = 0
        producer = sender.producer
        producer.poll(0)
        room = self.max_inflight - len(producer)
        while self.queue and n < room:
            topic, key, value = self.queue[0]
            if not sender.send(topic, key, value):
                break
            self.queue.popleft()
            self.bytes -= len(value)
            n += 1
        self.sent += n
        metrics.BUFFER.set(self.bytes)
        return n
