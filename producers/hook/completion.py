"""Completion of calls that return before they finish, observed off the training thread.

On an asynchronous device stream (NCCL) a torch.distributed call returns once the
operation is queued; it finishes later on the device. The training thread hands such a
call to `Completions` and goes on; a poller thread writes its completion record once
completion is observed:

- device-timed calls (a start and an end event around a call on the caller's stream):
  when the end event has completed. Both times are device times converted to the host
  clock through an *anchor* (an event recorded on an idle stream with its host time, taken
  again every second) and the record carries GPU_TIMED;
- works (async ops, works without a future): when `work.is_completed()` turns true; the
  completion time is when the poller saw it, the entry time stays the host enqueue.

A device-timed call whose start event has completed and whose end event has not, for
`device_entry_s` (1 s) of the poller's time, is written once more as an entry: GPU_TIMED
without COMPLETED, its start the device's (wire spec 1). Its rank is inside the call on
the GPU, not only queued behind other work: what tells a waiting rank from the rank whose
GPU never reached the call. Calls that finish sooner (every call of a healthy job) get no
third record.

Nothing here waits on the device: events and works are only queried. The hand-over is a
bounded queue; when it is full the call is dropped, counted in `dropped`, and its record
says COMPLETION_LOST at once. A call whose completion is not seen within `timeout_s` (or
still open when the hook closes) gets a COMPLETION_LOST record too: the probe gave up on
it, which detectors must not read as a wait.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable

from commwatch import wire

log = logging.getLogger(__name__)

DONE = wire.FLAG_COMPLETED
GPU = wire.FLAG_GPU_TIMED
LOST = wire.FLAG_COMPLETION_LOST

CAPACITY = 4096  # calls waiting for completion (queued + pending)
POLL_S = 0.005  # poll period while calls are pending
IDLE_S = 0.05  # poll period when nothing is pending
ANCHOR_S = 1.0  # re-anchor device time to host time this often while busy
TIMEOUT_S = 600.0  # give up on a completion after this long (NCCL's own watchdog default)
DEVICE_ENTRY_S = 1.0  # a call started on the device and not done this long gets a device entry


class Pending:
    """One call waiting for its completion. `call` = (op, comm, seq, t0, nbytes, peer)."""

    __slots__ = ("call", "flags", "start", "end", "anchor", "work", "deadline", "on_device")

    def __init__(self, call: tuple, flags: int, start: Any = None, end: Any = None, anchor: Any = None,
                 work: Any = None, deadline: float = 0.0):
        self.call = call
        self.flags = flags
        self.start = start
        self.end = end
        self.anchor = anchor
        self.work = work
        self.deadline = deadline
        self.on_device = 0.0  # when the poller first saw its start event done (-1: device entry written)


class Completions:
    """The poller. `write(op, flags, comm, seq, t_start, t_end, nbytes, peer)` publishes a record."""

    def __init__(self, write: Callable[..., None], events: Any = None, *, capacity: int = CAPACITY,
                 timeout_s: float = TIMEOUT_S, poll_s: float = POLL_S, idle_s: float = IDLE_S,
                 anchor_s: float = ANCHOR_S, device_entry_s: float = DEVICE_ENTRY_S):
        self.write = write
        self.events = events
        self.capacity = capacity
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.idle_s = idle_s
        self.anchor_s = anchor_s
        self.device_entry_s = device_entry_s
        self.device_entries = 0
        self.inbox: collections.deque[Pending] = collections.deque()
        self.pending: list[Pending] = []
        self.n_pending = 0  # len(pending), published by the poller for the training thread
        self.anchor: tuple[Any, int] | None = None
        self._anchor_mono = 0.0
        self.completed = 0
        self.dropped = 0  # calls refused because the queue was full
        self.lost = 0  # calls given up on (timeout, close, dropped)
        self.busy_ns = 0  # time the poller spent in its passes
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # --- training thread ----------------------------------------------------------------
    def start(self) -> None:
        """Start the poller; with an event source, take the first anchor on the calling
        (training) thread so that every later event has an anchor recorded before it."""
        with self._lock:
            if self._thread is not None:
                return
            if self.events is not None and self.anchor is None:
                self.reanchor()
            self._thread = threading.Thread(target=self._run, name="commwatch-completions", daemon=True)
            self._thread.start()

    def submit(self, call: tuple, flags: int, *, start: Any = None, end: Any = None, work: Any = None) -> None:
        """Hand over a call: device-timed (`start`, `end` events) or a `work` to watch."""
        if self._thread is None:
            self.start()
        if len(self.inbox) + self.n_pending >= self.capacity:
            self.dropped += 1
            self.give_up(call, flags)
            if self.events is not None:
                self.events.release(start)
                self.events.release(end)
            return
        self.inbox.append((call, flags, start, end, self.anchor, work))  # a tuple: the cheapest hand-over

    def give_up(self, call: tuple, flags: int) -> None:
        op, comm, seq, t0, nbytes, peer = call
        self.lost += 1
        self.write(op, flags | LOST, comm, seq, t0, 0, nbytes, peer)

    # --- poller thread ------------------------------------------------------------------
    def reanchor(self) -> None:
        self.anchor = self.events.anchor()
        self._anchor_mono = time.monotonic()

    def _run(self) -> None:
        thread_init = getattr(self.events, "thread_init", None)
        if thread_init is not None:
            thread_init()
        while not self._stop.is_set():
            t0 = time.perf_counter_ns()
            try:
                busy = self.poll()
            except Exception:  # never let the poller die: count and go on
                log.exception("commwatch hook: completion poller error")
                busy = True
            self.busy_ns += time.perf_counter_ns() - t0
            self._stop.wait(self.poll_s if busy else self.idle_s)

    def poll(self) -> bool:
        """One pass: complete what is done, give up on what expired; True while calls pend."""
        mono = time.monotonic()
        ev = self.events
        if ev is not None and self.anchor is not None and mono - self._anchor_mono >= self.anchor_s:
            self.reanchor()  # also while idle: the next call converts with an anchor this recent
        inbox = self.inbox
        pending = self.pending
        if inbox:
            deadline = mono + self.timeout_s  # counted from when the poller first sees the call
            while inbox:
                call, flags, start, end, anchor, work = inbox.popleft()
                pending.append(Pending(call, flags, start, end, anchor if end is not None else None, work,
                                       deadline))
        if not pending:
            self.n_pending = 0
            return False
        keep = []
        for p in pending:
            if p.end is not None:
                if ev.query(p.end) and ev.query(p.anchor[0]):
                    self._complete_timed(p)
                    continue
                if p.on_device >= 0:
                    self._device_entry(p, mono)
            else:
                try:
                    done = p.work.is_completed()
                except Exception:  # a work that cannot say: its completion will not be seen
                    done = None
                if done:
                    op, comm, seq, t0, nbytes, peer = p.call
                    self.completed += 1
                    self.write(op, p.flags | DONE, comm, seq, t0, time.time_ns(), nbytes, peer)
                    continue
                if done is None:
                    self.give_up(p.call, p.flags)
                    continue
            if mono >= p.deadline:
                self.give_up(p.call, p.flags)
                self._release(p)
                continue
            keep.append(p)
        self.pending = keep
        self.n_pending = len(keep)
        return bool(keep)

    def _complete_timed(self, p: Pending) -> None:
        ev = self.events
        anchor_ev, anchor_ns = p.anchor
        t_start = anchor_ns + int(ev.elapsed_ms(anchor_ev, p.start) * 1e6)
        t_end = anchor_ns + int(ev.elapsed_ms(anchor_ev, p.end) * 1e6)
        op, comm, seq, _t0, nbytes, peer = p.call
        flags = (p.flags & ~wire.FLAG_ENQUEUED) | GPU | DONE
        self.completed += 1
        self.write(op, flags, comm, seq, t_start, max(t_end, t_start), nbytes, peer)
        self._release(p)

    def _device_entry(self, p: Pending, mono: float) -> None:
        ev = self.events
        if p.on_device == 0.0:
            if ev.query(p.start) and ev.query(p.anchor[0]):
                p.on_device = mono
            return
        if mono - p.on_device < self.device_entry_s:
            return
        anchor_ev, anchor_ns = p.anchor
        op, comm, seq, _t0, nbytes, peer = p.call
        p.on_device = -1.0
        self.device_entries += 1
        self.write(op, (p.flags & ~wire.FLAG_ENQUEUED) | GPU, comm, seq,
                   anchor_ns + int(ev.elapsed_ms(anchor_ev, p.start) * 1e6), 0, nbytes, peer)

    def _release(self, p: Pending) -> None:
        if self.events is not None and p.end is not None:
            self.events.release(p.start)
            self.events.release(p.end)

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop the poller; one last pass, then every call still open is given up."""
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout_s)
        try:
            self.poll()
        except Exception:
            log.exception("commwatch hook: completion poller error at close")
        for p in self.pending:
            self.give_up(p.call, p.flags)
        self.pending = []
        self.n_pending = 0
