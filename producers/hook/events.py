"""Device event sources: timestamps of points in a device stream, read without waiting.

The hook brackets a collective that runs on an asynchronous device stream with two
events on the caller's current stream and learns the call's device-side start and end
once the end event has completed. An event source does four things and never
synchronises anything:

- `record()`: record an event on the calling thread's current stream (the training
  thread, at the call); returns the event or None when it cannot (a stream being
  captured into a CUDA graph).
- `query(ev)`: has the device passed the event? (non-blocking)
- `elapsed_ms(a, b)`: device time from event `a` to event `b`, both completed.
- `anchor()`: record an event on an idle stream of the source's own and return it with
  the host CLOCK_REALTIME of that moment. An idle stream runs the event at once, so its
  device time is that host time: device times convert to host time as
  `host_ns(anchor) + elapsed_ms(anchor, ev) * 1e6`.

`CudaEvents` is the real one (torch.cuda, a pool of reusable timing events). `ScriptedEvents`
is a scripted device for tests and benchmarks where no GPU exists: its events complete when
the script says, at the device times the script gives, on a device clock that runs at a
scripted offset from the host clock. Nothing it produces is a measurement of a GPU.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Protocol

POOL_MAX = 4096  # events kept for reuse


class EventSource(Protocol):
    name: str

    def record(self) -> Any: ...

    def query(self, ev: Any) -> bool: ...

    def elapsed_ms(self, a: Any, b: Any) -> float: ...

    def anchor(self) -> tuple[Any, int]: ...

    def release(self, ev: Any) -> None: ...

    def on_device(self, tensor: Any) -> bool: ...


class CudaEvents:
    """torch.cuda timing events on the current CUDA device.

    Events are reused from a bounded pool (creating one per call costs more than
    recording it). `release()` may run on the poller thread while the training thread
    takes from the pool: a deque's append/pop are atomic.
    """

    name = "cuda"

    def __init__(self, torch: Any):
        self.cuda = torch.cuda
        self._capturing = torch.cuda.is_current_stream_capturing
        self._pool: collections.deque = collections.deque()
        self.device: int | None = None  # the training thread's device, learnt at the first anchor
        self._stream: Any = None  # the idle stream of the anchors

    @staticmethod
    def available(torch: Any) -> bool:
        try:
            return bool(torch.cuda.is_available())
        except Exception:
            return False

    def record(self) -> Any:
        if self._capturing():
            return None
        try:
            ev = self._pool.pop()
        except IndexError:
            ev = self.cuda.Event(enable_timing=True)
        # the stream of an int device: `current_stream()` without one resolves the current
        # device through a slow path (H100 host, profiled: 154 ms over 6000 records, 36 with it)
        ev.record(self.cuda.current_stream(self.device) if self.device is not None else None)
        return ev

    def query(self, ev: Any) -> bool:
        return ev.query()

    def elapsed_ms(self, a: Any, b: Any) -> float:
        return a.elapsed_time(b)

    def anchor(self) -> tuple[Any, int]:
        """The first call comes from the training thread (its device is the one every
        later event lives on); later ones from the poller thread."""
        if self.device is None:
            self.device = self.cuda.current_device()
            self._stream = self.cuda.Stream(device=self.device)
        ev = self.cuda.Event(enable_timing=True)
        ev.record(self._stream)
        return ev, time.time_ns()

    def thread_init(self) -> None:
        """On the poller thread: use the training device (a thread starts on device 0, and
        touching it would create a context there)."""
        if self.device is not None:
            self.cuda.set_device(self.device)

    def release(self, ev: Any) -> None:
        if ev is not None and len(self._pool) < POOL_MAX:
            self._pool.append(ev)

    @staticmethod
    def on_device(tensor: Any) -> bool:
        return tensor.is_cuda


class ScriptedEvent:
    __slots__ = ("device_ns", "recorded_ns")

    def __init__(self, recorded_ns: int):
        self.recorded_ns = recorded_ns  # host time of record()
        self.device_ns: int | None = None  # set when the scripted device passes it


class ScriptedEvents:
    """A scripted device (no GPU): every event the hook records is kept in `recorded`.

    `auto=True`: an event completes as soon as it is recorded, at device time = host time
    + `offset_ns` (used by the benchmark). `auto=False`: events stay pending until the
    script calls `finish(ev, device_ns)`. Anchors always complete at once, like an event on
    an idle stream. `on_device` treats every tensor as living on the device, so a test can
    drive the device path with CPU tensors on a gloo group.
    """

    name = "scripted"

    def __init__(self, offset_ns: int = 0, auto: bool = True, capturing: bool = False):
        self.offset_ns = offset_ns
        self.auto = auto
        self.capturing = capturing
        self.recorded: list[ScriptedEvent] = []
        self.anchors = 0
        self.lock = threading.Lock()

    def device_now(self) -> int:
        return time.time_ns() + self.offset_ns

    def record(self) -> Any:
        if self.capturing:
            return None
        ev = ScriptedEvent(time.time_ns())
        if self.auto:
            ev.device_ns = ev.recorded_ns + self.offset_ns
        else:
            with self.lock:
                self.recorded.append(ev)
        return ev

    def finish(self, ev: ScriptedEvent, device_ns: int) -> None:
        ev.device_ns = device_ns

    def query(self, ev: ScriptedEvent) -> bool:
        return ev.device_ns is not None

    def elapsed_ms(self, a: ScriptedEvent, b: ScriptedEvent) -> float:
        if a.device_ns is None or b.device_ns is None:
            raise RuntimeError("elapsed time of an event that has not completed")
        return (b.device_ns - a.device_ns) / 1e6

    def anchor(self) -> tuple[Any, int]:
        self.anchors += 1
        now = time.time_ns()
        ev = ScriptedEvent(now)
        ev.device_ns = now + self.offset_ns
        return ev, now

    def release(self, ev: Any) -> None:
        pass

    @staticmethod
    def on_device(tensor: Any) -> bool:
        return True
