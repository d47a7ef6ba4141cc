"""Where a simulation's messages go: a capture file, or Kafka (as fast as possible or paced
to the wall clock)."""

from __future__ import annotations

import base64
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterable

from commwatch.capture import BINARY_TOPICS, Message

log = logging.getLogger(__name__)


class FastCaptureWriter:
    """Writes capture lines identical to `commwatch.capture.CaptureWriter`'s to a binary
    stream, without parsing JSON values again: the simulator's JSON values are already
    compact dumps (and JSON is UTF-8 on the wire)."""

    def __init__(self, out: IO[bytes]):
        self.out = out
        self.count = 0
        self._prefixes: dict[tuple[str, str | None], bytes] = {}

    def write_all(self, messages: Iterable[Message], chunk: int = 4096) -> None:
        buf: list[bytes] = []
        prefixes = self._prefixes
        b64 = base64.b64encode
        binary = BINARY_TOPICS
        for msg in messages:
            prefix = prefixes.get((msg.topic, msg.key))
            if prefix is None:
                prefix = f'{{"topic":{json.dumps(msg.topic)},"key":{json.dumps(msg.key)},"ts_ns":'.encode()
                prefixes[(msg.topic, msg.key)] = prefix
            if msg.topic in binary:
                buf.append(b'%s%d,"value_b64":"%s"}\n' % (prefix, msg.ts_ns, b64(msg.value)))
            else:
                buf.append(b'%s%d,"value":%s}\n' % (prefix, msg.ts_ns, msg.value))
            if len(buf) >= chunk:
                self.out.write(b"".join(buf))
                self.count += len(buf)
                buf.clear()
        self.out.write(b"".join(buf))
        self.count += len(buf)


def truth_path(out: str | Path) -> Path:
    return Path(f"{out}.truth.json")


def write_truth(path: str | Path, document: dict) -> None:
    Path(path).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


def write_capture(messages: Iterable[Message], path: str | Path) -> int:
    """All messages to a capture file; returns the count."""
    with open(path, "wb") as f:
        w = FastCaptureWriter(f)
        w.write_all(messages)
    return w.count


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
