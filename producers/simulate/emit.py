"""Where a simulation's messages go: a capture file, or Kafka (as fast as possible or paced
to the wall clock)."""

from __future__ import annotations

import gc
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from commwatch.capture import Message
from commwatch.producers.simulate.simulation import Simulation

log = logging.getLogger(__name__)
IOV_MAX = 1024  # buffers per writev call (POSIX minimum of IOV_MAX)


def truth_path(out: str | Path) -> Path:
    return Path(f"{out}.truth.json")


def write_truth(path: str | Path, document: dict) -> None:
    Path(path).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


def write_capture(sim: Simulation, path: str | Path) -> int:
    """The whole run to a capture file, gathered writes straight from the simulator's
    buffers; returns the message count. The cyclic garbage collector is paused meanwhile:
    the run makes no reference cycles, and collections walking its ~10^5 pending buffer
    views would cost ~7% of the time."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        with open(path, "wb", buffering=0) as f:
            fd = f.fileno()
            for chunk in sim.capture_chunks():
                for i in range(0, len(chunk), IOV_MAX):
                    part = chunk[i:i + IOV_MAX]
                    done = os.writev(fd, part)
                    if done < sum(map(len, part)):  # a short write: the rest the plain way
                        rest = memoryview(b"".join(part))[done:]
                        while rest:
                            rest = rest[f.write(rest):]
    finally:
        if collecting:
            gc.enable()
    return sim.stats.messages


@dataclass
class KafkaResult:
    sent: int = 0
    failed: int = 0
    backpressure_waits: int = 0
    queued_at_exit: int = 0


def send_kafka(messages: Iterable[Message], sender, topics, realtime: bool = False,
               clock_offset_ns: int = 0) -> KafkaResult:
    """Produce every message with Kafka timestamp = ts_ns // 1e6 (ms). `sender` is a
    `commwatch.kafka.Sender`; a full local queue waits for delivery rather than losing
    simulated traffic. With `realtime`, a message waits until the wall clock reaches its
    ts_ns + `clock_offset_ns`."""
    res = KafkaResult()
    names: dict[str, str] = {}
    for msg in messages:
        if realtime:
            delay = (msg.ts_ns + clock_offset_ns - time.time_ns()) / 1e9
            if delay > 0:
                sender.producer.poll(0)
                time.sleep(delay)
        topic = names.get(msg.topic) or names.setdefault(msg.topic, topics.name(msg.topic))
        while not sender.send(topic, msg.key, msg.value, timestamp_ms=msg.ts_ns // 1_000_000):
            res.backpressure_waits += 1
            sender.producer.poll(0.05)
    res.queued_at_exit = sender.flush(30.0)
    res.sent = sender.sent
    res.failed = sender.failed
    return res
