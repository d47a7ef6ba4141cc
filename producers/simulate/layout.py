"""Rank placement and communicators of a simulated 3D-parallel job.

Global rank order puts TP fastest: ``rank = ((dp*CP + cp)*PP + pp)*TP + tp`` (CP sits
between PP and DP). Ranks fill nodes in order: ``node = rank // gpus_per_node``, named
``node-00``, ``node-01``, ...

Communicators, one kind per parallel dimension of size > 1, each identified by a stable
64-bit id (blake2b of ``job/kind/index``) and a name ``{kind}{index}``:

- ``tp``: ranks sharing (dp, cp, pp); index = (dp*CP + cp)*PP + pp
- ``cp``: ranks sharing (dp, pp, tp); index = (dp*PP + pp)*TP + tp
- ``pp``: one per pipeline, ranks sharing (dp, cp, tp); index = (dp*CP + cp)*TP + tp;
  comm rank = stage; send/recv between neighbouring stages
- ``dp``: ranks sharing (cp, pp, tp); index = (cp*PP + pp)*TP + tp
- ``ep``: expert-parallel blocks of ``ep`` consecutive dp positions sharing (cp, pp, tp);
  index = ((dp//EP*CP + cp)*PP + pp)*TP + tp

>>> lay = Layout("j", tp=2, pp=2, dp=2)
>>> lay.world_size, lay.n_nodes, [c.name for c in lay.comms][:3]
(8, 1, ['tp0', 'tp1', 'tp2'])
>>> lay.comm_by_name("dp1").members.tolist()
[1, 5]
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

KINDS = ("tp", "pp", "dp", "cp", "ep")


@dataclass(frozen=True)
class Comm:
    index: int  # global communicator index in Layout.comms
    kind: str
    group: int  # index within its kind
    id: int  # 64-bit communicator id
    members: np.ndarray  # global ranks in comm-rank order

    @property
    def name(self) -> str:
        return f"{self.kind}{self.group}"

    @property
    def hex(self) -> str:
        return f"{self.id:016x}"


def comm_id(job: str, kind: str, group: int) -> int:
    digest = hashlib.blake2b(f"{job}/{kind}/{group}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") or 1


def node_name(node: int) -> str:
    return f"node-{node:02d}"


class Layout:
    """Rank grid of shape (DP, CP, PP, TP) and every communicator of the job."""

    def __init__(self, job: str, tp: int, pp: int, dp: int, cp: int = 1, ep: int = 1, gpus_per_node: int = 8):
        for name, v in (("tp", tp), ("pp", pp), ("dp", dp), ("cp", cp), ("ep", ep), ("gpus_per_node", gpus_per_node)):
            if int(v) < 1:
                raise ValueError(f"{name} must be >= 1, got {v}")
        if dp % ep:
            raise ValueError(f"ep ({ep}) must divide dp ({dp})")
        self.job = job
        self.tp, self.pp, self.dp, self.cp, self.ep = tp, pp, dp, cp, ep
        self.gpus_per_node = gpus_per_node
        self.shape = (dp, cp, pp, tp)
        self.world_size = dp * cp * pp * tp
        self.grid = np.arange(self.world_size, dtype=np.int64).reshape(self.shape)
        self.n_nodes = -(-self.world_size // gpus_per_node)
        self.node_of_rank = np.arange(self.world_size) // gpus_per_node
        self.node_names = [node_name(n) for n in range(self.n_nodes)]
        d, c, p, t = np.indices(self.shape)
        self.coords = {"tp": t.ravel(), "pp": p.ravel(), "dp": d.ravel(), "cp": c.ravel(),
                       "ep": (d % ep).ravel()}
        self.kinds = [k for k in KINDS if self.size(k) > 1]
        self.comms: list[Comm] = []
        self.kind_base: dict[str, int] = {}
        # per kind: comm index / comm rank of every global rank
        self.comm_of_rank: dict[str, np.ndarray] = {}
        self.crank_of_rank: dict[str, np.ndarray] = {}
        for kind in self.kinds:
            groups = self.groups(kind)
            self.kind_base[kind] = len(self.comms)
            cidx = np.empty(self.world_size, dtype=np.int64)
            crank = np.empty(self.world_size, dtype=np.int32)
            for g, members in enumerate(groups):
                index = len(self.comms)
                self.comms.append(Comm(index, kind, g, comm_id(job, kind, g), members))
                cidx[members] = index
                crank[members] = np.arange(len(members))
            self.comm_of_rank[kind] = cidx
            self.crank_of_rank[kind] = crank
        self.comm_ids = np.array([c.id for c in self.comms], dtype=np.uint64)
        self.comm_nodes = np.array([len(np.unique(self.node_of_rank[c.members])) for c in self.comms],
                                   dtype=np.uint32)
        self._by_name = {c.name: c for c in self.comms}
        self._by_hex = {c.hex: c for c in self.comms}

    def size(self, kind: str) -> int:
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp, "cp": self.cp, "ep": self.ep}[kind]

    def groups(self, kind: str) -> np.ndarray:
        """(n_groups, size) global ranks, comm-rank order along axis 1."""
        g = self.grid
        if kind == "tp":
            return g.reshape(-1, self.tp)
        if kind == "pp":
            return np.moveaxis(g, 2, -1).reshape(-1, self.pp)
        if kind == "cp":
            return np.moveaxis(g, 1, -1).reshape(-1, self.cp)
        if kind == "dp":
            return np.moveaxis(g, 0, -1).reshape(-1, self.dp)
        if kind == "ep":
            g5 = g.reshape(self.dp // self.ep, self.ep, self.cp, self.pp, self.tp)
            return np.moveaxis(g5, 1, -1).reshape(-1, self.ep)
        raise ValueError(f"unknown communicator kind {kind!r}")

    def comm_by_name(self, name: str) -> Comm:
        """A communicator by name (``tp3``, ``dp0``) or by its 16-hex id."""
        comm = self._by_name.get(name) or self._by_hex.get(name.lower())
        if comm is None:
            known = ", ".join(f"{k}0..{k}{len(self.groups(k)) - 1}" for k in self.kinds)
            raise ValueError(f"no communicator {name!r} in this layout (known: {known}, or a 16-hex id)")
        return comm

    def node_index(self, name: str) -> int:
        try:
            return self.node_names.index(name)
        except ValueError:
            raise ValueError(f"no node {name!r} (nodes are node-00..{self.node_names[-1]})") from None

    def ranks_of_node(self, node: int) -> list[int]:
        lo = node * self.gpus_per_node
        return list(range(lo, min(lo + self.gpus_per_node, self.world_size)))

    def node_comms(self) -> list[list[tuple[int, list[int]]]]:
        """Per node: (comm index, local ranks in that comm) for every comm the node takes part in,
        by kind (in `kinds` order), then comm index; ranks ascending."""
        out: list[list[tuple[int, list[int]]]] = [[] for _ in range(self.n_nodes)]
        if not self.kinds:
            return out
        K, R = len(self.kinds), self.world_size
        rank = np.tile(np.arange(R), K)
        kind = np.repeat(np.arange(K), R)
        comm = np.concatenate([self.comm_of_rank[k] for k in self.kinds])
        node = self.node_of_rank[rank]
        order = np.lexsort((rank, comm, kind, node))
        comm, node, rank = comm[order], node[order], rank[order].tolist()
        starts = np.flatnonzero(np.diff(comm, prepend=-1) | np.diff(node, prepend=-1))
        bounds = np.append(starts, len(rank)).tolist()
        for n, c, a, b in zip(node[starts].tolist(), comm[starts].tolist(), bounds, bounds[1:]):
            out[n].append((c, rank[a:b]))
        return out

    def describe(self) -> dict:
        return {
            "world_size": self.world_size, "tp": self.tp, "pp": self.pp, "dp": self.dp, "cp": self.cp,
            "ep": self.ep, "gpus_per_node": self.gpus_per_node, "nodes": self.node_names,
            "rank_order": "rank = ((dp*CP + cp)*PP + pp)*TP + tp; node = rank // gpus_per_node",
            "comms": {c.name: {"id": c.hex, "ranks": c.members.tolist()} for c in self.comms},
        }
