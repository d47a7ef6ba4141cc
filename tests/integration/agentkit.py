"""Helpers for the agent's integration tests: read a prefixed topic back from the broker."""

from __future__ import annotations

import time
import uuid
from typing import Callable

from commwatch.kafka import consumer
from commwatch.settings import Settings


def consume(settings: Settings, bases: list[str], until: Callable[[list], bool], timeout_s: float = 20.0) -> list:
    """(base topic, key, value) of every message on `bases` until `until(messages)` holds."""
    c = consumer(settings, settings.kafka_bootstrap, "t-" + uuid.uuid4().hex[:8])
    c.subscribe([settings.topics.name(b) for b in bases])
    got: list = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not until(got):
            for m in c.consume(500, 0.2):
                if m.error() is None:
                    got.append((settings.topics.base(m.topic()), m.key().decode(), m.value()))
    finally:
        c.close()
    return got
