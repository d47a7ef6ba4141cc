"""`commwatch` command line: global settings flags, then one subcommand.

Each subcommand lives in the module that owns its work and exposes
`add_arguments(parser)` and `run(args, settings) -> int`; this file only maps names to
modules (imported lazily, so `commwatch sql` does not load faust).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from commwatch.embedded import EmbeddedError
from commwatch.settings import Settings, SettingsError

COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("commwatch.commands.up", "the whole stack on this machine (broker, worker, sink, agent, page)"),
    "status": ("commwatch.commands.status", "the watched jobs' health, live, from the running stack"),
    "config": ("commwatch.commands.config", "print the settings in force (secrets masked)"),
    "simulate": ("commwatch.producers.simulate.cli", "emulate a training job, with faults"),
    "record": ("commwatch.commands.record", "record the contract's topics into a capture file"),
    "replay": ("commwatch.streams.replay", "run the detectors over a capture file"),
    "worker": ("commwatch.streams.worker", "start a live stream worker"),
    "demo": ("commwatch.commands.demo", "the whole pipeline on the embedded default"),
    "bench": ("commwatch.commands.bench", "benchmarks that print numbers"),
    "db": ("commwatch.sinks.clickhouse.cli_db", "database schema: migrate"),
    "sink": ("commwatch.sinks.clickhouse.cli_sink", "write topics into ClickHouse"),
    "sql": ("commwatch.sinks.clickhouse.cli_sql", "run a SQL query and print a table"),
    "incidents": ("commwatch.sinks.clickhouse.cli_incidents", "incidents of a job from ClickHouse"),
    "query": ("commwatch.sinks.clickhouse.cli_query", "named questions over the history"),
    "trace": ("commwatch.sinks.clickhouse.cli_trace", "Chrome/Perfetto trace of a job's calls"),
    "notify": ("commwatch.sinks.notify.cli", "deliver incidents to webhooks and Alertmanager"),
    "page": ("commwatch.sinks.page.cli", "serve the live page: jobs' health in a browser"),
    "agent": ("commwatch.producers.agent.cli", "node agent: rings, heartbeats, hardware -> Kafka"),
}


ARGV: list[str] = []  # the arguments of this invocation, for nested lazy subcommands


def _settings_overrides(args: argparse.Namespace) -> dict:
    over = {
        "kafka_bootstrap": args.kafka_bootstrap,
        "clickhouse_dsn": args.clickhouse_dsn,
        "data_dir": args.data_dir,
        "topic_prefix": args.topic_prefix,
        "log_level": args.log_level,
    }
    for item in args.set or ():
        if "=" not in item:
            raise SettingsError(f"--set {item!r}: expected KEY=VALUE")
        key, value = item.split("=", 1)
        key = key.strip().lower()
        if key.startswith("commwatch_"):
            key = key[len("commwatch_"):]
        over[key] = value
    return over


def build_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = argparse.ArgumentParser(prog="commwatch", description=__doc__.splitlines()[0])
    g = parser.add_argument_group("settings (override COMMWATCH_* variables)")
    g.add_argument("--kafka-bootstrap", help="Kafka bootstrap servers (default: embedded broker)")
    g.add_argument("--clickhouse-dsn", help="ClickHouse DSN (default: chdb:// under the data dir)")
    g.add_argument("--data-dir", help="local state directory")
    g.add_argument("--topic-prefix", help="prefix of every topic name")
    g.add_argument("--log-level", help="DEBUG, INFO, WARNING or ERROR")
    g.add_argument("--set", action="append", metavar="KEY=VALUE", help="any other setting")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser, sub


def _missing(command: str, exc: ModuleNotFoundError) -> int:
    """A package of an extra that this install lacks (the base install is the hook's)."""
    if (exc.name or "").split(".")[0] in ("commwatch", "torch"):
        raise exc
    extra = "agent" if command == "agent" else "all"
    print(f"commwatch {command}: needs the package {exc.name!r}, which this install lacks: "
          f"pip install 'commwatch[{extra}]'", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    global ARGV
    argv = sys.argv[1:] if argv is None else argv
    ARGV = list(argv)
    parser, sub = build_parser()
    # Only the chosen subcommand's module is imported.
    chosen = next((a for a in argv if a in COMMANDS), None)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        if name == chosen:
            try:
                mod = importlib.import_module(module)
            except ModuleNotFoundError as exc:
                return _missing(name, exc)
            mod.add_arguments(p)
            p.set_defaults(_run=mod.run)
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        settings = Settings.load(**_settings_overrides(args))
    except SettingsError as exc:
        print(f"commwatch: bad configuration: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("faust", "mode", "aiokafka", "kafka"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(settings.log_level)))
    try:
        return int(args._run(args, settings) or 0)
    except ModuleNotFoundError as exc:
        return _missing(args.command, exc)
    except KeyboardInterrupt:
        return 130
    except SettingsError as exc:
        print(f"commwatch: bad configuration: {exc}", file=sys.stderr)
        return 2
    except EmbeddedError as exc:
        print(f"commwatch: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    # `python -m commwatch.cli`: run the importable module's `main`, whose ARGV the lazy
    # subcommands (`bench NAME`) read; this __main__ copy's globals are not theirs
    from commwatch.cli import main as _main

    sys.exit(_main())
