"""`commwatch up`: run the embedded broker until interrupted, printing its address."""

from __future__ import annotations

import argparse
import signal
import sys
import time

from commwatch.embedded import EmbeddedBroker
from commwatch.kafka import ensure_topics
from commwatch.settings import Settings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, default=0, help="listen port (default: a free one)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    broker = EmbeddedBroker(port=args.port).start()
    ensure_topics(settings, broker.bootstrap)
    print(f"commwatch: embedded broker on {broker.bootstrap}", flush=True)
    print(f"export COMMWATCH_KAFKA_BOOTSTRAP={broker.bootstrap}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while broker.alive():
            time.sleep(0.5)
        print("commwatch: embedded broker exited", file=sys.stderr)
        return 1
    finally:
        broker.stop()
