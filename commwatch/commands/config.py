"""`commwatch config`: the settings in force, one line each, secrets masked."""

from __future__ import annotations

import argparse

from commwatch.settings import Settings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--docs", action="store_true", help="show what each key means")


def run(args: argparse.Namespace, settings: Settings) -> int:
    for key, value, doc in settings.describe():
        line = f"{key}={value}"
        print(f"{line:60s} # {doc}" if args.docs and doc else line)
    return 0
