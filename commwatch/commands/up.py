"""`commwatch up`: the whole stack on this machine, supervised, until Ctrl-C.

Runs the embedded broker (unless `COMMWATCH_KAFKA_BOOTSTRAP` names a Kafka), a stream
worker, the ClickHouse sink (which answers history queries for every other command),
the notifier (when a destination is configured), the node agent for this host's rings
and the live page, each on its own port (see `commwatch.stack`). It prints what runs
where and the environment the training job needs, writes the same to
`<data_dir>/stack.env`, and restarts a component that dies (within a bound; past it,
everything stops and the command exits with status 1). Ctrl-C or SIGTERM stops all of
it; nothing outlives it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from commwatch.settings import Settings
from commwatch.stack import COMPONENTS, Stack, StackFailed


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--without", action="append", default=[], choices=COMPONENTS, metavar="COMPONENT",
                   help=f"leave a component out ({', '.join(COMPONENTS)}); repeatable, e.g. --without agent "
                        "when the node agent runs elsewhere")
    p.add_argument("--workers", type=int, default=1, help="stream workers (default: %(default)s)")
    p.add_argument("--ready-timeout", type=float, default=180.0,
                   help="seconds to wait for every component to answer (default: %(default)s)")


def _terminate(*_: object) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.workers < 1:
        print("commwatch up: --workers must be at least 1", file=sys.stderr)
        return 2
    components = tuple(c for c in COMPONENTS if c not in args.without)
    stack = Stack(settings, components=components, workers=args.workers,
                  say=lambda line: print(line, file=sys.stderr, flush=True))
    signal.signal(signal.SIGTERM, _terminate)
    try:
        stack.start(ready_timeout_s=args.ready_timeout)
        print("\n".join(stack.summary()), flush=True)
        print("commwatch up: ready; Ctrl-C stops everything", flush=True)
        while True:
            stack.check()
            time.sleep(0.5)
    except StackFailed as exc:
        print(f"commwatch up: FAILED: {exc}\ncommwatch up: stopping everything", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("commwatch up: stopping", file=sys.stderr, flush=True)
        return 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the shutdown short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if stack.broker is not None or stack.supervisor.children:
            stack.stop()
            print("commwatch up: stopped", file=sys.stderr, flush=True)
