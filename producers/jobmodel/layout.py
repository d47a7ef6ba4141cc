"""Where each rank sits and which communicators it belongs to.

Global rank, by `order` (innermost first, as Megatron's `--order` names it):

- ``tp-pp-dp`` (the default): dp * (PP * TP) + pp * TP + tp: a replica's stages are
  neighbours, so a node holds whole pipelines where TP x PP divides its GPUs;
- ``tp-dp-pp`` (Megatron-core's own default order): pp * (DP * TP) + dp * TP + tp: a
  stage's replicas are neighbours, so a node holds several data-parallel replicas of one
  stage, and a slow node makes part of each of its data-parallel comms slow.

Tensor-parallel peers are neighbours either way, so a TP group lives inside one node when
TP divides the GPUs per node. Groups:

- ``tp``: ranks of one (dp, pp) position, size TP (all-reduce between compute chunks);
- ``pp``: ranks of one (dp, tp) position across the stages, size PP (send/recv between
  neighbour stages; comm rank = stage);
- ``dp``: ranks of one (pp, tp) position across the replicas, size DP (gradient reduce);
- ``emb``: first and last stage of one (dp, tp) position, size 2 (tied embeddings);
- ``mp``: every TP x PP rank of one replica (the gradient-norm all-reduce).

Groups of one rank are left out. A communicator's id is the first 8 bytes (little-endian) of blake2b over the job, the
group's name and its ranks, so it is the same on every member and differs between jobs.

>>> lay = Layout("j", tp=2, pp=2, dp=2)
>>> lay.rank_of(tp=1, pp=1, dp=1), lay.coords(7)
(7, (1, 1, 1))
>>> [g.name for g in lay.groups_of(5)]
['tp.d1.p0', 'pp.d1.t1', 'dp.p0.t1', 'emb.d1.t1', 'mp.d1']
>>> lay = Layout("j", tp=2, pp=2, dp=4, order="tp-dp-pp")
>>> lay.coords(5), lay.group(5, "dp").members
((1, 0, 2), (1, 3, 5, 7))
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Group:
    """One communicator: its kind, a readable name, its members (global ranks, in comm-rank order)."""

    kind: str
    name: str
    members: tuple[int, ...]
    id: int

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def hex(self) -> str:
        return f"{self.id:016x}"

    def comm_rank(self, rank: int) -> int:
        return self.members.index(rank)


def comm_id(job: str, name: str, members: tuple[int, ...]) -> int:
    text = f"{job}|{name}|{','.join(map(str, members))}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


ORDERS = ("tp-pp-dp", "tp-dp-pp")


class Layout:
    """TP x PP x DP ranks on nodes of ``gpus_per_node`` GPUs, and their communicators."""

    def __init__(self, job: str, tp: int, pp: int, dp: int, gpus_per_node: int = 8, order: str = "tp-pp-dp"):
        if order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
        self.stage_outer = order == "tp-dp-pp"
        for name, v in (("tp", tp), ("pp", pp), ("dp", dp), ("gpus_per_node", gpus_per_node)):
            if v < 1:
                raise ValueError(f"{name} must be >= 1, got {v}")
        self.job, self.tp, self.pp, self.dp, self.gpus_per_node = job, tp, pp, dp, gpus_per_node
        self.world = tp * pp * dp
        self.n_nodes = -(-self.world // gpus_per_node)
        self.node_names = [f"{job}-node-{i:02d}" for i in range(self.n_nodes)]
        self.groups: list[Group] = []
        self._of_rank: list[dict[str, Group]] = [{} for _ in range(self.world)]
        for d in range(dp):
            for p in range(pp):
                self._add("tp", f"tp.d{d}.p{p}", [self.rank_of(t, p, d) for t in range(tp)])
            for t in range(tp):
                self._add("pp", f"pp.d{d}.t{t}", [self.rank_of(t, p, d) for p in range(pp)])
        for p in range(pp):
            for t in range(tp):
                self._add("dp", f"dp.p{p}.t{t}", [self.rank_of(t, p, d) for d in range(dp)])
        if pp > 1:
            for d in range(dp):
                for t in range(tp):
                    self._add("emb", f"emb.d{d}.t{t}", [self.rank_of(t, 0, d), self.rank_of(t, pp - 1, d)])
        if tp * pp > 1:
            for d in range(dp):
                self._add("mp", f"mp.d{d}", [self.rank_of(t, p, d) for p in range(pp) for t in range(tp)])
        self.by_name = {g.name: g for g in self.groups}

    def _add(self, kind: str, name: str, members: list[int]) -> None:
        if len(members) < 2:
            return  # a group of one rank communicates with nobody
        g = Group(kind, name, tuple(members), comm_id(self.job, name, tuple(members)))
        self.groups.append(g)
        for r in members:
            self._of_rank[r][kind] = g

    def rank_of(self, tp: int, pp: int, dp: int) -> int:
        if self.stage_outer:
            return pp * (self.dp * self.tp) + dp * self.tp + tp
        return dp * (self.pp * self.tp) + pp * self.tp + tp

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(tp, pp, dp) of a global rank."""
        if self.stage_outer:
            return rank % self.tp, rank // (self.tp * self.dp), (rank // self.tp) % self.dp
        return rank % self.tp, (rank // self.tp) % self.pp, rank // (self.tp * self.pp)

    def stage(self, rank: int) -> int:
        return self.coords(rank)[1]

    def group(self, rank: int, kind: str) -> Group | None:
        return self._of_rank[rank].get(kind)

    def groups_of(self, rank: int) -> list[Group]:
        return list(self._of_rank[rank].values())

    def node_of(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def node_name(self, rank: int) -> str:
        return self.node_names[self.node_of(rank)]

    def ranks_of_node(self, node: int) -> list[int]:
        lo = node * self.gpus_per_node
        return list(range(lo, min(lo + self.gpus_per_node, self.world)))

    def nodes_of(self, group: Group) -> list[int]:
        return sorted({self.node_of(r) for r in group.members})

    def stage_ranks(self, stage: int) -> list[int]:
        return [r for r in range(self.world) if self.stage(r) == stage]

    def node_array(self) -> np.ndarray:
        return np.arange(self.world) // self.gpus_per_node
