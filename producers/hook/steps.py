"""Iteration boundaries and phase timings, written to the rank's step ring (`<rank>.steps`).

`mark()` is an iteration boundary: the first call starts iteration 0 (or the given
number), each later call ends the current iteration and starts the next. `phase(name)`
times a block (forward, backward, optimizer): with CUDA events when the rank runs on a
GPU, resolved only once the GPU has passed them (never a synchronize), else on the CPU
clock less the time the thread spent inside blocking collectives meanwhile (a collective's
duration is a wait for the others: a phase that holds one would make its victims look slow). An iteration whose GPU phases are still pending waits in a short queue; when the
queue is full its record is written without phases.
"""

from __future__ import annotations

import collections
import contextlib
import time
from typing import Any, Iterator

MAX_PENDING = 8


class StepTimer:
    def __init__(self, cuda: Any = None, tls: Any = None):
        self.cuda = cuda  # torch.cuda when the rank uses a GPU, else None
        self.tls = tls  # the hook's thread state: `waited_ns` inside blocking collectives
        self.ring: Any = None
        self.iteration = -1
        self.t_start_ns = 0
        self.mono_start_ns = 0
        self.phases: dict[str, list] = {}  # name -> [cpu ms] or [(start_event, end_event), ...]
        self.pending: collections.deque = collections.deque()
        self.steps = 0

    def mark(self, iteration: int | None = None) -> None:
        # the iteration ends now on the wall clock, and lasted what the monotonic clock says:
        # a wall clock stepped back inside it (NTP) would date its end before its start, and
        # the step would be refused at decode (an independent generator's node stepped 3 s back)
        now, mono = time.time_ns(), time.monotonic_ns()
        if self.iteration >= 0:
            self.pending.append((self.iteration, now - (mono - self.mono_start_ns), now, self.phases))
            self.flush()
        self.iteration = self.iteration + 1 if iteration is None else iteration
        self.t_start_ns, self.mono_start_ns = now, mono
        self.phases = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self.cuda is not None:
            start = self.cuda.Event(enable_timing=True)
            end = self.cuda.Event(enable_timing=True)
            start.record()
            try:
                yield
            finally:
                end.record()
                self.phases.setdefault(name, []).append((start, end))
            return
        tls = self.tls
        w0 = tls.waited_ns if tls is not None else 0
        t0 = time.perf_counter_ns()
        try:
            yield
        finally:
            waited = (tls.waited_ns - w0) if tls is not None else 0
            self.phases.setdefault(name, []).append(max(0, time.perf_counter_ns() - t0 - waited) / 1e6)

    def flush(self, force: bool = False) -> None:
        """Write every finished iteration whose phases are known (all, when `force`)."""
        while self.pending:
            iteration, t0, t1, phases = self.pending[0]
            ms = self._resolve(phases)
            if ms is None and not force and len(self.pending) <= MAX_PENDING:
                return
            self.pending.popleft()
            ms = ms or {}
            if self.ring is not None:
                nan = float("nan")
                self.ring.write_step(iteration, t0, t1, ms.get("forward", nan), ms.get("backward", nan),
                                     ms.get("optimizer", nan))
                self.steps += 1

    @staticmethod
    def _resolve(phases: dict[str, list]) -> dict[str, float] | None:
        out = {}
        for name, parts in phases.items():
            total = 0.0
            for p in parts:
                if isinstance(p, float):
                    total += p
                elif not p[1].query():
                    return None
                else:
                    total += p[0].elapsed_time(p[1])
            out[name] = total
        return out
