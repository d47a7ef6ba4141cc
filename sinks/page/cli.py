"""`commwatch page`: serve the live page until interrupted.

Live state comes from Kafka (`COMMWATCH_KAFKA_BOOTSTRAP`), history from ClickHouse
(`COMMWATCH_CLICKHOUSE_DSN`, or the embedded database through the process that owns it).
Binds `COMMWATCH_PAGE_HOST:COMMWATCH_PAGE_PORT` (loopback by default; `--set page_port=0`
picks a free port) and prints `live page: http://HOST:PORT/` once it serves.
"""

from __future__ import annotations

import argparse
import signal
import sys

from commwatch import discovery
from commwatch.settings import Settings, SettingsError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", help="bind address (default: COMMWATCH_PAGE_HOST, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: COMMWATCH_PAGE_PORT, 8470; 0 = a free one)")
    p.add_argument("--no-history", action="store_true", help="do not read incident history from ClickHouse")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from commwatch.sinks.page.server import PageServer

    changes = {k: v for k, v in (("page_host", args.host), ("page_port", args.port)) if v is not None}
    settings = discovery.with_kafka(settings.replace(**changes), "commwatch page")
    server = PageServer(settings, history=not args.no_history)
    try:
        server.bind()
    except OSError as exc:
        raise SettingsError(f"COMMWATCH_PAGE_PORT: cannot listen on {settings.page_host}:{settings.page_port} "
                            f"({exc.strerror}); set COMMWATCH_PAGE_PORT=0 for a free port, or another port") from None
    print(f"live page: {server.url}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.httpd.serve_forever()
    finally:
        server.stop()
    return 0

