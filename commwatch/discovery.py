"""Finding the running stack and the database owner through the data directory.

Two records, both written atomically, readable by the directory's owner only, and both
naming the process that wrote them (pid and start time), so that one left behind by a
process that died is recognised as stale and ignored:

- `<data_dir>/stack.env`, written by `commwatch up` (and `commwatch demo`): the
  environment the training side and `commwatch agent` need, as `export` lines a shell can
  source, then the stack's own lines (pid, live page, history endpoint, children).
- `<chdb dir>.owner`, written by the process that owns the embedded ClickHouse directory
  (the sink): the URL and token of its history endpoint (`sinks/clickhouse/endpoint.py`).

`with_kafka(settings, command)` is what every command that needs Kafka calls: the
configured `COMMWATCH_KAFKA_BOOTSTRAP`, else the running stack's broker, else an error
naming the setting. No command but `up` and `demo` starts a broker of its own.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commwatch.settings import Settings, SettingsError

STACK_FILE = "stack.env"
OWNER_SUFFIX = ".owner"


# --- processes ---------------------------------------------------------------------------
def process_started(pid: int) -> float | None:
    """The start time of a live process (seconds since the epoch), or None if it is gone."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except (psutil.Error, ValueError):
        return None


def same_process(pid: int, started: float) -> bool:
    """Whether `pid` is still the process that started at `started` (not a reused pid)."""
    now = process_started(pid)
    return now is not None and abs(now - started) < 0.5


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


# --- the stack record --------------------------------------------------------------------
@dataclass(frozen=True)
class StackRecord:
    """What `stack.env` says about a stack."""

    pid: int
    started: float
    data_dir: str
    env: dict[str, str]  # the exported COMMWATCH_* lines
    page: str = ""  # the live page's URL, "" when none runs
    query: str = ""  # the history endpoint's URL, "" when ClickHouse is a server
    children: dict[str, int] = field(default_factory=dict)  # component -> pid

    @property
    def bootstrap(self) -> str:
        return self.env.get("COMMWATCH_KAFKA_BOOTSTRAP", "")

    def alive(self) -> bool:
        return same_process(self.pid, self.started)


def stack_file(data_dir: str | Path) -> Path:
    return Path(data_dir) / STACK_FILE


TRAINING_KEYS = ("COMMWATCH_RING_DIR", "COMMWATCH_DATA_DIR")
AGENT_KEYS = ("COMMWATCH_KAFKA_BOOTSTRAP", "COMMWATCH_TOPIC_PREFIX")


def render_stack(rec: StackRecord) -> str:
    """The text of `stack.env`: sourceable by a shell, parsed back by `read_stack`."""
    q = shlex.quote
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(rec.started))
    lines = [
        f"# commwatch stack under {rec.data_dir}: pid {rec.pid}, started {when}.",
        f"# Load it into a shell with:  . {q(str(stack_file(rec.data_dir)))}",
        "# The training job on this host (hook or NCCL profiler plugin) needs these, and COMMWATCH_JOB_ID:",
    ]
    lines += [f"export {k}={q(rec.env[k])}" for k in TRAINING_KEYS if k in rec.env]
    lines.append("# `commwatch agent` and the other commands find the stack through COMMWATCH_DATA_DIR, or use:")
    lines += [f"export {k}={q(v)}" for k, v in rec.env.items() if k not in TRAINING_KEYS]
    lines += [
        "# The stack itself (read by commwatch; a pid that is gone means a stale file):",
        f"commwatch_stack_pid={rec.pid}",
        f"commwatch_stack_started={rec.started:.3f}",
        f"commwatch_stack_page={q(rec.page)}",
        f"commwatch_stack_query={q(rec.query)}",
        "commwatch_stack_children=" + q(" ".join(f"{k}:{v}" for k, v in rec.children.items())),
    ]
    return "\n".join(lines) + "\n"


def write_stack(rec: StackRecord) -> Path:
    path = stack_file(rec.data_dir)
    _write_private(path, render_stack(rec))
    return path


def parse_stack(text: str, data_dir: str) -> StackRecord | None:
    """The record in a `stack.env` text; None when it is not one."""
    env: dict[str, str] = {}
    own: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):]
        key, sep, raw = line.partition("=")
        if not sep:
            continue
        try:
            parts = shlex.split(raw)
        except ValueError:
            return None
        value = parts[0] if parts else ""
        if key.startswith("COMMWATCH_"):
            env[key] = value
        elif key.startswith("commwatch_stack_"):
            own[key[len("commwatch_stack_"):]] = value
    try:
        children = {}
        for item in own.get("children", "").split():
            name, _, pid = item.partition(":")
            children[name] = int(pid)
        return StackRecord(pid=int(own["pid"]), started=float(own["started"]), data_dir=data_dir, env=env,
                           page=own.get("page", ""), query=own.get("query", ""), children=children)
    except (KeyError, ValueError):
        return None


def read_stack(data_dir: str | Path) -> StackRecord | None:
    """The stack record under `data_dir`, live or stale; None when there is none."""
    try:
        text = stack_file(data_dir).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except PermissionError as exc:
        raise SettingsError(f"COMMWATCH_DATA_DIR: cannot read {exc.filename} (permission denied)") from None
    return parse_stack(text, str(data_dir))


def running_stack(data_dir: str | Path) -> StackRecord | None:
    """The stack running under `data_dir`, or None (no record, or a stale one)."""
    rec = read_stack(data_dir)
    return rec if rec is not None and rec.alive() else None


def remove_stack(rec: StackRecord) -> None:
    """Remove `stack.env` if it is still this stack's."""
    current = read_stack(rec.data_dir)
    if current is not None and current.pid == rec.pid and abs(current.started - rec.started) < 0.01:
        stack_file(rec.data_dir).unlink(missing_ok=True)


def with_kafka(settings: Settings, command: str) -> Settings:
    """`settings` with a Kafka bootstrap: the configured one, else the running stack's.

    Raises `SettingsError` naming COMMWATCH_KAFKA_BOOTSTRAP when there is neither, or when
    the configured one is the broker of a stack that is gone (a shell that sourced an old
    `stack.env`)."""
    if settings.kafka_bootstrap:
        check_not_stale(settings)
        return settings
    rec = running_stack(settings.data_dir)
    if rec is not None and rec.bootstrap:
        return settings.replace(kafka_bootstrap=rec.bootstrap)
    stale = read_stack(settings.data_dir)
    why = f" (the stack recorded there, pid {stale.pid}, is gone)" if stale else ""
    raise SettingsError(
        f"COMMWATCH_KAFKA_BOOTSTRAP: `{command}` needs Kafka, and the variable is unset and no commwatch stack "
        f"runs under {settings.data_dir}{why}. Start one with `commwatch up` (same COMMWATCH_DATA_DIR), "
        "or set COMMWATCH_KAFKA_BOOTSTRAP=host:port"
    )


def check_not_stale(settings: Settings) -> None:
    """Raise `SettingsError` when COMMWATCH_KAFKA_BOOTSTRAP is the broker of the stack that
    ran under the data directory and is gone."""
    rec = read_stack(settings.data_dir)
    if rec is not None and rec.bootstrap == settings.kafka_bootstrap and not rec.alive():
        raise SettingsError(
            f"COMMWATCH_KAFKA_BOOTSTRAP: {settings.kafka_bootstrap} is the broker of the stack that ran under "
            f"{settings.data_dir} (pid {rec.pid}), which is gone; the variable comes from its old stack.env. "
            "Unset it (`unset COMMWATCH_KAFKA_BOOTSTRAP`) and start the stack with `commwatch up`"
        )


# --- the database owner record -----------------------------------------------------------
@dataclass(frozen=True)
class OwnerRecord:
    """The process that owns an embedded ClickHouse directory, and its history endpoint."""

    pid: int
    started: float
    url: str
    token: str
    command: str = ""

    def alive(self) -> bool:
        return same_process(self.pid, self.started)


def owner_file(db_path: str | Path) -> Path:
    p = Path(db_path)
    return p.with_name(p.name + OWNER_SUFFIX)


def write_owner(db_path: str | Path, url: str, token: str, command: str) -> OwnerRecord:
    pid = os.getpid()
    rec = OwnerRecord(pid=pid, started=process_started(pid) or time.time(), url=url, token=token, command=command)
    _write_private(owner_file(db_path), json.dumps(rec.__dict__) + "\n")
    return rec


def read_owner(db_path: str | Path) -> OwnerRecord | None:
    """The live owner of `db_path`, or None (no record, or a stale one)."""
    try:
        data: Any = json.loads(owner_file(db_path).read_text(encoding="utf-8"))
        rec = OwnerRecord(**data)
    except (FileNotFoundError, NotADirectoryError, ValueError, TypeError):
        return None
    except PermissionError as exc:
        raise SettingsError(f"COMMWATCH_DATA_DIR: cannot read {exc.filename} (permission denied)") from None
    return rec if rec.alive() else None


def remove_owner(db_path: str | Path) -> None:
    """Remove the owner record if this process wrote it."""
    path = owner_file(db_path)
    try:
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
            path.unlink()
    except (FileNotFoundError, ValueError):
        pass
