"""The hook of one training process: its rings, its side file, its patched functions."""

from __future__ import annotations

import atexit
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
from commwatch.producers.hook import megatron
from commwatch.producers.hook.comms import Comm, CommRegistry
from commwatch.producers.hook.steps import StepTimer
from commwatch.producers.hook.wrap import SPECS, wrap_batch_p2p, wrap_call
from commwatch.settings import Settings

log = logging.getLogger(__name__)


class _Local(threading.local):
    busy = False  # inside a wrapped call on this thread


def meta_path(ring_dir: str | Path, job: str, rank: int) -> Path:
    return ringfmt.ring_path(ring_dir, job, rank, "meta.json")


class Hook:
    """State shared by the wrappers. Create through `commwatch.producers.hook.install()`."""

    def __init__(self, settings: Settings, dist: Any, *, local_rank: int | None = None,
                 coords: dict[str, int] | None = None, use_megatron: bool = False, capacity: int | None = None):
        self.settings = settings
        self.dist = dist
        self.job = settings.job_id or "default"
        self.node = settings.node_name or socket.gethostname()
        self.local_rank = local_rank
        self.coords = dict(coords) if coords else None
        self.use_megatron = use_megatron
        self.capacity = capacity or ringfmt.DEFAULT_CAPACITY
        self.tls = _Local()
        self.comms = CommRegistry(self.job, dist)
        self.ring: ringfmt.RingWriter | None = None
        self.step_ring: ringfmt.RingWriter | None = None
        self.rank = -1
        self.world_size = 0
        self.errors = 0
        self.patched: list[tuple[Any, str, Any]] = []
        self.timer = StepTimer(self._cuda())
        self.lock = threading.Lock()

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
            d = self.settings.ring_dir
            self.step_ring = ringfmt.RingWriter(ringfmt.ring_path(d, self.job, self.rank, "steps"), self.rank,
                                                self.job, ringfmt.STEP_CAPACITY, ringfmt.STEP_MAGIC)
            self.timer.ring = self.step_ring
            self.write_meta()
            self.ring = ringfmt.RingWriter(ringfmt.ring_path(d, self.job, self.rank), self.rank, self.job,
                                           self.capacity)
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
        path = meta_path(self.settings.ring_dir, self.job, self.rank)
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

    def complete(self, op: int, c: Comm, seq: int, t0: int, nbytes: int, peer: int, _future: Any) -> None:
        t1 = time.time_ns()
        self.ring.write(wire.KIND_CALL, op, wire.FLAG_COMPLETED, c.id, seq, t0, t1, nbytes, c.comm_rank, peer,
                        c.nranks, 0, t1)

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
        for name, spec in SPECS.items():
            orig = getattr(c10d, name, None)
            if orig is None:
                continue
            self._replace(name, orig, wrap_call(self, orig, spec))
        orig = getattr(c10d, "batch_isend_irecv", None)
        if orig is not None:
            self._replace("batch_isend_irecv", orig, wrap_batch_p2p(self, orig))

    def _replace(self, name: str, orig: Any, wrapper: Any) -> None:
        for mod in (self.dist.distributed_c10d, self.dist):
            if getattr(mod, name, None) is orig:
                setattr(mod, name, wrapper)
                self.patched.append((mod, name, orig))

    def close(self) -> None:
        """Restore torch, announce leaving every communicator, remove the files."""
        for mod, name, orig in reversed(self.patched):
            setattr(mod, name, orig)
        self.patched.clear()
        self.timer.flush(force=True)
        if self.ring is None:
            return
        now = time.time_ns()
        for comm in {id(c): c for c in self.comms.by_group.values()}.values():
            self.ring.write(wire.KIND_COMM_DESTROY, 0, 0, comm.id, 0, now, now, 0, comm.comm_rank, -1,
                            comm.nranks, 0, now)
        self.ring.close(unlink=True)
        if self.step_ring is not None:
            self.step_ring.close(unlink=True)
        try:
            meta_path(self.settings.ring_dir, self.job, self.rank).unlink()
        except FileNotFoundError:
            pass
        self.ring = None


_HOOK: Hook | None = None


def install(settings: Settings | None = None, *, megatron: bool = False, local_rank: int | None = None,
            coords: dict[str, int] | None = None) -> Hook:
    """Wrap torch.distributed's collectives and P2P calls; idempotent. Call it before the
    training loop (before or after `init_process_group`)."""
    global _HOOK
    if _HOOK is not None:
        return _HOOK
    import torch.distributed as dist

    settings = settings or Settings.load()
    if local_rank is None and os.environ.get("LOCAL_RANK", "").isdigit():  # set by torchrun
        local_rank = int(os.environ["LOCAL_RANK"])
    capacity = os.environ.get("COMMWATCH_RING_CAPACITY")  # shared with the C probe
    hook = Hook(settings, dist, local_rank=local_rank, coords=coords, use_megatron=megatron,
                capacity=int(capacity) if capacity else None)
    hook.patch()
    if dist.is_available() and dist.is_initialized():
        hook.open()
    _HOOK = hook
    atexit.register(uninstall)
    return hook


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
