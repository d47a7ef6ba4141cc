"""Communicator identity for torch process groups, and the per-communicator counters.

A group's id must be equal on every member rank without talking to the others: it is
the 64-bit blake2b of (job, torch's group name, sorted global ranks). torch names groups
from their creation order, which every rank shares (all ranks call `new_group` in the
same order), so two groups over the same ranks still get different ids.

A group whose device backend queues work on an asynchronous stream (NCCL and its kin)
is a *stream* group: its calls on device tensors return at enqueue, not at completion.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

STREAM_BACKENDS = frozenset({"nccl", "xccl", "hccl", "mccl", "ucc"})


def is_stream_backend(backend: str, stream_backends: frozenset[str] = STREAM_BACKENDS) -> bool:
    """`backend` as `dist.get_backend()` names it: "nccl", "gloo", or "cpu:gloo,cuda:nccl"."""
    names = [part.rsplit(":", 1)[-1].strip().lower() for part in str(backend).split(",")]
    return any(n in stream_backends for n in names)


def comm_id(job: str, group_name: str, ranks: list[int]) -> int:
    text = f"{job}|{group_name}|{','.join(map(str, sorted(ranks)))}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


@dataclass(slots=True)
class Comm:
    """One process group as this rank sees it; `seq` and `p2p` count calls per the contract."""

    id: int
    ranks: list[int]
    comm_rank: int
    group: Any  # kept so that the id() key of the cache cannot be reused
    nranks: int = 0
    seq: int = 0
    announced: bool = False  # COMM_INIT written
    stream: bool = False  # device calls return at enqueue (see the module doc)
    p2p: dict[tuple[int, int], int] = field(default_factory=dict)  # (peer, op) -> next seq
    index_of: dict[int, int] = field(default_factory=dict)  # global rank -> comm rank

    def __post_init__(self) -> None:
        self.nranks = len(self.ranks)
        self.index_of = {g: i for i, g in enumerate(self.ranks)}

    def next_seq(self) -> int:
        s = self.seq
        self.seq = s + 1
        return s

    def next_p2p(self, peer: int, op: int) -> int:
        key = (peer, op)
        s = self.p2p.get(key, 0)
        self.p2p[key] = s + 1
        return s


class CommRegistry:
    """Process groups seen so far, keyed by the group object (`None` = the default group)."""

    def __init__(self, job: str, dist: Any, stream_backends: frozenset[str] = STREAM_BACKENDS):
        self.job = job
        self.dist = dist
        self.stream_backends = stream_backends
        self.by_group: dict[Any, Comm] = {}
        self._fallback_names: dict[tuple[int, ...], int] = {}

    def resolve(self, group: Any) -> Comm | None:
        """The Comm of `group`, or None when this rank is not a member."""
        dist = self.dist
        g = group if group is not None else dist.distributed_c10d._get_default_group()
        if g is dist.GroupMember.NON_GROUP_MEMBER or g is None:
            return None
        known = self.by_group.get(g)
        if known is not None:
            self.by_group[group] = known
            return known
        ranks = list(dist.get_process_group_ranks(g))
        name = getattr(g, "group_name", None)
        if not name:  # older torch: first-use order over the same rank set
            key = tuple(sorted(ranks))
            n = self._fallback_names.get(key, 0)
            self._fallback_names[key] = n + 1
            name = f"first-use-{n}"
        comm = Comm(comm_id(self.job, name, ranks), ranks, dist.get_rank(g), g)
        try:
            comm.stream = is_stream_backend(dist.get_backend(g), self.stream_backends)
        except Exception:  # a group torch cannot name the backend of: treat its calls as blocking
            comm.stream = False
        self.by_group[group] = comm
        if group is None:
            self.by_group[g] = comm
        return comm
