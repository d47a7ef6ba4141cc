"""The hook of one training process: its rings, its side file, its patched functions."""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from commwatch import ring as ringfmt
from commwatch import wire
from commwatch.producers.hook import frameworks, megatron
from commwatch.producers.hook.comms import STREAM_BACKENDS, Comm, CommRegistry
from commwatch.producers.hook.completion import TIMEOUT_S, Completions
from commwatch.producers.hook.events import CudaEvents
from commwatch.producers.hook.steps import StepTimer
from commwatch.producers.hook.wrap import DONE, SPECS, wrap_batch_p2p, wrap_call, wrap_coalescing
from commwatch.settings import Settings

log = logging.getLogger(__name__)

DEFERRED_MAX = 4096  # calls queued inside one _coalescing_manager


class _Local(threading.local):
    busy = False  # inside a wrapped call on this thread
    waited_ns = 0  # time this thread spent inside blocking collectives (phases leave it out)


def meta_path(ring_dir: str | Path, job: str, rank: int) -> Path:
    return ringfmt.ring_path(ring_dir, job, rank, "meta.json")


def _not_cpu(t: Any) -> bool:
    return not t.is_cpu


class Hook:
    """State shared by the wrappers. Create through `commwatch.producers.hook.install()`.

    `events`: the device event source ("auto": CUDA when available, else none; or an
    `EventSource`, such as a scripted one in tests). `stream_backends`: backends whose
    device calls return at enqueue.
    """

    def __init__(self, settings: Settings, dist: Any, *, local_rank: int | None = None,
                 coords: dict[str, int] | None = None, use_megatron: bool = False, capacity: int | None = None,
                 events: Any = "auto", completion_timeout_s: float = TIMEOUT_S,
                 stream_backends: frozenset[str] = STREAM_BACKENDS):
        import torch

        self.settings = settings
        self.dist = dist
        self.job = settings.job_id or "default"
        self.node = settings.node_name or socket.gethostname()
        self.local_rank = local_rank
        self.coords = dict(coords) if coords else None
        self.use_megatron = use_megatron
        self.capacity = capacity or ringfmt.DEFAULT_CAPACITY
        self.tls = _Local()
        self.comms = CommRegistry(self.job, dist, stream_backends)
        self.ring: ringfmt.RingWriter | None = None
        self.step_ring: ringfmt.RingWriter | None = None
        self.rank = -1
        self.world_size = 0
        self.errors = 0
        self.patched: list[tuple[Any, str, Any]] = []
        self.timer = StepTimer(self._cuda(), self.tls)
        self.lock = threading.Lock()
        if events == "auto":
            events = CudaEvents(torch) if CudaEvents.available(torch) else None
        self.events = events
        self.on_device = events.on_device if events is not None else _not_cpu
        self.completion_timeout_s = completion_timeout_s
        self.completions = Completions(self.write_call, events, timeout_s=completion_timeout_s)
        compiler = getattr(torch, "compiler", None)
        self.compiling = getattr(compiler, "is_compiling", None) or (lambda: False)
        world = getattr(dist.distributed_c10d, "_world", None)
        self.coalesce_state = getattr(world, "pg_coalesce_state", None)
        if self.coalesce_state is None:
            self.coalesce_state = {}
        self.deferred: dict[int, list] = {}  # comm id -> calls queued in a coalescing manager
        self.funcol: frameworks.Funcol | None = None

    @staticmethod
    def _cuda() -> Any:
        try:
            import torch

            return torch.cuda if torch.cuda.is_available() else None
        except ImportError:
            return None

    # --- files ------------------------------------------------------------------------
    def open(self) -> None:
        """Create the rings and the side file; needs the default process group."""
        with self.lock:
            if self.ring is not None:
                return
            self.rank = self.dist.get_rank()
            self.world_size = self.dist.get_world_size()
            self.ring = ringfmt.RingWriter(ringfmt.ring_path(self.settings.ring_dir, self.job, self.rank),
                                           self.rank, self.job, self.capacity)
            self.step_ring = ringfmt.RingWriter(ringfmt.companion(self.ring.path, "steps"), self.rank, self.job,
                                                ringfmt.STEP_CAPACITY, ringfmt.STEP_MAGIC)
            self.timer.ring = self.step_ring
            self.write_meta()
            if self.completions is None:
                self.completions = Completions(self.write_call, self.events, timeout_s=self.completion_timeout_s)
        log.info("commwatch hook: rank %d writes %s", self.rank, self.ring.path)
        self.check_reader()

    def check_reader(self) -> None:
        """Warn when the stack under the data directory reads rings elsewhere (once, at open)."""
        from commwatch import discovery

        try:
            stack = discovery.running_stack(self.settings.data_dir)
        except Exception:  # never let a look-up disturb training
            return
        if stack is None:
            log.info("commwatch hook: no commwatch stack runs under %s; a `commwatch agent` on this node must read "
                     "%s", self.settings.data_dir, self.settings.ring_dir)
            return
        theirs = stack.env.get("COMMWATCH_RING_DIR", "")
        if theirs and Path(theirs).absolute() != Path(self.settings.ring_dir).absolute():
            log.warning("commwatch hook: the stack under %s reads rings in %s but this rank writes them in %s; "
                        "set COMMWATCH_RING_DIR=%s (see %s)", stack.data_dir, theirs, self.settings.ring_dir, theirs,
                        discovery.stack_file(stack.data_dir))

    def meta_file(self) -> Path:
        if self.ring is not None:
            return ringfmt.companion(self.ring.path, "meta.json")
        return meta_path(self.settings.ring_dir, self.job, self.rank)

    def write_meta(self) -> None:
        """`<rank>.meta.json`: the rank's placement, read by the agent for cw.topology.v1."""
        meta: dict[str, Any] = {"v": 1, "job": self.job, "rank": self.rank, "world_size": self.world_size,
                                "node": self.node, "pid": os.getpid(), "ts_ns": time.time_ns()}
        if self.local_rank is not None:
            meta["local_rank"] = int(self.local_rank)
        gpu = self._gpu_uuid()
        if gpu:
            meta["gpu"] = gpu
        if self.coords:
            meta["coords"] = self.coords
        path = self.meta_file()
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, path)

    def _gpu_uuid(self) -> str | None:
        cuda = self.timer.cuda
        if cuda is None or not cuda.is_initialized():
            return None
        try:
            uuid = str(cuda.get_device_properties(cuda.current_device()).uuid)
        except Exception:
            return None
        return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"

    # --- called by the wrappers ---------------------------------------------------------
    def resolve(self, group: Any) -> Comm | None:
        if self.ring is None:
            self.open()
        comm = self.comms.resolve(group)
        if comm is not None and not comm.announced:
            comm.announced = True
            now = time.time_ns()
            self.ring.write(wire.KIND_COMM_INIT, 0, 0, comm.id, 0, now, now, 0, comm.comm_rank, -1,
                            comm.nranks, 0, now)
        return comm

    def write_call(self, op: int, flags: int, c: Comm, seq: int, t_start: int, t_end: int, nbytes: int,
                   peer: int) -> None:
        ring = self.ring
        if ring is not None:
            ring.write(wire.KIND_CALL, op, flags, c.id, seq, t_start, t_end, nbytes, c.comm_rank, peer, c.nranks,
                       0, time.time_ns())

    def ensure_anchor(self) -> None:
        if self.completions.anchor is None:
            self.completions.start()

    def track(self, work: Any, call: tuple, flags: int) -> None:
        """Complete an async call from its work: through its future on a blocking backend
        (the future completes with the operation), else by the poller's observation."""
        if not flags:
            try:
                work.get_future().add_done_callback(functools.partial(self._future_done, call))
                return
            except Exception:  # this work has no future (some P2P works)
                pass
        self.completions.submit(call, flags, work=work)

    def _future_done(self, call: tuple, _fut: Any) -> None:
        op, c, seq, t0, nbytes, peer = call
        self.write_call(op, DONE, c, seq, t0, time.time_ns(), nbytes, peer)

    def defer(self, call: tuple, flags: int, start: Any) -> None:
        """A call queued inside a `_coalescing_manager`; it completes at the manager's exit."""
        queued = self.deferred.setdefault(call[1].id, [])
        queued.append((call, flags, start))
        if len(queued) > DEFERRED_MAX:  # a manager whose exit is never seen
            old_call, old_flags, _ = queued.pop(0)
            self.completions.give_up(old_call, old_flags)

    def finish_deferred(self, entries: list, cm: Any, async_ops: bool) -> None:
        works = getattr(cm, "works", None) if cm is not None and async_ops else None
        for call, flags, start in entries:
            if cm is None or (async_ops and not works):
                self.completions.give_up(call, flags)
            elif async_ops:
                self.track(works[-1], call, flags)
            elif not flags:
                op, c, seq, t0, nbytes, peer = call
                self.write_call(op, DONE, c, seq, t0, time.time_ns(), nbytes, peer)
            elif start is not None:
                self.completions.submit(call, flags, start=start, end=self.events.record())
            else:
                self.completions.give_up(call, flags)

    # --- public ----------------------------------------------------------------------
    def step(self, iteration: int | None = None) -> None:
        if self.ring is None and self.dist.is_initialized():
            self.open()
        if self.use_megatron and self.coords is None and self.ring is not None:
            found = megatron.coords()
            if found:
                self.set_coords(**found)
        self.timer.mark(iteration)

    def set_coords(self, **coords: int) -> None:
        self.coords = {k: int(v) for k, v in coords.items()}
        if self.ring is not None:
            self.write_meta()

    def patch(self) -> None:
        c10d = self.dist.distributed_c10d
        originals: dict[int, Any] = {}
        for name, spec in SPECS.items():
            orig = getattr(c10d, name, None)
            if orig is None or hasattr(orig, "__commwatch_wrapped__"):
                continue
            originals[id(orig)] = self._replace(name, orig, wrap_call(self, orig, spec))
        for name, wrap in (("batch_isend_irecv", wrap_batch_p2p), ("_coalescing_manager", wrap_coalescing)):
            orig = getattr(c10d, name, None)
            if orig is not None and not hasattr(orig, "__commwatch_wrapped__"):
                originals[id(orig)] = self._replace(name, orig, wrap(self, orig))
        orig = getattr(c10d, "destroy_process_group", None)
        if orig is not None:
            self._replace("destroy_process_group", orig, self._wrap_destroy(orig))
        frameworks.patch_ddp(self)
        self.funcol = frameworks.patch_funcol(self)
        n = frameworks.rebind_aliases(self, originals)
        if n:
            log.info("commwatch hook: %d torch.distributed aliases in Megatron modules now recorded", n)

    def _replace(self, name: str, orig: Any, wrapper: Any) -> Any:
        for mod in (self.dist.distributed_c10d, self.dist):
            if getattr(mod, name, None) is orig:
                self.replace_attr(mod, name, wrapper)
        return wrapper

    def replace_attr(self, owner: Any, name: str, value: Any) -> None:
        """Set `owner.name = value`, remembering the old value for `close()`."""
        self.patched.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def _wrap_destroy(self, fn: Any) -> Any:
        """Destroying the default group finalises the rank's files; a later group reopens them."""

        @functools.wraps(fn)
        def destroy_process_group(group: Any = None) -> Any:
            if group is None and self.ring is not None:
                self.finish_files()
            return fn(group)

        destroy_process_group.__commwatch_wrapped__ = fn  # type: ignore[attr-defined]
        return destroy_process_group

    def finish_files(self) -> None:
        """Give up on open calls, announce leaving every communicator, remove the files
        (ring last: its lock says this writer is alive), forget the groups."""
        self.completions.close()
        if self.funcol is not None:
            self.funcol.close()
        for entries in self.deferred.values():
            for call, flags, _ in entries:
                self.completions.give_up(call, flags)
        self.deferred.clear()
        self.timer.flush(force=True)
        ring = self.ring
        if ring is None:
            return
        now = time.time_ns()
        for comm in {id(c): c for c in self.comms.by_group.values()}.values():
            ring.write(wire.KIND_COMM_DESTROY, 0, 0, comm.id, 0, now, now, 0, comm.comm_rank, -1,
                       comm.nranks, 0, now)
        if self.step_ring is not None:
            self.step_ring.close(unlink=True)
            self.step_ring = self.timer.ring = None
        try:
            self.meta_file().unlink()
        except FileNotFoundError:
            pass
        ring.close(unlink=True)
        self.ring = None
        self.comms = CommRegistry(self.job, self.dist, self.comms.stream_backends)
        self.completions = None

    def forget_in_child(self) -> None:
        """In a process forked from the training process: restore torch there and leave the
        parent's files to the parent (the rings were let go by `commwatch.ring`)."""
        for owner, name, orig in reversed(self.patched):
            setattr(owner, name, orig)
        self.patched.clear()
        self.ring = self.step_ring = self.timer.ring = None
        self.completions = None

    def close(self) -> None:
        """Restore torch and finalise the files."""
        for owner, name, orig in reversed(self.patched):
            setattr(owner, name, orig)
        self.patched.clear()
        if self.completions is None:
            return
        self.finish_files()


_HOOK: Hook | None = None


def install(settings: Settings | None = None, *, megatron: bool = False, local_rank: int | None = None,
            coords: dict[str, int] | None = None, completion_timeout_s: float = TIMEOUT_S) -> Hook:
    """Wrap torch.distributed's collectives and P2P calls, DDP's gradient all-reduce and
    the functional collectives; idempotent. Call it before the training loop and before
    wrapping the model in DDP (before or after `init_process_group`).
    `completion_timeout_s`: a call whose completion is not seen this long is reported as
    COMPLETION_LOST (keep it above the job's NCCL timeout)."""
    global _HOOK
    if _HOOK is not None:
        return _HOOK
    import torch.distributed as dist

    settings = settings or Settings.load()
    if local_rank is None and os.environ.get("LOCAL_RANK", "").isdigit():  # set by torchrun
        local_rank = int(os.environ["LOCAL_RANK"])
    capacity = os.environ.get("COMMWATCH_RING_CAPACITY")  # shared with the C probe
    hook = Hook(settings, dist, local_rank=local_rank, coords=coords, use_megatron=megatron,
                capacity=int(capacity) if capacity else None, completion_timeout_s=completion_timeout_s)
    hook.patch()
    if dist.is_available() and dist.is_initialized():
        hook.open()
    _HOOK = hook
    atexit.register(uninstall)
    os.register_at_fork(after_in_child=_forget_in_child)
    return hook


def _forget_in_child() -> None:
    global _HOOK
    hook, _HOOK = _HOOK, None
    if hook is not None:
        hook.forget_in_child()


def uninstall() -> None:
    global _HOOK
    hook, _HOOK = _HOOK, None
    if hook is not None:
        hook.close()


def step(iteration: int | None = None) -> None:
    """Mark an iteration boundary (feeds cw.steps.v1)."""
    if _HOOK is not None:
        _HOOK.step(iteration)


def phase(name: str) -> Any:
    """`with phase("forward"): ...` times a phase of the current iteration."""
    if _HOOK is None:
        import contextlib

        return contextlib.nullcontext()
    return _HOOK.timer.phase(name)


def set_coords(**coords: int) -> None:
    """Parallel coordinates of this rank (tp, pp, dp, cp, ep) for cw.topology.v1."""
    if _HOOK is not None:
        _HOOK.set_coords(**coords)


def current() -> Hook | None:
    return _HOOK
