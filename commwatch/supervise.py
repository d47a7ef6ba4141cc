"""Child processes supervised as one group: restarted when they die, stopped together.

Each child is `python -m commwatch.cli ARGV...` with its own environment and log file,
in a session of its own (a Ctrl-C in the terminal reaches the supervisor only, which
then stops the children in order) and with PR_SET_PDEATHSIG, so that a supervisor that
is killed outright takes every child with it: nothing outlives it.

A child that exits is started again after a back-off (1, 2, 4 ... 30 s), at most
`max_restarts` times in `window_s`; past that bound, or when a child fails at start-up
with a configuration error (exit status 2, which a restart would only repeat),
`poll()` raises `ChildFailed` with the end of its log.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from commwatch.embedded import die_with_parent

log = logging.getLogger(__name__)

CONFIG_ERROR = 2  # the exit status of `commwatch` for a bad configuration
EARLY_S = 15.0  # a configuration error is fatal only this soon after a start
BACKOFF_MAX_S = 30.0


class ChildFailed(RuntimeError):
    """A child died and will not be restarted; the message names it and quotes its log."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name


def log_tail(path: Path, lines: int = 12) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    restart: bool = True
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    restarts: deque = field(default_factory=deque)  # monotonic times of restarts
    due_at: float | None = None  # restart scheduled at this monotonic time

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Supervisor:
    """Start, watch and stop `commwatch` child processes.

    >>> sup = Supervisor(Path("/tmp/logs"))                        # doctest: +SKIP
    >>> sup.start("worker", ["worker"], env)                       # doctest: +SKIP
    >>> while True: sup.poll(); time.sleep(0.5)                    # doctest: +SKIP
    """

    def __init__(self, log_dir: Path, max_restarts: int = 5, window_s: float = 300.0,
                 on_restart: Callable[[Child], None] | None = None):
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.max_restarts = max_restarts
        self.window_s = window_s
        self.on_restart = on_restart
        self.children: dict[str, Child] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str], restart: bool = True) -> Child:
        child = Child(name, list(argv), dict(env), self.log_dir / f"{name}.log", restart)
        self.children[name] = child
        self._spawn(child)
        return child

    def _spawn(self, child: Child) -> None:
        with open(child.log_path, "ab") as out:
            out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting commwatch {' '.join(child.argv)}\n".encode())
            out.flush()
            child.proc = subprocess.Popen(
                [sys.executable, "-m", "commwatch.cli", *child.argv], env=child.env, stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=die_with_parent,
            )
        child.started_at = time.monotonic()
        child.due_at = None
        log.debug("%s started (pid %d)", child.name, child.proc.pid)

    def poll(self) -> list[Child]:
        """Restart children that died (when due); returns the children restarted now.
        Raises `ChildFailed` for a child past its restart bound or failing at start-up."""
        now = time.monotonic()
        restarted = []
        for child in self.children.values():
            if child.proc is None or child.running():
                continue
            code = child.proc.returncode
            if child.due_at is None:
                if not child.restart:
                    continue
                if code == CONFIG_ERROR and now - child.started_at < EARLY_S:
                    raise ChildFailed(child.name, self._why(child, "failed at start-up (configuration error)"))
                while child.restarts and now - child.restarts[0] > self.window_s:
                    child.restarts.popleft()
                if len(child.restarts) >= self.max_restarts:
                    raise ChildFailed(child.name, self._why(
                        child, f"died {len(child.restarts) + 1} times in {self.window_s:.0f} s; giving up"))
                delay = min(BACKOFF_MAX_S, 2.0 ** len(child.restarts))
                child.due_at = now + delay
                log.warning("%s (pid %d) exited with status %s; restarting it in %.0f s (log: %s)",
                            child.name, child.proc.pid, code, delay, child.log_path)
            elif now >= child.due_at:
                child.restarts.append(now)
                self._spawn(child)
                restarted.append(child)
                if self.on_restart is not None:
                    self.on_restart(child)
        return restarted

    def _why(self, child: Child, what: str) -> str:
        tail = log_tail(child.log_path)
        quoted = "\n".join("    " + line for line in tail.splitlines())
        return (f"{child.name} (pid {child.pid}, exit status {child.proc.returncode}) {what}; "
                f"the end of {child.log_path}:\n{quoted}")

    def stop(self, names: list[str] | None = None, grace_s: float = 15.0) -> None:
        """SIGTERM to each chosen child's process group, in the given order (default:
        reverse start order), each waited for up to `grace_s`, then SIGKILL."""
        order = names if names is not None else list(reversed(self.children))
        for name in order:
            child = self.children.get(name)
            if child is None:
                continue
            child.due_at = None
            child.restart = False
            proc = child.proc
            if proc is None:
                continue
            if proc.poll() is not None:
                continue
            _signal_group(proc.pid, signal.SIGTERM)  # its group: the child and anything it started
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in %.0f s; killing it", name, grace_s)
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def pids(self) -> dict[str, int]:
        return {n: c.pid for n, c in self.children.items() if c.pid is not None and c.running()}


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
