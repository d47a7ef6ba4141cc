"""Entry points of the training frameworks that do not go through `torch.distributed.*`.

- DDP: the reducer all-reduces gradient buckets from C++. A DDP model that has no
  communication hook of its own gets DDP's documented equivalent of its default,
  `default_hooks.allreduce_hook`, registered at its first forward (a user's own hook,
  registered before that, wins and is seen through the `dist.*` calls it makes).
- Functional collectives (`torch.distributed._functional_collectives`, used by DTensor,
  tensor parallelism and FSDP2 extensions): the call is recorded when issued and
  completes when its result is waited on (`wait_tensor`).
- Megatron-core binds `torch.distributed.all_gather_into_tensor` and friends to module
  globals at import (`dist_all_gather_func`, `_coalescing_manager`); those aliases are
  pointed at the wrappers when Megatron was imported before `install()`.
"""

from __future__ import annotations

import collections
import functools
import inspect
import logging
import sys
import time
from typing import Any, Callable

from commwatch import wire
from commwatch.producers.hook.wrap import CALL, DONE, ENQ, GRAPH, first_tensor, list_bytes, tensor_bytes

log = logging.getLogger(__name__)

FUNCOL_PENDING_MAX = 4096

# name -> (op, payload bytes of the first argument); the group argument is found by name
FUNCOL: dict[str, tuple[int, Callable[[Any], int]]] = {
    "all_reduce": (wire.OP_ALLREDUCE, tensor_bytes),
    "broadcast": (wire.OP_BROADCAST, tensor_bytes),
    "all_gather_single": (wire.OP_ALLGATHER, tensor_bytes),
    "all_gather_single_autograd": (wire.OP_ALLGATHER, tensor_bytes),
    "reduce_scatter_single": (wire.OP_REDUCESCATTER, tensor_bytes),
    "reduce_scatter_single_autograd": (wire.OP_REDUCESCATTER, tensor_bytes),
    "all_to_all_single": (wire.OP_ALLTOALL, tensor_bytes),
    "all_to_all_single_autograd": (wire.OP_ALLTOALL, tensor_bytes),
    "all_reduce_coalesced": (wire.OP_ALLREDUCE, list_bytes),
    "all_gather_single_coalesced": (wire.OP_ALLGATHER, list_bytes),
    "reduce_scatter_single_coalesced": (wire.OP_REDUCESCATTER, list_bytes),
    # torch < 2.13 names of the same operations (2.13 keeps them, calling the ones above)
    "all_gather_tensor": (wire.OP_ALLGATHER, tensor_bytes),
    "all_gather_tensor_autograd": (wire.OP_ALLGATHER, tensor_bytes),
    "reduce_scatter_tensor": (wire.OP_REDUCESCATTER, tensor_bytes),
    "reduce_scatter_tensor_autograd": (wire.OP_REDUCESCATTER, tensor_bytes),
    "all_gather_into_tensor_coalesced": (wire.OP_ALLGATHER, list_bytes),
    "reduce_scatter_tensor_coalesced": (wire.OP_REDUCESCATTER, list_bytes),
}


# --- DDP ----------------------------------------------------------------------------------
def patch_ddp(hook: Any) -> None:
    """Give every DistributedDataParallel built from now on the all-reduce comm hook."""
    try:
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    except Exception as exc:  # torch without distributed support
        log.debug("DDP not patched: %s", exc)
        return
    orig_init = DDP.__init__
    orig_builtin = DDP._register_builtin_comm_hook

    @functools.wraps(orig_init)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        orig_init(self, *args, **kwargs)
        try:
            watch_ddp(self, default_hooks.allreduce_hook)
        except Exception:
            hook.errors += 1

    @functools.wraps(orig_builtin)
    def register_builtin(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._commwatch_builtin_hook = True  # C++ hook: its all-reduces stay invisible
        return orig_builtin(self, *args, **kwargs)

    hook.replace_attr(DDP, "__init__", init)
    hook.replace_attr(DDP, "_register_builtin_comm_hook", register_builtin)


def watch_ddp(model: Any, allreduce_hook: Callable) -> None:
    """At the model's first forward, register `allreduce_hook` unless the user registered
    a hook already (DDP accepts one hook per model, so ours must not take the place of
    one the user registers after construction)."""

    def first_forward(module: Any, _inputs: Any) -> None:
        handle.remove()
        if getattr(module, "_comm_hooks", None) or getattr(module, "_commwatch_builtin_hook", False):
            return
        module.register_comm_hook(module.process_group, allreduce_hook)

    handle = model.register_forward_pre_hook(first_forward)


# --- functional collectives ------------------------------------------------------------------
class Funcol:
    """Functional collectives: recorded at issue, completed when their result is waited."""

    def __init__(self, hook: Any, module: Any):
        self.hook = hook
        self.mod = module
        self.pending: collections.OrderedDict[int, tuple] = collections.OrderedDict()
        self._tracing = getattr(module, "_are_we_tracing", None) or (lambda: False)
        self._resolve = getattr(module, "_resolve_group", None)

    def patch(self) -> None:
        hook = self.hook
        for name, (op, bytes_of) in FUNCOL.items():
            fn = getattr(self.mod, name, None)
            if fn is not None and not hasattr(fn, "__commwatch_wrapped__"):
                hook.replace_attr(self.mod, name, self.wrap(fn, op, bytes_of))
        wait = getattr(self.mod, "wait_tensor", None)
        if wait is not None:
            hook.replace_attr(self.mod, "wait_tensor", self.wrap_wait(wait))

    def group_of(self, group: Any) -> Any:
        """A functional collective's group (ProcessGroup, name, mesh, ranks) as a ProcessGroup."""
        if self._resolve is not None:
            group = self._resolve(group, "")
        if isinstance(group, str):
            from torch.distributed import distributed_c10d as c10d

            return c10d._resolve_process_group(group)
        return group

    def wrap(self, fn: Callable, op: int, bytes_of: Callable[[Any], int]) -> Callable:
        hook = self.hook
        tls = hook.tls
        tracing = self._tracing
        params = list(inspect.signature(fn).parameters)
        gpos = params.index("group") if "group" in params else 10**6
        tname = params[0] if params else ""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if tls.busy or hook.compiling() or tracing():
                return fn(*args, **kwargs)
            try:
                group = args[gpos] if len(args) > gpos else kwargs.get("group")
                c = hook.resolve(self.group_of(group))
                if c is None:
                    return fn(*args, **kwargs)
                t = args[0] if args else kwargs.get(tname)
                nbytes = bytes_of(t) if t is not None else 0
                seq = c.seq
                c.seq = seq + 1
                flags = 0
                start = None
                on_stream = c.stream and t is not None and hook.on_device(first_tensor(t))
                if on_stream and hook.events is not None:
                    hook.ensure_anchor()  # before this call's enqueue time and events
                t0 = time.time_ns()
                if on_stream:
                    flags = ENQ
                    if hook.events is not None:
                        start = hook.events.record()
                        if start is None:
                            flags = ENQ | GRAPH
                hook.ring.write(CALL, op, flags, c.id, seq, t0, 0, nbytes, c.comm_rank, -1, c.nranks, 0, t0)
            except Exception:
                hook.errors += 1
                return fn(*args, **kwargs)
            tls.busy = True
            try:
                out = fn(*args, **kwargs)
            finally:
                tls.busy = False
            self.remember(out, ((op, c, seq, t0, nbytes, -1), flags, start))
            return out

        wrapper.__commwatch_wrapped__ = fn  # type: ignore[attr-defined]
        return wrapper

    @staticmethod
    def _key(t: Any) -> int | None:
        elem = getattr(t, "elem", t)  # AsyncCollectiveTensor wraps the collective's output
        try:
            return elem.untyped_storage().data_ptr()
        except Exception:
            return None

    def remember(self, out: Any, entry: tuple) -> None:
        outs = out if isinstance(out, (list, tuple)) else [out]
        keys = [k for k in map(self._key, outs) if k is not None]
        if not keys:
            self.finish(entry, waited=False)
            return
        shared = [entry]  # every output of a coalesced call completes the one record
        for k in keys:
            old = self.pending.pop(k, None)
            if old:
                self.finish(old.pop(), waited=False)
            self.pending[k] = shared
        while len(self.pending) > FUNCOL_PENDING_MAX:
            _, old = self.pending.popitem(last=False)
            if old:
                self.finish(old.pop(), waited=False)

    def wrap_wait(self, fn: Callable) -> Callable:
        pending = self.pending

        @functools.wraps(fn)
        def wait_tensor(tensor: Any) -> Any:
            out = fn(tensor)
            if pending:
                key = self._key(tensor)
                shared = pending.pop(key, None) if key is not None else None
                if shared:
                    self.finish(shared.pop(), waited=True)
            return out

        wait_tensor.__commwatch_wrapped__ = fn  # type: ignore[attr-defined]
        return wait_tensor

    def finish(self, entry: tuple, waited: bool) -> None:
        """Complete a call whose result was waited: on a blocking backend the wait returned
        after the operation; on a stream the caller's stream now waits for it, so an end
        event there completes once the operation has."""
        call, flags, start = entry
        hook = self.hook
        if not waited or hook.ring is None:
            hook.completions.give_up(call, flags)
        elif not flags:
            op, c, seq, t0, nbytes, peer = call
            t1 = time.time_ns()
            hook.ring.write(CALL, op, DONE, c.id, seq, t0, t1, nbytes, c.comm_rank, peer, c.nranks, 0, t1)
        elif start is not None:
            hook.completions.submit(call, flags, start=start, end=hook.events.record())
        else:
            hook.completions.give_up(call, flags)

    def close(self) -> None:
        seen = set()
        for shared in self.pending.values():
            if shared and id(shared) not in seen:
                seen.add(id(shared))
                self.finish(shared.pop(), waited=False)
        self.pending.clear()


def patch_funcol(hook: Any) -> Funcol | None:
    try:
        import torch.distributed._functional_collectives as module
    except Exception as exc:
        log.debug("functional collectives not patched: %s", exc)
        return None
    funcol = Funcol(hook, module)
    funcol.patch()
    return funcol


# --- Megatron-core ---------------------------------------------------------------------------
def rebind_aliases(hook: Any, originals: dict[int, Any], prefixes: tuple[str, ...] = ("megatron.",)) -> int:
    """Point module globals that hold an original torch.distributed function (bound at
    import, `dist_all_gather_func = torch.distributed.all_gather_into_tensor`) at its
    wrapper, in already imported modules under `prefixes`. Returns how many."""
    n = 0
    for name, mod in list(sys.modules.items()):
        if mod is None or not name.startswith(prefixes):
            continue
        try:
            items = list(vars(mod).items())
        except TypeError:
            continue
        for attr, value in items:
            wrapper = originals.get(id(value))
            if wrapper is not None and value is not wrapper:
                hook.replace_attr(mod, attr, wrapper)
                n += 1
    return n
