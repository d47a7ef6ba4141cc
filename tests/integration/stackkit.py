"""Running `commwatch up` as a user does, for the stack tests: a subprocess with its own
data directory, followed until it prints that it is ready."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from commwatch import discovery

READY_S = 360.0  # two cores shared with other work: starting five Python processes can take a while


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMWATCH_")}
    env.update(extra)
    return env


def cli(env: dict, *argv: str, timeout: float = 180.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commwatch.cli", *argv], env=env, capture_output=True, text=True,
                          timeout=timeout)


def alive(pid: int) -> bool:
    return discovery.process_started(pid) is not None


class RunningStack:
    def __init__(self, data_dir: Path, *args: str, **env: str):
        self.data_dir = Path(data_dir)
        self.env = clean_env(COMMWATCH_DATA_DIR=str(self.data_dir), **env)
        self.out: list[str] = []
        self.err: list[str] = []
        self.proc = subprocess.Popen([sys.executable, "-m", "commwatch.cli", "up", "--ready-timeout", str(READY_S),
                                      *args], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._read, args=(stream, lines), daemon=True).start()

    @staticmethod
    def _read(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line.rstrip("\n"))

    def wait_ready(self, timeout_s: float = READY_S + 30) -> discovery.StackRecord:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any("ready; Ctrl-C stops everything" in line for line in self.out):
                rec = discovery.running_stack(self.data_dir)
                assert rec is not None and rec.pid == self.proc.pid
                return rec
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"stack not ready (exit {self.proc.poll()}):\n" + "\n".join(self.out + self.err))

    def wait_exit(self, timeout_s: float = 120.0) -> int:
        code = self.proc.wait(timeout=timeout_s)
        time.sleep(0.3)  # the reader threads take the last lines
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    def text(self) -> str:
        return "\n".join(self.out + self.err)
