"""`commwatch record --out FILE.cwcap`: consume the contract's topics into a capture file.

Reads every input topic and the alerts topic (under the settings' prefix) from the
beginning, with a fresh consumer group, and writes each message with its contract topic
name, key, value and `ts_ns` = the Kafka message timestamp in ns (producers set it to the
produce time). Stops after `--duration` seconds, after `--idle-exit` seconds without a
message (counted from the consumer's partition assignment), or on Ctrl-C.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
import uuid
from typing import Callable

from commwatch import discovery, topics
from commwatch.capture import CaptureWriter, Message
from commwatch.settings import Settings

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="FILE.cwcap", help="capture file to write")
    p.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (0: no limit)")
    p.add_argument("--idle-exit", type=float, default=0.0,
                   help="stop after this many seconds without a message (0: never)")


def record(settings: Settings, out: str, duration_s: float = 0.0, idle_exit_s: float = 0.0,
           stop: Callable[[], bool] = lambda: False) -> int:
    """Consume into `out` until a stop condition; returns the number of messages written."""
    from commwatch.kafka import consumer

    names = [settings.topics.name(t) for t in (*topics.INPUTS, topics.ALERTS)]
    cons = consumer(settings, settings.kafka_bootstrap, f"commwatch-record-{uuid.uuid4().hex[:12]}")
    assigned: list[float] = []  # idle time counts from the first partition assignment
    cons.subscribe(names, on_assign=lambda c, parts: assigned.append(time.monotonic()))
    start = last = time.monotonic()
    base = settings.topics.base
    try:
        with CaptureWriter(out) as writer:
            while not stop():
                now = time.monotonic()
                if duration_s and now - start >= duration_s:
                    break
                if idle_exit_s and assigned and now - max(last, assigned[0]) >= idle_exit_s:
                    break
                batch = cons.consume(num_messages=1000, timeout=0.2)
                for m in batch:
                    if m.error():
                        log.warning("consume error: %s", m.error())
                        continue
                    key = m.key()
                    _, ts_ms = m.timestamp()
                    writer.write(Message(base(m.topic()), key.decode("utf-8", "replace") if key is not None else None,
                                         int(ts_ms) * 1_000_000, m.value() or b""))
                if batch:
                    last = time.monotonic()
            return writer.count
    finally:
        cons.close()


def run(args: argparse.Namespace, settings: Settings) -> int:
    settings = discovery.with_kafka(settings, "commwatch record")
    if args.duration < 0 or args.idle_exit < 0:
        print("commwatch record: --duration and --idle-exit must be >= 0", file=sys.stderr)
        return 2
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    try:
        n = record(settings, args.out, args.duration, args.idle_exit, stop=lambda: bool(stopping))
    except KeyboardInterrupt:
        n = -1
    if n >= 0:
        print(f"recorded {n} messages -> {args.out}")
    else:
        print(f"interrupted; capture {args.out} holds what was recorded")
    return 0
