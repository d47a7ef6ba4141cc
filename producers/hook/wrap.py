"""Wrappers around the torch.distributed calls: an entry record, then a completion record.

What the records mean depends on where the call runs (wire contract, section 1):

- a blocking backend (gloo, or a call without a device tensor): entry and completion are
  the host times around the call (no flag). Async ops complete from their work: through
  its future when it has one, else when the poller sees `work.is_completed()`;
- a stream backend (NCCL) on a device tensor: the entry is the host enqueue (ENQUEUED). A
  synchronous call is bracketed by two device events on the caller's stream and completes
  with device times (GPU_TIMED) once the end event has completed; an async op completes
  when its work is seen completed; a call captured into a CUDA graph, or one without an
  event source, gets COMPLETION_LOST at once (its completion cannot be seen).

Each wrapper resolves its arguments by position computed once from the wrapped
function's signature, so a call costs a dict lookup for the group, a counter increment
and two ring writes. Calls made from inside a wrapped call (torch implementing one
collective with another, `batch_isend_irecv` calling `isend`) pass straight through, as
do calls traced by torch.compile. Anything the hook cannot understand is counted in
`hook.errors` and the call goes on unwrapped: the hook never changes what training does.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import time
from dataclasses import dataclass
from typing import Any, Callable

from commwatch import wire

CALL = wire.KIND_CALL
DONE = wire.FLAG_COMPLETED
ENQ = wire.FLAG_ENQUEUED
GRAPH = wire.FLAG_GRAPH_CAPTURED


def tensor_bytes(t: Any) -> int:
    return t.numel() * t.element_size()


def list_bytes(ts: Any) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def first_tensor(x: Any) -> Any:
    """The tensor that decides the device: `x` itself, or the first of a list."""
    if x is None or hasattr(x, "is_cuda"):
        return x
    try:
        return x[0] if len(x) else None
    except TypeError:
        return None


@dataclass(frozen=True)
class Spec:
    """How to read one torch.distributed function's arguments."""

    op: int
    tensor: str | None = None  # argument whose size is the call's payload
    bytes_of: Callable[[Any], int] = tensor_bytes
    root: str | None = None  # rooted collectives: global root; P2P: global peer
    group_root: str | None = None  # the same in group ranks (torch >= 2.6)
    p2p: bool = False
    always_async: bool = False


SPECS: dict[str, Spec] = {
    "all_reduce": Spec(wire.OP_ALLREDUCE, "tensor"),
    "all_reduce_coalesced": Spec(wire.OP_ALLREDUCE, "tensors", bytes_of=list_bytes),
    "all_gather": Spec(wire.OP_ALLGATHER, "tensor"),
    "all_gather_coalesced": Spec(wire.OP_ALLGATHER, "input_tensor_list", bytes_of=list_bytes),
    "all_gather_single": Spec(wire.OP_ALLGATHER, "input_tensor"),
    "all_gather_into_tensor": Spec(wire.OP_ALLGATHER, "input_tensor"),
    "_all_gather_base": Spec(wire.OP_ALLGATHER, "input_tensor"),
    "reduce_scatter": Spec(wire.OP_REDUCESCATTER, "output"),
    "reduce_scatter_single": Spec(wire.OP_REDUCESCATTER, "output"),
    "reduce_scatter_tensor": Spec(wire.OP_REDUCESCATTER, "output"),
    "_reduce_scatter_base": Spec(wire.OP_REDUCESCATTER, "output"),
    "broadcast": Spec(wire.OP_BROADCAST, "tensor", root="src", group_root="group_src"),
    "reduce": Spec(wire.OP_REDUCE, "tensor", root="dst", group_root="group_dst"),
    "gather": Spec(wire.OP_GATHER, "tensor", root="dst", group_root="group_dst"),
    "scatter": Spec(wire.OP_SCATTER, "tensor", root="src", group_root="group_src"),
    "all_to_all": Spec(wire.OP_ALLTOALL, "input_tensor_list", bytes_of=list_bytes),
    "all_to_all_single": Spec(wire.OP_ALLTOALL, "input"),
    "barrier": Spec(wire.OP_BARRIER),
    "send": Spec(wire.OP_SEND, "tensor", root="dst", group_root="group_dst", p2p=True),
    "recv": Spec(wire.OP_RECV, "tensor", root="src", group_root="group_src", p2p=True),
    "isend": Spec(wire.OP_SEND, "tensor", root="dst", group_root="group_dst", p2p=True, always_async=True),
    "irecv": Spec(wire.OP_RECV, "tensor", root="src", group_root="group_src", p2p=True, always_async=True),
}


def _pos(params: list[str], name: str | None) -> int:
    return params.index(name) if name and name in params else 10**6


def wrap_call(hook: Any, fn: Callable, spec: Spec) -> Callable:
    params = list(inspect.signature(fn).parameters)
    tpos = _pos(params, spec.tensor)
    gpos = _pos(params, "group")
    apos = _pos(params, "async_op")
    rpos = _pos(params, spec.root)
    tname, rname, grname = spec.tensor, spec.root, spec.group_root
    bytes_of = spec.bytes_of
    listed = bytes_of is list_bytes  # the payload argument is a list of tensors
    op, p2p, always_async = spec.op, spec.p2p, spec.always_async
    tls = hook.tls
    comms = hook.comms.by_group
    compiling = hook.compiling
    coalesce = hook.coalesce_state  # torch's groups inside a _coalescing_manager
    time_ns = time.time_ns

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if tls.busy or compiling():
            return fn(*args, **kwargs)
        try:
            n = len(args)
            group = args[gpos] if n > gpos else kwargs.get("group")
            c = comms.get(group)
            if c is None:
                c = hook.resolve(group)
                if c is None:
                    return fn(*args, **kwargs)
            nbytes = 0
            t = None
            if tname is not None:
                t = args[tpos] if n > tpos else kwargs.get(tname)
                if t is not None:
                    nbytes = bytes_of(t)
            peer = -1
            if rname is not None:
                gr = kwargs.get(grname) if grname else None
                if gr is not None:
                    peer = gr
                else:
                    root = args[rpos] if n > rpos else kwargs.get(rname)
                    if root is not None:
                        peer = c.index_of.get(root, -1)
            if p2p:
                seq = c.next_p2p(peer, op)
                async_op = always_async
            else:
                seq = c.seq
                c.seq = seq + 1
                async_op = args[apos] if n > apos else kwargs.get("async_op", False)
            flags = 0
            start = None
            events = None
            t0 = time_ns()
            if c.stream and t is not None and hook.on_device(first_tensor(t) if listed else t):
                flags = ENQ
                events = hook.events
                if events is not None and not async_op:
                    if hook.completions.anchor is None:
                        hook.completions.start()  # first anchor before this call's events
                        t0 = time_ns()
                    start = events.record()
                    if start is None:
                        flags = ENQ | GRAPH
            ring = hook.ring
            ring.write(CALL, op, flags, c.id, seq, t0, 0, nbytes, c.comm_rank, peer, c.nranks, 0, t0)
        except Exception:
            hook.errors += 1
            return fn(*args, **kwargs)
        tls.busy = True
        try:
            result = fn(*args, **kwargs)
        finally:
            tls.busy = False
        call = (op, c, seq, t0, nbytes, peer)
        if coalesce and c.group in coalesce:
            hook.defer(call, flags, start)
        elif async_op and result is not None:
            hook.track(result, call, flags)
        elif flags:
            if start is not None:
                hook.completions.submit(call, flags, start=start, end=events.record())
            else:
                hook.completions.give_up(call, flags)
        else:
            t1 = time_ns()
            tls.waited_ns += t1 - t0
            ring.write(CALL, op, DONE, c.id, seq, t0, t1, nbytes, c.comm_rank, peer, c.nranks, 0, t1)
        return result

    wrapper.__commwatch_wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def wrap_batch_p2p(hook: Any, fn: Callable) -> Callable:
    """`batch_isend_irecv(p2p_op_list)`: one SEND/RECV record per operation."""
    tls = hook.tls
    compiling = hook.compiling
    time_ns = time.time_ns

    @functools.wraps(fn)
    def wrapper(p2p_op_list: Any, *args: Any, **kwargs: Any) -> Any:
        if tls.busy or compiling():
            return fn(p2p_op_list, *args, **kwargs)
        entries = []
        try:
            for p in p2p_op_list:
                op = wire.OP_SEND if getattr(p.op, "__name__", "") == "isend" else wire.OP_RECV
                c = hook.comms.by_group.get(p.group) or hook.resolve(p.group)
                if c is None:
                    continue
                peer = getattr(p, "group_peer", None)
                if peer is None:
                    peer = c.index_of.get(p.peer, -1)
                nbytes = tensor_bytes(p.tensor)
                seq = c.next_p2p(peer, op)
                flags = ENQ if c.stream and hook.on_device(p.tensor) else 0
                t0 = time_ns()
                hook.ring.write(CALL, op, flags, c.id, seq, t0, 0, nbytes, c.comm_rank, peer, c.nranks, 0, t0)
                entries.append(((op, c, seq, t0, nbytes, peer), flags))
        except Exception:
            hook.errors += 1
        tls.busy = True
        try:
            works = fn(p2p_op_list, *args, **kwargs)
        finally:
            tls.busy = False
        if not entries or not works:
            for call, flags in entries:  # nothing to watch: their completion cannot be seen
                hook.completions.give_up(call, flags)
            return works
        if len(works) == len(entries):
            for w, (call, flags) in zip(works, entries):
                hook.track(w, call, flags)
        else:  # coalesced into fewer works (NCCL): every operation completes with the last one
            for call, flags in entries:
                hook.track(works[-1], call, flags)
        return works

    wrapper.__commwatch_wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def wrap_coalescing(hook: Any, fn: Callable) -> Callable:
    """`_coalescing_manager(group, device, async_ops)`: calls made inside it are only queued
    by torch and issued together at its exit; they complete with the manager's work
    (async_ops) or at its exit (synchronous)."""
    tls = hook.tls

    @contextlib.contextmanager
    @functools.wraps(fn)
    def wrapper(group: Any = None, device: Any = None, async_ops: bool = False) -> Any:
        if tls.busy or hook.compiling():
            with fn(group, device, async_ops) as cm:
                yield cm
            return
        c = hook.resolve(group)
        cm = None
        try:
            with fn(group, device, async_ops) as cm:
                yield cm
        except BaseException:
            cm = None
            raise
        finally:
            deferred = hook.deferred.pop(c.id, []) if c is not None else []
            if deferred:
                hook.finish_deferred(deferred, cm, async_ops)

    wrapper.__commwatch_wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper
