"""Wrappers around the torch.distributed calls: one CALL record at entry, one at completion.

Each wrapper resolves its arguments by position computed once from the wrapped
function's signature, so a call costs a dict lookup for the group, a counter increment
and two ring writes. Calls made from inside a wrapped call (torch implementing one
collective with another, `batch_isend_irecv` calling `isend`) pass straight through.
Anything the hook cannot understand is counted in `hook.errors` and the call goes on
unwrapped: the hook never changes what training does.
"""

from __future__ import annotations

import functools
import inspect
import time
from dataclasses import dataclass
from typing import Any, Callable

from commwatch import wire

CALL = wire.KIND_CALL
DONE = wire.FLAG_COMPLETED


def tensor_bytes(t: Any) -> int:
    return t.numel() * t.element_size()


def list_bytes(ts: Any) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


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
    "all_gather": Spec(wire.OP_ALLGATHER, "tensor"),
    "all_gather_into_tensor": Spec(wire.OP_ALLGATHER, "input_tensor"),
    "reduce_scatter": Spec(wire.OP_REDUCESCATTER, "output"),
    "reduce_scatter_tensor": Spec(wire.OP_REDUCESCATTER, "output"),
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


class TrackedWork:
    """Stands in for a torch Work whose future cannot carry a callback (some P2P works):
    completion is recorded when the caller waits on it or finds it completed."""

    __slots__ = ("_work", "_done")

    def __init__(self, work: Any, done: Callable[[Any], None]):
        self._work = work
        self._done = done

    def _fire(self) -> None:
        done, self._done = self._done, None
        if done is not None:
            done(None)

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        result = self._work.wait(*args, **kwargs)
        self._fire()
        return result

    def is_completed(self) -> bool:
        completed = self._work.is_completed()
        if completed:
            self._fire()
        return completed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def track(hook: Any, work: Any, op: int, comm: Any, seq: int, t0: int, nbytes: int, peer: int) -> Any:
    """Record the completion of an async call when its work completes; returns the work
    (or a `TrackedWork` standing in for it)."""
    done = functools.partial(hook.complete, op, comm, seq, t0, nbytes, peer)
    try:
        work.get_future().add_done_callback(done)
        return work
    except Exception:  # this backend's work has no future: complete on wait()
        return TrackedWork(work, done)


def wrap_call(hook: Any, fn: Callable, spec: Spec) -> Callable:
    params = list(inspect.signature(fn).parameters)
    tpos = _pos(params, spec.tensor)
    gpos = _pos(params, "group")
    apos = _pos(params, "async_op")
    rpos = _pos(params, spec.root)
    tname, rname, grname = spec.tensor, spec.root, spec.group_root
    bytes_of = spec.bytes_of
    op, p2p, always_async = spec.op, spec.p2p, spec.always_async
    tls = hook.tls
    comms = hook.comms.by_group
    time_ns = time.time_ns

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if tls.busy:
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
            ring = hook.ring
            t0 = time_ns()
            ring.write(CALL, op, 0, c.id, seq, t0, 0, nbytes, c.comm_rank, peer, c.nranks, 0, t0)
        except Exception:
            hook.errors += 1
            return fn(*args, **kwargs)
        tls.busy = True
        try:
            result = fn(*args, **kwargs)
        finally:
            tls.busy = False
        if async_op and result is not None:
            return track(hook, result, op, c, seq, t0, nbytes, peer)
        t1 = time_ns()
        ring.write(CALL, op, DONE, c.id, seq, t0, t1, nbytes, c.comm_rank, peer, c.nranks, 0, t1)
        return result

    wrapper.__commwatch_wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def wrap_batch_p2p(hook: Any, fn: Callable) -> Callable:
    """`batch_isend_irecv(p2p_op_list)`: one SEND/RECV record per operation."""
    tls = hook.tls
    time_ns = time.time_ns

    @functools.wraps(fn)
    def wrapper(p2p_op_list: Any, *args: Any, **kwargs: Any) -> Any:
        if tls.busy:
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
                t0 = time_ns()
                hook.ring.write(CALL, op, 0, c.id, seq, t0, 0, nbytes, c.comm_rank, peer, c.nranks, 0, t0)
                entries.append((op, c, seq, t0, nbytes, peer))
        except Exception:
            hook.errors += 1
        tls.busy = True
        try:
            works = fn(p2p_op_list, *args, **kwargs)
        finally:
            tls.busy = False
        if not entries or not works:
            return works
        if len(works) == len(entries):
            return [track(hook, w, *e) for w, e in zip(works, entries)]
        # Coalesced into fewer works (NCCL): every operation completes with the last one.
        last = works[-1]
        for e in entries:
            last = track(hook, last, *e)
        return [*works[:-1], last]

    wrapper.__commwatch_wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper
